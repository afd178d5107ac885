//! ELF layer: bytes of a 64-bit little-endian ELF file in, an [`ElfLayout`] out.
//!
//! The layout is what the Go-specific parsers need and nothing more: the
//! PT_LOAD segments (to turn a virtual address into file bytes and a uprobe
//! file offset), the ranges of `.gopclntab` and `.go.buildinfo` when section
//! headers exist, the ELF symbol table on demand, and the dynamic
//! `R_X86_64_RELATIVE` relocations on demand (a PIE may leave a pointer's
//! file bytes zero and keep its value only as a relocation addend).
//! Nothing here trusts the file: every read is bounds-checked and returns
//! `None` or an error instead of panicking.

use std::{collections::HashMap, sync::OnceLock};

use object::{
    FileKind, LittleEndian as LE, elf,
    read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _},
};

use crate::error::{GoBinError, Result};

type FileHeader = elf::FileHeader64<LE>;

/// One PT_LOAD program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoadSegment {
    pub(crate) vaddr: u64,
    pub(crate) file_offset: u64,
    /// Bytes backed by the file; the rest of the memory size is zero-filled (.bss).
    pub(crate) file_size: u64,
    pub(crate) flags: u32,
}

impl LoadSegment {
    pub(crate) fn is_writable(&self) -> bool {
        self.flags & elf::PF_W != 0
    }

    fn contains_file_backed(&self, vaddr: u64) -> bool {
        vaddr >= self.vaddr && vaddr - self.vaddr < self.file_size
    }
}

/// A section's virtual address and its bytes' place in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SectionRange {
    pub(crate) vaddr: u64,
    pub(crate) file_offset: u64,
    pub(crate) size: u64,
}

/// An ELF symbol of type FUNC: address and size as the linker wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ElfSymbol {
    pub(crate) addr: u64,
    pub(crate) size: u64,
}

/// What the Go parsers need from the ELF headers of one file.
#[derive(Debug)]
pub(crate) struct ElfLayout {
    pub(crate) machine: u16,
    pub(crate) segments: Vec<LoadSegment>,
    pub(crate) gopclntab: Option<SectionRange>,
    pub(crate) go_buildinfo: Option<SectionRange>,
    has_symtab: bool,
    /// DT_RELA table (virtual address, size in bytes) from PT_DYNAMIC; read only when needed.
    dynamic_rela: Option<(u64, u64)>,
    relative_relocs: OnceLock<Vec<(u64, u64)>>,
    symbols: OnceLock<HashMap<Box<str>, ElfSymbol>>,
}

