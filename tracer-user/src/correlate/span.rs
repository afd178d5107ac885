//! The span model correlate produces and export consumes, and the ids that
//! let agents on different nodes build one trace per Pod without talking.
//!
//! Ids are derived, not random: the trace id from (cluster id, Pod UID), the
//! ids of well-known spans (the Pod's root span, a node's span) from the trace
//! id and a role. Two agents that see the same Pod compute the same ids, so
//! the spans each exports join in Jaeger or Tempo (DESIGN.md §7).

use sha2::{Digest as _, Sha256};

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

impl SpanId {
    /// The id of a well-known span of a trace, e.g. `"root"` or
    /// `"node/worker-1"`: the same on every agent.
    pub fn well_known(trace: TraceId, role: &str) -> SpanId {
        Self::derived(trace, role.as_bytes())
    }

    /// The id of a span identified by a causal key every observer of it sees
    /// the same way (a CRI call's sandbox id and method, a runc exec's pid and
    /// start time on that node): deterministic, so a replay exports the same ids.
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
            SpanId::well_known(trace, "root"),
            SpanId::well_known(trace, "root")
        );
        assert_ne!(
            SpanId::well_known(trace, "root"),
            SpanId::well_known(trace, "node/worker-1")
        );
        assert_ne!(
            SpanId::well_known(trace, "root"),
            SpanId::well_known(TraceId::for_pod("c", "v"), "root")
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
            SpanId::well_known(trace, "root").to_hex(),
            "1c4ded620f397aed"
        );
        assert_eq!(
            SpanId::well_known(trace, "node/worker-1").to_hex(),
            "dcd3b270600ea2e1"
        );
        assert_eq!(
            SpanId::for_key(trace, b"cri/Server/RunPodSandbox/4ae49f66").to_hex(),
            "9b1e6c67d8a8388d"
        );
    }
}
