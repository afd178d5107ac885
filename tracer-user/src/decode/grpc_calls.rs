//! HTTP/2 connections → gRPC calls → CRI and etcd KV calls, and HTTP/2 or
//! HTTP/1.1 connections → Kubernetes REST requests, with `tracer-decode`.
//!
//! In: connection events (which side accepted: that fixes which direction is
//! the client's) and data chunks of followed sockets — for TLS sockets, the
//! plaintext Go's crypto/tls probes report. Out: one [`CriMessage`] per
//! finished CRI call and one [`EtcdMessage`] per finished etcd write about a
//! Pod, with what identifies the Pod, and one [`RestMessage`] per finished
//! REST request that writes a Pod. A connection whose first bytes are an
//! HTTP/1.x request line or status line (the official Python client, curl,
//! most non-Go tools talk HTTP/1.1 to kube-apiserver) is decoded as HTTP/1.1;
//! any other as HTTP/2.
//!
//! Connections open before podtrace started are decoded from wherever the
//! capture joins them (/proc told which end the process is). Their HPACK
//! dynamic table was built before, so request header blocks often do not
//! decode from the wire; Go's HPACK probes report the fields instead
//! ([`super::headers`] ties them to the connection), and they are given to
//! the streams in order — a connection's request header blocks are encoded
//! and decoded in stream-id order — each to the stream whose first bytes
//! were captured within [`PROBE_BLOCK_WINDOW_NS`] of it (a stream begun
//! before podtrace started has no block; a block whose frame was lost, as
//! the read a Go reader was blocked in when the probes attached, no stream).

use std::{net::IpAddr, sync::Arc};

use rustc_hash::FxHashMap;

use tracer_common::io::{ConnAction, Direction, FdKind, HeaderSide};
use tracer_decode::{
    Decoded,
    cri::{ContainerFacts, CriCall},
    etcd::{KvCall, KvRequest, KvResponse, WriteKind},
    grpc::{GrpcCall, parse_message},
    http1::{self, Http1Connection},
    http2::{
        Exchange, HalfStream, Http2Connection, Limits, Lost, SeenStream, TableCopy, TableLoadError,
        TablePoint, frame,
    },
    identity::{
        PodClue, PodIdentity, ResourcesNamed, may_hold_pod_clue, resources_named,
        writes_only_opaque_pods,
    },
    kube::{ApiStatus, StoredObject, decode_status, decode_stored_object},
    raft::joined::JoinedStream,
    rest::{RestRequest, Verb},
};

use super::{
    HeaderMessage, Message, TableCopyMessage,
    decoded_once::DecodedOnce,
    headers::starts_block,
    raft_peers::{PeerStreams, StreamEnd},
    tls_streams::{starts_tls_handshake, starts_tls_record},
};
use crate::capture::{CaptureControl, ConnKey, ConnRecord, DataRecord, HpackControl, Peer};

/// Connections decoded at once; past it new ones are counted and skipped.
const MAX_CONNECTIONS: usize = 4096;
/// Finished etcd KV requests, all naming keys of one resource other than
/// Pods, after which a connection is muted ([`GrpcDecoder::mute_after`]):
/// kube-apiserver opens an etcd client, so a connection, per resource
/// (every release through 1.33), and its writes of leases, events or
/// endpoints are most of what etcd carries. Enough requests that a client
/// shared by several resources would have shown two of them.
pub const MUTE_AFTER_REQUESTS: u32 = 64;
/// Longest error text kept from a failed call.
pub const MAX_STATUS_MESSAGE: usize = 256;

/// What an HTTP/2 client sends first.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Header blocks from the probes waiting for their stream, per connection.
const MAX_WAITING_BLOCKS: usize = 64;
/// How far apart a probe's header block and its stream's first captured
/// bytes may be: the block is encoded just before the write, or decoded
/// just after the read, that carries it.
pub const PROBE_BLOCK_WINDOW_NS: u64 = 20_000_000;
/// Copies of one table asked for before podtrace gives up on it (each can
/// be refused when it was taken inside a header block).
const MAX_TABLE_ATTEMPTS: u8 = 8;
/// How long a process's HPACK probes stay attached after it last needed
/// them: a connection that loses bytes (a read longer than capture keeps)
/// forgets its tables and needs the probes until a copy is loaded, and
/// attaching them to a large process and detaching them again, three times
/// within a second of a Pod start (containerd, its image imports), cost
/// more than the probes held.
const FIELD_PROBES_HOLD_NS: u64 = 1_000_000_000;

/// What the decode stage last said of a process's HPACK probes.
#[derive(Clone, Copy, Debug, Default)]
struct FieldProbes {
    /// Attach (true) or detach (false); `None` before anything was said.
    said: Option<bool>,
    /// When their need was last looked at.
    checked_ns: u64,
    /// When a connection of the process last needed them.
    last_needed_ns: u64,
}

/// How long a connection older than podtrace that has carried nothing yet
/// keeps the HPACK probes attached: its first request usually comes soon,
/// and without the probes that request's `:path` would be lost.
const IDLE_GRACE_NS: u64 = 1_000_000_000;
/// The same for a TLS connection whose secrets were missed: its requests
/// until then built its HPACK tables unseen, and its next may be a while
/// away (a kubelet's status updates come every 10 s when no Pod changes).
const SECRETS_MISSED_GRACE_NS: u64 = 30_000_000_000;
/// How long after its joining, and after each request, a connection older
/// than podtrace whose HPACK tables are not loaded yet holds its process's
/// HPACK probes. Its tables can only be copied around a request (at the
/// goroutine that encodes or decodes it), and while the probes are attached
/// every header field of every request of the process is a trap: a
/// connection that only watches or pings (most of kube-apiserver's
/// per-resource etcd clients, every client that watches the apiserver) held
/// them 30 s, and the apiserver paid ~50 traps a request for it. A later
/// request may bring them back, once (`Connection::calls_probes_back`), and
/// that request's fields that refer to the table as it was before podtrace
/// are lost.
const REQUEST_IDLE_GRACE_NS: u64 = 2_000_000_000;
/// How often a process whose HPACK probes are attached is looked at again.
const FIELD_PROBES_RECHECK_NS: u64 = 250_000_000;
/// How long the table of what a connection answers (responses' headers:
/// statuses) may keep the HPACK probes attached once asked for. The
/// request side holds them until loaded; a response side whose copy never
/// comes (its encoder used by another goroutine than the writer) does not
/// hold them for the process's lifetime.
const RESPONSE_TABLE_WAIT_NS: u64 = 10_000_000_000;

/// Which end of the connection the process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// It accepted the connection: it handles the calls.
    Server,
    /// It connected: it makes the calls.
    Client,
}

/// One finished CRI call on one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriMessage {
    /// The connection.
    pub conn: ConnKey,
    /// The HTTP/2 stream: the same number at both ends of the connection.
    pub stream_id: u32,
    /// Whether the process handled or made the call.
    pub side: Side,
    /// `runtime.v1.RuntimeService`, `runtime.v1.ImageService`.
    pub service: String,
    /// `RunPodSandbox`, …
    pub method: String,
    /// What the call says about its Pod (no payloads, no secrets).
    pub clues: Vec<PodClue>,
    /// CreateContainer, ImageStatus, PullImage, RunPodSandbox: the image
    /// and the security context asked for (settings and names only).
    pub facts: Option<Box<ContainerFacts>>,
    /// gRPC status code, when the trailers were captured.
    pub status_code: Option<u32>,
    /// The server's error text (`grpc-message`) of a failed call, cut to
    /// [`MAX_STATUS_MESSAGE`] bytes: what `explain` shows as the reason.
    pub status_message: Option<String>,
    /// Request start and response end (CLOCK_MONOTONIC ns), where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

/// One finished etcd KV write that names a Pod (reads and writes of other
/// objects are not reported: no Pod span comes of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMessage {
    /// The connection.
    pub conn: ConnKey,
    /// Whether the process handled (etcd) or made (kube-apiserver) the call.
    pub side: Side,
    /// `Txn`, `Put`, `DeleteRange`.
    pub method: String,
    /// Create, update or delete.
    pub write: WriteKind,
    /// The Pod keys and the identity in written Pod objects.
    pub clues: Arc<[PodClue]>,
    /// Digest of the request's canonical bytes: the same for the client's
    /// call, the server's and the Raft entry in the WAL.
    pub fingerprint: [u8; 16],
    /// Store revision after the write, when the response was captured.
    pub revision: Option<i64>,
    /// For a Txn: whether its compares held (false: a conflict, no write).
    pub txn_succeeded: Option<bool>,
    /// gRPC status code, when the trailers were captured.
    pub status_code: Option<u32>,
    /// Request start and response end (CLOCK_MONOTONIC ns), where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

/// One finished Kubernetes REST request that writes a Pod: a create, update,
/// patch or delete of `pods`, or of its `binding` and `status` subresources.
/// Reads and watches are not reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestMessage {
    /// The connection.
    pub conn: ConnKey,
    /// The HTTP/2 stream.
    pub stream_id: u32,
    /// Whether the process handled (kube-apiserver) or made the request.
    pub side: Side,
    /// `POST`, `PATCH`, …
    pub method: String,
    /// The route template (`/api/v1/namespaces/{namespace}/pods`).
    pub route: String,
    /// The Kubernetes verb (`create`, `patch`, …).
    pub verb: String,
    /// From the path.
    pub namespace: Option<String>,
    /// From the path (absent for a create).
    pub name: Option<String>,
    /// `binding`, `status`.
    pub subresource: Option<String>,
    /// `?dryRun=All`: admission runs, nothing is stored.
    pub dry_run: bool,
    /// `:status`, when the response headers were captured.
    pub status: Option<u16>,
    /// The client's `user-agent`.
    pub user_agent: Option<String>,
    /// The Pod the response returned (a create's UID is known from here).
    pub pod: Option<PodIdentity>,
    /// The request path, without the query.
    pub path: String,
    /// For a failure: the `Status` the apiserver answered, its message cut
    /// to [`MAX_STATUS_MESSAGE`] bytes.
    pub error: Option<ApiStatus>,
    /// `warning` response headers (Pod Security warnings), each cut.
    pub warnings: Vec<String>,
    /// Request start and response end (CLOCK_MONOTONIC ns), where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

