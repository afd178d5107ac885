use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use tracer_common::io::IoSyscall;
use tracer_decode::{
    identity::PodIdentity,
    wal::{MemberIds, RaftRole},
};

use super::*;
use crate::correlate::span::TraceId;
use crate::{capture::ProcessIds, decode::wal_writes::WalPodEntry};

const ETCD: u32 = 100;
const APISERVER: u32 = 200;
const WAL: ConnKey = ConnKey {
    tgid: ETCD,
    conn_id: 7,
};
const MS: u64 = 1_000_000;

fn clues(name: &str, uid: Option<&str>, node: Option<&str>, phase: &str) -> Vec<PodClue> {
    let mut clues = vec![PodClue::StorageKey {
        namespace: "default".into(),
        name: name.into(),
    }];
    if let Some(uid) = uid {
        clues.push(PodClue::Object(PodIdentity {
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            node_name: node.map(Into::into),
            phase: Some(phase.into()),
            ..PodIdentity::default()
        }));
    }
    clues
}

fn call(
    side: Side,
    write: WriteKind,
    clues: Vec<PodClue>,
    fingerprint: u8,
    start_ms: u64,
    end_ms: u64,
) -> EtcdMessage {
    EtcdMessage {
        conn: ConnKey {
            tgid: if side == Side::Server {
                ETCD
            } else {
                APISERVER
            },
            conn_id: 1,
        },
        side,
        method: "Txn".into(),
        write,
        clues: clues.into(),
        fingerprint: [fingerprint; 16],
        revision: Some(5),
        txn_succeeded: Some(true),
        status_code: Some(0),
        start_ts_ns: Some(start_ms * MS),
        end_ts_ns: Some(end_ms * MS),
    }
}

fn wal_write(entries: &[(&str, &str, u8)], at_ms: u64) -> WalMessage {
    WalMessage {
        conn: WAL,
        start_ts_ns: at_ms * MS,
        bytes: 4096,
        entries: entries.len() as u64 + 1,
        pod_entries: entries
            .iter()
            .enumerate()
            .map(|(i, (name, uid, fingerprint))| WalPodEntry {
                index: 10 + i as u64,
                term: 2,
                clues: clues(name, Some(uid), None, "Pending").into(),
                fingerprint: [*fingerprint; 16],
                role: None,
            })
            .collect(),
        member: None,
    }
}

/// A WAL write of one Pod entry with these clues.
fn wal_entry(clues: Vec<PodClue>, fingerprint: u8, index: u64, at_ms: u64) -> WalMessage {
    WalMessage {
        pod_entries: vec![WalPodEntry {
            index,
            term: 2,
            clues: clues.into(),
            fingerprint: [fingerprint; 16],
            role: None,
        }],
        ..wal_write(&[], at_ms)
    }
}

fn fsync(at_ms: u64) -> FsyncRecord {
    FsyncRecord {
        ids: ProcessIds {
            ts_ns: at_ms * MS,
            tgid: ETCD,
            tid: ETCD,
        },
        conn: WAL,
        fd: 9,
        syscall: IoSyscall::Fdatasync,
        duration_ns: 2 * MS,
        ret: 0,
    }
}

fn spans() -> ControlSpans {
    let clock = WallClock::from_offset(0);
    ControlSpans::new(
        clock,
        "test".into(),
        FollowWindow::new(clock, None, 60_000 * MS),
    )
}

fn named<'a>(spans: &'a [Span], name: &str, kind: SpanKind) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == name && s.kind == kind)
        .unwrap_or_else(|| panic!("no {kind:?} span {name}: {spans:#?}"))
}

fn attribute<'a>(span: &'a Span, key: &str) -> &'a AttributeValue {
    &span
        .attributes
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} on {span:#?}"))
        .1
}

