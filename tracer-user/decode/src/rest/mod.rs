//! Kubernetes REST requests: what kube-apiserver's RequestInfo makes of a
//! method, a path and a query.
//!
//! In: an HTTP method, a request target (`/api/v1/namespaces/default/pods?watch=1`)
//! and optionally the request's header fields (from [`crate::http2`] or
//! [`crate::http1`]). Out: a [`RestRequest`] — verb, group/version/resource,
//! namespace, name, subresource, `dryRun=All`, a low-cardinality route template
//! and the media types — resolved the way kube-apiserver does in
//! `staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`
//! (`RequestInfoFactory.NewRequestInfo`, Kubernetes 1.30). Header values other
//! than the media types and the user agent are never read, so credentials are
//! never copied. Limits: `README.md` here.

/// The verb kube-apiserver's authorizer sees.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verb {
    /// POST to a resource.
    Create,
    /// GET or HEAD of a named object.
    Get,
    /// GET or HEAD of a collection.
    List,
    /// `/watch/` path prefix, or a collection GET with `watch` set.
    Watch,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of a named object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// `/proxy/` path prefix (deprecated upstream, still resolved).
    Proxy,
    /// A non-resource request's lowercased method (`post` to `/api`), or a
    /// resource request with a method apiserver has no verb for (empty).
    Other(String),
}

impl Verb {
    /// The verb as apiserver spells it (audit logs, RBAC).
    pub fn as_str(&self) -> &str {
        match self {
            Verb::Create => "create",
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Proxy => "proxy",
            Verb::Other(verb) => verb,
        }
    }
}

/// A media type apiserver negotiates, from `content-type` or `accept`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaType {
    /// `application/json` (and `application/*+json` patch types).
    Json,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
    /// `application/yaml`.
    Yaml,
    /// `application/cbor`.
    Cbor,
    /// Anything else, as sent (first 64 bytes).
    Other(String),
}

impl MediaType {
    /// The first media type of a header value, ignoring parameters.
    pub fn parse(value: &str) -> MediaType {
        let essence = value
            .split([',', ';'])
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/vnd.kubernetes.protobuf" => MediaType::Protobuf,
            "application/yaml" => MediaType::Yaml,
            "application/cbor" => MediaType::Cbor,
            json if json == "application/json" || json.ends_with("+json") => MediaType::Json,
            _ => MediaType::Other(value.chars().take(64).collect()),
        }
    }
}

/// What a path names when it addresses an API resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// API version (`v1`, `v1beta1`).
    pub version: String,
    /// Resource, plural (`pods`).
    pub resource: String,
    /// Namespace; `None` for cluster-scoped resources and lists across
    /// namespaces (`/api/v1/pods`).
    pub namespace: Option<String>,
    /// Object name: from the path, or from a `metadata.name=` field selector
    /// on list and watch, as apiserver does.
    pub name: Option<String>,
    /// Subresource (`binding`, `status`, `log`, `exec`…).
    pub subresource: Option<String>,
}

/// A request to kube-apiserver, resolved like its RequestInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestRequest {
    /// The verb.
    pub verb: Verb,
    /// The resource addressed; `None` for non-resource paths (`/healthz`,
    /// `/version`, `/apis`, discovery).
    pub resource: Option<Resource>,
    /// The path with namespace, name and anything after the subresource
    /// replaced by placeholders (`/api/v1/namespaces/{namespace}/pods/{name}/binding`),
    /// for grouping requests. Non-resource paths are kept as they are.
    pub route: String,
    /// `dryRun=All`: apiserver will not persist the change.
    pub dry_run: bool,
    /// The body's media type (`content-type`).
    pub content_type: Option<MediaType>,
    /// The media type asked for (`accept`); a watch with
    /// [`MediaType::Protobuf`] streams length-prefixed protobuf events.
    pub accept: Option<MediaType>,
    /// `user-agent` (e.g. `kubelet/v1.30.0 (linux/amd64) kubernetes/…`), first 256 bytes.
    pub user_agent: Option<String>,
}

impl RestRequest {
    /// Resolves a request. `target` is the request target as sent (path and
    /// optional query); `headers` are (lowercase name, value) pairs.
    pub fn resolve(method: &str, target: &str, headers: &[(String, String)]) -> RestRequest {
        let (raw_path, query) = target.split_once('?').unwrap_or((target, ""));
        let path = percent_decode(raw_path);
        let query = Query::parse(query);
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let (verb, resource, route) = resolve_path(method, &path, &query);
        RestRequest {
            verb,
            resource,
            route,
            dry_run: query.all("dryRun").any(|v| v == "All"),
            content_type: header("content-type").map(MediaType::parse),
            accept: header("accept").map(MediaType::parse),
            user_agent: header("user-agent").map(|v| v.chars().take(256).collect()),
        }
    }

    /// A watch: `/watch/` prefix or `watch` set on a collection GET.
    pub fn is_watch(&self) -> bool {
        self.verb == Verb::Watch
    }

