//! Per-connection HTTP/2 state: frame sync per direction, HPACK tables,
//! per-stream reassembly and request/response pairing by stream id.
//!
//! In: the [`Chunk`]s of one connection in capture order (either direction),
//! plus header fields that capture recovered elsewhere
//! ([`Http2Connection::supply_headers`]). Out: [`Exchange`]s, one per stream,
//! when the stream ends or is reset, and every incomplete one at
//! [`Http2Connection::finish`]. Problems are [`Http2Error`]s collected on the
//! connection; none of them stops decoding.

use std::collections::BTreeMap;

use super::frame::{self, CLIENT_PREFACE, Frame, FrameError};
use super::hpack::{
    self, HeaderBlockDecoder, HeaderBlockError, HeaderList, TableCopy, TableLoadError,
};
use crate::{Chunk, Decoded, Direction};

/// Memory bounds for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Streams tracked at once; past it the oldest is handed out incomplete.
    pub max_open_streams: usize,
    /// Body bytes kept per stream and direction; the rest is counted, not kept.
    pub max_body_bytes: usize,
    /// Bytes of a header block kept while waiting for CONTINUATION frames.
    pub max_header_block_bytes: usize,
    /// Problems kept in [`Http2Connection::errors`]; later ones are only counted.
    pub max_errors: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_open_streams: 256,
            // etcd's default request limit is 1.5 MiB; a Pod rarely nears it.
            max_body_bytes: 2 << 20,
            max_header_block_bytes: 64 << 10,
            max_errors: 64,
        }
    }
}

/// What capture lost of a direction right after a chunk's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Nothing: the next chunk follows on.
    Nothing,
    /// This many bytes (a transfer longer than capture keeps).
    Bytes(u64),
    /// An unknown number of bytes.
    Unknown,
}

/// Something that went wrong on a connection. Every variant names what was
/// lost; the connection itself always keeps decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Http2Error {
    /// A frame could not be parsed.
    #[error("{direction:?}: {error}")]
    Frame {
        direction: Direction,
        error: FrameError,
    },
    /// A header block could not be fully decoded.
    #[error("{direction:?} stream {stream_id}: {error}")]
    HeaderBlock {
        direction: Direction,
        stream_id: u32,
        error: HeaderBlockError,
    },
    /// Bytes were skipped to find a frame boundary (capture started
    /// mid-connection, or lost bytes).
    #[error("{direction:?}: skipped {skipped_bytes} bytes to find a frame boundary")]
    Resynchronised {
        direction: Direction,
        skipped_bytes: usize,
    },
    /// A truncated chunk: the rest of that write is missing, so the frame it
    /// cut is lost and the HPACK table of that direction is reset.
    #[error("{direction:?}: capture truncated a chunk; {dropped_bytes} buffered bytes dropped")]
    BytesLost {
        direction: Direction,
        dropped_bytes: usize,
    },
    /// Capture lost bytes inside a DATA frame's payload: that stream's
    /// body is incomplete; the frames after it are read on.
    #[error("{direction:?} stream {stream_id}: capture lost {lost_bytes} bytes of a DATA frame")]
    DataBytesLost {
        direction: Direction,
        stream_id: u32,
        lost_bytes: usize,
    },
    /// A CONTINUATION that does not continue the pending header block.
    #[error("{direction:?} stream {stream_id}: CONTINUATION without a matching HEADERS")]
    UnexpectedContinuation {
        direction: Direction,
        stream_id: u32,
    },
    /// A header block outgrew [`Limits::max_header_block_bytes`]; the table is reset.
    #[error("{direction:?} stream {stream_id}: header block over the size limit")]
    HeaderBlockTooLarge {
        direction: Direction,
        stream_id: u32,
    },
}

impl Http2Error {
    /// Whether the affected stream can still yield a useful exchange. The
    /// connection goes on either way.
    pub fn stream_can_continue(&self) -> bool {
        match self {
            Http2Error::Frame { error, .. } => error.can_continue(),
            Http2Error::HeaderBlock { .. } | Http2Error::Resynchronised { .. } => true,
            Http2Error::BytesLost { .. }
            | Http2Error::DataBytesLost { .. }
            | Http2Error::UnexpectedContinuation { .. }
            | Http2Error::HeaderBlockTooLarge { .. } => false,
        }
    }
}

