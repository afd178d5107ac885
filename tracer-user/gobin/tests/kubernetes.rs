//! Kubernetes version and Kubernetes struct offsets.
//!
//! - The stand-in component `testdata/kubeversion` (module
//!   `k8s.io/component-base`, version set with `-ldflags -X`), built with the
//!   Go toolchains found, unstripped and `-s -w`, with `Get` reading the
//!   variable directly and (`-tags dynamic`) through an `atomic.Value` its
//!   `init` fills, as Kubernetes 1.28+ does.
//! - Real Kubernetes binaries, when `PODTRACE_K8S_BIN` names a directory of
//!   unstripped ones (`kube-apiserver`, `kube-scheduler`, `kubelet`,
//!   `kubectl`, whichever are there) and `PODTRACE_K8S_BIN_STRIPPED` (default:
//!   the sibling `<PODTRACE_K8S_BIN>-stripped`) one of `-s -w` builds. The
//!   expected version is `PODTRACE_K8S_VERSION` (default `v1.28.4`). That
//!   test is `#[ignore]`d with the reason (the harness prints it);
//!   `cargo xtask test` includes it when `PODTRACE_K8S_BIN` is set.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};

use tracer_gobin::{
    GoBinError, GoBinary, KubeOffsetsMode, KubeOffsetsSource, KubeVersion, StructOffsets,
    fixture::{self, Variant},
    known_kube_releases, kube_args, kube_offsets, kube_offsets_for,
};

const FIXTURE_VERSION: &str = "v1.31.7-fixture+podtrace";
const FIXTURE_PARSED: KubeVersion = KubeVersion {
    major: 1,
    minor: 31,
    patch: 7,
};

/// Builds the stand-in component with `toolchain` as `variant` with `tags`.
fn build_kube_fixture(toolchain: &fixture::GoToolchain, variant: Variant, tags: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let label = if tags.is_empty() { "static" } else { tags };
    let out_dir = tmp
        .join("gobin-kubeversion")
        .join(&toolchain.version)
        .join(label);
    std::fs::create_dir_all(&out_dir).unwrap();
    fixture::build_source_with(
        toolchain,
        variant,
        &fixture::kube_version_source(),
        &out_dir,
        &tmp.join("gobin-gocache"),
        &fixture::kube_version_ldflags(FIXTURE_VERSION),
        tags,
    )
    .unwrap()
}

/// The oldest and the newest toolchain found (the fixture needs modules: Go ≥ 1.19).
fn fixture_toolchains(test: &str) -> Vec<fixture::GoToolchain> {
    let all = support::toolchains();
    let mut chosen: Vec<_> = all.first().into_iter().chain(all.last()).cloned().collect();
    chosen.dedup();
    if chosen.is_empty() {
        support::skip(
            test,
            "no Go toolchain under .tools/go/*/go or PODTRACE_GO_ROOTS (run `cargo xtask setup`)",
        );
    }
    chosen
}

#[test]
fn fixture_version_from_symtab_and_from_code() {
    let test = "fixture_version_from_symtab_and_from_code";
    for toolchain in fixture_toolchains(test) {
        for tags in ["", "dynamic"] {
            for variant in [Variant::Plain, Variant::Stripped] {
                let path = build_kube_fixture(&toolchain, variant, tags);
                let bin = GoBinary::open(&path).unwrap();
                assert_eq!(bin.has_symtab(), !variant.is_stripped());
                let what = format!("{} {variant} tags={tags:?}", toolchain.version);
                assert_eq!(
                    bin.kubernetes_version().unwrap(),
                    Some(FIXTURE_PARSED),
                    "{what}"
                );
                println!("{what}: {FIXTURE_PARSED}");
            }
        }
    }
}

