//! The Kubernetes functions podtrace probes, and what each attachment reads.
//!
//! [`KUBE_PROBES`] names each function and, per probe point (entry, RET),
//! which strings to copy: a Pod's UID, namespace and name from a `*v1.Pod`
//! argument, a storage key or a node name passed as a Go string, the user an
//! authenticator resolved. Which argument or result sits in which register
//! follows from each function's signature (Go's register ABI: the receiver,
//! then each argument in order; an interface or a string takes two words, a
//! slice three) — checked against Kubernetes v1.28 sources, the versions
//! `tracer-gobin`'s Kubernetes table holds. Field offsets come from that
//! table and from the Go release's ([`StructOffsets`]).
//!
//! Nothing here reads a request body, a header or a credential: the user name
//! is the one the apiserver's own authenticator returned.

use tracer_common::gofunc::{
    GO_FUNC_PATH_STEPS, GO_FUNC_STRINGS, GO_STRING_IN_MEMORY, GO_STRING_IN_REGISTERS, GoFuncSpec,
    GoFunction, GoStringPath,
};
use tracer_gobin::{KubeStructOffsets, StructOffsets};

/// A string one probe point copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// A Go string whose header is in words `n`, `n + 1`.
    GoString(u8),
    /// The UID of the `*v1.Pod` in word `n`.
    PodUid(u8),
    /// The namespace of the `*v1.Pod` in word `n`.
    PodNamespace(u8),
    /// The name of the `*v1.Pod` in word `n`.
    PodName(u8),
    /// A field of the first `*v1.Pod` of the `[]*v1.Pod` in word `n`.
    FirstPodOf(u8, PodField),
    /// A field of the Pod of the `*framework.QueuedPodInfo` in word `n`.
    QueuedPod(u8, PodField),
    /// The name of the user in the `*authenticator.Response` in word `n`.
    AuthenticatedUser(u8),
    /// `RemoteAddr` of the `*http.Request` in word `n`.
    RequestRemoteAddr(u8),
    /// `URL.Path` of the `*http.Request` in word `n`.
    RequestPath(u8),
    /// The first field (`Name`) of the struct the pointer in word `n` points to.
    FirstStringField(u8),
}

/// A field of a Pod's `ObjectMeta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodField {
    /// `metadata.uid`.
    Uid,
    /// `metadata.namespace`.
    Namespace,
    /// `metadata.name`.
    Name,
}

/// One probed function.
#[derive(Clone, Copy, Debug)]
pub struct KubeProbe {
    /// What it is.
    pub function: GoFunction,
    /// Full Go name.
    pub symbol: &'static str,
    /// Strings read at the entry.
    pub entry: &'static [Read],
    /// Whether its RETs are probed: the function's duration is a span. The
    /// others mark a moment (a Pod handed over).
    pub returns: bool,
    /// Strings read at each RET (results are in the words).
    pub ret: &'static [Read],
}

use PodField::{Name, Namespace, Uid};
use Read::*;

