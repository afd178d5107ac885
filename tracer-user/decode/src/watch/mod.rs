//! Kubernetes watch event streams, as kube-apiserver writes them on a watch
//! response body.
//!
//! In: the body bytes of a watch response in arrival order (HTTP/1.1 after
//! de-chunking, or HTTP/2 DATA payloads), in one of two formats:
//! - [`WatchFormat::Json`]: `{"type":"ADDED","object":{…}}` objects, each
//!   ended by a newline (`application/json`, `json.Serializer` through the
//!   no-op `json.Framer`);
//! - [`WatchFormat::Protobuf`]: frames of a 4-byte big-endian length and a
//!   `metav1.WatchEvent` (`application/vnd.kubernetes.protobuf;stream=watch`,
//!   `protobuf.LengthDelimitedFramer` around the `RawSerializer`), whose
//!   `object.raw` is the object in the `k8s\0` envelope.
//!
//! Out: [`WatchEvent`]s — the event type and the object's identity
//! ([`StoredObject`], so a Pod's namespace, name, uid, node and phase), never
//! the rest of the object. The encoding side is kube-apiserver's
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go`
//! (`watchEncoder.doEncode`: the object through the embedded encoder into
//! `metav1.WatchEvent{Type, Object: runtime.RawExtension{Raw}}`, that through
//! the stream serializer and framer chosen in `codec_factory.go`). Limits:
//! `README.md` here.

use prost::Message;

use crate::Decoded;
use crate::kube::{self, KubeError, PROTOBUF_MAGIC, StoredObject};

/// How a watch body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFormat {
    /// Newline-ended JSON objects.
    Json,
    /// Length-prefixed protobuf `metav1.WatchEvent`s.
    Protobuf,
}

impl WatchFormat {
    /// The format a watch response's `content-type` announces; `None` for
    /// media types apiserver does not stream watches in (YAML is refused for
    /// watches; CBOR is not decoded here).
    pub fn from_content_type(content_type: &str) -> Option<WatchFormat> {
        match crate::rest::MediaType::parse(content_type) {
            crate::rest::MediaType::Json => Some(WatchFormat::Json),
            crate::rest::MediaType::Protobuf => Some(WatchFormat::Protobuf),
            crate::rest::MediaType::Yaml
            | crate::rest::MediaType::Cbor
            | crate::rest::MediaType::Other(_) => None,
        }
    }
}

/// `watch.EventType`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`: the object as it was just before deletion.
    Deleted,
    /// `BOOKMARK`: only a resourceVersion, no change.
    Bookmark,
    /// `ERROR`: the object is a `Status`.
    Error,
    /// Anything else, as sent (first 32 bytes).
    Other(String),
}

impl EventType {
    fn parse(text: &str) -> EventType {
        match text {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            "BOOKMARK" => EventType::Bookmark,
            "ERROR" => EventType::Error,
            other => EventType::Other(other.chars().take(32).collect()),
        }
    }
}

/// One event of a watch stream whose frame decoded; its object may still
/// not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: EventType,
    /// The object's identity, or why it did not decode.
    pub object: Result<StoredObject, KubeError>,
}

/// Why a watch body could not be read at some point.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// A JSON event that does not parse; the stream goes on after the next newline.
    #[error("JSON watch event does not parse: {reason}")]
    Json { reason: String },
    /// A protobuf frame that is not a WatchEvent; the next frame is still found.
    #[error("protobuf watch frame does not decode: {reason}")]
    Protobuf { reason: String },
    /// An event longer than the limit: JSON resumes after the next newline;
    /// a protobuf length this large means the framing is lost.
    #[error("watch event of {len_bytes} bytes over the limit")]
    TooLarge { len_bytes: usize },
    /// Bytes were lost (capture truncation, or protobuf framing lost):
    /// events in them are gone.
    #[error("{skipped_bytes} bytes of the watch stream skipped")]
    Skipped { skipped_bytes: usize },
}

impl WatchError {
    /// Whether later events of the same stream can still be decoded.
    pub fn can_continue(&self) -> bool {
        match self {
            WatchError::Json { .. } | WatchError::Protobuf { .. } | WatchError::Skipped { .. } => {
                true
            }
            WatchError::TooLarge { .. } => false,
        }
    }
}

