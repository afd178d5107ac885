//! Ties HTTP/2 header fields from Go's HPACK probes to their connection.
//!
//! The probes report a field with the thread that encoded or decoded it, not
//! the connection. Go decodes a HEADERS frame on the goroutine that has just
//! read it from the connection, and encodes one just before writing it, so:
//! a decoded field belongs to the connection the same thread last read
//! from; encoded fields wait for the same thread's next write. This is what
//! gives a request its `:path` on a connection whose HPACK dynamic table was
//! built before podtrace started.
//!
//! Not every block encoded on a thread is in its next write: grpc-go's
//! writer encodes a request's headers, then yields (`runtime.Gosched`, to
//! batch more frames) before it writes, and another goroutine on the same
//! thread may encode and write its own request to another connection
//! meanwhile. So a write takes only as many blocks as it holds HEADERS
//! frames, those whose pseudo-headers the frames do not contradict (what
//! the wire decodes without the connection's table: `:method`, `:scheme`,
//! literal paths), the latest first; the others wait for a later write.
//!
//! A decoded field's thread can mislead too: two connections' read loops
//! take turns on one thread, and the second one's frames may already be in
//! Go's buffers, read with no syscall and no probe hit to say it switched
//! (found at a load's first requests after the agent joined: a block of
//! one connection given to the other, its request left without a `:path`).
//! The probes also say which HPACK coder a field came from (a tag of the
//! `*hpack.Decoder` or `*hpack.Encoder`, one each per connection): a decoder
//! already seen on another connection, while the thread's last read's
//! connection has a decoder of its own, decodes for that other connection.
//!
//! For encoders: once writes on a connection have taken blocks of one
//! encoder twice with nothing to doubt, that encoder's fields go to the
//! connection as they come, whichever thread encodes or
//! writes them: grpc-go's writer resumes on another thread as often as not
//! under load, and its blocks would otherwise wait in vain.

use rustc_hash::FxBuildHasher;

use tracer_common::io::{Direction, FdKind, HeaderSide};
use tracer_decode::{
    Decoded,
    http2::{
        frame::{Frame, parse_frame, starts_with_frames},
        hpack::{HeaderBlockDecoder, HeaderList},
    },
};

use crate::{
    bounded::BoundedMap,
    capture::{ConnKey, DataRecord, HeaderRecord},
    decode::grpc_calls::PROBE_BLOCK_WINDOW_NS,
};

/// Threads remembered; past it the oldest is forgotten.
const MAX_THREADS: usize = 16_384;
/// Encoded fields kept per thread while waiting for its write.
const MAX_PENDING_FIELDS: usize = 64;
/// Encoders whose connection is known (or being learned), at most.
const MAX_CODERS: usize = 16_384;
/// Times an encoder's blocks must have gone to one connection, unambiguously,
/// before its fields go there directly.
const CODER_TRUSTED_AFTER: u32 = 2;

/// A header field on a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMessage {
    /// The connection.
    pub conn: ConnKey,
    /// Sent (egress) or received (ingress) by the process.
    pub direction: Direction,
    /// When the field was encoded or decoded (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// Field name.
    pub name: String,
    /// Field value (empty when redacted).
    pub value: String,
    /// HPACK marked it sensitive; its value was not captured.
    pub redacted: bool,
}

/// Per-thread state of the attribution. Each map forgets its oldest entry
/// when full (threads and connections come and go); what that loses is
/// counted where it shows: a field whose thread's read or encoder is
/// forgotten is counted unattributed, a forgotten thread's waiting fields
/// at once.
#[derive(Debug)]
pub struct HeaderAttributor {
    last_read: BoundedMap<(u32, u32), ConnKey, FxBuildHasher>,
    pending: BoundedMap<(u32, u32), Vec<HeaderRecord>, FxBuildHasher>,
    /// Per (process, encoder tag): the connection its blocks went to, and
    /// how many times in a row.
    coders: BoundedMap<(u32, u16), (ConnKey, u32), FxBuildHasher>,
    /// Per (process, decoder tag): the connection it last decoded for; and
    /// per connection, its decoder's tag.
    decoders: BoundedMap<(u32, u16), ConnKey, FxBuildHasher>,
    decoder_of: BoundedMap<ConnKey, u16, FxBuildHasher>,
    /// Fields that could not be tied to a connection (dropped).
    pub unattributed: u64,
}

