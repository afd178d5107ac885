use super::*;

fn request(path: &str, body: &[u8]) -> Exchange {
    Exchange {
        stream_id: 1,
        request: HalfStream {
            external_headers: vec![(":path".to_owned(), path.to_owned())],
            body: body.to_vec(),
            ended: true,
            ..HalfStream::default()
        },
        response: HalfStream::default(),
        reset_code: None,
        complete: true,
    }
}

const TXN: &str = "/etcdserverpb.KV/Txn";

const CONN: ConnKey = ConnKey {
    tgid: 100,
    conn_id: 7,
};

fn ids(ts_ns: u64) -> crate::capture::ProcessIds {
    crate::capture::ProcessIds {
        ts_ns,
        tgid: CONN.tgid,
        tid: CONN.tgid,
    }
}

fn conn_record(change: ConnAction) -> ConnRecord {
    ConnRecord {
        ids: ids(1),
        conn: CONN,
        fd: 9,
        change,
        fd_kind: FdKind::Socket,
        ret: 0,
        peer: Peer::Unknown,
        local_port: None,
    }
}

fn chunk(ts_ns: u64, direction: Direction, bytes: &[u8], tls_plaintext: bool) -> DataRecord {
    DataRecord {
        ids: ids(ts_ns),
        conn: CONN,
        fd: 9,
        syscall: tracer_common::io::IoSyscall::Read,
        direction,
        fd_kind: FdKind::Socket,
        len: bytes.len() as u64,
        enter_ts_ns: ts_ns,
        data: bytes.to_vec(),
        truncated: false,
        tls_plaintext,
    }
}

/// kube-apiserver's side of a Python client's create over TLS: the
/// handshake's bytes, then the plaintext of a keep-alive connection
/// carrying a GET (not a write: no message) and the create, answered
/// with a chunked body.
#[test]
fn an_http1_create_over_tls_gives_the_same_rest_message_as_http2() {
    let mut decoder = GrpcDecoder::default();
    let mut once = DecodedOnce::default();
    assert!(
        decoder
            .on_conn(&conn_record(ConnAction::Accepted), &mut once)
            .is_empty()
    );
    let mut messages = Vec::new();
    let handshake = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    let get = b"GET /api/v1/namespaces/default/pods/web HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer s3cret\r\n\r\n";
    let not_found =
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    let body =
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default"}}"#;
    let post = format!(
        "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: k\r\nUser-Agent: OpenAPI-Generator/29.0.0/python\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"8f9c0b7e-2a51-4c36-9d0e-5b1f7e3a9c42","creationTimestamp":"2026-12-03T03:00:00Z"},"status":{"phase":"Pending"}}"#;
    let created = format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nWarning: 299 - \"would violate PodSecurity\"\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        pod.len()
    );
    let chunks: [(u64, Direction, &[u8], bool); 8] = [
        (10, Direction::Ingress, handshake, false),
        (20, Direction::Ingress, get, true),
        (30, Direction::Egress, not_found, true),
        (40, Direction::Ingress, post.as_bytes(), true),
        (41, Direction::Ingress, body, true),
        (50, Direction::Egress, created.as_bytes(), true),
        (51, Direction::Egress, pod, true),
        (52, Direction::Egress, b"\r\n0\r\n\r\n", true),
    ];
    for (ts, direction, bytes, tls) in chunks {
        messages.extend(decoder.on_data(&chunk(ts, direction, bytes, tls), &mut once));
    }
    messages.extend(decoder.on_conn(&conn_record(ConnAction::Closed), &mut once));
    let [Message::Rest(rest)] = &messages[..] else {
        panic!("one REST message: {messages:#?}");
    };
    assert_eq!(rest.side, Side::Server);
    assert_eq!(
        (rest.method.as_str(), rest.verb.as_str()),
        ("POST", "create")
    );
    assert_eq!(rest.route, "/api/v1/namespaces/{namespace}/pods");
    assert_eq!(rest.namespace.as_deref(), Some("default"));
    assert_eq!(rest.status, Some(201));
    assert_eq!(rest.stream_id, 1, "the second exchange of the connection");
    assert_eq!((rest.start_ts_ns, rest.end_ts_ns), (Some(40), Some(52)));
    assert_eq!(
        rest.user_agent.as_deref(),
        Some("OpenAPI-Generator/29.0.0/python")
    );
    assert_eq!(rest.warnings.len(), 1);
    let pod = rest.pod.as_ref().expect("the Pod the response returned");
    assert_eq!(
        pod.uid.as_deref(),
        Some("8f9c0b7e-2a51-4c36-9d0e-5b1f7e3a9c42")
    );
    assert_eq!(pod.phase.as_deref(), Some("Pending"));
    assert!(!format!("{rest:?}").contains("s3cret"));
}

