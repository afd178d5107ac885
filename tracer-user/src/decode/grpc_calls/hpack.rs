//! Request headers of connections whose HPACK tables predate podtrace: copies
//! of the tables read from the process, and Go's HPACK probes' fields until a
//! copy is loaded (attached only while a connection needs them).

use super::*;

/// What the decode stage last said of a process's HPACK probes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FieldProbes {
    /// Attach (true) or detach (false); `None` before anything was said.
    said: Option<bool>,
    /// When their need was last looked at.
    checked_ns: u64,
    /// When a connection of the process last needed them.
    last_needed_ns: u64,
}

/// Where copying a connection's two HPACK tables stands.
#[derive(Debug, Default)]
pub(super) struct TableSync {
    /// The process's decoder: what it receives.
    decoder: TableLoad,
    /// The process's encoder: what it sends.
    encoder: TableLoad,
    /// A copy of the encoder's table, taken at a write whose bytes come next.
    pub(super) pending_encoder: Option<Option<TableCopy>>,
    /// When the copies were last asked for (CLOCK_MONOTONIC ns).
    pub(super) asked_ts_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TableLoad {
    Waiting { attempts: u8 },
    Loaded,
    GaveUp,
}

impl Default for TableLoad {
    fn default() -> Self {
        Self::Waiting { attempts: 0 }
    }
}

impl TableSync {
    /// Both copies asked for at `ts_ns` (CLOCK_MONOTONIC ns), none loaded.
    pub(super) fn asked_at(ts_ns: u64) -> Self {
        Self {
            asked_ts_ns: ts_ns,
            ..Self::default()
        }
    }

    fn load_mut(&mut self, side: HeaderSide) -> &mut TableLoad {
        match side {
            HeaderSide::Decoder => &mut self.decoder,
            HeaderSide::Encoder => &mut self.encoder,
        }
    }
}

/// Request header blocks reported by Go's HPACK probes on one connection.
#[derive(Default)]
pub(super) struct ProbeHeaders {
    /// Blocks in the order they were encoded or decoded; the last one may
    /// still be growing. A block with a stream has been given to it.
    blocks: std::collections::VecDeque<ProbeBlock>,
    /// The highest stream id given a block in order.
    paired_through: u32,
    /// Streams given a block lately.
    paired: std::collections::VecDeque<u32>,
}

struct ProbeBlock {
    fields: Vec<(String, String)>,
    /// When its first field was encoded or decoded.
    ts_ns: u64,
    stream: Option<u32>,
}

impl ProbeHeaders {
    /// Adds one field, starting the next block where [`starts_block`] says.
    fn add(&mut self, name: &str, value: &str, ts_ns: u64) -> Option<u32> {
        let starts_block = self
            .blocks
            .back()
            .is_none_or(|block| starts_block(block.fields.iter().map(|(n, _)| n.as_str()), name));
        if starts_block {
            // Blocks already given to a stream are done with, but the last.
            while self.blocks.len() > 1 && self.blocks.front().is_some_and(|b| b.stream.is_some()) {
                self.blocks.pop_front();
            }
            if self.blocks.len() >= MAX_WAITING_BLOCKS {
                self.blocks.pop_front();
            }
            self.blocks.push_back(ProbeBlock {
                fields: Vec::new(),
                ts_ns,
                stream: None,
            });
        }
        let block = self.blocks.back_mut()?;
        block.fields.push((name.to_owned(), value.to_owned()));
        block.stream
    }

    /// Gives waiting blocks to the streams whose request began since;
    /// returns the pairs. A stream whose `:path` the wire decoded (a literal,
    /// right even when the dynamic table is not) gets the block with that
    /// path; the others get the blocks in order. Order alone misleads when a
    /// block was lost: every later block would go to the stream before its own.
    fn pair(&mut self, streams: &[SeenStream]) -> Vec<(u32, Vec<(String, String)>)> {
        let mut pairs = Vec::new();
        for stream in streams {
            let Some(path) = &stream.wire_path else {
                continue;
            };
            if self.paired.contains(&stream.id) {
                continue;
            }
            let found = self.blocks.iter_mut().find(|block| {
                block.stream.is_none()
                    && block.path() == Some(path.as_str())
                    && block.ts_ns.abs_diff(stream.first_ts_ns) <= PROBE_BLOCK_WINDOW_NS
            });
            if let Some(block) = found {
                block.stream = Some(stream.id);
                pairs.push((stream.id, block.fields.clone()));
                self.mark_paired(stream.id);
            }
        }
        let paired_through = self.paired_through;
        let mut in_order = streams
            .iter()
            .filter(|stream| {
                stream.id > paired_through
                    && stream.wire_path.is_none()
                    && !self.paired.contains(&stream.id)
            })
            .map(|stream| (stream.id, stream.first_ts_ns))
            .peekable();
        let mut newly = Vec::new();
        for block in self.blocks.iter_mut().filter(|b| b.stream.is_none()) {
            while let Some(&(id, stream_ts)) = in_order.peek() {
                if stream_ts + PROBE_BLOCK_WINDOW_NS < block.ts_ns {
                    // Begun before this block: a stream older than podtrace.
                    in_order.next();
                    continue;
                }
                if block.ts_ns + PROBE_BLOCK_WINDOW_NS >= stream_ts {
                    block.stream = Some(id);
                    pairs.push((id, block.fields.clone()));
                    newly.push(id);
                    in_order.next();
                }
                // Else the block's own frame was never seen: it waits here
                // until a newer block starts and it is dropped.
                break;
            }
        }
        for id in newly {
            self.paired_through = self.paired_through.max(id);
            self.mark_paired(id);
        }
        pairs
    }

