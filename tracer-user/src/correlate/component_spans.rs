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

use std::collections::{HashMap, VecDeque};

use tracer_common::gofunc::GoFunction;

use super::{
    pod::{Pod, int_attribute, string_attribute},
    span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, TraceId},
};
use crate::{
    capture::clock::WallClock,
    decode::{
        FuncMessage, RestMessage,
        functions::{Decision, PodRef, Point},
        grpc_calls::Side,
    },
};

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

/// A call between its entry and return.
#[derive(Clone, Debug)]
struct OpenCall {
    entry: FuncMessage,
}

/// One finished call of a request, to be exported with it.
#[derive(Clone, Debug)]
struct RequestCall {
    entry: FuncMessage,
    ret: FuncMessage,
}

/// An apiserver request, from its authentication on.
#[derive(Clone, Debug)]
struct Request {
    tgid: u32,
    goid: u64,
    start_ns: u64,
    last_ns: u64,
    remote_addr: Option<String>,
    path: String,
    calls: Vec<RequestCall>,
    /// The Pod its storage write named (`/pods/NS/NAME`).
    stored: Option<(String, String)>,
}

impl Request {
    fn key(&self) -> String {
        format!(
            "apiserver/request/{}/{}/{}",
            self.tgid, self.goid, self.start_ns
        )
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
    /// The Pod's UID, or its namespace and name (storage calls).
    uid: Option<String>,
    name: Option<(String, String)>,
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
    open: HashMap<(u32, u64), Vec<OpenCall>>,
    creators: HashMap<(u32, u64), u64>,
    creator_order: VecDeque<(u32, u64)>,
    requests: HashMap<(u32, u64), Request>,
    parents: VecDeque<ParentCall>,
    /// Pods the scheduler queued (UID → when).
    queued: HashMap<String, u64>,
    /// Pods handed to the kubelet (UID → when).
    dispatched: HashMap<String, u64>,
    /// Kubelet syncs and status updates exported per Pod.
    syncs: HashMap<(String, GoFunction), u32>,
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
    /// Spans exported without their Pod (a trace of their Pod's name).
    pub unattributed: u64,
    /// Calls, requests or Pods not kept because a bound was reached, and
    /// returns without their entry.
    pub dropped: u64,
}

/// Where a Pod's UID is looked up by namespace and name (the etcd writes
/// taught it).
pub type UidLookup<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

impl ComponentSpans {
    /// Spans of cluster `cluster_id`, seen by the agent of node `node_name`.
    pub fn new(clock: WallClock, cluster_id: String, node_name: String) -> Self {
        Self {
            clock,
            cluster_id,
            node_name,
            open: HashMap::new(),
            creators: HashMap::new(),
            creator_order: VecDeque::new(),
            requests: HashMap::new(),
            parents: VecDeque::new(),
            queued: HashMap::new(),
            dispatched: HashMap::new(),
            syncs: HashMap::new(),
            names: HashMap::new(),
            now_ns: 0,
            create_requests: Vec::new(),
            clients: VecDeque::new(),
            waiting_servers: Vec::new(),
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
                    .rposition(|open| open.entry.function == call.function)
                else {
                    self.dropped += 1;
                    return Vec::new();
                };
                // Calls above it lost their return (a missed event).
                let entry = stack.drain(position..).next().map(|open| open.entry);
                let nested = stack
                    .iter()
                    .any(|open| open.entry.function == call.function);
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
                }
                return;
            }
            GoFunction::ApiserverAuthenticate => {
                let outermost = !self.open.get(&goroutine).is_some_and(|stack| {
                    stack
                        .iter()
                        .any(|open| open.entry.function == GoFunction::ApiserverAuthenticate)
                });
                let writes_pods = entry.path.as_deref().is_some_and(is_pod_path);
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
                                path: entry.path.clone().unwrap_or_default(),
                                calls: Vec::new(),
                                stored: None,
                            },
                        );
                    }
                }
            }
            GoFunction::ApiserverStorageCreate | GoFunction::ApiserverStorageUpdate => {
                if let (Some(name), Some(request)) = (
                    entry.text.as_deref().and_then(pod_key),
                    self.request_of(goroutine),
                ) {
                    let key = format!(
                        "apiserver/storage/{}/{}/{}",
                        entry.ids.tgid, entry.goid, entry.ids.ts_ns
                    );
                    if let Some(request) = self.requests.get_mut(&request) {
                        request.stored = Some(name.clone());
                    }
                    self.remember_parent(ParentCall {
                        function: entry.function,
                        uid: None,
                        name: Some(name),
                        start_ns: entry.ids.ts_ns,
                        end_ns: None,
                        key,
                    });
                }
            }
            GoFunction::SchedulerBind
            | GoFunction::KubeletSyncPod
            | GoFunction::KubeletStatusSync => {
                if let Some(pod) = &entry.pod {
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
        stack.push(OpenCall { entry });
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
            | GoFunction::ApiserverStorageUpdate => {
                if matches!(
                    entry.function,
                    GoFunction::ApiserverStorageCreate | GoFunction::ApiserverStorageUpdate
                ) {
                    self.close_parent(
                        &format!(
                            "apiserver/storage/{}/{}/{}",
                            entry.ids.tgid, entry.goid, entry.ids.ts_ns
                        ),
                        ret.ids.ts_ns,
                    );
                }
                if let Some(request) = self
                    .request_of(goroutine)
                    .and_then(|key| self.requests.get_mut(&key))
                {
                    request.last_ns = request.last_ns.max(ret.ids.ts_ns);
                    if request.calls.len() < MAX_DEPTH {
                        request.calls.push(RequestCall { entry, ret });
                    } else {
                        self.dropped += 1;
                    }
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

    fn scheduling_cycle(&mut self, entry: &FuncMessage, ret: &FuncMessage) -> Vec<Span> {
        let Some(pod) = entry.pod.as_ref().map(|pod| self.pod(pod)) else {
            self.dropped += 1;
            return Vec::new();
        };
        let mut spans = Vec::new();
        let root = SpanId::well_known(pod.trace, "root");
        if let Some(queued) = self.queued.remove(&pod.uid) {
            let mut attributes = pod.attributes();
            attributes.push(string_attribute("k8s.component", "kube-scheduler"));
            spans.push(Span {
                trace_id: pod.trace,
                span_id: SpanId::for_key(
                    pod.trace,
                    format!("scheduler/queue/{}", call_key(entry)).as_bytes(),
                ),
                parent_span_id: Some(root),
                name: "scheduler queue".to_owned(),
                kind: SpanKind::Internal,
                start_unix_ns: self.clock.unix_ns(queued),
                end_unix_ns: self.clock.unix_ns(entry.ids.ts_ns),
                attributes,
                status: SpanStatus::Unset,
            });
        }
        let mut attributes = pod.attributes();
        attributes.push(string_attribute("k8s.component", "kube-scheduler"));
        if let Some((evaluated, feasible)) = ret.nodes {
            attributes.push(int_attribute(
                "podtrace.k8s.scheduling.evaluated_nodes",
                evaluated as i64,
            ));
            attributes.push(int_attribute(
                "podtrace.k8s.scheduling.feasible_nodes",
                feasible as i64,
            ));
        }
        let status = if ret.failed == Some(true) {
            attributes.push(string_attribute(
                "podtrace.k8s.scheduling.result",
                "unschedulable",
            ));
            SpanStatus::Error("no node fits the Pod (the scheduler's reason is in the Pod's PodScheduled condition)".to_owned())
        } else {
            if let Some(node) = &ret.text {
                attributes.push(string_attribute("k8s.node.name", node));
            }
            attributes.push(string_attribute(
                "podtrace.k8s.scheduling.result",
                "scheduled",
            ));
            SpanStatus::Unset
        };
        spans.push(self.call_span(
            &pod,
            entry,
            ret,
            root,
            "scheduler scheduling cycle",
            attributes,
            status,
        ));
        spans
    }

    /// The span of one call of a component, from its entry to its return.
    #[allow(
        clippy::too_many_arguments,
        reason = "one span's fields, named at the call"
    )]
    fn call_span(
        &self,
        pod: &Pod,
        entry: &FuncMessage,
        ret: &FuncMessage,
        parent: SpanId,
        name: &str,
        attributes: Vec<(String, AttributeValue)>,
        status: SpanStatus,
    ) -> Span {
        Span {
            trace_id: pod.trace,
            span_id: SpanId::for_key(pod.trace, call_key(entry).as_bytes()),
            parent_span_id: Some(parent),
            name: name.to_owned(),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(entry.ids.ts_ns),
            end_unix_ns: self.clock.unix_ns(ret.ids.ts_ns),
            attributes,
            status,
        }
    }

    /// The scheduler's bind, and the kubelet's syncs, volume waits and
    /// status updates of one Pod.
    fn pod_call(&mut self, entry: &FuncMessage, ret: &FuncMessage) -> Vec<Span> {
        let Some(pod) = entry.pod.as_ref().map(|pod| self.pod(pod)) else {
            self.dropped += 1;
            return Vec::new();
        };
        let kubelet = entry.function != GoFunction::SchedulerBind;
        if kubelet {
            let counted = match entry.function {
                GoFunction::KubeletVolumeWait => GoFunction::KubeletSyncPod,
                other => other,
            };
            let count = self.syncs.entry((pod.uid.clone(), counted)).or_default();
            if entry.function != GoFunction::KubeletVolumeWait {
                *count += 1;
            }
            if *count > MAX_SYNCS_PER_POD {
                return Vec::new();
            }
            if self.syncs.len() > MAX_PODS {
                self.syncs.clear();
                self.dropped += 1;
            }
        }
        let mut spans = Vec::new();
        let parent = if kubelet {
            SpanId::well_known(pod.trace, &format!("node/{}", self.node_name))
        } else {
            SpanId::well_known(pod.trace, "root")
        };
        let mut attributes = pod.attributes();
        attributes.push(string_attribute(
            "k8s.component",
            if kubelet { "kubelet" } else { "kube-scheduler" },
        ));
        let name = match entry.function {
            GoFunction::SchedulerBind => {
                if let Some(node) = &entry.text {
                    attributes.push(string_attribute("k8s.node.name", node));
                }
                "scheduler bind"
            }
            GoFunction::KubeletSyncPod => {
                if let Some(dispatched) = self.dispatched.remove(&pod.uid) {
                    spans.push(Span {
                        trace_id: pod.trace,
                        span_id: SpanId::for_key(
                            pod.trace,
                            format!("kubelet/dispatch/{}", call_key(entry)).as_bytes(),
                        ),
                        parent_span_id: Some(parent),
                        name: "kubelet pod dispatch".to_owned(),
                        kind: SpanKind::Internal,
                        start_unix_ns: self.clock.unix_ns(dispatched),
                        end_unix_ns: self.clock.unix_ns(entry.ids.ts_ns),
                        attributes: attributes.clone(),
                        status: SpanStatus::Unset,
                    });
                }
                "kubelet pod sync"
            }
            GoFunction::KubeletVolumeWait => "kubelet volume wait",
            _ => "kubelet status update",
        };
        let status = match ret.failed {
            Some(true) => SpanStatus::Error(format!("{name} returned an error")),
            _ => SpanStatus::Unset,
        };
        let parent = match entry.function {
            // A volume wait happens inside a sync of the same goroutine.
            GoFunction::KubeletVolumeWait => self
                .parent_containing(
                    GoFunction::KubeletSyncPod,
                    &pod,
                    entry.ids.ts_ns,
                    ret.ids.ts_ns,
                )
                .map_or(parent, |key| SpanId::for_key(pod.trace, key.as_bytes())),
            _ => parent,
        };
        spans.push(self.call_span(&pod, entry, ret, parent, name, attributes, status));
        spans
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

    /// A REST request decoded from the wire. kube-apiserver's side is the
    /// request span of the calls probed in it, child of the client's side
    /// when this agent sees the client (the same HTTP/2 stream on the same
    /// path); the client's side is a client span under the component call
    /// that made it.
    pub fn on_rest(&mut self, rest: &RestMessage, uids: UidLookup<'_>) -> Vec<Span> {
        let (Some(start), Some(end)) = (rest.start_ts_ns, rest.end_ts_ns) else {
            self.dropped += 1;
            return Vec::new();
        };
        self.now_ns = self.now_ns.max(end);
        if rest.side == Side::Client {
            return self.client_side(rest, uids);
        }
        let matched = self
            .requests
            .iter()
            .filter(|(_, request)| {
                request.tgid == rest.conn.tgid
                    && request.path == rest.path
                    && request.start_ns + MATCH_SLACK_NS >= start
                    && request.start_ns <= end
            })
            .min_by_key(|(_, request)| request.start_ns)
            .map(|(key, _)| *key);
        let request = matched.and_then(|key| self.requests.remove(&key));
        if let Some(client) = self.client_of(rest).cloned() {
            return self.request_spans(request, Some(rest), Some(&client), uids);
        }
        if self.waiting_servers.len() >= MAX_EXCHANGES {
            self.dropped += 1;
            return self.request_spans(request, Some(rest), None, uids);
        }
        self.waiting_servers.push(WaitingServer {
            request,
            rest: rest.clone(),
            deadline_ns: end + CLIENT_WAIT_NS,
        });
        Vec::new()
    }

    /// The client's side already seen of a server's side: same stream and
    /// path, overlapping in time.
    fn client_of(&self, server: &RestMessage) -> Option<&ClientSide> {
        self.clients.iter().rev().find(|client| {
            client.rest.stream_id == server.stream_id
                && client.rest.path == server.path
                && client.rest.start_ts_ns <= server.end_ts_ns
                && client.rest.end_ts_ns >= server.start_ts_ns
        })
    }

    /// The client span of a request a followed component made, and the
    /// server's side that waited for it.
    fn client_side(&mut self, rest: &RestMessage, uids: UidLookup<'_>) -> Vec<Span> {
        let (Some(start_ns), Some(end_ns)) = (rest.start_ts_ns, rest.end_ts_ns) else {
            return Vec::new();
        };
        let namespace = rest.namespace.clone().unwrap_or_default();
        let Some(name) = rest
            .name
            .clone()
            .or_else(|| rest.pod.as_ref().and_then(|pod| pod.name.clone()))
        else {
            return Vec::new();
        };
        let uid = rest
            .pod
            .as_ref()
            .and_then(|pod| pod.uid.clone())
            .or_else(|| uids(&namespace, &name))
            .or_else(|| self.uid_named(&namespace, &name));
        let Some(uid) = uid else {
            // A request about a Pod this agent never learnt the UID of
            // (created before podtrace): not part of a creation it traces.
            return Vec::new();
        };
        let pod = Pod::new(&self.cluster_id, &namespace, &name, &uid);
        let parent = self.caller(rest.subresource.as_deref(), &pod, start_ns, end_ns);
        let span_id = SpanId::for_key(
            pod.trace,
            format!(
                "rest/client/{}/{}/{}",
                rest.conn.tgid, rest.conn.conn_id, rest.stream_id
            )
            .as_bytes(),
        );
        let mut attributes = pod.attributes();
        attributes.extend(http_attributes(rest));
        let status = match rest.status {
            Some(code) if code >= 400 => SpanStatus::Error(format!("HTTP {code}")),
            _ => SpanStatus::Unset,
        };
        let mut spans = vec![Span {
            trace_id: pod.trace,
            span_id,
            parent_span_id: Some(parent),
            name: format!("{} {}", rest.method, rest.route),
            kind: SpanKind::Client,
            start_unix_ns: self.clock.unix_ns(start_ns),
            end_unix_ns: self.clock.unix_ns(end_ns),
            attributes,
            status,
        }];
        let client = ClientSide {
            rest: rest.clone(),
            trace: pod.trace,
            span_id,
        };
        if self.clients.len() >= MAX_EXCHANGES {
            self.clients.pop_front();
        }
        self.clients.push_back(client.clone());
        let (mine, others): (Vec<WaitingServer>, Vec<WaitingServer>) =
            std::mem::take(&mut self.waiting_servers)
                .into_iter()
                .partition(|waiting| {
                    waiting.rest.stream_id == rest.stream_id
                        && waiting.rest.path == rest.path
                        && waiting.rest.start_ts_ns <= rest.end_ts_ns
                        && waiting.rest.end_ts_ns >= rest.start_ts_ns
                });
        self.waiting_servers = others;
        for waiting in mine {
            spans.extend(self.request_spans(
                waiting.request,
                Some(&waiting.rest),
                Some(&client),
                uids,
            ));
        }
        spans
    }

    /// The parent of a request about `pod`'s `subresource` during
    /// `[start, end]`: the component call on this agent that made it (the
    /// scheduler's bind, the kubelet's status update), else the Pod's root.
    fn caller(&self, subresource: Option<&str>, pod: &Pod, start_ns: u64, end_ns: u64) -> SpanId {
        let function = match subresource {
            Some("binding") => GoFunction::SchedulerBind,
            Some("status") => GoFunction::KubeletStatusSync,
            _ => return SpanId::well_known(pod.trace, "root"),
        };
        self.parent_containing(function, pod, start_ns, end_ns)
            .map_or_else(
                || SpanId::well_known(pod.trace, "root"),
                |key| SpanId::for_key(pod.trace, key.as_bytes()),
            )
    }

    /// The UID of a Pod named by the components' own probes.
    fn uid_named(&self, namespace: &str, name: &str) -> Option<String> {
        self.names
            .iter()
            .find(|(_, (ns, n))| ns == namespace && n == name)
            .map(|(uid, _)| uid.clone())
    }

    /// Time passed: requests whose exchange never came go out on their own.
    pub fn tick(&mut self, now_ns: u64, uids: UidLookup<'_>) -> Vec<Span> {
        self.now_ns = self.now_ns.max(now_ns);
        self.flush(false, uids)
    }

    /// The agent stops: every request still waiting goes out.
    pub fn finish(&mut self, uids: UidLookup<'_>) -> Vec<Span> {
        self.flush(true, uids)
    }

    fn flush(&mut self, all: bool, uids: UidLookup<'_>) -> Vec<Span> {
        let now = self.now_ns;
        let mut spans = Vec::new();
        let (due, waiting): (Vec<WaitingServer>, Vec<WaitingServer>) =
            std::mem::take(&mut self.waiting_servers)
                .into_iter()
                .partition(|waiting| all || waiting.deadline_ns <= now);
        self.waiting_servers = waiting;
        for server in due {
            spans.extend(self.request_spans(server.request, Some(&server.rest), None, uids));
        }
        let expired: Vec<(u32, u64)> = self
            .requests
            .iter()
            .filter(|(_, request)| all || request.last_ns + REQUEST_WAIT_NS <= now)
            .map(|(key, _)| *key)
            .collect();
        for key in expired {
            // Without its exchange, a request that stored nothing was a
            // read (a GET of the Pod): not part of a trace.
            let Some(request) = self.requests.remove(&key).filter(|r| r.stored.is_some()) else {
                continue;
            };
            // The server's side of the exchange was lost; the client's
            // (the same path, around the same time) says what it was.
            let client = self
                .clients
                .iter()
                .rev()
                .find(|client| {
                    client.rest.path == request.path
                        && client
                            .rest
                            .start_ts_ns
                            .is_some_and(|s| s <= request.start_ns)
                        && client.rest.end_ts_ns.is_some_and(|e| e >= request.last_ns)
                })
                .cloned();
            let rest = client.as_ref().map(|client| client.rest.clone());
            spans.extend(self.request_spans(Some(request), rest.as_ref(), client.as_ref(), uids));
        }
        spans
    }

    /// The create requests exported since the last call: (UID, start).
    pub fn take_create_requests(&mut self) -> Vec<(String, u64)> {
        std::mem::take(&mut self.create_requests)
    }

    /// The request span and its calls' spans.
    fn request_spans(
        &mut self,
        request: Option<Request>,
        rest: Option<&RestMessage>,
        client: Option<&ClientSide>,
        uids: UidLookup<'_>,
    ) -> Vec<Span> {
        // Which Pod: the response's, the path's, the storage write's.
        let from_path = request.as_ref().and_then(|r| path_pod(&r.path));
        let namespace = rest
            .and_then(|r| r.namespace.clone())
            .or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| r.stored.clone())
                    .map(|(ns, _)| ns)
            })
            .or_else(|| from_path.clone().map(|(ns, _)| ns))
            .unwrap_or_default();
        let name = rest
            .and_then(|r| r.name.clone())
            .or_else(|| rest.and_then(|r| r.pod.as_ref()?.name.clone()))
            .or_else(|| rest.and_then(|r| r.error.as_ref()?.name.clone()))
            .or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| r.stored.clone())
                    .map(|(_, n)| n)
            })
            .or_else(|| from_path.and_then(|(_, name)| name))
            .unwrap_or_default();
        let uid = rest
            .and_then(|r| r.pod.as_ref()?.uid.clone())
            .or_else(|| uids(&namespace, &name));
        let status_code = rest.and_then(|r| r.status);
        let failed = status_code.is_some_and(|code| code >= 400);
        let dry_run = rest.is_some_and(|r| r.dry_run);
        let create = rest.map_or_else(
            || {
                request
                    .as_ref()
                    .is_some_and(|r| path_pod(&r.path).is_some_and(|(_, n)| n.is_none()))
            },
            |r| r.verb == "create" && r.subresource.is_none(),
        );
        // A create that stored nothing (rejected, or a dry run) has no
        // pod.create root from the etcd writes: its request is the root.
        let own_root = create && (failed || dry_run);
        let (trace, mut pod_attributes) = match (&uid, own_root) {
            (Some(uid), false) => {
                let pod = Pod::new(&self.cluster_id, &namespace, &name, uid);
                (pod.trace, pod.attributes())
            }
            (uid, _) => {
                if !own_root {
                    self.unattributed += 1;
                }
                let start = request
                    .as_ref()
                    .map(|r| r.start_ns)
                    .or_else(|| rest.and_then(|r| r.start_ts_ns))
                    .unwrap_or_default();
                let what = if own_root {
                    format!(
                        "request/{}/{namespace}/{name}/{start}",
                        uid.as_deref().unwrap_or("")
                    )
                } else {
                    format!("unattributed/{namespace}/{name}")
                };
                let mut attributes = vec![
                    string_attribute("k8s.pod.name", &name),
                    string_attribute("k8s.namespace.name", &namespace),
                ];
                if let Some(uid) = uid {
                    attributes.push(string_attribute("k8s.pod.uid", uid));
                }
                if !own_root {
                    attributes.push((
                        "podtrace.unattributed".to_owned(),
                        AttributeValue::Bool(true),
                    ));
                }
                (TraceId::for_pod(&self.cluster_id, &what), attributes)
            }
        };
        let key = match (&request, rest) {
            (Some(request), _) => request.key(),
            (None, Some(rest)) if rest.side == Side::Client => return Vec::new(),
            (None, Some(rest)) => {
                format!("apiserver/stream/{}/{}", rest.conn.conn_id, rest.stream_id)
            }
            (None, None) => return Vec::new(),
        };
        let span_id = SpanId::for_key(trace, key.as_bytes());
        let (start_ns, end_ns) = match (rest.and_then(|r| r.start_ts_ns.zip(r.end_ts_ns)), &request)
        {
            (Some((start, end)), Some(request)) => {
                (start.min(request.start_ns), end.max(request.last_ns))
            }
            (Some(times), None) => times,
            (None, Some(request)) => (request.start_ns, request.last_ns),
            (None, None) => return Vec::new(),
        };
        if let (true, false, Some(uid)) = (create, own_root, &uid) {
            if self.create_requests.len() < MAX_REQUESTS {
                self.create_requests.push((uid.clone(), start_ns));
            }
        }
        let parent = if own_root {
            None
        } else if let Some(client) = client.filter(|client| client.trace == trace) {
            Some(client.span_id)
        } else {
            let subresource = rest.and_then(|r| r.subresource.as_deref()).or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| r.path.rsplit('/').next())
                    .filter(|s| *s == "binding" || *s == "status")
            });
            Some(match &uid {
                Some(uid) => {
                    let pod = Pod::new(&self.cluster_id, &namespace, &name, uid);
                    self.caller(subresource, &pod, start_ns, end_ns)
                }
                None => SpanId::well_known(trace, "root"),
            })
        };
        let method = rest
            .map(|r| r.method.clone())
            .unwrap_or_else(|| "?".to_owned());
        let route = rest.map_or_else(
            || request.as_ref().map(|r| r.path.clone()).unwrap_or_default(),
            |r| r.route.clone(),
        );
        let mut attributes = std::mem::take(&mut pod_attributes);
        attributes.push(string_attribute("k8s.component", "kube-apiserver"));
        match rest {
            Some(rest) => attributes.extend(http_attributes(rest)),
            None => {
                attributes.push(string_attribute("http.request.method", &method));
                attributes.push(string_attribute("http.route", &route));
            }
        }
        if let Some(addr) = request.as_ref().and_then(|r| r.remote_addr.as_deref()) {
            attributes.push(string_attribute("client.address", addr));
        }
        if dry_run {
            attributes.push((
                "podtrace.k8s.dry_run".to_owned(),
                AttributeValue::Bool(true),
            ));
        }
        let calls = request.map(|r| r.calls).unwrap_or_default();
        if let Some(user) = calls
            .iter()
            .find(|call| call.entry.function == GoFunction::ApiserverAuthenticate)
            .and_then(|call| call.ret.text.as_deref())
        {
            attributes.push(string_attribute("podtrace.k8s.user", user));
        }
        let error = rest.and_then(|r| r.error.as_ref());
        let status = if failed {
            let mut text = format!("HTTP {}", status_code.unwrap_or_default());
            if let Some(reason) = error.and_then(|e| e.reason.as_deref()) {
                text.push_str(&format!(" {reason}"));
            }
            if let Some(message) = error.and_then(|e| e.message.as_deref()) {
                text.push_str(&format!(": {message}"));
            }
            SpanStatus::Error(text)
        } else {
            SpanStatus::Unset
        };
        let name_prefix = if own_root {
            format!(
                "pod.create {namespace}/{name} ({})",
                if dry_run { "dry run" } else { "rejected" }
            )
        } else {
            format!("apiserver {method} {route}")
        };
        if own_root {
            attributes.push((
                "podtrace.trace.complete".to_owned(),
                AttributeValue::Bool(false),
            ));
            attributes.push(string_attribute(
                "podtrace.trace.stuck_phase",
                if dry_run {
                    "dry run: nothing stored"
                } else {
                    "create request: rejected"
                },
            ));
        }
        let mut spans = vec![Span {
            trace_id: trace,
            span_id,
            parent_span_id: parent,
            name: name_prefix,
            kind: SpanKind::Server,
            start_unix_ns: self.clock.unix_ns(start_ns),
            end_unix_ns: self.clock.unix_ns(end_ns),
            attributes: attributes.clone(),
            status,
        }];
        let base: Vec<(String, AttributeValue)> = attributes
            .iter()
            .filter(|(key, _)| key.starts_with("k8s."))
            .cloned()
            .collect();
        let call_spans: Vec<Span> = calls
            .iter()
            .map(|call| self.request_call_span(trace, span_id, &base, call, failed))
            .collect();
        // Admission of an update runs inside the storage write's
        // read-modify-write: nest a call under the shortest one containing it.
        for (index, mut span) in call_spans.iter().cloned().enumerate() {
            let container = call_spans
                .iter()
                .enumerate()
                .filter(|(other, candidate)| {
                    *other != index
                        && candidate.start_unix_ns <= span.start_unix_ns
                        && candidate.end_unix_ns >= span.end_unix_ns
                        && (candidate.start_unix_ns, candidate.end_unix_ns)
                            != (span.start_unix_ns, span.end_unix_ns)
                })
                .min_by_key(|(_, candidate)| candidate.end_unix_ns - candidate.start_unix_ns);
            if let Some((_, container)) = container {
                span.parent_span_id = Some(container.span_id);
            }
            spans.push(span);
        }
        spans
    }

    fn request_call_span(
        &self,
        trace: TraceId,
        parent: SpanId,
        base: &[(String, AttributeValue)],
        call: &RequestCall,
        request_failed: bool,
    ) -> Span {
        let mut attributes = base.to_vec();
        let (name, key) = match call.entry.function {
            GoFunction::ApiserverAuthenticate => {
                if let Some(user) = &call.ret.text {
                    attributes.push(string_attribute("podtrace.k8s.user", user));
                }
                ("apiserver authentication".to_owned(), "authn")
            }
            GoFunction::ApiserverAuthorize => {
                if let Some(decision) = call.ret.decision {
                    attributes.push(string_attribute(
                        "podtrace.k8s.authz.decision",
                        decision.as_str(),
                    ));
                }
                if let Some(reason) = &call.ret.text {
                    attributes.push(string_attribute("podtrace.k8s.authz.reason", reason));
                }
                ("apiserver authorization".to_owned(), "authz")
            }
            GoFunction::ApiserverAdmit => ("apiserver admission (mutating)".to_owned(), "admit"),
            GoFunction::ApiserverValidate => {
                ("apiserver admission (validating)".to_owned(), "validate")
            }
            GoFunction::ApiserverMutatingWebhook | GoFunction::ApiserverValidatingWebhook => {
                let hook = call.entry.text.clone().unwrap_or_default();
                attributes.push(string_attribute("podtrace.k8s.admission.webhook", &hook));
                (format!("apiserver admission webhook {hook}"), "webhook")
            }
            _ => (
                format!(
                    "apiserver storage {} {}",
                    if call.entry.function == GoFunction::ApiserverStorageCreate {
                        "create"
                    } else {
                        "update"
                    },
                    call.entry.text.as_deref().unwrap_or_default()
                ),
                "storage",
            ),
        };
        let span_key = if key == "storage" {
            format!(
                "apiserver/storage/{}/{}/{}",
                call.entry.ids.tgid, call.entry.goid, call.entry.ids.ts_ns
            )
        } else {
            format!("apiserver/{key}/{}", call_key(&call.entry))
        };
        let denied = call.ret.decision == Some(Decision::Deny);
        let status = if call.ret.failed == Some(true) || denied {
            let what = match call.entry.function {
                GoFunction::ApiserverAdmit
                | GoFunction::ApiserverValidate
                | GoFunction::ApiserverMutatingWebhook
                | GoFunction::ApiserverValidatingWebhook => "admission rejected the request",
                GoFunction::ApiserverAuthenticate => "not authenticated",
                GoFunction::ApiserverAuthorize => "not authorized",
                _ => "the storage write failed",
            };
            if request_failed || call.entry.function != GoFunction::ApiserverAuthenticate {
                SpanStatus::Error(what.to_owned())
            } else {
                SpanStatus::Unset
            }
        } else {
            SpanStatus::Unset
        };
        Span {
            trace_id: trace,
            span_id: SpanId::for_key(trace, span_key.as_bytes()),
            parent_span_id: Some(parent),
            name,
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(call.entry.ids.ts_ns),
            end_unix_ns: self.clock.unix_ns(call.ret.ids.ts_ns),
            attributes,
            status,
        }
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
            span.string_attribute("k8s.namespace.name"),
            span.string_attribute("k8s.pod.name"),
        ) else {
            return;
        };
        let uid = span.string_attribute("k8s.pod.uid");
        let etcd = span.string_attribute("db.system.name") == Some("etcd");
        let cri = span
            .string_attribute("rpc.service")
            .is_some_and(|service| service.starts_with("runtime.v1."));
        let start = self.clock.monotonic_ns(span.start_unix_ns);
        let end = self.clock.monotonic_ns(span.end_unix_ns);
        let found = self.parents.iter().rev().find(|parent| {
            let contains = parent.start_ns <= start && parent.end_ns.is_none_or(|e| e >= end);
            let same_pod = if etcd {
                matches!(
                    parent.function,
                    GoFunction::ApiserverStorageCreate | GoFunction::ApiserverStorageUpdate
                ) && parent
                    .name
                    .as_ref()
                    .is_some_and(|(ns, n)| ns == namespace && n == name)
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

/// The HTTP attributes of a REST request, either side.
fn http_attributes(rest: &RestMessage) -> Vec<(String, AttributeValue)> {
    let mut attributes = vec![
        string_attribute("http.request.method", &rest.method),
        string_attribute("http.route", &rest.route),
        string_attribute("podtrace.k8s.verb", &rest.verb),
    ];
    if let Some(code) = rest.status {
        attributes.push(int_attribute("http.response.status_code", i64::from(code)));
    }
    if let Some(agent) = &rest.user_agent {
        attributes.push(string_attribute("user_agent.original", agent));
    }
    if !rest.warnings.is_empty() {
        attributes.push(string_attribute(
            "podtrace.k8s.warnings",
            &rest.warnings.join("; "),
        ));
    }
    attributes
}

/// The span key of a call: process, goroutine and entry time.
fn call_key(entry: &FuncMessage) -> String {
    format!(
        "{:?}/{}/{}/{}",
        entry.function, entry.ids.tgid, entry.goid, entry.ids.ts_ns
    )
}

fn remember(map: &mut HashMap<String, u64>, dropped: &mut u64, uid: &str, ts_ns: u64) {
    if map.len() >= MAX_PODS && !map.contains_key(uid) {
        *dropped += 1;
        return;
    }
    map.entry(uid.to_owned()).or_insert(ts_ns);
}

/// Whether a request path is one of a Pod's (collection, object or subresource).
fn is_pod_path(path: &str) -> bool {
    path_pod(path).is_some()
}

/// Namespace and (for an object or subresource) name of a core Pod path.
fn path_pod(path: &str) -> Option<(String, Option<String>)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let mut parts = rest.split('/');
    let namespace = parts.next().filter(|ns| !ns.is_empty())?;
    if parts.next()? != "pods" {
        return None;
    }
    Some((namespace.to_owned(), parts.next().map(str::to_owned)))
}

/// Namespace and name of a storage key `/pods/NS/NAME` (the apiserver's
/// key, without etcd's `/registry` prefix).
fn pod_key(key: &str) -> Option<(String, String)> {
    let rest = key
        .strip_prefix("/registry")
        .unwrap_or(key)
        .strip_prefix("/pods/")?;
    let (namespace, name) = rest.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (namespace.to_owned(), name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{ConnKey, ProcessIds};

    const APISERVER: u32 = 10;
    const MS: u64 = 1_000_000;
    const UID: &str = "5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10";

    fn hit(function: GoFunction, point: Point, goid: u64, parent: u64, at_ms: u64) -> FuncMessage {
        FuncMessage {
            ids: ProcessIds {
                ts_ns: at_ms * MS,
                tgid: APISERVER,
                tid: APISERVER,
            },
            function,
            point,
            goid,
            parent_goid: parent,
            pod: None,
            text: None,
            remote_addr: None,
            path: None,
            failed: (point == Point::Return).then_some(false),
            decision: None,
            nodes: None,
        }
    }

    fn rest(path: &str, start_ms: u64, end_ms: u64) -> RestMessage {
        RestMessage {
            conn: ConnKey {
                tgid: APISERVER,
                conn_id: 1,
            },
            stream_id: 3,
            side: Side::Server,
            method: "POST".into(),
            route: "/api/v1/namespaces/{namespace}/pods".into(),
            verb: "create".into(),
            namespace: Some("default".into()),
            name: None,
            subresource: None,
            path: path.into(),
            dry_run: false,
            status: Some(201),
            user_agent: Some("kubectl/v1.28.4".into()),
            pod: Some(tracer_decode::identity::PodIdentity {
                namespace: Some("default".into()),
                name: Some("web".into()),
                uid: Some(UID.into()),
                ..Default::default()
            }),
            error: None,
            warnings: Vec::new(),
            start_ts_ns: Some(start_ms * MS),
            end_ts_ns: Some(end_ms * MS),
        }
    }

    /// kube-apiserver's shape: the handler goroutine (1) spawns the timeout
    /// filter's (2), which authenticates (the union authenticator nests
    /// itself) and authorizes, and spawns the create handler's (3), which
    /// admits and writes; its etcd call nests under the write.
    #[test]
    fn a_request_gathers_the_calls_of_the_goroutines_it_spawned() {
        let mut spans = ComponentSpans::new(WallClock::from_offset(0), "c".into(), "vm".into());
        let path = "/api/v1/namespaces/default/pods";
        let mut authn = hit(GoFunction::ApiserverAuthenticate, Point::Entry, 2, 1, 10);
        authn.path = Some(path.into());
        authn.remote_addr = Some("127.0.0.1:5000".into());
        let mut user = hit(GoFunction::ApiserverAuthenticate, Point::Return, 2, 1, 12);
        user.text = Some("alice".into());
        let mut storage = hit(GoFunction::ApiserverStorageCreate, Point::Entry, 3, 2, 15);
        storage.text = Some("/pods/default/web".into());
        let calls = [
            authn.clone(),
            authn,
            hit(GoFunction::ApiserverAuthenticate, Point::Return, 2, 1, 11),
            user,
            hit(GoFunction::ApiserverAuthorize, Point::Entry, 2, 1, 12),
            hit(GoFunction::ApiserverAuthorize, Point::Return, 2, 1, 13),
            hit(GoFunction::ApiserverAdmit, Point::Entry, 3, 2, 13),
            hit(GoFunction::ApiserverAdmit, Point::Return, 3, 2, 14),
            storage,
            hit(GoFunction::ApiserverStorageCreate, Point::Return, 3, 2, 19),
        ];
        for call in calls {
            assert!(
                spans.on_func(call).is_empty(),
                "nothing before the exchange"
            );
        }
        let no_uids = |_: &str, _: &str| None;
        assert!(
            spans.on_rest(&rest(path, 9, 20), &no_uids).is_empty(),
            "waits for its client's side"
        );
        // kubectl is not followed: it goes out alone, under the root.
        let out = spans.tick(20 * MS + CLIENT_WAIT_NS, &no_uids);
        let names: Vec<&str> = out.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "apiserver POST /api/v1/namespaces/{namespace}/pods",
                "apiserver authentication",
                "apiserver authorization",
                "apiserver admission (mutating)",
                "apiserver storage create /pods/default/web",
            ]
        );
        let request = &out[0];
        let trace = TraceId::for_pod("c", UID);
        assert_eq!(request.trace_id, trace);
        assert_eq!(
            request.parent_span_id,
            Some(SpanId::well_known(trace, "root"))
        );
        assert_eq!(request.string_attribute("podtrace.k8s.user"), Some("alice"));
        assert!(
            out[1..]
                .iter()
                .all(|s| s.parent_span_id == Some(request.span_id))
        );
        assert_eq!(spans.take_create_requests(), [(UID.to_owned(), 9 * MS)]);

        // The apiserver's etcd client call, inside the storage write.
        let mut etcd = Span {
            trace_id: trace,
            span_id: SpanId::for_key(trace, b"etcd/client/x"),
            parent_span_id: Some(SpanId::well_known(trace, "root")),
            name: "etcdserverpb.KV/Txn".into(),
            kind: SpanKind::Client,
            start_unix_ns: 16 * MS,
            end_unix_ns: 18 * MS,
            attributes: vec![
                string_attribute("k8s.pod.name", "web"),
                string_attribute("k8s.namespace.name", "default"),
                string_attribute("db.system.name", "etcd"),
            ],
            status: SpanStatus::Unset,
        };
        spans.adopt(&mut etcd);
        assert_eq!(etcd.parent_span_id, Some(out[4].span_id));
    }

    /// The kubelet's side of its status update, seen on this agent: the
    /// server's side nests under it, and it under the kubelet's call.
    #[test]
    fn the_servers_side_nests_under_the_clients_side_of_the_same_stream() {
        let mut spans = ComponentSpans::new(WallClock::from_offset(0), "c".into(), "vm".into());
        let no_uids = |_: &str, _: &str| None;
        let path = "/api/v1/namespaces/default/pods/web/status";
        let mut sync = hit(GoFunction::KubeletStatusSync, Point::Entry, 7, 1, 30);
        sync.ids.tgid = 20;
        sync.pod = Some(PodRef {
            uid: UID.into(),
            namespace: None,
            name: None,
        });
        spans.on_func(sync);
        let mut server = rest(path, 32, 38);
        server.method = "PATCH".into();
        server.verb = "patch".into();
        server.name = Some("web".into());
        server.subresource = Some("status".into());
        assert!(spans.on_rest(&server, &no_uids).is_empty());
        let mut client = server.clone();
        client.side = Side::Client;
        client.conn.tgid = 20;
        client.start_ts_ns = Some(31 * MS);
        client.end_ts_ns = Some(39 * MS);
        let out = spans.on_rest(&client, &no_uids);
        let [client_span, server_span] = &out[..] else {
            panic!("{out:#?}");
        };
        assert_eq!(client_span.kind, SpanKind::Client);
        assert_eq!(server_span.kind, SpanKind::Server);
        assert_eq!(server_span.parent_span_id, Some(client_span.span_id));
        let mut sync_ret = hit(GoFunction::KubeletStatusSync, Point::Return, 7, 1, 40);
        sync_ret.ids.tgid = 20;
        let sync_span = spans.on_func(sync_ret).pop().unwrap();
        assert_eq!(client_span.parent_span_id, Some(sync_span.span_id));
    }

    #[test]
    fn a_read_without_its_exchange_is_not_exported() {
        let mut spans = ComponentSpans::new(WallClock::from_offset(0), "c".into(), "vm".into());
        let mut authn = hit(GoFunction::ApiserverAuthenticate, Point::Entry, 2, 1, 10);
        authn.path = Some("/api/v1/namespaces/default/pods/web".into());
        spans.on_func(authn);
        spans.on_func(hit(
            GoFunction::ApiserverAuthenticate,
            Point::Return,
            2,
            1,
            11,
        ));
        let no_uids = |_: &str, _: &str| None;
        assert!(spans.tick(10_000 * MS, &no_uids).is_empty());
        assert!(spans.requests.is_empty(), "forgotten, not kept");
    }

    #[test]
    fn pod_paths_and_storage_keys() {
        assert_eq!(
            path_pod("/api/v1/namespaces/default/pods"),
            Some(("default".into(), None))
        );
        assert_eq!(
            path_pod("/api/v1/namespaces/default/pods/web/binding"),
            Some(("default".into(), Some("web".into())))
        );
        assert_eq!(path_pod("/api/v1/namespaces/default/events"), None);
        assert_eq!(
            path_pod("/apis/apps/v1/namespaces/default/deployments"),
            None
        );
        assert_eq!(
            pod_key("/pods/default/web"),
            Some(("default".into(), "web".into()))
        );
        assert_eq!(
            pod_key("/registry/pods/default/web"),
            Some(("default".into(), "web".into()))
        );
        assert_eq!(pod_key("/events/default/web.1"), None);
    }
}
