//! Rotating a log's key from Ed25519 to ML-DSA-44 across restarts of the real binary
//! (docs/operating.md, "Rotating the log's key"): `private_key_files` in signing order,
//! `tlogd keygen --algorithm ml-dsa-44`, `tlogd verify` with the keys a client knows,
//! and witness policies naming the log by its ML-DSA-44 key with an ML-DSA-44 witness
//! (tests/support/witness.rs). Also what start-up refuses: both key settings at once,
//! an ML-DSA-44 key for an origin longer than its signed message carries.

mod common;
#[path = "support/witness.rs"]
mod witness;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use tlogd_core::checkpoint::signed_size;
use tlogd_core::cosignature::CosignatureVerifier;
use tlogd_core::note::{Note, NoteVerifier};
use witness::{Knobs, TestWitness};

fn tlogd(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(args)
        .output()
        .unwrap()
}

/// `tlogd keygen --algorithm ml-dsa-44` into `dir/name`: the file and the vkey printed.
fn keygen_mldsa44(dir: &Path, name: &str, origin: &str) -> (PathBuf, String) {
    let out = dir.join(name);
    let o = tlogd(&[
        "keygen",
        "--origin",
        origin,
        "--algorithm",
        "ml-dsa-44",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let vkey = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert!(vkey.starts_with(&format!("{origin}+")), "{vkey}");
    (out, vkey)
}

/// Start tlogd on `dir/log` signing with `keys` in order (`private_key_files`), with
/// extra TOML appended.
fn start(dir: &Path, keys: &[&Path], extra: &str) -> Daemon {
    let (port, mport) = (free_port(), free_port());
    let files: Vec<String> = keys
        .iter()
        .map(|k| format!("{:?}", k.display().to_string()))
        .collect();
    let cfg = dir.join("tlogd.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{port}\"\norigin = \"{ORIGIN}\"\nprivate_key_files = [{}]\n\
             [storage]\ndir = \"{}\"\n[checkpoint]\ninterval_ms = 50\n\
             [metrics]\nlisten = \"127.0.0.1:{mport}\"\n{extra}",
            files.join(", "),
            dir.join("log").display()
        ),
    )
    .unwrap();
    Daemon::spawn(dir, &cfg, port, mport, &Opts::default())
}

/// The published checkpoint once its size reaches `size` (not verified here).
async fn wait_signed(http: &Http, url: &str, size: u64) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((200, _, body)) = http.get(&format!("{url}/checkpoint")).await
            && signed_size(&body).is_some_and(|s| s >= size)
        {
            return body.to_vec();
        }
        assert!(Instant::now() < deadline, "no checkpoint reached {size}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_up(d: &mut Daemon, http: &Http) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = d.child.try_wait() {
            panic!("tlogd exited early: {status}");
        }
        if let Ok((200, _, _)) = http.get(&format!("{}/checkpoint", d.url)).await {
            return;
        }
        assert!(Instant::now() < deadline, "tlogd did not become ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn add(http: &Http, url: &str, from: u64, to: u64) {
    for i in from..to {
        http.add(url, Bytes::from(format!("rotated entry {i}")))
            .await
            .unwrap();
    }
}

/// `tlogd verify url --log-public-key k...` plus `extra` arguments.
async fn verify(url: &str, keys: &[&str], extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec!["verify".into(), url.into()];
    for k in keys {
        args.extend(["--log-public-key".to_string(), k.to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tlogd(&args)
    })
    .await
    .unwrap()
}

async fn verifies(url: &str, keys: &[&str], extra: &[&str]) -> String {
    let o = verify(url, keys, extra).await;
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.starts_with("OK "), "{stdout}");
    stdout
}

/// The key IDs of the signature lines of `signed`, in order.
fn line_ids(signed: &[u8]) -> Vec<u32> {
    Note::parse(signed)
        .unwrap()
        .signatures
        .iter()
        .map(|s| s.key_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed25519_log_rotates_to_mldsa44_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let ed_key = dir.path().join("ed25519.key");
    std::fs::write(&ed_key, SKEY).unwrap();
    let ed_vkey = verifier().to_vkey();
    let ed_id = verifier().key_id();
    let (pq_key, pq_vkey) = keygen_mldsa44(dir.path(), "mldsa44.key", ORIGIN);
    let pq = NoteVerifier::from_vkey(&pq_vkey).unwrap();
    let http = Http::new();

    // 1. Ed25519 only.
    let mut d = start(dir.path(), &[&ed_key], "");
    wait_up(&mut d, &http).await;
    add(&http, &d.url, 0, 3).await;
    let signed = wait_signed(&http, &d.url, 3).await;
    assert_eq!(line_ids(&signed), [ed_id]);
    verifies(&d.url, &[&ed_vkey], &[]).await;
    assert!(d.terminate().success());

    // 2. The ML-DSA-44 key added after the Ed25519 one: both sign, in that order. A
    // witness policy may name the log by its second key, and an ML-DSA-44 witness
    // that trusts only that key cosigns.
    let w = TestWitness::start_mldsa44("pq", pq.clone()).await;
    let policy = dir.path().join("witness.policy");
    std::fs::write(
        &policy,
        format!("log {pq_vkey}\n{}quorum pq\n", w.policy_line()),
    )
    .unwrap();
    let witnessing = format!("[witnessing]\npolicy_file = \"{}\"\n", policy.display());
    let mut d = start(dir.path(), &[&ed_key, &pq_key], &witnessing);
    wait_up(&mut d, &http).await;
    add(&http, &d.url, 3, 6).await;
    let signed = wait_signed(&http, &d.url, 6).await;
    let wv = CosignatureVerifier::from_vkey(&w.vkey).unwrap();
    assert_eq!(line_ids(&signed), [ed_id, pq.key_id(), wv.key_id()]);
    let out = verifies(&d.url, &[&pq_vkey], &[]).await;
    assert!(out.contains("(ML-DSA-44)"), "{out}");
    let out = verifies(&d.url, &[&ed_vkey, &pq_vkey], &[]).await;
    assert!(out.contains("(Ed25519) and "), "{out}");
    let policy_arg = policy.to_str().unwrap();
    let out = verifies(&d.url, &[&pq_vkey], &["--witness-policy", policy_arg]).await;
    assert!(
        out.contains("cosigned as the witness policy requires by pq"),
        "{out}"
    );
    // A checkpoint saved now is an earlier checkpoint for a client of the new key.
    let saved = dir.path().join("checkpoint.6");
    std::fs::write(&saved, &signed).unwrap();
    assert!(d.terminate().success());

    // 3. The ML-DSA-44 key first (the key the log is known by), Ed25519 second.
    let mut d = start(dir.path(), &[&pq_key, &ed_key], &witnessing);
    wait_up(&mut d, &http).await;
    add(&http, &d.url, 6, 9).await;
    let signed = wait_signed(&http, &d.url, 9).await;
    assert_eq!(line_ids(&signed), [pq.key_id(), ed_id, wv.key_id()]);
    verifies(&d.url, &[&pq_vkey], &[]).await;
    verifies(&d.url, &[&ed_vkey], &[]).await;
    assert!(d.terminate().success());

    // 4. Ed25519 dropped: the log opens with the ML-DSA-44 key alone.
    let mut d = start(dir.path(), &[&pq_key], &witnessing);
    wait_up(&mut d, &http).await;
    add(&http, &d.url, 9, 12).await;
    let signed = wait_signed(&http, &d.url, 12).await;
    assert_eq!(line_ids(&signed), [pq.key_id(), wv.key_id()]);
    let saved_arg = saved.to_str().unwrap();
    verifies(
        &d.url,
        &[&pq_vkey],
        &[
            "--witness-policy",
            policy_arg,
            "--earlier-checkpoint",
            saved_arg,
        ],
    )
    .await;
    // A client that only knows the old key finds no signature it trusts.
    let o = verify(&d.url, &[&ed_vkey], &[]).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no signature from a known key"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The witness checked every checkpoint's ML-DSA-44 line and cosigned all of them.
    assert_eq!(w.latest().map(|(size, _)| size), Some(12));
    assert!(d.terminate().success());

    // A policy that names the log by a key it does not hold refuses to start.
    std::fs::write(
        &policy,
        format!("log {ed_vkey}\n{}quorum pq\n", w.policy_line()),
    )
    .unwrap();
    let mut d = start(dir.path(), &[&pq_key], &witnessing);
    let status = d.child.wait().unwrap();
    assert!(!status.success());
}

/// An ML-DSA-44 witness that answers with timestamp 0 (tlog-witness: "MUST NOT be
/// zero") is not counted: the checkpoint is published with the other witness's
/// cosignature only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_cosignature_with_timestamp_zero_does_not_count() {
    let good = TestWitness::start_mldsa44("good", verifier()).await;
    let zero = TestWitness::start_mldsa44("zero", verifier()).await;
    zero.set_knobs(Knobs {
        zero_timestamp: true,
        ..Knobs::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("witness.policy");
    std::fs::write(
        &policy,
        format!(
            "{}{}group g any good zero\nquorum g\n",
            good.policy_line(),
            zero.policy_line()
        ),
    )
    .unwrap();
    let ed_key = dir.path().join("ed25519.key");
    std::fs::write(&ed_key, SKEY).unwrap();
    let witnessing = format!("[witnessing]\npolicy_file = \"{}\"\n", policy.display());
    let mut d = start(dir.path(), &[&ed_key], &witnessing);
    let http = Http::new();
    wait_up(&mut d, &http).await;
    add(&http, &d.url, 0, 2).await;
    let signed = wait_signed(&http, &d.url, 2).await;
    let good_v = CosignatureVerifier::from_vkey(&good.vkey).unwrap();
    assert_eq!(line_ids(&signed), [verifier().key_id(), good_v.key_id()]);
    assert!(
        zero.cosigned() > 0,
        "the zero witness was asked and answered"
    );
    let (_, _, m) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    let m = String::from_utf8_lossy(&m);
    assert!(
        m.lines()
            .any(|l| l.starts_with("tlogd_witness_requests_total")
                && l.contains("witness=\"zero\"")
                && l.contains("outcome=\"invalid\"")),
        "{m}"
    );
    assert!(d.terminate().success());
}

/// Start-up refuses `private_key_file` and `private_key_files` together, and an
/// ML-DSA-44 key for an origin of more than 255 bytes, naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_refuses_conflicting_keys_and_long_origins_for_mldsa44() {
    let dir = tempfile::tempdir().unwrap();
    let (pq_key, _) = keygen_mldsa44(dir.path(), "mldsa44.key", ORIGIN);
    let run = |toml: String| {
        let cfg = dir.path().join("bad.toml");
        std::fs::write(&cfg, toml).unwrap();
        let o = tlogd(&["serve", "--config", cfg.to_str().unwrap()]);
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let storage = format!(
        "[storage]\ndir = \"{}\"\n[metrics]\nlisten = \"\"\n",
        dir.path().join("log").display()
    );
    let key = pq_key.display();
    let e = run(format!(
        "listen = \"127.0.0.1:{}\"\norigin = \"{ORIGIN}\"\nprivate_key_file = \"{key}\"\nprivate_key_files = [\"{key}\"]\n{storage}",
        free_port()
    ));
    assert!(e.contains("not both"), "{e}");
    let long = format!("example.com/{}", "l".repeat(250));
    let e = run(format!(
        "listen = \"127.0.0.1:{}\"\norigin = \"{long}\"\nprivate_key_files = [\"{key}\"]\n{storage}",
        free_port()
    ));
    assert!(e.contains("at most 255 bytes"), "{e}");
    // keygen refuses it too.
    let o = tlogd(&[
        "keygen",
        "--origin",
        &long,
        "--algorithm",
        "ml-dsa-44",
        "--out",
        dir.path().join("long.key").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(!dir.path().join("long.key").exists());
}
