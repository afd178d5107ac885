//! One human-readable line per activity: process events, connections opened
//! and closed (with byte counts, never payloads), WAL syncs.

use crate::correlate::contract::attr;

use std::io::{self, Write};

use tracer_common::io::{ConnAction, FdKind};

use crate::{
    capture::{ExitStatus, Peer},
    correlate::{
        Activity, ConnActivity, FileSyncActivity, ProcessActivity, ProcessEvent, Span,
        span::SpanStatus,
    },
};

/// Formats any activity as one line (no trailing newline). `name_of` gives
/// the name of a process by tgid, when known.
pub fn format(activity: &Activity, name_of: impl Fn(u32) -> Option<String>) -> String {
    match activity {
        Activity::Process(process) => format_activity(process),
        Activity::Conn(conn) => format_conn(conn, name_of(conn.conn.tgid)),
        Activity::FileSync(sync) => format_sync(sync, name_of(sync.sync.ids.tgid)),
        Activity::Spans(spans) => spans.iter().map(format_span).collect::<Vec<_>>().join("\n"),
    }
}

/// A finished span: name, duration, Pod, trace id.
fn format_span(span: &Span) -> String {
    let attribute = |key: &str| span.string_attribute(key);
    let failed = match &span.status {
        SpanStatus::Error(message) => format!("  ERROR {message}"),
        SpanStatus::Unset => String::new(),
    };
    format!(
        "{time}  span  {name}  {ms:.3} ms  pod {namespace}/{pod}  trace {trace}{failed}",
        time = format_time(span.start_unix_ns),
        name = span.name,
        ms = span.end_unix_ns.saturating_sub(span.start_unix_ns) as f64 / 1e6,
        namespace = attribute(attr::K8S_NAMESPACE_NAME).unwrap_or("?"),
        pod = attribute(attr::K8S_POD_NAME).unwrap_or("?"),
        trace = span.trace_id.to_hex(),
    )
}

fn process_tag(tgid: u32, name: Option<String>) -> String {
    format!("{}[{tgid}]", name.unwrap_or_default())
}

fn format_conn(conn: &ConnActivity, name: Option<String>) -> String {
    let time = format_time(conn.time_unix_ns);
    let who = process_tag(conn.conn.tgid, name);
    let peer = match (&conn.peer, &conn.path) {
        (_, Some(path)) => path.clone(),
        (Peer::Tcp(addr), None) => format!("tcp {addr}"),
        (Peer::Unix(path), None) => format!("unix {path}"),
        (Peer::Unknown, None) => match conn.kind {
            FdKind::Socket => "socket".to_owned(),
            FdKind::WalFile => "WAL file".to_owned(),
        },
    };
    let what = match conn.change {
        ConnAction::Connected => "connect",
        ConnAction::Accepted => "accept ",
        ConnAction::OpenAtStart
        | ConnAction::AcceptedBeforeStart
        | ConnAction::ConnectedBeforeStart => "open   ",
        ConnAction::Closed => "close  ",
    };
    let totals = if conn.change == ConnAction::Closed {
        let open = conn
            .open_ns
            .map(|ns| format!(" after {:.3}s", ns as f64 / 1e9))
            .unwrap_or_default();
        format!(
            "  sent {} B, received {} B{open}",
            conn.bytes_out, conn.bytes_in
        )
    } else {
        String::new()
    };
    format!("{time}  {what} {who} fd {fd}  {peer}{totals}", fd = conn.fd)
}

fn format_sync(sync: &FileSyncActivity, name: Option<String>) -> String {
    let failed = if sync.sync.ret < 0 {
        format!(" (failed: errno {})", -sync.sync.ret)
    } else {
        String::new()
    };
    format!(
        "{time}  {call} {who} fd {fd}  {path}  {ms:.3} ms, {bytes} B since the previous sync{failed}",
        time = format_time(sync.time_unix_ns),
        call = sync.sync.syscall.name(),
        who = process_tag(sync.sync.ids.tgid, name),
        fd = sync.sync.fd,
        path = sync.path.as_deref().unwrap_or("?"),
        ms = sync.sync.duration_ns as f64 / 1e6,
        bytes = sync.bytes_since_last_sync,
    )
}

