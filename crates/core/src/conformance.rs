//! The storage conformance suite: one set of tests every backend runs (memory objects,
//! POSIX, MySQL, PostgreSQL, S3, GCS), driven by the real engine. Feature
//! `conformance`; a backend's test file implements [`ConformanceStore`] and invokes
//! [`conformance_tests!`](crate::conformance_tests).
//!
//! What it proves: the log is byte-identical to the Go reference (Tessera v1.0.4) at
//! every size of the small log and for 70,000 entries in regular and irregular batches
//! with a reopen halfway; the largest bundle (16 MiB) round-trips; and, for stores that
//! several frontends share, a commit on a stale state conflicts and leaves nothing
//! visible, two engines racing never fork the tree nor hand out an index twice, and the
//! checkpoint never goes backwards; blobs beside the tree are write-once and survive a
//! reopen; a frozen log takes no more entries on any frontend, also after a reopen; a
//! log whose personality bundles entries in static-ct-api data tiles (`tile/data/`)
//! commits, reopens and reads back; the Go logs migrated in (`tlogd migrate`), one
//! interrupted and resumed, are served byte for byte. Every test that writes the tree
//! ends with the whole-log check.
//!
//! The Go vectors are read from `$TLOGD_VECTORS_DIR` or the repository's
//! `testdata/vectors` (relative to the test crate, two levels below the root).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::bundle::append_entry;
use crate::engine::checker::{CheckpointWatch, check_log_observed};
use crate::engine::{CommitBatch, Log, LogConfig, LogStorage, StorageError, TreeState};
use crate::hash::Hash;
use crate::hash::leaf_hash;
use crate::merkle::TileTree;
use crate::note::NoteSigner;
use crate::personality::{EntryError, Personality, StoredEntry};
use crate::tile::{TileId, TileKind};

/// The key the Go reference vectors were signed with (test only).
pub const SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
/// The vectors' origin.
pub const ORIGIN: &str = "example.com/log/testdata";

/// A backend under test: it makes fresh, empty stores and opens handles on them.
pub trait ConformanceStore: Send + Sync + 'static {
    /// The backend's storage.
    type Storage: LogStorage;

    /// A new, empty store for the log [`ORIGIN`]; returns a location naming it.
    fn fresh(&self, name: &str) -> impl Future<Output = String> + Send;

    /// Open a handle on the store at `location`: a frontend, or the same process after
    /// a restart.
    fn open(&self, location: &str) -> impl Future<Output = Arc<Self::Storage>> + Send;

    /// Release a handle before the next one opens (a single-writer store's lock, a
    /// connection pool). Default: drop it.
    fn close(&self, storage: Arc<Self::Storage>) -> impl Future<Output = ()> + Send {
        async move { drop(storage) }
    }

    /// Whether several handles may be open on one store at once (several frontends).
    /// A single-writer store (POSIX) skips the tests that need two.
    fn shared(&self) -> bool;
}

/// The Go vectors directory. Fails, never skips, when it is missing.
pub fn vectors() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let p = std::env::var_os("TLOGD_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../testdata/vectors"));
    assert!(
        p.join("README.md").exists(),
        "test vectors not found at {}",
        p.display()
    );
    p
}

/// A log config with batches of `batch` entries, queues that never push back and a
/// checkpoint after nearly every batch.
pub fn config(batch: usize) -> LogConfig {
    let signer = Arc::new(NoteSigner::from_skey(SKEY).expect("test key"));
    let mut c = LogConfig::new(ORIGIN, signer);
    c.batch_max_entries = batch;
    c.max_pending_entries = 1 << 20;
    c.max_pending_bytes = 1 << 30;
    c.checkpoint_interval = Duration::from_millis(1);
    c
}

/// Every file below `dir`, relative, sorted; a POSIX log's private `.tlogd` is skipped.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("readable vectors").flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == ".tlogd") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Add `entries` so that they get consecutive indices from `first`, in one batch per
/// call when the batch limit allows: every add is pushed before any is awaited.
pub async fn add_in_order<S: LogStorage>(log: &Log<S>, entries: Vec<Bytes>, first: u64) {
    let mut handles: Vec<_> = entries.into_iter().map(|e| Box::pin(log.add(e))).collect();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut done = Vec::with_capacity(handles.len());
    for h in handles.iter_mut() {
        done.push(match h.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        });
    }
    for (i, (h, d)) in handles.into_iter().zip(done).enumerate() {
        let out = match d {
            Some(v) => v,
            None => h.await,
        };
        assert_eq!(out.expect("add").index, first + i as u64);
    }
}

/// A tlog-tiles resource read back through the storage API.
pub async fn read_resource<S: LogStorage>(s: &S, rel: &str) -> Option<Vec<u8>> {
    if rel == "checkpoint" {
        s.read_checkpoint().await.expect("read checkpoint")
    } else {
        let id = TileId::parse(rel).unwrap_or_else(|e| panic!("{rel}: {e}"));
        s.read_tile(&id).await.expect("read tile")
    }
}

