//! TLS 1.3 application data of one direction of a connection, decrypted with
//! the traffic secret the capture read from the process (Go's
//! `crypto/tls.halfConn.trafficSecret`).
//!
//! Why decrypt here rather than take plaintext from a probe on every TLS
//! read and write: a uprobe hit costs the traced thread a trap whatever the
//! connection carries, and a control plane's connections carry thousands of
//! requests a second that are not about Pods. The secret is read once per
//! connection and direction; from then on the socket's ciphertext, copied by
//! the syscall programs that run anyway, is all the capture needs.
//!
//! RFC 8446: a record is `type(1) version(2) length(2)` and `length` bytes;
//! an application-data record's payload is AEAD-sealed `content ‖ type ‖
//! zeros` under a key and IV derived from the traffic secret
//! (HKDF-Expand-Label "key" and "iv", §7.3), with nonce = IV ⊕ the record's
//! sequence number and the header as additional data (§5.2–5.3). A
//! KeyUpdate (§4.6.3) moves the sender to the next secret ("traffic upd").
//!
//! The stream a [`TlsReader`] is fed may start at a record whose sequence
//! number is only approximately known (a secret read while another
//! goroutine was writing) and may lose bytes (a capture cut short): the
//! reader then searches, by trial decryption — the AEAD tag makes a wrong
//! guess certain to fail — for the record boundary and sequence number.

use ring::{aead, hkdf, hkdf::KeyType as _};

/// The largest record payload: 2^14 bytes of plaintext plus 256 of expansion (§5.2).
const MAX_CIPHERTEXT: usize = (1 << 14) + 256;
/// `type(1) legacy_version(2) length(2)`.
const HEADER: usize = 5;
/// The AEAD tag, the same 16 bytes for every TLS 1.3 suite.
const TAG: usize = 16;
/// Record types (§5.1).
const CHANGE_CIPHER_SPEC: u8 = 20;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
/// The handshake message type of a KeyUpdate (§4.6.3).
const KEY_UPDATE: u8 = 24;
/// How many sequence numbers past the expected one a search tries: a
/// secret read while another goroutine was writing can be a few records
/// behind, and a cut capture loses a few records at most.
const SEQ_WINDOW: u64 = 64;
/// Records in a row that do not open after which a reader is adrift: past
/// the records a new secret may find sealed before it (at most a write's,
/// within [`SEQ_WINDOW`]), a gap that the window cannot bridge (the capture
/// lost more records than it spans) leaves nothing to open ever again.
const ADRIFT_RECORDS: u32 = 2 * SEQ_WINDOW as u32;

/// The TLS 1.3 cipher suites (§B.4) Go implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherSuite {
    /// `TLS_AES_128_GCM_SHA256` (0x1301).
    Aes128GcmSha256,
    /// `TLS_AES_256_GCM_SHA384` (0x1302).
    Aes256GcmSha384,
    /// `TLS_CHACHA20_POLY1305_SHA256` (0x1303).
    Chacha20Poly1305Sha256,
}

impl CipherSuite {
    /// The suite with IANA id `id`, if it is a TLS 1.3 one.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            0x1301 => Some(Self::Aes128GcmSha256),
            0x1302 => Some(Self::Aes256GcmSha384),
            0x1303 => Some(Self::Chacha20Poly1305Sha256),
            _ => None,
        }
    }

    fn aead(self) -> &'static aead::Algorithm {
        match self {
            Self::Aes128GcmSha256 => &aead::AES_128_GCM,
            Self::Aes256GcmSha384 => &aead::AES_256_GCM,
            Self::Chacha20Poly1305Sha256 => &aead::CHACHA20_POLY1305,
        }
    }

    fn hkdf(self) -> hkdf::Algorithm {
        match self {
            Self::Aes256GcmSha384 => hkdf::HKDF_SHA384,
            _ => hkdf::HKDF_SHA256,
        }
    }
}

