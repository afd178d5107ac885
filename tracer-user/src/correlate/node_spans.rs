//! The node side of a Pod's trace: CRI calls as containerd handled them, the
//! runc executions they caused, and the node's span around them.
//!
//! In: finished CRI calls (with what identifies their Pod) and runc process
//! events. Out: [`Span`]s in the Pod's trace. Identity flows along causal
//! keys: RunPodSandbox names the Pod and returns the sandbox id;
//! CreateContainer ties a container id to a sandbox; runc's argv names the
//! container it creates or starts. A call whose Pod is not known (its
//! sandbox was created before podtrace started) is counted, not guessed.

use std::collections::{HashMap, HashSet, VecDeque};

use tracer_decode::{
    cri::{ContainerFacts, SecurityFacts},
    identity::PodClue,
};

use super::{
    pod::{Pod, string_attribute},
    span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, TraceId},
};
use crate::{
    capture::{ExecRecord, ExitRecord, ExitStatus, ForkRecord, clock::WallClock},
    decode::{CriMessage, grpc_calls::Side},
};

/// Bound on remembered sandboxes, containers and running runc processes.
const MAX_ENTRIES: usize = 16_384;

/// A runc execution waiting for its exit.
#[derive(Clone, Debug)]
struct RuncRun {
    /// `runc` or the shim's executable name.
    executable: String,
    subcommand: String,
    container_id: String,
    start_ns: u64,
}

/// A finished runc execution whose Pod is not known yet: `runc create` of a
/// workload container ends before containerd's CreateContainer response
/// names the container.
#[derive(Clone, Debug)]
struct FinishedRun {
    run: RuncRun,
    pid: u32,
    end_ns: u64,
    status: ExitStatus,
}

/// A process event of a container's first process: its exec (the
/// container started) or its exit.
#[derive(Clone, Debug)]
struct ContainerProcess {
    container_id: String,
    pid: u32,
    executable: String,
    ts_ns: u64,
    /// `None` for the exec; the exit status for the exit.
    exit: Option<ExitStatus>,
}

/// A node span whose Pod is not known yet: `runc create` of a workload
/// container ends before containerd's CreateContainer response names the
/// container; the sandbox's runc runs and first exec happen before the
/// RunPodSandbox response names the sandbox.
#[derive(Clone, Debug)]
enum Pending {
    Run(FinishedRun),
    Process(ContainerProcess),
    Cni(CniRun),
}

impl Pending {
    fn ts_ns(&self) -> u64 {
        match self {
            Self::Run(run) => run.end_ns,
            Self::Process(process) => process.ts_ns,
            Self::Cni(run) => run.end_ns,
        }
    }
}

/// A CNI plugin execution (containerd runs the plugins of its network
/// configuration for a new sandbox; a plugin may run others, e.g. IPAM).
#[derive(Clone, Debug)]
struct CniRun {
    plugin: String,
    pid: u32,
    /// The CNI plugin that ran this one, if any.
    parent_pid: Option<u32>,
    parent_plugin: Option<String>,
    /// See [`CniStart::sandbox_id`].
    sandbox_id: Option<String>,
    start_ns: u64,
    end_ns: u64,
    status: ExitStatus,
}

/// A call that runs CNI plugins, as containerd handled it.
#[derive(Clone, Debug)]
struct SandboxWindow {
    method: &'static str,
    sandbox_id: String,
    /// The call's server span: the CNI runs' parent.
    span_id: SpanId,
    start_ns: u64,
    end_ns: u64,
}

/// A CNI plugin execution in progress.
#[derive(Clone, Debug)]
struct CniStart {
    plugin: String,
    parent: Option<(u32, String)>,
    start_ns: u64,
    /// The sandbox it works for, from its `CNI_CONTAINERID`.
    sandbox_id: Option<String>,
}

/// How long a finished CNI run waits before it is matched to a
/// RunPodSandbox call (a concurrent call must have finished to be seen).
const CNI_SETTLE_NS: u64 = 1_000_000_000;
/// Sandbox calls remembered for matching CNI runs.
const MAX_SANDBOX_WINDOWS: usize = 1024;

