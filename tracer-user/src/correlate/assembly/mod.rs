//! The last step of correlation: a Pod's creation trace holds exactly its
//! creation, and its deletion is a trace of its own.
//!
//! In: every span the other builders made ([`super::control_spans`],
//! [`super::node_spans`], [`super::component_spans`]), and the passing of
//! time. Out: the same spans, each in the trace it belongs to, as
//! well-formed trees: one root, every child inside its parent's time.
//!
//! A creation's spans go out as they come, once their parent has (a span
//! outside its parent's time then hangs from the nearest ancestor that
//! holds it: the pause process runs after RunPodSandbox returned), so that
//! a Pod stuck on its way shows where while it is stuck. Its two summary
//! spans, the root and this node's span, wait for the creation's end: the
//! first of its root (the write that reported the Pod Running, or the
//! timeout), a status update that returned the Pod Running (an agent that
//! sees the kubelet but not etcd), or the start of the Pod's teardown (an
//! agent that sees none of these holds them until the trace timeout). A few
//! seconds later, when the spans in flight at the end have come, they go
//! out reaching over every span of the creation: the node span from the
//! kubelet's first work to its last (made here when nothing closed it: a
//! Pod that never started), the root over all.
//!
//! After the end:
//! - teardown work (StopContainer, StopPodSandbox, RemovePodSandbox and
//!   their runc and CNI runs, the container's exit, the DELETE request),
//!   and whatever else runs once the teardown has begun (the kubelet's
//!   syncs and status updates, the DELETE's etcd write), goes to the Pod's
//!   deletion trace (`pod.delete ns/name`, id derived from the UID like
//!   the creation's), whose root links to the creation's; it goes out
//!   whole once the teardown has been quiet a while.
//! - what runs after the creation and before any teardown (the kubelet's
//!   periodic status queries and resyncs) belongs to neither: it is counted
//!   in [`Assembly::after_creation`], not exported.
//!
//! Which agent emits which root: the creation's, the agent that saw etcd
//! handle the create ([`super::control_spans`]); the deletion's, the agent
//! of the node that ran the Pod (its node spans are here), else the one
//! that emitted the creation's root (a Pod deleted before it was bound).
//! Across agents each holds only its own spans: their clocks differ, and
//! a tree spread over nodes is as well-formed as their clocks agree.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{What, attr, name};

use std::collections::{HashMap, HashSet, VecDeque};

use super::{
    pod::{ENDING_PHASES, string_attribute},
    span::{AttributeValue, Span, SpanId, SpanKind, SpanLink, SpanStatus, TraceId},
};
use crate::bounded::BoundedMap;

/// How long after a creation ended (in event time) its summary spans wait
/// for the spans that were in flight then (the status update's response,
/// the server span of the write that reported Running); also how long a
/// span waits for its parent, and a span after the end to learn whether a
/// teardown had begun. Longer than the 2 s the other builders hold a span
/// for its partner (a CRI server span for the kubelet's client span),
/// plus a live agent's tick: a StartContainer whose client span never came
/// goes out 2 s after its end, and its runc spans must still find it.
pub const SETTLE_NS: u64 = 4_000_000_000;
/// How long a deletion trace waits for more of its spans after the last
/// one: the kubelet stops the sandbox and removes it seconds after the
/// containers.
pub const DELETION_QUIET_NS: u64 = 10_000_000_000;
/// Pods followed at once; past it the oldest's held spans go out as they are.
const MAX_PODS: usize = 4096;
/// Spans held or remembered for one Pod; past it they go out as they are.
const MAX_SPANS_PER_POD: usize = 2048;

/// CRI calls that tear a Pod down.
const TEARDOWN_CALLS: [&str; 4] = [
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// What a span says about where it belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The creation's root (`pod.create …`).
    CreationRoot,
    /// Work that tears the Pod down.
    Teardown,
    /// Ends the creation on an agent without the root: a status update
    /// that returned the Pod Running (or finished).
    EndsCreation,
    /// Anything else: it belongs to the phase it ran in.
    Other,
}

