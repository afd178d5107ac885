//! What user space hands to the programs before load, and what it stores in
//! the target map.

use crate::impl_pod;

/// Byte offsets of the kernel struct fields the programs read.
///
/// Rust eBPF objects carry no CO-RE relocations, so these come from
/// `/sys/kernel/btf/vmlinux` at load time (tracer-user `capture::kernel_btf`).
/// Field names follow the kernel's: `task_struct.tgid` is `task_tgid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `task_struct.pid` (`pid_t`): the thread id.
    pub task_pid: u32,
    /// `task_struct.tgid` (`pid_t`): the process id.
    pub task_tgid: u32,
    /// `task_struct.real_parent` (`struct task_struct *`).
    pub task_real_parent: u32,
    /// `task_struct.mm` (`struct mm_struct *`).
    pub task_mm: u32,
    /// `task_struct.exit_code` (`int`), wait(2)-style status.
    pub task_exit_code: u32,
    /// `task_struct.signal` (`struct signal_struct *`).
    pub task_signal: u32,
    /// `signal_struct.live` (`atomic_t`): threads still alive in the group.
    pub signal_live: u32,
    /// `mm_struct.arg_start` (`unsigned long`), inside its anonymous struct.
    pub mm_arg_start: u32,
    /// `mm_struct.arg_end` (`unsigned long`).
    pub mm_arg_end: u32,
    /// `mm_struct.env_start` (`unsigned long`).
    pub mm_env_start: u32,
    /// `mm_struct.env_end` (`unsigned long`).
    pub mm_env_end: u32,
    /// `linux_binprm.filename` (`const char *`).
    pub binprm_filename: u32,
}

/// The read-only global `CONFIG` of the eBPF object.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Kernel struct offsets from BTF.
    pub offsets: KernelOffsets,
    /// How many generations below a named target are still followed: 1 follows
    /// children only. Keeps a busy container's process tree from flooding the
    /// ring buffer while still reaching shim → runc → runc init → workload.
    pub max_descendant_depth: u32,
    /// The agent's own tgid, never followed (podtrace may exec helpers).
    pub agent_tgid: u32,
    /// Payload bytes copied per syscall, at most `io::DATA_BYTES_MAX`.
    pub data_bytes: u32,
    /// The record that takes the bytes waiting in the ring buffer past a
    /// multiple of this wakes the reader; the others are written without a
    /// wakeup (an irq_work on the traced thread's CPU, paid per record
    /// otherwise), and user space drains on a timer as well
    /// ([`RING_DRAIN_INTERVAL_MS`]).
    pub wakeup_bytes: u32,
}

impl Config {
    /// All zero: the value compiled into the object, replaced before load.
    pub const UNSET: Config = Config {
        offsets: KernelOffsets {
            task_pid: 0,
            task_tgid: 0,
            task_real_parent: 0,
            task_mm: 0,
            task_exit_code: 0,
            task_signal: 0,
            signal_live: 0,
            mm_arg_start: 0,
            mm_arg_end: 0,
            mm_env_start: 0,
            mm_env_end: 0,
            binprm_filename: 0,
        },
        max_descendant_depth: 0,
        agent_tgid: 0,
        data_bytes: 0,
        wakeup_bytes: 0,
    };
}

const _: () = assert!(size_of::<KernelOffsets>() == 48);
const _: () = assert!(size_of::<Config>() == 64);

/// Why a process is in the target map. Stored as `u8` in [`TargetInfo`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetReason {
    /// User space found it by executable when scanning /proc.
    Discovered = 0,
    /// The kernel saw it exec a binary whose name is in `TARGET_COMMS`.
    Named = 1,
    /// Its parent was a target when it forked.
    Descendant = 2,
}

impl TryFrom<u8> for TargetReason {
    type Error = u8;
    fn try_from(value: u8) -> Result<Self, u8> {
        match value {
            0 => Ok(TargetReason::Discovered),
            1 => Ok(TargetReason::Named),
            2 => Ok(TargetReason::Descendant),
            other => Err(other),
        }
    }
}

/// Value of the `TARGETS` map, keyed by tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetInfo {
    /// Generations below the nearest named or discovered ancestor (0 for it).
    pub depth: u8,
    /// A [`TargetReason`].
    pub reason: u8,
    /// `TARGET_*` bits: what else is captured for this target.
    pub flags: u8,
    /// Explicit padding, zero.
    pub _pad: u8,
}

