use prost::Message;

use super::*;
use crate::pb::raftpb;

const LEADER: u64 = 0x8e9e_05c5_2164_694d;
const FOLLOWER: u64 = 0x91bc_3c39_8fb3_c146;

fn message(kind: raftpb::MessageType, term: u64, entries: Vec<raftpb::Entry>) -> raftpb::Message {
    raftpb::Message {
        r#type: Some(kind as i32),
        from: Some(LEADER),
        to: Some(FOLLOWER),
        term: Some(term),
        log_term: Some(term),
        index: Some(41),
        commit: Some(41),
        entries,
        ..Default::default()
    }
}

fn entry(term: u64, index: u64) -> raftpb::Entry {
    raftpb::Entry {
        term: Some(term),
        index: Some(index),
        r#type: Some(raftpb::EntryType::EntryNormal as i32),
        data: Some(b"request".to_vec()),
    }
}

/// A `message` stream frame: u64 length, message.
fn message_frame(message: &raftpb::Message) -> Vec<u8> {
    let bytes = message.encode_to_vec();
    let mut frame = (bytes.len() as u64).to_be_bytes().to_vec();
    frame.extend(bytes);
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

/// One chunk of a chunked body, as Go's `net/http` writes it at a flush.
fn chunk(data: &[u8]) -> Vec<u8> {
    let mut chunk = format!("{:x}\r\n", data.len()).into_bytes();
    chunk.extend(data);
    chunk.extend(b"\r\n");
    chunk
}

fn decoded(joined: Joined) -> (PeerStream, Vec<RaftMessage>) {
    match joined {
        Joined::Decoded {
            stream,
            messages,
            errors,
        } => {
            assert_eq!(errors, []);
            (stream, messages)
        }
        other => panic!("not decoded: {other:?}"),
    }
}

#[test]
fn a_message_stream_is_placed_by_a_whole_heartbeat_and_then_read_in_any_pieces() {
    let mut stream = JoinedStream::default();
    let heartbeat = chunk(&message_frame(&message(
        raftpb::MessageType::MsgHeartbeat,
        3,
        vec![],
    )));
    // Joined in the middle of a chunk: that record places nothing.
    assert_eq!(stream.push(&heartbeat[5..], false), Joined::Searching);
    let (placed, messages) = decoded(stream.push(&heartbeat, false));
    assert_eq!(
        placed,
        PeerStream {
            kind: StreamKind::Message,
            dialer: FOLLOWER,
            writer: LEADER
        }
    );
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.kind, m.from, m.term))
            .collect::<Vec<_>>(),
        [(MessageKind::Heartbeat, LEADER, 3)]
    );
    // Once placed, records need not end where chunks do.
    let answer = chunk(&message_frame(&message(
        raftpb::MessageType::MsgAppResp,
        3,
        vec![],
    )));
    let two = [heartbeat.clone(), answer].concat();
    let (first, rest) = two.split_at(heartbeat.len() + 3);
    let mut kinds = Vec::new();
    for piece in [first, rest] {
        let (_, messages) = decoded(stream.push(piece, false));
        kinds.extend(messages.iter().map(|m| m.kind));
    }
    assert_eq!(kinds, [MessageKind::Heartbeat, MessageKind::AppResp]);
    assert_eq!(stream.placed(), 1);
    assert_eq!(stream.skipped_bytes(), heartbeat.len() as u64 - 5);
}