/// Formats a process activity as one line (no trailing newline).
pub fn format_activity(activity: &ProcessActivity) -> String {
    let time = format_time(activity.time_unix_ns);
    let parent = |ppid: u32| match &activity.parent_name {
        Some(name) => format!("{name}[{ppid}]"),
        None => format!("[{ppid}]"),
    };
    match &activity.event {
        ProcessEvent::Exec(exec) => {
            let argv = exec
                .argv
                .iter()
                .map(|arg| quote(arg))
                .collect::<Vec<_>>()
                .join(" ");
            let cut = if exec.argv_truncated { " …" } else { "" };
            let cgroup = exec
                .cgroup_path
                .clone()
                .unwrap_or_else(|| exec.cgroup_id.to_string());
            format!(
                "{time}  exec  {comm}[{pid}] ← {parent}  {file}  argv: {argv}{cut}  ({reason:?}, depth {depth}, cgroup {cgroup})",
                comm = exec.comm,
                pid = exec.ids.tgid,
                parent = parent(exec.ppid),
                file = exec.filename,
                reason = exec.target,
                depth = exec.depth,
            )
        }
        ProcessEvent::Fork(fork) => format!(
            "{time}  fork  {comm}[{pid}] ← {parent}  (depth {depth})",
            comm = fork.comm,
            pid = fork.ids.tgid,
            parent = parent(fork.parent_tgid),
            depth = fork.depth,
        ),
        ProcessEvent::Exit(exit) => {
            let status = match exit.status {
                ExitStatus::Code(code) => format!("exit code {code}"),
                ExitStatus::Signal(signal) => format!("killed by signal {signal}"),
            };
            let lived = activity
                .lifetime_ns
                .map(|ns| format!(" after {:.3}s", ns as f64 / 1e9))
                .unwrap_or_default();
            format!(
                "{time}  exit  {comm}[{pid}]  {status}{lived}",
                comm = exit.comm,
                pid = exit.ids.tgid
            )
        }
    }
}

/// Writes lines to a terminal or pipe; flushes each so tails see them at once.
#[derive(Debug)]
pub struct TerminalPrinter<W: Write> {
    out: W,
}

impl<W: Write> TerminalPrinter<W> {
    /// Prints to `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }

    /// Prints one line.
    pub fn print(&mut self, line: &str) -> io::Result<()> {
        writeln!(self.out, "{line}")?;
        self.out.flush()
    }
}

/// `HH:MM:SS.micros` UTC of a Unix time in nanoseconds.
pub(crate) fn format_time(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let micros = (unix_ns % 1_000_000_000) / 1_000;
    let day_secs = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{micros:06}",
        day_secs / 3600,
        (day_secs / 60) % 60,
        day_secs % 60
    )
}

/// Quotes an argument when it has spaces or is empty, so argv reads unambiguously.
fn quote(arg: &str) -> String {
    if arg.is_empty() || arg.contains(char::is_whitespace) || arg.contains('"') {
        format!("{arg:?}")
    } else {
        arg.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::config::TargetReason;

    use super::*;
    use crate::capture::{ExecRecord, ExitRecord, ProcessIds};

    #[test]
    fn exec_line_shows_parent_file_and_quoted_argv() {
        let activity = ProcessActivity {
            event: ProcessEvent::Exec(ExecRecord {
                ids: ProcessIds {
                    ts_ns: 0,
                    tgid: 42,
                    tid: 42,
                },
                ppid: 7,
                cgroup_id: 99,
                target: TargetReason::Descendant,
                depth: 1,
                comm: "sh".into(),
                filename: "/bin/sh".into(),
                filename_truncated: false,
                argv: vec!["sh".into(), "-c".into(), "sleep 1".into()],
                argv_truncated: false,
                cgroup_path: None,
            }),
            time_unix_ns: 3_723_000_004_000,
            parent_name: Some("runc".into()),
            lifetime_ns: None,
        };
        assert_eq!(
            format_activity(&activity),
            "01:02:03.000004  exec  sh[42] ← runc[7]  /bin/sh  argv: sh -c \"sleep 1\"  (Descendant, depth 1, cgroup 99)"
        );
    }

    #[test]
    fn exit_line_shows_signal_and_lifetime() {
        let activity = ProcessActivity {
            event: ProcessEvent::Exit(ExitRecord {
                ids: ProcessIds {
                    ts_ns: 0,
                    tgid: 42,
                    tid: 43,
                },
                cgroup_id: 1,
                status: ExitStatus::Signal(9),
                comm: "sleep".into(),
            }),
            time_unix_ns: 0,
            parent_name: None,
            lifetime_ns: Some(1_500_000_000),
        };
        assert_eq!(
            format_activity(&activity),
            "00:00:00.000000  exit  sleep[42]  killed by signal 9 after 1.500s"
        );
    }
}