/// Where a header field came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderSource {
    /// Decoded from the HPACK block on the wire.
    Wire,
    /// Supplied by capture from another source (e.g. uprobes on Go's hpack
    /// encoder), for blocks whose dynamic entries predate the capture.
    External,
}

/// What one side of a stream sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HalfStream {
    /// The first header block, if captured.
    pub headers: Option<HeaderList>,
    /// Fields supplied from outside the byte stream.
    pub external_headers: Vec<(String, String)>,
    /// A header block after DATA (gRPC status lives here).
    pub trailers: Option<HeaderList>,
    /// Concatenated DATA payloads, up to [`Limits::max_body_bytes`].
    pub body: Vec<u8>,
    /// Body bytes seen but not kept (over the limit).
    pub body_bytes_dropped: usize,
    /// DATA frames seen.
    pub data_frames: usize,
    /// Capture lost bytes of this side: body or headers may be incomplete.
    pub lossy: bool,
    /// END_STREAM seen.
    pub ended: bool,
    /// Time of the first and last chunk that carried this side's frames.
    pub first_ts_ns: Option<u64>,
    /// See `first_ts_ns`.
    pub last_ts_ns: Option<u64>,
}

impl HalfStream {
    /// A header value: the wire's first, else one supplied from outside.
    pub fn header(&self, name: &str) -> Option<(&str, HeaderSource)> {
        if let Some(value) = self.headers.as_ref().and_then(|h| h.get(name)) {
            return Some((value, HeaderSource::Wire));
        }
        self.external_headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| (v.as_str(), HeaderSource::External))
    }

    /// A trailer value (gRPC's `grpc-status`, `grpc-message`).
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers.as_ref().and_then(|t| t.get(name))
    }

    fn touch(&mut self, ts_ns: u64) {
        self.first_ts_ns.get_or_insert(ts_ns);
        self.last_ts_ns = Some(ts_ns);
    }
}

/// A stream one side has sent on (see [`Http2Connection::streams_seen`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenStream {
    /// The stream id.
    pub id: u32,
    /// Capture time of the first chunk that carried this side's frames.
    pub first_ts_ns: u64,
    /// `:path` as decoded from the wire.
    pub wire_path: Option<String>,
}

/// A stream's request and response, paired by stream id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// The HTTP/2 stream id.
    pub stream_id: u32,
    /// Client to server.
    pub request: HalfStream,
    /// Server to client.
    pub response: HalfStream,
    /// RST_STREAM error code, if the stream was reset.
    pub reset_code: Option<u32>,
    /// Both sides ended (or the stream was reset). False for streams handed
    /// out by [`Http2Connection::finish`] or evicted by the stream limit.
    pub complete: bool,
}

impl Exchange {
    fn new(stream_id: u32) -> Self {
        Self {
            stream_id,
            request: HalfStream::default(),
            response: HalfStream::default(),
            reset_code: None,
            complete: false,
        }
    }

    /// The request's `:path`, from the wire or supplied.
    pub fn path(&self) -> Option<&str> {
        self.request.header(":path").map(|(v, _)| v)
    }