/// The whole-log check, and that every entry is `want(index)` where it says; returns
/// the committed size. No entry appears twice unless `want` allows it by saying so.
pub async fn check_entries<S: LogStorage>(s: &S, want: impl Fn(u64) -> Option<Vec<u8>>) -> u64 {
    check_entries_observed(s, &[], want).await
}

/// [`check_entries`], also checking every checkpoint in `observed` (seen while the log
/// grew): consistent with the final tree, and every partial tile it names readable or
/// replaced by its full tile.
pub async fn check_entries_observed<S: LogStorage>(
    s: &S,
    observed: &[crate::checkpoint::Checkpoint],
    want: impl Fn(u64) -> Option<Vec<u8>>,
) -> u64 {
    let verifier = NoteSigner::from_skey(SKEY).expect("test key").verifier();
    let mut bad = Vec::new();
    let mut visit = |i: u64, e: &[u8]| {
        if let Some(w) = want(i)
            && w != e
        {
            bad.push(i);
        }
    };
    let report = check_log_observed(s, ORIGIN, &verifier, observed, Some(&mut visit))
        .await
        .expect("the whole-log check");
    assert!(
        bad.is_empty(),
        "entries differ at {:?}",
        &bad[..bad.len().min(10)]
    );
    report.state.size
}

async fn wait_published<S: LogStorage>(log: &Log<S>, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if log.published_size() == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("checkpoint {n} not published");
}

/// The Go reference's 15-entry log, entry by entry: at every size, the checkpoint and
/// every partial tile and bundle a reader could ask for match byte for byte, and a
/// partial wider than the tree is not served.
pub async fn every_intermediate_state_of_the_small_log_matches<B: ConformanceStore>(b: &B) {
    let v = vectors().join("tessera-testdata-log");
    let words =
        "one two three four five six seven eit nain ten ileven twelf threeten fourten fivten";
    let storage = b.open(&b.fresh("small").await).await;
    assert_eq!(
        storage.load_state().await.expect("state"),
        None,
        "fresh log"
    );
    let (log, tasks) = Log::open(storage.clone(), None, config(1))
        .await
        .expect("open");
    wait_published(&log, 0).await;
    let read = |rel: &str| std::fs::read(v.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(
        storage.read_checkpoint().await.expect("checkpoint") == Some(read("checkpoint.0")),
        "empty checkpoint"
    );
    for (i, w) in words.split(' ').enumerate() {
        let n = i as u64 + 1;
        let out = log.add(Bytes::from(w.to_string())).await.expect("add");
        assert_eq!(out.index, i as u64);
        wait_published(&log, n).await;
        assert!(
            storage.read_checkpoint().await.expect("checkpoint")
                == Some(read(&format!("checkpoint.{n}"))),
            "checkpoint at size {n}"
        );
        // The widths a checkpoint of this log ever named must read back exactly.
        for k in 1..=n {
            for rel in [
                format!("tile/0/000.p/{k}"),
                format!("tile/entries/000.p/{k}"),
            ] {
                let got = read_resource(&*storage, &rel).await;
                assert!(got == Some(read(&rel)), "{rel} at size {n}");
            }
        }
        for rel in [
            format!("tile/0/000.p/{}", n + 1),
            format!("tile/entries/000.p/{}", n + 1),
        ] {
            assert_eq!(
                read_resource(&*storage, &rel).await,
                None,
                "{rel} at size {n}"
            );
        }
    }
    log.shutdown();
    tasks.join().await;
    assert_eq!(check_entries(&*storage, |_| None).await, 15);
}

/// The Go vectors as a migration's source: `root`'s resources, its `checkpoint` read
/// from the file `checkpoint` instead (an earlier size), every read failing after
/// `reads_left` reads (a source that goes away mid-copy).
struct VectorSource {
    root: PathBuf,
    checkpoint: PathBuf,
    reads_left: std::sync::atomic::AtomicI64,
}

impl crate::engine::checker::Fetch for VectorSource {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, crate::engine::checker::VerifyError> {
        use std::sync::atomic::Ordering;
        if self.reads_left.fetch_sub(1, Ordering::AcqRel) <= 0 {
            return Err(crate::engine::checker::VerifyError::Fetch(
                "the source went away".into(),
            ));
        }
        let file = match path {
            "checkpoint" => self.checkpoint.clone(),
            _ => self.root.join(path),
        };
        match std::fs::read(&file) {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::engine::checker::VerifyError::Fetch(e.to_string())),
        }
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }
}

/// `tlogd migrate`'s copy ([`crate::engine::import`]) of `source` at its checkpoint
/// into the store at `location`.
async fn migrate_in<B: ConformanceStore>(
    b: &B,
    location: &str,
    source: &VectorSource,
) -> Result<crate::engine::import::CopyReport, crate::engine::import::CopyError> {
    use crate::engine::import::{CopyOptions, copy_log};
    let signed = std::fs::read(&source.checkpoint).expect("vector checkpoint");
    let verifier = NoteSigner::from_skey(SKEY).expect("test key").verifier();
    let cp = crate::checkpoint::Checkpoint::open(&signed, ORIGIN, &verifier)
        .expect("the vector's checkpoint verifies")
        .0;
    let storage = b.open(location).await;
    let options = CopyOptions {
        jobs: 8,
        bundles_per_commit: 16,
        entry_check: None,
    };
    let r = copy_log(
        source,
        &*storage,
        &crate::personality::TlogTiles,
        &cp,
        &signed,
        &options,
        &mut (),
    )
    .await;
    b.close(storage).await;
    r
}

