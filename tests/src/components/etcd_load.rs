//! `etcd-load`, the closed-loop etcd write load of the overhead benchmark,
//! in two languages (sources: `tests/fixtures/go/etcd-load`,
//! `tests/fixtures/python/etcd-load.py`).
//!
//! kube-apiserver writes to etcd from Go, through crypto/tls, as gRPC over
//! HTTP/2 on connections older than any tracer; etcd-load writes the same
//! way (Txns shaped as kube-apiserver's store.Create and GuaranteedUpdate),
//! so the cost a tracer puts on it is the cost it would put on the apiserver
//! and etcd. etcd-load.py makes the same writes through gRPC's C core
//! (Debian's python3-grpcio): another TLS stack and another HPACK encoder,
//! as etcd's clients that are not Go bring.
//!
//! In: an etcd with TLS, a [`KeyMix`] and the number of writers and
//! connections. Out: a [`LoadClient`], a running client whose connections are
//! open and whose keys exist, whose [`LoadClient::leg`] runs the writers
//! flat out for a while and returns what they achieved ([`LegResult`]).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::{
    Etcd, PodTemplate,
    apiserver_role::{self, encode_pod, new_pod, pod_key},
    demo_apiserver::{ClientTls, hex_encode},
    etcd::APISERVER_USER,
    go_program,
    load_client::LoadClient,
};

/// The Go load client's executable name.
pub const BINARY_NAME: &str = "etcd-load";
/// Debian's interpreter, which python3-grpcio is installed for (a `python3`
/// earlier on `PATH`, pyenv's say, may lack it).
const PYTHON: &str = "/usr/bin/python3";
/// `http.Transport` with `ForceAttemptHTTP2` over TLS and Go's current
/// crypto/tls: the demo relay's release floor, kept the same.
const MIN_GO_RELEASE: (u32, u32) = (1, 24);
/// Bytes of every value written, about a Pod as kube-apiserver stores it.
pub const VALUE_BYTES: usize = 2048;

/// Which keys the writers write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMix {
    /// Pods under `/registry/pods/`, each a `k8s\0` v1.Pod as the apiserver
    /// stores it (status updates of existing Pods).
    Pods,
    /// What a control plane writes far more often and podtrace must not pay
    /// for: node leases (`/registry/leases/`) and events (`/registry/events/`).
    NotPods,
    /// Keys under `/registry/pods/` whose values are not Kubernetes objects
    /// (2 KiB of bytes with no `k8s\0` magic): what podtrace cannot decode
    /// must cost no more than what it can.
    OpaquePods,
}

impl KeyMix {
    /// Its name in the benchmark's table.
    pub fn label(self) -> &'static str {
        match self {
            KeyMix::Pods => "Pod writes",
            KeyMix::NotPods => "lease/event writes",
            KeyMix::OpaquePods => "Pod keys, values not Kubernetes objects",
        }
    }

    /// `count` keys and their values, as `etcd-load -keys` reads them.
    fn keys_file(self, count: usize) -> anyhow::Result<String> {
        let mut file = String::new();
        for index in 0..count {
            let (key, value) = match self {
                KeyMix::Pods => {
                    let name = format!("load-{index}");
                    let template = PodTemplate {
                        log_root: PathBuf::from("/var/log/pods"),
                        cgroup_root: String::new(),
                        image: "docker.io/library/busybox:bench".to_owned(),
                        command: vec!["sleep".to_owned(), "3600".to_owned()],
                    };
                    let mut pod = new_pod("bench", &name, None, &[("app", "load")], &template)?;
                    apiserver_role::bind(&mut pod, "bench-node");
                    // Real Pods carry annotations and managed fields that
                    // bring them to a few KiB; one annotation stands for them.
                    let size = encode_pod(&pod).len();
                    if let Some(metadata) = pod.metadata.as_mut() {
                        metadata.annotations.insert(
                            "bench.podtrace.dev/filler".to_owned(),
                            "x".repeat(VALUE_BYTES.saturating_sub(size + 40)),
                        );
                    }
                    (pod_key("bench", &name), encode_pod(&pod))
                }
                KeyMix::NotPods => {
                    let key = if index % 2 == 0 {
                        format!("/registry/leases/kube-node-lease/node-{index}")
                    } else {
                        format!("/registry/events/default/load-{index}.17f3a2b4c5d6e7f8")
                    };
                    let mut value = tracer_decode::kube::PROTOBUF_MAGIC.to_vec();
                    value.resize(VALUE_BYTES, b'l');
                    (key, value)
                }
                KeyMix::OpaquePods => {
                    // Bytes of no format: a xorshift stream, different per key.
                    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ index as u64;
                    let value: Vec<u8> = (0..VALUE_BYTES)
                        .map(|_| {
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            state.to_le_bytes()[0]
                        })
                        .collect();
                    (pod_key("bench", &format!("opaque-{index}")), value)
                }
            };
            file.push_str(&format!("{key} {}\n", hex_encode(&value)));
        }
        Ok(file)
    }
}

