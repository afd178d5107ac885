//! A peer stream older than the capture: its request (`GET
//! /raft/stream/…`) was never seen, so neither its kind nor its members
//! are known, and its body is joined somewhere in the middle.
//!
//! etcd writes a stream's messages into a chunked response body and
//! flushes after each batch (`rafthttp/stream.go`, `streamWriter.run`), so
//! a write — and, at the pace of Raft's traffic, a read — holds whole
//! chunks. A record that holds only whole chunks whose data frames exactly
//! as one stream kind, every message a plausible one, places the stream:
//! from there on it is decoded as if seen from its start ([`RaftStreamDecoder::joined`]).
//! The members come from the first message that names them (every
//! `message` frame and a `msgapp` stream's full MsgApp frames do).
//!
//! In: the writer's bytes of one connection (server → client), one record
//! at a time, as moved. Out: what [`RaftStreamDecoder`] gives once placed.
//! Bounded: a connection whose first [`MAX_MISSES`] records place nothing
//! is no peer stream, and is left alone from then on.

use super::{MessageKind, PeerStream, RaftMessage, RaftStreamDecoder, RaftStreamError, StreamKind};

/// Records that place nothing before a connection is taken for something
/// else than a peer stream (a stream's heartbeats give ten a second).
pub const MAX_MISSES: u32 = 16;
/// A chunk-size line longer than this is not one etcd writes (hex digits
/// of a length under 4 GiB and CRLF).
const MAX_SIZE_LINE: usize = 18;

/// What one record did.
#[derive(Debug, PartialEq, Eq)]
pub enum Joined {
    /// Not placed yet (or placed no longer): the record is not decoded.
    Searching,
    /// Not a peer stream: nothing more is tried on it.
    NotRaft,
    /// The stream's body ended (its last chunk): nothing more comes.
    Ended,
    /// Placed: the messages and problems of the record.
    Decoded {
        stream: PeerStream,
        messages: Vec<RaftMessage>,
        errors: Vec<RaftStreamError>,
    },
}

/// A peer stream being placed, then decoded.
#[derive(Debug, Default)]
pub struct JoinedStream {
    state: State,
    /// Records that placed nothing since the stream was last placed.
    misses: u32,
    /// Bytes not decoded: before the stream was placed, and after a loss.
    skipped_bytes: u64,
    /// Times the stream was placed (again after each loss).
    placed: u32,
    /// Members known other than from its messages (writer, dialer; 0:
    /// not known).
    members: (u64, u64),
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Searching,
    Placed {
        chunks: Dechunker,
        decoder: RaftStreamDecoder,
    },
    NotRaft,
    Ended,
}

impl JoinedStream {
    /// Bytes not decoded so far.
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped_bytes
            + match &self.state {
                State::Placed { decoder, .. } => decoder.skipped_bytes(),
                _ => 0,
            }
    }

    /// Times the stream was placed: 1 once placed, more after losses.
    pub fn placed(&self) -> u32 {
        self.placed
    }

    /// The stream's writer and dialer, as known from elsewhere (which
    /// member each end's process is; 0: not known): appends on a `msgapp`
    /// stream name no member themselves.
    pub fn name_members(&mut self, writer: u64, dialer: u64) {
        self.members = (writer, dialer);
        if let State::Placed { decoder, .. } = &mut self.state {
            decoder.name_members(writer, dialer);
        }
    }

    /// Adds one record of the writer's bytes; `truncated` means bytes
    /// after these are missing.
    pub fn push(&mut self, bytes: &[u8], truncated: bool) -> Joined {
        match &mut self.state {
            State::NotRaft => Joined::NotRaft,
            State::Ended => Joined::Ended,
            State::Searching => self.place(bytes, truncated),
            State::Placed { chunks, decoder } => {
                let mut data = Vec::new();
                let framed = chunks.push(bytes, &mut data);
                // Bytes that are no chunk lose the framing as lost bytes do.
                let malformed = framed == Err(NotChunked::Malformed);
                let (messages, errors) = decoder.push(&data, truncated || malformed);
                let stream = decoder.stream();
                if framed == Err(NotChunked::Ended) {
                    // The writer ended the body (etcd closing the stream).
                    self.state = State::Ended;
                } else if errors.iter().any(|error| !error.can_continue()) {
                    // Place the stream again from a later record.
                    self.skipped_bytes += decoder.skipped_bytes();
                    self.state = State::Searching;
                }
                Joined::Decoded {
                    stream,
                    messages,
                    errors,
                }
            }
        }
    }

    /// Tries `bytes` as the first record of the stream.
    fn place(&mut self, bytes: &[u8], truncated: bool) -> Joined {
        let mut chunks = Dechunker::default();
        let mut data = Vec::new();
        let whole = !truncated
            && chunks.push(bytes, &mut data).is_ok()
            && chunks.at_boundary()
            && !data.is_empty();
        if whole {
            for kind in [StreamKind::Message, StreamKind::MsgAppV2] {
                let mut decoder = RaftStreamDecoder::joined(kind);
                decoder.name_members(self.members.0, self.members.1);
                let (messages, errors) = decoder.push(&data, false);
                if errors.is_empty()
                    && decoder.buffered_bytes() == 0
                    && plausible(kind, &data, &messages)
                {
                    self.misses = 0;
                    self.placed += 1;
                    let stream = decoder.stream();
                    self.state = State::Placed { chunks, decoder };
                    return Joined::Decoded {
                        stream,
                        messages,
                        errors,
                    };
                }
            }
        }
        self.skipped_bytes += bytes.len() as u64;
        self.misses += 1;
        if self.misses >= MAX_MISSES && self.placed == 0 {
            self.state = State::NotRaft;
            return Joined::NotRaft;
        }
        Joined::Searching
    }
}

