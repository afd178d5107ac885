//! Where a Go function's parameters are at its entry, from the binary
//! itself, stripped or not: its `FUNCDATA_ArgInfo` (what a traceback prints
//! of its arguments) and the registers its morestack stub spills.
//!
//! ArgInfo (written by `cmd/compile/internal/ssagen` `emitArgInfo`, read by
//! `runtime/traceback.go` `printArgs`; the same encoding from Go 1.18 to
//! 1.27) lists each parameter, the receiver first and no result, as its
//! scalar components, an aggregate (struct, array, string, interface,
//! slice) in braces. A component is its offset in the arguments area and
//! its size; for a parameter passed in registers, the offset of its spill
//! slot. At most 10 components and 5 levels are written (then `...`); an
//! offset of 0xf0 or more is written `_`, without a size. It does not tell
//! an integer from a float, so not which register holds a component: the
//! morestack stub does (`ret::spill_stub`), storing each register word of
//! each parameter at its spill slot before it grows the stack.

use iced_x86::Register;

use crate::{
    GoBinary,
    error::{GoBinError, Result},
    ret::{self, Spill},
};

/// `abi.FUNCDATA_ArgInfo`.
const FUNCDATA_ARG_INFO: u8 = 5;
/// `abi.TraceArgsMaxLen`: (5 levels × 3 + 2) × 10 components + 1.
const MAX_LEN: usize = 171;
const END_SEQ: u8 = 0xff;
const START_AGG: u8 = 0xfe;
const END_AGG: u8 = 0xfd;
const DOTDOTDOT: u8 = 0xfc;
const OFFSET_TOO_LARGE: u8 = 0xfb;
/// Offsets from here on are written [`OFFSET_TOO_LARGE`].
const SPECIAL: u32 = 0xf0;

/// Where one scalar component of a parameter is at the function's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgLoc {
    /// An integer register, as its index in Go's order (RAX = 0 … R11 = 8).
    Int { word: u8, size: u8 },
    /// A float register (X0 = 0 … X14 = 14).
    Float { register: u8, size: u8 },
    /// On the stack, at this offset of the arguments area (`[RSP + 8 +
    /// offset]` at the entry).
    Stack { offset: u32, size: u8 },
    /// Not told: past a `...`, or an offset too large that no spill explains.
    Unknown,
}

/// One parameter: its shape as ArgInfo writes it (sizes, braces; `_` for a
/// component whose offset was too large, `...` for what was left out) and
/// where each of its scalar components is, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub shape: String,
    pub parts: Vec<ArgLoc>,
}

/// A function's parameters, the receiver first; `cut` when ArgInfo left
/// the later ones out (more than 10 components).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgLocations {
    pub params: Vec<Param>,
    pub cut: bool,
}

/// Where a probe reads a parameter, as one of the signatures its function
/// has had: the shapes of its first parameters, the receiver first (`*`
/// for any; a shape ending `...` for one that begins so), as many as tell
/// this signature from the others; which of them is read (0: the
/// receiver), and which of its scalar components.
#[derive(Debug, Clone, Copy)]
pub struct ArgAt {
    pub params: &'static [&'static str],
    pub param: usize,
    pub part: usize,
}

impl ArgLocations {
    /// The integer register word of the component that exactly one of
    /// `signatures` reads: none matching, several, or a component that is
    /// not a whole integer register is an error saying so.
    pub fn word(&self, signatures: &[ArgAt]) -> std::result::Result<u8, String> {
        let matching: Vec<&ArgAt> = signatures
            .iter()
            .filter(|at| {
                at.params.len() <= self.params.len()
                    && at
                        .params
                        .iter()
                        .zip(&self.params)
                        .all(|(pattern, param)| shape_matches(pattern, &param.shape))
            })
            .collect();
        let shapes: Vec<&str> = self.params.iter().map(|p| p.shape.as_str()).collect();
        let at = match matching[..] {
            [one] => one,
            [] => {
                return Err(format!(
                    "no known signature matches ({})",
                    shapes.join(", ")
                ));
            }
            _ => return Err(format!("several signatures match ({})", shapes.join(", "))),
        };
        let Some(param) = self.params.get(at.param) else {
            return Err(format!("no parameter {}", at.param));
        };
        match param.parts.get(at.part) {
            Some(&ArgLoc::Int { word, size: 8 }) => Ok(word),
            other => Err(format!(
                "parameter {} ({}) component {}: {other:?}, not an integer register",
                at.param, param.shape, at.part
            )),
        }
    }
}

