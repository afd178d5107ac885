//! Wire types of socket, file and fsync capture: the syscalls podtrace hooks,
//! the fds it follows, and the records they produce.
//!
//! Data records are variable length: a fixed [`DataEvent`] followed by
//! `data_len` bytes, so a 40-byte gRPC frame does not cost a 16 KiB slot.

use crate::{event::EventHeader, event::FILENAME_BYTES, impl_pod};

/// Bound of the payload prefix one data record carries: at most
/// `DATA_BYTES_MAX - 1` bytes (per-CPU map values are limited to 32 KiB, and
/// the scratch record needs twice this). A power of two: the kernel side
/// masks lengths with `DATA_BYTES_MAX - 1` for the verifier.
pub const DATA_BYTES_MAX: usize = 8192;
/// Default payload prefix kept per syscall (`--data-bytes`): all there is.
/// Go's HTTP/2 writers put several frames in one write; a cut one can take
/// a header block with it, and a lost block leaves the connection's HPACK
/// table out of step, so later header blocks (gRPC status, paths) no longer
/// decode from the wire.
pub const DEFAULT_DATA_BYTES: u32 = DATA_BYTES_MAX as u32;
/// iovecs of one readv/writev/sendmsg/recvmsg that are copied.
pub const MAX_IOVECS: usize = 8;
/// `sun_path` bytes of a `sockaddr_un`.
pub const UNIX_PATH_BYTES: usize = 108;
/// Capacity of the `FDS` map: sockets and files followed across all targets.
pub const MAX_TRACKED_FDS: u32 = 65_536;
/// Capacity of the `ACTIVE_CALLS` map: syscalls in flight, one per thread.
pub const MAX_ACTIVE_CALLS: u32 = 16_384;

const _: () = assert!(DATA_BYTES_MAX.is_power_of_two());

/// The syscalls podtrace hooks (one enter and one exit program each).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoSyscall {
    /// read(2)
    Read = 0,
    /// write(2)
    Write = 1,
    /// readv(2)
    Readv = 2,
    /// writev(2)
    Writev = 3,
    /// sendto(2)
    Sendto = 4,
    /// recvfrom(2)
    Recvfrom = 5,
    /// sendmsg(2)
    Sendmsg = 6,
    /// recvmsg(2)
    Recvmsg = 7,
    /// connect(2)
    Connect = 8,
    /// accept(2)
    Accept = 9,
    /// accept4(2)
    Accept4 = 10,
    /// close(2)
    Close = 11,
    /// fsync(2)
    Fsync = 12,
    /// fdatasync(2)
    Fdatasync = 13,
    /// openat(2)
    Openat = 14,
}

impl IoSyscall {
    /// Every hooked syscall; the loader puts its `sys_enter_NAME` and
    /// `sys_exit_NAME` programs into `SYSCALL_PROGRAMS`.
    pub const ALL: [IoSyscall; 15] = [
        IoSyscall::Read,
        IoSyscall::Write,
        IoSyscall::Readv,
        IoSyscall::Writev,
        IoSyscall::Sendto,
        IoSyscall::Recvfrom,
        IoSyscall::Sendmsg,
        IoSyscall::Recvmsg,
        IoSyscall::Connect,
        IoSyscall::Accept,
        IoSyscall::Accept4,
        IoSyscall::Close,
        IoSyscall::Fsync,
        IoSyscall::Fdatasync,
        IoSyscall::Openat,
    ];

    /// The hooked syscall with x86-64 number `nr`
    /// (arch/x86/entry/syscalls/syscall_64.tbl): what the `sys_enter` raw
    /// tracepoint is given, and `pt_regs.orig_ax` holds at `sys_exit`.
    #[inline(always)]
    pub const fn from_x86_64_nr(nr: i64) -> Option<IoSyscall> {
        Some(match nr {
            0 => IoSyscall::Read,
            1 => IoSyscall::Write,
            3 => IoSyscall::Close,
            19 => IoSyscall::Readv,
            20 => IoSyscall::Writev,
            42 => IoSyscall::Connect,
            43 => IoSyscall::Accept,
            44 => IoSyscall::Sendto,
            45 => IoSyscall::Recvfrom,
            46 => IoSyscall::Sendmsg,
            47 => IoSyscall::Recvmsg,
            74 => IoSyscall::Fsync,
            75 => IoSyscall::Fdatasync,
            257 => IoSyscall::Openat,
            288 => IoSyscall::Accept4,
            _ => return None,
        })
    }

