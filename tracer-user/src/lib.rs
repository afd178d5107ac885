//! The podtrace agent.
//!
//! Data flows one way, one module per stage, each owning its output type:
//! [`capture`] (eBPF object, ring buffer → `RawEvent`) → [`decode`]
//! (`RawEvent` → `Message`) → [`correlate`] (`Message` → process activity,
//! spans of Pod traces) → [`export`] (terminal, OTLP, OTLP-JSON, metrics).
//! [`pipeline`] wires the stages as tokio tasks; [`stats`] is what the stages
//! count of what they lost; [`bounded`] the maps that forget their oldest
//! entry when full; [`check`] reports whether the
//! host has the kernel features podtrace needs; [`inspect`] reports
//! what podtrace finds in a Go binary; [`explain`] tells a Pod's story from
//! exported spans. `main.rs` only parses the
//! command line.

pub mod bounded;
pub mod capture;
pub mod check;
pub mod correlate;
pub mod decode;
pub mod explain;
pub mod export;
pub mod inspect;
pub mod pipeline;
pub mod stats;