struct Connection {
    side: Side,
    http2: Http2Connection,
    /// Set when the connection's first bytes were HTTP/1.x: then `http2`
    /// is not fed.
    http1: Option<Box<Http1Connection>>,
    /// Whether the protocol was told from the first bytes.
    sniffed: bool,
    /// Bytes fed to `http2` so far.
    fed_bytes: u64,
    /// Plaintext from the TLS probes has been seen: the socket's own bytes
    /// (the handshake, then ciphertext) are not HTTP/2.
    tls: bool,
    /// Whether the client's first bytes fed were seen (the preface, or
    /// the middle of a connection whose start was missed).
    client_start_seen: bool,
    /// Connected or accepted while podtrace watched: its first bytes are
    /// its protocol's first.
    from_start: bool,
    /// For a connection open before podtrace started: whether the first
    /// bytes seen of each direction (client → server, server → client)
    /// began with HTTP/2 frames or HTTP/1.
    joined_first_bytes: [Option<bool>; 2],
    /// For a connection open before podtrace started: request header
    /// blocks from the HPACK probes, to be given to their streams.
    probe_headers: Option<ProbeHeaders>,
    /// For such a connection: where copying Go's HPACK tables
    /// stands. Once both are loaded, the wire decodes every block and the
    /// probes' fields are no longer needed.
    tables: Option<TableSync>,
    /// `http2.table_resets` of (client → server, server → client) when
    /// last looked at: a reset makes the tables unknown again.
    resets_seen: (u64, u64),
    /// When decoding it began (CLOCK_MONOTONIC ns).
    joined_ts_ns: u64,
    /// How long from then it needs the HPACK probes while it carries
    /// nothing ([`IDLE_GRACE_NS`], or [`SECRETS_MISSED_GRACE_NS`]).
    idle_grace_ns: u64,
    /// When it last carried a request header block (0: none since joined).
    last_request_ns: u64,
    /// Whether a request whose headers the wire could not decode has
    /// called the HPACK probes back already: it may once ([`Self::calls_probes_back`]).
    called_probes_back: bool,
    /// What its etcd KV requests named so far.
    keys: KeysSeen,
    /// For a connection open before podtrace started: an etcd peer stream
    /// being placed in its body, then decoded ([`JoinedStream`]).
    joined_raft: Option<Box<JoinedStream>>,
    /// For a TCP connection open before podtrace started: its local port
    /// and the other end's port ([`PeerStreams::on_open`]).
    ports: Option<(u16, u16)>,
    /// For a TCP connection: the other end's address.
    remote_ip: Option<IpAddr>,
}

/// What a connection's etcd KV requests named so far: whether the
/// connection can be muted.
#[derive(Debug, Default)]
enum KeysSeen {
    #[default]
    Nothing,
    /// This many finished requests, all of keys of this one resource.
    One { resource: Box<[u8]>, requests: u32 },
    /// This many finished requests, each writing under Pod keys only values
    /// that are no stored object ([`writes_only_opaque_pods`]): not
    /// kube-apiserver, whose every Pod write is its protobuf, JSON or
    /// encrypted at rest. Its bytes cost a copy and a decode each, and can
    /// never become a span.
    OpaquePods { requests: u32 },
    /// Pods, several resources, compressed requests, or not etcd: kept.
    Kept,
}

impl KeysSeen {
    /// Notes a finished exchange; returns whether the connection has now
    /// carried `mute_after` requests of one resource other than Pods, or
    /// of values under Pod keys that are no stored object.
    fn note(&mut self, exchange: &Exchange, mute_after: u32) -> bool {
        if matches!(self, Self::Kept) {
            return false;
        }
        let Some(path) = exchange.path() else {
            // Headers lost (a stream begun before podtrace): not counted.
            return false;
        };
        if !path.starts_with("/etcdserverpb.") {
            *self = Self::Kept;
            return false;
        }
        if !path.starts_with("/etcdserverpb.KV/") {
            // Leases, watches, maintenance: no key decides anything.
            return false;
        }
        if exchange.request.header("grpc-encoding").is_some() {
            *self = Self::Kept;
            return false;
        }
        let named = match resources_named(&exchange.request.body) {
            ResourcesNamed::None => return false,
            // A body seen only in part (bytes lost, over the body limit, a
            // stream cut at exit) can tell neither kind of Pod write: it
            // neither keeps nor counts.
            ResourcesNamed::PodsOrSeveral if !seen_whole(&exchange.request) => return false,
            ResourcesNamed::PodsOrSeveral if opaque_pod_writes(path, &exchange.request.body) => {
                *self = match self {
                    Self::Nothing => Self::OpaquePods { requests: 1 },
                    Self::OpaquePods { requests } => Self::OpaquePods {
                        requests: *requests + 1,
                    },
                    _ => Self::Kept,
                };
                return matches!(self, Self::OpaquePods { requests } if *requests >= mute_after);
            }
            ResourcesNamed::PodsOrSeveral => None,
            ResourcesNamed::One(resource) => Some(resource),
        };
        *self = match (std::mem::take(self), named) {
            (Self::Nothing, Some(resource)) => Self::One {
                resource: resource.into(),
                requests: 1,
            },
            (Self::One { resource, requests }, Some(named)) if *resource == *named => Self::One {
                resource,
                requests: requests + 1,
            },
            _ => Self::Kept,
        };
        matches!(self, Self::One { requests, .. } if *requests >= mute_after)
    }
}

/// Whether every byte of a request's side was seen and kept.
fn seen_whole(half: &HalfStream) -> bool {
    half.ended && !half.lossy && half.body_bytes_dropped == 0
}

/// Whether the gRPC request `body` of KV method `path` writes only values
/// under Pod keys that are no stored object ([`writes_only_opaque_pods`]).
/// Decoded in full only while a connection has not been kept (its first
/// Pod request that is kube-apiserver's keeps it).
fn opaque_pod_writes(path: &str, body: &[u8]) -> bool {
    let Some(method) = path.strip_prefix("/etcdserverpb.KV/") else {
        return false;
    };
    let Ok(Decoded::Message { msg, consumed }) = parse_message(body) else {
        return false;
    };
    consumed == body.len()
        && !msg.compressed
        && KvRequest::decode(method, msg.bytes)
            .is_ok_and(|request| writes_only_opaque_pods(&request))
}

impl Connection {
    /// Where this connection's end `conn` is, for naming the members of a
    /// peer stream on it.
    fn stream_end(&self, conn: ConnKey) -> StreamEnd {
        StreamEnd {
            conn,
            accepted: self.side == Side::Server,
            ports: self.ports,
            remote_ip: self.remote_ip,
        }
    }

    /// Whether the HPACK probes' fields are still needed for this connection:
    /// its request headers cannot all be decoded from the wire yet.
    fn needs_fields(&self, now_ns: u64) -> bool {
        // A connection idle since podtrace joined it needs nothing after a
        // grace period: its first bytes bring the probes back.
        let idle = self.fed_bytes == 0 && now_ns > self.joined_ts_ns + self.idle_grace_ns;
        if self.probe_headers.is_none() || idle || now_ns > self.need_ends_ns() {
            return false;
        }
        let Some(tables) = &self.tables else {
            return true;
        };
        let (request, response) = match self.side {
            Side::Server => (tables.decoder, tables.encoder),
            Side::Client => (tables.encoder, tables.decoder),
        };
        let response_waits = matches!(response, TableLoad::Waiting { .. })
            && now_ns < tables.asked_ts_ns.saturating_add(RESPONSE_TABLE_WAIT_NS);
        request != TableLoad::Loaded || response_waits
    }

    /// Until when its need for the HPACK probes lasts without a request:
    /// [`REQUEST_IDLE_GRACE_NS`] after its joining or its last request that
    /// held it open, at least its idle grace.
    fn need_ends_ns(&self) -> u64 {
        let since = self.joined_ts_ns.max(self.last_request_ns);
        (since + REQUEST_IDLE_GRACE_NS).max(self.joined_ts_ns + self.idle_grace_ns)
    }

    /// Whether `exchange`, finished on this connection, brings the HPACK
    /// probes back: the first one whose `:path` the wire could not decode
    /// (its table entry predates podtrace and no copy of the table was
    /// loaded), if it can be about a Pod — a REST request, or a gRPC one
    /// whose body names Pods. Not a gRPC request that names no Pod: the
    /// per-minute object count and the lease keep-alives of kube-apiserver's
    /// ~30 per-resource etcd clients, each calling the probes back for
    /// seconds, kept the apiserver's attached through its first minutes. Not
    /// the later ones: a connection whose tables cannot be copied would call
    /// them back for good. The request itself is lost either way; the probes
    /// read the next ones.
    fn calls_probes_back(&mut self, exchange: &Exchange) -> bool {
        // A stream begun before podtrace (no request header block seen)
        // tells nothing of the table.
        let unresolved_path = exchange.request.headers.is_some() && exchange.path().is_none();
        if self.called_probes_back || self.probe_headers.is_none() || !unresolved_path {
            return false;
        }
        let loaded = self.tables.as_ref().is_some_and(|tables| {
            let request = match self.side {
                Side::Server => tables.decoder,
                Side::Client => tables.encoder,
            };
            request == TableLoad::Loaded
        });
        if loaded {
            return false;
        }
        self.called_probes_back = true;
        let body = &exchange.request.body;
        let grpc = matches!(
            parse_message(body),
            Ok(Decoded::Message { consumed, .. }) if consumed == body.len()
        );
        match resources_named(body) {
            ResourcesNamed::PodsOrSeveral => true,
            ResourcesNamed::One(_) => false,
            ResourcesNamed::None => !grpc,
        }
    }

