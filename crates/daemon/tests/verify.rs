//! `tlogd verify` (the real binary) on the Go-reference vectors, on tlogd's own logs
//! over HTTP and on disk, and on tampered copies, where it must fail naming the
//! resource.

mod common;

#[path = "support/tls.rs"]
mod tls;
#[path = "../../core/tests/support/vectors_dir.rs"]
mod vectors_dir;

use std::path::Path;
use std::process::Output;

use bytes::Bytes;
use common::*;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::note::NoteSigner;

fn verify(location: &Path, extra: &[&str]) -> Output {
    verify_at(location.to_str().unwrap(), extra)
}

fn verify_at(location: &str, extra: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["verify", location, "--log-public-key"])
        .arg(verifier().to_vkey())
        .args(extra)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Passed, and the summary says so.
fn assert_ok(o: &Output, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}: {}{}",
        stdout(o),
        stderr(o)
    );
    assert!(stdout(o).starts_with("OK "), "{what}: {}", stdout(o));
}

/// Failed with status 1, and the first line names `needle`.
fn assert_fails_naming(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected a failure: {err}{}",
        stdout(o)
    );
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("FAIL "), "{err}");
    assert!(first.contains(needle), "{needle:?} not named in: {err}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn flip_byte(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x01;
    std::fs::write(path, b).unwrap();
}

#[test]
fn passes_on_the_go_reference_vectors() {
    let v = vectors_dir::vectors();
    let o = verify(&v.join("tessera-70k"), &["--jobs", "4"]);
    assert_ok(&o, "tessera-70k");
    let out = stdout(&o);
    assert!(out.contains("70000 entries in 274 bundles"), "{out}");
    assert!(
        out.contains("level 0: 274, level 1: 2, level 2: 1"),
        "{out}"
    );
    assert!(out.contains("4 partial tiles"), "{out}");

    // Every earlier checkpoint of the 15-entry log is consistent with the last one.
    let log = v.join("tessera-testdata-log");
    let earlier: Vec<String> = (0..15)
        .map(|n| log.join(format!("checkpoint.{n}")).display().to_string())
        .collect();
    let mut args = Vec::new();
    for e in &earlier {
        args.extend(["--earlier-checkpoint", e.as_str()]);
    }
    let o = verify(&log, &args);
    assert_ok(&o, "tessera-testdata-log");
    assert!(
        stdout(&o).contains(
            "earlier checkpoints of size 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14"
        ),
        "{}",
        stdout(&o)
    );
    // Sizes 1 to 14 each name a partial level-0 tile and a partial bundle.
    assert!(
        stdout(&o).contains("28 named by the earlier checkpoints present"),
        "{}",
        stdout(&o)
    );

    // A whole Tessera POSIX directory, private state and stale partials included.
    let o = verify(&v.join("tessera-posix-dir"), &[]);
    assert_ok(&o, "tessera-posix-dir");
    assert!(
        stdout(&o).contains("1000 entries in 4 bundles"),
        "{}",
        stdout(&o)
    );
}

/// The partials an earlier checkpoint names must still be served with the bytes of
/// the log's first entries: a tampered or missing one that the final checkpoint does
/// not name is found only through the earlier checkpoint.
#[test]
fn the_partials_of_earlier_checkpoints_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    copy_dir(&vectors_dir::vectors().join("tessera-testdata-log"), &log);
    let cp7 = log.join("checkpoint.7").display().to_string();
    let with_cp7 = ["--earlier-checkpoint", cp7.as_str()];
    assert_ok(&verify(&log, &with_cp7), "untouched");
    flip_byte(&log.join("tile/0/000.p/7"), 100);
    assert_ok(&verify(&log, &[]), "only the earlier checkpoint names it");
    assert_fails_naming(&verify(&log, &with_cp7), "tile/0/000.p/7");
    flip_byte(&log.join("tile/0/000.p/7"), 100);
    std::fs::remove_file(log.join("tile/entries/000.p/7")).unwrap();
    assert_ok(&verify(&log, &[]), "only the earlier checkpoint names it");
    assert_fails_naming(&verify(&log, &with_cp7), "tile/entries/000.p/7");
}

