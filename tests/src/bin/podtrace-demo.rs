//! `podtrace-demo`: Pod creations through a real etcd and a real containerd
//! with runc, this program playing the rest of the control plane itself —
//! kube-apiserver's etcd writes, the scheduler's binding, the kubelet's CRI
//! calls and status report — so that a tracer has the path of ARCHITECTURE.md, "Traces without a collector"
//! to follow without a Kubernetes installation. kube-apiserver's etcd calls
//! are made by a child process, `demo-apiserver`: a Go program, as
//! kube-apiserver is, so that a tracer reading TLS plaintext from Go's
//! crypto/tls sees them. It is built at startup (Go's build cache makes that
//! quick after the first time) and started before etcd and containerd, so
//! that a tracer that saw it start has attached by its first call.
//!
//! In: the command line (`--help`). Out, on stdout: `ready` once etcd and
//! containerd run and this program's connections to them are open, then one
//! JSON line per Pod: `{"namespace", "name", "uid", "sandbox_id",
//! "container_id", "node", "start_ms"}` (`start_ms`: from the create to the
//! Running status stored). On stderr: what it does and how long each step
//! took. It removes its containers and sandboxes and stops containerd,
//! demo-apiserver and etcd before it exits — after an error or
//! SIGINT/SIGTERM too (exit status 1, 130 or 143). Tracers find it by its
//! process name, `podtrace-demo`, and its etcd client by `demo-apiserver`.
//!
//! With `--k8s-bin DIR` it plays no role: it starts a real control plane
//! from the kube-apiserver (or `--apiserver PATH`), kube-scheduler,
//! kube-controller-manager, kubelet and kubectl in DIR on the same etcd and
//! containerd ([`ControlPlane`]),
//! and runs `--scenario`s, each creating its Pod(s) with kubectl and waiting
//! for the end state it expects: `running` (the default: `--pods` Pods that
//! reach Running), `rejected` (refused by Pod Security admission),
//! `unschedulable` (a nodeSelector no node has), `image-never` (an absent
//! image with imagePullPolicy Never), `dry-run` (`--dry-run=server`, nothing
//! stored), `second-scheduler` (scheduled by a second kube-scheduler),
//! `privileged` (privileged, with added capabilities, as root; Running, with
//! the apiserver's Pod Security warnings), `http1` (created over HTTP/1.1),
//! `burst` (`--burst-pods` Pods created at once) and `deployment` (a
//! Deployment scaled from 0 to `--burst-pods` replicas, then back to 0: the
//! ReplicaSet controller creates and deletes its Pods). It prints the same JSON lines (the
//! sandbox id read from containerd's CRI, the container id from the Pod's
//! status, empty when there is none) with `scenario` and `outcome` added
//! (`Running`, `rejected: ERROR`, `unschedulable: MESSAGE`,
//! `ErrImageNeverPull: MESSAGE`, `dry run: …`), and `warnings` when the
//! apiserver gave some. The Pods are deleted through the apiserver before
//! everything stops.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicI32, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use podtrace_tests::components::{
    ApiserverRole, Containerd, ContainerdOptions, ControlPlane, ControlPlaneOptions, CreatedPod,
    CriClient, DemoApiserverBinary, Etcd, EtcdOptions, PodHandles, PodTemplate,
    apiserver_load::{ApiserverLoadBinary, ApiserverMix},
    apiserver_role::{self, RunningContainer},
    control_plane::PodCreation,
    cri::api,
    demo_apiserver,
    etcd_load::{EtcdLoadBinary, KeyMix, apiserver_tls},
    load_client::{BackgroundLoad, LegResult},
};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// `eprintln!` that ignores a closed stderr: the demo must still clean up
/// when its reader has gone (`podtrace-demo 2>&1 | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// One line on stdout, flushed at once (the reader waits for it).
fn emit(line: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}

/// An error and its causes, one per line.
fn report(err: &anyhow::Error) -> String {
    let mut text = format!("podtrace-demo: error: {err}");
    for cause in err.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    text
}

/// Pod creations through real etcd and containerd + runc, with this program
/// playing kube-apiserver's etcd writes, the scheduler's binding and the
/// kubelet's CRI calls and status report.
#[derive(Debug, Parser)]
#[command(name = "podtrace-demo")]
struct Args {
    /// How many Pods to create, one after the other.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=200))]
    pods: u32,
    /// With --scenario burst or deployment: how many Pods it creates at once.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=200))]
    burst_pods: u32,
    /// Create the --pods Pods all at once (a Deployment scaled up, a burst)
    /// instead of one after the other.
    #[arg(long)]
    parallel: bool,
    /// Run etcd without TLS and authentication (by default clients need a
    /// certificate and etcd authentication is on).
    #[arg(long)]
    plain_etcd: bool,
    /// The Pods' namespace.
    #[arg(long, default_value = "default", value_parser = parse_dns_label)]
    namespace: String,
    /// The node the Pods are bound to [default: this machine's hostname,
    /// lower-case, as the kubelet names its node].
    #[arg(long)]
    node_name: Option<String>,
    /// Then create this many Pods whose sandbox cannot be created (their
    /// RuntimeClass handler is not configured in containerd), as the failure
    /// path podtrace must explain; each is reported with its error and left
    /// Pending, as a real cluster would leave it.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=20))]
    broken_pods: u32,
    /// Start a real control plane from the kube-apiserver, kube-scheduler,
    /// kubelet and kubectl in this directory and create the Pods through it,
    /// instead of playing its roles.
    #[arg(long, value_name = "DIR")]
    k8s_bin: Option<PathBuf>,
    /// With --k8s-bin: run this kube-apiserver executable instead of DIR's
    /// (a stripped build, for example).
    #[arg(long, value_name = "PATH", requires = "k8s_bin")]
    apiserver: Option<PathBuf>,
    /// With --k8s-bin: what to do, in order (repeatable; a name given twice
    /// runs twice) [default: running]. `running` creates --pods Pods that
    /// reach Running; every other scenario creates one Pod.
    #[arg(
        long = "scenario",
        value_name = "NAME",
        value_enum,
        requires = "k8s_bin"
    )]
    scenarios: Vec<Scenario>,
    /// Keep everything running this many seconds after the Pods are created
    /// (to look at traces, metrics and `podtrace explain`), then clean up.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    linger: u64,
    /// With --k8s-bin: create this many Pods, and wait until they run,
    /// before printing `ready` (the Pods a node already runs when an agent
    /// starts or restarts on it); each is reported with scenario `existing`
    /// and deleted at the end with the others.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=20),
        requires = "k8s_bin"
    )]
    existing_pods: u32,
    /// After printing `ready`, wait until this file exists before creating
    /// Pods (so that a tracer can attach first).
    #[arg(long, value_name = "FILE")]
    wait_for: Option<PathBuf>,
    /// With --k8s-bin: once the scenarios are done, print `done` and wait
    /// until this file exists before deleting the Pods and stopping (so that
    /// a test can use the running cluster: look at an agent it deployed in
    /// it, delete that agent).
    #[arg(long, value_name = "FILE", requires = "k8s_bin")]
    hold: Option<PathBuf>,
    /// Run etcd as this many members of one cluster (on this host, each its
    /// own process, data directory and peer port, talking TLS to each other
    /// unless --plain-etcd), as a control plane of that many nodes does;
    /// the Pods' writes go through the first.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5))]
    etcd_members: u32,
    /// With --etcd-members: the last member keeps its WAL in this directory
    /// (etcd's `--wal-dir`: a slower disk, to see a slow follower).
    #[arg(long, value_name = "DIR", conflicts_with = "k8s_bin")]
    etcd_wal_dir: Option<PathBuf>,
    /// With --etcd-members: once the cluster is up, make the first member
    /// its leader (`etcdctl move-leader`), so that the Pods' writes reach
    /// the leader without being forwarded.
    #[arg(long, conflicts_with = "k8s_bin")]
    etcd_leader_first: bool,
    /// With --k8s-bin: also run the DaemonSet controller and the garbage
    /// collector (for a DaemonSet applied to the cluster, whose Pods go with
    /// it when it is deleted).
    #[arg(long, requires = "k8s_bin")]
    daemon_sets: bool,
    /// Before printing `ready`, write to this file, as JSON, what a client of
    /// the cluster needs: with --k8s-bin `kubeconfig` (the admin's),
    /// `containerd_socket` and `pod_subnet`; without, `etcd_members` (each
    /// member's `name`, `pid`, `peer_port` and whether it is the `leader`).
    #[arg(long, value_name = "FILE")]
    cluster_info: Option<PathBuf>,
    /// While the Pods are created, this many closed-loop writers of lease
    /// and event keys (`etcd-load`, a Go client on TLS as kube-apiserver's
    /// storage is) keep etcd busy, as a control plane's other traffic does.
    #[arg(
        long,
        value_name = "WRITERS",
        default_value_t = 0,
        conflicts_with = "plain_etcd"
    )]
    etcd_load: usize,
    /// With --k8s-bin: from before `ready` until the scenarios are done, 16
    /// closed-loop clients of kube-apiserver (`apiserver-load`, Go's
    /// net/http over TLS on one HTTP/2 connection, as client-go) send this
    /// mix of requests that are not about Pods (leases, reads, events,
    /// mixed, watches), as a cluster's other traffic does. The demo fails if
    /// one of them fails.
    #[arg(long, value_name = "MIX", requires = "k8s_bin")]
    apiserver_load: Option<ApiserverMix>,
    /// Where the built images and demo-apiserver are cached and etcd's and
    /// containerd's directories are made (those are removed on exit).
    #[arg(long, value_name = "DIR", default_value = "/var/tmp/podtrace-demo")]
    state_dir: PathBuf,
    /// Where demo-apiserver, the Go program that makes the kube-apiserver
    /// role's etcd calls, is built, with Go's build cache; kept between runs
    /// [default: STATE_DIR/podtrace-demo-apiserver].
    #[arg(long, value_name = "DIR")]
    build_dir: Option<PathBuf>,
}

