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
/// client of each resource counts its objects once a minute
/// (`--etcd-count-metric-poll-period`). Held past that minute, every such
/// client is keyed in the agent's first minute; let go before it, each first
/// talk afterwards called the probes back for an [`UNKEYED_HOLD_NS`] of its
/// own, for the agent's first three minutes (77 % of a benchmark leg).
const STARTUP_HOLD_NS: u64 = 75_000_000_000;
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
mod tests {
    use super::*;
    use crate::capture::ProcessIds;

    const TGID: u32 = 42;
    const SECOND: u64 = 1_000_000_000;

    /// The real Go TLS 1.3 session of `tracer-decode`'s tests: the client's
    /// bytes on the wire, its application secret, the suite, the messages.
    struct Session {
        suite: u16,
        secret: Vec<u8>,
        handshake_secret: Vec<u8>,
        client_to_server: Vec<u8>,
        messages: Vec<u8>,
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
            .collect()
    }

    fn session() -> Session {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/decode/testdata/tls13/tls13-session.txt"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut session = Session {
            suite: 0,
            secret: Vec::new(),
            handshake_secret: Vec::new(),
            client_to_server: Vec::new(),
            messages: Vec::new(),
        };
        for line in text.lines() {
            let (name, value) = line.split_once(' ').unwrap();
            match name {
                "suite" => session.suite = u16::from_str_radix(value, 16).unwrap(),
                "client_traffic_secret_0" => session.secret = unhex(value),
                "client_handshake_traffic_secret" => session.handshake_secret = unhex(value),
                "client_to_server" => session.client_to_server = unhex(value),
                "message" => session.messages.extend(unhex(value)),
                _ => {}
            }
        }
        session
    }

    fn conn() -> ConnKey {
        ConnKey {
            tgid: TGID,
            conn_id: 7,
        }
    }

    fn data(ts_ns: u64, bytes: &[u8], tls_plaintext: bool) -> DataRecord {
        DataRecord {
            ids: ProcessIds {
                ts_ns,
                tgid: TGID,
                tid: TGID,
            },
            conn: conn(),
            fd: 9,
            syscall: IoSyscall::Write,
            direction: Direction::Egress,
            fd_kind: FdKind::Socket,
            len: bytes.len() as u64,
            enter_ts_ns: ts_ns,
            data: bytes.to_vec(),
            truncated: false,
            tls_plaintext,
        }
    }

    fn key(session: &Session, seq: u64) -> TlsKeyRecord {
        TlsKeyRecord {
            ids: ProcessIds {
                ts_ns: 5,
                tgid: TGID,
                tid: TGID,
            },
            conn: conn(),
            fd: 9,
            direction: Direction::Egress,
            seq,
            suite: session.suite,
            secret: session.secret.clone(),
        }
    }

    /// The client's bytes: its ClientHello (one plaintext record), and the
    /// rest.
    fn split_hello(session: &Session) -> (&[u8], &[u8]) {
        let bytes = &session.client_to_server;
        let hello = 5 + usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        bytes.split_at(hello)
    }

    fn plaintext(records: &[DataRecord]) -> Vec<u8> {
        assert!(records.iter().all(|record| record.tls_plaintext));
        records
            .iter()
            .flat_map(|record| record.data.clone())
            .collect()
    }

    /// The server's side of the session: what it reads.
    fn read(record: DataRecord) -> DataRecord {
        DataRecord {
            syscall: IoSyscall::Read,
            direction: Direction::Ingress,
            ..record
        }
    }

    #[test]
    fn a_secret_from_the_handshake_reads_what_came_before_it() {
        let session = session();
        let mut streams = TlsStreams::default();
        // The whole session is read before Go installs the secret.
        for (at, chunk) in session.client_to_server.chunks(1000).enumerate() {
            let out = streams.decrypt(read(data(at as u64, chunk, false)));
            assert!(out.is_err(), "nothing to decrypt with yet");
        }
        let mut secret = key(&session, 0);
        secret.direction = Direction::Ingress;
        let released = streams.on_key(&secret);
        assert!(plaintext(&released) == session.messages);
        assert_eq!(streams.stats().undecryptable, 0);
        assert_eq!(streams.secrets_missed, 0);
        assert!(streams.control.is_empty());
    }

    /// A process that connected while podtrace was attaching its probes:
    /// the handshake is seen, its secrets are not. Its first sealed record
    /// written says so, and the per-call probes are asked for at once
    /// (holding the connection until 64 KiB had passed lost every request
    /// a kubelet made in its first seconds).
    #[test]
    fn a_handshake_whose_secrets_were_missed_asks_for_the_per_call_probes() {
        let session = session();
        let mut streams = TlsStreams::default();
        let (hello, rest) = split_hello(&session);
        assert!(streams.decrypt(data(1, hello, false)).is_err());
        // The server's reply, read: held, as Go reads ahead of its secrets.
        assert!(
            streams
                .decrypt(read(data(2, &[22, 3, 3, 0, 1, 2], false)))
                .is_err()
        );
        assert!(streams.control.is_empty());
        assert!(streams.decrypt(data(3, rest, false)).is_err());
        assert_eq!(streams.secrets_missed, 1);
        assert_eq!(
            std::mem::take(&mut streams.control),
            [CaptureControl::TlsProbes {
                tgid: TGID,
                needed: true
            }]
        );
        // Quiet past the probes' idle time, it holds them as a connection
        // older than podtrace does, while it is not keyed.
        streams.check_idle(3 + TLS_CALLS_IDLE_NS + 1);
        assert!(streams.control.is_empty(), "{:?}", streams.control);
        // Neither direction is held any more: a secret read at a probe hit
        // decrypts what follows it.
        assert!(streams.on_key(&key(&session, 1)).is_empty());
        assert!(
            !streams
                .held
                .values()
                .any(|held| matches!(held, Held::Tls(_)))
        );
    }

    /// A client whose probes were attached between Go installing the
    /// server's application secret (what it reads) and its own: its writes
    /// are keyed, its reads would stay held. Its first application data
    /// written says so, for a client only (a server writes before it has
    /// the client's secret).
    #[test]
    fn a_client_writing_application_data_without_its_read_secret_missed_it() {
        let session = session();
        for client in [true, false] {
            let mut streams = TlsStreams::default();
            if client {
                streams.on_connected(conn());
            }
            // The server's handshake, read and held.
            assert!(
                streams
                    .decrypt(read(data(1, &[22, 3, 3, 0, 1, 2], false)))
                    .is_err()
            );
            let (hello, rest) = split_hello(&session);
            assert!(streams.decrypt(data(2, hello, false)).is_err());
            assert!(streams.on_key(&key(&session, 0)).is_empty());
            let opened = streams.decrypt(data(3, rest, false)).unwrap();
            assert!(plaintext(&opened) == session.messages);
            let ingress = streams.held.get(&(conn(), Direction::Ingress));
            if client {
                assert_eq!(streams.secrets_missed, 1);
                assert_eq!(streams.missed, [conn()]);
                assert!(matches!(ingress, Some(Held::Nothing)));
                assert_eq!(
                    streams.control,
                    [CaptureControl::TlsProbes {
                        tgid: TGID,
                        needed: true
                    }]
                );
            } else {
                assert_eq!(streams.secrets_missed, 0);
                assert!(matches!(ingress, Some(Held::Tls(_))));
                assert!(streams.control.is_empty());
            }
        }
    }

    /// Go before 1.21: the handshake secret comes first, through the same
    /// function and also numbered from 0; it opens the client's Finished,
    /// not the application data after it; then the application secret.
    #[test]
    fn a_handshake_secret_before_the_application_secret_loses_nothing() {
        let session = session();
        let mut streams = TlsStreams::default();
        // The ClientHello (a plaintext record), then the handshake secret.
        let (hello, rest) = split_hello(&session);
        assert!(streams.decrypt(data(0, hello, false)).is_err());
        let mut handshake = key(&session, 0);
        handshake.secret = session.handshake_secret.clone();
        assert!(streams.on_key(&handshake).is_empty());
        for (at, chunk) in rest.chunks(1000).enumerate() {
            let out = streams.decrypt(data(at as u64, chunk, false)).unwrap();
            assert!(out.is_empty(), "nothing delivered, not even a gap");
        }
        let released = streams.on_key(&key(&session, 0));
        assert!(released.iter().all(|record| !record.truncated));
        assert!(plaintext(&released) == session.messages);
        assert_eq!(streams.stats().undecryptable, 0);
    }

    #[test]
    fn a_secret_read_at_a_probe_hit_does_not_read_what_came_before_it() {
        let session = session();
        let mut streams = TlsStreams::default();
        assert!(
            streams
                .decrypt(data(1, &session.client_to_server, false))
                .is_err()
        );
        // Record 1 on: what came before was delivered in plaintext.
        assert!(streams.on_key(&key(&session, 1)).is_empty());
    }

    #[test]
    fn ciphertext_after_the_secret_is_decrypted_as_it_comes() {
        let session = session();
        let mut streams = TlsStreams::default();
        assert!(streams.on_key(&key(&session, 0)).is_empty());
        let records: Vec<DataRecord> = session
            .client_to_server
            .chunks(777)
            .flat_map(|chunk| streams.decrypt(data(1, chunk, false)).unwrap())
            .collect();
        assert!(plaintext(&records) == session.messages);
        streams.on_closed(&conn());
        assert!(streams.decrypt(data(2, b"after close", false)).is_err());
        assert!(streams.stats().application_records >= 4);
    }

    /// A connection older than podtrace that talked through the probes but
    /// was not keyed yet (its HPACK tables not copied) keeps them attached
    /// while quiet: a burst after a quiet spell would lose its first
    /// messages while they came back (found live: the kubelet's status
    /// updates of a burst of Pods after an agent restart).
    #[test]
    fn a_direction_not_keyed_yet_keeps_the_per_call_probes_while_quiet() {
        let mut streams = TlsStreams::default();
        // A connection podtrace saw made does not hold them.
        assert!(streams.decrypt(data(SECOND, b"plaintext", true)).is_err());
        streams.check_idle(SECOND + TLS_CALLS_IDLE_NS + 1);
        assert_eq!(
            std::mem::take(&mut streams.control).last(),
            Some(&CaptureControl::TlsProbes {
                tgid: TGID,
                needed: false
            })
        );
        // One open when podtrace started does, past the startup hold too.
        streams.on_open_at_start(conn(), 0);
        let talked = STARTUP_HOLD_NS - 5 * SECOND;
        assert!(streams.decrypt(data(talked, b"plaintext", true)).is_err());
        streams.control.clear();
        streams.check_idle(talked + TLS_CALLS_IDLE_NS + 1);
        assert!(streams.control.is_empty(), "{:?}", streams.control);
        // Quiet for longer than the hold: let go.
        streams.check_idle(talked + UNKEYED_HOLD_NS + 1);
        assert_eq!(
            streams.control,
            [CaptureControl::TlsProbes {
                tgid: TGID,
                needed: false
            }]
        );
    }

    /// Talks of a direction not keyed, and whether the probes are let go.
    fn talk(streams: &mut TlsStreams, at: u64) {
        assert!(streams.decrypt(data(at, b"plaintext", true)).is_err());
        streams.control.clear();
    }

    fn released(streams: &mut TlsStreams, at: u64) -> bool {
        streams.check_idle(at);
        std::mem::take(&mut streams.control).contains(&CaptureControl::TlsProbes {
            tgid: TGID,
            needed: false,
        })
    }

    /// A direction older than podtrace that talks once a minute (an idle
    /// etcd client's object count) but was not keyed at its first talk: that
    /// holds the probes for the usual hold, which ends before it talks
    /// again; its second holds them across the third, so that it is keyed,
    /// instead of calling them back for half of every minute for good.
    #[test]
    fn a_direction_that_talks_once_a_minute_holds_the_probes_across_its_next_talk() {
        const MINUTE: u64 = 60 * SECOND;
        let mut streams = TlsStreams::default();
        streams.on_open_at_start(conn(), 0);
        let first = STARTUP_HOLD_NS - 5 * SECOND;
        talk(&mut streams, first);
        assert!(!released(&mut streams, STARTUP_HOLD_NS + 1));
        assert!(released(&mut streams, first + UNKEYED_HOLD_NS + 1));
        talk(&mut streams, first + MINUTE);
        assert!(!released(&mut streams, first + 2 * MINUTE - 1));
        // Past 5/4 of its minute of quiet, let go.
        assert!(released(&mut streams, first + MINUTE + MINUTE / 4 * 5 + 1));
        // A chatty direction is held the usual time after its last talk.
        let mut streams = TlsStreams::default();
        streams.on_open_at_start(conn(), 0);
        for at in 1..=10 {
            talk(&mut streams, first + at * SECOND);
        }
        assert!(released(
            &mut streams,
            first + 10 * SECOND + UNKEYED_HOLD_NS + 1
        ));
    }

    /// A direction that talks every 5 minutes (kube-apiserver's compactor's
    /// etcd client) is not held once that is seen: no hold could reach its
    /// next talk, and each held the probes on every call of the apiserver
    /// and etcd for nothing. Its talk still calls them back, for the idle
    /// time only.
    #[test]
    fn a_direction_too_quiet_for_any_hold_to_reach_is_not_held() {
        const MINUTE: u64 = 60 * SECOND;
        let mut streams = TlsStreams::default();
        streams.on_open_at_start(conn(), 0);
        let first = STARTUP_HOLD_NS - 5 * SECOND;
        talk(&mut streams, first);
        assert!(released(&mut streams, first + UNKEYED_HOLD_NS + 1));
        for n in 1..=3 {
            let at = first + n * 5 * MINUTE;
            talk(&mut streams, at);
            assert!(
                released(&mut streams, at + TLS_CALLS_IDLE_NS + 1),
                "talk {n}"
            );
        }
        // Nor is one silent through the startup hold, at its first talk.
        let mut streams = TlsStreams::default();
        streams.on_open_at_start(conn(), 0);
        let first = STARTUP_HOLD_NS + SECOND;
        talk(&mut streams, first);
        assert!(released(&mut streams, first + TLS_CALLS_IDLE_NS + 1));
        // Its second talk a minute later shows it can be held across its third.
        talk(&mut streams, first + MINUTE);
        assert!(!released(&mut streams, first + 2 * MINUTE));
    }

    /// A process found with sockets open at podtrace's start keeps its
    /// per-call probes for the startup hold, so that its connections that
    /// talk once a minute are keyed in its first minute, not one by one at
    /// each of their first talks after it; the hold ends as soon as each of
    /// those sockets is keyed.
    #[test]
    fn the_startup_hold_lasts_until_every_socket_open_at_start_is_keyed() {
        let made = ConnKey {
            tgid: TGID,
            conn_id: 8,
        };
        let plaintext_of_made = |at: u64| DataRecord {
            conn: made,
            ..data(at, b"plaintext", true)
        };
        let mut streams = TlsStreams::default();
        streams.on_open_at_start(conn(), 0);
        assert!(streams.decrypt(plaintext_of_made(SECOND)).is_err());
        streams.control.clear();
        assert!(!released(&mut streams, STARTUP_HOLD_NS - 1));
        assert!(released(&mut streams, STARTUP_HOLD_NS + 1));
        // Keyed both ways, it holds them no more.
        let mut streams = TlsStreams::default();
        streams.on_open_at_start(conn(), 0);
        assert!(streams.decrypt(plaintext_of_made(SECOND)).is_err());
        streams.control.clear();
        let session = session();
        streams.on_key(&key(&session, 0));
        assert!(!released(&mut streams, SECOND + TLS_CALLS_IDLE_NS + 1));
        streams.on_key(&TlsKeyRecord {
            direction: Direction::Ingress,
            ..key(&session, 0)
        });
        assert!(released(&mut streams, SECOND + TLS_CALLS_IDLE_NS + 2));
    }

    #[test]
    fn the_per_call_probes_are_needed_while_they_deliver_plaintext_and_not_after() {
        let mut streams = TlsStreams::default();
        assert!(
            streams
                .decrypt(data(SECOND, b"plaintext from a probe", true))
                .is_err()
        );
        assert_eq!(
            std::mem::take(&mut streams.control),
            [CaptureControl::TlsProbes {
                tgid: TGID,
                needed: true
            }]
        );
        // Ciphertext of a keyed direction says nothing about them.
        streams.on_key(&key(&session(), 0));
        assert!(
            streams
                .decrypt(data(2 * SECOND, &[23, 3, 3, 0, 1], false))
                .is_ok()
        );
        assert!(streams.control.is_empty());
        // Quiet for longer than the idle time: not needed any more.
        assert!(
            streams
                .decrypt(data(SECOND + TLS_CALLS_IDLE_NS + 1, b"", false))
                .is_ok()
        );
        assert_eq!(
            std::mem::take(&mut streams.control),
            [CaptureControl::TlsProbes {
                tgid: TGID,
                needed: false
            }]
        );
        // A keep-alive's record on a direction neither keyed nor in its
        // handshake (a connection idle until now) does not bring them back.
        let mut ping = [0_u8; MAX_CONTROL_RECORD_BYTES];
        ping[..5].copy_from_slice(&[23, 3, 3, 0, 34]);
        let mut idle = data(5 * SECOND, &ping, false);
        idle.conn.conn_id = 8;
        assert!(streams.decrypt(idle).is_err());
        assert!(streams.control.is_empty());
        // A larger one (a request) does.
        let mut request = [0_u8; MAX_CONTROL_RECORD_BYTES + 1];
        request[..5].copy_from_slice(&[23, 3, 3, 0, 35]);
        let mut idle = data(5 * SECOND, &request, false);
        idle.conn.conn_id = 8;
        let conn = idle.conn;
        assert!(streams.decrypt(idle).is_err());
        assert_eq!(
            streams.control,
            [
                CaptureControl::Rekey {
                    conn,
                    fd: 9,
                    direction: Direction::Egress
                },
                CaptureControl::TlsProbes {
                    tgid: TGID,
                    needed: true
                }
            ]
        );
    }

    /// The secret's record was lost (a full ring): capture copies the
    /// direction's ciphertext, its probes skip it as keyed, and nothing
    /// would read it ever (found in the benchmark's watch leg: the
    /// apiserver's per-call TLS probes never left). Its secret is asked
    /// again, once a second at most, with the probes that read it.
    #[test]
    fn ciphertext_no_reader_opens_asks_for_its_secret_again() {
        let mut streams = TlsStreams::default();
        let mut record = vec![0_u8; 100];
        record[..5].copy_from_slice(&[23, 3, 3, 0, 95]);
        assert!(streams.decrypt(data(SECOND, &record, false)).is_err());
        let rekey = CaptureControl::Rekey {
            conn: conn(),
            fd: 9,
            direction: Direction::Egress,
        };
        assert_eq!(
            std::mem::take(&mut streams.control),
            [
                rekey,
                CaptureControl::TlsProbes {
                    tgid: TGID,
                    needed: true
                }
            ]
        );
        assert!(streams.decrypt(data(SECOND + 1, &record, false)).is_err());
        assert!(streams.control.is_empty(), "asked a second ago");
        assert!(
            streams
                .decrypt(data(2 * SECOND + 1, &record, false))
                .is_err()
        );
        assert_eq!(streams.control, [rekey]);
        assert_eq!(streams.rekeys, 2);
        // The secret read again: a reader, nothing more asked.
        streams.control.clear();
        assert!(streams.on_key(&key(&session(), 0)).is_empty());
        assert!(streams.decrypt(data(3 * SECOND, &record, false)).is_ok());
        assert!(streams.control.is_empty(), "{:?}", streams.control);
    }

    /// A reader that lost more records than it can skip (a full ring in a
    /// burst) opens nothing ever again: it goes, and the secret is asked
    /// again.
    #[test]
    fn a_reader_adrift_is_given_up_and_its_secret_asked_again() {
        let session = session();
        let mut streams = TlsStreams::default();
        assert!(streams.on_key(&key(&session, 0)).is_empty());
        let opened = streams
            .decrypt(data(SECOND, &session.client_to_server, false))
            .unwrap();
        assert!(plaintext(&opened) == session.messages);
        // Records of a number far past the reader's: none opens.
        let mut lost = vec![0_u8; 64];
        lost[..5].copy_from_slice(&[23, 3, 3, 0, 59]);
        let mut at = 2 * SECOND;
        while streams.readers_adrift == 0 {
            assert!(at < 2 * SECOND + 1000, "never adrift");
            assert!(streams.decrypt(data(at, &lost, false)).is_ok());
            at += 1;
        }
        assert!(streams.readers.is_empty());
        assert_eq!(streams.rekeys, 1);
        assert!(streams.control.contains(&CaptureControl::Rekey {
            conn: conn(),
            fd: 9,
            direction: Direction::Egress,
        }));
        assert!(streams.stats().application_records >= 4, "its work is kept");
    }
}
