//! `cargo xtask bench overhead`: what podtrace costs the components it
//! watches, measured on real etcd (mTLS) under a closed-loop write load from
//! a Go client (`etcd-load`, whose TLS and HTTP/2 podtrace traces as it
//! traces kube-apiserver's).
//!
//! For each key mix (Pod writes; lease and event writes) the same load client
//! — its connections opened before any agent, as the apiserver's are — runs
//! legs in one invocation, alternating without podtrace and with `podtrace
//! run`, starting and ending without (`--rounds 2`: without / with / without
//! / with / without). Throughput and latency are reported as ratios of the
//! legs with to the legs without, all of them; the agent's CPU per 1000
//! writes/s, each BPF program's runs and ns per run
//! (`kernel.bpf_stats_enabled`, on for a window in the middle of each leg:
//! its accounting has a cost of its own) and every drop counter of the legs with
//! podtrace are printed beside them. Nothing here is asserted: the figures
//! are the result (see README's table).
//!
//! The Pod writes are status updates of Pods that exist before podtrace
//! starts, as most Pod writes of a running cluster are: podtrace decodes
//! each to learn that and traces none (a Pod's creation is what it follows);
//! Pods created under the load are the live test's part.
//!
//! Then Pod start: `podtrace-demo` creates `--pod-start N` Pods at once
//! (real etcd, containerd and runc), without, with and without podtrace
//! (`--pod-start-rounds`, 6 by default: one burst is a few seconds and
//! noisy); each Pod's time from create to Running stored, median and max.
//!
//! Last, what every other process of the node pays: this benchmark's own
//! process, which podtrace does not follow, makes 1-byte reads and writes
//! (hooked syscalls, so `sys_enter` and `sys_exit` do the most they do for
//! a process they let go) in legs without and with podtrace
//! (`--syscall-rounds`); ns per syscall.
//!
//! With `--baseline-agent PATH` (an earlier podtrace build) each round, of
//! the writes and of the Pod start, has a leg with that agent too, beside
//! the leg with this one (their order alternates), and the report adds this agent's figures over the earlier
//! one's: a change measured against its baseline in one invocation, which
//! the drift between invocations on a small machine otherwise hides.
//!
//! Root. Flags: `--seconds N` per leg (0: Pod start only), `--rounds N`, `--workers N`,
//! `--conns N`, `--mix pods|not-pods` (repeatable; default both),
//! `--pod-start N`, `--pod-start-rounds N`, `--syscall-rounds N`,
//! `--baseline-agent PATH`, `--agent-arg ARG` (to this build's agent only,
//! repeatable).

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark program: a failed step ends it with its reason"
)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use podtrace_tests::{
    agent::{self, Agent},
    components::{
        Containerd, ContainerdOptions, ControlPlane, ControlPlaneOptions, Etcd, EtcdOptions,
        apiserver_load::{ApiserverLoadBinary, ApiserverMix},
        etcd_load::{BINARY_NAME, EtcdLoadBinary, KeyMix, VALUE_BYTES, apiserver_tls},
        load_client::{LegResult, LoadClient},
    },
};

#[derive(Debug, Parser)]
struct Args {
    /// Seconds per leg of the write load (0: no write legs, only the Pod
    /// start).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Closed-loop writers.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// TLS connections the writers share.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// etcd key mixes to run (default: both, unless only
    /// `--apiserver-mix` is given).
    #[arg(long = "mix", value_enum)]
    mixes: Vec<Mix>,
    /// Clients of the etcd mixes (default: both): Go's crypto/tls and
    /// HTTP/2, as kube-apiserver; gRPC's C core (Python grpcio), as etcd's
    /// clients in other languages. Every mix runs with each.
    #[arg(long = "etcd-client", value_enum)]
    etcd_clients: Vec<EtcdClient>,
    /// kube-apiserver mixes to run (default: all, unless only `--mix` is
    /// given); they need `PODTRACE_K8S_BIN`.
    #[arg(long = "apiserver-mix", value_enum)]
    apiserver_mixes: Vec<ApiserverMixArg>,
    /// Legs with podtrace, each between two without: 2 runs
    /// without / with / without / with / without. A 2-core machine's
    /// throughput drifts by tens of percent over a minute; more legs
    /// average the drift out of the ratios. The Pod start legs alternate
    /// the same way.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// An earlier podtrace binary to compare with: each round gets a leg
    /// with it too, and the rounds are made even (each agent first in half
    /// of them).
    #[arg(long, value_name = "PATH")]
    baseline_agent: Option<PathBuf>,
    /// An argument added to this build's `podtrace run`, not the baseline
    /// agent's (repeatable): `--agent-arg=--nice --agent-arg=10`.
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Pods that `podtrace-demo` creates at once in each leg of the Pod
    /// start benchmark, after one burst not counted (0: skip it).
    #[arg(long, default_value_t = 10)]
    pod_start: u32,
    /// Rounds of the Pod start legs, each a single burst of a few seconds:
    /// their p50 moves by ±10 % from one burst to the next on this VM, so
    /// two rounds (the write legs' default) could not tell +5 % apart.
    #[arg(long, default_value_t = 6)]
    pod_start_rounds: usize,
    /// Rounds of the syscall legs (a process podtrace does not follow:
    /// what every other process on a node pays); 0 skips them.
    #[arg(long, default_value_t = 3)]
    syscall_rounds: usize,
    /// An agent's start lasts until its on-demand probes have stayed
    /// detached for this long (they come back whenever a connection older
    /// than the agent talks for the first time): a leg then measures a
    /// settled agent, as a DaemonSet's is most of its life. What the start
    /// cost is printed apart.
    #[arg(long, default_value_t = 15)]
    settle: u64,
    /// The start is cut off after this many seconds whatever the probes
    /// say (the report says how long each start took, and how much of the
    /// leg the probes were attached).
    #[arg(long, default_value_t = 210)]
    start_max: u64,
    /// cargo bench passes `--bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Mix {
    Pods,
    NotPods,
    /// Pod keys whose values are not Kubernetes objects.
    OpaquePods,
}

