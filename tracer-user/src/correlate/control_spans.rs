//! The control-plane side of a Pod's trace: the etcd writes about the Pod as
//! their client (kube-apiserver) made them and etcd handled them, the WAL
//! appends and fdatasyncs that made them durable, and the Pod's root span.
//!
//! In: finished etcd writes, WAL writes and syncs. Out: [`Span`]s. Parents
//! follow causal keys, not time: a write is named by the fingerprint of its
//! KV request, which the client's call, etcd's handling and the Raft entry
//! in the WAL share, so the server span is the child of the client span and
//! a WAL sync the child of the server span that waited for it. The server
//! side ends before its client reads the response, and a sync before the
//! server responds: a span whose parent has not been seen yet waits (bounded
//! in time and count) and falls back to the Pod's root when the parent is
//! not seen on this node (a follower's WAL, an apiserver on another node).
//!
//! The root span — create write to the write that reports the Pod Running —
//! is emitted by the agent that sees etcd handle the create (the leader's
//! node), so exactly one agent emits it; a Pod that does not get there
//! within the timeout is exported as incomplete, with the phase it is stuck in.
//!
//! Only a Pod's creation is followed: the writes from its create to the one
//! that reports it Running (or Succeeded, Failed, deleted, timed out). The
//! writes of a Pod after that, and of a Pod created before podtrace started
//! (most Pod writes of a running cluster: status updates of Pods long up),
//! make no spans. The Pod object each write stores says which: its creation
//! time against the agent's start and the trace timeout
//! ([`FollowWindow`], by which the decode stage already skipped most such
//! writes undecoded), and its phase, so that every agent decides alike even
//! one that sees only some of a Pod's writes (a follower's WAL).

use std::collections::{HashMap, VecDeque};

use tracer_decode::{
    etcd::WriteKind,
    identity::{PodClue, PodIdentity},
};

use tracer_decode::wal::RaftRole;

use super::{
    pod::{ENDING_PHASES, Pod, int_attribute, string_attribute},
    replication::{Replicated, Replication},
    span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, hex},
};
use crate::{
    capture::{ConnKey, FsyncRecord, clock::WallClock},
    decode::{
        EtcdMessage, RaftPeerMessage, WalMessage, follow_window::FollowWindow, grpc_calls::Side,
        wal_writes::WalPodEntry,
    },
};

/// Bound on Pods remembered (name → UID, unfinished roots).
const MAX_PODS: usize = 16_384;
/// Bound on spans waiting for their Pod or parent.
const MAX_WAITING: usize = 4096;
/// Bound on span keys remembered as seen.
const MAX_SEEN: usize = 16_384;
/// Bound on WAL segments with unsynced writes.
const MAX_WAL_FILES: usize = 64;
/// Bound on etcd members named by Raft id.
const MAX_MEMBER_NAMES: usize = 64;
/// Bound on Pod entries in one unsynced WAL batch.
const MAX_BATCH_ENTRIES: usize = 4096;
/// Pods named in a WAL span's batch attribute.
const MAX_BATCH_NAMES: usize = 16;
/// How long a span waits for its parent or its Pod's UID.
pub const WAIT_NS: u64 = 2_000_000_000;
/// Default time after the create write at which a Pod's trace is exported
/// as incomplete.
pub const DEFAULT_TRACE_TIMEOUT_NS: u64 = 300_000_000_000;

/// A Pod named by a message, with its UID if the message or an earlier one
/// told it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodName {
    namespace: String,
    name: String,
    uid: Option<String>,
}

/// A span whose trace or parent is not settled yet.
#[derive(Clone, Debug)]
struct Draft {
    pod: PodName,
    /// Span id key (see [`SpanId::for_key`]).
    key: String,
    /// Key of the causal parent, if it has one besides the root.
    parent: Option<String>,
    name: String,
    kind: SpanKind,
    start_unix_ns: u64,
    end_unix_ns: u64,
    attributes: Vec<(String, AttributeValue)>,
    status: SpanStatus,
    /// CLOCK_MONOTONIC ns after which it stops waiting.
    deadline_ns: u64,
}

/// A Pod whose create this agent saw etcd handle: its root is ours to emit.
#[derive(Clone, Debug)]
struct Root {
    pod: Pod,
    /// Earliest start of the create write (client or server), monotonic ns.
    start_ns: u64,
    /// The node it was bound to, once a write names one.
    node: Option<String>,
    /// `spec.schedulerName`, once a write names it.
    scheduler: Option<String>,
    /// Why it waits, as its last written status says: the scheduler's
    /// verdict while unschedulable, a container's waiting reason.
    unschedulable: Option<String>,
    waiting: Option<String>,
    /// Its containers' `imagePullPolicy`, as created.
    pull_policies: Option<String>,
}

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
fn replicate_key(follower: u64, index: u64) -> String {
    format!("etcd/replicate/{follower:x}/{index}")
}

/// A root to emit once the client span of the write that ends it is seen.
#[derive(Clone, Debug)]
struct ClosingRoot {
    root: Root,
    /// End of etcd's handling of the write, monotonic ns.
    end_ns: u64,
    /// Key of the write's client span.
    client: String,
    deadline_ns: u64,
}

/// WAL writes since the segment's last sync.
#[derive(Clone, Debug, Default)]
struct WalBatch {
    first_write_ns: u64,
    bytes: u64,
    entries: u64,
    pod_entries: Vec<WalPodEntry>,
    /// The member's Raft id, when a segment head named it.
    member_id: Option<u64>,
}

/// Builds the control-plane spans of Pod traces.
#[derive(Debug)]
pub struct ControlSpans {
    clock: WallClock,
    cluster_id: String,
    /// Which Pods' writes may be part of a followed creation.
    window: FollowWindow,
    uids: HashMap<(String, String), String>,
    /// What the last write of each Pod (by UID) stored: node and phase.
    states: HashMap<String, (Option<String>, Option<String>)>,
    /// What recent writes did, by request fingerprint: both sides of a
    /// call and its WAL entry describe one write.
    changes: HashMap<[u8; 16], String>,
    roots: HashMap<String, Root>,
    batches: HashMap<ConnKey, WalBatch>,
    /// etcd members' names (`--name`), by tgid: which member a WAL span's
    /// write was (several members can share a host, each its own process).
    members: HashMap<u32, String>,
    /// Their names by Raft id, once a WAL segment head and a name met.
    member_names: HashMap<u64, String>,
    /// Pod entries on their way between etcd members.
    pub replication: Replication,
    /// The followed Pods of each entry sent between members, by request
    /// fingerprint, as they were when it was sent.
    entry_pods: HashMap<[u8; 16], Vec<PodName>>,
    /// Span keys drafted recently, with their spans' end (unix ns).
    seen: HashMap<String, u64>,
    seen_order: VecDeque<String>,
    waiting: Vec<Draft>,
    /// Roots whose Pod was reported Running, waiting for the spans of that
    /// write (the apiserver reads etcd's answer after etcd sent it), so that
    /// they go out before their root and the root ends with the write.
    closing: Vec<ClosingRoot>,
    /// Latest event time seen (CLOCK_MONOTONIC ns).
    now_ns: u64,
    /// Pods whose creation trace has ended, by UID, with the fingerprint of
    /// the write that ended it (its other side and its WAL entry still
    /// belong to the trace; nothing later does). Oldest first in `ended_order`.
    ended: HashMap<String, Option<[u8; 16]>>,
    ended_order: VecDeque<String>,
    /// Pods named by writes and WAL entries that were not followed (see the
    /// module's doc), once per message.
    pub not_followed: u64,
    /// etcd calls without both their times: counted, not exported.
    pub unattributed: u64,
    /// Spans, Pods or WAL entries not kept because a bound was reached.
    pub dropped: u64,
}

impl ControlSpans {
    /// Spans of Pods of cluster `cluster_id` whose creation `window` may
    /// follow; a Pod not Running the window's trace timeout after its create
    /// is exported as incomplete.
    pub fn new(clock: WallClock, cluster_id: String, window: FollowWindow) -> Self {
        Self {
            clock,
            cluster_id,
            window,
            uids: HashMap::new(),
            states: HashMap::new(),
            changes: HashMap::new(),
            roots: HashMap::new(),
            batches: HashMap::new(),
            members: HashMap::new(),
            member_names: HashMap::new(),
            replication: Replication::default(),
            entry_pods: HashMap::new(),
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            waiting: Vec::new(),
            closing: Vec::new(),
            now_ns: 0,
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
            not_followed: 0,
            unattributed: 0,
            dropped: 0,
        }
    }

