//! Per-connection HTTP/1.1 state: a parser per direction (head, body by
//! length, chunks, until close, or searching for a start line) and the
//! pairing of responses with requests in order.
//!
//! In: the [`Chunk`]s of one connection in capture order (either
//! direction). Out: [`Exchange`]s in request order, each once both its
//! request and its response have ended, the rest at
//! [`Http1Connection::finish`]; [`WatchUpdate`]s as a watch response's body
//! arrives, and [`RaftUpdate`]s as an etcd peer stream's does. Problems are [`Http1Error`]s collected on the connection; none
//! stops decoding except a protocol switch, which is the end of HTTP/1.1.

use std::collections::VecDeque;

use super::framing::{
    self, Framing, FramingError, HeadError, Headers, RequestHead, ResponseHead, StartLine,
};
use crate::raft::{PeerStream, RaftMessage, RaftStreamDecoder, RaftStreamError};
use crate::rest::RestRequest;
use crate::watch::{WatchDecoder, WatchError, WatchEvent, WatchFormat};
use crate::{Chunk, Decoded, Direction};

/// Memory bounds for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a head (start line and fields) or a trailer section;
    /// longer ones are dropped and the direction resynchronises.
    pub max_head_bytes: usize,
    /// Body bytes kept per message; the rest is counted, not kept.
    pub max_body_bytes: usize,
    /// Exchanges waiting for their response (pipelining); past it the
    /// oldest is handed out incomplete.
    pub max_pending_exchanges: usize,
    /// Watch events and Raft messages each kept until taken
    /// ([`Http1Connection::take_watch_events`],
    /// [`Http1Connection::take_raft_messages`]); later ones are only counted.
    pub max_stream_events: usize,
    /// Problems kept in [`Http1Connection::errors`]; later ones are only counted.
    pub max_errors: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Go's net/http server refuses heads over 1 MiB by default, but
            // apiserver and kubelet heads are well under 8 KiB.
            max_head_bytes: 64 << 10,
            // Same as HTTP/2: a Pod body is far smaller.
            max_body_bytes: 2 << 20,
            max_pending_exchanges: 64,
            max_stream_events: 4096,
            max_errors: 64,
        }
    }
}

/// Something that went wrong on a connection. Every variant names what was
/// lost; decoding goes on at the next message found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Http1Error {
    /// A head could not be parsed; the direction resynchronises.
    #[error("{direction:?}: {error}")]
    Head {
        direction: Direction,
        error: HeadError,
    },
    /// A head whose body length cannot be known; the body is lost and the
    /// direction resynchronises.
    #[error("{direction:?}: {error}")]
    Framing {
        direction: Direction,
        error: FramingError,
    },
    /// A chunk-size line or chunk end that is not one; the rest of the
    /// body is lost and the direction resynchronises.
    #[error("{direction:?}: malformed chunk in a chunked body")]
    Chunk { direction: Direction },
    /// Bytes were skipped to find a start line (capture started
    /// mid-connection, or after lost bytes).
    #[error("{direction:?}: skipped {skipped_bytes} bytes to find a start line")]
    Resynchronised {
        direction: Direction,
        skipped_bytes: usize,
    },
    /// A truncated chunk: the rest of that write is missing, so the message
    /// it cut is lossy and the direction resynchronises.
    #[error("{direction:?}: capture truncated a chunk; {dropped_bytes} buffered bytes dropped")]
    BytesLost {
        direction: Direction,
        dropped_bytes: usize,
    },
    /// A watch response body event that did not decode.
    #[error("exchange {exchange_id}: {error}")]
    Watch { exchange_id: u64, error: WatchError },
    /// An etcd peer stream's body did not decode.
    #[error("exchange {exchange_id}: {error}")]
    Raft {
        exchange_id: u64,
        error: RaftStreamError,
    },
}

impl Http1Error {
    /// Whether the message it concerns can still be decoded whole. The
    /// connection goes on either way.
    pub fn can_continue(&self) -> bool {
        match self {
            Http1Error::Head { error, .. } => error.can_continue(),
            Http1Error::Watch { error, .. } => error.can_continue(),
            Http1Error::Raft { error, .. } => error.can_continue(),
            // Only bytes between messages were skipped.
            Http1Error::Resynchronised { .. } => true,
            Http1Error::Framing { .. }
            | Http1Error::Chunk { .. }
            | Http1Error::BytesLost { .. } => false,
        }
    }
}