impl From<Mix> for KeyMix {
    fn from(mix: Mix) -> Self {
        match mix {
            Mix::Pods => KeyMix::Pods,
            Mix::NotPods => KeyMix::NotPods,
            Mix::OpaquePods => KeyMix::OpaquePods,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EtcdClient {
    Go,
    Python,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ApiserverMixArg {
    Leases,
    Reads,
    Events,
    Mixed,
    Watches,
}

impl From<ApiserverMixArg> for ApiserverMix {
    fn from(mix: ApiserverMixArg) -> Self {
        match mix {
            ApiserverMixArg::Leases => ApiserverMix::Leases,
            ApiserverMixArg::Reads => ApiserverMix::Reads,
            ApiserverMixArg::Events => ApiserverMix::Events,
            ApiserverMixArg::Mixed => ApiserverMix::Mixed,
            ApiserverMixArg::Watches => ApiserverMix::Watches,
        }
    }
}

/// Seconds the load runs before the first leg (etcd's and Go's caches warm).
const WARM_UP: Duration = Duration::from_secs(3);
/// The agent's start, measured apart from its leg, lasts at least this
/// long, then until its on-demand probes have stayed detached for
/// `--settle`: the HPACK probes come back while it copies the tables of
/// connections open before it, the per-call TLS probes until it has read
/// those connections' TLS secrets — each such connection calls them back
/// when it first talks, and a control plane's idle ones (kube-apiserver's
/// per-resource etcd clients, the components' watches) talk every few
/// seconds to a minute. A leg measures what the agent costs once settled;
/// the start is printed apart, with how long it took (cut off at
/// `--start-max`; on a control plane the per-call TLS probes are held
/// through the agent's first 135 s, `STARTUP_HOLD_NS`).
const AGENT_START_MIN: Duration = Duration::from_millis(1500);
/// How often the agent's metrics are looked at during its start.
const AGENT_START_SLICE: Duration = Duration::from_millis(250);
/// How often they are looked at during its leg: each look renders every
/// metric in the agent, whose CPU the leg measures (a Prometheus scrapes
/// every 15–60 s; four looks a second would be the agent's own cost).
const LEG_SAMPLE: Duration = Duration::from_secs(1);
/// The gauges of the agent's on-demand probes (an earlier build may lack
/// the second: absent counts as detached).
const ON_DEMAND_GAUGES: [&str; 2] = [
    "podtrace_hpack_probes_attached",
    "podtrace_tls_call_probes_attached",
];

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the overhead benchmark loads eBPF programs: run it as root");
    }
    // Without either mix flag every mix runs; with one, only its kind.
    let mixes: Vec<KeyMix> =
        if args.seconds == 0 || (args.mixes.is_empty() && !args.apiserver_mixes.is_empty()) {
            Vec::new()
        } else if args.mixes.is_empty() {
            vec![KeyMix::NotPods, KeyMix::Pods, KeyMix::OpaquePods]
        } else {
            args.mixes.iter().copied().map(KeyMix::from).collect()
        };
    let apiserver = args.seconds > 0 && (args.mixes.is_empty() || !args.apiserver_mixes.is_empty());
    let clients = if args.etcd_clients.is_empty() {
        vec![EtcdClient::Go, EtcdClient::Python]
    } else {
        args.etcd_clients.clone()
    };
    let mut load_binaries = Vec::new();
    if !mixes.is_empty() {
        for client in clients {
            let binary = match client {
                EtcdClient::Go => EtcdLoadBinary::build(
                    &Path::new(env!("CARGO_TARGET_TMPDIR")).join("etcd-load"),
                )?,
                EtcdClient::Python => EtcdLoadBinary::python()?,
            };
            load_binaries.push((client, binary));
        }
    }
    // Two agents in a round run one after the other, and this VM's
    // throughput drifts within a round: an A/A run (the same binary as
    // both agents, three rounds) had the agent that ran first in two of
    // them at 0.89 of the other. An even count puts each first as often.
    let even_rounds = |rounds: usize| {
        if args.baseline_agent.is_some() {
            rounds.max(1).next_multiple_of(2)
        } else {
            rounds.max(1)
        }
    };
    let rounds = even_rounds(args.rounds);
    println!(
        "podtrace overhead on etcd {} (mTLS): {} closed-loop writers on {} HTTP/2 connections \
         (Go crypto/tls as kube-apiserver, or gRPC's C core from Python; gRPC Txns as \
         kube-apiserver makes them, {VALUE_BYTES}-byte values), \
         {}-s legs without podtrace and {} with (alternating, starting and ending without; each agent \
         measured once its on-demand probes stayed detached for {} s, at most {} s after its start), {} CPUs",
        etcd_version(),
        args.workers,
        args.conns,
        args.seconds,
        rounds,
        args.settle,
        args.start_max,
        std::thread::available_parallelism().map_or(0, usize::from),
    );
    let mut reports = Vec::new();
    for (client, load_binary) in &load_binaries {
        for &mix in &mixes {
            let etcd = Etcd::start(EtcdOptions {
                tls: true,
                auth: false,
            })?;
            let tls = apiserver_tls(&etcd)?;
            let mut load =
                load_binary.start(etcd.endpoint(), &tls, mix, args.workers, args.conns)?;
            let (label, agent_args) = match client {
                // etcd-load plays kube-apiserver's etcd client: traced as it.
                EtcdClient::Go => (mix.label().to_owned(), vec!["--target", BINARY_NAME]),
                // A client in another language is no component podtrace
                // follows: only etcd's side of its calls is traced.
                EtcdClient::Python => (
                    format!("{}, from {}", mix.label(), load_binary.name()),
                    Vec::new(),
                ),
            };
            let subject = Subject {
                label,
                unit: "write",
                processes: vec![("etcd", etcd.pid()), (load_binary.name(), load.pid())],
                agent_args,
            };
            reports.push(measure(subject, &mut load, &args, rounds)?);
        }
    }
    if apiserver {
        reports.extend(apiserver_legs(&args, rounds)?);
    }
    let pod_start = (args.pod_start > 0)
        .then(|| {
            pod_start_legs(
                args.pod_start,
                even_rounds(args.pod_start_rounds),
                &args.agent_args,
                args.baseline_agent.as_deref(),
            )
        })
        .transpose()?;
    let syscalls = (args.syscall_rounds > 0)
        .then(|| {
            syscall_legs(
                even_rounds(args.syscall_rounds),
                &args.agent_args,
                args.baseline_agent.as_deref(),
            )
        })
        .transpose()?;
    println!();
    for report in &reports {
        report.print();
    }
    if let Some(legs) = pod_start {
        print_pod_start(args.pod_start, &legs);
    }
    if let Some(legs) = syscalls {
        print_syscalls(&legs);
    }
    Ok(())
}

/// Who a mix's legs load, what they count and what the agent follows.
struct Subject {
    /// The mix's name in the table.
    label: String,
    /// What the load client counts: "write", "request".
    unit: &'static str,
    /// The processes whose CPU is counted (name, pid): the component
    /// measured, then the load client.
    processes: Vec<(&'static str, u32)>,
    /// `podtrace run`'s arguments besides its defaults.
    agent_args: Vec<&'static str>,
}

/// The legs of one mix: warm-up, then without podtrace and `rounds` times
/// with (and with `--baseline-agent`) and without, in one invocation.
fn measure(
    subject: Subject,
    load: &mut LoadClient,
    args: &Args,
    rounds: usize,
) -> anyhow::Result<Report> {
    let leg = Duration::from_secs(args.seconds);
    load.leg(WARM_UP)?;
    let traced: Vec<u32> = subject.processes.iter().map(|(_, pid)| *pid).collect();
    let mut without = vec![leg_with_cpu(&traced, || load.leg(leg))?];
    let mut with = Vec::new();
    let mut baseline = Vec::new();
    let current = podtrace_tests::podtrace_binary();
    for round in 0..rounds {
        let this: Vec<&str> = subject
            .agent_args
            .iter()
            .copied()
            .chain(args.agent_args.iter().map(String::as_str))
            .collect();
        let mut agents = vec![(current.as_path(), this, &mut with)];
        if let Some(earlier) = &args.baseline_agent {
            agents.insert(
                0,
                (earlier.as_path(), subject.agent_args.clone(), &mut baseline),
            );
            // Alternated, so that neither agent always follows a leg
            // without one.
            if round % 2 == 1 {
                agents.reverse();
            }
        }
        for (binary, agent_args, results) in agents {
            results.push(leg_with_agent(
                load,
                leg,
                binary,
                &agent_args,
                &traced,
                args,
            )?);
        }
        without.push(leg_with_cpu(&traced, || load.leg(leg))?);
    }
    for result in without
        .iter()
        .map(|(result, _)| result)
        .chain(with.iter().chain(&baseline).map(|(with, _)| &with.load))
    {
        if result.errors > 0 {
            bail!(
                "{}: {} of {} {}s failed in a leg, the first: {}",
                subject.label,
                result.errors,
                result.requests + result.errors,
                subject.unit,
                result.first_error.as_deref().unwrap_or("?")
            );
        }
    }
    Ok(Report {
        subject,
        without,
        with,
        baseline,
    })
}

/// The Kubernetes binaries' directory of the apiserver legs.
const K8S_BIN_VAR: &str = "PODTRACE_K8S_BIN";
/// Where the apiserver legs keep their etcd, containerd and control plane.
const APISERVER_STATE_DIR: &str = "/var/tmp/podtrace-bench-apiserver";

/// kube-apiserver under `apiserver-load`, one mix after the other on one
/// control plane (from `PODTRACE_K8S_BIN`: this project builds no
/// Kubernetes binaries; without them the legs are skipped, said why). The
/// agent runs as on a control-plane node (`podtrace run`, its default
/// targets): kube-apiserver, etcd, the scheduler, the controller manager
/// and the kubelet are followed; the load client, playing other clients of
/// the apiserver, is not.
fn apiserver_legs(args: &Args, rounds: usize) -> anyhow::Result<Vec<Report>> {
    let Some(bin_dir) = std::env::var_os(K8S_BIN_VAR).map(PathBuf::from) else {
        println!(
            "apiserver legs skipped: {K8S_BIN_VAR} is not set (a directory holding \
             kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kubectl; \
             this project ships no Kubernetes binaries, so CI has none)"
        );
        return Ok(Vec::new());
    };
    let mixes = if args.apiserver_mixes.is_empty() {
        ApiserverMix::ALL.to_vec()
    } else {
        args.apiserver_mixes
            .iter()
            .copied()
            .map(ApiserverMix::from)
            .collect()
    };
    let state = Path::new(APISERVER_STATE_DIR);
    std::fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
    let etcd = Etcd::start_cluster_in(
        EtcdOptions {
            tls: true,
            auth: true,
        },
        state,
        1,
    )?;
    let containerd = Containerd::start_in(
        ContainerdOptions {
            image_cache_dir: state.to_owned(),
        },
        state,
    )?;
    let plane = ControlPlane::start_in(
        ControlPlaneOptions {
            bin_dir,
            apiserver: None,
            node_name: "bench-node".to_owned(),
            daemon_sets: false,
        },
        state,
        &etcd[0],
        &containerd,
    )?;
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apiserver-load");
    let load_binary = ApiserverLoadBinary::build(&cache)?;
    let mut reports = Vec::new();
    for mix in mixes {
        let mut load = load_binary.start(&plane, mix, args.workers)?;
        let subject = Subject {
            label: mix.label().to_owned(),
            unit: "request",
            processes: vec![
                ("kube-apiserver", plane.apiserver_pid()),
                ("apiserver-load", load.pid()),
            ],
            agent_args: Vec::new(),
        };
        reports.push(measure(subject, &mut load, args, rounds)?);
    }
    drop(plane);
    drop(containerd);
    drop(etcd);
    Ok(reports)
}

/// Where the Pod start legs keep podtrace-demo's images and Go builds.
const DEMO_STATE_DIR: &str = "/var/tmp/podtrace-bench-demo";

/// Which agent a Pod start or syscall leg ran with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AgentLeg {
    Without,
    /// This build.
    With,
    /// `--baseline-agent`.
    Baseline,
}

/// Legs of a short measurement (each leg's values, sorted): without
/// podtrace, then `rounds` times with (and with `baseline`, the two in
/// alternating order, as the write legs) and without. `warm` runs once
/// an agent has started, before it is measured.
fn alternating_legs(
    rounds: usize,
    agent_args: &[String],
    baseline: Option<&Path>,
    mut warm: impl FnMut() -> anyhow::Result<()>,
    mut measure: impl FnMut() -> anyhow::Result<Vec<f64>>,
) -> anyhow::Result<Vec<(AgentLeg, Vec<f64>)>> {
    let mut sorted = || -> anyhow::Result<Vec<f64>> {
        let mut values = measure()?;
        values.sort_by(f64::total_cmp);
        Ok(values)
    };
    let mut legs = vec![(AgentLeg::Without, sorted()?)];
    let current = podtrace_tests::podtrace_binary();
    for round in 0..rounds.max(1) {
        let mut agents = vec![(AgentLeg::With, current.as_path(), agent_args)];
        if let Some(earlier) = baseline {
            agents.insert(0, (AgentLeg::Baseline, earlier, &[]));
            if round % 2 == 1 {
                agents.reverse();
            }
        }
        for (leg, binary, extra) in agents {
            let out = tempfile::NamedTempFile::new()?;
            let mut args = vec!["--target", "podtrace-demo", "--target", "demo-apiserver"];
            args.extend(extra.iter().map(String::as_str));
            let agent = Agent::start_binary(binary, &args, out.path());
            warm()?;
            let values = sorted()?;
            agent.stop();
            legs.push((leg, values));
        }
        legs.push((AgentLeg::Without, sorted()?));
    }
    Ok(legs)
}

/// Pod start times (ms, create to Running stored) of `pods` Pods created
/// at once, in [`alternating_legs`], after one burst that is not counted (the
/// first builds and caches, and its start would weigh on the first leg
/// alone). An agent sees one burst before the one measured: each burst
/// starts the demo's apiserver anew, whose executable an agent reads once
/// (a running agent read the node's components' long before), and a leg
/// measures what a settled agent costs, as the write legs do.
fn pod_start_legs(
    pods: u32,
    rounds: usize,
    agent_args: &[String],
    baseline: Option<&Path>,
) -> anyhow::Result<Vec<(AgentLeg, Vec<f64>)>> {
    run_demo_burst(pods)?;
    alternating_legs(
        rounds,
        agent_args,
        baseline,
        || run_demo_burst(pods).map(drop),
        || run_demo_burst(pods),
    )
}

/// One `podtrace-demo --pods N --parallel`; each Pod's `start_ms`. A burst
/// that fails is tried once more, saying why: one in CI's runs failed
/// without a word (its stderr was not kept then), and a lost benchmark
/// run tells less than a burst run again; a second failure ends the run.
fn run_demo_burst(pods: u32) -> anyhow::Result<Vec<f64>> {
    demo_burst(pods).or_else(|error| {
        eprintln!("a Pod-start burst failed, trying it once more: {error:#}");
        demo_burst(pods)
    })
}

fn demo_burst(pods: u32) -> anyhow::Result<Vec<f64>> {
    let output = Command::new(env!("CARGO_BIN_EXE_podtrace-demo"))
        .args(["--pods", &pods.to_string(), "--parallel"])
        .args(["--node-name", "bench-node", "--state-dir", DEMO_STATE_DIR])
        .output()
        .context("running podtrace-demo")?;
    if !output.status.success() {
        // Its last lines say why; the rest of a burst's log is noise here.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        bail!(
            "podtrace-demo failed: {}:\n{}",
            output.status,
            lines[lines.len().saturating_sub(20)..].join("\n")
        );
    }
    let starts: Vec<f64> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|pod| pod["start_ms"].as_f64())
        .collect();
    if starts.len() != pods as usize {
        bail!("podtrace-demo started {} of {pods} Pods", starts.len());
    }
    Ok(starts)
}

