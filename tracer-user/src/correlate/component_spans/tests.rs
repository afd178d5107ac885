//! Scenario tests of the components' spans.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use super::requests::{path_pod, pod_key};
use super::*;
use crate::capture::{ConnKey, ProcessIds};
use crate::{
    correlate::{pod::string_attribute, span::SpanStatus},
    decode::grpc_calls::Side,
};

const APISERVER: u32 = 10;
const MS: u64 = 1_000_000;
const UID: &str = "5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10";

fn hit(function: GoFunction, point: Point, goid: u64, parent: u64, at_ms: u64) -> FuncMessage {
    FuncMessage {
        ids: ProcessIds {
            ts_ns: at_ms * MS,
            tgid: APISERVER,
            tid: APISERVER,
        },
        function,
        point,
        goid,
        parent_goid: parent,
        pod: None,
        text: None,
        remote_addr: None,
        path: None,
        failed: (point == Point::Return).then_some(false),
        decision: None,
        nodes: None,
        derived: false,
    }
}

fn rest(path: &str, start_ms: u64, end_ms: u64) -> RestMessage {
    RestMessage {
        conn: ConnKey {
            tgid: APISERVER,
            conn_id: 1,
        },
        stream_id: 3,
        side: Side::Server,
        method: "POST".into(),
        route: "/api/v1/namespaces/{namespace}/pods".into(),
        verb: "create".into(),
        namespace: Some("default".into()),
        name: None,
        subresource: None,
        path: path.into(),
        dry_run: false,
        status: Some(201),
        user_agent: Some("kubectl/v1.28.4".into()),
        pod: Some(tracer_decode::identity::PodIdentity {
            namespace: Some("default".into()),
            name: Some("web".into()),
            uid: Some(UID.into()),
            ..Default::default()
        }),
        error: None,
        warnings: Vec::new(),
        start_ts_ns: Some(start_ms * MS),
        end_ts_ns: Some(end_ms * MS),
    }
}

/// kube-apiserver's etcd client call writing Pod default/web, as the etcd
/// spans hand it over: under the trace's root until [`ComponentSpans::adopt`]
/// finds the apiserver call that made it.
fn etcd_txn_of_web(trace: TraceId, key: &[u8], start_ms: u64, end_ms: u64) -> Span {
    Span {
        trace_id: trace,
        span_id: SpanId::for_key(trace, key),
        parent_span_id: Some(SpanId::of(trace, &SpanKey::Root)),
        name: "etcdserverpb.KV/Txn".into(),
        kind: SpanKind::Client,
        start_unix_ns: start_ms * MS,
        end_unix_ns: end_ms * MS,
        attributes: vec![
            string_attribute(attr::K8S_POD_NAME, "web"),
            string_attribute(attr::K8S_NAMESPACE_NAME, "default"),
            string_attribute(attr::DB_SYSTEM_NAME, "etcd"),
        ],
        status: SpanStatus::Unset,
        links: Vec::new(),
    }
}

