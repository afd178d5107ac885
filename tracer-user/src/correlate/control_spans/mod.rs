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
//!
//! Here: the etcd calls' spans and the drafts that wait for their parent;
//! `registry`: which Pods are followed (names to UIDs, created before the
//! agent, ended); `root`: the Pod's root span; `wal`: WAL appends and
//! fdatasyncs; `raft`: replication, commit and apply of Pod entries.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{PodChange, attr, name};

use std::collections::{HashMap, VecDeque};

use tracer_decode::{
    etcd::WriteKind,
    identity::{PodClue, PodIdentity},
};

use tracer_decode::wal::RaftRole;

use super::{
    awaiting::Awaiting,
    pod::{ENDING_PHASES, Pod, int_attribute, string_attribute},
    replication::{Replicated, Replication},
    span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, hex},
};
use crate::{
    bounded::BoundedMap,
    capture::{ConnKey, FsyncRecord, clock::WallClock},
    decode::{
        EtcdMessage, RaftPeerMessage, WalMessage, follow_window::FollowWindow, grpc_calls::Side,
        wal_writes::WalPodEntry,
    },
};

mod raft;
mod registry;
mod root;
mod wal;

use raft::replicate_key;
use root::{ClosingRoot, Root};
use wal::WalBatch;

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
    changes: BoundedMap<[u8; 16], PodChange>,
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
    entry_pods: BoundedMap<[u8; 16], Vec<PodName>>,
    /// Span keys drafted recently, with their spans' end (unix ns).
    seen: HashMap<String, u64>,
    seen_order: VecDeque<String>,
    waiting: Awaiting<Draft>,
    /// Roots whose Pod was reported Running, waiting for the spans of that
    /// write (the apiserver reads etcd's answer after etcd sent it), so that
    /// they go out before their root and the root ends with the write.
    closing: Awaiting<ClosingRoot>,
    /// Latest event time seen (CLOCK_MONOTONIC ns).
    now_ns: u64,
    /// Pods whose creation trace has ended, by UID, with the fingerprint of
    /// the write that ended it (its other side and its WAL entry still
    /// belong to the trace; nothing later does). The oldest is forgotten
    /// first, and counted dropped.
    ended: BoundedMap<String, Option<[u8; 16]>>,
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
            changes: BoundedMap::new(MAX_SEEN),
            roots: HashMap::new(),
            batches: HashMap::new(),
            members: HashMap::new(),
            member_names: HashMap::new(),
            replication: Replication::default(),
            entry_pods: BoundedMap::new(MAX_SEEN),
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            waiting: Awaiting::new(MAX_WAITING),
            closing: Awaiting::new(MAX_PODS),
            now_ns: 0,
            ended: BoundedMap::new(MAX_PODS),
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
        let failed = match (call.status_code, call.txn_succeeded) {
            (Some(code), _) if code != 0 => Some(format!("gRPC status {code}")),
            (_, Some(false)) => Some("Txn compare failed: the key changed (conflict)".to_owned()),
            _ => None,
        };
        let mut finished = Vec::new();
        for pod in &pods {
            let change = self.change(call, pod, failed.is_some());
            let mut attributes = vec![
                string_attribute(attr::RPC_SYSTEM, "grpc"),
                string_attribute(attr::RPC_SERVICE, tracer_decode::etcd::KV_SERVICE),
                string_attribute(attr::RPC_METHOD, &call.method),
                string_attribute(attr::DB_SYSTEM_NAME, "etcd"),
                string_attribute(attr::DB_OPERATION_NAME, &call.method),
                string_attribute(attr::ETCD_WRITE, call.write.name()),
                string_attribute(
                    attr::ETCD_KEY,
                    &format!("/registry/pods/{}/{}", pod.namespace, pod.name),
                ),
            ];
            if let Some(change) = &change {
                attributes.push(string_attribute(
                    attr::K8S_POD_CHANGE,
                    &change.to_attribute(),
                ));
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
                attributes.push(string_attribute(attr::K8S_SCHEDULING_FAILURE, verdict));
            }
            if let Some(revision) = call.revision {
                attributes.push(int_attribute(attr::ETCD_REVISION, revision));
            }
            if let Some(code) = call.status_code {
                attributes.push(int_attribute(attr::RPC_GRPC_STATUS_CODE, i64::from(code)));
            }
            self.wait(
                Draft {
                    pod: pod.clone(),
                    key: SpanKey::EtcdCall {
                        side: call.side,
                        fingerprint: &fingerprint,
                    }
                    .encode(),
                    parent: (call.side == Side::Server).then(|| {
                        SpanKey::EtcdCall {
                            side: Side::Client,
                            fingerprint: &fingerprint,
                        }
                        .encode()
                    }),
                    name: name::grpc(tracer_decode::etcd::KV_SERVICE, &call.method),
                    kind: match call.side {
                        Side::Client => SpanKind::Client,
                        Side::Server => SpanKind::Server,
                    },
                    start_unix_ns: self.clock.unix_ns(start),
                    end_unix_ns: self.clock.unix_ns(end),
                    attributes,
                    status: failed.clone().map_or(SpanStatus::Unset, SpanStatus::Error),
                },
                end + WAIT_NS,
            );
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

    /// What a write does to a Pod, as the Pod object it stores shows against
    /// the previous one: `created`, `bound to NODE` (the scheduler's
    /// binding), `status PHASE` (the kubelet's report), `deleted`. A write
    /// that `failed` (a Txn whose compare failed: the apiserver retries it
    /// on the object it got back) is named for what it tried, and stored
    /// nothing: the retry is compared with the same previous object.
    fn change(&mut self, call: &EtcdMessage, pod: &PodName, failed: bool) -> Option<PodChange> {
        if let Some(change) = self.changes.get(&call.fingerprint) {
            return Some(change.clone());
        }
        let change = self.new_change(call, pod, failed)?;
        self.changes.insert(call.fingerprint, change.clone());
        Some(change)
    }

    fn new_change(&mut self, call: &EtcdMessage, pod: &PodName, failed: bool) -> Option<PodChange> {
        if call.write == WriteKind::Delete {
            return Some(PodChange::Deleted);
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
            return Some(PodChange::Created);
        }
        let Some((node_before, phase_before)) = before else {
            // None of the Pod's earlier writes was seen (it is older than
            // podtrace, or they were lost): what this one changed is not
            // known, and a status update of an older Pod, which names its
            // node, is not its binding.
            return Some(PodChange::Updated);
        };
        match (&now.0, &now.1) {
            (Some(node), _) if node_before.is_none() => Some(PodChange::BoundTo(node.clone())),
            (_, Some(phase)) if phase_before.as_ref() != Some(phase) => {
                Some(PodChange::Status(phase.clone()))
            }
            _ => Some(PodChange::Updated),
        }
    }

    /// Writes' changes and entries' Pods forgotten at their bound, the
    /// oldest first (see [`BoundedMap`]).
    pub fn forgotten(&self) -> u64 {
        self.changes.evicted() + self.entry_pods.evicted()
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

    /// Holds `draft` until its Pod and parent are known, or until
    /// `deadline_ns`.
    fn wait(&mut self, draft: Draft, deadline_ns: u64) {
        self.remember_seen(draft.key.clone(), draft.end_unix_ns);
        if self.waiting.hold(draft, deadline_ns).is_err() {
            self.dropped += 1;
        }
    }

    /// Spans whose Pod and parent are known, or whose wait is over (`all`:
    /// every one), in the order they were drafted.
    fn release(&mut self, all: bool) -> Vec<Span> {
        let (uids, seen) = (&self.uids, &self.seen);
        let parent_seen =
            |draft: &Draft| draft.parent.as_ref().is_none_or(|p| seen.contains_key(p));
        let released = self.waiting.take(self.now_ns, all, |draft| {
            if draft.pod.uid.is_none() {
                draft.pod.uid = uids
                    .get(&(draft.pod.namespace.clone(), draft.pod.name.clone()))
                    .cloned();
            }
            parent_seen(draft) && draft.pod.uid.is_some()
        });
        let mut spans = Vec::new();
        for draft in released {
            let parent_seen = parent_seen(&draft);
            match self.resolve(draft, parent_seen) {
                Some(span) => spans.push(span),
                // No UID: the Pod was created before podtrace started (its
                // delete is the usual case: the key alone, of a Pod whose
                // writes were never decoded). A span of it would have no
                // trace to join.
                None => self.not_followed += 1,
            }
        }
        let seen = &self.seen;
        let closed = self.closing.take(self.now_ns, all, |closing| {
            seen.contains_key(&closing.client)
        });
        for closing in closed {
            let client_end = self.seen.get(&closing.client).copied();
            let end = self
                .clock
                .unix_ns(closing.end_ns)
                .max(client_end.unwrap_or(0));
            spans.push(self.root_span_until(&closing.root, end, None));
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
            _ => SpanId::of(trace, &SpanKey::Root),
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
mod tests;