/// Logs written by Go Tessera, migrated in (`tlogd migrate`): the 15-entry log at its
/// 7th checkpoint, then caught up to its 15th (from a partial bundle); the 70,000-entry
/// log with its source gone mid-copy (no checkpoint in the store after that), then
/// resumed. Each time the store then serves the Go log's files byte for byte.
pub async fn the_go_reference_logs_migrate_in_byte_for_byte<B: ConformanceStore>(b: &B) {
    let small = vectors().join("tessera-testdata-log");
    let location = b.fresh("migrate-small").await;
    for n in [7, 15] {
        let source = VectorSource {
            root: small.clone(),
            checkpoint: small.join(format!("checkpoint.{n}")),
            reads_left: i64::MAX.into(),
        };
        let r = migrate_in(b, &location, &source).await.expect("copy");
        assert_eq!(r.size, n);
        let storage = b.open(&location).await;
        for rel in [
            "checkpoint".to_string(),
            format!("tile/0/000.p/{n}"),
            format!("tile/entries/000.p/{n}"),
        ] {
            let want = match rel.as_str() {
                "checkpoint" => small.join(format!("checkpoint.{n}")),
                _ => small.join(&rel),
            };
            assert!(
                read_resource(&*storage, &rel).await == Some(std::fs::read(want).expect("vector")),
                "{rel} at size {n} differs from the Go log's"
            );
        }
        b.close(storage).await;
    }

    let big = vectors().join("tessera-70k");
    let location = b.fresh("migrate-70k").await;
    let mut source = VectorSource {
        root: big.clone(),
        checkpoint: big.join("checkpoint"),
        reads_left: 60.into(),
    };
    let e = migrate_in(b, &location, &source)
        .await
        .expect_err("the source went away");
    assert!(e.to_string().contains("went away"), "{e}");
    let storage = b.open(&location).await;
    let at = storage
        .load_state()
        .await
        .expect("state")
        .map_or(0, |s| s.size);
    assert!(
        at > 0 && at < 70_000,
        "the interrupted copy committed {at} entries"
    );
    assert_eq!(
        storage.read_checkpoint().await.expect("read checkpoint"),
        None,
        "a checkpoint before the copy was complete"
    );
    b.close(storage).await;
    source.reads_left = i64::MAX.into();
    let r = migrate_in(b, &location, &source)
        .await
        .expect("resumed copy");
    assert_eq!((r.resumed_from, r.size), (at, 70_000));
    let storage = b.open(&location).await;
    for f in files(&big) {
        let rel = f.to_string_lossy();
        assert!(
            read_resource(&*storage, &rel).await
                == Some(std::fs::read(big.join(&f)).expect("vector")),
            "{rel} differs from the Go reference after the migration"
        );
    }
    let size = check_entries(&*storage, |i| Some(format!("entry {i}").into_bytes())).await;
    assert_eq!(size, 70_000);
    b.close(storage).await;
}

/// Append the 70,000 reference entries in batches of `sizes` (cycled), reopening the
/// store halfway; then compare every file of the reference log.
async fn seventy_thousand<B: ConformanceStore>(b: &B, name: &str, sizes: &[usize]) {
    let want_dir = vectors().join("tessera-70k");
    let location = b.fresh(name).await;
    let entries: Vec<Bytes> = (0..70_000)
        .map(|i| Bytes::from(format!("entry {i}")))
        .collect();
    let mut next = 0usize;
    let mut cycle = sizes.iter().cycle();
    for end in [33_333, entries.len()] {
        let storage = b.open(&location).await;
        let (log, tasks) = Log::open(storage.clone(), None, config(1 << 16))
            .await
            .expect("open");
        while next < end {
            let n = (*cycle.next().unwrap_or(&1)).min(end - next);
            add_in_order(&log, entries[next..next + n].to_vec(), next as u64).await;
            next += n;
        }
        log.shutdown();
        tasks.join().await;
        drop(log);
        b.close(storage).await;
    }
    let storage = b.open(&location).await;
    for f in files(&want_dir) {
        let rel = f.to_string_lossy();
        let got = read_resource(&*storage, &rel)
            .await
            .unwrap_or_else(|| panic!("{name}: {rel} missing"));
        assert!(
            got == std::fs::read(want_dir.join(&f)).expect("vector file"),
            "{name}: {rel} differs from the Go reference"
        );
    }
    let size = check_entries(&*storage, |i| Some(format!("entry {i}").into_bytes())).await;
    assert_eq!(size, 70_000);
    b.close(storage).await;
}

/// 70,000 entries in batches of 4,096.
pub async fn seventy_thousand_entries_in_batches_of_4096_match_the_go_reference<
    B: ConformanceStore,
>(
    b: &B,
) {
    seventy_thousand(b, "b4096", &[4096]).await;
}

