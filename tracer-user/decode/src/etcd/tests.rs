use super::*;
use crate::grpc::GrpcCall;
use crate::http2::Http2Connection;
use crate::testdata;

fn kv_calls(name: &str) -> Vec<KvCall> {
    let mut connection = Http2Connection::default();
    for chunk in testdata::chunks(name) {
        connection.push(&chunk);
    }
    connection
        .finish()
        .iter()
        .filter_map(GrpcCall::from_exchange)
        .filter_map(|c| KvCall::from_grpc(&c))
        .collect()
}

#[test]
fn etcdctl_put_decodes_key_and_revision() {
    let calls = kv_calls("etcdctl-put.rec");
    let [
        KvCall {
            request: Some(Ok(KvRequest::Put(put))),
            response: Some(Ok(response)),
        },
    ] = calls.as_slice()
    else {
        panic!("{calls:?}")
    };
    assert_eq!(put.key, b"/registry/pods/default/x");
    assert_eq!(put.value, b"hello");
    assert_eq!(response.revision(), Some(2));
}

#[test]
fn txn_create_pod_has_compare_put_and_revision() {
    let calls = kv_calls("etcdctl-txn-create-pod.rec");
    let [
        KvCall {
            request: Some(Ok(request @ KvRequest::Txn(txn))),
            response: Some(Ok(response)),
        },
    ] = calls.as_slice()
    else {
        panic!("{calls:?}")
    };
    let key: &[u8] = b"/registry/pods/default/web-7d4b9";
    assert_eq!(request.keys(), vec![key, key]);
    assert_eq!(
        txn.compare[0].target,
        pb::compare::CompareTarget::Mod as i32
    );
    assert_eq!(
        request.puts()[0].value,
        testdata::bytes("pod-web-7d4b9.k8spb")
    );
    assert_eq!(response.txn_succeeded(), Some(true));
    assert_eq!(response.revision(), Some(3));
}

#[test]
fn range_and_delete_range() {
    let range = kv_calls("etcdctl-get-pod.rec");
    let [
        KvCall {
            request: Some(Ok(KvRequest::Range(r))),
            response: Some(Ok(KvResponse::Range(resp))),
        },
    ] = range.as_slice()
    else {
        panic!("{range:?}")
    };
    assert_eq!(r.key, b"/registry/pods/default/web-7d4b9");
    assert_eq!(resp.kvs.len(), 1);
    let del = kv_calls("etcdctl-del.rec");
    let [
        KvCall {
            request: Some(Ok(KvRequest::DeleteRange(d))),
            response: Some(Ok(KvResponse::DeleteRange(resp))),
        },
    ] = del.as_slice()
    else {
        panic!("{del:?}")
    };
    assert_eq!(d.key, b"/registry/pods/default/x");
    assert_eq!(resp.deleted, 1);
}

#[test]
fn debug_output_never_shows_values() {
    let calls = kv_calls("etcdctl-put.rec");
    let text = format!("{calls:?}");
    assert!(
        text.contains("/registry/pods/default/x") && !text.contains("hello"),
        "{text}"
    );
}

#[test]
fn mid_connection_txn_still_decodes() {
    // etcdctl lock's Txn comes after the first request's HEADERS were missed.
    let chunks = testdata::chunks("etcdctl-lock.rec");
    let first_c2s_headers = chunks
        .iter()
        .position(|c| c.direction == crate::Direction::ClientToServer && c.bytes.len() > 24);
    let late: Vec<_> = chunks
        .into_iter()
        .skip(first_c2s_headers.map_or(0, |i| i + 1))
        .collect();
    let mut connection = Http2Connection::default();
    for chunk in &late {
        connection.push(chunk);
    }
    let calls: Vec<_> = connection
        .finish()
        .iter()
        .filter_map(GrpcCall::from_exchange)
        .filter_map(|c| KvCall::from_grpc(&c))
        .collect();
    assert!(
        calls.iter().any(|c| matches!(&c.request, Some(Ok(r @ KvRequest::Txn(_))) if r.keys().iter().any(|k| k.starts_with(b"podtrace-lock/")))),
        "{calls:?}"
    );
}

#[test]
fn write_kinds_follow_the_apiserver_storage_shapes() {
    let request = |name| match kv_calls(name).into_iter().next() {
        Some(KvCall {
            request: Some(Ok(request)),
            ..
        }) => request,
        other => panic!("{other:?}"),
    };
    // kube-apiserver's create: compare mod_revision == 0, then put.
    assert_eq!(
        request("etcdctl-txn-create-pod.rec").write_kind(),
        Some(WriteKind::Create)
    );
    assert_eq!(
        request("etcdctl-put.rec").write_kind(),
        Some(WriteKind::Update)
    );
    assert_eq!(
        request("etcdctl-del.rec").write_kind(),
        Some(WriteKind::Delete)
    );
    assert_eq!(request("etcdctl-get-pod.rec").write_kind(), None);
}

#[test]
fn canonical_bytes_name_one_request_however_it_was_framed() {
    let Some(KvCall {
        request: Some(Ok(request)),
        ..
    }) = kv_calls("etcdctl-txn-create-pod.rec").into_iter().next()
    else {
        panic!("no Txn")
    };
    let bytes = request.canonical_bytes();
    let again = KvRequest::decode("Txn", &bytes).unwrap();
    assert_eq!(again, request);
    assert_eq!(again.canonical_bytes(), bytes);
    assert_ne!(
        bytes,
        KvRequest::decode("Put", &[0x0a, 0x01, b'k'])
            .unwrap()
            .canonical_bytes()
    );
}

/// kube-apiserver's count of Pods (a count-only Range of their prefix) and
/// a quorum read of one are reads; its Txns and a Put of a Pod are not.
#[test]
fn reads_of_keys_are_told_from_writes() {
    let count = pb::RangeRequest {
        key: b"/registry/pods/".to_vec(),
        range_end: b"/registry/pods0".to_vec(),
        count_only: true,
        ..pb::RangeRequest::default()
    };
    let get = pb::RangeRequest {
        key: b"/registry/pods/default/web".to_vec(),
        ..pb::RangeRequest::default()
    };
    for read in [count, get] {
        assert!(reads_keys_only(&read.encode_to_vec()), "{read:?}");
    }
    let put = pb::PutRequest {
        key: b"/registry/pods/default/web".to_vec(),
        value: b"k8s\x00\x0a\x09\x0a\x02v1".to_vec(),
        ..pb::PutRequest::default()
    };
    let op = |request| pb::RequestOp {
        request: Some(request),
    };
    let create = pb::TxnRequest {
        compare: vec![pb::Compare {
            key: put.key.clone(),
            target: pb::compare::CompareTarget::Mod.into(),
            ..pb::Compare::default()
        }],
        success: vec![op(pb::request_op::Request::RequestPut(put.clone()))],
        ..pb::TxnRequest::default()
    };
    let update = pb::TxnRequest {
        failure: vec![op(pb::request_op::Request::RequestRange(
            pb::RangeRequest {
                key: put.key.clone(),
                ..pb::RangeRequest::default()
            },
        ))],
        ..create.clone()
    };
    assert!(!reads_keys_only(&put.encode_to_vec()));
    assert!(!reads_keys_only(&create.encode_to_vec()));
    assert!(!reads_keys_only(&update.encode_to_vec()));
    assert!(!reads_keys_only(b"\xff\xff not protobuf"));
}
