//! `.gopclntab` reader: ELF layout and file bytes in, the Go function table out.
//!
//! The pcHeader (Go runtime `runtime.pcHeader`, `src/runtime/symtab.go`) is found
//! through the `.gopclntab` section or, when section headers are gone, by
//! scanning the loaded segments for its magic. Supported layouts are Go
//! 1.18–1.19 (magic `0xfffffff0`) and Go 1.20 and later (`0xfffffff1`); both
//! store each function's entry as a 32-bit offset from the start of Go text,
//! which [`crate::moduledata`] resolves. This module only reads: the function
//! table `ftab` (`nfunc + 1` pairs of entry offset and `_func` offset, the last
//! one marking the end of text) and the names in `funcnametab`.

use crate::{
    elf::{ElfLayout, read_u32, read_u64},
    error::{GoBinError, Result},
};

const GO118_MAGIC: u32 = 0xffff_fff0;
const GO120_MAGIC: u32 = 0xffff_fff1;
/// Go 1.16–1.17 and Go 1.2–1.15: recognised only to report them as unsupported.
const OLDER_MAGICS: [u32; 2] = [0xffff_fffa, 0xffff_fffb];
/// The pcHeader of Go 1.18+ on a 64-bit target: magic, pads, minLC, ptrSize, then 8 words.
const HEADER_SIZE: u64 = 8 + 8 * 8;
/// Offset of pcHeader.textStart (zero from Go 1.26 on, which no longer stores it).
pub(crate) const TEXT_START_FIELD: u64 = 24;
/// Far above the ~200k functions of the largest Kubernetes binaries; bounds a corrupt header.
const MAX_FUNCS: u64 = 10_000_000;

/// The pclntab layout generation, named for the first Go release that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PclntabVersion {
    /// Go 1.18 and 1.19.
    Go118,
    /// Go 1.20 and later (including 1.26+, where pcHeader.textStart is zero).
    Go120,
}

/// A validated pcHeader and where its tables are.
#[derive(Debug, Clone)]
pub(crate) struct Pclntab {
    pub(crate) version: PclntabVersion,
    /// Virtual address of the pcHeader (what moduledata.pcHeader points to).
    pub(crate) header_vaddr: u64,
    /// The bytes from the pcHeader to the end of the section (or segment, when scanned).
    file_start: usize,
    len: usize,
    pub(crate) nfunc: u32,
    funcname_offset: usize,
    pub(crate) pcln_offset: u64,
}

impl Pclntab {
    /// Finds and validates the pcHeader.
    pub(crate) fn locate(layout: &ElfLayout, data: &[u8]) -> Result<Self> {
        if let Some(section) = layout.gopclntab {
            let start = usize::try_from(section.file_offset).ok();
            let len = usize::try_from(section.size).ok();
            let bytes = start
                .zip(len)
                .and_then(|(s, l)| data.get(s..s.checked_add(l)?))
                .ok_or_else(|| {
                    GoBinError::CorruptPclntab(format!(
                        ".gopclntab section (offset {:#x}, size {:#x}) extends past the end of the file ({:#x} bytes)",
                        section.file_offset,
                        section.size,
                        data.len()
                    ))
                })?;
            let start = start.unwrap_or_default();
            return Self::parse_header(bytes, start, section.vaddr);
        }
        Self::scan(layout, data)
    }

    /// Looks for the pcHeader magic in every loaded segment, for binaries whose
    /// section headers were removed. The pcHeader is pointer-aligned.
    fn scan(layout: &ElfLayout, data: &[u8]) -> Result<Self> {
        let mut older = None;
        for seg in &layout.segments {
            let Some(bytes) = layout.segment_bytes(data, seg) else {
                continue;
            };
            let Ok(seg_start) = usize::try_from(seg.file_offset) else {
                continue;
            };
            let skew = ((8 - seg.vaddr % 8) % 8) as usize;
            let mut at = skew;
            while let Some(window) = bytes.get(at..at + 8) {
                // magic (LE), pad1 = pad2 = 0, minLC ∈ {1, 2, 4}, ptrSize = 8.
                if window[1..4] == [0xff, 0xff, 0xff]
                    && window[0] & 0xf0 == 0xf0
                    && window[4] == 0
                    && window[5] == 0
                    && matches!(window[6], 1 | 2 | 4)
                    && window[7] == 8
                {
                    let magic = u32::from_le_bytes([window[0], 0xff, 0xff, 0xff]);
                    let vaddr = seg.vaddr + at as u64;
                    if magic == GO118_MAGIC || magic == GO120_MAGIC {
                        if let Ok(table) = Self::parse_header(&bytes[at..], seg_start + at, vaddr) {
                            if table.first_function_is_readable(data) {
                                return Ok(table);
                            }
                        }
                    } else if OLDER_MAGICS.contains(&magic) {
                        older.get_or_insert(magic);
                    }
                }
                at += 8;
            }
        }
        match older {
            Some(magic) => Err(GoBinError::UnknownPclntabVersion { magic }),
            None => Err(GoBinError::NotGo),
        }
    }

