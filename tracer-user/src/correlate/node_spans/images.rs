//! Which Pod an ImageStatus call was about (the kubelet asks it before it
//! pulls or creates, naming only the image), and the image and security
//! facts the node's spans carry.

use crate::correlate::contract::attr;

use super::*;

/// How long an ImageStatus call waits for the PullImage or CreateContainer
/// that names its Pod (the kubelet asks just before it pulls or creates).
pub(super) const IMAGE_CLAIM_NS: u64 = 10_000_000_000;
/// ImageStatus calls waiting at once; past it the oldest is dropped.
const MAX_IMAGE_CALLS: usize = 1024;
/// How long before another Pod's ImageStatus a Pod's worker, last seen
/// active, may have asked one too (it asks within milliseconds of its
/// sandbox's status or its pull).
const COMPETING_NS: u64 = 1_000_000_000;
/// Images remembered as pulled per Pod.
const MAX_PULLS_PER_POD: usize = 32;

/// `podtrace.container.image.source`: the runtime had the image.
pub const IMAGE_PRESENT: &str = "present";
/// `podtrace.container.image.source`: the image was pulled for the Pod.
pub const IMAGE_PULLED: &str = "pulled";

/// What the spans of a created container repeat from its CreateContainer.
#[derive(Clone, Debug, Default)]
pub(super) struct ContainerImage {
    container_name: Option<String>,
    image: Option<String>,
    source: Option<&'static str>,
}

impl NodeSpans {
    /// Keeps an answered ImageStatus call until a PullImage or
    /// CreateContainer of its image names its Pod.
    pub(super) fn hold_image_call(&mut self, call: &CriMessage) {
        let has_image = call.facts.as_ref().is_some_and(|f| f.image.is_some());
        if call.method != "ImageStatus" || !has_image || call.end_ts_ns.is_none() {
            return;
        }
        if self.image_calls.len() >= MAX_IMAGE_CALLS {
            self.image_calls.pop_front();
            self.image_calls_forgotten += 1;
        }
        self.image_calls.push_back(call.clone());
    }

    /// Drops ImageStatus calls no Pod claimed in time: they were about no
    /// Pod this node created (an image the Pod may not pull is the Pod
    /// status's to tell, not a guess of ours).
    pub(super) fn expire_image_calls(&mut self, now_ns: u64) {
        let recent = |held: &CriMessage| {
            held.end_ts_ns
                .is_some_and(|end| now_ns.saturating_sub(end) <= IMAGE_CLAIM_NS)
        };
        self.image_calls.retain(recent);
        self.refused_image_calls.retain(recent);
        // A Pod whose container never comes (an image it may not pull)
        // stops counting as a competitor.
        self.awaiting_container
            .retain(|_, since| now_ns.saturating_sub(*since) <= PENDING_NS);
    }

