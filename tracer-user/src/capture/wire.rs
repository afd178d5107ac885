//! Ring buffer records → [`RawEvent`].
//!
//! The one place where bytes from the kernel are reinterpreted as
//! `tracer_common::event` structs ([`read_record`]). Everything is checked:
//! record length, kind, enum values, and the lengths of variable fields, so a
//! malformed record becomes a [`WireError`], never a panic or an out-of-bounds
//! read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tracer_common::{
    config::{COMM_BYTES, TargetReason},
    event::{
        ARGS_BYTES, CNI_CONTAINER_ID_BYTES, CniExecEvent, EXEC_ARGS_TRUNCATED,
        EXEC_FILENAME_TRUNCATED, EventHeader, EventKind, ExecEvent, ExitEvent, FILENAME_BYTES,
        ForkEvent,
    },
    gofunc::{
        GO_FUNC_DERIVED, GO_FUNC_STRINGS, GO_FUNC_WORDS, GO_STRING_TRUNCATED, GO_STRING_UNREADABLE,
        GoFuncEvent, GoFunction,
    },
    io::{
        AF_INET, AF_INET6, AF_UNIX, ConnAction, ConnEvent, DATA_BYTES_MAX, DATA_GO_TLS,
        DATA_TRUNCATED, DataEvent, Direction, FdKind, FileOpenEvent, FsyncEvent,
        HEADER_VALUE_REDACTED, HEADER_VALUE_TRUNCATED, HPACK_ENTRY_WITHHELD, HeaderEvent,
        HeaderSide, HpackEntryEvent, HpackTableEvent, IoSyscall, MAX_HPACK_TABLE_ENTRIES,
        TlsKeyEvent, UNIX_PATH_BYTES, WAL_HEAD_BYTES, WalHeadEvent,
    },
};

/// Identity and time of the process an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessIds {
    /// CLOCK_MONOTONIC nanoseconds when the kernel saw the event.
    pub ts_ns: u64,
    /// Process id.
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
}

/// A target process replaced its image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRecord {
    /// The process.
    pub ids: ProcessIds,
    /// Parent process id.
    pub ppid: u32,
    /// cgroup v2 id.
    pub cgroup_id: u64,
    /// Why the process is followed.
    pub target: TargetReason,
    /// Generations below the nearest named ancestor.
    pub depth: u8,
    /// comm after exec.
    pub comm: String,
    /// Path given to execve (lossy UTF-8).
    pub filename: String,
    /// The filename was cut by the kernel side's bound.
    pub filename_truncated: bool,
    /// argv strings (lossy UTF-8), possibly only the first ones.
    pub argv: Vec<String>,
    /// argv was cut by the kernel side's bound; the last string may be partial.
    pub argv_truncated: bool,
    /// The process's cgroup path (it names the Pod UID and container id),
    /// read from /proc by the live reader when the exec arrives; `None` if
    /// the process was already gone, and in replays.
    pub cgroup_path: Option<String>,
}

/// A target process forked a new process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRecord {
    /// The child.
    pub ids: ProcessIds,
    /// The parent's process id.
    pub parent_tgid: u32,
    /// The parent's thread that forked.
    pub parent_tid: u32,
    /// cgroup v2 id.
    pub cgroup_id: u64,
    /// Depth the child is followed at.
    pub depth: u8,
    /// comm the child inherited.
    pub comm: String,
}

/// A target process exited (its last thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitRecord {
    /// The process.
    pub ids: ProcessIds,
    /// cgroup v2 id.
    pub cgroup_id: u64,
    /// wait(2)-style status.
    pub status: ExitStatus,
    /// comm at exit.
    pub comm: String,
}

/// How a process ended, decoded from the kernel's wait(2) status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// exit(code).
    Code(u8),
    /// Killed by this signal.
    Signal(u8),
}

impl ExitStatus {
    /// Decodes `task_struct.exit_code`: `code << 8` for exit, the signal
    /// number (plus 0x80 for a core dump) when killed.
    pub fn from_wait_status(raw: u32) -> ExitStatus {
        let signal = (raw & 0x7f) as u8;
        if signal == 0 {
            ExitStatus::Code(((raw >> 8) & 0xff) as u8)
        } else {
            ExitStatus::Signal(signal)
        }
    }

    /// Whether the process ended with exit code 0.
    pub fn is_success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

/// Which socket or file of which process: stable across fd reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    /// Process id.
    pub tgid: u32,
    /// Identity of the connection or file (see `tracer_common::io::FdInfo`).
    pub conn_id: u64,
}

impl ConnKey {
    /// The same connection as the kernel's maps key it (`HPACK_SYNC`,
    /// `MUTED_CONNS`).
    pub(crate) fn map_key(self) -> tracer_common::io::ProcessConnKey {
        tracer_common::io::ProcessConnKey {
            tgid: self.tgid,
            _pad: 0,
            conn_id: self.conn_id,
        }
    }
}

