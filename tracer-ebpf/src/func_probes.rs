//! `go_func`: one uprobe program for every probed Kubernetes function (entry
//! and RETs; see `tracer_common::gofunc`). It reports which function, the
//! goroutine and its creator, the nine integer ABI words, and the strings the
//! attachment's spec walks to — what spans need (a Pod UID, a storage key, a
//! user name), never request bodies or credentials. Interpreting the words is
//! user space's job; the kernel side knows nothing of Kubernetes.

use aya_ebpf::{macros::uprobe, programs::ProbeContext};
use tracer_common::{
    drop_reason::DropReason,
    event::EventKind,
    gofunc::{
        GO_FUNC_DISABLED, GO_FUNC_PATH_STEPS, GO_FUNC_STRING_BYTES, GO_FUNC_STRINGS, GO_FUNC_WORDS,
        GO_STRING_IN_MEMORY, GO_STRING_IN_REGISTERS, GO_STRING_TRUNCATED, GO_STRING_UNREADABLE,
        GoFuncEvent, GoStringPath,
    },
};

use crate::{
    go_probes::{attach_cookie, component_ids, go_abi},
    kernel_read::{read_user, read_user_bytes},
    maps::{EVENTS, GO_FUNCS, count_drop, submit_flags},
    record::{header, now_ns},
};

/// Entry or RET of a probed Kubernetes function.
#[uprobe]
fn go_func(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_go_func(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_go_func(ctx: &ProbeContext) -> Result<(), DropReason> {
    let cookie = attach_cookie(ctx);
    if go_abi::growing_stack(ctx, cookie) {
        return Ok(());
    }
    let Some(ids) = component_ids() else {
        return Ok(());
    };
    // A reference into the map value, not a copy: the string walks index its
    // offsets with a loop counter, which the verifier allows in map memory
    // but not on the stack.
    let spec = GO_FUNCS
        .get(cookie as u32)
        .ok_or(DropReason::ProbeSlotOutOfRange)?;
    if spec.flags & GO_FUNC_DISABLED != 0 {
        return Ok(());
    }
    let mut entry = EVENTS
        .reserve::<GoFuncEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    let g = go_abi::current_g(ctx);
    let goid = read_user::<u64>(g + u64::from(spec.goid_offset)).unwrap_or(0);
    let parent_goid = if spec.parent_goid_offset == 0 {
        0
    } else {
        read_user::<u64>(g + u64::from(spec.parent_goid_offset)).unwrap_or(0)
    };
    // The words go straight into the reservation: the string walks index
    // them with a bounded variable, which the verifier allows in ring buffer
    // memory but not on the stack or in the context.
    // SAFETY: the reservation holds a whole GoFuncEvent that only this
    // program owns until submit; every pointer below stays inside it.
    let words = unsafe { &raw mut (*event).words };
    let mut index = 0;
    while index < GO_FUNC_WORDS {
        // SAFETY: as above; index < GO_FUNC_WORDS.
        unsafe { (*words)[index] = go_abi::word(ctx, index) };
        index += 1;
    }
    let mut flags = 0u8;
    let mut lens = [0u16; GO_FUNC_STRINGS];
    let mut string = 0;
    while string < GO_FUNC_STRINGS {
        // SAFETY: as above.
        let dst = unsafe { (&raw mut (*event).strings[string]).cast::<u8>() };
        match copy_string(&spec.strings[string], words, dst) {
            Ok((len, truncated)) => {
                lens[string] = len;
                if truncated {
                    flags |= GO_STRING_TRUNCATED << string;
                }
            }
            Err(()) => flags |= GO_STRING_UNREADABLE << string,
        }
        string += 1;
    }
    // SAFETY: as above.
    unsafe {
        (*event).header = header(EventKind::GoFunc, now_ns(), ids);
        (*event).function = spec.function;
        (*event).at_return = spec.at_return;
        (*event).string_flags = flags;
        (*event).string_lens = lens;
        (*event).flags = spec.flags;
        (*event)._pad = [0; 5];
        (*event).goid = goid;
        (*event).parent_goid = parent_goid;
    }
    entry.submit(submit_flags(size_of::<GoFuncEvent>()));
    Ok(())
}

/// Follows `path` from the registers and copies the string it leads to into
/// `dst` (room for `GO_FUNC_STRING_BYTES`). Returns the bytes copied and
/// whether the string was longer; `Err` when a load on the way failed.
#[inline(always)]
fn copy_string(
    path: &GoStringPath,
    words: *const [u64; GO_FUNC_WORDS],
    dst: *mut u8,
) -> Result<(u16, bool), ()> {
    let word = path.word as usize;
    if word + 1 >= GO_FUNC_WORDS {
        return Err(());
    }
    // SAFETY: `words` points into the caller's reservation; word + 1 < GO_FUNC_WORDS.
    let (start, next) = unsafe { ((*words)[word], (*words)[word + 1]) };
    let (ptr, len) = match path.kind {
        GO_STRING_IN_REGISTERS => (start, next),
        GO_STRING_IN_MEMORY => {
            let mut at = start;
            let mut step = 0;
            while step < GO_FUNC_PATH_STEPS - 1 {
                if step >= path.loads as usize {
                    break;
                }
                if at == 0 {
                    return Err(());
                }
                at = read_user::<u64>(at + u64::from(path.offsets[step])).map_err(|_| ())?;
                step += 1;
            }
            if at == 0 {
                return Err(());
            }
            let header = at + u64::from(path.offsets[step % GO_FUNC_PATH_STEPS]);
            (
                read_user::<u64>(header).map_err(|_| ())?,
                read_user::<u64>(header + 8).map_err(|_| ())?,
            )
        }
        _ => return Ok((0, false)),
    };
    if len == 0 {
        return Ok((0, false));
    }
    let truncated = len > GO_FUNC_STRING_BYTES as u64;
    let size =
        (len.min(GO_FUNC_STRING_BYTES as u64) as u32) & (GO_FUNC_STRING_BYTES as u32 * 2 - 1);
    if size == 0 || size > GO_FUNC_STRING_BYTES as u32 {
        return Err(());
    }
    // SAFETY: dst has GO_FUNC_STRING_BYTES bytes and size is at most that.
    unsafe { read_user_bytes(dst, size, ptr) }.map_err(|_| ())?;
    Ok((size as u16, truncated))
}
