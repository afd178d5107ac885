//! kube-apiserver's request spans: the calls probed in a request (its
//! authentication, authorization, admission and storage write) gathered
//! under the request's REST exchange, nested under the client's side when
//! this agent sees it, and the client spans of followed components.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use tracer_common::gofunc::GoFunction;

use super::{
    CLIENT_WAIT_NS, ClientSide, ComponentSpans, MATCH_SLACK_NS, MAX_EXCHANGES, MAX_REQUESTS,
    REQUEST_WAIT_NS, Request, RequestCall, UidLookup, WaitingServer, derived_offsets, go_call,
};
use crate::{
    correlate::{
        pod::{Pod, int_attribute, string_attribute},
        span::{AttributeValue, Span, SpanId, SpanKind, SpanStatus, TraceId},
    },
    decode::{RestMessage, functions::Decision, grpc_calls::Side},
};

impl ComponentSpans {
    /// A REST request decoded from the wire. kube-apiserver's side is the
    /// request span of the calls probed in it, child of the client's side
    /// when this agent sees the client (the same HTTP/2 stream on the same
    /// path); the client's side is a client span under the component call
    /// that made it.
    pub fn on_rest(&mut self, rest: &RestMessage, uids: UidLookup<'_>) -> Vec<Span> {
        let (Some(start), Some(end)) = (rest.start_ts_ns, rest.end_ts_ns) else {
            self.dropped += 1;
            return Vec::new();
        };
        self.now_ns = self.now_ns.max(end);
        if self.about_a_pod_before_start(rest) {
            return Vec::new();
        }
        if rest.side == Side::Client {
            return self.client_side(rest, uids);
        }
        // Requests on one path at once (a burst of creates) are told apart
        // by the Pod their storage call wrote, which must be the one the
        // exchange names (its path, or for a create the Pod it returned),
        // then by how close their starts are.
        let named = (
            rest.namespace.as_deref(),
            rest.name
                .as_deref()
                .or_else(|| rest.pod.as_ref().and_then(|pod| pod.name.as_deref())),
        );
        let matched = self
            .requests
            .iter()
            .filter(|(_, request)| {
                request.tgid == rest.conn.tgid
                    && request.path.matches(&rest.path)
                    && request.start_ns + MATCH_SLACK_NS >= start
                    && request.start_ns <= end
            })
            .filter_map(|(key, request)| {
                let stored = match (&request.stored, named) {
                    (Some((ns, name)), (Some(rest_ns), Some(rest_name))) => {
                        if ns != rest_ns || name != rest_name {
                            return None;
                        }
                        true
                    }
                    _ => false,
                };
                Some((key, !stored, request.start_ns.abs_diff(start)))
            })
            .min_by_key(|(_, unconfirmed, distance)| (*unconfirmed, *distance))
            .map(|(key, _, _)| *key);
        let request = matched.and_then(|key| self.requests.remove(&key));
        if let Some(client) = self.client_of(rest).cloned() {
            return self.request_spans(request, Some(rest), Some(&client), uids);
        }
        if self.waiting_servers.len() >= MAX_EXCHANGES {
            self.dropped += 1;
            return self.request_spans(request, Some(rest), None, uids);
        }
        self.waiting_servers.push(WaitingServer {
            request,
            rest: rest.clone(),
            deadline_ns: end + CLIENT_WAIT_NS,
        });
        Vec::new()
    }

    /// The client's side already seen of a server's side: same stream and
    /// path, overlapping in time.
    fn client_of(&self, server: &RestMessage) -> Option<&ClientSide> {
        self.clients
            .iter()
            .rev()
            .find(|client| same_exchange(&client.rest, server))
    }