/// Why a traffic secret cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// Not a TLS 1.3 suite podtrace decrypts.
    #[error("cipher suite {0:#06x} is not a TLS 1.3 suite")]
    UnknownSuite(u16),
    /// The secret is not the suite's hash length.
    #[error("traffic secret of {got} bytes, the suite's hash has {want}")]
    SecretLength { got: usize, want: usize },
    /// ring refused the derived key (it never should: the lengths are the suite's).
    #[error("the AEAD refused the derived key")]
    Key,
}

/// The key and IV of one traffic secret, and the secret, for KeyUpdates.
pub struct TrafficKeys {
    suite: CipherSuite,
    secret: Vec<u8>,
    key: aead::LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
}

impl std::fmt::Debug for TrafficKeys {
    // Secrets never leave through Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrafficKeys")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

/// An output length for ring's HKDF.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label(secret, label, "", len) (§7.1).
fn expand_label(suite: CipherSuite, secret: &[u8], label: &[u8], out: &mut [u8]) {
    const PREFIX: &[u8] = b"tls13 ";
    let length = (out.len() as u16).to_be_bytes();
    let label_len = [(PREFIX.len() + label.len()) as u8];
    let info: [&[u8]; 5] = [&length, &label_len, PREFIX, label, &[0]];
    let prk = hkdf::Prk::new_less_safe(suite.hkdf(), secret);
    // Cannot fail: every length asked for is far below 255 hash lengths.
    if let Ok(okm) = prk.expand(&info, Len(out.len())) {
        let _ = okm.fill(out);
    }
}

impl TrafficKeys {
    /// The keys of a traffic secret of suite `suite_id`.
    pub fn new(suite_id: u16, secret: &[u8]) -> Result<Self, TlsError> {
        let suite = CipherSuite::from_id(suite_id).ok_or(TlsError::UnknownSuite(suite_id))?;
        let want = suite.hkdf().len();
        if secret.len() != want {
            return Err(TlsError::SecretLength {
                got: secret.len(),
                want,
            });
        }
        Self::derive(suite, secret.to_vec())
    }

    fn derive(suite: CipherSuite, secret: Vec<u8>) -> Result<Self, TlsError> {
        let algorithm = suite.aead();
        let mut key = [0; 32];
        let key = &mut key[..algorithm.key_len()];
        expand_label(suite, &secret, b"key", key);
        let mut iv = [0; aead::NONCE_LEN];
        expand_label(suite, &secret, b"iv", &mut iv);
        let key = aead::UnboundKey::new(algorithm, key).map_err(|_| TlsError::Key)?;
        Ok(Self {
            suite,
            secret,
            key: aead::LessSafeKey::new(key),
            iv,
        })
    }

    /// The keys after a KeyUpdate: application_traffic_secret_N+1 (§7.2).
    fn updated(&self) -> Result<Self, TlsError> {
        let mut next = vec![0; self.secret.len()];
        expand_label(self.suite, &self.secret, b"traffic upd", &mut next);
        Self::derive(self.suite, next)
    }

    /// Opens the record `header ‖ payload` sealed with sequence number
    /// `seq`, in place: the inner plaintext (`content ‖ type ‖ zeros`), or
    /// `None` if the tag does not verify (wrong key, wrong number, or not a
    /// record). `payload` is garbage after a failure.
    fn open<'a>(&self, seq: u64, header: &[u8], payload: &'a mut [u8]) -> Option<&'a mut [u8]> {
        let mut nonce = self.iv;
        for (byte, seq_byte) in nonce[aead::NONCE_LEN - 8..]
            .iter_mut()
            .zip(seq.to_be_bytes())
        {
            *byte ^= seq_byte;
        }
        self.key
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(header),
                payload,
            )
            .ok()
    }
}

/// Plaintext bytes of consecutive application-data records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plaintext {
    /// The records' content, in order.
    pub bytes: Vec<u8>,
    /// Bytes are missing after these (a record lost or undecryptable).
    pub gap_after: bool,
}

/// What one [`TlsReader::push`] opened: where each record's content lies
/// in its buffer (decrypted in place), and after which bytes were lost.
#[derive(Default)]
struct Pieces {
    /// Content ranges in the buffer, in order; `true`: a gap after it.
    spans: Vec<(std::ops::Range<usize>, bool)>,
}

