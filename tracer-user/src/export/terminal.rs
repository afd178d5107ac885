//! One human-readable line per process event.

use std::io::{self, Write};

use crate::{capture::ExitStatus, correlate::ProcessActivity, decode::Message};

/// Formats `activity` as one line (no trailing newline).
pub fn format_activity(activity: &ProcessActivity) -> String {
    let time = format_time(activity.time_unix_ns);
    let parent = |ppid: u32| match &activity.parent_name {
        Some(name) => format!("{name}[{ppid}]"),
        None => format!("[{ppid}]"),
    };
    match &activity.message {
        Message::Exec(exec) => {
            let argv = exec
                .argv
                .iter()
                .map(|arg| quote(arg))
                .collect::<Vec<_>>()
                .join(" ");
            let cut = if exec.argv_truncated { " …" } else { "" };
            format!(
                "{time}  exec  {comm}[{pid}] ← {parent}  {file}  argv: {argv}{cut}  ({reason:?}, depth {depth}, cgroup {cgroup})",
                comm = exec.comm,
                pid = exec.ids.tgid,
                parent = parent(exec.ppid),
                file = exec.filename,
                reason = exec.target,
                depth = exec.depth,
                cgroup = exec.cgroup_id,
            )
        }
        Message::Fork(fork) => format!(
            "{time}  fork  {comm}[{pid}] ← {parent}  (depth {depth})",
            comm = fork.comm,
            pid = fork.ids.tgid,
            parent = parent(fork.parent_tgid),
            depth = fork.depth,
        ),
        Message::Exit(exit) => {
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

    /// Prints one activity.
    pub fn print(&mut self, activity: &ProcessActivity) -> io::Result<()> {
        writeln!(self.out, "{}", format_activity(activity))?;
        self.out.flush()
    }
}

/// `HH:MM:SS.micros` UTC of a Unix time in nanoseconds.
fn format_time(unix_ns: u64) -> String {
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
            message: Message::Exec(ExecRecord {
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
            message: Message::Exit(ExitRecord {
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