    /// The spans of the ImageStatus calls `call` (a PullImage or
    /// CreateContainer of `pod`) follows: made on the same side, of the
    /// same image, after the Pod's sandbox was answered and before `call`
    /// began, ended within [`IMAGE_CLAIM_NS`] of it (the
    /// kubelet asks twice per container: whether the image is there, then
    /// its user). They are the Pod's only when no other Pod on this side
    /// that has its sandbox and not yet its first container made a call
    /// within [`COMPETING_NS`] before or while they were asked: Pods of one
    /// image created at once ask alike, and which asked what is not guessed
    /// (those calls make no span, as before they were matched). Also
    /// returns what the claimed calls found.
    pub(super) fn claim_image_calls(
        &mut self,
        call: &CriMessage,
        pod: &Pod,
    ) -> (Vec<Span>, Vec<ContainerFacts>) {
        let (Some(facts), Some(start)) = (&call.facts, call.start_ts_ns) else {
            return (Vec::new(), Vec::new());
        };
        let mut found = self.take_mirrored_statuses(call.side, pod);
        // Asked after the Pod's sandbox was there (the sandbox seen).
        let Some(&sandbox_ready) = self.sandbox_ready.get(&(call.side, pod.uid.clone())) else {
            return (Vec::new(), found);
        };
        let candidate = |held: &CriMessage| {
            held.side == call.side
                && held.start_ts_ns.is_some_and(|asked| asked >= sandbox_ready)
                && held
                    .end_ts_ns
                    .is_some_and(|end| end <= start && start - end <= IMAGE_CLAIM_NS)
                && held.facts.as_ref().is_some_and(|h| same_image(h, facts))
        };
        let asked = self
            .image_calls
            .iter()
            .filter(|held| candidate(held))
            .filter_map(|held| held.start_ts_ns.zip(held.end_ts_ns));
        let Some((first_asked, last_asked)) = asked.reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
        else {
            return (Vec::new(), found);
        };
        let competing = self.awaiting_container.iter().any(|((side, uid), last)| {
            *side == call.side
                && *uid != pod.uid
                && *last <= last_asked
                && *last + COMPETING_NS >= first_asked
        });
        let (claimed, rest): (VecDeque<CriMessage>, VecDeque<CriMessage>) =
            std::mem::take(&mut self.image_calls)
                .into_iter()
                .partition(|held| candidate(held));
        self.image_calls = rest;
        if competing {
            self.refused_image_calls.extend(claimed);
            // The oldest go first, counted.
            while self.refused_image_calls.len() > MAX_IMAGE_CALLS {
                self.refused_image_calls.pop_front();
                self.image_calls_forgotten += 1;
            }
            return (Vec::new(), found);
        }
        // The same calls seen from the other end of their connection are
        // the same Pod's, whatever the timing there said: the kubelet's and
        // containerd's views of a burst differ by a few milliseconds, enough
        // for one end to see a competitor where the other sees none.
        let (waiting, refused) = self.take_mirrors(&claimed);
        // Where this node sees the other end of the Pod's calls too, a call
        // whose other view is not there (its headers were not decoded on a
        // connection older than podtrace) is not shown alone: that view may
        // have been claimed by another Pod's timing, and a handling without
        // its caller would read as a call nobody made.
        let other_end = match call.side {
            Side::Server => Side::Client,
            Side::Client => Side::Server,
        };
        let pairs_seen = self
            .sandbox_ready
            .contains_key(&(other_end, pod.uid.clone()));
        let unpaired = |held: &CriMessage| {
            pairs_seen
                && !waiting
                    .iter()
                    .chain(&refused)
                    .any(|other| same_call(held, other))
        };
        let now = call.end_ts_ns.unwrap_or(start);
        let mut spans = Vec::new();
        let mut mirrored = Vec::new();
        let claimed: Vec<(CriMessage, bool)> = claimed
            .into_iter()
            .map(|held| {
                let alone = unpaired(&held);
                (held, alone)
            })
            .collect();
        for (held, mirror, alone) in claimed
            .into_iter()
            .map(|(held, alone)| (held, Mirror::No, alone))
            .chain(
                waiting
                    .into_iter()
                    .map(|held| (held, Mirror::Waiting, false)),
            )
            .chain(
                refused
                    .into_iter()
                    .map(|held| (held, Mirror::Refused, false)),
            )
        {
            let held_facts = held.facts.as_deref().cloned().unwrap_or_default();
            if alone {
                self.unpaired_image_calls += 1;
            } else {
                let attributes = image_attributes(&held_facts);
                spans.extend(self.call_spans(&held, pod, None, None, attributes, now));
            }
            match mirror {
                Mirror::No => found.push(held_facts),
                // Its end's CreateContainer is still to come, and will
                // want to know what it found.
                Mirror::Waiting => mirrored.push((held.side, held_facts)),
                Mirror::Refused => {}
            }
        }
        for (side, facts) in mirrored {
            self.mirrored_statuses
                .get_or_insert_with((side, pod.uid.clone()), Vec::new)
                .push(facts);
        }
        (spans, found)
    }

    /// Takes the other end's view of each of `claimed` ([`same_call`]): from
    /// the held calls (that end's claim is to come) and from the refused
    /// ones (it came and left them).
    fn take_mirrors(
        &mut self,
        claimed: &VecDeque<CriMessage>,
    ) -> (VecDeque<CriMessage>, VecDeque<CriMessage>) {
        let take = |held: &mut VecDeque<CriMessage>| {
            let (taken, rest): (VecDeque<CriMessage>, VecDeque<CriMessage>) = std::mem::take(held)
                .into_iter()
                .partition(|other| claimed.iter().any(|call| same_call(call, other)));
            *held = rest;
            taken
        };
        (
            take(&mut self.image_calls),
            take(&mut self.refused_image_calls),
        )
    }

    /// What the ImageStatus calls of `pod` on `side`, taken with their other
    /// end's claim, found.
    fn take_mirrored_statuses(&mut self, side: Side, pod: &Pod) -> Vec<ContainerFacts> {
        self.mirrored_statuses
            .remove(&(side, pod.uid.clone()))
            .unwrap_or_default()
    }

    pub(super) fn note_pull(&mut self, pod: &Pod, side: Side, facts: &ContainerFacts) {
        let pulls = self.pulls.get_or_insert_with(pod.uid.clone(), Vec::new);
        if pulls.len() >= MAX_PULLS_PER_POD {
            pulls.remove(0);
        }
        pulls.push((side, facts.clone()));
    }

    /// A CreateContainer's name, image and where the image came from:
    /// pulled when a PullImage of it for the Pod (or an ImageStatus that
    /// found it absent) came before, present when the ImageStatus before
    /// found it.
    pub(super) fn container_image(
        &self,
        call: &CriMessage,
        pod: &Pod,
        statuses: &[ContainerFacts],
    ) -> ContainerImage {
        let Some(facts) = &call.facts else {
            return ContainerImage::default();
        };
        let pull = self.pulls.get(&pod.uid).and_then(|pulls| {
            pulls
                .iter()
                .rev()
                .find(|(side, pulled)| *side == call.side && same_image(pulled, facts))
                .map(|(_, pulled)| pulled)
        });
        let status = statuses.first();
        let source = match (pull, status.and_then(|s| s.image_present)) {
            (Some(_), _) | (None, Some(false)) => Some(IMAGE_PULLED),
            (None, Some(true)) => Some(IMAGE_PRESENT),
            (None, None) => None,
        };
        // Kubelets before 1.30 send only the id: the name is the pull's or
        // the status's.
        let image = facts
            .image
            .clone()
            .or_else(|| pull.and_then(|p| p.image.clone()))
            .or_else(|| status.and_then(|s| s.image.clone()));
        ContainerImage {
            container_name: facts.container_name.clone(),
            image,
            source,
        }
    }
}

