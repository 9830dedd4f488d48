//! Spawning the real `tlogd` binary and talking HTTP to it.
#![allow(dead_code)]

pub mod frontends;
pub mod objects;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::hash::{Hash, leaf_hash};
use tlogd_core::note::{NoteSigner, NoteVerifier};
use tlogd_core::proof;
use tlogd_core::tile::{TileId, parse_hash_tile};

/// The Go vectors' test key and origin, as every test of the workspace uses them.
pub use tlogd_core::conformance::{ORIGIN, SKEY};

pub fn verifier() -> NoteVerifier {
    NoteSigner::from_skey(SKEY).unwrap().verifier()
}

pub fn free_port() -> u16 {
    tlogd_storage_object::testsupport::free_port()
}

/// Extra ways to start a daemon.
#[derive(Default)]
pub struct Opts {
    /// Environment variables set for the daemon.
    pub env: Vec<(String, String)>,
    /// `RUST_LOG` (default `warn`).
    pub rust_log: Option<&'static str>,
    /// Write the daemon's stderr to this file instead of the test's.
    pub stderr_to: Option<PathBuf>,
    /// Keys added to the `[checkpoint]` section (which sets `interval_ms = 50`).
    pub checkpoint_toml: String,
}

pub struct Daemon {
    pub child: Child,
    pub url: String,
    pub metrics_url: String,
    pub dir: PathBuf,
}

impl Daemon {
    /// Start tlogd on the POSIX log in `dir` with extra TOML appended to a generated
    /// config.
    pub fn start(dir: &Path, extra_toml: &str) -> Daemon {
        let storage = format!("dir = \"{}\"\n", dir.join("log").display());
        Daemon::start_with(dir, &storage, extra_toml)
    }

    /// Start tlogd with `storage_toml` as its `[storage]` section (key and config files
    /// go to `dir`) and extra TOML appended.
    pub fn start_with(dir: &Path, storage_toml: &str, extra_toml: &str) -> Daemon {
        Daemon::start_opts(dir, storage_toml, extra_toml, &Opts::default())
    }

