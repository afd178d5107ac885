//! The shape every trace a test produces must have: one root, every
//! parent present, every child inside its parent's time (so nothing lies
//! outside the root), no span id twice. Replay and live tests call
//! [`assert_well_formed`] on what podtrace exported.

use std::collections::{BTreeMap, HashMap, HashSet};
use tracer_user::correlate::contract::{attr, name};

use tracer_user::correlate::span::TraceId;

use crate::{demo_pod::DemoPod, otlp_json::ExportedSpan};

/// Spans the Kubernetes function probes make (one or more in every
/// complete Pod trace): where offsets' provenance is checked.
pub const FUNCTION_PROBE_SPANS: &[&str] = &[
    name::APISERVER_AUTHENTICATION,
    name::APISERVER_AUTHORIZATION,
    name::APISERVER_POD_VALIDATION,
    name::APISERVER_BINDING,
    name::APISERVER_STATUS_UPDATE,
    name::SCHEDULER_CYCLE,
    name::SCHEDULER_BIND,
    name::KUBELET_SYNC,
    name::KUBELET_VOLUME_WAIT,
];

/// What is wrong with the traces `spans` form, one line per fault (empty
/// when every trace is a well-formed tree).
pub fn tree_violations(spans: &[ExportedSpan]) -> Vec<String> {
    let mut traces: BTreeMap<&str, Vec<&ExportedSpan>> = BTreeMap::new();
    for span in spans {
        traces.entry(&span.trace_id).or_default().push(span);
    }
    let mut faults = Vec::new();
    for (trace, spans) in traces {
        let mut by_id: HashMap<&str, &ExportedSpan> = HashMap::new();
        for span in &spans {
            if let Some(first) = by_id.insert(&span.span_id, span) {
                faults.push(format!(
                    "trace {trace}: span id {} twice ({:?}, {:?})",
                    span.span_id, first.name, span.name
                ));
            }
        }
        let roots: Vec<&str> = spans
            .iter()
            .filter(|span| span.parent_span_id.is_none())
            .map(|span| span.name.as_str())
            .collect();
        if roots.len() != 1 {
            faults.push(format!("trace {trace}: {} roots {roots:?}", roots.len()));
        }
        for span in &spans {
            let Some(parent_id) = &span.parent_span_id else {
                continue;
            };
            let Some(parent) = by_id.get(parent_id.as_str()) else {
                faults.push(format!(
                    "trace {trace}: {:?} has no parent ({parent_id} not exported)",
                    span.name
                ));
                continue;
            };
            if span.start_unix_ns < parent.start_unix_ns || span.end_unix_ns > parent.end_unix_ns {
                faults.push(format!(
                    "trace {trace}: {:?} [{}, {}] lies outside its parent {:?} [{}, {}]",
                    span.name,
                    span.start_unix_ns,
                    span.end_unix_ns,
                    parent.name,
                    parent.start_unix_ns,
                    parent.end_unix_ns,
                ));
            }
        }
    }
    faults
}

/// Panics, naming every fault, unless every trace in `spans` is a
/// well-formed tree.
pub fn assert_well_formed(spans: &[ExportedSpan]) {
    let faults = tree_violations(spans);
    assert!(
        faults.is_empty(),
        "{} fault(s) in the exported traces:\n{}",
        faults.len(),
        faults.join("\n")
    );
}

/// Panics unless the first process of container `container` in `spans`
/// started within or after `call` (the CRI call that started it) and hangs
/// from `call` or, when it lies outside it (it execs once runc start has
/// told runc init to, which may be after the call returned), from the
/// nearest ancestor that holds it: the client's side of the call, the
/// kubelet's pod sync, the node span.
pub fn assert_first_exec_under(spans: &[&ExportedSpan], call: &ExportedSpan, container: &str) {
    let first = spans
        .iter()
        .find(|s| {
            s.name.starts_with(&name::container_start(""))
                && s.string(attr::CONTAINER_ID) == Some(container)
        })
        .unwrap_or_else(|| panic!("no first exec of {container}:\n{}", outline(spans)));
    assert!(call.start_unix_ns <= first.start_unix_ns, "{first:#?}");
    let holder = nearest_holder(spans, call, first)
        .unwrap_or_else(|| panic!("nothing holds {first:#?}:\n{}", outline(spans)));
    assert_eq!(
        first.parent_span_id.as_deref(),
        Some(holder.span_id.as_str()),
        "{}:\n{}",
        first.name,
        outline(spans)
    );
}

