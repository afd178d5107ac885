//! What the decode stage asks of capture, and the connections it muted.
//!
//! The decode stage is the only one that knows what a connection carries; it
//! tells capture which HPACK tables to copy ([`HpackControl`]), which
//! connections' bytes are not worth copying at all ([`CaptureControl::Mute`]),
//! which processes need their per-call TLS probes
//! ([`CaptureControl::TlsProbes`]), and which TLS secrets to read again
//! ([`CaptureControl::Rekey`]).

use std::collections::HashSet;

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapError},
};
use tracer_common::{
    gofunc::GoFunction,
    io::{Direction, FD_TLS_KEYED_IN, FD_TLS_KEYED_OUT, FdInfo, FdKey, ProcessConnKey},
    names::{MAP_FDS, MAP_MUTED_CONNS},
};

use super::{CaptureError, ConnKey, HpackControl, loader::map_mut};

/// A request of the decode stage to capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureControl {
    /// About the HPACK probes and table copies.
    Hpack(HpackControl),
    /// Copy none of this connection's bytes from now on: nothing podtrace
    /// traces can come of them.
    Mute(ConnKey),
    /// The muted connection closed, or its process exited: forget it.
    Unmute(ConnKey),
    /// Whether process `tgid` needs the per-call TLS probes: it has a TLS
    /// connection whose plaintext still comes from them (not keyed yet, or
    /// not TLS 1.3).
    TlsProbes {
        /// The process.
        tgid: u32,
        /// Attach (true) or detach (false).
        needed: bool,
    },
    /// Read the TLS secret of `direction` of socket `fd` of `conn`'s process
    /// again: its ciphertext comes with no reader able to open it (the
    /// secret's record or too many records were lost). The kernel's mark of
    /// that direction as keyed is cleared, so that the per-call TLS probes,
    /// which skip a keyed direction, read the secret at its next call.
    Rekey {
        /// The connection.
        conn: ConnKey,
        /// Its file descriptor in the process.
        fd: u32,
        /// The direction whose secret is wanted.
        direction: Direction,
    },
    /// Process `tgid` ended: it needs no probes, and what was asked for its
    /// connections goes.
    Exited(u32),
    /// Stop the probes of `function` in the executable of process `tgid`
    /// (every process of that file): their first hits did not read as the
    /// function's arguments (the decode stage's probation of derived offsets).
    DisableFunction {
        /// A process of the executable.
        tgid: u32,
        /// The Kubernetes function.
        function: GoFunction,
    },
}

impl CaptureControl {
    /// The process whose probes (or socket's kernel state) the request
    /// changes, if it is such a request: a failure is expected when that
    /// process has exited.
    pub fn process(&self) -> Option<u32> {
        match *self {
            Self::Hpack(HpackControl::FieldProbes { tgid, .. })
            | Self::TlsProbes { tgid, .. }
            | Self::DisableFunction { tgid, .. }
            | Self::Exited(tgid) => Some(tgid),
            Self::Rekey { conn, .. } => Some(conn.tgid),
            _ => None,
        }
    }
}

/// `BPF_EXIST` map update flag (include/uapi/linux/bpf.h): update only if present.
const BPF_EXIST: u64 = 2;

/// Carries out a [`CaptureControl::Rekey`]: clears the keyed mark of
/// `direction` in `FDS`'s entry of socket `fd` of `conn`'s process, if the
/// entry is still that connection's (a reused fd is left alone). Returns
/// whether a mark was cleared.
///
/// A read, then a write of the whole entry: a mark the kernel sets on the
/// other direction in between is lost, and that direction's secret is then
/// read again too — the same secret, at its current record, which replaces
/// its reader without a gap.
pub(crate) fn clear_keyed(
    ebpf: &mut Ebpf,
    conn: ConnKey,
    fd: u32,
    direction: Direction,
) -> Result<bool, CaptureError> {
    let mut fds: BpfHashMap<_, FdKey, FdInfo> = map_mut(ebpf, MAP_FDS)?;
    let key = FdKey {
        tgid: conn.tgid,
        fd,
    };
    let bit = match direction {
        Direction::Ingress => FD_TLS_KEYED_IN,
        Direction::Egress => FD_TLS_KEYED_OUT,
    };
    let Ok(mut info) = fds.get(&key, 0) else {
        // Closed meanwhile: nothing to read again.
        return Ok(false);
    };
    if info.conn_id != conn.conn_id || info.flags & bit == 0 {
        return Ok(false);
    }
    info.flags &= !bit;
    match fds.insert(key, info, BPF_EXIST) {
        Ok(()) => Ok(true),
        // Closed between the read and the write.
        Err(MapError::SyscallError(err)) if err.io_error.raw_os_error() == Some(libc::ENOENT) => {
            Ok(false)
        }
        Err(source) => Err(CaptureError::Map {
            name: MAP_FDS,
            source,
        }),
    }
}

impl From<HpackControl> for CaptureControl {
    fn from(request: HpackControl) -> Self {
        Self::Hpack(request)
    }
}

/// The connections in `MUTED_CONNS`.
#[derive(Debug, Default)]
pub(crate) struct MutedConns {
    conns: HashSet<ConnKey>,
    /// Connections muted since start.
    pub(crate) total: u64,
    /// Mutes refused because the map was full: those connections' bytes
    /// are still copied (and dropped by the decode stage).
    pub(crate) refused: u64,
}

impl MutedConns {
    /// How many connections are muted now.
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// Carries out a [`CaptureControl::Mute`] or [`CaptureControl::Unmute`].
    pub(crate) fn set(
        &mut self,
        ebpf: &mut Ebpf,
        conn: ConnKey,
        muted: bool,
    ) -> Result<(), CaptureError> {
        let name = MAP_MUTED_CONNS;
        let mut map: BpfHashMap<_, ProcessConnKey, u8> = map_mut(ebpf, name)?;
        let key = conn.map_key();
        if !muted {
            if self.conns.remove(&conn) {
                // Gone already if the process exited: nothing to undo.
                let _ = map.remove(&key);
            }
            return Ok(());
        }
        if self.conns.contains(&conn) {
            return Ok(());
        }
        if self.conns.len() >= tracer_common::io::MAX_MUTED_CONNS as usize {
            self.refused += 1;
            return Ok(());
        }
        map.insert(key, 1, 0)
            .map_err(|source| CaptureError::Map { name, source })?;
        self.conns.insert(conn);
        self.total += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_requests_name_their_process_and_connection_requests_none() {
        let conn = ConnKey {
            tgid: 7,
            conn_id: 1,
        };
        let tls = CaptureControl::TlsProbes {
            tgid: 42,
            needed: true,
        };
        assert_eq!(tls.process(), Some(42));
        let fields = HpackControl::FieldProbes {
            tgid: 43,
            needed: false,
        };
        assert_eq!(CaptureControl::from(fields).process(), Some(43));
        assert_eq!(CaptureControl::Exited(44).process(), Some(44));
        let rekey = CaptureControl::Rekey {
            conn,
            fd: 9,
            direction: Direction::Ingress,
        };
        assert_eq!(rekey.process(), Some(7));
        assert_eq!(CaptureControl::Mute(conn).process(), None);
        assert_eq!(
            CaptureControl::from(HpackControl::Ask(conn)).process(),
            None
        );
    }
}
