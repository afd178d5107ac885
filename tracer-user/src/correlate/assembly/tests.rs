use super::*;

const CLUSTER: &str = "c";
const NODE: &str = "node-a";
const UID: &str = "8f9c0b7e-2a51-4c36-9d0e-5b1f7e3a9c42";
const MS: u64 = 1_000_000;
/// Unix ns of the tests' time 0.
const T0: u64 = 1_700_000_000_000_000_000;

fn creation() -> TraceId {
    TraceId::for_pod(CLUSTER, UID)
}

fn root_id() -> SpanId {
    SpanId::of(creation(), &SpanKey::Root)
}

fn node_id() -> SpanId {
    SpanId::of(creation(), &SpanKey::Node(NODE))
}

/// A span of the Pod from `start_ms` to `end_ms`, with `attributes`
/// besides the Pod's.
fn span(
    key: &str,
    parent: Option<SpanId>,
    name: &str,
    (start_ms, end_ms): (u64, u64),
    attributes: &[(&str, &str)],
) -> Span {
    let mut all = vec![
        string_attribute(attr::K8S_POD_NAME, "web"),
        string_attribute(attr::K8S_NAMESPACE_NAME, "default"),
        string_attribute(attr::K8S_POD_UID, UID),
    ];
    all.extend(attributes.iter().map(|(k, v)| string_attribute(k, v)));
    Span {
        trace_id: creation(),
        span_id: SpanId::for_key(creation(), key.as_bytes()),
        parent_span_id: parent,
        name: name.to_owned(),
        kind: SpanKind::Internal,
        start_unix_ns: T0 + start_ms * MS,
        end_unix_ns: T0 + end_ms * MS,
        attributes: all,
        status: SpanStatus::Unset,
        links: Vec::new(),
    }
}

fn root(end_ms: u64) -> Span {
    let mut root = span(
        "root",
        None,
        &name::pod_create("default", "web"),
        (0, end_ms),
        &[],
    );
    root.span_id = root_id();
    root.attributes
        .push(string_attribute(attr::K8S_NODE_NAME, NODE));
    root
}

fn node_span(start_ms: u64, end_ms: u64) -> Span {
    let mut node = span(
        "node",
        Some(root_id()),
        &name::node("node-a"),
        (start_ms, end_ms),
        &[],
    );
    node.span_id = node_id();
    node
}

fn cri(key: &str, method: &str, times: (u64, u64)) -> Span {
    span(
        key,
        Some(node_id()),
        &format!("runtime.v1.RuntimeService/{method}"),
        times,
        &[(attr::RPC_METHOD, method), (attr::K8S_NODE_NAME, NODE)],
    )
}

fn assembly() -> Assembly {
    Assembly::new(CLUSTER.to_owned(), NODE.to_owned(), 300_000 * MS)
}

fn at(ms: u64) -> u64 {
    T0 + ms * MS
}

/// Every span inside its parent's time, every parent present, one root.
fn assert_tree(spans: &[Span], trace: TraceId) {
    let of_trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == trace).collect();
    let by_id: HashMap<SpanId, &Span> = of_trace.iter().map(|s| (s.span_id, *s)).collect();
    assert_eq!(by_id.len(), of_trace.len(), "ids repeat: {of_trace:#?}");
    let roots = of_trace
        .iter()
        .filter(|s| s.parent_span_id.is_none())
        .count();
    assert_eq!(roots, 1, "{of_trace:#?}");
    for span in &of_trace {
        if let Some(parent) = span.parent_span_id {
            let parent = by_id
                .get(&parent)
                .unwrap_or_else(|| panic!("orphan {span:#?}"));
            assert!(
                parent.start_unix_ns <= span.start_unix_ns
                    && span.end_unix_ns <= parent.end_unix_ns,
                "{span:#?} outside {parent:#?}"
            );
        }
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name}: {spans:#?}"))
}

