//! TLS 1.3 traffic secrets of Go `crypto/tls.Conn`s, read at one TLS probe
//! hit per connection and direction, so that the trap per TLS read and write
//! stops there.
//!
//! At the first hit on a direction that is not keyed yet — a connection
//! older than podtrace, whose handshake it did not see — the probe sends the
//! direction's secret and record number ([`TlsKeyEvent`]) and marks
//! the socket (`FD_TLS_KEYED_*`): from then on the syscall programs copy that
//! direction's ciphertext, user space decrypts it, and the TLS probes return
//! as soon as they have found the socket. The switch leaves no gap and no
//! overlap in the byte stream:
//! - a write: the secret is read at `Write`'s entry, before any of its records
//!   are sealed, and the write's plaintext is not sent; its records are the
//!   first ciphertext copied;
//! - a read: the probe sends the plaintext of the rest of the record Go is
//!   handing out (`input`), the secret with the number of the next record to
//!   decrypt, and the ciphertext Go has already read from the socket but not
//!   decrypted (`rawInput`) — later syscalls read what follows.
//!
//! Only TLS 1.3 is keyed: a TLS 1.2 connection keeps its plaintext probes.
//!
//! The first hit, not one user space asks for after seeing the direction
//! talk: a connection that only pings (kube-apiserver's idle per-resource
//! etcd clients, every 30 s) was keyed at its second ping at best, and held
//! its process's per-call probes, a trap on every TLS read and write of
//! every request, until then. Nothing in user space needs a direction's
//! plaintext before its secret: HPACK tables are copied at its syscalls.

use tracer_common::{
    drop_reason::DropReason,
    event::EventKind,
    io::{
        Direction, FD_TLS, FD_TLS_KEYED_IN, FD_TLS_KEYED_OUT, FdInfo, FdKey, GoTlsOffsets,
        TLS_SECRET_BYTES, TLS_VERSION_13, TlsKeyEvent,
    },
};

use crate::{
    kernel_read::{read_user, read_user_bytes},
    maps::{BPF_RB_NO_WAKEUP, EVENTS, FDS, GO_BINARIES, set_fd_flags, submit_flags},
    record::{Ids, header, now_ns},
};

/// A direction's secret as read from the process.
pub(crate) struct Secret {
    suite: u16,
    seq: u64,
    addr: u64,
    len: u64,
}

/// The `FdInfo` flag of a keyed direction.
#[inline(always)]
pub(crate) fn keyed_flag(direction: Direction) -> u8 {
    match direction {
        Direction::Ingress => FD_TLS_KEYED_IN,
        Direction::Egress => FD_TLS_KEYED_OUT,
    }
}

/// Whether this direction's ciphertext is copied and decrypted instead.
#[inline(always)]
pub(crate) fn keyed(info: &FdInfo, direction: Direction) -> bool {
    info.flags & keyed_flag(direction) != 0
}

/// The struct offsets of the binary the probe's cookie names.
#[inline(always)]
pub(crate) fn offsets(cookie: u64) -> Option<GoTlsOffsets> {
    GO_BINARIES.get(cookie as u32).copied()
}

/// The TLS 1.3 secret and next record number of `direction` of the
/// `*tls.Conn` at `tls_conn`; `None` for another version, or a handshake
/// not far enough for a secret of a hash's length.
#[inline(always)]
pub(crate) fn read_secret(
    tls_conn: u64,
    offsets: &GoTlsOffsets,
    direction: Direction,
) -> Option<Secret> {
    let field = |offset: u16| tls_conn + u64::from(offset);
    if read_user::<u16>(field(offsets.tls_conn_vers)).ok()? != TLS_VERSION_13 {
        return None;
    }
    let (seq, secret) = match direction {
        Direction::Ingress => (offsets.tls_conn_in_seq, offsets.tls_conn_in_secret),
        Direction::Egress => (offsets.tls_conn_out_seq, offsets.tls_conn_out_secret),
    };
    let addr = read_user::<u64>(field(secret)).ok()?;
    let len = read_user::<u64>(field(secret) + 8).ok()?;
    // SHA-256 or SHA-384: anything else is no secret of a TLS 1.3 suite.
    if len != 32 && len != 48 {
        return None;
    }
    Some(Secret {
        suite: read_user::<u16>(field(offsets.tls_conn_cipher_suite)).ok()?,
        seq: u64::from_be_bytes(read_user::<[u8; 8]>(field(seq)).ok()?),
        addr,
        len,
    })
}

/// The secret `setTrafficSecret` is about to install (`addr`, `len`) on a
/// `halfConn` of the `*tls.Conn` at `tls_conn`, with the suite at `suite`
/// (`cipherSuiteTLS13.id` is its first field), numbered from 0; `None`
/// unless that `Conn` is TLS 1.3 (a wrong guess of which `halfConn` it is
/// reads something else there) and the secret a hash's length.
#[inline(always)]
pub(crate) fn handshake_secret(
    tls_conn: u64,
    offsets: &GoTlsOffsets,
    suite: u64,
    addr: u64,
    len: u64,
) -> Option<Secret> {
    let vers = read_user::<u16>(tls_conn + u64::from(offsets.tls_conn_vers)).ok()?;
    if vers != TLS_VERSION_13 || (len != 32 && len != 48) {
        return None;
    }
    Some(Secret {
        suite: read_user::<u16>(suite).ok()?,
        seq: 0,
        addr,
        len,
    })
}

/// Sends `secret` for `direction` of the socket `fd`.
#[inline(always)]
pub(crate) fn send(
    ids: Ids,
    fd: u32,
    info: &FdInfo,
    direction: Direction,
    secret: &Secret,
) -> Result<(), DropReason> {
    let mut entry = EVENTS
        .reserve::<TlsKeyEvent>(0)
        .ok_or(DropReason::RingBufFull)?;
    let event = entry.as_mut_ptr();
    // `read_secret` let only the two hash lengths through; constants are
    // what the verifier can check against the array.
    let size: u32 = if secret.len == TLS_SECRET_BYTES as u64 {
        TLS_SECRET_BYTES as u32
    } else {
        32
    };
    // SAFETY: a reservation of size_of::<TlsKeyEvent>() bytes that only this
    // program owns until submit or discard; `size` ≤ the array's length.
    let copied = unsafe {
        let bytes = (&raw mut (*event).secret).cast::<u8>();
        read_user_bytes(bytes, size, secret.addr).is_ok()
    };
    if !copied {
        entry.discard(BPF_RB_NO_WAKEUP);
        return Err(DropReason::ReadFailed);
    }
    // SAFETY: as above.
    unsafe {
        (*event).header = header(EventKind::TlsKey, now_ns(), ids);
        (*event).conn_id = info.conn_id;
        (*event).seq = secret.seq;
        (*event).fd = fd;
        (*event).suite = secret.suite;
        (*event).direction = direction as u8;
        (*event).secret_len = size as u8;
    }
    entry.submit(submit_flags(size_of::<TlsKeyEvent>()));
    Ok(())
}

/// Marks `direction` of the socket keyed: the syscall programs copy its
/// ciphertext and the TLS probes leave it from now on.
#[inline(always)]
pub(crate) fn mark_keyed(tgid: u32, fd: u32, info: &FdInfo, direction: Direction) {
    if let Some(entry) = FDS.get_ptr_mut(FdKey { tgid, fd }) {
        // SAFETY: a map value; the conn id check keeps a reused fd unmarked.
        if unsafe { (*entry).conn_id } == info.conn_id {
            set_fd_flags(entry, FD_TLS | keyed_flag(direction));
        }
    }
}
