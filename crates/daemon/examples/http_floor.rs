//! The floor under tlogd's CPU per append: the same HTTP server, router shape, runtimes
//! and allocator as `tlogd serve`, with less and less of the log behind them.
//!
//! * `--mode null`: `POST /add` is answered at once with the next index (axum route on
//!   tlogd's `server::serve`). What hyper, axum, tokio and the kernel's loopback TCP
//!   cost per request; nothing below it can be saved without leaving HTTP/1.1.
//! * `--mode deferred`: each add waits for a batch that a thread of its own completes
//!   `--commit-delay` after taking it (the engine's queue and completion, nothing else):
//!   what answering after the commit instead of at once costs.
//! * `--mode memory`: tlogd's public router and engine (queue, group commit, Merkle
//!   integration, checkpoints) over the in-memory store, no dedup; `--commit-delay`
//!   makes each commit block a thread that long, as a `syncfs` would, so
//!   batches grow as on a disk. Readers and the verifying loadgen work as on a real log.
//!
//! Prints the log's verifier key on the first line of stdout, then serves until killed.
//! `benches/http-floor.sh` runs both beside `tlogd serve` under one loadgen.
//!
//!     cargo run --release -p tlogd --example http_floor -- --listen 127.0.0.1:PORT --mode memory

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::routing::post;
use tlogd::serve::server::{ServeOptions, serve};
use tlogd_core::engine::LogConfig;
use tlogd_core::engine::memory::MemoryStorage;
use tlogd_core::note::{NoteSigner, generate_key};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(clap::Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long)]
    listen: SocketAddr,
    /// What answers `POST /add` (see the module docs).
    #[arg(long, value_enum, default_value_t = Mode::Memory)]
    mode: Mode,
    /// With `--mode deferred` or `memory`: how long each batch's commit blocks a
    /// thread, in µs.
    #[arg(long, default_value_t = 1000)]
    commit_delay_us: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Mode {
    /// Answered at once.
    Null,
    /// Answered when a thread completes the batch.
    Deferred,
    /// tlogd's router and engine over the in-memory store.
    Memory,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    // The same recorder as the daemon, so metric calls cost what they cost there.
    let _metrics = tlogd::observe::install_metrics()?;
    let origin = "floor.example/log";
    let (skey, vkey) = generate_key(origin)?;
    let app = match args.mode {
        Mode::Null => {
            let next = Arc::new(AtomicU64::new(0));
            axum::Router::new().route(
                "/add",
                post(move |_body: bytes::Bytes| {
                    let next = next.clone();
                    async move { next.fetch_add(1, Ordering::Relaxed).to_string() }
                }),
            )
        }
        Mode::Deferred => {
            let batches = Arc::new(Deferred::default());
            std::thread::Builder::new()
                .name("tlogd-engine".into())
                .spawn({
                    let b = batches.clone();
                    let delay = Duration::from_micros(args.commit_delay_us);
                    move || b.run(delay)
                })?;
            axum::Router::new().route(
                "/add",
                post(move |body: bytes::Bytes| {
                    let batches = batches.clone();
                    async move {
                        let (slot, pos) = batches.push(body);
                        let first = slot.wait().await;
                        (first + pos).to_string()
                    }
                }),
            )
        }
        Mode::Memory => {
            let mut lc = LogConfig::new(origin, Arc::new(NoteSigner::from_skey(&skey)?));
            lc.background = Some(engine_runtime()?);
            let storage = Arc::new(MemoryStorage::new());
            storage.set_commit_delay(Duration::from_micros(args.commit_delay_us));
            let (log, _tasks) = tlogd_core::engine::Log::open(storage, None, lc)
                .await
                .context("opening the log")?;
            tlogd::serve::router::router(log)
        }
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("{vkey}");
    serve(
        listener,
        app,
        ServeOptions::default(),
        std::future::pending::<()>(),
    )
    .await;
    Ok(())
}

/// The daemon's engine runtime: one worker thread of its own.
fn engine_runtime() -> anyhow::Result<tokio::runtime::Handle> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tlogd-engine")
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    // Alive for the whole process.
    std::mem::forget(rt);
    Ok(handle)
}

/// `--mode deferred`: adds wait for a batch that a thread completes after each
/// `commit_delay`, as the engine's adds do, but nothing is hashed, integrated or stored.
#[derive(Default)]
struct Deferred {
    open: std::sync::Mutex<(Arc<Slot>, u64)>,
    work: std::sync::Condvar,
}

#[derive(Default)]
struct Slot {
    first: std::sync::OnceLock<u64>,
    notify: tokio::sync::Notify,
}

impl Slot {
    async fn wait(&self) -> u64 {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(f) = self.first.get() {
                return *f;
            }
            notified.await;
        }
    }
}

impl Deferred {
    fn push(&self, _entry: bytes::Bytes) -> (Arc<Slot>, u64) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let pos = open.1;
        open.1 += 1;
        if pos == 0 {
            self.work.notify_one();
        }
        (open.0.clone(), pos)
    }

    fn run(&self, delay: Duration) {
        let mut size = 0;
        loop {
            let (slot, n) = {
                let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
                while open.1 == 0 {
                    open = self.work.wait(open).unwrap_or_else(|e| e.into_inner());
                }
                std::mem::take(&mut *open)
            };
            std::thread::sleep(delay);
            let _ = slot.first.set(size);
            slot.notify.notify_waiters();
            size += n;
        }
    }
}