/// What the decoder said of the HPACK probes since last asked.
fn field_probes_said(decoder: &mut GrpcDecoder) -> Vec<bool> {
    decoder
        .control
        .drain(..)
        .filter_map(|control| match control {
            CaptureControl::Hpack(HpackControl::FieldProbes { needed, .. }) => Some(needed),
            _ => None,
        })
        .collect()
}

/// A TLS connection seen from its handshake whose secrets were missed:
/// the HPACK probes are asked for at once, and stay while it is quiet
/// (its next request, read through the per-call probes, needs them).
#[test]
fn a_connection_whose_secrets_were_missed_asks_for_the_hpack_probes_at_once() {
    let handshake = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    let mut decoder = GrpcDecoder::default();
    let mut once = DecodedOnce::default();
    decoder.on_conn(&conn_record(ConnAction::Connected), &mut once);
    decoder.on_data(&chunk(10, Direction::Egress, handshake, false), &mut once);
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    decoder.on_secrets_missed(conn_record(ConnAction::Connected).conn, 20);
    assert_eq!(field_probes_said(&mut decoder), vec![true]);
    decoder.check_field_probes(20 + IDLE_GRACE_NS + FIELD_PROBES_HOLD_NS + 1);
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    // Quiet for longer than its grace: let go.
    decoder.check_field_probes(20 + SECRETS_MISSED_GRACE_NS + FIELD_PROBES_HOLD_NS + 1);
    assert_eq!(field_probes_said(&mut decoder), vec![false]);
}

#[test]
fn only_http2_joined_mid_stream_asks_for_the_hpack_probes_and_they_are_held() {
    let handshake = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    // containerd's ttrpc to a shim: a 4-byte length, a stream id, type 1.
    let ttrpc = b"\x00\x00\x03\x37\x00\x00\x00\x01\x01\x00\x0a\x17containerd";
    for first in [&handshake[..], &ttrpc[..]] {
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(ConnAction::Accepted), &mut once);
        decoder.on_data(&chunk(10, Direction::Ingress, first, false), &mut once);
        assert_eq!(
            field_probes_said(&mut decoder),
            Vec::<bool>::new(),
            "{first:02x?}"
        );
    }
    // A PING frame where the preface should be: joined after its start.
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x0012345678";
    let mut decoder = GrpcDecoder::default();
    let mut once = DecodedOnce::default();
    decoder.on_conn(&conn_record(ConnAction::Accepted), &mut once);
    decoder.on_data(&chunk(10, Direction::Ingress, ping, false), &mut once);
    assert_eq!(field_probes_said(&mut decoder), vec![true]);
    // Gone, the connection needs nothing: the probes are held, then
    // detached by the timer.
    decoder.on_conn(&conn_record(ConnAction::Closed), &mut once);
    decoder.check_field_probes(10 + FIELD_PROBES_HOLD_NS - 1);
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    decoder.check_field_probes(10 + FIELD_PROBES_HOLD_NS + 1);
    assert_eq!(field_probes_said(&mut decoder), vec![false]);
    decoder.check_field_probes(10 + 2 * FIELD_PROBES_HOLD_NS);
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
}

#[test]
fn a_connection_seen_from_its_start_that_is_not_http_is_not_decoded() {
    let ttrpc = b"\x00\x00\x03\x37\x00\x00\x00\x01\x01\x00\x0a\x17containerd";
    // Answers that read as HTTP/2 frames whose header blocks name an
    // entry no table has: each a "lost" table had it been decoded.
    let noise = b"\x00\x00\x01\x01\x04\x00\x00\x00\x01\xff".repeat(3);
    for (change, asked) in [
        (ConnAction::Accepted, Vec::<bool>::new()),
        // Older than podtrace, it may have been joined mid-frame: kept.
        (ConnAction::AcceptedBeforeStart, vec![true]),
    ] {
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(change), &mut once);
        decoder.on_data(&chunk(10, Direction::Ingress, ttrpc, false), &mut once);
        decoder.on_data(&chunk(11, Direction::Egress, &noise, false), &mut once);
        assert_eq!(field_probes_said(&mut decoder), asked, "{change:?}");
        // Capture is told to copy none of its bytes any more.
        assert_eq!(
            decoder.muted.contains(&CONN),
            matches!(change, ConnAction::Accepted),
            "{change:?}"
        );
    }
}

