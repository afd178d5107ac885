//! The node side of a Pod's trace: CRI calls as containerd handled them, the
//! runc executions they caused, and the node's span around them.
//!
//! In: finished CRI calls (with what identifies their Pod) and runc process
//! events. Out: [`Span`]s in the Pod's trace. Identity flows along causal
//! keys: RunPodSandbox names the Pod and returns the sandbox id;
//! CreateContainer ties a container id to a sandbox; runc's argv names the
//! container it creates or starts. A call whose Pod is not known (its
//! sandbox was created before podtrace started) is counted, not guessed.

use std::collections::HashMap;

use tracer_decode::identity::PodClue;

use super::span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, TraceId};
use crate::{
    capture::{ExecRecord, ExitRecord, ExitStatus, clock::WallClock},
    decode::{CriMessage, grpc_calls::Side},
};

/// Bound on remembered sandboxes, containers and running runc processes.
const MAX_ENTRIES: usize = 16_384;

/// A Pod as the node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pod {
    namespace: String,
    name: String,
    uid: String,
    trace: TraceId,
}

/// A runc execution waiting for its exit.
#[derive(Clone, Debug)]
struct RuncRun {
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

/// How long a finished runc execution waits for its Pod to become known.
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
    /// Finished runc executions waiting for their Pod (bounded).
    pending_runs: Vec<FinishedRun>,
    /// CRI calls and runc runs whose Pod was not known.
    pub unattributed: u64,
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
            pending_runs: Vec::new(),
            unattributed: 0,
        }
    }

    fn node_span_id(&self, trace: TraceId) -> SpanId {
        SpanId::well_known(trace, &format!("node/{}", self.node_name))
    }

    /// The span id of a CRI call about `key` (a sandbox or container id):
    /// the same for the kubelet's client span and containerd's server span
    /// would collide, so the side is part of it.
    fn call_span_id(trace: TraceId, side: Side, method: &str, key: &str) -> SpanId {
        SpanId::for_key(trace, format!("cri/{side:?}/{method}/{key}").as_bytes())
    }

    /// A finished CRI call: its span, and the node span when the Pod's
    /// container has been started.
    pub fn on_cri(&mut self, call: &CriMessage) -> Vec<Span> {
        let mut key = None;
        for clue in &call.clues {
            match clue {
                PodClue::Sandbox {
                    pod,
                    sandbox_id: Some(sandbox_id),
                } => {
                    if let (Some(namespace), Some(name), Some(uid)) =
                        (&pod.namespace, &pod.name, &pod.uid)
                    {
                        let trace = TraceId::for_pod(&self.cluster_id, uid);
                        let pod = Pod {
                            namespace: namespace.clone(),
                            name: name.clone(),
                            uid: uid.clone(),
                            trace,
                        };
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
                    sandbox_id: None, ..
                }
                | PodClue::StorageKey { .. }
                | PodClue::Object(_) => {}
            }
        }
        let Some((sandbox_id, container_id)) = key else {
            return Vec::new(); // Version, ImageStatus…: about no Pod.
        };
        let Some(pod) = self.pods_by_sandbox.get(&sandbox_id).cloned() else {
            self.unattributed += 1;
            return Vec::new();
        };
        let (Some(start), Some(end)) = (call.start_ts_ns, call.end_ts_ns) else {
            self.unattributed += 1;
            return Vec::new();
        };
        let (start, end) = (self.clock.unix_ns(start), self.clock.unix_ns(end));
        let first = *self.first_call_ns.entry(pod.uid.clone()).or_insert(start);
        let span_key = container_id.clone().unwrap_or_else(|| sandbox_id.clone());
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
            (
                "podtrace.cri.sandbox_id".to_owned(),
                AttributeValue::String(sandbox_id.clone()),
            ),
        ];
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
        attributes.extend(self.pod_attributes(&pod));
        let status = match call.status_code {
            Some(0) | None => SpanStatus::Unset,
            Some(code) => SpanStatus::Error(format!("gRPC status {code}")),
        };
        let mut spans = vec![Span {
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
        }];
        // The Pod's workload container has started: close the node's span.
        if call.method == "StartContainer" {
            spans.push(Span {
                trace_id: pod.trace,
                span_id: self.node_span_id(pod.trace),
                parent_span_id: Some(SpanId::well_known(pod.trace, "root")),
                name: format!("node {}", self.node_name),
                kind: SpanKind::Internal,
                start_unix_ns: first,
                end_unix_ns: end,
                attributes: self.pod_attributes(&pod),
                status: SpanStatus::Unset,
            });
            self.first_call_ns.remove(&pod.uid);
        }
        spans.extend(self.attribute_pending_runs(call.end_ts_ns.unwrap_or(0)));
        spans
    }

    fn pod_attributes(&self, pod: &Pod) -> Vec<(String, AttributeValue)> {
        vec![
            (
                "k8s.pod.name".to_owned(),
                AttributeValue::String(pod.name.clone()),
            ),
            (
                "k8s.namespace.name".to_owned(),
                AttributeValue::String(pod.namespace.clone()),
            ),
            (
                "k8s.pod.uid".to_owned(),
                AttributeValue::String(pod.uid.clone()),
            ),
            (
                "k8s.node.name".to_owned(),
                AttributeValue::String(self.node_name.clone()),
            ),
        ]
    }

    /// Notes a runc execution (`runc … create|start … <container id>`).
    pub fn on_exec(&mut self, exec: &ExecRecord) {
        if exec.comm != "runc" || self.runc_runs.len() >= MAX_ENTRIES {
            return;
        }
        let subcommand = exec
            .argv
            .iter()
            .find(|arg| matches!(arg.as_str(), "create" | "start" | "delete" | "kill"));
        if let (Some(subcommand), Some(container_id)) = (subcommand, exec.argv.last()) {
            let run = RuncRun {
                subcommand: subcommand.clone(),
                container_id: container_id.clone(),
                start_ns: exec.ids.ts_ns,
            };
            self.runc_runs.insert(exec.ids.tgid, run);
        }
    }

    /// A runc execution ended: its span (now, or once the CRI calls name its
    /// container), a child of the call that caused it — StartContainer for a
    /// workload container, RunPodSandbox for the sandbox's own container.
    pub fn on_exit(&mut self, exit: &ExitRecord) -> Vec<Span> {
        let Some(run) = self.runc_runs.remove(&exit.ids.tgid) else {
            return Vec::new();
        };
        if self.pending_runs.len() >= MAX_ENTRIES {
            self.unattributed += 1;
            return Vec::new();
        }
        self.pending_runs.push(FinishedRun {
            run,
            pid: exit.ids.tgid,
            end_ns: exit.ids.ts_ns,
            status: exit.status,
        });
        self.attribute_pending_runs(exit.ids.ts_ns)
    }

    /// Spans of the pending runs whose Pod is now known; runs pending for
    /// longer than `PENDING_NS` at `now_ns` are given up and counted.
    fn attribute_pending_runs(&mut self, now_ns: u64) -> Vec<Span> {
        let pending = std::mem::take(&mut self.pending_runs);
        let mut spans = Vec::new();
        for finished in pending {
            match self.runc_span(&finished) {
                Some(span) => spans.push(span),
                None if now_ns.saturating_sub(finished.end_ns) > PENDING_NS => {
                    self.unattributed += 1
                }
                None => self.pending_runs.push(finished),
            }
        }
        spans
    }

    fn runc_span(&self, finished: &FinishedRun) -> Option<Span> {
        let run = &finished.run;
        let (sandbox_id, is_sandbox) = match self.sandbox_by_container.get(&run.container_id) {
            Some(sandbox_id) => (sandbox_id.clone(), false),
            None => (run.container_id.clone(), true),
        };
        let pod = self.pods_by_sandbox.get(&sandbox_id)?;
        // containerd (1.6, 1.7) creates a workload's runc container in
        // StartContainer, not CreateContainer (which only prepares it): both
        // `runc create` and `runc start` are children of StartContainer; the
        // sandbox's own container is created and started by RunPodSandbox.
        let parent_method = if is_sandbox {
            "RunPodSandbox"
        } else {
            "StartContainer"
        };
        let parent = Self::call_span_id(pod.trace, Side::Server, parent_method, &run.container_id);
        let mut attributes = vec![
            (
                "process.pid".to_owned(),
                AttributeValue::Int(i64::from(finished.pid)),
            ),
            (
                "process.executable.name".to_owned(),
                AttributeValue::String("runc".into()),
            ),
            (
                "container.id".to_owned(),
                AttributeValue::String(run.container_id.clone()),
            ),
        ];
        attributes.extend(self.pod_attributes(pod));
        let status = match finished.status {
            ExitStatus::Code(0) => SpanStatus::Unset,
            ExitStatus::Code(code) => SpanStatus::Error(format!("exit code {code}")),
            ExitStatus::Signal(signal) => SpanStatus::Error(format!("killed by signal {signal}")),
        };
        Some(Span {
            trace_id: pod.trace,
            span_id: SpanId::for_key(
                pod.trace,
                format!("runc/{}/{}", run.subcommand, run.container_id).as_bytes(),
            ),
            parent_span_id: Some(parent),
            name: format!("runc {}", run.subcommand),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(run.start_ns),
            end_unix_ns: self.clock.unix_ns(finished.end_ns),
            attributes,
            status,
        })
    }
}
