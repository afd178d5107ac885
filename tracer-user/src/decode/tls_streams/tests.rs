use super::*;
use crate::capture::ProcessIds;

const TGID: u32 = 42;
const SECOND: u64 = 1_000_000_000;

/// The real Go TLS 1.3 session of `tracer-decode`'s tests: the client's
/// bytes on the wire, its application secret, the suite, the messages.
struct Session {
    suite: u16,
    secret: Vec<u8>,
    handshake_secret: Vec<u8>,
    client_to_server: Vec<u8>,
    messages: Vec<u8>,
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
        .collect()
}

fn session() -> Session {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/decode/testdata/tls13/tls13-session.txt"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut session = Session {
        suite: 0,
        secret: Vec::new(),
        handshake_secret: Vec::new(),
        client_to_server: Vec::new(),
        messages: Vec::new(),
    };
    for line in text.lines() {
        let (name, value) = line.split_once(' ').unwrap();
        match name {
            "suite" => session.suite = u16::from_str_radix(value, 16).unwrap(),
            "client_traffic_secret_0" => session.secret = unhex(value),
            "client_handshake_traffic_secret" => session.handshake_secret = unhex(value),
            "client_to_server" => session.client_to_server = unhex(value),
            "message" => session.messages.extend(unhex(value)),
            _ => {}
        }
    }
    session
}

fn conn() -> ConnKey {
    ConnKey {
        tgid: TGID,
        conn_id: 7,
    }
}

fn data(ts_ns: u64, bytes: &[u8], tls_plaintext: bool) -> DataRecord {
    DataRecord {
        ids: ProcessIds {
            ts_ns,
            tgid: TGID,
            tid: TGID,
        },
        conn: conn(),
        fd: 9,
        syscall: IoSyscall::Write,
        direction: Direction::Egress,
        fd_kind: FdKind::Socket,
        len: bytes.len() as u64,
        enter_ts_ns: ts_ns,
        data: bytes.to_vec(),
        truncated: false,
        tls_plaintext,
    }
}

fn key(session: &Session, seq: u64) -> TlsKeyRecord {
    TlsKeyRecord {
        ids: ProcessIds {
            ts_ns: 5,
            tgid: TGID,
            tid: TGID,
        },
        conn: conn(),
        fd: 9,
        direction: Direction::Egress,
        seq,
        suite: session.suite,
        secret: session.secret.clone(),
    }
}

/// The client's bytes: its ClientHello (one plaintext record), and the
/// rest.
fn split_hello(session: &Session) -> (&[u8], &[u8]) {
    let bytes = &session.client_to_server;
    let hello = 5 + usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
    bytes.split_at(hello)
}

fn plaintext(records: &[DataRecord]) -> Vec<u8> {
    assert!(records.iter().all(|record| record.tls_plaintext));
    records
        .iter()
        .flat_map(|record| record.data.clone())
        .collect()
}

/// The server's side of the session: what it reads.
fn read(record: DataRecord) -> DataRecord {
    DataRecord {
        syscall: IoSyscall::Read,
        direction: Direction::Ingress,
        ..record
    }
}

#[test]
fn a_secret_from_the_handshake_reads_what_came_before_it() {
    let session = session();
    let mut streams = TlsStreams::default();
    // The whole session is read before Go installs the secret.
    for (at, chunk) in session.client_to_server.chunks(1000).enumerate() {
        let out = streams.decrypt(read(data(at as u64, chunk, false)));
        assert!(out.is_err(), "nothing to decrypt with yet");
    }
    let mut secret = key(&session, 0);
    secret.direction = Direction::Ingress;
    let released = streams.on_key(&secret);
    assert!(plaintext(&released) == session.messages);
    assert_eq!(streams.stats().undecryptable, 0);
    assert_eq!(streams.secrets_missed, 0);
    assert!(streams.control.is_empty());
}

