//! Live, end to end: the podtrace agent runs while `podtrace-demo` creates
//! Pods through real etcd (mTLS + authentication) and real containerd + runc,
//! playing kube-apiserver's etcd writes (from a Go process, as the real
//! apiserver is), the scheduler's binding and the kubelet's CRI calls. What
//! reaches the agent's OTLP-JSON file must be one complete trace per Pod,
//! with every component's spans nested by cause and timed within the run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test: a failed step fails the test"
)]

use std::{
    collections::HashSet,
    io::{BufRead as _, BufReader, Seek as _},
    process::{Child, ChildStdout, Command, Stdio},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};
use tracer_user::correlate::contract::{attr, name};

use podtrace_tests::{
    agent::Agent,
    components::{
        cri::{CAPABILITIES_ADDED, CAPABILITIES_DROPPED, RUN_AS_USER},
        etcd,
        images::WORKLOAD_IMAGE,
    },
    demo_pod::DemoPod,
    live_test_can_run,
    otlp_json::{ExportedSpan, read_spans},
    podtrace_binary,
    trees::{assert_first_exec_under, assert_well_formed, outline},
};
use serde_json::Value;
use tracer_user::correlate::{assembly::SETTLE_NS, span::TraceId};

const CLUSTER: &str = "e2e-test";
const NODE: &str = "e2e-node";
/// What the agent follows and how it names the cluster and node.
const AGENT_ARGS: [&str; 8] = [
    "--target",
    "podtrace-demo",
    "--target",
    "demo-apiserver",
    "--cluster-id",
    CLUSTER,
    "--node-name",
    NODE,
];
const SPAN_KIND_SERVER: u64 = 2;
const SPAN_KIND_CLIENT: u64 = 3;

/// One live test at a time: each agent follows every podtrace-demo on the
/// machine, and a Pod's ImageStatus calls are attributed to it only when no
/// other Pod on the node was between its sandbox and its container while
/// they were asked — the other test's demo Pods would be such Pods.
static LIVE: Mutex<()> = Mutex::new(());

fn one_live_test_at_a_time() -> MutexGuard<'static, ()> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long the demo's connections (demo-apiserver's to etcd, the CRI
/// client's to containerd, etcd's peer streams) run before the agent joins:
/// long enough that their HTTP/2, HPACK and TLS state, and the members'
/// heartbeats and appends, all predate it, as on a node of a running cluster.
const AFTER_DEMO_DELAY: Duration = Duration::from_secs(5);

/// A demo run traced by an agent that joined it once its components were up
/// and their connections open: the Pods it created, the names of the broken
/// ones (created and bound, whose sandbox could not be created), the agent
/// (still running) and when the Pods' creation began (Unix ns).
struct JoinedRun {
    pods: Vec<DemoPod>,
    broken: Vec<String>,
    agent: Agent,
    began_ns: u64,
}

/// Runs the demo with `extra` arguments creating `pods` Pods of which
/// `broken` cannot run; the agent (`agent_args`, exporting to `out`) starts
/// [`AFTER_DEMO_DELAY`] after the demo said `ready`, before it creates them.
fn run_demo_agent_last(
    pods: u32,
    broken: u32,
    extra: &[&str],
    agent_args: &[&str],
    out: &std::path::Path,
) -> JoinedRun {
    let state = tempfile::tempdir().unwrap();
    let go = state.path().join("go");
    let (mut demo, stdout) = demo_until_ready(
        Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
            .args(["--pods", &pods.to_string(), "--node-name", NODE])
            .args(["--broken-pods", &broken.to_string()])
            .args(extra)
            .arg("--state-dir")
            .arg(state.path().join("state"))
            .arg("--wait-for")
            .arg(&go),
    );
    thread::sleep(AFTER_DEMO_DELAY);
    let agent = Agent::start(agent_args, out);
    let began_ns = unix_now_ns();
    std::fs::write(&go, b"").unwrap();
    let (broken, pods): (Vec<DemoPod>, Vec<DemoPod>) = stdout
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| DemoPod::parse(&line))
        .partition(|pod| pod.error.is_some());
    let status = demo.wait().unwrap();
    assert!(status.success(), "podtrace-demo: {status}");
    JoinedRun {
        pods,
        broken: broken.into_iter().map(|pod| pod.name).collect(),
        agent,
        began_ns,
    }
}