/// kube-apiserver's shape: the handler goroutine (1) spawns the timeout
/// filter's (2), which authenticates (the union authenticator nests
/// itself) and authorizes, and spawns the create handler's (3), which
/// admits and writes; its etcd call nests under the write.
#[test]
fn a_request_gathers_the_calls_of_the_goroutines_it_spawned() {
    let mut spans = components();
    let path = "/api/v1/namespaces/default/pods";
    let mut authn = hit(GoFunction::ApiserverAuthenticate, Point::Entry, 2, 1, 10);
    authn.path = Some(path.into());
    authn.remote_addr = Some("127.0.0.1:5000".into());
    let mut user = hit(GoFunction::ApiserverAuthenticate, Point::Return, 2, 1, 12);
    user.text = Some("alice".into());
    let mut storage = hit(GoFunction::ApiserverStorageCreate, Point::Entry, 3, 2, 15);
    storage.text = Some("/pods/default/web".into());
    let calls = [
        authn.clone(),
        authn,
        hit(GoFunction::ApiserverAuthenticate, Point::Return, 2, 1, 11),
        user,
        hit(GoFunction::ApiserverAuthorize, Point::Entry, 2, 1, 12),
        hit(GoFunction::ApiserverAuthorize, Point::Return, 2, 1, 13),
        hit(GoFunction::ApiserverAdmit, Point::Entry, 3, 2, 13),
        hit(GoFunction::ApiserverAdmit, Point::Return, 3, 2, 14),
        storage,
        hit(GoFunction::ApiserverStorageCreate, Point::Return, 3, 2, 19),
    ];
    for call in calls {
        assert!(
            spans.on_func(call).is_empty(),
            "nothing before the exchange"
        );
    }
    let no_uids = |_: &str, _: &str| None;
    assert!(
        spans.on_rest(&rest(path, 9, 20), &no_uids).is_empty(),
        "waits for its client's side"
    );
    // kubectl is not followed: it goes out alone, under the root.
    let out = spans.tick(20 * MS + CLIENT_WAIT_NS, &no_uids);
    let names: Vec<&str> = out.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            name::APISERVER_POD_CREATE,
            name::APISERVER_AUTHENTICATION,
            name::APISERVER_AUTHORIZATION,
            name::APISERVER_ADMISSION_MUTATING,
            &name::apiserver_storage("create", "/pods/default/web"),
        ]
    );
    let request = &out[0];
    let trace = TraceId::for_pod("c", UID);
    assert_eq!(request.trace_id, trace);
    assert_eq!(
        request.parent_span_id,
        Some(SpanId::of(trace, &SpanKey::Root))
    );
    assert_eq!(request.string_attribute(attr::K8S_USER), Some("alice"));
    assert!(
        out[1..]
            .iter()
            .all(|s| s.parent_span_id == Some(request.span_id))
    );
    assert_eq!(spans.take_create_requests(), [(UID.to_owned(), 9 * MS)]);

    // The apiserver's etcd client call, inside the storage write.
    let mut etcd = etcd_txn_of_web(trace, b"etcd/client/x", 16, 18);
    spans.adopt(&mut etcd);
    assert_eq!(etcd.parent_span_id, Some(out[4].span_id));
}

/// The kubelet's side of its status update, seen on this agent: the
/// server's side nests under it, and it under the kubelet's call.
#[test]
fn the_servers_side_nests_under_the_clients_side_of_the_same_stream() {
    let mut spans = components();
    let no_uids = |_: &str, _: &str| None;
    let path = "/api/v1/namespaces/default/pods/web/status";
    spans.on_func(kubelet_hit(
        GoFunction::KubeletPodAdditions,
        Point::Entry,
        6,
        UID,
        20,
    ));
    let mut sync = hit(GoFunction::KubeletStatusSync, Point::Entry, 7, 1, 30);
    sync.ids.tgid = 20;
    sync.pod = Some(PodRef {
        uid: UID.into(),
        namespace: None,
        name: None,
    });
    spans.on_func(sync);
    let mut server = rest(path, 32, 38);
    server.method = "PATCH".into();
    server.verb = "patch".into();
    server.name = Some("web".into());
    server.subresource = Some("status".into());
    assert!(spans.on_rest(&server, &no_uids).is_empty());
    let mut client = server.clone();
    client.side = Side::Client;
    client.conn.tgid = 20;
    client.start_ts_ns = Some(31 * MS);
    client.end_ts_ns = Some(39 * MS);
    let out = spans.on_rest(&client, &no_uids);
    let [client_span, server_span] = &out[..] else {
        panic!("{out:#?}");
    };
    assert_eq!(client_span.kind, SpanKind::Client);
    assert_eq!(server_span.kind, SpanKind::Server);
    assert_eq!(server_span.parent_span_id, Some(client_span.span_id));
    let mut sync_ret = hit(GoFunction::KubeletStatusSync, Point::Return, 7, 1, 40);
    sync_ret.ids.tgid = 20;
    let sync_span = spans.on_func(sync_ret).pop().unwrap();
    assert_eq!(client_span.parent_span_id, Some(sync_span.span_id));
}

