//! Loopback recording proxy: produces the `testdata/*.rec` recordings.
//!
//! `record_proxy LISTEN UPSTREAM OUT_PREFIX` listens on LISTEN (a TCP address or
//! `unix:/path`), forwards every accepted connection to UPSTREAM (same forms)
//! and writes each connection's chunks, with their direction and a monotonic
//! timestamp, to `OUT_PREFIX-<n>.rec` (format: `tracer_decode::recording`).
//! Each `read` that returned data is one chunk, as a socket capture would see it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracer_decode::recording::write_chunk;
use tracer_decode::{Chunk, Direction};

trait Stream: Read + Write + Send + 'static {
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>>;
    fn shutdown_write(&self);
}

impl Stream for TcpStream {
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

impl Stream for UnixStream {
    fn try_clone_box(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
}

fn connect(address: &str) -> std::io::Result<Box<dyn Stream>> {
    Ok(match address.strip_prefix("unix:") {
        Some(path) => Box::new(UnixStream::connect(path)?),
        None => Box::new(TcpStream::connect(address)?),
    })
}

fn pump(
    mut from: Box<dyn Stream>,
    to: Box<dyn Stream>,
    direction: Direction,
    start: Instant,
    log: Arc<Mutex<Vec<u8>>>,
) {
    let mut to = to;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = Chunk {
            direction,
            ts_ns: start.elapsed().as_nanos() as u64,
            bytes: buf[..n].to_vec(),
            truncated: false,
        };
        if let Ok(mut log) = log.lock() {
            write_chunk(&mut log, &chunk);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    to.shutdown_write();
}

fn serve(
    client: Box<dyn Stream>,
    upstream: &str,
    out: String,
    start: Instant,
) -> std::io::Result<()> {
    let server = connect(upstream)?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let (c2, s2) = (client.try_clone_box()?, server.try_clone_box()?);
    let up = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || pump(client, server, Direction::ClientToServer, start, log))
    };
    let down = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || pump(s2, c2, Direction::ServerToClient, start, log))
    };
    let _ = up.join();
    let _ = down.join();
    let bytes = log.lock().map(|l| l.clone()).unwrap_or_default();
    std::fs::write(&out, bytes)?;
    eprintln!("wrote {out}");
    Ok(())
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, upstream, prefix] = args.as_slice() else {
        eprintln!("usage: record_proxy LISTEN UPSTREAM OUT_PREFIX");
        std::process::exit(2);
    };
    let start = Instant::now();
    let accepted: Box<dyn Iterator<Item = std::io::Result<Box<dyn Stream>>>> =
        match listen.strip_prefix("unix:") {
            Some(path) => {
                let _ = std::fs::remove_file(path);
                let listener = UnixListener::bind(path)?;
                Box::new(std::iter::from_fn(move || {
                    Some(
                        listener
                            .accept()
                            .map(|(s, _)| Box::new(s) as Box<dyn Stream>),
                    )
                }))
            }
            None => {
                let listener = TcpListener::bind(listen.as_str())?;
                Box::new(std::iter::from_fn(move || {
                    Some(
                        listener
                            .accept()
                            .map(|(s, _)| Box::new(s) as Box<dyn Stream>),
                    )
                }))
            }
        };
    for (n, client) in accepted.enumerate() {
        let client = client?;
        let upstream = upstream.clone();
        let out = format!("{prefix}-{n}.rec");
        std::thread::spawn(move || {
            if let Err(error) = serve(client, &upstream, out, start) {
                eprintln!("connection {n}: {error}");
            }
        });
    }
    Ok(())
}
