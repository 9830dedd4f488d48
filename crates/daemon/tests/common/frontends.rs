//! Two frontends on one shared store (a database, a bucket) under the loadgen: the
//! end-to-end check every shared backend runs.

use std::path::Path;

use clap::Parser;
use tlog_loadgen::{Args, run};

use super::{Daemon, Http, verifier};

/// The loadgen adds round-robin through `a` and `b` (4,000 adds, 5 % of them
/// resubmissions) and reads and verifies through `b`: no error, every new index handed
/// out once, both frontends serve one consistent tree, and `tlogd verify` passes
/// through each.
pub async fn two_frontends_under_load(http: &Http, a: &Daemon, b: &Daemon, dir: &Path) {
    let vkey = verifier().to_vkey();
    let report_path = dir.join("report.json");
    let args = Args::parse_from([
        "tlog-loadgen",
        "--log-url",
        &b.url,
        "--write-log-url",
        &a.url,
        "--write-log-url",
        &b.url,
        "--log-public-key",
        &vkey,
        "--writers",
        "32",
        "--leaf-write-goal",
        "4000",
        "--dup-chance",
        "0.05",
        "--readers-full",
        "1",
        "--readers-random",
        "1",
        "--read-rate",
        "100",
        "--max-runtime",
        "120",
        "--quiet",
        "--report-json",
        report_path.to_str().unwrap(),
    ]);
    let r = run(args).await.unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    assert!(r.verification_failures.is_empty());
    assert_eq!(r.write_errors, 0, "{:?}", r.error_samples);
    assert!(r.writes_new + r.writes_duplicate >= 4000);
    // Every new index was handed out once: the tree grew by exactly the new entries.
    assert_eq!(r.tree_growth, r.writes_new);
    // Both frontends serve the same, consistent tree.
    let ca = http.wait_checkpoint(&a.url, r.tree_size_end).await;
    let cb = http.wait_checkpoint(&b.url, r.tree_size_end).await;
    let (old, new) = if ca.size <= cb.size {
        (ca, cb)
    } else {
        (cb, ca)
    };
    http.verify_consistency(&a.url, &old, &new).await;
    for url in [a.url.clone(), b.url.clone()] {
        tlogd_verify(url).await;
    }
}

/// `tlogd verify` of the log at `url` (a daemon, or a bucket serving the log): exit
/// status 0 and "OK ...".
pub async fn tlogd_verify(url: String) {
    tlogd_verify_with(url, verifier().to_vkey(), None).await
}

/// `tlogd verify` of the log at `url` signed by `vkey`, whose origin is `origin` when
/// it differs from the key's name.
pub async fn tlogd_verify_with(url: String, vkey: String, origin: Option<String>) {
    let o = tokio::task::spawn_blocking(move || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"));
        c.args(["verify", &url, "--log-public-key", &vkey]);
        if let Some(o) = &origin {
            c.args(["--origin", o]);
        }
        c.output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("OK "));
}
