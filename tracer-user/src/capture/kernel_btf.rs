//! Kernel struct offsets from the running kernel's BTF.
//!
//! The eBPF programs read `task_struct`, `signal_struct`, `mm_struct` and
//! `linux_binprm` fields at offsets computed here, because Rust eBPF objects
//! carry no CO-RE relocations for the loader to fix up.

use std::path::Path;

use btf_rs::{Btf, Type};
use tracer_common::config::KernelOffsets;

/// Where the kernel exposes its own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Failure to compute an offset.
#[derive(Debug, thiserror::Error)]
pub enum KernelBtfError {
    /// The BTF file is missing or unreadable (kernel without CONFIG_DEBUG_INFO_BTF).
    #[error(
        "cannot read kernel BTF at {path}: {source} (podtrace needs a kernel built with CONFIG_DEBUG_INFO_BTF)"
    )]
    Read {
        /// File that was read.
        path: String,
        /// Why.
        source: btf_rs::Error,
    },
    /// A struct podtrace reads is not described.
    #[error("kernel BTF has no struct {0}")]
    NoStruct(&'static str),
    /// A field podtrace reads is not in the struct (renamed or removed).
    #[error("kernel BTF has no field {field} in struct {strukt}")]
    NoField {
        /// Struct searched.
        strukt: &'static str,
        /// Field looked for.
        field: &'static str,
    },
    /// The field is a bitfield or not byte aligned, which podtrace cannot read.
    #[error("field {strukt}.{field} is not byte aligned")]
    Unaligned {
        /// Struct searched.
        strukt: &'static str,
        /// Field looked for.
        field: &'static str,
    },
    /// The BTF data is inconsistent.
    #[error("malformed kernel BTF: {0}")]
    Malformed(#[from] btf_rs::Error),
}

/// Reads every offset of [`KernelOffsets`] from the BTF file at `path`.
pub fn kernel_offsets(path: &Path) -> Result<KernelOffsets, KernelBtfError> {
    let btf = Btf::from_file(path).map_err(|source| KernelBtfError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let offset = |strukt, field| member_offset(&btf, strukt, field);
    Ok(KernelOffsets {
        task_pid: offset("task_struct", "pid")?,
        task_tgid: offset("task_struct", "tgid")?,
        task_real_parent: offset("task_struct", "real_parent")?,
        task_mm: offset("task_struct", "mm")?,
        task_exit_code: offset("task_struct", "exit_code")?,
        task_signal: offset("task_struct", "signal")?,
        signal_live: offset("signal_struct", "live")?,
        mm_arg_start: offset("mm_struct", "arg_start")?,
        mm_arg_end: offset("mm_struct", "arg_end")?,
        mm_env_start: offset("mm_struct", "env_start")?,
        mm_env_end: offset("mm_struct", "env_end")?,
        binprm_filename: offset("linux_binprm", "filename")?,
    })
}

/// Byte offset of `field` in `struct strukt`, looking through anonymous
/// structs and unions (mm_struct keeps most fields in one).
fn member_offset(
    btf: &Btf,
    strukt: &'static str,
    field: &'static str,
) -> Result<u32, KernelBtfError> {
    let definition = btf
        .resolve_types_by_name(strukt)
        .map_err(|_| KernelBtfError::NoStruct(strukt))?
        .into_iter()
        .find_map(|ty| match ty {
            // A forward declaration shares the name; only a definition has members.
            Type::Struct(s) if !s.members.is_empty() => Some(s),
            _ => None,
        })
        .ok_or(KernelBtfError::NoStruct(strukt))?;
    let found = find_member_bits(btf, &definition, field)?
        .ok_or(KernelBtfError::NoField { strukt, field })?;
    match found {
        FoundMember {
            bit_offset,
            bitfield: false,
        } if bit_offset % 8 == 0 => Ok(bit_offset / 8),
        _ => Err(KernelBtfError::Unaligned { strukt, field }),
    }
}

/// Where a member was found.
struct FoundMember {
    bit_offset: u32,
    bitfield: bool,
}

/// Finds `field` inside `container`, searching anonymous members.
fn find_member_bits(
    btf: &Btf,
    container: &btf_rs::Struct,
    field: &str,
) -> Result<Option<FoundMember>, btf_rs::Error> {
    for member in &container.members {
        let name = btf.resolve_name(member).unwrap_or_default();
        if name == field {
            let bitfield = member.bitfield_size().is_some_and(|size| size != 0);
            return Ok(Some(FoundMember {
                bit_offset: member.bit_offset(),
                bitfield,
            }));
        }
        if name.is_empty() {
            if let Type::Struct(inner) | Type::Union(inner) = btf.resolve_chained_type(member)? {
                if let Some(found) = find_member_bits(btf, &inner, field)? {
                    let bit_offset = member.bit_offset().saturating_add(found.bit_offset);
                    return Ok(Some(FoundMember {
                        bit_offset,
                        ..found
                    }));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs on the machine's own kernel: every offset resolves, and the ones
    /// that are the same on all x86-64 kernels podtrace targets are sane.
    #[test]
    fn running_kernel_offsets_resolve() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            eprintln!("skipped: {VMLINUX_BTF} is absent (kernel without BTF)");
            return;
        }
        let offsets = kernel_offsets(path).unwrap();
        assert!(offsets.task_tgid == offsets.task_pid + 4, "{offsets:?}");
        assert!(
            offsets.mm_arg_end == offsets.mm_arg_start + 8,
            "{offsets:?}"
        );
        assert!(
            offsets.mm_env_end == offsets.mm_env_start + 8,
            "{offsets:?}"
        );
        assert_eq!(offsets.binprm_filename % 8, 0, "{offsets:?}");
        assert!(offsets.task_real_parent > offsets.task_tgid, "{offsets:?}");
    }

    #[test]
    fn missing_btf_file_is_a_clear_error() {
        let err = kernel_offsets(Path::new("/nonexistent/vmlinux")).unwrap_err();
        assert!(err.to_string().contains("CONFIG_DEBUG_INFO_BTF"), "{err}");
    }
}
