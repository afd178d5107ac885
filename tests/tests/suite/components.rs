//! Live: the real-component harness (`podtrace_tests::components`) starts
//! Debian's etcd, containerd and runc, and they work as the capture and
//! end-to-end tests expect: etcd plain, with TLS client certificates and with
//! authentication; kube-apiserver's Pod writes through the `demo-apiserver`
//! Go relay, started before etcd; containerd running a busybox Pod through
//! the CRI; and nothing left behind after teardown.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed step fails the test"
)]

use std::{path::Path, process::Output, time::Duration};

use podtrace_tests::{
    components::{
        Containerd, ContainerdOptions, DemoApiserverBinary, Etcd, EtcdOptions, cri::api,
        images::WORKLOAD_IMAGE, leftovers,
    },
    live_test_can_run,
};

/// The relay, built (or rebuilt from Go's warm cache) under
/// CARGO_TARGET_TMPDIR.
fn demo_apiserver() -> DemoApiserverBinary {
    DemoApiserverBinary::build(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-apiserver"))
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs an etcdctl command that must succeed; returns its stdout.
fn succeed(command: &mut std::process::Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        stderr(&output)
    );
    stdout(&output)
}

#[test]
fn etcd_plain_put_get() {
    if !live_test_can_run("etcd_plain_put_get") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions::default()).unwrap();
    assert!(etcd.endpoint().starts_with("http://127.0.0.1:"));
    succeed(
        etcd.etcdctl()
            .args(["put", "/registry/pods/default/plain", "v1"]),
    );
    let got = succeed(etcd.etcdctl().args(["get", "/registry/pods/default/plain"]));
    assert_eq!(got, "/registry/pods/default/plain\nv1\n");
    // The put reached the write-ahead log that the capture tests watch.
    let wal_files: Vec<_> = std::fs::read_dir(etcd.wal_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".wal"))
        .collect();
    assert!(!wal_files.is_empty(), "no *.wal in {:?}", etcd.wal_dir());

    let (pid, data_dir) = (etcd.pid(), etcd.data_dir());
    drop(etcd);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "etcd (pid {pid}) outlived its handle"
    );
    assert!(!data_dir.exists(), "{} still exists", data_dir.display());
}

#[test]
fn etcd_tls_and_auth_put_get() {
    if !live_test_can_run("etcd_tls_and_auth_put_get") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: true,
    })
    .unwrap();
    assert!(etcd.endpoint().starts_with("https://127.0.0.1:"));
    let pki = etcd.pki().unwrap();
    for key in [&pki.server().key, &pki.client("root").unwrap().key] {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", key.display());
    }

    succeed(
        etcd.etcdctl()
            .args(["put", "/registry/pods/default/tls", "v2"]),
    );
    let got = succeed(etcd.etcdctl().args(["get", "/registry/pods/default/tls"]));
    assert_eq!(got, "/registry/pods/default/tls\nv2\n");
    // root's password reaches etcdctl in its environment, not on its
    // command line, which podtrace prints for the processes it follows.
    let password = etcd.root_password().unwrap();
    let args: Vec<_> = etcd
        .etcdctl()
        .get_args()
        .map(|arg| arg.to_owned())
        .collect();
    assert!(
        !args
            .iter()
            .any(|arg| arg.to_string_lossy().contains(password)),
        "the password is on etcdctl's command line"
    );

    // No client certificate: the TLS handshake fails.
    let output = etcd
        .etcdctl_anonymous()
        .args(["--dial-timeout=1s", "--command-timeout=2s"])
        .args(["get", "/registry/pods/default/tls"])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "a request without client certificate succeeded: {}",
        stdout(&output)
    );

    // A valid certificate whose Common Name is no etcd user (the server's,
    // which etcd peers also use as a client certificate), and no password:
    // authentication rejects it.
    let stranger = pki.server();
    let with_cert = |cert: &podtrace_tests::components::CertFiles| {
        let mut command = etcd.etcdctl_anonymous();
        command
            .arg(format!("--cert={}", cert.cert.display()))
            .arg(format!("--key={}", cert.key.display()));
        command
    };
    let output = with_cert(stranger)
        .args(["get", "/registry/pods/default/tls"])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "an unauthenticated request succeeded: {}",
        stdout(&output)
    );
    let message = stderr(&output);
    assert!(
        message.contains("user name not found") || message.contains("permission denied"),
        "unexpected rejection: {message}"
    );

    // The same certificate with root's password is accepted.
    succeed(
        with_cert(stranger)
            .arg(format!("--user=root:{}", etcd.root_password().unwrap()))
            .args(["get", "/registry/pods/default/tls"]),
    );

    // kube-apiserver's certificate makes its Common Name the user: it may
    // read and write /registry/ and nothing else.
    let apiserver = pki.client("kube-apiserver").unwrap();
    let got = succeed(with_cert(apiserver).args(["get", "/registry/pods/default/tls"]));
    assert_eq!(got, "/registry/pods/default/tls\nv2\n");
    succeed(with_cert(apiserver).args(["put", "/registry/pods/default/api", "v3"]));
    let output = with_cert(apiserver)
        .args(["put", "/podtrace/outside-registry", "v4"])
        .output()
        .unwrap();
    assert!(
        !output.status.success() && stderr(&output).contains("permission denied"),
        "a write outside /registry/ as kube-apiserver: {} {}",
        stdout(&output),
        stderr(&output)
    );
}

