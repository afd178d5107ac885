//! Live: uprobes attached by the file offsets podtrace resolves — at a
//! function's entry and at each of its RETs — in stripped PIE Go binaries
//! built at test time, fire exactly once per call and once per return.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    io::Write as _,
    num::NonZeroU32,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use podtrace_tests::live_test_can_run;
use tracer_gobin::fixture::{self, Variant};
use tracer_user::capture::{
    go_probes,
    uprobes::{CallCounter, ProbePoint},
};

const CALLS: u64 = 1000;

fn fixture_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/callcount")
}

/// Builds the call-count fixture with Go 1.`minor` as a stripped PIE.
fn build(minor: u32) -> PathBuf {
    let toolchain = fixture::toolchains()
        .into_iter()
        .find(|toolchain| toolchain.version.starts_with(&format!("go1.{minor}.")))
        .unwrap_or_else(|| {
            panic!("no Go 1.{minor} toolchain under .tools/go: run `cargo xtask setup`")
        });
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out_dir = tmp.join("callcount").join(&toolchain.version);
    std::fs::create_dir_all(&out_dir).unwrap();
    fixture::build_source(
        &toolchain,
        Variant::PieStripped,
        &fixture_source(),
        &out_dir,
        &tmp.join("callcount-gocache"),
    )
    .unwrap()
}

fn counts_every_call_and_return(minor: u32) {
    let binary = build(minor);
    let inspection = go_probes::inspect(&binary, &["main.classify".to_owned()]).unwrap();
    let classify = inspection.functions.get("main.classify").unwrap().clone();
    assert!(
        classify.ret_offsets.len() >= 2,
        "expected several RETs: {classify:?}"
    );

    let mut child = Command::new(&binary)
        .arg(CALLS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = NonZeroU32::new(child.id()).unwrap();
    let counter = CallCounter::attach(&binary, &[classify], Some(pid)).unwrap();
    // Attached: let the fixture make its calls.
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "fixture failed: {output:?}");

    let hits = counter.hits().unwrap();
    let entry: u64 = hits
        .iter()
        .filter(|hit| hit.point == ProbePoint::Entry)
        .map(|hit| hit.hits)
        .sum();
    let returns: u64 = hits
        .iter()
        .filter(|hit| hit.point != ProbePoint::Entry)
        .map(|hit| hit.hits)
        .sum();
    assert_eq!(entry, CALLS, "entry hits: {hits:#?}");
    assert_eq!(returns, CALLS, "RET hits: {hits:#?}");
    // Each of the three return paths is taken a third of the time.
    let per_ret: Vec<u64> = hits
        .iter()
        .filter(|hit| hit.point != ProbePoint::Entry)
        .map(|hit| hit.hits)
        .collect();
    assert!(
        per_ret.iter().filter(|&&count| count > 0).count() >= 3,
        "{hits:#?}"
    );
}

#[test]
fn stripped_pie_go121_entry_and_ret_probes_count_exactly() {
    if live_test_can_run("stripped_pie_go121_entry_and_ret_probes_count_exactly") {
        counts_every_call_and_return(21);
    }
}

#[test]
fn stripped_pie_go126_entry_and_ret_probes_count_exactly() {
    if live_test_can_run("stripped_pie_go126_entry_and_ret_probes_count_exactly") {
        counts_every_call_and_return(26);
    }
}

#[test]
fn stripped_pie_go127_entry_and_ret_probes_count_exactly() {
    if live_test_can_run("stripped_pie_go127_entry_and_ret_probes_count_exactly") {
        counts_every_call_and_return(27);
    }
}
