//! `cargo xtask demo`: a newcomer's first minute. Runs the podtrace agent on
//! this host while `podtrace-demo` creates Pods through real etcd and real
//! containerd + runc (playing kube-apiserver's etcd writes, the scheduler's
//! binding and the kubelet's CRI calls itself, as it says; with `--k8s-bin`
//! it starts a real kube-apiserver, kube-scheduler and kubelet from the
//! user's binaries and creates the Pods with kubectl), then prints each
//! Pod's waterfall, a table of phase latencies and where the traces are.
//!
//! The agent starts once the components have run and talked for a while,
//! as a DaemonSet's agent joins a node's running cluster: every connection
//! between them is older than the agent (`--agent-first` starts it before).

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

/// What `cargo xtask demo` was asked for.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// How many Pods to create.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=200))]
    pods: u32,
    /// A directory with kube-apiserver, kube-scheduler and kubelet, to run a
    /// real control plane instead of playing its roles.
    #[arg(long, value_name = "DIR")]
    k8s_bin: Option<PathBuf>,
    /// Also send the spans to this OTLP endpoint (e.g. http://localhost:4317).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// The OTLP-JSON file the traces are written to (must not exist yet).
    #[arg(long, value_name = "FILE", default_value = "podtrace-demo.otlp.jsonl")]
    out: PathBuf,
    /// Serve etcd without TLS (default: mTLS with etcd authentication).
    #[arg(long)]
    plain_etcd: bool,
    /// Run etcd as this many members of one cluster: each Pod write then
    /// shows the leader's WAL append + fdatasync, its replication to each
    /// follower (with the follower's WAL), the commit and the apply, named
    /// by member and role (leader, follower).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5))]
    etcd_members: u32,
    /// Keep the components and the agent running this many seconds after
    /// the Pods are created (look at the metrics, run `podtrace explain`).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    linger: u64,
    /// Start the agent before the components, so that it sees each of
    /// their connections open (by default it joins them running, as on a
    /// node of a running cluster).
    #[arg(long)]
    agent_first: bool,
}

/// Where the agent serves its metrics and recent traces during the demo.
const METRICS_ADDR: &str = "127.0.0.1:9464";

/// The cluster id the demo's traces are derived under.
const CLUSTER_ID: &str = "podtrace-demo";
/// How long the components run and talk (leases, peer streams, watches)
/// before the agent joins them.
const RUNNING_BEFORE_AGENT: Duration = Duration::from_secs(10);
/// How long the agent may take to attach.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long after the last Pod the agent keeps running: spans wait up to
/// 2 s for their parents, CNI runs 1 s to settle.
const DRAIN: Duration = Duration::from_secs(4);

pub(crate) fn demo(root: &Path, args: DemoArgs) -> anyhow::Result<()> {
    let k8s_bin = match &args.k8s_bin {
        Some(dir) => Some(
            std::path::absolute(dir)
                .with_context(|| format!("resolving --k8s-bin {}", dir.display()))?,
        ),
        None => None,
    };
    let out = std::path::absolute(&args.out).context("resolving --out")?;
    if out.exists() {
        bail!(
            "{} exists: the demo writes a new file (remove it or choose another --out)",
            out.display()
        );
    }
    super::setup::setup(root)?;
    let podtrace =
        super::build_podtrace(root, &["-p", "podtrace-tests", "--bin", "podtrace-demo"])?;
    let driver = root.join("target/release/podtrace-demo");
    let node = hostname();

    let start_agent = || -> anyhow::Result<Agent> {
        let agent = Agent::start(&podtrace, &out, &node, args.otlp_endpoint.as_deref())?;
        println!("xtask: podtrace is running; creating {} Pods", args.pods);
        Ok(agent)
    };
    let mut agent = None;
    if args.agent_first {
        agent = Some(start_agent()?);
    }
    let created = run_driver(&driver, &args, k8s_bin.as_deref(), &node, || {
        if agent.is_none() {
            println!(
                "xtask: the components run; podtrace joins them in {} s, as it joins a \
                 running cluster (--agent-first starts it before them)",
                RUNNING_BEFORE_AGENT.as_secs()
            );
            thread::sleep(RUNNING_BEFORE_AGENT);
            agent = Some(start_agent()?);
        }
        Ok(())
    });
    let Some(mut agent) = agent else {
        created?;
        bail!("podtrace-demo ended without saying it was ready");
    };
    // The agent first sees the last spans through, then stops.
    thread::sleep(DRAIN);
    let stopped = agent.stop();
    let pods = created?;
    stopped?;

    let spans = read_spans(&out)?;
    print_summary(&pods, &spans);
    println!("xtask: traces (OTLP-JSON) in {}", out.display());
    println!(
        "xtask: a Pod's story: target/release/podtrace explain NAMESPACE/NAME --file {}",
        out.display()
    );
    let incomplete: Vec<&str> = pods
        .iter()
        .filter(|pod| !has_complete_root(&spans, pod))
        .map(|pod| pod.name.as_str())
        .collect();
    if !incomplete.is_empty() {
        bail!("no complete trace for {}", incomplete.join(", "));
    }
    Ok(())
}