/// What one side of an exchange sent after its start line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Half {
    /// Header fields, credentials dropped (names in `headers.redacted`).
    pub headers: Headers,
    /// Trailer fields after a chunked body.
    pub trailers: Option<Headers>,
    /// How the body is delimited.
    pub framing: Framing,
    /// The body (de-chunked), up to [`Limits::max_body_bytes`]. Empty for
    /// watch responses and etcd peer streams, whose bodies go to their
    /// decoders instead.
    pub body: Vec<u8>,
    /// Body bytes seen, kept or not.
    pub body_len: u64,
    /// The message ended where its framing says (or at connection close).
    pub ended: bool,
    /// Capture lost bytes of this message: its body or trailers are incomplete.
    pub lossy: bool,
    /// Time of the chunk that carried the head.
    pub first_ts_ns: u64,
    /// Time of the last chunk that carried bytes of this message.
    pub last_ts_ns: u64,
}

impl Half {
    fn new(headers: Headers, framing: Framing, ts_ns: u64) -> Self {
        Self {
            headers,
            trailers: None,
            framing,
            body: Vec::new(),
            body_len: 0,
            ended: false,
            lossy: false,
            first_ts_ns: ts_ns,
            last_ts_ns: ts_ns,
        }
    }
}

/// A request: its line and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method (`GET`).
    pub method: String,
    /// The request target as sent (`/api/v1/pods?watch=1`).
    pub target: String,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Fields, body, timestamps.
    pub half: Half,
}

/// A final response: its status line and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The reason phrase as sent.
    pub reason: String,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Fields, body, timestamps.
    pub half: Half,
    /// Set for a Kubernetes watch response: its body was handed to a
    /// [`WatchDecoder`] in this format (events via
    /// [`Http1Connection::take_watch_events`]).
    pub watch: Option<WatchFormat>,
    /// Set for an etcd peer stream (`GET /raft/stream/…` answered 200): its
    /// body was handed to a [`RaftStreamDecoder`] (messages via
    /// [`Http1Connection::take_raft_messages`]).
    pub raft: Option<PeerStream>,
}

/// The connection stopped being HTTP/1.1 after this exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade {
    /// `101 Switching Protocols` to the protocol named in its `upgrade`
    /// field (`websocket`, `SPDY/3.1`, `h2c`).
    Protocol(String),
    /// A 2xx answer to CONNECT: a tunnel.
    Tunnel,
}

/// A request and the response that answered it, paired in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// Position on the connection as decoded (0, 1, …).
    pub id: u64,
    /// `None` when the request was not captured (capture started after it,
    /// or its head was lost).
    pub request: Option<Request>,
    /// `None` when no response was seen (or its head was lost).
    pub response: Option<Response>,
    /// Interim (1xx other than 101) statuses before the response, such as
    /// `100 Continue`.
    pub informational: Vec<u16>,
    /// The protocol switch the response made, if any.
    pub upgrade: Option<Upgrade>,
    /// Bytes of a request or response head were lost: the exchange may pair
    /// a request with a response that does not answer it.
    pub head_lost: bool,
    /// Request and response were both seen from head to end.
    pub complete: bool,
}

impl Exchange {
    fn new(id: u64) -> Self {
        Self {
            id,
            request: None,
            response: None,
            informational: Vec::new(),
            upgrade: None,
            head_lost: false,
            complete: false,
        }
    }

    /// The request method.
    pub fn method(&self) -> Option<&str> {
        self.request.as_ref().map(|r| r.method.as_str())
    }

    /// The request target (path and query).
    pub fn target(&self) -> Option<&str> {
        self.request.as_ref().map(|r| r.target.as_str())
    }

    /// The final response status.
    pub fn status(&self) -> Option<u16> {
        self.response.as_ref().map(|r| r.status)
    }

    /// Whether capture lost bytes of either side.
    pub fn lossy(&self) -> bool {
        self.head_lost
            || self.request.as_ref().is_some_and(|r| r.half.lossy)
            || self.response.as_ref().is_some_and(|r| r.half.lossy)
    }

    /// The request as kube-apiserver's RequestInfo resolves it.
    pub fn rest(&self) -> Option<RestRequest> {
        self.request
            .as_ref()
            .map(|r| RestRequest::resolve(&r.method, &r.target, &r.half.headers.fields))
    }
}