/// `from` or its nearest ancestor in `spans` whose time holds `span`'s:
/// where podtrace hangs a span that lies outside its parent.
fn nearest_holder<'a>(
    spans: &[&'a ExportedSpan],
    from: &'a ExportedSpan,
    span: &ExportedSpan,
) -> Option<&'a ExportedSpan> {
    let mut holder = from;
    // Bounded: a cycle of ids cannot loop.
    for _ in 0..=spans.len() {
        if holder.start_unix_ns <= span.start_unix_ns && span.end_unix_ns <= holder.end_unix_ns {
            return Some(holder);
        }
        let parent = holder.parent_span_id.as_deref()?;
        holder = spans.iter().find(|s| s.span_id == parent)?;
    }
    None
}

/// The trace(s) of `spans` as an indented tree, one line a span (name,
/// kind, start offset and duration from the first start, id, the Pod
/// change it reports): what a failed assertion prints, since a CI log keeps
/// only part of a long output and a `{:#?}` dump takes ~30 lines a span.
pub fn outline(spans: &[&ExportedSpan]) -> String {
    let origin = spans.iter().map(|s| s.start_unix_ns).min().unwrap_or(0);
    let ids: HashSet<(&str, &str)> = spans
        .iter()
        .map(|s| (s.trace_id.as_str(), s.span_id.as_str()))
        .collect();
    let mut children: HashMap<(&str, &str), Vec<&ExportedSpan>> = HashMap::new();
    let mut tops = Vec::new();
    for span in spans {
        match &span.parent_span_id {
            Some(parent) if ids.contains(&(span.trace_id.as_str(), parent.as_str())) => children
                .entry((&span.trace_id, parent))
                .or_default()
                .push(span),
            _ => tops.push(*span),
        }
    }
    let mut out = String::new();
    let mut stack: Vec<(usize, &ExportedSpan)> = Vec::new();
    tops.sort_by_key(|s| std::cmp::Reverse(s.start_unix_ns));
    stack.extend(tops.into_iter().map(|s| (0, s)));
    while let Some((depth, span)) = stack.pop() {
        let ms = |ns: u64| ns as f64 / 1e6;
        let orphan = match &span.parent_span_id {
            Some(parent) if depth == 0 => format!(" ORPHAN of {parent}"),
            _ => String::new(),
        };
        let change = span
            .string(attr::K8S_POD_CHANGE)
            .map(|change| format!(" ({change})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:indent$}{} k{} +{:.1}ms {:.1}ms {} t{}{change}{orphan}\n",
            "",
            span.name,
            span.kind,
            ms(span.start_unix_ns.saturating_sub(origin)),
            ms(span.end_unix_ns.saturating_sub(span.start_unix_ns)),
            span.span_id,
            &span.trace_id[..span.trace_id.len().min(8)],
            indent = depth * 2,
        ));
        if let Some(below) = children.get_mut(&(span.trace_id.as_str(), span.span_id.as_str())) {
            below.sort_by_key(|s| std::cmp::Reverse(s.start_unix_ns));
            stack.extend(below.iter().map(|s| (depth + 1, *s)));
        }
    }
    out
}

/// The spans of one trace, found by name, with checks on shape (live and
/// replay tests share it).
#[derive(Debug)]
pub struct Trace<'a> {
    /// The trace's spans, in export order.
    pub spans: Vec<&'a ExportedSpan>,
}

impl<'a> Trace<'a> {
    /// The spans of `all` in trace `trace_id` (hex).
    pub fn new(all: &'a [ExportedSpan], trace_id: &str) -> Self {
        Self {
            spans: all.iter().filter(|s| s.trace_id == trace_id).collect(),
        }
    }

    /// The creation trace of `pod` made by agents of cluster id `cluster`.
    pub fn of_pod_in(all: &'a [ExportedSpan], cluster: &str, pod: &DemoPod) -> Self {
        Self::new(all, &TraceId::for_pod(cluster, &pod.uid).to_hex())
    }

