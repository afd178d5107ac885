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

use std::{collections::BTreeMap, collections::HashMap, path::PathBuf};

use anyhow::{Context as _, bail};
use tracer_gobin::{GoBinary, GoRelease, KubeVersion, fixture, kube_args};

/// One generated field: its name in the Rust struct and the chain of
/// (struct, member) whose offsets add up to it.
struct Field {
    name: &'static str,
    chain: &'static [(&'static str, &'static str)],
    /// The first Go release that has the field (`None`: every release in the
    /// table). Rows of older releases get `None` (absent); newer rows must
    /// find it in DWARF. A field with a `since` is an `Option<u64>` in Rust.
    since: Option<(u32, u32)>,
}

const fn field(name: &'static str, chain: &'static [(&'static str, &'static str)]) -> Field {
    Field {
        name,
        chain,
        since: None,
    }
}

/// Each field of `StructOffsets`. Adding a field to `StructOffsets` means
/// adding a row here; the generated table then fails to compile until it is
/// regenerated.
const FIELDS: &[Field] = &[
    field("tls_conn_conn", &[("crypto/tls.Conn", "conn")]),
    field("tls_conn_vers", &[("crypto/tls.Conn", "vers")]),
    field("tls_conn_in", &[("crypto/tls.Conn", "in")]),
    field("tls_conn_out", &[("crypto/tls.Conn", "out")]),
    field(
        "tls_conn_cipher_suite",
        &[("crypto/tls.Conn", "cipherSuite")],
    ),
    field(
        "tls_conn_in_seq",
        &[("crypto/tls.Conn", "in"), ("crypto/tls.halfConn", "seq")],
    ),
    field(
        "tls_conn_in_secret",
        &[
            ("crypto/tls.Conn", "in"),
            ("crypto/tls.halfConn", "trafficSecret"),
        ],
    ),
    field(
        "tls_conn_out_seq",
        &[("crypto/tls.Conn", "out"), ("crypto/tls.halfConn", "seq")],
    ),
    field(
        "tls_conn_out_secret",
        &[
            ("crypto/tls.Conn", "out"),
            ("crypto/tls.halfConn", "trafficSecret"),
        ],
    ),
    field(
        "tls_conn_input_s",
        &[("crypto/tls.Conn", "input"), ("bytes.Reader", "s")],
    ),
    field(
        "tls_conn_input_i",
        &[("crypto/tls.Conn", "input"), ("bytes.Reader", "i")],
    ),
    field(
        "tls_conn_raw_input_buf",
        &[("crypto/tls.Conn", "rawInput"), ("bytes.Buffer", "buf")],
    ),
    field(
        "tls_conn_raw_input_off",
        &[("crypto/tls.Conn", "rawInput"), ("bytes.Buffer", "off")],
    ),
    field(
        "tcp_conn_fd",
        &[("net.TCPConn", "conn"), ("net.conn", "fd")],
    ),
    field(
        "net_fd_sysfd",
        &[("net.netFD", "pfd"), ("internal/poll.FD", "Sysfd")],
    ),
    field("runtime_g_goid", &[("runtime.g", "goid")]),
    Field {
        name: "runtime_g_parent_goid",
        chain: &[("runtime.g", "parentGoid")],
        since: Some((1, 21)),
    },
    field(
        "hpack_header_field_name",
        &[("vendor/golang.org/x/net/http2/hpack.HeaderField", "Name")],
    ),
    field(
        "hpack_header_field_value",
        &[("vendor/golang.org/x/net/http2/hpack.HeaderField", "Value")],
    ),
    field("http_request_url", &[("net/http.Request", "URL")]),
    field(
        "http_request_remote_addr",
        &[("net/http.Request", "RemoteAddr")],
    ),
    field("url_path", &[("net/url.URL", "Path")]),
];

