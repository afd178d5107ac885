//! Go binary introspection for podtrace: a path (or the bytes) of a Go ELF
//! executable in; out, what attaching uprobes to it needs:
//!
//! - **functions** — entry, end and file offset (for attach by offset) of a Go
//!   function by its full name, from `.symtab` when the binary still has it and
//!   from `.gopclntab` otherwise (stripped `-s -w` builds; Go 1.18–1.27 layouts,
//!   including Go ≥ 1.26 whose pcHeader no longer stores the text start);
//! - **build info** — Go version, main module and every dependency, as
//!   `go version -m` prints them ([`BuildInfo`]);
//! - **RET offsets** — every near RET of a function, found with an x86-64
//!   decoder, for "return" uprobes ([`GoBinary::ret_offsets`]);
//! - **struct offsets** — field offsets the Go probes read, from a table
//!   generated from DWARF per Go release ([`StructOffsets::for_binary`]);
//! - **Kubernetes** — the version of a Kubernetes component, unstripped or
//!   stripped ([`GoBinary::kubernetes_version`]), and the offsets of the
//!   Kubernetes object fields the probes read, per Kubernetes release
//!   ([`kube_offsets`]).
//!
//! Parsing is deterministic and does not depend on the running kernel or
//! process. Nothing read from the file is trusted: malformed input gives a
//! [`GoBinError`], never a panic (`fuzz/` exercises this).
//!
//! ```no_run
//! # fn main() -> Result<(), tracer_gobin::GoBinError> {
//! let bin = tracer_gobin::GoBinary::open("/usr/bin/containerd")?;
//! println!("{}", bin.build_info().go_version);
//! if let Some(f) = bin.function("crypto/tls.(*Conn).Write")? {
//!     let rets = bin.ret_offsets(&f)?;
//!     println!("{} at file offset {:#x}, RETs at {rets:?}", f.name, f.file_offset);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The offsets table generator is the `gen-offsets` binary of this crate:
//!
//! ```text
//! gen-offsets [--out FILE] [--go PATH/TO/go/bin/go]... [--binary UNSTRIPPED_GO_BINARY]...
//! ```
//!
//! With neither `--go` nor `--binary` it uses every toolchain [`fixture::toolchains`]
//! finds (`<workspace>/.tools/go/*/go/bin/go`, or `PODTRACE_GO_ROOTS`), builds
//! `testdata/fixture` with each, reads the DWARF and writes the Rust table
//! (`src/offsets_table.rs`; stdout without `--out`). `cargo xtask offsets` runs
//! `cargo run -p tracer-gobin --bin gen-offsets -- --out tracer-user/gobin/src/offsets_table.rs`.
//! `gen-offsets --kube UNSTRIPPED_K8S_BINARY... --out src/kube_offsets_table.rs`
//! writes the Kubernetes table instead (`cargo xtask offsets --kube DIR`).
//!
//! ```no_run
//! # fn main() -> Result<(), tracer_gobin::GoBinError> {
//! let bin = tracer_gobin::GoBinary::open("/usr/local/bin/kube-apiserver")?;
//! if let Some(version) = bin.kubernetes_version()? {
//!     let offsets = tracer_gobin::kube_offsets(version)?;
//!     println!("{version}: Pod.ObjectMeta.Name at {}", offsets.pod_name);
//! }
//! # Ok(())
//! # }
//! ```

mod arginfo;
mod buildinfo;
mod elf;
mod error;
pub mod fixture;
mod kube;
pub mod kube_args;
mod kube_offsets_table;
mod moduledata;
mod offsets;
mod offsets_table;
mod pclntab;
mod ret;
mod rtypes;

use std::{collections::BTreeMap, collections::HashMap, fs::File, path::Path, sync::OnceLock};

pub use arginfo::{ArgAt, ArgLoc, ArgLocations, Param};
pub use buildinfo::{BuildInfo, Module};
pub use error::{GoBinError, Result};
pub use kube::{
    KUBE_FIELDS, KubeArgWords, KubeField, KubeOffsets, KubeOffsetsMode, KubeOffsetsSource,
    KubeStructOffsets, KubeVersion, WordSource, known_kube_releases, kube_offsets,
    kube_offsets_for,
};
pub use moduledata::TextStartSource;
pub use offsets::{GoRelease, StructOffsets};
pub use pclntab::PclntabVersion;
pub use ret::EntryPoint;
pub use rtypes::TypeDescriptors;

