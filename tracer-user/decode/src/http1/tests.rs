//! HTTP/1.1 on recorded connections between Python's http.client / raw
//! sockets / curl and Python's http.server (testdata/README.md).

use super::framing::{self, StartLine};
use super::*;
use crate::kube::StoredObject;
use crate::rest::Verb;
use crate::testdata;
use crate::watch::EventType;
use crate::{Chunk, Direction};

const RECORDINGS: [&str; 6] = [
    "http1-keepalive.rec",
    "http1-watch.rec",
    "http1-pipelined.rec",
    "http1-upgrade.rec",
    "http1-close.rec",
    "http1-expect.rec",
];
const POD_PATH: &str = "/api/v1/namespaces/default/pods/web-7d4b9";

struct Decoded {
    exchanges: Vec<Exchange>,
    errors: Vec<Http1Error>,
    watch: Vec<WatchUpdate>,
    bytes_after_switch: usize,
}

fn decode(chunks: &[Chunk]) -> Decoded {
    let mut connection = Http1Connection::default();
    let mut exchanges = Vec::new();
    for chunk in chunks {
        connection.push(chunk);
        exchanges.extend(connection.take_exchanges());
    }
    let errors = connection.errors().to_vec();
    let watch = connection.take_watch_events();
    let bytes_after_switch = connection.bytes_after_switch();
    exchanges.extend(connection.finish());
    Decoded {
        exchanges,
        errors,
        watch,
        bytes_after_switch,
    }
}

/// (method, target, status) of each exchange, for comparing pairings.
fn summary(exchanges: &[Exchange]) -> Vec<(Option<&str>, Option<&str>, Option<u16>)> {
    exchanges
        .iter()
        .map(|e| (e.method(), e.target(), e.status()))
        .collect()
}

#[test]
fn keepalive_connection_pairs_every_exchange() {
    let decoded = decode(&testdata::chunks("http1-keepalive.rec"));
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    let pod = testdata::bytes("pod-web-7d4b9.json");
    let pod = pod.trim_ascii();
    assert_eq!(
        summary(&decoded.exchanges),
        [
            (Some("GET"), Some(POD_PATH), Some(200)),
            (
                Some("POST"),
                Some("/api/v1/namespaces/default/pods"),
                Some(201)
            ),
            (
                Some("POST"),
                Some("/api/v1/namespaces/default/pods/web-7d4b9/binding"),
                Some(201)
            ),
            (Some("HEAD"), Some(POD_PATH), Some(200)),
            (Some("GET"), Some(POD_PATH), Some(304)),
            (Some("DELETE"), Some(POD_PATH), Some(204)),
            (Some("GET"), Some("/trailers"), Some(200)),
        ]
    );
    assert!(decoded.exchanges.iter().all(|e| e.complete && !e.lossy()));
    let ids: Vec<u64> = decoded.exchanges.iter().map(|e| e.id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6]);

    let [get, create, binding, head, not_modified, delete, trailers] = &decoded.exchanges[..]
    else {
        unreachable!("seven exchanges checked above");
    };
    let body = |e: &Exchange| e.response.as_ref().map(|r| r.half.body.clone());
    assert_eq!(body(get).as_deref(), Some(pod));
    let get_rest = get.rest().expect("request");
    assert_eq!(get_rest.verb, Verb::Get);
    assert_eq!(
        get_rest.resource.and_then(|r| r.name).as_deref(),
        Some("web-7d4b9")
    );
    assert_eq!(
        get_rest.user_agent.as_deref(),
        Some("kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b")
    );

    let create_request = create.request.as_ref().expect("request");
    assert_eq!(
        create_request.half.framing,
        Framing::Length(pod.len() as u64)
    );
    assert_eq!(create_request.half.body, pod);
    assert_eq!(create.rest().map(|r| r.verb), Some(Verb::Create));

    // http.client's encode_chunked: one chunk per piece of the iterator.
    let binding_request = binding.request.as_ref().expect("request");
    assert_eq!(binding_request.half.framing, Framing::Chunked);
    assert!(
        binding_request
            .half
            .body
            .starts_with(b"{\"kind\":\"Binding\"")
    );
    assert!(binding_request.half.body.ends_with(b"\"node-1\"}}"));
    assert_eq!(
        binding
            .rest()
            .and_then(|r| r.resource)
            .and_then(|r| r.subresource)
            .as_deref(),
        Some("binding")
    );

    // HEAD: Content-Length announces the GET body, none follows.
    let head_response = head.response.as_ref().expect("response");
    assert_eq!(head_response.half.framing, Framing::Empty);
    assert_eq!(
        head_response.half.headers.get("content-length"),
        Some("395")
    );
    assert!(head_response.half.body.is_empty());
    assert_eq!(
        not_modified.response.as_ref().map(|r| r.half.framing),
        Some(Framing::Empty)
    );
    assert_eq!(
        delete.response.as_ref().map(|r| r.half.framing),
        Some(Framing::Empty)
    );

    let trailers_response = trailers.response.as_ref().expect("response");
    assert_eq!(trailers_response.half.body, b"hello, world");
    assert_eq!(
        trailers_response
            .half
            .trailers
            .as_ref()
            .and_then(|t| t.get("x-checksum")),
        Some("42")
    );

    // Timestamps: the request's head chunk, then its response's chunks.
    let request = create.request.as_ref().expect("request");
    let response = create.response.as_ref().expect("response");
    assert!(request.half.first_ts_ns < request.half.last_ts_ns);
    assert!(request.half.last_ts_ns < response.half.first_ts_ns);
    assert!(response.half.first_ts_ns < response.half.last_ts_ns);
}

