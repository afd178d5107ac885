//! A throwaway PKI generated at run time, as files that etcd, etcdctl and a
//! kube-apiserver take on their command lines.
//!
//! In: a directory and the client identities wanted. Out: PEM files in that
//! directory — a CA, a server certificate valid for `127.0.0.1`, `::1` and
//! `localhost` (usable as a client certificate too, as etcd peers need), and
//! one client certificate per identity with the identity as its Common Name
//! (which etcd takes as the user name when a request carries no password).
//! Private keys are created with mode 0600.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::process::{write_file, write_private};

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The generated CA, server and client certificates.
#[derive(Debug, Clone)]
pub struct Pki {
    ca_cert: PathBuf,
    server: CertFiles,
    clients: Vec<(String, CertFiles)>,
}

impl Pki {
    /// Generates a CA, a loopback server certificate and one client
    /// certificate per name in `client_names`, into `dir` (created if needed).
    pub fn generate(dir: &Path, client_names: &[&str]) -> anyhow::Result<Self> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "podtrace test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .context("self-signing the CA certificate")?;
        let ca_cert_path = dir.join("ca.crt");
        write_file(&ca_cert_path, ca_cert.pem().as_bytes())?;
        let issuer = Issuer::new(ca_params, ca_key);

        let server = issue(
            dir,
            "server",
            &issuer,
            &["127.0.0.1", "::1", "localhost"],
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
        let clients = client_names
            .iter()
            .map(|name| {
                let files = issue(
                    dir,
                    name,
                    &issuer,
                    &[],
                    &[ExtendedKeyUsagePurpose::ClientAuth],
                )?;
                Ok((name.to_string(), files))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            ca_cert: ca_cert_path,
            server,
            clients,
        })
    }

    /// The CA certificate, for `--trusted-ca-file` / `--cacert`.
    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// The server certificate (127.0.0.1, ::1, localhost).
    pub fn server(&self) -> &CertFiles {
        &self.server
    }

    /// The client certificate whose Common Name is `name`.
    pub fn client(&self, name: &str) -> anyhow::Result<&CertFiles> {
        match self.clients.iter().find(|(client, _)| client == name) {
            Some((_, files)) => Ok(files),
            None => bail!(
                "no client certificate for {name:?}; generated: {:?}",
                self.clients.iter().map(|(n, _)| n).collect::<Vec<_>>()
            ),
        }
    }
}

/// Issues a certificate with Common Name `name` signed by `issuer` and writes
/// `<name>.crt` and `<name>.key` (0600).
fn issue(
    dir: &Path,
    name: &str,
    issuer: &Issuer<'_, KeyPair>,
    subject_alt_names: &[&str],
    usages: &[ExtendedKeyUsagePurpose],
) -> anyhow::Result<CertFiles> {
    let key = KeyPair::generate().with_context(|| format!("generating the key for {name}"))?;
    let sans: Vec<String> = subject_alt_names.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans)
        .with_context(|| format!("certificate parameters for {name}"))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = usages.to_vec();
    // As real CAs do: verifiers use the authority key id to find the issuer.
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .signed_by(&key, issuer)
        .with_context(|| format!("signing the certificate for {name}"))?;
    let files = CertFiles {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    write_file(&files.cert, cert.pem().as_bytes())?;
    write_private(&files.key, key.serialize_pem().as_bytes())?;
    Ok(files)
}
