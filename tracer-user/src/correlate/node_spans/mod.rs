//! The node side of a Pod's trace: CRI calls as containerd handled them, the
//! runc executions they caused, and the node's span around them.
//!
//! In: finished CRI calls (with what identifies their Pod) and runc process
//! events. Out: [`Span`]s in the Pod's trace. Identity flows along causal
//! keys: RunPodSandbox names the Pod and returns the sandbox id;
//! CreateContainer ties a container id to a sandbox; runc's argv names the
//! container it creates or starts. A call whose Pod is not known (its
//! sandbox was created before podtrace started) is counted, not guessed.
//!
//! Here: the CRI calls' spans (client and server paired) and the node span's
//! life; `images`: which Pod an ImageStatus call was about, and the image
//! and security facts; `runtime`: runc, the shim, the containers' first
//! processes and CNI plugin runs under the calls that caused them.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use std::collections::{HashMap, VecDeque};

use tracer_decode::{
    cri::{ContainerFacts, SecurityFacts},
    identity::PodClue,
};

use super::{
    awaiting::Awaiting,
    pod::{Pod, string_attribute},
    span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, TraceId},
};
use crate::{
    bounded::BoundedMap,
    capture::{ExecRecord, ExitRecord, ExitStatus, ForkRecord, clock::WallClock},
    decode::{CriMessage, grpc_calls::Side},
};

mod images;
mod runtime;

use images::{ContainerImage, container_attributes, image_attributes, security_attributes};
pub use images::{IMAGE_PRESENT, IMAGE_PULLED};
use runtime::{Ambiguous, CniStart, Pending, RuncRun, SandboxWindow};

/// Bound on remembered sandboxes, containers and running runc processes.
const MAX_ENTRIES: usize = 16_384;

/// A CRI server span waiting for the kubelet's client span of the call.
#[derive(Clone, Debug)]
struct HeldServerSpan {
    span: Span,
    /// The client span's id: the parent once seen.
    client: SpanId,
    pod: Pod,
    /// The call ends the node's part of the trace: StartContainer, or a
    /// failed sandbox or container call (with the failure).
    closes_node: Option<SpanStatus>,
}

/// Whether a CRI call ends the node's part of a Pod's trace, and how: the
/// workload container started, or the node could not create the Pod (the
/// kubelet retries with backoff; the retries join the ended node span).
fn closes_node(method: &str, status: &SpanStatus) -> Option<SpanStatus> {
    let creates = matches!(
        method,
        "RunPodSandbox" | "CreateContainer" | "StartContainer" | "PullImage"
    );
    match status {
        SpanStatus::Error(message) if creates => {
            Some(SpanStatus::Error(format!("{method} failed: {message}")))
        }
        SpanStatus::Unset if method == "StartContainer" => Some(SpanStatus::Unset),
        _ => None,
    }
}

/// How long a CRI server span waits for its client span.
const CLIENT_WAIT_NS: u64 = 2_000_000_000;

/// How long a node span waits for its Pod to become known.
const PENDING_NS: u64 = 60_000_000_000;

