//! The object-store backend on S3, against a private MinIO server (feature
//! `testsupport`): the object-store conformance suite (`tests/support/conformance.rs`),
//! driven by core's engine and ObjectLog through the real S3 adapter.

use tlogd_storage_object::testsupport::minio::TestMinio;
use tlogd_storage_object::{ClientTuning, ObjectStoreBackend};

#[path = "support/conformance.rs"]
mod conformance;

use conformance::ObjectServer;

impl ObjectServer for TestMinio {
    fn shared() -> &'static Self {
        TestMinio::shared()
    }
    fn fresh_bucket(&self, name: &str) -> String {
        TestMinio::fresh_bucket(self, name)
    }
    fn port(&self) -> u16 {
        TestMinio::port(self)
    }
    fn backend_via(
        &self,
        port: u16,
        bucket: &str,
        prefix: &str,
        client: ClientTuning,
    ) -> ObjectStoreBackend {
        let mut o = self.s3_options_via(port, bucket);
        o.prefix = prefix.to_string();
        o.client = client;
        tlogd_storage_object::s3::backend(&o).unwrap_or_else(|e| panic!("S3 backend: {e}"))
    }
}

object_conformance_tests!(TestMinio);
