//! Ciphertext of TLS 1.3 sockets → the plaintext records the rest of the
//! stage decodes, with `tracer-decode`'s [`TlsReader`].
//!
//! Once capture has read the traffic secret of a direction of a Go TLS
//! socket ([`TlsKeyRecord`]: when Go installs it at the handshake, or at one
//! probe hit on a connection older than podtrace), it copies that
//! direction's ciphertext from the syscalls and no longer takes plaintext
//! from a probe hit per TLS read or write. Here each such direction gets a
//! reader; every later data record of it is decrypted into records that look
//! exactly as the probes' plaintext did (`tls_plaintext`), with the
//! syscall's times. A gap (bytes cut by the capture, a record that does not
//! open) becomes a `truncated` record, as cut plaintext was.
//!
//! A secret installed at the handshake numbers its records from 0, and Go
//! may have read the peer's first records before installing the secret that
//! opens them (a client's Finished and first request in one read): the
//! ciphertext of a connection seen from its handshake is held until its
//! reader opens application data, and a new secret numbered from 0 reads it
//! from the start.
//!
//! Secrets stay in the readers: never logged, never passed on.

use rustc_hash::{FxHashMap, FxHashSet};

use tracer_common::io::{Direction, FdKind, IoSyscall};
use tracer_decode::tls::{Plaintext, TlsReader, TlsStats, TrafficKeys, seals_a_record};

use crate::capture::{CaptureControl, ConnKey, DataRecord, RawEvent, TlsKeyRecord};

/// Directions decrypted at once: two per connection, as many connections as
/// the HTTP/2 decoder follows.
const MAX_READERS: usize = 2 * 4096;
/// Ciphertext held per direction until a secret opens it: a handshake and
/// the first records after it.
const MAX_HELD_BYTES: usize = 64 * 1024;
/// A TLS handshake record's first bytes: type 22, legacy version 3.x.
const HANDSHAKE_RECORD: [u8; 2] = [22, 3];

