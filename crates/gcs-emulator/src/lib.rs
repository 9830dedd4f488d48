//! A small in-memory emulator of the Google Cloud Storage XML API, as the `object_store`
//! crate's GCS client speaks it, with fault injection.
//!
//! It exists so that GCS storage backends can be tested without any cloud and without
//! Google's testbench, and so that tests can provoke the failures that matter for a
//! transparency log on a shared object store: throttling, outages, connections that die
//! before the answer, and writes that land although the client never hears so.
//!
//! ```no_run
//! # fn main() -> Result<(), tlogd_gcs_emulator::Error> {
//! use tlogd_gcs_emulator::{Fault, GcsEmulator, Op};
//! let emulator = GcsEmulator::start(&["tlog"])?;
//! // Point object_store at it:
//! //   GoogleCloudStorageBuilder::new()
//! //       .with_service_account_key(emulator.service_account_json())
//! //       .with_bucket_name("tlog")
//! //       .with_client_options(ClientOptions::new().with_allow_http(true))
//! emulator.inject(Op::Put, "tile/", 1, Fault::ApplyThenReset);
//! # Ok(()) }
//! ```
//!
//! The server runs on a thread of its own with its own tokio runtime, so it works the same
//! under a current-thread test runtime, outlives the runtimes of the tests that use it, and
//! stops (closing every connection) when the [`GcsEmulator`] is dropped.

#![deny(missing_docs)]

mod server;
mod store;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

/// Errors from starting the emulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be bound or set up.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The server's runtime or thread could not be started.
    #[error("starting the emulator's runtime: {0}")]
    Runtime(std::io::Error),
    /// A bucket name that cannot appear in a path-style URL.
    #[error("invalid bucket name {0:?}")]
    BucketName(String),
}

/// The kind of request a fault or a counter applies to.
///
/// `List` is a `GET` on the bucket; `Get` and `Head` are reads of one object. A copy or a
/// multipart part upload is a `Put`, multipart initiate and complete are `Post`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Any request (for counters: the total).
    Any,
    /// `GET /<bucket>/<key>`.
    Get,
    /// `HEAD /<bucket>/<key>`.
    Head,
    /// `PUT /<bucket>/<key>`.
    Put,
    /// `DELETE /<bucket>/<key>`.
    Delete,
    /// `GET /<bucket>?list-type=2...`.
    List,
    /// `POST /<bucket>/<key>` (multipart uploads).
    Post,
}

impl Op {
    const ALL: [Op; 7] = [
        Op::Any,
        Op::Get,
        Op::Head,
        Op::Put,
        Op::Delete,
        Op::List,
        Op::Post,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// What happens to a request that a fault rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer `503 Service Unavailable`; the store is not touched.
    ServiceUnavailable,
    /// Answer `429 Too Many Requests`; the store is not touched.
    TooManyRequests,
    /// Read the request, then reset the connection (TCP RST) without answering; the store is
    /// not touched. The client sees "connection reset by peer".
    Reset,
    /// Read the request, then close the connection (FIN) without answering; the store is not
    /// touched. The client sees an incomplete message, which `object_store` retries even for
    /// conditional writes.
    Close,
    /// Wait this long, then handle the request normally. The request is applied even if the
    /// client gave up meanwhile, as a slow server would.
    Delay(Duration),
    /// Apply the request (a write takes effect), then reset the connection without answering:
    /// the case a client cannot retry blindly for conditional writes.
    ApplyThenReset,
    /// Apply the request, then close the connection (FIN) without answering. `object_store`
    /// retries this even for conditional writes, and its retry then fails the precondition.
    ApplyThenClose,
    /// Answer normally, but break the connection after this many bytes of the response body
    /// (a download cut short).
    TruncateBody(usize),
}

/// An object as stored, for tests that look behind the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// The object's bytes.
    pub data: Bytes,
    /// Its generation (`x-goog-generation`); a new one for every write.
    pub generation: i64,
    /// Its metageneration (`x-goog-metageneration`).
    pub metageneration: i64,
    /// Its `Content-Type`.
    pub content_type: String,
}

/// One fault-injection rule: the next `remaining` requests of `op` whose key starts with
/// `key_prefix` get `fault`.
#[derive(Debug)]
struct Rule {
    op: Op,
    key_prefix: String,
    remaining: usize,
    fault: Fault,
}

/// State shared between the handle and the server thread.
#[derive(Debug)]
struct Shared {
    store: Mutex<store::Store>,
    rules: Mutex<Vec<Rule>>,
    unavailable: AtomicBool,
    counts: [AtomicU64; Op::ALL.len()],
    page_size: AtomicUsize,
}

