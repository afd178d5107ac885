//! Capture: the kernel side's data, owned and validated.
//!
//! In: the eBPF object (embedded), the running kernel's BTF, /proc. Out:
//! [`RawEvent`]s on a channel, and drop counters. Nothing here interprets
//! what a process is doing; that is for `decode` and `correlate`.

pub mod clock;
mod control;
pub mod go_probes;
mod hpack_probes;
mod io_processes;
pub mod kernel_btf;
pub mod kube_probes;
pub mod loader;
mod on_demand;
mod priority;
pub mod proc_fds;
pub mod recording;
pub mod ring;
pub mod targets;
pub(crate) mod uprobe_links;
pub mod uprobes;
pub mod wal_head;
pub mod wire;

pub use control::CaptureControl;
pub use hpack_probes::HpackControl;
pub use loader::{CaptureError, CaptureOptions, DropCounts, Probes};
pub use priority::Priority;
pub use wire::{
    CniExecRecord, ConnKey, ConnRecord, DataRecord, ExecRecord, ExitRecord, ExitStatus,
    FileOpenRecord, ForkRecord, FsyncRecord, GoFuncRecord, HeaderRecord, HpackEntryRecord,
    HpackTableRecord, Peer, ProcessIds, RawEvent, TlsKeyRecord, WalHeadRecord,
};
