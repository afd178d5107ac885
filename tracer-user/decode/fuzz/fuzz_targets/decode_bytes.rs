//! Arbitrary bytes through every decoder entry point of tracer-decode (see
//! `tracer_decode::fuzzing`, shared with the stable bounded run in
//! `tests/fuzz_smoke.rs`): HTTP/1.1 connections with REST resolution and
//! watch bodies, HTTP/2 connections with gRPC, etcd KV and CRI on top, gRPC bodies with gzip, the etcd WAL reader, stored Kubernetes objects,
//! REST request resolution, JSON and protobuf watch streams. None may panic;
//! the entry points assert that memory stays within each decoder's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tracer_decode::fuzzing::all(data);
});
