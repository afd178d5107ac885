//! kube-apiserver's storage layer, played against a real etcd: Pods are
//! written with the etcd requests of `k8s.io/apiserver/pkg/storage/etcd3`
//! (`store.go`, v1.28) and in the encoding kube-apiserver stores them in.
//!
//! In: an etcd's endpoint and certificates (plain, or TLS with client
//! certificates and authentication), a built `demo-apiserver` relay and the
//! [`PodTemplate`] the CRI client runs. Out: [`EtcdKv`], a gRPC client of
//! `etcdserverpb.KV` whose calls the relay — a Go process, as kube-apiserver
//! is — makes on one long-lived HTTP/2 connection (see [`super::demo_apiserver`]),
//! and [`ApiserverRole`], which writes Pods through it:
//!
//! - create (`store.Create`): `Txn{compare: [mod_revision(key) == 0],
//!   success: [Put key value], failure: []}`;
//! - update (`store.GuaranteedUpdate`): `Txn{compare: [mod_revision(key) ==
//!   R], success: [Put key value], failure: [Range key]}`, where R is the
//!   revision of the copy the apiserver holds (its watch cache passes that
//!   copy, so no read comes first); on a conflict the failure branch's
//!   Range gives the current object and the update is tried again on it.
//!
//! Keys are `/registry/pods/{namespace}/{name}`. Values are the protobuf
//! envelope: `k8s\0`, then `runtime.Unknown{typeMeta{apiVersion: "v1",
//! kind: "Pod"}, raw: <v1.Pod>, contentEncoding: "", contentType: ""}`,
//! byte for byte as the apiserver's protobuf serializer writes it. The Pod
//! inside is encoded by prost from the upstream generated types (`k8s-pb`,
//! which tracer-decode decodes with); unlike Go's gogo-protobuf code, prost
//! leaves out optional fields that are unset instead of writing them empty —
//! any decoder reads the same object. Not written: `metadata.managedFields`
//! and what admission plugins that need other objects add (service account
//! token volumes).
//!
//! [`new_pod`], [`bind`] and [`set_running`] make the objects that the
//! create request, the scheduler's binding and the kubelet's status report
//! leave in storage.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use k8s_pb::{
    api::core::v1::{
        Capabilities, Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod,
        PodCondition, PodIp, PodSecurityContext, PodSpec, PodStatus, SeccompProfile,
        SecurityContext, Toleration,
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, Time},
        runtime::{TypeMeta, Unknown},
    },
};
use prost::Message as _;
use tracer_decode::{
    kube::PROTOBUF_MAGIC,
    pb::etcdserverpb::{
        Compare, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse,
        compare::{CompareResult, CompareTarget, TargetUnion},
        request_op::Request,
    },
};

use super::{
    certs::Pki,
    cri::{CAPABILITIES_ADDED, CAPABILITIES_DROPPED, PodTemplate, RUN_AS_USER},
    demo_apiserver::{ClientTls, DemoApiserver, DemoApiserverBinary},
    etcd::APISERVER_USER,
    process::fill_random,
};

/// Where kube-apiserver keeps Pods (default `--etcd-prefix` `/registry`).
pub const POD_KEY_PREFIX: &str = "/registry/pods/";
/// kube-apiserver retries a conflicting update without bound; the demo
/// gives up after this many tries.
const MAX_UPDATE_TRIES: usize = 10;
/// The container every demo Pod has.
pub const CONTAINER_NAME: &str = "main";
/// The scheduler that binds the demo Pods (the default one).
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// The etcd key of a Pod.
pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{POD_KEY_PREFIX}{namespace}/{name}")
}

/// A gRPC client of etcd's `etcdserverpb.KV` service: requests are encoded
/// here and carried by a [`DemoApiserver`] relay on its one HTTP/2
/// connection (TLS with a client certificate when etcd has TLS).
#[derive(Debug)]
pub struct EtcdKv {
    relay: DemoApiserver,
    endpoint: String,
    client_name: Option<String>,
}