use elf::ElfLayout;
use pclntab::Pclntab;

/// `abi.FuncFlagAsm` (`src/internal/abi/symtab.go`, same bit in Go 1.18–1.27).
const FUNC_FLAG_ASM: u8 = 1 << 2;
/// The suffix `.symtab` gives the ABI0 twin of a function that has both ABIs.
const ABI0_SUFFIX: &str = ".abi0";

/// Where a [`Function`]'s addresses came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionSource {
    /// The ELF `.symtab` (unstripped binaries).
    Symtab,
    /// The Go function table in `.gopclntab`.
    Pclntab,
}

/// A function of the binary, addressed as the ELF file lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Full Go symbol name, e.g. `crypto/tls.(*Conn).Write`.
    pub name: String,
    /// Link-time virtual address of the first instruction.
    pub entry: u64,
    /// One past the last byte (for pclntab: the next function's entry, padding included).
    pub end: u64,
    /// File offset of `entry`: what a uprobe attached by offset needs, PIE or not.
    pub file_offset: u64,
    pub source: FunctionSource,
}

/// The file bytes, mapped or owned.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
        }
    }
}

/// A parsed Go ELF binary. Parsing reads the headers, the pcHeader, the text
/// start and the build info; names are indexed on the first lookup.
pub struct GoBinary {
    data: Bytes,
    layout: ElfLayout,
    pclntab: Pclntab,
    text_start: u64,
    text_start_source: TextStartSource,
    build_info: BuildInfo,
    /// pclntab function index by name, built on the first pclntab lookup.
    names: OnceLock<HashMap<Box<str>, u32>>,
    /// The moduledata's address, found on first use (a scan of the data
    /// segments in a stripped binary).
    moduledata: OnceLock<Option<u64>>,
}

impl std::fmt::Debug for GoBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoBinary")
            .field("len_bytes", &self.data.len())
            .field("go_version", &self.build_info.go_version)
            .field("pclntab_version", &self.pclntab.version)
            .field("text_start", &format_args!("{:#x}", self.text_start))
            .field("text_start_source", &self.text_start_source)
            .finish_non_exhaustive()
    }
}