    /// Slot of its enter program in `SYSCALL_PROGRAMS`; the exit program's
    /// is the next one.
    pub const fn enter_slot(self) -> u32 {
        2 * self as u32
    }

    /// Slot of its exit program in `SYSCALL_PROGRAMS`.
    pub const fn exit_slot(self) -> u32 {
        2 * self as u32 + 1
    }

    /// The syscall's name, as in `syscalls:sys_enter_NAME`.
    pub const fn name(self) -> &'static str {
        match self {
            IoSyscall::Read => "read",
            IoSyscall::Write => "write",
            IoSyscall::Readv => "readv",
            IoSyscall::Writev => "writev",
            IoSyscall::Sendto => "sendto",
            IoSyscall::Recvfrom => "recvfrom",
            IoSyscall::Sendmsg => "sendmsg",
            IoSyscall::Recvmsg => "recvmsg",
            IoSyscall::Connect => "connect",
            IoSyscall::Accept => "accept",
            IoSyscall::Accept4 => "accept4",
            IoSyscall::Close => "close",
            IoSyscall::Fsync => "fsync",
            IoSyscall::Fdatasync => "fdatasync",
            IoSyscall::Openat => "openat",
        }
    }

    /// Which way bytes move, for the data syscalls.
    pub const fn direction(self) -> Option<Direction> {
        match self {
            IoSyscall::Write | IoSyscall::Writev | IoSyscall::Sendto | IoSyscall::Sendmsg => {
                Some(Direction::Egress)
            }
            IoSyscall::Read | IoSyscall::Readv | IoSyscall::Recvfrom | IoSyscall::Recvmsg => {
                Some(Direction::Ingress)
            }
            _ => None,
        }
    }
}

impl TryFrom<u8> for IoSyscall {
    type Error = u8;
    fn try_from(value: u8) -> Result<Self, u8> {
        IoSyscall::ALL
            .get(usize::from(value))
            .copied()
            .filter(|s| *s as u8 == value)
            .ok_or(value)
    }
}

/// Which way bytes moved, seen from the process that made the syscall.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Written or sent by the process.
    Egress = 1,
    /// Read or received by the process.
    Ingress = 2,
}

impl TryFrom<u8> for Direction {
    type Error = u8;
    fn try_from(value: u8) -> Result<Self, u8> {
        match value {
            1 => Ok(Direction::Egress),
            2 => Ok(Direction::Ingress),
            other => Err(other),
        }
    }
}

/// What a followed fd is.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FdKind {
    /// A TCP or unix stream socket.
    Socket = 1,
    /// An etcd write-ahead-log file (`*.wal`, or a preallocated `*.tmp` that becomes one).
    WalFile = 2,
}

impl TryFrom<u8> for FdKind {
    type Error = u8;
    fn try_from(value: u8) -> Result<Self, u8> {
        match value {
            1 => Ok(FdKind::Socket),
            2 => Ok(FdKind::WalFile),
            other => Err(other),
        }
    }
}

/// Key of the `FDS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FdKey {
    /// Process id (fd tables are per process).
    pub tgid: u32,
    /// File descriptor.
    pub fd: u32,
}

/// Value of the `FDS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdInfo {
    /// Identity of this connection or file, unique across fd reuse. Kernel
    /// ids have the top bit clear; ids user space assigns when seeding from
    /// /proc have it set.
    pub conn_id: u64,
    /// An [`FdKind`].
    pub kind: u8,
    /// `FD_*` bits.
    pub flags: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 6],
}

/// `FdInfo::flags` bit: Go's crypto/tls probes deliver this socket's
/// plaintext, so the syscall programs skip its (encrypted) bytes — those of
/// a direction whose secret was read excepted (below).
pub const FD_TLS: u8 = 1 << 0;
/// `FdInfo::flags` bit: the TLS 1.3 secret of what this socket's process
/// reads was sent ([`TlsKeyEvent`]): the syscall programs copy the
/// ciphertext it reads, user space decrypts it, and the TLS probes leave it.
pub const FD_TLS_KEYED_IN: u8 = 1 << 1;
/// `FdInfo::flags` bit: as [`FD_TLS_KEYED_IN`], for what the process writes.
pub const FD_TLS_KEYED_OUT: u8 = 1 << 2;

