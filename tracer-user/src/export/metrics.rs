//! Prometheus metrics: how long each phase of a Pod's creation took, as
//! histograms whose exemplars carry the trace id (a click from a slow bucket
//! in Grafana to the trace), counters of traces and of losses, and podtrace's
//! own CPU and memory.
//!
//! In: finished spans (the same the exporters get), kernel drop counts, the
//! OTLP exporter's counts. Out: the OpenMetrics text exposition (exemplars
//! exist only in OpenMetrics), served over HTTP by [`serve`].

use crate::correlate::contract::{PodChange, What, attr};

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter, exemplar::HistogramWithExemplars, family::Family, gauge::Gauge,
        histogram::exponential_buckets,
    },
    registry::Registry,
};
use tokio_util::sync::CancellationToken;

use super::{otlp_json, recent::RecentTraces};

use crate::{
    capture::DropCounts,
    correlate::{
        Span,
        span::{SpanKind, SpanStatus},
    },
    stats::Loss,
};

/// The phases a Pod creation is cut into, and the span that measures each.
/// Phases the spans of this release do not cover yet (scheduling queue,
/// kubelet sync, volume wait, the apiserver's request) are absent, not zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Root span: create write to the write reporting the Pod Running.
    EndToEnd,
    /// etcd's handling of the create write (propose, WAL, commit, apply).
    EtcdCommit,
    /// The WAL append and fdatasync that made a write durable.
    WalFsync,
    /// The scheduler's binding write.
    Binding,
    /// CRI RunPodSandbox as containerd handled it.
    Sandbox,
    /// CRI PullImage.
    ImagePull,
    /// CRI CreateContainer.
    ContainerCreate,
    /// CRI StartContainer.
    ContainerStart,
    /// kube-apiserver's handling of the create request.
    CreateRequest,
    /// One admission pass (mutating or validating) of a Pod write. Only
    /// with `--apiserver-probes all`: the default probes the Pod registry,
    /// whose spans hold admission together with authentication or the
    /// storage write, so no sample would be admission's alone.
    Admission,
    /// The Pod in the scheduler's queue (added → its scheduling cycle).
    SchedulingQueue,
    /// A successful scheduling cycle (filter, score, reserve, permit).
    Scheduling,
    /// The Pod handed to the kubelet → its pod worker's first sync.
    KubeletDispatch,
    /// The kubelet waiting for the Pod's volumes.
    VolumeWait,
}

impl Phase {
    /// Every phase, in the order of a Pod's creation.
    pub const ALL: [Phase; 14] = [
        Phase::EndToEnd,
        Phase::CreateRequest,
        Phase::Admission,
        Phase::EtcdCommit,
        Phase::WalFsync,
        Phase::SchedulingQueue,
        Phase::Scheduling,
        Phase::Binding,
        Phase::KubeletDispatch,
        Phase::VolumeWait,
        Phase::Sandbox,
        Phase::ImagePull,
        Phase::ContainerCreate,
        Phase::ContainerStart,
    ];