#[test]
fn client_server_and_wal_spans_nest_by_request_fingerprint_under_the_root() {
    let mut control = spans();
    control.etcd_member(ETCD, Some("infra1".to_owned()));
    let mut out = Vec::new();
    // Order as events arrive: WAL write and sync during etcd's handling,
    // then etcd's response, then the apiserver reading it.
    out.extend(control.on_wal(&wal_write(&[("web", "uid-1", 1)], 11)));
    out.extend(control.on_fsync(&fsync(13)));
    let created = clues("web", Some("uid-1"), None, "Pending");
    out.extend(control.on_etcd(&call(
        Side::Server,
        WriteKind::Create,
        created.clone(),
        1,
        10,
        14,
    )));
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Create, created, 1, 9, 15)));
    let bound = clues("web", Some("uid-1"), Some("node-a"), "Pending");
    out.extend(control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        bound.clone(),
        2,
        40,
        42,
    )));
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, bound, 2, 39, 43)));
    let running = clues("web", Some("uid-1"), Some("node-a"), "Running");
    out.extend(control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        running.clone(),
        3,
        900,
        902,
    )));
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, running, 3, 899, 903)));
    // The root goes out with the spans of the write that ends it, last.
    assert!(
        out.last().is_some_and(|s| s.parent_span_id.is_none()),
        "{out:#?}"
    );
    assert!(control.finish().is_empty());

    let trace = TraceId::for_pod("test", "uid-1");
    assert!(out.iter().all(|s| s.trace_id == trace), "{out:#?}");
    let root = named(
        &out,
        &name::pod_create("default", "web"),
        SpanKind::Internal,
    );
    assert_eq!(root.span_id, SpanId::of(trace, &SpanKey::Root));
    assert_eq!(root.parent_span_id, None);
    // From the apiserver's create call to its Running write's answer.
    assert_eq!((root.start_unix_ns, root.end_unix_ns), (9 * MS, 903 * MS));
    assert_eq!(root.status, SpanStatus::Unset);
    assert_eq!(
        attribute(root, attr::K8S_NODE_NAME),
        &AttributeValue::String("node-a".into())
    );

    let txn = "etcdserverpb.KV/Txn";
    let clients: Vec<&Span> = out.iter().filter(|s| s.kind == SpanKind::Client).collect();
    let servers: Vec<&Span> = out.iter().filter(|s| s.kind == SpanKind::Server).collect();
    assert_eq!((clients.len(), servers.len()), (3, 3));
    for (client, server) in clients.iter().zip(&servers) {
        assert_eq!(client.name, txn);
        assert_eq!(client.parent_span_id, Some(root.span_id));
        assert_eq!(server.parent_span_id, Some(client.span_id), "{server:#?}");
    }
    assert_eq!(
        attribute(servers[0], attr::ETCD_WRITE),
        &AttributeValue::String("create".into())
    );
    let wal = named(&out, name::ETCD_WAL, SpanKind::Internal);
    assert_eq!(wal.parent_span_id, Some(servers[0].span_id));
    assert_eq!((wal.start_unix_ns, wal.end_unix_ns), (11 * MS, 13 * MS));
    assert_eq!(
        attribute(wal, attr::ETCD_WAL_SHARED),
        &AttributeValue::Bool(false)
    );
    assert_eq!(
        attribute(wal, attr::ETCD_MEMBER_NAME),
        &AttributeValue::String("infra1".into())
    );
    assert_eq!(out.len(), 8);
    // Ids are unique within the trace.
    let mut ids: Vec<_> = out.iter().map(|s| s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), out.len());
}

