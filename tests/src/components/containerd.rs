//! A real containerd (Debian's `/usr/bin/containerd` 1.6) with runc and its
//! CRI plugin, for live tests and the demo.
//!
//! In: [`ContainerdOptions`] (where to cache the image tarballs). Out: a
//! running containerd with its own root, state and runc directories in a
//! temporary directory, its own socket, CNI (`ptp` + `host-local`, on a
//! `10.234.N.0/24` that no route uses yet) and the local pause and busybox
//! images imported into the `k8s.io` namespace. [`Containerd::cri`] gives a
//! [`CriClient`] whose [`CriClient::create_pod`] makes Pods as the kubelet
//! does.
//!
//! Dropping it tears everything down: it stops and removes every sandbox
//! through the CRI, stops containerd, kills whatever still mentions its
//! directory (shims, runc) or sits in its cgroups, unmounts what is left
//! under its directory (rootfs, shm, network namespaces — they live in the
//! state directory), removes its cgroups and its directory.
//!
//! Settings this machine needs, and why:
//! - `restrict_oom_score_adj = true`: root here lacks CAP_SYS_RESOURCE, so
//!   runc cannot lower the OOM score adjustment it is asked to set and fails
//!   every sandbox with "can't get final child's PID from pipe: EOF";
//! - cgroupfs driver (`SystemdCgroup = false`): no systemd manages cgroups;
//! - CNI is mandatory: containerd 1.6's RunPodSandbox fails when the network
//!   plugin returns no IP. `ptp` gives each Pod a veth pair and a host route
//!   (no bridge device to leave behind); nothing sends traffic to Pod IPs.
//!   Like every CNI plugin that routes, it turns on `net.ipv4.ip_forward`
//!   on the host, which stays on.

