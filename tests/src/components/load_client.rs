//! The closed-loop load clients of the overhead benchmark (`etcd-load`,
//! `apiserver-load`, `etcd-load.py`): each prints `ready` once its
//! connections are open and warm, then runs a leg for every `leg SECONDS`
//! line on its stdin and answers one `result {JSON}` line.
//!
//! In: a started client's process and pipes. Out: [`LoadClient::leg`], what
//! the client achieved in a leg ([`LegResult`]).

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{ChildStdin, ChildStdout, Command},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde::Deserialize;
use tempfile::TempDir;

use super::process::Supervised;

/// What one leg achieved, as the load client measured it.
#[derive(Clone, Debug, Deserialize)]
pub struct LegResult {
    /// Requests answered successfully (etcd-load says `writes`).
    #[serde(alias = "writes")]
    pub requests: u64,
    /// Requests that failed (none expected).
    pub errors: u64,
    /// The leg's length, measured.
    pub seconds: f64,
    /// Median latency of a request, microseconds.
    pub p50_us: u64,
    /// 99th percentile latency, microseconds.
    pub p99_us: u64,
    /// Watch events delivered during the leg (apiserver-load's watch mix).
    #[serde(default)]
    pub watch_events: u64,
    /// The first failure's message, if any.
    #[serde(default)]
    pub first_error: Option<String>,
}

impl LegResult {
    /// Adds the leg that followed this one: counts and time summed, the
    /// worst leg's percentiles (a load's tail is its worst moment).
    pub fn join(&mut self, next: LegResult) {
        self.requests += next.requests;
        self.errors += next.errors;
        self.seconds += next.seconds;
        self.watch_events += next.watch_events;
        self.p50_us = self.p50_us.max(next.p50_us);
        self.p99_us = self.p99_us.max(next.p99_us);
        self.first_error = self.first_error.take().or(next.first_error);
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds.max(f64::EPSILON)
    }

    /// Nothing done yet: the start of a [`LegResult::join`] chain.
    pub fn empty() -> Self {
        Self {
            requests: 0,
            errors: 0,
            seconds: 0.0,
            p50_us: 0,
            p99_us: 0,
            watch_events: 0,
            first_error: None,
        }
    }
}

/// A running load client; stopped when dropped.
#[derive(Debug)]
pub struct LoadClient {
    name: &'static str,
    process: Supervised,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _dir: TempDir,
}

impl LoadClient {
    /// Spawns `command` (its log in `dir`, which it keeps for as long as
    /// it runs) and waits for its `ready`. Call it from a thread that
    /// outlives the returned value (the kernel kills the process when the
    /// starting thread exits).
    pub fn start(name: &'static str, command: &mut Command, dir: TempDir) -> anyhow::Result<Self> {
        let (process, stdin, stdout) =
            Supervised::spawn_with_pipes(name, command, &dir.path().join("log"))?;
        let mut client = Self {
            name,
            process,
            stdin,
            stdout: BufReader::new(stdout),
            _dir: dir,
        };
        let line = client.read_line()?;
        if line != "ready" {
            bail!(
                "{name} said {line:?} instead of ready; its log ends with:\n{}",
                client.process.log_tail()
            );
        }
        Ok(client)
    }

    /// The client's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Runs the load flat out for `duration` and returns what it did.
    /// Blocks for the duration.
    pub fn leg(&mut self, duration: Duration) -> anyhow::Result<LegResult> {
        let name = self.name;
        writeln!(self.stdin, "leg {}", duration.as_secs_f64())
            .and_then(|()| self.stdin.flush())
            .with_context(|| format!("asking {name} for a leg"))?;
        let line = self.read_line()?;
        let json = line.strip_prefix("result ").with_context(|| {
            format!(
                "{name} answered {line:?}; its log ends with:\n{}",
                self.process.log_tail()
            )
        })?;
        serde_json::from_str(json).with_context(|| format!("{name}'s result {json}"))
    }

    /// One line of the client's stdout, without its newline. The wait is
    /// bounded by the client: each of its calls times out (30 s).
    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .with_context(|| format!("reading {}'s stdout", self.name))?;
        if line.is_empty() {
            bail!(
                "{} exited; its log ends with:\n{}",
                self.name,
                self.process.log_tail()
            );
        }
        Ok(line.trim_end().to_owned())
    }
}

/// A load client running in the background, in legs of [`BACKGROUND_LEG`],
/// on a thread of its own (which starts, and so owns, the process) until
/// [`BackgroundLoad::stop`]: the other traffic of a control plane while a
/// test or the demo creates Pods.
#[derive(Debug)]
pub struct BackgroundLoad {
    name: &'static str,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<anyhow::Result<LegResult>>,
}

/// One leg of a [`BackgroundLoad`]: the longest it runs on after a stop.
const BACKGROUND_LEG: Duration = Duration::from_secs(1);

impl BackgroundLoad {
    /// Starts the client `name` with `start` (on the load's thread) and
    /// returns once it is ready.
    pub fn start(
        name: &'static str,
        start: impl FnOnce() -> anyhow::Result<LoadClient> + Send + 'static,
    ) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let stopping = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut load = match start() {
                Ok(load) => load,
                Err(err) => {
                    let _ = ready_tx.send(Err(format!("{err:#}")));
                    return Err(err);
                }
            };
            let _ = ready_tx.send(Ok(load.pid()));
            let mut total = LegResult::empty();
            while !stopping.load(Ordering::Relaxed) {
                total.join(load.leg(BACKGROUND_LEG)?);
            }
            Ok(total)
        });
        match ready.recv() {
            Ok(Ok(_)) => Ok(Self { name, stop, thread }),
            Ok(Err(err)) => bail!("starting {name}: {err}"),
            Err(_) => bail!("{name}'s thread ended before it started"),
        }
    }

    /// Stops the load after its current leg; what it did in all (p50 and p99
    /// are the worst leg's).
    pub fn stop(self) -> anyhow::Result<LegResult> {
        self.stop.store(true, Ordering::Relaxed);
        let name = self.name;
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("{name}'s thread panicked"))?
    }
}