    /// [`Daemon::start_with`] with environment variables, a log level and optionally
    /// stderr captured to a file.
    pub fn start_opts(dir: &Path, storage_toml: &str, extra_toml: &str, opts: &Opts) -> Daemon {
        let port = free_port();
        let mport = free_port();
        let key = dir.join("key");
        std::fs::write(&key, SKEY).unwrap();
        let cfg = dir.join("tlogd.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:{port}\"\norigin = \"{ORIGIN}\"\nprivate_key_file = \"{}\"\n\
                 [storage]\n{storage_toml}[checkpoint]\ninterval_ms = 50\n{}\
                 [metrics]\nlisten = \"127.0.0.1:{mport}\"\n{extra_toml}",
                key.display(),
                opts.checkpoint_toml,
            ),
        )
        .unwrap();
        Daemon::spawn(dir, &cfg, port, mport, opts)
    }

    /// Run `tlogd serve --config cfg`, listening on `port` and `mport` as the file
    /// says, with `opts`' environment, log level and stderr.
    pub fn spawn(dir: &Path, cfg: &Path, port: u16, mport: u16, opts: &Opts) -> Daemon {
        let stderr = match &opts.stderr_to {
            Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            None => Stdio::inherit(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(["serve", "--config"])
            .arg(cfg)
            .env("RUST_LOG", opts.rust_log.unwrap_or("warn"))
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn tlogd");
        Daemon {
            child,
            url: format!("http://127.0.0.1:{port}"),
            metrics_url: format!("http://127.0.0.1:{mport}"),
            dir: dir.to_path_buf(),
        }
    }

    pub async fn wait_ready(&mut self, http: &Http) {
        self.wait_ready_at(http, "").await
    }

    /// Wait until the log under `prefix` (`""`, or `/<name>` of a `[[logs]]` entry)
    /// serves its checkpoint.
    pub async fn wait_ready_at(&mut self, http: &Http, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("tlogd exited early: {status}");
            }
            if let Ok((200, _, _)) = http.get(&format!("{}{prefix}/checkpoint", self.url)).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("tlogd did not become ready");
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe_kill(self.child.id(), 15);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "tlogd did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

fn unsafe_kill(pid: u32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

#[derive(Clone)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
}

pub type Resp = (u16, HashMap<String, String>, Bytes);

impl Http {
    pub fn new() -> Http {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        Http {
            // Idle connections are dropped well before the daemon's 10 s header-read
            // timeout closes them: a request sent on a connection the server is closing
            // at that instant fails with `SendRequest` (seen in CI after a 10 s idle).
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(256)
                .pool_idle_timeout(Duration::from_secs(3))
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build(conn),
        }
    }

    /// Send any request.
    pub async fn request(&self, req: hyper::Request<Full<Bytes>>) -> Result<Resp, String> {
        self.send(req).await
    }

    async fn send(&self, req: hyper::Request<Full<Bytes>>) -> Result<Resp, String> {
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .map_err(|_| "timeout".to_string())?
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, headers, body))
    }

    pub async fn get(&self, url: &str) -> Result<Resp, String> {
        let req = hyper::Request::get(url)
            .body(Full::new(Bytes::new()))
            .unwrap();
        self.send(req).await
    }

    pub async fn post(&self, url: &str, body: Bytes) -> Result<Resp, String> {
        let req = hyper::Request::post(url).body(Full::new(body)).unwrap();
        self.send(req).await
    }

    pub async fn post_with(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Resp, String> {
        let mut req = hyper::Request::post(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Full::new(body)).unwrap()).await
    }

    /// POST /add; Ok(index) on 200.
    pub async fn add(&self, base: &str, entry: Bytes) -> Result<(u64, bool), Resp> {
        match self.post(&format!("{base}/add"), entry).await {
            Ok((200, h, body)) => {
                let idx = std::str::from_utf8(&body).unwrap().trim().parse().unwrap();
                Ok((idx, h.get("x-tlog-duplicate").is_some_and(|v| v == "true")))
            }
            Ok(r) => Err(r),
            Err(e) => Err((0, HashMap::new(), Bytes::from(e))),
        }
    }

    /// [`Http::add`], again while the answer is `503` (a dedup index catching up
    /// after a start pushes back adds it cannot tell are new), for up to a minute.
    pub async fn add_when_ready(&self, base: &str, entry: Bytes) -> Result<(u64, bool), Resp> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.add(base, entry.clone()).await {
                Err((503, _, _)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                r => return r,
            }
        }
    }

    /// Fetch and verify the checkpoint.
    pub async fn checkpoint(&self, base: &str) -> Checkpoint {
        let (status, _, body) = self.get(&format!("{base}/checkpoint")).await.unwrap();
        assert_eq!(status, 200);
        Checkpoint::open(&body, ORIGIN, &verifier())
            .expect("checkpoint verifies")
            .0
    }

    /// The bytes of tile or bundle `id`, as a tlog-tiles client fetches them: a partial
    /// that is gone falls back to the full tile (tlog-tiles "Partial Tiles": a log MAY
    /// delete a partial once the full tile exists). Returns the id actually served.
    pub async fn fetch_tile(&self, base: &str, id: &TileId) -> (TileId, Bytes) {
        let (status, _, body) = self.get(&format!("{base}/{}", id.path())).await.unwrap();
        if status == 404 && !id.is_full() {
            let full = id.full();
            let (status, _, body) = self.get(&format!("{base}/{}", full.path())).await.unwrap();
            assert_eq!(status, 200, "{} and its full tile", id.path());
            return (full, body);
        }
        assert_eq!(status, 200, "{}", id.path());
        (*id, body)
    }

    pub async fn tile_hashes(&self, base: &str, id: &TileId) -> Vec<Hash> {
        let (got, body) = self.fetch_tile(base, id).await;
        parse_hash_tile(&body, got.width).unwrap()
    }

    /// Verify that `entry` is at `index` in the tree of `cp` with a proof from tiles.
    pub async fn verify_inclusion(&self, base: &str, cp: &Checkpoint, index: u64, entry: &[u8]) {
        let ids = proof::inclusion_proof_tiles(index, cp.size).unwrap();
        let mut tiles = HashMap::new();
        for id in ids {
            let h = self.tile_hashes(base, &id).await;
            tiles.insert(id, h);
        }
        let p = proof::inclusion_proof(index, cp.size, &tiles).unwrap();
        proof::verify_inclusion(&leaf_hash(entry), index, cp.size, &p, &cp.root)
            .unwrap_or_else(|e| panic!("inclusion of {index} in {}: {e}", cp.size));
    }

    pub async fn verify_consistency(&self, base: &str, old: &Checkpoint, new: &Checkpoint) {
        if old.size == 0 || old.size == new.size {
            if old.size == new.size {
                assert_eq!(old.root, new.root, "fork at size {}", old.size);
            }
            return;
        }
        let ids = proof::consistency_proof_tiles(old.size, new.size).unwrap();
        let mut tiles = HashMap::new();
        for id in ids {
            let h = self.tile_hashes(base, &id).await;
            tiles.insert(id, h);
        }
        let p = proof::consistency_proof(old.size, new.size, &tiles).unwrap();
        proof::verify_consistency(old.size, new.size, &old.root, &new.root, &p)
            .unwrap_or_else(|e| panic!("consistency {} -> {}: {e}", old.size, new.size));
    }

    /// The entries of bundle `n` at tree size `size`.
    pub async fn bundle(&self, base: &str, n: u64, size: u64) -> Vec<Vec<u8>> {
        let width = (size - n * 256).min(256) as u16;
        let (_, body) = self.fetch_tile(base, &TileId::entries(n, width)).await;
        tlogd_core::bundle::parse_bundle(&body)
            .unwrap()
            .into_iter()
            .take(width as usize)
            .map(|e| e.to_vec())
            .collect()
    }

    /// Check that every `(index, entry)` is in the tree of `size`, byte for byte,
    /// fetching each bundle once.
    pub async fn verify_entries(&self, base: &str, size: u64, known: &[(u64, Vec<u8>)]) {
        let mut bundles: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
        for (idx, e) in known {
            assert!(
                *idx < size,
                "acknowledged index {idx} beyond the tree {size}"
            );
            let n = idx / 256;
            if let std::collections::hash_map::Entry::Vacant(v) = bundles.entry(n) {
                v.insert(self.bundle(base, n, size).await);
            }
            assert_eq!(&bundles[&n][(idx % 256) as usize], e, "entry {idx}");
        }
    }

    /// Check that every acknowledged entry occurs exactly once in the tree of `size`:
    /// an entry committed twice (a batch retried after it had in fact committed, a
    /// replay after a crash) is as wrong as a lost one. The test's entries are all
    /// distinct, so any second occurrence is a duplicate the log made.
    pub async fn verify_unique(&self, base: &str, size: u64, known: &[(u64, Vec<u8>)]) {
        let mut seen: HashMap<&[u8], Vec<u64>> = known
            .iter()
            .map(|(_, e)| (e.as_slice(), Vec::new()))
            .collect();
        for n in 0..size.div_ceil(256) {
            for (i, e) in self.bundle(base, n, size).await.iter().enumerate() {
                if let Some(at) = seen.get_mut(e.as_slice()) {
                    at.push(n * 256 + i as u64);
                }
            }
        }
        for (idx, e) in known {
            let at = &seen[e.as_slice()];
            assert_eq!(
                at,
                &[*idx],
                "acknowledged entry {:?} (index {idx}) is at indices {at:?}",
                String::from_utf8_lossy(e)
            );
        }
    }

    /// Wait until the daemon's `/metrics` reports `tlogd_queue_depth` = `depth` (it is
    /// sampled when scraped), so a test acts on the queue's real state, not on a guess
    /// of how long the requests take to arrive.
    /// Whether the queue depth reaches `depth` within 3 s.
    pub async fn saw_queue_depth(&self, metrics_url: &str, depth: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            let (_, _, body) = self.get(&format!("{metrics_url}/metrics")).await.unwrap();
            if metric(&String::from_utf8_lossy(&body), "tlogd_queue_depth") >= depth as f64 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    pub async fn wait_queue_depth(&self, metrics_url: &str, depth: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, _, body) = self.get(&format!("{metrics_url}/metrics")).await.unwrap();
            let text = String::from_utf8_lossy(&body);
            let now = metric(&text, "tlogd_queue_depth");
            if now == depth as f64 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "queue depth stayed {now}, not {depth}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn wait_checkpoint(&self, base: &str, size: u64) -> Checkpoint {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let cp = self.checkpoint(base).await;
            if cp.size >= size {
                return cp;
            }
            assert!(Instant::now() < deadline, "no checkpoint reached {size}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The whole-log check of `tlogd verify` over HTTP, with every checkpoint the test
/// observed as an earlier one: each must be the root of the log's first entries at its
/// size, and the partial tiles and bundle it names must still be served (or their full
/// tiles) with the entries' bytes (tlog-tiles "Partial Tiles").
pub async fn check_observed(base: &str, observed: &[Checkpoint]) -> tlog_verify::fsck::FsckSummary {
    use tlog_verify::fsck::{FsckOptions, FsckSummary, fsck};
    let fetch = tlog_verify::fetch::HttpFetcher::new(base, None, Duration::from_secs(30)).unwrap();
    let mut earlier: Vec<Checkpoint> = Vec::new();
    for cp in observed {
        if !earlier.contains(cp) {
            earlier.push(cp.clone());
        }
    }
    let options = FsckOptions {
        earlier,
        ..FsckOptions::default()
    };
    let mut summary = FsckSummary::default();
    if let Err(e) = fsck(&fetch, ORIGIN, &verifier(), &options, &mut (), &mut summary).await {
        panic!("the log at {base} does not check out: {e}");
    }
    summary
}

/// Writers adding distinct entries until stopped, recording every acknowledged index.
/// An index acknowledged twice (a lost entry, or a fork) fails the writer's task.
#[derive(Default)]
pub struct Writers {
    acked: std::sync::Arc<std::sync::Mutex<HashMap<u64, Vec<u8>>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    /// Start `n` writers on `url`; their entries are `{label} writer {w} entry {i}`.
    pub fn start(&mut self, http: &Http, url: &str, n: u64, label: &str) {
        use std::sync::atomic::Ordering;
        self.stop.store(false, Ordering::Relaxed);
        for w in 0..n {
            let (http, url, acked, stop) = (
                http.clone(),
                url.to_string(),
                self.acked.clone(),
                self.stop.clone(),
            );
            let label = label.to_string();
            self.tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let e = format!("{label} writer {w} entry {i}").into_bytes();
                    if let Ok((idx, _)) = http.add(&url, Bytes::from(e.clone())).await {
                        let old = acked.lock().unwrap().insert(idx, e);
                        assert!(old.is_none(), "index {idx} acknowledged twice");
                    }
                    i += 1;
                }
            }));
        }
    }

    /// Stop the writers and wait for them.
    pub async fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            t.await.unwrap();
        }
    }

    /// How many adds were acknowledged.
    pub fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Wait until at least `n` adds in all were acknowledged (bounded: the load must
    /// make progress within 60 s).
    pub async fn wait_count(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} adds acknowledged within 60 s",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Every acknowledged (index, entry).
    pub fn snapshot(&self) -> Vec<(u64, Vec<u8>)> {
        self.acked
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }
}