/// Whether socket bytes begin with a TLS handshake record: a connection
/// seen from its start whose application bytes come later, as plaintext
/// (decrypted, or from the per-call probes).
pub fn starts_tls_handshake(bytes: &[u8]) -> bool {
    bytes.starts_with(&HANDSHAKE_RECORD)
}
/// Whether `bytes` begin with a TLS record header (content type 20–23,
/// version 3.x): a TLS socket's ciphertext, which tells nothing of the
/// protocol inside.
pub fn starts_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [20..=23, 3, 0..=4, ..])
}
/// A TLS application-data record's first bytes (TLS 1.2 and 1.3).
const APPLICATION_DATA_RECORD: [u8; 3] = [23, 3, 3];
/// The largest TLS 1.3 record an HTTP/2 control frame makes (a PING: a
/// 9-byte frame header and 8 bytes, the content type and the AEAD tag):
/// what an idle gRPC connection's keep-alives look like. Such a record on a
/// direction not keyed yet does not call the per-call probes back: each of
/// kube-apiserver's ~30 idle etcd clients pings every 30 s, and each ping
/// held the apiserver's probes (~17 hits a request) for [`UNKEYED_HOLD_NS`],
/// so that they never left. The direction is keyed at its first larger
/// record instead, which is lost with the probes detached, as any message of
/// a connection quiet since the agent started is.
const MAX_CONTROL_RECORD_BYTES: usize = 5 + 9 + 8 + 1 + 16;
/// How long a process's per-call TLS probes stay attached after they last
/// delivered plaintext: the connections older than podtrace are keyed
/// within their first requests, and a connection quiet that long that
/// talks again shows as ciphertext and brings the probes back.
const TLS_CALLS_IDLE_NS: u64 = 2_000_000_000;
/// How often the processes' need for the per-call TLS probes is looked at.
const TLS_CALLS_CHECK_NS: u64 = 500_000_000;
/// How long a direction of a connection older than podtrace that talked
/// without a secret keeps its process's per-call TLS probes attached after
/// it last talked, however quiet the probes are: until it is keyed (its
/// HPACK tables copied first), each message it sends while they are
/// detached is lost, and the next one brings them back only after a round
/// trip through capture.
const UNKEYED_HOLD_NS: u64 = 30_000_000_000;
/// The longest such hold. A direction that talks again after its hold
/// ended (and so was not keyed: the probes read a secret only at a call
/// made while they are attached) is held for 5/4 of the longest quiet
/// between its talks: kube-apiserver's per-resource etcd clients count
/// their objects once a minute, and with a fixed 30-s hold each brought the
/// probes back for 30 s of every minute, never keyed. Held across one more
/// of its talks, it is keyed for good. One whose quiet is longer than
/// a hold this long could reach is not held at all ([`Unkeyed::talked`]).
const MAX_UNKEYED_HOLD_NS: u64 = 150_000_000_000;
/// How long the per-call TLS probes of a process stay attached after podtrace
/// found it with sockets open, unless each of those is keyed sooner: a
/// connection older than podtrace is keyed only at a call made while they
/// are attached, and many talk only now and then — kube-apiserver's etcd
/// client of each resource counts its objects every minute
/// (`--etcd-count-metric-poll-period`) with a jitter factor of 1.2, so
/// 60–132 s apart: held that long, every such client is keyed in the
/// agent's first 132 s. Held 75 s, a third of them talked first after the
/// hold, unkeyed, and their next talk (60–132 s on) held the probes for 5/4
/// of that quiet, up to 150 s each, through the agent's first five minutes
/// (20–50 % of a benchmark leg begun at 90 s); let go after a minute, each
/// first talk afterwards held them 30 s of its own (77 % of a leg).
const STARTUP_HOLD_NS: u64 = 135_000_000_000;
/// How long a direction's unkeyed talks are remembered after its hold: long
/// enough to see that one talks too rarely to be held across
/// ([`MAX_UNKEYED_HOLD_NS`]): kube-apiserver's compactor has an etcd client
/// of its own that talks every 5 minutes (`--etcd-compaction-interval`).
const UNKEYED_MEMORY_NS: u64 = 600_000_000_000;
/// How often one socket direction's secret is asked again
/// ([`CaptureControl::Rekey`]): the probes that read it need a call of the
/// process's, and the ciphertext before that call comes on meanwhile.
const REKEY_INTERVAL_NS: u64 = 1_000_000_000;

/// A socket direction.
type Slot = (ConnKey, Direction);

/// What is kept of a direction's ciphertext before its reader opens
/// application data.
#[derive(Debug)]
enum Held {
    /// It began with a TLS handshake record: everything so far.
    Tls(Vec<u8>),
    /// Not a TLS connection seen from its start, more than
    /// [`MAX_HELD_BYTES`] before a secret, or opened already.
    Nothing,
}

/// A direction of a socket older than podtrace that talked TLS with no
/// secret yet.
#[derive(Debug, Clone, Copy)]
struct Unkeyed {
    /// When it last did (CLOCK_MONOTONIC ns).
    last_ns: u64,
    /// The longest quiet between two of its talks.
    longest_quiet_ns: u64,
    /// Until when it holds its process's per-call TLS probes.
    hold_until_ns: u64,
}

