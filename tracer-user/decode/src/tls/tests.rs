use ring::aead;

use super::*;
use crate::testdata;

/// `testdata/tls13/tls13-session.txt` (written by `gen.go` there): a real
/// Go crypto/tls session's bytes on the wire and its traffic secrets.
struct Session {
    suite: u16,
    client_secret: Vec<u8>,
    server_secret: Vec<u8>,
    client_to_server: Vec<u8>,
    server_to_client: Vec<u8>,
    messages: Vec<Vec<u8>>,
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex"))
        .collect()
}

fn session() -> Session {
    let text = String::from_utf8(testdata::bytes("tls13/tls13-session.txt")).expect("text");
    let mut session = Session {
        suite: 0,
        client_secret: Vec::new(),
        server_secret: Vec::new(),
        client_to_server: Vec::new(),
        server_to_client: Vec::new(),
        messages: Vec::new(),
    };
    for line in text.lines() {
        let (name, value) = line.split_once(' ').expect("name value");
        match name {
            "suite" => session.suite = u16::from_str_radix(value, 16).expect("suite"),
            "client_traffic_secret_0" => session.client_secret = unhex(value),
            "server_traffic_secret_0" => session.server_secret = unhex(value),
            "client_to_server" => session.client_to_server = unhex(value),
            "server_to_client" => session.server_to_client = unhex(value),
            "message" => session.messages.push(unhex(value)),
            // The handshake secret is for tracer-user's tests.
            "client_handshake_traffic_secret" => {}
            other => panic!("unknown line {other}"),
        }
    }
    session
}

fn concat(pieces: &[Plaintext]) -> Vec<u8> {
    pieces
        .iter()
        .flat_map(|piece| piece.bytes.clone())
        .collect()
}

fn reversed(message: &[u8]) -> Vec<u8> {
    message.iter().rev().copied().collect()
}

/// The client's records: (start, total length, the plaintext it holds),
/// opened one at a time.
fn client_records(session: &Session) -> Vec<(usize, usize, Vec<u8>)> {
    let bytes = &session.client_to_server;
    let keys = TrafficKeys::new(session.suite, &session.client_secret).unwrap();
    let mut reader = TlsReader::new(keys, 0, false);
    let mut found = Vec::new();
    let mut at = 0;
    while at + HEADER <= bytes.len() {
        let total = HEADER + usize::from(u16::from_be_bytes([bytes[at + 3], bytes[at + 4]]));
        let plaintext = concat(&reader.push(bytes[at..at + total].to_vec(), false));
        found.push((at, total, plaintext));
        at += total;
    }
    found
}

#[test]
fn a_go_session_decrypts_in_both_directions_from_its_first_bytes() {
    let session = session();
    // The handshake's own records (sealed with the handshake secrets) come
    // first: a reader whose number is a lower bound skips them.
    let keys = TrafficKeys::new(session.suite, &session.client_secret).unwrap();
    let mut reader = TlsReader::new(keys, 0, false);
    let pieces = reader.push(session.client_to_server.to_vec(), false);
    assert!(concat(&pieces) == session.messages.concat());
    assert!(pieces.iter().all(|piece| !piece.gap_after));
    // Go starts with small records and grows them (dynamic record sizing).
    assert!(reader.stats().records >= 4, "{:?}", reader.stats());
    assert_eq!(reader.stats().skipped, 1, "the client's Finished");

    let keys = TrafficKeys::new(session.suite, &session.server_secret).unwrap();
    let mut reader = TlsReader::new(keys, 0, false);
    let pieces = reader.push(session.server_to_client.to_vec(), false);
    let answers: Vec<u8> = session.messages.iter().flat_map(|m| reversed(m)).collect();
    // The session tickets are records too, of handshake content: nothing out.
    assert!(concat(&pieces) == answers);
    assert_eq!(reader.stats().undecryptable, 0);
}

#[test]
fn bytes_split_anywhere_decrypt_the_same() {
    let session = session();
    for size in [1, 5, 7, 1000, 4096] {
        let keys = TrafficKeys::new(session.suite, &session.client_secret).unwrap();
        let mut reader = TlsReader::new(keys, 0, false);
        let pieces: Vec<Plaintext> = session
            .client_to_server
            .chunks(size)
            .flat_map(|chunk| reader.push(chunk.to_vec(), false))
            .collect();
        assert!(
            concat(&pieces) == session.messages.concat(),
            "chunks of {size}"
        );
    }
}

#[test]
fn a_cut_capture_resumes_at_the_next_record_and_says_where_bytes_are_missing() {
    let session = session();
    let records = client_records(&session);
    let cut_in = records.len() - 3;
    let (start, _, _) = records[cut_in];
    let before: Vec<u8> = records[..cut_in].iter().flat_map(|r| r.2.clone()).collect();
    let after: Vec<u8> = records[cut_in + 1..]
        .iter()
        .flat_map(|r| r.2.clone())
        .collect();
    let keys = TrafficKeys::new(session.suite, &session.client_secret).unwrap();
    let mut reader = TlsReader::new(keys, 0, false);
    // The capture keeps the stream up to 10 bytes into a record, then
    // loses the rest of that write.
    let first = reader.push(session.client_to_server[..start + 10].to_vec(), true);
    assert!(concat(&first) == before);
    assert!(first.last().unwrap().gap_after);
    // The next capture starts elsewhere in that record.
    let rest = reader.push(session.client_to_server[start + 30..].to_vec(), false);
    assert!(concat(&rest) == after, "resumed at the next record");
    assert!(rest.iter().all(|piece| !piece.gap_after));
    assert_eq!(reader.stats().resyncs, 1);
}

