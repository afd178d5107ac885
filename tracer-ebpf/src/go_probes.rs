//! Uprobes on Go functions, attached by file offset at a function's entry and
//! at each of its RET instructions (never uretprobes: Go moves goroutine
//! stacks, and a rewritten return address crashes the program).
//!
//! Each attachment carries a cookie: its slot in `PROBE_HITS`. Counting hits
//! per slot tells an operator whether a probe on a given binary fires at all,
//! and how often, before anything depends on it.

use aya_ebpf::{
    EbpfContext as _, helpers::generated::bpf_get_attach_cookie, macros::uprobe,
    programs::ProbeContext,
};
use tracer_common::{config::MAX_PROBE_SLOTS, drop_reason::DropReason};

use crate::maps::{PROBE_HITS, count_drop};

/// Counts one hit of the attachment whose cookie is the slot.
#[uprobe]
fn go_probe_hit(ctx: ProbeContext) -> u32 {
    // SAFETY: the context pointer is the one the kernel passed to this program.
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    if slot >= u64::from(MAX_PROBE_SLOTS) {
        count_drop(DropReason::ProbeSlotOutOfRange);
        return 0;
    }
    if let Some(hits) = PROBE_HITS.get_ptr_mut(slot as u32) {
        // SAFETY: per-CPU slot; a uprobe program does not nest on one CPU.
        unsafe { *hits += 1 };
    }
    0
}
