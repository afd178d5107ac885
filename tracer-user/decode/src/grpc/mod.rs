//! gRPC over HTTP/2: length-prefixed messages, compression, status.
//!
//! In: an [`Exchange`] from [`crate::http2`] (or any body bytes). Out: a
//! [`GrpcCall`] with service and method from `:path`, the request and response
//! messages (decompressed where the encoding is gzip), and the status from the
//! trailers. Messages split across DATA frames or sharing one are handled
//! because framing runs over the reassembled body. Limits: `README.md` here.

use std::io::Read;

use crate::Decoded;
use crate::http2::Exchange;

/// gRPC's default maximum message size; a larger length prefix means we are
/// not at a message boundary.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
const PREFIX_LEN: usize = 5;

/// One length-prefixed message as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireMessage<'a> {
    /// The compressed flag.
    pub compressed: bool,
    /// The message bytes (compressed if the flag is set).
    pub bytes: &'a [u8],
}

/// A message's content after decompression.
#[derive(Clone, PartialEq, Eq)]
pub enum Payload {
    /// Protobuf bytes, ready for a message decoder.
    Plain(Vec<u8>),
    /// Compressed with an encoding this crate does not decode.
    Compressed {
        /// The `grpc-encoding` header value, if known.
        encoding: Option<String>,
        /// Compressed size.
        len_bytes: usize,
    },
    /// Only a prefix was captured (body limit or lost bytes).
    Truncated {
        /// Announced length.
        len_bytes: usize,
        /// Bytes captured.
        captured_bytes: usize,
    },
}

// Payloads can hold Secrets: Debug shows sizes, never bytes.
impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Plain(bytes) => write!(f, "Plain({} bytes)", bytes.len()),
            Payload::Compressed {
                encoding,
                len_bytes,
            } => {
                write!(f, "Compressed({encoding:?}, {len_bytes} bytes)")
            }
            Payload::Truncated {
                len_bytes,
                captured_bytes,
            } => {
                write!(f, "Truncated({captured_bytes} of {len_bytes} bytes)")
            }
        }
    }
}

/// Why a body could not be split into messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrpcError {
    /// The compressed flag is neither 0 nor 1: not at a message boundary.
    #[error("byte {offset}: compressed flag {flag:#x} is not 0 or 1")]
    BadFlag { offset: usize, flag: u8 },
    /// A length over [`MAX_MESSAGE_BYTES`]: not at a message boundary.
    #[error("byte {offset}: message length {len_bytes} over the limit")]
    TooLong { offset: usize, len_bytes: usize },
    /// gzip data that does not inflate; the next message is still found.
    #[error("message {index}: gzip data does not decompress: {reason}")]
    Decompress { index: usize, reason: String },
}

impl GrpcError {
    /// Whether later messages of the same body can still be decoded.
    pub fn can_continue(&self) -> bool {
        matches!(self, GrpcError::Decompress { .. })
    }
}

/// Parses the length-prefixed message at the start of `buf`.
pub fn parse_message(buf: &[u8]) -> Result<Decoded<WireMessage<'_>>, GrpcError> {
    let Some(prefix) = buf.get(..PREFIX_LEN) else {
        return Ok(Decoded::Incomplete);
    };
    let compressed = match prefix[0] {
        0 => false,
        1 => true,
        flag => return Err(GrpcError::BadFlag { offset: 0, flag }),
    };
    let len_bytes = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len_bytes > MAX_MESSAGE_BYTES {
        return Err(GrpcError::TooLong {
            offset: 0,
            len_bytes,
        });
    }
    match buf.get(PREFIX_LEN..PREFIX_LEN + len_bytes) {
        Some(bytes) => Ok(Decoded::Message {
            msg: WireMessage { compressed, bytes },
            consumed: PREFIX_LEN + len_bytes,
        }),
        None => Ok(Decoded::Incomplete),
    }
}

/// The messages of one side's body, and the problems met.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    /// Messages in order.
    pub messages: Vec<Payload>,
    /// Problems; after one that cannot continue, the rest of the body is skipped.
    pub errors: Vec<GrpcError>,
}

/// Splits a body into messages. `encoding` is the side's `grpc-encoding`.
/// `body_complete` says whether the body holds every byte sent; if not, a
/// final partial message is reported as [`Payload::Truncated`].
pub fn split_body(body: &[u8], encoding: Option<&str>, body_complete: bool) -> Messages {
    let mut out = Messages::default();
    let mut at = 0;
    while at < body.len() {
        match parse_message(&body[at..]) {
            Ok(Decoded::Message { msg, consumed }) => {
                let index = out.messages.len();
                out.messages
                    .push(payload(msg, encoding, index, &mut out.errors));
                at += consumed;
            }
            Ok(Decoded::Incomplete | Decoded::NotMine) => {
                if !body_complete && body.len() - at >= PREFIX_LEN {
                    let p = &body[at + 1..at + PREFIX_LEN];
                    out.messages.push(Payload::Truncated {
                        len_bytes: u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize,
                        captured_bytes: body.len() - at - PREFIX_LEN,
                    });
                }
                break;
            }
            Err(error) => {
                out.errors.push(offset_error(error, at));
                break;
            }
        }
    }
    out
}