/// A process that connected while podtrace was attaching its probes:
/// the handshake is seen, its secrets are not. Its first sealed record
/// written says so, and the per-call probes are asked for at once
/// (holding the connection until 64 KiB had passed lost every request
/// a kubelet made in its first seconds).
#[test]
fn a_handshake_whose_secrets_were_missed_asks_for_the_per_call_probes() {
    let session = session();
    let mut streams = TlsStreams::default();
    let (hello, rest) = split_hello(&session);
    assert!(streams.decrypt(data(1, hello, false)).is_err());
    // The server's reply, read: held, as Go reads ahead of its secrets.
    assert!(
        streams
            .decrypt(read(data(2, &[22, 3, 3, 0, 1, 2], false)))
            .is_err()
    );
    assert!(streams.control.is_empty());
    assert!(streams.decrypt(data(3, rest, false)).is_err());
    assert_eq!(streams.secrets_missed, 1);
    assert_eq!(
        std::mem::take(&mut streams.control),
        [CaptureControl::TlsProbes {
            tgid: TGID,
            needed: true
        }]
    );
    // Quiet past the probes' idle time, it holds them as a connection
    // older than podtrace does, while it is not keyed.
    streams.check_idle(3 + TLS_CALLS_IDLE_NS + 1);
    assert!(streams.control.is_empty(), "{:?}", streams.control);
    // Neither direction is held any more: a secret read at a probe hit
    // decrypts what follows it.
    assert!(streams.on_key(&key(&session, 1)).is_empty());
    assert!(
        !streams
            .held
            .values()
            .any(|held| matches!(held, Held::Tls(_)))
    );
}

/// A client whose probes were attached between Go installing the
/// server's application secret (what it reads) and its own: its writes
/// are keyed, its reads would stay held. Its first application data
/// written says so, for a client only (a server writes before it has
/// the client's secret).
#[test]
fn a_client_writing_application_data_without_its_read_secret_missed_it() {
    let session = session();
    for client in [true, false] {
        let mut streams = TlsStreams::default();
        if client {
            streams.on_connected(conn());
        }
        // The server's handshake, read and held.
        assert!(
            streams
                .decrypt(read(data(1, &[22, 3, 3, 0, 1, 2], false)))
                .is_err()
        );
        let (hello, rest) = split_hello(&session);
        assert!(streams.decrypt(data(2, hello, false)).is_err());
        assert!(streams.on_key(&key(&session, 0)).is_empty());
        let opened = streams.decrypt(data(3, rest, false)).unwrap();
        assert!(plaintext(&opened) == session.messages);
        let ingress = streams.held.get(&(conn(), Direction::Ingress));
        if client {
            assert_eq!(streams.secrets_missed, 1);
            assert_eq!(streams.missed, [conn()]);
            assert!(matches!(ingress, Some(Held::Nothing)));
            assert_eq!(
                streams.control,
                [CaptureControl::TlsProbes {
                    tgid: TGID,
                    needed: true
                }]
            );
        } else {
            assert_eq!(streams.secrets_missed, 0);
            assert!(matches!(ingress, Some(Held::Tls(_))));
            assert!(streams.control.is_empty());
        }
    }
}

/// Go before 1.21: the handshake secret comes first, through the same
/// function and also numbered from 0; it opens the client's Finished,
/// not the application data after it; then the application secret.
#[test]
fn a_handshake_secret_before_the_application_secret_loses_nothing() {
    let session = session();
    let mut streams = TlsStreams::default();
    // The ClientHello (a plaintext record), then the handshake secret.
    let (hello, rest) = split_hello(&session);
    assert!(streams.decrypt(data(0, hello, false)).is_err());
    let mut handshake = key(&session, 0);
    handshake.secret = session.handshake_secret.clone();
    assert!(streams.on_key(&handshake).is_empty());
    for (at, chunk) in rest.chunks(1000).enumerate() {
        let out = streams.decrypt(data(at as u64, chunk, false)).unwrap();
        assert!(out.is_empty(), "nothing delivered, not even a gap");
    }
    let released = streams.on_key(&key(&session, 0));
    assert!(released.iter().all(|record| !record.truncated));
    assert!(plaintext(&released) == session.messages);
    assert_eq!(streams.stats().undecryptable, 0);
}

