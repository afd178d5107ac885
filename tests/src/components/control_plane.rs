//! A real single-node Kubernetes control plane — kube-apiserver,
//! kube-scheduler, kube-controller-manager (its Deployment and ReplicaSet
//! controllers) and a kubelet — started from binaries the user provides
//! (`cargo xtask demo --k8s-bin DIR`), on top of the harness's [`Etcd`] and
//! [`Containerd`].
//!
//! In: a directory holding `kube-apiserver`, `kube-scheduler`,
//! `kube-controller-manager`, `kubelet` and `kubectl` (this crate never
//! builds them; another kube-apiserver binary may
//! be given, a stripped one for example), a running etcd — with TLS and
//! authentication kube-apiserver presents etcd's `kube-apiserver` client
//! certificate, which makes it that etcd user; without TLS it connects over
//! plain HTTP with no credentials — a running containerd, and the node's
//! name. Out: the four processes running and supervised, the node
//! registered and Ready, `kubectl` preconfigured as a cluster admin
//! ([`ControlPlane::kubectl`]), Pods created, awaited and deleted through it
//! ([`ControlPlane::create_pod`], [`ControlPlane::try_create_pod`],
//! [`ControlPlane::wait_running`], [`ControlPlane::wait_pod`],
//! [`ControlPlane::delete_pods`]), namespaces with labels
//! ([`ControlPlane::create_namespace`]), further kube-scheduler instances
//! with their own scheduler name ([`ControlPlane::start_second_scheduler`]),
//! and Deployments scaled up and down ([`ControlPlane::deploy`]).
//!
//! What is generated in its temporary directory: a cluster CA; the
//! apiserver's serving certificate (127.0.0.1, localhost, the `kubernetes`
//! Service's names and ClusterIP); client certificates for the admin
//! (`system:masters`), the scheduler (`system:kube-scheduler`), the kubelet
//! (`system:node:NODE` in `system:nodes`, authorized by the Node authorizer)
//! and the apiserver's kubelet client; the kubelet's serving certificate
//! (NODE, 127.0.0.1: `kubectl logs` goes through it); a service-account
//! signing key;
//! kubeconfigs; a KubeletConfiguration (cgroupfs driver under containerd's
//! cgroup root, swap allowed, containerd's socket, x509 authentication and
//! AlwaysAllow authorization of the kubelet's own API on loopback, eviction
//! and image GC thresholds low enough for a busy disk, no iptables chains).
//! kube-controller-manager runs only the Deployment and ReplicaSet
//! controllers (and, when asked, the DaemonSet controller and the garbage
//! collector), each controller as its own service account, as kubeadm runs
//! it (`--use-service-account-credentials`: tokens from the TokenRequest
//! API, and a user agent that names the account): the
//! `default` ServiceAccount is created here, the node's `not-ready` taint is
//! removed here once it is Ready, and Pods must not mount a service-account
//! token (nothing publishes `kube-root-ca.crt`).
//!
//! Dropping it stops the kubelet, the controller manager, the schedulers and
//! the apiserver (in that order), restores the kernel settings the kubelet changes (it sets
//! `vm.overcommit_memory`, `kernel.panic` and `kernel.panic_on_oops` as on
//! any node), unmounts what the kubelet left under its root directory,
//! removes the Pod log directories the kubelet created under `/var/log` and
//! its temporary directory. Drop it before the [`Containerd`] (whose
//! teardown removes the sandboxes and the cgroup root) and the [`Etcd`].

use std::{
    fmt, fs,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::{
    certs::CertFiles,
    containerd::Containerd,
    demo_apiserver::ClientTls,
    etcd::{APISERVER_USER, Etcd},
    leftovers,
    process::{Supervised, free_loopback_port, note, wait_until, write_file, write_private},
};

/// The executables expected in the `--k8s-bin` directory.
pub const BINARIES: [&str; 5] = [
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubelet",
    "kubectl",
];
/// The Services' ClusterIP range, and the `kubernetes` Service's address in it.
const SERVICE_CIDR: &str = "10.96.0.0/24";
const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
/// How long each component gets to become ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);
/// Kernel settings the kubelet's container manager changes
/// (`setupKernelTunables`), restored on drop.
const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];
/// Where the kubelet writes container logs (fixed in kubelet 1.28).
const POD_LOG_DIRS: [&str; 2] = ["/var/log/pods", "/var/log/containers"];

/// What the control plane is started with.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// The directory with kube-apiserver, kube-scheduler, kubelet, kubectl.
    pub bin_dir: PathBuf,
    /// Another kube-apiserver executable to run instead of `bin_dir`'s.
    pub apiserver: Option<PathBuf>,
    /// The node's name (the kubelet's `--hostname-override`).
    pub node_name: String,
    /// Also run kube-controller-manager's DaemonSet controller, and the
    /// garbage collector that deletes a deleted DaemonSet's Pods (it watches
    /// every resource: off unless a DaemonSet is to be applied).
    pub daemon_sets: bool,
}

/// A Pod created through the apiserver.
#[derive(Debug, Clone)]
pub struct CreatedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl CreatedPod {
    /// The Pod the apiserver answered a create with (JSON).
    fn from_object(object: &Value) -> Self {
        let field = |key: &str| {
            object["metadata"][key]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            namespace: field("namespace"),
            name: field("name"),
            uid: field("uid"),
        }
    }
}

