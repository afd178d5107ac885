//! Built-in alerting for users without Prometheus: `--alert 'PHASE>DURATION'`
//! thresholds on the same phases the metrics measure; a span over its
//! threshold is logged as a warning and, with `--alert-webhook URL`, POSTed
//! as JSON (the Pod, the phase, the duration, the threshold, the trace id).
//!
//! In: finished spans. Out: [`Alert`]s.

use crate::correlate::contract::attr;

use std::time::Duration;

use super::metrics::Phase;
use crate::correlate::Span;

/// One threshold: a phase and the duration over which it alerts.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// The phase (`pod_start` names the end-to-end phase).
    pub phase: Phase,
    /// Alert above this.
    pub limit: Duration,
}

impl std::str::FromStr for Threshold {
    type Err = String;

    /// `PHASE>DURATION`, e.g. `pod_start>5s`, `wal_fsync>10ms`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, limit) = text
            .split_once('>')
            .ok_or_else(|| format!("{text}: write PHASE>DURATION, e.g. pod_start>5s"))?;
        let name = name.trim();
        let phase = Phase::ALL
            .into_iter()
            .find(|phase| {
                phase.name() == name || (name == "pod_start" && *phase == Phase::EndToEnd)
            })
            .ok_or_else(|| {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                format!("{name}: not a phase (pod_start, {})", names.join(", "))
            })?;
        let limit = limit.trim();
        let (number, unit) = limit
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .map_or((limit, ""), |at| limit.split_at(at));
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{limit}: not a duration like 5s, 250ms or 1.5s"))?;
        let seconds = match unit {
            "s" => value,
            "ms" => value / 1e3,
            "us" | "µs" => value / 1e6,
            "m" => value * 60.0,
            _ => return Err(format!("{limit}: give a unit: ms, s or m")),
        };
        let limit = Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("{limit}: not a duration podtrace can wait"))?;
        Ok(Self { phase, limit })
    }
}

/// A phase of one Pod over its threshold.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Alert {
    /// The phase's name.
    pub phase: &'static str,
    /// How long it took.
    pub seconds: f64,
    /// The threshold.
    pub threshold_seconds: f64,
    /// `k8s.namespace.name`, if the span carries it.
    pub namespace: Option<String>,
    /// `k8s.pod.name`, if the span carries it.
    pub pod: Option<String>,
    /// The trace to look at.
    pub trace_id: String,
}

/// The alerts `spans` raise against `thresholds`.
pub fn check(thresholds: &[Threshold], spans: &[Span]) -> Vec<Alert> {
    let mut alerts = Vec::new();
    for span in spans {
        let Some((phase, seconds)) = Phase::of(span) else {
            continue;
        };
        for threshold in thresholds.iter().filter(|t| t.phase == phase) {
            if seconds > threshold.limit.as_secs_f64() {
                alerts.push(Alert {
                    phase: phase.name(),
                    seconds,
                    threshold_seconds: threshold.limit.as_secs_f64(),
                    namespace: span
                        .string_attribute(attr::K8S_NAMESPACE_NAME)
                        .map(str::to_owned),
                    pod: span.string_attribute(attr::K8S_POD_NAME).map(str::to_owned),
                    trace_id: span.trace_id.to_hex(),
                });
            }
        }
    }
    alerts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::contract::name;
    use crate::correlate::span::SpanKey;
    use crate::correlate::span::{AttributeValue, SpanId, SpanKind, SpanStatus, TraceId};

    #[test]
    fn thresholds_parse_with_units_and_refuse_nonsense() {
        let t: Threshold = "pod_start>5s".parse().unwrap();
        assert_eq!(
            (t.phase, t.limit),
            (Phase::EndToEnd, Duration::from_secs(5))
        );
        let t: Threshold = "wal_fsync>10ms".parse().unwrap();
        assert_eq!(
            (t.phase, t.limit),
            (Phase::WalFsync, Duration::from_millis(10))
        );
        for bad in [
            "pod_start",
            "nope>5s",
            "pod_start>5",
            "pod_start>fast",
            "pod_start>-1s",
        ] {
            assert!(bad.parse::<Threshold>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_slow_pod_start_alerts_with_its_pod_and_trace() {
        let trace = TraceId::for_pod("c", "uid");
        let root = Span {
            trace_id: trace,
            span_id: SpanId::of(trace, &SpanKey::Root),
            parent_span_id: None,
            name: name::pod_create("default", "web"),
            kind: SpanKind::Internal,
            start_unix_ns: 0,
            end_unix_ns: 6_000_000_000,
            attributes: vec![
                (
                    attr::K8S_POD_NAME.into(),
                    AttributeValue::String("web".into()),
                ),
                (
                    attr::K8S_NAMESPACE_NAME.into(),
                    AttributeValue::String("default".into()),
                ),
                (attr::TRACE_COMPLETE.into(), AttributeValue::Bool(true)),
            ],
            status: SpanStatus::Unset,
            links: Vec::new(),
        };
        let thresholds = [
            "pod_start>5s".parse().unwrap(),
            "sandbox>1s".parse().unwrap(),
        ];
        let alerts = check(&thresholds, std::slice::from_ref(&root));
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert_eq!(alerts[0].pod.as_deref(), Some("web"));
        assert_eq!(alerts[0].trace_id, trace.to_hex());
        let fast = Span {
            end_unix_ns: 1_000_000_000,
            ..root
        };
        assert!(check(&thresholds, &[fast]).is_empty());
    }
}
