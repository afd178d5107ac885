//! What a component can leave on the host — processes, mounts, cgroups —
//! found by the harness's teardown (which removes them) and by tests (which
//! assert there are none).
//!
//! In: a directory or cgroup root the component owned. Out: the matching
//! processes (from `/proc/*/cmdline` and `cgroup.procs`), mount points (from
//! `/proc/self/mountinfo`) and cgroup directories.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// Processes whose command line contains `needle` (for example a
/// containerd's socket path, which its shims and runc calls carry), as
/// (pid, command line with spaces between arguments). The caller's own
/// process is never listed.
pub fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            // A process may exit while we look: skip it.
            let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&raw)
                .trim_end_matches('\0')
                .replace('\0', " ");
            cmdline.contains(needle).then_some((pid, cmdline))
        })
        .collect()
}

/// Mount points at or under `dir`, deepest first (the order to unmount them).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mut mounts: Vec<PathBuf> = mountinfo()
        .into_iter()
        .map(|mount| mount.point)
        .filter(|point| point.starts_with(dir))
        .collect();
    mounts.sort_by_key(|point| std::cmp::Reverse(point.as_os_str().len()));
    mounts.dedup();
    mounts
}

/// The directories of cgroup `cgroup_path` (e.g. `/podtrace-1a2b`) in every
/// mounted cgroup hierarchy (v1 controllers and v2) where it exists.
pub fn cgroup_dirs(cgroup_path: &str) -> Vec<PathBuf> {
    let relative = cgroup_path.trim_start_matches('/');
    mountinfo()
        .into_iter()
        .filter(|mount| mount.fs_type == "cgroup" || mount.fs_type == "cgroup2")
        .map(|mount| mount.point.join(relative))
        .filter(|dir| dir.is_dir())
        .collect()
}

/// Pids of the processes in cgroup directory `dir` and its descendants.
pub fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect();
    for child in subdirectories(dir) {
        pids.extend(cgroup_pids(&child));
    }
    pids
}

/// Removes cgroup directory `dir` and its descendants, deepest first
/// (cgroupfs only lets empty cgroups go, one rmdir at a time).
pub(crate) fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for child in subdirectories(dir) {
        remove_cgroup_tree(&child)?;
    }
    fs::remove_dir(dir)
}

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default()
}

struct Mount {
    point: PathBuf,
    fs_type: String,
}

/// The mount table of this process's mount namespace.
fn mountinfo() -> Vec<Mount> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            // id parent major:minor root mount-point options [optional…] - type source super
            let (before, after) = line.split_once(" - ")?;
            let point = before.split(' ').nth(4)?;
            let fs_type = after.split(' ').next()?;
            Some(Mount {
                point: PathBuf::from(unescape_octal(point)),
                fs_type: fs_type.to_owned(),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'\\')
            .then(|| field.get(i + 1..i + 4))
            .flatten()
            .and_then(|octal| u8::from_str_radix(octal, 8).ok());
        match escaped {
            Some(value) => {
                out.push(value);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