/// Syscalls of one sample of [`syscall_legs`]: half 1-byte reads of
/// /dev/zero, half 1-byte writes to /dev/null.
const SAMPLE_SYSCALLS: u32 = 400_000;
/// Samples per syscall leg.
const SYSCALL_SAMPLES: usize = 5;

/// ns per syscall of this process, which podtrace does not follow, in
/// [`alternating_legs`]: the tax every other process of a node pays for the
/// `sys_enter`/`sys_exit` programs (reads and writes are hooked syscalls,
/// the ones those programs do the most for).
fn syscall_legs(
    rounds: usize,
    agent_args: &[String],
    baseline: Option<&Path>,
) -> anyhow::Result<Vec<(AgentLeg, Vec<f64>)>> {
    use std::io::{Read as _, Write as _};
    let mut zero = std::fs::File::open("/dev/zero").context("opening /dev/zero")?;
    let mut null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("opening /dev/null")?;
    let mut measure = || -> anyhow::Result<Vec<f64>> {
        let mut byte = [0_u8; 1];
        (0..SYSCALL_SAMPLES)
            .map(|_| {
                let started = Instant::now();
                for _ in 0..SAMPLE_SYSCALLS / 2 {
                    // One syscall each: /dev/zero fills any read whole.
                    let _ = zero.read(&mut byte)?;
                    let _ = null.write(&byte)?;
                }
                Ok(started.elapsed().as_nanos() as f64 / f64::from(SAMPLE_SYSCALLS))
            })
            .collect()
    };
    alternating_legs(rounds, agent_args, baseline, || Ok(()), &mut measure)
}

