//! `tlogd serve`: its flags over the configuration file, and the daemon's life: bind,
//! open the log set ([`crate::logset`]), serve ([`crate::serve`]), drain and stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tlogd_core::engine::ServedLog;

use crate::config::Config;
use crate::logset::open_logs;
use crate::observe;
use crate::serve::server::ServeOptions;

/// `tlogd serve`'s flags. Flags override the config file; without a file, they are
/// all that is needed.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file (see config/posix.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Storage backend: posix (default), mysql, postgres, s3 or gcs.
    #[arg(long, value_parser = ["posix", "mysql", "postgres", "s3", "gcs"])]
    backend: Option<String>,
    /// Log root directory (POSIX backend).
    #[arg(long)]
    storage_dir: Option<PathBuf>,
    /// How the POSIX backend makes files durable: auto (default; fsync on FUSE and
    /// filesystems not known to commit on syncfs), syncfs or fsync.
    #[arg(long, value_parser = ["auto", "syncfs", "fsync"])]
    storage_sync: Option<String>,
    /// Database URL (mysql, postgres backends), e.g. mysql://user:pass@127.0.0.1:3306/tlog
    /// or postgres://user:pass@127.0.0.1:5432/tlog. Prefer env TLOGD_DATABASE_URL (or
    /// `storage.url` in the config file): a command line, password included, is visible
    /// to every user of the machine.
    #[arg(long, env = "TLOGD_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Bucket (s3, gcs backends).
    #[arg(long)]
    bucket: Option<String>,
    /// Key prefix inside the bucket (s3, gcs backends).
    #[arg(long)]
    prefix: Option<String>,
    /// Region (s3 backend).
    #[arg(long)]
    region: Option<String>,
    /// Another endpoint than AWS's or Google's, e.g. http://127.0.0.1:9000 for MinIO
    /// (s3, gcs backends).
    #[arg(long)]
    endpoint: Option<String>,
    /// Allow a plain http:// endpoint (s3, gcs backends).
    #[arg(long)]
    allow_http: bool,
    /// Dedup index directory (default: <storage-dir>/.tlogd/dedup; required for mysql,
    /// postgres, s3 and gcs).
    #[arg(long)]
    dedup_path: Option<PathBuf>,
    /// Public listen address for the log API [default: 127.0.0.1:2024].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Checkpoint origin (the log's name).
    #[arg(long)]
    origin: Option<String>,
    /// File with a PRIVATE+KEY+... signing key (or set TLOGD_PRIVATE_KEY). Repeat for
    /// several keys (a key rotation): checkpoints carry their signatures in this order.
    #[arg(long)]
    private_key_file: Vec<PathBuf>,
    /// Metrics/health listen address [default: 127.0.0.1:9464]; "" disables.
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Turn the dedup index off.
    #[arg(long)]
    no_dedup: bool,
}

pub fn load_config(args: ServeArgs) -> anyhow::Result<Config> {
    let mut c = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::defaults(),
    };
    let per_log_flag = args.backend.is_some()
        || args.storage_dir.is_some()
        || args.storage_sync.is_some()
        || args.database_url.is_some()
        || args.bucket.is_some()
        || args.prefix.is_some()
        || args.region.is_some()
        || args.endpoint.is_some()
        || args.allow_http
        || args.dedup_path.is_some()
        || args.origin.is_some()
        || !args.private_key_file.is_empty()
        || args.no_dedup;
    if per_log_flag && !c.logs.is_empty() {
        bail!(
            "the config file serves several logs ([[logs]]): set storage, origin, key and dedup inside each [[logs]] entry, not by flags"
        );
    }
    if let Some(b) = args.backend {
        c.storage.backend = b;
    }
    if let Some(d) = args.storage_dir {
        c.storage.dir = Some(d);
    }
    if let Some(m) = args.storage_sync {
        c.storage.sync = m
            .parse()
            .map_err(|e| anyhow::anyhow!("--storage-sync: {e}"))?;
    }
    if let Some(u) = args.database_url {
        c.storage.url = Some(u);
    }
    if let Some(b) = args.bucket {
        c.storage.bucket = Some(b);
    }
    if let Some(p) = args.prefix {
        c.storage.prefix = p;
    }
    if let Some(r) = args.region {
        c.storage.region = Some(r);
    }
    if let Some(e) = args.endpoint {
        c.storage.endpoint = Some(e);
    }
    if args.allow_http {
        c.storage.allow_http = true;
    }
    if let Some(p) = args.dedup_path {
        c.dedup.path = Some(p);
    }
    if let Some(l) = args.listen {
        c.listen = l;
    }
    if let Some(o) = args.origin {
        c.origin = Some(o);
    }
    if !args.private_key_file.is_empty() {
        c.private_key_file = None;
        c.private_key_files = args.private_key_file;
    }
    if let Some(m) = args.metrics_listen {
        c.metrics.listen = m;
    }
    if args.no_dedup {
        c.dedup.enabled = false;
    }
    c.validate()?;
    Ok(c)
}

