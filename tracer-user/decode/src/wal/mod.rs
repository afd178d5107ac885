//! etcd WAL records: the bytes etcd writes to `member/wal/*.wal`.
//!
//! In: file bytes in write order, from the file's start or from anywhere in
//! it (capture of `write` calls), possibly cut. Out: [`WalRecord`]s (framing:
//! a little-endian 8-byte word whose low 56 bits are the record length and
//! whose top byte, when its high bit is set, holds the padding length in its
//! low 3 bits; then `walpb.Record`, then the padding to 8 bytes), and for
//! entry records the [`WalKvEntry`] with the KV request the Raft entry carries.
//! Limits: `README.md` here.

use prost::Message;

use crate::Decoded;
#[cfg(doc)]
use crate::etcd::KvRequest;
use crate::pb::{etcdserverpb, raftpb, walpb};

/// Largest record accepted: etcd's own limit on a WAL record (10 MiB).
pub const MAX_RECORD_BYTES: usize = 10 << 20;
const LENGTH_WORD_BYTES: usize = 8;

/// `walpb.Record.type` values (etcd `server/storage/wal/wal.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// metadataType: node and cluster id.
    Metadata,
    /// entryType: a `raftpb.Entry`.
    Entry,
    /// stateType: a `raftpb.HardState`.
    State,
    /// crcType: the rolling CRC carried over from the previous file.
    Crc,
    /// snapshotType: a `walpb.Snapshot`.
    Snapshot,
}

impl RecordKind {
    fn from_wire(kind: i64) -> Option<Self> {
        Some(match kind {
            1 => Self::Metadata,
            2 => Self::Entry,
            3 => Self::State,
            4 => Self::Crc,
            5 => Self::Snapshot,
            _ => return None,
        })
    }
}

/// One framed record.
#[derive(Clone, PartialEq, Eq)]
pub struct WalRecord {
    /// Record type.
    pub kind: RecordKind,
    /// Rolling CRC-32C as stored (not verified: it chains from records a
    /// mid-file capture never saw).
    pub crc: u32,
    /// The record's data (for entries, a `raftpb.Entry`).
    pub data: Vec<u8>,
}

impl std::fmt::Debug for WalRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalRecord")
            .field("kind", &self.kind)
            .field("crc", &self.crc)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// Why bytes are not a record. Framing errors lose sync: the reader
/// searches for the next record boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    /// A length word over [`MAX_RECORD_BYTES`] or with inconsistent padding.
    #[error("length word {word:#018x} is not a record length")]
    BadLength { word: u64 },
    /// The record bytes are not a `walpb.Record` of a known type.
    #[error("record of {len_bytes} bytes does not decode: {reason}")]
    BadRecord { len_bytes: usize, reason: String },
    /// An entry record whose data is not a `raftpb.Entry`.
    #[error("entry record does not decode: {reason}")]
    BadEntry { reason: String },
}

impl WalError {
    /// Whether the next record can be read without searching for a boundary.
    pub fn can_continue(&self) -> bool {
        matches!(self, WalError::BadEntry { .. })
    }
}

/// Length of the record data and of its padding, from a length word.
fn record_lengths(word: u64) -> Option<(usize, usize)> {
    let len = (word & 0x00ff_ffff_ffff_ffff) as usize;
    let pad = if word & (1 << 63) != 0 {
        ((word >> 56) & 0x7) as usize
    } else {
        0
    };
    // etcd pads every record to 8 bytes and sets the padding flag whenever
    // it pads, so the total is always a multiple of 8.
    ((len > 0) && len <= MAX_RECORD_BYTES && (len + pad).is_multiple_of(8)).then_some((len, pad))
}

/// Parses the record at the start of `buf`. A zero length word — the zeros
/// etcd preallocates past the last record — is [`Decoded::Incomplete`].
pub fn parse_record(buf: &[u8]) -> Result<Decoded<WalRecord>, WalError> {
    let Some(word) = buf.get(..LENGTH_WORD_BYTES) else {
        return Ok(Decoded::Incomplete);
    };
    let word = u64::from_le_bytes([
        word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
    ]);
    if word == 0 {
        return Ok(Decoded::Incomplete);
    }
    let (len, pad) = record_lengths(word).ok_or(WalError::BadLength { word })?;
    let consumed = LENGTH_WORD_BYTES + len + pad;
    let Some(bytes) = buf.get(LENGTH_WORD_BYTES..LENGTH_WORD_BYTES + len) else {
        return Ok(Decoded::Incomplete);
    };
    if buf.len() < consumed {
        return Ok(Decoded::Incomplete);
    }
    let record = walpb::Record::decode(bytes).map_err(|e| WalError::BadRecord {
        len_bytes: len,
        reason: e.to_string(),
    })?;
    // walpb is proto2: absent fields are None; etcd always writes all three.
    let wire_kind = record.r#type.unwrap_or_default();
    let kind = RecordKind::from_wire(wire_kind).ok_or_else(|| WalError::BadRecord {
        len_bytes: len,
        reason: format!("unknown record type {wire_kind}"),
    })?;
    let msg = WalRecord {
        kind,
        crc: record.crc.unwrap_or_default(),
        data: record.data.unwrap_or_default(),
    };
    Ok(Decoded::Message { msg, consumed })
}