#[test]
fn a_creation_goes_out_once_settled_as_a_tree_without_what_ran_after_it() {
    let mut assembly = assembly();
    let start = cri("start", "StartContainer", (20, 50));
    let exec = span(
        "exec",
        Some(start.span_id),
        &name::container_start("sh"),
        (55, 55),
        &[(attr::K8S_NODE_NAME, NODE)],
    );
    let sync = span(
        "sync",
        Some(node_id()),
        name::KUBELET_SYNC,
        (5, 52),
        &[(attr::K8S_COMPONENT, "kubelet")],
    );
    // The spans go out as they come; the summaries wait.
    let mut out = assembly.admit(
        vec![start, exec, sync, node_span(20, 50), root(100)],
        at(100),
    );
    assert_eq!(out.len(), 3, "{out:#?}");
    // A status poll after the root: in neither trace.
    let poll = cri("poll", "ContainerStatus", (200, 201));
    assert!(assembly.admit(vec![poll], at(201)).is_empty());
    assert!(assembly.tick(at(100) + SETTLE_NS - 1).is_empty());
    let summaries = assembly.tick(at(100) + SETTLE_NS);
    assert_eq!(summaries.len(), 2, "{summaries:#?}");
    out.extend(summaries);
    assert_eq!(out.len(), 5, "{out:#?}");
    assert_tree(&out, creation());
    // The node span reaches from the kubelet's first work to the
    // process start; the exec that followed its call's answer hangs
    // from the node span.
    let node = named(&out, &name::node("node-a"));
    assert_eq!((node.start_unix_ns, node.end_unix_ns), (at(5), at(55)));
    let exec = named(&out, &name::container_start("sh"));
    assert_eq!(exec.parent_span_id, Some(node_id()));
    // It links to the call it belongs to; spans that fit keep no link.
    let start = named(&out, "runtime.v1.RuntimeService/StartContainer");
    assert_eq!(
        exec.links,
        [SpanLink {
            trace_id: creation(),
            span_id: start.span_id
        }]
    );
    assert!(start.links.is_empty() && named(&out, name::KUBELET_SYNC).links.is_empty());
    // The node span the node's builder closed late is not sent twice.
    assert!(
        assembly
            .admit(vec![node_span(20, 50)], at(4_000))
            .is_empty()
    );
    assert!(assembly.tick(at(100) + 2 * SETTLE_NS + 201 * MS).is_empty());
    assert_eq!(assembly.after_creation, 1);
    assert!(assembly.finish().is_empty());
}

/// containerd's side of RunPodSandbox whose kubelet side never came
/// stops waiting for it and goes out; the pause process, which exec'd
/// after the call returned and waited for that call, still goes out
/// inside its holder's time: under the node span, linked to the call.
#[test]
fn a_child_of_a_span_that_stopped_waiting_for_its_parent_is_still_held_to_its_time() {
    let mut assembly = assembly();
    let kubelet_side = SpanId::for_key(creation(), b"kubelet-side");
    let mut sandbox = cri("sandbox", "RunPodSandbox", (20, 50));
    sandbox.parent_span_id = Some(kubelet_side);
    let pause = span(
        "pause",
        Some(sandbox.span_id),
        &name::container_start("pause"),
        (82, 82),
        &[(attr::K8S_NODE_NAME, NODE)],
    );
    let mut out = assembly.admit(vec![pause], at(83));
    out.extend(assembly.admit(vec![sandbox, root(100)], at(100)));
    assert!(out.is_empty(), "{out:#?}");
    out.extend(assembly.tick(at(100) + SETTLE_NS));
    let pause = named(&out, &name::container_start("pause"));
    assert_eq!(pause.parent_span_id, Some(node_id()), "{out:#?}");
    assert_eq!(pause.links.len(), 1);
    assert_eq!(
        named(&out, "runtime.v1.RuntimeService/RunPodSandbox").parent_span_id,
        Some(kubelet_side)
    );
    let node = named(&out, &name::node("node-a"));
    assert!(node.start_unix_ns <= at(82) && at(82) <= node.end_unix_ns);

    // The kubelet's side comes, after containerd's stopped waiting for
    // it: the pause process goes under the nearest span that holds it.
    let mut assembly = self::assembly();
    let sync = span(
        "sync",
        Some(node_id()),
        name::KUBELET_SYNC,
        (5, 90),
        &[(attr::K8S_COMPONENT, "kubelet")],
    );
    let mut client = cri("kubelet-side", "RunPodSandbox", (19, 51));
    client.parent_span_id = Some(sync.span_id);
    let mut sandbox = cri("sandbox", "RunPodSandbox", (20, 50));
    sandbox.parent_span_id = Some(client.span_id);
    let pause = span(
        "pause",
        Some(sandbox.span_id),
        &name::container_start("pause"),
        (82, 82),
        &[(attr::K8S_NODE_NAME, NODE)],
    );
    let mut out = assembly.admit(vec![sync.clone(), sandbox, pause], at(83));
    out.extend(assembly.tick(at(83) + SETTLE_NS));
    assert_eq!(out.len(), 2, "the sync and the sandbox call: {out:#?}");
    out.extend(assembly.admit(vec![client, root(100)], at(83) + SETTLE_NS + MS));
    let pause = named(&out, &name::container_start("pause"));
    assert_eq!(pause.parent_span_id, Some(sync.span_id), "{out:#?}");
    assert_eq!(pause.links.len(), 1);
}

