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

use std::net::IpAddr;

use rustc_hash::FxHashMap;
use tracer_common::io::Direction;
use tracer_decode::{
    http1::RaftUpdate,
    identity::may_hold_pod_clue,
    raft::{
        MessageKind, PeerStream, RaftEntry, RaftMessage,
        joined::{Joined, JoinedStream},
    },
    wal::kv_request,
};

use super::{
    decoded_once::DecodedOnce,
    wal_writes::{PeerTraffic, WalPodEntry},
};
use crate::capture::{ConnKey, DataRecord};

/// (process, host) pairs whose peer member is kept ([`PeerStreams`]).
const MAX_PEER_HOSTS: usize = 1024;

/// Where one end of a connection is, for naming a peer stream's members.
#[derive(Clone, Copy, Debug)]
pub struct StreamEnd {
    /// This end.
    pub conn: ConnKey,
    /// This end accepted the connection: it writes a peer stream's
    /// messages (the other end dialled, and reads them).
    pub accepted: bool,
    /// For a TCP connection open before podtrace started: its local port
    /// and the other end's port.
    pub ports: Option<(u16, u16)>,
    /// For a TCP connection: the other end's address.
    pub remote_ip: Option<IpAddr>,
}

/// The etcd peer streams of every connection decoded: who is at their
/// ends, what they showed of each member's part, and what they lost.
#[derive(Debug, Default)]
pub struct PeerStreams {
    /// Each record's [`PeerMessages::traffic`], until the decode stage hands
    /// it to the WAL decoder.
    pub traffic: Vec<PeerTraffic>,
    /// Streams older than podtrace placed from their bytes.
    pub joined: u64,
    /// Appends with Pod entries dropped: their stream had not named its
    /// members yet.
    pub unnamed: u64,
    /// Stream frames that did not decode, or whose stream lost its framing.
    pub errors: u64,
    /// Which etcd member each process is (by tgid), from its WAL: names the
    /// members of a joined stream whose messages do not.
    pub members: FxHashMap<u32, u64>,
    /// TCP connections open before podtrace started, by (local port, other
    /// end's port): the other end of one between two processes of this host
    /// is the one keyed the other way round. `None` when two were keyed
    /// alike (processes in different network namespaces): no pairing then.
    ends: FxHashMap<(u16, u16), Option<ConnKey>>,
    /// The member at the other end of a process's peer streams with a
    /// host, by (tgid, the host's address), as the streams that named it
    /// showed: a stream to a member on another node, which no pairing
    /// names, is named by the other streams with that node (one member a
    /// node). `None` when two named different members (several members
    /// behind one address, as on one host).
    hosts: FxHashMap<(u32, IpAddr), Option<u64>>,
    /// Hosts not kept: [`MAX_PEER_HOSTS`] were.
    pub hosts_dropped: u64,
}

impl PeerStreams {
    /// A TCP connection open before podtrace started, with `ports` (local,
    /// other end's).
    pub fn on_open(&mut self, conn: ConnKey, ports: (u16, u16)) {
        self.ends
            .entry(ports)
            .and_modify(|end| *end = None)
            .or_insert(Some(conn));
    }

    /// That connection closed.
    pub fn on_close(&mut self, conn: ConnKey, ports: (u16, u16)) {
        if self.ends.get(&ports) == Some(&Some(conn)) {
            self.ends.remove(&ports);
        }
    }

    /// Process `tgid` exited: the hosts its streams named go.
    pub fn on_exit(&mut self, tgid: u32) {
        self.hosts.retain(|(of, _), _| *of != tgid);
    }

    /// A record of the writer's bytes on a connection whose request was
    /// not seen, pushed to its `joined` stream: its messages once the
    /// stream is placed, `None` before (or when it is no peer stream).
    pub fn joined(
        &mut self,
        end: StreamEnd,
        joined: &mut JoinedStream,
        data: &DataRecord,
        once: &mut DecodedOnce,
    ) -> Option<Vec<RaftPeerMessage>> {
        let (writer, dialer) = self.ends_members(end);
        joined.name_members(writer, dialer);
        let placed_before = joined.placed();
        let Joined::Decoded {
            stream,
            messages,
            errors,
        } = joined.push(&data.data, data.truncated)
        else {
            return None;
        };
        if placed_before == 0 {
            self.joined += 1;
            tracing::debug!(conn = ?data.conn, "etcd peer stream joined mid-way placed");
        }
        if !errors.is_empty() {
            tracing::debug!(conn = ?data.conn, ?errors, "etcd peer stream joined mid-way");
            self.errors += errors.len() as u64;
        }
        self.note_named(end, stream);
        Some(self.messages(data, messages, once))
    }

    /// The messages of a stream whose request was seen.
    pub fn from_start(
        &mut self,
        end: StreamEnd,
        updates: Vec<RaftUpdate>,
        data: &DataRecord,
        once: &mut DecodedOnce,
    ) -> Vec<RaftPeerMessage> {
        if let Some(update) = updates.first() {
            self.note_named(end, update.stream);
        }
        let raft = updates.into_iter().map(|update| update.message).collect();
        self.messages(data, raft, once)
    }

