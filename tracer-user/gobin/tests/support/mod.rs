//! Shared by the integration tests: Go toolchains and fixture builds, cached
//! on disk under cargo's per-target temporary directory, and an independent
//! reading of `.symtab` (with the `object` crate directly, not through the
//! code under test).

// Each test file uses a different subset of these helpers; they are test
// code, where failing loudly is the point.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
    time::SystemTime,
};

use object::{Object as _, ObjectSymbol as _, SymbolKind};
use tracer_gobin::fixture::{self, GoToolchain, Variant};

/// Prints why `test` cannot run here. Under CI (`CI` set), where `cargo xtask
/// setup` installs every toolchain and Debian binary, it fails instead: a skip
/// there would hide a broken setup.
pub(crate) fn skip(test: &str, reason: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} cannot run on CI: {reason}"
    );
    println!("SKIP {test}: {reason}");
}

/// The toolchain of Go 1.`minor`, or `None` after printing why the test skips.
pub(crate) fn toolchain(minor: u32, test: &str) -> Option<GoToolchain> {
    let found = toolchains()
        .iter()
        .find(|t| {
            tracer_gobin::GoRelease::parse(&t.version)
                .is_some_and(|r| r.major == 1 && r.minor == minor)
        })
        .cloned();
    if found.is_none() {
        skip(
            test,
            &format!(
                "no Go 1.{minor} toolchain under {}/.tools/go/*/go or PODTRACE_GO_ROOTS (run `cargo xtask setup`)",
                fixture::workspace_root().display()
            ),
        );
    }
    found
}

pub(crate) fn toolchains() -> &'static [GoToolchain] {
    static FOUND: OnceLock<Vec<GoToolchain>> = OnceLock::new();
    FOUND.get_or_init(fixture::toolchains)
}

/// The fixture built by `toolchain` as `variant`. Builds are serialised (two
/// cores; the Go build is parallel itself) and reused across test runs while
/// newer than the fixture source and the toolchain.
pub(crate) fn build(toolchain: &GoToolchain, variant: Variant) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|poison| poison.into_inner());
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out_dir = tmp.join("gobin-fixtures").join(&toolchain.version);
    let out = out_dir.join(variant.to_string());
    if modified(&out) > newest_input(toolchain) {
        return out;
    }
    std::fs::create_dir_all(&out_dir).unwrap();
    fixture::build(toolchain, variant, &out_dir, &tmp.join("gobin-gocache")).unwrap()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn newest_input(toolchain: &GoToolchain) -> Option<SystemTime> {
    let sources = std::fs::read_dir(fixture::fixture_source()).unwrap();
    sources
        .filter_map(|e| modified(&e.ok()?.path()))
        .chain(modified(&toolchain.go))
        .max()
}

/// FUNC symbols of `.symtab`: name → address (names given to one address
/// only; generic instantiations can share a printed name), and address → names.
pub(crate) struct Symtab {
    pub(crate) by_name: HashMap<String, u64>,
    pub(crate) by_addr: HashMap<u64, Vec<String>>,
}

pub(crate) fn symtab(path: &Path) -> Symtab {
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let mut table = Symtab {
        by_name: HashMap::new(),
        by_addr: HashMap::new(),
    };
    let mut ambiguous = Vec::new();
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Text || sym.address() == 0 {
            continue;
        }
        let name = sym.name().unwrap().to_owned();
        if let Some(previous) = table.by_name.insert(name.clone(), sym.address()) {
            if previous != sym.address() {
                ambiguous.push(name.clone());
            }
        }
        table.by_addr.entry(sym.address()).or_default().push(name);
    }
    for name in ambiguous {
        table.by_name.remove(&name);
    }
    table
}

pub(crate) fn symbol_address(path: &Path, name: &str) -> Option<u64> {
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .map(|s| s.address())
}

/// What `go ARGS path` prints, with the toolchain used as it is.
fn go_output(toolchain: &GoToolchain, args: &[&str], path: &Path) -> String {
    let out = std::process::Command::new(&toolchain.go)
        .args(args)
        .arg(path)
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What `go version -m` prints for `path`, minus the leading `path: `.
pub(crate) fn go_version_m(toolchain: &GoToolchain, path: &Path) -> String {
    let text = go_output(toolchain, &["version", "-m"], path);
    let prefix = format!("{}: ", path.display());
    text.strip_prefix(&prefix).unwrap_or(&text).to_owned()
}

/// `go tool objdump -s REGEX path`: one line per instruction,
/// `FILE:LINE ADDRESS BYTES INSTRUCTION` (the innermost inlined line).
pub(crate) fn go_objdump(toolchain: &GoToolchain, path: &Path, regex: &str) -> String {
    go_output(toolchain, &["tool", "objdump", "-s", regex], path)
}