    /// The `phase` label value.
    pub fn name(self) -> &'static str {
        match self {
            Phase::EndToEnd => "end_to_end",
            Phase::EtcdCommit => "etcd_commit",
            Phase::WalFsync => "wal_fsync",
            Phase::Binding => "binding",
            Phase::Sandbox => "sandbox",
            Phase::ImagePull => "image_pull",
            Phase::ContainerCreate => "container_create",
            Phase::ContainerStart => "container_start",
            Phase::CreateRequest => "create_request",
            Phase::Admission => "admission",
            Phase::SchedulingQueue => "scheduling_queue",
            Phase::Scheduling => "scheduling",
            Phase::KubeletDispatch => "kubelet_dispatch",
            Phase::VolumeWait => "volume_wait",
        }
    }

    /// The phase a span measures, and how long it took, if it measures one.
    /// Server spans measure the CRI and etcd phases: the callee's time is
    /// the same whether or not the caller was followed.
    pub fn of(span: &Span) -> Option<(Phase, f64)> {
        let seconds = |ns: u64| ns as f64 / 1e9;
        let duration = seconds(span.end_unix_ns.saturating_sub(span.start_unix_ns));
        if span.parent_span_id.is_none() {
            let complete = span.bool_attribute(attr::TRACE_COMPLETE) == Some(true);
            return complete.then_some((Phase::EndToEnd, duration));
        }
        let what = What::of(span);
        if what == What::EtcdWal {
            let fsync = u64::try_from(span.int_attribute(attr::ETCD_WAL_FSYNC_NS)?).ok()?;
            return Some((Phase::WalFsync, seconds(fsync)));
        }
        // A failed call's duration is not the phase's latency.
        if matches!(span.status, SpanStatus::Error(_)) {
            return None;
        }
        // The components' own spans (correlate::component_spans).
        let component = match what {
            What::ApiserverPodCreate => Some(Phase::CreateRequest),
            What::Admission => Some(Phase::Admission),
            What::SchedulerQueue => Some(Phase::SchedulingQueue),
            What::SchedulingCycle => Some(Phase::Scheduling),
            What::KubeletDispatch => Some(Phase::KubeletDispatch),
            What::KubeletVolumeWait => Some(Phase::VolumeWait),
            _ => None,
        };
        if let Some(phase) = component {
            return Some((phase, duration));
        }
        if span.kind != SpanKind::Server {
            return None;
        }
        let phase = match (
            span.string_attribute(attr::RPC_METHOD)?,
            PodChange::of(span),
        ) {
            ("Txn" | "Put", Some(PodChange::Created)) => Phase::EtcdCommit,
            ("Txn" | "Put", Some(PodChange::BoundTo(_))) => Phase::Binding,
            ("RunPodSandbox", _) => Phase::Sandbox,
            ("PullImage", _) => Phase::ImagePull,
            ("CreateContainer", _) => Phase::ContainerCreate,
            ("StartContainer", _) => Phase::ContainerStart,
            _ => return None,
        };
        Some((phase, duration))
    }
}

/// The query of `GET /traces`.
#[derive(Debug, serde::Deserialize)]
struct PodQuery {
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceExemplar {
    trace_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageReasonLabel {
    stage: &'static str,
    reason: &'static str,
}

/// podtrace's metrics. Cheap to update from the export stage; encoded at
/// each scrape.
pub struct Metrics {
    registry: Registry,
    phases: Family<PhaseLabel, HistogramWithExemplars<TraceExemplar>>,
    pods_traced: Counter,
    incomplete_traces: Counter,
    kernel_drops: Family<ReasonLabel, Gauge>,
    losses: Family<StageReasonLabel, Counter>,
    export_failures: Counter,
    otlp_spans_dropped: Gauge,
    hpack_probes_attached: Gauge,
    hpack_probes_reattached: Gauge,
    tls_call_probes_attached: Gauge,
    tls_call_probes_reattached: Gauge,
    muted_connections: Gauge,
    muted_connections_total: Gauge,
    mutes_refused: Gauge,
    cpu_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    resident_bytes: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Histogram buckets: 0.5 ms to ~33 s, doubling — WAL fsyncs take a
/// millisecond, Pod starts seconds.
fn buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 17)
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("podtrace");
        let phases =
            Family::<PhaseLabel, HistogramWithExemplars<TraceExemplar>>::new_with_constructor(
                || HistogramWithExemplars::new(buckets()),
            );
        registry.register(
            "pod_phase_duration_seconds",
            "Duration of each phase of a Pod's creation; exemplars carry the trace id",
            phases.clone(),
        );
        let pods_traced: Counter = registered(
            &mut registry,
            "pods_traced",
            "Pod creations traced to the end (reported Running)",
        );
        let incomplete_traces: Counter = registered(
            &mut registry,
            "incomplete_traces",
            "Pod traces exported incomplete (timed out, deleted, or podtrace stopped first)",
        );
        let kernel_drops: Family<ReasonLabel, Gauge> = registered(
            &mut registry,
            "kernel_drops",
            "Events, bytes or entries the kernel side dropped or cut, by reason (a total since start)",
        );
        let losses: Family<StageReasonLabel, Counter> = registered(
            &mut registry,
            "losses",
            "What the user-space stages lost or left out since start, by stage and reason \
             (the values the agent's exit log gives)",
        );
        let export_failures: Counter = registered(
            &mut registry,
            "export_failures",
            "Span batches the OTLP-JSON file could not take",
        );
        let otlp_spans_dropped: Gauge = registered(
            &mut registry,
            "otlp_spans_dropped",
            "Spans the OTLP exporter dropped (queue full or export failed; a total since start)",
        );
        let hpack_probes_attached: Gauge = registered(
            &mut registry,
            "hpack_probes_attached",
            "Executables whose HPACK header-field probes are attached (only while a connection older than podtrace needs them)",
        );
        let hpack_probes_reattached: Gauge = registered(
            &mut registry,
            "hpack_probes_reattached",
            "Times an executable's HPACK probes were attached again after a detach (a total since start)",
        );
        let tls_call_probes_attached: Gauge = registered(
            &mut registry,
            "tls_call_probes_attached",
            "Executables whose per-call TLS probes (crypto/tls Conn.Write and Conn.Read) are attached (only while a connection's plaintext comes from them: older than podtrace and not keyed yet, or not TLS 1.3)",
        );
        let tls_call_probes_reattached: Gauge = registered(
            &mut registry,
            "tls_call_probes_reattached",
            "Times an executable's per-call TLS probes were attached again after a detach (a total since start)",
        );
        let muted_connections: Gauge = registered(
            &mut registry,
            "muted_connections",
            "Connections whose bytes the kernel programs no longer copy (etcd clients of one resource other than Pods, clients writing under Pod keys values that are no stored object, connections that speak neither HTTP/2 nor HTTP/1: ttrpc)",
        );
        let muted_connections_total: Gauge = registered(
            &mut registry,
            "muted_connections_since_start",
            "Connections muted since start (a total)",
        );
        let mutes_refused: Gauge = registered(
            &mut registry,
            "mutes_refused",
            "Connections left unmuted because the kernel's map of muted connections was full (a total since start)",
        );
        let cpu_seconds: Gauge<f64, std::sync::atomic::AtomicU64> = registered(
            &mut registry,
            "process_cpu_seconds",
            "CPU time podtrace has used, user and system (a total since start)",
        );
        let resident_bytes: Gauge = registered(
            &mut registry,
            "process_resident_memory_bytes",
            "podtrace's resident memory",
        );
        Self {
            registry,
            phases,
            pods_traced,
            incomplete_traces,
            kernel_drops,
            losses,
            export_failures,
            otlp_spans_dropped,
            hpack_probes_attached,
            hpack_probes_reattached,
            tls_call_probes_attached,
            tls_call_probes_reattached,
            muted_connections,
            muted_connections_total,
            mutes_refused,
            cpu_seconds,
            resident_bytes,
        }
    }
}

