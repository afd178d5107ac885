//! Where the values the Kubernetes function probes read sit in Go's register
//! ABI ([`KubeArgWords`](crate::KubeArgWords)), read from each release's
//! DWARF by `gen-offsets --kube`: the probed function's parameters and
//! results, their types, and the ABIInternal assignment rules (amd64). A
//! parameter that moved between releases gets its new word in that release's
//! row; one that was renamed, retyped past the registers, or removed stops
//! generation with its name, instead of a probe reading the wrong register.

use std::{borrow::Cow, collections::HashMap, path::Path};

use anyhow::{Context as _, bail};

use crate::ArgAt;
use gimli::{AttributeValue, EndianSlice, RunTimeEndian};
use object::{Object as _, ObjectSection as _};

/// How this module reads DWARF sections.
pub type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// Integer registers of Go's amd64 ABIInternal (RAX, RBX, RCX, RDI, RSI, R8–R11).
const INT_REGISTERS: u32 = 9;
/// Floating-point registers (X0–X14).
const FLOAT_REGISTERS: u32 = 15;
/// Typedef chains and nesting deeper than this are malformed DWARF.
const MAX_TYPE_DEPTH: u32 = 32;

/// Which value of a function a word belongs to.
#[derive(Debug)]
pub enum Value {
    /// The parameter of this name (the receiver counts as one, first).
    Param(&'static str),
    /// The result at this index (0-based), named or not.
    Result(usize),
}

/// One field of `KubeArgWords`: the word a probe reads.
#[derive(Debug)]
pub struct ArgWord {
    /// Its name in the Rust struct.
    pub name: &'static str,
    /// The probed function's full Go name.
    pub function: &'static str,
    /// Which parameter or result.
    pub value: Value,
    /// Members to follow inside it (an interface's `data`, a struct's field).
    pub path: &'static [&'static str],
    /// How the agent finds a parameter's word in a binary of a release the
    /// table lacks, from the binary itself ([`crate::GoBinary::arg_locations`]):
    /// the signatures the function has had, as ArgInfo shapes, the receiver
    /// first (empty for a result, which ArgInfo does not describe).
    pub at: &'static [ArgAt],
}

const fn param(
    name: &'static str,
    function: &'static str,
    value: &'static str,
    at: &'static [ArgAt],
) -> ArgWord {
    ArgWord {
        name,
        function,
        value: Value::Param(value),
        path: &[],
        at,
    }
}

/// A pointer receiver or parameter, a string or interface, a slice.
const P: &str = "8";
const S: &str = "{8 8}";
const SLICE: &str = "{8 8 8}";

/// `schedulingCycle(ctx, state, fwk, podInfo, start, podsToActivate)` and
/// `bind(ctx, fwk, assumed, targetNode, state)`: `state` was a
/// `*framework.CycleState` through 1.33, the `fwk.CycleState` interface
/// from 1.34.
const SCHEDULING_CYCLE_AT: &[ArgAt] = &[
    ArgAt {
        params: &[P, S, P, S, P],
        param: 4,
        part: 0,
    },
    ArgAt {
        params: &[P, S, S, S, P],
        param: 4,
        part: 0,
    },
];

const AUTHENTICATE: &str = "k8s.io/apiserver/pkg/authentication/request/union.(*unionAuthRequestHandler).AuthenticateRequest";
const SCHEDULING_CYCLE: &str = "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).schedulingCycle";
const BIND: &str = "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).bind";

