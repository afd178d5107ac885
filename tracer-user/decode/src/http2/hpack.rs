//! HPACK header blocks (RFC 7541) that keep decoding when the dynamic table
//! is partly unknown.
//!
//! In: complete header blocks of one direction, in order. Out: a
//! [`HeaderList`] per block. The table state lives in [`HeaderBlockDecoder`].
//!
//! Huffman coding, the static table and the dynamic table with its eviction
//! are `loona-hpack`'s. This module only splits a block into its field
//! representations (RFC 7541 §6, a matter of reading prefix integers and
//! string lengths) so that each one is decoded on its own: a representation
//! that refers to a dynamic entry inserted before capture started fails alone
//! and is reported as unresolved, and the others still decode.
//!
//! Keeping later indices right: an insertion (literal with incremental
//! indexing) whose *name* refers to an unknown entry is re-encoded with a
//! placeholder name so that the entry still takes its slot in the table and
//! later indices keep pointing where the sender's do. The placeholder's size
//! differs from the real name's, so eviction can happen a little early or late
//! compared with the sender; a field decoded wrongly that way would still be a
//! real field of the connection, and the risk is stated in the README.

use loona_hpack::decoder::DecoderError;

/// Name put in the table in place of a name we could not resolve. NUL cannot
/// occur in an HTTP header name, so it never collides with a real one.
const UNKNOWN_NAME: &[u8] = b"\0podtrace-unknown-name";
/// Name of a table entry loaded from a copy that held only its size; the
/// value is NUL padding to the entry's real size, so eviction stays in step.
const WITHHELD_NAME: &[u8] = b"\0";
/// RFC 7541 §4.1: what an entry costs beyond its name and value.
const ENTRY_OVERHEAD: usize = 32;

/// A field of a header block that could not be fully recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnresolvedField {
    /// An indexed field whose dynamic-table entry predates the capture.
    Indexed {
        /// HPACK index (62 and above are dynamic).
        index: usize,
    },
    /// A literal field whose name refers to an unknown entry; the value is known.
    NameUnknown {
        /// The value, lossily decoded as UTF-8.
        value: String,
    },
    /// A field whose dynamic entry came from a [`TableCopy`] that held only
    /// its size (a name podtrace does not keep, such as a credential).
    Withheld,
}

/// A copy of a peer's HPACK dynamic table (from the process's memory),
/// oldest entry first, taken where its state is known relative to the
/// connection's bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableCopy {
    /// The table's size limit.
    pub max_size: usize,
    /// The entries, oldest first.
    pub entries: Vec<TableEntry>,
}

/// One entry of a [`TableCopy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    /// Name and value; `None` when only the size was copied.
    pub field: Option<(Vec<u8>, Vec<u8>)>,
    /// RFC 7541 size: name and value lengths plus 32.
    pub size: usize,
}

impl TableCopy {
    /// The table as it was `newest` insertions ago: without its `newest`
    /// newest entries. `None` when it holds fewer (what they evicted is
    /// gone from the copy).
    pub fn without_newest(&self, newest: usize) -> Option<TableCopy> {
        let keep = self.entries.len().checked_sub(newest)?;
        Some(TableCopy {
            max_size: self.max_size,
            entries: self.entries.get(..keep)?.to_vec(),
        })
    }
}

/// How many entries decoding `block` inserts into the table (its literals
/// with incremental indexing); `None` when it resizes the table or does not
/// parse.
pub fn insertions(block: &[u8]) -> Option<usize> {
    let mut at = 0;
    let mut count = 0;
    while at < block.len() {
        let span = next_representation(block.get(at..)?)?;
        match span.kind {
            Representation::SizeUpdate => return None,
            Representation::LiteralIncremental => count += 1,
            _ => {}
        }
        at += span.len;
    }
    Some(count)
}

/// A [`TableCopy`] that cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableLoadError {
    /// An entry's size is below the 32 bytes every entry costs, or the
    /// entries exceed the table's limit.
    #[error("table copy is inconsistent: {0}")]
    Inconsistent(String),
    /// The copy was taken while a header block was part-way through, so its
    /// place in the bytes is not known.
    #[error("a header block was part-way through where the copy was taken")]
    MidBlock,
    /// The bytes of this direction are not being read frame by frame yet.
    #[error("the connection's frames are not in step yet")]
    Unsynchronised,
}