/// A lock that survives a panicked holder: the emulator's state stays consistent because
/// every mutation under these locks completes or does nothing, and a test that panicked
/// elsewhere must not wedge the server for the others.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn count(&self, op: Op) {
        self.counts[Op::Any.index()].fetch_add(1, Ordering::Relaxed);
        if op != Op::Any {
            self.counts[op.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes one use of the first rule matching this request, if any.
    fn take_fault(&self, op: Op, key: &str) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let i = rules.iter().position(|r| {
            r.remaining > 0 && (r.op == Op::Any || r.op == op) && key.starts_with(&r.key_prefix)
        })?;
        rules[i].remaining -= 1;
        let fault = rules[i].fault.clone();
        if rules[i].remaining == 0 {
            rules.remove(i);
        }
        Some(fault)
    }
}

/// A running emulator. Dropping it stops the server and closes its connections.
#[derive(Debug)]
pub struct GcsEmulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// GCS's own cap on `max-keys`, and so the default page size of a listing.
pub const DEFAULT_PAGE_SIZE: usize = 1000;

impl GcsEmulator {
    /// Starts an emulator on 127.0.0.1 on a free port, with these (empty) buckets.
    pub fn start(buckets: &[&str]) -> Result<Self, Error> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), buckets)
    }

    /// Starts an emulator listening on `addr` (port 0: a free port), with these buckets.
    pub fn start_on(addr: SocketAddr, buckets: &[&str]) -> Result<Self, Error> {
        for b in buckets {
            // Path-style URLs put the bucket in the first path segment.
            if b.is_empty() || b.contains('/') || b.contains('?') || b.contains('%') {
                return Err(Error::BucketName((*b).to_owned()));
            }
        }
        let shared = Arc::new(Shared {
            store: Mutex::new(store::Store::new(buckets)),
            rules: Mutex::new(Vec::new()),
            unavailable: AtomicBool::new(false),
            counts: Default::default(),
            page_size: AtomicUsize::new(DEFAULT_PAGE_SIZE),
        });
        let bind_err = |source| Error::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gcs-emulator")
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let listener = {
            // Registering the socket needs the emulator's runtime as the current one; entering
            // (unlike block_on) is allowed even inside a caller's runtime.
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(bind_err)?
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gcs-emulator".into())
            .spawn(move || {
                runtime.block_on(server::serve(listener, server_shared, rx));
                // Connections still open are dropped with the runtime: stopping is prompt.
                runtime.shutdown_background();
            })
            .map_err(Error::Runtime)?;
        Ok(Self {
            addr: local,
            shared,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address the emulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The service-account key JSON that points `object_store`'s GCS client here, without
    /// OAuth (so it never contacts a token or metadata endpoint).
    pub fn service_account_json(&self) -> String {
        service_account_json(&self.url())
    }

    /// Injects `fault` into the next `times` requests of `op` (or any, with [`Op::Any`])
    /// whose object key starts with `key_prefix` (for a listing: whose `prefix` parameter
    /// does). Rules are tried in the order they were added; each request takes at most one.
    pub fn inject(&self, op: Op, key_prefix: &str, times: usize, fault: Fault) {
        if times == 0 {
            return;
        }
        lock(&self.shared.rules).push(Rule {
            op,
            key_prefix: key_prefix.to_owned(),
            remaining: times,
            fault,
        });
    }

    /// How many injected faults have not fired yet.
    pub fn pending_faults(&self) -> usize {
        lock(&self.shared.rules).iter().map(|r| r.remaining).sum()
    }

    /// Removes every fault rule that has not fired yet.
    pub fn clear_faults(&self) {
        lock(&self.shared.rules).clear();
    }

    /// While on, every request is answered `503 Service Unavailable` (a GCS outage).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// How many requests of `op` have arrived ([`Op::Any`]: all of them), faulted or not.
    pub fn request_count(&self, op: Op) -> u64 {
        self.shared.counts[op.index()].load(Ordering::SeqCst)
    }

    /// Sets the most entries a listing page returns (default [`DEFAULT_PAGE_SIZE`]; at least
    /// 1), so tests can paginate with a few objects.
    pub fn set_list_page_size(&self, entries: usize) {
        self.shared
            .page_size
            .store(entries.max(1), Ordering::SeqCst);
    }

    /// The live object at `bucket`/`key`, read directly from the store.
    pub fn object(&self, bucket: &str, key: &str) -> Option<StoredObject> {
        lock(&self.shared.store).stored(bucket, key)
    }
}

/// The service-account key JSON for an XML-API endpoint at `base_url` without OAuth (for a
/// GCS emulator or Google's testbench).
pub fn service_account_json(base_url: &str) -> String {
    // Escaping keeps the JSON valid whatever the URL holds.
    let escaped: String = base_url
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    format!(
        r#"{{"gcs_base_url":"{escaped}","disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}}"#
    )
}

impl Drop for GcsEmulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            // The server may have stopped already; nothing to do then.
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic on the server thread already failed whatever test it hit.
            let _ = thread.join();
        }
    }
}
