//! Builds the eBPF object (crate tracer-ebpf) for `bpfel-unknown-none` with
//! aya-build and the `podtrace-bpf` toolchain that `cargo xtask setup` links
//! (Debian's rustc with its library source; see ARCHITECTURE.md, "Toolchain").
//! The object lands in `$OUT_DIR/tracer-ebpf` and is embedded in the agent.
//!
//! `AYA_BUILD_SKIP=1` skips the eBPF build (for linting on a machine without
//! the toolchain); the agent then refuses to load with a clear error.

use std::{env, fs, path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

/// The rustup toolchain `cargo xtask setup` links; overridable for unusual setups.
const DEFAULT_TOOLCHAIN: &str = "podtrace-bpf";

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=PODTRACE_BPF_TOOLCHAIN");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let object = out_dir.join("tracer-ebpf");

    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        // An empty object: `capture::loader` reports it instead of loading.
        fs::write(&object, []).with_context(|| format!("writing {}", object.display()))?;
        return Ok(());
    }

    let toolchain =
        env::var("PODTRACE_BPF_TOOLCHAIN").unwrap_or_else(|_| DEFAULT_TOOLCHAIN.to_owned());
    let probe = Command::new("rustup")
        .args(["run", &toolchain, "rustc", "--version"])
        .output();
    if !probe.is_ok_and(|out| out.status.success()) {
        bail!(
            "the eBPF toolchain `{toolchain}` is not installed: run `cargo xtask setup` (as root) first, \
             or set AYA_BUILD_SKIP=1 to build without the eBPF object"
        );
    }

    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?);
    let ebpf_dir = manifest_dir
        .join("../tracer-ebpf")
        .canonicalize()
        .context("locating tracer-ebpf")?;
    let ebpf_dir = ebpf_dir.to_str().context("tracer-ebpf path is not UTF-8")?;
    // aya-build watches the eBPF crate; the object is also built from the
    // shared wire types, which cargo does not count as a reason to rerun.
    let common_dir = manifest_dir
        .join("../tracer-common")
        .canonicalize()
        .context("locating tracer-common")?;
    println!("cargo:rerun-if-changed={}", common_dir.display());
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir: ebpf_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(&toolchain),
    )
}