impl Unkeyed {
    /// It talked at `now`, after `before` if it had: held
    /// [`UNKEYED_HOLD_NS`], or 5/4 of its longest quiet; not at all once
    /// that is more than [`MAX_UNKEYED_HOLD_NS`], since no hold would reach
    /// its next talk — each would only keep the probes on the process's
    /// every call for nothing (held 30 s after each of the compactor's
    /// talks, the apiserver's and etcd's probes were attached a tenth of the
    /// time, for good). Such a direction stays unkeyed; what it says is
    /// lost, as any talk of a direction not keyed.
    ///
    /// A first talk is held [`UNKEYED_HOLD_NS`], unless it comes after the
    /// startup hold of the direction podtrace `found` open at its start:
    /// silent through [`STARTUP_HOLD_NS`], it talks less often than a first
    /// hold reaches (the compactor's client, talking 90 s into a benchmark
    /// leg's agent, held the probes for 30 s of it); its next talk shows how
    /// often.
    fn talked(before: Option<Unkeyed>, found: u64, now: u64) -> Self {
        let longest_quiet_ns = before.map_or(0, |before| {
            before
                .longest_quiet_ns
                .max(now.saturating_sub(before.last_ns))
        });
        let across = longest_quiet_ns / 4 * 5;
        let too_quiet = match before {
            Some(_) => across > MAX_UNKEYED_HOLD_NS,
            None => now.saturating_sub(found) > STARTUP_HOLD_NS,
        };
        let hold = if too_quiet {
            0
        } else {
            across.max(UNKEYED_HOLD_NS)
        };
        Self {
            last_ns: now,
            longest_quiet_ns,
            hold_until_ns: now.saturating_add(hold),
        }
    }
}

/// Whether a process needs its per-call TLS probes, as last said to capture.
#[derive(Debug, Clone, Copy)]
struct CallProbes {
    /// When plaintext last came from them, or a TLS record showed on a
    /// socket direction not keyed (CLOCK_MONOTONIC ns).
    last_needed_ns: u64,
    /// What capture was last told (`None`: nothing yet).
    said: Option<bool>,
}

/// The readers of every keyed socket direction.
#[derive(Debug, Default)]
pub struct TlsStreams {
    readers: FxHashMap<Slot, TlsReader>,
    held: FxHashMap<Slot, Held>,
    /// Directions whose reader failed on a record before it opened any
    /// application data, while their handshake is held: the gap is said
    /// only if that reader goes on to deliver, not if a later secret
    /// reads the held bytes again.
    gap_withheld: FxHashSet<Slot>,
    /// Per process with socket data, its need for the per-call TLS probes.
    call_probes: FxHashMap<u32, CallProbes>,
    /// Sockets open when podtrace started, or whose secrets were missed:
    /// read through the per-call probes until keyed; when podtrace found
    /// them so.
    older: FxHashMap<ConnKey, u64>,
    /// Processes found with sockets open when podtrace started, and until
    /// when their per-call probes are held while one of those is not keyed
    /// ([`STARTUP_HOLD_NS`]).
    starting: FxHashMap<u32, u64>,
    /// Sockets podtrace saw their process connect (it is the TLS client).
    clients: FxHashSet<ConnKey>,
    /// Directions of those that talked TLS with no secret yet (probe
    /// plaintext, or application records on a direction neither keyed nor
    /// held): when they last did, and how long they hold the probes.
    /// Remembered for [`UNKEYED_MEMORY_NS`] past a hold's end, so that a
    /// direction that talks again is held longer, or not at all.
    unkeyed: FxHashMap<Slot, Unkeyed>,
    /// Directions whose secret capture was asked to read again, and when.
    rekeying: FxHashMap<Slot, u64>,
    /// When the idle processes are looked for next.
    next_check_ns: u64,
    /// What capture is asked to do, in order; the stage takes it.
    pub control: Vec<CaptureControl>,
    /// What readers that are gone did.
    finished: TlsStats,
    /// Secrets that could not be used (not a TLS 1.3 suite, a wrong length).
    pub keys_refused: u64,
    /// Times capture was asked to read a direction's secret again: its
    /// ciphertext came with no reader (the secret's record lost), or its
    /// reader went adrift (more records lost than a search can skip).
    pub rekeys: u64,
    /// Readers given up as adrift (see [`TlsReader::adrift`]).
    pub readers_adrift: u64,
    /// Directions not decrypted (or not held) because the table was full.
    pub skipped: u64,
    /// Directions whose handshake outgrew [`MAX_HELD_BYTES`] before a
    /// secret came: a secret from the handshake cannot read their start.
    pub held_too_long: u64,
    /// Connections seen from their handshake whose secrets were installed
    /// before their process's probes were attached (read through the
    /// per-call probes instead, from their first request after them).
    pub secrets_missed: u64,
    /// Those connections, as they are found; the decode stage takes them
    /// (their header fields are asked of the HPACK probes).
    pub missed: Vec<ConnKey>,
}

