//! Correlate: messages → what happened to which process, connection and
//! file (and, as the protocol decoders arrive, to which Pod).
//!
//! Pure and deterministic: no kernel, no tokio. In: [`Message`]s. Out:
//! [`Activity`]: process events with parent and lifetime, connections with
//! their peers and byte counts, WAL syncs with their durations.

pub mod conn_table;
pub mod process_table;
pub mod span;

pub use conn_table::{ConnActivity, ConnTable, FileSyncActivity};
pub use process_table::{ProcessActivity, ProcessEvent, ProcessTable};

use crate::{capture::clock::WallClock, decode::Message};

/// Something worth reporting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activity {
    /// A process event.
    Process(ProcessActivity),
    /// A connection opened, was found open, or closed.
    Conn(ConnActivity),
    /// A followed file was synced.
    FileSync(FileSyncActivity),
}

/// The correlation state of one agent.
#[derive(Debug)]
pub struct Correlator {
    /// Processes.
    pub processes: ProcessTable,
    /// Connections and files.
    pub conns: ConnTable,
}

impl Correlator {
    /// Empty tables with the default bounds.
    pub fn new(clock: WallClock) -> Self {
        Self {
            processes: ProcessTable::new(clock, process_table::DEFAULT_PROCESS_CAPACITY),
            conns: ConnTable::new(clock, conn_table::DEFAULT_CONN_CAPACITY),
        }
    }

    /// Takes one message; returns what to report, if anything.
    pub fn observe(&mut self, message: Message) -> Option<Activity> {
        match message {
            Message::Exec(exec) => Some(Activity::Process(
                self.processes.observe(ProcessEvent::Exec(exec)),
            )),
            Message::Fork(fork) => Some(Activity::Process(
                self.processes.observe(ProcessEvent::Fork(fork)),
            )),
            Message::Exit(exit) => Some(Activity::Process(
                self.processes.observe(ProcessEvent::Exit(exit)),
            )),
            Message::Conn(conn) => Some(Activity::Conn(self.conns.on_conn(conn))),
            Message::FileOpen(open) => {
                self.conns.on_file_open(open);
                None
            }
            Message::Data(data) => {
                self.conns.on_data(&data);
                None
            }
            Message::Fsync(sync) => Some(Activity::FileSync(self.conns.on_fsync(sync))),
            // Spans of HTTP/2 requests are built from these as the protocol
            // stitching lands; alone they report nothing.
            Message::Header(_) => None,
        }
    }

    /// Entries not tracked because a table was full.
    pub fn full_drops(&self) -> u64 {
        self.processes.full_drops + self.conns.full_drops
    }
}
