//! The first bytes of an etcd WAL segment, read from the file itself: the
//! metadata record there names the member that writes it (its Raft id),
//! which no write after the segment's first carries.
//!
//! Read through `/proc/PID/fd/FD`, which reaches the member's file from any
//! mount namespace (the agent's container, a member in its own), when
//! capture learns of the segment; handed downstream, and to a recording, as
//! a [`WalHeadEvent`] record after the segment's open record.

use std::io::Read as _;

use tracer_common::{
    event::{EventHeader, EventKind},
    io::{WAL_HEAD_BYTES, WalHeadEvent},
};

use super::wire::record_bytes;

/// The record of the first bytes of the WAL segment `fd` of process `tgid`
/// (whose `FdInfo::conn_id` is `conn_id`), stamped `ts_ns`; `None` when the
/// file cannot be read (closed since, or the process is gone), which leaves
/// the member's WAL spans without its id.
pub fn wal_head_record(tgid: u32, fd: u32, conn_id: u64, ts_ns: u64) -> Option<Vec<u8>> {
    let path = format!("/proc/{tgid}/fd/{fd}");
    let mut read = Vec::with_capacity(WAL_HEAD_BYTES);
    std::fs::File::open(&path)
        .and_then(|file| file.take(WAL_HEAD_BYTES as u64).read_to_end(&mut read))
        .inspect_err(|error| tracing::debug!(%error, path, "WAL segment head not read"))
        .ok()?;
    let mut head = [0; WAL_HEAD_BYTES];
    head[..read.len()].copy_from_slice(&read);
    let event = WalHeadEvent {
        header: EventHeader {
            ts_ns,
            kind: EventKind::WalHead as u32,
            tgid,
            tid: tgid,
            _pad: 0,
        },
        conn_id,
        fd,
        len: read.len() as u32,
        head,
    };
    Some(record_bytes(&event))
}
