//! The shape every trace a test produces must have: one root, every
//! parent present, every child inside its parent's time (so nothing lies
//! outside the root), no span id twice. Replay and live tests call
//! [`assert_well_formed`] on what podtrace exported.

use std::collections::{BTreeMap, HashMap};

use crate::otlp_json::ExportedSpan;

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
            if by_id.insert(&span.span_id, span).is_some() {
                faults.push(format!("trace {trace}: span id {} twice", span.span_id));
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