/// The legs of [`syscall_legs`]: each leg's median ns per syscall, and each
/// agent's added ns per syscall and ratio to the legs without.
fn print_syscalls(legs: &[(AgentLeg, Vec<f64>)]) {
    println!(
        "Syscalls of a process podtrace does not follow ({SAMPLE_SYSCALLS} 1-byte reads and writes \
         of /dev/zero and /dev/null a sample, {SYSCALL_SAMPLES} samples a leg)"
    );
    println!("  {:<10} {:>14}", "leg", "ns a syscall");
    for (leg, values) in legs {
        println!("  {:<10} {:>14.1}", leg_name(*leg), p50(values));
    }
    let mean_of = |kind: AgentLeg| {
        let values: Vec<f64> = legs
            .iter()
            .filter(|(leg, _)| *leg == kind)
            .map(|(_, values)| p50(values))
            .collect();
        mean(&values)
    };
    let without = mean_of(AgentLeg::Without);
    for (kind, name) in [
        (AgentLeg::With, "with"),
        (AgentLeg::Baseline, "baseline agent"),
    ] {
        if legs.iter().any(|(leg, _)| *leg == kind) {
            let with = mean_of(kind);
            println!(
                "  {name}: +{:.0} ns a syscall (× {:.3} of without)",
                with - without,
                with / without.max(f64::EPSILON)
            );
        }
    }
}

