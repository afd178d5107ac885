//! The ring buffer reader task: waits for the ring buffer's fd with tokio,
//! parses each record into a [`RawEvent`] and sends it downstream.
//!
//! Back-pressure is deliberate: when downstream is slow this task waits, the
//! ring buffer fills, and the kernel counts `ring_buffer_full` drops — the
//! one place where loss is both bounded and counted.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use super::{
    recording::RecordingWriter,
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
pub async fn read_ring_buffer(
    ring: RingBuf<MapData>,
    events: mpsc::Sender<RawEvent>,
    stats: Arc<ReaderStats>,
    shutdown: CancellationToken,
    mut recorder: Option<RecordingWriter>,
    new_components: mpsc::UnboundedSender<u32>,
) -> std::io::Result<Option<RecordingWriter>> {
    // SAFETY: the fd is the ring buffer map's, owned by `ring`, which the
    // AsyncFd owns until it drops; RingBuf::as_raw_fd always returns that fd.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    loop {
        let mut guard = tokio::select! {
            guard = ring.readable_mut() => guard?,
            () = shutdown.cancelled() => return Ok(recorder),
        };
        loop {
            // Parse into an owned event first: the record's memory is handed
            // back to the kernel when `item` drops, before we await the send.
            let parsed = match guard.get_inner_mut().next() {
                Some(item) => {
                    if let Some(recorder) = recorder.as_mut() {
                        recorder.write_record(&item)?;
                    }
                    parse_record(&item)
                }
                None => break,
            };
            match parsed {
                Ok(mut event) => {
                    stats.events.fetch_add(1, Ordering::Relaxed);
                    if let RawEvent::Exec(exec) = &mut event {
                        exec.cgroup_path = cgroup_path(exec.ids.tgid);
                        if exec.depth == 0 {
                            // A component started (or re-exec'd): it may need
                            // its own Go TLS probes. Nobody listening is fine.
                            let _ = new_components.send(exec.ids.tgid);
                        }
                    }
                    if events.send(event).await.is_err() {
                        return Ok(recorder);
                    }
                }
                Err(error) => {
                    stats.malformed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, "dropping malformed ring buffer record");
                }
            }
        }
        guard.clear_ready();
    }
}
