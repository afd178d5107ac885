//! What the decode stage asks of capture, and the connections it muted.
//!
//! The decode stage is the only one that knows what a connection carries; it
//! tells capture which HPACK tables to copy ([`HpackControl`]) and which
//! connections' bytes are not worth copying at all ([`CaptureControl::Mute`]).

use std::collections::HashSet;

use aya::{Ebpf, maps::HashMap as BpfHashMap};
use tracer_common::{io::ProcessConnKey, names::MAP_MUTED_CONNS};

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
