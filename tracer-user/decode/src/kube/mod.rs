//! Kubernetes objects as kube-apiserver stores them in etcd and sends them
//! over REST: the `k8s\0` protobuf envelope (runtime.Unknown) and JSON.
//!
//! In: an etcd value or a response body. Out: a [`StoredObject`] that keeps
//! only identity fields ([`PodIdentity`]) — specs, env values and Secret data
//! are never copied out.

use prost::Message;

use crate::identity::PodIdentity;

/// The magic kube-apiserver's protobuf serializer puts before runtime.Unknown.
pub const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// What a stored object is, as far as podtrace cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredObject {
    /// A v1 Pod's identity (boxed: it is most of the enum's size).
    Pod(Box<PodIdentity>),
    /// Any other kind: only its type is kept.
    Other {
        /// `apiVersion`.
        api_version: String,
        /// `kind`.
        kind: String,
    },
}

/// Why a value is not a decodable object. Each value stands alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    /// Neither the protobuf magic nor a JSON object.
    #[error("value is neither k8s protobuf nor JSON")]
    UnknownEncoding,
    /// The envelope or the object inside does not decode.
    #[error("protobuf {what} does not decode: {reason}")]
    Protobuf { what: &'static str, reason: String },
    /// The envelope says the raw bytes are compressed or not protobuf.
    #[error("envelope content type {content_type:?}/encoding {content_encoding:?} not supported")]
    UnsupportedContent {
        content_type: String,
        content_encoding: String,
    },
    /// JSON that does not parse.
    #[error("JSON does not parse: {reason}")]
    Json { reason: String },
}

impl KubeError {
    /// Always true: a bad value costs only itself.
    pub fn can_continue(&self) -> bool {
        true
    }
}

/// Decodes an etcd value or API body (protobuf envelope or JSON).
pub fn decode_stored_object(value: &[u8]) -> Result<StoredObject, KubeError> {
    if let Some(envelope) = value.strip_prefix(PROTOBUF_MAGIC) {
        return decode_envelope(envelope);
    }
    if value.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return decode_json(value);
    }
    Err(KubeError::UnknownEncoding)
}