/// kube-apiserver's writes of one Pod (create, binding, status) through
/// [`ApiserverRole`] — its relay started before etcd, as the demo starts it
/// — read back as root and decoded by tracer-decode; a conflicting update
/// retried on the current object; with authentication, a write outside
/// `/registry/` refused to kube-apiserver.
async fn apiserver_role_writes_a_pod(options: EtcdOptions) {
    use podtrace_tests::components::{
        ApiserverRole, EtcdKv, PodTemplate,
        apiserver_role::{self, RunningContainer},
        etcd::APISERVER_USER,
    };
    use tracer_decode::{
        kube::{StoredObject, decode_stored_object},
        pb::etcdserverpb::RangeRequest,
    };

    let relay = demo_apiserver();
    let prepared = Etcd::prepare_in(options, &std::env::temp_dir()).unwrap();
    let apiserver = ApiserverRole::start(&relay, prepared.endpoint(), prepared.pki()).unwrap();
    let etcd = prepared.start().unwrap();
    assert_eq!(apiserver.count_pods().await.unwrap(), 0);
    let template = PodTemplate {
        log_root: "/nonexistent".into(),
        cgroup_root: "/podtrace-unused".into(),
        image: WORKLOAD_IMAGE.into(),
        command: vec!["sleep".into(), "1".into()],
    };
    let pod = apiserver_role::new_pod("ns1", "web-x2b4z", Some("web-"), &[], &template).unwrap();
    let uid = pod.metadata.as_ref().unwrap().uid.clone().unwrap();
    let mut stored = apiserver.create(pod.clone()).await.unwrap();
    assert_eq!(stored.key, "/registry/pods/ns1/web-x2b4z");
    // A second create of the same key fails, as the compare says.
    let again = apiserver.create(pod).await.unwrap_err();
    assert!(format!("{again:#}").contains("already exists"), "{again:#}");

    let stale = stored.clone();
    apiserver
        .guaranteed_update(&mut stored, |pod| apiserver_role::bind(pod, "node-a"))
        .await
        .unwrap();
    assert!(stored.mod_revision > stale.mod_revision);
    // Through the stale copy: the Txn fails, its Range returns the bound Pod,
    // and the status is applied to that.
    let mut from_stale = stale;
    let running = RunningContainer {
        container_id: "0123abcd".into(),
        image_ref: "sha256:feed".into(),
        started_at: std::time::SystemTime::now(),
        pod_ip: None,
        start_time: std::time::SystemTime::now(),
    };
    apiserver
        .guaranteed_update(&mut from_stale, |pod| {
            apiserver_role::set_running(pod, &running)
        })
        .await
        .unwrap();
    assert_eq!(apiserver.count_pods().await.unwrap(), 1);

    // Read back as root (its certificate makes it root when etcd has TLS
    // and authentication).
    let root = EtcdKv::start(&relay, etcd.endpoint(), etcd.pki(), "root").unwrap();
    let response = root
        .range(RangeRequest {
            key: b"/registry/pods/ns1/web-x2b4z".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    let value = &response.kvs[0].value;
    let StoredObject::Pod(identity) = decode_stored_object(value).unwrap() else {
        panic!("not a Pod")
    };
    assert_eq!(identity.namespace.as_deref(), Some("ns1"));
    assert_eq!(identity.name.as_deref(), Some("web-x2b4z"));
    assert_eq!(identity.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(identity.node_name.as_deref(), Some("node-a"));
    assert_eq!(identity.phase.as_deref(), Some("Running"));
    assert_eq!(
        apiserver_role::decode_pod(value).unwrap(),
        from_stale.pod,
        "etcd holds what the update wrote"
    );

    if options.auth {
        // The relay's certificate makes it user kube-apiserver, whose role
        // covers /registry/ only: etcd's refusal comes back as its status.
        let kube_apiserver =
            EtcdKv::start(&relay, etcd.endpoint(), etcd.pki(), APISERVER_USER).unwrap();
        let outside = apiserver_role::create_txn("/podtrace/outside-registry", b"v".to_vec());
        let refused = kube_apiserver.txn(outside).await.unwrap_err();
        assert!(
            format!("{refused:#}").contains("grpc-status 7: etcdserver: permission denied"),
            "{refused:#}"
        );
    }

    // Each relay stops with its owner and leaves no process behind.
    let pids = [apiserver.relay_pid(), root.relay_pid()];
    drop(apiserver);
    drop(root);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "demo-apiserver (pid {pid}) outlived its owner"
        );
    }
}

/// The relay says `ready` without connecting, connects at its first call
/// only, and reports a failure to reach etcd as gRPC's UNAVAILABLE. No etcd
/// and no root needed: a listener that is never answered stands in for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_apiserver_connects_at_its_first_call_only() {
    use podtrace_tests::components::EtcdKv;
    use tracer_decode::pb::etcdserverpb::RangeRequest;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let kv = EtcdKv::start(&demo_apiserver(), &endpoint, None, "unused").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    match listener.accept() {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("demo-apiserver connected before its first call: {other:?}"),
    }
    // Nothing listens any more: the first call's connection is refused.
    drop(listener);
    let refused = kv.range(RangeRequest::default()).await.unwrap_err();
    assert!(
        format!("{refused:#}").contains("grpc-status 14: ")
            && format!("{refused:#}").contains("connection refused"),
        "{refused:#}"
    );
    let pid = kv.relay_pid();
    drop(kv);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "demo-apiserver (pid {pid}) outlived its owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_role_writes_pods_to_plain_etcd() {
    if !live_test_can_run("apiserver_role_writes_pods_to_plain_etcd") {
        return;
    }
    apiserver_role_writes_a_pod(EtcdOptions::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_role_writes_pods_to_mtls_etcd_with_auth_as_kube_apiserver() {
    if !live_test_can_run("apiserver_role_writes_pods_to_mtls_etcd_with_auth_as_kube_apiserver") {
        return;
    }
    apiserver_role_writes_a_pod(EtcdOptions {
        tls: true,
        auth: true,
    })
    .await;
}

#[test]
fn etcd_watch_keeps_a_connection_open() {
    if !live_test_can_run("etcd_watch_keeps_a_connection_open") {
        return;
    }
    let etcd = Etcd::start(EtcdOptions {
        tls: true,
        auth: true,
    })
    .unwrap();
    let watch = etcd.watch("/registry/pods/").unwrap();
    succeed(
        etcd.etcdctl()
            .args(["put", "/registry/pods/default/watched", "v3"]),
    );
    watch
        .wait_for_line(Duration::from_secs(10), |line| {
            line == "/registry/pods/default/watched"
        })
        .unwrap();
    let watch_pid = watch.pid();
    drop(watch);
    assert!(
        !Path::new(&format!("/proc/{watch_pid}")).exists(),
        "etcdctl watch (pid {watch_pid}) outlived its handle"
    );
}

/// The pid of a running container, from containerd's verbose status.
fn container_pid(status: &api::ContainerStatusResponse) -> u32 {
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    info["pid"].as_u64().unwrap() as u32
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_runs_a_pod_and_leaves_nothing_behind() {
    if !live_test_can_run("containerd_runs_a_pod_and_leaves_nothing_behind") {
        return;
    }
    let containerd = Containerd::start(ContainerdOptions {
        image_cache_dir: env!("CARGO_TARGET_TMPDIR").into(),
    })
    .unwrap();
    let dir = containerd.dir().to_owned();
    let socket = containerd.socket().display().to_string();
    let cgroup_root = containerd.cgroup_root().to_owned();

    let cri = containerd.cri().await.unwrap();
    let version = cri.version().await.unwrap();
    assert_eq!(version.runtime_name, "containerd");
    assert_eq!(version.runtime_api_version, "v1");
    // The images are local; the kubelet would skip the pull.
    let image = cri.image_status(WORKLOAD_IMAGE).await.unwrap().unwrap();
    assert_eq!(image.repo_tags, [WORKLOAD_IMAGE]);

    let uid = "6f1d3c2e-0b7a-4e59-9a43-2c1f5b8d7e01";
    let started = std::time::Instant::now();
    let pod = cri.create_pod("web-0", "default", uid).await.unwrap();
    eprintln!("create_pod took {:?}", started.elapsed());

    let status = cri.container_status(&pod.container_id).await.unwrap();
    let state = status.status.as_ref().unwrap().state;
    assert_eq!(state, api::CONTAINER_RUNNING, "{status:?}");
    let pid = container_pid(&status);
    // busybox sh execs the last command of `-c` itself, so the container's
    // process comes to run `sleep 3600` after it ran the shell. RUNNING only
    // says runc started the shell: the exec may not have happened yet.
    let log_path = status.status.as_ref().unwrap().log_path.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (argv, log) = loop {
        let argv = cmdline(pid);
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if (argv == ["sleep", "3600"] && log.contains("stdout F started"))
            || std::time::Instant::now() > deadline
        {
            break (argv, log);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(argv, ["sleep", "3600"], "pid {pid}");
    assert!(log.contains("stdout F started"), "container log: {log}");
    // The container lives in the Pod's cgroup, as the kubelet arranges it.
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(
        cgroup.contains(&format!("{cgroup_root}/kubepods/besteffort/pod{uid}/")),
        "{cgroup}"
    );
    // A shim serves the sandbox; runc keeps its state in this instance's root.
    assert!(
        !leftovers::processes_mentioning(&socket).is_empty(),
        "no shim mentions {socket}"
    );
    assert!(
        containerd
            .runc_root()
            .join("k8s.io")
            .join(&pod.container_id)
            .exists()
    );
    let netns_before: Vec<_> = std::fs::read_dir("/var/run/netns")
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();

    drop(cri);
    drop(containerd);

    assert!(
        !Path::new(&format!("/proc/{pid}")).exists() || cmdline(pid) != ["sleep", "3600"],
        "the container process {pid} outlived the teardown"
    );
    assert_eq!(
        leftovers::processes_mentioning(&dir.display().to_string()),
        vec![]
    );
    assert_eq!(
        leftovers::mounts_under(&dir),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(
        leftovers::cgroup_dirs(&cgroup_root),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(!dir.exists(), "{} still exists", dir.display());
    let netns_after: Vec<_> = std::fs::read_dir("/var/run/netns")
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(
        netns_after, netns_before,
        "network namespaces in /var/run/netns changed"
    );
}
