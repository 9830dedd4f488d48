//! The power cut: which of the changes not yet durable survive it ([`CutMode`]), the
//! surviving tree built beside the live one inside the backing directory and swapped in
//! for it ([`State::cut`]), and the report of what was lost ([`CutReport`]).
//!
//! What is durable, and so what a cut keeps at the least, is the parent module's model:
//! each file's content as of its last sync, and each directory's entries as of its last
//! `fsync`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{DataOp, Ino, Kind, OpRecord, State};
use crate::rng::SplitMix64;
use crate::sys;

/// Bytes per sector: a torn write keeps a whole number of sectors.
pub const SECTOR: u64 = 512;

/// Which of the changes not yet durable a power cut keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutMode {
    /// Lose every change that was not made durable.
    All,
    /// Like a real disk: of the pending namespace operations a prefix in order survives
    /// (a journal), of the pending data writes an arbitrary subset, some of them torn at
    /// a 512-byte sector boundary. The same seed on the same history gives the same
    /// result.
    Subset {
        /// Seed of the choices.
        seed: u64,
    },
}

/// What a power cut discarded, and what the log was doing when it came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutReport {
    /// How the pending changes were chosen.
    pub mode: CutMode,
    /// Pending data operations (writes and truncations not yet made durable).
    pub pending_data_ops: usize,
    /// Of those, the ones lost entirely.
    pub discarded_data_ops: usize,
    /// Of those, writes kept only in part (a prefix of whole sectors).
    pub torn_writes: usize,
    /// Pending namespace operations (creates, renames, unlinks ... not yet durable).
    pub pending_namespace_ops: usize,
    /// Of those, the ones lost.
    pub discarded_namespace_ops: usize,
    /// The last operations issued before the freeze, oldest first.
    pub last_ops: Vec<OpRecord>,
}

impl CutReport {
    /// Operations lost entirely or in part. A cut with none proves nothing.
    pub fn discarded(&self) -> usize {
        self.discarded_data_ops + self.discarded_namespace_ops + self.torn_writes
    }

    /// Operations that were pending at the cut.
    pub fn pending(&self) -> usize {
        self.pending_data_ops + self.pending_namespace_ops
    }
}

impl std::fmt::Display for CutReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            CutMode::All => "all".to_string(),
            CutMode::Subset { seed } => format!("subset (seed {seed})"),
        };
        write!(
            f,
            "power cut ({mode}): discarded {} of {} pending operations ({} of {} data, {} torn; \
             {} of {} namespace)",
            self.discarded(),
            self.pending(),
            self.discarded_data_ops,
            self.pending_data_ops,
            self.torn_writes,
            self.discarded_namespace_ops,
            self.pending_namespace_ops
        )?;
        if let Some(last) = self.last_ops.last() {
            write!(f, "; cut during {last}")?;
        }
        Ok(())
    }
}

/// Applies one data change to a file image.
fn apply(img: &mut Vec<u8>, op: &DataOp, keep: Option<usize>) {
    match op {
        DataOp::Write { off, data, .. } => {
            let data = &data[..keep.unwrap_or(data.len()).min(data.len())];
            let off = *off as usize;
            let end = off + data.len();
            if img.len() < end {
                img.resize(end, 0);
            }
            img[off..end].copy_from_slice(data);
        }
        DataOp::Truncate { size, .. } => img.resize(*size as usize, 0),
    }
}

