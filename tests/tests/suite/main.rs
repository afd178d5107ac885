//! podtrace's integration tests: one binary, a module per area, so that the
//! agent's crates are linked once. Live tests need root and a kernel with
//! BTF; each says why when it cannot run (a failure on CI). They start real
//! components and agents, so they run one at a time: `cargo xtask test` runs
//! this suite with `RUST_TEST_THREADS=1`; by hand, pass `--test-threads=1`
//! (e.g. `cargo test -p podtrace-tests --test suite -- --test-threads=1
//! replay_traces::`).

// Capture: the real eBPF object on real processes.
mod capture_containerd;
mod capture_etcd;
mod drops;
mod go_uprobes;
mod hpack_table_copies;
mod long_lived_connection;
mod process_lifecycle;
mod undecodable_load;
// The agent as operators run it, and the harness the live tests use.
mod cli;
mod components;
mod demo_driver;
mod deploy_manifests;
mod image;
// Whole traces: recorded, on the demo's components, on each etcd release,
// on a real Kubernetes control plane.
mod end_to_end;
mod etcd_releases;
mod k8s_live;
mod replay_traces;