    fn half_mut(&mut self, direction: Direction) -> &mut HalfStream {
        match direction {
            Direction::ClientToServer => &mut self.request,
            Direction::ServerToClient => &mut self.response,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// No frame boundary known yet: check for the preface, then frames, then search.
    Searching,
    /// The buffer starts at a frame boundary.
    InFrames,
}

/// Where in a direction's bytes a [`TableCopy`] was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TablePoint {
    /// Before the next bytes pushed: the receiver's table as it was when it
    /// asked for more (every whole frame before parsed).
    BeforeNext,
    /// After the bytes pushed so far: the sender's table as it was when it
    /// wrote them (every block in them encoded).
    AfterPushed,
}

/// HTTP/2 frame types that carry header block fragments (RFC 9113 §6).
const FRAME_HEADERS: u8 = 0x1;
const FRAME_PUSH_PROMISE: u8 = 0x5;
const FRAME_CONTINUATION: u8 = 0x9;

#[derive(Debug)]
struct PendingBlock {
    stream_id: u32,
    end_stream: bool,
    block: Vec<u8>,
}

/// A header block of the last chunk pushed, kept for [`ChunkBlocks`].
#[derive(Debug)]
struct ChunkBlock {
    stream_id: u32,
    /// A block after the stream's first (trailers).
    trailer: bool,
    block: Vec<u8>,
}

/// The header blocks of the last chunk pushed in one direction. When some
/// of their fields were unresolved (a connection joined late) and the
/// sender's table copy taken right after that chunk is loaded
/// ([`TablePoint::AfterPushed`]), they are decoded again from the table as
/// it was before them: the copy without the entries they inserted. Without
/// that, a write's own header blocks got their fields from the HPACK
/// probes alone, which a goroutine that moved threads between encoding and
/// writing lost.
#[derive(Debug, Default)]
struct ChunkBlocks {
    blocks: Vec<ChunkBlock>,
    unresolved: bool,
    /// More blocks than kept: no decoding again.
    overflowed: bool,
}

impl ChunkBlocks {
    /// Forgets the blocks for the next chunk, keeping the list's memory:
    /// this runs for every chunk pushed.
    fn clear(&mut self) {
        self.blocks.clear();
        self.unresolved = false;
        self.overflowed = false;
    }
}

/// Blocks of one chunk kept at most (a write of a burst of requests).
const MAX_CHUNK_BLOCKS: usize = 64;

#[derive(Debug)]
struct DirectionState {
    direction: Direction,
    buf: Vec<u8>,
    sync: Sync,
    hpack: HeaderBlockDecoder,
    pending: Option<PendingBlock>,
    chunk: ChunkBlocks,
}

impl DirectionState {
    /// The last chunk's header blocks decoded again from the table as it
    /// was before them (`after`, the sender's copy taken right after the
    /// chunk, without the entries they inserted), when some of their fields
    /// were unresolved: `(stream, trailer, fields)` each. Leaves the table
    /// as `after` would be, to be replaced by it.
    fn decode_chunk_again(&mut self, after: &TableCopy) -> Vec<(u32, bool, HeaderList)> {
        let chunk = std::mem::take(&mut self.chunk);
        if !chunk.unresolved || chunk.overflowed {
            return Vec::new();
        }
        let inserted: Option<usize> = chunk
            .blocks
            .iter()
            .map(|b| hpack::insertions(&b.block))
            .sum();
        let Some(before) = inserted.and_then(|inserted| after.without_newest(inserted)) else {
            return Vec::new();
        };
        if self.hpack.load(&before).is_err() {
            return Vec::new();
        }
        chunk
            .blocks
            .iter()
            .map(|b| (b.stream_id, b.trailer, self.hpack.redecode(&b.block)))
            .collect()
    }

    fn new(direction: Direction) -> Self {
        Self {
            direction,
            buf: Vec::new(),
            sync: Sync::Searching,
            hpack: HeaderBlockDecoder::default(),
            pending: None,
            chunk: ChunkBlocks::default(),
        }
    }
}

/// Decoder state of one HTTP/2 connection.
#[derive(Debug)]
pub struct Http2Connection {
    limits: Limits,
    client: DirectionState,
    server: DirectionState,
    streams: BTreeMap<u32, Exchange>,
    done: Vec<Exchange>,
    errors: Vec<Http2Error>,
    errors_dropped: usize,
    goaway: Option<(u32, u32)>,
}

impl Default for Http2Connection {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Http2Connection {
    /// A connection with nothing seen yet. Whether capture starts at the
    /// connection preface or mid-connection is found out from the bytes.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            client: DirectionState::new(Direction::ClientToServer),
            server: DirectionState::new(Direction::ServerToClient),
            streams: BTreeMap::new(),
            done: Vec::new(),
            errors: Vec::new(),
            errors_dropped: 0,
            goaway: None,
        }
    }

    /// Feeds one captured chunk.
    pub fn push(&mut self, chunk: &Chunk) {
        let lost = if chunk.truncated {
            Lost::Unknown
        } else {
            Lost::Nothing
        };
        self.push_bytes(chunk.direction, chunk.ts_ns, &chunk.bytes, lost);
    }

