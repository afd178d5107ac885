//! `podtrace`: command line of the agent. Parses arguments, sets up logging,
//! and hands over to the library.

use std::{
    io::Write as _,
    num::NonZeroU32,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracer_common::{
    config::{DEFAULT_MAX_DESCENDANT_DEPTH, DEFAULT_RING_BUFFER_BYTES},
    io::{DATA_BYTES_MAX, DEFAULT_DATA_BYTES},
};
use tracer_user::{
    capture::{
        CaptureOptions, Priority, Probes,
        clock::WallClock,
        go_probes,
        kube_probes::ApiserverProbes,
        recording::{RecordingHeader, RecordingReader, RecordingWriter},
        targets::{DEFAULT_TARGET_NAMES, TargetMatcher},
        uprobes::CallCounter,
    },
    check::run_checks,
    correlate::TraceConfig,
    decode::{DecodeOptions, MUTE_AFTER_REQUESTS},
    export::{
        alerts::Threshold,
        metrics::{self, Metrics},
        otlp::{OtlpOptions, OtlpProtocol, local_host_name},
        otlp_json,
        recent::RecentTraces,
    },
    pipeline,
    pipeline::ExportOptions,
};

#[derive(Debug, Parser)]
#[command(
    name = "podtrace",
    version,
    about = "Where a Kubernetes Pod's creation spends its time, traced with eBPF"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Attach to this host's Kubernetes components and print what they do.
    Run(RunArgs),
    /// Report the kernel features podtrace needs; exit 0 only if all are present.
    Check,
    /// Show a Go binary's version, modules, and where podtrace's probes go.
    Inspect(InspectArgs),
    /// Attach podtrace's probes to a Go binary for a while and count their hits.
    ProbeCheck(ProbeCheckArgs),
    /// Tell a Pod's creation as podtrace traced it: waterfall, where it
    /// stands (Running, or the phase it is stuck in) and every error.
    Explain(ExplainArgs),
    /// Like `run`, and store every captured event in a file for `replay`.
    /// The file holds plaintext payloads (TLS included): it is created 0600.
    Record(RecordArgs),
    /// Feed a recording through the pipeline, or print its events (`--dump`).
    Replay(ReplayArgs),
}

/// Where spans go when neither `--out` nor `--otlp-endpoint` is given.
const DEFAULT_OTLP_JSON_FILE: &str = "podtrace-traces.otlp.jsonl";

/// Where the spans of Pod traces go.
#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// Names this cluster in trace ids; every agent of the cluster must use
    /// the same value so their spans join one trace per Pod.
    #[arg(long, env = "PODTRACE_CLUSTER_ID", default_value = "default")]
    cluster_id: String,
    /// This node's name (default: the host name).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// The UID of the Pod this agent runs in (the DaemonSet sets it from
    /// the downward API), which it does not trace: it starts after its Pod
    /// was created and is stopped before its Pod's teardown.
    #[arg(long, env = "POD_UID", value_name = "UID")]
    pod_uid: Option<String>,
    /// Append spans to this OTLP-JSON file (one ExportTraceServiceRequest per
    /// line). Without --otlp-endpoint, spans go to ./podtrace-traces.otlp.jsonl.
    #[arg(long, env = "PODTRACE_OUT", value_name = "FILE")]
    out: Option<PathBuf>,
    /// Send spans to this OTLP endpoint (e.g. http://tempo:4317).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// OTLP protocol for --otlp-endpoint.
    #[arg(long, env = "PODTRACE_OTLP_PROTOCOL", value_enum, default_value_t = OtlpProtocolArg::Grpc)]
    otlp_protocol: OtlpProtocolArg,
    /// A Pod not reported Running this many seconds after its create is
    /// exported as an incomplete trace, with the phase it is stuck in.
    #[arg(long, env = "PODTRACE_TRACE_TIMEOUT", value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    trace_timeout: u64,
    /// Print only the waterfall of each finished Pod trace, not a line per
    /// process, connection and span.
    #[arg(long, env = "PODTRACE_QUIET")]
    quiet: bool,
    /// Alert when a phase takes longer than a threshold: PHASE>DURATION,
    /// e.g. pod_start>5s or wal_fsync>10ms (repeatable). Alerts are logged
    /// as warnings, with the Pod and trace id.
    #[arg(long = "alert", value_name = "PHASE>DURATION")]
    alerts: Vec<Threshold>,
    /// Also POST each alert as JSON to this URL.
    #[arg(long, env = "PODTRACE_ALERT_WEBHOOK", value_name = "URL")]
    alert_webhook: Option<String>,
    /// Stop copying an etcd client connection's bytes once this many of its
    /// KV requests named keys of one resource other than Pods (kube-apiserver
    /// opens one etcd client per resource); 0 copies every connection's.
    #[arg(long, env = "PODTRACE_ETCD_MUTE_AFTER", value_name = "REQUESTS", default_value_t = MUTE_AFTER_REQUESTS)]
    etcd_mute_after: u32,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum OtlpProtocolArg {
    /// OTLP/gRPC (port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318).
    Http,
}