/// An image reference with the tag the kubelet adds when it has none
/// (`busybox` → `busybox:latest`), so the Pod's spelling and the
/// kubelet's compare equal.
pub(super) fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_owned()
    } else {
        format!("{image}:latest")
    }
}

/// Where an ImageStatus call a claim takes comes from.
enum Mirror {
    /// The claiming end's own.
    No,
    /// The other end's view, held for its own claim.
    Waiting,
    /// The other end's view, which that end's claim left to no Pod.
    Refused,
}

/// Whether `a` and `b` are one call seen from both ends of its connection:
/// one made it, the other handled it, on the same HTTP/2 stream (the same
/// number at both ends), with the handling inside the caller's wait (both
/// ends are on this node: one clock).
fn same_call(a: &CriMessage, b: &CriMessage) -> bool {
    let (client, server) = match (a.side, b.side) {
        (Side::Client, Side::Server) => (a, b),
        (Side::Server, Side::Client) => (b, a),
        _ => return false,
    };
    let nested = match (
        client.start_ts_ns,
        server.start_ts_ns,
        server.end_ts_ns,
        client.end_ts_ns,
    ) {
        (Some(asked), Some(handled), Some(answered), Some(heard)) => {
            asked <= handled && answered <= heard
        }
        _ => false,
    };
    nested && client.method == server.method && client.stream_id == server.stream_id
}

/// Whether two calls are about the same image: a reference or an id in
/// common.
fn same_image(a: &ContainerFacts, b: &ContainerFacts) -> bool {
    let names = |facts: &ContainerFacts| {
        [&facts.image, &facts.image_id]
            .into_iter()
            .flatten()
            .map(|name| with_default_tag(name))
            .collect::<Vec<_>>()
    };
    let theirs = names(b);
    names(a).iter().any(|name| theirs.contains(name))
}

/// `container.image.name`, `container.image.id` and, for ImageStatus,
/// `podtrace.container.image.present`.
pub(super) fn image_attributes(facts: &ContainerFacts) -> Vec<(String, AttributeValue)> {
    let mut attributes = Vec::new();
    if let Some(image) = &facts.image {
        attributes.push(string_attribute(attr::CONTAINER_IMAGE_NAME, image));
    }
    if let Some(id) = &facts.image_id {
        attributes.push(string_attribute(attr::CONTAINER_IMAGE_ID, id));
    }
    if let Some(present) = facts.image_present {
        attributes.push((
            attr::CONTAINER_IMAGE_PRESENT.to_owned(),
            AttributeValue::Bool(present),
        ));
    }
    attributes
}

/// `k8s.container.name`, `container.image.name` and
/// `podtrace.container.image.source` of a created container.
pub(super) fn container_attributes(image: &ContainerImage) -> Vec<(String, AttributeValue)> {
    let mut attributes = Vec::new();
    if let Some(name) = &image.container_name {
        attributes.push(string_attribute(attr::K8S_CONTAINER_NAME, name));
    }
    if let Some(name) = &image.image {
        attributes.push(string_attribute(attr::CONTAINER_IMAGE_NAME, name));
    }
    if let Some(source) = image.source {
        attributes.push(string_attribute(attr::CONTAINER_IMAGE_SOURCE, source));
    }
    attributes
}

/// `container.security.*`: the security context the kubelet asked for.
pub(super) fn security_attributes(security: &SecurityFacts) -> Vec<(String, AttributeValue)> {
    let mut attributes = vec![(
        attr::CONTAINER_SECURITY_PRIVILEGED.to_owned(),
        AttributeValue::Bool(security.privileged),
    )];
    if !security.capabilities_added.is_empty() {
        attributes.push(string_attribute(
            attr::CONTAINER_SECURITY_CAPABILITIES_ADDED,
            &security.capabilities_added.join(","),
        ));
    }
    if !security.capabilities_dropped.is_empty() {
        attributes.push(string_attribute(
            attr::CONTAINER_SECURITY_CAPABILITIES_DROPPED,
            &security.capabilities_dropped.join(","),
        ));
    }
    if let Some(user) = security.run_as_user {
        attributes.push((
            attr::CONTAINER_SECURITY_RUN_AS_USER.to_owned(),
            AttributeValue::Int(user),
        ));
    }
    if let Some(seccomp) = &security.seccomp {
        attributes.push(string_attribute(attr::CONTAINER_SECURITY_SECCOMP, seccomp));
    }
    if let Some(apparmor) = &security.apparmor {
        attributes.push(string_attribute(
            attr::CONTAINER_SECURITY_APPARMOR,
            apparmor,
        ));
    }
    attributes
}
