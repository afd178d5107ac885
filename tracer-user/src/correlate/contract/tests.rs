use std::path::{Path, PathBuf};

use super::*;
use crate::correlate::span::{SpanId, SpanKind, SpanStatus, TraceId};

fn span(name: &str, parent: bool, attributes: &[(&str, &str)]) -> Span {
    Span {
        trace_id: TraceId([1; 16]),
        span_id: SpanId([2; 8]),
        parent_span_id: parent.then_some(SpanId([3; 8])),
        name: name.to_owned(),
        kind: SpanKind::Internal,
        start_unix_ns: 1,
        end_unix_ns: 2,
        attributes: attributes
            .iter()
            .map(|(key, value)| crate::correlate::pod::string_attribute(key, value))
            .collect(),
        status: SpanStatus::Unset,
        links: Vec::new(),
    }
}

#[test]
fn each_name_built_reads_back_as_what_it_is() {
    let route = "/api/v1/namespaces/{namespace}/pods/{name}/status";
    let request = [
        (attr::HTTP_REQUEST_METHOD, "PATCH"),
        (attr::HTTP_ROUTE, route),
    ];
    let runc = [(attr::PROCESS_EXECUTABLE_NAME, "runc")];
    let cases = [
        (
            span(&name::pod_create("ns", "web"), false, &[]),
            What::CreationRoot,
        ),
        (
            span(
                &name::pod_create_not_stored("ns", "web", "dry run"),
                false,
                &[],
            ),
            What::CreationRoot,
        ),
        (
            span(&name::pod_delete("ns", "web"), false, &[]),
            What::DeletionRoot,
        ),
        // Only a root is a root.
        (span(&name::pod_delete("ns", "web"), true, &[]), What::Other),
        (span(&name::node("node-a"), true, &[]), What::Node),
        (
            span(name::APISERVER_POD_CREATE, true, &[]),
            What::ApiserverPodCreate,
        ),
        (
            span(name::APISERVER_ADMISSION_MUTATING, true, &[]),
            What::Admission,
        ),
        (
            span(name::APISERVER_ADMISSION_VALIDATING, true, &[]),
            What::Admission,
        ),
        (span(name::SCHEDULER_QUEUE, true, &[]), What::SchedulerQueue),
        (
            span(name::SCHEDULER_CYCLE, true, &[]),
            What::SchedulingCycle,
        ),
        (
            span(name::KUBELET_DISPATCH, true, &[]),
            What::KubeletDispatch,
        ),
        (
            span(name::KUBELET_VOLUME_WAIT, true, &[]),
            What::KubeletVolumeWait,
        ),
        (span(name::ETCD_WAL, true, &[]), What::EtcdWal),
        (
            span(&name::client_request("PATCH", route), true, &request),
            What::ApiRequest,
        ),
        (
            span(&name::apiserver_request("PATCH", route), true, &request),
            What::ApiRequest,
        ),
        // A call inside the request repeats its attributes; it is not it.
        (
            span(name::APISERVER_STATUS_UPDATE, true, &request),
            What::Other,
        ),
        (
            span(&name::runtime("runc", "kill"), true, &runc),
            What::Runtime {
                executable: "runc",
                subcommand: "kill",
            },
        ),
        (
            span(&name::container_start("sh"), true, &[]),
            What::ContainerStart,
        ),
        (
            span(&name::container_exit("sh"), true, &[]),
            What::ContainerExit,
        ),
        (
            span(
                &name::cni("ptp"),
                true,
                &[(attr::PROCESS_EXECUTABLE_NAME, "ptp")],
            ),
            What::Other,
        ),
    ];
    for (span, what) in &cases {
        assert_eq!(What::of(span), *what, "{}", span.name);
    }
    assert!(What::ApiserverPodCreate.is_api_request() && !What::Node.is_api_request());
}

