//! Empty library target. It exists so that tracer-user can name this crate as
//! a build-dependency, which makes cargo rebuild the agent when the eBPF
//! programs (the `tracer-ebpf` binary) change.
#![no_std]
