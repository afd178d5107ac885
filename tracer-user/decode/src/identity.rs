//! Pod identity: the facts about a Pod that one message reveals, in one type
//! for every protocol (ARCHITECTURE.md, "Data flow").
//!
//! In: decoded messages of [`crate::etcd`], [`crate::wal`], [`crate::cri`]
//! and [`crate::kube`]. Out: [`PodIdentity`] and [`PodClue`]s that
//! correlation joins: a sandbox id links CRI calls to the Pod whose
//! RunPodSandbox created it, a container id links StartContainer to its sandbox.

use std::sync::LazyLock;

use memchr::memmem;

/// Identity fields of a Pod, as far as one message shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodIdentity {
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.generateName`.
    pub generate_name: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.creationTimestamp`, unix seconds (the apiserver's clock,
    /// whole seconds).
    pub created_unix_s: Option<i64>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `spec.schedulerName`.
    pub scheduler_name: Option<String>,
    /// Why the scheduler could not place it: the `PodScheduled` condition's
    /// message while it is `False` (`0/3 nodes are available: …`).
    pub unschedulable: Option<String>,
    /// Why a container is not running: the first waiting reason other than
    /// the normal `ContainerCreating`/`PodInitializing`, with its message
    /// (`ErrImageNeverPull: Container image "x" is not present …`).
    pub waiting: Option<String>,
    /// Each container's `imagePullPolicy`, `NAME=POLICY` comma-joined.
    pub pull_policies: Option<String>,
}

/// One fact about a Pod from one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodClue {
    /// An etcd key `/registry/pods/{namespace}/{name}` written or read.
    StorageKey { namespace: String, name: String },
    /// A Pod object (etcd value, REST body, watch event).
    Object(PodIdentity),
    /// CRI RunPodSandbox: the Pod's metadata and, from the response, the sandbox id.
    Sandbox {
        pod: PodIdentity,
        sandbox_id: Option<String>,
    },
    /// A CRI call about a sandbox (CreateContainer, StopPodSandbox, …); the
    /// container id is present when the response named one.
    SandboxCall {
        sandbox_id: String,
        container_id: Option<String>,
    },
    /// A CRI call about a container (StartContainer, ContainerStatus, …).
    Container { container_id: String },
}

/// The namespace and name in an etcd Pod key, for the default `/registry`
/// prefix (`--etcd-prefix` of kube-apiserver).
pub fn pod_from_storage_key(key: &[u8]) -> Option<PodClue> {
    let rest = key.strip_prefix(POD_KEY_PREFIX)?;
    let rest = std::str::from_utf8(rest).ok()?;
    let (namespace, name) = rest.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then(|| {
        PodClue::StorageKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    })
}

/// Where kube-apiserver stores Pods in etcd.
const POD_KEY_PREFIX: &[u8] = b"/registry/pods/";

/// Whether an uncompressed etcd KV request body can hold a Pod clue at all:
/// every clue comes from a key under [`POD_KEY_PREFIX`], whose bytes appear
/// verbatim in the protobuf. Most of a control plane's writes (leases,
/// events, endpoints) fail this scan and are never decoded.
pub fn may_hold_pod_clue(request_body: &[u8]) -> bool {
    // Built once: building the searcher cost as much as a 2 KiB scan, and
    // this runs on every etcd request and WAL entry.
    static POD_KEYS: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(POD_KEY_PREFIX));
    POD_KEYS.find(request_body).is_some()
}

/// When the Pods an etcd write request stores were created (the latest, in
/// unix seconds), read from the request's bytes without decoding it. Most Pod
/// writes of a running cluster are status updates of Pods long up; this tells
/// them from writes of a Pod being created at a fraction of a decode. `None`
/// unless the request is a Put, or a Txn whose branches only put and read,
/// that puts at least one Pod, and every Pod it puts says when it was
/// created: for a delete, a nested Txn, a Pod stored as JSON or bytes that
/// do not parse, the caller decodes the request.
pub fn pods_put_created_unix_s(method: &str, request: &[u8]) -> Option<i64> {
    use crate::pb_fields::{Payload, bytes_field, fields};
    // Tags of etcdserverpb (rpc.proto): PutRequest key 1, value 2;
    // TxnRequest success 2, failure 3; RequestOp range 1, put 2.
    let mut latest: Option<i64> = None;
    let mut put = |put: &[u8]| -> Option<()> {
        if bytes_field(put, 1)?.starts_with(POD_KEY_PREFIX) {
            let created = crate::kube::pod_created_unix_s(bytes_field(put, 2)?)?;
            latest = Some(latest.map_or(created, |latest| latest.max(created)));
        }
        Some(())
    };
    match method {
        "Put" => put(request)?,
        "Txn" => {
            for field in fields(request) {
                let (2 | 3, Payload::Bytes(op)) = field? else {
                    continue;
                };
                for op_field in fields(op) {
                    match op_field? {
                        (1, _) => {}
                        (2, Payload::Bytes(request_put)) => put(request_put)?,
                        _ => return None,
                    }
                }
            }
        }
        _ => return None,
    }
    latest
}

