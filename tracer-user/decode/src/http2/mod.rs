//! HTTP/2 (RFC 9113) with HPACK (RFC 7541), for capture that may start
//! mid-connection.
//!
//! In: [`crate::Chunk`]s of one connection. Out: [`Exchange`]s — a stream's
//! request and response headers, bodies and trailers — through
//! [`Http2Connection`]. [`frame`] is the framing layer, [`hpack`] the header
//! block layer with unknown-table degradation. Limits: see `README.md` here.

mod connection;
pub mod frame;
pub mod hpack;

pub use connection::{
    Exchange, HalfStream, HeaderSource, Http2Connection, Http2Error, Limits, Lost, SeenStream,
    TablePoint,
};
pub use hpack::{TableCopy, TableEntry, TableLoadError};

#[cfg(test)]
mod tests;
