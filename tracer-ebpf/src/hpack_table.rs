//! Copies of Go HPACK dynamic tables, for connections podtrace joined after
//! their tables were built.
//!
//! On such a connection a header block refers to table entries inserted
//! before podtrace started, which the wire decoder in user space never saw.
//! Rather than reporting every header field from a uprobe on each block for
//! the connection's lifetime, user space asks once (`HPACK_SYNC`) for the
//! tables themselves. The TLS probes (the syscall programs on a plain
//! connection or a TLS direction read from its secret: `io`) copy them at a
//! point whose place in the byte stream is known exactly (see
//! `tracer_common::io::HpackSync`), user space rebuilds its decoders from
//! the copies, and the HPACK uprobes can be detached.
//!
//! Layout read (golang.org/x/net/http2/hpack, unchanged since 2016, also in
//! the standard library's vendored copy): `Decoder` and `Encoder` both begin
//! with `dynTab dynamicTable{table headerFieldTable{ents []HeaderField;
//! evictCount uint64; byName, byNameValue map}; size, maxSize,
//! allowedMaxSize uint32}`; `ents` is oldest first; a `HeaderField` is
//! `{Name, Value string; Sensitive bool}`, 40 bytes.

use aya_ebpf::{cty::c_void, helpers::generated::bpf_loop};
use tracer_common::{
    drop_reason::DropReason,
    event::EventKind,
    io::{
        GoCallKey, HEADER_NAME_BYTES, HEADER_VALUE_BYTES, HPACK_ENTRY_WITHHELD,
        HPACK_SYNC_DECODER_DONE, HPACK_SYNC_ENCODER_DONE, HeaderSide, HpackEntryEvent,
        HpackTableEvent, MAX_HPACK_TABLE_ENTRIES, ProcessConnKey,
    },
};

use crate::{
    kernel_read::{read_user, read_user_bytes},
    maps::{
        BPF_RB_NO_WAKEUP, EVENTS, GO_HPACK_CODERS, HPACK_SYNC, HPACK_SYNC_COUNT, count_drop,
        submit_flags,
    },
    record::{Ids, header, now_ns},
};

/// `dynTab.table.ents` (slice data pointer, then length).
const ENTS: u64 = 0;
/// `dynTab.size`.
const SIZE: u64 = 48;
/// `dynTab.maxSize`.
const MAX_SIZE: u64 = 52;
/// `size_of::<hpack.HeaderField>()`.
const HEADER_FIELD_BYTES: u64 = 40;
/// RFC 7541 §4.1: what an entry costs beyond its name and value.
const ENTRY_OVERHEAD: u64 = 32;

/// Whether user space has asked for any table: the TLS probes' only cost
/// on connections that need nothing.
#[inline(always)]
pub(crate) fn sync_wanted() -> bool {
    HPACK_SYNC_COUNT.get(0).is_some_and(|count| *count > 0)
}

/// From an HPACK probe: the goroutine `g` is using `coder` as its `side`.
#[inline(always)]
pub(crate) fn note_coder(tgid: u32, g: u64, side: HeaderSide, coder: u64) {
    let key = GoCallKey { tgid, _pad: 0, g };
    match GO_HPACK_CODERS.get_ptr_mut(key) {
        // SAFETY: a map value this program may write; racing writers store
        // the same kind of value.
        Some(coders) => unsafe {
            match side {
                HeaderSide::Decoder => (*coders).decoder = coder,
                HeaderSide::Encoder => (*coders).encoder = coder,
            }
        },
        None => {
            let mut coders = tracer_common::io::GoHpackCoders::default();
            match side {
                HeaderSide::Decoder => coders.decoder = coder,
                HeaderSide::Encoder => coders.encoder = coder,
            }
            // An LRU map: a full one evicts the longest unused goroutine.
            let _ = GO_HPACK_CODERS.insert(key, coders, 0);
        }
    }
}

/// At a TLS read (`Decoder`) or write (`Encoder`) of `conn_id` by goroutine
/// `g`: copies the table user space asked for, once.
#[inline(always)]
pub(crate) fn copy_if_asked(ids: Ids, conn_id: u64, g: u64, side: HeaderSide) {
    let key = ProcessConnKey {
        tgid: ids.tgid,
        _pad: 0,
        conn_id,
    };
    let Some(sync) = HPACK_SYNC.get_ptr_mut(key) else {
        return;
    };
    let bit = match side {
        HeaderSide::Decoder => HPACK_SYNC_DECODER_DONE,
        HeaderSide::Encoder => HPACK_SYNC_ENCODER_DONE,
    };
    // SAFETY: a map value; a racing reader at worst copies the table twice.
    if unsafe { (*sync).done } & bit != 0 {
        return;
    }
    let coder_key = GoCallKey {
        tgid: ids.tgid,
        _pad: 0,
        g,
    };
    // SAFETY: copied out at once.
    let Some(coders) = (unsafe { GO_HPACK_CODERS.get(coder_key) }).copied() else {
        return;
    };
    let table = match side {
        HeaderSide::Decoder => coders.decoder,
        HeaderSide::Encoder => coders.encoder,
    };
    if table == 0 {
        return;
    }
    // SAFETY: as above.
    unsafe { (*sync).done |= bit };
    if let Err(reason) = copy_table(ids, conn_id, side, table) {
        count_drop(reason);
    }
}

/// What `copy_entry` needs; lives on `copy_table`'s stack.
#[repr(C)]
struct CopyContext {
    ents: u64,
    conn_id: u64,
    ts_ns: u64,
    tgid: u32,
    tid: u32,
    side: u8,
    failed: u8,
    _pad: [u8; 6],
}

