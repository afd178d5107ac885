//! A terminal waterfall per finished Pod trace: each span on one line,
//! indented under its parent, with a bar placed on the trace's timeline.
//!
//! In: finished spans as they come. Out: the rendered waterfall of a trace
//! once this agent's part of it is complete: at its root span where the
//! agent saw the Pod's etcd writes, else at its node span (the Pod's
//! containers were started on this node).

use crate::correlate::contract::{What, attr};

use std::collections::HashMap;

use crate::correlate::{
    Span,
    span::{AttributeValue, SpanKind, SpanStatus, TraceId},
};

/// Traces buffered at once; past it the oldest-started is dropped (counted).
const MAX_TRACES: usize = 1024;
/// Spans buffered per trace; more are counted and left out.
const MAX_SPANS_PER_TRACE: usize = 256;
/// Width of the timeline in characters.
const BAR_WIDTH: usize = 40;
/// Narrowest label column: the bars of most traces line up across traces.
const MIN_LABEL_WIDTH: usize = 52;

/// Spans of unfinished traces.
#[derive(Debug, Default)]
pub struct Waterfalls {
    traces: HashMap<TraceId, Vec<Span>>,
    /// Spans left out because a bound was reached.
    pub dropped_spans: u64,
}

impl Waterfalls {
    /// Takes finished spans; returns the waterfalls of traces they complete,
    /// once the whole batch is in: a deletion's node span completes its
    /// trace, and its root comes right after it in the same batch.
    pub fn on_spans(&mut self, spans: &[Span]) -> Vec<String> {
        let mut completed: Vec<TraceId> = Vec::new();
        for span in spans {
            if !self.traces.contains_key(&span.trace_id) && self.traces.len() >= MAX_TRACES {
                let oldest = self
                    .traces
                    .iter()
                    .min_by_key(|(_, spans)| {
                        spans.iter().map(|s| s.start_unix_ns).min().unwrap_or(0)
                    })
                    .map(|(trace, _)| *trace);
                if let Some(oldest) = oldest {
                    self.dropped_spans += self
                        .traces
                        .remove(&oldest)
                        .map_or(0, |spans| spans.len() as u64);
                }
            }
            let trace = self.traces.entry(span.trace_id).or_default();
            if trace.len() >= MAX_SPANS_PER_TRACE {
                self.dropped_spans += 1;
            } else {
                trace.push(span.clone());
            }
            if completes_trace(span, trace) && !completed.contains(&span.trace_id) {
                completed.push(span.trace_id);
            }
        }
        completed
            .into_iter()
            .filter_map(|trace| self.traces.remove(&trace))
            .map(|spans| render(&spans))
            .collect()
    }
}

/// Whether this agent's part of a trace ends with `span`: the root (emitted
/// last, by the agent that saw etcd handle the Pod's create), or, on an
/// agent that saw no etcd write of the Pod (a worker node), the node span.
fn completes_trace(span: &Span, trace: &[Span]) -> bool {
    let from_etcd = |span: &Span| {
        span.attributes.iter().any(|(key, value)| {
            key == attr::DB_SYSTEM_NAME && *value == AttributeValue::String("etcd".into())
        })
    };
    span.parent_span_id.is_none() || (What::of(span) == What::Node && !trace.iter().any(from_etcd))
}

