//! A Certificate Transparency log (C2SP static-ct-api) served by the real daemon:
//! submissions, SCTs, duplicates, refusals, issuers, data tiles, the RFC 6962
//! checkpoint, a restart and a roots reload on POSIX; TesseraCT's hammer, Google's
//! ctclient and `tlogd verify --ct` on POSIX and the shared backends (MariaDB, PostgreSQL,
//! MinIO, the GCS emulator); two frontends of one store.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use common::{Daemon, Http, Opts, free_port};
use sha2::{Digest, Sha256};
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::note::LogSigner;
use tlogd_core::tile::parse_hash_tile;
use tlogd_static_ct::leaf::{LogEntry, TimestampedEntry};
use tlogd_static_ct::parse_data_tile;
use tlogd_static_ct::sct::{parse_leaf_index, signature_input};
use tlogd_static_ct::signer::LogKey;

pub const CT_ORIGIN: &str = "ct.example.com/test2026";

fn chains() -> PathBuf {
    // At run time: the binary may come from a build in another clone.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    Path::new(&manifest).join("../ct/testdata/chains/tesseract")
}

/// The DER of every certificate in a PEM file.
fn pem_ders(path: &Path) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut b64 = None::<String>;
    for line in text.lines() {
        match (line.trim(), &mut b64) {
            ("-----BEGIN CERTIFICATE-----", _) => b64 = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(s)) => {
                out.push(B64.decode(&*s).unwrap());
                b64 = None;
            }
            (l, Some(s)) => s.push_str(l),
            _ => {}
        }
    }
    out
}

fn cert(name: &str) -> Vec<u8> {
    pem_ders(&chains().join(name)).remove(0)
}

pub fn ct_key() -> LogKey {
    LogKey::from_scalar(&Sha256::digest(b"tlogd ct test key")).unwrap()
}

/// The stores the CT log is run on end to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Posix,
    /// MySQL, on a private MariaDB server.
    MariaDb,
    Postgres,
    /// S3, on a private MinIO server.
    Minio,
    /// GCS, on the GCS emulator.
    Gcs,
}

/// A CT log's store: the `[storage]` section every frontend of it is given, and the
/// environment carrying its credentials.
struct CtStore {
    backend: Backend,
    storage_toml: String,
    env: Vec<(String, String)>,
}

impl CtStore {
    /// A POSIX log in `dir/log`.
    fn posix(dir: &Path) -> CtStore {
        CtStore {
            backend: Backend::Posix,
            storage_toml: format!("dir = \"{}\"\n", dir.join("log").display()),
            env: Vec::new(),
        }
    }

    /// A fresh store of `backend` (a database on the shared server, a bucket), its
    /// files (a GCS key) in `dir`.
    async fn fresh(backend: Backend, dir: &Path) -> CtStore {
        use tlogd_storage_mysql::testdb::TestMariaDb;
        use tlogd_storage_postgres::testdb::TestPostgres;
        let sql = |name: &str, url: String| CtStore {
            backend,
            storage_toml: format!("backend = \"{name}\"\nurl = \"{url}\"\npool_size = 8\n"),
            env: Vec::new(),
        };
        match backend {
            Backend::Posix => CtStore::posix(dir),
            Backend::MariaDb => {
                let db = tokio::task::spawn_blocking(TestMariaDb::shared)
                    .await
                    .unwrap();
                sql("mysql", db.fresh_database("ct").await)
            }
            Backend::Postgres => {
                let db = tokio::task::spawn_blocking(TestPostgres::shared)
                    .await
                    .unwrap();
                sql("postgres", db.fresh_database("ct").await)
            }
            Backend::Minio => {
                let (store, _) = common::objects::minio_store("ct").await;
                CtStore {
                    backend,
                    storage_toml: store.storage_toml,
                    env: store.env,
                }
            }
            Backend::Gcs => {
                let store = common::objects::gcs_store(dir).await;
                CtStore {
                    backend,
                    storage_toml: store.storage_toml,
                    env: store.env,
                }
            }
        }
    }
}

/// Start a CT log on POSIX in `dir` with `roots` as its roots file and extra `[ct]`
/// keys.
pub fn start_ct(dir: &Path, roots: &Path, ct_toml: &str) -> Daemon {
    start_ct_on(&CtStore::posix(dir), dir, roots, ct_toml, "")
}

/// Start a frontend of the CT log on `store`, its files (key, config, a shared
/// store's dedup index) in `dir`, with `roots` as its roots file, extra `[ct]` keys
/// and extra sections (`[forward]`). Its checkpoints carry a grease line (#60): every
/// client of these tests (Go's ctclient and CT hammer, tlogd verify, the loadgen, a
/// second frontend) must ignore it.
fn start_ct_on(
    store: &CtStore,
    dir: &Path,
    roots: &Path,
    ct_toml: &str,
    extra_toml: &str,
) -> Daemon {
    let (cfg, port, mport) = ct_config(store, dir, roots, ct_toml, extra_toml);
    let opts = Opts {
        env: store.env.clone(),
        ..Opts::default()
    };
    Daemon::spawn(dir, &cfg, port, mport, &opts)
}

/// The configuration file of a frontend of the CT log on `store` (see `start_ct_on`),
/// and the ports it names (the API's, the metrics').
fn ct_config(
    store: &CtStore,
    dir: &Path,
    roots: &Path,
    ct_toml: &str,
    extra_toml: &str,
) -> (PathBuf, u16, u16) {
    std::fs::create_dir_all(dir).unwrap();
    let port = free_port();
    let mport = free_port();
    let key = dir.join("ct-key.pem");
    if !key.exists() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&key, ct_key().to_pkcs8_pem().unwrap()).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // A shared store's frontends each keep their dedup index beside their config.
    let dedup = match store.backend {
        Backend::Posix => String::new(),
        _ => format!("[dedup]\npath = \"{}\"\n", dir.join("dedup").display()),
    };
    let cfg = dir.join("tlogd.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\norigin = \"{CT_ORIGIN}\"\nprivate_key_file = \"{}\"\n\
             [storage]\n{}[checkpoint]\ninterval_ms = 50\ngrease = true\n\
             [metrics]\nlisten = \"127.0.0.1:{mport}\"\n{dedup}{extra_toml}\
             [ct]\nroots_file = \"{}\"\n{ct_toml}",
            key.display(),
            store.storage_toml,
            roots.display(),
        ),
    )
    .unwrap();
    (cfg, port, mport)
}

fn chain_json(chain: &[&[u8]]) -> Bytes {
    let chain: Vec<String> = chain.iter().map(|c| B64.encode(c)).collect();
    Bytes::from(serde_json::json!({ "chain": chain }).to_string())
}

/// An SCT as the log answered it.
#[derive(Debug, PartialEq, Eq)]
struct Sct {
    id: Vec<u8>,
    timestamp: u64,
    extensions: Vec<u8>,
    signature: Vec<u8>,
}

async fn submit(
    http: &Http,
    base: &str,
    endpoint: &str,
    chain: &[&[u8]],
) -> Result<(Sct, bool), (u16, String)> {
    let url = format!("{base}/ct/v1/{endpoint}");
    let (status, headers, body) = http.post(&url, chain_json(chain)).await.unwrap();
    if status != 200 {
        return Err((status, String::from_utf8_lossy(&body).into_owned()));
    }
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["sct_version"], 0);
    let b = |k: &str| B64.decode(v[k].as_str().unwrap()).unwrap();
    let sct = Sct {
        id: b("id"),
        timestamp: v["timestamp"].as_u64().unwrap(),
        extensions: b("extensions"),
        signature: b("signature"),
    };
    let duplicate = headers.get("x-tlog-duplicate").is_some_and(|v| v == "true");
    Ok((sct, duplicate))
}

/// The SCT's signature verifies over `entry` at the SCT's timestamp and extensions.
fn check_sct(sct: &Sct, entry: LogEntry) -> u64 {
    let key = ct_key();
    assert_eq!(sct.id, key.log_id());
    let te = TimestampedEntry {
        timestamp: sct.timestamp,
        entry,
        extensions: sct.extensions.clone(),
    };
    let rest = tlogd_static_ct::signer::verify(
        key.public_key_der(),
        &signature_input(&te),
        &sct.signature,
    )
    .expect("the SCT's signature verifies");
    assert!(rest.is_empty());
    parse_leaf_index(&sct.extensions)
        .unwrap()
        .expect("a leaf_index extension")
}

fn verifier() -> tlogd_core::note::NoteVerifier {
    tlogd_ct::Rfc6962Signer::new(CT_ORIGIN, ct_key()).verifier()
}