/// Top bit of ids that user space assigned (see [`FdInfo::conn_id`]).
pub const USER_CONN_ID_BIT: u64 = 1 << 63;

/// A syscall in flight: its arguments, kept from enter to exit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActiveCall {
    /// When the syscall was entered.
    pub ts_ns: u64,
    /// The first three syscall arguments.
    pub args: [u64; 3],
    /// The fd's identity, when the fd was already followed at enter.
    pub conn_id: u64,
    /// An [`IoSyscall`].
    pub syscall: u8,
    /// An [`FdKind`] (0 when not followed yet).
    pub fd_kind: u8,
    /// 1 between the enter and the exit; 0 once the exit took the call (a
    /// thread's entry is kept from call to call).
    pub pending: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 5],
}

/// `DataEvent::flags` bit: fewer bytes were copied than the syscall moved.
pub const DATA_TRUNCATED: u8 = 1 << 0;
/// `DataEvent::flags` bit: plaintext from Go's `crypto/tls.(*Conn)` Read or
/// Write (a uprobe), not bytes of a syscall.
pub const DATA_GO_TLS: u8 = 1 << 1;

/// Bytes a target moved through a followed fd. `data_len` bytes follow this
/// struct in the record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataEvent {
    /// `kind` = `EventKind::Data`; `ts_ns` is the syscall's exit.
    pub header: EventHeader,
    /// See [`FdInfo::conn_id`].
    pub conn_id: u64,
    /// Syscall result: bytes moved.
    pub ret: i64,
    /// When the syscall was entered.
    pub enter_ts_ns: u64,
    /// File descriptor.
    pub fd: u32,
    /// Bytes following this struct.
    pub data_len: u32,
    /// An [`IoSyscall`].
    pub syscall: u8,
    /// A [`Direction`].
    pub direction: u8,
    /// An [`FdKind`].
    pub fd_kind: u8,
    /// `DATA_*` bits.
    pub flags: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 4],
}

/// What happened to a followed socket or file.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnAction {
    /// connect(2) returned 0 or EINPROGRESS.
    Connected = 1,
    /// accept(2)/accept4(2) returned a new fd.
    Accepted = 2,
    /// close(2) of a followed fd.
    Closed = 3,
    /// Open when podtrace started: found in /proc by user space, which
    /// writes this record itself (the kernel never does). Which end the
    /// process is was not found out (a file, or an unbound unix socket
    /// nobody listens for).
    OpenAtStart = 4,
    /// Open when podtrace started, and accepted: the process is the server.
    AcceptedBeforeStart = 5,
    /// Open when podtrace started, and connected: the process is the client.
    ConnectedBeforeStart = 6,
}

impl ConnAction {
    /// The socket was open before podtrace started (its first bytes were
    /// not seen).
    pub fn before_start(self) -> bool {
        matches!(
            self,
            Self::OpenAtStart | Self::AcceptedBeforeStart | Self::ConnectedBeforeStart
        )
    }
}

impl TryFrom<u8> for ConnAction {
    type Error = u8;
    fn try_from(value: u8) -> Result<Self, u8> {
        match value {
            1 => Ok(ConnAction::Connected),
            2 => Ok(ConnAction::Accepted),
            3 => Ok(ConnAction::Closed),
            4 => Ok(ConnAction::OpenAtStart),
            5 => Ok(ConnAction::AcceptedBeforeStart),
            6 => Ok(ConnAction::ConnectedBeforeStart),
            other => Err(other),
        }
    }
}

/// `ConnEvent::family`: a unix socket (include/linux/socket.h).
pub const AF_UNIX: u16 = 1;
/// `ConnEvent::family`: IPv4.
pub const AF_INET: u16 = 2;
/// `ConnEvent::family`: IPv6.
pub const AF_INET6: u16 = 10;