fn role(span: &Span, what: What<'_>) -> Role {
    if what == What::CreationRoot {
        return Role::CreationRoot;
    }
    let attribute = |key| span.string_attribute(key);
    let teardown = attribute(attr::RPC_METHOD).is_some_and(|m| TEARDOWN_CALLS.contains(&m))
        || matches!(
            what,
            What::Runtime {
                executable: "runc",
                subcommand: "kill" | "delete"
            } | What::ContainerExit
        )
        || attribute(attr::CNI_CALL)
            .is_some_and(|call| call == "StopPodSandbox" || call == "RemovePodSandbox")
        || attribute(attr::HTTP_REQUEST_METHOD) == Some("DELETE");
    if teardown {
        Role::Teardown
    } else if attribute(attr::K8S_POD_PHASE).is_some_and(|phase| ENDING_PHASES.contains(&phase))
        // The request's span, not the calls inside it: it ends when the
        // answer is in.
        && what.is_api_request()
    {
        Role::EndsCreation
    } else {
        Role::Other
    }
}

/// Whether a span is the node's work on the Pod (the kubelet's, the
/// runtime's): its parent in the deletion trace is the node span.
fn on_node(span: &Span) -> bool {
    span.string_attribute(attr::K8S_NODE_NAME).is_some()
        || span.string_attribute(attr::K8S_COMPONENT) == Some("kubelet")
}

/// Where a span that went out lies, and under what.
#[derive(Clone, Copy, Debug)]
struct Placed {
    start_ns: u64,
    end_ns: u64,
    parent: Option<SpanId>,
}

/// One Pod's spans on this agent.
#[derive(Debug, Default)]
struct PodSpans {
    /// When its first span arrived (unix ns of event time).
    first_seen_ns: u64,
    /// The root and the node span, held until the creation has settled.
    summaries: Vec<Span>,
    /// Creation spans that went out, until the summaries have.
    placed: HashMap<SpanId, Placed>,
    /// Creation spans waiting for their parent, with when they came.
    waiting: Vec<(Span, u64)>,
    /// Where the creation ended (unix ns), and when that was learned.
    ended: Option<(u64, u64)>,
    /// The summaries went out; later spans are the deletion's or nobody's.
    released: bool,
    /// The summaries that went out (a late copy of one is not sent again).
    sent_summaries: Vec<SpanId>,
    /// The creation's root went through here: this agent roots the Pod.
    rooted: bool,
    /// The creation root's `k8s.node.name`: the Pod was bound.
    bound: bool,
    /// `k8s.namespace.name` and `k8s.pod.name`, from the spans.
    name: Option<(String, String)>,
    uid: Option<String>,
    /// Start of the earliest teardown span (unix ns).
    teardown_start: Option<u64>,
    /// Spans after the creation's end waiting to learn whether the
    /// teardown had begun when they ran, with when they came.
    undecided: Vec<(Span, u64)>,
    /// Deletion spans held until the deletion has been quiet a while.
    deletion: Vec<Span>,
    /// When the last deletion span arrived (unix ns of event time).
    deletion_last_ns: u64,
}

impl PodSpans {
    fn held(&self) -> usize {
        self.summaries.len()
            + self.placed.len()
            + self.waiting.len()
            + self.undecided.len()
            + self.deletion.len()
    }
}

/// Follows Pods' spans into the trace each belongs to; see the module docs.
#[derive(Debug)]
pub struct Assembly {
    cluster_id: String,
    node_name: String,
    /// A creation that does not end within this is released as it is.
    trace_timeout_ns: u64,
    pods: HashMap<TraceId, PodSpans>,
    /// Arrival order of the Pods in `pods`, for the bound.
    order: VecDeque<TraceId>,
    /// Pods whose deletion went out: later spans of theirs are nobody's.
    done: BoundedMap<TraceId, ()>,
    /// Event time (unix ns), the latest seen.
    now_ns: u64,
    /// Spans after a creation and outside any deletion: not exported.
    pub after_creation: u64,
    /// Pods whose held spans went out unsettled at a bound.
    pub released_at_bound: u64,
    /// The Pod the agent runs in ([`Assembly::without_pod`]).
    own_pod: Option<String>,
    /// Its spans, not exported.
    pub own_pod_spans: u64,
}

impl Assembly {
    /// Assembles the traces of cluster `cluster_id` on node `node_name`.
    pub fn new(cluster_id: String, node_name: String, trace_timeout_ns: u64) -> Self {
        Self {
            cluster_id,
            node_name,
            trace_timeout_ns,
            pods: HashMap::new(),
            order: VecDeque::new(),
            done: BoundedMap::new(MAX_PODS * 4),
            now_ns: 0,
            after_creation: 0,
            released_at_bound: 0,
            own_pod: None,
            own_pod_spans: 0,
        }
    }