impl TargetInfo {
    /// Whether the syscall programs follow the process's sockets and files:
    /// a component itself (not a process it started), and not one followed
    /// for its lifecycle only. What `IO_PROCESSES` holds for each process.
    #[inline(always)]
    pub fn does_io(&self) -> bool {
        self.depth == 0 && self.flags & TARGET_LIFECYCLE_ONLY == 0
    }
}

/// `TargetInfo::flags` bit, also the `TARGET_COMMS` value for such names:
/// follow the process's write-ahead-log files (etcd).
pub const TARGET_WAL: u8 = 1 << 0;
/// `TargetInfo::flags` bit: the per-call TLS probes of the process's
/// executable are detached, so the syscall programs copy the ciphertext of
/// its TLS sockets whose direction is not keyed too (a connection idle
/// until now that starts to talk: the decode stage asks for the probes).
pub const TARGET_TLS_CALLS_DETACHED: u8 = 1 << 1;
/// `TargetInfo::flags` bit, also the `TARGET_COMMS` value for such names:
/// follow the process's life only (exec, fork, exit), none of its sockets
/// or files. runc and the shims: their spans come from their lifecycle, and
/// they make over 40 % of a Pod start's syscalls.
pub const TARGET_LIFECYCLE_ONLY: u8 = 1 << 2;

/// Tgids per entry of the `IO_PROCESSES` map (one byte each): a page, so
/// that user space can map the entries and set one byte without rewriting
/// its neighbours, which the kernel side may be setting at the same time.
pub const IO_PROCESSES_PER_ENTRY: u32 = 4096;
/// The largest `pid_max` a kernel allows (`PID_MAX_LIMIT` on 64-bit): the
/// `IO_PROCESSES` map's size when the node's own cannot be read.
pub const PID_MAX_LIMIT: u32 = 4 << 20;

/// etcd's executable name (and comm): the target whose WAL files podtrace
/// follows and whose `--name` names the member in WAL spans.
pub const ETCD_EXECUTABLE: &str = "etcd";

const _: () = assert!(size_of::<TargetInfo>() == 4);

/// Capacity of the `TARGETS` map. A node runs a few dozen target binaries;
/// the rest is room for their descendants (runc, CNI plugins, container inits).
pub const MAX_TARGETS: u32 = 16_384;
/// Capacity of the `TARGET_COMMS` map.
pub const MAX_TARGET_COMMS: u32 = 64;
/// Slots of the `PROBE_HITS` map: one per attached uprobe (entry or RET).
pub const MAX_PROBE_SLOTS: u32 = 4096;
/// Length of a task's comm, NUL included (`TASK_COMM_LEN`).
pub const COMM_BYTES: usize = 16;
/// Default ring buffer size; must be a power of two and a multiple of the page size.
/// Sized for the bursts a control plane makes, not its average: 20 `kubectl
/// create` run at once against Kubernetes 1.33 each fetch the OpenAPI v3
/// document for client-side validation, and the apiserver's per-call TLS
/// probes copied ~9 MB of its answers in one second; 4 MiB dropped 400–8000
/// records in every such burst (its Pods' traces lost their roots), 16 MiB
/// none. Kernel memory charged to the agent's cgroup (5.11 on).
pub const DEFAULT_RING_BUFFER_BYTES: u32 = 16 << 20;
/// How often user space drains the ring buffer without a wakeup, in ms: the
/// most a record waits when fewer than [`Config::wakeup_bytes`] are pending.
pub const RING_DRAIN_INTERVAL_MS: u64 = 20;
/// [`Config::wakeup_bytes`] as a fraction of the ring buffer: a wakeup each
/// time another 1/16 of it is pending, leaving room for what arrives before
/// the reader runs ...
pub const WAKEUP_FRACTION: u32 = 16;
/// ... and at most this many bytes apart: a larger ring is room for bursts,
/// not a reason to let records wait longer in it (what they were with the
/// 4 MiB ring, whose 1/16 this is).
pub const MAX_WAKEUP_BYTES: u32 = 256 << 10;
/// Default for [`Config::max_descendant_depth`].
pub const DEFAULT_MAX_DESCENDANT_DEPTH: u32 = 4;

impl_pod!(KernelOffsets, Config, TargetInfo);