    /// The client span of a request a followed component made, and the
    /// server's side that waited for it.
    fn client_side(&mut self, rest: &RestMessage, uids: UidLookup<'_>) -> Vec<Span> {
        let (Some(start_ns), Some(end_ns)) = (rest.start_ts_ns, rest.end_ts_ns) else {
            return Vec::new();
        };
        let namespace = rest.namespace.clone().unwrap_or_default();
        let Some(name) = rest
            .name
            .clone()
            .or_else(|| rest.pod.as_ref().and_then(|pod| pod.name.clone()))
        else {
            return Vec::new();
        };
        let uid = rest
            .pod
            .as_ref()
            .and_then(|pod| pod.uid.clone())
            .or_else(|| uids(&namespace, &name))
            .or_else(|| self.uid_named(&namespace, &name));
        let Some(uid) = uid else {
            // A request about a Pod this agent never learnt the UID of
            // (created before podtrace): not part of a creation it traces.
            return Vec::new();
        };
        let pod = Pod::new(&self.cluster_id, &namespace, &name, &uid);
        let parent = self.caller(rest.subresource.as_deref(), &pod, start_ns, end_ns);
        let span_id = SpanId::of(
            pod.trace,
            &SpanKey::RestClient {
                tgid: rest.conn.tgid,
                conn_id: rest.conn.conn_id,
                stream_id: rest.stream_id,
            },
        );
        let mut attributes = pod.attributes();
        attributes.extend(http_attributes(rest));
        let status = match rest.status {
            Some(code) if code >= 400 => SpanStatus::Error(format!("HTTP {code}")),
            _ => SpanStatus::Unset,
        };
        let mut spans = vec![Span {
            trace_id: pod.trace,
            span_id,
            parent_span_id: Some(parent),
            name: name::client_request(&rest.method, &rest.route),
            kind: SpanKind::Client,
            start_unix_ns: self.clock.unix_ns(start_ns),
            end_unix_ns: self.clock.unix_ns(end_ns),
            attributes,
            status,
            links: Vec::new(),
        }];
        let client = ClientSide {
            rest: rest.clone(),
            trace: pod.trace,
            span_id,
        };
        if self.clients.len() >= MAX_EXCHANGES {
            self.clients.pop_front();
        }
        self.clients.push_back(client.clone());
        let (mine, others): (Vec<WaitingServer>, Vec<WaitingServer>) =
            std::mem::take(&mut self.waiting_servers)
                .into_iter()
                .partition(|waiting| same_exchange(&waiting.rest, rest));
        self.waiting_servers = others;
        for waiting in mine {
            spans.extend(self.request_spans(
                waiting.request,
                Some(&waiting.rest),
                Some(&client),
                uids,
            ));
        }
        spans
    }

    /// The parent of a request about `pod`'s `subresource` during
    /// `[start, end]`: the component call on this agent that made it (the
    /// scheduler's bind, the kubelet's status update), else the Pod's root.
    fn caller(&self, subresource: Option<&str>, pod: &Pod, start_ns: u64, end_ns: u64) -> SpanId {
        let function = match subresource {
            Some("binding") => GoFunction::SchedulerBind,
            Some("status") => GoFunction::KubeletStatusSync,
            _ => return SpanId::of(pod.trace, &SpanKey::Root),
        };
        self.parent_containing(function, pod, start_ns, end_ns)
            .map_or_else(
                || SpanId::of(pod.trace, &SpanKey::Root),
                |key| SpanId::for_key(pod.trace, key.as_bytes()),
            )
    }

    /// The UID of a Pod named by the components' own probes.
    fn uid_named(&self, namespace: &str, name: &str) -> Option<String> {
        self.names
            .iter()
            .find(|(_, (ns, n))| ns == namespace && n == name)
            .map(|(uid, _)| uid.clone())
    }

    /// Time passed: requests whose exchange never came go out on their own.
    pub fn tick(&mut self, now_ns: u64, uids: UidLookup<'_>) -> Vec<Span> {
        self.now_ns = self.now_ns.max(now_ns);
        self.flush(false, uids)
    }

    /// The agent stops: every request still waiting goes out.
    pub fn finish(&mut self, uids: UidLookup<'_>) -> Vec<Span> {
        self.flush(true, uids)
    }