    /// Exports nothing of the Pod with UID `uid`: the agent's own. Its
    /// agent starts after its creation and is stopped before its teardown,
    /// so it would see pieces of both — the kubelet reporting it Running,
    /// the DELETE — under roots no agent emits, on every agent start.
    pub fn without_pod(mut self, uid: Option<String>) -> Self {
        self.own_pod = uid;
        self
    }

    fn node_span(&self, trace: TraceId) -> SpanId {
        SpanId::of(trace, &SpanKey::Node(&self.node_name))
    }

    /// The ids of `trace`'s summaries on this agent: its root, its node span.
    fn summary_ids(&self, trace: TraceId) -> (SpanId, SpanId) {
        (SpanId::of(trace, &SpanKey::Root), self.node_span(trace))
    }

    /// Takes finished spans at event time `now_unix_ns`; returns those
    /// that go out now. Held spans go out from [`Assembly::tick`].
    pub fn admit(&mut self, spans: Vec<Span>, now_unix_ns: u64) -> Vec<Span> {
        self.now_ns = self.now_ns.max(now_unix_ns);
        let mut out = Vec::new();
        for span in spans {
            // Spans of no Pod (unattributed), and of traces made of one
            // request (a rejected or dry-run create), go out as they are.
            let Some(uid) = span.string_attribute(attr::K8S_POD_UID).map(str::to_owned) else {
                out.push(span);
                continue;
            };
            if self.own_pod.as_ref() == Some(&uid) {
                self.own_pod_spans += 1;
                continue;
            }
            if span.trace_id != TraceId::for_pod(&self.cluster_id, &uid) {
                out.push(span);
                continue;
            }
            self.place(span, uid, &mut out);
        }
        out
    }

    /// Ended traces forgotten at their bound, the oldest first: a late span
    /// of one is no longer known to come after its creation.
    pub fn forgotten(&self) -> u64 {
        self.done.evicted()
    }

    /// Time passed (unix ns of event time): what has settled.
    pub fn tick(&mut self, now_unix_ns: u64) -> Vec<Span> {
        self.now_ns = self.now_ns.max(now_unix_ns);
        self.settle(false)
    }

    /// No more spans: everything held goes out as far as it got.
    pub fn finish(&mut self) -> Vec<Span> {
        self.settle(true)
    }

    fn place(&mut self, span: Span, uid: String, out: &mut Vec<Span>) {
        let trace = span.trace_id;
        if self.done.contains_key(&trace) {
            self.after_creation += 1;
            return;
        }
        if !self.pods.contains_key(&trace) {
            if self.pods.len() >= MAX_PODS {
                if let Some(oldest) = self.order.pop_front() {
                    self.released_at_bound += 1;
                    out.extend(self.release_all(oldest));
                }
            }
            self.order.push_back(trace);
        }
        let (root, node) = self.summary_ids(trace);
        let now = self.now_ns;
        let pod = self.pods.entry(trace).or_insert_with(|| PodSpans {
            first_seen_ns: now,
            ..PodSpans::default()
        });
        if pod.name.is_none() {
            if let (Some(name), Some(namespace)) = (
                span.string_attribute(attr::K8S_POD_NAME),
                span.string_attribute(attr::K8S_NAMESPACE_NAME),
            ) {
                pod.name = Some((namespace.to_owned(), name.to_owned()));
            }
        }
        pod.uid.get_or_insert(uid);
        let what = What::of(&span);
        let role = role(&span, what);
        match role {
            Role::CreationRoot => {
                pod.rooted = true;
                pod.bound = span.string_attribute(attr::K8S_NODE_NAME).is_some();
                end_creation(pod, span.end_unix_ns, now);
            }
            Role::EndsCreation => end_creation(pod, span.end_unix_ns, now),
            Role::Teardown => {
                let start = pod.teardown_start.get_or_insert(span.start_unix_ns);
                *start = (*start).min(span.start_unix_ns);
                end_creation(pod, span.start_unix_ns, now);
            }
            Role::Other => {}
        }
        // A container's first process is the creation's last step even when
        // it execs after the kubelet reported the Pod Running: runc start
        // returns once runc init was told to exec, and under load the exec
        // can follow the status update (the summaries reach over it).
        let first_exec = what == What::ContainerStart;
        let after_end = !first_exec && pod.ended.is_some_and(|(end, _)| span.start_unix_ns > end);
        if role == Role::Teardown {
            pod.deletion_last_ns = now;
            pod.deletion.push(span);
        } else if after_end && role != Role::CreationRoot {
            pod.undecided.push((span, now));
        } else if pod.released {
            // A creation span later than the settling time allowed for:
            // its summaries went out, it follows as it is — but a summary
            // (the node span closed late) went out already, made here.
            if !pod.sent_summaries.contains(&span.span_id) {
                out.push(span);
            }
        } else if span.span_id == root || span.span_id == node {
            // One of each: a second node span of the same Pod (closed again
            // from a later call) would go out beside the first.
            if !pod
                .summaries
                .iter()
                .any(|held| held.span_id == span.span_id)
            {
                pod.summaries.push(span);
            }
        } else {
            offer(pod, span, (root, node), now, out);
        }
        if pod.held() > MAX_SPANS_PER_POD {
            self.released_at_bound += 1;
            self.order.retain(|t| *t != trace);
            out.extend(self.release_all(trace));
        }
    }

