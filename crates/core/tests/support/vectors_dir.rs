//! Locating `shared/vectors` from a test (shared by the core and POSIX tests through
//! `#[path]`, so the rule lives in one place).

use std::path::PathBuf;

/// The crate directory, read at run time: a test binary reused from a build in another
/// clone (shared target dir) must not look for files in that clone.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `$TLOGD_VECTORS_DIR`, or `shared/vectors` beside the clone. Fails, never skips,
/// when they are missing.
pub fn vectors() -> PathBuf {
    let p = std::env::var_os("TLOGD_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../../shared/vectors"));
    assert!(
        p.join("README.md").exists(),
        "test vectors not found at {}",
        p.display()
    );
    p
}
