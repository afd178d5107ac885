//! The Kubernetes components' own spans: kube-apiserver's handling of each
//! request that writes a Pod (authentication, authorization, admission, the
//! storage write), kube-scheduler's queue, scheduling cycle and binding, and
//! the kubelet's dispatch, pod sync, volume wait and status update.
//!
//! In: function probe hits ([`FuncMessage`]), REST requests decoded from the
//! wire ([`RestMessage`]), and the spans other modules made (to nest them).
//! Out: [`Span`]s.
//!
//! Calls are paired per goroutine (entry, then RET; a function re-entered
//! in the same goroutine, as the union authenticator nests itself, counts
//! once, outermost). kube-apiserver handles a request in goroutines the
//! request spawns (the timeout filter runs the rest of the chain in a new
//! goroutine, the create handler runs admission and storage in another):
//! every hit carries its goroutine's creator, so a call is tied to the
//! request whose authentication ran in an ancestor goroutine. A request is
//! exported when its REST exchange (status, user agent, route) is decoded,
//! or on its own when the wire did not give it.
//!
//! Ids follow causal keys every agent computes alike (process, goroutine and
//! entry time of a call), so an etcd client span the apiserver made inside
//! a storage call, or a CRI call the kubelet made inside a pod sync, is
//! nested under it ([`ComponentSpans::adopt`]).

use crate::correlate::span::SpanKey;

use crate::correlate::contract::attr;

use std::collections::{HashMap, VecDeque};

use tracer_common::gofunc::GoFunction;

use super::{
    pod::{Pod, string_attribute},
    span::{AttributeValue, Span, SpanId, SpanKind, TraceId},
};
use crate::{
    capture::clock::WallClock,
    decode::{
        FollowWindow, FuncMessage, RestMessage,
        functions::{PodRef, Point},
    },
};

mod pod_calls;
mod requests;

use requests::{path_pod, pod_key};

/// Bound on goroutines with open calls, and on goroutine parents known.
const MAX_GOROUTINES: usize = 65_536;
/// Bound on open calls per goroutine.
const MAX_DEPTH: usize = 64;
/// Bound on apiserver requests in flight.
const MAX_REQUESTS: usize = 4096;
/// Bound on calls remembered as parents for other spans.
const MAX_PARENTS: usize = 8192;
/// Bound on Pods remembered (queued, dispatched, syncs counted).
const MAX_PODS: usize = 16_384;
/// Goroutine generations walked from a call to its request.
const MAX_ANCESTRY: usize = 4;
/// How long a request waits for its REST exchange after its last call.
const REQUEST_WAIT_NS: u64 = 2_000_000_000;
/// A request whose exchange start and authentication differ by more than
/// this is not the same request.
const MATCH_SLACK_NS: u64 = 50_000_000;
/// How long kube-apiserver's side of a request waits for its client's side
/// (the client reads the response just after the server wrote it).
const CLIENT_WAIT_NS: u64 = 200_000_000;
/// Bound on client requests remembered, and on server sides waiting.
const MAX_EXCHANGES: usize = 1024;
/// Kubelet pod syncs (and their volume waits and status updates) exported
/// per Pod: the ones that create it; later periodic syncs are not part of
/// the creation.
const MAX_SYNCS_PER_POD: u32 = 4;

/// Kubelet calls exported for one Pod (see [`MAX_SYNCS_PER_POD`]).
#[derive(Clone, Copy, Debug, Default)]
struct SyncCounts {
    /// Pod syncs, whose volume waits go with them.
    pod_syncs: u32,
    /// Status manager writes.
    status_syncs: u32,
}

/// One finished call of a request, to be exported with it.
#[derive(Clone, Debug)]
struct RequestCall {
    entry: FuncMessage,
    ret: FuncMessage,
}

