//! Test support shared by the object-store backends (feature `testsupport`): Toxiproxy
//! in front of a store ([`toxiproxy::Toxiproxy`]), a minimal HTTP/1.1 client to drive
//! test servers, and the lookup of their binaries. The servers themselves live with
//! their store: `tlogd_storage_s3::testsupport::minio::TestMinio` (a private MinIO) and
//! `tlogd_storage_gcs::testsupport::TestGcs` (the GCS emulator). Each server is a child process on 127.0.0.1
//! at free ports, killed with its process group when dropped or when the test process
//! exits (the process plumbing of `tlogd_storage_sql::testsupport`).
//!
//! Missing binaries are a panic naming `scripts/deps.sh test`, never a skip. They are
//! looked up on `PATH`, in `$TLOGD_TOOLS_DIR`, and in `~/.cache/tlogd-tools/bin` (where
//! `scripts/deps.sh test` installs them).

pub mod http;
pub mod toxiproxy;

use std::path::PathBuf;

pub use tlogd_storage_sql::testsupport::{ServerProcess, free_port, read_log, server_dir};

/// The directories searched for test binaries besides `PATH`.
pub fn tool_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("TLOGD_TOOLS_DIR") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cache/tlogd-tools/bin"));
    }
    dirs
}

/// The binary `name`, found on `PATH` or in [`tool_dirs`]; panics naming how to install
/// it.
pub fn find_tool(name: &str) -> PathBuf {
    tlogd_storage_sql::testsupport::find_binary(
        &[name],
        &tool_dirs(),
        "run `scripts/deps.sh test` (it installs MinIO and Toxiproxy with `go install` into \
         ~/.cache/tlogd-tools/bin), or put it on PATH or in $TLOGD_TOOLS_DIR",
    )
}

/// Keep every cloud SDK in this process away from instance metadata services: the
/// tests give credentials explicitly, this is the second guard.
pub fn no_metadata_services() {
    // SAFETY: tests call this before starting threads of their own that read the
    // environment; the values are constant, so a racing reader sees old or new.
    unsafe {
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        std::env::set_var("NO_GCE_CHECK", "true");
    }
}
