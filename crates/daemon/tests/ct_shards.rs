//! Temporal shards of a Certificate Transparency log in one daemon (POSIX): each
//! `[[logs]]` entry with its own `[logs.ct]` (key, window, directory); certificates go
//! to the shard whose notAfter window holds them (the other answers 400); every shard
//! serves its `log.v3.json`; a shard whose window has ended is frozen at start-up, and
//! one whose window ends while the daemon runs is frozen then (adds 403, reads go on,
//! `log.v3.json` says `readonly` with the final tree head of its checkpoint).

mod common;
#[path = "support/witness.rs"]
mod witness;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use common::{Daemon, Http, Opts, free_port};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber, date_time_ymd,
};
use sha2::{Digest, Sha256};
use tlogd::routes::ct_shard::format_rfc3339_ms;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::note::Note;
use tlogd_static_ct::signer::LogKey;
use tlogd_static_ct::sth::verify_note_signature;

/// A self-signed root and the leaves it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "tlogd tests");
        dn.push(DnType::CommonName, "tlogd ct shards test root");
        let mut p = CertificateParams::default();
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.not_before = date_time_ymd(1999, 1, 1);
        p.not_after = date_time_ymd(2049, 12, 31);
        p.serial_number = Some(SerialNumber::from_slice(&[0x40, 1]));
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf certificate (DER) expiring on `(year, month, day)`.
    fn leaf(&self, n: u8, (year, month, day): (i32, u8, u8)) -> Vec<u8> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let host = format!("leaf-{n}.shards.tlogd.invalid");
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.clone());
        p.distinguished_name = dn;
        p.subject_alt_names = vec![SanType::DnsName(host.try_into().unwrap())];
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.not_before = date_time_ymd(2000, 1, 1);
        p.not_after = date_time_ymd(year, month, day);
        p.serial_number = Some(SerialNumber::from_slice(&[0x10, n]));
        p.use_authority_key_identifier_extension = true;
        p.signed_by(&key, &self.cert, &self.key)
            .unwrap()
            .der()
            .to_vec()
    }
}

/// One shard of the test: its `[[logs]]` name, window and extra `[logs.ct]` keys.
struct Shard {
    name: &'static str,
    start: String,
    limit: String,
    extra: String,
}

impl Shard {
    fn new(name: &'static str, start: &str, limit: &str, extra: &str) -> Shard {
        Shard {
            name,
            start: start.into(),
            limit: limit.into(),
            extra: extra.into(),
        }
    }

    fn origin(&self) -> String {
        format!("ct.example.com/{}", self.name)
    }
}