/// Each field of `KubeArgWords`, in its order.
pub const ARG_WORDS: &[ArgWord] = &[
    param(
        "authenticate_request",
        AUTHENTICATE,
        "req",
        &[ArgAt {
            params: &[P, P],
            param: 1,
            part: 0,
        }],
    ),
    ArgWord {
        name: "authenticate_response",
        function: AUTHENTICATE,
        value: Value::Result(0),
        path: &[],
        at: &[],
    },
    ArgWord {
        name: "authorize_reason",
        function: "k8s.io/apiserver/pkg/authorization/union.unionAuthzHandler.Authorize",
        value: Value::Result(1),
        path: &[],
        at: &[],
    },
    param(
        "mutating_webhook",
        "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating.(*mutatingDispatcher).callAttrMutatingHook",
        "h",
        &[ArgAt {
            params: &[P, S, P],
            param: 2,
            part: 0,
        }],
    ),
    param(
        "validating_webhook",
        "k8s.io/apiserver/pkg/admission/plugin/webhook/validating.(*validatingDispatcher).callHook",
        "h",
        &[ArgAt {
            params: &[P, S, P],
            param: 2,
            part: 0,
        }],
    ),
    param(
        "storage_create_key",
        "k8s.io/apiserver/pkg/storage/etcd3.(*store).Create",
        "key",
        &[ArgAt {
            params: &[P, S, S],
            param: 2,
            part: 0,
        }],
    ),
    param(
        "storage_update_key",
        "k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
        "key",
        &[ArgAt {
            params: &[P, S, S],
            param: 2,
            part: 0,
        }],
    ),
    ArgWord {
        name: "pod_validate_pod",
        function: "k8s.io/kubernetes/pkg/registry/core/pod.podStrategy.Validate",
        value: Value::Param("obj"),
        path: &["data"],
        // A value receiver: `podStrategy`, two interfaces.
        at: &[ArgAt {
            params: &["*", S, S],
            param: 2,
            part: 1,
        }],
    },
    ArgWord {
        name: "binding_create_binding",
        function: "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*BindingREST).Create",
        value: Value::Param("obj"),
        path: &["data"],
        at: &[ArgAt {
            params: &[P, S, S, S],
            param: 3,
            part: 1,
        }],
    },
    param(
        "status_update_name",
        "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*StatusREST).Update",
        "name",
        &[ArgAt {
            params: &[P, S, S],
            param: 2,
            part: 0,
        }],
    ),
    ArgWord {
        name: "enqueue_pod",
        function: "k8s.io/kubernetes/pkg/scheduler.(*Scheduler).addPodToSchedulingQueue",
        value: Value::Param("obj"),
        path: &["data"],
        // `obj interface{}` through 1.34, `pod *v1.Pod` from 1.35.
        at: &[
            ArgAt {
                params: &[P, S],
                param: 1,
                part: 1,
            },
            ArgAt {
                params: &[P, P],
                param: 1,
                part: 0,
            },
        ],
    },
    param(
        "scheduling_cycle_pod_info",
        SCHEDULING_CYCLE,
        "podInfo",
        SCHEDULING_CYCLE_AT,
    ),
    ArgWord {
        name: "scheduling_cycle_host",
        function: SCHEDULING_CYCLE,
        value: Value::Result(0),
        path: &["SuggestedHost"],
        at: &[],
    },
    param(
        "bind_pod",
        BIND,
        "assumed",
        &[ArgAt {
            params: &[P, S, S, P],
            param: 3,
            part: 0,
        }],
    ),
    param(
        "bind_node",
        BIND,
        "targetNode",
        &[ArgAt {
            params: &[P, S, S, P, S],
            param: 4,
            part: 0,
        }],
    ),
    param(
        "pod_additions_pods",
        "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).HandlePodAdditions",
        "pods",
        // `ctx` first from 1.36.
        &[
            ArgAt {
                params: &[P, SLICE],
                param: 1,
                part: 0,
            },
            ArgAt {
                params: &[P, S, SLICE],
                param: 2,
                part: 0,
            },
        ],
    ),
    param(
        "sync_pod_pod",
        "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).SyncPod",
        "pod",
        &[ArgAt {
            params: &[P, S, P, P],
            param: 3,
            part: 0,
        }],
    ),
    param(
        "volume_wait_pod",
        "k8s.io/kubernetes/pkg/kubelet/volumemanager.(*volumeManager).WaitForAttachAndMount",
        "pod",
        &[ArgAt {
            params: &[P, S, P],
            param: 2,
            part: 0,
        }],
    ),
    param(
        "status_sync_uid",
        "k8s.io/kubernetes/pkg/kubelet/status.(*manager).syncPod",
        "uid",
        // `ctx` first by 1.37; the status after `uid` (a struct beginning
        // with a pointer and a struct of two words) tells the two apart.
        &[
            ArgAt {
                params: &["*", S, "{8 {8 8} ..."],
                param: 1,
                part: 0,
            },
            ArgAt {
                params: &["*", S, S, "{8 {8 8} ..."],
                param: 2,
                part: 0,
            },
        ],
    ),
];