impl EtcdKv {
    /// Starts a relay for a client of the etcd at `endpoint`. With TLS
    /// (`pki`), it presents the client certificate `client_name` of `pki`;
    /// with authentication on, etcd takes that certificate's Common Name as
    /// the user. The relay connects at the first call, so etcd need not run
    /// yet. Call it from a thread that outlives the returned value (see
    /// [`DemoApiserverBinary::start`]).
    pub fn start(
        relay: &DemoApiserverBinary,
        endpoint: &str,
        pki: Option<&Pki>,
        client_name: &str,
    ) -> anyhow::Result<Self> {
        let tls = match pki {
            Some(pki) => Some(ClientTls {
                ca_cert: pki.ca_cert().to_owned(),
                client: pki.client(client_name)?.clone(),
            }),
            None => None,
        };
        let relay = relay
            .start(endpoint, tls.as_ref())
            .with_context(|| format!("starting the etcd client relay for {endpoint}"))?;
        Ok(Self {
            relay,
            endpoint: endpoint.to_owned(),
            client_name: pki.map(|_| client_name.to_owned()),
        })
    }

    /// The relay's process id.
    pub fn relay_pid(&self) -> u32 {
        self.relay.pid()
    }

    async fn call<Req, Resp>(&self, method: &str, request: Req) -> anyhow::Result<Resp>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let context = || match &self.client_name {
            Some(client) => format!("etcd {method} at {} as {client}", self.endpoint),
            None => format!("etcd {method} at {}", self.endpoint),
        };
        let response = self
            .relay
            .call(method, &request.encode_to_vec())
            .await
            .with_context(context)?;
        Resp::decode(response.as_slice())
            .with_context(|| format!("decoding the response of {}", context()))
    }

    pub async fn range(&self, request: RangeRequest) -> anyhow::Result<RangeResponse> {
        self.call("Range", request).await
    }

    pub async fn txn(&self, request: TxnRequest) -> anyhow::Result<TxnResponse> {
        self.call("Txn", request).await
    }
}

/// A Pod as last written, the copy kube-apiserver's watch cache holds: the
/// object and the revision that wrote it.
#[derive(Debug, Clone)]
pub struct StoredPod {
    pub key: String,
    pub pod: Pod,
    pub mod_revision: i64,
}

/// kube-apiserver's etcd writes of Pods, on one etcd connection.
#[derive(Debug)]
pub struct ApiserverRole {
    kv: EtcdKv,
}

impl ApiserverRole {
    /// Starts the relay that makes kube-apiserver's etcd calls to the etcd
    /// at `endpoint`, with kube-apiserver's client certificate of `pki` when
    /// etcd has TLS. It connects at the first call (see [`EtcdKv::start`]).
    pub fn start(
        relay: &DemoApiserverBinary,
        endpoint: &str,
        pki: Option<&Pki>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            kv: EtcdKv::start(relay, endpoint, pki, APISERVER_USER)?,
        })
    }

    /// The process id of the relay making the calls.
    pub fn relay_pid(&self) -> u32 {
        self.kv.relay_pid()
    }

    /// How many Pods etcd holds: the count-only Range over
    /// `/registry/pods/` that the apiserver makes for its object-count
    /// metrics (`store.Count`). A read that changes nothing.
    pub async fn count_pods(&self) -> anyhow::Result<i64> {
        let response = self
            .kv
            .range(RangeRequest {
                key: POD_KEY_PREFIX.as_bytes().to_vec(),
                range_end: prefix_range_end(POD_KEY_PREFIX.as_bytes()),
                count_only: true,
                ..Default::default()
            })
            .await?;
        Ok(response.count)
    }

    /// Stores a new Pod (`store.Create`); fails if the key exists.
    pub async fn create(&self, pod: Pod) -> anyhow::Result<StoredPod> {
        let metadata = pod.metadata.as_ref();
        let key = pod_key(
            metadata.and_then(|m| m.namespace.as_deref()).unwrap_or(""),
            metadata.and_then(|m| m.name.as_deref()).unwrap_or(""),
        );
        let response = self
            .kv
            .txn(create_txn(&key, encode_pod(&pod)))
            .await
            .with_context(|| format!("creating {key}"))?;
        if !response.succeeded {
            bail!("creating {key}: it already exists");
        }
        Ok(StoredPod {
            key,
            pod,
            mod_revision: header_revision(&response)?,
        })
    }

    /// Changes a stored Pod (`store.GuaranteedUpdate`): `try_update` is
    /// applied to the copy in `stored` and written if etcd still has that
    /// revision; otherwise to the current object that the failed Txn
    /// returned, and so on. `stored` becomes what was written.
    pub async fn guaranteed_update(
        &self,
        stored: &mut StoredPod,
        mut try_update: impl FnMut(&mut Pod),
    ) -> anyhow::Result<()> {
        let mut current = stored.clone();
        for _ in 0..MAX_UPDATE_TRIES {
            let mut pod = current.pod.clone();
            try_update(&mut pod);
            let response = self
                .kv
                .txn(update_txn(
                    &current.key,
                    encode_pod(&pod),
                    current.mod_revision,
                ))
                .await
                .with_context(|| format!("updating {}", current.key))?;
            if response.succeeded {
                *stored = StoredPod {
                    mod_revision: header_revision(&response)?,
                    key: current.key,
                    pod,
                };
                return Ok(());
            }
            // A conflict: the failure branch read the current object.
            let Some(kv) = response
                .responses
                .first()
                .and_then(|op| match &op.response {
                    Some(
                        tracer_decode::pb::etcdserverpb::response_op::Response::ResponseRange(
                            range,
                        ),
                    ) => range.kvs.first(),
                    _ => None,
                })
            else {
                bail!("updating {}: it no longer exists", current.key);
            };
            current = StoredPod {
                pod: decode_pod(&kv.value)
                    .with_context(|| format!("decoding the current {}", current.key))?,
                mod_revision: kv.mod_revision,
                key: current.key,
            };
        }
        bail!(
            "updating {}: still conflicting after {MAX_UPDATE_TRIES} tries",
            stored.key
        )
    }
}

