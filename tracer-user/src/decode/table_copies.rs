//! Copies of Go HPACK tables: entry records → one [`TableCopyMessage`], and
//! what the decode stage asks of capture in return.
//!
//! A connection podtrace joined after its HPACK tables were built cannot be
//! decoded from its bytes alone. The decode stage asks capture for copies of
//! the process's tables ([`HpackControl::Ask`]); the kernel sends each copy
//! as entry records closed by a table record, which [`TableAssembler`] puts
//! together; [`super::GrpcDecoder`] loads them into its wire decoders. Once
//! no connection of a process needs them, the HPACK probes (a uprobe hit per
//! header field) are detached from it ([`HpackControl::FieldProbes`]).
//!
//! [`HpackControl::Ask`]: crate::capture::HpackControl::Ask
//! [`HpackControl::FieldProbes`]: crate::capture::HpackControl::FieldProbes

use tracer_common::io::HeaderSide;
use tracer_decode::http2::{TableCopy, TableEntry};

use crate::{
    bounded::BoundedMap,
    capture::{ConnKey, HpackEntryRecord, HpackTableRecord},
};

/// Copies being assembled at once; past it the oldest are forgotten.
const MAX_ASSEMBLING: usize = 256;

/// A complete copy of one of a connection's tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableCopyMessage {
    /// The connection.
    pub conn: ConnKey,
    /// When the copy was taken (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// The process's decoder (what it receives) or encoder (what it sends).
    pub side: HeaderSide,
    /// The entries; `None` when the copy was incomplete.
    pub copy: Option<TableCopy>,
}

/// Entry records waiting for their table record.
#[derive(Debug)]
pub struct TableAssembler {
    /// A copy forgotten at the bound arrives incomplete (its table record
    /// finds no entries), and is counted so.
    assembling: BoundedMap<(ConnKey, u8), Vec<HpackEntryRecord>>,
    /// Copies that arrived incomplete (a lost entry, too many entries).
    pub incomplete: u64,
}

impl Default for TableAssembler {
    fn default() -> Self {
        Self {
            assembling: BoundedMap::new(MAX_ASSEMBLING),
            incomplete: 0,
        }
    }
}

impl TableAssembler {
    /// Keeps one entry of a copy.
    pub fn on_entry(&mut self, entry: HpackEntryRecord) {
        let key = (entry.conn, entry.side as u8);
        if entry.index == 0 {
            self.assembling.insert(key, Vec::new());
        }
        if let Some(entries) = self.assembling.get_mut(&key) {
            entries.push(entry);
        }
    }

    /// Closes a copy: complete when every entry arrived, in order, and their
    /// sizes add up to what Go says the table holds.
    pub fn on_table(&mut self, table: &HpackTableRecord) -> TableCopyMessage {
        let entries = self
            .assembling
            .remove(&(table.conn, table.side as u8))
            .unwrap_or_default();
        let complete = table.count.is_some_and(|count| {
            entries.len() == count as usize
                && entries
                    .iter()
                    .enumerate()
                    .all(|(index, entry)| entry.index as usize == index)
                && entries
                    .iter()
                    .map(|entry| u64::from(entry.size))
                    .sum::<u64>()
                    == u64::from(table.size)
        });
        if !complete {
            self.incomplete += 1;
        }
        TableCopyMessage {
            conn: table.conn,
            ts_ns: table.ids.ts_ns,
            side: table.side,
            copy: complete.then(|| TableCopy {
                max_size: table.max_size as usize,
                entries: entries
                    .into_iter()
                    .map(|entry| TableEntry {
                        field: entry.field,
                        size: entry.size as usize,
                    })
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::ProcessIds;

    const CONN: ConnKey = ConnKey {
        tgid: 7,
        conn_id: 9,
    };

    fn ids() -> ProcessIds {
        ProcessIds {
            ts_ns: 1,
            tgid: 7,
            tid: 7,
        }
    }

    fn entry(index: u32, field: Option<(&str, &str)>, size: u32) -> HpackEntryRecord {
        HpackEntryRecord {
            ids: ids(),
            conn: CONN,
            side: HeaderSide::Decoder,
            index,
            size,
            field: field.map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())),
        }
    }

    fn table(count: Option<u32>, size: u32) -> HpackTableRecord {
        HpackTableRecord {
            ids: ids(),
            conn: CONN,
            side: HeaderSide::Decoder,
            count,
            size,
            max_size: 4096,
        }
    }

    #[test]
    fn a_copy_is_complete_when_every_entry_arrived_and_sizes_add_up() {
        let mut tables = TableAssembler::default();
        tables.on_entry(entry(0, Some((":path", "/a")), 39));
        tables.on_entry(entry(1, None, 100));
        let message = tables.on_table(&table(Some(2), 139));
        let copy = message.copy.expect("complete");
        assert_eq!(copy.entries.len(), 2);
        assert_eq!(copy.entries[1].field, None);
        assert_eq!(tables.incomplete, 0);
    }

    #[test]
    fn a_lost_entry_or_a_refused_copy_is_incomplete() {
        let mut tables = TableAssembler::default();
        tables.on_entry(entry(0, Some((":path", "/a")), 39));
        tables.on_entry(entry(2, None, 100));
        assert_eq!(tables.on_table(&table(Some(3), 239)).copy, None);
        // The kernel refused to copy (too many entries): no entries at all.
        assert_eq!(tables.on_table(&table(None, 0)).copy, None);
        // Sizes that do not add up to Go's size.
        tables.on_entry(entry(0, Some((":path", "/a")), 39));
        assert_eq!(tables.on_table(&table(Some(1), 40)).copy, None);
        assert_eq!(tables.incomplete, 3);
    }
}
