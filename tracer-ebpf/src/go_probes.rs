//! Uprobes on Go functions, attached by file offset at a function's entry and
//! at each of its RET instructions (never uretprobes: Go moves goroutine
//! stacks, and a rewritten return address crashes the program).
//!
//! Two families, told apart by what the attach cookie means:
//! - `go_probe_hit` (`podtrace probe-check`): the cookie is the attachment's
//!   slot in `PROBE_HITS`; counting hits per slot shows whether a probe on a
//!   given binary fires, and how often, before anything depends on it.
//! - the `crypto/tls.(*Conn)` probes: the cookie is the binary's index in
//!   `GO_BINARIES`, which holds the struct offsets of its Go release. They
//!   deliver plaintext as data records on the socket's connection.
//! - the HPACK probes (`go_hpack_field`): the cookie is the side (encoder or
//!   decoder). They deliver header fields in plaintext, which is how a
//!   request's `:path` is known on an HTTP/2 connection older than podtrace,
//!   and note which HPACK tables a goroutine uses, so that the TLS probes
//!   can copy a connection's tables once ([`crate::hpack_table`]) and the
//!   HPACK probes be detached.

use aya_ebpf::{
    EbpfContext as _, helpers::generated::bpf_get_attach_cookie, macros::uprobe,
    programs::ProbeContext,
};
use tracer_common::{
    config::MAX_PROBE_SLOTS,
    drop_reason::DropReason,
    event::EventKind,
    io::{
        ActiveCall, DATA_GO_TLS, Direction, FD_TLS, FdInfo, FdKey, FdKind, GO_AT_STACK_CHECK,
        GO_TLS_COPY_SPILL_SHIFT, GO_TLS_READ_ARGS_AT_RET, GO_TLS_SECRET_LEVEL_ARG, GoCallKey,
        GoTlsConn, GoTlsConnKey, GoTlsOffsets, GoTlsRead, HEADER_NAME_BYTES, HEADER_VALUE_BYTES,
        HEADER_VALUE_REDACTED, HEADER_VALUE_TRUNCATED, HeaderEvent, HeaderSide, IoSyscall,
        coder_tag,
    },
};

use crate::{
    hpack_table,
    io::{data_parts, muted},
    kernel_read::{read_user, read_user_bytes},
    maps::{
        BPF_RB_NO_WAKEUP, EVENTS, FDS, GO_BINARIES, GO_TLS_CONNS, GO_TLS_READS, PROBE_HITS,
        count_drop, set_fd_flags, submit_flags, target_of,
    },
    record::{Ids, header, now_ns},
    tls_keys,
};

/// Records a Go TLS write or read is copied in at most: gRPC's writer
/// sends up to 32 KiB at once (several streams' frames under a burst), a
/// read returns at most one 16 KiB record; a cut one would lose the HTTP/2
/// header blocks in it, and with them the HPACK state of every later one.
const MAX_TLS_PARTS: u32 = 4;

/// Counts one hit of the attachment whose cookie is the slot.
#[uprobe]
fn go_probe_hit(ctx: ProbeContext) -> u32 {
    let cookie = attach_cookie(&ctx);
    if go_abi::growing_stack(&ctx, cookie) {
        return 0;
    }
    let slot = cookie & !GO_AT_STACK_CHECK;
    if slot >= u64::from(MAX_PROBE_SLOTS) {
        count_drop(DropReason::ProbeSlotOutOfRange);
        return 0;
    }
    if let Some(hits) = PROBE_HITS.get_ptr_mut(slot as u32) {
        // SAFETY: per-CPU slot; a uprobe program does not nest on one CPU.
        unsafe { *hits += 1 };
    }
    0
}

/// Go's register ABI on amd64 (ABIInternal, Go ≥ 1.17): integer arguments
/// and results in RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11; the current
/// goroutine's `g` in R14. The one place that knows it.
pub(crate) mod go_abi {
    use aya_ebpf::programs::ProbeContext;
    use tracer_common::{drop_reason::DropReason, io::GO_AT_STACK_CHECK};

    use crate::kernel_read::read_user;

