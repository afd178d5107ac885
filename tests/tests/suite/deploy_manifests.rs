//! deploy/: the manifests, alerts and dashboard an operator applies, checked
//! without a cluster.
//!
//! - Every Kubernetes object deserializes into its API type (k8s-openapi,
//!   Kubernetes 1.33) and has no field that type lacks (serde_ignored reports
//!   them); the Prometheus Operator's PodMonitor and PrometheusRule go into
//!   types written here after the operator's CRD schema (v0.93), with unknown
//!   fields denied.
//! - Each kustomization builds, and the base with each component: there is
//!   no kustomize binary here, so resources, components, ConfigMap
//!   generators, RFC 6902 patches, namespace and image transformers are
//!   applied as kustomize does; every path it names exists,
//!   every patch's target exists and every patch applies. The built objects
//!   are validated as above, plus a few rules the API server enforces.
//! - The DaemonSet has what deploy/README.md asks: hostPID, the listed
//!   capabilities and no others, read-only host mounts, not privileged
//!   (except in the privileged overlay), control-plane tolerations; the base
//!   has no field newer than Kubernetes 1.28 (appArmorProfile is 1.30's: a
//!   component swaps it in) and no CAP_SYS_RESOURCE (a component for kernels
//!   before 5.11).
//! - Every PromQL expression (rules and dashboard) parses (promql-parser) and
//!   names only series the agent exports — read from tracer-user's own
//!   `Metrics` exposition — or that the rules record; the latency alerts keep
//!   their published thresholds; the dashboard's panels all have a data
//!   source and its latency panels show exemplars.
//! - Where promtool is installed (`$PROMTOOL` or PATH; skipped otherwise),
//!   Prometheus's rule engine loads the rules and the alerts fire on made-up
//!   series exactly when they should.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
};
use tracer_user::correlate::contract::{attr, name};

