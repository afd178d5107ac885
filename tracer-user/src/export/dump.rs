//! `podtrace replay --dump`: every captured event, one readable line each,
//! with payload excerpts. For looking into a recording on one's own machine;
//! never used by the agent's normal output.
//!
//! Payloads are shown as escaped text: printable bytes as themselves, others
//! as `\xNN`.
//!
//! TLS 1.3 traffic reaches here decrypted where the recording holds its
//! secret (the secret itself is never printed): `tls read` / `tls write`
//! lines, as the per-call probes' plaintext was shown.

use crate::{
    capture::{Peer, RawEvent, clock::WallClock},
    export::terminal::format_time,
};

/// Payload bytes shown per event.
const EXCERPT_BYTES: usize = 512;

/// One line describing `event`.
pub fn format_event(event: &RawEvent, clock: &WallClock) -> String {
    let ids = event.ids();
    let head = format!(
        "{} pid {} tid {}",
        format_time(clock.unix_ns(ids.ts_ns)),
        ids.tgid,
        ids.tid
    );
    match event {
        RawEvent::Exec(exec) => format!(
            "{head} exec {} argv {:?}{} ppid {} cgroup {}",
            exec.filename,
            exec.argv,
            if exec.argv_truncated { " (cut)" } else { "" },
            exec.ppid,
            exec.cgroup_id
        ),
        RawEvent::CniExec(cni) => format!(
            "{head} CNI container {}",
            cni.container_id.as_deref().unwrap_or("(not a valid id)")
        ),
        RawEvent::Fork(fork) => format!("{head} fork from {} comm {}", fork.parent_tgid, fork.comm),
        RawEvent::Exit(exit) => format!("{head} exit {:?} comm {}", exit.status, exit.comm),
        RawEvent::Conn(conn) => format!(
            "{head} {:?} fd {} conn {:#x} {:?} {} ret {}",
            conn.change,
            conn.fd,
            conn.conn.conn_id,
            conn.fd_kind,
            peer(&conn.peer),
            conn.ret
        ),
        RawEvent::FileOpen(open) => {
            format!(
                "{head} open fd {} conn {:#x} {:?} {}",
                open.fd, open.conn.conn_id, open.fd_kind, open.path
            )
        }
        // The secret is never printed.
        RawEvent::TlsKey(key) => format!(
            "{head} TLS 1.3 secret fd {} conn {:#x} {:?} suite {:#06x} from record {}",
            key.fd, key.conn.conn_id, key.direction, key.suite, key.seq
        ),
        RawEvent::WalHead(segment) => format!(
            "{head} WAL segment head conn {:#x} {} bytes",
            segment.conn.conn_id,
            segment.head.len()
        ),
        RawEvent::Fsync(sync) => format!(
            "{head} {} fd {} conn {:#x} {} ns ret {}",
            sync.syscall.name(),
            sync.fd,
            sync.conn.conn_id,
            sync.duration_ns,
            sync.ret
        ),
        RawEvent::Header(field) => format!(
            "{head} hpack {:?} {}: {}{}",
            field.side,
            field.name,
            if field.redacted {
                "[sensitive]"
            } else {
                field.value.as_str()
            },
            if field.truncated { "…" } else { "" }
        ),
        RawEvent::HpackEntry(entry) => format!(
            "{head} hpack table {:?} conn {:#x} entry {} of {} B: {}",
            entry.side,
            entry.conn.conn_id,
            entry.index,
            entry.size,
            match &entry.field {
                Some((name, value)) => format!(
                    "{} ({} B value)",
                    String::from_utf8_lossy(name),
                    value.len()
                ),
                None => "[withheld]".to_owned(),
            }
        ),
        RawEvent::HpackTable(table) => format!(
            "{head} hpack table {:?} conn {:#x}: {} entries, {} of {} B",
            table.side,
            table.conn.conn_id,
            table
                .count
                .map_or_else(|| "not all".to_owned(), |count| count.to_string()),
            table.size,
            table.max_size
        ),
        RawEvent::GoFunc(call) => format!(
            "{head} func {:?} {} goroutine {} (created by {}) words {:x?} strings {:?}",
            call.function,
            if call.at_return { "ret" } else { "entry" },
            call.goid,
            call.parent_goid,
            call.words,
            call.strings
        ),
        RawEvent::Data(data) => format!(
            "{head} {}{} {:?} fd {} conn {:#x} {} B{} {}",
            if data.tls_plaintext { "tls " } else { "" },
            data.syscall.name(),
            data.direction,
            data.fd,
            data.conn.conn_id,
            data.len,
            if data.truncated {
                format!(" (kept {})", data.data.len())
            } else {
                String::new()
            },
            excerpt(&data.data)
        ),
    }
}

fn peer(peer: &Peer) -> String {
    match peer {
        Peer::Tcp(addr) => addr.to_string(),
        Peer::Unix(path) => format!("unix:{path}"),
        Peer::Unknown => "-".to_owned(),
    }
}

/// The first bytes of a payload, escaped: printable ASCII as itself, the
/// rest as `\xNN`, so text (HTTP, keys in protobuf) reads as text inside
/// binary framing.
pub fn excerpt(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(EXCERPT_BYTES)];
    let more = if bytes.len() > shown.len() { "…" } else { "" };
    format!("\"{}\"{more}", shown.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_escaped_so_text_inside_binary_frames_reads() {
        assert_eq!(excerpt(b"GET /x HTTP/1.1\r\n"), r#""GET /x HTTP/1.1\r\n""#);
        assert_eq!(
            excerpt(&[0, 0, 4, b'k', b'e', b'y']),
            r#""\x00\x00\x04key""#
        );
        assert!(excerpt(&[b'a'; 600]).ends_with("…"));
    }
}
