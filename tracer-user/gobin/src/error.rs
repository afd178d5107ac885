//! The one error type of this crate. Every variant says which part of the
//! binary was being read and why it was rejected, so that `podtrace inspect`
//! can print something an operator can act on.

use std::path::PathBuf;

/// Why a binary could not be read, or a question about it could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoBinError {
    /// The file could not be opened or mapped.
    #[error("reading {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not an ELF file (this includes empty files).
    #[error("not an ELF file")]
    NotElf(#[source] object::Error),
    /// An ELF file this crate does not handle (32-bit, big-endian, another architecture).
    #[error("unsupported ELF file: {0}")]
    UnsupportedElf(String),
    /// The ELF headers or a table they point to are truncated or inconsistent.
    #[error("malformed ELF ({context})")]
    MalformedElf {
        context: &'static str,
        #[source]
        source: object::Error,
    },
    /// No `.gopclntab` section and no pcHeader found by its magic: not a Go binary.
    #[error("not a Go binary: no .gopclntab section and no Go pcHeader in the loaded segments")]
    NotGo,
    /// A pcHeader whose magic belongs to a Go release this crate does not read.
    #[error(
        "unsupported pclntab version: magic {magic:#010x}{} (supported: 0xfffffff0 for Go 1.18-1.19, 0xfffffff1 for Go 1.20+)",
        older_release(*magic)
    )]
    UnknownPclntabVersion { magic: u32 },
    /// The pclntab is present but its header or tables are out of bounds or inconsistent.
    #[error("corrupted pclntab: {0}")]
    CorruptPclntab(String),
    /// pcHeader.textStart is zero (Go >= 1.26) and no moduledata could be found to supply it.
    #[error(
        "cannot find the start of Go text: pcHeader.textStart is zero and neither runtime.firstmoduledata nor a moduledata pointing at the pcHeader ({pcheader:#x}) was found"
    )]
    TextStartNotFound { pcheader: u64 },
    /// No `.go.buildinfo` section and no build info magic in the data segments.
    #[error("no Go build info (.go.buildinfo) found")]
    NoBuildInfo,
    /// The build info blob is present but truncated or inconsistent.
    #[error("corrupted Go build info: {0}")]
    CorruptBuildInfo(String),
    /// A virtual address that should be backed by file data is not inside any PT_LOAD segment.
    #[error("{what} at {addr:#x} is not backed by file data of any PT_LOAD segment")]
    AddressNotMapped { what: &'static str, addr: u64 },
    /// RET search was asked for a function of a binary this crate cannot decode.
    #[error("cannot decode instructions for machine {machine}: only x86-64 is supported")]
    UnsupportedArchitecture { machine: String },
    /// No struct offsets are known for the Go release that built the binary.
    #[error("no struct offsets for Go version {version:?}: the table covers {known}")]
    UnknownGoVersion { version: String, known: String },
    /// A struct or field the runtime type descriptors do not hold, or
    /// descriptors that cannot be read.
    #[error("runtime type descriptors: {reason}")]
    TypeDescriptors { reason: String },
    /// Where a function's parameters are could not be read from the binary
    /// (`GoBinary::arg_locations`).
    #[error("parameters of {function}: {reason}")]
    ArgLocations { function: String, reason: String },
    /// A Kubernetes component (it has `k8s.io/component-base/version`) whose
    /// `gitVersion` could not be read or is not `vMAJOR.MINOR.PATCH`.
    #[error("Kubernetes version not found: {reason}")]
    KubeVersionNotFound { reason: String },
    /// No Kubernetes struct offsets are known for this Kubernetes release.
    #[error("no Kubernetes struct offsets for Kubernetes {version}: the table covers {known}")]
    UnknownKubeVersion { version: String, known: String },
}

/// Shorthand used throughout the crate.
pub type Result<T, E = GoBinError> = std::result::Result<T, E>;

/// The Go releases whose pclntab has `magic`, where it is one of the older
/// formats: a binary of a release this crate does not read (etcd 3.5.0 and
/// 3.5.1 were built with Go 1.16) is named as such.
fn older_release(magic: u32) -> &'static str {
    match magic {
        0xffff_fffa => ", a Go 1.16-1.17 binary",
        0xffff_fffb => ", a Go 1.2-1.15 binary",
        _ => "",
    }
}