/// A CRI server span waiting for the kubelet's client span of the call.
#[derive(Clone, Debug)]
struct HeldServerSpan {
    span: Span,
    /// The client span's id: the parent once seen.
    client: SpanId,
    pod: Pod,
    /// CLOCK_MONOTONIC ns after which it goes out under the node span (the
    /// kubelet is not followed, or its read of the response was lost).
    deadline_ns: u64,
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

/// How long an ImageStatus call waits for the PullImage or CreateContainer
/// that names its Pod (the kubelet asks just before it pulls or creates).
const IMAGE_CLAIM_NS: u64 = 10_000_000_000;
/// ImageStatus calls waiting at once; past it the oldest is dropped.
const MAX_IMAGE_CALLS: usize = 1024;
/// How long before another Pod's ImageStatus a Pod's worker, last seen
/// active, may have asked one too (it asks within milliseconds of its
/// sandbox's status or its pull).
const COMPETING_NS: u64 = 1_000_000_000;
/// Images remembered as pulled per Pod.
const MAX_PULLS_PER_POD: usize = 32;

/// `podtrace.container.image.source`: the runtime had the image.
pub const IMAGE_PRESENT: &str = "present";
/// `podtrace.container.image.source`: the image was pulled for the Pod.
pub const IMAGE_PULLED: &str = "pulled";

/// What the spans of a created container repeat from its CreateContainer.
#[derive(Clone, Debug, Default)]
struct ContainerImage {
    container_name: Option<String>,
    image: Option<String>,
    source: Option<&'static str>,
}

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
    closed_nodes: HashSet<String>,
    /// Client-side CRI spans seen, with their end (unix ns).
    client_calls: HashMap<SpanId, u64>,
    /// Server-side CRI spans waiting for their client span.
    held: Vec<HeldServerSpan>,
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
    /// What ImageStatus calls taken with their other end's claim found, per
    /// side and Pod (uid), until that side's CreateContainer reads it.
    mirrored_statuses: HashMap<(Side, String), Vec<ContainerFacts>>,
    /// Images pulled for each Pod (by uid): which side saw the pull, and
    /// its image reference and id.
    pulls: HashMap<String, Vec<(Side, ContainerFacts)>>,
    /// Created containers' names and images, by container id.
    container_images: HashMap<String, ContainerImage>,
    /// Pods whose sandbox was created and whose first container not yet,
    /// per side: when their last CRI call ended (CLOCK_MONOTONIC ns). A
    /// kubelet worker asks ImageStatus right after its Pod's other calls
    /// (PodSandboxStatus, PullImage): one that was active while another
    /// Pod's image was asked about may have asked too.
    awaiting_container: HashMap<(Side, String), u64>,
    /// When each Pod's sandbox was answered, per side (CLOCK_MONOTONIC
    /// ns): the kubelet asks about a container's image after it.
    sandbox_ready: HashMap<(Side, String), u64>,
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
            closed_nodes: HashSet::new(),
            client_calls: HashMap::new(),
            held: Vec::new(),
            container_inits: HashMap::new(),
            container_processes: HashMap::new(),
            pending: Vec::new(),
            cni_runs: HashMap::new(),
            sandbox_windows: VecDeque::new(),
            cni_calls: HashMap::new(),
            image_calls: VecDeque::new(),
            refused_image_calls: VecDeque::new(),
            mirrored_statuses: HashMap::new(),
            pulls: HashMap::new(),
            container_images: HashMap::new(),
            awaiting_container: HashMap::new(),
            sandbox_ready: HashMap::new(),
            unattributed: 0,
            cni_ambiguous: 0,
            unpaired_image_calls: 0,
        }
    }

    fn node_span_id(&self, trace: TraceId) -> SpanId {
        SpanId::well_known(trace, &format!("node/{}", self.node_name))
    }

    /// The span id of a CRI call about `key` (a sandbox or container id):
    /// the same for the kubelet's client span and containerd's server span
    /// would collide, so the side is part of it — spelled here, not taken
    /// from `Debug`: the key is part of the wire between agents (ids pinned
    /// in the tests).
    fn call_span_id(trace: TraceId, side: Side, method: &str, key: &str) -> SpanId {
        let side = match side {
            Side::Server => "Server",
            Side::Client => "Client",
        };
        SpanId::for_key(trace, format!("cri/{side}/{method}/{key}").as_bytes())
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
                    facts.push(string_attribute("container.image.id", id));
                }
                if let Some(security) = call.facts.as_ref().and_then(|f| f.security.as_ref()) {
                    facts.extend(security_attributes(security));
                }
                if let Some(container_id) = &container_id {
                    if self.container_images.len() >= MAX_ENTRIES {
                        self.container_images.clear();
                    }
                    self.container_images.insert(container_id.clone(), image);
                }
            }
            "RunPodSandbox" => {
                // Answered with a sandbox (the trailers may not have been captured).
                if sandbox_id.is_some() && call.status_code.unwrap_or(0) == 0 {
                    if self.awaiting_container.len() >= MAX_ENTRIES {
                        self.awaiting_container.clear();
                    }
                    self.awaiting_container
                        .insert((call.side, pod.uid.clone()), now);
                    if self.sandbox_ready.len() >= MAX_ENTRIES {
                        self.sandbox_ready.clear();
                    }
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
        let counts = !self.closed_nodes.contains(&pod.uid)
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
                "rpc.system".to_owned(),
                AttributeValue::String("grpc".into()),
            ),
            (
                "rpc.service".to_owned(),
                AttributeValue::String(call.service.clone()),
            ),
            (
                "rpc.method".to_owned(),
                AttributeValue::String(call.method.clone()),
            ),
        ];
        if let Some(sandbox_id) = &sandbox_id {
            attributes.push(string_attribute("podtrace.cri.sandbox_id", sandbox_id));
        }
        if let Some(container_id) = &container_id {
            attributes.push((
                "container.id".to_owned(),
                AttributeValue::String(container_id.clone()),
            ));
        }
        if let Some(code) = call.status_code {
            attributes.push((
                "rpc.grpc.status_code".to_owned(),
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
            name: format!("{}/{}", call.service, call.method),
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
            if self.sandbox_windows.len() >= MAX_SANDBOX_WINDOWS {
                self.sandbox_windows.pop_front();
            }
            self.sandbox_windows.push_back(SandboxWindow {
                method,
                sandbox_id: sandbox_id.clone(),
                span_id: span.span_id,
                start_ns,
                end_ns,
            });
        }
        let mut spans = Vec::new();
        match call.side {
            Side::Client => {
                if self.client_calls.len() >= MAX_ENTRIES {
                    self.client_calls.clear();
                }
                self.client_calls.insert(span.span_id, end);
                // containerd not followed: the kubelet's side ends the node span.
                let server_held = self.held.iter().any(|held| held.client == span.span_id);
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
                if self.held.len() >= MAX_ENTRIES {
                    self.unattributed += 1;
                } else {
                    let closes_node = closes_node(&call.method, &span.status);
                    self.held.push(HeldServerSpan {
                        span,
                        client,
                        pod: pod.clone(),
                        deadline_ns: now.max(call.end_ts_ns.unwrap_or(0)) + CLIENT_WAIT_NS,
                        closes_node,
                    });
                }
            }
        }
        spans.extend(self.release_held(now, false));
        spans.extend(self.attribute_pending(now));
        spans
    }

    /// Keeps an answered ImageStatus call until a PullImage or
    /// CreateContainer of its image names its Pod.
    fn hold_image_call(&mut self, call: &CriMessage) {
        let has_image = call.facts.as_ref().is_some_and(|f| f.image.is_some());
        if call.method != "ImageStatus" || !has_image || call.end_ts_ns.is_none() {
            return;
        }
        if self.image_calls.len() >= MAX_IMAGE_CALLS {
            self.image_calls.pop_front();
        }
        self.image_calls.push_back(call.clone());
    }

    /// Drops ImageStatus calls no Pod claimed in time: they were about no
    /// Pod this node created (an image the Pod may not pull is the Pod
    /// status's to tell, not a guess of ours).
    fn expire_image_calls(&mut self, now_ns: u64) {
        let recent = |held: &CriMessage| {
            held.end_ts_ns
                .is_some_and(|end| now_ns.saturating_sub(end) <= IMAGE_CLAIM_NS)
        };
        self.image_calls.retain(recent);
        self.refused_image_calls.retain(recent);
        // A Pod whose container never comes (an image it may not pull)
        // stops counting as a competitor.
        self.awaiting_container
            .retain(|_, since| now_ns.saturating_sub(*since) <= PENDING_NS);
    }

    /// The spans of the ImageStatus calls `call` (a PullImage or
    /// CreateContainer of `pod`) follows: made on the same side, of the
    /// same image, after the Pod's sandbox was answered and before `call`
    /// began, ended within [`IMAGE_CLAIM_NS`] of it (the
    /// kubelet asks twice per container: whether the image is there, then
    /// its user). They are the Pod's only when no other Pod on this side
    /// that has its sandbox and not yet its first container made a call
    /// within [`COMPETING_NS`] before or while they were asked: Pods of one
    /// image created at once ask alike, and which asked what is not guessed
    /// (those calls make no span, as before they were matched). Also
    /// returns what the claimed calls found.
    fn claim_image_calls(
        &mut self,
        call: &CriMessage,
        pod: &Pod,
    ) -> (Vec<Span>, Vec<ContainerFacts>) {
        let (Some(facts), Some(start)) = (&call.facts, call.start_ts_ns) else {
            return (Vec::new(), Vec::new());
        };
        let mut found = self.take_mirrored_statuses(call.side, pod);
        // Asked after the Pod's sandbox was there (the sandbox seen).
        let Some(&sandbox_ready) = self.sandbox_ready.get(&(call.side, pod.uid.clone())) else {
            return (Vec::new(), found);
        };
        let candidate = |held: &CriMessage| {
            held.side == call.side
                && held.start_ts_ns.is_some_and(|asked| asked >= sandbox_ready)
                && held
                    .end_ts_ns
                    .is_some_and(|end| end <= start && start - end <= IMAGE_CLAIM_NS)
                && held.facts.as_ref().is_some_and(|h| same_image(h, facts))
        };
        let asked = self
            .image_calls
            .iter()
            .filter(|held| candidate(held))
            .filter_map(|held| held.start_ts_ns.zip(held.end_ts_ns));
        let Some((first_asked, last_asked)) = asked.reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
        else {
            return (Vec::new(), found);
        };
        let competing = self.awaiting_container.iter().any(|((side, uid), last)| {
            *side == call.side
                && *uid != pod.uid
                && *last <= last_asked
                && *last + COMPETING_NS >= first_asked
        });
        let (claimed, rest): (VecDeque<CriMessage>, VecDeque<CriMessage>) =
            std::mem::take(&mut self.image_calls)
                .into_iter()
                .partition(|held| candidate(held));
        self.image_calls = rest;
        if competing {
            if self.refused_image_calls.len() + claimed.len() > MAX_IMAGE_CALLS {
                self.refused_image_calls.clear();
            }
            self.refused_image_calls.extend(claimed);
            return (Vec::new(), found);
        }
        // The same calls seen from the other end of their connection are
        // the same Pod's, whatever the timing there said: the kubelet's and
        // containerd's views of a burst differ by a few milliseconds, enough
        // for one end to see a competitor where the other sees none.
        let (waiting, refused) = self.take_mirrors(&claimed);
        // Where this node sees the other end of the Pod's calls too, a call
        // whose other view is not there (its headers were not decoded on a
        // connection older than podtrace) is not shown alone: that view may
        // have been claimed by another Pod's timing, and a handling without
        // its caller would read as a call nobody made.
        let other_end = match call.side {
            Side::Server => Side::Client,
            Side::Client => Side::Server,
        };
        let pairs_seen = self
            .sandbox_ready
            .contains_key(&(other_end, pod.uid.clone()));
        let unpaired = |held: &CriMessage| {
            pairs_seen
                && !waiting
                    .iter()
                    .chain(&refused)
                    .any(|other| same_call(held, other))
        };
        let now = call.end_ts_ns.unwrap_or(start);
        let mut spans = Vec::new();
        let mut mirrored = Vec::new();
        let claimed: Vec<(CriMessage, bool)> = claimed
            .into_iter()
            .map(|held| {
                let alone = unpaired(&held);
                (held, alone)
            })
            .collect();
        for (held, mirror, alone) in claimed
            .into_iter()
            .map(|(held, alone)| (held, Mirror::No, alone))
            .chain(
                waiting
                    .into_iter()
                    .map(|held| (held, Mirror::Waiting, false)),
            )
            .chain(
                refused
                    .into_iter()
                    .map(|held| (held, Mirror::Refused, false)),
            )
        {
            let held_facts = held.facts.as_deref().cloned().unwrap_or_default();
            if alone {
                self.unpaired_image_calls += 1;
            } else {
                let attributes = image_attributes(&held_facts);
                spans.extend(self.call_spans(&held, pod, None, None, attributes, now));
            }
            match mirror {
                Mirror::No => found.push(held_facts),
                // Its end's CreateContainer is still to come, and will
                // want to know what it found.
                Mirror::Waiting => mirrored.push((held.side, held_facts)),
                Mirror::Refused => {}
            }
        }
        for (side, facts) in mirrored {
            if self.mirrored_statuses.len() >= MAX_ENTRIES {
                self.mirrored_statuses.clear();
            }
            self.mirrored_statuses
                .entry((side, pod.uid.clone()))
                .or_default()
                .push(facts);
        }
        (spans, found)
    }

    /// Takes the other end's view of each of `claimed` ([`same_call`]): from
    /// the held calls (that end's claim is to come) and from the refused
    /// ones (it came and left them).
    fn take_mirrors(
        &mut self,
        claimed: &VecDeque<CriMessage>,
    ) -> (VecDeque<CriMessage>, VecDeque<CriMessage>) {
        let take = |held: &mut VecDeque<CriMessage>| {
            let (taken, rest): (VecDeque<CriMessage>, VecDeque<CriMessage>) = std::mem::take(held)
                .into_iter()
                .partition(|other| claimed.iter().any(|call| same_call(call, other)));
            *held = rest;
            taken
        };
        (
            take(&mut self.image_calls),
            take(&mut self.refused_image_calls),
        )
    }

    /// What the ImageStatus calls of `pod` on `side`, taken with their other
    /// end's claim, found.
    fn take_mirrored_statuses(&mut self, side: Side, pod: &Pod) -> Vec<ContainerFacts> {
        self.mirrored_statuses
            .remove(&(side, pod.uid.clone()))
            .unwrap_or_default()
    }

    fn note_pull(&mut self, pod: &Pod, side: Side, facts: &ContainerFacts) {
        if self.pulls.len() >= MAX_ENTRIES && !self.pulls.contains_key(&pod.uid) {
            self.pulls.clear();
        }
        let pulls = self.pulls.entry(pod.uid.clone()).or_default();
        if pulls.len() >= MAX_PULLS_PER_POD {
            pulls.remove(0);
        }
        pulls.push((side, facts.clone()));
    }

    /// A CreateContainer's name, image and where the image came from:
    /// pulled when a PullImage of it for the Pod (or an ImageStatus that
    /// found it absent) came before, present when the ImageStatus before
    /// found it.
    fn container_image(
        &self,
        call: &CriMessage,
        pod: &Pod,
        statuses: &[ContainerFacts],
    ) -> ContainerImage {
        let Some(facts) = &call.facts else {
            return ContainerImage::default();
        };
        let pull = self.pulls.get(&pod.uid).and_then(|pulls| {
            pulls
                .iter()
                .rev()
                .find(|(side, pulled)| *side == call.side && same_image(pulled, facts))
                .map(|(_, pulled)| pulled)
        });
        let status = statuses.first();
        let source = match (pull, status.and_then(|s| s.image_present)) {
            (Some(_), _) | (None, Some(false)) => Some(IMAGE_PULLED),
            (None, Some(true)) => Some(IMAGE_PRESENT),
            (None, None) => None,
        };
        // Kubelets before 1.30 send only the id: the name is the pull's or
        // the status's.
        let image = facts
            .image
            .clone()
            .or_else(|| pull.and_then(|p| p.image.clone()))
            .or_else(|| status.and_then(|s| s.image.clone()));
        ContainerImage {
            container_name: facts.container_name.clone(),
            image,
            source,
        }
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
        let mut spans = Vec::new();
        for mut held in std::mem::take(&mut self.held) {
            let client_end = self.client_calls.get(&held.client).copied();
            if client_end.is_none() && !all && now_ns < held.deadline_ns {
                self.held.push(held);
                continue;
            }
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
        if self.closed_nodes.len() >= MAX_ENTRIES {
            self.closed_nodes.clear();
        }
        self.closed_nodes.insert(pod.uid.clone());
        Some(Span {
            trace_id: pod.trace,
            span_id: self.node_span_id(pod.trace),
            parent_span_id: Some(SpanId::well_known(pod.trace, "root")),
            name: format!("node {}", self.node_name),
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
        attributes.push(string_attribute("k8s.node.name", &self.node_name));
        attributes
    }

    /// Notes a runc execution (`runc … create|start … <container id>`), or
    /// a container's first process replacing runc init.
    pub fn on_exec(&mut self, exec: &ExecRecord) -> Vec<Span> {
        if let Some(container_id) = self.container_inits.get(&exec.ids.tgid) {
            // runc create runs `runc init` (an exec of runc itself, argv
            // `runc init`); the next exec is the container's own process.
            if exec.argv.get(1).map(String::as_str) != Some("init") {
                let container_id = container_id.clone();
                self.container_inits.remove(&exec.ids.tgid);
                if self.container_processes.len() < MAX_ENTRIES {
                    self.container_processes
                        .insert(exec.ids.tgid, (container_id.clone(), exec.comm.clone()));
                }
                return self.hold(Pending::Process(ContainerProcess {
                    container_id,
                    pid: exec.ids.tgid,
                    executable: exec.comm.clone(),
                    ts_ns: exec.ids.ts_ns,
                    exit: None,
                }));
            }
            return Vec::new();
        }
        if self.runc_runs.len() >= MAX_ENTRIES || self.cni_runs.len() >= MAX_ENTRIES {
            self.unattributed += 1;
            return Vec::new();
        }
        if exec.filename.contains("/cni/") {
            let parent = self
                .cni_runs
                .get(&exec.ppid)
                .map(|parent| (exec.ppid, parent.plugin.clone()));
            self.cni_runs.insert(
                exec.ids.tgid,
                CniStart {
                    plugin: exec.comm.clone(),
                    parent,
                    start_ns: exec.ids.ts_ns,
                    sandbox_id: None,
                },
            );
            return Vec::new();
        }
        let run = if exec.comm == "runc" {
            // runc [global options] create|start|delete … <container id>,
            // runc [global options] kill [--all] <container id> [signal]
            let at = exec
                .argv
                .iter()
                .position(|arg| matches!(arg.as_str(), "create" | "start" | "delete" | "kill"));
            at.and_then(|at| {
                let subcommand = &exec.argv[at];
                let id = if subcommand == "kill" {
                    exec.argv[at + 1..].iter().find(|arg| !arg.starts_with('-'))
                } else {
                    exec.argv.last()
                };
                Some(subcommand).zip(id)
            })
        } else if exec.comm.starts_with("containerd-shim") {
            // containerd-shim-runc-v2 -namespace … -id <container id> start
            let id = exec
                .argv
                .iter()
                .position(|arg| arg == "-id")
                .and_then(|at| exec.argv.get(at + 1));
            exec.argv.last().filter(|last| *last == "start").zip(id)
        } else {
            None
        };
        if let Some((subcommand, container_id)) = run {
            // The file's name: comm is cut at 15 bytes (`containerd-shim`).
            let executable = exec.filename.rsplit('/').next().unwrap_or(&exec.comm);
            let run = RuncRun {
                executable: executable.to_owned(),
                subcommand: subcommand.clone(),
                container_id: container_id.clone(),
                start_ns: exec.ids.ts_ns,
            };
            self.runc_runs.insert(exec.ids.tgid, run);
        }
        Vec::new()
    }

    /// A CNI plugin that just began was told its sandbox (the exec's
    /// record comes first).
    pub fn on_cni_exec(&mut self, tgid: u32, sandbox_id: String) {
        if let Some(run) = self.cni_runs.get_mut(&tgid) {
            run.sandbox_id = Some(sandbox_id);
        }
    }

    /// Follows `runc create`'s children (runc init and the processes it
    /// clones): one of them becomes the container's first process.
    pub fn on_fork(&mut self, fork: &ForkRecord) {
        let container_id = match self.runc_runs.get(&fork.parent_tgid) {
            Some(run) if run.executable == "runc" && run.subcommand == "create" => {
                Some(run.container_id.clone())
            }
            _ => self.container_inits.get(&fork.parent_tgid).cloned(),
        };
        if let Some(container_id) = container_id {
            if self.container_inits.len() < MAX_ENTRIES {
                self.container_inits.insert(fork.ids.tgid, container_id);
            } else {
                self.unattributed += 1;
            }
        }
    }

    /// A process ended: the span of a runc execution (now, or once the CRI
    /// calls name its container), a child of the call that caused it —
    /// StartContainer for a workload container, RunPodSandbox for the
    /// sandbox's own container — or the exit of a container's first process.
    pub fn on_exit(&mut self, exit: &ExitRecord) -> Vec<Span> {
        self.container_inits.remove(&exit.ids.tgid);
        if let Some((container_id, executable)) = self.container_processes.remove(&exit.ids.tgid) {
            return self.hold(Pending::Process(ContainerProcess {
                container_id,
                pid: exit.ids.tgid,
                executable,
                ts_ns: exit.ids.ts_ns,
                exit: Some(exit.status),
            }));
        }
        if let Some(cni) = self.cni_runs.remove(&exit.ids.tgid) {
            let (parent_pid, parent_plugin) = cni.parent.unzip();
            return self.hold(Pending::Cni(CniRun {
                plugin: cni.plugin,
                pid: exit.ids.tgid,
                parent_pid,
                parent_plugin,
                sandbox_id: cni.sandbox_id,
                start_ns: cni.start_ns,
                end_ns: exit.ids.ts_ns,
                status: exit.status,
            }));
        }
        let Some(run) = self.runc_runs.remove(&exit.ids.tgid) else {
            return Vec::new();
        };
        self.hold(Pending::Run(FinishedRun {
            run,
            pid: exit.ids.tgid,
            end_ns: exit.ids.ts_ns,
            status: exit.status,
        }))
    }

    /// Queues a span for its Pod; returns every queued span whose Pod is known.
    fn hold(&mut self, pending: Pending) -> Vec<Span> {
        let now = pending.ts_ns();
        if self.pending.len() >= MAX_ENTRIES {
            self.unattributed += 1;
        } else {
            self.pending.push(pending);
        }
        self.attribute_pending(now)
    }

    /// Spans of the pending node events whose Pod is now known; those
    /// pending for longer than `PENDING_NS` at `now_ns` are given up and counted.
    fn attribute_pending(&mut self, now_ns: u64) -> Vec<Span> {
        let mut pending = std::mem::take(&mut self.pending);
        // CNI plugins that another ran go where that one went: it first.
        pending.sort_by_key(
            |waiting| matches!(waiting, Pending::Cni(run) if run.parent_pid.is_some()),
        );
        let mut spans = Vec::new();
        for waiting in pending {
            let span = match &waiting {
                Pending::Run(run) => self.runc_span(run),
                Pending::Process(process) => self.process_span(process),
                Pending::Cni(run) => match self.cni_span(run, now_ns) {
                    Ok(span) => span,
                    Err(Ambiguous) => {
                        self.unattributed += 1;
                        self.cni_ambiguous += 1;
                        continue;
                    }
                },
            };
            match span {
                Some(span) => spans.push(span),
                None if now_ns.saturating_sub(waiting.ts_ns()) > PENDING_NS => {
                    self.unattributed += 1
                }
                None => self.pending.push(waiting),
            }
        }
        spans
    }

    /// The Pod of a container and the CRI call its runc runs and first
    /// process belong to. containerd (1.6, 1.7) creates a workload's runc
    /// container in StartContainer, not CreateContainer (which only prepares
    /// it): its runc runs are children of StartContainer; the sandbox's own
    /// container is created and started by RunPodSandbox.
    fn container_parent(&self, container_id: &str) -> Option<(&Pod, SpanId)> {
        let (sandbox_id, parent_method) = match self.sandbox_by_container.get(container_id) {
            Some(sandbox_id) => (sandbox_id.as_str(), "StartContainer"),
            None => (container_id, "RunPodSandbox"),
        };
        let pod = self.pods_by_sandbox.get(sandbox_id)?;
        let parent = Self::call_span_id(pod.trace, Side::Server, parent_method, container_id);
        Some((pod, parent))
    }

    fn process_span(&self, process: &ContainerProcess) -> Option<Span> {
        let (pod, parent) = self.container_parent(&process.container_id)?;
        let mut attributes = vec![
            (
                "process.pid".to_owned(),
                AttributeValue::Int(i64::from(process.pid)),
            ),
            string_attribute("process.executable.name", &process.executable),
            string_attribute("container.id", &process.container_id),
        ];
        if let Some(image) = self.container_images.get(&process.container_id) {
            attributes.extend(container_attributes(image));
        }
        let (name, role, status) = match process.exit {
            None => (
                format!("container process start: {}", process.executable),
                "exec",
                SpanStatus::Unset,
            ),
            Some(status) => {
                let (code, status) = exit_status(status);
                attributes.push(("process.exit.code".to_owned(), AttributeValue::Int(code)));
                (
                    format!("container process exit: {}", process.executable),
                    "exit",
                    status,
                )
            }
        };
        attributes.extend(self.pod_attributes(pod));
        let ts = self.clock.unix_ns(process.ts_ns);
        Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::for_key(
                pod.trace,
                format!("container/{role}/{}/{}", process.container_id, process.pid).as_bytes(),
            ),
            parent_span_id: Some(parent),
            name,
            kind: SpanKind::Internal,
            start_unix_ns: ts,
            end_unix_ns: ts,
            attributes,
            status,
            links: Vec::new(),
        })
    }

    /// The span of a CNI plugin run, under the RunPodSandbox (ADD),
    /// StopPodSandbox or RemovePodSandbox (DEL) call that ran it: the call
    /// for the sandbox its `CNI_CONTAINERID` names that it ran inside.
    /// Without that value (a runtime that does not set it, a recording made
    /// before podtrace read it) the run is matched to the only such call
    /// containerd was handling while it ran — once concurrent calls have had
    /// time to finish — and is counted unattributed when two were.
    fn cni_span(&mut self, run: &CniRun, now_ns: u64) -> Result<Option<Span>, Ambiguous> {
        if run.sandbox_id.is_none() && now_ns.saturating_sub(run.end_ns) < CNI_SETTLE_NS {
            return Ok(None);
        }
        let window = match run.parent_pid {
            // A plugin another ran goes where that one went, once it has:
            // its own shorter run may fit one call where its parent's
            // fits two, and it must not hang from a span that is not sent.
            Some(parent) => match self.cni_calls.get(&parent) {
                Some((call, _)) => call.clone()?,
                None => return Ok(None),
            },
            None => {
                let mut windows = self.sandbox_windows.iter().filter(|w| {
                    w.start_ns <= run.start_ns
                        && run.end_ns <= w.end_ns
                        && run.sandbox_id.as_ref().is_none_or(|id| *id == w.sandbox_id)
                });
                let call = match (windows.next(), windows.next()) {
                    (None, _) => return Ok(None),
                    (Some(window), None) => Ok(window.clone()),
                    (Some(_), Some(_)) => Err(Ambiguous),
                };
                self.cni_calls
                    .retain(|_, (_, end)| run.end_ns.saturating_sub(*end) <= PENDING_NS);
                self.cni_calls.insert(run.pid, (call.clone(), run.end_ns));
                call?
            }
        };
        let sandbox_id = &window.sandbox_id;
        let Some(pod) = self.pods_by_sandbox.get(sandbox_id) else {
            return Ok(None);
        };
        let parent = match (&run.parent_plugin, run.parent_pid) {
            (Some(plugin), Some(pid)) => {
                SpanId::for_key(pod.trace, format!("cni/{plugin}/{pid}").as_bytes())
            }
            _ => window.span_id,
        };
        let (code, status) = exit_status(run.status);
        let mut attributes = vec![
            (
                "process.pid".to_owned(),
                AttributeValue::Int(i64::from(run.pid)),
            ),
            string_attribute("process.executable.name", &run.plugin),
            ("process.exit.code".to_owned(), AttributeValue::Int(code)),
            string_attribute("podtrace.cri.sandbox_id", sandbox_id),
            // ADD for RunPodSandbox, DEL for the teardown calls: which
            // trace of the Pod the run belongs to.
            string_attribute("podtrace.cni.call", window.method),
            string_attribute(
                "podtrace.attribution",
                if run.sandbox_id.is_some() {
                    "CNI_CONTAINERID: the sandbox the runtime named"
                } else {
                    "time: the only sandbox call in progress"
                },
            ),
        ];
        attributes.extend(self.pod_attributes(pod));
        Ok(Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::for_key(
                pod.trace,
                format!("cni/{}/{}", run.plugin, run.pid).as_bytes(),
            ),
            parent_span_id: Some(parent),
            name: format!("CNI {}", run.plugin),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(run.start_ns),
            end_unix_ns: self.clock.unix_ns(run.end_ns),
            attributes,
            status,
            links: Vec::new(),
        }))
    }

    fn runc_span(&self, finished: &FinishedRun) -> Option<Span> {
        let run = &finished.run;
        let (pod, mut parent) = self.container_parent(&run.container_id)?;
        if !matches!(run.subcommand.as_str(), "create" | "start") {
            // delete and kill come with stopping and removing, later: under
            // the node span, not the call that started the container.
            parent = self.node_span_id(pod.trace);
        }
        let mut attributes = vec![
            (
                "process.pid".to_owned(),
                AttributeValue::Int(i64::from(finished.pid)),
            ),
            string_attribute("process.executable.name", &run.executable),
            string_attribute("container.id", &run.container_id),
        ];
        let (code, status) = exit_status(finished.status);
        attributes.push(("process.exit.code".to_owned(), AttributeValue::Int(code)));
        attributes.extend(self.pod_attributes(pod));
        Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::for_key(
                pod.trace,
                // containerd runs `runc delete` twice per container (the
                // shim's delete and its cleanup): the pid tells them apart.
                format!(
                    "{}/{}/{}/{}",
                    run.executable, run.subcommand, run.container_id, finished.pid
                )
                .as_bytes(),
            ),
            parent_span_id: Some(parent),
            name: format!("{} {}", run.executable, run.subcommand),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(run.start_ns),
            end_unix_ns: self.clock.unix_ns(finished.end_ns),
            attributes,
            status,
            links: Vec::new(),
        })
    }
}