impl ExportArgs {
    fn options(self) -> ExportOptions {
        let node_name = self
            .node_name
            .or_else(local_host_name)
            .unwrap_or_else(|| "unknown".to_owned());
        let otlp = self.otlp_endpoint.map(|endpoint| {
            let protocol = match self.otlp_protocol {
                OtlpProtocolArg::Grpc => OtlpProtocol::Grpc,
                OtlpProtocolArg::Http => OtlpProtocol::HttpProtobuf,
            };
            OtlpOptions::new(endpoint, protocol, node_name.clone())
        });
        // Spans must go somewhere: a file when no collector is configured.
        let out = match (self.out, &otlp) {
            (None, None) => Some(PathBuf::from(DEFAULT_OTLP_JSON_FILE)),
            (out, _) => out,
        };
        ExportOptions {
            decode: DecodeOptions {
                mute_after: self.etcd_mute_after,
            },
            traces: TraceConfig {
                cluster_id: self.cluster_id,
                node_name,
                trace_timeout_ns: self.trace_timeout * 1_000_000_000,
                own_pod_uid: self.pod_uid.filter(|uid| !uid.is_empty()),
            },
            out,
            otlp,
            quiet: self.quiet,
            metrics: None,
            recent: None,
            alerts: self.alerts,
            alert_webhook: self.alert_webhook,
        }
    }
}

#[derive(Debug, clap::Args)]
struct RecordArgs {
    /// Where to write the recording (must not exist).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Stop after this many seconds (default: at Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<u64>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// A file written by `podtrace record`.
    file: PathBuf,
    /// Print every event, with payload excerpts (TLS 1.3 traffic decrypted
    /// with the secrets the recording holds), instead of running the pipeline.
    #[arg(long)]
    dump: bool,
    #[command(flatten)]
    export: ExportArgs,
}

#[derive(Debug, clap::Args)]
struct InspectArgs {
    /// The Go ELF executable.
    binary: PathBuf,
    /// Also resolve this function (full Go name; repeatable).
    #[arg(long = "func", value_name = "NAME")]
    functions: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Where the Kubernetes function probes' struct offsets come from.
    #[arg(long, value_enum, default_value_t = KubeOffsetsArg::Table)]
    kube_offsets: KubeOffsetsArg,
}

/// Where the Kubernetes function probes' struct offsets come from.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum KubeOffsetsArg {
    /// The table's row for the component's release (generated from that
    /// release's DWARF); a release the table lacks gets derived offsets.
    Table,
    /// Read from the binary's runtime type descriptors even when the table
    /// has the release (a vendor's patched build), with the argument words
    /// of the nearest release in the table.
    Derived,
}

impl From<KubeOffsetsArg> for tracer_gobin::KubeOffsetsMode {
    fn from(arg: KubeOffsetsArg) -> Self {
        match arg {
            KubeOffsetsArg::Table => Self::TableFirst,
            KubeOffsetsArg::Derived => Self::Derived,
        }
    }
}

/// Which of kube-apiserver's functions are probed.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ApiserverProbesArg {
    /// Only functions that requests about Pods reach (the Pod registry's,
    /// the admission webhook calls): no cost to any other request. A
    /// create's authentication, authorization and mutating admission are
    /// one span.
    Pods,
    /// Also the authenticator, the authorizer, the admission chain and the
    /// etcd3 store: a span per phase of a Pod request (the user, the
    /// authorizer's verdict), at about 15 uprobe traps per request of any
    /// kind — for a while, on a cluster whose Pod requests are slow there.
    All,
}

impl From<ApiserverProbesArg> for ApiserverProbes {
    fn from(arg: ApiserverProbesArg) -> Self {
        match arg {
            ApiserverProbesArg::Pods => Self::Pods,
            ApiserverProbesArg::All => Self::All,
        }
    }
}