/// What a `--scenario` creates and the end state it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// --pods busybox Pods that reach Running.
    Running,
    /// A privileged Pod in a namespace whose Pod Security level is
    /// `restricted` (enforced): kubectl fails with the admission's error.
    Rejected,
    /// A Pod whose nodeSelector no node satisfies: PodScheduled False,
    /// reason Unschedulable.
    Unschedulable,
    /// A Pod whose image containerd does not have, with imagePullPolicy
    /// Never: its container waits with reason ErrImageNeverPull.
    ImageNever,
    /// `kubectl create --dry-run=server`: admitted, not stored.
    DryRun,
    /// A second kube-scheduler (profile `podtrace-second-scheduler`) and a
    /// Pod it schedules, which reaches Running.
    SecondScheduler,
    /// A privileged Pod with NET_ADMIN and SYS_TIME added, as user 0, in a
    /// namespace that warns about Pod Security level `baseline`: Running,
    /// with the apiserver's warnings.
    Privileged,
    /// A Pod created with a POST over HTTP/1.1 and TLS (curl, as the
    /// official Python client and most non-Go tools talk), which reaches
    /// Running.
    Http1,
    /// --burst-pods Pods created at once (a kubectl create each, all
    /// started before any is awaited), each reaching Running.
    Burst,
    /// A Deployment scaled from 0 to --burst-pods replicas (the ReplicaSet
    /// controller creates its Pods at once), each reaching Running, then
    /// scaled back to 0 (the controller deletes them).
    Deployment,
    /// --existing-pods Pods created before `ready`, each reaching Running.
    #[value(skip)]
    Existing,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Rejected => "rejected",
            Self::Unschedulable => "unschedulable",
            Self::ImageNever => "image-never",
            Self::DryRun => "dry-run",
            Self::SecondScheduler => "second-scheduler",
            Self::Privileged => "privileged",
            Self::Http1 => "http1",
            Self::Burst => "burst",
            Self::Deployment => "deployment",
            Self::Existing => "existing",
        }
    }
}

/// A namespace name: an RFC 1123 label, as the apiserver validates it.
impl Args {
    /// `--build-dir`, or its default: where the demo's Go programs are built.
    fn build_dir(&self) -> PathBuf {
        self.build_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("podtrace-demo-apiserver"))
    }
}

fn parse_dns_label(text: &str) -> Result<String, String> {
    let valid_chars = text
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let alphanumeric_ends = !text.starts_with('-') && !text.ends_with('-');
    if (1..=63).contains(&text.len()) && valid_chars && alphanumeric_ends {
        Ok(text.to_owned())
    } else {
        Err(
            "a namespace is 1 to 63 lower-case letters, digits and '-', \
             starting and ending with a letter or digit"
                .to_owned(),
        )
    }
}

/// The labels every demo Pod carries.
const POD_LABELS: [(&str, &str); 1] = [("app", "podtrace-demo")];
/// A bound on removing the demo's containers and sandboxes.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Set once by the first SIGINT or SIGTERM.
#[derive(Debug, Clone, Default)]
struct Shutdown {
    token: CancellationToken,
    signal: Arc<AtomicI32>,
}

impl Shutdown {
    /// Fails if a signal asked to stop.
    fn check(&self) -> anyhow::Result<()> {
        if self.token.is_cancelled() {
            bail!("stopped by a signal");
        }
        Ok(())
    }

    fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Threads keep the process's name, which tracers match.
        .thread_name("podtrace-demo")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            say!("podtrace-demo: error: building the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = Shutdown::default();
    if let Err(err) = runtime.block_on(watch_signals(shutdown.clone())) {
        say!("{}", report(&err));
        return ExitCode::FAILURE;
    }
    let started = Instant::now();
    // Everything `run` started is stopped and removed when it returns.
    let result = run(&args, &runtime, &shutdown);
    drop(runtime);
    match (result, shutdown.signal()) {
        (Ok(()), None) => {
            say!(
                "podtrace-demo: done in {:.1?}; everything stopped and removed",
                started.elapsed()
            );
            ExitCode::SUCCESS
        }
        (_, Some(signal)) => {
            say!("podtrace-demo: stopped by signal {signal}; everything stopped and removed");
            ExitCode::from(128 + signal as u8)
        }
        (Err(err), None) => {
            say!("{}", report(&err));
            ExitCode::FAILURE
        }
    }
}

/// Turns the first SIGINT or SIGTERM into a cancellation; later ones only
/// say that cleaning up is under way.
async fn watch_signals(shutdown: Shutdown) -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    tokio::spawn(async move {
        loop {
            let number = tokio::select! {
                Some(()) = interrupt.recv() => libc::SIGINT,
                Some(()) = terminate.recv() => libc::SIGTERM,
                else => return,
            };
            if shutdown.token.is_cancelled() {
                say!("podtrace-demo: signal {number}: still cleaning up");
            } else {
                say!(
                    "podtrace-demo: signal {number}: stopping after the current step and cleaning up"
                );
                shutdown.signal.store(number, Ordering::SeqCst);
                shutdown.token.cancel();
            }
        }
    });
    Ok(())
}

