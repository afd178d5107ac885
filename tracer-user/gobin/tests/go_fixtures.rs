//! The fixture in `testdata/fixture`, built with every Go toolchain found
//! (1.21 … 1.27) as plain, stripped, PIE, stripped PIE, CGo and stripped CGo:
//! every function pclntab resolves has the entry the unstripped twin's
//! `.symtab` gives it (and vice versa), every RET offset is a RET, and the
//! build info reads as `go version -m` prints it.

// Helpers shared by the scenario tests below fail the test loudly.
#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::path::Path;

use tracer_gobin::{FunctionSource, GoBinary, TextStartSource, fixture::Variant};

/// Resolves every function of `variant` from pclntab and compares with the
/// `.symtab` of its unstripped twin, both ways; checks RETs and build info.
fn check_against_symtab(minor: u32, variant: Variant, test: &str) {
    let Some(toolchain) = support::toolchain(minor, test) else {
        return;
    };
    let path = support::build(&toolchain, variant);
    let twin = support::build(&toolchain, variant.unstripped_twin());
    let bin = GoBinary::open(&path).unwrap();
    assert_eq!(bin.has_symtab(), !variant.is_stripped(), "{test}");
    let symtab = support::symtab(&twin);
    let data = std::fs::read(&path).unwrap();

    // pclntab → symtab: each function sits at an address the symtab names it (an
    // ABI0 twin is `NAME.abi0` there; the linker writes `·` as `.` in .symtab).
    let mut functions = 0;
    let mut rets = 0;
    for f in bin.functions() {
        let f = f.unwrap();
        let names = symtab
            .by_addr
            .get(&f.entry)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let symtab_name = f.name.replace('·', ".");
        assert!(
            names
                .iter()
                .any(|n| *n == symtab_name || *n == format!("{symtab_name}.abi0")),
            "{test}: {} at {:#x} from pclntab, symtab has {names:?} there",
            f.name,
            f.entry
        );
        assert!(f.end > f.entry, "{test}: {} is empty", f.name);
        for off in bin.ret_offsets(&f).unwrap() {
            let at = (f.file_offset + off) as usize;
            let code = &data[at..at + 2];
            assert!(
                code[0] == 0xc3 || code[0] == 0xc2 || code == [0xf3, 0xc3],
                "{test}: {}+{off:#x} is {code:02x?}, not a RET",
                f.name
            );
            rets += 1;
        }
        functions += 1;
    }

    // symtab → pclntab by name: every Go function of the twin resolves from
    // pclntab alone to the same entry (C functions of CGo builds are not in pclntab).
    let mut by_name = 0;
    for (name, &addr) in &symtab.by_name {
        if let Some(f) = bin.pclntab_function(name).unwrap() {
            assert_eq!(f.entry, addr, "{test}: {name}");
            assert_eq!(f.source, FunctionSource::Pclntab);
            by_name += 1;
        }
    }
    assert!(
        functions > 5000 && rets > functions,
        "{test}: {functions} functions, {rets} RETs"
    );
    // Names the symtab gives to several addresses (generic shapes) are left out.
    assert!(
        by_name * 100 >= functions * 95,
        "{test}: only {by_name} of {functions} names resolved"
    );

    // What podtrace probes resolves, whichever table is used. Go 1.27 moved
    // net/http's bundled http2 (`net/http.http2Framer`) to net/http/internal/http2.
    for names in [
        &["crypto/tls.(*Conn).Write"][..],
        &["crypto/tls.(*Conn).Read"],
        &[
            "net/http.(*http2Framer).WriteHeaders",
            "net/http/internal/http2.(*Framer).WriteHeaders",
        ],
        &["vendor/golang.org/x/net/http2/hpack.(*Encoder).WriteField"],
    ] {
        let f = names
            .iter()
            .find_map(|name| bin.function(name).unwrap())
            .unwrap_or_else(|| panic!("{test}: none of {names:?} found"));
        assert_eq!(
            Some(f.entry),
            symtab.by_name.get(&f.name).copied(),
            "{test}: {}",
            f.name
        );
        assert!(
            !bin.ret_offsets(&f).unwrap().is_empty(),
            "{test}: {} has no RET",
            f.name
        );
    }

    // `Read(b)` homes its receiver and buffer in the caller's spill slots, and
    // makes one call to runtime.memmove: the inlined `copy(b, c.input...)`
    // that hands the plaintext over. podtrace probes that call (one emulated
    // trap per read) and reads `c` from its slot; a release where either
    // stopped holding would fall back to the RET probes, and fail here. Go's
    // own disassembler, on the unstripped twin, names the call's source line.
    let read = bin
        .function("crypto/tls.(*Conn).Read")
        .unwrap()
        .unwrap_or_else(|| panic!("{test}: no crypto/tls.(*Conn).Read"));
    // Entry probes go on the stack check's JBE, which the kernel emulates.
    assert!(
        bin.entry_point(&read).unwrap().at_stack_check,
        "{test}: crypto/tls.(*Conn).Read's stack check is not CMP; JBE"
    );
    assert!(
        bin.homed_args(&read, 3).unwrap().is_some(),
        "{test}: crypto/tls.(*Conn).Read's arguments are not in their spill slots"
    );
    let copy = bin
        .memmove_call(&read)
        .unwrap()
        .unwrap_or_else(|| panic!("{test}: crypto/tls.(*Conn).Read has not one memmove call"));
    let listing = support::go_objdump(&toolchain, &twin, r"^crypto/tls\.\(\*Conn\)\.Read$");
    let address = format!("{:#x}", read.entry + copy);
    let line = listing
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(address.as_str()))
        .unwrap_or_else(|| panic!("{test}: {address} not in\n{listing}"));
    assert!(
        line.starts_with("  reader.go:") && line.contains("CALL runtime.memmove(SB)"),
        "{test}: the memmove call of Read is not bytes.Reader's copy: {line}"
    );

    // Build info, as `go version -m` prints it.
    let info = bin.build_info();
    assert_eq!(info.go_version, toolchain.version, "{test}");
    assert_eq!(info.path, "podtrace.test/gobinfixture", "{test}");
    assert_eq!(info.main.path, "podtrace.test/gobinfixture", "{test}");
    let cgo = variant.is_cgo();
    assert_eq!(
        info.setting("CGO_ENABLED"),
        Some(if cgo { "1" } else { "0" }),
        "{test}"
    );
    assert_eq!(
        info.to_string(),
        support::go_version_m(&toolchain, &path),
        "{test}"
    );
    println!(
        "{test}: {functions} functions, {rets} RETs, text start {:?}",
        bin.text_start_source()
    );
}