    /// x86 RFLAGS bits the stack check's `JBE` jumps on.
    const CARRY_FLAG: u64 = 1 << 0;
    const ZERO_FLAG: u64 = 1 << 6;

    /// Whether this hit, of an entry probe on the stack check's `JBE`
    /// (`cookie` has [`GO_AT_STACK_CHECK`]), is a call about to grow its
    /// stack: the `CMP` before set CF or ZF, the jump goes to morestack and
    /// the prologue runs again, to be hit again. The caller ignores it.
    #[inline(always)]
    pub(crate) fn growing_stack(ctx: &ProbeContext, cookie: u64) -> bool {
        // SAFETY: `regs` is the pt_regs the kernel passed to the uprobe.
        let flags = unsafe { (*ctx.regs).eflags };
        cookie & GO_AT_STACK_CHECK != 0 && flags & (CARRY_FLAG | ZERO_FLAG) != 0
    }

    /// The `n`th integer argument word (0-based) at a function's entry, or
    /// the `n`th result word at a RET.
    #[inline(always)]
    pub(crate) fn word(ctx: &ProbeContext, n: usize) -> u64 {
        // SAFETY: `regs` is the pt_regs the kernel passed to the uprobe.
        let regs = unsafe { &*ctx.regs };
        match n {
            0 => regs.rax,
            1 => regs.rbx,
            2 => regs.rcx,
            3 => regs.rdi,
            4 => regs.rsi,
            5 => regs.r8,
            6 => regs.r9,
            7 => regs.r10,
            _ => regs.r11,
        }
    }

    /// The word at `RSP + offset`: an argument homed in the caller's spill
    /// area (user space found where from the function's prologue).
    #[inline(always)]
    pub(crate) fn stack_word(ctx: &ProbeContext, offset: u64) -> Result<u64, DropReason> {
        // SAFETY: `regs` is the pt_regs the kernel passed to the uprobe.
        let sp = unsafe { (*ctx.regs).rsp };
        read_user::<u64>(sp + offset).map_err(|_| DropReason::TlsConnUnresolved)
    }

    /// The running goroutine's `runtime.g` address.
    #[inline(always)]
    pub(crate) fn current_g(ctx: &ProbeContext) -> u64 {
        // SAFETY: as above.
        unsafe { (*ctx.regs).r14 }
    }
}

/// Wrappers around a `net.Conn` that are looked through (cmux's `MuxConn`,
/// limit and keepalive listeners' conns, …) before giving up.
const MAX_CONN_WRAPPERS: usize = 3;

/// The followed socket behind a `*crypto/tls.Conn`: its `conn` field is a
/// `net.Conn` interface whose data word points to a `*net.TCPConn` (or
/// `*net.UnixConn`, same layout), whose `fd` is a `*net.netFD` holding the
/// fd number in `pfd.Sysfd`. Servers often wrap the connection first (etcd's
/// cmux); such wrappers embed the `net.Conn` as their first field, so when a
/// candidate does not lead to a followed socket of this process, the data
/// word of the interface at its start is tried next — and last, client-go's
/// `closableConn`, whose `net.Conn` follows a func field. `None` for a
/// process that is not a component and for a connection user space muted
/// (`MUTED_CONNS`): nothing to copy.
#[inline(always)]
fn tls_conn_socket(
    tgid: u32,
    tls_conn: u64,
    cookie: u64,
) -> Result<Option<(u32, FdInfo)>, DropReason> {
    let key = GoTlsConnKey {
        tgid,
        _pad: 0,
        tls_conn,
    };
    let mut cached = None;
    // SAFETY: the value is copied out at once.
    if let Some(known) = unsafe { GO_TLS_CONNS.get(key) }.copied() {
        let fd_key = FdKey { tgid, fd: known.fd };
        // SAFETY: as above.
        match unsafe { FDS.get(fd_key) }.copied() {
            // Still the same socket on that fd: no need to walk the chain.
            Some(info) if info.conn_id == known.conn_id => cached = Some((known.fd, info)),
            _ => {}
        }
    }
    let (fd, info) = match cached {
        Some(found) => found,
        None => {
            if !is_component(tgid) {
                return Ok(None);
            }
            let (fd, info) = walk_tls_conn(tgid, tls_conn, cookie)?;
            let known = GoTlsConn {
                conn_id: info.conn_id,
                fd,
                _pad: 0,
            };
            let _ = GO_TLS_CONNS.insert(key, known, 0);
            (fd, info)
        }
    };
    // A muted connection's hit ends here, after two lookups: most hits on
    // a control plane's etcd connections are such.
    if muted(tgid, info.conn_id) {
        return Ok(None);
    }
    // Entries are made for components only; this is for a process that
    // ended, leaving them, and whose tgid was reused.
    if cached.is_some() && !is_component(tgid) {
        return Ok(None);
    }
    Ok(Some((fd, info)))
}