#[test]
fn a_binding_whose_txn_conflicted_and_was_retried_is_named_bound_both_times() {
    let mut control = spans();
    let mut out = Vec::new();
    let created = clues("web", Some("uid-1"), None, "Pending");
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Create, created, 1, 9, 15)));
    // The apiserver's binding on a stale object: the compare fails,
    // nothing is stored, and it retries on the object etcd returned.
    let bound = clues("web", Some("uid-1"), Some("node-a"), "Pending");
    let mut conflict = call(Side::Client, WriteKind::Update, bound.clone(), 2, 39, 43);
    conflict.txn_succeeded = Some(false);
    out.extend(control.on_etcd(&conflict));
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, bound, 3, 44, 48)));
    out.extend(control.finish());
    let changes: Vec<(&AttributeValue, &SpanStatus)> = out
        .iter()
        .filter(|s| s.kind == SpanKind::Client)
        .map(|s| (attribute(s, attr::K8S_POD_CHANGE), &s.status))
        .collect();
    let bound = AttributeValue::String("bound to node-a".into());
    assert_eq!(changes.len(), 3, "{out:#?}");
    assert!(matches!(changes[1], (change, SpanStatus::Error(_)) if *change == bound));
    assert_eq!(changes[2], (&bound, &SpanStatus::Unset));
}

#[test]
fn the_first_write_seen_of_a_bound_pod_is_not_named_its_binding() {
    let mut control = spans();
    let mut out = Vec::new();
    // A Pod created and bound before podtrace: its status updates name
    // its node, as its binding did.
    let running = clues("old", Some("uid-0"), Some("node-a"), "Running");
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Update, running, 1, 9, 15)));
    out.extend(control.finish());
    let changes: Vec<&AttributeValue> = out
        .iter()
        .filter(|s| s.kind == SpanKind::Client)
        .map(|s| attribute(s, attr::K8S_POD_CHANGE))
        .collect();
    let updated = AttributeValue::String("updated".into());
    assert_eq!(changes, [&updated], "{out:#?}");
}

const WAL_SPAN: &str = name::ETCD_WAL;

/// Every span once `write` is synced and the spans are finished.
fn synced_wal_spans(control: &mut ControlSpans, write: &WalMessage) -> Vec<Span> {
    control.on_wal(write);
    let mut out = control.on_fsync(&fsync(13));
    out.extend(control.finish());
    out
}

#[test]
fn a_wal_span_names_its_member_by_id_and_role() {
    let mut control = spans();
    let mut write = wal_write(&[("a", "uid-a", 1), ("b", "uid-b", 2)], 11);
    write.member = Some(MemberIds {
        member_id: 0x8e9e_05c5_2164_694d,
        cluster_id: 0x0cdf_8181_94e3_a8c3,
    });
    write.pod_entries[0].role = Some(RaftRole::Leader);
    write.pod_entries[1].role = Some(RaftRole::Follower);
    let out = synced_wal_spans(&mut control, &write);
    let wal: Vec<&Span> = out.iter().filter(|s| s.name == WAL_SPAN).collect();
    assert_eq!(wal.len(), 2, "{out:#?}");
    for (span, role) in wal.iter().zip(["leader", "follower"]) {
        assert_eq!(
            attribute(span, attr::ETCD_MEMBER_ID),
            &AttributeValue::String("8e9e05c52164694d".into())
        );
        assert_eq!(
            attribute(span, attr::ETCD_MEMBER_ROLE),
            &AttributeValue::String(role.into())
        );
    }
}