/// Events larger than this are not decoded: apiserver's default request
/// size limit is 3 MiB and etcd's value limit 1.5 MiB, so a real event fits.
pub const MAX_EVENT_BYTES: usize = 4 << 20;
const LENGTH_PREFIX_BYTES: usize = 4;

/// Only the event's type and the identity fields of its object.
#[derive(serde::Deserialize)]
struct JsonWatchEvent {
    #[serde(rename = "type", default)]
    event_type: String,
    object: Option<kube::JsonObject>,
}

/// Parses the JSON event at the start of `buf` (leading whitespace and
/// newlines between events are consumed with it).
pub fn parse_json_event(buf: &[u8]) -> Result<Decoded<WatchEvent>, WatchError> {
    let start = buf
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(buf.len());
    match buf.get(start) {
        None => return Ok(Decoded::Incomplete),
        Some(b'{') => {}
        Some(_) => return Ok(Decoded::NotMine),
    }
    let mut events =
        serde_json::Deserializer::from_slice(&buf[start..]).into_iter::<JsonWatchEvent>();
    match events.next() {
        Some(Ok(event)) => {
            let consumed = start + events.byte_offset();
            let object = match event.object {
                Some(object) => Ok(kube::stored_from_json(object)),
                None => Err(KubeError::Json {
                    reason: "event has no object".into(),
                }),
            };
            Ok(Decoded::Message {
                msg: WatchEvent {
                    event_type: EventType::parse(&event.event_type),
                    object,
                },
                consumed,
            })
        }
        Some(Err(error)) if error.is_eof() => Ok(Decoded::Incomplete),
        Some(Err(error)) => Err(WatchError::Json {
            reason: error.to_string(),
        }),
        None => Ok(Decoded::Incomplete),
    }
}

/// Parses the length-prefixed protobuf event at the start of `buf`. Frames
/// of a plain `metav1.WatchEvent` (what apiserver writes) and of one inside
/// the `k8s\0` envelope are both read.
pub fn parse_protobuf_event(buf: &[u8]) -> Result<Decoded<WatchEvent>, WatchError> {
    let Some(prefix) = buf.get(..LENGTH_PREFIX_BYTES) else {
        return Ok(Decoded::Incomplete);
    };
    let len_bytes = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    if len_bytes > MAX_EVENT_BYTES {
        return Err(WatchError::TooLarge { len_bytes });
    }
    let Some(frame) = buf.get(LENGTH_PREFIX_BYTES..LENGTH_PREFIX_BYTES + len_bytes) else {
        return Ok(Decoded::Incomplete);
    };
    let consumed = LENGTH_PREFIX_BYTES + len_bytes;
    let protobuf_error = |e: prost::DecodeError| WatchError::Protobuf {
        reason: e.to_string(),
    };
    let event_bytes;
    let frame = match frame.strip_prefix(PROTOBUF_MAGIC) {
        Some(envelope) => {
            let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope)
                .map_err(protobuf_error)?;
            event_bytes = unknown.raw.unwrap_or_default();
            event_bytes.as_slice()
        }
        None => frame,
    };
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(frame)
        .map_err(protobuf_error)?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    Ok(Decoded::Message {
        msg: WatchEvent {
            event_type: EventType::parse(event.r#type.as_deref().unwrap_or_default()),
            object: kube::decode_stored_object(&raw),
        },
        consumed,
    })
}

/// Decoder state of one watch response body.
#[derive(Debug)]
pub struct WatchDecoder {
    format: WatchFormat,
    buf: Vec<u8>,
    /// Protobuf framing was lost: nothing after it can be framed.
    lost: bool,
    /// JSON: bytes were lost mid-event; the next newline starts a new one.
    skip_to_newline: bool,
    /// JSON: bytes of `buf` already known to hold no event end, so a large
    /// event arriving in many pieces is not re-parsed for every piece.
    scanned: usize,
    skipped_bytes: usize,
    events: usize,
}

impl WatchDecoder {
    /// A decoder at the start of a body.
    pub fn new(format: WatchFormat) -> Self {
        Self {
            format,
            buf: Vec::new(),
            lost: false,
            skip_to_newline: false,
            scanned: 0,
            skipped_bytes: 0,
            events: 0,
        }
    }

