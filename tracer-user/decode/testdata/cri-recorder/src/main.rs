//! Starts containerd with CRI, puts `record_proxy` in front of its socket and
//! plays the kubelet through the proxy: Version, RunPodSandbox,
//! CreateContainer, StartContainer, ImageStatus, ListPodSandbox,
//! StopPodSandbox, RemovePodSandbox.

use std::process::Command;
use std::time::Duration;

use podtrace_tests::components::{Containerd, ContainerdOptions, CriClient};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let out_prefix = std::env::args().nth(1).unwrap_or_else(|| "/tmp/cri".into());
    let containerd = Containerd::start(ContainerdOptions { image_cache_dir: "/tmp/cri-recorder-images".into() })?;
    let proxy_socket = "/tmp/podtrace-cri-recorder.sock";
    let proxy_bin = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../../target/debug/examples/record_proxy");
    let mut proxy = Command::new(proxy_bin)
        .args([format!("unix:{proxy_socket}"), format!("unix:{}", containerd.socket().display()), out_prefix])
        .spawn()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let result = async {
        let cri = CriClient::connect(proxy_socket.as_ref(), containerd.pod_template()).await?;
        let version = cri.version().await?;
        println!("version: {version:?}");
        let pod = cri.create_pod("web-7d4b9", "default", "3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71").await?;
        println!("pod: {pod:?}");
        println!("image: {:?}", cri.image_status("docker.io/library/busybox:latest").await.map(|i| i.is_some()));
        println!("sandboxes: {}", cri.list_pod_sandboxes().await?.len());
        cri.stop_pod_sandbox(&pod.sandbox_id).await?;
        cri.remove_pod_sandbox(&pod.sandbox_id).await?;
        anyhow::Ok(())
    }
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(containerd);
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.kill()?;
    result
}