/// A formal parameter of a function's DWARF entry.
struct Formal {
    name: String,
    /// Global `.debug_info` offset of its type.
    ty: usize,
    /// Go marks results with `DW_AT_variable_parameter`.
    result: bool,
}

/// What a type takes in Go's register assignment.
#[derive(Clone, Copy, Default)]
struct Layout {
    ints: u32,
    floats: u32,
    /// False for arrays of more than one element: always on the stack.
    assignable: bool,
}

/// The type entries of one binary's DWARF, read on demand.
struct Types<'a> {
    dwarf: &'a gimli::Dwarf<Reader<'a>>,
    /// Every unit, by the offset of its header.
    units: Vec<(usize, gimli::Unit<Reader<'a>>)>,
}

/// What a type entry says.
struct TypeDie {
    tag: gimli::DwTag,
    name: String,
    byte_size: u64,
    encoding: Option<gimli::DwAte>,
    ty: Option<usize>,
    /// Members (structs) or the element count (arrays, one subrange).
    members: Vec<(String, usize)>,
    count: Option<u64>,
}

impl<'a> Types<'a> {
    fn unit_of(&self, offset: usize) -> anyhow::Result<&gimli::Unit<Reader<'a>>> {
        let index = self.units.partition_point(|(start, _)| *start <= offset);
        index
            .checked_sub(1)
            .map(|i| &self.units[i].1)
            .with_context(|| format!("no unit holds .debug_info offset {offset:#x}"))
    }

    fn die(&self, offset: usize) -> anyhow::Result<TypeDie> {
        let unit = self.unit_of(offset)?;
        let unit_offset = gimli::DebugInfoOffset(offset)
            .to_unit_offset(&unit.header)
            .with_context(|| format!("offset {offset:#x} outside its unit"))?;
        let mut tree = unit.entries_tree(Some(unit_offset))?;
        let root = tree.root()?;
        let entry = root.entry();
        let mut die = TypeDie {
            tag: entry.tag(),
            name: self.name(unit, entry)?.unwrap_or_default(),
            byte_size: entry
                .attr_value(gimli::DW_AT_byte_size)?
                .and_then(|v| v.udata_value())
                .unwrap_or(0),
            encoding: match entry.attr_value(gimli::DW_AT_encoding)? {
                Some(AttributeValue::Encoding(encoding)) => Some(encoding),
                _ => None,
            },
            ty: type_ref(unit, entry)?,
            members: Vec::new(),
            count: None,
        };
        let mut children = root.children();
        while let Some(child) = children.next()? {
            let child = child.entry();
            match child.tag() {
                gimli::DW_TAG_member => {
                    let name = self.name(unit, child)?.unwrap_or_default();
                    let ty = type_ref(unit, child)?
                        .with_context(|| format!("member {name} of {} has no type", die.name))?;
                    die.members.push((name, ty));
                }
                gimli::DW_TAG_subrange_type => {
                    die.count = child
                        .attr_value(gimli::DW_AT_count)?
                        .and_then(|v| v.udata_value())
                        .or(die.count);
                }
                _ => {}
            }
        }
        Ok(die)
    }

    fn name(
        &self,
        unit: &gimli::Unit<Reader<'a>>,
        entry: &gimli::DebuggingInformationEntry<'_, '_, Reader<'a>>,
    ) -> anyhow::Result<Option<String>> {
        Ok(match entry.attr_value(gimli::DW_AT_name)? {
            Some(name) => Some(
                self.dwarf
                    .attr_string(unit, name)?
                    .to_string_lossy()
                    .into_owned(),
            ),
            None => None,
        })
    }

    /// Go's ABIInternal: a struct's fields (strings, slices and interfaces
    /// are structs in Go's DWARF) are assigned one by one, integers and
    /// pointers to integer registers, floats to float registers; an array
    /// of more than one element is never in registers.
    fn layout(&self, ty: usize, depth: u32) -> anyhow::Result<Layout> {
        if depth > MAX_TYPE_DEPTH {
            bail!("type at {ty:#x} nests deeper than {MAX_TYPE_DEPTH}");
        }
        let die = self.die(ty)?;
        let one = |ints, floats| Layout {
            ints,
            floats,
            assignable: true,
        };
        Ok(match die.tag {
            gimli::DW_TAG_base_type => match die.encoding {
                _ if die.byte_size == 0 => one(0, 0),
                Some(gimli::DW_ATE_float) => one(0, 1),
                Some(gimli::DW_ATE_complex_float) => one(0, 2),
                _ => one(1, 0),
            },
            gimli::DW_TAG_pointer_type | gimli::DW_TAG_subroutine_type => one(1, 0),
            gimli::DW_TAG_typedef => self.layout(
                die.ty
                    .with_context(|| format!("typedef {} has no type", die.name))?,
                depth + 1,
            )?,
            gimli::DW_TAG_structure_type => {
                let mut sum = one(0, 0);
                for (_, member) in &die.members {
                    let layout = self.layout(*member, depth + 1)?;
                    sum.ints += layout.ints;
                    sum.floats += layout.floats;
                    sum.assignable &= layout.assignable;
                }
                sum
            }
            gimli::DW_TAG_array_type => match die.count {
                Some(0) => one(0, 0),
                Some(1) => self.layout(
                    die.ty
                        .with_context(|| format!("array {} has no element type", die.name))?,
                    depth + 1,
                )?,
                _ => Layout::default(),
            },
            tag => bail!("type {} at {ty:#x}: unexpected DWARF tag {tag}", die.name),
        })
    }

    /// Integer words before member `path` inside a value of type `ty`.
    fn word_of_member(&self, ty: usize, path: &[&str], depth: u32) -> anyhow::Result<u32> {
        let Some((first, rest)) = path.split_first() else {
            return Ok(0);
        };
        if depth > MAX_TYPE_DEPTH {
            bail!("type at {ty:#x} nests deeper than {MAX_TYPE_DEPTH}");
        }
        let die = self.die(ty)?;
        match die.tag {
            gimli::DW_TAG_typedef => self.word_of_member(
                die.ty
                    .with_context(|| format!("typedef {} has no type", die.name))?,
                path,
                depth + 1,
            ),
            gimli::DW_TAG_structure_type => {
                let mut before = 0;
                for (name, member) in &die.members {
                    if name == first {
                        return Ok(before + self.word_of_member(*member, rest, depth + 1)?);
                    }
                    before += self.layout(*member, depth + 1)?.ints;
                }
                bail!("{} has no member {first}", die.name)
            }
            _ => bail!("{} is not a struct: no member {first}", die.name),
        }
    }
}