fn shard_key(name: &str) -> LogKey {
    LogKey::from_scalar(&Sha256::digest(format!("tlogd ct shard test key {name}"))).unwrap()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Write the roots file, each shard's key and the config `dir/tlogd-<n>.toml`: its
/// path and the daemon's two ports.
fn write_config(dir: &Path, ca: &Ca, shards: &[Shard], n: u32) -> (PathBuf, u16, u16) {
    use std::os::unix::fs::PermissionsExt;
    let (port, mport) = (free_port(), free_port());
    let roots = dir.join("roots.pem");
    std::fs::write(&roots, ca.cert.pem()).unwrap();
    let mut toml =
        format!("listen = \"127.0.0.1:{port}\"\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n");
    for s in shards {
        let key = dir.join(format!("{}.pem", s.name));
        std::fs::write(&key, shard_key(s.name).to_pkcs8_pem().unwrap()).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        toml.push_str(&format!(
            "[[logs]]\nname = \"{name}\"\norigin = \"{origin}\"\nprivate_key_file = \"{key}\"\n\
             [logs.storage]\ndir = \"{dir}\"\n[logs.checkpoint]\ninterval_ms = 50\n\
             [logs.ct]\nroots_file = \"{roots}\"\nnot_after_start = \"{start}\"\n\
             not_after_limit = \"{limit}\"\n{extra}",
            name = s.name,
            origin = s.origin(),
            key = key.display(),
            dir = dir.join(s.name).display(),
            roots = roots.display(),
            start = s.start,
            limit = s.limit,
            extra = s.extra,
        ));
    }
    let cfg = dir.join(format!("tlogd-{n}.toml"));
    std::fs::write(&cfg, toml).unwrap();
    (cfg, port, mport)
}

/// Start the daemon on `shards` (stderr to `dir/stderr-<n>`, at info level).
fn start(dir: &Path, ca: &Ca, shards: &[Shard], n: u32) -> Daemon {
    let (cfg, port, mport) = write_config(dir, ca, shards, n);
    spawn(dir, &cfg, port, mport, n)
}

fn spawn(dir: &Path, cfg: &Path, port: u16, mport: u16, n: u32) -> Daemon {
    let opts = Opts {
        rust_log: Some("info"),
        stderr_to: Some(dir.join(format!("stderr-{n}"))),
        ..Opts::default()
    };
    Daemon::spawn(dir, cfg, port, mport, &opts)
}

/// The served checkpoint of the shard at `base` (not verified) and its bytes.
async fn checkpoint(http: &Http, base: &str) -> (Checkpoint, Note) {
    let (status, _, body) = http.get(&format!("{base}/checkpoint")).await.unwrap();
    assert_eq!(status, 200, "{base}/checkpoint");
    let note = Note::parse(&body).unwrap();
    (Checkpoint::parse(&note.text).unwrap(), note)
}

/// Wait until the shard at `base` publishes a checkpoint of `size`.
async fn wait_size(http: &Http, base: &str, size: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while checkpoint(http, base).await.0.size < size {
        assert!(
            Instant::now() < deadline,
            "{base}: no checkpoint of size {size}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submit `leaf` (its root is added by the log) to the shard `name`: the status and
/// body.
async fn add(http: &Http, d: &Daemon, name: &str, leaf: &[u8]) -> (u16, String) {
    let body = serde_json::json!({ "chain": [B64.encode(leaf)] }).to_string();
    let url = format!("{}/{name}/ct/v1/add-chain", d.url);
    let (status, _, body) = http.post(&url, Bytes::from(body)).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn log_v3(http: &Http, d: &Daemon, name: &str) -> serde_json::Value {
    let (status, headers, body) = http
        .get(&format!("{}/{name}/log.v3.json", d.url))
        .await
        .unwrap();
    assert_eq!(
        status,
        200,
        "{name}/log.v3.json: {:?}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert!(body.ends_with(b"}\n"), "one JSON object and a newline");
    serde_json::from_slice(&body).unwrap()
}

/// The checks every shard's entry passes: its key, ID, window, URLs and software.
fn check_entry(v: &serde_json::Value, s: &Shard) {
    let key = shard_key(s.name);
    assert_eq!(v["key"], B64.encode(key.public_key_der()), "{}", s.name);
    assert_eq!(v["log_id"], B64.encode(key.log_id()));
    assert_eq!(v["description"], s.origin());
    assert_eq!(v["friendly_name"], s.name);
    let url = format!("https://{}/", s.origin());
    assert_eq!(v["submission_url"], url);
    assert_eq!(v["monitoring_url"], url);
    assert_eq!(v["submission_endpoint"]["url"], url);
    assert_eq!(v["monitoring_endpoint"]["url"], url);
    assert_eq!(v["temporal_interval"]["start_inclusive"], s.start);
    assert_eq!(v["temporal_interval"]["end_exclusive"], s.limit);
    assert_eq!(v["log_spec"], "static-ct-api");
    assert_eq!(
        (v["mmd"].as_u64(), v["mmd_seconds"].as_u64()),
        (Some(60), Some(60))
    );
    assert_eq!(v["tls_only"], true);
    assert_eq!(v["log_software"]["name"], "tlogd");
}

/// A frozen shard's entry: `readonly`, and its final tree head that of the served
/// checkpoint, whose RFC 6962 signature carries the timestamp.
async fn check_frozen(http: &Http, d: &Daemon, s: &Shard, size: u64) {
    let v = log_v3(http, d, s.name).await;
    check_entry(&v, s);
    assert_eq!(v["status"], "readonly", "{}: {v}", s.name);
    assert!(v.get("planned_changes").is_none());
    let (cp, note) = checkpoint(http, &format!("{}/{}", d.url, s.name)).await;
    assert_eq!((cp.origin.as_str(), cp.size), (s.origin().as_str(), size));
    let key = shard_key(s.name);
    let timestamp = verify_note_signature(
        &cp.origin,
        key.public_key_der(),
        &key.log_id(),
        cp.size,
        &cp.root,
        &[
            &note.signatures[0].key_id.to_be_bytes()[..],
            &note.signatures[0].signature,
        ]
        .concat(),
    )
    .expect("the checkpoint is signed with the shard's key");
    let head = &v["final_tree_head"];
    assert_eq!(head["tree_size"].as_u64(), Some(size), "{v}");
    assert_eq!(head["sha256_root_hash"], B64.encode(cp.root));
    assert_eq!(head["timestamp"].as_u64(), Some(timestamp));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_route_by_window_serve_log_v3_json_and_freeze_past_their_window() {
    tokio::time::timeout(Duration::from_secs(180), shards())
        .await
        .expect("the test took over 180 s");
}

async fn shards() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let http = Http::new();
    let ca = Ca::new();
    let h1 = Shard::new("2049h1", "2049-01-01T00:00:00Z", "2049-07-01T00:00:00Z", "");
    let h2 = Shard::new("2049h2", "2049-07-01T00:00:00Z", "2050-01-01T00:00:00Z", "");
    let leaf_h1 = ca.leaf(1, (2049, 3, 1));
    let leaf_h2 = ca.leaf(2, (2049, 9, 1));
    let leaf_past = ca.leaf(3, (2020, 6, 1));
    let leaf_soon = ca.leaf(4, (2019, 6, 1));
    let leaf_late = ca.leaf(5, (2018, 6, 1));

    // First run: the 2020 shard, not frozen yet (freeze_after_window = false), takes
    // a certificate of its window.
    let past_open = Shard::new(
        "2020",
        "2020-01-01T00:00:00Z",
        "2021-01-01T00:00:00Z",
        "freeze_after_window = false\nfreeze_grace_s = 0\n",
    );
    let mut d = start(dir, &ca, std::slice::from_ref(&past_open), 1);
    d.wait_ready_at(&http, "/2020").await;
    assert_eq!(add(&http, &d, "2020", &leaf_past).await.0, 200);
    let v = log_v3(&http, &d, "2020").await;
    assert_eq!(
        v["status"], "active",
        "not frozen without freeze_after_window"
    );
    assert!(v.get("planned_changes").is_none(), "no freeze planned: {v}");
    wait_size(&http, &format!("{}/2020", d.url), 1).await;
    assert!(d.terminate().success());

    // Second run: two open shards, the 2020 one (its window ended: frozen at start),
    // and one whose window ends a few seconds after the start.
    let past = Shard::new(
        "2020",
        "2020-01-01T00:00:00Z",
        "2021-01-01T00:00:00Z",
        "freeze_grace_s = 0\n",
    );
    let limit_ms = (now_ms() / 1000 + 12) * 1000;
    let soon = Shard::new(
        "soon",
        "2000-01-01T00:00:00Z",
        &format_rfc3339_ms(limit_ms),
        "freeze_grace_s = 0\n",
    );
    let shards = [h1, h2, past, soon];
    let mut d = start(dir, &ca, &shards, 2);
    for s in &shards {
        d.wait_ready_at(&http, &format!("/{}", s.name)).await;
    }
    let [h1, h2, past, soon] = &shards;

    // The soon shard takes certificates until its window ends (unless this machine
    // took the whole window to start the daemon: then the timer is not tested).
    let soon_open = now_ms() + 4000 < limit_ms;
    if soon_open {
        let (status, body) = add(&http, &d, "soon", &leaf_soon).await;
        assert_eq!(status, 200, "{body}");
        let v = log_v3(&http, &d, "soon").await;
        assert_eq!(v["status"], "active");
        assert_eq!(
            v["planned_changes"][0]["effective_date"],
            format_rfc3339_ms(limit_ms)
        );
    } else {
        eprintln!("the daemon took the soon shard's whole window to start");
    }

    // Routed by notAfter: each shard takes its own and refuses the other's.
    assert_eq!(add(&http, &d, "2049h1", &leaf_h1).await.0, 200);
    assert_eq!(add(&http, &d, "2049h2", &leaf_h2).await.0, 200);
    let (status, body) = add(&http, &d, "2049h1", &leaf_h2).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = add(&http, &d, "2049h2", &leaf_h1).await;
    assert_eq!(status, 400, "{body}");
    for s in [h1, h2] {
        let base = format!("{}/{}", d.url, s.name);
        wait_size(&http, &base, 1).await;
        let v = log_v3(&http, &d, s.name).await;
        check_entry(&v, s);
        assert_eq!(v["status"], "active");
        assert!(v.get("final_tree_head").is_none());
        assert!(v.get("status_timestamp").is_none());
        // Frozen a week (the default grace) after the window ends.
        let at = tlogd::config::parse_rfc3339_ms(&s.limit).unwrap() + 7 * 86_400_000;
        assert_eq!(v["planned_changes"][0]["new_status"], "readonly");
        assert_eq!(
            v["planned_changes"][0]["effective_date"],
            format_rfc3339_ms(at)
        );
    }

    // The 2020 shard was frozen at start: its certificate is refused with 403 (the
    // window check passes), another shard's with 400, and its entry names its final
    // tree head, as frozen, from the first run's certificate.
    let (status, body) = add(&http, &d, "2020", &ca.leaf(6, (2020, 8, 1))).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("frozen"), "{body}");
    assert_eq!(add(&http, &d, "2020", &leaf_h1).await.0, 400);
    check_frozen(&http, &d, past, 1).await;
    let v = log_v3(&http, &d, "2020").await;
    assert_eq!(v["status_timestamp"], "2021-01-01T00:00:00Z");

    // The soon shard freezes while the daemon runs, once its window has ended.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = log_v3(&http, &d, "soon").await;
        if v["status"] == "readonly" {
            assert!(now_ms() >= limit_ms, "frozen before its window ended");
            assert_eq!(v["status_timestamp"], format_rfc3339_ms(limit_ms));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the soon shard was not frozen: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = add(&http, &d, "soon", &leaf_late).await;
    assert_eq!(status, 403, "{body}");
    check_frozen(&http, &d, soon, u64::from(soon_open)).await;
    // The open shards go on.
    assert_eq!(
        add(&http, &d, "2049h1", &ca.leaf(7, (2049, 4, 1))).await.0,
        200
    );
    let (status, _, _) = http
        .get(&format!("{}/soon/tile/data/000.p/1", d.url))
        .await
        .unwrap();
    assert_eq!(status, if soon_open { 200 } else { 404 }, "reads go on");
    assert!(d.terminate().success());

    let log = strip_ansi(&std::fs::read_to_string(dir.join("stderr-2")).unwrap());
    let said = |shard: &str, what: &str| {
        let field = [format!("log=\"{shard}\""), format!("log={shard} ")];
        log.lines()
            .any(|l| l.contains(what) && field.iter().any(|f| l.contains(f.as_str())))
    };
    assert!(said("2020", "freezing the log for good"), "{log}");
    assert!(said("soon", "freezing the log for good"), "{log}");
    if soon_open {
        assert!(said("soon", "will be frozen when its window ends"), "{log}");
    }
    assert!(!said("2049h1", "freezing the log for good"), "{log}");
}

/// The text of a log without its terminal colours.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Two CT shards with one key would have one log ID: the daemon refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_with_one_key_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new();
    let shards = [
        Shard::new("a", "2049-01-01T00:00:00Z", "2049-07-01T00:00:00Z", ""),
        Shard::new("b", "2049-07-01T00:00:00Z", "2050-01-01T00:00:00Z", ""),
    ];
    let (cfg, port, mport) = write_config(dir, &ca, &shards, 1);
    // Both name the same key file.
    let a = dir.join("a.pem").display().to_string();
    let b = dir.join("b.pem").display().to_string();
    let text = std::fs::read_to_string(&cfg).unwrap().replace(&b, &a);
    std::fs::write(&cfg, text).unwrap();
    let mut d = spawn(dir, &cfg, port, mport, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "tlogd did not refuse the config");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success());
    let err = std::fs::read_to_string(dir.join("stderr-1")).unwrap();
    assert!(err.contains("same CT key"), "{err}");
}

/// #57, hole 6: a shard frozen while its witness holds cosignatures back serves a
/// checkpoint behind the frozen tree; its `log.v3.json` says `503` + `Retry-After`
/// (come back) until the checkpoint of the frozen size is published, never `readonly`
/// with a final tree head that is not final.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_shard_whose_witness_holds_back_says_readonly_only_with_its_final_head() {
    tokio::time::timeout(Duration::from_secs(120), frozen_behind_a_witness())
        .await
        .expect("the test took over 120 s");
}

async fn frozen_behind_a_witness() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let http = Http::new();
    let ca = Ca::new();
    let name = "2020";
    let origin = format!("ct.example.com/{name}");
    let w = witness::TestWitness::start(
        "w1",
        tlogd_core::note::LogSigner::verifier(&tlogd_ct::Rfc6962Signer::new(
            &origin,
            shard_key(name),
        )),
    )
    .await;
    let policy = dir.join("witness.policy");
    std::fs::write(&policy, format!("{}quorum w1\n", w.policy_line())).unwrap();
    let witnessing = |freeze: &str| {
        format!(
            "{freeze}freeze_grace_s = 0\n[logs.witnessing]\npolicy_file = \"{}\"\ntimeout_ms = 500\n",
            policy.display()
        )
    };
    let shard = |freeze: &str| {
        Shard::new(
            name,
            "2020-01-01T00:00:00Z",
            "2021-01-01T00:00:00Z",
            &witnessing(freeze),
        )
    };
    let base = |d: &Daemon| format!("{}/{name}", d.url);

    // Open (not frozen yet): one certificate, its checkpoint cosigned and published.
    let open = shard("freeze_after_window = false\n");
    let mut d = start(dir, &ca, std::slice::from_ref(&open), 1);
    d.wait_ready_at(&http, &format!("/{name}")).await;
    assert_eq!(add(&http, &d, name, &ca.leaf(1, (2020, 6, 1))).await.0, 200);
    wait_size(&http, &base(&d), 1).await;
    // The witness holds back (stuck at size 1): a second certificate is logged, its
    // checkpoint withheld.
    w.set_knobs(witness::Knobs {
        stale_size: Some(1),
        ..Default::default()
    });
    assert_eq!(add(&http, &d, name, &ca.leaf(2, (2020, 7, 1))).await.0, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(checkpoint(&http, &base(&d)).await.0.size, 1, "withheld");
    // Stopped with its checkpoint withheld: the exit status says so.
    assert!(!d.terminate().success());
    let stderr = std::fs::read_to_string(dir.join("stderr-1")).unwrap();
    assert!(
        stderr.contains("final checkpoint was not published"),
        "{stderr}"
    );

    // Frozen at start at size 2; the served checkpoint is still the one of size 1.
    let frozen = shard("");
    let mut d = start(dir, &ca, std::slice::from_ref(&frozen), 2);
    d.wait_ready_at(&http, &format!("/{name}")).await;
    let (status, _) = add(&http, &d, name, &ca.leaf(3, (2020, 8, 1))).await;
    assert_eq!(status, 403, "frozen");
    assert_eq!(checkpoint(&http, &base(&d)).await.0.size, 1);
    let (status, headers, body) = http
        .get(&format!("{}/log.v3.json", base(&d)))
        .await
        .unwrap();
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 503, "{body}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    assert_eq!(body.trim_end().lines().count(), 1, "one line: {body}");
    assert!(!body.contains("readonly"), "{body}");

    // The witness cosigns again: the final checkpoint is published, and the entry
    // names it.
    w.set_knobs(witness::Knobs::default());
    wait_size(&http, &base(&d), 2).await;
    check_frozen(&http, &d, &frozen, 2).await;
    assert!(d.terminate().success());
}