#[derive(Debug, clap::Args)]
struct ProbeCheckArgs {
    /// The Go ELF executable.
    binary: PathBuf,
    /// Also probe this function (full Go name; repeatable).
    #[arg(long = "func", value_name = "NAME")]
    functions: Vec<String>,
    /// Count only calls made by this process (default: every process running the binary).
    #[arg(long)]
    pid: Option<NonZeroU32>,
    /// How long to count.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Executable names to follow in addition to the Kubernetes components
    /// (repeatable; `name*` matches by prefix of at least 15 characters).
    #[arg(long = "target", value_name = "NAME")]
    extra_targets: Vec<String>,
    /// Follow only these executables instead of the default list.
    #[arg(long)]
    only_targets: bool,
    /// Generations of descendants followed below a target process.
    #[arg(long, default_value_t = DEFAULT_MAX_DESCENDANT_DEPTH)]
    max_depth: u32,
    /// Ring buffer size in bytes (a power of two, at least 4096).
    #[arg(long, default_value_t = DEFAULT_RING_BUFFER_BYTES)]
    ring_buffer_bytes: u32,
    #[command(flatten)]
    export: ExportArgs,
    /// Serve Prometheus metrics (OpenMetrics, with exemplars) at
    /// http://ADDR/metrics; `off` serves none.
    #[arg(
        long,
        env = "PODTRACE_METRICS_ADDR",
        value_name = "ADDR",
        default_value = "127.0.0.1:9464"
    )]
    metrics_addr: String,
    /// Attach the Go probes as one perf event each, as on kernels before
    /// 6.6, even where the kernel has uprobe multi links (which detach in
    /// one step: perf events take ~0.1 s each to detach on recent kernels).
    #[arg(long)]
    uprobe_perf_events: bool,
    /// Where the Kubernetes function probes' struct offsets come from.
    #[arg(long, value_enum, default_value_t = KubeOffsetsArg::Table)]
    kube_offsets: KubeOffsetsArg,
    /// Which of kube-apiserver's functions are probed.
    #[arg(long, value_enum, default_value_t = ApiserverProbesArg::Pods)]
    apiserver_probes: ApiserverProbesArg,
    /// Payload bytes kept per socket or WAL syscall (at most 8192).
    #[arg(long, default_value_t = DEFAULT_DATA_BYTES, value_parser = clap::value_parser!(u32).range(0..=DATA_BYTES_MAX as i64))]
    data_bytes: u32,
    /// The CPU priority (nice value, -20 to 19) of the agent's decoding.
    /// Above 0, on a busy node it decodes in CPU time the components it
    /// traces leave idle instead of preempting them; the ring buffer's reader
    /// keeps the priority the agent was started with and holds what waits in
    /// the agent's memory. When that backlog grows (a quarter of the ring
    /// buffer in one drain, or of the channel to the decode stage) the
    /// decoding goes back to nice 0 until it has caught up, which needs
    /// CAP_SYS_NICE. In a container, nice orders the agent's threads among
    /// themselves; against other Pods its CPU request sets its share. The
    /// default is 0: on this project's benchmark 10 did not raise the
    /// traced components' throughput (README, "What it costs").
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(-20..=19), allow_negative_numbers = true)]
    nice: i32,
}

/// Short-lived allocations on several threads are most of what the agent
/// allocates; mimalloc's thread-local free lists serve them for less than
/// glibc's arenas (measured: `cargo xtask bench overhead`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (v2 and v3 alike;
/// the crate names only the older options).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps memory freed to it before handing it back to the
/// OS. Its default, 1 s, is shorter than the cycle of the agent's batches
/// through mimalloc's arenas under a steady load: every range it returned
/// came back as page faults (234 a second under the benchmark's Pod writes,
/// 12–47 at 10 s), and 10 s still returns a burst's memory soon after it.
const ALLOCATOR_PURGE_DELAY_MS: std::ffi::c_long = 10_000;

