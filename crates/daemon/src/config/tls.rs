//! `[tls]`: HTTPS on the public listener.

use std::path::PathBuf;

use serde::Deserialize;

/// `[tls]`: serve the public listener over HTTPS with the certificate and key in these
/// PEM files, reloaded when they change (or on SIGHUP). The metrics listener stays
/// plain.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, leaf first (PEM).
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key_file: PathBuf,
    /// How often the two files are looked at for a change, in ms (a `stat` each).
    #[serde(default = "default_reload_interval_ms")]
    pub reload_interval_ms: u64,
}

fn default_reload_interval_ms() -> u64 {
    10_000
}
