//! Decode: captured records → typed messages that say what a component did.
//!
//! Pure and deterministic: no kernel, no tokio. In: [`RawEvent`]s. Out:
//! [`Message`]s: process events (argv with secrets redacted), connection and
//! file events, HTTP/2 header fields tied to their connection ([`headers`]),
//! finished CRI calls and etcd writes ([`grpc_calls`]), the Raft entries
//! of WAL writes ([`wal_writes`]) and of etcd members' messages
//! ([`raft_peers`]), decoded with `tracer-decode`, and what
//! Kubernetes components' probed functions did ([`functions`]).

pub mod decoded_once;
pub mod follow_window;
pub mod functions;
pub mod grpc_calls;
pub mod headers;
pub mod process;
pub mod raft_peers;
pub mod table_copies;
pub mod tls_streams;
pub mod wal_writes;

pub use decoded_once::DecodedOnce;
pub use follow_window::FollowWindow;
pub use functions::FuncMessage;
pub use grpc_calls::{CriMessage, EtcdMessage, GrpcDecoder, MUTE_AFTER_REQUESTS, RestMessage};
pub use headers::{HeaderAttributor, HeaderMessage};
pub use raft_peers::RaftPeerMessage;
pub use table_copies::{TableAssembler, TableCopyMessage};
pub use tls_streams::TlsStreams;
pub use wal_writes::{WalDecoder, WalMessage};

use tracer_common::io::{ConnAction, Direction, FdKind};

use crate::{
    capture::{
        CaptureControl, CniExecRecord, ConnKey, ConnRecord, DataRecord, ExecRecord, ExitRecord,
        FileOpenRecord, ForkRecord, FsyncRecord, RawEvent,
    },
    stats::Loss,
};

/// What a component did, as far as one record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A process replaced its image; argv is redacted.
    Exec(ExecRecord),
    /// The sandbox a CNI plugin that just began works for.
    CniExec(CniExecRecord),
    /// A process forked.
    Fork(ForkRecord),
    /// A process exited.
    Exit(ExitRecord),
    /// Bytes through a followed socket or file (decoded here: see [`DataMoved`]).
    Data(DataMoved),
    /// A socket connected, accepted or closed.
    Conn(ConnRecord),
    /// A followed file was synced.
    Fsync(FsyncRecord),
    /// A followed file was opened.
    FileOpen(FileOpenRecord),
    /// An HTTP/2 header field on a connection.
    Header(HeaderMessage),
    /// A finished CRI call.
    Cri(CriMessage),
    /// A finished etcd write about a Pod.
    Etcd(EtcdMessage),
    /// A finished REST request writing a Pod.
    Rest(Box<RestMessage>),
    /// A write to an etcd WAL segment.
    Wal(WalMessage),
    /// An etcd process's member id, the first time its WAL named it.
    EtcdMember(EtcdMemberId),
    /// A Raft message between etcd members that matters to a Pod's trace.
    Raft(RaftPeerMessage),
    /// A Kubernetes component entered or left a probed function.
    Func(Box<FuncMessage>),
}

impl Message {
    /// When it happened (CLOCK_MONOTONIC ns), for messages that say.
    pub fn ts_ns(&self) -> Option<u64> {
        match self {
            Self::Exec(exec) => Some(exec.ids.ts_ns),
            Self::CniExec(cni) => Some(cni.ids.ts_ns),
            Self::Fork(fork) => Some(fork.ids.ts_ns),
            Self::Exit(exit) => Some(exit.ids.ts_ns),
            Self::Data(moved) => Some(moved.ts_ns),
            Self::Conn(conn) => Some(conn.ids.ts_ns),
            Self::Fsync(sync) => Some(sync.ids.ts_ns),
            Self::FileOpen(open) => Some(open.ids.ts_ns),
            Self::Wal(write) => Some(write.start_ts_ns),
            Self::EtcdMember(member) => Some(member.ts_ns),
            Self::Raft(message) => Some(message.ts_ns),
            Self::Cri(call) => call.end_ts_ns,
            Self::Etcd(call) => call.end_ts_ns,
            Self::Rest(call) => call.end_ts_ns,
            Self::Func(call) => Some(call.ids.ts_ns),
            Self::Header(_) => None,
        }
    }
}

/// Which etcd member a process is, as its WAL's head said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdMemberId {
    /// The process.
    pub tgid: u32,
    /// Its Raft member id.
    pub member_id: u64,
    /// When it was learnt (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
}

/// That bytes moved through a followed socket or file: what the correlate
/// stage counts of a data record. The bytes stay in this stage, which
/// decodes them, and are freed where they were allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataMoved {
    /// Which connection or file.
    pub conn: ConnKey,
    /// Which way.
    pub direction: Direction,
    /// Bytes the syscall (or TLS call) moved.
    pub len: u64,
    /// When it returned (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
}