/// The spans of a replay's agent (its window starts at its first event).
fn components() -> ComponentSpans {
    let clock = WallClock::from_offset(0);
    let window = FollowWindow::new(clock, None, 60_000 * MS);
    ComponentSpans::new(clock, "c".into(), "vm".into(), window)
}

/// A kubelet probe hit about Pod `uid` (named `web`).
fn kubelet_hit(
    function: GoFunction,
    point: Point,
    goid: u64,
    uid: &str,
    at_ms: u64,
) -> FuncMessage {
    let mut hit = hit(function, point, goid, 1, at_ms);
    hit.ids.tgid = 20;
    hit.ids.tid = 20;
    if point == Point::Entry {
        hit.pod = Some(PodRef {
            uid: uid.into(),
            namespace: Some("default".into()),
            name: Some("web".into()),
        });
    }
    hit
}

#[test]
fn kubelet_calls_of_a_pod_it_ran_before_the_agent_make_no_span() {
    let mut spans = components();
    // A resync of a Pod the kubelet ran before the agent started: a pod
    // sync with a volume wait inside, then a status update and its PATCH.
    let old = "0b9e5d1c-33aa-4c41-8f43-2f0d8a6e9b71";
    let mut out = Vec::new();
    for (function, point, goid, at) in [
        (GoFunction::KubeletSyncPod, Point::Entry, 7, 10),
        (GoFunction::KubeletVolumeWait, Point::Entry, 7, 11),
        (GoFunction::KubeletVolumeWait, Point::Return, 7, 12),
        (GoFunction::KubeletSyncPod, Point::Return, 7, 13),
        (GoFunction::KubeletStatusSync, Point::Entry, 8, 14),
    ] {
        out.extend(spans.on_func(kubelet_hit(function, point, goid, old, at)));
    }
    let mut patch = rest("/api/v1/namespaces/default/pods/web/status", 15, 16);
    patch.side = Side::Client;
    patch.conn.tgid = 20;
    patch.method = "PATCH".into();
    patch.name = Some("web".into());
    patch.subresource = Some("status".into());
    patch.pod = None;
    let client = spans.on_rest(&patch, &|_: &str, _: &str| Some(old.to_owned()));
    out.extend(spans.on_func(kubelet_hit(
        GoFunction::KubeletStatusSync,
        Point::Return,
        8,
        old,
        17,
    )));
    assert!(out.is_empty(), "{out:#?}");
    assert_eq!(
        spans.not_followed, 3,
        "the sync, its volume wait, the status update"
    );
    // The PATCH does not hang from the status update that was not made.
    let [patch_span] = &client[..] else {
        panic!("{client:#?}");
    };
    let pod = Pod::new("c", "default", "web", old);
    assert_eq!(
        patch_span.parent_span_id,
        Some(SpanId::of(pod.trace, &SpanKey::Root))
    );

    // A Pod handed to the kubelet while the agent runs: its dispatch and
    // first syncs are its creation's; later resyncs are not.
    out.extend(spans.on_func(kubelet_hit(
        GoFunction::KubeletPodAdditions,
        Point::Entry,
        9,
        UID,
        20,
    )));
    for sync in 0..6 {
        let at = 30 + sync * 10;
        out.extend(spans.on_func(kubelet_hit(
            GoFunction::KubeletSyncPod,
            Point::Entry,
            7,
            UID,
            at,
        )));
        out.extend(spans.on_func(kubelet_hit(
            GoFunction::KubeletSyncPod,
            Point::Return,
            7,
            UID,
            at + 5,
        )));
    }
    let names: Vec<&str> = out.iter().map(|span| span.name.as_str()).collect();
    assert_eq!(
        names,
        [
            name::KUBELET_DISPATCH,
            name::KUBELET_SYNC,
            name::KUBELET_SYNC,
            name::KUBELET_SYNC,
            name::KUBELET_SYNC
        ]
    );
    assert_eq!(spans.not_followed, 3);
}

