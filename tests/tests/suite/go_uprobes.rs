//! Live: uprobes attached by the file offsets podtrace resolves — at a
//! function's entry and at each of its RETs — in stripped PIE Go binaries
//! built at test time, fire exactly once per call and once per return, calls
//! that grow their goroutine's stack (and so run the prologue twice) included.

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
    uprobes::{CallCounter, ProbeHits, ProbePoint},
};

const CALLS: u64 = 1000;
/// `main.grow` calls: CALLS / 10 goroutines, each recursing `growDepth` deep.
const GROW_CALLS: u64 = CALLS / 10 * 16;

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
    let inspection = go_probes::inspect(
        &binary,
        &["main.classify".to_owned()],
        tracer_gobin::KubeOffsetsMode::default(),
    )
    .unwrap();
    let classify = inspection.functions.get("main.classify").unwrap().clone();
    assert!(
        classify.ret_offsets.len() >= 2,
        "expected several RETs: {classify:?}"
    );
    let inspection = go_probes::inspect(
        &binary,
        &["main.grow".to_owned()],
        tracer_gobin::KubeOffsetsMode::default(),
    )
    .unwrap();
    let grow = inspection.functions.get("main.grow").unwrap().clone();
    // The cheap probe point (an emulated jump), whose skip of stack-growing
    // hits is what the grow counts below check.
    assert!(
        classify.entry_at_stack_check && grow.entry_at_stack_check,
        "{classify:?} {grow:?}"
    );

    let mut child = Command::new(&binary)
        .arg(CALLS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = NonZeroU32::new(child.id()).unwrap();
    let counter = CallCounter::attach(&binary, &[classify, grow], Some(pid)).unwrap();
    // Attached: let the fixture make its calls.
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "fixture failed: {output:?}");

    let all_hits = counter.hits().unwrap();
    let (hits, grow_hits): (Vec<_>, Vec<_>) = all_hits
        .into_iter()
        .partition(|hit| hit.function == "main.classify");
    let count = |hits: &[ProbeHits], entry: bool| -> u64 {
        hits.iter()
            .filter(|hit| (hit.point == ProbePoint::Entry) == entry)
            .map(|hit| hit.hits)
            .sum()
    };
    assert_eq!(count(&hits, true), CALLS, "entry hits: {hits:#?}");
    assert_eq!(count(&hits, false), CALLS, "RET hits: {hits:#?}");
    assert_eq!(
        count(&grow_hits, true),
        GROW_CALLS,
        "grow entry hits: {grow_hits:#?}"
    );
    assert_eq!(
        count(&grow_hits, false),
        GROW_CALLS,
        "grow RET hits: {grow_hits:#?}"
    );
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
