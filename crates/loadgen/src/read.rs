//! The readers: the checkpoint follower and the integration clock, the verifier of
//! written entries, full readers that rebuild every hash tile and random readers that
//! check inclusion proofs.

use super::*;

/// Follow checkpoints: fetch one every --checkpoint-poll, verify its signature and its
/// consistency with the previous one, and hand each verified checkpoint that grew the
/// tree, with the instant it was verified, to the integration clock and the verifier.
/// Runs until the run stops.
pub(crate) async fn follow_checkpoints(
    ctx: Arc<Ctx>,
    start: Checkpoint,
    clock: mpsc::UnboundedSender<(u64, Instant)>,
    latest: watch::Sender<Arc<Checkpoint>>,
) {
    let s = &ctx.stats;
    let mut reader = match ctx.reader() {
        // Consistency proofs between successive checkpoints need right-edge tiles only.
        Ok(r) => r.with_tile_cache(VERIFY_TILE_CACHE),
        Err(e) => return s.fail(e.to_string()),
    };
    let mut prev = start;
    let poll = ctx.args.checkpoint_poll.max(Duration::from_millis(1));
    while !ctx.stop_all.load(Ordering::Relaxed) {
        tokio::time::sleep(poll).await;
        let cp = match reader.checkpoint().await {
            Ok(cp) => cp,
            Err(e) => {
                s.fail(format!("{e:#}"));
                continue;
            }
        };
        if let Err(e) = reader.verify_consistency(&prev, &cp).await {
            s.fail(format!("{e:#}"));
            continue;
        }
        if cp.size == prev.size {
            continue;
        }
        let verified_at = Instant::now();
        s.tree_size.store(cp.size, Ordering::Relaxed);
        let _ = clock.send((cp.size, verified_at));
        latest.send_replace(Arc::new(cp.clone()));
        prev = cp;
    }
}

/// The time-to-integrate clock: an entry's clock stops at the first checkpoint fetched
/// and verified after its add was sent whose tree covers its index, whenever the
/// verification of the entry itself happens. Sampled entries are passed on to the
/// verifier. Returns, once the writers are done, how many entries were never covered
/// (the follower stopped first).
pub(crate) async fn integration_clock(
    ctx: Arc<Ctx>,
    mut checkpoints: Option<mpsc::UnboundedReceiver<(u64, Instant)>>,
    to_verify: mpsc::UnboundedSender<Vec<ToVerify>>,
) -> usize {
    let timing_only = checkpoints.is_none();
    let s = &ctx.stats;
    // Checkpoints are kept while an add sent before them may still be answered.
    let mut clock = IntegrationClock::new(ctx.timeout + Duration::from_secs(5));
    let mut batch = Vec::new();
    let (mut rtts, mut integrated, mut done) = (Vec::new(), Vec::new(), Vec::new());
    let mut every = tokio::time::interval(INBOX_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                // Read before taking: every add put before the writers were done is in
                // this batch or an earlier one.
                let writers_done = ctx.inbox.writers_done.load(Ordering::Acquire);
                ctx.inbox.take(&mut batch);
                rtts.clear();
                integrated.clear();
                let mut sampled = Vec::new();
                for w in batch.drain(..) {
                    rtts.push(w.rtt_us);
                    if timing_only {
                        continue;
                    }
                    if let Some(leaf) = w.leaf {
                        sampled.push(ToVerify { index: w.index, sent: w.sent, leaf });
                    }
                    if !w.duplicate
                        && let Some(d) = clock.written(w.index, w.sent)
                    {
                        integrated.push(micros(d));
                    }
                }
                s.adds_done(&rtts);
                s.integrated(&integrated);
                if !sampled.is_empty() {
                    s.backlog_add(sampled.len() as u64);
                    let _ = to_verify.send(sampled);
                }
                if writers_done && clock.waiting() == 0 {
                    return 0;
                }
            }
            cp = async {
                match checkpoints.as_mut() {
                    Some(c) => c.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                let Some((size, at)) = cp else {
                    // The follower stopped (end of the run): what is left is uncovered.
                    return clock.waiting();
                };
                done.clear();
                clock.verified(size, at, &mut done);
                let us: Vec<u64> = done.iter().map(|d| micros(*d)).collect();
                s.integrated(&us);
            }
        }
    }
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Tiles of entries the verifier checks at once. Each check waits for a bundle, a tile
/// and maybe a proof from a log that is busy with the writers' adds; one at a time, a
/// log appending 80k entries/s outran it (the backlog grew by ~20k entries/s, held in
/// memory, and most of the checking happened after the run it belonged to).
const VERIFY_IN_FLIGHT: usize = 8;

/// Full tiles each of the verifier's readers keeps (8 KiB each).
const VERIFY_TILE_CACHE: usize = 64;