fn main() -> ExitCode {
    // SAFETY: sets one of mimalloc's options, which it reads on each purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ALLOCATOR_PURGE_DELAY_MS) };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check => Ok(check()),
        Command::Inspect(args) => inspect(args),
        Command::ProbeCheck(args) => probe_check(args),
        Command::Explain(args) => explain(args),
        Command::Record(args) => {
            let recording = Recording {
                path: args.output,
                duration: args.duration.map(Duration::from_secs),
            };
            run(args.run, Some(recording))
        }
        Command::Run(args) => run(args, None),
        Command::Replay(args) => replay(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("podtrace: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn check() -> ExitCode {
    let findings = run_checks();
    for finding in &findings {
        println!("{finding}");
    }
    let missing = findings.iter().filter(|finding| finding.fails()).count();
    if missing == 0 {
        println!("podtrace can run on this host");
        ExitCode::SUCCESS
    } else {
        println!("podtrace cannot run on this host: {missing} required feature(s) missing");
        ExitCode::FAILURE
    }
}

fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let inspection = go_probes::inspect(&args.binary, &args.functions, args.kube_offsets.into())
        .with_context(|| format!("inspecting {}", args.binary.display()))?;
    let text = if args.json {
        serde_json::to_string_pretty(&inspection)? + "\n"
    } else {
        tracer_user::inspect::render_text(&inspection)
    };
    write_stdout(&text)
}

fn probe_check(args: ProbeCheckArgs) -> anyhow::Result<ExitCode> {
    let inspection = go_probes::inspect(
        &args.binary,
        &args.functions,
        tracer_gobin::KubeOffsetsMode::default(),
    )
    .with_context(|| format!("inspecting {}", args.binary.display()))?;
    let functions: Vec<_> = inspection.functions.into_values().collect();
    let counter = CallCounter::attach(&args.binary, &functions, args.pid)?;
    eprintln!(
        "podtrace: counting calls of {} functions in {} for {} s",
        functions.len(),
        args.binary.display(),
        args.seconds
    );
    std::thread::sleep(Duration::from_secs(args.seconds));
    write_stdout(&tracer_user::inspect::render_hits(&counter.hits()?))
}

/// Writes a report to stdout; a reader that went away (`| head`) is not an error.
fn write_stdout(text: &str) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err(err.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The executables named `names` (exact names, not prefixes) in `PATH` and
/// the usual system directories, of this filesystem and, when podtrace runs
/// in a container with the host's PID namespace (the DaemonSet), of the
/// host's (`/proc/1/root`). Each file once, however many paths lead to it.
fn installed_executables(names: &[String]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    for dir in ["/usr/local/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin"] {
        if !dirs.iter().any(|known| known == Path::new(dir)) {
            dirs.push(PathBuf::from(dir));
        }
    }
    let host = Path::new("/proc/1/root");
    let host_dirs: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| Some(host.join(dir.strip_prefix("/").ok()?)))
        .collect();
    dirs.extend(host_dirs);
    let mut seen = std::collections::HashSet::new();
    names
        .iter()
        .filter(|name| !name.ends_with('*'))
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .filter(|path| {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata(path)
                .is_ok_and(|meta| meta.is_file() && seen.insert((meta.dev(), meta.ino())))
        })
        .collect()
}

#[derive(Debug, clap::Args)]
struct ExplainArgs {
    /// The Pod, as NAMESPACE/NAME.
    pod: String,
    /// Read spans from this OTLP-JSON file instead of asking a running agent.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// The running agent's metrics address (it serves its recent traces there).
    #[arg(
        long,
        env = "PODTRACE_METRICS_ADDR",
        value_name = "ADDR",
        default_value = "127.0.0.1:9464"
    )]
    agent: String,
}