    /// The wire direction of what the process receives or sends.
    fn wire_direction(&self, table: HeaderSide) -> tracer_decode::Direction {
        match (self.side, table) {
            (Side::Server, HeaderSide::Decoder) | (Side::Client, HeaderSide::Encoder) => {
                tracer_decode::Direction::ClientToServer
            }
            (Side::Server, HeaderSide::Encoder) | (Side::Client, HeaderSide::Decoder) => {
                tracer_decode::Direction::ServerToClient
            }
        }
    }
}

/// Where copying a connection's two HPACK tables stands.
#[derive(Debug, Default)]
struct TableSync {
    /// The process's decoder: what it receives.
    decoder: TableLoad,
    /// The process's encoder: what it sends.
    encoder: TableLoad,
    /// A copy of the encoder's table, taken at a write whose bytes come next.
    pending_encoder: Option<Option<TableCopy>>,
    /// When the copies were last asked for (CLOCK_MONOTONIC ns).
    asked_ts_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TableLoad {
    Waiting { attempts: u8 },
    Loaded,
    GaveUp,
}

impl Default for TableLoad {
    fn default() -> Self {
        Self::Waiting { attempts: 0 }
    }
}

impl TableSync {
    fn load_mut(&mut self, side: HeaderSide) -> &mut TableLoad {
        match side {
            HeaderSide::Decoder => &mut self.decoder,
            HeaderSide::Encoder => &mut self.encoder,
        }
    }
}

/// Request header blocks reported by Go's HPACK probes on one connection.
#[derive(Default)]
struct ProbeHeaders {
    /// Blocks in the order they were encoded or decoded; the last one may
    /// still be growing. A block with a stream has been given to it.
    blocks: std::collections::VecDeque<ProbeBlock>,
    /// The highest stream id given a block in order.
    paired_through: u32,
    /// Streams given a block lately.
    paired: std::collections::VecDeque<u32>,
}

struct ProbeBlock {
    fields: Vec<(String, String)>,
    /// When its first field was encoded or decoded.
    ts_ns: u64,
    stream: Option<u32>,
}

impl ProbeHeaders {
    /// Adds one field, starting the next block where [`starts_block`] says.
    fn add(&mut self, name: &str, value: &str, ts_ns: u64) -> Option<u32> {
        let starts_block = self
            .blocks
            .back()
            .is_none_or(|block| starts_block(block.fields.iter().map(|(n, _)| n.as_str()), name));
        if starts_block {
            // Blocks already given to a stream are done with, but the last.
            while self.blocks.len() > 1 && self.blocks.front().is_some_and(|b| b.stream.is_some()) {
                self.blocks.pop_front();
            }
            if self.blocks.len() >= MAX_WAITING_BLOCKS {
                self.blocks.pop_front();
            }
            self.blocks.push_back(ProbeBlock {
                fields: Vec::new(),
                ts_ns,
                stream: None,
            });
        }
        let block = self.blocks.back_mut()?;
        block.fields.push((name.to_owned(), value.to_owned()));
        block.stream
    }

    /// Gives waiting blocks to the streams whose request began since;
    /// returns the pairs. A stream whose `:path` the wire decoded (a literal,
    /// right even when the dynamic table is not) gets the block with that
    /// path; the others get the blocks in order. Order alone misleads when a
    /// block was lost: every later block would go to the stream before its own.
    fn pair(&mut self, streams: &[SeenStream]) -> Vec<(u32, Vec<(String, String)>)> {
        let mut pairs = Vec::new();
        for stream in streams {
            let Some(path) = &stream.wire_path else {
                continue;
            };
            if self.paired.contains(&stream.id) {
                continue;
            }
            let found = self.blocks.iter_mut().find(|block| {
                block.stream.is_none()
                    && block.path() == Some(path.as_str())
                    && block.ts_ns.abs_diff(stream.first_ts_ns) <= PROBE_BLOCK_WINDOW_NS
            });
            if let Some(block) = found {
                block.stream = Some(stream.id);
                pairs.push((stream.id, block.fields.clone()));
                self.mark_paired(stream.id);
            }
        }
        let paired_through = self.paired_through;
        let mut in_order = streams
            .iter()
            .filter(|stream| {
                stream.id > paired_through
                    && stream.wire_path.is_none()
                    && !self.paired.contains(&stream.id)
            })
            .map(|stream| (stream.id, stream.first_ts_ns))
            .peekable();
        let mut newly = Vec::new();
        for block in self.blocks.iter_mut().filter(|b| b.stream.is_none()) {
            while let Some(&(id, stream_ts)) = in_order.peek() {
                if stream_ts + PROBE_BLOCK_WINDOW_NS < block.ts_ns {
                    // Begun before this block: a stream older than podtrace.
                    in_order.next();
                    continue;
                }
                if block.ts_ns + PROBE_BLOCK_WINDOW_NS >= stream_ts {
                    block.stream = Some(id);
                    pairs.push((id, block.fields.clone()));
                    newly.push(id);
                    in_order.next();
                }
                // Else the block's own frame was never seen: it waits here
                // until a newer block starts and it is dropped.
                break;
            }
        }
        for id in newly {
            self.paired_through = self.paired_through.max(id);
            self.mark_paired(id);
        }
        pairs
    }

    fn mark_paired(&mut self, id: u32) {
        if self.paired.len() >= MAX_WAITING_BLOCKS {
            self.paired.pop_front();
        }
        self.paired.push_back(id);
    }
}

impl ProbeBlock {
    fn path(&self) -> Option<&str> {
        self.fields
            .iter()
            .find(|(name, _)| name == ":path")
            .map(|(_, value)| value.as_str())
    }
}

/// HTTP/2 state per connection.
pub struct GrpcDecoder {
    connections: FxHashMap<ConnKey, Connection>,
    /// Connections muted: capture copies none of their bytes any more.
    muted: rustc_hash::FxHashSet<ConnKey>,
    /// [`MUTE_AFTER_REQUESTS`] unless configured; 0 never mutes.
    pub mute_after: u32,
    /// Connections muted since start.
    pub muted_total: u64,
    /// Of them, the ones muted for writing under Pod keys only values that
    /// are no stored object ([`KeysSeen::OpaquePods`]).
    pub muted_opaque: u64,
    /// Connections not decoded because the table was full.
    pub skipped_connections: u64,
    /// What capture is asked to do, in order; the stage takes it.
    pub control: Vec<CaptureControl>,
    /// Per process, what was last said of its HPACK probes.
    field_probes: FxHashMap<u32, FieldProbes>,
    /// Copies of HPACK tables loaded into the wire decoders.
    pub tables_loaded: u64,
    /// Copies that could not be used (taken inside a header block, lost
    /// entries); another was asked for, up to [`MAX_TABLE_ATTEMPTS`].
    pub tables_refused: u64,
    /// What etcd peer streams showed and lost.
    pub peers: PeerStreams,
}

impl Default for GrpcDecoder {
    fn default() -> Self {
        Self {
            connections: FxHashMap::default(),
            muted: rustc_hash::FxHashSet::default(),
            mute_after: MUTE_AFTER_REQUESTS,
            muted_total: 0,
            muted_opaque: 0,
            skipped_connections: 0,
            control: Vec::new(),
            field_probes: FxHashMap::default(),
            tables_loaded: 0,
            tables_refused: 0,
            peers: PeerStreams::default(),
        }
    }
}

impl std::fmt::Debug for GrpcDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcDecoder")
            .field("connections", &self.connections.len())
            .field("muted", &self.muted.len())
            .field("skipped_connections", &self.skipped_connections)
            .finish()
    }
}