#[test]
fn a_pod_change_reads_back_as_written() {
    for change in [
        PodChange::Created,
        PodChange::BoundTo("node-a".to_owned()),
        PodChange::Status("Running".to_owned()),
        PodChange::Updated,
        PodChange::Deleted,
    ] {
        let written = span(
            "etcdserverpb.KV/Txn",
            true,
            &[(attr::K8S_POD_CHANGE, &change.to_attribute())],
        );
        assert_eq!(PodChange::of(&written), Some(change));
    }
    assert_eq!(
        PodChange::from_attribute("bound to node-a")
            .unwrap()
            .to_attribute(),
        "bound to node-a"
    );
    assert_eq!(PodChange::from_attribute("moved"), None);
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Every key and fixed name as a literal spells it.
fn spelled_whole() -> Vec<String> {
    attr::ATTRIBUTES
        .iter()
        .chain(name::FIXED_NAMES)
        .map(|(text, _)| format!("\"{text}\""))
        .collect()
}

/// What a literal of the contract's looks like in source: a whole key
/// or fixed name, or the fixed start of a name that varies.
fn spelled_out() -> Vec<String> {
    let mut quoted = spelled_whole();
    quoted.extend(
        [
            name::pod_create("", ""),
            name::pod_delete("", ""),
            name::node(""),
            name::container_start(""),
            name::container_exit(""),
            name::cni(""),
            name::etcd_forward(""),
            name::etcd_replicate(""),
            name::apiserver_webhook(""),
            name::apiserver_storage("", ""),
        ]
        .iter()
        .map(|start| format!("\"{}", start.trim_end_matches('/').trim_end()))
        .map(|start| format!("{start} ")),
    );
    quoted
}

#[test]
fn no_source_file_spells_out_a_name_or_key_of_the_contract() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 50, "{files:?}");
    let literals = spelled_out();
    let mut found = Vec::new();
    for file in files.iter().filter(|file| {
        !file.starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/correlate/contract"))
    }) {
        let text = std::fs::read_to_string(file).unwrap();
        for literal in &literals {
            if text.contains(literal.as_str()) {
                found.push(format!("{}: {literal}", file.display()));
            }
        }
    }
    // The integration tests read exported spans back: they use the
    // contract too (whole keys and fixed names; their prose may start like
    // a name that varies).
    let mut tests = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests"),
        &mut tests,
    );
    assert!(tests.len() > 10, "{tests:?}");
    let whole = spelled_whole();
    for file in &tests {
        let text = std::fs::read_to_string(file).unwrap();
        for literal in &whole {
            if text.contains(literal.as_str()) {
                found.push(format!("{}: {literal}", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "use correlate::contract:\n{}",
        found.join("\n")
    );
}

/// The reference users read: docs/spans.md.
fn reference() -> String {
    let mut text = String::from(
        "# Spans and attributes\n\n\
         Every span name and attribute key podtrace exports. Generated from\n\
         `tracer-user/src/correlate/contract/mod.rs` (the test\n\
         `correlate::contract::tests::docs_list_every_name_and_attribute` keeps them equal;\n\
         `PODTRACE_WRITE_DOCS=1 cargo test -p tracer-user --lib contract` rewrites this file).\n\n\
         ## Span names\n\n| name | what it is |\n|---|---|\n",
    );
    for (name, what) in name::FIXED_NAMES.iter().chain(name::PATTERNS) {
        text.push_str(&format!("| `{name}` | {} |\n", what.trim()));
    }
    text.push_str("\n## Attributes\n\n| key | what it holds |\n|---|---|\n");
    for (key, what) in attr::ATTRIBUTES {
        text.push_str(&format!("| `{key}` | {} |\n", what.trim()));
    }
    text
}

#[test]
fn docs_list_every_name_and_attribute() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/spans.md");
    if std::env::var_os("PODTRACE_WRITE_DOCS").is_some() {
        std::fs::write(&path, reference()).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == reference(),
        "docs/spans.md is not the contract's reference: PODTRACE_WRITE_DOCS=1 cargo test -p tracer-user --lib contract"
    );
}
