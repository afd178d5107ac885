//! Decode: captured records → typed messages that say what a component did.
//!
//! Pure and deterministic: no kernel, no tokio. In: [`RawEvent`]s. Out:
//! [`Message`]s: process events (argv with secrets redacted), connection and
//! file events, and HTTP/2 header fields tied to their connection
//! ([`headers`]). The protocol decoders (`tracer-decode`: HTTP/2, gRPC,
//! protobuf, etcd WAL) are wired in here next.

pub mod grpc_calls;
pub mod headers;
pub mod process;

pub use grpc_calls::{CriMessage, GrpcDecoder};
pub use headers::{HeaderAttributor, HeaderMessage};

use crate::capture::{
    ConnRecord, DataRecord, ExecRecord, ExitRecord, FileOpenRecord, ForkRecord, FsyncRecord,
    RawEvent,
};

/// What a component did, as far as one record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A process replaced its image; argv is redacted.
    Exec(ExecRecord),
    /// A process forked.
    Fork(ForkRecord),
    /// A process exited.
    Exit(ExitRecord),
    /// Bytes through a followed socket or file (protocol decoding comes here).
    Data(DataRecord),
    /// A socket connected, accepted or closed.
    Conn(ConnRecord),
    /// A followed file was synced.
    Fsync(FsyncRecord),
    /// A followed file was opened.
    FileOpen(FileOpenRecord),
    /// An HTTP/2 header field on a connection.
    Header(HeaderMessage),
    /// A finished CRI call.
    Cri(CriMessage),
}

/// The decode stage's state: what ties events to one another.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Attribution of HPACK header fields to connections.
    pub headers: HeaderAttributor,
    /// HTTP/2 and gRPC decoding of connections seen from their start.
    pub grpc: GrpcDecoder,
}

impl Decoder {
    /// Decodes one captured event into the messages it yields (header fields
    /// an egress write releases come before the write itself).
    pub fn decode(&mut self, event: RawEvent) -> Vec<Message> {
        match event {
            RawEvent::Exec(mut exec) => {
                process::redact_argv(&mut exec.argv);
                vec![Message::Exec(exec)]
            }
            RawEvent::Fork(fork) => vec![Message::Fork(fork)],
            RawEvent::Exit(exit) => vec![Message::Exit(exit)],
            RawEvent::Data(data) => {
                let mut messages: Vec<Message> = self
                    .headers
                    .on_data(&data)
                    .into_iter()
                    .map(Message::Header)
                    .collect();
                messages.extend(self.grpc.on_data(&data).into_iter().map(Message::Cri));
                messages.push(Message::Data(data));
                messages
            }
            RawEvent::Conn(conn) => {
                let mut messages: Vec<Message> = self
                    .grpc
                    .on_conn(&conn)
                    .into_iter()
                    .map(Message::Cri)
                    .collect();
                messages.push(Message::Conn(conn));
                messages
            }
            RawEvent::Fsync(fsync) => vec![Message::Fsync(fsync)],
            RawEvent::FileOpen(open) => vec![Message::FileOpen(open)],
            RawEvent::Header(header) => self
                .headers
                .on_header(header)
                .map(Message::Header)
                .into_iter()
                .collect(),
        }
    }
}
