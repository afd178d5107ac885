//! Function probe hits → what the Kubernetes component was doing.
//!
//! In: [`GoFuncRecord`]s (raw ABI words and the strings the attachment
//! copied). Out: [`FuncMessage`]s that name the Pod, storage key, user or
//! node, and whether the call failed — read from the result words by each
//! function's signature (see `capture::kube_probes`). A Pod field that does
//! not look like one (a nil Pod, a UID that is not a UUID) is left out,
//! never guessed.

use tracer_common::gofunc::GoFunction;

use crate::capture::{GoFuncRecord, ProcessIds};

/// A Pod as a component's own structs name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`, when read.
    pub namespace: Option<String>,
    /// `metadata.name`, when read.
    pub name: Option<String>,
}

/// An authorizer's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `DecisionDeny`.
    Deny,
    /// `DecisionAllow`.
    Allow,
    /// `DecisionNoOpinion`.
    NoOpinion,
}

impl Decision {
    /// `allow`, `deny`, `no_opinion`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Deny => "deny",
            Decision::Allow => "allow",
            Decision::NoOpinion => "no_opinion",
        }
    }
}

/// Entry or return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// The function was entered.
    Entry,
    /// It returned.
    Return,
}

/// One entry into or return from a probed Kubernetes function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncMessage {
    /// Process, thread and time.
    pub ids: ProcessIds,
    /// Which function.
    pub function: GoFunction,
    /// Entry or return.
    pub point: Point,
    /// The goroutine.
    pub goid: u64,
    /// The goroutine that created it (0: unknown).
    pub parent_goid: u64,
    /// The Pod it works on (entries of scheduler and kubelet functions).
    pub pod: Option<PodRef>,
    /// The storage key (`/pods/NS/NAME`), the webhook's name, the
    /// authenticated user, the node chosen or bound to, the authorizer's
    /// reason — whichever the function gives.
    pub text: Option<String>,
    /// The request's client address (authentication's entry).
    pub remote_addr: Option<String>,
    /// The request's path (authentication's entry).
    pub path: Option<String>,
    /// Returns: whether the call returned an error (a non-nil `error` or
    /// `*framework.Status`) — or, for authentication, found no user.
    pub failed: Option<bool>,
    /// Authorization's verdict.
    pub decision: Option<Decision>,
    /// A scheduling cycle's evaluated and feasible node counts.
    pub nodes: Option<(u64, u64)>,
}

/// Reads one hit by its function's signature.
pub fn decode(record: GoFuncRecord) -> FuncMessage {
    let words = record.words;
    let [first, second, third] = record.strings;
    let point = if record.at_return {
        Point::Return
    } else {
        Point::Entry
    };
    let mut message = FuncMessage {
        ids: record.ids,
        function: record.function,
        point,
        goid: record.goid,
        parent_goid: record.parent_goid,
        pod: None,
        text: None,
        remote_addr: None,
        path: None,
        failed: None,
        decision: None,
        nodes: None,
    };
    use GoFunction as F;
    match (record.function, point) {
        (F::ApiserverAuthenticate, Point::Entry) => {
            message.remote_addr = first;
            message.path = second;
        }
        (F::ApiserverAuthenticate, Point::Return) => {
            // (*authenticator.Response, bool, error)
            let authenticated = words[1] & 0xff != 0 && words[2] == 0;
            message.failed = Some(!authenticated);
            message.text = first.filter(|_| authenticated && words[0] != 0);
        }
        (F::ApiserverAuthorize, Point::Return) => {
            // (authorizer.Decision, string, error)
            message.decision = match words[0] {
                0 => Some(Decision::Deny),
                1 => Some(Decision::Allow),
                2 => Some(Decision::NoOpinion),
                _ => None,
            };
            message.text = first.filter(|reason| !reason.is_empty());
            message.failed = Some(words[3] != 0);
        }
        (F::ApiserverMutatingWebhook, Point::Return) => {
            // (bool, error)
            message.failed = Some(words[1] != 0);
        }
        (
            F::ApiserverAdmit
            | F::ApiserverValidate
            | F::ApiserverValidatingWebhook
            | F::ApiserverStorageCreate
            | F::ApiserverStorageUpdate
            | F::KubeletVolumeWait,
            Point::Return,
        ) => {
            // error: a nil interface has a zero type word.
            message.failed = Some(words[0] != 0);
        }
        (
            F::ApiserverMutatingWebhook
            | F::ApiserverValidatingWebhook
            | F::ApiserverStorageCreate
            | F::ApiserverStorageUpdate,
            Point::Entry,
        ) => message.text = first,
        (
            F::SchedulerEnqueue | F::SchedulerCycle | F::KubeletPodAdditions | F::KubeletSyncPod,
            Point::Entry,
        ) => message.pod = pod_ref(first, second, third),
        (F::SchedulerCycle, Point::Return) => {
            // (ScheduleResult{SuggestedHost string, EvaluatedNodes,
            // FeasibleNodes int, …}, *QueuedPodInfo, *framework.Status)
            let failed = words[6] != 0;
            message.failed = Some(failed);
            message.text = first.filter(|host| !failed && !host.is_empty());
            message.nodes = Some((words[2], words[3]));
        }
        (F::SchedulerBind, Point::Entry) => {
            message.pod = pod_ref(first, None, None);
            message.text = second;
        }
        (F::SchedulerBind, Point::Return) => {
            // *framework.Status: nil on success.
            message.failed = Some(words[0] != 0);
        }
        (F::KubeletVolumeWait | F::KubeletStatusSync, Point::Entry) => {
            message.pod = pod_ref(first, None, None);
        }
        (F::KubeletSyncPod, Point::Return) => {
            // (isTerminal bool, err error)
            message.failed = Some(words[1] != 0);
        }
        _ => {}
    }
    message
}