impl DataMoved {
    fn of(data: &DataRecord) -> Self {
        Self {
            conn: data.conn,
            direction: data.direction,
            len: data.len,
            ts_ns: data.ids.ts_ns,
        }
    }
}

/// Choices of the decode stage.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions {
    /// Finished etcd KV requests of one resource other than Pods after which
    /// a connection is muted (0: never), see [`MUTE_AFTER_REQUESTS`].
    pub mute_after: u32,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            mute_after: MUTE_AFTER_REQUESTS,
        }
    }
}

/// The decode stage's state: what ties events to one another.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Attribution of HPACK header fields to connections.
    pub headers: HeaderAttributor,
    /// HTTP/2 and gRPC decoding of connections seen from their start.
    pub grpc: GrpcDecoder,
    /// Raft entries in etcd WAL writes.
    pub wal: WalDecoder,
    /// Copies of Go HPACK tables being put together.
    pub tables: TableAssembler,
    /// Pods and etcd requests decoded, for their next sightings.
    pub once: DecodedOnce,
    /// TLS 1.3 ciphertext decrypted with the secrets capture read.
    pub tls: TlsStreams,
    /// First hits of function probes with derived offsets.
    pub probation: functions::Probation,
    /// Function probes to stop ([`CaptureControl::DisableFunction`]).
    control: Vec<CaptureControl>,
}

impl Decoder {
    /// A decoder that makes `options`' choices and does not decode writes
    /// of Pods whose creation `window` does not follow.
    pub fn new(options: &DecodeOptions, window: FollowWindow) -> Self {
        let mut decoder = Self::default();
        decoder.grpc.mute_after = options.mute_after;
        decoder.once.window = Some(window);
        decoder
    }

    /// What capture is asked to do since the last call (see [`CaptureControl`]).
    pub fn take_control(&mut self) -> Vec<CaptureControl> {
        let mut control = std::mem::take(&mut self.control);
        control.append(&mut self.grpc.control);
        control.append(&mut self.tls.control);
        control
    }

    /// What this stage lost since start: connections, files and members
    /// not decoded for want of room, table copies refused, TLS records no
    /// secret opened, Raft frames and WAL records that did not decode.
    pub fn losses(&self) -> Vec<Loss> {
        let tls = &self.tls;
        let peers = &self.grpc.peers;
        vec![
            Loss::decode("connections_not_decoded", self.grpc.skipped_connections),
            Loss::decode("wal_files_not_decoded", self.wal.skipped_files),
            Loss::decode("etcd_members_not_decoded", self.wal.skipped_members),
            Loss::decode("hpack_table_copies_refused", self.grpc.tables_refused),
            Loss::decode("hpack_table_copies_incomplete", self.tables.incomplete),
            Loss::decode("tls_records_undecryptable", tls.stats().undecryptable),
            Loss::decode("tls_secrets_refused", tls.keys_refused),
            Loss::decode("tls_directions_skipped", tls.skipped),
            Loss::decode("tls_handshakes_too_long", tls.held_too_long),
            Loss::decode("tls_readers_adrift", tls.readers_adrift),
            Loss::decode("raft_appends_unnamed", peers.unnamed),
            Loss::decode("raft_frames_undecoded", peers.errors),
            Loss::decode("raft_hosts_not_kept", peers.hosts_dropped),
            Loss::decode("wal_records_undecoded", self.wal.bad_records),
        ]
    }

    /// Time passed with nothing to decode (a live agent's timer, at
    /// CLOCK_MONOTONIC `now_ns`): what depends on quiet is decided.
    pub fn tick(&mut self, now_ns: u64) {
        self.tls.check_idle(now_ns);
        self.grpc.check_field_probes(now_ns);
    }

