//! HTTP/2 connections → gRPC calls → CRI and etcd KV calls, with `tracer-decode`.
//!
//! In: connection events (which side accepted: that fixes which direction is
//! the client's) and data chunks of followed sockets — for TLS sockets, the
//! plaintext Go's crypto/tls probes report. Out: one [`CriMessage`] per
//! finished CRI call and one [`EtcdMessage`] per finished etcd write about a
//! Pod, with what identifies the Pod. Connections found open at start are not
//! decoded here: which end is the client is not known from /proc alone
//! (their header fields still arrive through [`super::headers`]).

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};
use tracer_common::io::{ConnAction, Direction, FdKind};
use tracer_decode::{
    Chunk,
    cri::CriCall,
    etcd::{KvCall, WriteKind},
    grpc::GrpcCall,
    http2::{Http2Connection, Limits},
    identity::{PodClue, clues_from_kv_request},
};

use super::Message;
use crate::capture::{ConnKey, ConnRecord, DataRecord};

/// Connections decoded at once; past it new ones are counted and skipped.
const MAX_CONNECTIONS: usize = 4096;

/// Which end of the connection the process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Whether the process handled or made the call.
    pub side: Side,
    /// `runtime.v1.RuntimeService`, `runtime.v1.ImageService`.
    pub service: String,
    /// `RunPodSandbox`, …
    pub method: String,
    /// What the call says about its Pod (no payloads, no secrets).
    pub clues: Vec<PodClue>,
    /// gRPC status code, when the trailers were captured.
    pub status_code: Option<u32>,
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
    pub clues: Vec<PodClue>,
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

/// The digest that names a KV request wherever it was seen.
pub fn request_fingerprint(request: &tracer_decode::etcd::KvRequest) -> [u8; 16] {
    let digest = Sha256::digest(request.canonical_bytes());
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

struct Connection {
    side: Side,
    http2: Http2Connection,
    /// Bytes fed to `http2` so far.
    fed_bytes: u64,
    /// Plaintext from the TLS probes has been seen: the socket's own bytes
    /// (the handshake, then ciphertext) are not HTTP/2.
    tls: bool,
}

/// HTTP/2 state per connection.
#[derive(Default)]
pub struct GrpcDecoder {
    connections: HashMap<ConnKey, Connection>,
    /// Connections not decoded because the table was full.
    pub skipped_connections: u64,
}

impl std::fmt::Debug for GrpcDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcDecoder")
            .field("connections", &self.connections.len())
            .field("skipped_connections", &self.skipped_connections)
            .finish()
    }
}

impl GrpcDecoder {
    /// Starts or ends decoding a connection; a close yields its last calls.
    pub fn on_conn(&mut self, conn: &ConnRecord) -> Vec<Message> {
        if conn.fd_kind != FdKind::Socket {
            return Vec::new();
        }
        let side = match conn.change {
            ConnAction::Accepted => Side::Server,
            ConnAction::Connected => Side::Client,
            ConnAction::OpenAtStart => return Vec::new(),
            ConnAction::Closed => {
                return match self.connections.remove(&conn.conn) {
                    Some(connection) => {
                        call_messages(conn.conn, connection.side, connection.http2.finish())
                    }
                    None => Vec::new(),
                };
            }
        };
        if self.connections.len() >= MAX_CONNECTIONS {
            self.skipped_connections += 1;
            return Vec::new();
        }
        self.connections.insert(
            conn.conn,
            Connection {
                side,
                http2: Http2Connection::new(Limits::default()),
                fed_bytes: 0,
                tls: false,
            },
        );
        Vec::new()
    }

    /// Feeds a chunk of a decoded connection; yields the calls it finished.
    pub fn on_data(&mut self, data: &DataRecord) -> Vec<Message> {
        let Some(connection) = self.connections.get_mut(&data.conn) else {
            return Vec::new();
        };
        if data.tls_plaintext && !connection.tls {
            // The first plaintext of a TLS socket: what came before was the
            // handshake, which put the HTTP/2 parser out of step.
            connection.tls = true;
            if connection.fed_bytes > 0 {
                connection.http2 = Http2Connection::new(Limits::default());
            }
        } else if connection.tls && !data.tls_plaintext {
            return Vec::new();
        }
        connection.fed_bytes += data.data.len() as u64;
        let client_to_server = match (connection.side, data.direction) {
            (Side::Server, Direction::Ingress) | (Side::Client, Direction::Egress) => true,
            (Side::Server, Direction::Egress) | (Side::Client, Direction::Ingress) => false,
        };
        let direction = if client_to_server {
            tracer_decode::Direction::ClientToServer
        } else {
            tracer_decode::Direction::ServerToClient
        };
        connection.http2.push(&Chunk {
            direction,
            ts_ns: data.ids.ts_ns,
            bytes: data.data.clone(),
            truncated: data.truncated,
        });
        let exchanges = connection.http2.take_exchanges();
        call_messages(data.conn, connection.side, exchanges)
    }
}

fn call_messages(
    conn: ConnKey,
    side: Side,
    exchanges: Vec<tracer_decode::http2::Exchange>,
) -> Vec<Message> {
    exchanges
        .iter()
        .filter_map(GrpcCall::from_exchange)
        .filter_map(|call| {
            if let Some(cri) = CriCall::from_grpc(&call) {
                return Some(Message::Cri(CriMessage {
                    conn,
                    side,
                    service: call.service.clone()?,
                    method: call.method.clone()?,
                    clues: cri.clues(),
                    status_code: call.status.as_ref().map(|status| status.code),
                    start_ts_ns: call.start_ts_ns,
                    end_ts_ns: call.end_ts_ns,
                }));
            }
            etcd_message(conn, side, &call).map(Message::Etcd)
        })
        .collect()
}

fn etcd_message(conn: ConnKey, side: Side, call: &GrpcCall) -> Option<EtcdMessage> {
    let kv = KvCall::from_grpc(call)?;
    let request = kv.request?.ok()?;
    let write = request.write_kind()?;
    let clues = clues_from_kv_request(&request);
    if clues.is_empty() {
        return None;
    }
    let response = kv.response.and_then(Result::ok);
    Some(EtcdMessage {
        conn,
        side,
        method: request.method().to_owned(),
        write,
        clues,
        fingerprint: request_fingerprint(&request),
        revision: response.as_ref().and_then(|r| r.revision()),
        txn_succeeded: response.as_ref().and_then(|r| r.txn_succeeded()),
        status_code: call.status.as_ref().map(|status| status.code),
        start_ts_ns: call.start_ts_ns,
        end_ts_ns: call.end_ts_ns,
    })
}
