//! HTTP/2 connections → gRPC calls → CRI calls, with `tracer-decode`.
//!
//! In: connection events (which side accepted: that fixes which direction is
//! the client's) and data chunks of followed sockets. Out: [`CriMessage`]s,
//! one per finished CRI call, with what identifies its Pod. Connections
//! found open at start are not decoded here: which end is the client is not
//! known from /proc alone (their header fields still arrive through
//! [`super::headers`]).

use std::collections::HashMap;

use tracer_common::io::{ConnAction, Direction, FdKind};
use tracer_decode::{
    Chunk,
    cri::CriCall,
    grpc::GrpcCall,
    http2::{Http2Connection, Limits},
    identity::PodClue,
};

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

struct Connection {
    side: Side,
    http2: Http2Connection,
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
    pub fn on_conn(&mut self, conn: &ConnRecord) -> Vec<CriMessage> {
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
                        cri_messages(conn.conn, connection.side, connection.http2.finish())
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
            },
        );
        Vec::new()
    }

    /// Feeds a chunk of a decoded connection; yields the calls it finished.
    pub fn on_data(&mut self, data: &DataRecord) -> Vec<CriMessage> {
        let Some(connection) = self.connections.get_mut(&data.conn) else {
            return Vec::new();
        };
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
        cri_messages(data.conn, connection.side, exchanges)
    }
}

fn cri_messages(
    conn: ConnKey,
    side: Side,
    exchanges: Vec<tracer_decode::http2::Exchange>,
) -> Vec<CriMessage> {
    exchanges
        .iter()
        .filter_map(GrpcCall::from_exchange)
        .filter_map(|call| {
            let cri = CriCall::from_grpc(&call)?;
            Some(CriMessage {
                conn,
                side,
                service: call.service.clone()?,
                method: call.method.clone()?,
                clues: cri.clues(),
                status_code: call.status.as_ref().map(|status| status.code),
                start_ts_ns: call.start_ts_ns,
                end_ts_ns: call.end_ts_ns,
            })
        })
        .collect()
}
