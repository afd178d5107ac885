//! What was decoded from bytes seen before, kept by a hash of the bytes.
//!
//! One Pod write shows the same bytes up to three times on a control-plane
//! node: kube-apiserver's gRPC Txn and etcd's view of it are the same
//! message byte for byte, and the WAL entry holds the same Pod value.
//! Decoding them was most of the agent's work on a Pod write load; a second
//! sighting now costs a hash: [`PodValues`] for the Pod in a value,
//! [`KvRequests`] for what a whole KV request says (all three, when etcd's
//! encoding of the WAL entry's request is the client's, as it usually is).

use std::{
    collections::VecDeque,
    hash::{Hash as _, Hasher as _},
    sync::Arc,
};

use rustc_hash::FxHashMap;
use tracer_decode::{
    etcd::{KvRequest, WriteKind},
    identity::{
        PodClue, PodIdentity, clues_from_kv_request_with, opaque_value, pod_from_storage_key,
        pod_in_value, pods_put_created_unix_s,
    },
};

use super::follow_window::FollowWindow;

/// Entries kept per cache: writes in flight at once, several sightings
/// each, with room.
const MAX_ENTRIES: usize = 256;

/// Both caches, as the decoders take them, and what need not be decoded.
#[derive(Debug, Default)]
pub struct DecodedOnce {
    /// Pods in etcd values.
    pub pods: PodValues,
    /// etcd KV requests that name Pods.
    pub kv_requests: KvRequests,
    /// Pods whose writes may be part of a followed creation (`None`: all).
    pub window: Option<FollowWindow>,
    /// Requests not decoded: they only wrote Pods outside the window.
    pub not_followed: u64,
}

impl DecodedOnce {
    /// The facts of the `method` request in `message`, seen at `ts_ns`
    /// (see [`KvRequests::facts`]). A request that only writes Pods whose
    /// creation is not followed — most Pod writes of a running cluster:
    /// status updates of Pods long up — is not decoded: no span comes of
    /// it, and telling so from the Pods' creation times costs a fraction of
    /// the decode, and of the hash that finds an earlier one.
    pub fn kv_request(
        &mut self,
        method: &str,
        message: &[u8],
        ts_ns: u64,
    ) -> Option<KvRequestFacts> {
        if let Some(window) = &self.window {
            let created = pods_put_created_unix_s(method, message);
            if created.is_some_and(|created| !window.may_follow(created, ts_ns)) {
                self.not_followed += 1;
                return None;
            }
        }
        self.kv_requests.facts(method, message, &mut self.pods)
    }
}

/// A bounded first-in first-out map from the 128-bit hash of some bytes to
/// what they decoded to, counting decodes and reuses.
#[derive(Debug)]
struct ByDigest<V> {
    entries: FxHashMap<[u8; 16], V>,
    order: VecDeque<[u8; 16]>,
    /// Bytes decoded (misses), and sightings answered from the cache.
    decoded: u64,
    reused: u64,
}

impl<V> Default for ByDigest<V> {
    fn default() -> Self {
        Self {
            entries: FxHashMap::default(),
            order: VecDeque::new(),
            decoded: 0,
            reused: 0,
        }
    }
}

impl<V: Clone> ByDigest<V> {
    /// What the bytes of digest `key` decode to, by `decode` the first time.
    fn get_or_decode(&mut self, key: [u8; 16], decode: impl FnOnce() -> V) -> V {
        if let Some(value) = self.entries.get(&key) {
            self.reused += 1;
            return value.clone();
        }
        self.decoded += 1;
        let value = decode();
        if self.order.len() >= MAX_ENTRIES {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
        self.order.push_back(key);
        self.entries.insert(key, value.clone());
        value
    }
}

/// The cache key of `bytes`. 128 bits: a collision would give one Pod write
/// another's identity.
fn digest(seed: u64, bytes: &[u8]) -> [u8; 16] {
    twox_hash::XxHash3_128::oneshot_with_seed(seed, bytes).to_le_bytes()
}

/// Pods decoded from etcd values.
#[derive(Debug, Default)]
pub struct PodValues(ByDigest<Option<PodIdentity>>);

impl PodValues {
    /// The Pod stored in `value`, if it is one.
    pub fn pod(&mut self, value: &[u8]) -> Option<PodIdentity> {
        self.0
            .get_or_decode(digest(0, value), || pod_in_value(value))
    }

