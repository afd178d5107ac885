//! The Kubernetes functions podtrace probes, and what each attachment reads.
//!
//! [`KUBE_PROBES`] names each function and, per probe point (entry, RET),
//! which strings to copy: a Pod's UID, namespace and name from a `*v1.Pod`
//! argument, a storage key or a node name passed as a Go string, the user an
//! authenticator resolved. Which argument or result sits in which register
//! follows from each function's signature (Go's register ABI: the receiver,
//! then each argument in order; an interface or a string takes two words, a
//! slice three): `tracer-gobin`'s Kubernetes table gives, per release, the
//! word of each parameter read ([`KubeArgWords`], generated from that
//! release's DWARF). Field offsets come from that table and from the Go
//! release's ([`StructOffsets`]).
//!
//! Nothing here reads a request body, a header or a credential: the user name
//! is the one the apiserver's own authenticator returned.

use tracer_common::gofunc::{
    GO_FUNC_DERIVED, GO_FUNC_PATH_STEPS, GO_FUNC_STRINGS, GO_STRING_IN_MEMORY,
    GO_STRING_IN_REGISTERS, GoFuncSpec, GoFunction, GoStringPath,
};
use tracer_gobin::{
    KubeArgWords, KubeOffsets, KubeOffsetsSource, KubeStructOffsets, StructOffsets,
};

/// Which ABI word holds a value, in the release's [`KubeArgWords`].
pub type Word = fn(&KubeArgWords) -> u8;

/// A string one probe point copies; `n` is the word [`Word`] picks.
#[derive(Clone, Copy, Debug)]
pub enum Read {
    /// A Go string whose header is in words `n`, `n + 1`.
    GoString(Word),
    /// The UID of the `*v1.Pod` in word `n`.
    PodUid(Word),
    /// The namespace of the `*v1.Pod` in word `n`.
    PodNamespace(Word),
    /// The name of the `*v1.Pod` in word `n`.
    PodName(Word),
    /// A field of the first `*v1.Pod` of the `[]*v1.Pod` in word `n`.
    FirstPodOf(Word, PodField),
    /// A field of the Pod of the `*framework.QueuedPodInfo` in word `n`.
    QueuedPod(Word, PodField),
    /// The name of the user in the `*authenticator.Response` in word `n`.
    AuthenticatedUser(Word),
    /// `RemoteAddr` of the `*http.Request` in word `n`.
    RequestRemoteAddr(Word),
    /// `URL.Path` of the `*http.Request` in word `n`.
    RequestPath(Word),
    /// The first field (`Name`) of the struct the pointer in word `n` points to.
    FirstStringField(Word),
}

/// Which of kube-apiserver's functions are probed.
///
/// Every uprobe hit stops the thread in a trap, whatever the program then
/// does; kube-apiserver's request-handling functions (the authenticator,
/// the authorizer, the admission chain, the etcd3 store) run for every
/// request of the cluster, and a Pod's creation is a handful of them. The
/// Pod registry's own functions run only for requests about Pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiserverProbes {
    /// The Pod registry's functions (the Pod validation of a create, the
    /// binding, the status update) and the admission webhook calls: no trap
    /// for a request that is not about a Pod. The authentication,
    /// authorization and mutating admission of a create are one span, from
    /// the request's arrival on the wire to the Pod's validation.
    #[default]
    Pods,
    /// The request-handling functions shared by every request as well: each
    /// phase of a Pod request its own span (the user authentication
    /// resolved, the authorizer's verdict), at several traps per request of
    /// any kind.
    All,
}