/// The end of the range of keys starting with `prefix` (clientv3's
/// `WithPrefix`): the prefix with its last byte below 0xff incremented.
fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from `prefix` on.
    vec![0]
}

fn header_revision(response: &TxnResponse) -> anyhow::Result<i64> {
    response
        .header
        .as_ref()
        .map(|header| header.revision)
        .context("etcd's Txn response has no header")
}

fn mod_revision_is(key: &str, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Mod as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::ModRevision(revision)),
    }
}

fn put(key: &str, value: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            ..Default::default()
        })),
    }
}

/// `store.Create`: put `value` at `key` if the key does not exist.
pub fn create_txn(key: &str, value: Vec<u8>) -> TxnRequest {
    TxnRequest {
        compare: vec![mod_revision_is(key, 0)],
        success: vec![put(key, value)],
        failure: Vec::new(),
    }
}

/// `store.GuaranteedUpdate`: put `value` at `key` if the key was last
/// written at `revision`, else read it.
pub fn update_txn(key: &str, value: Vec<u8>, revision: i64) -> TxnRequest {
    TxnRequest {
        compare: vec![mod_revision_is(key, revision)],
        success: vec![put(key, value)],
        failure: vec![RequestOp {
            request: Some(Request::RequestRange(RangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            })),
        }],
    }
}

/// A Pod as the apiserver's protobuf serializer stores it (see the module
/// docs).
pub fn encode_pod(pod: &Pod) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
        }),
        raw: Some(pod.encode_to_vec()),
        // Present and empty, as the serializer writes them.
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut value = PROTOBUF_MAGIC.to_vec();
    value.extend(unknown.encode_to_vec());
    value
}

/// The Pod in a value written by [`encode_pod`] (or by kube-apiserver).
pub fn decode_pod(value: &[u8]) -> anyhow::Result<Pod> {
    let envelope = value
        .strip_prefix(PROTOBUF_MAGIC)
        .context("the value does not start with the k8s protobuf magic")?;
    let unknown = Unknown::decode(envelope).context("decoding runtime.Unknown")?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    if type_meta.api_version.as_deref() != Some("v1") || type_meta.kind.as_deref() != Some("Pod") {
        bail!(
            "the value holds {:?}/{:?}, not a v1 Pod",
            type_meta.api_version,
            type_meta.kind
        );
    }
    Pod::decode(unknown.raw.unwrap_or_default().as_slice()).context("decoding v1.Pod")
}

/// A fresh Pod UID: a random (version 4) UUID in its text form, as the
/// apiserver gives every new object.
pub fn new_uid() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes)?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// A name made from `generate_name` as the apiserver makes it
/// (`names.SimpleNameGenerator`): the base, cut to 58 characters, and 5
/// random characters from an alphabet without vowels and look-alikes.
pub fn generate_name(base: &str) -> anyhow::Result<String> {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    const MAX_BASE_CHARS: usize = 63 - 5;
    let mut random = [0u8; 5];
    fill_random(&mut random)?;
    let suffix: String = random
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    let base: String = base.chars().take(MAX_BASE_CHARS).collect();
    Ok(format!("{base}{suffix}"))
}