async fn checkpoint(http: &Http, base: &str, size: u64) -> Checkpoint {
    for _ in 0..400 {
        let (status, _, body) = http.get(&format!("{base}/checkpoint")).await.unwrap();
        assert_eq!(status, 200);
        let (cp, _) = Checkpoint::open(&body, CT_ORIGIN, &verifier())
            .expect("the checkpoint verifies with the RFC 6962 note signature");
        assert!(cp.extensions.is_empty());
        if cp.size >= size {
            return cp;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no checkpoint of size {size}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_log_takes_chains_and_serves_static_ct_api() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let roots = dir.join("roots.pem");
    std::fs::copy(chains().join("test_root_ca_cert.pem"), &roots).unwrap();
    let mut d = start_ct(dir, &roots, "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let base = d.url.clone();

    let root = cert("test_root_ca_cert.pem");
    let inter = cert("test_intermediate_ca_cert.pem");
    let leaf = cert("test_leaf_cert_signed_by_intermediate.pem");
    let leaf_by_root = cert("test_leaf_cert_signed_by_root.pem");
    let precert = cert("test_leaf_pre_cert_signed_by_intermediate.pem");

    // Refusals: one line, 400, nothing logged. Before the certificates are logged: a
    // resubmission of a logged certificate is answered with its SCT before its chain is
    // validated (`CtLog`'s SCT cache and `Log::committed_duplicate`).
    for (endpoint, chain, why) in [
        (
            "add-chain",
            vec![&precert[..], &inter],
            "a precertificate to add-chain",
        ),
        (
            "add-pre-chain",
            vec![&leaf[..], &inter],
            "a certificate to add-pre-chain",
        ),
        ("add-chain", vec![&inter[..], &leaf], "a misordered chain"),
        (
            "add-chain",
            vec![&leaf[..]],
            "a chain that stops short of a root",
        ),
    ] {
        let (status, body) = submit(&http, &base, endpoint, &chain).await.unwrap_err();
        assert_eq!(status, 400, "{why}: {body}");
        assert_eq!(
            body.trim_end().lines().count(),
            1,
            "{why}: one line: {body}"
        );
    }
    // A certificate, its chain without the root (the log appends it).
    let (sct0, dup) = submit(&http, &base, "add-chain", &[&leaf, &inter])
        .await
        .unwrap();
    assert!(!dup);
    let i0 = check_sct(
        &sct0,
        LogEntry::X509 {
            certificate: leaf.clone(),
        },
    );
    // Resubmitted, with the root this time: the same SCT (RFC 6962 §4.1).
    let (again, dup) = submit(&http, &base, "add-chain", &[&leaf, &inter, &root])
        .await
        .unwrap();
    assert!(dup);
    assert_eq!(again, sct0);
    // Answered before its chain is validated (from the SCT cache): the leaf alone,
    // which would not validate, gets the same SCT byte for byte.
    let (again, dup) = submit(&http, &base, "add-chain", &[&leaf]).await.unwrap();
    assert!(dup);
    assert_eq!(again, sct0);
    // A certificate signed by the root directly.
    let (sct1, _) = submit(&http, &base, "add-chain", &[&leaf_by_root])
        .await
        .unwrap();
    let i1 = check_sct(
        &sct1,
        LogEntry::X509 {
            certificate: leaf_by_root.clone(),
        },
    );
    assert_ne!(i0, i1);
    // A precertificate: the SCT signs the TBS without the poison, with the issuer's key
    // hash; its stored entry says the same.
    let (sct2, _) = submit(&http, &base, "add-pre-chain", &[&precert, &inter, &root])
        .await
        .unwrap();

    for (body, why) in [
        (Bytes::from_static(b"{\"chain\":"), "truncated JSON"),
        (Bytes::from_static(b"{\"chain\":[\"!!\"]}"), "bad base64"),
        (Bytes::from_static(b"{\"chain\":[]}"), "an empty chain"),
        (
            Bytes::from_static(b"{\"chain\":[\"AAAA\"]}"),
            "not a certificate",
        ),
    ] {
        let (status, _, text) = http
            .post(&format!("{base}/ct/v1/add-chain"), body)
            .await
            .unwrap();
        assert_eq!(status, 400, "{why}: {}", String::from_utf8_lossy(&text));
    }
    let huge = Bytes::from(vec![b' '; (512 << 10) + 1]);
    let (status, _, _) = http
        .post(&format!("{base}/ct/v1/add-chain"), huge)
        .await
        .unwrap();
    assert_eq!(status, 413);
    // A CT log has no raw `/add`: entries would skip validation.
    let (status, _, _) = http
        .post(&format!("{base}/add"), Bytes::from_static(b"x"))
        .await
        .unwrap();
    assert_eq!(status, 404);

    // get-roots.
    let (status, _, body) = http.get(&format!("{base}/ct/v1/get-roots")).await.unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["certificates"], serde_json::json!([B64.encode(&root)]));
    // SIGHUP adds the roots file's new roots; a file that no longer parses drops none.
    let hammer_root = pem_ders(&chains().join("hammer/test_root_ca_cert.pem")).remove(0);
    let mut pem = std::fs::read_to_string(&roots).unwrap();
    pem.push_str(&std::fs::read_to_string(chains().join("hammer/test_root_ca_cert.pem")).unwrap());
    std::fs::write(&roots, pem).unwrap();
    let want = serde_json::json!([B64.encode(&root), B64.encode(&hammer_root)]);
    let get_roots = || async {
        let (_, _, body) = http.get(&format!("{base}/ct/v1/get-roots")).await.unwrap();
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()["certificates"].clone()
    };
    hup(&d);
    let mut reloaded = false;
    for _ in 0..200 {
        if get_roots().await == want {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(reloaded, "SIGHUP did not add the new root");
    std::fs::write(&roots, "not a PEM file").unwrap();
    hup(&d);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get_roots().await, want, "a broken roots file dropped roots");
    std::fs::copy(chains().join("test_root_ca_cert.pem"), &roots).unwrap();

    // The tree: three entries, whose data tile holds what the SCTs signed.
    let cp = checkpoint(&http, &base, 3).await;
    assert_eq!(cp.size, 3);
    let (status, _, data) = http
        .get(&format!("{base}/tile/data/000.p/3"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let leaves = parse_data_tile(&data).unwrap();
    assert_eq!(leaves.len(), 3);
    let (status, _, level0) = http.get(&format!("{base}/tile/0/000.p/3")).await.unwrap();
    assert_eq!(status, 200);
    let hashes = parse_hash_tile(&level0, 3).unwrap();
    for (sct, index) in [(&sct0, i0), (&sct1, i1)] {
        let te = &leaves[index as usize].timestamped_entry;
        assert_eq!(
            (te.timestamp, &te.extensions),
            (sct.timestamp, &sct.extensions)
        );
    }
    // Data tiles gzip-compressed for a client that takes it (static-ct-api SHOULD).
    let req = hyper::Request::get(format!("{base}/tile/data/000.p/3"))
        .header("accept-encoding", "br, gzip;q=0.8")
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let (status, headers, z) = http.request(req).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("content-encoding").map(String::as_str),
        Some("gzip")
    );
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&z[..]), &mut plain).unwrap();
    assert_eq!(plain, data);
    // The gzipped form is another representation, with a tag of its own: a cache
    // revalidating it gets a 304, one holding the plain bytes does not.
    assert_eq!(headers["etag"], "\"tile/data/000.p/3+gzip\"");
    for (held, status) in [
        ("\"tile/data/000.p/3+gzip\"", 304),
        ("\"tile/data/000.p/3\"", 200),
    ] {
        let req = hyper::Request::get(format!("{base}/tile/data/000.p/3"))
            .header("accept-encoding", "gzip")
            .header("if-none-match", held)
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let (got, headers, body) = http.request(req).await.unwrap();
        assert_eq!(got, status, "{held}");
        assert_eq!(headers["vary"], "Accept-Encoding");
        assert_eq!(body.is_empty(), status == 304);
    }
    let pre_leaf = leaves
        .iter()
        .find(|l| l.pre_certificate.is_some())
        .expect("the precertificate entry");
    assert_eq!(pre_leaf.pre_certificate.as_deref(), Some(&precert[..]));
    let i2 = check_sct(&sct2, pre_leaf.timestamped_entry.entry.clone());
    assert_eq!(pre_leaf.timestamped_entry.timestamp, sct2.timestamp);
    match &pre_leaf.timestamped_entry.entry {
        LogEntry::Precert {
            issuer_key_hash, ..
        } => {
            assert_eq!(issuer_key_hash, &spki_hash(&inter));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        leaves[i2 as usize].pre_certificate.as_deref(),
        Some(&precert[..])
    );
    for (i, leaf) in leaves.iter().enumerate() {
        assert_eq!(leaf.merkle_tree_leaf().leaf_hash(), hashes[i], "leaf {i}");
        // Every issuer a data tile names is served.
        for f in &leaf.certificate_chain {
            let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
            let (status, headers, der) = http.get(&format!("{base}/issuer/{hex}")).await.unwrap();
            assert_eq!(status, 200, "issuer/{hex}");
            assert_eq!(headers["content-type"], "application/pkix-cert");
            assert_eq!(Sha256::digest(&der)[..], f[..]);
            // Content-addressed: a cache holding it revalidates to a 304.
            assert_eq!(headers["etag"], format!("\"issuer/{hex}\""));
            let req = hyper::Request::get(format!("{base}/issuer/{hex}"))
                .header("if-none-match", &headers["etag"])
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap();
            let (status, _, body) = http.request(req).await.unwrap();
            assert_eq!((status, body.len()), (304, 0), "issuer/{hex}");
        }
    }
    // The certificate submitted without its root still names it.
    assert_eq!(
        leaves[i0 as usize].certificate_chain,
        vec![Sha256::digest(&inter).into(), Sha256::digest(&root).into()] as Vec<[u8; 32]>
    );
    let (status, _, _) = http
        .get(&format!("{base}/issuer/{}", "0".repeat(64)))
        .await
        .unwrap();
    assert_eq!(status, 404);

    // A restart: the log reopens under its RFC 6962 key and answers duplicates with
    // their original SCTs.
    assert!(d.terminate().success());
    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    let base = d.url.clone();
    let (again, dup) = submit(&http, &base, "add-chain", &[&leaf, &inter])
        .await
        .unwrap();
    assert!(dup);
    // Its fields; the signature is a new one (random nonce), and verifies.
    assert_same_sct(&again, &sct0, "a resubmission after a restart");
    check_sct(
        &again,
        LogEntry::X509 {
            certificate: leaf.clone(),
        },
    );
    // After a restart the SCT cache is empty: a certificate is found in the dedup
    // index before its chain is validated (its leaf alone gets its SCT, signed anew);
    // a precertificate's entry needs its issuer, so its chain is validated again
    // (alone, refused; with its issuer, its original SCT's fields).
    assert!(d.terminate().success());
    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    let base = d.url.clone();
    let (again, dup) = submit(&http, &base, "add-chain", &[&leaf]).await.unwrap();
    assert!(dup);
    assert_same_sct(&again, &sct0, "a certificate from the dedup index");
    let (status, _) = submit(&http, &base, "add-pre-chain", &[&precert])
        .await
        .unwrap_err();
    assert_eq!(status, 400, "a precertificate's chain is validated again");
    let (again, dup) = submit(&http, &base, "add-pre-chain", &[&precert, &inter])
        .await
        .unwrap();
    assert!(dup);
    assert_same_sct(
        &again,
        &sct2,
        "a precertificate resubmitted after a restart",
    );
    let cp2 = checkpoint(&http, &base, 3).await;
    assert_eq!((cp2.size, cp2.root), (cp.size, cp.root));

    // The whole log checks out: data tiles, leaf hashes, hash tiles, the RFC 6962
    // checkpoint, every leaf_index, every issuer.
    let (ok, out) = tlogd_verify_ct(&base).await;
    assert!(ok, "{out}");
    assert!(out.contains("2 issuers named by the entries"), "{out}");
    // An issuer gone: the check names it.
    let hex: String = Sha256::digest(&inter)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let issuer_file = dir.join("log").join("issuer").join(&hex);
    assert!(issuer_file.exists(), "{}", issuer_file.display());
    std::fs::remove_file(&issuer_file).unwrap();
    // The daemon remembers the issuers it served (content-addressed, they never
    // change): restarted, it reads storage again.
    assert!(d.terminate().success());
    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    let base = d.url.clone();
    let (ok, out) = tlogd_verify_ct(&base).await;
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("issuer/{hex}")), "{out}");
}

/// `[ct] old_not_before_days`: certificates issued longer ago than that are limited
/// to the configured rate (`429` + `Retry-After` beyond it); fresh ones are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_certificates_are_rate_limited() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let roots = dir.join("roots.pem");
    std::fs::copy(chains().join("test_root_ca_cert.pem"), &roots).unwrap();
    // TesseraCT's test leaves were issued in 2024: all "old" past one day.
    let mut d = start_ct(
        dir,
        &roots,
        "old_not_before_days = 1\nold_not_before_per_second = 0.5\n",
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let inter = cert("test_intermediate_ca_cert.pem");
    let leaf = cert("test_leaf_cert_signed_by_intermediate.pem");
    let other = cert("test_leaf_cert_signed_by_root.pem");
    submit(&http, &d.url, "add-chain", &[&leaf, &inter])
        .await
        .unwrap();
    let url = format!("{}/ct/v1/add-chain", d.url);
    let (status, headers, body) = http.post(&url, chain_json(&[&other])).await.unwrap();
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&body));
    let secs: u64 = headers["retry-after"].parse().unwrap();
    assert!((1..=2).contains(&secs), "{secs}");
    // Refused before anything was logged; admitted once the bucket refills.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (sct, dup) = submit(&http, &d.url, "add-chain", &[&other]).await.unwrap();
    assert!(!dup);
    assert_eq!(check_sct(&sct, LogEntry::X509 { certificate: other }), 1);
}

