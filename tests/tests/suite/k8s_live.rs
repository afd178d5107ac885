//! Live, on a real Kubernetes control plane: the podtrace agent runs while
//! `podtrace-demo --k8s-bin` starts kube-apiserver, kube-scheduler and a
//! kubelet (from the directory in `PODTRACE_K8S_BIN`) on the harness's etcd
//! (mTLS, authentication) and containerd + runc, and runs scenarios whose
//! Pods end in different states. What reaches the agent's OTLP-JSON file:
//! one complete trace per Pod that reached Running, with the etcd, CRI and
//! runc spans nested by cause; an incomplete trace, saying where it is
//! stuck, for a Pod that is never scheduled and for one whose image is never
//! pulled; a failed trace rooted at the create request for a Pod that
//! admission rejected. And podtrace as shipped: its image imported into the
//! cluster's containerd and deploy/'s DaemonSet applied to the running
//! cluster, exporting to an OTLP receiver in the test, and gone within
//! seconds of the DaemonSet's deletion.
//!
//! Gated by `PODTRACE_K8S_BIN`, a directory holding kube-apiserver,
//! kube-scheduler, kubelet and kubectl (v1.28 tried): the test is
//! `#[ignore]`d with that reason, which the test harness prints, and
//! `cargo xtask test` includes it when the variable is set (run alone:
//! `cargo test --test suite k8s_live:: -- --include-ignored --test-threads=1`). Run without the
//! variable, it says why and returns. This is the one kind of live test
//! allowed not to run on CI, because this project never builds or ships
//! Kubernetes binaries and CI has none. CI covers the same path with
//! the replay of recorded runs (`replay_traces.rs`,
//! `tests/fixtures/recordings/k8s-1.28-*.ptrace*`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test: a failed step fails the test"
)]

use std::{
    collections::HashSet,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};
use tracer_user::correlate::contract::{attr, name};

use podtrace_tests::{
    agent::Agent,
    demo_pod::DemoPod,
    live_test_can_run,
    otlp_json::{ExportedSpan, read_spans},
    otlp_receiver::OtlpReceiver,
    succeed,
    trees::{Trace, assert_first_exec_under, assert_well_formed, outline},
    xtask,
};
use serde_json::Value;
use tracer_user::correlate::span::{SpanId, SpanKey, TraceId};

/// The directory with the four Kubernetes binaries.
const K8S_BIN_VAR: &str = "PODTRACE_K8S_BIN";
const CLUSTER: &str = "k8s-live-test";
const SPAN_KIND_SERVER: u64 = 2;
const SPAN_KIND_CLIENT: u64 = 3;

/// The scenarios run, in order (see `podtrace-demo --help`).
const SCENARIOS: [&str; 5] = [
    "running",
    "unschedulable",
    "image-never",
    "rejected",
    "http1",
];

/// The Kubernetes binaries' directory, or `None` (said on stderr) when the
/// variable is unset. A set variable naming an unusable directory fails.
fn k8s_bin(test: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os(K8S_BIN_VAR) else {
        // Skipped also under CI, on purpose: see the module documentation.
        eprintln!(
            "skipped {test}: {K8S_BIN_VAR} is not set (it names a directory holding \
             kube-apiserver, kube-scheduler, kubelet and kubectl; this project ships no \
             Kubernetes binaries, so CI has none)"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    for binary in ["kube-apiserver", "kube-scheduler", "kubelet", "kubectl"] {
        assert!(
            dir.join(binary).is_file(),
            "{K8S_BIN_VAR}={} holds no {binary}",
            dir.display()
        );
    }
    Some(dir)
}

/// One cluster at a time: the harness runs this file's tests on threads of
/// one process, and two control planes on one host (each agent following
/// both) would trace each other's Pods.
fn one_cluster_at_a_time() -> MutexGuard<'static, ()> {
    static CLUSTER: Mutex<()> = Mutex::new(());
    CLUSTER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This machine's hostname in lower case: the demo's node name (as the
/// kubelet names its node) and the agent's.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_lowercase()
}

/// Runs `podtrace-demo --k8s-bin` with `args` and returns the Pods it
/// reported. `once_ready` runs after the demo said `ready` (its cluster up,
/// every component's connections open) and before it creates any Pod.
fn run_demo<T>(
    bin_dir: &Path,
    state: &Path,
    args: &[&str],
    once_ready: impl FnOnce() -> T,
) -> (Vec<DemoPod>, T) {
    let go = state.with_extension("go");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
        .arg("--k8s-bin")
        .arg(bin_dir)
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .arg("--wait-for")
        .arg(&go)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut pods = Vec::new();
    let mut ready = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line == "ready" {
            ready = Some(once_ready());
            std::fs::write(&go, b"").unwrap();
            break;
        }
        pods.extend(DemoPod::parse(&line));
    }
    pods.extend(
        lines
            .map_while(Result::ok)
            .filter_map(|l| DemoPod::parse(&l)),
    );
    let status = demo.wait().unwrap();
    assert!(status.success(), "podtrace-demo: {status}");
    (pods, ready.expect("podtrace-demo never said ready"))
}

/// The creation trace of `pod` made by this test's agents.
fn trace_of_pod<'a>(all: &'a [ExportedSpan], pod: &DemoPod) -> Trace<'a> {
    Trace::of_pod_in(all, CLUSTER, pod)
}

/// A span some trace must hold: by name (a prefix when `prefix`), of a kind
/// (`None`: any), whose parent has name `parent` (a prefix; `None`: the
/// root), or is the root when `or_root`.
struct ExpectedSpan {
    name: &'static str,
    prefix: bool,
    kind: Option<u64>,
    parent: Option<&'static str>,
    or_root: bool,
}

