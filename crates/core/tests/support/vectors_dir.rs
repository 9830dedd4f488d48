//! Locating the Go-reference vectors (`testdata/vectors` in the repository) from a
//! test (shared by the core and backend tests through `#[path]`, so the rule lives in
//! one place).

use std::path::PathBuf;

/// The crate directory, read at run time: a test binary reused from a build in another
/// clone (shared target dir) must not look for files in that clone.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `$TLOGD_VECTORS_DIR`, or the repository's own `testdata/vectors`. Fails, never
/// skips, when they are missing.
pub fn vectors() -> PathBuf {
    let p = std::env::var_os("TLOGD_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../testdata/vectors"));
    assert!(
        p.join("README.md").exists(),
        "test vectors not found at {}",
        p.display()
    );
    p
}
