//! Test access to the recordings in `testdata/` (see its README for where
//! each file came from).

use crate::Chunk;

/// Bytes of `testdata/<name>`.
pub(crate) fn bytes(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The chunks of recording `testdata/<name>`.
pub(crate) fn chunks(name: &str) -> Vec<Chunk> {
    crate::recording::read_recording(&bytes(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
}
