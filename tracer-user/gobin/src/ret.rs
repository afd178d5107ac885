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

use iced_x86::{Decoder, DecoderOptions, Mnemonic, Register};

/// Offset of `stackguard0` in `runtime.g`; Go's stack check compares with it.
const G_STACKGUARD0: u64 = 0x10;
/// Instructions scanned for the stack check: `CMPQ SP, 16(R14)` comes first,
/// or after a `LEAQ`/`SUBQ` into R12 for large frames.
const STACK_CHECK_SCAN: usize = 6;

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

/// Offset from `entry` of the first instruction after Go's stack-growth
/// check, or 0 for a function without one (NOSPLIT).
///
/// A Go function begins `CMPQ SP, 16(R14); JLS more` (R14 holds the current
/// g; 16 is `g.stackguard0`), where `more` calls `runtime.morestack` and then
/// jumps back to the entry. A uprobe at the first instruction therefore fires
/// twice for a call that grows its goroutine's stack; one placed after the
/// check fires exactly once, with the argument registers untouched.
pub(crate) fn after_stack_check(code: &[u8], entry: u64) -> u64 {
    let mut decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut compared_with_stackguard = false;
    for _ in 0..STACK_CHECK_SCAN {
        if !decoder.can_decode() {
            break;
        }
        let instruction = decoder.decode();
        if instruction.mnemonic() == Mnemonic::Cmp
            && instruction.memory_base() == Register::R14
            && instruction.memory_displacement64() == G_STACKGUARD0
        {
            compared_with_stackguard = true;
        } else if compared_with_stackguard && is_conditional_jump(instruction.mnemonic()) {
            return instruction.next_ip() - entry;
        }
    }
    0
}

fn is_conditional_jump(mnemonic: Mnemonic) -> bool {
    use Mnemonic::{Ja, Jae, Jb, Jbe, Je, Jg, Jge, Jl, Jle, Jne, Jno, Jnp, Jns, Jo, Jp, Js};
    matches!(
        mnemonic,
        Jo | Jno | Jb | Jae | Je | Jne | Jbe | Ja | Js | Jns | Jp | Jnp | Jl | Jge | Jle | Jg
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_point_is_past_the_stack_check() {
        let code = [
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x76, 0x2a, // jbe +0x2a (to the morestack stub)
            0x55, // push rbp  <- the body
            0xc3,
        ];
        assert_eq!(after_stack_check(&code, 0x1000), 6);
        // Large frame: lea r12, [rsp-0x1000]; cmp r12, [r14+0x10]; jbe.
        let large = [
            0x4c, 0x8d, 0xa4, 0x24, 0x00, 0xf0, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0,
            1, 0, 0, 0x55,
        ];
        assert_eq!(after_stack_check(&large, 0x1000), 18);
    }

    #[test]
    fn nosplit_function_has_no_stack_check() {
        assert_eq!(after_stack_check(&[0x48, 0x89, 0xc3, 0xc3], 0x1000), 0);
        assert_eq!(after_stack_check(&[], 0x1000), 0);
    }

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
