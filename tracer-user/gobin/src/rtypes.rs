//! Struct field offsets from Go's runtime type descriptors: a binary and a
//! chain of `(struct, member)` in, the member's offset out — for binaries
//! whose release no DWARF-generated table row covers, stripped or not.
//!
//! Every type a Go program converts to an interface, reflects on or reaches
//! from such a type has a descriptor (`internal/abi.Type`) in the read-only
//! data between `moduledata.types` and `moduledata.etypes`, and `-s -w` keeps
//! them: the runtime needs them. A named struct's descriptor holds its name
//! (`v1.Pod`, as a name offset from `types`), its package path (in the
//! uncommon part) and each field's name, type and offset.
//!
//! A struct is found by its name: the encoded name is searched for in the
//! descriptors' region, then every 8-aligned descriptor whose `Str` is that
//! name's offset is checked for kind, flags and package path. A chain's
//! later links are the member types themselves, each checked to be the
//! struct the chain names. Layouts (Go 1.18–1.27, `internal/abi/type.go`):
//!
//! - `Type`: Size_ 0, PtrBytes 8, Hash 16, TFlag 20, Align_ 21,
//!   FieldAlign_ 22, Kind_ 23, Equal 24, GCData 32, Str 40 (int32),
//!   PtrToThis 44; 48 bytes.
//! - `StructType`: Type, PkgPath Name (a pointer), Fields []StructField; the
//!   `UncommonType` of a named one follows at 80: PkgPath NameOff first.
//! - `StructField`: Name (a pointer to an encoded name), Typ *Type,
//!   Offset uintptr — before Go 1.19 `offset << 1 | embedded`.
//! - `PtrType`: Type, Elem *Type.
//! - An encoded name: one flag byte, a varint length, the bytes.

use memchr::memmem;

use crate::{
    elf::{ElfLayout, read_u32, read_u64},
    error::{GoBinError, Result},
    offsets::GoRelease,
};

/// `sizeof(abi.Type)`.
const TYPE_SIZE: u64 = 48;
const TFLAG_FIELD: u64 = 20;
const KIND_FIELD: u64 = 23;
const STR_FIELD: u64 = 40;
/// The kind in `Kind_` (Go ≤ 1.25 keeps flags in its top bits).
const KIND_MASK: u8 = 0x1f;
const KIND_POINTER: u8 = 22;
const KIND_STRUCT: u8 = 25;
const TFLAG_UNCOMMON: u8 = 1 << 0;
const TFLAG_EXTRA_STAR: u8 = 1 << 1;
const TFLAG_NAMED: u8 = 1 << 2;
/// `StructType.Fields`, after the embedded Type and `PkgPath Name`.
const STRUCT_FIELDS: u64 = TYPE_SIZE + 8;
/// `sizeof(StructType)`: where a named struct's `UncommonType` starts.
const STRUCT_TYPE_SIZE: u64 = STRUCT_FIELDS + 24;
const STRUCT_FIELD_SIZE: u64 = 24;
/// `PtrType.Elem`.
const POINTER_ELEM: u64 = TYPE_SIZE;
/// More fields than any struct podtrace reads has: a larger count is not a
/// struct descriptor.
const MAX_FIELDS: u64 = 1 << 12;
/// Longest encoded name read (package paths, field names).
const MAX_NAME: usize = 1 << 10;
/// A descriptor region larger than this is not one.
const MAX_TYPES_BYTES: u64 = 1 << 30;

/// The runtime type descriptors of one binary.
pub struct TypeDescriptors<'a> {
    layout: &'a ElfLayout,
    data: &'a [u8],
    /// `moduledata.types`: name and type offsets are relative to it.
    types: u64,
    /// The file bytes of `[types, etypes)`.
    region: &'a [u8],
    /// Go before 1.19 stores `offset << 1 | embedded` in a field's offset.
    offset_embed: bool,
}

impl std::fmt::Debug for TypeDescriptors<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypeDescriptors")
            .field("types", &format_args!("{:#x}", self.types))
            .field("len", &self.region.len())
            .field("offset_embed", &self.offset_embed)
            .finish_non_exhaustive()
    }
}

