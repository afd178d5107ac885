//! Which processes podtrace follows: target names, and discovery of running
//! targets (and their descendants) in /proc at start.
//!
//! A process is a target when its executable's name is a target name. The
//! kernel side recognises new targets by comm at exec (comm is the first 15
//! bytes of the executable's name), and follows their descendants; this module
//! gives it the comms and finds what was already running.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use tracer_common::config::{
    COMM_BYTES, ETCD_EXECUTABLE, TARGET_LIFECYCLE_ONLY, TARGET_WAL, TargetInfo, TargetReason,
};

/// Executables podtrace follows by default. `containerd-shim*` covers every
/// shim (`containerd-shim-runc-v2`, …).
pub const DEFAULT_TARGET_NAMES: [&str; 9] = [
    "kube-apiserver",
    "etcd",
    "kube-scheduler",
    "kube-controller-manager",
    "kubelet",
    "containerd",
    "containerd-shim*",
    "runc",
    "crio",
];

/// Default targets followed for their processes' lives only: the spans of
/// runc and the shims come from their exec, fork and exit; their sockets
/// (the shims' ttrpc, which containerd's side shows already) are not
/// decoded, and their syscalls are over 40 % of a Pod start's.
const LIFECYCLE_ONLY_NAMES: [&str; 2] = ["containerd-shim", "runc"];

/// Longest comm the kernel keeps (`TASK_COMM_LEN` - 1).
const COMM_CHARS: usize = COMM_BYTES - 1;

/// A target name that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetNameError {
    /// Empty, or contains `/` or NUL.
    #[error("invalid target name {0:?}: give an executable's file name")]
    Invalid(String),
    /// A `prefix*` pattern shorter than a comm cannot be matched by the kernel.
    #[error(
        "target pattern {0:?}: a prefix pattern must have at least {COMM_CHARS} characters before `*`, \
         since the kernel compares the {COMM_CHARS}-character comm"
    )]
    ShortPrefix(String),
}

/// One target name: an exact file name, or a prefix ending in `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TargetName {
    text: String,
    prefix: bool,
}

/// Matches executables against target names.
#[derive(Clone, Debug)]
pub struct TargetMatcher {
    names: Vec<TargetName>,
}

impl TargetMatcher {
    /// Builds a matcher from names like `etcd` or `containerd-shim*`.
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Result<Self, TargetNameError> {
        let names = names
            .into_iter()
            .map(|name| {
                let name = name.as_ref();
                let (text, prefix) = match name.strip_suffix('*') {
                    Some(text) => (text, true),
                    None => (name, false),
                };
                if text.is_empty() || text.contains(['/', '\0', '*']) {
                    return Err(TargetNameError::Invalid(name.to_owned()));
                }
                if prefix && text.len() < COMM_CHARS {
                    return Err(TargetNameError::ShortPrefix(name.to_owned()));
                }
                Ok(TargetName {
                    text: text.to_owned(),
                    prefix,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { names })
    }

    /// The entries of the kernel's `TARGET_COMMS` map: each name cut to 15
    /// bytes and NUL padded, as the kernel stores a task's comm, with the
    /// `TARGET_*` flags of that name.
    pub fn comm_keys(&self) -> Vec<([u8; COMM_BYTES], u8)> {
        let mut keys: Vec<_> = self
            .names
            .iter()
            .map(|name| (comm_key(&name.text), flags_for(&name.text)))
            .collect();
        keys.dedup();
        keys
    }

    /// The target name an executable file name matches, if any.
    pub fn match_file_name(&self, file_name: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|name| {
                if name.prefix {
                    file_name.starts_with(&name.text)
                } else {
                    file_name == name.text
                }
            })
            .map(|name| name.text.as_str())
    }

    /// Executables named like an (exact) target name in the directories of
    /// `$PATH`, but those followed for their lifecycle only (they get no Go
    /// probes).
    pub fn executables_on_path(&self) -> Vec<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .flat_map(|dir| {
                self.names
                    .iter()
                    .filter(|name| {
                        !name.prefix && flags_for(&name.text) & TARGET_LIFECYCLE_ONLY == 0
                    })
                    .map(move |name| dir.join(&name.text))
            })
            .filter(|candidate| candidate.is_file())
            .collect()
    }

    /// Whether a comm (when the executable path cannot be read) is a target's.
    fn match_comm(&self, comm: &str) -> bool {
        let key = comm_key(comm);
        self.names.iter().any(|name| comm_key(&name.text) == key)
    }
}

/// What else is captured for a target name (etcd's WAL files), or what is
/// not (the sockets and files of runc and the shims).
pub fn flags_for(name: &str) -> u8 {
    match name {
        ETCD_EXECUTABLE => TARGET_WAL,
        name if LIFECYCLE_ONLY_NAMES.contains(&name) => TARGET_LIFECYCLE_ONLY,
        _ => 0,
    }
}

/// `name` as the kernel stores it in a comm: at most 15 bytes, NUL padded.
pub fn comm_key(name: &str) -> [u8; COMM_BYTES] {
    let mut key = [0; COMM_BYTES];
    let len = name.len().min(COMM_CHARS);
    key[..len].copy_from_slice(&name.as_bytes()[..len]);
    key
}

/// A process found running at start that podtrace follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTarget {
    /// Process id.
    pub tgid: u32,
    /// Generations below the nearest target ancestor (0 for a target itself).
    pub depth: u8,
    /// `Discovered` for a target, `Descendant` for one of its descendants.
    pub reason: TargetReason,
    /// `TARGET_*` flags of the target's name (0 for descendants).
    pub flags: u8,
    /// Its executable, as /proc/PID/exe shows it (a path in its own mount namespace).
    pub exe: Option<PathBuf>,
}