/// An event of a watch response, as its body arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchUpdate {
    /// The [`Exchange::id`] of the watch.
    pub exchange_id: u64,
    /// Time of the chunk that completed the event.
    pub ts_ns: u64,
    /// The event.
    pub event: WatchEvent,
}

/// A Raft message of an etcd peer stream, as its body arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftUpdate {
    /// The [`Exchange::id`] of the stream.
    pub exchange_id: u64,
    /// The stream.
    pub stream: PeerStream,
    /// Time of the chunk that completed the message.
    pub ts_ns: u64,
    /// The message.
    pub message: RaftMessage,
}

/// The decoder a response body is handed to as it arrives, rather than
/// kept: it may last as long as the connection.
#[derive(Debug)]
enum BodyStream {
    Watch(WatchDecoder),
    Raft(RaftStreamDecoder),
}

/// What a [`BodyStream`] made of body bytes.
enum Streamed {
    Watch(Vec<WatchEvent>, Vec<WatchError>),
    Raft(PeerStream, Vec<RaftMessage>, Vec<RaftStreamError>),
}

impl BodyStream {
    fn push(&mut self, bytes: &[u8], truncated: bool) -> Streamed {
        match self {
            BodyStream::Watch(decoder) => {
                let (events, errors) = decoder.push(bytes, truncated);
                Streamed::Watch(events, errors)
            }
            BodyStream::Raft(decoder) => {
                let (messages, errors) = decoder.push(bytes, truncated);
                Streamed::Raft(decoder.stream(), messages, errors)
            }
        }
    }
}

/// An exchange still waiting for one of its sides.
#[derive(Debug)]
struct InFlight {
    exchange: Exchange,
    /// The request ended, was lost, or never will be seen.
    request_done: bool,
    /// The response ended or was lost.
    response_done: bool,
    stream: Option<BodyStream>,
}

impl InFlight {
    fn new(id: u64) -> Self {
        Self {
            exchange: Exchange::new(id),
            request_done: false,
            response_done: false,
            stream: None,
        }
    }

    fn half_mut(&mut self, direction: Direction) -> Option<&mut Half> {
        match direction {
            Direction::ClientToServer => self.exchange.request.as_mut().map(|r| &mut r.half),
            Direction::ServerToClient => self.exchange.response.as_mut().map(|r| &mut r.half),
        }
    }
}

/// Where a direction's parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No message boundary known: looking for a start line.
    Searching,
    /// At a message boundary: a head comes next.
    Head,
    /// `remaining` bytes of a Content-Length body.
    Length { remaining: u64 },
    /// Before a chunk-size line.
    ChunkSize,
    /// `remaining` bytes of chunk data, then CRLF.
    ChunkData { remaining: u64 },
    /// The CRLF after chunk data.
    ChunkEnd,
    /// Trailer fields after the last chunk.
    Trailers,
    /// A response body that ends at connection close.
    UntilClose,
    /// After a protocol switch: nothing more is HTTP/1.1.
    Switched,
}

#[derive(Debug)]
struct Parser {
    direction: Direction,
    buf: Vec<u8>,
    state: State,
    /// The exchange whose message this direction is in.
    current: Option<u64>,
    /// Bytes skipped by the current search, reported when it ends.
    skipped: usize,
    /// Length of `buf` when a head was last found incomplete: the head is
    /// only re-parsed once a blank line may have arrived after it.
    head_checked: usize,
}

impl Parser {
    fn new(direction: Direction) -> Self {
        Self {
            direction,
            buf: Vec::new(),
            // Capture may start anywhere: the first message is searched for.
            state: State::Searching,
            current: None,
            skipped: 0,
            head_checked: 0,
        }
    }
}

/// Everything but the parsers, so a parser can hand its bytes over while
/// they are borrowed from its buffer.
#[derive(Debug)]
struct Book {
    limits: Limits,
    in_flight: VecDeque<InFlight>,
    done: Vec<Exchange>,
    next_id: u64,
    errors: Vec<Http1Error>,
    errors_dropped: usize,
    watch_events: Vec<WatchUpdate>,
    raft_messages: Vec<RaftUpdate>,
    stream_events_dropped: usize,
    switched: bool,
    bytes_after_switch: usize,
}

