//! Entry points that drive every decoder of this crate from arbitrary input,
//! shared by the cargo-fuzz target (`fuzz/`, nightly) and the bounded stable
//! run in `tests/fuzz_smoke.rs`, so both exercise exactly the same paths.
//!
//! In: arbitrary bytes or chunks. Out: nothing but a [`Footprint`] of what the
//! decoders kept. Each entry point asserts the decoders' documented bounds
//! (body, error and buffer limits): a violated bound panics on purpose, which
//! is how a fuzzer reports it. Decoders themselves must never panic.

use crate::cri::CriCall;
use crate::etcd::KvCall;
use crate::grpc::{GrpcCall, split_body};
use crate::http1::{self, Http1Connection};
use crate::http2::{Http2Connection, Limits};
use crate::identity::clues_from_kv_request;
use crate::kube::decode_stored_object;
use crate::raft::{MAX_MESSAGE_BYTES, PeerStream, RaftStreamDecoder, StreamKind};
use crate::rest::RestRequest;
use crate::wal::{MAX_RECORD_BYTES, RecordKind, WalKvEntry, WalReader};
use crate::watch::{MAX_EVENT_BYTES, WatchDecoder, WatchFormat};
use crate::{Chunk, Direction};

/// How much the decoders kept from one input, for bounded-memory checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Decoded units (exchanges, records, events, requests).
    pub messages: usize,
    /// Bytes held by the largest single decoded unit or buffer.
    pub max_retained_bytes: usize,
}

impl Footprint {
    fn add(&mut self, other: Footprint) {
        self.messages += other.messages;
        self.max_retained_bytes = self.max_retained_bytes.max(other.max_retained_bytes);
    }

    fn saw(&mut self, retained_bytes: usize) {
        self.messages += 1;
        self.max_retained_bytes = self.max_retained_bytes.max(retained_bytes);
    }
}

/// Splits bytes into chunks the way the cargo-fuzz target does: 64-byte
/// pieces whose first byte picks the direction and, rarely, truncation.
pub fn chunks_from_bytes(data: &[u8]) -> Vec<Chunk> {
    data.chunks(64)
        .enumerate()
        .map(|(i, piece)| {
            let control = piece.first().copied().unwrap_or(0);
            Chunk {
                direction: if control & 1 == 0 {
                    Direction::ClientToServer
                } else {
                    Direction::ServerToClient
                },
                ts_ns: i as u64,
                bytes: piece.to_vec(),
                truncated: control & 0xc0 == 0xc0,
            }
        })
        .collect()
}

/// HTTP/2 connection decoding, then gRPC, etcd KV and CRI on every exchange.
pub fn http2_connection(chunks: &[Chunk]) -> Footprint {
    let limits = Limits::default();
    let mut connection = Http2Connection::new(limits);
    for chunk in chunks {
        connection.push(chunk);
    }
    assert!(connection.errors().len() <= limits.max_errors);
    let mut footprint = Footprint::default();
    let exchanges = connection.finish();
    for exchange in &exchanges {
        for half in [&exchange.request, &exchange.response] {
            assert!(half.body.len() <= limits.max_body_bytes);
            footprint.saw(half.body.len());
        }
        let Some(call) = GrpcCall::from_exchange(exchange) else {
            continue;
        };
        if let Some(KvCall {
            request: Some(Ok(request)),
            ..
        }) = KvCall::from_grpc(&call)
        {
            let _ = clues_from_kv_request(&request);
        }
        if let Some(cri) = CriCall::from_grpc(&call) {
            let _ = cri.clues();
        }
        if let Some(path) = exchange.path() {
            let method = exchange.request.header(":method").map_or("GET", |(m, _)| m);
            let _ = RestRequest::resolve(method, path, &[]);
        }
    }
    footprint
}

/// HTTP/1.1 connection decoding, watch events taken as they come, and REST
/// resolution of every request.
pub fn http1_connection(chunks: &[Chunk]) -> Footprint {
    let limits = http1::Limits::default();
    let mut connection = Http1Connection::new(limits);
    let mut footprint = Footprint::default();
    let mut exchanges = Vec::new();
    for chunk in chunks {
        connection.push(chunk);
        // At most a partial head, chunk-size line or start line per direction.
        assert!(connection.buffered_bytes() <= 2 * limits.max_head_bytes.max(8 << 10));
        for _ in connection.take_watch_events() {
            footprint.saw(0);
        }
        exchanges.extend(connection.take_exchanges());
    }
    assert!(connection.errors().len() <= limits.max_errors);
    exchanges.extend(connection.finish());
    for exchange in &exchanges {
        let halves = [
            exchange.request.as_ref().map(|r| &r.half),
            exchange.response.as_ref().map(|r| &r.half),
        ];
        for half in halves.into_iter().flatten() {
            assert!(half.body.len() <= limits.max_body_bytes);
            assert!(half.body.len() as u64 <= half.body_len);
            footprint.saw(half.body.len());
        }
        let _ = exchange.rest();
    }
    footprint
}

