//! The span contract: every span name and attribute key podtrace exports,
//! defined once.
//!
//! What a user queries in Jaeger or Tempo (a span's name, its attributes) is
//! an interface: dashboards, alerts and `podtrace explain` read it back. Each
//! key is a constant here, each name a constant or a function of its parts,
//! and both lists render the reference in `docs/spans.md` (a test keeps the
//! two equal, another that no other source file spells one of them out).

use super::span::Span;

/// Defines attribute keys as constants, and [`ATTRIBUTES`] listing each with
/// its description, in order.
macro_rules! attributes {
    ($( $(#[doc = $doc:literal])+ $name:ident = $key:literal; )+) => {
        $( $(#[doc = $doc])+ pub const $name: &str = $key; )+
        /// Every attribute key, with its description.
        pub const ATTRIBUTES: &[(&str, &str)] = &[ $( ($key, concat!($($doc),+)) ),+ ];
    };
}

/// Defines span names that never vary as constants, and [`FIXED_NAMES`]
/// listing each with its description.
macro_rules! names {
    ($( $(#[doc = $doc:literal])+ $name:ident = $value:literal; )+) => {
        $( $(#[doc = $doc])+ pub const $name: &str = $value; )+
        /// Every span name that never varies, with its description.
        pub const FIXED_NAMES: &[(&str, &str)] = &[ $( ($value, concat!($($doc),+)) ),+ ];
    };
}

/// Attribute keys. OpenTelemetry's semantic conventions where one fits,
/// podtrace's own under `podtrace.*`. None holds a payload, a credential,
/// Secret data or an environment value.
pub mod attr {
    attributes! {
        /// Resource: `podtrace`.
        SERVICE_NAME = "service.name";
        /// Resource: the agent's version.
        SERVICE_VERSION = "service.version";
        /// Resource: the host the agent runs on.
        HOST_NAME = "host.name";

        /// The Pod's name.
        K8S_POD_NAME = "k8s.pod.name";
        /// The Pod's namespace.
        K8S_NAMESPACE_NAME = "k8s.namespace.name";
        /// The Pod's UID, from which the trace id is derived.
        K8S_POD_UID = "k8s.pod.uid";
        /// The node of the agent that saw the span (the node span: the Pod's node).
        K8S_NODE_NAME = "k8s.node.name";
        /// The Kubernetes component the span happened in: `kube-apiserver`, `kube-scheduler`, `kubelet`.
        K8S_COMPONENT = "k8s.component";
        /// The Pod's phase a status write or update reported.
        K8S_POD_PHASE = "k8s.pod.phase";
        /// The container a CRI call or process belongs to.
        K8S_CONTAINER_NAME = "k8s.container.name";

        /// `grpc` on a gRPC call's spans.
        RPC_SYSTEM = "rpc.system";
        /// The gRPC service, e.g. `runtime.v1.RuntimeService`.
        RPC_SERVICE = "rpc.service";
        /// The gRPC method, e.g. `RunPodSandbox`.
        RPC_METHOD = "rpc.method";
        /// The gRPC status code of a call that answered.
        RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code";
        /// `etcd` on every span etcd's part of a write.
        DB_SYSTEM_NAME = "db.system.name";
        /// The etcd KV method of a write (`Txn`, `Put`).
        DB_OPERATION_NAME = "db.operation.name";

        /// An API request's HTTP method.
        HTTP_REQUEST_METHOD = "http.request.method";
        /// An API request's route, its names as placeholders, e.g. `/api/v1/namespaces/{namespace}/pods`.
        HTTP_ROUTE = "http.route";
        /// An API request's response status.
        HTTP_RESPONSE_STATUS_CODE = "http.response.status_code";
        /// The client's `User-Agent`: what it claims to be.
        USER_AGENT_ORIGINAL = "user_agent.original";
        /// The client's address, as the apiserver's socket saw it.
        CLIENT_ADDRESS = "client.address";

        /// A process's pid (runc, the shim, a CNI plugin, the container's first process).
        PROCESS_PID = "process.pid";
        /// A process's executable.
        PROCESS_EXECUTABLE_NAME = "process.executable.name";
        /// A process's exit code.
        PROCESS_EXIT_CODE = "process.exit.code";
        /// The container (or sandbox) id.
        CONTAINER_ID = "container.id";
        /// The image a container runs, as the Pod names it.
        CONTAINER_IMAGE_NAME = "container.image.name";
        /// The image's id, as the runtime resolved it.
        CONTAINER_IMAGE_ID = "container.image.id";
        /// The container runs privileged.
        CONTAINER_SECURITY_PRIVILEGED = "container.security.privileged";
        /// Capabilities added to the container's, comma-separated.
        CONTAINER_SECURITY_CAPABILITIES_ADDED = "container.security.capabilities.added";
        /// Capabilities dropped from the container's, comma-separated.
        CONTAINER_SECURITY_CAPABILITIES_DROPPED = "container.security.capabilities.dropped";
        /// The user the container's process runs as.
        CONTAINER_SECURITY_RUN_AS_USER = "container.security.run_as_user";
        /// The container's seccomp profile.
        CONTAINER_SECURITY_SECCOMP = "container.security.seccomp";
        /// The container's AppArmor profile.
        CONTAINER_SECURITY_APPARMOR = "container.security.apparmor";

        /// On the root: whether every phase of the creation was seen.
        TRACE_COMPLETE = "podtrace.trace.complete";
        /// On an incomplete root: the phase the Pod was last seen in.
        TRACE_STUCK_PHASE = "podtrace.trace.stuck_phase";

        /// What an etcd write did to the Pod: `created`, `bound to NODE`, `status PHASE`, `updated`, `deleted`.
        K8S_POD_CHANGE = "podtrace.k8s.pod.change";
        /// The user the apiserver authenticated.
        K8S_USER = "podtrace.k8s.user";
        /// The API request's verb (`create`, `patch`, …).
        K8S_VERB = "podtrace.k8s.verb";
        /// The create was a dry run: nothing stored.
        K8S_DRY_RUN = "podtrace.k8s.dry_run";
        /// The `Warning` headers the apiserver answered with.
        K8S_WARNINGS = "podtrace.k8s.warnings";
        /// The authorizer's decision.
        K8S_AUTHZ_DECISION = "podtrace.k8s.authz.decision";
        /// The authorizer's reason, when it gave one.
        K8S_AUTHZ_REASON = "podtrace.k8s.authz.reason";
        /// The admission webhook a span called.
        K8S_ADMISSION_WEBHOOK = "podtrace.k8s.admission.webhook";
        /// Where the bounds of an apiserver phase span come from, when function probes are not attached.
        K8S_APISERVER_PHASE_BOUNDS = "podtrace.k8s.apiserver.phase_bounds";
        /// `derived`: the probe's argument locations were derived, not taken from a known release.
        K8S_OFFSETS = "podtrace.k8s.offsets";
        /// The scheduler that placed the Pod.
        K8S_SCHEDULER_NAME = "podtrace.k8s.scheduler.name";
        /// A scheduling cycle's result: `scheduled` or `unschedulable`.
        K8S_SCHEDULING_RESULT = "podtrace.k8s.scheduling.result";
        /// Nodes a scheduling cycle evaluated.
        K8S_SCHEDULING_EVALUATED_NODES = "podtrace.k8s.scheduling.evaluated_nodes";
        /// Nodes a scheduling cycle found feasible.
        K8S_SCHEDULING_FEASIBLE_NODES = "podtrace.k8s.scheduling.feasible_nodes";
        /// Why the scheduler could not place the Pod, as it reported.
        K8S_SCHEDULING_FAILURE = "podtrace.k8s.scheduling.failure";
        /// Why a container waits, as the kubelet reported.
        K8S_CONTAINER_WAITING = "podtrace.k8s.container.waiting";
        /// The Pod's containers' image pull policies.
        K8S_IMAGE_PULL_POLICY = "podtrace.k8s.image_pull_policy";

        /// The etcd key written.
        ETCD_KEY = "podtrace.etcd.key";
        /// What kind of write the etcd call was.
        ETCD_WRITE = "podtrace.etcd.write";
        /// The revision the write created.
        ETCD_REVISION = "podtrace.etcd.revision";
        /// The etcd member's `--name`.
        ETCD_MEMBER_NAME = "podtrace.etcd.member.name";
        /// The etcd member's id, hex.
        ETCD_MEMBER_ID = "podtrace.etcd.member.id";
        /// The member's Raft role: `leader` or `follower`.
        ETCD_MEMBER_ROLE = "podtrace.etcd.member.role";
        /// The Raft entry's index.
        ETCD_RAFT_INDEX = "podtrace.etcd.raft.index";
        /// The Raft entry's term.
        ETCD_RAFT_TERM = "podtrace.etcd.raft.term";
        /// The leader a follower forwarded a proposal to, by name.
        ETCD_RAFT_LEADER_NAME = "podtrace.etcd.raft.leader.name";
        /// The leader a follower forwarded a proposal to, by id.
        ETCD_RAFT_LEADER_ID = "podtrace.etcd.raft.leader.id";
        /// The follower an entry was replicated to, by name.
        ETCD_RAFT_FOLLOWER_NAME = "podtrace.etcd.raft.follower.name";
        /// The follower an entry was replicated to, by id.
        ETCD_RAFT_FOLLOWER_ID = "podtrace.etcd.raft.follower.id";
        /// Whether the follower's answer was one the commit waited for.
        ETCD_RAFT_IN_QUORUM = "podtrace.etcd.raft.in_quorum";
        /// Members of the cluster at the commit.
        ETCD_RAFT_MEMBERS = "podtrace.etcd.raft.members";
        /// Members a commit needs.
        ETCD_RAFT_QUORUM = "podtrace.etcd.raft.quorum";
        /// The followers the commit waited for.
        ETCD_RAFT_WAITED_FOR = "podtrace.etcd.raft.waited_for";
        /// The follower whose answer completed the quorum.
        ETCD_RAFT_WAITED_LONGEST_FOR = "podtrace.etcd.raft.waited_longest_for";
        /// The followers that answered after the commit.
        ETCD_RAFT_NOT_WAITED_FOR = "podtrace.etcd.raft.not_waited_for";
        /// Bytes the WAL append wrote.
        ETCD_WAL_BYTES = "podtrace.etcd.wal.bytes";
        /// Entries the WAL append wrote.
        ETCD_WAL_ENTRIES = "podtrace.etcd.wal.entries";
        /// Pod writes in the same append.
        ETCD_WAL_PODS = "podtrace.etcd.wal.pods";
        /// The Pods of the same append.
        ETCD_WAL_BATCH = "podtrace.etcd.wal.batch";
        /// The fdatasync's own duration, ns.
        ETCD_WAL_FSYNC_NS = "podtrace.etcd.wal.fsync_ns";
        /// The append carried other Pods' writes too.
        ETCD_WAL_SHARED = "podtrace.etcd.wal.shared";

        /// Whether the image was on the node (ImageStatus).
        CONTAINER_IMAGE_PRESENT = "podtrace.container.image.present";
        /// Where CreateContainer's image came from: `present` or `pulled`.
        CONTAINER_IMAGE_SOURCE = "podtrace.container.image.source";
        /// The sandbox a process or CNI call belongs to.
        CRI_SANDBOX_ID = "podtrace.cri.sandbox_id";
        /// The sandbox call a CNI plugin ran for: `RunPodSandbox`, `StopPodSandbox`, `RemovePodSandbox`.
        CNI_CALL = "podtrace.cni.call";
        /// How a CNI run was attributed to its Pod.
        ATTRIBUTION = "podtrace.attribution";
    }
}

/// Span names. Names that vary are built by the functions below, so that
/// each has one spelling.
pub mod name {
    names! {
        /// kube-apiserver's handling of a Pod create request, from its first byte to its answer.
        APISERVER_POD_CREATE = "apiserver POST /api/v1/namespaces/{namespace}/pods";
        /// The create's authentication (function probes).
        APISERVER_AUTHENTICATION = "apiserver authentication";
        /// The create's authorization (function probes).
        APISERVER_AUTHORIZATION = "apiserver authorization";
        /// Mutating admission (function probes).
        APISERVER_ADMISSION_MUTATING = "apiserver admission (mutating)";
        /// Validating admission (function probes).
        APISERVER_ADMISSION_VALIDATING = "apiserver admission (validating)";
        /// A binding's or status update's way from the request's arrival to the Pod registry (function probes off).
        APISERVER_BEFORE_VALIDATION = "apiserver authentication, authorization";
        /// A create's way from the request's arrival to the Pod's validation: authentication, authorization, mutating admission (function probes off).
        APISERVER_BEFORE_VALIDATION_WITH_ADMISSION = "apiserver authentication, authorization, admission (mutating)";
        /// A create's way from the Pod's validation to the answer: validating admission, the storage write (function probes off).
        APISERVER_AFTER_VALIDATION = "apiserver admission (validating), storage create";
        /// The Pod registry's validation of the Pod.
        APISERVER_POD_VALIDATION = "apiserver Pod validation";
        /// The binding's storage.
        APISERVER_BINDING = "apiserver binding";
        /// A status update's storage.
        APISERVER_STATUS_UPDATE = "apiserver status update";
        /// The Pod waiting in the scheduler's queue.
        SCHEDULER_QUEUE = "scheduler queue";
        /// A scheduling cycle: filter and score.
        SCHEDULER_CYCLE = "scheduler scheduling cycle";
        /// The scheduler binding the Pod to its node.
        SCHEDULER_BIND = "scheduler bind";
        /// From the Pod's arrival at the kubelet to its pod worker.
        KUBELET_DISPATCH = "kubelet pod dispatch";
        /// A pod worker's sync of the Pod.
        KUBELET_SYNC = "kubelet pod sync";
        /// The kubelet waiting for the Pod's volumes.
        KUBELET_VOLUME_WAIT = "kubelet volume wait";
        /// The kubelet's status update of the Pod.
        KUBELET_STATUS_UPDATE = "kubelet status update";
        /// etcd's WAL append of the write's entry and its fdatasync.
        ETCD_WAL = "etcd WAL append + fdatasync";
        /// From the leader's proposal to the commit.
        ETCD_COMMIT = "etcd raft commit";
        /// etcd applying the committed entry.
        ETCD_APPLY = "etcd apply";
    }

    /// Names that vary, as patterns: what the functions below build.
    pub const PATTERNS: &[(&str, &str)] = &[
        (
            "pod.create NAMESPACE/NAME",
            "The root: the Pod's creation, from the create request to Running.",
        ),
        (
            "pod.create NAMESPACE/NAME (dry run)",
            "The root of a dry-run create.",
        ),
        (
            "pod.create NAMESPACE/NAME (rejected)",
            "The root of a rejected create.",
        ),
        (
            "pod.delete NAMESPACE/NAME",
            "The root of the Pod's deletion, linked to its creation.",
        ),
        ("node NODE", "Everything the Pod's node did for it."),
        (
            "apiserver METHOD ROUTE",
            "kube-apiserver's handling of an API request about the Pod.",
        ),
        (
            "METHOD ROUTE",
            "A component's API request about the Pod (client side).",
        ),
        (
            "apiserver admission webhook HOOK",
            "One admission webhook's call.",
        ),
        (
            "apiserver storage OPERATION RESOURCE",
            "The apiserver's storage write (function probes).",
        ),
        (
            "SERVICE/METHOD",
            "A gRPC call: CRI (`runtime.v1.RuntimeService/RunPodSandbox`, …) and etcd (`etcdserverpb.KV/Txn`).",
        ),
        (
            "etcd raft forward → MEMBER",
            "A follower forwarding the proposal to the leader.",
        ),
        (
            "etcd raft replicate → MEMBER",
            "The leader replicating the entry to one follower, until its answer.",
        ),
        (
            "runc SUBCOMMAND",
            "runc creating, starting, killing or deleting the container.",
        ),
        ("containerd-shim… start", "The shim's start."),
        ("CNI PLUGIN", "A CNI plugin run for the sandbox."),
        (
            "container process start: EXECUTABLE",
            "The container's first process exec'd.",
        ),
        (
            "container process exit: EXECUTABLE",
            "The container's first process exited.",
        ),
    ];

    /// The root of a Pod's creation.
    pub fn pod_create(namespace: &str, pod: &str) -> String {
        format!("{POD_CREATE_PREFIX}{namespace}/{pod}")
    }

    /// The root of a create that stored nothing: `why` is `dry run` or `rejected`.
    pub fn pod_create_not_stored(namespace: &str, pod: &str, why: &str) -> String {
        format!("{POD_CREATE_PREFIX}{namespace}/{pod} ({why})")
    }

    /// The root of a Pod's deletion.
    pub fn pod_delete(namespace: &str, pod: &str) -> String {
        format!("{POD_DELETE_PREFIX}{namespace}/{pod}")
    }

    /// A node's span.
    pub fn node(node: &str) -> String {
        format!("{NODE_PREFIX}{node}")
    }

    /// kube-apiserver's side of an API request.
    pub fn apiserver_request(method: &str, route: &str) -> String {
        format!("apiserver {method} {route}")
    }

    /// A client's side of an API request.
    pub fn client_request(method: &str, route: &str) -> String {
        format!("{method} {route}")
    }

    /// One admission webhook's call.
    pub fn apiserver_webhook(hook: &str) -> String {
        format!("apiserver admission webhook {hook}")
    }

    /// The apiserver's storage write.
    pub fn apiserver_storage(operation: &str, resource: &str) -> String {
        format!("apiserver storage {operation} {resource}")
    }

    /// A gRPC call.
    pub fn grpc(service: &str, method: &str) -> String {
        format!("{service}/{method}")
    }

    /// runc or the shim.
    pub fn runtime(executable: &str, subcommand: &str) -> String {
        format!("{executable} {subcommand}")
    }

    /// A follower forwarding a proposal to the leader `member`.
    pub fn etcd_forward(member: &str) -> String {
        format!("etcd raft forward → {member}")
    }

    /// The leader replicating an entry to the follower `member`.
    pub fn etcd_replicate(member: &str) -> String {
        format!("etcd raft replicate → {member}")
    }

    /// A CNI plugin's run.
    pub fn cni(plugin: &str) -> String {
        format!("CNI {plugin}")
    }

    /// The container's first process exec'd.
    pub fn container_start(executable: &str) -> String {
        format!("{CONTAINER_START_PREFIX}{executable}")
    }

    /// The container's first process exited.
    pub fn container_exit(executable: &str) -> String {
        format!("{CONTAINER_EXIT_PREFIX}{executable}")
    }

    const POD_CREATE_PREFIX: &str = "pod.create ";
    const POD_DELETE_PREFIX: &str = "pod.delete ";
    const NODE_PREFIX: &str = "node ";
    const CONTAINER_START_PREFIX: &str = "container process start: ";
    const CONTAINER_EXIT_PREFIX: &str = "container process exit: ";

    /// Whether `name` is a creation's root (the create seen or not).
    pub fn is_pod_create(name: &str) -> bool {
        name.starts_with(POD_CREATE_PREFIX)
    }

    /// Whether `name` is a deletion's root.
    pub fn is_pod_delete(name: &str) -> bool {
        name.starts_with(POD_DELETE_PREFIX)
    }

    /// Whether `name` is a node's span.
    pub fn is_node(name: &str) -> bool {
        name.starts_with(NODE_PREFIX)
    }

    /// Whether `name` is the container's first process exec'd.
    pub fn is_container_start(name: &str) -> bool {
        name.starts_with(CONTAINER_START_PREFIX)
    }

    /// Whether `name` is the container's first process exiting.
    pub fn is_container_exit(name: &str) -> bool {
        name.starts_with(CONTAINER_EXIT_PREFIX)
    }
}

/// What an etcd write did to a Pod ([`attr::K8S_POD_CHANGE`]), as the Pod
/// object it stored shows against the one before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodChange {
    /// The create.
    Created,
    /// The scheduler's binding, to this node.
    BoundTo(String),
    /// The kubelet's status report, of this phase.
    Status(String),
    /// Anything else, or a write whose previous object was not seen.
    Updated,
    /// The delete.
    Deleted,
}

impl PodChange {
    const BOUND_TO: &str = "bound to ";
    const STATUS: &str = "status ";

    /// The attribute's value.
    pub fn to_attribute(&self) -> String {
        match self {
            Self::Created => "created".to_owned(),
            Self::BoundTo(node) => format!("{}{node}", Self::BOUND_TO),
            Self::Status(phase) => format!("{}{phase}", Self::STATUS),
            Self::Updated => "updated".to_owned(),
            Self::Deleted => "deleted".to_owned(),
        }
    }

    /// Reads the attribute's value back.
    pub fn from_attribute(value: &str) -> Option<Self> {
        Some(match value {
            "created" => Self::Created,
            "updated" => Self::Updated,
            "deleted" => Self::Deleted,
            _ => {
                if let Some(node) = value.strip_prefix(Self::BOUND_TO) {
                    Self::BoundTo(node.to_owned())
                } else {
                    Self::Status(value.strip_prefix(Self::STATUS)?.to_owned())
                }
            }
        })
    }

    /// What `span` (an etcd write of a Pod) did to it.
    pub fn of(span: &Span) -> Option<Self> {
        Self::from_attribute(span.string_attribute(attr::K8S_POD_CHANGE)?)
    }
}

/// What a span is, for those that read spans back (assembly, metrics, the
/// waterfall, `explain`): read from its name and attributes here, where they
/// are spelled, because spans also come back from OTLP-JSON files, where
/// nothing else survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What<'a> {
    /// The root of a Pod's creation (`pod.create …`).
    CreationRoot,
    /// The root of a Pod's deletion (`pod.delete …`).
    DeletionRoot,
    /// A node's span.
    Node,
    /// kube-apiserver's span of a Pod create.
    ApiserverPodCreate,
    /// An admission pass (function probes).
    Admission,
    /// The scheduler's queue.
    SchedulerQueue,
    /// A scheduling cycle.
    SchedulingCycle,
    /// The kubelet's dispatch to its pod worker.
    KubeletDispatch,
    /// The kubelet's volume wait.
    KubeletVolumeWait,
    /// etcd's WAL append and fdatasync.
    EtcdWal,
    /// An API request's own span, either side (not the calls inside it,
    /// which repeat its attributes).
    ApiRequest,
    /// runc or the shim.
    Runtime {
        /// Its executable.
        executable: &'a str,
        /// What it was asked to do.
        subcommand: &'a str,
    },
    /// The container's first process exec'd.
    ContainerStart,
    /// The container's first process exited.
    ContainerExit,
    /// Anything else.
    Other,
}

impl<'a> What<'a> {
    /// What `span` is.
    pub fn of(span: &'a Span) -> Self {
        let text = span.name.as_str();
        if span.parent_span_id.is_none() {
            if name::is_pod_create(text) {
                return Self::CreationRoot;
            }
            if name::is_pod_delete(text) {
                return Self::DeletionRoot;
            }
        }
        match text {
            name::APISERVER_POD_CREATE => return Self::ApiserverPodCreate,
            name::APISERVER_ADMISSION_MUTATING | name::APISERVER_ADMISSION_VALIDATING => {
                return Self::Admission;
            }
            name::SCHEDULER_QUEUE => return Self::SchedulerQueue,
            name::SCHEDULER_CYCLE => return Self::SchedulingCycle,
            name::KUBELET_DISPATCH => return Self::KubeletDispatch,
            name::KUBELET_VOLUME_WAIT => return Self::KubeletVolumeWait,
            name::ETCD_WAL => return Self::EtcdWal,
            _ => {}
        }
        if name::is_node(text) {
            Self::Node
        } else if name::is_container_start(text) {
            Self::ContainerStart
        } else if name::is_container_exit(text) {
            Self::ContainerExit
        } else if span
            .string_attribute(attr::HTTP_ROUTE)
            .is_some_and(|route| text.ends_with(route))
        {
            Self::ApiRequest
        } else if let Some((executable, subcommand)) = span
            .string_attribute(attr::PROCESS_EXECUTABLE_NAME)
            .and_then(|executable| Some((executable, text.strip_prefix(executable)?)))
            .and_then(|(executable, rest)| Some((executable, rest.strip_prefix(' ')?)))
        {
            Self::Runtime {
                executable,
                subcommand,
            }
        } else {
            Self::Other
        }
    }

    /// An API request's own span, the create's included.
    pub fn is_api_request(self) -> bool {
        matches!(self, Self::ApiRequest | Self::ApiserverPodCreate)
    }
}

#[cfg(test)]
mod tests;