#[test]
fn authorization_is_never_kept() {
    let mut redacted = Vec::new();
    for name in RECORDINGS {
        let decoded = decode(&testdata::chunks(name));
        let text = format!("{:?}", decoded.exchanges);
        assert!(!text.contains("s3cr3t"), "{name}: {text}");
        assert!(!text.contains("czNjcjN0"), "{name}: {text}");
        for exchange in &decoded.exchanges {
            for half in [
                exchange.request.as_ref().map(|r| &r.half),
                exchange.response.as_ref().map(|r| &r.half),
            ]
            .into_iter()
            .flatten()
            {
                redacted.extend(half.headers.redacted.iter().cloned());
            }
        }
    }
    for name in [
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
    ] {
        assert!(redacted.iter().any(|r| r == name), "{name}: {redacted:?}");
    }
}

#[test]
fn chunked_watch_response() {
    let decoded = decode(&testdata::chunks("http1-watch.rec"));
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    let kinds: Vec<_> = decoded
        .watch
        .iter()
        .map(|u| (u.exchange_id, u.event.event_type.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (0, EventType::Added),
            (0, EventType::Modified),
            (0, EventType::Deleted)
        ]
    );
    for update in &decoded.watch {
        let Ok(StoredObject::Pod(pod)) = &update.event.object else {
            panic!("not a Pod: {update:?}");
        };
        assert_eq!(pod.name.as_deref(), Some("web-7d4b9"));
        assert_eq!(
            pod.uid.as_deref(),
            Some("3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71")
        );
    }
    // Events carry the time of the chunk that completed them.
    assert!(decoded.watch.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));

    let watch = &decoded.exchanges[0];
    assert!(watch.complete);
    assert!(watch.rest().is_some_and(|r| r.is_watch()));
    let response = watch.response.as_ref().expect("response");
    assert_eq!(response.watch, Some(crate::watch::WatchFormat::Json));
    assert_eq!(response.half.framing, Framing::Chunked);
    // The body went to the watch decoder, not into memory.
    assert!(response.half.body.is_empty());
    assert!(response.half.body_len > 1000);
    // Keep-alive after the chunked body: the next GET is paired.
    assert_eq!(
        summary(&decoded.exchanges[1..]),
        [(Some("GET"), Some(POD_PATH), Some(200))]
    );
}

#[test]
fn pipelined_requests_pair_in_order() {
    let chunks = testdata::chunks("http1-pipelined.rec");
    // All four requests were one write.
    assert_eq!(
        chunks
            .iter()
            .filter(|c| c.direction == Direction::ClientToServer)
            .count(),
        1
    );
    let decoded = decode(&chunks);
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    assert_eq!(
        summary(&decoded.exchanges),
        [
            (Some("GET"), Some(POD_PATH), Some(200)),
            (Some("HEAD"), Some(POD_PATH), Some(200)),
            (Some("GET"), Some(POD_PATH), Some(304)),
            (Some("DELETE"), Some(POD_PATH), Some(204)),
        ]
    );
    assert!(decoded.exchanges.iter().all(|e| e.complete));
    let bodies: Vec<usize> = decoded
        .exchanges
        .iter()
        .filter_map(|e| e.response.as_ref().map(|r| r.half.body.len()))
        .collect();
    assert_eq!(bodies, [395, 0, 0, 0]);
}

