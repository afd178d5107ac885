//! `apiserver-load`, the closed-loop kube-apiserver load of the overhead
//! benchmark (source: `tests/fixtures/go/apiserver-load`).
//!
//! Most of what a cluster asks its apiserver is not about a Pod's creation:
//! Lease renewals, GETs and LISTs, Event creates, watches. apiserver-load
//! asks those the way client-go does (Go's net/http over crypto/tls, HTTP/2,
//! one connection shared by every worker, opened and warm before any tracer
//! starts), so the cost a tracer puts on it is what it would put on a
//! cluster's apiserver.
//!
//! In: a running [`ControlPlane`], an [`ApiserverMix`] and the number of
//! workers. Out: a [`LoadClient`] whose [`LoadClient::leg`] runs the workers
//! flat out for a while, or a [`BackgroundLoad`] that keeps them at it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use super::{
    ControlPlane,
    demo_apiserver::ClientTls,
    go_program,
    load_client::{BackgroundLoad, LoadClient},
};

/// The load client's executable name.
pub const BINARY_NAME: &str = "apiserver-load";
/// `json.Decoder` and `atomic.Int64` (Go 1.19) would do; kept at the other
/// load client's floor.
const MIN_GO_RELEASE: (u32, u32) = (1, 24);

/// What the workers ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiserverMix {
    /// Each worker renews a Lease of its own, as every kubelet does every
    /// 10 s (a PUT with the resourceVersion of the last answer).
    Leases,
    /// A GET of one of 20 ConfigMaps; every 10th request a LIST of them.
    Reads,
    /// A POST of a new Event.
    Events,
    /// 70 % reads, 20 % Lease renewals, 10 % Event creates.
    Mixed,
    /// 64 open watches of the ConfigMaps while the workers update them:
    /// every update streamed to every watch.
    Watches,
}

impl ApiserverMix {
    /// Every mix, in the order the benchmark runs them.
    pub const ALL: [ApiserverMix; 5] = [
        ApiserverMix::Leases,
        ApiserverMix::Reads,
        ApiserverMix::Events,
        ApiserverMix::Mixed,
        ApiserverMix::Watches,
    ];

    /// Its name for `apiserver-load -mix` (and `podtrace-demo --apiserver-load`).
    pub fn flag(self) -> &'static str {
        match self {
            ApiserverMix::Leases => "leases",
            ApiserverMix::Reads => "reads",
            ApiserverMix::Events => "events",
            ApiserverMix::Mixed => "mixed",
            ApiserverMix::Watches => "watches",
        }
    }

    /// Its name in the benchmark's table.
    pub fn label(self) -> &'static str {
        match self {
            ApiserverMix::Leases => "apiserver: Lease updates",
            ApiserverMix::Reads => "apiserver: GET of 20 ConfigMaps, every 10th a LIST",
            ApiserverMix::Events => "apiserver: Event creates",
            ApiserverMix::Mixed => {
                "apiserver: mixed (70 % reads, 20 % Lease updates, 10 % Event creates)"
            }
            ApiserverMix::Watches => "apiserver: ConfigMap updates streamed to 64 watches",
        }
    }

    /// The most workers the mix takes (the watch mix's workers update
    /// distinct ConfigMaps).
    pub fn max_workers(self) -> usize {
        match self {
            ApiserverMix::Watches => 20,
            _ => usize::MAX,
        }
    }
}

impl std::str::FromStr for ApiserverMix {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|mix| mix.flag() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|mix| mix.flag()).collect();
                format!("no mix {name:?}: one of {}", names.join(", "))
            })
    }
}

/// A built apiserver-load.
#[derive(Debug, Clone)]
pub struct ApiserverLoadBinary {
    path: PathBuf,
}

impl ApiserverLoadBinary {
    /// Builds apiserver-load into `cache_dir/apiserver-load` (see
    /// [`go_program::build`]).
    pub fn build(cache_dir: &Path) -> anyhow::Result<Self> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/apiserver-load");
        let built = go_program::build(cache_dir, BINARY_NAME, &source, MIN_GO_RELEASE)?;
        Ok(Self { path: built.path })
    }

    /// Starts `workers` workers of `mix` against `plane`'s apiserver as its
    /// admin, in namespace `default`, and waits until its objects exist and
    /// its connection is open and warm. Call it from a thread that outlives
    /// the returned value (the kernel kills the process when the starting
    /// thread exits).
    pub fn start(
        &self,
        plane: &ControlPlane,
        mix: ApiserverMix,
        workers: usize,
    ) -> anyhow::Result<LoadClient> {
        self.start_at(plane.server(), &plane.admin_tls(), mix, workers)
    }

    /// [`Self::start`] on a thread of its own, in the background until
    /// [`BackgroundLoad::stop`].
    pub fn in_background(
        &self,
        plane: &ControlPlane,
        mix: ApiserverMix,
        workers: usize,
    ) -> anyhow::Result<BackgroundLoad> {
        let (binary, server, tls) = (self.clone(), plane.server().to_owned(), plane.admin_tls());
        BackgroundLoad::start(BINARY_NAME, move || {
            binary.start_at(&server, &tls, mix, workers)
        })
    }

    fn start_at(
        &self,
        server: &str,
        tls: &ClientTls,
        mix: ApiserverMix,
        workers: usize,
    ) -> anyhow::Result<LoadClient> {
        let dir = tempfile::Builder::new()
            .prefix("apiserver-load-")
            .tempdir()
            .context("creating the load client's directory")?;
        let mut command = Command::new(&self.path);
        command
            .arg("-server")
            .arg(server)
            .arg("-cacert")
            .arg(&tls.ca_cert)
            .arg("-cert")
            .arg(&tls.client.cert)
            .arg("-key")
            .arg(&tls.client.key)
            .arg("-mix")
            .arg(mix.flag())
            .arg("-workers")
            .arg(workers.min(mix.max_workers()).to_string());
        LoadClient::start(BINARY_NAME, &mut command, dir)
    }
}