    fn mark_paired(&mut self, id: u32) {
        if self.paired.len() >= MAX_WAITING_BLOCKS {
            self.paired.pop_front();
        }
        self.paired.push_back(id);
    }
}

impl ProbeBlock {
    fn path(&self) -> Option<&str> {
        self.fields
            .iter()
            .find(|(name, _)| name == ":path")
            .map(|(_, value)| value.as_str())
    }
}

/// Loads a copy of the process's decoder or encoder table into the wire
/// decoder of the direction it decodes.
pub(super) fn load_copy(
    connection: &mut Connection,
    side: HeaderSide,
    copy: Option<TableCopy>,
) -> Result<(), TableLoadError> {
    let copy = copy.ok_or_else(|| TableLoadError::Inconsistent("entries were lost".into()))?;
    let point = match side {
        HeaderSide::Decoder => TablePoint::BeforeNext,
        HeaderSide::Encoder => TablePoint::AfterPushed,
    };
    let direction = connection.wire_direction(side);
    connection.http2.load_table(direction, point, &copy)?;
    let resets = connection.http2.table_resets(direction);
    match direction {
        tracer_decode::Direction::ClientToServer => connection.resets_seen.0 = resets,
        tracer_decode::Direction::ServerToClient => connection.resets_seen.1 = resets,
    }
    Ok(())
}

/// After lost bytes or a corrupt block a direction's table is unknown
/// again: its request headers come from the probes until a new copy is
/// loaded. Returns whether anything changed.
pub(super) fn tables_forgotten(
    connection: &mut Connection,
    control: &mut Vec<CaptureControl>,
    conn: ConnKey,
    now_ns: u64,
) -> bool {
    let resets = (
        connection
            .http2
            .table_resets(tracer_decode::Direction::ClientToServer),
        connection
            .http2
            .table_resets(tracer_decode::Direction::ServerToClient),
    );
    if resets == connection.resets_seen {
        return false;
    }
    connection.resets_seen = resets;
    connection
        .probe_headers
        .get_or_insert_with(ProbeHeaders::default);
    if let Some(tables) = connection.tables.as_mut() {
        let mut asked = false;
        for side in [HeaderSide::Decoder, HeaderSide::Encoder] {
            let load = tables.load_mut(side);
            if *load == TableLoad::Loaded {
                *load = TableLoad::default();
                if !asked {
                    control.push(CaptureControl::Hpack(HpackControl::Ask(conn)));
                    tables.asked_ts_ns = now_ns;
                    asked = true;
                }
            }
        }
    }
    true
}

pub(super) fn pair_probe_headers(connection: &mut Connection) {
    let Some(probe_headers) = connection.probe_headers.as_mut() else {
        return;
    };
    let request = tracer_decode::Direction::ClientToServer;
    for (stream, fields) in probe_headers.pair(&connection.http2.streams_seen(request)) {
        connection.http2.supply_headers(request, stream, fields);
    }
}

impl Connection {
    /// Whether the HPACK probes' fields are still needed for this connection:
    /// its request headers cannot all be decoded from the wire yet.
    pub(super) fn needs_fields(&self, now_ns: u64) -> bool {
        // A connection idle since podtrace joined it needs nothing after a
        // grace period: its first bytes bring the probes back.
        let idle = self.fed_bytes == 0 && now_ns > self.joined_ts_ns + self.idle_grace_ns;
        if self.probe_headers.is_none() || idle || now_ns > self.need_ends_ns() {
            return false;
        }
        let Some(tables) = &self.tables else {
            return true;
        };
        let (request, response) = match self.side {
            Side::Server => (tables.decoder, tables.encoder),
            Side::Client => (tables.encoder, tables.decoder),
        };
        let response_waits = matches!(response, TableLoad::Waiting { .. })
            && now_ns < tables.asked_ts_ns.saturating_add(RESPONSE_TABLE_WAIT_NS);
        request != TableLoad::Loaded || response_waits
    }