/// 70,000 entries in batches that end on, just before and just after tile boundaries,
/// and spans crossing several tiles and a level-1 tile.
pub async fn seventy_thousand_entries_in_irregular_batches_match_the_go_reference<
    B: ConformanceStore,
>(
    b: &B,
) {
    seventy_thousand(
        b,
        "irregular",
        &[1, 255, 256, 1, 3000, 17, 511, 65_536, 4097, 2],
    )
    .await;
}

/// A batch of `entries` on top of `tree` (advanced), as the engine would build it, its
/// bundle `bundle` (extended) within the first 256 entries.
pub fn batch(tree: &mut TileTree, bundle: &mut Vec<u8>, entries: &[&[u8]]) -> CommitBatch {
    let prev = TreeState::new(
        tree.size(),
        if tree.size() == 0 {
            TreeState::empty().root
        } else {
            tree.root()
        },
    );
    let mut tiles = Vec::new();
    let leaves: Vec<_> = entries.iter().map(|e| leaf_hash(e)).collect();
    tree.append(&leaves, &mut tiles);
    for e in entries {
        append_entry(bundle, e).expect("small entry");
    }
    let width = (tree.size() % 256) as u16;
    assert!(width > 0, "keep test batches inside the first bundle");
    tiles.push((TileId::entries(0, width), bundle.clone()));
    CommitBatch {
        prev,
        next: TreeState::new(tree.size(), tree.root()),
        tiles,
    }
}

/// Two frontends: one commits, the other commits on the state it last saw. The second
/// conflicts and nothing of its batch is visible from either; retrying a batch that
/// did persist conflicts too; rebuilt on the current state, it commits.
pub async fn a_commit_on_a_stale_state_conflicts_and_leaves_nothing_visible<B: ConformanceStore>(
    b: &B,
) {
    if !b.shared() {
        return;
    }
    let location = b.fresh("cas").await;
    let a = b.open(&location).await;
    let other = b.open(&location).await;
    // Each frontend learns the (empty) stored state, as the engine does at open.
    a.load_state().await.expect("state");
    other.load_state().await.expect("state");
    let (mut ta, mut ba) = (TileTree::empty(), Vec::new());
    let (mut tb, mut bb) = (TileTree::empty(), Vec::new());
    let first = batch(&mut ta, &mut ba, &[b"a0", b"a1"]);
    let first_next = first.next;
    a.commit(first).await.expect("first commit");
    let stale = batch(&mut tb, &mut bb, &[b"b0", b"b1", b"b2"]);
    match other.commit(stale).await {
        Err(StorageError::Conflict { expected, found }) => {
            assert_eq!((expected, found), (0, 2));
        }
        r => panic!("expected a conflict, got {r:?}"),
    }
    let mut want = Vec::new();
    append_entry(&mut want, b"a0").expect("entry");
    append_entry(&mut want, b"a1").expect("entry");
    for s in [&a, &other] {
        assert_eq!(s.load_state().await.expect("state"), Some(first_next));
        assert_eq!(
            s.read_tile(&TileId::entries(0, 2)).await.expect("read"),
            Some(want.clone())
        );
        assert_eq!(
            s.read_tile(&TileId::entries(0, 3)).await.expect("read"),
            None
        );
        assert_eq!(
            s.read_tile(&TileId::hash(0, 0, 3)).await.expect("read"),
            None
        );
    }
    let mut t2 = TileTree::empty();
    let mut b2 = Vec::new();
    let again = batch(&mut t2, &mut b2, &[b"a0", b"a1"]);
    assert!(matches!(
        a.commit(again).await,
        Err(StorageError::Conflict { .. })
    ));
    let next = batch(&mut ta, &mut ba, &[b"b0"]);
    let next_state = next.next;
    other.commit(next).await.expect("rebuilt commit");
    assert_eq!(a.load_state().await.expect("state"), Some(next_state));
    assert_eq!(check_entries(&*a, |_| None).await, 3);
}

/// 256 entries of 65,535 bytes: a 16,777,472-byte bundle round-trips whole and
/// truncated, from a fresh handle.
pub async fn the_largest_possible_bundle_round_trips<B: ConformanceStore>(b: &B) {
    let location = b.fresh("large").await;
    let s = b.open(&location).await;
    let entries: Vec<Vec<u8>> = (0..256u32)
        .map(|i| vec![(i % 251) as u8 + 1; 65_535])
        .collect();
    let mut tree = TileTree::empty();
    let mut tiles = Vec::new();
    let leaves: Vec<_> = entries.iter().map(|e| leaf_hash(e)).collect();
    tree.append(&leaves, &mut tiles);
    let mut bundle = Vec::new();
    for e in &entries {
        append_entry(&mut bundle, e).expect("entry");
    }
    assert_eq!(bundle.len(), 16_777_472);
    tiles.push((TileId::entries(0, 256), bundle.clone()));
    let next = TreeState::new(256, tree.root());
    s.load_state().await.expect("state");
    s.commit(CommitBatch {
        prev: TreeState::empty(),
        next,
        tiles,
    })
    .await
    .expect("commit");
    b.close(s).await;
    let other = b.open(&location).await;
    assert_eq!(other.load_state().await.expect("state"), Some(next));
    assert!(
        other
            .read_tile(&TileId::entries(0, 256))
            .await
            .expect("read")
            == Some(bundle.clone())
    );
    assert_eq!(
        check_entries(&*other, |i| Some(entries[i as usize].clone())).await,
        256
    );
}