    fn flush(&mut self, all: bool, uids: UidLookup<'_>) -> Vec<Span> {
        let now = self.now_ns;
        let mut spans = Vec::new();
        let (due, waiting): (Vec<WaitingServer>, Vec<WaitingServer>) =
            std::mem::take(&mut self.waiting_servers)
                .into_iter()
                .partition(|waiting| all || waiting.deadline_ns <= now);
        self.waiting_servers = waiting;
        for server in due {
            spans.extend(self.request_spans(server.request, Some(&server.rest), None, uids));
        }
        let expired: Vec<(u32, u64)> = self
            .requests
            .iter()
            .filter(|(_, request)| all || request.last_ns + REQUEST_WAIT_NS <= now)
            .map(|(key, _)| *key)
            .collect();
        for key in expired {
            // Without its exchange, a request that stored nothing was a
            // read (a GET of the Pod): not part of a trace.
            let Some(request) = self
                .requests
                .remove(&key)
                .filter(|r| r.stored.is_some() || r.registry)
            else {
                continue;
            };
            // The server's side of the exchange was lost; the client's
            // (the same path, around the same time) says what it was.
            let client = self
                .clients
                .iter()
                .rev()
                .find(|client| {
                    request.path.matches(&client.rest.path)
                        && client
                            .rest
                            .start_ts_ns
                            .is_some_and(|s| s <= request.start_ns)
                        && client.rest.end_ts_ns.is_some_and(|e| e >= request.last_ns)
                })
                .cloned();
            let rest = client.as_ref().map(|client| client.rest.clone());
            spans.extend(self.request_spans(Some(request), rest.as_ref(), client.as_ref(), uids));
        }
        spans
    }

    /// The create requests exported since the last call: (UID, start).
    pub fn take_create_requests(&mut self) -> Vec<(String, u64)> {
        std::mem::take(&mut self.create_requests)
    }

