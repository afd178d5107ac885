//! Live: podtrace's container image. `cargo xtask image` builds the OCI image
//! tarball without a container engine; packaging the same binary again gives
//! the same bytes; the harness's containerd imports it with `ctr images
//! import`, and the podtrace in it runs as a privileged container (`ctr
//! run`): `--version` and `check`, whose report matches the same binary's on
//! the host. Nothing is left behind.
//!
//! The test runs `cargo xtask image` as a user would rather than calling the
//! assembly code: xtask is a binary crate, and the command (setup, release
//! build, ldd, assembly) is the deliverable.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    collections::BTreeSet,
    fs,
    io::Read as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Instant,
};

use podtrace_tests::{
    components::{Containerd, ContainerdOptions, leftovers},
    live_test_can_run, succeed, xtask,
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

const IMAGE: &str = "podtrace.local/podtrace:live-test";
/// The containerd namespace of this test's image and containers.
const NAMESPACE: &str = "podtrace-image-test";
const BINARY: &str = "usr/local/bin/podtrace";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The files of a tar, by path (directories end with `/`), with their mode
/// and mtime.
fn tar_entries(tar: &[u8]) -> Vec<(String, u32, u64, Vec<u8>)> {
    tar::Archive::new(tar)
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let (mode, mtime) = (
                entry.header().mode().unwrap(),
                entry.header().mtime().unwrap(),
            );
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            (path, mode, mtime, data)
        })
        .collect()
}

/// An OCI image-layout tarball, read back and checked on the way: every
/// blob's name is its sha256, the index has one manifest, the manifest one
/// gzip layer, and the config's diff_id is the layer's uncompressed digest.
struct ImageLayout {
    index: Value,
    config: Value,
    /// (path, mode, mtime, content) of the layer's entries, in tar order.
    layer: Vec<(String, u32, u64, Vec<u8>)>,
}

impl ImageLayout {
    fn read(path: &Path) -> Self {
        let outer = tar_entries(&fs::read(path).unwrap());
        let file = |name: &str| -> &[u8] {
            let (_, _, _, data) = outer
                .iter()
                .find(|(path, ..)| path == name)
                .unwrap_or_else(|| panic!("no {name} in the tarball"));
            data
        };
        let blob = |digest: &Value| -> &[u8] {
            let digest = digest.as_str().unwrap();
            file(&format!("blobs/{}", digest.replace(':', "/")))
        };
        for (path, _, mtime, data) in &outer {
            assert_eq!(*mtime, 0, "{path} has mtime {mtime}");
            if let Some(hex) = path.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
                assert_eq!(format!("{:x}", Sha256::digest(data)), hex);
            }
        }
        let layout: Value = serde_json::from_slice(file("oci-layout")).unwrap();
        assert_eq!(layout["imageLayoutVersion"], "1.0.0");
        let index: Value = serde_json::from_slice(file("index.json")).unwrap();
        assert_eq!(index["manifests"].as_array().unwrap().len(), 1, "{index}");
        let manifest: Value =
            serde_json::from_slice(blob(&index["manifests"][0]["digest"])).unwrap();
        let config: Value = serde_json::from_slice(blob(&manifest["config"]["digest"])).unwrap();
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{manifest}");
        assert_eq!(
            layers[0]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let mut layer_tar = Vec::new();
        flate2::read::GzDecoder::new(blob(&layers[0]["digest"]))
            .read_to_end(&mut layer_tar)
            .unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"],
            serde_json::json!([format!("sha256:{:x}", Sha256::digest(&layer_tar))])
        );
        Self {
            index,
            config,
            layer: tar_entries(&layer_tar),
        }
    }

    fn file(&self, path: &str) -> &[u8] {
        let (_, _, _, data) = self
            .layer
            .iter()
            .find(|(name, ..)| name == path)
            .unwrap_or_else(|| panic!("no {path} in the layer"));
        data
    }
}