    /// Validates the pcHeader at the start of `bytes` (which sit at file offset
    /// `file_start` and virtual address `vaddr`) against the size of its table.
    fn parse_header(bytes: &[u8], file_start: usize, vaddr: u64) -> Result<Self> {
        let corrupt =
            |what: String| GoBinError::CorruptPclntab(format!("pcHeader at {vaddr:#x}: {what}"));
        let magic = read_u32(bytes, 0).ok_or_else(|| corrupt("truncated magic".into()))?;
        let version = match magic {
            GO118_MAGIC => PclntabVersion::Go118,
            GO120_MAGIC => PclntabVersion::Go120,
            _ => return Err(GoBinError::UnknownPclntabVersion { magic }),
        };
        if (bytes.len() as u64) < HEADER_SIZE {
            return Err(corrupt(format!("truncated: {} bytes", bytes.len())));
        }
        let (pad1, pad2, min_lc, ptr_size) = (bytes[4], bytes[5], bytes[6], bytes[7]);
        if pad1 != 0 || pad2 != 0 || !matches!(min_lc, 1 | 2 | 4) {
            return Err(corrupt(format!("bad pads {pad1}/{pad2} or minLC {min_lc}")));
        }
        if ptr_size != 8 {
            return Err(corrupt(format!(
                "pointer size {ptr_size}, only 64-bit binaries are supported"
            )));
        }
        let word = |i: usize| read_u64(bytes, 8 + 8 * i).unwrap_or(u64::MAX);
        let (nfunc, funcname_offset, pcln_offset) = (word(0), word(3), word(7));
        let len = bytes.len() as u64;
        if nfunc == 0 || nfunc > MAX_FUNCS {
            return Err(corrupt(format!("implausible function count {nfunc}")));
        }
        if funcname_offset >= len || pcln_offset >= len {
            return Err(corrupt(format!(
                "funcnametab ({funcname_offset:#x}) or pclntable ({pcln_offset:#x}) offset beyond the table size {len:#x}"
            )));
        }
        // nfunc + 1 functab pairs of two u32 follow pclnOffset.
        if pcln_offset + (nfunc + 1) * 8 > len {
            return Err(corrupt(format!(
                "function table of {nfunc} entries does not fit in {len:#x} bytes"
            )));
        }
        Ok(Self {
            version,
            header_vaddr: vaddr,
            file_start,
            len: bytes.len(),
            nfunc: nfunc as u32,
            funcname_offset: funcname_offset as usize,
            pcln_offset,
        })
    }

    fn first_function_is_readable(&self, data: &[u8]) -> bool {
        self.function(data, 0).is_some()
    }

    /// The table bytes; bounds were checked when the header was parsed.
    fn table<'d>(&self, data: &'d [u8]) -> &'d [u8] {
        data.get(self.file_start..self.file_start + self.len)
            .unwrap_or_default()
    }

    /// Entry offset (from the start of Go text) of function `index`; `index == nfunc`
    /// gives the end of the last function.
    pub(crate) fn entry_offset(&self, data: &[u8], index: u32) -> Option<u32> {
        read_u32(
            self.table(data),
            self.pcln_offset as usize + index as usize * 8,
        )
    }

    /// Function `index`: its name and the text offsets of its first and
    /// one-past-last byte (the next function's entry: Go pads between functions).
    pub(crate) fn function<'d>(&self, data: &'d [u8], index: u32) -> Option<RawFunction<'d>> {
        if index >= self.nfunc {
            return None;
        }
        let table = self.table(data);
        let pcln = self.pcln_offset as usize;
        let pair = pcln + index as usize * 8;
        let entry_off = read_u32(table, pair)?;
        let func_off = read_u32(table, pair + 4)? as usize;
        let end_off = read_u32(table, pair + 8)?;
        // runtime._func starts with entryOff (u32) and nameOff (i32).
        let func = pcln.checked_add(func_off)?;
        let name_off = read_u32(table, func + 4)? as i32;
        let name_start = self
            .funcname_offset
            .checked_add(usize::try_from(name_off).ok()?)?;
        let rest = table.get(name_start..)?;
        let name = &rest[..rest.iter().position(|&b| b == 0)?];
        let flag = table.get(func + self.flag_field())?;
        Some(RawFunction {
            name,
            entry_off,
            end_off,
            flag: *flag,
        })
    }

    /// Function `index`'s funcdata `slot` (`abi.FUNCDATA_*`): its offset from
    /// `moduledata.gofunc`, `None` when the function has none. `_func` holds
    /// `npcdata` (a u32 at 28) and `nfuncdata` (the byte after `flag`), then
    /// past its fixed part (40 bytes, 44 from Go 1.20) `npcdata` u32 pcdata
    /// offsets and `nfuncdata` u32 funcdata offsets, `u32::MAX` for none.
    pub(crate) fn funcdata(&self, data: &[u8], index: u32, slot: u8) -> Option<u32> {
        if index >= self.nfunc {
            return None;
        }
        let table = self.table(data);
        let pcln = self.pcln_offset as usize;
        let func_off = read_u32(table, pcln + index as usize * 8 + 4)? as usize;
        let func = pcln.checked_add(func_off)?;
        let npcdata = read_u32(table, func.checked_add(28)?)? as usize;
        let nfuncdata = *table.get(func + self.flag_field() + 2)?;
        if slot >= nfuncdata {
            return None;
        }
        let fixed = self.flag_field() + 3;
        let at = func
            .checked_add(fixed)?
            .checked_add(npcdata.checked_mul(4)?)?
            .checked_add(usize::from(slot) * 4)?;
        read_u32(table, at).filter(|&off| off != u32::MAX)
    }

    /// Offset of `_func.flag`: Go 1.20 inserted `startLine` (an i32) before funcID and flag.
    fn flag_field(&self) -> usize {
        match self.version {
            PclntabVersion::Go118 => 37,
            PclntabVersion::Go120 => 41,
        }
    }
}

/// One `ftab` entry as stored: offsets relative to the start of Go text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawFunction<'d> {
    pub(crate) name: &'d [u8],
    pub(crate) entry_off: u32,
    pub(crate) end_off: u32,
    pub(crate) flag: u8,
}
