//! The Go programs of the harness (`tests/fixtures/go/*`), built on demand
//! with the newest Go toolchain that `cargo xtask setup` installed.
//!
//! In: a cache directory, the program's name and source, the oldest Go
//! release that builds it. Out: the executable and the Go release it was
//! built with. With Go's build cache (`cache_dir/gocache`) warm a build takes
//! well under a second, a first build tens of seconds. Builds into one
//! directory may run at once: each builds apart and renames its binary into
//! place.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tracer_gobin::{
    GoRelease,
    fixture::{self, Variant},
};

/// A built Go program.
#[derive(Debug, Clone)]
pub struct GoProgram {
    /// `cache_dir/NAME`.
    pub path: PathBuf,
    /// The Go release it was built with, e.g. `go1.26.6`.
    pub go_version: String,
}

/// Builds `source` (a Go main package) into `cache_dir/name` with the newest
/// toolchain of release `min_release` or newer (see [`fixture::toolchains`]).
pub fn build(
    cache_dir: &Path,
    name: &str,
    source: &Path,
    min_release: (u32, u32),
) -> anyhow::Result<GoProgram> {
    let toolchain = fixture::toolchains()
        .into_iter()
        .rfind(|toolchain| {
            GoRelease::parse(&toolchain.version)
                .is_some_and(|release| (release.major, release.minor) >= min_release)
        })
        .with_context(|| {
            let (major, minor) = min_release;
            let place = match std::env::var_os("PODTRACE_GO_ROOTS") {
                Some(roots) => format!("PODTRACE_GO_ROOTS ({})", roots.to_string_lossy()),
                None => fixture::workspace_root()
                    .join(".tools/go")
                    .display()
                    .to_string(),
            };
            format!(
                "no Go toolchain of release {major}.{minor} or newer in {place} to build \
                 {name}: run `cargo xtask setup`"
            )
        })?;
    // Go wants absolute GOCACHE and GOPATH.
    let cache_dir = &std::path::absolute(cache_dir)
        .with_context(|| format!("the absolute path of {}", cache_dir.display()))?;
    std::fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating {}", cache_dir.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(cache_dir)
        .with_context(|| format!("creating a build directory in {}", cache_dir.display()))?;
    let built = fixture::build_source(
        &toolchain,
        Variant::Plain,
        source,
        staging.path(),
        &cache_dir.join("gocache"),
    )
    .with_context(|| format!("building {name} with {}", toolchain.version))?;
    let path = cache_dir.join(name);
    std::fs::rename(&built, &path)
        .with_context(|| format!("moving {} to {}", built.display(), path.display()))?;
    Ok(GoProgram {
        path,
        go_version: toolchain.version,
    })
}