/// `podtrace explain default/NAME` with `args`; its stdout.
fn explain(name: &str, args: &[&str]) -> String {
    let output = Command::new(podtrace_binary())
        .args(["explain", &format!("default/{name}")])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "explain {name}: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn with_parent<'a>(spans: &[&'a ExportedSpan], parent: &ExportedSpan) -> Vec<&'a ExportedSpan> {
    spans
        .iter()
        .copied()
        .filter(|s| s.parent_span_id.as_deref() == Some(parent.span_id.as_str()))
        .collect()
}

fn one<'a>(
    spans: &[&'a ExportedSpan],
    what: &str,
    found: Vec<&'a ExportedSpan>,
) -> &'a ExportedSpan {
    assert_eq!(found.len(), 1, "{what}:\n{}", outline(spans));
    found[0]
}

/// A CreateContainer span (either side) of a demo Pod: the image the Pod
/// names, present before (no pull), and the restricted security context the
/// demo's kubelet asked for.
fn assert_container_facts(span: &ExportedSpan) {
    assert_eq!(
        span.string(attr::CONTAINER_IMAGE_NAME),
        Some(WORKLOAD_IMAGE),
        "{span:#?}"
    );
    assert_eq!(
        span.string(attr::CONTAINER_IMAGE_SOURCE),
        Some("present"),
        "{span:#?}"
    );
    let listed = |key: &str| -> Vec<&str> {
        span.string(key)
            .unwrap_or_else(|| panic!("no {key}: {span:#?}"))
            .split(',')
            .collect()
    };
    for cap in CAPABILITIES_DROPPED {
        assert!(
            listed(attr::CONTAINER_SECURITY_CAPABILITIES_DROPPED).contains(&cap),
            "{cap} not dropped: {span:#?}"
        );
    }
    for cap in CAPABILITIES_ADDED {
        assert!(
            listed(attr::CONTAINER_SECURITY_CAPABILITIES_ADDED).contains(&cap),
            "{cap} not added: {span:#?}"
        );
    }
    // OTLP-JSON writes 64-bit integers as strings.
    let user = span
        .attributes
        .get(attr::CONTAINER_SECURITY_RUN_AS_USER)
        .and_then(|user| match user {
            Value::String(text) => text.parse::<i64>().ok(),
            other => other.as_i64(),
        });
    assert_eq!(user, Some(RUN_AS_USER), "{span:#?}");
    assert_eq!(
        span.string(attr::CONTAINER_SECURITY_SECCOMP),
        Some("RuntimeDefault"),
        "{span:#?}"
    );
    assert!(
        matches!(
            span.attributes.get(attr::CONTAINER_SECURITY_PRIVILEGED),
            None | Some(Value::Bool(false))
        ),
        "{span:#?}"
    );
}

/// `podtrace explain` of a demo Pod says, under the waterfall, that its
/// image was present and what its container asked for.
/// `podtrace_pods_traced_total` in a scrape.
fn pods_traced(exposition: &str) -> Option<u64> {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix("podtrace_pods_traced_total "))
        .and_then(|n| n.parse().ok())
}

fn assert_facts_explained(story: &str) {
    let image = format!("image {WORKLOAD_IMAGE} present (ImageStatus)");
    assert!(story.contains(&image), "no {image:?}: {story}");
    let container = format!(
        "container main: caps {} {}, runAsUser {RUN_AS_USER}, seccomp RuntimeDefault",
        CAPABILITIES_ADDED.map(|cap| format!("+{cap}")).join(","),
        CAPABILITIES_DROPPED.map(|cap| format!("-{cap}")).join(","),
    );
    assert!(story.contains(&container), "no {container:?}: {story}");
    assert!(
        story.contains("sandbox: seccomp RuntimeDefault"),
        "no sandbox line: {story}"
    );
    assert!(
        !story.contains("privileged"),
        "a privileged container: {story}"
    );
}

