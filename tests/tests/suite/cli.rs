//! Live: the `podtrace` binary as an operator runs it.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    io::{BufRead, BufReader},
    os::unix::fs::PermissionsExt as _,
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use podtrace_tests::{copy_executable, live_test_can_run, podtrace_binary};

#[test]
fn check_passes_here_and_reports_unused_kprobes_and_fentry() {
    if !live_test_can_run("check_passes_here_and_reports_unused_kprobes_and_fentry") {
        return;
    }
    let output = Command::new(podtrace_binary())
        .arg("check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "podtrace check failed:\n{stdout}");
    for feature in ["kprobes", "fentry/fexit"] {
        let line = stdout
            .lines()
            .find(|line| line.contains(feature))
            .unwrap_or_else(|| panic!("no {feature} line:\n{stdout}"));
        assert!(line.contains("not used by podtrace"), "{line}");
    }
    for feature in [
        "BTF",
        "ring buffer",
        "raw tracepoints",
        "uprobes",
        "tracefs",
    ] {
        let line = stdout
            .lines()
            .find(|line| line.contains(feature))
            .unwrap_or_else(|| panic!("no {feature} line:\n{stdout}"));
        assert!(line.starts_with("ok"), "{line}");
    }
}

/// Seconds since midnight UTC of a printed `HH:MM:SS.micros` timestamp.
fn printed_seconds_of_day(line: &str) -> f64 {
    let time = line.split_whitespace().next().unwrap();
    let mut parts = time.split(':');
    let hours: f64 = parts.next().unwrap().parse().unwrap();
    let minutes: f64 = parts.next().unwrap().parse().unwrap();
    let seconds: f64 = parts.next().unwrap().parse().unwrap();
    hours * 3600.0 + minutes * 60.0 + seconds
}

fn now_seconds_of_day() -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    now % 86_400.0
}

/// The acceptance scenario of the foundation: a copy of /bin/sh named `runc`
/// runs `sleep 1`; `podtrace run` shows runc's exec, the child's fork, exec
/// and exit, each within a second of happening, then detaches on SIGINT.
#[test]
fn run_shows_a_runc_process_tree_within_a_second() {
    if !live_test_can_run("run_shows_a_runc_process_tree_within_a_second") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runc = copy_executable(Path::new("/bin/sh"), dir.path(), "runc");
    let mut agent = Command::new(podtrace_binary())
        .args(["run", "--only-targets", "--target", "runc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Lines with the local time they arrived.
    let (tx, lines) = mpsc::channel::<(String, f64)>();
    let stdout = agent.stdout.take().unwrap();
    let stdout_tx = tx.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = stdout_tx.send((line, now_seconds_of_day()));
        }
    });
    let stderr = agent.stderr.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send((format!("stderr: {line}"), now_seconds_of_day()));
        }
    });
    let mut seen = Vec::new();
    let wait_for =
        |seen: &mut Vec<(String, f64)>, what: &dyn Fn(&str) -> bool, timeout: Duration| {
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
                    let found = what(&line.0);
                    seen.push(line.clone());
                    if found {
                        return line;
                    }
                }
            }
            panic!("timed out; podtrace printed:\n{seen:#?}");
        };
    wait_for(
        &mut seen,
        &|line| line.contains("attached; following"),
        Duration::from_secs(30),
    );

    let child = Command::new(&runc)
        .args(["-c", "sleep 1; exit 0"])
        .spawn()
        .unwrap();
    let runc_pid = child.id();
    let runc_tag = format!("runc[{runc_pid}]");
    wait_for(
        &mut seen,
        &|line| line.contains("exec") && line.contains(&runc_tag),
        Duration::from_secs(5),
    );
    let fork = wait_for(
        &mut seen,
        &|line| line.contains("fork") && line.contains(&format!("← {runc_tag}")),
        Duration::from_secs(5),
    );
    let sleep_pid: u32 = fork
        .0
        .split("fork  runc[")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    wait_for(
        &mut seen,
        &|line| {
            line.contains("exec")
                && line.contains(&format!("sleep[{sleep_pid}]"))
                && line.contains("argv: sleep 1")
        },
        Duration::from_secs(5),
    );
    wait_for(
        &mut seen,
        &|line| {
            line.contains("exit")
                && line.contains(&format!("sleep[{sleep_pid}]"))
                && line.contains("exit code 0")
        },
        Duration::from_secs(5),
    );
    assert!(child.wait_with_output().unwrap().status.success());

    // Every line about these processes arrived within a second of the event.
    for (line, arrived) in seen
        .iter()
        .filter(|(line, _)| line.contains(&runc_tag) || line.contains(&format!("[{sleep_pid}]")))
    {
        let delay = arrived - printed_seconds_of_day(line);
        assert!(
            (-0.5..1.0).contains(&delay),
            "shown {delay:.3}s after it happened: {line}"
        );
    }

    // SIGINT: podtrace detaches and exits cleanly.
    // SAFETY: kill with a pid we spawned and a valid signal number.
    assert_eq!(unsafe { libc::kill(agent.id() as i32, libc::SIGINT) }, 0);
    let status = agent.wait().unwrap();
    assert!(status.success(), "podtrace exited with {status}");
    // The reader threads end at EOF, once podtrace has exited.
    let mut rest: Vec<String> = lines.iter().map(|(line, _)| line).collect();
    rest.extend(seen.into_iter().map(|(line, _)| line));
    assert!(
        rest.iter().any(|line| line.contains("programs detached")),
        "{rest:#?}"
    );
}

