//! Socket, WAL file and fsync capture on the `sys_enter` and `sys_exit` raw
//! tracepoints.
//!
//! Every syscall enters [`sys_enter`] and [`sys_exit`]; a hooked one
//! (`tracer_common::io::IoSyscall`) goes on, by tail call, to its own enter
//! program, which keeps the arguments in `ACTIVE_CALLS`, and exit program,
//! which acts on the result — one program per syscall and side keeps each
//! small enough for the verifier. Both return at once unless the process is
//! a target at depth 0 (a Kubernetes component itself, not a container it
//! started) and, for data syscalls, the fd is one podtrace follows (`FDS`):
//! sockets from connect and accept (and /proc at start), WAL files from
//! openat in etcd.
//!
//! Raw tracepoint arguments (include/trace/events/syscalls.h, v6.18):
//! `sys_enter(struct pt_regs *regs, long id)`, `sys_exit(struct pt_regs
//! *regs, long ret)`; the syscall's arguments are in `regs` (x86-64: `di`,
//! `si`, `dx`), its number at exit in `regs->orig_ax`. 32-bit (ia32)
//! syscalls have other numbers and are skipped, as the syscall tracepoints
//! skipped them.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use tracer_common::{
    config::{TARGET_TLS_CALLS_DETACHED, TARGET_WAL},
    drop_reason::DropReason,
    event::{EventKind, FILENAME_BYTES},
    io::{
        AF_INET, AF_INET6, AF_UNIX, ActiveCall, ConnAction, ConnEvent, DATA_BYTES_MAX,
        DATA_TRUNCATED, DataEvent, Direction, FD_TLS, FdInfo, FdKey, FdKind, FileOpenEvent,
        FsyncEvent, HeaderSide, IoSyscall, MAX_IOVECS, ProcessConnKey, UNIX_PATH_BYTES,
    },
};

use crate::{
    hpack_table,
    kernel_read::{Space, read_kernel, read_str, read_user, read_user_bytes},
    maps::{
        ACTIVE_CALLS, BPF_RB_NO_WAKEUP, EVENTS, FDS, MUTED_CONNS, SCRATCH, SCRATCH_BYTES,
        SYSCALL_PROGRAMS, config, count_drop, does_io, output_flags, submit_flags, target_of,
    },
    record::{Ids, header, now_ns},
    tls_keys::keyed_flag,
};

/// Offsets in x86-64 `struct pt_regs` (arch/x86/include/asm/ptrace.h): the
/// first three syscall arguments, the syscall number, the code segment.
const PT_REGS_ARGS: [u32; 3] = [112, 104, 96];
const PT_REGS_ORIG_AX: u32 = 120;
/// `r14`: the running goroutine's `runtime.g` in Go code.
const PT_REGS_R14: u32 = 8;
const PT_REGS_CS: u32 = 136;
/// `__USER32_CS`: the code segment of a 32-bit task (ia32 syscall numbers).
const USER32_CS: u64 = 0x23;
/// Records the bytes of one buffer a read or write moved are split into at
/// most, of 8191 bytes each (a WAL write's, a socket's): 8 parts keep whole
/// the 33–41 KiB writes etcd makes to its WAL under a load of 16 writers (4
/// parts cut ~65 a second), and the reads of up to 64 KiB Go's TLS makes
/// when records queue (kube-apiserver's etcd client under a burst of 50
/// Pods: one cut at 32 KiB took the records after it, a binding's Txn
/// among them); on a plain HTTP/2 connection a read returns several
/// responses at once, and one cut lost the header blocks in its tail and
/// with them the HPACK state of that direction. 16 parts make `sys_exit`
/// too large for the verifier (E2BIG); one loop serves both kinds of fd.
const MAX_DATA_PARTS: u32 = 8;
/// `EINPROGRESS`: a non-blocking connect (Go's) that is under way.
const EINPROGRESS: i64 = 115;