/// A socket connected, accepted or closed (and files closed).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnEvent {
    /// `kind` = `EventKind::Conn`.
    pub header: EventHeader,
    /// See [`FdInfo::conn_id`].
    pub conn_id: u64,
    /// Syscall result.
    pub ret: i64,
    /// File descriptor.
    pub fd: u32,
    /// `sa_family` of the address (AF_INET, AF_INET6, AF_UNIX; 0 if unknown).
    pub family: u16,
    /// Port in host byte order (TCP only).
    pub port: u16,
    /// A [`ConnAction`].
    pub action: u8,
    /// An [`FdKind`].
    pub fd_kind: u8,
    /// Valid bytes of `unix_path` (0 for TCP).
    pub unix_path_len: u8,
    /// Explicit padding, zero.
    pub _pad: u8,
    /// The local port (TCP), where known: only for a socket found open at
    /// start (read from /proc with its peer); 0 otherwise. It pairs the two
    /// ends of a connection on one host.
    pub local_port: u16,
    /// Explicit padding, zero.
    pub _pad2: [u8; 2],
    /// IPv4 (first 4 bytes) or IPv6 address: the remote end for connect and
    /// accept (the peer accept reported).
    pub addr: [u8; 16],
    /// `sun_path` of a unix socket address (abstract names start with NUL).
    pub unix_path: [u8; UNIX_PATH_BYTES],
    /// Explicit tail padding to 8-byte alignment, zero.
    pub _tail: [u8; 4],
}

/// fsync(2)/fdatasync(2) of a followed file, with its duration.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsyncEvent {
    /// `kind` = `EventKind::Fsync`; `ts_ns` is the exit.
    pub header: EventHeader,
    /// See [`FdInfo::conn_id`].
    pub conn_id: u64,
    /// Nanoseconds from enter to exit.
    pub duration_ns: u64,
    /// Syscall result.
    pub ret: i64,
    /// File descriptor.
    pub fd: u32,
    /// An [`IoSyscall`] (`Fsync` or `Fdatasync`).
    pub syscall: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 3],
}

/// A target opened a file podtrace follows (a WAL file of etcd).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileOpenEvent {
    /// `kind` = `EventKind::FileOpen`.
    pub header: EventHeader,
    /// See [`FdInfo::conn_id`].
    pub conn_id: u64,
    /// File descriptor.
    pub fd: u32,
    /// Valid bytes of `path` (without the NUL).
    pub path_len: u16,
    /// An [`FdKind`].
    pub fd_kind: u8,
    /// Explicit padding, zero.
    pub _pad: u8,
    /// Path as given to openat (relative paths are relative to its dirfd).
    pub path: [u8; FILENAME_BYTES],
}

/// Bytes of a WAL segment's start kept in a [`WalHeadEvent`]: its CRC and
/// metadata records take 56.
pub const WAL_HEAD_BYTES: usize = 128;

/// The first bytes of a WAL segment podtrace follows, which name the etcd
/// member that writes it. Made by user space, never by the programs: read
/// from the file when capture learns of the segment (its open, or at start),
/// and recorded with the kernel's records so that a replay has them too.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalHeadEvent {
    /// `kind` = `EventKind::WalHead`; `tgid` the member's process.
    pub header: EventHeader,
    /// The segment's [`FdInfo::conn_id`].
    pub conn_id: u64,
    /// File descriptor.
    pub fd: u32,
    /// Valid bytes of `head` (fewer in a segment shorter than that).
    pub len: u32,
    /// The segment's first bytes.
    pub head: [u8; WAL_HEAD_BYTES],
}

/// Most bytes of a TLS 1.3 traffic secret: SHA-384's 48.
pub const TLS_SECRET_BYTES: usize = 48;

/// The TLS 1.3 traffic secret of one direction of a Go `crypto/tls.Conn`,
/// read at a TLS probe's hit (`halfConn.trafficSecret`): from now on capture
/// copies that direction's ciphertext from the socket's syscalls, and user
/// space decrypts it, instead of taking plaintext from a probe hit per TLS
/// read or write. Holds a key: never logged, exported, or printed.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TlsKeyEvent {
    /// `kind` = `EventKind::TlsKey`; the process and the thread of the hit.
    pub header: EventHeader,
    /// The socket's [`FdInfo::conn_id`].
    pub conn_id: u64,
    /// The sequence number of the first record of the ciphertext captured
    /// after this record: exact for reads (the next record Go decrypts),
    /// a lower bound for writes (another goroutine may be writing).
    pub seq: u64,
    /// File descriptor.
    pub fd: u32,
    /// The cipher suite's IANA id (`Conn.cipherSuite`).
    pub suite: u16,
    /// A [`Direction`] as `u8`: which way the secret seals.
    pub direction: u8,
    /// Valid bytes of `secret` (32 or 48).
    pub secret_len: u8,
    /// The traffic secret.
    pub secret: [u8; TLS_SECRET_BYTES],
}