/// The workload's first process exec'd after the status update that
/// reported the Pod Running: still the creation's, which reaches over it.
#[test]
fn a_first_exec_after_the_pod_was_reported_running_is_the_creations() {
    let mut assembly = assembly();
    let start = cri("start", "StartContainer", (20, 50));
    let exec = span(
        "exec",
        Some(start.span_id),
        &name::container_start("sh"),
        (120, 120),
        &[(attr::K8S_NODE_NAME, NODE)],
    );
    let mut out = assembly.admit(vec![start, node_span(20, 50), root(100)], at(100));
    out.extend(assembly.admit(vec![exec], at(121)));
    out.extend(assembly.tick(at(121) + SETTLE_NS));
    assert_tree(&out, creation());
    let exec = named(&out, &name::container_start("sh"));
    assert_eq!(exec.parent_span_id, Some(node_id()));
    assert_eq!(
        named(&out, &name::pod_create("default", "web")).end_unix_ns,
        at(120)
    );
    assert_eq!(assembly.after_creation, 0);
}

#[test]
fn the_teardown_and_what_runs_during_it_go_to_a_deletion_trace_linked_to_the_creation() {
    let mut assembly = assembly();
    assert!(
        assembly
            .admit(vec![node_span(10, 50), root(100)], at(100))
            .is_empty()
    );
    let creation_spans = assembly.tick(at(100) + SETTLE_NS);
    assert_eq!(creation_spans.len(), 2);
    let stop = cri("stop", "StopPodSandbox", (3000, 3100));
    let mut del = span(
        "cni",
        Some(stop.span_id),
        &name::cni("ptp"),
        (3010, 3090),
        &[
            (attr::CNI_CALL, "StopPodSandbox"),
            (attr::K8S_NODE_NAME, NODE),
        ],
    );
    del.kind = SpanKind::Internal;
    let status = span(
        "status",
        Some(node_id()),
        name::KUBELET_STATUS_UPDATE,
        (3050, 3060),
        &[(attr::K8S_COMPONENT, "kubelet")],
    );
    let poll = cri("poll", "PodSandboxStatus", (2000, 2001));
    let mut out = assembly.admit(vec![poll, del, status, stop], at(3100));
    out.extend(assembly.tick(at(3100) + SETTLE_NS));
    assert!(out.is_empty(), "the deletion waits to be quiet: {out:#?}");
    let out = assembly.tick(at(3100) + SETTLE_NS + DELETION_QUIET_NS);
    let deletion = TraceId::for_pod_deletion(CLUSTER, UID);
    assert_eq!(out.len(), 5, "{out:#?}");
    assert!(out.iter().all(|s| s.trace_id == deletion));
    assert_tree(&out, deletion);
    let root = named(&out, &name::pod_delete("default", "web"));
    assert_eq!(
        root.links,
        [SpanLink {
            trace_id: creation(),
            span_id: root_id(),
        }]
    );
    assert_eq!((root.start_unix_ns, root.end_unix_ns), (at(3000), at(3100)));
    let node = named(&out, &name::node("node-a"));
    assert_eq!(node.parent_span_id, Some(root.span_id));
    let stop = named(&out, "runtime.v1.RuntimeService/StopPodSandbox");
    assert_eq!(stop.parent_span_id, Some(node.span_id));
    assert_eq!(
        named(&out, &name::cni("ptp")).parent_span_id,
        Some(stop.span_id)
    );
    assert_eq!(
        named(&out, name::KUBELET_STATUS_UPDATE).parent_span_id,
        Some(node.span_id)
    );
    assert_eq!(assembly.after_creation, 1, "the poll before the teardown");
    // Nothing of the Pod is held any more; a late span is counted.
    let late = cri("late", "RemovePodSandbox", (90_000, 90_001));
    assert!(assembly.admit(vec![late], at(90_001)).is_empty());
    assert!(assembly.finish().is_empty());
    assert_eq!(assembly.after_creation, 2);
}

