//! The agent's CPU priority, as its backlog asks.
//!
//! Asked to (`--nice N`), the agent runs its decoding at a nice value above
//! the components it traces: on a busy node it decodes in CPU time they
//! leave idle instead of preempting them when it wakes. The ring
//! buffer's reader is not among those threads: it keeps the priority the
//! agent was started with, so the kernel's ring buffer is drained promptly
//! and the backlog waits in the agent's channel to the decode stage, where
//! it is measured. Where the node stays saturated the decode stage's share
//! can be too small; so when a drain finds the ring buffer a quarter full,
//! or the channel a quarter full, the decoding threads go back to nice 0
//! until the backlog has stayed small for a while. Going back needs
//! CAP_SYS_NICE (root has it; the DaemonSet, where nice orders the agent's
//! threads only within its own cgroup, does not): refused, it is said once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI32, Ordering},
    },
    time::{Duration, Instant},
};

/// A drain of this share of the ring buffer, or a channel this share full,
/// means the agent is falling behind.
const BEHIND_SHARE: usize = 4;
/// Below this share of both counts as caught up.
const CAUGHT_UP_SHARE: usize = 16;
/// How long the backlog must stay small before the agent yields again.
const CAUGHT_UP_FOR: Duration = Duration::from_secs(2);

/// How far behind the agent is, seen by the ring buffer's reader after a
/// drain.
#[derive(Clone, Copy, Debug)]
pub struct Backlog {
    /// Bytes the drain took out of the ring buffer.
    pub drained_bytes: usize,
    /// Batches waiting for the decode stage, and how many the channel holds.
    pub queued_batches: usize,
    pub channel_batches: usize,
}

/// The priority the agent's decoding threads run at, changed as the
/// backlog asks.
#[derive(Debug)]
pub struct Priority {
    /// The nice value asked for (`--nice`).
    calm: i32,
    ring_bytes: usize,
    /// The nice value a runtime thread starting now takes.
    runtime_nice: Arc<AtomicI32>,
    /// At nice 0 because the backlog grew.
    keeping_up: bool,
    /// Since when the backlog was small while keeping up.
    caught_up_since: Option<Instant>,
    /// Going back to nice 0 was refused (said once).
    refused: bool,
    /// Sets the nice value of the decoding threads (in the unit test, only
    /// its own, to leave the other tests' threads alone).
    set_threads: fn(i32) -> std::io::Result<()>,
}

impl Priority {
    /// `calm`: the nice value to decode at; `ring_bytes`: the ring buffer's
    /// size.
    pub fn new(calm: i32, ring_bytes: u32) -> Self {
        Self {
            calm,
            ring_bytes: ring_bytes as usize,
            runtime_nice: Arc::new(AtomicI32::new(calm)),
            keeping_up: false,
            caught_up_since: None,
            refused: false,
            set_threads: set_runtime_threads,
        }
    }

    /// Whether the decoding threads run below the agent's start priority.
    pub fn yields(&self) -> bool {
        self.calm > 0
    }

