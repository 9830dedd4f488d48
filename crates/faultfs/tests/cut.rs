//! Power cuts: what survives is exactly what was made durable (or, in subset mode, a
//! seeded choice of the rest), and a new mount of the backing directory shows it.

mod common;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use common::*;
use faultfs::{CutMode, CutReport};

/// Runs `f` on a fresh mount of `d`, then cuts with `mode`, unmounts, and returns the
/// report.
fn run_and_cut(
    d: &Dirs,
    mode: CutMode,
    f: impl FnOnce(&std::path::Path) + Send + 'static,
) -> CutReport {
    let m = mount(d);
    let mnt = d.mnt.clone();
    bounded(60, move || f(&mnt));
    let r = m.cut(mode).unwrap();
    drop(m);
    assert!(!is_mounted(&d.mnt));
    r
}

#[test]
fn cut_all_loses_unsynced_data_and_keeps_synced() {
    let d = dirs();
    std::fs::write(d.backing.join("old"), b"durable").unwrap();
    std::fs::write(d.backing.join("synced"), b"before").unwrap();
    let r = run_and_cut(&d, CutMode::All, |mnt| {
        std::fs::write(mnt.join("old"), b"lost lost lost").unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(mnt.join("synced"))
            .unwrap();
        f.write_all(b"after").unwrap();
        f.sync_all().unwrap();
    });
    assert!(r.discarded() > 0, "{r}");
    assert_eq!(std::fs::read(d.backing.join("old")).unwrap(), b"durable");
    assert_eq!(std::fs::read(d.backing.join("synced")).unwrap(), b"after");
    // A new mount shows the same.
    let m = mount(&d);
    assert_eq!(std::fs::read(d.mnt.join("old")).unwrap(), b"durable");
    drop(m);
}

#[test]
fn a_new_file_needs_its_directory_synced() {
    let d = dirs();
    std::fs::create_dir(d.backing.join("dir")).unwrap();
    let r = run_and_cut(&d, CutMode::All, |mnt| {
        // File and directory synced: survives.
        write_synced(&mnt.join("dir/kept"), b"data");
        // Directory synced, file not: the name survives, the data does not.
        std::fs::write(mnt.join("dir/empty"), b"never synced").unwrap();
        sync_dir(&mnt.join("dir"));
        // File synced, directory not (since): the name is lost (strict POSIX).
        write_synced(&mnt.join("dir/lost"), b"data");
    });
    assert_eq!(std::fs::read(d.backing.join("dir/kept")).unwrap(), b"data");
    assert!(!d.backing.join("dir/lost").exists());
    assert_eq!(std::fs::read(d.backing.join("dir/empty")).unwrap(), b"");
    assert!(r.discarded() >= 1, "{r}");
}

#[test]
fn a_new_directory_needs_its_parent_synced() {
    let d = dirs();
    run_and_cut(&d, CutMode::All, |mnt| {
        std::fs::create_dir(mnt.join("b")).unwrap();
        write_synced(&mnt.join("b/f"), b"y");
        sync_dir(&mnt.join("b"));
        sync_dir(mnt);
        // Its own content synced, but the parent not since the mkdir.
        std::fs::create_dir(mnt.join("a")).unwrap();
        write_synced(&mnt.join("a/f"), b"x");
        sync_dir(&mnt.join("a"));
        std::fs::create_dir(mnt.join("c")).unwrap();
    });
    assert!(!d.backing.join("a").exists());
    assert_eq!(std::fs::read(d.backing.join("b/f")).unwrap(), b"y");
    assert!(!d.backing.join("c").exists());
}

#[test]
fn a_rename_not_yet_durable_reverts() {
    let d = dirs();
    std::fs::write(d.backing.join("target"), b"v1").unwrap();
    std::fs::create_dir(d.backing.join("sub")).unwrap();
    std::fs::write(d.backing.join("sub/target2"), b"v1").unwrap();
    let r = run_and_cut(&d, CutMode::All, |mnt| {
        // The classic: temp file, fsync, rename over the target; without the directory
        // fsync the rename is not durable.
        write_synced(&mnt.join("tmp"), b"v2");
        sync_dir(mnt);
        std::fs::rename(mnt.join("tmp"), mnt.join("target")).unwrap();
        // The same with the directory fsync: durable.
        write_synced(&mnt.join("sub/tmp2"), b"v2");
        std::fs::rename(mnt.join("sub/tmp2"), mnt.join("sub/target2")).unwrap();
        sync_dir(&mnt.join("sub"));
    });
    assert_eq!(std::fs::read(d.backing.join("target")).unwrap(), b"v1");
    assert_eq!(std::fs::read(d.backing.join("tmp")).unwrap(), b"v2");
    assert_eq!(std::fs::read(d.backing.join("sub/target2")).unwrap(), b"v2");
    assert!(!d.backing.join("sub/tmp2").exists());
    // The report names what the log was doing last.
    let last = r.last_ops.last().unwrap();
    assert_eq!((last.op.as_str(), last.path.as_str()), ("fsyncdir", "sub"));
    assert!(
        r.last_ops
            .iter()
            .any(|o| o.op == "rename" && o.path == "tmp -> target"),
        "{:?}",
        r.last_ops
    );
    assert_eq!(r.discarded_namespace_ops, 1, "{r}");
}