/// Bytes a target moved through a followed socket or file.
#[derive(Clone, PartialEq, Eq)]
pub struct DataRecord {
    /// The thread and the syscall's exit time.
    pub ids: ProcessIds,
    /// Which connection or file.
    pub conn: ConnKey,
    /// File descriptor.
    pub fd: u32,
    /// The syscall.
    pub syscall: IoSyscall,
    /// Which way the bytes moved.
    pub direction: Direction,
    /// Socket or WAL file.
    pub fd_kind: FdKind,
    /// Bytes the syscall moved.
    pub len: u64,
    /// CLOCK_MONOTONIC ns when the syscall was entered.
    pub enter_ts_ns: u64,
    /// The first bytes (all of them unless `truncated`).
    pub data: Vec<u8>,
    /// `data` is shorter than `len`.
    pub truncated: bool,
    /// Plaintext from Go's crypto/tls probes (the socket's bytes are TLS).
    pub tls_plaintext: bool,
}

impl DataRecord {
    /// When the bytes passed between the two ends: a write's entry (the
    /// reader, on another CPU, can return before the writer's syscall does,
    /// and a server span must not start before its client's), a read's exit
    /// (a read blocks until bytes come). Records without an entry time fall
    /// back to the exit.
    pub fn moved_ts_ns(&self) -> u64 {
        match self.direction {
            Direction::Egress if self.enter_ts_ns != 0 && self.enter_ts_ns <= self.ids.ts_ns => {
                self.enter_ts_ns
            }
            _ => self.ids.ts_ns,
        }
    }
}

impl std::fmt::Debug for DataRecord {
    // Payloads may hold secrets: Debug shows their size, never their bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataRecord")
            .field("ids", &self.ids)
            .field("conn", &self.conn)
            .field("fd", &self.fd)
            .field("syscall", &self.syscall)
            .field("direction", &self.direction)
            .field("fd_kind", &self.fd_kind)
            .field("len", &self.len)
            .field("captured", &self.data.len())
            .field("truncated", &self.truncated)
            .field("tls_plaintext", &self.tls_plaintext)
            .finish()
    }
}

/// The far end of a socket, as connect or accept saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A TCP address.
    Tcp(std::net::SocketAddr),
    /// A unix socket path (abstract names start with `@`).
    Unix(String),
    /// Not reported (accept without an address buffer, or a close).
    Unknown,
}

/// A followed socket was connected, accepted or closed (or a file closed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnRecord {
    /// The thread and time.
    pub ids: ProcessIds,
    /// Which connection or file.
    pub conn: ConnKey,
    /// File descriptor.
    pub fd: u32,
    /// What happened.
    pub change: ConnAction,
    /// Socket or WAL file.
    pub fd_kind: FdKind,
    /// The syscall's result.
    pub ret: i64,
    /// The other end.
    pub peer: Peer,
    /// The local port of a TCP socket found open at start (else `None`).
    pub local_port: Option<u16>,
}

/// fsync/fdatasync of a followed file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsyncRecord {
    /// The thread and the syscall's exit time.
    pub ids: ProcessIds,
    /// Which file.
    pub conn: ConnKey,
    /// File descriptor.
    pub fd: u32,
    /// fsync or fdatasync.
    pub syscall: IoSyscall,
    /// How long it took.
    pub duration_ns: u64,
    /// The syscall's result.
    pub ret: i64,
}

/// A target opened a file podtrace follows (an etcd WAL segment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileOpenRecord {
    /// The thread and time.
    pub ids: ProcessIds,
    /// Which file.
    pub conn: ConnKey,
    /// File descriptor.
    pub fd: u32,
    /// What it is.
    pub fd_kind: FdKind,
    /// Path as given to openat.
    pub path: String,
}

/// An HTTP/2 header field Go's HPACK code encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderRecord {
    /// The thread that encoded or decoded it (user space ties it to the
    /// connection that thread reads from or writes to next).
    pub ids: ProcessIds,
    /// Sent or received.
    pub side: HeaderSide,
    /// Field name.
    pub name: String,
    /// Field value (empty when redacted).
    pub value: String,
    /// HPACK marked it sensitive; its value was not captured.
    pub redacted: bool,
    /// The value was cut.
    pub truncated: bool,
    /// Which HPACK coder (so which connection and direction) it came
    /// from; 0 when not known (`HeaderEvent::coder_tag`).
    pub coder_tag: u16,
}

/// One entry of a copy of a connection's Go HPACK table (oldest first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpackEntryRecord {
    /// The process and the thread that copied it.
    pub ids: ProcessIds,
    /// The connection.
    pub conn: ConnKey,
    /// The process's decoder (what it receives) or encoder (what it sends).
    pub side: HeaderSide,
    /// Position, 0 = oldest.
    pub index: u32,
    /// RFC 7541 size of the entry (real name and value lengths plus 32).
    pub size: u32,
    /// Name and value, when podtrace keeps that name; `None`: only the
    /// size was sent (a credential, an application header, a long value).
    pub field: Option<(Vec<u8>, Vec<u8>)>,
}

