//! The span model correlate produces and export consumes, and the ids that
//! let agents on different nodes build one trace per Pod without talking.
//!
//! Ids are derived, not random: the trace id from (cluster id, Pod UID), the
//! ids of well-known spans (the Pod's root span, a node's span) from the trace
//! id and a role. Two agents that see the same Pod compute the same ids, so
//! the spans each exports join in Jaeger or Tempo (ARCHITECTURE.md, "Traces without a collector").

use sha2::{Digest as _, Sha256};
use tracer_common::gofunc::GoFunction;

use crate::decode::grpc_calls::Side;

/// A 16-byte trace id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub [u8; 16]);

/// An 8-byte span id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// The trace of one Pod: the first 16 bytes of SHA-256 over the cluster
    /// id, a NUL, and the Pod UID.
    pub fn for_pod(cluster_id: &str, pod_uid: &str) -> TraceId {
        Self::of_pod(b"podtrace/trace\0", cluster_id, pod_uid)
    }

    /// Lower-case hex, as OTLP-JSON and Jaeger show it.
    pub fn to_hex(self) -> String {
        hex(&self.0)
    }

    /// The trace of a Pod's deletion: like [`TraceId::for_pod`], so that
    /// every agent derives it alike, and apart from the creation's.
    pub fn for_pod_deletion(cluster_id: &str, pod_uid: &str) -> TraceId {
        Self::of_pod(b"podtrace/deletion\0", cluster_id, pod_uid)
    }

    fn of_pod(domain: &[u8], cluster_id: &str, pod_uid: &str) -> TraceId {
        let digest = Sha256::new()
            .chain_update(domain)
            .chain_update(cluster_id.as_bytes())
            .chain_update([0])
            .chain_update(pod_uid.as_bytes())
            .finalize();
        let mut id = [0; 16];
        id.copy_from_slice(&digest[..16]);
        TraceId(id)
    }
}

/// What a span's id is derived from: a causal key every observer of the
/// span sees the same way (a CRI call's side, method and sandbox; a runc
/// run's pid on that node; an etcd write's fingerprint). Its encoding
/// ([`SpanKey::encode`]) is part of the wire between agents — two agents
/// that see one span must derive one id — and of every trace already
/// exported: a variant's text never changes (`tests::ids_are_pinned`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKey<'a> {
    /// The trace's root.
    Root,
    /// A node's span of the Pod.
    Node(&'a str),
    /// One side of a CRI call about a sandbox or container id.
    Cri {
        /// The kubelet's side or containerd's.
        side: Side,
        /// The CRI method.
        method: &'a str,
        /// The sandbox or container id.
        id: &'a str,
    },
    /// The container's first process starting (`exec`) or exiting (`exit`).
    ContainerProcess {
        /// `exec` or `exit`.
        event: &'a str,
        /// The container.
        container_id: &'a str,
        /// Its pid.
        pid: u32,
    },
    /// A CNI plugin's run.
    Cni {
        /// The plugin's executable.
        plugin: &'a str,
        /// Its pid.
        pid: u32,
    },
    /// runc or the shim (containerd runs `runc delete` twice per container:
    /// the pid tells them apart).
    Runtime {
        /// The executable.
        executable: &'a str,
        /// Its subcommand.
        subcommand: &'a str,
        /// The container.
        container_id: &'a str,
        /// Its pid.
        pid: u32,
    },
    /// A probed Go function's call.
    GoCall {
        /// The function.
        function: GoFunction,
        /// The process.
        tgid: u32,
        /// The goroutine.
        goid: u64,
        /// The call's entry, boot ns.
        ts_ns: u64,
    },
    /// A span cut from a probed call (its name tells the parts apart).
    GoCallPart {
        /// The part's span name.
        name: &'a str,
        /// The call's key.
        call: &'a SpanKey<'a>,
    },
    /// kube-apiserver's handling of one request, from its function probes.
    ApiserverRequest {
        /// The process.
        tgid: u32,
        /// The request's goroutine.
        goid: u64,
        /// Its first probe, boot ns.
        start_ns: u64,
    },
    /// kube-apiserver's handling of one request, from the wire only.
    ApiserverStream {
        /// The connection.
        conn_id: u64,
        /// The HTTP/2 stream.
        stream_id: u32,
    },
    /// A component's request to kube-apiserver.
    RestClient {
        /// The client's process.
        tgid: u32,
        /// The connection.
        conn_id: u64,
        /// The HTTP/2 stream.
        stream_id: u32,
    },
    /// One side of an etcd write, by the fingerprint of its request (hex).
    EtcdCall {
        /// The apiserver's side or etcd's.
        side: Side,
        /// The request's fingerprint, hex.
        fingerprint: &'a str,
    },
    /// A follower forwarding a write to the leader.
    EtcdForward {
        /// The request's fingerprint, hex.
        fingerprint: &'a str,
    },
    /// The leader replicating entry `index` to `follower`.
    EtcdReplicate {
        /// The follower's Raft id.
        follower: u64,
        /// The entry.
        index: u64,
    },
    /// Entry `index` committed.
    EtcdCommit(u64),
    /// Entry `index` applied.
    EtcdApply(u64),
    /// A member's WAL append and fdatasync of an entry.
    EtcdWal {
        /// The WAL file's connection id (one per member's file).
        conn_id: u64,
        /// The entry.
        index: u64,
        /// The request's fingerprint, hex.
        fingerprint: &'a str,
    },
}

