//! Correlate: messages → what happened to which process (and, as the
//! protocol decoders arrive, to which Pod).
//!
//! Pure and deterministic: no kernel, no tokio. In: [`Message`]s. Out:
//! [`ProcessActivity`]: each process event with its parent's name, its
//! wall-clock time, and for exits how long the process lived.

pub mod process_table;

pub use process_table::{ProcessActivity, ProcessTable};