    /// For the runtime's `on_thread_start`: each of its threads (workers,
    /// blocking pool) takes the nice value of the moment. The thread that
    /// builds the runtime, and the ring buffer's reader it starts later,
    /// keep the priority the agent was started with. Lowering the priority
    /// needs no privilege; a refusal is a warning (once), as it changes what
    /// the agent costs, not what it sees. At 0 the threads are left alone.
    pub fn on_thread_start(&self) -> impl Fn() + Send + Sync + 'static {
        let nice = Arc::clone(&self.runtime_nice);
        let warned = AtomicBool::new(false);
        move || {
            let nice = nice.load(Ordering::Relaxed);
            if nice == 0 {
                return;
            }
            if let Err(error) = set_thread_nice(0, nice) {
                if !warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        nice,
                        %error,
                        "could not set the agent's CPU priority (--nice); it decodes at the one it was started with"
                    );
                }
            }
        }
    }

    /// The reader saw `backlog` at `now`.
    pub fn after_drain(&mut self, backlog: Backlog, now: Instant) {
        if !self.yields() || self.refused {
            return;
        }
        let channel = backlog.channel_batches.max(1);
        if !self.keeping_up {
            if backlog.drained_bytes >= self.ring_bytes / BEHIND_SHARE
                || backlog.queued_batches >= channel / BEHIND_SHARE
            {
                self.runtime_nice.store(0, Ordering::Relaxed);
                match (self.set_threads)(0) {
                    Ok(()) => {
                        self.keeping_up = true;
                        self.caught_up_since = None;
                        tracing::info!(
                            drained_bytes = backlog.drained_bytes,
                            queued_batches = backlog.queued_batches,
                            "decoding falling behind: the agent takes an equal CPU share until it has caught up"
                        );
                    }
                    Err(error) => {
                        self.refused = true;
                        self.runtime_nice.store(self.calm, Ordering::Relaxed);
                        tracing::warn!(
                            nice = self.calm,
                            %error,
                            "decoding falling behind, and the agent may not raise its CPU priority again (needs CAP_SYS_NICE): where it shares a cgroup with busy components, expect ring_buffer_full drops on a saturated node, or run with --nice 0; in its own container the CPU request sets its share"
                        );
                    }
                }
            }
            return;
        }
        if backlog.drained_bytes >= self.ring_bytes / CAUGHT_UP_SHARE
            || backlog.queued_batches >= channel / CAUGHT_UP_SHARE
        {
            self.caught_up_since = None;
            return;
        }
        let since = *self.caught_up_since.get_or_insert(now);
        if now.duration_since(since) >= CAUGHT_UP_FOR {
            self.runtime_nice.store(self.calm, Ordering::Relaxed);
            if let Err(error) = (self.set_threads)(self.calm) {
                tracing::warn!(nice = self.calm, %error, "could not lower the agent's CPU priority again");
            }
            self.keeping_up = false;
            self.caught_up_since = None;
            tracing::info!(
                nice = self.calm,
                "decoding caught up: the agent yields CPU again"
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

/// Sets every thread of the agent to `nice` but the main thread and the
/// calling one (the ring buffer's reader), which keep the priority the agent
/// was started with; threads that ended meanwhile are skipped.
fn set_runtime_threads(nice: i32) -> std::io::Result<()> {
    let main = std::process::id();
    // SAFETY: gettid has no preconditions.
    let reader = unsafe { libc::gettid() } as u32;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
            .filter(|tid| *tid != main && *tid != reader)
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

    fn backlog(drained_bytes: usize, queued_batches: usize) -> Backlog {
        Backlog {
            drained_bytes,
            queued_batches,
            channel_batches: 64,
        }
    }

    #[test]
    fn a_growing_backlog_raises_the_priority_and_a_calm_one_lowers_it_again() {
        // In a thread of its own, which alone has its nice value changed.
        std::thread::spawn(|| {
            let mut priority = Priority {
                set_threads: |nice| set_thread_nice(0, nice),
                ..Priority::new(5, 4096)
            };
            priority.on_thread_start()();
            assert_eq!(nice(), 5);
            let start = Instant::now();
            priority.after_drain(backlog(100, 2), start);
            assert_eq!(nice(), 5, "a small backlog changes nothing");
            priority.after_drain(backlog(1024, 0), start);
            if priority.refused {
                // Without CAP_SYS_NICE: said, and left at the calm value.
                assert_eq!(nice(), 5);
                return;
            }
            assert_eq!(nice(), 0, "a quarter of the ring in one drain");
            assert_eq!(
                priority.runtime_nice.load(Ordering::Relaxed),
                0,
                "threads starting now keep up too"
            );
            priority.after_drain(backlog(10, 0), start + Duration::from_secs(1));
            priority.after_drain(backlog(10, 0), start + Duration::from_secs(2));
            assert_eq!(nice(), 0, "not calm for long enough yet");
            priority.after_drain(backlog(10, 0), start + Duration::from_secs(4));
            assert_eq!(nice(), 5);
            priority.after_drain(backlog(10, 16), start + Duration::from_secs(5));
            assert_eq!(nice(), 0, "a quarter of the channel to decode waiting");
            priority.after_drain(backlog(10, 4), start + Duration::from_secs(6));
            priority.after_drain(backlog(10, 4), start + Duration::from_secs(9));
            assert_eq!(nice(), 0, "a sixteenth of the channel is not caught up");
            priority.after_drain(backlog(10, 3), start + Duration::from_secs(10));
            priority.after_drain(backlog(10, 3), start + Duration::from_secs(12));
            assert_eq!(nice(), 5);
        })
        .join()
        .unwrap_or_else(|_| panic!("the test thread panicked"));
    }
}