#[test]
fn one_fdatasync_for_two_pods_is_a_span_in_each_trace_naming_the_batch() {
    let mut control = spans();
    // A member that exec'd again, or exited: no longer named.
    control.etcd_member(ETCD, Some("infra1".to_owned()));
    control.etcd_member(ETCD, None);
    let write = wal_write(&[("a", "uid-a", 1), ("b", "uid-b", 2)], 11);
    let out = synced_wal_spans(&mut control, &write);
    let wal: Vec<&Span> = out.iter().filter(|s| s.name == WAL_SPAN).collect();
    assert_eq!(wal.len(), 2, "{out:#?}");
    assert_eq!(wal[0].trace_id, TraceId::for_pod("test", "uid-a"));
    assert_eq!(wal[1].trace_id, TraceId::for_pod("test", "uid-b"));
    for span in wal {
        assert_eq!(
            attribute(span, attr::ETCD_WAL_PODS),
            &AttributeValue::Int(2)
        );
        assert_eq!(
            attribute(span, attr::ETCD_WAL_SHARED),
            &AttributeValue::Bool(true)
        );
        assert_eq!(
            attribute(span, attr::ETCD_WAL_BATCH),
            &AttributeValue::String("default/a,default/b".into())
        );
        assert!(
            !span
                .attributes
                .iter()
                .any(|(key, _)| key.starts_with("podtrace.etcd.member.")),
            "{span:#?}"
        );
        // No etcd handling seen here (a follower): under the root.
        assert_eq!(
            span.parent_span_id,
            Some(SpanId::of(span.trace_id, &SpanKey::Root))
        );
    }
}

#[test]
fn a_server_span_waits_for_its_client_then_falls_back_to_the_root() {
    let mut control = spans();
    let created = clues("web", Some("uid-1"), None, "Pending");
    let out = control.on_etcd(&call(Side::Server, WriteKind::Create, created, 1, 10, 14));
    assert!(out.is_empty(), "released before its wait: {out:#?}");
    assert!(control.tick(14 * MS + WAIT_NS / 2).is_empty());
    let out = control.tick(14 * MS + WAIT_NS);
    let server = named(&out, "etcdserverpb.KV/Txn", SpanKind::Server);
    assert_eq!(
        server.parent_span_id,
        Some(SpanId::of(server.trace_id, &SpanKey::Root))
    );
}

#[test]
fn a_pod_never_running_is_exported_incomplete_with_the_phase_it_is_stuck_in() {
    let mut control = spans();
    let bound = clues("web", Some("uid-1"), Some("node-a"), "Pending");
    let created = clues("web", Some("uid-1"), None, "Pending");
    control.on_etcd(&call(Side::Server, WriteKind::Create, created, 1, 10, 14));
    control.on_etcd(&call(Side::Server, WriteKind::Update, bound, 2, 40, 42));
    assert!(
        !control
            .tick(59_000 * MS)
            .iter()
            .any(|s| s.parent_span_id.is_none())
    );
    let out = control.tick(61_000 * MS);
    let root = named(
        &out,
        &name::pod_create("default", "web"),
        SpanKind::Internal,
    );
    assert!(
        matches!(&root.status, SpanStatus::Error(m) if m.contains("timed out") && m.contains("node")),
        "{root:#?}"
    );
    assert_eq!(
        attribute(root, attr::TRACE_COMPLETE),
        &AttributeValue::Bool(false)
    );
    assert!(control.finish().is_empty());
}

#[test]
fn a_write_about_a_pod_of_unknown_uid_waits_then_is_not_followed() {
    let mut control = spans();
    let deleted = clues("old", None, None, "Running");
    assert!(
        control
            .on_etcd(&call(Side::Server, WriteKind::Delete, deleted, 4, 10, 12))
            .is_empty()
    );
    let out = control.tick(12 * MS + WAIT_NS);
    assert!(out.is_empty(), "{out:#?}");
    assert_eq!((control.not_followed, control.unattributed), (1, 0));
    // A UID learned while waiting attributes it.
    let mut control = spans();
    control.on_etcd(&call(
        Side::Server,
        WriteKind::Delete,
        clues("p", None, None, ""),
        4,
        10,
        12,
    ));
    let out = control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        clues("p", Some("uid-p"), None, "Pending"),
        5,
        13,
        14,
    ));
    let out: Vec<Span> = out.into_iter().chain(control.finish()).collect();
    assert!(
        out.iter()
            .all(|s| s.trace_id == TraceId::for_pod("test", "uid-p")),
        "{out:#?}"
    );
    assert_eq!(control.unattributed, 0);
}

