//! The Go functions podtrace probes, and where they are in a given binary.
//!
//! One table ([`GO_PROBES`]) names each function by its canonical import path.
//! A binary may hold several copies of one function: the standard library
//! vendors golang.org/x/net (`vendor/golang.org/x/net/http2/hpack…`), and
//! module or GOPATH builds vendor it again under their own paths. A name
//! matches when it is the canonical name or ends with `/` + the canonical
//! name, so every copy is found and probed.

use std::path::Path;

use serde::Serialize;
use tracer_common::io::GO_AT_STACK_CHECK;
use tracer_gobin::{GoBinError, GoBinary, KubeOffsetsMode, Module};

use super::kube_probes::{ApiserverProbes, KubeProbe};

/// What a probed function is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GoProbeRole {
    /// Plaintext about to be encrypted (entry: the buffer).
    TlsConnWrite,
    /// Plaintext just decrypted (entry: the buffer; RETs: bytes read).
    TlsConnRead,
    /// A TLS 1.3 direction's new traffic secret (entry).
    TlsSetTrafficSecret,
    /// An outgoing HTTP/2 header field (name, value), before HPACK encoding.
    HpackEncoderWriteField,
    /// An incoming HTTP/2 header field after HPACK decoding.
    HpackDecoderCallEmit,
}

/// One function podtrace probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoProbeSpec {
    /// What the probe is for.
    pub role: GoProbeRole,
    /// Canonical full Go name.
    pub function: &'static str,
    /// Whether its RETs are probed too (for results: bytes read, errors).
    pub returns: bool,
}

/// Every Go function podtrace probes.
pub const GO_PROBES: [GoProbeSpec; 5] = [
    GoProbeSpec {
        role: GoProbeRole::TlsConnWrite,
        function: "crypto/tls.(*Conn).Write",
        returns: false,
    },
    GoProbeSpec {
        role: GoProbeRole::TlsConnRead,
        function: "crypto/tls.(*Conn).Read",
        returns: true,
    },
    GoProbeSpec {
        role: GoProbeRole::TlsSetTrafficSecret,
        function: "crypto/tls.(*halfConn).setTrafficSecret",
        returns: false,
    },
    GoProbeSpec {
        role: GoProbeRole::HpackEncoderWriteField,
        function: "golang.org/x/net/http2/hpack.(*Encoder).WriteField",
        returns: false,
    },
    GoProbeSpec {
        role: GoProbeRole::HpackDecoderCallEmit,
        function: "golang.org/x/net/http2/hpack.(*Decoder).callEmit",
        returns: false,
    },
];

/// Whether `name` is `canonical` or a vendored copy of it.
pub fn is_copy_of(name: &str, canonical: &str) -> bool {
    name.strip_suffix(canonical)
        .is_some_and(|prefix| prefix.is_empty() || prefix.ends_with('/'))
}

/// A function found in a binary, ready for attach by file offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResolvedFunction {
    /// Full name as the binary has it.
    #[serde(skip)]
    pub name: String,
    /// Virtual address of the entry.
    pub entry: u64,
    /// Virtual address just past the end.
    pub end: u64,
    /// File offset of the entry.
    pub file_offset: u64,
    /// Where the entry probe attaches, relative to the entry: on Go's
    /// stack-growth check, whose jump the kernel emulates (one trap a hit).
    pub entry_probe_offset: u64,
    /// Whether that is the check's jump: the probe then skips a hit whose
    /// call grows its stack (the prologue runs again and is hit again).
    pub entry_at_stack_check: bool,
    /// RET instructions, relative to the entry.
    pub ret_offsets: Vec<u64>,
    /// How many leading integer argument words (at most
    /// [`ARGS_AT_RET_CHECKED`]) a RET probe can read from the caller's spill
    /// area, so that no entry probe is needed to remember them.
    pub args_at_ret: u8,
    /// The function's one call to `runtime.memmove`, with where its homed
    /// arguments are then ([`CopyPoint`]); only looked for where a probe
    /// uses it (`crypto/tls.(*Conn).Read`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_point: Option<CopyPoint>,
}

