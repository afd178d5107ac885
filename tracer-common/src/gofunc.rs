//! Function probes on Kubernetes components: which function fired, in which
//! goroutine, and the few values its arguments or results hold that a span
//! needs (a Pod UID, a storage key, the authenticated user name, the node a
//! Pod was scheduled to).
//!
//! One program (`go_func`) serves every probed function. Each attachment's
//! cookie is its slot in `GO_FUNCS`, whose [`GoFuncSpec`] says which
//! function it is, whether it sits at the entry or at a RET, where the
//! goroutine ids are in `runtime.g`, and how to reach up to
//! [`GO_FUNC_STRINGS`] strings from the registers. User space builds the
//! specs from the versioned tables of `tracer-gobin`; the kernel side knows
//! nothing of Kubernetes.

use crate::{event::EventHeader, impl_pod};

/// Capacity of `GO_FUNCS`: function probe attachments (entries and RETs).
pub const MAX_GO_FUNC_PROBES: u32 = 4096;
/// Strings a function probe can copy.
pub const GO_FUNC_STRINGS: usize = 3;
/// Bytes kept of each string. A power of two: the kernel masks lengths.
pub const GO_FUNC_STRING_BYTES: usize = 128;
/// Integer ABI words reported (Go's amd64 register ABI has nine).
pub const GO_FUNC_WORDS: usize = 9;
/// Offsets along a [`GoStringPath`]: at most this many pointer loads, then
/// the string header.
pub const GO_FUNC_PATH_STEPS: usize = 4;

const _: () = assert!(GO_FUNC_STRING_BYTES.is_power_of_two());

/// `GoStringPath::kind`: no string.
pub const GO_STRING_NONE: u8 = 0;
/// `GoStringPath::kind`: the string header is in the registers: data pointer
/// in word `word`, length in word `word + 1` (a `string` argument or result).
pub const GO_STRING_IN_REGISTERS: u8 = 1;
/// `GoStringPath::kind`: start from the pointer in word `word`; load a
/// pointer at `+ offsets[i]` for each of the first `loads` offsets; the
/// string header is at `+ offsets[loads]` of the last pointer.
pub const GO_STRING_IN_MEMORY: u8 = 2;

/// How to reach one string from a probe's registers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoStringPath {
    /// A `GO_STRING_*` constant.
    pub kind: u8,
    /// ABI word the walk starts from (0-based, below [`GO_FUNC_WORDS`]).
    pub word: u8,
    /// Pointer loads before the header (below [`GO_FUNC_PATH_STEPS`]).
    pub loads: u8,
    /// Explicit padding, zero.
    pub _pad: u8,
    /// Byte offsets of each step.
    pub offsets: [u32; GO_FUNC_PATH_STEPS],
}

/// What one attachment is (value of `GO_FUNCS`, indexed by attach cookie).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoFuncSpec {
    /// The probed function, a [`GoFunction`] (echoed in the event).
    pub function: u16,
    /// 1 at a RET, 0 at the entry.
    pub at_return: u8,
    /// `GO_FUNC_DERIVED`, `GO_FUNC_DISABLED`.
    pub flags: u8,
    /// `runtime.g.goid` in the binary's Go release.
    pub goid_offset: u16,
    /// `runtime.g.parentGoid`, or 0 where the release has none (before 1.21).
    pub parent_goid_offset: u16,
    /// The strings to copy.
    pub strings: [GoStringPath; GO_FUNC_STRINGS],
}

/// `GoFuncSpec::flags` (echoed in `GoFuncEvent::flags`): the Kubernetes
/// struct offsets came from the binary's type descriptors, not the table.
pub const GO_FUNC_DERIVED: u8 = 1;
/// `GoFuncSpec::flags`: user space stopped this attachment (its first hits
/// did not read as the function's arguments should); no event is made.
pub const GO_FUNC_DISABLED: u8 = 1 << 1;

/// `GoFuncEvent::string_flags` bit for string `i`: cut to [`GO_FUNC_STRING_BYTES`].
pub const GO_STRING_TRUNCATED: u8 = 1;
/// `GoFuncEvent::string_flags` bit for string `i` (shifted by 4): the walk
/// or the copy failed (a nil pointer on the way: no value, not an error).
pub const GO_STRING_UNREADABLE: u8 = 1 << 4;