impl ElfLayout {
    /// Reads the ELF header, program headers and (if present) section headers.
    pub(crate) fn parse(data: &[u8]) -> Result<Self> {
        match FileKind::parse(data).map_err(GoBinError::NotElf)? {
            FileKind::Elf64 => {}
            FileKind::Elf32 => return Err(GoBinError::UnsupportedElf("32-bit ELF".into())),
            other => return Err(GoBinError::UnsupportedElf(format!("{other:?} is not ELF"))),
        }
        // e_ident[EI_DATA] (byte 5): little-endian. Go for amd64/arm64 is little-endian only.
        if data.get(5) != Some(&elf::ELFDATA2LSB) {
            return Err(GoBinError::UnsupportedElf("big-endian ELF".into()));
        }
        let header = FileHeader::parse(data).map_err(|source| GoBinError::MalformedElf {
            context: "ELF file header",
            source,
        })?;
        let endian = header.endian().map_err(|source| GoBinError::MalformedElf {
            context: "ELF identification",
            source,
        })?;
        let phdrs =
            header
                .program_headers(endian, data)
                .map_err(|source| GoBinError::MalformedElf {
                    context: "program headers",
                    source,
                })?;
        let mut segments = Vec::new();
        let mut dynamic = None;
        for phdr in phdrs {
            match phdr.p_type(endian) {
                elf::PT_LOAD => segments.push(LoadSegment {
                    vaddr: phdr.p_vaddr(endian),
                    file_offset: phdr.p_offset(endian),
                    file_size: phdr.p_filesz(endian),
                    flags: phdr.p_flags(endian),
                }),
                elf::PT_DYNAMIC => dynamic = Some(phdr),
                _ => {}
            }
        }
        let dynamic_rela = match dynamic {
            Some(phdr) => {
                let entries = phdr
                    .dynamic(endian, data)
                    .map_err(|source| GoBinError::MalformedElf {
                        context: "PT_DYNAMIC",
                        source,
                    })?
                    .unwrap_or(&[]);
                let value = |tag: i64| {
                    entries
                        .iter()
                        .find(|d| d.d_tag(endian) == tag)
                        .map(|d| d.d_val(endian))
                };
                value(elf::DT_RELA).zip(value(elf::DT_RELASZ))
            }
            None => None,
        };

        // Section headers are optional: a binary with them removed still runs, and
        // the Go parsers fall back to scanning the segments.
        let (mut gopclntab, mut go_buildinfo, mut has_symtab) = (None, None, false);
        if let Ok(sections) = header.sections(endian, data) {
            for section in sections.iter() {
                let Ok(name) = sections.section_name(endian, section) else {
                    continue;
                };
                let range = || {
                    (section.sh_type(endian) != elf::SHT_NOBITS).then(|| SectionRange {
                        vaddr: section.sh_addr(endian),
                        file_offset: section.sh_offset(endian),
                        size: section.sh_size(endian),
                    })
                };
                match name {
                    b".gopclntab" => gopclntab = range(),
                    b".go.buildinfo" => go_buildinfo = range(),
                    b".symtab" => has_symtab = section.sh_type(endian) == elf::SHT_SYMTAB,
                    _ => {}
                }
            }
        }
        Ok(Self {
            machine: header.e_machine(endian),
            segments,
            gopclntab,
            go_buildinfo,
            has_symtab,
            dynamic_rela,
            relative_relocs: OnceLock::new(),
            symbols: OnceLock::new(),
        })
    }

    pub(crate) fn has_symtab(&self) -> bool {
        self.has_symtab
    }

    /// The segment whose file-backed bytes contain `vaddr`.
    pub(crate) fn segment_of(&self, vaddr: u64) -> Option<&LoadSegment> {
        self.segments.iter().find(|s| s.contains_file_backed(vaddr))
    }

    /// File offset of a virtual address: what a uprobe attached by offset needs.
    pub(crate) fn file_offset(&self, vaddr: u64) -> Option<u64> {
        let seg = self.segment_of(vaddr)?;
        seg.file_offset.checked_add(vaddr - seg.vaddr)
    }

