//! A log's home page (#61): a browser at the log's URL gets a page (origin, keys,
//! checkpoint and its signers, how to submit, a lookup); API clients get what they got
//! before. Checked over HTTP and in a real browser, Debian's headless Chromium, for a
//! tlog-tiles log and a CT log, an entry looked up on each; what a submitter wrote
//! (an entry, a certificate's subject holding `<script>`) is shown as text.

mod common;

use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, date_time_ymd,
};

const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
const SCRIPT: &str = "<script>alert(1)</script>";

async fn get_as(http: &Http, url: &str, accept: &str) -> Resp {
    let req = hyper::Request::get(url)
        .header("accept", accept)
        .body(Full::new(Bytes::new()))
        .unwrap();
    http.request(req).await.unwrap()
}

/// The DOM headless Chromium builds from `url` (its `--dump-dom`).
fn browser_dom(url: &str, profile: &Path) -> String {
    let out = Command::new("timeout")
        .arg("90")
        .arg("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", url])
        .output()
        .expect("chromium (Debian's `chromium`; scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "chromium: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element with `id` in `dom` (the serialised DOM: entities kept).
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page:\n{dom}"));
    let open_end = start + dom[start..].find('>').unwrap() + 1;
    let close = open_end + dom[open_end..].find("</").unwrap();
    &dom[open_end..close]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tlog_tiles_log_has_a_page_a_browser_reads_and_api_clients_do_not_see() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut d = Daemon::start(dir, "");
    let http = Http::new();
    d.wait_ready(&http).await;
    for entry in ["hello, world", SCRIPT] {
        http.add(&d.url, Bytes::from(entry)).await.unwrap();
    }
    http.add(&d.url, Bytes::from_static(&[0, 159, 146, 150]))
        .await
        .unwrap();
    http.wait_checkpoint(&d.url, 3).await;

    // API clients and curl (`Accept: */*` or none): the one-line 404 of before.
    for accept in ["*/*", "application/json"] {
        let (status, _, body) = get_as(&http, &format!("{}/", d.url), accept).await;
        assert_eq!(status, 404);
        assert_eq!(body.iter().filter(|&&b| b == b'\n').count(), 1);
    }
    let (status, headers, body) = get_as(&http, &format!("{}/", d.url), BROWSER).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-store");
    let page = String::from_utf8_lossy(&body);
    assert!(page.contains(ORIGIN), "{page}");
    assert!(page.contains(&verifier().to_vkey()), "{page}");
    assert!(!page.contains("<script"), "{page}");
    // Lookups: the entry a submitter wrote, as text; an index beyond the tree and one
    // that is no number, refused on the page.
    let (status, _, body) = get_as(&http, &format!("{}/?index=1", d.url), BROWSER).await;
    assert_eq!(status, 200);
    let page = String::from_utf8_lossy(&body);
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains(SCRIPT));
    assert!(page.contains("id=\"verdict\">Verified"), "{page}");
    for (q, status) in [("3", 404), ("abc", 400), ("%3Cb%3E", 400)] {
        let (got, _, body) = get_as(&http, &format!("{}/?index={q}", d.url), BROWSER).await;
        assert_eq!(got, status, "{q}");
        let page = String::from_utf8_lossy(&body);
        assert!(page.contains("id=\"lookup-error\""), "{page}");
        assert!(!page.contains("<b>"), "{page}");
    }

    // In a real browser: the page, and an entry looked up (the form's GET).
    let profile = tempfile::tempdir().unwrap();
    let dom = browser_dom(&format!("{}/", d.url), profile.path());
    assert_eq!(element(&dom, "tree-size"), "3");
    assert!(dom.contains(&verifier().to_vkey()));
    assert!(dom.contains("name=\"index\""), "no lookup form:\n{dom}");
    let dom = browser_dom(&format!("{}/?index=1", d.url), profile.path());
    // The entry is text in the DOM, not an element: serialised back with its `<` escaped.
    assert_eq!(
        element(&dom, "entry-text"),
        "&lt;script&gt;alert(1)&lt;/script&gt;"
    );
    assert!(!dom.contains(SCRIPT), "{dom}");
    assert!(element(&dom, "verdict").starts_with("Verified"));
    let dom = browser_dom(&format!("{}/?index=2", d.url), profile.path());
    assert_eq!(element(&dom, "entry-hex"), "009f9296");
    assert!(d.terminate().success());
}

/// A CA of the test, and a leaf it signs whose subject holds `<script>`.
fn ct_chain() -> (rcgen::Certificate, Vec<u8>) {
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, "tlogd home page test root");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    p.not_before = date_time_ymd(2020, 1, 1);
    p.not_after = date_time_ymd(2040, 1, 1);
    let root = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, SCRIPT);
    p.subject_alt_names = vec![SanType::DnsName("xss.example.com".try_into().unwrap())];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.not_before = date_time_ymd(2026, 1, 1);
    p.not_after = date_time_ymd(2027, 1, 1);
    let leaf = p.signed_by(&key, &root, &ca_key).unwrap().der().to_vec();
    (root, leaf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_log_has_a_page_with_its_certificates_decoded_and_escaped() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (root, leaf) = ct_chain();
    std::fs::write(dir.join("roots.pem"), root.pem()).unwrap();
    let key =
        tlogd_static_ct::signer::LogKey::from_scalar(&sha2::Sha256::digest(b"home page test"))
            .unwrap();
    let key_file = dir.join("ct-key.pem");
    std::fs::write(&key_file, key.to_pkcs8_pem().unwrap()).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let (port, mport) = (free_port(), free_port());
    let cfg = dir.join("tlogd.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\norigin = \"ct.example.com/home\"\nprivate_key_file = \"{}\"\n\
             [storage]\ndir = \"{}\"\n[checkpoint]\ninterval_ms = 50\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n\
             [ct]\nroots_file = \"{}\"\n",
            key_file.display(),
            dir.join("log").display(),
            dir.join("roots.pem").display()
        ),
    )
    .unwrap();
    let mut d = Daemon::spawn(dir, &cfg, port, mport, &Opts::default());
    let http = Http::new();
    d.wait_ready(&http).await;
    let b64 = base64::engine::general_purpose::STANDARD;
    let chain = serde_json::json!({ "chain": [b64.encode(&leaf), b64.encode(root.der())] });
    let (status, _, body) = http
        .post(
            &format!("{}/ct/v1/add-chain", d.url),
            Bytes::from(chain.to_string()),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    // The checkpoint is signed with the CT key: wait for its size line alone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok((200, _, cp)) = http.get(&format!("{}/checkpoint", d.url)).await
            && tlogd_core::checkpoint::signed_size(&cp) == Some(1)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint of size 1"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let (status, _, body) = get_as(&http, &format!("{}/?index=0", d.url), BROWSER).await;
    assert_eq!(status, 200);
    let page = String::from_utf8_lossy(&body);
    assert!(
        page.contains(&b64.encode(key.log_id())),
        "no log ID:\n{page}"
    );
    assert!(page.contains("ct/v1/add-chain"), "{page}");
    assert!(!page.contains(SCRIPT), "{page}");

    let profile = tempfile::tempdir().unwrap();
    let dom = browser_dom(&format!("{}/?index=0", d.url), profile.path());
    assert_eq!(
        element(&dom, "cert-subject"),
        "CN=&lt;script&gt;alert(1)&lt;/script&gt;"
    );
    assert!(dom.contains("xss.example.com"), "{dom}");
    assert!(element(&dom, "verdict").starts_with("Verified"), "{dom}");
    assert!(!dom.contains(SCRIPT), "{dom}");
    assert!(d.terminate().success());
}