/// Every syscall's entry: a hooked one of a process whose I/O is followed
/// (`IO_PROCESSES`: one array read, where every process on the node passes)
/// goes on to its enter program, which checks for 32-bit code itself once it
/// knows the call is worth keeping (most hooked calls are not: reads and
/// writes of sockets whose plaintext the TLS probes deliver).
#[raw_tracepoint(tracepoint = "sys_enter")]
fn sys_enter(ctx: RawTracePointContext) -> i32 {
    let nr: i64 = ctx.arg(1);
    if let Some(syscall) = IoSyscall::from_x86_64_nr(nr) {
        if !does_io((bpf_get_current_pid_tgid() >> 32) as u32) {
            return 0;
        }
        // SAFETY: the context is this program's; the slot holds a raw
        // tracepoint program, as the kernel checks.
        unsafe { SYSCALL_PROGRAMS.tail_call(&ctx, syscall.enter_slot()) };
        // Only reached when the slot is empty.
        count_drop(DropReason::ProbeSlotOutOfRange);
    }
    0
}

/// Every syscall's return: one whose enter program kept it pending
/// (`ACTIVE_CALLS`) goes on to its exit program. Asked only for processes
/// whose I/O is followed (`IO_PROCESSES`, as at entry); the lookup spares
/// every other hooked call the tail call; the enter program checked for
/// 32-bit code, and a thread does not change mode inside a syscall.
#[raw_tracepoint(tracepoint = "sys_exit")]
fn sys_exit(ctx: RawTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !does_io((pid_tgid >> 32) as u32) {
        return 0;
    }
    let regs: u64 = ctx.arg(0);
    let Ok(nr) = read_kernel::<i64>(regs, PT_REGS_ORIG_AX) else {
        return 0;
    };
    if let Some(syscall) = IoSyscall::from_x86_64_nr(nr) {
        // SAFETY: one byte is read from the value.
        if unsafe { ACTIVE_CALLS.get(pid_tgid) }.is_some_and(|call| call.pending != 0) {
            // SAFETY: as in `sys_enter`.
            unsafe { SYSCALL_PROGRAMS.tail_call(&ctx, syscall.exit_slot()) };
            count_drop(DropReason::ProbeSlotOutOfRange);
        }
    }
    0
}

/// Whether the syscall was made by 32-bit code, whose numbers are not x86-64's.
#[inline(always)]
fn ia32(regs: u64) -> bool {
    read_kernel::<u64>(regs, PT_REGS_CS).is_ok_and(|cs| cs == USER32_CS)
}

/// One enter and one exit program per syscall, each a thin wrapper around the
/// shared handlers, tail-called from `sys_enter` and `sys_exit`.
macro_rules! syscall_programs {
    ($($syscall:ident: $enter:ident, $exit:ident;)+) => {
        $(
            #[raw_tracepoint]
            fn $enter(ctx: RawTracePointContext) -> i32 {
                if let Err(reason) = on_enter(&ctx, IoSyscall::$syscall) {
                    count_drop(reason);
                }
                0
            }

            #[raw_tracepoint]
            fn $exit(ctx: RawTracePointContext) -> i32 {
                if let Err(reason) = on_exit(&ctx, IoSyscall::$syscall) {
                    count_drop(reason);
                }
                0
            }
        )+
    };
}

syscall_programs! {
    Read: sys_enter_read, sys_exit_read;
    Write: sys_enter_write, sys_exit_write;
    Readv: sys_enter_readv, sys_exit_readv;
    Writev: sys_enter_writev, sys_exit_writev;
    Sendto: sys_enter_sendto, sys_exit_sendto;
    Recvfrom: sys_enter_recvfrom, sys_exit_recvfrom;
    Sendmsg: sys_enter_sendmsg, sys_exit_sendmsg;
    Recvmsg: sys_enter_recvmsg, sys_exit_recvmsg;
    Connect: sys_enter_connect, sys_exit_connect;
    Accept: sys_enter_accept, sys_exit_accept;
    Accept4: sys_enter_accept4, sys_exit_accept4;
    Close: sys_enter_close, sys_exit_close;
    Fsync: sys_enter_fsync, sys_exit_fsync;
    Fdatasync: sys_enter_fdatasync, sys_exit_fdatasync;
    Openat: sys_enter_openat, sys_exit_openat;
}

