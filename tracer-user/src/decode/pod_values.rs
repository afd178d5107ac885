//! Pods decoded from etcd values, kept by a hash of the value's bytes.
//!
//! One Pod write shows its value three times on a control-plane node —
//! kube-apiserver's Txn, etcd's view of the same Txn, the WAL entry — byte
//! for byte the same. Decoding the Pod was the largest part of the agent's
//! work on a Pod write load; the second and third sightings now cost a hash.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tracer_decode::identity::{PodIdentity, pod_in_value};

/// Values kept: writes in flight at once, three sightings each, with room.
const MAX_VALUES: usize = 256;

/// A bounded first-in first-out cache of decoded Pod values.
#[derive(Debug, Default)]
pub struct PodValues {
    pods: FxHashMap<[u8; 16], Option<PodIdentity>>,
    order: VecDeque<[u8; 16]>,
    /// Values decoded (misses), and sightings answered from the cache.
    pub decoded: u64,
    /// See `decoded`.
    pub reused: u64,
}

impl PodValues {
    /// The Pod stored in `value`, if it is one.
    pub fn pod(&mut self, value: &[u8]) -> Option<PodIdentity> {
        // 128 bits: a collision would give one Pod write another's identity.
        let key = twox_hash::XxHash3_128::oneshot(value).to_le_bytes();
        if let Some(pod) = self.pods.get(&key) {
            self.reused += 1;
            return pod.clone();
        }
        self.decoded += 1;
        let pod = pod_in_value(value);
        if self.order.len() >= MAX_VALUES {
            if let Some(oldest) = self.order.pop_front() {
                self.pods.remove(&oldest);
            }
        }
        self.order.push_back(key);
        self.pods.insert(key, pod.clone());
        pod
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_seen_again_is_not_decoded_again_and_the_cache_stays_bounded() {
        let mut values = PodValues::default();
        // Not a Pod: remembered as such too.
        assert_eq!(values.pod(b"not a stored object"), None);
        assert_eq!(values.pod(b"not a stored object"), None);
        assert_eq!((values.decoded, values.reused), (1, 1));
        for i in 0..(MAX_VALUES + 10) {
            values.pod(format!("value {i}").as_bytes());
        }
        assert_eq!(values.pods.len(), MAX_VALUES);
        assert_eq!(values.order.len(), MAX_VALUES);
        values.pod(b"not a stored object");
        assert_eq!(values.decoded, 2 + MAX_VALUES as u64 + 10, "evicted first");
    }
}
