//! A bounded fuzz run on the stable toolchain: every entry point of
//! `tracer_decode::fuzzing` (the same ones the cargo-fuzz target drives) on a
//! few thousand inputs mutated from the recordings in `testdata/` (HTTP/2
//! connections go through the HTTP/1.1 decoder too, and the other way) — bit
//! flips, byte overwrites, truncations, splices between recordings, lost and
//! re-cut chunks — with a fixed seed, so a failure reproduces. Seconds, not
//! minutes: regressions show in every `cargo test`; long runs belong to
//! `cargo +nightly fuzz run decode_bytes`.

use std::time::{Duration, Instant};

use prost::Message;

use tracer_decode::fuzzing::{self, Footprint};
use tracer_decode::recording::read_recording;
use tracer_decode::{Chunk, Direction};

/// Mutated inputs per entry-point family.
const ITERATIONS: usize = 1500;
/// Wall-clock budget for the whole run, so a slow machine stays fast.
const BUDGET: Duration = Duration::from_secs(6);
/// Bytes any decoder may hold for one unit: the largest limit in the crate
/// (the etcd WAL's 10 MiB record, gRPC's 16 MiB inflated message).
const MAX_RETAINED_BYTES: usize = 16 << 20;

/// splitmix64: tiny, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (0 when bound is 0).
    fn below(&mut self, bound: usize) -> usize {
        if bound == 0 {
            0
        } else {
            (self.next() % bound as u64) as usize
        }
    }
}

const RECORDINGS: [&str; 13] = [
    "http1-keepalive.rec",
    "http1-watch.rec",
    "http1-pipelined.rec",
    "http1-upgrade.rec",
    "http1-close.rec",
    "http1-expect.rec",
    "etcdctl-put.rec",
    "etcdctl-txn-create-pod.rec",
    "etcdctl-get-pod.rec",
    "etcdctl-del.rec",
    "etcdctl-put-40k.rec",
    "etcdctl-lock.rec",
    "cri-create-pod.rec",
];

/// Mutates bytes in place: one to four of flips, overwrites with boundary
/// values, truncation, a splice from `other`, a duplicated or removed range.
fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..=rng.below(4) {
        match rng.below(6) {
            0 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
            1 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] = [0x00, 0x01, 0x7f, 0x80, 0xff, b'\n', b'"', b'{'][rng.below(8)];
            }
            2 => {
                let keep = rng.below(bytes.len() + 1);
                bytes.truncate(keep);
            }
            3 if !other.is_empty() => {
                let at = rng.below(bytes.len() + 1);
                let from = rng.below(other.len());
                let len = rng.below(other.len() - from + 1).min(4096);
                bytes.splice(at..at, other[from..from + len].iter().copied());
            }
            4 if !bytes.is_empty() => {
                let from = rng.below(bytes.len());
                let len = rng.below(bytes.len() - from + 1).min(512);
                let copy = bytes[from..from + len].to_vec();
                let at = rng.below(bytes.len() + 1);
                bytes.splice(at..at, copy);
            }
            _ if !bytes.is_empty() => {
                let from = rng.below(bytes.len());
                let len = rng.below(bytes.len() - from + 1).min(512);
                bytes.drain(from..from + len);
            }
            _ => {}
        }
    }
}

/// Mutates a connection: bytes of some chunks, lost or truncated chunks,
/// flipped directions, or one direction re-cut at other boundaries.
fn mutate_chunks(rng: &mut Rng, chunks: &mut Vec<Chunk>, other: &[Chunk]) {
    for _ in 0..=rng.below(3) {
        if chunks.is_empty() {
            return;
        }
        let i = rng.below(chunks.len());
        match rng.below(6) {
            0 | 1 => {
                let donor = other.get(rng.below(other.len())).map(|c| c.bytes.clone());
                mutate_bytes(rng, &mut chunks[i].bytes, &donor.unwrap_or_default());
            }
            2 => {
                chunks.remove(i);
            }
            3 => {
                let chunk = &mut chunks[i];
                let keep = rng.below(chunk.bytes.len() + 1);
                chunk.bytes.truncate(keep);
                chunk.truncated = true;
            }
            4 => {
                chunks[i].direction = match chunks[i].direction {
                    Direction::ClientToServer => Direction::ServerToClient,
                    Direction::ServerToClient => Direction::ClientToServer,
                };
            }
            _ => {
                // Re-cut from chunk i on: same bytes, other read boundaries
                // (direction order kept per chunk, sizes 1..=300).
                let tail: Vec<Chunk> = chunks.drain(i..).collect();
                for chunk in tail {
                    let mut rest = chunk.bytes.as_slice();
                    while !rest.is_empty() {
                        let cut = (1 + rng.below(300)).min(rest.len());
                        chunks.push(Chunk {
                            bytes: rest[..cut].to_vec(),
                            ..chunk.clone()
                        });
                        rest = &rest[cut..];
                    }
                }
            }
        }
    }
}