/// A new connection or file identity: the time, with the CPU in the low
/// byte, so two CPUs never produce the same id. Top bit clear (kernel ids).
#[inline(always)]
fn new_conn_id() -> u64 {
    // SAFETY: helper without arguments.
    let cpu = u64::from(unsafe { bpf_get_smp_processor_id() }) & 0xff;
    ((now_ns() << 8) | cpu) & !tracer_common::io::USER_CONN_ID_BIT
}

/// The `index`th argument of the syscall being entered.
#[inline(always)]
fn arg(ctx: &RawTracePointContext, index: usize) -> Result<u64, DropReason> {
    read_kernel::<u64>(ctx.arg(0), PT_REGS_ARGS[index]).map_err(|_| DropReason::ReadFailed)
}

#[inline(always)]
fn on_enter(ctx: &RawTracePointContext, syscall: IoSyscall) -> Result<(), DropReason> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let first_arg = arg(ctx, 0)?;
    let followed = match syscall {
        // These create the fds podtrace follows.
        IoSyscall::Connect | IoSyscall::Accept | IoSyscall::Accept4 | IoSyscall::Openat => None,
        // The rest act on an fd that must already be followed: asked first,
        // as it rules out most calls in one lookup (the target check below
        // is for a followed fd whose process ended and whose tgid was reused).
        _ => {
            let key = FdKey {
                tgid,
                fd: first_arg as u32,
            };
            // SAFETY: the value is copied out at once.
            match unsafe { FDS.get(key) }.copied() {
                // Go's TLS probes deliver this socket's plaintext; its
                // ciphertext would only be the same bytes again, encrypted —
                // unless the direction's secret was sent (`tls_keys`), or
                // the probes are detached from the process.
                Some(info)
                    if info.flags & FD_TLS != 0
                        && syscall
                            .direction()
                            .is_some_and(|direction| info.flags & keyed_flag(direction) == 0)
                        && !target_of(tgid).is_some_and(|target| {
                            target.flags & TARGET_TLS_CALLS_DETACHED != 0
                        }) =>
                {
                    return Ok(());
                }
                // Bytes of a socket user space muted: nothing to keep.
                Some(info)
                    if info.kind == FdKind::Socket as u8
                        && syscall.direction().is_some()
                        && muted(tgid, info.conn_id) =>
                {
                    return Ok(());
                }
                Some(info) => Some(info),
                None => return Ok(()),
            }
        }
    };
    let Some(target) = target_of(tgid) else {
        return Ok(());
    };
    // `sys_enter` asked `IO_PROCESSES` the same, unless the tgid is beyond
    // the map's pids.
    if !target.does_io() || ia32(ctx.arg(0)) {
        return Ok(());
    }
    if syscall == IoSyscall::Openat && target.flags & TARGET_WAL == 0 {
        return Ok(());
    }
    if let Some(info) = followed {
        copy_hpack_table(ctx, pid_tgid, &info, syscall);
    }
    let call = ActiveCall {
        ts_ns: now_ns(),
        args: [first_arg, arg(ctx, 1)?, arg(ctx, 2)?],
        conn_id: followed.map_or(0, |info| info.conn_id),
        syscall: syscall as u8,
        fd_kind: followed.map_or(0, |info| info.kind),
        pending: 1,
        _pad: [0; 5],
    };
    // The thread's entry from its last hooked call, rewritten in place: a
    // hash map insert and delete a call (bucket lock, element taken from and
    // given back to the free list) cost several times this lookup.
    if let Some(slot) = ACTIVE_CALLS.get_ptr_mut(pid_tgid) {
        // SAFETY: a map value; only this thread uses its pid_tgid's entry.
        unsafe { slot.write(call) };
        return Ok(());
    }
    ACTIVE_CALLS
        .insert(pid_tgid, call, 0)
        .map_err(|_| DropReason::ActiveCallsFull)
}

