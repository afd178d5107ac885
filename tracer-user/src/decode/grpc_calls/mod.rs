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
//!
//! Here: connections and their protocol (HTTP/2, HTTP/1.1, a Raft peer
//! stream); `messages`: the calls and requests made from finished exchanges;
//! `hpack`: table copies and the HPACK probes' fields; `muting`: which
//! connections stop being copied.

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

mod hpack;
mod messages;
mod muting;

use hpack::{
    FieldProbes, ProbeHeaders, TableSync, load_copy, pair_probe_headers, tables_forgotten,
};
pub use messages::{CriMessage, EtcdMessage, RestMessage, Side};
use messages::{call_messages, http1_messages};
use muting::KeysSeen;

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

/// What a connection speaks.
enum Protocol {
    /// Nothing fed yet, or a TLS connection whose plaintext has not begun
    /// (the handshake put the parsers out of step): told from the next
    /// bytes fed.
    Unknown,
    /// HTTP/2 (gRPC; Go clients of kube-apiserver): fed to `http2`.
    Http2,
    /// HTTP/1.x (most non-Go clients of kube-apiserver; etcd's Raft peer
    /// streams): `http2` is not fed.
    Http1(Box<Http1Connection>),
}

struct Connection {
    side: Side,
    http2: Http2Connection,
    /// What it speaks, told from its first bytes.
    protocol: Protocol,
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
                if let Protocol::Http1(http1) = connection.protocol {
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
                protocol: Protocol::Unknown,
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
            connection.protocol = Protocol::Unknown;
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
        if !connection.from_start
            && !client_to_server
            && !matches!(connection.protocol, Protocol::Http1(_))
        {
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
        if matches!(connection.protocol, Protocol::Unknown) {
            connection.protocol = if looks_like_http1(&data.data, client_to_server) {
                Protocol::Http1(Box::new(Http1Connection::new(http1::Limits::default())))
            } else {
                Protocol::Http2
            };
        }
        if let Protocol::Http1(http1) = &mut connection.protocol {
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
            connection.tables = Some(TableSync::asked_at(data.ids.ts_ns));
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

#[cfg(test)]
mod tests;