impl TlsStreams {
    /// A direction's secret: its later ciphertext is decrypted with it. A
    /// secret numbered from 0 first reads what was held, whose plaintext
    /// is returned.
    pub fn on_key(&mut self, key: &TlsKeyRecord) -> Vec<DataRecord> {
        let keys = match TrafficKeys::new(key.suite, &key.secret) {
            Ok(keys) => keys,
            Err(error) => {
                self.keys_refused += 1;
                tracing::debug!(conn = ?key.conn, direction = ?key.direction, %error, "TLS secret not usable");
                return Vec::new();
            }
        };
        let slot = (key.conn, key.direction);
        if !self.readers.contains_key(&slot) && self.readers.len() >= MAX_READERS {
            self.skipped += 1;
            return Vec::new();
        }
        // What Go reads next is exactly that record; what it writes next
        // may follow another goroutine's write still under way; a new
        // secret's first record may follow records of the one before.
        let exact = key.direction == Direction::Ingress && key.seq != 0;
        let mut reader = TlsReader::new(keys, key.seq, exact);
        let mut plaintext = Vec::new();
        let mut reads_again = false;
        match self.held.get(&slot) {
            Some(Held::Tls(bytes)) if key.seq == 0 => {
                reads_again = true;
                self.gap_withheld.remove(&slot);
                let template = KeyTemplate(key);
                plaintext = reader
                    .push(bytes.clone(), false)
                    .into_iter()
                    .map(|piece| template.record(piece.bytes, piece.gap_after))
                    .collect();
            }
            // A secret read at a probe hit: what came before it was
            // delivered in plaintext.
            _ => {
                self.held.insert(slot, Held::Nothing);
            }
        }
        self.unkeyed.remove(&slot);
        self.rekeying.remove(&slot);
        if let Some(old) = self.readers.insert(slot, reader) {
            // A reader whose bytes the new one reads again from the start
            // (it had a handshake secret) did nothing that counts.
            if !reads_again {
                add(&mut self.finished, old.stats());
            }
        }
        self.stop_holding_if_opened(slot, key.ids.ts_ns);
        plaintext
    }

    /// The plaintext records of `data` if it is ciphertext of a keyed
    /// direction (possibly none yet: a record not whole; decrypted in
    /// place), else `data` back.
    pub fn decrypt(&mut self, data: DataRecord) -> Result<Vec<DataRecord>, DataRecord> {
        if data.fd_kind != FdKind::Socket {
            return Err(data);
        }
        let slot = (data.conn, data.direction);
        let missed =
            !data.tls_plaintext && self.hold(slot, &data.data, data.truncated, data.ids.ts_ns);
        self.note_call_probes(&data, missed);
        if data.tls_plaintext {
            return Err(data);
        }
        let Some(reader) = self.readers.get_mut(&slot) else {
            return Err(data);
        };
        let DataRecord {
            ids,
            conn,
            fd,
            syscall,
            direction,
            fd_kind,
            enter_ts_ns,
            data: ciphertext,
            truncated,
            ..
        } = data;
        let mut pieces = reader.push(ciphertext, truncated);
        let opened = reader.stats().application_records > 0;
        if reader.adrift() {
            // Nothing it reads will open again; a secret read anew will.
            // (What it delivered so far stays delivered: its gap says the rest.)
            if let Some(reader) = self.readers.remove(&slot) {
                add(&mut self.finished, reader.stats());
            }
            self.readers_adrift += 1;
            self.ask_secret_again(slot, fd, ids.ts_ns);
        }
        if !opened && matches!(self.held.get(&slot), Some(Held::Tls(_))) {
            // Go before 1.21 installs handshake and application secrets
            // through the same function, with nothing to tell them apart:
            // a reader that has opened no application data yet may hold
            // the handshake secret, and the application secret that
            // follows reads the held bytes again. Nothing was delivered.
            if pieces.iter().any(|piece| piece.gap_after) {
                self.gap_withheld.insert(slot);
            }
            return Ok(Vec::new());
        }
        if self.gap_withheld.remove(&slot) {
            pieces.insert(
                0,
                Plaintext {
                    bytes: Vec::new(),
                    gap_after: true,
                },
            );
        }
        self.stop_holding_if_opened(slot, ids.ts_ns);
        Ok(pieces
            .into_iter()
            .map(|piece| DataRecord {
                ids: ids.clone(),
                conn,
                fd,
                syscall,
                direction,
                fd_kind,
                len: piece.bytes.len() as u64,
                enter_ts_ns,
                data: piece.bytes,
                truncated: piece.gap_after,
                tls_plaintext: true,
            })
            .collect())
    }

