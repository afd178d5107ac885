//! Correlate: messages → what happened to which process, connection and
//! file, and to which Pod.
//!
//! Pure and deterministic: no kernel, no tokio. In: [`Message`]s, and the
//! passing of time ([`Correlator::tick`], [`Correlator::finish`]). Out:
//! [`Activity`]: process events with parent and lifetime, connections with
//! their peers and byte counts, WAL syncs with their durations, and spans of
//! Pod traces ([`span`]): built by [`control_spans`] from etcd writes and
//! WAL syncs, and by [`node_spans`] from CRI calls, runc and the container's
//! first process.

pub mod assembly;
pub mod awaiting;
pub mod component_spans;
pub mod conn_table;
pub mod contract;
pub mod control_spans;
pub mod node_spans;
pub mod pod;
pub mod process_table;
pub mod replication;
pub mod span;

pub use assembly::Assembly;
pub use component_spans::ComponentSpans;
pub use conn_table::{ConnActivity, ConnTable, FileSyncActivity};
pub use control_spans::ControlSpans;
pub use node_spans::NodeSpans;
pub use process_table::{ProcessActivity, ProcessEvent, ProcessTable};
pub use span::Span;

use tracer_common::config::ETCD_EXECUTABLE;

use crate::{
    capture::{clock::WallClock, targets::etcd_member_name},
    decode::{Message, follow_window::FollowWindow},
    stats::Loss,
};

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    /// Names the cluster in trace ids: agents of one cluster must agree.
    pub cluster_id: String,
    /// This node's name (`k8s.node.name`).
    pub node_name: String,
    /// A Pod not reported Running this long after its create is exported
    /// as an incomplete trace.
    pub trace_timeout_ns: u64,
    /// The UID of the Pod this agent runs in, whose spans are not exported
    /// (see [`Assembly::own_pod_spans`]).
    pub own_pod_uid: Option<String>,
}

impl Default for TraceConfig {
    fn default() -> Self {
        Self {
            cluster_id: String::new(),
            node_name: String::new(),
            trace_timeout_ns: control_spans::DEFAULT_TRACE_TIMEOUT_NS,
            own_pod_uid: None,
        }
    }
}

/// How often (in event time) waiting spans and trace timeouts are checked
/// while messages flow.
const TICK_NS: u64 = 500_000_000;

/// The correlation state of one agent.
#[derive(Debug)]
pub struct Correlator {
    /// Processes.
    pub processes: ProcessTable,
    /// Connections and files.
    pub conns: ConnTable,
    /// The control-plane side of Pod traces.
    pub control_spans: ControlSpans,
    /// The node side of Pod traces.
    pub node_spans: NodeSpans,
    /// The Kubernetes components' own spans.
    pub component_spans: ComponentSpans,
    /// Every Pod span passes here last: which trace it belongs to.
    pub assembly: Assembly,
    clock: WallClock,
    /// Event time of the next [`Correlator::tick`] made by `observe`.
    next_tick_ns: u64,
}

impl Correlator {
    /// Empty tables with the default bounds, following the Pods created in
    /// `window` (the decode stage's: see [`FollowWindow`]).
    pub fn new(clock: WallClock, traces: TraceConfig, window: FollowWindow) -> Self {
        Self {
            processes: ProcessTable::new(clock, process_table::DEFAULT_PROCESS_CAPACITY),
            conns: ConnTable::new(clock, conn_table::DEFAULT_CONN_CAPACITY),
            control_spans: ControlSpans::new(clock, traces.cluster_id.clone(), window.clone()),
            component_spans: ComponentSpans::new(
                clock,
                traces.cluster_id.clone(),
                traces.node_name.clone(),
                window,
            ),
            assembly: Assembly::new(
                traces.cluster_id.clone(),
                traces.node_name.clone(),
                traces.trace_timeout_ns,
            )
            .without_pod(traces.own_pod_uid),
            node_spans: NodeSpans::new(clock, traces.cluster_id, traces.node_name),
            clock,
            next_tick_ns: 0,
        }
    }