/// A client connection older than podtrace that only receives (a watch)
/// lets the HPACK probes go once it sent no request for the grace, and
/// its next request brings them back.
#[test]
fn a_joined_connection_without_requests_lets_the_probes_go_until_one() {
    let watch_event = b"\x00\x00\x05\x00\x00\x00\x00\x00\x01event";
    let request = b"\x00\x00\x01\x01\x05\x00\x00\x00\x03\x82";
    let mut decoder = GrpcDecoder::default();
    let mut once = DecodedOnce::default();
    decoder.on_conn(&conn_record(ConnAction::ConnectedBeforeStart), &mut once);
    decoder.on_data(
        &chunk(10, Direction::Ingress, watch_event, false),
        &mut once,
    );
    assert_eq!(field_probes_said(&mut decoder), vec![true]);
    // Events keep coming; within the grace the probes stay.
    let later = 10 + REQUEST_IDLE_GRACE_NS / 2;
    decoder.on_data(
        &chunk(later, Direction::Ingress, watch_event, false),
        &mut once,
    );
    decoder.check_field_probes(later + 1);
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    let after = 10 + REQUEST_IDLE_GRACE_NS + 1;
    decoder.on_data(
        &chunk(after, Direction::Ingress, watch_event, false),
        &mut once,
    );
    decoder.check_field_probes(after + FIELD_PROBES_HOLD_NS + 1);
    assert_eq!(field_probes_said(&mut decoder), vec![false]);
    // A request whose path the wire cannot read (here: none at all)
    // brings them back once its exchange is whole.
    let request_at = after + 2 * FIELD_PROBES_HOLD_NS;
    decoder.on_data(
        &chunk(request_at, Direction::Egress, request, false),
        &mut once,
    );
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    decoder.on_data(
        &chunk(request_at + 1, Direction::Ingress, RESPONSE_200, false),
        &mut once,
    );
    assert_eq!(field_probes_said(&mut decoder), vec![true]);
}

/// HEADERS, END_HEADERS and END_STREAM, stream 3: `:status 200` (static).
const RESPONSE_200: &[u8] = b"\x00\x00\x01\x01\x05\x00\x00\x00\x03\x88";

/// A joined connection whose tables are not copied around its request
/// (it went quiet after it) holds the HPACK probes for the grace after
/// that request only, and its later requests do not call them back:
/// otherwise each of kube-apiserver's per-resource etcd clients that
/// makes a request now and then held them for good.
#[test]
fn a_joined_connection_holds_the_probes_only_shortly_after_its_requests() {
    let request = b"\x00\x00\x01\x01\x05\x00\x00\x00\x03\x82";
    let mut decoder = GrpcDecoder::default();
    let mut once = DecodedOnce::default();
    decoder.on_conn(&conn_record(ConnAction::ConnectedBeforeStart), &mut once);
    decoder.on_data(&chunk(10, Direction::Egress, request, false), &mut once);
    decoder.on_data(
        &chunk(10, Direction::Ingress, RESPONSE_200, false),
        &mut once,
    );
    assert_eq!(field_probes_said(&mut decoder), vec![true]);
    // No copy ever comes: let go one grace after the request.
    decoder.check_field_probes(10 + REQUEST_IDLE_GRACE_NS / 2);
    assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    let after = 10 + REQUEST_IDLE_GRACE_NS + FIELD_PROBES_HOLD_NS + 1;
    decoder.check_field_probes(after);
    assert_eq!(field_probes_said(&mut decoder), vec![false]);
    // Its next requests, whole, do not bring them back.
    let next = after + REQUEST_IDLE_GRACE_NS;
    for stream in [5_u8, 7] {
        let request = [0, 0, 1, 1, 5, 0, 0, 0, stream, 0x82];
        let mut response = RESPONSE_200.to_vec();
        response[8] = stream;
        decoder.on_data(&chunk(next, Direction::Egress, &request, false), &mut once);
        decoder.on_data(
            &chunk(next, Direction::Ingress, &response, false),
            &mut once,
        );
        decoder.check_field_probes(next + 1);
        assert_eq!(field_probes_said(&mut decoder), Vec::<bool>::new());
    }
}