fn created_at(mut clues: Vec<PodClue>, created_s: i64) -> Vec<PodClue> {
    for clue in &mut clues {
        if let PodClue::Object(identity) = clue {
            identity.created_unix_s = Some(created_s);
        }
    }
    clues
}

#[test]
fn writes_of_a_pod_created_before_podtrace_started_make_no_spans() {
    let mut control = spans();
    // The first event, 100 s into the clock: the agent's start.
    control.tick(100_000 * MS);
    // Created 60 s before: a status update of a Pod long up.
    let old = created_at(clues("old", Some("uid-old"), Some("n"), "Pending"), 40);
    let mut out = control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        old.clone(),
        1,
        100_010,
        100_011,
    ));
    out.extend(control.on_etcd(&call(
        Side::Client,
        WriteKind::Update,
        old,
        1,
        100_009,
        100_012,
    )));
    control.on_wal(&wal_entry(
        created_at(clues("old", Some("uid-old"), Some("n"), "Pending"), 40),
        1,
        10,
        100_010,
    ));
    out.extend(control.on_fsync(&fsync(100_011)));
    assert!(out.is_empty(), "{out:#?}");
    assert_eq!(control.not_followed, 3);
    assert_eq!(control.uid_of("default", "old"), None, "not learnt");
    // Created 2 s before the agent (within the clock slack): followed.
    let young = created_at(clues("young", Some("uid-young"), None, "Pending"), 98);
    let mut out = control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        young.clone(),
        2,
        100_020,
        100_021,
    ));
    out.extend(control.on_etcd(&call(
        Side::Client,
        WriteKind::Update,
        young,
        2,
        100_019,
        100_022,
    )));
    assert_eq!(out.len(), 2, "{out:#?}");
    // A Pod created longer ago than the trace timeout (60 s here) is
    // not in creation any more, whenever the agent started.
    control.tick(200_000 * MS);
    let stale = created_at(clues("young", Some("uid-young"), None, "Pending"), 98);
    let out = control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        stale,
        3,
        200_010,
        200_011,
    ));
    assert!(out.is_empty(), "{out:#?}");
}

#[test]
fn nothing_after_the_write_that_reports_running_joins_the_creation_trace() {
    let mut control = spans();
    // Created with its node set, as a DaemonSet's Pods are.
    let created = clues("web", Some("uid-1"), Some("node-a"), "Pending");
    let mut out = control.on_etcd(&call(
        Side::Server,
        WriteKind::Create,
        created.clone(),
        1,
        10,
        14,
    ));
    out.extend(control.on_etcd(&call(Side::Client, WriteKind::Create, created, 1, 9, 15)));
    let running = clues("web", Some("uid-1"), Some("node-a"), "Running");
    // The WAL entry and both sides of the Running write belong to it.
    control.on_wal(&wal_entry(running.clone(), 3, 11, 899));
    out.extend(control.on_fsync(&fsync(900)));
    out.extend(control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        running.clone(),
        3,
        899,
        902,
    )));
    out.extend(control.on_etcd(&call(
        Side::Client,
        WriteKind::Update,
        running.clone(),
        3,
        898,
        903,
    )));
    assert_eq!(out.len(), 6, "{out:#?}");
    assert!(out.last().is_some_and(|s| s.parent_span_id.is_none()));
    // Its WAL entry came first, and did not make it look like a binding.
    let changes: Vec<&AttributeValue> = out
        .iter()
        .filter(|s| s.kind == SpanKind::Server)
        .map(|s| attribute(s, attr::K8S_POD_CHANGE))
        .collect();
    assert_eq!(
        changes,
        [
            &AttributeValue::String("created".into()),
            &AttributeValue::String("status Running".into())
        ]
    );
    // A later status update and the deletion (its key only) do not.
    let mut after = control.on_etcd(&call(
        Side::Server,
        WriteKind::Update,
        running,
        4,
        5000,
        5001,
    ));
    let deleted = vec![PodClue::StorageKey {
        namespace: "default".into(),
        name: "web".into(),
    }];
    after.extend(control.on_etcd(&call(
        Side::Server,
        WriteKind::Delete,
        deleted,
        5,
        9000,
        9001,
    )));
    after.extend(control.finish());
    assert!(after.is_empty(), "{after:#?}");
    assert_eq!(control.not_followed, 2);
}