/// Issue 4's acceptance: `podtrace record` while etcdctl puts a key into an
/// etcd with mTLS and authentication, then `podtrace replay --dump` shows the
/// key as plaintext in both processes and the WAL fdatasync of etcd.
#[test]
fn record_then_replay_dump_shows_tls_plaintext_on_both_sides_and_the_wal_sync() {
    if !live_test_can_run(
        "record_then_replay_dump_shows_tls_plaintext_on_both_sides_and_the_wal_sync",
    ) {
        return;
    }
    let etcd = podtrace_tests::components::Etcd::start(podtrace_tests::components::EtcdOptions {
        tls: true,
        auth: true,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("put.ptrace");
    let mut agent = Command::new(podtrace_binary())
        .args([
            "record",
            "--duration",
            "8",
            "--only-targets",
            "--target",
            "etcd",
            "--target",
            "etcdctl",
            "-o",
        ])
        .arg(&recording)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(agent.stderr.take().unwrap()).lines();
    let attached = stderr
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("attached; following"));
    assert!(attached, "podtrace record did not attach");
    let key = "/registry/pods/default/x";
    let put = etcd.etcdctl().args(["put", key, "y"]).output().unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let status = agent.wait().unwrap();
    assert!(status.success(), "podtrace record exited with {status}");
    assert_eq!(
        std::fs::metadata(&recording).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let dump = Command::new(podtrace_binary())
        .arg("replay")
        .arg(&recording)
        .arg("--dump")
        .output()
        .unwrap();
    assert!(dump.status.success());
    let dump = String::from_utf8_lossy(&dump.stdout);
    let etcd_pid = format!("pid {} ", etcd.pid());
    let tls_lines: Vec<&str> = dump
        .lines()
        .filter(|line| line.contains(" tls ") && line.contains(key))
        .collect();
    assert!(
        tls_lines
            .iter()
            .any(|line| line.contains("tls write") && !line.contains(&etcd_pid)),
        "no client-side plaintext write with the key:\n{dump}"
    );
    assert!(
        tls_lines
            .iter()
            .any(|line| line.contains("tls read") && line.contains(&etcd_pid)),
        "no server-side plaintext read with the key:\n{dump}"
    );
    // Fresh TLS 1.3 connections are read from their secrets: the plaintext
    // above is the dump's decryption, and the secrets themselves are named,
    // never printed.
    assert!(
        dump.lines()
            .any(|line| line.contains(&etcd_pid) && line.contains("TLS 1.3 secret")),
        "no TLS 1.3 secret of etcd:\n{dump}"
    );
    assert!(
        dump.lines()
            .any(|line| line.contains(&etcd_pid) && line.contains(" fdatasync ")),
        "no WAL fdatasync of etcd:\n{dump}"
    );
}
