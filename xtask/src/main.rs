//! podtrace's developer tasks. `cargo xtask <task>`; every task that needs
//! the toolchain or test components runs `setup` first, which is idempotent.

mod demo;
mod image;
mod setup;

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Install the eBPF toolchain and test components (root; idempotent).
    Setup,
    /// Create Pods through real etcd and containerd + runc with podtrace
    /// running, and print their traces (root).
    Demo(demo::DemoArgs),
    /// Build podtrace and run the agent on this host: `cargo xtask run -- [podtrace run args]`.
    Run {
        /// Arguments for `podtrace run`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build podtrace's container image as an OCI image tarball, without a
    /// container engine (`ctr images import`, `docker load`, `podman load`).
    Image(image::ImageArgs),
    /// Run the whole test suite (formatting, lints, unit and live tests).
    Test {
        /// Arguments passed to `cargo test` after `--` (e.g. a test name filter).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Check formatting and lints only.
    Lint,
    /// Regenerate the Go struct offsets table from the DWARF of fixture builds;
    /// with `--kube DIR` (repeatable: one directory per Kubernetes release),
    /// the Kubernetes table instead: struct offsets and the probed functions'
    /// argument words, from the unstripped `DIR/kube-apiserver`,
    /// `DIR/kube-scheduler` and `DIR/kubelet` of every release in it.
    Offsets {
        /// Directory of one release's unstripped Kubernetes binaries.
        #[arg(long, value_name = "DIR")]
        kube: Vec<PathBuf>,
    },
    /// Run the benchmarks (each reports a ratio against a baseline measured
    /// in the same run): `overhead` (podtrace's cost on etcd under load,
    /// root), `micro` (Go symbol resolution, decoder throughput), or both.
    Bench {
        /// Which benchmarks [default: both].
        #[arg(value_enum)]
        suite: Option<BenchSuite>,
        /// Arguments for the overhead benchmark (`-- --help` lists them).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Fuzz every parser with libFuzzer (cargo-fuzz, nightly) for a while each.
    /// `cargo xtask test` runs only the bounded stable fuzz smoke tests.
    Fuzz {
        /// Seconds per fuzz target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BenchSuite {
    Overhead,
    Micro,
}

/// The cargo-fuzz workspaces and their targets.
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("tracer-user/gobin/fuzz", "parse_go_binary"),
    ("tracer-user/decode/fuzz", "decode_bytes"),
];

/// Names the directory of Kubernetes binaries the gated tests run on.
const K8S_BIN_VAR: &str = "PODTRACE_K8S_BIN";

fn main() -> ExitCode {
    match run(Cli::parse().task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(task: Task) -> anyhow::Result<()> {
    let root = workspace_root();
    match task {
        Task::Setup => setup::setup(&root),
        Task::Demo(args) => demo::demo(&root, args),
        Task::Run { args } => {
            setup::setup(&root)?;
            let binary = build_podtrace(&root, &[])?;
            println!("xtask: running {} run {}", binary.display(), args.join(" "));
            let status = Command::new(&binary)
                .arg("run")
                .args(&args)
                .status()
                .context("starting podtrace")?;
            // Ctrl-C reaches podtrace too; it detaches and exits 0.
            if !status.success() {
                bail!("podtrace exited with {status}");
            }
            Ok(())
        }
        Task::Image(args) => image::image(&root, args),
        Task::Test { args } => {
            setup::setup(&root)?;
            lint(&root)?;
            // The live CLI tests run the agent binary; build it in the test profile.
            cargo(&root, &["build", "-p", "tracer-user", "--bin", "podtrace"])?;
            let mut test_args = vec!["test", "--workspace", "--no-fail-fast"];
            let mut harness_args: Vec<&str> = args.iter().map(String::as_str).collect();
            // The tests on Kubernetes binaries are #[ignore]d (the harness
            // says why: none ship with podtrace); given the binaries, they run.
            if std::env::var_os(K8S_BIN_VAR).is_some()
                && !harness_args.contains(&"--include-ignored")
            {
                harness_args.push("--include-ignored");
            }
            if !harness_args.is_empty() {
                test_args.push("--");
                test_args.extend(harness_args);
            }
            let mut command = cargo_command(&root, &test_args);
            command.env("PODTRACE_BIN", root.join("target/debug/podtrace"));
            // The integration suite is one binary whose live tests start real
            // components and agents: one test at a time, as when each area
            // was a binary of its own and cargo ran them in turn.
            command.env("RUST_TEST_THREADS", "1");
            run_command(command)
        }
        Task::Lint => lint(&root),
        Task::Offsets { kube } if !kube.is_empty() => {
            let mut binaries = Vec::new();
            for dir in kube {
                // cargo runs in the workspace root: resolve DIR from here first.
                let dir = dir
                    .canonicalize()
                    .with_context(|| format!("Kubernetes binaries directory {}", dir.display()))?;
                for name in ["kube-apiserver", "kube-scheduler", "kubelet"] {
                    binaries.push(dir.join(name).display().to_string());
                }
            }
            let mut args = vec![
                "run",
                "--release",
                "-p",
                "tracer-gobin",
                "--bin",
                "gen-offsets",
                "--",
            ];
            for binary in &binaries {
                args.extend(["--kube", binary.as_str()]);
            }
            args.extend(["--out", "tracer-user/gobin/src/kube_offsets_table.rs"]);
            cargo(&root, &args)
        }
        Task::Offsets { .. } => {
            setup::setup(&root)?;
            cargo(
                &root,
                &[
                    "run",
                    "--release",
                    "-p",
                    "tracer-gobin",
                    "--bin",
                    "gen-offsets",
                    "--",
                    "--out",
                    "tracer-user/gobin/src/offsets_table.rs",
                ],
            )
        }
        Task::Bench { suite, args } => {
            setup::setup(&root)?;
            if suite != Some(BenchSuite::Overhead) {
                micro_benches(&root)?;
            }
            if suite != Some(BenchSuite::Micro) {
                overhead_bench(&root, &args)?;
            }
            Ok(())
        }
        Task::Fuzz { seconds } => {
            setup::cargo_fuzz()?;
            for (dir, target) in FUZZ_TARGETS {
                let max_time = format!("-max_total_time={seconds}");
                let mut command = Command::new("cargo");
                command
                    .args(["+nightly", "fuzz", "run", target, "--", &max_time])
                    .current_dir(root.join(dir));
                run_command(command)?;
            }
            Ok(())
        }
    }
}

/// Go symbol resolution and decoder throughput, each against its baseline.
fn micro_benches(root: &Path) -> anyhow::Result<()> {
    let mut binaries = vec![setup::bench_dockerd(root)?];
    binaries.extend(["/usr/bin/containerd", "/usr/bin/etcd"].map(PathBuf::from));
    let joined = std::env::join_paths(&binaries).context("joining benchmark binary paths")?;
    let mut command = cargo_command(
        root,
        &[
            "bench",
            "-p",
            "tracer-user",
            "--bench",
            "resolve_go_functions",
        ],
    );
    command.env("PODTRACE_BENCH_BINARIES", joined);
    run_command(command)?;
    cargo(
        root,
        &[
            "bench",
            "-p",
            "tracer-decode",
            "--bench",
            "decode_throughput",
        ],
    )
}

/// podtrace's cost on etcd under load: legs without / with / without the
/// agent (release build) in one run (tests/benches/overhead.rs).
fn overhead_bench(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let binary = build_podtrace(root, &[])?;
    let mut bench_args = vec!["bench", "-p", "podtrace-tests", "--bench", "overhead", "--"];
    bench_args.extend(args.iter().map(String::as_str));
    let mut command = cargo_command(root, &bench_args);
    command.env("PODTRACE_BIN", binary);
    run_command(command)
}

fn lint(root: &Path) -> anyhow::Result<()> {
    cargo(root, &["fmt", "--all", "--check"])?;
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )
}

/// Builds podtrace in release (and whatever `more` adds to the cargo
/// command, e.g. another package's binary); returns the binary's path.
fn build_podtrace(root: &Path, more: &[&str]) -> anyhow::Result<PathBuf> {
    let mut args = vec![
        "build",
        "--release",
        "-p",
        "tracer-user",
        "--bin",
        "podtrace",
    ];
    args.extend_from_slice(more);
    cargo(root, &args)?;
    Ok(root.join("target/release/podtrace"))
}

/// The repository root (this crate lives in `xtask/`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cargo_command(root: &Path, args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(root);
    command
}

fn cargo(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    run_command(cargo_command(root, args))
}

fn run_command(mut command: Command) -> anyhow::Result<()> {
    println!("xtask: {}", describe(&command));
    let status = command
        .status()
        .with_context(|| format!("starting {}", describe(&command)))?;
    if !status.success() {
        bail!("{} failed with {status}", describe(&command));
    }
    Ok(())
}

fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