/// The agent joins the demo once its components run, as on a node of a
/// running cluster (every live test here but
/// [`podtrace_started_before_the_components_traces_every_pod_from_their_first_bytes`]).
#[test]
fn every_demo_pod_gets_one_complete_trace_with_every_component_nested_by_cause() {
    if !live_test_can_run(
        "every_demo_pod_gets_one_complete_trace_with_every_component_nested_by_cause",
    ) {
        return;
    }
    let _live = one_live_test_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces.jsonl");
    let JoinedRun {
        pods,
        broken,
        agent,
        began_ns: before,
    } = run_demo_agent_last(2, 1, &[], &AGENT_ARGS, &out);
    let after = unix_now_ns();
    // A creation's root and node span go out SETTLE_NS after the Pod was
    // reported Running, at the agent's next tick (every second): polled
    // until both Pods are counted traced.
    let deadline =
        std::time::Instant::now() + Duration::from_nanos(SETTLE_NS) + Duration::from_secs(30);
    let exposition = loop {
        let exposition = agent.scrape();
        if pods_traced(&exposition).unwrap_or(0) >= 2 || std::time::Instant::now() > deadline {
            break exposition;
        }
        thread::sleep(Duration::from_millis(250));
    };
    // explain asks the running agent: a Pod's waterfall and where it stands.
    let story = explain(&pods[0].name, &["--agent", &agent.metrics]);
    assert!(
        story.contains(&name::pod_create("default", &pods[0].name)),
        "{story}"
    );
    assert!(story.contains("CRI StartContainer (server)"), "{story}");
    assert!(story.contains("status: Running"), "{story}");
    assert_facts_explained(&story);
    // A Pod whose sandbox cannot be created: the failing call and its reason.
    assert_eq!(broken.len(), 1);
    let story = explain(&broken[0], &["--agent", &agent.metrics]);
    assert!(
        story.contains("error: CRI RunPodSandbox (server): gRPC status"),
        "{story}"
    );
    assert!(story.contains("podtrace-demo-missing"), "{story}");
    agent.stop();
    // Once the agent stopped, its trace is exported incomplete, saying where.
    let out_arg = out.to_str().unwrap();
    let story = explain(&broken[0], &["--file", out_arg]);
    assert!(story.contains("status: incomplete"), "{story}");
    assert!(story.contains("stuck in node"), "{story}");
    assert_eq!(pods.len(), 2);
    // Every Pod's image and security context, under its waterfall.
    for pod in &pods {
        assert_facts_explained(&explain(&pod.name, &["--file", out_arg]));
    }
    let all = read_spans(&out).unwrap();
    assert_well_formed(&all);

    // Every phase the demo goes through has samples; exemplars name traces
    // that were exported.
    for phase in [
        "end_to_end",
        "etcd_commit",
        "wal_fsync",
        "binding",
        "sandbox",
        "container_create",
        "container_start",
    ] {
        let count = format!("podtrace_pod_phase_duration_seconds_count{{phase=\"{phase}\"}} ");
        let samples: u64 = exposition
            .lines()
            .find_map(|line| line.strip_prefix(&count))
            .unwrap_or_else(|| panic!("no {phase} histogram: {exposition}"))
            .parse()
            .unwrap();
        assert!(samples >= 2, "{phase}: {samples} samples");
    }
    let exported: HashSet<&str> = all.iter().map(|s| s.trace_id.as_str()).collect();
    let exemplars: Vec<&str> = exposition
        .split("trace_id=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(!exemplars.is_empty(), "{exposition}");
    for trace in exemplars {
        assert!(
            exported.contains(trace),
            "exemplar {trace} is no exported trace"
        );
    }
    // At least these Pods: the agent follows every podtrace-demo on the
    // machine, a concurrent test's too.
    let traced = pods_traced(&exposition).unwrap_or_else(|| panic!("no pods_traced: {exposition}"));
    assert!(traced >= 2, "{exposition}");

    for pod in &pods {
        assert_complete_trace(&all, pod, before, after);
    }
}

/// Pods created while etcd is kept busy by 8 closed-loop writers of lease
/// and event keys (a Go client on TLS, traced as the apiserver is) each still
/// get one complete trace: what podtrace leaves out to stay cheap on such
/// traffic must not cost the Pods their spans.
#[test]
fn pods_created_under_an_etcd_write_load_each_get_one_complete_trace() {
    if !live_test_can_run("pods_created_under_an_etcd_write_load_each_get_one_complete_trace") {
        return;
    }
    let _live = one_live_test_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces.jsonl");
    let mut args = AGENT_ARGS.to_vec();
    // The test profile's agent is unoptimised: room for what it reads slowly.
    args.extend(["--target", "etcd-load", "--ring-buffer-bytes", "67108864"]);
    // 8 writers: each has one write in flight, so one WAL append holds at
    // most 8 of their 2 KiB entries besides the Pod's (~22 KiB), inside the
    // 4 records (32 KiB) a WAL write is captured in; 16 writers can make
    // 35 KiB appends, whose tail — the Pod's entry at times — is cut (counted).
    let JoinedRun {
        pods,
        broken,
        agent,
        began_ns: before,
    } = run_demo_agent_last(3, 0, &["--etcd-load", "8"], &args, &out);
    let after = unix_now_ns();
    // The load's connections, each of one resource (leases or events), were
    // muted on both sides; the relay's, which carries Pods, was not.
    let exposition = agent.scrape();
    let muted: u64 = exposition
        .lines()
        .find_map(|line| line.strip_prefix("podtrace_muted_connections_since_start "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no muted-connections gauge: {exposition}"));
    assert!(muted >= 2, "{muted} connections muted");
    let summary = agent.stop();
    assert!(broken.is_empty());
    assert_eq!(pods.len(), 3);
    // Nothing the kernel side captured was lost on the way.
    assert!(summary.contains("ring_buffer_full=0"), "{summary}");
    let all = read_spans(&out).unwrap();
    assert_well_formed(&all);
    for pod in &pods {
        assert_complete_trace(&all, pod, before, after);
    }
}

/// The Pod's one trace is complete: one root, no orphans, every span
/// within [`before`, `after`], the apiserver's three etcd writes with etcd's
/// handling (the create made durable by a WAL sync), and the node's CRI calls
/// with containerd's handling, runc and the containers' first processes.
fn assert_complete_trace(all: &[ExportedSpan], pod: &DemoPod, before: u64, after: u64) {
    let trace_id = TraceId::for_pod(CLUSTER, &pod.uid).to_hex();
    let spans: Vec<&ExportedSpan> = all.iter().filter(|s| s.trace_id == trace_id).collect();
    // One trace holds the Pod's creation; its deletion (the demo removes
    // its Pods at the end), if the agent saw it, is a trace of its own.
    let deletion_id = TraceId::for_pod_deletion(CLUSTER, &pod.uid).to_hex();
    let of_pod: HashSet<&str> = all
        .iter()
        .filter(|s| s.string(attr::K8S_POD_UID) == Some(pod.uid.as_str()))
        .map(|s| s.trace_id.as_str())
        .collect();
    assert!(of_pod.contains(trace_id.as_str()), "{of_pod:?}");
    assert!(
        of_pod.is_subset(&HashSet::from([trace_id.as_str(), deletion_id.as_str()])),
        "{of_pod:?}"
    );
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids repeat");
    for span in &spans {
        if let Some(parent) = &span.parent_span_id {
            assert!(ids.contains(parent.as_str()), "orphan {span:#?}");
        }
        // Within the wall-clock time of the run.
        assert!(
            before <= span.start_unix_ns
                && span.start_unix_ns <= span.end_unix_ns
                && span.end_unix_ns <= after,
            "{span:#?} outside [{before}, {after}]"
        );
    }

    let roots: Vec<_> = spans
        .iter()
        .copied()
        .filter(|s| s.parent_span_id.is_none())
        .collect();
    let root = one(&spans, "root", roots);
    assert_eq!(root.name, name::pod_create("default", &pod.name));
    assert_eq!(root.attributes[attr::TRACE_COMPLETE], Value::Bool(true));

    // etcd: the apiserver's three writes (client, from the Go relay's
    // TLS plaintext) each containing etcd's handling (server), the
    // create made durable by a WAL fdatasync inside etcd's handling.
    let clients: Vec<_> = with_parent(&spans, root)
        .into_iter()
        .filter(|s| s.name == "etcdserverpb.KV/Txn" && s.kind == SPAN_KIND_CLIENT)
        .collect();
    assert_eq!(clients.len(), 3, "\n{}", outline(&spans));
    for client in &clients {
        let server = one(&spans, "etcd server span", with_parent(&spans, client));
        assert_eq!(server.kind, SPAN_KIND_SERVER);
        assert!(
            client.start_unix_ns <= server.start_unix_ns
                && server.end_unix_ns <= client.end_unix_ns
        );
        if server.string(attr::K8S_POD_CHANGE) == Some("created") {
            let wal = one(
                &spans,
                "WAL sync of the create",
                with_parent(&spans, server),
            );
            assert_eq!(wal.name, name::ETCD_WAL);
            // The demo started etcd after the agent: its `--name` from the
            // exec's arguments.
            assert_eq!(wal.string(attr::ETCD_MEMBER_NAME), Some(etcd::MEMBER_NAME));
        }
    }
    let changes: HashSet<_> = clients
        .iter()
        .filter_map(|c| c.string(attr::K8S_POD_CHANGE))
        .collect();
    let bound = format!("bound to {NODE}");
    assert_eq!(
        changes,
        HashSet::from(["created", bound.as_str(), "status Running"])
    );

    // The node: the kubelet's CRI calls, containerd's handling inside
    // each, runc and the containers' first processes under the calls.
    let node = one(
        &spans,
        &name::node("span"),
        with_parent(&spans, root)
            .into_iter()
            .filter(|s| s.name == name::node(NODE))
            .collect(),
    );
    let mut servers = Vec::new();
    for call in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
        let name = format!("runtime.v1.RuntimeService/{call}");
        let client = one(
            &spans,
            &name,
            with_parent(&spans, node)
                .into_iter()
                .filter(|s| s.name == name)
                .collect(),
        );
        assert_eq!(client.kind, SPAN_KIND_CLIENT);
        // containerd's handling; a span of the call's that lies outside
        // it (the container's exec after runc start returned) may hang
        // from the client span beside it.
        let server = one(
            &spans,
            &name,
            with_parent(&spans, client)
                .into_iter()
                .filter(|s| s.name == name && s.kind == SPAN_KIND_SERVER)
                .collect(),
        );
        servers.push(server);
        if call == "CreateContainer" {
            assert_container_facts(client);
            assert_container_facts(server);
        }
        if call == "RunPodSandbox" {
            for side in [client, server] {
                assert_eq!(
                    side.string(attr::CONTAINER_SECURITY_SECCOMP),
                    Some("RuntimeDefault"),
                    "{side:#?}"
                );
            }
        }
    }
    // The CNI plugins that set the sandbox's network up hang from its
    // RunPodSandbox, each placed by the sandbox id containerd gave it.
    let cni: Vec<_> = with_parent(&spans, servers[0])
        .into_iter()
        .filter(|s| s.name.starts_with(&name::cni("")))
        .collect();
    assert!(!cni.is_empty(), "no CNI run: \n{}", outline(&spans));
    for run in cni {
        assert_eq!(
            run.string(attr::CRI_SANDBOX_ID),
            Some(pod.sandbox_id.as_str())
        );
        assert_eq!(
            run.string(attr::ATTRIBUTION),
            Some("CNI_CONTAINERID: the sandbox the runtime named"),
            "{run:#?}"
        );
    }
    // The kubelet asked whether the image was there before it created
    // the container: it was (so no PullImage).
    let statuses: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "runtime.v1.ImageService/ImageStatus")
        .collect();
    assert!(
        statuses.iter().any(|s| s.kind == SPAN_KIND_CLIENT
            && s.attributes.get(attr::CONTAINER_IMAGE_PRESENT) == Some(&Value::Bool(true))
            && s.string(attr::CONTAINER_IMAGE_NAME) == Some(WORKLOAD_IMAGE)),
        "no ImageStatus (client) found {WORKLOAD_IMAGE} present: \n{}",
        outline(&spans)
    );
    assert!(
        statuses.iter().any(|s| s.kind == SPAN_KIND_SERVER
            && s.attributes.get(attr::CONTAINER_IMAGE_PRESENT) == Some(&Value::Bool(true))),
        "no ImageStatus (server) found the image present: \n{}",
        outline(&spans)
    );
    assert!(
        !spans.iter().any(|s| s.name.ends_with("/PullImage")),
        "a pull of a present image: \n{}",
        outline(&spans)
    );
    for (server, container) in [
        (servers[0], &pod.sandbox_id),
        (servers[2], &pod.container_id),
    ] {
        let children = with_parent(&spans, server);
        for name in ["runc create", "runc start"] {
            assert!(
                children
                    .iter()
                    .any(|s| s.name == name
                        && s.string(attr::CONTAINER_ID) == Some(container.as_str())),
                "no {name} of {container} under {}: {children:#?}",
                server.name
            );
        }
        assert_first_exec_under(&spans, server, container);
    }
}

/// Starts `podtrace-demo` (`command`) and reads its stdout until it says
/// `ready`; returns it with the rest of its stdout.
fn demo_until_ready(command: &mut Command) -> (Child, BufReader<ChildStdout>) {
    let mut demo = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(demo.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim() != "ready" {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "demo ended before ready"
        );
    }
    (demo, stdout)
}

/// The one test whose agent starts before the components (a node where the
/// agent is installed first): it sees every connection from its first
/// bytes — HPACK tables built in its sight, TLS handshakes, etcd's member
/// start — and every Pod still gets one complete trace.
#[test]
fn podtrace_started_before_the_components_traces_every_pod_from_their_first_bytes() {
    if !live_test_can_run(
        "podtrace_started_before_the_components_traces_every_pod_from_their_first_bytes",
    ) {
        return;
    }
    let _live = one_live_test_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces.jsonl");
    let agent = Agent::start(&AGENT_ARGS, &out);
    let mut demo = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
        .args(["--pods", "2", "--node-name", NODE, "--state-dir"])
        .arg(dir.path().join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(demo.stdout.take().unwrap());
    let pods: Vec<Value> = stdout
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect();
    assert!(demo.wait().unwrap().success());
    agent.stop();
    assert_eq!(pods.len(), 2);
    let all = read_spans(&out).unwrap();
    assert_well_formed(&all);
    for pod in &pods {
        let uid = pod["uid"].as_str().unwrap();
        let trace_id = TraceId::for_pod(CLUSTER, uid).to_hex();
        let spans: Vec<&ExportedSpan> = all.iter().filter(|s| s.trace_id == trace_id).collect();
        let named = |name: &str, kind: u64| {
            spans
                .iter()
                .filter(|s| s.name == name && s.kind == kind)
                .count()
        };
        let root = spans
            .iter()
            .find(|s| s.parent_span_id.is_none())
            .unwrap_or_else(|| panic!("no root for {uid}: \n{}", outline(&spans)));
        assert_eq!(root.attributes[attr::TRACE_COMPLETE], Value::Bool(true));
        assert_eq!(
            named("etcdserverpb.KV/Txn", SPAN_KIND_SERVER),
            3,
            "\n{}",
            outline(&spans)
        );
        assert_eq!(
            named("etcdserverpb.KV/Txn", SPAN_KIND_CLIENT),
            3,
            "\n{}",
            outline(&spans)
        );
        for call in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
            let name = format!("runtime.v1.RuntimeService/{call}");
            assert_eq!(
                named(&name, SPAN_KIND_SERVER),
                1,
                "{name}: \n{}",
                outline(&spans)
            );
        }
        assert!(
            spans.iter().any(|s| s.name == "runc start"),
            "\n{}",
            outline(&spans)
        );
    }
}

/// A slow disk: an ext4 filesystem on a loop device whose writes the
/// kernel's block throttling holds to a rate (cgroup v1 `blkio` rule on the
/// root group: every writer to that device, the journal's thread included),
/// shared with a neighbour that keeps syncing writes of its own, so every
/// write waits behind one of those (a throttle alone lets a write through at
/// once after a quiet while). (netem, to slow a member's link instead, is
/// not built into this machine kind's kernel: `CONFIG_NET_SCH_NETEM` is not
/// set.) Unmounted and detached on drop.
struct SlowDisk {
    mount: std::path::PathBuf,
    device: String,
    major_minor: String,
    neighbour: Option<(Arc<AtomicBool>, thread::JoinHandle<()>)>,
}

const THROTTLE: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device";

impl SlowDisk {
    fn mount(dir: &std::path::Path) -> Self {
        let run = |program: &str, args: &[&str]| -> String {
            let output = Command::new(program).args(args).output().unwrap();
            assert!(
                output.status.success(),
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        };
        // Room for etcd's two preallocated 64 MiB segments; sparse.
        let image = dir.join("slow-disk.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        let image = image.to_str().unwrap();
        let device = run("losetup", &["--find", "--show", image]);
        let mount = dir.join("slow-disk");
        std::fs::create_dir_all(&mount).unwrap();
        // From here on, dropped as soon as a step fails.
        let mut disk = Self {
            mount: mount.clone(),
            device: device.clone(),
            major_minor: String::new(),
            neighbour: None,
        };
        // Initialised now, not by a background thread that would write
        // through the throttle later.
        let init = "lazy_itable_init=0,lazy_journal_init=0";
        run("mkfs.ext4", &["-q", "-E", init, &device]);
        run("mount", &[&device, mount.to_str().unwrap()]);
        use std::os::unix::fs::MetadataExt as _;
        let rdev = std::fs::metadata(&device).unwrap().rdev();
        disk.major_minor = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
        disk
    }

    /// From now on, writes to the disk go at `bytes_per_s`, behind the
    /// neighbour's.
    fn throttle(&mut self, bytes_per_s: u32) {
        use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
        let rule = format!("{} {bytes_per_s}", self.major_minor);
        std::fs::write(THROTTLE, rule).unwrap();
        let mut noise = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .open(self.mount.join("neighbour"))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let writer = thread::spawn(move || {
            let block = [0u8; 4096];
            while !stopped.load(Ordering::Relaxed) {
                if noise.write_all(&block).is_err() || noise.rewind().is_err() {
                    break;
                }
            }
        });
        self.neighbour = Some((stop, writer));
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        if let Some((stop, writer)) = self.neighbour.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = writer.join();
        }
        let _ = std::fs::write(THROTTLE, format!("{} 0", self.major_minor));
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// Three etcd members, one of which keeps its WAL on a slow disk: every
/// Pod write's trace names that follower as the slow one (its replication
/// span is the longer), and its commit span says the quorum did not wait
/// for it.
#[test]
fn a_slow_etcd_follower_is_named_slow_and_the_commit_does_not_wait_for_it() {
    const TEST: &str = "a_slow_etcd_follower_is_named_slow_and_the_commit_does_not_wait_for_it";
    if !live_test_can_run(TEST) {
        return;
    }
    let _live = one_live_test_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (out, go, info) = (
        dir.path().join("traces.jsonl"),
        dir.path().join("go"),
        dir.path().join("cluster.json"),
    );
    let mut disk = SlowDisk::mount(dir.path());
    // The last member's WAL on the slow disk; the first leads.
    let (mut demo, stdout) = demo_until_ready(
        Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
            .args(["--pods", "3", "--etcd-members", "3", "--node-name", NODE])
            .arg("--etcd-leader-first")
            .arg("--etcd-wal-dir")
            .arg(disk.mount.join("wal"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--wait-for")
            .arg(&go)
            .arg("--cluster-info")
            .arg(&info),
    );
    let info: Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
    let members = info["etcd_members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{info}");
    assert_eq!(members[0]["leader"], true, "{info}");
    let slow_name = members[2]["name"].as_str().unwrap().to_owned();
    // Slow once the cluster is up (bootstrapping through it takes long).
    disk.throttle(32 << 10);
    // The agent joins peer streams that have carried heartbeats and appends
    // for a while (decoded from the bytes that follow, raft::joined).
    thread::sleep(AFTER_DEMO_DELAY);
    let agent = Agent::start(&AGENT_ARGS, &out);
    std::fs::write(&go, b"").unwrap();
    let pods: Vec<DemoPod> = stdout
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| DemoPod::parse(&line))
        .collect();
    assert!(demo.wait().unwrap().success());
    drop(disk);
    agent.stop();
    assert_eq!(pods.len(), 3);
    let all = read_spans(&out).unwrap();
    assert_well_formed(&all);
    for pod in &pods {
        let trace_id = TraceId::for_pod(CLUSTER, &pod.uid).to_hex();
        let spans: Vec<&ExportedSpan> = all.iter().filter(|s| s.trace_id == trace_id).collect();
        let commits: Vec<&&ExportedSpan> = spans
            .iter()
            .filter(|s| s.name == name::ETCD_COMMIT)
            .collect();
        assert_eq!(commits.len(), 3, "a commit per write:\n{}", outline(&spans));
        for commit in commits {
            let index = &commit.attributes[attr::ETCD_RAFT_INDEX];
            let replicated = |slow: bool| -> &ExportedSpan {
                let found: Vec<&&ExportedSpan> = spans
                    .iter()
                    .filter(|s| {
                        s.name.starts_with(&name::etcd_replicate(""))
                            && &s.attributes[attr::ETCD_RAFT_INDEX] == index
                            && (s.string(attr::ETCD_RAFT_FOLLOWER_NAME) == Some(slow_name.as_str()))
                                == slow
                    })
                    .collect();
                assert_eq!(found.len(), 1, "index {index}:\n{}", outline(&spans));
                found[0]
            };
            let (slow_span, fast_span) = (replicated(true), replicated(false));
            let duration = |s: &ExportedSpan| s.end_unix_ns - s.start_unix_ns;
            assert!(
                duration(slow_span) > duration(fast_span),
                "{slow_name} is not the slow one at index {index}: {slow_span:#?}\n{fast_span:#?}\n{commit:#?}\n{}",
                outline(&spans)
            );
            assert_eq!(
                slow_span.attributes[attr::ETCD_RAFT_IN_QUORUM],
                Value::Bool(false)
            );
            assert_eq!(
                commit.string(attr::ETCD_RAFT_NOT_WAITED_FOR),
                Some(slow_name.as_str()),
                "{commit:#?}"
            );
            let waited = commit.string(attr::ETCD_RAFT_WAITED_FOR).unwrap();
            assert!(!waited.split(',').any(|m| m == slow_name), "{waited}");
        }
    }
}