    /// Feeds the bytes of one captured chunk without owning them (see
    /// [`Chunk`]), and what capture lost right after them.
    pub fn push_bytes(&mut self, direction: Direction, ts_ns: u64, bytes: &[u8], lost: Lost) {
        let state = self.state_mut(direction);
        state.chunk.clear();
        // Frames are parsed where they are: from `bytes` itself when nothing
        // is left over from the chunk before (the usual case: a Go write or
        // read is whole frames), else from the buffer they are appended to.
        let mut buf = std::mem::take(&mut state.buf);
        let buffered = !buf.is_empty();
        if buffered {
            buf.extend_from_slice(bytes);
        }
        let input: &[u8] = if buffered { &buf } else { bytes };
        let mut frames = Vec::new();
        let mut errors = Vec::new();
        let consumed = drain_frames(state, input, &mut frames, &mut errors);
        // Bytes lost inside a DATA payload (a gRPC server's 32 KiB read of
        // 16 KiB frames cut a few bytes short: an image's content written
        // through containerd's API) cost that stream's body alone: they are
        // stood in for by zeros, and the frames after them, with the HPACK
        // state, stay in step.
        let lost_in_data = match lost {
            Lost::Bytes(lost_bytes) if state.sync == Sync::InFrames => {
                frame::data_frame_remainder(&input[consumed..])
                    .filter(|&(_, missing)| lost_bytes <= missing as u64)
                    .map(|(stream_id, _)| (stream_id, lost_bytes as usize))
            }
            _ => None,
        };
        let truncated = lost != Lost::Nothing && lost_in_data.is_none();
        if truncated {
            // The rest of this write was never captured: whatever frame is
            // partially buffered cannot be completed, and a lost header block
            // would make every later HPACK index wrong.
            errors.push(Http2Error::BytesLost {
                direction: state.direction,
                dropped_bytes: input.len() - consumed,
            });
            state.sync = Sync::Searching;
            state.pending = None;
            state.hpack.reset();
        }
        for frame in frames {
            self.apply(direction, ts_ns, frame, &mut errors);
        }
        // What is left is the start of a frame that a later chunk completes.
        if truncated {
            buf.clear();
        } else if buffered {
            buf.drain(..consumed);
        } else {
            buf.extend_from_slice(&bytes[consumed..]);
        }
        if let Some((stream_id, lost_bytes)) = lost_in_data {
            buf.resize(buf.len() + lost_bytes, 0);
            if let Some(exchange) = self.streams.get_mut(&stream_id) {
                exchange.half_mut(direction).lossy = true;
            }
            errors.push(Http2Error::DataBytesLost {
                direction,
                stream_id,
                lost_bytes,
            });
        }
        self.state_mut(direction).buf = buf;
        if truncated {
            // Streams with data in flight in this direction may have lost bytes.
            for exchange in self.streams.values_mut() {
                let half = exchange.half_mut(direction);
                if !half.ended {
                    half.lossy = true;
                }
            }
        }
        for error in errors {
            self.record(error);
        }
    }

    /// Adds header fields for a stream that capture recovered outside the
    /// byte stream (Go hpack uprobes). They fill in what the wire could not
    /// resolve; wire values win where both exist.
    pub fn supply_headers(
        &mut self,
        direction: Direction,
        stream_id: u32,
        fields: Vec<(String, String)>,
    ) {
        // Capture's header events can arrive after the stream's last frame:
        // a finished exchange not yet taken is filled in too.
        let exchange = match self
            .done
            .iter_mut()
            .rev()
            .find(|e| e.stream_id == stream_id)
        {
            Some(exchange) => exchange,
            None => self.stream(stream_id),
        };
        exchange.half_mut(direction).external_headers.extend(fields);
    }

    /// How many times `direction`'s HPACK table was forgotten (lost bytes,
    /// a corrupt block): each time, the entries its sender inserted before
    /// are unknown again until a [`Self::load_table`].
    pub fn table_resets(&self, direction: Direction) -> u64 {
        match direction {
            Direction::ClientToServer => self.client.hpack.resets(),
            Direction::ServerToClient => self.server.hpack.resets(),
        }
    }