/// A CNI run overlapped more than one RunPodSandbox call.
#[derive(Clone, Debug)]
struct Ambiguous;

/// An image reference with the tag the kubelet adds when it has none
/// (`busybox` → `busybox:latest`), so the Pod's spelling and the
/// kubelet's compare equal.
fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_owned()
    } else {
        format!("{image}:latest")
    }
}

/// Where an ImageStatus call a claim takes comes from.
enum Mirror {
    /// The claiming end's own.
    No,
    /// The other end's view, held for its own claim.
    Waiting,
    /// The other end's view, which that end's claim left to no Pod.
    Refused,
}

/// Whether `a` and `b` are one call seen from both ends of its connection:
/// one made it, the other handled it, on the same HTTP/2 stream (the same
/// number at both ends), with the handling inside the caller's wait (both
/// ends are on this node: one clock).
fn same_call(a: &CriMessage, b: &CriMessage) -> bool {
    let (client, server) = match (a.side, b.side) {
        (Side::Client, Side::Server) => (a, b),
        (Side::Server, Side::Client) => (b, a),
        _ => return false,
    };
    let nested = match (
        client.start_ts_ns,
        server.start_ts_ns,
        server.end_ts_ns,
        client.end_ts_ns,
    ) {
        (Some(asked), Some(handled), Some(answered), Some(heard)) => {
            asked <= handled && answered <= heard
        }
        _ => false,
    };
    nested && client.method == server.method && client.stream_id == server.stream_id
}

