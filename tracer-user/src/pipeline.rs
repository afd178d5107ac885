//! The agent's pipeline: capture → decode → correlate → export, each stage a
//! tokio task joined to the next by a bounded channel.
//!
//! Shutdown: cancelling the token stops the ring buffer reader; each stage
//! ends when its input channel closes, so everything captured before the
//! signal is still printed. The caller then drops the probes, which detaches
//! the programs.

use std::{
    io::{self, Write as _},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracer_common::drop_reason::DropReason;

use crate::{
    capture::{
        CaptureControl, DropCounts, Priority, Probes, RawEvent,
        clock::WallClock,
        recording::{KnownProcesses, RecordingReader, RecordingWriter},
        ring::{ReaderStats, start_reader},
        wire::parse_record,
    },
    correlate::{Activity, Correlator, Span, TraceConfig},
    decode::{DecodeOptions, Decoder, FollowWindow, Message, TlsStreams},
    export::{
        alerts::{self, Alert, Threshold},
        dump,
        metrics::Metrics,
        otlp::{OtlpExporter, OtlpOptions, local_host_name},
        otlp_json::OtlpJsonFile,
        recent::RecentTraces,
        terminal::{self, TerminalPrinter},
        waterfall::Waterfalls,
    },
    stats::log_losses,
};

/// Capacity of each inter-stage channel, in batches (a ring buffer drain, the
/// messages of one); a batch per item keeps the tasks' wakeups per drain, not
/// per event.
const CHANNEL_CAPACITY: usize = 256;
/// Recorded events per batch in a replay.
const REPLAY_BATCH: usize = 256;
/// How often correlation looks at the clock when no event comes.
const CORRELATE_TICK: Duration = Duration::from_secs(1);
/// How often a live decode stage looks at the clock (`Decoder::tick`).
const DECODE_TICK: Duration = Duration::from_millis(500);
/// How often the drop counters are checked.
const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// The time a live stage's waits and idle checks are measured against
/// (CLOCK_MONOTONIC ns): the latest event it has taken while events come,
/// once a tick passed without any the time up to which the stage before it
/// has delivered everything (the wall clock for the decode stage, which the
/// ring buffer feeds every 20 ms; the decode stage's own clock for
/// correlation). A stage that lags behind (a burst of Pods on a busy node,
/// a debug build) must not expire a wait whose other half is still queued
/// before it, nor call a process idle whose events it has not read yet; and
/// a stage waiting for one that lags is not idle: correlation measured
/// against the wall clock while the decode stage worked through a burst
/// expired the apiserver's waits for its wire requests (live, one burst of
/// 20 Pods in five: up to 10 create requests split from their calls).
#[derive(Debug, Default)]
struct EventClock {
    now_ns: u64,
    seen_since_tick: bool,
}

impl EventClock {
    fn observe(&mut self, ts_ns: u64) {
        self.now_ns = self.now_ns.max(ts_ns);
        self.seen_since_tick = true;
    }

    /// The time at a tick; `upstream_ns` is the time up to which the stage
    /// before has delivered everything, `None` when input is queued (the
    /// tick won the race with it: not idleness).
    fn tick(&mut self, upstream_ns: Option<u64>) -> u64 {
        if let (false, Some(upstream_ns)) = (std::mem::take(&mut self.seen_since_tick), upstream_ns)
        {
            self.now_ns = self.now_ns.max(upstream_ns);
        }
        self.now_ns
    }
}

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
    /// Records written to the recording, when recording.
    pub recorded: Option<u64>,
}

/// The decode → correlate → export stages, running as tasks. Feed them
/// through [`Stages::input`]; drop it (and every clone) to let them drain.
struct Stages {
    input: mpsc::Sender<Vec<RawEvent>>,
    decode: JoinHandle<()>,
    correlate: JoinHandle<u64>,
    export: JoinHandle<anyhow::Result<()>>,
}

/// How long a stop waits for the OTLP endpoint to take the last spans: the
/// agent must exit within 2 s of SIGTERM (its Pod's grace period is for the
/// whole Pod), and detaching the probes takes ~0.1 s (uprobe multi links).
const OTLP_FLUSH_AT_STOP: Duration = Duration::from_millis(1200);