/// `tlogd serve`: bind the listeners, open every log, serve until SIGTERM or SIGINT
/// (or until a log's background task dies), then drain the queues and publish the
/// final checkpoints.
pub async fn run(c: Config) -> anyhow::Result<()> {
    check_fd_limit(c.http.max_connections);
    let metrics = observe::install_metrics()?;
    // Histograms buffer raw samples until drained: drain them even if nobody scrapes,
    // so memory stays bounded.
    let upkeep = {
        let handle = metrics.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        })
    };
    let shutdown_signal = shutdown_signals()?;
    // Bind first (the metrics port too): a taken port fails before any log is opened
    // or written.
    let listener = listen(c.listen, c.http.max_connections)
        .with_context(|| format!("listening on {}", c.listen))?;
    let metrics_listener = match c.metrics.listen.as_str() {
        "" => None,
        addr => {
            let addr: SocketAddr = addr
                .parse()
                .with_context(|| format!("metrics.listen {addr:?}"))?;
            let ml = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("metrics: listening on {addr}"))?;
            Some((addr, ml))
        }
    };
    // The certificate is read before any log is opened: a missing or broken pair stops
    // the start, naming the file.
    let tls = match &c.tls {
        Some(t) => Some(crate::serve::tls::TlsAcceptor::new(t).context("[tls]")?),
        None => None,
    };
    // HTTP-01's plain listener: the CA's challenge requests, and redirects to HTTPS.
    let http01 = c.tls.as_ref().and_then(|t| t.acme.as_ref()?.http_listen);
    if let (Some(addr), Some(challenges)) =
        (http01, tls.as_ref().and_then(|t| t.challenges.clone()))
    {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("tls.acme.http_listen: listening on {addr}"))?;
        tracing::info!(%addr, "ACME HTTP-01 listener (everything else redirected to HTTPS)");
        tokio::spawn(crate::serve::server::serve(
            l,
            crate::serve::acme::http01_router(challenges, c.listen.port()),
            ServeOptions {
                name: "acme_http",
                ..ServeOptions::from(&c.http)
            },
            std::future::pending(),
        ));
    }
    let opened = open_logs(&c).await?;
    let logs: Vec<Arc<dyn ServedLog>> = opened.iter().map(|o| o.log.clone()).collect();
    let mut routes = Vec::new();
    let mut tasks = Vec::new();
    let mut ct_logs = Vec::new();
    for o in opened {
        routes.push(o.routes);
        tasks.push(o.tasks);
        ct_logs.extend(o.ct);
    }
    let hup = reload_on_sighup(ct_logs)?;
    if let (Some(t), Some(cfg)) = (&tls, &c.tls) {
        // `[tls.acme] store_key_file`: the state in a log's storage, for every frontend.
        let shared = match cfg
            .acme
            .as_ref()
            .and_then(|a| Some((a, a.store_key_file.as_ref()?)))
        {
            None => None,
            Some((acme, key_file)) => {
                let seal = crate::serve::acme::shared::Seal::load(key_file)
                    .map_err(|e| anyhow::anyhow!("[tls.acme] store_key_file: {e}"))?;
                let log = match &acme.store_log {
                    Some(name) => logs
                        .iter()
                        .find(|l| l.name() == name.as_str())
                        .with_context(|| {
                            format!("[tls.acme] store_log = {name:?}: no log of that name")
                        })?,
                    None => logs.first().context("[tls.acme] store_key_file: no log")?,
                };
                tracing::info!(
                    log = log.name(),
                    "ACME state kept in the log's storage, shared by its frontends"
                );
                Some((log.blobs(), seal))
            }
        };
        t.start(cfg, hup.clone(), shared);
    }
    let metrics_task = if let Some((addr, ml)) = metrics_listener {
        let app = observe::router(logs.clone(), metrics);
        tracing::info!(%addr, "metrics and health endpoints listening");
        let opts = ServeOptions {
            name: "metrics",
            ..ServeOptions::from(&c.http)
        };
        Some(tokio::spawn(crate::serve::server::serve(
            ml,
            app,
            opts,
            std::future::pending(),
        )))
    } else {
        None
    };
    tracing::info!(
        addr = %c.listen,
        https = tls.is_some(),
        logs = logs.len(),
        max_connections = c.http.max_connections,
        "tlogd serving"
    );
    // Stop on a signal, or when a background task of a log died (fail-stop: a restart
    // re-reads storage; staying up would only answer errors).
    let failed = {
        let watched = logs.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = async move {
            let failures = watched.iter().map(|l| l.failed());
            tokio::select! {
                _ = shutdown_signal => {}
                (reason, _, _) = futures_util::future::select_all(failures) => { let _ = tx.send(reason); }
            }
        };
        crate::serve::server::serve(
            listener,
            crate::logset::routing::public_router(routes),
            ServeOptions {
                tls,
                ..ServeOptions::from(&c.http)
            },
            stop,
        )
        .await;
        rx.await.ok()
    };
    if let Some(reason) = failed {
        bail!("{reason}; stopping (restart to recover from storage)");
    }
    tracing::info!("shutting down: draining the queues");
    for log in &logs {
        log.shutdown();
    }
    for t in tasks {
        t.join().await;
    }
    if let Some(t) = metrics_task {
        t.abort();
    }
    upkeep.abort();
    let mut unpublished = Vec::new();
    for log in &logs {
        tracing::info!(log = log.name(), size = log.committed_size(), checkpoint = ?log.published_size(), "stopped");
        if log.published_size() != Some(log.committed_size()) {
            unpublished.push(log.name().to_string());
        }
    }
    if !unpublished.is_empty() {
        bail!(
            "final checkpoint was not published ({})",
            unpublished.join(", ")
        );
    }
    Ok(())
}