impl SpanKey<'_> {
    /// The bytes the id is derived from. Never change a variant's text.
    pub fn encode(&self) -> String {
        match *self {
            Self::Root => "root".to_owned(),
            Self::Node(node) => format!("node/{node}"),
            Self::Cri { side, method, id } => {
                let side = match side {
                    Side::Server => "Server",
                    Side::Client => "Client",
                };
                format!("cri/{side}/{method}/{id}")
            }
            Self::ContainerProcess {
                event,
                container_id,
                pid,
            } => format!("container/{event}/{container_id}/{pid}"),
            Self::Cni { plugin, pid } => format!("cni/{plugin}/{pid}"),
            Self::Runtime {
                executable,
                subcommand,
                container_id,
                pid,
            } => format!("{executable}/{subcommand}/{container_id}/{pid}"),
            Self::GoCall {
                function,
                tgid,
                goid,
                ts_ns,
            } => format!("{}/{tgid}/{goid}/{ts_ns}", go_function_key(function)),
            Self::GoCallPart { name, call } => format!("{name}/{}", call.encode()),
            Self::ApiserverRequest {
                tgid,
                goid,
                start_ns,
            } => format!("apiserver/request/{tgid}/{goid}/{start_ns}"),
            Self::ApiserverStream { conn_id, stream_id } => {
                format!("apiserver/stream/{conn_id}/{stream_id}")
            }
            Self::RestClient {
                tgid,
                conn_id,
                stream_id,
            } => format!("rest/client/{tgid}/{conn_id}/{stream_id}"),
            Self::EtcdCall { side, fingerprint } => {
                let side = match side {
                    Side::Client => "client",
                    Side::Server => "server",
                };
                format!("etcd/{side}/{fingerprint}")
            }
            Self::EtcdForward { fingerprint } => format!("etcd/forward/{fingerprint}"),
            Self::EtcdReplicate { follower, index } => {
                format!("etcd/replicate/{follower:x}/{index}")
            }
            Self::EtcdCommit(index) => format!("etcd/commit/{index}"),
            Self::EtcdApply(index) => format!("etcd/apply/{index}"),
            Self::EtcdWal {
                conn_id,
                index,
                fingerprint,
            } => format!("etcd/wal/{conn_id}/{index}/{fingerprint}"),
        }
    }
}

/// A probed function as its calls' keys spell it (the variants' names when
/// the first ids were derived): spelled out so that renaming a variant
/// moves no id.
fn go_function_key(function: GoFunction) -> &'static str {
    match function {
        GoFunction::ApiserverAuthenticate => "ApiserverAuthenticate",
        GoFunction::ApiserverAuthorize => "ApiserverAuthorize",
        GoFunction::ApiserverAdmit => "ApiserverAdmit",
        GoFunction::ApiserverValidate => "ApiserverValidate",
        GoFunction::ApiserverMutatingWebhook => "ApiserverMutatingWebhook",
        GoFunction::ApiserverValidatingWebhook => "ApiserverValidatingWebhook",
        GoFunction::ApiserverStorageCreate => "ApiserverStorageCreate",
        GoFunction::ApiserverStorageUpdate => "ApiserverStorageUpdate",
        GoFunction::ApiserverPodValidate => "ApiserverPodValidate",
        GoFunction::ApiserverPodBinding => "ApiserverPodBinding",
        GoFunction::ApiserverPodStatusUpdate => "ApiserverPodStatusUpdate",
        GoFunction::SchedulerEnqueue => "SchedulerEnqueue",
        GoFunction::SchedulerCycle => "SchedulerCycle",
        GoFunction::SchedulerBind => "SchedulerBind",
        GoFunction::KubeletPodAdditions => "KubeletPodAdditions",
        GoFunction::KubeletSyncPod => "KubeletSyncPod",
        GoFunction::KubeletVolumeWait => "KubeletVolumeWait",
        GoFunction::KubeletStatusSync => "KubeletStatusSync",
    }
}

