//! Kubernetes CRI (`runtime.v1` RuntimeService and ImageService) calls.
//!
//! In: a [`GrpcCall`] to `runtime.v1.RuntimeService` or
//! `runtime.v1.ImageService`. Out: a [`CriCall`] with typed request and
//! response ([`CriRequest`], [`CriResponse`] hold the prost messages) and the
//! [`PodClue`]s it carries. Secrets are dropped at decode time: env values
//! of CreateContainer configs (names kept), PullImage registry credentials
//! and verbose `info` maps (which hold the OCI spec with its env). `Debug`
//! prints only the method, and [`CriCall::clues`] only identifiers.

use prost::Message;

mod facts;

pub use facts::{ContainerFacts, SandboxPod, SecurityFacts};

use crate::grpc::GrpcCall;
use crate::identity::{PodClue, PodIdentity};
use crate::pb::runtime::v1 as pb;

/// Why a CRI message did not decode. Each message stands alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriError {
    /// Not a method this module types.
    #[error("{service}/{method} is not a typed CRI method")]
    UnknownMethod { service: String, method: String },
    /// Bytes that are not the method's message.
    #[error("{method} {what}: {reason}")]
    Protobuf {
        method: String,
        what: &'static str,
        reason: String,
    },
}

impl CriError {
    /// Always true: a bad message costs only itself.
    pub fn can_continue(&self) -> bool {
        true
    }
}

/// Declares the typed CRI methods once: (service, method, request type,
/// response type). Adding a method touches only this table. Messages are
/// boxed: their sizes differ by kilobytes.
macro_rules! cri_methods {
    ($(($service:literal, $method:ident, $request:ident, $response:ident)),* $(,)?) => {
        /// A decoded CRI request.
        #[derive(Clone, PartialEq)]
        pub enum CriRequest { $(
            #[doc = concat!("`", $service, "/", stringify!($method), "`.")]
            $method(Box<pb::$request>),
        )* }

        /// A decoded CRI response.
        #[derive(Clone, PartialEq)]
        pub enum CriResponse { $(
            #[doc = concat!("`", $service, "/", stringify!($method), "` result.")]
            $method(Box<pb::$response>),
        )* }

        fn decode_message<M: Message + Default>(method: &str, what: &'static str, bytes: &[u8]) -> Result<M, CriError> {
            M::decode(bytes).map_err(|e| CriError::Protobuf { method: method.into(), what, reason: e.to_string() })
        }

        impl CriRequest {
            /// Decodes the request of `service`/`method`.
            pub fn decode(service: &str, method: &str, bytes: &[u8]) -> Result<Self, CriError> {
                match (service, method) {
                    $(($service, stringify!($method)) => Ok(Self::$method(Box::new(decode_message(method, "request", bytes)?)).without_secrets()),)*
                    _ => Err(CriError::UnknownMethod { service: service.into(), method: method.into() }),
                }
            }

            /// The method name.
            pub fn method(&self) -> &'static str {
                match self { $(Self::$method(_) => stringify!($method),)* }
            }
        }

        impl CriResponse {
            /// Decodes the response of `service`/`method`.
            pub fn decode(service: &str, method: &str, bytes: &[u8]) -> Result<Self, CriError> {
                match (service, method) {
                    $(($service, stringify!($method)) => Ok(Self::$method(Box::new(decode_message(method, "response", bytes)?)).without_secrets()),)*
                    _ => Err(CriError::UnknownMethod { service: service.into(), method: method.into() }),
                }
            }

            /// The method name.
            pub fn method(&self) -> &'static str {
                match self { $(Self::$method(_) => stringify!($method),)* }
            }
        }
    };
}

/// `runtime.v1.RuntimeService`.
pub const RUNTIME_SERVICE: &str = "runtime.v1.RuntimeService";
/// `runtime.v1.ImageService`.
pub const IMAGE_SERVICE: &str = "runtime.v1.ImageService";

cri_methods! {
    ("runtime.v1.RuntimeService", Version, VersionRequest, VersionResponse),
    ("runtime.v1.RuntimeService", RunPodSandbox, RunPodSandboxRequest, RunPodSandboxResponse),
    ("runtime.v1.RuntimeService", StopPodSandbox, StopPodSandboxRequest, StopPodSandboxResponse),
    ("runtime.v1.RuntimeService", RemovePodSandbox, RemovePodSandboxRequest, RemovePodSandboxResponse),
    ("runtime.v1.RuntimeService", PodSandboxStatus, PodSandboxStatusRequest, PodSandboxStatusResponse),
    ("runtime.v1.RuntimeService", ListPodSandbox, ListPodSandboxRequest, ListPodSandboxResponse),
    ("runtime.v1.RuntimeService", CreateContainer, CreateContainerRequest, CreateContainerResponse),
    ("runtime.v1.RuntimeService", StartContainer, StartContainerRequest, StartContainerResponse),
    ("runtime.v1.RuntimeService", StopContainer, StopContainerRequest, StopContainerResponse),
    ("runtime.v1.RuntimeService", RemoveContainer, RemoveContainerRequest, RemoveContainerResponse),
    ("runtime.v1.RuntimeService", ListContainers, ListContainersRequest, ListContainersResponse),
    ("runtime.v1.RuntimeService", ContainerStatus, ContainerStatusRequest, ContainerStatusResponse),
    ("runtime.v1.RuntimeService", Status, StatusRequest, StatusResponse),
    ("runtime.v1.ImageService", PullImage, PullImageRequest, PullImageResponse),
    ("runtime.v1.ImageService", ImageStatus, ImageStatusRequest, ImageStatusResponse),
    ("runtime.v1.ImageService", ListImages, ListImagesRequest, ListImagesResponse),
    ("runtime.v1.ImageService", RemoveImage, RemoveImageRequest, RemoveImageResponse),
}