/// [`tls_conn_socket`] the long way, through the `net.Conn` chain.
#[inline(always)]
fn walk_tls_conn(tgid: u32, tls_conn: u64, cookie: u64) -> Result<(u32, FdInfo), DropReason> {
    let offsets = GO_BINARIES
        .get(cookie as u32)
        .copied()
        .ok_or(DropReason::TlsConnUnresolved)?;
    let unresolved = |_| DropReason::TlsConnUnresolved;
    let outer =
        read_user::<u64>(tls_conn + u64::from(offsets.tls_conn_conn) + 8).map_err(unresolved)?;
    let mut conn = outer;
    for _ in 0..=MAX_CONN_WRAPPERS {
        if let Some(found) = followed_socket(tgid, conn, &offsets) {
            return Ok(found);
        }
        // Not a *net.TCPConn: look inside, at the net.Conn a wrapper embeds.
        match read_user::<u64>(conn + 8) {
            Ok(inner) => conn = inner,
            Err(_) => break,
        }
    }
    // client-go's certificate-rotating dialer (kubeconfigs with client
    // certificate files: kube-scheduler, the kubelet, controllers) wraps the
    // TCP connection in `closableConn{onClose func(); net.Conn}`: the
    // embedded interface's data word is at +16.
    let inner = read_user::<u64>(outer + 16).map_err(unresolved)?;
    followed_socket(tgid, inner, &offsets).ok_or(DropReason::TlsConnUnresolved)
}

/// The followed socket of `tgid` if `conn` is a `*net.TCPConn`/`*net.UnixConn`.
#[inline(always)]
fn followed_socket(tgid: u32, conn: u64, offsets: &GoTlsOffsets) -> Option<(u32, FdInfo)> {
    let net_fd = read_user::<u64>(conn + u64::from(offsets.tcp_conn_fd)).ok()?;
    let fd = read_user::<i64>(net_fd + u64::from(offsets.net_fd_sysfd)).ok()?;
    if !(0..=i64::from(i32::MAX)).contains(&fd) {
        return None;
    }
    let key = FdKey {
        tgid,
        fd: fd as u32,
    };
    let entry = FDS.get_ptr_mut(key)?;
    // SAFETY: a map value; copied out at once.
    let mut info = unsafe { *entry };
    if info.kind != FdKind::Socket as u8 {
        return None;
    }
    if info.flags & FD_TLS == 0 {
        // From now on the syscall programs leave this socket's ciphertext
        // alone. In place: a copy inserted back could undo a bit another
        // CPU set meanwhile.
        set_fd_flags(entry, FD_TLS);
        info.flags |= FD_TLS;
    }
    Some((fd as u32, info))
}

/// The process and thread, if the process is a component podtrace captures.
#[inline(always)]
pub(crate) fn component_ids() -> Option<Ids> {
    let ids = Ids::current();
    is_component(ids.tgid).then_some(ids)
}

/// Whether the process is a component itself (a target at depth 0), not a
/// container it started.
#[inline(always)]
fn is_component(tgid: u32) -> bool {
    target_of(tgid).is_some_and(|target| target.depth == 0)
}

#[inline(always)]
pub(crate) fn attach_cookie(ctx: &ProbeContext) -> u64 {
    // SAFETY: the context pointer is the one the kernel passed to this program.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) }
}