impl ApiserverProbes {
    /// Whether `function` is probed in this mode (every function that is
    /// not kube-apiserver's is).
    pub fn probes(self, function: GoFunction) -> bool {
        use GoFunction as F;
        match function {
            F::ApiserverAuthenticate
            | F::ApiserverAuthorize
            | F::ApiserverAdmit
            | F::ApiserverValidate
            | F::ApiserverStorageCreate
            | F::ApiserverStorageUpdate => self == Self::All,
            F::ApiserverPodValidate | F::ApiserverPodBinding | F::ApiserverPodStatusUpdate => {
                self == Self::Pods
            }
            F::ApiserverMutatingWebhook
            | F::ApiserverValidatingWebhook
            | F::SchedulerEnqueue
            | F::SchedulerCycle
            | F::SchedulerBind
            | F::KubeletPodAdditions
            | F::KubeletSyncPod
            | F::KubeletVolumeWait
            | F::KubeletStatusSync => true,
        }
    }
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

/// Every probed Kubernetes function.
pub const KUBE_PROBES: &[KubeProbe] = &[
    // func (authHandler *unionAuthRequestHandler) AuthenticateRequest(req *http.Request)
    //     (*authenticator.Response, bool, error)
    KubeProbe {
        function: GoFunction::ApiserverAuthenticate,
        symbol: "k8s.io/apiserver/pkg/authentication/request/union.(*unionAuthRequestHandler).AuthenticateRequest",
        entry: &[
            RequestRemoteAddr(|w| w.authenticate_request),
            RequestPath(|w| w.authenticate_request),
        ],
        returns: true,
        ret: &[AuthenticatedUser(|w| w.authenticate_response)],
    },
    // func (authzHandler unionAuthzHandler) Authorize(ctx context.Context,
    //     a authorizer.Attributes) (authorizer.Decision, string, error)
    KubeProbe {
        function: GoFunction::ApiserverAuthorize,
        symbol: "k8s.io/apiserver/pkg/authorization/union.unionAuthzHandler.Authorize",
        entry: &[],
        returns: true,
        ret: &[GoString(|w| w.authorize_reason)],
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
        entry: &[FirstStringField(|w| w.mutating_webhook)],
        returns: true,
        ret: &[],
    },
    // func (d *validatingDispatcher) callHook(ctx context.Context,
    //     h *v1.ValidatingWebhook, …) error
    KubeProbe {
        function: GoFunction::ApiserverValidatingWebhook,
        symbol: "k8s.io/apiserver/pkg/admission/plugin/webhook/validating.(*validatingDispatcher).callHook",
        entry: &[FirstStringField(|w| w.validating_webhook)],
        returns: true,
        ret: &[],
    },
    // func (s *store) Create(ctx context.Context, key string, obj, out
    //     runtime.Object, ttl uint64) error
    KubeProbe {
        function: GoFunction::ApiserverStorageCreate,
        symbol: "k8s.io/apiserver/pkg/storage/etcd3.(*store).Create",
        entry: &[GoString(|w| w.storage_create_key)],
        returns: true,
        ret: &[],
    },
    // func (s *store) GuaranteedUpdate(ctx context.Context, key string, …) error
    KubeProbe {
        function: GoFunction::ApiserverStorageUpdate,
        symbol: "k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
        entry: &[GoString(|w| w.storage_update_key)],
        returns: true,
        ret: &[],
    },
    // The Pod registry's own functions: only requests about Pods reach them,
    // so they cost nothing to any other request (`ApiserverProbes::Pods`).
    // func (podStrategy) Validate(ctx context.Context, obj runtime.Object)
    //     field.ErrorList — the receiver is a struct of two interfaces, and
    //     the object a `*core.Pod`, whose metadata sits where a v1.Pod's does.
    KubeProbe {
        function: GoFunction::ApiserverPodValidate,
        symbol: "k8s.io/kubernetes/pkg/registry/core/pod.podStrategy.Validate",
        entry: &[
            PodUid(|w| w.pod_validate_pod),
            PodNamespace(|w| w.pod_validate_pod),
            PodName(|w| w.pod_validate_pod),
        ],
        returns: true,
        ret: &[],
    },
    // func (r *BindingREST) Create(ctx context.Context, name string, obj
    //     runtime.Object, …) (out runtime.Object, err error) — the object a
    //     `*core.Binding`, whose metadata (the Pod's namespace and name) sits
    //     where a Pod's does: both begin with TypeMeta and ObjectMeta.
    KubeProbe {
        function: GoFunction::ApiserverPodBinding,
        symbol: "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*BindingREST).Create",
        entry: &[
            PodNamespace(|w| w.binding_create_binding),
            PodName(|w| w.binding_create_binding),
        ],
        returns: true,
        ret: &[],
    },
    // func (r *StatusREST) Update(ctx context.Context, name string, …)
    //     (runtime.Object, bool, error)
    KubeProbe {
        function: GoFunction::ApiserverPodStatusUpdate,
        symbol: "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*StatusREST).Update",
        entry: &[GoString(|w| w.status_update_name)],
        returns: true,
        ret: &[],
    },
    // func (sched *Scheduler) addPodToSchedulingQueue(obj interface{})
    KubeProbe {
        function: GoFunction::SchedulerEnqueue,
        symbol: "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).addPodToSchedulingQueue",
        entry: &[
            PodUid(|w| w.enqueue_pod),
            PodNamespace(|w| w.enqueue_pod),
            PodName(|w| w.enqueue_pod),
        ],
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
            QueuedPod(|w| w.scheduling_cycle_pod_info, Uid),
            QueuedPod(|w| w.scheduling_cycle_pod_info, Namespace),
            QueuedPod(|w| w.scheduling_cycle_pod_info, Name),
        ],
        returns: true,
        ret: &[GoString(|w| w.scheduling_cycle_host)],
    },
    // func (sched *Scheduler) bind(ctx context.Context, fwk framework.Framework,
    //     assumed *v1.Pod, targetNode string, state *framework.CycleState)
    //     (status *framework.Status)
    KubeProbe {
        function: GoFunction::SchedulerBind,
        symbol: "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).bind",
        entry: &[PodUid(|w| w.bind_pod), GoString(|w| w.bind_node)],
        returns: true,
        ret: &[],
    },
    // func (kl *Kubelet) HandlePodAdditions(pods []*v1.Pod)
    KubeProbe {
        function: GoFunction::KubeletPodAdditions,
        symbol: "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).HandlePodAdditions",
        entry: &[
            FirstPodOf(|w| w.pod_additions_pods, Uid),
            FirstPodOf(|w| w.pod_additions_pods, Namespace),
            FirstPodOf(|w| w.pod_additions_pods, Name),
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
        entry: &[
            PodUid(|w| w.sync_pod_pod),
            PodNamespace(|w| w.sync_pod_pod),
            PodName(|w| w.sync_pod_pod),
        ],
        returns: true,
        ret: &[],
    },
    // func (vm *volumeManager) WaitForAttachAndMount(ctx context.Context,
    //     pod *v1.Pod) error
    KubeProbe {
        function: GoFunction::KubeletVolumeWait,
        symbol: "k8s.io/kubernetes/pkg/kubelet/volumemanager.(*volumeManager).WaitForAttachAndMount",
        entry: &[PodUid(|w| w.volume_wait_pod)],
        returns: true,
        ret: &[],
    },
    // func (m *manager) syncPod(uid types.UID, status versionedPodStatus)
    KubeProbe {
        function: GoFunction::KubeletStatusSync,
        symbol: "k8s.io/kubernetes/pkg/kubelet/status.(*manager).syncPod",
        entry: &[GoString(|w| w.status_sync_uid)],
        returns: true,
        ret: &[],
    },
];

/// The probe of a function named `symbol`, if podtrace probes it.
pub fn probe_for(symbol: &str) -> Option<&'static KubeProbe> {
    KUBE_PROBES.iter().find(|probe| probe.symbol == symbol)
}

