//! HTTP/1.1 (RFC 9112), for capture that may start mid-connection or lose
//! bytes.
//!
//! In: [`crate::Chunk`]s of one connection. Out: [`Exchange`]s — a request
//! line, a status line, their header fields (credentials dropped), bodies
//! (de-chunked, bounded) and timestamps, paired in order as HTTP/1.1
//! pipelining requires — through [`Http1Connection`], plus the events of
//! Kubernetes watch responses as they arrive ([`WatchUpdate`]), and the Raft
//! messages of etcd's peer streams ([`RaftUpdate`]).
//! [`framing`] is the head and body-length layer (on `httparse`). Limits:
//! see `README.md` here.

mod connection;
pub mod framing;

pub use connection::{
    Exchange, Half, Http1Connection, Http1Error, Limits, RaftUpdate, Request, Response, Upgrade,
    WatchUpdate,
};
pub use framing::{Framing, Headers};

#[cfg(test)]
mod tests;
