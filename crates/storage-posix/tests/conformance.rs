//! The storage conformance suite (`tlogd_core::conformance`) on the POSIX backend: a
//! single-writer store, so the tests that need two frontends do not apply.

use std::sync::{Arc, Mutex};

use tlogd_core::conformance::{ConformanceStore, ORIGIN};
use tlogd_storage_posix::PosixStorage;

/// Log directories under temporary directories that live as long as the test.
#[derive(Default)]
struct PosixDirs(Mutex<Vec<tempfile::TempDir>>);

impl ConformanceStore for PosixDirs {
    type Storage = PosixStorage;

    async fn fresh(&self, name: &str) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = dir.path().join(name).to_string_lossy().into_owned();
        self.0.lock().unwrap().push(dir);
        location
    }

    async fn open(&self, location: &str) -> Arc<PosixStorage> {
        Arc::new(PosixStorage::open(location, ORIGIN).expect("open"))
    }

    fn shared(&self) -> bool {
        false
    }
}

tlogd_core::conformance_tests!(PosixDirs, PosixDirs::default());
