//! Correlate: messages → what happened to which process, connection and
//! file (and, as the protocol decoders arrive, to which Pod).
//!
//! Pure and deterministic: no kernel, no tokio. In: [`Message`]s. Out:
//! [`Activity`]: process events with parent and lifetime, connections with
//! their peers and byte counts, WAL syncs with their durations, and spans of
//! Pod traces ([`span`], built by [`node_spans`] from CRI calls and runc).

pub mod conn_table;
pub mod node_spans;
pub mod process_table;
pub mod span;

pub use conn_table::{ConnActivity, ConnTable, FileSyncActivity};
pub use node_spans::NodeSpans;
pub use process_table::{ProcessActivity, ProcessEvent, ProcessTable};
pub use span::Span;

use crate::{capture::clock::WallClock, decode::Message};

/// Something worth reporting.
#[derive(Clone, Debug, PartialEq)]
pub enum Activity {
    /// A process event.
    Process(ProcessActivity),
    /// A connection opened, was found open, or closed.
    Conn(ConnActivity),
    /// A followed file was synced.
    FileSync(FileSyncActivity),
    /// Finished spans of Pod traces.
    Spans(Vec<Span>),
}

/// Which traces this agent contributes to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceConfig {
    /// Names the cluster in trace ids: agents of one cluster must agree.
    pub cluster_id: String,
    /// This node's name (`k8s.node.name`).
    pub node_name: String,
}

/// The correlation state of one agent.
#[derive(Debug)]
pub struct Correlator {
    /// Processes.
    pub processes: ProcessTable,
    /// Connections and files.
    pub conns: ConnTable,
    /// The node side of Pod traces.
    pub node_spans: NodeSpans,
}

impl Correlator {
    /// Empty tables with the default bounds.
    pub fn new(clock: WallClock, traces: TraceConfig) -> Self {
        Self {
            processes: ProcessTable::new(clock, process_table::DEFAULT_PROCESS_CAPACITY),
            conns: ConnTable::new(clock, conn_table::DEFAULT_CONN_CAPACITY),
            node_spans: NodeSpans::new(clock, traces.cluster_id, traces.node_name),
        }
    }

    /// Takes one message; returns what to report.
    pub fn observe(&mut self, message: Message) -> Vec<Activity> {
        let spans = |spans: Vec<Span>| {
            if spans.is_empty() {
                None
            } else {
                Some(Activity::Spans(spans))
            }
        };
        match message {
            Message::Exec(exec) => {
                self.node_spans.on_exec(&exec);
                vec![Activity::Process(
                    self.processes.observe(ProcessEvent::Exec(exec)),
                )]
            }
            Message::Fork(fork) => vec![Activity::Process(
                self.processes.observe(ProcessEvent::Fork(fork)),
            )],
            Message::Exit(exit) => {
                let finished = spans(self.node_spans.on_exit(&exit));
                let mut activities = vec![Activity::Process(
                    self.processes.observe(ProcessEvent::Exit(exit)),
                )];
                activities.extend(finished);
                activities
            }
            Message::Conn(conn) => vec![Activity::Conn(self.conns.on_conn(conn))],
            Message::FileOpen(open) => {
                self.conns.on_file_open(open);
                Vec::new()
            }
            Message::Data(data) => {
                self.conns.on_data(&data);
                Vec::new()
            }
            Message::Fsync(sync) => vec![Activity::FileSync(self.conns.on_fsync(sync))],
            // Spans of other HTTP/2 requests are built from these as the
            // control-plane stitching lands; alone they report nothing.
            Message::Header(_) => Vec::new(),
            Message::Cri(call) => spans(self.node_spans.on_cri(&call)).into_iter().collect(),
        }
    }

    /// Entries not tracked because a table was full.
    pub fn full_drops(&self) -> u64 {
        self.processes.full_drops + self.conns.full_drops
    }
}