#[test]
fn an_agent_that_sees_only_some_writes_ends_the_trace_where_the_root_does() {
    // A node whose etcd is a follower: the Running write reaches it as a
    // WAL entry only, and the next status update as one too.
    let mut control = spans();
    let mut out = Vec::new();
    let running = clues("web", Some("uid-1"), Some("node-a"), "Running");
    for (fingerprint, at) in [(3, 900), (4, 5000)] {
        control.on_wal(&wal_entry(running.clone(), fingerprint, at, at));
        out.extend(control.on_fsync(&fsync(at + 1)));
    }
    out.extend(control.finish());
    assert_eq!(out.len(), 1, "the Running write's WAL span only: {out:#?}");
    assert_eq!(control.not_followed, 1);
}

/// A Pod entry's WAL write and sync by member `tgid` (Raft id `id`) in `role`.
fn member_wal_spans(
    control: &mut ControlSpans,
    tgid: u32,
    id: u64,
    role: RaftRole,
    at_ms: (u64, u64),
) -> Vec<Span> {
    let conn = ConnKey {
        tgid,
        conn_id: u64::from(tgid),
    };
    let mut write = wal_write(&[("web", "uid-1", 1)], at_ms.0);
    write.conn = conn;
    write.member = Some(MemberIds {
        member_id: id,
        cluster_id: 1,
    });
    write.pod_entries[0].role = Some(role);
    let mut out = control.on_wal(&write);
    let mut sync = fsync(at_ms.1);
    (sync.conn, sync.ids.tgid) = (conn, tgid);
    out.extend(control.on_fsync(&sync));
    out
}

fn raft(
    kind: tracer_decode::raft::MessageKind,
    at_tgid: u32,
    sent: bool,
    (from, to): (u64, u64),
    at_ms: u64,
) -> RaftPeerMessage {
    let is_app = kind == tracer_decode::raft::MessageKind::App;
    RaftPeerMessage {
        conn: ConnKey {
            tgid: at_tgid,
            conn_id: 50,
        },
        sent,
        ts_ns: at_ms * MS,
        kind,
        from,
        to,
        index: if is_app { 9 } else { 10 },
        reject: false,
        pod_entries: if is_app {
            wal_write(&[("web", "uid-1", 1)], at_ms).pod_entries
        } else {
            Vec::new()
        },
    }
}

