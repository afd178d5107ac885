//! What the stages lost or left out, as data: each stage lists its counts
//! ([`crate::decode::Decoder::losses`], [`crate::correlate::Correlator::losses`]),
//! and `/metrics` exposes them as `podtrace_losses_total{stage,reason}` while
//! the agent runs (a DaemonSet's agent never exits to log them).

/// One count of a stage, a total since start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The stage that counted it: `decode` or `correlate`.
    pub stage: &'static str,
    /// What was lost, in snake case (a metric label).
    pub reason: &'static str,
    /// How many, since start.
    pub count: u64,
}

impl Loss {
    /// A decode stage count.
    pub const fn decode(reason: &'static str, count: u64) -> Self {
        Self {
            stage: "decode",
            reason,
            count,
        }
    }

    /// A correlate stage count.
    pub const fn correlate(reason: &'static str, count: u64) -> Self {
        Self {
            stage: "correlate",
            reason,
            count,
        }
    }
}

/// Logs what a stage lost, at its end: every count above zero as
/// `reason=count`, in one warning — the values `/metrics` exposes as
/// `podtrace_losses_total{stage,reason}` (deploy/README.md says what each
/// counts). Nothing when nothing was lost.
pub fn log_losses(losses: &[Loss]) {
    let Some(stage) = losses.first().map(|loss| loss.stage) else {
        return;
    };
    let lost: Vec<String> = losses
        .iter()
        .filter(|loss| loss.count > 0)
        .map(|loss| format!("{}={}", loss.reason, loss.count))
        .collect();
    if !lost.is_empty() {
        tracing::warn!(
            stage,
            "lost (podtrace_losses_total, see deploy/README.md): {}",
            lost.join(" ")
        );
    }
}
