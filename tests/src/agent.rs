//! The podtrace agent as the live tests run it: `podtrace run --quiet` with
//! metrics on an ephemeral port, its log echoed to stderr, ready once it
//! says it is attached; stopped with SIGINT (as Ctrl-C) by [`Agent::stop`],
//! killed on drop.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    thread,
    time::{Duration, Instant},
};

use crate::podtrace_binary;

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    child: Child,
    /// Its last log line, once it has stopped.
    stopped: mpsc::Receiver<String>,
    /// Every log line so far.
    log: Arc<Mutex<Vec<String>>>,
    /// Where it serves its metrics and recent traces (`host:port`).
    pub metrics: String,
}

impl Agent {
    /// Starts `podtrace run --quiet ARGS --metrics-addr 127.0.0.1:0 --out OUT`
    /// and waits until it has attached (at most a minute). With
    /// `PODTRACE_TEST_KUBE_OFFSETS=derived` in the environment the agent gets
    /// `--kube-offsets derived`: a live test on a release the table has then
    /// runs as on one it lacks.
    pub fn start(args: &[&str], out: &Path) -> Self {
        let mode = std::env::var("PODTRACE_TEST_KUBE_OFFSETS").ok();
        let mut args = args.to_vec();
        if let Some(mode) = &mode {
            args.extend(["--kube-offsets", mode.as_str()]);
        }
        Self::start_binary(&podtrace_binary(), &args, out)
    }

    /// [`Agent::start`] with another podtrace binary (an earlier build, to
    /// compare against).
    pub fn start_binary(binary: &Path, args: &[&str], out: &Path) -> Self {
        let mut child = Command::new(binary)
            .args(["run", "--quiet"])
            .args(args)
            .args(["--metrics-addr", "127.0.0.1:0", "--out"])
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("starting podtrace: {err}"));
        let stderr = child
            .stderr
            .take()
            .unwrap_or_else(|| panic!("piped stderr"));
        let (attached_tx, attached_rx) = mpsc::channel();
        let (metrics_tx, metrics_rx) = mpsc::channel();
        let (stopped_tx, stopped) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut lines) = lines.lock() {
                    lines.push(line.clone());
                }
                if let Some(at) = line.split("metrics at http://").nth(1) {
                    let _ = metrics_tx.send(at.trim_end_matches("/metrics").to_owned());
                }
                if line.contains("attached; following") {
                    let _ = attached_tx.send(());
                }
                if line.contains("stopped; programs detached") {
                    let _ = stopped_tx.send(line.clone());
                }
                eprintln!("podtrace: {line}");
            }
        });
        let metrics = metrics_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("podtrace serves metrics"));
        attached_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("podtrace attached"));
        Self {
            child,
            stopped,
            log,
            metrics,
        }
    }

    /// The log lines that contain `needle`, so far.
    pub fn logged(&self, needle: &str) -> Vec<String> {
        self.log
            .lock()
            .map(|lines| {
                lines
                    .iter()
                    .filter(|line| line.contains(needle))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The metrics exposition, as a scrape sees it.
    pub fn scrape(&self) -> String {
        scrape(&self.metrics)
    }

    /// Lets waiting spans settle, then stops it as Ctrl-C would; it must
    /// exit cleanly. Returns its last log line (what it saw: events, drops).
    pub fn stop(self) -> String {
        self.stop_with_log().last
    }

    /// [`Agent::stop`], with every line it logged and how long it took to
    /// exit.
    pub fn stop_with_log(mut self) -> Stopped {
        // Spans wait up to 2 s for their parents, CNI runs 1 s to settle.
        thread::sleep(Duration::from_secs(4));
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let signalled = Instant::now();
        let status = self
            .child
            .wait()
            .unwrap_or_else(|_| panic!("wait for podtrace"));
        let exit_after_signal = signalled.elapsed();
        // Shown, not asserted: how long a stop takes is a benchmark's figure.
        eprintln!(
            "podtrace exited {} ms after SIGINT",
            exit_after_signal.as_millis()
        );
        assert!(status.success(), "podtrace exited with {status}");
        let last = self
            .stopped
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("podtrace said it stopped"));
        let log = self
            .log
            .lock()
            .map(|lines| lines.clone())
            .unwrap_or_default();
        Stopped {
            last,
            log,
            exit_after_signal,
        }
    }
}

/// What a stopped agent said, and how long it took.
#[derive(Debug)]
pub struct Stopped {
    /// Its last log line (what it saw: events, drops).
    pub last: String,
    /// Every line it logged.
    pub log: Vec<String>,
    /// From SIGINT to its exit.
    pub exit_after_signal: Duration,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The metrics exposition of the agent serving them at `metrics`
/// (`host:port`, [`Agent::metrics`]), as a scrape sees it: for a thread
/// that looks while another holds the [`Agent`].
pub fn scrape(metrics: &str) -> String {
    let mut stream =
        TcpStream::connect(metrics).unwrap_or_else(|_| panic!("connect to the metrics"));
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {metrics}\r\n\r\n")
        .unwrap_or_else(|_| panic!("send the scrape"));
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|_| panic!("read the scrape"));
    assert!(
        response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        "{response}"
    );
    response
}

/// The number a podtrace log line says as the field `name=N` (a word of
/// the line, as `tracing` writes its fields).
pub fn logged_count(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no {name}=N in {line}"))
}