impl ExpectedSpan {
    const fn named(name: &'static str, kind: Option<u64>, parent: Option<&'static str>) -> Self {
        Self {
            name,
            prefix: false,
            kind,
            parent,
            or_root: false,
        }
    }

    /// Under `parent` or under the root: a request span under its
    /// client's span when the client is traced (kube-controller-manager),
    /// under the root when not (kubectl).
    const fn under_root_or(name: &'static str, kind: Option<u64>, parent: &'static str) -> Self {
        Self {
            or_root: true,
            ..Self::named(name, kind, Some(parent))
        }
    }

    fn assert_in(&self, trace: &Trace<'_>, pod: &DemoPod) {
        let found = trace.spans.iter().any(|span| {
            let name_matches = if self.prefix {
                span.name.starts_with(self.name)
            } else {
                span.name == self.name
            };
            let parent = span
                .parent_span_id
                .as_deref()
                .and_then(|id| trace.spans.iter().find(|s| s.span_id == id));
            let parent_matches = match (self.parent, parent) {
                (_, Some(parent)) if self.or_root && parent.parent_span_id.is_none() => true,
                (None, Some(parent)) => parent.parent_span_id.is_none(),
                (Some(name), Some(parent)) => parent.name.starts_with(name),
                (_, None) => false,
            };
            name_matches && self.kind.is_none_or(|k| span.kind == k) && parent_matches
        });
        assert!(
            found,
            "{}/{}: no span {:?} (kind {:?}) under {:?}{}:\n{}",
            pod.namespace,
            pod.name,
            self.name,
            self.kind,
            self.parent,
            if self.or_root { " or the root" } else { "" },
            outline(&trace.spans)
        );
    }
}

/// What the trace of a Pod that reached Running holds today besides the
/// structure [`assert_etcd_spans`] and [`assert_node_spans`] check.
const RUNNING_POD_SPANS: &[ExpectedSpan] = &[
    // The apiserver's etcd calls nest under the Pod registry's calls that
    // make them (`--apiserver-probes pods`, the default).
    ExpectedSpan::named(
        "etcdserverpb.KV/Txn",
        Some(SPAN_KIND_CLIENT),
        Some(name::APISERVER_BINDING),
    ),
    ExpectedSpan::named(
        "etcdserverpb.KV/Txn",
        Some(SPAN_KIND_SERVER),
        Some("etcdserverpb.KV/Txn"),
    ),
    ExpectedSpan::named(name::ETCD_WAL, None, Some("etcdserverpb.KV/Txn")),
    ExpectedSpan::named(
        "containerd-shim-runc-v2 start",
        None,
        Some("runtime.v1.RuntimeService/RunPodSandbox"),
    ),
];

/// The spans of kube-apiserver, kube-scheduler and the kubelet themselves
/// (their requests, the scheduling cycle, the kubelet's Pod sync), as the
/// trace of a Pod that reached Running must hold them (docs/spans.md and ARCHITECTURE.md, "Traces without a collector").
const CONTROL_PLANE_COMPONENT_SPANS: &[ExpectedSpan] = &[
    ExpectedSpan::under_root_or(
        name::APISERVER_POD_CREATE,
        Some(SPAN_KIND_SERVER),
        "POST /api/v1/namespaces/{namespace}/pods",
    ),
    // Only functions that Pod requests alone reach are probed: what comes
    // before the Pod registry is one span from the wire's start.
    ExpectedSpan::named(
        name::APISERVER_BEFORE_VALIDATION_WITH_ADMISSION,
        None,
        Some(name::APISERVER_POD_CREATE),
    ),
    ExpectedSpan::named(
        name::APISERVER_POD_VALIDATION,
        None,
        Some(name::APISERVER_POD_CREATE),
    ),
    ExpectedSpan::named(
        name::APISERVER_AFTER_VALIDATION,
        None,
        Some(name::APISERVER_POD_CREATE),
    ),
    ExpectedSpan::named(
        "etcdserverpb.KV/Txn",
        Some(SPAN_KIND_CLIENT),
        Some(name::APISERVER_AFTER_VALIDATION),
    ),
    ExpectedSpan::named(name::SCHEDULER_QUEUE, None, None),
    ExpectedSpan::named(name::SCHEDULER_CYCLE, None, None),
    ExpectedSpan::named(name::SCHEDULER_BIND, None, None),
    ExpectedSpan::named(
        "POST /api/v1/namespaces/{namespace}/pods/{name}/binding",
        Some(SPAN_KIND_CLIENT),
        Some(name::SCHEDULER_BIND),
    ),
    ExpectedSpan::named(
        "apiserver POST /api/v1/namespaces/{namespace}/pods/{name}/binding",
        Some(SPAN_KIND_SERVER),
        Some("POST /api/v1/namespaces/{namespace}/pods/{name}/binding"),
    ),
    ExpectedSpan::named(name::KUBELET_DISPATCH, None, Some("node ")),
    ExpectedSpan::named(name::KUBELET_SYNC, None, Some("node ")),
    ExpectedSpan::named(name::KUBELET_VOLUME_WAIT, None, Some(name::KUBELET_SYNC)),
    ExpectedSpan::named(
        "runtime.v1.RuntimeService/RunPodSandbox",
        Some(SPAN_KIND_CLIENT),
        Some(name::KUBELET_SYNC),
    ),
    ExpectedSpan::named(
        "PATCH /api/v1/namespaces/{namespace}/pods/{name}/status",
        Some(SPAN_KIND_CLIENT),
        Some(name::KUBELET_STATUS_UPDATE),
    ),
    ExpectedSpan::named(
        "apiserver PATCH /api/v1/namespaces/{namespace}/pods/{name}/status",
        Some(SPAN_KIND_SERVER),
        Some("PATCH /api/v1/namespaces/{namespace}/pods/{name}/status"),
    ),
    ExpectedSpan::named(
        name::APISERVER_STATUS_UPDATE,
        None,
        Some("apiserver PATCH /api/v1/namespaces/{namespace}/pods/{name}/status"),
    ),
    ExpectedSpan::named(
        "etcdserverpb.KV/Txn",
        Some(SPAN_KIND_CLIENT),
        Some(name::APISERVER_STATUS_UPDATE),
    ),
];