/// Where kube-apiserver's keys start (the default `--etcd-prefix`).
const REGISTRY_PREFIX: &[u8] = b"/registry/";
/// Longest resource segment looked at (`/registry/{segment}/…`): a group
/// name of a custom resource is a DNS subdomain.
const MAX_SEGMENT_BYTES: usize = 253;

/// Which resources' keys an uncompressed etcd KV request body names, by the
/// first segment after `/registry/` (`leases`, `events`, a custom
/// resource's group). kube-apiserver opens one etcd client per resource, so
/// a connection whose requests all name one resource other than Pods will
/// never carry a Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourcesNamed<'a> {
    /// No key under `/registry/` (a lease grant, a compaction, a range end).
    None,
    /// Keys of this one resource only.
    One(&'a [u8]),
    /// Pod keys, or keys of more than one resource.
    PodsOrSeveral,
}

/// [`ResourcesNamed`] of `request_body`. A segment is only counted when a
/// `/` ends it, so that a range end (`/registry/leases0`) does not count as
/// another resource; bytes of a value that look like a key count too, which
/// errs towards [`ResourcesNamed::PodsOrSeveral`].
pub fn resources_named(request_body: &[u8]) -> ResourcesNamed<'_> {
    let mut named = ResourcesNamed::None;
    static REGISTRY_KEYS: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(REGISTRY_PREFIX));
    for at in REGISTRY_KEYS.find_iter(request_body) {
        let rest = &request_body[at + REGISTRY_PREFIX.len()..];
        let rest = &rest[..rest.len().min(MAX_SEGMENT_BYTES + 1)];
        let Some(end) = memchr::memchr(b'/', rest) else {
            continue;
        };
        let segment = &rest[..end];
        let plausible = !segment.is_empty()
            && segment
                .iter()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_'));
        if !plausible {
            continue;
        }
        named = match named {
            _ if segment == b"pods" => return ResourcesNamed::PodsOrSeveral,
            ResourcesNamed::None => ResourcesNamed::One(segment),
            ResourcesNamed::One(first) if first == segment => named,
            _ => return ResourcesNamed::PodsOrSeveral,
        };
    }
    named
}

/// Every Pod clue in an etcd KV request: Pod keys, and Pods in written values.
pub fn clues_from_kv_request(request: &crate::etcd::KvRequest) -> Vec<PodClue> {
    clues_from_kv_request_with(request, pod_in_value)
}

/// The Pod an etcd value stores, if it stores one.
pub fn pod_in_value(value: &[u8]) -> Option<PodIdentity> {
    match crate::kube::decode_stored_object(value) {
        Ok(crate::kube::StoredObject::Pod(pod)) => Some(*pod),
        _ => None,
    }
}

/// The prefix of a value encrypted at rest by kube-apiserver
/// (`k8s:enc:PROVIDER:v1:NAME:`): a Pod only its key names.
const ENCRYPTED_VALUE_PREFIX: &[u8] = b"k8s:enc:";

/// Whether `value`, written under a Pod key, is no object kube-apiserver
/// stores: neither its protobuf nor JSON, nor encrypted at rest. Such a
/// write is not kube-apiserver's, and names no Pod podtrace can follow.
pub fn opaque_value(value: &[u8]) -> bool {
    !value.starts_with(crate::kube::PROTOBUF_MAGIC)
        && !value.starts_with(ENCRYPTED_VALUE_PREFIX)
        && value.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'{')
}

/// Whether `request` writes values under Pod keys, each an
/// [`opaque_value`], and names no other key: a client that is not
/// kube-apiserver storing what podtrace cannot read. A read, a write of
/// another key or of a stored object says no.
pub fn writes_only_opaque_pods(request: &crate::etcd::KvRequest) -> bool {
    let puts = request.puts();
    !puts.is_empty()
        && puts.iter().all(|put| opaque_value(&put.value))
        && request
            .keys()
            .into_iter()
            .all(|key| pod_from_storage_key(key).is_some())
}