    /// Decodes one captured event into the messages it yields (header fields
    /// an egress write releases come before the write itself).
    pub fn decode(&mut self, event: RawEvent) -> Vec<Message> {
        if let Some(window) = &mut self.once.window {
            window.start_by(event.ids().ts_ns);
        }
        match event {
            RawEvent::Exec(mut exec) => {
                self.wal.on_process_gone(exec.ids.tgid);
                self.grpc.peers.members.remove(&exec.ids.tgid);
                self.tls.on_process_gone(exec.ids.tgid);
                process::redact_argv(&mut exec.argv);
                vec![Message::Exec(exec)]
            }
            RawEvent::CniExec(cni) => vec![Message::CniExec(cni)],
            RawEvent::Fork(fork) => vec![Message::Fork(fork)],
            RawEvent::Exit(exit) => {
                self.grpc.on_exit(exit.ids.tgid);
                self.probation.on_exit(exit.ids.tgid);
                self.wal.on_process_gone(exit.ids.tgid);
                self.grpc.peers.members.remove(&exit.ids.tgid);
                self.tls.on_process_gone(exit.ids.tgid);
                vec![Message::Exit(exit)]
            }
            RawEvent::Data(data) => {
                let ts_ns = data.ids.ts_ns;
                let decrypted = self.tls.decrypt(data);
                for conn in std::mem::take(&mut self.tls.missed) {
                    self.grpc.on_secrets_missed(conn, ts_ns);
                }
                match decrypted {
                    Ok(plaintext) => plaintext
                        .iter()
                        .flat_map(|data| self.decode_data(data))
                        .collect(),
                    Err(data) => self.decode_data(&data),
                }
            }
            RawEvent::TlsKey(key) => self
                .tls
                .on_key(&key)
                .iter()
                .flat_map(|data| self.decode_data(data))
                .collect(),
            RawEvent::Conn(conn) => {
                if conn.fd_kind == FdKind::Socket {
                    if conn.change.before_start() {
                        self.tls.on_open_at_start(conn.conn, conn.ids.ts_ns);
                    } else if conn.change == ConnAction::Connected {
                        self.tls.on_connected(conn.conn);
                    }
                }
                if conn.change == ConnAction::Closed {
                    match conn.fd_kind {
                        FdKind::WalFile => self.wal.on_close(&conn.conn),
                        FdKind::Socket => {
                            self.tls.on_closed(&conn.conn);
                            self.headers.on_closed(&conn.conn);
                        }
                    }
                }
                let mut messages = self.grpc.on_conn(&conn, &mut self.once);
                messages.push(Message::Conn(conn));
                messages
            }
            RawEvent::Fsync(fsync) => vec![Message::Fsync(fsync)],
            RawEvent::FileOpen(open) => vec![Message::FileOpen(open)],
            RawEvent::WalHead(head) => {
                self.wal.on_head(&head);
                self.learn_member(head.conn.tgid, head.ids.ts_ns)
                    .into_iter()
                    .collect()
            }
            RawEvent::GoFunc(call) => {
                let derived = call.derived;
                let message = functions::decode(call);
                if derived {
                    match self.probation.check(&message) {
                        Ok(true) => {}
                        Ok(false) => return Vec::new(),
                        Err(disabled) => {
                            tracing::warn!(
                                tgid = disabled.tgid,
                                function = ?disabled.function,
                                why = disabled.why,
                                "Kubernetes function probe stopped: its offsets were derived from the binary (a release outside the table) and a hit did not read as expected; its spans will be missing"
                            );
                            self.control.push(CaptureControl::DisableFunction {
                                tgid: disabled.tgid,
                                function: disabled.function,
                            });
                            return Vec::new();
                        }
                    }
                }
                vec![Message::Func(Box::new(message))]
            }
            RawEvent::HpackEntry(entry) => {
                self.tables.on_entry(entry);
                Vec::new()
            }
            RawEvent::HpackTable(table) => {
                self.grpc.on_table(self.tables.on_table(&table));
                Vec::new()
            }
            RawEvent::Header(header) => {
                self.grpc.on_field_from(header.ids.tgid, header.ids.ts_ns);
                match self.headers.on_header(header) {
                    Some(header) => {
                        self.grpc.on_header(&header);
                        vec![Message::Header(header)]
                    }
                    None => Vec::new(),
                }
            }
        }
    }

    /// Which member process `tgid` is, once its WAL said: its peer streams
    /// older than podtrace are named from it, and correlation names its
    /// spans (a leader's replication can end before its own WAL write).
    fn learn_member(&mut self, tgid: u32, ts_ns: u64) -> Option<Message> {
        let member_id = self.wal.member_id(tgid)?;
        let known = self.grpc.peers.members.insert(tgid, member_id);
        (known != Some(member_id)).then_some(Message::EtcdMember(EtcdMemberId {
            tgid,
            member_id,
            ts_ns,
        }))
    }

    /// The messages of bytes through a socket or file (plaintext, for TLS).
    fn decode_data(&mut self, data: &DataRecord) -> Vec<Message> {
        let headers = self.headers.on_data(data);
        for header in &headers {
            self.grpc.on_header(header);
        }
        let mut messages: Vec<Message> = headers.into_iter().map(Message::Header).collect();
        messages.extend(self.grpc.on_data(data, &mut self.once));
        for traffic in self.grpc.peers.traffic.drain(..) {
            self.wal.on_peer_traffic(traffic);
        }
        if let Some(write) = self.wal.on_data(data, &mut self.once) {
            messages.extend(self.learn_member(data.conn.tgid, data.ids.ts_ns));
            messages.push(Message::Wal(write));
        }
        messages.push(Message::Data(DataMoved::of(data)));
        messages
    }
}
