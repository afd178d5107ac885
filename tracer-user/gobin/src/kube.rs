//! Kubernetes components: a Go binary in, its Kubernetes version
//! ([`GoBinary::kubernetes_version`]) and the Kubernetes struct offsets for
//! that version ([`kube_offsets`]) out.
//!
//! Every Kubernetes component links `k8s.io/component-base/version`, whose
//! string variable `gitVersion` the release build sets with
//! `-ldflags -X k8s.io/component-base/version.gitVersion=v1.28.4`.
//!
//! - **Unstripped**: `.symtab` names the variable (a data object); its 16
//!   bytes are a Go string header (pointer, length) and the pointer leads to
//!   the text.
//! - **Stripped** (`-s -w`): there is no symbol table, but pclntab still names
//!   the functions. `version.Get` reads the variable, either directly (older
//!   releases) or through `dynamicGitVersion`, an `atomic.Value` the package's
//!   `init` fills from `gitVersion` (1.28 on). So the code of `Get`, then of the
//!   package's `init` functions, is decoded (iced-x86) and each RIP-relative
//!   memory operand is read as a string header: the first whose text parses
//!   as `vMAJOR.MINOR.PATCH[-suffix][+build]` is the version. The other
//!   strings these functions load (`gitMajor` "1", `gitMinor` "28",
//!   `runtime.buildVersion` "go1.21.13", the commit, the date) do not parse.
//!
//! Without `-X` a component reports the source default `v0.0.0-master+$Format:%H$`,
//! i.e. v0.0.0 (a development build), which no offsets row matches.

use std::fmt;

use iced_x86::{Decoder, DecoderOptions};

use crate::{
    ArgLocations, GoBinary,
    elf::read_u64,
    error::{GoBinError, Result},
    kube_offsets_table::KUBE_TABLE,
};

/// The package that carries the version, and its variable and accessor.
const VERSION_PACKAGE: &str = "k8s.io/component-base/version";
const GIT_VERSION_SYMBOL: &str = "k8s.io/component-base/version.gitVersion";
const GET_FUNCTION: &str = "k8s.io/component-base/version.Get";
/// `init` functions of the package tried after `Get` (`init.0` … `init.9`):
/// since 1.28 the variable is read there, not in `Get`.
const INIT_FUNCTIONS: usize = 10;
/// Longest version text accepted (`v1.28.4-eks-1-28-20240110`, with room).
const MAX_VERSION_LEN: u64 = 256;
/// Instructions decoded per function at most (version.Get is ~150 bytes).
const MAX_INSTRUCTIONS: usize = 4096;