impl Default for HeaderAttributor {
    fn default() -> Self {
        Self {
            last_read: BoundedMap::new(MAX_THREADS),
            pending: BoundedMap::new(MAX_THREADS),
            coders: BoundedMap::new(MAX_CODERS),
            decoders: BoundedMap::new(MAX_CODERS),
            decoder_of: BoundedMap::new(MAX_CODERS),
            unattributed: 0,
        }
    }
}

impl HeaderAttributor {
    /// Notes a socket read or write; a write releases the fields its thread
    /// encoded for it.
    pub fn on_data(&mut self, data: &DataRecord) -> Vec<HeaderMessage> {
        if data.fd_kind != FdKind::Socket {
            return Vec::new();
        }
        let thread = (data.ids.tgid, data.ids.tid);
        match data.direction {
            Direction::Ingress => {
                self.last_read.insert(thread, data.conn);
                Vec::new()
            }
            Direction::Egress => {
                let Some(mut waiting) = self.pending.remove(&thread) else {
                    return Vec::new();
                };
                let sent = match written_blocks(&data.data) {
                    Some(written) => {
                        let (taken, stale) = take_blocks(&mut waiting, &written, data.ids.ts_ns);
                        self.unattributed += stale;
                        if taken.len() == written.len() {
                            for block in &taken {
                                self.learn_coder(data.conn, block);
                            }
                        }
                        taken.into_iter().flatten().collect()
                    }
                    // Not HTTP/2 frames from the write's first byte (a
                    // preface, a frame cut across writes): the thread's
                    // fields go with it, as order alone says.
                    None => std::mem::take(&mut waiting),
                };
                if !waiting.is_empty() {
                    self.keep_pending(thread, waiting);
                }
                sent.into_iter()
                    .map(|field| message(data.conn, Direction::Egress, field))
                    .collect()
            }
        }
    }

    /// Takes one field; returns it tied to its connection when that is known now.
    pub fn on_header(&mut self, field: HeaderRecord) -> Option<HeaderMessage> {
        let thread = (field.ids.tgid, field.ids.tid);
        match field.side {
            HeaderSide::Decoder => match self.last_read.get(&thread).copied() {
                Some(conn) => {
                    let conn = self.decoding_for(conn, field.ids.tgid, field.coder_tag);
                    Some(message(conn, Direction::Ingress, field))
                }
                None => {
                    self.unattributed += 1;
                    None
                }
            },
            HeaderSide::Encoder => {
                let coder = (field.ids.tgid, field.coder_tag);
                if let Some(&(conn, seen)) = self.coders.get(&coder)
                    && field.coder_tag != 0
                    && seen >= CODER_TRUSTED_AFTER
                {
                    return Some(message(conn, Direction::Egress, field));
                }
                if !self.pending.contains_key(&thread) {
                    self.keep_pending(thread, Vec::new());
                }
                let pending = self.pending.get_mut(&thread)?;
                if pending.len() >= MAX_PENDING_FIELDS {
                    pending.remove(0);
                    self.unattributed += 1;
                }
                pending.push(field);
                None
            }
        }
    }

    /// A socket closed: its coders are forgotten (their memory, and so
    /// their tags, may serve another connection next).
    pub fn on_closed(&mut self, conn: &ConnKey) {
        self.coders.retain(|_, (known, _)| known != conn);
        if let Some(tag) = self.decoder_of.remove(conn) {
            self.forget_decoder(conn.tgid, tag, *conn);
        }
    }