    /// Whether this request addresses Pods (any subresource).
    pub fn is_pods(&self) -> bool {
        self.resource
            .as_ref()
            .is_some_and(|r| r.group.is_empty() && r.resource == "pods")
    }
}

/// Verbs written as a path segment after the version (`specialVerbs`).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Segments after `namespaces/{name}` that are the Namespace's own
/// subresources rather than a namespaced resource (`namespaceSubresources`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// `NewRequestInfo` on an already percent-decoded path.
fn resolve_path(method: &str, path: &str, query: &Query) -> (Verb, Option<Resource>, String) {
    let non_resource = || {
        let verb = match method.to_ascii_lowercase().as_str() {
            "get" => Verb::Get,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            other => Verb::Other(other.to_string()),
        };
        (verb, None, path.to_string())
    };
    // splitPath: trim slashes, split; "" has no parts.
    let trimmed = path.trim_matches('/');
    let all: Vec<&str> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').collect()
    };
    if all.len() < 3 || (all[0] != "api" && all[0] != "apis") {
        return non_resource();
    }
    let mut parts = &all[1..];
    let mut route = format!("/{}", all[0]);
    let mut group = "";
    if all[0] == "apis" {
        // One part (the prefix) is consumed: this asks for four in all.
        if parts.len() < 3 {
            return non_resource();
        }
        group = parts[0];
        route = format!("{route}/{group}");
        parts = &parts[1..];
    }
    let version = parts[0];
    route = format!("{route}/{version}");
    parts = &parts[1..];

    let mut verb = match method {
        "POST" => Verb::Create,
        "GET" | "HEAD" => Verb::Get,
        "PUT" => Verb::Update,
        "PATCH" => Verb::Patch,
        "DELETE" => Verb::Delete,
        _ => Verb::Other(String::new()),
    };
    if SPECIAL_VERBS.contains(&parts[0]) {
        // apiserver answers an error here; the request is still what it is.
        if parts.len() < 2 {
            return non_resource();
        }
        verb = if parts[0] == "watch" {
            Verb::Watch
        } else {
            Verb::Proxy
        };
        route = format!("{route}/{}", parts[0]);
        parts = &parts[1..];
    }

    let mut namespace = None;
    if parts[0] == "namespaces" {
        if let Some(ns) = parts.get(1) {
            namespace = Some(ns.to_string());
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
                route = format!("{route}/namespaces/{{namespace}}");
                parts = &parts[2..];
            }
        }
    }

    // parts: resource/name/subresource/anything/else.
    let resource = parts[0].to_string();
    let mut name = parts.get(1).map(|n| n.to_string());
    let subresource = parts
        .get(2)
        .filter(|_| verb != Verb::Proxy)
        .map(|s| s.to_string());
    route = format!("{route}/{resource}");
    if name.is_some() {
        route.push_str("/{name}");
    }
    match &subresource {
        Some(subresource) => {
            route = format!("{route}/{subresource}");
            if parts.len() > 3 {
                route.push_str("/{path}");
            }
        }
        None if parts.len() > 2 => route.push_str("/{path}"),
        None => {}
    }

    if name.is_none() && verb == Verb::Get {
        // ListOptions decoding: `watch` is true unless "0" or "false".
        let watch = query
            .first("watch")
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        verb = if watch { Verb::Watch } else { Verb::List };
    }
    if name.is_none() && (verb == Verb::List || verb == Verb::Watch) {
        name = query
            .first("fieldSelector")
            .and_then(exact_name_match)
            .filter(|n| is_valid_path_segment_name(n));
    }
    if name.is_none() && verb == Verb::Delete {
        verb = Verb::DeleteCollection;
    }
    let resource = Resource {
        group: group.to_string(),
        version: version.to_string(),
        resource,
        namespace,
        name,
        subresource,
    };
    (verb, Some(resource), route)
}

/// `fields.Selector.RequiresExactMatch("metadata.name")`: a `metadata.name=x`
/// or `metadata.name==x` term among comma-separated terms.
fn exact_name_match(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let (field, value) = term.split_once('=')?;
        let value = value.strip_prefix('=').unwrap_or(value);
        // `!=` is not an exact match; its field part ends with '!'.
        (field.trim() == "metadata.name").then(|| value.trim().to_string())
    })
}

/// `path.IsValidPathSegmentName`: a name apiserver could put in a path.
fn is_valid_path_segment_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%'])
}

/// A parsed query string, in order.
struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    fn parse(query: &str) -> Query {
        let pairs = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (form_decode(k), form_decode(v))
            })
            .collect();
        Query { pairs }
    }

    fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn first(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Query components also encode spaces as '+' (`url.ParseQuery`).
fn form_decode(text: &str) -> String {
    percent_decode(&text.replace('+', " "))
}

/// `%XX` decoding; invalid escapes are kept as they are, invalid UTF-8 is
/// replaced (a path apiserver would reject still gets a route).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests;
