//! Real components started by live tests and by `cargo xtask demo`: etcd,
//! containerd with runc and the CRI, the certificates and images they need,
//! a CRI client playing the kubelet, and an etcd client writing Pods as
//! kube-apiserver's storage layer does, through a Go relay (`demo-apiserver`),
//! and a real control plane (kube-apiserver, kube-scheduler, kubelet) from
//! binaries the user provides (`control_plane`).
//!
//! Everything runs on this machine as root, from Debian's packages and, for
//! the relay, built with a Go toolchain (both installed by `cargo xtask
//! setup`), on loopback ports and in temporary directories.
//! Every process started here is stopped when its owner is dropped — also
//! when a test panics — and the kernel kills it if the starting thread dies
//! without dropping it.

pub mod apiserver_load;
pub mod apiserver_role;
pub mod certs;
pub mod containerd;
pub mod control_plane;
pub mod cri;
pub mod demo_apiserver;
pub mod etcd;
pub mod etcd_load;
pub mod go_program;
pub mod images;
pub mod leftovers;
pub mod load_client;
mod process;

pub use apiserver_role::{ApiserverRole, EtcdKv, StoredPod};
pub use certs::{CertFiles, Pki};
pub use containerd::{Containerd, ContainerdOptions};
pub use control_plane::{ControlPlane, ControlPlaneOptions, CreatedPod};
pub use cri::{CriClient, PodHandles, PodTemplate};
pub use demo_apiserver::{DemoApiserver, DemoApiserverBinary};
pub use etcd::{Etcd, EtcdBinaries, EtcdOptions, EtcdWatch, PreparedEtcd};