/// Placeholder for a dropped env value: the name stays (it says what a
/// container was configured with), the value never leaves the decoder.
pub const REDACTED: &str = "<redacted>";

impl CriRequest {
    /// Drops what must not travel further: env values of CreateContainer
    /// configs and PullImage registry credentials.
    fn without_secrets(mut self) -> Self {
        match &mut self {
            CriRequest::CreateContainer(r) => {
                for env in r.config.iter_mut().flat_map(|c| c.envs.iter_mut()) {
                    env.value = REDACTED.into();
                }
            }
            CriRequest::PullImage(r) => r.auth = None,
            _ => {}
        }
        self
    }
}

impl CriResponse {
    /// Drops verbose `info` maps: runtimes put the whole OCI spec there,
    /// env values included.
    fn without_secrets(mut self) -> Self {
        match &mut self {
            CriResponse::PodSandboxStatus(r) => r.info.clear(),
            CriResponse::ContainerStatus(r) => r.info.clear(),
            CriResponse::ImageStatus(r) => r.info.clear(),
            CriResponse::Status(r) => r.info.clear(),
            _ => {}
        }
        self
    }
}

impl std::fmt::Debug for CriRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CriRequest::{}", self.method())
    }
}

impl std::fmt::Debug for CriResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CriResponse::{}", self.method())
    }
}

/// A CRI call.
#[derive(Debug, Clone, PartialEq)]
pub struct CriCall {
    /// The request, if captured.
    pub request: Option<Result<CriRequest, CriError>>,
    /// The response, if captured.
    pub response: Option<Result<CriResponse, CriError>>,
}

impl CriCall {
    /// Decodes a gRPC call to a CRI service; `None` for other services.
    pub fn from_grpc(call: &GrpcCall) -> Option<CriCall> {
        let service = call
            .service
            .as_deref()
            .filter(|s| *s == RUNTIME_SERVICE || *s == IMAGE_SERVICE)?;
        let method = call.method.as_deref()?;
        Some(CriCall {
            request: call
                .request_bytes()
                .map(|b| CriRequest::decode(service, method, b)),
            response: call
                .response_bytes()
                .map(|b| CriResponse::decode(service, method, b)),
        })
    }

