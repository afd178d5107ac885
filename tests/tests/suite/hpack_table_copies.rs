//! Live, over mTLS and over a plain unix socket: a podtrace started after
//! its components' HTTP/2 connections were established (as on every node of
//! a running cluster) copies the connections' HPACK tables from the
//! processes, decodes every later request from the wire, and detaches the
//! HPACK probes — whose trap on every header field is most of what podtrace
//! would otherwise cost etcd, and the kubelet's and containerd's CRI calls.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    path::Path,
    time::{Duration, Instant},
};
use tracer_user::correlate::contract::attr;

use podtrace_tests::{
    agent::Agent,
    components::{
        Containerd, ContainerdOptions, Etcd, EtcdOptions,
        etcd_load::{EtcdLoadBinary, KeyMix, apiserver_tls},
    },
    live_test_can_run,
    otlp_json::read_spans,
};

#[test]
fn pod_writes_on_tls_connections_older_than_podtrace_are_all_traced_with_the_header_probes_detached()
 {
    if !live_test_can_run(
        "pod_writes_on_tls_connections_older_than_podtrace_are_all_traced_with_the_header_probes_detached",
    ) {
        return;
    }
    // Probes attached as uprobe multi links (this kernel has them): one
    // link per program and executable, the HPACK ones among them detached
    // during the leg, the rest at stop.
    let links = traced_load(&[]);
    assert!(
        links.iter().any(|line| !line.contains("links=0 ")),
        "no multi links: {links:#?}"
    );
    // The same with one perf event per probe, as on kernels before 6.6
    // (in this test, not beside it: an agent would see the other's etcd).
    let links = traced_load(&["--uprobe-perf-events"]);
    assert!(
        links.iter().all(|line| line.contains("links=0 ")),
        "multi links although asked for perf events: {links:#?}"
    );
    // With the decoding yielding CPU to the load (`--nice 10`): the ring
    // buffer's reader, on a thread of its own at the start priority, keeps
    // the ring from filling while the debug build's decoding lags, and the
    // backlog raises the decoding back to nice 0 — every write still gets
    // both spans, nothing is dropped.
    traced_load(&["--nice", "10"]);
}

/// Runs a Pod-write load over mTLS whose connections podtrace (started
/// with `agent_args` besides the target) joins after their start, checks
/// the spans and the HPACK probes' detach, and returns the agent's log
/// lines about the multi links it closed at stop.
fn traced_load(agent_args: &[&str]) -> Vec<String> {
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: false,
    })
    .unwrap();
    let tls = apiserver_tls(&etcd).unwrap();
    let binary =
        EtcdLoadBinary::build(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("etcd-load")).unwrap();
    let mut load = binary
        .start(etcd.endpoint(), &tls, KeyMix::Pods, 4, 2)
        .unwrap();
    // The connections' HPACK tables fill before podtrace starts.
    load.leg(Duration::from_secs(1)).unwrap();

    let out = tempfile::NamedTempFile::new().unwrap();
    let args: Vec<&str> = ["--target", "etcd-load"]
        .iter()
        .chain(agent_args)
        .copied()
        .collect();
    let agent = Agent::start(&args, out.path());
    let leg = load.leg(Duration::from_secs(4)).unwrap();
    assert_eq!(leg.errors, 0, "{:?}", leg.first_error);
    assert!(leg.requests > 100, "{} writes", leg.requests);
    let detached = agent.logged("HPACK probes detached");
    let attached_again = agent.logged("HPACK probes attached again");
    let stopped = agent.stop_with_log();
    let last = stopped.last;
    let links: Vec<String> = stopped
        .log
        .into_iter()
        .filter(|line| line.contains("Go probe links detached"))
        .collect();

    for pid in [etcd.pid(), load.pid()] {
        assert!(
            detached
                .iter()
                .any(|line| line.contains(&format!("/proc/{pid}/exe"))),
            "HPACK probes of {pid} stay attached: {detached:#?}"
        );
    }
    assert!(attached_again.is_empty(), "{attached_again:#?}");
    assert!(last.contains("ring_buffer_full=0"), "{last}");

    // Every write of the leg: the client's call and etcd's, each with its
    // method from the wire — with the probes gone, only a loaded table
    // tells `/etcdserverpb.KV/Txn` from an index into the table.
    let spans = read_spans(out.path()).unwrap();
    let count = |kind| {
        spans
            .iter()
            .filter(|span| span.name == "etcdserverpb.KV/Txn" && span.kind == kind)
            .count() as u64
    };
    // On a mismatch, what else the spans were named (a method not decoded,
    // a span of another name) says where the missing one went.
    let names = || {
        let mut names = std::collections::BTreeMap::<(String, u64), u64>::new();
        for span in &spans {
            *names.entry((span.name.clone(), span.kind)).or_default() += 1;
        }
        names
    };
    // And which write lost a span: the client calls no server span hangs
    // from, the server calls whose client span is absent — when in the leg
    // (ms after its first Txn span), and the key.
    let alone = || {
        let txn = |kind| {
            spans
                .iter()
                .filter(move |span| span.name == "etcdserverpb.KV/Txn" && span.kind == kind)
        };
        let first = txn(3).map(|span| span.start_unix_ns).min().unwrap_or(0);
        let describe = |span: &podtrace_tests::otlp_json::ExportedSpan| {
            format!(
                "kind {} at +{} ms of the leg's {} ms, {:?}",
                span.kind,
                span.start_unix_ns.saturating_sub(first) / 1_000_000,
                txn(3)
                    .map(|span| span.end_unix_ns)
                    .max()
                    .unwrap_or(0)
                    .saturating_sub(first)
                    / 1_000_000,
                span.string(attr::ETCD_KEY)
            )
        };
        let clients: Vec<String> = txn(3)
            .filter(|client| {
                !txn(2).any(|server| server.parent_span_id.as_ref() == Some(&client.span_id))
            })
            .map(describe)
            .collect();
        let servers: Vec<String> = txn(2)
            .filter(|server| {
                !txn(3).any(|client| server.parent_span_id.as_ref() == Some(&client.span_id))
            })
            .map(describe)
            .collect();
        (clients, servers)
    };
    assert_eq!(
        count(2),
        leg.requests,
        "server spans: {:#?} {:#?}",
        names(),
        alone()
    );
    assert_eq!(
        count(3),
        leg.requests,
        "client spans: {:#?} {:#?}",
        names(),
        alone()
    );
    links
}