impl core::fmt::Debug for TlsKeyEvent {
    // The secret never leaves through Debug.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TlsKeyEvent")
            .field("header", &self.header)
            .field("conn_id", &self.conn_id)
            .field("seq", &self.seq)
            .field("fd", &self.fd)
            .field("suite", &self.suite)
            .field("direction", &self.direction)
            .finish_non_exhaustive()
    }
}

/// Bytes of an HTTP/2 header name kept by the HPACK probes.
pub const HEADER_NAME_BYTES: usize = 64;
/// Bytes of an HTTP/2 header value kept by the HPACK probes.
pub const HEADER_VALUE_BYTES: usize = 256;

const _: () = assert!(HEADER_NAME_BYTES.is_power_of_two() && HEADER_VALUE_BYTES.is_power_of_two());

/// Which HPACK side a header field came from; also the attach cookie of the
/// HPACK probes.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderSide {
    /// `hpack.(*Encoder).WriteField`: a field the process is about to send.
    Encoder = 1,
    /// `hpack.(*Decoder).callEmit`: a field the process just received.
    Decoder = 2,
}

impl TryFrom<u8> for HeaderSide {
    type Error = u8;
    fn try_from(value: u8) -> Result<Self, u8> {
        match value {
            1 => Ok(HeaderSide::Encoder),
            2 => Ok(HeaderSide::Decoder),
            other => Err(other),
        }
    }
}

/// `HeaderEvent::flags` bit: the value was not copied (HPACK "sensitive").
pub const HEADER_VALUE_REDACTED: u8 = 1 << 0;
/// `HeaderEvent::flags` bit: the value was longer than `HEADER_VALUE_BYTES`.
pub const HEADER_VALUE_TRUNCATED: u8 = 1 << 1;

/// One HTTP/2 header field as Go's HPACK code saw it, in plaintext whatever
/// the state of the connection's dynamic table. Only fields podtrace needs
/// are sent: pseudo-headers (`:path`, `:method`, `:status`, …), `grpc-*`,
/// `content-type` and `user-agent` — never `authorization` or cookies.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderEvent {
    /// `kind` = `EventKind::Header`; the thread is the one that encoded or
    /// decoded the field, which user space uses to find its connection.
    pub header: EventHeader,
    /// A [`HeaderSide`].
    pub side: u8,
    /// `HEADER_*` bits.
    pub flags: u8,
    /// Valid bytes of `name`.
    pub name_len: u8,
    /// Explicit padding, zero.
    pub _pad: u8,
    /// Valid bytes of `value`.
    pub value_len: u16,
    /// A hash of the `*hpack.Encoder` or `*hpack.Decoder` (one per
    /// connection and direction), [`coder_tag`]: fields with the same tag
    /// belong to the same connection whichever thread ran the goroutine.
    /// 0 in recordings made before it was sent.
    pub coder_tag: u16,
    /// The field name (lower case, as HTTP/2 requires).
    pub name: [u8; HEADER_NAME_BYTES],
    /// The field value.
    pub value: [u8; HEADER_VALUE_BYTES],
}

const _: () = assert!(size_of::<HeaderEvent>() == 24 + 8 + HEADER_NAME_BYTES + HEADER_VALUE_BYTES);

/// [`HeaderEvent::coder_tag`] of a Go HPACK coder at `addr`: 16 bits folded
/// from the address (never 0, which means unknown). Two live coders of one
/// process share a tag rarely; user space checks a tag's connection against
/// what the wire decodes before it relies on it.
#[inline(always)]
pub const fn coder_tag(addr: u64) -> u16 {
    let folded = (addr >> 4) ^ (addr >> 20) ^ (addr >> 36) ^ (addr >> 52);
    let tag = (folded & 0xffff) as u16;
    if tag == 0 { 1 } else { tag }
}

