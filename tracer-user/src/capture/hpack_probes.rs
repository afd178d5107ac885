//! The HPACK probes, attached only while a process needs them, and the
//! requests for copies of HPACK tables.
//!
//! A uprobe on `hpack.(*Encoder).WriteField` / `(*Decoder).callEmit` costs
//! every header field of every request a trap, which is most of what
//! podtrace would cost a busy etcd. The fields are only needed on
//! connections joined after their HPACK tables were built, and there only
//! until copies of the tables are loaded (`decode::table_copies`). So the
//! decode stage says per process whether it needs them, and the probes of
//! an executable stay attached only while one of its processes does.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap},
};
use tracer_common::{
    io::{HPACK_SYNC_DECODER_DONE, HPACK_SYNC_ENCODER_DONE, HeaderSide, HpackSync, ProcessConnKey},
    names::{MAP_HPACK_SYNC, MAP_HPACK_SYNC_COUNT, PROGRAM_GO_HPACK_FIELD},
};

use super::{
    CaptureError, ConnKey,
    uprobe_links::{UprobeAttacher, UprobeLinks},
};

/// What the decode stage asks of the HPACK probes and table copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HpackControl {
    /// Copy this connection's tables at its next read and write.
    Ask(ConnKey),
    /// Copy this side's table again (the last copy could not be used).
    Again(ConnKey, HeaderSide),
    /// Stop asking for this connection's tables.
    Forget(ConnKey),
    /// Whether process `tgid` needs its HPACK probes (header fields).
    FieldProbes {
        /// The process.
        tgid: u32,
        /// Attach (true) or detach (false).
        needed: bool,
    },
    /// Process `tgid` ended.
    Exited(u32),
}

/// An executable file: (device, inode).
pub(crate) type FileId = (u64, u64);

/// The HPACK probe points of one executable.
#[derive(Debug)]
struct Executable {
    /// Where it was first found (attaching again goes through a process
    /// of it that is alive: the path may have been replaced since).
    path: PathBuf,
    /// (file offset, attach cookie) of each probe point.
    points: Vec<(u64, u64)>,
    /// The attached probes; none while detached.
    links: Option<UprobeLinks>,
    /// Processes of it that said they need the probes.
    needed_by: HashSet<u32>,
    /// Processes of it running when it was first attached that have not
    /// said yet: they may hold connections older than podtrace.
    unreported: HashSet<u32>,
}

/// Attach state of the HPACK probes, and the `HPACK_SYNC` requests.
#[derive(Debug, Default)]
pub(crate) struct HpackProbes {
    executables: HashMap<FileId, Executable>,
    process_file: HashMap<u32, FileId>,
    /// Connections in `HPACK_SYNC`.
    syncs: HashSet<ConnKey>,
    /// Times the probes of an executable were attached again.
    pub(crate) reattached: u64,
}

impl HpackProbes {
    /// Registers an executable's probe points, and attaches them if it has
    /// running processes (`tgids`): those may have connections older than
    /// podtrace. Processes started later connect while probed from their
    /// start, and need them only if they say so.
    pub(crate) fn add_executable(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        file: FileId,
        path: PathBuf,
        points: Vec<(u64, u64)>,
        tgids: &[u32],
    ) -> Result<(), CaptureError> {
        for &tgid in tgids {
            self.process_file.insert(tgid, file);
        }
        let mut executable = Executable {
            path,
            points,
            links: None,
            needed_by: HashSet::new(),
            unreported: tgids.iter().copied().collect(),
        };
        if !tgids.is_empty() {
            let path = executable.path.clone();
            attach(ebpf, uprobes, &mut executable, &path)?;
        }
        self.executables.insert(file, executable);
        Ok(())
    }

    /// A process of an executable already registered; `at_start`: it was
    /// running before podtrace, so it may need the probes.
    pub(crate) fn add_process(&mut self, file: FileId, tgid: u32, at_start: bool) {
        if let Some(executable) = self.executables.get_mut(&file) {
            self.process_file.insert(tgid, file);
            if at_start {
                executable.unreported.insert(tgid);
            }
        }
    }