/// Two engines on one store, eight writers: indices unique and contiguous, every
/// acknowledged entry at its index, the tree whole.
pub async fn two_engines_on_one_store_sequence_without_forking<B: ConformanceStore>(b: &B) {
    if !b.shared() {
        return;
    }
    let location = b.fresh("two").await;
    let mut logs = Vec::new();
    let mut all_tasks = Vec::new();
    for _ in 0..2 {
        let (log, tasks) = Log::open(b.open(&location).await, None, config(64))
            .await
            .expect("open");
        logs.push(log);
        all_tasks.push(tasks);
    }
    let verifier = NoteSigner::from_skey(SKEY).expect("test key").verifier();
    let watch = CheckpointWatch::start(b.open(&location).await, ORIGIN, &verifier);
    let acked: Arc<Mutex<HashMap<u64, Vec<u8>>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..8usize {
        let log = logs[w % 2].clone();
        let acked = acked.clone();
        workers.push(tokio::spawn(async move {
            for i in 0..150 {
                let e = format!("frontend {} worker {w} entry {i}", w % 2).into_bytes();
                let out = log.add(Bytes::from(e.clone())).await.expect("add");
                let prev = acked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(out.index, e);
                assert!(prev.is_none(), "index {} handed out twice", out.index);
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    for log in &logs {
        log.shutdown();
    }
    for t in all_tasks {
        t.join().await;
    }
    let acked = acked.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let n = acked.len() as u64;
    assert_eq!(n, 8 * 150);
    assert!(
        (0..n).all(|i| acked.contains_key(&i)),
        "indices not contiguous"
    );
    // Every checkpoint either frontend published on the way, with its partials.
    let observed = watch.stop().await.expect("checkpoint watch");
    assert!(observed.len() > 1, "{} checkpoints seen", observed.len());
    let storage = b.open(&location).await;
    assert_eq!(
        check_entries_observed(&*storage, &observed, |i| acked.get(&i).cloned()).await,
        n
    );
}

fn fake_checkpoint(size: u64, tag: &str) -> Vec<u8> {
    format!("{ORIGIN}\n{size}\nroot-{tag}\n\n— sig {tag}\n").into_bytes()
}

/// Checkpoints published in any order, by several frontends at once: the largest wins
/// and a smaller one never replaces it.
pub async fn the_checkpoint_never_goes_backwards<B: ConformanceStore>(b: &B) {
    let location = b.fresh("checkpoint").await;
    let s = b.open(&location).await;
    assert_eq!(s.read_checkpoint().await.expect("read"), None);
    s.publish_checkpoint(&fake_checkpoint(10, "ten"))
        .await
        .expect("publish");
    s.publish_checkpoint(&fake_checkpoint(5, "five"))
        .await
        .expect("publish");
    assert_eq!(
        s.read_checkpoint().await.expect("read"),
        Some(fake_checkpoint(10, "ten"))
    );
    s.publish_checkpoint(&fake_checkpoint(11, "eleven"))
        .await
        .expect("publish");
    assert_eq!(
        s.read_checkpoint().await.expect("read"),
        Some(fake_checkpoint(11, "eleven"))
    );
    if !b.shared() {
        return;
    }
    let other = b.open(&location).await;
    let mut tasks = Vec::new();
    for size in (12..60u64).rev() {
        let st = if size % 2 == 0 {
            s.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            st.publish_checkpoint(&fake_checkpoint(size, &size.to_string()))
                .await
                .expect("publish")
        }));
    }
    for t in tasks {
        t.await.expect("publisher");
    }
    assert_eq!(
        other.read_checkpoint().await.expect("read"),
        Some(fake_checkpoint(59, "59"))
    );
}

/// `issuer/<lowercase hex SHA-256 of bytes>`, as CT names an issuer certificate.
fn issuer_key(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let mut key = String::from("issuer/");
    for b in sha2::Sha256::digest(bytes) {
        key.push_str(&format!("{b:02x}"));
    }
    key
}

/// Blobs beside the tree (CT's issuer certificates): absent until put; put if absent
/// with a byte compare (identical bytes again are fine, other bytes are refused and
/// change nothing); 1 MiB round-trips; keys of the tree or outside the root are
/// refused; everything survives a reopen; and frontends racing to store one blob all
/// succeed, or, with different bytes, exactly one does.
pub async fn blobs_are_write_once_and_read_back_after_reopening<B: ConformanceStore>(b: &B) {
    const CT: &str = "application/pkix-cert";
    let location = b.fresh("blobs").await;
    let s = b.open(&location).await;
    let one = b"issuer one".to_vec();
    let key = issuer_key(&one);
    assert_eq!(s.read_blob(&key).await.expect("read"), None, "absent");
    s.put_blob(&key, &one, CT).await.expect("put");
    assert_eq!(s.read_blob(&key).await.expect("read"), Some(one.clone()));
    s.put_blob(&key, &one, CT)
        .await
        .expect("identical bytes again");
    match s.put_blob(&key, b"issuer two", CT).await {
        Err(StorageError::Corrupt(_)) => {}
        r => panic!("other bytes at {key}: expected Corrupt, got {r:?}"),
    }
    assert_eq!(
        s.read_blob(&key).await.expect("read"),
        Some(one.clone()),
        "the first bytes stand"
    );
    let big: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let big_key = issuer_key(&big);
    s.put_blob(&big_key, &big, CT).await.expect("put 1 MiB");
    assert!(
        s.read_blob(&big_key).await.expect("read") == Some(big.clone()),
        "1 MiB blob differs"
    );
    for bad in [
        "checkpoint",
        "tile/0/000",
        "../x",
        "a//b",
        ".tlogd/state",
        "",
    ] {
        match s.put_blob(bad, b"x", CT).await {
            Err(StorageError::Backend(m)) => assert!(m.contains("invalid blob key"), "{m}"),
            r => panic!("put_blob({bad:?}): expected an invalid key, got {r:?}"),
        }
        assert!(
            matches!(s.read_blob(bad).await, Err(StorageError::Backend(_))),
            "read_blob({bad:?})"
        );
    }
    // None of it touched the tree.
    assert_eq!(s.load_state().await.expect("state"), None);
    assert_eq!(s.read_checkpoint().await.expect("checkpoint"), None);
    b.close(s).await;
    let s = b.open(&location).await;
    assert_eq!(s.read_blob(&key).await.expect("read"), Some(one.clone()));
    assert!(
        s.read_blob(&big_key).await.expect("read") == Some(big.clone()),
        "1 MiB blob differs after reopening"
    );
    assert!(matches!(
        s.put_blob(&key, b"issuer two", CT).await,
        Err(StorageError::Corrupt(_))
    ));
    s.put_blob(&key, &one, CT).await.expect("identical bytes");
    if !b.shared() {
        return;
    }
    let other = b.open(&location).await;
    for round in 0..4 {
        let same = format!("raced issuer {round} ").repeat(1000).into_bytes();
        let key = issuer_key(&same);
        let (x, y) = tokio::join!(s.put_blob(&key, &same, CT), other.put_blob(&key, &same, CT));
        x.expect("racing put, first handle");
        y.expect("racing put, second handle");
        for h in [&s, &other] {
            assert!(h.read_blob(&key).await.expect("read") == Some(same.clone()));
        }
        // Different bytes at one key: exactly one put wins, and its bytes stand.
        let key = format!("contested/{round}");
        let (a, b_) = (b"first".to_vec(), b"second".to_vec());
        let (x, y) = tokio::join!(s.put_blob(&key, &a, CT), other.put_blob(&key, &b_, CT));
        let winner = match (x, y) {
            (Ok(()), Err(StorageError::Corrupt(_))) => a,
            (Err(StorageError::Corrupt(_)), Ok(())) => b_,
            r => panic!("contested put: expected one Ok and one Corrupt, got {r:?}"),
        };
        for h in [&s, &other] {
            assert_eq!(h.read_blob(&key).await.expect("read"), Some(winner.clone()));
        }
    }
}

/// Freezing (docs/seams.md, "Freezing"): one frontend freezes the log after its queued
/// entries commit; from then on every frontend refuses adds (a frontend that has not
/// heard of it learns at its next commit, whose swap loses), a commit built on the
/// unfrozen state conflicts, the final checkpoint names the frozen size, a second
/// freeze is a no-op, and a reopened log is still frozen and checks whole.
pub async fn a_frozen_log_takes_no_more_entries_on_any_frontend<B: ConformanceStore>(b: &B) {
    let location = b.fresh("frozen").await;
    let (a, a_tasks) = Log::open(b.open(&location).await, None, config(64))
        .await
        .expect("open");
    add_in_order(
        &a,
        (0..10u8).map(|i| Bytes::from(vec![b'a', i])).collect(),
        0,
    )
    .await;
    let other = match b.shared() {
        true => {
            let (o, tasks) = Log::open(b.open(&location).await, None, config(64))
                .await
                .expect("open a second frontend");
            let out = o
                .add(Bytes::from_static(b"from the other"))
                .await
                .expect("add");
            assert_eq!(out.index, 10);
            Some((o, tasks))
        }
        false => None,
    };
    let size = if other.is_some() { 11 } else { 10 };
    // An add queued before the freeze commits first.
    let queued = {
        let a = a.clone();
        tokio::spawn(async move { a.add(Bytes::from_static(b"last one")).await })
    };
    tokio::task::yield_now().await;
    let frozen = a.freeze().await.expect("freeze");
    let last = queued.await.expect("add task");
    let size = match last {
        Ok(out) => {
            assert_eq!(out.index, size, "the queued add");
            size + 1
        }
        // Asked after the freeze (the task ran late): refused, not logged.
        Err(e) => {
            assert_eq!(e, crate::engine::AddError::Frozen);
            size
        }
    };
    assert!(frozen.frozen);
    assert_eq!(frozen.size, size);
    assert!(a.is_frozen());
    assert_eq!(
        a.add(Bytes::from_static(b"too late")).await,
        Err(crate::engine::AddError::Frozen)
    );
    assert_eq!(
        a.freeze().await.expect("freeze again"),
        frozen,
        "idempotent"
    );
    wait_published(&a, size).await;
    let s = a.storage().clone();
    assert_eq!(s.load_state().await.expect("state"), Some(frozen));
    // A commit built on the tree before the freeze loses its swap.
    let mut stale_next = frozen;
    stale_next.size += 1;
    stale_next.frozen = false;
    let stale = s
        .commit(CommitBatch {
            prev: TreeState::new(frozen.size, frozen.root),
            next: stale_next,
            tiles: Vec::new(),
        })
        .await;
    assert!(
        matches!(stale, Err(StorageError::Conflict { .. })),
        "a commit on the unfrozen state: {stale:?}"
    );
    if let Some((o, tasks)) = other {
        assert_eq!(
            o.add(Bytes::from_static(b"the other, too late")).await,
            Err(crate::engine::AddError::Frozen)
        );
        assert!(o.is_frozen());
        o.shutdown();
        tasks.join().await;
    }
    drop(s);
    a.shutdown();
    a_tasks.join().await;
    let storage = a.storage().clone();
    drop(a);
    b.close(storage).await;
    let (reopened, tasks) = Log::open(b.open(&location).await, None, config(64))
        .await
        .expect("reopen");
    assert!(reopened.is_frozen());
    assert_eq!(
        reopened.add(Bytes::from_static(b"after a restart")).await,
        Err(crate::engine::AddError::Frozen)
    );
    reopened.shutdown();
    tasks.join().await;
    let s = reopened.storage().clone();
    assert_eq!(s.load_state().await.expect("state"), Some(frozen));
    assert_eq!(check_entries(&*s, |_| None).await, size);
}

/// The suite as `#[tokio::test]`s, for a type implementing [`ConformanceStore`] and an
/// expression making one: `tlogd_core::conformance_tests!(MyStore, MyStore::new());`.
#[macro_export]
macro_rules! conformance_tests {
    ($store:ty, $make:expr) => {
        $crate::conformance_tests!(@ $store, $make, current_thread:
            every_intermediate_state_of_the_small_log_matches,
            seventy_thousand_entries_in_batches_of_4096_match_the_go_reference,
            seventy_thousand_entries_in_irregular_batches_match_the_go_reference,
            the_go_reference_logs_migrate_in_byte_for_byte,
            the_largest_possible_bundle_round_trips);
        $crate::conformance_tests!(@ $store, $make, multi_thread:
            a_commit_on_a_stale_state_conflicts_and_leaves_nothing_visible,
            two_engines_on_one_store_sequence_without_forking,
            the_checkpoint_never_goes_backwards,
            blobs_are_write_once_and_read_back_after_reopening,
            a_frozen_log_takes_no_more_entries_on_any_frontend,
            a_log_of_data_tiles_commits_reopens_and_reads_back);
    };
    (@ $store:ty, $make:expr, current_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "current_thread")]
        async fn $name() {
            let store: $store = $make;
            $crate::conformance::$name(&store).await
        }
    )*};
    (@ $store:ty, $make:expr, multi_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let store: $store = $make;
            $crate::conformance::$name(&store).await
        }
    )*};
}