impl GrpcDecoder {
    /// Starts or ends decoding a connection; a close yields its last calls.
    pub fn on_conn(&mut self, conn: &ConnRecord, once: &mut DecodedOnce) -> Vec<Message> {
        if conn.fd_kind != FdKind::Socket {
            return Vec::new();
        }
        let (side, before_start) = match conn.change {
            ConnAction::Accepted => (Side::Server, false),
            ConnAction::Connected => (Side::Client, false),
            ConnAction::AcceptedBeforeStart => (Side::Server, true),
            ConnAction::ConnectedBeforeStart => (Side::Client, true),
            ConnAction::OpenAtStart => return Vec::new(),
            ConnAction::Closed => {
                if let Some(ports) = self.connections.get(&conn.conn).and_then(|c| c.ports) {
                    self.peers.on_close(conn.conn, ports);
                }
                if self.muted.remove(&conn.conn) {
                    self.control.push(CaptureControl::Unmute(conn.conn));
                }
                let Some(connection) = self.connections.remove(&conn.conn) else {
                    return Vec::new();
                };
                if connection.tables.is_some() {
                    self.control
                        .push(CaptureControl::Hpack(HpackControl::Forget(conn.conn)));
                }
                if connection.needs_fields(conn.ids.ts_ns) {
                    self.update_field_probes(conn.conn.tgid, conn.ids.ts_ns);
                }
                if let Some(http1) = connection.http1 {
                    return http1_messages(conn.conn, connection.side, http1.finish());
                }
                return call_messages(conn.conn, connection.side, connection.http2.finish(), once);
            }
        };
        if self.connections.len() >= MAX_CONNECTIONS {
            self.skipped_connections += 1;
            return Vec::new();
        }
        let ports = match (&conn.peer, conn.local_port) {
            (Peer::Tcp(remote), Some(local)) => Some((local, remote.port())),
            _ => None,
        };
        if let Some(ports) = ports {
            self.peers.on_open(conn.conn, ports);
        }
        self.connections.insert(
            conn.conn,
            Connection {
                side,
                http2: Http2Connection::new(Limits::default()),
                http1: None,
                sniffed: false,
                fed_bytes: 0,
                client_start_seen: false,
                from_start: !before_start,
                joined_first_bytes: [None; 2],
                tls: false,
                probe_headers: before_start.then(ProbeHeaders::default),
                tables: None,
                resets_seen: (0, 0),
                joined_ts_ns: conn.ids.ts_ns,
                idle_grace_ns: IDLE_GRACE_NS,
                last_request_ns: 0,
                called_probes_back: false,
                keys: KeysSeen::default(),
                joined_raft: None,
                ports,
                remote_ip: match &conn.peer {
                    Peer::Tcp(remote) => Some(remote.ip()),
                    _ => None,
                },
            },
        );
        Vec::new()
    }

    /// A TLS connection whose secrets were missed (made while podtrace
    /// attached to its process): its plaintext will come through the
    /// per-call probes from a later request on, and the requests before it
    /// built its HPACK tables unseen. Its header fields are asked of the
    /// HPACK probes now, not at that first plaintext: they take up to a
    /// second to attach, and the requests meanwhile lost their `:path` (a
    /// kubelet's first status updates of a burst of Pods did).
    pub fn on_secrets_missed(&mut self, conn: ConnKey, now_ns: u64) {
        let Some(connection) = self.connections.get_mut(&conn) else {
            return;
        };
        connection
            .probe_headers
            .get_or_insert_with(ProbeHeaders::default);
        connection.joined_ts_ns = now_ns;
        connection.idle_grace_ns = SECRETS_MISSED_GRACE_NS;
        self.update_field_probes(conn.tgid, now_ns);
    }

    /// Feeds a chunk of a decoded connection; yields the calls it finished.
    pub fn on_data(&mut self, data: &DataRecord, once: &mut DecodedOnce) -> Vec<Message> {
        let Some(connection) = self.connections.get_mut(&data.conn) else {
            return Vec::new();
        };
        if data.tls_plaintext && !connection.tls {
            // The first plaintext of a TLS socket: what came before was the
            // handshake, which put the HTTP/2 parser out of step.
            connection.tls = true;
            if connection.fed_bytes > 0 {
                connection.http2 = Http2Connection::new(Limits::default());
                connection.resets_seen = (0, 0);
            }
            connection.http1 = None;
            connection.sniffed = false;
        } else if connection.tls && !data.tls_plaintext {
            return Vec::new();
        } else if connection.fed_bytes == 0 && starts_tls_handshake(&data.data) {
            // A TLS connection seen from its handshake (its ciphertext is
            // copied while the per-call probes are detached): its HTTP
            // begins with the plaintext that follows. Read as HTTP/2, the
            // handshake looked like a connection joined mid-stream, and
            // brought the HPACK probes back to every process that opened
            // one (containerd, etcd and the apiserver, each Pod start burst).
            connection.tls = true;
            return Vec::new();
        }
        let mut fields_changed = connection.fed_bytes == 0 && connection.probe_headers.is_some();
        connection.fed_bytes += data.data.len() as u64;
        let client_to_server = match (connection.side, data.direction) {
            (Side::Server, Direction::Ingress) | (Side::Client, Direction::Egress) => true,
            (Side::Server, Direction::Egress) | (Side::Client, Direction::Ingress) => false,
        };
        if !connection.from_start && !client_to_server && connection.http1.is_none() {
            // An etcd peer stream older than podtrace: its request was never
            // seen, its body is placed from the writer's bytes.
            let end = connection.stream_end(data.conn);
            let joined = connection.joined_raft.get_or_insert_default();
            if let Some(messages) = self.peers.joined(end, joined, data, once) {
                // Not HTTP/2: it needs no HPACK table and no probe.
                let needed_fields = connection.needs_fields(data.ids.ts_ns);
                connection.probe_headers = None;
                if connection.tables.take().is_some() {
                    self.control
                        .push(CaptureControl::Hpack(HpackControl::Forget(data.conn)));
                }
                if needed_fields {
                    self.update_field_probes(data.conn.tgid, data.ids.ts_ns);
                }
                return messages.into_iter().map(Message::Raft).collect();
            }
        }
        if !connection.from_start && !connection.tls && !starts_tls_record(&data.data) {
            // A connection older than podtrace may have been joined
            // mid-frame, so one direction's first bytes prove nothing
            // alone; when neither direction's begin with HTTP/2 frames or
            // HTTP/1 it speaks another protocol (ttrpc between containerd
            // and its shims). Read as HTTP/2 it asked for HPACK tables that
            // never come, and kept both processes' HPACK probes attached.
            let first = &mut connection.joined_first_bytes[usize::from(!client_to_server)];
            first.get_or_insert_with(|| {
                frame::starts_with_frames(&data.data)
                    || looks_like_http1(&data.data, client_to_server)
            });
            if connection.joined_first_bytes == [Some(false), Some(false)] {
                self.mute(data.conn, data.ids.ts_ns);
                return Vec::new();
            }
        }
        if client_to_server && !connection.client_start_seen {
            connection.client_start_seen = true;
            // The client's first bytes fed: the preface, or else HTTP/2
            // frames of a connection joined after its start.
            let preface = data.data.starts_with(HTTP2_PREFACE);
            let mid_frames = !preface && frame::starts_with_frames(&data.data);
            // A connection seen from its start whose client spoke neither
            // HTTP/2 nor HTTP/1 first: read as HTTP/2 its frames would be
            // noise, and each "lost" HPACK table would call the HPACK
            // probes back to its process (containerd's ttrpc to each new
            // shim did, every Pod start burst).
            if connection.from_start
                && !data.tls_plaintext
                && !preface
                && !mid_frames
                && !looks_like_http1(&data.data, true)
            {
                self.mute(data.conn, data.ids.ts_ns);
                return Vec::new();
            }
            // A connection joined after its start (the Go probes attached
            // to a process after its first TLS writes): its HPACK table was
            // built unseen, so its request headers come from the probes, as
            // on connections older than podtrace. Bytes that are not HTTP/2
            // frames (ttrpc between containerd and its shims) are not that.
            if mid_frames && connection.probe_headers.is_none() {
                connection.probe_headers = Some(ProbeHeaders::default());
                fields_changed = true;
            }
        }
        let direction = if client_to_server {
            tracer_decode::Direction::ClientToServer
        } else {
            tracer_decode::Direction::ServerToClient
        };
        if !connection.sniffed {
            connection.sniffed = true;
            if looks_like_http1(&data.data, client_to_server) {
                connection.http1 = Some(Box::new(Http1Connection::new(http1::Limits::default())));
            }
        }
        if let Some(http1) = connection.http1.as_mut() {
            http1.push(&tracer_decode::Chunk {
                direction,
                ts_ns: data.moved_ts_ns(),
                bytes: data.data.clone(),
                truncated: data.truncated,
            });
            let exchanges = http1.take_exchanges();
            let raft = http1.take_raft_messages();
            let mut messages = http1_messages(data.conn, connection.side, exchanges);
            let end = connection.stream_end(data.conn);
            messages.extend(
                self.peers
                    .from_start(end, raft, data, once)
                    .into_iter()
                    .map(Message::Raft),
            );
            return messages;
        }
        // A cut syscall's record says how much it moved: what was lost
        // can be placed (a part of one DATA payload costs that body only).
        let lost = match data.len.checked_sub(data.data.len() as u64) {
            _ if !data.truncated => Lost::Nothing,
            Some(lost) if lost > 0 => Lost::Bytes(lost),
            _ => Lost::Unknown,
        };
        let requests_before = connection
            .http2
            .header_blocks(tracer_decode::Direction::ClientToServer);
        connection
            .http2
            .push_bytes(direction, data.moved_ts_ns(), &data.data, lost);
        // A request made while the connection's own need is open holds the
        // probes on (`REQUEST_IDLE_GRACE_NS`); one made after does not, or
        // any connection's request would keep them for every other while
        // they are attached. Whether one brings them back is decided once
        // its exchange is whole (`calls_probes_back`).
        if connection
            .http2
            .header_blocks(tracer_decode::Direction::ClientToServer)
            > requests_before
            && data.ids.ts_ns <= connection.need_ends_ns()
        {
            connection.last_request_ns = data.ids.ts_ns;
        }
        if data.direction == Direction::Egress {
            if let Some(copy) = connection
                .tables
                .as_mut()
                .and_then(|tables| tables.pending_encoder.take())
            {
                let result = load_copy(connection, HeaderSide::Encoder, copy);
                fields_changed |= self.loaded(data.conn, HeaderSide::Encoder, result);
            }
        }
        let Some(connection) = self.connections.get_mut(&data.conn) else {
            return Vec::new();
        };
        fields_changed |=
            tables_forgotten(connection, &mut self.control, data.conn, data.ids.ts_ns);
        if connection.probe_headers.is_some() && connection.tables.is_none() {
            connection.tables = Some(TableSync {
                asked_ts_ns: data.ids.ts_ns,
                ..TableSync::default()
            });
            tracing::debug!(conn = ?data.conn, side = ?connection.side, "HPACK tables asked for");
            self.control
                .push(CaptureControl::Hpack(HpackControl::Ask(data.conn)));
        }
        pair_probe_headers(connection);
        let exchanges = connection.http2.take_exchanges();
        if let Some(exchange) = exchanges
            .iter()
            .find(|exchange| connection.calls_probes_back(exchange))
        {
            tracing::debug!(
                conn = ?data.conn,
                side = ?connection.side,
                named = ?resources_named(&exchange.request.body),
                "a request whose :path the wire could not decode calls the HPACK probes back"
            );
            connection.last_request_ns = data.ids.ts_ns;
            fields_changed = true;
        }
        let side = connection.side;
        let mute_after = self.mute_after;
        let mute = mute_after > 0
            && exchanges
                .iter()
                .any(|exchange| connection.keys.note(exchange, mute_after));
        if fields_changed {
            self.update_field_probes(data.conn.tgid, data.ids.ts_ns);
        }
        if mute {
            self.mute(data.conn, data.ids.ts_ns);
        }
        call_messages(data.conn, side, exchanges, once)
    }