    /// Notes whether `data` says its process needs the per-call TLS probes
    /// — their plaintext, a TLS record on a direction that is neither keyed
    /// nor in its handshake, or a handshake whose secrets were `missed` —
    /// and tells capture when that changes; now and then, processes that
    /// went without them long enough are told they need them no more.
    fn note_call_probes(&mut self, data: &DataRecord, missed: bool) {
        let now = data.ids.ts_ns;
        let slot = (data.conn, data.direction);
        let unread_records = data.data.starts_with(&APPLICATION_DATA_RECORD)
            && data.data.len() > MAX_CONTROL_RECORD_BYTES
            && !self.readers.contains_key(&slot)
            && !matches!(self.held.get(&slot), Some(Held::Tls(_)));
        if unread_records && !data.tls_plaintext {
            // Either a connection older than podtrace whose secret was
            // never read, or one whose secret's record was lost (a full
            // ring): capture then copies its ciphertext and its probes skip
            // it as keyed, so that nothing would ever read it. Asked again,
            // the probes read the secret at the next call either way.
            self.ask_secret_again(slot, data.fd, now);
        }
        let needs = data.tls_plaintext || missed || unread_records;
        if let Some(&found) = self.older.get(&data.conn).filter(|_| needs)
            && (self.unkeyed.len() < MAX_READERS || self.unkeyed.contains_key(&slot))
        {
            let before = self.unkeyed.get(&slot).copied();
            self.unkeyed
                .insert(slot, Unkeyed::talked(before, found, now));
        }
        let tgid = data.conn.tgid;
        if needs {
            let why = if data.tls_plaintext {
                "plaintext from the per-call probes"
            } else if missed {
                "a handshake whose secrets were missed"
            } else {
                "TLS records that no reader opens"
            };
            self.need_call_probes(data.conn, now, why);
        } else {
            self.call_probes.entry(tgid).or_insert(CallProbes {
                last_needed_ns: now,
                said: None,
            });
        }
        if now >= self.next_check_ns {
            self.check_idle(now);
        }
    }

    /// Asks capture to read the secret of direction `slot` (socket `fd`)
    /// again, at most once per [`REKEY_INTERVAL_NS`]; its process needs the
    /// per-call probes that read it.
    fn ask_secret_again(&mut self, slot: Slot, fd: u32, now: u64) {
        if let Some(&asked) = self.rekeying.get(&slot) {
            if now.saturating_sub(asked) < REKEY_INTERVAL_NS {
                return;
            }
        }
        if self.rekeying.len() >= MAX_READERS && !self.rekeying.contains_key(&slot) {
            self.rekeying
                .retain(|_, asked| now.saturating_sub(*asked) < REKEY_INTERVAL_NS);
            if self.rekeying.len() >= MAX_READERS {
                self.skipped += 1;
                return;
            }
        }
        self.rekeying.insert(slot, now);
        self.rekeys += 1;
        let (conn, direction) = slot;
        self.control.push(CaptureControl::Rekey {
            conn,
            fd,
            direction,
        });
        self.need_call_probes(conn, now, "its secret asked for again");
    }