/// Whether a parameter's `shape` is written as `pattern` (see [`ArgAt`]):
/// a `_` (an offset too large) stands for any size.
fn shape_matches(pattern: &str, shape: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let mut shape = tokens(shape);
    let mut pattern = tokens(pattern).peekable();
    while let Some(expected) = pattern.next() {
        if expected == "..." && pattern.peek().is_none() {
            return true;
        }
        match shape.next() {
            Some(token) if token == expected => {}
            Some("_") if expected.bytes().all(|b| b.is_ascii_digit()) => {}
            _ => return false,
        }
    }
    shape.next().is_none()
}

/// A shape's tokens: braces, sizes, `_` and `...`.
fn tokens(shape: &str) -> impl Iterator<Item = &str> {
    shape.split(' ').flat_map(|word| {
        let open = word.len() - word.trim_start_matches('{').len();
        let inner = word.trim_start_matches('{');
        let close = inner.len() - inner.trim_end_matches('}').len();
        let inner = inner.trim_end_matches('}');
        std::iter::repeat_n("{", open)
            .chain((!inner.is_empty()).then_some(inner))
            .chain(std::iter::repeat_n("}", close))
    })
}

/// Each parameter's shape and components as ArgInfo writes them, and
/// whether the later ones were left out.
type Parsed = (Vec<(String, Vec<Component>)>, bool);

/// A scalar component as ArgInfo writes it: its offset in the arguments
/// area and its size; `None` when written `_` (an offset too large, whose
/// size is not written either).
type Component = Option<(u32, u8)>;

/// Parses ArgInfo `bytes` into each parameter's shape and components.
fn parse(bytes: &[u8]) -> std::result::Result<Parsed, String> {
    let mut params = Vec::new();
    let mut at = 0;
    let mut depth = 0_usize;
    let mut cut = false;
    let mut shape = String::new();
    let mut parts = Vec::new();
    let next = |at: &mut usize| -> std::result::Result<u8, String> {
        let byte = *bytes.get(*at).ok_or("ends without its end marker")?;
        *at += 1;
        Ok(byte)
    };
    loop {
        if at >= MAX_LEN {
            return Err(format!("longer than {MAX_LEN} bytes"));
        }
        let byte = next(&mut at)?;
        let component = match byte {
            END_SEQ if depth == 0 => return Ok((params, cut)),
            END_SEQ => return Err("an aggregate is not closed".into()),
            START_AGG => {
                depth += 1;
                if depth > 5 {
                    return Err("nested deeper than 5".into());
                }
                push_token(&mut shape, "{");
                continue;
            }
            END_AGG => {
                depth = depth.checked_sub(1).ok_or("an aggregate closed twice")?;
                shape.push('}');
                if depth == 0 {
                    params.push((std::mem::take(&mut shape), std::mem::take(&mut parts)));
                }
                continue;
            }
            DOTDOTDOT => {
                // Components left out: past 10 (each aggregate open then
                // still closes, and each parameter after writes its own
                // `...`), or an aggregate nested 5 deep (`{...}`).
                cut = true;
                if depth == 0 {
                    return match next(&mut at)? {
                        END_SEQ => Ok((params, cut)),
                        other => Err(format!("{other:#x} after the parameters were cut")),
                    };
                }
                push_token(&mut shape, "...");
                continue;
            }
            OFFSET_TOO_LARGE => None,
            offset => Some((u32::from(offset), next(&mut at)?)),
        };
        push_token(
            &mut shape,
            &component.map_or_else(|| "_".to_owned(), |(_, size)| size.to_string()),
        );
        parts.push(component);
        if depth == 0 {
            params.push((std::mem::take(&mut shape), std::mem::take(&mut parts)));
        }
    }
}

/// Appends `token` to a shape, a space apart from a token before it.
fn push_token(shape: &mut String, token: &str) {
    if !shape.is_empty() && !shape.ends_with('{') {
        shape.push(' ');
    }
    shape.push_str(token);
}