    /// How many header blocks `direction` carried (each request's or
    /// response's headers, trailers, pushed promises).
    pub fn header_blocks(&self, direction: Direction) -> u64 {
        match direction {
            Direction::ClientToServer => self.client.hpack.blocks(),
            Direction::ServerToClient => self.server.hpack.blocks(),
        }
    }

    /// Replaces `direction`'s HPACK table with a copy of the peer's, taken
    /// at `point` in this direction's bytes. Refused (and nothing changed)
    /// when that point cannot be placed exactly: inside a header block, or
    /// before the frames are in step.
    pub fn load_table(
        &mut self,
        direction: Direction,
        point: TablePoint,
        copy: &TableCopy,
    ) -> Result<(), TableLoadError> {
        let state = self.state_mut(direction);
        // Go decodes a block's HEADERS fragment before it reads the
        // CONTINUATION, and encodes a whole block before it writes any.
        if state.pending.is_some() {
            return Err(TableLoadError::MidBlock);
        }
        if point == TablePoint::AfterPushed {
            if state.sync != Sync::InFrames {
                return Err(TableLoadError::Unsynchronised);
            }
            // A part-written frame of a header block was encoded whole.
            let carries_block = |kind: &u8| {
                matches!(
                    *kind,
                    FRAME_HEADERS | FRAME_PUSH_PROMISE | FRAME_CONTINUATION
                )
            };
            if !state.buf.is_empty() && state.buf.get(3).is_none_or(carries_block) {
                return Err(TableLoadError::MidBlock);
            }
        }
        let again = match point {
            TablePoint::AfterPushed => state.decode_chunk_again(copy),
            TablePoint::BeforeNext => Vec::new(),
        };
        state.hpack.load(copy)?;
        for (stream_id, trailer, list) in again {
            let exchange = match self.streams.get_mut(&stream_id) {
                Some(exchange) => exchange,
                None => match self
                    .done
                    .iter_mut()
                    .rev()
                    .find(|e| e.stream_id == stream_id)
                {
                    Some(exchange) => exchange,
                    None => continue,
                },
            };
            let half = exchange.half_mut(direction);
            let slot = if trailer {
                &mut half.trailers
            } else {
                &mut half.headers
            };
            if slot
                .as_ref()
                .is_some_and(|old| list.unresolved.len() < old.unresolved.len())
            {
                *slot = Some(list);
            }
        }
        Ok(())
    }

    /// The streams whose `direction` half has sent anything (a header block
    /// or data) — open ones and finished ones not yet taken — by stream id
    /// (the order their header blocks were sent in), with the capture time
    /// of the first chunk that carried it and the `:path` decoded from the
    /// wire, if any (a literal, so right even when the dynamic table is not).
    pub fn streams_seen(&self, direction: Direction) -> Vec<SeenStream> {
        let mut streams: Vec<SeenStream> = self
            .streams
            .values()
            .chain(&self.done)
            .filter_map(|exchange| {
                let half = match direction {
                    Direction::ClientToServer => &exchange.request,
                    Direction::ServerToClient => &exchange.response,
                };
                Some(SeenStream {
                    id: exchange.stream_id,
                    first_ts_ns: half.first_ts_ns?,
                    wire_path: half
                        .headers
                        .as_ref()
                        .and_then(|headers| headers.get(":path"))
                        .map(str::to_owned),
                })
            })
            .collect();
        streams.sort_unstable_by_key(|stream| stream.id);
        streams
    }

    /// Exchanges finished since the last call, in the order they finished.
    pub fn take_exchanges(&mut self) -> Vec<Exchange> {
        std::mem::take(&mut self.done)
    }

    /// Ends the connection: the remaining finished exchanges, then every
    /// open stream as incomplete, by stream id.
    pub fn finish(mut self) -> Vec<Exchange> {
        let mut out = std::mem::take(&mut self.done);
        out.extend(std::mem::take(&mut self.streams).into_values());
        out
    }

    /// Problems seen so far (bounded by [`Limits::max_errors`]).
    pub fn errors(&self) -> &[Http2Error] {
        &self.errors
    }

    /// Problems seen but not kept because of the bound.
    pub fn errors_dropped(&self) -> usize {
        self.errors_dropped
    }

