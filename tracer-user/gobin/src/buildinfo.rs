//! `.go.buildinfo` reader: ELF layout and file bytes in, [`BuildInfo`] out —
//! the Go version, main module and dependency modules that `go version -m`
//! prints (format: `src/debug/buildinfo/buildinfo.go` and
//! `src/runtime/debug/mod.go`).
//!
//! The blob starts with the 14-byte magic `"\xff Go buildinf:"`, a pointer size
//! and a flags byte, padded to 32 bytes. Go 1.18 and later (flag bit 1) put the
//! version and module strings inline after it, each prefixed by a uvarint
//! length. Older releases put two pointers at offset 16 to Go string headers
//! (data pointer, length) elsewhere in the data. The module text is framed by
//! 16 sentinel bytes on each side; inside it is line-oriented:
//! `path`, `mod`, `dep`, `=>` (replacement of the line before) and `build`.

use std::fmt;

use crate::{
    elf::{ElfLayout, read_u64},
    error::{GoBinError, Result},
};

const MAGIC: &[u8; 14] = b"\xff Go buildinf:";
const HEADER_SIZE: usize = 32;
const FLAG_BIG_ENDIAN: u8 = 0x1;
const FLAG_INLINE_STRINGS: u8 = 0x2;
/// Module info is a few KB even for Kubernetes; bounds a corrupt length.
const MAX_STRING_LEN: u64 = 16 << 20;

/// A Go module: path, version, checksum and optional replacement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Module {
    pub path: String,
    /// e.g. `v1.56.3`; `(devel)` for a main module built from a work tree.
    pub version: String,
    /// `h1:` checksum; empty for the main module and for replaced modules.
    pub sum: String,
    /// The `=>` line that follows this module's line, if any.
    pub replace: Option<Box<Module>>,
}

/// What `go version -m` prints about a binary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildInfo {
    /// e.g. `go1.26.6` (possibly followed by ` X:experiment`).
    pub go_version: String,
    /// The main package's import path (`path` line).
    pub path: String,
    /// The main module (`mod` line); empty for binaries built outside module mode.
    pub main: Module,
    /// Every dependency module (`dep` lines), in the order the linker wrote them.
    pub deps: Vec<Module>,
    /// `build` lines as key and value, e.g. `("GOARCH", "amd64")`.
    pub settings: Vec<(String, String)>,
    /// The module text exactly as stored, for rendering like `go version -m`.
    raw_modinfo: String,
}

impl BuildInfo {
    /// The dependency (or main module) with this path, after following no replacement.
    pub fn module(&self, path: &str) -> Option<&Module> {
        std::iter::once(&self.main)
            .chain(&self.deps)
            .find(|m| m.path == path)
    }

    /// The build setting called `key`.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Parses the build info of the binary described by `layout`.
    pub(crate) fn read(layout: &ElfLayout, data: &[u8]) -> Result<Self> {
        let blob_vaddr = match layout.go_buildinfo {
            Some(section) => section.vaddr,
            None => find_blob(layout, data).ok_or(GoBinError::NoBuildInfo)?,
        };
        let blob = layout
            .bytes_from(data, blob_vaddr)
            .ok_or(GoBinError::AddressNotMapped {
                what: ".go.buildinfo",
                addr: blob_vaddr,
            })?;
        if !blob.starts_with(MAGIC) {
            return Err(GoBinError::NoBuildInfo);
        }
        let header = blob
            .get(..HEADER_SIZE)
            .ok_or_else(|| corrupt(format!("header truncated to {} bytes", blob.len())))?;
        let (ptr_size, flags) = (header[14], header[15]);
        let (version, modinfo) = if flags & FLAG_INLINE_STRINGS != 0 {
            let rest = &blob[HEADER_SIZE..];
            let (version, rest) =
                inline_string(rest).ok_or_else(|| corrupt("Go version string truncated".into()))?;
            let (modinfo, _) =
                inline_string(rest).ok_or_else(|| corrupt("module string truncated".into()))?;
            (version, modinfo)
        } else {
            if ptr_size != 8 || flags & FLAG_BIG_ENDIAN != 0 {
                return Err(corrupt(format!(
                    "pointer size {ptr_size}, flags {flags:#x}: only 64-bit little-endian is supported"
                )));
            }
            let version = pointed_string(layout, data, blob_vaddr + 16)?;
            let modinfo = pointed_string(layout, data, blob_vaddr + 24)?;
            (version, modinfo)
        };
        let go_version = String::from_utf8_lossy(version).into_owned();
        Ok(parse_modinfo(
            go_version,
            &String::from_utf8_lossy(strip_sentinels(modinfo)),
        ))
    }
}