/// The HPACK tables user space asked for (`hpack_table`) of a connection
/// whose plaintext no TLS probe sees: a plain HTTP/2 connection (the
/// kubelet's to containerd's unix socket, h2c), or a direction of a TLS one
/// read from its secret (`tls_keys`), whose probes are detached. Its reads
/// and writes are the same points of the byte stream as the TLS probes':
/// Go's reader asks for bytes only once it has parsed every whole frame it
/// has (crypto/tls reads the socket only once it has handed out every
/// record it opened), so the decoder's table is that of the bytes so far;
/// its writer writes what it has encoded, so the encoder's includes this
/// write's blocks. The copy goes ahead of the call's record, made at exit.
/// The goroutine is in R14 at the syscall (Go's register ABI), as it is at
/// the TLS probes; in a process that is not Go no coder is noted for it.
#[inline(always)]
fn copy_hpack_table(ctx: &RawTracePointContext, pid_tgid: u64, info: &FdInfo, syscall: IoSyscall) {
    if info.kind != FdKind::Socket as u8 || !hpack_table::sync_wanted() {
        return;
    }
    let Some(direction) = syscall.direction() else {
        return;
    };
    let side = match direction {
        Direction::Ingress => HeaderSide::Decoder,
        Direction::Egress => HeaderSide::Encoder,
    };
    if info.flags & FD_TLS != 0 && info.flags & keyed_flag(direction) == 0 {
        // Its plaintext, and the copy, come from the TLS probes.
        return;
    }
    let Ok(g) = read_kernel::<u64>(ctx.arg(0), PT_REGS_R14) else {
        return;
    };
    hpack_table::copy_if_asked(Ids::from_pid_tgid(pid_tgid), info.conn_id, g, side);
}

#[inline(always)]
fn on_exit(ctx: &RawTracePointContext, syscall: IoSyscall) -> Result<(), DropReason> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(slot) = ACTIVE_CALLS.get_ptr_mut(pid_tgid) else {
        return Ok(());
    };
    // SAFETY: a map value only this thread uses; copied out, then marked
    // taken for the thread's next call.
    let call = unsafe {
        let call = *slot;
        (*slot).pending = 0;
        call
    };
    if call.pending == 0 || call.syscall != syscall as u8 {
        // An enter whose exit was never seen (the thread was killed); stale.
        return Ok(());
    }
    let ret: i64 = ctx.arg(1);
    let ids = Ids::from_pid_tgid(pid_tgid);
    match syscall {
        // A WAL write or a socket's read or write, in full up to
        // MAX_DATA_PARTS records: an entry or a TLS record past a cut is lost.
        IoSyscall::Read | IoSyscall::Write | IoSyscall::Sendto | IoSyscall::Recvfrom => {
            data_parts::<MAX_DATA_PARTS>(ids, &call, syscall, ret, call.args[1], 0, now_ns())
        }
        IoSyscall::Readv | IoSyscall::Writev => data_event(
            ids,
            &call,
            syscall,
            ret,
            Buffers::Iovecs {
                iov: call.args[1],
                count: call.args[2],
            },
            0,
            now_ns(),
        ),
        IoSyscall::Sendmsg | IoSyscall::Recvmsg => {
            // struct user_msghdr: msg_iov at 16, msg_iovlen at 24.
            let msghdr = call.args[1];
            let iov = read_user::<u64>(msghdr + 16).map_err(|_| DropReason::ReadFailed)?;
            let count = read_user::<u64>(msghdr + 24).map_err(|_| DropReason::ReadFailed)?;
            data_event(
                ids,
                &call,
                syscall,
                ret,
                Buffers::Iovecs { iov, count },
                0,
                now_ns(),
            )
        }
        IoSyscall::Connect if ret == 0 || ret == -EINPROGRESS => {
            let fd = call.args[0] as u32;
            socket_opened(ids, &call, ConnAction::Connected, fd, ret, call.args[1])
        }
        IoSyscall::Accept | IoSyscall::Accept4 if ret >= 0 => socket_opened(
            ids,
            &call,
            ConnAction::Accepted,
            ret as u32,
            ret,
            call.args[1],
        ),
        IoSyscall::Close => fd_closed(ids, &call, ret),
        IoSyscall::Fsync | IoSyscall::Fdatasync => fsync_event(ids, &call, syscall, ret),
        IoSyscall::Openat if ret >= 0 => file_opened(ids, &call, ret as u32),
        IoSyscall::Connect | IoSyscall::Accept | IoSyscall::Accept4 | IoSyscall::Openat => Ok(()),
    }
}