fn leg_name(leg: AgentLeg) -> &'static str {
    match leg {
        AgentLeg::Without => "without",
        AgentLeg::With => "with",
        AgentLeg::Baseline => "baseline",
    }
}

/// The legs of [`pod_start_legs`], and each agent's legs ÷ the legs
/// without, over all legs and as the median of the rounds (each leg with
/// an agent against the legs without either side of its round): one burst
/// is a few seconds, and this VM drifts between bursts.
fn print_pod_start(pods: u32, legs: &[(AgentLeg, Vec<f64>)]) {
    println!("Pod start, {pods} Pods created at once (podtrace-demo --parallel)");
    println!("  {:<10} {:>9} {:>9}", "leg", "p50 ms", "max ms");
    for (leg, starts) in legs {
        println!(
            "  {:<10} {:>9.1} {:>9.1}",
            leg_name(*leg),
            p50(starts),
            max(starts)
        );
    }
    let of = |kind: AgentLeg, figure: Figure| -> Vec<f64> {
        legs.iter()
            .filter(|(leg, _)| *leg == kind)
            .map(|(_, starts)| figure(starts))
            .collect()
    };
    // Each leg with an agent ÷ the mean of the nearest legs without before
    // and after it: the round it belongs to.
    let rounds = |kind: AgentLeg, figure: Figure| -> Vec<f64> {
        let nearest = |range: &mut dyn Iterator<Item = usize>| {
            range
                .map(|index| &legs[index])
                .find(|(leg, _)| *leg == AgentLeg::Without)
                .map(|(_, starts)| figure(starts))
        };
        legs.iter()
            .enumerate()
            .filter(|(_, (leg, _))| *leg == kind)
            .filter_map(|(index, (_, starts))| {
                let before = nearest(&mut (0..index).rev())?;
                let after = nearest(&mut (index + 1..legs.len()))?;
                Some(figure(starts) / ((before + after) / 2.0).max(f64::EPSILON))
            })
            .collect()
    };
    let figures: [(&str, Figure); 2] = [("p50", p50), ("max", max)];
    for (kind, name) in [
        (AgentLeg::With, "with"),
        (AgentLeg::Baseline, "baseline agent"),
    ] {
        if of(kind, p50).is_empty() {
            continue;
        }
        let ratios: Vec<String> = figures
            .iter()
            .map(|&(label, figure)| {
                let all = mean(&of(kind, figure))
                    / mean(&of(AgentLeg::Without, figure)).max(f64::EPSILON);
                format!(
                    "{label} {all:.3} (median of rounds {:.3})",
                    median(rounds(kind, figure))
                )
            })
            .collect();
        println!("  {name} / without: {}", ratios.join(", "));
    }
    if !of(AgentLeg::Baseline, p50).is_empty() {
        let ratios: Vec<String> = figures
            .iter()
            .map(|&(label, figure)| {
                let this = mean(&of(AgentLeg::With, figure));
                let earlier = mean(&of(AgentLeg::Baseline, figure));
                format!("{label} {:.3}", this / earlier.max(f64::EPSILON))
            })
            .collect();
        println!("  this agent / baseline agent: {}", ratios.join(", "));
    }
}

/// A figure of one leg's sorted Pod start times.
type Figure = fn(&[f64]) -> f64;

fn p50(starts: &[f64]) -> f64 {
    starts[starts.len() / 2]
}

fn max(starts: &[f64]) -> f64 {
    starts[starts.len() - 1]
}

/// The mean of `values` (0 for none).
fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The median of `values` (NaN for none).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn etcd_version() -> String {
    Command::new("/usr/bin/etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|line| line.strip_prefix("etcd Version: ").map(str::to_owned))
        })
        .unwrap_or_else(|| "(version unknown)".to_owned())
}