    /// Stream `stream` on `end` named its other member: kept for the
    /// process's other streams with that host.
    fn note_named(&mut self, end: StreamEnd, stream: PeerStream) {
        let other = if end.accepted {
            stream.dialer
        } else {
            stream.writer
        };
        let Some(remote) = end.remote_ip.filter(|_| other != 0) else {
            return;
        };
        let key = (end.conn.tgid, remote);
        let room = self.hosts.len() < MAX_PEER_HOSTS;
        match self.hosts.get_mut(&key) {
            Some(known) => {
                if *known != Some(other) {
                    *known = None;
                }
            }
            None if room => {
                self.hosts.insert(key, Some(other));
            }
            None => self.hosts_dropped += 1,
        }
    }

    /// The members of a joined stream on `end` as the processes at its ends
    /// say: (writer, dialer), 0 where not known. The writer is the end that
    /// accepted; the other end is the process this host pairs it with, or
    /// the member this process's other streams with that host named.
    fn ends_members(&self, end: StreamEnd) -> (u64, u64) {
        let member = |tgid: u32| self.members.get(&tgid).copied();
        let paired = end
            .ports
            .and_then(|(local, remote)| self.ends.get(&(remote, local)).copied().flatten())
            .and_then(|other| member(other.tgid));
        let by_host = || {
            end.remote_ip
                .and_then(|remote| self.hosts.get(&(end.conn.tgid, remote)).copied())
                .flatten()
        };
        let other = paired.or_else(by_host).unwrap_or(0);
        let this = member(end.conn.tgid).unwrap_or(0);
        if end.accepted {
            (this, other)
        } else {
            (other, this)
        }
    }

    /// The messages of one record of a peer stream.
    fn messages(
        &mut self,
        data: &DataRecord,
        raft: Vec<RaftMessage>,
        once: &mut DecodedOnce,
    ) -> Vec<RaftPeerMessage> {
        let decoded = messages(data, raft, once);
        self.traffic.extend(decoded.traffic);
        self.unnamed += decoded.unnamed;
        decoded.messages
    }
}

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
struct PeerMessages {
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
fn messages(data: &DataRecord, raft: Vec<RaftMessage>, once: &mut DecodedOnce) -> PeerMessages {
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
                // The leader's heartbeats name every follower it has, one
                // whose appends are paused (a slow follower) included.
                MessageKind::Heartbeat if sent => Vec::new(),
                _ => return None,
            };
            // Members not named yet: nothing to join it to (a heartbeat
            // carries no entry: nothing lost).
            if message.from == 0 || message.to == 0 {
                unnamed += u64::from(message.kind != MessageKind::Heartbeat);
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

#[cfg(test)]
mod tests {
    use tracer_decode::raft::StreamKind;

    use super::*;

    const LEADER: u64 = 0x8e9e;
    const FOLLOWER: u64 = 0x91bc;

    fn end(tgid: u32, accepted: bool, ports: Option<(u16, u16)>, ip: &str) -> StreamEnd {
        StreamEnd {
            conn: ConnKey { tgid, conn_id: 9 },
            accepted,
            ports,
            remote_ip: Some(ip.parse().unwrap()),
        }
    }

    #[test]
    fn the_two_ends_of_a_stream_on_one_host_name_its_members() {
        let mut peers = PeerStreams::default();
        peers.members.extend([(100, LEADER), (200, FOLLOWER)]);
        // The leader (tgid 100) accepted on its peer port 2380 what the
        // follower (tgid 200) dialled from port 40000, before podtrace.
        let accepted = end(100, true, Some((2380, 40000)), "127.0.0.1");
        let dialled = end(200, false, Some((40000, 2380)), "127.0.0.1");
        peers.on_open(accepted.conn, (2380, 40000));
        peers.on_open(dialled.conn, (40000, 2380));
        // Each end names both: the writer is the end that accepted.
        assert_eq!(peers.ends_members(accepted), (LEADER, FOLLOWER));
        assert_eq!(peers.ends_members(dialled), (LEADER, FOLLOWER));
        // A third socket keyed alike (another network namespace) makes the
        // pairing ambiguous: only each end's own process is named then.
        let twin = ConnKey {
            tgid: 300,
            conn_id: 9,
        };
        peers.on_open(twin, (40000, 2380));
        assert_eq!(peers.ends_members(accepted), (LEADER, 0));
    }

    #[test]
    fn a_stream_with_a_member_on_another_node_is_named_by_the_other_streams_with_that_node() {
        let mut peers = PeerStreams::default();
        peers.members.insert(100, LEADER);
        // The leader's `message` stream to the follower there named it.
        let message = end(100, true, None, "10.0.0.2");
        let named = PeerStream {
            kind: StreamKind::Message,
            dialer: FOLLOWER,
            writer: LEADER,
        };
        peers.note_named(message, named);
        // Its `msgapp` stream to that node, unpaired on this host: the same.
        let msgapp = StreamEnd {
            conn: ConnKey {
                tgid: 100,
                conn_id: 2,
            },
            ..message
        };
        assert_eq!(peers.ends_members(msgapp), (LEADER, FOLLOWER));
        // Another member behind the same address: no longer named.
        let other = PeerStream {
            dialer: 0x77,
            ..named
        };
        peers.note_named(message, other);
        assert_eq!(peers.ends_members(msgapp), (LEADER, 0));
        // A process gone forgets its hosts.
        peers.on_exit(100);
        assert!(peers.hosts.is_empty());
    }
}
