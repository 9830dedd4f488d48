//! `[tls.acme]` (#61) against Pebble, Let's Encrypt's ACME test CA (v2.8.0, with its mock
//! DNS server answering 127.0.0.1 for every name): a fresh daemon obtains a certificate
//! by TLS-ALPN-01 on its own listener and serves the log over HTTPS (`tlogd verify` and
//! the load generator with Pebble's root in `SSL_CERT_FILE`), renews it without a
//! restart (Pebble issues for 12 seconds), keeps serving the certificate in force while
//! the CA is down, and serves the cached one at once after a restart without the CA.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool(name: &str) -> PathBuf {
    tlogd_storage_object::testsupport::find_tool(name)
}

/// Accepts any server certificate: to see which one is served, not to trust it.
#[derive(Debug)]
struct Anything;

impl ServerCertVerifier for Anything {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS connection to 127.0.0.1:`port` for `localhost`, trusting `roots` (PEM) or,
/// without, anything: the stream and the leaf served.
async fn connect(
    port: u16,
    roots: Option<&[u8]>,
) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap();
    let mut config = match roots {
        Some(pem) => {
            let mut store = rustls::RootCertStore::empty();
            for c in rustls::pki_types::pem::PemObject::pem_slice_iter(pem) {
                store.add(c.unwrap()).unwrap();
            }
            builder.with_root_certificates(store).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Anything))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    Ok((tls, leaf))
}

/// `GET path` over a TLS connection to `port`, trusting `roots`: status and body.
async fn https_get(port: u16, roots: &[u8], path: &str) -> Result<(u16, Bytes), String> {
    let (tls, _) = connect(port, Some(roots)).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// The leaf the daemon on `port` serves, once it serves one other than each of
/// `not` (within `secs`).
async fn wait_leaf(d: &mut Daemon, port: u16, not: &[&[u8]], secs: u64) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(Some(status)) = d.child.try_wait() {
            panic!("tlogd exited: {status}");
        }
        if let Ok((_, leaf)) = connect(port, None).await
            && !not.contains(&&leaf[..])
        {
            return leaf;
        }
        assert!(
            Instant::now() < deadline,
            "no new certificate served within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pebble's own HTTPS certificate: a CA of the test and a leaf for 127.0.0.1 (PEM).
fn pebble_tls(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, "pebble test CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = CertificateParams::default();
    p.subject_alt_names = vec![
        SanType::IpAddress("127.0.0.1".parse().unwrap()),
        SanType::DnsName("localhost".try_into().unwrap()),
    ];
    let leaf = p.signed_by(&key, &ca, &ca_key).unwrap();
    let files = (
        dir.join("pebble-ca.pem"),
        dir.join("pebble-cert.pem"),
        dir.join("pebble-key.pem"),
    );
    std::fs::write(&files.0, ca.pem()).unwrap();
    std::fs::write(&files.1, leaf.pem()).unwrap();
    std::fs::write(&files.2, key.serialize_pem()).unwrap();
    files
}

/// Start Pebble (directory on `port`, management on `mport`) validating TLS-ALPN-01 on
/// `tls_port` and HTTP-01 on `http_port`, names resolved by the mock DNS server on `dns`.
fn start_pebble(
    dir: &Path,
    (port, mport): (u16, u16),
    (tls_port, http_port): (u16, u16),
    dns: u16,
) -> Killed {
    let (_, cert, key) = pebble_tls(dir);
    let cfg = dir.join("pebble.json");
    let config = serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{mport}"),
            "certificate": cert,
            "privateKey": key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "retryAfter": { "authz": 1, "order": 1 },
            "profiles": { "default": { "description": "12 seconds", "validityPeriod": 12 } }
        }
    });
    std::fs::write(&cfg, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let child = Command::new(tool("pebble"))
        .arg("-config")
        .arg(&cfg)
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .env("PEBBLE_AUTHZREUSE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pebble");
    Killed(child)
}

/// Pebble's mock DNS server on `dns`: 127.0.0.1 for every name, no IPv6.
fn start_dns(dns: u16) -> Killed {
    Killed(
        Command::new(tool("pebble-challtestsrv"))
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv"),
    )
}

async fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start_tlogd(dir: &Path, cfg: &Path, port: u16, mport: u16) -> Daemon {
    Daemon::spawn(
        dir,
        cfg,
        port,
        mport,
        &Opts {
            rust_log: Some("warn,tlogd::serve::acme=info"),
            ..Opts::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_an_acme_ca_is_obtained_renewed_and_kept_while_the_ca_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (port, mport) = (free_port(), free_port());
    let (pebble_port, pebble_mport, dns) = (free_port(), free_port(), free_port());
    let _dns = start_dns(dns);
    let mut pebble = start_pebble(dir, (pebble_port, pebble_mport), (port, free_port()), dns);
    wait_listening(pebble_port).await;
    wait_listening(pebble_mport).await;
    let pebble_ca = std::fs::read(dir.join("pebble-ca.pem")).unwrap();

    std::fs::write(dir.join("key"), SKEY).unwrap();
    let cfg = dir.join("tlogd.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\norigin = \"{ORIGIN}\"\nprivate_key_file = \"{key}\"\n\
             [storage]\ndir = \"{log}\"\n[checkpoint]\ninterval_ms = 50\n\
             [metrics]\nlisten = \"127.0.0.1:{mport}\"\n\
             [tls.acme]\ndomains = [\"localhost\"]\ndirectory_url = \"https://127.0.0.1:{pebble_port}/dir\"\n\
             directory_ca_file = \"{ca}\"\ncache_dir = \"{cache}\"\naccept_terms_of_service = true\n\
             retry_interval_ms = 500\ncheck_interval_ms = 500\n",
            key = dir.join("key").display(),
            log = dir.join("log").display(),
            ca = dir.join("pebble-ca.pem").display(),
            cache = dir.join("acme").display(),
        ),
    )
    .unwrap();
    let mut d = start_tlogd(dir, &cfg, port, mport);

    // The first certificate, by TLS-ALPN-01 on the daemon's own listener.
    let first = wait_leaf(&mut d, port, &[], 60).await;
    let (_, leaf) = x509_parser::parse_x509_certificate(&first).unwrap();
    let names: Vec<String> = leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["localhost"]);
    // Pebble's root, which the served chain leads to: clients that trust it (from
    // SSL_CERT_FILE) read and write the log over HTTPS.
    let (status, root) = https_get(pebble_mport, &pebble_ca, "/roots/0")
        .await
        .unwrap();
    assert_eq!(status, 200);
    let root_file = dir.join("pebble-root.pem");
    std::fs::write(&root_file, &root).unwrap();
    let (status, _) = https_get(port, &root, "/checkpoint").await.unwrap();
    assert!(status == 200 || status == 404, "{status}");
    let https = format!("https://localhost:{port}");
    // SAFETY: set before the load generator first reads it, in the only test of this
    // binary; no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("SSL_CERT_FILE", &root_file) };
    let report = tlog_loadgen::run(<tlog_loadgen::Args as clap::Parser>::parse_from([
        "tlog-loadgen",
        "--log-url",
        &https,
        "--log-public-key",
        &verifier().to_vkey(),
        "--writers",
        "4",
        "--leaf-write-goal",
        "50",
        "--max-runtime",
        "60",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(report.ok, "{:?}", report.failure_reasons);
    let out = Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["verify", &https, "--log-public-key", &verifier().to_vkey()])
        .env("SSL_CERT_FILE", &root_file)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("OK "),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Renewed once a third of its 12 s is left, without a restart.
    let second = wait_leaf(&mut d, port, &[&first], 30).await;

    // The CA goes away: the renewal of the second fails, and the second is served on.
    drop(pebble.0.kill());
    let _ = pebble.0.wait();
    let http = Http::new();
    let errors = "tlogd_acme_orders_total{result=\"error\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((200, _, body)) = http.get(&format!("{}/metrics", d.metrics_url)).await {
            let text = String::from_utf8_lossy(&body);
            if text.contains(errors) && metric(&text, errors) >= 1.0 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no failed order counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, served) = connect(port, None).await.unwrap();
    assert_eq!(served, second, "the certificate in force was dropped");

    // A restart without the CA serves the cached certificate at once.
    assert!(d.terminate().success());
    let mut d = start_tlogd(dir, &cfg, port, mport);
    let served = wait_leaf(&mut d, port, &[], 30).await;
    assert_eq!(served, second);
    assert!(d.terminate().success());
}

/// `http_listen` asks for HTTP-01: the CA reads the key authorization from the plain
/// listener, the certificate is served on the HTTPS one, and every other request to
/// the plain listener is redirected to HTTPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_01_on_a_plain_listener_gets_the_certificate_and_redirects_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (port, mport, hport) = (free_port(), free_port(), free_port());
    let (pebble_port, pebble_mport, dns) = (free_port(), free_port(), free_port());
    let _dns = start_dns(dns);
    let _pebble = start_pebble(dir, (pebble_port, pebble_mport), (free_port(), hport), dns);
    wait_listening(pebble_port).await;
    std::fs::write(dir.join("key"), SKEY).unwrap();
    let cfg = dir.join("tlogd.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\norigin = \"{ORIGIN}\"\nprivate_key_file = \"{key}\"\n\
             [storage]\ndir = \"{log}\"\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n\
             [tls.acme]\ndomains = [\"localhost\"]\ndirectory_url = \"https://127.0.0.1:{pebble_port}/dir\"\n\
             directory_ca_file = \"{ca}\"\ncache_dir = \"{cache}\"\naccept_terms_of_service = true\n\
             http_listen = \"127.0.0.1:{hport}\"\nretry_interval_ms = 500\n",
            key = dir.join("key").display(),
            log = dir.join("log").display(),
            ca = dir.join("pebble-ca.pem").display(),
            cache = dir.join("acme").display(),
        ),
    )
    .unwrap();
    let mut d = start_tlogd(dir, &cfg, port, mport);
    let leaf = wait_leaf(&mut d, port, &[], 60).await;
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    assert!(
        cert.issuer().to_string().contains("Pebble"),
        "{}",
        cert.issuer()
    );
    let http = Http::new();
    let (status, headers, _) = http
        .request(
            hyper::Request::get(format!("http://127.0.0.1:{hport}/checkpoint?x=1"))
                .header("host", format!("localhost:{hport}"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(status, 308);
    assert_eq!(
        headers["location"],
        format!("https://localhost:{port}/checkpoint?x=1")
    );
    let (status, _, _) = http
        .get(&format!(
            "http://127.0.0.1:{hport}/.well-known/acme-challenge/unknown"
        ))
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert!(d.terminate().success());
}

/// `[tls.acme] store_key_file`: two frontends of one MinIO bucket share one account and
/// one certificate. The first claims the order; Pebble reaches only the other (its
/// TLS-ALPN-01 port is the second frontend's), which answers from the shared state;
/// both then serve the certificate the first obtained, and only it ordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frontends_of_a_shared_store_share_one_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a_port, a_mport, b_port, b_mport) = (free_port(), free_port(), free_port(), free_port());
    let (pebble_port, pebble_mport, dns) = (free_port(), free_port(), free_port());
    let _dns = start_dns(dns);
    let _pebble = start_pebble(dir, (pebble_port, pebble_mport), (b_port, free_port()), dns);
    wait_listening(pebble_port).await;
    let (store, _) = common::objects::minio_store("acme").await;
    std::fs::write(dir.join("key"), SKEY).unwrap();
    std::fs::write(dir.join("store.key"), "5a".repeat(32)).unwrap();
    let start = |name: &str, port: u16, mport: u16| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let cfg = d.join("tlogd.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:{port}\"\norigin = \"{ORIGIN}\"\nprivate_key_file = \"{key}\"\n\
                 [storage]\n{storage}[dedup]\npath = \"{dedup}\"\n[checkpoint]\ninterval_ms = 50\n\
                 [metrics]\nlisten = \"127.0.0.1:{mport}\"\n\
                 [tls.acme]\ndomains = [\"localhost\"]\ndirectory_url = \"https://127.0.0.1:{pebble_port}/dir\"\n\
                 directory_ca_file = \"{ca}\"\ncache_dir = \"{cache}\"\naccept_terms_of_service = true\n\
                 retry_interval_ms = 500\nstore_key_file = \"{store_key}\"\nstore_poll_interval_ms = 1500\n",
                key = dir.join("key").display(),
                storage = store.storage_toml,
                dedup = d.join("dedup").display(),
                ca = dir.join("pebble-ca.pem").display(),
                cache = d.join("acme").display(),
                store_key = dir.join("store.key").display(),
            ),
        )
        .unwrap();
        Daemon::spawn(
            &d,
            &cfg,
            port,
            mport,
            &Opts {
                env: store.env.clone(),
                rust_log: Some("warn,tlogd::serve::acme=info"),
                stderr_to: Some(d.join("stderr")),
                ..Opts::default()
            },
        )
    };
    // A first, until it holds the order; then B, which must not order.
    let mut a = start("a", a_port, a_mport);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join("a/stderr"))
        .unwrap_or_default()
        .contains("ACME order claimed")
    {
        assert!(
            Instant::now() < deadline,
            "frontend a did not claim the order"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut b = start("b", b_port, b_mport);
    let leaf_a = wait_leaf(&mut a, a_port, &[], 60).await;
    let leaf_b = wait_leaf(&mut b, b_port, &[], 60).await;
    assert_eq!(
        leaf_a, leaf_b,
        "the two frontends serve different certificates"
    );
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf_b).unwrap();
    assert!(
        cert.issuer().to_string().contains("Pebble"),
        "{}",
        cert.issuer()
    );
    let http = Http::new();
    let orders = |mport: u16| {
        let http = &http;
        async move {
            let (_, _, text) = http
                .get(&format!("http://127.0.0.1:{mport}/metrics"))
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&text).into_owned();
            text.lines()
                .find(|l| l.starts_with("tlogd_acme_orders_total{result=\"ok\"}"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        }
    };
    assert_eq!(orders(a_mport).await, 1.0, "frontend a ordered once");
    assert_eq!(orders(b_mport).await, 0.0, "frontend b ordered");
    let b_log = std::fs::read_to_string(dir.join("b/stderr")).unwrap();
    assert!(b_log.contains("taken from the shared store"), "{b_log}");
    // B's cache holds the shared certificate too: a restart serves it at once.
    assert_eq!(
        std::fs::read(dir.join("a/acme/cert.pem")).unwrap(),
        std::fs::read(dir.join("b/acme/cert.pem")).unwrap()
    );
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}
