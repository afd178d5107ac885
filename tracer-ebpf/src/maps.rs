//! Every map and global of the object. Names match `tracer_common::names`;
//! the loader looks them up by those constants and fails loudly on a mismatch.

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
};
use tracer_common::{
    config::{
        COMM_BYTES, Config, DEFAULT_RING_BUFFER_BYTES, IO_PROCESSES_PER_ENTRY, MAX_PROBE_SLOTS,
        MAX_TARGET_COMMS, MAX_TARGETS, TargetInfo,
    },
    drop_reason::DropReason,
    gofunc::{GoFuncSpec, MAX_GO_FUNC_PROBES},
    io::{
        ActiveCall, DATA_BYTES_MAX, DataEvent, FdInfo, FdKey, GoCallKey, GoHpackCoders, GoTlsConn,
        GoTlsConnKey, GoTlsOffsets, GoTlsRead, HpackSync, IoSyscall, MAX_ACTIVE_CALLS,
        MAX_GO_BINARIES, MAX_GO_TLS_CONNS, MAX_GO_TLS_READS, MAX_HPACK_SYNCS, MAX_MUTED_CONNS,
        MAX_TRACKED_FDS, ProcessConnKey,
    },
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

/// One byte per tgid, nonzero for a process whose sockets and files the
/// syscall programs follow: what `sys_enter` and `sys_exit` ask before
/// anything else, for every syscall of every process on the node. An array
/// element read is inlined by the verifier, where the hash lookups it spares
/// (`FDS` at enter, `ACTIVE_CALLS` at exit, the tail calls, the read of the
/// syscall number at exit) cost every process ~290 ns a syscall. User space
/// sizes it to `pid_max` and sets the components found at start.
#[map]
pub(crate) static IO_PROCESSES: Array<[u8; IO_PROCESSES_PER_ENTRY as usize]> =
    Array::with_max_entries(1, BPF_F_MMAPABLE);

/// comm → 1 for executable names that make a process a target at exec.
#[map]
pub(crate) static TARGET_COMMS: HashMap<[u8; COMM_BYTES], u8> =
    HashMap::with_max_entries(MAX_TARGET_COMMS, 0);

/// Hits per attached uprobe, indexed by its attach cookie.
#[map]
pub(crate) static PROBE_HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_PROBE_SLOTS, 0);

/// Sockets and files of targets that podtrace follows.
#[map]
pub(crate) static FDS: HashMap<FdKey, FdInfo> = HashMap::with_max_entries(MAX_TRACKED_FDS, 0);

/// Each hooked syscall's enter and exit programs (`IoSyscall::enter_slot`,
/// `exit_slot`), filled by user space before `sys_enter`/`sys_exit` attach.
#[map]
pub(crate) static SYSCALL_PROGRAMS: ProgramArray =
    ProgramArray::with_max_entries(2 * IoSyscall::ALL.len() as u32, 0);

/// Sets `bits` in an `FDS` value's `flags` with one atomic OR, so that two
/// CPUs marking the same socket at once (its two directions' first TLS
/// hits) cannot undo each other's bit. `flags` is the second byte of the
/// 8-byte word after `conn_id` (`kind`, `flags`, padding): BPF's atomics
/// take whole words.
#[inline(always)]
pub(crate) fn set_fd_flags(info: *mut FdInfo, bits: u8) {
    const _: () = assert!(core::mem::offset_of!(FdInfo, kind) == 8);
    const _: () = assert!(core::mem::offset_of!(FdInfo, flags) == 9);
    // SAFETY: `info` points to a map value (8-byte aligned) of
    // size_of::<FdInfo>() = 16 bytes; the word at offset 8 lies inside it.
    let word = unsafe { info.cast::<u64>().add(1) };
    let bits = u64::from(bits) << 8;
    #[cfg(target_arch = "bpf")]
    // SAFETY: as above; the kernel's BPF_ATOMIC OR on a map value.
    unsafe {
        core::intrinsics::atomic_or::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            word, bits,
        );
    }
    // Host builds (clippy, check) only: never loaded.
    #[cfg(not(target_arch = "bpf"))]
    // SAFETY: as above.
    unsafe {
        core::sync::atomic::AtomicU64::from_ptr(word)
            .fetch_or(bits, core::sync::atomic::Ordering::Relaxed);
    }
}

/// The hooked syscall each thread of a followed process is in, by pid_tgid
/// (`ActiveCall::pending`): a thread's entry is rewritten at each call and
/// removed when the thread exits.
#[map]
pub(crate) static ACTIVE_CALLS: HashMap<u64, ActiveCall> =
    HashMap::with_max_entries(MAX_ACTIVE_CALLS, 0);

/// Bytes of a per-CPU scratch record: the fixed data header, then room for
/// `DATA_BYTES_MAX` bytes written at any offset below `DATA_BYTES_MAX` (the
/// verifier checks each copy against the buffer's end, not against the total).
pub(crate) const SCRATCH_BYTES: usize = size_of::<DataEvent>() + 2 * DATA_BYTES_MAX;

/// Where data records are assembled before `bpf_ringbuf_output`: too large
/// for the 512-byte stack, and variable length, unlike a ring buffer reservation.
/// The exec program also steps through a new process's environment strings
/// here (`kernel_read::env_value`), outside any record.
#[map]
pub(crate) static SCRATCH: PerCpuArray<[u8; SCRATCH_BYTES]> = PerCpuArray::with_max_entries(1, 0);

/// Struct offsets per probed Go binary, indexed by the uprobes' attach cookie.
#[map]
pub(crate) static GO_BINARIES: Array<GoTlsOffsets> = Array::with_max_entries(MAX_GO_BINARIES, 0);