macro_rules! against_symtab {
    ($($test:ident: $minor:literal $variant:ident;)*) => {$(
        #[test]
        fn $test() {
            check_against_symtab($minor, Variant::$variant, stringify!($test));
        }
    )*};
}

against_symtab! {
    plain_go121_matches_symtab: 21 Plain;
    stripped_go121_matches_symtab: 21 Stripped;
    pie_go121_matches_symtab: 21 Pie;
    stripped_pie_go121_matches_symtab: 21 PieStripped;
    cgo_go121_matches_symtab: 21 Cgo;
    stripped_cgo_go121_matches_symtab: 21 CgoStripped;
    stripped_cgo_pie_go121_matches_symtab: 21 CgoPieStripped;
    plain_go122_matches_symtab: 22 Plain;
    stripped_go122_matches_symtab: 22 Stripped;
    stripped_pie_go122_matches_symtab: 22 PieStripped;
    stripped_cgo_go122_matches_symtab: 22 CgoStripped;
    plain_go123_matches_symtab: 23 Plain;
    stripped_go123_matches_symtab: 23 Stripped;
    pie_go123_matches_symtab: 23 Pie;
    stripped_pie_go123_matches_symtab: 23 PieStripped;
    cgo_go123_matches_symtab: 23 Cgo;
    stripped_cgo_go123_matches_symtab: 23 CgoStripped;
    plain_go124_matches_symtab: 24 Plain;
    stripped_go124_matches_symtab: 24 Stripped;
    stripped_pie_go124_matches_symtab: 24 PieStripped;
    stripped_cgo_go124_matches_symtab: 24 CgoStripped;
    plain_go125_matches_symtab: 25 Plain;
    stripped_go125_matches_symtab: 25 Stripped;
    pie_go125_matches_symtab: 25 Pie;
    stripped_pie_go125_matches_symtab: 25 PieStripped;
    cgo_go125_matches_symtab: 25 Cgo;
    stripped_cgo_go125_matches_symtab: 25 CgoStripped;
    stripped_cgo_pie_go125_matches_symtab: 25 CgoPieStripped;
    plain_go126_matches_symtab: 26 Plain;
    stripped_go126_matches_symtab: 26 Stripped;
    pie_go126_matches_symtab: 26 Pie;
    stripped_pie_go126_matches_symtab: 26 PieStripped;
    cgo_go126_matches_symtab: 26 Cgo;
    stripped_cgo_go126_matches_symtab: 26 CgoStripped;
    stripped_cgo_pie_go126_matches_symtab: 26 CgoPieStripped;
    plain_go127_matches_symtab: 27 Plain;
    stripped_go127_matches_symtab: 27 Stripped;
    pie_go127_matches_symtab: 27 Pie;
    stripped_pie_go127_matches_symtab: 27 PieStripped;
    cgo_go127_matches_symtab: 27 Cgo;
    stripped_cgo_go127_matches_symtab: 27 CgoStripped;
    stripped_cgo_pie_go127_matches_symtab: 27 CgoPieStripped;
}