/// A new metric, registered under `name` with `help`: the registry keeps one
/// handle, the caller the other.
fn registered<M: prometheus_client::registry::Metric + Clone + Default>(
    registry: &mut Registry,
    name: &str,
    help: &str,
) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// Takes finished spans: phase durations, traced and incomplete Pods.
    pub fn on_spans(&self, spans: &[Span]) {
        for span in spans {
            // A deletion's root is neither a creation traced nor one left
            // incomplete.
            if span.parent_span_id.is_none() && What::of(span) != What::DeletionRoot {
                match Phase::of(span) {
                    Some(_) => self.pods_traced.inc(),
                    None => self.incomplete_traces.inc(),
                };
            }
            if let Some((phase, seconds)) = Phase::of(span) {
                self.phases
                    .get_or_create(&PhaseLabel {
                        phase: phase.name(),
                    })
                    .observe(
                        seconds,
                        Some(TraceExemplar {
                            trace_id: span.trace_id.to_hex(),
                        }),
                        None,
                    );
            }
        }
    }

    /// The kernel side's drop counters, as last read.
    pub fn set_kernel_drops(&self, drops: &DropCounts) {
        for (reason, count) in drops.iter() {
            self.kernel_drops
                .get_or_create(&ReasonLabel {
                    reason: reason.name(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// A stage's loss counts, as last listed (totals since start: each
    /// counter moves up to its count).
    pub fn set_losses(&self, losses: &[Loss]) {
        for loss in losses {
            let counter = self.losses.get_or_create(&StageReasonLabel {
                stage: loss.stage,
                reason: loss.reason,
            });
            counter.inc_by(loss.count.saturating_sub(counter.get()));
        }
    }

    /// How many connections are muted, were muted since start, and how many
    /// mutes the kernel's map had no room for (see `capture::CaptureControl::Mute`).
    pub fn set_muted_connections(&self, muted: usize, total: u64, refused: u64) {
        self.muted_connections
            .set(i64::try_from(muted).unwrap_or(i64::MAX));
        self.muted_connections_total
            .set(i64::try_from(total).unwrap_or(i64::MAX));
        self.mutes_refused
            .set(i64::try_from(refused).unwrap_or(i64::MAX));
    }

    /// How many executables have their HPACK probes attached, and how many
    /// times they were attached again.
    pub fn set_hpack_probes(&self, attached: usize, reattached: u64) {
        self.hpack_probes_attached
            .set(i64::try_from(attached).unwrap_or(i64::MAX));
        self.hpack_probes_reattached
            .set(i64::try_from(reattached).unwrap_or(i64::MAX));
    }

    /// How many executables have their per-call TLS probes attached, and
    /// how many times they were attached again.
    pub fn set_tls_call_probes(&self, attached: usize, reattached: u64) {
        self.tls_call_probes_attached
            .set(i64::try_from(attached).unwrap_or(i64::MAX));
        self.tls_call_probes_reattached
            .set(i64::try_from(reattached).unwrap_or(i64::MAX));
    }

    /// A batch of spans the OTLP-JSON file could not take.
    pub fn export_failed(&self) {
        self.export_failures.inc();
    }

    /// The OTLP exporter's dropped-span total.
    pub fn set_otlp_spans_dropped(&self, dropped: u64) {
        self.otlp_spans_dropped
            .set(i64::try_from(dropped).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text, with podtrace's own CPU and memory read now.
    pub fn encode(&self) -> String {
        if let Some((cpu, resident)) = own_usage() {
            self.cpu_seconds.set(cpu);
            self.resident_bytes
                .set(i64::try_from(resident).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// CPU seconds (user + system) and resident bytes of this process, from
/// /proc/self/stat and /proc/self/statm.
fn own_usage() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may contain spaces, in parens.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory preconditions.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        ticks as f64 / hz.max(1) as f64,
        resident_pages * u64::try_from(page).ok()?,
    ))
}

/// Serves `GET /metrics` and, for `podtrace explain`,
/// `GET /traces?namespace=NS&name=POD` (the Pod's recent traces as OTLP-JSON
/// lines) on `addr` until `shutdown`; returns the address bound (port 0
/// picks one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    traces: Arc<Mutex<RecentTraces>>,
    node_name: String,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    use axum::{Router, extract::Query, http::header, routing::get};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let pod_traces = get(move |Query(pod): Query<PodQuery>| {
        let traces = Arc::clone(&traces);
        let node_name = node_name.clone();
        async move {
            let spans = match traces.lock() {
                Ok(traces) => traces.of_pod(&pod.namespace, &pod.name),
                Err(_) => Vec::new(),
            };
            let body = otlp_json::to_line(&spans, &node_name).unwrap_or_default();
            ([(header::CONTENT_TYPE, "application/x-ndjson")], body)
        }
    });
    let app = Router::new().route("/traces", pod_traces).route(
        "/metrics",
        get(move || {
            let metrics = Arc::clone(&metrics);
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }
        }),
    );
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::warn!(%error, "metrics server stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::contract::name;
    use crate::correlate::span::SpanKey;
    use crate::correlate::span::{AttributeValue, SpanId, TraceId};

    fn span(
        name: &str,
        kind: SpanKind,
        parent: bool,
        ms: u64,
        attributes: Vec<(&str, AttributeValue)>,
    ) -> Span {
        let trace = TraceId::for_pod("c", "uid-1");
        Span {
            trace_id: trace,
            span_id: SpanId::for_key(trace, name.as_bytes()),
            parent_span_id: parent.then(|| SpanId::of(trace, &SpanKey::Root)),
            name: name.to_owned(),
            kind,
            start_unix_ns: 1_000_000_000,
            end_unix_ns: 1_000_000_000 + ms * 1_000_000,
            attributes: attributes
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            status: SpanStatus::Unset,
            links: Vec::new(),
        }
    }

    #[test]
    fn phases_get_samples_with_the_trace_id_as_exemplar() {
        let metrics = Metrics::default();
        let text = |s: &str| AttributeValue::String(s.to_owned());
        metrics.on_spans(&[
            span(
                &name::pod_create("default", "web"),
                SpanKind::Internal,
                false,
                900,
                vec![(attr::TRACE_COMPLETE, AttributeValue::Bool(true))],
            ),
            span(
                "etcdserverpb.KV/Txn",
                SpanKind::Server,
                true,
                2,
                vec![
                    (attr::RPC_METHOD, text("Txn")),
                    (attr::K8S_POD_CHANGE, text("created")),
                ],
            ),
            // The client side of the same write is not a second sample.
            span(
                "etcdserverpb.KV/Txn",
                SpanKind::Client,
                true,
                3,
                vec![
                    (attr::RPC_METHOD, text("Txn")),
                    (attr::K8S_POD_CHANGE, text("created")),
                ],
            ),
            span(
                name::ETCD_WAL,
                SpanKind::Internal,
                true,
                1,
                vec![(attr::ETCD_WAL_FSYNC_NS, AttributeValue::Int(400_000))],
            ),
            span(
                "runtime.v1.RuntimeService/StartContainer",
                SpanKind::Server,
                true,
                50,
                vec![(attr::RPC_METHOD, text("StartContainer"))],
            ),
        ]);
        let exposition = metrics.encode();
        let trace = TraceId::for_pod("c", "uid-1").to_hex();
        for phase in ["end_to_end", "etcd_commit", "wal_fsync", "container_start"] {
            let count = format!("podtrace_pod_phase_duration_seconds_count{{phase=\"{phase}\"}} 1");
            assert!(exposition.contains(&count), "{count} in {exposition}");
        }
        assert!(
            exposition.contains(&format!("# {{trace_id=\"{trace}\"}} 0.0004")),
            "{exposition}"
        );
        assert!(
            exposition.contains("podtrace_pods_traced_total 1"),
            "{exposition}"
        );
        assert!(
            exposition.contains("podtrace_process_resident_memory_bytes"),
            "{exposition}"
        );
    }

    /// The stages' loss counts are counters that follow the totals they are
    /// given, per stage and reason; every stage's list has one of each.
    #[test]
    fn stage_losses_are_counters_by_stage_and_reason() {
        use crate::{
            capture::clock::WallClock,
            correlate::{Correlator, TraceConfig},
            decode::{Decoder, follow_window::FollowWindow},
            stats::Loss,
        };
        let metrics = Metrics::default();
        metrics.set_losses(&[Loss::decode("tls_records_undecryptable", 2)]);
        metrics.set_losses(&[
            Loss::decode("tls_records_undecryptable", 5),
            Loss::correlate("spans_unattributed", 1),
        ]);
        let exposition = metrics.encode();
        for line in [
            "podtrace_losses_total{stage=\"decode\",reason=\"tls_records_undecryptable\"} 5",
            "podtrace_losses_total{stage=\"correlate\",reason=\"spans_unattributed\"} 1",
        ] {
            assert!(exposition.contains(line), "{line} in {exposition}");
        }
        let mut listed = Decoder::default().losses();
        let clock = WallClock::from_offset(0);
        let traces = TraceConfig::default();
        let window = FollowWindow::new(clock, None, traces.trace_timeout_ns);
        listed.extend(Correlator::new(clock, traces, window).losses());
        let mut reasons: Vec<_> = listed
            .iter()
            .map(|loss| (loss.stage, loss.reason))
            .collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), listed.len(), "{listed:#?}");
        assert!(listed.iter().all(|loss| loss.count == 0), "{listed:#?}");
    }

    #[test]
    fn an_incomplete_root_is_counted_and_not_a_sample() {
        let metrics = Metrics::default();
        metrics.on_spans(&[span(
            &name::pod_create("default", "web"),
            SpanKind::Internal,
            false,
            900,
            vec![(attr::TRACE_COMPLETE, AttributeValue::Bool(false))],
        )]);
        let exposition = metrics.encode();
        assert!(
            exposition.contains("podtrace_incomplete_traces_total 1"),
            "{exposition}"
        );
        assert!(!exposition.contains("phase=\"end_to_end\""), "{exposition}");
    }

    #[test]
    fn a_deletion_root_is_no_creation_traced_or_incomplete() {
        let metrics = Metrics::default();
        metrics.on_spans(&[span(
            &name::pod_delete("default", "web"),
            SpanKind::Internal,
            false,
            300,
            Vec::new(),
        )]);
        let exposition = metrics.encode();
        assert!(
            exposition.contains("podtrace_incomplete_traces_total 0"),
            "{exposition}"
        );
        assert!(
            exposition.contains("podtrace_pods_traced_total 0"),
            "{exposition}"
        );
    }
}
