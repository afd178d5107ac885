use prost::Message;

use super::*;
use crate::testdata;

/// A protobuf watch body as kube-apiserver writes one: each object in the
/// `k8s\0` envelope (the embedded encoder, `protobuf.Serializer`), inside a
/// `metav1.WatchEvent` marshalled as is (the stream serializer,
/// `protobuf.RawSerializer`), behind a 4-byte big-endian length
/// (`protobuf.LengthDelimitedFramer`) — see the module docs for the
/// apiserver code path.
fn protobuf_body(events: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (event_type, object) in events {
        let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent {
            r#type: Some(event_type.to_string()),
            object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
                raw: Some(object.to_vec()),
            }),
        };
        let frame = event.encode_to_vec();
        body.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        body.extend_from_slice(&frame);
    }
    body
}

/// A JSON watch body: `json.Serializer` writes each `metav1.WatchEvent`
/// with Go's `json.Encoder`, which ends it with a newline; the object is
/// embedded as is.
fn json_body(events: &[(&str, &str)]) -> Vec<u8> {
    events
        .iter()
        .map(|(event_type, object)| format!("{{\"type\":\"{event_type}\",\"object\":{object}}}\n"))
        .collect::<String>()
        .into_bytes()
}

fn json_pod() -> String {
    String::from_utf8(testdata::bytes("pod-web-7d4b9.json"))
        .expect("UTF-8")
        .trim()
        .to_string()
}

fn web_pod() -> StoredObject {
    kube::decode_stored_object(&testdata::bytes("pod-web-7d4b9.k8spb")).expect("the Pod")
}

const STATUS_JSON: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (42)","reason":"Expired","code":410}"#;

/// Feeds `body` in pieces of `piece` bytes.
fn decode(format: WatchFormat, body: &[u8], piece: usize) -> (Vec<WatchEvent>, Vec<WatchError>) {
    let mut decoder = WatchDecoder::new(format);
    let (mut events, mut errors) = (Vec::new(), Vec::new());
    for bytes in body.chunks(piece) {
        let (e, r) = decoder.push(bytes, false);
        events.extend(e);
        errors.extend(r);
    }
    assert!(decoder.buffered_bytes() < piece.max(2), "leftover bytes");
    (events, errors)
}

fn types(events: &[WatchEvent]) -> Vec<EventType> {
    events.iter().map(|e| e.event_type.clone()).collect()
}

#[test]
fn json_watch_of_a_pod_yields_its_identity_per_event_whatever_the_cut() {
    let pod = json_pod();
    let body = json_body(&[
        ("ADDED", &pod),
        ("MODIFIED", &pod),
        (
            "BOOKMARK",
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}"#,
        ),
        ("DELETED", &pod),
        ("ERROR", STATUS_JSON),
    ]);
    for piece in [1, 7, 100, body.len()] {
        let (events, errors) = decode(WatchFormat::Json, &body, piece);
        // Cut anywhere, a status event whose `status` is a string costs nothing.
        assert_eq!(errors, [], "piece {piece}");
        assert_eq!(
            types(&events),
            [
                EventType::Added,
                EventType::Modified,
                EventType::Bookmark,
                EventType::Deleted,
                EventType::Error
            ]
        );
        assert_eq!(events[0].object, Ok(web_pod()));
        assert_eq!(events[3].object, Ok(web_pod()));
        assert_eq!(
            events[4].object,
            Ok(StoredObject::Other {
                api_version: "v1".into(),
                kind: "Status".into()
            })
        );
    }
}

#[test]
fn protobuf_watch_of_a_pod_yields_its_identity_per_event_whatever_the_cut() {
    let pod = testdata::bytes("pod-web-7d4b9.k8spb");
    let body = protobuf_body(&[("ADDED", &pod), ("MODIFIED", &pod), ("DELETED", &pod)]);
    for piece in [1, 13, body.len()] {
        let (events, errors) = decode(WatchFormat::Protobuf, &body, piece);
        assert_eq!(errors, [], "piece {piece}");
        assert_eq!(
            types(&events),
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
        assert!(events.iter().all(|e| e.object == Ok(web_pod())));
    }
}

#[test]
fn protobuf_frames_in_the_k8s_envelope_are_read_too() {
    let pod = testdata::bytes("pod-web-7d4b9.k8spb");
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent {
        r#type: Some("ADDED".into()),
        object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension { raw: Some(pod) }),
    };
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("meta.k8s.io/v1".into()),
            kind: Some("WatchEvent".into()),
        }),
        raw: Some(event.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut frame = PROTOBUF_MAGIC.to_vec();
    frame.extend(unknown.encode_to_vec());
    let mut body = (frame.len() as u32).to_be_bytes().to_vec();
    body.extend(frame);
    let (events, errors) = decode(WatchFormat::Protobuf, &body, body.len());
    assert_eq!(errors, []);
    assert_eq!(events[0].object, Ok(web_pod()));
}

