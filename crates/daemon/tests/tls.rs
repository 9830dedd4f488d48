//! `[tls]` (#61): the public listener over HTTPS, HTTP/1.1 and h2 by ALPN, TLS 1.2 and
//! 1.3 only, and a certificate replaced without a restart: on SIGHUP a new pair is
//! taken for new handshakes while open connections go on, a garbled file or a key
//! that is not the certificate's keeps the pair in force. `tlogd verify` and the load
//! generator work over `https://` with the test CA in `SSL_CERT_FILE`.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
    PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// A test CA and the server certificates it signs for `localhost` and 127.0.0.1.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "tlogd tls test CA");
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A server certificate named `name` (its CN) and its key, as PEM.
    fn leaf(&self, name: &str) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        p.distinguished_name = dn;
        p.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress("127.0.0.1".parse().unwrap()),
        ];
        p.is_ca = IsCa::ExplicitNoCa;
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }
}

/// Write a pair where the daemon reads it: each file replaced whole (a rename), as a
/// renewal should.
fn install(dir: &Path, cert_pem: &str, key_pem: &str) {
    for (name, text) in [("cert.pem", cert_pem), ("key.pem", key_pem)] {
        let tmp = dir.join(format!("{name}.new"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

/// A TLS connection to `127.0.0.1:port` offering `alpn`, trusting only `ca`: the
/// stream, the protocol agreed and the server's certificate.
async fn connect(
    port: u16,
    ca: &[u8],
    alpn: &[u8],
) -> Result<
    (
        tokio_rustls::client::TlsStream<TcpStream>,
        Option<Vec<u8>>,
        Vec<u8>,
    ),
    String,
> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.to_vec())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let leaf = session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    Ok((tls, alpn, leaf))
}

/// An HTTP/1.1 sender over a TLS connection.
async fn h1(port: u16, ca: &[u8]) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let (tls, alpn, _) = connect(port, ca, b"http/1.1").await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// `POST /add` of `entry` on `send`: the index.
async fn add_h1(
    send: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    entry: &str,
) -> u64 {
    let req = hyper::Request::post("/add")
        .header("host", "localhost")
        .body(Full::new(Bytes::from(entry.to_string())))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    std::str::from_utf8(&body).unwrap().parse().unwrap()
}

/// The certificate new handshakes get, once it is `want` (within 10 s).
async fn wait_served(port: u16, ca: &[u8], want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, leaf) = connect(port, ca, b"http/1.1").await.unwrap();
        if leaf == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sighup(d: &Daemon) {
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &d.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_h1_and_h2_and_takes_a_new_certificate_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new();
    let ca_der = ca.cert.der().to_vec();
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    let (cert1, key1, der1) = ca.leaf("first");
    install(dir, &cert1, &key1);
    // Reloads come from SIGHUP here (the files are looked at once an hour): each step
    // below is then deterministic. The look at the files is tested in serve::tls.
    let mut d = Daemon::start(
        dir,
        &format!(
            "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nreload_interval_ms = 3600000\n",
            dir.join("cert.pem").display(),
            dir.join("key.pem").display()
        ),
    );
    let port: u16 = d.url.rsplit(':').next().unwrap().parse().unwrap();
    let https = format!("https://localhost:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while connect(port, &ca_der, b"http/1.1").await.is_err() {
        if let Ok(Some(status)) = d.child.try_wait() {
            panic!("tlogd exited early: {status}");
        }
        assert!(Instant::now() < deadline, "tlogd did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // HTTP/1.1 by ALPN.
    let mut first = h1(port, &ca_der).await;
    assert_eq!(add_h1(&mut first, "over http/1.1").await, 0);
    // h2 by ALPN, two adds on one connection.
    let (tls, alpn, leaf) = connect(port, &ca_der, b"h2").await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(leaf, der1);
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut indexes = Vec::new();
    for entry in ["over h2, 1", "over h2, 2"] {
        let mut send = send.clone();
        let req = hyper::Request::post(format!("{https}/add"))
            .body(Full::new(Bytes::from(entry)))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.version(), hyper::Version::HTTP_2);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        indexes.push(std::str::from_utf8(&body).unwrap().parse::<u64>().unwrap());
    }
    indexes.sort();
    assert_eq!(indexes, [1, 2]);
    // Plain HTTP on the HTTPS port is no request: no answer, and nothing logged.
    let plain = Http::new()
        .post(
            &format!("{}/add", d.url),
            Bytes::from_static(b"in the clear"),
        )
        .await;
    assert!(
        plain.is_err() || plain.as_ref().is_ok_and(|r| r.0 != 200),
        "{plain:?}"
    );

    // A renewed certificate: new handshakes get it, the open connection goes on.
    let (cert2, key2, der2) = ca.leaf("second");
    install(dir, &cert2, &key2);
    sighup(&d);
    wait_served(port, &ca_der, &der2).await;
    assert_eq!(add_h1(&mut first, "on the old connection").await, 3);

    // A garbled certificate, then a key that is not the certificate's: the pair in
    // force stays, through SIGHUPs, and the daemon keeps serving.
    let (cert3, _, _) = ca.leaf("third");
    let (_, key4, _) = ca.leaf("fourth");
    let metrics = Http::new();
    for (cert, key) in [
        ("-----BEGIN CERTIFICATE-----\nnot base64\n", key2.as_str()),
        (cert3.as_str(), key4.as_str()),
    ] {
        let name = "tlogd_tls_certificate_reloads_total{result=\"error\"}";
        let errors = metric_at(&metrics, &d.metrics_url, name).await;
        install(dir, cert, key);
        sighup(&d);
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric_at(&metrics, &d.metrics_url, name).await <= errors {
            assert!(
                Instant::now() < deadline,
                "the broken pair was not looked at"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, _, leaf) = connect(port, &ca_der, b"http/1.1").await.unwrap();
        assert_eq!(leaf, der2);
    }
    assert!(d.child.try_wait().unwrap().is_none(), "tlogd stopped");

    // Clients that read the roots from SSL_CERT_FILE, as a public log's clients use
    // the system's: the load generator writes and verifies, then `tlogd verify`.
    // SAFETY: set before the load generator first reads it, in the only test of this
    // binary; no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("ca.pem")) };
    let report = tlog_loadgen::run(<tlog_loadgen::Args as clap::Parser>::parse_from([
        "tlog-loadgen",
        "--log-url",
        &https,
        "--log-public-key",
        &verifier().to_vkey(),
        "--writers",
        "8",
        "--leaf-write-goal",
        "200",
        "--max-runtime",
        "60",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(report.ok, "{:?}", report.failure_reasons);
    assert_eq!(report.transport, "http/1.1");
    // And over HTTP/2 (ALPN h2), the writers' adds multiplexed on two connections.
    let report = tlog_loadgen::run(<tlog_loadgen::Args as clap::Parser>::parse_from([
        "tlog-loadgen",
        "--log-url",
        &https,
        "--log-public-key",
        &verifier().to_vkey(),
        "--writers",
        "8",
        "--h2c",
        "--h2c-connections",
        "2",
        "--leaf-write-goal",
        "200",
        "--max-runtime",
        "60",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(report.ok, "{:?}", report.failure_reasons);
    assert_eq!(report.transport, "h2");
    assert!(report.tree_size_end >= 400, "{}", report.tree_size_end);
    let out = tokio::task::spawn_blocking({
        let https = https.clone();
        let ca_file = dir.join("ca.pem");
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
                .args(["verify", &https, "--log-public-key", &verifier().to_vkey()])
                .env("SSL_CERT_FILE", ca_file)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("OK "),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.terminate().success());
}

/// A metric's value from the daemon's `/metrics` (0 when absent).
async fn metric_at(http: &Http, metrics_url: &str, name: &str) -> f64 {
    match http.get(&format!("{metrics_url}/metrics")).await {
        Ok((200, _, body)) => {
            let text = String::from_utf8_lossy(&body);
            if text.contains(name) {
                metric(&text, name)
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}
