//! The Pod's root span, emitted by the agent that saw etcd handle the
//! create: from the create write to the write that reports it Running (or
//! incomplete at the timeout, with the phase it is stuck in).

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use super::*;

/// A Pod whose create this agent saw etcd handle: its root is ours to emit.
#[derive(Clone, Debug)]
pub(super) struct Root {
    pub(super) pod: Pod,
    /// Earliest start of the create write (client or server), monotonic ns.
    pub(super) start_ns: u64,
    /// The node it was bound to, once a write names one.
    pub(super) node: Option<String>,
    /// `spec.schedulerName`, once a write names it.
    pub(super) scheduler: Option<String>,
    /// Why it waits, as its last written status says: the scheduler's
    /// verdict while unschedulable, a container's waiting reason.
    pub(super) unschedulable: Option<String>,
    pub(super) waiting: Option<String>,
    /// Its containers' `imagePullPolicy`, as created.
    pub(super) pull_policies: Option<String>,
}

/// A root to emit once the client span of the write that ends it is seen.
#[derive(Clone, Debug)]
pub(super) struct ClosingRoot {
    pub(super) root: Root,
    /// End of etcd's handling of the write, monotonic ns.
    pub(super) end_ns: u64,
    /// Key of the write's client span.
    pub(super) client: String,
}

impl ControlSpans {
    /// Follows a Pod's progress through its writes; returns its root span
    /// when a write reports it Running (or deletes it first).
    pub(super) fn track_root(
        &mut self,
        call: &EtcdMessage,
        pod: &PodName,
        start: u64,
        end: u64,
    ) -> Option<Span> {
        let uid = pod.uid.as_ref()?;
        if call.write == WriteKind::Create && call.side == Side::Server {
            if !self.roots.contains_key(uid) && self.roots.len() >= MAX_PODS {
                self.dropped += 1;
                return None;
            }
            let created = call.clues.iter().find_map(|clue| match clue {
                PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => Some(identity),
                _ => None,
            });
            let root = self.roots.entry(uid.clone()).or_insert_with(|| Root {
                pod: Pod::new(&self.cluster_id, &pod.namespace, &pod.name, uid),
                start_ns: start,
                node: None,
                scheduler: created.and_then(|pod| pod.scheduler_name.clone()),
                unschedulable: None,
                waiting: None,
                pull_policies: created.and_then(|pod| pod.pull_policies.clone()),
            });
            root.start_ns = root.start_ns.min(start);
            return None;
        }
        let root = self.roots.get_mut(uid)?;
        if call.write == WriteKind::Create {
            // The apiserver's side of the create began before etcd's.
            root.start_ns = root.start_ns.min(start);
            return None;
        }
        if call.side != Side::Server {
            return None;
        }
        let object = call.clues.iter().find_map(|clue| match clue {
            PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => Some(identity),
            _ => None,
        });
        if let Some(node) = object.and_then(|o| o.node_name.clone()) {
            root.node = Some(node);
        }
        if let Some(object) = object {
            if object.scheduler_name.is_some() {
                root.scheduler.clone_from(&object.scheduler_name);
            }
            root.unschedulable.clone_from(&object.unschedulable);
            root.waiting.clone_from(&object.waiting);
        }
        match (call.write, object.and_then(|o| o.phase.as_deref())) {
            (WriteKind::Delete, _) => {
                let root = self.roots.remove(uid)?;
                let uid = uid.clone();
                self.end(&uid, Some(call.fingerprint));
                Some(self.root_span(&root, end, Some("deleted before it was Running")))
            }
            (_, Some("Running")) => {
                let root = self.roots.remove(uid)?;
                let closing = ClosingRoot {
                    root,
                    end_ns: end,
                    client: SpanKey::EtcdCall {
                        side: Side::Client,
                        fingerprint: &hex(&call.fingerprint),
                    }
                    .encode(),
                };
                // Held until the write's client side is seen: at most one
                // per Pod followed, which `roots` bounds.
                if let Err(closing) = self.closing.hold(closing, end + WAIT_NS) {
                    return Some(self.root_span(&closing.root, end, None));
                }
                None
            }
            _ => None,
        }
    }

    pub(super) fn root_span(&self, root: &Root, end_ns: u64, incomplete: Option<&str>) -> Span {
        self.root_span_until(
            root,
            self.clock.unix_ns(end_ns.max(root.start_ns)),
            incomplete,
        )
    }

    pub(super) fn root_span_until(
        &self,
        root: &Root,
        end_unix_ns: u64,
        incomplete: Option<&str>,
    ) -> Span {
        let pod = &root.pod;
        let mut attributes = pod.attributes();
        if let Some(node) = &root.node {
            attributes.push(string_attribute(attr::K8S_NODE_NAME, node));
        }
        if let Some(scheduler) = &root.scheduler {
            attributes.push(string_attribute(attr::K8S_SCHEDULER_NAME, scheduler));
        }
        if let Some(policies) = &root.pull_policies {
            attributes.push(string_attribute(attr::K8S_IMAGE_PULL_POLICY, policies));
        }
        attributes.push((
            attr::TRACE_COMPLETE.to_owned(),
            AttributeValue::Bool(incomplete.is_none()),
        ));
        let status = match incomplete {
            None => SpanStatus::Unset,
            Some(why) => {
                // Where it is stuck, as far as the writes tell.
                let phase = if root.node.is_some() {
                    "node: bound, not reported Running"
                } else {
                    "scheduling: not bound to a node"
                };
                attributes.push(string_attribute(attr::TRACE_STUCK_PHASE, phase));
                // What the components themselves reported about it.
                let reported = match (&root.node, &root.unschedulable, &root.waiting) {
                    (None, Some(verdict), _) => {
                        attributes.push(string_attribute(attr::K8S_SCHEDULING_FAILURE, verdict));
                        format!(" ({verdict})")
                    }
                    (Some(_), _, Some(waiting)) => {
                        attributes.push(string_attribute(attr::K8S_CONTAINER_WAITING, waiting));
                        format!(" ({waiting})")
                    }
                    _ => String::new(),
                };
                SpanStatus::Error(format!("incomplete: {why}; stuck in {phase}{reported}"))
            }
        };
        Span {
            trace_id: pod.trace,
            span_id: SpanId::of(pod.trace, &SpanKey::Root),
            parent_span_id: None,
            name: name::pod_create(&pod.namespace, &pod.name),
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(root.start_ns),
            end_unix_ns,
            attributes,
            status,
            links: Vec::new(),
        }
    }
}