use k8s_openapi::{
    api::{
        apps::v1::DaemonSet,
        core::v1::{ConfigMap, Container, Namespace, PodSpec, Service, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use promql_parser::{
    label::MatchOp,
    parser::{Expr, LabelModifier, VectorSelector},
    util::{ExprVisitor, walk_expr},
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;
use tracer_common::drop_reason::DropReason;
use tracer_user::{
    capture::DropCounts,
    correlate::{
        Span,
        span::{AttributeValue, SpanId, SpanKey, SpanKind, SpanStatus, TraceId},
    },
    export::metrics::{Metrics, Phase},
};

// ---------------------------------------------------------------------------
// Files

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .canonicalize()
        .expect("deploy/ exists")
}

/// The kustomizations an operator applies.
const KUSTOMIZATIONS: [&str; 5] = [
    "base",
    "overlays/tempo",
    "overlays/jaeger",
    "overlays/privileged",
    "monitoring",
];

/// The components an operator adds to a kustomization (`components:`), for a
/// range of releases or kernels; each is checked on top of the base.
const COMPONENTS: [&str; 2] = ["components/apparmor-field", "components/memlock"];

/// `base` with `component` added, as a kustomization naming it would build.
fn build_with_component(component: &str) -> Build {
    let mut build = build("base");
    apply_component(&deploy_dir().join(component), &mut build);
    build
}

/// deploy/image/ is the image recipe (another concern, not manifests).
const NOT_MANIFESTS: [&str; 1] = ["image"];

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The documents of a YAML file, as JSON values (YAML 1.2: `yes` is a
/// string, as for the API server).
fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = read(path);
    serde_norway::Deserializer::from_str(&text)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|document| !document.is_null())
        .collect()
}

fn yaml_value(text: &str, origin: &str) -> Value {
    serde_norway::from_str(text).unwrap_or_else(|e| panic!("{origin}: {e}"))
}

/// `T` from `value`, failing on a field `T` does not have (the API server
/// with `--validate=strict`, kubectl's default, rejects those too).
fn strict<T: DeserializeOwned>(value: &Value, origin: &str) -> T {
    let mut unknown = Vec::new();
    let typed = serde_ignored::deserialize(value.clone(), |path| unknown.push(path.to_string()))
        .unwrap_or_else(|e| panic!("{origin}: {e}"));
    assert!(
        unknown.is_empty(),
        "{origin}: fields its type does not have: {unknown:?}"
    );
    typed
}

// ---------------------------------------------------------------------------
// The Prometheus Operator's types: the fields deploy/ may use, after the
// CRDs' openAPIV3Schema (prometheus-operator v0.93). A field the CRD has and
// these types lack fails here: add it to the type.

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMonitor {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: PodMonitorSpec,
}

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMonitorSpec {
    job_label: Option<String>,
    pod_target_labels: Option<Vec<String>>,
    selector: LabelSelector,
    namespace_selector: Option<NamespaceSelector>,
    pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
    sample_limit: Option<u64>,
    scrape_protocols: Option<Vec<String>>,
}

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NamespaceSelector {
    any: Option<bool>,
    match_names: Option<Vec<String>>,
}

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMetricsEndpoint {
    port: Option<String>,
    port_number: Option<u16>,
    path: Option<String>,
    scheme: Option<String>,
    interval: Option<String>,
    scrape_timeout: Option<String>,
    honor_labels: Option<bool>,
    relabelings: Option<Vec<RelabelConfig>>,
    metric_relabelings: Option<Vec<RelabelConfig>>,
}

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RelabelConfig {
    source_labels: Option<Vec<String>>,
    separator: Option<String>,
    target_label: Option<String>,
    regex: Option<String>,
    modulus: Option<u64>,
    replacement: Option<String>,
    action: Option<String>,
}

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PrometheusRule {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: PrometheusRuleSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrometheusRuleSpec {
    groups: Vec<RuleGroup>,
}

#[allow(
    dead_code,
    reason = "parsed so that a field outside the schema fails; not every field is read"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    interval: Option<String>,
    limit: Option<u64>,
    query_offset: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: Option<String>,
    record: Option<String>,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    keep_firing_for: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

/// Prometheus's duration syntax, as the CRDs' pattern requires:
/// `0`, or numbers with units in the order y, w, d, h, m, s, ms.
fn check_duration(duration: &str, origin: &str) {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    let valid = duration == "0" || {
        let mut rest = duration;
        let mut next_unit = 0;
        while !rest.is_empty() {
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let after = &rest[digits..];
            // "ms" before "m": the longest unit that matches.
            let unit = UNITS
                .iter()
                .enumerate()
                .skip(next_unit)
                .filter(|(_, unit)| after.starts_with(**unit))
                .max_by_key(|(_, unit)| unit.len());
            match unit {
                Some((index, unit)) if digits > 0 => {
                    next_unit = index + 1;
                    rest = &after[unit.len()..];
                }
                _ => break,
            }
        }
        rest.is_empty() && !duration.is_empty()
    };
    assert!(valid, "{origin}: {duration:?} is not a Prometheus duration");
}

fn check_pod_monitor(monitor: &PodMonitor, origin: &str) {
    assert!(
        !monitor.spec.pod_metrics_endpoints.is_empty(),
        "{origin}: no podMetricsEndpoints"
    );
    for endpoint in &monitor.spec.pod_metrics_endpoints {
        for duration in [&endpoint.interval, &endpoint.scrape_timeout]
            .into_iter()
            .flatten()
        {
            check_duration(duration, origin);
        }
        if let Some(scheme) = &endpoint.scheme {
            assert!(["http", "https", "HTTP", "HTTPS"].contains(&scheme.as_str()));
        }
        assert!(
            endpoint.port.is_some() || endpoint.port_number.is_some(),
            "{origin}: an endpoint without a port"
        );
        for relabel in endpoint
            .relabelings
            .iter()
            .chain(&endpoint.metric_relabelings)
            .flatten()
        {
            let action = relabel.action.as_deref().unwrap_or("replace");
            assert!(
                [
                    "replace",
                    "keep",
                    "drop",
                    "hashmod",
                    "labelmap",
                    "labeldrop",
                    "labelkeep",
                    "lowercase",
                    "uppercase",
                    "keepequal",
                    "dropequal"
                ]
                .contains(&action.to_lowercase().as_str()),
                "{origin}: relabel action {action}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Validation by kind

#[allow(
    dead_code,
    reason = "the typed object is the validation; tests read some"
)]
#[derive(Debug)]
enum Object {
    Namespace(Box<Namespace>),
    ServiceAccount(Box<ServiceAccount>),
    ConfigMap(Box<ConfigMap>),
    Service(Box<Service>),
    DaemonSet(Box<DaemonSet>),
    PodMonitor(Box<PodMonitor>),
    PrometheusRule(Box<PrometheusRule>),
}

fn validate(value: &Value, origin: &str) -> Object {
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let kind = value["kind"].as_str().unwrap_or_default();
    let origin = format!("{origin} ({kind} {})", value["metadata"]["name"]);
    let object = match (api_version, kind) {
        ("v1", "Namespace") => Object::Namespace(strict(value, &origin)),
        ("v1", "ServiceAccount") => Object::ServiceAccount(strict(value, &origin)),
        ("v1", "ConfigMap") => Object::ConfigMap(strict(value, &origin)),
        ("v1", "Service") => Object::Service(strict(value, &origin)),
        ("apps/v1", "DaemonSet") => {
            let daemon_set: Box<DaemonSet> = strict(value, &origin);
            check_daemon_set_as_the_api_server_would(&daemon_set, &origin);
            Object::DaemonSet(daemon_set)
        }
        ("monitoring.coreos.com/v1", "PodMonitor") => {
            let monitor: Box<PodMonitor> = strict(value, &origin);
            check_pod_monitor(&monitor, &origin);
            Object::PodMonitor(monitor)
        }
        ("monitoring.coreos.com/v1", "PrometheusRule") => {
            Object::PrometheusRule(strict(value, &origin))
        }
        other => panic!("{origin}: no type to validate {other:?} against"),
    };
    let name = value["metadata"]["name"].as_str().unwrap_or_default();
    assert!(
        is_dns_label(name) || (kind != "Namespace" && is_dns_subdomain(name)),
        "{origin}: invalid name {name:?}"
    );
    object
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

fn the_container(spec: &PodSpec) -> &Container {
    assert_eq!(spec.containers.len(), 1, "one container");
    &spec.containers[0]
}

fn added_capabilities(container: &Container) -> BTreeSet<String> {
    container
        .security_context
        .as_ref()
        .and_then(|sc| sc.capabilities.as_ref())
        .and_then(|caps| caps.add.clone())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// A few of the API server's validation rules that a type cannot express.
fn check_daemon_set_as_the_api_server_would(daemon_set: &DaemonSet, origin: &str) {
    let spec = daemon_set.spec.as_ref().expect("spec");
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    assert!(!selector.is_empty(), "{origin}: empty selector");
    for (key, value) in &selector {
        assert_eq!(
            template_labels.get(key),
            Some(value),
            "{origin}: `selector` does not match template `labels`"
        );
    }
    let pod = spec.template.spec.as_ref().expect("template spec");
    let volumes: BTreeSet<&str> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    for container in &pod.containers {
        for mount in container.volume_mounts.iter().flatten() {
            assert!(
                volumes.contains(mount.name.as_str()),
                "{origin}: mount of unknown volume {}",
                mount.name
            );
            if mount.mount_propagation.as_deref() == Some("Bidirectional") {
                panic!("{origin}: Bidirectional propagation needs a privileged container");
            }
        }
        let mut port_names = BTreeSet::new();
        for port in container.ports.iter().flatten() {
            if let Some(name) = &port.name {
                assert!(
                    name.len() <= 15 && is_dns_label(name),
                    "{origin}: port name {name}"
                );
                assert!(port_names.insert(name), "{origin}: duplicate port {name}");
            }
        }
        if let Some(sc) = &container.security_context {
            let privileged = sc.privileged == Some(true);
            let sys_admin = added_capabilities(container)
                .iter()
                .any(|cap| cap == "SYS_ADMIN" || cap == "CAP_SYS_ADMIN");
            if sc.allow_privilege_escalation == Some(false) {
                assert!(
                    !privileged,
                    "{origin}: cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
                );
                assert!(
                    !sys_admin,
                    "{origin}: allowPrivilegeEscalation false with CAP_SYS_ADMIN says the opposite of what it grants"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// kustomize, as far as deploy/ uses it

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Kustomization {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    components: Vec<String>,
    #[serde(default)]
    patches: Vec<KustomizePatch>,
    #[serde(default)]
    images: Vec<KustomizeImage>,
    #[serde(default)]
    config_map_generator: Vec<ConfigMapGenerator>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KustomizePatch {
    path: Option<String>,
    patch: Option<String>,
    target: Option<PatchTarget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchTarget {
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KustomizeImage {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
    digest: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigMapGenerator {
    name: String,
    #[serde(default)]
    files: Vec<String>,
    options: Option<GeneratorOptions>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GeneratorOptions {
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    disable_name_suffix_hash: Option<bool>,
}

/// A kustomization's output: the objects, each with the file it came from.
#[derive(Debug, Default)]
struct Build {
    objects: Vec<(Value, String)>,
    /// Every file the kustomizations read.
    files: BTreeSet<PathBuf>,
}

impl Build {
    fn find(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .iter()
            .map(|(object, _)| object)
            .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the build"))
    }

    fn only<T: DeserializeOwned>(&self, kind: &str) -> T {
        let mut found = self.objects.iter().filter(|(o, _)| o["kind"] == kind);
        let (object, origin) = found.next().unwrap_or_else(|| panic!("no {kind}"));
        assert!(found.next().is_none(), "more than one {kind}");
        strict(object, origin)
    }
}

fn cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace" | "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition"
    )
}

/// The `kustomization.yaml` in `dir`, of kind `kind` (`Kustomization`, or
/// `Component` for what a kustomization's `components:` names), and its path.
fn read_kustomization(dir: &Path, kind: &str) -> (Kustomization, String) {
    let file = dir.join("kustomization.yaml");
    let origin = file.display().to_string();
    let documents = yaml_documents(&file);
    assert_eq!(documents.len(), 1, "{origin}: one document");
    let kustomization: Kustomization = strict(&documents[0], &origin);
    let api_version = match kind {
        "Component" => "kustomize.config.k8s.io/v1alpha1",
        _ => "kustomize.config.k8s.io/v1beta1",
    };
    assert_eq!(kustomization.api_version, api_version, "{origin}");
    assert_eq!(kustomization.kind, kind, "{origin}");
    (kustomization, origin)
}

/// `kustomize build DIR`, for what deploy/ uses.
fn kustomize_build(dir: &Path) -> Build {
    let (kustomization, origin) = read_kustomization(dir, "Kustomization");
    let mut build = Build::default();
    build.files.insert(dir.join("kustomization.yaml"));
    add_resources(dir, &origin, &kustomization.resources, &mut build);
    // Components come after the resources, before the kustomization's own
    // generators, patches and transformers, as in kustomize.
    for component in &kustomization.components {
        apply_component(&dir.join(component), &mut build);
    }
    add_generated_config_maps(dir, &origin, &kustomization, &mut build);
    apply_patches(dir, &origin, &kustomization.patches, &mut build);
    apply_namespace_and_images(&origin, &kustomization, &mut build);
    build
}

/// What a `components:` entry does to a build: its resources are added and
/// its patches applied to everything built so far.
fn apply_component(dir: &Path, build: &mut Build) {
    let (component, origin) = read_kustomization(dir, "Component");
    build.files.insert(dir.join("kustomization.yaml"));
    add_resources(dir, &origin, &component.resources, build);
    assert!(
        component.components.is_empty()
            && component.images.is_empty()
            && component.namespace.is_none()
            && component.config_map_generator.is_empty(),
        "{origin}: only resources and patches are emulated in a component"
    );
    apply_patches(dir, &origin, &component.patches, build);
}

fn add_resources(dir: &Path, origin: &str, resources: &[String], build: &mut Build) {
    for resource in resources {
        let path = dir.join(resource);
        assert!(
            path.exists(),
            "{origin}: resource {resource} does not exist"
        );
        if path.is_dir() {
            let inner = kustomize_build(&path);
            build.objects.extend(inner.objects);
            build.files.extend(inner.files);
        } else {
            for object in yaml_documents(&path) {
                build.objects.push((object, path.display().to_string()));
            }
            build.files.insert(path);
        }
    }
}

fn add_generated_config_maps(
    dir: &Path,
    origin: &str,
    kustomization: &Kustomization,
    build: &mut Build,
) {
    for generator in &kustomization.config_map_generator {
        let options = generator.options.as_ref();
        assert_eq!(
            options.and_then(|o| o.disable_name_suffix_hash),
            Some(true),
            "{origin}: {}: name suffix hashes are not emulated here",
            generator.name
        );
        let mut data = serde_json::Map::new();
        for entry in &generator.files {
            let (key, file) = entry.split_once('=').unwrap_or((entry, entry));
            let path = dir.join(file);
            assert!(path.is_file(), "{origin}: generator file {file} missing");
            let key = Path::new(key).file_name().unwrap().to_string_lossy();
            data.insert(key.into_owned(), Value::String(read(&path)));
            build.files.insert(path);
        }
        let mut metadata = serde_json::json!({ "name": generator.name });
        if let Some(labels) = options.and_then(|o| o.labels.clone()) {
            metadata["labels"] = serde_json::to_value(labels).unwrap();
        }
        if let Some(annotations) = options.and_then(|o| o.annotations.clone()) {
            metadata["annotations"] = serde_json::to_value(annotations).unwrap();
        }
        let config_map = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": data,
        });
        build
            .objects
            .push((config_map, format!("{origin} (generator)")));
    }
}

fn apply_patches(dir: &Path, origin: &str, patches: &[KustomizePatch], build: &mut Build) {
    for patch in patches {
        let (text, patch_origin) = match (&patch.path, &patch.patch) {
            (Some(path), None) => {
                let path = dir.join(path);
                assert!(path.is_file(), "{origin}: patch {} missing", path.display());
                build.files.insert(path.clone());
                (read(&path), path.display().to_string())
            }
            (None, Some(inline)) => (inline.clone(), format!("{origin} (inline patch)")),
            _ => panic!("{origin}: a patch needs exactly one of path and patch"),
        };
        let operations = match yaml_value(&text, &patch_origin) {
            operations @ Value::Array(_) => operations,
            _ => panic!("{patch_origin}: only RFC 6902 patches are emulated here"),
        };
        let operations: json_patch::Patch = serde_json::from_value(operations)
            .unwrap_or_else(|e| panic!("{patch_origin}: not an RFC 6902 patch: {e}"));
        let target = patch
            .target
            .as_ref()
            .unwrap_or_else(|| panic!("{patch_origin}: an RFC 6902 patch needs a target"));
        let mut matched = 0;
        for (object, _) in &mut build.objects {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let matches = target.kind.as_deref().is_none_or(|k| object["kind"] == k)
                && target
                    .name
                    .as_deref()
                    .is_none_or(|n| object["metadata"]["name"] == n)
                && target.group.as_deref().is_none_or(|g| g == group)
                && target.version.as_deref().is_none_or(|v| v == version)
                && target
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| object["metadata"]["namespace"] == ns);
            if matches {
                json_patch::patch(object, &operations)
                    .unwrap_or_else(|e| panic!("{patch_origin}: does not apply: {e}"));
                matched += 1;
            }
        }
        assert_eq!(
            matched, 1,
            "{patch_origin}: its target must be one object of the build, not {matched}"
        );
    }
}

fn apply_namespace_and_images(origin: &str, kustomization: &Kustomization, build: &mut Build) {
    if let Some(namespace) = &kustomization.namespace {
        for (object, _) in &mut build.objects {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            if !cluster_scoped(&kind) {
                object["metadata"]["namespace"] = Value::String(namespace.clone());
            }
        }
    }

    for image in &kustomization.images {
        let mut matched = 0;
        for (object, _) in &mut build.objects {
            // (pointer_mut: indexing a Value mutably would insert the path.)
            let containers = object
                .pointer_mut("/spec/template/spec/containers")
                .and_then(Value::as_array_mut);
            for container in containers.into_iter().flatten() {
                let reference = container["image"].as_str().unwrap_or_default();
                let name = reference
                    .split('@')
                    .next()
                    .map(|n| match n.rsplit_once(':') {
                        Some((repo, tag)) if !tag.contains('/') => repo,
                        _ => n,
                    })
                    .unwrap_or_default();
                if name != image.name {
                    continue;
                }
                let mut new = image.new_name.clone().unwrap_or_else(|| name.to_owned());
                if let Some(digest) = &image.digest {
                    new = format!("{new}@{digest}");
                } else if let Some(tag) = &image.new_tag {
                    new = format!("{new}:{tag}");
                }
                container["image"] = Value::String(new);
                matched += 1;
            }
        }
        assert!(
            matched > 0,
            "{origin}: image {} matches no container",
            image.name
        );
    }
}

fn build(relative: &str) -> Build {
    kustomize_build(&deploy_dir().join(relative))
}

// ---------------------------------------------------------------------------
// Manifests

/// Every kustomization an operator applies, and the base with each
/// component, built and named.
fn every_build() -> impl Iterator<Item = (String, Build)> {
    KUSTOMIZATIONS
        .iter()
        .map(|relative| (relative.to_string(), build(relative)))
        .chain(COMPONENTS.iter().map(|component| {
            (
                format!("base + {component}"),
                build_with_component(component),
            )
        }))
}

#[test]
fn every_kustomization_builds_and_every_object_validates_against_its_type() {
    for (relative, build) in every_build() {
        assert!(!build.objects.is_empty(), "{relative}: builds nothing");
        let mut names = BTreeSet::new();
        for (object, origin) in &build.objects {
            let object_origin = format!("{relative}: {origin}");
            validate(object, &object_origin);
            let key = (
                object["kind"].to_string(),
                object["metadata"]["namespace"].to_string(),
                object["metadata"]["name"].to_string(),
            );
            assert!(names.insert(key.clone()), "{relative}: {key:?} twice");
            let kind = object["kind"].as_str().unwrap_or_default();
            if !cluster_scoped(kind) {
                assert_eq!(
                    object["metadata"]["namespace"], "podtrace",
                    "{object_origin}: namespace"
                );
            }
        }
    }
}

/// The base, its overlays and components hold only Kubernetes' own kinds:
/// `kubectl apply -k` of an overlay must succeed on a cluster with no CRD
/// installed (#18); what needs the Prometheus Operator is in `monitoring`.
#[test]
fn the_base_and_overlays_need_no_custom_resource_definition() {
    for (relative, build) in every_build().filter(|(relative, _)| relative != "monitoring") {
        for (object, origin) in &build.objects {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let group = api_version.split_once('/').map_or("", |(group, _)| group);
            assert!(
                group.is_empty() || group.ends_with(".k8s.io") || group == "apps",
                "{relative}: {origin}: {api_version} is not a Kubernetes API group"
            );
        }
    }
}

#[test]
fn every_manifest_file_is_applied_by_some_kustomization_and_validates_on_its_own() {
    let mut used = BTreeSet::new();
    for relative in KUSTOMIZATIONS {
        used.extend(build(relative).files);
    }
    for component in COMPONENTS {
        used.extend(build_with_component(component).files);
    }
    let mut pending = vec![deploy_dir()];
    let mut seen = 0;
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !(dir == deploy_dir() && NOT_MANIFESTS.contains(&name.as_str())) {
                    pending.push(path);
                }
                continue;
            }
            if !(name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json")) {
                continue;
            }
            seen += 1;
            assert!(
                used.contains(&path),
                "{}: no kustomization applies it",
                path.display()
            );
            // `kubectl apply -f FILE` works too: each object stands alone.
            if name.ends_with(".yaml") && name != "kustomization.yaml" {
                for object in yaml_documents(&path) {
                    validate(&object, &path.display().to_string());
                }
            }
        }
    }
    assert!(seen >= 10, "only {seen} files under deploy/");
}

/// The capabilities the agent holds, each for a reason given in
/// daemonset.yaml: CAP_SYS_ADMIN because stable kernels before 6.6 updated
/// since July 2025 require it for perf-event uprobes again (from 6.6 the
/// uprobes are multi links, which do not).
const CAPABILITIES: [&str; 5] = [
    "BPF",
    "PERFMON",
    "SYS_ADMIN",
    "SYS_PTRACE",
    "DAC_READ_SEARCH",
];

/// Host paths the agent mounts, read-only, at the same path.
/// The only host path: kernel types. Raw tracepoints and uprobes need no
/// tracefs, and a mount with propagation fails on hosts whose mounts are private.
const HOST_MOUNTS: [&str; 1] = ["/sys/kernel/btf"];

#[test]
fn the_base_daemonset_runs_unprivileged_with_host_pid_its_capabilities_and_read_only_host_mounts() {
    let build = build("base");
    let daemon_set: DaemonSet = build.only("DaemonSet");
    let pod = daemon_set.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_pid, Some(true), "hostPID");
    assert_ne!(pod.host_network, Some(true), "no host network");
    assert_ne!(pod.host_ipc, Some(true), "no host IPC");
    assert_eq!(pod.automount_service_account_token, Some(false));

    let container = the_container(&pod);
    let sc = container
        .security_context
        .as_ref()
        .expect("securityContext");
    assert_ne!(sc.privileged, Some(true), "privileged only in the overlay");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let caps = sc.capabilities.as_ref().expect("capabilities");
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    let expected: BTreeSet<String> = CAPABILITIES.iter().map(|c| (*c).to_owned()).collect();
    assert_eq!(added_capabilities(container), expected);

    let host_paths: BTreeMap<&str, &str> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| Some((v.name.as_str(), v.host_path.as_ref()?.path.as_str())))
        .collect();
    let mut mounted = BTreeSet::new();
    for mount in container.volume_mounts.iter().flatten() {
        assert_eq!(mount.mount_propagation, None, "{} propagates", mount.name);
        if let Some(host_path) = host_paths.get(mount.name.as_str()) {
            assert_eq!(mount.read_only, Some(true), "{host_path} read-only");
            assert_eq!(&mount.mount_path, host_path, "{host_path} at its own path");
            mounted.insert(*host_path);
        }
    }
    assert_eq!(mounted, HOST_MOUNTS.into_iter().collect::<BTreeSet<_>>());
    assert_eq!(host_paths.len(), HOST_MOUNTS.len(), "no other host path");

    let tolerated: BTreeSet<&str> = pod
        .tolerations
        .iter()
        .flatten()
        .filter(|t| t.operator.as_deref() == Some("Exists"))
        .filter_map(|t| t.key.as_deref())
        .collect();
    assert!(tolerated.contains("node-role.kubernetes.io/control-plane"));

    let resources = container.resources.as_ref().expect("resources");
    for bounds in [&resources.requests, &resources.limits] {
        let bounds = bounds.as_ref().expect("requests and limits");
        assert!(bounds.contains_key("cpu") && bounds.contains_key("memory"));
    }

    // The node's name, and the agent's own Pod (which it does not trace),
    // from the downward API.
    for (variable, path) in [("NODE_NAME", "spec.nodeName"), ("POD_UID", "metadata.uid")] {
        let env = container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == variable)
            .expect(variable);
        let field = env
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .unwrap_or_else(|| panic!("{variable} from the downward API"));
        assert_eq!(field.field_path, path);
    }

    let config_map = container
        .env_from
        .iter()
        .flatten()
        .find_map(|e| e.config_map_ref.as_ref())
        .expect("envFrom a ConfigMap");
    build.find("ConfigMap", &config_map.name);
    let account = pod.service_account_name.as_deref().expect("ServiceAccount");
    build.find("ServiceAccount", account);
    assert!(
        container
            .image
            .as_deref()
            .unwrap_or_default()
            .starts_with("ghcr.io/podtrace/podtrace:")
    );
    // The image's entrypoint is podtrace: `podtrace run`.
    assert_eq!(container.command, None);
    assert_eq!(container.args.as_deref(), Some(&["run".to_owned()][..]));
}

/// The lines of the list item `- ITEM` (or `- name: ITEM`) that follows
/// `after` in `text`, and the line before it.
fn line_before_item<'a>(text: &'a str, after: &str, item: &str) -> &'a str {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == after)
        .unwrap_or_else(|| panic!("no `{after}`"));
    let index = lines[start..]
        .iter()
        .position(|l| {
            let l = l.trim();
            l == format!("- {item}") || l == format!("- name: {item}")
        })
        .map(|i| i + start)
        .unwrap_or_else(|| panic!("no item {item} after `{after}`"));
    lines[index - 1].trim()
}

#[test]
fn every_capability_and_host_mount_says_why() {
    let text = read(&deploy_dir().join("base/daemonset.yaml"));
    for capability in CAPABILITIES {
        let before = line_before_item(&text, "add:", capability);
        assert!(before.starts_with('#'), "{capability} has no comment");
    }
    let before = line_before_item(&text, "volumeMounts:", "btf");
    assert!(before.starts_with('#'), "mount btf has no comment");
    for why in [
        "hostPID:",
        "tolerations:",
        "container.apparmor.security.beta.kubernetes.io/podtrace:",
    ] {
        let index = text.find(why).unwrap_or_else(|| panic!("no {why}"));
        let before = text[..index].trim_end().lines().last().unwrap().trim();
        assert!(before.starts_with('#'), "{why} has no comment");
    }
}

/// The environment variables `podtrace run` reads: each flag's `env = "…"`
/// in tracer-user's main.rs, and RUST_LOG for its log filter.
fn variables_podtrace_reads() -> BTreeSet<String> {
    let main = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tracer-user/src/main.rs"));
    let mut variables: BTreeSet<String> = main
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect();
    if main.contains("from_default_env") {
        variables.insert("RUST_LOG".to_owned());
    }
    assert!(
        variables.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{variables:?}"
    );
    variables
}

#[test]
fn every_configmap_sets_only_variables_podtrace_reads_with_values_it_accepts() {
    let readable = variables_podtrace_reads();
    for relative in [
        "base",
        "overlays/tempo",
        "overlays/jaeger",
        "overlays/privileged",
    ] {
        let build = build(relative);
        let config_map: ConfigMap = strict(build.find("ConfigMap", "podtrace"), relative);
        let data = config_map.data.unwrap_or_default();
        for key in data.keys() {
            assert!(
                readable.contains(key),
                "{relative}: podtrace does not read {key}"
            );
        }
        assert!(
            !data.contains_key("NODE_NAME"),
            "{relative}: NODE_NAME comes from spec.nodeName"
        );
        let get = |key: &str| {
            data.get(key)
                .unwrap_or_else(|| panic!("{relative}: {key} unset"))
                .as_str()
        };
        // OtlpProtocolArg in main.rs.
        let protocol = get("PODTRACE_OTLP_PROTOCOL");
        assert!(
            ["grpc", "http"].contains(&protocol),
            "{relative}: {protocol}"
        );
        let endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT");
        let authority = endpoint
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("{relative}: {endpoint}: plaintext http:// only"));
        let port = authority.split('/').next().unwrap().rsplit_once(':');
        let expected_port = if protocol == "grpc" { "4317" } else { "4318" };
        assert_eq!(
            port.map(|(_, p)| p),
            Some(expected_port),
            "{relative}: {endpoint} with {protocol}"
        );
        let timeout: u64 = get("PODTRACE_TRACE_TIMEOUT").parse().unwrap();
        assert!((1..=86_400).contains(&timeout), "{relative}: trace timeout");
        // A clap bool flag from the environment takes true or false only.
        assert!(["true", "false"].contains(&get("PODTRACE_QUIET")));
        let metrics = get("PODTRACE_METRICS_ADDR");
        let metrics: SocketAddr = metrics.parse().unwrap_or_else(|e| {
            panic!("{relative}: PODTRACE_METRICS_ADDR {metrics}: {e} (\"off\" has no probe)")
        });
        assert!(
            metrics.ip().is_unspecified(),
            "{relative}: metrics must listen on the Pod's IP"
        );
        assert!(!get("PODTRACE_CLUSTER_ID").is_empty());
    }
}

#[test]
fn the_metrics_port_is_the_one_podtrace_listens_on_and_the_service_and_podmonitor_scrape_it() {
    let build = build("base");
    let config_map: ConfigMap = build.only("ConfigMap");
    let address: SocketAddr = config_map.data.unwrap()["PODTRACE_METRICS_ADDR"]
        .parse()
        .unwrap();
    let daemon_set: DaemonSet = build.only("DaemonSet");
    let template = daemon_set.spec.unwrap().template;
    let pod_labels = template.metadata.unwrap().labels.unwrap();
    let pod = template.spec.unwrap();
    let container = the_container(&pod);
    let port = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a port named metrics");
    assert_eq!(port.container_port, i32::from(address.port()));
    let probe = container
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref());
    if let Some(probe) = probe {
        assert_eq!(probe.path.as_deref(), Some("/metrics"));
    }

    let service: Service = build.only("Service");
    let service_spec = service.spec.unwrap();
    assert_eq!(service_spec.cluster_ip.as_deref(), Some("None"), "headless");
    for (key, value) in service_spec.selector.unwrap() {
        assert_eq!(pod_labels.get(&key), Some(&value), "Service selector");
    }
    let service_port = &service_spec.ports.unwrap()[0];
    assert_eq!(service_port.port, i32::from(address.port()));

    let monitoring = kustomize_build(&deploy_dir().join("monitoring"));
    let Object::PodMonitor(monitor) = validate(
        monitoring.find("PodMonitor", "podtrace"),
        "monitoring podmonitor.yaml",
    ) else {
        unreachable!()
    };
    for (key, value) in monitor.spec.selector.match_labels.clone().unwrap() {
        assert_eq!(pod_labels.get(&key), Some(&value), "PodMonitor selector");
    }
    let endpoint = &monitor.spec.pod_metrics_endpoints[0];
    assert_eq!(endpoint.port.as_deref(), Some("metrics"));
    assert_eq!(endpoint.path.as_deref(), Some("/metrics"));
    // job="podtrace" in the rules is the value of the pod label jobLabel names.
    let job_label = monitor.spec.job_label.as_deref().expect("jobLabel");
    assert_eq!(
        pod_labels.get(job_label).map(String::as_str),
        Some("podtrace")
    );
    // node="…" in the rules comes from this relabeling.
    assert!(endpoint.relabelings.iter().flatten().any(|r| {
        r.target_label.as_deref() == Some("node")
            && r.source_labels.as_deref()
                == Some(&["__meta_kubernetes_pod_node_name".to_owned()][..])
    }));
    assert_eq!(
        monitor.metadata.namespace.as_deref(),
        daemon_set.metadata.namespace.as_deref()
    );
}

#[test]
fn overlays_point_the_agents_at_a_collector_or_only_make_them_privileged() {
    let base = build("base");
    let base_endpoint =
        base.find("ConfigMap", "podtrace")["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"].clone();
    for (overlay, host) in [("overlays/tempo", "tempo"), ("overlays/jaeger", "jaeger")] {
        let built = build(overlay);
        let endpoint = &built.find("ConfigMap", "podtrace")["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"];
        assert_ne!(endpoint, &base_endpoint, "{overlay}");
        assert!(
            endpoint.as_str().unwrap().contains(host),
            "{overlay}: {endpoint}"
        );
        assert_eq!(
            built.find("DaemonSet", "podtrace"),
            base.find("DaemonSet", "podtrace"),
            "{overlay} changes only the ConfigMap"
        );
    }

    let privileged = build("overlays/privileged");
    let daemon_set: DaemonSet = privileged.only("DaemonSet");
    let pod = daemon_set.spec.unwrap().template.spec.unwrap();
    let sc = the_container(&pod).security_context.clone().unwrap();
    assert_eq!(sc.privileged, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    // Nothing else differs from the base.
    let without_security_context = |build: &Build| {
        let mut daemon_set = build.find("DaemonSet", "podtrace").clone();
        daemon_set["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("securityContext");
        daemon_set
    };
    assert_eq!(
        without_security_context(&privileged),
        without_security_context(&base)
    );
}

// ---------------------------------------------------------------------------
// Metrics: what the agent exports, from its own Metrics type

/// What podtrace's `/metrics` holds once every family has a sample.
struct Exported {
    /// Sample names (`_bucket`, `_sum`, `_count`, `_total` included).
    series: BTreeSet<String>,
    /// Families (`# TYPE` names).
    families: BTreeSet<String>,
    /// Label names the agent puts on its samples.
    labels: BTreeSet<String>,
    phases: BTreeSet<String>,
    reasons: BTreeSet<String>,
}

fn exported() -> Exported {
    let metrics = Metrics::default();
    let trace = TraceId::for_pod("deploy-manifests", "uid-1");
    metrics.on_spans(&[Span {
        trace_id: trace,
        span_id: SpanId::of(trace, &SpanKey::Root),
        parent_span_id: None,
        name: name::pod_create("default", "web"),
        kind: SpanKind::Internal,
        start_unix_ns: 1_000_000_000,
        end_unix_ns: 2_000_000_000,
        attributes: vec![(attr::TRACE_COMPLETE.to_owned(), AttributeValue::Bool(true))],
        status: SpanStatus::Unset,
        links: Vec::new(),
    }]);
    metrics.set_kernel_drops(&DropCounts::default());
    let text = metrics.encode();
    let mut exported = Exported {
        series: BTreeSet::new(),
        families: BTreeSet::new(),
        labels: BTreeSet::new(),
        phases: Phase::ALL.iter().map(|p| p.name().to_owned()).collect(),
        reasons: DropReason::ALL
            .iter()
            .map(|r| r.name().to_owned())
            .collect(),
    };
    for line in text.lines() {
        if let Some(family) = line.strip_prefix("# TYPE ") {
            exported
                .families
                .insert(family.split(' ').next().unwrap().to_owned());
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap();
        exported.series.insert(line[..end].to_owned());
        if let Some(labels) = line[end..].strip_prefix('{') {
            let labels = labels.split('}').next().unwrap();
            for pair in labels.split(',') {
                exported
                    .labels
                    .insert(pair.split('=').next().unwrap().to_owned());
            }
        }
    }
    for family in [
        "podtrace_pod_phase_duration_seconds",
        "podtrace_pods_traced",
        "podtrace_incomplete_traces",
        "podtrace_kernel_drops",
        "podtrace_export_failures",
        "podtrace_otlp_spans_dropped",
        "podtrace_process_cpu_seconds",
        "podtrace_process_resident_memory_bytes",
    ] {
        assert!(exported.families.contains(family), "{family} in\n{text}");
    }
    exported
}

/// Labels Prometheus adds to every series it scrapes through the PodMonitor
/// (the Prometheus Operator's target labels, and `node` from its
/// relabeling).
const TARGET_LABELS: [&str; 7] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
    "node",
];

/// Series Prometheus makes itself for every target.
const PROMETHEUS_SERIES: [&str; 1] = ["up"];

/// What the recording rules produce: name → label name → values set by
/// the rule's `labels`.
type Recorded = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn selectors(expr: &Expr) -> Vec<VectorSelector> {
    struct Collect(Vec<VectorSelector>);
    impl ExprVisitor for Collect {
        type Error = ();
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, ()> {
            match expr {
                Expr::VectorSelector(vs) => self.0.push(vs.clone()),
                Expr::MatrixSelector(ms) => self.0.push(ms.vs.clone()),
                _ => {}
            }
            Ok(true)
        }
    }
    let mut collect = Collect(Vec::new());
    let _ = walk_expr(&mut collect, expr);
    collect.0
}

/// Every `histogram_quantile` reads `_bucket` series aggregated `by (le…)`.
fn check_histogram_quantiles(expr: &Expr, origin: &str) {
    struct Quantiles<'a>(&'a str);
    impl ExprVisitor for Quantiles<'_> {
        type Error = ();
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, ()> {
            let Expr::Call(call) = expr else {
                return Ok(true);
            };
            if call.func.name != "histogram_quantile" {
                return Ok(true);
            }
            let inner = &call.args.args[1];
            for selector in selectors(inner) {
                let name = selector.name.unwrap_or_default();
                assert!(name.contains("_bucket"), "{}: quantile of {name}", self.0);
            }
            if let Expr::Aggregate(aggregate) = inner.as_ref() {
                match &aggregate.modifier {
                    Some(LabelModifier::Include(labels)) => assert!(
                        labels.labels.iter().any(|l| l == "le"),
                        "{}: aggregation must keep le",
                        self.0
                    ),
                    other => panic!("{}: aggregate by (le, …), not {other:?}", self.0),
                }
            }
            Ok(true)
        }
    }
    let _ = walk_expr(&mut Quantiles(origin), expr);
}

/// The values a matcher allows, when it names them: `a` for `="a"`,
/// `a`, `b` for `=~"a|b"`; None for patterns and Grafana variables.
fn named_values(op: &MatchOp, value: &str) -> Option<Vec<String>> {
    let plain = |v: &str| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if value.contains(GRAFANA_VARIABLE) {
        return None;
    }
    match op {
        MatchOp::Equal => Some(vec![value.to_owned()]),
        MatchOp::Re(_) if value.split('|').all(plain) => {
            Some(value.split('|').map(str::to_owned).collect())
        }
        _ => None,
    }
}

/// Parses `expr` and checks every series and label it names.
fn check_promql(expr: &str, origin: &str, exported: &Exported, recorded: &Recorded) -> Expr {
    let parsed =
        promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{origin}: {expr}: {e}"));
    check_histogram_quantiles(&parsed, origin);
    for selector in selectors(&parsed) {
        let name = selector
            .name
            .clone()
            .unwrap_or_else(|| panic!("{origin}: a selector without a metric name"));
        let known = exported.series.contains(&name)
            || recorded.contains_key(&name)
            || PROMETHEUS_SERIES.contains(&name.as_str());
        assert!(known, "{origin}: {name} is neither exported nor recorded");
        for matcher in &selector.matchers.matchers {
            let label = matcher.name.as_str();
            let recorded_values = recorded.get(&name).and_then(|labels| labels.get(label));
            assert!(
                exported.labels.contains(label)
                    || TARGET_LABELS.contains(&label)
                    || recorded_values.is_some(),
                "{origin}: {name} has no label {label}"
            );
            let Some(values) = named_values(&matcher.op, &matcher.value) else {
                continue;
            };
            let allowed = match label {
                "phase" => Some(&exported.phases),
                "reason" => Some(&exported.reasons),
                _ => recorded_values,
            };
            for value in values {
                if let Some(allowed) = allowed {
                    assert!(
                        allowed.contains(&value),
                        "{origin}: {label}=\"{value}\" is never produced ({allowed:?})"
                    );
                }
                if label == "job" {
                    assert_eq!(value, "podtrace", "{origin}: the PodMonitor's job");
                }
            }
        }
    }
    parsed
}

// ---------------------------------------------------------------------------
// Rules

fn rules() -> PrometheusRule {
    let path = deploy_dir().join("monitoring/prometheusrule.yaml");
    let documents = yaml_documents(&path);
    assert_eq!(documents.len(), 1);
    match validate(&documents[0], &path.display().to_string()) {
        Object::PrometheusRule(rule) => *rule,
        other => panic!("not a PrometheusRule: {other:?}"),
    }
}

fn recorded(rules: &PrometheusRule) -> Recorded {
    let mut recorded = Recorded::new();
    for rule in rules.spec.groups.iter().flat_map(|g| &g.rules) {
        if let Some(record) = &rule.record {
            let labels = recorded.entry(record.clone()).or_default();
            for (key, value) in rule.labels.iter().flatten() {
                labels.entry(key.clone()).or_default().insert(value.clone());
            }
        }
    }
    recorded
}

fn alert<'a>(rules: &'a PrometheusRule, name: &str) -> &'a Rule {
    rules
        .spec
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .find(|r| r.alert.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no alert {name}"))
}

/// An alert's `SELECTOR > THRESHOLD`: the threshold and the selector's
/// equality matchers.
fn threshold(expr: &Expr, origin: &str) -> (f64, BTreeMap<String, String>, Expr) {
    let Expr::Binary(binary) = expr else {
        panic!("{origin}: not a comparison with a threshold");
    };
    assert!(
        binary.op.is_comparison_operator(),
        "{origin}: not a comparison"
    );
    let Expr::NumberLiteral(number) = binary.rhs.as_ref() else {
        panic!("{origin}: the right side is not a number");
    };
    let matchers = selectors(&binary.lhs)
        .iter()
        .flat_map(|s| s.matchers.matchers.clone())
        .filter(|m| matches!(m.op, MatchOp::Equal))
        .map(|m| (m.name, m.value))
        .collect();
    (number.val, matchers, binary.lhs.as_ref().clone())
}

#[test]
fn every_rule_parses_and_queries_only_what_the_agent_exports_or_the_rules_record() {
    let rules = rules();
    let exported = exported();
    let recorded = recorded(&rules);
    let mut groups = BTreeSet::new();
    for group in &rules.spec.groups {
        assert!(groups.insert(&group.name), "group {} twice", group.name);
        for duration in [&group.interval, &group.query_offset].into_iter().flatten() {
            check_duration(duration, &group.name);
        }
        assert!(!group.rules.is_empty(), "{}: empty", group.name);
        for rule in &group.rules {
            let name = rule.alert.as_ref().or(rule.record.as_ref());
            let origin = format!("{}/{}", group.name, name.map_or("?", |n| n.as_str()));
            assert!(
                rule.alert.is_some() != rule.record.is_some(),
                "{origin}: exactly one of alert and record"
            );
            let parsed = check_promql(&rule.expr, &origin, &exported, &recorded);
            if let Some(record) = &rule.record {
                // Recorded buckets keep `le`, or quantiles of them are wrong.
                if let (true, Expr::Aggregate(aggregate)) = (record.contains("_bucket"), &parsed) {
                    let keeps_le = matches!(
                        &aggregate.modifier,
                        Some(LabelModifier::Include(labels)) if labels.labels.iter().any(|l| l == "le")
                    );
                    assert!(keeps_le, "{origin}: aggregate buckets by (le, …)");
                }
                assert_eq!(
                    record.matches(':').count(),
                    2,
                    "{origin}: level:metric:operations"
                );
                assert!(
                    rule.for_.is_none() && rule.annotations.is_none(),
                    "{origin}: a recording rule has no for or annotations"
                );
            }
        }
    }
}

#[test]
fn every_alert_has_a_for_a_severity_a_source_and_a_numeric_threshold() {
    let rules = rules();
    let mut alerts = 0;
    for rule in rules.spec.groups.iter().flat_map(|g| &g.rules) {
        let Some(name) = &rule.alert else { continue };
        alerts += 1;
        let for_ = rule
            .for_
            .as_deref()
            .unwrap_or_else(|| panic!("{name}: no for"));
        check_duration(for_, name);
        if let Some(keep) = &rule.keep_firing_for {
            check_duration(keep, name);
        }
        let labels = rule.labels.clone().unwrap_or_default();
        let severity = labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "{name}: severity {severity:?}"
        );
        let annotations = rule.annotations.clone().unwrap_or_default();
        for key in ["summary", "description", "source"] {
            assert!(
                annotations.get(key).is_some_and(|v| !v.trim().is_empty()),
                "{name}: no {key} annotation"
            );
        }
        assert!(annotations["source"].starts_with("https://"), "{name}");
        let parsed = promql_parser::parser::parse(&rule.expr).unwrap();
        threshold(&parsed, name);
    }
    assert!(alerts >= 6, "{alerts} alerts");
}

