//! `podtrace`: command line of the agent. Parses arguments, sets up logging,
//! and hands over to the library.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracer_common::config::{DEFAULT_MAX_DESCENDANT_DEPTH, DEFAULT_RING_BUFFER_BYTES};
use tracer_user::{
    capture::{
        CaptureOptions, Probes,
        targets::{DEFAULT_TARGET_NAMES, TargetMatcher},
    },
    check::run_checks,
    pipeline,
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
}

fn main() -> ExitCode {
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
        Command::Run(args) => run(args),
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

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let defaults = if args.only_targets {
        &[][..]
    } else {
        &DEFAULT_TARGET_NAMES[..]
    };
    let names = defaults
        .iter()
        .map(|name| (*name).to_owned())
        .chain(args.extra_targets);
    let options = CaptureOptions {
        targets: TargetMatcher::new(names)?,
        max_descendant_depth: args.max_depth,
        ring_buffer_bytes: args.ring_buffer_bytes,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let probes = Probes::load(&options)?;
        tracing::info!(
            seeded_targets = probes.seeded().len(),
            "attached; following target processes (Ctrl-C to stop)"
        );
        let shutdown = CancellationToken::new();
        let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = sigterm.recv() => {}
            }
            on_signal.cancel();
        });
        let summary = pipeline::run(probes, shutdown).await?;
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