/// Why `probe` cannot be attached with `kube`: a field it reads that the
/// binary's type descriptors did not give (derived offsets only).
pub fn refusal(probe: &KubeProbe, kube: &KubeOffsets) -> Option<String> {
    probe
        .entry
        .iter()
        .chain(probe.ret)
        .flat_map(|read| kube_fields(*read))
        .find_map(|name| {
            kube.absent
                .iter()
                .find(|(absent, _)| absent == name)
                .map(|(_, why)| format!("no offset for {name}: {why}"))
        })
}

/// The [`KubeStructOffsets`] fields a read walks through, in order (by their
/// names in `tracer_gobin::KUBE_FIELDS`): the one list both the spec's walk
/// ([`path`]) and [`refusal`] read. The argument words are every read's.
fn kube_fields(read: Read) -> &'static [&'static str] {
    const UID: &str = "pod_uid";
    const NAMESPACE: &str = "pod_namespace";
    const NAME: &str = "pod_name";
    const QUEUED: [&str; 2] = ["queued_pod_info_pod_info", "pod_info_pod"];
    match read {
        PodUid(_) | FirstPodOf(_, Uid) => &[UID],
        PodNamespace(_) | FirstPodOf(_, Namespace) => &[NAMESPACE],
        PodName(_) | FirstPodOf(_, Name) => &[NAME],
        QueuedPod(_, Uid) => &[QUEUED[0], QUEUED[1], UID],
        QueuedPod(_, Namespace) => &[QUEUED[0], QUEUED[1], NAMESPACE],
        QueuedPod(_, Name) => &[QUEUED[0], QUEUED[1], NAME],
        AuthenticatedUser(_) => &["authn_response_user", "user_info_name"],
        GoString(_) | RequestRemoteAddr(_) | RequestPath(_) | FirstStringField(_) => &[],
    }
}

/// The spec of one probe point of `probe`, with the offsets of the binary's
/// Go release and Kubernetes version.
pub fn spec(
    probe: &KubeProbe,
    at_return: bool,
    go: &StructOffsets,
    kube: &KubeOffsets,
) -> GoFuncSpec {
    let reads = if at_return { probe.ret } else { probe.entry };
    let mut strings = [GoStringPath::default(); GO_FUNC_STRINGS];
    for (slot, read) in strings.iter_mut().zip(reads) {
        *slot = path(*read, go, &kube.offsets);
    }
    let derived = matches!(kube.source, KubeOffsetsSource::Derived { .. });
    GoFuncSpec {
        function: probe.function as u16,
        at_return: u8::from(at_return),
        flags: if derived { GO_FUNC_DERIVED } else { 0 },
        goid_offset: go.runtime_g_goid as u16,
        parent_goid_offset: go.runtime_g_parent_goid.unwrap_or(0) as u16,
        strings,
    }
}

