//! Records the programs write into the `EVENTS` ring buffer.
//!
//! Every record starts with an [`EventHeader`] whose `kind` says which struct
//! follows. Records are `#[repr(C)]` with explicit padding; sizes are asserted
//! at compile time so both sides agree. Variable-length fields are fixed arrays
//! with a length: user space reads only `[..len]`.

use crate::{config::COMM_BYTES, impl_pod};

/// Bytes of the exec'd filename kept (NUL included).
pub const FILENAME_BYTES: usize = 256;
/// Bytes of the NUL-separated argument area kept. A power of two: the kernel
/// side masks lengths with `ARGS_BYTES - 1` to satisfy the verifier.
pub const ARGS_BYTES: usize = 2048;

const _: () = assert!(ARGS_BYTES.is_power_of_two());
const _: () = assert!(FILENAME_BYTES.is_power_of_two());

/// Which record follows the header. Stored as `u32` in [`EventHeader::kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// [`ExecEvent`]
    Exec = 1,
    /// [`ForkEvent`]
    Fork = 2,
    /// [`ExitEvent`]
    Exit = 3,
    /// [`crate::io::DataEvent`] followed by its bytes.
    Data = 4,
    /// [`crate::io::ConnEvent`]
    Conn = 5,
    /// [`crate::io::FsyncEvent`]
    Fsync = 6,
    /// [`crate::io::FileOpenEvent`]
    FileOpen = 7,
    /// [`crate::io::HeaderEvent`]
    Header = 8,
    /// [`crate::gofunc::GoFuncEvent`]
    GoFunc = 9,
    /// [`crate::io::HpackEntryEvent`]
    HpackEntry = 10,
    /// [`crate::io::HpackTableEvent`]
    HpackTable = 11,
    /// [`crate::io::WalHeadEvent`] (made by user space)
    WalHead = 12,
    /// [`crate::io::TlsKeyEvent`]
    TlsKey = 13,
    /// [`CniExecEvent`]
    CniExec = 14,
}

impl TryFrom<u32> for EventKind {
    type Error = u32;
    fn try_from(value: u32) -> Result<Self, u32> {
        match value {
            1 => Ok(EventKind::Exec),
            2 => Ok(EventKind::Fork),
            3 => Ok(EventKind::Exit),
            4 => Ok(EventKind::Data),
            5 => Ok(EventKind::Conn),
            6 => Ok(EventKind::Fsync),
            7 => Ok(EventKind::FileOpen),
            8 => Ok(EventKind::Header),
            9 => Ok(EventKind::GoFunc),
            10 => Ok(EventKind::HpackEntry),
            11 => Ok(EventKind::HpackTable),
            12 => Ok(EventKind::WalHead),
            13 => Ok(EventKind::TlsKey),
            14 => Ok(EventKind::CniExec),
            other => Err(other),
        }
    }
}

/// Common start of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// An [`EventKind`].
    pub kind: u32,
    /// Process (thread group) id of the process the event is about.
    pub tgid: u32,
    /// Thread id of the process the event is about.
    pub tid: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
}

/// `ExecEvent::flags` bit: the filename was cut to [`FILENAME_BYTES`].
pub const EXEC_FILENAME_TRUNCATED: u16 = 1 << 0;
/// `ExecEvent::flags` bit: the argument area was cut to [`ARGS_BYTES`].
pub const EXEC_ARGS_TRUNCATED: u16 = 1 << 1;

/// A target process replaced its image (`sched_process_exec`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecEvent {
    /// `kind` = [`EventKind::Exec`].
    pub header: EventHeader,
    /// cgroup v2 id of the process (`bpf_get_current_cgroup_id`).
    pub cgroup_id: u64,
    /// tgid of the parent (`real_parent`).
    pub ppid: u32,
    /// A `TargetReason`: why the process is followed.
    pub target_reason: u8,
    /// Generations below the nearest named ancestor.
    pub depth: u8,
    /// `EXEC_*` bits.
    pub flags: u16,
    /// Valid bytes of `filename` (without the NUL).
    pub filename_len: u16,
    /// Valid bytes of `args`.
    pub args_len: u16,
    /// Explicit padding, zero.
    pub _pad: u32,
    /// The task's comm after exec, NUL padded.
    pub comm: [u8; COMM_BYTES],
    /// Path given to execve, as the kernel resolved it (`linux_binprm.filename`).
    pub filename: [u8; FILENAME_BYTES],
    /// Start of the argument area: argv strings, each NUL terminated.
    pub args: [u8; ARGS_BYTES],
}

/// A target process created a new process (`sched_process_fork`, threads excluded).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForkEvent {
    /// `kind` = [`EventKind::Fork`]; `tgid`/`tid` are the child's.
    pub header: EventHeader,
    /// cgroup v2 id the child starts in (its parent's).
    pub cgroup_id: u64,
    /// tgid of the parent.
    pub parent_tgid: u32,
    /// Thread of the parent that forked.
    pub parent_tid: u32,
    /// Depth the child is followed at.
    pub depth: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 7],
    /// The parent's comm, which the child inherits.
    pub comm: [u8; COMM_BYTES],
}

/// The last thread of a target process exited (`sched_process_exit`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitEvent {
    /// `kind` = [`EventKind::Exit`].
    pub header: EventHeader,
    /// cgroup v2 id at exit.
    pub cgroup_id: u64,
    /// `task_struct.exit_code`: wait(2) status (`code << 8` or the signal number).
    pub exit_code: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
    /// The exiting task's comm.
    pub comm: [u8; COMM_BYTES],
}

/// Room for a CNI container id and its NUL: containerd's are 64 hex digits.
pub const CNI_CONTAINER_ID_BYTES: usize = 128;

/// A followed process that is not a component itself was started with
/// `CNI_CONTAINERID` in its environment: a CNI plugin, which the runtime
/// (containerd) runs with the id of the sandbox it works for, or a program
/// such a plugin ran. Sent right after the process's [`ExecEvent`]; the
/// only value of an environment that leaves the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CniExecEvent {
    /// `kind` = [`EventKind::CniExec`].
    pub header: EventHeader,
    /// Bytes `bpf_probe_read_user_str` copied into `container_id`, its NUL
    /// included: [`CNI_CONTAINER_ID_BYTES`] means the value may be cut.
    pub copied: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
    /// The value of `CNI_CONTAINERID`, NUL terminated.
    pub container_id: [u8; CNI_CONTAINER_ID_BYTES],
}

const _: () = assert!(size_of::<EventHeader>() == 24);
const _: () = assert!(size_of::<CniExecEvent>() == 24 + 8 + CNI_CONTAINER_ID_BYTES);
const _: () = assert!(
    size_of::<ExecEvent>() == 24 + 8 + 4 + 4 + 4 + 4 + COMM_BYTES + FILENAME_BYTES + ARGS_BYTES
);
const _: () = assert!(size_of::<ForkEvent>() == 24 + 8 + 8 + 8 + COMM_BYTES);
const _: () = assert!(size_of::<ExitEvent>() == 24 + 8 + 8 + COMM_BYTES);

impl_pod!(EventHeader, ExecEvent, ForkEvent, ExitEvent, CniExecEvent);
