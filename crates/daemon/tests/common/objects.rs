//! Object stores the daemons under test share: a fresh bucket on the shared MinIO
//! (S3) or on the GCS emulator, and daemons started on it.

use std::path::Path;

use tlogd_storage_gcs::testsupport::TestGcs;
use tlogd_storage_s3::testsupport::minio::{ACCESS_KEY, REGION, SECRET_KEY, TestMinio};

use super::{Daemon, Opts};

/// A store the daemons share: its `[storage]` section and the environment that
/// carries its credentials (the standard chains, as in production).
pub struct Store {
    /// The `[storage]` section.
    pub storage_toml: String,
    /// Credentials, as environment variables.
    pub env: Vec<(String, String)>,
}

/// A fresh bucket on the shared MinIO, credentials in the AWS environment variables.
pub async fn minio_store(name: &str) -> (Store, String) {
    let name = name.to_string();
    let (minio, bucket) = tokio::task::spawn_blocking(move || {
        let m = TestMinio::shared();
        (m, m.fresh_bucket(&name))
    })
    .await
    .unwrap();
    let storage_toml = format!(
        "backend = \"s3\"\nbucket = \"{bucket}\"\nregion = \"{REGION}\"\nendpoint = \"{}\"\nallow_http = true\n",
        minio.endpoint()
    );
    let env = vec![
        ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY.into()),
        ("AWS_SECRET_ACCESS_KEY".into(), SECRET_KEY.into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
    ];
    (Store { storage_toml, env }, bucket)
}

/// A fresh bucket on the shared GCS emulator, credentials in a service account key
/// file (no OAuth) named by the config.
pub async fn gcs_store(dir: &Path) -> Store {
    let gcs = tokio::task::spawn_blocking(TestGcs::shared).await.unwrap();
    let bucket = gcs.fresh_bucket();
    let key = dir.join("gcs-key.json");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        &key,
        tlogd_storage_gcs::testsupport::service_account_json(&gcs.endpoint()),
    )
    .unwrap();
    let storage_toml = format!(
        "backend = \"gcs\"\nbucket = \"{bucket}\"\nendpoint = \"{}\"\nallow_http = true\nservice_account_path = \"{}\"\n",
        gcs.endpoint(),
        key.display()
    );
    let env = vec![
        ("NO_GCE_CHECK".into(), "true".into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
    ];
    Store { storage_toml, env }
}

/// A daemon on `store`, its files (key, config, dedup index) in `dir`.
pub fn daemon(dir: &Path, store: &Store) -> Daemon {
    daemon_with(dir, store, "")
}

/// [`daemon`] with more TOML sections appended to its config.
pub fn daemon_with(dir: &Path, store: &Store, extra_toml: &str) -> Daemon {
    std::fs::create_dir_all(dir).unwrap();
    let dedup = format!(
        "[dedup]\npath = \"{}\"\n{extra_toml}",
        dir.join("dedup").display()
    );
    let opts = Opts {
        env: store.env.clone(),
        ..Opts::default()
    };
    Daemon::start_opts(dir, &store.storage_toml, &dedup, &opts)
}
