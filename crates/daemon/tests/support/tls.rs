//! A TLS front for tests: a private CA and a certificate for 127.0.0.1 made with the
//! `openssl` command, and a listener on 127.0.0.1 that terminates TLS and forwards the
//! bytes to a plain HTTP server. Clients trust the CA through `SSL_CERT_FILE`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A running TLS front.
pub struct TlsFront {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The CA certificate (PEM) that signed the front's certificate.
    pub ca: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for IP 127.0.0.1 in `dir`: (ca.pem, srv.pem, srv.key).
fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=tlogd test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", "srv.key", "-out", "srv.csr"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("srv.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "srv.ext",
            "-out",
            "srv.pem",
        ],
    );
    (dir.join("ca.pem"), dir.join("srv.pem"), dir.join("srv.key"))
}

impl TlsFront {
    /// Terminate TLS on a free port of 127.0.0.1 and forward to `target`; certificates
    /// go to `dir`.
    pub async fn start(dir: &Path, target: SocketAddr) -> TlsFront {
        std::fs::create_dir_all(dir).unwrap();
        let (ca, cert, key) = make_certs(dir);
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(&key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsFront { url, ca, task }
    }
}