/// Entries of a Go HPACK dynamic table podtrace copies at most. A table of
/// the default 4096 bytes holds at most 4096 / 33 = 124 (RFC 7541 §4.1: an
/// entry's size is its name and value lengths plus 32).
pub const MAX_HPACK_TABLE_ENTRIES: u32 = 128;
/// Connections whose HPACK tables can be asked for at once.
pub const MAX_HPACK_SYNCS: u32 = 1024;

/// Connections whose capture user space can stop at once (`MUTED_CONNS`).
pub const MAX_MUTED_CONNS: u32 = 4096;
/// `crypto/tls.Conn.vers` of a TLS 1.3 connection: the only version whose
/// secrets capture reads (`TlsKeyEvent`).
pub const TLS_VERSION_13: u16 = 0x0304;

/// A connection of a process: the key of `HPACK_SYNC` and `MUTED_CONNS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProcessConnKey {
    /// Process id.
    pub tgid: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
    /// The socket's identity (`FdInfo::conn_id`).
    pub conn_id: u64,
}

/// `HpackSync::done` bit: the decoder's table (what the process receives) was copied.
pub const HPACK_SYNC_DECODER_DONE: u32 = 1 << 0;
/// `HpackSync::done` bit: the encoder's table (what the process sends) was copied.
pub const HPACK_SYNC_ENCODER_DONE: u32 = 1 << 1;

/// Value of `HPACK_SYNC`: user space asks for a connection's HPACK tables
/// (it joined the connection after they were built). The TLS probes (the
/// syscall programs, on a plain connection or a TLS direction read from its
/// secret) copy them once each: the decoder's (what the process receives)
/// at the next read, as it stands before the bytes read; the encoder's (what
/// it sends) at the next write, as it stands after the bytes written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HpackSync {
    /// `HPACK_SYNC_*_DONE` bits; user space clears one to ask again.
    pub done: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
}

/// Value of `GO_HPACK_CODERS`: the `*hpack.Decoder` and `*hpack.Encoder` a
/// goroutine last used. Go's HTTP/2 code reads and decodes a connection on
/// one goroutine, and encodes and writes it on one, so at a TLS read or
/// write these are the connection's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoHpackCoders {
    /// Last `*hpack.Decoder`, 0 if none.
    pub decoder: u64,
    /// Last `*hpack.Encoder`, 0 if none.
    pub encoder: u64,
}

/// `HpackEntryEvent::flags` bit: the entry's name is not one podtrace keeps
/// (see `HeaderEvent`), or its value did not fit: only its size was sent.
pub const HPACK_ENTRY_WITHHELD: u8 = 1 << 0;

/// One entry of a Go HPACK dynamic table, copied at a point where the
/// table's state matches a known place in the connection's bytes. Entries
/// come oldest first (`index` 0), then one [`HpackTableEvent`] closes the copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HpackEntryEvent {
    /// `kind` = `EventKind::HpackEntry`.
    pub header: EventHeader,
    /// The connection whose table this is.
    pub conn_id: u64,
    /// Position in the table, 0 = oldest.
    pub index: u32,
    /// RFC 7541 size: real name and value lengths plus 32.
    pub entry_size: u32,
    /// A [`HeaderSide`]: the decoder's table or the encoder's.
    pub side: u8,
    /// `HPACK_ENTRY_*` bits.
    pub flags: u8,
    /// Valid bytes of `name` (0 when withheld).
    pub name_len: u8,
    /// Explicit padding, zero.
    pub _pad: u8,
    /// Valid bytes of `value` (0 when withheld).
    pub value_len: u16,
    /// Explicit padding, zero.
    pub _pad2: [u8; 2],
    /// The entry's name.
    pub name: [u8; HEADER_NAME_BYTES],
    /// The entry's value.
    pub value: [u8; HEADER_VALUE_BYTES],
}

/// The end of a copy of a Go HPACK dynamic table: how many
/// [`HpackEntryEvent`]s it had and what Go says the table's size is, so that
/// user space can tell a complete copy from one that lost entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HpackTableEvent {
    /// `kind` = `EventKind::HpackTable`.
    pub header: EventHeader,
    /// The connection whose table this is.
    pub conn_id: u64,
    /// Entries in the table.
    pub count: u32,
    /// Sum of the entries' sizes (Go's `dynamicTable.size`).
    pub size: u32,
    /// The table's size limit (Go's `dynamicTable.maxSize`).
    pub max_size: u32,
    /// A [`HeaderSide`].
    pub side: u8,
    /// Explicit padding, zero.
    pub _pad: [u8; 3],
}

