//! What every record starts with: whose event it is, when, and of which kind.

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use tracer_common::event::{EventHeader, EventKind};

/// CLOCK_MONOTONIC now, in nanoseconds.
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// A process and one of its threads.
#[derive(Clone, Copy)]
pub(crate) struct Ids {
    pub(crate) tgid: u32,
    pub(crate) tid: u32,
}

impl Ids {
    /// Splits a `bpf_get_current_pid_tgid()` value.
    #[inline(always)]
    pub(crate) fn from_pid_tgid(pid_tgid: u64) -> Ids {
        Ids {
            tgid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
        }
    }

    /// The thread running the program.
    #[inline(always)]
    pub(crate) fn current() -> Ids {
        Ids::from_pid_tgid(bpf_get_current_pid_tgid())
    }
}

/// The header of a record about `ids`, seen at `ts_ns`.
#[inline(always)]
pub(crate) fn header(kind: EventKind, ts_ns: u64, ids: Ids) -> EventHeader {
    EventHeader {
        ts_ns,
        kind: kind as u32,
        tgid: ids.tgid,
        tid: ids.tid,
        _pad: 0,
    }
}