    /// The request span and its calls' spans.
    fn request_spans(
        &mut self,
        request: Option<Request>,
        rest: Option<&RestMessage>,
        client: Option<&ClientSide>,
        uids: UidLookup<'_>,
    ) -> Vec<Span> {
        // Which Pod: the response's, the path's, the storage write's.
        let from_path = request.as_ref().and_then(|r| r.path.pod());
        let namespace = rest
            .and_then(|r| r.namespace.clone())
            .or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| r.stored.clone())
                    .map(|(ns, _)| ns)
            })
            .or_else(|| from_path.clone().map(|(ns, _)| ns))
            .unwrap_or_default();
        let name = rest
            .and_then(|r| r.name.clone())
            .or_else(|| rest.and_then(|r| r.pod.as_ref()?.name.clone()))
            .or_else(|| rest.and_then(|r| r.error.as_ref()?.name.clone()))
            .or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| r.stored.clone())
                    .map(|(_, n)| n)
            })
            .or_else(|| from_path.and_then(|(_, name)| name))
            .unwrap_or_default();
        let uid = rest
            .and_then(|r| r.pod.as_ref()?.uid.clone())
            .or_else(|| uids(&namespace, &name));
        let status_code = rest.and_then(|r| r.status);
        let failed = status_code.is_some_and(|code| code >= 400);
        let dry_run = rest.is_some_and(|r| r.dry_run);
        let create = rest.map_or_else(
            || {
                request
                    .as_ref()
                    .is_some_and(|r| r.path.pod().is_some_and(|(_, n)| n.is_none()))
            },
            |r| r.verb == "create" && r.subresource.is_none(),
        );
        // A create that stored nothing (rejected, or a dry run) has no
        // pod.create root from the etcd writes: its request is the root.
        let own_root = create && (failed || dry_run);
        let (trace, pod_attributes) = match (&uid, own_root) {
            (Some(uid), false) => {
                let pod = Pod::new(&self.cluster_id, &namespace, &name, uid);
                (pod.trace, pod.attributes())
            }
            (None, false) => {
                // No Pod to hang it from (its REST exchange was lost, so no
                // name or UID came back): counted, not exported as a span
                // whose parent no trace holds.
                self.unattributed += 1;
                return Vec::new();
            }
            (uid, true) => {
                // Nothing was stored: the trace is this request's.
                let start = request
                    .as_ref()
                    .map(|r| r.start_ns)
                    .or_else(|| rest.and_then(|r| r.start_ts_ns))
                    .unwrap_or_default();
                let what = format!(
                    "request/{}/{namespace}/{name}/{start}",
                    uid.as_deref().unwrap_or("")
                );
                let mut attributes = vec![
                    string_attribute(attr::K8S_POD_NAME, &name),
                    string_attribute(attr::K8S_NAMESPACE_NAME, &namespace),
                ];
                if let Some(uid) = uid {
                    attributes.push(string_attribute(attr::K8S_POD_UID, uid));
                }
                (TraceId::for_pod(&self.cluster_id, &what), attributes)
            }
        };
        let key = match (&request, rest) {
            (Some(request), _) => request.key(),
            (None, Some(rest)) if rest.side == Side::Client => return Vec::new(),
            (None, Some(rest)) => SpanKey::ApiserverStream {
                conn_id: rest.conn.conn_id,
                stream_id: rest.stream_id,
            }
            .encode(),
            (None, None) => return Vec::new(),
        };
        let span_id = SpanId::for_key(trace, key.as_bytes());
        let (start_ns, end_ns) = match (rest.and_then(|r| r.start_ts_ns.zip(r.end_ts_ns)), &request)
        {
            (Some((start, end)), Some(request)) => {
                (start.min(request.start_ns), end.max(request.last_ns))
            }
            (Some(times), None) => times,
            (None, Some(request)) => (request.start_ns, request.last_ns),
            (None, None) => return Vec::new(),
        };
        if let (true, false, Some(uid)) = (create, own_root, &uid) {
            if self.create_requests.len() < MAX_REQUESTS {
                self.create_requests.push((uid.clone(), start_ns));
            }
        }
        let parent = if own_root {
            None
        } else if let Some(client) = client.filter(|client| client.trace == trace) {
            Some(client.span_id)
        } else {
            let subresource = rest.and_then(|r| r.subresource.as_deref()).or_else(|| {
                request
                    .as_ref()
                    .and_then(|r| r.path.as_str().rsplit('/').next())
                    .filter(|s| *s == "binding" || *s == "status")
            });
            Some(match &uid {
                Some(uid) => {
                    let pod = Pod::new(&self.cluster_id, &namespace, &name, uid);
                    self.caller(subresource, &pod, start_ns, end_ns)
                }
                None => SpanId::of(trace, &SpanKey::Root),
            })
        };
        let method = rest
            .map(|r| r.method.clone())
            .unwrap_or_else(|| "?".to_owned());
        let route = rest.map_or_else(
            || {
                request
                    .as_ref()
                    .map(|r| r.path.as_str().to_owned())
                    .unwrap_or_default()
            },
            |r| r.route.clone(),
        );
        let mut attributes = pod_attributes;
        attributes.push(string_attribute(attr::K8S_COMPONENT, "kube-apiserver"));
        match rest {
            Some(rest) => attributes.extend(http_attributes(rest)),
            None => {
                attributes.push(string_attribute(attr::HTTP_REQUEST_METHOD, &method));
                attributes.push(string_attribute(attr::HTTP_ROUTE, &route));
            }
        }
        if let Some(addr) = request.as_ref().and_then(|r| r.remote_addr.as_deref()) {
            attributes.push(string_attribute(attr::CLIENT_ADDRESS, addr));
        }
        if dry_run {
            attributes.push((attr::K8S_DRY_RUN.to_owned(), AttributeValue::Bool(true)));
        }
        let registry = request.as_ref().filter(|r| r.registry).map(|r| {
            (
                r.before_registry_key(),
                r.after_validation_key(),
                r.calls
                    .iter()
                    .filter(|call| is_registry(call.entry.function))
                    .min_by_key(|call| call.entry.ids.ts_ns)
                    .cloned(),
            )
        });
        let calls = request.map(|r| r.calls).unwrap_or_default();
        if let Some(user) = calls
            .iter()
            .find(|call| call.entry.function == GoFunction::ApiserverAuthenticate)
            .and_then(|call| call.ret.text.as_deref())
        {
            attributes.push(string_attribute(attr::K8S_USER, user));
        }
        let error = rest.and_then(|r| r.error.as_ref());
        let status = if failed {
            let mut text = format!("HTTP {}", status_code.unwrap_or_default());
            if let Some(reason) = error.and_then(|e| e.reason.as_deref()) {
                text.push_str(&format!(" {reason}"));
            }
            if let Some(message) = error.and_then(|e| e.message.as_deref()) {
                text.push_str(&format!(": {message}"));
            }
            SpanStatus::Error(text)
        } else {
            SpanStatus::Unset
        };
        let span_name = if own_root {
            name::pod_create_not_stored(
                &namespace,
                &name,
                if dry_run { "dry run" } else { "rejected" },
            )
        } else {
            name::apiserver_request(&method, &route)
        };
        if own_root {
            attributes.push((attr::TRACE_COMPLETE.to_owned(), AttributeValue::Bool(false)));
            attributes.push(string_attribute(
                attr::TRACE_STUCK_PHASE,
                if dry_run {
                    "dry run: nothing stored"
                } else {
                    "create request: rejected"
                },
            ));
        }
        let mut spans = vec![Span {
            trace_id: trace,
            span_id,
            parent_span_id: parent,
            name: span_name,
            kind: SpanKind::Server,
            start_unix_ns: self.clock.unix_ns(start_ns),
            end_unix_ns: self.clock.unix_ns(end_ns),
            attributes: attributes.clone(),
            status,
            links: Vec::new(),
        }];
        let base: Vec<(String, AttributeValue)> = attributes
            .iter()
            .filter(|(key, _)| key.starts_with("k8s."))
            .cloned()
            .collect();
        let mut call_spans: Vec<Span> = calls
            .iter()
            .map(|call| self.request_call_span(trace, span_id, &base, call, failed))
            .collect();
        if let Some((before_key, after_key, Some(first))) = registry {
            let wire_start = rest.and_then(|r| r.start_ts_ns);
            call_spans.extend(self.registry_phase_spans(
                trace,
                span_id,
                &base,
                RegistryPhases {
                    first: &first,
                    wire_start,
                    end_ns,
                    before_key: &before_key,
                    after_key: &after_key,
                    failed,
                },
            ));
            self.close_parent(&after_key, end_ns);
        }
        // Admission of an update runs inside the storage write's
        // read-modify-write: nest a call under the shortest one containing it.
        for (index, mut span) in call_spans.iter().cloned().enumerate() {
            let container = call_spans
                .iter()
                .enumerate()
                .filter(|(other, candidate)| {
                    *other != index
                        && candidate.start_unix_ns <= span.start_unix_ns
                        && candidate.end_unix_ns >= span.end_unix_ns
                        && (candidate.start_unix_ns, candidate.end_unix_ns)
                            != (span.start_unix_ns, span.end_unix_ns)
                })
                .min_by_key(|(_, candidate)| candidate.end_unix_ns - candidate.start_unix_ns);
            if let Some((_, container)) = container {
                span.parent_span_id = Some(container.span_id);
            }
            spans.push(span);
        }
        spans
    }

    /// A registry request's phases that no probe marks (kube-apiserver's
    /// filters and admission chain run for every request, so
    /// `ApiserverProbes::Pods` leaves them unprobed): before the registry,
    /// from the wire's start to its first registry call; after a create's
    /// Pod validation, to the request's end (admission (validating) and the
    /// storage write). Each says where its bounds come from.
    fn registry_phase_spans(
        &self,
        trace: TraceId,
        parent: SpanId,
        base: &[(String, AttributeValue)],
        phases: RegistryPhases<'_>,
    ) -> Vec<Span> {
        let RegistryPhases {
            first,
            wire_start,
            end_ns,
            before_key,
            after_key,
            failed,
        } = phases;
        let create = first.entry.function == GoFunction::ApiserverPodValidate;
        let span = |name: &str, key: &str, start_ns: u64, end_ns: u64, bounds: &str| {
            let mut attributes = base.to_vec();
            attributes.push(string_attribute(PHASE_BOUNDS, bounds));
            Span {
                trace_id: trace,
                span_id: SpanId::for_key(trace, key.as_bytes()),
                parent_span_id: Some(parent),
                name: name.to_owned(),
                kind: SpanKind::Internal,
                start_unix_ns: self.clock.unix_ns(start_ns),
                end_unix_ns: self.clock.unix_ns(end_ns),
                attributes,
                status: SpanStatus::Unset,
                links: Vec::new(),
            }
        };
        let mut spans = Vec::new();
        if let Some(start) = wire_start.filter(|start| *start < first.entry.ids.ts_ns) {
            let name = if create {
                name::APISERVER_BEFORE_VALIDATION_WITH_ADMISSION
            } else {
                name::APISERVER_BEFORE_VALIDATION
            };
            spans.push(span(
                name,
                before_key,
                start,
                first.entry.ids.ts_ns,
                "the request's arrival (wire) to the Pod registry (probe)",
            ));
        }
        if create && first.ret.ids.ts_ns < end_ns {
            let mut after = span(
                name::APISERVER_AFTER_VALIDATION,
                after_key,
                first.ret.ids.ts_ns,
                end_ns,
                "the Pod's validation (probe) to the response (wire)",
            );
            if failed && first.ret.failed != Some(true) {
                after.status = SpanStatus::Error("admission or the storage write failed".into());
            }
            spans.push(after);
        }
        spans
    }

    fn request_call_span(
        &self,
        trace: TraceId,
        parent: SpanId,
        base: &[(String, AttributeValue)],
        call: &RequestCall,
        request_failed: bool,
    ) -> Span {
        let mut attributes = base.to_vec();
        attributes.extend(derived_offsets(&call.entry));
        let name = match call.entry.function {
            GoFunction::ApiserverAuthenticate => {
                if let Some(user) = &call.ret.text {
                    attributes.push(string_attribute(attr::K8S_USER, user));
                }
                name::APISERVER_AUTHENTICATION.to_owned()
            }
            GoFunction::ApiserverAuthorize => {
                if let Some(decision) = call.ret.decision {
                    attributes.push(string_attribute(
                        attr::K8S_AUTHZ_DECISION,
                        decision.as_str(),
                    ));
                }
                if let Some(reason) = &call.ret.text {
                    attributes.push(string_attribute(attr::K8S_AUTHZ_REASON, reason));
                }
                name::APISERVER_AUTHORIZATION.to_owned()
            }
            GoFunction::ApiserverAdmit => name::APISERVER_ADMISSION_MUTATING.to_owned(),
            GoFunction::ApiserverValidate => name::APISERVER_ADMISSION_VALIDATING.to_owned(),
            GoFunction::ApiserverPodValidate => name::APISERVER_POD_VALIDATION.to_owned(),
            GoFunction::ApiserverPodBinding => name::APISERVER_BINDING.to_owned(),
            GoFunction::ApiserverPodStatusUpdate => name::APISERVER_STATUS_UPDATE.to_owned(),
            GoFunction::ApiserverMutatingWebhook | GoFunction::ApiserverValidatingWebhook => {
                let hook = call.entry.text.clone().unwrap_or_default();
                attributes.push(string_attribute(attr::K8S_ADMISSION_WEBHOOK, &hook));
                name::apiserver_webhook(&hook)
            }
            _ => name::apiserver_storage(
                if call.entry.function == GoFunction::ApiserverStorageCreate {
                    "create"
                } else {
                    "update"
                },
                call.entry.text.as_deref().unwrap_or_default(),
            ),
        };
        let denied = call.ret.decision == Some(Decision::Deny);
        let status = if call.ret.failed == Some(true) || denied {
            let what = match call.entry.function {
                GoFunction::ApiserverAdmit
                | GoFunction::ApiserverValidate
                | GoFunction::ApiserverMutatingWebhook
                | GoFunction::ApiserverValidatingWebhook => "admission rejected the request",
                GoFunction::ApiserverAuthenticate => "not authenticated",
                GoFunction::ApiserverAuthorize => "not authorized",
                GoFunction::ApiserverPodValidate => "the Pod is not valid",
                GoFunction::ApiserverPodBinding => "the binding failed",
                GoFunction::ApiserverPodStatusUpdate => "the status update failed",
                _ => "the storage write failed",
            };
            if request_failed || call.entry.function != GoFunction::ApiserverAuthenticate {
                SpanStatus::Error(what.to_owned())
            } else {
                SpanStatus::Unset
            }
        } else {
            SpanStatus::Unset
        };
        Span {
            trace_id: trace,
            span_id: SpanId::of(trace, &go_call(&call.entry)),
            parent_span_id: Some(parent),
            name,
            kind: SpanKind::Internal,
            start_unix_ns: self.clock.unix_ns(call.entry.ids.ts_ns),
            end_unix_ns: self.clock.unix_ns(call.ret.ids.ts_ns),
            attributes,
            status,
            links: Vec::new(),
        }
    }
}

