//! Explains a failing connection in one sentence: the clients coord wraps report a TLS
//! problem as "no host reachable" after their whole connect timeout. While a connect is
//! still trying, an adapter runs [`diagnose`] beside it; a definite answer (the server
//! speaks TLS to a plaintext client, its certificate is not signed by the configured CA,
//! it refuses this client's certificate) ends the connect at once with a typed error.
//!
//! The probe is one TCP connection and one TLS handshake per host, made only while a
//! connect is failing; it never carries data and never logs key material.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::AsyncReadExt;

use crate::error::{Error, ErrorKind, Result};
use crate::raw::connstr::{HostPort, TlsFiles};

/// How the client is configured to connect.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The scheme the user wrote (`zk`, `zk+tls`, `etcd`, `etcd+https`).
    pub scheme: &'static str,
    /// The TLS scheme to suggest to a plaintext client (`zk+tls`, `etcd+https`).
    pub tls_scheme: &'static str,
    /// The hosts to probe.
    pub hosts: Vec<HostPort>,
    /// `None` for a plaintext client; the TLS files otherwise.
    pub tls: Option<TlsFiles>,
}

/// How long one host's probe may take.
const STEP: Duration = Duration::from_secs(2);

/// The reason connections to `probe.hosts` fail, if a handshake shows one; `None` when
/// nothing definite is found (the host is down, or TLS is fine and the trouble is
/// elsewhere).
///
/// # Cancel safety
///
/// Cancel-safe: dropping it drops the probe's connection.
pub async fn diagnose(probe: &Probe) -> Option<Error> {
    for host in &probe.hosts {
        let found = match &probe.tls {
            None => speaks_tls(host).await.then(|| plaintext_to_tls(probe, host)),
            Some(files) => match client_config(files) {
                Ok(config) => tls_problem(probe, files, host, config).await,
                Err(e) => Some(e),
            },
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Runs `connect`; if it has not succeeded after `after`, runs [`diagnose`] beside it
/// and fails at once with a definite diagnosis. A connect that fails sooner with
/// `Unavailable` or `Timeout` is diagnosed once before its error is returned.
///
/// # Cancel safety
///
/// As `connect`.
pub async fn connect_or_explain<T, F>(probe: &Probe, after: Duration, connect: F) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    crate::raw::reach::explained(after, connect, || diagnose(probe)).await
}

fn plaintext_to_tls(probe: &Probe, host: &HostPort) -> Error {
    Error::config_invalid(format!(
        "{host} answers with TLS, but the connection string says {}://: use {}:// with tls_ca=<CA file> \
         (and tls_cert/tls_key if the server wants a client certificate)",
        probe.scheme, probe.tls_scheme
    ))
}

/// Whether `host` answers a TLS client hello with a certificate.
async fn speaks_tls(host: &HostPort) -> bool {
    let seen = Arc::new(AtomicBool::new(false));
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert { seen: seen.clone() }))
                .with_no_client_auth()
        });
    let Ok(config) = config else { return false };
    let _ = handshake(host, Arc::new(config)).await;
    seen.load(Ordering::SeqCst)
}

/// What a real handshake with the client's own settings says.
async fn tls_problem(
    probe: &Probe,
    files: &TlsFiles,
    host: &HostPort,
    config: rustls::ClientConfig,
) -> Option<Error> {
    let err = match handshake(host, Arc::new(config)).await {
        Ok(None) | Err(None) => return None,
        Ok(Some(e)) | Err(Some(e)) => e,
    };
    let ca = files.ca_file.display();
    Some(match err {
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => Error::config_invalid(format!(
            "the certificate of {host} is not signed by a CA in tls_ca={ca}: point tls_ca at the CA that signs the servers' certificates"
        )),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => Error::config_invalid(format!(
            "the certificate of {host} does not name {}: connect by a name or address the certificate lists",
            host.host
        )),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet,
        ) => Error::config_invalid(format!(
            "the certificate of {host} is expired or not yet valid (checked against tls_ca={ca})"
        )),
        rustls::Error::InvalidCertificate(other) => Error::config_invalid(format!(
            "the certificate of {host} is not acceptable ({other:?}; CA file tls_ca={ca})"
        )),
        rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::HandshakeFailure
            | AlertDescription::AccessDenied,
        ) => Error::new(
            ErrorKind::PermissionDenied,
            match &files.identity {
                None => format!(
                    "{host} requires a client certificate: set tls_cert and tls_key to a certificate and key signed by a CA the server trusts"
                ),
                Some((cert, _)) => format!(
                    "{host} refused the client certificate tls_cert={}: set tls_cert and tls_key to a certificate signed by a CA the server trusts",
                    cert.display()
                ),
            },
        ),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            Error::config_invalid(format!(
                "{host} does not speak TLS: use {}:// without tls_* options, or the server's TLS port",
                plain_scheme(probe.tls_scheme)
            ))
        }
        _ => return None,
    })
}