/// kube-apiserver, kube-scheduler and kubelet spans of a Running Pod's
/// trace: [`CONTROL_PLANE_COMPONENT_SPANS`], and checks of their structure
/// that a table cannot say go here.
fn assert_control_plane_component_spans(trace: &Trace<'_>, pod: &DemoPod) {
    for expected in CONTROL_PLANE_COMPONENT_SPANS {
        expected.assert_in(trace, pod);
    }
    // The function probes' spans say when their offsets were derived from
    // the binary (`PODTRACE_TEST_KUBE_OFFSETS=derived`), and only then.
    let derived = std::env::var("PODTRACE_TEST_KUBE_OFFSETS").as_deref() == Ok("derived");
    for name in podtrace_tests::trees::FUNCTION_PROBE_SPANS {
        for span in trace.named(name, None) {
            assert_eq!(
                span.string(attr::K8S_OFFSETS) == Some("derived"),
                derived,
                "{name} of {}: podtrace.k8s.offsets {:?}",
                pod.name,
                span.string(attr::K8S_OFFSETS)
            );
        }
    }
}

/// The apiserver's etcd writes (client, read from its TLS plaintext), each
/// holding etcd's handling (server): the create, the scheduler's binding and
/// the kubelet's Running report among them.
fn assert_etcd_spans(trace: &Trace<'_>, pod: &DemoPod, root: &ExportedSpan) {
    let clients = trace.named("etcdserverpb.KV/Txn", Some(SPAN_KIND_CLIENT));
    assert!(clients.len() >= 3, "{:#?}", trace.spans);
    for client in &clients {
        assert!(trace.descends_from(client, root), "{client:#?}");
        let servers: Vec<_> = trace
            .children(client)
            .into_iter()
            .filter(|s| s.name == "etcdserverpb.KV/Txn" && s.kind == SPAN_KIND_SERVER)
            .collect();
        assert_eq!(servers.len(), 1, "server side of {client:#?}");
    }
    let changes: HashSet<&str> = clients
        .iter()
        .filter_map(|c| c.string(attr::K8S_POD_CHANGE))
        .collect();
    let bound = format!("bound to {}", pod.node);
    for change in ["created", bound.as_str(), "status Running"] {
        assert!(
            changes.contains(change),
            "no {change:?} in {changes:?} of {pod:?}:\n{}",
            outline(&trace.spans)
        );
    }
}

/// The node span; both sides of the kubelet's RunPodSandbox,
/// CreateContainer and StartContainer; runc and the first process of the
/// sandbox and of the container under the call that caused them.
fn assert_node_spans(trace: &Trace<'_>, pod: &DemoPod, root: &ExportedSpan) {
    let node = trace.one(&name::node(&pod.node), None);
    assert!(trace.descends_from(node, root), "{node:#?}");
    let mut servers = Vec::new();
    for call in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
        let name = format!("runtime.v1.RuntimeService/{call}");
        let client = trace.one(&name, Some(SPAN_KIND_CLIENT));
        assert!(trace.descends_from(client, node), "{client:#?}");
        let server = trace.one(&name, Some(SPAN_KIND_SERVER));
        assert_eq!(
            server.parent_span_id.as_deref(),
            Some(client.span_id.as_str())
        );
        servers.push(server);
    }
    for (call, container) in [
        (servers[0], &pod.sandbox_id),
        (servers[2], &pod.container_id),
    ] {
        assert!(!container.is_empty(), "{pod:?}");
        let children = trace.children(call);
        for name in ["runc create", "runc start"] {
            assert!(
                children
                    .iter()
                    .any(|s| s.name.starts_with(name)
                        && s.string(attr::CONTAINER_ID) == Some(container)),
                "no {name} of {container} under {}: {children:#?}",
                call.name
            );
        }
        assert_first_exec_under(&trace.spans, call, container);
    }
}

/// The trace of a Pod that reached Running.
fn assert_running_pod_trace(trace: &Trace<'_>, pod: &DemoPod) {
    let root = trace.root(pod);
    eprintln!(
        "k8s_live: {} ({}): {} spans, root complete",
        root.name,
        pod.scenario,
        trace.spans.len()
    );
    assert_eq!(
        root.attributes[attr::TRACE_COMPLETE],
        Value::Bool(true),
        "{root:#?}"
    );
    assert_eq!(root.string(attr::K8S_POD_UID), Some(pod.uid.as_str()));
    trace.assert_no_orphans();
    assert_etcd_spans(trace, pod, root);
    assert_node_spans(trace, pod, root);
    for expected in RUNNING_POD_SPANS {
        expected.assert_in(trace, pod);
    }
    assert_control_plane_component_spans(trace, pod);
}