/// The raw pcHeader.textStart word (offset 24) of a binary's `.gopclntab`.
fn pcheader_text_start(path: &Path) -> u64 {
    use object::{Object as _, ObjectSection as _};
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let data = file.section_by_name(".gopclntab").unwrap().data().unwrap();
    u64::from_le_bytes(data[24..32].try_into().unwrap())
}

/// Go 1.26 stopped storing textStart: the stripped build must find it from the
/// moduledata in its data segment, the unstripped one via runtime.firstmoduledata,
/// and both must agree with the `runtime.text` symbol.
fn check_text_start_zero(minor: u32, test: &str) {
    let Some(toolchain) = support::toolchain(minor, test) else {
        return;
    };
    for (variant, source) in [
        (Variant::Plain, TextStartSource::FirstModuledataSymbol),
        (Variant::Stripped, TextStartSource::ModuledataScan),
        (Variant::PieStripped, TextStartSource::ModuledataScan),
        (Variant::CgoStripped, TextStartSource::ModuledataScan),
        (Variant::CgoPieStripped, TextStartSource::ModuledataScan),
    ] {
        let path = support::build(&toolchain, variant);
        assert_eq!(
            pcheader_text_start(&path),
            0,
            "{test} {variant}: pcHeader.textStart is set"
        );
        let bin = GoBinary::open(&path).unwrap();
        assert_eq!(bin.text_start_source(), source, "{test} {variant}");
        let twin = support::build(&toolchain, variant.unstripped_twin());
        assert_eq!(
            Some(bin.text_start()),
            support::symbol_address(&twin, "runtime.text"),
            "{test} {variant}"
        );
    }
}

#[test]
fn textstart_zero_in_go126() {
    check_text_start_zero(26, "textstart_zero_in_go126");
}

#[test]
fn textstart_zero_in_go127() {
    check_text_start_zero(27, "textstart_zero_in_go127");
}

