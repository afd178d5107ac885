//! etcd peer streams → the Raft messages a Pod's trace needs, with
//! `tracer-decode`.
//!
//! In: the [`RaftUpdate`]s the HTTP/1.1 layer of a followed connection
//! decoded (etcd members' `/raft/stream/…` bodies, plaintext after TLS).
//! Out: one [`RaftPeerMessage`] per append that carries entries writing
//! Pods, per answer to an append, and per forwarded proposal of a Pod
//! write, seen from the process at this end of the connection: the member
//! that wrote it (sent) or the one that read it. Each Pod entry has the
//! fingerprint of its KV request, as the WAL's copy of it and the client's
//! call do ([`super::decoded_once::request_fingerprint`]). Every record's
//! messages also say what the process's part in Raft is ([`PeerTraffic`]),
//! whatever they carry.

use tracer_common::io::Direction;
use tracer_decode::{
    identity::may_hold_pod_clue,
    raft::{MessageKind, RaftEntry, RaftMessage},
    wal::kv_request,
};

use super::{
    decoded_once::DecodedOnce,
    wal_writes::{PeerTraffic, WalPodEntry},
};
use crate::capture::{ConnKey, DataRecord};

/// A Raft message between etcd members, as one end of their connection saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftPeerMessage {
    /// This end's connection.
    pub conn: ConnKey,
    /// This end's process wrote it (else it read it).
    pub sent: bool,
    /// When the bytes that completed it moved (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// Append, answer or forwarded proposal.
    pub kind: MessageKind,
    /// Sending member's Raft id.
    pub from: u64,
    /// Receiving member's Raft id.
    pub to: u64,
    /// For an answer: the index the sender now holds.
    pub index: u64,
    /// An answer that refused the append.
    pub reject: bool,
    /// Entries that write Pods, with their requests' fingerprints (roles
    /// are not set: the member's part is the message's direction).
    pub pod_entries: Vec<WalPodEntry>,
}

/// What one record of a peer stream gave.
#[derive(Debug, Default)]
pub struct PeerMessages {
    /// The messages a trace needs.
    pub messages: Vec<RaftPeerMessage>,
    /// What they show of the process's part in Raft (`None` without any
    /// message).
    pub traffic: Option<PeerTraffic>,
    /// Messages with Pod entries dropped because the stream had not named
    /// its members yet (appends on a `msgapp` stream joined mid-way,
    /// before its first full MsgApp).
    pub unnamed: u64,
}

/// The messages a record of `data`'s connection completed.
pub fn messages(data: &DataRecord, raft: Vec<RaftMessage>, once: &mut DecodedOnce) -> PeerMessages {
    let sent = data.direction == Direction::Egress;
    let traffic = (!raft.is_empty()).then(|| PeerTraffic {
        tgid: data.conn.tgid,
        leader_message: raft
            .iter()
            // A message from a member whose id the stream has not shown yet
            // (an append on a `msgapp` stream joined mid-way) is still its
            // writer's.
            .filter(|message| message.kind.from_leader() && message.term > 0)
            .map(|message| (message.term, sent))
            .max(),
    });
    let mut unnamed = 0;
    let messages = raft
        .into_iter()
        .filter_map(|message| {
            let pod_entries = match message.kind {
                MessageKind::App | MessageKind::Prop => {
                    let entries = pod_entries(&message.entries, once, data.ids.ts_ns);
                    if entries.is_empty() {
                        return None;
                    }
                    entries
                }
                MessageKind::AppResp => Vec::new(),
                _ => return None,
            };
            // Members not named yet: nothing to join it to.
            if message.from == 0 || message.to == 0 {
                unnamed += 1;
                return None;
            }
            Some(RaftPeerMessage {
                conn: data.conn,
                sent,
                ts_ns: data.moved_ts_ns(),
                kind: message.kind,
                from: message.from,
                to: message.to,
                index: message.index,
                reject: message.reject,
                pod_entries,
            })
        })
        .collect();
    PeerMessages {
        messages,
        traffic,
        unnamed,
    }
}

/// The entries that write Pods followed, decoded once per request (the
/// leader's WAL and each follower's decode the same request again).
fn pod_entries(entries: &[RaftEntry], once: &mut DecodedOnce, ts_ns: u64) -> Vec<WalPodEntry> {
    entries
        .iter()
        // Leases, events and the rest never name a Pod key (as for the WAL).
        .filter(|entry| may_hold_pod_clue(&entry.data))
        .filter_map(|entry| {
            let (method, request) = kv_request(&entry.data)?;
            let facts = once.kv_request(method, &request, ts_ns)?;
            Some(WalPodEntry {
                index: entry.index,
                term: entry.term,
                clues: facts.clues,
                fingerprint: facts.fingerprint,
                role: None,
            })
        })
        .collect()
}
