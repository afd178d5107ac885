//! Export: where podtrace's results leave the process.
//!
//! In: correlate's output. Out: one line per activity on a terminal
//! ([`terminal`]) and a waterfall per finished trace ([`waterfall`]),
//! readable dumps of recordings ([`dump`]), Prometheus metrics of the phases
//! ([`metrics`]) and recent traces for `podtrace explain` ([`recent`]), both
//! served on the metrics address. Spans leave over OTLP gRPC or HTTP/protobuf through a
//! bounded, batching, retrying exporter task ([`otlp`]), or as OTLP-JSON lines
//! appended to a file ([`otlp_json`]).

pub mod alerts;
pub mod dump;
pub mod metrics;
pub mod otlp;
pub mod otlp_json;
pub mod recent;
pub mod terminal;
pub mod waterfall;