    /// Releases what has settled (everything when `all`).
    fn settle(&mut self, all: bool) -> Vec<Span> {
        let now = self.now_ns;
        let mut out = Vec::new();
        let traces: Vec<TraceId> = self.order.iter().copied().collect();
        for trace in traces {
            let summary_ids = self.summary_ids(trace);
            let Some(pod) = self.pods.get_mut(&trace) else {
                continue;
            };
            // Spans that came before the end was known and began after
            // it: their parent is a teardown span (the DELETE's storage
            // call, which ends after its etcd write) or they are later work.
            if let Some((end, _)) = pod.ended {
                let (later, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut pod.waiting)
                    .into_iter()
                    .partition(|(span, _)| span.start_unix_ns > end);
                pod.waiting = kept;
                pod.undecided.extend(later);
            }
            // Spans whose parent did not come: it is on another agent, or
            // was lost; they go out under the parent they name.
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut pod.waiting)
                .into_iter()
                .partition(|(_, came)| all || now >= came.saturating_add(SETTLE_NS));
            // One whose parent is among them goes with its parent.
            let gone_ids: HashSet<SpanId> = gone.iter().map(|(span, _)| span.span_id).collect();
            let (children, gone): (Vec<_>, Vec<_>) = gone.into_iter().partition(|(span, _)| {
                span.parent_span_id
                    .is_some_and(|parent| gone_ids.contains(&parent))
            });
            pod.waiting = kept;
            pod.waiting.extend(children);
            for (span, _) in gone {
                place_freeing(pod, unawaited(span, summary_ids.1), summary_ids, &mut out);
            }
            let creation_due = match pod.ended {
                Some((_, learned)) => now >= learned.saturating_add(SETTLE_NS),
                None => now >= pod.first_seen_ns.saturating_add(self.trace_timeout_ns),
            };
            if !pod.released && (all || creation_due) {
                release_waiting(pod, summary_ids, &mut out);
                pod.released = true;
                out.extend(summaries(pod, trace, &self.node_name));
            }
            // Spans after the creation: the deletion's if its teardown had
            // begun when they ran, else nobody's, once they have had the
            // settling time to learn of a teardown.
            let teardown = pod.teardown_start;
            let mut kept = Vec::new();
            for (span, came) in std::mem::take(&mut pod.undecided) {
                match teardown {
                    Some(start) if span.end_unix_ns >= start => {
                        pod.deletion_last_ns = now;
                        pod.deletion.push(span);
                    }
                    _ if all || now >= came.saturating_add(SETTLE_NS) => {
                        self.after_creation += 1;
                    }
                    _ => kept.push((span, came)),
                }
            }
            pod.undecided = kept;
            let deletion_due = !pod.deletion.is_empty()
                && (all || now >= pod.deletion_last_ns.saturating_add(DELETION_QUIET_NS));
            let finished = pod.released && pod.undecided.is_empty() && pod.deletion.is_empty();
            if pod.released && deletion_due {
                let pod = self.pods.remove(&trace).unwrap_or_default();
                out.extend(self.assemble_deletion(trace, pod));
                self.order.retain(|t| *t != trace);
                self.remember_done(trace);
            } else if finished && all {
                self.pods.remove(&trace);
                self.order.retain(|t| *t != trace);
            }
        }
        out
    }

    fn remember_done(&mut self, trace: TraceId) {
        self.done.insert(trace, ());
    }

    /// Everything held for `trace`, as far as it got.
    fn release_all(&mut self, trace: TraceId) -> Vec<Span> {
        let Some(mut pod) = self.pods.remove(&trace) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        release_waiting(&mut pod, self.summary_ids(trace), &mut out);
        if !pod.released {
            out.extend(summaries(&mut pod, trace, &self.node_name));
        }
        self.after_creation += pod.undecided.len() as u64;
        pod.undecided.clear();
        out.extend(self.assemble_deletion(trace, pod));
        out
    }

    /// The deletion's spans, moved into the deletion trace, as a tree
    /// under its root (emitted here when this agent is the one to).
    fn assemble_deletion(&self, creation: TraceId, mut pod: PodSpans) -> Vec<Span> {
        let mut spans = std::mem::take(&mut pod.deletion);
        let (Some(uid), false) = (pod.uid.as_deref(), spans.is_empty()) else {
            return Vec::new();
        };
        let trace = TraceId::for_pod_deletion(&self.cluster_id, uid);
        let root = SpanId::of(trace, &SpanKey::Root);
        let node = self.node_span(trace);
        let creation_root = SpanId::of(creation, &SpanKey::Root);
        let creation_node = self.node_span(creation);
        let held: HashSet<SpanId> = spans.iter().map(|span| span.span_id).collect();
        for span in &mut spans {
            span.trace_id = trace;
            span.parent_span_id = Some(match span.parent_span_id {
                Some(parent) if parent == creation_node => node,
                Some(parent) if parent != creation_root && held.contains(&parent) => parent,
                // A parent left in the creation (the container's exit
                // under StartContainer) or on another agent.
                _ if on_node(span) => node,
                _ => root,
            });
        }
        let on_this_node = spans.iter().any(on_node);
        if on_this_node {
            // Reaches over its spans below ([`nest`]).
            spans.push(Span {
                trace_id: trace,
                span_id: node,
                parent_span_id: Some(root),
                name: name::node(&self.node_name),
                kind: SpanKind::Internal,
                start_unix_ns: u64::MAX,
                end_unix_ns: 0,
                attributes: pod_attributes(&pod, &self.node_name),
                status: SpanStatus::Unset,
                links: Vec::new(),
            });
        }
        if on_this_node || (pod.rooted && !pod.bound) {
            let (namespace, name) = pod.name.clone().unwrap_or_default();
            let mut attributes = vec![
                string_attribute(attr::K8S_POD_NAME, &name),
                string_attribute(attr::K8S_NAMESPACE_NAME, &namespace),
                string_attribute(attr::K8S_POD_UID, uid),
            ];
            if on_this_node {
                attributes.push(string_attribute(attr::K8S_NODE_NAME, &self.node_name));
            }
            spans.push(Span {
                trace_id: trace,
                span_id: root,
                parent_span_id: None,
                name: name::pod_delete(&namespace, &name),
                kind: SpanKind::Internal,
                // Reaches over the deletion's spans ([`nest`]).
                start_unix_ns: u64::MAX,
                end_unix_ns: 0,
                attributes,
                status: SpanStatus::Unset,
                links: vec![SpanLink {
                    trace_id: creation,
                    span_id: creation_root,
                }],
            });
        }
        nest(&mut spans, &[node, root]);
        spans
    }
}