#[test]
fn requests_about_a_pod_created_before_the_agent_make_no_span() {
    // The agent started at unix 1000 s (monotonic 0 is unix 0).
    let clock = WallClock::from_offset(0);
    let window = FollowWindow::new(clock, Some(1_000_000 * MS), 60_000 * MS);
    let mut spans = ComponentSpans::new(clock, "c".into(), "vm".into(), window);
    let no_uids = |_: &str, _: &str| None;
    let delete = |created_unix_s| {
        let mut delete = rest("/api/v1/namespaces/default/pods/web", 1_000_100, 1_000_110);
        delete.method = "DELETE".into();
        delete.verb = "delete".into();
        delete.name = Some("web".into());
        delete.status = Some(200);
        if let Some(pod) = &mut delete.pod {
            pod.created_unix_s = Some(created_unix_s);
        }
        delete
    };
    // Its server side and its client's.
    let mut client = delete(900);
    client.side = Side::Client;
    assert!(spans.on_rest(&delete(900), &no_uids).is_empty());
    assert!(spans.on_rest(&client, &no_uids).is_empty());
    assert!(spans.tick(1_010_000 * MS, &no_uids).is_empty());
    assert_eq!(spans.not_followed, 2);
    // A Pod created after the start: its deletion is traced.
    assert!(
        spans.on_rest(&delete(1_001), &no_uids).is_empty(),
        "waits for its client"
    );
    let out = spans.tick(1_020_000 * MS, &no_uids);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(spans.not_followed, 2);
}

#[test]
fn a_read_without_its_exchange_is_not_exported() {
    let mut spans = components();
    let mut authn = hit(GoFunction::ApiserverAuthenticate, Point::Entry, 2, 1, 10);
    authn.path = Some("/api/v1/namespaces/default/pods/web".into());
    spans.on_func(authn);
    spans.on_func(hit(
        GoFunction::ApiserverAuthenticate,
        Point::Return,
        2,
        1,
        11,
    ));
    let no_uids = |_: &str, _: &str| None;
    assert!(spans.tick(10_000 * MS, &no_uids).is_empty());
    assert!(spans.requests.is_empty(), "forgotten, not kept");
}

#[test]
fn pod_paths_and_storage_keys() {
    assert_eq!(
        path_pod("/api/v1/namespaces/default/pods"),
        Some(("default".into(), None))
    );
    assert_eq!(
        path_pod("/api/v1/namespaces/default/pods/web/binding"),
        Some(("default".into(), Some("web".into())))
    );
    assert_eq!(path_pod("/api/v1/namespaces/default/events"), None);
    assert_eq!(
        path_pod("/apis/apps/v1/namespaces/default/deployments"),
        None
    );
    assert_eq!(
        pod_key("/pods/default/web"),
        Some(("default".into(), "web".into()))
    );
    assert_eq!(
        pod_key("/registry/pods/default/web"),
        Some(("default".into(), "web".into()))
    );
    assert_eq!(pod_key("/events/default/web.1"), None);
}