    /// The last GOAWAY seen: (last stream id, error code).
    pub fn goaway(&self) -> Option<(u32, u32)> {
        self.goaway
    }

    fn record(&mut self, error: Http2Error) {
        if self.errors.len() < self.limits.max_errors {
            self.errors.push(error);
        } else {
            self.errors_dropped += 1;
        }
    }

    fn stream(&mut self, stream_id: u32) -> &mut Exchange {
        if !self.streams.contains_key(&stream_id)
            && self.streams.len() >= self.limits.max_open_streams
        {
            if let Some((_, oldest)) = self.streams.pop_first() {
                self.done.push(oldest);
            }
        }
        self.streams
            .entry(stream_id)
            .or_insert_with(|| Exchange::new(stream_id))
    }

    fn apply(
        &mut self,
        direction: Direction,
        ts_ns: u64,
        frame: Frame<'_>,
        errors: &mut Vec<Http2Error>,
    ) {
        match frame {
            Frame::Data {
                stream_id,
                end_stream,
                data,
            } => {
                let max_body_bytes = self.limits.max_body_bytes;
                let half = self.stream(stream_id).half_mut(direction);
                half.touch(ts_ns);
                half.data_frames += 1;
                let room = max_body_bytes.saturating_sub(half.body.len());
                let kept = data.len().min(room);
                half.body.extend_from_slice(&data[..kept]);
                half.body_bytes_dropped += data.len() - kept;
                if end_stream {
                    self.end_half(direction, stream_id);
                }
            }
            Frame::Headers {
                stream_id,
                end_stream,
                end_headers,
                fragment,
                ..
            } => {
                let state = self.state_mut(direction);
                if let Some(pending) = state.pending.take() {
                    errors.push(Http2Error::UnexpectedContinuation {
                        direction,
                        stream_id: pending.stream_id,
                    });
                }
                state.pending = Some(PendingBlock {
                    stream_id,
                    end_stream,
                    block: fragment.to_vec(),
                });
                self.stream(stream_id).half_mut(direction).touch(ts_ns);
                if end_headers {
                    self.finish_block(direction, errors);
                } else {
                    self.check_block_size(direction, errors);
                }
            }
            Frame::Continuation {
                stream_id,
                end_headers,
                fragment,
            } => {
                let state = self.state_mut(direction);
                match state.pending.as_mut() {
                    Some(pending) if pending.stream_id == stream_id => {
                        pending.block.extend_from_slice(fragment);
                    }
                    _ => {
                        // A block we cannot finish may have changed the table.
                        state.pending = None;
                        state.hpack.reset();
                        errors.push(Http2Error::UnexpectedContinuation {
                            direction,
                            stream_id,
                        });
                        return;
                    }
                }
                if end_headers {
                    self.finish_block(direction, errors);
                } else {
                    self.check_block_size(direction, errors);
                }
            }
            Frame::RstStream {
                stream_id,
                error_code,
            } => {
                if let Some(mut exchange) = self.streams.remove(&stream_id) {
                    exchange.half_mut(direction).touch(ts_ns);
                    exchange.reset_code = Some(error_code);
                    exchange.complete = true;
                    self.done.push(exchange);
                }
            }
            Frame::GoAway {
                last_stream_id,
                error_code,
            } => self.goaway = Some((last_stream_id, error_code)),
            Frame::PushPromise {
                fragment,
                end_headers,
                ..
            } => {
                // Servers podtrace follows (etcd, containerd, apiserver) never
                // push; the promised block still goes through HPACK to keep
                // the table in step.
                if end_headers {
                    let _ = self.state_mut(direction).hpack.decode(fragment);
                }
            }
            Frame::Settings { .. }
            | Frame::Ping { .. }
            | Frame::WindowUpdate { .. }
            | Frame::Priority { .. }
            | Frame::Unknown { .. } => {}
        }
    }

    fn state_mut(&mut self, direction: Direction) -> &mut DirectionState {
        match direction {
            Direction::ClientToServer => &mut self.client,
            Direction::ServerToClient => &mut self.server,
        }
    }