/// `[ct] issuer_per_second`: each issuing CA gets its own bucket. One CA past its
/// burst gets `429` + `Retry-After` while another CA's certificates go on, a
/// resubmission of a logged certificate is answered whatever the bucket, a chain that
/// does not validate spends nothing, and the limited CA is admitted again once its
/// bucket refills. The refusals are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_issuer_is_rate_limited_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (busy, quiet) = (TestRoot::mint("Busy CA"), TestRoot::mint("Quiet CA"));
    let roots = dir.join("roots.pem");
    let pem = |der: &[u8]| tlogd_ct::chain::certificate_pem(der);
    std::fs::write(&roots, pem(&busy.der()) + &pem(&quiet.der())).unwrap();
    // A token every 5 s: the three adds below meet the empty bucket however slow
    // the machine is (they take far less than 5 s).
    let mut d = start_ct(dir, &roots, "issuer_per_second = 0.2\nissuer_burst = 2\n");
    let http = Http::new();
    d.wait_ready(&http).await;
    let url = format!("{}/ct/v1/add-chain", d.url);
    let leaves: Vec<Vec<u8>> = (0..3)
        .map(|i| busy.leaf(&format!("a{i}.example.com")))
        .collect();
    let (first, _) = submit(&http, &d.url, "add-chain", &[&leaves[0]])
        .await
        .unwrap();
    // A chain that does not validate (a leaf of an unknown CA claiming the busy one's
    // root) spends nothing of the busy CA's burst.
    let stranger = TestRoot::mint("Busy CA").leaf("b.example.com");
    let (status, _, _) = http
        .post(&url, chain_json(&[&stranger, &busy.der()]))
        .await
        .unwrap();
    assert_eq!(status, 400);
    submit(&http, &d.url, "add-chain", &[&leaves[1]])
        .await
        .unwrap();
    let (status, headers, body) = http.post(&url, chain_json(&[&leaves[2]])).await.unwrap();
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("issuer"));
    assert!(headers.contains_key("retry-after"));
    // Another CA is not held back; a resubmission is answered with its SCT.
    submit(&http, &d.url, "add-chain", &[&quiet.leaf("c.example.com")])
        .await
        .unwrap();
    let (again, dup) = submit(&http, &d.url, "add-chain", &[&leaves[0]])
        .await
        .unwrap();
    assert!(dup);
    assert_eq!(again, first);
    assert_eq!(
        daemon_metric(&http, &d, "tlogd_ct_issuer_limited_total").await,
        1.0
    );
    // Admitted again once the bucket refills.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match submit(&http, &d.url, "add-chain", &[&leaves[2]]).await {
            Ok((_, dup)) => {
                assert!(!dup);
                break;
            }
            Err((429, _)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            Err(e) => panic!("the busy CA was never admitted again: {e:?}"),
        }
    }
}

fn hup(d: &Daemon) {
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &d.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// `tlogd keygen --ct` writes a PKCS#8 P-256 key (mode 0600, never over a file) and
/// prints its public key, log ID and verifier key.
#[tokio::test]
async fn keygen_makes_a_ct_key() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("k.pem");
    let args = vec![
        "keygen".to_string(),
        "--ct".into(),
        "--origin".into(),
        CT_ORIGIN.into(),
        "--out".into(),
        out.display().to_string(),
    ];
    let tlogd = PathBuf::from(env!("CARGO_BIN_EXE_tlogd"));
    let (ok, stdout, err) = run(tlogd.clone(), args.clone()).await;
    assert!(ok, "{err}");
    let key = LogKey::from_pem(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        stdout.starts_with(&key.public_key_pem().unwrap()),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("log ID: {}", B64.encode(key.log_id()))),
        "{stdout}"
    );
    let vkey = tlogd_ct::Rfc6962Signer::new(CT_ORIGIN, key)
        .verifier()
        .to_vkey();
    assert!(stdout.contains(&vkey), "{stdout}");
    let (ok, _, _) = run(tlogd, args).await;
    assert!(!ok, "keygen wrote over an existing key");
}

/// A CT log signs its checkpoints with more keys than its ECDSA one: the keys after
/// it in `private_key_files` (here ML-DSA-44, from `keygen --algorithm ml-dsa-44`)
/// sign after the RFC 6962 signature, in order, and an SCT and the RFC 6962 signature
/// still verify as CT clients check them. The CT key comes from `keygen --algorithm
/// ecdsa-p256`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_log_signs_its_checkpoints_with_a_post_quantum_key_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tlogd = PathBuf::from(env!("CARGO_BIN_EXE_tlogd"));
    let keygen = |algorithm: &str, out: &Path| {
        let o = std::process::Command::new(&tlogd)
            .args([
                "keygen",
                "--origin",
                CT_ORIGIN,
                "--algorithm",
                algorithm,
                "--out",
            ])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let (ct_pem, pq) = (dir.join("ct.pem"), dir.join("pq.key"));
    let printed = keygen("ecdsa-p256", &ct_pem);
    let ct_key = LogKey::from_pem(&std::fs::read_to_string(&ct_pem).unwrap()).unwrap();
    assert!(printed.contains(&B64.encode(ct_key.log_id())), "{printed}");
    let pq_vkey = keygen("ml-dsa-44", &pq).trim().to_string();
    let roots = dir.join("roots.pem");
    std::fs::copy(chains().join("test_root_ca_cert.pem"), &roots).unwrap();
    let (port, mport) = (free_port(), free_port());
    let cfg = dir.join("tlogd.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\norigin = \"{CT_ORIGIN}\"\nprivate_key_files = [\"{}\", \"{}\"]\n\
             [storage]\ndir = \"{}\"\n[checkpoint]\ninterval_ms = 50\n\
             [metrics]\nlisten = \"127.0.0.1:{mport}\"\n[ct]\nroots_file = \"{}\"\n",
            ct_pem.display(),
            pq.display(),
            dir.join("log").display(),
            roots.display(),
        ),
    )
    .unwrap();
    let mut d = Daemon::spawn(dir, &cfg, port, mport, &Opts::default());
    let http = Http::new();
    d.wait_ready(&http).await;
    let inter = cert("test_intermediate_ca_cert.pem");
    let leaf = cert("test_leaf_cert_signed_by_intermediate.pem");
    let (sct, _) = submit(&http, &d.url, "add-chain", &[&leaf, &inter])
        .await
        .unwrap();
    assert_eq!(sct.id, ct_key.log_id());
    let rfc6962 = tlogd_ct::Rfc6962Signer::new(CT_ORIGIN, ct_key).verifier();
    let mldsa = tlogd_core::note::NoteVerifier::from_vkey(&pq_vkey).unwrap();
    for _ in 0..400 {
        let (status, _, body) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
        assert_eq!(status, 200);
        // Every signature by a key given must verify; each key alone opens it.
        let (cp, note) = Checkpoint::open_with(&body, CT_ORIGIN, &[&mldsa, &rfc6962])
            .expect("both signatures verify");
        Checkpoint::open(&body, CT_ORIGIN, &mldsa).expect("the ML-DSA-44 signature");
        let order: Vec<u32> = note.signatures.iter().map(|s| s.key_id).collect();
        assert_eq!(
            order,
            [rfc6962.key_id(), mldsa.key_id()],
            "in the order configured"
        );
        if cp.size >= 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no checkpoint with the chain");
}

/// `tlogd verify --ct` of the CT log at `url`: its exit status and output.
async fn tlogd_verify_ct(url: &str) -> (bool, String) {
    let args = vec![
        "verify".to_string(),
        url.to_string(),
        "--ct".into(),
        "--origin".into(),
        CT_ORIGIN.into(),
        "--log-public-key".into(),
        B64.encode(ct_key().public_key_der()),
    ];
    let (ok, out, err) = run(PathBuf::from(env!("CARGO_BIN_EXE_tlogd")), args).await;
    (ok, format!("{out}{err}"))
}

/// SHA-256 of a certificate's SubjectPublicKeyInfo (RFC 6962 §3.2's issuer_key_hash),
/// found by walking the DER: Certificate → TBSCertificate → its 7th element (6th
/// without the explicit version).
fn spki_hash(cert: &[u8]) -> [u8; 32] {
    fn tlv(b: &[u8]) -> (usize, usize) {
        // (header length, content length)
        let l = b[1] as usize;
        if l < 0x80 {
            return (2, l);
        }
        let n = l & 0x7f;
        let len = b[2..2 + n]
            .iter()
            .fold(0usize, |v, &x| (v << 8) | x as usize);
        (2 + n, len)
    }
    let (h, _) = tlv(cert);
    let tbs = &cert[h..];
    let (h, len) = tlv(tbs);
    let mut body = &tbs[h..h + len];
    let mut elems = Vec::new();
    while !body.is_empty() {
        let (h, len) = tlv(body);
        elems.push(&body[..h + len]);
        body = &body[h + len..];
    }
    let skip = usize::from(elems[0][0] == 0xa0);
    Sha256::digest(elems[5 + skip]).into()
}

fn find_tool(name: &str) -> PathBuf {
    tlogd_storage_object::testsupport::find_tool(name)
}

/// The log's public key as CT clients take it: a PEM file.
fn public_key_file(dir: &Path) -> PathBuf {
    let p = dir.join("ct-pub.pem");
    std::fs::write(&p, ct_key().public_key_pem().unwrap()).unwrap();
    p
}

/// Run a Go CT client; its exit status, stdout and stderr.
async fn run(tool: PathBuf, args: Vec<String>) -> (bool, String, String) {
    let o = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&tool)
            .args(&args)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", tool.display()))
    })
    .await
    .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Google's `ctclient` uploads a certificate chain, a precertificate chain and a