/// The absolute paths `ldd` gives for `binary` (libraries and loader).
fn ldd_paths(binary: &Path) -> BTreeSet<String> {
    let output = Command::new("ldd").arg(binary).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .filter_map(|line| {
            let resolved = line.split_once("=>").map_or(line, |(_, path)| path);
            let path = resolved.split(" (0x").next()?.trim();
            path.starts_with('/').then(|| path.to_owned())
        })
        .collect()
}

fn ctr(containerd: &Containerd) -> Command {
    let mut command = Command::new("/usr/bin/ctr");
    command
        .arg("--address")
        .arg(containerd.socket())
        .args(["--namespace", NAMESPACE]);
    command
}

/// Runs `args` in a privileged container of the image (host network; no
/// tracefs, which podtrace does not need), removed when it exits. Everything the run
/// creates stays under containerd's directory and cgroup root, which its
/// teardown removes even if this run is cut short: runc's state, the
/// stdio FIFOs, the container's cgroup.
fn run_in_image(containerd: &Containerd, id: &str, args: &[&str]) -> Output {
    let mut command = Command::new("/usr/bin/timeout");
    command
        .args(["--kill-after=10", "120"])
        .arg("/usr/bin/ctr")
        .arg("--address")
        .arg(containerd.socket())
        .args([
            "--namespace",
            NAMESPACE,
            "run",
            "--rm",
            "--privileged",
            "--net-host",
        ])
        .arg("--runc-root")
        .arg(containerd.runc_root())
        .arg("--fifo-dir")
        .arg(containerd.dir().join("fifo"))
        .arg("--cgroup")
        .arg(format!("{}/{id}", containerd.cgroup_root()))
        .args([IMAGE, id])
        .args(args);
    let started = Instant::now();
    let output = command.output().unwrap();
    eprintln!("ctr run {args:?}: {:?}", started.elapsed());
    output
}

