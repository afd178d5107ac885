//! etcd's peer protocol (rafthttp): the Raft messages members send each other
//! on their long-lived stream connections.
//!
//! Each member (the dialer) opens `GET /raft/stream/{msgapp,message}/<its
//! id>` on every peer; the dialled member (the writer, `X-Raft-To`) answers 200 and writes
//! its messages for the dialer into the response body for as long as the
//! connection lasts. So the leader's appends to a follower travel on the
//! connection the follower dialled, and the follower's answers on the one the
//! leader dialled. Two stream types (etcd
//! `server/etcdserver/api/rafthttp/{stream,msg_codec,msgappv2_codec}.go`):
//! - `message`: each `raftpb.Message` as a big-endian u64 length and the
//!   message (answers, heartbeats, forwarded proposals, votes);
//! - `msgapp`, framed as etcd's "MsgApp v2" (the leader's appends): a type byte, then for 0 nothing (a
//!   link heartbeat), for 2 a `MsgApp` as a u64 length and the message, for
//!   1 an *AppEntries*: a `MsgApp` whose index and term follow from the
//!   previous one on the stream, sent as a u64 count of entries, each entry
//!   a u64 length and a `raftpb.Entry`, then the u64 commit index.
//!
//! In: the body of one stream response, de-chunked, in arrival order, from
//! its first byte — or, for a stream older than the capture, from the first
//! write that frames as one ([`joined`]). Out: [`RaftMessage`]s — type, members, term, index,
//! commit, rejection, and each entry's term, index and data (an
//! `InternalRaftRequest`; its KV request through [`crate::wal::kv_request`],
//! as for the WAL's copy of the same entry).

use prost::Message;

use crate::pb::raftpb;

/// Largest message or entry decoded: etcd's own limit on a WAL record (an
/// entry sent is one the leader wrote). A larger one is skipped, counted.
pub const MAX_MESSAGE_BYTES: u64 = 10 << 20;
const LENGTH_BYTES: usize = 8;

/// Which stream a connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// `msgapp` (etcd's stream type "MsgApp v2"): the writer's appends to
    /// the dialer.
    MsgAppV2,
    /// `message`: every other message.
    Message,
}

/// A stream as its request names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerStream {
    /// Which stream.
    pub kind: StreamKind,
    /// The member that dialled (and reads the messages).
    pub dialer: u64,
    /// The member that writes them (`X-Raft-To`; 0 when the request did not
    /// say, which etcd 3 always does).
    pub writer: u64,
}

impl PeerStream {
    /// The stream a request opens, from its target
    /// (`/raft/stream/msgapp/8e9e05c52164694d`) and its `X-Raft-To`
    /// header; `None` for any other request. Member ids are in hex, as
    /// etcd prints them.
    pub fn from_request(method: &str, target: &str, raft_to: Option<&str>) -> Option<PeerStream> {
        if method != "GET" {
            return None;
        }
        let (kind, dialer) = target.strip_prefix("/raft/stream/")?.split_once('/')?;
        let kind = match kind {
            // The path etcd 3 serves its "MsgApp v2" stream at (the v1
            // stream of etcd 2.0 is gone since 2.1).
            "msgapp" => StreamKind::MsgAppV2,
            "message" => StreamKind::Message,
            _ => return None,
        };
        Some(PeerStream {
            kind,
            dialer: u64::from_str_radix(dialer, 16).ok()?,
            writer: raft_to
                .and_then(|id| u64::from_str_radix(id.trim(), 16).ok())
                .unwrap_or(0),
        })
    }
}

/// `raftpb.MessageType`, the kinds that matter to a trace named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A proposal forwarded by a follower to the leader.
    Prop,
    /// The leader's append of entries.
    App,
    /// A member's answer to an append: the index it now holds (or a
    /// rejection).
    AppResp,
    /// The leader's heartbeat (carries the commit index).
    Heartbeat,
    /// A member's answer to a heartbeat.
    HeartbeatResp,
    /// Any other type, by its number.
    Other(i32),
}

impl MessageKind {
    fn from_wire(kind: i32) -> MessageKind {
        use raftpb::MessageType as T;
        match T::try_from(kind) {
            Ok(T::MsgProp) => MessageKind::Prop,
            Ok(T::MsgApp) => MessageKind::App,
            Ok(T::MsgAppResp) => MessageKind::AppResp,
            Ok(T::MsgHeartbeat) => MessageKind::Heartbeat,
            Ok(T::MsgHeartbeatResp) => MessageKind::HeartbeatResp,
            _ => MessageKind::Other(kind),
        }
    }

    /// Whether it is a type etcd's Raft defines.
    pub fn is_defined(self) -> bool {
        match self {
            MessageKind::Other(kind) => raftpb::MessageType::try_from(kind).is_ok(),
            _ => true,
        }
    }

