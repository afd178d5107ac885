//! Raft's part of a Pod write seen from the leader's peer streams: the
//! replication of each Pod entry to each follower, its commit and apply
//! ([`crate::correlate::replication`] keeps the protocol state; this names
//! the spans).

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use super::*;

/// A span of a Raft entry ([`ControlSpans::draft_entry_spans`]).
struct EntrySpan {
    key: String,
    name: String,
    start_ns: u64,
    end_ns: u64,
    attributes: Vec<(String, AttributeValue)>,
    status: SpanStatus,
}

/// Key of the span of the leader's replication of entry `index` to
/// `follower`: the same on every node, so that the follower's node's agent
/// can hang the follower's WAL span from it.
pub(super) fn replicate_key(follower: u64, index: u64) -> String {
    SpanKey::EtcdReplicate { follower, index }.encode()
}

impl ControlSpans {
    /// A Raft message between etcd members: replication, commit and apply
    /// spans as what they wait for comes in.
    pub fn on_raft(&mut self, message: &RaftPeerMessage) -> Vec<Span> {
        self.advance(message.ts_ns);
        // Which Pods' creations an entry is part of is decided when it is
        // proposed: a follower's answer can come after the Pod's trace ended
        // with a later write.
        for entry in &message.pod_entries {
            if !self.entry_pods.contains_key(&entry.fingerprint) {
                let pods = self.learn(&entry.clues, &entry.fingerprint);
                self.entry_pods.insert(entry.fingerprint, pods);
            }
        }
        let events = self.replication.on_message(message);
        self.draft_replicated(events);
        self.release(false)
    }