    /// Stops decoding a connection and asks capture to copy none of its
    /// bytes: it carries one resource other than Pods ([`KeysSeen`]), or
    /// speaks neither HTTP/2 nor HTTP/1 (containerd's ttrpc to its shims,
    /// a dozen records a sandbox copied to be thrown away). Its calls in
    /// flight are dropped with it: none can be about a Pod.
    fn mute(&mut self, conn: ConnKey, now_ns: u64) {
        let Some(connection) = self.connections.remove(&conn) else {
            return;
        };
        if connection.tables.is_some() {
            self.control
                .push(CaptureControl::Hpack(HpackControl::Forget(conn)));
        }
        if connection.needs_fields(now_ns) {
            self.update_field_probes(conn.tgid, now_ns);
        }
        match &connection.keys {
            KeysSeen::One { resource, requests } => {
                tracing::debug!(?conn, resource = %String::from_utf8_lossy(resource), requests, "connection muted");
            }
            KeysSeen::OpaquePods { requests } => {
                tracing::debug!(
                    ?conn,
                    requests,
                    "connection muted: its Pod-key values are no stored object"
                );
                self.muted_opaque += 1;
            }
            KeysSeen::Nothing | KeysSeen::Kept => {}
        }
        self.muted.insert(conn);
        self.muted_total += 1;
        self.control.push(CaptureControl::Mute(conn));
    }

    /// A copy of one of a connection's HPACK tables: the decoder's is
    /// loaded at once (it was taken before the bytes of the read that
    /// follows), the encoder's after the bytes of the write that follows.
    pub fn on_table(&mut self, message: TableCopyMessage) {
        let Some(connection) = self.connections.get_mut(&message.conn) else {
            tracing::debug!(conn = ?message.conn, "HPACK table copy of an unknown connection");
            return;
        };
        let Some(tables) = connection.tables.as_mut() else {
            tracing::debug!(conn = ?message.conn, "HPACK table copy not asked for");
            return;
        };
        let changed = match message.side {
            HeaderSide::Decoder => {
                let result = load_copy(connection, HeaderSide::Decoder, message.copy);
                self.loaded(message.conn, HeaderSide::Decoder, result)
            }
            HeaderSide::Encoder => {
                tables.pending_encoder = Some(message.copy);
                false
            }
        };
        if changed {
            self.update_field_probes(message.conn.tgid, message.ts_ns);
        }
    }

    /// Notes a header field from process `tgid`'s HPACK probes: whether it
    /// needs them is looked at again now and then while they fire.
    pub fn on_field_from(&mut self, tgid: u32, ts_ns: u64) {
        let due = self
            .field_probes
            .get(&tgid)
            .is_none_or(|state| ts_ns > state.checked_ns + FIELD_PROBES_RECHECK_NS);
        if due {
            self.update_field_probes(tgid, ts_ns);
        }
    }

    /// A process ended: it needs no HPACK probes any more.
    pub fn on_exit(&mut self, tgid: u32) {
        self.field_probes.remove(&tgid);
        self.peers.on_exit(tgid);
        self.control.push(CaptureControl::Exited(tgid));
        let control = &mut self.control;
        self.muted.retain(|conn| {
            let gone = conn.tgid == tgid;
            if gone {
                control.push(CaptureControl::Unmute(*conn));
            }
            !gone
        });
    }

    /// Records the outcome of loading a copy; returns whether the
    /// connection's need for header fields may have changed.
    fn loaded(
        &mut self,
        conn: ConnKey,
        side: HeaderSide,
        result: Result<(), TableLoadError>,
    ) -> bool {
        let Some(tables) = self
            .connections
            .get_mut(&conn)
            .and_then(|connection| connection.tables.as_mut())
        else {
            return false;
        };
        let load = tables.load_mut(side);
        tracing::debug!(?conn, ?side, ?result, "HPACK table copy");
        match result {
            Ok(()) => {
                self.tables_loaded += 1;
                *load = TableLoad::Loaded;
            }
            Err(error) => {
                self.tables_refused += 1;
                let TableLoad::Waiting { attempts } = *load else {
                    return false;
                };
                if attempts + 1 >= MAX_TABLE_ATTEMPTS {
                    tracing::debug!(?conn, ?side, %error, "HPACK table copies refused; header fields stay with the probes");
                    *load = TableLoad::GaveUp;
                } else {
                    *load = TableLoad::Waiting {
                        attempts: attempts + 1,
                    };
                    self.control
                        .push(CaptureControl::Hpack(HpackControl::Again(conn, side)));
                    return false;
                }
            }
        }
        if !matches!(tables.decoder, TableLoad::Waiting { .. })
            && !matches!(tables.encoder, TableLoad::Waiting { .. })
        {
            self.control
                .push(CaptureControl::Hpack(HpackControl::Forget(conn)));
            if let Some(connection) = self.connections.get_mut(&conn) {
                if !connection.needs_fields(u64::MAX) {
                    // The wire decodes every block from here on: the blocks
                    // the probes reported go to their streams one last time.
                    pair_probe_headers(connection);
                    connection.probe_headers = None;
                }
            }
        }
        true
    }

    /// Tells capture whether process `tgid` needs its HPACK probes, when
    /// that changed: at once when it does, [`FIELD_PROBES_HOLD_NS`] after it
    /// last did when it no longer does.
    fn update_field_probes(&mut self, tgid: u32, now_ns: u64) {
        let needs = self
            .connections
            .iter()
            .any(|(conn, connection)| conn.tgid == tgid && connection.needs_fields(now_ns));
        let state = self.field_probes.entry(tgid).or_default();
        state.checked_ns = now_ns;
        if needs {
            state.last_needed_ns = now_ns;
        }
        // Held only while attached: a process that never needed them is
        // not given them by the hold.
        let held = state.said == Some(true)
            && now_ns < state.last_needed_ns.saturating_add(FIELD_PROBES_HOLD_NS);
        let needed = needs || held;
        if state.said != Some(needed) {
            state.said = Some(needed);
            self.control
                .push(CaptureControl::Hpack(HpackControl::FieldProbes {
                    tgid,
                    needed,
                }));
        }
    }

    /// Time passed (a live agent's timer): the processes whose HPACK probes
    /// are attached are looked at again, so that probes held past their
    /// last need are detached though nothing else happens.
    pub fn check_field_probes(&mut self, now_ns: u64) {
        let held: Vec<u32> = self
            .field_probes
            .iter()
            .filter(|(_, state)| state.said == Some(true))
            .map(|(&tgid, _)| tgid)
            .collect();
        for tgid in held {
            self.update_field_probes(tgid, now_ns);
        }
    }

    /// A header field from Go's HPACK probes: on a connection open before
    /// podtrace started, a request field goes to its stream.
    pub fn on_header(&mut self, header: &HeaderMessage) {
        let Some(connection) = self.connections.get_mut(&header.conn) else {
            return;
        };
        // Request headers: what a server decodes, what a client encodes.
        let request = match connection.side {
            Side::Server => Direction::Ingress,
            Side::Client => Direction::Egress,
        };
        let Some(probe_headers) = connection.probe_headers.as_mut() else {
            return;
        };
        if header.direction != request || header.redacted {
            return;
        }
        if let Some(stream) = probe_headers.add(&header.name, &header.value, header.ts_ns) {
            connection.http2.supply_headers(
                tracer_decode::Direction::ClientToServer,
                stream,
                vec![(header.name.clone(), header.value.clone())],
            );
        }
        pair_probe_headers(connection);
    }
}

/// Loads a copy of the process's decoder or encoder table into the wire
/// decoder of the direction it decodes.
fn load_copy(
    connection: &mut Connection,
    side: HeaderSide,
    copy: Option<TableCopy>,
) -> Result<(), TableLoadError> {
    let copy = copy.ok_or_else(|| TableLoadError::Inconsistent("entries were lost".into()))?;
    let point = match side {
        HeaderSide::Decoder => TablePoint::BeforeNext,
        HeaderSide::Encoder => TablePoint::AfterPushed,
    };
    let direction = connection.wire_direction(side);
    connection.http2.load_table(direction, point, &copy)?;
    let resets = connection.http2.table_resets(direction);
    match direction {
        tracer_decode::Direction::ClientToServer => connection.resets_seen.0 = resets,
        tracer_decode::Direction::ServerToClient => connection.resets_seen.1 = resets,
    }
    Ok(())
}