/// [`clues_from_kv_request`], with the Pods in values written under Pod keys
/// decoded by `decode_pod` (a caller that sees the same value several times
/// can keep what it decoded). A Pod key written an [`opaque_value`] is no
/// clue: the write is not kube-apiserver's storing a Pod.
pub fn clues_from_kv_request_with(
    request: &crate::etcd::KvRequest,
    mut decode_pod: impl FnMut(&[u8]) -> Option<PodIdentity>,
) -> Vec<PodClue> {
    let puts = request.puts();
    let opaque: Vec<&[u8]> = puts
        .iter()
        .filter(|put| opaque_value(&put.value))
        .map(|put| put.key.as_slice())
        .collect();
    let mut clues: Vec<PodClue> = request
        .keys()
        .into_iter()
        .filter(|key| !opaque.contains(key))
        .filter_map(pod_from_storage_key)
        .collect();
    clues.dedup();
    for put in puts {
        if pod_from_storage_key(&put.key).is_some() && !opaque_value(&put.value) {
            if let Some(pod) = decode_pod(&put.value) {
                clues.push(PodClue::Object(pod));
            }
        }
    }
    clues
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_named_by_first_segment() {
        let lease = b"\x0a\x2a/registry/leases/kube-node-lease/node-1\x12\x04....";
        assert_eq!(resources_named(lease), ResourcesNamed::One(b"leases"));
        // The cacher's list: key and range end of one prefix.
        let list = b"\x0a\x10/registry/leases/\x12\x10/registry/leases0";
        assert_eq!(resources_named(list), ResourcesNamed::One(b"leases"));
        let crd = b"/registry/example.com/widgets/default/w";
        assert_eq!(resources_named(crd), ResourcesNamed::One(b"example.com"));
        assert_eq!(resources_named(b"compact_rev_key"), ResourcesNamed::None);
        assert_eq!(resources_named(b"/registry/"), ResourcesNamed::None);
        let pod = b"/registry/pods/default/web";
        assert_eq!(resources_named(pod), ResourcesNamed::PodsOrSeveral);
        let two = b"/registry/leases/a/b /registry/events/a/b";
        assert_eq!(resources_named(two), ResourcesNamed::PodsOrSeveral);
        let then_pod = b"/registry/leases/a/b /registry/pods/a/b";
        assert_eq!(resources_named(then_pod), ResourcesNamed::PodsOrSeveral);
        // Not a segment: binary after the prefix.
        let binary = b"/registry/\xff\x00/x /registry/events/a/b";
        assert_eq!(resources_named(binary), ResourcesNamed::One(b"events"));
    }

    #[test]
    fn only_bodies_that_mention_a_pod_key_pass_the_pre_filter() {
        // A TxnRequest's compare key, as protobuf bytes: field 1, then the key.
        let lease = b"\x0a\x1e\x12\x1c/registry/leases/kube-node-lease/n1";
        let pod = b"\x0a\x1e\x12\x1c/registry/pods/default/web-0";
        assert!(!may_hold_pod_clue(lease));
        assert!(may_hold_pod_clue(pod));
        assert!(!may_hold_pod_clue(b""));
    }

    #[test]
    fn recorded_txn_create_yields_key_and_uid() {
        let mut connection = crate::http2::Http2Connection::default();
        for chunk in crate::testdata::chunks("etcdctl-txn-create-pod.rec") {
            connection.push(&chunk);
        }
        let exchanges = connection.finish();
        let call = exchanges
            .iter()
            .find_map(crate::grpc::GrpcCall::from_exchange)
            .expect("a gRPC call");
        let Some(crate::etcd::KvCall {
            request: Some(Ok(request)),
            ..
        }) = crate::etcd::KvCall::from_grpc(&call)
        else {
            panic!("not a KV call: {call:?}")
        };
        let clues = clues_from_kv_request(&request);
        assert_eq!(
            clues[0],
            PodClue::StorageKey {
                namespace: "default".into(),
                name: "web-7d4b9".into()
            }
        );
        let Some(PodClue::Object(pod)) = clues.get(1) else {
            panic!("{clues:?}")
        };
        assert_eq!(
            pod.uid.as_deref(),
            Some("3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71")
        );
    }

    #[test]
    fn creation_times_of_pods_put_are_read_without_decoding_the_request() {
        use prost::Message as _;

        use crate::pb::etcdserverpb::{
            Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, compare,
            request_op::Request,
        };
        let key = b"/registry/pods/default/web-7d4b9".to_vec();
        let pod = crate::testdata::bytes("pod-web-7d4b9.k8spb");
        let created = pod_in_value(&pod).and_then(|pod| pod.created_unix_s);
        assert!(created.is_some());
        let op = |request| RequestOp {
            request: Some(request),
        };
        let put = |key: &[u8], value: &[u8]| {
            op(Request::RequestPut(PutRequest {
                key: key.to_vec(),
                value: value.to_vec(),
                ..PutRequest::default()
            }))
        };
        // kube-apiserver's GuaranteedUpdate: compare the revision, put, or
        // read the key back.
        let update = TxnRequest {
            compare: vec![Compare {
                target: compare::CompareTarget::Mod as i32,
                key: key.clone(),
                target_union: Some(compare::TargetUnion::ModRevision(41)),
                ..Compare::default()
            }],
            success: vec![put(&key, &pod)],
            failure: vec![op(Request::RequestRange(RangeRequest {
                key: key.clone(),
                ..RangeRequest::default()
            }))],
        };
        assert_eq!(
            pods_put_created_unix_s("Txn", &update.encode_to_vec()),
            created
        );
        let blind_put = PutRequest {
            key: key.clone(),
            value: pod.clone(),
            ..PutRequest::default()
        };
        assert_eq!(
            pods_put_created_unix_s("Put", &blind_put.encode_to_vec()),
            created
        );
        // A delete, a lease, a Pod stored as JSON, a cut request: decoded in full.
        let delete = TxnRequest {
            success: vec![op(Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.clone(),
                ..DeleteRangeRequest::default()
            }))],
            ..update.clone()
        };
        let lease = TxnRequest {
            success: vec![put(b"/registry/leases/kube-node-lease/n1", b"k8s\0lease")],
            ..TxnRequest::default()
        };
        let json = TxnRequest {
            success: vec![put(&key, &crate::testdata::bytes("pod-web-7d4b9.json"))],
            ..TxnRequest::default()
        };
        let update = update.encode_to_vec();
        for (what, request) in [
            ("delete", delete.encode_to_vec()),
            ("lease", lease.encode_to_vec()),
            ("json", json.encode_to_vec()),
            ("cut", update[..update.len() - 10].to_vec()),
        ] {
            assert_eq!(pods_put_created_unix_s("Txn", &request), None, "{what}");
        }
        assert_eq!(pods_put_created_unix_s("Range", &update), None);
    }

    /// A Pod key written bytes that are no stored object (not kube-apiserver's
    /// write) names no Pod: dropped at the first check, however many come.
    /// One encrypted at rest still names its Pod by its key; a delete too.
    #[test]
    fn a_pod_key_written_an_opaque_value_is_no_clue() {
        use crate::pb::etcdserverpb::{
            Compare, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest, compare,
            request_op::Request,
        };
        let key = b"/registry/pods/default/web".to_vec();
        let txn = |value: &[u8]| {
            crate::etcd::KvRequest::Txn(TxnRequest {
                compare: vec![Compare {
                    target: compare::CompareTarget::Mod as i32,
                    key: key.clone(),
                    target_union: Some(compare::TargetUnion::ModRevision(0)),
                    ..Compare::default()
                }],
                success: vec![RequestOp {
                    request: Some(Request::RequestPut(PutRequest {
                        key: key.clone(),
                        value: value.to_vec(),
                        ..PutRequest::default()
                    })),
                }],
                failure: Vec::new(),
            })
        };
        let by_key = PodClue::StorageKey {
            namespace: "default".into(),
            name: "web".into(),
        };
        for opaque in [&b"\x93\x1f\x00binary"[..], b"", b"k8s-not-magic"] {
            let mut decoded = 0;
            let clues = clues_from_kv_request_with(&txn(opaque), |_| {
                decoded += 1;
                None
            });
            assert!(clues.is_empty(), "{opaque:?}: {clues:?}");
            assert_eq!(decoded, 0, "not decoded");
            assert!(writes_only_opaque_pods(&txn(opaque)), "{opaque:?}");
        }
        let encrypted = txn(b"k8s:enc:aescbc:v1:key1:\x01\x02");
        assert_eq!(
            clues_from_kv_request(&encrypted),
            std::slice::from_ref(&by_key)
        );
        let delete = crate::etcd::KvRequest::DeleteRange(DeleteRangeRequest {
            key: key.clone(),
            ..DeleteRangeRequest::default()
        });
        assert_eq!(clues_from_kv_request(&delete), [by_key]);
        // What kube-apiserver writes, a read, and an opaque write beside
        // another resource's key are not "only opaque Pod writes".
        let mut beside_a_lease = txn(b"\x93binary");
        if let crate::etcd::KvRequest::Txn(request) = &mut beside_a_lease {
            request.compare[0].key = b"/registry/leases/kube-node-lease/n1".to_vec();
        }
        for not_only in [
            encrypted,
            txn(b"k8s\x00\x0a\x09\x0a\x02v1\x12\x03Pod"),
            txn(b"{\"kind\":\"Pod\"}"),
            delete,
            beside_a_lease,
        ] {
            assert!(!writes_only_opaque_pods(&not_only), "{not_only:?}");
        }
    }

    #[test]
    fn storage_keys() {
        assert_eq!(
            pod_from_storage_key(b"/registry/pods/default/web"),
            Some(PodClue::StorageKey {
                namespace: "default".into(),
                name: "web".into()
            })
        );
        assert_eq!(pod_from_storage_key(b"/registry/pods/default/"), None);
        assert_eq!(
            pod_from_storage_key(b"/registry/configmaps/default/web"),
            None
        );
    }
}