#[test]
fn latency_alerts_keep_the_published_thresholds() {
    let rules = rules();
    // alert, phase, quantile, threshold in seconds, where the number is from
    for (name, phase, quantile, seconds, source) in [
        (
            "PodtracePodStartupLatencyHigh",
            "end_to_end",
            "0.99",
            5.0,
            "https://github.com/kubernetes/community/blob/master/sig-scalability/slos/pod_startup_latency.md",
        ),
        (
            "PodtraceEtcdWalFsyncSlow",
            "wal_fsync",
            "0.99",
            0.010,
            "https://etcd.io/docs/",
        ),
        (
            "PodtraceEtcdCommitSlow",
            "etcd_commit",
            "0.99",
            0.025,
            "https://etcd.io/docs/",
        ),
    ] {
        let rule = alert(&rules, name);
        let parsed = promql_parser::parser::parse(&rule.expr).unwrap();
        let (value, matchers, _) = threshold(&parsed, name);
        assert!((value - seconds).abs() < 1e-9, "{name}: {value} s");
        assert_eq!(
            matchers.get("phase").map(String::as_str),
            Some(phase),
            "{name}"
        );
        assert_eq!(
            matchers.get("quantile").map(String::as_str),
            Some(quantile),
            "{name}"
        );
        let cited = &rule.annotations.as_ref().unwrap()["source"];
        assert!(cited.starts_with(source), "{name}: source {cited}");
    }
}