/// `func (c *Conn) Write(b []byte) (int, error)`, at entry: the plaintext.
#[uprobe]
fn go_tls_write(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_tls_write(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_tls_write(ctx: &ProbeContext) -> Result<(), DropReason> {
    let cookie = attach_cookie(ctx);
    if go_abi::growing_stack(ctx, cookie) {
        return Ok(());
    }
    let ids = Ids::current();
    let (tls_conn, buf, len) = (
        go_abi::word(ctx, 0),
        go_abi::word(ctx, 1),
        go_abi::word(ctx, 2),
    );
    let Some((fd, info)) = tls_conn_socket(ids.tgid, tls_conn, cookie)? else {
        return Ok(());
    };
    if tls_keys::keyed(&info, Direction::Egress) {
        // Its ciphertext is copied from the syscalls and decrypted.
        return Ok(());
    }
    let secret = tls_keys::offsets(cookie)
        .and_then(|offsets| tls_keys::read_secret(tls_conn, &offsets, Direction::Egress));
    if let Some(secret) = secret {
        // None of this write's records is sealed yet: they are the first
        // ciphertext to decrypt, and its plaintext is not sent.
        tls_keys::send(ids, fd, &info, Direction::Egress, &secret)?;
        tls_keys::mark_keyed(ids.tgid, fd, &info, Direction::Egress);
        return Ok(());
    }
    if hpack_table::sync_wanted() {
        // The encoder's table now includes every block in this write and
        // before: the copy goes ahead of the write's record.
        let g = go_abi::current_g(ctx);
        hpack_table::copy_if_asked(ids, info.conn_id, g, HeaderSide::Encoder);
    }
    let call = tls_call(fd, info, buf, len, IoSyscall::Write, now_ns());
    data_parts::<MAX_TLS_PARTS>(
        ids,
        &call,
        IoSyscall::Write,
        len as i64,
        buf,
        DATA_GO_TLS,
        call.ts_ns,
    )
}

/// `func (c *Conn) Read(b []byte) (int, error)`, at entry: remember the buffer.
#[uprobe]
fn go_tls_read(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_tls_read(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_tls_read(ctx: &ProbeContext) -> Result<(), DropReason> {
    let cookie = attach_cookie(ctx);
    if go_abi::growing_stack(ctx, cookie) {
        return Ok(());
    }
    let ids = Ids::current();
    let Some((fd, info)) = tls_conn_socket(ids.tgid, go_abi::word(ctx, 0), cookie)? else {
        return Ok(());
    };
    let g = go_abi::current_g(ctx);
    if hpack_table::sync_wanted() {
        // Go's reader asks for bytes only once it has parsed every whole
        // frame before: the decoder's table is that of the bytes so far.
        hpack_table::copy_if_asked(ids, info.conn_id, g, HeaderSide::Decoder);
    }
    let key = GoCallKey {
        tgid: ids.tgid,
        _pad: 0,
        g,
    };
    let read = GoTlsRead {
        ts_ns: now_ns(),
        buf: go_abi::word(ctx, 1),
        conn_id: info.conn_id,
        fd,
        _pad: 0,
    };
    GO_TLS_READS
        .insert(key, read, 0)
        .map_err(|_| DropReason::GoReadsFull)
}

/// Each RET of `crypto/tls.(*Conn).Read`: `n` is in RAX; the plaintext is in
/// the buffer the entry saw.
#[uprobe]
fn go_tls_read_ret(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_tls_read_ret(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_tls_read_ret(ctx: &ProbeContext) -> Result<(), DropReason> {
    let Some(ids) = component_ids() else {
        return Ok(());
    };
    let cookie = attach_cookie(ctx);
    if cookie & GO_TLS_READ_ARGS_AT_RET != 0 {
        return tls_read_ret_from_spill_slots(ctx, ids, cookie);
    }
    let key = GoCallKey {
        tgid: ids.tgid,
        _pad: 0,
        g: go_abi::current_g(ctx),
    };
    // SAFETY: the value is copied out before the entry is removed.
    let Some(read) = (unsafe { GO_TLS_READS.get(key) }).copied() else {
        return Ok(());
    };
    let _ = GO_TLS_READS.remove(key);
    let n = go_abi::word(ctx, 0) as i64;
    let info = FdInfo {
        conn_id: read.conn_id,
        kind: FdKind::Socket as u8,
        flags: FD_TLS,
        _pad: [0; 6],
    };
    let call = tls_call(
        read.fd,
        info,
        read.buf,
        n as u64,
        IoSyscall::Read,
        read.ts_ns,
    );
    data_parts::<MAX_TLS_PARTS>(
        ids,
        &call,
        IoSyscall::Read,
        n,
        read.buf,
        DATA_GO_TLS,
        now_ns(),
    )
}

/// A RET of a `Read` whose receiver and buffer stay in the caller's spill
/// slots (user space checked its machine code): `[RSP+8]` is `c`,
/// `[RSP+16]` `b`'s pointer — one probe per read instead of two.
#[inline(always)]
fn tls_read_ret_from_spill_slots(
    ctx: &ProbeContext,
    ids: Ids,
    cookie: u64,
) -> Result<(), DropReason> {
    let tls_conn = go_abi::stack_word(ctx, 8)?;
    let buf = go_abi::stack_word(ctx, 16)?;
    let Some((fd, info)) = tls_conn_socket(ids.tgid, tls_conn, cookie)? else {
        return Ok(());
    };
    tls_plaintext_read(ctx, ids, fd, info, buf, go_abi::word(ctx, 0))
}

/// `n` bytes of plaintext at `addr` that a Read hands to its caller, which
/// has not parsed them yet: a copy of the connection's HPACK decoder table
/// taken now is that of the bytes before them, as at the read's entry.
#[inline(always)]
fn tls_plaintext_read(
    ctx: &ProbeContext,
    ids: Ids,
    fd: u32,
    info: FdInfo,
    addr: u64,
    n: u64,
) -> Result<(), DropReason> {
    if hpack_table::sync_wanted() {
        let g = go_abi::current_g(ctx);
        hpack_table::copy_if_asked(ids, info.conn_id, g, HeaderSide::Decoder);
    }
    let call = tls_call(fd, info, addr, n, IoSyscall::Read, now_ns());
    data_parts::<MAX_TLS_PARTS>(
        ids,
        &call,
        IoSyscall::Read,
        n as i64,
        addr,
        DATA_GO_TLS,
        call.ts_ns,
    )
}

/// `(*Conn).Read`'s call to `runtime.memmove` (`copy(b, c.input...)`,
/// inlined): `from` (RBX) holds the plaintext and `n` (RCX) its length, and
/// `c` is in its spill slot at RSP plus the offset the cookie carries. One
/// emulated trap per read, where a RET probe costs a single-step too.
#[uprobe]
fn go_tls_read_copy(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_tls_read_copy(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_tls_read_copy(ctx: &ProbeContext) -> Result<(), DropReason> {
    let ids = Ids::current();
    let cookie = attach_cookie(ctx);
    let tls_conn = go_abi::stack_word(ctx, cookie >> GO_TLS_COPY_SPILL_SHIFT)?;
    let Some((fd, info)) = tls_conn_socket(ids.tgid, tls_conn, cookie)? else {
        return Ok(());
    };
    if tls_keys::keyed(&info, Direction::Ingress) {
        return Ok(());
    }
    // runtime.memmove(to, from, n): RBX and RCX.
    let (from, n) = (go_abi::word(ctx, 1), go_abi::word(ctx, 2));
    if let Some(offsets) = tls_keys::offsets(cookie) {
        if let Some(secret) = tls_keys::read_secret(tls_conn, &offsets, Direction::Ingress) {
            return key_read(ctx, ids, (fd, info), tls_conn, &offsets, &secret, from);
        }
    }
    tls_plaintext_read(ctx, ids, fd, info, from, n)
}

/// The read whose copy starts at `from` switches its direction to
/// ciphertext (see [`tls_keys`]): the rest of the record being handed out in
/// plaintext, the secret, then the ciphertext Go read and has not decrypted.
#[inline(always)]
fn key_read(
    ctx: &ProbeContext,
    ids: Ids,
    (fd, info): (u32, FdInfo),
    tls_conn: u64,
    offsets: &GoTlsOffsets,
    secret: &tls_keys::Secret,
    from: u64,
) -> Result<(), DropReason> {
    let field = |offset: u16| tls_conn + u64::from(offset);
    let unresolved = |_| DropReason::TlsConnUnresolved;
    // input: bytes.Reader{s []byte; i int64}; the copy starts at s[i].
    let record_len = read_user::<u64>(field(offsets.tls_conn_input_s) + 8).map_err(unresolved)?;
    let taken = read_user::<u64>(field(offsets.tls_conn_input_i)).map_err(unresolved)?;
    tls_plaintext_read(ctx, ids, fd, info, from, record_len.saturating_sub(taken))?;
    tls_keys::send(ids, fd, &info, Direction::Ingress, secret)?;
    // rawInput: bytes.Buffer{buf []byte; off int}: buf[off:] is undecrypted.
    let raw = read_user::<u64>(field(offsets.tls_conn_raw_input_buf)).map_err(unresolved)?;
    let raw_len =
        read_user::<u64>(field(offsets.tls_conn_raw_input_buf) + 8).map_err(unresolved)?;
    let raw_off = read_user::<u64>(field(offsets.tls_conn_raw_input_off)).map_err(unresolved)?;
    let unread = raw_len.saturating_sub(raw_off);
    tls_keys::mark_keyed(ids.tgid, fd, &info, Direction::Ingress);
    if unread == 0 {
        return Ok(());
    }
    let call = tls_call(fd, info, raw + raw_off, unread, IoSyscall::Read, now_ns());
    // Flags 0: ciphertext, as the syscall programs copy it.
    data_parts::<MAX_TLS_PARTS>(
        ids,
        &call,
        IoSyscall::Read,
        unread as i64,
        raw + raw_off,
        0,
        call.ts_ns,
    )
}

/// `func (hc *halfConn) setTrafficSecret(suite *cipherSuiteTLS13, [level
/// QUICEncryptionLevel,] secret []byte)`, at entry: a TLS 1.3 connection's
/// direction gets a new secret (handshake, application, KeyUpdate), with
/// which its next records are sealed from number 0. Sent at once, the
/// direction is keyed before any of them is read or written — so a
/// connection podtrace saw open never needs the per-call TLS probes.
///
/// `hc` is `&c.in` or `&c.out` of its `*tls.Conn`: the one whose `c` leads to
/// a followed socket of a TLS 1.3 connection says which.
#[uprobe]
fn go_tls_secret(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_tls_secret(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_tls_secret(ctx: &ProbeContext) -> Result<(), DropReason> {
    let cookie = attach_cookie(ctx);
    if go_abi::growing_stack(ctx, cookie) {
        return Ok(());
    }
    let Some(ids) = component_ids() else {
        return Ok(());
    };
    let offsets = tls_keys::offsets(cookie).ok_or(DropReason::TlsConnUnresolved)?;
    let half = go_abi::word(ctx, 0);
    let suite = go_abi::word(ctx, 1);
    // All three words read, then chosen: the verifier refuses a context
    // read at an offset computed at run time.
    let words = [
        go_abi::word(ctx, 2),
        go_abi::word(ctx, 3),
        go_abi::word(ctx, 4),
    ];
    let (addr, len) = if cookie & GO_TLS_SECRET_LEVEL_ARG != 0 {
        (words[1], words[2])
    } else {
        (words[0], words[1])
    };
    for direction in [Direction::Ingress, Direction::Egress] {
        let field = match direction {
            Direction::Ingress => offsets.tls_conn_in,
            Direction::Egress => offsets.tls_conn_out,
        };
        let tls_conn = half.wrapping_sub(u64::from(field));
        let Ok((fd, info)) = walk_tls_conn(ids.tgid, tls_conn, cookie) else {
            continue;
        };
        let Some(secret) = tls_keys::handshake_secret(tls_conn, &offsets, suite, addr, len) else {
            continue;
        };
        if muted(ids.tgid, info.conn_id) {
            return Ok(());
        }
        tls_keys::send(ids, fd, &info, direction, &secret)?;
        tls_keys::mark_keyed(ids.tgid, fd, &info, direction);
        return Ok(());
    }
    Ok(())
}

/// The syscall-shaped record the data path takes, entered at `ts_ns`.
#[inline(always)]
fn tls_call(
    fd: u32,
    info: FdInfo,
    buf: u64,
    len: u64,
    syscall: IoSyscall,
    ts_ns: u64,
) -> ActiveCall {
    ActiveCall {
        ts_ns,
        args: [u64::from(fd), buf, len],
        conn_id: info.conn_id,
        syscall: syscall as u8,
        fd_kind: FdKind::Socket as u8,
        pending: 1,
        _pad: [0; 5],
    }
}

/// `hpack.(*Encoder).WriteField(f HeaderField)` and
/// `hpack.(*Decoder).callEmit(hf HeaderField)`, at entry: the field in
/// plaintext. `HeaderField{Name, Value string; Sensitive bool}` arrives in
/// registers after the receiver: name pointer and length, value pointer and
/// length, sensitive.
#[uprobe]
fn go_hpack_field(ctx: ProbeContext) -> u32 {
    if let Err(reason) = try_hpack_field(&ctx) {
        count_drop(reason);
    }
    0
}

#[inline(always)]
fn try_hpack_field(ctx: &ProbeContext) -> Result<(), DropReason> {
    let cookie = attach_cookie(ctx);
    if go_abi::growing_stack(ctx, cookie) {
        return Ok(());
    }
    let Some(ids) = component_ids() else {
        return Ok(());
    };
    let cookie = cookie as u8;
    let coder = go_abi::word(ctx, 0);
    if hpack_table::sync_wanted() {
        if let Ok(side) = HeaderSide::try_from(cookie) {
            hpack_table::note_coder(ids.tgid, go_abi::current_g(ctx), side, coder);
        }
    }
    let (name_ptr, name_len) = (go_abi::word(ctx, 1), go_abi::word(ctx, 2));
    let (value_ptr, value_len) = (go_abi::word(ctx, 3), go_abi::word(ctx, 4));
    let sensitive = go_abi::word(ctx, 5) & 0xff != 0;
    if name_len == 0 || name_len > HEADER_NAME_BYTES as u64 {
        return Ok(());
    }
    let mut entry = EVENTS
        .reserve::<HeaderEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    let name_size = (name_len as u32) & (HEADER_NAME_BYTES as u32 - 1);
    // SAFETY: a ring buffer reservation of size_of::<HeaderEvent>() bytes
    // that only this program owns until submit or discard; sizes are masked
    // below the arrays' lengths.
    let wanted = unsafe {
        let name = (&raw mut (*event).name).cast::<u8>();
        read_user_bytes(name, name_size, name_ptr).is_ok()
            && hpack_table::wanted_header(&(*event).name, name_size)
    };
    if !wanted {
        entry.discard(BPF_RB_NO_WAKEUP);
        return Ok(());
    }
    let mut flags = 0;
    let copied = if sensitive {
        flags |= HEADER_VALUE_REDACTED;
        0
    } else {
        if value_len > HEADER_VALUE_BYTES as u64 - 1 {
            flags |= HEADER_VALUE_TRUNCATED;
        }
        let size =
            (value_len.min(HEADER_VALUE_BYTES as u64 - 1) as u32) & (HEADER_VALUE_BYTES as u32 - 1);
        // SAFETY: as above.
        let value = unsafe { (&raw mut (*event).value).cast::<u8>() };
        // SAFETY: size < HEADER_VALUE_BYTES.
        if unsafe { read_user_bytes(value, size, value_ptr) }.is_err() {
            count_drop(DropReason::ReadFailed);
            0
        } else {
            size
        }
    };
    // SAFETY: as above.
    unsafe {
        (*event).header = header(EventKind::Header, now_ns(), ids);
        (*event).side = cookie;
        (*event).flags = flags;
        (*event).name_len = name_size as u8;
        (*event)._pad = 0;
        (*event).value_len = copied as u16;
        (*event).coder_tag = coder_tag(coder);
    }
    entry.submit(submit_flags(size_of::<HeaderEvent>()));
    Ok(())
}