fn explain(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let Some((namespace, name)) = args.pod.split_once('/') else {
        anyhow::bail!("{}: give the Pod as NAMESPACE/NAME", args.pod);
    };
    let text = match &args.file {
        Some(file) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        }
        None => {
            let url = format!("http://{}/traces", args.agent);
            ureq::get(&url)
                .query("namespace", namespace)
                .query("name", name)
                .call()
                .and_then(|mut response| response.body_mut().read_to_string())
                .with_context(|| {
                    format!("asking the agent at {url} (is `podtrace run` running? or use --file)")
                })?
        }
    };
    let spans = otlp_json::read_spans(&text).context("reading the spans")?;
    match tracer_user::explain::explain(&spans, namespace, name) {
        Some(text) => write_stdout(&text),
        None => {
            eprintln!("podtrace: no span of Pod {namespace}/{name}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Where and how long `podtrace record` records.
#[derive(Debug)]
struct Recording {
    path: PathBuf,
    duration: Option<Duration>,
}

fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let reader = RecordingReader::open(&args.file)?;
    let header = reader.header.clone();
    tracing::info!(
        recorded_on = %header.hostname,
        kernel = %header.kernel,
        podtrace = %header.podtrace_version,
        "replaying {}",
        args.file.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summary = runtime.block_on(pipeline::replay(reader, args.dump, args.export.options()))?;
    if summary.truncated {
        tracing::warn!(
            records = summary.records,
            "the recording ends inside a record: replayed every whole record before it"
        );
    }
    if summary.malformed > 0 {
        tracing::warn!(
            malformed = summary.malformed,
            "records that did not parse were skipped"
        );
    }
    tracing::info!(records = summary.records, "replay finished");
    Ok(ExitCode::SUCCESS)
}

fn run(args: RunArgs, recording: Option<Recording>) -> anyhow::Result<ExitCode> {
    let mut export = args.export.options();
    let metrics_addr: Option<std::net::SocketAddr> = match args.metrics_addr.as_str() {
        "off" => None,
        addr => Some(addr.parse().with_context(|| {
            format!("--metrics-addr {addr}: not an address like 127.0.0.1:9464 (or off)")
        })?),
    };
    let defaults = if args.only_targets {
        &[][..]
    } else {
        &DEFAULT_TARGET_NAMES[..]
    };
    let names: Vec<String> = defaults
        .iter()
        .map(|name| (*name).to_owned())
        .chain(args.extra_targets)
        .collect();
    let options = CaptureOptions {
        targets: TargetMatcher::new(names.iter().cloned())?,
        max_descendant_depth: args.max_depth,
        ring_buffer_bytes: args.ring_buffer_bytes,
        data_bytes: args.data_bytes,
        uprobe_perf_events: args.uprobe_perf_events,
        kube_offsets: args.kube_offsets.into(),
        apiserver_probes: args.apiserver_probes.into(),
    };
    let priority = Priority::new(args.nice, args.ring_buffer_bytes);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(priority.on_thread_start())
        .build()?;
    runtime.block_on(async move {
        let mut probes = Probes::load(&options)?;
        // A short-lived Go client (etcdctl, kubectl) finishes its TLS
        // handshake and first request within milliseconds of its exec,
        // before probes attached on seeing the exec could catch them:
        // probe the installed executables of the targets now. Uprobes are
        // per file, so every later process of that file is covered.
        for path in installed_executables(&names) {
            probes.attach_go_probes_path(&path);
        }
        tracing::info!(
            seeded_targets = probes.seeded().len(),
            "attached; following target processes (Ctrl-C to stop)"
        );
        let shutdown = CancellationToken::new();
        let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        let on_signal = shutdown.clone();
        let duration = recording.as_ref().and_then(|recording| recording.duration);
        tokio::spawn(async move {
            let elapsed = async {
                match duration {
                    Some(duration) => tokio::time::sleep(duration).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = sigterm.recv() => {}
                () = elapsed => {}
            }
            on_signal.cancel();
        });
        let recorder = match &recording {
            Some(recording) => {
                let header = RecordingHeader::here(&WallClock::anchor(), args.data_bytes, probes.known_processes());
                let writer = RecordingWriter::create(&recording.path, &header)?;
                tracing::warn!(
                    file = %recording.path.display(),
                    "recording plaintext payloads (file mode 0600); treat the file like the credentials it may contain"
                );
                Some(writer)
            }
            None => None,
        };
        if let Some(addr) = metrics_addr {
            let metrics = Arc::new(Metrics::default());
            let recent = Arc::new(Mutex::new(RecentTraces::default()));
            let node_name = export.traces.node_name.clone();
            // Metrics are a convenience: a busy port costs them, not the traces.
            match metrics::serve(addr, Arc::clone(&metrics), Arc::clone(&recent), node_name, shutdown.clone()).await {
                Ok(bound) => {
                    tracing::info!("metrics at http://{bound}/metrics");
                    export.metrics = Some(metrics);
                    export.recent = Some(recent);
                }
                Err(error) => tracing::warn!(%error, %addr, "metrics not served"),
            }
        }
        let summary = pipeline::run(probes, shutdown, recorder, export, priority).await?;
        if let Some(records) = summary.recorded {
            tracing::info!(records, "recording written");
        }
        let drops: Vec<String> = summary
            .drops
            .iter()
            .map(|(reason, count)| format!("{}={count}", reason.name()))
            .collect();
        tracing::info!(
            events = summary.events,
            malformed = summary.malformed,
            untracked_processes = summary.untracked_processes,
            drops = %drops.join(" "),
            "stopped; programs detached"
        );
        Ok(ExitCode::SUCCESS)
    })
}
