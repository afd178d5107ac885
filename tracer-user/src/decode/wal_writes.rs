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
//! saved after a write's entries gives the term and the member's vote: a
//! member that voted for another follows ([`HardState::role`]). Whether one
//! that voted for itself won its campaign or lost a split vote, only Raft's
//! own messages tell: the process that sends a term's appends or heartbeats
//! leads it, one that receives them follows ([`PeerTraffic`]). A member
//! whose process never carried a peer message is alone (a single member
//! wins every campaign); one that has peers but whose part in the term was
//! not seen is named `unknown`.

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

/// Raft messages one etcd process sent or received on its peer streams,
/// as one record of them showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerTraffic {
    /// The process.
    pub tgid: u32,
    /// The latest term of a message only a leader sends (an append or a
    /// heartbeat) among them, and whether this process sent it (led the
    /// term) or received it (followed).
    pub leader_message: Option<(u64, bool)>,
}

/// What the records of one member (process) said of it.
#[derive(Debug, Default, Clone, Copy)]
struct MemberState {
    ids: Option<MemberIds>,
    state: Option<HardState>,
    /// It carried peer messages: it is not alone.
    has_peers: bool,
    /// The latest term whose leader's messages it carried, and whether it
    /// sent them.
    seen_term: Option<(u64, bool)>,
}

impl MemberState {
    /// Its part in `term`, from its traffic first, then its state.
    fn role(&self, term: u64) -> Option<RaftRole> {
        if let Some((seen, leads)) = self.seen_term
            && seen == term
        {
            return Some(if leads {
                RaftRole::Leader
            } else {
                RaftRole::Follower
            });
        }
        let (ids, state) = self.ids.zip(self.state)?;
        Some(match state.role(ids.member_id, term)? {
            RaftRole::Unknown if !self.has_peers => RaftRole::Leader,
            role => role,
        })
    }
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
                            assign_roles(&mut message.pod_entries[roleless..], member);
                        }
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
        if let Some(member) = self.members.get(&data.conn.tgid) {
            assign_roles(&mut message.pod_entries[roleless..], member);
        }
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

    /// The member process `tgid` is, once the head of one of its segments
    /// named it.
    pub fn member_id(&self, tgid: u32) -> Option<u64> {
        Some(self.members.get(&tgid)?.ids?.member_id)
    }

    /// What an etcd process's peer messages showed of its part in Raft.
    pub fn on_peer_traffic(&mut self, traffic: PeerTraffic) {
        let Some(member) = self.member(traffic.tgid) else {
            return;
        };
        member.has_peers = true;
        if let Some((term, leads)) = traffic.leader_message
            && member.seen_term.is_none_or(|(seen, _)| term >= seen)
        {
            member.seen_term = Some((term, leads));
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

/// Each entry's role in its term, as what was seen of `member` says.
fn assign_roles(entries: &mut [WalPodEntry], member: &MemberState) {
    for entry in entries {
        entry.role = member.role(entry.term);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u64 = 0x8e9e_05c5_2164_694d;
    const OTHER: u64 = 0x91bc_3c39_8fb3_c146;

    /// Member `ME`, run by process 7, whose last saved state is of term 5
    /// with its vote for `vote`.
    fn decoder(vote: u64) -> WalDecoder {
        let mut decoder = WalDecoder::default();
        let member = decoder.member(7).unwrap();
        member.ids = Some(MemberIds {
            member_id: ME,
            cluster_id: 1,
        });
        member.state = Some(HardState {
            term: 5,
            vote,
            commit: 40,
        });
        decoder
    }

    fn role(decoder: &WalDecoder, term: u64) -> Option<RaftRole> {
        decoder.members[&7].role(term)
    }

    fn traffic(term: u64, sent: bool) -> PeerTraffic {
        PeerTraffic {
            tgid: 7,
            leader_message: Some((term, sent)),
        }
    }

    #[test]
    fn a_member_that_voted_for_itself_leads_only_if_its_traffic_says_so() {
        // Alone (no peer message ever): every campaign wins.
        let mut decoder = decoder(ME);
        assert_eq!(role(&decoder, 5), Some(RaftRole::Leader));
        // With peers, a vote for itself may have lost a split vote.
        decoder.on_peer_traffic(PeerTraffic {
            tgid: 7,
            leader_message: None,
        });
        assert_eq!(role(&decoder, 5), Some(RaftRole::Unknown));
        // It received the term's heartbeats or appends: it lost.
        decoder.on_peer_traffic(traffic(5, false));
        assert_eq!(role(&decoder, 5), Some(RaftRole::Follower));
        // It sent the next term's: it leads that one, whatever its state.
        decoder.on_peer_traffic(traffic(6, true));
        assert_eq!(role(&decoder, 6), Some(RaftRole::Leader));
        // An older term's message says nothing of the latest.
        decoder.on_peer_traffic(traffic(5, false));
        assert_eq!(role(&decoder, 6), Some(RaftRole::Leader));
        assert_eq!(role(&decoder, 5), Some(RaftRole::Unknown));
    }

    #[test]
    fn a_member_that_voted_for_another_follows_and_a_state_of_another_term_says_nothing() {
        let decoder = decoder(OTHER);
        assert_eq!(role(&decoder, 5), Some(RaftRole::Follower));
        assert_eq!(role(&decoder, 4), None);
    }
}