impl<'a> TypeDescriptors<'a> {
    /// The descriptors of the module whose moduledata is at `moduledata`.
    pub(crate) fn new(
        layout: &'a ElfLayout,
        data: &'a [u8],
        moduledata: u64,
        go: GoRelease,
    ) -> Result<Self> {
        let error = |reason: String| GoBinError::TypeDescriptors { reason };
        // moduledata (runtime/symtab.go): after pcHeader, six slices,
        // findfunctab, minpc, maxpc, text, etext and the noptrdata, data,
        // bss and noptrbss bounds come end, gcdata, gcbss, then types.
        // Go 1.20 added covctrs, ecovctrs before end; Go 1.27 added
        // typedesclen between types and etypes.
        let version = (go.major, go.minor);
        let types_field = if version >= (1, 20) { 296 } else { 280 };
        let etypes_field = types_field + if version >= (1, 27) { 16 } else { 8 };
        let word = |field: u64| {
            layout
                .read_pointer(data, moduledata + field)
                .ok_or_else(|| error(format!("moduledata at {moduledata:#x} is not readable")))
        };
        let (types, etypes) = (word(types_field)?, word(etypes_field)?);
        let len = etypes
            .checked_sub(types)
            .filter(|len| (1..MAX_TYPES_BYTES).contains(len));
        let region = len
            .and_then(|len| layout.bytes_at(data, types, len))
            .ok_or_else(|| {
                error(format!(
                    "moduledata at {moduledata:#x} gives types {types:#x}..{etypes:#x}, not a \
                     region of the file (Go {go})"
                ))
            })?;
        Ok(Self {
            layout,
            data,
            types,
            region,
            offset_embed: version < (1, 19),
        })
    }

    /// The sum of the offsets along `chain`, each `(qualified struct,
    /// member)`: `[("k8s.io/api/core/v1.Pod", "ObjectMeta"),
    /// ("k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta", "Name")]`. A link
    /// after the first must be the type of the member before it.
    pub fn field_offset(&self, chain: &[(&str, &str)]) -> Result<u64> {
        let error = |reason: String| GoBinError::TypeDescriptors { reason };
        let Some(&(first, _)) = chain.first() else {
            return Err(error("an empty chain of fields".into()));
        };
        let mut descriptor = self.named_struct(first)?;
        let mut total: u64 = 0;
        for (index, &(qualified, member)) in chain.iter().enumerate() {
            if index > 0 && !self.is_named(descriptor, qualified) {
                return Err(error(format!(
                    "the member before {qualified}.{member} is not a {qualified}"
                )));
            }
            let field = self
                .fields(descriptor)
                .ok_or_else(|| error(format!("the fields of {qualified} are not readable")))?
                .into_iter()
                .find(|field| field.name == member)
                .ok_or_else(|| error(format!("{qualified} has no field {member}")))?;
            total = total
                .checked_add(field.offset)
                .ok_or_else(|| error(format!("{qualified}.{member}: offset overflows")))?;
            descriptor = field.typ;
        }
        Ok(total)
    }

    /// The one struct descriptor named `qualified` (`net/http.Request`).
    fn named_struct(&self, qualified: &str) -> Result<u64> {
        let error = |reason: String| GoBinError::TypeDescriptors { reason };
        let (package, name) = split_qualified(qualified)
            .ok_or_else(|| error(format!("{qualified:?} is not package.Type")))?;
        let string = format!("{}.{name}", package.rsplit('/').next().unwrap_or(package));
        let name_offsets = [format!("*{string}"), string]
            .iter()
            .flat_map(|text| self.encoded_names(text))
            .collect::<Vec<_>>();
        let mut found = Vec::new();
        let skew = ((8 - self.types % 8) % 8) as usize;
        let last = self
            .region
            .len()
            .saturating_sub(STRUCT_TYPE_SIZE as usize + 4);
        for at in (skew..last).step_by(8) {
            let Some(str_off) = read_u32(self.region, at + STR_FIELD as usize) else {
                break;
            };
            if !name_offsets.contains(&str_off) {
                continue;
            }
            let descriptor = self.types + at as u64;
            if self.is_named(descriptor, qualified) {
                found.push(descriptor);
            }
        }
        match found[..] {
            [one] => Ok(one),
            [] => Err(error(format!(
                "no struct type {qualified} among the type descriptors"
            ))),
            _ => Err(error(format!(
                "{} struct types named {qualified} among the type descriptors",
                found.len()
            ))),
        }
    }

    /// The offsets from `types` of every encoded name whose text is `text`.
    fn encoded_names(&self, text: &str) -> Vec<u32> {
        let mut needle = varint(text.len());
        needle.extend_from_slice(text.as_bytes());
        memmem::find_iter(self.region, &needle)
            .filter(|&at| at > 0)
            .filter_map(|at| u32::try_from(at - 1).ok())
            .collect()
    }

    /// Whether the descriptor at `descriptor` is the named struct `qualified`.
    fn is_named(&self, descriptor: u64, qualified: &str) -> bool {
        let Some((package, name)) = split_qualified(qualified) else {
            return false;
        };
        let Some(header) = self
            .layout
            .bytes_at(self.data, descriptor, STRUCT_TYPE_SIZE + 4)
        else {
            return false;
        };
        let (tflag, kind) = (header[TFLAG_FIELD as usize], header[KIND_FIELD as usize]);
        if kind & KIND_MASK != KIND_STRUCT
            || tflag & (TFLAG_NAMED | TFLAG_UNCOMMON) != TFLAG_NAMED | TFLAG_UNCOMMON
        {
            return false;
        }
        let Some(string) = read_u32(header, STR_FIELD as usize).and_then(|off| self.name_at(off))
        else {
            return false;
        };
        let string = if tflag & TFLAG_EXTRA_STAR != 0 {
            string.strip_prefix('*')
        } else {
            Some(string)
        };
        let short = package.rsplit('/').next().unwrap_or(package);
        if string != Some(format!("{short}.{name}").as_str()) {
            return false;
        }
        read_u32(header, STRUCT_TYPE_SIZE as usize)
            .and_then(|off| self.name_at(off))
            .is_some_and(|path| path == package)
    }

