//! Witness cosigning with the real binary against witnesses the suite runs itself
//! (tests/support/witness.rs, written to C2SP tlog-witness): cosigned checkpoints,
//! 409 retries after a restart and after a witness was restored from a backup, and a
//! witness that is down, slow or stuck on a stale size, under policies that are met,
//! not met (withheld) and not met with fail_open.

mod common;
#[path = "support/tls.rs"]
mod tls;
#[path = "support/witness.rs"]
mod witness;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::cosignature::CosignatureVerifier;
use tlogd_core::note::Note;
use witness::{Knobs, TestWitness, down_url};

/// Start tlogd on `dir/log` with the witness policy `policy` and extra TOML for
/// `[witnessing]`.
fn start(dir: &std::path::Path, policy: &str, witnessing: &str, opts: &Opts) -> Daemon {
    let file = dir.join("witness.policy");
    std::fs::write(&file, policy).unwrap();
    let storage = format!("dir = \"{}\"\n", dir.join("log").display());
    Daemon::start_opts(
        dir,
        &storage,
        &format!(
            "[witnessing]\npolicy_file = \"{}\"\n{witnessing}",
            file.display()
        ),
        opts,
    )
}

async fn scrape(http: &Http, d: &Daemon) -> String {
    let (_, _, m) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    String::from_utf8(m.to_vec()).unwrap()
}