fn explain(args: &Args, node: &str) {
    let etcd = if args.plain_etcd {
        "without TLS or authentication"
    } else {
        "over TLS with its client certificate, which makes it etcd user kube-apiserver \
         (authentication is on)"
    };
    say!(
        "podtrace-demo: there is no Kubernetes here. This program starts a real etcd and a real \
         containerd + runc and plays the other roles itself:\n\
         \x20 - kube-apiserver: writes each Pod to etcd with the requests of its storage layer \
         (a create Txn, then update Txns), {etcd}; its etcd client is demo-apiserver, a child \
         process written in Go as kube-apiserver is;\n\
         \x20 - kube-scheduler: binds each Pod to node {node:?} (spec.nodeName, written as the \
         apiserver would);\n\
         \x20 - kubelet: RunPodSandbox, ImageStatus (the image is present: no pull), \
         CreateContainer and StartContainer over containerd's CRI, the container with Pod \
         Security's restricted context (capabilities: drop ALL, add NET_BIND_SERVICE; uid 1000; \
         seccomp RuntimeDefault), then the status report (phase Running), written as the \
         apiserver would.\n\
         \x20 Pods: {} in namespace {:?}, one after the other.",
        args.pods,
        args.namespace
    );
}

/// This machine's hostname in lower case, as the kubelet names its node.
fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading /proc/sys/kernel/hostname")?;
    let name = name.trim().to_lowercase();
    if name.is_empty() {
        bail!("the hostname is empty: give --node-name");
    }
    Ok(name)
}

fn run(args: &Args, runtime: &tokio::runtime::Runtime, shutdown: &Shutdown) -> anyhow::Result<()> {
    let node = match &args.node_name {
        Some(node) => node.clone(),
        None => hostname()?,
    };
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating the state directory {}", args.state_dir.display()))?;
    if let Some(bin_dir) = &args.k8s_bin {
        return run_kubernetes(args, bin_dir, &node, runtime, shutdown);
    }
    explain(args, &node);
    let relay = build_demo_apiserver(args)?;
    shutdown.check()?;
    // Started on this thread, which outlives them (their processes die with
    // the thread that started them).
    let secure = !args.plain_etcd;
    let mut members = Etcd::prepare_cluster_in(
        EtcdOptions {
            tls: secure,
            auth: secure,
        },
        &args.state_dir,
        args.etcd_members as usize,
    )
    .context("preparing etcd")?;
    if let Some(dir) = &args.etcd_wal_dir {
        if members.len() < 2 {
            bail!("--etcd-wal-dir needs --etcd-members 2 or more");
        }
        if let Some(last) = members.pop() {
            members.push(last.with_wal_dir(dir.clone()));
        }
    }
    // Before etcd and containerd start, so that a tracer that saw it start
    // has attached by its first call. It talks to the first member, as an
    // apiserver's client talks to the one it picked.
    let apiserver = ApiserverRole::start(&relay, members[0].endpoint(), members[0].pki())
        .context("starting demo-apiserver")?;
    say!(
        "podtrace-demo: demo-apiserver (pid {}) started; it connects to etcd at its first call",
        apiserver.relay_pid()
    );
    let members = Etcd::start_prepared_cluster(members).context("starting etcd")?;
    if args.etcd_leader_first {
        Etcd::move_leader(&members, 0).context("making the first etcd member the leader")?;
    }
    let etcd = &members[0];
    shutdown.check()?;
    let containerd = Containerd::start_in(
        ContainerdOptions {
            image_cache_dir: args.state_dir.clone(),
        },
        &args.state_dir,
    )
    .context("starting containerd")?;
    shutdown.check()?;
    if let Some(file) = &args.cluster_info {
        write_etcd_members(file, &members)?;
    }
    let result = runtime.block_on(drive(args, &node, &apiserver, etcd, &containerd, shutdown));
    // containerd before etcd, as a node goes before its control plane; etcd's
    // client before etcd too.
    drop(containerd);
    drop(apiserver);
    drop(members);
    result
}

