//! The on-disk form of a recorded connection, as `testdata/*.rec` files hold it
//! and `examples/record_proxy.rs` writes it.
//!
//! In: a file's bytes. Out: the [`Chunk`]s of one connection, in capture order.
//! Each chunk is a header line `c2s|s2c <ts_ns> <len_bytes>[ truncated]\n`
//! followed by exactly `len_bytes` raw bytes and a `\n`, so files stay
//! greppable while payloads stay byte-exact.

use crate::{Chunk, Direction};

/// Why a recording could not be read. Recordings are test inputs written by
/// our own recorder, so any error means the file is damaged: nothing after it
/// is read.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// A chunk header line is missing its fields or has non-numeric ones.
    #[error("chunk header at byte {offset} is malformed: {line:?}")]
    BadHeader {
        /// Offset of the header line in the file.
        offset: usize,
        /// The header line, lossily decoded.
        line: String,
    },
    /// The file ends inside a chunk's payload.
    #[error("chunk at byte {offset} announces {len_bytes} bytes but the file ends first")]
    ShortPayload {
        /// Offset of the chunk header in the file.
        offset: usize,
        /// The announced payload length.
        len_bytes: usize,
    },
}

/// Parses a whole recording.
pub fn read_recording(file: &[u8]) -> Result<Vec<Chunk>, RecordingError> {
    let mut chunks = Vec::new();
    let mut offset = 0;
    while offset < file.len() {
        let Some(line_len) = file[offset..].iter().position(|&b| b == b'\n') else {
            return Err(bad_header(file, offset, file.len()));
        };
        let line = &file[offset..offset + line_len];
        let text =
            std::str::from_utf8(line).map_err(|_| bad_header(file, offset, offset + line_len))?;
        let mut fields = text.split(' ');
        let direction = match fields.next() {
            Some("c2s") => Direction::ClientToServer,
            Some("s2c") => Direction::ServerToClient,
            _ => return Err(bad_header(file, offset, offset + line_len)),
        };
        let ts_ns = fields.next().and_then(|f| f.parse::<u64>().ok());
        let len_bytes = fields.next().and_then(|f| f.parse::<usize>().ok());
        let truncated = match fields.next() {
            None => false,
            Some("truncated") => true,
            Some(_) => return Err(bad_header(file, offset, offset + line_len)),
        };
        let (Some(ts_ns), Some(len_bytes)) = (ts_ns, len_bytes) else {
            return Err(bad_header(file, offset, offset + line_len));
        };
        let payload_start = offset + line_len + 1;
        let payload_end = payload_start
            .checked_add(len_bytes)
            .filter(|&end| end < file.len() + 1)
            .ok_or(RecordingError::ShortPayload { offset, len_bytes })?;
        chunks.push(Chunk {
            direction,
            ts_ns,
            bytes: file[payload_start..payload_end].to_vec(),
            truncated,
        });
        // Skip the newline that ends the payload (absent at a cut end of file).
        offset = payload_end + 1;
    }
    Ok(chunks)
}

/// Appends one chunk in the recording format.
pub fn write_chunk(out: &mut Vec<u8>, chunk: &Chunk) {
    let direction = match chunk.direction {
        Direction::ClientToServer => "c2s",
        Direction::ServerToClient => "s2c",
    };
    let truncated = if chunk.truncated { " truncated" } else { "" };
    out.extend_from_slice(
        format!(
            "{direction} {} {}{truncated}\n",
            chunk.ts_ns,
            chunk.bytes.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&chunk.bytes);
    out.push(b'\n');
}

fn bad_header(file: &[u8], offset: usize, end: usize) -> RecordingError {
    let end = end.min(offset + 80);
    RecordingError::BadHeader {
        offset,
        line: String::from_utf8_lossy(&file[offset..end]).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_chunks_with_newlines_inside_payloads() {
        let chunks = vec![
            Chunk {
                direction: Direction::ClientToServer,
                ts_ns: 5,
                bytes: b"a\nb".to_vec(),
                truncated: false,
            },
            Chunk {
                direction: Direction::ServerToClient,
                ts_ns: 9,
                bytes: vec![],
                truncated: true,
            },
        ];
        let mut file = Vec::new();
        for chunk in &chunks {
            write_chunk(&mut file, chunk);
        }
        let read = read_recording(&file);
        assert!(matches!(read, Ok(ref c) if *c == chunks), "{read:?}");
    }

    #[test]
    fn reports_a_payload_cut_short() {
        let read = read_recording(b"c2s 1 10\nabc");
        assert!(matches!(
            read,
            Err(RecordingError::ShortPayload { len_bytes: 10, .. })
        ));
    }
}