/// A sample's value, 0 when it was never recorded.
fn sample(m: &str, name_and_labels: &str) -> f64 {
    m.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Wait (bounded) until `cond` holds on the metrics.
async fn wait_metrics(http: &Http, d: &Daemon, what: &str, cond: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((200, _, m)) = http.get(&format!("{}/metrics", d.metrics_url)).await
            && cond(std::str::from_utf8(&m).unwrap())
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The published checkpoint and the timestamps of the cosignatures that verify, per
/// witness vkey.
async fn cosigned(
    http: &Http,
    url: &str,
    witnesses: &[&TestWitness],
) -> (Checkpoint, Vec<Option<u64>>) {
    let (status, _, body) = http.get(&format!("{url}/checkpoint")).await.unwrap();
    assert_eq!(status, 200);
    let cp = Checkpoint::open(&body, ORIGIN, &verifier()).unwrap().0;
    let note = Note::parse(&body).unwrap();
    let stamps = witnesses
        .iter()
        .map(|w| {
            let v = CosignatureVerifier::from_vkey(&w.vkey).unwrap();
            note.signatures
                .iter()
                .find(|s| v.matches(s))
                .map(|s| v.verify(&note.text, s).expect("cosignature verifies"))
        })
        .collect();
    (cp, stamps)
}

async fn add(http: &Http, url: &str, from: u64, to: u64) {
    for i in from..to {
        http.add(url, Bytes::from(format!("witnessed entry {i}")))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_carry_the_cosignatures_of_the_quorum() {
    let w1 = TestWitness::start("w1", verifier()).await;
    let w2 = TestWitness::start("w2", verifier()).await;
    let policy = format!(
        "# both must cosign\nlog {}\n{}{}group both all w1 w2\nquorum both\n",
        verifier().to_vkey(),
        w1.policy_line(),
        w2.policy_line()
    );
    let dir = tempfile::tempdir().unwrap();
    let opts = Opts {
        checkpoint_toml: "republish_interval_ms = 300\n".into(),
        ..Opts::default()
    };
    let mut d = start(dir.path(), &policy, "", &opts);
    let http = Http::new();
    d.wait_ready(&http).await;
    add(&http, &d.url, 0, 300).await;
    let cp = http.wait_checkpoint(&d.url, 300).await;
    let (published, stamps) = cosigned(&http, &d.url, &[&w1, &w2]).await;
    assert_eq!(published, cp);
    let first = stamps[0].expect("w1 cosigned");
    assert!(stamps[1].is_some(), "w2 cosigned");
    // The witnesses verified consistency proofs from the log's tiles to get here.
    assert!(w1.latest().unwrap().0 >= 300 && w2.latest().unwrap().0 >= 300);

    // Republished without growth: cosigned again, with a later timestamp (seconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (again, stamps) = cosigned(&http, &d.url, &[&w1, &w2]).await;
        assert_eq!(again.size, cp.size);
        if stamps[0].unwrap() > first && stamps[1].is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "no fresh cosignature in 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(d.terminate().success());

    // Restarted, tlogd does not know what the witnesses saw: they answer 409 with
    // their size, and get a proof from it.
    let mut d = start(dir.path(), &policy, "", &Opts::default());
    d.wait_ready(&http).await;
    add(&http, &d.url, 300, 700).await;
    let cp = http.wait_checkpoint(&d.url, 700).await;
    let (_, stamps) = cosigned(&http, &d.url, &[&w1, &w2]).await;
    assert!(stamps.iter().all(Option::is_some), "{stamps:?}");
    assert_eq!(w1.latest().unwrap(), (cp.size, cp.root));
    let m = scrape(&http, &d).await;
    assert!(
        sample(
            &m,
            "tlogd_witness_requests_total{witness=\"w1\",outcome=\"conflict\"}"
        ) >= 1.0,
        "{m}"
    );

    // w2 restored from an old backup (it forgot everything after size 300): tlogd's
    // old size for it is stale, the 409 names 300, and the proof from 300 is accepted.
    let old = w1.latest().unwrap();
    assert_eq!(published.size, 300);
    w2.set_latest(Some((published.size, published.root)));
    let conflicts_before = sample(
        &m,
        "tlogd_witness_requests_total{witness=\"w2\",outcome=\"conflict\"}",
    );
    add(&http, &d.url, 700, 800).await;
    let cp = http.wait_checkpoint(&d.url, 800).await;
    let (_, stamps) = cosigned(&http, &d.url, &[&w1, &w2]).await;
    assert!(stamps.iter().all(Option::is_some), "{stamps:?}");
    assert_eq!(w2.latest().unwrap(), (cp.size, cp.root));
    assert!(cp.size > old.0);
    let m = scrape(&http, &d).await;
    assert!(
        sample(
            &m,
            "tlogd_witness_requests_total{witness=\"w2\",outcome=\"conflict\"}"
        ) > conflicts_before,
        "{m}"
    );
    // A cosigned log is still a tlog-tiles log any reader verifies, and `tlogd verify
    // --witness-policy` checks its cosignatures against a policy.
    let verify = |policy: String| {
        let url = d.url.clone();
        let file = dir.path().join("verify.policy");
        std::fs::write(&file, policy).unwrap();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
                .args(["verify", &url, "--log-public-key", &verifier().to_vkey()])
                .arg("--witness-policy")
                .arg(&file)
                .output()
                .unwrap()
        })
    };
    let o = verify(policy.clone()).await.unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.contains("cosigned as the witness policy requires by w1 (time"),
        "{out}"
    );
    let (_, w3) = tlogd_core::cosignature::generate_cosigner_key("w3.example").unwrap();
    let o = verify(format!(
        "{}{}witness w3 {w3}\ngroup all3 all w1 w2 w3\nquorum all3\n",
        w1.policy_line(),
        w2.policy_line()
    ))
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.starts_with("FAIL checkpoint: its cosignatures do not meet the witness policy")
            && err.contains("cosigned by w1, w2"),
        "{err}"
    );
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_slow_and_stale_witnesses_under_policies_met_unmet_and_fail_open() {
    let ok = TestWitness::start("ok", verifier()).await;
    let slow = TestWitness::start("slow", verifier()).await;
    slow.set_knobs(Knobs {
        delay: Duration::from_secs(3),
        ..Knobs::default()
    });
    let stale = TestWitness::start("stale", verifier()).await;
    stale.set_knobs(Knobs {
        stale_size: Some(5),
        ..Knobs::default()
    });
    let (_, down_vkey) =
        tlogd_core::cosignature::generate_cosigner_key("down.witness.example").unwrap();
    let witnesses = format!(
        "{}{}{}witness down {down_vkey} {}\n",
        ok.policy_line(),
        slow.policy_line(),
        stale.policy_line(),
        down_url()
    );
    let http = Http::new();
    let timeout = "timeout_ms = 500\n";

    // Any one of four: published with the one cosignature obtained.
    let dir = tempfile::tempdir().unwrap();
    let policy = format!("{witnesses}group g any ok slow stale down\nquorum g\n");
    let mut d = start(dir.path(), &policy, timeout, &Opts::default());
    d.wait_ready(&http).await;
    add(&http, &d.url, 0, 20).await;
    http.wait_checkpoint(&d.url, 20).await;
    let (_, stamps) = cosigned(&http, &d.url, &[&ok, &slow, &stale]).await;
    assert!(
        stamps[0].is_some() && stamps[1].is_none() && stamps[2].is_none(),
        "{stamps:?}"
    );
    let m = scrape(&http, &d).await;
    // Slow: cut once the quorum is met (or, on a stalled machine, by its timeout).
    assert!(
        ["not_awaited", "timeout"].iter().any(|o| sample(
            &m,
            &format!("tlogd_witness_requests_total{{witness=\"slow\",outcome=\"{o}\"}}")
        ) >= 1.0),
        "{m}"
    );
    for (w, outcome) in [("down", "error"), ("stale", "invalid"), ("ok", "cosigned")] {
        assert!(
            sample(
                &m,
                &format!("tlogd_witness_requests_total{{witness=\"{w}\",outcome=\"{outcome}\"}}")
            ) >= 1.0,
            "{w}: {outcome}\n{m}"
        );
    }
    assert!(d.terminate().success());

    // Two of four: not met, so nothing is published (not even the empty tree), adds
    // still commit, and the checkpoint is retried until the slow witness speeds up.
    // (A new log under the same key: the witnesses forget the previous one, or they
    // would rightly refuse this one as a fork.)
    ok.set_latest(None);
    slow.set_latest(None);
    let dir = tempfile::tempdir().unwrap();
    let stderr = dir.path().join("stderr");
    let policy = format!("{witnesses}group g 2 ok slow stale down\nquorum g\n");
    let opts = Opts {
        stderr_to: Some(stderr.clone()),
        rust_log: Some("error"),
        ..Opts::default()
    };
    let mut d = start(dir.path(), &policy, timeout, &opts);
    wait_metrics(&http, &d, "a withheld checkpoint", |m| {
        sample(m, "tlogd_witness_policy_unmet_total{action=\"withheld\"}") >= 1.0
            && sample(
                m,
                "tlogd_witness_requests_total{witness=\"ok\",outcome=\"cosigned\"}",
            ) >= 1.0
    })
    .await;
    let (status, _, _) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
    assert_eq!(status, 404, "a checkpoint was published without its quorum");
    assert_eq!(
        http.add(&d.url, Bytes::from_static(b"still logged"))
            .await
            .unwrap(),
        (0, false)
    );
    wait_metrics(&http, &d, "a retry", |m| {
        sample(m, "tlogd_witness_policy_unmet_total{action=\"withheld\"}") >= 2.0
    })
    .await;
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        log.contains("checkpoint not published") && log.contains("witness policy not met"),
        "{log}"
    );
    slow.set_knobs(Knobs::default());
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(&format!("{}/checkpoint", d.url)).await.unwrap().0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not published once the quorum was met"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cp = http.wait_checkpoint(&d.url, 1).await;
    let (published, stamps) = cosigned(&http, &d.url, &[&ok, &slow, &stale]).await;
    assert_eq!(published, cp);
    assert!(stamps[0].is_some() && stamps[1].is_some(), "{stamps:?}");
    assert!(d.terminate().success());

    // Not met, fail_open: published anyway with what was obtained, and counted.
    ok.set_latest(None);
    slow.set_latest(None);
    slow.set_knobs(Knobs {
        delay: Duration::from_secs(3),
        ..Knobs::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let mut d = start(
        dir.path(),
        &policy,
        &format!("{timeout}fail_open = true\n"),
        &Opts::default(),
    );
    d.wait_ready(&http).await;
    add(&http, &d.url, 0, 5).await;
    http.wait_checkpoint(&d.url, 5).await;
    let (_, stamps) = cosigned(&http, &d.url, &[&ok, &slow, &stale]).await;
    assert!(stamps[0].is_some() && stamps[1].is_none(), "{stamps:?}");
    let m = scrape(&http, &d).await;
    assert!(
        sample(&m, "tlogd_witness_policy_unmet_total{action=\"published\"}") >= 1.0,
        "{m}"
    );
    assert!(d.terminate().success());
}

/// Once the policy is met, a witness that does not answer delays no checkpoint (beyond a
/// short grace): here it would hold each one for its whole 60-second timeout. A witness
/// a little slower than the quorum still gets its cosignature in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_witness_does_not_hold_checkpoints_once_the_quorum_is_met() {
    let ok = TestWitness::start("ok", verifier()).await;
    let stuck = TestWitness::start("stuck", verifier()).await;
    stuck.set_knobs(Knobs {
        delay: Duration::from_secs(3600),
        ..Knobs::default()
    });
    let policy = format!(
        "{}{}group g any ok stuck\nquorum g\n",
        ok.policy_line(),
        stuck.policy_line()
    );
    let http = Http::new();
    let dir = tempfile::tempdir().unwrap();
    let mut d = start(
        dir.path(),
        &policy,
        "timeout_ms = 60000\n",
        &Opts::default(),
    );
    d.wait_ready(&http).await;
    for round in 1..=3u64 {
        add(&http, &d.url, round - 1, round).await;
        // Waits at most 30 s: half the stuck witness's timeout.
        http.wait_checkpoint(&d.url, round).await;
        let (_, stamps) = cosigned(&http, &d.url, &[&ok, &stuck]).await;
        assert!(stamps[0].is_some() && stamps[1].is_none(), "{stamps:?}");
    }
    let m = scrape(&http, &d).await;
    assert!(
        sample(
            &m,
            "tlogd_witness_requests_total{witness=\"stuck\",outcome=\"not_awaited\"}"
        ) >= 3.0,
        "{m}"
    );
    // The stuck witness's connection, whose exchange was cut, is not reused for the
    // next request: each round asked it afresh.
    assert!(stuck.requests() >= 3, "{}", stuck.requests());
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_witness_policies_stop_the_daemon_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let run = |policy: &str| {
        let file = dir.path().join("p");
        std::fs::write(&file, policy).unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            format!("[witnessing]\npolicy_file = \"{}\"\n", file.display()),
        )
        .unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(["serve", "--metrics-listen", "", "--origin", ORIGIN])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--storage-dir")
            .arg(dir.path().join("log"))
            .arg("--config")
            .arg(&cfg)
            .env("TLOGD_PRIVATE_KEY", SKEY)
            .output()
            .unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let (_, vk) = tlogd_core::cosignature::generate_cosigner_key("w.example").unwrap();
    let err = run(&format!(
        "witness w {vk} http://127.0.0.1:1\nquorum nobody\n"
    ));
    assert!(
        err.contains("witness policy line 2") && err.contains("\"nobody\""),
        "{err}"
    );
    let err = run(&format!("witness w {vk}\nquorum w\n"));
    assert!(err.contains("witness w has no URL"), "{err}");
    let err = run(&format!("witness w {vk} ftp://127.0.0.1:1\nquorum w\n"));
    assert!(err.contains("not an http:// or https:// URL"), "{err}");
    let (_, other_log) = tlogd_core::note::generate_key("example.com/other").unwrap();
    let err = run(&format!(
        "log {other_log}\nwitness w {vk} http://127.0.0.1:1\nquorum w\n"
    ));
    assert!(
        err.contains("the policy lists logs, but not this one"),
        "{err}"
    );
}

/// tlog-witness over HTTPS: the witness's certificate is checked against the system's
/// roots, here a private CA given with `SSL_CERT_FILE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_behind_https_cosigns() {
    let w = TestWitness::start("tls", verifier()).await;
    let dir = tempfile::tempdir().unwrap();
    let target = w.url.trim_start_matches("http://").parse().unwrap();
    let front = tls::TlsFront::start(&dir.path().join("tls"), target).await;
    let policy = format!("witness tls {} {}\nquorum tls\n", w.vkey, front.url);
    let opts = Opts {
        env: vec![("SSL_CERT_FILE".into(), front.ca.display().to_string())],
        ..Opts::default()
    };
    let mut d = start(dir.path(), &policy, "", &opts);
    let http = Http::new();
    d.wait_ready(&http).await;
    add(&http, &d.url, 0, 3).await;
    http.wait_checkpoint(&d.url, 3).await;
    let (cp, stamps) = cosigned(&http, &d.url, &[&w]).await;
    assert!(stamps[0].is_some(), "cosigned over https");
    assert_eq!(w.latest(), Some((cp.size, cp.root)));
    assert!(d.terminate().success());
}