/// `time` as a `metav1.Time`: whole seconds, as the apiserver and kubelet
/// store times (RFC 3339 precision).
pub fn kube_time(time: SystemTime) -> Time {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs() as i64)
        .unwrap_or_default();
    Time {
        seconds: Some(seconds),
        nanos: Some(0),
    }
}

/// The Pod a create request for `namespace`/`name` leaves in storage once
/// the apiserver has defaulted and admitted it: one container `main` with
/// the template's image and command, labels, a fresh UID and creation time,
/// unscheduled, `Pending`, `BestEffort` (no resources).
pub fn new_pod(
    namespace: &str,
    name: &str,
    generate_name: Option<&str>,
    labels: &[(&str, &str)],
    template: &PodTemplate,
) -> anyhow::Result<Pod> {
    // What the DefaultTolerationSeconds admission plugin adds.
    let toleration = |key: &str| Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoExecute".to_owned()),
        toleration_seconds: Some(300),
        ..Default::default()
    };
    Ok(Pod {
        metadata: Some(ObjectMeta {
            name: Some(name.to_owned()),
            generate_name: generate_name.map(str::to_owned),
            namespace: Some(namespace.to_owned()),
            uid: Some(new_uid()?),
            creation_timestamp: Some(kube_time(SystemTime::now())),
            labels: labels
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: Some(CONTAINER_NAME.to_owned()),
                image: Some(template.image.clone()),
                command: template.command.clone(),
                termination_message_path: Some("/dev/termination-log".to_owned()),
                termination_message_policy: Some("File".to_owned()),
                // The default for an image with a tag other than `latest`.
                image_pull_policy: Some("IfNotPresent".to_owned()),
                // Pod Security's `restricted` profile; the kubelet role's
                // CreateContainer asks for it (cri::restricted_container_security).
                security_context: Some(SecurityContext {
                    capabilities: Some(Capabilities {
                        add: CAPABILITIES_ADDED.map(str::to_owned).to_vec(),
                        drop: CAPABILITIES_DROPPED.map(str::to_owned).to_vec(),
                    }),
                    run_as_user: Some(RUN_AS_USER),
                    run_as_non_root: Some(true),
                    allow_privilege_escalation: Some(false),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            restart_policy: Some("Always".to_owned()),
            termination_grace_period_seconds: Some(30),
            dns_policy: Some("ClusterFirst".to_owned()),
            // The sandbox's seccomp profile (cri::CriClient::sandbox_config).
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    r#type: Some("RuntimeDefault".to_owned()),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            scheduler_name: Some(SCHEDULER_NAME.to_owned()),
            tolerations: vec![
                toleration("node.kubernetes.io/not-ready"),
                toleration("node.kubernetes.io/unreachable"),
            ],
            priority: Some(0),
            enable_service_links: Some(true),
            preemption_policy: Some("PreemptLowerPriority".to_owned()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".to_owned()),
            qos_class: Some("BestEffort".to_owned()),
            ..Default::default()
        }),
    })
}

/// Sets condition `kind` to `status` (`True`/`False`), moving its
/// transition time only when the status changes (`podutil.UpdatePodCondition`).
fn set_condition(status: &mut PodStatus, kind: &str, value: &str, now: &Time) {
    match status
        .conditions
        .iter_mut()
        .find(|condition| condition.r#type.as_deref() == Some(kind))
    {
        Some(condition) => {
            if condition.status.as_deref() != Some(value) {
                condition.status = Some(value.to_owned());
                condition.last_transition_time = Some(*now);
            }
        }
        None => status.conditions.push(PodCondition {
            r#type: Some(kind.to_owned()),
            status: Some(value.to_owned()),
            last_transition_time: Some(*now),
            ..Default::default()
        }),
    }
}

/// What the scheduler's binding (`POST …/pods/{name}/binding`) changes in
/// storage: `spec.nodeName` and the `PodScheduled` condition.
pub fn bind(pod: &mut Pod, node_name: &str) {
    let now = kube_time(SystemTime::now());
    pod.spec.get_or_insert_default().node_name = Some(node_name.to_owned());
    set_condition(
        pod.status.get_or_insert_default(),
        "PodScheduled",
        "True",
        &now,
    );
}

/// What the kubelet learnt from the runtime about a Pod it started.
#[derive(Debug, Clone)]
pub struct RunningContainer {
    /// The runtime's container id (without the `containerd://` scheme).
    pub container_id: String,
    /// The image reference the runtime resolved (`imageID`).
    pub image_ref: String,
    /// When the container started.
    pub started_at: SystemTime,
    /// The sandbox's IP, if it has one.
    pub pod_ip: Option<String>,
    /// When the kubelet began working on the Pod (`status.startTime`).
    pub start_time: SystemTime,
}

/// What the kubelet's status report of a running Pod (`PATCH
/// …/pods/{name}/status`) leaves in storage: phase `Running`, the Pod's
/// conditions, IP, start time and the status of container `main`.
pub fn set_running(pod: &mut Pod, running: &RunningContainer) {
    let now = kube_time(SystemTime::now());
    let image = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|container| container.image.clone());
    let status = pod.status.get_or_insert_default();
    status.phase = Some("Running".to_owned());
    for kind in ["Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        set_condition(status, kind, "True", &now);
    }
    if let Some(ip) = &running.pod_ip {
        status.pod_ip = Some(ip.clone());
        status.pod_ips = vec![PodIp {
            ip: Some(ip.clone()),
        }];
    }
    status.start_time = Some(kube_time(running.start_time));
    status.container_statuses = vec![ContainerStatus {
        name: Some(CONTAINER_NAME.to_owned()),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(kube_time(running.started_at)),
            }),
            ..Default::default()
        }),
        ready: Some(true),
        restart_count: Some(0),
        image,
        image_id: Some(running.image_ref.clone()),
        container_id: Some(format!("containerd://{}", running.container_id)),
        started: Some(true),
        ..Default::default()
    }];
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

    use std::path::PathBuf;

    use tracer_decode::{
        etcd::{KvRequest, WriteKind},
        identity::PodIdentity,
        kube::{StoredObject, decode_stored_object},
    };

    use super::*;

    fn template() -> PodTemplate {
        PodTemplate {
            log_root: PathBuf::from("/nonexistent"),
            cgroup_root: "/podtrace-test".to_owned(),
            image: "podtrace.local/busybox:1".to_owned(),
            command: vec!["/bin/sh".to_owned(), "-c".to_owned(), "sleep 1".to_owned()],
        }
    }

    fn demo_pod() -> Pod {
        new_pod(
            "default",
            "demo-0-b2c4d",
            Some("demo-0-"),
            &[("app", "podtrace-demo")],
            &template(),
        )
        .unwrap()
    }

    fn identity(value: &[u8]) -> PodIdentity {
        match decode_stored_object(value) {
            Ok(StoredObject::Pod(identity)) => *identity,
            other => panic!("not a Pod: {other:?}"),
        }
    }

    #[test]
    fn stored_pod_decodes_with_tracer_decode_through_its_lifecycle() {
        let mut pod = demo_pod();
        let uid = pod.metadata.as_ref().unwrap().uid.clone();
        let created = identity(&encode_pod(&pod));
        assert_eq!(
            created,
            PodIdentity {
                namespace: Some("default".into()),
                name: Some("demo-0-b2c4d".into()),
                generate_name: Some("demo-0-".into()),
                uid: uid.clone(),
                created_unix_s: pod
                    .metadata
                    .as_ref()
                    .and_then(|metadata| metadata.creation_timestamp.as_ref())
                    .and_then(|time| time.seconds),
                node_name: None,
                phase: Some("Pending".into()),
                scheduler_name: Some(SCHEDULER_NAME.into()),
                pull_policies: Some(format!("{CONTAINER_NAME}=IfNotPresent")),
                ..PodIdentity::default()
            }
        );

        bind(&mut pod, "node-1");
        let bound = identity(&encode_pod(&pod));
        assert_eq!(bound.node_name.as_deref(), Some("node-1"));
        assert_eq!(bound.phase.as_deref(), Some("Pending"));
        assert_eq!(bound.uid, uid);

        set_running(
            &mut pod,
            &RunningContainer {
                container_id: "c0ffee".into(),
                image_ref: "sha256:0123".into(),
                started_at: SystemTime::now(),
                pod_ip: Some("10.234.7.2".into()),
                start_time: SystemTime::now(),
            },
        );
        let running = identity(&encode_pod(&pod));
        assert_eq!(running.phase.as_deref(), Some("Running"));
        assert_eq!(running.node_name.as_deref(), Some("node-1"));
        assert_eq!(running.uid, uid);

        // The full object survives the round trip.
        let decoded = decode_pod(&encode_pod(&pod)).unwrap();
        assert_eq!(decoded, pod);
        let status = decoded.status.unwrap();
        let container = &status.container_statuses[0];
        assert_eq!(
            container.container_id.as_deref(),
            Some("containerd://c0ffee")
        );
        assert_eq!(container.started, Some(true));
        assert_eq!(status.pod_ip.as_deref(), Some("10.234.7.2"));
        let conditions: Vec<_> = status
            .conditions
            .iter()
            .map(|c| (c.r#type.clone().unwrap(), c.status.clone().unwrap()))
            .collect();
        assert_eq!(
            conditions,
            [
                ("PodScheduled".to_owned(), "True".to_owned()),
                ("Initialized".to_owned(), "True".to_owned()),
                ("Ready".to_owned(), "True".to_owned()),
                ("ContainersReady".to_owned(), "True".to_owned()),
            ]
        );
    }

    #[test]
    fn envelope_is_byte_for_byte_the_serializers() {
        let pod = demo_pod();
        let raw = pod.encode_to_vec();
        let value = encode_pod(&pod);
        // k8s\0, then runtime.Unknown: typeMeta (field 1) {apiVersion "v1",
        // kind "Pod"}, raw (field 2), contentEncoding (3) and contentType
        // (4) present and empty — the order and presence of
        // runtime.Unknown.NestedMarshalTo.
        let mut expected = b"k8s\0".to_vec();
        expected.extend([0x0a, 0x09, 0x0a, 0x02, b'v', b'1', 0x12, 0x03]);
        expected.extend(b"Pod");
        expected.push(0x12);
        prost::encoding::encode_varint(raw.len() as u64, &mut expected);
        expected.extend(&raw);
        expected.extend([0x1a, 0x00, 0x22, 0x00]);
        assert_eq!(value, expected);
    }

    #[test]
    fn txns_have_the_etcd3_store_shapes() {
        let key = "/registry/pods/default/demo-0-b2c4d";
        let create = create_txn(key, b"v".to_vec());
        let decoded = KvRequest::decode("Txn", &create.encode_to_vec()).unwrap();
        assert_eq!(decoded.write_kind(), Some(WriteKind::Create));
        assert_eq!(create.compare.len(), 1);
        assert_eq!(
            create.compare[0].target_union,
            Some(TargetUnion::ModRevision(0))
        );
        assert!(create.failure.is_empty());

        let update = update_txn(key, b"v2".to_vec(), 42);
        let decoded = KvRequest::decode("Txn", &update.encode_to_vec()).unwrap();
        assert_eq!(decoded.write_kind(), Some(WriteKind::Update));
        assert_eq!(
            update.compare[0],
            Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.as_bytes().to_vec(),
                range_end: Vec::new(),
                target_union: Some(TargetUnion::ModRevision(42)),
            }
        );
        assert!(matches!(
            &update.success[..],
            [RequestOp { request: Some(Request::RequestPut(put)) }]
                if put.key == key.as_bytes() && put.value == b"v2" && put.lease == 0
        ));
        assert!(matches!(
            &update.failure[..],
            [RequestOp { request: Some(Request::RequestRange(range)) }]
                if *range == RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() }
        ));
    }

    #[test]
    fn names_and_uids_look_like_the_apiservers() {
        let name = generate_name("demo-0-").unwrap();
        assert_eq!(name.len(), "demo-0-".len() + 5);
        assert!(name.starts_with("demo-0-"));
        assert!(
            name["demo-0-".len()..]
                .bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
            "{name}"
        );
        let uid = new_uid().unwrap();
        let groups: Vec<_> = uid.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{uid}");
        assert_eq!(&uid[14..15], "4", "version 4: {uid}");
        assert!("89ab".contains(&uid[19..20]), "variant: {uid}");
        assert_ne!(uid, new_uid().unwrap());
        assert_eq!(prefix_range_end(b"/registry/pods/"), b"/registry/pods0");
    }
}