/// The end of a copy of a connection's Go HPACK table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpackTableRecord {
    /// The process and the thread that copied it.
    pub ids: ProcessIds,
    /// The connection.
    pub conn: ConnKey,
    /// The process's decoder or encoder.
    pub side: HeaderSide,
    /// Entries the table had; `None` when the kernel could not copy them
    /// all (more than it copies, or a lost entry).
    pub count: Option<u32>,
    /// Sum of the entries' sizes.
    pub size: u32,
    /// The table's size limit.
    pub max_size: u32,
}

/// The first bytes of a WAL segment, read from the file by capture (see
/// [`WalHeadEvent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalHeadRecord {
    /// The member's process, and when the bytes were read.
    pub ids: ProcessIds,
    /// The segment (as the file's connection key).
    pub conn: ConnKey,
    /// The bytes.
    pub head: Vec<u8>,
}

/// The TLS 1.3 traffic secret of one direction of a socket (see
/// [`TlsKeyEvent`]): the ciphertext of that direction captured after this
/// record is to be decrypted with it.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsKeyRecord {
    /// The thread of the probe hit, and when.
    pub ids: ProcessIds,
    /// The socket.
    pub conn: ConnKey,
    /// File descriptor.
    pub fd: u32,
    /// Which way the secret seals, seen from the process.
    pub direction: Direction,
    /// The first record number of the ciphertext after this record: exact
    /// for [`Direction::Ingress`], a lower bound for [`Direction::Egress`].
    pub seq: u64,
    /// The cipher suite's IANA id.
    pub suite: u16,
    /// The secret.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for TlsKeyRecord {
    // A key: Debug never shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsKeyRecord")
            .field("ids", &self.ids)
            .field("conn", &self.conn)
            .field("fd", &self.fd)
            .field("direction", &self.direction)
            .field("seq", &self.seq)
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

/// A hit of a function probe on a Kubernetes component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFuncRecord {
    /// The thread and time.
    pub ids: ProcessIds,
    /// Which function.
    pub function: GoFunction,
    /// At a RET (results in `words`) or at the entry (arguments).
    pub at_return: bool,
    /// The goroutine.
    pub goid: u64,
    /// The goroutine that created it (0: unknown).
    pub parent_goid: u64,
    /// The integer ABI words.
    pub words: [u64; GO_FUNC_WORDS],
    /// The strings the attachment asked for; `None` when there was none or
    /// it could not be read (a nil pointer on the way).
    pub strings: [Option<String>; GO_FUNC_STRINGS],
    /// Whether each string was cut.
    pub truncated: [bool; GO_FUNC_STRINGS],
    /// The attachment's Kubernetes offsets were derived from the binary
    /// (`GO_FUNC_DERIVED`), not taken from the table.
    pub derived: bool,
}

/// A followed process began with `CNI_CONTAINERID` in its environment (a
/// CNI plugin, told the sandbox it works for): sent after its [`ExecRecord`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniExecRecord {
    /// The process.
    pub ids: ProcessIds,
    /// The sandbox's id; `None` when the value was cut or is not one (the
    /// CNI specification's `[a-zA-Z0-9][a-zA-Z0-9_.-]*`).
    pub container_id: Option<String>,
}

/// One event from the kernel, owned and validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawEvent {
    /// See [`ExecRecord`].
    Exec(ExecRecord),
    /// See [`ForkRecord`].
    Fork(ForkRecord),
    /// See [`ExitRecord`].
    Exit(ExitRecord),
    /// See [`DataRecord`].
    Data(DataRecord),
    /// See [`ConnRecord`].
    Conn(ConnRecord),
    /// See [`FsyncRecord`].
    Fsync(FsyncRecord),
    /// See [`FileOpenRecord`].
    FileOpen(FileOpenRecord),
    /// See [`HeaderRecord`].
    Header(HeaderRecord),
    /// See [`GoFuncRecord`].
    GoFunc(GoFuncRecord),
    /// See [`HpackEntryRecord`].
    HpackEntry(HpackEntryRecord),
    /// See [`HpackTableRecord`].
    HpackTable(HpackTableRecord),
    /// See [`WalHeadRecord`].
    WalHead(WalHeadRecord),
    /// See [`TlsKeyRecord`].
    TlsKey(TlsKeyRecord),
    /// See [`CniExecRecord`].
    CniExec(CniExecRecord),
}

impl RawEvent {
    /// The process the event is about.
    pub fn ids(&self) -> &ProcessIds {
        match self {
            RawEvent::Exec(exec) => &exec.ids,
            RawEvent::Fork(fork) => &fork.ids,
            RawEvent::Exit(exit) => &exit.ids,
            RawEvent::Data(data) => &data.ids,
            RawEvent::Conn(conn) => &conn.ids,
            RawEvent::Fsync(fsync) => &fsync.ids,
            RawEvent::FileOpen(open) => &open.ids,
            RawEvent::Header(header) => &header.ids,
            RawEvent::GoFunc(call) => &call.ids,
            RawEvent::HpackEntry(entry) => &entry.ids,
            RawEvent::HpackTable(table) => &table.ids,
            RawEvent::WalHead(head) => &head.ids,
            RawEvent::TlsKey(key) => &key.ids,
            RawEvent::CniExec(cni) => &cni.ids,
        }
    }
}