/// Builds the node-side spans of Pod traces.
#[derive(Debug)]
pub struct NodeSpans {
    clock: WallClock,
    cluster_id: String,
    node_name: String,
    pods_by_sandbox: HashMap<String, Pod>,
    sandbox_by_container: HashMap<String, String>,
    runc_runs: HashMap<u32, RuncRun>,
    /// When each Pod's first CRI call started (for its node span).
    first_call_ns: HashMap<String, u64>,
    /// Pods (UIDs) whose node span went out.
    closed_nodes: BoundedMap<String, ()>,
    /// Client-side CRI spans seen, with their end (unix ns).
    client_calls: BoundedMap<SpanId, u64>,
    /// Server-side CRI spans waiting for their client span.
    /// Server spans waiting for their client's, until a deadline after
    /// which they go out under the node span (the kubelet is not followed,
    /// or its read of the response was lost).
    held: Awaiting<HeldServerSpan>,
    /// Processes between `runc create` and the container's first exec
    /// (runc init and its clones), by pid, with the container id.
    container_inits: HashMap<u32, String>,
    /// Containers' first processes, by pid, until they exit.
    container_processes: HashMap<u32, (String, String)>,
    /// Spans waiting for their Pod (bounded).
    pending: Vec<Pending>,
    /// CNI plugins running, by pid.
    cni_runs: HashMap<u32, CniStart>,
    /// ImageStatus calls (about no Pod) waiting for the PullImage or
    /// CreateContainer of the same image to name their Pod.
    image_calls: VecDeque<CriMessage>,
    /// ImageStatus calls a claim left to no Pod (another Pod may have asked
    /// them), kept as long as held ones: the same calls seen from the other
    /// end of their connection may be claimed there, and these go with them.
    refused_image_calls: VecDeque<CriMessage>,
    /// ImageStatus calls forgotten at their bounds, oldest first.
    image_calls_forgotten: u64,
    /// What ImageStatus calls taken with their other end's claim found, per
    /// side and Pod (uid), until that side's CreateContainer reads it.
    mirrored_statuses: BoundedMap<(Side, String), Vec<ContainerFacts>>,
    /// Images pulled for each Pod (by uid): which side saw the pull, and
    /// its image reference and id.
    pulls: BoundedMap<String, Vec<(Side, ContainerFacts)>>,
    /// Created containers' names and images, by container id.
    container_images: BoundedMap<String, ContainerImage>,
    /// Pods whose sandbox was created and whose first container not yet,
    /// per side: when their last CRI call ended (CLOCK_MONOTONIC ns). A
    /// kubelet worker asks ImageStatus right after its Pod's other calls
    /// (PodSandboxStatus, PullImage): one that was active while another
    /// Pod's image was asked about may have asked too.
    awaiting_container: BoundedMap<(Side, String), u64>,
    /// When each Pod's sandbox was answered, per side (CLOCK_MONOTONIC
    /// ns): the kubelet asks about a container's image after it.
    sandbox_ready: BoundedMap<(Side, String), u64>,
    /// Recent RunPodSandbox, StopPodSandbox and RemovePodSandbox calls
    /// (which run the CNI plugins: ADD, DEL, DEL again) as containerd handled them: method, sandbox id,
    /// start and end (CLOCK_MONOTONIC ns).
    sandbox_windows: VecDeque<SandboxWindow>,
    /// The call each CNI plugin run that was started by containerd went to
    /// (or that it was ambiguous), by pid, with the run's end: the plugins
    /// it ran (ptp's host-local) go with it.
    cni_calls: HashMap<u32, (Result<SandboxWindow, Ambiguous>, u64)>,
    /// CRI calls, runc runs and container processes whose Pod was not known.
    pub unattributed: u64,
    /// Of those, CNI plugin runs during more than one sandbox call.
    pub cni_ambiguous: u64,
    /// ImageStatus calls claimed for a Pod whose other end's view was
    /// missing where this node sees that end: not exported.
    pub unpaired_image_calls: u64,
}

impl NodeSpans {
    /// Spans of Pods of cluster `cluster_id` on node `node_name`.
    pub fn new(clock: WallClock, cluster_id: String, node_name: String) -> Self {
        Self {
            clock,
            cluster_id,
            node_name,
            pods_by_sandbox: HashMap::new(),
            sandbox_by_container: HashMap::new(),
            runc_runs: HashMap::new(),
            first_call_ns: HashMap::new(),
            closed_nodes: BoundedMap::new(MAX_ENTRIES),
            client_calls: BoundedMap::new(MAX_ENTRIES),
            held: Awaiting::new(MAX_ENTRIES),
            container_inits: HashMap::new(),
            container_processes: HashMap::new(),
            pending: Vec::new(),
            cni_runs: HashMap::new(),
            sandbox_windows: VecDeque::new(),
            cni_calls: HashMap::new(),
            image_calls: VecDeque::new(),
            refused_image_calls: VecDeque::new(),
            image_calls_forgotten: 0,
            mirrored_statuses: BoundedMap::new(MAX_ENTRIES),
            pulls: BoundedMap::new(MAX_ENTRIES),
            container_images: BoundedMap::new(MAX_ENTRIES),
            awaiting_container: BoundedMap::new(MAX_ENTRIES),
            sandbox_ready: BoundedMap::new(MAX_ENTRIES),
            unattributed: 0,
            cni_ambiguous: 0,
            unpaired_image_calls: 0,
        }
    }