#[test]
fn a_rename_across_directories_needs_both_synced() {
    let d = dirs();
    for sub in ["a", "b", "c", "e"] {
        std::fs::create_dir(d.backing.join(sub)).unwrap();
    }
    std::fs::write(d.backing.join("a/f"), b"f").unwrap();
    std::fs::write(d.backing.join("c/g"), b"g").unwrap();
    run_and_cut(&d, CutMode::All, |mnt| {
        // Only the source directory synced: the file is in neither (strict model).
        std::fs::rename(mnt.join("a/f"), mnt.join("b/f")).unwrap();
        sync_dir(&mnt.join("a"));
        // Both synced: moved.
        std::fs::rename(mnt.join("c/g"), mnt.join("e/g")).unwrap();
        sync_dir(&mnt.join("c"));
        sync_dir(&mnt.join("e"));
    });
    assert!(!d.backing.join("a/f").exists());
    assert!(!d.backing.join("b/f").exists());
    assert!(!d.backing.join("c/g").exists());
    assert_eq!(std::fs::read(d.backing.join("e/g")).unwrap(), b"g");
}

#[test]
fn an_unlink_not_yet_durable_reverts_with_the_data() {
    let d = dirs();
    std::fs::write(d.backing.join("gone"), b"keep me").unwrap();
    std::fs::write(d.backing.join("really-gone"), b"bye").unwrap();
    std::fs::create_dir_all(d.backing.join("dir/sub")).unwrap();
    run_and_cut(&d, CutMode::All, |mnt| {
        std::fs::remove_file(mnt.join("gone")).unwrap();
        std::fs::remove_file(mnt.join("really-gone")).unwrap();
        std::fs::remove_dir(mnt.join("dir/sub")).unwrap();
        sync_dir(mnt);
    });
    // The unlink of `gone` was made durable by the root fsync as well: both are gone.
    assert!(!d.backing.join("gone").exists());
    assert!(!d.backing.join("really-gone").exists());
    // `dir` was not synced: the rmdir is lost.
    assert!(d.backing.join("dir/sub").is_dir());

    let d = dirs();
    std::fs::write(d.backing.join("gone"), b"keep me").unwrap();
    run_and_cut(&d, CutMode::All, |mnt| {
        std::fs::remove_file(mnt.join("gone")).unwrap();
    });
    assert_eq!(std::fs::read(d.backing.join("gone")).unwrap(), b"keep me");
}

#[test]
fn the_posix_backend_pattern_survives_when_synced() {
    // tlogd's POSIX backend: temp file, fsync, hard link into place, unlink the temp,
    // fsync the directory.
    let d = dirs();
    std::fs::create_dir_all(d.backing.join("tile/0")).unwrap();
    run_and_cut(&d, CutMode::All, |mnt| {
        let dir = mnt.join("tile/0");
        write_synced(&dir.join(".tmp1"), b"tile bytes");
        std::fs::hard_link(dir.join(".tmp1"), dir.join("x001")).unwrap();
        std::fs::remove_file(dir.join(".tmp1")).unwrap();
        sync_dir(&dir);
        // A second one whose directory fsync never came.
        write_synced(&dir.join(".tmp2"), b"tile 2");
        std::fs::hard_link(dir.join(".tmp2"), dir.join("x002")).unwrap();
        std::fs::remove_file(dir.join(".tmp2")).unwrap();
    });
    let t = tree(&d.backing);
    let keys: Vec<&str> = t.keys().map(|s| s.as_str()).collect();
    assert_eq!(keys, ["tile", "tile/0", "tile/0/x001"]);
    assert_eq!(t["tile/0/x001"].as_deref(), Some(&b"tile bytes"[..]));
}

#[test]
fn fdatasync_and_o_sync_make_data_durable() {
    let d = dirs();
    for f in ["a", "b", "c"] {
        std::fs::write(d.backing.join(f), b"old").unwrap();
    }
    run_and_cut(&d, CutMode::All, |mnt| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("a"))
            .unwrap();
        f.write_all(b"new a").unwrap();
        f.sync_data().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_SYNC)
            .open(mnt.join("b"))
            .unwrap();
        f.write_all(b"new b").unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .open(mnt.join("c"))
            .unwrap();
        f.write_all(b"new c").unwrap();
    });
    assert_eq!(std::fs::read(d.backing.join("a")).unwrap(), b"new a");
    assert_eq!(std::fs::read(d.backing.join("b")).unwrap(), b"new b");
    assert_eq!(std::fs::read(d.backing.join("c")).unwrap(), b"new c");
}