/// The reasons in a `reason=~"a|b"` matcher of `expr`.
fn reasons_matched(expr: &Expr) -> Option<BTreeSet<String>> {
    selectors(expr)
        .iter()
        .flat_map(|s| s.matchers.matchers.clone())
        .find(|m| m.name == "reason" && matches!(m.op, MatchOp::Re(_)))
        .map(|m| m.value.split('|').map(str::to_owned).collect())
}

fn reasons_that_lose_events() -> BTreeSet<String> {
    DropReason::ALL
        .iter()
        .filter(|r| r.loses_events())
        .map(|r| r.name().to_owned())
        .collect()
}

#[test]
fn the_drop_alert_watches_exactly_the_reasons_that_lose_events() {
    let rules = rules();
    let rule = alert(&rules, "PodtraceDroppingEvents");
    let parsed = promql_parser::parser::parse(&rule.expr).unwrap();
    assert_eq!(
        reasons_matched(&parsed),
        Some(reasons_that_lose_events()),
        "{}",
        rule.expr
    );
    let rule = alert(&rules, "PodtraceOtlpSpansDropped");
    assert!(rule.expr.contains("podtrace_otlp_spans_dropped"));
    let rule = alert(&rules, "PodtraceTracesIncomplete");
    assert!(rule.expr.contains("podtrace_incomplete_traces_total"));
}