/// A Kubernetes release, `v1.28.4` (pre-release or build suffixes dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KubeVersion {
    /// Parses `v1.28.4`, `v1.28.4-eks-abc`, `v1.29.0-rc.1+abc`; `None` for
    /// anything else (no `v`, fewer than three numbers, trailing garbage).
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix('v')?;
        let end = rest.find(['-', '+']).unwrap_or(rest.len());
        let (numbers, suffix) = rest.split_at(end);
        if suffix.len() == 1 || suffix.chars().any(|c| c.is_control() || c == ' ') {
            return None;
        }
        let mut parts = numbers.split('.');
        let mut number = || -> Option<u32> {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let version = Self {
            major: number()?,
            minor: number()?,
            patch: number()?,
        };
        parts.next().is_none().then_some(version)
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl GoBinary {
    /// The Kubernetes version of a Kubernetes component (kube-apiserver,
    /// kubelet, kubectl, …), from `k8s.io/component-base/version.gitVersion`:
    /// through `.symtab` when present, else by decoding `version.Get` (and the
    /// package's `init`) found in pclntab — see the module docs.
    ///
    /// `Ok(None)`: not a Kubernetes component (neither the variable nor
    /// `version.Get` exists). `Err`: the binary has them but the version cannot
    /// be read (a string header pointing outside the file, a text that is not a
    /// version; `KubeVersionNotFound`), or the code is not x86-64
    /// (`UnsupportedArchitecture`, stripped binaries only).
    pub fn kubernetes_version(&self) -> Result<Option<KubeVersion>> {
        if let Some(sym) = self.layout.any_symbol(&self.data, GIT_VERSION_SYMBOL) {
            let text = self.go_string_at(sym.addr).ok_or_else(|| {
                not_found(format!(
                    "{GIT_VERSION_SYMBOL} at {:#x} is not a readable Go string header",
                    sym.addr
                ))
            })?;
            return KubeVersion::parse(&text).map(Some).ok_or_else(|| {
                not_found(format!(
                    "{GIT_VERSION_SYMBOL} is {text:?}, not vMAJOR.MINOR.PATCH"
                ))
            });
        }
        let Some(get) = self.function(GET_FUNCTION)? else {
            return Ok(None);
        };
        let mut functions = vec![get];
        for name in std::iter::once(format!("{VERSION_PACKAGE}.init"))
            .chain((0..INIT_FUNCTIONS).map(|i| format!("{VERSION_PACKAGE}.init.{i}")))
        {
            functions.extend(self.function(&name)?);
        }
        for f in &functions {
            let code = self.function_code(f)?;
            for addr in rip_relative_operands(code, f.entry) {
                if let Some(version) = self
                    .go_string_at(addr)
                    .and_then(|text| KubeVersion::parse(&text))
                {
                    return Ok(Some(version));
                }
            }
        }
        Err(not_found(format!(
            "no string loaded by {GET_FUNCTION} or the package's init functions reads as vMAJOR.MINOR.PATCH"
        )))
    }

    /// The text of the Go string header (data pointer, length) stored at
    /// `vaddr`; `None` when the header or its bytes are not file-backed, the
    /// length is implausible for a version, or the bytes are not UTF-8.
    fn go_string_at(&self, vaddr: u64) -> Option<String> {
        let ptr = self.layout.read_pointer(&self.data, vaddr)?;
        let len = read_u64(
            self.layout.bytes_at(&self.data, vaddr.checked_add(8)?, 8)?,
            0,
        )?;
        if len == 0 || len > MAX_VERSION_LEN {
            return None;
        }
        let bytes = self.layout.bytes_at(&self.data, ptr, len)?;
        std::str::from_utf8(bytes).ok().map(str::to_owned)
    }
}

fn not_found(reason: String) -> GoBinError {
    GoBinError::KubeVersionNotFound { reason }
}

/// Addresses of the RIP-relative memory operands of the instructions in
/// `code` (which starts at `entry`), in order, each once.
fn rip_relative_operands(code: &[u8], entry: u64) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut found = Vec::new();
    for _ in 0..MAX_INSTRUCTIONS {
        if !decoder.can_decode() {
            break;
        }
        let instruction = decoder.decode();
        if instruction.is_ip_rel_memory_operand() {
            let addr = instruction.ip_rel_memory_address();
            if !found.contains(&addr) {
                found.push(addr);
            }
        }
    }
    found
}

/// Byte offsets of the fields of Kubernetes objects the probes read, from the
/// start of the outer struct (paths through embedded structs summed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeStructOffsets {
    /// `k8s.io/api/core/v1.Pod` → `ObjectMeta` → `Name`, a Go string.
    pub pod_name: u64,
    /// `Pod` → `ObjectMeta` → `Namespace`, a Go string.
    pub pod_namespace: u64,
    /// `Pod` → `ObjectMeta` → `UID` (`types.UID`, a Go string).
    pub pod_uid: u64,
    /// `k8s.io/kubernetes/pkg/scheduler/framework.QueuedPodInfo` → its embedded `*PodInfo`.
    pub queued_pod_info_pod_info: u64,
    /// `framework.PodInfo` → `Pod`, a `*v1.Pod`.
    pub pod_info_pod: u64,
    /// `k8s.io/apiserver/pkg/authentication/authenticator.Response` → `User`, a
    /// `user.Info` interface: this is its type word; the data word is at +8.
    pub authn_response_user: u64,
    /// `k8s.io/apiserver/pkg/authentication/user.DefaultInfo` → `Name`, a Go string.
    pub user_info_name: u64,
    /// Where the probed functions' arguments and results are.
    pub args: KubeArgWords,
}

