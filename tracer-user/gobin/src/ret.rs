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

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

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

/// Where an entry uprobe goes in a function, relative to its entry.
///
/// The kernel emulates a probed branch (Jcc, JMP, CALL rel) in the trap
/// handler; most other instructions it executes out of line and single-steps,
/// which costs a second trap — measured here, a probe on Go's first
/// instruction costs 5.6 µs a hit, one on the branch after it 1.0 µs. So the
/// probe goes on the stack check's `JBE` itself, where every argument is
/// still in its register, and the probe ignores the hits where the jump is
/// about to be taken (the flags say so): that call grows its stack and runs
/// the prologue again, and the second pass is the one counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    /// Offset of the probed instruction from the entry.
    pub offset: u64,
    /// Whether it is the stack check's `JBE` (the probe must look at the
    /// flags), rather than the first instruction of a NOSPLIT function or
    /// the one after a stack check of another shape.
    pub at_stack_check: bool,
}

/// The [`EntryPoint`] of the function whose code (starting at `entry`) is
/// `code`.
///
/// A Go function begins `CMPQ SP, 16(R14); JLS more` (R14 holds the current
/// g; 16 is `g.stackguard0`), where `more` calls `runtime.morestack` and then
/// jumps back to the entry; large frames compare a `LEAQ`/`SUBQ` of SP in
/// R12 instead (not an argument register). A check whose jump is not a
/// `JBE` right after the `CMP` gets the probe on the instruction after the
/// jump; a function without one, on its first instruction.
pub(crate) fn entry_point(code: &[u8], entry: u64) -> EntryPoint {
    match stack_check_jump(code, entry) {
        Some((jump, just_compared)) => {
            // The probe reads the flags the CMP set: only a JBE right after it.
            let at_stack_check = just_compared && jump.mnemonic() == Mnemonic::Jbe;
            let probed = if at_stack_check {
                jump.ip()
            } else {
                jump.next_ip()
            };
            EntryPoint {
                offset: probed - entry,
                at_stack_check,
            }
        }
        None => EntryPoint {
            offset: 0,
            at_stack_check: false,
        },
    }
}

/// The conditional jump of the stack check at the start of the function
/// whose code (starting at `entry`) is `code` — the first after a `CMP`
/// with `g.stackguard0`, within [`STACK_CHECK_SCAN`] instructions — and
/// whether it comes right after that `CMP`; `None` without one.
fn stack_check_jump(code: &[u8], entry: u64) -> Option<(Instruction, bool)> {
    let mut decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut compared_with_stackguard = false;
    let mut just_compared = false;
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
            just_compared = true;
            continue;
        }
        if compared_with_stackguard && is_conditional_jump(instruction.mnemonic()) {
            return Some((instruction, just_compared));
        }
        just_compared = false;
    }
    None
}

/// Instructions read in a morestack stub: one spill per register word of
/// the parameters (at most 9 integer and 15 float registers), NOPs, the call.
const SPILL_STUB_SCAN: usize = 40;

/// One register a function's morestack stub spills: the parameter word in
/// `register` (`width` bytes) goes to `[RSP + slot + 8]` at the stack
/// check, `slot` being its offset in the arguments area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spill {
    pub(crate) slot: u32,
    pub(crate) register: Register,
    pub(crate) width: u8,
}