/// Decoder state of one HTTP/1.1 connection.
#[derive(Debug)]
pub struct Http1Connection {
    client: Parser,
    server: Parser,
    book: Book,
}

impl Default for Http1Connection {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Http1Connection {
    /// A connection with nothing seen yet. Capture may start mid-connection:
    /// each direction starts by looking for a start line.
    pub fn new(limits: Limits) -> Self {
        Self {
            client: Parser::new(Direction::ClientToServer),
            server: Parser::new(Direction::ServerToClient),
            book: Book {
                limits,
                in_flight: VecDeque::new(),
                done: Vec::new(),
                next_id: 0,
                errors: Vec::new(),
                errors_dropped: 0,
                watch_events: Vec::new(),
                raft_messages: Vec::new(),
                stream_events_dropped: 0,
                switched: false,
                bytes_after_switch: 0,
            },
        }
    }

    /// Feeds one captured chunk.
    pub fn push(&mut self, chunk: &Chunk) {
        let parser = match chunk.direction {
            Direction::ClientToServer => &mut self.client,
            Direction::ServerToClient => &mut self.server,
        };
        if self.book.switched {
            parser.state = State::Switched;
        }
        parser.buf.extend_from_slice(&chunk.bytes);
        drive(parser, &mut self.book, chunk.ts_ns);
        if chunk.truncated {
            self.book.lose_bytes(parser, chunk.ts_ns);
        }
        self.book.release();
    }

    /// Exchanges finished since the last call, in request order.
    pub fn take_exchanges(&mut self) -> Vec<Exchange> {
        std::mem::take(&mut self.book.done)
    }

    /// Watch events decoded since the last call, in arrival order.
    pub fn take_watch_events(&mut self) -> Vec<WatchUpdate> {
        std::mem::take(&mut self.book.watch_events)
    }

    /// Raft messages of etcd peer streams decoded since the last call, in
    /// arrival order.
    pub fn take_raft_messages(&mut self) -> Vec<RaftUpdate> {
        std::mem::take(&mut self.book.raft_messages)
    }

    /// Ends the connection: a body delimited by the close ends here; then
    /// the remaining finished exchanges and every unfinished one, in order.
    pub fn finish(mut self) -> Vec<Exchange> {
        if self.server.state == State::UntilClose {
            self.book.end_message(&mut self.server);
            self.book.release();
        }
        let mut out = std::mem::take(&mut self.book.done);
        out.extend(self.book.in_flight.drain(..).map(|f| f.exchange));
        out
    }

    /// Problems seen so far (bounded by [`Limits::max_errors`]).
    pub fn errors(&self) -> &[Http1Error] {
        &self.book.errors
    }

    /// Problems seen but not kept because of the bound.
    pub fn errors_dropped(&self) -> usize {
        self.book.errors_dropped
    }

    /// Watch events and Raft messages decoded but not kept because of
    /// [`Limits::max_stream_events`].
    pub fn stream_events_dropped(&self) -> usize {
        self.book.stream_events_dropped
    }

    /// Whether the connection switched protocols ([`Exchange::upgrade`]).
    pub fn switched(&self) -> bool {
        self.book.switched
    }

    /// Bytes seen after the protocol switch (not decoded).
    pub fn bytes_after_switch(&self) -> usize {
        self.book.bytes_after_switch
    }

