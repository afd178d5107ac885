//! HTTP/2 on recorded etcdctl connections (testdata/README.md).

use super::*;
use crate::testdata;
use crate::{Chunk, Direction};

fn decode(chunks: &[Chunk]) -> (Vec<Exchange>, Vec<Http2Error>) {
    let mut connection = Http2Connection::default();
    for chunk in chunks {
        connection.push(chunk);
    }
    let errors = connection.errors().to_vec();
    (connection.finish(), errors)
}

#[test]
fn etcdctl_put_is_one_complete_exchange() {
    let (exchanges, errors) = decode(&testdata::chunks("etcdctl-put.rec"));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(exchanges.len(), 1, "{exchanges:#?}");
    let put = &exchanges[0];
    assert!(put.complete);
    assert_eq!(put.path(), Some("/etcdserverpb.KV/Put"));
    assert_eq!(
        put.request.header(":method"),
        Some(("POST", HeaderSource::Wire))
    );
    assert_eq!(
        put.request.header("content-type"),
        Some(("application/grpc", HeaderSource::Wire))
    );
    assert_eq!(
        put.response.header(":status"),
        Some(("200", HeaderSource::Wire))
    );
    assert_eq!(put.response.trailer("grpc-status"), Some("0"));
    assert!(
        put.request
            .headers
            .as_ref()
            .is_some_and(|h| h.unresolved.is_empty())
    );
}

#[test]
fn long_lived_connection_pairs_every_stream() {
    // etcdctl 3.4 lock: lease grant and keep-alive, Txn to take the lock,
    // DeleteRange to release it, all on one connection.
    let (exchanges, errors) = decode(&testdata::chunks("etcdctl-lock.rec"));
    assert!(errors.is_empty(), "{errors:?}");
    let paths: Vec<_> = exchanges.iter().map(|e| e.path().unwrap_or("?")).collect();
    assert!(
        paths.contains(&"/etcdserverpb.Lease/LeaseGrant"),
        "{paths:?}"
    );
    assert!(paths.contains(&"/etcdserverpb.KV/Txn"), "{paths:?}");
    assert!(paths.contains(&"/etcdserverpb.KV/DeleteRange"), "{paths:?}");
    assert!(exchanges.iter().all(|e| {
        e.request
            .headers
            .as_ref()
            .is_some_and(|h| h.unresolved.is_empty())
    }));
}

/// The recording with every chunk of each direction before the first
/// `skip_per_direction` chunks that carry HEADERS removed, as if capture had
/// started later.
fn cut_after_first_headers(chunks: &[Chunk]) -> Vec<Chunk> {
    let mut seen_headers = [false, false];
    let mut out = Vec::new();
    for chunk in chunks {
        let side = usize::from(chunk.direction == Direction::ServerToClient);
        if seen_headers[side] {
            out.push(chunk.clone());
        } else if chunk_has_headers(&chunk.bytes) {
            seen_headers[side] = true;
        }
    }
    out
}

fn chunk_has_headers(bytes: &[u8]) -> bool {
    let mut at = bytes
        .strip_prefix(frame::CLIENT_PREFACE)
        .map_or(0, |_| frame::CLIENT_PREFACE.len());
    while let Ok(crate::Decoded::Message { msg, consumed }) = frame::parse_frame(&bytes[at..]) {
        if matches!(msg, frame::Frame::Headers { .. }) {
            return true;
        }
        at += consumed;
    }
    false
}

#[test]
fn starts_mid_connection() {
    let chunks = testdata::chunks("etcdctl-lock.rec");
    let (full, _) = decode(&chunks);
    let (late, errors) = decode(&cut_after_first_headers(&chunks));
    assert!(
        errors.iter().all(Http2Error::stream_can_continue),
        "{errors:?}"
    );
    // Every stream that started after the cut is still paired and complete.
    let first_late = late.iter().map(|e| e.stream_id).min().unwrap_or(0);
    assert!(late.len() >= 3, "{late:#?}");
    for exchange in late.iter().filter(|e| e.stream_id > first_late) {
        let original = full
            .iter()
            .find(|e| e.stream_id == exchange.stream_id)
            .expect("stream in full decode");
        assert_eq!(exchange.request.body, original.request.body);
        assert_eq!(exchange.response.body, original.response.body);
        // :path is a literal with an indexed static name, so it survives;
        // fields that reuse entries from the missed first block do not.
        assert_eq!(exchange.path(), original.path());
    }
    let degraded = late
        .iter()
        .filter_map(|e| e.request.headers.as_ref())
        .filter(|h| !h.unresolved.is_empty())
        .count();
    assert!(
        degraded > 0,
        "no request referred to a missed dynamic entry: {late:#?}"
    );
}

#[test]
fn supplied_headers_fill_in_unresolved_path() {
    let chunks = testdata::chunks("etcdctl-put.rec");
    // Only the server's response: the request never reached the decoder.
    let responses: Vec<Chunk> = chunks
        .iter()
        .filter(|c| c.direction == Direction::ServerToClient)
        .cloned()
        .collect();
    let mut connection = Http2Connection::default();
    for chunk in &responses {
        connection.push(chunk);
    }
    connection.supply_headers(
        Direction::ClientToServer,
        1,
        vec![(":path".into(), "/etcdserverpb.KV/Put".into())],
    );
    let exchanges = connection.finish();
    let put = exchanges
        .iter()
        .find(|e| e.stream_id == 1)
        .expect("stream 1");
    assert_eq!(
        put.request.header(":path"),
        Some(("/etcdserverpb.KV/Put", HeaderSource::External))
    );
    assert!(!put.complete, "request end never seen");
}

