//! Which connections stop being copied: etcd clients of one resource other
//! than Pods, and clients writing under Pod keys values that are no stored
//! object ([`KeysSeen`]).

use super::*;

/// What a connection's etcd KV requests named so far: whether the
/// connection can be muted.
#[derive(Debug, Default)]
pub(super) enum KeysSeen {
    #[default]
    Nothing,
    /// This many finished requests, all of keys of this one resource.
    One { resource: Box<[u8]>, requests: u32 },
    /// This many finished requests, each writing under Pod keys only values
    /// that are no stored object ([`writes_only_opaque_pods`]): not
    /// kube-apiserver, whose every Pod write is its protobuf, JSON or
    /// encrypted at rest. Its bytes cost a copy and a decode each, and can
    /// never become a span.
    OpaquePods { requests: u32 },
    /// Pods, several resources, compressed requests, or not etcd: kept.
    Kept,
}

impl KeysSeen {
    /// Notes a finished exchange; returns whether the connection has now
    /// carried `mute_after` requests of one resource other than Pods, or
    /// of values under Pod keys that are no stored object.
    pub(super) fn note(&mut self, exchange: &Exchange, mute_after: u32) -> bool {
        if matches!(self, Self::Kept) {
            return false;
        }
        let Some(path) = exchange.path() else {
            // Headers lost (a stream begun before podtrace): not counted.
            return false;
        };
        if !path.starts_with("/etcdserverpb.") {
            *self = Self::Kept;
            return false;
        }
        if !path.starts_with("/etcdserverpb.KV/") {
            // Leases, watches, maintenance: no key decides anything.
            return false;
        }
        if exchange.request.header("grpc-encoding").is_some() {
            *self = Self::Kept;
            return false;
        }
        let named = match resources_named(&exchange.request.body) {
            ResourcesNamed::None => return false,
            // A body seen only in part (bytes lost, over the body limit, a
            // stream cut at exit) can tell neither kind of Pod write: it
            // neither keeps nor counts.
            ResourcesNamed::PodsOrSeveral if !seen_whole(&exchange.request) => return false,
            ResourcesNamed::PodsOrSeveral if opaque_pod_writes(path, &exchange.request.body) => {
                *self = match self {
                    Self::Nothing => Self::OpaquePods { requests: 1 },
                    Self::OpaquePods { requests } => Self::OpaquePods {
                        requests: *requests + 1,
                    },
                    _ => Self::Kept,
                };
                return matches!(self, Self::OpaquePods { requests } if *requests >= mute_after);
            }
            ResourcesNamed::PodsOrSeveral => None,
            ResourcesNamed::One(resource) => Some(resource),
        };
        *self = match (std::mem::take(self), named) {
            (Self::Nothing, Some(resource)) => Self::One {
                resource: resource.into(),
                requests: 1,
            },
            (Self::One { resource, requests }, Some(named)) if *resource == *named => Self::One {
                resource,
                requests: requests + 1,
            },
            _ => Self::Kept,
        };
        matches!(self, Self::One { requests, .. } if *requests >= mute_after)
    }
}

/// Whether every byte of a request's side was seen and kept.
fn seen_whole(half: &HalfStream) -> bool {
    half.ended && !half.lossy && half.body_bytes_dropped == 0
}

/// Whether the gRPC request `body` of KV method `path` writes only values
/// under Pod keys that are no stored object ([`writes_only_opaque_pods`]).
/// Decoded in full only while a connection has not been kept (its first
/// Pod request that is kube-apiserver's keeps it).
fn opaque_pod_writes(path: &str, body: &[u8]) -> bool {
    let Some(method) = path.strip_prefix("/etcdserverpb.KV/") else {
        return false;
    };
    let Ok(Decoded::Message { msg, consumed }) = parse_message(body) else {
        return false;
    };
    consumed == body.len()
        && !msg.compressed
        && KvRequest::decode(method, msg.bytes)
            .is_ok_and(|request| writes_only_opaque_pods(&request))
}
