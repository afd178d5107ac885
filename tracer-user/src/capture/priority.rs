//! The agent's CPU priority, as the ring buffer's backlog asks.
//!
//! Asked to (`--nice N`), the agent runs at a nice value above the
//! components it traces: on a busy node it decodes in CPU time they leave
//! idle instead of preempting them when it wakes. Where the node stays
//! saturated that share can be too small, and the ring buffer would fill and
//! drop; so when a drain finds it a quarter full, every thread of the agent
//! goes back to nice 0 until the backlog has stayed small for a while. Going
//! back needs CAP_SYS_NICE (root has it; the DaemonSet, where nice orders the
//! agent only within its own cgroup anyway, does not): refused, it is said
//! once. The reaction comes at the next drain, when the agent runs again: a
//! debug build under the test suite's saturating load dropped events before
//! it, which is why the default is 0.

use std::time::{Duration, Instant};

/// A drain of this share of the ring buffer means the agent is falling behind.
const BEHIND_SHARE: usize = 4;
/// Drains below this share count as caught up.
const CAUGHT_UP_SHARE: usize = 16;
/// How long drains must stay small before the agent yields again.
const CAUGHT_UP_FOR: Duration = Duration::from_secs(2);

/// The priority the agent runs at, changed as the backlog asks.
#[derive(Debug)]
pub struct Priority {
    /// The nice value asked for (`--nice`).
    calm: i32,
    ring_bytes: usize,
    /// At nice 0 because the ring buffer filled.
    keeping_up: bool,
    /// Since when drains were small while keeping up.
    caught_up_since: Option<Instant>,
    /// Going back to nice 0 was refused (said once).
    refused: bool,
    /// Sets the nice value of the agent's threads (all of them; in the unit
    /// test, only its own, to leave the other tests' threads alone).
    set_threads: fn(i32) -> std::io::Result<()>,
}

impl Priority {
    /// `calm`: the nice value to run at; `ring_bytes`: the ring buffer's size.
    pub fn new(calm: i32, ring_bytes: u32) -> Self {
        Self {
            calm,
            ring_bytes: ring_bytes as usize,
            keeping_up: false,
            caught_up_since: None,
            refused: false,
            set_threads: set_all_threads,
        }
    }

    /// Sets the calling thread's nice value, which every thread it starts
    /// afterwards (the runtime's workers) inherits: Linux keeps a nice value
    /// per thread. Lowering the priority needs no privilege; a refusal is a
    /// warning, as it changes what the agent costs, not what it sees. At 0,
    /// the priority the agent was started with is left alone.
    pub fn apply(&self) {
        if self.calm == 0 {
            // Left as started.
            return;
        }
        if let Err(error) = set_thread_nice(0, self.calm) {
            tracing::warn!(
                nice = self.calm,
                %error,
                "could not set the agent's CPU priority (--nice); it runs at the one it was started with"
            );
        }
    }

    /// A drain took `bytes` out of the ring buffer at `now`.
    pub fn after_drain(&mut self, bytes: usize, now: Instant) {
        if self.calm <= 0 || self.refused {
            return;
        }
        if !self.keeping_up {
            if bytes >= self.ring_bytes / BEHIND_SHARE {
                match (self.set_threads)(0) {
                    Ok(()) => {
                        self.keeping_up = true;
                        self.caught_up_since = None;
                        tracing::info!(
                            drained_bytes = bytes,
                            "ring buffer filling: the agent takes an equal CPU share until it has caught up"
                        );
                    }
                    Err(error) => {
                        self.refused = true;
                        tracing::warn!(
                            nice = self.calm,
                            %error,
                            "ring buffer filling, and the agent may not raise its CPU priority again (needs CAP_SYS_NICE): expect ring_buffer_full drops on a saturated node, or run with --nice 0"
                        );
                    }
                }
            }
            return;
        }
        if bytes >= self.ring_bytes / CAUGHT_UP_SHARE {
            self.caught_up_since = None;
            return;
        }
        let since = *self.caught_up_since.get_or_insert(now);
        if now.duration_since(since) >= CAUGHT_UP_FOR {
            if let Err(error) = (self.set_threads)(self.calm) {
                tracing::warn!(nice = self.calm, %error, "could not lower the agent's CPU priority again");
            }
            self.keeping_up = false;
            self.caught_up_since = None;
            tracing::info!(
                nice = self.calm,
                "ring buffer caught up: the agent yields CPU again"
            );
        }
    }
}

/// Sets thread `tid`'s nice value (0: the calling thread).
fn set_thread_nice(tid: u32, nice: i32) -> std::io::Result<()> {
    // SAFETY: plain syscall wrapper; on Linux PRIO_PROCESS names one thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets every thread of the agent to `nice`; threads that ended meanwhile
/// are skipped.
fn set_all_threads(nice: i32) -> std::io::Result<()> {
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        match set_thread_nice(tid, nice) {
            Err(error) if error.raw_os_error() != Some(libc::ESRCH) => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's nice value.
    fn nice() -> i32 {
        // SAFETY: plain syscall wrapper. (-1 is also a valid value; errno
        // is not needed for the calling thread, which always exists.)
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    #[test]
    fn a_filling_ring_raises_the_priority_and_a_calm_one_lowers_it_again() {
        // In a thread of its own, which alone has its nice value changed.
        std::thread::spawn(|| {
            let mut priority = Priority {
                set_threads: |nice| set_thread_nice(0, nice),
                ..Priority::new(5, 4096)
            };
            priority.apply();
            assert_eq!(nice(), 5);
            let start = Instant::now();
            priority.after_drain(100, start);
            assert_eq!(nice(), 5, "a small drain changes nothing");
            priority.after_drain(1024, start);
            if priority.refused {
                // Without CAP_SYS_NICE: said, and left at the calm value.
                assert_eq!(nice(), 5);
                return;
            }
            assert_eq!(nice(), 0, "a quarter of the ring in one drain");
            priority.after_drain(10, start + Duration::from_secs(1));
            priority.after_drain(10, start + Duration::from_secs(2));
            assert_eq!(nice(), 0, "not calm for long enough yet");
            priority.after_drain(10, start + Duration::from_secs(4));
            assert_eq!(nice(), 5);
        })
        .join()
        .unwrap_or_else(|_| panic!("the test thread panicked"));
    }
}