    /// The fields of the struct descriptor at `descriptor`.
    fn fields(&self, descriptor: u64) -> Option<Vec<Field<'a>>> {
        let array = self
            .layout
            .read_pointer(self.data, descriptor + STRUCT_FIELDS)?;
        let count = read_u64(
            self.layout
                .bytes_at(self.data, descriptor + STRUCT_FIELDS + 8, 8)?,
            0,
        )?;
        if count > MAX_FIELDS {
            return None;
        }
        (0..count)
            .map(|index| {
                let at = array.checked_add(index * STRUCT_FIELD_SIZE)?;
                let name = self.layout.read_pointer(self.data, at)?;
                let typ = self.layout.read_pointer(self.data, at + 8)?;
                let raw = read_u64(self.layout.bytes_at(self.data, at + 16, 8)?, 0)?;
                Some(Field {
                    name: read_name(self.layout.bytes_from(self.data, name)?)?,
                    typ: self.struct_behind(typ),
                    offset: if self.offset_embed { raw >> 1 } else { raw },
                })
            })
            .collect()
    }

    /// `typ`, or its element when `typ` is a pointer: the link after a
    /// pointer member (`QueuedPodInfo.PodInfo`, a `*PodInfo`) is the struct
    /// it points to.
    fn struct_behind(&self, typ: u64) -> u64 {
        let kind = self
            .layout
            .bytes_at(self.data, typ + KIND_FIELD, 1)
            .map(|byte| byte[0] & KIND_MASK);
        if kind == Some(KIND_POINTER) {
            self.layout
                .read_pointer(self.data, typ + POINTER_ELEM)
                .unwrap_or(typ)
        } else {
            typ
        }
    }

    /// The text of the encoded name at `off` from `types`.
    fn name_at(&self, off: u32) -> Option<&'a str> {
        read_name(self.region.get(usize::try_from(off).ok()?..)?)
    }
}

/// One field of a struct descriptor.
struct Field<'a> {
    name: &'a str,
    /// The field's type, or the element of a pointer field.
    typ: u64,
    offset: u64,
}

/// `("k8s.io/api/core/v1", "Pod")` of `k8s.io/api/core/v1.Pod`.
fn split_qualified(qualified: &str) -> Option<(&str, &str)> {
    let last = qualified.rfind('/').map_or(0, |slash| slash + 1);
    let dot = last + qualified[last..].find('.')?;
    Some((&qualified[..dot], &qualified[dot + 1..]))
}

/// The text of an encoded name (flag byte, varint length, bytes).
fn read_name(bytes: &[u8]) -> Option<&str> {
    let mut len: usize = 0;
    let mut at = 1;
    for shift in (0..).step_by(7).take(3) {
        let byte = *bytes.get(at)?;
        at += 1;
        len |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    if len > MAX_NAME {
        return None;
    }
    std::str::from_utf8(bytes.get(at..at.checked_add(len)?)?).ok()
}

/// `len` as encoding/binary's unsigned varint.
fn varint(mut len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while len >= 0x80 {
        out.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_split_at_the_last_path_element() {
        assert_eq!(
            split_qualified("k8s.io/api/core/v1.Pod"),
            Some(("k8s.io/api/core/v1", "Pod"))
        );
        assert_eq!(
            split_qualified("net/http.Request"),
            Some(("net/http", "Request"))
        );
        assert_eq!(split_qualified("bytes.Reader"), Some(("bytes", "Reader")));
        assert_eq!(split_qualified("k8s.io/api/core/v1"), None);
    }

    #[test]
    fn names_decode_and_refuse_what_runs_past_the_bytes() {
        assert_eq!(
            read_name(&[1, 6, b'v', b'1', b'.', b'P', b'o', b'd']),
            Some("v1.Pod")
        );
        assert_eq!(read_name(&[1, 7, b'v', b'1']), None);
        assert_eq!(read_name(&[1]), None);
        assert_eq!(read_name(&[1, 0xff, 0xff, 0xff]), None);
        let long = "x".repeat(200);
        let mut encoded = vec![0];
        encoded.extend(varint(long.len()));
        encoded.extend(long.as_bytes());
        assert_eq!(varint(200), vec![0xc8, 0x01]);
        assert_eq!(read_name(&encoded), Some(long.as_str()));
    }
}