/// After lost bytes or a corrupt block a direction's table is unknown
/// again: its request headers come from the probes until a new copy is
/// loaded. Returns whether anything changed.
fn tables_forgotten(
    connection: &mut Connection,
    control: &mut Vec<CaptureControl>,
    conn: ConnKey,
    now_ns: u64,
) -> bool {
    let resets = (
        connection
            .http2
            .table_resets(tracer_decode::Direction::ClientToServer),
        connection
            .http2
            .table_resets(tracer_decode::Direction::ServerToClient),
    );
    if resets == connection.resets_seen {
        return false;
    }
    connection.resets_seen = resets;
    connection
        .probe_headers
        .get_or_insert_with(ProbeHeaders::default);
    if let Some(tables) = connection.tables.as_mut() {
        let mut asked = false;
        for side in [HeaderSide::Decoder, HeaderSide::Encoder] {
            let load = tables.load_mut(side);
            if *load == TableLoad::Loaded {
                *load = TableLoad::default();
                if !asked {
                    control.push(CaptureControl::Hpack(HpackControl::Ask(conn)));
                    tables.asked_ts_ns = now_ns;
                    asked = true;
                }
            }
        }
    }
    true
}

fn pair_probe_headers(connection: &mut Connection) {
    let Some(probe_headers) = connection.probe_headers.as_mut() else {
        return;
    };
    let request = tracer_decode::Direction::ClientToServer;
    for (stream, fields) in probe_headers.pair(&connection.http2.streams_seen(request)) {
        connection.http2.supply_headers(request, stream, fields);
    }
}

fn call_messages(
    conn: ConnKey,
    side: Side,
    mut exchanges: Vec<Exchange>,
    once: &mut DecodedOnce,
) -> Vec<Message> {
    // Not decoded at all: etcd KV calls that cannot name a Pod.
    exchanges.retain(|exchange| !kv_call_without_pod(exchange));
    let mut messages: Vec<Message> = exchanges
        .iter()
        .filter_map(|exchange| rest_message(conn, side, exchange))
        .map(|rest| Message::Rest(Box::new(rest)))
        .collect();
    messages.extend(
        exchanges
            .iter()
            .filter_map(GrpcCall::from_exchange)
            .filter_map(|call| {
                if let Some(cri) = CriCall::from_grpc(&call) {
                    return Some(Message::Cri(CriMessage {
                        conn,
                        stream_id: call.stream_id,
                        side,
                        service: call.service.clone()?,
                        method: call.method.clone()?,
                        clues: cri.clues(),
                        facts: cri.facts().map(Box::new),
                        status_code: call.status.as_ref().map(|status| status.code),
                        status_message: status_message(&call),
                        start_ts_ns: call.start_ts_ns,
                        end_ts_ns: call.end_ts_ns,
                    }));
                }
                etcd_message(conn, side, &call, once).map(Message::Etcd)
            }),
    );
    messages
}

/// An etcd KV call whose uncompressed request never mentions a Pod key:
/// no span comes of it, so it is dropped before any decoding.
fn kv_call_without_pod(exchange: &Exchange) -> bool {
    exchange
        .path()
        .is_some_and(|path| path.starts_with("/etcdserverpb.KV/"))
        && exchange.request.header("grpc-encoding").is_none()
        && !may_hold_pod_clue(&exchange.request.body)
}

/// Most `warning` headers kept per response.
const MAX_WARNINGS: usize = 8;

/// An HTTP/2 exchange as a REST request, if it writes a Pod.
fn rest_message(conn: ConnKey, side: Side, exchange: &Exchange) -> Option<RestMessage> {
    let header = |name: &str| exchange.request.header(name).map(|(value, _)| value);
    if header("content-type").is_some_and(|c| c.starts_with("application/grpc")) {
        return None;
    }
    let method = header(":method")?;
    // A header block from the HPACK probes given to the wrong stream shows
    // as a pseudo-header that contradicts the wire's: then neither its
    // method nor its path can be trusted.
    let contradicted = exchange
        .request
        .external_headers
        .iter()
        .filter(|(name, _)| name.starts_with(':'))
        .any(|(name, supplied)| header(name).is_some_and(|value| value != supplied));
    if contradicted {
        return None;
    }
    let warnings = exchange
        .response
        .headers
        .iter()
        .flat_map(|headers| headers.fields.iter())
        .filter(|(name, _)| name.as_str() == "warning")
        .map(|(_, value)| value.as_str());
    rest_from_wire(
        conn,
        side,
        RestWire {
            stream_id: exchange.stream_id,
            method,
            target: exchange.path()?,
            header: &header,
            status: exchange
                .response
                .header(":status")
                .and_then(|(value, _)| value.parse::<u16>().ok()),
            response_body: &exchange.response.body,
            warnings: warnings.collect(),
            start_ts_ns: exchange.request.first_ts_ns,
            end_ts_ns: exchange.response.last_ts_ns.or(exchange.request.last_ts_ns),
        },
    )
}

/// The REST requests among a connection's finished HTTP/1.1 exchanges.
fn http1_messages(conn: ConnKey, side: Side, exchanges: Vec<http1::Exchange>) -> Vec<Message> {
    exchanges
        .iter()
        .filter_map(|exchange| {
            let request = exchange.request.as_ref()?;
            let response = exchange.response.as_ref();
            let header = |name: &str| request.half.headers.get(name);
            let warnings = response
                .map(|response| response.half.headers.get_all("warning").collect())
                .unwrap_or_default();
            rest_from_wire(
                conn,
                side,
                RestWire {
                    // The exchange's place on the connection: the same at
                    // both ends, as an HTTP/2 stream id is.
                    stream_id: u32::try_from(exchange.id).unwrap_or(u32::MAX),
                    method: &request.method,
                    target: &request.target,
                    header: &header,
                    status: response.map(|response| response.status),
                    response_body: response.map_or(&[][..], |response| &response.half.body),
                    warnings,
                    start_ts_ns: Some(request.half.first_ts_ns),
                    end_ts_ns: Some(
                        response.map_or(request.half.last_ts_ns, |r| r.half.last_ts_ns),
                    ),
                },
            )
        })
        .map(|rest| Message::Rest(Box::new(rest)))
        .collect()
}

/// Whether a connection's first bytes are HTTP/1.x: a request line from
/// the client (a method, a space), or a status line from the server (a
/// connection joined mid-way whose first bytes seen are an answer).
fn looks_like_http1(bytes: &[u8], client_to_server: bool) -> bool {
    if client_to_server {
        const METHODS: [&[u8]; 7] = [
            b"GET ",
            b"HEAD ",
            b"POST ",
            b"PUT ",
            b"DELETE ",
            b"PATCH ",
            b"OPTIONS ",
        ];
        METHODS.iter().any(|method| bytes.starts_with(method))
    } else {
        bytes.starts_with(b"HTTP/1.")
    }
}

/// What a REST request's two wires (HTTP/2, HTTP/1.1) say alike.
struct RestWire<'a> {
    stream_id: u32,
    method: &'a str,
    /// The request target (path and query).
    target: &'a str,
    /// A request header field by (lowercase) name.
    header: &'a dyn Fn(&str) -> Option<&'a str>,
    status: Option<u16>,
    response_body: &'a [u8],
    warnings: Vec<&'a str>,
    start_ts_ns: Option<u64>,
    end_ts_ns: Option<u64>,
}

/// A REST request from either wire, if it writes a Pod.
fn rest_from_wire(conn: ConnKey, side: Side, wire: RestWire<'_>) -> Option<RestMessage> {
    let headers: Vec<(String, String)> = ["content-type", "accept", "user-agent"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), (wire.header)(name)?.to_owned())))
        .collect();
    let request = RestRequest::resolve(wire.method, wire.target, &headers);
    let writes = matches!(
        request.verb,
        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
    );
    if !request.is_pods() || !writes {
        return None;
    }
    let resource = request.resource.as_ref()?;
    let failed = wire.status.is_some_and(|status| status >= 400);
    let (pod, error) = if failed {
        let error = decode_status(wire.response_body).map(|status| ApiStatus {
            message: status.message.map(cut),
            ..status
        });
        (None, error)
    } else {
        let pod = match decode_stored_object(wire.response_body) {
            Ok(StoredObject::Pod(pod)) => Some(*pod),
            _ => None,
        };
        (pod, None)
    };
    let warnings = wire
        .warnings
        .into_iter()
        .take(MAX_WARNINGS)
        .map(|value| cut(value.to_owned()))
        .collect();
    Some(RestMessage {
        conn,
        stream_id: wire.stream_id,
        side,
        method: wire.method.to_owned(),
        route: request.route.clone(),
        verb: request.verb.as_str().to_owned(),
        namespace: resource.namespace.clone(),
        name: resource.name.clone(),
        subresource: resource.subresource.clone(),
        path: wire.target.split('?').next().unwrap_or_default().to_owned(),
        dry_run: request.dry_run,
        status: wire.status,
        user_agent: request.user_agent.clone(),
        pod,
        error,
        warnings,
        start_ts_ns: wire.start_ts_ns,
        end_ts_ns: wire.end_ts_ns,
    })
}

/// A text from the wire cut to [`MAX_STATUS_MESSAGE`] bytes.
fn cut(text: String) -> String {
    tracer_decode::cut_text(text, MAX_STATUS_MESSAGE)
}

/// The error text of a failed call, cut at a character boundary.
fn status_message(call: &GrpcCall) -> Option<String> {
    let status = call.status.as_ref().filter(|status| status.code != 0)?;
    Some(cut(status.message.clone()?))
}

