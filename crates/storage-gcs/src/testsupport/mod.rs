//! The GCS emulator (`tlogd-gcs-emulator`, an in-memory XML-API server on a thread of
//! the test process) with a pool of buckets handed out one per test.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use tlogd_storage_object::conformance::ObjectServer;
use tlogd_storage_object::{ClientTuning, ObjectStoreBackend};

use tlogd_gcs_emulator::GcsEmulator;
pub use tlogd_gcs_emulator::service_account_json;

use crate::GcsOptions;
use tlogd_storage_object::testsupport::no_metadata_services;

/// Buckets created with the shared emulator (it has no bucket-creation API).
const POOL: usize = 256;

/// An emulator and its buckets.
pub struct TestGcs {
    /// None when `TLOGD_GCS_URL` names another server.
    emulator: Option<GcsEmulator>,
    port: u16,
    buckets: Vec<String>,
    next: AtomicUsize,
}

static SHARED: OnceLock<TestGcs> = OnceLock::new();

impl TestGcs {
    /// The emulator shared by the tests of this process.
    pub fn shared() -> &'static TestGcs {
        SHARED.get_or_init(TestGcs::start)
    }

    /// An emulator of the caller's own, on a free port of 127.0.0.1; or, when
    /// `TLOGD_GCS_URL` is set (`http://127.0.0.1:<port>`, e.g. Google's testbench, by
    /// hand), that server, whose buckets `tlogd-0`..`tlogd-255` must exist.
    pub fn start() -> TestGcs {
        no_metadata_services();
        let buckets: Vec<String> = (0..POOL).map(|i| format!("tlogd-{i}")).collect();
        if let Ok(url) = std::env::var("TLOGD_GCS_URL") {
            let port = url
                .strip_prefix("http://127.0.0.1:")
                .and_then(|p| p.trim_end_matches('/').parse().ok())
                .unwrap_or_else(|| panic!("TLOGD_GCS_URL={url} is not http://127.0.0.1:<port>"));
            return TestGcs {
                emulator: None,
                port,
                buckets,
                next: AtomicUsize::new(0),
            };
        }
        let names: Vec<&str> = buckets.iter().map(String::as_str).collect();
        let emulator =
            GcsEmulator::start(&names).unwrap_or_else(|e| panic!("starting the GCS emulator: {e}"));
        TestGcs {
            port: emulator.addr().port(),
            emulator: Some(emulator),
            buckets,
            next: AtomicUsize::new(0),
        }
    }

    /// The emulator (fault injection, request counts); `None` with `TLOGD_GCS_URL`.
    pub fn emulator(&self) -> Option<&GcsEmulator> {
        self.emulator.as_ref()
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An empty bucket no other caller got; panics when the pool is used up.
    pub fn fresh_bucket(&self) -> String {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.buckets
            .get(i)
            .cloned()
            .unwrap_or_else(|| panic!("all {POOL} buckets of the test GCS emulator are in use"))
    }

    /// Options reaching `bucket` on this emulator, through 127.0.0.1:`port` (the
    /// emulator's own port or a proxy's in front of it).
    pub fn gcs_options_via(&self, port: u16, bucket: &str) -> GcsOptions {
        let endpoint = format!("http://127.0.0.1:{port}");
        GcsOptions {
            bucket: bucket.to_string(),
            prefix: String::new(),
            service_account_path: None,
            // No OAuth, no metadata server.
            service_account_key: Some(service_account_json(&endpoint)),
            endpoint: Some(endpoint),
            anonymous: false,
            allow_http: true,
            client: Default::default(),
        }
    }
}

/// The object-store conformance suite runs on this server.
impl ObjectServer for TestGcs {
    fn shared() -> &'static Self {
        TestGcs::shared()
    }
    fn fresh_bucket(&self, _name: &str) -> String {
        TestGcs::fresh_bucket(self)
    }
    fn port(&self) -> u16 {
        TestGcs::port(self)
    }
    fn backend_via(
        &self,
        port: u16,
        bucket: &str,
        prefix: &str,
        client: ClientTuning,
    ) -> ObjectStoreBackend {
        let mut o = self.gcs_options_via(port, bucket);
        o.prefix = prefix.to_string();
        o.client = client;
        crate::backend(&o).unwrap_or_else(|e| panic!("GCS backend: {e}"))
    }
}
