//! Function probe hits → what the Kubernetes component was doing.
//!
//! In: [`GoFuncRecord`]s (raw ABI words and the strings the attachment
//! copied). Out: [`FuncMessage`]s that name the Pod, storage key, user or
//! node, and whether the call failed — read from the result words by each
//! function's signature (see `capture::kube_probes`). A Pod field that does
//! not look like one (a nil Pod, a UID that is not a UUID) is left out,
//! never guessed.

use rustc_hash::{FxHashMap, FxHashSet};
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// The probe's Kubernetes offsets were derived from the binary (a
    /// release outside the table), not the table's.
    pub derived: bool,
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
        derived: record.derived,
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
        (F::ApiserverPodValidate, Point::Return) => {
            // field.ErrorList: a slice, failed when not empty.
            message.failed = Some(words[1] != 0);
        }
        (F::ApiserverPodBinding, Point::Return) => {
            // (out runtime.Object, err error)
            message.failed = Some(words[2] != 0);
        }
        (F::ApiserverPodStatusUpdate, Point::Return) => {
            // (runtime.Object, bool, error)
            message.failed = Some(words[3] != 0);
        }
        (
            F::ApiserverMutatingWebhook
            | F::ApiserverValidatingWebhook
            | F::ApiserverStorageCreate
            | F::ApiserverStorageUpdate
            | F::ApiserverPodStatusUpdate,
            Point::Entry,
        ) => message.text = first,
        (F::ApiserverPodBinding, Point::Entry) => {
            // The request's own path, from the Binding's namespace and name.
            if let (Some(namespace), Some(name)) = (
                first.filter(|ns| dns_name(ns)),
                second.filter(|name| dns_name(name)),
            ) {
                message.path = Some(format!(
                    "/api/v1/namespaces/{namespace}/pods/{name}/binding"
                ));
                message.text = Some(name);
            }
        }
        (
            F::SchedulerEnqueue | F::SchedulerCycle | F::KubeletPodAdditions | F::KubeletSyncPod,
            Point::Entry,
        ) => message.pod = pod_ref(first, second, third),
        (F::ApiserverPodValidate, Point::Entry) => {
            message.pod = pod_ref(first, second, third);
            // The create's path: the collection of the Pod's namespace.
            message.path = message
                .pod
                .as_ref()
                .and_then(|pod| pod.namespace.as_deref())
                .map(|namespace| format!("/api/v1/namespaces/{namespace}/pods"));
        }
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

/// Hits of each derived attachment checked before its probe is trusted.
const PROBATION_HITS: u8 = 3;

/// The first hits of function probes whose Kubernetes offsets were derived
/// from the binary (`GoFuncRecord::derived`) rather than taken from a table
/// row checked against the release's DWARF: the struct offsets are the
/// binary's own, but the argument registers are the nearest release's, and
/// a signature that changed would read other values. The first
/// [`PROBATION_HITS`] hits of each function and point in each process must
/// read as that function's arguments do ([`reads_as_expected`]); the first
/// that does not stops the function's probe (a [`Disabled`] to act on) and
/// drops its hits from then on.
#[derive(Debug, Default)]
pub struct Probation {
    /// Hits that passed, per process, function and point.
    passed: FxHashMap<(u32, GoFunction, Point), u8>,
    /// Functions stopped, per process.
    failed: FxHashSet<(u32, GoFunction)>,
}

/// A derived function probe whose hit did not read as expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disabled {
    /// The process.
    pub tgid: u32,
    /// The function.
    pub function: GoFunction,
    /// What was wrong.
    pub why: &'static str,
}

impl Probation {
    /// `Ok(true)`: pass `message` on; `Ok(false)`: drop it (its function
    /// was stopped); `Err`: drop it and stop the function.
    pub fn check(&mut self, message: &FuncMessage) -> Result<bool, Disabled> {
        let tgid = message.ids.tgid;
        if self.failed.contains(&(tgid, message.function)) {
            return Ok(false);
        }
        let passed = self
            .passed
            .entry((tgid, message.function, message.point))
            .or_default();
        if *passed >= PROBATION_HITS {
            return Ok(true);
        }
        match reads_as_expected(message) {
            Ok(()) => {
                *passed += 1;
                Ok(true)
            }
            Err(why) => {
                self.failed.insert((tgid, message.function));
                Err(Disabled {
                    tgid,
                    function: message.function,
                    why,
                })
            }
        }
    }

    /// Process `tgid` ended.
    pub fn on_exit(&mut self, tgid: u32) {
        self.passed.retain(|(process, _, _), _| *process != tgid);
        self.failed.retain(|(process, _)| *process != tgid);
    }
}