/// The global offset of an entry's `DW_AT_type`.
fn type_ref(
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<'_, '_, Reader<'_>>,
) -> anyhow::Result<Option<usize>> {
    Ok(match entry.attr_value(gimli::DW_AT_type)? {
        Some(AttributeValue::UnitRef(offset)) => offset
            .to_debug_info_offset(&unit.header)
            .map(|offset| offset.0),
        Some(AttributeValue::DebugInfoRef(offset)) => Some(offset.0),
        _ => None,
    })
}

/// [`arg_words`] of the unstripped Go binary at `binary`.
pub fn arg_words_of<'w>(
    binary: &Path,
    words: &'w [ArgWord],
) -> anyhow::Result<Vec<(&'w ArgWord, Result<u64, String>)>> {
    with_dwarf(binary, |dwarf| arg_words(dwarf, words))
}

/// Calls `read` with the DWARF of the ELF file at `binary` (for the table
/// generator's readers; the agent never reads DWARF).
pub fn with_dwarf<T>(
    binary: &Path,
    read: impl FnOnce(&gimli::Dwarf<Reader<'_>>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let file = object::File::parse(&*bytes)?;
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> anyhow::Result<Cow<'_, [u8]>> {
        Ok(match file.section_by_name(id.name()) {
            Some(section) => section.uncompressed_data()?,
            None => Cow::Borrowed(&[]),
        })
    };
    let sections = gimli::DwarfSections::load(load)?;
    let dwarf = sections.borrow(|section| EndianSlice::new(section, endian));
    read(&dwarf)
}

