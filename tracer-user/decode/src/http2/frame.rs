//! HTTP/2 frame framing (RFC 9113 §4, §6).
//!
//! In: the bytes of one direction, starting at a frame boundary. Out: one
//! [`Frame`] and how many bytes it used, or [`Decoded::Incomplete`]. Also finds
//! a frame boundary in bytes that start mid-connection ([`find_frame_boundary`]).

use crate::Decoded;

/// The 24-byte client connection preface.
pub const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const FRAME_DATA: u8 = 0x0;
/// Largest frame payload accepted. RFC 9113 allows up to 2^24-1 once a peer
/// raises SETTINGS_MAX_FRAME_SIZE; Go and grpc-go stay at or below 16 KiB to
/// 1 MiB, so anything above 1 MiB is treated as garbage rather than buffered.
pub const MAX_FRAME_PAYLOAD_BYTES: usize = 1 << 20;

const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

/// Stream dependency information from a HEADERS (PRIORITY flag) or PRIORITY frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The stream this one depends on.
    pub depends_on: u32,
    /// The E bit.
    pub exclusive: bool,
    /// Weight minus one, as on the wire.
    pub weight: u8,
}

/// One decoded frame. Payload-carrying variants borrow their bytes, padding
/// removed, from the buffer the frame was parsed from: a DATA payload is
/// copied once, into the stream that keeps it, or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA (type 0x0).
    Data {
        stream_id: u32,
        end_stream: bool,
        data: &'a [u8],
    },
    /// HEADERS (type 0x1): the first fragment of a header block.
    Headers {
        stream_id: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
        fragment: &'a [u8],
    },
    /// PRIORITY (type 0x2).
    Priority { stream_id: u32, priority: Priority },
    /// RST_STREAM (type 0x3).
    RstStream { stream_id: u32, error_code: u32 },
    /// SETTINGS (type 0x4): (identifier, value) pairs.
    Settings { ack: bool, params: Vec<(u16, u32)> },
    /// PUSH_PROMISE (type 0x5): the promised stream and the header block fragment.
    PushPromise {
        stream_id: u32,
        promised_stream_id: u32,
        end_headers: bool,
        fragment: &'a [u8],
    },
    /// PING (type 0x6).
    Ping { ack: bool, opaque: u64 },
    /// GOAWAY (type 0x7). Debug data is dropped: it can echo request content.
    GoAway {
        last_stream_id: u32,
        error_code: u32,
    },
    /// WINDOW_UPDATE (type 0x8).
    WindowUpdate { stream_id: u32, increment: u32 },
    /// CONTINUATION (type 0x9).
    Continuation {
        stream_id: u32,
        end_headers: bool,
        fragment: &'a [u8],
    },
    /// An extension frame type; RFC 9113 says to ignore these.
    Unknown { kind: u8, stream_id: u32 },
}

/// A frame that cannot be decoded. Frame lengths are known from the header,
/// so the next frame can still be found: [`FrameError::can_continue`] says
/// whether the bytes after this frame are still trustworthy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The header announces more payload than [`MAX_FRAME_PAYLOAD_BYTES`]:
    /// most likely we are not at a frame boundary.
    #[error("frame of type {kind:#x} announces {len_bytes} payload bytes, more than the limit")]
    TooLong { kind: u8, len_bytes: usize },
    /// A frame whose length or stream id contradicts its type (e.g. PING not
    /// 8 bytes, DATA on stream 0): we are probably not at a frame boundary.
    #[error(
        "frame of type {kind:#x} on stream {stream_id} with {len_bytes} payload bytes is malformed: {reason}"
    )]
    Malformed {
        kind: u8,
        stream_id: u32,
        len_bytes: usize,
        reason: &'static str,
    },
    /// Padding longer than the payload: that frame is lost, framing is intact.
    #[error(
        "frame of type {kind:#x} on stream {stream_id} has {pad_len} padding bytes in a {len_bytes}-byte payload"
    )]
    BadPadding {
        kind: u8,
        stream_id: u32,
        pad_len: usize,
        len_bytes: usize,
    },
}