#[test]
fn starts_mid_connection() {
    let chunks = testdata::chunks("http1-keepalive.rec");
    let full = decode(&chunks);
    // Capture starts in the middle of the POST's body (client) and at the
    // POST's response head (server): the first GET is gone.
    let mut late: Vec<Chunk> = chunks[3..].to_vec();
    let half = late[0].bytes.len() / 2;
    late[0].bytes.drain(..half);
    let decoded = decode(&late);
    assert!(
        decoded.errors.iter().all(Http1Error::can_continue),
        "{:?}",
        decoded.errors
    );
    assert!(
        decoded
            .errors
            .iter()
            .any(|e| matches!(e, Http1Error::Resynchronised { direction: Direction::ClientToServer, skipped_bytes } if *skipped_bytes == late[0].bytes.len())),
        "{:?}",
        decoded.errors
    );
    // The POST's response has no request; every later exchange is as in
    // the full decode.
    let first = &decoded.exchanges[0];
    assert_eq!((first.request.as_ref(), first.status()), (None, Some(201)));
    assert!(!first.complete);
    assert_eq!(
        summary(&decoded.exchanges[1..]),
        summary(&full.exchanges[2..])
    );
    for (late, full) in decoded.exchanges[1..].iter().zip(&full.exchanges[2..]) {
        assert_eq!(late.request, full.request);
        assert_eq!(late.response, full.response);
    }
}

#[test]
fn lost_bytes_resynchronise() {
    let chunks = testdata::chunks("http1-keepalive.rec");
    let full = decode(&chunks);
    let mut lossy = chunks.clone();
    // The POST's response body (server), then the binding request's head
    // (client), each kept to a prefix.
    for (i, keep) in [(5, 100), (6, 80)] {
        lossy[i].bytes.truncate(keep);
        lossy[i].truncated = true;
    }
    let decoded = decode(&lossy);
    let lost: Vec<_> = decoded
        .errors
        .iter()
        .filter(|e| matches!(e, Http1Error::BytesLost { .. }))
        .collect();
    assert_eq!(lost.len(), 2, "{:?}", decoded.errors);
    assert_eq!(
        summary(&decoded.exchanges),
        summary(&full.exchanges),
        "pairing survives both losses"
    );
    let create = &decoded.exchanges[1];
    let response = create.response.as_ref().expect("response");
    assert!(response.half.lossy && !response.half.ended);
    assert_eq!(response.half.body.len(), 100);
    assert!(!create.complete);
    // The binding request's line arrived whole: its exchange keeps it.
    let binding = &decoded.exchanges[2];
    assert!(binding.head_lost && binding.lossy());
    assert_eq!(binding.status(), Some(201));
    // Everything after the losses decodes as without them.
    for (lossy, full) in decoded.exchanges[3..].iter().zip(&full.exchanges[3..]) {
        assert_eq!(lossy, full);
    }
}

#[test]
fn response_without_length_ends_at_close() {
    let chunks = testdata::chunks("http1-close.rec");
    let mut connection = Http1Connection::default();
    for chunk in &chunks {
        connection.push(chunk);
    }
    // Nothing says the body is over until the connection is.
    assert!(connection.take_exchanges().is_empty());
    let exchanges = connection.finish();
    assert_eq!(exchanges.len(), 1);
    let response = exchanges[0].response.as_ref().expect("response");
    assert_eq!(response.half.framing, Framing::UntilClose);
    assert_eq!(
        response.half.body,
        b"until the connection closes\nsecond write\n"
    );
    assert!(exchanges[0].complete);
}

#[test]
fn expect_continue_interim_response() {
    let decoded = decode(&testdata::chunks("http1-expect.rec"));
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    assert_eq!(decoded.exchanges.len(), 1);
    let put = &decoded.exchanges[0];
    assert_eq!(put.informational, [100]);
    assert_eq!(put.status(), Some(201));
    assert_eq!(
        put.request.as_ref().map(|r| r.half.body.len()),
        Some(testdata::bytes("pod-web-7d4b9.json").len())
    );
    assert!(put.complete);
    assert_eq!(put.rest().map(|r| r.verb), Some(Verb::Update));
}

#[test]
fn upgrade_stops_decoding() {
    let decoded = decode(&testdata::chunks("http1-upgrade.rec"));
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    // The WebSocket frames echo an HTTP request line: not decoded.
    assert_eq!(decoded.exchanges.len(), 1, "{:#?}", decoded.exchanges);
    let exec = &decoded.exchanges[0];
    assert_eq!(exec.status(), Some(101));
    assert_eq!(exec.upgrade, Some(Upgrade::Protocol("websocket".into())));
    assert!(exec.complete);
    assert_eq!(
        exec.rest()
            .and_then(|r| r.resource)
            .and_then(|r| r.subresource)
            .as_deref(),
        Some("exec")
    );
    assert_eq!(decoded.bytes_after_switch, 2 * 26);
}

