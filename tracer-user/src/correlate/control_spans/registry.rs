//! Which Pods this agent follows: names to UIDs as the writes tell them,
//! what was created before the agent or outside the trace timeout, and
//! which creations have ended.

use super::*;

impl ControlSpans {
    /// The UID of Pod `namespace/name`, if a write told it.
    pub fn uid_of(&self, namespace: &str, name: &str) -> Option<String> {
        self.uids
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Learns the Pods a message (the write `fingerprint`) names; returns
    /// those whose creation is followed, with their UIDs where known.
    pub(super) fn learn(&mut self, clues: &[PodClue], fingerprint: &[u8; 16]) -> Vec<PodName> {
        let mut pods: Vec<PodName> = Vec::new();
        let mut unfollowed: Vec<(&String, &String)> = Vec::new();
        // UIDs of Pods whose trace ended before this write: their stored
        // state is no longer needed.
        let mut forget: Vec<String> = Vec::new();
        for clue in clues {
            let (namespace, name, uid) = match clue {
                PodClue::StorageKey { namespace, name } => (namespace, name, None),
                PodClue::Object(identity) => match (&identity.namespace, &identity.name) {
                    (Some(namespace), Some(name)) => (namespace, name, identity.uid.as_ref()),
                    _ => continue,
                },
                PodClue::Sandbox { .. }
                | PodClue::SandboxCall { .. }
                | PodClue::Container { .. } => continue,
            };
            if let PodClue::Object(identity) = clue {
                if !self.follows(identity, fingerprint) {
                    unfollowed.push((namespace, name));
                    forget.extend(
                        uid.filter(|uid| self.ended_before(uid, fingerprint))
                            .cloned(),
                    );
                    continue;
                }
            }
            if let Some(uid) = uid {
                let key = (namespace.clone(), name.clone());
                if self.uids.len() < MAX_PODS || self.uids.contains_key(&key) {
                    self.uids.insert(key, uid.clone());
                } else {
                    self.dropped += 1;
                }
            }
            match pods
                .iter_mut()
                .find(|p| &p.namespace == namespace && &p.name == name)
            {
                Some(known) => {
                    if known.uid.is_none() {
                        known.uid = uid.cloned();
                    }
                }
                None => pods.push(PodName {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: uid.cloned(),
                }),
            }
        }
        for pod in &mut pods {
            if pod.uid.is_none() {
                pod.uid = self
                    .uids
                    .get(&(pod.namespace.clone(), pod.name.clone()))
                    .cloned();
            }
        }
        let named = pods.len() + unfollowed.len();
        pods.retain(|pod| {
            let ended_before = pod
                .uid
                .as_ref()
                .filter(|uid| self.ended_before(uid, fingerprint));
            forget.extend(ended_before.cloned());
            ended_before.is_none() && !unfollowed.contains(&(&pod.namespace, &pod.name))
        });
        for uid in &forget {
            self.states.remove(uid);
        }
        if pods.len() < named {
            self.not_followed += 1;
        }
        pods
    }

    /// Whether a write (`fingerprint`) storing this Pod object is part of
    /// the Pod's creation, as far as the object and what came before tell.
    fn follows(&self, pod: &PodIdentity, fingerprint: &[u8; 16]) -> bool {
        if let Some(uid) = &pod.uid {
            if self.ended_before(uid, fingerprint) {
                return false;
            }
        }
        pod.created_unix_s
            .is_none_or(|created| self.window.may_follow(created, self.now_ns))
    }

    /// Whether the Pod's creation trace ended at a write other than this one.
    fn ended_before(&self, uid: &str, fingerprint: &[u8; 16]) -> bool {
        self.ended
            .get(uid)
            .is_some_and(|at| at.as_ref() != Some(fingerprint))
    }

    /// The Pod's creation trace ends (at the write `fingerprint`, if one
    /// ended it): later writes are not followed. What it stored is kept for
    /// that write's other messages (the server's comes after the WAL's) and
    /// forgotten at the first later write.
    pub(super) fn end(&mut self, uid: &str, fingerprint: Option<[u8; 16]>) {
        if self.ended.contains_key(uid) {
            return;
        }
        for (oldest, _) in self.ended.insert_evicting(uid.to_owned(), fingerprint) {
            // Its later writes still fail the trace-timeout check once that
            // has passed; before, they would make spans again.
            self.states.remove(&oldest);
            self.dropped += 1;
        }
    }

    /// Ends the Pod's creation trace if the object a write stored reports it
    /// Running (or done). Every agent that sees the write decides so, not
    /// only the one that emits the root.
    pub(super) fn end_if_reported(
        &mut self,
        clues: &[PodClue],
        pod: &PodName,
        fingerprint: [u8; 16],
    ) {
        let Some(uid) = &pod.uid else {
            return;
        };
        let reported = clues.iter().any(|clue| match clue {
            PodClue::Object(identity) if identity.uid.as_ref() == Some(uid) => identity
                .phase
                .as_deref()
                .is_some_and(|phase| ENDING_PHASES.contains(&phase)),
            _ => false,
        });
        if reported {
            let uid = uid.clone();
            self.end(&uid, Some(fingerprint));
        }
    }
}