/// What each function probe attachment is, indexed by its attach cookie.
#[map]
pub(crate) static GO_FUNCS: Array<GoFuncSpec> = Array::with_max_entries(MAX_GO_FUNC_PROBES, 0);

/// `crypto/tls.(*Conn).Read` calls between entry and return, per goroutine.
#[map]
pub(crate) static GO_TLS_READS: HashMap<GoCallKey, GoTlsRead> =
    HashMap::with_max_entries(MAX_GO_TLS_READS, 0);

/// The socket each `*tls.Conn` was last resolved to, so that a TLS probe
/// hit costs one lookup here and one in `FDS` instead of walking the
/// `net.Conn` chain (up to ten user-memory reads and four `FDS` lookups
/// through etcd's cmux wrapper). LRU: connections are garbage-collected
/// without telling.
#[map]
pub(crate) static GO_TLS_CONNS: LruHashMap<GoTlsConnKey, GoTlsConn> =
    LruHashMap::with_max_entries(MAX_GO_TLS_CONNS, 0);

/// Connections whose HPACK tables user space asks for (`hpack_table`).
#[map]
pub(crate) static HPACK_SYNC: HashMap<ProcessConnKey, HpackSync> =
    HashMap::with_max_entries(MAX_HPACK_SYNCS, 0);

/// Entries in `HPACK_SYNC`, kept by user space: 0 spares the TLS probes the lookup.
#[map]
pub(crate) static HPACK_SYNC_COUNT: Array<u32> = Array::with_max_entries(1, 0);

/// Connections of targets whose bytes user space no longer wants: etcd client
/// connections that carry only one resource other than Pods (kube-apiserver
/// opens an etcd client per resource). Looked up before a socket's bytes are
/// copied; user space adds and removes the entries.
#[map]
pub(crate) static MUTED_CONNS: HashMap<ProcessConnKey, u8> =
    HashMap::with_max_entries(MAX_MUTED_CONNS, 0);

/// The HPACK decoder and encoder each goroutine last used, while user space
/// asks for tables. LRU: goroutines end without telling.
#[map]
pub(crate) static GO_HPACK_CODERS: LruHashMap<GoCallKey, GoHpackCoders> =
    LruHashMap::with_max_entries(MAX_GO_TLS_READS, 0);

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

/// Whether the syscall programs follow the sockets and files of `tgid`. A
/// tgid beyond the map (`pid_max` raised since start) counts as followed:
/// the programs' own checks then decide, as before the map existed.
#[inline(always)]
pub(crate) fn does_io(tgid: u32) -> bool {
    IO_PROCESSES
        .get(tgid / IO_PROCESSES_PER_ENTRY)
        .is_none_or(|entry| entry[(tgid % IO_PROCESSES_PER_ENTRY) as usize] != 0)
}

/// Marks whether `tgid`'s sockets and files are followed, from the target
/// entry it now has (`None`: not followed at all).
#[inline(always)]
pub(crate) fn set_does_io(tgid: u32, target: Option<TargetInfo>) {
    let value = target.is_some_and(|target| target.does_io());
    if let Some(entry) = IO_PROCESSES.get_ptr_mut(tgid / IO_PROCESSES_PER_ENTRY) {
        // SAFETY: the pointer is to a live map value; the index is below
        // its length. A byte store leaves the neighbours' bytes alone.
        unsafe {
            core::ptr::write_volatile(
                (entry as *mut u8).add((tgid % IO_PROCESSES_PER_ENTRY) as usize),
                u8::from(value),
            );
        }
    }
}

/// `bpf_ringbuf_*` flags: `BPF_RB_AVAIL_DATA` (query), `BPF_RB_NO_WAKEUP`,
/// `BPF_RB_FORCE_WAKEUP` (include/uapi/linux/bpf.h, v6.18).
const BPF_RB_AVAIL_DATA: u64 = 0;
/// Also what a discarded reservation is given: nothing new to read.
pub(crate) const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;

/// The flags to commit a reserved record of `len` bytes to `EVENTS` with
/// (the ring already counts it as pending): see [`wakeup_flags`].
#[inline(always)]
pub(crate) fn submit_flags(len: usize) -> u64 {
    let pending = EVENTS.query(BPF_RB_AVAIL_DATA);
    wakeup_flags(pending.saturating_sub(len as u64), pending)
}

/// The flags to output a record of `len` bytes to `EVENTS` with (the ring
/// does not count it yet): see [`wakeup_flags`].
#[inline(always)]
pub(crate) fn output_flags(len: usize) -> u64 {
    let pending = EVENTS.query(BPF_RB_AVAIL_DATA);
    wakeup_flags(pending, pending + len as u64)
}

/// A wakeup of the reader only for the record that takes the bytes waiting
/// past a multiple of `CONFIG.wakeup_bytes`. Each wakeup is an irq_work on
/// the traced thread's CPU, raised by a self-IPI (a VM exit under a
/// hypervisor): waking for every record while the reader is on its way, as
/// "pending ≥ threshold" did, made wakeups most of a record's cost under
/// load. Should two CPUs both miss a crossing, the next multiple wakes the
/// reader, and user space drains on a timer besides.
#[inline(always)]
fn wakeup_flags(pending_before: u64, pending_after: u64) -> u64 {
    let step = u64::from(config().wakeup_bytes).max(1);
    if pending_before / step == pending_after / step {
        BPF_RB_NO_WAKEUP
    } else {
        BPF_RB_FORCE_WAKEUP
    }
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