/// containerd's CRI server on its unix socket, with a kubelet-like client
/// connected before podtrace started: no TLS probe runs on that connection,
/// so its tables are copied at containerd's socket reads and writes.
#[tokio::test(flavor = "multi_thread")]
async fn cri_calls_on_a_plain_connection_older_than_podtrace_let_the_header_probes_go() {
    if !live_test_can_run(
        "cri_calls_on_a_plain_connection_older_than_podtrace_let_the_header_probes_go",
    ) {
        return;
    }
    let containerd = Containerd::start(ContainerdOptions {
        image_cache_dir: env!("CARGO_TARGET_TMPDIR").into(),
    })
    .unwrap();
    let cri = containerd.cri().await.unwrap();
    let calls = || async {
        cri.version().await.unwrap();
        cri.list_pod_sandboxes().await.unwrap();
    };
    // The connection's HPACK tables fill before podtrace starts.
    for _ in 0..5 {
        calls().await;
    }

    let out = tempfile::NamedTempFile::new().unwrap();
    // containerd only: the other test of this file runs beside this one,
    // and this agent would otherwise put its probes on that test's etcd too.
    let agent = Agent::start(&["--only-targets", "--target", "containerd"], out.path());
    let exe = format!("/proc/{}/exe", containerd.pid());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !agent
        .logged("HPACK probes detached")
        .iter()
        .any(|line| line.contains(&exe))
    {
        assert!(
            Instant::now() < deadline,
            "containerd's HPACK probes stay attached: {:#?}",
            agent.logged("HPACK")
        );
        calls().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Later calls are decoded from the wire with the copied tables.
    for _ in 0..5 {
        calls().await;
    }
    let attached_again = agent.logged("HPACK probes attached again");
    let stopped = agent.stop_with_log();
    assert!(attached_again.is_empty(), "{attached_again:#?}");
    let copies = stopped
        .log
        .iter()
        .find(|line| line.contains("copies of HPACK tables"))
        .unwrap_or_else(|| panic!("no table copies logged: {:#?}", stopped.log));
    assert!(
        copies.contains("refused=0 incomplete=0") && !copies.contains("loaded=0 "),
        "{copies}"
    );
}
