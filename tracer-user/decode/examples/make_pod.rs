//! Writes the Pod fixtures of `testdata/`: a v1.Pod in the `k8s\0` protobuf
//! envelope exactly as kube-apiserver stores it in etcd, and the same Pod as
//! JSON. Also prints the envelope as a Go-quoted string for `etcdctl txn`.
//!
//! `make_pod OUT_DIR`

use k8s_pb::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;

fn main() -> std::io::Result<()> {
    let Some(out_dir) = std::env::args().nth(1) else {
        eprintln!("usage: make_pod OUT_DIR");
        std::process::exit(2);
    };
    let pod = Pod {
        metadata: Some(ObjectMeta {
            name: Some("web-7d4b9".into()),
            generate_name: Some("web-".into()),
            namespace: Some("default".into()),
            uid: Some("3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71".into()),
            creation_timestamp: Some(Time {
                seconds: Some(1_764_500_000),
                nanos: Some(0),
            }),
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: Some("web".into()),
                image: Some("busybox:1.36".into()),
                ..Default::default()
            }],
            restart_policy: Some("Always".into()),
            scheduler_name: Some("default-scheduler".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            qos_class: Some("BestEffort".into()),
            ..Default::default()
        }),
    };
    // apiserver's protobuf serializer: the 4-byte magic, then runtime.Unknown
    // with apiVersion/kind set and contentEncoding/contentType present but empty.
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
        }),
        raw: Some(pod.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut envelope = b"k8s\0".to_vec();
    envelope.extend(unknown.encode_to_vec());
    std::fs::write(format!("{out_dir}/pod-web-7d4b9.k8spb"), &envelope)?;

    let json = serde_json::json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": "web-7d4b9", "generateName": "web-", "namespace": "default",
            "uid": "3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71",
            "creationTimestamp": "2025-11-30T10:53:20Z", "labels": {"app": "web"}
        },
        "spec": {"containers": [{"name": "web", "image": "busybox:1.36"}],
                 "restartPolicy": "Always", "schedulerName": "default-scheduler"},
        "status": {"phase": "Pending", "qosClass": "BestEffort"}
    });
    std::fs::write(format!("{out_dir}/pod-web-7d4b9.json"), format!("{json}\n"))?;

    let quoted: String = envelope
        .iter()
        .map(|&b| match b {
            b'"' | b'\\' => format!("\\{}", b as char),
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect();
    println!("\"{quoted}\"");
    Ok(())
}
