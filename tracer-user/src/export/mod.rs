//! Export: where podtrace's results leave the process.
//!
//! In: correlate's output. Out: today, one line per process event on a
//! terminal ([`terminal`]); OTLP, OTLP-JSON files and metrics join here.

pub mod terminal;
