//! HTTP/1.1 message framing (RFC 9112): heads, body lengths, and finding a
//! start line in bytes that begin mid-connection.
//!
//! In: the bytes of one direction. Out: a parsed [`RequestHead`] or
//! [`ResponseHead`] and how many bytes it used ([`Decoded`]), the
//! [`Framing`] of the body that follows it, and [`find_start_line`] for
//! resynchronising. Start lines and header fields are `httparse`'s; this
//! module decides what they mean for the body (RFC 9112 §6.3) and drops
//! credential values.

use crate::Decoded;
use crate::http2::hpack::CREDENTIAL_HEADERS;

/// Header fields parsed per head; more make the head invalid. Go's
/// net/http and kube-apiserver send around ten.
pub const MAX_HEADER_FIELDS: usize = 128;

/// Methods recognised when searching for a request line without a known
/// message boundary. At a known boundary any token is accepted, but a
/// resynchronisation has only the line itself to go on, so a line starting
/// with `ET /` (a cut `GET`) must not pass for a request.
const KNOWN_METHODS: [&[u8]; 9] = [
    b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"CONNECT", b"TRACE",
];
/// Longest start line a resynchronisation waits for before giving up on it.
const MAX_START_LINE_BYTES: usize = 8 << 10;

/// Header fields of a head or trailer section, names lowercased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    /// Fields in order, values lossily decoded as UTF-8.
    pub fields: Vec<(String, String)>,
    /// Names of fields dropped because their values are credentials.
    pub redacted: Vec<String>,
}

impl Headers {
    /// The first value of `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name` (lowercase), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header (`connection`, `transfer-encoding`)
    /// lists `token`, case-insensitively.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.get_all(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    fn from_httparse(parsed: &[httparse::Header<'_>]) -> Headers {
        let mut headers = Headers::default();
        for field in parsed {
            let name = field.name.to_ascii_lowercase();
            if CREDENTIAL_HEADERS.contains(&name.as_str()) {
                headers.redacted.push(name);
            } else {
                let value = String::from_utf8_lossy(field.value).into_owned();
                headers.fields.push((name, value));
            }
        }
        headers
    }
}

/// A request line and its header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method token as sent (`GET`).
    pub method: String,
    /// The request target as sent (`/api/v1/pods?watch=1`).
    pub target: String,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Header fields, credentials dropped.
    pub headers: Headers,
}

/// A status line and its header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// The reason phrase as sent.
    pub reason: String,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Header fields, credentials dropped.
    pub headers: Headers,
}

/// A head that cannot be parsed. The bytes after it cannot be trusted to
/// be at a message boundary: the direction resynchronises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// `httparse` rejected the start line or a header field.
    #[error("invalid head: {reason}")]
    Invalid {
        /// httparse's description.
        reason: String,
    },
    /// No end of head within the limit.
    #[error("head longer than {limit_bytes} bytes")]
    TooLarge {
        /// The limit that was reached.
        limit_bytes: usize,
    },
}

impl HeadError {
    /// Always false: the message is lost; the next one is searched for.
    pub fn can_continue(&self) -> bool {
        false
    }
}

/// How the body after a head is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a request without length fields, a response to HEAD, 1xx,
    /// 204 and 304.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`, then trailer fields.
    Chunked,
    /// A response without a length: the body ends when the connection closes.
    UntilClose,
    /// `101 Switching Protocols`, or a 2xx answer to CONNECT: the bytes
    /// after the head are another protocol.
    Switched,
}

/// Why a body's length cannot be known. The message is cut at its head
/// and the direction resynchronises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// `Content-Length` not a number, or several different values.
    #[error("invalid content-length {value:?}")]
    BadContentLength {
        /// The value(s) as sent, first 64 bytes.
        value: String,
    },
    /// A request `Transfer-Encoding` whose last coding is not `chunked`:
    /// RFC 9112 §6.3 says the length cannot be determined.
    #[error("request transfer-encoding {value:?} does not end in chunked")]
    UnframedRequest {
        /// The value as sent, first 64 bytes.
        value: String,
    },
}