impl GoBinary {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GoBinError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // An empty file cannot be mapped; let the ELF check report it.
        if file.metadata().map_err(io)?.len() == 0 {
            return Self::parse(Vec::new());
        }
        // SAFETY: the mapping is read-only and private. If another process
        // truncates the file while it is mapped, reads fault (SIGBUS): the same
        // exposure every tool that maps executables has; binaries podtrace
        // inspects are installed executables, not files being rewritten.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::from_bytes(Bytes::Mapped(map))
    }

    /// Parses a binary held in memory.
    pub fn parse(bytes: Vec<u8>) -> Result<Self> {
        Self::from_bytes(Bytes::Owned(bytes))
    }

    fn from_bytes(data: Bytes) -> Result<Self> {
        let layout = ElfLayout::parse(&data)?;
        let pclntab = Pclntab::locate(&layout, &data)?;
        let (text_start, text_start_source) = moduledata::text_start(&layout, &data, &pclntab)?;
        let build_info = BuildInfo::read(&layout, &data)?;
        Ok(Self {
            data,
            layout,
            pclntab,
            text_start,
            text_start_source,
            build_info,
            names: OnceLock::new(),
            moduledata: OnceLock::new(),
        })
    }

    pub fn build_info(&self) -> &BuildInfo {
        &self.build_info
    }

    pub fn pclntab_version(&self) -> PclntabVersion {
        self.pclntab.version
    }

    /// The address pclntab entry offsets are relative to (`runtime.text`).
    pub fn text_start(&self) -> u64 {
        self.text_start
    }

    pub fn text_start_source(&self) -> TextStartSource {
        self.text_start_source
    }

    /// The runtime type descriptors: struct field offsets read from the
    /// binary itself, stripped or not ([`TypeDescriptors::field_offset`]).
    pub fn type_descriptors(&self) -> Result<TypeDescriptors<'_>> {
        let go = GoRelease::parse(&self.build_info.go_version).ok_or_else(|| {
            GoBinError::TypeDescriptors {
                reason: format!("unknown Go version {:?}", self.build_info.go_version),
            }
        })?;
        let moduledata = self
            .moduledata()
            .ok_or_else(|| GoBinError::TypeDescriptors {
                reason: "no moduledata consistent with the pclntab".into(),
            })?;
        TypeDescriptors::new(&self.layout, &self.data, moduledata, go)
    }

    /// The address of the moduledata ([`moduledata::locate`]), looked for once.
    fn moduledata(&self) -> Option<u64> {
        *self.moduledata.get_or_init(|| {
            moduledata::locate(&self.layout, &self.data, &self.pclntab).map(|(at, _, _)| at)
        })
    }

    /// Whether the ELF symbol table is still there (the binary was not stripped).
    pub fn has_symtab(&self) -> bool {
        self.layout.has_symtab()
    }

    /// Resolves a function by its full name: from `.symtab` if present, else from
    /// pclntab. `Ok(None)` when no function has that name. A name ending in
    /// `.abi0` (how `.symtab` names the assembly-ABI twin of a function that has
    /// both) finds that twin in pclntab too.
    pub fn function(&self, name: &str) -> Result<Option<Function>> {
        if let Some(sym) = self.layout.symbol(&self.data, name) {
            let end = if sym.size > 0 {
                sym.addr.saturating_add(sym.size)
            } else {
                match self.pclntab_function(name)? {
                    Some(f) => f.end,
                    None => sym.addr,
                }
            };
            return Ok(Some(Function {
                name: name.to_owned(),
                entry: sym.addr,
                end,
                file_offset: self.file_offset(sym.addr, "function entry")?,
                source: FunctionSource::Symtab,
            }));
        }
        self.pclntab_function(name)
    }

    /// Resolves a function from pclntab only, ignoring `.symtab`.
    pub fn pclntab_function(&self, name: &str) -> Result<Option<Function>> {
        match self.pclntab_index(name) {
            Some(i) => self.function_at(i).map(Some),
            None => Ok(None),
        }
    }

    /// The pclntab index of the function named `name`.
    fn pclntab_index(&self, name: &str) -> Option<u32> {
        self.names
            .get_or_init(|| self.index_names())
            .get(name)
            .copied()
    }

    /// Every function of pclntab, in address order.
    pub fn functions(&self) -> impl Iterator<Item = Result<Function>> + '_ {
        (0..self.pclntab.nfunc).map(|i| self.function_at(i))
    }

    /// Offsets, relative to the entry, of every near RET between `f.entry` and `f.end`.
    pub fn ret_offsets(&self, f: &Function) -> Result<Vec<u64>> {
        Ok(ret::ret_offsets(self.function_code(f)?, f.entry))
    }

    /// Where `f`'s first `words` integer arguments stay for the whole call
    /// (see `ret::homed_args`): the caller's spill area, as an offset from
    /// RSP inside the function's body; then a probe inside it, or on a RET
    /// (at `RSP + 8`), sees what an entry probe would have saved.
    pub fn homed_args(&self, f: &Function, words: usize) -> Result<Option<u64>> {
        Ok(ret::homed_args(self.function_code(f)?, f.entry, words))
    }

    /// The one direct call `f` makes to `runtime.memmove`, as an offset from
    /// its entry; `None` when it makes none or several. A probe on a CALL is
    /// emulated by the kernel (one trap), and the call's registers say what
    /// is copied where: for `crypto/tls.(*Conn).Read`, the plaintext handed
    /// to the caller (`copy(b, c.input...)`, inlined).
    pub fn memmove_call(&self, f: &Function) -> Result<Option<u64>> {
        let Some(memmove) = self.function("runtime.memmove")? else {
            return Ok(None);
        };
        let calls = ret::calls_to(self.function_code(f)?, f.entry, memmove.entry);
        Ok(match calls[..] {
            [only] => Some(only),
            _ => None,
        })
    }

    /// The machine code of `f` (amd64 only).
    fn function_code(&self, f: &Function) -> Result<&[u8]> {
        if self.layout.machine != object::elf::EM_X86_64 {
            return Err(GoBinError::UnsupportedArchitecture {
                machine: elf::machine_name(self.layout.machine),
            });
        }
        let len = f.end.saturating_sub(f.entry);
        self.layout
            .bytes_at(&self.data, f.entry, len)
            .ok_or(GoBinError::AddressNotMapped {
                what: "function code",
                addr: f.entry,
            })
    }

    /// Where an entry uprobe on `f` should attach (see [`EntryPoint`]): on
    /// Go's stack-growth check, whose jump the kernel emulates; the probe
    /// skips the hit of a call that grows its stack (it runs the prologue
    /// twice).
    pub fn entry_point(&self, f: &Function) -> Result<EntryPoint> {
        Ok(ret::entry_point(self.function_code(f)?, f.entry))
    }

    /// The data `podtrace inspect` prints for these function names; names that
    /// do not resolve are listed in [`Inspection::missing`].
    pub fn inspect<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> Result<Inspection> {
        let mut functions = BTreeMap::new();
        let mut missing = Vec::new();
        for name in names {
            match self.function(name)? {
                Some(f) => {
                    let ret_offsets = self.ret_offsets(&f)?;
                    functions.insert(
                        f.name,
                        InspectedFunction {
                            entry: f.entry,
                            end: f.end,
                            file_offset: f.file_offset,
                            ret_offsets,
                        },
                    );
                }
                None => missing.push(name.to_owned()),
            }
        }
        let info = &self.build_info;
        Ok(Inspection {
            go_version: info.go_version.clone(),
            main: info.main.clone(),
            modules: info.deps.clone(),
            functions,
            missing,
        })
    }

    fn file_offset(&self, vaddr: u64, what: &'static str) -> Result<u64> {
        self.layout
            .file_offset(vaddr)
            .ok_or(GoBinError::AddressNotMapped { what, addr: vaddr })
    }

    fn function_at(&self, index: u32) -> Result<Function> {
        let raw = self.pclntab.function(&self.data, index).ok_or_else(|| {
            GoBinError::CorruptPclntab(format!(
                "function {index} of {} is out of bounds",
                self.pclntab.nfunc
            ))
        })?;
        let entry = self.text_start.saturating_add(u64::from(raw.entry_off));
        let end = self.text_start.saturating_add(u64::from(raw.end_off));
        Ok(Function {
            name: String::from_utf8_lossy(raw.name).into_owned(),
            entry,
            end,
            file_offset: self.file_offset(entry, "function entry")?,
            source: FunctionSource::Pclntab,
        })
    }

    /// Name → function index over all of pclntab, in one pass.
    ///
    /// A function called from both Go and assembly exists twice under one name:
    /// the ABIInternal body and an ABI0 wrapper (or an ABI0 assembly body and an
    /// ABIInternal wrapper). `.symtab` calls the ABI0 one `NAME.abi0`; we index
    /// it under that name too, so both tables answer the same question the same
    /// way. The ABI0 twin is the one flagged as assembly, else the later one —
    /// the compiler emits ABI wrappers after the functions of their package.
    /// Other repeated names (generic instantiations whose shapes print alike)
    /// resolve to the first, lowest-addressed function.
    fn index_names(&self) -> HashMap<Box<str>, u32> {
        let mut index: HashMap<Box<str>, u32> = HashMap::with_capacity(self.pclntab.nfunc as usize);
        let is_asm = |i: u32| {
            self.pclntab
                .function(&self.data, i)
                .is_some_and(|f| f.flag & FUNC_FLAG_ASM != 0)
        };
        for i in 0..self.pclntab.nfunc {
            let Some(raw) = self.pclntab.function(&self.data, i) else {
                continue;
            };
            let Ok(name) = std::str::from_utf8(raw.name) else {
                continue;
            };
            // `.symtab` spells `·` (in compiler-generated names like
            // `type:.eq.T·1`) as `.`; answer to that spelling too.
            if name.contains('·') {
                index.entry(name.replace('·', ".").into()).or_insert(i);
            }
            let Some(&first) = index.get(name) else {
                index.insert(name.into(), i);
                continue;
            };
            let abi0 = if is_asm(first) && !is_asm(i) {
                index.insert(name.into(), i);
                first
            } else {
                i
            };
            index
                .entry(format!("{name}{ABI0_SUFFIX}").into())
                .or_insert(abi0);
        }
        index
    }
}

/// What `podtrace inspect` prints: plain data, ready for any serializer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub go_version: String,
    pub main: Module,
    pub modules: Vec<Module>,
    pub functions: BTreeMap<String, InspectedFunction>,
    /// Requested names that resolved to no function.
    pub missing: Vec<String>,
}

/// One resolved function in an [`Inspection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectedFunction {
    pub entry: u64,
    pub end: u64,
    pub file_offset: u64,
    /// RET offsets relative to `entry`.
    pub ret_offsets: Vec<u64>,
}