#[test]
fn fails_naming_the_tampered_resource() {
    let v = vectors_dir::vectors().join("tessera-70k");
    let tmp = tempfile::tempdir().unwrap();
    let fresh = |name: &str| {
        let d = tmp.path().join(name);
        copy_dir(&v, &d);
        d
    };

    let d = fresh("hash-tile");
    flip_byte(&d.join("tile/0/100"), 32 * 7 + 3);
    assert_fails_naming(
        &verify(&d, &[]),
        "tile/0/100 is not the tile recomputed from tile/entries/100 and the entries before it (hash 7 differs)",
    );

    // An entry changed (same length): its bundle and level-0 tile disagree.
    let d = fresh("bundle");
    flip_byte(&d.join("tile/entries/050"), 2);
    assert_fails_naming(
        &verify(&d, &[]),
        "tile/0/050 is not the tile recomputed from tile/entries/050",
    );

    let d = fresh("level-1");
    flip_byte(&d.join("tile/1/000"), 32 * 200);
    assert_fails_naming(&verify(&d, &[]), "tile/1/000 is not the tile recomputed");

    let d = fresh("level-2-partial");
    flip_byte(&d.join("tile/2/000.p/1"), 0);
    assert_fails_naming(
        &verify(&d, &[]),
        "tile/2/000.p/1 is not the tile recomputed",
    );

    // A partial the checkpoint names, gone with no full tile to fall back to.
    let d = fresh("missing-partial");
    std::fs::remove_file(d.join("tile/0/273.p/112")).unwrap();
    assert_fails_naming(&verify(&d, &[]), "tile/0/273.p/112: not found");

    // A bundle with an entry too few.
    let d = fresh("short-bundle");
    let b = std::fs::read(d.join("tile/entries/007")).unwrap();
    let first_len = u16::from_be_bytes([b[0], b[1]]) as usize;
    std::fs::write(d.join("tile/entries/007"), &b[2 + first_len..]).unwrap();
    assert_fails_naming(
        &verify(&d, &[]),
        "tile/entries/007: holds 255 entries, expected 256",
    );

    // Bundles and level-0 tiles rewritten consistently: the level-1 tile catches it.
    let d = fresh("consistent-rewrite");
    let signer = NoteSigner::from_skey(SKEY).unwrap();
    std::fs::write(
        d.join("tile/entries/003"),
        std::fs::read(d.join("tile/entries/004")).unwrap(),
    )
    .unwrap();
    std::fs::write(
        d.join("tile/0/003"),
        std::fs::read(d.join("tile/0/004")).unwrap(),
    )
    .unwrap();
    assert_fails_naming(&verify(&d, &[]), "tile/1/000 is not the tile recomputed");

    // The checkpoint: another root, re-signed with the right key, cannot match.
    let d = fresh("root");
    let cp = Checkpoint::open(
        &std::fs::read(d.join("checkpoint")).unwrap(),
        ORIGIN,
        &verifier(),
    )
    .unwrap()
    .0;
    let forged = Checkpoint {
        root: [9u8; 32],
        ..cp.clone()
    };
    std::fs::write(d.join("checkpoint"), forged.sign(&signer).unwrap()).unwrap();
    assert_fails_naming(&verify(&d, &[]), "the 70000 entries hash to root");
    // ... and an altered one does not verify at all.
    let d = fresh("signature");
    let mut text = std::fs::read(d.join("checkpoint")).unwrap();
    text[ORIGIN.len() + 1] = b'8';
    std::fs::write(d.join("checkpoint"), text).unwrap();
    assert_fails_naming(&verify(&d, &[]), "checkpoint: ");

    // An earlier checkpoint that this log does not extend.
    let fork = tmp.path().join("fork.checkpoint");
    let other = Checkpoint {
        origin: ORIGIN.into(),
        size: 1000,
        root: [1u8; 32],
        extensions: vec![],
    };
    std::fs::write(&fork, other.sign(&signer).unwrap()).unwrap();
    let o = verify(&v, &["--earlier-checkpoint", fork.to_str().unwrap()]);
    assert_fails_naming(
        &o,
        "the checkpoint of size 1000 is not consistent with the log",
    );

    // Bad arguments: status 2, nothing checked.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args([
            "verify",
            v.to_str().unwrap(),
            "--log-public-key",
            "not a key",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = verify(&tmp.path().join("absent"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_on_a_tlogd_log_over_http_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let add_many = |from: u64, to: u64| {
        let (http, url) = (http.clone(), d.url.clone());
        async move {
            let tasks: Vec<_> = (from..to)
                .map(|i| {
                    let (http, url) = (http.clone(), url.clone());
                    tokio::spawn(async move {
                        http.add(&url, Bytes::from(format!("verify me {i}"))).await
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        }
    };
    add_many(0, 700).await;
    http.wait_checkpoint(&d.url, 700).await;
    let (_, _, early) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
    let early_file = dir.path().join("early.checkpoint");
    std::fs::write(&early_file, &early).unwrap();
    add_many(700, 1300).await;
    http.wait_checkpoint(&d.url, 1300).await;

    let url = d.url.clone();
    let early_arg = early_file.to_str().unwrap().to_string();
    let log_dir = dir.path().join("log");
    let (over_http, on_disk) = tokio::task::spawn_blocking(move || {
        (
            verify_at(&url, &["--earlier-checkpoint", &early_arg]),
            verify(&log_dir, &[]),
        )
    })
    .await
    .unwrap();
    assert_ok(&over_http, "over HTTP");
    assert!(
        stdout(&over_http).contains("1300 entries"),
        "{}",
        stdout(&over_http)
    );
    assert!(
        stdout(&over_http).contains("earlier checkpoints of size"),
        "{}",
        stdout(&over_http)
    );
    assert_ok(&on_disk, "on disk");
    assert!(d.terminate().success());
}

/// `tlogd serve` on a Tessera v1.0.4 POSIX directory continues the same log (checked
/// whole first); a tampered one is refused with the tile named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_adopts_a_tessera_directory_and_refuses_a_tampered_one() {
    let tessera = vectors_dir::vectors().join("tessera-posix-dir");
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&tessera, &dir.path().join("log"));
    // max_lag 0: adds wait (503) until the dedup index is rebuilt from the bundles.
    let mut d = Daemon::start(dir.path(), "[dedup]\nmax_lag = 0\n");
    let http = Http::new();
    d.wait_ready(&http).await;
    assert_eq!(http.checkpoint(&d.url).await.size, 1000);
    // An entry Tessera logged is recognised as a duplicate: tlogd's own index was
    // rebuilt from the log.
    let add = |e: Vec<u8>| {
        let (http, url) = (http.clone(), d.url.clone());
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                match http.add(&url, Bytes::from(e.clone())).await {
                    Ok(r) => break r,
                    Err((503, _, _)) if std::time::Instant::now() < deadline => {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
    };
    let first = http.bundle(&d.url, 0, 1000).await.remove(0);
    assert_eq!(add(first).await, (0, true));
    for i in 0..300u64 {
        let got = add(format!("after tessera {i}").into_bytes()).await;
        assert_eq!(got, (1000 + i, false));
    }
    http.wait_checkpoint(&d.url, 1300).await;
    let url = d.url.clone();
    let tessera_cp = tessera.join("checkpoint");
    let o = tokio::task::spawn_blocking(move || {
        verify_at(
            &url,
            &["--earlier-checkpoint", tessera_cp.to_str().unwrap()],
        )
    })
    .await
    .unwrap();
    assert_ok(&o, "the adopted log");
    assert!(
        stdout(&o).contains("consistent with the earlier checkpoints of size 1000"),
        "{}",
        stdout(&o)
    );
    assert!(d.terminate().success());

    // A full tile changed: only the whole-log check at adoption can see it.
    let bad = tempfile::tempdir().unwrap();
    copy_dir(&tessera, &bad.path().join("log"));
    flip_byte(&bad.path().join("log/tile/0/001"), 100);
    let port = free_port();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["serve", "--metrics-listen", "", "--origin", ORIGIN])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--storage-dir")
        .arg(bad.path().join("log"))
        .env("TLOGD_PRIVATE_KEY", SKEY)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("refusing to adopt the Tessera log") && err.contains("tile/0/001"),
        "{err}"
    );
    assert!(
        !bad.path().join("log/.tlogd/state.1").exists()
            || std::fs::read(bad.path().join("log/.tlogd/state.1"))
                .unwrap()
                .is_empty()
    );
}

/// `https://` logs: the certificate is checked against the system's roots, or those of
/// `SSL_CERT_FILE` (here a private CA); an untrusted one fails, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_an_https_log_and_checks_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    for i in 0..300 {
        http.add(&d.url, Bytes::from(format!("over tls {i}")))
            .await
            .unwrap();
    }
    http.wait_checkpoint(&d.url, 300).await;
    let target = d.url.trim_start_matches("http://").parse().unwrap();
    let front = tls::TlsFront::start(&dir.path().join("tls"), target).await;
    let (url, ca) = (front.url.clone(), front.ca.clone());
    let (trusted, untrusted) = tokio::task::spawn_blocking(move || {
        let run = |ca: Option<&Path>| {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"));
            c.args(["verify", &url, "--log-public-key"])
                .arg(verifier().to_vkey());
            match ca {
                Some(p) => c.env("SSL_CERT_FILE", p),
                None => c.env_remove("SSL_CERT_FILE"),
            };
            c.output().unwrap()
        };
        (run(Some(&ca)), run(None))
    })
    .await
    .unwrap();
    assert_ok(&trusted, "https with the CA trusted");
    assert!(
        stdout(&trusted).contains("300 entries"),
        "{}",
        stdout(&trusted)
    );
    assert_fails_naming(&untrusted, "could not read the log: TLS with 127.0.0.1");
    assert!(
        stderr(&untrusted).contains("certificate"),
        "{}",
        stderr(&untrusted)
    );
    assert!(d.terminate().success());
}

/// A hostile `https://` server whose answer never ends (HTTP/1.1, read until close,
/// behind real TLS): `tlogd verify` stops reading at its body limit and fails saying
/// so, before its 10 s request timeout, instead of filling its memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_https_body_is_cut_at_the_limit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = sock.read(&mut head).await;
                if sock
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let chunk = vec![b'x'; 64 << 10];
                // Until the client hangs up.
                while sock.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    let front = tls::TlsFront::start(&dir.path().join("tls"), target).await;
    let (url, ca) = (front.url.clone(), front.ca.clone());
    let o = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(["verify", &url, "--http-timeout", "10", "--log-public-key"])
            .arg(verifier().to_vkey())
            .env("SSL_CERT_FILE", ca)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    // Not "timed out": the limit cut it.
    assert_fails_naming(&o, "byte limit");
}