/// A decoded header block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderList {
    /// Fields recovered, in block order, names lowercase as on the wire.
    pub fields: Vec<(String, String)>,
    /// Fields that referred to dynamic entries we never saw.
    pub unresolved: Vec<UnresolvedField>,
    /// Names of fields dropped because they carry credentials.
    pub redacted: Vec<String>,
}

impl HeaderList {
    /// The first value of `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A header block that could not be decoded past some point. The
/// connection's table state is then unknown, so the decoder starts over with
/// an empty table: later blocks still decode, with more unresolved fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "header block corrupt at byte {offset}: {reason}; fields before it are kept, the dynamic table is reset"
)]
pub struct HeaderBlockError {
    /// Offset in the block of the representation that failed.
    pub offset: usize,
    /// What was wrong.
    pub reason: String,
    /// The fields decoded before the failure.
    pub partial: HeaderList,
}

impl HeaderBlockError {
    /// Always true: a bad block costs its own fields, not the connection.
    pub fn can_continue(&self) -> bool {
        true
    }
}

/// Header names whose values are credentials and never leave the decoder
/// (HTTP/1.1 drops the same ones).
pub(crate) const CREDENTIAL_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// The HPACK state of one direction of a connection.
pub struct HeaderBlockDecoder {
    decoder: loona_hpack::Decoder<'static>,
    /// Times the table was forgotten (a corrupt block, lost bytes).
    resets: u64,
    /// Header blocks decoded.
    blocks: u64,
}

impl std::fmt::Debug for HeaderBlockDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderBlockDecoder").finish_non_exhaustive()
    }
}

impl Default for HeaderBlockDecoder {
    fn default() -> Self {
        Self {
            decoder: loona_hpack::Decoder::new(),
            resets: 0,
            blocks: 0,
        }
    }
}

/// Kinds of field representation (RFC 7541 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Representation {
    Indexed,
    LiteralIncremental,
    LiteralNotIndexed,
    LiteralNeverIndexed,
    SizeUpdate,
}

impl Representation {
    fn of(first: u8) -> (Self, u8) {
        if first & 0x80 != 0 {
            (Self::Indexed, 7)
        } else if first & 0x40 != 0 {
            (Self::LiteralIncremental, 6)
        } else if first & 0x20 != 0 {
            (Self::SizeUpdate, 5)
        } else if first & 0x10 != 0 {
            (Self::LiteralNeverIndexed, 4)
        } else {
            (Self::LiteralNotIndexed, 4)
        }
    }
}

