//! What a CRI call says about a container that an operator asks about: the
//! image (its reference, the id the runtime resolved, whether the runtime
//! had it) and the security posture the kubelet asked for. Settings and
//! identifiers only: never env, mounts, args, devices or annotation values.

use super::{CriCall, CriRequest, CriResponse};
use crate::pb::runtime::v1 as pb;

/// Image and security facts of one CRI call (CreateContainer, ImageStatus,
/// PullImage, RunPodSandbox).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFacts {
    /// CreateContainer: the container's name in the Pod spec.
    pub container_name: Option<String>,
    /// The image reference as the Pod names it (`busybox:1.36`): the
    /// ImageStatus or PullImage request's image, CreateContainer's
    /// `user_specified_image`.
    pub image: Option<String>,
    /// The image id the runtime resolved (`sha256:…`): ImageStatus's image,
    /// PullImage's `image_ref`, the image CreateContainer runs.
    pub image_id: Option<String>,
    /// ImageStatus, once answered: whether the runtime has the image (an
    /// answer with no image: it does not).
    pub image_present: Option<bool>,
    /// PullImage: the Pod it pulls for (the kubelet sends the sandbox's config).
    pub pull_for: Option<SandboxPod>,
    /// CreateContainer: the container's Linux security context;
    /// RunPodSandbox: the sandbox's.
    pub security: Option<SecurityFacts>,
}

/// The Pod a sandbox config names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPod {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

/// A Linux security context, as the CRI request gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityFacts {
    /// Privileged mode.
    pub privileged: bool,
    /// Capabilities added, as given (`NET_ADMIN`).
    pub capabilities_added: Vec<String>,
    /// Capabilities dropped, as given (`ALL`).
    pub capabilities_dropped: Vec<String>,
    /// The uid the process runs as, when set.
    pub run_as_user: Option<i64>,
    /// Seccomp: `RuntimeDefault`, `Unconfined` or `Localhost:<path>`.
    pub seccomp: Option<String>,
    /// AppArmor: `RuntimeDefault`, `Unconfined` or `Localhost:<profile>`.
    pub apparmor: Option<String>,
}