/// Every probed Kubernetes function (v1.28 signatures).
pub const KUBE_PROBES: &[KubeProbe] = &[
    // func (authHandler *unionAuthRequestHandler) AuthenticateRequest(req *http.Request)
    //     (*authenticator.Response, bool, error)
    KubeProbe {
        function: GoFunction::ApiserverAuthenticate,
        symbol: "k8s.io/apiserver/pkg/authentication/request/union.(*unionAuthRequestHandler).AuthenticateRequest",
        entry: &[RequestRemoteAddr(1), RequestPath(1)],
        returns: true,
        ret: &[AuthenticatedUser(0)],
    },
    // func (authzHandler unionAuthzHandler) Authorize(ctx context.Context,
    //     a authorizer.Attributes) (authorizer.Decision, string, error)
    KubeProbe {
        function: GoFunction::ApiserverAuthorize,
        symbol: "k8s.io/apiserver/pkg/authorization/union.unionAuthzHandler.Authorize",
        entry: &[],
        returns: true,
        ret: &[GoString(1)],
    },
    // func (admissionHandler chainAdmissionHandler) Admit(ctx context.Context,
    //     a Attributes, o ObjectInterfaces) error (Validate alike)
    KubeProbe {
        function: GoFunction::ApiserverAdmit,
        symbol: "k8s.io/apiserver/pkg/admission.chainAdmissionHandler.Admit",
        entry: &[],
        returns: true,
        ret: &[],
    },
    KubeProbe {
        function: GoFunction::ApiserverValidate,
        symbol: "k8s.io/apiserver/pkg/admission.chainAdmissionHandler.Validate",
        entry: &[],
        returns: true,
        ret: &[],
    },
    // func (a *mutatingDispatcher) callAttrMutatingHook(ctx context.Context,
    //     h *admissionregistrationv1.MutatingWebhook, …) (bool, error)
    KubeProbe {
        function: GoFunction::ApiserverMutatingWebhook,
        symbol: "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating.(*mutatingDispatcher).callAttrMutatingHook",
        entry: &[FirstStringField(3)],
        returns: true,
        ret: &[],
    },
    // func (d *validatingDispatcher) callHook(ctx context.Context,
    //     h *v1.ValidatingWebhook, …) error
    KubeProbe {
        function: GoFunction::ApiserverValidatingWebhook,
        symbol: "k8s.io/apiserver/pkg/admission/plugin/webhook/validating.(*validatingDispatcher).callHook",
        entry: &[FirstStringField(3)],
        returns: true,
        ret: &[],
    },
    // func (s *store) Create(ctx context.Context, key string, obj, out
    //     runtime.Object, ttl uint64) error
    KubeProbe {
        function: GoFunction::ApiserverStorageCreate,
        symbol: "k8s.io/apiserver/pkg/storage/etcd3.(*store).Create",
        entry: &[GoString(3)],
        returns: true,
        ret: &[],
    },
    // func (s *store) GuaranteedUpdate(ctx context.Context, key string, …) error
    KubeProbe {
        function: GoFunction::ApiserverStorageUpdate,
        symbol: "k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
        entry: &[GoString(3)],
        returns: true,
        ret: &[],
    },
    // func (sched *Scheduler) addPodToSchedulingQueue(obj interface{})
    KubeProbe {
        function: GoFunction::SchedulerEnqueue,
        symbol: "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).addPodToSchedulingQueue",
        entry: &[PodUid(2), PodNamespace(2), PodName(2)],
        returns: false,
        ret: &[],
    },
    // func (sched *Scheduler) schedulingCycle(ctx context.Context, state
    //     *framework.CycleState, fwk framework.Framework, podInfo
    //     *framework.QueuedPodInfo, …) (ScheduleResult, *framework.QueuedPodInfo,
    //     *framework.Status); ScheduleResult{SuggestedHost string,
    //     EvaluatedNodes, FeasibleNodes int, …}
    KubeProbe {
        function: GoFunction::SchedulerCycle,
        symbol: "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).schedulingCycle",
        entry: &[
            QueuedPod(6, Uid),
            QueuedPod(6, Namespace),
            QueuedPod(6, Name),
        ],
        returns: true,
        ret: &[GoString(0)],
    },
    // func (sched *Scheduler) bind(ctx context.Context, fwk framework.Framework,
    //     assumed *v1.Pod, targetNode string, state *framework.CycleState)
    //     (status *framework.Status)
    KubeProbe {
        function: GoFunction::SchedulerBind,
        symbol: "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).bind",
        entry: &[PodUid(5), GoString(6)],
        returns: true,
        ret: &[],
    },
    // func (kl *Kubelet) HandlePodAdditions(pods []*v1.Pod)
    KubeProbe {
        function: GoFunction::KubeletPodAdditions,
        symbol: "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).HandlePodAdditions",
        entry: &[
            FirstPodOf(1, Uid),
            FirstPodOf(1, Namespace),
            FirstPodOf(1, Name),
        ],
        returns: false,
        ret: &[],
    },
    // func (kl *Kubelet) SyncPod(ctx context.Context, updateType
    //     kubetypes.SyncPodType, pod, mirrorPod *v1.Pod, podStatus
    //     *kubecontainer.PodStatus) (isTerminal bool, err error)
    KubeProbe {
        function: GoFunction::KubeletSyncPod,
        symbol: "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).SyncPod",
        entry: &[PodUid(4), PodNamespace(4), PodName(4)],
        returns: true,
        ret: &[],
    },
    // func (vm *volumeManager) WaitForAttachAndMount(ctx context.Context,
    //     pod *v1.Pod) error
    KubeProbe {
        function: GoFunction::KubeletVolumeWait,
        symbol: "k8s.io/kubernetes/pkg/kubelet/volumemanager.(*volumeManager).WaitForAttachAndMount",
        entry: &[PodUid(3)],
        returns: true,
        ret: &[],
    },
    // func (m *manager) syncPod(uid types.UID, status versionedPodStatus)
    KubeProbe {
        function: GoFunction::KubeletStatusSync,
        symbol: "k8s.io/kubernetes/pkg/kubelet/status.(*manager).syncPod",
        entry: &[GoString(1)],
        returns: true,
        ret: &[],
    },
];

