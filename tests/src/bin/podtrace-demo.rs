//! `podtrace-demo`: Pod creations through a real etcd and a real containerd
//! with runc, this program playing the rest of the control plane itself —
//! kube-apiserver's etcd writes, the scheduler's binding, the kubelet's CRI
//! calls and status report — so that a tracer has the path of DESIGN.md §1
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
//! "container_id", "node"}`. On stderr: what it does and how long each step
//! took. It removes its containers and sandboxes and stops containerd,
//! demo-apiserver and etcd before it exits — after an error or
//! SIGINT/SIGTERM too (exit status 1, 130 or 143). Tracers find it by its
//! process name, `podtrace-demo`, and its etcd client by `demo-apiserver`.
//!
//! With `--k8s-bin DIR` it plays no role: it starts a real control plane
//! from the kube-apiserver, kube-scheduler, kubelet and kubectl in DIR on the
//! same etcd and containerd ([`ControlPlane`]), creates the Pods with
//! kubectl, waits until each is Running, and prints the same JSON lines (the
//! sandbox id read from containerd's CRI, the container id from the Pod's
//! status). The Pods are deleted through the apiserver before everything
//! stops.

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
    apiserver_role::{self, RunningContainer},
    cri::api,
    demo_apiserver,
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
    /// Keep everything running this many seconds after the Pods are created
    /// (to look at traces, metrics and `podtrace explain`), then clean up.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    linger: u64,
    /// After printing `ready`, wait until this file exists before creating
    /// Pods (so that a tracer can attach first).
    #[arg(long, value_name = "FILE")]
    wait_for: Option<PathBuf>,
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

/// A namespace name: an RFC 1123 label, as the apiserver validates it.
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
         \x20 - kubelet: RunPodSandbox, CreateContainer and StartContainer over containerd's CRI, \
         then the status report (phase Running), written as the apiserver would.\n\
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
    let etcd = Etcd::prepare_in(
        EtcdOptions {
            tls: secure,
            auth: secure,
        },
        &args.state_dir,
    )
    .context("preparing etcd")?;
    // Before etcd and containerd start, so that a tracer that saw it start
    // has attached by its first call.
    let apiserver = ApiserverRole::start(&relay, etcd.endpoint(), etcd.pki())
        .context("starting demo-apiserver")?;
    say!(
        "podtrace-demo: demo-apiserver (pid {}) started; it connects to etcd at its first call",
        apiserver.relay_pid()
    );
    let etcd = etcd.start().context("starting etcd")?;
    shutdown.check()?;
    let containerd = Containerd::start_in(
        ContainerdOptions {
            image_cache_dir: args.state_dir.clone(),
        },
        &args.state_dir,
    )
    .context("starting containerd")?;
    shutdown.check()?;
    let result = runtime.block_on(drive(args, &node, &apiserver, &etcd, &containerd, shutdown));
    // containerd before etcd, as a node goes before its control plane; etcd's
    // client before etcd too.
    drop(containerd);
    drop(apiserver);
    drop(etcd);
    result
}