#[test]
fn image_builds_without_an_engine_reproducibly_and_runs_podtrace_check_in_containerd() {
    if !live_test_can_run(
        "image_builds_without_an_engine_reproducibly_and_runs_podtrace_check_in_containerd",
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let first = work.path().join("first.oci.tar");
    let started = Instant::now();
    let summary = xtask(&[
        "image".as_ref(),
        "--name".as_ref(),
        IMAGE.as_ref(),
        "--out".as_ref(),
        first.as_os_str(),
    ]);
    eprintln!(
        "cargo xtask image: {:?}, {} bytes\n{summary}",
        started.elapsed(),
        fs::metadata(&first).unwrap().len()
    );

    // What the image says about itself.
    let image = ImageLayout::read(&first);
    let entry = &image.index["manifests"][0];
    assert_eq!(entry["annotations"]["io.containerd.image.name"], IMAGE);
    assert_eq!(entry["platform"]["os"], "linux");
    let config = &image.config["config"];
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/podtrace"])
    );
    assert_eq!(config["Cmd"], serde_json::json!(["run", "--quiet"]));
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        labels["org.opencontainers.image.licenses"],
        env!("CARGO_PKG_LICENSE")
    );
    assert_eq!(
        labels["org.opencontainers.image.source"],
        "https://github.com/podtrace/podtrace"
    );

    // The layer: podtrace, exactly what ldd lists for it, nsswitch.conf and
    // the directories holding them; every entry at time 0.
    let binary = work.path().join("podtrace");
    fs::write(&binary, image.file(BINARY)).unwrap();
    fs::set_permissions(&binary, fs::Permissions::from_mode(0o755)).unwrap();
    let files: BTreeSet<String> = image
        .layer
        .iter()
        .filter(|(path, ..)| !path.ends_with('/'))
        .map(|(path, ..)| format!("/{path}"))
        .collect();
    let mut expected = ldd_paths(&binary);
    expected.extend([format!("/{BINARY}"), "/etc/nsswitch.conf".to_owned()]);
    assert_eq!(files, expected);
    for (path, mode, mtime, _) in &image.layer {
        assert_eq!(*mtime, 0, "{path}");
        if path == BINARY {
            assert_eq!(*mode, 0o755);
        }
    }

    // Reproducible: the same binary packaged again gives the same bytes.
    // (The packaged copy, not target/release/podtrace, which a concurrent
    // build may have replaced since.)
    let second = work.path().join("second.oci.tar");
    xtask(&[
        "image".as_ref(),
        "--binary".as_ref(),
        binary.as_os_str(),
        "--name".as_ref(),
        IMAGE.as_ref(),
        "--out".as_ref(),
        second.as_os_str(),
    ]);
    assert!(
        fs::read(&first).unwrap() == fs::read(&second).unwrap(),
        "packaging the same podtrace twice gave different tarballs"
    );

    // The image runs: imported into containerd, podtrace starts in it.
    let host_check = Command::new(&binary).arg("check").output().unwrap();
    assert!(host_check.status.success(), "{}", text(&host_check.stdout));
    let containerd = Containerd::start(ContainerdOptions {
        image_cache_dir: env!("CARGO_TARGET_TMPDIR").into(),
    })
    .unwrap();
    let (dir, cgroup_root) = (
        containerd.dir().to_owned(),
        containerd.cgroup_root().to_owned(),
    );
    let imported = Instant::now();
    succeed(ctr(&containerd).args(["images", "import"]).arg(&first));
    eprintln!("ctr images import: {:?}", imported.elapsed());
    let images = succeed(ctr(&containerd).args(["images", "ls", "-q"]));
    assert_eq!(images.lines().collect::<Vec<_>>(), [IMAGE]);

    let version = run_in_image(
        &containerd,
        "podtrace-version",
        &[&format!("/{BINARY}"), "--version"],
    );
    assert!(
        version.status.success(),
        "podtrace --version in the image failed ({}): {}",
        version.status,
        text(&version.stderr)
    );
    assert_eq!(
        text(&version.stdout).trim(),
        format!("podtrace {}", env!("CARGO_PKG_VERSION"))
    );

    let check = run_in_image(
        &containerd,
        "podtrace-check",
        &[&format!("/{BINARY}"), "check"],
    );
    let report = text(&check.stdout);
    assert!(
        check.status.success(),
        "podtrace check in the image failed ({}):\n{report}{}",
        check.status,
        text(&check.stderr)
    );
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let first_line = report.lines().next().unwrap_or_default();
    assert!(
        first_line.starts_with("ok") && first_line.contains(&format!("Linux {}", kernel.trim())),
        "{report}"
    );
    for feature in ["BTF", "ring buffer", "uprobes", "CAP_BPF+PERFMON"] {
        assert!(
            report
                .lines()
                .any(|line| line.starts_with("ok") && line.contains(feature)),
            "no ok line for {feature}:\n{report}"
        );
    }
    assert_eq!(
        report.lines().last(),
        Some("podtrace can run on this host"),
        "{report}"
    );
    // Inside the privileged container podtrace sees what it sees on the host,
    // but for tracefs, which is not bound in: podtrace does not use it.
    let without_tracefs = |report: &str| {
        report
            .lines()
            .filter(|line| !line.contains(" tracefs "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        without_tracefs(&report),
        without_tracefs(&text(&host_check.stdout))
    );

    // `ctr run --rm` removed both containers and their snapshots.
    assert_eq!(
        succeed(ctr(&containerd).args(["containers", "ls", "-q"])),
        ""
    );
    let snapshots = succeed(ctr(&containerd).args(["snapshots", "ls"]));
    assert!(
        !snapshots.lines().any(|line| line.contains("Active")),
        "{snapshots}"
    );
    drop(containerd);
    assert_eq!(
        leftovers::processes_mentioning(&dir.display().to_string()),
        []
    );
    assert_eq!(leftovers::mounts_under(&dir), Vec::<PathBuf>::new());
    assert_eq!(leftovers::cgroup_dirs(&cgroup_root), Vec::<PathBuf>::new());
    assert!(!dir.exists(), "{} is left", dir.display());
}