/// A gRPC request on `stream` whose `:path` the wire cannot read (the
/// block holds `:method` only), with `message` as its body, framed.
fn unresolved_grpc_request(stream: u8, message: &[u8]) -> Vec<u8> {
    let body = grpc_framed(message);
    let mut bytes = vec![0, 0, 1, 1, 4, 0, 0, 0, stream, 0x82];
    let len = u32::try_from(body.len()).unwrap().to_be_bytes();
    bytes.extend_from_slice(&[len[1], len[2], len[3], 0, 1, 0, 0, 0, stream]);
    bytes.extend_from_slice(&body);
    bytes
}

/// kube-apiserver's per-minute count of Pods, on the connection that
/// carries its Pod writes, is a read: it does not call the HPACK probes
/// back, nor spend the call that the connection's first Pod write makes.
#[test]
fn a_count_of_pods_does_not_call_the_probes_back_and_a_pod_write_still_does() {
    use prost::Message as _;
    let count = tracer_decode::pb::etcdserverpb::RangeRequest {
        key: b"/registry/pods/".to_vec(),
        range_end: b"/registry/pods0".to_vec(),
        count_only: true,
        ..Default::default()
    }
    .encode_to_vec();
    let write = put_txn("/registry/pods/default/web", b"k8s\x00\x0a\x09\x0a\x02v1");
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x0012345678";
    let mut decoder = GrpcDecoder::default();
    let mut once = DecodedOnce::default();
    decoder.on_conn(&conn_record(ConnAction::ConnectedBeforeStart), &mut once);
    decoder.on_data(&chunk(10, Direction::Ingress, ping, false), &mut once);
    assert_eq!(field_probes_said(&mut decoder), vec![true]);
    let quiet = 10 + REQUEST_IDLE_GRACE_NS + FIELD_PROBES_HOLD_NS + 1;
    decoder.check_field_probes(quiet);
    assert_eq!(field_probes_said(&mut decoder), vec![false]);
    for (at, stream, message, calls_back) in [
        (quiet + 1, 3, &count, false),
        (quiet + 2, 5, &count, false),
        (quiet + 3, 7, &write, true),
    ] {
        let request = unresolved_grpc_request(stream, message);
        decoder.on_data(&chunk(at, Direction::Egress, &request, false), &mut once);
        let mut response = RESPONSE_200.to_vec();
        response[8] = stream;
        decoder.on_data(&chunk(at, Direction::Ingress, &response, false), &mut once);
        let said = if calls_back { vec![true] } else { Vec::new() };
        assert_eq!(field_probes_said(&mut decoder), said, "stream {stream}");
    }
}

/// containerd's ttrpc to a shim, both older than podtrace: neither
/// direction's first bytes are frames, so it lets the probes go; one
/// direction joined mid-frame alone does not.
#[test]
fn a_connection_older_than_podtrace_that_is_not_http_lets_the_probes_go() {
    let request = b"\x00\x00\x03\x37\x00\x00\x00\x01\x01\x00\x0a\x17containerd";
    let response = b"\x00\x00\x00\x10\x00\x00\x00\x01\x02\x00\x12\x0e\x0a\x0cstatus";
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x0012345678";
    for (answer, kept) in [(&response[..], false), (&ping[..], true)] {
        let mut decoder = GrpcDecoder::default();
        let mut once = DecodedOnce::default();
        decoder.on_conn(&conn_record(ConnAction::AcceptedBeforeStart), &mut once);
        decoder.on_data(&chunk(10, Direction::Ingress, request, false), &mut once);
        assert_eq!(field_probes_said(&mut decoder), vec![true]);
        decoder.on_data(&chunk(11, Direction::Egress, answer, false), &mut once);
        decoder.check_field_probes(11 + FIELD_PROBES_HOLD_NS + 1);
        let said = if kept { Vec::new() } else { vec![false] };
        assert_eq!(field_probes_said(&mut decoder), said, "{answer:02x?}");
        // Not HTTP: muted, capture copies none of its bytes any more.
        assert_eq!(decoder.muted.contains(&CONN), !kept, "{answer:02x?}");
    }
}

