//! Live: `podtrace-demo` plays the control plane against real etcd and
//! containerd + runc: it says `ready`, waits for `--wait-for`, prints one
//! JSON line per Pod it created, and leaves no process, mount, cgroup or
//! directory behind — after a normal run, with plain etcd, and when stopped
//! by SIGTERM. Its etcd client, the `demo-apiserver` relay, is built under
//! CARGO_TARGET_TMPDIR (`--build-dir`, shared by the tests and kept, so that
//! Go's build cache stays warm).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    collections::HashSet,
    io::{BufRead as _, BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use podtrace_tests::{components::leftovers, demo_pod::DemoPod, live_test_can_run};

const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// A running `podtrace-demo` with its stdout lines arriving on a channel
/// and its stderr collected for failure messages.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: thread::JoinHandle<String>,
    state_dir: tempfile::TempDir,
}

/// Where the demo builds demo-apiserver.
fn build_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-apiserver")
}

impl Demo {
    fn start(args: &[&str]) -> Self {
        let state_dir = tempfile::Builder::new()
            .prefix("demo-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
            .args(args)
            .arg("--state-dir")
            .arg(state_dir.path())
            .arg("--build-dir")
            .arg(build_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Self {
            child,
            lines,
            stderr,
            state_dir,
        }
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// The next stdout line, or `None` if none comes within `timeout`.
    fn next_line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Waits for the exit; returns its status, the stdout lines not read
    /// yet and stderr.
    fn finish(mut self) -> (ExitStatus, Vec<String>, String, tempfile::TempDir) {
        let deadline = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let status = self.child.wait().unwrap();
                panic!(
                    "podtrace-demo ran over {RUN_TIMEOUT:?} ({status}); stderr:\n{}",
                    self.stderr.join().unwrap()
                );
            }
            thread::sleep(Duration::from_millis(50));
        };
        let stderr = self.stderr.join().unwrap();
        let rest = self.lines.iter().collect();
        (status, rest, stderr, self.state_dir)
    }
}

/// A Pod line, held to the format the demo documents: exactly its seven
/// fields, the six strings and `start_ms`.
fn parse_pod_line(line: &str) -> DemoPod {
    let value: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|err| panic!("{line:?}: {err}"));
    assert_eq!(
        value.as_object().unwrap().len(),
        7,
        "unexpected fields in {line}"
    );
    for name in [
        "namespace",
        "name",
        "uid",
        "sandbox_id",
        "container_id",
        "node",
    ] {
        assert!(value[name].is_string(), "no {name} in {line}");
    }
    let pod = DemoPod::parse(line).unwrap_or_else(|| panic!("not a Pod line: {line}"));
    // From the create to the Running status stored: real work, well under a minute.
    let start_ms = pod
        .start_ms
        .unwrap_or_else(|| panic!("no start_ms in {line}"));
    assert!(0.0 < start_ms && start_ms < 60_000.0, "{line}");
    pod
}

/// Cgroup directories of a Pod (`…/kubepods/besteffort/pod<uid>` under any
/// `podtrace-*` cgroup root) that still exist.
fn pod_cgroups(uid: &str) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let cgroup_mounts = mountinfo.lines().filter_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fs_type = after.split(' ').next()?;
        let point = before.split(' ').nth(4)?;
        (fs_type == "cgroup" || fs_type == "cgroup2").then(|| PathBuf::from(point))
    });
    let mut found = Vec::new();
    for mount in cgroup_mounts {
        let Ok(entries) = std::fs::read_dir(&mount) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("podtrace-") {
                let dir = entry
                    .path()
                    .join("kubepods/besteffort")
                    .join(format!("pod{uid}"));
                if dir.exists() {
                    found.push(dir);
                }
            }
        }
    }
    found
}

/// Processes whose cgroup names the Pod.
fn processes_in_pod(uid: &str) -> Vec<u32> {
    let needle = format!("pod{uid}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|cgroup| cgroup.contains(&needle))
        })
        .collect()
}

/// Nothing of the run is left: no process mentions its state directory or
/// sits in a Pod's cgroup, nothing is mounted under it, no Pod cgroup
/// remains, and only the image cache stays in it.
fn assert_nothing_left(state_dir: &Path, uids: &[&str]) {
    let needle = state_dir.display().to_string();
    assert_eq!(leftovers::processes_mentioning(&needle), vec![]);
    assert_eq!(leftovers::mounts_under(state_dir), Vec::<PathBuf>::new());
    for uid in uids {
        assert_eq!(processes_in_pod(uid), Vec::<u32>::new(), "Pod {uid}");
        assert_eq!(pod_cgroups(uid), Vec::<PathBuf>::new(), "Pod {uid}");
    }
    let entries: Vec<String> = std::fs::read_dir(state_dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, ["podtrace-images"], "left in {needle}");
}