/// Places each component: at the register the stub spills to its slot, on
/// the stack below the spill area, or — written `_` — at the stub's next
/// spill of a slot as large, when those are as many as such components.
fn locate(
    params: Vec<(String, Vec<Component>)>,
    cut: bool,
    spills: &[Spill],
) -> std::result::Result<ArgLocations, String> {
    let mut used = vec![false; spills.len()];
    let lowest_spill = spills.iter().map(|spill| spill.slot).min();
    let large: Vec<usize> = (0..spills.len())
        .filter(|&i| spills[i].slot >= SPECIAL)
        .collect();
    let untold = params
        .iter()
        .flat_map(|(_, parts)| parts)
        .filter(|component| component.is_none())
        .count();
    let mut large_next = large.iter();
    let mut located = Vec::with_capacity(params.len());
    for (shape, components) in params {
        let mut parts = Vec::with_capacity(components.len());
        for component in components {
            let spill = match component {
                Some((slot, _)) => spills.iter().position(|spill| spill.slot == slot),
                // `_`: a register word only when each `_` has a large spill.
                None if untold == large.len() && !shape.contains("...") => {
                    large_next.next().copied()
                }
                None => None,
            };
            let part = match (spill, component) {
                (Some(index), _) => {
                    if std::mem::replace(&mut used[index], true) {
                        return Err(format!("slot {:#x} spilled twice", spills[index].slot));
                    }
                    let spill = spills[index];
                    if let Some((_, size)) = component.filter(|&(_, size)| size != spill.width) {
                        return Err(format!(
                            "slot {:#x}: {size} bytes in ArgInfo, {} spilled",
                            spill.slot, spill.width
                        ));
                    }
                    register_loc(spill)?
                }
                (None, Some((offset, size)))
                    if lowest_spill.is_none_or(|lowest| offset < lowest) =>
                {
                    ArgLoc::Stack { offset, size }
                }
                (None, Some((offset, _))) => {
                    return Err(format!(
                        "offset {offset:#x} is in the spill area but no register is spilled there"
                    ));
                }
                (None, None) => ArgLoc::Unknown,
            };
            parts.push(part);
        }
        located.push(Param { shape, parts });
    }
    // Spills past a cut belong to the parameters left out.
    if !cut && used.iter().any(|used| !used) {
        return Err("the stub spills a register no parameter has".into());
    }
    Ok(ArgLocations {
        params: located,
        cut,
    })
}

fn register_loc(spill: Spill) -> std::result::Result<ArgLoc, String> {
    if let Some(word) = ret::integer_argument_index(spill.register) {
        return Ok(ArgLoc::Int {
            word,
            size: spill.width,
        });
    }
    if let Some(register) = ret::float_argument_index(spill.register) {
        return Ok(ArgLoc::Float {
            register,
            size: spill.width,
        });
    }
    Err(format!(
        "{:?} is no argument register",
        Register::full_register(spill.register)
    ))
}

impl GoBinary {
    /// Where `function`'s parameters are at its entry (see the module
    /// documentation). An error says why it cannot be told: no ArgInfo, no
    /// morestack stub (a NOSPLIT function: its registers cannot be told
    /// from ints and floats), or the two disagree.
    pub fn arg_locations(&self, function: &crate::Function) -> Result<ArgLocations> {
        let error = |reason: String| GoBinError::ArgLocations {
            function: function.name.clone(),
            reason,
        };
        let index = self
            .pclntab_index(&function.name)
            .ok_or_else(|| error("not in the function table".into()))?;
        let offset = self
            .pclntab
            .funcdata(&self.data, index, FUNCDATA_ARG_INFO)
            .ok_or_else(|| error("no ArgInfo".into()))?;
        let gofunc = self.gofunc().map_err(&error)?;
        let at = gofunc
            .checked_add(u64::from(offset))
            .ok_or_else(|| error("ArgInfo offset overflows".into()))?;
        let bytes = (1..=MAX_LEN as u64)
            .rev()
            .find_map(|len| self.layout.bytes_at(&self.data, at, len))
            .ok_or_else(|| error(format!("ArgInfo at {at:#x} is not mapped")))?;
        let (params, cut) = parse(bytes).map_err(|reason| error(format!("ArgInfo: {reason}")))?;
        let spills = ret::spill_stub(self.function_code(function)?, function.entry)
            .ok_or_else(|| error("no morestack stub of spills (a NOSPLIT function?)".into()))?;
        locate(params, cut, &spills).map_err(error)
    }

