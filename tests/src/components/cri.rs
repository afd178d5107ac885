//! A small CRI client (Kubernetes `runtime.v1`, gRPC over a unix socket)
//! that plays the kubelet against a real containerd.
//!
//! In: the CRI socket path and a [`PodTemplate`] (log root, cgroup root,
//! workload image and command). Out: typed calls — Version, RunPodSandbox,
//! PodSandboxStatus, ImageStatus, CreateContainer, StartContainer,
//! ContainerStatus, StopContainer, RemoveContainer, ListPodSandbox,
//! StopPodSandbox, RemovePodSandbox — and
//! [`CriClient::create_pod`], which makes the kubelet's calls for a
//! one-container Pod of Pod Security's `restricted` profile.
//!
//! The messages in [`api`] are written by hand with prost's derive, with
//! the field numbers of the upstream `runtime.v1` proto (cri-api
//! `pkg/apis/runtime/v1/api.proto`) and only the fields used here: decoding
//! skips the others. That avoids generating code with `protoc` at build
//! time (the `k8s-cri` crate does), which build machines need not have.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use hyper_util::rt::TokioIo;
use tonic::{
    codegen::http::uri::PathAndQuery,
    transport::{Channel, Endpoint, Uri},
};

/// The `runtime.v1` messages used here (a subset of their fields).
pub mod api {
    use std::collections::HashMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct VersionRequest {
        #[prost(string, tag = "1")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct VersionResponse {
        #[prost(string, tag = "1")]
        pub version: String,
        #[prost(string, tag = "2")]
        pub runtime_name: String,
        #[prost(string, tag = "3")]
        pub runtime_version: String,
        #[prost(string, tag = "4")]
        pub runtime_api_version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub uid: String,
        #[prost(string, tag = "3")]
        pub namespace: String,
        #[prost(uint32, tag = "4")]
        pub attempt: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<PodSandboxMetadata>,
        #[prost(string, tag = "2")]
        pub hostname: String,
        #[prost(string, tag = "3")]
        pub log_directory: String,
        #[prost(map = "string, string", tag = "6")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "7")]
        pub annotations: HashMap<String, String>,
        #[prost(message, optional, tag = "8")]
        pub linux: Option<LinuxPodSandboxConfig>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxPodSandboxConfig {
        #[prost(string, tag = "1")]
        pub cgroup_parent: String,
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxSandboxSecurityContext>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxSandboxSecurityContext {
        #[prost(message, optional, tag = "1")]
        pub namespace_options: Option<NamespaceOption>,
        #[prost(message, optional, tag = "3")]
        pub run_as_user: Option<Int64Value>,
        #[prost(bool, tag = "6")]
        pub privileged: bool,
        #[prost(message, optional, tag = "9")]
        pub seccomp: Option<SecurityProfile>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Int64Value {
        #[prost(int64, tag = "1")]
        pub value: i64,
    }

    /// `ProfileType`: RuntimeDefault = 0, Unconfined = 1, Localhost = 2.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SecurityProfile {
        #[prost(int32, tag = "1")]
        pub profile_type: i32,
        #[prost(string, tag = "2")]
        pub localhost_ref: String,
    }

    /// `SecurityProfile.ProfileType.RuntimeDefault`.
    pub const PROFILE_RUNTIME_DEFAULT: i32 = 0;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Capability {
        #[prost(string, repeated, tag = "1")]
        pub add_capabilities: Vec<String>,
        #[prost(string, repeated, tag = "2")]
        pub drop_capabilities: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerSecurityContext {
        #[prost(message, optional, tag = "1")]
        pub capabilities: Option<Capability>,
        #[prost(bool, tag = "2")]
        pub privileged: bool,
        #[prost(message, optional, tag = "3")]
        pub namespace_options: Option<NamespaceOption>,
        #[prost(message, optional, tag = "5")]
        pub run_as_user: Option<Int64Value>,
        #[prost(bool, tag = "11")]
        pub no_new_privs: bool,
        #[prost(message, optional, tag = "15")]
        pub seccomp: Option<SecurityProfile>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerConfig {
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxContainerSecurityContext>,
    }

    /// `NamespaceMode`: POD = 0, CONTAINER = 1, NODE = 2, TARGET = 3.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamespaceOption {
        #[prost(int32, tag = "1")]
        pub network: i32,
        #[prost(int32, tag = "2")]
        pub pid: i32,
        #[prost(int32, tag = "3")]
        pub ipc: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxRequest {
        #[prost(message, optional, tag = "1")]
        pub config: Option<PodSandboxConfig>,
        #[prost(string, tag = "2")]
        pub runtime_handler: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxResponse {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxIdRequest {
        /// `pod_sandbox_id` of StopPodSandboxRequest and RemovePodSandboxRequest.
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Empty {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxStatusRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
        #[prost(bool, tag = "2")]
        pub verbose: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxStatusResponse {
        #[prost(message, optional, tag = "1")]
        pub status: Option<PodSandboxStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxStatus {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(message, optional, tag = "2")]
        pub metadata: Option<PodSandboxMetadata>,
        /// SANDBOX_READY = 0, SANDBOX_NOTREADY = 1.
        #[prost(int32, tag = "3")]
        pub state: i32,
        #[prost(int64, tag = "4")]
        pub created_at: i64,
        #[prost(message, optional, tag = "5")]
        pub network: Option<PodSandboxNetworkStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxNetworkStatus {
        #[prost(string, tag = "1")]
        pub ip: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxRequest {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxResponse {
        #[prost(message, repeated, tag = "1")]
        pub items: Vec<PodSandbox>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandbox {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(message, optional, tag = "2")]
        pub metadata: Option<PodSandboxMetadata>,
        /// SANDBOX_READY = 0, SANDBOX_NOTREADY = 1.
        #[prost(int32, tag = "3")]
        pub state: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageSpec {
        /// The image: its reference, or (as the kubelet sends it in
        /// CreateContainer) the id the runtime resolved it to.
        #[prost(string, tag = "1")]
        pub image: String,
        /// CreateContainer: the reference the Pod spec names (kubelet 1.30+).
        #[prost(string, tag = "18")]
        pub user_specified_image: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageStatusRequest {
        #[prost(message, optional, tag = "1")]
        pub image: Option<ImageSpec>,
        #[prost(bool, tag = "2")]
        pub verbose: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageStatusResponse {
        #[prost(message, optional, tag = "1")]
        pub image: Option<Image>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Image {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(string, repeated, tag = "2")]
        pub repo_tags: Vec<String>,
        #[prost(uint64, tag = "4")]
        pub size: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(uint32, tag = "2")]
        pub attempt: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ContainerMetadata>,
        #[prost(message, optional, tag = "2")]
        pub image: Option<ImageSpec>,
        #[prost(string, repeated, tag = "3")]
        pub command: Vec<String>,
        #[prost(string, repeated, tag = "4")]
        pub args: Vec<String>,
        #[prost(map = "string, string", tag = "9")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "10")]
        pub annotations: HashMap<String, String>,
        #[prost(string, tag = "11")]
        pub log_path: String,
        #[prost(message, optional, tag = "15")]
        pub linux: Option<LinuxContainerConfig>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
        #[prost(message, optional, tag = "2")]
        pub config: Option<ContainerConfig>,
        #[prost(message, optional, tag = "3")]
        pub sandbox_config: Option<PodSandboxConfig>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerResponse {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerIdRequest {
        /// `container_id` of StartContainerRequest and RemoveContainerRequest.
        #[prost(string, tag = "1")]
        pub container_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopContainerRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        /// Seconds between the stop signal and SIGKILL; 0 kills at once.
        #[prost(int64, tag = "2")]
        pub timeout: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatusRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(bool, tag = "2")]
        pub verbose: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatusResponse {
        #[prost(message, optional, tag = "1")]
        pub status: Option<ContainerStatus>,
        /// With `verbose`: containerd puts a JSON document under `info`,
        /// with the container's `pid` among others.
        #[prost(map = "string, string", tag = "2")]
        pub info: HashMap<String, String>,
    }

    /// `ContainerState`: CREATED = 0, RUNNING = 1, EXITED = 2, UNKNOWN = 3.
    pub const CONTAINER_RUNNING: i32 = 1;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatus {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(message, optional, tag = "2")]
        pub metadata: Option<ContainerMetadata>,
        #[prost(int32, tag = "3")]
        pub state: i32,
        #[prost(int64, tag = "5")]
        pub started_at: i64,
        #[prost(int32, tag = "7")]
        pub exit_code: i32,
        #[prost(string, tag = "9")]
        pub image_ref: String,
        #[prost(string, tag = "10")]
        pub reason: String,
        #[prost(string, tag = "11")]
        pub message: String,
        #[prost(string, tag = "15")]
        pub log_path: String,
    }
}

const RUNTIME: &str = "/runtime.v1.RuntimeService/";
const IMAGES: &str = "/runtime.v1.ImageService/";
/// A bound on every call; RunPodSandbox (runc plus CNI) is the slowest and
/// takes well under a second here.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The uid the Pods' container runs as ([`restricted_container_security`]).
pub const RUN_AS_USER: i64 = 1000;
/// The capabilities the Pods' container drops.
pub const CAPABILITIES_DROPPED: [&str; 1] = ["ALL"];
/// The capabilities the Pods' container adds: the one Pod Security's
/// `restricted` profile allows.
pub const CAPABILITIES_ADDED: [&str; 1] = ["NET_BIND_SERVICE"];

/// The kubelet's defaults: network and IPC per Pod, PID per container.
fn pod_namespaces() -> api::NamespaceOption {
    api::NamespaceOption {
        network: 0,
        pid: 1,
        ipc: 0,
    }
}

fn runtime_default() -> api::SecurityProfile {
    api::SecurityProfile {
        profile_type: api::PROFILE_RUNTIME_DEFAULT,
        localhost_ref: String::new(),
    }
}

/// The container security context the kubelet sends for a container of
/// Pod Security's `restricted` profile (as
/// [`apiserver_role::new_pod`](super::apiserver_role::new_pod) specifies
/// it): all capabilities dropped but NET_BIND_SERVICE, a non-root uid, no
/// privilege escalation (`no_new_privs`), the runtime's default seccomp
/// profile, not privileged.
pub fn restricted_container_security() -> api::LinuxContainerSecurityContext {
    let names = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
    api::LinuxContainerSecurityContext {
        capabilities: Some(api::Capability {
            add_capabilities: names(&CAPABILITIES_ADDED),
            drop_capabilities: names(&CAPABILITIES_DROPPED),
        }),
        privileged: false,
        namespace_options: Some(pod_namespaces()),
        run_as_user: Some(api::Int64Value { value: RUN_AS_USER }),
        no_new_privs: true,
        seccomp: Some(runtime_default()),
    }
}

/// What the kubelet-like calls of [`CriClient::create_pod`] put in a Pod.
#[derive(Debug, Clone)]
pub struct PodTemplate {
    /// Pod log directories go under it (`<ns>_<name>_<uid>`, as kubelet's
    /// `/var/log/pods`).
    pub log_root: PathBuf,
    /// The cgroup parent root (kubelet's `--cgroup-root`); a Pod's cgroup
    /// parent is `<root>/kubepods/besteffort/pod<uid>` (cgroupfs driver).
    pub cgroup_root: String,
    pub image: String,
    pub command: Vec<String>,
}

/// The ids the runtime gave a Pod created by [`CriClient::create_pod`].
#[derive(Debug, Clone)]
pub struct PodHandles {
    pub sandbox_id: String,
    pub container_id: String,
}

/// A CRI client on one HTTP/2 connection (reconnected by tonic if dropped).
#[derive(Debug, Clone)]
pub struct CriClient {
    channel: Channel,
    socket: PathBuf,
    template: PodTemplate,
}

impl CriClient {
    /// Connects to the CRI socket at `socket`.
    pub async fn connect(socket: &Path, template: PodTemplate) -> anyhow::Result<Self> {
        let path = socket.to_owned();
        // The URI is required by tonic but unused: the connector below
        // always dials the unix socket (the kubelet does the same).
        let channel = Endpoint::from_static("http://localhost")
            .timeout(CALL_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .with_context(|| format!("connecting to the CRI socket {}", socket.display()))?;
        Ok(Self {
            channel,
            socket: socket.to_owned(),
            template,
        })
    }

    async fn call<Req, Resp>(&self, method: &str, request: Req) -> anyhow::Result<Resp>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let context = || format!("CRI {method} on {}", self.socket.display());
        grpc.ready().await.with_context(context)?;
        let path = PathAndQuery::try_from(method.to_owned()).with_context(context)?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let response = grpc
            .unary(tonic::Request::new(request), path, codec)
            .await
            .with_context(context)?;
        Ok(response.into_inner())
    }

    pub async fn version(&self) -> anyhow::Result<api::VersionResponse> {
        let request = api::VersionRequest {
            version: "v1".to_owned(),
        };
        self.call(&format!("{RUNTIME}Version"), request).await
    }

    /// RunPodSandbox; returns the sandbox id.
    pub async fn run_pod_sandbox(&self, config: &api::PodSandboxConfig) -> anyhow::Result<String> {
        self.run_pod_sandbox_with(config, "").await
    }

    /// RunPodSandbox with a RuntimeClass handler (`""`: containerd's
    /// default runtime); returns the sandbox id.
    pub async fn run_pod_sandbox_with(
        &self,
        config: &api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> anyhow::Result<String> {
        let request = api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: runtime_handler.to_owned(),
        };
        let response: api::RunPodSandboxResponse = self
            .call(&format!("{RUNTIME}RunPodSandbox"), request)
            .await?;
        Ok(response.pod_sandbox_id)
    }

    /// PodSandboxStatus (not verbose): state and the Pod's IP.
    pub async fn pod_sandbox_status(
        &self,
        sandbox_id: &str,
    ) -> anyhow::Result<api::PodSandboxStatus> {
        let request = api::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            verbose: false,
        };
        let response: api::PodSandboxStatusResponse = self
            .call(&format!("{RUNTIME}PodSandboxStatus"), request)
            .await?;
        response
            .status
            .with_context(|| format!("PodSandboxStatus of {sandbox_id} has no status"))
    }

    pub async fn stop_pod_sandbox(&self, sandbox_id: &str) -> anyhow::Result<()> {
        let request = api::PodSandboxIdRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
        };
        let _: api::Empty = self
            .call(&format!("{RUNTIME}StopPodSandbox"), request)
            .await?;
        Ok(())
    }

    pub async fn remove_pod_sandbox(&self, sandbox_id: &str) -> anyhow::Result<()> {
        let request = api::PodSandboxIdRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
        };
        let _: api::Empty = self
            .call(&format!("{RUNTIME}RemovePodSandbox"), request)
            .await?;
        Ok(())
    }

    pub async fn list_pod_sandboxes(&self) -> anyhow::Result<Vec<api::PodSandbox>> {
        let response: api::ListPodSandboxResponse = self
            .call(
                &format!("{RUNTIME}ListPodSandbox"),
                api::ListPodSandboxRequest {},
            )
            .await?;
        Ok(response.items)
    }

    /// ImageStatus; `None` if the runtime does not have the image. (There is
    /// no PullImage here: containerd's pulls always ask the registry, and
    /// none is reachable; the kubelet, too, skips the pull of an image
    /// present with `imagePullPolicy: IfNotPresent`.)
    pub async fn image_status(&self, image: &str) -> anyhow::Result<Option<api::Image>> {
        let request = api::ImageStatusRequest {
            image: Some(api::ImageSpec {
                image: image.to_owned(),
                user_specified_image: String::new(),
            }),
            verbose: false,
        };
        let response: api::ImageStatusResponse =
            self.call(&format!("{IMAGES}ImageStatus"), request).await?;
        Ok(response.image)
    }

    /// CreateContainer in a sandbox; returns the container id.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: &api::ContainerConfig,
        sandbox_config: &api::PodSandboxConfig,
    ) -> anyhow::Result<String> {
        let request = api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(config.clone()),
            sandbox_config: Some(sandbox_config.clone()),
        };
        let response: api::CreateContainerResponse = self
            .call(&format!("{RUNTIME}CreateContainer"), request)
            .await?;
        Ok(response.container_id)
    }

    pub async fn start_container(&self, container_id: &str) -> anyhow::Result<()> {
        let request = api::ContainerIdRequest {
            container_id: container_id.to_owned(),
        };
        let _: api::Empty = self
            .call(&format!("{RUNTIME}StartContainer"), request)
            .await?;
        Ok(())
    }

    /// StopContainer: the stop signal, then SIGKILL after `timeout_seconds`
    /// (at once with 0).
    pub async fn stop_container(
        &self,
        container_id: &str,
        timeout_seconds: i64,
    ) -> anyhow::Result<()> {
        let request = api::StopContainerRequest {
            container_id: container_id.to_owned(),
            timeout: timeout_seconds,
        };
        let _: api::Empty = self
            .call(&format!("{RUNTIME}StopContainer"), request)
            .await?;
        Ok(())
    }

    pub async fn remove_container(&self, container_id: &str) -> anyhow::Result<()> {
        let request = api::ContainerIdRequest {
            container_id: container_id.to_owned(),
        };
        let _: api::Empty = self
            .call(&format!("{RUNTIME}RemoveContainer"), request)
            .await?;
        Ok(())
    }

    /// ContainerStatus, verbose (so `info` carries containerd's details).
    pub async fn container_status(
        &self,
        container_id: &str,
    ) -> anyhow::Result<api::ContainerStatusResponse> {
        self.container_status_with(container_id, true).await
    }

    /// ContainerStatus; `verbose: false` as the kubelet asks (a verbose
    /// answer carries the container's whole OCI spec — with a seccomp
    /// profile, more than 8 KiB in one write from containerd).
    pub async fn container_status_with(
        &self,
        container_id: &str,
        verbose: bool,
    ) -> anyhow::Result<api::ContainerStatusResponse> {
        let request = api::ContainerStatusRequest {
            container_id: container_id.to_owned(),
            verbose,
        };
        self.call(&format!("{RUNTIME}ContainerStatus"), request)
            .await
    }

    /// The sandbox configuration the kubelet would send for this Pod.
    pub fn sandbox_config(&self, name: &str, namespace: &str, uid: &str) -> api::PodSandboxConfig {
        let labels = HashMap::from([
            ("io.kubernetes.pod.name".to_owned(), name.to_owned()),
            (
                "io.kubernetes.pod.namespace".to_owned(),
                namespace.to_owned(),
            ),
            ("io.kubernetes.pod.uid".to_owned(), uid.to_owned()),
        ]);
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: name.to_owned(),
                uid: uid.to_owned(),
                namespace: namespace.to_owned(),
                attempt: 0,
            }),
            hostname: name.to_owned(),
            log_directory: self
                .template
                .log_root
                .join(format!("{namespace}_{name}_{uid}"))
                .display()
                .to_string(),
            labels,
            annotations: HashMap::new(),
            linux: Some(api::LinuxPodSandboxConfig {
                cgroup_parent: format!(
                    "{}/kubepods/besteffort/pod{uid}",
                    self.template.cgroup_root
                ),
                security_context: Some(api::LinuxSandboxSecurityContext {
                    namespace_options: Some(pod_namespaces()),
                    // The Pod's `securityContext.seccompProfile`.
                    seccomp: Some(runtime_default()),
                    ..Default::default()
                }),
            }),
        }
    }

    /// Creates a one-container Pod as the kubelet does: RunPodSandbox,
    /// ImageStatus twice (is the image there, then its user), CreateContainer
    /// (container `main`, the template's image and command, the
    /// [`restricted_container_security`] context), StartContainer. The
    /// sandbox asks for the runtime's default seccomp profile.
    pub async fn create_pod(
        &self,
        name: &str,
        namespace: &str,
        uid: &str,
    ) -> anyhow::Result<PodHandles> {
        let sandbox_config = self.sandbox_config(name, namespace, uid);
        // The kubelet creates the Pod's log directory before the sandbox.
        std::fs::create_dir_all(&sandbox_config.log_directory)
            .with_context(|| format!("creating {}", sandbox_config.log_directory))?;
        let sandbox_id = self
            .run_pod_sandbox(&sandbox_config)
            .await
            .with_context(|| format!("creating Pod {namespace}/{name}"))?;
        // The kubelet's image puller (imagePullPolicy IfNotPresent): is the
        // image there? It is (imported; no registry is reachable here), so
        // no PullImage. Then, building the container's config, the image's
        // user (a second ImageStatus, as the kubelet makes it).
        let image = &self.template.image;
        let present = self
            .image_status(image)
            .await
            .with_context(|| format!("asking for the image of Pod {namespace}/{name}"))?
            .with_context(|| {
                format!("the runtime does not have {image}, and there is no registry to pull from")
            })?;
        self.image_status(image)
            .await
            .with_context(|| format!("asking for the image user of Pod {namespace}/{name}"))?;
        let container_name = "main";
        let mut labels = sandbox_config.labels.clone();
        labels.insert(
            "io.kubernetes.container.name".to_owned(),
            container_name.to_owned(),
        );
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: container_name.to_owned(),
                attempt: 0,
            }),
            // As kubelets since 1.30 send it: the id the runtime resolved
            // the image to, and the reference the Pod spec names.
            image: Some(api::ImageSpec {
                image: present.id,
                user_specified_image: image.clone(),
            }),
            command: self.template.command.clone(),
            args: Vec::new(),
            labels,
            annotations: HashMap::new(),
            log_path: format!("{container_name}/0.log"),
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(restricted_container_security()),
            }),
        };
        let container_id = self
            .create_container(&sandbox_id, &config, &sandbox_config)
            .await
            .with_context(|| format!("creating the container of Pod {namespace}/{name}"))?;
        self.start_container(&container_id)
            .await
            .with_context(|| format!("starting the container of Pod {namespace}/{name}"))?;
        Ok(PodHandles {
            sandbox_id,
            container_id,
        })
    }
}