/// A listening socket whose accept queue holds a burst of `max_connections` new
/// connections (the kernel caps it at `net.core.somaxconn`): `TcpListener::bind` asks
/// for 1,024, and a burst beyond that is answered with dropped handshakes and resets
/// before tlogd sees a connection it could admit or refuse.
fn listen(addr: SocketAddr, max_connections: usize) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(max_connections.clamp(1024, 65_535) as u32)
}

/// Raise the soft limit on open files to the hard one (as Go programs do): every
/// connection is a file descriptor, and the usual soft default of 1024 is below
/// `http.max_connections`. Warn when even the hard limit is.
fn check_fd_limit(max_connections: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    // Files, RocksDB and the database pool need descriptors too.
    let needed = max_connections as u64 + 512;
    if soft < needed {
        tracing::warn!(
            open_files_limit = soft,
            max_connections,
            "the open-files limit (ulimit -n) is too low for http.max_connections: connections beyond it fail to be accepted"
        );
    }
}

/// On SIGHUP, every CT log refreshes its roots (`routes::ct_roots`), and the
/// receiver returned is told (the TLS certificate reloads). Installed whatever the
/// configuration: a stray SIGHUP never kills the daemon (the default action) with its
/// queues undrained.
fn reload_on_sighup(
    ct_logs: Vec<Arc<crate::routes::ct::CtLog>>,
) -> anyhow::Result<tokio::sync::watch::Receiver<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let (told, listening) = tokio::sync::watch::channel(());
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // The TLS certificate (serve::tls) reloads when told.
            told.send_replace(());
            for ct in &ct_logs {
                ct.root_set().refresh_soon();
            }
        }
    });
    Ok(listening)
}

/// SIGTERM and SIGINT, caught from the moment this is called: a signal arriving while
/// the logs open, or before the server first polls its stop future, stops the daemon
/// cleanly instead of killing it (the default action) with its queues undrained.
fn shutdown_signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {},
            _ = term.recv() => {},
        }
    })
}
