//! The HPACK probes, attached only while a process needs them, and the
//! requests for copies of HPACK tables.
//!
//! A uprobe on `hpack.(*Encoder).WriteField` / `(*Decoder).callEmit` costs
//! every header field of every request a trap, which is most of what
//! podtrace would cost a busy etcd. The fields are only needed on
//! connections joined after their HPACK tables were built, and there only
//! until copies of the tables are loaded (`decode::table_copies`). So the
//! decode stage says per process whether it needs them, and the probes of
//! an executable stay attached only while one of its processes does.

use std::collections::HashSet;

use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap},
};
use tracer_common::{
    io::{HPACK_SYNC_DECODER_DONE, HPACK_SYNC_ENCODER_DONE, HeaderSide, HpackSync, ProcessConnKey},
    names::{MAP_HPACK_SYNC, MAP_HPACK_SYNC_COUNT},
};

use super::{CaptureError, ConnKey, on_demand::OnDemandProbes, uprobe_links::UprobeAttacher};

/// What the decode stage asks of the HPACK probes and table copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HpackControl {
    /// Copy this connection's tables at its next read and write.
    Ask(ConnKey),
    /// Copy this side's table again (the last copy could not be used).
    Again(ConnKey, HeaderSide),
    /// Stop asking for this connection's tables.
    Forget(ConnKey),
    /// Whether process `tgid` needs its HPACK probes (header fields).
    FieldProbes {
        /// The process.
        tgid: u32,
        /// Attach (true) or detach (false).
        needed: bool,
    },
}

/// Attach state of the HPACK probes, and the `HPACK_SYNC` requests.
#[derive(Debug)]
pub(crate) struct HpackProbes {
    /// The probes, per executable.
    pub(crate) probes: OnDemandProbes,
    /// Connections in `HPACK_SYNC`.
    syncs: HashSet<ConnKey>,
}

impl Default for HpackProbes {
    fn default() -> Self {
        Self {
            probes: OnDemandProbes::new("HPACK probes"),
            syncs: HashSet::new(),
        }
    }
}

impl HpackProbes {
    /// Carries out what the decode stage asked.
    pub(crate) fn control(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        request: HpackControl,
    ) -> Result<(), CaptureError> {
        match request {
            HpackControl::Ask(conn) => {
                if self.syncs.insert(conn) {
                    set_sync(ebpf, conn, 0)?;
                    self.write_count(ebpf)?;
                }
            }
            HpackControl::Again(conn, side) => {
                if self.syncs.contains(&conn) {
                    let syncs: BpfHashMap<_, ProcessConnKey, HpackSync> = sync_map(ebpf)?;
                    let done = syncs.get(&conn.map_key(), 0).map_or(0, |sync| sync.done);
                    let bit = match side {
                        HeaderSide::Decoder => HPACK_SYNC_DECODER_DONE,
                        HeaderSide::Encoder => HPACK_SYNC_ENCODER_DONE,
                    };
                    set_sync(ebpf, conn, done & !bit)?;
                }
            }
            HpackControl::Forget(conn) => {
                if self.syncs.remove(&conn) {
                    let mut syncs: BpfHashMap<_, ProcessConnKey, HpackSync> = sync_map(ebpf)?;
                    // Gone already if the process exited: nothing to undo.
                    let _ = syncs.remove(&conn.map_key());
                    self.write_count(ebpf)?;
                }
            }
            HpackControl::FieldProbes { tgid, needed } => {
                self.probes.set_needed(ebpf, uprobes, tgid, needed)?;
            }
        }
        Ok(())
    }

    /// Process `tgid` ended: it needs no probes, and its connections'
    /// table requests go.
    pub(crate) fn exited(
        &mut self,
        ebpf: &mut Ebpf,
        uprobes: &UprobeAttacher,
        tgid: u32,
    ) -> Result<(), CaptureError> {
        self.probes.exited(ebpf, uprobes, tgid)?;
        // Its sockets closed with it, without close(2): no Forget comes.
        let gone: Vec<ConnKey> = self
            .syncs
            .iter()
            .filter(|conn| conn.tgid == tgid)
            .copied()
            .collect();
        if !gone.is_empty() {
            let mut syncs: BpfHashMap<_, ProcessConnKey, HpackSync> = sync_map(ebpf)?;
            for conn in gone {
                let _ = syncs.remove(&conn.map_key());
                self.syncs.remove(&conn);
            }
            self.write_count(ebpf)?;
        }
        Ok(())
    }

    fn write_count(&self, ebpf: &mut Ebpf) -> Result<(), CaptureError> {
        let name = MAP_HPACK_SYNC_COUNT;
        let map_error = |source| CaptureError::Map { name, source };
        let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
        let mut count: Array<_, u32> = Array::try_from(map).map_err(map_error)?;
        count.set(0, self.syncs.len() as u32, 0).map_err(map_error)
    }
}

fn sync_map(
    ebpf: &mut Ebpf,
) -> Result<BpfHashMap<&mut aya::maps::MapData, ProcessConnKey, HpackSync>, CaptureError> {
    let name = MAP_HPACK_SYNC;
    let map = ebpf.map_mut(name).ok_or(CaptureError::MissingMap(name))?;
    BpfHashMap::try_from(map).map_err(|source| CaptureError::Map { name, source })
}

fn set_sync(ebpf: &mut Ebpf, conn: ConnKey, done: u32) -> Result<(), CaptureError> {
    let mut syncs = sync_map(ebpf)?;
    syncs
        .insert(conn.map_key(), HpackSync { done, _pad: 0 }, 0)
        .map_err(|source| CaptureError::Map {
            name: MAP_HPACK_SYNC,
            source,
        })
}