/// The word each of `words` reads in the binary whose DWARF is `dwarf`;
/// an `Err` names what was not found.
pub fn arg_words<'w>(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    words: &'w [ArgWord],
) -> anyhow::Result<Vec<(&'w ArgWord, Result<u64, String>)>> {
    let mut units = Vec::new();
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        let start = header
            .offset()
            .as_debug_info_offset()
            .context("a type unit in .debug_info")?
            .0;
        units.push((start, dwarf.unit(header)?));
    }
    let types = Types { dwarf, units };

    // Every probed function's formal parameters, in order. An inlinable
    // function's name and parameters are on its abstract entry.
    let mut functions: HashMap<&str, Vec<Formal>> = HashMap::new();
    for (_, unit) in &types.units {
        let mut entries = unit.entries();
        while let Some((_, entry)) = entries.next_dfs()? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Some(name) = types.name(unit, entry)? else {
                continue;
            };
            let Some(word) = words.iter().find(|w| w.function == name) else {
                continue;
            };
            if functions.contains_key(word.function) {
                continue;
            }
            let mut tree = unit.entries_tree(Some(entry.offset()))?;
            let root = tree.root()?;
            let mut children = root.children();
            let mut formals = Vec::new();
            while let Some(child) = children.next()? {
                let child = child.entry();
                if child.tag() != gimli::DW_TAG_formal_parameter {
                    continue;
                }
                formals.push(Formal {
                    name: types.name(unit, child)?.unwrap_or_default(),
                    ty: type_ref(unit, child)?
                        .with_context(|| format!("a parameter of {name} has no type"))?,
                    result: matches!(
                        child.attr_value(gimli::DW_AT_variable_parameter)?,
                        Some(AttributeValue::Flag(true))
                    ),
                });
            }
            functions.insert(word.function, formals);
        }
    }

    words
        .iter()
        .map(|word| {
            let found = match functions.get(word.function) {
                None => Err(format!("{} not in DWARF", word.function)),
                Some(formals) => locate(&types, formals, word)
                    .map_err(|err| format!("{}: {err:#}", word.function)),
            };
            Ok((word, found))
        })
        .collect()
}

/// Assigns registers to the parameters, then separately to the results, as
/// the ABI does, and finds `word`'s.
fn locate(types: &Types<'_>, formals: &[Formal], word: &ArgWord) -> anyhow::Result<u64> {
    let (results, value) = match word.value {
        Value::Param(name) => (
            false,
            formals
                .iter()
                .filter(|f| !f.result)
                .position(|f| f.name == name),
        ),
        Value::Result(index) => (
            true,
            (index < formals.iter().filter(|f| f.result).count()).then_some(index),
        ),
    };
    let index = value.with_context(|| match word.value {
        Value::Param(name) => format!("no parameter {name}"),
        Value::Result(index) => format!("no result {index}"),
    })?;
    let (mut ints, mut floats) = (0, 0);
    for (position, formal) in formals.iter().filter(|f| f.result == results).enumerate() {
        let layout = types.layout(formal.ty, 0)?;
        let fits = layout.assignable
            && ints + layout.ints <= INT_REGISTERS
            && floats + layout.floats <= FLOAT_REGISTERS;
        if position == index {
            if !fits {
                bail!("{} is passed on the stack", formal.name);
            }
            let word = ints + types.word_of_member(formal.ty, word.path, 0)?;
            return Ok(u64::from(word));
        }
        if fits {
            ints += layout.ints;
            floats += layout.floats;
        }
    }
    bail!("{} of {} values", index + 1, formals.len())
}