    /// Bytes buffered in both directions between pushes (a partial head,
    /// chunk-size line or trailer section, at most [`Limits::max_head_bytes`]
    /// each; or the start of a line being searched, at most 8 KiB).
    pub fn buffered_bytes(&self) -> usize {
        self.client.buf.len() + self.server.buf.len()
    }
}

/// Runs a direction's parser over everything buffered.
fn drive(parser: &mut Parser, book: &mut Book, ts_ns: u64) {
    let direction = parser.direction;
    let limits = book.limits;
    let mut at = 0;
    loop {
        if book.switched {
            parser.state = State::Switched;
        }
        let rest = &parser.buf[at..];
        match parser.state {
            State::Switched => {
                book.bytes_after_switch += rest.len();
                at = parser.buf.len();
                break;
            }
            State::Searching => {
                match framing::find_start_line(rest, direction == Direction::ClientToServer) {
                    StartLine::At(skipped) => {
                        parser.skipped += skipped;
                        at += skipped;
                        if parser.skipped > 0 {
                            book.record(Http1Error::Resynchronised {
                                direction,
                                skipped_bytes: parser.skipped,
                            });
                        }
                        parser.skipped = 0;
                        parser.head_checked = 0;
                        parser.state = State::Head;
                    }
                    StartLine::MaybeAt(skipped) => {
                        parser.skipped += skipped;
                        at += skipped;
                        break;
                    }
                    StartLine::None => {
                        parser.skipped += rest.len();
                        at = parser.buf.len();
                        break;
                    }
                }
            }
            State::Head => {
                // Parse once a head may have ended, or to report one over the limit.
                if rest.is_empty()
                    || (rest.len() <= limits.max_head_bytes
                        && !may_hold_head_end(rest, parser.head_checked))
                {
                    parser.head_checked = rest.len();
                    break;
                }
                let parsed = match direction {
                    Direction::ClientToServer => {
                        framing::parse_request_head(rest, limits.max_head_bytes)
                            .map(|d| map_decoded(d, Head::Request))
                    }
                    Direction::ServerToClient => {
                        framing::parse_response_head(rest, limits.max_head_bytes)
                            .map(|d| map_decoded(d, Head::Response))
                    }
                };
                match parsed {
                    Ok(Decoded::Message { msg, consumed }) => {
                        at += consumed;
                        parser.head_checked = 0;
                        parser.state = book.start_message(parser, msg, ts_ns);
                    }
                    Ok(Decoded::Incomplete | Decoded::NotMine) => {
                        parser.head_checked = rest.len();
                        break;
                    }
                    Err(error) => {
                        book.lose_head(
                            direction,
                            &rest[..rest.len().min(limits.max_head_bytes)],
                            ts_ns,
                        );
                        book.record(Http1Error::Head { direction, error });
                        // Skip one byte so the search does not find this line again.
                        at += 1;
                        parser.head_checked = 0;
                        parser.state = State::Searching;
                    }
                }
            }
            State::Length { remaining } => {
                let take = rest
                    .len()
                    .min(usize::try_from(remaining).unwrap_or(usize::MAX));
                book.body(parser, &rest[..take], ts_ns);
                at += take;
                let remaining = remaining - take as u64;
                if remaining == 0 {
                    book.end_message(parser);
                } else {
                    parser.state = State::Length { remaining };
                    break;
                }
            }
            State::UntilClose => {
                book.body(parser, rest, ts_ns);
                at = parser.buf.len();
                break;
            }
            State::ChunkSize => match httparse::parse_chunk_size(rest) {
                Ok(httparse::Status::Complete((consumed, size))) => {
                    at += consumed;
                    parser.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::ChunkData { remaining: size }
                    };
                }
                // Extensions make the line arbitrarily long; a real one is short.
                Ok(httparse::Status::Partial) if rest.len() <= limits.max_head_bytes => break,
                Ok(httparse::Status::Partial) | Err(_) => {
                    book.record(Http1Error::Chunk { direction });
                    book.cut_message(parser);
                }
            },
            State::ChunkData { remaining } => {
                let take = rest
                    .len()
                    .min(usize::try_from(remaining).unwrap_or(usize::MAX));
                book.body(parser, &rest[..take], ts_ns);
                at += take;
                let remaining = remaining - take as u64;
                if remaining == 0 {
                    parser.state = State::ChunkEnd;
                } else {
                    parser.state = State::ChunkData { remaining };
                    break;
                }
            }
            State::ChunkEnd => {
                if rest.starts_with(b"\r\n") {
                    at += 2;
                    parser.state = State::ChunkSize;
                } else if rest.is_empty() || rest == b"\r" {
                    break;
                } else {
                    book.record(Http1Error::Chunk { direction });
                    book.cut_message(parser);
                }
            }
            State::Trailers => match framing::parse_trailers(rest, limits.max_head_bytes) {
                Ok(Decoded::Message { msg, consumed }) => {
                    at += consumed;
                    book.trailers(parser, msg, ts_ns);
                    book.end_message(parser);
                }
                Ok(Decoded::Incomplete | Decoded::NotMine) => break,
                Err(error) => {
                    book.record(Http1Error::Head { direction, error });
                    book.cut_message(parser);
                }
            },
        }
    }
    parser.buf.drain(..at);
    parser.head_checked = parser.head_checked.min(parser.buf.len());
}

