//! `demo-apiserver`, the Go program that carries the etcd calls of the
//! demo's kube-apiserver role (source: `tests/fixtures/go/demo-apiserver`).
//!
//! kube-apiserver is a Go program: its etcd calls go through Go's
//! crypto/tls on one long-lived HTTP/2 connection, and that is where
//! podtrace reads TLS plaintext. So the demo's calls are made by a Go
//! process too, which relays them: a line `METHOD HEXBYTES` in on its
//! stdin, one unary gRPC call `/etcdserverpb.KV/METHOD` on its one
//! connection, a line `ok HEXBYTES` or `err CODE MESSAGE` out on its stdout.
//!
//! In: a cache directory ([`DemoApiserverBinary::build`], with a Go
//! toolchain ≥ 1.24 as `cargo xtask setup` installs them), then an etcd
//! endpoint and TLS files ([`DemoApiserverBinary::start`]). Out:
//! [`DemoApiserver`], a running relay whose [`DemoApiserver::call`] takes a
//! request message and returns the response message, as protobuf bytes. It
//! says `ready` at once and connects at its first call, so a tracer that saw
//! it start has time to attach first. It is stopped when dropped.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{ChildStdin, ChildStdout, Command},
    sync::{Arc, Mutex, mpsc},
    thread,
    time::Duration,
};

use anyhow::{Context as _, anyhow, bail};
use tempfile::TempDir;

use super::{certs::CertFiles, go_program, process::Supervised};

/// The relay's executable name, by which tracers follow it.
pub const BINARY_NAME: &str = "demo-apiserver";
/// The oldest Go release that builds it (`http.Protocols`, for h2c).
const MIN_GO_RELEASE: (u32, u32) = (1, 24);
/// How long a started relay gets to say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// A bound on a call: the relay's own (`callTimeout` in main.go, after
/// which it answers `err 4 …`), with a margin.
const CALL_TIMEOUT: Duration = Duration::from_secs(30 + 5);

/// The relay's Go source directory.
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/demo-apiserver")
}

/// A built relay.
#[derive(Debug, Clone)]
pub struct DemoApiserverBinary {
    path: PathBuf,
    go_version: String,
}

impl DemoApiserverBinary {
    /// Builds the relay with a Go toolchain of release 1.24 or newer into
    /// `cache_dir/demo-apiserver` (see [`go_program::build`]).
    pub fn build(cache_dir: &Path) -> anyhow::Result<Self> {
        let built = go_program::build(cache_dir, BINARY_NAME, &source_dir(), MIN_GO_RELEASE)?;
        Ok(Self {
            path: built.path,
            go_version: built.go_version,
        })
    }

    /// The executable.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Go release it was built with, e.g. `go1.26.6`.
    pub fn go_version(&self) -> &str {
        &self.go_version
    }

    /// Starts the relay for the etcd at `endpoint` (`https://…` with `tls`,
    /// `http://…` without) and waits for its `ready`; it connects at the
    /// first call. Its log is kept next to the binary until it stops.
    ///
    /// Call it from a thread that outlives the returned value: the process
    /// is killed by the kernel when the starting thread exits.
    pub fn start(&self, endpoint: &str, tls: Option<&ClientTls>) -> anyhow::Result<DemoApiserver> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let log_dir = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(dir)
            .with_context(|| format!("creating a log directory in {}", dir.display()))?;
        let mut command = Command::new(&self.path);
        command.arg(endpoint);
        if let Some(tls) = tls {
            command
                .arg("-cacert")
                .arg(&tls.ca_cert)
                .arg("-cert")
                .arg(&tls.client.cert)
                .arg("-key")
                .arg(&tls.client.key);
        }
        let (process, stdin, stdout) = Supervised::spawn_with_pipes(
            BINARY_NAME,
            &mut command,
            &log_dir.path().join("demo-apiserver.log"),
        )?;
        // Read on a thread so that the wait is bounded; if it times out,
        // dropping `process` stops the relay, which ends the read.
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            let read = stdout.read_line(&mut line).map(|_| line);
            let _ = tx.send((stdout, read));
        });
        let pid = process.pid();
        let not_ready = |problem: String| {
            anyhow!(
                "{BINARY_NAME} (pid {pid}) {problem}; its log ends with:\n{}",
                process.log_tail()
            )
        };
        let stdout = match rx.recv_timeout(READY_TIMEOUT) {
            Ok((stdout, Ok(line))) if line == "ready\n" => stdout,
            Ok((_, Ok(line))) if line.is_empty() => {
                return Err(not_ready("exited before saying ready".to_owned()));
            }
            Ok((_, Ok(line))) => {
                return Err(not_ready(format!(
                    "said {:?} instead of ready",
                    line.chars().take(80).collect::<String>()
                )));
            }
            Ok((_, Err(err))) => return Err(not_ready(format!("could not be read: {err}"))),
            Err(_) => {
                return Err(not_ready(format!(
                    "did not say ready within {READY_TIMEOUT:?}"
                )));
            }
        };
        Ok(DemoApiserver {
            pipes: Arc::new(Mutex::new(Pipes { stdin, stdout })),
            process,
            _log_dir: log_dir,
        })
    }
}