fn plain_scheme(tls_scheme: &str) -> &str {
    tls_scheme.split('+').next().unwrap_or(tls_scheme)
}

/// One handshake, then a short read for a refusal sent after it (TLS 1.3 servers check
/// the client certificate after the client's last handshake message). `Ok(None)`: fine;
/// `Ok(Some)`/`Err(Some)`: a TLS error; `Err(None)`: no connection or no answer.
async fn handshake(
    host: &HostPort,
    config: Arc<rustls::ClientConfig>,
) -> std::result::Result<Option<rustls::Error>, Option<rustls::Error>> {
    let name = ServerName::try_from(host.host.clone()).map_err(|_| None)?;
    let tcp = tokio::time::timeout(
        STEP,
        tokio::net::TcpStream::connect((host.host.as_str(), host.port)),
    )
    .await
    .map_err(|_| None)?
    .map_err(|_| None)?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut stream = match tokio::time::timeout(STEP, connector.connect(name, tcp)).await {
        Err(_) => return Err(None),
        Ok(Err(e)) => return Err(tls_error(&e)),
        Ok(Ok(s)) => s,
    };
    let mut byte = [0u8; 1];
    match tokio::time::timeout(STEP / 2, stream.read(&mut byte)).await {
        Ok(Err(e)) => Ok(tls_error(&e)),
        _ => Ok(None),
    }
}

fn tls_error(e: &std::io::Error) -> Option<rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned()
}

/// Installs rustls' `ring` provider as the process default unless one is installed.
///
/// rustls picks its provider from its crate features; when a build enables two (one
/// client library asks for `aws-lc-rs`, another for `ring`), a client that asks for the
/// default panics. Adapters call this before handing TLS settings to such a client, so
/// `zk+tls://` and `etcd+https://` work in one binary. An application that installed its
/// own provider keeps it.
pub fn ensure_default_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a default then exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client's TLS settings as rustls sees them.
fn client_config(files: &TlsFiles) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(&files.ca_file, "tls_ca")? {
        roots
            .add(cert)
            .map_err(|e| Error::config_invalid(format!("tls_ca={}: {e}", files.ca_file.display())))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("TLS set-up: {e}")))?
        .with_root_certificates(roots);
    match &files.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = certs(cert, "tls_cert")?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|_| {
                Error::config_invalid(format!("tls_key={} holds no PEM private key", key.display()))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::config_invalid(format!("tls_cert/tls_key={}: {e}", cert.display())))
        }
    }
}

fn certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::config_invalid(format!("cannot read {key}={}: {e}", path.display())))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::config_invalid(format!("{key}={}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::config_invalid(format!(
            "{key}={} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// Accepts any certificate and notes that one was presented (the server speaks TLS).
#[derive(Debug)]
struct AnyCert {
    seen: Arc<AtomicBool>,
}

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        self.seen.store(true, Ordering::SeqCst);
        // Stop here: nothing is ever sent over this connection.
        Err(rustls::Error::General("probe only".into()))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("probe only".into()))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("probe only".into()))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider().signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nothing_listening_is_no_diagnosis() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let probe = Probe {
            scheme: "zk",
            tls_scheme: "zk+tls",
            hosts: vec![HostPort {
                host: "127.0.0.1".into(),
                port,
            }],
            tls: None,
        };
        assert!(diagnose(&probe).await.is_none());
    }

    #[tokio::test]
    async fn unreadable_ca_is_named() {
        let probe = Probe {
            scheme: "zk+tls",
            tls_scheme: "zk+tls",
            hosts: vec![HostPort {
                host: "127.0.0.1".into(),
                port: 1,
            }],
            tls: Some(TlsFiles {
                ca_file: "/nonexistent/ca.pem".into(),
                identity: None,
            }),
        };
        let e = diagnose(&probe).await.expect("a diagnosis");
        assert_eq!(e.kind(), ErrorKind::ConfigInvalid);
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