fn path(read: Read, go: &StructOffsets, kube: &KubeStructOffsets) -> GoStringPath {
    let word = |word: Word| word(&kube.args);
    // The Kubernetes fields the read walks: the same list `refusal` checks.
    let mut walk: Vec<u64> = kube_fields(read)
        .iter()
        .map(|name| kube.field(name).unwrap_or_default())
        .collect();
    match read {
        GoString(at) => GoStringPath {
            kind: GO_STRING_IN_REGISTERS,
            word: word(at),
            ..GoStringPath::default()
        },
        PodUid(at) | PodNamespace(at) | PodName(at) | QueuedPod(at, _) => memory(word(at), &walk),
        // The slice's first element, then the Pod's field.
        FirstPodOf(at, _) => {
            walk.insert(0, 0);
            memory(word(at), &walk)
        }
        // The interface's data word is the second.
        AuthenticatedUser(at) => {
            if let Some(user) = walk.first_mut() {
                *user += 8;
            }
            memory(word(at), &walk)
        }
        RequestRemoteAddr(at) => memory(word(at), &[go.http_request_remote_addr]),
        RequestPath(at) => memory(word(at), &[go.http_request_url, go.url_path]),
        FirstStringField(at) => memory(word(at), &[0]),
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
    fn a_probe_is_refused_exactly_when_it_reads_an_absent_field() {
        let version = tracer_gobin::KubeVersion::parse("v1.28.4").unwrap();
        let offsets = tracer_gobin::kube_offsets(version).unwrap();
        let with_absent = |absent: &[&'static str]| KubeOffsets {
            offsets,
            source: KubeOffsetsSource::Derived {
                words_from: "v1.28.4",
            },
            absent: absent
                .iter()
                .map(|name| (*name, "test".to_owned()))
                .collect(),
            words: Vec::new(),
        };
        let names: Vec<&str> = tracer_gobin::KUBE_FIELDS.iter().map(|f| f.name).collect();
        for probe in KUBE_PROBES {
            let reads: Vec<&str> = probe
                .entry
                .iter()
                .chain(probe.ret)
                .flat_map(|read| kube_fields(*read))
                .copied()
                .collect();
            for name in &reads {
                assert!(names.contains(name), "{}: {name}", probe.symbol);
            }
            assert_eq!(
                refusal(probe, &with_absent(&names)).is_some(),
                !reads.is_empty(),
                "{}",
                probe.symbol
            );
            assert!(refusal(probe, &with_absent(&[])).is_none());
        }
        let cycle =
            probe_for("k8s.io/kubernetes/pkg/scheduler.(*Scheduler).schedulingCycle").unwrap();
        let why = refusal(cycle, &with_absent(&["pod_info_pod"])).unwrap();
        assert!(why.contains("pod_info_pod"), "{why}");
    }

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

    #[test]
    fn every_argument_word_belongs_to_a_probed_function() {
        // The table generator's list (tracer-gobin) names the same functions.
        for word in tracer_gobin::kube_args::ARG_WORDS {
            assert!(probe_for(word.function).is_some(), "{}", word.function);
        }
        for probe in KUBE_PROBES {
            let reads = !probe.entry.is_empty() || !probe.ret.is_empty();
            let generated = tracer_gobin::kube_args::ARG_WORDS
                .iter()
                .any(|word| word.function == probe.symbol);
            assert_eq!(reads, generated, "{}", probe.symbol);
        }
    }

    #[test]
    fn every_release_places_every_read_inside_the_reported_words() {
        use tracer_common::gofunc::GO_FUNC_WORDS;
        let go = StructOffsets::for_go_version("go1.21.13").unwrap();
        for (major, minor, kubernetes) in tracer_gobin::known_kube_releases() {
            let version = tracer_gobin::KubeVersion {
                major,
                minor,
                patch: 0,
            };
            let kube = KubeOffsets {
                offsets: tracer_gobin::kube_offsets(version).unwrap(),
                source: KubeOffsetsSource::Table {
                    release: kubernetes,
                },
                absent: Vec::new(),
                words: Vec::new(),
            };
            for probe in KUBE_PROBES {
                for at_return in [false, true] {
                    let spec = spec(probe, at_return, &go, &kube);
                    assert_eq!(spec.flags, 0, "table offsets are not marked derived");
                    for path in spec.strings.iter().filter(|p| p.kind != 0) {
                        // A string in registers takes its word and the next.
                        let last = usize::from(path.word)
                            + usize::from(path.kind == GO_STRING_IN_REGISTERS);
                        assert!(
                            last < GO_FUNC_WORDS,
                            "{kubernetes} {}: {path:?}",
                            probe.symbol
                        );
                    }
                }
            }
        }
    }
}