/// Two creates on one path at once (a burst): each exchange gets the
/// request whose storage call wrote the Pod it returned, not the one that
/// started first.
#[test]
fn creates_at_once_are_told_apart_by_the_pod_they_stored() {
    let mut spans = components();
    let path = "/api/v1/namespaces/default/pods";
    let other_uid = "0b1d2f3a-4c5e-4f70-8192-a3b4c5d6e7f8";
    // Request A (goroutine 2) starts first and stores "other"; request B
    // (goroutine 4) stores "web".
    for (goid, at, stored) in [(2, 10, "other"), (4, 11, "web")] {
        let mut authn = hit(GoFunction::ApiserverAuthenticate, Point::Entry, goid, 1, at);
        authn.path = Some(path.into());
        let mut storage = hit(
            GoFunction::ApiserverStorageCreate,
            Point::Entry,
            goid + 1,
            goid,
            at + 2,
        );
        storage.text = Some(format!("/pods/default/{stored}"));
        for call in [
            authn,
            hit(
                GoFunction::ApiserverAuthenticate,
                Point::Return,
                goid,
                1,
                at + 1,
            ),
            storage,
            hit(
                GoFunction::ApiserverStorageCreate,
                Point::Return,
                goid + 1,
                goid,
                at + 5,
            ),
        ] {
            assert!(spans.on_func(call).is_empty());
        }
    }
    let no_uids = |_: &str, _: &str| None;
    // B's exchange (it returned "web") is decoded first.
    assert!(spans.on_rest(&rest(path, 10, 17), &no_uids).is_empty());
    let mut other = rest(path, 9, 16);
    other.stream_id = 5;
    other.pod = Some(tracer_decode::identity::PodIdentity {
        namespace: Some("default".into()),
        name: Some("other".into()),
        uid: Some(other_uid.into()),
        ..Default::default()
    });
    assert!(spans.on_rest(&other, &no_uids).is_empty());
    let out = spans.tick(17 * MS + CLIENT_WAIT_NS, &no_uids);
    for (uid, stored) in [(UID, "web"), (other_uid, "other")] {
        let trace = TraceId::for_pod("c", uid);
        let storage: Vec<&str> = out
            .iter()
            .filter(|s| {
                s.trace_id == trace && s.name.starts_with(&name::apiserver_storage("create", ""))
            })
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            storage,
            [name::apiserver_storage(
                "create",
                &format!("/pods/default/{stored}")
            )]
        );
    }
}

/// The default probes (`--apiserver-probes pods`): the request starts at
/// the Pod registry's validation, reached only by Pod creates. What came
/// before it on the wire is authentication, authorization and mutating
/// admission; what follows, validating admission and the storage write,
/// which hold the create's etcd call.
#[test]
fn a_create_seen_from_the_pod_registry_is_split_at_its_validation() {
    let mut spans = components();
    let path = "/api/v1/namespaces/default/pods";
    let mut validate = hit(GoFunction::ApiserverPodValidate, Point::Entry, 3, 2, 13);
    validate.path = Some(path.into());
    validate.pod = Some(PodRef {
        uid: UID.into(),
        namespace: Some("default".into()),
        name: Some("web".into()),
    });
    for call in [
        validate,
        hit(GoFunction::ApiserverPodValidate, Point::Return, 3, 2, 14),
    ] {
        assert!(spans.on_func(call).is_empty());
    }
    let no_uids = |_: &str, _: &str| None;
    assert!(spans.on_rest(&rest(path, 9, 20), &no_uids).is_empty());
    let out = spans.tick(20 * MS + CLIENT_WAIT_NS, &no_uids);
    let named = |name: &str| {
        out.iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name:?} in {out:#?}"))
    };
    let request = named(name::APISERVER_POD_CREATE);
    let before = named(name::APISERVER_BEFORE_VALIDATION_WITH_ADMISSION);
    let validation = named(name::APISERVER_POD_VALIDATION);
    let after = named(name::APISERVER_AFTER_VALIDATION);
    assert_eq!(out.len(), 4, "{out:#?}");
    for (span, start, end) in [(before, 9, 13), (validation, 13, 14), (after, 14, 20)] {
        assert_eq!(span.parent_span_id, Some(request.span_id), "{}", span.name);
        assert_eq!(
            (span.start_unix_ns, span.end_unix_ns),
            (start * MS, end * MS),
            "{}",
            span.name
        );
    }
    assert!(
        before
            .string_attribute(attr::K8S_APISERVER_PHASE_BOUNDS)
            .is_some_and(|bounds| bounds.contains("wire")),
        "the trace says where a phase's bounds come from"
    );
    assert_eq!(spans.take_create_requests(), [(UID.to_owned(), 9 * MS)]);

    // The create's etcd call nests under the span after validation.
    let trace = TraceId::for_pod("c", UID);
    let mut etcd = etcd_txn_of_web(trace, b"etcd/client/x", 16, 18);
    spans.adopt(&mut etcd);
    assert_eq!(etcd.parent_span_id, Some(after.span_id));
}

