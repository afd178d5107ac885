//! The agent's pipeline: capture → decode → correlate → export, each stage a
//! tokio task joined to the next by a bounded channel.
//!
//! Shutdown: cancelling the token stops the ring buffer reader; each stage
//! ends when its input channel closes, so everything captured before the
//! signal is still printed. The caller then drops the probes, which detaches
//! the programs.

use std::{
    io,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracer_common::drop_reason::DropReason;

use crate::{
    capture::{
        DropCounts, Probes, RawEvent,
        clock::WallClock,
        ring::{ReaderStats, read_ring_buffer},
    },
    correlate::{Activity, Correlator},
    decode::{Message, decode},
    export::terminal::{self, TerminalPrinter},
};

/// Capacity of each inter-stage channel, in items.
const CHANNEL_CAPACITY: usize = 4096;
/// How often the drop counters are checked.
const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// What a finished run saw.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// Records read from the ring buffer.
    pub events: u64,
    /// Records that did not parse.
    pub malformed: u64,
    /// Processes correlate could not track (table full).
    pub untracked_processes: u64,
    /// Kernel-side drops at the end.
    pub drops: DropCounts,
}

/// Runs the pipeline until `shutdown` is cancelled, printing process events
/// to stdout.
pub async fn run(mut probes: Probes, shutdown: CancellationToken) -> anyhow::Result<RunSummary> {
    let clock = WallClock::anchor();
    let ring = probes.take_ring_buffer()?;
    let stats = Arc::new(ReaderStats::default());

    let (raw_tx, mut raw_rx) = mpsc::channel::<RawEvent>(CHANNEL_CAPACITY);
    let (msg_tx, mut msg_rx) = mpsc::channel::<Message>(CHANNEL_CAPACITY);
    let (out_tx, mut out_rx) = mpsc::channel::<(Activity, Option<String>)>(CHANNEL_CAPACITY);

    // What was open before start goes first, so the correlator knows the
    // connections and files later events refer to.
    for event in probes.initial_events() {
        raw_tx.send(event).await?;
    }
    let seeded_names: Vec<(u32, String)> = probes
        .seeded()
        .iter()
        .filter_map(|target| {
            let name = target.exe.as_ref()?.file_name()?.to_str()?.to_owned();
            Some((target.tgid, name))
        })
        .collect();

    let capture: JoinHandle<io::Result<()>> = tokio::spawn(read_ring_buffer(
        ring,
        raw_tx,
        Arc::clone(&stats),
        shutdown.clone(),
    ));
    let decode_task = tokio::spawn(async move {
        while let Some(event) = raw_rx.recv().await {
            if msg_tx.send(decode(event)).await.is_err() {
                break;
            }
        }
    });
    let correlate_task = tokio::spawn(async move {
        let mut correlator = Correlator::new(clock);
        for (tgid, name) in seeded_names {
            correlator.processes.seed(tgid, name);
        }
        while let Some(message) = msg_rx.recv().await {
            let Some(activity) = correlator.observe(message) else {
                continue;
            };
            let tgid = match &activity {
                Activity::Process(_) => None,
                Activity::Conn(conn) => Some(conn.conn.tgid),
                Activity::FileSync(sync) => Some(sync.sync.ids.tgid),
            };
            let name = tgid.and_then(|tgid| correlator.processes.name_of(tgid));
            if out_tx.send((activity, name)).await.is_err() {
                break;
            }
        }
        correlator.full_drops()
    });
    let export_task = tokio::spawn(async move {
        let mut printer = TerminalPrinter::new(io::stdout());
        while let Some((activity, name)) = out_rx.recv().await {
            printer.print(&terminal::format(&activity, |_| name.clone()))?;
        }
        io::Result::Ok(())
    });

    let mut reported = DropCounts::default();
    let mut interval = tokio::time::interval(DROP_REPORT_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = interval.tick() => {
                let now = probes.drop_counts()?;
                report_new_drops(&reported, &now);
                reported = now;
            }
        }
    }

    capture.await??;
    decode_task.await?;
    let untracked_processes = correlate_task.await?;
    export_task.await??;
    let drops = probes.drop_counts()?;
    report_new_drops(&reported, &drops);
    Ok(RunSummary {
        events: stats.events.load(Ordering::Relaxed),
        malformed: stats.malformed.load(Ordering::Relaxed),
        untracked_processes,
        drops,
    })
}

/// Logs counters that grew since the last report: losses as warnings (an
/// operator may need a bigger ring buffer), truncations and policy as info.
fn report_new_drops(before: &DropCounts, now: &DropCounts) {
    for (reason, count) in now.iter() {
        let new = count.saturating_sub(before.get(reason));
        if new == 0 {
            continue;
        }
        if reason.loses_events() {
            tracing::warn!(
                reason = reason.name(),
                new,
                total = count,
                "kernel side lost data"
            );
        } else if reason == DropReason::ReadFailed {
            tracing::warn!(
                reason = reason.name(),
                new,
                total = count,
                "kernel reads failed; fields left empty"
            );
        } else {
            tracing::info!(
                reason = reason.name(),
                new,
                total = count,
                "kernel side cut or skipped data"
            );
        }
    }
}