/// The integer ABI word (Go's amd64 register ABI: RAX, RBX, RCX, RDI, RSI,
/// R8–R11) that holds each value a function probe reads: the first word of a
/// parameter at the function's entry, or of a result at its RETs. Generated
/// per release from DWARF (the parameter's name and the types before it), so
/// that a parameter that moves between releases is read where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeArgWords {
    /// `(*unionAuthRequestHandler).AuthenticateRequest`: `req *http.Request`.
    pub authenticate_request: u8,
    /// Its first result, `*authenticator.Response`.
    pub authenticate_response: u8,
    /// `unionAuthzHandler.Authorize`: its second result, the reason string.
    pub authorize_reason: u8,
    /// `(*mutatingDispatcher).callAttrMutatingHook`: `h *MutatingWebhook`.
    pub mutating_webhook: u8,
    /// `(*validatingDispatcher).callHook`: `h *ValidatingWebhook`.
    pub validating_webhook: u8,
    /// `etcd3.(*store).Create`: `key string`.
    pub storage_create_key: u8,
    /// `etcd3.(*store).GuaranteedUpdate`: `key string`.
    pub storage_update_key: u8,
    /// `pod.podStrategy.Validate`: the data word of `obj runtime.Object`
    /// (the `*core.Pod` to create).
    pub pod_validate_pod: u8,
    /// `(*BindingREST).Create`: the data word of `obj runtime.Object` (the
    /// `*core.Binding`, named as its Pod).
    pub binding_create_binding: u8,
    /// `(*StatusREST).Update`: `name string` (the Pod's).
    pub status_update_name: u8,
    /// `(*Scheduler).addPodToSchedulingQueue`: the data word of `obj interface{}`.
    pub enqueue_pod: u8,
    /// `(*Scheduler).schedulingCycle`: `podInfo *framework.QueuedPodInfo`.
    pub scheduling_cycle_pod_info: u8,
    /// Its first result's `SuggestedHost` string.
    pub scheduling_cycle_host: u8,
    /// `(*Scheduler).bind`: `assumed *v1.Pod`.
    pub bind_pod: u8,
    /// `(*Scheduler).bind`: `targetNode string`.
    pub bind_node: u8,
    /// `(*Kubelet).HandlePodAdditions`: `pods []*v1.Pod`.
    pub pod_additions_pods: u8,
    /// `(*Kubelet).SyncPod`: `pod *v1.Pod`.
    pub sync_pod_pod: u8,
    /// `(*volumeManager).WaitForAttachAndMount`: `pod *v1.Pod`.
    pub volume_wait_pod: u8,
    /// `status.(*manager).syncPod`: `uid types.UID`.
    pub status_sync_uid: u8,
}

impl KubeArgWords {
    /// The word [`ARG_WORDS`](crate::kube_args::ARG_WORDS) names `name`.
    fn word_mut(&mut self, name: &str) -> Option<&mut u8> {
        Some(match name {
            "authenticate_request" => &mut self.authenticate_request,
            "authenticate_response" => &mut self.authenticate_response,
            "authorize_reason" => &mut self.authorize_reason,
            "mutating_webhook" => &mut self.mutating_webhook,
            "validating_webhook" => &mut self.validating_webhook,
            "storage_create_key" => &mut self.storage_create_key,
            "storage_update_key" => &mut self.storage_update_key,
            "pod_validate_pod" => &mut self.pod_validate_pod,
            "binding_create_binding" => &mut self.binding_create_binding,
            "status_update_name" => &mut self.status_update_name,
            "enqueue_pod" => &mut self.enqueue_pod,
            "scheduling_cycle_pod_info" => &mut self.scheduling_cycle_pod_info,
            "scheduling_cycle_host" => &mut self.scheduling_cycle_host,
            "bind_pod" => &mut self.bind_pod,
            "bind_node" => &mut self.bind_node,
            "pod_additions_pods" => &mut self.pod_additions_pods,
            "sync_pod_pod" => &mut self.sync_pod_pod,
            "volume_wait_pod" => &mut self.volume_wait_pod,
            "status_sync_uid" => &mut self.status_sync_uid,
            _ => return None,
        })
    }
}

/// Where a probed function's argument words came from, when the offsets
/// were derived (see [`KubeOffsets::words_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WordSource {
    /// The binary's own ArgInfo and morestack stub.
    Binary,
    /// The nearest release's table row, and why not the binary: a result
    /// (ArgInfo describes parameters only), or what the binary lacked.
    Nearest { why: String },
}

