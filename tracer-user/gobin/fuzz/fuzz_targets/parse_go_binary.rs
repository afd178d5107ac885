//! Arbitrary bytes through every parser of tracer-gobin: ELF headers and
//! segments, pcHeader (by section or by magic scan), moduledata search, build
//! info, the function table, RET decoding and the Kubernetes version. Any panic is a bug: the crate
//! promises errors, not panics, on data from disk. Seed the corpus with real
//! Go binaries (a stripped fixture, /usr/sbin/runc) so mutations reach the
//! Go tables.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracer_gobin::GoBinary;

fuzz_target!(|data: &[u8]| {
    let Ok(bin) = GoBinary::parse(data.to_vec()) else {
        return;
    };
    let _ = bin.build_info().to_string();
    // Bounded: a mutated nfunc can be large, and each function is decoded.
    for function in bin.functions().take(2000).flatten() {
        let _ = bin.ret_offsets(&function);
    }
    let _ = bin.kubernetes_version();
    let _ = bin.inspect(["crypto/tls.(*Conn).Write", "runtime.main", "main.main.abi0"]);
});