/// Each field of `KubeStructOffsets` (`--kube` mode), from the DWARF of
/// unstripped Kubernetes binaries; a field may come from any of them. The
/// chains are the library's (`tracer_gobin::KUBE_FIELDS`), which also
/// derives them from type descriptors.
static KUBE_FIELDS: std::sync::LazyLock<Vec<Field>> = std::sync::LazyLock::new(|| {
    tracer_gobin::KUBE_FIELDS
        .iter()
        .map(|kube| field(kube.name, kube.chain))
        .collect()
});

/// A table row: the toolchain's version and each field's offset (`None`:
/// absent in that release).
type Row = (String, Vec<(&'static Field, Option<u64>)>);

#[derive(Debug, Default)]
struct Args {
    out: Option<PathBuf>,
    gos: Vec<PathBuf>,
    binaries: Vec<PathBuf>,
    kube: Vec<PathBuf>,
}

const USAGE: &str = "usage: gen-offsets [--out FILE] [--go PATH/TO/go]... [--binary UNSTRIPPED_GO_BINARY]...\n       gen-offsets --kube UNSTRIPPED_K8S_BINARY... [--out FILE]   (Kubernetes struct offsets)";

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
            Some("--kube") => args.kube.push(value()?),
            Some("-h" | "--help") => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {arg:?} (see --help)"),
        }
    }
    let go_mode = !args.gos.is_empty() || !args.binaries.is_empty();
    if !args.kube.is_empty() && go_mode {
        bail!("--kube cannot be combined with --go or --binary\n{USAGE}");
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let table = if args.kube.is_empty() {
        go_table(&args)?
    } else {
        kube_table(&args.kube)?
    };
    match args.out {
        Some(path) => {
            std::fs::write(&path, table).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{table}"),
    }
    Ok(())
}

/// The Go struct offsets table (`src/offsets_table.rs`).
fn go_table(args: &Args) -> anyhow::Result<String> {
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
        let found = field_offsets(binary, FIELDS)
            .with_context(|| format!("reading DWARF of {}", binary.display()))?;
        let mut offsets = Vec::new();
        for (field, offset) in found {
            let exists = field
                .since
                .is_none_or(|(major, minor)| (release.major, release.minor) >= (major, minor));
            match (exists, offset) {
                (true, Ok(offset)) => offsets.push((field, Some(offset))),
                (true, Err(missing)) => {
                    bail!("{}: {}: {missing}", binary.display(), field.name)
                }
                (false, Ok(offset)) => bail!(
                    "{}: {} found at {offset} in Go {release}, before the release FIELDS says added it",
                    binary.display(),
                    field.name
                ),
                (false, Err(_)) => offsets.push((field, None)),
            }
        }
        eprintln!(
            "gen-offsets: {} ({go_version}): {:?}",
            binary.display(),
            offsets
                .iter()
                .map(|(f, o)| (f.name, *o))
                .collect::<Vec<_>>()
        );
        rows.insert(release, (go_version, offsets));
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(render(&rows))
}

/// A row of the Kubernetes table: Kubernetes and Go versions, the binaries
/// it was read from, each field's offset and each argument's word.
struct KubeRow {
    kubernetes: String,
    go: String,
    sources: Vec<String>,
    offsets: Vec<(&'static Field, Merged)>,
    args: Vec<(&'static kube_args::ArgWord, Merged)>,
}

/// One value of a row as its release's binaries gave it, or why each binary
/// had none.
type Merged = Result<u64, Vec<String>>;

/// Merges what binary `name` of `version` found for `what` into `merged`:
/// the first binary that has the value sets it, the others must agree (a
/// type or function can be in several components).
fn merge(
    merged: &mut Merged,
    found: Result<u64, String>,
    name: &str,
    what: &str,
    version: &KubeVersion,
) -> anyhow::Result<()> {
    match (&mut *merged, found) {
        (Ok(previous), Ok(found)) if *previous != found => {
            bail!("{name}: {what} is {found}, another binary of {version} says {previous}")
        }
        (Ok(_), _) => {}
        (Err(_), Ok(found)) => *merged = Ok(found),
        (Err(reasons), Err(why)) => reasons.push(format!("{name}: {why}")),
    }
    Ok(())
}

/// The Kubernetes struct offsets table (`src/kube_offsets_table.rs`): one
/// row per Kubernetes minor version; binaries of one version are merged.
fn kube_table(binaries: &[PathBuf]) -> anyhow::Result<String> {
    let mut rows: BTreeMap<(u32, u32), KubeRow> = BTreeMap::new();
    for binary in binaries {
        let bin =
            GoBinary::open(binary).with_context(|| format!("reading {}", binary.display()))?;
        let version = bin
            .kubernetes_version()
            .with_context(|| format!("Kubernetes version of {}", binary.display()))?
            .with_context(|| format!("{} is not a Kubernetes component", binary.display()))?;
        let go = bin.build_info().go_version.clone();
        let (found, words) = kube_args::with_dwarf(binary, |dwarf| {
            Ok((
                dwarf_field_offsets(dwarf, &KUBE_FIELDS)?,
                kube_args::arg_words(dwarf, kube_args::ARG_WORDS)?,
            ))
        })
        .with_context(|| format!("reading DWARF of {}", binary.display()))?;
        let name = binary.file_name().map_or_else(
            || binary.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        eprintln!(
            "gen-offsets: {} ({version}, {go}): {:?}",
            binary.display(),
            found
                .iter()
                .map(|(f, o)| (f.name, o.as_ref().ok().copied()))
                .chain(
                    words
                        .iter()
                        .map(|(w, o)| (w.name, o.as_ref().ok().copied()))
                )
                .collect::<Vec<_>>()
        );
        let row = rows
            .entry((version.major, version.minor))
            .or_insert_with(|| KubeRow {
                kubernetes: version.to_string(),
                go: go.clone(),
                sources: Vec::new(),
                offsets: KUBE_FIELDS.iter().map(|f| (f, Err(Vec::new()))).collect(),
                args: kube_args::ARG_WORDS
                    .iter()
                    .map(|w| (w, Err(Vec::new())))
                    .collect(),
            });
        if row.kubernetes != version.to_string() || row.go != go {
            eprintln!(
                "gen-offsets: warning: {} is {version} built with {go}, the row has {} built with {}",
                binary.display(),
                row.kubernetes,
                row.go
            );
        }
        for ((field, merged), (_, offset)) in row.offsets.iter_mut().zip(found) {
            merge(merged, offset, &name, field.name, &version)?;
        }
        for ((word, merged), (_, found)) in row.args.iter_mut().zip(words) {
            merge(
                merged,
                found,
                &name,
                &format!("{} (a word)", word.name),
                &version,
            )?;
        }
        row.sources.push(name);
    }
    for ((major, minor), row) in &rows {
        let missing: Vec<&str> = row
            .offsets
            .iter()
            .filter(|(_, o)| o.is_err())
            .map(|(f, _)| f.name)
            .collect();
        let unplaced: Vec<String> = row
            .args
            .iter()
            .filter_map(|(w, word)| {
                let reasons = word.as_ref().err()?;
                Some(format!("{} ({})", w.name, reasons.join("; ")))
            })
            .collect();
        if !unplaced.is_empty() {
            bail!(
                "Kubernetes {major}.{minor}: no register word for {}: a probed function is \
                 missing from every --kube binary, or its parameter was renamed, removed or \
                 moved to the stack",
                unplaced.join(", ")
            );
        }
        if !missing.is_empty() {
            bail!(
                "Kubernetes {major}.{minor} ({}): {} not in the DWARF of any --kube binary",
                row.sources.join(", "),
                missing.join(", ")
            );
        }
    }
    Ok(render_kube(&rows))
}

/// Reads the members of the structs named in `fields` and sums each chain;
/// a chain with a struct or member missing from DWARF is an `Err` naming it.
fn field_offsets(
    binary: &std::path::Path,
    fields: &'static [Field],
) -> anyhow::Result<Vec<(&'static Field, Result<u64, String>)>> {
    kube_args::with_dwarf(binary, |dwarf| dwarf_field_offsets(dwarf, fields))
}

/// [`field_offsets`] of loaded DWARF.
fn dwarf_field_offsets(
    dwarf: &gimli::Dwarf<kube_args::Reader<'_>>,
    fields: &'static [Field],
) -> anyhow::Result<Vec<(&'static Field, Result<u64, String>)>> {
    let wanted: Vec<&str> = fields
        .iter()
        .flat_map(|f| f.chain.iter().map(|(s, _)| *s))
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

    Ok(fields
        .iter()
        .map(|field| {
            let mut total = Ok(0);
            for (strukt, member) in field.chain {
                let offset = members
                    .get(*strukt)
                    .and_then(|fields| fields.get(*member))
                    .ok_or_else(|| format!("{strukt}.{member} not in DWARF"));
                total = total.and_then(|sum| Ok(sum + offset?));
            }
            (field, total)
        })
        .collect())
}

/// `12` for a field every release has, `Some(12)` / `None` for one with a `since`.
fn render_value(field: &Field, offset: Option<u64>) -> String {
    match (field.since, offset) {
        (None, Some(offset)) => offset.to_string(),
        (Some(_), Some(offset)) => format!("Some({offset})"),
        (_, None) => "None".to_owned(),
    }
}

fn render(rows: &BTreeMap<GoRelease, Row>) -> String {
    let mut out = String::from(
        "//! Generated by `gen-offsets` (`cargo xtask offsets`) from the DWARF of\n\
         //! `testdata/fixture` built with each Go toolchain below. Do not edit.\n\
         //! `None`: the field does not exist in that Go release.\n\n\
         use crate::offsets::{GoRelease, StructOffsets, TableEntry};\n\n\
         pub(crate) const TABLE: &[TableEntry] = &[\n",
    );
    for (release, (toolchain, fields)) in rows {
        out.push_str(&format!(
            "    TableEntry {{\n        release: GoRelease {{\n            major: {},\n            minor: {},\n        }},\n        toolchain: {toolchain:?},\n        offsets: StructOffsets {{\n",
            release.major, release.minor
        ));
        for (field, offset) in fields {
            out.push_str(&format!(
                "            {}: {},\n",
                field.name,
                render_value(field, *offset)
            ));
        }
        out.push_str("        },\n    },\n");
    }
    out.push_str("];\n");
    out
}

fn render_kube(rows: &BTreeMap<(u32, u32), KubeRow>) -> String {
    let mut out = String::from(
        "//! Generated by `gen-offsets --kube` (`cargo xtask offsets --kube DIR`) from\n\
         //! the DWARF of the unstripped Kubernetes binaries named in each row. Do not edit.\n\n\
         use crate::kube::{KubeArgWords, KubeStructOffsets, KubeTableEntry};\n\n\
         // Keep the generated layout: rustfmt would fold a one-row array.\n\
         #[rustfmt::skip]\n\
         pub(crate) const KUBE_TABLE: &[KubeTableEntry] = &[\n",
    );
    for ((major, minor), row) in rows {
        out.push_str(&format!(
            "    KubeTableEntry {{\n        major: {major},\n        minor: {minor},\n        kubernetes: {:?},\n        go: {:?},\n        sources: {:?},\n        offsets: KubeStructOffsets {{\n",
            row.kubernetes,
            row.go,
            row.sources.join(", ")
        ));
        for (field, offset) in &row.offsets {
            out.push_str(&format!(
                "            {}: {},\n",
                field.name,
                render_value(field, offset.as_ref().ok().copied())
            ));
        }
        out.push_str("            args: KubeArgWords {\n");
        for (word, found) in &row.args {
            if let Ok(found) = found {
                out.push_str(&format!("                {}: {found},\n", word.name));
            }
        }
        out.push_str("            },\n        },\n    },\n");
    }
    out.push_str("];\n");
    out
}