/// The Pod's deletion (the demo deletes its Pods at the end): a trace of
/// its own whose root links to the creation's, with the sandbox's teardown
/// as containerd handled it; and none of it in the creation's trace.
fn assert_deletion_trace(all: &[ExportedSpan], pod: &DemoPod) {
    let creation = TraceId::for_pod(CLUSTER, &pod.uid);
    let deletion = TraceId::for_pod_deletion(CLUSTER, &pod.uid).to_hex();
    let spans: Vec<&ExportedSpan> = all.iter().filter(|s| s.trace_id == deletion).collect();
    let root = spans
        .iter()
        .find(|s| s.parent_span_id.is_none())
        .unwrap_or_else(|| panic!("no deletion root for {pod:?}: \n{}", outline(&spans)));
    assert_eq!(root.name, name::pod_delete(&pod.namespace, &pod.name));
    let creation_root = SpanId::of(creation, &SpanKey::Root).to_hex();
    assert_eq!(root.links, [(creation.to_hex(), creation_root)]);
    for call in ["StopPodSandbox", "RemovePodSandbox"] {
        let name = format!("runtime.v1.RuntimeService/{call}");
        assert!(
            spans
                .iter()
                .any(|s| s.name == name && s.kind == SPAN_KIND_SERVER),
            "no {name} in the deletion of {pod:?}: \n{}",
            outline(&spans)
        );
        assert!(
            !all.iter()
                .any(|s| s.trace_id == creation.to_hex() && s.name == name),
            "{name} in the creation trace of {pod:?}"
        );
    }
}

/// The trace of a Pod that never ran: an incomplete root stuck in `phase`
/// (the start of `podtrace.trace.stuck_phase`), with its create written to
/// etcd.
fn assert_incomplete_pod_trace(trace: &Trace<'_>, pod: &DemoPod, phase: &str) {
    let root = trace.root(pod);
    eprintln!(
        "k8s_live: {} ({}): {} spans, root status {:?}",
        root.name,
        pod.scenario,
        trace.spans.len(),
        root.status_message
    );
    assert_eq!(
        root.attributes[attr::TRACE_COMPLETE],
        Value::Bool(false),
        "{root:#?}"
    );
    assert_eq!(root.status_code, 2, "{root:#?}");
    let stuck = root.string(attr::TRACE_STUCK_PHASE).unwrap_or_default();
    assert!(stuck.starts_with(phase), "{pod:?}: stuck in {stuck:?}");
    let clients = trace.named("etcdserverpb.KV/Txn", Some(SPAN_KIND_CLIENT));
    assert!(
        clients
            .iter()
            .any(|c| c.string(attr::K8S_POD_CHANGE) == Some("created")),
        "{:#?}",
        trace.spans
    );
}

/// The agent (following the default Kubernetes components) joining
/// `podtrace-demo --k8s-bin` once its cluster ran a minute, as on every node
/// of a real cluster (#46), then running `scenarios`: the Pods the demo
/// reported, every span exported (each trace checked well-formed) and this
/// node's name; `None` (said) when the test cannot run here.
fn traced_demo(
    test: &str,
    scenarios: &[&str],
) -> Option<(Vec<DemoPod>, Vec<ExportedSpan>, String)> {
    traced_demo_with(test, &scenario_args(scenarios), AgentStart::AfterCluster)
}

/// How long after the demo's `ready` an agent started after the cluster
/// starts (#46): the control plane has run a minute, its controllers
/// reconciled and its leases renewed over every connection, as on a node
/// the agent joins; the Pods the demo made before (`--existing-pods`) are
/// older than the agent by more than the 5 s it allows a Pod's
/// creationTimestamp (whole seconds of the apiserver's clock) before its own
/// start.
const AFTER_CLUSTER_DELAY: Duration = Duration::from_secs(60);

/// When the agent starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AgentStart {
    /// Before the cluster: it sees every component start.
    BeforeCluster,
    /// Once the cluster is up, as on every node of a real cluster where the
    /// agent is installed, upgraded or restarted: every connection between
    /// the components is older than the agent. It starts
    /// [`AFTER_CLUSTER_DELAY`] after the demo said `ready`.
    AfterCluster,
}

fn scenario_args(scenarios: &[&str]) -> Vec<String> {
    scenarios
        .iter()
        .flat_map(|s| ["--scenario".to_owned(), (*s).to_owned()])
        .collect()
}

/// Waits until the agent has attached its function probes to the three
/// Kubernetes components with probe points on a Pod's creation
/// (kube-apiserver, kube-scheduler, kubelet; kube-controller-manager has
/// none since the apiserver's probes are the Pod registry's, which it does
/// not link). Attaching takes a debug build about a second a binary, one
/// after the other: a Pod created before would miss the function spans of a
/// component that started just before it, which is what a component's first
/// moments after a restart cost, not what this test is about.
/// `log` gives the agent's log so far (its own process's, or the
/// DaemonSet's through `kubectl logs`), read every `every`.
fn wait_for_function_probes(log: impl Fn() -> String, every: Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = log();
        let probed = log
            .lines()
            .filter(|line| {
                line.contains("Go probes attached")
                    && line.contains("kube_functions=")
                    && !line.contains("kube_functions=0")
            })
            .count();
        if probed >= 3 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the agent attached function probes to {probed} of the 3 components in 60 s:\n{log}"
        );
        std::thread::sleep(every);
    }
}

