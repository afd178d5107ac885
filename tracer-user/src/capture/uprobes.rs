//! Attaching uprobes to Go functions by file offset — at the entry and at
//! every RET — and counting how often each fires.
//!
//! This is what `podtrace probe-check` runs to show that podtrace's probes
//! land on the right instructions of a given binary (a stripped Kubernetes
//! release, say) before anything relies on them. Each attachment gets a slot
//! in `PROBE_HITS`, passed to the program as the attach cookie.

use std::{num::NonZeroU32, path::Path};

use aya::{
    Ebpf, EbpfLoader,
    maps::PerCpuArray,
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
};
use tracer_common::{
    config::MAX_PROBE_SLOTS,
    names::{MAP_PROBE_HITS, PROGRAM_GO_PROBE_HIT},
};

use super::{CaptureError, go_probes::ResolvedFunction, loader::load_object};

/// Where in a function an attachment sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbePoint {
    /// The function's entry, past its stack-growth check.
    Entry,
    /// A RET instruction, this many bytes after the entry.
    Ret(u64),
}

/// One attachment and its hit count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeHits {
    /// Function name.
    pub function: String,
    /// Where in the function.
    pub point: ProbePoint,
    /// Times it fired (summed over CPUs).
    pub hits: u64,
}

/// Entry and RET uprobes on some functions of one binary, counting hits.
/// Dropping it detaches them.
#[derive(Debug)]
pub struct CallCounter {
    ebpf: Ebpf,
    slots: Vec<(String, ProbePoint)>,
}

impl CallCounter {
    /// Attaches at the entry and every RET of each function of `binary`,
    /// for process `pid` only or for every process running the binary.
    pub fn attach(
        binary: &Path,
        functions: &[ResolvedFunction],
        pid: Option<NonZeroU32>,
    ) -> Result<Self, CaptureError> {
        let mut ebpf = load_object(&mut EbpfLoader::new())?;
        let program: &mut UProbe = ebpf
            .program_mut(PROGRAM_GO_PROBE_HIT)
            .and_then(|program| program.try_into().ok())
            .ok_or(CaptureError::MissingProgram(PROGRAM_GO_PROBE_HIT))?;
        let wrap = |source| CaptureError::Program {
            name: PROGRAM_GO_PROBE_HIT,
            source,
        };
        program.load().map_err(wrap)?;
        let scope = pid.map_or(UProbeScope::AllProcesses, UProbeScope::OneProcess);
        let mut slots = Vec::new();
        for function in functions {
            let points = std::iter::once(ProbePoint::Entry)
                .chain(function.ret_offsets.iter().map(|&ret| ProbePoint::Ret(ret)));
            for point in points {
                let slot = slots.len() as u64;
                if slot >= u64::from(MAX_PROBE_SLOTS) {
                    return Err(CaptureError::TooManyProbes(MAX_PROBE_SLOTS));
                }
                let (offset, bits) = match point {
                    ProbePoint::Entry => function.entry_probe(),
                    ProbePoint::Ret(ret) => (function.file_offset + ret, 0),
                };
                let attach_point = UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(offset),
                    cookie: Some(slot | bits),
                };
                program.attach(attach_point, binary, scope).map_err(wrap)?;
                slots.push((function.name.clone(), point));
            }
        }
        Ok(Self { ebpf, slots })
    }

    /// Hits of every attachment so far.
    pub fn hits(&self) -> Result<Vec<ProbeHits>, CaptureError> {
        let map = self
            .ebpf
            .map(MAP_PROBE_HITS)
            .ok_or(CaptureError::MissingMap(MAP_PROBE_HITS))?;
        let counters: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(|source| CaptureError::Map {
                name: MAP_PROBE_HITS,
                source,
            })?;
        self.slots
            .iter()
            .enumerate()
            .map(|(slot, (function, point))| {
                let per_cpu =
                    counters
                        .get(&(slot as u32), 0)
                        .map_err(|source| CaptureError::Map {
                            name: MAP_PROBE_HITS,
                            source,
                        })?;
                Ok(ProbeHits {
                    function: function.clone(),
                    point: *point,
                    hits: per_cpu.iter().sum(),
                })
            })
            .collect()
    }
}
