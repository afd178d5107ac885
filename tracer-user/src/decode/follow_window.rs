//! Which Pods' writes can belong to a creation podtrace follows.
//!
//! podtrace follows a Pod from its create to the write that reports it
//! Running. A Pod created before the agent started began its creation
//! unseen, and one created longer ago than the trace timeout has had its
//! trace ended: no write of either makes a span. Most Pod writes of a
//! running cluster are such (status updates of Pods long up), so the decode
//! stage skips them before decoding them, and the correlate stage decides
//! from the Pods it decoded; both ask one window, so they agree — in a
//! replay too, whose window starts at the first event either stage sees
//! (the decode stage's, which sees every event first).

use std::sync::{Arc, OnceLock};

use crate::capture::clock::WallClock;

/// A Pod created this long before the agent's start still counts as
/// created after it: `creationTimestamp` is whole seconds of the
/// apiserver's clock, which may differ a little from this node's.
const CREATED_BEFORE_START_SLACK_NS: u64 = 5_000_000_000;

/// The creation times whose Pods may be followed. Clones share the start.
#[derive(Clone, Debug)]
pub struct FollowWindow {
    clock: WallClock,
    /// The agent's start (unix ns); a replay's is its first event's.
    since_unix_ns: Arc<OnceLock<u64>>,
    trace_timeout_ns: u64,
}

impl FollowWindow {
    /// A live agent's window starts when it does (`since_unix_ns`); a
    /// replay's (`None`) at its first event ([`Self::start_by`]).
    pub fn new(clock: WallClock, since_unix_ns: Option<u64>, trace_timeout_ns: u64) -> Self {
        let since = OnceLock::new();
        if let Some(since_unix_ns) = since_unix_ns {
            let _ = since.set(since_unix_ns);
        }
        Self {
            clock,
            since_unix_ns: Arc::new(since),
            trace_timeout_ns,
        }
    }

    /// How long after its create a Pod's trace is exported as incomplete.
    pub fn trace_timeout_ns(&self) -> u64 {
        self.trace_timeout_ns
    }

    /// Event time reached `now_ns` (CLOCK_MONOTONIC): the first time seen,
    /// by this window or a clone, starts a window that had no start.
    pub fn start_by(&self, now_ns: u64) {
        if self.since_unix_ns.get().is_none() {
            let _ = self.since_unix_ns.set(self.clock.unix_ns(now_ns));
        }
    }

    /// Whether a Pod created at `created_unix_s` can be in a creation that
    /// is followed at `now_ns` (CLOCK_MONOTONIC).
    pub fn may_follow(&self, created_unix_s: i64, now_ns: u64) -> bool {
        if self.since_unix_ns.get().is_none() {
            return true;
        }
        !self.created_before_start(created_unix_s)
            && unix_ns(created_unix_s).saturating_add(self.trace_timeout_ns)
                >= self.clock.unix_ns(now_ns)
    }

    /// Whether a Pod created at `created_unix_s` began its creation before
    /// the agent started: nothing of it is traced, its deletion neither
    /// (its sandbox, its kubelet's addition were not seen).
    pub fn created_before_start(&self, created_unix_s: i64) -> bool {
        self.since_unix_ns.get().is_some_and(|&since| {
            unix_ns(created_unix_s).saturating_add(CREATED_BEFORE_START_SLACK_NS) < since
        })
    }
}

/// Unix seconds as unix ns; before 1970 counts as 1970.
fn unix_ns(unix_s: i64) -> u64 {
    u64::try_from(unix_s)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_created_before_the_start_or_past_the_timeout_are_not_followed() {
        // Monotonic 0 is unix 1000 s; the agent starts at monotonic 100 s.
        let clock = WallClock::from_offset(1_000_000_000_000);
        let window = FollowWindow::new(clock, None, 300_000_000_000);
        let clone = window.clone();
        assert!(
            window.may_follow(0, 0),
            "no start yet: anything may be followed"
        );
        // The first event seen by either (the decode stage's) starts both.
        clone.start_by(100_000_000_000);
        window.start_by(200_000_000_000);
        let at = |s: u64| s * 1_000_000_000;
        assert!(window.may_follow(1096, at(100)), "within the clock slack");
        assert!(
            !window.may_follow(1090, at(100)),
            "created before the start"
        );
        assert!(window.may_follow(1150, at(400)));
        assert!(!window.may_follow(1150, at(500)), "past the trace timeout");
        assert!(!window.may_follow(-1, at(100)));
        assert!(window.created_before_start(1090));
        assert!(!window.created_before_start(1096));
        assert!(
            !window.created_before_start(1150),
            "past the timeout, yet created after the start"
        );
    }
}