/// What the leg with podtrace measured besides the load's own figures.
struct WithAgent {
    load: LegResult,
    /// The load during the agent's start ([`agent_start`]), before the leg.
    start: LegResult,
    /// The share of the leg during which an on-demand probe was attached.
    probes_attached: f64,
    /// Agent CPU seconds (user + system) during the leg.
    agent_cpu_s: f64,
    /// Per BPF program: runs and total ns during [`program_window`].
    programs: ProgramRuns,
    /// That window's length, seconds.
    programs_s: f64,
    /// The agent's final drop counters (`reason=count`).
    drops: String,
    /// From SIGINT to the agent's exit (probes detached, spans flushed).
    exit_after_signal: Duration,
    /// Spans the agent exported, by name and kind (server, client).
    spans: BTreeMap<(String, &'static str), usize>,
}

/// Whether none of the on-demand probes of the agent serving its metrics
/// at `metrics` is attached now.
fn probes_detached(metrics: &str) -> bool {
    let scrape = agent::scrape(metrics);
    ON_DEMAND_GAUGES.iter().all(|gauge| {
        scrape
            .lines()
            .filter_map(|line| line.strip_prefix(gauge)?.split_whitespace().last())
            .all(|value| value.parse::<f64>().is_ok_and(|value| value == 0.0))
    })
}

/// The load while `agent` starts: at least [`AGENT_START_MIN`], then until
/// its on-demand probes have stayed detached for `settle`, or `max`.
fn agent_start(
    load: &mut LoadClient,
    agent: &Agent,
    settle: Duration,
    max: Duration,
) -> anyhow::Result<LegResult> {
    let mut start = load.leg(AGENT_START_MIN)?;
    let mut detached_for = Duration::ZERO;
    while start.seconds < max.as_secs_f64() {
        if probes_detached(&agent.metrics) {
            if detached_for >= settle {
                break;
            }
        } else {
            detached_for = Duration::ZERO;
        }
        let slice = load.leg(AGENT_START_SLICE)?;
        detached_for += Duration::from_secs_f64(slice.seconds);
        start.join(slice);
    }
    Ok(start)
}

/// The share of a leg during which an on-demand probe of an agent was
/// attached, looked at every [`LEG_SAMPLE`] until `done`.
fn probes_attached_share(metrics: &str, done: &AtomicBool) -> f64 {
    let (mut looks, mut attached) = (0_u32, 0_u32);
    while !done.load(Ordering::Relaxed) {
        looks += 1;
        attached += u32::from(!probes_detached(metrics));
        std::thread::sleep(LEG_SAMPLE);
    }
    f64::from(attached) / f64::from(looks.max(1))
}

/// A leg with the agent at `binary`, after its start; with the CPU the
/// `traced` processes used during the leg.
fn leg_with_agent(
    load: &mut LoadClient,
    leg: Duration,
    binary: &Path,
    args: &[&str],
    traced: &[u32],
    options: &Args,
) -> anyhow::Result<(WithAgent, LegCpu)> {
    let out = tempfile::NamedTempFile::new()?;
    let agent = Agent::start_binary(binary, args, out.path());
    let start = agent_start(
        load,
        &agent,
        Duration::from_secs(options.settle),
        Duration::from_secs(options.start_max),
    )?;
    let cpu_before = process_cpu_s(agent.pid())?;
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let ((result, window, probes_attached), cpu_traced) = leg_with_cpu(traced, || {
        Ok(std::thread::scope(|scope| {
            let window = scope.spawn(|| program_window(leg));
            let attached = scope.spawn(|| probes_attached_share(&agent.metrics, &done));
            let result = load.leg(leg);
            done.store(true, Ordering::Relaxed);
            (result, window.join(), attached.join())
        }))
    })?;
    let probes_attached =
        probes_attached.map_err(|_| anyhow::anyhow!("the probe-gauge thread panicked"))?;
    let result = result?;
    let cpu = process_cpu_s(agent.pid())? - cpu_before;
    let elapsed = started.elapsed().as_secs_f64();
    let (programs, programs_s) = match window {
        Ok(window) => window?,
        Err(_) => bail!("the BPF statistics thread panicked"),
    };
    let stopped = agent.stop_with_log();
    let drops = stopped
        .last
        .split_once("drops=")
        .map(|(_, rest)| rest.trim().to_owned())
        .unwrap_or_default();
    let mut spans = BTreeMap::new();
    for span in podtrace_tests::otlp_json::read_spans(out.path())? {
        let kind = match span.kind {
            2 => "server",
            3 => "client",
            _ => "internal",
        };
        *spans.entry((span.name, kind)).or_insert(0) += 1;
    }
    let with = WithAgent {
        load: result,
        start,
        probes_attached,
        agent_cpu_s: cpu * result_seconds_ratio(elapsed, leg),
        programs,
        programs_s,
        drops,
        exit_after_signal: stopped.exit_after_signal,
        spans,
    };
    Ok((with, cpu_traced))
}

/// Runs and run time (ns) by BPF program name.
type ProgramRuns = BTreeMap<String, (u64, u64)>;

/// Each BPF program's runs and run time over a window in the middle of a
/// leg of `leg`, and the window's length in seconds. The kernel's per-run
/// accounting (`kernel.bpf_stats_enabled`: two clock reads and a counter
/// update a run) is the measurement's own cost, 10–30 % of a short
/// program's: on for the window only, it stays out of the leg's other
/// figures.
fn program_window(leg: Duration) -> anyhow::Result<(ProgramRuns, f64)> {
    let window = (leg / 4).min(Duration::from_secs(5));
    std::thread::sleep(leg.saturating_sub(window) / 2);
    let stats = BpfStats::enable()?;
    let before = stats.snapshot()?;
    let started = Instant::now();
    std::thread::sleep(window);
    let after = stats.snapshot()?;
    let seconds = started.elapsed().as_secs_f64();
    drop(stats);
    let programs = after
        .into_iter()
        .filter_map(|(name, (runs, ns))| {
            let (runs0, ns0) = before.get(&name).copied().unwrap_or((0, 0));
            let runs = runs.saturating_sub(runs0);
            (runs > 0).then(|| (name, (runs, ns.saturating_sub(ns0))))
        })
        .collect();
    Ok((programs, seconds))
}

/// The leg's measured length over the CPU sample's, to put the agent's CPU
/// on the same time base as the load's rate.
fn result_seconds_ratio(sampled: f64, leg: Duration) -> f64 {
    leg.as_secs_f64() / sampled.max(f64::EPSILON)
}

/// What the CPUs did during one leg.
#[derive(Clone, Default)]
struct LegCpu {
    /// CPU seconds of each of the subject's processes.
    traced_s: Vec<f64>,
    /// The share of the machine's CPU time the hypervisor gave to others
    /// (steal): a leg with much of it ran on a slower machine.
    steal: f64,
}

/// Runs a leg; returns its result and what the CPUs did meanwhile, with the
/// CPU seconds each of `pids` used.
fn leg_with_cpu<T>(
    pids: &[u32],
    leg: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, LegCpu)> {
    let cpu = || {
        pids.iter()
            .map(|pid| process_cpu_s(*pid))
            .collect::<anyhow::Result<Vec<f64>>>()
    };
    let before = cpu()?;
    let machine_before = machine_ticks()?;
    let result = leg()?;
    let after = cpu()?;
    let machine_after = machine_ticks()?;
    let total = machine_after
        .total
        .saturating_sub(machine_before.total)
        .max(1);
    Ok((
        result,
        LegCpu {
            traced_s: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
            steal: machine_after.steal.saturating_sub(machine_before.steal) as f64 / total as f64,
        },
    ))
}

/// The machine's CPU time so far, in ticks (the `cpu` line of /proc/stat).
struct MachineTicks {
    total: u64,
    steal: u64,
}

fn machine_ticks() -> anyhow::Result<MachineTicks> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("empty /proc/stat")?;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice;
    // guest time is counted in user time already.
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("malformed cpu line in /proc/stat")?;
    Ok(MachineTicks {
        total: ticks.iter().sum(),
        steal: ticks.get(7).copied().unwrap_or(0),
    })
}