/// Whether `buf` may now hold a complete head: only if a line ending in an
/// empty line has arrived past what was checked before. Saves re-parsing a
/// head arriving in many small pieces.
fn may_hold_head_end(buf: &[u8], checked: usize) -> bool {
    let new = buf.get(checked.saturating_sub(2)..).unwrap_or(buf);
    new.windows(2).any(|w| w == b"\n\n") || new.windows(3).any(|w| w == b"\n\r\n")
}

/// A parsed head of either direction.
enum Head {
    Request(RequestHead),
    Response(ResponseHead),
}

fn map_decoded<T>(decoded: Decoded<T>, f: impl FnOnce(T) -> Head) -> Decoded<Head> {
    match decoded {
        Decoded::Message { msg, consumed } => Decoded::Message {
            msg: f(msg),
            consumed,
        },
        Decoded::Incomplete => Decoded::Incomplete,
        Decoded::NotMine => Decoded::NotMine,
    }
}

impl Book {
    fn record(&mut self, error: Http1Error) {
        if self.errors.len() < self.limits.max_errors {
            self.errors.push(error);
        } else {
            self.errors_dropped += 1;
        }
    }

    fn find(&mut self, id: Option<u64>) -> Option<&mut InFlight> {
        let id = id?;
        self.in_flight
            .iter_mut()
            .rev()
            .find(|f| f.exchange.id == id)
    }