/// Renders the lines `go version -m FILE` prints after `FILE: `.
impl fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.go_version)?;
        for line in self.raw_modinfo.lines() {
            writeln!(f, "\t{line}")?;
        }
        Ok(())
    }
}

fn corrupt(what: String) -> GoBinError {
    GoBinError::CorruptBuildInfo(what)
}

/// Without section headers: the blob is 16-byte aligned in a writable segment.
fn find_blob(layout: &ElfLayout, data: &[u8]) -> Option<u64> {
    layout
        .segments
        .iter()
        .filter(|s| s.is_writable())
        .find_map(|seg| {
            let bytes = layout.segment_bytes(data, seg)?;
            let skew = ((16 - seg.vaddr % 16) % 16) as usize;
            (skew..bytes.len())
                .step_by(16)
                .find(|&at| bytes.get(at..).is_some_and(|b| b.starts_with(MAGIC)))
                .map(|at| seg.vaddr + at as u64)
        })
}

/// A uvarint-length-prefixed string at the start of `bytes`, and what follows it.
fn inline_string(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut len: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if len > MAX_STRING_LEN {
                return None;
            }
            let rest = &bytes[i + 1..];
            let len = len as usize;
            return Some((rest.get(..len)?, rest.get(len..)?));
        }
    }
    None
}

/// Pre-1.18 layout: `at` holds a pointer to a Go string header (data, len).
fn pointed_string<'d>(layout: &ElfLayout, data: &'d [u8], at: u64) -> Result<&'d [u8]> {
    let header = layout
        .read_pointer(data, at)
        .ok_or_else(|| corrupt(format!("string pointer at {at:#x} unreadable")))?;
    let ptr = layout
        .read_pointer(data, header)
        .ok_or_else(|| corrupt(format!("string header at {header:#x} unreadable")))?;
    let len = layout
        .bytes_at(data, header + 8, 8)
        .and_then(|b| read_u64(b, 0))
        .filter(|&len| len <= MAX_STRING_LEN)
        .ok_or_else(|| {
            corrupt(format!(
                "string length at {:#x} unreadable or too large",
                header + 8
            ))
        })?;
    if len == 0 {
        return Ok(&[]);
    }
    layout.bytes_at(data, ptr, len).ok_or_else(|| {
        corrupt(format!(
            "string data at {ptr:#x} ({len} bytes) not in the file"
        ))
    })
}

/// Drops the 16-byte sentinels the linker puts around the module text.
fn strip_sentinels(modinfo: &[u8]) -> &[u8] {
    let n = modinfo.len();
    if n >= 33 && modinfo.get(n - 17) == Some(&b'\n') {
        &modinfo[16..n - 16]
    } else {
        modinfo
    }
}