/// Finds the first offset that starts two consecutive records (or one that
/// ends exactly at the end of `buf`). etcd writes records at 8-byte aligned
/// file offsets, but capture may not know the file offset, so every byte is tried.
pub fn find_record_boundary(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find(|&start| match parse_record(&buf[start..]) {
        Ok(Decoded::Message { consumed, .. }) => {
            let next = &buf[start + consumed..];
            next.is_empty()
                || matches!(
                    parse_record(next),
                    Ok(Decoded::Message { .. } | Decoded::Incomplete)
                )
        }
        _ => false,
    })
}

/// A Raft entry from an entry record, its KV request left as its message
/// bytes (decode them with [`KvRequest::decode`]): they are the client's
/// request as etcd encoded it again, most often the same bytes as on the
/// wire, so a caller that keeps what it decoded from the wire decodes each
/// request once. Other requests (leases, auth, cluster), empty entries and
/// configuration changes carry none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalKvEntry {
    /// Raft term.
    pub term: u64,
    /// Raft index.
    pub index: u64,
    /// The KV method (`Put`, `Txn`, …, as [`KvRequest::decode`] takes it)
    /// and its request message, if the entry is a KV request.
    pub request: Option<(&'static str, Vec<u8>)>,
}

/// `etcdserverpb.InternalRaftRequest` with only its KV requests, as bytes
/// (the tags are those of the full message; the rest is skipped).
#[derive(Clone, PartialEq, prost::Message)]
struct InternalKvRequestBytes {
    #[prost(bytes = "vec", optional, tag = "3")]
    range: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "4")]
    put: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    delete_range: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "6")]
    txn: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "7")]
    compaction: Option<Vec<u8>>,
}

impl WalKvEntry {
    /// Decodes an entry record's data down to its KV request's bytes.
    pub fn decode(record: &WalRecord) -> Result<WalKvEntry, WalError> {
        let entry =
            raftpb::Entry::decode(record.data.as_slice()).map_err(|e| WalError::BadEntry {
                reason: e.to_string(),
            })?;
        let normal = entry
            .r#type
            .is_none_or(|t| t == raftpb::EntryType::EntryNormal as i32);
        let data = entry.data.unwrap_or_default();
        let request = if normal { kv_request(&data) } else { None };
        Ok(WalKvEntry {
            term: entry.term.unwrap_or_default(),
            index: entry.index.unwrap_or_default(),
            request,
        })
    }
}

/// The KV request of a normal entry's data (an `InternalRaftRequest`): its
/// method (`Put`, `Txn`, …, as [`KvRequest::decode`] takes it) and message
/// bytes; `None` for other requests (leases, auth, cluster), empty entries
/// and data that does not decode. The same entry's data is in the WAL and in
/// the leader's appends to its followers ([`crate::raft`]).
pub fn kv_request(data: &[u8]) -> Option<(&'static str, Vec<u8>)> {
    if data.is_empty() {
        return None;
    }
    let InternalKvRequestBytes {
        range,
        put,
        delete_range,
        txn,
        compaction,
    } = InternalKvRequestBytes::decode(data).ok()?;
    put.map(|bytes| ("Put", bytes))
        .or_else(|| txn.map(|bytes| ("Txn", bytes)))
        .or_else(|| delete_range.map(|bytes| ("DeleteRange", bytes)))
        .or_else(|| range.map(|bytes| ("Range", bytes)))
        .or_else(|| compaction.map(|bytes| ("Compact", bytes)))
}

/// Which member writes a WAL: `etcdserverpb.Metadata`, the record after the
/// CRC at the start of every segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIds {
    /// The member's Raft id (etcd prints it in hex).
    pub member_id: u64,
    /// The cluster's id.
    pub cluster_id: u64,
}

impl MemberIds {
    /// The member named by the first bytes of a segment, or `None` when
    /// they end before its metadata record (or the member id is 0, which
    /// etcd never gives a member).
    pub fn from_segment_head(head: &[u8]) -> Result<Option<MemberIds>, WalError> {
        let mut at = 0;
        while let Decoded::Message { msg, consumed } = parse_record(&head[at..])? {
            at += consumed;
            if msg.kind == RecordKind::Metadata {
                return MemberIds::decode(&msg);
            }
        }
        Ok(None)
    }