/// Alerts evaluated by Prometheus's own rule engine on made-up series:
/// which fire and which stay quiet (healthy nodes, truncations, an agent
/// restart resetting its totals, an incomplete trace gone stale).
const PROMTOOL_TEST: &str = r#"rule_files: [rules.yaml]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      # Pods starting in (4.096, 8.192] s: p99 ~8.2 s, above the 5 s SLO.
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="w1",phase="end_to_end",le="4.096"}'
        values: '0+0x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="w1",phase="end_to_end",le="8.192"}'
        values: '0+5x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="w1",phase="end_to_end",le="+Inf"}'
        values: '0+5x80'
      # WAL fsyncs in (8, 16] ms on cp1 (slow), at most 8 ms on cp2.
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp1",phase="wal_fsync",le="0.008"}'
        values: '0+0x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp1",phase="wal_fsync",le="0.016"}'
        values: '0+50x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp1",phase="wal_fsync",le="+Inf"}'
        values: '0+50x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp2",phase="wal_fsync",le="0.008"}'
        values: '0+50x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp2",phase="wal_fsync",le="0.016"}'
        values: '0+50x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp2",phase="wal_fsync",le="+Inf"}'
        values: '0+50x80'
      # Create writes handled in (16, 32] ms on cp1: above 25 ms.
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp1",phase="etcd_commit",le="0.016"}'
        values: '0+0x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp1",phase="etcd_commit",le="0.032"}'
        values: '0+5x80'
      - series: 'podtrace_pod_phase_duration_seconds_bucket{job="podtrace",node="cp1",phase="etcd_commit",le="+Inf"}'
        values: '0+5x80'
      # Events lost from 10 min on (w1); fields cut by design (w2); an
      # agent restart resetting its totals (w3).
      - series: 'podtrace_kernel_drops{job="podtrace",node="w1",reason="ring_buffer_full"}'
        values: '0x20 0+10x60'
      - series: 'podtrace_kernel_drops{job="podtrace",node="w2",reason="data_truncated"}'
        values: '0+100x80'
      - series: 'podtrace_kernel_drops{job="podtrace",node="w3",reason="ring_buffer_full"}'
        values: '100x20 0x60'
      - series: 'podtrace_otlp_spans_dropped{job="podtrace",node="w4"}'
        values: '0x40 0+7x40'
      - series: 'podtrace_export_failures_total{job="podtrace",node="w5"}'
        values: '0x20 1x60'
      # One incomplete trace at 10 min.
      - series: 'podtrace_incomplete_traces_total{job="podtrace",node="cp1"}'
        values: '0x20 1x60'
      - series: 'up{job="podtrace",node="w9"}'
        values: '0x80'
      - series: 'up{job="podtrace",node="w1"}'
        values: '1x80'
    promql_expr_test:
      - expr: count by (alertname, node, reason, phase) (ALERTS{alertstate="firing"})
        eval_time: 20m
        exp_samples:
          - labels: '{alertname="PodtracePodStartupLatencyHigh", phase="end_to_end"}'
            value: 1
          - labels: '{alertname="PodtraceEtcdWalFsyncSlow", node="cp1", phase="wal_fsync"}'
            value: 1
          - labels: '{alertname="PodtraceEtcdCommitSlow", node="cp1", phase="etcd_commit"}'
            value: 1
          - labels: '{alertname="PodtraceDroppingEvents", node="w1", reason="ring_buffer_full"}'
            value: 1
          - labels: '{alertname="PodtraceExportFailures", node="w5"}'
            value: 1
          - labels: '{alertname="PodtraceTracesIncomplete", node="cp1"}'
            value: 1
          - labels: '{alertname="PodtraceAgentDown", node="w9"}'
            value: 1
      - expr: count by (alertname, node, reason, phase) (ALERTS{alertstate="firing"})
        eval_time: 35m
        exp_samples:
          - labels: '{alertname="PodtracePodStartupLatencyHigh", phase="end_to_end"}'
            value: 1
          - labels: '{alertname="PodtraceEtcdWalFsyncSlow", node="cp1", phase="wal_fsync"}'
            value: 1
          - labels: '{alertname="PodtraceEtcdCommitSlow", node="cp1", phase="etcd_commit"}'
            value: 1
          - labels: '{alertname="PodtraceDroppingEvents", node="w1", reason="ring_buffer_full"}'
            value: 1
          - labels: '{alertname="PodtraceOtlpSpansDropped", node="w4"}'
            value: 1
          - labels: '{alertname="PodtraceAgentDown", node="w9"}'
            value: 1
      - expr: phase_quantile:podtrace_pod_phase_duration_seconds:histogram_quantile{quantile="0.99"}
        eval_time: 20m
        exp_samples:
          - labels: 'phase_quantile:podtrace_pod_phase_duration_seconds:histogram_quantile{phase="end_to_end", quantile="0.99"}'
            value: 8.15104
          - labels: 'phase_quantile:podtrace_pod_phase_duration_seconds:histogram_quantile{phase="wal_fsync", quantile="0.99"}'
            value: 0.01584
          - labels: 'phase_quantile:podtrace_pod_phase_duration_seconds:histogram_quantile{phase="etcd_commit", quantile="0.99"}'
            value: 0.03184