impl FoundTarget {
    /// Its entry in the kernel's `TARGETS` map.
    pub fn info(&self) -> TargetInfo {
        TargetInfo {
            depth: self.depth,
            reason: self.reason as u8,
            flags: self.flags,
            _pad: 0,
        }
    }
}

/// One process as /proc shows it.
#[derive(Clone, Debug)]
struct ProcEntry {
    ppid: u32,
    comm: String,
    exe: Option<PathBuf>,
}

/// Scans `proc_root` (normally `/proc`) for targets and their descendants up
/// to `max_depth` generations, skipping `exclude_tgid` (the agent itself).
/// Processes that vanish during the scan are skipped.
pub fn scan_proc(
    proc_root: &Path,
    matcher: &TargetMatcher,
    max_depth: u32,
    exclude_tgid: u32,
) -> Vec<FoundTarget> {
    let Ok(dir) = fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let processes: HashMap<u32, ProcEntry> = dir
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&tgid| tgid != exclude_tgid)
        .filter_map(|tgid| Some((tgid, read_proc_entry(&proc_root.join(tgid.to_string()))?)))
        .collect();

    // The target name a process matches, by executable or (unreadable exe) comm.
    let target_name = |entry: &ProcEntry| -> Option<String> {
        match &entry.exe {
            Some(exe) => exe
                .file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| matcher.match_file_name(name))
                .map(str::to_owned),
            None => matcher.match_comm(&entry.comm).then(|| entry.comm.clone()),
        }
    };

    let mut found: Vec<FoundTarget> = processes
        .iter()
        .filter_map(|(&tgid, entry)| {
            // Walk up at most max_depth generations to the nearest target.
            let mut current = entry;
            for depth in 0..=max_depth {
                if let Some(name) = target_name(current) {
                    let (reason, flags) = if depth == 0 {
                        (TargetReason::Discovered, flags_for(&name))
                    } else {
                        (TargetReason::Descendant, 0)
                    };
                    return Some(FoundTarget {
                        tgid,
                        depth: depth as u8,
                        reason,
                        flags,
                        exe: entry.exe.clone(),
                    });
                }
                current = processes.get(&current.ppid)?;
            }
            None
        })
        .collect();
    found.sort_by_key(|target| target.tgid);
    found
}

fn read_proc_entry(dir: &Path) -> Option<ProcEntry> {
    let stat = fs::read_to_string(dir.join("stat")).ok()?;
    let (comm, ppid) = parse_stat(&stat)?;
    // Kernel threads and processes of other users without CAP_SYS_PTRACE have
    // no readable exe; the comm still identifies them.
    let exe = fs::read_link(dir.join("exe")).ok();
    Some(ProcEntry { ppid, comm, exe })
}

/// comm and ppid from /proc/PID/stat: `pid (comm) state ppid …`. The comm may
/// itself contain spaces and parentheses, so split at the last `)`.
fn parse_stat(stat: &str) -> Option<(String, u32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let mut rest = stat.get(close + 1..)?.split_ascii_whitespace();
    let _state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, ppid))
}

