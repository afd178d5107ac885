//! gen-offsets: Go toolchains (or unstripped Go binaries) in, the Rust source of
//! `src/offsets_table.rs` out — the struct field offsets podtrace's Go probes
//! read, one row per Go release, taken from DWARF.
//!
//! ```text
//! gen-offsets [--out FILE] [--go PATH/TO/go/bin/go]... [--binary UNSTRIPPED_GO_BINARY]...
//! ```
//!
//! Without `--go` or `--binary`, every toolchain `tracer_gobin::fixture::toolchains`
//! finds is used to build `testdata/fixture`. GOCACHE is taken from the
//! environment when set (a warm cache makes a run take seconds), else a
//! temporary directory. Without `--out` the table goes to stdout.

use std::{borrow::Cow, collections::BTreeMap, collections::HashMap, path::PathBuf};

use anyhow::{Context as _, bail};
use gimli::{EndianSlice, RunTimeEndian};
use object::{Object as _, ObjectSection as _};
use tracer_gobin::{GoBinary, GoRelease, fixture};

/// Each field of `StructOffsets`, and the chain of (struct, member) whose
/// offsets add up to it. Adding a field to `StructOffsets` means adding a row
/// here; the generated table then fails to compile until it is regenerated.
const FIELDS: &[(&str, &[(&str, &str)])] = &[
    ("tls_conn_conn", &[("crypto/tls.Conn", "conn")]),
    (
        "tcp_conn_fd",
        &[("net.TCPConn", "conn"), ("net.conn", "fd")],
    ),
    (
        "net_fd_sysfd",
        &[("net.netFD", "pfd"), ("internal/poll.FD", "Sysfd")],
    ),
    ("runtime_g_goid", &[("runtime.g", "goid")]),
    (
        "hpack_header_field_name",
        &[("vendor/golang.org/x/net/http2/hpack.HeaderField", "Name")],
    ),
    (
        "hpack_header_field_value",
        &[("vendor/golang.org/x/net/http2/hpack.HeaderField", "Value")],
    ),
];

