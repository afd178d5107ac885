//! Start of Go text: pcHeader and ELF layout in, the address function entry
//! offsets are relative to out.
//!
//! Up to Go 1.25 the pcHeader stores it (`textStart`). Go 1.26 stopped writing
//! it (it needed a relocation) and the runtime reads `runtime.firstmoduledata.text`
//! instead, so that is what we do: through the `runtime.firstmoduledata` symbol
//! when `.symtab` survives, else by finding the moduledata in the writable
//! segments — it is the one whose first word points at the pcHeader.
//! The start of text is not the `.text` section address: external (CGo) links
//! put C code first, e.g. Debian's containerd has Go text 0x100 bytes in.
//!
//! moduledata layout (`runtime/symtab.go`, unchanged from Go 1.18 to 1.27 up to
//! `text`): pcHeader *pcHeader; funcnametab, cutab, filetab, pctab, pclntable,
//! ftab (6 slices of 3 words); findfunctab, minpc, maxpc, text, etext uintptr.

use crate::{
    elf::{ElfLayout, read_u64},
    error::{GoBinError, Result},
    pclntab::{Pclntab, TEXT_START_FIELD},
};

const WORD: u64 = 8;
const FTAB_FIELD: u64 = WORD + 5 * 3 * WORD;
const MINPC_FIELD: u64 = WORD + 6 * 3 * WORD + WORD;
const MAXPC_FIELD: u64 = MINPC_FIELD + WORD;
const TEXT_FIELD: u64 = MAXPC_FIELD + WORD;

/// How the text start was found: reported by `podtrace inspect` and asserted by tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStartSource {
    /// pcHeader.textStart (Go 1.18–1.25).
    PcHeader,
    /// `runtime.firstmoduledata.text`, found through `.symtab`.
    FirstModuledataSymbol,
    /// `moduledata.text` of the moduledata found by scanning the data segments.
    ModuledataScan,
}

/// Returns the start of Go text and how it was found.
pub(crate) fn text_start(
    layout: &ElfLayout,
    data: &[u8],
    pcln: &Pclntab,
) -> Result<(u64, TextStartSource)> {
    // A PIE may hold the value only in a relocation; `read_pointer` looks there too.
    if let Some(text) = layout.read_pointer(data, pcln.header_vaddr + TEXT_START_FIELD) {
        if text != 0 {
            return Ok((text, TextStartSource::PcHeader));
        }
    }
    locate(layout, data, pcln)
        .map(|(_, text, source)| (text, source))
        .ok_or(GoBinError::TextStartNotFound {
            pcheader: pcln.header_vaddr,
        })
}

/// The moduledata's address, its `text`, and how it was found: through the
/// `runtime.firstmoduledata` symbol when `.symtab` names it, else by
/// scanning the writable segments for one consistent with the pclntab.
pub(crate) fn locate(
    layout: &ElfLayout,
    data: &[u8],
    pcln: &Pclntab,
) -> Option<(u64, u64, TextStartSource)> {
    if let Some(sym) = layout.any_symbol(data, "runtime.firstmoduledata") {
        if let Some(text) = validated_text(layout, data, pcln, sym.addr) {
            return Some((sym.addr, text, TextStartSource::FirstModuledataSymbol));
        }
    }
    candidates(layout, data, pcln.header_vaddr).find_map(|addr| {
        validated_text(layout, data, pcln, addr)
            .map(|text| (addr, text, TextStartSource::ModuledataScan))
    })
}

/// Addresses of words holding a pointer to the pcHeader: in the file bytes of
/// writable segments, and (for a PIE) as the target of a RELATIVE relocation.
fn candidates<'a>(
    layout: &'a ElfLayout,
    data: &'a [u8],
    pcheader: u64,
) -> impl Iterator<Item = u64> + 'a {
    let in_file = layout
        .segments
        .iter()
        .filter(|seg| seg.is_writable())
        .flat_map(move |seg| {
            let bytes = layout.segment_bytes(data, seg).unwrap_or_default();
            let skew = ((WORD - seg.vaddr % WORD) % WORD) as usize;
            (skew..bytes.len())
                .step_by(WORD as usize)
                .filter(move |&at| read_u64(bytes, at) == Some(pcheader))
                .map(move |at| seg.vaddr + at as u64)
        });
    let relocated = layout
        .relative_relocations(data)
        .iter()
        .filter(move |&&(_, addend)| addend == pcheader)
        .map(|&(offset, _)| offset);
    in_file.chain(relocated)
}

/// `moduledata.text` if the moduledata at `addr` is consistent with the pclntab:
/// it points at the pcHeader and its function table, and minpc/maxpc are the
/// first and last ftab entries relative to `text`.
fn validated_text(layout: &ElfLayout, data: &[u8], pcln: &Pclntab, addr: u64) -> Option<u64> {
    let word = |field: u64| layout.read_pointer(data, addr.checked_add(field)?);
    if word(0)? != pcln.header_vaddr || word(FTAB_FIELD)? != pcln.header_vaddr + pcln.pcln_offset {
        return None;
    }
    let text = word(TEXT_FIELD)?;
    let first = u64::from(pcln.entry_offset(data, 0)?);
    let last = u64::from(pcln.entry_offset(data, pcln.nfunc)?);
    (word(MINPC_FIELD)? == text.checked_add(first)?
        && word(MAXPC_FIELD)? == text.checked_add(last)?)
    .then_some(text)
}