#[test]
fn a_three_member_write_shows_replication_commit_and_apply_under_the_server_span() {
    use tracer_decode::raft::MessageKind::{App, AppResp};
    const FOLLOWER: u32 = ETCD + 1;
    const LEADER_ID: u64 = 0xa;
    const FAST_ID: u64 = 0xb;
    const SLOW_ID: u64 = 0xc;
    let mut control = spans();
    control.etcd_member(ETCD, Some("etcd-0".to_owned()));
    control.etcd_member(FOLLOWER, Some("etcd-1".to_owned()));
    let mut out = Vec::new();
    // The leader appends to both followers, then saves its own entry.
    for follower in [FAST_ID, SLOW_ID] {
        out.extend(control.on_raft(&raft(App, ETCD, true, (LEADER_ID, follower), 11)));
    }
    out.extend(control.on_raft(&raft(App, FOLLOWER, false, (LEADER_ID, FAST_ID), 11)));
    out.extend(member_wal_spans(
        &mut control,
        ETCD,
        LEADER_ID,
        RaftRole::Leader,
        (11, 13),
    ));
    out.extend(member_wal_spans(
        &mut control,
        FOLLOWER,
        FAST_ID,
        RaftRole::Follower,
        (12, 14),
    ));
    // The fast follower's answer commits it; etcd answers; the slow one's comes late.
    out.extend(control.on_raft(&raft(AppResp, ETCD, false, (FAST_ID, LEADER_ID), 15)));
    let created = clues("web", Some("uid-1"), None, "Pending");
    out.extend(control.on_etcd(&call(Side::Server, WriteKind::Create, created, 1, 10, 16)));
    out.extend(control.on_raft(&raft(AppResp, ETCD, false, (SLOW_ID, LEADER_ID), 40)));
    out.extend(control.finish());

    let trace = TraceId::for_pod("test", "uid-1");
    let id = |key: &str| SpanId::for_key(trace, key.as_bytes());
    let server = named(&out, "etcdserverpb.KV/Txn", SpanKind::Server);
    let fast = named(&out, &name::etcd_replicate("etcd-1"), SpanKind::Internal);
    assert_eq!(fast.parent_span_id, Some(server.span_id));
    assert_eq!(fast.span_id, id("etcd/replicate/b/10"));
    assert_eq!((fast.start_unix_ns, fast.end_unix_ns), (11 * MS, 15 * MS));
    assert_eq!(
        attribute(fast, attr::ETCD_RAFT_IN_QUORUM),
        &AttributeValue::Bool(true)
    );
    assert_eq!(
        attribute(fast, attr::ETCD_MEMBER_NAME),
        &AttributeValue::String("etcd-0".into())
    );
    // The slow follower's name is unknown here (no WAL of it seen): its id.
    let slow = named(&out, &name::etcd_replicate("c"), SpanKind::Internal);
    assert_eq!((slow.start_unix_ns, slow.end_unix_ns), (11 * MS, 40 * MS));
    assert_eq!(
        attribute(slow, attr::ETCD_RAFT_IN_QUORUM),
        &AttributeValue::Bool(false)
    );

    let wal: Vec<&Span> = out.iter().filter(|s| s.name == WAL_SPAN).collect();
    let role = |span: &Span| attribute(span, attr::ETCD_MEMBER_ROLE).clone();
    let leader_wal = wal
        .iter()
        .find(|s| role(s) == AttributeValue::String("leader".into()));
    let follower_wal = wal
        .iter()
        .find(|s| role(s) == AttributeValue::String("follower".into()));
    assert_eq!(
        leader_wal.and_then(|s| s.parent_span_id),
        Some(server.span_id),
        "{out:#?}"
    );
    assert_eq!(
        follower_wal.and_then(|s| s.parent_span_id),
        Some(fast.span_id),
        "{out:#?}"
    );

    let commit = named(&out, name::ETCD_COMMIT, SpanKind::Internal);
    assert_eq!(commit.parent_span_id, Some(server.span_id));
    assert_eq!(
        (commit.start_unix_ns, commit.end_unix_ns),
        (11 * MS, 15 * MS)
    );
    for (key, value) in [
        (attr::ETCD_RAFT_WAITED_FOR, "etcd-0,etcd-1"),
        (attr::ETCD_RAFT_WAITED_LONGEST_FOR, "etcd-1"),
        (attr::ETCD_RAFT_NOT_WAITED_FOR, "c"),
    ] {
        assert_eq!(
            attribute(commit, key),
            &AttributeValue::String(value.into()),
            "{key}"
        );
    }
    assert_eq!(
        attribute(commit, attr::ETCD_RAFT_QUORUM),
        &AttributeValue::Int(2)
    );
    let apply = named(&out, name::ETCD_APPLY, SpanKind::Internal);
    assert_eq!(apply.parent_span_id, Some(server.span_id));
    assert_eq!((apply.start_unix_ns, apply.end_unix_ns), (15 * MS, 16 * MS));
}
