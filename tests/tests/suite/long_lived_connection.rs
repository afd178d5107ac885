//! Live: a podtrace started after an HTTP/2 client's connection to etcd was
//! established — so after its HPACK dynamic table was built, and a request's
//! `:path` is only a table index on the wire — still knows the `:path` of
//! later requests, from Go's HPACK decoder in etcd, tied to that connection.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use podtrace_tests::{
    LiveCapture,
    components::{Etcd, EtcdOptions},
    live_test_can_run,
};
use tracer_common::io::{ConnAction, Direction};
use tracer_gobin::fixture::{self, Variant};
use tracer_user::{
    capture::{Peer, RawEvent},
    decode::{Decoder, Message},
};

/// Builds the h2c client fixture with the newest Go toolchain (it needs ≥ 1.24).
fn h2c_client() -> std::path::PathBuf {
    let toolchain = fixture::toolchains()
        .into_iter()
        .find(|toolchain| toolchain.version.starts_with("go1.26."))
        .expect("no Go 1.26 toolchain under .tools/go: run `cargo xtask setup`");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out_dir = tmp.join("h2cput");
    std::fs::create_dir_all(&out_dir).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/h2cput");
    fixture::build_source(
        &toolchain,
        Variant::Plain,
        &source,
        &out_dir,
        &tmp.join("h2cput-gocache"),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn path_of_a_request_on_a_connection_older_than_podtrace_is_known() {
    if !live_test_can_run("path_of_a_request_on_a_connection_older_than_podtrace_is_known") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions::default()).unwrap();
    let mut client = Command::new(h2c_client())
        .arg(format!(
            "http://{}",
            etcd.endpoint().trim_start_matches("http://")
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let client_addr: SocketAddr = line
        .trim()
        .strip_prefix("ready ")
        .expect("fixture not ready")
        .parse()
        .unwrap();

    // The connection and its HPACK state exist; now podtrace starts.
    let mut capture = LiveCapture::start(&["etcd"], 1);
    client.stdin.as_mut().unwrap().write_all(b"put\n").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("done"), "fixture: {line}");

    let events = capture
        .collect_until(
            Duration::from_secs(30),
            |event| matches!(event, RawEvent::Header(field) if field.name == ":path"),
        )
        .await;
    // A moment more for the rest of the request's fields.
    drop(client.stdin.take());
    let _ = client.wait();
    capture.stop().await;

    let connection = events
        .iter()
        .find_map(|event| match event {
            RawEvent::Conn(conn)
                if conn.ids.tgid == etcd.pid()
                    && conn.change == ConnAction::AcceptedBeforeStart
                    && conn.peer == Peer::Tcp(client_addr) =>
            {
                Some(conn.conn)
            }
            _ => None,
        })
        .unwrap_or_else(|| {
            panic!("etcd's connection from {client_addr} was not found at start: {events:#?}")
        });

    let mut decoder = Decoder::default();
    let paths: Vec<_> = events
        .into_iter()
        .flat_map(|event| decoder.decode(event))
        .filter_map(|message| match message {
            Message::Header(field) if field.name == ":path" => Some(field),
            _ => None,
        })
        .collect();
    let on_connection = paths
        .iter()
        .find(|field| field.conn == connection)
        .unwrap_or_else(|| panic!("{paths:#?}"));
    assert_eq!(on_connection.value, "/etcdserverpb.KV/Put");
    assert_eq!(on_connection.direction, Direction::Ingress);
}