#[test]
fn truncated_chunk_marks_streams_lossy_and_recovers() {
    let mut chunks = testdata::chunks("etcdctl-put-40k.rec");
    let big = chunks
        .iter_mut()
        .find(|c| c.direction == Direction::ClientToServer && c.bytes.len() > 8000)
        .expect("a large client chunk");
    big.bytes.truncate(4000);
    big.truncated = true;
    let (exchanges, errors) = decode(&chunks);
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, Http2Error::BytesLost { .. })),
        "{errors:?}"
    );
    let put = exchanges
        .iter()
        .find(|e| e.stream_id == 1)
        .expect("stream 1");
    assert!(put.request.lossy);
    assert_eq!(put.response.trailer("grpc-status"), Some("0"));
}

/// One HEADERS frame (END_HEADERS | END_STREAM) carrying `block`.
fn headers_frame(stream_id: u32, block: &[u8]) -> Vec<u8> {
    let len = block.len() as u32;
    let mut frame = vec![
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        0x1,
        0x4 | 0x1,
    ];
    frame.extend_from_slice(&stream_id.to_be_bytes());
    frame.extend_from_slice(block);
    frame
}

/// A block that refers to three dynamic entries only (indices 62–64,
/// newest first) after `:method POST` from the static table.
const INDEXED_BLOCK: [u8; 4] = [0x83, 0xbe, 0xbf, 0xc0];

/// The table a sender has after inserting `:path`, `authorization` and
/// `content-type`, as podtrace copies it: the credential by size only.
fn copied_table() -> TableCopy {
    let entry = |name: &str, value: &str| TableEntry {
        field: Some((name.as_bytes().to_vec(), value.as_bytes().to_vec())),
        size: name.len() + value.len() + 32,
    };
    TableCopy {
        max_size: 4096,
        entries: vec![
            entry(":path", "/etcdserverpb.KV/Txn"),
            TableEntry {
                field: None,
                size: "authorization".len() + "Bearer secret".len() + 32,
            },
            entry("content-type", "application/grpc"),
        ],
    }
}

fn chunk(bytes: Vec<u8>) -> Chunk {
    Chunk {
        direction: Direction::ClientToServer,
        ts_ns: 1,
        bytes,
        truncated: false,
    }
}

#[test]
fn a_table_copy_lets_a_connection_joined_late_decode_from_the_wire() {
    // Without the copy, every dynamic reference is unknown.
    let mut blind = Http2Connection::default();
    blind.push(&chunk(headers_frame(3, &INDEXED_BLOCK)));
    let exchanges = blind.finish();
    assert_eq!(exchanges[0].path(), None);

    let mut connection = Http2Connection::default();
    connection
        .load_table(
            Direction::ClientToServer,
            TablePoint::BeforeNext,
            &copied_table(),
        )
        .expect("loads");
    connection.push(&chunk(headers_frame(3, &INDEXED_BLOCK)));
    let exchanges = connection.finish();
    let request = &exchanges[0].request;
    assert_eq!(exchanges[0].path(), Some("/etcdserverpb.KV/Txn"));
    assert_eq!(
        request.header("content-type"),
        Some(("application/grpc", HeaderSource::Wire))
    );
    let headers = request.headers.as_ref().expect("decoded");
    // The credential was never copied: it is unresolved, not invented.
    assert_eq!(headers.unresolved, [hpack::UnresolvedField::Withheld]);
    assert!(
        headers
            .fields
            .iter()
            .all(|(name, _)| name != "authorization")
    );
}

#[test]
fn a_table_copy_taken_inside_a_header_block_is_refused() {
    let mut connection = Http2Connection::default();
    // In step first: one whole frame.
    connection.push(&chunk(headers_frame(1, &[0x83])));
    let frame = headers_frame(3, &INDEXED_BLOCK);
    // The sender wrote only part of a HEADERS frame it had encoded whole.
    connection.push(&chunk(frame[..6].to_vec()));
    assert_eq!(
        connection.load_table(
            Direction::ClientToServer,
            TablePoint::AfterPushed,
            &copied_table()
        ),
        Err(TableLoadError::MidBlock)
    );
    // The receiver's copy before the rest of the frame is fine: it has not
    // decoded that block yet.
    connection
        .load_table(
            Direction::ClientToServer,
            TablePoint::BeforeNext,
            &copied_table(),
        )
        .expect("loads");
    connection.push(&chunk(frame[6..].to_vec()));
    let paths: Vec<_> = connection
        .finish()
        .iter()
        .map(|e| e.path().map(str::to_owned))
        .collect();
    assert!(
        paths.contains(&Some("/etcdserverpb.KV/Txn".to_owned())),
        "{paths:?}"
    );
}

#[test]
fn a_table_copy_whose_sizes_do_not_add_up_is_refused() {
    let mut copy = copied_table();
    copy.entries[0].size += 1;
    let mut connection = Http2Connection::default();
    assert!(matches!(
        connection.load_table(Direction::ClientToServer, TablePoint::BeforeNext, &copy),
        Err(TableLoadError::Inconsistent(_))
    ));
    copy.max_size = 10;
    copy.entries[0].size -= 1;
    assert!(matches!(
        connection.load_table(Direction::ClientToServer, TablePoint::BeforeNext, &copy),
        Err(TableLoadError::Inconsistent(_))
    ));
}