#[test]
fn go_programs_that_are_not_kubernetes_give_none() {
    let test = "go_programs_that_are_not_kubernetes_give_none";
    let Some(toolchain) = support::toolchains().last().cloned() else {
        support::skip(test, "no Go toolchain (run `cargo xtask setup`)");
        return;
    };
    for variant in [Variant::Plain, Variant::Stripped] {
        let bin = GoBinary::open(support::build(&toolchain, variant)).unwrap();
        assert_eq!(bin.kubernetes_version().unwrap(), None, "{variant}");
    }
}

#[test]
fn kube_version_display_and_offsets_lookup() {
    assert_eq!(FIXTURE_PARSED.to_string(), "v1.31.7");
    let v1_28 = KubeVersion {
        major: 1,
        minor: 28,
        patch: 9,
    };
    let offsets = kube_offsets(v1_28).unwrap();
    assert_eq!(offsets.authn_response_user % 8, 0);
    // A release the table will not have: the error names it and lists the rows.
    let outside = KubeVersion {
        major: 1,
        minor: 99,
        patch: 7,
    };
    match kube_offsets(outside) {
        Err(e @ GoBinError::UnknownKubeVersion { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("v1.99.7") && message.contains("1.28 (from v1.28.4"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The generator's register words on functions whose parameters moved, sit
/// behind stack-only and float arguments, or were renamed: placed where the
/// Go ABI puts them, or refused with the reason. Oldest and newest toolchain.
#[test]
fn argument_words_follow_the_go_abi_and_refuse_renamed_parameters() {
    let test = "argument_words_follow_the_go_abi_and_refuse_renamed_parameters";
    for toolchain in fixture_toolchains(test) {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let out_dir = tmp.join("gobin-kubesignatures").join(&toolchain.version);
        std::fs::create_dir_all(&out_dir).unwrap();
        let binary = fixture::build_source(
            &toolchain,
            Variant::Plain,
            &fixture::kube_signatures_source(),
            &out_dir,
            &tmp.join("gobin-gocache"),
        )
        .unwrap();
        let found: std::collections::HashMap<&str, Result<u64, String>> =
            kube_args::arg_words_of(&binary, kube_args::ARG_WORDS)
                .unwrap()
                .into_iter()
                .map(|(word, found)| (word.name, found))
                .collect();
        let go = &toolchain.version;
        // A string inserted before pod: word 4 in the real one, 6 here.
        assert_eq!(found["sync_pod_pod"], Ok(6), "{go}");
        // An array of two (stack) and a float (float register) before pods.
        assert_eq!(found["pod_additions_pods"], Ok(1), "{go}");
        // After the receiver, a context and a pointer, an interface (2 words).
        assert_eq!(found["scheduling_cycle_pod_info"], Ok(6), "{go}");
        // A float field before the host's string in the first result.
        assert_eq!(found["scheduling_cycle_host"], Ok(0), "{go}");
        // Renamed p: refused, with the name it looked for.
        let renamed = found["volume_wait_pod"].as_ref().unwrap_err();
        assert!(renamed.contains("no parameter pod"), "{go}: {renamed}");
        // Not in this binary at all.
        let absent = found["bind_pod"].as_ref().unwrap_err();
        assert!(absent.contains("not in DWARF"), "{go}: {absent}");

        // From the binary alone (its ArgInfo and morestack stubs), as the
        // agent reads a release the table lacks: the same word, stripped
        // of DWARF or not; a function without a stack check (a leaf) has
        // no stub to tell its integer registers from float ones: refused.
        let bin = GoBinary::open(&binary).unwrap();
        let from_binary = |name: &str| {
            let word = kube_args::ARG_WORDS
                .iter()
                .find(|word| word.name == name)
                .unwrap();
            let function = bin.function(word.function).unwrap().unwrap();
            bin.arg_locations(&function)
                .map_err(|error| error.to_string())
                .and_then(|locations| locations.word(word.at))
        };
        assert_eq!(from_binary("scheduling_cycle_pod_info"), Ok(6), "{go}");
        let leaf = from_binary("pod_additions_pods").unwrap_err();
        assert!(leaf.contains("no morestack stub"), "{go}: {leaf}");
    }
}

/// `(unstripped dir, stripped dir, expected version)`, or `None` after printing why not.
fn real_binaries(test: &str) -> Option<(PathBuf, Option<PathBuf>, KubeVersion)> {
    let Some(dir) = std::env::var_os("PODTRACE_K8S_BIN").map(PathBuf::from) else {
        println!(
            "SKIP {test}: PODTRACE_K8S_BIN is not set (a directory of unstripped Kubernetes binaries, e.g. /var/tmp/k8s-bin)"
        );
        return None;
    };
    let stripped = std::env::var_os("PODTRACE_K8S_BIN_STRIPPED")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let mut sibling = dir.clone().into_os_string();
            sibling.push("-stripped");
            PathBuf::from(sibling)
        });
    let stripped = stripped.is_dir().then_some(stripped);
    let expected = std::env::var("PODTRACE_K8S_VERSION").unwrap_or_else(|_| "v1.28.4".into());
    let expected = KubeVersion::parse(&expected)
        .unwrap_or_else(|| panic!("PODTRACE_K8S_VERSION={expected:?} is not vMAJOR.MINOR.PATCH"));
    Some((dir, stripped, expected))
}

#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn real_kubernetes_binaries_report_their_version() {
    let test = "real_kubernetes_binaries_report_their_version";
    let Some((dir, stripped, expected)) = real_binaries(test) else {
        return;
    };
    let mut checked = 0;
    for name in ["kube-apiserver", "kube-scheduler", "kubelet", "kubectl"] {
        let path = dir.join(name);
        if !path.exists() {
            println!("{test}: no {}", path.display());
            continue;
        }
        let bin = GoBinary::open(&path).unwrap();
        assert!(bin.has_symtab(), "{} is stripped", path.display());
        assert_eq!(
            bin.kubernetes_version().unwrap(),
            Some(expected),
            "{}",
            path.display()
        );
        // Its Go release is in the Go table, with parentGoid from 1.21 on.
        let go = StructOffsets::for_binary(bin.build_info()).unwrap();
        println!(
            "{}: {expected}, {}, parentGoid at {:?}",
            path.display(),
            bin.build_info().go_version,
            go.runtime_g_parent_goid
        );
        checked += 1;
    }
    assert!(checked > 0, "no Kubernetes binary in {}", dir.display());
    match stripped {
        Some(stripped) => {
            let path = stripped.join("kube-apiserver");
            let bin = GoBinary::open(&path).unwrap();
            assert!(!bin.has_symtab(), "{} has a symbol table", path.display());
            assert_eq!(
                bin.kubernetes_version().unwrap(),
                Some(expected),
                "{}",
                path.display()
            );
            println!("{} (stripped): {expected}", path.display());
        }
        None => println!(
            "SKIP {test} (stripped part): neither PODTRACE_K8S_BIN_STRIPPED nor {}-stripped is a directory",
            dir.display()
        ),
    }
    // The Kubernetes table has the row for this minor release.
    let offsets = kube_offsets(expected).unwrap();
    println!("{expected}: {offsets:?}");
}

#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn the_kube_table_row_is_what_the_binaries_dwarf_says() {
    let test = "the_kube_table_row_is_what_the_binaries_dwarf_says";
    let Some((dir, _, expected)) = real_binaries(test) else {
        return;
    };
    let out = std::env::temp_dir().join(format!("podtrace-{test}-{}.rs", std::process::id()));
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gen-offsets"));
    for name in ["kube-apiserver", "kube-scheduler", "kubelet"] {
        command.arg("--kube").arg(dir.join(name));
    }
    let status = command.arg("--out").arg(&out).status().unwrap();
    assert!(
        status.success(),
        "gen-offsets --kube {}: {status}",
        dir.display()
    );
    let generated = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    // The committed table holds this release's row as generated now: struct
    // offsets and every probed parameter's register word.
    let committed = include_str!("../src/kube_offsets_table.rs");
    // The row alone: the last one of a file is followed by the array's end,
    // which the committed table has after its own last row only.
    const ROW_END: &str = "\n    },\n";
    let row = generated
        .split("    KubeTableEntry {")
        .find(|row| row.contains(&format!("kubernetes: \"{expected}\"")))
        .and_then(|row| row.find(ROW_END).map(|end| &row[..end + ROW_END.len()]))
        .unwrap_or_else(|| panic!("no {expected} row in:\n{generated}"));
    assert!(
        committed.contains(row),
        "the committed row for {expected} differs from its binaries' DWARF; \
         run cargo xtask offsets --kube with every release's directory:\n{row}"
    );
}

#[test]
#[ignore = "needs PODTRACE_K8S_BIN, a directory of Kubernetes binaries (none ship with podtrace); cargo xtask test runs it when set"]
fn offsets_derived_from_the_real_binaries_type_descriptors_are_the_table_row() {
    let test = "offsets_derived_from_the_real_binaries_type_descriptors_are_the_table_row";
    let Some((dir, stripped, expected)) = real_binaries(test) else {
        return;
    };
    let table = kube_offsets(expected).unwrap();
    let pod = ["pod_name", "pod_namespace", "pod_uid"];
    let components = [
        (
            dir.join("kube-apiserver"),
            &["authn_response_user", "user_info_name"][..],
        ),
        (
            dir.join("kube-scheduler"),
            &["queued_pod_info_pod_info", "pod_info_pod"][..],
        ),
        (dir.join("kubelet"), &[][..]),
    ];
    let stripped = stripped.map(|dir| (dir.join("kube-apiserver"), components[0].1));
    if stripped.is_none() {
        println!(
            "SKIP {test} (stripped part): no stripped kube-apiserver beside {}",
            dir.display()
        );
    }
    for (path, own) in components.into_iter().chain(stripped) {
        let bin = GoBinary::open(&path).unwrap();
        let derived = kube_offsets_for(&bin, expected, KubeOffsetsMode::Derived).unwrap();
        assert_eq!(
            derived.source,
            KubeOffsetsSource::Derived {
                words_from: table_release(expected)
            }
        );
        assert_eq!(derived.offsets.args, table.args, "{}", path.display());
        // Every parameter word of a function the binary has came from its
        // own ArgInfo (equal to the row generated from DWARF, above).
        for word in kube_args::ARG_WORDS {
            let present = bin.function(word.function).unwrap().is_some();
            let (_, source) = derived
                .words
                .iter()
                .find(|(name, _)| *name == word.name)
                .unwrap();
            if present && !word.at.is_empty() {
                assert_eq!(
                    *source,
                    tracer_gobin::WordSource::Binary,
                    "{} {}",
                    path.display(),
                    word.name
                );
            } else {
                assert_ne!(*source, tracer_gobin::WordSource::Binary, "{}", word.name);
            }
        }
        for field in tracer_gobin::KUBE_FIELDS {
            let absent = derived.absent.iter().find(|(name, _)| *name == field.name);
            if pod.contains(&field.name) || own.contains(&field.name) {
                assert!(absent.is_none(), "{}: {absent:?}", path.display());
            }
            if absent.is_none() {
                assert_eq!(
                    derived.offsets.field(field.name),
                    table.field(field.name),
                    "{} {}",
                    path.display(),
                    field.name
                );
            }
        }
        println!(
            "{}: derived {:?}, absent {:?}",
            path.display(),
            derived.offsets,
            derived.absent
        );
    }
}

/// The version the table's row for `version`'s minor release came from.
fn table_release(version: KubeVersion) -> &'static str {
    known_kube_releases()
        .find(|(major, minor, _)| (*major, *minor) == (version.major, version.minor))
        .map(|(_, _, release)| release)
        .unwrap()
}