impl SpanId {
    /// The id of the span `key` names in `trace`: the same on every agent,
    /// and in a replay.
    pub fn of(trace: TraceId, key: &SpanKey<'_>) -> SpanId {
        Self::derived(trace, key.encode().as_bytes())
    }

    /// The id of a span whose key was encoded earlier ([`SpanKey::encode`],
    /// kept while the span waits for its parent).
    pub fn for_key(trace: TraceId, key: &[u8]) -> SpanId {
        Self::derived(trace, key)
    }

    fn derived(trace: TraceId, key: &[u8]) -> SpanId {
        let digest = Sha256::new()
            .chain_update(b"podtrace/span\0")
            .chain_update(trace.0)
            .chain_update(key)
            .finalize();
        let mut id = [0; 8];
        id.copy_from_slice(&digest[..8]);
        // An all-zero span id is invalid in OTLP.
        if id == [0; 8] {
            id[7] = 1;
        }
        SpanId(id)
    }

    /// Lower-case hex.
    pub fn to_hex(self) -> String {
        hex(&self.0)
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut text, b| {
            // Writing to a String cannot fail.
            let _ = write!(text, "{b:02x}");
            text
        })
}

/// OpenTelemetry span kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside one process (the Pod's root, a kubelet phase).
    Internal,
    /// Handling of a request (containerd's side of a CRI call).
    Server,
    /// A request to another component (kubelet's side of a CRI call).
    Client,
}

/// How a span ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpanStatus {
    /// Nothing known to be wrong.
    Unset,
    /// Failed, with a message that carries no payload (a gRPC status, an
    /// HTTP status line, an exit code).
    Error(String),
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    /// A string.
    String(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

/// One span, in unix nanoseconds. Attributes follow OpenTelemetry semantic
/// conventions (`rpc.*`, `k8s.*`, `container.*`, `process.*`, …);
/// podtrace's own are under `podtrace.*`. They never hold payloads,
/// credentials, Secret data or environment values.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The Pod's trace.
    pub trace_id: TraceId,
    /// This span.
    pub span_id: SpanId,
    /// Its parent, if any (the root has none).
    pub parent_span_id: Option<SpanId>,
    /// Name, e.g. `runtime.v1.RuntimeService/RunPodSandbox`.
    pub name: String,
    /// Kind.
    pub kind: SpanKind,
    /// Start, unix ns.
    pub start_unix_ns: u64,
    /// End, unix ns.
    pub end_unix_ns: u64,
    /// Attributes.
    pub attributes: Vec<(String, AttributeValue)>,
    /// Status.
    pub status: SpanStatus,
    /// Spans of other traces this one follows from (a Pod's deletion
    /// links to its creation).
    pub links: Vec<SpanLink>,
}

/// A link to a span of another trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanLink {
    /// The linked span's trace.
    pub trace_id: TraceId,
    /// The linked span.
    pub span_id: SpanId,
}