    /// Whether only a term's leader sends it: its sender leads the
    /// message's term.
    pub fn from_leader(self) -> bool {
        matches!(self, MessageKind::App | MessageKind::Heartbeat)
    }
}

/// An entry carried by a message.
#[derive(Clone, PartialEq, Eq)]
pub struct RaftEntry {
    /// Raft term.
    pub term: u64,
    /// Raft index.
    pub index: u64,
    /// The entry's data for a normal entry (an `InternalRaftRequest`);
    /// empty for configuration changes and the empty entry of a new term.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for RaftEntry {
    // The data can hold a Secret: only its size is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftEntry")
            .field("term", &self.term)
            .field("index", &self.index)
            .field("data_len", &self.data.len())
            .finish()
    }
}

impl RaftEntry {
    fn from_pb(entry: raftpb::Entry) -> RaftEntry {
        let normal = entry
            .r#type
            .is_none_or(|t| t == raftpb::EntryType::EntryNormal as i32);
        RaftEntry {
            term: entry.term.unwrap_or_default(),
            index: entry.index.unwrap_or_default(),
            data: if normal {
                entry.data.unwrap_or_default()
            } else {
                Vec::new()
            },
        }
    }
}

/// One Raft message from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftMessage {
    /// Its type.
    pub kind: MessageKind,
    /// Sending member.
    pub from: u64,
    /// Receiving member.
    pub to: u64,
    /// The sender's term.
    pub term: u64,
    /// For an append, the index before its entries; for an answer, the
    /// index the sender now holds (or, rejected, the one it refused).
    pub index: u64,
    /// The commit index the sender knows.
    pub commit: u64,
    /// An answer that refused the append.
    pub reject: bool,
    /// Entries carried (appends and forwarded proposals).
    pub entries: Vec<RaftEntry>,
}

impl RaftMessage {
    fn from_pb(message: raftpb::Message) -> RaftMessage {
        RaftMessage {
            kind: MessageKind::from_wire(message.r#type.unwrap_or_default()),
            from: message.from.unwrap_or_default(),
            to: message.to.unwrap_or_default(),
            term: message.term.unwrap_or_default(),
            index: message.index.unwrap_or_default(),
            commit: message.commit.unwrap_or_default(),
            reject: message.reject.unwrap_or_default(),
            entries: message
                .entries
                .into_iter()
                .map(RaftEntry::from_pb)
                .collect(),
        }
    }
}

/// Why stream bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RaftStreamError {
    /// A `msgapp` stream type byte etcd never writes: the framing is lost.
    #[error("msgapp stream frame type {kind} is not one etcd writes")]
    BadFrameType { kind: u8 },
    /// A message over [`MAX_MESSAGE_BYTES`]: skipped.
    #[error("frame of {len_bytes} bytes is over the {MAX_MESSAGE_BYTES}-byte bound")]
    TooLarge { len_bytes: u64 },
    /// An AppEntries frame over [`MAX_MESSAGE_BYTES`]: only its entries'
    /// lengths tell where it ends, so the framing is lost.
    #[error(
        "AppEntries frame of {len_bytes} bytes or more is over the {MAX_MESSAGE_BYTES}-byte bound"
    )]
    AppendTooLarge { len_bytes: u64 },
    /// Bytes framed as a message that is not a `raftpb` one.
    #[error("message does not decode: {reason}")]
    BadMessage { reason: String },
    /// Bytes of the stream were not captured: nothing after them can be
    /// framed.
    #[error("bytes of the stream were lost")]
    BytesLost,
}

impl RaftStreamError {
    /// Whether the stream is still decoded after it.
    pub fn can_continue(&self) -> bool {
        matches!(
            self,
            RaftStreamError::TooLarge { .. } | RaftStreamError::BadMessage { .. }
        )
    }
}

/// Decodes one stream's body.
#[derive(Debug)]
pub struct RaftStreamDecoder {
    stream: PeerStream,
    buf: Vec<u8>,
    /// Bytes still to skip of a frame over the bound.
    skip: u64,
    /// Framing is lost: later bytes are only counted.
    lost: bool,
    skipped_bytes: u64,
    /// `msgapp` stream: term and last index of the previous append, which an
    /// AppEntries frame continues (0: not known, on a joined stream until
    /// an append names them).
    term: u64,
    index: u64,
    /// Joined mid-way: the members are learnt from the first message that
    /// names them.
    joined: bool,
}

