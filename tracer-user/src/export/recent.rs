//! The spans of recent traces, kept by a running agent so that
//! `podtrace explain` can ask it (`GET /traces` on the metrics address).
//!
//! In: finished spans. Out: the spans of the traces that hold a given Pod's.
//! Bounded in traces and in spans per trace; the oldest trace goes first,
//! and what does not fit is counted.

use crate::correlate::contract::attr;

use std::collections::{HashMap, VecDeque};

use crate::correlate::{Span, span::TraceId};

/// Traces kept.
const MAX_TRACES: usize = 1024;
/// Spans kept per trace.
const MAX_SPANS_PER_TRACE: usize = 512;

/// Recent traces, oldest first.
#[derive(Debug, Default)]
pub struct RecentTraces {
    traces: HashMap<TraceId, Vec<Span>>,
    order: VecDeque<TraceId>,
    /// Spans not kept (their trace was full, or was evicted).
    pub dropped_spans: u64,
}

impl RecentTraces {
    /// Keeps finished spans.
    pub fn on_spans(&mut self, spans: &[Span]) {
        for span in spans {
            if !self.traces.contains_key(&span.trace_id) {
                if self.order.len() >= MAX_TRACES {
                    if let Some(oldest) = self.order.pop_front() {
                        self.dropped_spans += self
                            .traces
                            .remove(&oldest)
                            .map_or(0, |spans| spans.len() as u64);
                    }
                }
                self.order.push_back(span.trace_id);
            }
            let trace = self.traces.entry(span.trace_id).or_default();
            if trace.len() >= MAX_SPANS_PER_TRACE {
                self.dropped_spans += 1;
            } else {
                trace.push(span.clone());
            }
        }
    }

    /// Every span of the traces that hold a span of Pod `namespace/name`.
    pub fn of_pod(&self, namespace: &str, name: &str) -> Vec<Span> {
        self.order
            .iter()
            .filter_map(|trace| self.traces.get(trace))
            .filter(|spans| {
                spans.iter().any(|span| {
                    span.string_attribute(attr::K8S_NAMESPACE_NAME) == Some(namespace)
                        && span.string_attribute(attr::K8S_POD_NAME) == Some(name)
                })
            })
            .flatten()
            .cloned()
            .collect()
    }
}