impl Span {
    /// The value of a string attribute.
    pub fn string_attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find_map(|(name, value)| match value {
                AttributeValue::String(value) if name == key => Some(value.as_str()),
                _ => None,
            })
    }

    /// The value of an integer attribute.
    pub fn int_attribute(&self, key: &str) -> Option<i64> {
        self.attributes
            .iter()
            .find_map(|(name, value)| match value {
                AttributeValue::Int(value) if name == key => Some(*value),
                _ => None,
            })
    }

    /// The value of a boolean attribute.
    pub fn bool_attribute(&self, key: &str) -> Option<bool> {
        self.attributes
            .iter()
            .find_map(|(name, value)| match value {
                AttributeValue::Bool(value) if name == key => Some(*value),
                _ => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_pod_gives_the_same_trace_on_every_agent() {
        let uid = "5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10";
        assert_eq!(TraceId::for_pod("prod", uid), TraceId::for_pod("prod", uid));
        assert_ne!(
            TraceId::for_pod("prod", uid),
            TraceId::for_pod("staging", uid)
        );
        assert_ne!(
            TraceId::for_pod("prod", uid),
            TraceId::for_pod("prod", "another-uid")
        );
    }

    #[test]
    fn well_known_span_ids_are_shared_and_distinct() {
        let trace = TraceId::for_pod("c", "u");
        assert_eq!(
            SpanId::of(trace, &SpanKey::Root),
            SpanId::of(trace, &SpanKey::Root)
        );
        assert_ne!(
            SpanId::of(trace, &SpanKey::Root),
            SpanId::of(trace, &SpanKey::Node("worker-1"))
        );
        assert_ne!(
            SpanId::of(trace, &SpanKey::Root),
            SpanId::of(TraceId::for_pod("c", "v"), &SpanKey::Root)
        );
        assert_ne!(SpanId::for_key(trace, b"x").0, [0; 8]);
    }
    /// Every agent of every version derives the same ids: the derivation
    /// is part of the wire. These values were computed by podtrace's first
    /// release of it; a change that moves one splits traces across agents
    /// (a rolling upgrade) and must fail here.
    #[test]
    fn ids_are_pinned() {
        let uid = "5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10";
        let trace = TraceId::for_pod("prod", uid);
        assert_eq!(trace.to_hex(), "dc56bd41c3d9a8a70545be548e7ae3c2");
        assert_eq!(
            TraceId::for_pod_deletion("prod", uid).to_hex(),
            "f5886f9497c306274a645c77a36f6279"
        );
        assert_eq!(
            SpanId::of(trace, &SpanKey::Root).to_hex(),
            "1c4ded620f397aed"
        );
        assert_eq!(
            SpanId::of(trace, &SpanKey::Node("worker-1")).to_hex(),
            "dcd3b270600ea2e1"
        );
        assert_eq!(
            SpanId::of(
                trace,
                &SpanKey::Cri {
                    side: Side::Server,
                    method: "RunPodSandbox",
                    id: "4ae49f66"
                }
            )
            .to_hex(),
            "9b1e6c67d8a8388d"
        );
    }

    /// Each key's text, pinned: ids are derived from it (and the derivation
    /// is pinned above), so changing one moves every id of its spans.
    #[test]
    fn every_key_encodes_as_pinned() {
        let call = SpanKey::GoCall {
            function: GoFunction::KubeletSyncPod,
            tgid: 7,
            goid: 8,
            ts_ns: 9,
        };
        let cases = [
            (SpanKey::Root, "root"),
            (SpanKey::Node("n"), "node/n"),
            (
                SpanKey::Cri {
                    side: Side::Client,
                    method: "StartContainer",
                    id: "c1",
                },
                "cri/Client/StartContainer/c1",
            ),
            (
                SpanKey::ContainerProcess {
                    event: "exec",
                    container_id: "c1",
                    pid: 5,
                },
                "container/exec/c1/5",
            ),
            (
                SpanKey::Cni {
                    plugin: "ptp",
                    pid: 5,
                },
                "cni/ptp/5",
            ),
            (
                SpanKey::Runtime {
                    executable: "runc",
                    subcommand: "delete",
                    container_id: "c1",
                    pid: 5,
                },
                "runc/delete/c1/5",
            ),
            (call, "KubeletSyncPod/7/8/9"),
            (
                SpanKey::GoCallPart {
                    name: crate::correlate::contract::name::KUBELET_DISPATCH,
                    call: &call,
                },
                "kubelet pod dispatch/KubeletSyncPod/7/8/9",
            ),
            (
                SpanKey::ApiserverRequest {
                    tgid: 7,
                    goid: 8,
                    start_ns: 9,
                },
                "apiserver/request/7/8/9",
            ),
            (
                SpanKey::ApiserverStream {
                    conn_id: 3,
                    stream_id: 5,
                },
                "apiserver/stream/3/5",
            ),
            (
                SpanKey::RestClient {
                    tgid: 7,
                    conn_id: 3,
                    stream_id: 5,
                },
                "rest/client/7/3/5",
            ),
            (
                SpanKey::EtcdCall {
                    side: Side::Server,
                    fingerprint: "ab",
                },
                "etcd/server/ab",
            ),
            (
                SpanKey::EtcdForward { fingerprint: "ab" },
                "etcd/forward/ab",
            ),
            (
                SpanKey::EtcdReplicate {
                    follower: 0xbeef,
                    index: 12,
                },
                "etcd/replicate/beef/12",
            ),
            (SpanKey::EtcdCommit(12), "etcd/commit/12"),
            (SpanKey::EtcdApply(12), "etcd/apply/12"),
            (
                SpanKey::EtcdWal {
                    conn_id: 3,
                    index: 12,
                    fingerprint: "ab",
                },
                "etcd/wal/3/12/ab",
            ),
        ];
        for (key, text) in cases {
            assert_eq!(key.encode(), text);
        }
        // Spelled out, not `Debug`, and apart: two functions of one text
        // would give their calls one id.
        let texts: std::collections::HashSet<_> =
            GoFunction::ALL.into_iter().map(go_function_key).collect();
        assert_eq!(texts.len(), GoFunction::ALL.len());
    }
}
