use crate::correlate::contract::attr;

use tracer_decode::{
    cri::{SandboxPod, SecurityFacts},
    identity::PodIdentity,
};

use tracer_common::config::TargetReason;

use super::{
    images::{IMAGE_CLAIM_NS, with_default_tag},
    *,
};
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
        .filter(|s| s.name.starts_with(&name::cni("")))
        .collect();
    assert_eq!(cni.len(), 2, "{cni:#?}");
    let ptp = cni.iter().find(|s| s.name == name::cni("ptp")).unwrap();
    let host_local = cni
        .iter()
        .find(|s| s.name == name::cni("host-local"))
        .unwrap();
    assert_eq!(host_local.parent_span_id, Some(ptp.span_id));
    assert_eq!(
        attribute(ptp, attr::PROCESS_PID),
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
        .filter(|s| s.name.starts_with(&name::cni("")))
        .collect();
    assert_eq!(cni.len(), 1, "{cni:#?}");
    assert_eq!(cni[0].string_attribute(attr::K8S_POD_UID), Some("u-2"));
    assert_eq!(
        attribute(cni[0], attr::PROCESS_PID),
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
    let nodes: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name::node("node-a"))
        .collect();
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
            attribute(status, attr::CONTAINER_IMAGE_NAME).cloned(),
            string("busybox:1.36")
        );
        assert_eq!(
            attribute(status, attr::CONTAINER_IMAGE_PRESENT),
            Some(&AttributeValue::Bool(true))
        );
        assert_eq!(status.string_attribute(attr::K8S_POD_UID), Some("u-1"));
        let create = named("/CreateContainer", kind);
        for (key, value) in [
            (attr::CONTAINER_IMAGE_NAME, string("busybox:1.36")),
            (attr::CONTAINER_IMAGE_ID, string(ID)),
            (attr::K8S_CONTAINER_NAME, string("c")),
            (attr::CONTAINER_IMAGE_SOURCE, string(IMAGE_PRESENT)),
            (
                attr::CONTAINER_SECURITY_CAPABILITIES_ADDED,
                string("NET_ADMIN,SYS_TIME"),
            ),
            (attr::CONTAINER_SECURITY_SECCOMP, string("RuntimeDefault")),
            (
                attr::CONTAINER_SECURITY_PRIVILEGED,
                Some(AttributeValue::Bool(true)),
            ),
            (
                attr::CONTAINER_SECURITY_RUN_AS_USER,
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
        attribute(status, attr::CONTAINER_IMAGE_PRESENT),
        Some(&AttributeValue::Bool(false))
    );
    let pull = named("/PullImage");
    assert_eq!(
        pull.string_attribute(attr::CONTAINER_IMAGE_NAME),
        Some("busybox:1.36")
    );
    assert_eq!(pull.end_unix_ns - pull.start_unix_ns, 75 * MS);
    let create = named("/CreateContainer");
    assert_eq!(
        create.string_attribute(attr::CONTAINER_IMAGE_SOURCE),
        Some(IMAGE_PULLED)
    );
    assert_eq!(
        create.string_attribute(attr::CONTAINER_IMAGE_NAME),
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
    assert_eq!(create.string_attribute(attr::CONTAINER_IMAGE_SOURCE), None);
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
            client_create.string_attribute(attr::CONTAINER_IMAGE_SOURCE),
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