    /// The process of `conn` needs its per-call TLS probes at `now`, for
    /// `why`: capture is told when that is news (and the connection and
    /// reason logged at debug level, to find what calls them back).
    fn need_call_probes(&mut self, conn: ConnKey, now: u64, why: &'static str) {
        let tgid = conn.tgid;
        let probes = self.call_probes.entry(tgid).or_insert(CallProbes {
            last_needed_ns: now,
            said: None,
        });
        probes.last_needed_ns = now;
        if probes.said != Some(true) {
            probes.said = Some(true);
            tracing::debug!(?conn, why, "per-call TLS probes needed");
            self.control
                .push(CaptureControl::TlsProbes { tgid, needed: true });
        }
    }

    /// Tells capture which processes went without the per-call TLS probes
    /// for [`TLS_CALLS_IDLE_NS`] by `now` and have no direction that talked
    /// unkeyed within its hold ([`Unkeyed`]): called as data comes, and on a
    /// timer, since a process whose connections are all keyed or muted may
    /// send no data at all.
    pub fn check_idle(&mut self, now: u64) {
        self.next_check_ns = now + TLS_CALLS_CHECK_NS;
        self.unkeyed
            .retain(|_, held| now.saturating_sub(held.hold_until_ns) <= UNKEYED_MEMORY_NS);
        self.starting.retain(|_, until| now < *until);
        let readers = &self.readers;
        let starting_unkeyed = self.older.keys().filter(|conn| {
            self.starting.contains_key(&conn.tgid)
                && [Direction::Egress, Direction::Ingress]
                    .iter()
                    .any(|&direction| !readers.contains_key(&(**conn, direction)))
        });
        let waiting: FxHashSet<u32> = self
            .unkeyed
            .iter()
            .filter(|(_, held)| now < held.hold_until_ns)
            .map(|((conn, _), _)| conn.tgid)
            .chain(starting_unkeyed.map(|conn| conn.tgid))
            .collect();
        for (&tgid, probes) in &mut self.call_probes {
            let idle = now.saturating_sub(probes.last_needed_ns) > TLS_CALLS_IDLE_NS
                && !waiting.contains(&tgid);
            if idle && probes.said != Some(false) {
                probes.said = Some(false);
                self.control.push(CaptureControl::TlsProbes {
                    tgid,
                    needed: false,
                });
            }
        }
    }

    /// Keeps `bytes` of a direction that began with a TLS handshake, until
    /// its reader opens application data. True when this shows (at `now`)
    /// that the connection's secrets were missed: both its directions are
    /// then no longer held.
    fn hold(&mut self, slot: Slot, bytes: &[u8], cut: bool, now: u64) -> bool {
        let held = match self.held.get_mut(&slot) {
            Some(held) => held,
            None => {
                let starts_tls = starts_tls_handshake(bytes);
                if starts_tls && self.held.len() >= MAX_READERS {
                    self.skipped += 1;
                }
                let held = if starts_tls && self.held.len() < MAX_READERS {
                    Held::Tls(Vec::new())
                } else {
                    Held::Nothing
                };
                self.held.entry(slot).or_insert(held)
            }
        };
        let Held::Tls(kept) = held else {
            return false;
        };
        if cut || kept.len() + bytes.len() > MAX_HELD_BYTES {
            self.held_too_long += 1;
            *held = Held::Nothing;
            return false;
        }
        kept.extend_from_slice(bytes);
        // Go installs each secret of a direction it writes before it seals
        // a record with it (the handshake's, then the application's), and
        // the secret's record precedes the write's in the ring buffer. An
        // encrypted record written with no secret come means the secret
        // was installed before the process's probes were attached (a
        // process that connected within its first moments, while podtrace
        // was still attaching): no secret will come for what was held, and
        // the connection is read as one older than podtrace, through the
        // per-call probes. (What a direction reads may come before its
        // secret: Go reads ahead of installing it.)
        let missed = slot.1 == Direction::Egress
            && !self.readers.contains_key(&slot)
            && seals_a_record(kept);
        if missed {
            self.on_secrets_missed(slot.0, now);
        }
        missed
    }