use std::{
    fs,
    future::Future,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use tempfile::TempDir;

use super::{
    cri::{CriClient, PodTemplate},
    images::{self, PAUSE_IMAGE, WORKLOAD_COMMAND, WORKLOAD_IMAGE},
    leftovers,
    process::{STOP_GRACE, Supervised, note, random_hex, wait_until, write_file},
};

const CONTAINERD: &str = "/usr/bin/containerd";
const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// Pod IPs come from a /24 of 10.234.0.0/16 (`10.234.N.0/24`), one per
/// instance so that instances running at the same time (parallel tests) do
/// not add the same host routes. Not podman's default 10.88.0.0/16, which
/// podman (installed on these machines) may route already.
const POD_NETWORK: [u8; 2] = [10, 234];
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on stopping and removing all sandboxes at teardown.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start containerd.
#[derive(Debug, Clone)]
pub struct ContainerdOptions {
    /// Where the image tarballs are cached between runs (tests pass
    /// `env!("CARGO_TARGET_TMPDIR")`).
    pub image_cache_dir: PathBuf,
}

/// A running containerd; torn down on drop (see the module docs).
#[derive(Debug)]
pub struct Containerd {
    process: Supervised,
    socket: PathBuf,
    /// The cgroup root of its Pods (kubelet's `--cgroup-root`), unique per
    /// instance so that teardown removes exactly its own cgroups.
    cgroup_root: String,
    pod_subnet: String,
    dir: TempDir,
}

impl Containerd {
    /// Starts containerd, waits until its CRI answers Version, and imports
    /// the local images.
    ///
    /// Call it from a thread that outlives the returned value: containerd
    /// is killed by the kernel when the starting thread exits.
    pub fn start(options: ContainerdOptions) -> anyhow::Result<Self> {
        Self::start_in(options, &std::env::temp_dir())
    }

    /// Like [`Containerd::start`], with containerd's directory created in
    /// `parent` instead of the system's temporary directory. Its socket is
    /// in that directory: keep `parent` short (a unix socket path has at
    /// most 107 bytes).
    pub fn start_in(options: ContainerdOptions, parent: &Path) -> anyhow::Result<Self> {
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("podtrace-containerd-")
            .tempdir_in(parent)
            .with_context(|| {
                format!(
                    "creating containerd's temporary directory in {}",
                    parent.display()
                )
            })?;
        let images = images::build_images(&options.image_cache_dir)?;
        let socket = dir.path().join("containerd.sock");
        let pod_subnet = free_pod_subnet()?;
        let config = dir.path().join("config.toml");
        write_file(
            &dir.path().join("cni/net.d/10-podtrace.conflist"),
            cni_conflist(dir.path(), &pod_subnet).as_bytes(),
        )?;
        write_file(&config, containerd_config(dir.path(), &socket).as_bytes())?;
        let process = Supervised::spawn(
            "containerd",
            Command::new(CONTAINERD).arg("--config").arg(&config),
            &dir.path().join("containerd.log"),
        )?;
        let mut containerd = Self {
            process,
            socket,
            cgroup_root: format!("/podtrace-{}", random_hex(4)?),
            pod_subnet,
            dir,
        };
        containerd.wait_for_cri()?;
        for image in &images {
            images::import_image(image, &containerd.socket)?;
        }
        containerd.wait_for_images()?;
        note(format_args!(
            "containerd (pid {}) serving {}, ready with images after {:?}",
            containerd.pid(),
            containerd.socket.display(),
            started.elapsed()
        ));
        Ok(containerd)
    }

    fn wait_for_cri(&mut self) -> anyhow::Result<()> {
        let what = format!(
            "containerd's CRI at {} to answer Version",
            self.socket.display()
        );
        let template = self.pod_template();
        let socket = self.socket.clone();
        wait_until(&what, STARTUP_TIMEOUT, Duration::from_millis(100), || {
            self.process.ensure_running()?;
            if !socket.exists() {
                return Ok(Err("no socket yet".to_owned()));
            }
            let (socket, template) = (socket.clone(), template.clone());
            Ok(run_async(
                async move { CriClient::connect(&socket, template).await?.version().await },
            )
            .map(|_| ())
            .map_err(|err| format!("{err:#}")))
        })
        .with_context(|| format!("containerd's log ends with:\n{}", self.process.log_tail()))
    }

    /// containerd's CRI learns about imported images from events; wait
    /// until it reports both.
    fn wait_for_images(&mut self) -> anyhow::Result<()> {
        let socket = self.socket.clone();
        let template = self.pod_template();
        wait_until(
            "the CRI to list the imported images",
            STARTUP_TIMEOUT,
            Duration::from_millis(100),
            || {
                self.process.ensure_running()?;
                let (socket, template) = (socket.clone(), template.clone());
                run_async(async move {
                    let cri = CriClient::connect(&socket, template).await?;
                    for image in [PAUSE_IMAGE, WORKLOAD_IMAGE] {
                        if cri.image_status(image).await?.is_none() {
                            return Ok(Err(format!("{image} not known yet")));
                        }
                    }
                    Ok(Ok(()))
                })
            },
        )
    }

    /// The CRI (and containerd API) socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The containerd process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The temporary directory holding root, state, runc state, CNI
    /// configuration, Pod logs and the socket.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// runc's state directory (`runc --root`); the shim adds the
    /// containerd namespace: `<runc_root>/k8s.io/<container id>`.
    pub fn runc_root(&self) -> PathBuf {
        self.dir.path().join("runc")
    }

    /// The subnet Pod IPs come from (`10.234.N.0/24`).
    pub fn pod_subnet(&self) -> &str {
        &self.pod_subnet
    }

    /// The cgroup root of this instance's Pods (see [`PodTemplate`]).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// What [`CriClient::create_pod`] puts in a Pod here: logs under this
    /// instance's directory, its cgroup root, the busybox workload.
    pub fn pod_template(&self) -> PodTemplate {
        PodTemplate {
            log_root: self.dir.path().join("pods"),
            cgroup_root: self.cgroup_root.clone(),
            image: WORKLOAD_IMAGE.to_owned(),
            command: WORKLOAD_COMMAND.iter().map(|arg| arg.to_string()).collect(),
        }
    }

    /// A CRI client for this containerd. Its connection belongs to the
    /// calling tokio runtime.
    pub async fn cri(&self) -> anyhow::Result<CriClient> {
        CriClient::connect(&self.socket, self.pod_template()).await
    }

    /// Stops and removes every sandbox (and so its containers, network
    /// namespace and shim), as the kubelet does when Pods are deleted.
    fn remove_sandboxes(&self) -> anyhow::Result<()> {
        let socket = self.socket.clone();
        let template = self.pod_template();
        run_async(async move {
            let work = async {
                let cri = CriClient::connect(&socket, template).await?;
                for sandbox in cri.list_pod_sandboxes().await? {
                    cri.stop_pod_sandbox(&sandbox.id).await?;
                    cri.remove_pod_sandbox(&sandbox.id).await?;
                }
                anyhow::Ok(())
            };
            tokio::time::timeout(TEARDOWN_TIMEOUT, work)
                .await
                .with_context(|| format!("removing sandboxes took over {TEARDOWN_TIMEOUT:?}"))?
        })
    }

    /// Kills what survived the orderly steps: shims and runc (they carry
    /// this directory in their arguments) and processes in this instance's
    /// cgroups. Returns what it had to kill, for the teardown warning.
    fn kill_leftover_processes(&self) -> Vec<(u32, String)> {
        let needle = self.dir.path().display().to_string();
        // Shims exit on their own shortly after their sandbox is removed.
        let _ = wait_until(
            "shims to exit",
            Duration::from_secs(5),
            Duration::from_millis(50),
            || {
                let left = leftovers::processes_mentioning(&needle);
                Ok(if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{left:?}"))
                })
            },
        );
        let mut killed = leftovers::processes_mentioning(&needle);
        for dir in leftovers::cgroup_dirs(&self.cgroup_root) {
            for pid in leftovers::cgroup_pids(&dir) {
                if !killed.iter().any(|(known, _)| *known == pid) {
                    killed.push((pid, format!("process in cgroup {}", dir.display())));
                }
            }
        }
        for (pid, _) in &killed {
            // SAFETY: kill(2) has no memory preconditions; the pid was just
            // read from /proc or cgroup.procs and belongs to this instance.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        killed
    }

    fn teardown(&mut self) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        if let Err(err) = self.remove_sandboxes() {
            problems.push(format!("removing sandboxes through the CRI: {err:#}"));
        }
        self.process.stop(STOP_GRACE);
        let killed = self.kill_leftover_processes();
        if !killed.is_empty() {
            problems.push(format!("killed leftover processes: {killed:?}"));
            // Give the kernel a moment to reap them before unmounting.
            std::thread::sleep(Duration::from_millis(200));
        }
        for mount in leftovers::mounts_under(self.dir.path()) {
            let path = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes())
                .context("a mount point with a NUL byte")?;
            // SAFETY: `path` is a valid NUL-terminated string that outlives
            // the call. MNT_DETACH succeeds even if something still uses it.
            if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
                problems.push(format!(
                    "unmounting {}: {}",
                    mount.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
        for dir in leftovers::cgroup_dirs(&self.cgroup_root) {
            if let Err(err) = leftovers::remove_cgroup_tree(&dir) {
                problems.push(format!("removing cgroup {}: {err}", dir.display()));
            }
        }
        if let Err(err) = fs::remove_dir_all(self.dir.path()) {
            problems.push(format!("removing {}: {err}", self.dir.path().display()));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let started = Instant::now();
        match self.teardown() {
            Ok(()) => note(format_args!(
                "containerd torn down in {:?}",
                started.elapsed()
            )),
            Err(err) => note(format_args!("containerd teardown: {err:#}")),
        }
    }
}

/// Runs `future` to completion on a fresh single-threaded tokio runtime in
/// a thread of its own, so that synchronous code (start, Drop) can make CRI
/// calls whether or not the caller is inside a tokio runtime.
fn run_async<T: Send + 'static>(
    future: impl Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a tokio runtime")?
            .block_on(future)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the CRI call thread panicked"))?
}

/// A `10.234.N.0/24` that no IPv4 route of this network namespace uses,
/// starting at a random N. Another instance could take the same one between
/// this check and its first Pod; the random start makes that unlikely.
fn free_pod_subnet() -> anyhow::Result<String> {
    let routes = fs::read_to_string("/proc/net/route").context("reading /proc/net/route")?;
    // Destinations are little-endian hex: 10.234.N.x reads as "xxNNEA0A".
    let used: Vec<u8> = routes
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter_map(|hex| u32::from_str_radix(hex, 16).ok())
        .map(u32::to_le_bytes)
        .filter(|octets| octets[..2] == POD_NETWORK)
        .map(|octets| octets[2])
        .collect();
    let start = u8::from_str_radix(&random_hex(1)?, 16).context("parsing a random byte")?;
    (0..=u8::MAX)
        .map(|offset| start.wrapping_add(offset))
        .find(|n| !used.contains(n))
        .map(|n| format!("{}.{}.{n}.0/24", POD_NETWORK[0], POD_NETWORK[1]))
        .context("every /24 of the Pod network is routed already")
}

/// containerd's configuration (version 2 format, containerd 1.6).
fn containerd_config(dir: &Path, socket: &Path) -> String {
    let dir = dir.display();
    let socket = socket.display();
    format!(
        r#"version = 2
root = "{dir}/root"
state = "{dir}/state"
# Storage and snapshot plugins this harness does not use; skipping them
# keeps the log free of their "not supported" errors.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{dir}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root lacks CAP_SYS_RESOURCE on these machines (see the module docs).
  restrict_oom_score_adj = true
  # Network namespaces under the state directory rather than /var/run/netns,
  # so that nothing of this instance lives outside its directory.
  netns_mounts_under_state_dir = true
  disable_apparmor = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/bin/runc"
        # runc's own state, apart from any other runc user on the host.
        Root = "{dir}/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{dir}/cni/net.d"
"#
    )
}

/// The CNI network: point-to-point veth pairs, addresses from host-local
/// IPAM whose allocation records stay in this instance's directory.
fn cni_conflist(dir: &Path, subnet: &str) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "podtrace",
        "plugins": [{
            "type": "ptp",
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "subnet": subnet,
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": dir.join("cni/ipam").display().to_string(),
            },
        }],
    })
    .to_string()
}