#[test]
fn any_read_boundaries_decode_the_same() {
    for name in RECORDINGS {
        let chunks = testdata::chunks(name);
        let whole = decode(&chunks);
        for size in [1, 7, 100] {
            let recut: Vec<Chunk> = chunks
                .iter()
                .flat_map(|c| {
                    c.bytes.chunks(size).map(|piece| Chunk {
                        bytes: piece.to_vec(),
                        ..c.clone()
                    })
                })
                .collect();
            let decoded = decode(&recut);
            assert_eq!(decoded.exchanges, whole.exchanges, "{name} in {size}s");
            assert_eq!(decoded.errors, whole.errors, "{name} in {size}s");
            assert_eq!(decoded.watch.len(), whole.watch.len(), "{name} in {size}s");
        }
    }
}

#[test]
fn bodies_over_the_limit_are_counted_not_kept() {
    let chunks = testdata::chunks("http1-keepalive.rec");
    let mut connection = Http1Connection::new(Limits {
        max_body_bytes: 10,
        ..Limits::default()
    });
    for chunk in &chunks {
        connection.push(chunk);
    }
    let exchanges = connection.finish();
    let get = exchanges[0].response.as_ref().expect("response");
    assert_eq!(get.half.body.len(), 10);
    assert_eq!(get.half.body_len, 395);
    assert!(exchanges.iter().all(|e| e.complete));
}

#[test]
fn start_line_search_needs_a_standard_method_and_version() {
    assert_eq!(
        framing::find_start_line(b"ET / HTTP/1.1\r\nGET /x HTTP/1.1\r\n", true),
        StartLine::At(15)
    );
    assert_eq!(
        framing::find_start_line(b"}\nPOS", true),
        StartLine::MaybeAt(2)
    );
    assert_eq!(
        framing::find_start_line(b"body\nGET / HTTP/2\r\n", true),
        StartLine::None
    );
    assert_eq!(
        framing::find_start_line(b"xx\r\nHTTP/1.1 200 OK\r\n", false),
        StartLine::At(4)
    );
    assert_eq!(
        framing::find_start_line(b"HTTP/1.1 20", false),
        StartLine::MaybeAt(0)
    );
    assert_eq!(
        framing::find_start_line(b"HTTP/1.1 2000\r\n", false),
        StartLine::None
    );
}

#[test]
fn conflicting_lengths_cut_the_message() {
    let chunk = |direction, bytes: &[u8]| Chunk {
        direction,
        ts_ns: 1,
        bytes: bytes.to_vec(),
        truncated: false,
    };
    let mut connection = Http1Connection::default();
    connection.push(&chunk(
        Direction::ClientToServer,
        b"POST /a HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd\r\nGET /b HTTP/1.1\r\n\r\n",
    ));
    connection.push(&chunk(
        Direction::ClientToServer,
        b"PUT /c HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxx\nGET /d HTTP/1.1\r\n\r\n",
    ));
    let errors = connection.errors().to_vec();
    assert!(
        matches!(
            &errors[..],
            [
                Http1Error::Framing { .. },
                Http1Error::Resynchronised { .. },
                Http1Error::Framing { .. },
                Http1Error::Resynchronised { .. },
            ]
        ),
        "{errors:?}"
    );
    let exchanges = connection.finish();
    assert_eq!(
        summary(&exchanges),
        [
            (Some("POST"), Some("/a"), None),
            (Some("GET"), Some("/b"), None),
            (Some("PUT"), Some("/c"), None),
            (Some("GET"), Some("/d"), None),
        ]
    );
    assert!(exchanges[0].request.as_ref().is_some_and(|r| r.half.lossy));
}

#[test]
fn oversized_head_is_dropped_and_the_next_request_found() {
    let limits = Limits {
        max_head_bytes: 1024,
        ..Limits::default()
    };
    let mut connection = Http1Connection::new(limits);
    let mut bytes = b"GET /big HTTP/1.1\r\n".to_vec();
    for i in 0..200 {
        bytes.extend_from_slice(format!("x-filler-{i}: {}\r\n", "v".repeat(20)).as_bytes());
    }
    bytes.extend_from_slice(b"\r\nGET /next HTTP/1.1\r\n\r\n");
    for piece in bytes.chunks(50) {
        connection.push(&Chunk {
            direction: Direction::ClientToServer,
            ts_ns: 1,
            bytes: piece.to_vec(),
            truncated: false,
        });
        assert!(connection.buffered_bytes() <= limits.max_head_bytes + 50);
    }
    assert!(
        connection.errors().iter().any(|e| matches!(
            e,
            Http1Error::Head {
                error: framing::HeadError::TooLarge { .. },
                ..
            }
        )),
        "{:?}",
        connection.errors()
    );
    let exchanges = connection.finish();
    // The big request keeps its line; the next one is found after it.
    assert_eq!(
        summary(&exchanges),
        [
            (Some("GET"), Some("/big"), None),
            (Some("GET"), Some("/next"), None)
        ]
    );
    assert!(exchanges[0].head_lost);
}
