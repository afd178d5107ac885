//! etcd WAL writes → the Raft entries they append, with `tracer-decode`.
//!
//! In: bytes etcd wrote to a followed WAL segment (`FdKind::WalFile`). Out:
//! one [`WalMessage`] per write that completed entries naming Pods, with the
//! fingerprint of each entry's KV request (the same as the gRPC call's, see
//! [`super::decoded_once::request_fingerprint`]). Writes are read from
//! wherever the capture joins the file: the reader finds record boundaries
//! itself, and a truncated capture costs the records it cut, counted.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use tracer_common::io::{Direction, FdKind};
use tracer_decode::{
    identity::{PodClue, may_hold_pod_clue},
    wal::{RecordKind, WalKvEntry, WalReader},
};

use super::decoded_once::DecodedOnce;
use crate::capture::{ConnKey, DataRecord};

/// WAL segments read at once (etcd keeps one open for writing; a few more
/// appear while it cuts a new segment).
const MAX_FILES: usize = 64;

/// A Raft entry that writes a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalPodEntry {
    /// Raft index.
    pub index: u64,
    /// Raft term.
    pub term: u64,
    /// The Pod keys and identity in the entry's request.
    pub clues: Arc<[PodClue]>,
    /// See [`super::grpc_calls::EtcdMessage::fingerprint`].
    pub fingerprint: [u8; 16],
}

/// One write to a WAL segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalMessage {
    /// The segment (as the file's connection key).
    pub conn: ConnKey,
    /// When the write syscall was entered (CLOCK_MONOTONIC ns).
    pub start_ts_ns: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Raft entries the write completed, of any content.
    pub entries: u64,
    /// Those that write Pods.
    pub pod_entries: Vec<WalPodEntry>,
}

/// WAL readers per segment.
#[derive(Debug, Default)]
pub struct WalDecoder {
    readers: FxHashMap<ConnKey, WalReader>,
    /// Segments not read because `MAX_FILES` were being read.
    pub skipped_files: u64,
    /// Records that did not decode (the reader resynchronised after each).
    pub bad_records: u64,
}

impl WalDecoder {
    /// Reads a write to a WAL segment; other data yields nothing.
    pub fn on_data(&mut self, data: &DataRecord, once: &mut DecodedOnce) -> Option<WalMessage> {
        if data.fd_kind != FdKind::WalFile || data.direction != Direction::Egress {
            return None;
        }
        if !self.readers.contains_key(&data.conn) && self.readers.len() >= MAX_FILES {
            self.skipped_files += 1;
            return None;
        }
        let reader = self.readers.entry(data.conn).or_default();
        let (records, errors) = reader.push(&data.data, data.truncated);
        self.bad_records += errors.len() as u64;
        let mut message = WalMessage {
            conn: data.conn,
            start_ts_ns: data.enter_ts_ns,
            bytes: data.len,
            entries: 0,
            pod_entries: Vec::new(),
        };
        for record in records.iter().filter(|r| r.kind == RecordKind::Entry) {
            message.entries += 1;
            // Leases, events and the rest of a control plane's writes never
            // name a Pod key: not worth decoding (as for KV calls on the wire).
            if !may_hold_pod_clue(&record.data) {
                continue;
            }
            let Ok(entry) = WalKvEntry::decode(record) else {
                self.bad_records += 1;
                continue;
            };
            let Some((method, request)) = &entry.request else {
                continue;
            };
            // The request the client sent, usually byte for byte: decoded
            // already when its gRPC call was.
            if let Some(facts) = once.kv_request(method, request, data.ids.ts_ns) {
                message.pod_entries.push(WalPodEntry {
                    index: entry.index,
                    term: entry.term,
                    clues: facts.clues,
                    fingerprint: facts.fingerprint,
                });
            }
        }
        Some(message)
    }

    /// A segment was closed: forget its reader.
    pub fn on_close(&mut self, conn: &ConnKey) {
        self.readers.remove(conn);
    }
}