/// A span's line label: a short name (`CRI RunPodSandbox`, `etcd Txn`),
/// which side of a call it is, for etcd writes what the write did to the
/// Pod, and for etcd's own work (WAL, Raft, apply) the member and its role.
pub fn label(span: &Span) -> String {
    let attribute = |key: &str| span.string_attribute(key);
    let name = match (attribute(attr::RPC_SERVICE), attribute(attr::RPC_METHOD)) {
        (Some(service), Some(method)) if service.starts_with("runtime.v1.") => {
            format!("CRI {method}")
        }
        (Some(_), Some(method)) if attribute(attr::DB_SYSTEM_NAME) == Some("etcd") => {
            format!("etcd {method}")
        }
        _ => span.name.clone(),
    };
    let side = match span.kind {
        SpanKind::Client => " (client)",
        SpanKind::Server => " (server)",
        SpanKind::Internal => "",
    };
    let change = attribute(attr::K8S_POD_CHANGE).map(|change| format!(": {change}"));
    // Which etcd member did it, where several take part in a write.
    let member = match (
        span.kind,
        attribute(attr::ETCD_MEMBER_NAME).or(attribute(attr::ETCD_MEMBER_ID)),
    ) {
        (SpanKind::Internal, Some(member)) => match attribute(attr::ETCD_MEMBER_ROLE) {
            Some(role) => format!(" on {member} ({role})"),
            None => format!(" on {member}"),
        },
        _ => String::new(),
    };
    format!("{name}{side}{}{member}", change.unwrap_or_default())
}

/// The waterfall of one trace's spans.
pub fn render(spans: &[Span]) -> String {
    let start = spans
        .iter()
        .map(|span| span.start_unix_ns)
        .min()
        .unwrap_or(0);
    let end = spans
        .iter()
        .map(|span| span.end_unix_ns)
        .max()
        .unwrap_or(start);
    let total = end.saturating_sub(start).max(1);
    let pod = spans.iter().find_map(|span| {
        let get = |key: &str| span.string_attribute(key);
        Some(format!(
            "{}/{} (uid {})",
            get(attr::K8S_NAMESPACE_NAME)?,
            get(attr::K8S_POD_NAME)?,
            get(attr::K8S_POD_UID)?
        ))
    });
    let mut lines = vec![format!(
        "trace {}  pod {}  {:.1} ms on this node",
        spans
            .first()
            .map(|span| span.trace_id.to_hex())
            .unwrap_or_default(),
        pod.unwrap_or_else(|| "?".into()),
        total as f64 / 1e6
    )];
    // Depth-first from the spans whose parent is not here (the node span).
    let ids: Vec<_> = spans.iter().map(|span| span.span_id).collect();
    let mut roots: Vec<&Span> = spans
        .iter()
        .filter(|span| {
            span.parent_span_id
                .is_none_or(|parent| !ids.contains(&parent))
        })
        .collect();
    roots.sort_by_key(|span| span.start_unix_ns);
    let mut stack: Vec<(&Span, usize)> = roots.into_iter().rev().map(|span| (span, 0)).collect();
    let mut rows: Vec<(String, String, f64, String)> = Vec::new();
    while let Some((span, depth)) = stack.pop() {
        let offset = ((span.start_unix_ns.saturating_sub(start)) as u128 * BAR_WIDTH as u128
            / u128::from(total)) as usize;
        let length = ((span.end_unix_ns.saturating_sub(span.start_unix_ns)) as u128
            * BAR_WIDTH as u128
            / u128::from(total))
        .max(1) as usize;
        let offset = offset.min(BAR_WIDTH - 1);
        let length = length.min(BAR_WIDTH - offset);
        let bar = format!(
            "{}{}{}",
            " ".repeat(offset),
            "█".repeat(length),
            " ".repeat(BAR_WIDTH - offset - length)
        );
        let error = match &span.status {
            SpanStatus::Error(message) => format!("  ✗ {message}"),
            SpanStatus::Unset => String::new(),
        };
        let label = format!("{}{}", "  ".repeat(depth), label(span));
        let duration_ms = span.end_unix_ns.saturating_sub(span.start_unix_ns) as f64 / 1e6;
        rows.push((label, bar, duration_ms, error));
        let mut children: Vec<&Span> = spans
            .iter()
            .filter(|child| child.parent_span_id == Some(span.span_id))
            .collect();
        children.sort_by_key(|child| std::cmp::Reverse(child.start_unix_ns));
        stack.extend(children.into_iter().map(|child| (child, depth + 1)));
    }
    // The bars start in one column, past the longest label.
    let width = rows
        .iter()
        .map(|(label, ..)| label.chars().count())
        .max()
        .unwrap_or(0)
        .max(MIN_LABEL_WIDTH);
    lines.extend(rows.into_iter().map(|(label, bar, duration_ms, error)| {
        format!("  {label:<width$} |{bar}| {duration_ms:>9.3} ms{error}")
    }));
    lines.extend(facts(spans).into_iter().map(|fact| format!("  {fact}")));
    lines.join("\n")
}

