//! Every map and global of the object. Names match `tracer_common::names`;
//! the loader looks them up by those constants and fails loudly on a mismatch.

use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use tracer_common::{
    config::{
        COMM_BYTES, Config, DEFAULT_RING_BUFFER_BYTES, MAX_PROBE_SLOTS, MAX_TARGET_COMMS,
        MAX_TARGETS, TargetInfo,
    },
    drop_reason::DropReason,
};

/// Records for user space. User space may resize it before load.
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BUFFER_BYTES, 0);

/// Per-CPU drop counters, one slot per `DropReason`.
#[map]
pub(crate) static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DropReason::COUNT, 0);

/// tgid → why and how deep the process is followed.
#[map]
pub(crate) static TARGETS: HashMap<u32, TargetInfo> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// comm → 1 for executable names that make a process a target at exec.
#[map]
pub(crate) static TARGET_COMMS: HashMap<[u8; COMM_BYTES], u8> =
    HashMap::with_max_entries(MAX_TARGET_COMMS, 0);

/// Hits per attached uprobe, indexed by its attach cookie.
#[map]
pub(crate) static PROBE_HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_PROBE_SLOTS, 0);

/// Set by user space before load (`EbpfLoader::override_global`).
#[unsafe(no_mangle)]
static CONFIG: Config = Config::UNSET;

/// The configuration user space wrote. The volatile read keeps the compiler
/// from folding the all-zero initial value into the code.
#[inline(always)]
pub(crate) fn config() -> Config {
    // SAFETY: CONFIG is a plain-data static that nothing writes after load.
    unsafe { core::ptr::read_volatile(&raw const CONFIG) }
}

/// The target entry of `tgid`, if the process is followed. Every program asks
/// this first and returns at once for other processes.
#[inline(always)]
pub(crate) fn target_of(tgid: u32) -> Option<TargetInfo> {
    // SAFETY: the value is copied out immediately; a concurrent delete of the
    // entry cannot free memory the copy still points to.
    unsafe { TARGETS.get(tgid).copied() }
}

/// Adds one to the per-CPU counter of `reason`.
#[inline(always)]
pub(crate) fn count_drop(reason: DropReason) {
    if let Some(slot) = DROPS.get_ptr_mut(reason as u32) {
        // SAFETY: per-CPU slot, and programs do not nest on one CPU for these
        // tracepoints, so nothing else writes it concurrently.
        unsafe { *slot += 1 };
    }
}
