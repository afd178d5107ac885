//! The messages decode hands to correlation, made from finished exchanges:
//! CRI calls, etcd KV writes about Pods, Kubernetes REST requests (over
//! HTTP/2 or HTTP/1.1).

use super::*;

/// Which end of the connection the process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// It accepted the connection: it handles the calls.
    Server,
    /// It connected: it makes the calls.
    Client,
}

/// One finished CRI call on one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriMessage {
    /// The connection.
    pub conn: ConnKey,
    /// The HTTP/2 stream: the same number at both ends of the connection.
    pub stream_id: u32,
    /// Whether the process handled or made the call.
    pub side: Side,
    /// `runtime.v1.RuntimeService`, `runtime.v1.ImageService`.
    pub service: String,
    /// `RunPodSandbox`, …
    pub method: String,
    /// What the call says about its Pod (no payloads, no secrets).
    pub clues: Vec<PodClue>,
    /// CreateContainer, ImageStatus, PullImage, RunPodSandbox: the image
    /// and the security context asked for (settings and names only).
    pub facts: Option<Box<ContainerFacts>>,
    /// gRPC status code, when the trailers were captured.
    pub status_code: Option<u32>,
    /// The server's error text (`grpc-message`) of a failed call, cut to
    /// [`MAX_STATUS_MESSAGE`] bytes: what `explain` shows as the reason.
    pub status_message: Option<String>,
    /// Request start and response end (CLOCK_MONOTONIC ns), where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

/// One finished etcd KV write that names a Pod (reads and writes of other
/// objects are not reported: no Pod span comes of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMessage {
    /// The connection.
    pub conn: ConnKey,
    /// Whether the process handled (etcd) or made (kube-apiserver) the call.
    pub side: Side,
    /// `Txn`, `Put`, `DeleteRange`.
    pub method: String,
    /// Create, update or delete.
    pub write: WriteKind,
    /// The Pod keys and the identity in written Pod objects.
    pub clues: Arc<[PodClue]>,
    /// Digest of the request's canonical bytes: the same for the client's
    /// call, the server's and the Raft entry in the WAL.
    pub fingerprint: [u8; 16],
    /// Store revision after the write, when the response was captured.
    pub revision: Option<i64>,
    /// For a Txn: whether its compares held (false: a conflict, no write).
    pub txn_succeeded: Option<bool>,
    /// gRPC status code, when the trailers were captured.
    pub status_code: Option<u32>,
    /// Request start and response end (CLOCK_MONOTONIC ns), where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

/// One finished Kubernetes REST request that writes a Pod: a create, update,
/// patch or delete of `pods`, or of its `binding` and `status` subresources.
/// Reads and watches are not reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestMessage {
    /// The connection.
    pub conn: ConnKey,
    /// The HTTP/2 stream.
    pub stream_id: u32,
    /// Whether the process handled (kube-apiserver) or made the request.
    pub side: Side,
    /// `POST`, `PATCH`, …
    pub method: String,
    /// The route template (`/api/v1/namespaces/{namespace}/pods`).
    pub route: String,
    /// The Kubernetes verb (`create`, `patch`, …).
    pub verb: String,
    /// From the path.
    pub namespace: Option<String>,
    /// From the path (absent for a create).
    pub name: Option<String>,
    /// `binding`, `status`.
    pub subresource: Option<String>,
    /// `?dryRun=All`: admission runs, nothing is stored.
    pub dry_run: bool,
    /// `:status`, when the response headers were captured.
    pub status: Option<u16>,
    /// The client's `user-agent`.
    pub user_agent: Option<String>,
    /// The Pod the response returned (a create's UID is known from here).
    pub pod: Option<PodIdentity>,
    /// The request path, without the query.
    pub path: String,
    /// For a failure: the `Status` the apiserver answered, its message cut
    /// to [`MAX_STATUS_MESSAGE`] bytes.
    pub error: Option<ApiStatus>,
    /// `warning` response headers (Pod Security warnings), each cut.
    pub warnings: Vec<String>,
    /// Request start and response end (CLOCK_MONOTONIC ns), where captured.
    pub start_ts_ns: Option<u64>,
    /// See `start_ts_ns`.
    pub end_ts_ns: Option<u64>,
}

