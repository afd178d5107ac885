//! Container images built locally from busybox-static, because no registry
//! is reachable: a pause (sandbox) image and a busybox workload image.
//!
//! In: `/bin/busybox` and a cache directory. Out: OCI image-layout tarballs
//! (`oci-layout`, `index.json`, `blobs/sha256/…`) that
//! `ctr images import` accepts, named [`PAUSE_IMAGE`] and
//! [`WORKLOAD_IMAGE`]. Both images share one gzip layer: busybox with its
//! applet links, a minimal `/etc/passwd` and the `/pause` script. The pause
//! image runs `/pause` (sleeps until SIGTERM or SIGINT, then exits 0); the
//! workload image runs [`WORKLOAD_COMMAND`]. Tarballs are cached under a key
//! derived from the busybox binary and this module's format version, so only
//! the first run pays for building them.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use flate2::{Compression, write::GzEncoder};
use serde_json::json;
use sha2::{Digest as _, Sha256};

const BUSYBOX: &str = "/bin/busybox";
/// Bump when the images' content or layout changes, to invalidate caches.
const FORMAT_VERSION: &str = "1";

/// The sandbox image (`sandbox_image` in containerd's CRI configuration).
pub const PAUSE_IMAGE: &str = "podtrace.local/pause:1";
/// The workload image.
pub const WORKLOAD_IMAGE: &str = "podtrace.local/busybox:1";
/// The workload image's default command.
pub const WORKLOAD_COMMAND: [&str; 3] = ["/bin/sh", "-c", "echo started; sleep 3600"];

/// The sandbox's main process. A shell script rather than a shell command
/// line so that its process name (comm) is `pause`, as with the real image.
/// As PID 1 of its PID namespace it would ignore SIGTERM without a handler.
const PAUSE_SCRIPT: &str = "#!/bin/sh
# podtrace's pause process: sleeps until SIGTERM or SIGINT.
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
";

/// An image tarball and the name it is imported under.
#[derive(Debug, Clone)]
pub struct ImageTarball {
    pub name: &'static str,
    pub path: PathBuf,
}