/// gRPC body splitting (gzip inflation bounded per message).
pub fn grpc_body(data: &[u8]) -> Footprint {
    let mut footprint = Footprint::default();
    for messages in [
        split_body(data, Some("gzip"), data.len().is_multiple_of(2)),
        split_body(data, None, true),
    ] {
        for message in &messages.messages {
            let len = match message {
                crate::grpc::Payload::Plain(bytes) => bytes.len(),
                crate::grpc::Payload::Compressed { .. }
                | crate::grpc::Payload::Truncated { .. } => 0,
            };
            assert!(len <= crate::grpc::MAX_MESSAGE_BYTES);
            footprint.saw(len);
        }
    }
    footprint
}

/// The etcd WAL reader fed in 100-byte writes, and every entry decoded.
pub fn wal(data: &[u8]) -> Footprint {
    let mut footprint = Footprint::default();
    for mut reader in [WalReader::new(), WalReader::at_file_start()] {
        for (i, piece) in data.chunks(100).enumerate() {
            let (records, _) = reader.push(piece, i % 17 == 16);
            for record in records {
                assert!(record.data.len() <= MAX_RECORD_BYTES);
                footprint.saw(record.data.len());
                if record.kind == RecordKind::Entry {
                    if let Ok(WalKvEntry {
                        request: Some((method, bytes)),
                        ..
                    }) = WalKvEntry::decode(&record)
                    {
                        let _ = crate::etcd::KvRequest::decode(method, &bytes);
                    }
                }
            }
        }
    }
    footprint
}

/// A Kubernetes stored object (protobuf envelope or JSON).
pub fn kube_object(data: &[u8]) -> Footprint {
    let mut footprint = Footprint::default();
    if decode_stored_object(data).is_ok() {
        footprint.saw(0);
    }
    footprint
}

/// A REST request line: the first byte picks the method, the rest is the
/// target (lossily UTF-8) and a few header values.
pub fn rest(data: &[u8]) -> Footprint {
    const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    let method = METHODS[usize::from(data.first().copied().unwrap_or(0)) % METHODS.len()];
    let text = String::from_utf8_lossy(data.get(1..).unwrap_or_default());
    let (target, header) = text.split_once('\n').unwrap_or((&text, ""));
    let headers = [
        ("content-type".to_string(), header.to_string()),
        ("accept".to_string(), header.to_string()),
    ];
    let request = RestRequest::resolve(method, target, &headers);
    let mut footprint = Footprint::default();
    // Nothing longer than the input is made up.
    assert!(request.route.len() <= target.len() + "{namespace}{name}{path}".len() * 2);
    footprint.saw(request.route.len());
    footprint
}

/// A watch body in both formats, in 97-byte pieces (the first byte's low
/// bit marks a truncated piece).
pub fn watch(data: &[u8]) -> Footprint {
    let mut footprint = Footprint::default();
    for format in [WatchFormat::Json, WatchFormat::Protobuf] {
        let mut decoder = WatchDecoder::new(format);
        let truncate = data.first().is_some_and(|b| b & 1 == 1);
        for (i, piece) in data.chunks(97).enumerate() {
            let (events, _) = decoder.push(piece, truncate && i == 2);
            assert!(decoder.buffered_bytes() <= MAX_EVENT_BYTES + piece.len());
            for _ in events {
                footprint.saw(decoder.buffered_bytes());
            }
        }
    }
    footprint
}

/// An etcd peer stream body of each kind, in 97-byte pieces (the first
/// byte's low bit marks a truncated piece).
pub fn raft_stream(data: &[u8]) -> Footprint {
    let mut footprint = Footprint::default();
    for kind in [StreamKind::Message, StreamKind::MsgAppV2] {
        let mut decoder = RaftStreamDecoder::new(PeerStream {
            kind,
            dialer: 1,
            writer: 2,
        });
        let truncate = data.first().is_some_and(|b| b & 1 == 1);
        for (i, piece) in data.chunks(97).enumerate() {
            let (messages, _) = decoder.push(piece, truncate && i == 2);
            let bound = MAX_MESSAGE_BYTES as usize + 17 + piece.len();
            assert!(decoder.buffered_bytes() <= bound);
            for message in messages {
                footprint.saw(message.entries.iter().map(|e| e.data.len()).sum());
            }
        }
    }
    footprint
}

/// Every entry point on the same bytes, as the cargo-fuzz target runs them.
pub fn all(data: &[u8]) -> Footprint {
    let chunks = chunks_from_bytes(data);
    let mut footprint = http2_connection(&chunks);
    footprint.add(http1_connection(&chunks));
    footprint.add(grpc_body(data));
    footprint.add(wal(data));
    footprint.add(kube_object(data));
    footprint.add(rest(data));
    footprint.add(watch(data));
    footprint.add(raft_stream(data));
    footprint
}