/// A `pods/status` update reaches the registry with the Pod's name only:
/// the request is found by its path's tail, and the etcd write it makes
/// nests under the status update's span.
#[test]
fn a_status_update_seen_from_the_pod_registry() {
    let mut spans = components();
    let path = "/api/v1/namespaces/default/pods/web/status";
    let mut update = hit(GoFunction::ApiserverPodStatusUpdate, Point::Entry, 3, 2, 12);
    update.text = Some("web".into());
    for call in [
        update,
        hit(
            GoFunction::ApiserverPodStatusUpdate,
            Point::Return,
            3,
            2,
            18,
        ),
    ] {
        assert!(spans.on_func(call).is_empty());
    }
    let mut exchange = rest(path, 10, 19);
    exchange.method = "PUT".into();
    exchange.route = "/api/v1/namespaces/{namespace}/pods/{name}/status".into();
    exchange.verb = "update".into();
    exchange.name = Some("web".into());
    exchange.subresource = Some("status".into());
    exchange.status = Some(200);
    let no_uids = |_: &str, _: &str| None;
    assert!(spans.on_rest(&exchange, &no_uids).is_empty());
    let out = spans.tick(19 * MS + CLIENT_WAIT_NS, &no_uids);
    let names: Vec<&str> = out.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&name::APISERVER_BEFORE_VALIDATION)
            && names.contains(&name::APISERVER_STATUS_UPDATE),
        "{names:?}"
    );
    let status = out
        .iter()
        .find(|s| s.name == name::APISERVER_STATUS_UPDATE)
        .expect("status update span");
    let trace = TraceId::for_pod("c", UID);
    let mut etcd = etcd_txn_of_web(trace, b"etcd/client/y", 14, 16);
    spans.adopt(&mut etcd);
    assert_eq!(etcd.parent_span_id, Some(status.span_id));
}

/// A `pods/binding` create reaches the registry with the Binding's
/// namespace and name, which make its path: the request matches its
/// exchange by that path, and the binding's etcd write nests under the
/// binding's span.
#[test]
fn a_binding_seen_from_the_pod_registry() {
    let mut spans = components();
    let path = "/api/v1/namespaces/default/pods/web/binding";
    let mut binding = hit(GoFunction::ApiserverPodBinding, Point::Entry, 3, 2, 12);
    binding.path = Some(path.into());
    binding.text = Some("web".into());
    for call in [
        binding,
        hit(GoFunction::ApiserverPodBinding, Point::Return, 3, 2, 17),
    ] {
        assert!(spans.on_func(call).is_empty());
    }
    let mut exchange = rest(path, 10, 18);
    exchange.route = "/api/v1/namespaces/{namespace}/pods/{name}/binding".into();
    exchange.name = Some("web".into());
    exchange.subresource = Some("binding".into());
    let uids = |namespace: &str, name: &str| {
        (namespace == "default" && name == "web").then(|| UID.to_owned())
    };
    assert!(spans.on_rest(&exchange, &uids).is_empty());
    let out = spans.tick(18 * MS + CLIENT_WAIT_NS, &uids);
    let named = |name: &str| {
        out.iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name:?} in {out:#?}"))
    };
    let before = named(name::APISERVER_BEFORE_VALIDATION);
    let bind = named(name::APISERVER_BINDING);
    assert_eq!(
        (before.start_unix_ns, before.end_unix_ns),
        (10 * MS, 12 * MS)
    );
    assert_eq!((bind.start_unix_ns, bind.end_unix_ns), (12 * MS, 17 * MS));
    assert!(
        out.iter()
            .all(|s| s.name != name::APISERVER_AFTER_VALIDATION),
        "only a create has a phase after its validation"
    );
    let trace = TraceId::for_pod("c", UID);
    let mut etcd = etcd_txn_of_web(trace, b"etcd/client/z", 14, 16);
    spans.adopt(&mut etcd);
    assert_eq!(etcd.parent_span_id, Some(bind.span_id));
}