/// `len` bytes at `addr` in up to `PARTS` records of the configured prefix
/// each, for buffers whose every byte counts (a WAL write, the plaintext
/// of a Go TLS write or read: a cut one loses the HTTP/2 header blocks
/// after it). Each record carries its part's length as `ret`, so the
/// reader sees consecutive transfers of the same bytes; the last part is
/// given the whole rest, so [`data_event`] marks it cut (and counts it)
/// when the buffer was longer than all parts.
#[inline(always)]
pub(crate) fn data_parts<const PARTS: u32>(
    ids: Ids,
    call: &ActiveCall,
    syscall: IoSyscall,
    len: i64,
    addr: u64,
    source_flags: u8,
    ts_ns: u64,
) -> Result<(), DropReason> {
    let chunk = i64::from(config().data_bytes).clamp(1, DATA_BYTES_MAX as i64 - 1);
    let mut offset: i64 = 0;
    for index in 0..PARTS {
        if offset >= len {
            break;
        }
        let rest = len - offset;
        let part = if index + 1 == PARTS {
            rest
        } else {
            rest.min(chunk)
        };
        let buffers = Buffers::Single {
            addr: addr + offset as u64,
        };
        data_event(ids, call, syscall, part, buffers, source_flags, ts_ns)?;
        offset += rest.min(chunk);
    }
    Ok(())
}

/// Where a data syscall's bytes are.
pub(crate) enum Buffers {
    /// One buffer (read, write, sendto, recvfrom).
    Single { addr: u64 },
    /// An iovec array (readv, writev, and the msghdr of sendmsg/recvmsg).
    Iovecs { iov: u64, count: u64 },
}

/// `struct iovec`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Iovec {
    base: u64,
    len: u64,
}

