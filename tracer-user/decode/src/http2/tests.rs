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

/// One DATA frame on `stream_id` of `len` payload bytes, END_STREAM if `last`.
fn data_frame(stream_id: u32, len: usize, last: bool) -> Vec<u8> {
    let mut frame = vec![
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        0x0,
        u8::from(last),
    ];
    frame.extend_from_slice(&stream_id.to_be_bytes());
    frame.extend((0..len).map(|i| i as u8));
    frame
}

/// A gRPC server reading 32 KiB at a time from a client streaming 16 KiB
/// DATA frames (an image's content written through containerd's API): the
/// client's first request inserts its `:path` in the HPACK table, two DATA
/// frames follow, then two requests that name that entry by index. The
/// capture kept all but the last `lost` bytes of the read of the first
/// `read` bytes after the first request; the next read starts after them.
fn read_cut(read: usize, lost: usize) -> Http2Connection {
    let mut block = vec![0x83, 0x44, CONTENT_WRITE.len() as u8];
    block.extend_from_slice(CONTENT_WRITE);
    let mut first = frame::CLIENT_PREFACE.to_vec();
    let mut headers = headers_frame(1, &block);
    headers[4] = 0x4; // END_HEADERS: DATA follows.
    first.extend(headers);

    let mut stream = data_frame(1, 16_384, false);
    stream.extend(data_frame(1, 16_384, true));
    stream.extend(headers_frame(3, &[0x83, 0xbe]));
    stream.extend(headers_frame(5, &[0x83, 0xbe]));
    let mut connection = Http2Connection::default();
    connection.push(&chunk(first));
    connection.push_bytes(
        Direction::ClientToServer,
        2,
        &stream[..read - lost],
        Lost::Bytes(lost as u64),
    );
    connection.push(&chunk(stream[read..].to_vec()));
    connection
}

const CONTENT_WRITE: &[u8] = b"/containerd.services.content.v1.Content/Write";

#[test]
fn bytes_lost_inside_a_data_payload_cost_that_body_only() {
    // The read ends 18 bytes before the second DATA frame does.
    let connection = read_cut(32_768, 4);
    assert_eq!(connection.table_resets(Direction::ClientToServer), 0);
    assert!(
        connection.errors().iter().any(|e| matches!(
            e,
            Http2Error::DataBytesLost {
                stream_id: 1,
                lost_bytes: 4,
                ..
            }
        )),
        "{:?}",
        connection.errors()
    );
    let exchanges = connection.finish();
    let write = exchanges
        .iter()
        .find(|e| e.stream_id == 1)
        .expect("stream 1");
    assert!(write.request.lossy);
    assert!(
        write.request.ended,
        "the cut frame was completed by the next read"
    );
    for id in [3, 5] {
        let next = exchanges
            .iter()
            .find(|e| e.stream_id == id)
            .expect("stream");
        assert!(!next.request.lossy);
        assert_eq!(
            next.path().map(str::as_bytes),
            Some(CONTENT_WRITE),
            "the HPACK table stayed in step"
        );
    }
}

#[test]
fn bytes_lost_past_a_data_payload_reset_the_table() {
    // The read takes the second DATA frame whole and 5 bytes of the next
    // HEADERS frame; 23 lost are the frame's last 18 and those 5.
    let connection = read_cut(32_786 + 5, 23);
    assert_eq!(connection.table_resets(Direction::ClientToServer), 1);
    let exchanges = connection.finish();
    let last = exchanges
        .iter()
        .find(|e| e.stream_id == 5)
        .expect("stream 5");
    assert_eq!(
        last.path(),
        None,
        "its index names an entry of a forgotten table"
    );
}

#[test]
fn a_senders_copy_taken_after_a_write_resolves_that_writes_own_blocks() {
    // Joined late: the sender's table already held the three entries of
    // `copied_table`. Its write refers to two of them and inserts
    // `x-new: 1` (a literal with incremental indexing, new name).
    let block = [
        0x83, // :method POST
        0xbe, // 62: content-type, the newest before the write
        0xc0, // 64: :path, the oldest
        0x40, 0x05, b'x', b'-', b'n', b'e', b'w', 0x01, b'1',
    ];
    assert_eq!(hpack::insertions(&block), Some(1));
    let mut after = copied_table();
    after.entries.push(TableEntry {
        field: Some((b"x-new".to_vec(), b"1".to_vec())),
        size: "x-new".len() + 1 + 32,
    });

    let mut connection = Http2Connection::default();
    connection.push(&chunk(headers_frame(1, &[0x83])));
    connection.push(&chunk(headers_frame(3, &block)));
    // The copy the sender's write carried: its table with the write's
    // insertion. That write's block is decoded again from the table before.
    connection
        .load_table(Direction::ClientToServer, TablePoint::AfterPushed, &after)
        .expect("loads");
    // The next block's 62 is the entry the write inserted.
    connection.push(&chunk(headers_frame(5, &[0x83, 0xbe])));
    let exchanges = connection.finish();
    let by_id = |id: u32| {
        exchanges
            .iter()
            .find(|e| e.stream_id == id)
            .expect("stream")
    };
    let request = &by_id(3).request;
    assert_eq!(by_id(3).path(), Some("/etcdserverpb.KV/Txn"));
    assert_eq!(
        request.header("content-type"),
        Some(("application/grpc", HeaderSource::Wire))
    );
    assert!(
        request
            .headers
            .as_ref()
            .expect("decoded")
            .unresolved
            .is_empty()
    );
    assert_eq!(
        by_id(5).request.header("x-new"),
        Some(("1", HeaderSource::Wire))
    );

    // Without the copy the write's references stay unresolved.
    let mut blind = Http2Connection::default();
    blind.push(&chunk(headers_frame(1, &[0x83])));
    blind.push(&chunk(headers_frame(3, &block)));
    let exchanges = blind.finish();
    let request = &exchanges
        .iter()
        .find(|e| e.stream_id == 3)
        .expect("stream")
        .request;
    assert_eq!(
        request.headers.as_ref().expect("decoded").unresolved.len(),
        2
    );

    // A block that resizes the table cannot be placed: left as it was.
    assert_eq!(hpack::insertions(&[0x3f, 0xe1, 0x1f, 0x83]), None);
}