/// Runs the demo with 2 Pods and `extra` arguments, lets it go on only once
/// the `--wait-for` file exists, and checks what it printed and left.
fn two_pods_and_nothing_left(extra: &[&str]) {
    let go = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .into_temp_path();
    let go_path = go.to_path_buf();
    go.close().unwrap();
    let go_arg = go_path.display().to_string();
    let mut args = vec![
        "--pods",
        "2",
        "--node-name",
        "demo-node",
        "--wait-for",
        &go_arg,
    ];
    args.extend(extra);
    let started = Instant::now();
    let demo = Demo::start(&args);

    let ready = demo.next_line(RUN_TIMEOUT);
    assert_eq!(ready.as_deref(), Some("ready"));
    eprintln!("ready after {:?}", started.elapsed());
    // Nothing is created before the file exists.
    assert_eq!(demo.next_line(Duration::from_millis(500)), None);
    std::fs::write(&go_path, b"").unwrap();

    let (status, lines, stderr, state_dir) = demo.finish();
    std::fs::remove_file(&go_path).unwrap();
    eprintln!("podtrace-demo {args:?} took {:?}", started.elapsed());
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert_eq!(lines.len(), 2, "stdout {lines:?}; stderr:\n{stderr}");
    let pods: Vec<DemoPod> = lines.iter().map(|line| parse_pod_line(line)).collect();
    for (index, pod) in pods.iter().enumerate() {
        assert_eq!(pod.namespace, "default");
        assert_eq!(pod.node, "demo-node");
        let prefix = format!("demo-{index}-");
        assert!(
            pod.name.starts_with(&prefix) && pod.name.len() == prefix.len() + 5,
            "{pod:?}"
        );
        assert_eq!(pod.uid.len(), 36, "{pod:?}");
        assert_eq!(pod.sandbox_id.len(), 64, "{pod:?}");
        assert_eq!(pod.container_id.len(), 64, "{pod:?}");
    }
    let distinct = |get: fn(&DemoPod) -> &str| {
        pods.iter().map(get).collect::<HashSet<_>>().len() == pods.len()
    };
    assert!(distinct(|pod| &pod.uid), "{pods:?}");
    assert!(distinct(|pod| &pod.name), "{pods:?}");
    assert!(distinct(|pod| &pod.sandbox_id), "{pods:?}");
    assert!(distinct(|pod| &pod.container_id), "{pods:?}");
    assert!(
        stderr.contains("plays the other roles itself"),
        "stderr:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "built {}/demo-apiserver with go1.",
            build_dir().display()
        )),
        "stderr:\n{stderr}"
    );

    let uids: Vec<&str> = pods.iter().map(|pod| pod.uid.as_str()).collect();
    assert_nothing_left(state_dir.path(), &uids);
}

#[test]
fn demo_creates_pods_through_mtls_etcd_and_leaves_nothing_behind() {
    if !live_test_can_run("demo_creates_pods_through_mtls_etcd_and_leaves_nothing_behind") {
        return;
    }
    two_pods_and_nothing_left(&[]);
}

#[test]
fn demo_creates_pods_through_plain_etcd_and_leaves_nothing_behind() {
    if !live_test_can_run("demo_creates_pods_through_plain_etcd_and_leaves_nothing_behind") {
        return;
    }
    two_pods_and_nothing_left(&["--plain-etcd"]);
}

#[test]
fn demo_stopped_by_sigterm_cleans_up() {
    if !live_test_can_run("demo_stopped_by_sigterm_cleans_up") {
        return;
    }
    let never = Path::new(env!("CARGO_TARGET_TMPDIR")).join("podtrace-demo-never-created");
    let demo = Demo::start(&["--pods", "1", "--wait-for", &never.display().to_string()]);
    assert_eq!(demo.next_line(RUN_TIMEOUT).as_deref(), Some("ready"));
    // The relay runs, with the certificates etcd made in the state directory.
    let relay = build_dir().join("demo-apiserver").display().to_string();
    let relays: Vec<(u32, String)> =
        leftovers::processes_mentioning(&demo.state_dir.path().display().to_string())
            .into_iter()
            .filter(|(_, cmdline)| cmdline.starts_with(&relay))
            .collect();
    assert_eq!(relays.len(), 1, "{relays:?}");
    // SAFETY: kill(2) has no memory preconditions; the pid is our unreaped child.
    unsafe { libc::kill(demo.pid(), libc::SIGTERM) };
    let (status, lines, stderr, state_dir) = demo.finish();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(
        (status.code(), status.signal()),
        (Some(128 + libc::SIGTERM), None),
        "stderr:\n{stderr}"
    );
    assert_eq!(lines, Vec::<String>::new());
    assert!(stderr.contains("stopped by signal 15"), "stderr:\n{stderr}");
    assert_nothing_left(state_dir.path(), &[]);
    let (relay_pid, _) = relays[0];
    assert!(
        !Path::new(&format!("/proc/{relay_pid}")).exists(),
        "demo-apiserver (pid {relay_pid}) outlived podtrace-demo"
    );
}

#[test]
fn demo_without_a_go_toolchain_says_to_run_cargo_xtask_setup() {
    // Fails at the build, before starting anything: runs without root too.
    let state_dir = tempfile::Builder::new()
        .prefix("demo-no-go-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
        .args(["--pods", "1", "--state-dir"])
        .arg(state_dir.path())
        .env("PODTRACE_GO_ROOTS", "/nonexistent/go")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(output.stdout.is_empty());
    assert!(
        stderr.contains(
            "error: building demo-apiserver\n  caused by: no Go toolchain of release 1.24 or \
             newer in PODTRACE_GO_ROOTS (/nonexistent/go) to build demo-apiserver: run \
             `cargo xtask setup`"
        ),
        "stderr:\n{stderr}"
    );
}

#[test]
fn demo_reports_a_bad_state_dir_and_exits_non_zero() {
    // Fails before starting anything: runs without root too.
    let output = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
        .args(["--pods", "1", "--state-dir", "/proc/version/x"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(output.stdout.is_empty());
    assert!(
        stderr.contains("error: creating the state directory /proc/version/x"),
        "stderr:\n{stderr}"
    );
}