/// Parses a request head at the start of `buf`, after any empty lines.
pub fn parse_request_head(
    buf: &[u8],
    max_head_bytes: usize,
) -> Result<Decoded<RequestHead>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADER_FIELDS];
    let mut request = httparse::Request::new(&mut fields);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(consumed)) if consumed <= max_head_bytes => {
            Ok(Decoded::Message {
                msg: RequestHead {
                    method: request.method.unwrap_or_default().to_string(),
                    target: request.path.unwrap_or_default().to_string(),
                    minor_version: request.version.unwrap_or(1),
                    headers: Headers::from_httparse(request.headers),
                },
                consumed,
            })
        }
        Ok(httparse::Status::Partial) if buf.len() <= max_head_bytes => Ok(Decoded::Incomplete),
        Ok(_) => Err(HeadError::TooLarge {
            limit_bytes: max_head_bytes,
        }),
        Err(error) => Err(HeadError::Invalid {
            reason: error.to_string(),
        }),
    }
}

/// Parses a response head at the start of `buf`, after any empty lines.
pub fn parse_response_head(
    buf: &[u8],
    max_head_bytes: usize,
) -> Result<Decoded<ResponseHead>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADER_FIELDS];
    let mut response = httparse::Response::new(&mut fields);
    match response.parse(buf) {
        Ok(httparse::Status::Complete(consumed)) if consumed <= max_head_bytes => {
            Ok(Decoded::Message {
                msg: ResponseHead {
                    status: response.code.unwrap_or_default(),
                    reason: response.reason.unwrap_or_default().to_string(),
                    minor_version: response.version.unwrap_or(1),
                    headers: Headers::from_httparse(response.headers),
                },
                consumed,
            })
        }
        Ok(httparse::Status::Partial) if buf.len() <= max_head_bytes => Ok(Decoded::Incomplete),
        Ok(_) => Err(HeadError::TooLarge {
            limit_bytes: max_head_bytes,
        }),
        Err(error) => Err(HeadError::Invalid {
            reason: error.to_string(),
        }),
    }
}

/// Parses trailer fields (after the last chunk) up to and including the
/// empty line that ends them.
pub fn parse_trailers(buf: &[u8], max_bytes: usize) -> Result<Decoded<Headers>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADER_FIELDS];
    match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((consumed, parsed))) if consumed <= max_bytes => {
            Ok(Decoded::Message {
                msg: Headers::from_httparse(parsed),
                consumed,
            })
        }
        Ok(httparse::Status::Partial) if buf.len() <= max_bytes => Ok(Decoded::Incomplete),
        Ok(_) => Err(HeadError::TooLarge {
            limit_bytes: max_bytes,
        }),
        Err(error) => Err(HeadError::Invalid {
            reason: error.to_string(),
        }),
    }
}

fn clip(value: &str) -> String {
    value.chars().take(64).collect()
}

/// `Content-Length`: every value (repeated fields or a list) must be the
/// same number (RFC 9110 §8.6).
fn content_length(headers: &Headers) -> Result<Option<u64>, FramingError> {
    let mut length = None;
    for value in headers.get_all("content-length") {
        for item in value.split(',') {
            let item = item.trim();
            let parsed = item
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| item.parse::<u64>().ok())
                .flatten();
            match (parsed, length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(seen)) if n == seen => {}
                _ => {
                    return Err(FramingError::BadContentLength { value: clip(value) });
                }
            }
        }
    }
    Ok(length)
}