/// What `kubectl create` of a Pod answered.
#[derive(Debug, Clone)]
pub enum PodCreation {
    /// Stored (or, with `--dry-run=server`, admitted and not stored).
    Created {
        pod: CreatedPod,
        /// The object the apiserver returned.
        object: Value,
        /// The apiserver's warnings, as kubectl printed them (`Warning: ` removed).
        warnings: Vec<String>,
    },
    /// Refused (admission, validation): kubectl's error text.
    Refused { error: String },
}

/// The scheduler of [`ControlPlane::start_second_scheduler`].
#[derive(Debug)]
struct ExtraScheduler {
    name: String,
    process: Supervised,
}

/// The running control plane; stopped and cleaned up on drop.
pub struct ControlPlane {
    // Stopped in this order (see Drop).
    kubelet: Option<Supervised>,
    controller_manager: Option<Supervised>,
    extra_schedulers: Vec<ExtraScheduler>,
    scheduler: Option<Supervised>,
    apiserver: Option<Supervised>,
    bin_dir: PathBuf,
    node_name: String,
    admin_kubeconfig: PathBuf,
    scheduler_kubeconfig: PathBuf,
    /// The apiserver's URL, the cluster CA and the admin's certificate and
    /// key: for clients other than kubectl.
    server: String,
    ca_cert: PathBuf,
    admin: (PathBuf, PathBuf),
    kubelet_root: PathBuf,
    saved_sysctls: Vec<(&'static str, String)>,
    log_entries_before: Vec<PathBuf>,
    /// Which of [`POD_LOG_DIRS`] existed before the kubelet started.
    log_dirs_before: Vec<bool>,
    dir: TempDir,
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane")
            .field("bin_dir", &self.bin_dir)
            .field("node_name", &self.node_name)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// The generated certificates and keys, as files.
struct ClusterPki {
    ca_cert: PathBuf,
    apiserver: (PathBuf, PathBuf),
    apiserver_kubelet_client: (PathBuf, PathBuf),
    admin: (PathBuf, PathBuf),
    scheduler: (PathBuf, PathBuf),
    kubelet: (PathBuf, PathBuf),
    /// The kubelet's serving certificate, which kube-apiserver verifies
    /// (`--kubelet-certificate-authority`) when it reaches the kubelet for a
    /// Pod's logs: one the kubelet made itself would not verify.
    kubelet_serving: (PathBuf, PathBuf),
    service_account_key: PathBuf,
    service_account_public_key: PathBuf,
}

impl ControlPlane {
    /// Fails unless `dir` holds every executable of [`BINARIES`].
    pub fn check_binaries(dir: &Path) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let missing: Vec<&str> = BINARIES
            .into_iter()
            .filter(|name| {
                !fs::metadata(dir.join(name))
                    .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
            })
            .collect();
        if !missing.is_empty() {
            bail!(
                "{} lacks the executables {}: it must hold {}",
                dir.display(),
                missing.join(", "),
                BINARIES.join(", ")
            );
        }
        Ok(())
    }

    /// Starts kube-apiserver on `etcd` (over TLS with etcd's
    /// `kube-apiserver` client certificate when etcd has TLS, else over plain
    /// HTTP), kube-scheduler and a kubelet on `containerd`, and waits until
    /// the node is Ready and the `default` ServiceAccount exists. Its
    /// directory is created in `parent`.
    ///
    /// Call it from a thread that outlives the returned value (the processes
    /// are killed by the kernel when the starting thread exits).
    pub fn start_in(
        options: ControlPlaneOptions,
        parent: &Path,
        etcd: &Etcd,
        containerd: &Containerd,
    ) -> anyhow::Result<Self> {
        Self::check_binaries(&options.bin_dir)?;
        let apiserver_binary = options
            .apiserver
            .clone()
            .unwrap_or_else(|| options.bin_dir.join("kube-apiserver"));
        if !apiserver_binary.is_file() {
            bail!("{} is no file", apiserver_binary.display());
        }
        // etcd's CA and the client certificate that makes kube-apiserver
        // etcd user `kube-apiserver`; none with plain etcd.
        let etcd_tls = match etcd.pki() {
            Some(pki) => Some((pki.ca_cert().to_owned(), pki.client(APISERVER_USER)?)),
            None => None,
        };
        let dir = tempfile::Builder::new()
            .prefix("podtrace-k8s-")
            .tempdir_in(parent)
            .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
        let pki = ClusterPki::generate(&dir.path().join("pki"), &options.node_name)?;
        let apiserver_port = free_loopback_port()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig = |name: &str, identity: &(PathBuf, PathBuf)| -> anyhow::Result<PathBuf> {
            let path = dir.path().join(format!("{name}.kubeconfig"));
            write_file(
                &path,
                kubeconfig_json(&server, &pki.ca_cert, identity).as_bytes(),
            )?;
            Ok(path)
        };
        let admin_kubeconfig = kubeconfig("admin", &pki.admin)?;
        let scheduler_kubeconfig = kubeconfig("scheduler", &pki.scheduler)?;
        let kubelet_kubeconfig = kubeconfig("kubelet", &pki.kubelet)?;
        let kubelet_root = dir.path().join("kubelet");
        fs::create_dir_all(&kubelet_root)
            .with_context(|| format!("creating {}", kubelet_root.display()))?;

        let mut plane = Self {
            kubelet: None,
            controller_manager: None,
            extra_schedulers: Vec::new(),
            scheduler: None,
            apiserver: None,
            bin_dir: options.bin_dir.clone(),
            node_name: options.node_name.clone(),
            admin_kubeconfig: admin_kubeconfig.clone(),
            scheduler_kubeconfig: scheduler_kubeconfig.clone(),
            server: server.clone(),
            ca_cert: pki.ca_cert.clone(),
            admin: pki.admin.clone(),
            kubelet_root: kubelet_root.clone(),
            saved_sysctls: Vec::new(),
            log_entries_before: pod_log_entries(),
            log_dirs_before: POD_LOG_DIRS
                .iter()
                .map(|dir| Path::new(dir).exists())
                .collect(),
            dir,
        };

        // kube-apiserver.
        let started = Instant::now();
        let mut command = Command::new(&apiserver_binary);
        command.arg(format!("--etcd-servers={}", etcd.endpoint()));
        if let Some((ca_cert, client)) = &etcd_tls {
            command
                .arg(format!("--etcd-cafile={}", ca_cert.display()))
                .arg(format!("--etcd-certfile={}", client.cert.display()))
                .arg(format!("--etcd-keyfile={}", client.key.display()));
        }
        command
            .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
            .arg(format!("--secure-port={apiserver_port}"))
            .arg(format!(
                "--cert-dir={}",
                plane.dir.path().join("apiserver").display()
            ))
            .arg(format!("--tls-cert-file={}", pki.apiserver.0.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.apiserver.1.display()
            ))
            .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
            .arg(format!(
                "--kubelet-client-certificate={}",
                pki.apiserver_kubelet_client.0.display()
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                pki.apiserver_kubelet_client.1.display()
            ))
            .arg(format!(
                "--kubelet-certificate-authority={}",
                pki.ca_cert.display()
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                pki.service_account_public_key.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.service_account_key.display()
            ))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            // A loopback advertise address cannot be an Endpoints address:
            // nothing reconciles the `kubernetes` Service's endpoints.
            .arg("--endpoint-reconciler-type=none")
            .args(["--authorization-mode=Node,RBAC", "--allow-privileged=true"])
            .arg("--profiling=false");
        plane.apiserver = Some(Supervised::spawn(
            "kube-apiserver",
            &mut command,
            &plane.dir.path().join("kube-apiserver.log"),
        )?);
        plane.wait_for_apiserver()?;
        note(format_args!(
            "kube-apiserver {} (pid {}) serving {server} on etcd {}, ready after {:?}",
            apiserver_binary.display(),
            plane.apiserver.as_ref().map_or(0, Supervised::pid),
            etcd.endpoint(),
            started.elapsed()
        ));

        // kube-scheduler.
        let started = Instant::now();
        let mut command = Command::new(options.bin_dir.join("kube-scheduler"));
        command
            .arg(format!("--kubeconfig={}", scheduler_kubeconfig.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                scheduler_kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                scheduler_kubeconfig.display()
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_loopback_port()?))
            .arg("--leader-elect=false");
        plane.scheduler = Some(Supervised::spawn(
            "kube-scheduler",
            &mut command,
            &plane.dir.path().join("kube-scheduler.log"),
        )?);
        note(format_args!(
            "kube-scheduler (pid {}) started in {:?}",
            plane.scheduler.as_ref().map_or(0, Supervised::pid),
            started.elapsed()
        ));

        // kube-controller-manager: the controllers that turn a Deployment
        // into Pods.
        let started = Instant::now();
        let mut command = Command::new(options.bin_dir.join("kube-controller-manager"));
        command
            .arg(format!("--kubeconfig={}", admin_kubeconfig.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                admin_kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                admin_kubeconfig.display()
            ))
            // Each controller as its own service account (a token from the
            // TokenRequest API), as kubeadm runs it: the user agent of its
            // requests ends with that account.
            .arg("--use-service-account-credentials=true")
            .arg(if options.daemon_sets {
                "--controllers=deployment,replicaset,daemonset,garbagecollector"
            } else {
                "--controllers=deployment,replicaset"
            })
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_loopback_port()?))
            .arg(format!(
                "--cert-dir={}",
                plane.dir.path().join("controller-manager").display()
            ))
            .arg("--leader-elect=false");
        plane.controller_manager = Some(Supervised::spawn(
            "kube-controller-manager",
            &mut command,
            &plane.dir.path().join("kube-controller-manager.log"),
        )?);
        note(format_args!(
            "kube-controller-manager (pid {}) started in {:?}",
            plane.controller_manager.as_ref().map_or(0, Supervised::pid),
            started.elapsed()
        ));

