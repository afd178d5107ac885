//! Names of the maps, globals and programs in the eBPF object, used by both
//! sides so a rename cannot silently break the loader.

/// Ring buffer carrying [`crate::event`] records to user space.
pub const MAP_EVENTS: &str = "EVENTS";
/// Per-CPU `u64` counters indexed by [`crate::drop_reason::DropReason`].
pub const MAP_DROPS: &str = "DROPS";
/// Hash map tgid → [`crate::config::TargetInfo`]: the processes podtrace follows.
pub const MAP_TARGETS: &str = "TARGETS";
/// Hash map comm (16 bytes, NUL padded) → `TARGET_*` flags: executable names
/// that make a process a target when it execs.
pub const MAP_TARGET_COMMS: &str = "TARGET_COMMS";
/// Array of `config::IO_PROCESSES_PER_ENTRY` bytes per entry, indexed by
/// tgid: nonzero for a process whose sockets and files the syscall programs
/// follow (a component; not runc, not a descendant). Memory-mapped by user
/// space, which sizes it to the node's `pid_max`.
pub const MAP_IO_PROCESSES: &str = "IO_PROCESSES";
/// Per-CPU `u64` hit counters of uprobes, indexed by the probe's attach cookie.
pub const MAP_PROBE_HITS: &str = "PROBE_HITS";
/// The uprobe program that only counts hits (`podtrace probe-check`).
pub const PROGRAM_GO_PROBE_HIT: &str = "go_probe_hit";
/// Hash map `io::FdKey` → `io::FdInfo`: sockets and files followed.
pub const MAP_FDS: &str = "FDS";
/// Program array: each hooked syscall's enter and exit programs, at
/// `io::IoSyscall::enter_slot`/`exit_slot`, tail-called from
/// [`PROGRAM_SYS_ENTER`] and [`PROGRAM_SYS_EXIT`].
pub const MAP_SYSCALL_PROGRAMS: &str = "SYSCALL_PROGRAMS";
/// Raw tracepoint `sys_enter`: every syscall enters it; the hooked ones go on
/// to their `sys_enter_NAME` program. Two attachments instead of one perf
/// event per syscall tracepoint: detaching each of those waits for RCU under
/// the kernel's event mutex, ~70 ms apiece in a VM, and made a stop take 2.5 s.
pub const PROGRAM_SYS_ENTER: &str = "sys_enter";
/// Raw tracepoint `sys_exit`, likewise to `sys_exit_NAME`.
pub const PROGRAM_SYS_EXIT: &str = "sys_exit";
/// Hash map pid_tgid → `io::ActiveCall`: syscalls between enter and exit.
pub const MAP_ACTIVE_CALLS: &str = "ACTIVE_CALLS";
/// Array index → `io::GoTlsOffsets`: per probed Go binary.
pub const MAP_GO_BINARIES: &str = "GO_BINARIES";
/// Hash map `io::GoCallKey` → `io::GoTlsRead`.
pub const MAP_GO_TLS_READS: &str = "GO_TLS_READS";
/// Uprobe at `crypto/tls.(*Conn).Write` (entry).
pub const PROGRAM_GO_TLS_WRITE: &str = "go_tls_write";
/// Uprobe at `crypto/tls.(*Conn).Read` (entry).
pub const PROGRAM_GO_TLS_READ: &str = "go_tls_read";
/// Uprobes at each RET of `crypto/tls.(*Conn).Read`.
pub const PROGRAM_GO_TLS_READ_RET: &str = "go_tls_read_ret";
/// Uprobe at the call to `runtime.memmove` inside `crypto/tls.(*Conn).Read`
/// that copies the plaintext out (instead of the entry and RET probes).
pub const PROGRAM_GO_TLS_READ_COPY: &str = "go_tls_read_copy";
/// Uprobe at `crypto/tls.(*halfConn).setTrafficSecret` (entry): a TLS 1.3
/// direction's new secret.
pub const PROGRAM_GO_TLS_SECRET: &str = "go_tls_secret";
/// Uprobe at `hpack.(*Encoder).WriteField` and `hpack.(*Decoder).callEmit`
/// (entry; the cookie is the `io::HeaderSide`).
pub const PROGRAM_GO_HPACK_FIELD: &str = "go_hpack_field";
/// Hash map `io::ProcessConnKey` → `io::HpackSync`: connections whose HPACK
/// tables user space asks for.
pub const MAP_HPACK_SYNC: &str = "HPACK_SYNC";
/// Hash map `io::ProcessConnKey` → `u8`: connections whose bytes nothing
/// podtrace traces can be about, so that the programs copy none of them.
pub const MAP_MUTED_CONNS: &str = "MUTED_CONNS";
/// Array of one `u32`: entries in `HPACK_SYNC` (the TLS probes skip the
/// lookup when it is 0).
pub const MAP_HPACK_SYNC_COUNT: &str = "HPACK_SYNC_COUNT";
/// LRU hash map `io::GoCallKey` → `io::GoHpackCoders`.
pub const MAP_GO_HPACK_CODERS: &str = "GO_HPACK_CODERS";
/// Array attach cookie → `gofunc::GoFuncSpec`: what each function probe is.
pub const MAP_GO_FUNCS: &str = "GO_FUNCS";
/// Uprobe at the entry and RETs of probed Kubernetes functions (the cookie
/// is the attachment's slot in `GO_FUNCS`).
pub const PROGRAM_GO_FUNC: &str = "go_func";
/// Read-only global holding [`crate::config::Config`].
pub const GLOBAL_CONFIG: &str = "CONFIG";

/// One raw tracepoint program of the process lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LifecycleProgram {
    /// Program (function) name in the object.
    pub program: &'static str,
    /// Raw tracepoint it attaches to.
    pub tracepoint: &'static str,
}

/// The lifecycle programs and where they attach; the loader walks this table.
pub const LIFECYCLE_PROGRAMS: [LifecycleProgram; 3] = [
    LifecycleProgram {
        program: "sched_process_fork",
        tracepoint: "sched_process_fork",
    },
    LifecycleProgram {
        program: "sched_process_exec",
        tracepoint: "sched_process_exec",
    },
    LifecycleProgram {
        program: "sched_process_exit",
        tracepoint: "sched_process_exit",
    },
];