    /// Drafts the spans of what happened to Pod entries between members.
    pub(super) fn draft_replicated(&mut self, events: Vec<Replicated>) {
        for event in events {
            match event {
                Replicated::Forwarded {
                    entry,
                    from,
                    to,
                    sent_ns,
                    received_ns,
                } => {
                    let mut attributes = self.member_attributes(from, RaftRole::Follower);
                    attributes.extend([
                        string_attribute(attr::ETCD_RAFT_LEADER_NAME, &self.member_label(to)),
                        string_attribute(attr::ETCD_RAFT_LEADER_ID, &format!("{to:x}")),
                    ]);
                    let name = name::etcd_forward(&self.member_label(to));
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: SpanKey::EtcdForward {
                                fingerprint: &hex(&entry.fingerprint),
                            }
                            .encode(),
                            name,
                            start_ns: sent_ns,
                            end_ns: received_ns,
                            attributes,
                            status: SpanStatus::Unset,
                        },
                    );
                }
                Replicated::Arrived { entry, follower } => {
                    // The follower's WAL span hangs from the leader's
                    // replication span, drafted here or by the leader's
                    // node's agent.
                    self.expect(replicate_key(follower, entry.index));
                }
                Replicated::Sent {
                    entry,
                    leader,
                    follower,
                    sent_ns,
                    acked_ns,
                    in_quorum,
                } => {
                    let mut attributes = self.member_attributes(leader, RaftRole::Leader);
                    attributes.extend([
                        string_attribute(
                            attr::ETCD_RAFT_FOLLOWER_NAME,
                            &self.member_label(follower),
                        ),
                        string_attribute(attr::ETCD_RAFT_FOLLOWER_ID, &format!("{follower:x}")),
                        (
                            attr::ETCD_RAFT_IN_QUORUM.to_owned(),
                            AttributeValue::Bool(in_quorum),
                        ),
                    ]);
                    let status = match acked_ns {
                        Some(_) => SpanStatus::Unset,
                        None => SpanStatus::Error(format!(
                            "no answer from the follower decoded within {} s",
                            WAIT_NS / 1_000_000_000
                        )),
                    };
                    let name = name::etcd_replicate(&self.member_label(follower));
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: replicate_key(follower, entry.index),
                            name,
                            start_ns: sent_ns,
                            // Unanswered: as long as it went without an answer.
                            end_ns: acked_ns.unwrap_or(self.now_ns),
                            attributes,
                            status,
                        },
                    );
                }
                Replicated::Committed {
                    entry,
                    leader,
                    proposed_ns,
                    commit_ns,
                    members,
                    quorum,
                    waited_for,
                    not_waited_for,
                } => {
                    let names = |ids: &[u64]| {
                        ids.iter()
                            .map(|id| self.member_label(*id))
                            .collect::<Vec<_>>()
                            .join(",")
                    };
                    let mut attributes = self.member_attributes(leader, RaftRole::Leader);
                    attributes.extend([
                        int_attribute(attr::ETCD_RAFT_MEMBERS, members as i64),
                        int_attribute(attr::ETCD_RAFT_QUORUM, quorum as i64),
                        string_attribute(attr::ETCD_RAFT_WAITED_FOR, &names(&waited_for)),
                        string_attribute(
                            attr::ETCD_RAFT_WAITED_LONGEST_FOR,
                            &waited_for
                                .last()
                                .map_or_else(String::new, |id| self.member_label(*id)),
                        ),
                        string_attribute(attr::ETCD_RAFT_NOT_WAITED_FOR, &names(&not_waited_for)),
                    ]);
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: SpanKey::EtcdCommit(entry.index).encode(),
                            name: name::ETCD_COMMIT.to_owned(),
                            start_ns: proposed_ns,
                            end_ns: commit_ns,
                            attributes,
                            status: SpanStatus::Unset,
                        },
                    );
                }
                Replicated::Applied {
                    entry,
                    commit_ns,
                    answered_ns,
                    server_tgid,
                } => {
                    let mut attributes = vec![string_attribute(attr::DB_SYSTEM_NAME, "etcd")];
                    if let Some(name) = self.members.get(&server_tgid) {
                        attributes.push(string_attribute(attr::ETCD_MEMBER_NAME, name));
                    }
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: SpanKey::EtcdApply(entry.index).encode(),
                            name: name::ETCD_APPLY.to_owned(),
                            start_ns: commit_ns,
                            end_ns: answered_ns,
                            attributes,
                            status: SpanStatus::Unset,
                        },
                    );
                }
            }
        }
    }

    /// Drafts a span of a Pod entry in each of its Pods' traces, under the
    /// server span of its request.
    fn draft_entry_spans(&mut self, entry: &WalPodEntry, span: EntrySpan) {
        let fingerprint = hex(&entry.fingerprint);
        let pods = match self.entry_pods.get(&entry.fingerprint) {
            Some(pods) => pods.clone(),
            None => self.learn(&entry.clues, &entry.fingerprint),
        };
        for pod in pods {
            // A proposal has no place in the log yet.
            let mut attributes = if entry.index == 0 {
                Vec::new()
            } else {
                vec![
                    int_attribute(attr::ETCD_RAFT_INDEX, entry.index as i64),
                    int_attribute(attr::ETCD_RAFT_TERM, entry.term as i64),
                ]
            };
            attributes.extend(span.attributes.iter().cloned());
            self.wait(
                Draft {
                    pod,
                    key: span.key.clone(),
                    parent: Some(
                        SpanKey::EtcdCall {
                            side: Side::Server,
                            fingerprint: &fingerprint,
                        }
                        .encode(),
                    ),
                    name: span.name.clone(),
                    kind: SpanKind::Internal,
                    start_unix_ns: self.clock.unix_ns(span.start_ns),
                    end_unix_ns: self.clock.unix_ns(span.end_ns.max(span.start_ns)),
                    attributes,
                    status: span.status.clone(),
                },
                span.end_ns.max(self.now_ns) + WAIT_NS,
            );
        }
    }

    /// Attributes naming etcd member `id` in `role`.
    fn member_attributes(&self, id: u64, role: RaftRole) -> Vec<(String, AttributeValue)> {
        let mut attributes = vec![
            string_attribute(attr::DB_SYSTEM_NAME, "etcd"),
            string_attribute(attr::ETCD_MEMBER_ID, &format!("{id:x}")),
            string_attribute(attr::ETCD_MEMBER_ROLE, role.as_str()),
        ];
        if let Some(name) = self.member_names.get(&id) {
            attributes.push(string_attribute(attr::ETCD_MEMBER_NAME, name));
        }
        attributes
    }

    /// A member's name where known, else its id in hex (as etcd prints it).
    fn member_label(&self, id: u64) -> String {
        self.member_names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("{id:x}"))
    }
}