/// A test personality whose bundles are static-ct-api data tiles (`tile/data/<N>`):
/// each entry an X.509 `TileLeaf` (RFC 6962 §3.4 `TimestampedEntry`, its certificate
/// the submitted bytes, the `leaf_index` extension; one issuer fingerprint), hashed as
/// `SHA-256(0x00 || MerkleTreeLeaf)`. What the CT personality writes, without X.509:
/// every backend must store and serve data tiles as it does entry bundles.
#[derive(Clone, Copy, Debug, Default)]
pub struct DataTiles;

impl DataTiles {
    /// The fingerprint every test entry names as its issuer.
    pub const ISSUER: [u8; 32] = [0x11; 32];

    fn leaf_hash(timestamped_entry: &[u8]) -> Hash {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        // The leaf prefix, then MerkleTreeLeaf: version v1, leaf type timestamped_entry.
        h.update([0u8, 0, 0]);
        h.update(timestamped_entry);
        h.finalize().into()
    }
}

impl Personality for DataTiles {
    fn name(&self) -> &'static str {
        "data-tiles-test"
    }

    fn max_entry_size(&self) -> usize {
        1 << 20
    }

    fn accept(&self, entry: &[u8]) -> Result<Hash, EntryError> {
        match entry.len() {
            0 => Err(EntryError::Empty),
            n if n > self.max_entry_size() => Err(EntryError::TooLarge {
                size: n,
                max: self.max_entry_size(),
            }),
            // The leaf hash covers the index and timestamp: `encode` computes it.
            _ => Ok([0; 32]),
        }
    }

    fn dedup_key(&self, entry: &[u8]) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        Sha256::digest(entry).into()
    }

    fn bundle_kind(&self) -> TileKind {
        TileKind::Data
    }

    fn encode(
        &self,
        entry: &[u8],
        _accepted: &Hash,
        index: u64,
        timestamp: u64,
        bundle: &mut Vec<u8>,
    ) -> Result<Hash, EntryError> {
        let start = bundle.len();
        bundle.extend_from_slice(&timestamp.to_be_bytes());
        bundle.extend_from_slice(&[0, 0]); // x509_entry
        bundle.extend_from_slice(&(entry.len() as u32).to_be_bytes()[1..]);
        bundle.extend_from_slice(entry);
        bundle.extend_from_slice(&[0, 8, 0, 0, 5]); // CtExtensions: leaf_index
        bundle.extend_from_slice(&index.to_be_bytes()[3..]);
        let leaf = Self::leaf_hash(&bundle[start..]);
        bundle.extend_from_slice(&[0, 32]);
        bundle.extend_from_slice(&Self::ISSUER);
        Ok(leaf)
    }

    fn stores_timestamps(&self) -> bool {
        true
    }

    fn split_bundle<'a>(&self, bytes: &'a [u8]) -> Result<Vec<StoredEntry<'a>>, EntryError> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let end = crate::tile::tile_leaf_end(bytes, pos)
                .ok_or_else(|| EntryError::Malformed(format!("data tile entry at byte {pos}")))?;
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&bytes[pos..pos + 8]);
            out.push(StoredEntry {
                bytes: &bytes[pos..end],
                timestamp: u64::from_be_bytes(ts),
            });
            pos = end;
        }
        Ok(out)
    }

    fn stored_leaf(&self, entry: &StoredEntry<'_>) -> Hash {
        // The TimestampedEntry is all but the fingerprints (2 + 32 bytes).
        Self::leaf_hash(&entry.bytes[..entry.bytes.len().saturating_sub(34)])
    }

    fn stored_dedup_key(&self, entry: &StoredEntry<'_>) -> [u8; 32] {
        let b = entry.bytes;
        let len = b.get(10..13).map_or(0, |l| {
            ((l[0] as usize) << 16) | ((l[1] as usize) << 8) | l[2] as usize
        });
        self.dedup_key(b.get(13..13 + len).unwrap_or_default())
    }
}

