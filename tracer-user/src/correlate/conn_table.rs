//! Followed sockets and files: who has them open, the other end, how many
//! bytes went each way, and the WAL syncs on them. Bounded, with a count of
//! what did not fit.

use rustc_hash::FxHashMap;

use tracer_common::io::{ConnAction, Direction, FdKind};

use crate::{
    capture::{ConnKey, ConnRecord, FileOpenRecord, FsyncRecord, Peer, clock::WallClock},
    decode::DataMoved,
};

/// Default bound on tracked connections and files.
pub const DEFAULT_CONN_CAPACITY: usize = 65_536;

#[derive(Clone, Debug)]
struct ConnState {
    peer: Peer,
    path: Option<String>,
    opened_ns: Option<u64>,
    bytes_out: u64,
    bytes_in: u64,
    /// Bytes written since the last fsync/fdatasync.
    unsynced: u64,
}

/// What happened to a connection or file, with what the table knows of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnActivity {
    /// Unix time in nanoseconds.
    pub time_unix_ns: u64,
    /// Which connection or file.
    pub conn: ConnKey,
    /// File descriptor.
    pub fd: u32,
    /// Socket or file.
    pub kind: FdKind,
    /// What happened.
    pub change: ConnAction,
    /// The other end.
    pub peer: Peer,
    /// For files, the path.
    pub path: Option<String>,
    /// For a close: bytes written and read while podtrace watched.
    pub bytes_out: u64,
    /// See `bytes_out`.
    pub bytes_in: u64,
    /// For a close: how long it was open, if podtrace saw it open.
    pub open_ns: Option<u64>,
}

/// An fsync or fdatasync of a followed file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSyncActivity {
    /// Unix time in nanoseconds of the sync's end.
    pub time_unix_ns: u64,
    /// The record.
    pub sync: FsyncRecord,
    /// The file's path, if known.
    pub path: Option<String>,
    /// Bytes written to the file since its previous sync.
    pub bytes_since_last_sync: u64,
}

/// Live connections and files by [`ConnKey`].
#[derive(Debug)]
pub struct ConnTable {
    clock: WallClock,
    conns: FxHashMap<ConnKey, ConnState>,
    capacity: usize,
    /// Connections not tracked because the table was full.
    pub full_drops: u64,
}

impl ConnTable {
    /// An empty table holding at most `capacity` connections and files.
    pub fn new(clock: WallClock, capacity: usize) -> Self {
        Self {
            clock,
            conns: FxHashMap::default(),
            capacity,
            full_drops: 0,
        }
    }

    fn insert(&mut self, key: ConnKey, state: ConnState) {
        if self.conns.len() >= self.capacity && !self.conns.contains_key(&key) {
            self.full_drops += 1;
            return;
        }
        self.conns.insert(key, state);
    }

    /// A socket opened, was found open, or closed.
    pub fn on_conn(&mut self, record: ConnRecord) -> ConnActivity {
        let (path, bytes_out, bytes_in, open_ns, peer) = if record.change == ConnAction::Closed {
            match self.conns.remove(&record.conn) {
                Some(state) => (
                    state.path,
                    state.bytes_out,
                    state.bytes_in,
                    state
                        .opened_ns
                        .map(|opened| record.ids.ts_ns.saturating_sub(opened)),
                    state.peer,
                ),
                None => (None, 0, 0, None, record.peer),
            }
        } else {
            let opened_ns = (!record.change.before_start()).then_some(record.ids.ts_ns);
            let state = ConnState {
                peer: record.peer.clone(),
                path: None,
                opened_ns,
                bytes_out: 0,
                bytes_in: 0,
                unsynced: 0,
            };
            self.insert(record.conn, state);
            (None, 0, 0, None, record.peer)
        };
        ConnActivity {
            time_unix_ns: self.clock.unix_ns(record.ids.ts_ns),
            conn: record.conn,
            fd: record.fd,
            kind: record.fd_kind,
            change: record.change,
            peer,
            path,
            bytes_out,
            bytes_in,
            open_ns,
        }
    }