/// The podtrace agent, running until [`Agent::stop`]; its waterfalls go to
/// this terminal.
struct Agent {
    child: Child,
}

impl Agent {
    fn start(
        binary: &Path,
        out: &Path,
        node: &str,
        otlp_endpoint: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        command
            .args(["run", "--quiet", "--target", "podtrace-demo"])
            .args(["--target", "demo-apiserver"])
            .args(["--cluster-id", CLUSTER_ID, "--node-name", node])
            .args(["--metrics-addr", METRICS_ADDR, "--out"])
            .arg(out)
            .stderr(Stdio::piped());
        if let Some(endpoint) = otlp_endpoint {
            command.args(["--otlp-endpoint", endpoint]);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().context("agent stderr")?;
        let (attached_tx, attached_rx) = mpsc::channel();
        // Forward the agent's log; say when it has attached.
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("attached; following") {
                    let _ = attached_tx.send(());
                }
                eprintln!("{line}");
            }
        });
        let mut agent = Self { child };
        match attached_rx.recv_timeout(ATTACH_TIMEOUT) {
            Ok(()) => Ok(agent),
            Err(_) => {
                let _ = agent.stop();
                bail!("podtrace did not attach within {ATTACH_TIMEOUT:?} (its log is above)")
            }
        }
    }

    /// SIGINT, as Ctrl-C would: the agent detaches, flushes and exits.
    fn stop(&mut self) -> anyhow::Result<()> {
        let pid = libc::pid_t::try_from(self.child.id()).context("agent pid")?;
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("podtrace exited with {status}");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                bail!("podtrace did not stop within 30 s of SIGINT; killed");
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A Pod the driver created.
struct DemoPod {
    namespace: String,
    name: String,
    uid: String,
}

/// Runs the driver; `on_ready` runs once its components are up, before it
/// creates the Pods.
fn run_driver(
    driver: &Path,
    args: &DemoArgs,
    k8s_bin: Option<&Path>,
    node: &str,
    on_ready: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<DemoPod>> {
    // The driver waits for this file after `ready`.
    let go = std::env::temp_dir().join(format!("podtrace-xtask-demo-{}.go", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let mut command = Command::new(driver);
    command
        .args(["--pods", &args.pods.to_string(), "--node-name", node])
        .arg("--wait-for")
        .arg(&go)
        .args(["--linger", &args.linger.to_string()])
        .args(["--etcd-members", &args.etcd_members.to_string()])
        .stdout(Stdio::piped());
    if args.plain_etcd {
        command.arg("--plain-etcd");
    }
    if let Some(dir) = k8s_bin {
        // A real kube-apiserver, kube-scheduler and kubelet: podtrace
        // follows them by default.
        command.arg("--k8s-bin").arg(dir);
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", driver.display()))?;
    let stdout = child.stdout.take().context("podtrace-demo stdout")?;
    let mut pods = Vec::new();
    let mut on_ready = Some(on_ready);
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line.trim() == "ready" {
            let ready = on_ready.take().map_or(Ok(()), |on_ready| on_ready());
            if let Err(error) = ready {
                // The driver waits for `go`: stopping it cleans up.
                if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                    // SAFETY: kill has no memory preconditions; the pid is our child's.
                    unsafe { libc::kill(pid, libc::SIGINT) };
                }
                let _ = child.wait();
                return Err(error);
            }
            std::fs::write(&go, b"").with_context(|| format!("writing {}", go.display()))?;
            continue;
        }
        let Ok(pod) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let field = |key: &str| pod[key].as_str().unwrap_or_default().to_owned();
        pods.push(DemoPod {
            namespace: field("namespace"),
            name: field("name"),
            uid: field("uid"),
        });
        if pods.len() == args.pods as usize && args.linger > 0 {
            println!(
                "xtask: {} Pods created; for {} s: metrics at http://{METRICS_ADDR}/metrics, \
                 and `target/release/podtrace explain {}/{}`",
                pods.len(),
                args.linger,
                pods[0].namespace,
                pods[0].name
            );
        }
    }
    let status = child.wait()?;
    let _ = std::fs::remove_file(&go);
    if !status.success() {
        bail!("podtrace-demo failed ({status}): see its messages above");
    }
    Ok(pods)
}

/// The spans of an OTLP-JSON file, each as its JSON object.
fn read_spans(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (did podtrace export anything?)", path.display()))?;
    let mut spans = Vec::new();
    for line in text.lines() {
        let request: Value = serde_json::from_str(line).context("a line of the OTLP-JSON file")?;
        for resource in request["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
            }
        }
    }
    Ok(spans)
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)
        .and_then(|kv| kv["value"].as_object()?.values().next())
}

fn pod_uid(span: &Value) -> Option<&str> {
    attribute(span, "k8s.pod.uid")?.as_str()
}

fn has_complete_root(spans: &[Value], pod: &DemoPod) -> bool {
    spans.iter().any(|span| {
        pod_uid(span) == Some(pod.uid.as_str())
            && span["parentSpanId"].as_str().unwrap_or_default().is_empty()
            && attribute(span, "podtrace.trace.complete") == Some(&Value::Bool(true))
    })
}

fn duration_ms(span: &Value) -> Option<f64> {
    let time = |key: &str| span[key].as_str()?.parse::<u64>().ok();
    let (start, end) = (time("startTimeUnixNano")?, time("endTimeUnixNano")?);
    Some(end.saturating_sub(start) as f64 / 1e6)
}

/// The phases of the summary table: a name and which span measures it.
fn phase_of(span: &Value) -> Option<&'static str> {
    let name = span["name"].as_str()?;
    let kind = span["kind"].as_u64();
    let change = attribute(span, "podtrace.k8s.pod.change").and_then(Value::as_str);
    let server = kind == Some(2);
    let root = span["parentSpanId"].as_str().unwrap_or_default().is_empty();
    Some(match name {
        // A creation's root; a deletion's (`pod.delete …`) is no Pod start.
        _ if root && name.starts_with("pod.create ") => "end to end",
        _ if root => return None,
        "etcdserverpb.KV/Txn" if server && change == Some("created") => "etcd create",
        "etcdserverpb.KV/Txn" if server && change.is_some_and(|c| c.starts_with("bound")) => {
            "etcd binding"
        }
        "etcd WAL append + fdatasync" => "WAL append+fdatasync",
        // The components' own spans (with --k8s-bin: real components, probed).
        "apiserver POST /api/v1/namespaces/{namespace}/pods" => "apiserver create",
        "scheduler queue" => "scheduler queue",
        "scheduler scheduling cycle" => "scheduling cycle",
        "kubelet pod dispatch" => "kubelet dispatch",
        "kubelet volume wait" => "volume wait",
        "runtime.v1.RuntimeService/RunPodSandbox" if server => "CRI RunPodSandbox",
        "runtime.v1.RuntimeService/CreateContainer" if server => "CRI CreateContainer",
        "runtime.v1.RuntimeService/StartContainer" if server => "CRI StartContainer",
        "runc create" => "runc create",
        "runc start" => "runc start",
        _ => return None,
    })
}