    /// Until when its need for the HPACK probes lasts without a request:
    /// [`REQUEST_IDLE_GRACE_NS`] after its joining or its last request that
    /// held it open, at least its idle grace.
    pub(super) fn need_ends_ns(&self) -> u64 {
        let since = self.joined_ts_ns.max(self.last_request_ns);
        (since + REQUEST_IDLE_GRACE_NS).max(self.joined_ts_ns + self.idle_grace_ns)
    }

    /// Whether `exchange`, finished on this connection, brings the HPACK
    /// probes back: the first one whose `:path` the wire could not decode
    /// (its table entry predates podtrace and no copy of the table was
    /// loaded), if it can be about a Pod — a REST request, or a gRPC one
    /// whose body names Pods and is not a read of keys ([`tracer_decode::etcd::reads_keys_only`]:
    /// kube-apiserver counts each resource's objects every 60–132 s, Pods
    /// included, on the connection whose Pod writes follow; each count
    /// called the probes of the apiserver and etcd back for ~3 s, though
    /// no span comes of a read). Not a gRPC request that names no Pod: the
    /// per-minute object count and the lease keep-alives of kube-apiserver's
    /// ~30 per-resource etcd clients, each calling the probes back for
    /// seconds, kept the apiserver's attached through its first minutes. Not
    /// the later ones: a connection whose tables cannot be copied would call
    /// them back for good. The request itself is lost either way; the probes
    /// read the next ones.
    pub(super) fn calls_probes_back(&mut self, exchange: &Exchange) -> bool {
        // A stream begun before podtrace (no request header block seen)
        // tells nothing of the table.
        let unresolved_path = exchange.request.headers.is_some() && exchange.path().is_none();
        if self.called_probes_back || self.probe_headers.is_none() || !unresolved_path {
            return false;
        }
        let loaded = self.tables.as_ref().is_some_and(|tables| {
            let request = match self.side {
                Side::Server => tables.decoder,
                Side::Client => tables.encoder,
            };
            request == TableLoad::Loaded
        });
        if loaded {
            return false;
        }
        let body = &exchange.request.body;
        let message = match parse_message(body) {
            Ok(Decoded::Message { msg, consumed }) if consumed == body.len() => Some(msg),
            _ => None,
        };
        let calls_back = match resources_named(body) {
            ResourcesNamed::PodsOrSeveral => !message.is_some_and(|msg| {
                !msg.compressed && tracer_decode::etcd::reads_keys_only(msg.bytes)
            }),
            ResourcesNamed::One(_) => false,
            ResourcesNamed::None => message.is_none(),
        };
        // Spent only by a request that called them back: a read before it
        // (the per-minute count of Pods, on the connection that carries the
        // Pod writes) would otherwise leave the first Pod write after it
        // unread for the connection's life.
        self.called_probes_back |= calls_back;
        calls_back
    }

    /// The wire direction of what the process receives or sends.
    fn wire_direction(&self, table: HeaderSide) -> tracer_decode::Direction {
        match (self.side, table) {
            (Side::Server, HeaderSide::Decoder) | (Side::Client, HeaderSide::Encoder) => {
                tracer_decode::Direction::ClientToServer
            }
            (Side::Server, HeaderSide::Encoder) | (Side::Client, HeaderSide::Decoder) => {
                tracer_decode::Direction::ServerToClient
            }
        }
    }
}

impl GrpcDecoder {
    /// A copy of one of a connection's HPACK tables: the decoder's is
    /// loaded at once (it was taken before the bytes of the read that
    /// follows), the encoder's after the bytes of the write that follows.
    pub fn on_table(&mut self, message: TableCopyMessage) {
        let Some(connection) = self.connections.get_mut(&message.conn) else {
            tracing::debug!(conn = ?message.conn, "HPACK table copy of an unknown connection");
            return;
        };
        let Some(tables) = connection.tables.as_mut() else {
            tracing::debug!(conn = ?message.conn, "HPACK table copy not asked for");
            return;
        };
        let changed = match message.side {
            HeaderSide::Decoder => {
                let result = load_copy(connection, HeaderSide::Decoder, message.copy);
                self.loaded(message.conn, HeaderSide::Decoder, result)
            }
            HeaderSide::Encoder => {
                tables.pending_encoder = Some(message.copy);
                false
            }
        };
        if changed {
            self.update_field_probes(message.conn.tgid, message.ts_ns);
        }
    }