/// precertificate issued by a pre-issuer (RFC 6962 §3.1), and verifies each SCT with
/// its own RFC 6962 code (for a precertificate, over the TBS it rebuilds with Go's
/// x509); a wrong public key makes it fail, so the check has teeth. `get-roots`
/// answers. A chain uploaded again gets its original SCT, and `tlogd verify --ct`
/// checks the log, issuers included. On every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctclient_uploads_chains_and_verifies_their_scts() {
    ctclient_on(Backend::Posix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctclient_on_minio() {
    ctclient_on(Backend::Minio).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctclient_on_mariadb() {
    ctclient_on(Backend::MariaDb).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctclient_on_postgres() {
    ctclient_on(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctclient_on_the_gcs_emulator() {
    ctclient_on(Backend::Gcs).await
}

async fn ctclient_on(backend: Backend) {
    let ctclient = find_tool("ctclient");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let roots = dir.join("roots.pem");
    std::fs::copy(chains().join("test_root_ca_cert.pem"), &roots).unwrap();
    let store = CtStore::fresh(backend, dir).await;
    // With TesseraCT's publication awaiter on: each SCT comes once a published
    // checkpoint covers its entry.
    let mut d = start_ct_on(&store, dir, &roots, "await_publication = true\n", "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let pub_key = public_key_file(dir);
    let wrong_key = dir.join("wrong-pub.pem");
    let other = LogKey::from_scalar(&Sha256::digest(b"another log")).unwrap();
    std::fs::write(&wrong_key, other.public_key_pem().unwrap()).unwrap();
    let chain_file = |name: &str, files: &[&str]| {
        let p = dir.join(name);
        let pem: String = files
            .iter()
            .map(|f| std::fs::read_to_string(chains().join(f)).unwrap())
            .collect();
        std::fs::write(&p, pem).unwrap();
        p
    };
    let uploads = [
        chain_file(
            "cert.chain",
            &[
                "test_leaf_cert_signed_by_intermediate.pem",
                "test_intermediate_ca_cert.pem",
            ],
        ),
        chain_file(
            "precert.chain",
            &[
                "test_leaf_pre_cert_signed_by_intermediate.pem",
                "test_intermediate_ca_cert.pem",
            ],
        ),
        chain_file(
            "preissuer.chain",
            &[
                "test_leaf_pre_cert_signed_by_pre_intermediate.pem",
                "test_pre_intermediate_ca_cert.pem",
            ],
        ),
    ];
    let args = |chain: &Path, key: &Path| {
        vec![
            "upload".to_string(),
            format!("--log_uri={}", d.url),
            format!("--pub_key={}", key.display()),
            format!("--cert_chain={}", chain.display()),
        ]
    };
    for (i, chain) in uploads.iter().enumerate() {
        let (ok, out, err) = run(ctclient.clone(), args(chain, &pub_key)).await;
        assert!(ok, "ctclient upload {}: {out}\n{err}", chain.display());
        assert!(out.contains("Uploaded chain"), "{out}");
        // Published before the answer: the checkpoint served now covers it.
        let (_, _, body) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
        let (cp, _) = Checkpoint::open(&body, CT_ORIGIN, &verifier()).unwrap();
        assert!(
            cp.size > i as u64,
            "SCT {i} before a checkpoint of size {}",
            cp.size
        );
        // The same chain, checked against another log's key: the SCT must not verify.
        let (ok, out, err) = run(ctclient.clone(), args(chain, &wrong_key)).await;
        assert!(!ok, "an SCT verified under the wrong key: {out}\n{err}");
    }
    let (ok, out, err) = run(
        ctclient.clone(),
        vec!["get-roots".into(), format!("--log_uri={}", d.url)],
    )
    .await;
    assert!(ok, "ctclient get-roots: {out}\n{err}");
    assert!(out.contains("Transparency.dev Test Root"), "{out}");
    // Uploaded again: ctclient verifies the original SCT it is answered with.
    let (ok, out, err) = run(ctclient.clone(), args(&uploads[0], &pub_key)).await;
    assert!(ok, "ctclient upload again: {out}\n{err}");
    let cp = checkpoint(&http, &d.url, 3).await;
    assert_eq!(cp.size, 3, "three chains, each logged once");
    let (ok, out) = tlogd_verify_ct(&d.url).await;
    assert!(ok, "{out}");
    assert!(out.contains("issuers named by the entries"), "{out}");
    assert!(d.terminate().success());
}

/// TesseraCT's own CT hammer writes, reads and checks merge delay against the log,
/// with duplicates: every line it logs at warning or error level is a failure (it
/// exits 0 after some failures), and it must reach its goal within its run time.
/// `tlogd verify --ct` then checks the log. On POSIX, MinIO and MariaDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tesseract_ct_hammer_passes() {
    hammer_on(Backend::Posix, 600).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tesseract_ct_hammer_passes_on_minio() {
    hammer_on(Backend::Minio, 600).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tesseract_ct_hammer_passes_on_mariadb() {
    hammer_on(Backend::MariaDb, 600).await
}

async fn hammer_on(backend: Backend, goal: u64) {
    let testdata = chains().join("hammer");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = CtStore::fresh(backend, dir).await;
    let roots = testdata.join("test_root_ca_cert.pem");
    let mut d = start_ct_on(&store, dir, &roots, "", "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let base = format!("{}/", d.url);
    hammer(&base, &base, goal, 150).await;
    // Every leaf the hammer wrote is in a tree whose tiles hash to the checkpoint,
    // at its position, with its issuers.
    let cp = checkpoint(&http, &d.url, goal).await;
    assert!(cp.size >= goal);
    let (ok, out) = tlogd_verify_ct(&d.url).await;
    assert!(ok, "{out}");
    assert!(d.terminate().success());
}

/// TesseraCT's CT hammer (16 writers, 10 % duplicates, readers) against the CT log
/// read at `read_url` and written at `write_url`, until its tree holds `goal` leaves
/// (at most `max_writes` per second); it must log no failure.
async fn hammer(read_url: &str, write_url: &str, goal: u64, max_writes: u32) {
    let hammer = find_tool("ct-hammer");
    let testdata = chains().join("hammer");
    let args = vec![
        format!("--origin={CT_ORIGIN}"),
        format!("--log_public_key={}", B64.encode(ct_key().public_key_der())),
        format!("--log_url={read_url}"),
        format!("--write_log_url={write_url}"),
        format!(
            "--intermediate_ca_cert_path={}",
            testdata.join("test_intermediate_ca_cert.pem").display()
        ),
        format!(
            "--intermediate_ca_key_path={}",
            testdata
                .join("test_intermediate_ca_private_key.pem")
                .display()
        ),
        format!(
            "--cert_sign_private_key_path={}",
            testdata
                .join("test_leaf_cert_signing_private_key.pem")
                .display()
        ),
        "--num_writers=16".into(),
        format!("--max_write_ops={max_writes}"),
        "--num_readers_random=2".into(),
        "--num_readers_full=1".into(),
        "--max_read_ops=40".into(),
        "--num_mmd_verifiers=4".into(),
        "--mmd_duration=10s".into(),
        "--dup_chance=0.1".into(),
        format!("--leaf_write_goal={goal}"),
        "--max_runtime=120s".into(),
        "--show_ui=false".into(),
        "--logtostderr".into(),
    ];
    let (ok, out, err) = run(hammer, args).await;
    // Once the goal is reached the hammer cancels its context, and whatever it had in
    // flight then logs "context canceled": a checkpoint update ("] context canceled"),
    // or a tile fetch for a proof ("failed to fetch resource: context canceled", seen
    // once in the suite, 2026-11-29). Shutdown, not a failure.
    let goal_at = err.find("Reached tree size goal").unwrap_or(err.len());
    let failures: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with('E') || l.starts_with('W') || l.starts_with('F'))
        .filter(|l| {
            let after_goal = err[goal_at..].contains(*l);
            let canceled = l.ends_with("] context canceled") || l.ends_with(": context canceled");
            !(after_goal && canceled)
        })
        .collect();
    assert!(ok, "the hammer failed:\n{out}\n{err}");
    assert!(
        failures.is_empty(),
        "the hammer logged failures:\n{}",
        failures.join("\n")
    );
    assert!(err.contains("Reached tree size goal"), "{err}");
}

/// Lowercase hex, as issuer paths name a fingerprint.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// [`submit`], again while the answer is `503` (a frontend opened on a store others
/// wrote pushes back while its dedup index catches up; a forward left unanswered when
/// its sequencer went away is answered `503`, to resubmit), for up to a minute.
async fn submit_when_ready(
    http: &Http,
    base: &str,
    endpoint: &str,
    chain: &[&[u8]],
) -> (Sct, bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match submit(http, base, endpoint, chain).await {
            Err((503, _)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            r => return r.unwrap_or_else(|e| panic!("{base}/ct/v1/{endpoint}: {e:?}")),
        }
    }
}

/// The same SCT (RFC 6962 §4.1) from another frontend: its log ID, timestamp and
/// extensions (the `leaf_index`). The signature need not repeat (SCTs are signed with
/// a random nonce, `LogKey::sign_randomized`); whoever signed it, it must verify.
fn assert_same_sct(got: &Sct, want: &Sct, what: &str) {
    assert_eq!(
        (&got.id, got.timestamp, &got.extensions),
        (&want.id, want.timestamp, &want.extensions),
        "{what}"
    );
}

/// Two frontends of one CT log on a shared store, both taking `add-chain` and
/// `add-pre-chain`: their SCTs verify; an issuer stored by one is served by the other;
/// the loadgen's CT mode writes through both, with duplicates, and verifies every SCT
/// and data tile; with `a` gone `b` commits by itself, and `a` restarted knows what
/// `b` logged meanwhile; `tlogd verify --ct` passes through each. With `b` forwarding
/// to `a` (`[forward]`, docs/frontends.md), a chain resubmitted to the other frontend
/// gets the original SCT (`a`'s dedup index sees every frontend's entries); without,
/// both commit to the store and each dedup index knows only its own frontend's
/// entries, so such a resubmission is logged again under a new index, with an SCT of
/// its own (the documented window, docs/backends/object-stores.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ct_frontends_on_one_mariadb_database_forwarding_to_one() {
    two_frontends_on(Backend::MariaDb, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ct_frontends_on_one_minio_bucket_both_committing() {
    two_frontends_on(Backend::Minio, false).await
}

async fn two_frontends_on(backend: Backend, forwarding: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The tests' root and the loadgen's, minted for this run.
    let (lg_cert, lg_key) = (dir.join("loadgen-root.pem"), dir.join("loadgen-root.key"));
    tlog_loadgen::ct::write_root(&lg_cert, &lg_key).unwrap();
    let roots = dir.join("roots.pem");
    let pem = std::fs::read_to_string(chains().join("test_root_ca_cert.pem")).unwrap()
        + &std::fs::read_to_string(&lg_cert).unwrap();
    std::fs::write(&roots, pem).unwrap();
    let token = dir.join("forward.token");
    std::fs::write(&token, "ct-frontends-secret\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let forward = |to: Option<&str>| {
        if !forwarding {
            return String::new();
        }
        let to = to.map_or(String::new(), |url| format!("to = \"{url}\"\n"));
        format!("[forward]\n{to}token_file = \"{}\"\n", token.display())
    };
    let store = CtStore::fresh(backend, dir).await;
    let http = Http::new();
    let (dir_a, dir_b) = (dir.join("a"), dir.join("b"));
    let mut a = start_ct_on(&store, &dir_a, &roots, "", &forward(None));
    a.wait_ready(&http).await;
    let mut b = start_ct_on(&store, &dir_b, &roots, "", &forward(Some(&a.url)));
    b.wait_ready(&http).await;

    let root = cert("test_root_ca_cert.pem");
    let inter = cert("test_intermediate_ca_cert.pem");
    let leaf = cert("test_leaf_cert_signed_by_intermediate.pem");
    let leaf_by_root = cert("test_leaf_cert_signed_by_root.pem");
    let precert = cert("test_leaf_pre_cert_signed_by_intermediate.pem");
    let precert_by_root = cert("test_leaf_pre_cert_signed_by_root.pem");

    // Each frontend takes chains (b's sequenced by a when it forwards).
    let (sct0, dup) = submit_when_ready(&http, &b.url, "add-chain", &[&leaf, &inter]).await;
    assert!(!dup);
    let i0 = check_sct(
        &sct0,
        LogEntry::X509 {
            certificate: leaf.clone(),
        },
    );
    // The intermediate was stored by b, and a never took a chain with it: a serves
    // it from the store, as b does.
    for d in [&a, &b] {
        let url = format!("{}/issuer/{}", d.url, hex(&Sha256::digest(&inter)));
        let (status, _, der) = http.get(&url).await.unwrap();
        assert_eq!(status, 200, "{url}");
        assert_eq!(der, inter);
    }
    let (sct1, dup) = submit_when_ready(&http, &a.url, "add-chain", &[&leaf_by_root]).await;
    assert!(!dup);
    let i1 = check_sct(
        &sct1,
        LogEntry::X509 {
            certificate: leaf_by_root.clone(),
        },
    );
    assert_ne!(i0, i1);
    let (sct2, dup) = submit_when_ready(&http, &b.url, "add-pre-chain", &[&precert, &inter]).await;
    assert!(!dup);
    // Resubmitted to the other frontend. Forwarding, always the original SCT. Without,
    // the other frontend's index knows the entry only if it caught up with the tree
    // past it (it indexes what others committed when it next commits): otherwise it is
    // logged again, under an index of its own and with an SCT of its own.
    let mut logged = 3;
    let resubmissions = [
        (&a, "add-chain", vec![&leaf[..], &inter, &root], &sct0, i0),
        (&b, "add-chain", vec![&leaf_by_root[..]], &sct1, i1),
        (&a, "add-pre-chain", vec![&precert[..], &inter], &sct2, 0),
    ];
    for (d, endpoint, chain, original, index) in resubmissions {
        let (again, dup) = submit_when_ready(&http, &d.url, endpoint, &chain).await;
        if dup {
            assert_same_sct(
                &again,
                original,
                &format!("{endpoint} resubmitted at {}", d.url),
            );
        } else {
            assert!(
                !forwarding,
                "{endpoint} resubmitted at {} logged again",
                d.url
            );
            let again_index = parse_leaf_index(&again.extensions).unwrap().unwrap();
            assert_eq!(again_index, logged, "appended");
            logged += 1;
        }
        if endpoint == "add-chain" {
            let i = check_sct(
                &again,
                LogEntry::X509 {
                    certificate: chain[0].to_vec(),
                },
            );
            assert!(i == index || !dup);
        }
    }
    // Each frontend serves the tree (a checkpoint another frontend published is read
    // within `checkpoint.max_age_ms`), so the loadgen reading through b starts there.
    for d in [&a, &b] {
        let cp = checkpoint(&http, &d.url, logged).await;
        assert_eq!(cp.size, logged);
    }

    // The loadgen's CT mode through both frontends, reading through b.
    let lg_key_der = B64.encode(ct_key().public_key_der());
    let args = <tlog_loadgen::Args as clap::Parser>::parse_from([
        "tlog-loadgen",
        "--ct",
        "--log-url",
        &b.url,
        "--write-log-url",
        &a.url,
        "--write-log-url",
        &b.url,
        "--log-public-key",
        &lg_key_der,
        "--origin",
        CT_ORIGIN,
        "--ct-root-cert",
        lg_cert.to_str().unwrap(),
        "--ct-root-key",
        lg_key.to_str().unwrap(),
        "--ct-precert-chance",
        "0.1",
        "--writers",
        "16",
        "--leaf-write-goal",
        "400",
        "--dup-chance",
        "0.1",
        "--readers-full",
        "1",
        "--readers-random",
        "1",
        "--read-rate",
        "100",
        "--checkpoint-poll",
        "50ms",
        "--max-runtime",
        "60",
        "--quiet",
    ]);
    let r = tokio::time::timeout(Duration::from_secs(120), tlog_loadgen::run(args))
        .await
        .expect("the run ends within its --max-runtime")
        .unwrap();
    assert!(r.ok, "{:?} {:?}", r.failure_reasons, r.error_samples);
    assert!(r.verification_failures.is_empty());
    assert_eq!(r.write_errors, 0, "{:?}", r.error_samples);
    assert!(r.writes_new + r.writes_duplicate >= 400);
    assert!(r.writes_duplicate > 0, "no duplicates sent");
    // Every resubmission, at either frontend, was found: the tree grew by the new
    // chains only.
    assert_eq!(r.tree_growth, r.writes_new);
    let size = logged + r.writes_new;
    assert_eq!(checkpoint(&http, &b.url, size).await.size, size);

    // a gone: b commits by itself, onto the tree a wrote.
    a.kill();
    let (sct3, dup) =
        submit_when_ready(&http, &b.url, "add-pre-chain", &[&precert_by_root, &root]).await;
    assert!(!dup);
    // The SCT signs the entry b stored, at the end of the tree.
    let (n, w) = (size / 256, (size % 256 + 1) as u16);
    let tile = tlogd_core::tile::TileId::data(n, w);
    let (_, data) = http.fetch_tile(&b.url, &tile).await;
    let stored = parse_data_tile(&data).unwrap().pop().unwrap();
    assert_eq!(
        stored.pre_certificate.as_deref(),
        Some(&precert_by_root[..])
    );
    let i3 = check_sct(&sct3, stored.timestamped_entry.entry.clone());
    assert_eq!(i3, size, "b appends after a's entries");
    let (ok, out) = tlogd_verify_ct(&b.url).await;
    assert!(ok, "through b: {out}");
    // a again: it catches up with what b logged meanwhile, and answers its
    // resubmission with b's SCT.
    let mut a = start_ct_on(&store, &dir_a, &roots, "", &forward(None));
    a.wait_ready(&http).await;
    let (again, dup) =
        submit_when_ready(&http, &a.url, "add-pre-chain", &[&precert_by_root, &root]).await;
    assert!(dup);
    assert_same_sct(&again, &sct3, "a resubmission at a restarted");
    check_sct(&again, stored.timestamped_entry.entry.clone());
    checkpoint(&http, &a.url, i3 + 1).await;
    let (ok, out) = tlogd_verify_ct(&a.url).await;
    assert!(ok, "through a: {out}");
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// One precertificate with two valid chains that give two different entries: it is
/// signed by a Precertificate Signing Certificate (RFC 6962 §3.1) that exists twice,
/// one name and one key under two roots. The entry holds what the chain gives (the
/// key hash of the signing certificate's issuer, and the TBS with that issuer's name),
/// so each chain makes other bytes. The precertificate, each chain and the roots file.
struct TwoPathPrecert {
    precert: Vec<u8>,
    chains: [[Vec<u8>; 2]; 2],
    roots_pem: String,
}

impl TwoPathPrecert {
    fn mint() -> TwoPathPrecert {
        use rcgen::{
            BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
            ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
            SanType, date_time_ymd,
        };
        let ca = |cn: &str| {
            let mut dn = DistinguishedName::new();
            dn.push(DnType::CommonName, cn);
            let mut p = CertificateParams::default();
            p.distinguished_name = dn;
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            p.not_before = date_time_ymd(2020, 1, 1);
            p.not_after = date_time_ymd(2049, 12, 31);
            p
        };
        let key = || KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let (root_key_a, root_key_b, psc_key, leaf_key) = (key(), key(), key(), key());
        let root_a = ca("tlogd test root A").self_signed(&root_key_a).unwrap();
        let root_b = ca("tlogd test root B").self_signed(&root_key_b).unwrap();
        let psc_params = || {
            let mut p = ca("tlogd test precertificate signer");
            p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(vec![
                1, 3, 6, 1, 4, 1, 11129, 2, 4, 4,
            ])];
            p
        };
        let psc_a = psc_params()
            .signed_by(&psc_key, &root_a, &root_key_a)
            .unwrap();
        let psc_b = psc_params()
            .signed_by(&psc_key, &root_b, &root_key_b)
            .unwrap();
        let host = "precert.two-paths.tlogd.invalid";
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        p.distinguished_name = dn;
        p.subject_alt_names = vec![SanType::DnsName(host.try_into().unwrap())];
        p.is_ca = IsCa::ExplicitNoCa;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.not_before = date_time_ymd(2025, 1, 1);
        p.not_after = date_time_ymd(2049, 1, 1);
        p.use_authority_key_identifier_extension = true;
        let mut poison =
            CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 11129, 2, 4, 3], vec![5, 0]);
        poison.set_criticality(true);
        p.custom_extensions.push(poison);
        // Signed by the signing certificate's key: it verifies under either copy.
        let precert = p.signed_by(&leaf_key, &psc_a, &psc_key).unwrap();
        let der = |c: &rcgen::Certificate| c.der().to_vec();
        TwoPathPrecert {
            precert: der(&precert),
            chains: [[der(&psc_a), der(&root_a)], [der(&psc_b), der(&root_b)]],
            roots_pem: format!("{}{}", root_a.pem(), root_b.pem()),
        }
    }

    /// The request's chain by path `i`.
    fn chain(&self, i: usize) -> [&[u8]; 3] {
        let [psc, root] = &self.chains[i];
        [&self.precert, psc, root]
    }
}

/// #57, hole 4: a precertificate resubmitted with another valid chain (another copy of
/// its Precertificate Signing Certificate) is a duplicate, and its SCT is the one of
/// the entry logged, read back, never one signed from the resubmitted chain, which
/// would name an entry that is not at that index. After a restart, so that the answer
/// is not the SCT cache's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_precertificate_resubmitted_by_another_path_gets_the_sct_of_its_logged_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pre = TwoPathPrecert::mint();
    let roots = dir.join("roots.pem");
    std::fs::write(&roots, &pre.roots_pem).unwrap();
    // The two paths give two entries (else this tests nothing).
    let (roots_parsed, _) = tlogd_ct::chain::Roots::from_pem(pre.roots_pem.as_bytes());
    let entry_by = |i: usize| {
        let chain: Vec<Vec<u8>> = pre.chain(i).iter().map(|c| c.to_vec()).collect();
        let v = tlogd_ct::chain::validate(
            &chain,
            tlogd_ct::chain::ChainKind::Precertificate,
            &roots_parsed,
            &tlogd_ct::chain::ChainPolicy::default(),
            1_800_000_000_000,
        )
        .unwrap_or_else(|e| panic!("path {i} validates: {e}"));
        match v.submission.entry {
            tlogd_ct::SubmittedEntry::Precertificate {
                issuer_key_hash,
                tbs_certificate,
                ..
            } => LogEntry::Precert {
                issuer_key_hash,
                tbs_certificate,
            },
            e => panic!("not a precertificate: {e:?}"),
        }
    };
    let (by_a, by_b) = (entry_by(0), entry_by(1));
    assert_ne!(by_a, by_b, "the two paths give the same entry");

    let http = Http::new();
    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    let (first, dup) = submit(&http, &d.url, "add-pre-chain", &pre.chain(0))
        .await
        .unwrap();
    assert!(!dup);
    let cp = checkpoint(&http, &d.url, 1).await;
    assert_eq!(cp.size, 1);
    let (_, data) = http
        .fetch_tile(&d.url, &tlogd_core::tile::TileId::data(0, 1))
        .await;
    let logged = parse_data_tile(&data).unwrap().pop().unwrap();
    assert_eq!(logged.timestamped_entry.entry, by_a);
    assert_eq!(check_sct(&first, by_a.clone()), 0);
    assert!(d.terminate().success());

    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    let (again, dup) = submit(&http, &d.url, "add-pre-chain", &pre.chain(1))
        .await
        .unwrap();
    assert!(dup, "the same precertificate is a duplicate");
    // What the log signed is the entry at index 0, as logged.
    assert_same_sct(&again, &first, "the resubmission by the other path");
    assert_eq!(check_sct(&again, by_a), 0);
    assert_eq!(checkpoint(&http, &d.url, 1).await.size, 1, "logged once");
    assert!(d.terminate().success());
}

/// #62: an add the log refuses for its own state (here frozen) stores nothing, not
/// even the chain's issuers; a missing issuer's `404` is `no-store` (a later add may
/// store it, and a CDN must not keep answering `404`); a chain's length is checked
/// before any certificate is decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_add_stores_nothing_and_missing_issuers_are_not_cached() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let roots = dir.join("roots.pem");
    std::fs::copy(chains().join("test_root_ca_cert.pem"), &roots).unwrap();
    let http = Http::new();
    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    assert_eq!(d.terminate().code(), Some(0));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["freeze", "--config"])
        .arg(dir.join("tlogd.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut d = start_ct(dir, &roots, "");
    d.wait_ready(&http).await;
    let inter = cert("test_intermediate_ca_cert.pem");
    let leaf = cert("test_leaf_cert_signed_by_intermediate.pem");
    let e = submit(&http, &d.url, "add-chain", &[&leaf, &inter])
        .await
        .expect_err("the log is frozen");
    assert_eq!(e.0, 403, "{}", e.1);
    let stored: Vec<_> = std::fs::read_dir(dir.join("log/issuer"))
        .map(|r| r.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        stored.is_empty(),
        "a refused add stored issuers: {stored:?}"
    );
    // The intermediate is not stored: 404, not to be cached; nor is a malformed path.
    let fp = hex(&Sha256::digest(&inter));
    for path in [format!("issuer/{fp}"), "issuer/not-hex".to_string()] {
        let (status, headers, _) = http.get(&format!("{}/{path}", d.url)).await.unwrap();
        assert_eq!(status, 404, "{path}");
        assert_eq!(
            headers.get("cache-control").map(String::as_str),
            Some("no-store"),
            "{path}"
        );
    }
    // Eleven certificates that are not even base64: refused for their number.
    let chain: Vec<&str> = vec!["!"; 11];
    let body = Bytes::from(serde_json::json!({ "chain": chain }).to_string());
    let (status, _, body) = http
        .post(&format!("{}/ct/v1/add-chain", d.url), body)
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("a chain of 11 certificates"),
        "{}",
        String::from_utf8_lossy(&body)
    );
}

/// A root of these tests and its key, to sign leaves under it.
struct TestRoot {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestRoot {
    fn mint(cn: &str) -> TestRoot {
        use rcgen::{
            BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
            KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, date_time_ymd,
        };
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        let mut p = CertificateParams::default();
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.not_before = date_time_ymd(2020, 1, 1);
        p.not_after = date_time_ymd(2049, 12, 31);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        TestRoot {
            cert: p.self_signed(&key).unwrap(),
            key,
        }
    }

    fn der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }

    fn fingerprint(&self) -> String {
        hex(&Sha256::digest(self.cert.der()))
    }

    /// A leaf certificate for `host` signed by this root.
    fn leaf(&self, host: &str) -> Vec<u8> {
        self.leaf_with(host, (2025, 1, 1), false)
    }

    /// A leaf issued on `not_before` (year, month, day), carrying an embedded SCT list
    /// (RFC 6962 §3.3) if `scts`.
    fn leaf_with(&self, host: &str, not_before: (i32, u8, u8), scts: bool) -> Vec<u8> {
        use rcgen::{
            CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            PKCS_ECDSA_P256_SHA256, SanType, date_time_ymd,
        };
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        p.distinguished_name = dn;
        p.subject_alt_names = vec![SanType::DnsName(host.try_into().unwrap())];
        p.is_ca = IsCa::ExplicitNoCa;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.not_before = date_time_ymd(not_before.0, not_before.1, not_before.2);
        p.not_after = date_time_ymd(2049, 1, 1);
        if scts {
            // An SCT list that is only bytes: the log does not read it, only sees it.
            p.custom_extensions
                .push(rcgen::CustomExtension::from_oid_content(
                    &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 2],
                    vec![0x04, 0x04, 0x00, 0x02, 0x00, 0x00],
                ));
        }
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        p.signed_by(&key, &self.cert, &self.key)
            .unwrap()
            .der()
            .to_vec()
    }
}

/// A CCADB CSV report (the columns Sunlight and TesseraCT read, and one more) with
/// the example row that has no certificate, and `rows`: a root and its uses.
fn ccadb_csv(rows: &[(&TestRoot, &str)]) -> String {
    let mut csv = String::from(
        "\"Salesforce Record ID\",\"Certificate Name\",\"X.509 Certificate (PEM)\",\"Intended Use Case(s) Served\"\n\
         \"001\",\"Example CA\",\"\",\"\"\n",
    );
    for (i, (root, uses)) in rows.iter().enumerate() {
        csv.push_str(&format!(
            "\"{}\",\"root {i}\",\"{}\",\"{uses}\"\n",
            100 + i,
            root.cert.pem().trim()
        ));
    }
    csv
}

const TLS_USE: &str =
    "Server Authentication (TLS) 1.3.6.1.5.5.7.3.1;Secure Email (SMIME) 1.3.6.1.5.5.7.3.4";
const SMIME_USE: &str = "Secure Email (SMIME) 1.3.6.1.5.5.7.3.4";

/// How the roots server of these tests answers its next requests.
#[derive(Clone)]
enum RootsAnswer {
    /// `200` with these bytes.
    Body(Vec<u8>),
    /// This status and no body.
    Status(u16),
    /// The body after this long (past the daemon's fetch timeout).
    Slow(Duration, Vec<u8>),
    /// A `Content-Length` 1000 bytes more than these bytes, then the connection closed.
    Short(Vec<u8>),
}

/// The head of an HTTP/1.1 request read from `sock` (up to its blank line), or `None`
/// if the connection ends first: the fixture servers' request reader.
async fn request_head(sock: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(head)
}

/// A roots server on loopback (raw HTTP/1.1, one request per connection): its URL and
/// the answer it gives, to be changed by the test.
async fn roots_server() -> (String, std::sync::Arc<std::sync::Mutex<RootsAnswer>>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ccadb/report.csv", listener.local_addr().unwrap());
    let answer = std::sync::Arc::new(std::sync::Mutex::new(RootsAnswer::Status(503)));
    let a = answer.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let a = a.lock().unwrap().clone();
            tokio::spawn(async move {
                let Some(head) = request_head(&mut sock).await else {
                    return;
                };
                assert!(head.starts_with(b"GET /ccadb/report.csv HTTP/1.1\r\n"));
                let ok = |len: usize| {
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n")
                };
                let reply = match a {
                    RootsAnswer::Body(b) => [ok(b.len()).into_bytes(), b].concat(),
                    RootsAnswer::Status(s) => format!(
                        "HTTP/1.1 {s} Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    .into_bytes(),
                    RootsAnswer::Slow(wait, b) => {
                        tokio::time::sleep(wait).await;
                        [ok(b.len()).into_bytes(), b].concat()
                    }
                    RootsAnswer::Short(b) => [ok(b.len() + 1000).into_bytes(), b].concat(),
                };
                let _ = sock.write_all(&reply).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (url, answer)
}

/// `get-roots`, decoded.
async fn get_roots(http: &Http, base: &str) -> Vec<Vec<u8>> {
    let (status, _, body) = http.get(&format!("{base}/ct/v1/get-roots")).await.unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| B64.decode(c.as_str().unwrap()).unwrap())
        .collect()
}

/// Wait until `get-roots` answers `want`.
async fn wait_roots(http: &Http, base: &str, want: &[Vec<u8>], what: &str) {
    for _ in 0..400 {
        if get_roots(http, base).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{what}: get-roots has {} roots, not the {} wanted",
        get_roots(http, base).await.len(),
        want.len()
    );
}

async fn daemon_metric(http: &Http, d: &Daemon, name: &str) -> f64 {
    let (_, _, text) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    common::metric(&String::from_utf8_lossy(&text), name)
}

/// #60: roots from a CCADB report (or a PEM bundle) at a URL, merged into the file's,
/// refreshed on SIGHUP without a restart, never dropped when the source drops them,
/// only by the operator's reject list; a failed, partial, garbled or slow fetch
/// changes nothing and is counted; a restart while the URL is down serves the set kept
/// in the log's storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_follow_the_root_programs_and_are_never_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let http = Http::new();
    let [
        file_root,
        tls_root,
        smime_root,
        rejected,
        later,
        in_bundle,
        cut,
    ] = ["file", "tls", "smime", "rejected", "later", "bundle", "cut"]
        .map(|n| TestRoot::mint(&format!("tlogd roots test: {n}")));
    let roots_file = tmp.path().join("roots.pem");
    std::fs::write(&roots_file, file_root.cert.pem()).unwrap();
    let (url, answer) = roots_server().await;
    *answer.lock().unwrap() = RootsAnswer::Body(
        ccadb_csv(&[
            (&tls_root, TLS_USE),
            (&smime_root, SMIME_USE),
            (&rejected, TLS_USE),
        ])
        .into_bytes(),
    );
    let ct_toml = format!(
        "roots_url = \"{url}\"\nroots_fetch_timeout_ms = 1000\nroots_reject_fingerprints = [\"{}\"]\n",
        rejected.fingerprint()
    );
    let dir = tmp.path().join("d");
    let mut d = start_ct(&dir, &roots_file, &ct_toml);
    d.wait_ready(&http).await;
    let base = d.url.clone();

    // At start: the file's root, then the report's TLS root; not the S/MIME-only one,
    // not the rejected one.
    let mut want = vec![file_root.der(), tls_root.der()];
    wait_roots(&http, &base, &want, "the first fetch").await;
    submit(
        &http,
        &base,
        "add-chain",
        &[&tls_root.leaf("a.tls.example"), &tls_root.der()],
    )
    .await
    .expect("a chain under a root from the report");
    let refused = submit(
        &http,
        &base,
        "add-chain",
        &[&rejected.leaf("r.example"), &rejected.der()],
    )
    .await
    .expect_err("a chain under a rejected root");
    assert_eq!(refused.0, 400, "{}", refused.1);

    // The report drops its root and adds another: the new one is taken on SIGHUP, the
    // dropped one kept, and a chain under the new one validates without a restart.
    *answer.lock().unwrap() = RootsAnswer::Body(ccadb_csv(&[(&later, TLS_USE)]).into_bytes());
    hup(&d);
    want.push(later.der());
    wait_roots(&http, &base, &want, "a root added upstream").await;
    submit(
        &http,
        &base,
        "add-chain",
        &[&later.leaf("b.later.example"), &later.der()],
    )
    .await
    .expect("a chain under a root added by a refresh");
    submit(
        &http,
        &base,
        "add-chain",
        &[&tls_root.leaf("c.tls.example"), &tls_root.der()],
    )
    .await
    .expect("a chain under a root dropped upstream, kept here");
    assert_eq!(daemon_metric(&http, &d, "tlogd_ct_roots").await, 3.0);
    assert!(
        daemon_metric(&http, &d, "tlogd_ct_roots_last_refresh_timestamp_seconds").await > 1.7e9
    );

    // Failures change nothing, are counted, and leave the log ready. The truncated
    // report would add `cut` if it were taken in part.
    let mut truncated = ccadb_csv(&[(&later, TLS_USE), (&cut, TLS_USE)]);
    truncated.truncate(truncated.len() - 200);
    let report = ccadb_csv(&[(&cut, TLS_USE)]).into_bytes();
    for (why, a) in [
        ("a 500", RootsAnswer::Status(500)),
        (
            "a report cut mid-row",
            RootsAnswer::Body(truncated.into_bytes()),
        ),
        (
            "a garbled answer",
            RootsAnswer::Body(b"<html>maintenance</html>".to_vec()),
        ),
        (
            "a body shorter than its length",
            RootsAnswer::Short(report.clone()),
        ),
        (
            "a server past the timeout",
            RootsAnswer::Slow(Duration::from_secs(3), report.clone()),
        ),
    ] {
        let errors =
            daemon_metric(&http, &d, "tlogd_ct_roots_fetches_total{result=\"error\"}").await;
        *answer.lock().unwrap() = a;
        hup(&d);
        let mut counted = false;
        for _ in 0..200 {
            if daemon_metric(&http, &d, "tlogd_ct_roots_fetches_total{result=\"error\"}").await
                > errors
            {
                counted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(counted, "{why}: no failed fetch counted");
        assert_eq!(
            get_roots(&http, &base).await,
            want,
            "{why} changed the roots"
        );
        let (status, _, _) = http
            .get(&format!("{}/readyz", d.metrics_url))
            .await
            .unwrap();
        assert_eq!(status, 200, "{why}: not ready");
    }

    // A PEM bundle is a source too.
    *answer.lock().unwrap() = RootsAnswer::Body(in_bundle.cert.pem().into_bytes());
    hup(&d);
    want.push(in_bundle.der());
    wait_roots(&http, &base, &want, "a root from a PEM bundle").await;

    // A restart while the URL is down: the stored set at once, the file's root first.
    *answer.lock().unwrap() = RootsAnswer::Status(500);
    d.terminate();
    let mut d = start_ct(&dir, &roots_file, &ct_toml);
    d.wait_ready(&http).await;
    assert_eq!(
        get_roots(&http, &d.url).await,
        want,
        "after a restart without the URL"
    );
    // Stored: the file's root at the first start, then each refresh that added one.
    let stored =
        std::fs::read_to_string(dir.join("log/ct/roots/4")).expect("the fourth stored set");
    assert!(stored.contains("tlogd roots test: bundle"), "{stored}");
    assert!(!dir.join("log/ct/roots/5").exists(), "nothing new to store");
    d.terminate();
}

/// #60: the frontends of a shared store serve the same roots: one whose URL is down
/// takes what another fetched from the store at its next refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_of_a_store_share_their_roots() {
    let tmp = tempfile::tempdir().unwrap();
    let http = Http::new();
    let [file_root, fetched] =
        ["file", "fetched"].map(|n| TestRoot::mint(&format!("shared roots: {n}")));
    let roots_file = tmp.path().join("roots.pem");
    std::fs::write(&roots_file, file_root.cert.pem()).unwrap();
    let store = CtStore::fresh(Backend::Minio, tmp.path()).await;
    let (up, up_answer) = roots_server().await;
    *up_answer.lock().unwrap() = RootsAnswer::Body(ccadb_csv(&[(&fetched, TLS_USE)]).into_bytes());
    let (down, _) = roots_server().await;
    let mut a = start_ct_on(
        &store,
        &tmp.path().join("a"),
        &roots_file,
        &format!("roots_url = \"{up}\"\n"),
        "",
    );
    a.wait_ready(&http).await;
    let want = vec![file_root.der(), fetched.der()];
    wait_roots(&http, &a.url, &want, "frontend a").await;
    let mut b = start_ct_on(
        &store,
        &tmp.path().join("b"),
        &roots_file,
        &format!("roots_url = \"{down}\"\n"),
        "",
    );
    b.wait_ready(&http).await;
    wait_roots(&http, &b.url, &want, "frontend b, its URL down").await;
    b.terminate();
    a.terminate();
}

/// #60: under load the least urgent submissions go first. With two adds in progress
/// (held by a long batch), a certificate carrying SCTs and an old certificate get
/// `429` at once; a fresh final certificate still goes in; with four in progress it
/// gets `429` too; a precertificate always goes in. Then, the load gone, everything is
/// taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_precertificates_come_first() {
    let tmp = tempfile::tempdir().unwrap();
    let http = Http::new();
    let root = TestRoot::mint("priority test root");
    let roots_file = tmp.path().join("roots.pem");
    std::fs::write(&roots_file, root.cert.pem()).unwrap();
    let dir = tmp.path().join("d");
    let mut d = start_ct_on(
        &CtStore::posix(&dir),
        &dir,
        &roots_file,
        "priority_high_water = 2
priority_old_days = 30
",
        "[batching]
max_age_ms = 4000
max_entries = 1000
",
    );
    d.wait_ready(&http).await;
    let base = d.url.clone();
    let today = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        / 86_400;
    let day = |days: i64| {
        let (y, m, d) = tlogd_core::time::civil_from_days(days);
        (y as i32, m as u8, d as u8)
    };
    let (fresh, old) = (day(today - 1), day(today - 90));
    let post = |chain: Vec<Vec<u8>>, endpoint: &'static str| {
        let http = http.clone();
        let base = base.clone();
        tokio::spawn(async move {
            let refs: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
            submit(&http, &base, endpoint, &refs).await.map(|_| ())
        })
    };
    let chain = |leaf: Vec<u8>| vec![leaf, root.der()];
    // Two fresh final certificates: in progress until the batch commits (4 s).
    let held: Vec<_> = (0..2)
        .map(|i| {
            post(
                chain(root.leaf_with(&format!("held{i}.example"), fresh, false)),
                "add-chain",
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (what, leaf) in [
        (
            "a certificate carrying SCTs",
            root.leaf_with("scts.example", fresh, true),
        ),
        (
            "an old certificate",
            root.leaf_with("old.example", old, false),
        ),
    ] {
        let started = std::time::Instant::now();
        let refused = post(chain(leaf), "add-chain")
            .await
            .unwrap()
            .expect_err(what);
        assert_eq!(refused.0, 429, "{what}: {}", refused.1);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{what}: not refused at once"
        );
    }
    // A third and a fourth in progress: a fresh final certificate is refused now, a
    // precertificate is not.
    let more: Vec<_> = (2..4)
        .map(|i| {
            post(
                chain(root.leaf_with(&format!("held{i}.example"), fresh, false)),
                "add-chain",
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = post(
        chain(root.leaf_with("final.example", fresh, false)),
        "add-chain",
    )
    .await
    .unwrap()
    .expect_err("a final certificate at twice the high water");
    assert_eq!(refused.0, 429, "{}", refused.1);
    let (precert, _) = {
        let p = TwoPathPrecert::mint();
        std::fs::write(&roots_file, format!("{}{}", root.cert.pem(), p.roots_pem)).unwrap();
        hup(&d);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let c: Vec<Vec<u8>> = p.chain(0).iter().map(|c| c.to_vec()).collect();
        (post(c, "add-pre-chain"), ())
    };
    for h in held.into_iter().chain(more) {
        h.await.unwrap().expect("a held add");
    }
    precert
        .await
        .unwrap()
        .expect("the precertificate, under load");
    let (_, _, text) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text);
    assert_eq!(
        common::metric(&text, "tlogd_ct_priority_shed_total{class=\"least\"}"),
        2.0
    );
    assert_eq!(
        common::metric(&text, "tlogd_ct_priority_shed_total{class=\"final\"}"),
        1.0
    );
    // No load: the least urgent go in.
    submit(
        &http,
        &base,
        "add-chain",
        &[&root.leaf_with("scts.example", fresh, true), &root.der()],
    )
    .await
    .expect("a certificate carrying SCTs, without load");
    d.terminate();
}

/// A directory served over HTTP/1.1 on loopback (one request per connection), each
/// data tile answered `delay` late, so that a copy from it can be stopped between two
/// commits. Its base URL.
async fn slow_dir_server(dir: PathBuf, delay: Duration) -> String {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let dir = dir.clone();
            tokio::spawn(async move {
                let Some(head) = request_head(&mut sock).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&head);
                let path = head
                    .split(' ')
                    .nth(1)
                    .unwrap_or("/")
                    .trim_start_matches('/');
                if path.starts_with("tile/data/") {
                    tokio::time::sleep(delay).await;
                }
                let reply = match std::fs::read(dir.join(path)) {
                    Ok(b) => [
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            b.len()
                        )
                        .into_bytes(),
                        b,
                    ]
                    .concat(),
                    Err(_) => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = sock.write_all(&reply).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    url
}

/// A TesseraCT v0.1.1 POSIX log of at least `goal` leaves in `dir/log`, written by
/// its CT hammer, signed with the tests' CT key (so that tlogd, with that key, can
/// continue it). TesseraCT is stopped before this returns.
async fn tesseract_log(dir: &Path, goal: u64) -> PathBuf {
    let testdata = chains().join("hammer");
    std::fs::create_dir_all(dir).unwrap();
    let pkcs8 = dir.join("key.pkcs8.pem");
    std::fs::write(&pkcs8, ct_key().to_pkcs8_pem().unwrap()).unwrap();
    // TesseraCT takes SEC 1 ("EC PRIVATE KEY") PEM only.
    let sec1 = dir.join("key.pem");
    let out = std::process::Command::new("openssl")
        .args(["ec", "-in"])
        .arg(&pkcs8)
        .arg("-out")
        .arg(&sec1)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = dir.join("log");
    // TesseraCT v0.1.1 creates `issuer/` on its first writes, and two writers racing
    // to create it fail one add with 500 ("mkdir ...: file exists"): made here first.
    std::fs::create_dir_all(log.join("issuer")).unwrap();
    let port = free_port();
    let mut tesseract = std::process::Command::new(find_tool("tesseract-posix"))
        .arg(format!("--http_endpoint=127.0.0.1:{port}"))
        .arg(format!("--origin={CT_ORIGIN}"))
        .arg(format!("--private_key={}", sec1.display()))
        .arg(format!(
            "--roots_pem_file={}",
            testdata.join("test_root_ca_cert.pem").display()
        ))
        .arg(format!("--storage_dir={}", log.display()))
        .arg("--enable_publication_awaiter=false")
        .arg("--checkpoint_interval=500ms")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("tesseract.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !log.join("checkpoint").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "TesseraCT wrote no checkpoint: {}",
            std::fs::read_to_string(dir.join("tesseract.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hammer(
        &format!("file://{}/", log.display()),
        &format!("http://127.0.0.1:{port}/"),
        goal,
        1000,
    )
    .await;
    // The hammer stops once a checkpoint reaches its goal, but TesseraCT may have
    // integrated more by then (tiles written, the checkpoint 500 ms behind): killed
    // at once, its directory would hold tiles past its checkpoint, which no copy
    // has. Killed once its checkpoint stands still for over two intervals.
    let size = || {
        std::fs::read(log.join("checkpoint"))
            .ok()
            .and_then(|cp| tlogd_core::checkpoint::signed_size(&cp))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = size();
    loop {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let now = size();
        if now == last {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "TesseraCT's checkpoint never settled"
        );
        last = now;
    }
    tesseract.kill().unwrap();
    tesseract.wait().unwrap();
    log
}

/// How many issuers `tlogd migrate` says it copied ("... and N issuers from ...").
fn copied_issuers(out: &str) -> usize {
    out.split(" issuers from ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no issuer count in: {out}"))
}

/// Run `tlogd migrate` with `args`: its exit status and stdout (stderr on failure).
fn migrate(args: &[String], env: &[(String, String)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .arg("migrate")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The chain of the entry at `index` of the CT log at `base` as it was submitted:
/// its endpoint, the certificate or precertificate, then its issuers, read from the
/// data tile and `issuer/`; and the entry's timestamp.
async fn logged_chain(
    http: &Http,
    base: &str,
    size: u64,
    index: u64,
) -> (&'static str, Vec<Vec<u8>>, u64) {
    let n = index / 256;
    let path = tlogd_core::tile::TileId {
        kind: tlogd_core::tile::TileKind::Data,
        index: n,
        width: (size - n * 256).min(256) as u16,
    }
    .path();
    let (status, _, tile) = http.get(&format!("{base}/{path}")).await.unwrap();
    assert_eq!(status, 200, "{path}");
    let leaf = parse_data_tile(&tile)
        .unwrap()
        .swap_remove((index % 256) as usize);
    let mut chain = vec![
        match (&leaf.timestamped_entry.entry, &leaf.pre_certificate) {
            (LogEntry::X509 { certificate }, _) => certificate.clone(),
            (LogEntry::Precert { .. }, Some(pre)) => pre.clone(),
            (LogEntry::Precert { .. }, None) => {
                panic!("a precertificate entry without its precertificate")
            }
        },
    ];
    for f in &leaf.certificate_chain {
        let (status, _, issuer) = http
            .get(&format!("{base}/issuer/{}", hex(f)))
            .await
            .unwrap();
        assert_eq!(status, 200);
        chain.push(issuer.to_vec());
    }
    let endpoint = match leaf.pre_certificate {
        Some(_) => "add-pre-chain",
        None => "add-chain",
    };
    (endpoint, chain, leaf.timestamped_entry.timestamp)
}

/// #60: a TesseraCT log moved into tlogd. TesseraCT v0.1.1's POSIX server, under its
/// CT hammer, writes a log with the tests' CT key; `tlogd migrate` copies it into a
/// tlogd CT log with the same key (a continuation). On POSIX the copy is read over
/// HTTP and killed once it has committed a data tile (no checkpoint in the target),
/// then resumed from the directory; on MinIO it is read over HTTP from a copy whose
/// data tiles are gzip-compressed, as Sunlight keeps them. Every data tile,
/// hash tile, issuer and the checkpoint are byte for byte TesseraCT's; a second run
/// copies nothing; `tlogd serve` then answers a resubmitted certificate with its
/// original index and timestamp, the hammer continues the log through tlogd, and
/// `tlogd verify --ct` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tesseract_log_migrated_in_is_continued() {
    tesseract_log_migrated_into(Backend::Posix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tesseract_log_migrated_into_minio_is_continued() {
    tesseract_log_migrated_into(Backend::Minio).await
}

async fn tesseract_log_migrated_into(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tesseract_log(&tmp.path().join("tesseract"), 700).await;
    let source_cp = std::fs::read(src.join("checkpoint")).unwrap();
    let size = tlogd_core::checkpoint::signed_size(&source_cp).unwrap();
    assert!(size >= 700, "{}", String::from_utf8_lossy(&source_cp));
    let dir = tmp.path().join("tlogd");
    let store = CtStore::fresh(backend, &dir).await;
    let roots = chains().join("hammer/test_root_ca_cert.pem");
    let (cfg, _, _) = ct_config(&store, &dir, &roots, "", "");
    let flags = |from: &str| -> Vec<String> {
        [
            "--config",
            cfg.to_str().unwrap(),
            "--from",
            from,
            "--quiet",
            "--jobs",
            "1",
            "--bundles-per-commit",
            "1",
        ]
        .map(String::from)
        .to_vec()
    };
    let slow = slow_dir_server(src.clone(), Duration::from_millis(300)).await;
    if backend == Backend::Posix {
        // Killed once the first data tile is committed: before the next one is.
        let target = dir.join("log");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .arg("migrate")
            .args(flags(&slow))
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !target.join("tile/data/000").exists() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the migration ended before it was killed"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "the migration made no progress"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            !target.join("checkpoint").exists(),
            "a checkpoint after the kill"
        );
        let (ok, out) = migrate(&flags(src.to_str().unwrap()), &store.env);
        assert!(ok, "{out}");
        // Resumed after the data tiles committed before the kill (usually one; the
        // next may have been committed before the kill landed).
        let resumed: u64 = out
            .split("resumed at ")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not resumed: {out}"));
        assert!(
            resumed >= 256 && resumed < size && resumed.is_multiple_of(256),
            "{out}"
        );
        assert!(copied_issuers(&out) > 0, "{out}");
        // Byte for byte TesseraCT's: data and hash tiles, issuers, the checkpoint.
        for f in tlogd_core::conformance::files(&src) {
            let name = f.display().to_string();
            // TesseraCT's own state is not copied, nor are partial tiles of earlier
            // sizes (its history, not the tree's; the last ones `tlogd verify --ct`
            // checks below).
            let public =
                name == "checkpoint" || name.starts_with("tile/") || name.starts_with("issuer/");
            if !public || name.contains(".p/") {
                continue;
            }
            assert!(
                std::fs::read(target.join(&f)).ok() == Some(std::fs::read(src.join(&f)).unwrap()),
                "{name} differs from TesseraCT's"
            );
        }
    } else {
        // Over HTTP from a copy laid out as Sunlight keeps its log: gzip data tiles.
        let sunlit = tmp.path().join("sunlight-style");
        for f in tlogd_core::conformance::files(&src) {
            let bytes = std::fs::read(src.join(&f)).unwrap();
            let bytes = match f.starts_with("tile/data") {
                true => {
                    use std::io::Write as _;
                    let mut gz =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    gz.write_all(&bytes).unwrap();
                    gz.finish().unwrap()
                }
                false => bytes,
            };
            std::fs::create_dir_all(sunlit.join(&f).parent().unwrap()).unwrap();
            std::fs::write(sunlit.join(&f), bytes).unwrap();
        }
        let sunlit_url = slow_dir_server(sunlit, Duration::ZERO).await;
        let (ok, out) = migrate(&flags(&sunlit_url), &store.env);
        assert!(ok, "{out}");
        assert!(out.contains(&format!("size {size}")), "{out}");
        let issuers = std::fs::read_dir(src.join("issuer")).unwrap().count();
        assert_eq!(copied_issuers(&out), issuers, "{out}");
    }
    let (ok, out) = migrate(&flags(&slow), &store.env);
    assert!(ok && out.contains("nothing to copy"), "{out}");
    if backend == Backend::Posix {
        // Without the log's key, checked with its public key only: a mirror, whole.
        let mirror = dir.join("mirror");
        let mirror_cfg = dir.join("mirror.toml");
        std::fs::write(
            &mirror_cfg,
            format!(
                "origin = \"{CT_ORIGIN}\"\n[storage]\ndir = \"{}\"\n[ct]\nroots_file = \"{}\"\n",
                mirror.display(),
                roots.display()
            ),
        )
        .unwrap();
        let spki = B64.encode(ct_key().public_key_der());
        let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let args = [
            "--config",
            mirror_cfg.to_str().unwrap(),
            "--from",
            &slow,
            "--quiet",
        ];
        let (ok, out) = migrate(&strings(&args), &[]);
        assert!(!ok && out.contains("nothing to check"), "{out}");
        let (ok, out) = migrate(
            &strings(&[&args[..], &["--source-public-key", &spki]].concat()),
            &[],
        );
        assert!(ok && out.contains("a mirror"), "{out}");
        let issuers = std::fs::read_dir(src.join("issuer")).unwrap().count();
        assert_eq!(copied_issuers(&out), issuers, "{out}");
        let (ok, out) = tlogd_verify_ct(mirror.to_str().unwrap()).await;
        assert!(ok, "{out}");
    }

    // Continued by tlogd, with the same key: a certificate submitted again gets the
    // index and timestamp TesseraCT gave it; the hammer goes on through tlogd.
    let http = Http::new();
    let mut d = start_ct_on(&store, &dir, &roots, "", "");
    d.wait_ready(&http).await;
    assert_eq!(checkpoint(&http, &d.url, size).await.size, size);
    for index in [3, size - 1] {
        let (endpoint, chain, timestamp) = logged_chain(&http, &d.url, size, index).await;
        let chain: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
        let (sct, duplicate) = submit_when_ready(&http, &d.url, endpoint, &chain).await;
        assert!(duplicate, "entry {index} resubmitted");
        assert_eq!(sct.timestamp, timestamp, "entry {index}'s timestamp");
        assert_eq!(parse_leaf_index(&sct.extensions).unwrap(), Some(index));
    }
    let base = format!("{}/", d.url);
    hammer(&base, &base, size + 300, 1000).await;
    let (ok, out) = tlogd_verify_ct(&d.url).await;
    assert!(ok, "{out}");
    assert!(d.terminate().success());
}
