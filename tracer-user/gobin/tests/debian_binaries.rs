//! Debian's Go binaries (etcd 3.4, containerd 1.6, runc 1.1, built with
//! go1.19.8 and stripped, CGo-linked: Go text does not start at `.text`):
//! the functions podtrace probes resolve from pclntab alone, their code looks
//! like Go code, and the build info reads as `go version -m` prints it.
//! Debian builds them in GOPATH mode, so their build info lists no modules
//! (`go version -m` shows none either); grpc is found by its functions.
//! Install with `apt-get install -y etcd-server containerd runc`; a missing
//! binary skips its test with a printed reason.

// Helpers shared by the scenario tests below fail the test loudly.
#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::path::Path;

use tracer_gobin::{FunctionSource, GoBinary, PclntabVersion, TextStartSource};

const TLS: &[&str] = &["crypto/tls.(*Conn).Write", "crypto/tls.(*Conn).Read"];
const GRPC_SERVER: &[&str] = &[
    "google.golang.org/grpc.(*Server).handleStream",
    "google.golang.org/grpc.(*Server).processUnaryRPC",
];

fn open(path: &str, test: &str) -> Option<GoBinary> {
    if !Path::new(path).exists() {
        support::skip(
            test,
            &format!("{path} is not installed (apt-get install -y etcd-server containerd runc)"),
        );
        return None;
    }
    Some(GoBinary::open(path).unwrap())
}

/// Resolves `names` and checks each like a uprobe would use it: from pclntab
/// (the binaries are stripped), starting with Go's stack-bound check against
/// the g in R14, and returning through at least one RET.
fn check_functions(bin: &GoBinary, path: &str, names: &[&str]) {
    let data = std::fs::read(path).unwrap();
    for name in names {
        let f = bin
            .function(name)
            .unwrap()
            .unwrap_or_else(|| panic!("{path}: {name} not found"));
        assert_eq!(f.source, FunctionSource::Pclntab);
        let code = &data[f.file_offset as usize..][..8];
        // cmp rsp, [r14+0x10]  |  lea r12, [rsp-N] (disp8 or disp32); cmp r12, [r14+0x10]
        assert!(
            code.starts_with(&[0x49, 0x3b, 0x66, 0x10])
                || code.starts_with(&[0x4c, 0x8d, 0x64, 0x24])
                || code.starts_with(&[0x4c, 0x8d, 0xa4, 0x24]),
            "{path}: {name} at {:#x} starts with {code:02x?}, not a Go prologue",
            f.entry
        );
        let rets = bin.ret_offsets(&f).unwrap();
        assert!(!rets.is_empty(), "{path}: {name} has no RET");
        for off in rets {
            assert_eq!(
                data[(f.file_offset + off) as usize],
                0xc3,
                "{path}: {name}+{off:#x}"
            );
        }
    }
}

fn check_build_info(bin: &GoBinary, path: &str, main_path: &str) {
    let info = bin.build_info();
    assert!(
        info.go_version.starts_with("go1.19"),
        "{path}: {}",
        info.go_version
    );
    assert_eq!(info.path, main_path);
    assert_eq!(bin.pclntab_version(), PclntabVersion::Go118);
    assert_eq!(bin.text_start_source(), TextStartSource::PcHeader);
    assert!(!bin.has_symtab());
    if let Some(toolchain) = support::toolchains().last() {
        assert_eq!(
            info.to_string(),
            support::go_version_m(toolchain, Path::new(path))
        );
    }
}

#[test]
fn debian_etcd_resolves_tls_and_grpc_server() {
    let path = "/usr/bin/etcd";
    let Some(bin) = open(path, "debian_etcd_resolves_tls_and_grpc_server") else {
        return;
    };
    check_build_info(&bin, path, "go.etcd.io/etcd");
    check_functions(&bin, path, TLS);
    check_functions(&bin, path, GRPC_SERVER);
}

#[test]
fn debian_containerd_resolves_tls_and_grpc_server() {
    let path = "/usr/bin/containerd";
    let Some(bin) = open(path, "debian_containerd_resolves_tls_and_grpc_server") else {
        return;
    };
    check_build_info(
        &bin,
        path,
        "github.com/containerd/containerd/cmd/containerd",
    );
    check_functions(&bin, path, TLS);
    check_functions(&bin, path, GRPC_SERVER);
}

/// The shim links neither crypto/tls nor grpc (it speaks ttrpc).
#[test]
fn debian_containerd_shim_resolves_ttrpc_server() {
    let path = "/usr/bin/containerd-shim-runc-v2";
    let Some(bin) = open(path, "debian_containerd_shim_resolves_ttrpc_server") else {
        return;
    };
    check_build_info(
        &bin,
        path,
        "github.com/containerd/containerd/cmd/containerd-shim-runc-v2",
    );
    assert_eq!(bin.function(TLS[0]).unwrap(), None);
    check_functions(
        &bin,
        path,
        &["github.com/containerd/ttrpc.(*serverConn).run"],
    );
}

/// runc links neither crypto/tls nor grpc.
#[test]
fn debian_runc_resolves_its_functions() {
    let path = "/usr/sbin/runc";
    let Some(bin) = open(path, "debian_runc_resolves_its_functions") else {
        return;
    };
    check_build_info(&bin, path, "github.com/opencontainers/runc");
    assert_eq!(bin.function(TLS[0]).unwrap(), None);
    check_functions(&bin, path, &["main.main", "os/exec.(*Cmd).Start"]);
}

/// Opening containerd (48 MB) and resolving ~20 probe functions with their
/// RETs. How long that takes is measured by `cargo xtask bench`, not here.
#[test]
fn debian_containerd_resolves_twenty_functions() {
    let path = "/usr/bin/containerd";
    if !Path::new(path).exists() {
        support::skip(
            "debian_containerd_resolves_twenty_functions",
            &format!("{path} is not installed"),
        );
        return;
    }
    let names = [
        "crypto/tls.(*Conn).Write",
        "crypto/tls.(*Conn).Read",
        "crypto/tls.(*Conn).Close",
        "crypto/tls.(*Conn).Handshake",
        "google.golang.org/grpc.(*Server).handleStream",
        "google.golang.org/grpc.(*Server).processUnaryRPC",
        "google.golang.org/grpc.(*Server).processStreamingRPC",
        "google.golang.org/grpc.(*ClientConn).Invoke",
        "google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders",
        "google.golang.org/grpc/internal/transport.(*http2Client).NewStream",
        "google.golang.org/grpc/internal/transport.(*loopyWriter).writeHeader",
        "golang.org/x/net/http2.(*Framer).WriteHeaders",
        "golang.org/x/net/http2/hpack.(*Encoder).WriteField",
        "golang.org/x/net/http2/hpack.(*Decoder).Write",
        "net/http.(*Transport).RoundTrip",
        "net/http.serverHandler.ServeHTTP",
        "net.(*conn).Read",
        "net.(*conn).Write",
        "runtime.newproc1",
        "runtime.goexit1",
    ];
    let bin = GoBinary::open(path).unwrap();
    let inspection = bin.inspect(names).unwrap();
    assert!(inspection.functions.len() >= 18, "{:?}", inspection.missing);
    for (name, function) in &inspection.functions {
        assert!(
            function.entry < function.end && !function.ret_offsets.is_empty(),
            "{name}: {function:?}"
        );
    }
}