#[test]
fn an_exact_number_that_is_wrong_is_a_gap_and_the_reader_recovers() {
    let session = session();
    let records = client_records(&session);
    // Claim the last-but-one record is number 0 exactly: it is not.
    let (start, _, _) = records[records.len() - 2];
    let keys = TrafficKeys::new(session.suite, &session.client_secret).unwrap();
    let mut reader = TlsReader::new(keys, 0, true);
    let pieces = reader.push(session.client_to_server[start..].to_vec(), false);
    assert_eq!(reader.stats().undecryptable, 1);
    assert_eq!(pieces.len(), 2);
    assert!(pieces[0].gap_after && pieces[0].bytes.is_empty());
    assert!(
        pieces[1].bytes == session.messages[2],
        "the next record opens"
    );
}

#[test]
fn bad_secrets_are_refused_with_a_reason() {
    assert_eq!(
        TrafficKeys::new(0xc02f, &[0; 32]).unwrap_err(),
        TlsError::UnknownSuite(0xc02f)
    );
    assert_eq!(
        TrafficKeys::new(0x1302, &[0; 32]).unwrap_err(),
        TlsError::SecretLength { got: 32, want: 48 }
    );
    let keys = TrafficKeys::new(0x1301, &[7; 32]).unwrap();
    assert!(!format!("{keys:?}").contains('7'), "Debug shows no secret");
}

/// Seals `content` of type `kind` as record number `seq` would be.
fn seal(keys: &TrafficKeys, seq: u64, content: &[u8], kind: u8) -> Vec<u8> {
    let mut payload = content.to_vec();
    payload.push(kind);
    let len = (payload.len() + TAG) as u16;
    let mut record = vec![APPLICATION_DATA, 3, 3];
    record.extend_from_slice(&len.to_be_bytes());
    let mut nonce = keys.iv;
    for (byte, seq_byte) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *byte ^= seq_byte;
    }
    keys.key
        .seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(&record[..]),
            &mut payload,
        )
        .unwrap();
    record.extend_from_slice(&payload);
    record
}

#[test]
fn every_suite_and_a_key_update_are_followed() {
    for (suite, secret_len) in [(0x1301, 32), (0x1302, 48), (0x1303, 32)] {
        let secret = vec![0x42; secret_len];
        let sender = TrafficKeys::new(suite, &secret).unwrap();
        let next = sender.updated().unwrap();
        let mut stream = seal(&sender, 5, b"before", APPLICATION_DATA);
        // KeyUpdate(update_not_requested): type 24, length 1, one byte 0.
        stream.extend(seal(&sender, 6, &[KEY_UPDATE, 0, 0, 1, 0], HANDSHAKE));
        stream.extend(seal(&next, 0, b"after", APPLICATION_DATA));
        stream.extend(seal(&next, 1, b"!", APPLICATION_DATA));
        let mut reader = TlsReader::new(TrafficKeys::new(suite, &secret).unwrap(), 5, true);
        let pieces = reader.push(stream.to_vec(), false);
        assert_eq!(concat(&pieces), b"beforeafter!", "suite {suite:#x}");
        assert_eq!(reader.stats().key_updates, 1);
    }
}

#[test]
fn a_gap_wider_than_the_search_window_leaves_the_reader_adrift_and_a_smaller_one_does_not() {
    let keys = || TrafficKeys::new(0x1301, &[0x42; 32]).unwrap();
    let sender = keys();
    let records = |seqs: std::ops::Range<u64>| -> Vec<u8> {
        seqs.flat_map(|seq| seal(&sender, seq, b"watch event", APPLICATION_DATA))
            .collect()
    };
    // Records 0..10, then the capture loses 30 (within the window): the
    // reader finds its place again, at the record after the one whose
    // number it expected exactly.
    let mut reader = TlsReader::new(keys(), 0, true);
    let mut stream = records(0..10);
    stream.extend(records(40..50));
    let pieces = reader.push(stream, false);
    assert_eq!(concat(&pieces).len(), 19 * b"watch event".len());
    assert!(!reader.adrift());
    // Records 0..10, then a loss of 1000: nothing later opens, and once
    // more records failed than a new secret could find sealed before it,
    // the reader says so.
    let mut reader = TlsReader::new(keys(), 0, true);
    let mut stream = records(0..10);
    stream.extend(records(1010..1010 + u64::from(ADRIFT_RECORDS) - 1));
    let pieces = reader.push(stream, false);
    assert_eq!(concat(&pieces).len(), 10 * b"watch event".len());
    assert!(!reader.adrift(), "one record short of adrift");
    reader.push(records(2000..2001), false);
    assert!(reader.adrift());
    assert_eq!(reader.stats().undecryptable, 1);
}