/// A direct call to `runtime.memmove` inside a probed function: a probe on
/// a CALL is emulated by the kernel (one trap, where a RET is single-stepped
/// too: 1.0 µs against 5.6 µs a hit here), and the call's registers name
/// the bytes copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CopyPoint {
    /// Offset of the CALL from the entry.
    pub offset: u64,
    /// Offset from RSP, at the CALL, of the caller's spill area, where the
    /// function keeps its receiver (`[RSP + spill_area]`) for the whole call.
    pub spill_area: u64,
}

impl ResolvedFunction {
    /// File offset and attach-cookie bits of the entry probe.
    pub fn entry_probe(&self) -> (u64, u64) {
        let bits = if self.entry_at_stack_check {
            GO_AT_STACK_CHECK
        } else {
            0
        };
        (self.file_offset + self.entry_probe_offset, bits)
    }
}

/// Argument words [`ResolvedFunction::args_at_ret`] looks for: a receiver
/// and a slice's pointer and length (`(*tls.Conn).Read(b []byte)`).
pub const ARGS_AT_RET_CHECKED: u8 = 3;

/// What podtrace knows of a Go binary.
#[derive(Clone, Debug, Serialize)]
pub struct GoInspection {
    /// Go version the binary was built with (`go1.26.6`).
    pub go_version: String,
    /// Main module.
    pub main: ModuleVersion,
    /// Dependencies.
    pub modules: Vec<ModuleVersion>,
    /// Functions by full name.
    pub functions: std::collections::BTreeMap<String, ResolvedFunction>,
    /// Requested names found nowhere in the binary.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// For a Kubernetes component: its version, and whether podtrace has
    /// the offsets its function probes need (or why not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
    /// Per probed Kubernetes function: where its offsets come from (the
    /// table, derived from the binary), or why it is refused.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub kube_probes: std::collections::BTreeMap<String, String>,
}

/// A module path and version, as `go version -m` prints them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModuleVersion {
    /// Module path.
    pub path: String,
    /// Version (`(devel)` for a main module built from a checkout).
    pub version: String,
}

impl From<&Module> for ModuleVersion {
    fn from(module: &Module) -> Self {
        Self {
            path: module.path.clone(),
            version: module.version.clone(),
        }
    }
}

/// Resolves every copy of every probed function, and the `extra` names
/// exactly, with their RETs.
pub fn inspect(
    path: &Path,
    extra: &[String],
    kube_mode: KubeOffsetsMode,
) -> Result<GoInspection, GoBinError> {
    let binary = GoBinary::open(path)?;
    let probed = probed_functions(&binary)?;
    let mut missing: Vec<String> = GO_PROBES
        .iter()
        .filter(|spec| !probed.iter().any(|(role, _)| *role == spec.role))
        .map(|spec| spec.function.to_owned())
        .collect();
    let mut functions: std::collections::BTreeMap<String, ResolvedFunction> = probed
        .into_iter()
        .map(|(_, function)| (function.name.clone(), function))
        .collect();
    // Both modes' functions: what the binary offers to either.
    let kube_functions = kube_functions(&binary, |_| true)?;
    let mut kube_probes = std::collections::BTreeMap::new();
    let kubernetes = match binary.kubernetes_version() {
        Ok(Some(version)) if kube_functions.is_empty() => {
            Some(format!("{version} (no probed functions)"))
        }
        Ok(Some(version)) => Some(
            match tracer_gobin::kube_offsets_for(&binary, version, kube_mode) {
                Ok(kube) => {
                    let mut attached = 0;
                    for (probe, function) in &kube_functions {
                        let source = match super::kube_probes::refusal(probe, &kube) {
                            Some(why) => format!("refused: {why}"),
                            None => {
                                attached += 1;
                                kube.words_of(&function.name)
                            }
                        };
                        kube_probes.insert(function.name.clone(), source);
                    }
                    format!(
                        "{version} ({attached} function probes, offsets {})",
                        kube.source
                    )
                }
                Err(error) => format!("{version}: {error}"),
            },
        ),
        Ok(None) => None,
        Err(error) => Some(error.to_string()),
    };
    for (_, function) in kube_functions {
        functions.insert(function.name.clone(), function);
    }
    for name in extra {
        match binary.function(name)? {
            Some(function) => {
                functions.insert(function.name.clone(), resolve(&binary, function, false)?);
            }
            None => missing.push(name.clone()),
        }
    }
    let info = binary.build_info();
    Ok(GoInspection {
        go_version: info.go_version.clone(),
        main: ModuleVersion::from(&info.main),
        modules: info.deps.iter().map(ModuleVersion::from).collect(),
        functions,
        missing,
        kubernetes,
        kube_probes,
    })
}