/// Whether `transfer-encoding` is present, and whether its last coding is `chunked`.
fn transfer_encoding(headers: &Headers) -> Option<bool> {
    let last = headers
        .get_all("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .last()?;
    Some(last.eq_ignore_ascii_case("chunked"))
}

/// The body framing of a request (RFC 9112 §6.3 rules 4–6): chunked
/// wins over `Content-Length`, no length fields mean no body.
pub fn request_framing(head: &RequestHead) -> Result<Framing, FramingError> {
    match transfer_encoding(&head.headers) {
        Some(true) => return Ok(Framing::Chunked),
        Some(false) => {
            return Err(FramingError::UnframedRequest {
                value: clip(head.headers.get("transfer-encoding").unwrap_or_default()),
            });
        }
        None => {}
    }
    Ok(match content_length(&head.headers)? {
        Some(0) | None => Framing::Empty,
        Some(n) => Framing::Length(n),
    })
}

/// The body framing of a response to a request with `method` (`None`
/// when the request was not captured: assumed not HEAD or CONNECT).
pub fn response_framing(
    head: &ResponseHead,
    method: Option<&str>,
) -> Result<Framing, FramingError> {
    let status = head.status;
    if status == 101 || (method == Some("CONNECT") && (200..300).contains(&status)) {
        return Ok(Framing::Switched);
    }
    if method == Some("HEAD") || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    match transfer_encoding(&head.headers) {
        Some(true) => return Ok(Framing::Chunked),
        // Another final coding: only the connection's close ends it.
        Some(false) => return Ok(Framing::UntilClose),
        None => {}
    }
    Ok(match content_length(&head.headers)? {
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

/// Where a start line was found by [`find_start_line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartLine {
    /// A complete start line begins at this offset.
    At(usize),
    /// The bytes from this offset may be the start of one: wait for more.
    MaybeAt(usize),
    /// No start line; none can begin in these bytes.
    None,
}

/// Finds the first line of `buf` that is a request line (`requests`) or a
/// status line. Candidates are the start of `buf` and every byte after a
/// `\n`; request lines must use a standard method, and both must name
/// HTTP/1.0 or HTTP/1.1, so body bytes rarely pass for a start line.
pub fn find_start_line(buf: &[u8], requests: bool) -> StartLine {
    let candidates = std::iter::once(0).chain(
        buf.iter()
            .enumerate()
            .filter_map(|(i, &b)| (b == b'\n').then_some(i + 1)),
    );
    for start in candidates {
        let rest = &buf[start..];
        if rest.is_empty() {
            break;
        }
        let (line, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => (&rest[..end], true),
            None => (rest, false),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let fits = if requests {
            request_line_fits(line, complete)
        } else {
            status_line_fits(line, complete)
        };
        match fits {
            true if complete => return StartLine::At(start),
            true if line.len() <= MAX_START_LINE_BYTES => return StartLine::MaybeAt(start),
            _ => {}
        }
    }
    StartLine::None
}

/// `method SP target SP HTTP/1.x`, or a prefix of one when `!complete`.
fn request_line_fits(line: &[u8], complete: bool) -> bool {
    let Some(method) = KNOWN_METHODS.iter().find(|m| line.starts_with(m)) else {
        // A line cut before its method ends may still become one.
        return !complete && KNOWN_METHODS.iter().any(|m| m.starts_with(line));
    };
    let rest = &line[method.len()..];
    let Some(rest) = rest.strip_prefix(b" ") else {
        return !complete && rest.is_empty();
    };
    let target_len = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let (target, version) = rest.split_at(target_len);
    if target.iter().any(|&b| !(0x21..0x7f).contains(&b)) {
        return false;
    }
    version_fits(version, b" HTTP/1.", complete, |tail| {
        matches!(tail, [b'0' | b'1'])
    })
}

/// `HTTP/1.x SP 3DIGIT [SP reason]`, or a prefix of one when `!complete`.
fn status_line_fits(line: &[u8], complete: bool) -> bool {
    version_fits(line, b"HTTP/1.", complete, |tail| {
        matches!(
            tail,
            [b'0' | b'1', b' ', a, b, c, ..]
                if [a, b, c].iter().all(|d| d.is_ascii_digit())
                    && tail.get(5).is_none_or(|&b| b == b' ')
        )
    })
}

/// Whether `text` starts with `prefix` and the rest satisfies `tail_ok`
/// (when the line is complete), or could still (when not).
fn version_fits(
    text: &[u8],
    prefix: &[u8],
    complete: bool,
    tail_ok: impl Fn(&[u8]) -> bool,
) -> bool {
    if complete {
        return text.strip_prefix(prefix).is_some_and(tail_ok);
    }
    if text.len() <= prefix.len() {
        return prefix.starts_with(text);
    }
    // Incomplete lines only need a plausible beginning; the complete line
    // is checked again once its end arrives.
    text.starts_with(prefix)
}
