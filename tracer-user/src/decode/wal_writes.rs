//! etcd WAL writes → the Raft entries they append, with `tracer-decode`.
//!
//! In: bytes etcd wrote to a followed WAL segment (`FdKind::WalFile`). Out:
//! one [`WalMessage`] per write that completed entries naming Pods, with the
//! fingerprint of each entry's KV request (the same as the gRPC call's, see
//! [`super::decoded_once::request_fingerprint`]). Writes are read from
//! wherever the capture joins the file: the reader finds record boundaries
//! itself, and a truncated capture costs the records it cut, counted.
//!
//! Which member wrote an entry, and in which role, comes from the member's
//! records: the metadata record at the head of a segment (read from the
//! file by capture, a [`WalHeadRecord`], or from the member's own write of
//! a segment it created) gives its id; the `HardState`
//! saved after a write's entries gives the term and the member's vote, and
//! so whether it led that term ([`HardState::role`]).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use tracer_common::io::{Direction, FdKind};
use tracer_decode::{
    identity::{PodClue, may_hold_pod_clue},
    wal::{HardState, MemberIds, RaftRole, RecordKind, WalError, WalKvEntry, WalReader},
};

use super::decoded_once::DecodedOnce;
use crate::capture::{ConnKey, DataRecord, WalHeadRecord};

/// WAL segments read at once (etcd keeps one open for writing; a few more
/// appear while it cuts a new segment).
const MAX_FILES: usize = 64;
/// etcd members (processes) whose id and state are kept at once.
const MAX_MEMBERS: usize = 64;

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
    /// The member's part in the entry's term; `None` until a state record
    /// of that term was read (or when the member's id is unknown).
    pub role: Option<RaftRole>,
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
    /// The member that wrote it, when the head of one of its segments
    /// named it.
    pub member: Option<MemberIds>,
}

/// What the records of one member (process) said of it.
#[derive(Debug, Default, Clone, Copy)]
struct MemberState {
    ids: Option<MemberIds>,
    state: Option<HardState>,
}

/// WAL readers per segment.
#[derive(Debug, Default)]
pub struct WalDecoder {
    readers: FxHashMap<ConnKey, WalReader>,
    /// By tgid.
    members: FxHashMap<u32, MemberState>,
    /// Segments not read because `MAX_FILES` were being read.
    pub skipped_files: u64,
    /// Segment heads and writes whose member (process) was not kept
    /// because `MAX_MEMBERS` were.
    pub skipped_members: u64,
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
        // A segment's head as the member writes it: the segment head read at
        // the file's open finds nothing yet when the member created the file.
        for record in records.iter().filter(|r| r.kind == RecordKind::Metadata) {
            self.learn_ids(data.conn.tgid, MemberIds::decode(record));
        }
        let member = self.member(data.conn.tgid).and_then(|m| m.ids);
        let member_id = member.map(|m| m.member_id);
        let mut message = WalMessage {
            conn: data.conn,
            start_ts_ns: data.enter_ts_ns,
            bytes: data.len,
            entries: 0,
            pod_entries: Vec::new(),
            member,
        };
        // Pod entries of this write not yet given a role: etcd saves a
        // Ready's entries, then its state.
        let mut roleless = 0;
        for record in &records {
            match record.kind {
                RecordKind::State => match HardState::decode(record) {
                    Ok(state) => {
                        if let Some(member) = self.members.get_mut(&data.conn.tgid) {
                            member.state = Some(state);
                        }
                        assign_roles(&mut message.pod_entries[roleless..], member_id, Some(state));
                        roleless = message.pod_entries.len();
                    }
                    Err(_) => self.bad_records += 1,
                },
                RecordKind::Entry => {
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
                            role: None,
                        });
                    }
                }
                _ => {}
            }
        }
        // Entries whose state was saved by an earlier write (or not yet).
        let state = self.members.get(&data.conn.tgid).and_then(|m| m.state);
        assign_roles(&mut message.pod_entries[roleless..], member_id, state);
        Some(message)
    }

    /// The head of a segment of a member: its id, once the metadata record
    /// is among the bytes.
    pub fn on_head(&mut self, head: &WalHeadRecord) {
        self.learn_ids(head.conn.tgid, MemberIds::from_segment_head(&head.head));
    }

    /// What a metadata record of process `tgid`'s WAL said of the member.
    fn learn_ids(&mut self, tgid: u32, read: Result<Option<MemberIds>, WalError>) {
        match read {
            Ok(Some(ids)) => {
                if let Some(member) = self.member(tgid) {
                    member.ids = Some(ids);
                }
            }
            Ok(None) => {}
            Err(_) => self.bad_records += 1,
        }
    }

    /// Process `tgid` exited or exec'd: it is no longer that member.
    pub fn on_process_gone(&mut self, tgid: u32) {
        self.members.remove(&tgid);
    }

    /// The state kept of process `tgid`, made if there is room.
    fn member(&mut self, tgid: u32) -> Option<&mut MemberState> {
        if !self.members.contains_key(&tgid) && self.members.len() >= MAX_MEMBERS {
            self.skipped_members += 1;
            return None;
        }
        Some(self.members.entry(tgid).or_default())
    }

    /// A segment was closed: forget its reader.
    pub fn on_close(&mut self, conn: &ConnKey) {
        self.readers.remove(conn);
    }
}

/// Each entry's role in its term, as the state of member `member_id` says
/// (unknown without either).
fn assign_roles(entries: &mut [WalPodEntry], member_id: Option<u64>, state: Option<HardState>) {
    for entry in entries {
        entry.role = member_id
            .zip(state)
            .and_then(|(id, state)| state.role(id, entry.term));
    }
}
