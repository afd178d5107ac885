//! Ties HTTP/2 header fields from Go's HPACK probes to their connection.
//!
//! The probes report a field with the thread that encoded or decoded it, not
//! the connection. Go decodes a HEADERS frame on the goroutine that has just
//! read it from the connection, and encodes one just before writing it, so:
//! a decoded field belongs to the connection the same thread last read
//! from; encoded fields wait for the same thread's next write. This is what
//! gives a request its `:path` on a connection whose HPACK dynamic table was
//! built before podtrace started.

use rustc_hash::FxHashMap;

use tracer_common::io::{Direction, FdKind, HeaderSide};

use crate::capture::{ConnKey, DataRecord, HeaderRecord};

/// Threads remembered; past it the table is cleared and its loss counted.
const MAX_THREADS: usize = 16_384;
/// Encoded fields kept per thread while waiting for its write.
const MAX_PENDING_FIELDS: usize = 64;

/// A header field on a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMessage {
    /// The connection.
    pub conn: ConnKey,
    /// Sent (egress) or received (ingress) by the process.
    pub direction: Direction,
    /// When the field was encoded or decoded (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// Field name.
    pub name: String,
    /// Field value (empty when redacted).
    pub value: String,
    /// HPACK marked it sensitive; its value was not captured.
    pub redacted: bool,
}

/// Per-thread state of the attribution.
#[derive(Debug, Default)]
pub struct HeaderAttributor {
    last_read: FxHashMap<(u32, u32), ConnKey>,
    pending: FxHashMap<(u32, u32), Vec<HeaderRecord>>,
    /// Fields that could not be tied to a connection (dropped).
    pub unattributed: u64,
}

impl HeaderAttributor {
    /// Notes a socket read or write; a write releases the fields its thread
    /// encoded for it.
    pub fn on_data(&mut self, data: &DataRecord) -> Vec<HeaderMessage> {
        if data.fd_kind != FdKind::Socket {
            return Vec::new();
        }
        let thread = (data.ids.tgid, data.ids.tid);
        match data.direction {
            Direction::Ingress => {
                self.bound();
                self.last_read.insert(thread, data.conn);
                Vec::new()
            }
            Direction::Egress => self
                .pending
                .remove(&thread)
                .unwrap_or_default()
                .into_iter()
                .map(|field| message(data.conn, Direction::Egress, field))
                .collect(),
        }
    }

    /// Takes one field; returns it tied to its connection when that is known now.
    pub fn on_header(&mut self, field: HeaderRecord) -> Option<HeaderMessage> {
        let thread = (field.ids.tgid, field.ids.tid);
        match field.side {
            HeaderSide::Decoder => match self.last_read.get(&thread) {
                Some(conn) => Some(message(*conn, Direction::Ingress, field)),
                None => {
                    self.unattributed += 1;
                    None
                }
            },
            HeaderSide::Encoder => {
                self.bound();
                let pending = self.pending.entry(thread).or_default();
                if pending.len() >= MAX_PENDING_FIELDS {
                    pending.remove(0);
                    self.unattributed += 1;
                }
                pending.push(field);
                None
            }
        }
    }

    /// Keeps both tables bounded: when one is full it is cleared (threads
    /// come and go; what is lost is counted as unattributed later).
    fn bound(&mut self) {
        if self.last_read.len() >= MAX_THREADS {
            self.last_read.clear();
        }
        if self.pending.len() >= MAX_THREADS {
            self.unattributed += self
                .pending
                .values()
                .map(|fields| fields.len() as u64)
                .sum::<u64>();
            self.pending.clear();
        }
    }
}

fn message(conn: ConnKey, direction: Direction, field: HeaderRecord) -> HeaderMessage {
    HeaderMessage {
        conn,
        direction,
        ts_ns: field.ids.ts_ns,
        name: field.name,
        value: field.value,
        redacted: field.redacted,
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::io::IoSyscall;

    use super::*;
    use crate::capture::ProcessIds;

    fn ids(tid: u32) -> ProcessIds {
        ProcessIds {
            ts_ns: 1,
            tgid: 100,
            tid,
        }
    }

    fn data(tid: u32, conn_id: u64, direction: Direction) -> DataRecord {
        DataRecord {
            ids: ids(tid),
            conn: ConnKey { tgid: 100, conn_id },
            fd: 7,
            syscall: IoSyscall::Read,
            direction,
            fd_kind: FdKind::Socket,
            len: 10,
            enter_ts_ns: 0,
            data: vec![0; 10],
            truncated: false,
            tls_plaintext: false,
        }
    }

    fn field(tid: u32, side: HeaderSide, name: &str, value: &str) -> HeaderRecord {
        HeaderRecord {
            ids: ids(tid),
            side,
            name: name.into(),
            value: value.into(),
            redacted: false,
            truncated: false,
        }
    }

    #[test]
    fn decoded_field_belongs_to_the_threads_last_read() {
        let mut headers = HeaderAttributor::default();
        headers.on_data(&data(1, 10, Direction::Ingress));
        headers.on_data(&data(2, 20, Direction::Ingress));
        let path = headers
            .on_header(field(
                2,
                HeaderSide::Decoder,
                ":path",
                "/etcdserverpb.KV/Put",
            ))
            .unwrap();
        assert_eq!(
            (path.conn.conn_id, path.direction, path.value.as_str()),
            (20, Direction::Ingress, "/etcdserverpb.KV/Put")
        );
        assert!(
            headers
                .on_header(field(3, HeaderSide::Decoder, ":path", "/x"))
                .is_none()
        );
        assert_eq!(headers.unattributed, 1);
    }

    #[test]
    fn encoded_fields_wait_for_the_threads_next_write() {
        let mut headers = HeaderAttributor::default();
        assert!(
            headers
                .on_header(field(1, HeaderSide::Encoder, ":method", "POST"))
                .is_none()
        );
        assert!(
            headers
                .on_header(field(
                    1,
                    HeaderSide::Encoder,
                    ":path",
                    "/runtime.v1.RuntimeService/Version"
                ))
                .is_none()
        );
        // Another thread's write does not take them.
        assert!(headers.on_data(&data(2, 30, Direction::Egress)).is_empty());
        let sent = headers.on_data(&data(1, 40, Direction::Egress));
        assert_eq!(
            sent.iter()
                .map(|m| (m.conn.conn_id, m.name.as_str()))
                .collect::<Vec<_>>(),
            [(40, ":method"), (40, ":path")]
        );
        assert!(headers.on_data(&data(1, 40, Direction::Egress)).is_empty());
    }
}
