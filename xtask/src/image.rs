//! `cargo xtask image`: podtrace's container image, assembled without a
//! container engine.
//!
//! In: the release `podtrace` (built here, or given with `--binary`) and the
//! shared objects `ldd` says it loads. Out: one tar holding an OCI image
//! layout — `oci-layout`, `index.json` and `blobs/sha256/…` with the
//! manifest, the config and one gzip layer — that `ctr images import`,
//! `docker load` and `podman load` accept. The layer holds
//! `/usr/local/bin/podtrace`, every library and the dynamic loader at the
//! path `ldd` gives, `/etc/nsswitch.conf`, `/tmp` and the working directory
//! `/var/lib/podtrace`. Entrypoint `/usr/local/bin/podtrace`, command
//! `run --quiet`, `org.opencontainers.image.*` labels from the workspace's
//! Cargo.toml.
//!
//! Why glibc and not a static binary: podtrace links glibc dynamically, and
//! the musl target is not part of the toolchain `cargo xtask setup` provides
//! (rustup would download it); it would also swap the allocator and the
//! resolver under the agent. So the image carries the binary the test suite
//! runs plus exactly the libraries it loads (about 3.2 MB). A static binary
//! given with `--binary` works too: `ldd` lists nothing and the layer holds
//! only it.
//!
//! Reproducible: every entry has owner 0:0, a fixed mode and the mtime
//! `SOURCE_DATE_EPOCH` (0 when unset), which is also the config's `created`;
//! entries are sorted; gzip records no name or time; JSON objects are
//! written with sorted keys (oci-spec keeps labels and annotations in
//! HashMaps, whose order changes from run to run). The same binary and
//! libraries give the same bytes, so the same digests.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
    str::FromStr as _,
    time::Instant,
};