/// An apiserver request, from its authentication on
/// ([`ApiserverProbes::All`](crate::capture::kube_probes::ApiserverProbes)),
/// or from the first Pod registry function it reached
/// (`ApiserverProbes::Pods`).
#[derive(Clone, Debug)]
struct Request {
    tgid: u32,
    goid: u64,
    start_ns: u64,
    last_ns: u64,
    remote_addr: Option<String>,
    path: RequestPath,
    calls: Vec<RequestCall>,
    /// The Pod its storage write named (`/pods/NS/NAME`), or the Pod its
    /// registry call named.
    stored: Option<(String, String)>,
    /// Started by a Pod registry function: a write of a Pod, whose phases
    /// before the registry are one span from the wire's start.
    registry: bool,
}

impl Request {
    fn key(&self) -> String {
        SpanKey::ApiserverRequest {
            tgid: self.tgid,
            goid: self.goid,
            start_ns: self.start_ns,
        }
        .encode()
    }

    /// The key of a registry request's span before the registry (from the
    /// wire's start).
    fn before_registry_key(&self) -> String {
        format!("{}/before-registry", self.key())
    }

    /// The key of a create's span after its Pod's validation (admission
    /// (validating) and the storage write).
    fn after_validation_key(&self) -> String {
        format!("{}/after-validation", self.key())
    }
}

/// What a request's path on the wire must be.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RequestPath {
    /// The path itself: the authenticator's, or built from the Pod the
    /// registry named (a create, a binding).
    Exact(String),
    /// Its tail, `/pods/NAME/status`: a status update names its Pod but
    /// not the Pod's namespace.
    Tail(String),
}

impl RequestPath {
    fn matches(&self, path: &str) -> bool {
        match self {
            RequestPath::Exact(exact) => path == exact,
            RequestPath::Tail(tail) => path.ends_with(tail.as_str()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            RequestPath::Exact(path) | RequestPath::Tail(path) => path,
        }
    }

    /// Namespace and name of the Pod an exact path names.
    fn pod(&self) -> Option<(String, Option<String>)> {
        match self {
            RequestPath::Exact(path) => path_pod(path),
            RequestPath::Tail(_) => None,
        }
    }
}

/// A client's side of a REST request (kube-scheduler's binding, the
/// kubelet's status update), as exported.
#[derive(Clone, Debug)]
struct ClientSide {
    rest: RestMessage,
    trace: TraceId,
    span_id: SpanId,
}

/// kube-apiserver's side of a request, waiting for its client's side.
#[derive(Clone, Debug)]
struct WaitingServer {
    request: Option<Request>,
    rest: RestMessage,
    deadline_ns: u64,
}

/// A call other spans may nest under.
#[derive(Clone, Debug)]
struct ParentCall {
    function: GoFunction,
    /// The Pod's UID, or its namespace (when known: a status update names
    /// only its Pod) and name (storage and registry calls).
    uid: Option<String>,
    name: Option<(Option<String>, String)>,
    start_ns: u64,
    end_ns: Option<u64>,
    key: String,
}

/// Builds the components' spans.
#[derive(Debug)]
pub struct ComponentSpans {
    clock: WallClock,
    cluster_id: String,
    node_name: String,
    /// Entries of calls not returned yet, per goroutine (innermost last).
    open: HashMap<(u32, u64), Vec<FuncMessage>>,
    creators: HashMap<(u32, u64), u64>,
    creator_order: VecDeque<(u32, u64)>,
    requests: HashMap<(u32, u64), Request>,
    parents: VecDeque<ParentCall>,
    /// Webhook calls made before their request was known (a create's
    /// mutating webhooks precede the Pod registry), oldest first: claimed
    /// by the request its goroutine starts.
    unclaimed: VecDeque<RequestCall>,
    /// Pods the scheduler queued (UID → when).
    queued: HashMap<String, u64>,
    /// Pods handed to the kubelet (UID → when).
    dispatched: HashMap<String, u64>,
    /// Kubelet syncs and status updates exported per Pod, for the Pods
    /// whose addition to the kubelet this agent saw; oldest first in
    /// `syncs_order`.
    syncs: HashMap<String, SyncCounts>,
    syncs_order: VecDeque<String>,
    /// Namespace and name of Pods by UID, from the probes that read them.
    names: HashMap<String, (String, String)>,
    now_ns: u64,
    /// Client sides of REST requests exported lately.
    clients: VecDeque<ClientSide>,
    /// Server sides waiting for their client's.
    waiting_servers: Vec<WaitingServer>,
    /// Create requests exported since last taken: the Pod's UID and when
    /// the request reached kube-apiserver (its trace's true start).
    create_requests: Vec<(String, u64)>,
    /// Which Pods' creations the agent follows: those created after it
    /// started.
    window: FollowWindow,
    /// Calls and requests about Pods whose creation began before the agent
    /// started, and so is not followed: kubelet calls (syncs, volume waits,
    /// status updates) of Pods whose addition to the kubelet this agent did
    /// not see, and requests about Pods created before it (their status
    /// updates, their deletion). No span.
    pub not_followed: u64,
    /// Requests whose Pod stayed unknown (no name or UID came back): counted,
    /// not exported.
    pub unattributed: u64,
    /// Calls, requests or Pods not kept because a bound was reached, and
    /// returns without their entry.
    pub dropped: u64,
}

/// Where a Pod's UID is looked up by namespace and name (the etcd writes
/// taught it).
pub type UidLookup<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

impl ComponentSpans {
    /// Spans of cluster `cluster_id`, seen by the agent of node `node_name`,
    /// of the Pods created in `window`.
    pub fn new(
        clock: WallClock,
        cluster_id: String,
        node_name: String,
        window: FollowWindow,
    ) -> Self {
        Self {
            clock,
            cluster_id,
            node_name,
            open: HashMap::new(),
            creators: HashMap::new(),
            creator_order: VecDeque::new(),
            requests: HashMap::new(),
            parents: VecDeque::new(),
            unclaimed: VecDeque::new(),
            queued: HashMap::new(),
            dispatched: HashMap::new(),
            syncs: HashMap::new(),
            syncs_order: VecDeque::new(),
            names: HashMap::new(),
            now_ns: 0,
            create_requests: Vec::new(),
            clients: VecDeque::new(),
            waiting_servers: Vec::new(),
            window,
            not_followed: 0,
            unattributed: 0,
            dropped: 0,
        }
    }