impl Pieces {
    /// The content at `range` of the buffer is plaintext.
    fn deliver(&mut self, range: std::ops::Range<usize>) {
        if !range.is_empty() {
            self.spans.push((range, false));
        }
    }

    /// Bytes were lost after what was delivered so far.
    fn gap(&mut self) {
        match self.spans.last_mut() {
            Some((_, gap_after)) => *gap_after = true,
            None => self.spans.push((0..0, true)),
        }
    }

    /// Moves the contents to the front of `buf`, each after the one
    /// before (each lies at or after where it goes), and cuts them into
    /// one piece per stretch without a gap: a single piece is `buf` itself.
    fn into_plaintext(self, mut buf: Vec<u8>) -> Vec<Plaintext> {
        // (end in the moved contents, gap after) of each piece.
        let mut ends: Vec<(usize, bool)> = Vec::new();
        let mut write = 0;
        for (range, gap_after) in self.spans {
            let len = range.len();
            buf.copy_within(range, write);
            write += len;
            match ends.last_mut() {
                Some((end, false)) => *end = write,
                _ => ends.push((write, false)),
            }
            if let Some((_, gap)) = ends.last_mut() {
                *gap |= gap_after;
            }
        }
        buf.truncate(write);
        if let [(_, gap_after)] = ends.as_slice() {
            return vec![Plaintext {
                gap_after: *gap_after,
                bytes: buf,
            }];
        }
        let mut start = 0;
        ends.into_iter()
            .map(|(end, gap_after)| {
                let bytes = buf[start..end].to_vec();
                start = end;
                Plaintext { bytes, gap_after }
            })
            .collect()
    }
}

/// What a [`TlsReader`] has done, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlsStats {
    /// Records opened.
    pub records: u64,
    /// Of them, records of application data (not a handshake message or an alert).
    pub application_records: u64,
    /// Records skipped before the first one opened: sent before the secret
    /// was read, their plaintext came another way or not at all.
    pub skipped: u64,
    /// Records given up on: the expected sequence number does not open them.
    pub undecryptable: u64,
    /// Times the reader lost its place (bytes cut, a record undecryptable,
    /// bytes that are not a record) and searched for the next record.
    pub resyncs: u64,
    /// KeyUpdates followed.
    pub key_updates: u64,
}

/// Where the reader stands in the record stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// At a record boundary, whose sequence number is `seq` exactly.
    Exact,
    /// At a record boundary, whose sequence number is `seq` or a little more.
    Near,
    /// Somewhere in a record, number `seq` or a little more: search for
    /// the next record that opens.
    Lost,
}

/// One direction of a TLS 1.3 connection: ciphertext in, plaintext out.
#[derive(Debug)]
pub struct TlsReader {
    keys: TrafficKeys,
    /// The sequence number of the next record (exact or a lower bound, see `place`).
    seq: u64,
    place: Place,
    /// Bytes of a record not yet whole (at most one record).
    pending: Vec<u8>,
    /// Whole records since the last one that opened (see [`Self::adrift`]).
    failed_in_a_row: u32,
    stats: TlsStats,
}

impl TlsReader {
    /// A reader whose first bytes start the record with sequence number
    /// `seq`; if `exact` is false, that number is a lower bound.
    pub fn new(keys: TrafficKeys, seq: u64, exact: bool) -> Self {
        Self {
            keys,
            seq,
            place: if exact { Place::Exact } else { Place::Near },
            pending: Vec::new(),
            failed_in_a_row: 0,
            stats: TlsStats::default(),
        }
    }

    /// Whether so many records in a row did not open that none will: the
    /// secret was wrong for these bytes, or the capture lost more records
    /// than a search can skip. Only a secret read again brings it back.
    pub fn adrift(&self) -> bool {
        self.failed_in_a_row >= ADRIFT_RECORDS
    }

    /// What the reader has done so far.
    pub fn stats(&self) -> TlsStats {
        self.stats
    }