#[test]
fn a_secret_read_at_a_probe_hit_does_not_read_what_came_before_it() {
    let session = session();
    let mut streams = TlsStreams::default();
    assert!(
        streams
            .decrypt(data(1, &session.client_to_server, false))
            .is_err()
    );
    // Record 1 on: what came before was delivered in plaintext.
    assert!(streams.on_key(&key(&session, 1)).is_empty());
}

#[test]
fn ciphertext_after_the_secret_is_decrypted_as_it_comes() {
    let session = session();
    let mut streams = TlsStreams::default();
    assert!(streams.on_key(&key(&session, 0)).is_empty());
    let records: Vec<DataRecord> = session
        .client_to_server
        .chunks(777)
        .flat_map(|chunk| streams.decrypt(data(1, chunk, false)).unwrap())
        .collect();
    assert!(plaintext(&records) == session.messages);
    streams.on_closed(&conn());
    assert!(streams.decrypt(data(2, b"after close", false)).is_err());
    assert!(streams.stats().application_records >= 4);
}

/// A connection older than podtrace that talked through the probes but
/// was not keyed yet (its HPACK tables not copied) keeps them attached
/// while quiet: a burst after a quiet spell would lose its first
/// messages while they came back (found live: the kubelet's status
/// updates of a burst of Pods after an agent restart).
#[test]
fn a_direction_not_keyed_yet_keeps_the_per_call_probes_while_quiet() {
    let mut streams = TlsStreams::default();
    // A connection podtrace saw made does not hold them.
    assert!(streams.decrypt(data(SECOND, b"plaintext", true)).is_err());
    streams.check_idle(SECOND + TLS_CALLS_IDLE_NS + 1);
    assert_eq!(
        std::mem::take(&mut streams.control).last(),
        Some(&CaptureControl::TlsProbes {
            tgid: TGID,
            needed: false
        })
    );
    // One open when podtrace started does, past the startup hold too.
    streams.on_open_at_start(conn(), 0);
    let talked = STARTUP_HOLD_NS - 5 * SECOND;
    assert!(streams.decrypt(data(talked, b"plaintext", true)).is_err());
    streams.control.clear();
    streams.check_idle(talked + TLS_CALLS_IDLE_NS + 1);
    assert!(streams.control.is_empty(), "{:?}", streams.control);
    // Quiet for longer than the hold: let go.
    streams.check_idle(talked + UNKEYED_HOLD_NS + 1);
    assert_eq!(
        streams.control,
        [CaptureControl::TlsProbes {
            tgid: TGID,
            needed: false
        }]
    );
}

/// Talks of a direction not keyed, and whether the probes are let go.
fn talk(streams: &mut TlsStreams, at: u64) {
    assert!(streams.decrypt(data(at, b"plaintext", true)).is_err());
    streams.control.clear();
}

fn released(streams: &mut TlsStreams, at: u64) -> bool {
    streams.check_idle(at);
    std::mem::take(&mut streams.control).contains(&CaptureControl::TlsProbes {
        tgid: TGID,
        needed: false,
    })
}

/// A direction older than podtrace that talks once a minute (an idle
/// etcd client's object count) but was not keyed at its first talk: that
/// holds the probes for the usual hold, which ends before it talks
/// again; its second holds them across the third, so that it is keyed,
/// instead of calling them back for half of every minute for good.
#[test]
fn a_direction_that_talks_once_a_minute_holds_the_probes_across_its_next_talk() {
    const MINUTE: u64 = 60 * SECOND;
    let mut streams = TlsStreams::default();
    streams.on_open_at_start(conn(), 0);
    let first = STARTUP_HOLD_NS - 5 * SECOND;
    talk(&mut streams, first);
    assert!(!released(&mut streams, STARTUP_HOLD_NS + 1));
    assert!(released(&mut streams, first + UNKEYED_HOLD_NS + 1));
    talk(&mut streams, first + MINUTE);
    assert!(!released(&mut streams, first + 2 * MINUTE - 1));
    // Past 5/4 of its minute of quiet, let go.
    assert!(released(&mut streams, first + MINUTE + MINUTE / 4 * 5 + 1));
    // A chatty direction is held the usual time after its last talk.
    let mut streams = TlsStreams::default();
    streams.on_open_at_start(conn(), 0);
    for at in 1..=10 {
        talk(&mut streams, first + at * SECOND);
    }
    assert!(released(
        &mut streams,
        first + 10 * SECOND + UNKEYED_HOLD_NS + 1
    ));
}