#[inline(always)]
fn copy_table(ids: Ids, conn_id: u64, side: HeaderSide, table: u64) -> Result<(), DropReason> {
    let read_failed = |_| DropReason::ReadFailed;
    let ents = read_user::<u64>(table + ENTS).map_err(read_failed)?;
    let count = read_user::<u64>(table + ENTS + 8).map_err(read_failed)?;
    let size = read_user::<u32>(table + SIZE).map_err(read_failed)?;
    let max_size = read_user::<u32>(table + MAX_SIZE).map_err(read_failed)?;
    let mut context = CopyContext {
        ents,
        conn_id,
        ts_ns: now_ns(),
        tgid: ids.tgid,
        tid: ids.tid,
        side: side as u8,
        failed: 0,
        _pad: [0; 6],
    };
    if count > u64::from(MAX_HPACK_TABLE_ENTRIES) {
        // The closing record still goes: user space learns the copy is
        // refused and keeps the connection's header probes.
        count_drop(DropReason::HpackTableTooLarge);
    } else if count > 0 {
        // SAFETY: the callback is a BPF subprogram; the context outlives the
        // loop, which runs synchronously.
        unsafe {
            bpf_loop(
                count as u32,
                copy_entry as *mut c_void,
                (&raw mut context).cast::<c_void>(),
                0,
            )
        };
    }
    let mut entry = EVENTS
        .reserve::<HpackTableEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    // SAFETY: a reservation of size_of::<HpackTableEvent>() bytes that only
    // this program owns until submit.
    unsafe {
        (*event).header = header(EventKind::HpackTable, context.ts_ns, ids);
        (*event).conn_id = conn_id;
        // A copy that lost an entry says so by its count.
        (*event).count = if context.failed != 0 {
            u32::MAX
        } else {
            count as u32
        };
        (*event).size = size;
        (*event).max_size = max_size;
        (*event).side = side as u8;
        (*event)._pad = [0; 3];
    }
    entry.submit(submit_flags(size_of::<HpackTableEvent>()));
    Ok(())
}

/// `bpf_loop` callback: sends entry `index` of the table; 1 stops the loop.
#[inline(never)]
extern "C" fn copy_entry(index: u64, context: *mut c_void) -> i64 {
    // SAFETY: `copy_table` passes its own `CopyContext`.
    let context = unsafe { &mut *context.cast::<CopyContext>() };
    match copy_one(context, index) {
        Ok(()) => 0,
        Err(reason) => {
            count_drop(reason);
            context.failed = 1;
            1
        }
    }
}

#[inline(always)]
fn copy_one(context: &CopyContext, index: u64) -> Result<(), DropReason> {
    // name pointer, name length, value pointer, value length, sensitive.
    let field = read_user::<[u64; 5]>(context.ents + index * HEADER_FIELD_BYTES)
        .map_err(|_| DropReason::ReadFailed)?;
    let (name_ptr, name_len, value_ptr, value_len) = (field[0], field[1], field[2], field[3]);
    let mut entry = EVENTS
        .reserve::<HpackEntryEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    let mut kept = name_len > 0
        && name_len <= HEADER_NAME_BYTES as u64
        && value_len < HEADER_VALUE_BYTES as u64;
    let name_size = (name_len as u32) & (HEADER_NAME_BYTES as u32 - 1);
    let value_size = (value_len as u32) & (HEADER_VALUE_BYTES as u32 - 1);
    // SAFETY: a reservation of size_of::<HpackEntryEvent>() bytes that only
    // this program owns until submit; sizes are masked below the arrays'.
    unsafe {
        let name = (&raw mut (*event).name).cast::<u8>();
        kept = kept
            && read_user_bytes(name, name_size, name_ptr).is_ok()
            && wanted_header(&(*event).name, name_size);
        // Names podtrace does not keep (authorization, cookies, application
        // headers) leave only their size; their values are never read.
        let value = (&raw mut (*event).value).cast::<u8>();
        kept = kept && read_user_bytes(value, value_size, value_ptr).is_ok();
        (*event).header = header(
            EventKind::HpackEntry,
            context.ts_ns,
            Ids {
                tgid: context.tgid,
                tid: context.tid,
            },
        );
        (*event).conn_id = context.conn_id;
        (*event).index = index as u32;
        (*event).entry_size = name_len
            .saturating_add(value_len)
            .saturating_add(ENTRY_OVERHEAD)
            .min(u64::from(u32::MAX)) as u32;
        (*event).side = context.side;
        (*event).flags = if kept { 0 } else { HPACK_ENTRY_WITHHELD };
        (*event).name_len = if kept { name_size as u8 } else { 0 };
        (*event)._pad = 0;
        (*event).value_len = if kept { value_size as u16 } else { 0 };
        (*event)._pad2 = [0; 2];
    }
    entry.submit(BPF_RB_NO_WAKEUP);
    Ok(())
}

/// Whether podtrace keeps a header field of this name: pseudo-headers,
/// `grpc-*`, `content-type`, `user-agent`. Everything else (authorization,
/// cookies, application headers) never leaves the kernel.
#[inline(always)]
pub(crate) fn wanted_header(name: &[u8; HEADER_NAME_BYTES], len: u32) -> bool {
    let starts = |prefix: &[u8]| {
        let mut index = 0;
        while index < prefix.len() {
            if name[index] != prefix[index] {
                return false;
            }
            index += 1;
        }
        true
    };
    name[0] == b':'
        || starts(b"grpc-")
        || (len == 12 && starts(b"content-type"))
        || (len == 10 && starts(b"user-agent"))
}