    /// One entry or return of a probed function.
    pub fn on_func(&mut self, call: FuncMessage) -> Vec<Span> {
        self.now_ns = self.now_ns.max(call.ids.ts_ns);
        let goroutine = (call.ids.tgid, call.goid);
        self.learn_creator(goroutine, call.parent_goid);
        match call.point {
            Point::Entry => {
                self.on_entry(call);
                Vec::new()
            }
            Point::Return => {
                let Some(stack) = self.open.get_mut(&goroutine) else {
                    self.dropped += 1;
                    return Vec::new();
                };
                let Some(position) = stack
                    .iter()
                    .rposition(|open| open.function == call.function)
                else {
                    self.dropped += 1;
                    return Vec::new();
                };
                // Calls above it lost their return (a missed event).
                let entry = stack.drain(position..).next();
                let nested = stack.iter().any(|open| open.function == call.function);
                if stack.is_empty() {
                    self.open.remove(&goroutine);
                }
                match entry {
                    Some(entry) if !nested => self.on_call(entry, call),
                    _ => Vec::new(),
                }
            }
        }
    }

    fn learn_creator(&mut self, goroutine: (u32, u64), creator: u64) {
        if creator == 0 || self.creators.contains_key(&goroutine) {
            return;
        }
        if self.creator_order.len() >= MAX_GOROUTINES {
            if let Some(oldest) = self.creator_order.pop_front() {
                self.creators.remove(&oldest);
            }
        }
        self.creators.insert(goroutine, creator);
        self.creator_order.push_back(goroutine);
    }