    /// The Pod facts in this call: sandbox metadata and id for
    /// RunPodSandbox, the sandbox and new container id for CreateContainer,
    /// the container id for container calls, the sandbox id for sandbox calls.
    pub fn clues(&self) -> Vec<PodClue> {
        let response = self.response.as_ref().and_then(|r| r.as_ref().ok());
        let Some(Ok(request)) = &self.request else {
            return Vec::new();
        };
        let sandbox = |id: &str| PodClue::SandboxCall {
            sandbox_id: id.into(),
            container_id: None,
        };
        let container = |id: &str| PodClue::Container {
            container_id: id.into(),
        };
        match request {
            CriRequest::RunPodSandbox(r) => {
                let metadata = r
                    .config
                    .as_ref()
                    .and_then(|c| c.metadata.clone())
                    .unwrap_or_default();
                // proto3 leaves absent strings empty: an empty name or id
                // names nothing (a body cut by capture, or decoded as the
                // wrong message).
                let named = |text: String| Some(text).filter(|text| !text.is_empty());
                let sandbox_id = match response {
                    Some(CriResponse::RunPodSandbox(resp)) => named(resp.pod_sandbox_id.clone()),
                    _ => None,
                };
                let pod = PodIdentity {
                    namespace: named(metadata.namespace),
                    name: named(metadata.name),
                    uid: named(metadata.uid),
                    ..PodIdentity::default()
                };
                vec![PodClue::Sandbox { pod, sandbox_id }]
            }
            CriRequest::CreateContainer(r) => {
                let container_id = match response {
                    Some(CriResponse::CreateContainer(resp)) => Some(resp.container_id.clone()),
                    _ => None,
                };
                vec![PodClue::SandboxCall {
                    sandbox_id: r.pod_sandbox_id.clone(),
                    container_id,
                }]
            }
            CriRequest::StopPodSandbox(r) => vec![sandbox(&r.pod_sandbox_id)],
            CriRequest::RemovePodSandbox(r) => vec![sandbox(&r.pod_sandbox_id)],
            CriRequest::PodSandboxStatus(r) => vec![sandbox(&r.pod_sandbox_id)],
            CriRequest::StartContainer(r) => vec![container(&r.container_id)],
            CriRequest::StopContainer(r) => vec![container(&r.container_id)],
            CriRequest::RemoveContainer(r) => vec![container(&r.container_id)],
            CriRequest::ContainerStatus(r) => vec![container(&r.container_id)],
            CriRequest::Version(_)
            | CriRequest::ListPodSandbox(_)
            | CriRequest::ListContainers(_)
            | CriRequest::Status(_)
            | CriRequest::PullImage(_)
            | CriRequest::ImageStatus(_)
            | CriRequest::ListImages(_)
            | CriRequest::RemoveImage(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::Http2Connection;
    use crate::testdata;

    fn calls() -> Vec<CriCall> {
        let mut connection = Http2Connection::default();
        for chunk in testdata::chunks("cri-create-pod.rec") {
            connection.push(&chunk);
        }
        let exchanges = connection.finish();
        exchanges
            .iter()
            .filter_map(GrpcCall::from_exchange)
            .filter_map(|c| CriCall::from_grpc(&c))
            .collect()
    }

    #[test]
    fn create_container_env_values_and_pull_credentials_are_dropped() {
        let request = pb::CreateContainerRequest {
            pod_sandbox_id: "sandbox".into(),
            config: Some(pb::ContainerConfig {
                envs: vec![pb::KeyValue {
                    key: "DB_PASSWORD".into(),
                    value: "hunter2".into(),
                }],
                ..Default::default()
            }),
            sandbox_config: None,
        };
        let decoded =
            CriRequest::decode(RUNTIME_SERVICE, "CreateContainer", &request.encode_to_vec());
        let Ok(CriRequest::CreateContainer(decoded)) = decoded else {
            panic!("{decoded:?}")
        };
        let envs = &decoded.config.as_ref().expect("config").envs;
        assert_eq!(envs[0].key, "DB_PASSWORD");
        assert_eq!(envs[0].value, REDACTED);

        let pull = pb::PullImageRequest {
            auth: Some(pb::AuthConfig {
                password: "hunter2".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let decoded = CriRequest::decode(IMAGE_SERVICE, "PullImage", &pull.encode_to_vec());
        let Ok(CriRequest::PullImage(decoded)) = decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(decoded.auth, None);
    }

    /// A RunPodSandbox whose body names nothing (cut by capture, or
    /// another call's body under a header block given to the wrong
    /// stream) gives no Pod: proto3's empty strings are no identity.
    #[test]
    fn an_empty_sandbox_config_names_no_pod() {
        let empty = pb::RunPodSandboxRequest::default().encode_to_vec();
        let call = CriCall {
            request: Some(CriRequest::decode(RUNTIME_SERVICE, "RunPodSandbox", &empty)),
            response: Some(CriResponse::decode(
                RUNTIME_SERVICE,
                "RunPodSandbox",
                &pb::RunPodSandboxResponse::default().encode_to_vec(),
            )),
        };
        let [PodClue::Sandbox { pod, sandbox_id }] = &call.clues()[..] else {
            panic!("{:?}", call.clues());
        };
        assert_eq!(*sandbox_id, None);
        assert_eq!((&pod.namespace, &pod.name, &pod.uid), (&None, &None, &None));
    }

    #[test]
    fn recorded_create_container_keeps_no_env_values() {
        for call in calls() {
            if let Some(Ok(CriRequest::CreateContainer(r))) = &call.request {
                let envs = &r.config.as_ref().expect("config").envs;
                assert!(envs.iter().all(|e| e.value == REDACTED), "{envs:?}");
            }
        }
    }

    #[test]
    fn recorded_kubelet_calls_decode_in_order() {
        let methods: Vec<_> = calls()
            .iter()
            .map(|c| match &c.request {
                Some(Ok(r)) => r.method(),
                _ => "?",
            })
            .collect();
        assert_eq!(
            methods,
            [
                "Version",
                "RunPodSandbox",
                "CreateContainer",
                "StartContainer",
                "ImageStatus",
                "ListPodSandbox",
                "StopPodSandbox",
                "RemovePodSandbox"
            ]
        );
    }

    #[test]
    fn run_pod_sandbox_yields_pod_and_sandbox_id_and_links_containers() {
        let clues: Vec<PodClue> = calls().iter().flat_map(CriCall::clues).collect();
        let Some(PodClue::Sandbox {
            pod,
            sandbox_id: Some(sandbox_id),
        }) = clues.first()
        else {
            panic!("{clues:?}")
        };
        assert_eq!(pod.name.as_deref(), Some("web-7d4b9"));
        assert_eq!(pod.namespace.as_deref(), Some("default"));
        assert_eq!(
            pod.uid.as_deref(),
            Some("3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71")
        );
        assert_eq!(sandbox_id.len(), 64);
        let Some(PodClue::SandboxCall {
            sandbox_id: created_in,
            container_id: Some(container_id),
        }) = clues.get(1)
        else {
            panic!("{clues:?}")
        };
        assert_eq!(created_in, sandbox_id);
        assert_eq!(
            clues.get(2),
            Some(&PodClue::Container {
                container_id: container_id.clone()
            })
        );
    }
}