    /// Notes a header field from process `tgid`'s HPACK probes: whether it
    /// needs them is looked at again now and then while they fire.
    pub fn on_field_from(&mut self, tgid: u32, ts_ns: u64) {
        let due = self
            .field_probes
            .get(&tgid)
            .is_none_or(|state| ts_ns > state.checked_ns + FIELD_PROBES_RECHECK_NS);
        if due {
            self.update_field_probes(tgid, ts_ns);
        }
    }

    /// Records the outcome of loading a copy; returns whether the
    /// connection's need for header fields may have changed.
    pub(super) fn loaded(
        &mut self,
        conn: ConnKey,
        side: HeaderSide,
        result: Result<(), TableLoadError>,
    ) -> bool {
        let Some(tables) = self
            .connections
            .get_mut(&conn)
            .and_then(|connection| connection.tables.as_mut())
        else {
            return false;
        };
        let load = tables.load_mut(side);
        tracing::debug!(?conn, ?side, ?result, "HPACK table copy");
        match result {
            Ok(()) => {
                self.tables_loaded += 1;
                *load = TableLoad::Loaded;
            }
            Err(error) => {
                self.tables_refused += 1;
                let TableLoad::Waiting { attempts } = *load else {
                    return false;
                };
                if attempts + 1 >= MAX_TABLE_ATTEMPTS {
                    tracing::debug!(?conn, ?side, %error, "HPACK table copies refused; header fields stay with the probes");
                    *load = TableLoad::GaveUp;
                } else {
                    *load = TableLoad::Waiting {
                        attempts: attempts + 1,
                    };
                    self.control
                        .push(CaptureControl::Hpack(HpackControl::Again(conn, side)));
                    return false;
                }
            }
        }
        if !matches!(tables.decoder, TableLoad::Waiting { .. })
            && !matches!(tables.encoder, TableLoad::Waiting { .. })
        {
            self.control
                .push(CaptureControl::Hpack(HpackControl::Forget(conn)));
            if let Some(connection) = self.connections.get_mut(&conn) {
                if !connection.needs_fields(u64::MAX) {
                    // The wire decodes every block from here on: the blocks
                    // the probes reported go to their streams one last time.
                    pair_probe_headers(connection);
                    connection.probe_headers = None;
                }
            }
        }
        true
    }

    /// Tells capture whether process `tgid` needs its HPACK probes, when
    /// that changed: at once when it does, [`FIELD_PROBES_HOLD_NS`] after it
    /// last did when it no longer does.
    pub(super) fn update_field_probes(&mut self, tgid: u32, now_ns: u64) {
        let needs = self
            .connections
            .iter()
            .any(|(conn, connection)| conn.tgid == tgid && connection.needs_fields(now_ns));
        let state = self.field_probes.entry(tgid).or_default();
        state.checked_ns = now_ns;
        if needs {
            state.last_needed_ns = now_ns;
        }
        // Held only while attached: a process that never needed them is
        // not given them by the hold.
        let held = state.said == Some(true)
            && now_ns < state.last_needed_ns.saturating_add(FIELD_PROBES_HOLD_NS);
        let needed = needs || held;
        if state.said != Some(needed) {
            state.said = Some(needed);
            self.control
                .push(CaptureControl::Hpack(HpackControl::FieldProbes {
                    tgid,
                    needed,
                }));
        }
    }

    /// Time passed (a live agent's timer): the processes whose HPACK probes
    /// are attached are looked at again, so that probes held past their
    /// last need are detached though nothing else happens.
    pub fn check_field_probes(&mut self, now_ns: u64) {
        let held: Vec<u32> = self
            .field_probes
            .iter()
            .filter(|(_, state)| state.said == Some(true))
            .map(|(&tgid, _)| tgid)
            .collect();
        for tgid in held {
            self.update_field_probes(tgid, now_ns);
        }
    }

    /// A header field from Go's HPACK probes: on a connection open before
    /// podtrace started, a request field goes to its stream.
    pub fn on_header(&mut self, header: &HeaderMessage) {
        let Some(connection) = self.connections.get_mut(&header.conn) else {
            return;
        };
        // Request headers: what a server decodes, what a client encodes.
        let request = match connection.side {
            Side::Server => Direction::Ingress,
            Side::Client => Direction::Egress,
        };
        let Some(probe_headers) = connection.probe_headers.as_mut() else {
            return;
        };
        if header.direction != request || header.redacted {
            return;
        }
        if let Some(stream) = probe_headers.add(&header.name, &header.value, header.ts_ns) {
            connection.http2.supply_headers(
                tracer_decode::Direction::ClientToServer,
                stream,
                vec![(header.name.clone(), header.value.clone())],
            );
        }
        pair_probe_headers(connection);
    }
}