    /// Feeds the next captured bytes of this direction; `cut` says bytes
    /// were sent after them that the capture did not keep. Returns the
    /// plaintext of the application-data records they complete, one piece
    /// per stretch without a gap.
    ///
    /// The records are decrypted in place in `bytes`, which the plaintext
    /// is returned in: a direction's bytes are copied once, by the capture.
    pub fn push(&mut self, bytes: Vec<u8>, cut: bool) -> Vec<Plaintext> {
        let mut pieces = Pieces::default();
        let mut buf = if self.pending.is_empty() {
            bytes
        } else {
            let mut buf = std::mem::take(&mut self.pending);
            buf.extend_from_slice(&bytes);
            buf
        };
        let mut at = 0;
        while at < buf.len() {
            let consumed = match self.place {
                Place::Lost => self.search(&mut buf[at..], at, &mut pieces),
                Place::Exact | Place::Near => self.record(&mut buf[at..], at, &mut pieces),
            };
            match consumed {
                Some(consumed) => at += consumed,
                None => break,
            }
        }
        if cut {
            // The rest of this record and what followed are not in the capture.
            self.lose(&mut pieces);
        } else {
            self.pending = buf[at..].to_vec();
        }
        pieces.into_plaintext(buf)
    }

    /// The record at the start of `buf` (at `base` of the push's buffer),
    /// opened: bytes consumed, or `None` if the record is not whole yet.
    fn record(&mut self, buf: &mut [u8], base: usize, pieces: &mut Pieces) -> Option<usize> {
        let (kind, len) = record_header(buf)?;
        let Some(len) = len else {
            // Not a record header: the stream is not where it was thought.
            self.lose(pieces);
            return Some(0);
        };
        let total = HEADER + len;
        if buf.len() < total {
            return None;
        }
        if kind != APPLICATION_DATA {
            // Plaintext handshake records and change_cipher_spec: nothing for us.
            return Some(total);
        }
        let tries = if self.place == Place::Exact {
            1
        } else {
            SEQ_WINDOW
        };
        match self.open_any(&mut buf[..total], tries) {
            Some(content) => {
                self.place = Place::Exact;
                pieces.deliver(base + HEADER..base + HEADER + content);
            }
            None if self.place == Place::Exact => {
                self.failed_in_a_row += 1;
                // The number should have been right: bytes were lost unseen.
                self.stats.undecryptable += 1;
                self.place = Place::Near;
                pieces.gap();
            }
            // Before the first record that opens: sealed before the secret was read.
            None => {
                self.failed_in_a_row += 1;
                self.stats.skipped += 1;
            }
        }
        Some(total)
    }

    /// Searches `buf` for the start of a record that opens at a sequence
    /// number in the window: bytes consumed up to it and past it, or
    /// `None` to wait for more bytes.
    fn search(&mut self, buf: &mut [u8], base: usize, pieces: &mut Pieces) -> Option<usize> {
        let mut at = 0;
        while at + HEADER <= buf.len() {
            match record_header(&buf[at..]) {
                Some((APPLICATION_DATA, Some(len))) if at + HEADER + len <= buf.len() => {
                    let mut trial = buf[at..at + HEADER + len].to_vec();
                    let opened = self.open_any(&mut trial, SEQ_WINDOW);
                    if opened.is_none() {
                        self.failed_in_a_row += 1;
                    }
                    if let Some(content) = opened {
                        self.place = Place::Exact;
                        let content = at + HEADER..at + HEADER + content;
                        buf[content.clone()]
                            .copy_from_slice(&trial[HEADER..content.len() + HEADER]);
                        pieces.deliver(base + content.start..base + content.end);
                        return Some(at + HEADER + len);
                    }
                }
                // A candidate not yet whole: wait for the rest, from here.
                Some((APPLICATION_DATA, Some(_))) => return (at > 0).then_some(at),
                _ => {}
            }
            at += 1;
        }
        // Keep the last bytes: a header may start in them.
        let skipped = buf.len().saturating_sub(HEADER - 1);
        (skipped > 0).then_some(skipped)
    }