/// The value of the Prometheus sample `name_and_labels` in a `/metrics` text; a
/// log's metric is also found without its `log` label (the single log of these tests
/// is `log="default"`).
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    let with_log = match name_and_labels.split_once('{') {
        Some((name, labels)) => format!("{name}{{log=\"default\",{labels}"),
        None => format!("{name_and_labels}{{log=\"default\"}}"),
    };
    let sample = |want: &str| {
        text.lines()
            .find(|l| l.starts_with(want) && l[want.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    sample(name_and_labels)
        .or_else(|| sample(&with_log))
        .unwrap_or_else(|| panic!("metric {name_and_labels} not found in:\n{text}"))
}

/// What a raw TCP exchange with the daemon got back.
#[derive(Debug)]
pub struct RawReply {
    /// Every byte the daemon sent.
    pub bytes: Vec<u8>,
    /// The daemon closed (or reset) the connection; false when `limit` ran out first.
    pub closed: bool,
}

impl RawReply {
    /// The status code of the first response, if any.
    pub fn status(&self) -> Option<u16> {
        let text = std::str::from_utf8(&self.bytes).ok()?;
        text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }

    /// The body of the first response (everything after the blank line).
    pub fn body(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }
}

/// `host:port` of a daemon URL.
pub fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Send `bytes` on a new connection (then half-close it if `eof`), and read until the
/// daemon closes it or `limit` passes.
pub async fn raw_exchange(url: &str, bytes: &[u8], eof: bool, limit: Duration) -> RawReply {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr_of(url)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    if eof {
        s.shutdown().await.unwrap();
    }
    let mut out = Vec::new();
    let closed = read_until_closed(&mut s, &mut out, limit).await;
    RawReply { bytes: out, closed }
}

/// Read from `s` into `out` until the peer closes or resets it (true) or `limit`
/// passes (false).
pub async fn read_until_closed(
    s: &mut tokio::net::TcpStream,
    out: &mut Vec<u8>,
    limit: Duration,
) -> bool {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}
