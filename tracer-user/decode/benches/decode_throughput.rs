//! Decode throughput on the recorded streams of `testdata/`: MB/s and
//! messages/s per decoder, next to a baseline measured in the same run —
//! copying the same chunks into a buffer and folding over every byte, the
//! least any decoder must do — and the ratio decoder/baseline, which is what
//! podtrace compares between runs (absolute figures move with the machine).
//!
//! `cargo bench -p tracer-decode` (no criterion: plain timing loops, each
//! case repeated for about half a second after a warm-up pass).

use std::hint::black_box;
use std::time::{Duration, Instant};

use tracer_decode::Chunk;
use tracer_decode::cri::CriCall;
use tracer_decode::etcd::KvCall;
use tracer_decode::etcd::KvRequest;
use tracer_decode::grpc::GrpcCall;
use tracer_decode::http1::Http1Connection;
use tracer_decode::http2::Http2Connection;
use tracer_decode::kube::decode_stored_object;
use tracer_decode::recording::read_recording;
use tracer_decode::rest::RestRequest;
use tracer_decode::wal::{RecordKind, WalKvEntry, WalReader};
use tracer_decode::watch::{WatchDecoder, WatchFormat};

const RUN_FOR: Duration = Duration::from_millis(500);

/// Runs `decode` (returning messages decoded) over `bytes` input bytes
/// until [`RUN_FOR`] has passed; returns (MB/s, messages/s).
fn measure(bytes: usize, mut decode: impl FnMut() -> usize) -> (f64, f64) {
    black_box(decode());
    let started = Instant::now();
    let (mut rounds, mut messages) = (0usize, 0usize);
    // Rounds in batches: reading the clock costs as much as copying a
    // small input.
    while started.elapsed() < RUN_FOR {
        for _ in 0..16 {
            messages += black_box(decode());
        }
        rounds += 16;
    }
    let seconds = started.elapsed().as_secs_f64();
    (
        (bytes * rounds) as f64 / seconds / 1e6,
        messages as f64 / seconds,
    )
}

/// The baseline: copy every chunk into one buffer and fold over its bytes.
fn baseline(chunks: &[Chunk]) -> usize {
    let mut buf = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(&chunk.bytes);
    }
    black_box(buf.iter().fold(0u8, |acc, b| acc.wrapping_add(*b))) as usize
}

fn report(name: &str, bytes: usize, base_mb_s: f64, (mb_s, msg_s): (f64, f64)) {
    println!(
        "{name:<34} {bytes:>9} B  {mb_s:>9.1} MB/s  {msg_s:>11.0} msg/s  baseline {base_mb_s:>8.1} MB/s  ratio {:.4}",
        mb_s / base_mb_s
    );
}

fn testdata(name: &str) -> Result<Vec<u8>, String> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).map_err(|error| format!("{path}: {error}"))
}

/// HTTP/2 with gRPC and the etcd or CRI layer on top: what the pipeline runs
/// on every captured etcd or containerd connection.
fn http2_stack(chunks: &[Chunk]) -> usize {
    let mut connection = Http2Connection::default();
    for chunk in chunks {
        connection.push(chunk);
    }
    let mut messages = 0;
    for exchange in connection.finish() {
        let Some(call) = GrpcCall::from_exchange(&exchange) else {
            continue;
        };
        messages += usize::from(KvCall::from_grpc(&call).is_some());
        messages += CriCall::from_grpc(&call).map_or(0, |c| c.clues().len().max(1));
    }
    messages
}

/// HTTP/1.1 with REST resolution of each request and watch events: what
/// the pipeline runs on a plaintext apiserver or kubelet connection.
fn http1_stack(chunks: &[Chunk]) -> usize {
    let mut connection = Http1Connection::default();
    let mut messages = 0;
    for chunk in chunks {
        connection.push(chunk);
        messages += connection.take_watch_events().len();
    }
    for exchange in connection.finish() {
        messages += usize::from(exchange.rest().is_some());
    }
    messages
}