        // The kubelet, under containerd's cgroup root (which containerd's
        // teardown removes); the kubelet insists that it exists.
        let started = Instant::now();
        create_cgroup(containerd.cgroup_root())?;
        plane.saved_sysctls = KUBELET_SYSCTLS
            .into_iter()
            .filter_map(|key| {
                let value = fs::read_to_string(Path::new("/proc/sys").join(key)).ok()?;
                Some((key, value.trim().to_owned()))
            })
            .collect();
        let config = plane.dir.path().join("kubelet-config.json");
        write_file(
            &config,
            kubelet_config(
                &pki,
                containerd,
                free_loopback_port()?,
                free_loopback_port()?,
            )
            .to_string()
            .as_bytes(),
        )?;
        let mut command = Command::new(options.bin_dir.join("kubelet"));
        command
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", kubelet_kubeconfig.display()))
            .arg(format!("--root-dir={}", kubelet_root.display()))
            .arg(format!(
                "--cert-dir={}",
                plane.dir.path().join("kubelet-pki").display()
            ))
            .arg(format!("--hostname-override={}", options.node_name));
        plane.kubelet = Some(Supervised::spawn(
            "kubelet",
            &mut command,
            &plane.dir.path().join("kubelet.log"),
        )?);
        plane.wait_for_node()?;
        plane.remove_not_ready_taint()?;
        note(format_args!(
            "kubelet (pid {}) registered node {} Ready after {:?}",
            plane.kubelet.as_ref().map_or(0, Supervised::pid),
            options.node_name,
            started.elapsed()
        ));
        plane.ensure_default_service_account()?;
        Ok(plane)
    }

    /// `kubectl` as a cluster admin of this control plane.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.bin_dir.join("kubectl"));
        command
            .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
            .arg("--request-timeout=30s");
        command
    }

    /// What a client other than kubectl presents to the apiserver: the
    /// cluster CA that signed its serving certificate, and the admin's
    /// client certificate (`system:masters`).
    pub fn admin_tls(&self) -> ClientTls {
        ClientTls {
            ca_cert: self.ca_cert.clone(),
            client: CertFiles {
                cert: self.admin.0.clone(),
                key: self.admin.1.clone(),
            },
        }
    }

    /// The apiserver's URL (`https://127.0.0.1:PORT`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// kube-apiserver's process id (0 once it is stopped).
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.as_ref().map_or(0, Supervised::pid)
    }

    /// The admin kubeconfig (for a user's own kubectl).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Fails with a log tail if any component has exited.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        for process in [
            &mut self.apiserver,
            &mut self.scheduler,
            &mut self.controller_manager,
            &mut self.kubelet,
        ]
        .into_iter()
        .flatten()
        {
            process.ensure_running()?;
        }
        for scheduler in &mut self.extra_schedulers {
            scheduler.process.ensure_running()?;
        }
        Ok(())
    }

    fn wait_for_apiserver(&mut self) -> anyhow::Result<()> {
        let mut probe = self.kubectl();
        probe.args(["get", "--raw", "/readyz"]);
        let apiserver = self
            .apiserver
            .as_mut()
            .context("kube-apiserver not started")?;
        wait_until(
            "kube-apiserver to report ready",
            STARTUP_TIMEOUT,
            Duration::from_millis(250),
            || {
                apiserver.ensure_running()?;
                let output = probe
                    .output()
                    .context("running kubectl get --raw /readyz")?;
                Ok(if output.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
                })
            },
        )
        .with_context(|| format!("kube-apiserver's log ends with:\n{}", apiserver.log_tail()))
    }

    fn wait_for_node(&mut self) -> anyhow::Result<()> {
        let mut probe = self.kubectl();
        probe.args([
            "get",
            "node",
            &self.node_name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        let kubelet = self.kubelet.as_mut().context("kubelet not started")?;
        wait_until(
            "the kubelet's node to be Ready",
            STARTUP_TIMEOUT,
            Duration::from_millis(500),
            || {
                kubelet.ensure_running()?;
                let output = probe.output().context("running kubectl get node")?;
                let ready = String::from_utf8_lossy(&output.stdout);
                Ok(if output.status.success() && ready.trim() == "True" {
                    Ok(())
                } else {
                    Err(format!(
                        "Ready={:?} {}",
                        ready.trim(),
                        String::from_utf8_lossy(&output.stderr).trim()
                    ))
                })
            },
        )
        .with_context(|| format!("the kubelet's log ends with:\n{}", kubelet.log_tail()))
    }

    /// The kubelet registers its node with the `node.kubernetes.io/not-ready`
    /// taint, which kube-controller-manager's node lifecycle controller
    /// removes once the node is Ready; there is none here, so this does.
    fn remove_not_ready_taint(&self) -> anyhow::Result<()> {
        let output = self
            .kubectl()
            .args(["taint", "node", &self.node_name])
            .arg("node.kubernetes.io/not-ready-")
            .output()
            .context("running kubectl taint")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && !stderr.contains("not found") {
            bail!("removing the not-ready taint: {}", stderr.trim());
        }
        Ok(())
    }

    /// The ServiceAccount admission plugin rejects Pods whose ServiceAccount
    /// does not exist; kube-controller-manager would create `default`.
    fn ensure_default_service_account(&self) -> anyhow::Result<()> {
        wait_until(
            "the default namespace and ServiceAccount",
            STARTUP_TIMEOUT,
            Duration::from_millis(250),
            || {
                let output = self
                    .kubectl()
                    .args(["create", "serviceaccount", "default", "-n", "default"])
                    .output()
                    .context("running kubectl create serviceaccount")?;
                let stderr = String::from_utf8_lossy(&output.stderr);
                Ok(
                    if output.status.success() || stderr.contains("AlreadyExists") {
                        Ok(())
                    } else {
                        Err(stderr.trim().to_owned())
                    },
                )
            },
        )
    }

    /// Creates `manifest` (a v1 Pod, JSON) through the apiserver with
    /// kubectl; returns its namespace, name and uid.
    pub fn create_pod(&self, manifest: &Value) -> anyhow::Result<CreatedPod> {
        match self.try_create_pod(manifest, &[])? {
            PodCreation::Created { pod, .. } => Ok(pod),
            PodCreation::Refused { error } => bail!("kubectl create pod failed: {error}"),
        }
    }

    /// Creates `manifest` (a v1 Pod, JSON) with a POST over HTTP/1.1 and
    /// TLS as clients other than Go's talk to the apiserver (the official
    /// Python client, curl): `curl --http1.1` with the admin's certificate.
    pub fn create_pod_http1(&self, manifest: &Value) -> anyhow::Result<CreatedPod> {
        let namespace = manifest["metadata"]["namespace"]
            .as_str()
            .context("the manifest names no namespace")?;
        let file = self.dir.path().join("pod-http1.json");
        fs::write(&file, manifest.to_string())
            .with_context(|| format!("writing {}", file.display()))?;
        let output = Command::new("curl")
            .args(["--http1.1", "--silent", "--show-error", "--fail-with-body"])
            .arg("--cacert")
            .arg(&self.ca_cert)
            .arg("--cert")
            .arg(&self.admin.0)
            .arg("--key")
            .arg(&self.admin.1)
            .args(["--header", "Content-Type: application/json"])
            .arg("--data-binary")
            .arg(format!("@{}", file.display()))
            .arg(format!(
                "{}/api/v1/namespaces/{namespace}/pods",
                self.server
            ))
            .output()
            .context("running curl (Debian package curl)")?;
        if !output.status.success() {
            bail!(
                "curl's POST of the Pod failed: {} {}",
                String::from_utf8_lossy(&output.stderr).trim(),
                String::from_utf8_lossy(&output.stdout).trim()
            );
        }
        let object: Value =
            serde_json::from_slice(&output.stdout).context("parsing the apiserver's answer")?;
        Ok(CreatedPod::from_object(&object))
    }

    /// Creates every manifest (v1 Pods, JSON) at once, one `kubectl create`
    /// each started before any is awaited, as a burst of creations reaches
    /// a cluster; returns them in order.
    pub fn create_pods_at_once(&self, manifests: &[Value]) -> anyhow::Result<Vec<CreatedPod>> {
        let mut children = Vec::new();
        for (index, manifest) in manifests.iter().enumerate() {
            let file = self.dir.path().join(format!("burst-{index}.json"));
            fs::write(&file, manifest.to_string())
                .with_context(|| format!("writing {}", file.display()))?;
            let child = self
                .kubectl()
                .args(["create", "-o", "json", "-f"])
                .arg(&file)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .context("running kubectl create")?;
            children.push(child);
        }
        children
            .into_iter()
            .map(|child| {
                let output = child
                    .wait_with_output()
                    .context("waiting for kubectl create")?;
                if !output.status.success() {
                    bail!(
                        "kubectl create pod failed: {}",
                        String::from_utf8_lossy(&output.stderr).trim()
                    );
                }
                let object: Value = serde_json::from_slice(&output.stdout)
                    .context("parsing kubectl create's output")?;
                Ok(CreatedPod::from_object(&object))
            })
            .collect()
    }

    /// `kubectl create -o json -f MANIFEST EXTRA_ARGS…` of a v1 Pod: what
    /// was created, with the apiserver's warnings, or kubectl's error when
    /// it was refused. Fails only when kubectl cannot run or its output
    /// cannot be read.
    pub fn try_create_pod(
        &self,
        manifest: &Value,
        extra_args: &[&str],
    ) -> anyhow::Result<PodCreation> {
        let file = self.dir.path().join("pod.json");
        fs::write(&file, manifest.to_string())
            .with_context(|| format!("writing {}", file.display()))?;
        let output = self
            .kubectl()
            .args(["create", "-o", "json", "-f"])
            .arg(&file)
            .args(extra_args)
            .output()
            .context("running kubectl create")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Ok(PodCreation::Refused {
                error: stderr.trim().to_owned(),
            });
        }
        let object: Value =
            serde_json::from_slice(&output.stdout).context("parsing kubectl create's output")?;
        let warnings = stderr
            .lines()
            .filter_map(|line| line.trim().strip_prefix("Warning: "))
            .map(str::to_owned)
            .collect();
        Ok(PodCreation::Created {
            pod: CreatedPod::from_object(&object),
            object,
            warnings,
        })
    }

    /// Creates namespace `name` with `labels` (`pod-security.kubernetes.io/…`
    /// for example) and its `default` ServiceAccount (nothing else would:
    /// there is no kube-controller-manager).
    pub fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<()> {
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": labels
                    .iter()
                    .map(|(key, value)| ((*key).to_owned(), Value::from(*value)))
                    .collect::<serde_json::Map<_, _>>(),
            },
        });
        let file = self.dir.path().join(format!("namespace-{name}.json"));
        fs::write(&file, manifest.to_string())
            .with_context(|| format!("writing {}", file.display()))?;
        kubectl_output(
            self.kubectl().args(["create", "-f"]).arg(&file),
            "create namespace",
        )?;
        kubectl_output(
            self.kubectl()
                .args(["create", "serviceaccount", "default", "-n", name]),
            "create serviceaccount",
        )?;
        Ok(())
    }

    /// Reads the Pod every half second until `done` returns `Some` for it
    /// (or `timeout` passes: then fails with `what` and the Pod's
    /// description); returns that value and the Pod as JSON.
    pub fn wait_pod<T>(
        &self,
        pod: &CreatedPod,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Value) -> Option<T>,
    ) -> anyhow::Result<(T, Value)> {
        let mut last = Value::Null;
        let mut found = None;
        let waited = wait_until(what, timeout, Duration::from_millis(500), || {
            let output = kubectl_output(
                self.kubectl()
                    .args(["get", "pod", "-o", "json", "-n", &pod.namespace, &pod.name]),
                "get pod",
            )?;
            last =
                serde_json::from_slice(&output.stdout).context("parsing kubectl get's output")?;
            Ok(match done(&last) {
                Some(value) => {
                    found = Some(value);
                    Ok(())
                }
                None => Err(format!("phase {}", last["status"]["phase"])),
            })
        });
        match (waited, found) {
            (Ok(()), Some(value)) => Ok((value, last)),
            (waited, _) => Err(waited.err().unwrap_or_else(|| anyhow::anyhow!("{what}")))
                .with_context(|| {
                    format!(
                        "Pod {}/{}:\n{}",
                        pod.namespace,
                        pod.name,
                        self.describe_pod(pod)
                    )
                }),
        }
    }

    fn describe_pod(&self, pod: &CreatedPod) -> String {
        self.kubectl()
            .args(["describe", "pod", "-n", &pod.namespace, &pod.name])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Starts another kube-scheduler (the same binary) whose one profile is
    /// `scheduler_name`, without leader election, on its own port; Pods
    /// with that `schedulerName` are its. It is stopped with the rest.
    ///
    /// Call it from a thread that outlives the control plane.
    pub fn start_second_scheduler(&mut self, scheduler_name: &str) -> anyhow::Result<()> {
        if self
            .extra_schedulers
            .iter()
            .any(|scheduler| scheduler.name == scheduler_name)
        {
            return Ok(());
        }
        let started = Instant::now();
        let file_name: String = scheduler_name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let config = self
            .dir
            .path()
            .join(format!("kube-scheduler-{file_name}.json"));
        // kubescheduler.config.k8s.io/v1 is served by kube-scheduler 1.25+.
        let configuration = json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": self.scheduler_kubeconfig},
            "leaderElection": {"leaderElect": false},
            "profiles": [{"schedulerName": scheduler_name}],
        });
        write_file(&config, configuration.to_string().as_bytes())?;
        let mut command = Command::new(self.bin_dir.join("kube-scheduler"));
        command
            .arg(format!("--config={}", config.display()))
            .arg(format!(
                "--authentication-kubeconfig={}",
                self.scheduler_kubeconfig.display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                self.scheduler_kubeconfig.display()
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_loopback_port()?));
        let process = Supervised::spawn(
            "kube-scheduler",
            &mut command,
            &self
                .dir
                .path()
                .join(format!("kube-scheduler-{file_name}.log")),
        )?;
        note(format_args!(
            "second kube-scheduler {scheduler_name:?} (pid {}) started in {:?}",
            process.pid(),
            started.elapsed()
        ));
        self.extra_schedulers.push(ExtraScheduler {
            name: scheduler_name.to_owned(),
            process,
        });
        Ok(())
    }

    /// The log of the scheduler started as `scheduler_name`, its last lines.
    pub fn scheduler_log_tail(&self, scheduler_name: &str) -> Option<String> {
        self.extra_schedulers
            .iter()
            .find(|scheduler| scheduler.name == scheduler_name)
            .map(|scheduler| scheduler.process.log_tail())
    }

    /// Waits until the Pod's phase is Running; returns the Pod as JSON.
    pub fn wait_running(&self, pod: &CreatedPod, timeout: Duration) -> anyhow::Result<Value> {
        kubectl_output(
            self.kubectl()
                .args(["wait", "-n", &pod.namespace])
                .arg(format!("pod/{}", pod.name))
                .arg("--for=jsonpath={.status.phase}=Running")
                .arg(format!("--timeout={}s", timeout.as_secs().max(1))),
            "wait for Running",
        )
        .with_context(|| {
            let describe = self
                .kubectl()
                .args(["describe", "pod", "-n", &pod.namespace, &pod.name])
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
                .unwrap_or_default();
            format!("Pod {}/{}:\n{describe}", pod.namespace, pod.name)
        })?;
        let output = kubectl_output(
            self.kubectl()
                .args(["get", "pod", "-o", "json", "-n", &pod.namespace, &pod.name]),
            "get pod",
        )?;
        serde_json::from_slice(&output.stdout).context("parsing kubectl get's output")
    }

    /// Creates Deployment `name` in `namespace` with no replicas, its Pods
    /// made from `pod` (a Pod manifest: its labels, which select them, and
    /// spec), then scales it to `replicas`, as an operator scaling up does:
    /// the ReplicaSet controller creates them at once. Returns them once all
    /// exist (not yet Running).
    pub fn deploy(
        &self,
        namespace: &str,
        name: &str,
        pod: &Value,
        replicas: u32,
    ) -> anyhow::Result<Vec<CreatedPod>> {
        let labels = pod["metadata"]["labels"].clone();
        let deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
            },
        });
        let file = self.dir.path().join(format!("deployment-{name}.json"));
        write_file(&file, deployment.to_string().as_bytes())?;
        kubectl_output(
            self.kubectl().args(["create", "-f"]).arg(&file),
            "create deployment",
        )?;
        self.scale(namespace, name, replicas)?;
        let selector = selector(&labels);
        wait_until(
            &format!("the {replicas} Pods of Deployment {namespace}/{name}"),
            Duration::from_secs(60),
            Duration::from_millis(200),
            || {
                let pods = self.pods(namespace, &selector)?;
                if pods.len() == replicas as usize {
                    Ok(Ok(pods))
                } else {
                    Ok(Err(format!("{} Pods", pods.len())))
                }
            },
        )
    }

    /// Scales Deployment `namespace/name` to no replicas and waits until the
    /// ReplicaSet controller's deletions are done: the Pods with `pod`'s
    /// labels are gone.
    pub fn scale_to_zero(&self, namespace: &str, name: &str, pod: &Value) -> anyhow::Result<()> {
        self.scale(namespace, name, 0)?;
        let selector = selector(&pod["metadata"]["labels"]);
        wait_until(
            &format!("the Pods of Deployment {namespace}/{name} to be gone"),
            Duration::from_secs(90),
            Duration::from_millis(500),
            || {
                let left = self.pods(namespace, &selector)?.len();
                Ok(if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} Pods left"))
                })
            },
        )
    }

    fn scale(&self, namespace: &str, name: &str, replicas: u32) -> anyhow::Result<()> {
        kubectl_output(
            self.kubectl()
                .args(["scale", "-n", namespace])
                .arg(format!("deployment/{name}"))
                .arg(format!("--replicas={replicas}")),
            "scale deployment",
        )
        .map(|_| ())
    }

    /// The Pods of `namespace` with label `selector`.
    fn pods(&self, namespace: &str, selector: &str) -> anyhow::Result<Vec<CreatedPod>> {
        let output = kubectl_output(
            self.kubectl()
                .args(["get", "pods", "-o", "json", "-n", namespace, "-l", selector]),
            "get pods",
        )?;
        let list: Value =
            serde_json::from_slice(&output.stdout).context("parsing kubectl get's output")?;
        Ok(list["items"]
            .as_array()
            .map(|items| items.iter().map(CreatedPod::from_object).collect())
            .unwrap_or_default())
    }

    /// Deletes the Pods of `namespace` with label `selector` and waits until
    /// the kubelet has stopped them and they are gone.
    pub fn delete_pods(&self, namespace: &str, selector: &str) -> anyhow::Result<()> {
        kubectl_output(
            self.kubectl()
                .args(["delete", "pod", "-n", namespace, "-l", selector])
                .args(["--wait=true", "--timeout=90s"]),
            "delete pods",
        )
        .map(|_| ())
    }

    fn teardown(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(mut kubelet) = self.kubelet.take() {
            kubelet.stop(Duration::from_secs(10));
        }
        for mut scheduler in self.extra_schedulers.drain(..) {
            scheduler.process.stop(Duration::from_secs(10));
        }
        for process in [
            &mut self.kubelet,
            &mut self.controller_manager,
            &mut self.scheduler,
            &mut self.apiserver,
        ] {
            if let Some(mut process) = process.take() {
                process.stop(Duration::from_secs(10));
            }
        }
        for (key, value) in &self.saved_sysctls {
            let path = Path::new("/proc/sys").join(key);
            let now = fs::read_to_string(&path).unwrap_or_default();
            if now.trim() == value {
                continue;
            }
            if let Err(err) = fs::write(&path, value) {
                problems.push(format!("restoring {} to {value}: {err}", path.display()));
            }
        }
        for mount in leftovers::mounts_under(&self.kubelet_root) {
            let Ok(path) = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes()) else {
                continue;
            };
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
        for entry in pod_log_entries() {
            if self.log_entries_before.contains(&entry) {
                continue;
            }
            let removed = if entry.is_symlink() || entry.is_file() {
                fs::remove_file(&entry)
            } else {
                fs::remove_dir_all(&entry)
            };
            if let Err(err) = removed {
                problems.push(format!("removing {}: {err}", entry.display()));
            }
        }
        // The directories themselves, when the kubelet made them (only if
        // empty: anything else in them is not ours).
        for (dir, existed) in POD_LOG_DIRS.iter().zip(&self.log_dirs_before) {
            if !existed {
                let _ = fs::remove_dir(dir);
            }
        }
        problems
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let started = Instant::now();
        let problems = self.teardown();
        if problems.is_empty() {
            note(format_args!(
                "kubelet, kube-controller-manager, kube-scheduler and kube-apiserver stopped and cleaned up in {:?}",
                started.elapsed()
            ));
        } else {
            note(format_args!(
                "control plane teardown: {}",
                problems.join("; ")
            ));
        }
    }
}