/// [`traced_demo`] with the demo's arguments and the agent started when
/// `start` says.
fn traced_demo_with(
    test: &str,
    demo_args: &[String],
    start: AgentStart,
) -> Option<(Vec<DemoPod>, Vec<ExportedSpan>, String)> {
    let bin_dir = k8s_bin(test)?;
    if !live_test_can_run(test) {
        return None;
    }
    let _alone = one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces.jsonl");
    let node = hostname();
    let agent_args = ["--cluster-id", CLUSTER, "--node-name", &node];
    let early = (start == AgentStart::BeforeCluster).then(|| Agent::start(&agent_args, &out));
    let demo_args: Vec<&str> = demo_args.iter().map(String::as_str).collect();
    let (pods, late) = run_demo(&bin_dir, &dir.path().join("state"), &demo_args, || {
        let late = (start == AgentStart::AfterCluster).then(|| {
            std::thread::sleep(AFTER_CLUSTER_DELAY);
            Agent::start(&agent_args, &out)
        });
        let agent = early.as_ref().or(late.as_ref()).expect("an agent");
        wait_for_function_probes(
            || agent.logged("Go probes attached").join("\n"),
            Duration::from_millis(100),
        );
        late
    });
    let stopped = early.or(late).expect("an agent started").stop_with_log();
    // containerd names each CNI plugin's sandbox (CNI_CONTAINERID): however
    // many sandboxes start at once, no plugin run is left without its Pod.
    let ambiguous: Vec<&String> = stopped
        .log
        .iter()
        .filter(|line| line.contains("cni_runs_ambiguous="))
        .collect();
    assert!(ambiguous.is_empty(), "{ambiguous:#?}");
    let all = read_spans(&out).unwrap();
    assert_well_formed(&all);
    Some((pods, all, node))
}

#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn real_control_plane_scenarios_get_their_traces() {
    let Some((pods, all, node)) =
        traced_demo("real_control_plane_scenarios_get_their_traces", &SCENARIOS)
    else {
        return;
    };

    let of = |scenario: &str| -> Vec<&DemoPod> {
        pods.iter().filter(|pod| pod.scenario == scenario).collect()
    };
    let running = of("running");
    assert!(!running.is_empty(), "{pods:#?}");
    // A create over HTTP/1.1 (curl) gets the apiserver's request span and
    // what it holds as one over HTTP/2 does.
    assert_eq!(of("http1").len(), 1, "{pods:#?}");
    let all_running: Vec<&DemoPod> = [running.clone(), of("http1")].concat();
    for pod in &all_running {
        assert_eq!(pod.outcome, "Running");
        assert_eq!(pod.node, node);
        assert_running_pod_trace(&trace_of_pod(&all, pod), pod);
        assert_deletion_trace(&all, pod);
    }
    let [unschedulable] = of("unschedulable")[..] else {
        panic!("{pods:#?}");
    };
    assert!(
        unschedulable.outcome.starts_with("unschedulable: "),
        "{unschedulable:?}"
    );
    assert_incomplete_pod_trace(
        &trace_of_pod(&all, unschedulable),
        unschedulable,
        "scheduling",
    );
    let [image_never] = of("image-never")[..] else {
        panic!("{pods:#?}");
    };
    assert!(
        image_never.outcome.starts_with("ErrImageNeverPull: "),
        "{image_never:?}"
    );
    assert_incomplete_pod_trace(&trace_of_pod(&all, image_never), image_never, "node");
    // Each says why, in the components' own words.
    for (pod, key, words) in [
        (
            unschedulable,
            attr::K8S_SCHEDULING_FAILURE,
            "node affinity/selector",
        ),
        (
            image_never,
            attr::K8S_CONTAINER_WAITING,
            "ErrImageNeverPull",
        ),
    ] {
        let root_name = name::pod_create(&pod.namespace, &pod.name);
        let root = all
            .iter()
            .find(|s| s.name == root_name)
            .unwrap_or_else(|| panic!("no {root_name}"));
        assert!(
            root.string(key).is_some_and(|why| why.contains(words)),
            "{root:#?}"
        );
    }
    // Admission refused it before anything was stored: its create request
    // is the root of its own trace, failed, with the admission span that
    // refused it and no etcd write.
    let [rejected] = of("rejected")[..] else {
        panic!("{pods:#?}");
    };
    assert!(
        rejected.outcome.starts_with("rejected: ") && rejected.outcome.contains("PodSecurity"),
        "{rejected:?}"
    );
    let root_name = name::pod_create_not_stored(&rejected.namespace, &rejected.name, "rejected");
    let root = all
        .iter()
        .find(|s| s.name == root_name)
        .unwrap_or_else(|| panic!("no trace of rejected Pod {root_name}"));
    assert!(root.status_message.contains("PodSecurity"), "{root:#?}");
    let trace: Vec<_> = all.iter().filter(|s| s.trace_id == root.trace_id).collect();
    assert!(
        trace
            .iter()
            .any(|s| s.name.starts_with(name::APISERVER_ADMISSION_VALIDATING) && s.status_code == 2),
        "{trace:#?}"
    );
    assert!(
        trace.iter().all(|s| s.name != "etcdserverpb.KV/Txn"),
        "{trace:#?}"
    );
}

/// 20 Pods created at once (`--scenario burst`), each with its creation and
/// its deletion trace, every trace a well-formed tree — by an agent started
/// before the cluster, which sees every component start and every
/// connection open (the one test that starts it first).
#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn a_burst_of_20_pods_gets_their_traces() {
    let Some((pods, all, _)) = traced_demo_with(
        "a_burst_of_20_pods_gets_their_traces",
        &scenario_args(&["burst"]),
        AgentStart::BeforeCluster,
    ) else {
        return;
    };
    assert_eq!(pods.len(), 20, "{pods:#?}");
    for pod in &pods {
        assert_eq!(pod.outcome, "Running");
        assert_running_pod_trace(&trace_of_pod(&all, pod), pod);
        assert_deletion_trace(&all, pod);
    }
}