    /// Forgets that decoder `tag` decodes for `conn`, unless it was seen on
    /// another connection since (a tag is 16 bits of an address: reused).
    fn forget_decoder(&mut self, tgid: u32, tag: u16, conn: ConnKey) {
        if self.decoders.get(&(tgid, tag)) == Some(&conn) {
            self.decoders.remove(&(tgid, tag));
        }
    }

    /// The connection a field of decoder `tag` (0: unknown) belongs to,
    /// when its thread last read from `last_read`: that one, unless the
    /// decoder was seen on another connection and `last_read` has a
    /// decoder of its own — then the thread's goroutine switched to the
    /// other connection's buffered frames. What is seen is learnt.
    fn decoding_for(&mut self, last_read: ConnKey, tgid: u32, tag: u16) -> ConnKey {
        if tag == 0 {
            return last_read;
        }
        if let Some(&known) = self.decoders.get(&(tgid, tag)) {
            let other_decoder = self
                .decoder_of
                .get(&last_read)
                .is_some_and(|&own| own != tag);
            if known != last_read && other_decoder {
                return known;
            }
        }
        if let Some(old) = self.decoder_of.insert(last_read, tag) {
            if old != tag {
                self.forget_decoder(tgid, old, last_read);
            }
        }
        // A decoder forgotten at the bound is forgotten both ways.
        for ((_, old_tag), old_conn) in self.decoders.insert_evicting((tgid, tag), last_read) {
            if self.decoder_of.get(&old_conn) == Some(&old_tag) {
                self.decoder_of.remove(&old_conn);
            }
        }
        last_read
    }

    /// A write on `conn` took `block` with nothing to doubt: one more time
    /// its encoder's blocks went there (a different connection starts over).
    fn learn_coder(&mut self, conn: ConnKey, block: &[HeaderRecord]) {
        let Some(first) = block.first() else {
            return;
        };
        let tag = first.coder_tag;
        if tag == 0 || block.iter().any(|field| field.coder_tag != tag) {
            return;
        }
        let entry = self
            .coders
            .get_or_insert_with((conn.tgid, tag), || (conn, 0));
        if entry.0 == conn {
            entry.1 = entry.1.saturating_add(1);
        } else {
            *entry = (conn, 1);
        }
    }

    /// Keeps a thread's fields waiting for its write; a thread forgotten
    /// to make room has its fields counted unattributed.
    fn keep_pending(&mut self, thread: (u32, u32), fields: Vec<HeaderRecord>) {
        for (_, lost) in self.pending.insert_evicting(thread, fields) {
            self.unattributed += lost.len() as u64;
        }
    }
}

/// What the wire says of each header block a write holds: the fields of
/// its HEADERS frames that decode without the connection's dynamic table
/// (a fresh table: entries the block itself inserts are right, older ones
/// stay unresolved). `None` when the write does not begin with frames.
fn written_blocks(bytes: &[u8]) -> Option<Vec<HeaderList>> {
    if !starts_with_frames(bytes) {
        return None;
    }
    let mut blocks = Vec::new();
    let mut rest = bytes;
    while let Ok(Decoded::Message { msg, consumed }) = parse_frame(rest) {
        if let Frame::Headers { fragment, .. } = msg {
            blocks.push(
                HeaderBlockDecoder::default()
                    .decode(fragment)
                    .unwrap_or_else(|error| error.partial),
            );
        }
        rest = &rest[consumed..];
    }
    Some(blocks)
}

