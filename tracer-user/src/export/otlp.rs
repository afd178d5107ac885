//! OTLP export: spans → an OpenTelemetry collector, Jaeger or Tempo, over
//! gRPC (tonic) or HTTP/protobuf (hyper), with the `opentelemetry-otlp` client.
//!
//! In: [`Span`]s, handed to [`OtlpExporter::export`], which never waits: a
//! span goes into a bounded queue or, when the queue is full, is counted as
//! dropped. Out: `ExportTraceServiceRequest`s of at most
//! [`OtlpOptions::max_batch_spans`] spans, sent by one tokio task, each batch
//! retried with bounded exponential backoff while the endpoint is unreachable
//! and dropped (and counted) when the attempts are exhausted. Memory is
//! bounded by the queue plus the one batch in flight. [`OtlpCounters`] holds
//! what the agent reports: spans sent and dropped, batches sent and failed.
//!
//! Our trace and span ids are kept exactly as correlate derived them (agents
//! on different nodes must agree on them, ARCHITECTURE.md, "Traces without a collector"); every span carries
//! the resource `service.name=podtrace`, `service.version`, `host.name` and
//! `k8s.node.name`.

use crate::correlate::contract::attr;

use std::{
    borrow::Cow,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    InstrumentationScope, KeyValue, Value,
    trace::{self as otel, SpanContext, TraceFlags, TraceState},
};
use opentelemetry_otlp::{ExporterBuildError, RetryPolicy, WithExportConfig as _};
use opentelemetry_sdk::{
    Resource,
    trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks},
};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::correlate::span::{AttributeValue, Span, SpanKind, SpanLink, SpanStatus};

/// The instrumentation scope and `service.name` of everything podtrace exports.
const SERVICE_NAME: &str = "podtrace";
/// podtrace's version, as `service.version` and the scope's version.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Path of the traces endpoint of an OTLP/HTTP receiver.
const HTTP_TRACES_PATH: &str = "/v1/traces";

/// How spans travel to the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (usually port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (usually port 4318).
    HttpProtobuf,
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        })
    }
}

/// How a batch is retried while the endpoint does not take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryOptions {
    /// Attempts per batch, the first included; past them the batch is dropped.
    pub max_attempts: u32,
    /// Wait after the first failed attempt; doubled after each further one.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryOptions {
    /// 5 attempts, 200 ms doubling up to 5 s: about 3 s of trying per batch,
    /// enough to ride out a collector restart without holding the queue for long.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Where and how [`OtlpExporter`] sends spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpOptions {
    /// The receiver, e.g. `http://otel-collector:4317` (gRPC) or
    /// `http://otel-collector:4318` (HTTP). For HTTP, an endpoint without a
    /// path gets `/v1/traces`; one with a path is used as given. Plaintext
    /// only: no TLS stack is built in.
    pub endpoint: String,
    /// gRPC or HTTP/protobuf.
    pub protocol: OtlpProtocol,
    /// This agent's Kubernetes node (`k8s.node.name`).
    pub node_name: String,
    /// This host's name (`host.name`), omitted when `None`.
    pub host_name: Option<String>,
    /// Spans waiting to be sent; past it new spans are dropped and counted.
    pub queue_capacity: usize,
    /// Most spans in one export request.
    pub max_batch_spans: usize,
    /// Longest a span waits for its batch to fill before the batch is sent.
    pub batch_timeout: Duration,
    /// Longest one export attempt may take.
    pub export_timeout: Duration,
    /// Retries of a batch that could not be sent.
    pub retry: RetryOptions,
}

impl OtlpOptions {
    /// Options with the defaults: a queue of 4096 spans, batches of up to
    /// 512 spans sent at least every second, 10 s per attempt,
    /// [`RetryOptions::default`], and `host.name` from the kernel.
    pub fn new(
        endpoint: impl Into<String>,
        protocol: OtlpProtocol,
        node_name: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol,
            node_name: node_name.into(),
            host_name: local_host_name(),
            queue_capacity: 4096,
            max_batch_spans: 512,
            batch_timeout: Duration::from_secs(1),
            export_timeout: Duration::from_secs(10),
            retry: RetryOptions::default(),
        }
    }
}

/// This host's name as the kernel knows it (the UTS namespace's, which is
/// the node's for an agent in the host network namespace).
pub fn local_host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// Why an [`OtlpExporter`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// An option is out of range.
    #[error("invalid OTLP exporter option {option}: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not called from inside a tokio runtime.
    #[error("the OTLP exporter must be started inside a tokio runtime")]
    NoRuntime,
    /// The OTLP client rejected the configuration (e.g. a malformed endpoint
    /// or an `https` one).
    #[error("cannot build the OTLP {protocol} client for {endpoint}: {source}")]
    Client {
        /// The endpoint as given.
        endpoint: String,
        /// The protocol.
        protocol: OtlpProtocol,
        /// The client's reason.
        #[source]
        source: ExporterBuildError,
    },
}