/// What the stages after capture do: how the decode stage treats
/// connections, and where finished spans go besides the terminal.
#[derive(Debug, Default)]
pub struct ExportOptions {
    /// Decode-stage choices (`--etcd-mute-after`).
    pub decode: DecodeOptions,
    /// Which traces the spans belong to.
    pub traces: TraceConfig,
    /// OTLP-JSON file to append to (one `ExportTraceServiceRequest` per line).
    pub out: Option<PathBuf>,
    /// OTLP endpoint to send to.
    pub otlp: Option<OtlpOptions>,
    /// Print only waterfalls, not a line per activity.
    pub quiet: bool,
    /// Metrics to update (served by [`crate::export::metrics::serve`]).
    pub metrics: Option<Arc<Metrics>>,
    /// Recent traces to keep for `podtrace explain` (served likewise).
    pub recent: Option<Arc<Mutex<RecentTraces>>>,
    /// Phase thresholds to alert on (`--alert`).
    pub alerts: Vec<Threshold>,
    /// Where alerts are POSTed as JSON (`--alert-webhook`).
    pub alert_webhook: Option<String>,
}

/// The span exporters that are configured.
struct SpanSinks {
    json: Option<OtlpJsonFile>,
    otlp: Option<OtlpExporter>,
}

impl SpanSinks {
    fn open(
        out: Option<&std::path::Path>,
        otlp: Option<OtlpOptions>,
        node_name: &str,
    ) -> anyhow::Result<Self> {
        let json = out
            .map(|path| OtlpJsonFile::open(path, node_name, local_host_name().as_deref()))
            .transpose()?;
        let otlp = otlp.map(OtlpExporter::start).transpose()?;
        Ok(Self { json, otlp })
    }

    fn export(&mut self, spans: &[Span], metrics: Option<&Metrics>) {
        if let Some(json) = self.json.as_mut() {
            if let Err(error) = json.write(spans) {
                tracing::warn!(%error, "cannot write spans to the OTLP-JSON file");
                if let Some(metrics) = metrics {
                    metrics.export_failed();
                }
            }
        }
        if let Some(otlp) = &self.otlp {
            for span in spans {
                // A full queue is counted by the exporter.
                let _ = otlp.export(span.clone());
            }
        }
    }

    async fn close(self) {
        if let Some(otlp) = self.otlp {
            let counts = otlp.shutdown(OTLP_FLUSH_AT_STOP).await;
            if counts.spans_unflushed > 0 {
                tracing::warn!(
                    spans = counts.spans_unflushed,
                    within = ?OTLP_FLUSH_AT_STOP,
                    "OTLP endpoint did not take these spans before the stop: lost"
                );
            }
            tracing::info!(
                sent = counts.spans_sent,
                dropped = counts.spans_dropped(),
                "OTLP exporter stopped"
            );
        }
    }
}