/// Marks the creation ended at `end_ns` (the earliest end wins), learned
/// at `now_ns`.
fn end_creation(pod: &mut PodSpans, end_ns: u64, now_ns: u64) {
    match &mut pod.ended {
        Some((end, _)) => *end = (*end).min(end_ns),
        None => pod.ended = Some((end_ns, now_ns)),
    }
}

/// A creation span goes out once its parent has: under the nearest
/// ancestor that holds it in time (a summary holds everything: it will
/// reach over it). One whose parent has not come waits; a span that goes
/// out frees those waiting for it.
fn offer(
    pod: &mut PodSpans,
    mut span: Span,
    (root, node): (SpanId, SpanId),
    now: u64,
    out: &mut Vec<Span>,
) {
    match span.parent_span_id {
        Some(parent) if parent != root && parent != node && !pod.placed.contains_key(&parent) => {
            pod.waiting.push((span, now));
            return;
        }
        Some(mut parent) => {
            let cause = parent;
            // Up the placed ancestors to one that holds the span.
            while let Some(holder) = pod.placed.get(&parent) {
                if holder.start_ns <= span.start_unix_ns && span.end_unix_ns <= holder.end_ns {
                    break;
                }
                match holder.parent {
                    Some(up) => parent = up,
                    None => break,
                }
            }
            lift(&mut span, cause, parent);
            // Past a placed ancestor that did not hold it, up to one that
            // has not come (its child went out without waiting longer for
            // it): it waits for that one as for a parent.
            if parent != root && parent != node && !pod.placed.contains_key(&parent) {
                pod.waiting.push((span, now));
                return;
            }
        }
        None => {}
    }
    place_freeing(pod, span, (root, node), out);
}

