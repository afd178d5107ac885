//! Live: more traffic than the ring buffer holds is lost only with the drop
//! counters saying so.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{path::PathBuf, process::Command, time::Duration};

use podtrace_tests::{LiveCapture, copy_executable, live_test_can_run};
use tracer_common::{drop_reason::DropReason, io::Direction};
use tracer_user::capture::RawEvent;

/// Writes of 1 KiB on a loopback TCP connection the flooder opens to itself.
const WRITES: u64 = 20_000;

/// The Python interpreter itself (not a pyenv shim), to copy under a target name.
fn python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[tokio::test(flavor = "multi_thread")]
async fn flood_larger_than_the_ring_buffer_is_counted() {
    if !live_test_can_run("flood_larger_than_the_ring_buffer_is_counted") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let flooder = copy_executable(&python(), dir.path(), "pt-flooder");
    // The smallest ring buffer: one page.
    let mut capture = LiveCapture::start_with(&["pt-flooder"], 1, 4096);
    let before = capture.drop_counts().get(DropReason::RingBufFull);
    let script = format!(
        "import socket\n\
         srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n\
         cli = socket.create_connection(srv.getsockname()); conn, _ = srv.accept()\n\
         conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)\n\
         payload = b'x' * 1024\n\
         for i in range({WRITES}):\n\
         \x20   cli.sendall(payload)\n\
         \x20   conn.recv(65536)\n"
    );
    let child = Command::new(&flooder)
        .args(["-c", &script])
        .spawn()
        .unwrap();
    let pid = child.id();
    let status = child.wait_with_output().unwrap().status;
    assert!(status.success());
    let events = capture
        .collect_until_exit(pid, Duration::from_secs(60))
        .await;
    let dropped = capture.drop_counts().get(DropReason::RingBufFull) - before;
    capture.stop().await;

    let delivered_writes = events
        .iter()
        .filter(|event| matches!(event, RawEvent::Data(data) if data.ids.tgid == pid && data.direction == Direction::Egress))
        .count() as u64;
    assert!(
        dropped > 0,
        "a one-page ring buffer absorbed {WRITES} writes"
    );
    assert!(
        delivered_writes < WRITES,
        "every write arrived despite {dropped} drops"
    );
    // What did not arrive was counted: every write is either delivered or a drop.
    assert!(
        delivered_writes + dropped >= WRITES,
        "{delivered_writes} delivered + {dropped} dropped < {WRITES} writes"
    );
}

/// A socket write larger than the payload prefix comes in records of the
/// prefix — all but one byte of `DATA_BYTES_MAX` (the kernel side masks
/// lengths below it) — up to eight, each giving its own length, so that a
/// reader sees consecutive transfers of the same bytes. One longer than eight
/// records keeps eight, and the last says the write was cut and how long it
/// was. (Writes of 8 KiB or more once kept nothing: the mask turned a full
/// 8192 into 0.)
#[tokio::test(flavor = "multi_thread")]
async fn a_write_larger_than_the_prefix_comes_in_parts_and_past_eight_is_cut() {
    if !live_test_can_run("a_write_larger_than_the_prefix_comes_in_parts_and_past_eight_is_cut") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let writer = copy_executable(&python(), dir.path(), "pt-bigwrite");
    let mut capture = LiveCapture::start(&["pt-bigwrite"], 1);
    let script = "import socket\n\
         srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)\n\
         srv.bind(('127.0.0.1', 0)); srv.listen(1)\n\
         cli = socket.create_connection(srv.getsockname()); conn, _ = srv.accept()\n\
         cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)\n\
         cli.sendall(b'a' * 10000)\n\
         cli.sendall(b'b' * 40000)\n\
         cli.sendall(b'c' * 72000)\n\
         got = 0\n\
         while got < 122000:\n\
         \x20   got += len(conn.recv(65536))\n";
    let child = Command::new(&writer).args(["-c", script]).spawn().unwrap();
    let pid = child.id();
    assert!(child.wait_with_output().unwrap().status.success());
    let events = capture
        .collect_until_exit(pid, Duration::from_secs(30))
        .await;
    capture.stop().await;
    let writes: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            RawEvent::Data(data) if data.ids.tgid == pid && data.direction == Direction::Egress => {
                Some(data)
            }
            _ => None,
        })
        .collect();
    let prefix = tracer_common::io::DATA_BYTES_MAX - 1;
    let parts = |byte: u8| -> Vec<(u64, usize, bool)> {
        writes
            .iter()
            .filter(|data| data.data.first() == Some(&byte))
            .map(|data| {
                assert!(data.data.iter().all(|&b| b == byte), "one write's bytes");
                (data.len, data.data.len(), data.truncated)
            })
            .collect()
    };
    // Whole, in two records.
    assert_eq!(
        parts(b'a'),
        vec![
            (prefix as u64, prefix, false),
            (10_000 - prefix as u64, 10_000 - prefix, false)
        ]
    );
    // Whole, in five records.
    let mut whole = vec![(prefix as u64, prefix, false); 4];
    whole.push((40_000 - 4 * prefix as u64, 40_000 - 4 * prefix, false));
    assert_eq!(parts(b'b'), whole);
    // Eight records; the last has the rest's length, a prefix of it, and is cut.
    let mut cut = vec![(prefix as u64, prefix, false); 7];
    cut.push((72_000 - 7 * prefix as u64, prefix, true));
    assert_eq!(parts(b'c'), cut);
}