/// One row of the generated Kubernetes table (`kube_offsets_table.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KubeTableEntry {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    /// The version of the binaries the row was generated from, e.g. `v1.28.4`.
    pub(crate) kubernetes: &'static str,
    /// The Go release that built them.
    pub(crate) go: &'static str,
    /// Their file names (each field comes from whichever has the type).
    pub(crate) sources: &'static str,
    pub(crate) offsets: KubeStructOffsets,
}

/// One field of [`KubeStructOffsets`]: its name there, and the chain of
/// `(struct, member)` whose offsets add up to it. `gen-offsets --kube` reads
/// the chains from DWARF for the table; [`kube_offsets_for`] from the
/// runtime type descriptors of a release the table lacks.
#[derive(Debug)]
pub struct KubeField {
    pub name: &'static str,
    pub chain: &'static [(&'static str, &'static str)],
}

const POD: &str = "k8s.io/api/core/v1.Pod";
const OBJECT_META: &str = "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta";

/// Every field of [`KubeStructOffsets`] but `args`, in its order.
pub const KUBE_FIELDS: &[KubeField] = &[
    KubeField {
        name: "pod_name",
        chain: &[(POD, "ObjectMeta"), (OBJECT_META, "Name")],
    },
    KubeField {
        name: "pod_namespace",
        chain: &[(POD, "ObjectMeta"), (OBJECT_META, "Namespace")],
    },
    KubeField {
        name: "pod_uid",
        chain: &[(POD, "ObjectMeta"), (OBJECT_META, "UID")],
    },
    KubeField {
        name: "queued_pod_info_pod_info",
        chain: &[(
            "k8s.io/kubernetes/pkg/scheduler/framework.QueuedPodInfo",
            "PodInfo",
        )],
    },
    KubeField {
        name: "pod_info_pod",
        chain: &[("k8s.io/kubernetes/pkg/scheduler/framework.PodInfo", "Pod")],
    },
    KubeField {
        name: "authn_response_user",
        chain: &[(
            "k8s.io/apiserver/pkg/authentication/authenticator.Response",
            "User",
        )],
    },
    KubeField {
        name: "user_info_name",
        chain: &[(
            "k8s.io/apiserver/pkg/authentication/user.DefaultInfo",
            "Name",
        )],
    },
];

impl KubeStructOffsets {
    /// The value of the field [`KUBE_FIELDS`] names `name`.
    pub fn field(&self, name: &str) -> Option<u64> {
        let mut copy = *self;
        copy.field_mut(name).map(|value| *value)
    }

    /// The field [`KUBE_FIELDS`] names `name`.
    fn field_mut(&mut self, name: &str) -> Option<&mut u64> {
        Some(match name {
            "pod_name" => &mut self.pod_name,
            "pod_namespace" => &mut self.pod_namespace,
            "pod_uid" => &mut self.pod_uid,
            "queued_pod_info_pod_info" => &mut self.queued_pod_info_pod_info,
            "pod_info_pod" => &mut self.pod_info_pod,
            "authn_response_user" => &mut self.authn_response_user,
            "user_info_name" => &mut self.user_info_name,
            _ => return None,
        })
    }
}

/// Where a component's Kubernetes offsets came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeOffsetsSource {
    /// The table's row for the release (generated from its DWARF).
    Table { release: &'static str },
    /// The field offsets from the binary's own type descriptors; the
    /// parameters' words from its ArgInfo ([`KubeOffsets::words`]), the
    /// others from the table's row of the nearest release.
    Derived { words_from: &'static str },
}

impl fmt::Display for KubeOffsetsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Table { release } => write!(f, "from the table ({release})"),
            Self::Derived { words_from } => write!(
                f,
                "derived from the binary's type descriptors and ArgInfo, other argument words of {words_from}"
            ),
        }
    }
}