/// Pods created while kube-apiserver serves a load of requests that are not
/// about Pods (#45): 16 clients of the overhead benchmark's mixed apiserver
/// load (GETs and LISTs of ConfigMaps, Lease renewals, Event creates) on one
/// connection older than the agent, which starts after the cluster. Each
/// Pod gets its complete trace, with its create's phases; nothing of the
/// load is exported.
#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn pods_created_under_an_apiserver_request_load_get_complete_traces() {
    let demo_args = ["--apiserver-load", "mixed", "--pods", "5"].map(str::to_owned);
    let Some((pods, all, _)) = traced_demo_with(
        "pods_created_under_an_apiserver_request_load_get_complete_traces",
        &demo_args,
        AgentStart::AfterCluster,
    ) else {
        return;
    };
    assert_eq!(pods.len(), 5, "{pods:#?}");
    for pod in &pods {
        assert_eq!(pod.outcome, "Running");
        assert_running_pod_trace(&trace_of_pod(&all, pod), pod);
    }
    // The load's objects are all named bench-…: no span names one.
    let of_the_load: Vec<&ExportedSpan> = all
        .iter()
        .filter(|span| {
            span.name.contains("bench-")
                || span
                    .attributes
                    .values()
                    .any(|value| value.as_str().is_some_and(|text| text.contains("bench-")))
        })
        .collect();
    assert!(of_the_load.is_empty(), "{of_the_load:#?}");
}

/// The common case in real clusters: Pods made by the ReplicaSet controller
/// of a Deployment scaled from 0 to 50 at once (its creates come from
/// kube-controller-manager, not kubectl), then deleted by it when scaled
/// back to 0 — with the agent started after the control plane ran a minute
/// (#46): the controller-manager's connection, its HPACK tables and TLS
/// session are older than the agent. Every create says who asked: the
/// controller, as its service account, in the user agent both sides see.
#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn a_deployment_scaled_from_0_to_50_gets_a_trace_per_pod_and_per_deletion() {
    const REPLICAS: usize = 50;
    const WHO_ASKED: &str = "/system:serviceaccount:kube-system:replicaset-controller";
    let mut args = scenario_args(&["deployment"]);
    args.extend(["--burst-pods".to_owned(), REPLICAS.to_string()]);
    let Some((pods, all, _)) = traced_demo_with(
        "a_deployment_scaled_from_0_to_50_gets_a_trace_per_pod_and_per_deletion",
        &args,
        AgentStart::AfterCluster,
    ) else {
        return;
    };
    assert_eq!(pods.len(), REPLICAS, "{pods:#?}");
    for pod in &pods {
        assert_eq!(pod.outcome, "Running");
        let trace = trace_of_pod(&all, pod);
        assert_running_pod_trace(&trace, pod);
        // The create as the ReplicaSet controller sent it, above the
        // apiserver's handling.
        let create = trace.one(
            "POST /api/v1/namespaces/{namespace}/pods",
            Some(SPAN_KIND_CLIENT),
        );
        assert!(
            create
                .string(attr::USER_AGENT_ORIGINAL)
                .is_some_and(|agent| agent.ends_with(WHO_ASKED)),
            "{create:#?}"
        );
        // The apiserver's side of that request, under it, naming the same
        // client. (The user it authenticated is not read by default: its
        // authenticator is probed only with `--apiserver-probes all`;
        // docs/limitations.md.)
        let served = trace.one(name::APISERVER_POD_CREATE, Some(SPAN_KIND_SERVER));
        assert_eq!(
            served.parent_span_id.as_deref(),
            Some(create.span_id.as_str())
        );
        assert_eq!(
            served.string(attr::USER_AGENT_ORIGINAL),
            create.string(attr::USER_AGENT_ORIGINAL)
        );
        assert_deletion_trace(&all, pod);
    }
}