impl FrameError {
    /// Whether decoding can go on at the next frame. `false` means the
    /// direction lost frame sync and must be resynchronised.
    pub fn can_continue(&self) -> bool {
        matches!(self, FrameError::BadPadding { .. })
    }

    /// How many bytes the bad frame occupies, for skipping it when
    /// [`Self::can_continue`] holds.
    pub fn frame_len_bytes(&self) -> usize {
        match self {
            FrameError::BadPadding { len_bytes, .. } => FRAME_HEADER_LEN + len_bytes,
            FrameError::TooLong { .. } | FrameError::Malformed { .. } => 0,
        }
    }
}

struct FrameHeader {
    len_bytes: usize,
    kind: u8,
    flags: u8,
    stream_id: u32,
}

fn read_header(buf: &[u8]) -> Option<FrameHeader> {
    let h = buf.get(..FRAME_HEADER_LEN)?;
    Some(FrameHeader {
        len_bytes: usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]),
        kind: h[3],
        flags: h[4],
        stream_id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
    })
}

/// Checks what a header alone can tell: the length limit, and the length and
/// stream-id rules of each known type.
fn check_header(h: &FrameHeader) -> Result<(), FrameError> {
    if h.len_bytes > MAX_FRAME_PAYLOAD_BYTES {
        return Err(FrameError::TooLong {
            kind: h.kind,
            len_bytes: h.len_bytes,
        });
    }
    let on_stream = h.stream_id != 0;
    let reason = match h.kind {
        0x0 | 0x1 | 0x9 if !on_stream => "needs a stream id",
        0x2 if !on_stream || h.len_bytes != 5 => "PRIORITY needs a stream and 5 bytes",
        0x3 if !on_stream || h.len_bytes != 4 => "RST_STREAM needs a stream and 4 bytes",
        0x4 if on_stream || !h.len_bytes.is_multiple_of(6) => {
            "SETTINGS needs stream 0 and 6-byte entries"
        }
        0x4 if h.flags & FLAG_ACK != 0 && h.len_bytes != 0 => "SETTINGS ack must be empty",
        0x5 if !on_stream || h.len_bytes < 4 => "PUSH_PROMISE needs a stream and 4 bytes",
        0x6 if on_stream || h.len_bytes != 8 => "PING needs stream 0 and 8 bytes",
        0x7 if on_stream || h.len_bytes < 8 => "GOAWAY needs stream 0 and 8 bytes",
        0x8 if h.len_bytes != 4 => "WINDOW_UPDATE needs 4 bytes",
        _ => return Ok(()),
    };
    Err(FrameError::Malformed {
        kind: h.kind,
        stream_id: h.stream_id,
        len_bytes: h.len_bytes,
        reason,
    })
}

/// Parses the frame at the start of `buf`.
pub fn parse_frame(buf: &[u8]) -> Result<Decoded<Frame<'_>>, FrameError> {
    let Some(h) = read_header(buf) else {
        return Ok(Decoded::Incomplete);
    };
    check_header(&h)?;
    let consumed = FRAME_HEADER_LEN + h.len_bytes;
    let Some(payload) = buf.get(FRAME_HEADER_LEN..consumed) else {
        return Ok(Decoded::Incomplete);
    };
    let msg = frame_from_payload(&h, payload)?;
    Ok(Decoded::Message { msg, consumed })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

fn priority_at(b: &[u8]) -> Priority {
    let word = u32_at(b, 0);
    Priority {
        depends_on: word & 0x7fff_ffff,
        exclusive: word & 0x8000_0000 != 0,
        weight: b.get(4).copied().unwrap_or(0),
    }
}

/// Strips the pad-length byte and trailing padding of a PADDED frame.
fn unpad<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<&'a [u8], FrameError> {
    if h.flags & FLAG_PADDED == 0 {
        return Ok(payload);
    }
    let bad = |pad_len| FrameError::BadPadding {
        kind: h.kind,
        stream_id: h.stream_id,
        pad_len,
        len_bytes: h.len_bytes,
    };
    let Some((&pad_len, rest)) = payload.split_first() else {
        return Err(bad(0));
    };
    let pad_len = usize::from(pad_len);
    rest.len()
        .checked_sub(pad_len)
        .map(|end| &rest[..end])
        .ok_or(bad(pad_len))
}