/// A component's Kubernetes offsets and their source.
#[derive(Debug, Clone)]
pub struct KubeOffsets {
    /// Every field a table row has. When derived, a field listed in
    /// `absent` holds 0 and must not be read.
    pub offsets: KubeStructOffsets,
    pub source: KubeOffsetsSource,
    /// Fields the binary's type descriptors do not give, with why: a probe
    /// that reads one is refused (a kubelet has no scheduler types, a
    /// renamed field has no offset).
    pub absent: Vec<(&'static str, String)>,
    /// When derived: where each argument word came from, by its name in
    /// [`KubeArgWords`] (empty for a table row: every word is the row's).
    pub words: Vec<(&'static str, WordSource)>,
}

impl KubeOffsets {
    /// Where the argument words a probe of `function` reads came from, as
    /// `podtrace inspect` says it.
    pub fn words_of(&self, function: &str) -> String {
        let release = match &self.source {
            KubeOffsetsSource::Table { release } => return format!("from the table ({release})"),
            KubeOffsetsSource::Derived { words_from } => words_from,
        };
        let said: Vec<String> = crate::kube_args::ARG_WORDS
            .iter()
            .filter(|word| word.function == function)
            .filter_map(|word| {
                let (_, source) = self.words.iter().find(|(name, _)| *name == word.name)?;
                Some(match source {
                    WordSource::Binary => format!("{}: the binary's ArgInfo", word.name),
                    WordSource::Nearest { why } => format!("{}: {release} ({why})", word.name),
                })
            })
            .collect();
        format!("derived; argument words {}", said.join(", "))
    }
}

/// How [`kube_offsets_for`] chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KubeOffsetsMode {
    /// The table's row when it has the release, else derived.
    #[default]
    TableFirst,
    /// Derived even when the table has the release (to check a build the
    /// table row may not describe, such as a vendor's patched one).
    Derived,
}

/// The offsets for a component of `version`: the table's row (see
/// [`KubeOffsetsMode`]), else the field offsets read from `binary`'s type
/// descriptors and the parameters' words read from its ArgInfo (the
/// signatures a function has had, [`ArgWord::at`](crate::kube_args::ArgWord),
/// tell which parameter is which); a word the binary cannot give, and the
/// results', are the nearest release's in the table ([`KubeOffsets::words`]
/// says which). A function whose first hits do not read as the checks
/// expect is detached by the agent. `Err` when the descriptors cannot be
/// read at all.
pub fn kube_offsets_for(
    binary: &GoBinary,
    version: KubeVersion,
    mode: KubeOffsetsMode,
) -> Result<KubeOffsets> {
    if mode == KubeOffsetsMode::TableFirst {
        if let Some(entry) = table_row(version) {
            return Ok(KubeOffsets {
                offsets: entry.offsets,
                source: KubeOffsetsSource::Table {
                    release: entry.kubernetes,
                },
                absent: Vec::new(),
                words: Vec::new(),
            });
        }
    }
    let nearest = KUBE_TABLE
        .iter()
        .filter(|e| e.major == version.major)
        .min_by_key(|e| (e.minor.abs_diff(version.minor), std::cmp::Reverse(e.minor)))
        .ok_or_else(|| GoBinError::UnknownKubeVersion {
            version: version.to_string(),
            known: known_rows(),
        })?;
    let types = binary.type_descriptors()?;
    let mut offsets = nearest.offsets;
    let mut absent = Vec::new();
    for field in KUBE_FIELDS {
        let value = types.field_offset(field.chain);
        if let Err(error) = &value {
            absent.push((field.name, error.to_string()));
        }
        if let Some(slot) = offsets.field_mut(field.name) {
            *slot = value.unwrap_or(0);
        }
    }
    // Read once per function: `bind` has two probed words.
    let mut located = std::collections::HashMap::new();
    let words = crate::kube_args::ARG_WORDS
        .iter()
        .map(|word| {
            let source = match binary_word(binary, word, &mut located) {
                Ok(value) => {
                    if let Some(slot) = offsets.args.word_mut(word.name) {
                        *slot = value;
                    }
                    WordSource::Binary
                }
                Err(why) => WordSource::Nearest { why },
            };
            (word.name, source)
        })
        .collect();
    Ok(KubeOffsets {
        offsets,
        source: KubeOffsetsSource::Derived {
            words_from: nearest.kubernetes,
        },
        absent,
        words,
    })
}

/// `word`'s register word in `binary`, from the function's ArgInfo and
/// morestack stub (read into `located` once per function) matched against
/// the signatures it has had.
fn binary_word(
    binary: &GoBinary,
    word: &crate::kube_args::ArgWord,
    located: &mut std::collections::HashMap<&'static str, Result<ArgLocations, String>>,
) -> Result<u8, String> {
    if word.at.is_empty() {
        return Err("a result: ArgInfo describes parameters only".into());
    }
    located
        .entry(word.function)
        .or_insert_with(|| {
            let function = binary
                .function(word.function)
                .map_err(|error| error.to_string())?
                .ok_or("the function is not in the binary")?;
            binary
                .arg_locations(&function)
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)?
        .word(word.at)
}

fn table_row(version: KubeVersion) -> Option<&'static KubeTableEntry> {
    KUBE_TABLE
        .iter()
        .find(|e| e.major == version.major && e.minor == version.minor)
}

fn known_rows() -> String {
    KUBE_TABLE
        .iter()
        .map(|e| {
            format!(
                "{}.{} (from {} built with {}: {})",
                e.major, e.minor, e.kubernetes, e.go, e.sources
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The Kubernetes struct offsets for `version`'s minor release (patch
/// releases do not change these types). A release outside the table is
/// [`GoBinError::UnknownKubeVersion`], never a guess.
pub fn kube_offsets(version: KubeVersion) -> Result<KubeStructOffsets> {
    table_row(version)
        .map(|e| e.offsets)
        .ok_or_else(|| GoBinError::UnknownKubeVersion {
            version: version.to_string(),
            known: known_rows(),
        })
}

/// Every Kubernetes release of the table: (major, minor, the version its row was generated from).
pub fn known_kube_releases() -> impl Iterator<Item = (u32, u32, &'static str)> {
    KUBE_TABLE.iter().map(|e| (e.major, e.minor, e.kubernetes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parsing() {
        let v = |major, minor, patch| {
            Some(KubeVersion {
                major,
                minor,
                patch,
            })
        };
        assert_eq!(KubeVersion::parse("v1.28.4"), v(1, 28, 4));
        assert_eq!(KubeVersion::parse("v1.28.4-eks-1-28-1"), v(1, 28, 4));
        assert_eq!(KubeVersion::parse("v1.30.0-rc.1+abc"), v(1, 30, 0));
        assert_eq!(KubeVersion::parse("v0.0.0-master+$Format:%H$"), v(0, 0, 0));
        for bad in [
            "",
            "v",
            "1.28.4",
            "v1.28",
            "v1.28.4.1",
            "v1.28.x",
            "v1..4",
            "v1.28.4-",
            "go1.21.13",
            "v1.28.4 extra",
            "v-1.2.3",
            "v1.28.99999999999",
        ] {
            assert_eq!(KubeVersion::parse(bad), None, "{bad:?}");
        }
        assert_eq!(v(1, 28, 4).unwrap().to_string(), "v1.28.4");
    }

    #[test]
    fn rip_relative_operands_of_loads_and_leas() {
        let code = [
            0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, // mov rax, [rip+0x10] -> 0x1017
            0x48, 0x8d, 0x1d, 0x00, 0x01, 0x00, 0x00, // lea rbx, [rip+0x100] -> 0x110e
            0x48, 0x8b, 0x40, 0x08, // mov rax, [rax+8]: not RIP-relative
            0x48, 0x8b, 0x05, 0xfe, 0xff, 0xff, 0xff, // mov rax, [rip-2] -> 0x1017 again
            0xc3,
        ];
        let found = rip_relative_operands(&code, 0x1000);
        assert_eq!(found, vec![0x1017, 0x110e]);
        assert!(rip_relative_operands(&[0x48, 0x8b], 0x1000).is_empty());
    }

    #[test]
    fn versions_outside_the_table_are_an_explicit_error() {
        for version in [
            KubeVersion {
                major: 1,
                minor: 5,
                patch: 0,
            },
            KubeVersion {
                major: 2,
                minor: 28,
                patch: 4,
            },
        ] {
            match kube_offsets(version) {
                Err(GoBinError::UnknownKubeVersion { version: v, known }) => {
                    assert_eq!(v, version.to_string());
                    assert!(known.contains("1.28"), "{known}");
                    let message = kube_offsets(version).unwrap_err().to_string();
                    assert!(
                        message.contains("1.28") && message.contains(&v),
                        "{message}"
                    );
                }
                other => panic!("{version}: {other:?}"),
            }
        }
    }

    #[test]
    fn table_row_of_1_28() {
        let offsets = kube_offsets(KubeVersion {
            major: 1,
            minor: 28,
            patch: 0,
        })
        .unwrap();
        // Name, then GenerateName, then Namespace: 16-byte string headers.
        assert_eq!(offsets.pod_namespace, offsets.pod_name + 32);
        assert!(offsets.pod_uid > offsets.pod_namespace);
    }
}