    /// Values decoded, and sightings answered from the cache.
    pub fn counts(&self) -> (u64, u64) {
        (self.0.decoded, self.0.reused)
    }
}

/// What an etcd KV write request says about Pods, from its message bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvRequestFacts {
    /// `Txn`, `Put`, `DeleteRange`.
    pub method: &'static str,
    /// Create, update or delete; `None` for a read (a Range in a WAL entry).
    pub write: Option<WriteKind>,
    /// The Pod keys and the identity in written Pod objects (shared: every
    /// sighting of the request hands on the same).
    pub clues: Arc<[PodClue]>,
    /// See [`request_fingerprint`].
    pub fingerprint: [u8; 16],
}

/// The digest that names a KV request wherever it was seen.
pub fn request_fingerprint(request: &KvRequest) -> [u8; 16] {
    // XXH3-128, not a cryptographic digest: the fingerprint only has to
    // tell apart the writes in flight at once, and SHA-256 of every Pod
    // request (three times a write: client, server, WAL) was 5 % of the
    // agent's time on a Pod write load.
    twox_hash::XxHash3_128::oneshot(&request.canonical_bytes()).to_le_bytes()
}

/// etcd KV requests decoded from gRPC messages.
#[derive(Debug, Default)]
pub struct KvRequests {
    decoded: ByDigest<Option<KvRequestFacts>>,
    /// Requests that wrote only values that are no stored object under Pod
    /// keys (not kube-apiserver's writes): no clue, no span.
    pub opaque: u64,
}

impl KvRequests {
    /// The facts of the `method` request in `message` (uncompressed: from
    /// the wire, or a WAL entry's), if it decodes and names a Pod; `pods`
    /// decodes the values it writes.
    pub fn facts(
        &mut self,
        method: &str,
        message: &[u8],
        pods: &mut PodValues,
    ) -> Option<KvRequestFacts> {
        // The method is part of what the bytes mean: a Put and a Txn could
        // in principle share them.
        let mut seed = rustc_hash::FxHasher::default();
        method.hash(&mut seed);
        let seed = seed.finish();
        let opaque = &mut self.opaque;
        self.decoded.get_or_decode(digest(seed, message), || {
            let request = KvRequest::decode(method, message).ok()?;
            let write = request.write_kind();
            let clues = clues_from_kv_request_with(&request, |value| pods.pod(value));
            if clues.is_empty()
                && request
                    .puts()
                    .iter()
                    .any(|put| pod_from_storage_key(&put.key).is_some() && opaque_value(&put.value))
            {
                *opaque += 1;
            }
            (!clues.is_empty()).then(|| KvRequestFacts {
                method: request.method(),
                write,
                clues: clues.into(),
                fingerprint: request_fingerprint(&request),
            })
        })
    }