    /// `moduledata.gofunc`, the base of funcdata offsets: the word after
    /// `types`, `etypes` and `rodata` (Go 1.18–1.19: 304; 1.20 added
    /// `covctrs`/`ecovctrs` before them: 320; 1.27 added `typedesclen`,
    /// `itaboffset` and `itabsize`: 344).
    fn gofunc(&self) -> std::result::Result<u64, String> {
        let go = crate::GoRelease::parse(&self.build_info.go_version)
            .ok_or_else(|| format!("unknown Go version {:?}", self.build_info.go_version))?;
        let field = match (go.major, go.minor) {
            (1, ..=19) => 304,
            (1, 20..=26) => 320,
            _ => 344,
        };
        let moduledata = self
            .moduledata()
            .ok_or("no moduledata consistent with the pclntab")?;
        self.layout
            .read_pointer(&self.data, moduledata + field)
            .filter(|&gofunc| self.layout.bytes_at(&self.data, gofunc, 1).is_some())
            .ok_or_else(|| {
                format!(
                    "moduledata.gofunc at {:#x} is not mapped",
                    moduledata + field
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spill(slot: u32, register: Register, width: u8) -> Spill {
        Spill {
            slot,
            register,
            width,
        }
    }

    fn shapes(locations: &ArgLocations) -> Vec<&str> {
        locations.params.iter().map(|p| p.shape.as_str()).collect()
    }

    /// `bind(ctx, fwk, assumed, targetNode, state)` of kube-scheduler 1.28
    /// (receiver first): its ArgInfo and stub as the binary has them.
    #[test]
    fn parameters_are_placed_at_the_registers_their_slots_were_spilled_from() {
        let info = [
            0x00, 8, START_AGG, 0x08, 8, 0x10, 8, END_AGG, START_AGG, 0x18, 8, 0x20, 8, END_AGG,
            0x28, 8, START_AGG, 0x30, 8, 0x38, 8, END_AGG, 0x40, 8, END_SEQ,
        ];
        let spills: Vec<Spill> = (0..)
            .zip(ret::ARGUMENT_REGISTERS)
            .map(|(i, register)| spill(8 * i, register, 8))
            .collect();
        let (params, cut) = parse(&info).unwrap();
        let located = locate(params, cut, &spills).unwrap();
        assert_eq!(shapes(&located), ["8", "{8 8}", "{8 8}", "8", "{8 8}", "8"]);
        assert_eq!(located.params[3].parts, [ArgLoc::Int { word: 5, size: 8 }]);
        assert_eq!(located.params[4].parts[0], ArgLoc::Int { word: 6, size: 8 });
    }

    /// A float between integers takes an X register, not the next integer
    /// one; an array of two goes to the stack; a slot written `_` is the
    /// stub's large spill.
    #[test]
    fn floats_stack_arrays_and_large_offsets_are_told_apart() {
        // (recv, weights [2]int on the stack, scale float64, pods []*Pod)
        let info = [
            0x10, 8, START_AGG, 0x00, 8, 0x08, 8, END_AGG, 0x18, 8, START_AGG, 0x20, 8, 0x28, 8,
            0x30, 8, END_AGG, END_SEQ,
        ];
        let spills = [
            spill(0x10, Register::RAX, 8),
            spill(0x18, Register::XMM0, 8),
            spill(0x20, Register::RBX, 8),
            spill(0x28, Register::RCX, 8),
            spill(0x30, Register::RDI, 8),
        ];
        let (params, cut) = parse(&info).unwrap();
        let located = locate(params, cut, &spills).unwrap();
        assert_eq!(
            located.params[1].parts,
            [
                ArgLoc::Stack { offset: 0, size: 8 },
                ArgLoc::Stack { offset: 8, size: 8 }
            ]
        );
        assert_eq!(
            located.params[2].parts,
            [ArgLoc::Float {
                register: 0,
                size: 8
            }]
        );
        assert_eq!(located.params[3].parts[0], ArgLoc::Int { word: 1, size: 8 });

        // syncPod(uid, status) of the kubelet's status manager: a 400-byte
        // status on the stack pushes the spill slots past 0xf0, and the
        // components ran out inside it (its aggregates still close).
        let info = [
            OFFSET_TOO_LARGE,
            START_AGG,
            OFFSET_TOO_LARGE,
            OFFSET_TOO_LARGE,
            END_AGG,
            START_AGG,
            0x00,
            8,
            START_AGG,
            0x08,
            8,
            0x10,
            8,
            END_AGG,
            DOTDOTDOT,
            END_AGG,
            END_SEQ,
        ];
        let spills = [
            spill(0x178, Register::RAX, 8),
            spill(0x180, Register::RBX, 8),
            spill(0x188, Register::RCX, 8),
        ];
        let (params, cut) = parse(&info).unwrap();
        assert!(cut);
        let located = locate(params, cut, &spills).unwrap();
        assert_eq!(shapes(&located), ["_", "{_ _}", "{8 {8 8} ...}"]);
        assert_eq!(located.params[1].parts[0], ArgLoc::Int { word: 1, size: 8 });
    }

    /// kubelet's status `syncPod(uid, status)` and the same with a `ctx`
    /// first: each binary matches its own signature only.
    #[test]
    fn a_signature_is_told_by_the_shapes_of_the_parameters_before_the_one_read() {
        let signatures = [
            ArgAt {
                params: &["*", "{8 8}", "{8 {8 8} ..."],
                param: 1,
                part: 0,
            },
            ArgAt {
                params: &["*", "{8 8}", "{8 8}", "{8 {8 8} ..."],
                param: 2,
                part: 0,
            },
        ];
        let int = |word| ArgLoc::Int { word, size: 8 };
        let param = |shape: &str, parts: Vec<ArgLoc>| Param {
            shape: shape.to_owned(),
            parts,
        };
        let old = ArgLocations {
            params: vec![
                param("_", vec![int(0)]),
                param("{_ _}", vec![int(1), int(2)]),
                param("{8 {8 8} ...}", vec![ArgLoc::Stack { offset: 0, size: 8 }]),
            ],
            cut: true,
        };
        assert_eq!(old.word(&signatures[..1]), Ok(1));
        assert_eq!(old.word(&signatures), Ok(1));
        let new = ArgLocations {
            params: vec![
                param("8", vec![int(0)]),
                param("{8 8}", vec![int(1), int(2)]),
                param("{8 8}", vec![int(3), int(4)]),
                param("{8 {8 8} ...}", vec![ArgLoc::Stack { offset: 0, size: 8 }]),
            ],
            cut: true,
        };
        assert_eq!(new.word(&signatures), Ok(3));
        // Neither: refused, as is a component that is no integer register.
        assert!(new.word(&signatures[..1]).is_err());
        let float = ArgLocations {
            params: vec![
                param("8", vec![int(0)]),
                param(
                    "8",
                    vec![ArgLoc::Float {
                        register: 0,
                        size: 8,
                    }],
                ),
            ],
            cut: false,
        };
        let at = [ArgAt {
            params: &["8", "8"],
            param: 1,
            part: 0,
        }];
        assert!(float.word(&at).is_err());
    }

    #[test]
    fn malformed_arginfo_is_an_error() {
        for bytes in [
            &[][..],
            &[0x00][..],
            &[START_AGG, 0x00, 8, END_SEQ][..],
            &[END_AGG, END_SEQ][..],
            &[DOTDOTDOT, 0x00][..],
            &[START_AGG; 7][..],
            &[0x00; MAX_LEN + 2][..],
        ] {
            assert!(parse(bytes).is_err(), "{bytes:02x?}");
        }
        // A stub and an ArgInfo that disagree.
        let (params, cut) = parse(&[0x00, 8, END_SEQ]).unwrap();
        assert!(locate(params.clone(), cut, &[spill(0x00, Register::RAX, 4)]).is_err());
        assert!(
            locate(
                params,
                cut,
                &[spill(0x00, Register::RAX, 8), spill(0x08, Register::RBX, 8)]
            )
            .is_err()
        );
    }
}