/// The member name an etcd command line gives (`--name NAME`, `--name=NAME`
/// or Go's single-dash forms). `None` when the flag is absent — etcd then
/// takes `ETCD_NAME` from its environment, which podtrace never reads, or
/// its default — and when the flag's value may have been cut with the
/// command line (`truncated`: the last string is partial).
pub fn etcd_member_name(argv: &[String], truncated: bool) -> Option<String> {
    let complete = |index: usize| !truncated || index + 1 < argv.len();
    let mut args = argv.iter().enumerate().skip(1);
    while let Some((index, arg)) = args.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        if let Some(value) = flag.strip_prefix("name=") {
            return complete(index).then(|| value.to_owned());
        }
        if flag == "name" {
            let (index, value) = args.next()?;
            return complete(index).then(|| value.clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn etcd_member_name_in_every_flag_form() {
        for args in [
            &["etcd", "--data-dir=/d", "--name=infra1"][..],
            &["etcd", "--name", "infra1", "--data-dir=/d"],
            &["etcd", "-name=infra1"],
            &["etcd", "-name", "infra1"],
        ] {
            assert_eq!(
                etcd_member_name(&strings(args), false).as_deref(),
                Some("infra1"),
                "{args:?}"
            );
        }
        // Absent: etcd's environment or default decides, unknown here.
        assert_eq!(
            etcd_member_name(&strings(&["etcd", "--data-dir=/d"]), false),
            None
        );
        // A flag's value, not a flag: `--initial-cluster-token name`.
        assert_eq!(
            etcd_member_name(
                &strings(&["etcd", "--initial-cluster-token", "name"]),
                false
            ),
            None
        );
        // Cut command lines: the last string may be a partial name.
        assert_eq!(
            etcd_member_name(&strings(&["etcd", "--name=inf"]), true),
            None
        );
        assert_eq!(
            etcd_member_name(&strings(&["etcd", "--name", "inf"]), true),
            None
        );
        assert_eq!(
            etcd_member_name(&strings(&["etcd", "--name=infra1", "--data-d"]), true).as_deref(),
            Some("infra1")
        );
    }

    fn default_matcher() -> TargetMatcher {
        TargetMatcher::new(DEFAULT_TARGET_NAMES).unwrap()
    }

    #[test]
    fn names_match_exactly_and_shim_by_prefix() {
        let matcher = default_matcher();
        assert_eq!(matcher.match_file_name("etcd"), Some("etcd"));
        assert_eq!(matcher.match_file_name("etcdctl"), None);
        assert_eq!(
            matcher.match_file_name("containerd-shim-runc-v2"),
            Some("containerd-shim")
        );
        assert_eq!(matcher.match_file_name("containerd"), Some("containerd"));
        assert_eq!(matcher.match_file_name("runc.amd64"), None);
    }

    #[test]
    fn comm_keys_are_cut_to_fifteen_bytes() {
        let keys = default_matcher().comm_keys();
        assert!(keys.contains(&(comm_key("kube-controller"), 0)));
        assert!(keys.contains(&(comm_key("containerd-shim"), TARGET_LIFECYCLE_ONLY)));
        assert!(keys.contains(&(comm_key("runc"), TARGET_LIFECYCLE_ONLY)));
        assert!(keys.contains(&(comm_key("containerd"), 0)));
        assert!(keys.contains(&(comm_key("etcd"), TARGET_WAL)));
        assert_eq!(
            &comm_key("kube-controller-manager")[..],
            b"kube-controller\0"
        );
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(matches!(
            TargetMatcher::new(["a/b"]),
            Err(TargetNameError::Invalid(_))
        ));
        assert!(matches!(
            TargetMatcher::new([""]),
            Err(TargetNameError::Invalid(_))
        ));
        assert!(matches!(
            TargetMatcher::new(["kube*"]),
            Err(TargetNameError::ShortPrefix(_))
        ));
    }

    #[test]
    fn stat_with_parentheses_in_comm() {
        assert_eq!(
            parse_stat("42 (a) b) c) S 7 42 42 0"),
            Some(("a) b) c".to_owned(), 7))
        );
        assert_eq!(parse_stat("42 (runc) R 1 0"), Some(("runc".to_owned(), 1)));
        assert_eq!(parse_stat("garbage"), None);
    }

    /// A fake /proc: init → containerd → shim → pause, and an unrelated bash.
    #[test]
    fn scan_finds_targets_and_descendants_within_depth() {
        let root = std::env::temp_dir().join(format!("podtrace-proc-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for (pid, comm, ppid, exe) in [
            (1, "systemd", 0, "/usr/lib/systemd/systemd"),
            (10, "containerd", 1, "/usr/bin/containerd"),
            (20, "containerd-shim", 1, "/usr/bin/containerd-shim-runc-v2"),
            (30, "pause", 20, "/pause"),
            (31, "sh", 30, "/bin/sh"),
            (40, "bash", 1, "/bin/bash"),
        ] {
            let dir = root.join(pid.to_string());
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("stat"), format!("{pid} ({comm}) S {ppid} 0 0")).unwrap();
            std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        }
        let found = scan_proc(&root, &default_matcher(), 1, 0);
        let summary: Vec<(u32, u8, TargetReason)> =
            found.iter().map(|t| (t.tgid, t.depth, t.reason)).collect();
        assert_eq!(
            summary,
            [
                (10, 0, TargetReason::Discovered),
                (20, 0, TargetReason::Discovered),
                (30, 1, TargetReason::Descendant)
            ]
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
