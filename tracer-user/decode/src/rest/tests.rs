use super::*;

/// (method, target, verb, group, version, namespace, resource, subresource, name)
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// The resource rows of `TestGetAPIRequestInfo` in kube-apiserver's
/// `staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo_test.go`
/// (empty strings where apiserver leaves a field empty).
const APISERVER_EXAMPLES: &[Row] = &[
    // resource paths
    (
        "GET",
        "/api/v1/namespaces",
        "list",
        "",
        "v1",
        "",
        "namespaces",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other",
        "get",
        "",
        "v1",
        "other",
        "namespaces",
        "",
        "other",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods",
        "list",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods/foo",
        "get",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "HEAD",
        "/api/v1/namespaces/other/pods/foo",
        "get",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    ("GET", "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
    ("HEAD", "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
    // special verbs
    (
        "GET",
        "/api/v1/proxy/namespaces/other/pods/foo",
        "proxy",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "GET",
        "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource",
        "proxy",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "GET",
        "/api/v1/watch/pods",
        "watch",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/pods?watch=true",
        "watch",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/pods?watch=false",
        "list",
        "",
        "v1",
        "",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/watch/namespaces/other/pods",
        "watch",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods?watch=1",
        "watch",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods?watch=0",
        "list",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // subresource identification
    (
        "GET",
        "/api/v1/namespaces/other/pods/foo/status",
        "get",
        "",
        "v1",
        "other",
        "pods",
        "status",
        "foo",
    ),
    (
        "GET",
        "/api/v1/namespaces/other/pods/foo/proxy/subpath",
        "get",
        "",
        "v1",
        "other",
        "pods",
        "proxy",
        "foo",
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/finalize",
        "update",
        "",
        "v1",
        "other",
        "namespaces",
        "finalize",
        "other",
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/status",
        "update",
        "",
        "v1",
        "other",
        "namespaces",
        "status",
        "other",
    ),
    // verb identification
    (
        "PATCH",
        "/api/v1/namespaces/other/pods/foo",
        "patch",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "DELETE",
        "/api/v1/namespaces/other/pods/foo",
        "delete",
        "",
        "v1",
        "other",
        "pods",
        "",
        "foo",
    ),
    (
        "POST",
        "/api/v1/namespaces/other/pods",
        "create",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // deletecollection verb identification
    (
        "DELETE",
        "/api/v1/nodes",
        "deletecollection",
        "",
        "v1",
        "",
        "nodes",
        "",
        "",
    ),
    (
        "DELETE",
        "/api/v1/namespaces",
        "deletecollection",
        "",
        "v1",
        "",
        "namespaces",
        "",
        "",
    ),
    (
        "DELETE",
        "/api/v1/namespaces/other/pods",
        "deletecollection",
        "",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "DELETE",
        "/apis/extensions/v1/namespaces/other/pods",
        "deletecollection",
        "extensions",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    // api group and version identification
    (
        "POST",
        "/apis/extensions/v1/namespaces/other/pods",
        "create",
        "extensions",
        "v1",
        "other",
        "pods",
        "",
        "",
    ),
    (
        "POST",
        "/apis/extensions/v1beta3/namespaces/other/pods",
        "create",
        "extensions",
        "v1beta3",
        "other",
        "pods",
        "",
        "",
    ),
];

fn some(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

#[test]
fn apiserver_request_info_examples_resolve_alike() {
    for &(method, target, verb, group, version, namespace, resource, subresource, name) in
        APISERVER_EXAMPLES
    {
        let request = RestRequest::resolve(method, target, &[]);
        assert_eq!(request.verb.as_str(), verb, "{method} {target}");
        assert_eq!(
            request.resource,
            Some(Resource {
                group: group.into(),
                version: version.into(),
                resource: resource.into(),
                namespace: some(namespace),
                name: some(name),
                subresource: some(subresource),
            }),
            "{method} {target}"
        );
    }
}

#[test]
fn non_resource_paths_keep_method_as_verb() {
    for (method, target, verb) in [
        ("GET", "/", "get"),
        ("GET", "/healthz", "get"),
        ("GET", "/api", "get"),
        ("GET", "/api/v1", "get"),
        ("GET", "/apis/apps/v1", "get"),
        ("POST", "/version?x=1", "post"),
        ("GET", "/openapi/v3/api/v1", "get"),
    ] {
        let request = RestRequest::resolve(method, target, &[]);
        assert_eq!(request.verb.as_str(), verb, "{target}");
        assert_eq!(request.resource, None, "{target}");
        assert_eq!(request.route, target.split('?').next().unwrap_or_default());
    }
}

#[test]
fn scheduler_binding_is_a_create_on_the_binding_subresource() {
    let request = RestRequest::resolve(
        "POST",
        "/api/v1/namespaces/default/pods/web-7d4b9/binding",
        &[(
            "content-type".into(),
            "application/vnd.kubernetes.protobuf".into(),
        )],
    );
    assert_eq!(request.verb, Verb::Create);
    assert!(request.is_pods());
    let resource = request.resource.as_ref().expect("a resource");
    assert_eq!(resource.namespace.as_deref(), Some("default"));
    assert_eq!(resource.name.as_deref(), Some("web-7d4b9"));
    assert_eq!(resource.subresource.as_deref(), Some("binding"));
    assert_eq!(
        request.route,
        "/api/v1/namespaces/{namespace}/pods/{name}/binding"
    );
    assert_eq!(request.content_type, Some(MediaType::Protobuf));
}

#[test]
fn routes_hide_names_and_namespaces_only() {
    for (method, target, route) in [
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "/api/v1/namespaces/{namespace}/pods",
        ),
        ("GET", "/api/v1/pods", "/api/v1/pods"),
        (
            "GET",
            "/api/v1/watch/namespaces/a/pods/b",
            "/api/v1/watch/namespaces/{namespace}/pods/{name}",
        ),
        ("GET", "/api/v1/nodes/node-1", "/api/v1/nodes/{name}"),
        (
            "PUT",
            "/api/v1/namespaces/other/status",
            "/api/v1/namespaces/{name}/status",
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods/b/log?follow=true",
            "/api/v1/namespaces/{namespace}/pods/{name}/log",
        ),
        (
            "GET",
            "/api/v1/proxy/namespaces/a/pods/b/x/y",
            "/api/v1/proxy/namespaces/{namespace}/pods/{name}/{path}",
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods/b/proxy/x",
            "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}",
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/a/deployments/web/scale",
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
        ),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
        ),
    ] {
        assert_eq!(
            RestRequest::resolve(method, target, &[]).route,
            route,
            "{target}"
        );
    }
}

#[test]
fn named_group_cluster_scoped_resource() {
    let request = RestRequest::resolve(
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        &[],
    );
    assert_eq!(request.verb, Verb::Get);
    let resource = request.resource.expect("a resource");
    assert_eq!(resource.group, "rbac.authorization.k8s.io");
    assert_eq!(resource.resource, "clusterroles");
    assert_eq!(resource.namespace, None);
    assert_eq!(resource.name.as_deref(), Some("admin"));
}

#[test]
fn kubelet_watch_of_its_pods_by_field_selector() {
    // kubelet's Pod informer: all namespaces, spec.nodeName selector, protobuf.
    let request = RestRequest::resolve(
        "GET",
        "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=1&timeoutSeconds=400&watch=true",
        &[
            (
                "accept".into(),
                "application/vnd.kubernetes.protobuf;stream=watch, application/json".into(),
            ),
            ("user-agent".into(), "kubelet/v1.30.0 (linux/amd64)".into()),
            ("authorization".into(), "Bearer abc".into()),
        ],
    );
    assert!(request.is_watch());
    assert!(request.is_pods());
    assert_eq!(request.resource.as_ref().and_then(|r| r.name.clone()), None);
    assert_eq!(request.accept, Some(MediaType::Protobuf));
    assert_eq!(
        request.user_agent.as_deref(),
        Some("kubelet/v1.30.0 (linux/amd64)")
    );
    assert!(!format!("{request:?}").contains("abc"));
}

#[test]
fn metadata_name_field_selector_names_the_object_of_a_list_or_watch() {
    let named = |target: &str| {
        RestRequest::resolve("GET", target, &[])
            .resource
            .and_then(|r| r.name)
    };
    assert_eq!(
        named("/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3D%3Dfoo&watch=1"),
        Some("foo".into())
    );
    assert_eq!(
        named(
            "/api/v1/namespaces/other/pods?fieldSelector=status.phase%3DRunning,metadata.name%3Dfoo"
        ),
        Some("foo".into())
    );
    assert_eq!(
        named("/api/v1/namespaces/other/pods?fieldSelector=metadata.name!%3Dfoo"),
        None
    );
    assert_eq!(
        named("/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3D.."),
        None
    );
}

#[test]
fn watch_query_values_follow_list_options_decoding() {
    let verb =
        |query: &str| RestRequest::resolve("GET", &format!("/api/v1/pods?{query}"), &[]).verb;
    assert_eq!(verb("watch=FALSE"), Verb::List);
    assert_eq!(verb("watch=yes"), Verb::Watch);
    assert_eq!(verb("watch="), Verb::Watch);
    assert_eq!(verb("watch=0&watch=1"), Verb::List);
    // `watch` on a named GET does not make it a watch.
    assert_eq!(
        RestRequest::resolve("GET", "/api/v1/namespaces/a/pods/b?watch=true", &[]).verb,
        Verb::Get
    );
}

#[test]
fn dry_run_all_is_flagged() {
    let dry = |target: &str| RestRequest::resolve("POST", target, &[]).dry_run;
    assert!(dry("/api/v1/namespaces/default/pods?dryRun=All"));
    assert!(dry(
        "/api/v1/namespaces/default/pods?fieldManager=kubectl&dryRun=All"
    ));
    assert!(!dry("/api/v1/namespaces/default/pods?dryRun=None"));
    assert!(!dry("/api/v1/namespaces/default/pods"));
}

#[test]
fn escaped_paths_resolve_after_decoding() {
    let request = RestRequest::resolve("GET", "/api/v1/namespaces/a%2Db/pods/web%2D1", &[]);
    let resource = request.resource.expect("a resource");
    assert_eq!(resource.namespace.as_deref(), Some("a-b"));
    assert_eq!(resource.name.as_deref(), Some("web-1"));
}

#[test]
fn odd_methods_and_short_special_verb_paths() {
    assert_eq!(
        RestRequest::resolve("OPTIONS", "/api/v1/pods", &[]).verb,
        Verb::Other(String::new())
    );
    // `/api/v1/watch` alone: apiserver errors; here it is a non-resource path.
    assert_eq!(
        RestRequest::resolve("GET", "/api/v1/watch", &[]).resource,
        None
    );
    assert_eq!(
        RestRequest::resolve("GET", "/apis/apps/v1/watch", &[]).resource,
        None
    );
}

#[test]
fn media_types_ignore_parameters_and_case() {
    assert_eq!(MediaType::parse("application/json"), MediaType::Json);
    assert_eq!(
        MediaType::parse("application/strategic-merge-patch+json"),
        MediaType::Json
    );
    assert_eq!(
        MediaType::parse("Application/VND.kubernetes.protobuf; stream=watch"),
        MediaType::Protobuf
    );
    assert_eq!(
        MediaType::parse("text/plain"),
        MediaType::Other("text/plain".into())
    );
}
