//! Arbitrary bytes through the HTTP/2 connection decoder (as chunks of both
//! directions, some truncated), gRPC body splitting with gzip, and the etcd
//! WAL reader with entry decoding. None may panic; memory stays bounded by
//! each decoder's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracer_decode::grpc::{GrpcCall, split_body};
use tracer_decode::http2::Http2Connection;
use tracer_decode::wal::{RecordKind, WalEntry, WalReader};
use tracer_decode::{Chunk, Direction};

fuzz_target!(|data: &[u8]| {
    // HTTP/2: the first byte of each 64-byte piece picks direction and truncation.
    let mut connection = Http2Connection::default();
    for (i, piece) in data.chunks(64).enumerate() {
        let control = piece.first().copied().unwrap_or(0);
        connection.push(&Chunk {
            direction: if control & 1 == 0 { Direction::ClientToServer } else { Direction::ServerToClient },
            ts_ns: i as u64,
            bytes: piece.to_vec(),
            truncated: control & 0x80 != 0 && control & 0x40 != 0,
        });
    }
    for exchange in connection.finish() {
        let _ = GrpcCall::from_exchange(&exchange);
    }

    let _ = split_body(data, Some("gzip"), data.len() % 2 == 0);

    let mut reader = WalReader::new();
    for piece in data.chunks(100) {
        for record in reader.push(piece, false).0 {
            if record.kind == RecordKind::Entry {
                let _ = WalEntry::decode(&record);
            }
        }
    }
});