    /// A followed file was opened (or found open).
    pub fn on_file_open(&mut self, record: FileOpenRecord) {
        let state = ConnState {
            peer: Peer::Unknown,
            path: Some(record.path),
            opened_ns: Some(record.ids.ts_ns),
            bytes_out: 0,
            bytes_in: 0,
            unsynced: 0,
        };
        self.insert(record.conn, state);
    }

    /// Counts the bytes of a data chunk.
    pub fn on_data(&mut self, record: &DataMoved) {
        if let Some(state) = self.conns.get_mut(&record.conn) {
            match record.direction {
                Direction::Egress => {
                    state.bytes_out += record.len;
                    state.unsynced += record.len;
                }
                Direction::Ingress => state.bytes_in += record.len,
            }
        }
    }

    /// A sync of a followed file; resets its count of unsynced bytes.
    pub fn on_fsync(&mut self, sync: FsyncRecord) -> FileSyncActivity {
        let (path, bytes_since_last_sync) = match self.conns.get_mut(&sync.conn) {
            Some(state) => (state.path.clone(), std::mem::take(&mut state.unsynced)),
            None => (None, 0),
        };
        FileSyncActivity {
            time_unix_ns: self.clock.unix_ns(sync.ids.ts_ns),
            sync,
            path,
            bytes_since_last_sync,
        }
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::io::IoSyscall;

    use super::*;
    use crate::capture::ProcessIds;

    fn ids(ts_ns: u64) -> ProcessIds {
        ProcessIds {
            ts_ns,
            tgid: 10,
            tid: 10,
        }
    }

    fn key() -> ConnKey {
        ConnKey {
            tgid: 10,
            conn_id: 77,
        }
    }

    fn data(direction: Direction, len: u64) -> DataMoved {
        DataMoved {
            conn: key(),
            direction,
            len,
            ts_ns: 2,
        }
    }

    #[test]
    fn close_reports_bytes_each_way_and_how_long_it_was_open() {
        let mut table = ConnTable::new(WallClock::anchor(), 8);
        let peer = Peer::Tcp("127.0.0.1:2379".parse().unwrap());
        let conn = |change, ts| ConnRecord {
            ids: ids(ts),
            conn: key(),
            fd: 5,
            change,
            fd_kind: FdKind::Socket,
            ret: 0,
            peer: if change == ConnAction::Closed {
                Peer::Unknown
            } else {
                peer.clone()
            },
            local_port: None,
        };
        table.on_conn(conn(ConnAction::Connected, 1_000));
        table.on_data(&data(Direction::Egress, 100));
        table.on_data(&data(Direction::Ingress, 30));
        table.on_data(&data(Direction::Egress, 5));
        let closed = table.on_conn(conn(ConnAction::Closed, 5_000));
        assert_eq!(
            (closed.bytes_out, closed.bytes_in, closed.open_ns),
            (105, 30, Some(4_000))
        );
        assert_eq!(closed.peer, peer);
        assert!(table.conns.is_empty());
    }

    #[test]
    fn wal_sync_reports_bytes_written_since_the_previous_sync() {
        let mut table = ConnTable::new(WallClock::anchor(), 8);
        table.on_file_open(FileOpenRecord {
            ids: ids(1),
            conn: key(),
            fd: 5,
            fd_kind: FdKind::WalFile,
            path: "member/wal/0.wal".into(),
        });
        table.on_data(&data(Direction::Egress, 64));
        let sync = |ts| FsyncRecord {
            ids: ids(ts),
            conn: key(),
            fd: 5,
            syscall: IoSyscall::Fdatasync,
            duration_ns: 900,
            ret: 0,
        };
        let first = table.on_fsync(sync(3));
        assert_eq!(
            (first.path.as_deref(), first.bytes_since_last_sync),
            (Some("member/wal/0.wal"), 64)
        );
        assert_eq!(table.on_fsync(sync(4)).bytes_since_last_sync, 0);
    }
}
