//! An OTLP/gRPC receiver in the test process, for an agent that exports over
//! the network as a deployed one does (the DaemonSet's, in its own Pod):
//! every request it receives becomes one line of an OTLP-JSON file, as
//! `podtrace run` writes without an endpoint, so that
//! [`crate::otlp_json::read_spans`] reads what either way delivered.

use std::{
    fs::File,
    io::Write as _,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::Context as _;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};

use crate::otlp_json::{ExportedSpan, read_spans};

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    file: PathBuf,
    /// Serves the requests; dropped with the receiver, which stops it.
    _runtime: tokio::runtime::Runtime,
}

impl OtlpReceiver {
    /// Listens on `ip` (a port the kernel picks) and appends what it
    /// receives to `file`.
    pub fn start(ip: IpAddr, file: &Path) -> anyhow::Result<Self> {
        let sink = Sink {
            file: Arc::new(Mutex::new(
                File::create(file).with_context(|| format!("creating {}", file.display()))?,
            )),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the receiver's runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind((ip, 0)))
            .with_context(|| format!("listening on {ip}"))?;
        let addr = listener.local_addr().context("the receiver's address")?;
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(sink))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        Ok(Self {
            addr,
            file: file.to_owned(),
            _runtime: runtime,
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every span received so far, in the order received.
    pub fn spans(&self) -> anyhow::Result<Vec<ExportedSpan>> {
        read_spans(&self.file)
    }
}

/// Writes each request as a line of OTLP-JSON.
struct Sink {
    file: Arc<Mutex<File>>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut line = serde_json::to_vec(request.get_ref())
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| tonic::Status::internal("the file's lock is poisoned"))?;
        file.write_all(&line)
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}