/// Writes `--cluster-info` for a cluster of etcd members alone.
fn write_etcd_members(file: &Path, members: &[Etcd]) -> anyhow::Result<()> {
    let members = members
        .iter()
        .map(|member| {
            let (id, leader) = member.raft_ids()?;
            Ok(serde_json::json!({
                "name": member.member_name(),
                "pid": member.pid(),
                "peer_port": member.peer_port(),
                "leader": id == leader,
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let info = serde_json::json!({ "etcd_members": members });
    std::fs::write(file, info.to_string()).with_context(|| format!("writing {}", file.display()))
}

/// Builds demo-apiserver in `--build-dir`, saying how long it took.
fn build_demo_apiserver(args: &Args) -> anyhow::Result<DemoApiserverBinary> {
    let dir = args.build_dir();
    if !dir.join(demo_apiserver::BINARY_NAME).exists() {
        say!(
            "podtrace-demo: building demo-apiserver in {} for the first time: Go compiles the \
             parts of its standard library it uses, which takes a while (later runs reuse that)",
            dir.display()
        );
    }
    let started = Instant::now();
    let relay = DemoApiserverBinary::build(&dir).context("building demo-apiserver")?;
    say!(
        "podtrace-demo: built {} with {} in {:.1?}",
        relay.path().display(),
        relay.go_version(),
        started.elapsed()
    );
    Ok(relay)
}

/// Opens the connections, says `ready`, creates the Pods, then removes
/// their containers and sandboxes (also after a failure or a signal).
async fn drive(
    args: &Args,
    node: &str,
    apiserver: &ApiserverRole,
    etcd: &Etcd,
    containerd: &Containerd,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    // demo-apiserver's first call, which opens its connection: a read that
    // changes nothing.
    let existing = apiserver
        .count_pods()
        .await
        .context("counting the Pods in etcd")?;
    let cri = containerd.cri().await?;
    let version = cri.version().await?;
    say!(
        "podtrace-demo (pid {}): connected to etcd at {} ({existing} Pods stored) and to {} {} \
         at {}",
        std::process::id(),
        etcd.endpoint(),
        version.runtime_name,
        version.runtime_version,
        containerd.socket().display()
    );
    emit("ready")?;
    if let Some(file) = &args.wait_for {
        wait_for_file(file, "creating Pods", shutdown).await?;
    }

    let load = match args.etcd_load {
        0 => None,
        writers => Some(start_etcd_load(args, etcd, writers)?),
    };
    // The image and command in the Pod spec are the ones the CRI calls run.
    let template = containerd.pod_template();
    let created = std::sync::Mutex::new(Vec::new());
    let creations = async {
        if args.parallel {
            let all = (0..args.pods)
                .map(|index| create_pod(args, node, index, apiserver, &cri, &template, &created));
            futures_util::future::try_join_all(all).await?;
        } else {
            for index in 0..args.pods {
                create_pod(args, node, index, apiserver, &cri, &template, &created).await?;
            }
        }
        for index in 0..args.broken_pods {
            create_broken_pod(args, node, index, apiserver, &cri, &template).await?;
        }
        if args.linger > 0 {
            say!(
                "podtrace-demo: Pods created; everything keeps running for {} s (Ctrl-C ends it sooner)",
                args.linger
            );
            tokio::time::sleep(Duration::from_secs(args.linger)).await;
        }
        anyhow::Ok(())
    };
    let outcome = tokio::select! {
        outcome = creations => outcome,
        () = shutdown.token.cancelled() => Err(anyhow::anyhow!("stopped by a signal")),
    };
    let created = created
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let cleanup = remove_pods(&cri, &created).await;
    if let Some(load) = load {
        let done = load.stop().context("the etcd load")?;
        say!(
            "podtrace-demo: etcd-load wrote {} lease and event keys ({:.0}/s, worst p99 {:.1} ms) \
             while the Pods were created; {} writes failed",
            done.requests,
            done.rate(),
            done.p99_us as f64 / 1000.0,
            done.errors
        );
    }
    outcome?;
    cleanup
}

/// Starts `--etcd-load` writers on `etcd`, built next to demo-apiserver.
fn start_etcd_load(args: &Args, etcd: &Etcd, writers: usize) -> anyhow::Result<BackgroundLoad> {
    let dir = args.build_dir();
    let binary = EtcdLoadBinary::build(&dir).context("building etcd-load")?;
    let (endpoint, tls) = (etcd.endpoint().to_owned(), apiserver_tls(etcd)?);
    let conns = writers.clamp(1, 4);
    let load = BackgroundLoad::start(
        podtrace_tests::components::etcd_load::BINARY_NAME,
        move || binary.start(&endpoint, &tls, KeyMix::NotPods, writers, conns),
    )?;
    say!("podtrace-demo: etcd-load: {writers} writers of lease and event keys started");
    Ok(load)
}

/// How long the demo waits for the kubelet to stop the sandboxes of the
/// Pods it deleted before it stops the cluster.
const SANDBOXES_STOPPED_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until no sandbox in `containerd` is ready (the kubelet has stopped
/// them all), at most `timeout`; says so when it gives up.
async fn sandboxes_stopped(containerd: &Containerd, timeout: Duration) -> anyhow::Result<()> {
    let cri = containerd.cri().await?;
    let started = Instant::now();
    loop {
        // SANDBOX_READY = 0.
        let ready = cri
            .list_pod_sandboxes()
            .await?
            .iter()
            .filter(|sandbox| sandbox.state == 0)
            .count();
        if ready == 0 {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            say!(
                "podtrace-demo: {ready} sandboxes still ready {timeout:?} after their Pods were deleted; stopping the cluster anyway"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_for_file(file: &Path, before: &str, shutdown: &Shutdown) -> anyhow::Result<()> {
    say!(
        "podtrace-demo: waiting for {} to exist before {before}",
        file.display()
    );
    let started = Instant::now();
    while !file.exists() {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
            () = shutdown.token.cancelled() => bail!("stopped by a signal while waiting for {}", file.display()),
        }
    }
    say!(
        "podtrace-demo: {} appeared after {:.1?}",
        file.display(),
        started.elapsed()
    );
    Ok(())
}

/// A new Pod as kube-apiserver makes one from a request with generateName
/// `generate_name`: its name, the object, its UID.
fn new_demo_pod(
    args: &Args,
    generate_name: &str,
    template: &PodTemplate,
) -> anyhow::Result<(String, k8s_pb::api::core::v1::Pod, String)> {
    let name = apiserver_role::generate_name(generate_name)?;
    let pod = apiserver_role::new_pod(
        &args.namespace,
        &name,
        Some(generate_name),
        &POD_LABELS,
        template,
    )?;
    let uid = pod
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.uid.clone())
        .unwrap_or_default();
    Ok((name, pod, uid))
}

/// One Pod's creation, step by step as the components would make it.
async fn create_pod(
    args: &Args,
    node: &str,
    index: u32,
    apiserver: &ApiserverRole,
    cri: &CriClient,
    template: &PodTemplate,
    created: &std::sync::Mutex<Vec<PodHandles>>,
) -> anyhow::Result<()> {
    let namespace = &args.namespace;
    let (name, pod, uid) = new_demo_pod(args, &format!("demo-{index}-"), template)?;
    let what = || format!("Pod {namespace}/{name}");
    let began = Instant::now();

    // kube-apiserver, for the create request: store.Create.
    let step = Instant::now();
    let mut stored = apiserver
        .create(pod)
        .await
        .with_context(|| format!("kube-apiserver creating {}", what()))?;
    let create_took = step.elapsed();

    // kube-scheduler's binding, stored by kube-apiserver: GuaranteedUpdate.
    let step = Instant::now();
    apiserver
        .guaranteed_update(&mut stored, |pod| apiserver_role::bind(pod, node))
        .await
        .with_context(|| format!("kube-apiserver storing the binding of {}", what()))?;
    let bind_took = step.elapsed();

    // The kubelet: the CRI calls, then what it reads back for the status.
    let step = Instant::now();
    let start_time = SystemTime::now();
    let handles = cri
        .create_pod(&name, namespace, &uid)
        .await
        .with_context(|| format!("kubelet running {}", what()))?;
    created
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(handles.clone());
    let cri_took = step.elapsed();
    let sandbox = cri
        .pod_sandbox_status(&handles.sandbox_id)
        .await
        .with_context(|| format!("kubelet reading the sandbox status of {}", what()))?;
    // Not verbose, as the kubelet asks: a verbose answer carries the OCI
    // spec, seccomp profile included, in one write past podtrace's 8 KiB
    // payload capture, which would cost containerd's side of the connection
    // its HPACK state.
    let container = cri
        .container_status_with(&handles.container_id, false)
        .await
        .with_context(|| format!("kubelet reading the container status of {}", what()))?
        .status
        .with_context(|| format!("ContainerStatus of {} has no status", what()))?;
    if container.state != api::CONTAINER_RUNNING {
        bail!(
            "the container of {} is not running (state {}, reason {:?}, message {:?})",
            what(),
            container.state,
            container.reason,
            container.message
        );
    }
    let running = RunningContainer {
        container_id: handles.container_id.clone(),
        image_ref: container.image_ref,
        started_at: UNIX_EPOCH + Duration::from_nanos(container.started_at.max(0) as u64),
        pod_ip: sandbox
            .network
            .map(|network| network.ip)
            .filter(|ip| !ip.is_empty()),
        start_time,
    };

    // The kubelet's status report, stored by kube-apiserver: GuaranteedUpdate.
    let step = Instant::now();
    apiserver
        .guaranteed_update(&mut stored, |pod| {
            apiserver_role::set_running(pod, &running);
        })
        .await
        .with_context(|| format!("kube-apiserver storing the status of {}", what()))?;
    let status_took = step.elapsed();

    say!(
        "podtrace-demo: {namespace}/{name} (uid {uid}) running on {node}: etcd create {:.1?}, \
         binding {:.1?}, CRI {:.1?}, status {:.1?}",
        create_took,
        bind_took,
        cri_took,
        status_took
    );
    emit(
        &serde_json::json!({
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "sandbox_id": handles.sandbox_id,
            "container_id": handles.container_id,
            "node": node,
            "start_ms": began.elapsed().as_secs_f64() * 1000.0,
        })
        .to_string(),
    )
}

/// The RuntimeClass handler broken Pods ask for: containerd has none by that
/// name, so RunPodSandbox fails.
const MISSING_RUNTIME_HANDLER: &str = "podtrace-demo-missing";

/// A Pod created and bound like the others, whose sandbox creation fails
/// (as with a RuntimeClass whose handler the node lacks); reported with the
/// error on stdout and left Pending.
async fn create_broken_pod(
    args: &Args,
    node: &str,
    index: u32,
    apiserver: &ApiserverRole,
    cri: &CriClient,
    template: &PodTemplate,
) -> anyhow::Result<()> {
    let namespace = &args.namespace;
    let (name, pod, uid) = new_demo_pod(args, &format!("broken-{index}-"), template)?;
    let mut stored = apiserver
        .create(pod)
        .await
        .with_context(|| format!("kube-apiserver creating Pod {namespace}/{name}"))?;
    apiserver
        .guaranteed_update(&mut stored, |pod| apiserver_role::bind(pod, node))
        .await
        .with_context(|| format!("kube-apiserver storing the binding of Pod {namespace}/{name}"))?;
    let config = cri.sandbox_config(&name, namespace, &uid);
    std::fs::create_dir_all(&config.log_directory)
        .with_context(|| format!("creating {}", config.log_directory))?;
    let error = match cri
        .run_pod_sandbox_with(&config, MISSING_RUNTIME_HANDLER)
        .await
    {
        Ok(sandbox_id) => bail!(
            "RunPodSandbox of Pod {namespace}/{name} with handler {MISSING_RUNTIME_HANDLER:?} \
             succeeded (sandbox {sandbox_id}): containerd has that handler"
        ),
        Err(error) => format!("{error:#}"),
    };
    say!("podtrace-demo: {namespace}/{name} (uid {uid}) cannot start, as intended: {error}");
    emit(
        &serde_json::json!({
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "node": node,
            "error": error,
        })
        .to_string(),
    )
}

/// Stops and removes the containers and sandboxes, newest first, as the
/// kubelet does when Pods are deleted. containerd's teardown removes any
/// sandbox this misses (one interrupted half-way through its creation).
async fn remove_pods(cri: &CriClient, created: &[PodHandles]) -> anyhow::Result<()> {
    let work = async {
        let mut problems = Vec::new();
        for handles in created.iter().rev() {
            let steps = async {
                // The workload runs as PID 1 of its PID namespace, which
                // ignores SIGTERM: no grace period.
                cri.stop_container(&handles.container_id, 0).await?;
                cri.remove_container(&handles.container_id).await?;
                cri.stop_pod_sandbox(&handles.sandbox_id).await?;
                cri.remove_pod_sandbox(&handles.sandbox_id).await?;
                anyhow::Ok(())
            };
            if let Err(err) = steps.await {
                problems.push(format!("sandbox {}: {err:#}", handles.sandbox_id));
            }
        }
        if problems.is_empty() {
            say!(
                "podtrace-demo: removed {} containers and sandboxes",
                created.len()
            );
            Ok(())
        } else {
            bail!("removing containers and sandboxes: {}", problems.join("; "))
        }
    };
    tokio::time::timeout(CLEANUP_TIMEOUT, work)
        .await
        .with_context(|| {
            format!("removing containers and sandboxes took over {CLEANUP_TIMEOUT:?}")
        })?
}

/// How long a Pod created through the real control plane may take to run.
const POD_RUNNING_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the scheduler may take to find a Pod unschedulable, and the
/// kubelet to refuse an absent image.
const POD_STUCK_TIMEOUT: Duration = Duration::from_secs(90);
/// The namespace whose Pod Security level `restricted` is enforced.
const RESTRICTED_NAMESPACE: &str = "podtrace-restricted";
/// The namespace that only warns, about Pod Security level `baseline`.
const WARNED_NAMESPACE: &str = "podtrace-warned";
/// The second kube-scheduler's profile.
const SECOND_SCHEDULER: &str = "podtrace-second-scheduler";
/// The nodeSelector of `unschedulable`: no node has this label.
const ABSENT_NODE_LABEL: (&str, &str) = ("podtrace.example/absent", "true");
/// The image of `image-never`: `.invalid` is a reserved top-level domain
/// (RFC 2606) and the harness imports only its two `podtrace.local` images.
const ABSENT_IMAGE: &str = "podtrace.invalid/absent:never";

/// `--k8s-bin`: etcd, containerd and a real control plane on them; the Pods
/// created with kubectl.
/// Starts `--apiserver-load` against `plane`, built next to demo-apiserver.
fn start_apiserver_load(
    args: &Args,
    plane: &ControlPlane,
    mix: ApiserverMix,
) -> anyhow::Result<(ApiserverMix, BackgroundLoad)> {
    let dir = args.build_dir();
    let binary = ApiserverLoadBinary::build(&dir).context("building apiserver-load")?;
    let load = binary.in_background(plane, mix, APISERVER_LOAD_WORKERS)?;
    say!(
        "podtrace-demo: apiserver-load: {APISERVER_LOAD_WORKERS} clients of {} started",
        mix.label()
    );
    Ok((mix, load))
}

/// `--apiserver-load`'s clients, as in the overhead benchmark's apiserver legs.
const APISERVER_LOAD_WORKERS: usize = 16;

/// Says what `--apiserver-load` did; an error if a request failed or none
/// was answered.
fn report_apiserver_load(mix: ApiserverMix, done: &LegResult) -> anyhow::Result<()> {
    say!(
        "podtrace-demo: apiserver-load ({}) made {} requests ({:.0}/s, worst p99 {:.1} ms, {} \
         watch events) while the Pods were created; {} failed",
        mix.flag(),
        done.requests,
        done.rate(),
        done.p99_us as f64 / 1000.0,
        done.watch_events,
        done.errors
    );
    if done.errors > 0 || done.requests == 0 {
        bail!(
            "apiserver-load: {} requests failed, {} answered; first failure: {}",
            done.errors,
            done.requests,
            done.first_error.as_deref().unwrap_or("none")
        );
    }
    Ok(())
}

fn run_kubernetes(
    args: &Args,
    bin_dir: &Path,
    node: &str,
    runtime: &tokio::runtime::Runtime,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    ControlPlane::check_binaries(bin_dir)?;
    if args.broken_pods > 0 {
        bail!("--broken-pods is not supported with --k8s-bin yet");
    }
    let scenarios = if args.scenarios.is_empty() {
        vec![Scenario::Running]
    } else {
        args.scenarios.clone()
    };
    let secure = !args.plain_etcd;
    let etcd_how = if secure {
        "TLS, authentication; it is etcd user kube-apiserver by its client certificate"
    } else {
        "plain HTTP, no authentication"
    };
    let apiserver = args
        .apiserver
        .clone()
        .unwrap_or_else(|| bin_dir.join("kube-apiserver"));
    say!(
        "podtrace-demo: a real control plane from {}: kube-apiserver {} on a real etcd \
         ({etcd_how}), kube-scheduler, and a kubelet on a real containerd + runc, node {node:?}. \
         Scenarios: {} ('running' creates {} Pods in namespace {:?}), Pods created with kubectl \
         one after the other.",
        bin_dir.display(),
        apiserver.display(),
        scenarios
            .iter()
            .map(|scenario| scenario.name())
            .collect::<Vec<_>>()
            .join(", "),
        args.pods,
        args.namespace
    );
    let started = Instant::now();
    let members = Etcd::start_cluster_in(
        EtcdOptions {
            tls: secure,
            auth: secure,
        },
        &args.state_dir,
        args.etcd_members as usize,
    )
    .context("starting etcd")?;
    let etcd = &members[0];
    shutdown.check()?;
    let containerd = Containerd::start_in(
        ContainerdOptions {
            image_cache_dir: args.state_dir.clone(),
        },
        &args.state_dir,
    )
    .context("starting containerd")?;
    shutdown.check()?;
    let mut plane = ControlPlane::start_in(
        ControlPlaneOptions {
            bin_dir: bin_dir.to_owned(),
            apiserver: args.apiserver.clone(),
            node_name: node.to_owned(),
            daemon_sets: args.daemon_sets,
        },
        &args.state_dir,
        etcd,
        &containerd,
    )
    .context("starting the control plane")?;
    say!(
        "podtrace-demo: etcd, containerd and the control plane ready in {:.1?}",
        started.elapsed()
    );
    let mut namespaces = Vec::new();
    let result = drive_kubernetes(
        args,
        &scenarios,
        node,
        &mut plane,
        &containerd,
        runtime,
        shutdown,
        &mut namespaces,
    );
    // Pods go through the apiserver while everything still runs.
    let cleanup = namespaces.iter().try_for_each(|namespace| {
        plane
            .delete_pods(namespace, "app=podtrace-demo")
            .with_context(|| format!("deleting the demo Pods of namespace {namespace}"))
    });
    // The apiserver lets a deleted Pod go before the kubelet has stopped its
    // sandbox: the cluster stays up until it has, so that the teardown's
    // CRI calls (and the deletion traces' spans of them) complete.
    if cleanup.is_ok() {
        runtime.block_on(sandboxes_stopped(&containerd, SANDBOXES_STOPPED_TIMEOUT))?;
    }
    drop(plane);
    drop(containerd);
    drop(members);
    result?;
    cleanup
}

/// What one Pod of a scenario came to: a JSON line on stdout.
struct PodReport {
    scenario: Scenario,
    namespace: String,
    name: String,
    uid: String,
    sandbox_id: String,
    container_id: String,
    node: String,
    outcome: String,
    warnings: Vec<String>,
    dry_run: bool,
}

impl PodReport {
    fn new(scenario: Scenario, pod: &CreatedPod, outcome: String) -> Self {
        Self {
            scenario,
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            sandbox_id: String::new(),
            container_id: String::new(),
            node: String::new(),
            outcome,
            warnings: Vec::new(),
            dry_run: false,
        }
    }

    fn emit(&self) -> anyhow::Result<()> {
        say!(
            "podtrace-demo: [{}] {}/{} (uid {}){}: {}",
            self.scenario.name(),
            self.namespace,
            self.name,
            if self.uid.is_empty() {
                "none"
            } else {
                &self.uid
            },
            if self.node.is_empty() {
                String::new()
            } else {
                format!(" on {}", self.node)
            },
            self.outcome
        );
        let mut line = serde_json::json!({
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "sandbox_id": self.sandbox_id,
            "container_id": self.container_id,
            "node": self.node,
            "scenario": self.scenario.name(),
            "outcome": self.outcome,
        });
        if !self.warnings.is_empty() {
            line["warnings"] = serde_json::json!(self.warnings);
        }
        if self.dry_run {
            line["dry_run"] = serde_json::Value::Bool(true);
        }
        emit(&line.to_string())
    }
}

/// What the scenarios share while they run.
struct Cluster<'a> {
    args: &'a Args,
    node: &'a str,
    plane: &'a mut ControlPlane,
    cri: CriClient,
    template: PodTemplate,
    runtime: &'a tokio::runtime::Runtime,
    /// Namespaces in which Pods were created (deleted from at the end).
    namespaces: &'a mut Vec<String>,
}

impl Cluster<'_> {
    /// A Pod of the demo's image in `namespace`; `generate_name` is the
    /// prefix of its name, or its name when `fixed`.
    fn manifest(&self, namespace: &str, name: &str, fixed: bool) -> serde_json::Value {
        let mut metadata = serde_json::json!({
            "namespace": namespace,
            "labels": POD_LABELS
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
                .collect::<serde_json::Map<_, _>>(),
        });
        metadata[if fixed { "name" } else { "generateName" }] = serde_json::Value::from(name);
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                // Nothing publishes kube-root-ca.crt without a controller
                // manager: no token volume.
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main",
                    "image": self.template.image,
                    "imagePullPolicy": "Never",
                    "command": self.template.command,
                }],
            },
        })
    }

    /// Makes sure `namespace` exists (with `labels` when it is created
    /// here) and is cleaned up.
    fn use_namespace(&mut self, namespace: &str, labels: &[(&str, &str)]) -> anyhow::Result<()> {
        if self.namespaces.iter().any(|known| known == namespace) {
            return Ok(());
        }
        if namespace != "default" {
            self.plane
                .create_namespace(namespace, labels)
                .with_context(|| format!("creating namespace {namespace}"))?;
        }
        self.namespaces.push(namespace.to_owned());
        Ok(())
    }

    /// Creates the Pod, failing if kubectl refused it.
    fn create(
        &mut self,
        manifest: &serde_json::Value,
        extra_args: &[&str],
    ) -> anyhow::Result<(CreatedPod, serde_json::Value, Vec<String>)> {
        match self.plane.try_create_pod(manifest, extra_args)? {
            PodCreation::Created {
                pod,
                object,
                warnings,
            } => Ok((pod, object, warnings)),
            PodCreation::Refused { error } => bail!("kubectl create pod failed: {error}"),
        }
    }

    /// The id of the Pod's sandbox in containerd, if it has one.
    fn sandbox_id(&self, uid: &str) -> anyhow::Result<String> {
        Ok(self
            .runtime
            .block_on(self.cri.list_pod_sandboxes())?
            .into_iter()
            .find(|sandbox| {
                sandbox
                    .metadata
                    .as_ref()
                    .is_some_and(|metadata| metadata.uid == uid)
            })
            .map(|sandbox| sandbox.id)
            .unwrap_or_default())
    }

    /// Which scheduler bound the Pod: the reporting component of its
    /// `Scheduled` event (the profile's schedulerName), which may lag a
    /// little behind the binding.
    fn scheduled_by(&self, report: &PodReport) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let output = self
                .plane
                .kubectl()
                .args(["get", "events", "-o", "json", "-n", &report.namespace])
                .arg(format!(
                    "--field-selector=involvedObject.name={},reason=Scheduled",
                    report.name
                ))
                .output()
                .context("running kubectl get events")?;
            if output.status.success() {
                let events: serde_json::Value = serde_json::from_slice(&output.stdout)
                    .context("parsing kubectl get events' output")?;
                let component = events["items"][0]["reportingComponent"]
                    .as_str()
                    .filter(|component| !component.is_empty())
                    .or_else(|| events["items"][0]["source"]["component"].as_str());
                if let Some(component) = component {
                    return Ok(component.to_owned());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "no Scheduled event for Pod {}/{}: {}",
                    report.namespace,
                    report.name,
                    String::from_utf8_lossy(&output.stderr).trim()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Creates a Pod and waits until it is Running.
    fn create_running(
        &mut self,
        scenario: Scenario,
        manifest: &serde_json::Value,
    ) -> anyhow::Result<PodReport> {
        let step = Instant::now();
        let (pod, _, warnings) = self.create(manifest, &[])?;
        self.await_running(scenario, &pod, warnings, step)
    }

    /// Waits until `pod`, whose creation began at `step`, is Running.
    fn await_running(
        &self,
        scenario: Scenario,
        pod: &CreatedPod,
        warnings: Vec<String>,
        step: Instant,
    ) -> anyhow::Result<PodReport> {
        let create_took = step.elapsed();
        let status = self.plane.wait_running(pod, POD_RUNNING_TIMEOUT)?;
        let running_took = step.elapsed();
        let mut report = PodReport::new(scenario, pod, "Running".to_owned());
        report.container_id = container_id(&status);
        report.sandbox_id = self.sandbox_id(&pod.uid)?;
        report.node = status["spec"]["nodeName"]
            .as_str()
            .unwrap_or(self.node)
            .to_owned();
        report.warnings = warnings;
        say!(
            "podtrace-demo: {}/{} created in {create_took:.1?}, Running after {running_took:.1?} \
             (as kubectl saw it)",
            pod.namespace,
            pod.name
        );
        Ok(report)
    }

    /// [`Cluster::await_running`] for each of `pods`, created together.
    fn await_all_running(
        &self,
        scenario: Scenario,
        pods: &[CreatedPod],
        step: Instant,
    ) -> anyhow::Result<Vec<PodReport>> {
        pods.iter()
            .map(|pod| self.await_running(scenario, pod, Vec::new(), step))
            .collect()
    }

    fn run(&mut self, scenario: Scenario, index: usize) -> anyhow::Result<Vec<PodReport>> {
        let namespace = self.args.namespace.clone();
        match scenario {
            Scenario::Running | Scenario::Existing => {
                self.use_namespace(&namespace, &[])?;
                let mut reports = Vec::new();
                let pods = if scenario == Scenario::Existing {
                    self.args.existing_pods
                } else {
                    self.args.pods
                };
                for pod in 0..pods {
                    // The names of the demo before scenarios: demo-N-xxxxx.
                    let prefix = if scenario == Scenario::Existing {
                        format!("existing-{pod}-")
                    } else if self.args.scenarios.is_empty() {
                        format!("demo-{pod}-")
                    } else {
                        format!("running-{index}-{pod}-")
                    };
                    let manifest = self.manifest(&namespace, &prefix, false);
                    let report = self.create_running(scenario, &manifest)?;
                    report.emit()?;
                    reports.push(report);
                }
                Ok(reports)
            }
            Scenario::Rejected => {
                self.use_namespace(
                    RESTRICTED_NAMESPACE,
                    &[
                        ("pod-security.kubernetes.io/enforce", "restricted"),
                        ("pod-security.kubernetes.io/enforce-version", "latest"),
                    ],
                )?;
                let name = format!("rejected-{index}");
                let mut manifest = self.manifest(RESTRICTED_NAMESPACE, &name, true);
                manifest["spec"]["containers"][0]["securityContext"] =
                    serde_json::json!({"privileged": true});
                let pod = CreatedPod {
                    namespace: RESTRICTED_NAMESPACE.to_owned(),
                    name,
                    uid: String::new(),
                };
                match self.plane.try_create_pod(&manifest, &[])? {
                    PodCreation::Refused { error } => Ok(vec![PodReport::new(
                        scenario,
                        &pod,
                        format!("rejected: {error}"),
                    )]),
                    PodCreation::Created { pod, .. } => bail!(
                        "Pod {}/{} (privileged) was admitted in a namespace enforcing Pod \
                         Security level restricted",
                        pod.namespace,
                        pod.name
                    ),
                }
            }
            Scenario::Unschedulable => {
                self.use_namespace(&namespace, &[])?;
                let mut manifest =
                    self.manifest(&namespace, &format!("unschedulable-{index}-"), false);
                let (key, value) = ABSENT_NODE_LABEL;
                manifest["spec"]["nodeSelector"] = serde_json::json!({ key: value });
                let (pod, _, _) = self.create(&manifest, &[])?;
                let (message, _) = self.plane.wait_pod(
                    &pod,
                    "its PodScheduled condition to be False with reason Unschedulable",
                    POD_STUCK_TIMEOUT,
                    |object| {
                        object["status"]["conditions"]
                            .as_array()?
                            .iter()
                            .find(|condition| {
                                condition["type"] == "PodScheduled"
                                    && condition["status"] == "False"
                                    && condition["reason"] == "Unschedulable"
                            })
                            .map(|condition| {
                                condition["message"].as_str().unwrap_or_default().to_owned()
                            })
                    },
                )?;
                Ok(vec![PodReport::new(
                    scenario,
                    &pod,
                    format!("unschedulable: {message}"),
                )])
            }
            Scenario::ImageNever => {
                self.use_namespace(&namespace, &[])?;
                let mut manifest =
                    self.manifest(&namespace, &format!("image-never-{index}-"), false);
                manifest["spec"]["containers"][0]["image"] = ABSENT_IMAGE.into();
                let (pod, _, _) = self.create(&manifest, &[])?;
                let (message, status) = self.plane.wait_pod(
                    &pod,
                    "its container to wait with reason ErrImageNeverPull",
                    POD_STUCK_TIMEOUT,
                    |object| {
                        let waiting = &object["status"]["containerStatuses"][0]["state"]["waiting"];
                        (waiting["reason"] == "ErrImageNeverPull")
                            .then(|| waiting["message"].as_str().unwrap_or_default().to_owned())
                    },
                )?;
                let mut report =
                    PodReport::new(scenario, &pod, format!("ErrImageNeverPull: {message}"));
                report.sandbox_id = self.sandbox_id(&pod.uid)?;
                report.node = status["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                Ok(vec![report])
            }
            Scenario::DryRun => {
                self.use_namespace(&namespace, &[])?;
                let manifest = self.manifest(&namespace, &format!("dry-run-{index}-"), false);
                let (pod, _, warnings) = self.create(&manifest, &["--dry-run=server"])?;
                // Nothing was stored: the apiserver does not know the name.
                let lookup = self
                    .plane
                    .kubectl()
                    .args(["get", "pod", "-n", &pod.namespace, &pod.name])
                    .output()
                    .context("running kubectl get pod")?;
                let stderr = String::from_utf8_lossy(&lookup.stderr);
                if lookup.status.success() || !stderr.contains("NotFound") {
                    bail!(
                        "the dry-run Pod {}/{} can be read back: {}",
                        pod.namespace,
                        pod.name,
                        stderr.trim()
                    );
                }
                let mut report = PodReport::new(
                    scenario,
                    &pod,
                    "dry run: admitted by the apiserver, not stored (kubectl get: NotFound)"
                        .to_owned(),
                );
                report.warnings = warnings;
                report.dry_run = true;
                Ok(vec![report])
            }
            Scenario::SecondScheduler => {
                self.use_namespace(&namespace, &[])?;
                self.plane.start_second_scheduler(SECOND_SCHEDULER)?;
                let mut manifest =
                    self.manifest(&namespace, &format!("second-scheduler-{index}-"), false);
                manifest["spec"]["schedulerName"] = SECOND_SCHEDULER.into();
                let log_tail = |plane: &ControlPlane| {
                    format!(
                        "the second kube-scheduler's log ends with:\n{}",
                        plane
                            .scheduler_log_tail(SECOND_SCHEDULER)
                            .unwrap_or_default()
                    )
                };
                let mut report = self
                    .create_running(scenario, &manifest)
                    .with_context(|| log_tail(self.plane))?;
                let scheduled_by = self
                    .scheduled_by(&report)
                    .with_context(|| log_tail(self.plane))?;
                if scheduled_by != SECOND_SCHEDULER {
                    bail!(
                        "Pod {}/{} was scheduled by {scheduled_by:?}, not {SECOND_SCHEDULER:?}",
                        report.namespace,
                        report.name
                    );
                }
                report.outcome = format!("Running (scheduled by {scheduled_by})");
                Ok(vec![report])
            }
            Scenario::Privileged => {
                self.use_namespace(
                    WARNED_NAMESPACE,
                    &[
                        ("pod-security.kubernetes.io/warn", "baseline"),
                        ("pod-security.kubernetes.io/warn-version", "latest"),
                    ],
                )?;
                let mut manifest =
                    self.manifest(WARNED_NAMESPACE, &format!("privileged-{index}-"), false);
                manifest["spec"]["containers"][0]["securityContext"] = serde_json::json!({
                    "privileged": true,
                    "runAsUser": 0,
                    "capabilities": {"add": ["NET_ADMIN", "SYS_TIME"]},
                });
                let report = self.create_running(scenario, &manifest)?;
                if report.warnings.is_empty() {
                    bail!(
                        "the apiserver gave no Pod Security warning about privileged Pod {}/{}",
                        report.namespace,
                        report.name
                    );
                }
                Ok(vec![report])
            }
            Scenario::Http1 => {
                self.use_namespace(&namespace, &[])?;
                let manifest = self.manifest(&namespace, &format!("http1-{index}-"), false);
                let step = Instant::now();
                let pod = self.plane.create_pod_http1(&manifest)?;
                let report = self.await_running(scenario, &pod, Vec::new(), step)?;
                Ok(vec![report])
            }
            Scenario::Burst => {
                self.use_namespace(&namespace, &[])?;
                let manifests: Vec<_> = (0..self.args.burst_pods)
                    .map(|pod| self.manifest(&namespace, &format!("burst-{index}-{pod}-"), false))
                    .collect();
                let step = Instant::now();
                let pods = self.plane.create_pods_at_once(&manifests)?;
                self.await_all_running(scenario, &pods, step)
            }
            Scenario::Deployment => {
                self.use_namespace(&namespace, &[])?;
                let name = format!("deployment-{index}");
                let mut template = self.manifest(&namespace, "", false);
                // Its own selector: the end's cleanup (by the demo label)
                // must not race the ReplicaSet controller.
                template["metadata"]["labels"]["podtrace-demo/deployment"] = name.clone().into();
                let step = Instant::now();
                let pods = self
                    .plane
                    .deploy(&namespace, &name, &template, self.args.burst_pods)?;
                let reports = self.await_all_running(scenario, &pods, step)?;
                self.plane.scale_to_zero(&namespace, &name, &template)?;
                say!(
                    "podtrace-demo: Deployment {namespace}/{name} scaled to 0; its {} Pods are gone",
                    pods.len()
                );
                Ok(reports)
            }
        }
    }
}

/// The id of the Pod's first container, from its status.
fn container_id(status: &serde_json::Value) -> String {
    status["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .rsplit("://")
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[allow(clippy::too_many_arguments, reason = "the parts of one run, borrowed")]
fn drive_kubernetes(
    args: &Args,
    scenarios: &[Scenario],
    node: &str,
    plane: &mut ControlPlane,
    containerd: &Containerd,
    runtime: &tokio::runtime::Runtime,
    shutdown: &Shutdown,
    namespaces: &mut Vec<String>,
) -> anyhow::Result<()> {
    let mut cluster = Cluster {
        args,
        node,
        template: containerd.pod_template(),
        cri: runtime.block_on(containerd.cri())?,
        plane,
        runtime,
        namespaces,
    };
    if args.existing_pods > 0 {
        cluster
            .run(Scenario::Existing, 0)
            .context("creating the Pods that exist before `ready`")?;
    }
    if let Some(file) = &args.cluster_info {
        let info = serde_json::json!({
            "kubeconfig": cluster.plane.admin_kubeconfig(),
            "containerd_socket": containerd.socket(),
            "pod_subnet": containerd.pod_subnet(),
        });
        std::fs::write(file, info.to_string())
            .with_context(|| format!("writing {}", file.display()))?;
    }
    // Started before `ready`: its connection is older than an agent started then.
    let apiserver_load = args
        .apiserver_load
        .map(|mix| start_apiserver_load(args, cluster.plane, mix))
        .transpose()?;
    let mut run_scenarios = || -> anyhow::Result<()> {
        emit("ready")?;
        if let Some(file) = &args.wait_for {
            runtime.block_on(wait_for_file(file, "creating Pods", shutdown))?;
        }
        for (index, &scenario) in scenarios.iter().enumerate() {
            shutdown.check()?;
            let step = Instant::now();
            let reports = cluster
                .run(scenario, index)
                .with_context(|| format!("scenario {}", scenario.name()))?;
            // `running` reports each Pod as soon as it runs.
            if scenario != Scenario::Running {
                for report in &reports {
                    report.emit()?;
                }
            }
            say!(
                "podtrace-demo: scenario {} done in {:.1?}",
                scenario.name(),
                step.elapsed()
            );
        }
        Ok(())
    };
    let scenarios_done = run_scenarios();
    if let Some((mix, load)) = apiserver_load {
        let done = load.stop().context("the apiserver load")?;
        report_apiserver_load(mix, &done)?;
    }
    scenarios_done?;
    if args.linger > 0 {
        say!(
            "podtrace-demo: Pods created; everything keeps running for {} s (Ctrl-C ends it \
             sooner); kubectl --kubeconfig {}",
            args.linger,
            cluster.plane.admin_kubeconfig().display()
        );
        runtime.block_on(async {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(args.linger)) => {}
                () = shutdown.token.cancelled() => {}
            }
        });
    }
    if let Some(file) = &args.hold {
        emit("done")?;
        runtime.block_on(wait_for_file(
            file,
            "deleting the Pods and stopping",
            shutdown,
        ))?;
    }
    Ok(())
}