    /// A new exchange at the back, evicting the oldest past the limit.
    fn open(&mut self) -> &mut InFlight {
        if self.in_flight.len() >= self.limits.max_pending_exchanges {
            if let Some(oldest) = self.in_flight.pop_front() {
                self.done.push(oldest.exchange);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight.push_back(InFlight::new(id));
        let last = self.in_flight.len() - 1;
        &mut self.in_flight[last]
    }

    /// The exchange the next response answers: the oldest without one. A
    /// response nothing is waiting for (its request predates capture) gets
    /// an exchange of its own.
    fn awaiting_response(&mut self) -> &mut InFlight {
        match self
            .in_flight
            .iter()
            .position(|f| f.exchange.response.is_none() && !f.response_done)
        {
            Some(i) => &mut self.in_flight[i],
            None => {
                let flight = self.open();
                flight.request_done = true;
                flight
            }
        }
    }

    /// A head was parsed: pair it, decide its body's framing, and return
    /// the parser's next state.
    fn start_message(&mut self, parser: &mut Parser, head: Head, ts_ns: u64) -> State {
        let direction = parser.direction;
        let framing = match head {
            Head::Request(head) => {
                let framing = framing::request_framing(&head);
                let flight = self.open();
                flight.exchange.request = Some(Request {
                    method: head.method,
                    target: head.target,
                    minor_version: head.minor_version,
                    half: Half::new(head.headers, Framing::Empty, ts_ns),
                });
                parser.current = Some(flight.exchange.id);
                framing
            }
            Head::Response(head) => {
                let flight = self.awaiting_response();
                let method = flight.exchange.request.as_ref().map(|r| r.method.as_str());
                let framing = framing::response_framing(&head, method);
                if (100..200).contains(&head.status) && head.status != 101 {
                    // Interim: the final response follows on the same exchange.
                    flight.exchange.informational.push(head.status);
                    flight.exchange.informational.truncate(8);
                    return State::Head;
                }
                if framing == Ok(Framing::Switched) {
                    flight.exchange.upgrade = Some(if head.status == 101 {
                        Upgrade::Protocol(head.headers.get("upgrade").unwrap_or("").to_string())
                    } else {
                        Upgrade::Tunnel
                    });
                }
                let watch = watch_format(&flight.exchange, &head);
                let raft = peer_stream(&flight.exchange, &head);
                flight.stream = match (watch, raft) {
                    (Some(format), _) => Some(BodyStream::Watch(WatchDecoder::new(format))),
                    (_, Some(stream)) => Some(BodyStream::Raft(RaftStreamDecoder::new(stream))),
                    _ => None,
                };
                flight.exchange.response = Some(Response {
                    status: head.status,
                    reason: head.reason,
                    minor_version: head.minor_version,
                    half: Half::new(head.headers, Framing::Empty, ts_ns),
                    watch,
                    raft,
                });
                parser.current = Some(flight.exchange.id);
                framing
            }
        };
        let framing = match framing {
            Ok(framing) => framing,
            Err(error) => {
                self.record(Http1Error::Framing { direction, error });
                self.cut_message(parser);
                return parser.state;
            }
        };
        if let Some(half) = self
            .find(parser.current)
            .and_then(|f| f.half_mut(direction))
        {
            half.framing = framing;
        }
        match framing {
            Framing::Empty => {
                self.end_message(parser);
                parser.state
            }
            Framing::Length(remaining) => State::Length { remaining },
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
            Framing::Switched => {
                self.end_message(parser);
                self.switched = true;
                State::Switched
            }
        }
    }

    fn body(&mut self, parser: &Parser, bytes: &[u8], ts_ns: u64) {
        let max_body_bytes = self.limits.max_body_bytes;
        let direction = parser.direction;
        let Some(flight) = self.find(parser.current) else {
            return;
        };
        let id = flight.exchange.id;
        let streamed = flight
            .stream
            .as_mut()
            .map(|decoder| decoder.push(bytes, false));
        let Some(half) = flight.half_mut(direction) else {
            return;
        };
        half.last_ts_ns = ts_ns;
        half.body_len += bytes.len() as u64;
        if streamed.is_none() {
            let kept = bytes
                .len()
                .min(max_body_bytes.saturating_sub(half.body.len()));
            half.body.extend_from_slice(&bytes[..kept]);
        }
        if let Some(streamed) = streamed {
            self.streamed(id, ts_ns, streamed);
        }
    }

    /// Queues what a body stream decoded (bounded) and records its problems.
    fn streamed(&mut self, exchange_id: u64, ts_ns: u64, streamed: Streamed) {
        let max = self.limits.max_stream_events;
        let dropped = &mut self.stream_events_dropped;
        let errors: Vec<Http1Error> = match streamed {
            Streamed::Watch(events, errors) => {
                let updates = events.into_iter().map(|event| WatchUpdate {
                    exchange_id,
                    ts_ns,
                    event,
                });
                queue_bounded(&mut self.watch_events, max, dropped, updates);
                errors
                    .into_iter()
                    .map(|error| Http1Error::Watch { exchange_id, error })
                    .collect()
            }
            Streamed::Raft(stream, messages, errors) => {
                let updates = messages.into_iter().map(|message| RaftUpdate {
                    exchange_id,
                    stream,
                    ts_ns,
                    message,
                });
                queue_bounded(&mut self.raft_messages, max, dropped, updates);
                errors
                    .into_iter()
                    .map(|error| Http1Error::Raft { exchange_id, error })
                    .collect()
            }
        };
        for error in errors {
            self.record(error);
        }
    }

    fn trailers(&mut self, parser: &Parser, trailers: Headers, ts_ns: u64) {
        if let Some(half) = self
            .find(parser.current)
            .and_then(|f| f.half_mut(parser.direction))
        {
            half.trailers = Some(trailers);
            half.last_ts_ns = ts_ns;
        }
    }

    /// The current message ended where its framing says.
    fn end_message(&mut self, parser: &mut Parser) {
        self.close_message(parser, false);
        parser.state = State::Head;
    }

    /// The current message cannot be followed further (bad framing or
    /// chunk): it is lossy and the direction searches for the next one.
    fn cut_message(&mut self, parser: &mut Parser) {
        self.close_message(parser, true);
        parser.state = State::Searching;
    }

    fn close_message(&mut self, parser: &mut Parser, lossy: bool) {
        let direction = parser.direction;
        let Some(flight) = self.find(parser.current.take()) else {
            return;
        };
        if let Some(half) = flight.half_mut(direction) {
            half.ended = !lossy;
            half.lossy |= lossy;
        }
        match direction {
            Direction::ClientToServer => flight.request_done = true,
            Direction::ServerToClient => flight.response_done = true,
        }
    }

    /// A head that failed to parse: a message of this direction is lost.
    /// A request that is lost still had a response coming, so a placeholder
    /// exchange keeps later responses paired with their requests; a lost
    /// response closes the exchange it answered.
    fn lose_head(&mut self, direction: Direction, partial: &[u8], ts_ns: u64) {
        match direction {
            Direction::ClientToServer => {
                let flight = self.open();
                flight.exchange.head_lost = true;
                flight.request_done = true;
                // The start line may have arrived whole even if the head did not.
                if let Some((method, target)) = request_line(partial) {
                    flight.exchange.request = Some(Request {
                        method,
                        target,
                        minor_version: 1,
                        half: Half {
                            lossy: true,
                            ..Half::new(Headers::default(), Framing::Empty, ts_ns)
                        },
                    });
                }
            }
            Direction::ServerToClient => {
                let flight = self.awaiting_response();
                flight.exchange.head_lost = true;
                flight.response_done = true;
            }
        }
    }

    /// The chunk just pushed was truncated: the message it was in lost bytes.
    fn lose_bytes(&mut self, parser: &mut Parser, ts_ns: u64) {
        let direction = parser.direction;
        let dropped_bytes = parser.buf.len();
        match parser.state {
            // Nothing more will be decoded, or nothing is known to be lost.
            State::Switched | State::Searching => {}
            State::UntilClose => {
                // The body still ends at the close: nothing after it can be
                // misread, so keep counting it, marked lossy.
                let id = parser.current;
                if let Some(flight) = self.find(id) {
                    let streamed = flight.stream.as_mut().map(|s| s.push(&[], true));
                    if let Some(half) = flight.half_mut(direction) {
                        half.lossy = true;
                        half.last_ts_ns = ts_ns;
                    }
                    if let (Some(id), Some(streamed)) = (id, streamed) {
                        self.streamed(id, ts_ns, streamed);
                    }
                }
                return;
            }
            State::Head => {
                // The write went on past this chunk, so a head was cut.
                let partial = std::mem::take(&mut parser.buf);
                self.lose_head(direction, &partial, ts_ns);
            }
            State::Length { .. }
            | State::ChunkSize
            | State::ChunkData { .. }
            | State::ChunkEnd
            | State::Trailers => {
                let id = parser.current;
                let streamed = self
                    .find(id)
                    .and_then(|f| f.stream.as_mut())
                    .map(|s| s.push(&[], true));
                if let (Some(id), Some(streamed)) = (id, streamed) {
                    self.streamed(id, ts_ns, streamed);
                }
                self.cut_message(parser);
            }
        }
        self.record(Http1Error::BytesLost {
            direction,
            dropped_bytes,
        });
        parser.buf.clear();
        parser.head_checked = 0;
        if parser.state != State::Switched {
            parser.state = State::Searching;
        }
    }

    /// Hands out finished exchanges from the front: responses come in
    /// request order, so a finished exchange behind an unfinished one waits.
    fn release(&mut self) {
        while self
            .in_flight
            .front()
            .is_some_and(|f| f.request_done && f.response_done)
        {
            if let Some(mut flight) = self.in_flight.pop_front() {
                let exchange = &mut flight.exchange;
                exchange.complete = exchange.request.as_ref().is_some_and(|r| r.half.ended)
                    && exchange.response.as_ref().is_some_and(|r| r.half.ended);
                self.done.push(flight.exchange);
            }
        }
    }
}

/// The watch format of a response, if its request is a Kubernetes watch
/// and it succeeded with a watch media type.
fn watch_format(exchange: &Exchange, head: &ResponseHead) -> Option<WatchFormat> {
    if !(200..300).contains(&head.status) || !exchange.rest()?.is_watch() {
        return None;
    }
    WatchFormat::from_content_type(head.headers.get("content-type")?)
}

/// Appends `items` to `queue` while it holds fewer than `max`; counts the rest.
fn queue_bounded<T>(
    queue: &mut Vec<T>,
    max: usize,
    dropped: &mut usize,
    items: impl IntoIterator<Item = T>,
) {
    for item in items {
        if queue.len() < max {
            queue.push(item);
        } else {
            *dropped += 1;
        }
    }
}

/// The etcd peer stream a response opens, if its request was a stream's
/// and it succeeded.
fn peer_stream(exchange: &Exchange, head: &ResponseHead) -> Option<PeerStream> {
    let request = exchange.request.as_ref()?;
    if head.status != 200 {
        return None;
    }
    PeerStream::from_request(
        &request.method,
        &request.target,
        request.half.headers.get("x-raft-to"),
    )
}

/// Method and target of a complete request line at the start of `partial`.
fn request_line(partial: &[u8]) -> Option<(String, String)> {
    if framing::find_start_line(partial, true) != StartLine::At(0) {
        return None;
    }
    let line = partial.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split(' ');
    Some((words.next()?.to_string(), words.next()?.to_string()))
}