/// What the exporter did so far; see [`OtlpCounters::snapshot`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtlpCounts {
    /// Spans taken into the queue.
    pub spans_queued: u64,
    /// Spans the endpoint accepted.
    pub spans_sent: u64,
    /// Spans dropped because the queue was full.
    pub spans_dropped_queue_full: u64,
    /// Spans dropped because their batch could not be sent.
    pub spans_dropped_export_failed: u64,
    /// Export requests the endpoint accepted.
    pub batches_sent: u64,
    /// Batches given up after their last attempt.
    pub batches_failed: u64,
    /// Export attempts that failed, including those retried successfully.
    pub attempts_failed: u64,
    /// Spans still queued or in flight when shutdown's time was up.
    pub spans_unflushed: u64,
}

impl OtlpCounts {
    /// All spans lost, whatever the reason.
    pub fn spans_dropped(&self) -> u64 {
        self.spans_dropped_queue_full + self.spans_dropped_export_failed + self.spans_unflushed
    }
}

/// The exporter's counters, shared with whoever reports them. Updated with
/// relaxed atomics: each is exact, but a snapshot taken while spans flow may
/// mix counts from slightly different moments.
#[derive(Debug, Default)]
pub struct OtlpCounters {
    spans_queued: AtomicU64,
    spans_sent: AtomicU64,
    spans_dropped_queue_full: AtomicU64,
    spans_dropped_export_failed: AtomicU64,
    batches_sent: AtomicU64,
    batches_failed: AtomicU64,
    attempts_failed: AtomicU64,
}

impl OtlpCounters {
    /// The counts now.
    pub fn snapshot(&self) -> OtlpCounts {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        OtlpCounts {
            spans_queued: load(&self.spans_queued),
            spans_sent: load(&self.spans_sent),
            spans_dropped_queue_full: load(&self.spans_dropped_queue_full),
            spans_dropped_export_failed: load(&self.spans_dropped_export_failed),
            batches_sent: load(&self.batches_sent),
            batches_failed: load(&self.batches_failed),
            attempts_failed: load(&self.attempts_failed),
            spans_unflushed: 0,
        }
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Sends spans to an OTLP endpoint from a task of its own; see the module
/// documentation.
#[derive(Debug)]
pub struct OtlpExporter {
    queue: mpsc::Sender<Span>,
    counters: Arc<OtlpCounters>,
    /// Set by [`OtlpExporter::shutdown`]: no more backoff, one attempt per batch.
    stopping: CancellationToken,
    task: JoinHandle<()>,
}

impl OtlpExporter {
    /// Builds the client (connections are made lazily, at the first export)
    /// and starts the exporter task on the current tokio runtime.
    pub fn start(options: OtlpOptions) -> Result<OtlpExporter, OtlpError> {
        if options.queue_capacity == 0 {
            return Err(OtlpError::InvalidOption {
                option: "queue_capacity",
                reason: "must be at least 1",
            });
        }
        if options.max_batch_spans == 0 {
            return Err(OtlpError::InvalidOption {
                option: "max_batch_spans",
                reason: "must be at least 1",
            });
        }
        if options.retry.max_attempts == 0 {
            return Err(OtlpError::InvalidOption {
                option: "retry.max_attempts",
                reason: "must be at least 1",
            });
        }
        // Both the tonic channel and our task need a runtime; say so instead
        // of panicking inside tokio.
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| OtlpError::NoRuntime)?;
        let mut client = build_client(&options).map_err(|source| OtlpError::Client {
            endpoint: options.endpoint.clone(),
            protocol: options.protocol,
            source,
        })?;
        client.set_resource(&podtrace_resource(
            &options.node_name,
            options.host_name.as_deref(),
        ));

        let (queue, receiver) = mpsc::channel(options.queue_capacity);
        let counters = Arc::new(OtlpCounters::default());
        let stopping = CancellationToken::new();
        let task = ExportTask {
            client,
            scope: podtrace_scope(),
            counters: Arc::clone(&counters),
            stopping: stopping.clone(),
            endpoint: options.endpoint,
            max_batch_spans: options.max_batch_spans,
            batch_timeout: options.batch_timeout,
            export_timeout: options.export_timeout,
            retry: options.retry,
            failing: false,
            dropped_while_failing: 0,
        };
        let task = runtime.spawn(task.run(receiver));
        Ok(OtlpExporter {
            queue,
            counters,
            stopping,
            task,
        })
    }

    /// Queues a span for export without waiting. Returns `false`, and counts
    /// the span as dropped, when the queue is full.
    pub fn export(&self, span: Span) -> bool {
        match self.queue.try_send(span) {
            Ok(()) => {
                add(&self.counters.spans_queued, 1);
                true
            }
            // Closed cannot happen while `self` holds the sender and the
            // task runs; if the task died, the span is lost all the same.
            Err(mpsc::error::TrySendError::Full(_) | mpsc::error::TrySendError::Closed(_)) => {
                add(&self.counters.spans_dropped_queue_full, 1);
                false
            }
        }
    }

    /// The counters, to report while the exporter runs.
    pub fn counters(&self) -> Arc<OtlpCounters> {
        Arc::clone(&self.counters)
    }

    /// Stops taking spans and sends what is queued, one attempt per batch
    /// (a batch being retried gets no more backoff), for at most `within`:
    /// an endpoint that does not answer must not hold the agent past its
    /// Pod's grace period. Returns the final counts, with the spans still
    /// queued or in flight then as `spans_unflushed`.
    pub async fn shutdown(self, within: Duration) -> OtlpCounts {
        let OtlpExporter {
            queue,
            counters,
            stopping,
            mut task,
        } = self;
        stopping.cancel();
        drop(queue);
        match tokio::time::timeout(within, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                warn!(%error, "OTLP exporter task ended abnormally; queued spans are lost");
            }
            Err(_) => task.abort(),
        }
        let mut counts = counters.snapshot();
        counts.spans_unflushed = counts
            .spans_queued
            .saturating_sub(counts.spans_sent + counts.spans_dropped_export_failed);
        counts
    }
}

