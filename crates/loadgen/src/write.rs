//! The writers: `POST /add` (or, with `--ct`, `add-chain` and `add-pre-chain`, every
//! SCT checked), paced and counted, each acknowledged add handed to the integration
//! clock.

use super::*;

/// A writer's clients: one per write URL (its own connection, or a user of the URL's
/// shared h2c connections).
pub(crate) fn write_clients(ctx: &Ctx) -> Result<Vec<Client>, ClientError> {
    let args = &ctx.args;
    let bearer = args
        .bearer_token_write
        .as_deref()
        .or(args.bearer_token.as_deref());
    if ctx.write_pools.is_empty() {
        ctx.write_bases
            .iter()
            .map(|b| Client::new(b.clone(), bearer, ctx.timeout))
            .collect()
    } else {
        ctx.write_pools
            .iter()
            .map(|p| Client::h2c(p.clone(), bearer, ctx.timeout))
            .collect()
    }
}

/// An add that was not acknowledged: pushback (503, 429) is honoured by waiting as the
/// log asks and not counted as an error; anything else is.
pub(crate) async fn not_added(s: &Stats, what: &str, resp: Result<client::Response, ClientError>) {
    match resp {
        Ok(r)
            if r.status == StatusCode::SERVICE_UNAVAILABLE
                || r.status == StatusCode::TOO_MANY_REQUESTS =>
        {
            s.pushback.fetch_add(1, Ordering::Relaxed);
            let wait = Duration::from_secs(r.retry_after.unwrap_or(1).min(30));
            tokio::time::sleep(wait).await;
        }
        Ok(r) => {
            s.write_errors.fetch_add(1, Ordering::Relaxed);
            s.error(format!(
                "{what}: HTTP {} {}",
                r.status,
                String::from_utf8_lossy(&r.body).trim()
            ));
        }
        Err(e) => {
            s.write_errors.fetch_add(1, Ordering::Relaxed);
            s.error(format!("{what}: {e:#}"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What every writer starts with: its clients (`None` when they cannot be made, the
/// error recorded) and a generator of its own.
pub(crate) fn writer_start(ctx: &Ctx, w: usize, seed: u64) -> Option<(Vec<Client>, Rng)> {
    match write_clients(ctx) {
        Ok(clients) => Some((
            clients,
            Rng(seed ^ (w as u64).wrapping_mul(0x1234_5678_9abc_def1)),
        )),
        Err(e) => {
            ctx.stats.error(e.to_string());
            None
        }
    }
}

pub(crate) async fn writer(ctx: Arc<Ctx>, w: usize, seed: u64) {
    if ctx.ct.is_some() {
        return ct_writer(ctx, w, seed).await;
    }
    let args = &ctx.args;
    let Some((mut clients, mut rng)) = writer_start(&ctx, w, seed) else {
        return;
    };
    let pacer = ctx.write_pacer.clone();
    let mut recent: Vec<Bytes> = Vec::with_capacity(64);
    let mut i = 0u64;
    let mut turn = w;
    let s = &ctx.stats;
    loop {
        if ctx.stop_writing.load(Ordering::Relaxed) {
            return;
        }
        if let Some(p) = &pacer {
            p.wait().await;
        }
        let leaf = if !recent.is_empty() && rng.chance(args.dup_chance) {
            recent[(rng.next() % recent.len() as u64) as usize].clone()
        } else {
            // One allocation per leaf, sized up front.
            let mut s = String::with_capacity(args.leaf_min_size.max(64));
            let _ = write!(s, "tlog-loadgen seed {seed:x} writer {w} leaf {i} ");
            let pad = args.leaf_min_size.saturating_sub(s.len());
            s.extend(std::iter::repeat_n('.', pad));
            i += 1;
            let b = Bytes::from(s);
            // Kept only to be sent again: a kept leaf is one more reference to count
            // and drop per add.
            if args.dup_chance > 0.0 {
                if recent.len() < 64 {
                    recent.push(b.clone());
                } else {
                    let k = (rng.next() % 64) as usize;
                    recent[k] = b.clone();
                }
            }
            b
        };
        turn = (turn + 1) % clients.len();
        let sent = Instant::now();
        s.in_flight.fetch_add(1, Ordering::Relaxed);
        let resp = clients[turn].send(Method::POST, "add", leaf.clone()).await;
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        match resp {
            Ok(r) if r.status == StatusCode::OK => {
                let index = std::str::from_utf8(&r.body)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok());
                let Some(index) = index else {
                    s.write_errors.fetch_add(1, Ordering::Relaxed);
                    s.error(format!(
                        "POST /add: unparseable index {:?}",
                        String::from_utf8_lossy(&r.body)
                    ));
                    continue;
                };
                let rtt_us = micros(sent.elapsed());
                if r.duplicate {
                    s.writes_dup.fetch_add(1, Ordering::Relaxed);
                } else {
                    s.writes_new.fetch_add(1, Ordering::Relaxed);
                }
                let sampled = rng.chance(args.verify_fraction);
                if sampled {
                    ctx.sampled.fetch_add(1, Ordering::Relaxed);
                }
                ctx.inbox.put(Written {
                    index,
                    sent,
                    rtt_us,
                    duplicate: r.duplicate,
                    leaf: sampled.then_some(leaf),
                });
            }
            other => not_added(s, "POST /add", other).await,
        }
    }
}

/// Mint what a CT run submits (--ct): check its flags, load the root, mint the
/// intermediate and the pool of chains.
pub(crate) async fn prepare_ct(args: &Args) -> anyhow::Result<CtRun> {
    let key = args
        .log_public_key
        .as_deref()
        .context("--ct needs --log-public-key (the log's base64 DER public key)")?;
    let log = ct::LogIdentity::from_base64(key)?;
    let origin = args
        .origin
        .as_deref()
        .context("--ct needs --origin (the log's checkpoint origin)")?;
    // The note verifier is built from the same key: refuse it here, named, if it cannot be.
    tlogd_ct::Rfc6962Check::verifier(origin, &log.spki).context("--log-public-key")?;
    let mix = ct::Mix {
        precert: args.ct_precert_chance,
        scts: args.ct_scts_chance,
        old: args.ct_old_chance,
    };
    if [mix.precert, mix.scts, mix.old]
        .iter()
        .any(|c| !(0.0..=1.0).contains(c))
        || mix.precert + mix.scts + mix.old > 1.0
    {
        bail!(
            "--ct-precert-chance, --ct-scts-chance and --ct-old-chance must be within 0..=1, and add up to at most 1"
        );
    }
    let (Some(cert), Some(key)) = (&args.ct_root_cert, &args.ct_root_key) else {
        bail!(
            "--ct needs --ct-root-cert and --ct-root-key (a root the log trusts; `tlog-loadgen ct-root` makes one)"
        );
    };
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let root = Arc::new(ct::load_root(&read(cert)?, &read(key)?)?);
    let n = match (args.ct_chains, args.leaf_write_goal) {
        (0, 0) => ct::DEFAULT_POOL,
        (0, goal) => usize::try_from(goal).context("--leaf-write-goal")?,
        (n, _) => n,
    }
    .max(1);
    let started = Instant::now();
    // Each run's intermediate and names are its own: reruns never submit the same chain.
    let tag = (std::process::id() as u64) << 40
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let minter = Arc::new(ct::Minter::new(root, tag, args.ct_issuer_key)?);
    let pool = ct::mint_pool(minter, n, mix).await?;
    let mint_seconds = started.elapsed().as_secs_f64();
    if !args.quiet {
        eprintln!(
            "tlog-loadgen: minted {n} chains ({} precertificates) in {mint_seconds:.2} s",
            pool.iter().filter(|c| c.precert).count()
        );
    }
    Ok(CtRun {
        log,
        acked: (0..pool.len()).map(|_| AtomicU64::new(0)).collect(),
        pool,
        next: AtomicU64::new(0),
        precerts: AtomicU64::new(0),
        classes: Default::default(),
        mint_seconds,
        deferred: Mutex::new(Vec::new()),
        deferred_count: AtomicUsize::new(0),
    })
}

/// The SCT signatures checked once writing stopped (`--ct-sct-checks after`).
#[derive(Default)]
pub(crate) struct DeferredChecks {
    pub(crate) checked: u64,
    pub(crate) seconds: f64,
    /// How many did not verify, and why the first did not.
    pub(crate) failed: u64,
    pub(crate) first_failure: Option<String>,
}

/// Check the SCT signatures deferred by `--ct-sct-checks after`, on every core, once
/// every entry written was integrated and verified; each that does not verify fails
/// its add, as it would have at once.
pub(crate) async fn check_deferred_scts(ctx: &Arc<Ctx>) -> DeferredChecks {
    let Some(ct) = &ctx.ct else {
        return DeferredChecks::default();
    };
    let started = Instant::now();
    let deferred = std::mem::take(&mut *lock(&ct.deferred));
    let n = deferred.len();
    if n == 0 {
        return DeferredChecks::default();
    }
    let deferred = Arc::new(deferred);
    let parts = std::thread::available_parallelism().map_or(2, |p| p.get());
    let per_part = n.div_ceil(parts);
    let mut jobs = Vec::new();
    for part in 0..parts {
        let (ctx, deferred) = (ctx.clone(), deferred.clone());
        // Each part answers how many of its SCTs did not verify, and why the first did not.
        jobs.push(tokio::task::spawn_blocking(move || {
            let (mut failed, mut first) = (0u64, None);
            let Some(ct) = &ctx.ct else {
                return (failed, first);
            };
            let end = ((part + 1) * per_part).min(deferred.len());
            for (c, sct) in deferred.get(part * per_part..end).unwrap_or_default() {
                let chain = &ct.pool[*c];
                if let Err(e) = ct.log.check_signature(chain, sct) {
                    ctx.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                    failed += 1;
                    first.get_or_insert_with(|| format!("{} (chain {c}): SCT: {e}", chain.path()));
                }
            }
            (failed, first)
        }));
    }
    let (mut failed, mut first_failure) = (0, None);
    for j in jobs {
        match j.await {
            Ok((n, first)) => {
                failed += n;
                first_failure = first_failure.or(first);
            }
            Err(e) => ctx.stats.fail(format!("checking SCTs: {e}")),
        }
    }
    DeferredChecks {
        checked: n as u64,
        seconds: started.elapsed().as_secs_f64(),
        failed,
        first_failure,
    }
}

/// A CT writer (--ct): submits the minted chains, each SCT checked before its add
/// counts; a resubmission (--dup-chance) sends a chain this writer had acknowledged.
pub(crate) async fn ct_writer(ctx: Arc<Ctx>, w: usize, seed: u64) {
    let Some(ct) = &ctx.ct else { return };
    let args = &ctx.args;
    let Some((mut clients, mut rng)) = writer_start(&ctx, w, seed) else {
        return;
    };
    let pacer = ctx.write_pacer.clone();
    let mut recent: Vec<usize> = Vec::with_capacity(64);
    let mut turn = w;
    let s = &ctx.stats;
    let pool = ct.pool.len() as u64;
    // SCTs whose signature this writer defers (`--ct-sct-checks after`), handed over
    // when it stops.
    let mut deferred = Vec::new();
    loop {
        if ctx.stop_writing.load(Ordering::Relaxed) {
            lock(&ct.deferred).append(&mut deferred);
            return;
        }
        if let Some(p) = &pacer {
            p.wait().await;
        }
        let c = if !recent.is_empty() && rng.chance(args.dup_chance) {
            recent[(rng.next() % recent.len() as u64) as usize]
        } else {
            (ct.next.fetch_add(1, Ordering::Relaxed) % pool) as usize
        };
        let chain = &ct.pool[c];
        let class = &ct.classes[chain.class.index()];
        turn = (turn + 1) % clients.len();
        let sent = Instant::now();
        s.in_flight.fetch_add(1, Ordering::Relaxed);
        class.sent.fetch_add(1, Ordering::Relaxed);
        let resp = clients[turn]
            .send(Method::POST, chain.path(), chain.body.clone())
            .await;
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        let r = match resp {
            Ok(r) if r.status == StatusCode::OK => r,
            other => {
                if matches!(&other, Ok(r) if r.status == StatusCode::TOO_MANY_REQUESTS || r.status == StatusCode::SERVICE_UNAVAILABLE)
                {
                    class.pushback.fetch_add(1, Ordering::Relaxed);
                }
                not_added(s, chain.path(), other).await;
                continue;
            }
        };
        class.acked.fetch_add(1, Ordering::Relaxed);
        if s.counts_latency() {
            let _ = lock(&class.latency).record(micros(sent.elapsed()).max(1));
        }
        let defer = args.ct_sct_checks == ct::SctChecks::After
            && ct.deferred_count.fetch_add(1, Ordering::Relaxed) < ct::MAX_DEFERRED_SCTS;
        let checked = ct.log.read_sct(&r.body).and_then(|sct| {
            if defer {
                let fields = sct.fields.clone();
                deferred.push((c, sct));
                Ok(fields)
            } else {
                ct.log.check_signature(chain, &sct).map(|()| sct.fields)
            }
        });
        let sct = match checked {
            Ok(sct) => sct,
            Err(e) => {
                s.write_errors.fetch_add(1, Ordering::Relaxed);
                s.fail(format!("{} (chain {c}): SCT: {e}", chain.path()));
                continue;
            }
        };
        let rtt_us = micros(sent.elapsed());
        let index = sct.index;
        // The log's marker, or the index this chain was already given.
        let duplicate = ct.acked[c].swap(index + 1, Ordering::Relaxed) == index + 1 || r.duplicate;
        if duplicate {
            s.writes_dup.fetch_add(1, Ordering::Relaxed);
        } else {
            s.writes_new.fetch_add(1, Ordering::Relaxed);
            if args.dup_chance > 0.0 {
                if recent.len() < 64 {
                    recent.push(c);
                } else {
                    recent[(rng.next() % 64) as usize] = c;
                }
            }
        }
        if chain.precert {
            ct.precerts.fetch_add(1, Ordering::Relaxed);
        }
        let sampled = rng.chance(args.verify_fraction);
        if sampled {
            ctx.sampled.fetch_add(1, Ordering::Relaxed);
        }
        ctx.inbox.put(Written {
            index,
            sent,
            rtt_us,
            duplicate,
            leaf: sampled.then(|| Bytes::from(ct::expected_leaf(chain, &sct))),
        });
    }
}