/// The attribute of a span whose bounds are not one probed call's: where
/// its start and end come from.
const PHASE_BOUNDS: &str = attr::K8S_APISERVER_PHASE_BOUNDS;

/// What [`ComponentSpans::registry_phase_spans`] derives its spans from.
struct RegistryPhases<'a> {
    /// The request's first registry call.
    first: &'a RequestCall,
    /// When the request arrived, on the wire.
    wire_start: Option<u64>,
    /// The request span's end.
    end_ns: u64,
    before_key: &'a str,
    after_key: &'a str,
    /// The request failed (HTTP status ≥ 400).
    failed: bool,
}

/// The Pod registry's functions (`ApiserverProbes::Pods`).
fn is_registry(function: GoFunction) -> bool {
    matches!(
        function,
        GoFunction::ApiserverPodValidate
            | GoFunction::ApiserverPodBinding
            | GoFunction::ApiserverPodStatusUpdate
    )
}

/// Whether two sides of REST requests are one exchange: the same HTTP/2
/// stream (its id is the same at both ends) on the same path, overlapping
/// in time.
fn same_exchange(one: &RestMessage, other: &RestMessage) -> bool {
    one.stream_id == other.stream_id
        && one.path == other.path
        && one.start_ts_ns <= other.end_ts_ns
        && one.end_ts_ns >= other.start_ts_ns
}