/// A direction that talks every 5 minutes (kube-apiserver's compactor's
/// etcd client) is not held once that is seen: no hold could reach its
/// next talk, and each held the probes on every call of the apiserver
/// and etcd for nothing. Its talk still calls them back, for the idle
/// time only.
#[test]
fn a_direction_too_quiet_for_any_hold_to_reach_is_not_held() {
    const MINUTE: u64 = 60 * SECOND;
    let mut streams = TlsStreams::default();
    streams.on_open_at_start(conn(), 0);
    let first = STARTUP_HOLD_NS - 5 * SECOND;
    talk(&mut streams, first);
    assert!(released(&mut streams, first + UNKEYED_HOLD_NS + 1));
    for n in 1..=3 {
        let at = first + n * 5 * MINUTE;
        talk(&mut streams, at);
        assert!(
            released(&mut streams, at + TLS_CALLS_IDLE_NS + 1),
            "talk {n}"
        );
    }
    // Nor is one silent through the startup hold, at its first talk.
    let mut streams = TlsStreams::default();
    streams.on_open_at_start(conn(), 0);
    let first = STARTUP_HOLD_NS + SECOND;
    talk(&mut streams, first);
    assert!(released(&mut streams, first + TLS_CALLS_IDLE_NS + 1));
    // Its second talk a minute later shows it can be held across its third.
    talk(&mut streams, first + MINUTE);
    assert!(!released(&mut streams, first + 2 * MINUTE));
}

/// A process found with sockets open at podtrace's start keeps its
/// per-call probes for the startup hold, so that its connections that
/// talk once a minute are keyed in its first minute, not one by one at
/// each of their first talks after it; the hold ends as soon as each of
/// those sockets is keyed.
#[test]
fn the_startup_hold_lasts_until_every_socket_open_at_start_is_keyed() {
    let made = ConnKey {
        tgid: TGID,
        conn_id: 8,
    };
    let plaintext_of_made = |at: u64| DataRecord {
        conn: made,
        ..data(at, b"plaintext", true)
    };
    let mut streams = TlsStreams::default();
    streams.on_open_at_start(conn(), 0);
    assert!(streams.decrypt(plaintext_of_made(SECOND)).is_err());
    streams.control.clear();
    assert!(!released(&mut streams, STARTUP_HOLD_NS - 1));
    assert!(released(&mut streams, STARTUP_HOLD_NS + 1));
    // Keyed both ways, it holds them no more.
    let mut streams = TlsStreams::default();
    streams.on_open_at_start(conn(), 0);
    assert!(streams.decrypt(plaintext_of_made(SECOND)).is_err());
    streams.control.clear();
    let session = session();
    streams.on_key(&key(&session, 0));
    assert!(!released(&mut streams, SECOND + TLS_CALLS_IDLE_NS + 1));
    streams.on_key(&TlsKeyRecord {
        direction: Direction::Ingress,
        ..key(&session, 0)
    });
    assert!(released(&mut streams, SECOND + TLS_CALLS_IDLE_NS + 2));
}