pub(super) fn call_messages(
    conn: ConnKey,
    side: Side,
    mut exchanges: Vec<Exchange>,
    once: &mut DecodedOnce,
) -> Vec<Message> {
    // Not decoded at all: etcd KV calls that cannot name a Pod.
    exchanges.retain(|exchange| !kv_call_without_pod(exchange));
    let mut messages: Vec<Message> = exchanges
        .iter()
        .filter_map(|exchange| rest_message(conn, side, exchange))
        .map(|rest| Message::Rest(Box::new(rest)))
        .collect();
    messages.extend(
        exchanges
            .iter()
            .filter_map(GrpcCall::from_exchange)
            .filter_map(|call| {
                if let Some(cri) = CriCall::from_grpc(&call) {
                    return Some(Message::Cri(CriMessage {
                        conn,
                        stream_id: call.stream_id,
                        side,
                        service: call.service.clone()?,
                        method: call.method.clone()?,
                        clues: cri.clues(),
                        facts: cri.facts().map(Box::new),
                        status_code: call.status.as_ref().map(|status| status.code),
                        status_message: status_message(&call),
                        start_ts_ns: call.start_ts_ns,
                        end_ts_ns: call.end_ts_ns,
                    }));
                }
                etcd_message(conn, side, &call, once).map(Message::Etcd)
            }),
    );
    messages
}

/// An etcd KV call whose uncompressed request never mentions a Pod key:
/// no span comes of it, so it is dropped before any decoding.
fn kv_call_without_pod(exchange: &Exchange) -> bool {
    exchange
        .path()
        .is_some_and(|path| path.starts_with("/etcdserverpb.KV/"))
        && exchange.request.header("grpc-encoding").is_none()
        && !may_hold_pod_clue(&exchange.request.body)
}

/// Most `warning` headers kept per response.
const MAX_WARNINGS: usize = 8;

/// An HTTP/2 exchange as a REST request, if it writes a Pod.
fn rest_message(conn: ConnKey, side: Side, exchange: &Exchange) -> Option<RestMessage> {
    let header = |name: &str| exchange.request.header(name).map(|(value, _)| value);
    if header("content-type").is_some_and(|c| c.starts_with("application/grpc")) {
        return None;
    }
    let method = header(":method")?;
    // A header block from the HPACK probes given to the wrong stream shows
    // as a pseudo-header that contradicts the wire's: then neither its
    // method nor its path can be trusted.
    let contradicted = exchange
        .request
        .external_headers
        .iter()
        .filter(|(name, _)| name.starts_with(':'))
        .any(|(name, supplied)| header(name).is_some_and(|value| value != supplied));
    if contradicted {
        return None;
    }
    let warnings = exchange
        .response
        .headers
        .iter()
        .flat_map(|headers| headers.fields.iter())
        .filter(|(name, _)| name.as_str() == "warning")
        .map(|(_, value)| value.as_str());
    rest_from_wire(
        conn,
        side,
        RestWire {
            stream_id: exchange.stream_id,
            method,
            target: exchange.path()?,
            header: &header,
            status: exchange
                .response
                .header(":status")
                .and_then(|(value, _)| value.parse::<u16>().ok()),
            response_body: &exchange.response.body,
            warnings: warnings.collect(),
            start_ts_ns: exchange.request.first_ts_ns,
            end_ts_ns: exchange.response.last_ts_ns.or(exchange.request.last_ts_ns),
        },
    )
}

/// The REST requests among a connection's finished HTTP/1.1 exchanges.
pub(super) fn http1_messages(
    conn: ConnKey,
    side: Side,
    exchanges: Vec<http1::Exchange>,
) -> Vec<Message> {
    exchanges
        .iter()
        .filter_map(|exchange| {
            let request = exchange.request.as_ref()?;
            let response = exchange.response.as_ref();
            let header = |name: &str| request.half.headers.get(name);
            let warnings = response
                .map(|response| response.half.headers.get_all("warning").collect())
                .unwrap_or_default();
            rest_from_wire(
                conn,
                side,
                RestWire {
                    // The exchange's place on the connection: the same at
                    // both ends, as an HTTP/2 stream id is.
                    stream_id: u32::try_from(exchange.id).unwrap_or(u32::MAX),
                    method: &request.method,
                    target: &request.target,
                    header: &header,
                    status: response.map(|response| response.status),
                    response_body: response.map_or(&[][..], |response| &response.half.body),
                    warnings,
                    start_ts_ns: Some(request.half.first_ts_ns),
                    end_ts_ns: Some(
                        response.map_or(request.half.last_ts_ns, |r| r.half.last_ts_ns),
                    ),
                },
            )
        })
        .map(|rest| Message::Rest(Box::new(rest)))
        .collect()
}