#[test]
fn a_msgapp_stream_takes_its_append_context_from_entries_and_members_from_a_full_msgapp() {
    let mut stream = JoinedStream::default();
    // A link heartbeat (one zero byte) places a `msgapp` stream, members
    // still unknown.
    let (placed, messages) = decoded(stream.push(&chunk(&[0]), false));
    assert_eq!(
        (placed.kind, placed.writer, placed.dialer),
        (StreamKind::MsgAppV2, 0, 0)
    );
    assert_eq!(messages, []);
    // An AppEntries frame continuing an append never seen: its term and
    // index come from its entries.
    let (_, messages) = decoded(stream.push(
        &chunk(&app_entries_frame(&[entry(7, 42), entry(7, 43)], 41)),
        false,
    ));
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.kind, m.from, m.term, m.index, m.entries.len()))
            .collect::<Vec<_>>(),
        [(MessageKind::App, 0, 7, 41, 2)]
    );
    // The next continues from there, though it carries no entry.
    let (_, messages) = decoded(stream.push(&chunk(&app_entries_frame(&[], 43)), false));
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.term, m.index))
            .collect::<Vec<_>>(),
        [(7, 43)]
    );
    // A full MsgApp frame (type 2) names both members.
    let mut full = vec![2];
    full.extend(message_frame(&message(
        raftpb::MessageType::MsgApp,
        7,
        vec![entry(7, 44)],
    )));
    let (placed, messages) = decoded(stream.push(&chunk(&full), false));
    assert_eq!((placed.writer, placed.dialer), (LEADER, FOLLOWER));
    assert_eq!(messages.len(), 1);
    let (_, messages) =
        decoded(stream.push(&chunk(&app_entries_frame(&[entry(7, 45)], 44)), false));
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.from, m.to, m.index))
            .collect::<Vec<_>>(),
        [(LEADER, FOLLOWER, 44)]
    );
}

#[test]
fn other_chunked_bodies_and_http2_frames_are_left_alone_after_a_bound() {
    for record in [
        chunk(br#"{"type":"MODIFIED","object":{"kind":"Lease"}}"#),
        // An HTTP/2 DATA frame.
        vec![0, 0, 5, 0, 0, 0, 0, 0, 1, b'h', b'e', b'l', b'l', b'o'],
        // A `message`-shaped chunk whose message names no members.
        chunk(&message_frame(&raftpb::Message::default())),
    ] {
        let mut stream = JoinedStream::default();
        for _ in 1..MAX_MISSES {
            assert_eq!(stream.push(&record, false), Joined::Searching);
        }
        assert_eq!(stream.push(&record, false), Joined::NotRaft);
        assert_eq!(stream.push(&chunk(&[0]), false), Joined::NotRaft);
        assert_eq!(
            stream.skipped_bytes(),
            MAX_MISSES as u64 * record.len() as u64
        );
    }
}

#[test]
fn a_loss_places_the_stream_again_from_a_later_record() {
    let mut stream = JoinedStream::default();
    let heartbeat = chunk(&message_frame(&message(
        raftpb::MessageType::MsgHeartbeat,
        3,
        vec![],
    )));
    decoded(stream.push(&heartbeat, false));
    // A record cut short: the framing after it is unknown.
    match stream.push(&heartbeat[..10], true) {
        Joined::Decoded {
            errors, messages, ..
        } => {
            assert_eq!(messages, []);
            assert_eq!(errors, [RaftStreamError::BytesLost]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stream.push(&heartbeat[10..], false), Joined::Searching);
    let (_, messages) = decoded(stream.push(&heartbeat, false));
    assert_eq!(messages.len(), 1);
    assert_eq!(stream.placed(), 2);
}

#[test]
fn the_last_chunk_ends_the_stream_without_a_loss() {
    let mut stream = JoinedStream::default();
    let heartbeat = chunk(&message_frame(&message(
        raftpb::MessageType::MsgHeartbeat,
        3,
        vec![],
    )));
    decoded(stream.push(&heartbeat, false));
    // etcd closing the stream: a last frame, then the zero-size chunk.
    let (_, messages) = decoded(stream.push(&[heartbeat.as_slice(), b"0\r\n\r\n"].concat(), false));
    assert_eq!(messages.len(), 1);
    assert_eq!(stream.push(&heartbeat, false), Joined::Ended);
    assert_eq!(stream.placed(), 1);
}