    fn on_entry(&mut self, entry: FuncMessage) {
        let goroutine = (entry.ids.tgid, entry.goid);
        if let Some(PodRef {
            uid,
            namespace: Some(namespace),
            name: Some(name),
        }) = &entry.pod
        {
            if self.names.len() < MAX_PODS || self.names.contains_key(uid) {
                self.names
                    .insert(uid.clone(), (namespace.clone(), name.clone()));
            } else {
                self.dropped += 1;
            }
        }
        match entry.function {
            GoFunction::SchedulerEnqueue => {
                if let Some(pod) = &entry.pod {
                    remember(
                        &mut self.queued,
                        &mut self.dropped,
                        &pod.uid,
                        entry.ids.ts_ns,
                    );
                }
                return;
            }
            GoFunction::KubeletPodAdditions => {
                if let Some(pod) = &entry.pod {
                    remember(
                        &mut self.dispatched,
                        &mut self.dropped,
                        &pod.uid,
                        entry.ids.ts_ns,
                    );
                    self.count_syncs_of(&pod.uid);
                }
                return;
            }
            GoFunction::ApiserverAuthenticate => {
                let outermost = !self.open.get(&goroutine).is_some_and(|stack| {
                    stack
                        .iter()
                        .any(|open| open.function == GoFunction::ApiserverAuthenticate)
                });
                let writes_pods = entry.path.as_deref().and_then(path_pod).is_some();
                if outermost && writes_pods && !self.requests.contains_key(&goroutine) {
                    if self.requests.len() >= MAX_REQUESTS {
                        self.dropped += 1;
                    } else {
                        self.requests.insert(
                            goroutine,
                            Request {
                                tgid: entry.ids.tgid,
                                goid: entry.goid,
                                start_ns: entry.ids.ts_ns,
                                last_ns: entry.ids.ts_ns,
                                remote_addr: entry.remote_addr.clone(),
                                path: RequestPath::Exact(entry.path.clone().unwrap_or_default()),
                                calls: Vec::new(),
                                stored: None,
                                registry: false,
                            },
                        );
                    }
                }
            }
            GoFunction::ApiserverPodValidate
            | GoFunction::ApiserverPodBinding
            | GoFunction::ApiserverPodStatusUpdate => self.registry_entry(&entry),
            GoFunction::ApiserverStorageCreate | GoFunction::ApiserverStorageUpdate => {
                if let (Some(name), Some(request)) = (
                    entry.text.as_deref().and_then(pod_key),
                    self.request_of(goroutine),
                ) {
                    let key = call_key(&entry);
                    if let Some(request) = self.requests.get_mut(&request) {
                        request.stored = Some(name.clone());
                    }
                    self.remember_parent(ParentCall {
                        function: entry.function,
                        uid: None,
                        name: Some((Some(name.0), name.1)),
                        start_ns: entry.ids.ts_ns,
                        end_ns: None,
                        key,
                    });
                }
            }
            GoFunction::SchedulerBind
            | GoFunction::KubeletSyncPod
            | GoFunction::KubeletStatusSync => {
                if let Some(pod) = entry.pod.as_ref().filter(|pod| {
                    entry.function == GoFunction::SchedulerBind || self.addition_seen(&pod.uid)
                }) {
                    self.remember_parent(ParentCall {
                        function: entry.function,
                        uid: Some(pod.uid.clone()),
                        name: None,
                        start_ns: entry.ids.ts_ns,
                        end_ns: None,
                        key: call_key(&entry),
                    });
                }
            }
            _ => {}
        }
        if !self.open.contains_key(&goroutine) && self.open.len() >= MAX_GOROUTINES {
            self.dropped += 1;
            return;
        }
        let stack = self.open.entry(goroutine).or_default();
        if stack.len() >= MAX_DEPTH {
            self.dropped += 1;
            return;
        }
        stack.push(entry);
    }

