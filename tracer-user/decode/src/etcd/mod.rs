//! etcd's `etcdserverpb.KV` service: Range, Put, DeleteRange, Txn, Compact.
//!
//! In: a [`GrpcCall`] (or method name and message bytes). Out: [`KvRequest`]
//! and [`KvResponse`] holding the prost messages, plus metadata accessors
//! (keys, revision, operation summary) that never expose values. Values can be
//! Secrets: callers that need more than metadata go through
//! [`crate::kube`] for Pods, which keeps only identity fields.

use prost::Message;

use crate::grpc::GrpcCall;
use crate::pb::etcdserverpb as pb;

/// The gRPC service name of etcd's KV API.
pub const KV_SERVICE: &str = "etcdserverpb.KV";

/// A decoded KV request.
#[derive(Clone, PartialEq)]
pub enum KvRequest {
    /// `/etcdserverpb.KV/Range`.
    Range(pb::RangeRequest),
    /// `/etcdserverpb.KV/Put`.
    Put(pb::PutRequest),
    /// `/etcdserverpb.KV/DeleteRange`.
    DeleteRange(pb::DeleteRangeRequest),
    /// `/etcdserverpb.KV/Txn`.
    Txn(pb::TxnRequest),
    /// `/etcdserverpb.KV/Compact`.
    Compact(pb::CompactionRequest),
}

/// What a KV write does to its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Creates keys that must not exist.
    Create,
    /// Writes keys (compare-and-swap on their revision, or blind).
    Update,
    /// Deletes keys.
    Delete,
}

impl WriteKind {
    /// Lower-case name, as `db.operation.name`-style attributes use it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
        }
    }
}

/// A decoded KV response.
#[derive(Clone, PartialEq)]
pub enum KvResponse {
    /// Range result.
    Range(pb::RangeResponse),
    /// Put result.
    Put(pb::PutResponse),
    /// DeleteRange result.
    DeleteRange(pb::DeleteRangeResponse),
    /// Txn result.
    Txn(pb::TxnResponse),
    /// Compact result.
    Compact(pb::CompactionResponse),
}

/// Why KV bytes did not decode. Each message stands alone, so the
/// connection and later calls are unaffected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    /// The method is not one of the KV service's.
    #[error("/{KV_SERVICE}/{method} is not a KV method")]
    UnknownMethod { method: String },
    /// The bytes are not a valid message of the method's type.
    #[error("{method} {what}: {reason}")]
    Protobuf {
        method: String,
        what: &'static str,
        reason: String,
    },
}

impl EtcdError {
    /// Always true: a bad message costs only itself.
    pub fn can_continue(&self) -> bool {
        true
    }
}

fn decode<M: Message + Default>(
    method: &str,
    what: &'static str,
    bytes: &[u8],
) -> Result<M, EtcdError> {
    M::decode(bytes).map_err(|e| EtcdError::Protobuf {
        method: method.into(),
        what,
        reason: e.to_string(),
    })
}

impl KvRequest {
    /// Decodes a request of `method` (`Put`, `Txn`, …).
    pub fn decode(method: &str, bytes: &[u8]) -> Result<Self, EtcdError> {
        Ok(match method {
            "Range" => Self::Range(decode(method, "request", bytes)?),
            "Put" => Self::Put(decode(method, "request", bytes)?),
            "DeleteRange" => Self::DeleteRange(decode(method, "request", bytes)?),
            "Txn" => Self::Txn(decode(method, "request", bytes)?),
            "Compact" => Self::Compact(decode(method, "request", bytes)?),
            _ => {
                return Err(EtcdError::UnknownMethod {
                    method: method.into(),
                });
            }
        })
    }