/// Builds (or finds in `cache_dir`) the pause and workload image tarballs.
pub fn build_images(cache_dir: &Path) -> anyhow::Result<[ImageTarball; 2]> {
    let busybox = fs::read(BUSYBOX).with_context(|| {
        format!(
            "reading {BUSYBOX} (Debian package busybox-static; `cargo xtask setup` installs it)"
        )
    })?;
    let key = hex(&Sha256::new()
        .chain_update(FORMAT_VERSION)
        .chain_update(&busybox)
        .finalize());
    let dir = cache_dir.join("podtrace-images").join(&key[..16]);
    let images = [
        ImageTarball {
            name: PAUSE_IMAGE,
            path: dir.join("pause.tar"),
        },
        ImageTarball {
            name: WORKLOAD_IMAGE,
            path: dir.join("busybox.tar"),
        },
    ];
    if images.iter().all(|image| image.path.exists()) {
        return Ok(images);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let layer = Layer::build(&busybox)?;
    write_image_tarball(&images[0], &layer, &json!({"Entrypoint": ["/pause"]}))?;
    write_image_tarball(&images[1], &layer, &json!({ "Cmd": WORKLOAD_COMMAND }))?;
    Ok(images)
}

/// Imports `image` into containerd's `k8s.io` namespace (the CRI's), and
/// unpacks it for the default snapshotter.
pub fn import_image(image: &ImageTarball, containerd_socket: &Path) -> anyhow::Result<()> {
    let output = Command::new("/usr/bin/ctr")
        .arg("--address")
        .arg(containerd_socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(&image.path)
        .output()
        .context("running ctr images import")?;
    if !output.status.success() {
        bail!(
            "ctr images import {} failed ({}): {}",
            image.path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The shared root filesystem layer.
struct Layer {
    gzip: Vec<u8>,
    /// sha256 of the uncompressed tar: the image config's `diff_id`.
    diff_id: String,
}

impl Layer {
    fn build(busybox: &[u8]) -> anyhow::Result<Self> {
        let mut tar = tar::Builder::new(Vec::new());
        for dir in [
            "bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "etc", "proc", "sys", "root",
            "var", "run",
        ] {
            append_dir(&mut tar, dir, 0o755)?;
        }
        append_dir(&mut tar, "tmp", 0o1777)?;
        append_file(&mut tar, "bin/busybox", busybox, 0o755)?;
        append_file(&mut tar, "pause", PAUSE_SCRIPT.as_bytes(), 0o755)?;
        append_file(
            &mut tar,
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
            0o644,
        )?;
        append_file(
            &mut tar,
            "etc/group",
            b"root:x:0:\nnogroup:x:65534:\n",
            0o644,
        )?;
        for applet in busybox_applets()? {
            if applet != "bin/busybox" {
                append_symlink(&mut tar, &applet, "/bin/busybox")?;
            }
        }
        let tar = tar.into_inner().context("finishing the layer tar")?;
        let diff_id = format!("sha256:{}", hex(&Sha256::digest(&tar)));
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&tar).context("compressing the layer")?;
        let gzip = gz.finish().context("compressing the layer")?;
        Ok(Self { gzip, diff_id })
    }
}

/// Paths of busybox's applets relative to `/` (`bin/sh`, `usr/bin/env`, …),
/// from `busybox --list-full`.
fn busybox_applets() -> anyhow::Result<Vec<String>> {
    let output = Command::new(BUSYBOX)
        .arg("--list-full")
        .output()
        .with_context(|| format!("running {BUSYBOX} --list-full"))?;
    if !output.status.success() {
        bail!("{BUSYBOX} --list-full failed ({})", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim_start_matches('/').to_owned())
        // Only into directories the layer has.
        .filter(|path| {
            ["bin/", "sbin/", "usr/bin/", "usr/sbin/"]
                .iter()
                .any(|dir| {
                    path.strip_prefix(dir)
                        .is_some_and(|name| !name.contains('/'))
                })
        })
        .collect())
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    // A fixed time: the same input gives the same digests on every run.
    header.set_mtime(0);
    header
}

fn append_dir(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) -> anyhow::Result<()> {
    let mut header = header(tar::EntryType::Directory, mode, 0);
    tar.append_data(&mut header, format!("{path}/"), &[][..])
        .with_context(|| format!("adding directory {path} to the layer"))
}

fn append_file(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    data: &[u8],
    mode: u32,
) -> anyhow::Result<()> {
    let mut header = header(tar::EntryType::Regular, mode, data.len() as u64);
    tar.append_data(&mut header, path, data)
        .with_context(|| format!("adding {path} to the layer"))
}

fn append_symlink(tar: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) -> anyhow::Result<()> {
    let mut header = header(tar::EntryType::Symlink, 0o777, 0);
    tar.append_link(&mut header, path, target)
        .with_context(|| format!("adding link {path} to the layer"))
}

/// Writes the OCI image-layout tarball of one image: `layer` plus a config
/// whose `config` section is `runtime_config` (Entrypoint/Cmd).
fn write_image_tarball(
    image: &ImageTarball,
    layer: &Layer,
    runtime_config: &serde_json::Value,
) -> anyhow::Result<()> {
    let mut runtime_config = runtime_config.clone();
    runtime_config["Env"] = json!(["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]);
    runtime_config["WorkingDir"] = json!("/");
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": runtime_config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created_by": "podtrace-tests components::images (busybox-static)"}],
    }))?;
    let config_digest = blob_digest(&config);
    let layer_digest = blob_digest(&layer.gzip);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": layer_digest,
            "size": layer.gzip.len(),
        }],
    }))?;
    let manifest_digest = blob_digest(&manifest);
    let (_, tag) = image
        .name
        .rsplit_once(':')
        .unwrap_or((image.name, "latest"));
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            // containerd names the imported image after this annotation.
            "annotations": {
                "io.containerd.image.name": image.name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))?;

    let mut tar = tar::Builder::new(Vec::new());
    append_file(
        &mut tar,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    )?;
    append_file(&mut tar, "index.json", &index, 0o644)?;
    append_dir(&mut tar, "blobs", 0o755)?;
    append_dir(&mut tar, "blobs/sha256", 0o755)?;
    for (digest, blob) in [
        (&manifest_digest, &manifest),
        (&config_digest, &config),
        (&layer_digest, &layer.gzip),
    ] {
        let name = digest.replace(':', "/");
        append_file(&mut tar, &format!("blobs/{name}"), blob, 0o644)?;
    }
    let bytes = tar.into_inner().context("finishing the image tarball")?;
    // Written aside and renamed, so a concurrent or interrupted run never
    // sees half a tarball.
    let partial = image
        .path
        .with_extension(format!("partial-{}", std::process::id()));
    fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, &image.path)
        .with_context(|| format!("renaming {} into place", partial.display()))
}

fn blob_digest(blob: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(blob)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
