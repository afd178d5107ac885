//! Raft replication of Pod writes across etcd members, as the leader's
//! messages show it: when it sent each entry to each follower, when each
//! follower answered that it held it, when the leader's own fdatasync ended,
//! and from those the commit (a quorum of members holding the entry) and
//! the apply (from the commit to the answer).
//!
//! A proposal made on a member that does not lead is forwarded to the
//! leader first (`MsgProp`): that hop is reported too.
//!
//! In: Raft messages ([`RaftPeerMessage`]), the leader's WAL syncs of Pod
//! entries, and the ends of etcd's server spans. Out: [`Replicated`]
//! events, from which [`super::control_spans`] drafts the spans. Pure
//! bookkeeping: no span is built here.
//!
//! The commit is when the leader had both its own entry durable and
//! answers from enough followers for a majority of the members: etcd's
//! leader counts its own append at once, but a Ready's committed entries
//! are applied only after the Ready that appended them was saved, so the
//! leader's fdatasync is part of the wait. The members are the leader and
//! every follower it has sent appends or heartbeats to: a slow follower's
//! appends may be paused past a commit (Raft's flow control), its
//! heartbeats are not.

use std::collections::{BTreeMap, HashMap};

use tracer_decode::raft::MessageKind;

use crate::decode::{RaftPeerMessage, wal_writes::WalPodEntry};

/// Pod entries followed at once; past it the oldest is dropped, counted.
const MAX_ENTRIES: usize = 4096;
/// Followers remembered per leader (a cluster of more members is not one
/// etcd runs: 7 is its largest recommended size).
const MAX_FOLLOWERS: usize = 16;
/// Leader syncs kept for entries whose first append was not seen yet.
const MAX_EARLY_SYNCS: usize = 256;

/// What happened to one entry, for the spans it makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replicated {
    /// The leader sent the entry to a follower and, unless `acked_ns` is
    /// `None` (no answer within the wait), heard back that it held it.
    Sent {
        entry: WalPodEntry,
        leader: u64,
        follower: u64,
        sent_ns: u64,
        acked_ns: Option<u64>,
        /// Its answer was one of those the commit waited for.
        in_quorum: bool,
    },
    /// A member that is not the leader forwarded the request's proposal to
    /// the leader (`MsgProp`), which read it at `received_ns`.
    Forwarded {
        entry: WalPodEntry,
        from: u64,
        to: u64,
        sent_ns: u64,
        received_ns: u64,
    },
    /// A follower received the entry (on this node): its WAL span hangs
    /// from the replication span of its leader, which this agent or the
    /// leader's node's agent makes.
    Arrived { entry: WalPodEntry, follower: u64 },
    /// A quorum held the entry.
    Committed {
        entry: WalPodEntry,
        leader: u64,
        /// The leader's first append of it.
        proposed_ns: u64,
        commit_ns: u64,
        /// Members in the cluster and in a quorum.
        members: usize,
        quorum: usize,
        /// Those whose holding the commit waited for, in order; the last
        /// is the one it waited for longest (the leader's id for its sync).
        waited_for: Vec<u64>,
        /// Followers that had not answered by then (or not been sent the
        /// entry yet).
        not_waited_for: Vec<u64>,
    },
    /// The member that took the request answered after the commit.
    Applied {
        entry: WalPodEntry,
        commit_ns: u64,
        answered_ns: u64,
        /// The answering process.
        server_tgid: u32,
    },
}

/// The leader's append of an entry to one follower.
#[derive(Clone, Copy, Debug)]
struct Append {
    follower: u64,
    sent_ns: u64,
    /// When the leader read the follower's answer that it holds the entry.
    answered_ns: Option<u64>,
}

#[derive(Clone, Debug)]
struct Tracked {
    entry: WalPodEntry,
    leader: u64,
    proposed_ns: u64,
    sends: Vec<Append>,
    leader_synced_ns: Option<u64>,
    commit_ns: Option<u64>,
    answered: Option<(u64, u32)>,
}