impl RaftStreamDecoder {
    /// A decoder at the start of `stream`'s body.
    pub fn new(stream: PeerStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            skip: 0,
            lost: false,
            skipped_bytes: 0,
            term: 0,
            index: 0,
            joined: false,
        }
    }

    /// A decoder for a stream of `kind` joined at a frame boundary, its
    /// request unseen: members unknown (0) until a message names them, and
    /// the append an AppEntries frame continues unknown until one carries
    /// entries.
    pub fn joined(kind: StreamKind) -> Self {
        Self {
            joined: true,
            ..Self::new(PeerStream {
                kind,
                dialer: 0,
                writer: 0,
            })
        }
    }

    /// On a joined stream, the members where known otherwise (0: not
    /// known); a member a message named already stays.
    pub fn name_members(&mut self, writer: u64, dialer: u64) {
        if self.joined {
            if self.stream.writer == 0 {
                self.stream.writer = writer;
            }
            if self.stream.dialer == 0 {
                self.stream.dialer = dialer;
            }
        }
    }

    /// The stream decoded.
    pub fn stream(&self) -> PeerStream {
        self.stream
    }

    /// Body bytes not decoded (frames over the bound, bytes after a loss).
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped_bytes
    }

    /// Bytes buffered waiting for the rest of a frame (at most
    /// [`MAX_MESSAGE_BYTES`] and a frame header, plus one push).
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Adds body bytes; returns the messages they completed and the
    /// problems met. `truncated` means body bytes after these are missing.
    pub fn push(
        &mut self,
        bytes: &[u8],
        truncated: bool,
    ) -> (Vec<RaftMessage>, Vec<RaftStreamError>) {
        let (mut messages, mut errors) = (Vec::new(), Vec::new());
        if self.lost {
            self.skipped_bytes += bytes.len() as u64;
            return (messages, errors);
        }
        let mut bytes = bytes;
        if self.skip > 0 {
            let skipped = self.skip.min(bytes.len() as u64);
            self.skip -= skipped;
            self.skipped_bytes += skipped;
            bytes = &bytes[skipped as usize..];
        }
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        while at < self.buf.len() {
            let parsed = match self.stream.kind {
                StreamKind::Message => self.parse_message_frame(&self.buf[at..]),
                StreamKind::MsgAppV2 => self.parse_msgappv2_frame(&self.buf[at..]),
            };
            match parsed {
                Ok(Frame::Incomplete) => break,
                Ok(Frame::Heartbeat) => at += 1,
                Ok(Frame::Message {
                    message,
                    consumed,
                    appended,
                }) => {
                    at += consumed;
                    if let Some((term, index)) = appended {
                        (self.term, self.index) = (term, index);
                    }
                    if self.joined {
                        // Every message on a stream goes from its writer to
                        // its dialer.
                        self.name_members(message.from, message.to);
                    }
                    messages.push(message);
                }
                Ok(Frame::Oversized { len_bytes, header }) => {
                    errors.push(RaftStreamError::TooLarge { len_bytes });
                    let here = (self.buf.len() - at - header) as u64;
                    let skipped = len_bytes.min(here);
                    self.skipped_bytes += header as u64 + skipped;
                    self.skip = len_bytes - skipped;
                    at += header + skipped as usize;
                }
                Err(FrameError::Lost(error)) => {
                    errors.push(error);
                    self.lose();
                    return (messages, errors);
                }
                Err(FrameError::Skip { error, consumed }) => {
                    // Read to its end: it costs only itself.
                    errors.push(error);
                    self.skipped_bytes += consumed as u64;
                    at += consumed;
                }
            }
        }
        self.buf.drain(..at);
        if truncated {
            errors.push(RaftStreamError::BytesLost);
            self.lose();
        }
        (messages, errors)
    }

    fn lose(&mut self) {
        self.skipped_bytes += self.buf.len() as u64;
        self.buf = Vec::new();
        self.lost = true;
    }

    /// A `message` frame: u64 length, `raftpb.Message`.
    fn parse_message_frame(&self, buf: &[u8]) -> Result<Frame, FrameError> {
        let Some(len) = read_u64(buf, 0) else {
            return Ok(Frame::Incomplete);
        };
        full_message(buf, LENGTH_BYTES, len)
    }

    /// A `msgapp` stream frame (etcd's "MsgApp v2" framing).
    fn parse_msgappv2_frame(&self, buf: &[u8]) -> Result<Frame, FrameError> {
        match buf[0] {
            0 => Ok(Frame::Heartbeat),
            1 => self.app_entries(buf),
            2 => {
                let Some(len) = read_u64(buf, 1) else {
                    return Ok(Frame::Incomplete);
                };
                let frame = full_message(buf, 1 + LENGTH_BYTES, len)?;
                Ok(match frame {
                    Frame::Message {
                        message, consumed, ..
                    } => {
                        let index = message.entries.last().map_or(message.index, |e| e.index);
                        Frame::Message {
                            appended: Some((message.term, index)),
                            message,
                            consumed,
                        }
                    }
                    other => other,
                })
            }
            kind => Err(FrameError::Lost(RaftStreamError::BadFrameType { kind })),
        }
    }

    /// An AppEntries frame: the append after the previous one, its entries
    /// sent one by one. Parsed once it is all here.
    fn app_entries(&self, buf: &[u8]) -> Result<Frame, FrameError> {
        let Some(count) = read_u64(buf, 1) else {
            return Ok(Frame::Incomplete);
        };
        // Each entry takes at least its length word: a count the frame
        // cannot hold is not a count.
        if count > MAX_MESSAGE_BYTES / LENGTH_BYTES as u64 {
            return Err(FrameError::Lost(RaftStreamError::AppendTooLarge {
                len_bytes: count.saturating_mul(LENGTH_BYTES as u64),
            }));
        }
        // The frame's end first, from its length words alone: it arrives in
        // pieces, and its entries are decoded once, when it is all here.
        let mut at = 1 + LENGTH_BYTES;
        for _ in 0..count {
            let Some(len) = read_u64(buf, at) else {
                return Ok(Frame::Incomplete);
            };
            at += LENGTH_BYTES;
            // The whole frame is one append: bounded as a message is (etcd
            // sends at most 1 MiB of entries in one).
            if (at as u64).saturating_add(len) > MAX_MESSAGE_BYTES {
                return Err(FrameError::Lost(RaftStreamError::AppendTooLarge {
                    len_bytes: (at as u64).saturating_add(len),
                }));
            }
            at += len as usize;
        }
        let Some(commit) = read_u64(buf, at) else {
            return Ok(Frame::Incomplete);
        };
        let mut entries = Vec::new();
        let mut rest = &buf[1 + LENGTH_BYTES..at];
        let consumed = at + LENGTH_BYTES;
        while let Some((len, tail)) = rest.split_first_chunk::<LENGTH_BYTES>() {
            let Some((bytes, tail)) = tail.split_at_checked(u64::from_be_bytes(*len) as usize)
            else {
                break;
            };
            rest = tail;
            match raftpb::Entry::decode(bytes) {
                Ok(entry) => entries.push(RaftEntry::from_pb(entry)),
                Err(e) => {
                    return Err(FrameError::Skip {
                        error: RaftStreamError::BadMessage {
                            reason: e.to_string(),
                        },
                        consumed,
                    });
                }
            }
        }
        // etcd frames an append this way only when it continues the last
        // one in the same term (`msgappv2_codec.go`), so its entries are of
        // that term and follow that index: a joined stream learns the
        // context from the first one that carries entries.
        let (term, index) = match entries.first() {
            Some(first) if self.term == 0 => (first.term, first.index.saturating_sub(1)),
            _ => (self.term, self.index),
        };
        let message = RaftMessage {
            kind: MessageKind::App,
            from: self.stream.writer,
            to: self.stream.dialer,
            term,
            index,
            commit,
            reject: false,
            entries,
        };
        Ok(Frame::Message {
            appended: (term != 0).then_some((term, index + count)),
            message,
            consumed,
        })
    }
}