/// The registers the morestack stub of the function whose code (starting
/// at `entry`) is `code` spills, in order: where the stack check's jump
/// goes, Go stores every register word of every parameter to its spill
/// slot before `CALL runtime.morestack` (the stub then reloads them and
/// jumps back to the entry). `None` without a stack check (a NOSPLIT
/// function), or when the stub is not spills then a call.
pub(crate) fn spill_stub(code: &[u8], entry: u64) -> Option<Vec<Spill>> {
    let target = stack_check_jump(code, entry)?.0.near_branch_target();
    let start = usize::try_from(target.checked_sub(entry)?).ok()?;
    let mut decoder = Decoder::with_ip(64, code.get(start..)?, target, DecoderOptions::NONE);
    let mut spills = Vec::new();
    for _ in 0..SPILL_STUB_SCAN {
        if !decoder.can_decode() {
            return None;
        }
        let instruction = decoder.decode();
        match instruction.mnemonic() {
            Mnemonic::Nop => {}
            Mnemonic::Call => return Some(spills),
            Mnemonic::Mov | Mnemonic::Movsd | Mnemonic::Movss
                if instruction.op0_kind() == OpKind::Memory
                    && instruction.memory_base() == Register::RSP
                    && instruction.memory_index() == Register::None
                    && instruction.op1_kind() == OpKind::Register =>
            {
                let slot = instruction.memory_displacement64().checked_sub(8)?;
                spills.push(Spill {
                    slot: u32::try_from(slot).ok()?,
                    register: instruction.op1_register(),
                    width: u8::try_from(instruction.memory_size().size()).ok()?,
                });
            }
            _ => return None,
        }
    }
    None
}

/// The integer argument register `register` (or a part of it) is, as its
/// index in Go's order (RAX = 0 … R11 = 8).
pub(crate) fn integer_argument_index(register: Register) -> Option<u8> {
    let full = register.full_register();
    ARGUMENT_REGISTERS
        .iter()
        .position(|&r| r == full)
        .and_then(|index| u8::try_from(index).ok())
}

/// The float argument register `register` is (X0 = 0 … X14 = 14).
pub(crate) fn float_argument_index(register: Register) -> Option<u8> {
    // `number` counts within the register's kind: XMM0 is 0.
    let index = u8::try_from(register.number()).ok()?;
    (register.is_xmm() && index < 15).then_some(index)
}

/// Offsets from `entry` of every direct `CALL target` in `code`.
pub(crate) fn calls_to(code: &[u8], entry: u64, target: u64) -> Vec<u64> {
    Decoder::with_ip(64, code, entry, DecoderOptions::NONE)
        .into_iter()
        .filter(|instruction| {
            instruction.mnemonic() == Mnemonic::Call
                && instruction.op0_kind() == OpKind::NearBranch64
                && instruction.near_branch64() == target
        })
        .map(|instruction| instruction.ip() - entry)
        .collect()
}

/// Go's integer argument registers on amd64, in order (ABIInternal).
pub(crate) const ARGUMENT_REGISTERS: [Register; 9] = [
    Register::RAX,
    Register::RBX,
    Register::RCX,
    Register::RDI,
    Register::RSI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];

