//! Live: the real eBPF object follows a process tree spawned by the test.
//!
//! The tree's root is a copy of /bin/sh under a target name; its children and
//! grandchildren become targets by descent. Assertions are on the real pids,
//! parent links, filenames, argv and exit codes the kernel reported.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{path::Path, process::Command, time::Duration};

use podtrace_tests::{LiveCapture, copy_executable, live_test_can_run};
use tracer_common::{config::TargetReason, drop_reason::DropReason};
use tracer_user::capture::{ExecRecord, ExitStatus, RawEvent};

const TIMEOUT: Duration = Duration::from_secs(20);

fn execs(events: &[RawEvent]) -> Vec<&ExecRecord> {
    events
        .iter()
        .filter_map(|event| {
            if let RawEvent::Exec(exec) = event {
                Some(exec)
            } else {
                None
            }
        })
        .collect()
}

fn exit_of(events: &[RawEvent], tgid: u32) -> Option<ExitStatus> {
    events.iter().find_map(|event| match event {
        RawEvent::Exit(exit) if exit.ids.tgid == tgid => Some(exit.status),
        _ => None,
    })
}

fn parent_of(events: &[RawEvent], tgid: u32) -> Option<u32> {
    events.iter().find_map(|event| match event {
        RawEvent::Fork(fork) if fork.ids.tgid == tgid => Some(fork.parent_tgid),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn process_tree_of_a_target_is_followed_with_pids_argv_and_exit_codes() {
    if !live_test_can_run("process_tree_of_a_target_is_followed_with_pids_argv_and_exit_codes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root_sh = copy_executable(Path::new("/bin/sh"), dir.path(), "pt-tree-root");
    let mut capture = LiveCapture::start(&["pt-tree-root"], 4);

    // A non-target first: it must produce nothing.
    let bystander = Command::new("/bin/sh")
        .args(["-c", "/bin/true bystander; exit 5"])
        .spawn()
        .unwrap();
    let bystander_pid = bystander.id();
    assert_eq!(bystander.wait_with_output().unwrap().status.code(), Some(5));

    // root → child (/bin/sh -c …) → grandchild (/bin/true grandchild); root → /bin/echo.
    let script =
        r#"/bin/sh -c "/bin/true grandchild; exit 7"; /bin/echo second-child > /dev/null; exit 3"#;
    let root = Command::new(&root_sh).args(["-c", script]).spawn().unwrap();
    let root_pid = root.id();
    let root_status = root.wait_with_output().unwrap().status;
    assert_eq!(root_status.code(), Some(3));

    let events = capture.collect_until_exit(root_pid, TIMEOUT).await;
    capture.stop().await;

    assert!(
        events.iter().all(|event| event.ids().tgid != bystander_pid),
        "the non-target {bystander_pid} produced events: {events:#?}"
    );

    let execs = execs(&events);
    let root_exec = execs
        .iter()
        .find(|exec| exec.ids.tgid == root_pid)
        .expect("root exec");
    assert_eq!(root_exec.filename, root_sh.to_str().unwrap());
    assert_eq!(root_exec.argv, [root_sh.to_str().unwrap(), "-c", script]);
    assert_eq!(root_exec.target, TargetReason::Named);
    assert_eq!(root_exec.depth, 0);
    assert_eq!(root_exec.comm, "pt-tree-root");
    assert_eq!(root_exec.ppid, std::process::id());

    let child = execs
        .iter()
        .find(|exec| exec.filename == "/bin/sh")
        .expect("child exec");
    assert_eq!(
        child.argv,
        ["/bin/sh", "-c", "/bin/true grandchild; exit 7"]
    );
    assert_eq!(
        (child.target, child.depth, child.ppid),
        (TargetReason::Descendant, 1, root_pid)
    );
    assert_eq!(parent_of(&events, child.ids.tgid), Some(root_pid));
    assert_eq!(exit_of(&events, child.ids.tgid), Some(ExitStatus::Code(7)));

    let grandchild = execs
        .iter()
        .find(|exec| exec.argv == ["/bin/true", "grandchild"])
        .expect("grandchild exec");
    assert_eq!((grandchild.depth, grandchild.ppid), (2, child.ids.tgid));
    assert_eq!(
        parent_of(&events, grandchild.ids.tgid),
        Some(child.ids.tgid)
    );
    assert_eq!(
        exit_of(&events, grandchild.ids.tgid),
        Some(ExitStatus::Code(0))
    );

    let echo = execs
        .iter()
        .find(|exec| exec.filename == "/bin/echo")
        .expect("second child exec");
    assert_eq!(echo.argv, ["/bin/echo", "second-child"]);
    assert_eq!(parent_of(&events, echo.ids.tgid), Some(root_pid));
    assert_eq!(exit_of(&events, echo.ids.tgid), Some(ExitStatus::Code(0)));

    assert_eq!(exit_of(&events, root_pid), Some(ExitStatus::Code(3)));

    // Each process's fork comes before its exec, and its exec before its exit.
    for exec in [child, grandchild, echo] {
        let position = |wanted: fn(&RawEvent) -> bool| {
            events
                .iter()
                .position(|event| event.ids().tgid == exec.ids.tgid && wanted(event))
                .unwrap()
        };
        let fork = position(|event| matches!(event, RawEvent::Fork(_)));
        let exec_at = position(|event| matches!(event, RawEvent::Exec(_)));
        let exit = position(|event| matches!(event, RawEvent::Exit(_)));
        assert!(
            fork < exec_at && exec_at < exit,
            "order of {}: {events:#?}",
            exec.filename
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn descendants_below_the_depth_limit_are_counted_not_followed() {
    if !live_test_can_run("descendants_below_the_depth_limit_are_counted_not_followed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root_sh = copy_executable(Path::new("/bin/sh"), dir.path(), "pt-depth-root");
    let mut capture = LiveCapture::start(&["pt-depth-root"], 1);
    let before = capture.drop_counts().get(DropReason::DescendantDepthLimit);

    let root = Command::new(&root_sh)
        .args(["-c", r#"/bin/sh -c "/bin/true too-deep; exit 0"; exit 0"#])
        .spawn()
        .unwrap();
    let root_pid = root.id();
    root.wait_with_output().unwrap();
    let events = capture.collect_until_exit(root_pid, TIMEOUT).await;
    let after = capture.drop_counts().get(DropReason::DescendantDepthLimit);
    capture.stop().await;

    let execs = execs(&events);
    assert!(
        execs.iter().any(|exec| exec.filename == "/bin/sh"),
        "child followed: {events:#?}"
    );
    assert!(
        !execs
            .iter()
            .any(|exec| exec.argv.first().is_some_and(|arg| arg == "/bin/true")),
        "{events:#?}"
    );
    assert!(
        after > before,
        "depth limit not counted ({before} → {after})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn long_argv_is_cut_and_flagged_without_reading_the_environment() {
    if !live_test_can_run("long_argv_is_cut_and_flagged_without_reading_the_environment") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root_sh = copy_executable(Path::new("/bin/sh"), dir.path(), "pt-argv-root");
    let mut capture = LiveCapture::start(&["pt-argv-root"], 1);

    let long_arg = "a".repeat(2 * tracer_common::event::ARGS_BYTES);
    let root = Command::new(&root_sh)
        .args(["-c", "exit 0", &long_arg])
        .env("PODTRACE_TEST_SECRET", "must-not-be-captured")
        .spawn()
        .unwrap();
    let root_pid = root.id();
    root.wait_with_output().unwrap();
    let events = capture.collect_until_exit(root_pid, TIMEOUT).await;
    capture.stop().await;

    let exec = execs(&events)
        .into_iter()
        .find(|exec| exec.ids.tgid == root_pid)
        .expect("exec")
        .clone();
    assert!(exec.argv_truncated, "{exec:?}");
    assert_eq!(
        exec.argv[..2],
        [root_sh.to_str().unwrap().to_owned(), "-c".to_owned()]
    );
    let joined = exec.argv.join("\0");
    assert!(
        !joined.contains("must-not-be-captured"),
        "environment leaked into argv: {joined}"
    );
    assert!(exec.argv[3].chars().all(|c| c == 'a') && exec.argv[3].len() < long_arg.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn target_running_before_start_is_found_in_proc_and_followed() {
    if !live_test_can_run("target_running_before_start_is_found_in_proc_and_followed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root_sh = copy_executable(Path::new("/bin/sh"), dir.path(), "pt-seeded-root");
    // Started before the programs are loaded: only the /proc scan can find it.
    let root = Command::new(&root_sh)
        .args(["-c", "sleep 2; /bin/true seeded-child; exit 4"])
        .spawn()
        .unwrap();
    let root_pid = root.id();
    // Found by the /proc scan once it has exec'd: polled, not slept on.
    let comm = format!("/proc/{root_pid}/comm");
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::fs::read_to_string(&comm).map_or(true, |name| name.trim() != "pt-seeded-root") {
        assert!(
            std::time::Instant::now() < deadline,
            "{root_sh:?} never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let mut capture = LiveCapture::start(&["pt-seeded-root"], 2);
    let events = capture.collect_until_exit(root_pid, TIMEOUT).await;
    capture.stop().await;
    assert_eq!(root.wait_with_output().unwrap().status.code(), Some(4));

    let child = execs(&events)
        .into_iter()
        .find(|exec| exec.argv == ["/bin/true", "seeded-child"])
        .expect("child exec");
    assert_eq!(
        (child.ppid, child.depth, child.target),
        (root_pid, 1, TargetReason::Descendant)
    );
    assert_eq!(exit_of(&events, child.ids.tgid), Some(ExitStatus::Code(0)));
    assert_eq!(exit_of(&events, root_pid), Some(ExitStatus::Code(4)));
}