fn offset_error(error: GrpcError, at: usize) -> GrpcError {
    match error {
        GrpcError::BadFlag { offset, flag } => GrpcError::BadFlag {
            offset: offset + at,
            flag,
        },
        GrpcError::TooLong { offset, len_bytes } => GrpcError::TooLong {
            offset: offset + at,
            len_bytes,
        },
        other => other,
    }
}

fn payload(
    msg: WireMessage<'_>,
    encoding: Option<&str>,
    index: usize,
    errors: &mut Vec<GrpcError>,
) -> Payload {
    if !msg.compressed {
        return Payload::Plain(msg.bytes.to_vec());
    }
    if encoding != Some("gzip") {
        return Payload::Compressed {
            encoding: encoding.map(str::to_string),
            len_bytes: msg.bytes.len(),
        };
    }
    let mut inflated = Vec::new();
    // Bounded like an uncompressed message: a small gzip bomb stays small.
    let limit = MAX_MESSAGE_BYTES as u64;
    match flate2::read::GzDecoder::new(msg.bytes)
        .take(limit)
        .read_to_end(&mut inflated)
    {
        Ok(_) => Payload::Plain(inflated),
        Err(error) => {
            errors.push(GrpcError::Decompress {
                index,
                reason: error.to_string(),
            });
            Payload::Compressed {
                encoding: Some("gzip".into()),
                len_bytes: msg.bytes.len(),
            }
        }
    }
}

/// The status a server sent in its trailers (or trailers-only response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcStatus {
    /// `grpc-status`: 0 is OK.
    pub code: u32,
    /// `grpc-message`, percent-decoded. Servers put error text here, which
    /// can quote request content: export it only where errors are wanted.
    pub message: Option<String>,
}

/// One gRPC call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcCall {
    /// HTTP/2 stream id.
    pub stream_id: u32,
    /// Service from `:path` (`etcdserverpb.KV`), if the path is known.
    pub service: Option<String>,
    /// Method from `:path` (`Put`).
    pub method: Option<String>,
    /// Client messages.
    pub requests: Messages,
    /// Server messages.
    pub responses: Messages,
    /// Status from the trailers, if captured.
    pub status: Option<GrpcStatus>,
    /// Request start and response end, where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

impl GrpcCall {
    /// Reads a call out of an HTTP/2 exchange. Returns `None` for exchanges
    /// that say they are not gRPC (a `content-type` other than
    /// `application/grpc*`); exchanges without headers are tried as gRPC,
    /// since long-lived connections often lose them.
    pub fn from_exchange(exchange: &Exchange) -> Option<GrpcCall> {
        let content_type = exchange
            .request
            .header("content-type")
            .or_else(|| exchange.response.header("content-type"))
            .map(|(v, _)| v);
        if content_type.is_some_and(|c| !c.starts_with("application/grpc")) {
            return None;
        }
        let (service, method) = match exchange
            .path()
            .and_then(|p| p.strip_prefix('/')?.split_once('/'))
        {
            Some((service, method)) => (Some(service.to_string()), Some(method.to_string())),
            None => (None, None),
        };
        let side = |half: &crate::http2::HalfStream| {
            let encoding = half.header("grpc-encoding").map(|(v, _)| v);
            let complete = half.ended && !half.lossy && half.body_bytes_dropped == 0;
            split_body(&half.body, encoding, complete)
        };
        // A trailers-only response carries the status in its only block.
        let status_block = exchange
            .response
            .trailers
            .as_ref()
            .or(exchange.response.headers.as_ref());
        let status = status_block.and_then(|block| {
            Some(GrpcStatus {
                code: block.get("grpc-status")?.parse().ok()?,
                message: block
                    .get("grpc-message")
                    .filter(|m| !m.is_empty())
                    .map(percent_decode),
            })
        });
        Some(GrpcCall {
            stream_id: exchange.stream_id,
            service,
            method,
            requests: side(&exchange.request),
            responses: side(&exchange.response),
            status,
            start_ts_ns: exchange
                .request
                .first_ts_ns
                .or(exchange.response.first_ts_ns),
            end_ts_ns: exchange.response.last_ts_ns.or(exchange.request.last_ts_ns),
        })
    }

    /// The first plain request message, the usual case for unary calls.
    pub fn request_bytes(&self) -> Option<&[u8]> {
        first_plain(&self.requests)
    }

    /// The first plain response message.
    pub fn response_bytes(&self) -> Option<&[u8]> {
        first_plain(&self.responses)
    }
}

fn first_plain(messages: &Messages) -> Option<&[u8]> {
    match messages.messages.first()? {
        Payload::Plain(bytes) => Some(bytes),
        Payload::Compressed { .. } | Payload::Truncated { .. } => None,
    }
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2 spec).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests;