/// Parses module text the way `runtime/debug.ParseBuildInfo` does, leniently:
/// unknown or malformed lines are skipped rather than failing the whole binary.
fn parse_modinfo(go_version: String, text: &str) -> BuildInfo {
    let mut info = BuildInfo {
        go_version,
        raw_modinfo: text.to_owned(),
        ..BuildInfo::default()
    };
    // Where the next `=>` line goes: the main module or the last dependency.
    let mut last_is_main = false;
    for line in text.lines() {
        let mut fields = line.split('\t');
        let Some(word) = fields.next() else { continue };
        let module = |mut fields: std::str::Split<'_, char>| Module {
            path: fields.next().unwrap_or_default().to_owned(),
            version: fields.next().unwrap_or_default().to_owned(),
            sum: fields.next().unwrap_or_default().to_owned(),
            replace: None,
        };
        match word {
            "path" => info.path = fields.next().unwrap_or_default().to_owned(),
            "mod" => {
                info.main = module(fields);
                last_is_main = true;
            }
            "dep" => {
                info.deps.push(module(fields));
                last_is_main = false;
            }
            "=>" => {
                let target = if last_is_main {
                    Some(&mut info.main)
                } else {
                    info.deps.last_mut()
                };
                if let Some(target) = target {
                    target.replace = Some(Box::new(module(fields)));
                }
            }
            "build" => {
                let rest = line.get("build\t".len()..).unwrap_or_default();
                if let Some((key, value)) = rest.split_once('=') {
                    info.settings.push((key.to_owned(), value.to_owned()));
                }
            }
            _ => {}
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modinfo_with_replacement_and_settings() {
        let text = "path\tk8s.io/kubernetes/cmd/kubelet\nmod\tk8s.io/kubernetes\t(devel)\t\n\
                    dep\tgoogle.golang.org/grpc\tv1.72.1\th1:abc=\n\
                    dep\tk8s.io/api\tv0.0.0\t\n=>\t./staging/src/k8s.io/api\t(devel)\t\n\
                    build\t-ldflags=\"-s -w\"\nbuild\tGOARCH=amd64\n";
        let info = parse_modinfo("go1.26.6".into(), text);
        assert_eq!(info.path, "k8s.io/kubernetes/cmd/kubelet");
        assert_eq!(info.main.path, "k8s.io/kubernetes");
        assert_eq!(info.deps.len(), 2);
        assert_eq!(
            info.module("google.golang.org/grpc")
                .map(|m| m.version.as_str()),
            Some("v1.72.1")
        );
        let api = info.module("k8s.io/api").unwrap();
        assert_eq!(
            api.replace.as_deref().map(|m| m.path.as_str()),
            Some("./staging/src/k8s.io/api")
        );
        assert_eq!(info.setting("-ldflags"), Some("\"-s -w\""));
        assert_eq!(info.setting("GOARCH"), Some("amd64"));
    }

    #[test]
    fn inline_strings_reject_truncation() {
        assert_eq!(
            inline_string(&[3, b'a', b'b', b'c', 9]),
            Some((&b"abc"[..], &[9u8][..]))
        );
        assert_eq!(inline_string(&[4, b'a']), None);
        assert_eq!(inline_string(&[0x80; 12]), None);
        assert_eq!(inline_string(&[]), None);
    }

    #[test]
    fn sentinels_are_stripped_only_when_present() {
        let mut framed = vec![b'x'; 16];
        framed.extend_from_slice(b"path\tp\n");
        framed.extend_from_slice(&[b'y'; 16]);
        framed.insert(16, b'q');
        // len >= 33 and the byte 17 from the end is the '\n' ending the text.
        assert_eq!(strip_sentinels(&framed), b"qpath\tp\n");
        assert_eq!(strip_sentinels(b"short"), b"short");
    }

    /// A minimal ELF64 with one RW PT_LOAD at 0x10000 holding a Go < 1.18 build
    /// info blob: pointers to Go string headers instead of inline strings.
    fn elf_with_pointer_format_blob(modinfo: &[u8]) -> Vec<u8> {
        const BASE: u64 = 0x10000;
        let mut elf = vec![0u8; 0x110];
        elf[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        let put16 =
            |b: &mut Vec<u8>, at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put16(&mut elf, 0x10, 2); // ET_EXEC
        put16(&mut elf, 0x12, 62); // EM_X86_64
        put32(&mut elf, 0x14, 1);
        put64(&mut elf, 0x20, 64); // e_phoff
        put16(&mut elf, 0x34, 64); // e_ehsize
        put16(&mut elf, 0x36, 56); // e_phentsize
        put16(&mut elf, 0x38, 1); // e_phnum
        // The blob at file 0x80, its string headers at 0xc0 and 0xd0, strings from 0x100.
        elf[0x80..0x80 + 14].copy_from_slice(MAGIC);
        elf[0x80 + 14] = 8;
        put64(&mut elf, 0x90, BASE + 0xc0);
        put64(&mut elf, 0x98, BASE + 0xd0);
        put64(&mut elf, 0xc0, BASE + 0x100);
        put64(&mut elf, 0xc8, 8);
        put64(&mut elf, 0xd0, BASE + 0x108);
        put64(&mut elf, 0xd8, modinfo.len() as u64);
        elf[0x100..0x108].copy_from_slice(b"go1.17.3");
        elf.truncate(0x108);
        elf.extend_from_slice(modinfo);
        let len = elf.len() as u64;
        // PT_LOAD, RW, whole file at BASE.
        put32(&mut elf, 64, 1);
        put32(&mut elf, 68, 6);
        put64(&mut elf, 64 + 16, BASE);
        put64(&mut elf, 64 + 32, len);
        put64(&mut elf, 64 + 40, len);
        elf
    }

    #[test]
    fn pre_go118_pointer_format_is_read() {
        let mut modinfo = vec![0x30; 16];
        modinfo.extend_from_slice(b"path\texample.com/cmd\nmod\texample.com\tv1.2.3\th1:x=\n");
        modinfo.extend_from_slice(&[0xf9; 16]);
        let elf = elf_with_pointer_format_blob(&modinfo);
        let layout = ElfLayout::parse(&elf).unwrap();
        let info = BuildInfo::read(&layout, &elf).unwrap();
        assert_eq!(info.go_version, "go1.17.3");
        assert_eq!(info.path, "example.com/cmd");
        assert_eq!(info.main.version, "v1.2.3");
    }

    #[test]
    fn pre_go118_pointer_format_with_bad_pointers_is_corrupt() {
        let mut elf = elf_with_pointer_format_blob(b"");
        elf[0x90..0x98].copy_from_slice(&0xdead_0000_u64.to_le_bytes());
        let layout = ElfLayout::parse(&elf).unwrap();
        assert!(matches!(
            BuildInfo::read(&layout, &elf),
            Err(GoBinError::CorruptBuildInfo(_))
        ));
    }
}
