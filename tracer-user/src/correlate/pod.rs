//! A Pod as correlation knows it, and the attributes every span of its
//! trace carries.

use crate::correlate::contract::attr;

use super::span::{AttributeValue, TraceId};

/// A Pod whose UID is known, with the trace its spans belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The trace derived from the cluster id and the UID.
    pub trace: TraceId,
}

impl Pod {
    /// The Pod `namespace/name` with UID `uid` in cluster `cluster_id`.
    pub fn new(cluster_id: &str, namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            trace: TraceId::for_pod(cluster_id, uid),
        }
    }

    /// `k8s.pod.name`, `k8s.namespace.name`, `k8s.pod.uid`.
    pub fn attributes(&self) -> Vec<(String, AttributeValue)> {
        vec![
            string_attribute(attr::K8S_POD_NAME, &self.name),
            string_attribute(attr::K8S_NAMESPACE_NAME, &self.namespace),
            string_attribute(attr::K8S_POD_UID, &self.uid),
        ]
    }
}

/// The phases a Pod's creation ends at: a status update reporting one
/// ends the creation's trace.
pub const ENDING_PHASES: [&str; 3] = ["Running", "Succeeded", "Failed"];

/// A string attribute.
pub fn string_attribute(key: &str, value: &str) -> (String, AttributeValue) {
    (key.to_owned(), AttributeValue::String(value.to_owned()))
}

/// An integer attribute.
pub fn int_attribute(key: &str, value: i64) -> (String, AttributeValue) {
    (key.to_owned(), AttributeValue::Int(value))
}