use anyhow::{Context as _, bail};
use flate2::{Compression, GzBuilder};
use oci_spec::image::{
    ANNOTATION_CREATED, ANNOTATION_DESCRIPTION, ANNOTATION_LICENSES, ANNOTATION_REF_NAME,
    ANNOTATION_SOURCE, ANNOTATION_TITLE, ANNOTATION_VERSION, Arch, ConfigBuilder, Descriptor,
    DescriptorBuilder, Digest, HistoryBuilder, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, OciLayoutBuilder, Os, PlatformBuilder, RootFsBuilder,
    SCHEMA_VERSION, Sha256Digest,
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::setup;

/// Where podtrace sits in the image (relative to `/`, as in the layer).
const BINARY_PATH: &str = "usr/local/bin/podtrace";
/// The default arguments after the entrypoint: the agent, waterfalls only.
const DEFAULT_COMMAND: [&str; 2] = ["run", "--quiet"];
/// The working directory: `podtrace run` writes its OTLP-JSON file here
/// when no `--otlp-endpoint` is given (mount a volume to keep it).
const WORKING_DIR: &str = "var/lib/podtrace";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Without this file glibc asks DNS before `/etc/hosts` (the kubelet
/// writes the Pod's /etc/hosts); Debian's order.
const NSSWITCH_CONF: &str = "hosts: files dns\nnetworks: files\n";
/// containerd (and Docker) name an imported image after this annotation of
/// its `index.json` entry.
const CONTAINERD_IMAGE_NAME: &str = "io.containerd.image.name";
const TITLE: &str = "podtrace";
const DESCRIPTION: &str = "eBPF agent that traces each Kubernetes Pod's creation through \
     the apiserver, etcd, scheduler, kubelet, containerd and runc";
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The name deploy/ refers to the image by (base/kustomization.yaml), so
/// that an image imported into a node's containerd is the one the
/// DaemonSet runs.
const DEFAULT_NAME: &str = concat!("ghcr.io/podtrace/podtrace:", env!("CARGO_PKG_VERSION"));

/// What `cargo xtask image` was asked for.
#[derive(Debug, clap::Args)]
pub(crate) struct ImageArgs {
    /// The tarball to write [default: target/podtrace-VERSION.oci.tar in the workspace].
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Package this podtrace binary instead of building the workspace's in
    /// release mode.
    #[arg(long, value_name = "FILE")]
    binary: Option<PathBuf>,
    /// The name the image gets when it is loaded.
    #[arg(long, default_value = DEFAULT_NAME)]
    name: String,
}

pub(crate) fn image(root: &Path, args: ImageArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let binary = match &args.binary {
        Some(binary) => binary.clone(),
        None => {
            setup::setup_build()?;
            crate::build_podtrace(root, &[])?
        }
    };
    let build_time = args.binary.is_none().then(|| started.elapsed());
    let out = match &args.out {
        Some(out) => out.clone(),
        None => root.join(format!("target/podtrace-{VERSION}.oci.tar")),
    };
    let metadata = ImageMetadata {
        name: args.name,
        created_epoch_s: source_date_epoch()?,
    };

    let mut files = vec![LayerFile {
        path: BINARY_PATH.to_owned(),
        data: fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?,
        mode: 0o755,
    }];
    for library in shared_objects(&binary)? {
        let data = fs::read(&library).with_context(|| format!("reading {}", library.display()))?;
        let path = library.to_string_lossy().trim_start_matches('/').to_owned();
        // The loader is executed (`ld.so BINARY`); libraries are only mapped.
        let mode = if is_dynamic_loader(&path) {
            0o755
        } else {
            0o644
        };
        files.push(LayerFile { path, data, mode });
    }
    files.push(LayerFile {
        path: "etc/nsswitch.conf".to_owned(),
        data: NSSWITCH_CONF.as_bytes().to_vec(),
        mode: 0o644,
    });

    let image = assemble(&metadata, &files)?;
    write_atomically(&out, &image.tarball)?;
    let assembly_time = started.elapsed() - build_time.unwrap_or_default();
    println!(
        "xtask: image {} → {} ({}; layer {} gzip, {} unpacked), assembled in {:.1}s{}",
        metadata.name,
        out.display(),
        size(image.tarball.len()),
        size(image.layer_gzip_bytes),
        size(image.layer_tar_bytes),
        assembly_time.as_secs_f64(),
        build_time.map_or_else(String::new, |build| format!(
            " after {:.1}s of setup and cargo build",
            build.as_secs_f64()
        )),
    );
    println!("xtask: manifest {}", image.manifest_digest);
    for file in &files {
        println!("xtask:   /{} ({})", file.path, size(file.data.len()));
    }
    println!(
        "xtask: load it with `ctr -n k8s.io images import {0}` (for the kubelet), `docker load -i {0}` or `podman load -i {0}`",
        out.display()
    );
    Ok(())
}

/// What the image says about itself besides its files.
#[derive(Debug)]
struct ImageMetadata {
    /// The reference it is loaded as (`ghcr.io/podtrace/podtrace:0.1.0`).
    name: String,
    /// The time of every layer entry and the config's `created`.
    created_epoch_s: i64,
}

/// A regular file of the layer; its directories are added with mode 0755.
#[derive(Debug)]
struct LayerFile {
    /// Relative to `/`, without a leading slash.
    path: String,
    data: Vec<u8>,
    mode: u32,
}

/// The assembled image-layout tarball and what the summary reports.
#[derive(Debug)]
struct AssembledImage {
    tarball: Vec<u8>,
    manifest_digest: Digest,
    layer_gzip_bytes: usize,
    layer_tar_bytes: usize,
}

/// `SOURCE_DATE_EPOCH` (reproducible-builds.org), or 0.
fn source_date_epoch() -> anyhow::Result<i64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(value) => value
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={value} is not a number of seconds")),
        Err(std::env::VarError::NotPresent) => Ok(0),
        Err(err) => Err(err).context("reading SOURCE_DATE_EPOCH"),
    }
}

