//! Why the kernel side dropped or cut data. Each reason is one slot of the
//! per-CPU `DROPS` array; user space sums the CPUs and reports every slot.

/// A reason for losing or truncating data in the kernel.
///
/// The discriminant is the index into the `DROPS` per-CPU array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// `bpf_ringbuf_reserve` failed: user space is not keeping up. The event is lost.
    RingBufFull = 0,
    /// The `TARGETS` map is full: a new process could not be followed.
    TargetMapFull = 1,
    /// A descendant deeper than `Config::max_descendant_depth` was not followed.
    DescendantDepthLimit = 2,
    /// Reading kernel or user memory failed; the affected field is left empty.
    ReadFailed = 3,
    /// An exec's argument bytes were longer than `ARGS_BYTES` and were cut.
    ArgsTruncated = 4,
    /// An exec's filename was longer than `FILENAME_BYTES` and was cut.
    FilenameTruncated = 5,
    /// A program's slot was not where the loader should have put it: a uprobe
    /// fired with an attach cookie outside `PROBE_HITS`, or a hooked
    /// syscall's program was missing from `SYSCALL_PROGRAMS` (loader bugs).
    ProbeSlotOutOfRange = 6,
    /// The `FDS` map is full: a socket or file could not be followed.
    FdMapFull = 7,
    /// The `ACTIVE_CALLS` map is full: a syscall's data was lost.
    ActiveCallsFull = 8,
    /// Payload bytes beyond the configured prefix were not copied.
    DataTruncated = 9,
    /// A Go TLS probe could not map its `tls.Conn` to a followed socket
    /// (a wrapped `net.Conn`, or a socket opened before podtrace and missed).
    TlsConnUnresolved = 10,
    /// The `GO_TLS_READS` map is full: a TLS read's plaintext was lost.
    GoReadsFull = 11,
    /// A Go HPACK table podtrace was asked to copy had more entries than
    /// `MAX_HPACK_TABLE_ENTRIES`; the connection keeps its header probes.
    HpackTableTooLarge = 12,
}

impl DropReason {
    /// Every reason, in index order.
    pub const ALL: [DropReason; 13] = [
        DropReason::RingBufFull,
        DropReason::TargetMapFull,
        DropReason::DescendantDepthLimit,
        DropReason::ReadFailed,
        DropReason::ArgsTruncated,
        DropReason::FilenameTruncated,
        DropReason::ProbeSlotOutOfRange,
        DropReason::FdMapFull,
        DropReason::ActiveCallsFull,
        DropReason::DataTruncated,
        DropReason::TlsConnUnresolved,
        DropReason::GoReadsFull,
        DropReason::HpackTableTooLarge,
    ];
    /// Number of slots in the `DROPS` array.
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// Stable snake_case name, used in logs and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::RingBufFull => "ring_buffer_full",
            DropReason::TargetMapFull => "target_map_full",
            DropReason::DescendantDepthLimit => "descendant_depth_limit",
            DropReason::ReadFailed => "read_failed",
            DropReason::ArgsTruncated => "args_truncated",
            DropReason::FilenameTruncated => "filename_truncated",
            DropReason::ProbeSlotOutOfRange => "probe_slot_out_of_range",
            DropReason::FdMapFull => "fd_map_full",
            DropReason::ActiveCallsFull => "active_calls_full",
            DropReason::DataTruncated => "data_truncated",
            DropReason::TlsConnUnresolved => "tls_conn_unresolved",
            DropReason::GoReadsFull => "go_reads_full",
            DropReason::HpackTableTooLarge => "hpack_table_too_large",
        }
    }

    /// Whether this reason loses a whole event or target (as opposed to
    /// cutting a field short, or following a policy).
    pub const fn loses_events(self) -> bool {
        matches!(
            self,
            DropReason::RingBufFull
                | DropReason::TargetMapFull
                | DropReason::FdMapFull
                | DropReason::ActiveCallsFull
                | DropReason::GoReadsFull
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_index_order() {
        for (index, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index, "{reason:?}");
        }
    }
}
