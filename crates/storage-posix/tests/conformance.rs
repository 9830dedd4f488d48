//! The storage conformance suite (`tlogd_core::conformance`) on the POSIX backend: a
//! single-writer store, so the tests that need two frontends do not apply. It runs once
//! per sync method (`storage.sync`): `syncfs`, which `auto` picks on the test's
//! filesystem, and `fsync`, which `auto` picks on FUSE.

use std::sync::{Arc, Mutex};

use tlogd_core::conformance::{ConformanceStore, ORIGIN};
use tlogd_storage_posix::{PosixOptions, PosixStorage, SyncMode};

/// Log directories under temporary directories that live as long as the test, opened
/// with one sync mode.
struct PosixDirs(Mutex<Vec<tempfile::TempDir>>, SyncMode);

impl PosixDirs {
    fn with(sync: SyncMode) -> Self {
        PosixDirs(Mutex::default(), sync)
    }
}

impl ConformanceStore for PosixDirs {
    type Storage = PosixStorage;

    async fn fresh(&self, name: &str) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = dir.path().join(name).to_string_lossy().into_owned();
        self.0.lock().unwrap().push(dir);
        location
    }

    async fn open(&self, location: &str) -> Arc<PosixStorage> {
        let options = PosixOptions::with_sync(self.1);
        Arc::new(PosixStorage::open_with(location, ORIGIN, &options).expect("open"))
    }

    fn shared(&self) -> bool {
        false
    }
}

mod syncfs {
    use super::*;
    tlogd_core::conformance_tests!(PosixDirs, PosixDirs::with(SyncMode::Syncfs));
}

mod fsync {
    use super::*;
    tlogd_core::conformance_tests!(PosixDirs, PosixDirs::with(SyncMode::Fsync));
}