/// Check each sampled entry's bytes in its bundle and its hash in its level-0 tile,
/// the tile proven included in the newest verified checkpoint: one bundle, one tile
/// and one proof per tile of entries, however many entries, [`VERIFY_IN_FLIGHT`] tiles
/// at once (each with a reader of its own). Ends when the writers are done and
/// everything was checked, or the run stops.
pub(crate) async fn verify_entries(
    ctx: Arc<Ctx>,
    mut rx: mpsc::UnboundedReceiver<Vec<ToVerify>>,
    mut latest: watch::Receiver<Arc<Checkpoint>>,
) {
    let s = &ctx.stats;
    let mut idle = Vec::with_capacity(VERIFY_IN_FLIGHT);
    for _ in 0..VERIFY_IN_FLIGHT {
        match ctx.reader() {
            // Tiles are checked near the log's right edge, in order: the upper tiles
            // on their proofs' paths are few (a reader's default cache, 32 MiB, would
            // fill with upper tiles never needed again over a long run).
            Ok(r) => idle.push(r.with_tile_cache(VERIFY_TILE_CACHE)),
            Err(e) => return s.fail(e.to_string()),
        }
    }
    let mut checking = tokio::task::JoinSet::new();
    // (index, arrival) -> the bytes and when the add was sent; an index may come
    // more than once (duplicates).
    let mut pending: BTreeMap<(u64, u64), (Bytes, Instant)> = BTreeMap::new();
    let mut arrivals = 0u64;
    let mut add = |pending: &mut BTreeMap<_, _>, batch: Vec<ToVerify>| {
        for v in batch {
            arrivals += 1;
            pending.insert((v.index, arrivals), (v.leaf, v.sent));
        }
    };
    let mut input_done = false;
    loop {
        loop {
            match rx.try_recv() {
                Ok(batch) => add(&mut pending, batch),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    input_done = true;
                    break;
                }
            }
        }
        if input_done && pending.is_empty() && checking.is_empty() {
            return;
        }
        if ctx.stop_all.load(Ordering::Relaxed) {
            return;
        }
        let cp = latest.borrow_and_update().clone();
        let ready = match pending.first_key_value() {
            Some(((first, _), _)) if *first < cp.size => Some(first / TILE_WIDTH),
            _ => None,
        };
        if let Some(t) = ready
            && let Some(mut reader) = idle.pop()
        {
            let end = ((t + 1) * TILE_WIDTH).min(cp.size);
            let rest = pending.split_off(&(end, 0));
            let group = std::mem::replace(&mut pending, rest);
            let ctx = ctx.clone();
            checking.spawn(async move {
                verify_tile(&mut reader, &ctx.stats, &cp, t, group).await;
                reader
            });
            continue;
        }
        // Nothing the newest checkpoint covers, or every reader busy: wait for more
        // entries, a newer checkpoint or a reader.
        tokio::select! {
            v = rx.recv(), if !input_done => match v {
                Some(batch) => add(&mut pending, batch),
                None => input_done = true,
            },
            changed = latest.changed(), if ready.is_none() => if changed.is_err() {
                // The follower is gone: the run is stopping.
                tokio::time::sleep(Duration::from_millis(50)).await;
            },
            done = checking.join_next(), if !checking.is_empty() => match done {
                Some(Ok(reader)) => idle.push(reader),
                Some(Err(e)) => return s.fail(format!("verifier: {e}")),
                None => {}
            },
        }
    }
}

/// One tile's worth of sampled entries (all in level-0 tile `t`, covered by `cp`).
pub(crate) async fn verify_tile(
    reader: &mut LogReader<HttpFetcher>,
    s: &Stats,
    cp: &Checkpoint,
    t: u64,
    group: BTreeMap<(u64, u64), (Bytes, Instant)>,
) {
    let n = group.len() as u64;
    let bundle_id = reader.bundle_id(t, width_at(t, cp.size));
    let started = Instant::now();
    let bundle = match reader.bundle(t, cp.size).await {
        Ok(b) => b,
        Err(e) => {
            s.fail(format!("{e:#}"));
            return s.backlog_done(n);
        }
    };
    s.read_done(micros(started.elapsed()), true);
    let hashes = match reader.proven_leaf_hashes(cp, t).await {
        Ok(h) => h,
        Err(e) => {
            s.fail(format!("{e:#}"));
            return s.backlog_done(n);
        }
    };
    let mut verified = Vec::with_capacity(n as usize);
    for ((index, _), (leaf, sent)) in group {
        let j = (index % TILE_WIDTH) as usize;
        if bundle.get(j).map(Vec::as_slice) != Some(&leaf[..]) {
            s.fail(format!(
                "{}: entry {index} is not the bytes that were written",
                bundle_id.path()
            ));
        } else if hashes.get(j) != Some(&reader.leaf_hash(&leaf)) {
            s.fail(format!(
                "{}: hash {j} is not the leaf hash of entry {index}",
                TileId::hash(0, t, bundle_id.width).path()
            ));
        } else {
            verified.push(micros(sent.elapsed()));
        }
    }
    s.verified_batch(&verified);
    s.backlog_done(n);
}