    /// Requests decoded, and sightings answered from the cache.
    pub fn counts(&self) -> (u64, u64) {
        (self.decoded.decoded, self.decoded.reused)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use tracer_decode::pb::etcdserverpb::{
        Compare, PutRequest, RequestOp, TxnRequest, compare, request_op,
    };

    use super::*;
    use crate::capture::clock::WallClock;

    /// A Txn as kube-apiserver creates a Pod: the key must not exist, then
    /// a put of the Pod (stored as kube-apiserver's protobuf serializer
    /// stores it; see the decode crate's testdata README).
    fn pod_value() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/decode/testdata/pod-web-7d4b9.k8spb"
        ))
        .unwrap_or_else(|error| panic!("the Pod's test bytes: {error}"))
    }

    fn pod_create_txn() -> Vec<u8> {
        let key = b"/registry/pods/default/web-7d4b9".to_vec();
        let pod = pod_value();
        TxnRequest {
            compare: vec![Compare {
                result: compare::CompareResult::Equal as i32,
                target: compare::CompareTarget::Mod as i32,
                key: key.clone(),
                range_end: Vec::new(),
                target_union: Some(compare::TargetUnion::ModRevision(0)),
            }],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key,
                    value: pod,
                    ..PutRequest::default()
                })),
            }],
            failure: Vec::new(),
        }
        .encode_to_vec()
    }

    #[test]
    fn a_value_seen_again_is_not_decoded_again_and_the_cache_stays_bounded() {
        let mut values = PodValues::default();
        // Not a Pod: remembered as such too.
        assert_eq!(values.pod(b"not a stored object"), None);
        assert_eq!(values.pod(b"not a stored object"), None);
        assert_eq!(values.counts(), (1, 1));
        for i in 0..(MAX_ENTRIES + 10) {
            values.pod(format!("value {i}").as_bytes());
        }
        assert_eq!(values.0.entries.len(), MAX_ENTRIES);
        assert_eq!(values.0.order.len(), MAX_ENTRIES);
        values.pod(b"not a stored object");
        assert_eq!(
            values.counts().0,
            2 + MAX_ENTRIES as u64 + 10,
            "evicted first"
        );
    }

    #[test]
    fn a_request_seen_on_both_sides_is_decoded_once_with_the_same_facts() {
        let message = pod_create_txn();
        let (mut requests, mut pods) = (KvRequests::default(), PodValues::default());
        let client = requests.facts("Txn", &message, &mut pods);
        let server = requests.facts("Txn", &message, &mut pods);
        let facts = client
            .clone()
            .unwrap_or_else(|| panic!("a Pod create names its Pod"));
        assert_eq!(facts.write, Some(WriteKind::Create));
        assert!(
            facts
                .clues
                .iter()
                .any(|clue| matches!(clue, PodClue::Object(_)))
        );
        assert_eq!(client, server);
        assert_eq!(requests.counts(), (1, 1));
        assert_eq!(pods.counts(), (1, 0), "the value too is decoded once");
        // The same bytes as another method are another request.
        requests.facts("Put", &message, &mut pods);
        assert_eq!(requests.counts(), (2, 1));
    }

    #[test]
    fn writes_of_pods_outside_the_window_are_not_decoded() {
        let message = pod_create_txn();
        let created = pod_in_value(&pod_value())
            .and_then(|pod| pod.created_unix_s)
            .unwrap_or_else(|| panic!("the test Pod says when it was created"));
        let created_ns = u64::try_from(created).unwrap_or_else(|e| panic!("{e}")) * 1_000_000_000;
        // Monotonic time is unix time here; the agent started `start_ns`.
        let clock = WallClock::from_offset(0);
        let once_started_at = |start_ns: u64| DecodedOnce {
            window: Some(FollowWindow::new(clock, Some(start_ns), 300_000_000_000)),
            ..DecodedOnce::default()
        };
        // Started as the Pod was created: its writes are decoded.
        let mut once = once_started_at(created_ns);
        assert!(once.kv_request("Txn", &message, created_ns).is_some());
        assert_eq!((once.not_followed, once.kv_requests.counts()), (0, (1, 0)));
        // Started a minute after: its writes are counted, not decoded.
        let mut once = once_started_at(created_ns + 60_000_000_000);
        assert_eq!(
            once.kv_request("Txn", &message, created_ns + 61_000_000_000),
            None
        );
        assert_eq!((once.not_followed, once.kv_requests.counts()), (1, (0, 0)));
        // Without a window everything is decoded, as the correlate stage decides.
        let mut once = DecodedOnce::default();
        assert!(once.kv_request("Txn", &message, u64::MAX).is_some());
    }
}