/// A label selector matching every label of `labels` (a JSON object).
fn selector(labels: &Value) -> String {
    labels
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Runs kubectl; fails with its stderr unless it succeeds.
fn kubectl_output(command: &mut Command, what: &str) -> anyhow::Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("running kubectl {what}"))?;
    if !output.status.success() {
        bail!(
            "kubectl {what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

/// The entries of the kubelet's fixed log directories.
fn pod_log_entries() -> Vec<PathBuf> {
    POD_LOG_DIRS
        .iter()
        .filter_map(|dir| fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten().map(|entry| entry.path()))
        .collect()
}

/// Creates cgroup `path` in every mounted hierarchy (v1 controllers, v2).
fn create_cgroup(path: &str) -> anyhow::Result<()> {
    let relative = path.trim_start_matches('/');
    let mounts = fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [_, point, "cgroup" | "cgroup2", ..] = fields[..] {
            let dir = Path::new(point).join(relative);
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    Ok(())
}

/// A kubeconfig for `server` with a client certificate, as JSON (which
/// every kubeconfig reader takes, being YAML).
fn kubeconfig_json(server: &str, ca_cert: &Path, (cert, key): &(PathBuf, PathBuf)) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "podtrace", "cluster": {
            "server": server,
            "certificate-authority": ca_cert,
        }}],
        "users": [{"name": "podtrace", "user": {
            "client-certificate": cert,
            "client-key": key,
        }}],
        "contexts": [{"name": "podtrace", "context": {"cluster": "podtrace", "user": "podtrace"}}],
        "current-context": "podtrace",
    })
    .to_string()
}

