//! The kernel's `IO_PROCESSES` map: one byte per tgid saying whether the
//! syscall programs follow that process's sockets and files.
//!
//! Every syscall of every process on the node passes `sys_enter` and
//! `sys_exit`; this byte is what lets all but the components' return after
//! one inlined array read. The kernel side keeps it as processes exec, fork
//! and exit; user space sizes the map to the node's `pid_max` before load and
//! marks the components that were running before podtrace, through a shared
//! mapping of the map's memory: a byte store there leaves its neighbours
//! alone, where rewriting a whole entry could undo a mark the kernel side
//! makes at the same moment.

use std::{
    os::fd::{AsFd, AsRawFd},
    path::Path,
};

use aya::{Ebpf, maps::Map};
use tracer_common::{
    config::{IO_PROCESSES_PER_ENTRY, PID_MAX_LIMIT},
    names::MAP_IO_PROCESSES,
};

use super::CaptureError;

/// The node's largest pid, plus one.
pub(super) const PID_MAX_FILE: &str = "/proc/sys/kernel/pid_max";

/// Entries the map needs for this node's pids: `/proc/sys/kernel/pid_max`
/// rounded up to whole entries, or room for every pid a kernel allows when
/// that file cannot be read. A tgid beyond the map counts as followed on the
/// kernel side, so a `pid_max` raised later costs time, not traces.
pub(super) fn entries(pid_max_file: &Path) -> u32 {
    let pid_max = std::fs::read_to_string(pid_max_file)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&pid_max| pid_max > 0)
        .unwrap_or(PID_MAX_LIMIT)
        .min(PID_MAX_LIMIT);
    pid_max.div_ceil(IO_PROCESSES_PER_ENTRY)
}

/// Marks `tgids` as processes whose I/O is followed, in the loaded object's
/// map of `entries` entries.
pub(super) fn mark(ebpf: &Ebpf, entries: u32, tgids: &[u32]) -> Result<(), CaptureError> {
    let name = MAP_IO_PROCESSES;
    let Some(Map::Array(data)) = ebpf.map(name) else {
        return Err(CaptureError::MissingMap(name));
    };
    let len = entries as usize * IO_PROCESSES_PER_ENTRY as usize;
    // SAFETY: the map was created BPF_F_MMAPABLE with `entries` values of
    // IO_PROCESSES_PER_ENTRY bytes (a page each), so `len` bytes of its fd
    // map its values; the mapping is dropped before this returns.
    let mut bytes = unsafe {
        memmap2::MmapOptions::new()
            .len(len)
            .map_mut(data.fd().as_fd().as_raw_fd())
    }
    .map_err(|source| CaptureError::MapMemory { name, source })?;
    for &tgid in tgids {
        if let Some(byte) = bytes.get_mut(tgid as usize) {
            // SAFETY: a valid byte of the mapping. Volatile: the kernel
            // writes the other bytes of the page concurrently.
            unsafe { std::ptr::write_volatile(byte, 1) };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_cover_pid_max() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pid_max");
        for (text, want) in [
            ("32768\n", 8),
            ("32769", 9),
            ("4194304", 1024),
            ("99999999", 1024),
            ("0", 1024),
            ("many", 1024),
        ] {
            std::fs::write(&file, text).unwrap();
            assert_eq!(entries(&file), want, "{text:?}");
        }
        assert_eq!(entries(&dir.path().join("absent")), 1024);
    }
}