#[test]
fn a_connection_of_one_resource_is_muted_after_enough_requests() {
    let mut keys = KeysSeen::default();
    let lease = request(TXN, b"\x0a\x20/registry/leases/kube-node-lease/n1");
    for _ in 1..4 {
        assert!(!keys.note(&lease, 4));
    }
    // A lease grant names no key: neither counted nor keeping.
    assert!(!keys.note(&request("/etcdserverpb.Lease/LeaseGrant", b"\x08\x3c"), 4));
    assert!(keys.note(&lease, 4));
}

/// An etcd Txn putting `value` under `key`, encoded.
fn put_txn(key: &str, value: &[u8]) -> Vec<u8> {
    use prost::Message as _;
    use tracer_decode::pb::etcdserverpb::{PutRequest, RequestOp, TxnRequest, request_op};
    TxnRequest {
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: key.as_bytes().to_vec(),
                value: value.to_vec(),
                ..PutRequest::default()
            })),
        }],
        ..TxnRequest::default()
    }
    .encode_to_vec()
}

/// `message` framed as a gRPC message (uncompressed, its length first).
fn grpc_framed(message: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// A gRPC Txn putting `value` under `key`, framed as on the wire.
fn framed_put(key: &str, value: &[u8]) -> Exchange {
    request(TXN, &grpc_framed(&put_txn(key, value)))
}

/// A client writing under Pod keys bytes that are no stored object is
/// muted as a client of one other resource is; one of kube-apiserver's
/// Pod writes keeps a connection for good.
#[test]
fn a_connection_writing_opaque_pod_values_is_muted_after_enough_requests() {
    let opaque = framed_put("/registry/pods/bench/opaque-1", b"\x93\x1f\x00bytes");
    let stored = framed_put("/registry/pods/default/web", b"k8s\x00\x0a\x09\x0a\x02v1");
    let mut keys = KeysSeen::default();
    for _ in 1..4 {
        assert!(!keys.note(&opaque, 4));
    }
    assert!(keys.note(&opaque, 4));

    let mut keys = KeysSeen::default();
    assert!(!keys.note(&opaque, 2));
    assert!(!keys.note(&stored, 2));
    for _ in 0..4 {
        assert!(!keys.note(&opaque, 2), "kept after a stored Pod");
    }
    // A Pod write seen in part (the TLS reader lost records, say)
    // neither keeps the connection nor counts.
    let mut keys = KeysSeen::default();
    let mut cut = stored.clone();
    cut.request.lossy = true;
    cut.request.body.truncate(12);
    assert!(!keys.note(&opaque, 2));
    assert!(!keys.note(&cut, 2));
    assert!(keys.note(&opaque, 2), "a cut write kept the connection");
    let mut unended = opaque.clone();
    unended.request.ended = false;
    let mut keys = KeysSeen::default();
    assert!(!keys.note(&unended, 1));

    // Unframed bytes (not gRPC) do not count as opaque writes.
    let mut keys = KeysSeen::default();
    let raw = request(TXN, b"/registry/pods/default/web");
    assert!(!keys.note(&raw, 1));
    assert!(!keys.note(&opaque, 1));
}

#[test]
fn pods_other_resources_and_other_protocols_keep_a_connection() {
    let lease = request(TXN, b"/registry/leases/kube-node-lease/n1");
    let cases = [
        request(TXN, b"/registry/pods/default/web"),
        request(TXN, b"/registry/events/default/e1"),
        request("/runtime.v1.RuntimeService/ContainerStatus", b""),
        request("/api/v1/namespaces/default/pods", b""),
    ];
    for other in cases {
        let mut keys = KeysSeen::default();
        assert!(!keys.note(&lease, 2));
        assert!(!keys.note(&other, 2));
        for _ in 0..4 {
            assert!(!keys.note(&lease, 2), "kept after {:?}", other.path());
        }
    }
    let mut compressed = request(TXN, b"/registry/leases/kube-node-lease/n1");
    compressed
        .request
        .external_headers
        .push(("grpc-encoding".to_owned(), "gzip".to_owned()));
    let mut keys = KeysSeen::default();
    assert!(!keys.note(&compressed, 1));
    assert!(!keys.note(&lease, 1));
}
