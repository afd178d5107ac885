//! Decode: captured records → typed messages that say what a component did.
//!
//! Pure and deterministic: no kernel, no tokio. In: [`RawEvent`]s. Out:
//! [`Message`]s. Today it handles process events (argv with secrets
//! redacted); the protocol decoders (HTTP/2, gRPC, protobuf, etcd WAL) join
//! here, each in its own module.

pub mod process;

use crate::capture::{ExecRecord, ExitRecord, ForkRecord, RawEvent};

/// What a component did, as far as one record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A process replaced its image; argv is redacted.
    Exec(ExecRecord),
    /// A process forked.
    Fork(ForkRecord),
    /// A process exited.
    Exit(ExitRecord),
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
    }
}
