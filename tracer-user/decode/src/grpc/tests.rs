use super::*;
use crate::http2::{Exchange, Http2Connection};
use crate::testdata;

fn exchanges(name: &str) -> Vec<Exchange> {
    let mut connection = Http2Connection::default();
    for chunk in testdata::chunks(name) {
        connection.push(&chunk);
    }
    connection.finish()
}

fn prefixed(compressed: bool, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![u8::from(compressed)];
    out.extend((bytes.len() as u32).to_be_bytes());
    out.extend(bytes);
    out
}

#[test]
fn grpc_message_split_across_frames() {
    let put = exchanges("etcdctl-put-40k.rec")
        .into_iter()
        .find(|e| e.stream_id == 1)
        .expect("stream 1");
    assert!(
        put.request.data_frames >= 3,
        "{} DATA frames",
        put.request.data_frames
    );
    let Some(call) = GrpcCall::from_exchange(&put) else {
        panic!("not gRPC")
    };
    assert_eq!(
        (call.service.as_deref(), call.method.as_deref()),
        (Some("etcdserverpb.KV"), Some("Put"))
    );
    assert_eq!(call.requests.messages.len(), 1);
    assert!(call.request_bytes().is_some_and(|b| b.len() > 40_000));
    assert_eq!(
        call.status,
        Some(GrpcStatus {
            code: 0,
            message: None
        })
    );
}

#[test]
fn several_messages_in_one_body_and_a_cut_last_one() {
    let mut body = prefixed(false, b"one");
    body.extend(prefixed(false, b"two"));
    let third = prefixed(false, b"three");
    body.extend(&third[..6]);
    let split = split_body(&body, None, false);
    assert_eq!(
        split.messages,
        vec![
            Payload::Plain(b"one".to_vec()),
            Payload::Plain(b"two".to_vec()),
            Payload::Truncated {
                len_bytes: 5,
                captured_bytes: 1
            }
        ]
    );
}

#[test]
fn gzip_messages_are_inflated_and_others_reported() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"hello").expect("in-memory write");
    let compressed = gz.finish().expect("in-memory write");
    let body = prefixed(true, &compressed);
    assert_eq!(
        split_body(&body, Some("gzip"), true).messages,
        vec![Payload::Plain(b"hello".to_vec())]
    );
    assert_eq!(
        split_body(&body, Some("snappy"), true).messages,
        vec![Payload::Compressed {
            encoding: Some("snappy".into()),
            len_bytes: compressed.len()
        }]
    );
    let broken = prefixed(true, b"not gzip");
    let split = split_body(&broken, Some("gzip"), true);
    assert!(split.errors.iter().all(GrpcError::can_continue) && !split.errors.is_empty());
}

#[test]
fn bad_prefix_stops_the_body() {
    let split = split_body(&[7, 0, 0, 0, 1, 0], None, true);
    assert_eq!(
        split.errors,
        vec![GrpcError::BadFlag { offset: 0, flag: 7 }]
    );
    assert!(!split.errors[0].can_continue());
}

#[test]
fn status_message_is_percent_decoded() {
    assert_eq!(percent_decode("key%20not%20found%"), "key not found%");
}