/// Whether `messages`, framed exactly from a record's chunks as a stream of
/// `kind` from `data`, are what etcd writes there: types Raft defines,
/// between two distinct members. A `message` record gives at least one; a
/// `msgapp` one appends, or is a link heartbeat alone (one zero byte,
/// flushed on its own: zero bytes of anything else would read as many).
fn plausible(kind: StreamKind, data: &[u8], messages: &[RaftMessage]) -> bool {
    let members =
        |message: &RaftMessage| message.from != 0 && message.to != 0 && message.from != message.to;
    match kind {
        StreamKind::Message => {
            !messages.is_empty()
                && messages
                    .iter()
                    .all(|message| message.kind.is_defined() && members(message))
        }
        StreamKind::MsgAppV2 => {
            data == [0]
                || (!messages.is_empty()
                    && messages.iter().all(|message| {
                        // An AppEntries frame names only the members the
                        // stream was told of, if any.
                        message.kind == MessageKind::App
                            && (message.from == 0 || message.to == 0 || members(message))
                    }))
        }
    }
}

/// De-chunks a chunked body (RFC 9112 §7.1) read from anywhere a chunk
/// starts; trailers never come (a peer stream's body ends with its
/// connection).
#[derive(Debug, Default)]
struct Dechunker {
    state: ChunkState,
    /// A chunk-size line or a chunk's CRLF, as far as it arrived.
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data {
        remaining: u64,
    },
    End,
}

/// Why bytes did not continue a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotChunked {
    /// Not chunked framing.
    Malformed,
    /// The body's last chunk (size 0).
    Ended,
}

impl Dechunker {
    /// Appends the chunk data in `bytes` to `data`.
    fn push(&mut self, mut bytes: &[u8], data: &mut Vec<u8>) -> Result<(), NotChunked> {
        while !bytes.is_empty() {
            match self.state {
                ChunkState::Size => {
                    let end = bytes
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(bytes.len(), |at| at + 1);
                    self.line.extend_from_slice(&bytes[..end]);
                    bytes = &bytes[end..];
                    if self.line.len() > MAX_SIZE_LINE {
                        return Err(NotChunked::Malformed);
                    }
                    if self.line.last() != Some(&b'\n') {
                        continue;
                    }
                    match httparse::parse_chunk_size(&self.line) {
                        Ok(httparse::Status::Complete((_, 0))) => return Err(NotChunked::Ended),
                        Ok(httparse::Status::Complete((_, size))) => {
                            self.state = ChunkState::Data { remaining: size };
                            self.line.clear();
                        }
                        _ => return Err(NotChunked::Malformed),
                    }
                }
                ChunkState::Data { remaining } => {
                    let take = bytes
                        .len()
                        .min(usize::try_from(remaining).unwrap_or(usize::MAX));
                    data.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    let remaining = remaining - take as u64;
                    self.state = if remaining == 0 {
                        ChunkState::End
                    } else {
                        ChunkState::Data { remaining }
                    };
                }
                ChunkState::End => {
                    let take = bytes.len().min(2 - self.line.len());
                    self.line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if !b"\r\n".starts_with(&self.line) {
                        return Err(NotChunked::Malformed);
                    }
                    if self.line.len() == 2 {
                        self.line.clear();
                        self.state = ChunkState::Size;
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the bytes so far ended with a whole chunk.
    fn at_boundary(&self) -> bool {
        self.state == ChunkState::Size && self.line.is_empty()
    }
}

#[cfg(test)]
mod tests;