/// The probe of a function named `symbol`, if podtrace probes it.
pub fn probe_for(symbol: &str) -> Option<&'static KubeProbe> {
    KUBE_PROBES.iter().find(|probe| probe.symbol == symbol)
}

/// The spec of one probe point of `probe`, with the offsets of the binary's
/// Go release and Kubernetes version.
pub fn spec(
    probe: &KubeProbe,
    at_return: bool,
    go: &StructOffsets,
    kube: &KubeStructOffsets,
) -> GoFuncSpec {
    let reads = if at_return { probe.ret } else { probe.entry };
    let mut strings = [GoStringPath::default(); GO_FUNC_STRINGS];
    for (slot, read) in strings.iter_mut().zip(reads) {
        *slot = path(*read, go, kube);
    }
    GoFuncSpec {
        function: probe.function as u16,
        at_return: u8::from(at_return),
        _pad: 0,
        goid_offset: go.runtime_g_goid as u16,
        parent_goid_offset: go.runtime_g_parent_goid.unwrap_or(0) as u16,
        strings,
    }
}

fn path(read: Read, go: &StructOffsets, kube: &KubeStructOffsets) -> GoStringPath {
    let field = |field: PodField| match field {
        Uid => kube.pod_uid,
        Namespace => kube.pod_namespace,
        Name => kube.pod_name,
    };
    match read {
        GoString(word) => GoStringPath {
            kind: GO_STRING_IN_REGISTERS,
            word,
            ..GoStringPath::default()
        },
        PodUid(word) => memory(word, &[kube.pod_uid]),
        PodNamespace(word) => memory(word, &[kube.pod_namespace]),
        PodName(word) => memory(word, &[kube.pod_name]),
        FirstPodOf(word, pod) => memory(word, &[0, field(pod)]),
        QueuedPod(word, pod) => memory(
            word,
            &[kube.queued_pod_info_pod_info, kube.pod_info_pod, field(pod)],
        ),
        // The interface's data word is the second.
        AuthenticatedUser(word) => {
            memory(word, &[kube.authn_response_user + 8, kube.user_info_name])
        }
        RequestRemoteAddr(word) => memory(word, &[go.http_request_remote_addr]),
        RequestPath(word) => memory(word, &[go.http_request_url, go.url_path]),
        FirstStringField(word) => memory(word, &[0]),
    }
}

/// A walk from word `word`: a load at each offset but the last, the string
/// header at the last.
fn memory(word: u8, offsets: &[u64]) -> GoStringPath {
    debug_assert!(!offsets.is_empty() && offsets.len() <= GO_FUNC_PATH_STEPS);
    let mut path = GoStringPath {
        kind: GO_STRING_IN_MEMORY,
        word,
        loads: (offsets.len() - 1) as u8,
        ..GoStringPath::default()
    };
    for (slot, offset) in path.offsets.iter_mut().zip(offsets) {
        *slot = *offset as u32;
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_probe_reads_at_most_the_strings_the_wire_carries() {
        for probe in KUBE_PROBES {
            assert!(probe.entry.len() <= GO_FUNC_STRINGS, "{}", probe.symbol);
            assert!(probe.ret.len() <= GO_FUNC_STRINGS, "{}", probe.symbol);
            assert_eq!(probe_for(probe.symbol).unwrap().function, probe.function);
        }
        for function in GoFunction::ALL {
            assert!(
                KUBE_PROBES.iter().any(|probe| probe.function == function),
                "{function:?} has no probe"
            );
        }
    }
}
