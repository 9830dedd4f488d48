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

/// Careful clients write through the forwarding frontend `f` while the sequencing
/// frontend `s` is killed with SIGKILL `kills` times and started again (the same
/// config, ports and environment, `opts`): each client resubmits its entry, to `f`, on
/// every `503` or dropped connection until it is answered with an index, as the docs
/// tell it. Then the whole log is read: every acknowledged entry is there exactly
/// once, at the index it was answered with, and no entry of theirs twice (#57).
pub async fn careful_clients_survive_sequencer_kills(
    http: &Http,
    s: &mut Daemon,
    f: &Daemon,
    opts: &super::Opts,
    kills: usize,
) {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..16 {
        let (http, url, stop) = (http.clone(), f.url.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let entry = Bytes::from(format!("careful client {c} entry {i}"));
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    match http.add(&url, entry.clone()).await {
                        Ok((index, _)) => {
                            acked.push((entry.clone(), index));
                            break;
                        }
                        // "May be logged, resubmit", pushback, or the answer lost.
                        Err((503 | 0, _, _)) if Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(r) => panic!("{entry:?}: {r:?}"),
                    }
                }
                i += 1;
            }
            acked
        }));
    }
    let port = |url: &str| -> u16 { url.rsplit(':').next().unwrap().parse().unwrap() };
    let (sport, smport) = (port(&s.url), port(&s.metrics_url));
    let cfg = s.dir.join("tlogd.toml");
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        s.kill();
        tokio::time::sleep(Duration::from_millis(700)).await;
        *s = Daemon::spawn(&s.dir.clone(), &cfg, sport, smport, opts);
        s.wait_ready(http).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked: HashMap<Vec<u8>, u64> = HashMap::new();
    for c in clients {
        for (entry, index) in c.await.unwrap() {
            assert!(
                acked.insert(entry.to_vec(), index).is_none(),
                "answered twice"
            );
        }
    }
    assert!(
        acked.len() >= 100,
        "only {} entries acknowledged",
        acked.len()
    );
    let top = acked.values().copied().max().unwrap();
    let cp = http.wait_checkpoint(&s.url, top + 1).await;
    let mut seen: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    for n in 0..cp.size.div_ceil(256) {
        for (i, e) in http
            .bundle(&s.url, n, cp.size)
            .await
            .into_iter()
            .enumerate()
        {
            seen.entry(e).or_default().push(n * 256 + i as u64);
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "{} entries logged more than once, e.g. {:?}",
        twice.len(),
        twice
            .first()
            .map(|(e, at)| (String::from_utf8_lossy(e), at))
    );
    for (entry, index) in &acked {
        assert_eq!(
            seen.get(entry).map(Vec::as_slice),
            Some(&[*index][..]),
            "{:?} acknowledged at {index}",
            String::from_utf8_lossy(entry)
        );
    }
    eprintln!(
        "{} entries acknowledged through the forwarding frontend, {kills} kills of the sequencing one, none twice",
        acked.len()
    );
}