/// Read every bundle in order, recompute the hash tiles and root, compare with the log.
pub(crate) async fn full_reader(ctx: Arc<Ctx>, pacer: Option<Arc<Pacer>>) {
    let s = &ctx.stats;
    let mut reader = match ctx.reader() {
        Ok(r) => r,
        Err(e) => return s.fail(e.to_string()),
    };
    let mut tree = TreeRebuilder::new();
    while !ctx.stop_all.load(Ordering::Relaxed) {
        let cp = match reader.checkpoint().await {
            Ok(c) => c,
            Err(e) => return s.fail(format!("full reader: {e:#}")),
        };
        // Full bundles extend the permanent tree; the tail is checked on a copy.
        while tree.size() + TILE_WIDTH <= cp.size && !ctx.stop_all.load(Ordering::Relaxed) {
            if let Some(p) = &pacer {
                p.wait().await;
            }
            let n = tree.size() / TILE_WIDTH;
            if let Err(e) = read_and_check(&mut reader, s, &mut tree, n, cp.size).await {
                return s.fail(format!("full reader: {e:#}"));
            }
        }
        if ctx.stop_all.load(Ordering::Relaxed) {
            // Stopped part-way through: the tree does not reach `cp` yet.
            return;
        }
        if cp.size % TILE_WIDTH != 0 {
            let mut tail = tree.clone();
            let n = tail.size() / TILE_WIDTH;
            if let Err(e) = read_and_check(&mut reader, s, &mut tail, n, cp.size).await {
                return s.fail(format!("full reader: {e:#}"));
            }
            if tail.root() != cp.root {
                return s.fail(format!(
                    "full reader: the bundles hash to another root than checkpoint {}",
                    cp.size
                ));
            }
        } else if tree.size() == cp.size && tree.root() != cp.root {
            return s.fail(format!(
                "full reader: the bundles hash to another root than checkpoint {}",
                cp.size
            ));
        }
        tokio::time::sleep(ctx.args.checkpoint_poll.max(Duration::from_millis(1))).await;
    }
}

/// One bundle through the shared check (tlog-verify): the hash tiles it determines are
/// recomputed and compared with the log's; every read is timed.
pub(crate) async fn read_and_check(
    reader: &mut LogReader<HttpFetcher>,
    s: &Stats,
    tree: &mut TreeRebuilder,
    n: u64,
    size: u64,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let entries = reader.bundle(n, size).await?;
    s.read_done(t.elapsed().as_micros() as u64, true);
    let bundle = reader.bundle_id(n, width_at(n, size));
    let tiles = if reader.personality().is_none() {
        tree.append_bundle(&bundle, &entries, true)?
    } else {
        // A CT log's data tiles: each TileLeaf hashes as its MerkleTreeLeaf.
        tree.append_bundle_by(&bundle, &entries, true, |e| reader.leaf_hash(e))?
    };
    for (id, want) in tiles {
        let t = Instant::now();
        let (got_id, got) = reader.raw(&id).await?;
        s.read_done(t.elapsed().as_micros() as u64, true);
        compare_tile(&id, &want, &got_id, &got, &bundle)?;
    }
    Ok(())
}

/// Read random entries and verify an inclusion proof for each.
pub(crate) async fn random_reader(ctx: Arc<Ctx>, pacer: Option<Arc<Pacer>>, seed: u64) {
    let s = &ctx.stats;
    let mut reader = match ctx.reader() {
        Ok(r) => r,
        Err(e) => return s.fail(e.to_string()),
    };
    let mut rng = Rng(seed);
    let mut cp = None;
    let mut reads = 0u64;
    while !ctx.stop_all.load(Ordering::Relaxed) {
        if let Some(p) = &pacer {
            p.wait().await;
        }
        if reads.is_multiple_of(64) || cp.is_none() {
            match reader.checkpoint().await {
                Ok(c) => cp = Some(c),
                Err(e) => return s.fail(format!("random reader: {e:#}")),
            }
        }
        reads += 1;
        let Some(c) = &cp else { continue };
        if c.size == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cp = None;
            continue;
        }
        let index = rng.next() % c.size;
        let t = Instant::now();
        let bundle = match reader.bundle(index / TILE_WIDTH, c.size).await {
            Ok(b) => b,
            Err(e) => return s.fail(format!("random reader: {e:#}")),
        };
        s.read_done(t.elapsed().as_micros() as u64, true);
        let Some(entry) = bundle.get((index % TILE_WIDTH) as usize) else {
            return s.fail(format!(
                "random reader: entry {index} missing from its bundle"
            ));
        };
        let hash = reader.leaf_hash(entry);
        if let Err(e) = reader.verify_inclusion(c, index, &hash).await {
            return s.fail(format!(
                "random reader: {e:#} (entry read from {})",
                reader
                    .bundle_id(
                        index / TILE_WIDTH,
                        (c.size - index / TILE_WIDTH * TILE_WIDTH).min(TILE_WIDTH) as u16
                    )
                    .path()
            ));
        }
        s.verified.fetch_add(1, Ordering::Relaxed);
    }
}