impl State {
    /// The power cut: see the module documentation. The caller has frozen the mount.
    pub(crate) fn cut(&mut self, mode: CutMode) -> io::Result<CutReport> {
        self.frozen = true;
        self.cut_done = true;
        let mut rng = SplitMix64::new(match mode {
            CutMode::All => 0,
            CutMode::Subset { seed } => seed,
        });
        let subset = matches!(mode, CutMode::Subset { .. });

        // Namespace: a prefix of the pending operations survives (none for `All`).
        let n_ns = self.ns.len();
        let kept_ns = if subset {
            rng.below(n_ns as u64 + 1) as usize
        } else {
            0
        };
        let mut names: HashMap<Ino, BTreeMap<OsString, Option<Ino>>> = HashMap::new();
        for (i, op) in self.ns.iter().enumerate() {
            for e in op.effects.iter().filter(|e| !e.durable) {
                let slot = names
                    .entry(e.dir)
                    .or_default()
                    .entry(e.name.clone())
                    .or_insert(e.old);
                if i < kept_ns {
                    *slot = e.new;
                }
            }
        }

        // Data: in the order the writes were issued, keep each with probability 1/2 and
        // tear a third of the kept ones that span a sector boundary.
        let mut all_ops: Vec<(u64, Ino, usize)> = Vec::new();
        for (&ino, n) in &self.nodes {
            if let Some(p) = &n.data {
                for (i, op) in p.ops.iter().enumerate() {
                    all_ops.push((op.seq(), ino, i));
                }
            }
        }
        all_ops.sort_unstable();
        let mut choice: HashMap<(Ino, usize), Option<usize>> = HashMap::new();
        let (mut discarded_data, mut torn) = (0, 0);
        for &(_, ino, i) in &all_ops {
            let keep = if subset && rng.chance(1, 2) {
                let op = self
                    .nodes
                    .get(&ino)
                    .and_then(|n| n.data.as_ref())
                    .map(|p| &p.ops[i]);
                match op {
                    Some(DataOp::Write { off, data, .. }) => {
                        // Sector boundaries strictly inside the write.
                        let first = (off / SECTOR + 1) * SECTOR;
                        let end = off + data.len() as u64;
                        let inside = if first < end {
                            (end - 1 - first) / SECTOR + 1
                        } else {
                            0
                        };
                        if inside > 0 && rng.chance(1, 3) {
                            torn += 1;
                            let b = first + rng.below(inside) * SECTOR;
                            Some((b - off) as usize)
                        } else {
                            Some(usize::MAX)
                        }
                    }
                    _ => Some(usize::MAX),
                }
            } else {
                discarded_data += 1;
                None
            };
            choice.insert((ino, i), keep);
        }
        let mut images: HashMap<Ino, Vec<u8>> = HashMap::new();
        for (&ino, n) in &self.nodes {
            if let Some(p) = &n.data {
                let mut img = p.base.clone();
                for (i, op) in p.ops.iter().enumerate() {
                    if let Some(Some(k)) = choice.get(&(ino, i)) {
                        apply(&mut img, op, Some(*k));
                    }
                }
                images.insert(ino, img);
            }
        }

        // Build the surviving tree beside the live one, then swap.
        let staging = OsString::from(format!(
            ".faultfs-cut-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let root_fd = self
            .fd(1)
            .map_err(|e| io::Error::from_raw_os_error(e.code()))?;
        sys::mkdir_at(root_fd, &staging, 0o700)?;
        let mut b = Builder {
            st: self,
            names: &names,
            images: &images,
            staging: &staging,
            files: HashMap::new(),
            dirs: HashSet::new(),
        };
        b.dir(root_fd, Some(1), PathBuf::new())?;
        // Writes kept to a file that no surviving name leads to are lost all the same.
        let staged = b.files;
        for (&ino, n) in &self.nodes {
            let Some(p) = &n.data else { continue };
            if staged.contains_key(&n.key) {
                continue;
            }
            for i in 0..p.ops.len() {
                if let Some(Some(k)) = choice.get(&(ino, i)) {
                    discarded_data += 1;
                    if *k != usize::MAX {
                        torn -= 1;
                    }
                }
            }
        }
        for e in std::fs::read_dir(&self.backing)? {
            let e = e?;
            if e.file_name() == staging {
                continue;
            }
            if e.file_type()?.is_dir() {
                std::fs::remove_dir_all(e.path())?;
            } else {
                std::fs::remove_file(e.path())?;
            }
        }
        let staged = self.backing.join(&staging);
        for e in std::fs::read_dir(&staged)? {
            let e = e?;
            std::fs::rename(e.path(), self.backing.join(e.file_name()))?;
        }
        std::fs::remove_dir(&staged)?;

        Ok(CutReport {
            mode,
            pending_data_ops: all_ops.len(),
            discarded_data_ops: discarded_data,
            torn_writes: torn,
            pending_namespace_ops: n_ns,
            discarded_namespace_ops: n_ns - kept_ns,
            last_ops: self.recent.iter().cloned().collect(),
        })
    }
}

/// Copies the durable tree into the staging directory.
struct Builder<'a> {
    st: &'a State,
    names: &'a HashMap<Ino, BTreeMap<OsString, Option<Ino>>>,
    images: &'a HashMap<Ino, Vec<u8>>,
    staging: &'a OsStr,
    /// Backing inodes already staged, by key, with their staged path (hard links).
    files: HashMap<(u64, u64), PathBuf>,
    /// Directories already staged (a subset cut can reach one twice).
    dirs: HashSet<(u64, u64)>,
}

enum Src {
    /// An entry of the live listing that no pending effect touches.
    Live,
    /// A tracked inode.
    Node(Ino),
}

impl Builder<'_> {
    /// Stages the durable content of the directory `fd` (tracked as `ino`, if it is) at
    /// `rel` under the staging directory.
    fn dir(&mut self, fd: RawFd, ino: Option<Ino>, rel: PathBuf) -> io::Result<()> {
        let mut entries: BTreeMap<OsString, Src> = BTreeMap::new();
        for (name, _, _) in sys::list_dir(fd)? {
            if ino == Some(1) && name == self.staging {
                continue;
            }
            entries.insert(name, Src::Live);
        }
        if let Some(changed) = ino.and_then(|i| self.names.get(&i)) {
            for (name, v) in changed {
                match v {
                    Some(i) => entries.insert(name.clone(), Src::Node(*i)),
                    None => entries.remove(name),
                };
            }
        }
        for (name, src) in entries {
            let target = rel.join(&name);
            // The tracked inode and an O_PATH descriptor to it.
            let (node, opened);
            match src {
                Src::Node(i) => {
                    node = Some(i);
                    opened = None;
                }
                Src::Live => {
                    let st = match sys::stat_at(fd, &name) {
                        Ok(st) => st,
                        // Gone since the listing (cannot happen while frozen).
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                        Err(e) => return Err(e),
                    };
                    node = self.st.by_key.get(&(st.st_dev, st.st_ino)).copied();
                    opened = if node.is_none() {
                        Some(sys::open_path(fd, &name)?)
                    } else {
                        None
                    };
                }
            }
            let efd = match (node, &opened) {
                (Some(i), _) => match self.st.nodes.get(&i) {
                    Some(n) => n.fd.as_raw_fd(),
                    None => continue,
                },
                (None, Some(o)) => o.as_raw_fd(),
                (None, None) => continue,
            };
            let st = sys::stat_fd(efd)?;
            let key = (st.st_dev, st.st_ino);
            let dest = self.staging_path(&target);
            match Kind::of(st.st_mode) {
                Kind::Dir => {
                    if !self.dirs.insert(key) {
                        continue;
                    }
                    std::fs::create_dir(&dest)?;
                    std::fs::set_permissions(
                        &dest,
                        std::os::unix::fs::PermissionsExt::from_mode(st.st_mode & 0o7777),
                    )?;
                    self.dir(efd, node, target)?;
                }
                Kind::Symlink => {
                    let t = sys::readlink_at(efd, OsStr::new(""))?;
                    std::os::unix::fs::symlink(t, &dest)?;
                }
                Kind::File => {
                    if let Some(first) = self.files.get(&key) {
                        std::fs::hard_link(self.staging_path(first), &dest)?;
                        continue;
                    }
                    if let Some(img) = node.and_then(|i| self.images.get(&i)) {
                        let mut f = std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(st.st_mode & 0o7777)
                            .open(&dest)?;
                        f.write_all(img)?;
                    } else if st.st_nlink == 0 || sys::link_fd_to_path(efd, &dest).is_err() {
                        // Unlinked in the live view (the unlink did not survive), or not
                        // linkable: copy its data.
                        let data = sys::read_all(efd)?;
                        let mut f = std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(st.st_mode & 0o7777)
                            .open(&dest)?;
                        f.write_all(&data)?;
                    }
                    // Otherwise linked: unchanged since its last sync, the live inode is
                    // the durable one.
                    self.files.insert(key, target);
                }
                Kind::Other => {}
            }
        }
        Ok(())
    }

    fn staging_path(&self, rel: &Path) -> PathBuf {
        self.st.backing.join(self.staging).join(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_writes_and_truncates() {
        let mut img = b"hello".to_vec();
        apply(
            &mut img,
            &DataOp::Write {
                seq: 1,
                off: 7,
                data: b"xy".to_vec(),
            },
            None,
        );
        assert_eq!(img, b"hello\0\0xy");
        apply(&mut img, &DataOp::Truncate { seq: 2, size: 2 }, None);
        assert_eq!(img, b"he");
        apply(
            &mut img,
            &DataOp::Write {
                seq: 3,
                off: 0,
                data: b"abcd".to_vec(),
            },
            Some(1),
        );
        assert_eq!(img, b"ae");
    }
}