const PHASES: [&str; 15] = [
    "end to end",
    "apiserver create",
    "etcd create",
    "WAL append+fdatasync",
    "scheduler queue",
    "scheduling cycle",
    "etcd binding",
    "kubelet dispatch",
    "volume wait",
    "CRI RunPodSandbox",
    "CRI CreateContainer",
    "CRI StartContainer",
    "runc create",
    "runc start",
    "container started",
];

fn print_summary(pods: &[DemoPod], spans: &[Value]) {
    let mut samples: HashMap<&str, Vec<f64>> = HashMap::new();
    for pod in pods {
        let of_pod: Vec<&Value> = spans
            .iter()
            .filter(|span| pod_uid(span) == Some(pod.uid.as_str()))
            .collect();
        for span in &of_pod {
            if let (Some(phase), Some(ms)) = (phase_of(span), duration_ms(span)) {
                samples.entry(phase).or_default().push(ms);
            }
        }
        // Create request to the container's first process: what a user waits for.
        let time = |span: &Value, key: &str| span[key].as_str()?.parse::<u64>().ok();
        let root_start = of_pod
            .iter()
            .find(|span| span["parentSpanId"].as_str().unwrap_or_default().is_empty())
            .and_then(|root| time(root, "startTimeUnixNano"));
        let started = of_pod
            .iter()
            .filter(|span| {
                span["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("container process start"))
            })
            .filter_map(|span| time(span, "startTimeUnixNano"))
            .max();
        if let (Some(start), Some(started)) = (root_start, started) {
            samples
                .entry("container started")
                .or_default()
                .push(started.saturating_sub(start) as f64 / 1e6);
        }
        println!(
            "xtask: {}/{} uid {} trace in {} spans",
            pod.namespace,
            pod.name,
            pod.uid,
            of_pod.len()
        );
    }
    println!();
    println!(
        "{:<22} {:>7} {:>10} {:>10} {:>10}",
        "phase", "samples", "p50 ms", "p90 ms", "max ms"
    );
    for phase in PHASES {
        let Some(values) = samples.get_mut(phase) else {
            // The components' own phases exist only with real components.
            continue;
        };
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        println!(
            "{phase:<22} {:>7} {:>10.3} {:>10.3} {:>10.3}",
            values.len(),
            at(0.5),
            at(0.9),
            at(1.0)
        );
    }
    println!();
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_lowercase())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "demo-node".to_owned())
}