/// The HTTP attributes of a REST request, either side.
fn http_attributes(rest: &RestMessage) -> Vec<(String, AttributeValue)> {
    let mut attributes = vec![
        string_attribute(attr::HTTP_REQUEST_METHOD, &rest.method),
        string_attribute(attr::HTTP_ROUTE, &rest.route),
        string_attribute(attr::K8S_VERB, &rest.verb),
    ];
    if let Some(code) = rest.status {
        attributes.push(int_attribute(
            attr::HTTP_RESPONSE_STATUS_CODE,
            i64::from(code),
        ));
    }
    if let Some(agent) = &rest.user_agent {
        attributes.push(string_attribute(attr::USER_AGENT_ORIGINAL, agent));
    }
    // The phase the response returned: a status update that reports
    // Running ends the Pod's creation for an agent that sees no etcd.
    if let Some(phase) = rest.pod.as_ref().and_then(|pod| pod.phase.as_deref()) {
        attributes.push(string_attribute(attr::K8S_POD_PHASE, phase));
    }
    if !rest.warnings.is_empty() {
        attributes.push(string_attribute(
            attr::K8S_WARNINGS,
            &rest.warnings.join("; "),
        ));
    }
    attributes
}

/// Namespace and (for an object or subresource) name of a core Pod path.
pub(super) fn path_pod(path: &str) -> Option<(String, Option<String>)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let mut parts = rest.split('/');
    let namespace = parts.next().filter(|ns| !ns.is_empty())?;
    if parts.next()? != "pods" {
        return None;
    }
    Some((namespace.to_owned(), parts.next().map(str::to_owned)))
}

/// Namespace and name of a storage key `/pods/NS/NAME` (the apiserver's
/// key, without etcd's `/registry` prefix).
pub(super) fn pod_key(key: &str) -> Option<(String, String)> {
    let rest = key
        .strip_prefix("/registry")
        .unwrap_or(key)
        .strip_prefix("/pods/")?;
    let (namespace, name) = rest.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (namespace.to_owned(), name.to_owned()))
}
