//! Pod identity: the facts about a Pod that one message reveals, in one type
//! for every protocol (DESIGN.md §6).
//!
//! In: decoded messages of [`crate::etcd`], [`crate::wal`], [`crate::cri`]
//! and [`crate::kube`]. Out: [`PodIdentity`] and [`PodClue`]s that
//! correlation joins: a sandbox id links CRI calls to the Pod whose
//! RunPodSandbox created it, a container id links StartContainer to its sandbox.

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
    memchr::memmem::find(request_body, POD_KEY_PREFIX).is_some()
}

/// Every Pod clue in an etcd KV request: Pod keys, and Pods in written values.
pub fn clues_from_kv_request(request: &crate::etcd::KvRequest) -> Vec<PodClue> {
    let mut clues: Vec<PodClue> = request
        .keys()
        .into_iter()
        .filter_map(pod_from_storage_key)
        .collect();
    clues.dedup();
    for put in request.puts() {
        if pod_from_storage_key(&put.key).is_some() {
            if let Ok(crate::kube::StoredObject::Pod(pod)) =
                crate::kube::decode_stored_object(&put.value)
            {
                clues.push(PodClue::Object(*pod));
            }
        }
    }
    clues
}

#[cfg(test)]
mod tests {
    use super::*;

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