    fn node_span_id(&self, trace: TraceId) -> SpanId {
        SpanId::of(trace, &SpanKey::Node(&self.node_name))
    }

    /// The span id of a CRI call about `key` (a sandbox or container id):
    /// the same for the kubelet's client span and containerd's server span
    /// would collide, so the side is part of it — spelled here, not taken
    /// from `Debug`: the key is part of the wire between agents (ids pinned
    /// in the tests).
    fn call_span_id(trace: TraceId, side: Side, method: &str, id: &str) -> SpanId {
        SpanId::of(trace, &SpanKey::Cri { side, method, id })
    }

    /// A finished CRI call: its span, and the node span when the Pod's
    /// container has been started.
    pub fn on_cri(&mut self, call: &CriMessage) -> Vec<Span> {
        let mut key = None;
        // A RunPodSandbox that failed names its Pod but no sandbox.
        let mut failed_sandbox = None;
        for clue in &call.clues {
            match clue {
                PodClue::Sandbox {
                    pod,
                    sandbox_id: Some(sandbox_id),
                } => {
                    if let (Some(namespace), Some(name), Some(uid)) =
                        (&pod.namespace, &pod.name, &pod.uid)
                    {
                        let pod = Pod::new(&self.cluster_id, namespace, name, uid);
                        if self.pods_by_sandbox.len() < MAX_ENTRIES {
                            self.pods_by_sandbox.insert(sandbox_id.clone(), pod);
                        }
                    }
                    key = Some((sandbox_id.clone(), None));
                }
                PodClue::SandboxCall {
                    sandbox_id,
                    container_id,
                } => {
                    if let Some(container_id) = container_id {
                        if self.sandbox_by_container.len() < MAX_ENTRIES {
                            self.sandbox_by_container
                                .insert(container_id.clone(), sandbox_id.clone());
                        }
                    }
                    key = Some((sandbox_id.clone(), container_id.clone()));
                }
                PodClue::Container { container_id } => {
                    if let Some(sandbox_id) = self.sandbox_by_container.get(container_id) {
                        key = Some((sandbox_id.clone(), Some(container_id.clone())));
                    }
                }
                PodClue::Sandbox {
                    pod,
                    sandbox_id: None,
                } => {
                    if let (Some(namespace), Some(name), Some(uid)) =
                        (&pod.namespace, &pod.name, &pod.uid)
                    {
                        failed_sandbox = Some(Pod::new(&self.cluster_id, namespace, name, uid));
                    }
                }
                PodClue::StorageKey { .. } | PodClue::Object(_) => {}
            }
        }
        // PullImage names its Pod: the kubelet sends the sandbox's config.
        let pulled_for = call
            .facts
            .as_ref()
            .and_then(|facts| facts.pull_for.as_ref())
            .map(|pod| Pod::new(&self.cluster_id, &pod.namespace, &pod.name, &pod.uid));
        let now = call.end_ts_ns.unwrap_or(0);
        self.expire_image_calls(now);
        let (pod, sandbox_id, container_id) = match (key, failed_sandbox.or(pulled_for)) {
            (Some((sandbox_id, container_id)), _) => {
                let Some(pod) = self.pods_by_sandbox.get(&sandbox_id).cloned() else {
                    self.unattributed += 1;
                    return Vec::new();
                };
                (pod, Some(sandbox_id), container_id)
            }
            (None, Some(pod)) => (pod, None, None),
            (None, None) => {
                // ImageStatus names no Pod: it waits for the PullImage or
                // CreateContainer after it. Version, Status…: about no Pod.
                self.hold_image_call(call);
                return Vec::new();
            }
        };
        if let Some(last) = self
            .awaiting_container
            .get_mut(&(call.side, pod.uid.clone()))
        {
            *last = (*last).max(now);
        }
        let mut spans = Vec::new();
        let mut facts = Vec::new();
        match call.method.as_str() {
            "PullImage" => {
                // The ImageStatus that found the image absent.
                let (claimed, _) = self.claim_image_calls(call, &pod);
                spans.extend(claimed);
                if let Some(pulled) = call.facts.as_ref().filter(|f| f.image_id.is_some()) {
                    self.note_pull(&pod, call.side, pulled);
                }
                facts.extend(
                    call.facts
                        .as_deref()
                        .map(image_attributes)
                        .unwrap_or_default(),
                );
            }
            "CreateContainer" => {
                let (claimed, statuses) = self.claim_image_calls(call, &pod);
                spans.extend(claimed);
                self.awaiting_container
                    .remove(&(call.side, pod.uid.clone()));
                let image = self.container_image(call, &pod, &statuses);
                facts.extend(container_attributes(&image));
                if let Some(id) = call.facts.as_ref().and_then(|f| f.image_id.as_ref()) {
                    facts.push(string_attribute(attr::CONTAINER_IMAGE_ID, id));
                }
                if let Some(security) = call.facts.as_ref().and_then(|f| f.security.as_ref()) {
                    facts.extend(security_attributes(security));
                }
                if let Some(container_id) = &container_id {
                    self.container_images.insert(container_id.clone(), image);
                }
            }
            "RunPodSandbox" => {
                // Answered with a sandbox (the trailers may not have been captured).
                if sandbox_id.is_some() && call.status_code.unwrap_or(0) == 0 {
                    self.awaiting_container
                        .insert((call.side, pod.uid.clone()), now);
                    self.sandbox_ready.insert((call.side, pod.uid.clone()), now);
                }
                if let Some(security) = call.facts.as_ref().and_then(|f| f.security.as_ref()) {
                    facts.extend(security_attributes(security));
                }
            }
            "StartContainer" => {
                if let Some(image) = container_id
                    .as_ref()
                    .and_then(|id| self.container_images.get(id))
                {
                    facts.extend(container_attributes(image));
                }
            }
            _ => {}
        }
        spans.extend(self.call_spans(call, &pod, sandbox_id, container_id, facts, now));
        spans
    }

