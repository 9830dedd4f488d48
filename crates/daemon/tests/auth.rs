//! Write authentication on the real binary: bearer tokens from a file and from the
//! environment, 401/403 on `POST /add`, public reads, the load generator's
//! `--bearer-token-write`, and tokens never written to the log output.

mod common;

use bytes::Bytes;
use clap::Parser;
use common::*;

const FILE_TOKEN: &str = "file-token-Zk3q9";
const OTHER_FILE_TOKEN: &str = "second.token~x";
const ENV_TOKEN: &str = "env-token-7Hh2w";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_need_a_configured_bearer_token_and_reads_stay_public() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("# writers of the test log\n{FILE_TOKEN}\n{OTHER_FILE_TOKEN}\n"),
    )
    .unwrap();
    let stderr = dir.path().join("stderr.log");
    let opts = Opts {
        env: vec![("TLOGD_BEARER_TOKENS".into(), ENV_TOKEN.into())],
        rust_log: Some("debug"),
        stderr_to: Some(stderr.clone()),
        ..Opts::default()
    };
    let storage = format!("dir = \"{}\"\n", dir.path().join("log").display());
    let mut d = Daemon::start_opts(
        dir.path(),
        &storage,
        &format!("[auth]\nbearer_tokens_file = \"{}\"\n", tokens.display()),
        &opts,
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let add = format!("{}/add", d.url);

    let (s, h, body) = http.post(&add, Bytes::from("no token")).await.unwrap();
    assert_eq!(s, 401);
    assert_eq!(h["www-authenticate"], "Bearer realm=\"tlogd\"");
    assert_eq!(std::str::from_utf8(&body).unwrap().lines().count(), 1);
    for wrong in [
        "Bearer wrong-token",
        "Bearer file-token-Zk3q",
        "Bearer file-token-Zk3q9x",
    ] {
        let (s, _, _) = http
            .post_with(&add, &[("authorization", wrong)], Bytes::from("bad token"))
            .await
            .unwrap();
        assert_eq!(s, 403, "{wrong}");
    }
    let (s, _, _) = http
        .post_with(
            &add,
            &[("authorization", &format!("Basic {FILE_TOKEN}"))],
            Bytes::from("other scheme"),
        )
        .await
        .unwrap();
    assert_eq!(s, 401, "a scheme other than Bearer is no credential");
    // Refused before the body is read: an oversized body still gets 401, not 413.
    let (s, _, _) = Http::new()
        .post(&add, Bytes::from(vec![b'a'; 70_000]))
        .await
        .unwrap();
    assert_eq!(s, 401);

    let mut accepted = 0;
    for (i, token) in [FILE_TOKEN, OTHER_FILE_TOKEN, ENV_TOKEN].iter().enumerate() {
        let (s, _, body) = http
            .post_with(
                &add,
                &[("authorization", &format!("bearer {token}"))],
                Bytes::from(format!("entry {i}")),
            )
            .await
            .unwrap();
        assert_eq!(s, 200, "token {i}");
        assert_eq!(std::str::from_utf8(&body).unwrap(), i.to_string());
        accepted += 1;
    }
    // Reads need no token.
    let cp = http.wait_checkpoint(&d.url, accepted).await;
    assert_eq!(cp.size, accepted, "refused adds logged nothing");
    let (s, _, _) = http
        .get(&format!("{}/tile/entries/000.p/3", d.url))
        .await
        .unwrap();
    assert_eq!(s, 200);

    // The load generator writes with its write token and verifies everything it reads.
    let report = tlog_loadgen::run(tlog_loadgen::Args::parse_from([
        "tlog-loadgen",
        "--log-url",
        &d.url,
        "--log-public-key",
        &verifier().to_vkey(),
        "--bearer-token-write",
        OTHER_FILE_TOKEN,
        "--writers",
        "8",
        "--leaf-write-goal",
        "300",
        "--max-runtime",
        "60",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(report.ok, "{:?}", report.failure_reasons);
    // Without a token every add fails.
    let report = tlog_loadgen::run(tlog_loadgen::Args::parse_from([
        "tlog-loadgen",
        "--log-url",
        &d.url,
        "--log-public-key",
        &verifier().to_vkey(),
        "--writers",
        "1",
        "--duration",
        "0.5",
        "--max-runtime",
        "30",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(!report.ok);
    assert_eq!(report.writes_new, 0);
    assert!(
        report.error_samples.iter().any(|e| e.contains("401")),
        "{:?}",
        report.error_samples
    );

    let (_, _, m) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    let m = String::from_utf8(m.to_vec()).unwrap();
    assert!(
        metric(
            &m,
            "tlogd_add_requests_total{log=\"default\",outcome=\"forbidden\"}"
        ) >= 3.0
    );
    assert!(
        metric(
            &m,
            "tlogd_add_requests_total{log=\"default\",outcome=\"unauthorized\"}"
        ) >= 3.0
    );

    assert!(d.terminate().success());
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(log.contains("tlogd serving"), "debug log captured:\n{log}");
    for t in [FILE_TOKEN, OTHER_FILE_TOKEN, ENV_TOKEN] {
        assert!(!log.contains(t), "a token appears in the log output");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_source_stops_the_daemon_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "good-token\nsecret with\"quote\n").unwrap();
    let port = free_port();
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(["serve", "--metrics-listen", "", "--origin", ORIGIN])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--storage-dir")
            .arg(dir.path().join("log"))
            .env("TLOGD_PRIVATE_KEY", SKEY)
            .env_remove("TLOGD_BEARER_TOKENS")
            .args(extra)
            .output()
            .unwrap()
    };
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("[auth]\nbearer_tokens_file = \"{}\"\n", tokens.display()),
    )
    .unwrap();
    let out = run(&["--config", cfg.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token 3: not a bearer token"), "{err}");
    assert!(!err.contains("secret"), "{err}");
    std::fs::write(
        &cfg,
        format!(
            "[auth]\nbearer_tokens_file = \"{}\"\n",
            dir.path().join("absent").display()
        ),
    )
    .unwrap();
    let out = run(&["--config", cfg.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reading bearer token file"), "{err}");
}

/// Secrets stay off the command line and private: the database URL is taken from env
/// `TLOGD_DATABASE_URL` (here a bad one, refused by name, proving it was read), a
/// listener that is not loopback with no tokens is refused, and a signing key file
/// others can read is warned about.
#[test]
fn secrets_from_env_public_listeners_and_readable_key_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"));
        cmd.args(["serve", "--metrics-listen", "", "--origin", ORIGIN])
            .args(args)
            .env_remove("TLOGD_BEARER_TOKENS")
            .env_remove("TLOGD_DATABASE_URL")
            .env("TLOGD_PRIVATE_KEY", SKEY);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = run(
        &["--backend", "mysql", "--dedup-path", "/nonexistent/d"],
        &[("TLOGD_DATABASE_URL", "bogus://h/db")],
    );
    assert!(err.contains("`storage.url` must start with"), "{err}");
    let log = dir.path().join("log");
    let log = log.to_str().unwrap();
    let err = run(&["--listen", "0.0.0.0:1", "--storage-dir", log], &[]);
    assert!(err.contains("not loopback) with no write tokens"), "{err}");
    // A readable key file: warned about (the daemon then stops on a storage directory
    // under a plain file, which keeps the test from serving).
    let file = dir.path().join("plain");
    std::fs::write(&file, b"not a directory").unwrap();
    let under_file = file.join("log");
    let key = dir.path().join("key");
    std::fs::write(&key, SKEY).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = run(
        &[
            "--listen",
            "127.0.0.1:0",
            "--storage-dir",
            under_file.to_str().unwrap(),
            "--private-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        err.contains("the signing key file can be read by other users"),
        "{err}"
    );
}