    /// The member a metadata record names (`None` for member id 0, which
    /// etcd never gives a member). A new segment's head is written after
    /// the file is created, so a member's own write of it may be the first
    /// place its id is seen.
    pub fn decode(record: &WalRecord) -> Result<Option<MemberIds>, WalError> {
        let metadata = etcdserverpb::Metadata::decode(record.data.as_slice()).map_err(|e| {
            WalError::BadRecord {
                len_bytes: record.data.len(),
                reason: format!("metadata: {e}"),
            }
        })?;
        Ok(metadata
            .node_id
            .filter(|&id| id != 0)
            .map(|member_id| MemberIds {
                member_id,
                cluster_id: metadata.cluster_id.unwrap_or_default(),
            }))
    }
}

/// A member's Raft state as its WAL records it (`raftpb.HardState`, written
/// after the entries of a save whenever term, vote or commit changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardState {
    /// The member's current term.
    pub term: u64,
    /// The member it voted for in that term (0: none).
    pub vote: u64,
    /// The highest index it knows committed.
    pub commit: u64,
}

impl HardState {
    /// Decodes a state record's data.
    pub fn decode(record: &WalRecord) -> Result<HardState, WalError> {
        let state =
            raftpb::HardState::decode(record.data.as_slice()).map_err(|e| WalError::BadRecord {
                len_bytes: record.data.len(),
                reason: format!("hard state: {e}"),
            })?;
        Ok(HardState {
            term: state.term.unwrap_or_default(),
            vote: state.vote.unwrap_or_default(),
            commit: state.commit.unwrap_or_default(),
        })
    }

    /// The role of member `member_id`, whose state this is, for an entry of
    /// `term`, as far as the state alone tells: a member that voted for
    /// another, or (learning of the term from the leader's messages) for
    /// nobody, follows; one that voted for itself campaigned, and either
    /// won or lost to another candidate of the same term (a split vote),
    /// which only its traffic tells apart: [`RaftRole::Unknown`]. `None`
    /// when the state is of another term.
    pub fn role(&self, member_id: u64, term: u64) -> Option<RaftRole> {
        (self.term == term).then_some(if self.vote == member_id {
            RaftRole::Unknown
        } else {
            RaftRole::Follower
        })
    }
}

/// A member's part in a Raft term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftRole {
    /// It proposed the term's entries and replicated them.
    Leader,
    /// It appended what the leader sent.
    Follower,
    /// It campaigned in the term, and whether it won was not seen.
    Unknown,
}

impl RaftRole {
    /// The name spans use.
    pub fn as_str(self) -> &'static str {
        match self {
            RaftRole::Leader => "leader",
            RaftRole::Follower => "follower",
            RaftRole::Unknown => "unknown",
        }
    }
}

/// Reads records from WAL bytes delivered in pieces, resynchronising after
/// garbage or a start mid-file. Bounded: a buffer that holds no record
/// boundary is dropped down to the last [`LENGTH_WORD_BYTES`] bytes.
#[derive(Debug, Default)]
pub struct WalReader {
    buf: Vec<u8>,
    synced: bool,
    skipped_bytes: usize,
}

impl WalReader {
    /// A reader that does not know where records start. Use
    /// [`WalReader::at_file_start`] for bytes from offset 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A reader for bytes written from the file's first byte.
    pub fn at_file_start() -> Self {
        Self {
            synced: true,
            ..Self::default()
        }
    }

    /// Bytes dropped while searching for record boundaries.
    pub fn skipped_bytes(&self) -> usize {
        self.skipped_bytes
    }

    /// Adds written bytes; returns the records they completed and the
    /// problems met. `truncated` means bytes after these are missing.
    pub fn push(&mut self, bytes: &[u8], truncated: bool) -> (Vec<WalRecord>, Vec<WalError>) {
        self.buf.extend_from_slice(bytes);
        let (mut records, mut errors) = (Vec::new(), Vec::new());
        let mut at = 0;
        loop {
            if !self.synced {
                match find_record_boundary(&self.buf[at..]) {
                    Some(skip) => {
                        at += skip;
                        self.skipped_bytes += skip;
                        self.synced = true;
                    }
                    None => {
                        let keep = (self.buf.len() - at).min(LENGTH_WORD_BYTES);
                        self.skipped_bytes += self.buf.len() - at - keep;
                        at = self.buf.len() - keep;
                        break;
                    }
                }
            }
            match parse_record(&self.buf[at..]) {
                Ok(Decoded::Message { msg, consumed }) => {
                    records.push(msg);
                    at += consumed;
                }
                Ok(Decoded::Incomplete | Decoded::NotMine) => break,
                Err(error) => {
                    errors.push(error);
                    at += 1;
                    self.synced = false;
                }
            }
        }
        self.buf.drain(..at);
        if truncated {
            self.skipped_bytes += self.buf.len();
            self.buf.clear();
            self.synced = false;
        }
        (records, errors)
    }
}

#[cfg(test)]
mod tests;