/// The agent started on a cluster already running (#18: every node's agent
/// is installed, upgraded and restarted under live components): the
/// kubelet↔containerd, apiserver↔etcd and component↔apiserver connections
/// are all older than the agent, their HPACK tables and TLS state begun
/// before it. 10 new Pods each get their complete trace, with both sides of
/// every CRI call the kubelet made for them.
#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn an_agent_started_after_the_cluster_sees_both_sides_of_every_call() {
    let demo_args = [
        "--existing-pods",
        "2",
        "--scenario",
        "running",
        "--pods",
        "10",
    ]
    .map(str::to_owned);
    let Some((pods, all, _)) = traced_demo_with(
        "an_agent_started_after_the_cluster_sees_both_sides_of_every_call",
        &demo_args,
        AgentStart::AfterCluster,
    ) else {
        return;
    };
    let (existing, pods): (Vec<DemoPod>, Vec<DemoPod>) =
        pods.into_iter().partition(|pod| pod.scenario == "existing");
    assert_eq!(
        (existing.len(), pods.len()),
        (2, 10),
        "{existing:#?} {pods:#?}"
    );
    // The Pods the node ran before the agent started: their creation was
    // not seen, and what follows it is not a creation (the kubelet's
    // resyncs and status updates) or cannot be told whole (their deletion:
    // their sandbox was made before the agent): no trace of either.
    for pod in &existing {
        assert_eq!(pod.outcome, "Running");
        let deletion = TraceId::for_pod_deletion(CLUSTER, &pod.uid).to_hex();
        let traced: Vec<&ExportedSpan> = trace_of_pod(&all, pod)
            .spans
            .into_iter()
            .chain(all.iter().filter(|s| s.trace_id == deletion))
            .collect();
        assert!(
            traced.is_empty(),
            "{}/{} ran before the agent started, yet it has spans:\n{}",
            pod.namespace,
            pod.name,
            outline(&traced)
        );
    }
    for pod in &pods {
        assert_eq!(pod.outcome, "Running");
        let trace = trace_of_pod(&all, pod);
        assert_running_pod_trace(&trace, pod);
        assert_deletion_trace(&all, pod);
        // Every CRI call containerd handled for the Pod has the kubelet's
        // side as its parent, and every call the kubelet made has
        // containerd's side under it.
        let cri = |kind| -> Vec<&ExportedSpan> {
            trace
                .spans
                .iter()
                .copied()
                .filter(|s| s.name.starts_with("runtime.v1.") && s.kind == kind)
                .collect()
        };
        let (clients, servers) = (cri(SPAN_KIND_CLIENT), cri(SPAN_KIND_SERVER));
        assert!(clients.len() >= 3, "{}", outline(&trace.spans));
        for server in &servers {
            assert!(
                clients.iter().any(|c| Some(c.span_id.as_str())
                    == server.parent_span_id.as_deref()
                    && c.name == server.name),
                "{}/{}: {} without the kubelet's side:\n{}",
                pod.namespace,
                pod.name,
                server.name,
                outline(&trace.spans)
            );
        }
        for client in &clients {
            assert!(
                servers
                    .iter()
                    .any(|s| s.parent_span_id.as_deref() == Some(client.span_id.as_str())),
                "{}/{}: {} without containerd's side:\n{}",
                pod.namespace,
                pod.name,
                client.name,
                outline(&trace.spans)
            );
        }
    }
}

/// The image `cargo xtask image` builds, as containerd knows it once
/// imported; the test overlay points the DaemonSet at it.
const DAEMONSET_IMAGE: &str = "podtrace.local/podtrace:k8s-live-test";
/// The cluster id deploy/base's ConfigMap gives the agent, which the test
/// overlay leaves as it is.
const DEPLOY_CLUSTER_ID: &str = "default";
/// How soon the DaemonSet's Pod must be gone once the DaemonSet is deleted
/// (#18): the agent flushes its spans and exits within 2 s of SIGTERM.
const DAEMONSET_GONE_WITHIN: Duration = Duration::from_secs(5);

/// `kubectl` of the demo's cluster.
fn kubectl(bin_dir: &Path, kubeconfig: &str) -> Command {
    let mut command = Command::new(bin_dir.join("kubectl"));
    command.arg(format!("--kubeconfig={kubeconfig}"));
    command
}

/// The test overlay, to be written in directory `overlay`: deploy/base with
/// only the image and the OTLP endpoint changed, as the README tells a user
/// to change them.
fn daemonset_overlay(overlay: &Path, endpoint: &str) -> String {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/base")
        .canonicalize()
        .unwrap();
    // kustomize takes a base only by a path relative to the kustomization.
    let up = overlay.canonicalize().unwrap().components().count() - 1;
    let base = Path::new(&"../".repeat(up)).join(base.strip_prefix("/").unwrap());
    let (name, tag) = DAEMONSET_IMAGE.split_once(':').unwrap();
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {base}
images:
  - name: ghcr.io/podtrace/podtrace
    newName: {name}
    newTag: {tag}
patches:
  - target:
      version: v1
      kind: ConfigMap
      name: podtrace
    patch: |-
      - op: replace
        path: /data/OTEL_EXPORTER_OTLP_ENDPOINT
        value: {endpoint}
",
        base = base.display()
    )
}

/// Deletes the DaemonSet if the test ends before it did: its agent would
/// otherwise outlive the cluster in its container.
struct DaemonSetGuard<'a> {
    bin_dir: &'a Path,
    kubeconfig: &'a str,
    deleted: bool,
}

impl Drop for DaemonSetGuard<'_> {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = kubectl(self.bin_dir, self.kubeconfig)
                .args(["delete", "-n", "podtrace", "daemonset", "podtrace"])
                .args(["--cascade=foreground", "--timeout=60s"])
                .status();
        }
    }
}

/// Stops `podtrace-demo` with SIGINT, on which it cleans up, if the test
/// ends before it let the demo finish.
struct DemoGuard(std::process::Child);

impl Drop for DemoGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on the child's pid, not reaped yet.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            let _ = self.0.wait();
        }
    }
}