    /// A Pod registry function was entered: the request it serves begins
    /// here, unless an earlier call of the goroutine began it. Its binding
    /// and status update hold the etcd write they make.
    fn registry_entry(&mut self, entry: &FuncMessage) {
        let goroutine = (entry.ids.tgid, entry.goid);
        let (path, stored) = match (entry.function, &entry.path, &entry.text) {
            (GoFunction::ApiserverPodStatusUpdate, _, Some(name)) => {
                (RequestPath::Tail(format!("/pods/{name}/status")), None)
            }
            (_, Some(path), _) => {
                let stored = path_pod(path).and_then(|(ns, name)| {
                    let name = name.or_else(|| entry.pod.as_ref()?.name.clone())?;
                    Some((ns, name))
                });
                (RequestPath::Exact(path.clone()), stored)
            }
            _ => return,
        };
        if entry.function != GoFunction::ApiserverPodValidate {
            self.remember_parent(ParentCall {
                function: entry.function,
                uid: None,
                name: match (&path, &stored) {
                    (_, Some((ns, name))) => Some((Some(ns.clone()), name.clone())),
                    (RequestPath::Tail(_), None) => entry.text.clone().map(|name| (None, name)),
                    _ => None,
                },
                start_ns: entry.ids.ts_ns,
                end_ns: None,
                key: call_key(entry),
            });
        }
        if self.request_of(goroutine).is_some() {
            return;
        }
        if self.requests.len() >= MAX_REQUESTS {
            self.dropped += 1;
            return;
        }
        // Webhook calls this goroutine made before (a create's mutating
        // webhooks) belong to the request.
        let (calls, others): (Vec<RequestCall>, Vec<RequestCall>) =
            std::mem::take(&mut self.unclaimed)
                .into_iter()
                .partition(|call| (call.entry.ids.tgid, call.entry.goid) == goroutine);
        self.unclaimed = others.into();
        self.requests.insert(
            goroutine,
            Request {
                tgid: entry.ids.tgid,
                goid: entry.goid,
                start_ns: entry.ids.ts_ns,
                last_ns: entry.ids.ts_ns,
                remote_addr: None,
                path,
                calls,
                stored,
                registry: true,
            },
        );
    }

    /// The request (by its authentication's goroutine) a goroutine works
    /// for: itself or an ancestor within [`MAX_ANCESTRY`] generations.
    fn request_of(&self, goroutine: (u32, u64)) -> Option<(u32, u64)> {
        let mut current = goroutine;
        for _ in 0..=MAX_ANCESTRY {
            if self.requests.contains_key(&current) {
                return Some(current);
            }
            current = (current.0, *self.creators.get(&current)?);
        }
        None
    }

    /// The kubelet was handed Pod `uid`: its creation on this node begins,
    /// and its syncs and status updates are counted from here. A Pod the
    /// kubelet ran before the agent started has no such start: its resyncs
    /// and teardown are not part of a creation this agent follows. The
    /// oldest Pod's counts make room at the bound: its creation ended long
    /// before.
    fn count_syncs_of(&mut self, uid: &str) {
        if self.addition_seen(uid) {
            return;
        }
        if self.syncs_order.len() >= MAX_PODS {
            if let Some(oldest) = self.syncs_order.pop_front() {
                self.syncs.remove(&oldest);
            }
        }
        self.syncs.insert(uid.to_owned(), SyncCounts::default());
        self.syncs_order.push_back(uid.to_owned());
    }

    /// Whether `rest` is about a Pod created before the agent started
    /// (counted): its creation was not followed, nor is its life after.
    fn about_a_pod_before_start(&mut self, rest: &RestMessage) -> bool {
        let before = rest
            .pod
            .as_ref()
            .and_then(|pod| pod.created_unix_s)
            .is_some_and(|created| self.window.created_before_start(created));
        if before {
            self.not_followed += 1;
        }
        before
    }

    /// Whether this agent saw the kubelet handed Pod `uid`.
    fn addition_seen(&self, uid: &str) -> bool {
        self.syncs.contains_key(uid)
    }

    fn remember_parent(&mut self, parent: ParentCall) {
        if self.parents.len() >= MAX_PARENTS {
            self.parents.pop_front();
        }
        self.parents.push_back(parent);
    }