/// Reads an HPACK prefix integer: (value, bytes used).
fn prefix_integer(buf: &[u8], prefix_bits: u8) -> Option<(usize, usize)> {
    let mask = (1u16 << prefix_bits) as u8 - 1;
    let first = *buf.first()? & mask;
    if first < mask {
        return Some((usize::from(first), 1));
    }
    let mut value = usize::from(mask);
    // Five continuation bytes exceed 2^28, far beyond any real header size.
    for (i, &b) in buf.iter().enumerate().skip(1).take(5) {
        value += usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Length in bytes of the string literal at the start of `buf`.
fn string_len(buf: &[u8]) -> Option<usize> {
    let (len, used) = prefix_integer(buf, 7)?;
    let total = used.checked_add(len)?;
    (total <= buf.len()).then_some(total)
}

/// One representation's boundaries.
struct Span {
    kind: Representation,
    len: usize,
    /// For literals: offset of the name string (index 0) or the value's.
    name_at: usize,
    /// For literals: offset of the value string (after the name or name index).
    value_at: usize,
    /// For literals with an indexed name, and for indexed fields: the index.
    index: usize,
}

fn next_representation(buf: &[u8]) -> Option<Span> {
    let (kind, prefix_bits) = Representation::of(*buf.first()?);
    let (index, used) = prefix_integer(buf, prefix_bits)?;
    match kind {
        Representation::Indexed | Representation::SizeUpdate => Some(Span {
            kind,
            len: used,
            name_at: used,
            value_at: used,
            index,
        }),
        _ => {
            let value_at = if index == 0 {
                used + string_len(&buf[used..])?
            } else {
                used
            };
            let len = value_at + string_len(&buf[value_at..])?;
            Some(Span {
                kind,
                len,
                name_at: used,
                value_at,
                index,
            })
        }
    }
}

impl HeaderBlockDecoder {
    /// Forgets the dynamic table: every dynamic reference from now on that
    /// points at an entry inserted before this call is unresolved.
    pub fn reset(&mut self) {
        self.decoder = loona_hpack::Decoder::new();
        self.resets += 1;
    }

    /// How many times the table was forgotten: from then on, entries the
    /// peer inserted before are unknown again.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// How many header blocks it was given.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Replaces the table with `copy`. Each entry is fed to the decoder as
    /// the literal-with-incremental-indexing representation that would have
    /// inserted it, oldest first, so that indices and eviction follow the
    /// peer's from here on.
    pub fn load(&mut self, copy: &TableCopy) -> Result<(), TableLoadError> {
        let total: usize = copy.entries.iter().map(|entry| entry.size).sum();
        if total > copy.max_size {
            return Err(TableLoadError::Inconsistent(format!(
                "{total} bytes of entries in a table of {}",
                copy.max_size
            )));
        }
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_table_size(copy.max_size);
        for entry in &copy.entries {
            let padding;
            let (name, value) = match &entry.field {
                Some((name, value)) if name.len() + value.len() + ENTRY_OVERHEAD == entry.size => {
                    (name.as_slice(), value.as_slice())
                }
                Some(_) => {
                    return Err(TableLoadError::Inconsistent(
                        "an entry's size does not match its name and value".into(),
                    ));
                }
                None => {
                    let Some(len) = entry.size.checked_sub(ENTRY_OVERHEAD + WITHHELD_NAME.len())
                    else {
                        return Err(TableLoadError::Inconsistent(format!(
                            "entry of {} bytes",
                            entry.size
                        )));
                    };
                    padding = vec![0; len];
                    (WITHHELD_NAME, padding.as_slice())
                }
            };
            let mut rep = vec![0x40];
            encode_string(&mut rep, name);
            encode_string(&mut rep, value);
            decoder
                .decode_with_cb(&rep, |_, _| {})
                .map_err(|error| TableLoadError::Inconsistent(format!("{error:?}")))?;
        }
        self.decoder = decoder;
        Ok(())
    }

    /// Decodes one complete header block (HEADERS plus CONTINUATION fragments).
    pub fn decode(&mut self, block: &[u8]) -> Result<HeaderList, HeaderBlockError> {
        self.blocks += 1;
        let mut list = HeaderList::default();
        let mut at = 0;
        // A size update is only valid at the start of a block and the decoder
        // rejects a block that ends with one, so it travels with the next field.
        let mut pending_size_update: Option<(usize, usize)> = None;
        while at < block.len() {
            let Some(span) = next_representation(&block[at..]) else {
                return Err(self.fail(at, "representation runs past the end of the block", list));
            };
            let rep = &block[at..at + span.len];
            if span.kind == Representation::SizeUpdate {
                pending_size_update.get_or_insert((at, 0)).1 += span.len;
                at += span.len;
                continue;
            }
            let unhuffed = without_huffman(rep, &span);
            let plain = unhuffed.as_deref().unwrap_or(rep);
            // Only a size update, rare, needs the bytes put together.
            let joined;
            let input = match pending_size_update.take() {
                Some((start, len)) => {
                    joined = [&block[start..start + len], plain].concat();
                    joined.as_slice()
                }
                None => plain,
            };
            match self.decode_one(input, &mut list) {
                Ok(()) => {}
                Err(DecoderError::HeaderIndexOutOfBounds) => {
                    self.recover_unknown_index(&span, rep, &mut list);
                }
                Err(error) => return Err(self.fail(at, &error.to_string(), list)),
            }
            at += span.len;
        }
        Ok(list)
    }

    /// Decodes `block` again (a block already counted by [`Self::decode`]):
    /// the fields it yields, a failed block's partial ones.
    pub fn redecode(&mut self, block: &[u8]) -> HeaderList {
        let list = self.decode(block).unwrap_or_else(|error| error.partial);
        self.blocks -= 1;
        list
    }

    fn decode_one(&mut self, input: &[u8], list: &mut HeaderList) -> Result<(), DecoderError> {
        self.decoder
            .decode_with_cb(input, |name, value| push_field(list, &name, &value))
    }

    /// A representation referred to an index beyond the table we know.
    fn recover_unknown_index(&mut self, span: &Span, rep: &[u8], list: &mut HeaderList) {
        if span.kind == Representation::Indexed {
            list.unresolved
                .push(UnresolvedField::Indexed { index: span.index });
            return;
        }
        // Same representation kind, literal placeholder name, original value.
        let kind_bits = rep[0] & !((1u8 << prefix_bits(span.kind)) - 1);
        let mut input = vec![kind_bits, UNKNOWN_NAME.len() as u8];
        input.extend_from_slice(UNKNOWN_NAME);
        input.extend_from_slice(&rep[span.value_at..]);
        let mut recovered = HeaderList::default();
        if self.decode_one(&input, &mut recovered).is_ok() {
            list.unresolved.extend(recovered.unresolved);
        } else {
            list.unresolved
                .push(UnresolvedField::Indexed { index: span.index });
        }
    }

    fn fail(&mut self, offset: usize, reason: &str, partial: HeaderList) -> HeaderBlockError {
        self.reset();
        HeaderBlockError {
            offset,
            reason: reason.to_string(),
            partial,
        }
    }
}

fn prefix_bits(kind: Representation) -> u8 {
    match kind {
        Representation::Indexed => 7,
        Representation::LiteralIncremental => 6,
        Representation::SizeUpdate => 5,
        Representation::LiteralNeverIndexed | Representation::LiteralNotIndexed => 4,
    }
}

/// A literal representation with its Huffman-coded strings decoded, as the
/// same representation with plain strings; `None` when it has none, or one
/// does not decode (loona-hpack then reports the error as it would have).
/// loona-hpack's own Huffman decoder builds a table of hash maps for each
/// string: it was two thirds of the agent's HPACK time in a Pod start burst.
fn without_huffman(rep: &[u8], span: &Span) -> Option<Vec<u8>> {
    if matches!(
        span.kind,
        Representation::Indexed | Representation::SizeUpdate
    ) {
        return None;
    }
    let name = (span.index == 0).then_some(span.name_at..span.value_at);
    let strings = [name, Some(span.value_at..span.len)];
    let huffman = |at: usize| rep.get(at).is_some_and(|first| first & 0x80 != 0);
    if !strings.iter().flatten().any(|range| huffman(range.start)) {
        return None;
    }
    let mut out = Vec::with_capacity(2 * rep.len());
    out.extend_from_slice(rep.get(..span.name_at)?);
    for range in strings.into_iter().flatten() {
        let string = rep.get(range.clone())?;
        let (len, used) = prefix_integer(string, 7)?;
        let bytes = string.get(used..used.checked_add(len)?)?;
        if huffman(range.start) {
            let mut plain = Vec::with_capacity(2 * len);
            httlib_huffman::decode(bytes, &mut plain, httlib_huffman::DecoderSpeed::FourBits)
                .ok()?;
            encode_string(&mut out, &plain);
        } else {
            encode_string(&mut out, bytes);
        }
    }
    Some(out)
}

/// Appends an HPACK string literal (RFC 7541 §5.2, not Huffman-coded).
fn encode_string(out: &mut Vec<u8>, bytes: &[u8]) {
    // §5.1 integer with a 7-bit prefix.
    let mut len = bytes.len();
    if len < 0x7f {
        out.push(len as u8);
    } else {
        out.push(0x7f);
        len -= 0x7f;
        while len >= 0x80 {
            out.push((len % 0x80) as u8 | 0x80);
            len /= 0x80;
        }
        out.push(len as u8);
    }
    out.extend_from_slice(bytes);
}

fn push_field(list: &mut HeaderList, name: &[u8], value: &[u8]) {
    if name == WITHHELD_NAME {
        list.unresolved.push(UnresolvedField::Withheld);
        return;
    }
    let value = String::from_utf8_lossy(value).into_owned();
    if name == UNKNOWN_NAME {
        list.unresolved.push(UnresolvedField::NameUnknown { value });
        return;
    }
    let name = String::from_utf8_lossy(name).into_owned();
    if CREDENTIAL_HEADERS.contains(&name.as_str()) {
        list.redacted.push(name);
    } else {
        list.fields.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_dynamic_entry_unknown() {
        // Missed block: `user-agent: etcdctl` inserted (literal, incremental
        // indexing, static name 58). Seen block: `:method: POST` (static 3),
        // the missed entry (62), and a new literal `x-new: 1`.
        let seen = [
            0x83,
            0x80 | 62,
            0x00,
            0x05,
            b'x',
            b'-',
            b'n',
            b'e',
            b'w',
            0x01,
            b'1',
        ];
        let Ok(list) = HeaderBlockDecoder::default().decode(&seen) else {
            panic!("block rejected")
        };
        assert_eq!(list.get(":method"), Some("POST"));
        assert_eq!(list.get("x-new"), Some("1"));
        assert_eq!(
            list.unresolved,
            vec![UnresolvedField::Indexed { index: 62 }]
        );
    }

    #[test]
    fn unknown_name_insertion_keeps_later_indices_aligned() {
        // Block 1 (missed): inserts "x-a: 1". Block 2: inserts a field whose
        // name is the unknown entry 62, then one with a literal name.
        // Block 3: refers to both by index; the newest must be found at 62.
        let block2 = [
            0x40 | 62,
            0x01,
            b'2',
            0x40,
            0x03,
            b'x',
            b'-',
            b'b',
            0x01,
            b'3',
        ];
        let block3 = [0x80 | 62, 0x80 | 63];
        let mut decoder = HeaderBlockDecoder::default();
        let Ok(list2) = decoder.decode(&block2) else {
            panic!("block 2 rejected")
        };
        assert_eq!(list2.fields, vec![("x-b".to_string(), "3".to_string())]);
        assert_eq!(
            list2.unresolved,
            vec![UnresolvedField::NameUnknown { value: "2".into() }]
        );
        let Ok(list3) = decoder.decode(&block3) else {
            panic!("block 3 rejected")
        };
        assert_eq!(list3.fields, vec![("x-b".to_string(), "3".to_string())]);
        assert_eq!(
            list3.unresolved,
            vec![UnresolvedField::NameUnknown { value: "2".into() }]
        );
    }

    #[test]
    fn credentials_are_dropped() {
        // `authorization: Bearer abc` (static name 23, literal value), `:method: POST`.
        let mut block = vec![0x40 | 23, 10];
        block.extend_from_slice(b"Bearer abc");
        block.push(0x83);
        let Ok(list) = HeaderBlockDecoder::default().decode(&block) else {
            panic!("rejected")
        };
        assert_eq!(list.redacted, vec!["authorization".to_string()]);
        assert_eq!(
            list.fields,
            vec![(":method".to_string(), "POST".to_string())]
        );
    }

    /// RFC 7541 C.4: requests with Huffman-coded strings, through the
    /// dynamic table (a Huffman name and value in the third).
    #[test]
    fn huffman_coded_requests_decode_as_the_rfc_says() {
        let blocks: [&[u8]; 3] = [
            b"\x82\x86\x84\x41\x8c\xf1\xe3\xc2\xe5\xf2\x3a\x6b\xa0\xab\x90\xf4\xff",
            b"\x82\x86\x84\xbe\x58\x86\xa8\xeb\x10\x64\x9c\xbf",
            b"\x82\x87\x85\xbf\x40\x88\x25\xa8\x49\xe9\x5b\xa9\x7d\x7f\x89\x25\xa8\x49\xe9\x5b\xb8\xe8\xb4\xbf",
        ];
        let expected = [
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ][..],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ],
        ];
        let mut decoder = HeaderBlockDecoder::default();
        for (block, fields) in blocks.iter().zip(expected) {
            let Ok(list) = decoder.decode(block) else {
                panic!("rejected {block:02x?}")
            };
            let fields: Vec<(String, String)> = fields
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect();
            assert_eq!(list.fields, fields);
            assert!(list.unresolved.is_empty());
        }
    }

    /// A Huffman string that does not decode (padding of more than 7 bits)
    /// is refused as before, and no input makes the decoder panic.
    #[test]
    fn bad_huffman_strings_are_refused_and_noise_never_panics() {
        assert!(
            HeaderBlockDecoder::default()
                .decode(b"\x40\x81\xff\x01a")
                .is_err()
        );
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..5_000 {
            let len = (next() % 48) as usize;
            let block: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = HeaderBlockDecoder::default().decode(&block);
            // A literal with a new name, both strings Huffman-coded noise.
            let mut literal = vec![0x00];
            for _ in 0..2 {
                let len = (next() % 24) as usize;
                literal.push(0x80 | len as u8);
                literal.extend((0..len).map(|_| next() as u8));
            }
            let _ = HeaderBlockDecoder::default().decode(&literal);
        }
    }

    #[test]
    fn truncated_block_keeps_fields_before_the_cut() {
        let mut block = vec![0x83, 0x00, 6];
        block.extend_from_slice(b"x-long");
        block.push(10);
        block.extend_from_slice(b"0123456789");
        let Err(error) = HeaderBlockDecoder::default().decode(&block[..block.len() - 3]) else {
            panic!("accepted a cut block")
        };
        assert!(error.can_continue());
        assert_eq!(error.partial.get(":method"), Some("POST"));
    }
}