    /// The span of a CRI call of `pod`, with `facts` among its attributes;
    /// a server span waits for its client span until `now` +
    /// [`CLIENT_WAIT_NS`].
    fn call_spans(
        &mut self,
        call: &CriMessage,
        pod: &Pod,
        sandbox_id: Option<String>,
        container_id: Option<String>,
        facts: Vec<(String, AttributeValue)>,
        now: u64,
    ) -> Vec<Span> {
        let pod = pod.clone();
        let (Some(start), Some(end)) = (call.start_ts_ns, call.end_ts_ns) else {
            self.unattributed += 1;
            return Vec::new();
        };
        let (start, end) = (self.clock.unix_ns(start), self.clock.unix_ns(end));
        // A Pod whose node span went out starts no other: its later calls
        // (status polls, the teardown) are not its first.
        let counts = !self.closed_nodes.contains_key(&pod.uid)
            && (self.first_call_ns.len() < MAX_ENTRIES
                || self.first_call_ns.contains_key(&pod.uid));
        if counts {
            let first = self.first_call_ns.entry(pod.uid.clone()).or_insert(start);
            *first = (*first).min(start);
        }
        let mut span_key = container_id
            .clone()
            .or_else(|| sandbox_id.clone())
            .unwrap_or_else(|| format!("pod/{}", pod.uid));
        // Status and other queries repeat about one sandbox or container
        // (the kubelet asks PodSandboxStatus more than once), and so do the
        // teardown calls (StopPodSandbox again at the sandbox's removal):
        // the HTTP/2 stream, the same at both ends, tells them apart. The
        // creating calls, once per sandbox or container, keep the plain
        // key: runc runs and processes name them as their parents.
        if !matches!(
            call.method.as_str(),
            "RunPodSandbox" | "CreateContainer" | "StartContainer"
        ) {
            span_key = format!("{span_key}/stream/{}", call.stream_id);
        }
        let mut attributes = vec![
            (
                attr::RPC_SYSTEM.to_owned(),
                AttributeValue::String("grpc".into()),
            ),
            (
                attr::RPC_SERVICE.to_owned(),
                AttributeValue::String(call.service.clone()),
            ),
            (
                attr::RPC_METHOD.to_owned(),
                AttributeValue::String(call.method.clone()),
            ),
        ];
        if let Some(sandbox_id) = &sandbox_id {
            attributes.push(string_attribute(attr::CRI_SANDBOX_ID, sandbox_id));
        }
        if let Some(container_id) = &container_id {
            attributes.push((
                attr::CONTAINER_ID.to_owned(),
                AttributeValue::String(container_id.clone()),
            ));
        }
        if let Some(code) = call.status_code {
            attributes.push((
                attr::RPC_GRPC_STATUS_CODE.to_owned(),
                AttributeValue::Int(i64::from(code)),
            ));
        }
        attributes.extend(facts);
        attributes.extend(self.pod_attributes(&pod));
        let status = match (call.status_code, &call.status_message) {
            (Some(0) | None, _) => SpanStatus::Unset,
            (Some(code), None) => SpanStatus::Error(format!("gRPC status {code}")),
            (Some(code), Some(message)) => {
                SpanStatus::Error(format!("gRPC status {code}: {message}"))
            }
        };
        let span = Span {
            trace_id: pod.trace,
            span_id: Self::call_span_id(pod.trace, call.side, &call.method, &span_key),
            parent_span_id: Some(self.node_span_id(pod.trace)),
            name: name::grpc(&call.service, &call.method),
            kind: match call.side {
                Side::Server => SpanKind::Server,
                Side::Client => SpanKind::Client,
            },
            start_unix_ns: start,
            end_unix_ns: end,
            attributes,
            status,
            links: Vec::new(),
        };
        let runs_cni = match call.method.as_str() {
            "RunPodSandbox" => Some("RunPodSandbox"),
            "StopPodSandbox" => Some("StopPodSandbox"),
            "RemovePodSandbox" => Some("RemovePodSandbox"),
            _ => None,
        };
        if let (Side::Server, Some(method), Some(sandbox_id), Some(start_ns), Some(end_ns)) = (
            call.side,
            runs_cni,
            &sandbox_id,
            call.start_ts_ns,
            call.end_ts_ns,
        ) {
            self.note_sandbox_call(method, sandbox_id, span.span_id, (start_ns, end_ns));
        }
        let mut spans = Vec::new();
        match call.side {
            Side::Client => {
                self.client_calls.insert(span.span_id, end);
                // containerd not followed: the kubelet's side ends the node span.
                let server_held = self.held.any(|held| held.client == span.span_id);
                if let (Some(status), false) =
                    (closes_node(&call.method, &span.status), server_held)
                {
                    spans.extend(self.close_node_span(&pod, end, status));
                }
                spans.push(span);
            }
            // containerd answers before the kubelet reads the answer: the
            // server span waits (briefly) for the client span it belongs in.
            Side::Server => {
                let client = Self::call_span_id(pod.trace, Side::Client, &call.method, &span_key);
                let closes_node = closes_node(&call.method, &span.status);
                let held = HeldServerSpan {
                    span,
                    client,
                    pod: pod.clone(),
                    closes_node,
                };
                let deadline_ns = now.max(call.end_ts_ns.unwrap_or(0)) + CLIENT_WAIT_NS;
                if self.held.hold(held, deadline_ns).is_err() {
                    self.unattributed += 1;
                }
            }
        }
        spans.extend(self.release_held(now, false));
        spans.extend(self.attribute_pending(now));
        spans
    }

