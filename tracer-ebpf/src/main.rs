//! podtrace's kernel side: small, bounded programs that copy facts into a ring
//! buffer and parse nothing that user space can parse.
//!
//! In: kernel events (the `sched_process_{fork,exec,exit}` and
//! `sys_enter`/`sys_exit` raw tracepoints, uprobes on Go functions), the
//! `CONFIG` global and the maps user space writes (`TARGET_COMMS` before
//! attach; `IO_PROCESSES`, `MUTED_CONNS`, … as it learns). Out:
//! `tracer_common::event` and `tracer_common::io` records in the `EVENTS`
//! ring buffer, the `TARGETS` map of followed processes and `IO_PROCESSES`
//! (those whose sockets and files are followed), and per-CPU `DROPS`
//! counters.
//!
//! Module boundaries: [`maps`] declares every map and global, [`kernel_read`]
//! is the only module that reads kernel or user memory; [`lifecycle`] holds
//! the process programs, [`io`] the syscall ones, [`go_probes`],
//! [`func_probes`] and [`hpack_table`] the uprobes.
//!
//! The real build targets `bpfel-unknown-none`. A host build (for `cargo
//! clippy --workspace`) compiles the same code into a binary that only says
//! where the object comes from.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// The BPF target's `core` has no read-modify-write atomic methods; the
// intrinsic gives LLVM's `atomicrmw` (a BPF_ATOMIC instruction). The eBPF
// build runs with RUSTC_BOOTSTRAP for `-Z build-std=core` (xtask/src/setup.rs).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

mod func_probes;
mod go_probes;
mod hpack_table;
mod io;
mod kernel_read;
mod lifecycle;
mod maps;
mod record;
mod tls_keys;

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier rejects a program with a reachable call to this
    // function (it loops forever), so no loaded program can get here.
    unsafe { core::hint::unreachable_unchecked() }
}

#[cfg(not(target_arch = "bpf"))]
fn main() {
    eprintln!(
        "tracer-ebpf holds eBPF programs; it is built for bpfel-unknown-none by tracer-user's build.rs"
    );
    std::process::exit(2);
}