fn check(footprint: Footprint) {
    assert!(
        footprint.max_retained_bytes <= MAX_RETAINED_BYTES,
        "{footprint:?}"
    );
}

#[test]
fn mutated_recordings_never_panic_and_stay_bounded() {
    let started = Instant::now();
    let testdata = |name: &str| {
        let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
    };
    let mut rng = Rng(0x7064_7472_6163_6500);
    let connections: Vec<Vec<Chunk>> = RECORDINGS
        .iter()
        .map(|name| read_recording(&testdata(name)).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect();
    // Byte-level seeds: each recording's directions flattened, plus the
    // files that are byte streams already.
    let mut byte_seeds: Vec<Vec<u8>> = connections
        .iter()
        .flat_map(|chunks| {
            [Direction::ClientToServer, Direction::ServerToClient].map(|direction| {
                chunks
                    .iter()
                    .filter(|c| c.direction == direction)
                    .flat_map(|c| c.bytes.iter().copied())
                    .collect::<Vec<u8>>()
            })
        })
        .collect();
    let mut wal = testdata("etcd-3.4.23-member.wal");
    wal.truncate(64 << 10);
    byte_seeds.push(wal);
    byte_seeds.push(testdata("pod-web-7d4b9.k8spb"));
    byte_seeds.push(testdata("pod-web-7d4b9.json"));
    // Watch bodies as apiserver writes them (see src/watch/tests.rs).
    let json_pod = String::from_utf8_lossy(&testdata("pod-web-7d4b9.json"))
        .trim()
        .to_string();
    byte_seeds.push(
        format!("{{\"type\":\"ADDED\",\"object\":{json_pod}}}\n{{\"type\":\"DELETED\",\"object\":{json_pod}}}\n")
            .into_bytes(),
    );
    let mut protobuf_watch = Vec::new();
    for event_type in ["ADDED", "MODIFIED"] {
        let frame = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent {
            r#type: Some(event_type.into()),
            object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
                raw: Some(testdata("pod-web-7d4b9.k8spb")),
            }),
        }
        .encode_to_vec();
        protobuf_watch.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        protobuf_watch.extend(frame);
    }
    byte_seeds.push(protobuf_watch);
    for target in [
        "\x00/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name%3Dweb\napplication/json",
        "\x01/api/v1/namespaces/default/pods/web-7d4b9/binding?dryRun=All",
        "\x04/apis/apps/v1/namespaces/a/deployments?labelSelector=app%3Dweb",
    ] {
        byte_seeds.push(target.as_bytes().to_vec());
    }

    let mut runs = [0usize; 2];
    let mut messages = 0;
    for i in 0..ITERATIONS {
        if started.elapsed() > BUDGET {
            break;
        }
        let seed = &connections[i % connections.len()];
        let donor = &connections[rng.below(connections.len())];
        let mut chunks = seed.clone();
        mutate_chunks(&mut rng, &mut chunks, donor);
        for footprint in [
            fuzzing::http2_connection(&chunks),
            fuzzing::http1_connection(&chunks),
        ] {
            check(footprint);
            messages += footprint.messages;
        }
        runs[0] += 1;

        let seed = &byte_seeds[i % byte_seeds.len()];
        let donor = &byte_seeds[rng.below(byte_seeds.len())];
        let mut bytes = seed.clone();
        mutate_bytes(&mut rng, &mut bytes, donor);
        let footprint = fuzzing::all(&bytes);
        check(footprint);
        messages += footprint.messages;
        runs[1] += 1;
    }
    eprintln!(
        "fuzz smoke: {} connections, {} byte inputs, {messages} decoded units in {:?}",
        runs[0],
        runs[1],
        started.elapsed()
    );
    // Even a slow machine gets through a meaningful share of the run.
    assert!(runs.iter().all(|&n| n >= 100), "{runs:?}");
}