/// Every span still waiting goes out ([`unawaited`]), each freeing those
/// that waited for it.
fn release_waiting(pod: &mut PodSpans, summaries: (SpanId, SpanId), out: &mut Vec<Span>) {
    while let Some((span, _)) = pod.waiting.pop() {
        place_freeing(pod, unawaited(span, summaries.1), summaries, out);
    }
}

/// A span that stops waiting for its parent: it goes out under the parent
/// it names (on another agent), unless it was lifted there from the call it
/// belongs to (it lies outside that call) — then the node's work goes under
/// the node span `node`, which reaches over it.
fn unawaited(mut span: Span, node: SpanId) -> Span {
    if !span.links.is_empty() && on_node(&span) {
        span.parent_span_id = Some(node);
    }
    span
}

/// Sends `span` out as it is ([`place_as_is`]), then offers the spans
/// that waited for it: placed under it, or lifted to an ancestor that holds
/// them. Also for a span that stopped waiting for its own parent: its
/// children must still be held to its time (the pause process, which
/// execs after RunPodSandbox returned, under a call whose kubelet side
/// came late).
fn place_freeing(pod: &mut PodSpans, span: Span, summaries: (SpanId, SpanId), out: &mut Vec<Span>) {
    let id = span.span_id;
    place_as_is(pod, span, out);
    let (ready, still): (Vec<_>, Vec<_>) = std::mem::take(&mut pod.waiting)
        .into_iter()
        .partition(|(child, _)| child.parent_span_id == Some(id));
    pod.waiting = still;
    for (child, came) in ready {
        offer(pod, child, summaries, came, out);
    }
}

/// Sends `span` out as it is, remembering where it lies until the
/// summaries have gone out.
fn place_as_is(pod: &mut PodSpans, span: Span, out: &mut Vec<Span>) {
    if !pod.released {
        pod.placed.insert(
            span.span_id,
            Placed {
                start_ns: span.start_unix_ns,
                end_ns: span.end_unix_ns,
                parent: span.parent_span_id,
            },
        );
    }
    out.push(span);
}

/// The creation's summaries, each reaching over the spans below it: the
/// node span (made when spans hang from it and nothing closed it: the node
/// never started the Pod's workload), then the root over all.
fn summaries(pod: &mut PodSpans, trace: TraceId, node_name: &str) -> Vec<Span> {
    let root = SpanId::of(trace, &SpanKey::Root);
    let node = SpanId::of(trace, &SpanKey::Node(node_name));
    let placed = std::mem::take(&mut pod.placed);
    let mut spans = std::mem::take(&mut pod.summaries);
    let node_reach = reach(&placed, node);
    if let Some((start, end)) = node_reach {
        match spans.iter_mut().find(|span| span.span_id == node) {
            Some(span) => widen(span, start, end),
            None => {
                let attributes = pod_attributes(pod, node_name);
                spans.push(Span {
                    trace_id: trace,
                    span_id: node,
                    parent_span_id: Some(root),
                    name: name::node(node_name),
                    kind: SpanKind::Internal,
                    start_unix_ns: start,
                    end_unix_ns: end,
                    attributes,
                    // Nothing closed it: the node never started the workload.
                    status: SpanStatus::Unset,
                    links: Vec::new(),
                });
            }
        }
    }
    let node_times = spans
        .iter()
        .find(|span| span.span_id == node)
        .map(|span| (span.start_unix_ns, span.end_unix_ns));
    pod.sent_summaries = vec![root, node];
    if let Some(root_span) = spans.iter_mut().find(|span| span.span_id == root) {
        let all = placed
            .values()
            .map(|p| (p.start_ns, p.end_ns))
            .chain(node_times);
        for (start, end) in all {
            widen(root_span, start, end);
        }
    }
    spans
}