/// A Pod whose UID looks like one (Kubernetes UIDs are UUIDs; a nil or
/// foreign pointer gives something else).
fn pod_ref(uid: Option<String>, namespace: Option<String>, name: Option<String>) -> Option<PodRef> {
    let uid = uid.filter(|uid| looks_like_uid(uid))?;
    let plausible = |value: Option<String>| {
        value.filter(|value| {
            !value.is_empty()
                && value.len() <= 253
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        })
    };
    Some(PodRef {
        uid,
        namespace: plausible(namespace),
        name: plausible(name),
    })
}

fn looks_like_uid(uid: &str) -> bool {
    uid.len() == 36
        && uid.bytes().enumerate().all(|(index, b)| match index {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(function: GoFunction, at_return: bool, words: [u64; 9]) -> GoFuncRecord {
        GoFuncRecord {
            ids: ProcessIds {
                ts_ns: 1,
                tgid: 2,
                tid: 2,
            },
            function,
            at_return,
            goid: 7,
            parent_goid: 5,
            words,
            strings: [
                Some("5d0c7a52-1b8e-4e1f-9d5a-0f6f3a4b2c10".into()),
                Some("default".into()),
                Some("web".into()),
            ],
            truncated: [false; 3],
        }
    }

    #[test]
    fn pods_are_read_only_when_their_uid_is_a_uuid() {
        let message = decode(record(GoFunction::KubeletSyncPod, false, [0; 9]));
        let pod = message.pod.unwrap();
        assert_eq!(pod.name.as_deref(), Some("web"));
        let mut garbage = record(GoFunction::KubeletSyncPod, false, [0; 9]);
        garbage.strings[0] = Some("\u{1}\u{2}junk".into());
        assert_eq!(decode(garbage).pod, None);
    }

    #[test]
    fn results_say_whether_the_call_failed() {
        let mut words = [0; 9];
        let cycle = decode(record(GoFunction::SchedulerCycle, true, words));
        assert_eq!(cycle.failed, Some(false));
        words[6] = 0xc000_1000;
        words[2] = 3;
        let cycle = decode(record(GoFunction::SchedulerCycle, true, words));
        assert_eq!(cycle.failed, Some(true));
        assert_eq!(cycle.text, None, "no node when the cycle failed");
        assert_eq!(cycle.nodes, Some((3, 0)));
        let mut words = [0; 9];
        words[0] = 1;
        let authz = decode(record(GoFunction::ApiserverAuthorize, true, words));
        assert_eq!(authz.decision, Some(Decision::Allow));
        assert_eq!(authz.failed, Some(false));
    }
}
