//! The fields of an encoded protobuf message, borrowed from its bytes.
//!
//! For a look at a few fields deep inside a large message (when a Pod in an
//! etcd write was created) without decoding the rest: prost decodes whole
//! messages, copying every bytes field it keeps on the way. The wire format
//! is prost's (`prost::encoding`); only the walk is here.

use prost::{
    bytes::Buf as _,
    encoding::{WireType, decode_key, decode_varint},
};

/// One field's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payload<'a> {
    /// A varint (integers, enums, bools).
    Varint(u64),
    /// A length-delimited field (bytes, strings, embedded messages, packed
    /// repeated fields).
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit field.
    Fixed,
}

/// The fields of `message` in wire order, each with its tag; `None` from
/// the first field that does not parse on (groups, which proto3 never
/// writes, count as not parsing).
pub(crate) fn fields(mut message: &[u8]) -> impl Iterator<Item = Option<(u32, Payload<'_>)>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || message.is_empty() {
            return None;
        }
        let field = next_field(&mut message);
        failed = field.is_none();
        Some(field)
    })
}

fn next_field<'a>(message: &mut &'a [u8]) -> Option<(u32, Payload<'a>)> {
    let (tag, wire_type) = decode_key(message).ok()?;
    let payload = match wire_type {
        WireType::Varint => Payload::Varint(decode_varint(message).ok()?),
        WireType::LengthDelimited => {
            let len = usize::try_from(decode_varint(message).ok()?).ok()?;
            let bytes = message.get(..len)?;
            *message = &message[len..];
            Payload::Bytes(bytes)
        }
        WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
            let len = if wire_type == WireType::SixtyFourBit {
                8
            } else {
                4
            };
            if message.remaining() < len {
                return None;
            }
            message.advance(len);
            Payload::Fixed
        }
        WireType::StartGroup | WireType::EndGroup => return None,
    };
    Some((tag, payload))
}

/// The last occurrence of length-delimited field `tag` (protobuf's rule for
/// a singular field seen twice), `None` when absent or when the message does
/// not parse.
pub(crate) fn bytes_field(message: &[u8], tag: u32) -> Option<&[u8]> {
    last_field(message, tag, |payload| match payload {
        Payload::Bytes(bytes) => Some(bytes),
        Payload::Varint(_) | Payload::Fixed => None,
    })
}

/// The last occurrence of varint field `tag`, as [`bytes_field`].
pub(crate) fn varint_field(message: &[u8], tag: u32) -> Option<u64> {
    last_field(message, tag, |payload| match payload {
        Payload::Varint(value) => Some(value),
        Payload::Bytes(_) | Payload::Fixed => None,
    })
}

fn last_field<'a, T>(
    message: &'a [u8],
    tag: u32,
    pick: impl Fn(Payload<'a>) -> Option<T>,
) -> Option<T> {
    let mut found = None;
    for field in fields(message) {
        let (field_tag, payload) = field?;
        if field_tag == tag {
            found = pick(payload).or(found);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::pb::etcdserverpb::{PutRequest, RangeRequest};

    #[test]
    fn fields_are_borrowed_in_wire_order() {
        let put = PutRequest {
            key: b"/registry/pods/default/web".to_vec(),
            value: b"k8s\0...".to_vec(),
            lease: 7,
            ..PutRequest::default()
        }
        .encode_to_vec();
        let seen: Option<Vec<(u32, Payload<'_>)>> = fields(&put).collect();
        assert_eq!(
            seen,
            Some(vec![
                (1, Payload::Bytes(b"/registry/pods/default/web")),
                (2, Payload::Bytes(b"k8s\0...")),
                (3, Payload::Varint(7)),
            ])
        );
        assert_eq!(bytes_field(&put, 2), Some(&b"k8s\0..."[..]));
        assert_eq!(varint_field(&put, 3), Some(7));
        assert_eq!(varint_field(&put, 4), None);
    }

    #[test]
    fn a_cut_or_malformed_message_is_refused_not_misread() {
        let range = RangeRequest {
            key: b"/registry/pods/".to_vec(),
            range_end: b"/registry/pods0".to_vec(),
            limit: 500,
            ..RangeRequest::default()
        }
        .encode_to_vec();
        // Cut inside the key: the field is refused, never read shorter.
        for cut in 1..2 + b"/registry/pods/".len() {
            assert_eq!(fields(&range[..cut]).collect::<Vec<_>>(), vec![None]);
        }
        // Cut inside the last varint.
        assert_eq!(bytes_field(&range[..range.len() - 1], 2), None);
        // A group (wire type 3) does not parse.
        assert_eq!(fields(&[0x0b, 0x00]).collect::<Vec<_>>(), vec![None]);
    }
}
