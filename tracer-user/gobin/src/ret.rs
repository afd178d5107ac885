//! RET finder: a function's machine code in, the offsets of its RET
//! instructions (relative to the entry) out.
//!
//! Go cannot use uretprobes (the runtime moves goroutine stacks, and a
//! uretprobe rewrites the return address on the stack), so "function returned"
//! probes are uprobes on each RET. The code is decoded linearly from the entry
//! to the end with iced-x86: Go does not mix data into text, so linear decoding
//! stays in sync, and a real decoder never mistakes a `0xc3` inside an
//! immediate or displacement for a RET. Every near return counts: `C3`,
//! `C2 iw` and the `F3 C3` "REP RET" form.

use iced_x86::{Decoder, DecoderOptions, Mnemonic};

/// Offsets from `entry` of every near RET in `code` (which starts at `entry`).
pub(crate) fn ret_offsets(code: &[u8], entry: u64) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut offsets = Vec::new();
    while decoder.can_decode() {
        let instruction = decoder.decode();
        // Invalid bytes decode as a 1+-byte INVALID instruction and decoding
        // continues; only Ret (near) is a return, Retf is a far return.
        if instruction.mnemonic() == Mnemonic::Ret {
            offsets.push(instruction.ip() - entry);
        }
    }
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_near_ret_form_and_ignores_c3_inside_operands() {
        let code = [
            0x48, 0xc7, 0xc0, 0xc3, 0x00, 0x00,
            0x00, // mov rax, 0xc3 (a C3 byte in an immediate)
            0xc3, // ret at 7
            0xc2, 0x08, 0x00, // ret 8 at 8
            0xf3, 0xc3, // rep ret at 11
            0xcb, // retf: not a near return
            0xcc, 0xcc, // int3 padding
        ];
        assert_eq!(ret_offsets(&code, 0x401000), vec![7, 8, 11]);
    }

    #[test]
    fn truncated_code_does_not_panic() {
        assert_eq!(ret_offsets(&[0x48, 0xc7], 0x1000), Vec::<u64>::new());
        assert_eq!(ret_offsets(&[], 0x1000), Vec::<u64>::new());
    }
}
