//! Child processes that die with their owner, and the small waits around them.
//!
//! In: a configured [`Command`] and a log file path. Out: a [`Supervised`]
//! process whose stdout and stderr go to that log, that is stopped (SIGTERM,
//! then SIGKILL after a bound) when dropped, and that the kernel kills if the
//! thread that started it dies without dropping it (a test binary killed by a
//! timeout, for example).

use std::{
    fs::{self, File},
    io::Read as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// How long a stopped process gets between SIGTERM and SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// A child process owned by the harness.
#[derive(Debug)]
pub(crate) struct Supervised {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Supervised {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(name: &str, command: &mut Command, log: &Path) -> anyhow::Result<Self> {
        let out = open_log(log)?;
        let err = out
            .try_clone()
            .with_context(|| format!("duplicating the handle of {}", log.display()))?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        Self::spawn_configured(name, command, log)
    }

    /// Starts `command` with stderr appended to `log` and stdout piped to
    /// the caller.
    pub(crate) fn spawn_piped(
        name: &str,
        command: &mut Command,
        log: &Path,
    ) -> anyhow::Result<(Self, ChildStdout)> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(open_log(log)?);
        let mut process = Self::spawn_configured(name, command, log)?;
        let stdout = process.take_stdout()?;
        Ok((process, stdout))
    }

    /// Starts `command` with stderr appended to `log` and stdin and stdout
    /// piped to the caller.
    pub(crate) fn spawn_with_pipes(
        name: &str,
        command: &mut Command,
        log: &Path,
    ) -> anyhow::Result<(Self, ChildStdin, ChildStdout)> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(open_log(log)?);
        let mut process = Self::spawn_configured(name, command, log)?;
        let stdin = process
            .child
            .stdin
            .take()
            .context("the piped stdin of a child just spawned is missing")?;
        let stdout = process.take_stdout()?;
        Ok((process, stdin, stdout))
    }

    fn take_stdout(&mut self) -> anyhow::Result<ChildStdout> {
        self.child
            .stdout
            .take()
            .context("the piped stdout of a child just spawned is missing")
    }

    fn spawn_configured(name: &str, command: &mut Command, log: &Path) -> anyhow::Result<Self> {
        // A process group of its own: a Ctrl-C in the owner's terminal goes
        // to the owner only, which then stops its components in order
        // (the demo does) instead of them dying halfway through a teardown.
        command.process_group(0);
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no
        // memory of the parent. It makes the kernel SIGKILL the child when the
        // thread that forked it exits, so a test binary that is killed before
        // its destructors run leaves no component behind.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({command:?})"))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the log's tail if the process has exited.
    pub(crate) fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "{} exited ({status}); its log ({}) ends with:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log)
            ),
            Err(err) => Err(err).with_context(|| format!("checking whether {} runs", self.name)),
        }
    }

    /// The last lines of this process's log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// SIGTERM, then SIGKILL if it is still there after `grace`; reaps it.
    pub(crate) fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: `pid` is our unreaped child, so the id cannot have been
        // reused by another process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        note(format_args!(
            "{} (pid {pid}) ignored SIGTERM for {grace:?}; killing it",
            self.name
        ));
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(STOP_GRACE);
    }
}

fn open_log(path: &Path) -> anyhow::Result<File> {
    File::options()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening log file {}", path.display()))
}

/// `eprintln!`, except while the thread is panicking: then the line is
/// written straight to stderr and a failure to write is ignored, because a
/// second panic (a closed stderr makes `eprintln!` panic) would abort a
/// teardown that runs during unwinding half-way through, leaving its
/// processes killed but its directories and mounts behind. (`eprintln!`
/// otherwise, so that the test harness captures the line.)
pub(crate) fn note(message: std::fmt::Arguments<'_>) {
    if thread::panicking() {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{message}");
    } else {
        eprintln!("{message}");
    }
}

/// The last lines of a log file (or why it could not be read).
pub(crate) fn log_tail(path: &Path) -> String {
    const LINES: usize = 30;
    let mut text = String::new();
    if let Err(err) = File::open(path).and_then(|mut file| file.read_to_string(&mut text)) {
        return format!("(cannot read {}: {err})", path.display());
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LINES)..].join("\n")
}

/// A loopback TCP port that was free a moment ago.
pub(crate) fn free_loopback_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(listener
        .local_addr()
        .context("reading a bound port")?
        .port())
}

/// Fills `buf` with random bytes from the kernel.
pub(crate) fn fill_random(buf: &mut [u8]) -> anyhow::Result<()> {
    File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(buf))
        .context("reading /dev/urandom")
}

/// `bytes` random bytes from the kernel, hex encoded.
pub(crate) fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Polls `probe` every `interval` until it is ready (`Ok(Ok(value))`), fails
/// for good (`Err`), or `timeout` passes. `Ok(Err(reason))` means "not yet";
/// the timeout error names `what` was awaited and the last such reason.
pub(crate) fn wait_until<T>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: impl FnMut() -> anyhow::Result<Result<T, String>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let reason = match probe()? {
            Ok(value) => return Ok(value),
            Err(reason) => reason,
        };
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last: {reason}");
        }
        thread::sleep(interval);
    }
}

/// Writes `contents` to a new file readable by its owner only.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let mut file = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents)
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes `contents` to `path`, creating its parent directories.
pub(crate) fn write_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}