/// From the earliest start to the latest end of the placed spans below
/// `ancestor`, if any.
fn reach(placed: &HashMap<SpanId, Placed>, ancestor: SpanId) -> Option<(u64, u64)> {
    let below = |span: &Placed| {
        let mut parent = span.parent;
        // Bounded: a cycle of ids cannot loop.
        for _ in 0..=placed.len() {
            match parent {
                Some(id) if id == ancestor => return true,
                Some(id) => parent = placed.get(&id).and_then(|up| up.parent),
                None => return false,
            }
        }
        false
    };
    placed
        .values()
        .filter(|span| below(span))
        .map(|span| (span.start_ns, span.end_ns))
        .reduce(|(s, e), (start, end)| (s.min(start), e.max(end)))
}

fn widen(span: &mut Span, start: u64, end: u64) {
    span.start_unix_ns = span.start_unix_ns.min(start);
    span.end_unix_ns = span.end_unix_ns.max(end);
}

/// The Pod's identity on a span this agent makes for it.
fn pod_attributes(pod: &PodSpans, node_name: &str) -> Vec<(String, AttributeValue)> {
    let (namespace, name) = pod.name.clone().unwrap_or_default();
    vec![
        string_attribute(attr::K8S_POD_NAME, &name),
        string_attribute(attr::K8S_NAMESPACE_NAME, &namespace),
        string_attribute(attr::K8S_POD_UID, pod.uid.as_deref().unwrap_or_default()),
        string_attribute(attr::K8S_NODE_NAME, node_name),
    ]
}

/// Makes a whole trace's `spans` nest in time: the `summaries` (node span,
/// root: spans that stand for all below them) reach over their
/// descendants, and any other span outside its parent's time hangs from
/// the nearest ancestor that holds it.
fn nest(spans: &mut [Span], summaries: &[SpanId]) {
    let index: HashMap<SpanId, usize> = spans
        .iter()
        .enumerate()
        .map(|(at, span)| (span.span_id, at))
        .collect();
    // Innermost first (the node span inside the root).
    for summary in summaries {
        let Some(&at) = index.get(summary) else {
            continue;
        };
        let (mut start, mut end) = (spans[at].start_unix_ns, spans[at].end_unix_ns);
        for span in spans.iter() {
            if span.span_id != *summary && descends_from(spans, &index, span, *summary) {
                start = start.min(span.start_unix_ns);
                end = end.max(span.end_unix_ns);
            }
        }
        spans[at].start_unix_ns = start;
        spans[at].end_unix_ns = end.max(start);
    }
    for at in 0..spans.len() {
        let mut parent = spans[at].parent_span_id;
        while let Some(id) = parent {
            let Some(&p) = index.get(&id) else {
                break;
            };
            let holder = &spans[p];
            if holder.start_unix_ns <= spans[at].start_unix_ns
                && spans[at].end_unix_ns <= holder.end_unix_ns
            {
                break;
            }
            parent = holder.parent_span_id;
        }
        // No ancestor here holds it: it keeps its parent (on another agent).
        if let Some(holder) = parent.filter(|id| index.contains_key(id))
            && let Some(cause) = spans[at].parent_span_id
        {
            lift(&mut spans[at], cause, holder);
        }
    }
}

/// Hangs `span` from `holder`, an ancestor of its parent `cause` that holds
/// it in time. The cause stays as a link when they differ: a span that
/// outlasts its parent (a WAL sync that ends after etcd answered, the pause
/// process after RunPodSandbox returned) still says what it belongs to.
fn lift(span: &mut Span, cause: SpanId, holder: SpanId) {
    // The first cause only: a span lifted again (it waited for an
    // ancestor that had not come) keeps its link to the call it belongs to.
    if holder != cause && span.links.is_empty() {
        span.links.push(SpanLink {
            trace_id: span.trace_id,
            span_id: cause,
        });
    }
    span.parent_span_id = Some(holder);
}

/// Whether `span` is below `ancestor` (bounded by the number of spans, so
/// a cycle of ids cannot loop).
fn descends_from(
    spans: &[Span],
    index: &HashMap<SpanId, usize>,
    span: &Span,
    ancestor: SpanId,
) -> bool {
    let mut parent = span.parent_span_id;
    for _ in 0..spans.len() {
        match parent {
            Some(id) if id == ancestor => return true,
            Some(id) => parent = index.get(&id).and_then(|&at| spans[at].parent_span_id),
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests;
