//! Input that is not a healthy Go binary gives a specific error, never a panic:
//! other file types, truncation, non-Go ELF files, corrupted pcHeaders, a lost
//! moduledata, broken build info, and random corruption of the Go tables.

// Helpers shared by the scenario tests below fail the test loudly.
#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::path::PathBuf;

use object::{Object as _, ObjectSection as _, ObjectSegment as _};
use tracer_gobin::{GoBinError, GoBinary, fixture::Variant};

/// A stripped Go 1.26 fixture (built if a toolchain exists), else any Go binary
/// Debian installed, else `None` after printing why the test skips.
fn go_binary(test: &str) -> Option<PathBuf> {
    if let Some(toolchain) = support::toolchains()
        .iter()
        .find(|t| t.version.starts_with("go1.26"))
        .or(support::toolchains().last())
    {
        return Some(support::build(toolchain, Variant::Stripped));
    }
    let debian = PathBuf::from("/usr/sbin/runc");
    if debian.exists() {
        return Some(debian);
    }
    support::skip(test, "no Go toolchain and no Debian Go binary");
    None
}

/// File offset and size of a section.
fn section(bytes: &[u8], name: &str) -> (usize, usize) {
    let file = object::File::parse(bytes).unwrap();
    let (offset, size) = file.section_by_name(name).unwrap().file_range().unwrap();
    (offset as usize, size as usize)
}

#[test]
fn non_elf_file_is_not_elf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.sh");
    std::fs::write(&path, "#!/bin/sh\necho not a binary\n").unwrap();
    assert!(matches!(GoBinary::open(&path), Err(GoBinError::NotElf(_))));
}

#[test]
fn empty_file_is_not_elf() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(GoBinary::open(&path), Err(GoBinError::NotElf(_))));
    assert!(matches!(
        GoBinary::parse(Vec::new()),
        Err(GoBinError::NotElf(_))
    ));
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let err = GoBinary::open("/nonexistent/podtrace-gobin").unwrap_err();
    assert!(matches!(err, GoBinError::Io { .. }));
    assert!(
        err.to_string().contains("/nonexistent/podtrace-gobin"),
        "{err}"
    );
}

#[test]
fn elf32_is_unsupported() {
    let mut bytes = vec![0u8; 52];
    bytes[..7].copy_from_slice(b"\x7fELF\x01\x01\x01");
    assert!(matches!(
        GoBinary::parse(bytes),
        Err(GoBinError::UnsupportedElf(_))
    ));
}

#[test]
fn elf_without_go_is_not_go() {
    let path = "/bin/true";
    let bytes = std::fs::read(path).unwrap();
    // Make sure the premise holds: no Go tables in this coreutils binary.
    let file = object::File::parse(&*bytes).unwrap();
    assert!(
        file.section_by_name(".gopclntab").is_none()
            && file.section_by_name(".go.buildinfo").is_none()
    );
    assert!(matches!(GoBinary::open(path), Err(GoBinError::NotGo)));
}

#[test]
fn truncated_go_elf_is_rejected_at_every_cut() {
    let Some(path) = go_binary("truncated_go_elf_is_rejected_at_every_cut") else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    assert!(matches!(
        GoBinary::parse(bytes[..10].to_vec()),
        Err(GoBinError::NotElf(_))
    ));
    assert!(matches!(
        GoBinary::parse(bytes[..64].to_vec()),
        Err(GoBinError::MalformedElf { .. })
    ));
    for cut in [
        200,
        4096,
        bytes.len() / 4,
        bytes.len() / 2,
        bytes.len() * 3 / 4,
        bytes.len() - 1,
    ] {
        let result = GoBinary::parse(bytes[..cut].to_vec());
        assert!(
            result.is_err() || cut == bytes.len() - 1,
            "cut at {cut} parsed"
        );
    }
}