/// Takes from `waiting` (one thread's encoded fields, in order) the blocks
/// that go with the `written` header blocks of a write at `now_ns`, and
/// returns them in order, with how many fields were dropped as stale; the
/// rest stay in `waiting`. A block encoded longer than
/// [`PROBE_BLOCK_WINDOW_NS`] ago was written from another thread (its
/// goroutine moved): kept, it would be given to a later request's write.
fn take_blocks(
    waiting: &mut Vec<HeaderRecord>,
    written: &[HeaderList],
    now_ns: u64,
) -> (Vec<Vec<HeaderRecord>>, u64) {
    let (mut blocks, stale): (Vec<_>, Vec<_>) = split_blocks(std::mem::take(waiting))
        .into_iter()
        .partition(|block| {
            block
                .first()
                .is_some_and(|f| now_ns.saturating_sub(f.ids.ts_ns) <= PROBE_BLOCK_WINDOW_NS)
        });
    let stale = stale.iter().map(|block| block.len() as u64).sum();
    let mut taken = vec![false; blocks.len()];
    if blocks.len() <= written.len() {
        for (block, taken) in blocks.iter().zip(&mut taken) {
            *taken = written.iter().any(|wire| agrees(wire, block));
        }
    } else {
        // More blocks than the write holds: the latest agreeing ones, in
        // order (the goroutine that wrote is the one that encoded last).
        let mut before = blocks.len();
        for wire in written.iter().rev() {
            if let Some(at) = (0..before).rev().find(|&at| agrees(wire, &blocks[at])) {
                taken[at] = true;
                before = at;
            }
        }
    }
    let mut sent = Vec::new();
    for (block, taken) in blocks.drain(..).zip(taken) {
        if taken {
            sent.push(block);
        } else {
            waiting.extend(block);
        }
    }
    (sent, stale)
}

/// Whether a field `name` reported by an HPACK probe after the fields
/// `block` (their names, in order) starts the next header block: a
/// pseudo-header after a regular field, or one the block already has.
pub(super) fn starts_block<'a>(
    mut block: impl DoubleEndedIterator<Item = &'a str> + Clone,
    name: &str,
) -> bool {
    name.starts_with(':')
        && (block.clone().any(|n| n == name)
            || block.next_back().is_some_and(|n| !n.starts_with(':')))
}

/// Splits encoded fields into header blocks ([`starts_block`]).
fn split_blocks(fields: Vec<HeaderRecord>) -> Vec<Vec<HeaderRecord>> {
    let mut blocks: Vec<Vec<HeaderRecord>> = Vec::new();
    for field in fields {
        let starts_block = blocks
            .last()
            .is_none_or(|block| starts_block(block.iter().map(|f| f.name.as_str()), &field.name));
        match blocks.last_mut() {
            Some(block) if !starts_block => block.push(field),
            _ => blocks.push(vec![field]),
        }
    }
    blocks
}

/// Whether the block has every pseudo-header the wire decoded, with the
/// same value (the probes report every pseudo-header, values cut at their
/// bound): a response's `:status` is no request's block.
fn agrees(wire: &HeaderList, block: &[HeaderRecord]) -> bool {
    wire.fields
        .iter()
        .filter(|(name, _)| name.starts_with(':'))
        .all(|(name, value)| {
            block.iter().any(|f| {
                &f.name == name
                    && if f.truncated {
                        value.starts_with(&f.value)
                    } else {
                        *value == f.value
                    }
            })
        })
}