/// What a TLS client of etcd presents and checks against: its certificate
/// and key, and the CA that signed etcd's certificate.
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub ca_cert: PathBuf,
    pub client: CertFiles,
}

/// A running relay; stopped when dropped.
#[derive(Debug)]
pub struct DemoApiserver {
    // Dropped first: closing its stdin ends the relay.
    pipes: Arc<Mutex<Pipes>>,
    process: Supervised,
    // Dropped last: removed once the relay has stopped.
    _log_dir: TempDir,
}

#[derive(Debug)]
struct Pipes {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl DemoApiserver {
    /// The relay's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// One unary call of `/etcdserverpb.KV/{method}` with the encoded
    /// request `message`; returns the encoded response message, or fails
    /// with the gRPC status etcd (or the relay) gave. Calls are made one at
    /// a time, in order; a call given up on (its future dropped, or timed
    /// out) still completes in the background before the next one starts.
    pub async fn call(&self, method: &str, message: &[u8]) -> anyhow::Result<Vec<u8>> {
        let line = format!("{method} {}\n", hex_encode(message));
        let pipes = Arc::clone(&self.pipes);
        let exchange = tokio::task::spawn_blocking(move || {
            let mut pipes = pipes
                .lock()
                .map_err(|_| std::io::Error::other("an earlier call panicked"))?;
            pipes.stdin.write_all(line.as_bytes())?;
            pipes.stdin.flush()?;
            let mut reply = String::new();
            pipes.stdout.read_line(&mut reply)?;
            std::io::Result::Ok(reply)
        });
        let talking = || format!("talking to {BINARY_NAME} (pid {})", self.pid());
        let reply = tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| anyhow!("no answer within {CALL_TIMEOUT:?}"))
            .with_context(talking)?
            .with_context(talking)?
            .with_context(|| {
                format!(
                    "{}; its log ends with:\n{}",
                    talking(),
                    self.process.log_tail()
                )
            })?;
        if reply.is_empty() {
            bail!(
                "{BINARY_NAME} (pid {}) closed its stdout; its log ends with:\n{}",
                self.pid(),
                self.process.log_tail()
            );
        }
        parse_reply(&reply)
    }
}

/// The response message in a relay's answer (`ok HEXBYTES`), or the error
/// it reports (`err CODE MESSAGE`).
fn parse_reply(reply: &str) -> anyhow::Result<Vec<u8>> {
    let reply = reply.strip_suffix('\n').unwrap_or(reply);
    if let Some(hex) = reply.strip_prefix("ok ") {
        return hex_decode(hex).with_context(|| format!("{BINARY_NAME} answered ok with non-hex"));
    }
    if let Some(status) = reply.strip_prefix("err ") {
        let (code, message) = status.split_once(' ').unwrap_or((status, ""));
        if !code.is_empty() && code.bytes().all(|b| b.is_ascii_digit()) {
            if message.is_empty() {
                bail!("grpc-status {code}");
            }
            bail!("grpc-status {code}: {message}");
        }
    }
    // Not quoted: it might hold message bytes.
    bail!("{BINARY_NAME} answered neither `ok HEXBYTES` nor `err CODE MESSAGE`")
}

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    fn nibble(digit: u8) -> Option<u8> {
        match digit {
            b'0'..=b'9' => Some(digit - b'0'),
            b'a'..=b'f' => Some(digit - b'a' + 10),
            b'A'..=b'F' => Some(digit - b'A' + 10),
            _ => None,
        }
    }
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn hex_round_trips_every_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        let text = hex_encode(&bytes);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(&text[text.len() - 4..], "feff");
        assert_eq!(hex_decode(&text).unwrap(), bytes);
        assert_eq!(hex_decode("0A0b").unwrap(), [0x0a, 0x0b]);
        assert_eq!(hex_decode(""), Some(Vec::new()));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
    }

    #[test]
    fn replies_are_messages_or_grpc_statuses() {
        assert_eq!(parse_reply("ok 0a01ff\n").unwrap(), [0x0a, 0x01, 0xff]);
        assert_eq!(parse_reply("ok \n").unwrap(), Vec::<u8>::new());
        let denied = parse_reply("err 7 etcdserver: permission denied\n").unwrap_err();
        assert_eq!(
            denied.to_string(),
            "grpc-status 7: etcdserver: permission denied"
        );
        let bare = parse_reply("err 14\n").unwrap_err();
        assert_eq!(bare.to_string(), "grpc-status 14");
        for garbage in ["ok zz\n", "okay\n", "err x y\n", "something\n"] {
            let err = parse_reply(garbage).unwrap_err();
            assert!(
                err.to_string().starts_with("demo-apiserver answered"),
                "{garbage:?}: {err}"
            );
        }
    }
}