/// A log of static-ct-api data tiles ([`DataTiles`]): 300 entries in batches of 64,
/// reopened (the edge reloads from a partial data tile), one more entry; the stored
/// data tiles, full and partial, hash leaf by leaf to the level-0 tiles and to the
/// stored root; entries read back with their timestamps; no `tile/entries/` is written.
pub async fn a_log_of_data_tiles_commits_reopens_and_reads_back<B: ConformanceStore>(b: &B) {
    let location = b.fresh("data").await;
    let mut cfg = config(64);
    cfg.personality = Arc::new(DataTiles);
    let entry = |i: u64| Bytes::from(format!("certificate {i} ").repeat(1 + (i % 3) as usize));
    let (log, tasks) = Log::open(b.open(&location).await, None, cfg.clone())
        .await
        .expect("open");
    add_in_order(&log, (0..300).map(entry).collect(), 0).await;
    log.shutdown();
    tasks.join().await;
    let storage = log.storage().clone();
    drop(log);
    b.close(storage).await;
    let (log, tasks) = Log::open(b.open(&location).await, None, cfg.clone())
        .await
        .expect("reopen");
    assert_eq!(log.committed_size(), 300);
    assert_eq!(log.add(entry(300)).await.expect("add").index, 300);
    let read = log.read_entry(257).await.expect("read").expect("entry 257");
    assert!(read.timestamp > 0);
    let stored = StoredEntry {
        bytes: &read.bytes,
        timestamp: read.timestamp,
    };
    assert_eq!(
        DataTiles.stored_dedup_key(&stored),
        DataTiles.dedup_key(&entry(257))
    );
    log.shutdown();
    tasks.join().await;
    let s = log.storage().clone();
    drop(log);
    let state = s.load_state().await.expect("state").expect("a state");
    assert_eq!(state.size, 301);
    let mut leaves = Vec::new();
    for (n, width) in [(0u64, 256u16), (1, 45)] {
        let data = s
            .read_tile(&TileId::data(n, width))
            .await
            .expect("read")
            .unwrap_or_else(|| panic!("data tile {n} of width {width}"));
        let entries = DataTiles.split_bundle(&data).expect("a data tile");
        assert_eq!(entries.len(), width as usize);
        let level0 = s
            .read_tile(&TileId::hash(0, n, width))
            .await
            .expect("read")
            .expect("level-0 tile");
        for (i, e) in entries.iter().enumerate() {
            let leaf = DataTiles.stored_leaf(e);
            assert_eq!(
                leaf[..],
                level0[32 * i..32 * (i + 1)],
                "leaf {}",
                256 * n + i as u64
            );
            leaves.push(leaf);
        }
    }
    assert_eq!(
        s.read_tile(&TileId::entries(0, 256)).await.expect("read"),
        None,
        "a data-tile log writes no entry bundles"
    );
    let mut tree = TileTree::empty();
    tree.append(&leaves, &mut Vec::new());
    assert_eq!(tree.root(), state.root);
    b.close(s).await;
}