fn frame_from_payload<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
    let stream_id = h.stream_id;
    Ok(match h.kind {
        0x0 => Frame::Data {
            stream_id,
            end_stream: h.flags & FLAG_END_STREAM != 0,
            data: unpad(h, payload)?,
        },
        0x1 => {
            let mut fragment = unpad(h, payload)?;
            let priority = if h.flags & FLAG_PRIORITY != 0 {
                let Some(rest) = fragment.get(5..) else {
                    return Err(FrameError::Malformed {
                        kind: h.kind,
                        stream_id,
                        len_bytes: h.len_bytes,
                        reason: "PRIORITY flag without 5 priority bytes",
                    });
                };
                let priority = priority_at(fragment);
                fragment = rest;
                Some(priority)
            } else {
                None
            };
            Frame::Headers {
                stream_id,
                end_stream: h.flags & FLAG_END_STREAM != 0,
                end_headers: h.flags & FLAG_END_HEADERS != 0,
                priority,
                fragment,
            }
        }
        0x2 => Frame::Priority {
            stream_id,
            priority: priority_at(payload),
        },
        0x3 => Frame::RstStream {
            stream_id,
            error_code: u32_at(payload, 0),
        },
        0x4 => Frame::Settings {
            ack: h.flags & FLAG_ACK != 0,
            params: payload
                .chunks_exact(6)
                .map(|p| (u16::from_be_bytes([p[0], p[1]]), u32_at(p, 2)))
                .collect(),
        },
        0x5 => {
            let rest = unpad(h, payload)?;
            Frame::PushPromise {
                stream_id,
                promised_stream_id: u32_at(rest, 0) & 0x7fff_ffff,
                end_headers: h.flags & FLAG_END_HEADERS != 0,
                fragment: rest.get(4..).unwrap_or_default(),
            }
        }
        0x6 => Frame::Ping {
            ack: h.flags & FLAG_ACK != 0,
            opaque: u64::from(u32_at(payload, 0)) << 32 | u64::from(u32_at(payload, 4)),
        },
        0x7 => Frame::GoAway {
            last_stream_id: u32_at(payload, 0) & 0x7fff_ffff,
            error_code: u32_at(payload, 4),
        },
        0x8 => Frame::WindowUpdate {
            stream_id,
            increment: u32_at(payload, 0) & 0x7fff_ffff,
        },
        0x9 => Frame::Continuation {
            stream_id,
            end_headers: h.flags & FLAG_END_HEADERS != 0,
            fragment: payload,
        },
        kind => Frame::Unknown { kind, stream_id },
    })
}

/// How many consecutive well-formed frame headers a candidate boundary needs
/// (fewer if the buffer ends exactly after a frame).
const RESYNC_FRAMES: usize = 3;

/// Finds the first offset in `buf` where frames plausibly start, for a
/// direction whose capture began mid-connection or lost bytes.
///
/// A candidate must have a known frame type (extension types are rare and
/// would make noise look like frames), a header passing the per-type rules,
/// and be followed by further valid headers up to [`RESYNC_FRAMES`] frames or
/// the exact end of `buf`. A single 9-byte match is too weak: payload bytes
/// often look like a frame header once.
pub fn find_frame_boundary(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find(|&start| plausible_frames_at(&buf[start..]))
}

/// The DATA frame that `buf` begins and does not hold whole: its stream
/// and how many bytes of it are still to come. None unless `buf` starts
/// with a DATA frame's whole, valid header and stops inside its payload.
/// Bytes a capture lost there belong to that stream's body alone: the
/// frames after it, and the HPACK state, are not touched by them.
pub fn data_frame_remainder(buf: &[u8]) -> Option<(u32, usize)> {
    let h = read_header(buf)?;
    if h.kind != FRAME_DATA || check_header(&h).is_err() {
        return None;
    }
    let missing = (FRAME_HEADER_LEN + h.len_bytes).checked_sub(buf.len())?;
    (missing > 0).then_some((h.stream_id, missing))
}

