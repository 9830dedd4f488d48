//! Blobs beside the tree ([`LogStorage::put_blob`]: CT's issuer certificates at
//! `issuer/<hex SHA-256>`), one file each at `<root>/<key>`, linked whole into place and
//! never replaced (crate invariant 9).
//!
//! [`LogStorage::put_blob`]: tlogd_core::engine::LogStorage::put_blob

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use tlogd_core::engine::StorageError;

use crate::store::Inner;

/// A blob found at `path` holds `bytes`, or else the other bytes stand.
fn same_blob(path: &Path, stored: &[u8], bytes: &[u8]) -> Result<(), StorageError> {
    if stored != bytes {
        return Err(StorageError::Corrupt(format!(
            "blob {} already holds other bytes ({} bytes, not these {})",
            path.display(),
            stored.len(),
            bytes.len()
        )));
    }
    Ok(())
}

fn blob_error(what: &str, path: &Path, e: io::Error) -> StorageError {
    StorageError::from_io(format!("{what} {}: {e}", path.display()), &e)
}

impl Inner {
    /// [`LogStorage::put_blob`](tlogd_core::engine::LogStorage::put_blob) (see the
    /// crate documentation); `key` is checked.
    pub(crate) fn put_blob(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.check_poisoned()?;
        let path = self.root.join(key);
        // Already stored (the common case for a CT issuer): compare, write nothing.
        match fs::read(&path) {
            Ok(stored) => return same_blob(&path, &stored, bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(blob_error("reading blob", &path, e)),
        }
        let tmp = self.temp_path();
        let linked = self.write_and_link(&tmp, &path, bytes);
        // The temp name goes whatever happened: the link (if any) holds the bytes. A
        // temp left by a crash is removed at the next open.
        let _ = fs::remove_file(&tmp);
        if !linked? {
            // Another writer got there first: its bytes stand, if they are ours.
            let stored = fs::read(&path).map_err(|e| blob_error("reading blob", &path, e))?;
            return same_blob(&path, &stored, bytes);
        }
        Ok(())
    }

    /// The steps of [`Inner::put_blob`] that leave a temp file behind: write and sync
    /// `tmp`, create the missing directories of `path` durably, link `tmp` at `path`,
    /// sync the directory. `Ok(false)`: something is at `path` already (the link
    /// never replaces it).
    fn write_and_link(&self, tmp: &Path, path: &Path, bytes: &[u8]) -> Result<bool, StorageError> {
        let write = |e| blob_error("writing blob", path, e);
        let mut f = File::create(tmp).map_err(write)?;
        f.write_all(bytes).map_err(write)?;
        self.synced(|| f.sync_all(), path)?;
        drop(f);
        let dir = path.parent().unwrap_or(&self.root);
        self.create_dirs_durably(dir)?;
        match fs::hard_link(tmp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Synced anyway: the other writer may not have synced its link yet.
                self.sync_dir(dir)?;
                return Ok(false);
            }
            Err(e) => return Err(write(e)),
        }
        self.sync_dir(dir)?;
        Ok(true)
    }

    /// Create `dir` and its missing ancestors below the root, syncing the parent of
    /// each directory created, so that its entry survives a crash too.
    fn create_dirs_durably(&self, dir: &Path) -> Result<(), StorageError> {
        let mut missing = Vec::new();
        let mut d = dir;
        while d != self.root && !d.is_dir() {
            missing.push(d);
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
        for d in missing.into_iter().rev() {
            match fs::create_dir(d) {
                Ok(()) => {}
                // Created by a concurrent writer, which may not have synced its parent
                // yet: synced below anyway.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(blob_error("creating directory", d, e)),
            }
            self.sync_dir(d.parent().unwrap_or(&self.root))?;
        }
        Ok(())
    }

    /// `fsync` a directory, under the sync lock; a failure poisons the store.
    fn sync_dir(&self, dir: &Path) -> Result<(), StorageError> {
        let d = File::open(dir).map_err(|e| blob_error("opening directory", dir, e))?;
        self.synced(|| d.sync_all(), dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PosixStorage;
    use crate::store::PRIVATE_DIR;
    use tlogd_core::engine::LogStorage;

    /// Every file below `root`, relative, sorted, the private directory skipped.
    fn public_files(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p == root.join(PRIVATE_DIR) {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_blob_is_linked_whole_and_leaves_no_temp_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = PosixStorage::open(&root, "example.com/log").unwrap();
            let blob: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
            let ct = "application/pkix-cert";
            s.put_blob("issuer/a/b", &blob, ct).await.unwrap();
            s.put_blob("issuer/a/b", &blob, ct).await.unwrap();
            match s.put_blob("issuer/a/b", &blob[1..], ct).await {
                Err(StorageError::Corrupt(m)) => assert!(m.contains("other bytes"), "{m}"),
                other => panic!("expected Corrupt, got {other:?}"),
            }
            // A key below a file: the link fails, after the temp file was written.
            assert!(s.put_blob("issuer/a/b/c", b"x", ct).await.is_err());
            let tmp = root.join(PRIVATE_DIR).join("tmp");
            assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "temp files left");
            // Exactly the whole blob, at one path (the temp name is gone).
            let public = root.join("issuer/a/b");
            assert_eq!(fs::read(&public).unwrap(), blob);
            assert_eq!(fs::metadata(&public).unwrap().nlink(), 1);
            assert_eq!(public_files(&root), ["issuer/a/b"]);
            assert_eq!(
                s.read_blob("issuer/a/b").await.unwrap().as_deref(),
                Some(&blob[..])
            );
            assert_eq!(s.read_blob("issuer/a/c").await.unwrap(), None);
            // A refused key writes nothing.
            assert!(s.put_blob("../x", b"x", ct).await.is_err());
            assert!(!dir.path().join("x").exists());
        });
    }
}
