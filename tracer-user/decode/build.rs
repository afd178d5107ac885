//! Generates prost types for the etcd, raft, WAL and CRI protos under `proto/`
//! with protox (a pure-Rust protobuf compiler), so no `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/etcd/api/etcdserverpb/rpc.proto",
        "proto/etcd/api/etcdserverpb/raft_internal.proto",
        "proto/etcd/api/etcdserverpb/etcdserver.proto",
        "proto/etcd/server/wal/walpb/record.proto",
        "proto/cri/api.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    prost_build::Config::new()
        // CRI and etcd messages carry maps (labels, annotations); BTreeMap keeps
        // iteration order, and so the decoder's output, deterministic.
        .btree_map(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