/// Whether `buf` plausibly begins with frames (as [`find_frame_boundary`]
/// judges a candidate): what a direction joined mid-connection looks like,
/// and what other protocols' bytes (ttrpc, TLS records) do not.
pub fn starts_with_frames(buf: &[u8]) -> bool {
    plausible_frames_at(buf)
}

fn plausible_frames_at(buf: &[u8]) -> bool {
    let mut at = 0;
    for _ in 0..RESYNC_FRAMES {
        if at == buf.len() {
            return at > 0;
        }
        let Some(h) = read_header(&buf[at..]) else {
            // A partial header at the end: judge by what we have seen.
            return at > 0;
        };
        if h.kind > 0x9 || check_header(&h).is_err() || h.flags & !valid_flags(h.kind) != 0 {
            return false;
        }
        let complete_frames_before = at > 0;
        at += FRAME_HEADER_LEN + h.len_bytes;
        if at > buf.len() {
            // The frame runs past what we have (its end comes in a later
            // chunk): trust it after a complete frame, or alone when its
            // length is within the default SETTINGS_MAX_FRAME_SIZE.
            return complete_frames_before || h.len_bytes <= 16_384;
        }
    }
    true
}

fn valid_flags(kind: u8) -> u8 {
    match kind {
        0x0 => FLAG_END_STREAM | FLAG_PADDED,
        0x1 => FLAG_END_STREAM | FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY,
        0x4 | 0x6 => FLAG_ACK,
        0x5 => FLAG_END_HEADERS | FLAG_PADDED,
        0x9 => FLAG_END_HEADERS,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = len.to_be_bytes()[1..].to_vec();
        out.extend([kind, flags]);
        out.extend(stream_id.to_be_bytes());
        out.extend(payload);
        out
    }

    #[test]
    fn padded_headers_with_priority_lose_padding_and_priority_bytes() {
        // pad length 2, priority (exclusive, depends on 3, weight 15), block "ab", 2 pad bytes.
        let payload = [2, 0x80, 0, 0, 3, 15, b'a', b'b', 0, 0];
        let bytes = frame(
            0x1,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS,
            5,
            &payload,
        );
        let decoded = parse_frame(&bytes);
        let expected = Frame::Headers {
            stream_id: 5,
            end_stream: false,
            end_headers: true,
            priority: Some(Priority {
                depends_on: 3,
                exclusive: true,
                weight: 15,
            }),
            fragment: b"ab",
        };
        assert_eq!(
            decoded,
            Ok(Decoded::Message {
                msg: expected,
                consumed: bytes.len()
            })
        );
    }

    #[test]
    fn padding_longer_than_payload_costs_only_that_frame() {
        let bytes = frame(0x0, FLAG_PADDED, 1, &[9, b'x']);
        let Err(error) = parse_frame(&bytes) else {
            panic!("accepted bad padding")
        };
        assert!(error.can_continue());
        assert_eq!(error.frame_len_bytes(), bytes.len());
    }

    #[test]
    fn partial_frame_is_incomplete() {
        let bytes = frame(0x0, 0, 1, b"hello");
        assert_eq!(parse_frame(&bytes[..7]), Ok(Decoded::Incomplete));
        assert_eq!(parse_frame(&bytes[..12]), Ok(Decoded::Incomplete));
    }

    #[test]
    fn ping_of_wrong_length_means_lost_sync() {
        let bytes = frame(0x6, 0, 0, b"1234");
        assert!(matches!(parse_frame(&bytes), Err(e) if !e.can_continue()));
    }

    #[test]
    fn finds_boundary_after_garbage() {
        let mut bytes = b"tail of an earlier frame".to_vec();
        let start = bytes.len();
        bytes.extend(frame(0x8, 0, 0, &[0, 0, 1, 0]));
        bytes.extend(frame(0x6, 0, 0, &[0; 8]));
        bytes.extend(frame(0x0, 1, 3, b"data"));
        assert_eq!(find_frame_boundary(&bytes), Some(start));
    }
}