    /// The spans named `name`, of kind `kind` (`None`: any).
    pub fn named(&self, name: &str, kind: Option<u64>) -> Vec<&'a ExportedSpan> {
        self.spans
            .iter()
            .copied()
            .filter(|s| s.name == name && kind.is_none_or(|k| s.kind == k))
            .collect()
    }

    /// The one span named `name` of kind `kind`; fails with the trace's
    /// outline if there is none or several.
    pub fn one(&self, name: &str, kind: Option<u64>) -> &'a ExportedSpan {
        let found = self.named(name, kind);
        assert_eq!(
            found.len(),
            1,
            "{name} ({kind:?}):\n{}",
            outline(&self.spans)
        );
        found[0]
    }

    /// The span named `name` whose string attribute `key` is `value`.
    pub fn with(&self, name: &str, key: &str, value: &str) -> &'a ExportedSpan {
        self.spans
            .iter()
            .copied()
            .find(|s| s.name == name && s.string(key) == Some(value))
            .unwrap_or_else(|| panic!("no {name} with {key}={value}: {:#?}", self.spans))
    }

    /// The span of id `id`.
    pub fn by_id(&self, id: &str) -> Option<&'a ExportedSpan> {
        self.spans.iter().copied().find(|s| s.span_id == id)
    }

    /// `span`'s parent, which must be in the trace.
    pub fn parent_of(&self, span: &ExportedSpan) -> &'a ExportedSpan {
        let parent = span
            .parent_span_id
            .as_deref()
            .unwrap_or_else(|| panic!("{} has no parent", span.name));
        self.by_id(parent)
            .unwrap_or_else(|| panic!("orphan {}: parent {parent} not exported", span.name))
    }

    /// `parent`'s children.
    pub fn children(&self, parent: &ExportedSpan) -> Vec<&'a ExportedSpan> {
        self.spans
            .iter()
            .copied()
            .filter(|s| s.parent_span_id.as_deref() == Some(parent.span_id.as_str()))
            .collect()
    }

    /// The trace's one root, which must be `pod`'s creation.
    pub fn root(&self, pod: &DemoPod) -> &'a ExportedSpan {
        let roots: Vec<_> = self
            .spans
            .iter()
            .copied()
            .filter(|s| s.parent_span_id.is_none())
            .collect();
        assert_eq!(roots.len(), 1, "roots of {}: {:#?}", pod.name, self.spans);
        assert_eq!(roots[0].name, name::pod_create(&pod.namespace, &pod.name));
        roots[0]
    }

    /// Whether `ancestor` is `span`'s parent, or its parent's, and so on
    /// (spans of the components that make a call may come between).
    pub fn descends_from(&self, span: &ExportedSpan, ancestor: &ExportedSpan) -> bool {
        let mut parent = span.parent_span_id.as_deref();
        for _ in 0..self.spans.len() {
            let Some(id) = parent else {
                return false;
            };
            if id == ancestor.span_id {
                return true;
            }
            parent = self.by_id(id).and_then(|s| s.parent_span_id.as_deref());
        }
        false
    }

    /// Every parent is in the trace, and no span id repeats.
    pub fn assert_no_orphans(&self) {
        let ids: HashSet<&str> = self.spans.iter().map(|s| s.span_id.as_str()).collect();
        assert_eq!(ids.len(), self.spans.len(), "span ids repeat");
        for span in &self.spans {
            if let Some(parent) = &span.parent_span_id {
                assert!(ids.contains(parent.as_str()), "orphan {span:#?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn span(trace: &str, id: &str, parent: Option<&str>, start: u64, end: u64) -> ExportedSpan {
        ExportedSpan {
            trace_id: trace.to_owned(),
            span_id: id.to_owned(),
            parent_span_id: parent.map(str::to_owned),
            name: id.to_owned(),
            kind: 1,
            start_unix_ns: start,
            end_unix_ns: end,
            attributes: HashMap::new(),
            status_code: 0,
            status_message: String::new(),
            resource_node: None,
            links: Vec::new(),
        }
    }

    #[test]
    fn a_nested_tree_passes() {
        let spans = [
            span("t", "root", None, 0, 100),
            span("t", "a", Some("root"), 10, 50),
            span("t", "b", Some("a"), 10, 50),
            span("u", "other", None, 5, 6),
        ];
        assert_eq!(tree_violations(&spans), Vec::<String>::new());
    }

    #[test]
    fn each_fault_is_named() {
        let spans = [
            span("t", "root", None, 0, 100),
            span("t", "late", Some("root"), 90, 120),
            span("t", "orphan", Some("gone"), 10, 20),
            span("t", "second root", None, 0, 1),
            span("t", "a", Some("root"), 1, 2),
            span("t", "a", Some("root"), 1, 2),
        ];
        let faults = tree_violations(&spans);
        assert_eq!(faults.len(), 4, "{faults:#?}");
        assert!(
            faults
                .iter()
                .any(|f| f.contains("\"late\"") && f.contains("outside"))
        );
        assert!(
            faults
                .iter()
                .any(|f| f.contains("\"orphan\" has no parent"))
        );
        assert!(faults.iter().any(|f| f.contains("2 roots")));
        assert!(faults.iter().any(|f| f.contains("span id a twice")));
    }
}