#[test]
fn the_per_call_probes_are_needed_while_they_deliver_plaintext_and_not_after() {
    let mut streams = TlsStreams::default();
    assert!(
        streams
            .decrypt(data(SECOND, b"plaintext from a probe", true))
            .is_err()
    );
    assert_eq!(
        std::mem::take(&mut streams.control),
        [CaptureControl::TlsProbes {
            tgid: TGID,
            needed: true
        }]
    );
    // Ciphertext of a keyed direction says nothing about them.
    streams.on_key(&key(&session(), 0));
    assert!(
        streams
            .decrypt(data(2 * SECOND, &[23, 3, 3, 0, 1], false))
            .is_ok()
    );
    assert!(streams.control.is_empty());
    // Quiet for longer than the idle time: not needed any more.
    assert!(
        streams
            .decrypt(data(SECOND + TLS_CALLS_IDLE_NS + 1, b"", false))
            .is_ok()
    );
    assert_eq!(
        std::mem::take(&mut streams.control),
        [CaptureControl::TlsProbes {
            tgid: TGID,
            needed: false
        }]
    );
    // A keep-alive's record on a direction neither keyed nor in its
    // handshake (a connection idle until now) does not bring them back.
    let mut ping = [0_u8; MAX_CONTROL_RECORD_BYTES];
    ping[..5].copy_from_slice(&[23, 3, 3, 0, 34]);
    let mut idle = data(5 * SECOND, &ping, false);
    idle.conn.conn_id = 8;
    assert!(streams.decrypt(idle).is_err());
    assert!(streams.control.is_empty());
    // A larger one (a request) does.
    let mut request = [0_u8; MAX_CONTROL_RECORD_BYTES + 1];
    request[..5].copy_from_slice(&[23, 3, 3, 0, 35]);
    let mut idle = data(5 * SECOND, &request, false);
    idle.conn.conn_id = 8;
    let conn = idle.conn;
    assert!(streams.decrypt(idle).is_err());
    assert_eq!(
        streams.control,
        [
            CaptureControl::Rekey {
                conn,
                fd: 9,
                direction: Direction::Egress
            },
            CaptureControl::TlsProbes {
                tgid: TGID,
                needed: true
            }
        ]
    );
}

/// The secret's record was lost (a full ring): capture copies the
/// direction's ciphertext, its probes skip it as keyed, and nothing
/// would read it ever (found in the benchmark's watch leg: the
/// apiserver's per-call TLS probes never left). Its secret is asked
/// again, once a second at most, with the probes that read it.
#[test]
fn ciphertext_no_reader_opens_asks_for_its_secret_again() {
    let mut streams = TlsStreams::default();
    let mut record = vec![0_u8; 100];
    record[..5].copy_from_slice(&[23, 3, 3, 0, 95]);
    assert!(streams.decrypt(data(SECOND, &record, false)).is_err());
    let rekey = CaptureControl::Rekey {
        conn: conn(),
        fd: 9,
        direction: Direction::Egress,
    };
    assert_eq!(
        std::mem::take(&mut streams.control),
        [
            rekey,
            CaptureControl::TlsProbes {
                tgid: TGID,
                needed: true
            }
        ]
    );
    assert!(streams.decrypt(data(SECOND + 1, &record, false)).is_err());
    assert!(streams.control.is_empty(), "asked a second ago");
    assert!(
        streams
            .decrypt(data(2 * SECOND + 1, &record, false))
            .is_err()
    );
    assert_eq!(streams.control, [rekey]);
    assert_eq!(streams.rekeys, 2);
    // The secret read again: a reader, nothing more asked.
    streams.control.clear();
    assert!(streams.on_key(&key(&session(), 0)).is_empty());
    assert!(streams.decrypt(data(3 * SECOND, &record, false)).is_ok());
    assert!(streams.control.is_empty(), "{:?}", streams.control);
}

/// A reader that lost more records than it can skip (a full ring in a
/// burst) opens nothing ever again: it goes, and the secret is asked
/// again.
#[test]
fn a_reader_adrift_is_given_up_and_its_secret_asked_again() {
    let session = session();
    let mut streams = TlsStreams::default();
    assert!(streams.on_key(&key(&session, 0)).is_empty());
    let opened = streams
        .decrypt(data(SECOND, &session.client_to_server, false))
        .unwrap();
    assert!(plaintext(&opened) == session.messages);
    // Records of a number far past the reader's: none opens.
    let mut lost = vec![0_u8; 64];
    lost[..5].copy_from_slice(&[23, 3, 3, 0, 59]);
    let mut at = 2 * SECOND;
    while streams.readers_adrift == 0 {
        assert!(at < 2 * SECOND + 1000, "never adrift");
        assert!(streams.decrypt(data(at, &lost, false)).is_ok());
        at += 1;
    }
    assert!(streams.readers.is_empty());
    assert_eq!(streams.rekeys, 1);
    assert!(streams.control.contains(&CaptureControl::Rekey {
        conn: conn(),
        fd: 9,
        direction: Direction::Egress,
    }));
    assert!(streams.stats().application_records >= 4, "its work is kept");
}