fn message(conn: ConnKey, direction: Direction, field: HeaderRecord) -> HeaderMessage {
    HeaderMessage {
        conn,
        direction,
        ts_ns: field.ids.ts_ns,
        name: field.name,
        value: field.value,
        redacted: field.redacted,
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::io::IoSyscall;

    use super::*;
    use crate::capture::ProcessIds;

    fn ids(tid: u32) -> ProcessIds {
        ProcessIds {
            ts_ns: 1,
            tgid: 100,
            tid,
        }
    }

    fn data(tid: u32, conn_id: u64, direction: Direction) -> DataRecord {
        DataRecord {
            ids: ids(tid),
            conn: ConnKey { tgid: 100, conn_id },
            fd: 7,
            syscall: IoSyscall::Read,
            direction,
            fd_kind: FdKind::Socket,
            len: 10,
            enter_ts_ns: 0,
            data: vec![0; 10],
            truncated: false,
            tls_plaintext: false,
        }
    }

    fn field(tid: u32, side: HeaderSide, name: &str, value: &str) -> HeaderRecord {
        HeaderRecord {
            ids: ids(tid),
            side,
            name: name.into(),
            value: value.into(),
            redacted: false,
            truncated: false,
            coder_tag: 0,
        }
    }

    #[test]
    fn decoded_field_belongs_to_the_threads_last_read() {
        let mut headers = HeaderAttributor::default();
        headers.on_data(&data(1, 10, Direction::Ingress));
        headers.on_data(&data(2, 20, Direction::Ingress));
        let path = headers
            .on_header(field(
                2,
                HeaderSide::Decoder,
                ":path",
                "/etcdserverpb.KV/Put",
            ))
            .unwrap();
        assert_eq!(
            (path.conn.conn_id, path.direction, path.value.as_str()),
            (20, Direction::Ingress, "/etcdserverpb.KV/Put")
        );
        assert!(
            headers
                .on_header(field(3, HeaderSide::Decoder, ":path", "/x"))
                .is_none()
        );
        assert_eq!(headers.unattributed, 1);
    }

    #[test]
    fn encoded_fields_wait_for_the_threads_next_write() {
        let mut headers = HeaderAttributor::default();
        assert!(
            headers
                .on_header(field(1, HeaderSide::Encoder, ":method", "POST"))
                .is_none()
        );
        assert!(
            headers
                .on_header(field(
                    1,
                    HeaderSide::Encoder,
                    ":path",
                    "/runtime.v1.RuntimeService/Version"
                ))
                .is_none()
        );
        // Another thread's write does not take them.
        assert!(headers.on_data(&data(2, 30, Direction::Egress)).is_empty());
        let sent = headers.on_data(&data(1, 40, Direction::Egress));
        assert_eq!(
            sent.iter()
                .map(|m| (m.conn.conn_id, m.name.as_str()))
                .collect::<Vec<_>>(),
            [(40, ":method"), (40, ":path")]
        );
        assert!(headers.on_data(&data(1, 40, Direction::Egress)).is_empty());
    }

    /// An encoder's blocks went to one connection twice: its next fields go
    /// there at once, whatever thread encodes them, until it closes.
    #[test]
    fn an_encoder_whose_connection_is_known_sends_its_fields_there_from_any_thread() {
        let mut headers = HeaderAttributor::default();
        let tagged = |tid: u32, name: &str, value: &str| HeaderRecord {
            coder_tag: 7,
            ..field(tid, HeaderSide::Encoder, name, value)
        };
        for _ in 0..CODER_TRUSTED_AFTER {
            assert!(headers.on_header(tagged(1, ":method", "POST")).is_none());
            assert!(headers.on_header(tagged(1, ":scheme", "http")).is_none());
            let mut write = data(1, 40, Direction::Egress);
            write.data = headers_frame(b"\x83\x86\xc0");
            assert_eq!(headers.on_data(&write).len(), 2);
        }
        let sent = headers.on_header(tagged(2, ":method", "POST")).unwrap();
        assert_eq!(sent.conn.conn_id, 40);
        headers.on_closed(&ConnKey {
            tgid: 100,
            conn_id: 40,
        });
        assert!(headers.on_header(tagged(2, ":method", "POST")).is_none());
    }

    /// Two connections' read loops on one thread: the second read (conn
    /// 20), then the first connection's goroutine decodes a block it had
    /// buffered, with no read of its own to say so — its decoder, seen on
    /// conn 10 before, tells.
    #[test]
    fn a_decoder_seen_on_another_connection_decodes_for_that_one() {
        let mut headers = HeaderAttributor::default();
        let decoded = |tag: u16| HeaderRecord {
            coder_tag: tag,
            ..field(1, HeaderSide::Decoder, ":path", "/etcdserverpb.KV/Txn")
        };
        headers.on_data(&data(1, 10, Direction::Ingress));
        assert_eq!(headers.on_header(decoded(7)).unwrap().conn.conn_id, 10);
        headers.on_data(&data(1, 20, Direction::Ingress));
        assert_eq!(headers.on_header(decoded(8)).unwrap().conn.conn_id, 20);
        // conn 10's buffered block, then conn 20's.
        assert_eq!(headers.on_header(decoded(7)).unwrap().conn.conn_id, 10);
        assert_eq!(headers.on_header(decoded(8)).unwrap().conn.conn_id, 20);
        // A connection whose decoder is not known yet keeps the thread's
        // word (conn 30, decoder 9, whose first block it is).
        headers.on_data(&data(1, 30, Direction::Ingress));
        assert_eq!(headers.on_header(decoded(9)).unwrap().conn.conn_id, 30);
        // conn 10 closed: its decoder's memory may decode for another next.
        headers.on_closed(&ConnKey {
            tgid: 100,
            conn_id: 10,
        });
        headers.on_data(&data(1, 40, Direction::Ingress));
        assert_eq!(headers.on_header(decoded(7)).unwrap().conn.conn_id, 40);
    }

    /// One HEADERS frame (END_HEADERS) of stream 1 holding `fragment`.
    fn headers_frame(fragment: &[u8]) -> Vec<u8> {
        let len = fragment.len().to_be_bytes();
        let mut frame = vec![len[5], len[6], len[7], 0x1, 0x4, 0, 0, 0, 1];
        frame.extend_from_slice(fragment);
        frame
    }

    /// grpc-go encodes a request to containerd, yields before writing it,
    /// and client-go encodes and writes a PATCH to the apiserver from the
    /// same thread meanwhile: each write takes its own block, told apart by
    /// what its frame says without the connection's table.
    #[test]
    fn a_write_takes_the_blocks_its_frames_hold_not_every_block_its_thread_encoded() {
        let mut headers = HeaderAttributor::default();
        for (name, value) in [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/runtime.v1.ImageService/ImageStatus"),
            ("content-type", "application/grpc"),
            (":method", "PATCH"),
            (":path", "/api/v1/namespaces/default/pods/p/status"),
            (":scheme", "https"),
        ] {
            assert!(
                headers
                    .on_header(field(1, HeaderSide::Encoder, name, value))
                    .is_none()
            );
        }
        // A write without a HEADERS frame takes none.
        let mut window_update = data(1, 40, Direction::Egress);
        window_update.data = vec![0, 0, 4, 0x8, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert!(headers.on_data(&window_update).is_empty());
        // `:method: PATCH` as a literal, `:scheme: https` (static 7), an
        // entry of the table built before podtrace (unresolved).
        let mut patch = data(1, 50, Direction::Egress);
        patch.data = headers_frame(b"\x43\x05PATCH\x87\xc4");
        let sent = headers.on_data(&patch);
        assert_eq!(
            sent.iter()
                .map(|m| (m.conn.conn_id, m.value.as_str()))
                .collect::<Vec<_>>(),
            [
                (50, "PATCH"),
                (50, "/api/v1/namespaces/default/pods/p/status"),
                (50, "https")
            ]
        );
        // `:method: POST`, `:scheme: http` (static 3 and 6), table entries.
        let mut grpc = data(1, 40, Direction::Egress);
        grpc.data = headers_frame(b"\x83\x86\xc0\xc6");
        let sent = headers.on_data(&grpc);
        assert_eq!(
            sent.iter().map(|m| m.conn.conn_id).collect::<Vec<_>>(),
            [40; 4]
        );
        assert_eq!(sent[2].value, "/runtime.v1.ImageService/ImageStatus");
        assert_eq!(headers.unattributed, 0);
        // A block whose own write came from another thread is dropped once
        // it is older than a stream's window, not given to a later request.
        assert!(
            headers
                .on_header(field(1, HeaderSide::Encoder, ":method", "POST"))
                .is_none()
        );
        let mut later = data(1, 40, Direction::Egress);
        later.ids.ts_ns = 1 + PROBE_BLOCK_WINDOW_NS + 1;
        later.data = headers_frame(b"\x83\x86\xc0\xc6");
        assert!(headers.on_data(&later).is_empty());
        assert_eq!(headers.unattributed, 1);
    }
}
