//! What the decode stage asks of capture, and the connections it muted.
//!
//! The decode stage is the only one that knows what a connection carries; it
//! tells capture which HPACK tables to copy ([`HpackControl`]), which
//! connections' bytes are not worth copying at all ([`CaptureControl::Mute`]),
//! and which processes need their per-call TLS probes
//! ([`CaptureControl::TlsProbes`]).

use std::collections::HashSet;

use aya::{Ebpf, maps::HashMap as BpfHashMap};
use tracer_common::{gofunc::GoFunction, io::ProcessConnKey, names::MAP_MUTED_CONNS};

use super::{CaptureError, ConnKey, HpackControl};

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
    /// The process whose probes the request attaches or detaches, if it is
    /// such a request.
    pub fn process(&self) -> Option<u32> {
        match *self {
            Self::Hpack(HpackControl::FieldProbes { tgid, .. })
            | Self::TlsProbes { tgid, .. }
            | Self::DisableFunction { tgid, .. }
            | Self::Exited(tgid) => Some(tgid),
            _ => None,
        }
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
        let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
        let mut map: BpfHashMap<_, ProcessConnKey, u8> =
            BpfHashMap::try_from(map).map_err(|source| CaptureError::Map { name, source })?;
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
        assert_eq!(CaptureControl::Mute(conn).process(), None);
        assert_eq!(
            CaptureControl::from(HpackControl::Ask(conn)).process(),
            None
        );
    }
}