/// What the bytes at the start of the buffer are.
enum Frame {
    Incomplete,
    /// A `msgappv2` link heartbeat (one byte).
    Heartbeat,
    Message {
        message: RaftMessage,
        consumed: usize,
        /// For appends on `msgappv2`: the term and last index that the next
        /// AppEntries continues from.
        appended: Option<(u64, u64)>,
    },
    /// A message over the bound: its `header` bytes, then `len_bytes` to skip.
    Oversized {
        len_bytes: u64,
        header: usize,
    },
}

enum FrameError {
    /// The frame was read to its end and costs only itself.
    Skip {
        error: RaftStreamError,
        consumed: usize,
    },
    /// The framing is lost.
    Lost(RaftStreamError),
}

/// A `raftpb.Message` of `len` bytes after `header` bytes.
fn full_message(buf: &[u8], header: usize, len: u64) -> Result<Frame, FrameError> {
    if len > MAX_MESSAGE_BYTES {
        return Ok(Frame::Oversized {
            len_bytes: len,
            header,
        });
    }
    let end = header + len as usize;
    let Some(bytes) = buf.get(header..end) else {
        return Ok(Frame::Incomplete);
    };
    match raftpb::Message::decode(bytes) {
        Ok(message) => Ok(Frame::Message {
            message: RaftMessage::from_pb(message),
            consumed: end,
            appended: None,
        }),
        Err(e) => Err(FrameError::Skip {
            error: RaftStreamError::BadMessage {
                reason: e.to_string(),
            },
            consumed: end,
        }),
    }
}

fn read_u64(buf: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = buf.get(at..at + LENGTH_BYTES)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

pub mod joined;
#[cfg(test)]
mod tests;