/// User + system CPU seconds of a process so far (/proc/PID/stat).
fn process_cpu_s(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the parenthesised comm: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no memory preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ticks as f64 / hz)
}

/// `kernel.bpf_stats_enabled` on for as long as this lives (restored on drop).
struct BpfStats {
    previous: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> anyhow::Result<Self> {
        let previous = std::fs::read_to_string(BPF_STATS)?.trim().to_owned();
        std::fs::write(BPF_STATS, "1")?;
        Ok(Self { previous })
    }

    /// Runs and run time of every loaded program, by name (bpftool).
    fn snapshot(&self) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
        let out = Command::new("bpftool")
            .args(["prog", "show", "--json"])
            .output()
            .context("running bpftool prog show")?;
        let programs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
        let mut by_name = BTreeMap::new();
        for program in programs {
            let name = program["name"].as_str().unwrap_or("?").to_owned();
            let runs = program["run_cnt"].as_u64().unwrap_or(0);
            let ns = program["run_time_ns"].as_u64().unwrap_or(0);
            let entry: &mut (u64, u64) = by_name.entry(name).or_default();
            entry.0 += runs;
            entry.1 += ns;
        }
        Ok(by_name)
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, &self.previous);
    }
}

/// One mix's legs, each with the CPU seconds its processes used.
struct Report {
    subject: Subject,
    without: Vec<(LegResult, LegCpu)>,
    with: Vec<(WithAgent, LegCpu)>,
    /// Legs with `--baseline-agent`, if given.
    baseline: Vec<(WithAgent, LegCpu)>,
}

/// Legs with one agent.
type AgentLegs = [(WithAgent, LegCpu)];

/// Sums of a set of legs.
#[derive(Default)]
struct Legs {
    requests: u64,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    count: usize,
    /// CPU seconds of each of the subject's processes.
    traced_cpu_s: Vec<f64>,
}

impl Legs {
    fn of<'a>(legs: impl Iterator<Item = (&'a LegResult, &'a LegCpu)>) -> Self {
        legs.fold(Self::default(), |mut sum, (leg, cpu)| {
            sum.requests += leg.requests;
            sum.seconds += leg.seconds;
            sum.p50_us += leg.p50_us as f64;
            sum.p99_us += leg.p99_us as f64;
            sum.count += 1;
            sum.traced_cpu_s.resize(cpu.traced_s.len(), 0.0);
            for (sum, leg) in sum.traced_cpu_s.iter_mut().zip(&cpu.traced_s) {
                *sum += leg;
            }
            sum
        })
    }

    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds.max(f64::EPSILON)
    }

    /// Mean of the legs' percentiles, ms.
    fn p50_ms(&self) -> f64 {
        self.p50_us / 1000.0 / self.count.max(1) as f64
    }

    fn p99_ms(&self) -> f64 {
        self.p99_us / 1000.0 / self.count.max(1) as f64
    }
}

impl Report {
    fn print(&self) {
        let base = Legs::of(self.without.iter().map(|(leg, cpu)| (leg, cpu)));
        let subject = &self.subject;
        println!("{}", subject.label);
        println!(
            "  {:<10} {:>10} {:>9} {:>9} {:>8}",
            "leg",
            format!("{}s/s", subject.unit),
            "p50 ms",
            "p99 ms",
            "steal %"
        );
        // In the order they ran: each round's legs with an agent (the
        // baseline agent's first in even rounds), then one without.
        let mut legs = Vec::new();
        for (index, (without, cpu)) in self.without.iter().enumerate() {
            legs.push(("without", without, cpu));
            let mut round = Vec::new();
            if let Some((earlier, cpu)) = self.baseline.get(index) {
                round.push(("baseline", &earlier.load, cpu));
            }
            if let Some((with, cpu)) = self.with.get(index) {
                round.push(("with", &with.load, cpu));
            }
            if index % 2 == 1 {
                round.reverse();
            }
            legs.extend(round);
        }
        for (leg, result, cpu) in legs {
            println!(
                "  {:<10} {:>10.0} {:>9.2} {:>9.2} {:>8.1}",
                leg,
                result.rate(),
                result.p50_us as f64 / 1000.0,
                result.p99_us as f64 / 1000.0,
                100.0 * cpu.steal
            );
        }
        if self.baseline.is_empty() {
            print_agent_legs(subject, &self.with, &self.without, &base);
        } else {
            let (earlier, traced) = (agent_legs(&self.baseline), agent_legs(&self.with));
            println!("  baseline agent (--baseline-agent):");
            print_agent_legs(subject, &self.baseline, &self.without, &base);
            println!("  this agent:");
            print_agent_legs(subject, &self.with, &self.without, &base);
            println!(
                "  this agent / baseline agent: throughput {:.3}, p50 {:.3}, p99 {:.3}",
                traced.rate() / earlier.rate().max(f64::EPSILON),
                traced.p50_ms() / earlier.p50_ms().max(f64::EPSILON),
                traced.p99_ms() / earlier.p99_ms().max(f64::EPSILON),
            );
        }
        println!();
    }
}

/// The sums of the legs with one agent.
fn agent_legs(legs: &AgentLegs) -> Legs {
    Legs::of(legs.iter().map(|(with, cpu)| (&with.load, cpu)))
}

