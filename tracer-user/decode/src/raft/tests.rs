use prost::Message;

use super::*;

const LEADER: u64 = 0x8e9e_05c5_2164_694d;
const FOLLOWER: u64 = 0x91bc_3c39_8fb3_c146;

fn entry(term: u64, index: u64, data: &[u8]) -> raftpb::Entry {
    raftpb::Entry {
        term: Some(term),
        index: Some(index),
        r#type: Some(raftpb::EntryType::EntryNormal as i32),
        data: Some(data.to_vec()),
    }
}

fn message(kind: raftpb::MessageType, index: u64, entries: Vec<raftpb::Entry>) -> raftpb::Message {
    raftpb::Message {
        r#type: Some(kind as i32),
        from: Some(LEADER),
        to: Some(FOLLOWER),
        term: Some(3),
        log_term: Some(3),
        index: Some(index),
        commit: Some(index),
        entries,
        ..Default::default()
    }
}

/// A `message` stream frame, as etcd's `messageEncoder` writes it.
fn message_frame(message: &raftpb::Message) -> Vec<u8> {
    let bytes = message.encode_to_vec();
    let mut frame = (bytes.len() as u64).to_be_bytes().to_vec();
    frame.extend(bytes);
    frame
}

/// A `msgapp` stream MsgApp frame (type 2).
fn msgapp_frame(message: &raftpb::Message) -> Vec<u8> {
    let mut frame = vec![2];
    frame.extend(message_frame(message));
    frame
}

/// A `msgapp` stream AppEntries frame (type 1).
fn app_entries_frame(entries: &[raftpb::Entry], commit: u64) -> Vec<u8> {
    let mut frame = vec![1];
    frame.extend((entries.len() as u64).to_be_bytes());
    for entry in entries {
        let bytes = entry.encode_to_vec();
        frame.extend((bytes.len() as u64).to_be_bytes());
        frame.extend(bytes);
    }
    frame.extend(commit.to_be_bytes());
    frame
}

fn stream(kind: StreamKind) -> PeerStream {
    PeerStream {
        kind,
        dialer: FOLLOWER,
        writer: LEADER,
    }
}

/// Every message the body gives, pushed whole and then one byte at a time.
fn decode_both_ways(kind: StreamKind, body: &[u8]) -> Vec<RaftMessage> {
    let mut whole = RaftStreamDecoder::new(stream(kind));
    let (messages, errors) = whole.push(body, false);
    assert_eq!(errors, []);
    let mut bytewise = RaftStreamDecoder::new(stream(kind));
    let mut pieces = Vec::new();
    for byte in body {
        let (some, errors) = bytewise.push(std::slice::from_ref(byte), false);
        assert_eq!(errors, []);
        pieces.extend(some);
    }
    assert_eq!(pieces, messages);
    assert_eq!(bytewise.buffered_bytes(), 0);
    messages
}

#[test]
fn a_stream_request_names_its_kind_and_both_members() {
    let target = format!("/raft/stream/msgapp/{FOLLOWER:x}");
    assert_eq!(
        PeerStream::from_request("GET", &target, Some(&format!("{LEADER:x}"))),
        Some(stream(StreamKind::MsgAppV2))
    );
    let target = format!("/raft/stream/message/{FOLLOWER:x}");
    assert_eq!(
        PeerStream::from_request("GET", &target, None).map(|s| (s.kind, s.writer)),
        Some((StreamKind::Message, 0))
    );
    for (method, target) in [
        ("POST", "/raft/stream/message/1"),
        ("GET", "/raft"),
        ("GET", "/raft/stream/msgappv2/1"),
        ("GET", "/raft/stream/message/not-hex"),
        ("GET", "/v2/members"),
    ] {
        assert_eq!(PeerStream::from_request(method, target, Some("2")), None);
    }
}

#[test]
fn message_frames_give_answers_and_proposals_in_any_pieces() {
    let mut answer = message(raftpb::MessageType::MsgAppResp, 42, Vec::new());
    (answer.from, answer.to) = (Some(FOLLOWER), Some(LEADER));
    let mut refused = answer.clone();
    refused.reject = Some(true);
    let proposal = message(
        raftpb::MessageType::MsgProp,
        0,
        vec![entry(0, 0, b"request")],
    );
    let mut body = message_frame(&answer);
    body.extend(message_frame(&refused));
    body.extend(message_frame(&proposal));
    let messages = decode_both_ways(StreamKind::Message, &body);
    assert_eq!(messages.len(), 3);
    assert_eq!(
        (messages[0].kind, messages[0].from, messages[0].to),
        (MessageKind::AppResp, FOLLOWER, LEADER)
    );
    assert_eq!((messages[0].index, messages[0].reject), (42, false));
    assert!(messages[1].reject);
    assert_eq!(messages[2].kind, MessageKind::Prop);
    assert_eq!(messages[2].entries[0].data, b"request");
}