/// The shared objects `binary` loads, as `ldd` resolves them on this host.
fn shared_objects(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .with_context(|| format!("running ldd {}", binary.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // glibc's ldd fails on a static (non-PIE) binary, and says why.
    if stdout.contains("not a dynamic executable") || stderr.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    if !output.status.success() {
        bail!(
            "ldd {} failed ({}): {}",
            binary.display(),
            output.status,
            stderr.trim()
        );
    }
    parse_ldd(&stdout)
}

/// The absolute paths in `ldd`'s output: `name => /path (0x…)` for a
/// library, `/path (0x…)` for the loader. The vDSO (no file) and
/// "statically linked" give none; a library "not found" is an error.
fn parse_ldd(output: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
    {
        let (name, resolved) = line.split_once("=>").unwrap_or((line, line));
        let resolved = resolved.trim();
        if resolved.starts_with("not found") {
            bail!("ldd: {} not found on this host", name.trim());
        }
        let path = resolved.split(" (0x").next().unwrap_or_default().trim();
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// `ld-linux-x86-64.so.2`, `ld-linux-aarch64.so.1`, …
fn is_dynamic_loader(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with("ld-linux"))
}

/// The OCI platform architecture of this host (the binary's).
fn oci_architecture() -> anyhow::Result<Arch> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(Arch::Amd64),
        "aarch64" => Ok(Arch::ARM64),
        other => bail!("no OCI architecture known for {other}"),
    }
}

/// Builds the layer, config, manifest and index, and the tar holding them.
fn assemble(metadata: &ImageMetadata, files: &[LayerFile]) -> anyhow::Result<AssembledImage> {
    let mtime = u64::try_from(metadata.created_epoch_s)
        .context("SOURCE_DATE_EPOCH before 1970 cannot be a tar mtime")?;
    let created = time::OffsetDateTime::from_unix_timestamp(metadata.created_epoch_s)
        .context("SOURCE_DATE_EPOCH out of range")?
        .format(&time::format_description::well_known::Rfc3339)
        .context("formatting the creation time")?;

    let mut layer = SortedTree::default();
    for file in files {
        layer.file(&file.path, file.data.clone(), file.mode);
    }
    layer.directory("tmp", 0o1777);
    layer.directory(WORKING_DIR, 0o755);
    let layer_tar = layer.into_tar(mtime)?;
    let diff_id = sha256_digest(&layer_tar)?;
    let mut gzip = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::default());
    gzip.write_all(&layer_tar)
        .context("compressing the layer")?;
    let layer_gzip = gzip.finish().context("compressing the layer")?;

    let labels = HashMap::from(
        [
            (ANNOTATION_TITLE, TITLE),
            (ANNOTATION_DESCRIPTION, DESCRIPTION),
            (ANNOTATION_VERSION, VERSION),
            (ANNOTATION_SOURCE, env!("CARGO_PKG_REPOSITORY")),
            (ANNOTATION_LICENSES, env!("CARGO_PKG_LICENSE")),
            (ANNOTATION_CREATED, created.as_str()),
        ]
        .map(|(key, value)| (key.to_owned(), value.to_owned())),
    );
    let architecture = oci_architecture()?;
    let config = ImageConfigurationBuilder::default()
        .created(created.clone())
        .architecture(architecture.clone())
        .os(Os::Linux)
        .config(
            ConfigBuilder::default()
                .entrypoint(vec![format!("/{BINARY_PATH}")])
                .cmd(DEFAULT_COMMAND.map(str::to_owned).to_vec())
                .env(vec![PATH_ENV.to_owned()])
                .working_dir(format!("/{WORKING_DIR}"))
                .labels(labels)
                .build()?,
        )
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![diff_id.to_string()])
                .build()?,
        )
        .history(vec![
            HistoryBuilder::default()
                .created(created)
                .created_by("cargo xtask image: podtrace and the shared objects ldd lists for it")
                .build()?,
        ])
        .build()?;
    let config = canonical_json(&config)?;
    let manifest = canonical_json(
        &ImageManifestBuilder::default()
            .schema_version(SCHEMA_VERSION)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(MediaType::ImageConfig, &config)?)
            .layers(vec![descriptor(MediaType::ImageLayerGzip, &layer_gzip)?])
            .build()?,
    )?;
    let manifest_digest = sha256_digest(&manifest)?;
    let mut manifest_descriptor = descriptor(MediaType::ImageManifest, &manifest)?;
    manifest_descriptor.set_platform(Some(
        PlatformBuilder::default()
            .architecture(architecture)
            .os(Os::Linux)
            .build()?,
    ));
    manifest_descriptor.set_annotations(Some(HashMap::from([
        (CONTAINERD_IMAGE_NAME.to_owned(), metadata.name.clone()),
        (ANNOTATION_REF_NAME.to_owned(), metadata.name.clone()),
    ])));
    let index = canonical_json(
        &ImageIndexBuilder::default()
            .schema_version(SCHEMA_VERSION)
            .media_type(MediaType::ImageIndex)
            .manifests(vec![manifest_descriptor])
            .build()?,
    )?;
    let oci_layout = canonical_json(
        &OciLayoutBuilder::default()
            .image_layout_version("1.0.0")
            .build()?,
    )?;

    let (layer_gzip_bytes, layer_tar_bytes) = (layer_gzip.len(), layer_tar.len());
    let mut archive = SortedTree::default();
    archive.file("oci-layout", oci_layout, 0o644);
    archive.file("index.json", index, 0o644);
    for blob in [manifest, config, layer_gzip] {
        let path = format!("blobs/sha256/{}", sha256_hex(&blob));
        archive.file(&path, blob, 0o644);
    }
    Ok(AssembledImage {
        tarball: archive.into_tar(mtime)?,
        manifest_digest,
        layer_gzip_bytes,
        layer_tar_bytes,
    })
}