#[test]
fn pclntab_with_go116_magic_is_unknown_version() {
    let Some(path) = go_binary("pclntab_with_go116_magic_is_unknown_version") else {
        return;
    };
    let mut bytes = std::fs::read(path).unwrap();
    let (offset, _) = section(&bytes, ".gopclntab");
    bytes[offset..offset + 4].copy_from_slice(&0xffff_fffa_u32.to_le_bytes());
    match GoBinary::parse(bytes) {
        Err(error @ GoBinError::UnknownPclntabVersion { magic }) => {
            assert_eq!(magic, 0xffff_fffa);
            // The message names the release, not only the magic.
            assert!(
                error.to_string().contains("a Go 1.16-1.17 binary"),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn pclntab_with_impossible_counts_is_corrupt() {
    let Some(path) = go_binary("pclntab_with_impossible_counts_is_corrupt") else {
        return;
    };
    let original = std::fs::read(path).unwrap();
    let (offset, _) = section(&original, ".gopclntab");
    // nfunc (word at 8), funcnameOffset (32) and pclnOffset (64) out of range.
    for field in [8, 32, 64] {
        let mut bytes = original.clone();
        bytes[offset + field..offset + field + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(
            matches!(GoBinary::parse(bytes), Err(GoBinError::CorruptPclntab(_))),
            "field at {field}"
        );
    }
    let mut bytes = original.clone();
    bytes[offset + 7] = 4; // ptrSize
    assert!(matches!(
        GoBinary::parse(bytes),
        Err(GoBinError::CorruptPclntab(_))
    ));
}

/// Go 1.26 stripped: without a moduledata pointing at the pcHeader there is no text start.
#[test]
fn textstart_zero_without_moduledata_is_an_error() {
    let test = "textstart_zero_without_moduledata_is_an_error";
    let Some(toolchain) = support::toolchain(26, test) else {
        return;
    };
    let mut bytes = std::fs::read(support::build(&toolchain, Variant::Stripped)).unwrap();
    let (pcheader, writable) = {
        let file = object::File::parse(&*bytes).unwrap();
        let writable: Vec<(u64, u64)> = file
            .segments()
            .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_W != 0))
            .map(|s| s.file_range())
            .collect();
        (
            file.section_by_name(".gopclntab").unwrap().address(),
            writable,
        )
    };
    // Zero every pointer to the pcHeader in the data segments (the section
    // headers also hold its address; those stay).
    let needle = pcheader.to_le_bytes();
    let mut replaced = 0;
    for (start, len) in writable {
        for at in (start as usize..(start + len) as usize - 8).step_by(8) {
            if bytes[at..at + 8] == needle {
                bytes[at..at + 8].fill(0);
                replaced += 1;
            }
        }
    }
    assert!(replaced >= 1);
    match GoBinary::parse(bytes) {
        Err(GoBinError::TextStartNotFound { pcheader: p }) => assert_eq!(p, pcheader),
        other => panic!("{other:?}"),
    }
}

#[test]
fn broken_build_info_is_reported() {
    let Some(path) = go_binary("broken_build_info_is_reported") else {
        return;
    };
    let original = std::fs::read(path).unwrap();
    let (offset, _) = section(&original, ".go.buildinfo");
    let mut bytes = original.clone();
    bytes[offset + 1] = b'X';
    assert!(matches!(
        GoBinary::parse(bytes),
        Err(GoBinError::NoBuildInfo)
    ));
    // Inline format: a version length that runs past the section's segment.
    let mut bytes = original.clone();
    bytes[offset + 32..offset + 36].copy_from_slice(&[0xff, 0xff, 0xff, 0x07]);
    assert!(matches!(
        GoBinary::parse(bytes),
        Err(GoBinError::CorruptBuildInfo(_))
    ));
}

/// A tiny deterministic generator; the tests must not depend on a seed source.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// Random bytes overwritten in the pcHeader, function table, names and build
/// info: whatever parses must also iterate, resolve and decode without panicking.
#[test]
fn random_corruption_of_go_tables_never_panics() {
    let Some(path) = go_binary("random_corruption_of_go_tables_never_panics") else {
        return;
    };
    let original = std::fs::read(path).unwrap();
    let (pcln, pcln_len) = section(&original, ".gopclntab");
    let (info, info_len) = section(&original, ".go.buildinfo");
    let mut rng = Lcg(0x5eed);
    let (mut parsed, mut failed) = (0, 0);
    for round in 0..300 {
        let mut bytes = original.clone();
        for _ in 0..1 + rng.next() % 8 {
            let at = match rng.next() % 4 {
                0 => pcln + (rng.next() as usize % 80),
                1 => pcln + (rng.next() as usize % pcln_len),
                2 => info + (rng.next() as usize % info_len.min(512)),
                _ => rng.next() as usize % 256,
            };
            bytes[at] = rng.next() as u8;
        }
        match GoBinary::parse(bytes) {
            Ok(bin) => {
                parsed += 1;
                let _ = bin.build_info().to_string();
                for f in bin.functions().step_by(1 + round % 50).flatten() {
                    let _ = bin.ret_offsets(&f);
                }
                let _ = bin.function("crypto/tls.(*Conn).Write");
            }
            Err(err) => {
                failed += 1;
                let _ = err.to_string();
            }
        }
    }
    println!("random corruption: {parsed} parsed, {failed} rejected");
}
