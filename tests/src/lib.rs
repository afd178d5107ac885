//! Harness for podtrace's live tests: they load the real eBPF object into the
//! running kernel and observe real processes, so they need root.
//!
//! A live test that cannot run says why. Outside CI it is skipped with that
//! reason printed; under CI (`CI` set) it fails instead, because a skipped
//! live test there would hide a broken setup.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test harness: a failed step fails the test that called it"
)]

pub mod agent;
pub mod components;
pub mod demo_pod;
pub mod otlp_json;
pub mod otlp_receiver;
pub mod trees;

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracer_user::capture::{
    CaptureOptions, DropCounts, Probes, RawEvent, recording::RecordingWriter,
    ring::read_ring_buffer, targets::TargetMatcher, wire::parse_record,
};

/// Whether a live test can run here; prints the reason (or fails on CI) if not.
pub fn live_test_can_run(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    let reason = "needs root to load eBPF programs";
    assert!(
        std::env::var_os("CI").is_none(),
        "live test {test} cannot run on CI: {reason}"
    );
    eprintln!("skipped {test}: {reason}");
    false
}

/// The `podtrace` binary under test: `cargo xtask test` builds it and sets
/// `PODTRACE_BIN`.
pub fn podtrace_binary() -> PathBuf {
    let path = std::env::var_os("PODTRACE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/podtrace"));
    assert!(
        path.exists(),
        "{} does not exist: run the suite with `cargo xtask test`, which builds it, or set PODTRACE_BIN",
        path.display()
    );
    path
}

/// Runs `command`, which must succeed; returns its stdout (lossy UTF-8).
pub fn succeed(command: &mut std::process::Command) -> String {
    let output = command.output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// `cargo xtask ARGS` in the workspace, run as a user runs it, which must
/// succeed; returns its stdout.
pub fn xtask(args: &[&std::ffi::OsStr]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    succeed(
        std::process::Command::new(cargo)
            .arg("xtask")
            .args(args)
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")),
    )
}

/// A copy of `source` named `name` in `dir`, executable.
pub fn copy_executable(source: &Path, dir: &Path, name: &str) -> PathBuf {
    let target = dir.join(name);
    fs::copy(source, &target).unwrap_or_else(|err| {
        panic!(
            "copying {} to {}: {err}",
            source.display(),
            target.display()
        )
    });
    target
}

/// The real eBPF object loaded and attached, with a task reading its ring buffer.
#[derive(Debug)]
pub struct LiveCapture {
    probes: Probes,
    /// Batches from the reader, and what is left of the last one.
    events: mpsc::Receiver<Vec<RawEvent>>,
    pending: std::collections::VecDeque<RawEvent>,
    new_components: mpsc::UnboundedReceiver<u32>,
    shutdown: CancellationToken,
    reader: JoinHandle<std::io::Result<Option<RecordingWriter>>>,
}

impl LiveCapture {
    /// Loads the programs following only `target_names`.
    pub fn start(target_names: &[&str], max_descendant_depth: u32) -> Self {
        Self::start_with(target_names, max_descendant_depth, 1 << 20)
    }

    /// Like [`Self::start`], with a ring buffer of `ring_buffer_bytes`.
    pub fn start_with(
        target_names: &[&str],
        max_descendant_depth: u32,
        ring_buffer_bytes: u32,
    ) -> Self {
        let options = CaptureOptions {
            targets: TargetMatcher::new(target_names).unwrap(),
            max_descendant_depth,
            ring_buffer_bytes,
            data_bytes: tracer_common::io::DEFAULT_DATA_BYTES,
            uprobe_perf_events: false,
            kube_offsets: tracer_gobin::KubeOffsetsMode::default(),
            apiserver_probes: tracer_user::capture::kube_probes::ApiserverProbes::default(),
        };
        let mut probes =
            Probes::load(&options).unwrap_or_else(|err| panic!("loading the eBPF object: {err}"));
        let ring = probes.take_ring_buffer().unwrap();
        let initial = probes.initial_records();
        let (tx, events) = mpsc::channel(1024);
        // What was open at start comes first, as in the agent's pipeline.
        let initial = initial
            .iter()
            .map(|record| parse_record(record).unwrap())
            .collect();
        tx.try_send(initial).unwrap();
        let shutdown = CancellationToken::new();
        let (components_tx, new_components) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_ring_buffer(
            ring,
            tx,
            Default::default(),
            shutdown.clone(),
            None,
            components_tx,
            // The test's own priority, untouched.
            tracer_user::capture::Priority::new(0, ring_buffer_bytes),
        ));
        Self {
            probes,
            new_components,
            events,
            pending: Default::default(),
            shutdown,
            reader,
        }
    }

    /// Collects events until `done` returns true for one (included) or
    /// `timeout` passes; panics on timeout with what was collected.
    pub async fn collect_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&RawEvent) -> bool,
    ) -> Vec<RawEvent> {
        let mut collected = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = tokio::select! {
                event = tokio::time::timeout_at(deadline, Self::next(&mut self.pending, &mut self.events)) => event,
                Some(tgid) = self.new_components.recv() => {
                    // As the agent does: a component that execs gets its Go TLS probes.
                    self.probes.attach_go_probes(tgid);
                    continue;
                }
            };
            match next {
                Ok(Some(event)) => {
                    let finished = done(&event);
                    collected.push(event);
                    if finished {
                        return collected;
                    }
                }
                Ok(None) => panic!("ring buffer reader stopped; collected {collected:#?}"),
                Err(_) => panic!("timed out after {timeout:?}; collected {collected:#?}"),
            }
        }
    }

    /// Collects events until process `tgid` has exited (its exit included).
    pub async fn collect_until_exit(&mut self, tgid: u32, timeout: Duration) -> Vec<RawEvent> {
        self.collect_until(
            timeout,
            |event| matches!(event, RawEvent::Exit(exit) if exit.ids.tgid == tgid),
        )
        .await
    }

    /// Collects whatever arrives during `duration` (events already in the
    /// ring buffer come first).
    pub async fn collect_for(&mut self, duration: Duration) -> Vec<RawEvent> {
        let deadline = tokio::time::Instant::now() + duration;
        let mut collected = Vec::new();
        while let Ok(Some(event)) =
            tokio::time::timeout_at(deadline, Self::next(&mut self.pending, &mut self.events)).await
        {
            collected.push(event);
        }
        collected
    }

    /// The next event: the rest of the last batch, else the next batch's first.
    async fn next(
        pending: &mut std::collections::VecDeque<RawEvent>,
        events: &mut mpsc::Receiver<Vec<RawEvent>>,
    ) -> Option<RawEvent> {
        while pending.is_empty() {
            pending.extend(events.recv().await?);
        }
        pending.pop_front()
    }

    /// Kernel-side drop counters now.
    pub fn drop_counts(&self) -> DropCounts {
        self.probes.drop_counts().unwrap()
    }

    /// Stops the reader and detaches the programs.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.reader.await.unwrap().unwrap();
        drop(self.probes);
    }
}

/// `events` with the ciphertext of every TLS direction whose secret capture
/// sent replaced by its plaintext, as the agent's decode stage sees it
/// (`tracer_user::decode::TlsStreams`); the secrets' records stay.
pub fn decrypted(events: &[RawEvent]) -> Vec<RawEvent> {
    let mut streams = tracer_user::decode::TlsStreams::default();
    events
        .iter()
        .flat_map(|event| streams.offline(event.clone()))
        .collect()
}