/// Whether two calls are about the same image: a reference or an id in
/// common.
fn same_image(a: &ContainerFacts, b: &ContainerFacts) -> bool {
    let names = |facts: &ContainerFacts| {
        [&facts.image, &facts.image_id]
            .into_iter()
            .flatten()
            .map(|name| with_default_tag(name))
            .collect::<Vec<_>>()
    };
    let theirs = names(b);
    names(a).iter().any(|name| theirs.contains(name))
}

/// `container.image.name`, `container.image.id` and, for ImageStatus,
/// `podtrace.container.image.present`.
fn image_attributes(facts: &ContainerFacts) -> Vec<(String, AttributeValue)> {
    let mut attributes = Vec::new();
    if let Some(image) = &facts.image {
        attributes.push(string_attribute("container.image.name", image));
    }
    if let Some(id) = &facts.image_id {
        attributes.push(string_attribute("container.image.id", id));
    }
    if let Some(present) = facts.image_present {
        attributes.push((
            "podtrace.container.image.present".to_owned(),
            AttributeValue::Bool(present),
        ));
    }
    attributes
}

/// `k8s.container.name`, `container.image.name` and
/// `podtrace.container.image.source` of a created container.
fn container_attributes(image: &ContainerImage) -> Vec<(String, AttributeValue)> {
    let mut attributes = Vec::new();
    if let Some(name) = &image.container_name {
        attributes.push(string_attribute("k8s.container.name", name));
    }
    if let Some(name) = &image.image {
        attributes.push(string_attribute("container.image.name", name));
    }
    if let Some(source) = image.source {
        attributes.push(string_attribute("podtrace.container.image.source", source));
    }
    attributes
}