/// The DaemonSet's agent's log lines so far.
fn daemonset_log(bin_dir: &Path, kubeconfig: &str) -> String {
    let output = kubectl(bin_dir, kubeconfig)
        .args(["logs", "-n", "podtrace", "daemonset/podtrace"])
        .output()
        .unwrap();
    if !output.status.success() {
        return format!(
            "(kubectl logs failed: {})",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The agent as shipped (#18): the image `cargo xtask image` builds,
/// imported into the test cluster's containerd, and deploy/base's DaemonSet
/// applied through an overlay that changes only the image and the OTLP
/// endpoint (this test's receiver), once the cluster runs, as on a real
/// cluster. Its agent runs unprivileged with the capabilities the manifest
/// lists; the Pods created then each get their complete trace at the
/// receiver; deleting the DaemonSet stops the agent, and its Pod is gone
/// within [`DAEMONSET_GONE_WITHIN`].
#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn the_daemonset_from_deploy_traces_pods_and_goes_within_seconds() {
    const TEST: &str = "the_daemonset_from_deploy_traces_pods_and_goes_within_seconds";
    let Some(bin_dir) = k8s_bin(TEST) else {
        return;
    };
    if !live_test_can_run(TEST) {
        return;
    }
    let _alone = one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("podtrace.oci.tar");
    xtask(&[
        "image".as_ref(),
        "--out".as_ref(),
        image.as_os_str(),
        "--name".as_ref(),
        DAEMONSET_IMAGE.as_ref(),
    ]);

    let (go, hold, info) = (
        dir.path().join("go"),
        dir.path().join("hold"),
        dir.path().join("cluster.json"),
    );
    let mut demo = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
        .arg("--k8s-bin")
        .arg(&bin_dir)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--wait-for")
        .arg(&go)
        .arg("--hold")
        .arg(&hold)
        .arg("--cluster-info")
        .arg(&info)
        .arg("--daemon-sets")
        .args(["--scenario", "running", "--pods", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut demo = DemoGuard(demo);
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line == "ready"),
        "podtrace-demo never said ready"
    );
    let info: Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
    let kubeconfig = info["kubeconfig"].as_str().unwrap();
    // The Pod reaches this host at the gateway of the Pod subnet (the
    // host's end of each Pod's point-to-point link).
    let subnet: std::net::Ipv4Addr = info["pod_subnet"]
        .as_str()
        .and_then(|subnet| subnet.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    let gateway = std::net::Ipv4Addr::from(u32::from(subnet) + 1);
    let receiver = OtlpReceiver::start(
        std::net::Ipv4Addr::UNSPECIFIED.into(),
        &dir.path().join("received.jsonl"),
    )
    .unwrap();

    succeed(
        Command::new("/usr/bin/ctr")
            .arg("--address")
            .arg(info["containerd_socket"].as_str().unwrap())
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(&image),
    );
    let overlay = dir.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        daemonset_overlay(&overlay, &format!("http://{gateway}:{}", receiver.port())),
    )
    .unwrap();
    // Every shipped overlay applies unchanged on this release (the API
    // server's strict decoding of every field, admission included). A dry
    // run creates no namespace: the one the objects go in is made first.
    succeed(kubectl(&bin_dir, kubeconfig).args(["create", "namespace", "podtrace"]));
    let overlays = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/overlays");
    for entry in std::fs::read_dir(&overlays).unwrap() {
        let path = entry.unwrap().path();
        succeed(
            kubectl(&bin_dir, kubeconfig)
                .args(["apply", "--dry-run=server", "-k"])
                .arg(&path),
        );
        eprintln!("k8s_live: {} applies (server dry run)", path.display());
    }
    let mut guard = DaemonSetGuard {
        bin_dir: &bin_dir,
        kubeconfig,
        deleted: false,
    };
    succeed(
        kubectl(&bin_dir, kubeconfig)
            .arg("apply")
            .arg("-k")
            .arg(&overlay),
    );
    succeed(kubectl(&bin_dir, kubeconfig).args([
        "rollout",
        "status",
        "-n",
        "podtrace",
        "daemonset/podtrace",
        "--timeout=180s",
    ]));
    // Its probes on the four components, as the other tests wait for their
    // agent's (a kubectl run a look: less often).
    wait_for_function_probes(
        || daemonset_log(&bin_dir, kubeconfig),
        Duration::from_millis(500),
    );

    std::fs::write(&go, b"").unwrap();
    let pods: Vec<DemoPod> = lines
        .by_ref()
        .map_while(Result::ok)
        .take_while(|line| line != "done")
        .filter_map(|line| DemoPod::parse(&line))
        .collect();
    assert_eq!(pods.len(), 3, "{pods:#?}");
    // Each Pod's trace is exported once its creation has settled.
    let roots: Vec<String> = pods
        .iter()
        .map(|pod| name::pod_create(&pod.namespace, &pod.name))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !roots
        .iter()
        .all(|root| receiver.spans().unwrap().iter().any(|s| &s.name == root))
    {
        assert!(
            Instant::now() < deadline,
            "not every root reached the receiver in 90 s:\n{}",
            daemonset_log(&bin_dir, kubeconfig)
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let log = daemonset_log(&bin_dir, kubeconfig);
    let started = Instant::now();
    succeed(kubectl(&bin_dir, kubeconfig).args([
        "delete",
        "-n",
        "podtrace",
        "daemonset",
        "podtrace",
        "--wait=false",
    ]));
    guard.deleted = true;
    loop {
        let left = succeed(
            kubectl(&bin_dir, kubeconfig).args(["get", "pods", "-n", "podtrace", "-o", "name"]),
        );
        if left.trim().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < DAEMONSET_GONE_WITHIN,
            "the DaemonSet's Pod is still there {:?} after the DaemonSet was deleted: {left}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "k8s_live: the DaemonSet's Pod was gone {:?} after the DaemonSet was deleted",
        started.elapsed()
    );

    let all = receiver.spans().unwrap();
    assert_well_formed(&all);
    for pod in &pods {
        assert_eq!(pod.outcome, "Running");
        assert_running_pod_trace(&Trace::of_pod_in(&all, DEPLOY_CLUSTER_ID, pod), pod);
    }
    // Nothing lost on the way.
    assert!(!log.contains("kernel side lost data"), "{log}");

    std::fs::write(&hold, b"").unwrap();
    let status = demo.0.wait().unwrap();
    assert!(status.success(), "podtrace-demo: {status}");
}
