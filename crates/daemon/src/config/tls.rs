//! `[tls]`: HTTPS on the public listener, from certificate files or from an ACME CA.

use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;

/// `[tls]`: serve the public listener over HTTPS, with the certificate and key in two
/// PEM files (`cert_file`, `key_file`), re-read when they change or on SIGHUP, or with
/// certificates obtained and renewed from an ACME CA (`[tls.acme]`). The metrics
/// listener stays plain.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, leaf first (PEM).
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key_file: Option<PathBuf>,
    /// How often the two files are looked at for a change, in ms (a `stat` each).
    #[serde(default = "default_reload_interval_ms")]
    pub reload_interval_ms: u64,
    /// Certificates from an ACME CA instead of files.
    pub acme: Option<AcmeConfig>,
}

/// `[tls.acme]`: certificates for `domains` from an ACME CA (RFC 8555), proven with
/// TLS-ALPN-01 (RFC 8737) on the public listener itself, which must therefore be
/// reachable on port 443 of every domain.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    /// The names the certificate is for (DNS names, no wildcards).
    pub domains: Vec<String>,
    /// The CA's directory (default: Let's Encrypt's production one).
    #[serde(default = "default_directory_url")]
    pub directory_url: String,
    /// Contact URLs for the account (`mailto:ops@example.com`).
    #[serde(default)]
    pub contact: Vec<String>,
    /// Where the account key and the certificates are kept (mode 0700): a restart
    /// serves the cached certificate at once, with or without the CA.
    pub cache_dir: PathBuf,
    /// The CA's terms of service must be agreed to, by saying so here.
    #[serde(default)]
    pub accept_terms_of_service: bool,
    /// Trust this PEM root for the CA's own HTTPS (a test or private CA such as
    /// Pebble) instead of the system's roots.
    pub directory_ca_file: Option<PathBuf>,
    /// After a failed order, the first retry comes this long after, in ms; each
    /// failure doubles it, up to an hour.
    #[serde(default = "default_retry_interval_ms")]
    pub retry_interval_ms: u64,
    /// How often the certificate's remaining validity is looked at, in ms; it is
    /// renewed once a third of its lifetime is left.
    #[serde(default = "default_check_interval_ms")]
    pub check_interval_ms: u64,
    /// Prove the names with HTTP-01 (RFC 8555 §8.3) on a plain HTTP listener at this
    /// address (`0.0.0.0:80`: the CA asks port 80) instead of TLS-ALPN-01; the
    /// listener answers the CA's challenge requests and redirects everything else to
    /// HTTPS.
    pub http_listen: Option<std::net::SocketAddr>,
    /// Keep the account and the certificate in the log's storage, sealed with the
    /// 32-byte key in this file (64 hex digits or base64: `openssl rand -hex 32`),
    /// instead of only in `cache_dir`: every frontend of a shared store then serves
    /// one certificate, ordered by one of them (the others answer its challenges).
    /// Every frontend needs the same key.
    pub store_key_file: Option<PathBuf>,
    /// With `store_key_file`: the log whose storage holds the state (a `[[logs]]`
    /// name; default: the first log).
    pub store_log: Option<String>,
    /// With `store_key_file`: how often each frontend reads the shared state, in ms
    /// (a certificate ordered by another frontend is served within one; a challenge
    /// is given two before the CA is told to look).
    #[serde(default = "default_store_poll_interval_ms")]
    pub store_poll_interval_ms: u64,
}

fn default_store_poll_interval_ms() -> u64 {
    2_000
}

/// Let's Encrypt's production directory.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

fn default_directory_url() -> String {
    LETS_ENCRYPT.into()
}

fn default_reload_interval_ms() -> u64 {
    10_000
}

fn default_retry_interval_ms() -> u64 {
    60_000
}

fn default_check_interval_ms() -> u64 {
    3_600_000
}

impl TlsConfig {
    /// Files or ACME, not both; a whole pair of files; ACME with names and the terms
    /// agreed to.
    pub fn validate(&self) -> anyhow::Result<()> {
        match (&self.cert_file, &self.key_file, &self.acme) {
            (Some(_), Some(_), None) => Ok(()),
            (None, None, Some(acme)) => {
                if acme.domains.is_empty() {
                    bail!("[tls.acme] needs `domains`: the names the certificate is for");
                }
                if let Some(d) = acme.domains.iter().find(|d| {
                    d.is_empty() || d.starts_with('*') || d.parse::<std::net::IpAddr>().is_ok()
                }) {
                    bail!(
                        "[tls.acme] domain {d:?}: a DNS name (no wildcard, no address) is needed for TLS-ALPN-01"
                    );
                }
                if acme.store_log.is_some() && acme.store_key_file.is_none() {
                    bail!(
                        "[tls.acme] `store_log` needs `store_key_file`, the key that seals the state kept there"
                    );
                }
                if !acme.accept_terms_of_service {
                    bail!(
                        "[tls.acme] `accept_terms_of_service = true` is required: the CA ({}) asks its subscribers to agree to its terms",
                        acme.directory_url
                    );
                }
                Ok(())
            }
            (_, _, Some(_)) => {
                bail!("[tls]: either `cert_file` and `key_file`, or `[tls.acme]`, not both")
            }
            (Some(_), None, None) | (None, Some(_), None) => {
                bail!("[tls]: `cert_file` and `key_file` go together")
            }
            (None, None, None) => {
                bail!("[tls]: `cert_file` and `key_file`, or a `[tls.acme]` section, are needed")
            }
        }
    }
}