/// Builds demo-apiserver in `--build-dir`, saying how long it took.
fn build_demo_apiserver(args: &Args) -> anyhow::Result<DemoApiserverBinary> {
    let dir = match &args.build_dir {
        Some(dir) => dir.clone(),
        None => args.state_dir.join("podtrace-demo-apiserver"),
    };
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
        wait_for_file(file, shutdown).await?;
    }

    // The image and command in the Pod spec are the ones the CRI calls run.
    let template = containerd.pod_template();
    let mut created = Vec::new();
    let creations = async {
        for index in 0..args.pods {
            create_pod(args, node, index, apiserver, &cri, &template, &mut created).await?;
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
    let cleanup = remove_pods(&cri, &created).await;
    outcome?;
    cleanup
}

async fn wait_for_file(file: &Path, shutdown: &Shutdown) -> anyhow::Result<()> {
    say!(
        "podtrace-demo: waiting for {} to exist before creating Pods",
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
    created: &mut Vec<PodHandles>,
) -> anyhow::Result<()> {
    let namespace = &args.namespace;
    let (name, pod, uid) = new_demo_pod(args, &format!("demo-{index}-"), template)?;
    let what = || format!("Pod {namespace}/{name}");

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
    created.push(handles.clone());
    let cri_took = step.elapsed();
    let sandbox = cri
        .pod_sandbox_status(&handles.sandbox_id)
        .await
        .with_context(|| format!("kubelet reading the sandbox status of {}", what()))?;
    let container = cri
        .container_status(&handles.container_id)
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

/// `--k8s-bin`: etcd, containerd and a real control plane on them; the Pods
/// created with kubectl.
fn run_kubernetes(
    args: &Args,
    bin_dir: &Path,
    node: &str,
    runtime: &tokio::runtime::Runtime,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    ControlPlane::check_binaries(bin_dir)?;
    if args.plain_etcd {
        bail!("--k8s-bin runs kube-apiserver with etcd's client certificate: drop --plain-etcd");
    }
    if args.broken_pods > 0 {
        bail!("--broken-pods is not supported with --k8s-bin yet");
    }
    say!(
        "podtrace-demo: a real control plane from {}: kube-apiserver on a real etcd (TLS, \
         authentication; it is etcd user kube-apiserver by its client certificate), \
         kube-scheduler, and a kubelet on a real containerd + runc, node {node:?}. \
         Pods: {} in namespace {:?}, created with kubectl one after the other.",
        bin_dir.display(),
        args.pods,
        args.namespace
    );
    let started = Instant::now();
    let etcd = Etcd::start_in(
        EtcdOptions {
            tls: true,
            auth: true,
        },
        &args.state_dir,
    )
    .context("starting etcd")?;
    shutdown.check()?;
    let containerd = Containerd::start_in(
        ContainerdOptions {
            image_cache_dir: args.state_dir.clone(),
        },
        &args.state_dir,
    )
    .context("starting containerd")?;
    shutdown.check()?;
    let plane = ControlPlane::start_in(
        ControlPlaneOptions {
            bin_dir: bin_dir.to_owned(),
            node_name: node.to_owned(),
        },
        &args.state_dir,
        &etcd,
        &containerd,
    )
    .context("starting the control plane")?;
    say!(
        "podtrace-demo: etcd, containerd and the control plane ready in {:.1?}",
        started.elapsed()
    );
    let result = drive_kubernetes(args, node, &plane, &containerd, runtime, shutdown);
    // Pods go through the apiserver while everything still runs.
    let cleanup = if args.pods > 0 {
        plane
            .delete_pods(&args.namespace, "app=podtrace-demo")
            .context("deleting the demo Pods")
    } else {
        Ok(())
    };
    drop(plane);
    drop(containerd);
    drop(etcd);
    result?;
    cleanup
}

fn drive_kubernetes(
    args: &Args,
    node: &str,
    plane: &ControlPlane,
    containerd: &Containerd,
    runtime: &tokio::runtime::Runtime,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    emit("ready")?;
    if let Some(file) = &args.wait_for {
        runtime.block_on(wait_for_file(file, shutdown))?;
    }
    let template = containerd.pod_template();
    let cri = runtime.block_on(containerd.cri())?;
    for index in 0..args.pods {
        shutdown.check()?;
        let manifest = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": format!("demo-{index}-"),
                "namespace": args.namespace,
                "labels": POD_LABELS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>(),
            },
            "spec": {
                // Nothing publishes kube-root-ca.crt without a controller
                // manager: no token volume.
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main",
                    "image": template.image,
                    "imagePullPolicy": "Never",
                    "command": template.command,
                }],
            },
        });
        let step = Instant::now();
        let pod: CreatedPod = plane.create_pod(&manifest)?;
        let create_took = step.elapsed();
        let status = plane.wait_running(&pod, POD_RUNNING_TIMEOUT)?;
        let running_took = step.elapsed();
        let container_id = status["status"]["containerStatuses"][0]["containerID"]
            .as_str()
            .unwrap_or_default()
            .rsplit("://")
            .next()
            .unwrap_or_default()
            .to_owned();
        let sandbox_id = runtime
            .block_on(cri.list_pod_sandboxes())?
            .into_iter()
            .find(|sandbox| {
                sandbox
                    .metadata
                    .as_ref()
                    .is_some_and(|metadata| metadata.uid == pod.uid)
            })
            .map(|sandbox| sandbox.id)
            .unwrap_or_default();
        let on_node = status["spec"]["nodeName"].as_str().unwrap_or(node);
        say!(
            "podtrace-demo: {}/{} (uid {}) running on {on_node}: created in {:.1?}, Running \
             after {:.1?} (as kubectl saw it)",
            pod.namespace,
            pod.name,
            pod.uid,
            create_took,
            running_took
        );
        emit(
            &serde_json::json!({
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
                "sandbox_id": sandbox_id,
                "container_id": container_id,
                "node": on_node,
            })
            .to_string(),
        )?;
    }
    if args.linger > 0 {
        say!(
            "podtrace-demo: Pods created; everything keeps running for {} s (Ctrl-C ends it \
             sooner); kubectl --kubeconfig {}",
            args.linger,
            plane.admin_kubeconfig().display()
        );
        runtime.block_on(async {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(args.linger)) => {}
                () = shutdown.token.cancelled() => {}
            }
        });
    }
    Ok(())
}