    /// The file bytes from `vaddr` to the end of its segment's file data.
    pub(crate) fn bytes_from<'d>(&self, data: &'d [u8], vaddr: u64) -> Option<&'d [u8]> {
        let seg = self.segment_of(vaddr)?;
        let start = seg.file_offset.checked_add(vaddr - seg.vaddr)?;
        let end = seg.file_offset.checked_add(seg.file_size)?;
        data.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }

    /// Exactly `len` file bytes at `vaddr`, or `None` if they are not all file-backed.
    pub(crate) fn bytes_at<'d>(&self, data: &'d [u8], vaddr: u64, len: u64) -> Option<&'d [u8]> {
        self.bytes_from(data, vaddr)?
            .get(..usize::try_from(len).ok()?)
    }

    /// The file bytes of a whole segment.
    pub(crate) fn segment_bytes<'d>(&self, data: &'d [u8], seg: &LoadSegment) -> Option<&'d [u8]> {
        self.bytes_from(data, seg.vaddr)
    }

    /// A pointer stored at `vaddr`. A zero in the file is looked up among the
    /// RELATIVE relocations, where a position-independent link keeps the value.
    pub(crate) fn read_pointer(&self, data: &[u8], vaddr: u64) -> Option<u64> {
        let value = read_u64(self.bytes_at(data, vaddr, 8)?, 0)?;
        if value != 0 {
            return Some(value);
        }
        let relocs = self.relative_relocations(data);
        relocs
            .binary_search_by_key(&vaddr, |&(offset, _)| offset)
            .ok()
            .and_then(|i| relocs.get(i))
            .map(|&(_, addend)| addend)
    }

    /// `(r_offset, r_addend)` of every R_X86_64_RELATIVE relocation, sorted by offset.
    pub(crate) fn relative_relocations(&self, data: &[u8]) -> &[(u64, u64)] {
        self.relative_relocs.get_or_init(|| {
            let Some((vaddr, size)) = self.dynamic_rela else {
                return Vec::new();
            };
            let Some(table) = self.bytes_at(data, vaddr, size) else {
                return Vec::new();
            };
            let mut relocs: Vec<(u64, u64)> = table
                .chunks_exact(24)
                .filter_map(|entry| {
                    let offset = read_u64(entry, 0)?;
                    let info = read_u64(entry, 8)?;
                    let addend = read_u64(entry, 16)?;
                    (info & 0xffff_ffff == u64::from(elf::R_X86_64_RELATIVE))
                        .then_some((offset, addend))
                })
                .collect();
            relocs.sort_unstable();
            relocs
        })
    }

    /// The FUNC symbol of `.symtab` called `name`, if the binary still has a symbol table.
    pub(crate) fn symbol(&self, data: &[u8], name: &str) -> Option<ElfSymbol> {
        if !self.has_symtab {
            return None;
        }
        self.symbols
            .get_or_init(|| read_function_symbols(data).unwrap_or_default())
            .get(name)
            .copied()
    }

    /// Any symbol (function or data object) by name, read straight from `.symtab`.
    /// Used once per binary (for `runtime.firstmoduledata`), so no index is kept.
    pub(crate) fn any_symbol(&self, data: &[u8], name: &str) -> Option<ElfSymbol> {
        if !self.has_symtab {
            return None;
        }
        let (header, endian) = header(data)?;
        let sections = header.sections(endian, data).ok()?;
        let symtab = sections.symbols(endian, data, elf::SHT_SYMTAB).ok()?;
        symtab.iter().find_map(|sym| {
            (symtab.symbol_name(endian, sym).ok()? == name.as_bytes()).then(|| ElfSymbol {
                addr: sym.st_value(endian),
                size: sym.st_size(endian),
            })
        })
    }
}

fn header(data: &[u8]) -> Option<(&FileHeader, LE)> {
    let header = FileHeader::parse(data).ok()?;
    let endian = header.endian().ok()?;
    Some((header, endian))
}

/// Every defined FUNC symbol of `.symtab`, by name.
fn read_function_symbols(data: &[u8]) -> Option<HashMap<Box<str>, ElfSymbol>> {
    let (header, endian) = header(data)?;
    let sections = header.sections(endian, data).ok()?;
    let symtab = sections.symbols(endian, data, elf::SHT_SYMTAB).ok()?;
    let mut map = HashMap::with_capacity(symtab.len());
    for sym in symtab.iter() {
        if sym.st_type() != elf::STT_FUNC || sym.st_value(endian) == 0 {
            continue;
        }
        let Ok(name) = symtab.symbol_name(endian, sym) else {
            continue;
        };
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        map.entry(name.into()).or_insert(ElfSymbol {
            addr: sym.st_value(endian),
            size: sym.st_size(endian),
        });
    }
    Some(map)
}

/// Little-endian u64 at `at`, or `None` when out of bounds.
pub(crate) fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let raw = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(raw.try_into().ok()?))
}

/// Little-endian u32 at `at`, or `None` when out of bounds.
pub(crate) fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let raw = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(raw.try_into().ok()?))
}

/// The machine name for error messages.
pub(crate) fn machine_name(machine: u16) -> String {
    match machine {
        elf::EM_X86_64 => "x86-64".into(),
        elf::EM_AARCH64 => "aarch64".into(),
        other => format!("e_machine {other}"),
    }
}