/// A record that cannot be turned into a [`RawEvent`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its kind requires.
    #[error("{kind} record of {len} bytes is shorter than {need}")]
    Truncated {
        /// What was being read.
        kind: &'static str,
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Unknown kind: the object and the agent do not match.
    #[error("unknown record kind {0}")]
    UnknownKind(u32),
    /// A field holds a value the wire format does not allow.
    #[error("malformed {kind} record: {what}")]
    Malformed {
        /// Record kind.
        kind: &'static str,
        /// What was wrong.
        what: String,
    },
}

/// A container id as the CNI specification allows it.
fn cni_container_id_is_valid(id: &[u8]) -> bool {
    id.first().is_some_and(u8::is_ascii_alphanumeric)
        && id
            .iter()
            .all(|&byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
}

/// The valid bytes of a header field's fixed name and value arrays (a
/// `HeaderEvent` or an `HpackEntryEvent`): lengths past the arrays are malformed.
fn field_bytes<'a>(
    kind: &'static str,
    (name, name_len): (&'a [u8], u8),
    (value, value_len): (&'a [u8], u16),
) -> Result<(&'a [u8], &'a [u8]), WireError> {
    let malformed = |what: String| WireError::Malformed { kind, what };
    let name = name
        .get(..usize::from(name_len))
        .ok_or_else(|| malformed(format!("name_len {name_len}")))?;
    let value = value
        .get(..usize::from(value_len))
        .ok_or_else(|| malformed(format!("value_len {value_len}")))?;
    Ok((name, value))
}

/// Reinterprets the start of `bytes` as a `T`.
fn read_record<T: aya::Pod>(kind: &'static str, bytes: &[u8]) -> Result<T, WireError> {
    let need = size_of::<T>();
    if bytes.len() < need {
        return Err(WireError::Truncated {
            kind,
            len: bytes.len(),
            need,
        });
    }
    // SAFETY: `bytes` holds at least size_of::<T>() bytes, `read_unaligned`
    // has no alignment requirement, and `T: Pod` is valid for any bit pattern.
    Ok(unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
}

/// The bytes of a wire struct: how user space writes records of its own (what
/// it found in /proc at start) in the kernel's format.
pub(crate) fn record_bytes<T: aya::Pod>(value: &T) -> Vec<u8> {
    // SAFETY: T is Pod: `#[repr(C)]` plain data without implicit padding, so
    // all size_of::<T>() bytes are initialised.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// Parses one ring buffer record.
pub fn parse_record(bytes: &[u8]) -> Result<RawEvent, WireError> {
    let header: EventHeader = read_record("header", bytes)?;
    let kind = EventKind::try_from(header.kind).map_err(WireError::UnknownKind)?;
    let ids = ProcessIds {
        ts_ns: header.ts_ns,
        tgid: header.tgid,
        tid: header.tid,
    };
    match kind {
        EventKind::Exec => {
            let event: ExecEvent = read_record("exec", bytes)?;
            parse_exec(ids, &event).map(RawEvent::Exec)
        }
        EventKind::Fork => {
            let event: ForkEvent = read_record("fork", bytes)?;
            Ok(RawEvent::Fork(ForkRecord {
                ids,
                parent_tgid: event.parent_tgid,
                parent_tid: event.parent_tid,
                cgroup_id: event.cgroup_id,
                depth: event.depth,
                comm: comm_string(&event.comm),
            }))
        }
        EventKind::Exit => {
            let event: ExitEvent = read_record("exit", bytes)?;
            Ok(RawEvent::Exit(ExitRecord {
                ids,
                cgroup_id: event.cgroup_id,
                status: ExitStatus::from_wait_status(event.exit_code),
                comm: comm_string(&event.comm),
            }))
        }
        EventKind::Data => {
            let event: DataEvent = read_record("data", bytes)?;
            parse_data(ids, &event, &bytes[size_of::<DataEvent>()..]).map(RawEvent::Data)
        }
        EventKind::Conn => {
            let event: ConnEvent = read_record("conn", bytes)?;
            parse_conn(ids, &event).map(RawEvent::Conn)
        }
        EventKind::Fsync => {
            let event: FsyncEvent = read_record("fsync", bytes)?;
            Ok(RawEvent::Fsync(FsyncRecord {
                conn: ConnKey {
                    tgid: ids.tgid,
                    conn_id: event.conn_id,
                },
                ids,
                fd: event.fd,
                syscall: enum_field("fsync", "syscall", event.syscall)?,
                duration_ns: event.duration_ns,
                ret: event.ret,
            }))
        }
        EventKind::FileOpen => {
            let event: FileOpenEvent = read_record("file open", bytes)?;
            let path = event
                .path
                .get(..usize::from(event.path_len))
                .ok_or_else(|| WireError::Malformed {
                    kind: "file open",
                    what: format!("path_len {} > {FILENAME_BYTES}", event.path_len),
                })?;
            Ok(RawEvent::FileOpen(FileOpenRecord {
                conn: ConnKey {
                    tgid: ids.tgid,
                    conn_id: event.conn_id,
                },
                ids,
                fd: event.fd,
                fd_kind: enum_field("file open", "fd_kind", event.fd_kind)?,
                path: String::from_utf8_lossy(path).into_owned(),
            }))
        }
        EventKind::Header => {
            let event: HeaderEvent = read_record("header field", bytes)?;
            let (name, value) = field_bytes(
                "header field",
                (&event.name, event.name_len),
                (&event.value, event.value_len),
            )?;
            Ok(RawEvent::Header(HeaderRecord {
                ids,
                side: enum_field("header field", "side", event.side)?,
                name: String::from_utf8_lossy(name).into_owned(),
                value: String::from_utf8_lossy(value).into_owned(),
                redacted: event.flags & HEADER_VALUE_REDACTED != 0,
                truncated: event.flags & HEADER_VALUE_TRUNCATED != 0,
                coder_tag: event.coder_tag,
            }))
        }
        EventKind::HpackEntry => {
            let event: HpackEntryEvent = read_record("HPACK table entry", bytes)?;
            let field = if event.flags & HPACK_ENTRY_WITHHELD != 0 {
                None
            } else {
                let (name, value) = field_bytes(
                    "HPACK table entry",
                    (&event.name, event.name_len),
                    (&event.value, event.value_len),
                )?;
                Some((name.to_vec(), value.to_vec()))
            };
            Ok(RawEvent::HpackEntry(HpackEntryRecord {
                conn: ConnKey {
                    tgid: ids.tgid,
                    conn_id: event.conn_id,
                },
                ids,
                side: enum_field("HPACK table entry", "side", event.side)?,
                index: event.index,
                size: event.entry_size,
                field,
            }))
        }
        EventKind::HpackTable => {
            let event: HpackTableEvent = read_record("HPACK table", bytes)?;
            Ok(RawEvent::HpackTable(HpackTableRecord {
                conn: ConnKey {
                    tgid: ids.tgid,
                    conn_id: event.conn_id,
                },
                ids,
                side: enum_field("HPACK table", "side", event.side)?,
                count: (event.count <= MAX_HPACK_TABLE_ENTRIES).then_some(event.count),
                size: event.size,
                max_size: event.max_size,
            }))
        }
        EventKind::WalHead => {
            let event: WalHeadEvent = read_record("WAL head", bytes)?;
            let head =
                event
                    .head
                    .get(..event.len as usize)
                    .ok_or_else(|| WireError::Malformed {
                        kind: "WAL head",
                        what: format!("len {} > {WAL_HEAD_BYTES}", event.len),
                    })?;
            Ok(RawEvent::WalHead(WalHeadRecord {
                conn: ConnKey {
                    tgid: ids.tgid,
                    conn_id: event.conn_id,
                },
                ids,
                head: head.to_vec(),
            }))
        }
        EventKind::TlsKey => {
            let event: TlsKeyEvent = read_record("TLS key", bytes)?;
            let malformed = |what: String| WireError::Malformed {
                kind: "TLS key",
                what,
            };
            let secret = event
                .secret
                .get(..usize::from(event.secret_len))
                .ok_or_else(|| malformed(format!("secret_len {}", event.secret_len)))?;
            let direction = Direction::try_from(event.direction)
                .map_err(|value| malformed(format!("direction {value}")))?;
            Ok(RawEvent::TlsKey(TlsKeyRecord {
                conn: ConnKey {
                    tgid: ids.tgid,
                    conn_id: event.conn_id,
                },
                ids,
                fd: event.fd,
                direction,
                seq: event.seq,
                suite: event.suite,
                secret: secret.to_vec(),
            }))
        }
        EventKind::CniExec => {
            let event: CniExecEvent = read_record("exec of a CNI plugin", bytes)?;
            let copied = event.copied as usize;
            if copied > CNI_CONTAINER_ID_BYTES {
                return Err(WireError::Malformed {
                    kind: "exec of a CNI plugin",
                    what: format!("copied {copied}"),
                });
            }
            // A full buffer may hold a cut value; an empty one none.
            let value = (copied < CNI_CONTAINER_ID_BYTES)
                .then(|| &event.container_id[..copied.saturating_sub(1)])
                .filter(|value| cni_container_id_is_valid(value));
            Ok(RawEvent::CniExec(CniExecRecord {
                ids,
                container_id: value.map(|value| String::from_utf8_lossy(value).into_owned()),
            }))
        }
        EventKind::GoFunc => {
            let event: GoFuncEvent = read_record("function probe", bytes)?;
            let function =
                GoFunction::try_from(event.function).map_err(|value| WireError::Malformed {
                    kind: "function probe",
                    what: format!("function {value}"),
                })?;
            let mut strings = [None, None, None];
            let mut truncated = [false; GO_FUNC_STRINGS];
            for (index, string) in strings.iter_mut().enumerate() {
                if event.string_flags & (GO_STRING_UNREADABLE << index) != 0 {
                    continue;
                }
                let len = usize::from(event.string_lens[index]);
                let bytes =
                    event.strings[index]
                        .get(..len)
                        .ok_or_else(|| WireError::Malformed {
                            kind: "function probe",
                            what: format!("string_lens[{index}] {len}"),
                        })?;
                *string = Some(String::from_utf8_lossy(bytes).into_owned());
                truncated[index] = event.string_flags & (GO_STRING_TRUNCATED << index) != 0;
            }
            Ok(RawEvent::GoFunc(GoFuncRecord {
                ids,
                function,
                at_return: event.at_return != 0,
                goid: event.goid,
                parent_goid: event.parent_goid,
                derived: event.flags & GO_FUNC_DERIVED != 0,
                words: event.words,
                strings,
                truncated,
            }))
        }
    }
}

/// Converts a wire enum byte, or says which field held an unknown value.
fn enum_field<T: TryFrom<u8, Error = u8>>(
    kind: &'static str,
    field: &str,
    value: u8,
) -> Result<T, WireError> {
    T::try_from(value).map_err(|value| WireError::Malformed {
        kind,
        what: format!("{field} {value}"),
    })
}

fn parse_data(ids: ProcessIds, event: &DataEvent, payload: &[u8]) -> Result<DataRecord, WireError> {
    let data_len = event.data_len as usize;
    if data_len > DATA_BYTES_MAX {
        return Err(WireError::Malformed {
            kind: "data",
            what: format!("data_len {data_len} > {DATA_BYTES_MAX}"),
        });
    }
    let data = payload.get(..data_len).ok_or(WireError::Truncated {
        kind: "data payload",
        len: payload.len(),
        need: data_len,
    })?;
    Ok(DataRecord {
        conn: ConnKey {
            tgid: ids.tgid,
            conn_id: event.conn_id,
        },
        ids,
        fd: event.fd,
        syscall: enum_field("data", "syscall", event.syscall)?,
        direction: enum_field("data", "direction", event.direction)?,
        fd_kind: enum_field("data", "fd_kind", event.fd_kind)?,
        len: u64::try_from(event.ret).unwrap_or(0),
        enter_ts_ns: event.enter_ts_ns,
        data: data.to_vec(),
        truncated: event.flags & DATA_TRUNCATED != 0,
        tls_plaintext: event.flags & DATA_GO_TLS != 0,
    })
}

fn parse_conn(ids: ProcessIds, event: &ConnEvent) -> Result<ConnRecord, WireError> {
    let peer = match event.family {
        AF_INET => {
            let [a, b, c, d, ..] = event.addr;
            Peer::Tcp((IpAddr::V4(Ipv4Addr::new(a, b, c, d)), event.port).into())
        }
        AF_INET6 => Peer::Tcp((IpAddr::V6(Ipv6Addr::from(event.addr)), event.port).into()),
        AF_UNIX => {
            let len = usize::from(event.unix_path_len).min(UNIX_PATH_BYTES);
            Peer::Unix(unix_path_string(&event.unix_path[..len]))
        }
        _ => Peer::Unknown,
    };
    Ok(ConnRecord {
        conn: ConnKey {
            tgid: ids.tgid,
            conn_id: event.conn_id,
        },
        ids,
        fd: event.fd,
        change: enum_field("conn", "action", event.action)?,
        fd_kind: enum_field("conn", "fd_kind", event.fd_kind)?,
        ret: event.ret,
        peer,
        local_port: (event.local_port != 0).then_some(event.local_port),
    })
}

/// A `sun_path` as text: cut at the first NUL, except that an abstract name
/// (leading NUL) is shown with a leading `@`, as `ss` does.
pub fn unix_path_string(path: &[u8]) -> String {
    match path.split_first() {
        Some((0, rest)) if !rest.is_empty() => format!("@{}", String::from_utf8_lossy(rest)),
        _ => {
            let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
            String::from_utf8_lossy(&path[..end]).into_owned()
        }
    }
}

fn parse_exec(ids: ProcessIds, event: &ExecEvent) -> Result<ExecRecord, WireError> {
    let malformed = |what: String| WireError::Malformed { kind: "exec", what };
    let target = TargetReason::try_from(event.target_reason)
        .map_err(|value| malformed(format!("target reason {value}")))?;
    let filename = event
        .filename
        .get(..usize::from(event.filename_len))
        .ok_or_else(|| {
            malformed(format!(
                "filename_len {} > {FILENAME_BYTES}",
                event.filename_len
            ))
        })?;
    let args = event
        .args
        .get(..usize::from(event.args_len))
        .ok_or_else(|| malformed(format!("args_len {} > {ARGS_BYTES}", event.args_len)))?;
    Ok(ExecRecord {
        ids,
        ppid: event.ppid,
        cgroup_id: event.cgroup_id,
        target,
        depth: event.depth,
        comm: comm_string(&event.comm),
        filename: String::from_utf8_lossy(filename).into_owned(),
        filename_truncated: event.flags & EXEC_FILENAME_TRUNCATED != 0,
        argv: split_args(args),
        argv_truncated: event.flags & EXEC_ARGS_TRUNCATED != 0,
        cgroup_path: None,
    })
}

/// Splits the kernel's argument area (each string NUL terminated, as
/// /proc/PID/cmdline shows it too) into strings.
pub(crate) fn split_args(area: &[u8]) -> Vec<String> {
    let area = area.strip_suffix(&[0]).unwrap_or(area);
    if area.is_empty() {
        return Vec::new();
    }
    area.split(|&b| b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

fn comm_string(comm: &[u8; COMM_BYTES]) -> String {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(COMM_BYTES);
    String::from_utf8_lossy(&comm[..len]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec_event(args: &[u8], flags: u16) -> ExecEvent {
        let mut event = ExecEvent {
            header: EventHeader {
                ts_ns: 42,
                kind: EventKind::Exec as u32,
                tgid: 100,
                tid: 100,
                _pad: 0,
            },
            cgroup_id: 7,
            ppid: 1,
            target_reason: TargetReason::Named as u8,
            depth: 0,
            flags,
            filename_len: 9,
            args_len: args.len() as u16,
            _pad: 0,
            comm: [0; COMM_BYTES],
            filename: [0xAA; FILENAME_BYTES],
            args: [0xAA; ARGS_BYTES],
        };
        event.comm[..4].copy_from_slice(b"runc");
        event.filename[..9].copy_from_slice(b"/bin/runc");
        event.args[..args.len()].copy_from_slice(args);
        event
    }

    fn func_event(function: u16, lens: [u16; 3], flags: u8) -> GoFuncEvent {
        let mut event = GoFuncEvent {
            header: EventHeader {
                ts_ns: 42,
                kind: EventKind::GoFunc as u32,
                tgid: 100,
                tid: 101,
                _pad: 0,
            },
            function,
            at_return: 1,
            string_flags: flags,
            string_lens: lens,
            flags: 0,
            _pad: [0; 5],
            goid: 7,
            parent_goid: 5,
            words: [1, 2, 3, 4, 5, 6, 7, 8, 9],
            strings: [[0xAA; tracer_common::gofunc::GO_FUNC_STRING_BYTES]; GO_FUNC_STRINGS],
        };
        event.strings[0][..2].copy_from_slice(b"vm");
        event
    }

    #[test]
    fn function_probe_records_are_read_and_checked() {
        let function = GoFunction::SchedulerCycle as u16;
        let record = parse_record(&record_bytes(&func_event(
            function,
            [2, 0, 0],
            GO_STRING_UNREADABLE << 1,
        )))
        .unwrap();
        let RawEvent::GoFunc(call) = record else {
            panic!("not a function probe: {record:?}")
        };
        assert_eq!(call.function, GoFunction::SchedulerCycle);
        assert!(call.at_return);
        assert_eq!((call.goid, call.parent_goid), (7, 5));
        assert_eq!(call.strings, [Some("vm".into()), None, Some(String::new())]);
        // An unknown function (a newer kernel side) and a length past the
        // array are errors, not panics.
        assert!(matches!(
            parse_record(&record_bytes(&func_event(999, [0; 3], 0))),
            Err(WireError::Malformed { .. })
        ));
        assert!(matches!(
            parse_record(&record_bytes(&func_event(function, [0, 0, 4096], 0))),
            Err(WireError::Malformed { .. })
        ));
    }

    #[test]
    fn bytes_pass_at_a_writes_entry_and_a_reads_exit() {
        let record = |direction, enter_ts_ns| DataRecord {
            ids: ProcessIds {
                ts_ns: 200,
                tgid: 100,
                tid: 101,
            },
            conn: ConnKey {
                tgid: 100,
                conn_id: 1,
            },
            fd: 7,
            syscall: IoSyscall::Write,
            direction,
            fd_kind: FdKind::Socket,
            len: 0,
            enter_ts_ns,
            data: Vec::new(),
            truncated: false,
            tls_plaintext: false,
        };
        assert_eq!(record(Direction::Egress, 150).moved_ts_ns(), 150);
        assert_eq!(record(Direction::Ingress, 150).moved_ts_ns(), 200);
        // No entry time, or one after the exit (not from this syscall):
        // the exit.
        assert_eq!(record(Direction::Egress, 0).moved_ts_ns(), 200);
        assert_eq!(record(Direction::Egress, 250).moved_ts_ns(), 200);
    }

    #[test]
    fn a_cni_container_id_is_taken_only_whole_and_valid() {
        let cni = |value: &[u8], copied: u32| {
            let mut event = CniExecEvent {
                header: EventHeader {
                    ts_ns: 42,
                    kind: EventKind::CniExec as u32,
                    tgid: 100,
                    tid: 100,
                    _pad: 0,
                },
                copied,
                _pad: 0,
                container_id: [0xAA; CNI_CONTAINER_ID_BYTES],
            };
            event.container_id[..value.len()].copy_from_slice(value);
            parse_record(&record_bytes(&event)).map(|record| match record {
                RawEvent::CniExec(cni) => cni.container_id,
                other => panic!("not a CNI exec: {other:?}"),
            })
        };
        let id = "0f3c9a".repeat(10) + "beef";
        let mut value = id.clone().into_bytes();
        value.push(0);
        assert_eq!(cni(&value, value.len() as u32).unwrap(), Some(id));
        // Cut by the buffer, empty, or not an id: nothing named.
        assert_eq!(cni(&[b'a'; 128], 128).unwrap(), None);
        assert_eq!(cni(b"\0", 1).unwrap(), None);
        assert_eq!(cni(b"-rf /\0", 6).unwrap(), None);
        assert_eq!(cni(b"a b\0", 4).unwrap(), None);
        // More copied than the record holds: malformed.
        assert!(matches!(cni(b"", 129), Err(WireError::Malformed { .. })));
    }

    #[test]
    fn exec_record_reads_only_the_valid_bytes() {
        let record =
            parse_record(&record_bytes(&exec_event(b"runc\0--root\0/run/runc\0", 0))).unwrap();
        let RawEvent::Exec(exec) = record else {
            panic!("not an exec: {record:?}")
        };
        assert_eq!(exec.comm, "runc");
        assert_eq!(exec.filename, "/bin/runc");
        assert_eq!(exec.argv, ["runc", "--root", "/run/runc"]);
        assert_eq!(exec.target, TargetReason::Named);
        assert!(!exec.argv_truncated && !exec.filename_truncated);
        assert_eq!(
            exec.ids,
            ProcessIds {
                ts_ns: 42,
                tgid: 100,
                tid: 100
            }
        );
    }

    #[test]
    fn truncated_args_keep_the_partial_last_string() {
        let record = parse_record(&record_bytes(&exec_event(
            b"sh\0-c\0sleep 10; ec",
            EXEC_ARGS_TRUNCATED,
        )))
        .unwrap();
        let RawEvent::Exec(exec) = record else {
            panic!("not an exec: {record:?}")
        };
        assert_eq!(exec.argv, ["sh", "-c", "sleep 10; ec"]);
        assert!(exec.argv_truncated);
    }

    #[test]
    fn empty_argument_area_gives_no_argv() {
        let record = parse_record(&record_bytes(&exec_event(b"", 0))).unwrap();
        let RawEvent::Exec(exec) = record else {
            panic!("not an exec: {record:?}")
        };
        assert!(exec.argv.is_empty());
    }

    #[test]
    fn record_shorter_than_its_kind_is_an_error() {
        let bytes = record_bytes(&exec_event(b"x\0", 0));
        let err = parse_record(&bytes[..100]).unwrap_err();
        assert_eq!(
            err,
            WireError::Truncated {
                kind: "exec",
                len: 100,
                need: size_of::<ExecEvent>()
            }
        );
        assert!(matches!(
            parse_record(&[1, 2, 3]),
            Err(WireError::Truncated { kind: "header", .. })
        ));
    }

    #[test]
    fn unknown_kind_is_an_error() {
        let mut event = exec_event(b"", 0);
        event.header.kind = 99;
        assert_eq!(
            parse_record(&record_bytes(&event)),
            Err(WireError::UnknownKind(99))
        );
    }

    #[test]
    fn out_of_range_lengths_are_malformed() {
        let mut event = exec_event(b"", 0);
        event.args_len = ARGS_BYTES as u16 + 1;
        assert!(matches!(
            parse_record(&record_bytes(&event)),
            Err(WireError::Malformed { .. })
        ));
        let mut event = exec_event(b"", 0);
        event.target_reason = 9;
        assert!(matches!(
            parse_record(&record_bytes(&event)),
            Err(WireError::Malformed { .. })
        ));
    }

    #[test]
    fn exit_status_decodes_codes_and_signals() {
        assert_eq!(ExitStatus::from_wait_status(0), ExitStatus::Code(0));
        assert_eq!(ExitStatus::from_wait_status(3 << 8), ExitStatus::Code(3));
        assert_eq!(ExitStatus::from_wait_status(9), ExitStatus::Signal(9));
        assert_eq!(
            ExitStatus::from_wait_status(0x80 | 11),
            ExitStatus::Signal(11)
        );
    }
}