    /// The connection's secrets were missed: neither direction is held any
    /// more, and it is read as one older than podtrace, through the per-call
    /// probes from its next message, holding them as those do while it is
    /// not keyed (kube-apiserver's etcd client of Pods, connected while a
    /// debug agent attached to it, lost a burst's first creations after a
    /// quiet spell when they were let go).
    fn on_secrets_missed(&mut self, conn: ConnKey, now: u64) {
        self.secrets_missed += 1;
        for direction in [Direction::Egress, Direction::Ingress] {
            self.held.insert((conn, direction), Held::Nothing);
        }
        self.follow_until_keyed(conn, now);
        self.missed.push(conn);
    }

    /// Whether `slot` is a client's write direction that has just opened
    /// application data while its read direction still waits, held, for a
    /// secret. Go's client installs the server's application secret (what
    /// it reads) before its own, and both before it writes any application
    /// data: one that has not come was installed before the probes were
    /// attached, between the two, and will not come. Held, its bytes stayed
    /// unread until 64 KiB had passed (a kubelet connected so lost every
    /// response, and so every status update's client span, of a burst).
    fn read_secret_missed(&self, slot: Slot) -> bool {
        let (conn, direction) = slot;
        direction == Direction::Egress
            && self.clients.contains(&conn)
            && !self.readers.contains_key(&(conn, Direction::Ingress))
            && matches!(
                self.held.get(&(conn, Direction::Ingress)),
                Some(Held::Tls(_))
            )
    }

    /// A direction whose reader has opened application data is held no
    /// more; a client's read direction that missed its secret is found then
    /// ([`Self::read_secret_missed`]), and its process asked for the
    /// per-call probes at `now`.
    fn stop_holding_if_opened(&mut self, slot: Slot, now: u64) {
        let opened = self
            .readers
            .get(&slot)
            .is_some_and(|reader| reader.stats().application_records > 0);
        if !opened {
            return;
        }
        if self.read_secret_missed(slot) {
            self.on_secrets_missed(slot.0, now);
            self.need_call_probes(slot.0, now, "a read direction whose secret was missed");
        }
        self.held.insert(slot, Held::Nothing);
    }

    /// A socket open when podtrace started (found at `now`): one whose
    /// per-call TLS probes are held while it is not keyed, for
    /// [`STARTUP_HOLD_NS`] from the first such socket of its process, and
    /// then for a while after each time it talks ([`Unkeyed`]).
    pub fn on_open_at_start(&mut self, conn: ConnKey, now: u64) {
        self.starting
            .entry(conn.tgid)
            .or_insert(now.saturating_add(STARTUP_HOLD_NS));
        self.follow_until_keyed(conn, now);
    }

    /// A socket read through the per-call probes until keyed, holding them
    /// for a while after each time it talks unkeyed ([`Unkeyed`]): one open
    /// when podtrace started, or one whose secrets were missed
    /// ([`Self::hold`]). One seen made and keyed from its handshake needs
    /// them only while their plaintext comes.
    fn follow_until_keyed(&mut self, conn: ConnKey, now: u64) {
        if self.older.len() < MAX_READERS {
            self.older.entry(conn).or_insert(now);
        }
    }

    /// A socket podtrace saw its process connect: the process is the TLS
    /// client ([`Self::read_secret_missed`]).
    pub fn on_connected(&mut self, conn: ConnKey) {
        if self.clients.len() < MAX_READERS {
            self.clients.insert(conn);
        }
    }