impl CriCall {
    /// The image and security facts of this call; `None` for calls that
    /// carry none.
    pub fn facts(&self) -> Option<ContainerFacts> {
        let request = self.request.as_ref()?.as_ref().ok()?;
        let response = self.response.as_ref().and_then(|r| r.as_ref().ok());
        let facts = match request {
            CriRequest::CreateContainer(r) => {
                let config = r.config.as_ref()?;
                let spec = config.image.as_ref();
                let resolved = spec.map(|s| s.image.as_str()).and_then(non_empty);
                let user = spec
                    .map(|s| s.user_specified_image.as_str())
                    .and_then(non_empty);
                // Without `user_specified_image` (kubelets before 1.30)
                // the image is the name, unless it is an id.
                let image = user.or_else(|| resolved.clone().filter(|image| !is_image_id(image)));
                ContainerFacts {
                    container_name: config.metadata.as_ref().and_then(|m| non_empty(&m.name)),
                    image_id: resolved.filter(|resolved| Some(resolved) != image.as_ref()),
                    image,
                    security: config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .map(container_security),
                    ..ContainerFacts::default()
                }
            }
            CriRequest::ImageStatus(r) => {
                let (image_id, image_present) = match response {
                    Some(CriResponse::ImageStatus(resp)) => (
                        resp.image.as_ref().and_then(|image| non_empty(&image.id)),
                        Some(resp.image.is_some()),
                    ),
                    _ => (None, None),
                };
                ContainerFacts {
                    image: r.image.as_ref().and_then(|s| non_empty(&s.image)),
                    image_id,
                    image_present,
                    ..ContainerFacts::default()
                }
            }
            CriRequest::PullImage(r) => ContainerFacts {
                image: r.image.as_ref().and_then(|s| non_empty(&s.image)),
                image_id: match response {
                    Some(CriResponse::PullImage(resp)) => non_empty(&resp.image_ref),
                    _ => None,
                },
                pull_for: r
                    .sandbox_config
                    .as_ref()
                    .and_then(|c| c.metadata.as_ref())
                    .filter(|m| !m.uid.is_empty())
                    .map(|m| SandboxPod {
                        namespace: m.namespace.clone(),
                        name: m.name.clone(),
                        uid: m.uid.clone(),
                    }),
                ..ContainerFacts::default()
            },
            CriRequest::RunPodSandbox(r) => ContainerFacts {
                security: Some(sandbox_security(
                    r.config
                        .as_ref()
                        .and_then(|c| c.linux.as_ref())
                        .and_then(|l| l.security_context.as_ref())?,
                )),
                ..ContainerFacts::default()
            },
            _ => return None,
        };
        Some(facts)
    }
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

/// `sha256:<hex>` (containerd) or bare hex (CRI-O): an id, not a name.
fn is_image_id(image: &str) -> bool {
    let hex = image.strip_prefix("sha256:").unwrap_or(image);
    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

// The deprecated string profiles are still what older kubelets send.
#[allow(deprecated)]
fn container_security(context: &pb::LinuxContainerSecurityContext) -> SecurityFacts {
    let capabilities = context.capabilities.clone().unwrap_or_default();
    SecurityFacts {
        privileged: context.privileged,
        capabilities_added: capabilities.add_capabilities,
        capabilities_dropped: capabilities.drop_capabilities,
        run_as_user: context.run_as_user.as_ref().map(|user| user.value),
        seccomp: profile(context.seccomp.as_ref(), &context.seccomp_profile_path),
        apparmor: profile(context.apparmor.as_ref(), &context.apparmor_profile),
    }
}

#[allow(deprecated)]
fn sandbox_security(context: &pb::LinuxSandboxSecurityContext) -> SecurityFacts {
    SecurityFacts {
        privileged: context.privileged,
        run_as_user: context.run_as_user.as_ref().map(|user| user.value),
        seccomp: profile(context.seccomp.as_ref(), &context.seccomp_profile_path),
        apparmor: profile(context.apparmor.as_ref(), ""),
        ..SecurityFacts::default()
    }
}

/// A security profile as text; the deprecated string form
/// (`runtime/default`, `unconfined`, `localhost/<ref>`) when the typed one
/// is absent.
fn profile(typed: Option<&pb::SecurityProfile>, deprecated: &str) -> Option<String> {
    use pb::security_profile::ProfileType;
    if let Some(typed) = typed {
        return Some(match ProfileType::try_from(typed.profile_type) {
            Ok(ProfileType::Localhost) => format!("Localhost:{}", typed.localhost_ref),
            Ok(other) => other.as_str_name().to_owned(),
            Err(_) => format!("unknown ({})", typed.profile_type),
        });
    }
    match deprecated {
        "" => None,
        "runtime/default" | "docker/default" => Some("RuntimeDefault".into()),
        "unconfined" => Some("Unconfined".into()),
        other => Some(match other.strip_prefix("localhost/") {
            Some(reference) => format!("Localhost:{reference}"),
            None => other.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::cri::{IMAGE_SERVICE, RUNTIME_SERVICE};

    fn call(
        service: &str,
        method: &str,
        request: &impl prost::Message,
        response: Option<&dyn Fn() -> Vec<u8>>,
    ) -> CriCall {
        CriCall {
            request: Some(CriRequest::decode(
                service,
                method,
                &request.encode_to_vec(),
            )),
            response: response.map(|bytes| CriResponse::decode(service, method, &bytes())),
        }
    }

    const ID: &str = "sha256:6fd955f66c231c1a946653170d096a28ac2b2052a02080c0b84ec082a07f7d12";

    #[test]
    fn privileged_container_with_capabilities_and_run_as_user() {
        let request = pb::CreateContainerRequest {
            pod_sandbox_id: "sandbox".into(),
            config: Some(pb::ContainerConfig {
                metadata: Some(pb::ContainerMetadata {
                    name: "c".into(),
                    attempt: 0,
                }),
                image: Some(pb::ImageSpec {
                    image: ID.into(),
                    user_specified_image: "busybox:1.36".into(),
                    ..Default::default()
                }),
                envs: vec![pb::KeyValue {
                    key: "TOKEN".into(),
                    value: "hunter2".into(),
                }],
                linux: Some(pb::LinuxContainerConfig {
                    security_context: Some(pb::LinuxContainerSecurityContext {
                        privileged: true,
                        capabilities: Some(pb::Capability {
                            add_capabilities: vec!["NET_ADMIN".into(), "SYS_TIME".into()],
                            drop_capabilities: vec!["MKNOD".into()],
                            ..Default::default()
                        }),
                        run_as_user: Some(pb::Int64Value { value: 0 }),
                        apparmor: Some(pb::SecurityProfile {
                            profile_type: pb::security_profile::ProfileType::Localhost as i32,
                            localhost_ref: "k8s-deny-write".into(),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: None,
        };
        let facts = call(RUNTIME_SERVICE, "CreateContainer", &request, None)
            .facts()
            .expect("facts");
        assert_eq!(facts.container_name.as_deref(), Some("c"));
        assert_eq!(facts.image.as_deref(), Some("busybox:1.36"));
        assert_eq!(facts.image_id.as_deref(), Some(ID));
        assert_eq!(
            facts.security,
            Some(SecurityFacts {
                privileged: true,
                capabilities_added: vec!["NET_ADMIN".into(), "SYS_TIME".into()],
                capabilities_dropped: vec!["MKNOD".into()],
                run_as_user: Some(0),
                seccomp: None,
                apparmor: Some("Localhost:k8s-deny-write".into()),
            })
        );
        assert!(!format!("{facts:?}").contains("hunter2"));
    }

    #[test]
    fn seccomp_runtime_default_and_no_run_as_user() {
        let request = pb::CreateContainerRequest {
            config: Some(pb::ContainerConfig {
                image: Some(pb::ImageSpec {
                    // No user_specified_image (older kubelets): the image is an id.
                    image: ID.into(),
                    ..Default::default()
                }),
                linux: Some(pb::LinuxContainerConfig {
                    security_context: Some(pb::LinuxContainerSecurityContext {
                        seccomp: Some(pb::SecurityProfile::default()),
                        capabilities: Some(pb::Capability {
                            drop_capabilities: vec!["ALL".into()],
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let facts = call(RUNTIME_SERVICE, "CreateContainer", &request, None)
            .facts()
            .expect("facts");
        assert_eq!(facts.image, None);
        assert_eq!(facts.image_id.as_deref(), Some(ID));
        let security = facts.security.expect("security");
        assert_eq!(security.seccomp.as_deref(), Some("RuntimeDefault"));
        assert!(!security.privileged);
        assert_eq!(security.run_as_user, None);
        assert_eq!(security.capabilities_dropped, ["ALL"]);
        assert_eq!(security.apparmor, None);
    }

    #[test]
    fn deprecated_profile_paths() {
        assert_eq!(
            profile(None, "localhost/profiles/audit.json").as_deref(),
            Some("Localhost:profiles/audit.json")
        );
        assert_eq!(profile(None, "unconfined").as_deref(), Some("Unconfined"));
        assert_eq!(profile(None, ""), None);
    }

    #[test]
    fn image_status_present_and_absent() {
        let request = pb::ImageStatusRequest {
            image: Some(pb::ImageSpec {
                image: "busybox:1.36".into(),
                ..Default::default()
            }),
            verbose: false,
        };
        let present = || {
            pb::ImageStatusResponse {
                image: Some(pb::Image {
                    id: ID.into(),
                    repo_tags: vec!["docker.io/library/busybox:1.36".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }
            .encode_to_vec()
        };
        let facts = call(IMAGE_SERVICE, "ImageStatus", &request, Some(&present))
            .facts()
            .expect("facts");
        assert_eq!(facts.image.as_deref(), Some("busybox:1.36"));
        assert_eq!(facts.image_id.as_deref(), Some(ID));
        assert_eq!(facts.image_present, Some(true));

        let absent = || pb::ImageStatusResponse::default().encode_to_vec();
        let facts = call(IMAGE_SERVICE, "ImageStatus", &request, Some(&absent))
            .facts()
            .expect("facts");
        assert_eq!(facts.image_present, Some(false));
        assert_eq!(facts.image_id, None);

        // No answer captured: presence unknown.
        let facts = call(IMAGE_SERVICE, "ImageStatus", &request, None)
            .facts()
            .expect("facts");
        assert_eq!(facts.image_present, None);
    }

    #[test]
    fn pull_image_names_its_pod_and_resolved_ref_but_no_credentials() {
        let request = pb::PullImageRequest {
            image: Some(pb::ImageSpec {
                image: "nginx:1.27".into(),
                ..Default::default()
            }),
            auth: Some(pb::AuthConfig {
                password: "hunter2".into(),
                ..Default::default()
            }),
            sandbox_config: Some(pb::PodSandboxConfig {
                metadata: Some(pb::PodSandboxMetadata {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u-1".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
        };
        let response = || {
            pb::PullImageResponse {
                image_ref: ID.into(),
            }
            .encode_to_vec()
        };
        let facts = call(IMAGE_SERVICE, "PullImage", &request, Some(&response))
            .facts()
            .expect("facts");
        assert_eq!(facts.image.as_deref(), Some("nginx:1.27"));
        assert_eq!(facts.image_id.as_deref(), Some(ID));
        assert_eq!(
            facts.pull_for,
            Some(SandboxPod {
                namespace: "default".into(),
                name: "web".into(),
                uid: "u-1".into(),
            })
        );
        assert!(!format!("{facts:?}").contains("hunter2"));
    }

    #[test]
    fn sandbox_security_context() {
        let request = pb::RunPodSandboxRequest {
            config: Some(pb::PodSandboxConfig {
                linux: Some(pb::LinuxPodSandboxConfig {
                    security_context: Some(pb::LinuxSandboxSecurityContext {
                        run_as_user: Some(pb::Int64Value { value: 1000 }),
                        seccomp: Some(pb::SecurityProfile {
                            profile_type: pb::security_profile::ProfileType::Unconfined as i32,
                            localhost_ref: String::new(),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        };
        let security = call(RUNTIME_SERVICE, "RunPodSandbox", &request, None)
            .facts()
            .and_then(|f| f.security)
            .expect("security");
        assert_eq!(security.run_as_user, Some(1000));
        assert_eq!(security.seccomp.as_deref(), Some("Unconfined"));
        assert!(!security.privileged);
    }

    #[test]
    fn recorded_calls_give_image_facts() {
        let mut connection = crate::http2::Http2Connection::default();
        for chunk in crate::testdata::chunks("cri-create-pod.rec") {
            connection.push(&chunk);
        }
        let facts: Vec<(String, ContainerFacts)> = connection
            .finish()
            .iter()
            .filter_map(crate::grpc::GrpcCall::from_exchange)
            .filter_map(|c| CriCall::from_grpc(&c))
            .filter_map(|c| {
                let method = c.request.as_ref()?.as_ref().ok()?.method().to_owned();
                Some((method, c.facts()?))
            })
            .collect();
        let status = facts
            .iter()
            .find(|(method, _)| method == "ImageStatus")
            .map(|(_, facts)| facts)
            .expect("ImageStatus");
        assert!(status.image.is_some(), "{status:?}");
        assert!(status.image_present.is_some(), "{status:?}");
        let create = facts
            .iter()
            .find(|(method, _)| method == "CreateContainer")
            .map(|(_, facts)| facts)
            .expect("CreateContainer");
        assert!(
            create.image.is_some() || create.image_id.is_some(),
            "{create:?}"
        );
    }
}