    fn close_parent(&mut self, key: &str, end_ns: u64) {
        if let Some(parent) = self.parents.iter_mut().rev().find(|p| p.key == key) {
            parent.end_ns = Some(end_ns);
        }
    }

    /// A call returned (the outermost of its function in its goroutine).
    fn on_call(&mut self, entry: FuncMessage, ret: FuncMessage) -> Vec<Span> {
        let goroutine = (entry.ids.tgid, entry.goid);
        match entry.function {
            GoFunction::ApiserverAuthenticate
            | GoFunction::ApiserverAuthorize
            | GoFunction::ApiserverAdmit
            | GoFunction::ApiserverValidate
            | GoFunction::ApiserverMutatingWebhook
            | GoFunction::ApiserverValidatingWebhook
            | GoFunction::ApiserverStorageCreate
            | GoFunction::ApiserverStorageUpdate
            | GoFunction::ApiserverPodValidate
            | GoFunction::ApiserverPodBinding
            | GoFunction::ApiserverPodStatusUpdate => {
                if matches!(
                    entry.function,
                    GoFunction::ApiserverStorageCreate
                        | GoFunction::ApiserverStorageUpdate
                        | GoFunction::ApiserverPodBinding
                        | GoFunction::ApiserverPodStatusUpdate
                ) {
                    self.close_parent(&call_key(&entry), ret.ids.ts_ns);
                }
                match self
                    .request_of(goroutine)
                    .and_then(|key| self.requests.get_mut(&key))
                {
                    Some(request) => {
                        request.last_ns = request.last_ns.max(ret.ids.ts_ns);
                        // A create's admission (validating) and storage
                        // follow its Pod's validation: the etcd write nests
                        // under the span they share (`requests::AFTER_VALIDATION`).
                        let stored = (entry.function == GoFunction::ApiserverPodValidate
                            && request.registry)
                            .then(|| {
                                (
                                    request.after_validation_key(),
                                    request.stored.clone(),
                                    ret.ids.ts_ns,
                                )
                            });
                        if request.calls.len() < MAX_DEPTH {
                            request.calls.push(RequestCall { entry, ret });
                        } else {
                            self.dropped += 1;
                        }
                        if let Some((key, Some((ns, name)), start_ns)) = stored {
                            self.remember_parent(ParentCall {
                                function: GoFunction::ApiserverPodValidate,
                                uid: None,
                                name: Some((Some(ns), name)),
                                start_ns,
                                end_ns: None,
                                key,
                            });
                        }
                    }
                    None if matches!(
                        entry.function,
                        GoFunction::ApiserverMutatingWebhook
                            | GoFunction::ApiserverValidatingWebhook
                    ) =>
                    {
                        if self.unclaimed.len() >= MAX_EXCHANGES {
                            self.unclaimed.pop_front();
                            self.dropped += 1;
                        }
                        self.unclaimed.push_back(RequestCall { entry, ret });
                    }
                    None => {}
                }
                Vec::new()
            }
            GoFunction::SchedulerCycle => self.scheduling_cycle(&entry, &ret),
            GoFunction::SchedulerBind
            | GoFunction::KubeletSyncPod
            | GoFunction::KubeletVolumeWait
            | GoFunction::KubeletStatusSync => {
                let key = call_key(&entry);
                self.close_parent(&key, ret.ids.ts_ns);
                self.pod_call(&entry, &ret)
            }
            GoFunction::SchedulerEnqueue | GoFunction::KubeletPodAdditions => Vec::new(),
        }
    }

    /// The Pod of a component's own struct, named by an earlier probe when
    /// this one read only the UID.
    fn pod(&self, pod: &PodRef) -> Pod {
        let (namespace, name) = match (&pod.namespace, &pod.name) {
            (Some(namespace), Some(name)) => (namespace.as_str(), name.as_str()),
            _ => self
                .names
                .get(&pod.uid)
                .map_or(("", ""), |(ns, name)| (ns.as_str(), name.as_str())),
        };
        Pod::new(&self.cluster_id, namespace, name, &pod.uid)
    }

