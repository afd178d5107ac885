//! Export: where podtrace's results leave the process.
//!
//! In: correlate's output. Out: today, one line per activity on a terminal
//! ([`terminal`]) and readable dumps of recordings ([`dump`]); OTLP,
//! OTLP-JSON files and metrics join here.

pub mod dump;
pub mod terminal;