/// The KubeletConfiguration (see the module docs for the choices).
fn kubelet_config(
    pki: &ClusterPki,
    containerd: &Containerd,
    port: u16,
    healthz_port: u16,
) -> Value {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": format!("unix://{}", containerd.socket().display()),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": containerd.cgroup_root(),
        "failSwapOn": false,
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "tlsCertFile": pki.kubelet_serving.0,
        "tlsPrivateKeyFile": pki.kubelet_serving.1,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": pki.ca_cert},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "makeIPTablesUtilChains": false,
        "registerNode": true,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": false,
        "nodeStatusUpdateFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "resolvConf": "/etc/resolv.conf",
    })
}

impl ClusterPki {
    fn generate(dir: &Path, node_name: &str) -> anyhow::Result<Self> {
        let ca_key = KeyPair::generate().context("generating the cluster CA key")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "podtrace cluster CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .context("self-signing the cluster CA")?;
        let ca_cert_path = dir.join("ca.crt");
        write_file(&ca_cert_path, ca_cert.pem().as_bytes())?;
        let issuer = Issuer::new(ca_params, ca_key);
        let client = |file: &str, common_name: &str, organization: Option<&str>| {
            issue(dir, file, &issuer, common_name, organization, &[], false)
        };
        let apiserver = issue(
            dir,
            "apiserver",
            &issuer,
            "kube-apiserver",
            None,
            &[
                "127.0.0.1",
                "localhost",
                KUBERNETES_SERVICE_IP,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            true,
        )?;
        let service_account = KeyPair::generate().context("generating the service-account key")?;
        let service_account_key = dir.join("service-account.key");
        write_private(
            &service_account_key,
            service_account.serialize_pem().as_bytes(),
        )?;
        // kube-apiserver reads public keys from `--service-account-key-file`.
        let service_account_public_key = dir.join("service-account.pub");
        write_file(
            &service_account_public_key,
            service_account.public_key_pem().as_bytes(),
        )?;
        Ok(Self {
            ca_cert: ca_cert_path,
            apiserver,
            apiserver_kubelet_client: client(
                "apiserver-kubelet-client",
                "kube-apiserver-kubelet-client",
                Some("system:masters"),
            )?,
            admin: client("admin", "podtrace-admin", Some("system:masters"))?,
            scheduler: client("scheduler", "system:kube-scheduler", None)?,
            kubelet: client(
                "kubelet",
                &format!("system:node:{node_name}"),
                Some("system:nodes"),
            )?,
            kubelet_serving: issue(
                dir,
                "kubelet-serving",
                &issuer,
                &format!("system:node:{node_name}"),
                Some("system:nodes"),
                &[node_name, "127.0.0.1", "localhost"],
                true,
            )?,
            service_account_key,
            service_account_public_key,
        })
    }
}

/// Issues `<file>.crt` and `<file>.key` (0600) signed by `issuer`.
fn issue(
    dir: &Path,
    file: &str,
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    organization: Option<&str>,
    subject_alt_names: &[&str],
    server: bool,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let key = KeyPair::generate().with_context(|| format!("generating the key for {file}"))?;
    let sans: Vec<String> = subject_alt_names.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans)
        .with_context(|| format!("certificate parameters for {file}"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .signed_by(&key, issuer)
        .with_context(|| format!("signing the certificate {file}"))?;
    let paths = (
        dir.join(format!("{file}.crt")),
        dir.join(format!("{file}.key")),
    );
    write_file(&paths.0, cert.pem().as_bytes())?;
    write_private(&paths.1, key.serialize_pem().as_bytes())?;
    Ok(paths)
}