#[test]
fn real_non_kubernetes_go_binaries_give_none() {
    // Debian's Go programs (present where `cargo xtask setup` ran).
    let mut checked = 0;
    for path in ["/usr/bin/containerd", "/usr/bin/etcd", "/usr/bin/runc"] {
        let Ok(bin) = GoBinary::open(path) else {
            continue;
        };
        assert_eq!(bin.kubernetes_version().unwrap(), None, "{path}");
        checked += 1;
    }
    if checked == 0 {
        println!("SKIP real_non_kubernetes_go_binaries_give_none: no Debian Go binary found");
    }
}

/// File offset of the virtual address `addr`, from the section holding it.
fn file_offset_of(bytes: &[u8], addr: u64) -> usize {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(bytes).unwrap();
    let section = file
        .sections()
        .find(|s| s.address() <= addr && addr < s.address() + s.size())
        .unwrap();
    (section.file_range().unwrap().0 + (addr - section.address())) as usize
}

#[test]
fn corrupt_version_string_headers_are_errors_not_panics() {
    let test = "corrupt_version_string_headers_are_errors_not_panics";
    let Some(toolchain) = fixture_toolchains(test).pop() else {
        return;
    };
    let path = build_kube_fixture(&toolchain, Variant::Plain, "");
    let original = std::fs::read(&path).unwrap();
    let addr = support::symbol_address(&path, "k8s.io/component-base/version.gitVersion").unwrap();
    let at = file_offset_of(&original, addr);
    // Length 2^48 (implausible), then a pointer to an unmapped address.
    for (offset, value) in [(8, 1u64 << 48), (0, 0x10)] {
        let mut bytes = original.clone();
        bytes[at + offset..at + offset + 8].copy_from_slice(&value.to_le_bytes());
        let result = GoBinary::parse(bytes).unwrap().kubernetes_version();
        assert!(
            matches!(result, Err(GoBinError::KubeVersionNotFound { .. })),
            "word {offset} = {value:#x}: {result:?}"
        );
    }
    // A version that is not one.
    let mut bytes = original.clone();
    let text = std::fs::read(&path).unwrap();
    let needle = FIXTURE_VERSION.as_bytes();
    let pos = text
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[pos] = b'x';
    let result = GoBinary::parse(bytes).unwrap().kubernetes_version();
    assert!(
        matches!(result, Err(GoBinError::KubeVersionNotFound { ref reason }) if reason.contains("x1.31.7")),
        "{result:?}"
    );
}

