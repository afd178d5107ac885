//! OTLP-JSON file export: spans → a file of one `ExportTraceServiceRequest`
//! JSON object per line, as the OpenTelemetry file exporter specification
//! writes them, for when no collector is at hand.
//!
//! In: batches of [`Span`]s, given to [`OtlpJsonFile::write`]. Out: one line
//! per batch, appended (never overwriting) to a file created with mode 0644
//! (spans carry no payloads or credentials). The JSON is the OTLP/JSON
//! mapping, produced by `opentelemetry-proto`'s serde support: lowerCamelCase
//! field names, trace and span ids as lower-case hex, times as decimal
//! strings of unix nanoseconds, enums (span kind, status code) as integers.
//! Spans carry the same resource and scope as [`super::otlp`]'s. The
//! collector's `otlpjsonfile` receiver reads such files back.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use opentelemetry::InstrumentationScope;
use opentelemetry_proto::{
    tonic::collector::trace::v1::ExportTraceServiceRequest,
    transform::{
        common::tonic::ResourceAttributesWithSchema,
        trace::tonic::group_spans_by_resource_and_scope,
    },
};

use super::otlp::{local_host_name, podtrace_resource, podtrace_scope, span_data};
use crate::correlate::span::Span;

/// Why an OTLP-JSON file could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum OtlpJsonError {
    /// Opening (or creating) the file failed.
    #[error("cannot open OTLP-JSON file {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The reason.
        #[source]
        source: io::Error,
    },
    /// Appending a line failed.
    #[error("cannot append to OTLP-JSON file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The reason.
        #[source]
        source: io::Error,
    },
    /// A line is not an `ExportTraceServiceRequest` in OTLP-JSON, or holds
    /// a span that is not one of podtrace's.
    #[error("line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The request could not be encoded (not expected: every field has a
    /// JSON form).
    #[error("cannot encode spans as OTLP-JSON: {0}")]
    Encode(#[from] serde_json::Error),
}

/// An OTLP-JSON file being appended to.
#[derive(Debug)]
pub struct OtlpJsonFile {
    path: PathBuf,
    // Unbuffered: each line goes out in one write, so a crash leaves whole
    // lines and another reader never sees half a request.
    file: File,
    resource: ResourceAttributesWithSchema,
    scope: InstrumentationScope,
}

impl OtlpJsonFile {
    /// Opens `path` for appending, creating it (mode 0644) if missing. Spans
    /// get the resource `service.name=podtrace`, `service.version`,
    /// `k8s.node.name=node_name` and, when given, `host.name`.
    pub fn open(
        path: impl Into<PathBuf>,
        node_name: &str,
        host_name: Option<&str>,
    ) -> Result<Self, OtlpJsonError> {
        let path = path.into();
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .open(&path)
            .map_err(|source| OtlpJsonError::Open {
                path: path.clone(),
                source,
            })?;
        Ok(Self {
            path,
            file,
            resource: (&podtrace_resource(node_name, host_name)).into(),
            scope: podtrace_scope(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `spans` as one request on one line; writes nothing for none.
    pub fn write(&mut self, spans: &[Span]) -> Result<(), OtlpJsonError> {
        if spans.is_empty() {
            return Ok(());
        }
        let mut line = serde_json::to_vec(&self.request(spans))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(|source| OtlpJsonError::Write {
                path: self.path.clone(),
                source,
            })
    }

    fn request(&self, spans: &[Span]) -> ExportTraceServiceRequest {
        request(spans, &self.resource, &self.scope)
    }
}

fn request(
    spans: &[Span],
    resource: &ResourceAttributesWithSchema,
    scope: &InstrumentationScope,
) -> ExportTraceServiceRequest {
    let spans = spans
        .iter()
        .map(|span| span_data(span.clone(), scope))
        .collect();
    ExportTraceServiceRequest {
        resource_spans: group_spans_by_resource_and_scope(spans, resource),
    }
}

/// `spans` as one OTLP-JSON request line (with its newline; empty for no
/// spans), with podtrace's resource for node `node_name`.
pub fn to_line(spans: &[Span], node_name: &str) -> Result<String, OtlpJsonError> {
    if spans.is_empty() {
        return Ok(String::new());
    }
    let resource: ResourceAttributesWithSchema =
        (&podtrace_resource(node_name, local_host_name().as_deref())).into();
    let mut line = serde_json::to_string(&request(spans, &resource, &podtrace_scope()))?;
    line.push('\n');
    Ok(line)
}

/// Reads spans back from OTLP-JSON text (what [`OtlpJsonFile`] writes, or
/// what a collector's file exporter writes): one request per line; blank
/// lines are skipped; a malformed line is an error naming it.
pub fn read_spans(text: &str) -> Result<Vec<Span>, OtlpJsonError> {
    let mut spans = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |reason: String| OtlpJsonError::Malformed {
            line: index + 1,
            reason,
        };
        let request: ExportTraceServiceRequest =
            serde_json::from_str(line).map_err(|e| malformed(e.to_string()))?;
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(from_proto(span).map_err(malformed)?);
                }
            }
        }
    }
    Ok(spans)
}

