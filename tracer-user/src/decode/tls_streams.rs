//! Ciphertext of TLS 1.3 sockets → the plaintext records the rest of the
//! stage decodes, with `tracer-decode`'s [`TlsReader`].
//!
//! Once capture has read the traffic secret of a direction of a Go TLS
//! socket ([`TlsKeyRecord`], at one probe hit), it copies that direction's
//! ciphertext from the syscalls and no longer takes plaintext from a probe
//! hit per TLS read or write. Here each such direction gets a reader; every
//! later data record of it is decrypted into records that look exactly as
//! the probes' plaintext did (`tls_plaintext`), with the syscall's times.
//! A gap (bytes cut by the capture, a record that does not open) becomes a
//! `truncated` record, as cut plaintext was. Secrets stay in the readers:
//! never logged, never passed on.

use rustc_hash::FxHashMap;

use tracer_common::io::{Direction, FdKind};
use tracer_decode::tls::{TlsReader, TlsStats, TrafficKeys};

use crate::capture::{ConnKey, DataRecord, TlsKeyRecord};

/// Directions decrypted at once: two per connection, as many connections as
/// the HTTP/2 decoder follows.
const MAX_READERS: usize = 2 * 4096;

/// The readers of every keyed socket direction.
#[derive(Debug, Default)]
pub struct TlsStreams {
    readers: FxHashMap<(ConnKey, Direction), TlsReader>,
    /// What readers that are gone did.
    finished: TlsStats,
    /// Secrets that could not be used (not a TLS 1.3 suite, a wrong length).
    pub keys_refused: u64,
    /// Directions not decrypted because the table was full.
    pub skipped: u64,
}

impl TlsStreams {
    /// A direction's secret: its later ciphertext is decrypted with it.
    pub fn on_key(&mut self, key: &TlsKeyRecord) {
        let keys = match TrafficKeys::new(key.suite, &key.secret) {
            Ok(keys) => keys,
            Err(error) => {
                self.keys_refused += 1;
                tracing::debug!(conn = ?key.conn, direction = ?key.direction, %error, "TLS secret not usable");
                return;
            }
        };
        let slot = (key.conn, key.direction);
        if !self.readers.contains_key(&slot) && self.readers.len() >= MAX_READERS {
            self.skipped += 1;
            return;
        }
        // What Go reads next is exactly that record; what it writes next
        // may follow another goroutine's write still under way.
        let exact = key.direction == Direction::Ingress;
        if let Some(old) = self
            .readers
            .insert(slot, TlsReader::new(keys, key.seq, exact))
        {
            add(&mut self.finished, old.stats());
        }
    }

    /// The plaintext records of `data` if it is ciphertext of a keyed
    /// direction (possibly none yet: a record not whole), else `None`.
    pub fn decrypt(&mut self, data: &DataRecord) -> Option<Vec<DataRecord>> {
        if data.tls_plaintext || data.fd_kind != FdKind::Socket {
            return None;
        }
        let reader = self.readers.get_mut(&(data.conn, data.direction))?;
        let pieces = reader.push(&data.data, data.truncated);
        Some(
            pieces
                .into_iter()
                .map(|piece| DataRecord {
                    ids: data.ids.clone(),
                    conn: data.conn,
                    fd: data.fd,
                    syscall: data.syscall,
                    direction: data.direction,
                    fd_kind: data.fd_kind,
                    len: piece.bytes.len() as u64,
                    enter_ts_ns: data.enter_ts_ns,
                    data: piece.bytes,
                    truncated: piece.gap_after,
                    tls_plaintext: true,
                })
                .collect(),
        )
    }

    /// The socket closed: its readers go.
    pub fn on_closed(&mut self, conn: &ConnKey) {
        for direction in [Direction::Egress, Direction::Ingress] {
            if let Some(reader) = self.readers.remove(&(*conn, direction)) {
                add(&mut self.finished, reader.stats());
            }
        }
    }

    /// The process ended or replaced its image: its readers go.
    pub fn on_process_gone(&mut self, tgid: u32) {
        let finished = &mut self.finished;
        self.readers.retain(|(conn, _), reader| {
            let keep = conn.tgid != tgid;
            if !keep {
                add(finished, reader.stats());
            }
            keep
        });
    }

    /// Directions being decrypted now.
    pub fn len(&self) -> usize {
        self.readers.len()
    }

    /// Whether no direction is being decrypted.
    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }

    /// What every reader did since start.
    pub fn stats(&self) -> TlsStats {
        let mut total = self.finished;
        for reader in self.readers.values() {
            add(&mut total, reader.stats());
        }
        total
    }
}

fn add(total: &mut TlsStats, stats: TlsStats) {
    total.records += stats.records;
    total.skipped += stats.skipped;
    total.undecryptable += stats.undecryptable;
    total.resyncs += stats.resyncs;
    total.key_updates += stats.key_updates;
}