/// The exporter task's state.
struct ExportTask {
    client: opentelemetry_otlp::SpanExporter,
    scope: InstrumentationScope,
    counters: Arc<OtlpCounters>,
    stopping: CancellationToken,
    endpoint: String,
    max_batch_spans: usize,
    batch_timeout: Duration,
    export_timeout: Duration,
    retry: RetryOptions,
    /// The last batch was dropped; used to warn once per outage, not per batch.
    failing: bool,
    /// Spans lost to failed exports since the outage began.
    dropped_while_failing: u64,
}

impl ExportTask {
    async fn run(mut self, mut queue: mpsc::Receiver<Span>) {
        let mut batch = Vec::with_capacity(self.max_batch_spans);
        loop {
            // Wait for a first span, then give the batch `batch_timeout` to fill.
            if queue.recv_many(&mut batch, self.max_batch_spans).await == 0 {
                break; // Closed and drained.
            }
            let deadline = tokio::time::Instant::now() + self.batch_timeout;
            while batch.len() < self.max_batch_spans {
                let room = self.max_batch_spans - batch.len();
                match tokio::time::timeout_at(deadline, queue.recv_many(&mut batch, room)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let spans: Vec<SpanData> = batch
                .drain(..)
                .map(|span| span_data(span, &self.scope))
                .collect();
            self.deliver(spans).await;
        }
    }

    /// Sends one batch, retrying with exponential backoff; counts the outcome.
    async fn deliver(&mut self, batch: Vec<SpanData>) {
        let spans = batch.len() as u64;
        let mut backoff = self.retry.initial_backoff;
        let mut attempt = 1;
        loop {
            // The clone is what the SDK's own retry does too: export consumes its batch.
            let outcome =
                tokio::time::timeout(self.export_timeout, self.client.export(batch.clone())).await;
            let error = match outcome {
                Ok(Ok(())) => {
                    add(&self.counters.spans_sent, spans);
                    add(&self.counters.batches_sent, 1);
                    if self.failing {
                        info!(
                            endpoint = %self.endpoint,
                            spans_dropped = self.dropped_while_failing,
                            "OTLP endpoint takes spans again"
                        );
                        self.failing = false;
                        self.dropped_while_failing = 0;
                    }
                    return;
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {:?}", self.export_timeout),
            };
            add(&self.counters.attempts_failed, 1);
            debug!(endpoint = %self.endpoint, attempt, spans, %error, "OTLP export attempt failed");
            if attempt >= self.retry.max_attempts || self.stopping.is_cancelled() {
                add(&self.counters.spans_dropped_export_failed, spans);
                add(&self.counters.batches_failed, 1);
                self.dropped_while_failing += spans;
                if !self.failing {
                    // Once per outage: the operator should check the collector.
                    warn!(
                        endpoint = %self.endpoint,
                        attempts = attempt,
                        spans,
                        %error,
                        "OTLP export failing; dropping spans until the endpoint takes them"
                    );
                    self.failing = true;
                }
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.stopping.cancelled() => {}
            }
            backoff = backoff.saturating_mul(2).min(self.retry.max_backoff);
            attempt += 1;
        }
    }
}

/// The SDK's client for the chosen protocol, with its own retries off: the
/// exporter task retries, so it can count attempts and stop at shutdown.
fn build_client(
    options: &OtlpOptions,
) -> Result<opentelemetry_otlp::SpanExporter, ExporterBuildError> {
    use opentelemetry_otlp::{WithHttpConfig as _, WithTonicConfig as _};
    let builder = opentelemetry_otlp::SpanExporter::builder();
    match options.protocol {
        OtlpProtocol::Grpc => builder
            .with_tonic()
            .with_endpoint(options.endpoint.clone())
            .with_timeout(options.export_timeout)
            .with_retry_policy(RetryPolicy::disabled())
            .build(),
        OtlpProtocol::HttpProtobuf => builder
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(http_traces_url(&options.endpoint))
            .with_timeout(options.export_timeout)
            .with_retry_policy(RetryPolicy::disabled())
            .build(),
    }
}

/// `http://collector:4318` → `http://collector:4318/v1/traces`; an endpoint
/// with a path is kept as given (as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is).
fn http_traces_url(endpoint: &str) -> String {
    let after_scheme = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    match after_scheme.find('/') {
        None => format!("{endpoint}{HTTP_TRACES_PATH}"),
        Some(slash) if after_scheme[slash..] == *"/" => {
            format!("{}{HTTP_TRACES_PATH}", endpoint.trim_end_matches('/'))
        }
        Some(_) => endpoint.to_owned(),
    }
}

/// The resource of every span this agent exports.
pub(crate) fn podtrace_resource(node_name: &str, host_name: Option<&str>) -> Resource {
    // `builder_empty`: the default detectors would let OTEL_SERVICE_NAME and
    // OTEL_RESOURCE_ATTRIBUTES rename podtrace's spans.
    let mut attributes = vec![
        KeyValue::new(attr::SERVICE_NAME, SERVICE_NAME),
        KeyValue::new(attr::SERVICE_VERSION, VERSION),
        KeyValue::new(attr::K8S_NODE_NAME, node_name.to_owned()),
    ];
    if let Some(host_name) = host_name {
        attributes.push(KeyValue::new(attr::HOST_NAME, host_name.to_owned()));
    }
    Resource::builder_empty()
        .with_attributes(attributes)
        .build()
}

/// The instrumentation scope of every span: podtrace at this version.
pub(crate) fn podtrace_scope() -> InstrumentationScope {
    InstrumentationScope::builder(SERVICE_NAME)
        .with_version(VERSION)
        .build()
}

/// One of our spans as the SDK's, ids unchanged.
pub(crate) fn span_data(span: Span, scope: &InstrumentationScope) -> SpanData {
    let span_context = SpanContext::new(
        otel::TraceId::from_bytes(span.trace_id.0),
        otel::SpanId::from_bytes(span.span_id.0),
        // Sampled: podtrace exports every span it builds, and backends that
        // honour the flag must keep them.
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    SpanData {
        span_context,
        parent_span_id: span.parent_span_id.map_or(otel::SpanId::INVALID, |parent| {
            otel::SpanId::from_bytes(parent.0)
        }),
        // A parent may be another agent's span, but none was propagated to
        // us in-band: both ids were derived independently.
        parent_span_is_remote: false,
        span_kind: match span.kind {
            SpanKind::Internal => otel::SpanKind::Internal,
            SpanKind::Server => otel::SpanKind::Server,
            SpanKind::Client => otel::SpanKind::Client,
        },
        name: Cow::Owned(span.name),
        start_time: unix_time(span.start_unix_ns),
        end_time: unix_time(span.end_unix_ns),
        attributes: span
            .attributes
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    AttributeValue::String(s) => Value::from(s),
                    AttributeValue::Int(i) => Value::I64(i),
                    AttributeValue::Bool(b) => Value::Bool(b),
                };
                KeyValue::new(key, value)
            })
            .collect(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: span_links(&span.links),
        status: match span.status {
            SpanStatus::Unset => otel::Status::Unset,
            SpanStatus::Error(message) => otel::Status::error(message),
        },
        instrumentation_scope: scope.clone(),
    }
}

fn span_links(links: &[SpanLink]) -> SpanLinks {
    let mut all = SpanLinks::default();
    all.links = links
        .iter()
        .map(|link| {
            let context = SpanContext::new(
                otel::TraceId::from_bytes(link.trace_id.0),
                otel::SpanId::from_bytes(link.span_id.0),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            );
            otel::Link::new(context, Vec::new(), 0)
        })
        .collect();
    all
}

fn unix_time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

#[cfg(test)]
pub(crate) mod tests {
    //! In-process OTLP receivers (tonic gRPC, axum HTTP/protobuf) and the
    //! spans they must receive; the fixtures serve `otlp_json`'s tests too.

    use crate::correlate::span::SpanKey;

    use std::{
        collections::HashMap,
        net::SocketAddr,
        sync::Mutex,
        time::{Duration, Instant},
    };

    use opentelemetry_proto::tonic::{
        collector::trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
            trace_service_server::{TraceService, TraceServiceServer},
        },
        common::v1::{KeyValue as ProtoKeyValue, any_value},
        trace::v1::{span::SpanKind as ProtoSpanKind, status::StatusCode},
    };
    use prost::Message as _;
    use tokio::net::TcpListener;

    use super::*;
    use crate::{
        correlate::span::{SpanId, TraceId},
        decode::process::redact_argv,
    };

    pub(crate) const NODE: &str = "worker-1";
    pub(crate) const HOST: &str = "worker-1.example";
    /// What a request's body or an Authorization header carried.
    pub(crate) const CANARY: &str = "CANARY-7f3a9c-do-not-export";

    /// A Pod's root, kubelet's CRI call under it and containerd's handling
    /// of that call: every kind, an error status, string, int and bool
    /// attributes, nanosecond times.
    pub(crate) fn pod_spans() -> Vec<Span> {
        let trace = TraceId::for_pod("test-cluster", "5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10");
        let root = SpanId::of(trace, &SpanKey::Root);
        let client = SpanId::for_key(trace, b"cri/RunPodSandbox/client");
        let server = SpanId::for_key(trace, b"cri/RunPodSandbox/server");
        let string = |s: &str| AttributeValue::String(s.to_owned());
        vec![
            Span {
                trace_id: trace,
                span_id: root,
                parent_span_id: None,
                name: "pod default/web".to_owned(),
                kind: SpanKind::Internal,
                start_unix_ns: 1_700_000_000_123_456_789,
                end_unix_ns: 1_700_000_003_000_000_001,
                attributes: vec![
                    (attr::K8S_POD_NAME.to_owned(), string("web")),
                    (attr::K8S_NAMESPACE_NAME.to_owned(), string("default")),
                ],
                status: SpanStatus::Unset,
                links: Vec::new(),
            },
            Span {
                trace_id: trace,
                span_id: client,
                parent_span_id: Some(root),
                name: "runtime.v1.RuntimeService/RunPodSandbox".to_owned(),
                kind: SpanKind::Client,
                start_unix_ns: 1_700_000_001_000_000_007,
                end_unix_ns: 1_700_000_001_500_000_003,
                attributes: vec![
                    (attr::RPC_SYSTEM.to_owned(), string("grpc")),
                    (attr::PROCESS_PID.to_owned(), AttributeValue::Int(4242)),
                    ("podtrace.retried".to_owned(), AttributeValue::Bool(false)),
                ],
                status: SpanStatus::Error("rpc error: code = NotFound".to_owned()),
                links: Vec::new(),
            },
            Span {
                trace_id: trace,
                span_id: server,
                parent_span_id: Some(client),
                name: "runtime.v1.RuntimeService/RunPodSandbox".to_owned(),
                kind: SpanKind::Server,
                start_unix_ns: 1_700_000_001_000_100_000,
                end_unix_ns: 1_700_000_001_499_900_000,
                attributes: vec![(attr::RPC_SYSTEM.to_owned(), string("grpc"))],
                status: SpanStatus::Unset,
                links: Vec::new(),
            },
        ]
    }

    /// Spans built the way correlate builds them from what the probes saw:
    /// a CRI request whose Authorization header and body hold [`CANARY`],
    /// and an exec whose argv has it as a `--token`. Only identity facts
    /// (method, sizes, redacted argv) become attributes.
    pub(crate) fn spans_from_events_with_canaries() -> Vec<Span> {
        let headers = [
            (":path", "/runtime.v1.RuntimeService/CreateContainer"),
            ("authorization", &*format!("Bearer {CANARY}")),
            ("content-type", "application/grpc"),
        ];
        let body = format!("\0\0\0\0\x20{{\"env\":\"SECRET={CANARY}\"}}");
        let mut argv: Vec<String> = ["kubelet", &format!("--token={CANARY}"), "--v=2"]
            .iter()
            .map(|arg| (*arg).to_owned())
            .collect();
        redact_argv(&mut argv);

        let path = headers
            .iter()
            .find(|(name, _)| *name == ":path")
            .map_or("", |(_, value)| value);
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or_default();
        let trace = TraceId::for_pod("test-cluster", "canary-pod");
        let string = |s: &str| AttributeValue::String(s.to_owned());
        vec![
            Span {
                trace_id: trace,
                span_id: SpanId::for_key(trace, b"cri/CreateContainer"),
                parent_span_id: Some(SpanId::of(trace, &SpanKey::Root)),
                name: path.trim_start_matches('/').to_owned(),
                kind: SpanKind::Client,
                start_unix_ns: 1,
                end_unix_ns: 2,
                attributes: vec![
                    (attr::RPC_SYSTEM.to_owned(), string("grpc")),
                    (attr::RPC_SERVICE.to_owned(), string(service)),
                    (attr::RPC_METHOD.to_owned(), string(method)),
                    (
                        "podtrace.request.body_bytes".to_owned(),
                        AttributeValue::Int(body.len() as i64),
                    ),
                ],
                status: SpanStatus::Unset,
                links: Vec::new(),
            },
            Span {
                trace_id: trace,
                span_id: SpanId::for_key(trace, b"exec/kubelet"),
                parent_span_id: Some(SpanId::of(trace, &SpanKey::Root)),
                name: "exec kubelet".to_owned(),
                kind: SpanKind::Internal,
                start_unix_ns: 3,
                end_unix_ns: 4,
                attributes: vec![
                    (attr::PROCESS_EXECUTABLE_NAME.to_owned(), string("kubelet")),
                    ("process.command_args".to_owned(), string(&argv.join(" "))),
                ],
                status: SpanStatus::Unset,
                links: Vec::new(),
            },
        ]
    }

    fn attributes(kvs: &[ProtoKeyValue]) -> HashMap<&str, any_value::Value> {
        kvs.iter()
            .filter_map(|kv| {
                let value = kv.value.as_ref()?.value.clone()?;
                Some((kv.key.as_str(), value))
            })
            .collect()
    }

    fn string_value(s: &str) -> any_value::Value {
        any_value::Value::StringValue(s.to_owned())
    }

    /// Asserts that `requests` hold exactly `spans`, ids, parents, kinds,
    /// times, attributes and status unchanged, under podtrace's resource and scope.
    pub(crate) fn assert_requests_carry(requests: &[ExportTraceServiceRequest], spans: &[Span]) {
        let mut received = HashMap::new();
        for resource_spans in requests.iter().flat_map(|r| &r.resource_spans) {
            let resource = attributes(&resource_spans.resource.as_ref().unwrap().attributes);
            assert_eq!(resource[attr::SERVICE_NAME], string_value("podtrace"));
            assert_eq!(resource[attr::SERVICE_VERSION], string_value(VERSION));
            assert_eq!(resource[attr::K8S_NODE_NAME], string_value(NODE));
            assert_eq!(resource[attr::HOST_NAME], string_value(HOST));
            for scope_spans in &resource_spans.scope_spans {
                let scope = scope_spans.scope.as_ref().unwrap();
                assert_eq!(
                    (scope.name.as_str(), scope.version.as_str()),
                    ("podtrace", VERSION)
                );
                for span in &scope_spans.spans {
                    assert!(
                        received
                            .insert(span.span_id.clone(), span.clone())
                            .is_none(),
                        "span {} received twice",
                        name_of(span)
                    );
                }
            }
        }
        assert_eq!(
            received.len(),
            spans.len(),
            "received {:?}",
            received.values()
        );
        for want in spans {
            let got = &received[&want.span_id.0.to_vec()];
            assert_eq!(got.trace_id, want.trace_id.0);
            let parent = want
                .parent_span_id
                .map(|p| p.0.to_vec())
                .unwrap_or_default();
            assert_eq!(got.parent_span_id, parent, "parent of {}", want.name);
            assert_eq!(got.name, want.name);
            let kind = match want.kind {
                SpanKind::Internal => ProtoSpanKind::Internal,
                SpanKind::Server => ProtoSpanKind::Server,
                SpanKind::Client => ProtoSpanKind::Client,
            };
            assert_eq!(got.kind, kind as i32, "kind of {}", want.name);
            assert_eq!(got.start_time_unix_nano, want.start_unix_ns);
            assert_eq!(got.end_time_unix_nano, want.end_unix_ns);
            let want_attributes: HashMap<&str, any_value::Value> = want
                .attributes
                .iter()
                .map(|(key, value)| {
                    let value = match value {
                        AttributeValue::String(s) => string_value(s),
                        AttributeValue::Int(i) => any_value::Value::IntValue(*i),
                        AttributeValue::Bool(b) => any_value::Value::BoolValue(*b),
                    };
                    (key.as_str(), value)
                })
                .collect();
            assert_eq!(
                attributes(&got.attributes),
                want_attributes,
                "{}",
                want.name
            );
            let status = got.status.clone().unwrap_or_default();
            match &want.status {
                SpanStatus::Unset => assert_eq!(status.code, StatusCode::Unset as i32),
                SpanStatus::Error(message) => {
                    assert_eq!(status.code, StatusCode::Error as i32);
                    assert_eq!(&status.message, message);
                }
            }
        }
    }

    fn name_of(span: &opentelemetry_proto::tonic::trace::v1::Span) -> String {
        format!("{} ({:?})", span.name, span.span_id)
    }

    /// What an in-process receiver got: decoded requests and, for HTTP, the raw bodies.
    #[derive(Clone, Default)]
    struct Received {
        requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
        http_bodies: Arc<Mutex<Vec<Vec<u8>>>>,
        http_content_types: Arc<Mutex<Vec<String>>>,
    }

    impl Received {
        fn requests(&self) -> Vec<ExportTraceServiceRequest> {
            self.requests.lock().unwrap().clone()
        }

        fn span_count(&self) -> usize {
            self.requests()
                .iter()
                .flat_map(|r| &r.resource_spans)
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum()
        }

        /// Everything that crossed the wire: HTTP bodies as sent, gRPC
        /// messages re-encoded (tonic hands us the decoded message).
        fn wire_bytes(&self) -> Vec<u8> {
            let mut bytes: Vec<u8> = self.http_bodies.lock().unwrap().concat();
            for request in self.requests() {
                bytes.extend(request.encode_to_vec());
            }
            bytes
        }
    }

    #[tonic::async_trait]
    impl TraceService for Received {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.requests.lock().unwrap().push(request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    async fn http_export(
        axum::extract::State(received): axum::extract::State<Received>,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
    ) -> Result<Vec<u8>, axum::http::StatusCode> {
        let request = ExportTraceServiceRequest::decode(body.as_ref())
            .map_err(|_| axum::http::StatusCode::BAD_REQUEST)?;
        let content_type = headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        received
            .http_content_types
            .lock()
            .unwrap()
            .push(content_type);
        received.http_bodies.lock().unwrap().push(body.to_vec());
        received.requests.lock().unwrap().push(request);
        Ok(ExportTraceServiceResponse::default().encode_to_vec())
    }

    /// Serves OTLP on `listener` with `protocol` until the test ends.
    fn serve(protocol: OtlpProtocol, listener: TcpListener, received: Received) {
        match protocol {
            OtlpProtocol::Grpc => {
                let server = tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(received))
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
                tokio::spawn(server);
            }
            OtlpProtocol::HttpProtobuf => {
                let app = axum::Router::new()
                    .route(HTTP_TRACES_PATH, axum::routing::post(http_export))
                    .with_state(received);
                tokio::spawn(async move { axum::serve(listener, app).await });
            }
        }
    }

    async fn start_receiver(protocol: OtlpProtocol) -> (SocketAddr, Received) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Received::default();
        serve(protocol, listener, received.clone());
        (addr, received)
    }

    /// Fast batching and retries, so the tests take milliseconds.
    fn options(protocol: OtlpProtocol, addr: SocketAddr) -> OtlpOptions {
        OtlpOptions {
            host_name: Some(HOST.to_owned()),
            queue_capacity: 64,
            max_batch_spans: 16,
            batch_timeout: Duration::from_millis(20),
            export_timeout: Duration::from_secs(5),
            retry: RetryOptions {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(40),
            },
            ..OtlpOptions::new(format!("http://{addr}"), protocol, NODE)
        }
    }

    async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn endpoint_receives_our_spans(protocol: OtlpProtocol) {
        let (addr, received) = start_receiver(protocol).await;
        let exporter = OtlpExporter::start(options(protocol, addr)).unwrap();
        let spans = pod_spans();
        for span in spans.clone() {
            assert!(exporter.export(span));
        }
        wait_until("the spans", || received.span_count() == spans.len()).await;
        assert_requests_carry(&received.requests(), &spans);
        let counts = exporter.shutdown(Duration::from_secs(10)).await;
        assert_eq!(counts.spans_sent, 3);
        assert_eq!(counts.spans_dropped(), 0);
        assert!(counts.batches_sent >= 1);
        assert_eq!(counts.batches_failed, 0);
    }

    #[tokio::test]
    async fn grpc_endpoint_receives_spans_with_our_ids_parents_kinds_times_attributes_and_resource()
    {
        endpoint_receives_our_spans(OtlpProtocol::Grpc).await;
    }

    #[tokio::test]
    async fn http_protobuf_endpoint_receives_spans_with_our_ids_parents_kinds_times_attributes_and_resource()
     {
        endpoint_receives_our_spans(OtlpProtocol::HttpProtobuf).await;
    }

    #[tokio::test]
    async fn http_protobuf_posts_protobuf_to_v1_traces() {
        let (addr, received) = start_receiver(OtlpProtocol::HttpProtobuf).await;
        // The endpoint as an operator gives it, with no path: /v1/traces is
        // added (the receiver only routes that path).
        let exporter = OtlpExporter::start(options(OtlpProtocol::HttpProtobuf, addr)).unwrap();
        exporter.export(pod_spans().remove(0));
        wait_until("the span", || received.span_count() == 1).await;
        assert_eq!(
            *received.http_content_types.lock().unwrap(),
            ["application/x-protobuf"]
        );
        exporter.shutdown(Duration::from_secs(10)).await;
    }

    /// The endpoint is down: spans beyond the queue are dropped at once and
    /// counted, queued ones are dropped and counted once their retries are
    /// exhausted, the exporter keeps running, and once the endpoint is up
    /// new spans are delivered.
    async fn endpoint_down_then_back(protocol: OtlpProtocol) {
        // A port nothing listens on, until the receiver binds it again below.
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let capacity = 8;
        let options = OtlpOptions {
            queue_capacity: capacity,
            max_batch_spans: 4,
            ..options(protocol, addr)
        };
        let exporter = OtlpExporter::start(options).unwrap();
        let counters = exporter.counters();

        // The test runs on one thread: the exporter task cannot take spans
        // from the queue while this loop runs, so exactly `capacity` fit.
        let span = pod_spans().remove(0);
        let offered = 100;
        let queued = (0..offered)
            .filter(|_| exporter.export(span.clone()))
            .count();
        assert_eq!(queued, capacity, "the queue bounds what is held");
        let counts = counters.snapshot();
        assert_eq!(counts.spans_dropped_queue_full, (offered - capacity) as u64);

        wait_until("queued spans to fail their retries", || {
            counters.snapshot().spans_dropped_export_failed == capacity as u64
        })
        .await;
        let counts = counters.snapshot();
        assert_eq!(counts.batches_failed, 2);
        assert_eq!(counts.attempts_failed, 2 * 3, "3 attempts per batch");
        assert_eq!(counts.spans_sent, 0);
        assert_eq!(counts.spans_dropped(), offered as u64);

        let received = Received::default();
        serve(
            protocol,
            TcpListener::bind(addr).await.unwrap(),
            received.clone(),
        );
        let spans = pod_spans();
        for span in spans.clone() {
            assert!(exporter.export(span), "the exporter takes spans again");
        }
        wait_until("the spans after the endpoint came back", || {
            received.span_count() == spans.len()
        })
        .await;
        assert_requests_carry(&received.requests(), &spans);
        let counts = exporter.shutdown(Duration::from_secs(10)).await;
        assert_eq!(counts.spans_sent, spans.len() as u64);
        assert_eq!(counts.spans_dropped(), offered as u64);
    }

    #[tokio::test]
    async fn grpc_endpoint_down_bounds_memory_counts_drops_and_delivers_after_it_returns() {
        endpoint_down_then_back(OtlpProtocol::Grpc).await;
    }

    #[tokio::test]
    async fn http_endpoint_down_bounds_memory_counts_drops_and_delivers_after_it_returns() {
        endpoint_down_then_back(OtlpProtocol::HttpProtobuf).await;
    }

    #[tokio::test]
    async fn shutdown_sends_what_is_queued() {
        let (addr, received) = start_receiver(OtlpProtocol::Grpc).await;
        let options = OtlpOptions {
            // Without shutdown, these spans would wait a minute for their batch.
            batch_timeout: Duration::from_secs(60),
            ..options(OtlpProtocol::Grpc, addr)
        };
        let exporter = OtlpExporter::start(options).unwrap();
        for span in pod_spans() {
            exporter.export(span);
        }
        let counts = tokio::time::timeout(
            Duration::from_secs(10),
            exporter.shutdown(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        assert_eq!(counts.spans_sent, 3);
        assert_eq!(counts.spans_unflushed, 0);
        assert_requests_carry(&received.requests(), &pod_spans());
    }

    #[tokio::test]
    async fn shutdown_gives_up_on_an_endpoint_that_never_answers_and_counts_what_it_kept() {
        // Accepts connections (the kernel's backlog) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        for protocol in [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf] {
            let options = OtlpOptions {
                export_timeout: Duration::from_secs(30),
                ..options(protocol, addr)
            };
            let exporter = OtlpExporter::start(options).unwrap();
            for span in pod_spans() {
                exporter.export(span);
            }
            // Let the first batch go out and hang.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let started = Instant::now();
            let counts = exporter.shutdown(Duration::from_millis(300)).await;
            assert!(started.elapsed() < Duration::from_secs(2), "{protocol:?}");
            assert_eq!(counts.spans_sent, 0);
            assert_eq!(counts.spans_unflushed, 3, "{protocol:?}");
            assert_eq!(counts.spans_dropped(), 3);
        }
    }

    #[tokio::test]
    async fn exported_spans_never_contain_payload_or_authorization_canaries() {
        let spans = spans_from_events_with_canaries();
        // Structural first: the span model has no field that could hold them.
        assert!(!format!("{spans:?}").contains(CANARY));
        for protocol in [OtlpProtocol::Grpc, OtlpProtocol::HttpProtobuf] {
            let (addr, received) = start_receiver(protocol).await;
            let exporter = OtlpExporter::start(options(protocol, addr)).unwrap();
            for span in spans.clone() {
                exporter.export(span);
            }
            wait_until("the spans", || received.span_count() == spans.len()).await;
            assert!(
                !holds_canary(&received.wire_bytes()),
                "{protocol} output holds the canary"
            );
            assert!(!format!("{:?}", received.requests()).contains(CANARY));

            // Control: a canary that does reach an attribute is seen on this
            // wire, so the check above can fail.
            let mut leaky = spans[0].clone();
            leaky.attributes.push((
                "podtrace.test.leak".to_owned(),
                AttributeValue::String(CANARY.to_owned()),
            ));
            exporter.export(leaky);
            wait_until("the control span", || {
                received.span_count() == spans.len() + 1
            })
            .await;
            assert!(holds_canary(&received.wire_bytes()));
            exporter.shutdown(Duration::from_secs(10)).await;
        }
    }

    pub(crate) fn holds_canary(bytes: &[u8]) -> bool {
        bytes
            .windows(CANARY.len())
            .any(|window| window == CANARY.as_bytes())
    }

    #[test]
    fn http_endpoint_gets_v1_traces_only_when_it_has_no_path() {
        assert_eq!(
            http_traces_url("http://collector:4318"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            http_traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            http_traces_url("http://gateway/otlp/v1/traces"),
            "http://gateway/otlp/v1/traces"
        );
    }

    #[tokio::test]
    async fn out_of_range_options_are_refused_naming_the_option() {
        let addr: SocketAddr = "127.0.0.1:4317".parse().unwrap();
        let zero_queue = OtlpOptions {
            queue_capacity: 0,
            ..options(OtlpProtocol::Grpc, addr)
        };
        let error = OtlpExporter::start(zero_queue).unwrap_err();
        assert!(error.to_string().contains("queue_capacity"), "{error}");
        let bad_endpoint = OtlpOptions {
            endpoint: "not a uri".to_owned(),
            ..options(OtlpProtocol::Grpc, addr)
        };
        let error = OtlpExporter::start(bad_endpoint).unwrap_err();
        assert!(error.to_string().contains("not a uri"), "{error}");
    }

    #[test]
    fn starting_outside_a_runtime_is_an_error() {
        let addr: SocketAddr = "127.0.0.1:4317".parse().unwrap();
        let error = OtlpExporter::start(options(OtlpProtocol::Grpc, addr)).unwrap_err();
        assert!(matches!(error, OtlpError::NoRuntime), "{error}");
    }
}