    /// Carries out what the decode stage asked.
    pub(crate) fn control(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        request: HpackControl,
    ) -> Result<(), CaptureError> {
        match request {
            HpackControl::Ask(conn) => {
                if self.syncs.insert(conn) {
                    set_sync(ebpf, conn, 0)?;
                    self.write_count(ebpf)?;
                }
            }
            HpackControl::Again(conn, side) => {
                if self.syncs.contains(&conn) {
                    let syncs: BpfHashMap<_, ProcessConnKey, HpackSync> = sync_map(ebpf)?;
                    let done = syncs.get(&conn.map_key(), 0).map_or(0, |sync| sync.done);
                    let bit = match side {
                        HeaderSide::Decoder => HPACK_SYNC_DECODER_DONE,
                        HeaderSide::Encoder => HPACK_SYNC_ENCODER_DONE,
                    };
                    set_sync(ebpf, conn, done & !bit)?;
                }
            }
            HpackControl::Forget(conn) => {
                if self.syncs.remove(&conn) {
                    let mut syncs: BpfHashMap<_, ProcessConnKey, HpackSync> = sync_map(ebpf)?;
                    // Gone already if the process exited: nothing to undo.
                    let _ = syncs.remove(&conn.map_key());
                    self.write_count(ebpf)?;
                }
            }
            HpackControl::Exited(tgid) => {
                self.set_needed(ebpf, uprobes, tgid, false)?;
                self.process_file.remove(&tgid);
                // Its sockets closed with it, without close(2): no Forget comes.
                let gone: Vec<ConnKey> = self
                    .syncs
                    .iter()
                    .filter(|conn| conn.tgid == tgid)
                    .copied()
                    .collect();
                if !gone.is_empty() {
                    let mut syncs: BpfHashMap<_, ProcessConnKey, HpackSync> = sync_map(ebpf)?;
                    for conn in gone {
                        let _ = syncs.remove(&conn.map_key());
                        self.syncs.remove(&conn);
                    }
                    self.write_count(ebpf)?;
                }
            }
            HpackControl::FieldProbes { tgid, needed } => {
                self.set_needed(ebpf, uprobes, tgid, needed)?;
            }
        }
        Ok(())
    }

    /// Notes whether process `tgid` needs the HPACK probes, and attaches or
    /// detaches its executable's accordingly.
    fn set_needed(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        tgid: u32,
        needed: bool,
    ) -> Result<(), CaptureError> {
        let Some(executable) = self
            .process_file
            .get(&tgid)
            .and_then(|file| self.executables.get_mut(file))
        else {
            return Ok(());
        };
        executable.unreported.remove(&tgid);
        if needed {
            executable.needed_by.insert(tgid);
        } else {
            executable.needed_by.remove(&tgid);
        }
        let wanted = !executable.needed_by.is_empty() || !executable.unreported.is_empty();
        if wanted && executable.links.is_none() {
            // The process that asked is alive: its exe is the file.
            let path = PathBuf::from(format!("/proc/{tgid}/exe"));
            attach(ebpf, uprobes, executable, &path)?;
            self.reattached += 1;
            tracing::info!(path = %executable.path.display(), tgid, "HPACK probes attached again: a connection older than podtrace needs them");
        } else if let Some(links) = executable.links.take_if(|_| !wanted) {
            UprobeAttacher::detach(ebpf, links)?;
            tracing::info!(path = %executable.path.display(), "HPACK probes detached: no connection needs them");
        }
        Ok(())
    }

    /// How many executables have their HPACK probes attached now.
    pub(crate) fn attached(&self) -> usize {
        self.executables
            .values()
            .filter(|executable| executable.links.is_some())
            .count()
    }

    /// Takes the attached probes, to be closed at once at stop.
    pub(crate) fn take_links(&mut self) -> impl Iterator<Item = UprobeLinks> + '_ {
        self.executables
            .values_mut()
            .filter_map(|executable| executable.links.take())
    }

    fn write_count(&self, ebpf: &mut Ebpf) -> Result<(), CaptureError> {
        let name = MAP_HPACK_SYNC_COUNT;
        let map_error = |source| CaptureError::Map { name, source };
        let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
        let mut count: Array<_, u32> = Array::try_from(map).map_err(map_error)?;
        count.set(0, self.syncs.len() as u32, 0).map_err(map_error)
    }
}

fn sync_map(
    ebpf: &mut Ebpf,
) -> Result<BpfHashMap<&mut aya::maps::MapData, ProcessConnKey, HpackSync>, CaptureError> {
    let name = MAP_HPACK_SYNC;
    let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
    BpfHashMap::try_from(map).map_err(|source| CaptureError::Map { name, source })
}

fn set_sync(ebpf: &mut Ebpf, conn: ConnKey, done: u32) -> Result<(), CaptureError> {
    let mut syncs = sync_map(ebpf)?;
    syncs
        .insert(conn.map_key(), HpackSync { done, _pad: 0 }, 0)
        .map_err(|source| CaptureError::Map {
            name: MAP_HPACK_SYNC,
            source,
        })
}

fn attach(
    ebpf: &mut Ebpf,
    uprobes: &UprobeAttacher,
    executable: &mut Executable,
    path: &Path,
) -> Result<(), CaptureError> {
    let points: Vec<_> = executable
        .points
        .iter()
        .map(|&(offset, cookie)| (PROGRAM_GO_HPACK_FIELD, offset, cookie))
        .collect();
    executable.links = Some(uprobes.attach(ebpf, path, &points)?);
    Ok(())
}