#[test]
fn pretty_printed_json_event_spanning_lines_decodes() {
    let body = format!(
        "{{\n  \"type\": \"ADDED\",\n  \"object\": {}\n}}\n",
        json_pod()
    );
    let (events, errors) = decode(WatchFormat::Json, body.as_bytes(), 5);
    assert_eq!(errors, []);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].object, Ok(web_pod()));
}

#[test]
fn garbled_json_line_costs_only_that_event() {
    let pod = json_pod();
    let mut body = b"{\"type\":\"ADDED\",\"object\":{]}\nnot json\n".to_vec();
    body.extend(json_body(&[("MODIFIED", &pod)]));
    for piece in [1, body.len()] {
        let (events, errors) = decode(WatchFormat::Json, &body, piece);
        assert_eq!(types(&events), [EventType::Modified], "piece {piece}");
        assert_eq!(errors.len(), 2, "piece {piece}: {errors:?}");
        assert!(errors.iter().all(WatchError::can_continue));
    }
    let (_, errors) = decode(WatchFormat::Json, &body, body.len());
    assert!(errors.iter().all(WatchError::can_continue));
}

#[test]
fn truncated_json_chunk_resumes_at_the_next_event() {
    let pod = json_pod();
    let body = json_body(&[("ADDED", &pod), ("MODIFIED", &pod)]);
    let cut = 40;
    let mut decoder = WatchDecoder::new(WatchFormat::Json);
    let (events, errors) = decoder.push(&body[..cut], true);
    assert_eq!((events.len(), errors.len()), (0, 1));
    // The capture lost bytes up to 20 bytes before the first event's end.
    let first_end = pod.len() + 28;
    let (events, errors) = decoder.push(&body[first_end - 20..], false);
    assert_eq!(errors, []);
    assert_eq!(types(&events), [EventType::Modified]);
}

#[test]
fn protobuf_stream_stops_after_lost_bytes_or_absurd_length() {
    let pod = testdata::bytes("pod-web-7d4b9.k8spb");
    let body = protobuf_body(&[("ADDED", &pod), ("MODIFIED", &pod)]);
    let mut decoder = WatchDecoder::new(WatchFormat::Protobuf);
    let _ = decoder.push(&body[..10], true);
    let (events, _) = decoder.push(&body[10..], false);
    assert_eq!(events, []);
    assert_eq!(decoder.skipped_bytes(), body.len());

    let (events, errors) = decode(WatchFormat::Protobuf, &[0xff, 0xff, 0xff, 0xff, 0], 5);
    assert_eq!(events, []);
    assert!(matches!(errors.as_slice(), [WatchError::TooLarge { .. }]));
    assert!(!errors[0].can_continue());
}

#[test]
fn undecodable_protobuf_frame_costs_only_itself() {
    let pod = testdata::bytes("pod-web-7d4b9.k8spb");
    let mut body = vec![0, 0, 0, 2, 0xff, 0xff];
    body.extend(protobuf_body(&[("ADDED", &pod)]));
    let (events, errors) = decode(WatchFormat::Protobuf, &body, body.len());
    assert_eq!(types(&events), [EventType::Added]);
    assert!(matches!(errors.as_slice(), [WatchError::Protobuf { .. }]));
}

#[test]
fn secret_events_keep_only_the_kind() {
    let body = json_body(&[(
        "ADDED",
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db"},"data":{"password":"aHVudGVyMg=="}}"#,
    )]);
    let (events, _) = decode(WatchFormat::Json, &body, body.len());
    assert_eq!(
        events[0].object,
        Ok(StoredObject::Other {
            api_version: "v1".into(),
            kind: "Secret".into()
        })
    );
    assert!(!format!("{events:?}").contains("aHVudGVyMg"));
}

#[test]
fn content_types_pick_the_format() {
    assert_eq!(
        WatchFormat::from_content_type("application/vnd.kubernetes.protobuf;stream=watch"),
        Some(WatchFormat::Protobuf)
    );
    assert_eq!(
        WatchFormat::from_content_type("application/json"),
        Some(WatchFormat::Json)
    );
    assert_eq!(WatchFormat::from_content_type("application/yaml"), None);
}