/// What the load presents to `etcd`: kube-apiserver's client certificate
/// (with etcd authentication on, that makes it the apiserver's user, whose
/// role may write every key under `/registry/`).
pub fn apiserver_tls(etcd: &Etcd) -> anyhow::Result<ClientTls> {
    let pki = etcd
        .pki()
        .context("the load client talks TLS: start etcd with tls")?;
    Ok(ClientTls {
        ca_cert: pki.ca_cert().to_owned(),
        client: pki.client(APISERVER_USER)?.clone(),
    })
}

/// A runnable etcd-load: the built Go program, or the Python script.
#[derive(Debug, Clone)]
pub struct EtcdLoadBinary {
    /// What the benchmark calls it.
    name: &'static str,
    /// The executable.
    program: PathBuf,
    /// Arguments before the flags (the script, for Python).
    leading: Vec<PathBuf>,
}

impl EtcdLoadBinary {
    /// Builds etcd-load into `cache_dir/etcd-load` (see [`go_program::build`]).
    pub fn build(cache_dir: &Path) -> anyhow::Result<Self> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/etcd-load");
        let built = go_program::build(cache_dir, BINARY_NAME, &source, MIN_GO_RELEASE)?;
        Ok(Self {
            name: BINARY_NAME,
            program: built.path,
            leading: Vec::new(),
        })
    }

    /// etcd-load.py, once Debian's python3 is found to import grpc.
    pub fn python() -> anyhow::Result<Self> {
        let output = Command::new(PYTHON)
            .args(["-c", "import grpc"])
            .output()
            .with_context(|| format!("running {PYTHON}"))?;
        if !output.status.success() {
            bail!(
                "{PYTHON} cannot import grpc (Debian's python3-grpcio; `cargo xtask setup` \
                 installs it): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(Self {
            name: "etcd-load.py",
            program: PathBuf::from(PYTHON),
            leading: vec![
                Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/python/etcd-load.py"),
            ],
        })
    }

    /// What the benchmark calls it: `etcd-load`, `etcd-load.py`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Starts `workers` writers of `mix` sharing `conns` connections to the
    /// etcd at `endpoint`, presenting `tls` (see [`apiserver_tls`]), and
    /// waits until its connections are open and its keys created. Call it
    /// from a thread that outlives the returned value (the kernel kills the
    /// process when the starting thread exits).
    pub fn start(
        &self,
        endpoint: &str,
        tls: &ClientTls,
        mix: KeyMix,
        workers: usize,
        conns: usize,
    ) -> anyhow::Result<LoadClient> {
        let dir = tempfile::Builder::new()
            .prefix("etcd-load-")
            .tempdir()
            .context("creating the load client's directory")?;
        let keys = dir.path().join("keys");
        // Four keys per writer: a Pod's status is rewritten every few writes.
        std::fs::write(&keys, mix.keys_file(workers * 4)?)
            .with_context(|| format!("writing {}", keys.display()))?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.leading)
            .arg("-endpoint")
            .arg(endpoint)
            .arg("-cacert")
            .arg(&tls.ca_cert)
            .arg("-cert")
            .arg(&tls.client.cert)
            .arg("-key")
            .arg(&tls.client.key)
            .arg("-keys")
            .arg(&keys)
            .arg("-workers")
            .arg(workers.to_string())
            .arg("-conns")
            .arg(conns.to_string());
        LoadClient::start(self.name, &mut command, dir)
    }
}