    /// Every key the request reads or writes, including a Txn's compares and
    /// all its branches' operations, in order.
    pub fn keys(&self) -> Vec<&[u8]> {
        let mut keys = Vec::new();
        match self {
            Self::Range(r) => keys.push(r.key.as_slice()),
            Self::Put(p) => keys.push(p.key.as_slice()),
            Self::DeleteRange(d) => keys.push(d.key.as_slice()),
            Self::Txn(t) => txn_keys(t, &mut keys),
            Self::Compact(_) => {}
        }
        keys
    }

    /// Values written by Put operations (top level or inside a Txn), with their keys.
    pub fn puts(&self) -> Vec<&pb::PutRequest> {
        let mut puts = Vec::new();
        match self {
            Self::Put(p) => puts.push(p),
            Self::Txn(t) => txn_puts(t, &mut puts),
            Self::Range(_) | Self::DeleteRange(_) | Self::Compact(_) => {}
        }
        puts
    }

    /// The request re-encoded: the same bytes for the same request wherever
    /// it was decoded — the client's gRPC message, the server's, and the Raft
    /// entry etcd writes to its WAL (which carries the request message, not
    /// the gRPC bytes) — so it names one write across all three.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        match self {
            Self::Range(r) => r.encode_to_vec(),
            Self::Put(p) => p.encode_to_vec(),
            Self::DeleteRange(d) => d.encode_to_vec(),
            Self::Txn(t) => t.encode_to_vec(),
            Self::Compact(c) => c.encode_to_vec(),
        }
    }

    /// What the request does to the keys it names, as kube-apiserver's
    /// storage layer shapes its writes: a create is a Txn whose compare
    /// requires the key not to exist (`mod_revision == 0`).
    pub fn write_kind(&self) -> Option<WriteKind> {
        match self {
            Self::Range(_) | Self::Compact(_) => None,
            Self::Put(_) => Some(WriteKind::Update),
            Self::DeleteRange(_) => Some(WriteKind::Delete),
            Self::Txn(txn) => {
                let ops = || txn.success.iter().filter_map(|op| op.request.as_ref());
                let creates = txn.compare.iter().any(|c| {
                    c.target == pb::compare::CompareTarget::Mod as i32
                        && c.result == pb::compare::CompareResult::Equal as i32
                        && matches!(
                            c.target_union,
                            Some(pb::compare::TargetUnion::ModRevision(0))
                        )
                });
                if ops().any(|op| matches!(op, pb::request_op::Request::RequestDeleteRange(_))) {
                    Some(WriteKind::Delete)
                } else if ops().any(|op| matches!(op, pb::request_op::Request::RequestPut(_))) {
                    Some(if creates {
                        WriteKind::Create
                    } else {
                        WriteKind::Update
                    })
                } else {
                    None
                }
            }
        }
    }

    /// The method name.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Range(_) => "Range",
            Self::Put(_) => "Put",
            Self::DeleteRange(_) => "DeleteRange",
            Self::Txn(_) => "Txn",
            Self::Compact(_) => "Compact",
        }
    }
}

/// Whether an etcd request `message` reads keys and writes nothing: it
/// decodes as a `RangeRequest` whose key is a key (kube-apiserver's all
/// begin with `/`) and whose range end, if any, is one too. kube-apiserver
/// writes only in Txns, whose first field is a comparison (a message: its
/// first byte a field tag, never `/`) and whose failure operations do not
/// decode as a Range's `limit`; the value a Put writes is an object, not a
/// key. A DeleteRange has a Range's shape: it creates nothing.
pub fn reads_keys_only(message: &[u8]) -> bool {
    pb::RangeRequest::decode(message).is_ok_and(|range| {
        range.key.starts_with(b"/")
            && (range.range_end.is_empty() || range.range_end.starts_with(b"/"))
    })
}