/// Where the first `words` integer arguments of the function stay, from its
/// prologue to every RET: the caller's spill area, whose offset from RSP in
/// the function's body (past the prologue, at a call) is returned. At a RET
/// the area is at `[RSP + 8 + 8·i]` (the return address is at `[RSP]`).
///
/// Go's caller reserves a spill slot for each register argument; a callee
/// that keeps an argument live across calls stores it there, in its
/// prologue, and that slot is the argument's home. This holds for a function
/// when its prologue (`PUSH RBP; MOV RBP, RSP; SUB RSP, F`) is followed,
/// before any call, by `MOV [RSP + F + 16 + 8·i], <register i>` for each
/// word, and nothing else in it writes those slots. Anything else — no
/// frame, a store missing, another write — is `None`, and the caller
/// keeps its entry probe. (Go before 1.21 stores RBP inside the frame,
/// `SUB RSP, F; MOV [RSP + F − 8], RBP`, and the slots are at `F + 8 + 8·i`.)
pub(crate) fn homed_args(code: &[u8], entry: u64, words: usize) -> Option<u64> {
    if words == 0 || words > ARGUMENT_REGISTERS.len() {
        return None;
    }
    let instructions: Vec<Instruction> = Decoder::with_ip(64, code, entry, DecoderOptions::NONE)
        .into_iter()
        .collect();
    let mut frame = None;
    let mut pushed_rbp = false;
    for instruction in &instructions {
        match instruction.mnemonic() {
            Mnemonic::Call => break,
            Mnemonic::Push if instruction.op0_register() == Register::RBP => pushed_rbp = true,
            Mnemonic::Sub
                if instruction.op0_register() == Register::RSP
                    && matches!(
                        instruction.op1_kind(),
                        OpKind::Immediate8to64 | OpKind::Immediate32to64
                    ) =>
            {
                // Since Go 1.21 the frame pointer is pushed first; before,
                // it was stored inside the frame.
                let saved_rbp = if pushed_rbp { 8 } else { 0 };
                frame = Some(instruction.immediate64() + saved_rbp);
                break;
            }
            _ => {}
        }
    }
    let frame = frame?;
    // The slots, as offsets from RSP after the prologue (past the frame,
    // the saved RBP and the return address) and from RBP.
    let slot = |word: usize| (frame + 8 + 8 * word as u64, 16 + 8 * word as u64);
    let mut homed = vec![false; words];
    let mut before_call = true;
    for instruction in &instructions {
        if instruction.mnemonic() == Mnemonic::Call {
            before_call = false;
        }
        if instruction.op_count() == 0 || instruction.op0_kind() != OpKind::Memory {
            continue;
        }
        if matches!(instruction.mnemonic(), Mnemonic::Cmp | Mnemonic::Test) {
            continue;
        }
        let base = instruction.memory_base();
        if instruction.memory_index() != Register::None
            || !matches!(base, Register::RSP | Register::RBP)
        {
            continue;
        }
        let start = instruction.memory_displacement64();
        let end = start.wrapping_add(instruction.memory_size().size() as u64);
        for (word, home) in homed.iter_mut().enumerate() {
            let (from_rsp, from_rbp) = slot(word);
            let at = if base == Register::RSP {
                from_rsp
            } else {
                from_rbp
            };
            if start >= at + 8 || end <= at {
                continue;
            }
            let stores_argument = instruction.mnemonic() == Mnemonic::Mov
                && base == Register::RSP
                && start == at
                && instruction.op1_kind() == OpKind::Register
                && instruction.op1_register() == ARGUMENT_REGISTERS[word];
            if stores_argument && before_call && !*home {
                *home = true;
            } else {
                // Written again, or with something else: not the argument.
                return None;
            }
        }
    }
    // Past the frame and the return address.
    homed.iter().all(|home| *home).then_some(frame + 8)
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
    fn probe_point_is_the_stack_check_jump() {
        let at = |offset| EntryPoint {
            offset,
            at_stack_check: true,
        };
        let code = [
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x76, 0x2a, // jbe +0x2a (to the morestack stub)
            0x55, // push rbp  <- the body
            0xc3,
        ];
        assert_eq!(entry_point(&code, 0x1000), at(4));
        // Large frame: lea r12, [rsp-0x1000]; cmp r12, [r14+0x10]; jbe.
        let large = [
            0x4c, 0x8d, 0xa4, 0x24, 0x00, 0xf0, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0,
            1, 0, 0, 0x55,
        ];
        assert_eq!(entry_point(&large, 0x1000), at(12));
    }

    #[test]
    fn a_check_of_another_shape_is_probed_past_its_jump() {
        let code = [
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x72, 0x2a, // jb (not the JLS Go emits)
            0x55, 0xc3,
        ];
        let expected = EntryPoint {
            offset: 6,
            at_stack_check: false,
        };
        assert_eq!(entry_point(&code, 0x1000), expected);
        // A flag-writing instruction between the CMP and the JBE.
        let between = [
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x48, 0x85, 0xc0, // test rax, rax
            0x76, 0x2a, // jbe
            0x55, 0xc3,
        ];
        let expected = EntryPoint {
            offset: 9,
            at_stack_check: false,
        };
        assert_eq!(entry_point(&between, 0x1000), expected);
    }

    #[test]
    fn nosplit_function_has_no_stack_check() {
        let first = EntryPoint {
            offset: 0,
            at_stack_check: false,
        };
        assert_eq!(entry_point(&[0x48, 0x89, 0xc3, 0xc3], 0x1000), first);
        assert_eq!(entry_point(&[], 0x1000), first);
    }

    #[test]
    fn direct_calls_to_a_target_are_found_and_others_are_not() {
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00, // call 0x2000 (from 0x1000)
            0xff, 0xd0, // call rax
            0xe8, 0xf4, 0x0f, 0x00, 0x00, // call 0x2000 (from 0x1007)
            0xe8, 0x00, 0x00, 0x00, 0x00, // call 0x1011
            0xc3,
        ];
        assert_eq!(calls_to(&code, 0x1000, 0x2000), vec![0, 7]);
        assert_eq!(calls_to(&code, 0x1000, 0x3000), Vec::<u64>::new());
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

    /// The prologue of `crypto/tls.(*Conn).Read` as Go 1.26 compiles it
    /// (etcd-load fixture), then a call and a RET.
    const TLS_READ_PROLOGUE: [u8; 41] = [
        0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
        0x0f, 0x86, 0x00, 0x01, 0x00, 0x00, // jbe (morestack)
        0x55, // push rbp
        0x48, 0x89, 0xe5, // mov rbp, rsp
        0x48, 0x83, 0xec, 0x58, // sub rsp, 0x58
        0x48, 0x89, 0x44, 0x24, 0x68, // mov [rsp+0x68], rax
        0x48, 0x89, 0x4c, 0x24, 0x78, // mov [rsp+0x78], rcx
        0x48, 0x89, 0x5c, 0x24, 0x70, // mov [rsp+0x70], rbx
        0xe8, 0x00, 0x00, 0x00, 0x00, // call
        0xc6, 0x44, 0x24, // (start of a byte store, cut)
    ];

    #[test]
    fn arguments_homed_in_their_spill_slots_are_found_with_the_area_offset() {
        let mut code = TLS_READ_PROLOGUE[..38].to_vec();
        code.extend_from_slice(&[0x48, 0x83, 0xc4, 0x58, 0x5d, 0xc3]); // add rsp; pop rbp; ret
        // sub rsp, 0x58 after push rbp: 0x58 + 8 (RBP) + 8 (return address).
        assert_eq!(homed_args(&code, 0x1000, 3), Some(0x68));
        // A fourth word (RDI) is never stored: not readable.
        assert_eq!(homed_args(&code, 0x1000, 4), None);
    }

    #[test]
    fn go_1_19_prologue_keeps_the_frame_pointer_inside_the_frame() {
        let code = [
            0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
            0x0f, 0x86, 0x00, 0x01, 0x00, 0x00, // jbe
            0x48, 0x83, 0xec, 0x68, // sub rsp, 0x68
            0x48, 0x89, 0x6c, 0x24, 0x60, // mov [rsp+0x60], rbp
            0x48, 0x8d, 0x6c, 0x24, 0x60, // lea rbp, [rsp+0x60]
            0x48, 0x89, 0x8c, 0x24, 0x80, 0x00, 0x00, 0x00, // mov [rsp+0x80], rcx
            0x48, 0x89, 0x5c, 0x24, 0x78, // mov [rsp+0x78], rbx
            0x48, 0x89, 0x44, 0x24, 0x70, // mov [rsp+0x70], rax
            0xe8, 0x00, 0x00, 0x00, 0x00, // call
            0xc3,
        ];
        // The frame of 0x68 holds RBP: 0x68 + 8 (return address).
        assert_eq!(homed_args(&code, 0x1000, 3), Some(0x70));
    }

    #[test]
    fn an_argument_slot_written_again_or_missing_a_frame_is_refused() {
        let mut code = TLS_READ_PROLOGUE[..38].to_vec();
        // mov [rsp+0x70], rdx: b's pointer replaced after the call.
        code.extend_from_slice(&[0x48, 0x89, 0x54, 0x24, 0x70, 0xc3]);
        assert_eq!(homed_args(&code, 0x1000, 3), None);
        // No frame at all.
        assert_eq!(homed_args(&[0x48, 0x89, 0xc3, 0xc3], 0x1000, 1), None);
        assert_eq!(homed_args(&TLS_READ_PROLOGUE, 0x1000, 0), None);
    }

    #[test]
    fn truncated_code_does_not_panic() {
        assert_eq!(ret_offsets(&[0x48, 0xc7], 0x1000), Vec::<u64>::new());
        assert_eq!(ret_offsets(&[], 0x1000), Vec::<u64>::new());
    }
}
