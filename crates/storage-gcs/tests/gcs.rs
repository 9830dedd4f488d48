//! The object-store backend on Google Cloud Storage, against the GCS XML-API emulator
//! (`tlogd-gcs-emulator`, in this process): the object-store conformance suite
//! (`tests/support/conformance.rs`), driven by core's engine and ObjectLog through the
//! real GCS adapter. `TLOGD_GCS_URL` points the same tests at another XML-API server
//! (Google's testbench, by hand; see the crate README) whose buckets
//! `tlogd-0`..`tlogd-255` exist.

use tlogd_storage_object::testsupport::gcs::TestGcs;
use tlogd_storage_object::{ClientTuning, ObjectStoreBackend};

#[path = "support/conformance.rs"]
mod conformance;

use conformance::ObjectServer;

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
        tlogd_storage_object::gcs::backend(&o).unwrap_or_else(|e| panic!("GCS backend: {e}"))
    }
}

object_conformance_tests!(TestGcs);