    /// The key of a remembered call of `function` on `pod` that contains
    /// `[start, end]` (monotonic ns).
    fn parent_containing(
        &self,
        function: GoFunction,
        pod: &Pod,
        start_ns: u64,
        end_ns: u64,
    ) -> Option<String> {
        self.parents
            .iter()
            .rev()
            .find(|parent| {
                parent.function == function
                    && parent.uid.as_deref() == Some(pod.uid.as_str())
                    && parent.start_ns <= start_ns
                    && parent.end_ns.is_none_or(|end| end >= end_ns)
            })
            .map(|parent| parent.key.clone())
    }

    /// Nests a span another module made under the component call it
    /// happened in, on this agent: kube-apiserver's etcd client call under
    /// the storage write that made it, the kubelet's CRI call under the pod
    /// sync that made it.
    pub fn adopt(&self, span: &mut Span) {
        if span.kind != SpanKind::Client {
            return;
        }
        let (Some(namespace), Some(name)) = (
            span.string_attribute(attr::K8S_NAMESPACE_NAME),
            span.string_attribute(attr::K8S_POD_NAME),
        ) else {
            return;
        };
        let uid = span.string_attribute(attr::K8S_POD_UID);
        let etcd = span.string_attribute(attr::DB_SYSTEM_NAME) == Some("etcd");
        let cri = span
            .string_attribute(attr::RPC_SERVICE)
            .is_some_and(|service| service.starts_with("runtime.v1."));
        let start = self.clock.monotonic_ns(span.start_unix_ns);
        let end = self.clock.monotonic_ns(span.end_unix_ns);
        let found = self.parents.iter().rev().find(|parent| {
            let contains = parent.start_ns <= start && parent.end_ns.is_none_or(|e| e >= end);
            let same_pod = if etcd {
                matches!(
                    parent.function,
                    GoFunction::ApiserverStorageCreate
                        | GoFunction::ApiserverStorageUpdate
                        | GoFunction::ApiserverPodValidate
                        | GoFunction::ApiserverPodBinding
                        | GoFunction::ApiserverPodStatusUpdate
                ) && parent.name.as_ref().is_some_and(|(ns, n)| {
                    ns.as_deref().is_none_or(|ns| ns == namespace) && n == name
                })
            } else if cri {
                parent.function == GoFunction::KubeletSyncPod
                    && uid.is_some()
                    && parent.uid.as_deref() == uid
            } else {
                false
            };
            contains && same_pod
        });
        if let Some(parent) = found {
            span.parent_span_id = Some(SpanId::for_key(span.trace_id, parent.key.as_bytes()));
        }
    }
}

/// The span key of a call: function, process, goroutine and entry time —
/// what every span of the call, and every span nested under it, derives
/// its id from.
/// `podtrace.k8s.offsets = derived` on the spans of a probe whose offsets
/// were read from the binary (a release outside the table): the reader of
/// the trace knows the values come from a layout not checked against that
/// release's DWARF.
fn derived_offsets(entry: &FuncMessage) -> Option<(String, AttributeValue)> {
    entry
        .derived
        .then(|| string_attribute(attr::K8S_OFFSETS, "derived"))
}

/// The key of a probed call's span, encoded (kept while its parent or
/// children are awaited).
fn call_key(entry: &FuncMessage) -> String {
    go_call(entry).encode()
}

fn go_call(entry: &FuncMessage) -> SpanKey<'static> {
    SpanKey::GoCall {
        function: entry.function,
        tgid: entry.ids.tgid,
        goid: entry.goid,
        ts_ns: entry.ids.ts_ns,
    }
}

fn remember(map: &mut HashMap<String, u64>, dropped: &mut u64, uid: &str, ts_ns: u64) {
    if map.len() >= MAX_PODS && !map.contains_key(uid) {
        *dropped += 1;
        return;
    }
    map.entry(uid.to_owned()).or_insert(ts_ns);
}

#[cfg(test)]
mod tests;