#[test]
fn app_entries_continue_the_previous_append_on_the_stream() {
    let first = message(
        raftpb::MessageType::MsgApp,
        9,
        vec![entry(3, 10, b"ten"), entry(3, 11, b"eleven")],
    );
    let mut body = msgapp_frame(&first);
    body.push(0); // a link heartbeat
    body.extend(app_entries_frame(&[entry(3, 12, b"twelve")], 11));
    body.extend(app_entries_frame(
        &[entry(3, 13, b"thirteen"), entry(3, 14, b"")],
        12,
    ));
    let messages = decode_both_ways(StreamKind::MsgAppV2, &body);
    assert_eq!(messages.len(), 3, "{messages:#?}");
    for message in &messages {
        assert_eq!(
            (message.kind, message.from, message.to, message.term),
            (MessageKind::App, LEADER, FOLLOWER, 3)
        );
    }
    let indexes = |m: &RaftMessage| m.entries.iter().map(|e| e.index).collect::<Vec<_>>();
    assert_eq!(
        (messages[0].index, indexes(&messages[0])),
        (9, vec![10, 11])
    );
    assert_eq!((messages[1].index, indexes(&messages[1])), (11, vec![12]));
    assert_eq!(
        (messages[1].commit, messages[1].entries[0].data.as_slice()),
        (11, &b"twelve"[..])
    );
    assert_eq!(
        (messages[2].index, indexes(&messages[2])),
        (12, vec![13, 14])
    );
    assert_eq!(messages[2].commit, 12);
}

#[test]
fn a_configuration_change_entry_carries_no_request_data() {
    let mut change = entry(3, 10, b"conf change");
    change.r#type = Some(raftpb::EntryType::EntryConfChange as i32);
    let body = msgapp_frame(&message(raftpb::MessageType::MsgApp, 9, vec![change]));
    let messages = decode_both_ways(StreamKind::MsgAppV2, &body);
    assert_eq!(messages[0].entries[0].index, 10);
    assert!(messages[0].entries[0].data.is_empty());
}

#[test]
fn a_message_over_the_bound_is_skipped_and_the_next_decoded() {
    let heartbeat = message(raftpb::MessageType::MsgHeartbeat, 0, Vec::new());
    let mut decoder = RaftStreamDecoder::new(stream(StreamKind::Message));
    let len = MAX_MESSAGE_BYTES + 1;
    let (messages, errors) = decoder.push(&len.to_be_bytes(), false);
    assert_eq!(
        (messages, errors),
        (vec![], vec![RaftStreamError::TooLarge { len_bytes: len }])
    );
    // The oversized body arrives in pieces, then a heartbeat.
    let piece = vec![0u8; 1 << 20];
    for _ in 0..10 {
        assert_eq!(decoder.push(&piece, false), (vec![], vec![]));
    }
    let mut rest = vec![0u8];
    rest.extend(message_frame(&heartbeat));
    let (messages, errors) = decoder.push(&rest, false);
    assert_eq!(errors, []);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].kind, MessageKind::Heartbeat);
    assert_eq!(decoder.skipped_bytes(), 8 + len);
}

#[test]
fn garbage_costs_its_frame_and_an_unknown_type_byte_or_a_loss_stops_the_stream() {
    let heartbeat = message(raftpb::MessageType::MsgHeartbeat, 0, Vec::new());
    // Five bytes framed as a message that are not one (a truncated varint).
    let mut body = 5u64.to_be_bytes().to_vec();
    body.extend([0x08, 0xff, 0xff, 0xff, 0xff]);
    body.extend(message_frame(&heartbeat));
    let mut decoder = RaftStreamDecoder::new(stream(StreamKind::Message));
    let (messages, errors) = decoder.push(&body, false);
    assert_eq!(messages.len(), 1);
    assert!(
        matches!(errors[..], [RaftStreamError::BadMessage { .. }]),
        "{errors:?}"
    );

    let mut decoder = RaftStreamDecoder::new(stream(StreamKind::MsgAppV2));
    let (messages, errors) = decoder.push(&[7, 0, 0], false);
    assert_eq!(
        (messages, errors),
        (vec![], vec![RaftStreamError::BadFrameType { kind: 7 }])
    );
    let (messages, errors) = decoder.push(&message_frame(&heartbeat), false);
    assert_eq!((messages.len(), errors.len()), (0, 0));

    let mut decoder = RaftStreamDecoder::new(stream(StreamKind::Message));
    let frame = message_frame(&heartbeat);
    let (messages, errors) = decoder.push(&frame[..4], true);
    assert_eq!(
        (messages, errors),
        (vec![], vec![RaftStreamError::BytesLost])
    );
    assert_eq!(decoder.push(&frame, false), (vec![], vec![]));
    assert_eq!(decoder.skipped_bytes(), 4 + frame.len() as u64);
}

#[test]
fn an_append_over_the_bound_ends_the_stream() {
    let mut frame = vec![1];
    frame.extend(1u64.to_be_bytes());
    frame.extend(MAX_MESSAGE_BYTES.to_be_bytes());
    let mut decoder = RaftStreamDecoder::new(stream(StreamKind::MsgAppV2));
    let (messages, errors) = decoder.push(&frame, false);
    assert!(messages.is_empty());
    assert!(
        matches!(errors[..], [RaftStreamError::AppendTooLarge { .. }]),
        "{errors:?}"
    );
    assert!(!errors[0].can_continue());
    // Nothing after it is framed.
    let append = message(raftpb::MessageType::MsgApp, 1, Vec::new());
    assert_eq!(
        decoder.push(&msgapp_frame(&append), false),
        (vec![], vec![])
    );
}