impl Stages {
    /// Starts the stages. `known` names processes that were running before
    /// the events begin. `live`: events arrive as they happen, so
    /// correlation also follows the clock (waits and trace timeouts end
    /// when nothing happens); a replay follows the events' own time.
    fn spawn(
        clock: WallClock,
        known: KnownProcesses,
        export: ExportOptions,
        control: Option<mpsc::UnboundedSender<Vec<CaptureControl>>>,
    ) -> Self {
        let live = control.is_some();
        let decode_options = export.decode;
        // A live agent follows Pods created from now on (with some slack); a
        // replay, from its first event on. Both stages use the same window.
        let since_unix_ns = live.then(|| clock.unix_ns(WallClock::monotonic_now_ns()));
        let window = FollowWindow::new(clock, since_unix_ns, export.traces.trace_timeout_ns);
        let decode_window = window.clone();
        let (input, mut raw_rx) = mpsc::channel::<Vec<RawEvent>>(CHANNEL_CAPACITY);
        let (msg_tx, mut msg_rx) = mpsc::channel::<Vec<Message>>(CHANNEL_CAPACITY);
        let (out_tx, mut out_rx) = mpsc::channel::<(Activity, Option<String>)>(CHANNEL_CAPACITY);
        // The decode stage's clock, for correlation's idle ticks.
        let decoded_ns = Arc::new(AtomicU64::new(0));
        let decoded = Arc::clone(&decoded_ns);
        let (decode_metrics, correlate_metrics) = (export.metrics.clone(), export.metrics.clone());
        let decode = tokio::spawn(async move {
            let mut decoder = Decoder::new(&decode_options, decode_window);
            // A live agent's decisions that depend on quiet (the per-call
            // TLS probes of a process whose connections went silent) need
            // a clock; a replay has only its events' time.
            let mut ticks = tokio::time::interval(DECODE_TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut clock = EventClock::default();
            loop {
                let events = tokio::select! {
                    events = raw_rx.recv() => match events {
                        Some(events) => events,
                        None => break,
                    },
                    _ = ticks.tick(), if live => {
                        let now_ns = clock
                            .tick(raw_rx.is_empty().then(WallClock::monotonic_now_ns));
                        decoded.store(now_ns, Ordering::Release);
                        decoder.tick(now_ns);
                        if let Some(metrics) = &decode_metrics {
                            metrics.set_losses(&decoder.losses());
                        }
                        Vec::new()
                    }
                };
                if let Some(last) = events.last() {
                    clock.observe(last.ids().ts_ns);
                }
                let messages: Vec<Message> = events
                    .into_iter()
                    .flat_map(|event| decoder.decode(event))
                    .collect();
                let requests = decoder.take_control();
                if let Some(control) = control.as_ref().filter(|_| !requests.is_empty()) {
                    // The capture loop may have ended first at shutdown.
                    let _ = control.send(requests);
                }
                if !messages.is_empty() && msg_tx.send(messages).await.is_err() {
                    return;
                }
            }
            log_losses(&decoder.losses());
            if decoder.grpc.tables_loaded + decoder.grpc.tables_refused > 0 {
                tracing::info!(
                    loaded = decoder.grpc.tables_loaded,
                    refused = decoder.grpc.tables_refused,
                    incomplete = decoder.tables.incomplete,
                    "copies of HPACK tables of connections older than podtrace"
                );
            }
            let (pods_decoded, pods_reused) = decoder.once.pods.counts();
            let (requests_decoded, requests_reused) = decoder.once.kv_requests.counts();
            if pods_decoded + requests_decoded > 0 {
                tracing::debug!(
                    pods_decoded,
                    pods_reused,
                    requests_decoded,
                    requests_reused,
                    "Pod objects in etcd values and etcd requests naming Pods, decoded once"
                );
            }
            if decoder.once.kv_requests.opaque > 0 {
                tracing::info!(
                    requests = decoder.once.kv_requests.opaque,
                    "not followed: etcd writes of Pod keys whose values are no stored object (not kube-apiserver's)"
                );
            }
            if decoder.once.not_followed > 0 {
                tracing::info!(
                    requests = decoder.once.not_followed,
                    "not decoded: etcd writes of Pods created before podtrace started or longer ago than the trace timeout"
                );
            }
            let tls = &decoder.tls;
            let decrypted = tls.stats();
            if decrypted.records > 0 {
                tracing::info!(
                    records = decrypted.records,
                    application_records = decrypted.application_records,
                    undecryptable = decrypted.undecryptable,
                    resyncs = decrypted.resyncs,
                    key_updates = decrypted.key_updates,
                    "TLS 1.3 records decrypted with the secrets read from the processes"
                );
            }
            if tls.rekeys > 0 {
                tracing::info!(
                    asked = tls.rekeys,
                    readers_adrift = tls.readers_adrift,
                    "TLS secrets read again: ciphertext came that no reader could open (a secret's \
                     record or more records than a reader can skip were lost, or a connection older \
                     than podtrace)"
                );
            }
            if tls.secrets_missed > 0 {
                tracing::info!(
                    connections = tls.secrets_missed,
                    "TLS connections opened while podtrace attached to their process: read through the per-call probes from their next request"
                );
            }
            if decoder.grpc.muted_total > 0 {
                tracing::info!(
                    connections = decoder.grpc.muted_total,
                    opaque_pod_writers = decoder.grpc.muted_opaque,
                    "muted: connections whose bytes were no longer copied (etcd clients of one resource other than Pods, clients writing Pod keys values that are no stored object, ttrpc)"
                );
            }
            let peers = &decoder.grpc.peers;
            if peers.joined + peers.unnamed + peers.errors + peers.hosts_dropped > 0 {
                tracing::info!(
                    joined = peers.joined,
                    appends_unnamed = peers.unnamed,
                    errors = peers.errors,
                    hosts_not_kept = peers.hosts_dropped,
                    "etcd peer streams older than podtrace placed from their bytes; Pod appends dropped before their stream named its members; frames that did not decode; peer hosts not kept"
                );
            }
        });
        let traces = export.traces.clone();
        let correlate = tokio::spawn(async move {
            let mut correlator = Correlator::new(clock, traces, window);
            for (tgid, name) in known.names {
                correlator.processes.seed(tgid, name);
            }
            for (tgid, name) in known.etcd_members {
                correlator.control_spans.etcd_member(tgid, Some(name));
            }
            let mut ticks = tokio::time::interval(CORRELATE_TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut clock = EventClock::default();
            loop {
                let activities = tokio::select! {
                    messages = msg_rx.recv() => match messages {
                        Some(messages) => messages
                            .into_iter()
                            .flat_map(|message| {
                                if let Some(ts_ns) = message.ts_ns() {
                                    clock.observe(ts_ns);
                                }
                                correlator.observe(message)
                            })
                            .collect(),
                        None => break,
                    },
                    _ = ticks.tick(), if live => {
                        // Idle since the last tick: everything decoded up
                        // to the decode stage's time has come (a channel
                        // sends in order).
                        let upstream_ns = msg_rx
                            .is_empty()
                            .then(|| decoded_ns.load(Ordering::Acquire));
                        if let Some(metrics) = &correlate_metrics {
                            metrics.set_losses(&correlator.losses());
                        }
                        correlator.tick(clock.tick(upstream_ns))
                    }
                };
                for activity in activities {
                    let tgid = match &activity {
                        Activity::Process(_) | Activity::Spans(_) => None,
                        Activity::Conn(conn) => Some(conn.conn.tgid),
                        Activity::FileSync(sync) => Some(sync.sync.ids.tgid),
                    };
                    let name = tgid.and_then(|tgid| correlator.processes.name_of(tgid));
                    if out_tx.send((activity, name)).await.is_err() {
                        return correlator.full_drops();
                    }
                }
            }
            for activity in correlator.finish() {
                if out_tx.send((activity, None)).await.is_err() {
                    break;
                }
            }
            if correlator.control_spans.not_followed > 0 {
                tracing::info!(
                    writes = correlator.control_spans.not_followed,
                    "Pod writes not traced: created before podtrace started, or after the creation ended"
                );
            }
            if correlator.component_spans.not_followed > 0 {
                tracing::info!(
                    calls = correlator.component_spans.not_followed,
                    "kubelet calls and API requests about Pods created before podtrace started (resyncs, status updates, deletions): not traced"
                );
            }
            if correlator.control_spans.replication.syncs_without_appends > 0 {
                tracing::info!(
                    syncs = correlator.control_spans.replication.syncs_without_appends,
                    "leader WAL syncs of Pod entries not kept while no member sent an append (a single member's): nothing to replicate"
                );
            }
            if correlator.assembly.after_creation > 0 {
                tracing::info!(
                    spans = correlator.assembly.after_creation,
                    "spans after a Pod's creation and before its teardown (status polls, resyncs): not exported"
                );
            }
            if correlator.assembly.own_pod_spans > 0 {
                tracing::info!(
                    spans = correlator.assembly.own_pod_spans,
                    "spans of the Pod this agent runs in: not exported"
                );
            }
            log_losses(&correlator.losses());
            correlator.full_drops()
        });
        let export = tokio::spawn(async move {
            let mut printer = TerminalPrinter::new(io::stdout());
            let mut sinks =
                SpanSinks::open(export.out.as_deref(), export.otlp, &export.traces.node_name)?;
            let mut waterfalls = Waterfalls::default();
            while let Some((activity, name)) = out_rx.recv().await {
                if !export.quiet {
                    printer.print(&terminal::format(&activity, |_| name.clone()))?;
                }
                if let Activity::Spans(spans) = &activity {
                    let metrics = export.metrics.as_deref();
                    sinks.export(spans, metrics);
                    for alert in alerts::check(&export.alerts, spans) {
                        raise(&alert, export.alert_webhook.as_deref());
                    }
                    if let Some(recent) = &export.recent {
                        if let Ok(mut recent) = recent.lock() {
                            recent.on_spans(spans);
                        }
                    }
                    if let Some(metrics) = metrics {
                        metrics.on_spans(spans);
                        if let Some(otlp) = &sinks.otlp {
                            metrics
                                .set_otlp_spans_dropped(otlp.counters().snapshot().spans_dropped());
                        }
                    }
                    for waterfall in waterfalls.on_spans(spans) {
                        printer.print(&waterfall)?;
                    }
                }
            }
            sinks.close().await;
            anyhow::Ok(())
        });
        Self {
            input,
            decode,
            correlate,
            export,
        }
    }

    /// Waits for the stages to drain; returns the correlator's untracked count.
    async fn join(self) -> anyhow::Result<u64> {
        drop(self.input);
        self.decode.await?;
        let untracked = self.correlate.await?;
        self.export.await??;
        Ok(untracked)
    }
}

/// Runs the pipeline on live events until `shutdown` is cancelled, printing
/// what happens to stdout and, when given a recorder, storing every record;
/// the decoding's CPU priority follows the backlog the reader sees.
pub async fn run(
    mut probes: Probes,
    shutdown: CancellationToken,
    mut recorder: Option<RecordingWriter>,
    export: ExportOptions,
    priority: Priority,
) -> anyhow::Result<RunSummary> {
    let clock = WallClock::anchor();
    let ring = probes.take_ring_buffer()?;
    let stats = Arc::new(ReaderStats::default());
    let stages_metrics = export.metrics.clone();
    let (control_tx, mut control) = mpsc::unbounded_channel();
    let stages = Stages::spawn(clock, probes.known_processes(), export, Some(control_tx));

    // What was open before start goes first, so the correlator knows the
    // connections and files later events refer to.
    for record in probes.initial_records() {
        if let Some(recorder) = recorder.as_mut() {
            recorder.write_record(&record)?;
        }
        stages.input.send(vec![parse_record(&record)?]).await?;
    }
    let (components_tx, mut new_components) = mpsc::unbounded_channel();
    let capture = start_reader(
        ring,
        stages.input.clone(),
        Arc::clone(&stats),
        shutdown.clone(),
        recorder,
        components_tx,
        priority,
    )?;

    let mut reported = DropCounts::default();
    let mut interval = tokio::time::interval(DROP_REPORT_INTERVAL);
    let metrics = stages_metrics;
    if let Some(metrics) = &metrics {
        let (attached, reattached) = probes.hpack_probes_attached();
        metrics.set_hpack_probes(attached, reattached);
        let (attached, reattached) = probes.tls_call_probes_attached();
        metrics.set_tls_call_probes(attached, reattached);
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(tgid) = new_components.recv() => probes.attach_go_probes(tgid),
            Some(requests) = control.recv() => {
                probes.control(&requests);
                if let Some(metrics) = &metrics {
                    let (attached, reattached) = probes.hpack_probes_attached();
                    metrics.set_hpack_probes(attached, reattached);
                    let (attached, reattached) = probes.tls_call_probes_attached();
                    metrics.set_tls_call_probes(attached, reattached);
                    let (muted, total, refused) = probes.muted_connections();
                    metrics.set_muted_connections(muted, total, refused);
                }
            }
            _ = interval.tick() => {
                let now = probes.drop_counts()?;
                report_new_drops(&reported, &now);
                if let Some(metrics) = &metrics {
                    metrics.set_kernel_drops(&now);
                }
                reported = now;
            }
        }
    }

    let recorder = capture
        .await
        .map_err(|_| anyhow::anyhow!("the ring buffer reader ended without a result"))??;
    let recorded = recorder.map(RecordingWriter::finish).transpose()?;
    let untracked_processes = stages.join().await?;
    let drops = probes.drop_counts()?;
    report_new_drops(&reported, &drops);
    Ok(RunSummary {
        events: stats.events.load(Ordering::Relaxed),
        malformed: stats.malformed.load(Ordering::Relaxed),
        untracked_processes,
        drops,
        recorded,
    })
}

/// What a replay saw.
#[derive(Clone, Debug)]
pub struct ReplaySummary {
    /// Records read.
    pub records: u64,
    /// Records that did not parse (each logged at debug level).
    pub malformed: u64,
    /// The file ended inside a record.
    pub truncated: bool,
}

/// Feeds a recording through the same stages as live events, or, with
/// `dump`, prints every event readably instead (payload excerpts included;
/// TLS 1.3 ciphertext whose secret the recording holds shown decrypted).
pub async fn replay<R: io::Read>(
    mut reader: RecordingReader<R>,
    dump: bool,
    export: ExportOptions,
) -> anyhow::Result<ReplaySummary> {
    let clock = reader.clock();
    let known = KnownProcesses {
        names: reader.header.known_processes.clone(),
        etcd_members: reader.header.etcd_members.clone(),
    };
    let stages = (!dump).then(|| Stages::spawn(clock, known, export, None));
    let mut malformed = 0;
    // Dumps show TLS 1.3 traffic whose secret the recording holds as the
    // decode stage reads it: decrypted.
    let mut tls = TlsStreams::default();
    // Dumps write here; without dump the export stage prints to stdout, and
    // holding its lock while feeding the stages would deadlock them once
    // the channels fill.
    let mut out = io::BufWriter::new(io::stdout());
    // Fed in batches, as the ring buffer reader feeds live events.
    let mut batch = Vec::new();
    while let Some(record) = reader.next_record()? {
        let event = match parse_record(&record) {
            Ok(event) => event,
            Err(error) => {
                malformed += 1;
                tracing::debug!(%error, record = reader.records, "skipping malformed record");
                continue;
            }
        };
        match &stages {
            Some(stages) => {
                batch.push(event);
                if batch.len() >= REPLAY_BATCH {
                    stages.input.send(std::mem::take(&mut batch)).await?;
                }
            }
            None => {
                let lines = tls
                    .offline(event)
                    .into_iter()
                    .map(|event| writeln!(out, "{}", dump::format_event(&event, &clock)));
                if let Err(err) = lines.collect::<io::Result<()>>() {
                    if err.kind() == io::ErrorKind::BrokenPipe {
                        break;
                    }
                    return Err(err.into());
                }
            }
        }
    }
    if let Err(err) = out.flush() {
        if err.kind() != io::ErrorKind::BrokenPipe {
            return Err(err.into());
        }
    }
    drop(out);
    if let Some(stages) = stages {
        if !batch.is_empty() {
            stages.input.send(batch).await?;
        }
        stages.join().await?;
    }
    Ok(ReplaySummary {
        records: reader.records,
        malformed,
        truncated: reader.truncated,
    })
}

/// Logs an alert and, with a webhook, POSTs it (on a blocking thread: a
/// slow webhook must not hold up the spans).
fn raise(alert: &Alert, webhook: Option<&str>) {
    tracing::warn!(
        phase = alert.phase,
        seconds = alert.seconds,
        threshold = alert.threshold_seconds,
        namespace = alert.namespace.as_deref().unwrap_or("-"),
        pod = alert.pod.as_deref().unwrap_or("-"),
        trace_id = %alert.trace_id,
        "alert: phase over its threshold"
    );
    if let Some(url) = webhook {
        let (url, alert) = (url.to_owned(), alert.clone());
        tokio::task::spawn_blocking(move || {
            let sent = serde_json::to_string(&alert)
                .map_err(|e| e.to_string())
                .and_then(|body| {
                    ureq::post(&url)
                        .header("content-type", "application/json")
                        .send(body)
                        .map_err(|e| e.to_string())
                });
            if let Err(error) = sent {
                tracing::warn!(%error, %url, "alert webhook failed");
            }
        });
    }
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

#[cfg(test)]
mod tests {
    use super::EventClock;

    #[test]
    fn a_lagging_stage_keeps_to_its_events_time_and_an_idle_one_to_the_stage_before() {
        let mut clock = EventClock::default();
        clock.observe(1_000);
        clock.observe(900);
        // Events still coming: the stage before's 50_000 is not reached yet.
        assert_eq!(clock.tick(Some(50_000)), 1_000);
        // A tick that raced queued input: not idle either.
        assert_eq!(clock.tick(None), 1_000);
        // A tick with none: caught up.
        assert_eq!(clock.tick(Some(60_000)), 60_000);
        // Older events after that do not turn time back.
        clock.observe(59_000);
        assert_eq!(clock.tick(Some(70_000)), 60_000);
    }
}