    /// The socket closed: its readers go.
    pub fn on_closed(&mut self, conn: &ConnKey) {
        self.older.remove(conn);
        self.clients.remove(conn);
        for direction in [Direction::Egress, Direction::Ingress] {
            self.unkeyed.remove(&(*conn, direction));
            self.rekeying.remove(&(*conn, direction));
            self.held.remove(&(*conn, direction));
            self.gap_withheld.remove(&(*conn, direction));
            if let Some(reader) = self.readers.remove(&(*conn, direction)) {
                add(&mut self.finished, reader.stats());
            }
        }
    }

    /// The process ended or replaced its image: its readers go.
    pub fn on_process_gone(&mut self, tgid: u32) {
        let finished = &mut self.finished;
        self.readers.retain(|(conn, _), reader| {
            let keep = conn.tgid != tgid;
            if !keep {
                add(finished, reader.stats());
            }
            keep
        });
        self.held.retain(|(conn, _), _| conn.tgid != tgid);
        self.gap_withheld.retain(|(conn, _)| conn.tgid != tgid);
        self.call_probes.remove(&tgid);
        self.unkeyed.retain(|(conn, _), _| conn.tgid != tgid);
        self.rekeying.retain(|(conn, _), _| conn.tgid != tgid);
        self.older.retain(|conn, _| conn.tgid != tgid);
        self.starting.remove(&tgid);
        self.clients.retain(|conn| conn.tgid != tgid);
    }

    /// `event` as the decode stage sees it, for readers of a recording
    /// with no capture to steer (`replay --dump`, tests): ciphertext of a
    /// keyed direction becomes its plaintext records, a secret's record
    /// stays and is followed by the held plaintext it opened, anything else
    /// passes as it is.
    pub fn offline(&mut self, event: RawEvent) -> Vec<RawEvent> {
        let out = match event {
            RawEvent::TlsKey(key) => {
                let released = self.on_key(&key);
                std::iter::once(RawEvent::TlsKey(key))
                    .chain(released.into_iter().map(RawEvent::Data))
                    .collect()
            }
            RawEvent::Data(data) => match self.decrypt(data) {
                Ok(plaintext) => plaintext.into_iter().map(RawEvent::Data).collect(),
                Err(data) => vec![RawEvent::Data(data)],
            },
            other => vec![other],
        };
        // Nothing takes what capture would be asked.
        self.control.clear();
        out
    }

    /// What every reader did since start.
    pub fn stats(&self) -> TlsStats {
        let mut total = self.finished;
        for reader in self.readers.values() {
            add(&mut total, reader.stats());
        }
        total
    }
}

/// The data records of plaintext a secret's arrival released: stamped with
/// the secret's time (the syscalls that read or wrote them came before).
struct KeyTemplate<'a>(&'a TlsKeyRecord);

impl KeyTemplate<'_> {
    fn record(&self, bytes: Vec<u8>, gap_after: bool) -> DataRecord {
        let key = self.0;
        DataRecord {
            ids: key.ids.clone(),
            conn: key.conn,
            fd: key.fd,
            syscall: match key.direction {
                Direction::Egress => IoSyscall::Write,
                Direction::Ingress => IoSyscall::Read,
            },
            direction: key.direction,
            fd_kind: FdKind::Socket,
            len: bytes.len() as u64,
            enter_ts_ns: 0,
            data: bytes,
            truncated: gap_after,
            tls_plaintext: true,
        }
    }
}

fn add(total: &mut TlsStats, stats: TlsStats) {
    total.records += stats.records;
    total.application_records += stats.application_records;
    total.skipped += stats.skipped;
    total.undecryptable += stats.undecryptable;
    total.resyncs += stats.resyncs;
    total.key_updates += stats.key_updates;
}

#[cfg(test)]
mod tests;