/// One line per fact the CRI spans carry, in order, once (the kubelet's
/// and containerd's spans of a call say the same): where each image came
/// from (`image busybox:1.36 present (ImageStatus)`) and the security
/// context each container asked for (`container c: privileged, caps
/// +NET_ADMIN, runAsUser 0, seccomp RuntimeDefault`).
pub fn facts(spans: &[Span]) -> Vec<String> {
    let mut ordered: Vec<&Span> = spans.iter().collect();
    ordered.sort_by_key(|span| span.start_unix_ns);
    let mut lines: Vec<String> = control_plane_facts(&ordered);
    let mut images: Vec<&str> = Vec::new();
    for span in ordered {
        let attribute = |key: &str| span.string_attribute(key);
        let image = attribute(attr::CONTAINER_IMAGE_NAME);
        let fact = match attribute(attr::RPC_METHOD) {
            Some("ImageStatus") => {
                let present = span.bool_attribute(attr::CONTAINER_IMAGE_PRESENT);
                image.zip(present).map(|(image, present)| {
                    images.push(image);
                    let found = if present { "present" } else { "absent" };
                    format!("image {image} {found} (ImageStatus)")
                })
            }
            Some("PullImage") => image.map(|image| {
                images.push(image);
                match &span.status {
                    SpanStatus::Error(_) => format!("image {image} pull failed (PullImage)"),
                    SpanStatus::Unset => format!(
                        "image {image} pulled (PullImage {:.1} ms)",
                        span.end_unix_ns.saturating_sub(span.start_unix_ns) as f64 / 1e6
                    ),
                }
            }),
            Some("CreateContainer") => {
                if let (Some(image), Some(source)) =
                    (image, attribute(attr::CONTAINER_IMAGE_SOURCE))
                {
                    if !images.contains(&image) {
                        images.push(image);
                        push_once(
                            &mut lines,
                            format!("image {image} {source} (CreateContainer)"),
                        );
                    }
                }
                let name = attribute(attr::K8S_CONTAINER_NAME)
                    .or_else(|| attribute(attr::CONTAINER_ID))
                    .unwrap_or("?");
                security(span).map(|posture| format!("container {name}: {posture}"))
            }
            Some("RunPodSandbox") => security(span).map(|posture| format!("sandbox: {posture}")),
            _ => None,
        };
        if let Some(fact) = fact {
            push_once(&mut lines, fact);
        }
    }
    lines
}

