//! The table of live processes podtrace has seen start: name, start time and
//! parent per tgid, bounded, with a count of what did not fit.

use rustc_hash::FxHashMap;

use crate::capture::{ExecRecord, ExitRecord, ForkRecord, clock::WallClock};

/// A process lifecycle event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessEvent {
    /// A process replaced its image.
    Exec(ExecRecord),
    /// A process forked.
    Fork(ForkRecord),
    /// A process exited.
    Exit(ExitRecord),
}

/// Default bound on tracked processes. Entries leave when their process exits.
pub const DEFAULT_PROCESS_CAPACITY: usize = 65_536;

#[derive(Clone, Debug)]
struct ProcessEntry {
    /// Executable file name, or comm before the first exec.
    name: String,
    /// CLOCK_MONOTONIC ns when it was forked (or first exec'd, if fork unseen).
    started_ns: u64,
}

/// One process event with what the table knows around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessActivity {
    /// The event.
    pub event: ProcessEvent,
    /// Unix time of the event in nanoseconds.
    pub time_unix_ns: u64,
    /// Name of the parent, if the table knows it.
    pub parent_name: Option<String>,
    /// For an exit: nanoseconds since the process was forked or exec'd.
    pub lifetime_ns: Option<u64>,
}

/// Live processes by tgid.
#[derive(Debug)]
pub struct ProcessTable {
    clock: WallClock,
    processes: FxHashMap<u32, ProcessEntry>,
    capacity: usize,
    /// Processes not tracked because the table was full.
    pub full_drops: u64,
}

impl ProcessTable {
    /// An empty table holding at most `capacity` processes.
    pub fn new(clock: WallClock, capacity: usize) -> Self {
        Self {
            clock,
            processes: FxHashMap::default(),
            capacity,
            full_drops: 0,
        }
    }

    /// Number of processes tracked.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// Whether no process is tracked.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// Records the name of a process that was running before podtrace
    /// started (its start time is unknown, so no lifetime is reported).
    pub fn seed(&mut self, tgid: u32, name: String) {
        self.insert(
            tgid,
            ProcessEntry {
                name,
                started_ns: u64::MAX,
            },
        );
    }

    /// The name of a tracked process.
    pub fn name_of(&self, tgid: u32) -> Option<String> {
        self.processes.get(&tgid).map(|entry| entry.name.clone())
    }

    fn insert(&mut self, tgid: u32, entry: ProcessEntry) {
        if self.processes.len() >= self.capacity && !self.processes.contains_key(&tgid) {
            self.full_drops += 1;
            return;
        }
        self.processes.insert(tgid, entry);
    }

    /// Updates the table with one message and returns it with its context.
    pub fn observe(&mut self, event: ProcessEvent) -> ProcessActivity {
        let (ts_ns, parent_name, lifetime_ns) = match &event {
            ProcessEvent::Fork(fork) => {
                let parent_name = self.name_of(fork.parent_tgid);
                let name = parent_name.clone().unwrap_or_else(|| fork.comm.clone());
                self.insert(
                    fork.ids.tgid,
                    ProcessEntry {
                        name,
                        started_ns: fork.ids.ts_ns,
                    },
                );
                (fork.ids.ts_ns, parent_name, None)
            }
            ProcessEvent::Exec(exec) => {
                let name = exec
                    .filename
                    .rsplit('/')
                    .next()
                    .unwrap_or(&exec.filename)
                    .to_owned();
                let started_ns = self
                    .processes
                    .get(&exec.ids.tgid)
                    .map_or(exec.ids.ts_ns, |entry| entry.started_ns);
                self.insert(exec.ids.tgid, ProcessEntry { name, started_ns });
                (exec.ids.ts_ns, self.name_of(exec.ppid), None)
            }
            ProcessEvent::Exit(exit) => {
                let entry = self.processes.remove(&exit.ids.tgid);
                let lifetime = entry
                    .filter(|entry| entry.started_ns != u64::MAX)
                    .map(|entry| exit.ids.ts_ns.saturating_sub(entry.started_ns));
                (exit.ids.ts_ns, None, lifetime)
            }
        };
        ProcessActivity {
            time_unix_ns: self.clock.unix_ns(ts_ns),
            event,
            parent_name,
            lifetime_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::config::TargetReason;

    use super::*;
    use crate::capture::{ExitStatus, ProcessIds};

    fn ids(ts_ns: u64, tgid: u32) -> ProcessIds {
        ProcessIds {
            ts_ns,
            tgid,
            tid: tgid,
        }
    }

    fn exec(ts_ns: u64, tgid: u32, ppid: u32, filename: &str) -> ProcessEvent {
        ProcessEvent::Exec(ExecRecord {
            ids: ids(ts_ns, tgid),
            ppid,
            cgroup_id: 1,
            target: TargetReason::Named,
            depth: 0,
            comm: filename.rsplit('/').next().unwrap().to_owned(),
            filename: filename.to_owned(),
            filename_truncated: false,
            argv: vec![],
            argv_truncated: false,
            cgroup_path: None,
        })
    }

    #[test]
    fn child_of_runc_knows_its_parent_and_lifetime() {
        let mut table = ProcessTable::new(WallClock::anchor(), 16);
        table.observe(exec(1_000, 10, 1, "/usr/sbin/runc"));
        let fork = table.observe(ProcessEvent::Fork(ForkRecord {
            ids: ids(2_000, 11),
            parent_tgid: 10,
            parent_tid: 10,
            cgroup_id: 1,
            depth: 1,
            comm: "runc".into(),
        }));
        assert_eq!(fork.parent_name.as_deref(), Some("runc"));
        let child_exec = table.observe(exec(3_000, 11, 10, "/bin/sleep"));
        assert_eq!(child_exec.parent_name.as_deref(), Some("runc"));
        let exit = table.observe(ProcessEvent::Exit(ExitRecord {
            ids: ids(1_002_000, 11),
            cgroup_id: 1,
            status: ExitStatus::Code(0),
            comm: "sleep".into(),
        }));
        // Lifetime counts from the fork, not the exec.
        assert_eq!(exit.lifetime_ns, Some(1_000_000));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn full_table_counts_what_it_does_not_track() {
        let mut table = ProcessTable::new(WallClock::anchor(), 1);
        table.observe(exec(1, 10, 1, "/a"));
        table.observe(exec(2, 11, 1, "/b"));
        assert_eq!(table.full_drops, 1);
        assert_eq!(table.len(), 1);
        // An already tracked process is still updated.
        table.observe(exec(3, 10, 1, "/c"));
        assert_eq!(table.full_drops, 1);
    }
}