fn descriptor(media_type: MediaType, blob: &[u8]) -> anyhow::Result<Descriptor> {
    Ok(DescriptorBuilder::default()
        .media_type(media_type)
        .digest(sha256_digest(blob)?)
        .size(blob.len() as u64)
        .build()?)
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

fn sha256_digest(bytes: &[u8]) -> anyhow::Result<Digest> {
    Ok(Sha256Digest::from_str(&sha256_hex(bytes))?.into())
}

/// `value` as JSON with every object's keys in order.
fn canonical_json(value: &impl serde::Serialize) -> anyhow::Result<Vec<u8>> {
    fn sort_keys(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(String, Value)> = map.into_iter().collect();
                entries.sort_by(|(a, _), (b, _)| a.cmp(b));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(key, value)| (key, sort_keys(value)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sort_keys).collect()),
            other => other,
        }
    }
    Ok(serde_json::to_vec(&sort_keys(serde_json::to_value(
        value,
    )?))?)
}

/// Tar entries by path, so that the archive lists them in one order
/// whatever order they were added in (a directory before what it holds).
#[derive(Debug, Default)]
struct SortedTree {
    entries: BTreeMap<String, TreeEntry>,
}

#[derive(Debug)]
enum TreeEntry {
    Directory { mode: u32 },
    File { data: Vec<u8>, mode: u32 },
}

impl SortedTree {
    /// Adds a regular file and, where missing, its parent directories.
    fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) {
        self.parents(path);
        self.entries
            .insert(path.to_owned(), TreeEntry::File { data, mode });
    }

    /// Adds a directory and, where missing, its parents.
    fn directory(&mut self, path: &str, mode: u32) {
        self.parents(path);
        self.entries
            .insert(path.to_owned(), TreeEntry::Directory { mode });
    }

    fn parents(&mut self, path: &str) {
        let mut parent = Path::new(path).parent();
        while let Some(dir) = parent.filter(|dir| !dir.as_os_str().is_empty()) {
            self.entries
                .entry(dir.to_string_lossy().into_owned())
                .or_insert(TreeEntry::Directory { mode: 0o755 });
            parent = dir.parent();
        }
    }

    /// A POSIX (ustar) archive of the entries in path order, each owned by
    /// 0:0 with time `mtime`.
    fn into_tar(self, mtime: u64) -> anyhow::Result<Vec<u8>> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, entry) in self.entries {
            let mut header = tar::Header::new_ustar();
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(mtime);
            match entry {
                TreeEntry::Directory { mode } => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(mode);
                    header.set_size(0);
                    tar.append_data(&mut header, format!("{path}/"), std::io::empty())
                }
                TreeEntry::File { data, mode } => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(mode);
                    header.set_size(data.len() as u64);
                    tar.append_data(&mut header, &path, data.as_slice())
                }
            }
            .with_context(|| format!("adding {path} to the archive"))?;
        }
        tar.into_inner().context("finishing the archive")
    }
}

/// Writes `bytes` beside `path` and renames it into place, so that nobody
/// sees half a tarball.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, path)
        .with_context(|| format!("renaming {} to {}", partial.display(), path.display()))
}