#[test]
fn syncfs_does_not_reach_faultfs_so_it_makes_nothing_durable() {
    // FUSE does not pass syncfs(2) on to a /dev/fuse server (see the crate's findings),
    // so on this filesystem data "made durable" by syncfs is lost in a cut.
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"old").unwrap();
    run_and_cut(&d, CutMode::All, |mnt| {
        std::fs::write(mnt.join("f"), b"new").unwrap();
        std::fs::write(mnt.join("g"), b"new file").unwrap();
        let dir = std::fs::File::open(mnt).unwrap();
        // SAFETY: a valid descriptor.
        assert_eq!(unsafe { libc::syncfs(dir.as_raw_fd()) }, 0);
        // SAFETY: no arguments.
        unsafe { libc::sync() };
    });
    assert_eq!(std::fs::read(d.backing.join("f")).unwrap(), b"old");
    assert!(!d.backing.join("g").exists());
}

#[test]
fn untouched_trees_survive_a_cut_intact() {
    let d = dirs();
    std::fs::create_dir_all(d.backing.join("a/b/c")).unwrap();
    std::fs::write(d.backing.join("a/b/c/f"), b"deep").unwrap();
    std::fs::write(d.backing.join("a/g"), b"g").unwrap();
    std::fs::hard_link(d.backing.join("a/g"), d.backing.join("a/b/g2")).unwrap();
    std::os::unix::fs::symlink("b/c/f", d.backing.join("a/sym")).unwrap();
    let before = tree(&d.backing);
    let r = run_and_cut(&d, CutMode::All, |mnt| {
        // Only reads.
        assert_eq!(std::fs::read(mnt.join("a/b/c/f")).unwrap(), b"deep");
        assert_eq!(std::fs::read_dir(mnt.join("a")).unwrap().count(), 3);
    });
    assert_eq!(r.pending(), 0, "{r}");
    assert_eq!(tree(&d.backing), before);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(d.backing.join("a/g")).unwrap().nlink(), 2);
}

/// A history with many pending writes (some multi-sector, so they can tear) and
/// namespace operations.
fn busy_history(mnt: &std::path::Path) {
    std::fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..8u8 {
        let mut f = std::fs::File::create(mnt.join(format!("d/f{i}"))).unwrap();
        for j in 0..6u8 {
            f.write_all(&vec![i * 16 + j; 1000]).unwrap();
        }
        if i % 3 == 0 {
            f.sync_all().unwrap();
            f.write_all(b"after sync").unwrap();
        }
    }
    std::fs::rename(mnt.join("d/f1"), mnt.join("d/r1")).unwrap();
    std::fs::remove_file(mnt.join("d/f2")).unwrap();
    std::fs::write(mnt.join("top"), vec![7u8; 5000]).unwrap();
}

#[test]
fn subset_cuts_are_reproducible_and_discard_something() {
    let mut results = Vec::new();
    for _ in 0..2 {
        let d = dirs();
        let r = run_and_cut(&d, CutMode::Subset { seed: 42 }, busy_history);
        results.push((r, tree(&d.backing)));
    }
    let (r1, t1) = &results[0];
    let (r2, t2) = &results[1];
    assert!(r1.discarded() > 0, "{r1}");
    assert!(
        r1.pending() > r1.discarded(),
        "a subset cut keeps something: {r1}"
    );
    assert_eq!(r1.discarded(), r2.discarded());
    assert_eq!(r1.torn_writes, r2.torn_writes);
    assert_eq!(t1, t2, "same seed, same history: same survivors");

    // Over a few seeds, tearing happens, and torn data is whole sectors of the write.
    let mut torn = 0;
    for seed in 0..6 {
        let d = dirs();
        let r = run_and_cut(&d, CutMode::Subset { seed }, |mnt| {
            for i in 0..4 {
                std::fs::write(mnt.join(format!("w{i}")), vec![0xAAu8; 4096]).unwrap();
            }
        });
        torn += r.torn_writes;
        for i in 0..4 {
            // A name survives only if the namespace prefix kept its create.
            if let Ok(data) = std::fs::read(d.backing.join(format!("w{i}"))) {
                assert_eq!(data.len() % 512, 0, "torn at a sector boundary");
                assert!(data.iter().all(|&b| b == 0xAA));
            }
        }
    }
    assert!(torn > 0, "no write was torn in 6 seeds x 4 writes");
}

#[test]
fn a_second_cut_is_refused() {
    let d = dirs();
    let m = mount(&d);
    m.cut(CutMode::All).unwrap();
    assert!(matches!(m.cut(CutMode::All), Err(faultfs::Error::Frozen)));
}
