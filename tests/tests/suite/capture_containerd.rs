//! Live: capture on Debian's real containerd (CRI over its unix socket) and
//! runc, driven by a kubelet-like CRI client: the CRI calls arrive at
//! containerd with their `:path`, runc runs `create` and `start` with the
//! container id, and the container's first process is seen.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::time::Duration;
use tracer_user::correlate::contract::{attr, name};

use podtrace_tests::{
    LiveCapture,
    components::{Containerd, ContainerdOptions},
    live_test_can_run,
};
use tracer_common::io::{ConnAction, Direction, FdKind};
use tracer_decode::{
    Chunk,
    http2::{Http2Connection, Limits},
};
use tracer_user::{
    capture::{RawEvent, clock::WallClock},
    correlate::{
        Activity, Correlator, Span, TraceConfig,
        span::{AttributeValue, SpanId, SpanKey, TraceId},
    },
    decode::{Decoder, FollowWindow},
};

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn cri_calls_reach_containerd_with_their_path_and_runc_runs_the_container() {
    if !live_test_can_run("cri_calls_reach_containerd_with_their_path_and_runc_runs_the_container")
    {
        return;
    }
    // Capture first, so containerd, its shim and runc are seen from their exec.
    let mut capture = LiveCapture::start(&["containerd", "containerd-shim*", "runc"], 4);
    let containerd = Containerd::start(ContainerdOptions {
        image_cache_dir: env!("CARGO_TARGET_TMPDIR").into(),
    })
    .unwrap();
    let cri = containerd.cri().await.unwrap();
    let uid = "5d0c7a52-cap0-4e1f-9d5a-podtrace0001";
    let pod = cri.create_pod("cap-pod", "default", uid).await.unwrap();

    // Until the container's first process: the workload's shell.
    let mut events = capture
        .collect_until(TIMEOUT, |event| {
            matches!(event, RawEvent::Exec(exec) if exec.argv.iter().any(|arg| arg == "echo started; sleep 3600"))
        })
        .await;
    // StartContainer's response and runc's exit follow the workload's exec.
    events.extend(capture.collect_for(Duration::from_secs(2)).await);
    capture.stop().await;

    let runc_with = |subcommand: &str| {
        events.iter().any(|event| {
            matches!(event, RawEvent::Exec(exec) if exec.comm == "runc"
                && exec.argv.iter().any(|arg| arg == subcommand)
                && exec.argv.last() == Some(&pod.container_id))
        })
    };
    assert!(
        runc_with("create"),
        "no `runc create {}`: {events:#?}",
        pod.container_id
    );
    assert!(
        runc_with("start"),
        "no `runc start {}`: {events:#?}",
        pod.container_id
    );
    // The container's first process descends from runc, not from the test.
    let workload = events
        .iter()
        .find_map(|event| match event {
            RawEvent::Exec(exec)
                if exec
                    .argv
                    .iter()
                    .any(|arg| arg == "echo started; sleep 3600") =>
            {
                Some(exec)
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(workload.filename, "/bin/sh");
    assert!(workload.depth >= 1, "{workload:?}");
    // Its cgroup path names the Pod and the container, as the kubelet's
    // cgroup parent and containerd lay it out.
    let cgroup = workload.cgroup_path.as_deref().unwrap_or_default();
    assert!(
        cgroup.contains(&format!("pod{uid}")) && cgroup.contains(&pod.container_id),
        "cgroup {cgroup:?}"
    );

    // Every CRI request containerd received, decoded from what it read.
    let accepted: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            RawEvent::Conn(conn)
                if conn.ids.tgid == containerd.pid() && conn.change == ConnAction::Accepted =>
            {
                Some(conn.conn)
            }
            _ => None,
        })
        .collect();
    let mut paths = Vec::new();
    for conn in accepted {
        let mut http2 = Http2Connection::new(Limits::default());
        for event in &events {
            if let RawEvent::Data(data) = event {
                if data.conn == conn && data.fd_kind == FdKind::Socket {
                    let direction = match data.direction {
                        Direction::Ingress => tracer_decode::Direction::ClientToServer,
                        Direction::Egress => tracer_decode::Direction::ServerToClient,
                    };
                    http2.push(&Chunk {
                        direction,
                        ts_ns: data.ids.ts_ns,
                        bytes: data.data.clone(),
                        truncated: data.truncated,
                    });
                }
            }
        }
        paths.extend(
            http2
                .finish()
                .iter()
                .filter_map(|exchange| exchange.path().map(str::to_owned)),
        );
    }
    for call in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
        let path = format!("/runtime.v1.RuntimeService/{call}");
        assert!(paths.contains(&path), "{path} not among {paths:?}");
    }

    // runc and the shim are followed for their lives only: the shim serves
    // ttrpc and connects back to containerd, but none of its sockets is.
    let lifecycle_only: Vec<u32> = events
        .iter()
        .filter_map(|event| match event {
            RawEvent::Exec(exec)
                if exec.comm == "runc" || exec.comm.starts_with("containerd-shim") =>
            {
                Some(exec.ids.tgid)
            }
            _ => None,
        })
        .collect();
    assert!(
        lifecycle_only.len() >= 3,
        "runc create, runc start and a shim: {lifecycle_only:?}"
    );
    let their_io: Vec<_> = events
        .iter()
        .filter(|event| match event {
            RawEvent::Conn(conn) => lifecycle_only.contains(&conn.ids.tgid),
            RawEvent::Data(data) => lifecycle_only.contains(&data.ids.tgid),
            _ => false,
        })
        .collect();
    assert!(
        their_io.is_empty(),
        "{} socket records of runc and the shim: {:#?}",
        their_io.len(),
        their_io.iter().take(3).collect::<Vec<_>>()
    );

    // The same events through decode and correlate: the node side of the
    // Pod's trace, every span in the trace derived from the Pod's UID.
    let traces = TraceConfig {
        cluster_id: "test-cluster".into(),
        node_name: "node-a".into(),
        ..TraceConfig::default()
    };
    let mut decoder = Decoder::default();
    let window = FollowWindow::new(WallClock::anchor(), None, traces.trace_timeout_ns);
    let mut correlator = Correlator::new(WallClock::anchor(), traces, window);
    let mut activities: Vec<Activity> = events
        .into_iter()
        .flat_map(|event| decoder.decode(event))
        .flat_map(|message| correlator.observe(message))
        .collect();
    activities.extend(correlator.finish());
    let spans: Vec<Span> = activities
        .into_iter()
        .filter_map(|activity| match activity {
            Activity::Spans(spans) => Some(spans),
            _ => None,
        })
        .flatten()
        .collect();
    let trace = TraceId::for_pod("test-cluster", uid);
    assert!(
        spans.iter().all(|span| span.trace_id == trace),
        "{spans:#?}"
    );
    let named = |name: &str| {
        spans
            .iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no {name} span: {spans:#?}"))
    };
    let node = named(&name::node("node-a"));
    assert_eq!(node.span_id, SpanId::of(trace, &SpanKey::Node("node-a")));
    assert_eq!(node.parent_span_id, Some(SpanId::of(trace, &SpanKey::Root)));
    for call in ["RunPodSandbox", "CreateContainer", "StartContainer"] {
        let span = named(&format!("runtime.v1.RuntimeService/{call}"));
        assert_eq!(span.parent_span_id, Some(node.span_id), "{span:#?}");
        assert!(span.start_unix_ns < span.end_unix_ns && node.start_unix_ns <= span.start_unix_ns);
    }
    // runc runs are children of the calls that caused them: containerd
    // creates and starts a workload's runc container in StartContainer.
    let start = named("runtime.v1.RuntimeService/StartContainer");
    let runc_of = |name: &str, container: &str| {
        spans.iter().find(|span| {
            span.name == name
                && span.attributes.iter().any(|(key, value)| {
                    key == attr::CONTAINER_ID
                        && *value == AttributeValue::String(container.to_owned())
                })
        })
    };
    assert_eq!(
        runc_of("runc create", &pod.container_id)
            .expect("runc create span")
            .parent_span_id,
        Some(start.span_id)
    );
    assert_eq!(
        runc_of("runc start", &pod.container_id)
            .expect("runc start span")
            .parent_span_id,
        Some(start.span_id)
    );
    let sandbox_create =
        runc_of("runc create", &pod.sandbox_id).expect("runc create of the sandbox");
    assert_eq!(
        sandbox_create.parent_span_id,
        Some(named("runtime.v1.RuntimeService/RunPodSandbox").span_id)
    );
    // The container's first process, exec'd by runc init during StartContainer.
    let first_exec = spans
        .iter()
        .find(|span| {
            span.name.starts_with(&name::container_start(""))
                && span.attributes.iter().any(|(key, value)| {
                    key == attr::CONTAINER_ID
                        && *value == AttributeValue::String(pod.container_id.clone())
                })
        })
        .unwrap_or_else(|| panic!("no first exec of the workload: {spans:#?}"));
    // Caused by StartContainer: its child, or — runc start returns once it
    // has told runc init to exec, so the exec may come after containerd
    // answered — hung from the node span that holds it in time, with
    // StartContainer as its link.
    let caused_by_start = first_exec.parent_span_id == Some(start.span_id)
        || (first_exec.parent_span_id == Some(node.span_id)
            && first_exec
                .links
                .iter()
                .any(|link| link.span_id == start.span_id)
            && start.end_unix_ns < first_exec.start_unix_ns);
    assert!(caused_by_start, "{first_exec:#?} {start:#?}");
    assert!(
        start.start_unix_ns <= first_exec.start_unix_ns,
        "{first_exec:#?}"
    );
    // Nothing but metadata: no payload bytes in any attribute.
    assert!(
        spans
            .iter()
            .all(|span| span.attributes.iter().all(|(_, value)| match value {
                AttributeValue::String(text) => text.len() < 256,
                _ => true,
            }))
    );
}