fn size(bytes: usize) -> String {
    if bytes < 100_000 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "tests: a failed step fails the test"
    )]

    use std::io::Read as _;

    use super::*;

    /// `ldd target/release/podtrace` on Debian 12, x86-64.
    const LDD_PODTRACE: &str = "\tlinux-vdso.so.1 (0x00007f072801e000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f07277e0000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0727700000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f072751e000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0728020000)
";

    #[test]
    fn ldd_output_gives_libraries_and_loader_without_vdso() {
        let paths = parse_ldd(LDD_PODTRACE).unwrap();
        assert_eq!(
            paths,
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libm.so.6",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2",
            ]
            .map(PathBuf::from)
        );
        assert!(is_dynamic_loader("lib64/ld-linux-x86-64.so.2"));
        assert!(!is_dynamic_loader("lib/x86_64-linux-gnu/libc.so.6"));
    }

    #[test]
    fn ldd_on_a_static_binary_gives_nothing() {
        assert!(parse_ldd("\tstatically linked\n").unwrap().is_empty());
    }

    #[test]
    fn ldd_missing_library_is_an_error() {
        let err = parse_ldd("\tlibbpf.so.1 => not found\n").unwrap_err();
        assert!(err.to_string().contains("libbpf.so.1 not found"), "{err}");
    }

    /// deploy/image/Containerfile builds the same image with a container
    /// engine: same entrypoint, command, working directory and labels.
    #[test]
    fn containerfile_describes_the_same_image() {
        let containerfile = include_str!("../../deploy/image/Containerfile");
        let command = DEFAULT_COMMAND.map(|arg| format!("\"{arg}\"")).join(", ");
        let mut expected = vec![
            format!("ENTRYPOINT [\"/{BINARY_PATH}\"]"),
            format!("CMD [{command}]"),
            format!("WORKDIR /{WORKING_DIR}"),
        ];
        for (label, value) in [
            (ANNOTATION_TITLE, TITLE),
            (ANNOTATION_DESCRIPTION, DESCRIPTION),
            (ANNOTATION_VERSION, VERSION),
            (ANNOTATION_SOURCE, env!("CARGO_PKG_REPOSITORY")),
            (ANNOTATION_LICENSES, env!("CARGO_PKG_LICENSE")),
        ] {
            expected.push(format!("{label}=\"{value}\""));
        }
        for line in expected {
            assert!(
                containerfile.contains(&line),
                "deploy/image/Containerfile lacks {line}"
            );
        }
    }

    fn sample_files() -> Vec<LayerFile> {
        vec![
            LayerFile {
                path: BINARY_PATH.to_owned(),
                data: b"\x7fELF podtrace".to_vec(),
                mode: 0o755,
            },
            LayerFile {
                path: "lib/x86_64-linux-gnu/libc.so.6".to_owned(),
                data: b"libc".to_vec(),
                mode: 0o644,
            },
            LayerFile {
                path: "lib64/ld-linux-x86-64.so.2".to_owned(),
                data: b"loader".to_vec(),
                mode: 0o755,
            },
        ]
    }

    fn sample_metadata() -> ImageMetadata {
        ImageMetadata {
            name: "podtrace.local/podtrace:test".to_owned(),
            created_epoch_s: 1_700_000_000,
        }
    }

    /// (path, header, content) of every entry of a tar.
    fn entries(tar: &[u8]) -> Vec<(String, tar::Header, Vec<u8>)> {
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let path = entry.path().unwrap().to_string_lossy().into_owned();
                let header = entry.header().clone();
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                (path, header, data)
            })
            .collect()
    }

    fn blob(entries: &[(String, tar::Header, Vec<u8>)], digest: &str) -> Vec<u8> {
        let path = format!("blobs/{}", digest.replace(':', "/"));
        let (_, _, data) = entries.iter().find(|(name, ..)| *name == path).unwrap();
        data.clone()
    }

    fn json(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn the_default_name_is_the_image_the_daemonset_runs() {
        // deploy/base/kustomization.yaml pins `name: REPOSITORY` with
        // `newTag: TAG`: an image imported under the default name is the one
        // the DaemonSet asks for, with no registry in between.
        let kustomization = include_str!("../../deploy/base/kustomization.yaml");
        let (repository, tag) = DEFAULT_NAME.rsplit_once(':').unwrap();
        let pinned = format!("- name: {repository}\n    newTag: {tag}\n");
        assert!(
            kustomization.contains(&pinned),
            "deploy/base/kustomization.yaml does not pin {DEFAULT_NAME}"
        );
    }

    #[test]
    fn same_inputs_give_the_same_tarball_whatever_the_file_order() {
        let first = assemble(&sample_metadata(), &sample_files()).unwrap();
        let mut reversed = sample_files();
        reversed.reverse();
        let second = assemble(&sample_metadata(), &reversed).unwrap();
        assert_eq!(first.manifest_digest, second.manifest_digest);
        assert!(first.tarball == second.tarball, "tarballs differ");
    }

    #[test]
    fn tarball_is_an_oci_layout_whose_blobs_match_their_digests() {
        let image = assemble(&sample_metadata(), &sample_files()).unwrap();
        let outer = entries(&image.tarball);
        let names: Vec<&str> = outer.iter().map(|(name, ..)| name.as_str()).collect();
        assert_eq!(names[..2], ["blobs/", "blobs/sha256/"]);
        assert_eq!(names[names.len() - 2..], ["index.json", "oci-layout"]);
        for (name, header, data) in &outer {
            assert_eq!(header.mtime().unwrap(), 1_700_000_000, "{name}");
            if let Some(hex) = name.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
                assert_eq!(sha256_hex(data), hex, "{name}");
            }
        }
        let (_, _, layout) = &outer[outer.len() - 1];
        assert_eq!(json(layout)["imageLayoutVersion"], "1.0.0");

        let (_, _, index) = &outer[outer.len() - 2];
        let index = json(index);
        let entry = &index["manifests"][0];
        assert_eq!(index["manifests"].as_array().unwrap().len(), 1);
        assert_eq!(
            entry["annotations"]["io.containerd.image.name"],
            "podtrace.local/podtrace:test"
        );
        assert_eq!(entry["platform"]["os"], "linux");
        assert_eq!(
            entry["digest"].as_str().unwrap(),
            image.manifest_digest.to_string()
        );

        let manifest = json(&blob(&outer, entry["digest"].as_str().unwrap()));
        assert_eq!(
            manifest["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
        let config = json(&blob(
            &outer,
            manifest["config"]["digest"].as_str().unwrap(),
        ));
        assert_eq!(config["created"], "2023-11-14T22:13:20Z");
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/usr/local/bin/podtrace"])
        );
        assert_eq!(
            config["config"]["Cmd"],
            serde_json::json!(["run", "--quiet"])
        );
        let labels = &config["config"]["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], VERSION);
        assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
        assert_eq!(
            labels["org.opencontainers.image.source"],
            env!("CARGO_PKG_REPOSITORY")
        );

        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(
            layers[0]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let gzip = blob(&outer, layers[0]["digest"].as_str().unwrap());
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(gzip.as_slice())
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"][0].as_str().unwrap(),
            format!("sha256:{}", sha256_hex(&tar))
        );
        let layer: Vec<(String, u32, u64)> = entries(&tar)
            .into_iter()
            .map(|(name, header, _)| {
                assert_eq!(header.uid().unwrap(), 0, "{name}");
                assert_eq!(header.mtime().unwrap(), 1_700_000_000, "{name}");
                (name, header.mode().unwrap(), header.size().unwrap())
            })
            .collect();
        let expected: Vec<(String, u32, u64)> = [
            ("lib/", 0o755, 0),
            ("lib/x86_64-linux-gnu/", 0o755, 0),
            ("lib/x86_64-linux-gnu/libc.so.6", 0o644, 4),
            ("lib64/", 0o755, 0),
            ("lib64/ld-linux-x86-64.so.2", 0o755, 6),
            ("tmp/", 0o1777, 0),
            ("usr/", 0o755, 0),
            ("usr/local/", 0o755, 0),
            ("usr/local/bin/", 0o755, 0),
            ("usr/local/bin/podtrace", 0o755, 13),
            ("var/", 0o755, 0),
            ("var/lib/", 0o755, 0),
            ("var/lib/podtrace/", 0o755, 0),
        ]
        .into_iter()
        .map(|(name, mode, size)| (name.to_owned(), mode, size))
        .collect();
        assert_eq!(layer, expected);
    }
}