fn from_proto(span: opentelemetry_proto::tonic::trace::v1::Span) -> Result<Span, String> {
    use opentelemetry_proto::tonic::{common::v1::any_value, trace::v1::status::StatusCode};

    use crate::correlate::span::{AttributeValue, SpanId, SpanKind, SpanLink, SpanStatus, TraceId};
    let trace_id_of = |bytes: &[u8]| -> Result<TraceId, String> {
        Ok(TraceId(bytes.try_into().map_err(|_| {
            format!("trace id of {} bytes", bytes.len())
        })?))
    };
    let trace_id = trace_id_of(&span.trace_id)?;
    let span_id = |bytes: &[u8]| -> Result<SpanId, String> {
        Ok(SpanId(bytes.try_into().map_err(|_| {
            format!("span id of {} bytes", bytes.len())
        })?))
    };
    let parent_span_id = if span.parent_span_id.is_empty() {
        None
    } else {
        Some(span_id(&span.parent_span_id)?)
    };
    let attributes = span
        .attributes
        .into_iter()
        .filter_map(|kv| {
            let value = match kv.value?.value? {
                any_value::Value::StringValue(s) => AttributeValue::String(s),
                any_value::Value::IntValue(i) => AttributeValue::Int(i),
                any_value::Value::BoolValue(b) => AttributeValue::Bool(b),
                // podtrace writes no other kinds; another writer's are left out.
                _ => return None,
            };
            Some((kv.key, value))
        })
        .collect();
    let status = match span.status {
        Some(status) if status.code == StatusCode::Error as i32 => {
            SpanStatus::Error(status.message)
        }
        _ => SpanStatus::Unset,
    };
    Ok(Span {
        trace_id,
        span_id: span_id(&span.span_id)?,
        parent_span_id,
        name: span.name,
        kind: match span.kind {
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            _ => SpanKind::Internal,
        },
        start_unix_ns: span.start_time_unix_nano,
        end_unix_ns: span.end_time_unix_nano,
        attributes,
        status,
        links: span
            .links
            .iter()
            .map(|link| {
                Ok(SpanLink {
                    trace_id: trace_id_of(&link.trace_id)?,
                    span_id: span_id(&link.span_id)?,
                })
            })
            .collect::<Result<_, String>>()?,
    })
}

#[cfg(test)]
mod tests {
    use crate::correlate::contract::attr;
    use std::{fs, os::unix::fs::PermissionsExt as _};

    use super::*;
    use crate::correlate::span::AttributeValue;
    use crate::export::otlp::tests::{
        CANARY, HOST, NODE, assert_requests_carry, holds_canary, pod_spans,
        spans_from_events_with_canaries,
    };

    #[test]
    fn spans_read_back_are_the_spans_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spans.jsonl");
        let spans = pod_spans();
        let mut file = OtlpJsonFile::open(&path, NODE, Some(HOST)).unwrap();
        file.write(&spans[..1]).unwrap();
        file.write(&spans[1..]).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(read_spans(&text).unwrap(), spans);
        let error = read_spans(&format!("{text}{{\"resourceSpans\": 3}}\n")).unwrap_err();
        assert!(error.to_string().starts_with("line 3: "), "{error}");
    }

    fn lines(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn each_batch_is_one_line_that_parses_back_with_hex_ids() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spans.jsonl");
        let mut file = OtlpJsonFile::open(&path, NODE, Some(HOST)).unwrap();
        let spans = pod_spans();
        file.write(&spans[..1]).unwrap();
        file.write(&spans[1..]).unwrap();
        file.write(&[]).unwrap();

        let lines = lines(&path);
        assert_eq!(lines.len(), 2, "one line per non-empty batch");
        let requests: Vec<ExportTraceServiceRequest> = lines
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_requests_carry(&requests, &spans);

        // The spec's JSON mapping, checked on the text itself: hex ids (not
        // base64), string nanoseconds, integer enums, camelCase names.
        let json: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        let span = &json["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], spans[1].trace_id.to_hex());
        assert_eq!(span["spanId"], spans[1].span_id.to_hex());
        assert_eq!(span["parentSpanId"], spans[0].span_id.to_hex());
        assert_eq!(span["startTimeUnixNano"], "1700000001000000007");
        assert_eq!(span["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(span["status"]["code"], 2, "STATUS_CODE_ERROR");
        let resource = &json["resourceSpans"][0]["resource"]["attributes"];
        assert!(
            resource
                .as_array()
                .unwrap()
                .iter()
                .any(|kv| kv["key"] == attr::K8S_NODE_NAME && kv["value"]["stringValue"] == NODE),
            "{resource}"
        );
    }

    #[test]
    fn reopening_appends_and_the_file_is_not_writable_by_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spans.jsonl");
        let spans = pod_spans();
        OtlpJsonFile::open(&path, NODE, Some(HOST))
            .unwrap()
            .write(&spans)
            .unwrap();
        OtlpJsonFile::open(&path, NODE, Some(HOST))
            .unwrap()
            .write(&spans)
            .unwrap();
        assert_eq!(lines(&path).len(), 2, "the second open kept the first line");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600, "{mode:o}");
        assert_eq!(
            mode & 0o133,
            0,
            "no exec, no group or other write: {mode:o}"
        );
    }

    #[test]
    fn open_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("spans.jsonl");
        let error = OtlpJsonFile::open(&path, NODE, None).unwrap_err();
        assert!(error.to_string().contains("missing-dir"), "{error}");
    }

    #[test]
    fn file_never_contains_payload_or_authorization_canaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spans.jsonl");
        let mut file = OtlpJsonFile::open(&path, NODE, Some(HOST)).unwrap();
        file.write(&spans_from_events_with_canaries()).unwrap();
        let written = fs::read(&path).unwrap();
        assert!(!written.is_empty());
        assert!(!holds_canary(&written));

        // Control: a canary in an attribute does show up in the file.
        let mut leaky = spans_from_events_with_canaries();
        leaky[0].attributes.push((
            "podtrace.test.leak".to_owned(),
            AttributeValue::String(CANARY.to_owned()),
        ));
        file.write(&leaky).unwrap();
        assert!(holds_canary(&fs::read(&path).unwrap()));
    }
}