/// Whether a hit reads as its function's arguments and results do: a Pod
/// with a UUID for a UID and a name and namespace, a storage key that is a
/// path, names that are DNS names, an authorizer's verdict that is one.
fn reads_as_expected(message: &FuncMessage) -> Result<(), &'static str> {
    use GoFunction as F;
    let dns = |text: &Option<String>| text.as_deref().is_some_and(dns_name);
    let named_pod = |pod: &Option<PodRef>| {
        pod.as_ref()
            .is_some_and(|pod| pod.namespace.is_some() && pod.name.is_some())
    };
    let ok = match (message.function, message.point) {
        (
            F::SchedulerEnqueue
            | F::SchedulerCycle
            | F::KubeletPodAdditions
            | F::KubeletSyncPod
            | F::ApiserverPodValidate,
            Point::Entry,
        ) => named_pod(&message.pod),
        (F::ApiserverPodBinding, Point::Entry) => message.path.is_some(),
        (F::ApiserverPodStatusUpdate, Point::Entry) => dns(&message.text),
        (F::SchedulerBind, Point::Entry) => message.pod.is_some() && dns(&message.text),
        (F::KubeletVolumeWait | F::KubeletStatusSync, Point::Entry) => message.pod.is_some(),
        (F::ApiserverStorageCreate | F::ApiserverStorageUpdate, Point::Entry) => {
            message.text.as_deref().is_some_and(|key| {
                key.starts_with('/')
                    && key.len() <= 1024
                    && key.bytes().all(|b| b.is_ascii_graphic())
            })
        }
        (F::ApiserverMutatingWebhook | F::ApiserverValidatingWebhook, Point::Entry) => {
            dns(&message.text)
        }
        (F::ApiserverAuthorize, Point::Return) => message.decision.is_some(),
        (F::ApiserverAuthenticate, Point::Return) => {
            message.failed == Some(true)
                || message.text.as_deref().is_some_and(|user| {
                    !user.is_empty() && user.len() <= 1024 && !user.chars().any(char::is_control)
                })
        }
        (F::SchedulerCycle, Point::Return) => message.failed == Some(true) || dns(&message.text),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(match message.point {
            Point::Entry => "its arguments did not read as this function's",
            Point::Return => "its results did not read as this function's",
        })
    }
}

/// A Pod whose UID looks like one (Kubernetes UIDs are UUIDs; a nil or
/// foreign pointer gives something else).
fn pod_ref(uid: Option<String>, namespace: Option<String>, name: Option<String>) -> Option<PodRef> {
    let uid = uid.filter(|uid| looks_like_uid(uid))?;
    Some(PodRef {
        uid,
        namespace: namespace.filter(|value| dns_name(value)),
        name: name.filter(|value| dns_name(value)),
    })
}

/// Whether `text` can be a Kubernetes object or node name: a DNS subdomain's
/// characters and length.
fn dns_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
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
            derived: true,
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
    fn derived_probes_are_stopped_at_their_first_hit_that_does_not_read_as_expected() {
        let mut probation = Probation::default();
        let good = decode(record(GoFunction::KubeletSyncPod, false, [0; 9]));
        for _ in 0..PROBATION_HITS {
            assert_eq!(probation.check(&good), Ok(true));
        }
        // Past probation, hits are no longer checked.
        let mut unnamed = good.clone();
        unnamed.pod = None;
        assert_eq!(probation.check(&unnamed), Ok(true));

        // Another function of the same process: its first hit reads a UID
        // that is not one (the register held something else).
        let mut garbage = record(GoFunction::SchedulerEnqueue, false, [0; 9]);
        garbage.strings[0] = Some("\u{1}\u{2}junk".into());
        let garbage = decode(garbage);
        let stopped = probation.check(&garbage).unwrap_err();
        assert_eq!(stopped.function, GoFunction::SchedulerEnqueue);
        assert_eq!(stopped.tgid, 2);
        // From then on its hits, good or not, are dropped; the other
        // function goes on.
        let enqueue = decode(record(GoFunction::SchedulerEnqueue, false, [0; 9]));
        assert_eq!(probation.check(&enqueue), Ok(false));
        assert_eq!(probation.check(&good), Ok(true));
        // A new process of that pid starts over.
        probation.on_exit(2);
        assert_eq!(probation.check(&enqueue), Ok(true));

        // Storage keys are paths; a verdict must be one.
        let mut key = record(GoFunction::ApiserverStorageCreate, false, [0; 9]);
        key.strings[0] = Some("/pods/default/web".into());
        assert_eq!(Probation::default().check(&decode(key.clone())), Ok(true));
        key.strings[0] = Some("pods".into());
        assert!(Probation::default().check(&decode(key)).is_err());
        let mut words = [0; 9];
        words[0] = 7;
        let verdict = decode(record(GoFunction::ApiserverAuthorize, true, words));
        assert!(Probation::default().check(&verdict).is_err());
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