fn decode_envelope(envelope: &[u8]) -> Result<StoredObject, KubeError> {
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    let unknown = Unknown::decode(envelope).map_err(|e| KubeError::Protobuf {
        what: "runtime.Unknown",
        reason: e.to_string(),
    })?;
    let content_type = unknown.content_type.unwrap_or_default();
    let content_encoding = unknown.content_encoding.unwrap_or_default();
    // apiserver writes both empty: raw is a plain protobuf message.
    if !content_type.is_empty() && content_type != "application/vnd.kubernetes.protobuf"
        || !content_encoding.is_empty()
    {
        return Err(KubeError::UnsupportedContent {
            content_type,
            content_encoding,
        });
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if api_version != "v1" || kind != "Pod" {
        return Ok(StoredObject::Other { api_version, kind });
    }
    let pod = pod_fields::Pod::decode(unknown.raw.unwrap_or_default().as_slice()).map_err(|e| {
        KubeError::Protobuf {
            what: "v1.Pod",
            reason: e.to_string(),
        }
    })?;
    let metadata = pod.metadata.unwrap_or_default();
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();
    let unschedulable = unschedulable(status.conditions.iter().map(|c| {
        (
            c.r#type.as_deref(),
            c.status.as_deref(),
            c.reason.clone(),
            c.message.clone(),
        )
    }));
    let waiting = waiting(status.container_statuses.iter().filter_map(|container| {
        let waiting = container.state.as_ref()?.waiting.as_ref()?;
        Some((waiting.reason.clone(), waiting.message.clone()))
    }));
    let pull_policies = pull_policies(
        spec.containers
            .iter()
            .map(|c| (c.name.clone(), c.image_pull_policy.clone())),
    );
    Ok(StoredObject::Pod(Box::new(PodIdentity {
        namespace: set(metadata.namespace),
        name: set(metadata.name),
        generate_name: set(metadata.generate_name),
        uid: set(metadata.uid),
        created_unix_s: metadata.creation_timestamp.and_then(|time| time.seconds),
        node_name: set(spec.node_name),
        phase: set(status.phase),
        scheduler_name: set(spec.scheduler_name),
        unschedulable,
        waiting,
        pull_policies,
    })))
}

/// When the Pod stored in an etcd value was created (`creationTimestamp`,
/// unix seconds), read from its bytes without decoding the rest: the
/// envelope's `raw` (tag 2), the Pod's `metadata` (1), its
/// `creationTimestamp` (8) and `seconds` (1), as [`pod_fields`] has them.
/// `None` for a value that is not a protobuf object, or says no time.
pub fn pod_created_unix_s(value: &[u8]) -> Option<i64> {
    use crate::pb_fields::{bytes_field, varint_field};
    let envelope = value.strip_prefix(PROTOBUF_MAGIC)?;
    let pod = bytes_field(envelope, 2)?;
    let metadata = bytes_field(pod, 1)?;
    let created = bytes_field(metadata, 8)?;
    // An int64 varint: two's complement in 64 bits.
    varint_field(created, 1).map(|seconds| seconds as i64)
}

/// The fields of a v1 Pod that podtrace reads, with the tags of
/// `k8s.io/api/core/v1/generated.proto` (as `k8s-pb` has them): prost skips
/// every other field without decoding it — the spec's env values, volumes,
/// the managed fields and the rest of a Pod that a full `k8s_pb` decode
/// turns into strings and vectors (10 % of the agent's time on a Pod write
/// load, the whole decode). `kube::tests` checks these against `k8s-pb`.
mod pod_fields {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Pod {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<PodSpec>,
        #[prost(message, optional, tag = "3")]
        pub status: Option<PodStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ObjectMeta {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub generate_name: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub namespace: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub uid: Option<String>,
        #[prost(message, optional, tag = "8")]
        pub creation_timestamp: Option<Time>,
    }

    /// `metav1.Time`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Time {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct PodSpec {
        #[prost(message, repeated, tag = "2")]
        pub containers: Vec<Container>,
        #[prost(string, optional, tag = "10")]
        pub node_name: Option<String>,
        #[prost(string, optional, tag = "19")]
        pub scheduler_name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Container {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "14")]
        pub image_pull_policy: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct PodStatus {
        #[prost(string, optional, tag = "1")]
        pub phase: Option<String>,
        #[prost(message, repeated, tag = "2")]
        pub conditions: Vec<PodCondition>,
        #[prost(message, repeated, tag = "8")]
        pub container_statuses: Vec<ContainerStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct PodCondition {
        #[prost(string, optional, tag = "1")]
        pub r#type: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub status: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub reason: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub message: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ContainerStatus {
        #[prost(message, optional, tag = "2")]
        pub state: Option<ContainerState>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ContainerState {
        #[prost(message, optional, tag = "1")]
        pub waiting: Option<ContainerStateWaiting>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ContainerStateWaiting {
        #[prost(string, optional, tag = "1")]
        pub reason: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub message: Option<String>,
    }
}

/// `NAME=POLICY,…` of the containers that say their `imagePullPolicy`.
fn pull_policies(
    containers: impl Iterator<Item = (Option<String>, Option<String>)>,
) -> Option<String> {
    let policies: Vec<String> = containers
        .filter_map(|(name, policy)| Some(format!("{}={}", set(name)?, set(policy)?)))
        .collect();
    (!policies.is_empty()).then(|| policies.join(","))
}

/// The scheduler's verdict while the `PodScheduled` condition (type,
/// status, reason, message) is `False`.
fn unschedulable<'a>(
    mut conditions: impl Iterator<
        Item = (
            Option<&'a str>,
            Option<&'a str>,
            Option<String>,
            Option<String>,
        ),
    >,
) -> Option<String> {
    conditions
        .find(|(kind, status, _, _)| *kind == Some("PodScheduled") && *status == Some("False"))
        .map(|(_, _, reason, message)| condition_text(reason, message))
}

/// The first waiting state (reason, message) of a container that is not
/// on its normal way to running.
fn waiting(mut states: impl Iterator<Item = (Option<String>, Option<String>)>) -> Option<String> {
    states.find_map(|(reason, message)| {
        let reason = set(reason)?;
        (!NORMAL_WAITING.contains(&reason.as_str())).then(|| condition_text(Some(reason), message))
    })
}

/// Waiting reasons of a container on its normal way to running.
const NORMAL_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// Longest reason text kept from a condition or waiting state.
const MAX_REASON_TEXT: usize = 512;

/// `REASON: MESSAGE` (either may be missing), cut at a character boundary.
fn condition_text(reason: Option<String>, message: Option<String>) -> String {
    let text = match (set(reason), set(message)) {
        (Some(reason), Some(message)) => format!("{reason}: {message}"),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => String::new(),
    };
    crate::cut_text(text, MAX_REASON_TEXT)
}

/// A string field as Kubernetes means it: Go's protobuf encoder writes
/// unset strings as present and empty (kube-apiserver stores a Pod not yet
/// scheduled with `spec.nodeName: ""`), which means unset.
fn set(field: Option<String>) -> Option<String> {
    field.filter(|value| !value.is_empty())
}

/// Only the fields podtrace reads; serde skips everything else without
/// keeping it. Shared with [`crate::watch`], whose JSON events embed objects.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonObject {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: JsonMetadata,
    #[serde(default)]
    spec: JsonSpec,
    #[serde(default)]
    status: JsonStatusField,
}

/// `status` is a struct on most kinds but a string on `Status` objects
/// (watch ERROR events, API errors): anything else is skipped.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum JsonStatusField {
    Object(JsonStatus),
    Other(serde::de::IgnoredAny),
}

impl Default for JsonStatusField {
    fn default() -> Self {
        JsonStatusField::Other(serde::de::IgnoredAny)
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsonMetadata {
    namespace: Option<String>,
    name: Option<String>,
    generate_name: Option<String>,
    uid: Option<String>,
    /// RFC 3339, UTC, whole seconds (metav1.Time).
    creation_timestamp: Option<String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsonSpec {
    node_name: Option<String>,
    scheduler_name: Option<String>,
    #[serde(default)]
    containers: Vec<JsonContainer>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsonContainer {
    name: Option<String>,
    image_pull_policy: Option<String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    phase: Option<String>,
    #[serde(default)]
    conditions: Vec<JsonCondition>,
    #[serde(default)]
    container_statuses: Vec<JsonContainerStatus>,
}

#[derive(serde::Deserialize, Default)]
struct JsonCondition {
    #[serde(rename = "type")]
    kind: Option<String>,
    status: Option<String>,
    reason: Option<String>,
    message: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct JsonContainerStatus {
    state: Option<JsonContainerState>,
}

#[derive(serde::Deserialize, Default)]
struct JsonContainerState {
    waiting: Option<JsonWaiting>,
}

#[derive(serde::Deserialize, Default)]
struct JsonWaiting {
    reason: Option<String>,
    message: Option<String>,
}

fn decode_json(value: &[u8]) -> Result<StoredObject, KubeError> {
    let object: JsonObject = serde_json::from_slice(value).map_err(|e| KubeError::Json {
        reason: e.to_string(),
    })?;
    Ok(stored_from_json(object))
}

/// Keeps the identity of a parsed JSON object.
pub(crate) fn stored_from_json(object: JsonObject) -> StoredObject {
    if object.api_version != "v1" || object.kind != "Pod" {
        return StoredObject::Other {
            api_version: object.api_version,
            kind: object.kind,
        };
    }
    let metadata = object.metadata;
    let status = match object.status {
        JsonStatusField::Object(status) => status,
        JsonStatusField::Other(_) => JsonStatus::default(),
    };
    let unschedulable = unschedulable(status.conditions.iter().map(|c| {
        (
            c.kind.as_deref(),
            c.status.as_deref(),
            c.reason.clone(),
            c.message.clone(),
        )
    }));
    let waiting = waiting(status.container_statuses.iter().filter_map(|container| {
        let waiting = container.state.as_ref()?.waiting.as_ref()?;
        Some((waiting.reason.clone(), waiting.message.clone()))
    }));
    let spec = object.spec;
    StoredObject::Pod(Box::new(PodIdentity {
        namespace: set(metadata.namespace),
        name: set(metadata.name),
        generate_name: set(metadata.generate_name),
        uid: set(metadata.uid),
        created_unix_s: metadata
            .creation_timestamp
            .and_then(|time| time.parse::<jiff::Timestamp>().ok())
            .map(|time| time.as_second()),
        node_name: set(spec.node_name),
        phase: set(status.phase),
        scheduler_name: set(spec.scheduler_name),
        unschedulable,
        waiting,
        pull_policies: pull_policies(
            spec.containers
                .into_iter()
                .map(|c| (c.name, c.image_pull_policy)),
        ),
    }))
}

/// The `metav1.Status` an apiserver answers a failed request with: why it
/// failed, in the apiserver's words.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiStatus {
    /// HTTP code it stands for.
    pub code: Option<i32>,
    /// Machine-readable reason (`Forbidden`, `Invalid`, `AlreadyExists`, …).
    pub reason: Option<String>,
    /// The message (`pods "web" is forbidden: violates PodSecurity …`).
    pub message: Option<String>,
    /// `details.name`: the object the request was about.
    pub name: Option<String>,
}

/// Reads a response body as a `Status` (protobuf envelope or JSON); `None`
/// for any other object or undecodable bytes.
pub fn decode_status(body: &[u8]) -> Option<ApiStatus> {
    if let Some(envelope) = body.strip_prefix(PROTOBUF_MAGIC) {
        use k8s_pb::apimachinery::pkg::runtime::Unknown;
        let unknown = Unknown::decode(envelope).ok()?;
        if unknown.type_meta?.kind.as_deref() != Some("Status") {
            return None;
        }
        let status =
            k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(unknown.raw?.as_slice())
                .ok()?;
        return Some(ApiStatus {
            code: status.code,
            reason: set(status.reason),
            message: set(status.message),
            name: set(status.details.and_then(|details| details.name)),
        });
    }
    #[derive(serde::Deserialize)]
    struct JsonDetails {
        name: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct JsonApiStatus {
        kind: String,
        code: Option<i32>,
        reason: Option<String>,
        message: Option<String>,
        details: Option<JsonDetails>,
    }
    let status: JsonApiStatus = serde_json::from_slice(body).ok()?;
    (status.kind == "Status").then(|| ApiStatus {
        code: status.code,
        reason: set(status.reason),
        message: set(status.message),
        name: set(status.details.and_then(|details| details.name)),
    })
}

#[cfg(test)]
mod tests {
    /// `pod_fields` reads what a full `k8s-pb` Pod holds at the same tags,
    /// past the fields it skips (an env value among them).
    #[test]
    fn pod_fields_match_the_full_k8s_pb_types() {
        use k8s_pb::api::core::v1 as core;
        use prost::Message as _;
        let some = |text: &str| Some(text.to_owned());
        let pod = core::Pod {
            metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: some("web-7d4f9-abcde"),
                generate_name: some("web-7d4f9-"),
                namespace: some("shop"),
                uid: some("2f1c7a4e-8b1d-4c33-9f5e-0a6b7c8d9e01"),
                labels: [("app".to_owned(), "web".to_owned())].into(),
                creation_timestamp: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::Time {
                    seconds: Some(1_764_619_200),
                    nanos: Some(0),
                }),
                ..Default::default()
            }),
            spec: Some(core::PodSpec {
                containers: vec![core::Container {
                    name: some("app"),
                    image: some("registry.local/web:1"),
                    image_pull_policy: some("Never"),
                    env: vec![core::EnvVar {
                        name: some("PASSWORD"),
                        value: some("hunter2"),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                node_name: some("node-1"),
                scheduler_name: some("default-scheduler"),
                ..Default::default()
            }),
            status: Some(core::PodStatus {
                phase: some("Pending"),
                conditions: vec![core::PodCondition {
                    r#type: some("PodScheduled"),
                    status: some("False"),
                    reason: some("Unschedulable"),
                    message: some("0/1 nodes are available"),
                    ..Default::default()
                }],
                container_statuses: vec![core::ContainerStatus {
                    name: some("app"),
                    state: Some(core::ContainerState {
                        waiting: Some(core::ContainerStateWaiting {
                            reason: some("ErrImageNeverPull"),
                            message: some("image not present"),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let envelope = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: some("v1"),
                kind: some("Pod"),
            }),
            raw: Some(pod.encode_to_vec()),
            ..Default::default()
        };
        let mut value = PROTOBUF_MAGIC.to_vec();
        value.extend(envelope.encode_to_vec());
        let StoredObject::Pod(identity) = decode_stored_object(&value).unwrap() else {
            panic!("not a Pod");
        };
        assert_eq!(identity.name, some("web-7d4f9-abcde"));
        assert_eq!(identity.generate_name, some("web-7d4f9-"));
        assert_eq!(identity.namespace, some("shop"));
        assert_eq!(identity.uid, some("2f1c7a4e-8b1d-4c33-9f5e-0a6b7c8d9e01"));
        assert_eq!(identity.created_unix_s, Some(1_764_619_200));
        assert_eq!(identity.node_name, some("node-1"));
        assert_eq!(identity.scheduler_name, some("default-scheduler"));
        assert_eq!(identity.phase, some("Pending"));
        assert_eq!(
            identity.unschedulable,
            some("Unschedulable: 0/1 nodes are available")
        );
        assert_eq!(
            identity.waiting,
            some("ErrImageNeverPull: image not present")
        );
        assert_eq!(identity.pull_policies, some("app=Never"));
    }

    #[test]
    fn statuses_read_from_json_and_protobuf() {
        use prost::Message as _;
        let json = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"p\" is forbidden: no","reason":"Forbidden","details":{"name":"p","kind":"pods"},"code":403}"#;
        let status = decode_status(json).unwrap();
        assert_eq!(status.reason.as_deref(), Some("Forbidden"));
        assert_eq!(status.code, Some(403));
        assert_eq!(status.name.as_deref(), Some("p"));
        let raw = k8s_pb::apimachinery::pkg::apis::meta::v1::Status {
            message: Some("nope".into()),
            reason: Some("Invalid".into()),
            code: Some(422),
            ..Default::default()
        }
        .encode_to_vec();
        let envelope = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("Status".into()),
            }),
            raw: Some(raw),
            ..Default::default()
        }
        .encode_to_vec();
        let mut body = PROTOBUF_MAGIC.to_vec();
        body.extend(envelope);
        let status = decode_status(&body).unwrap();
        assert_eq!(status.message.as_deref(), Some("nope"));
        assert_eq!(decode_status(br#"{"kind":"Pod"}"#), None);
        assert_eq!(decode_status(b"\x00garbage"), None);
    }

    #[test]
    fn empty_strings_are_unset_as_go_means_them() {
        assert_eq!(set(Some(String::new())), None);
        assert_eq!(set(Some("vm".into())), Some("vm".into()));
    }

    use super::*;
    use crate::testdata;

    fn web_pod() -> StoredObject {
        StoredObject::Pod(Box::new(PodIdentity {
            namespace: Some("default".into()),
            name: Some("web-7d4b9".into()),
            generate_name: Some("web-".into()),
            uid: Some("3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71".into()),
            created_unix_s: Some(1_764_500_000),
            node_name: None,
            phase: Some("Pending".into()),
            scheduler_name: Some("default-scheduler".into()),
            ..PodIdentity::default()
        }))
    }

    #[test]
    fn why_a_pod_waits_is_read_from_its_status() {
        let unschedulable = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","uid":"u"},
            "spec":{"schedulerName":"my-scheduler","containers":[{"name":"main","imagePullPolicy":"Never"}]},
            "status":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable",
            "message":"0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}]}}"#;
        let Ok(StoredObject::Pod(pod)) = decode_stored_object(unschedulable) else {
            panic!("not a Pod");
        };
        assert_eq!(pod.scheduler_name.as_deref(), Some("my-scheduler"));
        assert_eq!(pod.pull_policies.as_deref(), Some("main=Never"));
        assert_eq!(
            pod.unschedulable.as_deref(),
            Some(
                "Unschedulable: 0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
            )
        );
        let never = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","uid":"u"},
            "status":{"phase":"Pending","containerStatuses":[
              {"name":"a","state":{"waiting":{"reason":"ContainerCreating"}}},
              {"name":"b","state":{"waiting":{"reason":"ErrImageNeverPull","message":"Container image \"x\" is not present with pull policy of Never"}}}]}}"#;
        let Ok(StoredObject::Pod(pod)) = decode_stored_object(never) else {
            panic!("not a Pod");
        };
        assert_eq!(
            pod.waiting.as_deref(),
            Some(
                "ErrImageNeverPull: Container image \"x\" is not present with pull policy of Never"
            )
        );
        assert_eq!(pod.unschedulable, None);
    }

    #[test]
    fn protobuf_pod_in_envelope() {
        assert_eq!(
            decode_stored_object(&testdata::bytes("pod-web-7d4b9.k8spb")),
            Ok(web_pod())
        );
    }

    #[test]
    fn creation_time_is_read_without_decoding_the_pod() {
        let value = testdata::bytes("pod-web-7d4b9.k8spb");
        let Ok(StoredObject::Pod(pod)) = decode_stored_object(&value) else {
            panic!("the test Pod decodes");
        };
        assert!(pod.created_unix_s.is_some());
        assert_eq!(pod_created_unix_s(&value), pod.created_unix_s);
        // JSON storage, and a value cut before the time, say nothing.
        assert_eq!(
            pod_created_unix_s(&testdata::bytes("pod-web-7d4b9.json")),
            None
        );
        assert_eq!(pod_created_unix_s(&value[..40]), None);
    }

    #[test]
    fn json_pod() {
        assert_eq!(
            decode_stored_object(&testdata::bytes("pod-web-7d4b9.json")),
            Ok(web_pod())
        );
    }

    #[test]
    fn other_kinds_keep_only_their_type() {
        let value = br#"{"apiVersion":"v1","kind":"Secret","data":{"token":"c2VjcmV0"}}"#;
        assert_eq!(
            decode_stored_object(value),
            Ok(StoredObject::Other {
                api_version: "v1".into(),
                kind: "Secret".into()
            })
        );
    }

    #[test]
    fn cut_envelope_is_an_error() {
        let bytes = testdata::bytes("pod-web-7d4b9.k8spb");
        assert!(matches!(
            decode_stored_object(&bytes[..bytes.len() / 2]),
            Err(KubeError::Protobuf { .. })
        ));
        assert_eq!(
            decode_stored_object(b"hello"),
            Err(KubeError::UnknownEncoding)
        );
    }
}
