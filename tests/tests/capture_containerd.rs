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
use tracer_user::capture::RawEvent;

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
    let events = capture
        .collect_until(TIMEOUT, |event| {
            matches!(event, RawEvent::Exec(exec) if exec.argv.iter().any(|arg| arg == "echo started; sleep 3600"))
        })
        .await;
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
}
