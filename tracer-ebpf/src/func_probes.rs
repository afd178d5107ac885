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
        GO_FUNC_DISABLED, GO_FUNC_GATE, GO_FUNC_GATE_BYTES, GO_FUNC_GATED, GO_FUNC_PATH_STEPS,
        GO_FUNC_STRING_BYTES, GO_FUNC_STRINGS, GO_FUNC_WORDS, GO_STRING_IN_MEMORY,
        GO_STRING_IN_REGISTERS, GO_STRING_TRUNCATED, GO_STRING_UNREADABLE, GoFuncEvent, GoFuncSpec,
        GoStringPath, GoroutineKey,
    },
};

use crate::{
    go_probes::{attach_cookie, component_ids, go_abi},
    kernel_read::{read_user, read_user_bytes},
    maps::{BPF_RB_NO_WAKEUP, EVENTS, GO_FUNC_GATES, GO_FUNCS, count_drop, submit_flags},
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
    let g = go_abi::current_g(ctx);
    let goid = read_user::<u64>(g + u64::from(spec.goid_offset)).unwrap_or(0);
    let parent_goid = if spec.parent_goid_offset == 0 {
        0
    } else {
        read_user::<u64>(g + u64::from(spec.parent_goid_offset)).unwrap_or(0)
    };
    if spec.flags & GO_FUNC_GATED != 0 && !gate_passed(ids.tgid, goid, parent_goid) {
        return Ok(());
    }
    let mut entry = EVENTS
        .reserve::<GoFuncEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
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
    if spec.flags & GO_FUNC_GATE != 0 {
        // One constant index per arm: a variable one makes the verifier
        // place the string anywhere in the event.
        // SAFETY: as above.
        let opens = unsafe {
            match spec.gate_string {
                0 => gate_opens(spec, &(*event).strings[0], lens[0]),
                1 => gate_opens(spec, &(*event).strings[1], lens[1]),
                2 => gate_opens(spec, &(*event).strings[2], lens[2]),
                _ => false,
            }
        };
        if !opens {
            entry.discard(BPF_RB_NO_WAKEUP);
            return Ok(());
        }
        let key = GoroutineKey {
            tgid: ids.tgid,
            _pad: 0,
            goid,
        };
        // A full LRU map evicts its oldest: an insert cannot fail for room.
        let _ = GO_FUNC_GATES.insert(key, 1, 0);
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

/// Whether a gate let the request of goroutine `goid`, or of the goroutine
/// that created it, through. A goroutine let through by its creator's is
/// noted too: the goroutines it creates in turn (a validating webhook's
/// call, the apiserver's third generation of a request) are let through.
#[inline(always)]
fn gate_passed(tgid: u32, goid: u64, parent_goid: u64) -> bool {
    let key = |goid| GoroutineKey {
        tgid,
        _pad: 0,
        goid,
    };
    // SAFETY: the values are only tested for presence.
    if goid != 0 && unsafe { GO_FUNC_GATES.get(key(goid)) }.is_some() {
        return true;
    }
    // SAFETY: as above.
    if parent_goid == 0 || unsafe { GO_FUNC_GATES.get(key(parent_goid)) }.is_none() {
        return false;
    }
    // A full LRU map evicts its oldest: an insert cannot fail for room.
    let _ = GO_FUNC_GATES.insert(key(goid), 1, 0);
    true
}

/// Whether `string` (its first `len` bytes copied) holds the spec's gate
/// needle followed by `/`, `?` or the string's end: a path segment. The
/// last bytes seen are kept in one word and compared with the needle's, so
/// that the verifier follows one state a byte, not one per partial match.
/// Not inlined: verified once for each of the three strings it may read.
#[inline(never)]
fn gate_opens(spec: &GoFuncSpec, string: &[u8; GO_FUNC_STRING_BYTES], len: u16) -> bool {
    let needle_len = spec.gate_len as usize;
    if needle_len == 0 || needle_len > GO_FUNC_GATE_BYTES {
        return false;
    }
    let mut needle = 0u64;
    let mut i = 0;
    while i < GO_FUNC_GATE_BYTES {
        if i < needle_len {
            needle = (needle << 8) | u64::from(spec.gate_needle[i]);
        }
        i += 1;
    }
    let mask = if needle_len == GO_FUNC_GATE_BYTES {
        u64::MAX
    } else {
        (1u64 << (needle_len * 8)) - 1
    };
    let len = (len as usize).min(GO_FUNC_STRING_BYTES);
    let mut window = 0u64;
    let mut ends_with_needle = false;
    let mut at = 0;
    while at < GO_FUNC_STRING_BYTES {
        if at >= len {
            break;
        }
        let byte = string[at];
        if ends_with_needle && (byte == b'/' || byte == b'?') {
            return true;
        }
        window = (window << 8) | u64::from(byte);
        ends_with_needle = at + 1 >= needle_len && window & mask == needle;
        at += 1;
    }
    // The string's end (or the end of what was copied of it).
    ends_with_needle
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
