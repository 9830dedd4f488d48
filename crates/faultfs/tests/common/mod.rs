//! Shared helpers: a fresh backing directory and mount point per test, mounting that
//! fails loudly without FUSE (never skips), and a time bound around anything that could
//! hang if faultfs had a bug.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use faultfs::{Mount, Options};

/// A test's directories: `backing` and `mnt` inside one temporary directory.
pub struct Dirs {
    pub tmp: tempfile::TempDir,
    pub backing: PathBuf,
    pub mnt: PathBuf,
}

pub fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let backing = tmp.path().join("backing");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    Dirs { tmp, backing, mnt }
}

/// Mounts, failing the test with what is missing if FUSE cannot be used here.
pub fn mount_with(d: &Dirs, options: Options) -> Mount {
    if let Err(e) = faultfs::check_fuse_available() {
        panic!("faultfs tests need FUSE (they never skip): {e}");
    }
    Mount::new(&d.backing, &d.mnt, options).expect("mounting faultfs")
}

pub fn mount(d: &Dirs) -> Mount {
    mount_with(d, Options::default())
}

/// Runs `f` on its own thread and fails the test if it takes longer than `secs`.
pub fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("operation did not finish within {secs} s (hung?)"),
    }
}

/// Every file and directory under `root` with its content (`None` for directories,
/// `-> target` for symlinks).
pub fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(rel, None);
                walk(root, &e.path(), out);
            } else if ft.is_symlink() {
                let t = std::fs::read_link(e.path()).unwrap();
                out.insert(rel, Some(format!("-> {}", t.display()).into_bytes()));
            } else {
                out.insert(rel, Some(std::fs::read(e.path()).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Whether anything is mounted at `p` (per /proc/mounts).
pub fn is_mounted(p: &Path) -> bool {
    let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(&*p.to_string_lossy()))
}

/// fsync of a directory.
pub fn sync_dir(p: &Path) {
    std::fs::File::open(p).unwrap().sync_all().unwrap();
}

/// Writes `data` to a new (or truncated) file and fsyncs it (not its directory).
pub fn write_synced(p: &Path, data: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::File::create(p).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// The errno of an I/O error.
pub fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}