/// Emits the first bytes a data syscall moved, assembled in the per-CPU
/// scratch buffer and copied to the ring buffer with their exact length;
/// `ts_ns` is when it returned (the caller's clock reading: under a
/// hypervisor each one is a paravirtual clock read worth saving).
#[inline(always)]
pub(crate) fn data_event(
    ids: Ids,
    call: &ActiveCall,
    syscall: IoSyscall,
    ret: i64,
    buffers: Buffers,
    source_flags: u8,
    ts_ns: u64,
) -> Result<(), DropReason> {
    if ret <= 0 {
        // EAGAIN from Go's non-blocking sockets, EOF, errors: no bytes moved.
        return Ok(());
    }
    let scratch = SCRATCH.get_ptr_mut(0).ok_or(DropReason::ReadFailed)?;
    let event = scratch.cast::<DataEvent>();
    // SAFETY: the scratch slot is SCRATCH_BYTES long and this CPU's alone;
    // DataEvent fits at its start; `data` points just past it.
    let data = unsafe { scratch.cast::<u8>().add(size_of::<DataEvent>()) };
    // At most DATA_BYTES_MAX - 1: lengths are masked with DATA_BYTES_MAX - 1
    // for the verifier, and a full DATA_BYTES_MAX would mask to nothing (every
    // write of 8 KiB or more used to keep 0 bytes).
    let wanted = (ret as u64)
        .min(u64::from(config().data_bytes))
        .min(DATA_BYTES_MAX as u64 - 1);
    let copied = match buffers {
        Buffers::Single { addr } => {
            let size = (wanted as u32) & (DATA_BYTES_MAX as u32 - 1);
            // SAFETY: size < DATA_BYTES_MAX and data has 2 * DATA_BYTES_MAX bytes.
            unsafe { read_user_bytes(data, size, addr) }.map_err(|_| DropReason::ReadFailed)?;
            u64::from(size)
        }
        Buffers::Iovecs { iov, count } => copy_iovecs(data, iov, count, wanted),
    };
    let truncated = copied < ret as u64;
    if truncated {
        count_drop(DropReason::DataTruncated);
    }
    let direction = syscall.direction().map_or(0, |direction| direction as u8);
    // SAFETY: as above; every field is written before the record is output.
    unsafe {
        event.write(DataEvent {
            header: header(EventKind::Data, ts_ns, ids),
            conn_id: call.conn_id,
            ret,
            enter_ts_ns: call.ts_ns,
            fd: call.args[0] as u32,
            data_len: copied as u32,
            syscall: syscall as u8,
            direction,
            fd_kind: call.fd_kind,
            flags: source_flags | if truncated { DATA_TRUNCATED } else { 0 },
            _pad: [0; 4],
        });
    }
    let len = (size_of::<DataEvent>() as u64 + (copied & (DATA_BYTES_MAX as u64 - 1))) as usize;
    if len > SCRATCH_BYTES {
        return Ok(());
    }
    // SAFETY: len <= SCRATCH_BYTES, all of it initialised above or by the copy.
    let record = unsafe { core::slice::from_raw_parts(scratch.cast::<u8>(), len) };
    EVENTS
        .output::<[u8]>(record, output_flags(len))
        .map_err(|_| DropReason::RingBufFull)
}

/// Whether user space stopped wanting this connection's bytes (`MUTED_CONNS`):
/// asked before anything else is done for a socket's data.
#[inline(always)]
pub(crate) fn muted(tgid: u32, conn_id: u64) -> bool {
    let key = ProcessConnKey {
        tgid,
        _pad: 0,
        conn_id,
    };
    // SAFETY: only whether the entry exists is read.
    unsafe { MUTED_CONNS.get(key) }.is_some()
}

/// Copies up to `wanted` bytes from an iovec array into `data`; returns the
/// bytes copied. Stops at the first unreadable iovec.
#[inline(always)]
fn copy_iovecs(data: *mut u8, iov: u64, count: u64, wanted: u64) -> u64 {
    let mut copied: u64 = 0;
    for index in 0..MAX_IOVECS as u64 {
        if index >= count || copied >= wanted {
            break;
        }
        let Ok(vec) = read_user::<Iovec>(iov + index * size_of::<Iovec>() as u64) else {
            count_drop(DropReason::ReadFailed);
            break;
        };
        let take = vec.len.min(wanted - copied);
        // The volatile reads keep LLVM from folding the masks into what it
        // knows of the values: the verifier needs to see them applied.
        // SAFETY: reads of initialised locals.
        let offset = unsafe { core::ptr::read_volatile(&copied) } as usize & (DATA_BYTES_MAX - 1);
        // SAFETY: as above.
        let size = unsafe { core::ptr::read_volatile(&take) } as u32 & (DATA_BYTES_MAX as u32 - 1);
        // SAFETY: offset < DATA_BYTES_MAX and size < DATA_BYTES_MAX, and data
        // has 2 * DATA_BYTES_MAX bytes.
        if unsafe { read_user_bytes(data.add(offset), size, vec.base) }.is_err() {
            count_drop(DropReason::ReadFailed);
            break;
        }
        copied += u64::from(size);
    }
    copied
}