/// What a REST request's two wires (HTTP/2, HTTP/1.1) say alike.
struct RestWire<'a> {
    stream_id: u32,
    method: &'a str,
    /// The request target (path and query).
    target: &'a str,
    /// A request header field by (lowercase) name.
    header: &'a dyn Fn(&str) -> Option<&'a str>,
    status: Option<u16>,
    response_body: &'a [u8],
    warnings: Vec<&'a str>,
    start_ts_ns: Option<u64>,
    end_ts_ns: Option<u64>,
}

/// A REST request from either wire, if it writes a Pod.
fn rest_from_wire(conn: ConnKey, side: Side, wire: RestWire<'_>) -> Option<RestMessage> {
    let headers: Vec<(String, String)> = ["content-type", "accept", "user-agent"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), (wire.header)(name)?.to_owned())))
        .collect();
    let request = RestRequest::resolve(wire.method, wire.target, &headers);
    let writes = matches!(
        request.verb,
        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
    );
    if !request.is_pods() || !writes {
        return None;
    }
    let resource = request.resource.as_ref()?;
    let failed = wire.status.is_some_and(|status| status >= 400);
    let (pod, error) = if failed {
        let error = decode_status(wire.response_body).map(|status| ApiStatus {
            message: status.message.map(cut),
            ..status
        });
        (None, error)
    } else {
        let pod = match decode_stored_object(wire.response_body) {
            Ok(StoredObject::Pod(pod)) => Some(*pod),
            _ => None,
        };
        (pod, None)
    };
    let warnings = wire
        .warnings
        .into_iter()
        .take(MAX_WARNINGS)
        .map(|value| cut(value.to_owned()))
        .collect();
    Some(RestMessage {
        conn,
        stream_id: wire.stream_id,
        side,
        method: wire.method.to_owned(),
        route: request.route.clone(),
        verb: request.verb.as_str().to_owned(),
        namespace: resource.namespace.clone(),
        name: resource.name.clone(),
        subresource: resource.subresource.clone(),
        path: wire.target.split('?').next().unwrap_or_default().to_owned(),
        dry_run: request.dry_run,
        status: wire.status,
        user_agent: request.user_agent.clone(),
        pod,
        error,
        warnings,
        start_ts_ns: wire.start_ts_ns,
        end_ts_ns: wire.end_ts_ns,
    })
}

/// A text from the wire cut to [`MAX_STATUS_MESSAGE`] bytes.
fn cut(text: String) -> String {
    tracer_decode::cut_text(text, MAX_STATUS_MESSAGE)
}

/// The error text of a failed call, cut at a character boundary.
fn status_message(call: &GrpcCall) -> Option<String> {
    let status = call.status.as_ref().filter(|status| status.code != 0)?;
    Some(cut(status.message.clone()?))
}

fn etcd_message(
    conn: ConnKey,
    side: Side,
    call: &GrpcCall,
    once: &mut DecodedOnce,
) -> Option<EtcdMessage> {
    let method = KvCall::method_of(call)?;
    // The client's call and etcd's are the same message: decoded once.
    // No time: the earliest, which can only make the write more followable.
    let seen_ns = call.start_ts_ns.or(call.end_ts_ns).unwrap_or(0);
    let facts = once.kv_request(method, call.request_bytes()?, seen_ns)?;
    let response = call
        .response_bytes()
        .and_then(|bytes| KvResponse::decode(method, bytes).ok());
    Some(EtcdMessage {
        conn,
        side,
        method: facts.method.to_owned(),
        write: facts.write?,
        clues: facts.clues,
        fingerprint: facts.fingerprint,
        revision: response.as_ref().and_then(|r| r.revision()),
        txn_succeeded: response.as_ref().and_then(|r| r.txn_succeeded()),
        status_code: call.status.as_ref().map(|status| status.code),
        start_ts_ns: call.start_ts_ns,
        end_ts_ns: call.end_ts_ns,
    })
}
