//! Decode: captured records → typed messages that say what a component did.
//!
//! Pure and deterministic: no kernel, no tokio. In: [`RawEvent`]s. Out:
//! [`Message`]s. Today it handles process events (argv with secrets
//! redacted); the protocol decoders (HTTP/2, gRPC, protobuf, etcd WAL) join
//! here, each in its own module.

pub mod process;

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
}

/// Decodes one captured event.
pub fn decode(event: RawEvent) -> Message {
    match event {
        RawEvent::Exec(mut exec) => {
            process::redact_argv(&mut exec.argv);
            Message::Exec(exec)
        }
        RawEvent::Fork(fork) => Message::Fork(fork),
        RawEvent::Exit(exit) => Message::Exit(exit),
        RawEvent::Data(data) => Message::Data(data),
        RawEvent::Conn(conn) => Message::Conn(conn),
        RawEvent::Fsync(fsync) => Message::Fsync(fsync),
        RawEvent::FileOpen(open) => Message::FileOpen(open),
    }
}
