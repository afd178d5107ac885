//! Live, over mTLS: what podtrace cannot follow costs it no more than what
//! it can (#45). A client writes keys under `/registry/pods/` whose values
//! are no object kube-apiserver stores (not its writes), flat out, on
//! connections older than the agent; the agent drops each at the first
//! check that fails (the value's first bytes) and counts it, then mutes
//! the connections that wrote nothing else (their bytes are copied no more),
//! exports nothing of them, keeps up with the load and stays within a
//! bounded memory.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{path::Path, time::Duration};

use podtrace_tests::{
    agent::{Agent, logged_count},
    components::{
        Etcd, EtcdOptions,
        etcd_load::{EtcdLoadBinary, KeyMix, apiserver_tls},
    },
    live_test_can_run,
    otlp_json::read_spans,
};

/// The agent's resident memory may grow by this much over the load (what
/// it holds per write must go with the write).
const MAX_RSS_GROWTH_KIB: u64 = 32 * 1024;

#[test]
fn pod_keys_written_values_that_are_no_objects_are_counted_and_dropped_at_load() {
    if !live_test_can_run(
        "pod_keys_written_values_that_are_no_objects_are_counted_and_dropped_at_load",
    ) {
        return;
    }
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: false,
    })
    .unwrap();
    let tls = apiserver_tls(&etcd).unwrap();
    let binary =
        EtcdLoadBinary::build(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("etcd-load")).unwrap();
    let mut load = binary
        .start(etcd.endpoint(), &tls, KeyMix::OpaquePods, 8, 2)
        .unwrap();
    load.leg(Duration::from_secs(1)).unwrap();

    let out = tempfile::NamedTempFile::new().unwrap();
    let agent = Agent::start(&["--target", "etcd-load"], out.path());
    // Its connections joined and settled, then the memory it starts from.
    load.leg(Duration::from_secs(2)).unwrap();
    let rss_before = rss_kib(agent.pid());
    let leg = load.leg(Duration::from_secs(5)).unwrap();
    let rss_after = rss_kib(agent.pid());
    assert_eq!(leg.errors, 0, "{:?}", leg.first_error);
    assert!(leg.requests > 1000, "{} writes", leg.requests);
    let stopped = agent.stop_with_log();

    assert!(
        stopped.last.contains("ring_buffer_full=0"),
        "{}",
        stopped.last
    );
    let counted = stopped
        .log
        .iter()
        .find(|line| line.contains("values are no stored object"))
        .unwrap_or_else(|| panic!("no count of such writes: {:#?}", stopped.log));
    assert!(logged_count(counted, "requests") > 0, "{counted}");
    // Both ends of both connections (etcd-load is traced as kube-apiserver's
    // client, etcd as the server): muted after their first writes, so the
    // load's writes were not all counted.
    let muted = stopped
        .log
        .iter()
        .find(|line| line.contains("muted: connections"))
        .unwrap_or_else(|| panic!("no connection muted: {:#?}", stopped.log));
    assert_eq!(logged_count(muted, "opaque_pod_writers"), 4, "{muted}");
    let spans = read_spans(out.path()).unwrap();
    assert!(spans.is_empty(), "{:#?}", &spans[..spans.len().min(3)]);
    assert!(
        rss_after <= rss_before + MAX_RSS_GROWTH_KIB,
        "the agent grew from {rss_before} KiB to {rss_after} KiB over {} writes",
        leg.requests
    );
}

/// Resident memory of process `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}