/// Replication state of the Pod entries in flight.
#[derive(Debug, Default)]
pub struct Replication {
    /// By Raft index.
    entries: BTreeMap<u64, Tracked>,
    /// Index of each tracked entry's request.
    by_fingerprint: HashMap<[u8; 16], u64>,
    /// Followers each leader has sent appends to.
    followers: HashMap<u64, Vec<u64>>,
    /// Leader syncs of entries not tracked yet, by index.
    early_syncs: HashMap<u64, u64>,
    /// Proposals forwarded to a leader and not yet read by it, by request
    /// fingerprint: (from, to, sent).
    forwarding: HashMap<[u8; 16], (u64, u64, u64)>,
    /// Entries, followers or syncs not kept because a bound was reached.
    pub dropped: u64,
    /// Entries forgotten before their commit was seen (the leader's sync or
    /// enough answers not decoded).
    pub uncommitted: u64,
    /// Leader syncs not kept while no member was ever seen sending an
    /// append: a single member's syncs (no append will ever come for them),
    /// not lost spans, so not in `dropped`.
    pub syncs_without_appends: u64,
}

impl Replication {
    /// A Raft message seen by one end of a peer connection.
    pub fn on_message(&mut self, message: &RaftPeerMessage) -> Vec<Replicated> {
        match (message.kind, message.sent) {
            (MessageKind::App, true) => {
                self.sent(message);
                Vec::new()
            }
            (MessageKind::Heartbeat, true) => {
                self.note_follower(message.from, message.to);
                Vec::new()
            }
            (MessageKind::App, false) => message
                .pod_entries
                .iter()
                .map(|entry| Replicated::Arrived {
                    entry: entry.clone(),
                    follower: message.to,
                })
                .collect(),
            (MessageKind::AppResp, false) if !message.reject => self.answered(message),
            (MessageKind::Prop, true) => {
                for entry in &message.pod_entries {
                    if self.forwarding.len() < MAX_ENTRIES {
                        let sent = (message.from, message.to, message.ts_ns);
                        self.forwarding.entry(entry.fingerprint).or_insert(sent);
                    } else {
                        self.dropped += 1;
                    }
                }
                Vec::new()
            }
            // The leader read it: a span when its sending was seen too.
            (MessageKind::Prop, false) => message
                .pod_entries
                .iter()
                .filter_map(|entry| {
                    let (from, to, sent_ns) = self.forwarding.remove(&entry.fingerprint)?;
                    Some(Replicated::Forwarded {
                        entry: entry.clone(),
                        from,
                        to,
                        sent_ns,
                        received_ns: message.ts_ns,
                    })
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The leader sent entries to a follower.
    /// `leader` has `follower`: it sent it an append or a heartbeat. A
    /// commit's members are the leader and its followers.
    fn note_follower(&mut self, leader: u64, follower: u64) {
        let followers = self.followers.entry(leader).or_default();
        if !followers.contains(&follower) {
            if followers.len() < MAX_FOLLOWERS {
                followers.push(follower);
            } else {
                self.dropped += 1;
            }
        }
    }

    fn sent(&mut self, message: &RaftPeerMessage) {
        let (leader, follower) = (message.from, message.to);
        self.note_follower(leader, follower);
        for entry in &message.pod_entries {
            if !self.entries.contains_key(&entry.index) && self.entries.len() >= MAX_ENTRIES {
                if let Some((_, oldest)) = self.entries.pop_first() {
                    self.by_fingerprint.remove(&oldest.entry.fingerprint);
                    self.dropped += 1;
                }
            }
            let early = self.early_syncs.remove(&entry.index);
            let tracked = self.entries.entry(entry.index).or_insert_with(|| Tracked {
                entry: entry.clone(),
                leader,
                proposed_ns: message.ts_ns,
                sends: Vec::new(),
                leader_synced_ns: early,
                commit_ns: None,
                answered: None,
            });
            self.by_fingerprint.insert(entry.fingerprint, entry.index);
            // A resend (after a rejection or a lost stream) keeps the first.
            if !tracked.sends.iter().any(|send| send.follower == follower) {
                tracked.sends.push(Append {
                    follower,
                    sent_ns: message.ts_ns,
                    answered_ns: None,
                });
            }
        }
    }

    /// A follower told the leader it holds every entry up to an index.
    fn answered(&mut self, message: &RaftPeerMessage) -> Vec<Replicated> {
        let (follower, leader) = (message.from, message.to);
        let indexes: Vec<u64> = self
            .entries
            .range(..=message.index)
            .filter(|(_, t)| t.leader == leader)
            .map(|(index, _)| *index)
            .collect();
        let followers = self.followers.get(&leader).cloned().unwrap_or_default();
        let members = 1 + followers.len();
        let mut out = Vec::new();
        for index in indexes {
            let Some(tracked) = self.entries.get_mut(&index) else {
                continue;
            };
            let answers_before = tracked
                .sends
                .iter()
                .filter(|send| send.answered_ns.is_some())
                .count();
            let Some(send) = tracked
                .sends
                .iter_mut()
                .find(|send| send.follower == follower && send.answered_ns.is_none())
            else {
                continue;
            };
            send.answered_ns = Some(message.ts_ns);
            let sent_ns = send.sent_ns;
            out.push(Replicated::Sent {
                entry: tracked.entry.clone(),
                leader,
                follower,
                sent_ns,
                acked_ns: Some(message.ts_ns),
                in_quorum: answers_before + 1 < quorum(members),
            });
            out.extend(commit(tracked, &followers));
            self.finish_if_done(index);
        }
        out
    }

    /// The leader's WAL sync of an entry (a write by a member in the leader
    /// role) ended.
    pub fn leader_synced(&mut self, entry: &WalPodEntry, synced_ns: u64) -> Vec<Replicated> {
        let Some(leader) = self.entries.get(&entry.index).map(|t| t.leader) else {
            // Its append may be decoded after the sync (another CPU's ring
            // records): kept a little while.
            if self.early_syncs.len() < MAX_EARLY_SYNCS {
                self.early_syncs.insert(entry.index, synced_ns);
            } else if self.followers.is_empty() {
                self.syncs_without_appends += 1;
            } else {
                self.dropped += 1;
            }
            return Vec::new();
        };
        let followers = self.followers.get(&leader).cloned().unwrap_or_default();
        let Some(tracked) = self.entries.get_mut(&entry.index) else {
            return Vec::new();
        };
        tracked.leader_synced_ns.get_or_insert(synced_ns);
        let out = commit(tracked, &followers);
        self.finish_if_done(entry.index);
        out
    }

    /// etcd answered the request `fingerprint` (its server span ended).
    pub fn answered_request(
        &mut self,
        fingerprint: &[u8; 16],
        answered_ns: u64,
        server_tgid: u32,
    ) -> Vec<Replicated> {
        let Some(&index) = self.by_fingerprint.get(fingerprint) else {
            return Vec::new();
        };
        let Some(tracked) = self.entries.get_mut(&index) else {
            return Vec::new();
        };
        if tracked.answered.is_some() {
            return Vec::new();
        }
        tracked.answered = Some((answered_ns, server_tgid));
        let out = applied(tracked).into_iter().collect();
        self.finish_if_done(index);
        out
    }

    /// Entries first sent before `before_ns`: their unanswered sends are
    /// reported without an answer and they are forgotten.
    pub fn expire(&mut self, before_ns: u64) -> Vec<Replicated> {
        let old: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, t)| t.proposed_ns < before_ns)
            .map(|(index, _)| *index)
            .collect();
        let mut out = Vec::new();
        for index in old {
            let Some(tracked) = self.entries.remove(&index) else {
                continue;
            };
            self.by_fingerprint.remove(&tracked.entry.fingerprint);
            if tracked.commit_ns.is_none() {
                self.uncommitted += 1;
            }
            for send in tracked
                .sends
                .iter()
                .filter(|send| send.answered_ns.is_none())
            {
                out.push(Replicated::Sent {
                    entry: tracked.entry.clone(),
                    leader: tracked.leader,
                    follower: send.follower,
                    sent_ns: send.sent_ns,
                    acked_ns: None,
                    in_quorum: false,
                });
            }
        }
        self.early_syncs.retain(|_, synced| *synced >= before_ns);
        self.forwarding.retain(|_, (.., sent)| *sent >= before_ns);
        out
    }

    /// Forgets an entry once every follower answered and it was applied.
    fn finish_if_done(&mut self, index: u64) {
        let done = self.entries.get(&index).is_some_and(|t| {
            t.commit_ns.is_some()
                && t.answered.is_some()
                && t.sends.iter().all(|send| send.answered_ns.is_some())
        });
        if done {
            if let Some(tracked) = self.entries.remove(&index) {
                self.by_fingerprint.remove(&tracked.entry.fingerprint);
            }
        }
    }
}

/// Members needed for a majority.
fn quorum(members: usize) -> usize {
    members / 2 + 1
}

/// The commit of an entry, the first time what it waits for is all known;
/// with the apply, if the answer came already. `followers` are those its
/// leader has sent appends to (the entry itself may not have gone to all of
/// them yet: a follower catching up gets it in a later append).
fn commit(tracked: &mut Tracked, followers: &[u64]) -> Vec<Replicated> {
    let members = 1 + followers.len();
    if tracked.commit_ns.is_some() {
        return Vec::new();
    }
    let Some(synced) = tracked.leader_synced_ns else {
        return Vec::new();
    };
    let mut answers: Vec<(u64, u64)> = tracked
        .sends
        .iter()
        .filter_map(|send| send.answered_ns.map(|at| (at, send.follower)))
        .collect();
    let needed = quorum(members) - 1;
    if answers.len() < needed {
        return Vec::new();
    }
    answers.sort_unstable();
    let mut waited: Vec<(u64, u64)> = answers[..needed].to_vec();
    waited.push((synced, tracked.leader));
    waited.sort_unstable();
    let commit_ns = waited.last().map_or(synced, |(at, _)| *at);
    tracked.commit_ns = Some(commit_ns);
    let not_waited_for = followers
        .iter()
        .copied()
        .filter(|follower| !waited.iter().any(|(_, m)| m == follower))
        .collect();
    let mut out = vec![Replicated::Committed {
        entry: tracked.entry.clone(),
        leader: tracked.leader,
        proposed_ns: tracked.proposed_ns,
        commit_ns,
        members,
        quorum: quorum(members),
        waited_for: waited.into_iter().map(|(_, member)| member).collect(),
        not_waited_for,
    }];
    out.extend(applied(tracked));
    out
}

/// The apply of an entry, once both its commit and its answer are known.
fn applied(tracked: &Tracked) -> Option<Replicated> {
    let commit_ns = tracked.commit_ns?;
    let (answered_ns, server_tgid) = tracked.answered?;
    Some(Replicated::Applied {
        entry: tracked.entry.clone(),
        commit_ns,
        answered_ns: answered_ns.max(commit_ns),
        server_tgid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::ConnKey;

    const LEADER: u64 = 0xa;
    const FAST: u64 = 0xb;
    const SLOW: u64 = 0xc;

    fn entry(index: u64) -> WalPodEntry {
        WalPodEntry {
            index,
            term: 2,
            clues: Vec::new().into(),
            fingerprint: [index as u8; 16],
            role: None,
        }
    }

    fn message(
        kind: MessageKind,
        sent: bool,
        from: u64,
        to: u64,
        index: u64,
        at: u64,
    ) -> RaftPeerMessage {
        RaftPeerMessage {
            conn: ConnKey {
                tgid: 1,
                conn_id: 1,
            },
            sent,
            ts_ns: at,
            kind,
            from,
            to,
            index,
            reject: false,
            pod_entries: if kind == MessageKind::App {
                vec![entry(index + 1)]
            } else {
                Vec::new()
            },
        }
    }

    /// The leader appends entry 10 to both followers at 100.
    fn appended() -> Replication {
        let mut replication = Replication::default();
        for follower in [FAST, SLOW] {
            let sent = message(MessageKind::App, true, LEADER, follower, 9, 100);
            assert_eq!(replication.on_message(&sent), []);
        }
        replication
    }

    fn answer(replication: &mut Replication, follower: u64, at: u64) -> Vec<Replicated> {
        replication.on_message(&message(
            MessageKind::AppResp,
            false,
            follower,
            LEADER,
            10,
            at,
        ))
    }

    #[test]
    fn the_commit_waits_for_the_leaders_sync_and_the_first_answer_not_the_slow_one() {
        let mut replication = appended();
        assert_eq!(replication.leader_synced(&entry(10), 120), []);
        let fast = answer(&mut replication, FAST, 130);
        assert_eq!(fast.len(), 2, "{fast:#?}");
        assert!(matches!(
            fast[0],
            Replicated::Sent {
                follower: FAST,
                sent_ns: 100,
                acked_ns: Some(130),
                in_quorum: true,
                ..
            }
        ));
        let Replicated::Committed {
            commit_ns,
            members,
            quorum,
            waited_for,
            not_waited_for,
            proposed_ns,
            ..
        } = &fast[1]
        else {
            panic!("{fast:#?}");
        };
        assert_eq!(
            (*proposed_ns, *commit_ns, *members, *quorum),
            (100, 130, 3, 2)
        );
        assert_eq!(
            (waited_for.as_slice(), not_waited_for.as_slice()),
            (&[LEADER, FAST][..], &[SLOW][..])
        );
        let applied = replication.answered_request(&[10; 16], 140, 7);
        assert!(matches!(
            applied[..],
            [Replicated::Applied {
                commit_ns: 130,
                answered_ns: 140,
                server_tgid: 7,
                ..
            }]
        ));
        let slow = answer(&mut replication, SLOW, 400);
        assert!(matches!(
            slow[..],
            [Replicated::Sent {
                follower: SLOW,
                acked_ns: Some(400),
                in_quorum: false,
                ..
            }]
        ));
        // Every follower answered and the entry was applied: forgotten.
        assert!(replication.entries.is_empty() && replication.by_fingerprint.is_empty());
    }

    #[test]
    fn a_follower_the_entry_was_not_sent_to_yet_is_not_waited_for() {
        // Entry 10 went to both followers: the leader knows two.
        let mut replication = appended();
        answer(&mut replication, FAST, 130);
        answer(&mut replication, SLOW, 140);
        replication.leader_synced(&entry(10), 120);
        // Entry 11 goes to the fast one first; the slow one gets it in a
        // later append, after the commit.
        let sent = message(MessageKind::App, true, LEADER, FAST, 10, 200);
        assert_eq!(replication.on_message(&sent), []);
        replication.leader_synced(&entry(11), 210);
        let answered =
            replication.on_message(&message(MessageKind::AppResp, false, FAST, LEADER, 11, 220));
        let committed = answered
            .iter()
            .find_map(|replicated| match replicated {
                Replicated::Committed {
                    members,
                    not_waited_for,
                    ..
                } => Some((*members, not_waited_for.clone())),
                _ => None,
            })
            .expect("committed");
        assert_eq!(committed, (3, vec![SLOW]));
    }

    #[test]
    fn a_follower_known_by_its_heartbeats_only_is_a_member_not_waited_for() {
        // Joined late: the slow follower's appends are paused, but the
        // leader's heartbeats to it say it is a member.
        let mut replication = Replication::default();
        let heartbeat = message(MessageKind::Heartbeat, true, LEADER, SLOW, 0, 90);
        assert_eq!(replication.on_message(&heartbeat), []);
        let sent = message(MessageKind::App, true, LEADER, FAST, 9, 100);
        assert_eq!(replication.on_message(&sent), []);
        replication.leader_synced(&entry(10), 110);
        let answered =
            replication.on_message(&message(MessageKind::AppResp, false, FAST, LEADER, 10, 120));
        let committed = answered.iter().find_map(|replicated| match replicated {
            Replicated::Committed {
                members,
                not_waited_for,
                ..
            } => Some((*members, not_waited_for.clone())),
            _ => None,
        });
        assert_eq!(committed, Some((3, vec![SLOW])));
    }

    #[test]
    fn a_late_leader_sync_is_what_the_commit_waited_for_longest() {
        let mut replication = appended();
        // The answer comes before the request's answer is known.
        assert_eq!(answer(&mut replication, FAST, 110).len(), 1);
        assert_eq!(replication.answered_request(&[10; 16], 200, 7), []);
        let synced = replication.leader_synced(&entry(10), 150);
        let [
            Replicated::Committed {
                commit_ns: 150,
                waited_for,
                ..
            },
            Replicated::Applied {
                commit_ns: 150,
                answered_ns: 200,
                ..
            },
        ] = &synced[..]
        else {
            panic!("{synced:#?}");
        };
        assert_eq!(waited_for, &[FAST, LEADER]);
    }

    #[test]
    fn a_sync_decoded_before_the_append_still_counts() {
        let mut replication = Replication::default();
        assert_eq!(replication.leader_synced(&entry(10), 90), []);
        for follower in [FAST, SLOW] {
            replication.on_message(&message(MessageKind::App, true, LEADER, follower, 9, 100));
        }
        let fast = answer(&mut replication, FAST, 130);
        assert!(
            matches!(fast[1], Replicated::Committed { commit_ns: 130, .. }),
            "{fast:#?}"
        );
    }

    /// A single member syncs every entry and sends no append: the syncs
    /// past the bound are counted apart, not as dropped spans. Once a member
    /// was seen replicating, one past the bound is a loss.
    #[test]
    fn a_single_members_syncs_past_the_bound_are_not_dropped_spans() {
        let mut replication = Replication::default();
        let past = MAX_EARLY_SYNCS as u64 + 10;
        for index in 0..past {
            assert_eq!(replication.leader_synced(&entry(index), index), []);
        }
        assert_eq!(replication.dropped, 0);
        assert_eq!(replication.syncs_without_appends, 10);
        replication.on_message(&message(MessageKind::App, true, LEADER, FAST, past, past));
        replication.leader_synced(&entry(past + 5), past + 5);
        assert_eq!(replication.dropped, 1);
    }

    #[test]
    fn a_follower_that_never_answers_is_reported_without_an_answer_once() {
        let mut replication = appended();
        replication.leader_synced(&entry(10), 120);
        answer(&mut replication, FAST, 130);
        assert_eq!(replication.expire(100), []);
        let expired = replication.expire(101);
        assert!(matches!(
            expired[..],
            [Replicated::Sent {
                follower: SLOW,
                acked_ns: None,
                in_quorum: false,
                ..
            }]
        ));
        assert_eq!(replication.expire(10_000), []);
        assert_eq!(replication.uncommitted, 0);
    }

    #[test]
    fn a_forwarded_proposal_is_reported_once_the_leader_read_it() {
        let mut replication = Replication::default();
        let mut proposal = message(MessageKind::App, true, FAST, LEADER, 9, 50);
        proposal.kind = MessageKind::Prop;
        assert_eq!(replication.on_message(&proposal), []);
        proposal.sent = false;
        proposal.ts_ns = 60;
        let read = replication.on_message(&proposal);
        assert!(matches!(
            read[..],
            [Replicated::Forwarded {
                from: FAST,
                to: LEADER,
                sent_ns: 50,
                received_ns: 60,
                ..
            }]
        ));
        // Read again (a resend): nothing more.
        assert_eq!(replication.on_message(&proposal), []);
    }

    #[test]
    fn what_a_follower_receives_and_refusals_make_no_answer() {
        let mut replication = appended();
        let arrived =
            replication.on_message(&message(MessageKind::App, false, LEADER, FAST, 9, 105));
        assert!(matches!(
            arrived[..],
            [Replicated::Arrived { follower: FAST, .. }]
        ));
        let mut refused = message(MessageKind::AppResp, false, FAST, LEADER, 10, 130);
        refused.reject = true;
        assert_eq!(replication.on_message(&refused), []);
        // The follower's own view of its answer is not the leader's receipt.
        let mut sent_answer = message(MessageKind::AppResp, true, FAST, LEADER, 10, 125);
        sent_answer.sent = true;
        assert_eq!(replication.on_message(&sent_answer), []);
        let expired = replication.expire(1_000);
        assert_eq!(expired.len(), 2);
        assert_eq!(replication.uncommitted, 1);
    }
}
