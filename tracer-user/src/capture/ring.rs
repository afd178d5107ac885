//! The ring buffer reader: waits for the ring buffer's fd with tokio (or its
//! drain timer), parses each record into a [`RawEvent`] and sends them
//! downstream in batches. Where the decoding threads run at a lower
//! priority the agent runs it on a thread of its own ([`start_reader`]), so
//! that it stays prompt.
//!
//! Back-pressure is deliberate: when downstream is slow this task waits, the
//! ring buffer fills, and the kernel counts `ring_buffer_full` drops — the
//! one place where loss is both bounded and counted.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{mpsc, oneshot},
};
use tokio_util::sync::CancellationToken;
use tracer_common::{config::RING_DRAIN_INTERVAL_MS, io::FdKind};

use super::{
    Priority,
    priority::Backlog,
    recording::RecordingWriter,
    wal_head::wal_head_record,
    wire::{RawEvent, parse_record},
};

/// The cgroup path of a live process: the unified (v2) entry of
/// /proc/PID/cgroup, or on cgroup v1 the `pids` controller's (kubelet and
/// containerd put a Pod's processes under `…/pod<UID>/<container id>` in each).
fn cgroup_path(tgid: u32) -> Option<String> {
    let table = std::fs::read_to_string(format!("/proc/{tgid}/cgroup")).ok()?;
    let entry = |wanted: &dyn Fn(&str) -> bool| {
        table.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            wanted(controllers).then(|| path.to_owned())
        })
    };
    entry(&|controllers| controllers.is_empty())
        .or_else(|| entry(&|controllers| controllers.split(',').any(|c| c == "pids")))
}

/// Counters of the user-space side of capture.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Records parsed and sent downstream.
    pub events: AtomicU64,
    /// Records that did not parse (agent and object disagree, or a bug).
    pub malformed: AtomicU64,
}

/// Reads `ring` until `shutdown` is cancelled or downstream goes away,
/// writing every record to `recorder` first when there is one (which is
/// handed back at the end, for the caller to finish), and telling
/// `new_components` the pid of every component that execs.
///
/// Records go downstream in batches, one per drain: the kernel wakes this
/// task only once `Config::wakeup_bytes` are pending, and a timer
/// (`RING_DRAIN_INTERVAL_MS`) drains what a quiet moment left below that.
/// Each drain's size, and what waits in `events` after it, tell `priority`
/// how far behind the agent is.
pub async fn read_ring_buffer(
    ring: RingBuf<MapData>,
    events: mpsc::Sender<Vec<RawEvent>>,
    stats: Arc<ReaderStats>,
    shutdown: CancellationToken,
    mut recorder: Option<RecordingWriter>,
    new_components: mpsc::UnboundedSender<u32>,
    mut priority: Priority,
) -> std::io::Result<Option<RecordingWriter>> {
    // SAFETY: the fd is the ring buffer map's, owned by `ring`, which the
    // AsyncFd owns until it drops; RingBuf::as_raw_fd always returns that fd.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    let mut drain_timer = tokio::time::interval(Duration::from_millis(RING_DRAIN_INTERVAL_MS));
    drain_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (batch, bytes) = tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                let batch = drain(guard.get_inner_mut(), &stats, recorder.as_mut(), &new_components)?;
                guard.clear_ready();
                batch
            }
            _ = drain_timer.tick() => {
                drain(ring.get_mut(), &stats, recorder.as_mut(), &new_components)?
            }
            () = shutdown.cancelled() => {
                // What the kernel wrote since the last drain: below the
                // wakeup threshold, it would wait for the timer — the last
                // messages before a stop (a load's last responses) were
                // lost with it.
                let (batch, _) = drain(ring.get_mut(), &stats, recorder.as_mut(), &new_components)?;
                if !batch.is_empty() {
                    // Downstream gone already: nothing more to hand it.
                    let _ = events.send(batch).await;
                }
                return Ok(recorder);
            }
        };
        if !batch.is_empty() && events.send(batch).await.is_err() {
            return Ok(recorder);
        }
        let backlog = Backlog {
            drained_bytes: bytes,
            queued_batches: events.max_capacity() - events.capacity(),
            channel_batches: events.max_capacity(),
        };
        priority.after_drain(backlog, Instant::now());
    }
}