fn etcd_message(
    conn: ConnKey,
    side: Side,
    call: &GrpcCall,
    once: &mut DecodedOnce,
) -> Option<EtcdMessage> {
    let method = KvCall::method_of(call)?;
    // The client's call and etcd's are the same message: decoded once.
    // No time: the earliest, which can only make the write more followable.
    let seen_ns = call.start_ts_ns.or(call.end_ts_ns).unwrap_or(0);
    let facts = once.kv_request(method, call.request_bytes()?, seen_ns)?;
    let response = call
        .response_bytes()
        .and_then(|bytes| KvResponse::decode(method, bytes).ok());
    Some(EtcdMessage {
        conn,
        side,
        method: facts.method.to_owned(),
        write: facts.write?,
        clues: facts.clues,
        fingerprint: facts.fingerprint,
        revision: response.as_ref().and_then(|r| r.revision()),
        txn_succeeded: response.as_ref().and_then(|r| r.txn_succeeded()),
        status_code: call.status.as_ref().map(|status| status.code),
        start_ts_ns: call.start_ts_ns,
        end_ts_ns: call.end_ts_ns,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    fn request(path: &str, body: &[u8]) -> Exchange {
        Exchange {
            stream_id: 1,
            request: HalfStream {
                external_headers: vec![(":path".to_owned(), path.to_owned())],
                body: body.to_vec(),
                ended: true,
                ..HalfStream::default()
            },
            response: HalfStream::default(),
            reset_code: None,
            complete: true,
        }
    }

    const TXN: &str = "/etcdserverpb.KV/Txn";

    const CONN: ConnKey = ConnKey {
        tgid: 100,
        conn_id: 7,
    };

    fn ids(ts_ns: u64) -> crate::capture::ProcessIds {
        crate::capture::ProcessIds {
            ts_ns,
            tgid: CONN.tgid,
            tid: CONN.tgid,
        }
    }

    fn conn_record(change: ConnAction) -> ConnRecord {
        ConnRecord {
            ids: ids(1),
            conn: CONN,
            fd: 9,
            change,
            fd_kind: FdKind::Socket,
            ret: 0,
            peer: Peer::Unknown,
            local_port: None,
        }
    }

    fn chunk(ts_ns: u64, direction: Direction, bytes: &[u8], tls_plaintext: bool) -> DataRecord {
        DataRecord {
            ids: ids(ts_ns),
            conn: CONN,
            fd: 9,
            syscall: tracer_common::io::IoSyscall::Read,
            direction,
            fd_kind: FdKind::Socket,
            len: bytes.len() as u64,
            enter_ts_ns: ts_ns,
            data: bytes.to_vec(),
            truncated: false,
            tls_plaintext,
        }
    }

    /// kube-apiserver's side of a Python client's create over TLS: the
    /// handshake's bytes, then the plaintext of a keep-alive connection
    /// carrying a GET (not a write: no message) and the create, answered
    /// with a chunked body.
    #[test]
    fn an_http1_create_over_tls_gives_the_same_rest_message_as_http2() {
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        assert!(
            decoder
                .on_conn(&conn_record(ConnAction::Accepted), &mut once)
                .is_empty()
        );
        let mut messages = Vec::new();
        let handshake = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
        let get = b"GET /api/v1/namespaces/default/pods/web HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer s3cret\r\n\r\n";
        let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let body =
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default"}}"#;
        let post = format!(
            "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: k\r\nUser-Agent: OpenAPI-Generator/29.0.0/python\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"8f9c0b7e-2a51-4c36-9d0e-5b1f7e3a9c42","creationTimestamp":"2026-12-03T03:00:00Z"},"status":{"phase":"Pending"}}"#;
        let created = format!(
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nWarning: 299 - \"would violate PodSecurity\"\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            pod.len()
        );
        let chunks: [(u64, Direction, &[u8], bool); 8] = [
            (10, Direction::Ingress, handshake, false),
            (20, Direction::Ingress, get, true),
            (30, Direction::Egress, not_found, true),
            (40, Direction::Ingress, post.as_bytes(), true),
            (41, Direction::Ingress, body, true),
            (50, Direction::Egress, created.as_bytes(), true),
            (51, Direction::Egress, pod, true),
            (52, Direction::Egress, b"\r\n0\r\n\r\n", true),
        ];
        for (ts, direction, bytes, tls) in chunks {
            messages.extend(decoder.on_data(&chunk(ts, direction, bytes, tls), &mut once));
        }
        messages.extend(decoder.on_conn(&conn_record(ConnAction::Closed), &mut once));
        let [Message::Rest(rest)] = &messages[..] else {
            panic!("one REST message: {messages:#?}");
        };
        assert_eq!(rest.side, Side::Server);
        assert_eq!(
            (rest.method.as_str(), rest.verb.as_str()),
            ("POST", "create")
        );
        assert_eq!(rest.route, "/api/v1/namespaces/{namespace}/pods");
        assert_eq!(rest.namespace.as_deref(), Some("default"));
        assert_eq!(rest.status, Some(201));
        assert_eq!(rest.stream_id, 1, "the second exchange of the connection");
        assert_eq!((rest.start_ts_ns, rest.end_ts_ns), (Some(40), Some(52)));
        assert_eq!(
            rest.user_agent.as_deref(),
            Some("OpenAPI-Generator/29.0.0/python")
        );
        assert_eq!(rest.warnings.len(), 1);
        let pod = rest.pod.as_ref().expect("the Pod the response returned");
        assert_eq!(
            pod.uid.as_deref(),
            Some("8f9c0b7e-2a51-4c36-9d0e-5b1f7e3a9c42")
        );
        assert_eq!(pod.phase.as_deref(), Some("Pending"));
        assert!(!format!("{rest:?}").contains("s3cret"));
    }

    /// What the decoder said of the HPACK probes since last asked.
    fn field_probes_said(decoder: &mut GrpcDecoder) -> Vec<bool> {
        decoder
            .control
            .drain(..)
            .filter_map(|control| match control {
                CaptureControl::Hpack(HpackControl::FieldProbes { needed, .. }) => Some(needed),
                _ => None,
            })
            .collect()
    }

    /// A TLS connection seen from its handshake whose secrets were missed:
    /// the HPACK probes are asked for at once, and stay while it is quiet
    /// (its next request, read through the per-call probes, needs them).
    #[test]
    fn a_connection_whose_secrets_were_missed_asks_for_the_hpack_probes_at_once() {
        let handshake = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(ConnAction::Connected), &mut once);
        decoder.on_data(&chunk(10, Direction::Egress, handshake, false), &mut once);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        decoder.on_secrets_missed(conn_record(ConnAction::Connected).conn, 20);
        assert_eq!(field_probes_said(&mut decoder), vec![true]);
        decoder.check_field_probes(20 + IDLE_GRACE_NS + FIELD_PROBES_HOLD_NS + 1);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        // Quiet for longer than its grace: let go.
        decoder.check_field_probes(20 + SECRETS_MISSED_GRACE_NS + FIELD_PROBES_HOLD_NS + 1);
        assert_eq!(field_probes_said(&mut decoder), vec![false]);
    }

    #[test]
    fn only_http2_joined_mid_stream_asks_for_the_hpack_probes_and_they_are_held() {
        let handshake = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
        // containerd's ttrpc to a shim: a 4-byte length, a stream id, type 1.
        let ttrpc = b"\x00\x00\x03\x37\x00\x00\x00\x01\x01\x00\x0a\x17containerd";
        for first in [&handshake[..], &ttrpc[..]] {
            let mut decoder = GrpcDecoder::default();
            let mut once = DecodedOnce::default();
            decoder.on_conn(&conn_record(ConnAction::Accepted), &mut once);
            decoder.on_data(&chunk(10, Direction::Ingress, first, false), &mut once);
            assert_eq!(
                field_probes_said(&mut decoder),
                Vec::<bool>::new(),
                "{first:02x?}"
            );
        }
        // A PING frame where the preface should be: joined after its start.
        let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x0012345678";
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(ConnAction::Accepted), &mut once);
        decoder.on_data(&chunk(10, Direction::Ingress, ping, false), &mut once);
        assert_eq!(field_probes_said(&mut decoder), vec![true]);
        // Gone, the connection needs nothing: the probes are held, then
        // detached by the timer.
        decoder.on_conn(&conn_record(ConnAction::Closed), &mut once);
        decoder.check_field_probes(10 + FIELD_PROBES_HOLD_NS - 1);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        decoder.check_field_probes(10 + FIELD_PROBES_HOLD_NS + 1);
        assert_eq!(field_probes_said(&mut decoder), vec![false]);
        decoder.check_field_probes(10 + 2 * FIELD_PROBES_HOLD_NS);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    }

    #[test]
    fn a_connection_seen_from_its_start_that_is_not_http_is_not_decoded() {
        let ttrpc = b"\x00\x00\x03\x37\x00\x00\x00\x01\x01\x00\x0a\x17containerd";
        // Answers that read as HTTP/2 frames whose header blocks name an
        // entry no table has: each a "lost" table had it been decoded.
        let noise = b"\x00\x00\x01\x01\x04\x00\x00\x00\x01\xff".repeat(3);
        for (change, asked) in [
            (ConnAction::Accepted, Vec::<bool>::new()),
            // Older than podtrace, it may have been joined mid-frame: kept.
            (ConnAction::AcceptedBeforeStart, vec![true]),
        ] {
            let mut decoder = GrpcDecoder::default();
            let mut once = DecodedOnce::default();
            decoder.on_conn(&conn_record(change), &mut once);
            decoder.on_data(&chunk(10, Direction::Ingress, ttrpc, false), &mut once);
            decoder.on_data(&chunk(11, Direction::Egress, &noise, false), &mut once);
            assert_eq!(field_probes_said(&mut decoder), asked, "{change:?}");
            // Capture is told to copy none of its bytes any more.
            assert_eq!(
                decoder.muted.contains(&CONN),
                matches!(change, ConnAction::Accepted),
                "{change:?}"
            );
        }
    }

    /// A client connection older than podtrace that only receives (a watch)
    /// lets the HPACK probes go once it sent no request for the grace, and
    /// its next request brings them back.
    #[test]
    fn a_joined_connection_without_requests_lets_the_probes_go_until_one() {
        let watch_event = b"\x00\x00\x05\x00\x00\x00\x00\x00\x01event";
        let request = b"\x00\x00\x01\x01\x05\x00\x00\x00\x03\x82";
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(ConnAction::ConnectedBeforeStart), &mut once);
        decoder.on_data(
            &chunk(10, Direction::Ingress, watch_event, false),
            &mut once,
        );
        assert_eq!(field_probes_said(&mut decoder), vec![true]);
        // Events keep coming; within the grace the probes stay.
        let later = 10 + REQUEST_IDLE_GRACE_NS / 2;
        decoder.on_data(
            &chunk(later, Direction::Ingress, watch_event, false),
            &mut once,
        );
        decoder.check_field_probes(later + 1);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        let after = 10 + REQUEST_IDLE_GRACE_NS + 1;
        decoder.on_data(
            &chunk(after, Direction::Ingress, watch_event, false),
            &mut once,
        );
        decoder.check_field_probes(after + FIELD_PROBES_HOLD_NS + 1);
        assert_eq!(field_probes_said(&mut decoder), vec![false]);
        // A request whose path the wire cannot read (here: none at all)
        // brings them back once its exchange is whole.
        let request_at = after + 2 * FIELD_PROBES_HOLD_NS;
        decoder.on_data(
            &chunk(request_at, Direction::Egress, request, false),
            &mut once,
        );
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        decoder.on_data(
            &chunk(request_at + 1, Direction::Ingress, RESPONSE_200, false),
            &mut once,
        );
        assert_eq!(field_probes_said(&mut decoder), vec![true]);
    }

    /// HEADERS, END_HEADERS and END_STREAM, stream 3: `:status 200` (static).
    const RESPONSE_200: &[u8] = b"\x00\x00\x01\x01\x05\x00\x00\x00\x03\x88";

    /// A joined connection whose tables are not copied around its request
    /// (it went quiet after it) holds the HPACK probes for the grace after
    /// that request only, and its later requests do not call them back:
    /// otherwise each of kube-apiserver's per-resource etcd clients that
    /// makes a request now and then held them for good.
    #[test]
    fn a_joined_connection_holds_the_probes_only_shortly_after_its_requests() {
        let request = b"\x00\x00\x01\x01\x05\x00\x00\x00\x03\x82";
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(ConnAction::ConnectedBeforeStart), &mut once);
        decoder.on_data(&chunk(10, Direction::Egress, request, false), &mut once);
        decoder.on_data(
            &chunk(10, Direction::Ingress, RESPONSE_200, false),
            &mut once,
        );
        assert_eq!(field_probes_said(&mut decoder), vec![true]);
        // No copy ever comes: let go one grace after the request.
        decoder.check_field_probes(10 + REQUEST_IDLE_GRACE_NS / 2);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        let after = 10 + REQUEST_IDLE_GRACE_NS + FIELD_PROBES_HOLD_NS + 1;
        decoder.check_field_probes(after);
        assert_eq!(field_probes_said(&mut decoder), vec![false]);
        // Its next requests, whole, do not bring them back.
        let next = after + REQUEST_IDLE_GRACE_NS;
        for stream in [5_u8, 7] {
            let request = [0, 0, 1, 1, 5, 0, 0, 0, stream, 0x82];
            let mut response = RESPONSE_200.to_vec();
            response[8] = stream;
            decoder.on_data(&chunk(next, Direction::Egress, &request, false), &mut once);
            decoder.on_data(
                &chunk(next, Direction::Ingress, &response, false),
                &mut once,
            );
            decoder.check_field_probes(next + 1);
            assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
        }
    }

    /// containerd's ttrpc to a shim, both older than podtrace: neither
    /// direction's first bytes are frames, so it lets the probes go; one
    /// direction joined mid-frame alone does not.
    #[test]
    fn a_connection_older_than_podtrace_that_is_not_http_lets_the_probes_go() {
        let request = b"\x00\x00\x03\x37\x00\x00\x00\x01\x01\x00\x0a\x17containerd";
        let response = b"\x00\x00\x00\x10\x00\x00\x00\x01\x02\x00\x12\x0e\x0a\x0cstatus";
        let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x0012345678";
        for (answer, kept) in [(&response[..], false), (&ping[..], true)] {
            let mut decoder = GrpcDecoder::default();
            let mut once = DecodedOnce::default();
            decoder.on_conn(&conn_record(ConnAction::AcceptedBeforeStart), &mut once);
            decoder.on_data(&chunk(10, Direction::Ingress, request, false), &mut once);
            assert_eq!(field_probes_said(&mut decoder), vec![true]);
            decoder.on_data(&chunk(11, Direction::Egress, answer, false), &mut once);
            decoder.check_field_probes(11 + FIELD_PROBES_HOLD_NS + 1);
            let said = if kept { Vec::new() } else { vec![false] };
            assert_eq!(field_probes_said(&mut decoder), said, "{answer:02x?}");
            // Not HTTP: muted, capture copies none of its bytes any more.
            assert_eq!(decoder.muted.contains(&CONN), !kept, "{answer:02x?}");
        }
    }

    #[test]
    fn a_connection_of_one_resource_is_muted_after_enough_requests() {
        let mut keys = KeysSeen::default();
        let lease = request(TXN, b"\x0a\x20/registry/leases/kube-node-lease/n1");
        for _ in 1..4 {
            assert!(!keys.note(&lease, 4));
        }
        // A lease grant names no key: neither counted nor keeping.
        assert!(!keys.note(&request("/etcdserverpb.Lease/LeaseGrant", b"\x08\x3c"), 4));
        assert!(keys.note(&lease, 4));
    }

    /// A gRPC Txn putting `value` under `key`, framed as on the wire.
    fn framed_put(key: &str, value: &[u8]) -> Exchange {
        use prost::Message as _;
        use tracer_decode::pb::etcdserverpb::{PutRequest, RequestOp, TxnRequest, request_op};
        let txn = TxnRequest {
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: key.as_bytes().to_vec(),
                    value: value.to_vec(),
                    ..PutRequest::default()
                })),
            }],
            ..TxnRequest::default()
        }
        .encode_to_vec();
        let mut body = vec![0];
        body.extend_from_slice(&u32::try_from(txn.len()).unwrap().to_be_bytes());
        body.extend_from_slice(&txn);
        request(TXN, &body)
    }

    /// A client writing under Pod keys bytes that are no stored object is
    /// muted as a client of one other resource is; one of kube-apiserver's
    /// Pod writes keeps a connection for good.
    #[test]
    fn a_connection_writing_opaque_pod_values_is_muted_after_enough_requests() {
        let opaque = framed_put("/registry/pods/bench/opaque-1", b"\x93\x1f\x00bytes");
        let stored = framed_put("/registry/pods/default/web", b"k8s\x00\x0a\x09\x0a\x02v1");
        let mut keys = KeysSeen::default();
        for _ in 1..4 {
            assert!(!keys.note(&opaque, 4));
        }
        assert!(keys.note(&opaque, 4));

        let mut keys = KeysSeen::default();
        assert!(!keys.note(&opaque, 2));
        assert!(!keys.note(&stored, 2));
        for _ in 0..4 {
            assert!(!keys.note(&opaque, 2), "kept after a stored Pod");
        }
        // A Pod write seen in part (the TLS reader lost records, say)
        // neither keeps the connection nor counts.
        let mut keys = KeysSeen::default();
        let mut cut = stored.clone();
        cut.request.lossy = true;
        cut.request.body.truncate(12);
        assert!(!keys.note(&opaque, 2));
        assert!(!keys.note(&cut, 2));
        assert!(keys.note(&opaque, 2), "a cut write kept the connection");
        let mut unended = opaque.clone();
        unended.request.ended = false;
        let mut keys = KeysSeen::default();
        assert!(!keys.note(&unended, 1));

        // Unframed bytes (not gRPC) do not count as opaque writes.
        let mut keys = KeysSeen::default();
        let raw = request(TXN, b"/registry/pods/default/web");
        assert!(!keys.note(&raw, 1));
        assert!(!keys.note(&opaque, 1));
    }

    #[test]
    fn pods_other_resources_and_other_protocols_keep_a_connection() {
        let lease = request(TXN, b"/registry/leases/kube-node-lease/n1");
        let cases = [
            request(TXN, b"/registry/pods/default/web"),
            request(TXN, b"/registry/events/default/e1"),
            request("/runtime.v1.RuntimeService/ContainerStatus", b""),
            request("/api/v1/namespaces/default/pods", b""),
        ];
        for other in cases {
            let mut keys = KeysSeen::default();
            assert!(!keys.note(&lease, 2));
            assert!(!keys.note(&other, 2));
            for _ in 0..4 {
                assert!(!keys.note(&lease, 2), "kept after {:?}", other.path());
            }
        }
        let mut compressed = request(TXN, b"/registry/leases/kube-node-lease/n1");
        compressed
            .request
            .external_headers
            .push(("grpc-encoding".to_owned(), "gzip".to_owned()));
        let mut keys = KeysSeen::default();
        assert!(!keys.note(&compressed, 1));
        assert!(!keys.note(&lease, 1));
    }
}