fn resolve(
    binary: &GoBinary,
    function: tracer_gobin::Function,
    wants_copy_point: bool,
) -> Result<ResolvedFunction, GoBinError> {
    // The spill area's offset does not depend on how many words are homed
    // there: the pass that finds the most words gives it.
    let mut args_at_ret = ARGS_AT_RET_CHECKED;
    let mut spill_area = None;
    while args_at_ret > 0 {
        spill_area = binary.homed_args(&function, usize::from(args_at_ret))?;
        if spill_area.is_some() {
            break;
        }
        args_at_ret -= 1;
    }
    let copy_point = match (wants_copy_point, spill_area) {
        (true, Some(spill_area)) => binary
            .memmove_call(&function)?
            .map(|offset| CopyPoint { offset, spill_area }),
        _ => None,
    };
    let entry = binary.entry_point(&function)?;
    Ok(ResolvedFunction {
        entry_probe_offset: entry.offset,
        entry_at_stack_check: entry.at_stack_check,
        ret_offsets: binary.ret_offsets(&function)?,
        args_at_ret,
        copy_point,
        name: function.name,
        entry: function.entry,
        end: function.end,
        file_offset: function.file_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendored_copies_match_and_lookalikes_do_not() {
        let hpack = "golang.org/x/net/http2/hpack.(*Encoder).WriteField";
        assert!(is_copy_of(hpack, hpack));
        assert!(is_copy_of(
            "vendor/golang.org/x/net/http2/hpack.(*Encoder).WriteField",
            hpack
        ));
        assert!(is_copy_of(
            "k8s.io/kubernetes/vendor/golang.org/x/net/http2/hpack.(*Encoder).WriteField",
            hpack
        ));
        assert!(!is_copy_of(
            "mygolang.org/x/net/http2/hpack.(*Encoder).WriteField",
            hpack
        ));
        assert!(!is_copy_of(
            "crypto/tls.(*Conn).Writer",
            "crypto/tls.(*Conn).Write"
        ));
    }
}

/// Where podtrace's Go probes go in one binary.
#[derive(Debug)]
pub struct GoPlan {
    /// Field offsets for the binary's Go release; the TLS probes need them,
    /// the HPACK probes do not.
    pub offsets: Result<tracer_gobin::StructOffsets, GoBinError>,
    /// Every copy of `crypto/tls.(*Conn).Write` (entry probe).
    pub tls_writes: Vec<ResolvedFunction>,
    /// Every copy of `crypto/tls.(*Conn).Read` (entry and RET probes).
    pub tls_reads: Vec<ResolvedFunction>,
    /// Every copy of `crypto/tls.(*halfConn).setTrafficSecret` (entry probe).
    pub tls_secret_setters: Vec<ResolvedFunction>,
    /// Whether `setTrafficSecret` takes a QUIC level before the secret (Go ≥ 1.21).
    pub tls_secret_level_arg: bool,
    /// Every copy of `hpack.(*Encoder).WriteField` (entry probe).
    pub hpack_encoders: Vec<ResolvedFunction>,
    /// Every copy of `hpack.(*Decoder).callEmit` (entry probe).
    pub hpack_decoders: Vec<ResolvedFunction>,
    /// The Kubernetes functions it holds (entry and RET probes).
    pub kube_functions: Vec<(&'static KubeProbe, ResolvedFunction)>,
    /// For a Kubernetes component: its version's field offsets, or why
    /// there are none (a version outside the table, no version found).
    pub kube_offsets: Option<Result<tracer_gobin::KubeOffsets, GoBinError>>,
}

/// Why a binary gets no Go probes.
#[derive(Debug, thiserror::Error)]
pub enum NoGoPlan {
    /// It uses neither crypto/tls nor HPACK (runc, the shims).
    #[error("uses neither crypto/tls nor HTTP/2")]
    NothingToProbe,
    /// Not a Go binary, or one gobin cannot read.
    #[error(transparent)]
    Binary(#[from] GoBinError),
}

/// Resolves where podtrace's probes go in the Go binary at `path`.
pub fn go_plan(
    path: &Path,
    kube_mode: KubeOffsetsMode,
    apiserver: ApiserverProbes,
) -> Result<GoPlan, NoGoPlan> {
    let binary = GoBinary::open(path)?;
    let probed = probed_functions(&binary)?;
    let kube_functions = kube_functions(&binary, |probe| apiserver.probes(probe.function))?;
    if probed.is_empty() && kube_functions.is_empty() {
        return Err(NoGoPlan::NothingToProbe);
    }
    let kube_offsets = (!kube_functions.is_empty()).then(|| kube_offsets_of(&binary, kube_mode));
    let of_role = |wanted: GoProbeRole| -> Vec<ResolvedFunction> {
        probed
            .iter()
            .filter(|(role, _)| *role == wanted)
            .map(|(_, function)| function.clone())
            .collect()
    };
    Ok(GoPlan {
        offsets: tracer_gobin::StructOffsets::for_binary(binary.build_info()),
        tls_writes: of_role(GoProbeRole::TlsConnWrite),
        tls_reads: of_role(GoProbeRole::TlsConnRead),
        tls_secret_setters: of_role(GoProbeRole::TlsSetTrafficSecret),
        tls_secret_level_arg: tracer_gobin::GoRelease::parse(&binary.build_info().go_version)
            .is_some_and(|release| (release.major, release.minor) >= (1, 21)),
        hpack_encoders: of_role(GoProbeRole::HpackEncoderWriteField),
        hpack_decoders: of_role(GoProbeRole::HpackDecoderCallEmit),
        kube_functions,
        kube_offsets,
    })
}

/// The Kubernetes offsets of a binary that holds probed Kubernetes functions.
fn kube_offsets_of(
    binary: &GoBinary,
    mode: KubeOffsetsMode,
) -> Result<tracer_gobin::KubeOffsets, GoBinError> {
    match binary.kubernetes_version()? {
        Some(version) => tracer_gobin::kube_offsets_for(binary, version, mode),
        None => Err(GoBinError::KubeVersionNotFound {
            reason: "it has Kubernetes functions but no k8s.io/component-base/version".into(),
        }),
    }
}

/// The functions of [`KUBE_PROBES`](super::kube_probes::KUBE_PROBES) that
/// `binary` holds and `wanted` keeps, resolved for attach.
fn kube_functions(
    binary: &GoBinary,
    wanted: impl Fn(&KubeProbe) -> bool,
) -> Result<Vec<(&'static KubeProbe, ResolvedFunction)>, GoBinError> {
    let mut found = Vec::new();
    for probe in super::kube_probes::KUBE_PROBES.iter().filter(|p| wanted(p)) {
        if let Some(function) = binary.function(probe.symbol)? {
            found.push((probe, resolve(binary, function, false)?));
        }
    }
    Ok(found)
}

/// Every copy of every function in [`GO_PROBES`] that `binary` holds, with
/// its role, resolved for attach.
fn probed_functions(binary: &GoBinary) -> Result<Vec<(GoProbeRole, ResolvedFunction)>, GoBinError> {
    let mut probed = Vec::new();
    for function in binary.functions() {
        let function = function?;
        if let Some(spec) = GO_PROBES
            .iter()
            .find(|spec| is_copy_of(&function.name, spec.function))
        {
            let wants_copy_point = spec.role == GoProbeRole::TlsConnRead;
            probed.push((spec.role, resolve(binary, function, wants_copy_point)?));
        }
    }
    Ok(probed)
}
