//! Export: where podtrace's results leave the process.
//!
//! In: correlate's output. Out: today, one line per activity on a terminal
//! ([`terminal`]) and readable dumps of recordings ([`dump`]); metrics join
//! here. Spans leave over OTLP gRPC or HTTP/protobuf through a bounded,
//! batching, retrying exporter task ([`otlp`]), or as OTLP-JSON lines
//! appended to a file ([`otlp_json`]).

pub mod dump;
pub mod otlp;
pub mod otlp_json;
pub mod terminal;
pub mod waterfall;
