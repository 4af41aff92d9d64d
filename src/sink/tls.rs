//! TLS to a doris/mysql sink: `sink.tls` (MySQL's `--ssl-mode` names), `sink.ca_file` and
//! the client identity turned into mysql_async's [`SslOpts`] for the MySQL protocol and
//! into the settings of the reqwest client that Stream Load uses, so both paths to one
//! Doris trust the same CA the same way.
//!
//! | `sink.tls`        | MySQL protocol                    | Stream Load over https      |
//! |-------------------|-----------------------------------|-----------------------------|
//! | `disabled`        | plain text                        | verified (system roots)     |
//! | `required`        | encrypted, certificate not checked| certificate not checked     |
//! | `verify_ca`       | chain checked, host name not      | chain checked, host name not|
//! | `verify_identity` | chain and host name checked       | chain and host name checked |
//!
//! With `ca_file` only its CAs are trusted, on both paths (MySQL's `--ssl-ca` semantics);
//! without it, the system roots. mysql_async never falls back to plain text: with TLS on, a
//! server that does not offer it is an error, not a downgrade.

use crate::config::SinkTls;
use crate::sink::SinkError;
use mysql_async::{ClientIdentity, SslOpts};
use std::path::PathBuf;

/// The TLS settings of one doris/mysql sink, checked by config validation.
#[derive(Clone, Default)]
pub struct TlsSettings {
    /// The mode in effect ([`crate::config::SinkConfig::tls_mode`]).
    pub mode: SinkTls,
    /// PEM (or DER) CA certificates to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// PKCS#12 archive with the client certificate and key.
    pub identity_file: Option<PathBuf>,
    /// Its password.
    pub identity_password: Option<String>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("mode", &self.mode)
            .field("ca_file", &self.ca_file)
            .field("identity_file", &self.identity_file)
            .field(
                "identity_password",
                &self.identity_password.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

impl TlsSettings {
    /// mysql_async's options: `None` for plain text.
    pub fn ssl_opts(&self) -> Option<SslOpts> {
        let (accept_any_cert, skip_host_name) = match self.mode {
            SinkTls::Disabled => return None,
            SinkTls::Required => (true, true),
            SinkTls::VerifyCa => (false, true),
            SinkTls::VerifyIdentity => (false, false),
        };
        let mut opts = SslOpts::default()
            .with_danger_accept_invalid_certs(accept_any_cert)
            .with_danger_skip_domain_validation(skip_host_name);
        if let Some(ca) = &self.ca_file {
            opts = opts
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true);
        }
        if let Some(file) = &self.identity_file {
            let mut id = ClientIdentity::new(file.clone().into());
            if let Some(p) = &self.identity_password {
                id = id.with_password(p.clone());
            }
            opts = opts.with_client_identity(Some(id));
        }
        Some(opts)
    }

    /// The same trust for Stream Load's HTTP client (applies when its url is https).
    pub fn http_client(
        &self,
        mut b: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, SinkError> {
        match self.mode {
            SinkTls::Disabled | SinkTls::VerifyIdentity => {}
            SinkTls::Required => b = b.danger_accept_invalid_certs(true),
            SinkTls::VerifyCa => b = b.danger_accept_invalid_hostnames(true),
        }
        if let Some(ca) = &self.ca_file {
            let pem = read("sink.ca_file", ca)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| SinkError::Rejected(format!("sink.ca_file: {e}")))?;
            if certs.is_empty() {
                return Err(SinkError::Rejected(format!(
                    "sink.ca_file: no PEM certificate in {}",
                    ca.display()
                )));
            }
            b = b.tls_built_in_root_certs(false);
            for cert in certs {
                b = b.add_root_certificate(cert);
            }
        }
        if let Some(file) = &self.identity_file {
            let der = read("sink.client_identity_file", file)?;
            let password = self.identity_password.as_deref().unwrap_or("");
            let id = reqwest::Identity::from_pkcs12_der(&der, password)
                .map_err(|e| SinkError::Rejected(format!("sink.client_identity_file: {e}")))?;
            b = b.identity(id);
        }
        Ok(b)
    }
}

fn read(key: &str, path: &std::path::Path) -> Result<Vec<u8>, SinkError> {
    std::fs::read(path)
        .map_err(|e| SinkError::Rejected(format!("{key}: cannot read {}: {e}", path.display())))
}

/// A clearer message for the TLS failures of a MySQL-protocol connection, or `None` for
/// other errors.
pub fn explain(e: &mysql_async::Error) -> Option<String> {
    use mysql_async::{DriverError, Error, IoError};
    match e {
        Error::Io(IoError::Tls(t)) => Some(format!(
            "TLS handshake with the sink failed ({t}); check sink.tls and sink.ca_file"
        )),
        Error::Driver(DriverError::NoClientSslFlagFromServer) => Some(
            "the sink does not offer TLS but sink.tls requires it; \
             enable TLS on the server or set sink.tls = \"disabled\""
                .to_string(),
        ),
        _ => None,
    }
}

/// MySQL's "insecure transport" refusal, and the access denied that MariaDB answers
/// instead (under `require_secure_transport` or to a `REQUIRE SSL` user) to a plain-text
/// login: with TLS off, say that TLS may be what is missing.
pub fn plain_text_hint(code: u16) -> Option<&'static str> {
    const ER_ACCESS_DENIED_ERROR: u16 = 1045;
    const ER_SECURE_TRANSPORT_REQUIRED: u16 = 3159;
    matches!(code, ER_ACCESS_DENIED_ERROR | ER_SECURE_TRANSPORT_REQUIRED).then_some(
        " (sink.tls is \"disabled\": a server that requires TLS refuses plain-text logins; \
         set sink.tls = \"verify_identity\" with sink.ca_file, or \"required\")",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mode: SinkTls, ca: bool) -> TlsSettings {
        TlsSettings {
            mode,
            ca_file: ca.then(|| PathBuf::from("/ca.pem")),
            ..TlsSettings::default()
        }
    }

    #[test]
    fn modes_map_to_mysql_async_options() {
        assert!(settings(SinkTls::Disabled, false).ssl_opts().is_none());
        let req = settings(SinkTls::Required, false).ssl_opts().expect("tls");
        assert!(req.accept_invalid_certs() && req.skip_domain_validation());
        let ca = settings(SinkTls::VerifyCa, true).ssl_opts().expect("tls");
        assert!(!ca.accept_invalid_certs() && ca.skip_domain_validation());
        assert!(ca.disable_built_in_roots());
        assert_eq!(ca.root_certs().len(), 1);
        let id = settings(SinkTls::VerifyIdentity, false)
            .ssl_opts()
            .expect("tls");
        assert!(!id.accept_invalid_certs() && !id.skip_domain_validation());
        assert!(!id.disable_built_in_roots(), "no ca_file: the system roots");
    }

    #[test]
    fn debug_hides_the_identity_password() {
        let s = TlsSettings {
            identity_password: Some("hunter2".into()),
            ..TlsSettings::default()
        };
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