/// One line per fact the control plane's spans carry: who asked for the
/// Pod (the user kube-apiserver authenticated, the client's user agent),
/// a dry run, Pod Security warnings, which scheduler placed it where — or
/// why no node fits, in its words — and the containers' pull policy.
fn control_plane_facts(ordered: &[&Span]) -> Vec<String> {
    let mut lines = Vec::new();
    let root = ordered.iter().find(|span| span.parent_span_id.is_none());
    let root_attribute = |key: &str| root.and_then(|root| root.string_attribute(key));
    let create = ordered.iter().find(|span| {
        span.kind == SpanKind::Server
            && matches!(
                What::of(span),
                What::ApiserverPodCreate | What::CreationRoot
            )
    });
    if let Some(create) = create {
        match (
            create.string_attribute(attr::K8S_USER),
            create.string_attribute(attr::USER_AGENT_ORIGINAL),
        ) {
            (Some(user), Some(agent)) => lines.push(format!("asked by {user} ({agent})")),
            (Some(user), None) => lines.push(format!("asked by {user}")),
            (None, Some(agent)) => lines.push(format!("asked with {agent}")),
            (None, None) => {}
        }
        if create.bool_attribute(attr::K8S_DRY_RUN) == Some(true) {
            lines.push("dry run: admission ran, nothing was stored".to_owned());
        }
        if let Some(warnings) = create.string_attribute(attr::K8S_WARNINGS) {
            lines.push(format!("warnings: {warnings}"));
        }
    }
    let scheduler = root_attribute(attr::K8S_SCHEDULER_NAME).unwrap_or("the scheduler");
    let cycle = ordered
        .iter()
        .rev()
        .find(|span| What::of(span) == What::SchedulingCycle && span.status == SpanStatus::Unset);
    if let Some(cycle) = cycle {
        let counts = match (
            cycle.int_attribute(attr::K8S_SCHEDULING_FEASIBLE_NODES),
            cycle.int_attribute(attr::K8S_SCHEDULING_EVALUATED_NODES),
        ) {
            (Some(feasible), Some(evaluated)) => format!(" ({feasible} of {evaluated} nodes fit)"),
            _ => String::new(),
        };
        if let Some(node) = cycle.string_attribute(attr::K8S_NODE_NAME) {
            lines.push(format!("scheduled by {scheduler} to {node}{counts}"));
        }
    }
    let verdict = root_attribute(attr::K8S_SCHEDULING_FAILURE).or_else(|| {
        ordered
            .iter()
            .find_map(|span| span.string_attribute(attr::K8S_SCHEDULING_FAILURE))
    });
    if let Some(verdict) = verdict {
        let waited = if cycle.is_some() {
            "waited for a node"
        } else {
            "no node fits"
        };
        lines.push(format!("{waited} ({scheduler}): {verdict}"));
    }
    if let Some(policies) = root_attribute(attr::K8S_IMAGE_PULL_POLICY) {
        lines.push(format!("imagePullPolicy {policies}"));
    }
    lines
}

fn push_once(lines: &mut Vec<String>, line: String) {
    if !lines.contains(&line) {
        lines.push(line);
    }
}