/// Follows a socket a target connected or accepted, and reports it.
#[inline(always)]
fn socket_opened(
    ids: Ids,
    call: &ActiveCall,
    action: ConnAction,
    fd: u32,
    ret: i64,
    sockaddr: u64,
) -> Result<(), DropReason> {
    let family = if sockaddr == 0 {
        0
    } else {
        read_user::<u16>(sockaddr).unwrap_or(0)
    };
    if !matches!(family, 0 | AF_UNIX | AF_INET | AF_INET6) {
        // Netlink, packet and other sockets carry nothing podtrace decodes.
        return Ok(());
    }
    let conn_id = new_conn_id();
    let info = FdInfo {
        conn_id,
        kind: FdKind::Socket as u8,
        flags: 0,
        _pad: [0; 6],
    };
    FDS.insert(FdKey { tgid: ids.tgid, fd }, info, 0)
        .map_err(|_| DropReason::FdMapFull)?;

    let mut entry = EVENTS
        .reserve::<ConnEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    // SAFETY: a ring buffer reservation of size_of::<ConnEvent>() bytes that
    // only this program owns until submit; every field is written below.
    unsafe {
        (*event).header = header(EventKind::Conn, now_ns(), ids);
        (*event).conn_id = conn_id;
        (*event).ret = ret;
        (*event).fd = fd;
        (*event).family = family;
        (*event).action = action as u8;
        (*event).fd_kind = FdKind::Socket as u8;
        (*event)._pad = 0;
        (*event).local_port = 0;
        (*event)._pad2 = [0; 2];
        (*event)._tail = [0; 4];
        (*event).port = 0;
        (*event).unix_path_len = 0;
        (*event).addr = [0; 16];
        match family {
            AF_INET => {
                // struct sockaddr_in: port at 2 (network order), address at 4.
                (*event).port = u16::from_be(read_user::<u16>(sockaddr + 2).unwrap_or(0));
                let [a, b, c, d] = read_user::<[u8; 4]>(sockaddr + 4).unwrap_or([0; 4]);
                (*event).addr = [a, b, c, d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            }
            AF_INET6 => {
                // struct sockaddr_in6: port at 2, address at 8.
                (*event).port = u16::from_be(read_user::<u16>(sockaddr + 2).unwrap_or(0));
                (*event).addr = read_user::<[u8; 16]>(sockaddr + 8).unwrap_or([0; 16]);
            }
            AF_UNIX => {
                // struct sockaddr_un: sun_path at 2; the length is the addrlen
                // argument of connect (accept's is a pointer: read to the NUL).
                let path = read_user::<[u8; UNIX_PATH_BYTES]>(sockaddr + 2)
                    .unwrap_or([0; UNIX_PATH_BYTES]);
                let len = if action == ConnAction::Connected {
                    (call.args[2].saturating_sub(2) as usize).min(UNIX_PATH_BYTES)
                } else {
                    path.iter().position(|&b| b == 0).unwrap_or(UNIX_PATH_BYTES)
                };
                (*event).unix_path = path;
                (*event).unix_path_len = len as u8;
            }
            _ => {}
        }
    }
    entry.submit(submit_flags(size_of::<ConnEvent>()));
    Ok(())
}

/// Stops following a closed fd and reports it.
#[inline(always)]
fn fd_closed(ids: Ids, call: &ActiveCall, ret: i64) -> Result<(), DropReason> {
    let fd = call.args[0] as u32;
    let key = FdKey { tgid: ids.tgid, fd };
    // close(2) frees the fd number before it returns: an accept or connect
    // on another thread may already follow a new socket under it.
    // SAFETY: the value is read at once.
    if unsafe { FDS.get(key) }.is_some_and(|info| info.conn_id == call.conn_id) {
        let _ = FDS.remove(key);
    }
    let mut entry = EVENTS
        .reserve::<ConnEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    entry.write(ConnEvent {
        header: header(EventKind::Conn, now_ns(), ids),
        conn_id: call.conn_id,
        ret,
        fd,
        family: 0,
        port: 0,
        action: ConnAction::Closed as u8,
        fd_kind: call.fd_kind,
        unix_path_len: 0,
        _pad: 0,
        local_port: 0,
        _pad2: [0; 2],
        addr: [0; 16],
        unix_path: [0; UNIX_PATH_BYTES],
        _tail: [0; 4],
    });
    entry.submit(submit_flags(size_of::<ConnEvent>()));
    Ok(())
}

#[inline(always)]
fn fsync_event(
    ids: Ids,
    call: &ActiveCall,
    syscall: IoSyscall,
    ret: i64,
) -> Result<(), DropReason> {
    let header = header(EventKind::Fsync, now_ns(), ids);
    let mut entry = EVENTS
        .reserve::<FsyncEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    entry.write(FsyncEvent {
        conn_id: call.conn_id,
        duration_ns: header.ts_ns.saturating_sub(call.ts_ns),
        ret,
        fd: call.args[0] as u32,
        syscall: syscall as u8,
        _pad: [0; 3],
        header,
    });
    entry.submit(submit_flags(size_of::<FsyncEvent>()));
    Ok(())
}

/// Follows a file etcd opened when its name ends in `.wal`, or in `.tmp`
/// (etcd preallocates the next WAL segment as `N.tmp` and renames it).
#[inline(always)]
fn file_opened(ids: Ids, call: &ActiveCall, fd: u32) -> Result<(), DropReason> {
    let mut entry = EVENTS
        .reserve::<FileOpenEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    // SAFETY: a ring buffer reservation that only this program owns until
    // submit or discard; the path is read into it first.
    let copied =
        read_str(Space::User, unsafe { &raw mut (*event).path }, call.args[1]).unwrap_or(0);
    if copied < 5 {
        entry.discard(BPF_RB_NO_WAKEUP);
        return Ok(());
    }
    let end = (copied - 1) & (FILENAME_BYTES - 1);
    // SAFETY: as above; `end` and the four bytes before it are inside `path`.
    let suffix = unsafe {
        let path = &(*event).path;
        [
            path[end.wrapping_sub(4) & (FILENAME_BYTES - 1)],
            path[end.wrapping_sub(3) & (FILENAME_BYTES - 1)],
            path[end.wrapping_sub(2) & (FILENAME_BYTES - 1)],
            path[end.wrapping_sub(1) & (FILENAME_BYTES - 1)],
        ]
    };
    if &suffix != b".wal" && &suffix != b".tmp" {
        entry.discard(BPF_RB_NO_WAKEUP);
        return Ok(());
    }
    let conn_id = new_conn_id();
    let info = FdInfo {
        conn_id,
        kind: FdKind::WalFile as u8,
        flags: 0,
        _pad: [0; 6],
    };
    if FDS.insert(FdKey { tgid: ids.tgid, fd }, info, 0).is_err() {
        entry.discard(BPF_RB_NO_WAKEUP);
        return Err(DropReason::FdMapFull);
    }
    // SAFETY: as above; the remaining fields are written here.
    unsafe {
        (*event).header = header(EventKind::FileOpen, now_ns(), ids);
        (*event).conn_id = conn_id;
        (*event).fd = fd;
        (*event).path_len = end as u16;
        (*event).fd_kind = FdKind::WalFile as u8;
        (*event)._pad = 0;
    }
    entry.submit(submit_flags(size_of::<FileOpenEvent>()));
    Ok(())
}