    /// Time passed without events (live agents call this every second with
    /// the monotonic clock): spans whose wait is over, timed-out traces.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Activity> {
        let mut finished = self.node_spans.tick(now_ns);
        finished.extend(self.control_spans.tick(now_ns));
        let control = &self.control_spans;
        finished.extend(
            self.component_spans
                .tick(now_ns, &|ns, name| control.uid_of(ns, name)),
        );
        let mut activities = self.adopted(finished);
        let settled = self.assembly.tick(self.clock.unix_ns(now_ns));
        activities.extend(spans(settled));
        activities
    }

    /// No more messages: everything still waiting, unfinished traces as
    /// incomplete.
    pub fn finish(&mut self) -> Vec<Activity> {
        let control = &self.control_spans;
        let mut finished = self
            .component_spans
            .finish(&|ns, name| control.uid_of(ns, name));
        finished.extend(self.node_spans.finish());
        finished.extend(self.control_spans.finish());
        let mut activities = self.adopted(finished);
        activities.extend(spans(self.assembly.finish()));
        activities
    }

    /// Spans nested under the component call they happened in, as
    /// [`ComponentSpans::adopt`] finds it.
    fn adopted(&mut self, mut finished: Vec<Span>) -> Vec<Activity> {
        for span in &mut finished {
            self.component_spans.adopt(span);
        }
        for (uid, start_ns) in self.component_spans.take_create_requests() {
            self.control_spans.create_request_started(&uid, start_ns);
        }
        self.assembled(finished)
    }

    /// Spans through [`Assembly`]: those that go out now.
    fn assembled(&mut self, finished: Vec<Span>) -> Vec<Activity> {
        if finished.is_empty() {
            return Vec::new();
        }
        let now = finished
            .iter()
            .map(|span| span.end_unix_ns)
            .max()
            .unwrap_or(0);
        spans(self.assembly.admit(finished, now))
            .into_iter()
            .collect()
    }

    /// Takes one message; returns what to report.
    pub fn observe(&mut self, message: Message) -> Vec<Activity> {
        let mut activities = match message.ts_ns() {
            Some(ts) if ts >= self.next_tick_ns => {
                self.next_tick_ns = ts + TICK_NS;
                self.tick(ts)
            }
            _ => Vec::new(),
        };
        activities.extend(self.observe_message(message));
        activities
    }

    fn observe_message(&mut self, message: Message) -> Vec<Activity> {
        match message {
            Message::Exec(exec) => {
                // Any exec replaces what the tgid was: an etcd member by its
                // flags, anything else no member.
                let member = (exec.comm == ETCD_EXECUTABLE)
                    .then(|| etcd_member_name(&exec.argv, exec.argv_truncated))
                    .flatten();
                self.control_spans.etcd_member(exec.ids.tgid, member);
                let started = self.node_spans.on_exec(&exec);
                let started = self.assembled(started);
                let mut activities = vec![Activity::Process(
                    self.processes.observe(ProcessEvent::Exec(exec)),
                )];
                activities.extend(started);
                activities
            }
            Message::CniExec(cni) => {
                if let Some(container_id) = cni.container_id {
                    self.node_spans.on_cni_exec(cni.ids.tgid, container_id);
                }
                Vec::new()
            }
            Message::Fork(fork) => {
                self.node_spans.on_fork(&fork);
                vec![Activity::Process(
                    self.processes.observe(ProcessEvent::Fork(fork)),
                )]
            }
            Message::Exit(exit) => {
                self.control_spans.etcd_member(exit.ids.tgid, None);
                let finished = self.node_spans.on_exit(&exit);
                let finished = self.assembled(finished);
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
            Message::Fsync(sync) => {
                let durable = self.control_spans.on_fsync(&sync);
                let durable = self.assembled(durable);
                let mut activities = vec![Activity::FileSync(self.conns.on_fsync(sync))];
                activities.extend(durable);
                activities
            }
            // Spans of other HTTP/2 requests are built from these as the
            // control-plane stitching lands; alone they report nothing.
            Message::Header(_) => Vec::new(),
            Message::Cri(call) => {
                let finished = self.node_spans.on_cri(&call);
                self.adopted(finished)
            }
            Message::Etcd(call) => {
                let finished = self.control_spans.on_etcd(&call);
                self.adopted(finished)
            }
            Message::Wal(write) => {
                let finished = self.control_spans.on_wal(&write);
                self.assembled(finished)
            }
            Message::EtcdMember(member) => {
                self.control_spans
                    .etcd_member_id(member.tgid, member.member_id);
                Vec::new()
            }
            Message::Raft(message) => {
                let finished = self.control_spans.on_raft(&message);
                self.assembled(finished)
            }
            Message::Func(call) => {
                let finished = self.component_spans.on_func(*call);
                self.adopted(finished)
            }
            Message::Rest(call) => {
                let control = &self.control_spans;
                let finished = self
                    .component_spans
                    .on_rest(&call, &|ns, name| control.uid_of(ns, name));
                self.adopted(finished)
            }
        }
    }

    /// Spans exported without their Pod or not made because their Pod
    /// stayed unknown, and spans or entries dropped at a bound.
    fn span_losses(&self) -> (u64, u64) {
        (
            self.control_spans.unattributed
                + self.node_spans.unattributed
                + self.component_spans.unattributed,
            self.control_spans.dropped
                + self.control_spans.replication.dropped
                + self.component_spans.dropped,
        )
    }

    /// What this stage lost since start: spans whose Pod stayed unknown or
    /// that a bound dropped, Pods released unsettled, entries whose commit
    /// was not seen, calls seen from one end only, entries not tracked.
    pub fn losses(&self) -> Vec<Loss> {
        let (unattributed, dropped) = self.span_losses();
        vec![
            Loss::correlate("spans_unattributed", unattributed),
            Loss::correlate("spans_dropped_at_bound", dropped),
            Loss::correlate("cni_runs_ambiguous", self.node_spans.cni_ambiguous),
            Loss::correlate("pods_released_at_bound", self.assembly.released_at_bound),
            Loss::correlate(
                "raft_entries_uncommitted",
                self.control_spans.replication.uncommitted,
            ),
            Loss::correlate("image_calls_unpaired", self.node_spans.unpaired_image_calls),
            Loss::correlate("entries_not_tracked", self.full_drops()),
            Loss::correlate(
                "entries_forgotten_at_bound",
                self.node_spans.forgotten()
                    + self.control_spans.forgotten()
                    + self.assembly.forgotten(),
            ),
        ]
    }

    /// Entries not tracked because a table was full.
    pub fn full_drops(&self) -> u64 {
        self.processes.full_drops + self.conns.full_drops
    }
}

fn spans(spans: Vec<Span>) -> Option<Activity> {
    if spans.is_empty() {
        None
    } else {
        Some(Activity::Spans(spans))
    }
}