const _: () = assert!(size_of::<ProcessConnKey>() == 16);
const _: () = assert!(size_of::<HpackSync>() == 8);
const _: () = assert!(size_of::<GoHpackCoders>() == 16);
const _: () =
    assert!(size_of::<HpackEntryEvent>() == 24 + 24 + HEADER_NAME_BYTES + HEADER_VALUE_BYTES);
const _: () = assert!(size_of::<HpackTableEvent>() == 24 + 8 + 16);

/// Attach-cookie bit of `go_tls_read_ret`: the binary's `(*tls.Conn).Read`
/// keeps its receiver and buffer in the caller's spill slots, so the RET
/// probe reads them there and no entry probe is attached. The low 32 bits
/// stay the `GO_BINARIES` index.
pub const GO_TLS_READ_ARGS_AT_RET: u64 = 1 << 32;

/// Attach cookie of `go_tls_read_copy`, on `(*tls.Conn).Read`'s call to
/// `runtime.memmove`: the low 32 bits are the `GO_BINARIES` index, the bits
/// from this shift up the offset from RSP of the spill area that holds `c`.
pub const GO_TLS_COPY_SPILL_SHIFT: u32 = 40;

/// Attach-cookie bit of `go_tls_secret`, on `crypto/tls.(*halfConn).setTrafficSecret`:
/// the function takes a QUIC encryption level before the secret (Go ≥ 1.21),
/// so the secret's pointer and length are argument words 3 and 4, not 2 and
/// 3. The low 32 bits stay the `GO_BINARIES` index.
pub const GO_TLS_SECRET_LEVEL_ARG: u64 = 1 << 33;

/// Attach-cookie bit of an entry probe on Go's stack-check `JBE` (any Go
/// probe program): a hit whose jump is about to be taken (CF or ZF set) is a
/// call growing its stack, which reruns the prologue; that hit is skipped.
pub const GO_AT_STACK_CHECK: u64 = 1 << 63;

/// Capacity of `GO_BINARIES`: Go executables with TLS probes attached.
pub const MAX_GO_BINARIES: u32 = 256;
/// Capacity of `GO_TLS_READS`: `crypto/tls.(*Conn).Read` calls in flight.
pub const MAX_GO_TLS_READS: u32 = 16_384;

/// Struct field offsets of one Go binary (value of `GO_BINARIES`; a uprobe's
/// attach cookie is the index of its binary). From `tracer-gobin`'s table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoTlsOffsets {
    /// `crypto/tls.Conn.conn`: a `net.Conn` interface (type word, data word).
    pub tls_conn_conn: u32,
    /// `net.TCPConn.conn.fd` (also `net.UnixConn`'s): the `*net.netFD`.
    pub tcp_conn_fd: u32,
    /// `net.netFD.pfd.Sysfd`: the fd number, a Go `int`.
    pub net_fd_sysfd: u32,
    /// `crypto/tls.Conn.vers`: the negotiated version (`uint16`).
    pub tls_conn_vers: u16,
    /// `crypto/tls.Conn.cipherSuite`: the suite's IANA id (`uint16`).
    pub tls_conn_cipher_suite: u16,
    /// `crypto/tls.Conn.in.seq`: the next record number read (`[8]byte`, big-endian).
    pub tls_conn_in_seq: u16,
    /// `crypto/tls.Conn.in.trafficSecret` (a `[]byte`).
    pub tls_conn_in_secret: u16,
    /// `crypto/tls.Conn.out.seq`: the next record number written.
    pub tls_conn_out_seq: u16,
    /// `crypto/tls.Conn.out.trafficSecret` (a `[]byte`).
    pub tls_conn_out_secret: u16,
    /// `crypto/tls.Conn.input.s`: the plaintext of the record being read (a `[]byte`).
    pub tls_conn_input_s: u16,
    /// `crypto/tls.Conn.input.i`: how much of it the reader took (an `int64`).
    pub tls_conn_input_i: u16,
    /// `crypto/tls.Conn.rawInput.buf`: ciphertext read and not yet decrypted from `off` on.
    pub tls_conn_raw_input_buf: u16,
    /// `crypto/tls.Conn.rawInput.off` (an `int`).
    pub tls_conn_raw_input_off: u16,
    /// `crypto/tls.Conn.in`: the read side's `halfConn`.
    pub tls_conn_in: u16,
    /// `crypto/tls.Conn.out`: the write side's `halfConn`.
    pub tls_conn_out: u16,
    /// Explicit padding, zero.
    pub _pad: u32,
}

