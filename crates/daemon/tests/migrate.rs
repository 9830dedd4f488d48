//! `tlogd migrate`, the real binary: a Go Tessera log copied in, killed at points
//! along the way (never a checkpoint before the copy is complete), resumed, byte for
//! byte the source, then continued by `tlogd serve`; a tlogd log copied over HTTP as a
//! mirror, which `tlogd serve` refuses to append to. The copy on every backend
//! (interrupted and resumed) is in the storage conformance suite.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;

fn tlogd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn vectors() -> PathBuf {
    tlogd_core::conformance::vectors()
}

/// The flags naming a POSIX target log at `dir` signed with `key` (when given).
fn target_flags(dir: &Path, key: Option<&Path>) -> Vec<String> {
    let mut f = vec![
        "--storage-dir".to_string(),
        dir.display().to_string(),
        "--origin".to_string(),
        ORIGIN.to_string(),
    ];
    if let Some(k) = key {
        f.extend(["--private-key-file".to_string(), k.display().to_string()]);
    }
    f
}

/// Count the entry bundles published in the log at `dir` so far.
fn bundles_in(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("tile/entries"))
        .map(|d| d.flatten().filter(|e| e.path().is_file()).count())
        .unwrap_or(0)
}

/// The 70,000-entry Go log, from its directory into a POSIX log: killed three times
/// once it has copied more and more (each time with no checkpoint in the target),
/// then run to the end: every file of the Go log byte for byte, a second run copies
/// nothing, and `tlogd serve` continues the tree at index 70,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tessera_log_migrated_in_survives_kills_and_is_continued() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("key");
    std::fs::write(&key, SKEY).unwrap();
    let dst = tmp.path().join("log");
    let src = vectors().join("tessera-70k");
    let mut args: Vec<String> = [
        "migrate",
        "--from",
        src.to_str().unwrap(),
        "--quiet",
        // Slowed down so that the kills land inside the copy: a commit, with its
        // fsyncs, per bundle, one fetch at a time.
        "--bundles-per-commit",
        "1",
        "--jobs",
        "1",
        "--storage-sync",
        "fsync",
        "--no-dedup",
    ]
    .map(String::from)
    .to_vec();
    args.extend(target_flags(&dst, Some(&key)));
    let mut killed_at = Vec::new();
    for at_least in [10, 60, 150] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while bundles_in(&dst) < at_least {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the migration ended before it was killed (it copied {} bundles)",
                bundles_in(&dst)
            );
            assert!(Instant::now() < deadline, "the migration made no progress");
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        killed_at.push(bundles_in(&dst));
        assert!(
            !dst.join("checkpoint").exists(),
            "a checkpoint in the target after a kill at {killed_at:?} bundles"
        );
    }
    let str_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tlogd(&str_args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("resumed at") && stdout.contains("size 70000"),
        "{stdout}"
    );
    for f in tlogd_core::conformance::files(&src) {
        assert!(
            std::fs::read(dst.join(&f)).ok() == Some(std::fs::read(src.join(&f)).unwrap()),
            "{} differs from the Go log's (kills at {killed_at:?} bundles)",
            f.display()
        );
    }
    let again = tlogd(&str_args);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("nothing to copy"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );

    // Continued by tlogd: the next entry is entry 70,000 of the same tree.
    let http = Http::new();
    let mut d = Daemon::start(tmp.path(), "");
    d.wait_ready(&http).await;
    let before = http.checkpoint(&d.url).await;
    let (index, dup) = http
        .add_when_ready(&d.url, Bytes::from_static(b"after the migration"))
        .await
        .unwrap();
    assert_eq!((index, dup), (70_000, false));
    let (again, dup) = http
        .add_when_ready(&d.url, Bytes::from_static(b"entry 5"))
        .await
        .unwrap();
    assert_eq!(
        (again, dup),
        (5, true),
        "the dedup index was rebuilt at start"
    );
    let after = http.wait_checkpoint(&d.url, 70_001).await;
    http.verify_consistency(&d.url, &before, &after).await;
    common::frontends::tlogd_verify(d.url.clone()).await;
}

/// A tlogd log copied over HTTP with only the source's public key: the copy is a
/// mirror (said on stderr), byte for byte the source, and `tlogd serve` with another
/// key refuses to open it. Without any key to check the source with, nothing is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_checked_with_the_source_key_only_is_a_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let src_dir = tmp.path().join("src");
    std::fs::create_dir_all(&src_dir).unwrap();
    let http = Http::new();
    let mut d = Daemon::start(&src_dir, "");
    d.wait_ready(&http).await;
    let adds: Vec<_> = (0..700)
        .map(|i| http.add(&d.url, Bytes::from(format!("mirrored {i}"))))
        .collect();
    for a in futures_util::future::join_all(adds).await {
        a.unwrap();
    }
    let cp = http.wait_checkpoint(&d.url, 700).await;

    let other = tmp.path().join("other.key");
    let o = tlogd(&[
        "keygen",
        "--origin",
        ORIGIN,
        "--out",
        other.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let dst = tmp.path().join("mirror");
    let mut args = vec!["migrate".to_string(), "--from".into(), d.url.clone()];
    args.extend(target_flags(&dst, Some(&other)));
    args.push("--no-dedup".into());
    let refused = tlogd(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("checkpoint"), "{err}");
    assert!(!dst.join("checkpoint").exists());

    let vkey = verifier().to_vkey();
    args.extend(["--source-public-key".to_string(), vkey]);
    let out = tlogd(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("a mirror, not a continuation"), "{stderr}");
    let src_log = src_dir.join("log");
    let served = std::fs::read(src_log.join("checkpoint")).unwrap();
    assert_eq!(std::fs::read(dst.join("checkpoint")).unwrap(), served);
    assert!(tlogd_core::checkpoint::signed_size(&served).unwrap() >= cp.size);
    for f in tlogd_core::conformance::files(&dst) {
        assert_eq!(
            std::fs::read(dst.join(&f)).unwrap(),
            std::fs::read(src_log.join(&f)).unwrap(),
            "{}",
            f.display()
        );
    }
    let mut serve_args = vec!["serve".to_string(), "--listen".into()];
    serve_args.push(format!("127.0.0.1:{}", free_port()));
    serve_args.extend(["--metrics-listen".to_string(), String::new()]);
    serve_args.extend(target_flags(&dst, Some(&other)));
    serve_args.push("--no-dedup".into());
    let serve = tlogd(&serve_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!serve.status.success());
    let err = String::from_utf8_lossy(&serve.stderr);
    assert!(err.contains("checkpoint"), "{err}");

    let none = tlogd(&[
        "migrate",
        "--from",
        &d.url,
        "--storage-dir",
        tmp.path().join("nothing").to_str().unwrap(),
        "--origin",
        ORIGIN,
        "--no-dedup",
    ]);
    assert!(!none.status.success());
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("--source-public-key"), "{err}");
}
