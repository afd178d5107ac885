//! Uprobes attached to an executable only while one of its processes needs
//! them: the HPACK probes (header fields, until a connection's tables are
//! copied) and the per-call TLS probes (plaintext, until a connection's TLS
//! 1.3 secrets are read). Each hit costs the traced thread a trap whatever
//! it carries, so a probe nobody needs is detached, and attached again when
//! the decode stage says a process needs it once more.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
};

use aya::Ebpf;

use super::{
    CaptureError,
    uprobe_links::{UprobeAttacher, UprobeLinks},
};

/// An executable file: (device, inode).
pub(crate) type FileId = (u64, u64);

/// The probe points of one executable.
#[derive(Debug)]
struct Executable {
    /// Where it was first found (attaching again goes through a process
    /// of it that is alive: the path may have been replaced since).
    path: PathBuf,
    /// (program, file offset, attach cookie) of each probe point.
    points: Vec<(&'static str, u64, u64)>,
    /// The attached probes; none while detached.
    links: Option<UprobeLinks>,
    /// Processes of it that said they need the probes.
    needed_by: HashSet<u32>,
    /// Processes of it running when it was first attached that have not
    /// said yet: they may hold connections older than podtrace.
    unreported: HashSet<u32>,
}

/// One family of on-demand probes over every executable that has them.
#[derive(Debug)]
pub(crate) struct OnDemandProbes {
    /// What they are, for the logs ("HPACK probes").
    what: &'static str,
    executables: HashMap<FileId, Executable>,
    process_file: HashMap<u32, FileId>,
    /// Times the probes of an executable were attached again.
    pub(crate) reattached: u64,
}

impl OnDemandProbes {
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            executables: HashMap::new(),
            process_file: HashMap::new(),
            reattached: 0,
        }
    }

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
        points: Vec<(&'static str, u64, u64)>,
        tgids: &[u32],
    ) -> Result<(), CaptureError> {
        if points.is_empty() {
            return Ok(());
        }
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

    /// The processes of the executable process `tgid` runs, and whether its
    /// probes are attached now.
    pub(crate) fn processes_of(&self, tgid: u32) -> (Vec<u32>, bool) {
        let Some(file) = self.process_file.get(&tgid) else {
            return (Vec::new(), false);
        };
        let processes = self
            .process_file
            .iter()
            .filter(|(_, of)| *of == file)
            .map(|(tgid, _)| *tgid)
            .collect();
        let attached = self
            .executables
            .get(file)
            .is_some_and(|executable| executable.links.is_some());
        (processes, attached)
    }

    /// Notes whether process `tgid` needs the probes, and attaches or
    /// detaches its executable's accordingly; returns whether that changed.
    pub(crate) fn set_needed(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        tgid: u32,
        needed: bool,
    ) -> Result<bool, CaptureError> {
        let what = self.what;
        let Some(executable) = self
            .process_file
            .get(&tgid)
            .and_then(|file| self.executables.get_mut(file))
        else {
            return Ok(false);
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
            tracing::info!(path = %executable.path.display(), tgid, "{what} attached again: a connection needs them");
            return Ok(true);
        }
        if let Some(links) = executable.links.take_if(|_| !wanted) {
            UprobeAttacher::detach(ebpf, links)?;
            tracing::info!(path = %executable.path.display(), "{what} detached: no connection needs them");
            return Ok(true);
        }
        Ok(false)
    }

    /// Process `tgid` ended: it needs nothing any more.
    pub(crate) fn exited(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        tgid: u32,
    ) -> Result<(), CaptureError> {
        self.set_needed(ebpf, uprobes, tgid, false)?;
        self.process_file.remove(&tgid);
        Ok(())
    }

    /// How many executables have these probes attached now.
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
}

fn attach(
    ebpf: &mut Ebpf,
    uprobes: &UprobeAttacher,
    executable: &mut Executable,
    path: &Path,
) -> Result<(), CaptureError> {
    executable.links = Some(uprobes.attach(ebpf, path, &executable.points)?);
    Ok(())
}
