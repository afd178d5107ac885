//! Reading back what podtrace exported to an OTLP-JSON file (one
//! `ExportTraceServiceRequest` per line), as a test needs it: spans with
//! their ids, parent, kind, attributes and status, and the resource's
//! attributes.

use std::{collections::HashMap, path::Path};
use tracer_user::correlate::contract::attr;

use anyhow::Context as _;
use serde_json::Value;

/// One exported span.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportedSpan {
    /// Hex trace id.
    pub trace_id: String,
    /// Hex span id.
    pub span_id: String,
    /// Hex parent span id; `None` for a root.
    pub parent_span_id: Option<String>,
    /// Name.
    pub name: String,
    /// OTLP span kind (1 internal, 2 server, 3 client).
    pub kind: u64,
    /// Unix ns.
    pub start_unix_ns: u64,
    /// Unix ns.
    pub end_unix_ns: u64,
    /// Attributes as their JSON values (`{"stringValue": …}` unwrapped).
    pub attributes: HashMap<String, Value>,
    /// OTLP status code (0 unset, 2 error).
    pub status_code: u64,
    /// Status message.
    pub status_message: String,
    /// The `k8s.node.name` of the resource that exported it.
    pub resource_node: Option<String>,
    /// Linked spans: (hex trace id, hex span id).
    pub links: Vec<(String, String)>,
}

impl ExportedSpan {
    /// A string attribute.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.attributes.get(key)?.as_str()
    }
}

/// Every span in an OTLP-JSON file, in file order.
pub fn read_spans(path: &Path) -> anyhow::Result<Vec<ExportedSpan>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut spans = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let request: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), number + 1))?;
        for resource_spans in array(&request["resourceSpans"]) {
            let resource = attributes(&resource_spans["resource"]["attributes"]);
            let node = resource
                .get(attr::K8S_NODE_NAME)
                .and_then(Value::as_str)
                .map(str::to_owned);
            for scope_spans in array(&resource_spans["scopeSpans"]) {
                for span in array(&scope_spans["spans"]) {
                    spans.push(exported_span(span, node.clone()).with_context(|| {
                        format!("{}:{}: malformed span {span}", path.display(), number + 1)
                    })?);
                }
            }
        }
    }
    Ok(spans)
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

fn attributes(list: &Value) -> HashMap<String, Value> {
    array(list)
        .iter()
        .filter_map(|kv| {
            let key = kv["key"].as_str()?.to_owned();
            let value = kv["value"].as_object()?.values().next()?.clone();
            Some((key, value))
        })
        .collect()
}

fn exported_span(span: &Value, resource_node: Option<String>) -> anyhow::Result<ExportedSpan> {
    let text = |key: &str| -> anyhow::Result<String> {
        Ok(span[key]
            .as_str()
            .with_context(|| format!("no {key}"))?
            .to_owned())
    };
    let nanos = |key: &str| -> anyhow::Result<u64> { Ok(text(key)?.parse()?) };
    let parent = span["parentSpanId"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    Ok(ExportedSpan {
        trace_id: text("traceId")?,
        span_id: text("spanId")?,
        parent_span_id: parent,
        name: text("name")?,
        kind: span["kind"].as_u64().unwrap_or(0),
        start_unix_ns: nanos("startTimeUnixNano")?,
        end_unix_ns: nanos("endTimeUnixNano")?,
        attributes: attributes(&span["attributes"]),
        status_code: span["status"]["code"].as_u64().unwrap_or(0),
        status_message: span["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        resource_node,
        links: array(&span["links"])
            .iter()
            .map(|link| {
                let id = |key: &str| -> anyhow::Result<String> {
                    Ok(link[key]
                        .as_str()
                        .with_context(|| format!("link without {key}"))?
                        .to_owned())
                };
                Ok((id("traceId")?, id("spanId")?))
            })
            .collect::<anyhow::Result<_>>()?,
    })
}