fn txn_keys<'a>(txn: &'a pb::TxnRequest, keys: &mut Vec<&'a [u8]>) {
    keys.extend(txn.compare.iter().map(|c| c.key.as_slice()));
    for op in txn.success.iter().chain(&txn.failure) {
        match &op.request {
            Some(pb::request_op::Request::RequestRange(r)) => keys.push(&r.key),
            Some(pb::request_op::Request::RequestPut(p)) => keys.push(&p.key),
            Some(pb::request_op::Request::RequestDeleteRange(d)) => keys.push(&d.key),
            Some(pb::request_op::Request::RequestTxn(t)) => txn_keys(t, keys),
            None => {}
        }
    }
}

fn txn_puts<'a>(txn: &'a pb::TxnRequest, puts: &mut Vec<&'a pb::PutRequest>) {
    for op in txn.success.iter().chain(&txn.failure) {
        match &op.request {
            Some(pb::request_op::Request::RequestPut(p)) => puts.push(p),
            Some(pb::request_op::Request::RequestTxn(t)) => txn_puts(t, puts),
            _ => {}
        }
    }
}

impl KvResponse {
    /// Decodes a response of `method`.
    pub fn decode(method: &str, bytes: &[u8]) -> Result<Self, EtcdError> {
        Ok(match method {
            "Range" => Self::Range(decode(method, "response", bytes)?),
            "Put" => Self::Put(decode(method, "response", bytes)?),
            "DeleteRange" => Self::DeleteRange(decode(method, "response", bytes)?),
            "Txn" => Self::Txn(decode(method, "response", bytes)?),
            "Compact" => Self::Compact(decode(method, "response", bytes)?),
            _ => {
                return Err(EtcdError::UnknownMethod {
                    method: method.into(),
                });
            }
        })
    }

    /// The store revision in the response header (after the write, for writes).
    pub fn revision(&self) -> Option<i64> {
        let header = match self {
            Self::Range(r) => r.header.as_ref(),
            Self::Put(p) => p.header.as_ref(),
            Self::DeleteRange(d) => d.header.as_ref(),
            Self::Txn(t) => t.header.as_ref(),
            Self::Compact(c) => c.header.as_ref(),
        };
        header.map(|h| h.revision)
    }

    /// For a Txn: whether the compares held (the success branch ran).
    pub fn txn_succeeded(&self) -> Option<bool> {
        match self {
            Self::Txn(t) => Some(t.succeeded),
            _ => None,
        }
    }
}

// Requests and responses carry values: Debug prints metadata only.
impl std::fmt::Debug for KvRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<_> = self
            .keys()
            .into_iter()
            .map(String::from_utf8_lossy)
            .collect();
        f.debug_struct("KvRequest")
            .field("method", &self.method())
            .field("keys", &keys)
            .finish()
    }
}

impl std::fmt::Debug for KvResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvResponse")
            .field("revision", &self.revision())
            .field("txn_succeeded", &self.txn_succeeded())
            .finish_non_exhaustive()
    }
}

/// An etcd KV call: what a gRPC call to `etcdserverpb.KV` decodes to.
#[derive(Debug, Clone, PartialEq)]
pub struct KvCall {
    /// The request, if captured and decodable.
    pub request: Option<Result<KvRequest, EtcdError>>,
    /// The response, if captured and decodable.
    pub response: Option<Result<KvResponse, EtcdError>>,
}

impl KvCall {
    /// The method of a gRPC call to the KV service (`Txn`, `Put`, …); `None`
    /// for other services. For a caller that decodes the messages itself.
    pub fn method_of(call: &GrpcCall) -> Option<&str> {
        if call.service.as_deref() != Some(KV_SERVICE) {
            return None;
        }
        call.method.as_deref()
    }

    /// Decodes a gRPC call to the KV service; `None` for other services or
    /// calls whose method is unknown.
    pub fn from_grpc(call: &GrpcCall) -> Option<KvCall> {
        let method = Self::method_of(call)?;
        Some(KvCall {
            request: call.request_bytes().map(|b| KvRequest::decode(method, b)),
            response: call.response_bytes().map(|b| KvResponse::decode(method, b)),
        })
    }
}

#[cfg(test)]
mod tests;