fn main() -> Result<(), String> {
    println!("tracer-decode throughput (baseline: copy + byte fold of the same input)");
    for name in [
        "etcdctl-txn-create-pod.rec",
        "etcdctl-put-40k.rec",
        "etcdctl-lock.rec",
        "cri-create-pod.rec",
    ] {
        let chunks = read_recording(&testdata(name)?).map_err(|e| format!("{name}: {e}"))?;
        let bytes = chunks.iter().map(|c| c.bytes.len()).sum();
        let (base, _) = measure(bytes, || baseline(&chunks));
        report(
            &format!("http2+grpc {name}"),
            bytes,
            base,
            measure(bytes, || http2_stack(&chunks)),
        );
    }

    for name in ["http1-keepalive.rec", "http1-watch.rec"] {
        let chunks = read_recording(&testdata(name)?).map_err(|e| format!("{name}: {e}"))?;
        let bytes = chunks.iter().map(|c| c.bytes.len()).sum();
        let (base, _) = measure(bytes, || baseline(&chunks));
        report(
            &format!("http1+rest {name}"),
            bytes,
            base,
            measure(bytes, || http1_stack(&chunks)),
        );
    }

    let wal = testdata("etcd-3.4.23-member.wal")?;
    let wal_chunks = [Chunk {
        direction: tracer_decode::Direction::ClientToServer,
        ts_ns: 0,
        bytes: wal.clone(),
        truncated: false,
    }];
    let (base, _) = measure(wal.len(), || baseline(&wal_chunks));
    report(
        "wal etcd-3.4.23-member.wal",
        wal.len(),
        base,
        measure(wal.len(), || {
            let mut reader = WalReader::at_file_start();
            let (records, _) = reader.push(&wal, false);
            records
                .iter()
                .filter(|r| r.kind == RecordKind::Entry)
                .filter_map(|r| WalKvEntry::decode(r).ok())
                .filter(|entry| match &entry.request {
                    Some((method, bytes)) => KvRequest::decode(method, bytes).is_ok(),
                    None => true,
                })
                .count()
        }),
    );

    for name in ["pod-web-7d4b9.k8spb", "pod-web-7d4b9.json"] {
        let value = testdata(name)?;
        let chunks = [Chunk {
            direction: tracer_decode::Direction::ServerToClient,
            ts_ns: 0,
            bytes: value.clone(),
            truncated: false,
        }];
        let (base, _) = measure(value.len(), || baseline(&chunks));
        report(
            &format!("kube {name}"),
            value.len(),
            base,
            measure(value.len(), || {
                usize::from(decode_stored_object(&value).is_ok())
            }),
        );
    }

    // A watch of 200 Pod events as apiserver streams them (see
    // src/watch/tests.rs): no recording of a live apiserver here.
    let pod_json = String::from_utf8_lossy(&testdata("pod-web-7d4b9.json")?)
        .trim()
        .to_string();
    let watch: Vec<u8> = (0..200)
        .flat_map(|_| format!("{{\"type\":\"MODIFIED\",\"object\":{pod_json}}}\n").into_bytes())
        .collect();
    let watch_chunks: Vec<Chunk> = watch
        .chunks(16 << 10)
        .map(|piece| Chunk {
            direction: tracer_decode::Direction::ServerToClient,
            ts_ns: 0,
            bytes: piece.to_vec(),
            truncated: false,
        })
        .collect();
    let (base, _) = measure(watch.len(), || baseline(&watch_chunks));
    report(
        "watch json (200 Pod events)",
        watch.len(),
        base,
        measure(watch.len(), || {
            let mut decoder = WatchDecoder::new(WatchFormat::Json);
            watch_chunks
                .iter()
                .map(|c| decoder.push(&c.bytes, false).0.len())
                .sum()
        }),
    );

    let targets = [
        "/api/v1/namespaces/default/pods",
        "/api/v1/namespaces/default/pods/web-7d4b9/binding",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=1&watch=true",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1",
        "/healthz",
    ];
    let bytes = targets.iter().map(|t| t.len()).sum();
    let target_chunks: Vec<Chunk> = targets
        .iter()
        .map(|t| Chunk {
            direction: tracer_decode::Direction::ClientToServer,
            ts_ns: 0,
            bytes: t.as_bytes().to_vec(),
            truncated: false,
        })
        .collect();
    let (base, _) = measure(bytes, || baseline(&target_chunks));
    report(
        "rest resolve (5 targets)",
        bytes,
        base,
        measure(bytes, || {
            targets
                .iter()
                .map(|t| RestRequest::resolve("GET", t, &[]).route.len().min(1))
                .sum()
        }),
    );
    Ok(())
}