"#;

/// promtool (`$PROMTOOL`, or on PATH; Debian's `prometheus` package has it).
fn promtool() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PROMTOOL") {
        return Some(PathBuf::from(path));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("promtool"))
        .find(|path| path.is_file())
}

#[test]
fn promtool_loads_the_rules_and_the_alerts_fire_only_when_they_should() {
    let Some(promtool) = promtool() else {
        eprintln!(
            "skipped: no promtool (set PROMTOOL, or apt-get install prometheus); the rules were \
             still parsed by promql-parser"
        );
        return;
    };
    let path = deploy_dir().join("monitoring/prometheusrule.yaml");
    let rule = &yaml_documents(&path)[0];
    let work = tempfile::tempdir().unwrap();
    let groups = serde_json::json!({ "groups": rule["spec"]["groups"] });
    fs::write(
        work.path().join("rules.yaml"),
        serde_norway::to_string(&groups).unwrap(),
    )
    .unwrap();
    fs::write(work.path().join("test.yaml"), PROMTOOL_TEST).unwrap();
    for args in [
        &["check", "rules", "rules.yaml"][..],
        &["test", "rules", "test.yaml"],
    ] {
        let output = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(work.path())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
        assert!(
            output.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

// ---------------------------------------------------------------------------
// Dashboard

/// What Grafana's variables become in the PromQL checked here.
const GRAFANA_VARIABLE: &str = "grafana_variable";

fn dashboard() -> Value {
    let path = deploy_dir().join("monitoring/grafana-dashboard.json");
    serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

/// `expr` with Grafana's variables replaced so that it parses as PromQL.
fn substitute_grafana_variables(expr: &str, variables: &[String]) -> String {
    let mut expr = expr.to_owned();
    for interval in ["$__rate_interval", "$__interval", "$__range"] {
        expr = expr.replace(interval, "5m");
    }
    for variable in variables {
        expr = expr
            .replace(&format!("${{{variable}}}"), GRAFANA_VARIABLE)
            .replace(&format!("${variable}"), GRAFANA_VARIABLE);
    }
    assert!(!expr.contains('$'), "an unknown variable in {expr}");
    expr
}

#[test]
fn the_dashboard_queries_only_exported_series_every_panel_has_a_data_source_and_latency_panels_show_exemplars()
 {
    let dashboard = dashboard();
    let exported = exported();
    let recorded = recorded(&rules());
    for key in ["title", "uid"] {
        assert!(dashboard[key].is_string(), "{key}");
    }
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);

    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    let names: Vec<String> = variables
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    let data_source_variable = |name: &str, plugin: &str| {
        let variable = variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no {name} variable"));
        assert_eq!(variable["type"], "datasource", "{name}");
        assert_eq!(variable["query"], plugin, "{name}");
    };
    data_source_variable("datasource", "prometheus");
    data_source_variable("tempo", "tempo");
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["definition"].as_str().unwrap();
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {query}"));
        let (metric, label) = inner.split_once(", ").unwrap();
        assert!(exported.series.contains(metric), "{query}");
        assert!(
            exported.labels.contains(label) || TARGET_LABELS.contains(&label),
            "{query}"
        );
    }

    let mut ids = BTreeSet::new();
    let mut used = String::new();
    let mut exemplar_panels = 0;
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "a panel without a title");
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id twice"
        );
        let grid = &panel["gridPos"];
        assert!(grid["w"].as_u64().unwrap() <= 24 && grid["h"].as_u64().unwrap() > 0);
        let kind = panel["type"].as_str().unwrap();
        if kind == "row" {
            continue; // rows group panels; they query nothing
        }
        assert!(
            ["stat", "timeseries", "bargauge", "heatmap", "table"].contains(&kind),
            "{title}: panel type {kind}"
        );
        let source = &panel["datasource"];
        let (plugin, uid) = (source["type"].as_str(), source["uid"].as_str());
        assert!(
            matches!(
                (plugin, uid),
                (Some("prometheus"), Some("${datasource}")) | (Some("tempo"), Some("${tempo}"))
            ),
            "{title}: datasource {source}"
        );
        if let Some(repeat) = panel["repeat"].as_str() {
            assert!(
                names.iter().any(|n| n == repeat),
                "{title}: repeat {repeat}"
            );
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let target_source = &target["datasource"];
            assert!(
                target_source.is_null() || target_source == source,
                "{title}: a query on another data source"
            );
            if plugin == Some("tempo") {
                assert_eq!(target["queryType"], "traceql", "{title}");
                let query = target["query"].as_str().unwrap();
                assert!(query.contains(attr::TRACE_COMPLETE), "{title}");
                continue;
            }
            let expr = target["expr"].as_str().expect("expr");
            used.push_str(expr);
            let origin = format!("panel {title}");
            let substituted = substitute_grafana_variables(expr, &names);
            check_promql(&substituted, &origin, &exported, &recorded);
            let latency = expr.contains("podtrace_pod_phase_duration_seconds_bucket");
            if latency && ["timeseries", "heatmap"].contains(&kind) {
                assert_eq!(target["exemplar"], true, "{title}: exemplars off");
                exemplar_panels += 1;
            }
            if let Some(reasons) =
                reasons_matched(&promql_parser::parser::parse(&substituted).unwrap())
            {
                assert_eq!(reasons, reasons_that_lose_events(), "{title}");
            }
        }
    }
    assert!(
        exemplar_panels >= 3,
        "{exemplar_panels} latency queries with exemplars"
    );
    for family in &exported.families {
        assert!(
            used.contains(family.as_str()),
            "the dashboard never shows {family}"
        );
    }
}