#[test]
fn without_the_root_the_status_update_that_returned_running_ends_the_creation() {
    let mut assembly = assembly();
    let route = "/api/v1/namespaces/{namespace}/pods/{name}/status";
    let update = span(
        "update",
        Some(node_id()),
        name::KUBELET_STATUS_UPDATE,
        (60, 92),
        &[(attr::K8S_COMPONENT, "kubelet")],
    );
    let patch = span(
        "patch",
        Some(update.span_id),
        &format!("PATCH {route}"),
        (61, 90),
        &[(attr::HTTP_ROUTE, route), (attr::K8S_POD_PHASE, "Running")],
    );
    let start = cri("start", "StartContainer", (20, 50));
    let resync = cri("resync", "ContainerStatus", (95, 96));
    let mut out = assembly.admit(
        vec![start, node_span(20, 50), patch, update, resync],
        at(96),
    );
    out.extend(assembly.tick(at(96) + SETTLE_NS));
    assert_eq!(out.len(), 4, "{out:#?}");
    assert!(out.iter().all(|s| !s.name.ends_with("ContainerStatus")));
    // Without the root here, the node span holds the rest.
    let node = named(&out, &name::node("node-a"));
    assert_eq!((node.start_unix_ns, node.end_unix_ns), (at(20), at(92)));
}

#[test]
fn the_agents_own_pod_is_not_exported_and_other_pods_are() {
    // The kubelet reporting the agent's Pod Running, its DELETE: pieces
    // whose roots no agent emits.
    let patch = span(
        "patch",
        Some(root_id()),
        "PATCH /api/v1/namespaces/{namespace}/pods/{name}/status",
        (10, 12),
        &[(attr::K8S_POD_PHASE, "Running")],
    );
    let delete = cri("stop", "StopPodSandbox", (30, 40));
    let mut own = assembly().without_pod(Some(UID.to_owned()));
    let mut out = own.admit(vec![patch.clone(), delete.clone()], at(40));
    out.extend(own.finish());
    assert!(out.is_empty(), "{out:#?}");
    assert_eq!(own.own_pod_spans, 2);

    let mut other = assembly().without_pod(Some("another-uid".to_owned()));
    let mut out = other.admit(vec![patch, delete], at(40));
    out.extend(other.finish());
    assert!(!out.is_empty());
    assert_eq!(other.own_pod_spans, 0);
}

#[test]
fn a_pod_that_never_started_still_gets_its_node_span() {
    let mut assembly = assembly();
    let sync = span(
        "sync",
        Some(node_id()),
        name::KUBELET_SYNC,
        (30, 40),
        &[(attr::K8S_COMPONENT, "kubelet")],
    );
    let sandbox = cri("sandbox", "RunPodSandbox", (32, 38));
    let mut root = root(300_000);
    root.status = SpanStatus::Error("stuck in node".to_owned());
    let mut out = assembly.admit(vec![sync, sandbox, root], at(300_000));
    out.extend(assembly.tick(at(300_000) + SETTLE_NS));
    assert_eq!(out.len(), 4, "{out:#?}");
    assert_tree(&out, creation());
    let node = named(&out, &name::node("node-a"));
    assert_eq!(node.parent_span_id, Some(root_id()));
    assert_eq!(node.string_attribute(attr::K8S_POD_UID), Some(UID));
    assert_eq!((node.start_unix_ns, node.end_unix_ns), (at(30), at(40)));
}