    fn check_block_size(&mut self, direction: Direction, errors: &mut Vec<Http2Error>) {
        let limit = self.limits.max_header_block_bytes;
        let state = self.state_mut(direction);
        if let Some(pending) = state.pending.as_ref().filter(|p| p.block.len() > limit) {
            errors.push(Http2Error::HeaderBlockTooLarge {
                direction,
                stream_id: pending.stream_id,
            });
            state.pending = None;
            state.hpack.reset();
        }
    }

    fn finish_block(&mut self, direction: Direction, errors: &mut Vec<Http2Error>) {
        let state = self.state_mut(direction);
        let Some(pending) = state.pending.take() else {
            return;
        };
        let list = match state.hpack.decode(&pending.block) {
            Ok(list) => list,
            Err(error) => {
                let partial = error.partial.clone();
                errors.push(Http2Error::HeaderBlock {
                    direction,
                    stream_id: pending.stream_id,
                    error,
                });
                partial
            }
        };
        let unresolved = !list.unresolved.is_empty();
        let half = self.stream(pending.stream_id).half_mut(direction);
        let trailer = !(half.headers.is_none() && half.data_frames == 0);
        if trailer {
            half.trailers = Some(list);
        } else {
            half.headers = Some(list);
        }
        let chunk = &mut self.state_mut(direction).chunk;
        chunk.unresolved |= unresolved;
        if chunk.blocks.len() < MAX_CHUNK_BLOCKS {
            chunk.blocks.push(ChunkBlock {
                stream_id: pending.stream_id,
                trailer,
                block: pending.block,
            });
        } else {
            chunk.overflowed = true;
        }
        if pending.end_stream {
            self.end_half(direction, pending.stream_id);
        }
    }

    fn end_half(&mut self, direction: Direction, stream_id: u32) {
        let Some(exchange) = self.streams.get_mut(&stream_id) else {
            return;
        };
        exchange.half_mut(direction).ended = true;
        // A response that ends closes the stream even if we never saw the
        // request end (capture started after it).
        let closed = exchange.response.ended
            && (exchange.request.ended || direction == Direction::ServerToClient);
        if closed {
            if let Some(mut exchange) = self.streams.remove(&stream_id) {
                exchange.complete = exchange.request.ended;
                self.done.push(exchange);
            }
        }
    }
}

/// Parses every complete frame in `input`, the bytes of `state`'s direction
/// not parsed yet; returns how many bytes it used.
fn drain_frames<'a>(
    state: &mut DirectionState,
    input: &'a [u8],
    frames: &mut Vec<Frame<'a>>,
    errors: &mut Vec<Http2Error>,
) -> usize {
    let mut at = 0;
    loop {
        let rest = &input[at..];
        if state.sync == Sync::Searching {
            if state.direction == Direction::ClientToServer
                && rest.len() < CLIENT_PREFACE.len()
                && CLIENT_PREFACE.starts_with(rest)
            {
                break;
            }
            if rest.starts_with(CLIENT_PREFACE) {
                at += CLIENT_PREFACE.len();
                state.sync = Sync::InFrames;
                continue;
            }
            match frame::find_frame_boundary(rest) {
                Some(skipped_bytes) => {
                    if skipped_bytes > 0 {
                        errors.push(Http2Error::Resynchronised {
                            direction: state.direction,
                            skipped_bytes,
                        });
                    }
                    at += skipped_bytes;
                    state.sync = Sync::InFrames;
                }
                None => {
                    // Keep a possible frame header start for the next chunk.
                    let keep = rest.len().min(8);
                    at = input.len() - keep;
                    break;
                }
            }
        }
        match frame::parse_frame(&input[at..]) {
            Ok(Decoded::Message { msg, consumed }) => {
                at += consumed;
                frames.push(msg);
            }
            Ok(Decoded::Incomplete | Decoded::NotMine) => break,
            Err(error) if error.can_continue() => {
                at += error.frame_len_bytes();
                errors.push(Http2Error::Frame {
                    direction: state.direction,
                    error,
                });
            }
            Err(error) => {
                errors.push(Http2Error::Frame {
                    direction: state.direction,
                    error,
                });
                // Lost sync: skip one byte and search again; the table may
                // be out of step from here on.
                at += 1;
                state.sync = Sync::Searching;
                state.pending = None;
                state.hpack.reset();
            }
        }
    }
    at
}
