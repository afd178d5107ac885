//! podtrace's protocol decoders: pure functions and state machines from
//! captured bytes to typed messages.
//!
//! In: [`Chunk`]s of one connection, each tagged with its [`Direction`] and a
//! timestamp, possibly starting mid-connection and possibly cut short
//! (`truncated`). Out: typed records per protocol. No kernel, no async runtime,
//! deterministic: the same chunks always decode to the same records.

pub mod recording;

/// Which way a chunk travelled on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the side that opened the connection.
    ClientToServer,
    /// From the side that accepted it.
    ServerToClient,
}

/// Bytes captured from one read or write on one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Which way the bytes went.
    pub direction: Direction,
    /// Monotonic capture time in nanoseconds.
    pub ts_ns: u64,
    /// The captured bytes.
    pub bytes: Vec<u8>,
    /// The capture kept only a prefix of what was sent: bytes are missing
    /// between the end of `bytes` and the next chunk of this direction.
    pub truncated: bool,
}

pub mod cri;
mod decoded;
pub mod etcd;
pub mod fuzzing;
pub mod grpc;
pub mod http1;
pub mod http2;
pub mod identity;
pub mod kube;
pub mod pb;
mod pb_fields;
pub mod raft;
pub mod rest;
pub mod tls;
pub mod wal;
pub mod watch;

pub use decoded::Decoded;

/// `text` cut to at most `max_bytes` bytes at a character boundary, with
/// `…` appended when something was cut: texts from the wire (error
/// messages, status reasons) kept bounded in spans.
pub fn cut_text(mut text: String, max_bytes: usize) -> String {
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod testdata;

#[cfg(test)]
mod tests {
    #[test]
    fn texts_are_cut_at_a_character_boundary() {
        assert_eq!(super::cut_text("short".into(), 8), "short");
        assert_eq!(super::cut_text("abcdef".into(), 4), "abcd…");
        // 'é' takes two bytes: cutting inside it backs off before it.
        assert_eq!(super::cut_text("abcé".into(), 4), "abc…");
    }
}