    /// Entries forgotten at a bound, the oldest first: calls, images,
    /// sandboxes and Pods remembered (see [`BoundedMap`]).
    pub fn forgotten(&self) -> u64 {
        self.image_calls_forgotten
            + self.closed_nodes.evicted()
            + self.client_calls.evicted()
            + self.mirrored_statuses.evicted()
            + self.pulls.evicted()
            + self.container_images.evicted()
            + self.awaiting_container.evicted()
            + self.sandbox_ready.evicted()
    }

    /// Time passed: server spans whose client was not seen go out under the
    /// node span.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Span> {
        self.expire_image_calls(now_ns);
        let mut spans = self.release_held(now_ns, false);
        spans.extend(self.attribute_pending(now_ns));
        spans
    }

    /// No more events: every held span goes out.
    pub fn finish(&mut self) -> Vec<Span> {
        let mut spans = self.release_held(u64::MAX, true);
        spans.extend(self.attribute_pending(u64::MAX));
        spans
    }

    /// Server spans whose client span was seen (now their parent), or whose
    /// wait is over; StartContainer's also closes the node's span — the Pod's
    /// workload container has started.
    fn release_held(&mut self, now_ns: u64, all: bool) -> Vec<Span> {
        let client_calls = &self.client_calls;
        let released = self
            .held
            .take(now_ns, all, |held| client_calls.contains_key(&held.client));
        let mut spans = Vec::new();
        for mut held in released {
            let client_end = self.client_calls.get(&held.client).copied();
            let mut end = held.span.end_unix_ns;
            if let Some(client_end) = client_end {
                held.span.parent_span_id = Some(held.client);
                end = end.max(client_end);
            }
            let pod = held.pod;
            spans.push(held.span);
            if let Some(status) = held.closes_node {
                spans.extend(self.close_node_span(&pod, end, status));
            }
        }
        spans
    }

    /// The node's span of a Pod, once: from its first CRI call to `end_ns`.
    /// Once only even when both ends of the call that closes it say so: a
    /// containerd StartContainer whose kubelet side came after the server
    /// span stopped waiting for it closed the node span, and the kubelet's
    /// side, its own call counted as the Pod's first again, a second time.
    /// A closed Pod's later calls are not counted (`closed_nodes`), so
    /// there is no first call to close from.
    fn close_node_span(&mut self, pod: &Pod, end_ns: u64, status: SpanStatus) -> Option<Span> {
        let start = self.first_call_ns.remove(&pod.uid)?;
        self.closed_nodes.insert(pod.uid.clone(), ());
        Some(Span {
            trace_id: pod.trace,
            span_id: self.node_span_id(pod.trace),
            parent_span_id: Some(SpanId::of(pod.trace, &SpanKey::Root)),
            name: name::node(&self.node_name),
            kind: SpanKind::Internal,
            start_unix_ns: start,
            end_unix_ns: end_ns,
            attributes: self.pod_attributes(pod),
            status,
            links: Vec::new(),
        })
    }

    fn pod_attributes(&self, pod: &Pod) -> Vec<(String, AttributeValue)> {
        let mut attributes = pod.attributes();
        attributes.push(string_attribute(attr::K8S_NODE_NAME, &self.node_name));
        attributes
    }
}

#[cfg(test)]
mod tests;