#[test]
fn random_corruption_of_version_code_and_data_never_panics() {
    let test = "random_corruption_of_version_code_and_data_never_panics";
    let Some(toolchain) = fixture_toolchains(test).pop() else {
        return;
    };
    for variant in [Variant::Plain, Variant::Stripped] {
        let path = build_kube_fixture(&toolchain, variant, "dynamic");
        let original = std::fs::read(&path).unwrap();
        let bin = GoBinary::parse(original.clone()).unwrap();
        let mut targets: Vec<(usize, usize)> = [
            "k8s.io/component-base/version.Get",
            "k8s.io/component-base/version.init.0",
        ]
        .iter()
        .map(|name| {
            let f = bin.function(name).unwrap().unwrap();
            (f.file_offset as usize, (f.end - f.entry) as usize)
        })
        .collect();
        if let Some(addr) =
            support::symbol_address(&path, "k8s.io/component-base/version.gitVersion")
        {
            targets.push((file_offset_of(&original, addr), 16));
        }
        let mut seed = 0x6b75_6265u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            seed >> 33
        };
        let (mut found, mut errors) = (0, 0);
        for _ in 0..300 {
            let mut bytes = original.clone();
            for _ in 0..1 + next() % 6 {
                let (start, len) = targets[next() as usize % targets.len()];
                bytes[start + next() as usize % len] = next() as u8;
            }
            match GoBinary::parse(bytes).unwrap().kubernetes_version() {
                Ok(_) => found += 1,
                Err(e) => {
                    errors += 1;
                    let _ = e.to_string();
                }
            }
        }
        println!("{variant}: {found} read a version, {errors} errors");
    }
}
