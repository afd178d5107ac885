//! Struct field offsets read from the runtime type descriptors of the
//! fixture in `testdata/fixture`, built with every Go toolchain found
//! (1.19 … 1.27), unstripped and stripped, position-dependent and PIE: each
//! is the offset the DWARF-generated table gives that Go release.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use tracer_gobin::{GoBinError, GoBinary, StructOffsets, fixture::Variant};

type Chain = &'static [(&'static str, &'static str)];

/// Chains through standard-library types the fixture uses, with the table's
/// value for each: unexported members, a chain through a struct member, a
/// chain through an embedded one, a vendored package.
fn chains(offsets: &StructOffsets) -> Vec<(Chain, u64)> {
    vec![
        (&[("crypto/tls.Conn", "conn")], offsets.tls_conn_conn),
        (
            &[("crypto/tls.Conn", "in"), ("crypto/tls.halfConn", "seq")],
            offsets.tls_conn_in_seq,
        ),
        (
            &[("net.TCPConn", "conn"), ("net.conn", "fd")],
            offsets.tcp_conn_fd,
        ),
        (
            &[("net.netFD", "pfd"), ("internal/poll.FD", "Sysfd")],
            offsets.net_fd_sysfd,
        ),
        (&[("net/http.Request", "URL")], offsets.http_request_url),
        (&[("net/url.URL", "Path")], offsets.url_path),
        (
            &[("vendor/golang.org/x/net/http2/hpack.HeaderField", "Value")],
            offsets.hpack_header_field_value,
        ),
    ]
}

#[test]
fn field_offsets_from_type_descriptors_match_dwarf_in_every_go_release() {
    let toolchains = support::toolchains();
    if toolchains.is_empty() {
        support::skip(
            "field_offsets_from_type_descriptors_match_dwarf_in_every_go_release",
            "no Go toolchain",
        );
        return;
    }
    for toolchain in toolchains {
        for variant in [Variant::Plain, Variant::Stripped, Variant::PieStripped] {
            let path = support::build(toolchain, variant);
            let bin = GoBinary::open(&path).unwrap();
            let table = StructOffsets::for_binary(bin.build_info()).unwrap();
            let types = bin
                .type_descriptors()
                .unwrap_or_else(|e| panic!("{} {variant:?}: {e}", toolchain.version));
            for (chain, expected) in chains(&table) {
                let derived = types
                    .field_offset(chain)
                    .unwrap_or_else(|e| panic!("{} {variant:?} {chain:?}: {e}", toolchain.version));
                assert_eq!(
                    derived, expected,
                    "{} {variant:?} {chain:?}",
                    toolchain.version
                );
            }
        }
    }
}

#[test]
fn absent_structs_and_fields_and_broken_chains_are_named() {
    let Some(toolchain) = support::toolchains().last() else {
        support::skip(
            "absent_structs_and_fields_and_broken_chains_are_named",
            "no Go toolchain",
        );
        return;
    };
    let bin = GoBinary::open(support::build(toolchain, Variant::Stripped)).unwrap();
    let types = bin.type_descriptors().unwrap();
    let reason = |chain: Chain| match types.field_offset(chain) {
        Err(GoBinError::TypeDescriptors { reason }) => reason,
        other => panic!("{chain:?}: {other:?}"),
    };
    assert!(
        reason(&[("k8s.io/api/core/v1.Pod", "ObjectMeta")])
            .contains("no struct type k8s.io/api/core/v1.Pod"),
    );
    assert!(
        reason(&[("crypto/tls.Conn", "nosuchfield")])
            .contains("crypto/tls.Conn has no field nosuchfield")
    );
    // `in` is a halfConn, not a bytes.Reader.
    assert!(
        reason(&[("crypto/tls.Conn", "in"), ("bytes.Reader", "s")])
            .contains("is not a bytes.Reader")
    );
    // Same name, another package.
    assert!(reason(&[("example.com/tls.Conn", "conn")]).contains("no struct type"));
    assert!(reason(&[]).contains("empty chain"));
}