/// One hit of a function probe.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoFuncEvent {
    /// `kind` = `EventKind::GoFunc`.
    pub header: EventHeader,
    /// A [`GoFunction`].
    pub function: u16,
    /// 1 at a RET, 0 at the entry.
    pub at_return: u8,
    /// `GO_STRING_TRUNCATED << i` and `GO_STRING_UNREADABLE << i` per string.
    pub string_flags: u8,
    /// Valid bytes of each string.
    pub string_lens: [u16; GO_FUNC_STRINGS],
    /// The spec's `flags` ([`GO_FUNC_DERIVED`]).
    pub flags: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 5],
    /// The goroutine (`runtime.g.goid`).
    pub goid: u64,
    /// The goroutine that created it, 0 when unknown.
    pub parent_goid: u64,
    /// The integer ABI words: arguments at the entry, results at a RET.
    pub words: [u64; GO_FUNC_WORDS],
    /// The strings the spec asked for.
    pub strings: [[u8; GO_FUNC_STRING_BYTES]; GO_FUNC_STRINGS],
}

const _: () = assert!(size_of::<GoStringPath>() == 4 + 4 * GO_FUNC_PATH_STEPS);
const _: () = assert!(size_of::<GoFuncSpec>() == 8 + GO_FUNC_STRINGS * size_of::<GoStringPath>());
const _: () = assert!(
    size_of::<GoFuncEvent>()
        == 24
            + 4
            + 2 * GO_FUNC_STRINGS
            + 6
            + 8
            + 8
            + 8 * GO_FUNC_WORDS
            + GO_FUNC_STRINGS * GO_FUNC_STRING_BYTES
);

impl_pod!(GoStringPath, GoFuncSpec, GoFuncEvent);

/// The Kubernetes functions podtrace probes. The numbers are on the wire
/// (and in recordings): never reuse one.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GoFunction {
    /// kube-apiserver: the request's authentication (the union authenticator).
    ApiserverAuthenticate = 1,
    /// kube-apiserver: the request's authorization (the union authorizer).
    ApiserverAuthorize = 2,
    /// kube-apiserver: mutating admission (the plugin chain).
    ApiserverAdmit = 3,
    /// kube-apiserver: validating admission (the plugin chain).
    ApiserverValidate = 4,
    /// kube-apiserver: a mutating admission webhook call.
    ApiserverMutatingWebhook = 5,
    /// kube-apiserver: a validating admission webhook call.
    ApiserverValidatingWebhook = 6,
    /// kube-apiserver: the storage create (etcd3 store).
    ApiserverStorageCreate = 7,
    /// kube-apiserver: the storage read-modify-write (etcd3 store).
    ApiserverStorageUpdate = 8,
    /// kube-apiserver: the Pod registry validating a Pod to create (only
    /// Pod creates reach it).
    ApiserverPodValidate = 9,
    /// kube-apiserver: the Pod registry binding a Pod to a node (only
    /// `pods/binding` creates reach it).
    ApiserverPodBinding = 10,
    /// kube-apiserver: the Pod registry updating a Pod's status (only
    /// `pods/status` updates reach it).
    ApiserverPodStatusUpdate = 11,
    /// kube-scheduler: a Pod added to the scheduling queue (informer event).
    SchedulerEnqueue = 20,
    /// kube-scheduler: one scheduling cycle (filter, score, reserve, permit).
    SchedulerCycle = 21,
    /// kube-scheduler: binding a Pod to its node.
    SchedulerBind = 22,
    /// kubelet: Pods handed to the kubelet by its config sources.
    KubeletPodAdditions = 40,
    /// kubelet: one pod worker sync.
    KubeletSyncPod = 41,
    /// kubelet: waiting for a Pod's volumes to attach and mount.
    KubeletVolumeWait = 42,
    /// kubelet: the status manager writing a Pod's status.
    KubeletStatusSync = 43,
}

impl GoFunction {
    /// Every probed function.
    pub const ALL: [GoFunction; 18] = [
        GoFunction::ApiserverAuthenticate,
        GoFunction::ApiserverAuthorize,
        GoFunction::ApiserverAdmit,
        GoFunction::ApiserverValidate,
        GoFunction::ApiserverMutatingWebhook,
        GoFunction::ApiserverValidatingWebhook,
        GoFunction::ApiserverStorageCreate,
        GoFunction::ApiserverStorageUpdate,
        GoFunction::ApiserverPodValidate,
        GoFunction::ApiserverPodBinding,
        GoFunction::ApiserverPodStatusUpdate,
        GoFunction::SchedulerEnqueue,
        GoFunction::SchedulerCycle,
        GoFunction::SchedulerBind,
        GoFunction::KubeletPodAdditions,
        GoFunction::KubeletSyncPod,
        GoFunction::KubeletVolumeWait,
        GoFunction::KubeletStatusSync,
    ];
}

impl TryFrom<u16> for GoFunction {
    type Error = u16;
    fn try_from(value: u16) -> Result<Self, u16> {
        GoFunction::ALL
            .into_iter()
            .find(|function| *function as u16 == value)
            .ok_or(value)
    }
}