    /// Body bytes dropped (lost framing, oversized or undecodable events).
    pub fn skipped_bytes(&self) -> usize {
        self.skipped_bytes
    }

    /// Events decoded so far.
    pub fn events(&self) -> usize {
        self.events
    }

    /// Bytes buffered waiting for the rest of an event (at most
    /// [`MAX_EVENT_BYTES`] plus one push).
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Adds body bytes; returns the events they completed and the problems
    /// met. `truncated` means body bytes after these are missing.
    pub fn push(&mut self, bytes: &[u8], truncated: bool) -> (Vec<WatchEvent>, Vec<WatchError>) {
        let (mut events, mut errors) = (Vec::new(), Vec::new());
        if self.lost {
            self.skipped_bytes += bytes.len();
            return (events, errors);
        }
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            let rest = &self.buf[at..];
            let parsed = match self.format {
                WatchFormat::Json if self.skip_to_newline => {
                    match rest.iter().position(|&b| b == b'\n') {
                        Some(i) => {
                            self.skip_to_newline = false;
                            self.skipped_bytes += i + 1;
                            at += i + 1;
                            continue;
                        }
                        None => {
                            self.skipped_bytes += rest.len();
                            at = self.buf.len();
                            break;
                        }
                    }
                }
                WatchFormat::Json => {
                    // The newline ending the previous event (and any other
                    // whitespace between events) is not part of the next.
                    let blank = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
                    if blank > 0 {
                        at += blank;
                        continue;
                    }
                    // apiserver ends every event with a newline: without
                    // one since the last attempt, no new event can be whole.
                    let from = self.scanned.saturating_sub(at);
                    if !rest[from.min(rest.len())..].contains(&b'\n') {
                        self.scanned = self.buf.len();
                        if rest.len() > MAX_EVENT_BYTES {
                            errors.push(WatchError::TooLarge {
                                len_bytes: rest.len(),
                            });
                            self.skipped_bytes += rest.len();
                            at = self.buf.len();
                        }
                        break;
                    }
                    parse_json_event(rest)
                }
                WatchFormat::Protobuf => parse_protobuf_event(rest),
            };
            match parsed {
                Ok(Decoded::Message { msg, consumed }) => {
                    events.push(msg);
                    self.events += 1;
                    at += consumed;
                }
                Ok(Decoded::Incomplete) => {
                    self.scanned = self.buf.len();
                    break;
                }
                Ok(Decoded::NotMine) | Err(WatchError::Json { .. }) => {
                    // Resume after the next newline (JSON events never hold one).
                    let skip = rest
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(rest.len(), |i| i + 1);
                    if let Err(error) = parsed {
                        errors.push(error);
                    } else {
                        errors.push(WatchError::Skipped {
                            skipped_bytes: skip,
                        });
                    }
                    self.skipped_bytes += skip;
                    at += skip;
                }
                Err(WatchError::Protobuf { reason }) => {
                    // The length prefix was sound: the next frame follows it.
                    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    errors.push(WatchError::Protobuf { reason });
                    self.skipped_bytes += LENGTH_PREFIX_BYTES + len;
                    at += LENGTH_PREFIX_BYTES + len;
                }
                Err(error) => {
                    errors.push(error);
                    self.lose(rest.len());
                    at = self.buf.len();
                    break;
                }
            }
        }
        self.buf.drain(..at.min(self.buf.len()));
        self.scanned = self.scanned.saturating_sub(at);
        if truncated {
            let dropped = self.buf.len();
            self.buf.clear();
            self.scanned = 0;
            match self.format {
                WatchFormat::Json => {
                    self.skipped_bytes += dropped;
                    // What arrives next is the rest of the cut event.
                    self.skip_to_newline = true;
                }
                WatchFormat::Protobuf => self.lose(dropped),
            }
            errors.push(WatchError::Skipped {
                skipped_bytes: dropped,
            });
        }
        (events, errors)
    }

    fn lose(&mut self, dropped: usize) {
        self.lost = true;
        self.skipped_bytes += dropped;
    }
}

#[cfg(test)]
mod tests;
