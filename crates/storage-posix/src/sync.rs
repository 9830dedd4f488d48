//! How the POSIX backend makes what it wrote durable: one `syncfs(2)` of the whole
//! filesystem, or an `fsync(2)` of every file and directory it changed.
//!
//! `syncfs` is one call however many files a flush wrote, and on a local filesystem
//! (ext4, XFS, btrfs) it writes back and commits everything dirty, directory entries
//! included. But it is only as good as the filesystem's `sync_fs`: a FUSE filesystem
//! served through `/dev/fuse` never sees it (Linux 6.18, measured with
//! `crates/faultfs/scripts/syncfs-probe.sh`: no request at all reaches the server, and
//! `syncfs` returns 0), so there it makes nothing durable. `fsync` of a file and of the
//! directory holding its name is what POSIX promises everywhere, and FUSE passes it on.
//!
//! [`SyncMode::Auto`] therefore picks by the filesystem's type (`fstatfs`): `syncfs` on
//! the filesystems known to implement it as a commit (ext2/3/4, XFS, btrfs, F2FS, ZFS,
//! bcachefs, tmpfs, overlayfs, and the kernel's NFS and CephFS clients, whose writeback
//! of every dirty inode ends in a COMMIT/cap flush to the server), `fsync` on anything
//! else: FUSE (sshfs, s3fs, gcsfuse, JuiceFS, virtiofs too, which would take `syncfs`
//! but gains nothing from it that `fsync` lacks) and filesystems this list does not know.
//!
//! The store's own primitives live here too: [`syncfs`] of the log's filesystem,
//! [`sync_paths`] by method, and whether the running kernel's `syncfs` reports
//! writeback errors at all ([`syncfs_reports_errors`]).

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How to make files durable (config `storage.sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Pick by the filesystem's type: `syncfs` where it is known to commit, `fsync`
    /// everywhere else (the module documentation lists them).
    #[default]
    Auto,
    /// One `syncfs(2)` per flush and per checkpoint: fewest calls, correct only where
    /// the filesystem implements `syncfs` (not FUSE).
    Syncfs,
    /// `fsync(2)` of every file written and of every directory changed, several at
    /// once: correct on any POSIX filesystem.
    Fsync,
}

impl std::str::FromStr for SyncMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SyncMode::Auto),
            "syncfs" => Ok(SyncMode::Syncfs),
            "fsync" => Ok(SyncMode::Fsync),
            other => Err(format!(
                "{other:?} is not a sync mode (\"auto\", \"syncfs\" or \"fsync\")"
            )),
        }
    }
}

/// The sync a log uses: [`SyncMode`] resolved for its filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMethod {
    /// One `syncfs(2)` of the filesystem.
    Syncfs,
    /// `fsync(2)` of each file and directory.
    Fsync,
}

impl fmt::Display for SyncMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SyncMethod::Syncfs => "syncfs",
            SyncMethod::Fsync => "fsync",
        })
    }
}

/// `statfs(2)` `f_type` values (linux/magic.h) and whether `syncfs` commits there.
const FILESYSTEMS: &[(i64, &str, bool)] = &[
    (0xEF53, "ext2/3/4", true),
    (0x5846_5342, "xfs", true),
    (0x9123_683E, "btrfs", true),
    (0xF2F5_2010, "f2fs", true),
    (0x2FC1_2FC1, "zfs", true),
    (0xCA45_1A4E, "bcachefs", true),
    (0x0102_1994, "tmpfs", true),
    (0x794C_7630, "overlayfs", true),
    (0x6969, "nfs", true),
    (0x00C3_6400, "ceph", true),
    (0x6573_5546, "fuse", false),
    (0xFF53_4D42, "cifs", false),
    (0xFE53_4D42, "smb2", false),
    (0x0102_1997, "9p", false),
];

/// A filesystem, as `fstatfs` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// Its name where known (`ext2/3/4`, `fuse`, ...), else its magic number in hex.
    pub name: String,
    /// Whether `syncfs(2)` is known to commit it.
    pub syncfs_commits: bool,
}

impl Filesystem {
    /// The filesystem holding `dir`.
    pub fn of(dir: &File) -> io::Result<Filesystem> {
        // SAFETY: zeroed statfs is a valid value; fstatfs only writes it.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and pointer.
        if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) } == -1 {
            return Err(io::Error::last_os_error());
        }
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
        let magic = st.f_type as i64 & 0xFFFF_FFFF;
        Ok(match FILESYSTEMS.iter().find(|(m, _, _)| *m == magic) {
            Some((_, name, syncfs)) => Filesystem {
                name: name.to_string(),
                syncfs_commits: *syncfs,
            },
            None => Filesystem {
                name: format!("0x{magic:x}"),
                syncfs_commits: false,
            },
        })
    }
}

impl SyncMode {
    /// The method for the filesystem holding `dir`, and that filesystem.
    pub fn resolve(self, dir: &File) -> io::Result<(SyncMethod, Filesystem)> {
        let fs = Filesystem::of(dir)?;
        let method = match self {
            SyncMode::Syncfs => SyncMethod::Syncfs,
            SyncMode::Fsync => SyncMethod::Fsync,
            SyncMode::Auto if fs.syncfs_commits => SyncMethod::Syncfs,
            SyncMode::Auto => SyncMethod::Fsync,
        };
        Ok((method, fs))
    }
}

/// Files and directories synced at once by [`fsync_each`]: enough to keep a network
/// filesystem's round trips in flight, few enough not to crowd a small machine.
const PARALLEL_SYNCS: usize = 16;

/// `fsync(2)` every path (files or directories), several at once; the first error,
/// naming its path. Each is opened read-only: Linux syncs through any descriptor, and
/// a fresh one still reports a writeback error no other descriptor has seen.
pub fn fsync_each(paths: &[PathBuf]) -> io::Result<()> {
    each_in_parallel(paths, |p: &PathBuf| {
        File::open(p)
            .and_then(|f| f.sync_all())
            .map_err(|e| io::Error::new(e.kind(), format!("fsync {}: {e}", p.display())))
    })
}

/// Create (or truncate) each file, write its bytes and `fsync(2)` it, several at once;
/// the first error, naming its path. Their directories must exist.
pub fn write_and_fsync_each(files: &[(&Path, &[u8])]) -> io::Result<()> {
    each_in_parallel(files, |(path, bytes): &(&Path, &[u8])| {
        File::create(path)
            .and_then(|mut f| {
                f.write_all(bytes)?;
                f.sync_all()
            })
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
    })
}

/// `one` for every item, on up to [`PARALLEL_SYNCS`] threads; the first error (the
/// others stop at their next item).
fn each_in_parallel<T: Sync>(
    items: &[T],
    one: impl Fn(&T) -> io::Result<()> + Sync,
) -> io::Result<()> {
    match items.len() {
        0 => return Ok(()),
        1 => return one(&items[0]),
        _ => {}
    }
    let next = AtomicUsize::new(0);
    let workers = items.len().min(PARALLEL_SYNCS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> io::Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return Ok(());
                        };
                        if let Err(e) = one(item) {
                            // The others stop at their next item.
                            next.store(items.len(), Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                })
            })
            .collect();
        let mut first = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Whether the running kernel's `syncfs` reports writeback errors, as Linux does from
/// 5.8 (crate docs, "Sync failures stop commits"); `None` if its release is unreadable.
pub fn syncfs_reports_errors() -> Option<bool> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    release_at_least(&release, (5, 8))
}

/// Whether a kernel release string ("4.18.0-553.el8_10.x86_64") is at least `want`
/// (major, minor).
fn release_at_least(release: &str, want: (u32, u32)) -> Option<bool> {
    let mut numbers = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = numbers.next()?.parse::<u32>().ok()?;
    let minor = numbers.next()?.parse::<u32>().ok()?;
    Some((major, minor) >= want)
}

/// Make `paths` (files written, or directories changed) durable by `sync`: one
/// `syncfs` of the filesystem of `root_dir`, or an `fsync` of each.
pub fn sync_paths(sync: SyncMethod, root_dir: &File, paths: &[PathBuf]) -> io::Result<()> {
    match sync {
        SyncMethod::Syncfs => syncfs(root_dir),
        SyncMethod::Fsync => fsync_each(paths),
    }
}

/// `syncfs(2)` of the filesystem holding `dir`.
pub fn syncfs(dir: &File) -> io::Result<()> {
    // SAFETY: valid fd.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_auto_picks_by_filesystem() {
        assert_eq!("fsync".parse::<SyncMode>(), Ok(SyncMode::Fsync));
        assert!("fdatasync".parse::<SyncMode>().is_err());
        // /dev/shm is tmpfs on Linux: syncfs commits there (trivially).
        let shm = File::open("/dev/shm").expect("/dev/shm");
        let (method, fs) = SyncMode::Auto.resolve(&shm).unwrap();
        assert_eq!((method, fs.name.as_str()), (SyncMethod::Syncfs, "tmpfs"));
        assert_eq!(SyncMode::Fsync.resolve(&shm).unwrap().0, SyncMethod::Fsync);
    }

    #[test]
    fn fsync_each_syncs_all_and_names_a_missing_path() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..40).map(|i| dir.path().join(format!("f{i}"))).collect();
        for p in &paths {
            std::fs::write(p, b"x").unwrap();
        }
        fsync_each(&paths).unwrap();
        let mut with_missing = paths.clone();
        with_missing.insert(17, dir.path().join("missing"));
        let e = fsync_each(&with_missing).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn kernels_before_5_8_are_told_apart() {
        let cases = [
            ("4.18.0-553.el8_10.x86_64", Some(false)),
            ("5.4.0-200-generic\n", Some(false)),
            ("5.8.0", Some(true)),
            ("5.10.0-33-amd64", Some(true)),
            ("6.18.44-fc-v669", Some(true)),
            ("10.0", Some(true)),
            ("", None),
            ("linux", None),
        ];
        for (release, want) in cases {
            assert_eq!(release_at_least(release, (5, 8)), want, "{release:?}");
        }
    }
}