/// `container.security.*`: the security context the kubelet asked for.
fn security_attributes(security: &SecurityFacts) -> Vec<(String, AttributeValue)> {
    let mut attributes = vec![(
        "container.security.privileged".to_owned(),
        AttributeValue::Bool(security.privileged),
    )];
    if !security.capabilities_added.is_empty() {
        attributes.push(string_attribute(
            "container.security.capabilities.added",
            &security.capabilities_added.join(","),
        ));
    }
    if !security.capabilities_dropped.is_empty() {
        attributes.push(string_attribute(
            "container.security.capabilities.dropped",
            &security.capabilities_dropped.join(","),
        ));
    }
    if let Some(user) = security.run_as_user {
        attributes.push((
            "container.security.run_as_user".to_owned(),
            AttributeValue::Int(user),
        ));
    }
    if let Some(seccomp) = &security.seccomp {
        attributes.push(string_attribute("container.security.seccomp", seccomp));
    }
    if let Some(apparmor) = &security.apparmor {
        attributes.push(string_attribute("container.security.apparmor", apparmor));
    }
    attributes
}

/// `process.exit.code` (128 + signal when killed, as shells report it) and
/// the span status of an exit.
fn exit_status(status: ExitStatus) -> (i64, SpanStatus) {
    match status {
        ExitStatus::Code(0) => (0, SpanStatus::Unset),
        ExitStatus::Code(code) => (
            i64::from(code),
            SpanStatus::Error(format!("exit code {code}")),
        ),
        ExitStatus::Signal(signal) => (
            128 + i64::from(signal),
            SpanStatus::Error(format!("killed by signal {signal}")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use tracer_decode::{
        cri::{SandboxPod, SecurityFacts},
        identity::PodIdentity,
    };

    use super::*;
    use tracer_common::config::TargetReason;

    use crate::capture::{ConnKey, ProcessIds};

    const MS: u64 = 1_000_000;
    const ID: &str = "sha256:6fd955f66c231c1a946653170d096a28ac2b2052a02080c0b84ec082a07f7d12";

    fn node() -> NodeSpans {
        NodeSpans::new(WallClock::from_offset(0), "c".into(), "node-a".into())
    }

    fn call(
        side: Side,
        stream_id: u32,
        method: &str,
        clues: Vec<PodClue>,
        facts: Option<ContainerFacts>,
        start_ms: u64,
        end_ms: u64,
    ) -> CriMessage {
        let service = if matches!(method, "ImageStatus" | "PullImage") {
            "runtime.v1.ImageService"
        } else {
            "runtime.v1.RuntimeService"
        };
        CriMessage {
            conn: ConnKey {
                tgid: 1,
                conn_id: u64::from(matches!(side, Side::Server)),
            },
            stream_id,
            side,
            service: service.into(),
            method: method.into(),
            clues,
            facts: facts.map(Box::new),
            status_code: Some(0),
            status_message: None,
            start_ts_ns: Some(start_ms * MS),
            end_ts_ns: Some(end_ms * MS),
        }
    }

    fn run_pod_sandbox(side: Side) -> CriMessage {
        let pod = PodIdentity {
            namespace: Some("default".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            ..PodIdentity::default()
        };
        call(
            side,
            1,
            "RunPodSandbox",
            vec![PodClue::Sandbox {
                pod,
                sandbox_id: Some("sb".into()),
            }],
            None,
            0,
            100,
        )
    }

    fn image_status(side: Side, stream_id: u32, present: bool, at_ms: u64) -> CriMessage {
        let facts = ContainerFacts {
            image: Some("busybox:1.36".into()),
            image_id: present.then(|| ID.into()),
            image_present: Some(present),
            ..ContainerFacts::default()
        };
        call(
            side,
            stream_id,
            "ImageStatus",
            Vec::new(),
            Some(facts),
            at_ms,
            at_ms + 2,
        )
    }

    fn create_container(side: Side) -> CriMessage {
        let facts = ContainerFacts {
            container_name: Some("c".into()),
            image: Some("busybox:1.36".into()),
            image_id: Some(ID.into()),
            security: Some(SecurityFacts {
                privileged: true,
                capabilities_added: vec!["NET_ADMIN".into(), "SYS_TIME".into()],
                run_as_user: Some(0),
                seccomp: Some("RuntimeDefault".into()),
                ..SecurityFacts::default()
            }),
            ..ContainerFacts::default()
        };
        call(
            side,
            5,
            "CreateContainer",
            vec![PodClue::SandboxCall {
                sandbox_id: "sb".into(),
                container_id: Some("ctr".into()),
            }],
            Some(facts),
            200,
            250,
        )
    }

    fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a AttributeValue> {
        span.attributes
            .iter()
            .find_map(|(name, value)| (name == key).then_some(value))
    }

    fn string(value: &str) -> Option<AttributeValue> {
        Some(AttributeValue::String(value.into()))
    }

    fn cni_ids(pid: u32, ms: u64) -> ProcessIds {
        ProcessIds {
            ts_ns: ms * MS,
            tgid: pid,
            tid: pid,
        }
    }

    /// CNI plugin `plugin` starts as `pid`, run by `ppid`, at `ms`.
    fn cni_exec(node: &mut NodeSpans, plugin: &str, pid: u32, ppid: u32, ms: u64) {
        node.on_exec(&ExecRecord {
            ids: cni_ids(pid, ms),
            ppid,
            cgroup_id: 1,
            target: TargetReason::Descendant,
            depth: 1,
            comm: plugin.into(),
            filename: format!("/usr/lib/cni/{plugin}"),
            filename_truncated: false,
            argv: vec![plugin.into()],
            argv_truncated: false,
            cgroup_path: None,
        });
    }

    fn cni_exit(node: &mut NodeSpans, pid: u32, ms: u64) -> Vec<Span> {
        node.on_exit(&ExitRecord {
            ids: cni_ids(pid, ms),
            cgroup_id: 1,
            status: ExitStatus::Code(0),
            comm: String::new(),
        })
    }

    /// A CRI call's span ids, as every agent derives them (the same key
    /// as `span::tests::ids_are_pinned`): both sides, distinct.
    #[test]
    fn cri_call_span_ids_are_pinned() {
        let trace = TraceId::for_pod("prod", "5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10");
        let id = |side| NodeSpans::call_span_id(trace, side, "RunPodSandbox", "4ae49f66").to_hex();
        assert_eq!(id(Side::Server), "9b1e6c67d8a8388d");
        assert_eq!(id(Side::Client), "45704fb520273bc4");
    }

    #[test]
    fn a_cni_plugin_another_ran_goes_where_its_parent_went() {
        let mut node = node();
        let mut spans = node.on_cri(&run_pod_sandbox(Side::Server));
        // RunPodSandbox (0–100 ms) runs ptp, which runs host-local.
        cni_exec(&mut node, "ptp", 10, 1, 20);
        cni_exec(&mut node, "host-local", 11, 10, 30);
        spans.extend(cni_exit(&mut node, 11, 40));
        spans.extend(cni_exit(&mut node, 10, 50));
        // A ptp whose exit is seen after the call's end: no call holds it,
        // and the host-local it ran, which the call holds, must not hang
        // from it.
        cni_exec(&mut node, "ptp", 20, 1, 55);
        cni_exec(&mut node, "host-local", 21, 20, 60);
        spans.extend(cni_exit(&mut node, 21, 70));
        spans.extend(cni_exit(&mut node, 20, 101));
        spans.extend(node.tick(2_000 * MS));
        let cni: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name.starts_with("CNI "))
            .collect();
        assert_eq!(cni.len(), 2, "{cni:#?}");
        let ptp = cni.iter().find(|s| s.name == "CNI ptp").unwrap();
        let host_local = cni.iter().find(|s| s.name == "CNI host-local").unwrap();
        assert_eq!(host_local.parent_span_id, Some(ptp.span_id));
        assert_eq!(
            attribute(ptp, "process.pid"),
            Some(&AttributeValue::Int(10))
        );
    }

    #[test]
    fn a_cni_plugin_goes_to_the_sandbox_its_environment_names() {
        let mut node = node();
        let mut spans = node.on_cri(&run_pod_sandbox(Side::Server));
        // A second Pod's RunPodSandbox (10–90 ms) inside the first's.
        let other = PodIdentity {
            namespace: Some("default".into()),
            name: Some("db".into()),
            uid: Some("u-2".into()),
            ..PodIdentity::default()
        };
        let other_sandbox = PodClue::Sandbox {
            pod: other,
            sandbox_id: Some("sb2".into()),
        };
        let mut second = call(
            Side::Server,
            3,
            "RunPodSandbox",
            vec![other_sandbox],
            None,
            10,
            90,
        );
        second.conn.conn_id = 7;
        spans.extend(node.on_cri(&second));
        // Both calls were in progress while each plugin ran: the one that
        // said its sandbox goes to it, the one that did not is counted.
        cni_exec(&mut node, "ptp", 10, 1, 20);
        node.on_cni_exec(10, "sb2".into());
        spans.extend(cni_exit(&mut node, 10, 30));
        cni_exec(&mut node, "ptp", 11, 1, 40);
        spans.extend(cni_exit(&mut node, 11, 50));
        spans.extend(node.tick(2_000 * MS));
        let cni: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name.starts_with("CNI "))
            .collect();
        assert_eq!(cni.len(), 1, "{cni:#?}");
        assert_eq!(cni[0].string_attribute("k8s.pod.uid"), Some("u-2"));
        assert_eq!(
            attribute(cni[0], "process.pid"),
            Some(&AttributeValue::Int(10))
        );
        assert_eq!((node.unattributed, node.cni_ambiguous), (1, 1));
    }

    #[test]
    fn the_node_span_goes_out_once_when_the_kubelets_side_comes_late() {
        let mut node = node();
        let mut spans = Vec::new();
        for side in [Side::Server, Side::Client] {
            spans.extend(node.on_cri(&run_pod_sandbox(side)));
        }
        let start = |side, (from, to)| {
            let clue = PodClue::SandboxCall {
                sandbox_id: "sb".into(),
                container_id: Some("ctr".into()),
            };
            call(side, 9, "StartContainer", vec![clue], None, from, to)
        };
        spans.extend(node.on_cri(&start(Side::Server, (300, 350))));
        // The kubelet's side comes after the server span stopped waiting.
        spans.extend(node.tick(351 * MS + CLIENT_WAIT_NS));
        spans.extend(node.on_cri(&start(Side::Client, (299, 351))));
        spans.extend(node.finish());
        let nodes: Vec<_> = spans.iter().filter(|s| s.name == "node node-a").collect();
        assert_eq!(nodes.len(), 1, "{nodes:#?}");
        assert_eq!(nodes[0].start_unix_ns, 0, "from the Pod's first call");
    }

    #[test]
    fn image_and_security_facts_land_on_the_cri_spans() {
        let mut node = node();
        let mut spans = Vec::new();
        for side in [Side::Server, Side::Client] {
            spans.extend(node.on_cri(&run_pod_sandbox(side)));
        }
        for side in [Side::Server, Side::Client] {
            spans.extend(node.on_cri(&image_status(side, 3, true, 150)));
        }
        assert!(spans.iter().all(|s| !s.name.ends_with("ImageStatus")));
        for side in [Side::Server, Side::Client] {
            spans.extend(node.on_cri(&create_container(side)));
        }
        spans.extend(node.finish());

        let named = |method: &str, kind: SpanKind| {
            spans
                .iter()
                .find(|s| s.name.ends_with(method) && s.kind == kind)
                .unwrap_or_else(|| panic!("{method} {kind:?}: {spans:#?}"))
        };
        for kind in [SpanKind::Client, SpanKind::Server] {
            let status = named("/ImageStatus", kind);
            assert_eq!(
                attribute(status, "container.image.name").cloned(),
                string("busybox:1.36")
            );
            assert_eq!(
                attribute(status, "podtrace.container.image.present"),
                Some(&AttributeValue::Bool(true))
            );
            assert_eq!(status.string_attribute("k8s.pod.uid"), Some("u-1"));
            let create = named("/CreateContainer", kind);
            for (key, value) in [
                ("container.image.name", string("busybox:1.36")),
                ("container.image.id", string(ID)),
                ("k8s.container.name", string("c")),
                ("podtrace.container.image.source", string(IMAGE_PRESENT)),
                (
                    "container.security.capabilities.added",
                    string("NET_ADMIN,SYS_TIME"),
                ),
                ("container.security.seccomp", string("RuntimeDefault")),
                (
                    "container.security.privileged",
                    Some(AttributeValue::Bool(true)),
                ),
                (
                    "container.security.run_as_user",
                    Some(AttributeValue::Int(0)),
                ),
            ] {
                assert_eq!(attribute(create, key).cloned(), value, "{key}");
            }
        }
        // containerd's ImageStatus span sits under the kubelet's.
        let client = named("/ImageStatus", SpanKind::Client);
        let server = named("/ImageStatus", SpanKind::Server);
        assert_eq!(server.parent_span_id, Some(client.span_id));
        assert_eq!(node.unattributed, 0);
    }

    #[test]
    fn an_absent_image_is_pulled_for_the_pod_and_the_container_says_so() {
        let mut node = node();
        let side = Side::Client;
        let mut spans = node.on_cri(&run_pod_sandbox(side));
        spans.extend(node.on_cri(&image_status(side, 3, false, 110)));
        let pull = call(
            side,
            5,
            "PullImage",
            Vec::new(),
            Some(ContainerFacts {
                image: Some("busybox:1.36".into()),
                image_id: Some(ID.into()),
                pull_for: Some(SandboxPod {
                    namespace: "default".into(),
                    name: "web".into(),
                    uid: "u-1".into(),
                }),
                ..ContainerFacts::default()
            }),
            115,
            190,
        );
        spans.extend(node.on_cri(&pull));
        let mut create = create_container(side);
        // A kubelet before 1.30: only the id.
        if let Some(facts) = create.facts.as_mut() {
            facts.image = None;
        }
        spans.extend(node.on_cri(&create));
        let named = |method: &str| {
            spans
                .iter()
                .find(|s| s.name.ends_with(method))
                .unwrap_or_else(|| panic!("{method}: {spans:#?}"))
        };
        let status = named("/ImageStatus");
        assert_eq!(
            attribute(status, "podtrace.container.image.present"),
            Some(&AttributeValue::Bool(false))
        );
        let pull = named("/PullImage");
        assert_eq!(
            pull.string_attribute("container.image.name"),
            Some("busybox:1.36")
        );
        assert_eq!(pull.end_unix_ns - pull.start_unix_ns, 75 * MS);
        let create = named("/CreateContainer");
        assert_eq!(
            create.string_attribute("podtrace.container.image.source"),
            Some(IMAGE_PULLED)
        );
        assert_eq!(
            create.string_attribute("container.image.name"),
            Some("busybox:1.36")
        );
    }

    #[test]
    fn both_image_status_calls_of_a_container_are_its_pods() {
        let mut node = node();
        let side = Side::Client;
        let mut spans = node.on_cri(&run_pod_sandbox(side));
        // Whether the image is there, then the image's user.
        spans.extend(node.on_cri(&image_status(side, 3, true, 150)));
        spans.extend(node.on_cri(&image_status(side, 7, true, 160)));
        spans.extend(node.on_cri(&create_container(side)));
        let statuses: Vec<_> = spans
            .iter()
            .filter(|s| s.name.ends_with("/ImageStatus"))
            .collect();
        assert_eq!(statuses.len(), 2, "{spans:#?}");
        assert_ne!(statuses[0].span_id, statuses[1].span_id);
        assert!(node.image_calls.is_empty());
    }

    #[test]
    fn an_image_status_seen_at_one_end_only_is_not_shown_where_both_ends_are_seen() {
        let mut node = node();
        let mut spans = Vec::new();
        for side in [Side::Server, Side::Client] {
            spans.extend(node.on_cri(&run_pod_sandbox(side)));
        }
        // containerd handled two ImageStatus calls; the kubelet's view of
        // the first was not decoded.
        spans.extend(node.on_cri(&image_status(Side::Server, 3, true, 150)));
        let mut asked = image_status(Side::Client, 7, true, 160);
        asked.start_ts_ns = Some(159 * MS);
        spans.extend(node.on_cri(&asked));
        spans.extend(node.on_cri(&image_status(Side::Server, 7, true, 160)));
        for side in [Side::Server, Side::Client] {
            spans.extend(node.on_cri(&create_container(side)));
        }
        spans.extend(node.finish());
        let statuses: Vec<_> = spans
            .iter()
            .filter(|s| s.name.ends_with("/ImageStatus"))
            .collect();
        assert_eq!(statuses.len(), 2, "{statuses:#?}");
        let client = statuses
            .iter()
            .find(|s| s.kind == SpanKind::Client)
            .unwrap();
        let server = statuses
            .iter()
            .find(|s| s.kind == SpanKind::Server)
            .unwrap();
        assert_eq!(server.parent_span_id, Some(client.span_id));
        assert_eq!(node.unpaired_image_calls, 1);
    }

    #[test]
    fn image_status_of_two_pods_at_once_is_not_guessed() {
        let mut node = node();
        let side = Side::Client;
        let mut spans = node.on_cri(&run_pod_sandbox(side));
        spans.extend(node.on_cri(&competitor(side)));
        spans.extend(node.on_cri(&image_status(side, 3, true, 150)));
        spans.extend(node.on_cri(&image_status(side, 7, true, 160)));
        spans.extend(node.on_cri(&create_container(side)));
        assert!(spans.iter().all(|s| !s.name.ends_with("ImageStatus")));
        assert!(node.image_calls.is_empty());
        assert_eq!(node.unattributed, 0);
        let create = spans
            .iter()
            .find(|s| s.name.ends_with("/CreateContainer"))
            .expect("CreateContainer");
        assert_eq!(
            create.string_attribute("podtrace.container.image.source"),
            None
        );
        // An ImageStatus no Pod claims is about no Pod: it goes quietly.
        let mut node = self::node();
        node.on_cri(&image_status(side, 3, false, 0));
        assert!(node.tick(IMAGE_CLAIM_NS + 10 * MS).is_empty());
        assert!(node.image_calls.is_empty());
        assert_eq!(node.unattributed, 0);
    }

    /// Pod db's sandbox on `side`: its worker active when another Pod's
    /// image is asked about.
    fn competitor(side: Side) -> CriMessage {
        let mut other = run_pod_sandbox(side);
        other.clues = vec![PodClue::Sandbox {
            pod: PodIdentity {
                namespace: Some("default".into()),
                name: Some("db".into()),
                uid: Some("u-2".into()),
                ..PodIdentity::default()
            },
            sandbox_id: Some("sb-2".into()),
        }];
        other.stream_id = 9;
        other
    }

    #[test]
    fn an_image_status_claimed_at_one_end_is_claimed_at_the_other() {
        for server_first in [true, false] {
            let mut node = node();
            let mut spans = Vec::new();
            for side in [Side::Client, Side::Server] {
                spans.extend(node.on_cri(&run_pod_sandbox(side)));
            }
            // The kubelet's view saw another Pod's worker busy then;
            // containerd's, a few milliseconds apart, did not.
            spans.extend(node.on_cri(&competitor(Side::Client)));
            spans.extend(node.on_cri(&image_status(Side::Client, 3, true, 150)));
            let mut handled = image_status(Side::Server, 3, true, 150);
            handled.start_ts_ns = Some(150 * MS + 100);
            handled.end_ts_ns = Some(152 * MS - 100);
            spans.extend(node.on_cri(&handled));
            // Another stream at the other end is another call.
            spans.extend(node.on_cri(&image_status(Side::Server, 5, true, 151)));
            let order = if server_first {
                [Side::Server, Side::Client]
            } else {
                [Side::Client, Side::Server]
            };
            for side in order {
                spans.extend(node.on_cri(&create_container(side)));
            }
            let statuses: Vec<_> = spans
                .iter()
                .filter(|s| s.name.ends_with("/ImageStatus"))
                .collect();
            assert_eq!(statuses.len(), 2, "server first: {server_first}");
            let client = statuses.iter().find(|s| s.kind == SpanKind::Client);
            let server = statuses.iter().find(|s| s.kind == SpanKind::Server);
            assert_eq!(
                server.and_then(|s| s.parent_span_id),
                client.map(|s| s.span_id),
                "server first: {server_first}"
            );
            let client_create = spans
                .iter()
                .find(|s| s.name.ends_with("/CreateContainer") && s.kind == SpanKind::Client)
                .expect("the kubelet's CreateContainer");
            assert_eq!(
                client_create.string_attribute("podtrace.container.image.source"),
                if server_first {
                    Some(IMAGE_PRESENT)
                } else {
                    None
                },
                "server first: {server_first}"
            );
            assert!(node.refused_image_calls.is_empty());
            assert!(node.mirrored_statuses.is_empty());
        }
    }

    #[test]
    fn a_pod_stuck_before_its_container_does_not_hide_a_later_pods_image() {
        let mut node = node();
        let side = Side::Client;
        // db's sandbox (its image may not be pulled: no container comes).
        let mut spans = node.on_cri(&competitor(side));
        let mut web = run_pod_sandbox(side);
        web.start_ts_ns = Some(1_500 * MS);
        web.end_ts_ns = Some(1_600 * MS);
        spans.extend(node.on_cri(&web));
        spans.extend(node.on_cri(&image_status(side, 3, true, 1_650)));
        let mut create = create_container(side);
        create.start_ts_ns = Some(1_700 * MS);
        create.end_ts_ns = Some(1_750 * MS);
        spans.extend(node.on_cri(&create));
        assert!(
            spans.iter().any(|s| s.name.ends_with("/ImageStatus")),
            "{spans:#?}"
        );
    }

    #[test]
    fn image_status_asked_before_the_sandbox_is_not_the_pods() {
        let mut node = node();
        let side = Side::Client;
        // A client checking the image at its start, before any Pod.
        let mut spans = node.on_cri(&image_status(side, 3, true, 0));
        let mut sandbox = run_pod_sandbox(side);
        sandbox.start_ts_ns = Some(10 * MS);
        sandbox.end_ts_ns = Some(100 * MS);
        spans.extend(node.on_cri(&sandbox));
        spans.extend(node.on_cri(&create_container(side)));
        assert!(spans.iter().all(|s| !s.name.ends_with("/ImageStatus")));
    }

    #[test]
    fn default_tags_compare_equal() {
        assert_eq!(with_default_tag("busybox"), "busybox:latest");
        assert_eq!(
            with_default_tag("registry:5000/busybox"),
            "registry:5000/busybox:latest"
        );
        assert_eq!(with_default_tag("busybox:1.36"), "busybox:1.36");
        assert_eq!(with_default_tag("busybox@sha256:ab"), "busybox@sha256:ab");
    }
}
