//! `podtrace explain NAMESPACE/POD`: a Pod's creation as podtrace traced
//! it — the waterfall, where it stands (Running, or the phase it is stuck
//! in) and every error on the way (a failed CRI call, a runc exit code, a
//! conflicting etcd write) — the answer `kubectl describe pod` leaves you to
//! assemble by hand. Under the waterfall, the facts its CRI spans carry:
//! whether each image was present or pulled, and the security context each
//! container asked for.
//!
//! In: the spans a running agent holds (`GET /traces` on its metrics
//! address) or an OTLP-JSON file. Out: text.

use crate::correlate::contract::{What, attr};

use std::collections::BTreeMap;

use crate::{
    correlate::{
        Span,
        span::{SpanStatus, TraceId},
    },
    export::waterfall,
};

/// What `explain` says about one Pod, from `spans` (of any Pods): one
/// section per trace of a Pod of that name (a Pod deleted and created again
/// under the same name has two), oldest first. `None` if no span names it.
pub fn explain(spans: &[Span], namespace: &str, name: &str) -> Option<String> {
    let of_pod = |span: &Span| {
        span.string_attribute(attr::K8S_NAMESPACE_NAME) == Some(namespace)
            && span.string_attribute(attr::K8S_POD_NAME) == Some(name)
    };
    let mut traces: BTreeMap<TraceId, Vec<Span>> = BTreeMap::new();
    for span in spans.iter().filter(|span| of_pod(span)) {
        traces.entry(span.trace_id).or_default();
    }
    if traces.is_empty() {
        return None;
    }
    for span in spans {
        if let Some(trace) = traces.get_mut(&span.trace_id) {
            trace.push(span.clone());
        }
    }
    let mut sections: Vec<(u64, String)> = traces
        .into_values()
        .map(|spans| {
            let start = spans.iter().map(|s| s.start_unix_ns).min().unwrap_or(0);
            (start, section(&spans))
        })
        .collect();
    sections.sort_by_key(|(start, _)| *start);
    Some(
        sections
            .into_iter()
            .map(|(_, text)| text)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

fn section(spans: &[Span]) -> String {
    let mut out = waterfall::render(spans);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    let root = spans.iter().find(|span| span.parent_span_id.is_none());
    let verdict = match root {
        Some(root) => {
            let ms = root.end_unix_ns.saturating_sub(root.start_unix_ns) as f64 / 1e6;
            let complete = root.bool_attribute(attr::TRACE_COMPLETE) == Some(true);
            let deletion = What::of(root) == What::DeletionRoot;
            match (&root.status, complete) {
                // The Pod's deletion: a trace of its own.
                (SpanStatus::Unset, _) if deletion => {
                    format!("status: deleted; its teardown took {ms:.1} ms")
                }
                (SpanStatus::Unset, true) => {
                    format!("status: Running {ms:.1} ms after its create request")
                }
                (SpanStatus::Error(message), _) => format!("status: {message}"),
                (SpanStatus::Unset, false) => {
                    match root.string_attribute(attr::TRACE_STUCK_PHASE) {
                        Some(phase) => format!("status: incomplete: {phase}"),
                        None => "status: incomplete".to_owned(),
                    }
                }
            }
        }
        None => "status: no root span yet (the Pod is still being created, or no agent saw \
                 etcd handle its create)"
            .to_owned(),
    };
    out.push_str(&verdict);
    out.push('\n');
    if let Some(node) = spans
        .iter()
        .find_map(|span| span.string_attribute(attr::K8S_NODE_NAME))
    {
        out.push_str(&format!("node: {node}\n"));
    }
    let mut errors: Vec<&Span> = spans
        .iter()
        .filter(|span| matches!(span.status, SpanStatus::Error(_)) && span.parent_span_id.is_some())
        .collect();
    errors.sort_by_key(|span| span.start_unix_ns);
    for span in errors {
        if let SpanStatus::Error(message) = &span.status {
            out.push_str(&format!("error: {}: {message}\n", waterfall::label(span)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::contract::name;
    use crate::correlate::span::{AttributeValue, SpanId, SpanKind};

    fn span(trace: TraceId, name: &str, parent: Option<&str>, status: SpanStatus) -> Span {
        Span {
            trace_id: trace,
            span_id: SpanId::for_key(trace, name.as_bytes()),
            parent_span_id: parent.map(|p| SpanId::for_key(trace, p.as_bytes())),
            name: name.to_owned(),
            kind: SpanKind::Internal,
            start_unix_ns: 1_000_000_000,
            end_unix_ns: 1_500_000_000,
            attributes: vec![
                (
                    attr::K8S_POD_NAME.to_owned(),
                    AttributeValue::String("web".into()),
                ),
                (
                    attr::K8S_NAMESPACE_NAME.to_owned(),
                    AttributeValue::String("default".into()),
                ),
                (
                    attr::K8S_NODE_NAME.to_owned(),
                    AttributeValue::String("node-a".into()),
                ),
            ],
            status,
            links: Vec::new(),
        }
    }

    #[test]
    fn a_stuck_pod_says_where_and_why() {
        let trace = TraceId::for_pod("c", "uid");
        let spans = vec![
            span(
                trace,
                &name::pod_create("default", "web"),
                None,
                SpanStatus::Error(
                    "incomplete: timed out; stuck in node: bound, not reported Running".into(),
                ),
            ),
            span(
                trace,
                &name::node("node-a"),
                Some(&name::pod_create("default", "web")),
                SpanStatus::Unset,
            ),
            span(
                trace,
                "runtime.v1.RuntimeService/RunPodSandbox",
                Some(&name::node("node-a")),
                SpanStatus::Error("gRPC status 2: no runtime for \"gone\" is configured".into()),
            ),
        ];
        let text = explain(&spans, "default", "web").unwrap();
        assert!(
            text.contains("status: incomplete: timed out; stuck in node"),
            "{text}"
        );
        assert!(text.contains("node: node-a"), "{text}");
        assert!(
            text.contains(
                "error: runtime.v1.RuntimeService/RunPodSandbox: gRPC status 2: no runtime"
            ),
            "{text}"
        );
        assert!(explain(&spans, "default", "other").is_none());
    }

    #[test]
    fn a_deleted_pod_has_its_creation_and_then_its_deletion() {
        let creation = TraceId::for_pod("c", "uid");
        let deletion = TraceId::for_pod_deletion("c", "uid");
        let mut root = span(
            creation,
            &name::pod_create("default", "web"),
            None,
            SpanStatus::Unset,
        );
        root.attributes
            .push((attr::TRACE_COMPLETE.to_owned(), AttributeValue::Bool(true)));
        let mut delete = span(
            deletion,
            &name::pod_delete("default", "web"),
            None,
            SpanStatus::Unset,
        );
        delete.start_unix_ns += 9_000_000_000;
        delete.end_unix_ns = delete.start_unix_ns + 250_000_000;
        let text = explain(&[delete, root], "default", "web").unwrap();
        let running = text.find("status: Running 500.0 ms").expect(&text);
        let deleted = text
            .find("status: deleted; its teardown took 250.0 ms")
            .expect(&text);
        assert!(running < deleted, "creation first: {text}");
    }

    #[test]
    fn image_source_is_said_under_the_waterfall() {
        let trace = TraceId::for_pod("c", "uid");
        let mut pull = span(
            trace,
            "runtime.v1.ImageService/PullImage",
            Some(&name::node("node-a")),
            SpanStatus::Unset,
        );
        for (key, value) in [
            (attr::RPC_METHOD, "PullImage"),
            (attr::CONTAINER_IMAGE_NAME, "nginx:1.27"),
        ] {
            pull.attributes
                .push((key.to_owned(), AttributeValue::String(value.into())));
        }
        let spans = vec![
            span(trace, &name::node("node-a"), None, SpanStatus::Unset),
            pull,
        ];
        let text = explain(&spans, "default", "web").unwrap();
        assert!(
            text.contains("\n  image nginx:1.27 pulled (PullImage 500.0 ms)\n"),
            "{text}"
        );
    }
}
