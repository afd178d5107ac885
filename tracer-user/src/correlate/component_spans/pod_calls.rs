//! kube-scheduler's and the kubelet's spans: the scheduling queue and
//! cycle, the bind; the kubelet's dispatch, pod syncs, volume waits and
//! status updates — each a call of one Pod, whose UID the probe read.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use tracer_common::gofunc::GoFunction;

use super::{ComponentSpans, MAX_SYNCS_PER_POD, derived_offsets, go_call};
use crate::{
    correlate::{
        pod::{Pod, int_attribute, string_attribute},
        span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus},
    },
    decode::FuncMessage,
};

impl ComponentSpans {
    pub(super) fn scheduling_cycle(&mut self, entry: &FuncMessage, ret: &FuncMessage) -> Vec<Span> {
        let Some(pod) = entry.pod.as_ref().map(|pod| self.pod(pod)) else {
            self.dropped += 1;
            return Vec::new();
        };
        let mut spans = Vec::new();
        let root = SpanId::of(pod.trace, &SpanKey::Root);
        let mut attributes = component_attributes(&pod, "kube-scheduler");
        if let Some(queued) = self.queued.remove(&pod.uid) {
            spans.push(self.wait_span(
                &pod,
                queued,
                entry,
                root,
                name::SCHEDULER_QUEUE,
                attributes.clone(),
            ));
        }
        if let Some((evaluated, feasible)) = ret.nodes {
            attributes.push(int_attribute(
                attr::K8S_SCHEDULING_EVALUATED_NODES,
                evaluated as i64,
            ));
            attributes.push(int_attribute(
                attr::K8S_SCHEDULING_FEASIBLE_NODES,
                feasible as i64,
            ));
        }
        let status = if ret.failed == Some(true) {
            attributes.push(string_attribute(
                attr::K8S_SCHEDULING_RESULT,
                "unschedulable",
            ));
            SpanStatus::Error("no node fits the Pod (the scheduler's reason is in the Pod's PodScheduled condition)".to_owned())
        } else {
            if let Some(node) = &ret.text {
                attributes.push(string_attribute(attr::K8S_NODE_NAME, node));
            }
            attributes.push(string_attribute(attr::K8S_SCHEDULING_RESULT, "scheduled"));
            SpanStatus::Unset
        };
        spans.push(self.call_span(
            &pod,
            entry,
            ret,
            root,
            name::SCHEDULER_CYCLE,
            attributes,
            status,
        ));
        spans
    }

    /// The span of one call of a component, from its entry to its return.
    #[allow(
        clippy::too_many_arguments,
        reason = "one span's fields, named at the call"
    )]
    fn call_span(
        &self,
        pod: &Pod,
        entry: &FuncMessage,
        ret: &FuncMessage,
        parent: SpanId,
        name: &str,
        mut attributes: Vec<(String, AttributeValue)>,
        status: SpanStatus,
    ) -> Span {
        attributes.extend(derived_offsets(entry));
        Span {
            trace_id: pod.trace,
            span_id: SpanId::of(pod.trace, &go_call(entry)),
            parent_span_id: Some(parent),
            name: name.to_owned(),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(entry.ids.ts_ns),
            end_unix_ns: self.clock.unix_ns(ret.ids.ts_ns),
            attributes,
            status,
            links: Vec::new(),
        }
    }

    /// The span of a Pod waiting from `since_ns` (the scheduler queued it,
    /// the kubelet was handed it) until the call `entry` took it up.
    fn wait_span(
        &self,
        pod: &Pod,
        since_ns: u64,
        entry: &FuncMessage,
        parent: SpanId,
        name: &str,
        mut attributes: Vec<(String, AttributeValue)>,
    ) -> Span {
        attributes.extend(derived_offsets(entry));
        Span {
            trace_id: pod.trace,
            span_id: SpanId::of(
                pod.trace,
                &SpanKey::GoCallPart {
                    name,
                    call: &go_call(entry),
                },
            ),
            parent_span_id: Some(parent),
            name: name.to_owned(),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(since_ns),
            end_unix_ns: self.clock.unix_ns(entry.ids.ts_ns),
            attributes,
            status: SpanStatus::Unset,
            links: Vec::new(),
        }
    }

    /// The scheduler's bind, and the kubelet's syncs, volume waits and
    /// status updates of one Pod.
    pub(super) fn pod_call(&mut self, entry: &FuncMessage, ret: &FuncMessage) -> Vec<Span> {
        let Some(pod) = entry.pod.as_ref().map(|pod| self.pod(pod)) else {
            self.dropped += 1;
            return Vec::new();
        };
        let kubelet = entry.function != GoFunction::SchedulerBind;
        if kubelet {
            let Some(counts) = self.syncs.get_mut(&pod.uid) else {
                self.not_followed += 1;
                return Vec::new();
            };
            // A volume wait goes with the pod sync it runs in.
            let count = match entry.function {
                GoFunction::KubeletVolumeWait => counts.pod_syncs,
                GoFunction::KubeletSyncPod => {
                    counts.pod_syncs += 1;
                    counts.pod_syncs
                }
                _ => {
                    counts.status_syncs += 1;
                    counts.status_syncs
                }
            };
            if count > MAX_SYNCS_PER_POD {
                return Vec::new();
            }
        }
        let mut spans = Vec::new();
        let parent = if kubelet {
            SpanId::of(pod.trace, &SpanKey::Node(&self.node_name))
        } else {
            SpanId::of(pod.trace, &SpanKey::Root)
        };
        let mut attributes =
            component_attributes(&pod, if kubelet { "kubelet" } else { "kube-scheduler" });
        let name = match entry.function {
            GoFunction::SchedulerBind => {
                if let Some(node) = &entry.text {
                    attributes.push(string_attribute(attr::K8S_NODE_NAME, node));
                }
                name::SCHEDULER_BIND
            }
            GoFunction::KubeletSyncPod => {
                if let Some(dispatched) = self.dispatched.remove(&pod.uid) {
                    spans.push(self.wait_span(
                        &pod,
                        dispatched,
                        entry,
                        parent,
                        name::KUBELET_DISPATCH,
                        attributes.clone(),
                    ));
                }
                name::KUBELET_SYNC
            }
            GoFunction::KubeletVolumeWait => name::KUBELET_VOLUME_WAIT,
            _ => name::KUBELET_STATUS_UPDATE,
        };
        let status = match ret.failed {
            Some(true) => SpanStatus::Error(format!("{name} returned an error")),
            _ => SpanStatus::Unset,
        };
        let parent = match entry.function {
            // A volume wait happens inside a sync of the same goroutine.
            GoFunction::KubeletVolumeWait => self
                .parent_containing(
                    GoFunction::KubeletSyncPod,
                    &pod,
                    entry.ids.ts_ns,
                    ret.ids.ts_ns,
                )
                .map_or(parent, |key| SpanId::for_key(pod.trace, key.as_bytes())),
            _ => parent,
        };
        spans.push(self.call_span(&pod, entry, ret, parent, name, attributes, status));
        spans
    }
}

/// A Pod's attributes and the component whose span it is.
fn component_attributes(pod: &Pod, component: &str) -> Vec<(String, AttributeValue)> {
    let mut attributes = pod.attributes();
    attributes.push(string_attribute(attr::K8S_COMPONENT, component));
    attributes
}