/// What the reader thread hands back when it ends: the recorder, if any.
pub type ReaderResult = std::io::Result<Option<RecordingWriter>>;

/// Starts [`read_ring_buffer`]; its result comes through the receiver.
///
/// Where the decoding threads yield CPU (`--nice` above 0) the reader runs
/// on a thread of its own, with a runtime of its own, at the priority of the
/// thread that calls this (the agent's main thread: the priority it was
/// started with). It stays prompt, so what the agent has not decoded yet
/// waits in `events`, where the reader sees it, rather than in the kernel's
/// ring buffer, where it would be dropped when full. At one priority for all
/// it is one more task of the caller's runtime: a thread of its own cost the
/// agent ~8 % more CPU a write on the benchmark (a wakeup of another thread,
/// and memory freed on another thread than allocated, for every batch).
pub fn start_reader(
    ring: RingBuf<MapData>,
    events: mpsc::Sender<Vec<RawEvent>>,
    stats: Arc<ReaderStats>,
    shutdown: CancellationToken,
    recorder: Option<RecordingWriter>,
    new_components: mpsc::UnboundedSender<u32>,
    priority: Priority,
) -> std::io::Result<oneshot::Receiver<ReaderResult>> {
    let (done, ended) = oneshot::channel();
    let yields = priority.yields();
    // Not polled until it runs: its fd is registered with the runtime that
    // runs it.
    let reader = read_ring_buffer(
        ring,
        events,
        stats,
        shutdown,
        recorder,
        new_components,
        priority,
    );
    if !yields {
        tokio::spawn(async move {
            // The pipeline may have failed and gone first.
            let _ = done.send(reader.await);
        });
        return Ok(ended);
    }
    std::thread::Builder::new()
        .name("podtrace-ring".to_owned())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|runtime| runtime.block_on(reader));
            let _ = done.send(result);
        })?;
    Ok(ended)
}

/// Every record now in the ring buffer, parsed, and the bytes they took.
/// Parsing makes owned events: each record's memory is handed back to the
/// kernel as soon as it is read.
fn drain(
    ring: &mut RingBuf<MapData>,
    stats: &ReaderStats,
    mut recorder: Option<&mut RecordingWriter>,
    new_components: &mpsc::UnboundedSender<u32>,
) -> std::io::Result<(Vec<RawEvent>, usize)> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(item) = ring.next() {
        bytes += item.len();
        let Some(mut event) = take_record(&item, stats, recorder.as_deref_mut())? else {
            continue;
        };
        let wal_head = match &mut event {
            RawEvent::Exec(exec) => {
                exec.cgroup_path = cgroup_path(exec.ids.tgid);
                if exec.depth == 0 {
                    // A component started (or re-exec'd): it may need
                    // its own Go TLS probes. Nobody listening is fine.
                    let _ = new_components.send(exec.ids.tgid);
                }
                None
            }
            RawEvent::FileOpen(open) if open.fd_kind == FdKind::WalFile => {
                wal_head_record(open.ids.tgid, open.fd, open.conn.conn_id, open.ids.ts_ns)
            }
            _ => None,
        };
        batch.push(event);
        if let Some(head) = wal_head {
            batch.extend(take_record(&head, stats, recorder.as_deref_mut())?);
        }
    }
    Ok((batch, bytes))
}

/// One record, from the ring buffer or made by capture itself (in the
/// kernel's wire format): written to `recorder` first when there is one,
/// then parsed and counted.
fn take_record(
    record: &[u8],
    stats: &ReaderStats,
    recorder: Option<&mut RecordingWriter>,
) -> std::io::Result<Option<RawEvent>> {
    if let Some(recorder) = recorder {
        recorder.write_record(record)?;
    }
    match parse_record(record) {
        Ok(event) => {
            stats.events.fetch_add(1, Ordering::Relaxed);
            Ok(Some(event))
        }
        Err(error) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%error, "dropping malformed ring buffer record");
            Ok(None)
        }
    }
}