    /// Process `tgid` is the etcd member `name`, or (`None`) no member podtrace
    /// can name: a process that exec'd anew, or whose name is unknown.
    pub fn etcd_member(&mut self, tgid: u32, name: Option<String>) {
        match name {
            Some(name) => {
                self.members.insert(tgid, name);
            }
            None => {
                self.members.remove(&tgid);
            }
        }
    }

    /// Process `tgid` is etcd member `id`: spans naming the member by id
    /// name it by the process's `--name` too.
    pub fn etcd_member_id(&mut self, tgid: u32, id: u64) {
        if let Some(name) = self.members.get(&tgid)
            && (self.member_names.len() < MAX_MEMBER_NAMES || self.member_names.contains_key(&id))
        {
            self.member_names.insert(id, name.clone());
        }
    }

    /// The Pod's create request reached kube-apiserver at `start_ns`
    /// (monotonic): its trace starts there, before the etcd write.
    pub fn create_request_started(&mut self, uid: &str, start_ns: u64) {
        if let Some(root) = self.roots.get_mut(uid) {
            root.start_ns = root.start_ns.min(start_ns);
        }
    }

    /// The UID of Pod `namespace/name`, if a write told it.
    pub fn uid_of(&self, namespace: &str, name: &str) -> Option<String> {
        self.uids
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Learns the Pods a message (the write `fingerprint`) names; returns
    /// those whose creation is followed, with their UIDs where known.
    fn learn(&mut self, clues: &[PodClue], fingerprint: &[u8; 16]) -> Vec<PodName> {
        let mut pods: Vec<PodName> = Vec::new();
        let mut unfollowed: Vec<(&String, &String)> = Vec::new();
        // UIDs of Pods whose trace ended before this write: their stored
        // state is no longer needed.
        let mut forget: Vec<String> = Vec::new();
        for clue in clues {
            let (namespace, name, uid) = match clue {
                PodClue::StorageKey { namespace, name } => (namespace, name, None),
                PodClue::Object(identity) => match (&identity.namespace, &identity.name) {
                    (Some(namespace), Some(name)) => (namespace, name, identity.uid.as_ref()),
                    _ => continue,
                },
                PodClue::Sandbox { .. }
                | PodClue::SandboxCall { .. }
                | PodClue::Container { .. } => continue,
            };
            if let PodClue::Object(identity) = clue {
                if !self.follows(identity, fingerprint) {
                    unfollowed.push((namespace, name));
                    forget.extend(
                        uid.filter(|uid| self.ended_before(uid, fingerprint))
                            .cloned(),
                    );
                    continue;
                }
            }
            if let Some(uid) = uid {
                let key = (namespace.clone(), name.clone());
                if self.uids.len() < MAX_PODS || self.uids.contains_key(&key) {
                    self.uids.insert(key, uid.clone());
                } else {
                    self.dropped += 1;
                }
            }
            match pods
                .iter_mut()
                .find(|p| &p.namespace == namespace && &p.name == name)
            {
                Some(known) => {
                    if known.uid.is_none() {
                        known.uid = uid.cloned();
                    }
                }
                None => pods.push(PodName {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: uid.cloned(),
                }),
            }
        }
        for pod in &mut pods {
            if pod.uid.is_none() {
                pod.uid = self
                    .uids
                    .get(&(pod.namespace.clone(), pod.name.clone()))
                    .cloned();
            }
        }
        let named = pods.len() + unfollowed.len();
        pods.retain(|pod| {
            let ended_before = pod
                .uid
                .as_ref()
                .filter(|uid| self.ended_before(uid, fingerprint));
            forget.extend(ended_before.cloned());
            ended_before.is_none() && !unfollowed.contains(&(&pod.namespace, &pod.name))
        });
        for uid in &forget {
            self.states.remove(uid);
        }
        if pods.len() < named {
            self.not_followed += 1;
        }
        pods
    }

    /// Whether a write (`fingerprint`) storing this Pod object is part of
    /// the Pod's creation, as far as the object and what came before tell.
    fn follows(&self, pod: &PodIdentity, fingerprint: &[u8; 16]) -> bool {
        if let Some(uid) = &pod.uid {
            if self.ended_before(uid, fingerprint) {
                return false;
            }
        }
        pod.created_unix_s
            .is_none_or(|created| self.window.may_follow(created, self.now_ns))
    }

    /// Whether the Pod's creation trace ended at a write other than this one.
    fn ended_before(&self, uid: &str, fingerprint: &[u8; 16]) -> bool {
        self.ended
            .get(uid)
            .is_some_and(|at| at.as_ref() != Some(fingerprint))
    }

    /// The Pod's creation trace ends (at the write `fingerprint`, if one
    /// ended it): later writes are not followed. What it stored is kept for
    /// that write's other messages (the server's comes after the WAL's) and
    /// forgotten at the first later write.
    fn end(&mut self, uid: &str, fingerprint: Option<[u8; 16]>) {
        if self.ended.contains_key(uid) {
            return;
        }
        if self.ended_order.len() >= MAX_PODS {
            if let Some(oldest) = self.ended_order.pop_front() {
                // Its later writes still fail the trace-timeout check once
                // that has passed; before, they would make spans again.
                self.ended.remove(&oldest);
                self.states.remove(&oldest);
                self.dropped += 1;
            }
        }
        self.ended.insert(uid.to_owned(), fingerprint);
        self.ended_order.push_back(uid.to_owned());
    }

    /// A finished etcd write about Pods: its span, and the root span when
    /// the write reports the Pod Running.
    pub fn on_etcd(&mut self, call: &EtcdMessage) -> Vec<Span> {
        let (Some(start), Some(end)) = (call.start_ts_ns, call.end_ts_ns) else {
            self.unattributed += 1;
            return Vec::new();
        };
        self.advance(end);
        let pods = self.learn(&call.clues, &call.fingerprint);
        if pods.is_empty() {
            // Not followed: nothing to draft (nor to format).
            return self.release(false);
        }
        let fingerprint = hex(&call.fingerprint);
        let side = match call.side {
            Side::Client => "client",
            Side::Server => "server",
        };
        let failed = match (call.status_code, call.txn_succeeded) {
            (Some(code), _) if code != 0 => Some(format!("gRPC status {code}")),
            (_, Some(false)) => Some("Txn compare failed: the key changed (conflict)".to_owned()),
            _ => None,
        };
        let mut finished = Vec::new();
        for pod in &pods {
            let change = self.change(call, pod, failed.is_some());
            let mut attributes = vec![
                string_attribute("rpc.system", "grpc"),
                string_attribute("rpc.service", tracer_decode::etcd::KV_SERVICE),
                string_attribute("rpc.method", &call.method),
                string_attribute("db.system.name", "etcd"),
                string_attribute("db.operation.name", &call.method),
                string_attribute("podtrace.etcd.write", call.write.name()),
                string_attribute(
                    "podtrace.etcd.key",
                    &format!("/registry/pods/{}/{}", pod.namespace, pod.name),
                ),
            ];
            if let Some(change) = &change {
                attributes.push(string_attribute("podtrace.k8s.pod.change", change));
            }
            // The scheduler's verdict on a Pod no node fits, as it wrote it.
            let verdict = call.clues.iter().find_map(|clue| match clue {
                PodClue::Object(identity)
                    if identity.name.as_deref() == Some(pod.name.as_str()) =>
                {
                    identity.unschedulable.as_deref()
                }
                _ => None,
            });
            if let Some(verdict) = verdict {
                attributes.push(string_attribute("podtrace.k8s.scheduling.failure", verdict));
            }
            if let Some(revision) = call.revision {
                attributes.push(int_attribute("podtrace.etcd.revision", revision));
            }
            if let Some(code) = call.status_code {
                attributes.push(int_attribute("rpc.grpc.status_code", i64::from(code)));
            }
            self.wait(Draft {
                pod: pod.clone(),
                key: format!("etcd/{side}/{fingerprint}"),
                parent: (call.side == Side::Server).then(|| format!("etcd/client/{fingerprint}")),
                name: format!("{}/{}", tracer_decode::etcd::KV_SERVICE, call.method),
                kind: match call.side {
                    Side::Client => SpanKind::Client,
                    Side::Server => SpanKind::Server,
                },
                start_unix_ns: self.clock.unix_ns(start),
                end_unix_ns: self.clock.unix_ns(end),
                attributes,
                status: failed.clone().map_or(SpanStatus::Unset, SpanStatus::Error),
                deadline_ns: end + WAIT_NS,
            });
            if failed.is_none() {
                finished.extend(self.track_root(call, pod, start, end));
                self.end_if_reported(&call.clues, pod, call.fingerprint);
            }
        }
        if call.side == Side::Server && failed.is_none() {
            let applied = self
                .replication
                .answered_request(&call.fingerprint, end, call.conn.tgid);
            self.draft_replicated(applied);
        }
        finished.extend(self.release(false));
        finished
    }

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
                if self.entry_pods.len() >= MAX_SEEN {
                    self.entry_pods.clear();
                }
                self.entry_pods.insert(entry.fingerprint, pods);
            }
        }
        let events = self.replication.on_message(message);
        self.draft_replicated(events);
        self.release(false)
    }

    /// Drafts the spans of what happened to Pod entries between members.
    fn draft_replicated(&mut self, events: Vec<Replicated>) {
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
                        string_attribute("podtrace.etcd.raft.leader.name", &self.member_label(to)),
                        string_attribute("podtrace.etcd.raft.leader.id", &format!("{to:x}")),
                    ]);
                    let name = format!("etcd raft forward → {}", self.member_label(to));
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: format!("etcd/forward/{}", hex(&entry.fingerprint)),
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
                            "podtrace.etcd.raft.follower.name",
                            &self.member_label(follower),
                        ),
                        string_attribute(
                            "podtrace.etcd.raft.follower.id",
                            &format!("{follower:x}"),
                        ),
                        (
                            "podtrace.etcd.raft.in_quorum".to_owned(),
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
                    let name = format!("etcd raft replicate → {}", self.member_label(follower));
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
                        int_attribute("podtrace.etcd.raft.members", members as i64),
                        int_attribute("podtrace.etcd.raft.quorum", quorum as i64),
                        string_attribute("podtrace.etcd.raft.waited_for", &names(&waited_for)),
                        string_attribute(
                            "podtrace.etcd.raft.waited_longest_for",
                            &waited_for
                                .last()
                                .map_or_else(String::new, |id| self.member_label(*id)),
                        ),
                        string_attribute(
                            "podtrace.etcd.raft.not_waited_for",
                            &names(&not_waited_for),
                        ),
                    ]);
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: format!("etcd/commit/{}", entry.index),
                            name: "etcd raft commit".to_owned(),
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
                    let mut attributes = vec![string_attribute("db.system.name", "etcd")];
                    if let Some(name) = self.members.get(&server_tgid) {
                        attributes.push(string_attribute("podtrace.etcd.member.name", name));
                    }
                    self.draft_entry_spans(
                        &entry,
                        EntrySpan {
                            key: format!("etcd/apply/{}", entry.index),
                            name: "etcd apply".to_owned(),
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
                    int_attribute("podtrace.etcd.raft.index", entry.index as i64),
                    int_attribute("podtrace.etcd.raft.term", entry.term as i64),
                ]
            };
            attributes.extend(span.attributes.iter().cloned());
            self.wait(Draft {
                pod,
                key: span.key.clone(),
                parent: Some(format!("etcd/server/{fingerprint}")),
                name: span.name.clone(),
                kind: SpanKind::Internal,
                start_unix_ns: self.clock.unix_ns(span.start_ns),
                end_unix_ns: self.clock.unix_ns(span.end_ns.max(span.start_ns)),
                attributes,
                status: span.status.clone(),
                deadline_ns: span.end_ns.max(self.now_ns) + WAIT_NS,
            });
        }
    }

    /// Attributes naming etcd member `id` in `role`.
    fn member_attributes(&self, id: u64, role: RaftRole) -> Vec<(String, AttributeValue)> {
        let mut attributes = vec![
            string_attribute("db.system.name", "etcd"),
            string_attribute("podtrace.etcd.member.id", &format!("{id:x}")),
            string_attribute("podtrace.etcd.member.role", role.as_str()),
        ];
        if let Some(name) = self.member_names.get(&id) {
            attributes.push(string_attribute("podtrace.etcd.member.name", name));
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

    /// Notes that a span with `key` exists (made by this agent later, or by
    /// another node's), so its children hang from it.
    fn expect(&mut self, key: String) {
        if !self.seen.contains_key(&key) {
            self.remember_seen(key, 0);
        }
    }

    /// Remembers span `key` as seen, ending at `end_unix_ns` (0: not known
    /// here), forgetting the oldest past [`MAX_SEEN`].
    fn remember_seen(&mut self, key: String, end_unix_ns: u64) {
        if self.seen_order.len() >= MAX_SEEN {
            if let Some(oldest) = self.seen_order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        if self.seen.insert(key.clone(), end_unix_ns).is_none() {
            self.seen_order.push_back(key);
        }
    }

    /// Ends the Pod's creation trace if the object a write stored reports it
    /// Running (or done). Every agent that sees the write decides so, not
    /// only the one that emits the root.
    fn end_if_reported(&mut self, clues: &[PodClue], pod: &PodName, fingerprint: [u8; 16]) {
        let Some(uid) = &pod.uid else {
            return;
        };
        let reported = clues.iter().any(|clue| match clue {
            PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => identity
                .phase
                .as_deref()
                .is_some_and(|phase| ENDING_PHASES.contains(&phase)),
            _ => false,
        });
        if reported {
            let uid = uid.clone();
            self.end(&uid, Some(fingerprint));
        }
    }

    /// What a write does to a Pod, as the Pod object it stores shows against
    /// the previous one: `created`, `bound to NODE` (the scheduler's
    /// binding), `status PHASE` (the kubelet's report), `deleted`. A write
    /// that `failed` (a Txn whose compare failed: the apiserver retries it
    /// on the object it got back) is named for what it tried, and stored
    /// nothing: the retry is compared with the same previous object.
    fn change(&mut self, call: &EtcdMessage, pod: &PodName, failed: bool) -> Option<String> {
        if let Some(change) = self.changes.get(&call.fingerprint) {
            return Some(change.clone());
        }
        let change = self.new_change(call, pod, failed)?;
        if self.changes.len() >= MAX_SEEN {
            self.changes.clear();
        }
        self.changes.insert(call.fingerprint, change.clone());
        Some(change)
    }

    fn new_change(&mut self, call: &EtcdMessage, pod: &PodName, failed: bool) -> Option<String> {
        if call.write == WriteKind::Delete {
            return Some("deleted".to_owned());
        }
        let uid = pod.uid.as_ref()?;
        let object = call.clues.iter().find_map(|clue| match clue {
            PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => Some(identity),
            _ => None,
        })?;
        let now = (object.node_name.clone(), object.phase.clone());
        let before = if failed {
            self.states.get(uid).cloned()
        } else if self.states.len() < MAX_PODS || self.states.contains_key(uid) {
            self.states.insert(uid.clone(), now.clone())
        } else {
            self.dropped += 1;
            None
        };
        if call.write == WriteKind::Create {
            return Some("created".to_owned());
        }
        let Some((node_before, phase_before)) = before else {
            // None of the Pod's earlier writes was seen (it is older than
            // podtrace, or they were lost): what this one changed is not
            // known, and a status update of an older Pod, which names its
            // node, is not its binding.
            return Some("updated".to_owned());
        };
        match (&now.0, &now.1) {
            (Some(node), _) if node_before.is_none() => Some(format!("bound to {node}")),
            (_, Some(phase)) if phase_before.as_ref() != Some(phase) => {
                Some(format!("status {phase}"))
            }
            _ => Some("updated".to_owned()),
        }
    }

    /// Follows a Pod's progress through its writes; returns its root span
    /// when a write reports it Running (or deletes it first).
    fn track_root(
        &mut self,
        call: &EtcdMessage,
        pod: &PodName,
        start: u64,
        end: u64,
    ) -> Option<Span> {
        let uid = pod.uid.as_ref()?;
        if call.write == WriteKind::Create && call.side == Side::Server {
            if !self.roots.contains_key(uid) && self.roots.len() >= MAX_PODS {
                self.dropped += 1;
                return None;
            }
            let created = call.clues.iter().find_map(|clue| match clue {
                PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => Some(identity),
                _ => None,
            });
            let root = self.roots.entry(uid.clone()).or_insert_with(|| Root {
                pod: Pod::new(&self.cluster_id, &pod.namespace, &pod.name, uid),
                start_ns: start,
                node: None,
                scheduler: created.and_then(|pod| pod.scheduler_name.clone()),
                unschedulable: None,
                waiting: None,
                pull_policies: created.and_then(|pod| pod.pull_policies.clone()),
            });
            root.start_ns = root.start_ns.min(start);
            return None;
        }
        let root = self.roots.get_mut(uid)?;
        if call.write == WriteKind::Create {
            // The apiserver's side of the create began before etcd's.
            root.start_ns = root.start_ns.min(start);
            return None;
        }
        if call.side != Side::Server {
            return None;
        }
        let object = call.clues.iter().find_map(|clue| match clue {
            PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => Some(identity),
            _ => None,
        });
        if let Some(node) = object.and_then(|o| o.node_name.clone()) {
            root.node = Some(node);
        }
        if let Some(object) = object {
            if object.scheduler_name.is_some() {
                root.scheduler.clone_from(&object.scheduler_name);
            }
            root.unschedulable.clone_from(&object.unschedulable);
            root.waiting.clone_from(&object.waiting);
        }
        match (call.write, object.and_then(|o| o.phase.as_deref())) {
            (WriteKind::Delete, _) => {
                let root = self.roots.remove(uid)?;
                let uid = uid.clone();
                self.end(&uid, Some(call.fingerprint));
                Some(self.root_span(&root, end, Some("deleted before it was Running")))
            }
            (_, Some("Running")) => {
                let root = self.roots.remove(uid)?;
                self.closing.push(ClosingRoot {
                    root,
                    end_ns: end,
                    client: format!("etcd/client/{}", hex(&call.fingerprint)),
                    deadline_ns: end + WAIT_NS,
                });
                None
            }
            _ => None,
        }
    }

    fn root_span(&self, root: &Root, end_ns: u64, incomplete: Option<&str>) -> Span {
        self.root_span_until(
            root,
            self.clock.unix_ns(end_ns.max(root.start_ns)),
            incomplete,
        )
    }

    fn root_span_until(&self, root: &Root, end_unix_ns: u64, incomplete: Option<&str>) -> Span {
        let pod = &root.pod;
        let mut attributes = pod.attributes();
        if let Some(node) = &root.node {
            attributes.push(string_attribute("k8s.node.name", node));
        }
        if let Some(scheduler) = &root.scheduler {
            attributes.push(string_attribute("podtrace.k8s.scheduler.name", scheduler));
        }
        if let Some(policies) = &root.pull_policies {
            attributes.push(string_attribute("podtrace.k8s.image_pull_policy", policies));
        }
        attributes.push((
            "podtrace.trace.complete".to_owned(),
            AttributeValue::Bool(incomplete.is_none()),
        ));
        let status = match incomplete {
            None => SpanStatus::Unset,
            Some(why) => {
                // Where it is stuck, as far as the writes tell.
                let phase = if root.node.is_some() {
                    "node: bound, not reported Running"
                } else {
                    "scheduling: not bound to a node"
                };
                attributes.push(string_attribute("podtrace.trace.stuck_phase", phase));
                // What the components themselves reported about it.
                let reported = match (&root.node, &root.unschedulable, &root.waiting) {
                    (None, Some(verdict), _) => {
                        attributes
                            .push(string_attribute("podtrace.k8s.scheduling.failure", verdict));
                        format!(" ({verdict})")
                    }
                    (Some(_), _, Some(waiting)) => {
                        attributes
                            .push(string_attribute("podtrace.k8s.container.waiting", waiting));
                        format!(" ({waiting})")
                    }
                    _ => String::new(),
                };
                SpanStatus::Error(format!("incomplete: {why}; stuck in {phase}{reported}"))
            }
        };
        Span {
            trace_id: pod.trace,
            span_id: SpanId::well_known(pod.trace, "root"),
            parent_span_id: None,
            name: format!("pod.create {}/{}", pod.namespace, pod.name),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(root.start_ns),
            end_unix_ns,
            attributes,
            status,
            links: Vec::new(),
        }
    }

    /// A write to a WAL segment: part of the batch its next sync makes durable.
    pub fn on_wal(&mut self, write: &WalMessage) -> Vec<Span> {
        self.advance(write.start_ts_ns);
        if !self.batches.contains_key(&write.conn) && self.batches.len() >= MAX_WAL_FILES {
            self.dropped += write.pod_entries.len() as u64;
            return Vec::new();
        }
        let batch = self.batches.entry(write.conn).or_default();
        if batch.bytes == 0 {
            batch.first_write_ns = write.start_ts_ns;
        }
        batch.bytes += write.bytes;
        batch.entries += write.entries;
        batch.member_id = write.member.map(|m| m.member_id).or(batch.member_id);
        let room = MAX_BATCH_ENTRIES.saturating_sub(batch.pod_entries.len());
        self.dropped += write.pod_entries.len().saturating_sub(room) as u64;
        batch
            .pod_entries
            .extend(write.pod_entries.iter().take(room).cloned());
        Vec::new()
    }

    /// A sync of a file: for a WAL segment with Pod entries written since
    /// its last sync, one span per entry in its Pod's trace. One fdatasync
    /// often makes several Pods' writes durable (etcd batches proposals):
    /// each span says how many entries and which Pods shared it.
    pub fn on_fsync(&mut self, sync: &FsyncRecord) -> Vec<Span> {
        self.advance(sync.ids.ts_ns);
        let Some(batch) = self.batches.remove(&sync.conn) else {
            return Vec::new();
        };
        if let Some(id) = batch.member_id {
            self.etcd_member_id(sync.ids.tgid, id);
        }
        // Each entry's Pods, learnt once: the batch attribute needs them all
        // before any entry's span is drafted.
        let entries: Vec<(&WalPodEntry, Vec<PodName>)> = batch
            .pod_entries
            .iter()
            .map(|entry| (entry, self.learn(&entry.clues, &entry.fingerprint)))
            .collect();
        let mut pods_in_batch: Vec<String> = Vec::new();
        for (_, pods) in &entries {
            for pod in pods {
                let name = format!("{}/{}", pod.namespace, pod.name);
                if !pods_in_batch.contains(&name) {
                    pods_in_batch.push(name);
                }
            }
        }
        let batch_names = pods_in_batch
            .iter()
            .take(MAX_BATCH_NAMES)
            .cloned()
            .collect::<Vec<_>>()
            .join(",");
        let status = if sync.ret < 0 {
            SpanStatus::Error(format!("{:?} failed: error {}", sync.syscall, -sync.ret))
        } else {
            SpanStatus::Unset
        };
        for (entry, pods) in entries {
            let fingerprint = hex(&entry.fingerprint);
            for pod in pods {
                // A follower sees the Pod reported Running only here.
                self.end_if_reported(&entry.clues, &pod, entry.fingerprint);
                let mut attributes = vec![
                    string_attribute("db.system.name", "etcd"),
                    int_attribute("podtrace.etcd.raft.index", entry.index as i64),
                    int_attribute("podtrace.etcd.raft.term", entry.term as i64),
                    int_attribute("podtrace.etcd.wal.bytes", batch.bytes as i64),
                    int_attribute("podtrace.etcd.wal.entries", batch.entries as i64),
                    int_attribute("podtrace.etcd.wal.pods", pods_in_batch.len() as i64),
                    string_attribute("podtrace.etcd.wal.batch", &batch_names),
                    int_attribute("podtrace.etcd.wal.fsync_ns", sync.duration_ns as i64),
                    (
                        "podtrace.etcd.wal.shared".to_owned(),
                        AttributeValue::Bool(pods_in_batch.len() > 1),
                    ),
                ];
                if let Some(member) = self.members.get(&sync.ids.tgid) {
                    attributes.push(string_attribute("podtrace.etcd.member.name", member));
                }
                // In hex, as etcd prints member ids.
                if let Some(id) = batch.member_id {
                    attributes.push(string_attribute(
                        "podtrace.etcd.member.id",
                        &format!("{id:x}"),
                    ));
                }
                if let Some(role) = entry.role {
                    attributes.push(string_attribute("podtrace.etcd.member.role", role.as_str()));
                }
                // A follower's append is part of its leader's replication
                // to it, when that was decoded (here or on the leader's node).
                let replicated = match (entry.role, batch.member_id) {
                    (Some(RaftRole::Follower), Some(id)) => {
                        Some(replicate_key(id, entry.index)).filter(|k| self.seen.contains_key(k))
                    }
                    _ => None,
                };
                self.wait(Draft {
                    pod,
                    key: format!(
                        "etcd/wal/{}/{}/{}",
                        sync.conn.conn_id, entry.index, fingerprint
                    ),
                    parent: Some(
                        replicated.unwrap_or_else(|| format!("etcd/server/{fingerprint}")),
                    ),
                    name: "etcd WAL append + fdatasync".to_owned(),
                    kind: SpanKind::Internal,
                    start_unix_ns: self.clock.unix_ns(batch.first_write_ns),
                    end_unix_ns: self.clock.unix_ns(sync.ids.ts_ns),
                    attributes,
                    status: status.clone(),
                    deadline_ns: sync.ids.ts_ns + WAIT_NS,
                });
            }
            if entry.role == Some(RaftRole::Leader) && sync.ret >= 0 {
                let committed = self.replication.leader_synced(entry, sync.ids.ts_ns);
                self.draft_replicated(committed);
            }
        }
        self.release(false)
    }

    /// Event time moved on (live: the clock; replay: the records): spans
    /// whose wait is over go out, traces past their timeout as incomplete.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Span> {
        self.advance(now_ns);
        let unanswered = self.replication.expire(self.now_ns.saturating_sub(WAIT_NS));
        self.draft_replicated(unanswered);
        let mut spans = self.release(false);
        let timeout = self.window.trace_timeout_ns();
        let expired: Vec<String> = self
            .roots
            .iter()
            .filter(|(_, root)| self.now_ns.saturating_sub(root.start_ns) > timeout)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in expired {
            if let Some(root) = self.roots.remove(&uid) {
                spans.push(self.root_span(&root, self.now_ns, Some("timed out")));
                self.end(&uid, None);
            }
        }
        spans
    }

    /// The agent stops: every waiting span goes out with what is known, and
    /// every unfinished trace as incomplete.
    pub fn finish(&mut self) -> Vec<Span> {
        let mut spans = self.release(true);
        let mut roots: Vec<Root> = self.roots.drain().map(|(_, root)| root).collect();
        roots.sort_by_key(|root| root.start_ns);
        for root in roots {
            spans.push(self.root_span(&root, self.now_ns, Some("podtrace stopped first")));
        }
        spans
    }

    fn advance(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        self.window.start_by(now_ns);
    }

    fn wait(&mut self, draft: Draft) {
        self.remember_seen(draft.key.clone(), draft.end_unix_ns);
        if self.waiting.len() >= MAX_WAITING {
            self.dropped += 1;
            return;
        }
        self.waiting.push(draft);
    }

    /// Spans whose Pod and parent are known, or whose wait is over (`all`:
    /// every one), in the order they were drafted.
    fn release(&mut self, all: bool) -> Vec<Span> {
        let mut spans = Vec::new();
        for mut draft in std::mem::take(&mut self.waiting) {
            if draft.pod.uid.is_none() {
                draft.pod.uid = self
                    .uids
                    .get(&(draft.pod.namespace.clone(), draft.pod.name.clone()))
                    .cloned();
            }
            let parent_seen = draft
                .parent
                .as_ref()
                .is_none_or(|p| self.seen.contains_key(p));
            let over = all || self.now_ns >= draft.deadline_ns;
            let ready = parent_seen && draft.pod.uid.is_some();
            if !(ready || over) {
                self.waiting.push(draft);
                continue;
            }
            match self.resolve(draft, parent_seen) {
                Some(span) => spans.push(span),
                // No UID: the Pod was created before podtrace started (its
                // delete is the usual case: the key alone, of a Pod whose
                // writes were never decoded). A span of it would have no
                // trace to join.
                None => self.not_followed += 1,
            }
        }
        for closing in std::mem::take(&mut self.closing) {
            let client_end = self.seen.get(&closing.client).copied();
            if client_end.is_some() || all || self.now_ns >= closing.deadline_ns {
                let end = self
                    .clock
                    .unix_ns(closing.end_ns)
                    .max(client_end.unwrap_or(0));
                spans.push(self.root_span_until(&closing.root, end, None));
            } else {
                self.closing.push(closing);
            }
        }
        spans
    }

    /// The span of a draft, if its Pod's UID is known.
    fn resolve(&self, draft: Draft, parent_seen: bool) -> Option<Span> {
        let uid = draft.pod.uid.as_deref()?;
        let pod = Pod::new(&self.cluster_id, &draft.pod.namespace, &draft.pod.name, uid);
        let (trace, mut attributes) = (pod.trace, pod.attributes());
        attributes.extend(draft.attributes);
        let parent = match (&draft.parent, parent_seen) {
            (Some(parent), true) => SpanId::for_key(trace, parent.as_bytes()),
            _ => SpanId::well_known(trace, "root"),
        };
        Some(Span {
            trace_id: trace,
            span_id: SpanId::for_key(trace, draft.key.as_bytes()),
            parent_span_id: Some(parent),
            name: draft.name,
            kind: draft.kind,
            start_unix_ns: draft.start_unix_ns,
            end_unix_ns: draft.end_unix_ns,
            attributes,
            status: draft.status,
            links: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::io::IoSyscall;
    use tracer_decode::{
        identity::PodIdentity,
        wal::{MemberIds, RaftRole},
    };

    use super::*;
    use crate::correlate::span::TraceId;
    use crate::{capture::ProcessIds, decode::wal_writes::WalPodEntry};

    const ETCD: u32 = 100;
    const APISERVER: u32 = 200;
    const WAL: ConnKey = ConnKey {
        tgid: ETCD,
        conn_id: 7,
    };
    const MS: u64 = 1_000_000;

    fn clues(name: &str, uid: Option<&str>, node: Option<&str>, phase: &str) -> Vec<PodClue> {
        let mut clues = vec![PodClue::StorageKey {
            namespace: "default".into(),
            name: name.into(),
        }];
        if let Some(uid) = uid {
            clues.push(PodClue::Object(PodIdentity {
                namespace: Some("default".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                node_name: node.map(Into::into),
                phase: Some(phase.into()),
                ..PodIdentity::default()
            }));
        }
        clues
    }

    fn call(
        side: Side,
        write: WriteKind,
        clues: Vec<PodClue>,
        fingerprint: u8,
        start_ms: u64,
        end_ms: u64,
    ) -> EtcdMessage {
        EtcdMessage {
            conn: ConnKey {
                tgid: if side == Side::Server {
                    ETCD
                } else {
                    APISERVER
                },
                conn_id: 1,
            },
            side,
            method: "Txn".into(),
            write,
            clues: clues.into(),
            fingerprint: [fingerprint; 16],
            revision: Some(5),
            txn_succeeded: Some(true),
            status_code: Some(0),
            start_ts_ns: Some(start_ms * MS),
            end_ts_ns: Some(end_ms * MS),
        }
    }

    fn wal_write(entries: &[(&str, &str, u8)], at_ms: u64) -> WalMessage {
        WalMessage {
            conn: WAL,
            start_ts_ns: at_ms * MS,
            bytes: 4096,
            entries: entries.len() as u64 + 1,
            pod_entries: entries
                .iter()
                .enumerate()
                .map(|(i, (name, uid, fingerprint))| WalPodEntry {
                    index: 10 + i as u64,
                    term: 2,
                    clues: clues(name, Some(uid), None, "Pending").into(),
                    fingerprint: [*fingerprint; 16],
                    role: None,
                })
                .collect(),
            member: None,
        }
    }

    /// A WAL write of one Pod entry with these clues.
    fn wal_entry(clues: Vec<PodClue>, fingerprint: u8, index: u64, at_ms: u64) -> WalMessage {
        WalMessage {
            pod_entries: vec![WalPodEntry {
                index,
                term: 2,
                clues: clues.into(),
                fingerprint: [fingerprint; 16],
                role: None,
            }],
            ..wal_write(&[], at_ms)
        }
    }

    fn fsync(at_ms: u64) -> FsyncRecord {
        FsyncRecord {
            ids: ProcessIds {
                ts_ns: at_ms * MS,
                tgid: ETCD,
                tid: ETCD,
            },
            conn: WAL,
            fd: 9,
            syscall: IoSyscall::Fdatasync,
            duration_ns: 2 * MS,
            ret: 0,
        }
    }

    fn spans() -> ControlSpans {
        let clock = WallClock::from_offset(0);
        ControlSpans::new(
            clock,
            "test".into(),
            FollowWindow::new(clock, None, 60_000 * MS),
        )
    }

    fn named<'a>(spans: &'a [Span], name: &str, kind: SpanKind) -> &'a Span {
        spans
            .iter()
            .find(|s| s.name == name && s.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?} span {name}: {spans:#?}"))
    }

    fn attribute<'a>(span: &'a Span, key: &str) -> &'a AttributeValue {
        &span
            .attributes
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("no {key} on {span:#?}"))
            .1
    }

    #[test]
    fn client_server_and_wal_spans_nest_by_request_fingerprint_under_the_root() {
        let mut control = spans();
        control.etcd_member(ETCD, Some("infra1".to_owned()));
        let mut out = Vec::new();
        // Order as events arrive: WAL write and sync during etcd's handling,
        // then etcd's response, then the apiserver reading it.
        out.extend(control.on_wal(&wal_write(&[("web", "uid-1", 1)], 11)));
        out.extend(control.on_fsync(&fsync(13)));
        let created = clues("web", Some("uid-1"), None, "Pending");
        out.extend(control.on_etcd(&call(
            Side::Server,
            WriteKind::Create,
            created.clone(),
            1,
            10,
            14,
        )));
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Create, created, 1, 9, 15)));
        let bound = clues("web", Some("uid-1"), Some("node-a"), "Pending");
        out.extend(control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            bound.clone(),
            2,
            40,
            42,
        )));
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, bound, 2, 39, 43)));
        let running = clues("web", Some("uid-1"), Some("node-a"), "Running");
        out.extend(control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            running.clone(),
            3,
            900,
            902,
        )));
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, running, 3, 899, 903)));
        // The root goes out with the spans of the write that ends it, last.
        assert!(
            out.last().is_some_and(|s| s.parent_span_id.is_none()),
            "{out:#?}"
        );
        assert!(control.finish().is_empty());

        let trace = TraceId::for_pod("test", "uid-1");
        assert!(out.iter().all(|s| s.trace_id == trace), "{out:#?}");
        let root = named(&out, "pod.create default/web", SpanKind::Internal);
        assert_eq!(root.span_id, SpanId::well_known(trace, "root"));
        assert_eq!(root.parent_span_id, None);
        // From the apiserver's create call to its Running write's answer.
        assert_eq!((root.start_unix_ns, root.end_unix_ns), (9 * MS, 903 * MS));
        assert_eq!(root.status, SpanStatus::Unset);
        assert_eq!(
            attribute(root, "k8s.node.name"),
            &AttributeValue::String("node-a".into())
        );

        let txn = "etcdserverpb.KV/Txn";
        let clients: Vec<&Span> = out.iter().filter(|s| s.kind == SpanKind::Client).collect();
        let servers: Vec<&Span> = out.iter().filter(|s| s.kind == SpanKind::Server).collect();
        assert_eq!((clients.len(), servers.len()), (3, 3));
        for (client, server) in clients.iter().zip(&servers) {
            assert_eq!(client.name, txn);
            assert_eq!(client.parent_span_id, Some(root.span_id));
            assert_eq!(server.parent_span_id, Some(client.span_id), "{server:#?}");
        }
        assert_eq!(
            attribute(servers[0], "podtrace.etcd.write"),
            &AttributeValue::String("create".into())
        );
        let wal = named(&out, "etcd WAL append + fdatasync", SpanKind::Internal);
        assert_eq!(wal.parent_span_id, Some(servers[0].span_id));
        assert_eq!((wal.start_unix_ns, wal.end_unix_ns), (11 * MS, 13 * MS));
        assert_eq!(
            attribute(wal, "podtrace.etcd.wal.shared"),
            &AttributeValue::Bool(false)
        );
        assert_eq!(
            attribute(wal, "podtrace.etcd.member.name"),
            &AttributeValue::String("infra1".into())
        );
        assert_eq!(out.len(), 8);
        // Ids are unique within the trace.
        let mut ids: Vec<_> = out.iter().map(|s| s.span_id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), out.len());
    }

    #[test]
    fn a_binding_whose_txn_conflicted_and_was_retried_is_named_bound_both_times() {
        let mut control = spans();
        let mut out = Vec::new();
        let created = clues("web", Some("uid-1"), None, "Pending");
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Create, created, 1, 9, 15)));
        // The apiserver's binding on a stale object: the compare fails,
        // nothing is stored, and it retries on the object etcd returned.
        let bound = clues("web", Some("uid-1"), Some("node-a"), "Pending");
        let mut conflict = call(Side::Client, WriteKind::Update, bound.clone(), 2, 39, 43);
        conflict.txn_succeeded = Some(false);
        out.extend(control.on_etcd(&conflict));
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, bound, 3, 44, 48)));
        out.extend(control.finish());
        let changes: Vec<(&AttributeValue, &SpanStatus)> = out
            .iter()
            .filter(|s| s.kind == SpanKind::Client)
            .map(|s| (attribute(s, "podtrace.k8s.pod.change"), &s.status))
            .collect();
        let bound = AttributeValue::String("bound to node-a".into());
        assert_eq!(changes.len(), 3, "{out:#?}");
        assert!(matches!(changes[1], (change, SpanStatus::Error(_)) if *change == bound));
        assert_eq!(changes[2], (&bound, &SpanStatus::Unset));
    }

    #[test]
    fn the_first_write_seen_of_a_bound_pod_is_not_named_its_binding() {
        let mut control = spans();
        let mut out = Vec::new();
        // A Pod created and bound before podtrace: its status updates name
        // its node, as its binding did.
        let running = clues("old", Some("uid-0"), Some("node-a"), "Running");
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, running, 1, 9, 15)));
        out.extend(control.finish());
        let changes: Vec<&AttributeValue> = out
            .iter()
            .filter(|s| s.kind == SpanKind::Client)
            .map(|s| attribute(s, "podtrace.k8s.pod.change"))
            .collect();
        let updated = AttributeValue::String("updated".into());
        assert_eq!(changes, [&updated], "{out:#?}");
    }

    const WAL_SPAN: &str = "etcd WAL append + fdatasync";

    /// Every span once `write` is synced and the spans are finished.
    fn synced_wal_spans(control: &mut ControlSpans, write: &WalMessage) -> Vec<Span> {
        control.on_wal(write);
        let mut out = control.on_fsync(&fsync(13));
        out.extend(control.finish());
        out
    }

    #[test]
    fn a_wal_span_names_its_member_by_id_and_role() {
        let mut control = spans();
        let mut write = wal_write(&[("a", "uid-a", 1), ("b", "uid-b", 2)], 11);
        write.member = Some(MemberIds {
            member_id: 0x8e9e_05c5_2164_694d,
            cluster_id: 0x0cdf_8181_94e3_a8c3,
        });
        write.pod_entries[0].role = Some(RaftRole::Leader);
        write.pod_entries[1].role = Some(RaftRole::Follower);
        let out = synced_wal_spans(&mut control, &write);
        let wal: Vec<&Span> = out.iter().filter(|s| s.name == WAL_SPAN).collect();
        assert_eq!(wal.len(), 2, "{out:#?}");
        for (span, role) in wal.iter().zip(["leader", "follower"]) {
            assert_eq!(
                attribute(span, "podtrace.etcd.member.id"),
                &AttributeValue::String("8e9e05c52164694d".into())
            );
            assert_eq!(
                attribute(span, "podtrace.etcd.member.role"),
                &AttributeValue::String(role.into())
            );
        }
    }

    #[test]
    fn one_fdatasync_for_two_pods_is_a_span_in_each_trace_naming_the_batch() {
        let mut control = spans();
        // A member that exec'd again, or exited: no longer named.
        control.etcd_member(ETCD, Some("infra1".to_owned()));
        control.etcd_member(ETCD, None);
        let write = wal_write(&[("a", "uid-a", 1), ("b", "uid-b", 2)], 11);
        let out = synced_wal_spans(&mut control, &write);
        let wal: Vec<&Span> = out.iter().filter(|s| s.name == WAL_SPAN).collect();
        assert_eq!(wal.len(), 2, "{out:#?}");
        assert_eq!(wal[0].trace_id, TraceId::for_pod("test", "uid-a"));
        assert_eq!(wal[1].trace_id, TraceId::for_pod("test", "uid-b"));
        for span in wal {
            assert_eq!(
                attribute(span, "podtrace.etcd.wal.pods"),
                &AttributeValue::Int(2)
            );
            assert_eq!(
                attribute(span, "podtrace.etcd.wal.shared"),
                &AttributeValue::Bool(true)
            );
            assert_eq!(
                attribute(span, "podtrace.etcd.wal.batch"),
                &AttributeValue::String("default/a,default/b".into())
            );
            assert!(
                !span
                    .attributes
                    .iter()
                    .any(|(key, _)| key.starts_with("podtrace.etcd.member.")),
                "{span:#?}"
            );
            // No etcd handling seen here (a follower): under the root.
            assert_eq!(
                span.parent_span_id,
                Some(SpanId::well_known(span.trace_id, "root"))
            );
        }
    }

    #[test]
    fn a_server_span_waits_for_its_client_then_falls_back_to_the_root() {
        let mut control = spans();
        let created = clues("web", Some("uid-1"), None, "Pending");
        let out = control.on_etcd(&call(Side::Server, WriteKind::Create, created, 1, 10, 14));
        assert!(out.is_empty(), "released before its wait: {out:#?}");
        assert!(control.tick(14 * MS + WAIT_NS / 2).is_empty());
        let out = control.tick(14 * MS + WAIT_NS);
        let server = named(&out, "etcdserverpb.KV/Txn", SpanKind::Server);
        assert_eq!(
            server.parent_span_id,
            Some(SpanId::well_known(server.trace_id, "root"))
        );
    }

    #[test]
    fn a_pod_never_running_is_exported_incomplete_with_the_phase_it_is_stuck_in() {
        let mut control = spans();
        let bound = clues("web", Some("uid-1"), Some("node-a"), "Pending");
        let created = clues("web", Some("uid-1"), None, "Pending");
        control.on_etcd(&call(Side::Server, WriteKind::Create, created, 1, 10, 14));
        control.on_etcd(&call(Side::Server, WriteKind::Update, bound, 2, 40, 42));
        assert!(
            !control
                .tick(59_000 * MS)
                .iter()
                .any(|s| s.parent_span_id.is_none())
        );
        let out = control.tick(61_000 * MS);
        let root = named(&out, "pod.create default/web", SpanKind::Internal);
        assert!(
            matches!(&root.status, SpanStatus::Error(m) if m.contains("timed out") && m.contains("node")),
            "{root:#?}"
        );
        assert_eq!(
            attribute(root, "podtrace.trace.complete"),
            &AttributeValue::Bool(false)
        );
        assert!(control.finish().is_empty());
    }

    #[test]
    fn a_write_about_a_pod_of_unknown_uid_waits_then_is_not_followed() {
        let mut control = spans();
        let deleted = clues("old", None, None, "Running");
        assert!(
            control
                .on_etcd(&call(Side::Server, WriteKind::Delete, deleted, 4, 10, 12))
                .is_empty()
        );
        let out = control.tick(12 * MS + WAIT_NS);
        assert!(out.is_empty(), "{out:#?}");
        assert_eq!((control.not_followed, control.unattributed), (1, 0));
        // A UID learned while waiting attributes it.
        let mut control = spans();
        control.on_etcd(&call(
            Side::Server,
            WriteKind::Delete,
            clues("p", None, None, ""),
            4,
            10,
            12,
        ));
        let out = control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            clues("p", Some("uid-p"), None, "Pending"),
            5,
            13,
            14,
        ));
        let out: Vec<Span> = out.into_iter().chain(control.finish()).collect();
        assert!(
            out.iter()
                .all(|s| s.trace_id == TraceId::for_pod("test", "uid-p")),
            "{out:#?}"
        );
        assert_eq!(control.unattributed, 0);
    }

    fn created_at(mut clues: Vec<PodClue>, created_s: i64) -> Vec<PodClue> {
        for clue in &mut clues {
            if let PodClue::Object(identity) = clue {
                identity.created_unix_s = Some(created_s);
            }
        }
        clues
    }

    #[test]
    fn writes_of_a_pod_created_before_podtrace_started_make_no_spans() {
        let mut control = spans();
        // The first event, 100 s into the clock: the agent's start.
        control.tick(100_000 * MS);
        // Created 60 s before: a status update of a Pod long up.
        let old = created_at(clues("old", Some("uid-old"), Some("n"), "Pending"), 40);
        let mut out = control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            old.clone(),
            1,
            100_010,
            100_011,
        ));
        out.extend(control.on_etcd(&call(
            Side::Client,
            WriteKind::Update,
            old,
            1,
            100_009,
            100_012,
        )));
        control.on_wal(&wal_entry(
            created_at(clues("old", Some("uid-old"), Some("n"), "Pending"), 40),
            1,
            10,
            100_010,
        ));
        out.extend(control.on_fsync(&fsync(100_011)));
        assert!(out.is_empty(), "{out:#?}");
        assert_eq!(control.not_followed, 3);
        assert_eq!(control.uid_of("default", "old"), None, "not learnt");
        // Created 2 s before the agent (within the clock slack): followed.
        let young = created_at(clues("young", Some("uid-young"), None, "Pending"), 98);
        let mut out = control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            young.clone(),
            2,
            100_020,
            100_021,
        ));
        out.extend(control.on_etcd(&call(
            Side::Client,
            WriteKind::Update,
            young,
            2,
            100_019,
            100_022,
        )));
        assert_eq!(out.len(), 2, "{out:#?}");
        // A Pod created longer ago than the trace timeout (60 s here) is
        // not in creation any more, whenever the agent started.
        control.tick(200_000 * MS);
        let stale = created_at(clues("young", Some("uid-young"), None, "Pending"), 98);
        let out = control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            stale,
            3,
            200_010,
            200_011,
        ));
        assert!(out.is_empty(), "{out:#?}");
    }

    #[test]
    fn nothing_after_the_write_that_reports_running_joins_the_creation_trace() {
        let mut control = spans();
        // Created with its node set, as a DaemonSet's Pods are.
        let created = clues("web", Some("uid-1"), Some("node-a"), "Pending");
        let mut out = control.on_etcd(&call(
            Side::Server,
            WriteKind::Create,
            created.clone(),
            1,
            10,
            14,
        ));
        out.extend(control.on_etcd(&call(Side::Client, WriteKind::Create, created, 1, 9, 15)));
        let running = clues("web", Some("uid-1"), Some("node-a"), "Running");
        // The WAL entry and both sides of the Running write belong to it.
        control.on_wal(&wal_entry(running.clone(), 3, 11, 899));
        out.extend(control.on_fsync(&fsync(900)));
        out.extend(control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            running.clone(),
            3,
            899,
            902,
        )));
        out.extend(control.on_etcd(&call(
            Side::Client,
            WriteKind::Update,
            running.clone(),
            3,
            898,
            903,
        )));
        assert_eq!(out.len(), 6, "{out:#?}");
        assert!(out.last().is_some_and(|s| s.parent_span_id.is_none()));
        // Its WAL entry came first, and did not make it look like a binding.
        let changes: Vec<&AttributeValue> = out
            .iter()
            .filter(|s| s.kind == SpanKind::Server)
            .map(|s| attribute(s, "podtrace.k8s.pod.change"))
            .collect();
        assert_eq!(
            changes,
            [
                &AttributeValue::String("created".into()),
                &AttributeValue::String("status Running".into())
            ]
        );
        // A later status update and the deletion (its key only) do not.
        let mut after = control.on_etcd(&call(
            Side::Server,
            WriteKind::Update,
            running,
            4,
            5000,
            5001,
        ));
        let deleted = vec![PodClue::StorageKey {
            namespace: "default".into(),
            name: "web".into(),
        }];
        after.extend(control.on_etcd(&call(
            Side::Server,
            WriteKind::Delete,
            deleted,
            5,
            9000,
            9001,
        )));
        after.extend(control.finish());
        assert!(after.is_empty(), "{after:#?}");
        assert_eq!(control.not_followed, 2);
    }

    #[test]
    fn an_agent_that_sees_only_some_writes_ends_the_trace_where_the_root_does() {
        // A node whose etcd is a follower: the Running write reaches it as a
        // WAL entry only, and the next status update as one too.
        let mut control = spans();
        let mut out = Vec::new();
        let running = clues("web", Some("uid-1"), Some("node-a"), "Running");
        for (fingerprint, at) in [(3, 900), (4, 5000)] {
            control.on_wal(&wal_entry(running.clone(), fingerprint, at, at));
            out.extend(control.on_fsync(&fsync(at + 1)));
        }
        out.extend(control.finish());
        assert_eq!(out.len(), 1, "the Running write's WAL span only: {out:#?}");
        assert_eq!(control.not_followed, 1);
    }

    /// A Pod entry's WAL write and sync by member `tgid` (Raft id `id`) in `role`.
    fn member_wal_spans(
        control: &mut ControlSpans,
        tgid: u32,
        id: u64,
        role: RaftRole,
        at_ms: (u64, u64),
    ) -> Vec<Span> {
        let conn = ConnKey {
            tgid,
            conn_id: u64::from(tgid),
        };
        let mut write = wal_write(&[("web", "uid-1", 1)], at_ms.0);
        write.conn = conn;
        write.member = Some(MemberIds {
            member_id: id,
            cluster_id: 1,
        });
        write.pod_entries[0].role = Some(role);
        let mut out = control.on_wal(&write);
        let mut sync = fsync(at_ms.1);
        (sync.conn, sync.ids.tgid) = (conn, tgid);
        out.extend(control.on_fsync(&sync));
        out
    }

    fn raft(
        kind: tracer_decode::raft::MessageKind,
        at_tgid: u32,
        sent: bool,
        (from, to): (u64, u64),
        at_ms: u64,
    ) -> RaftPeerMessage {
        let is_app = kind == tracer_decode::raft::MessageKind::App;
        RaftPeerMessage {
            conn: ConnKey {
                tgid: at_tgid,
                conn_id: 50,
            },
            sent,
            ts_ns: at_ms * MS,
            kind,
            from,
            to,
            index: if is_app { 9 } else { 10 },
            reject: false,
            pod_entries: if is_app {
                wal_write(&[("web", "uid-1", 1)], at_ms).pod_entries
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn a_three_member_write_shows_replication_commit_and_apply_under_the_server_span() {
        use tracer_decode::raft::MessageKind::{App, AppResp};
        const FOLLOWER: u32 = ETCD + 1;
        const LEADER_ID: u64 = 0xa;
        const FAST_ID: u64 = 0xb;
        const SLOW_ID: u64 = 0xc;
        let mut control = spans();
        control.etcd_member(ETCD, Some("etcd-0".to_owned()));
        control.etcd_member(FOLLOWER, Some("etcd-1".to_owned()));
        let mut out = Vec::new();
        // The leader appends to both followers, then saves its own entry.
        for follower in [FAST_ID, SLOW_ID] {
            out.extend(control.on_raft(&raft(App, ETCD, true, (LEADER_ID, follower), 11)));
        }
        out.extend(control.on_raft(&raft(App, FOLLOWER, false, (LEADER_ID, FAST_ID), 11)));
        out.extend(member_wal_spans(
            &mut control,
            ETCD,
            LEADER_ID,
            RaftRole::Leader,
            (11, 13),
        ));
        out.extend(member_wal_spans(
            &mut control,
            FOLLOWER,
            FAST_ID,
            RaftRole::Follower,
            (12, 14),
        ));
        // The fast follower's answer commits it; etcd answers; the slow one's comes late.
        out.extend(control.on_raft(&raft(AppResp, ETCD, false, (FAST_ID, LEADER_ID), 15)));
        let created = clues("web", Some("uid-1"), None, "Pending");
        out.extend(control.on_etcd(&call(Side::Server, WriteKind::Create, created, 1, 10, 16)));
        out.extend(control.on_raft(&raft(AppResp, ETCD, false, (SLOW_ID, LEADER_ID), 40)));
        out.extend(control.finish());

        let trace = TraceId::for_pod("test", "uid-1");
        let id = |key: &str| SpanId::for_key(trace, key.as_bytes());
        let server = named(&out, "etcdserverpb.KV/Txn", SpanKind::Server);
        let fast = named(&out, "etcd raft replicate → etcd-1", SpanKind::Internal);
        assert_eq!(fast.parent_span_id, Some(server.span_id));
        assert_eq!(fast.span_id, id("etcd/replicate/b/10"));
        assert_eq!((fast.start_unix_ns, fast.end_unix_ns), (11 * MS, 15 * MS));
        assert_eq!(
            attribute(fast, "podtrace.etcd.raft.in_quorum"),
            &AttributeValue::Bool(true)
        );
        assert_eq!(
            attribute(fast, "podtrace.etcd.member.name"),
            &AttributeValue::String("etcd-0".into())
        );
        // The slow follower's name is unknown here (no WAL of it seen): its id.
        let slow = named(&out, "etcd raft replicate → c", SpanKind::Internal);
        assert_eq!((slow.start_unix_ns, slow.end_unix_ns), (11 * MS, 40 * MS));
        assert_eq!(
            attribute(slow, "podtrace.etcd.raft.in_quorum"),
            &AttributeValue::Bool(false)
        );

        let wal: Vec<&Span> = out.iter().filter(|s| s.name == WAL_SPAN).collect();
        let role = |span: &Span| attribute(span, "podtrace.etcd.member.role").clone();
        let leader_wal = wal
            .iter()
            .find(|s| role(s) == AttributeValue::String("leader".into()));
        let follower_wal = wal
            .iter()
            .find(|s| role(s) == AttributeValue::String("follower".into()));
        assert_eq!(
            leader_wal.and_then(|s| s.parent_span_id),
            Some(server.span_id),
            "{out:#?}"
        );
        assert_eq!(
            follower_wal.and_then(|s| s.parent_span_id),
            Some(fast.span_id),
            "{out:#?}"
        );

        let commit = named(&out, "etcd raft commit", SpanKind::Internal);
        assert_eq!(commit.parent_span_id, Some(server.span_id));
        assert_eq!(
            (commit.start_unix_ns, commit.end_unix_ns),
            (11 * MS, 15 * MS)
        );
        for (key, value) in [
            ("podtrace.etcd.raft.waited_for", "etcd-0,etcd-1"),
            ("podtrace.etcd.raft.waited_longest_for", "etcd-1"),
            ("podtrace.etcd.raft.not_waited_for", "c"),
        ] {
            assert_eq!(
                attribute(commit, key),
                &AttributeValue::String(value.into()),
                "{key}"
            );
        }
        assert_eq!(
            attribute(commit, "podtrace.etcd.raft.quorum"),
            &AttributeValue::Int(2)
        );
        let apply = named(&out, "etcd apply", SpanKind::Internal);
        assert_eq!(apply.parent_span_id, Some(server.span_id));
        assert_eq!((apply.start_unix_ns, apply.end_unix_ns), (15 * MS, 16 * MS));
    }
}