/// Before 1.26 the pcHeader has it; in a CGo build it is past the start of .text.
#[test]
fn textstart_from_pcheader_in_go125_cgo_is_not_text_section() {
    let test = "textstart_from_pcheader_in_go125_cgo_is_not_text_section";
    let Some(toolchain) = support::toolchain(25, test) else {
        return;
    };
    let path = support::build(&toolchain, Variant::CgoStripped);
    let bin = GoBinary::open(&path).unwrap();
    assert_eq!(bin.text_start_source(), TextStartSource::PcHeader);
    assert_eq!(bin.text_start(), pcheader_text_start(&path));
    let bytes = std::fs::read(&path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    use object::{Object as _, ObjectSection as _};
    let text = file.section_by_name(".text").unwrap().address();
    assert!(
        bin.text_start() > text,
        "C code precedes Go text in a CGo link"
    );
}

/// Section headers removed (e_shoff, e_shnum, e_shstrndx zeroed): pclntab and
/// build info are found by their magic, moduledata by scanning the data segment.
#[test]
fn stripped_go126_without_section_headers_found_by_magic() {
    let test = "stripped_go126_without_section_headers_found_by_magic";
    let Some(toolchain) = support::toolchain(26, test) else {
        return;
    };
    let path = support::build(&toolchain, Variant::PieStripped);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0x28..0x30].fill(0); // e_shoff
    bytes[0x3c..0x40].fill(0); // e_shnum, e_shstrndx
    let headerless = GoBinary::parse(bytes).unwrap();
    let original = GoBinary::open(&path).unwrap();
    assert_eq!(headerless.text_start(), original.text_start());
    assert_eq!(headerless.build_info(), original.build_info());
    let a: Vec<_> = headerless.functions().map(Result::unwrap).collect();
    let b: Vec<_> = original.functions().map(Result::unwrap).collect();
    assert_eq!(a, b);
}

/// ABI0/ABIInternal pairs share one pclntab name; `NAME.abi0` finds the ABI0 one,
/// as `.symtab` names it.
#[test]
fn abi0_twin_resolves_like_symtab_in_stripped_go126() {
    let test = "abi0_twin_resolves_like_symtab_in_stripped_go126";
    let Some(toolchain) = support::toolchain(26, test) else {
        return;
    };
    let bin = GoBinary::open(support::build(&toolchain, Variant::Stripped)).unwrap();
    let symtab = support::symtab(&support::build(&toolchain, Variant::Plain));
    let pairs: Vec<&String> = symtab
        .by_name
        .keys()
        .filter(|n| n.ends_with(".abi0"))
        .collect();
    let mut both = 0;
    for abi0 in pairs {
        let internal = abi0.trim_end_matches(".abi0");
        if let Some(&addr) = symtab.by_name.get(internal) {
            assert_eq!(
                bin.function(internal).unwrap().map(|f| f.entry),
                Some(addr),
                "{internal}"
            );
            assert_eq!(
                bin.function(abi0).unwrap().map(|f| f.entry),
                symtab.by_name.get(abi0.as_str()).copied()
            );
            both += 1;
        }
    }
    assert!(both >= 10, "only {both} ABI pairs");
}

/// The committed table is what the generator makes from today's toolchains,
/// and every fixture's build info selects its row.
#[test]
fn struct_offsets_table_matches_dwarf_of_fixtures() {
    let toolchains = support::toolchains();
    if toolchains.is_empty() {
        support::skip(
            "struct_offsets_table_matches_dwarf_of_fixtures",
            "no Go toolchain",
        );
        return;
    }
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gen-offsets"));
    for toolchain in toolchains {
        let plain = support::build(toolchain, Variant::Plain);
        let bin = GoBinary::open(&plain).unwrap();
        tracer_gobin::StructOffsets::for_binary(bin.build_info()).unwrap();
        cmd.arg("--binary").arg(plain);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/offsets_table.rs"))
            .unwrap();
    let committed_releases = tracer_gobin::StructOffsets::known_releases().count();
    if toolchains.len() == committed_releases {
        assert_eq!(
            generated, committed,
            "src/offsets_table.rs is stale: run `cargo xtask offsets`"
        );
    } else {
        println!(
            "struct_offsets_table_matches_dwarf_of_fixtures: {} toolchains for {committed_releases} table rows; comparing rows only",
            toolchains.len()
        );
        let body = |text: &str| {
            text.split("TableEntry {")
                .skip(1)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        for row in body(&generated) {
            assert!(
                committed.contains(row.trim_end_matches("];\n")),
                "stale row: {row}"
            );
        }
    }
}