    /// Opens `record` (header and payload) at `self.seq` or, for `tries` >
    /// 1, at the first of the next numbers that works; on success moves
    /// past it and returns the length of the content now at
    /// `record[HEADER..]` — 0 for a record that is not application data
    /// after all (an alert, a handshake message).
    fn open_any(&mut self, record: &mut [u8], tries: u64) -> Option<usize> {
        let (header, payload) = record.split_at_mut(HEADER);
        if payload.len() <= TAG {
            return None;
        }
        let mut scratch = Vec::new();
        for offset in 0..tries {
            let seq = self.seq.checked_add(offset)?;
            let opened = if tries == 1 {
                self.keys
                    .open(seq, header, payload)
                    .map(|inner| inner.len())
            } else {
                // A failed open leaves garbage: try on a copy.
                scratch.clear();
                scratch.extend_from_slice(payload);
                let len = self
                    .keys
                    .open(seq, header, &mut scratch)
                    .map(|inner| inner.len());
                if let Some(len) = len {
                    payload[..len].copy_from_slice(&scratch[..len]);
                }
                len
            };
            if let Some(len) = opened {
                self.seq = seq + 1;
                self.failed_in_a_row = 0;
                self.stats.records += 1;
                return Some(self.inner_content(&payload[..len]));
            }
        }
        None
    }

    /// The content length of inner plaintext `content ‖ type ‖ zeros`, 0
    /// unless it is application data; follows a KeyUpdate.
    fn inner_content(&mut self, inner: &[u8]) -> usize {
        let Some(type_at) = inner.iter().rposition(|&byte| byte != 0) else {
            return 0;
        };
        match inner[type_at] {
            APPLICATION_DATA => {
                self.stats.application_records += 1;
                type_at
            }
            HANDSHAKE if contains_key_update(&inner[..type_at]) => {
                // Every later record of this direction uses the next
                // secret, numbered from zero.
                if let Ok(next) = self.keys.updated() {
                    self.keys = next;
                    self.seq = 0;
                    self.stats.key_updates += 1;
                }
                0
            }
            _ => 0,
        }
    }

    /// The reader no longer knows where the next record starts.
    fn lose(&mut self, pieces: &mut Pieces) {
        self.pending.clear();
        if self.place != Place::Lost {
            self.stats.resyncs += 1;
        }
        self.place = Place::Lost;
        pieces.gap();
    }
}

/// Whether `stream`, a direction's bytes from its first record on, holds a
/// record sealed with a secret: TLS 1.3 gives every encrypted record,
/// handshake messages included, the type of application data. Walks the
/// record headers; stops, saying no, at one that is not plausible.
pub fn seals_a_record(mut stream: &[u8]) -> bool {
    while let Some((kind, len)) = record_header(stream) {
        if kind == APPLICATION_DATA {
            return true;
        }
        let Some(len) = len else {
            return false;
        };
        stream = stream.get(HEADER + len..).unwrap_or_default();
    }
    false
}

/// The record header at the start of `buf`: its type and, if it is a
/// plausible TLS 1.2-framed record, its payload length; `None` if fewer than
/// five bytes.
fn record_header(buf: &[u8]) -> Option<(u8, Option<usize>)> {
    let header = buf.get(..HEADER)?;
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    let plausible = matches!(header[0], CHANGE_CIPHER_SPEC..=APPLICATION_DATA)
        && header[1] == 3
        && header[2] <= 4
        && len <= MAX_CIPHERTEXT;
    Some((header[0], plausible.then_some(len)))
}

/// Whether handshake messages `messages` (type(1) length(3) body) hold a KeyUpdate.
fn contains_key_update(mut messages: &[u8]) -> bool {
    while let [kind, a, b, c, rest @ ..] = messages {
        if *kind == KEY_UPDATE {
            return true;
        }
        let len = (usize::from(*a) << 16) | (usize::from(*b) << 8) | usize::from(*c);
        messages = rest.get(len..).unwrap_or_default();
    }
    false
}

#[cfg(test)]
mod tests;