/// The Pod template's annotations and its Pod-level securityContext.
fn apparmor_of(build: &Build) -> (Option<String>, Option<Value>) {
    let daemon_set = build.find("DaemonSet", "podtrace");
    let template = &daemon_set["spec"]["template"];
    let annotation = template["metadata"]["annotations"]
        ["container.apparmor.security.beta.kubernetes.io/podtrace"]
        .as_str()
        .map(str::to_owned);
    let field = template["spec"]["securityContext"]
        .get("appArmorProfile")
        .cloned();
    (annotation, field)
}

#[test]
fn the_base_uses_no_field_newer_than_kubernetes_1_28_and_the_apparmor_component_swaps_in_the_field()
{
    // appArmorProfile exists from 1.30; a 1.28 or 1.29 API server refuses
    // the whole object over it (strict decoding: unknown field).
    let base = build("base");
    for (object, origin) in &base.objects {
        let text = object.to_string();
        assert!(
            !text.contains("appArmorProfile"),
            "{origin}: appArmorProfile is 1.30+"
        );
    }
    assert_eq!(apparmor_of(&base), (Some("unconfined".to_owned()), None));
    let with_field = build_with_component("components/apparmor-field");
    assert_eq!(
        apparmor_of(&with_field),
        (None, Some(serde_json::json!({ "type": "Unconfined" })))
    );
}

#[test]
fn cap_sys_resource_comes_only_with_the_memlock_component() {
    let added = |build: &Build| {
        let daemon_set: DaemonSet = build.only("DaemonSet");
        added_capabilities(the_container(
            &daemon_set.spec.unwrap().template.spec.unwrap(),
        ))
    };
    let base = added(&build("base"));
    assert!(!base.contains("SYS_RESOURCE"));
    let mut expected = base.clone();
    expected.insert("SYS_RESOURCE".to_owned());
    assert_eq!(added(&build_with_component("components/memlock")), expected);
}