/// One agent's figures over the legs with it against the legs without
/// (`without`, summed in `base`).
fn print_agent_legs(
    subject: &Subject,
    legs: &AgentLegs,
    without: &[(LegResult, LegCpu)],
    base: &Legs,
) {
    let unit = subject.unit;
    let traced = &agent_legs(legs);
    println!(
        "  with / without (all legs): throughput {:.3}, p50 {:.3}, p99 {:.3}",
        traced.rate() / base.rate().max(f64::EPSILON),
        traced.p50_ms() / base.p50_ms().max(f64::EPSILON),
        traced.p99_ms() / base.p99_ms().max(f64::EPSILON),
    );
    // The machine's throughput drifts between legs by more than the effect
    // measured: each round's ratio to the legs without on either side shows
    // how far one invocation's figure can be trusted.
    let rounds: Vec<f64> = legs
        .iter()
        .zip(without.windows(2))
        .map(|((with, _), around)| {
            let without = (around[0].0.rate() + around[1].0.rate()) / 2.0;
            with.load.rate() / without.max(f64::EPSILON)
        })
        .collect();
    let listed: Vec<String> = rounds.iter().map(|ratio| format!("{ratio:.3}")).collect();
    // The median: one round on a machine that slowed down or sped up in the
    // middle of it moves the mean of all legs, not the median of many rounds.
    let median = median(rounds);
    println!(
        "  throughput per round, ÷ the legs without either side: {} (median {median:.3})",
        listed.join(", ")
    );
    let (start_requests, start_s) = legs
        .iter()
        .fold((0, 0.0), |(requests, seconds), (with, _)| {
            (requests + with.start.requests, seconds + with.start.seconds)
        });
    let starts: Vec<String> = legs
        .iter()
        .map(|(with, _)| format!("{:.1}", with.start.seconds))
        .collect();
    let attached: Vec<String> = legs
        .iter()
        .map(|(with, _)| format!("{:.0} %", with.probes_attached * 100.0))
        .collect();
    println!(
        "  agent start ({} s before the legs): throughput {:.3} of the legs without, p99 {:.1} ms at worst; on-demand probes attached during the legs: {}",
        starts.join(", "),
        start_requests as f64 / start_s.max(f64::EPSILON) / base.rate().max(f64::EPSILON),
        legs.iter()
            .map(|(with, _)| with.start.p99_us)
            .max()
            .unwrap_or(0) as f64
            / 1000.0,
        attached.join(", ")
    );
    let agent_cpu_s: f64 = legs.iter().map(|(with, _)| with.agent_cpu_s).sum();
    let cpu_share = agent_cpu_s / traced.seconds.max(f64::EPSILON);
    println!(
        "  agent CPU: {:.1} % of a core; {:.2} % of a core per 1000 {unit}s/s",
        100.0 * cpu_share,
        100.0 * cpu_share / (traced.rate() / 1000.0).max(f64::EPSILON)
    );
    // What the traced processes themselves spend per request: uprobe
    // traps and BPF programs run on their threads.
    let per_request = |legs: &Legs, index: usize| {
        1e6 * legs.traced_cpu_s.get(index).copied().unwrap_or(0.0) / legs.requests.max(1) as f64
    };
    for (index, (process, _)) in subject.processes.iter().enumerate() {
        println!(
            "  {process} CPU per {unit} (µs, without / with): {:.0} / {:.0}",
            per_request(base, index),
            per_request(traced, index)
        );
    }
    // The sum is the steadier figure: it does not drift with the machine's
    // throughput, and where the load saturates the CPUs throughput falls by
    // about its inverse.
    let all_per_request = |legs: &Legs, agent_s: f64| {
        1e6 * (legs.traced_cpu_s.iter().sum::<f64>() + agent_s) / legs.requests.max(1) as f64
    };
    let (before, after) = (
        all_per_request(base, 0.0),
        all_per_request(traced, agent_cpu_s),
    );
    let names: Vec<&str> = subject.processes.iter().map(|(name, _)| *name).collect();
    println!(
        "  CPU per {unit}, {} + agent (µs, without / with): {before:.0} / {after:.0} (× {:.3})",
        names.join(" + "),
        after / before.max(f64::EPSILON)
    );
    let mut programs: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (with, _) in legs {
        for (name, (runs, ns)) in &with.programs {
            let entry = programs.entry(name).or_default();
            entry.0 += runs;
            entry.1 += ns;
        }
    }
    let window_s: f64 = legs.iter().map(|(with, _)| with.programs_s).sum();
    let window_s = window_s.max(f64::EPSILON);
    let total_ns: u64 = programs.values().map(|(_, ns)| ns).sum();
    println!(
        "  BPF programs: {:.1} % of a core in all (statistics on for {window_s:.0} s of the legs)",
        100.0 * total_ns as f64 / 1e9 / window_s
    );
    let mut programs: Vec<_> = programs.into_iter().collect();
    programs.sort_by_key(|(_, (_, ns))| std::cmp::Reverse(*ns));
    for (name, (runs, ns)) in programs {
        let per_s = runs as f64 / window_s;
        println!(
            "    {:<20} {:>9.0} runs/s {:>7.0} ns/run {:>6.2} runs/{unit} {:>8.0} ns/{unit}",
            name,
            per_s,
            ns as f64 / runs.max(1) as f64,
            per_s / traced.rate().max(f64::EPSILON),
            ns as f64 / window_s / traced.rate().max(f64::EPSILON),
        );
    }
    for (with, _) in legs {
        println!("  drops: {}", with.drops);
    }
    let exits: Vec<String> = legs
        .iter()
        .map(|(with, _)| format!("{} ms", with.exit_after_signal.as_millis()))
        .collect();
    println!("  agent exit after SIGINT: {}", exits.join(", "));
    let mut spans: BTreeMap<&(String, &str), usize> = BTreeMap::new();
    for (with, _) in legs {
        for (key, count) in &with.spans {
            *spans.entry(key).or_default() += count;
        }
    }
    if !spans.is_empty() {
        let spans: Vec<String> = spans
            .iter()
            .map(|((name, kind), count)| format!("{name} ({kind}) {count}"))
            .collect();
        println!(
            "  spans exported for the legs' {} {unit}s: {}",
            traced.requests,
            spans.join(", ")
        );
    }
}