/// Key of `GO_TLS_READS`: a goroutine, by its `g` pointer (stable for its
/// life; the goroutine may resume on another thread before Read returns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GoCallKey {
    /// Process id.
    pub tgid: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
    /// The goroutine's `runtime.g` address (R14 in Go's register ABI).
    pub g: u64,
}

/// A `crypto/tls.(*Conn).Read` between entry and return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoTlsRead {
    /// When Read was entered.
    pub ts_ns: u64,
    /// The destination buffer.
    pub buf: u64,
    /// The socket's identity.
    pub conn_id: u64,
    /// The socket's fd.
    pub fd: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
}

/// Capacity of `GO_TLS_CONNS`: `*crypto/tls.Conn`s whose socket is known.
pub const MAX_GO_TLS_CONNS: u32 = 16_384;

/// Key of `GO_TLS_CONNS` (BPF only): a `*crypto/tls.Conn` of a process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GoTlsConnKey {
    /// Process id.
    pub tgid: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
    /// The `*tls.Conn`.
    pub tls_conn: u64,
}

/// Value of `GO_TLS_CONNS`: the socket a `*tls.Conn` led to when last
/// resolved. Good while `FDS` still holds that fd with the same `conn_id`
/// (a close or a new socket on the fd number changes it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoTlsConn {
    /// The socket's identity then.
    pub conn_id: u64,
    /// Its fd.
    pub fd: u32,
    /// Explicit padding, zero.
    pub _pad: u32,
}

const _: () = assert!(size_of::<GoTlsConnKey>() == 16);
const _: () = assert!(size_of::<GoTlsConn>() == 16);
const _: () = assert!(size_of::<GoTlsOffsets>() == 40);
const _: () = assert!(size_of::<GoCallKey>() == 16);
const _: () = assert!(size_of::<GoTlsRead>() == 32);
const _: () = assert!(size_of::<FdKey>() == 8);
const _: () = assert!(size_of::<FdInfo>() == 16);
const _: () = assert!(size_of::<ActiveCall>() == 48);
const _: () = assert!(size_of::<DataEvent>() == 24 + 8 + 8 + 8 + 4 + 4 + 8);
const _: () =
    assert!(size_of::<ConnEvent>() == 24 + 8 + 8 + 4 + 2 + 2 + 8 + 16 + UNIX_PATH_BYTES + 4);
// The local port sits where padding was: recordings made before it read as 0 (unknown).
const _: () = assert!(core::mem::offset_of!(ConnEvent, local_port) == 52);
const _: () = assert!(size_of::<ConnEvent>().is_multiple_of(8));
const _: () = assert!(size_of::<FsyncEvent>() == 24 + 8 + 8 + 8 + 8);
const _: () = assert!(size_of::<FileOpenEvent>() == 24 + 8 + 8 + FILENAME_BYTES);
const _: () = assert!(size_of::<WalHeadEvent>() == 24 + 8 + 8 + WAL_HEAD_BYTES);
const _: () = assert!(size_of::<TlsKeyEvent>() == 24 + 8 + 8 + 8 + TLS_SECRET_BYTES);

impl_pod!(
    FdKey,
    FdInfo,
    ActiveCall,
    DataEvent,
    ConnEvent,
    FsyncEvent,
    FileOpenEvent,
    WalHeadEvent,
    TlsKeyEvent,
    GoTlsOffsets,
    GoCallKey,
    GoTlsRead,
    GoTlsConnKey,
    GoTlsConn,
    HeaderEvent,
    ProcessConnKey,
    HpackSync,
    GoHpackCoders,
    HpackEntryEvent,
    HpackTableEvent
);