/// A table row: the toolchain's version and each field's offset.
type Row = (String, Vec<(&'static str, u64)>);

#[derive(Debug, Default)]
struct Args {
    out: Option<PathBuf>,
    gos: Vec<PathBuf>,
    binaries: Vec<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args_os().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .map(PathBuf::from)
                .with_context(|| format!("{arg:?} needs a value"))
        };
        match arg.to_str() {
            Some("--out") => args.out = Some(value()?),
            Some("--go") => args.gos.push(value()?),
            Some("--binary") => args.binaries.push(value()?),
            Some("-h" | "--help") => {
                println!(
                    "usage: gen-offsets [--out FILE] [--go PATH/TO/go]... [--binary UNSTRIPPED_GO_BINARY]..."
                );
                std::process::exit(0);
            }
            _ => bail!("unknown argument {arg:?} (see --help)"),
        }
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut binaries = args.binaries.clone();
    let toolchains: Vec<fixture::GoToolchain> = if args.gos.is_empty() && args.binaries.is_empty() {
        fixture::toolchains()
    } else {
        args.gos
            .iter()
            .map(|go| fixture::GoToolchain {
                go: go.clone(),
                version: String::new(),
            })
            .collect()
    };
    let work = std::env::temp_dir().join(format!("podtrace-gen-offsets-{}", std::process::id()));
    let gocache = std::env::var_os("GOCACHE").map_or_else(|| work.join("gocache"), PathBuf::from);
    for toolchain in &toolchains {
        let out_dir = work.join(binaries.len().to_string());
        std::fs::create_dir_all(&out_dir)
            .with_context(|| format!("creating {}", out_dir.display()))?;
        eprintln!(
            "gen-offsets: building the fixture with {}",
            toolchain.go.display()
        );
        binaries.push(fixture::build(
            toolchain,
            fixture::Variant::Plain,
            &out_dir,
            &gocache,
        )?);
    }
    if binaries.is_empty() {
        bail!(
            "no Go toolchain found (PODTRACE_GO_ROOTS or <workspace>/.tools/go/*/go); run `cargo xtask setup`"
        );
    }

    // One row per release; a newer patch release replaces an older one.
    let mut rows: BTreeMap<GoRelease, Row> = BTreeMap::new();
    for binary in &binaries {
        let go_version = GoBinary::open(binary)
            .with_context(|| format!("reading build info of {}", binary.display()))?
            .build_info()
            .go_version
            .clone();
        let release =
            GoRelease::parse(&go_version).with_context(|| format!("Go version {go_version:?}"))?;
        let offsets = field_offsets(binary)
            .with_context(|| format!("reading DWARF of {}", binary.display()))?;
        eprintln!(
            "gen-offsets: {} ({go_version}): {offsets:?}",
            binary.display()
        );
        rows.insert(release, (go_version, offsets));
    }
    let table = render(&rows);
    let _ = std::fs::remove_dir_all(&work);
    match args.out {
        Some(path) => {
            std::fs::write(&path, table).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{table}"),
    }
    Ok(())
}

/// Reads the members of the structs named in [`FIELDS`] and sums each chain.
fn field_offsets(binary: &std::path::Path) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let bytes = std::fs::read(binary)?;
    let file = object::File::parse(&*bytes)?;
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> anyhow::Result<Cow<'_, [u8]>> {
        Ok(match file.section_by_name(id.name()) {
            Some(section) => section.uncompressed_data()?,
            None => Cow::Borrowed(&[]),
        })
    };
    let dwarf_sections = gimli::DwarfSections::load(load)?;
    let dwarf = dwarf_sections.borrow(|section| EndianSlice::new(section, endian));

    let wanted: Vec<&str> = FIELDS
        .iter()
        .flat_map(|(_, chain)| chain.iter().map(|(s, _)| *s))
        .collect();
    let mut members: HashMap<String, HashMap<String, u64>> = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let mut tree = unit.entries_tree(None)?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(node) = children.next()? {
            let entry = node.entry();
            if entry.tag() != gimli::DW_TAG_structure_type {
                continue;
            }
            let Some(name) = entry.attr_value(gimli::DW_AT_name)? else {
                continue;
            };
            let name = dwarf
                .attr_string(&unit, name)?
                .to_string_lossy()
                .into_owned();
            if !wanted.contains(&name.as_str()) || members.contains_key(&name) {
                continue;
            }
            let mut fields = HashMap::new();
            let mut member_nodes = node.children();
            while let Some(member) = member_nodes.next()? {
                let member = member.entry();
                if member.tag() != gimli::DW_TAG_member {
                    continue;
                }
                let (Some(field), Some(location)) = (
                    member.attr_value(gimli::DW_AT_name)?,
                    member.attr_value(gimli::DW_AT_data_member_location)?,
                ) else {
                    continue;
                };
                let field = dwarf
                    .attr_string(&unit, field)?
                    .to_string_lossy()
                    .into_owned();
                if let Some(offset) = location.udata_value() {
                    fields.insert(field, offset);
                }
            }
            members.insert(name, fields);
        }
    }

    FIELDS
        .iter()
        .map(|(field, chain)| {
            let mut total = 0;
            for (strukt, member) in chain.iter() {
                let offset = members
                    .get(*strukt)
                    .and_then(|fields| fields.get(*member))
                    .with_context(|| format!("{strukt}.{member} not in DWARF"))?;
                total += offset;
            }
            Ok((*field, total))
        })
        .collect()
}

fn render(rows: &BTreeMap<GoRelease, Row>) -> String {
    let mut out = String::from(
        "//! Generated by `gen-offsets` (`cargo xtask offsets`) from the DWARF of\n\
         //! `testdata/fixture` built with each Go toolchain below. Do not edit.\n\n\
         use crate::offsets::{GoRelease, StructOffsets, TableEntry};\n\n\
         pub(crate) const TABLE: &[TableEntry] = &[\n",
    );
    for (release, (toolchain, fields)) in rows {
        out.push_str(&format!(
            "    TableEntry {{\n        release: GoRelease {{\n            major: {},\n            minor: {},\n        }},\n        toolchain: {toolchain:?},\n        offsets: StructOffsets {{\n",
            release.major, release.minor
        ));
        for (field, offset) in fields {
            out.push_str(&format!("            {field}: {offset},\n"));
        }
        out.push_str("        },\n    },\n");
    }
    out.push_str("];\n");
    out
}