/// A span's `container.security.*` attributes, short: `privileged, caps
/// +NET_ADMIN,+SYS_TIME -ALL, runAsUser 0, seccomp RuntimeDefault`.
fn security(span: &Span) -> Option<String> {
    let mut parts = Vec::new();
    if span.bool_attribute(attr::CONTAINER_SECURITY_PRIVILEGED) == Some(true) {
        parts.push("privileged".to_owned());
    }
    let signed = |key: &str, sign: char| {
        span.string_attribute(key).map(|caps| {
            caps.split(',')
                .map(|cap| format!("{sign}{cap}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let caps: Vec<String> = [
        signed(attr::CONTAINER_SECURITY_CAPABILITIES_ADDED, '+'),
        signed(attr::CONTAINER_SECURITY_CAPABILITIES_DROPPED, '-'),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !caps.is_empty() {
        parts.push(format!("caps {}", caps.join(" ")));
    }
    if let Some(user) = span.int_attribute(attr::CONTAINER_SECURITY_RUN_AS_USER) {
        parts.push(format!("runAsUser {user}"));
    }
    for (key, label) in [
        (attr::CONTAINER_SECURITY_SECCOMP, "seccomp"),
        (attr::CONTAINER_SECURITY_APPARMOR, "apparmor"),
    ] {
        if let Some(profile) = span.string_attribute(key) {
            parts.push(format!("{label} {profile}"));
        }
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::contract::name;
    use crate::correlate::span::{SpanId, SpanKind};

    fn span(
        trace: TraceId,
        name: &str,
        id: &str,
        parent: Option<&str>,
        start_ms: u64,
        end_ms: u64,
    ) -> Span {
        Span {
            trace_id: trace,
            span_id: SpanId::for_key(trace, id.as_bytes()),
            parent_span_id: parent.map(|parent| SpanId::for_key(trace, parent.as_bytes())),
            name: name.into(),
            kind: SpanKind::Internal,
            start_unix_ns: start_ms * 1_000_000,
            end_unix_ns: end_ms * 1_000_000,
            attributes: vec![
                (
                    attr::K8S_NAMESPACE_NAME.into(),
                    AttributeValue::String("default".into()),
                ),
                (
                    attr::K8S_POD_NAME.into(),
                    AttributeValue::String("web".into()),
                ),
                (
                    attr::K8S_POD_UID.into(),
                    AttributeValue::String("u-1".into()),
                ),
            ],
            status: SpanStatus::Unset,
            links: Vec::new(),
        }
    }

    #[test]
    fn a_deletions_node_span_and_root_of_one_batch_are_one_waterfall() {
        let trace = TraceId::for_pod_deletion("c", "u-1");
        let mut waterfalls = Waterfalls::default();
        let done = waterfalls.on_spans(&[
            span(trace, "runc kill", "kill", Some("node"), 10, 20),
            span(trace, &name::node("node-a"), "node", Some("root"), 0, 100),
            span(
                trace,
                &name::pod_delete("default", "web"),
                "root",
                None,
                0,
                100,
            ),
        ]);
        assert_eq!(done.len(), 1, "{done:#?}");
        let lines: Vec<&str> = done[0].lines().collect();
        assert!(
            lines[1]
                .trim_start()
                .starts_with(&name::pod_delete("default", "web")),
            "{}",
            done[0]
        );
        assert!(
            lines[2].trim_start().starts_with(&name::node("node-a")),
            "{}",
            done[0]
        );
        assert!(
            lines[3].trim_start().starts_with("runc kill"),
            "{}",
            done[0]
        );
    }

    #[test]
    fn waterfall_is_printed_when_the_node_span_ends_with_children_indented() {
        let trace = TraceId::for_pod("c", "u-1");
        let mut waterfalls = Waterfalls::default();
        let first = waterfalls.on_spans(&[
            span(
                trace,
                "runtime.v1.RuntimeService/RunPodSandbox",
                "sandbox",
                Some("node"),
                0,
                400,
            ),
            span(trace, "runc create", "runc", Some("sandbox"), 100, 200),
        ]);
        assert!(first.is_empty());
        let done = waterfalls.on_spans(&[span(
            trace,
            &name::node("node-a"),
            "node",
            Some("root"),
            0,
            1000,
        )]);
        assert_eq!(done.len(), 1);
        let lines: Vec<&str> = done[0].lines().collect();
        assert!(
            lines[0].contains("pod default/web (uid u-1)") && lines[0].contains("1000.0 ms"),
            "{}",
            done[0]
        );
        assert!(
            lines[1].trim_start().starts_with(&name::node("node-a")),
            "{}",
            done[0]
        );
        assert!(
            lines[2].starts_with("    runtime.v1.RuntimeService/RunPodSandbox"),
            "{}",
            done[0]
        );
        assert!(lines[3].starts_with("      runc create"), "{}", done[0]);
        // The runc bar starts a tenth into the timeline.
        let bar = lines[3].split('|').nth(1).unwrap();
        assert_eq!(bar.chars().position(|c| c == '█'), Some(4));
        assert!(waterfalls.traces.is_empty());
    }

    #[test]
    fn who_asked_and_the_schedulers_verdict_are_one_line_each() {
        let trace = TraceId::for_pod("c", "u-1");
        let text = |key: &str, value: &str| (key.to_owned(), AttributeValue::String(value.into()));
        let mut root = span(
            trace,
            &name::pod_create("default", "web"),
            "root",
            None,
            0,
            1000,
        );
        root.attributes.extend([
            text(attr::K8S_SCHEDULER_NAME, "my-scheduler"),
            text(attr::K8S_IMAGE_PULL_POLICY, "main=Never"),
        ]);
        let mut create = span(
            trace,
            name::APISERVER_POD_CREATE,
            "create",
            Some("root"),
            0,
            10,
        );
        create.kind = SpanKind::Server;
        create.attributes.extend([
            text(attr::K8S_USER, "alice"),
            text(attr::USER_AGENT_ORIGINAL, "kubectl/v1.28.4"),
            text(attr::K8S_WARNINGS, "299 - \"would violate PodSecurity\""),
        ]);
        let mut failed = span(trace, name::SCHEDULER_CYCLE, "c1", Some("root"), 11, 12);
        failed.status = SpanStatus::Error("no node fits".into());
        let mut verdict = span(trace, "etcdserverpb.KV/Txn", "w", Some("root"), 13, 14);
        verdict.attributes.push(text(
            attr::K8S_SCHEDULING_FAILURE,
            "0/3 nodes are available: 3 Insufficient cpu.",
        ));
        let mut cycle = span(trace, name::SCHEDULER_CYCLE, "c2", Some("root"), 500, 501);
        cycle.attributes.extend([
            text(attr::K8S_NODE_NAME, "node-b"),
            (
                attr::K8S_SCHEDULING_EVALUATED_NODES.into(),
                AttributeValue::Int(4),
            ),
            (
                attr::K8S_SCHEDULING_FEASIBLE_NODES.into(),
                AttributeValue::Int(1),
            ),
        ]);
        assert_eq!(
            facts(&[root, create, failed, verdict, cycle]),
            [
                "asked by alice (kubectl/v1.28.4)",
                "warnings: 299 - \"would violate PodSecurity\"",
                "scheduled by my-scheduler to node-b (1 of 4 nodes fit)",
                "waited for a node (my-scheduler): 0/3 nodes are available: 3 Insufficient cpu.",
                "imagePullPolicy main=Never",
            ]
        );
    }

    #[test]
    fn image_and_security_facts_follow_the_spans_once() {
        let trace = TraceId::for_pod("c", "u-1");
        let cri =
            |method: &str, kind: SpanKind, start_ms: u64, extra: &[(&str, AttributeValue)]| {
                let mut span = span(
                    trace,
                    &format!("runtime.v1.RuntimeService/{method}"),
                    &format!("{method}/{kind:?}"),
                    Some("node"),
                    start_ms,
                    start_ms + 50,
                );
                span.kind = kind;
                span.attributes.push((
                    attr::RPC_SERVICE.into(),
                    AttributeValue::String("runtime.v1.RuntimeService".into()),
                ));
                span.attributes.push((
                    attr::RPC_METHOD.into(),
                    AttributeValue::String(method.into()),
                ));
                span.attributes
                    .extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
                span
            };
        let image = (
            attr::CONTAINER_IMAGE_NAME,
            AttributeValue::String("busybox:1.36".into()),
        );
        let status = [
            image.clone(),
            (attr::CONTAINER_IMAGE_PRESENT, AttributeValue::Bool(true)),
        ];
        let create = [
            image.clone(),
            (attr::K8S_CONTAINER_NAME, AttributeValue::String("c".into())),
            (
                attr::CONTAINER_IMAGE_SOURCE,
                AttributeValue::String("present".into()),
            ),
            (
                attr::CONTAINER_SECURITY_PRIVILEGED,
                AttributeValue::Bool(true),
            ),
            (
                attr::CONTAINER_SECURITY_CAPABILITIES_ADDED,
                AttributeValue::String("NET_ADMIN,SYS_TIME".into()),
            ),
            (attr::CONTAINER_SECURITY_RUN_AS_USER, AttributeValue::Int(0)),
        ];
        let spans = vec![
            span(trace, &name::node("node-a"), "node", Some("root"), 0, 1000),
            cri("ImageStatus", SpanKind::Client, 100, &status),
            cri("ImageStatus", SpanKind::Server, 101, &status),
            cri("CreateContainer", SpanKind::Client, 200, &create),
            cri("CreateContainer", SpanKind::Server, 201, &create),
        ];
        let facts = facts(&spans);
        assert_eq!(
            facts,
            [
                "image busybox:1.36 present (ImageStatus)",
                "container c: privileged, caps +NET_ADMIN,+SYS_TIME, runAsUser 0",
            ]
        );
        let text = render(&spans);
        assert!(
            text.ends_with("\n  container c: privileged, caps +NET_ADMIN,+SYS_TIME, runAsUser 0"),
            "{text}"
        );
    }
}
