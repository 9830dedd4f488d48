//! The pass-through filesystem's state and its durability model.
//!
//! The backing directory always holds the live view (what a page cache would show). Beside
//! it, faultfs keeps what a power cut would leave:
//!
//! * per file, while it has changes that were not made durable, its durable content
//!   (`base`, copied at the first change after its last sync) and the changes since, in
//!   order (writes with their data, truncations);
//! * a log of namespace operations (create, mkdir, symlink, link, unlink, rmdir, rename)
//!   not yet durable, each split into its effects on one directory entry
//!   (`dir/name: old inode -> new inode`). `fsync` of a directory makes its effects
//!   durable; an operation leaves the log once all its effects are.
//!
//! The durable view of a directory is then its live listing with each name touched by a
//! pending effect set back to that name's value before the first of them. [`State::cut`]
//! (in the `cut` submodule) builds that durable tree (or one with a chosen part of the
//! pending changes applied) beside the live one inside the backing directory, then
//! replaces the live one with it.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo};
use serde::{Deserialize, Serialize};

use crate::sys;

mod cut;

pub use cut::{CutMode, CutReport, SECTOR};

/// faultfs's own inode numbers (the kernel's node ids); 1 is the root.
pub(crate) type Ino = u64;

/// How long the kernel may cache entries and attributes. Every change goes through
/// faultfs, so the caches stay coherent; a cut happens with the mount frozen.
pub(crate) const TTL: Duration = Duration::from_secs(1);

/// How many of the last operations a cut report names.
const RECENT: usize = 16;

/// One operation as the log issued it, for the cut report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRecord {
    /// The operation (`write`, `fsync`, `fdatasync`, `fsyncdir`, `create`, `mkdir`,
    /// `rename`, `unlink`, `rmdir`, `link`, `symlink`, `truncate`, `open`, `read`, ...).
    pub op: String,
    /// Path inside the mount, relative to its root (`.` for the root itself; `a -> b`
    /// for a rename or link).
    pub path: String,
}

impl std::fmt::Display for OpRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.op, self.path)
    }
}

/// Injected errors. Counts start at the moment the fault is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Faults {
    /// The Nth fsync from now (1 = the next; files and directories, `fdatasync` included)
    /// fails with EIO, once. Its changes stay not durable.
    pub eio_fsync: Option<u64>,
    /// The Nth write from now fails with EIO, once, writing nothing.
    pub eio_write: Option<u64>,
    /// Bytes that may still be written; then ENOSPC. A write that crosses the limit
    /// writes the part that fits and returns that short count (the caller's retry of the
    /// rest then fails with ENOSPC).
    pub enospc_after: Option<u64>,
    /// Every change (writes, truncations, namespace operations, fsyncs, opening for
    /// writing) fails with EROFS.
    pub erofs: bool,
}

/// A change to a file's data not yet durable.
#[derive(Debug, Clone)]
enum DataOp {
    Write { seq: u64, off: u64, data: Vec<u8> },
    Truncate { seq: u64, size: u64 },
}

impl DataOp {
    fn seq(&self) -> u64 {
        match self {
            DataOp::Write { seq, .. } | DataOp::Truncate { seq, .. } => *seq,
        }
    }
}

/// A file's durable content and the changes made since.
#[derive(Debug, Default)]
struct Pending {
    base: Vec<u8>,
    ops: Vec<DataOp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

impl Kind {
    fn of(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// An inode faultfs tracks: the kernel looked it up, or the model needs it.
#[derive(Debug)]
struct Node {
    /// `O_PATH` descriptor: keeps the inode (and an unlinked file's data) reachable.
    fd: OwnedFd,
    kind: Kind,
    key: (u64, u64),
    /// References the kernel holds (lookups not yet forgotten).
    nlookup: u64,
    /// References from pending namespace effects.
    pins: u32,
    /// Open file handles.
    open: u32,
    data: Option<Pending>,
}

/// One directory entry changed by a namespace operation.
#[derive(Debug)]
struct Effect {
    dir: Ino,
    name: OsString,
    old: Option<Ino>,
    new: Option<Ino>,
    durable: bool,
}

#[derive(Debug)]
struct NsOp {
    effects: Vec<Effect>,
}

/// An open file.
#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) ino: Ino,
    pub(crate) file: Arc<File>,
    pub(crate) flags: i32,
}

/// A directory listing taken at `opendir`.
#[derive(Debug)]
pub(crate) struct DirHandle {
    pub(crate) entries: Vec<(OsString, u64, FileType)>,
}

/// Everything behind the mount, under one lock.
#[derive(Debug)]
pub(crate) struct State {
    backing: PathBuf,
    nodes: HashMap<Ino, Node>,
    by_key: HashMap<(u64, u64), Ino>,
    next_ino: Ino,
    ns: Vec<NsOp>,
    handles: HashMap<u64, Handle>,
    dirs: HashMap<u64, DirHandle>,
    next_fh: u64,
    seq: u64,
    pub(crate) frozen: bool,
    /// A cut happened: the backing directory holds what survived.
    pub(crate) cut_done: bool,
    pub(crate) faults: Faults,
    recent: VecDeque<OpRecord>,
}

type R<T> = Result<T, Errno>;

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH
    }
}

pub(crate) fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn attr(ino: Ino, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: file_type(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

impl State {
    /// The state of a fresh mount of `backing` (whose content is all durable).
    pub(crate) fn new(backing: &Path) -> io::Result<Self> {
        let fd = sys::open_root(backing)?;
        let st = sys::stat_fd(fd.as_raw_fd())?;
        let key = (st.st_dev, st.st_ino);
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                fd,
                kind: Kind::Dir,
                key,
                nlookup: 1,
                pins: 0,
                open: 0,
                data: None,
            },
        );
        let mut by_key = HashMap::new();
        by_key.insert(key, 1);
        Ok(State {
            backing: backing.to_path_buf(),
            nodes,
            by_key,
            next_ino: 2,
            ns: Vec::new(),
            handles: HashMap::new(),
            dirs: HashMap::new(),
            next_fh: 1,
            seq: 0,
            frozen: false,
            cut_done: false,
            faults: Faults::default(),
            recent: VecDeque::new(),
        })
    }

    fn node(&self, ino: Ino) -> R<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: Ino) -> R<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn fd(&self, ino: Ino) -> R<RawFd> {
        Ok(self.node(ino)?.fd.as_raw_fd())
    }

    fn live(&self) -> R<()> {
        if self.frozen { Err(Errno::EIO) } else { Ok(()) }
    }

    fn writable(&self) -> R<()> {
        self.live()?;
        if self.faults.erofs {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The path of `ino` inside the mount, for reports.
    fn path_of(&self, ino: Ino) -> String {
        let Ok(fd) = self.fd(ino) else {
            return format!("<inode {ino}>");
        };
        match std::fs::read_link(sys::proc_path(fd)) {
            Ok(p) => match p.strip_prefix(&self.backing) {
                Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
                Ok(rel) => rel.to_string_lossy().into_owned(),
                Err(_) => p.to_string_lossy().into_owned(),
            },
            Err(_) => format!("<inode {ino}>"),
        }
    }

    fn child_path(&self, parent: Ino, name: &OsStr) -> String {
        let p = self.path_of(parent);
        if p == "." {
            name.to_string_lossy().into_owned()
        } else {
            format!("{p}/{}", name.to_string_lossy())
        }
    }

    /// Notes an operation the log issued (for the cut report).
    pub(crate) fn record(
        &mut self,
        op: &str,
        ino: Ino,
        name: Option<&OsStr>,
        to: Option<(Ino, &OsStr)>,
    ) {
        if self.frozen {
            return;
        }
        let mut path = match name {
            Some(n) => self.child_path(ino, n),
            None => self.path_of(ino),
        };
        if let Some((p, n)) = to {
            path = format!("{path} -> {}", self.child_path(p, n));
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(OpRecord {
            op: op.to_string(),
            path,
        });
    }

    /// The node for the backing inode `st` found at `dir/name`, created if new.
    fn node_for(&mut self, dir: RawFd, name: &OsStr, st: &libc::stat) -> R<Ino> {
        let key = (st.st_dev, st.st_ino);
        if let Some(&ino) = self.by_key.get(&key) {
            return Ok(ino);
        }
        let fd = sys::open_path(dir, name).map_err(errno)?;
        // The entry may have been replaced between stat and open: trust the open.
        let st2 = sys::stat_fd(fd.as_raw_fd()).map_err(errno)?;
        let key = (st2.st_dev, st2.st_ino);
        if let Some(&ino) = self.by_key.get(&key) {
            return Ok(ino);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(
            ino,
            Node {
                fd,
                kind: Kind::of(st2.st_mode),
                key,
                nlookup: 0,
                pins: 0,
                open: 0,
                data: None,
            },
        );
        self.by_key.insert(key, ino);
        Ok(ino)
    }

    /// Drops a node nobody needs any more (no kernel reference, no pending effect, no
    /// open handle, no change that could still become durable).
    fn maybe_drop(&mut self, ino: Ino) {
        if ino == 1 {
            return;
        }
        let Some(n) = self.nodes.get(&ino) else {
            return;
        };
        if n.nlookup > 0 || n.pins > 0 || n.open > 0 {
            return;
        }
        if n.data.is_some() {
            // Pending changes still matter if a live name leads to the file.
            match sys::stat_fd(n.fd.as_raw_fd()) {
                Ok(st) if st.st_nlink > 0 => return,
                _ => {}
            }
        }
        if let Some(n) = self.nodes.remove(&ino) {
            self.by_key.remove(&n.key);
        }
    }

    fn pin(&mut self, ino: Option<Ino>) {
        if let Some(n) = ino.and_then(|i| self.nodes.get_mut(&i)) {
            n.pins += 1;
        }
    }

    fn unpin(&mut self, ino: Option<Ino>) {
        if let Some(i) = ino {
            if let Some(n) = self.nodes.get_mut(&i) {
                n.pins = n.pins.saturating_sub(1);
            }
            self.maybe_drop(i);
        }
    }

    /// Logs a namespace operation; its effects pin the inodes they name.
    fn log_ns(&mut self, effects: Vec<(Ino, OsString, Option<Ino>, Option<Ino>)>) {
        let mut op = NsOp {
            effects: Vec::new(),
        };
        for (dir, name, old, new) in effects {
            if old == new {
                continue;
            }
            self.pin(Some(dir));
            self.pin(old);
            self.pin(new);
            op.effects.push(Effect {
                dir,
                name,
                old,
                new,
                durable: false,
            });
        }
        if !op.effects.is_empty() {
            self.ns.push(op);
        }
    }

    /// The inode at `dir/name` in the live view, if any (tracked from now on).
    fn entry(&mut self, dir: Ino, name: &OsStr) -> R<Option<Ino>> {
        let dfd = self.fd(dir)?;
        match sys::stat_at(dfd, name) {
            Ok(st) => Ok(Some(self.node_for(dfd, name, &st)?)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }

    pub(crate) fn lookup(&mut self, parent: Ino, name: &OsStr) -> R<FileAttr> {
        self.live()?;
        let dfd = self.fd(parent)?;
        let st = sys::stat_at(dfd, name).map_err(errno)?;
        let ino = self.node_for(dfd, name, &st)?;
        self.node_mut(ino)?.nlookup += 1;
        Ok(attr(ino, &st))
    }

    pub(crate) fn forget(&mut self, ino: Ino, n: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.nlookup = node.nlookup.saturating_sub(n);
        }
        self.maybe_drop(ino);
    }

    pub(crate) fn getattr(&mut self, ino: Ino) -> R<FileAttr> {
        self.live()?;
        let st = sys::stat_fd(self.fd(ino)?).map_err(errno)?;
        Ok(attr(ino, &st))
    }

    /// Copies the file's durable content before its first change since its last sync.
    fn ensure_pending(&mut self, ino: Ino) -> R<()> {
        let node = self.node_mut(ino)?;
        if node.data.is_none() {
            let base = sys::read_all(node.fd.as_raw_fd()).map_err(errno)?;
            node.data = Some(Pending {
                base,
                ops: Vec::new(),
            });
        }
        Ok(())
    }

    fn push_data_op(&mut self, ino: Ino, op: DataOp) -> R<()> {
        if let Some(p) = self.node_mut(ino)?.data.as_mut() {
            p.ops.push(op);
        }
        Ok(())
    }

    /// Makes the file's data durable (fsync, fdatasync, O_SYNC write).
    fn make_durable(&mut self, ino: Ino) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.data = None;
        }
        self.maybe_drop(ino);
    }

    fn truncate(&mut self, ino: Ino, file: Option<&File>, size: u64) -> R<()> {
        self.ensure_pending(ino)?;
        match file {
            Some(f) => f.set_len(size).map_err(errno)?,
            None => {
                let f = sys::reopen(self.fd(ino)?, libc::O_WRONLY).map_err(errno)?;
                f.set_len(size).map_err(errno)?;
            }
        }
        let seq = self.next_seq();
        self.push_data_op(ino, DataOp::Truncate { seq, size })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn setattr(
        &mut self,
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<libc::timespec>,
        mtime: Option<libc::timespec>,
        fh: Option<u64>,
    ) -> R<FileAttr> {
        self.writable()?;
        let fd = self.fd(ino)?;
        let kind = self.node(ino)?.kind;
        if let Some(size) = size {
            if kind != Kind::File {
                return Err(Errno::EISDIR);
            }
            let file = fh
                .and_then(|h| self.handles.get(&h))
                .map(|h| h.file.clone());
            self.truncate(ino, file.as_deref(), size)?;
        }
        if let Some(mode) = mode
            && kind != Kind::Symlink
        {
            sys::chmod_fd(fd, mode).map_err(errno)?;
        }
        if uid.is_some() || gid.is_some() {
            sys::chown_fd(fd, uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX)).map_err(errno)?;
        }
        if (atime.is_some() || mtime.is_some()) && kind != Kind::Symlink {
            sys::utimes_fd(fd, atime, mtime).map_err(errno)?;
        }
        self.getattr(ino)
    }

    pub(crate) fn readlink(&mut self, ino: Ino) -> R<Vec<u8>> {
        self.live()?;
        let t = sys::readlink_at(self.fd(ino)?, OsStr::new("")).map_err(errno)?;
        Ok(t.as_bytes().to_vec())
    }

    fn new_entry(&mut self, parent: Ino, name: &OsStr) -> R<(Ino, FileAttr)> {
        let dfd = self.fd(parent)?;
        let st = sys::stat_at(dfd, name).map_err(errno)?;
        let ino = self.node_for(dfd, name, &st)?;
        self.node_mut(ino)?.nlookup += 1;
        Ok((ino, attr(ino, &st)))
    }

    pub(crate) fn mkdir(&mut self, parent: Ino, name: &OsStr, mode: u32) -> R<FileAttr> {
        self.writable()?;
        sys::mkdir_at(self.fd(parent)?, name, mode).map_err(errno)?;
        let (ino, a) = self.new_entry(parent, name)?;
        self.log_ns(vec![(parent, name.to_owned(), None, Some(ino))]);
        Ok(a)
    }

    pub(crate) fn symlink(&mut self, parent: Ino, name: &OsStr, target: &Path) -> R<FileAttr> {
        self.writable()?;
        sys::symlink_at(target.as_os_str(), self.fd(parent)?, name).map_err(errno)?;
        let (ino, a) = self.new_entry(parent, name)?;
        self.log_ns(vec![(parent, name.to_owned(), None, Some(ino))]);
        Ok(a)
    }

    pub(crate) fn link(&mut self, ino: Ino, parent: Ino, name: &OsStr) -> R<FileAttr> {
        self.writable()?;
        sys::link_fd(self.fd(ino)?, self.fd(parent)?, name).map_err(errno)?;
        let (ino2, a) = self.new_entry(parent, name)?;
        self.log_ns(vec![(parent, name.to_owned(), None, Some(ino2))]);
        Ok(a)
    }

    pub(crate) fn unlink(&mut self, parent: Ino, name: &OsStr, is_dir: bool) -> R<()> {
        self.writable()?;
        let old = self.entry(parent, name)?.ok_or(Errno::ENOENT)?;
        // Pinned before the unlink: the inode must outlive it in case the unlink is lost.
        self.pin(Some(old));
        let r = sys::unlink_at(self.fd(parent)?, name, is_dir).map_err(errno);
        if r.is_ok() {
            self.log_ns(vec![(parent, name.to_owned(), Some(old), None)]);
        }
        self.unpin(Some(old));
        r
    }

    pub(crate) fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        flags: u32,
    ) -> R<()> {
        self.writable()?;
        let src = self.entry(parent, name)?.ok_or(Errno::ENOENT)?;
        let dst = self.entry(newparent, newname)?;
        self.pin(Some(src));
        self.pin(dst);
        let r = sys::rename_at(self.fd(parent)?, name, self.fd(newparent)?, newname, flags)
            .map_err(errno);
        if r.is_ok() && Some(src) != dst {
            let effects = if flags & libc::RENAME_EXCHANGE != 0 {
                vec![
                    (parent, name.to_owned(), Some(src), dst),
                    (newparent, newname.to_owned(), dst, Some(src)),
                ]
            } else {
                vec![
                    (parent, name.to_owned(), Some(src), None),
                    (newparent, newname.to_owned(), dst, Some(src)),
                ]
            };
            self.log_ns(effects);
        }
        self.unpin(Some(src));
        self.unpin(dst);
        r
    }

    fn add_handle(&mut self, ino: Ino, file: File, flags: i32) -> R<u64> {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.node_mut(ino)?.open += 1;
        self.handles.insert(
            fh,
            Handle {
                ino,
                file: Arc::new(file),
                flags,
            },
        );
        Ok(fh)
    }

    /// Access mode and `O_TRUNC` are what the backing file is opened with: the sync
    /// flags are modelled, not passed on (the backing directory's own durability is not
    /// what is tested), and offsets come from the kernel (no `O_APPEND`).
    fn backing_flags(flags: i32) -> i32 {
        flags & libc::O_ACCMODE
    }

    pub(crate) fn open(&mut self, ino: Ino, flags: i32) -> R<u64> {
        self.live()?;
        let acc = flags & libc::O_ACCMODE;
        if acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            self.writable()?;
        }
        let file = sys::reopen(self.fd(ino)?, Self::backing_flags(flags)).map_err(errno)?;
        if flags & libc::O_TRUNC != 0 {
            self.truncate(ino, Some(&file), 0)?;
        }
        self.add_handle(ino, file, flags)
    }

    pub(crate) fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> R<(FileAttr, u64)> {
        self.writable()?;
        let dfd = self.fd(parent)?;
        let bflags = Self::backing_flags(flags);
        let (file, created) =
            match sys::open_at(dfd, name, bflags | libc::O_CREAT | libc::O_EXCL, mode) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL == 0 => {
                    (sys::open_at(dfd, name, bflags, 0).map_err(errno)?, false)
                }
                Err(e) => return Err(errno(e)),
            };
        let (ino, a) = self.new_entry(parent, name)?;
        if created {
            // Nothing of a new file is durable yet.
            self.node_mut(ino)?.data = Some(Pending::default());
            self.log_ns(vec![(parent, name.to_owned(), None, Some(ino))]);
        } else if flags & libc::O_TRUNC != 0 {
            self.truncate(ino, Some(&file), 0)?;
        }
        let fh = self.add_handle(ino, file, flags)?;
        Ok((a, fh))
    }

    /// The file of an open handle (read outside the lock).
    pub(crate) fn handle_file(&self, fh: u64) -> R<Arc<File>> {
        self.live()?;
        Ok(self.handles.get(&fh).ok_or(Errno::EBADF)?.file.clone())
    }

    pub(crate) fn write(&mut self, ino: Ino, fh: u64, off: u64, data: &[u8]) -> R<u32> {
        self.writable()?;
        if let Some(n) = self.faults.eio_write {
            if n <= 1 {
                self.faults.eio_write = None;
                return Err(Errno::EIO);
            }
            self.faults.eio_write = Some(n - 1);
        }
        let mut len = data.len();
        if let Some(left) = self.faults.enospc_after {
            if left == 0 && len > 0 {
                return Err(Errno::ENOSPC);
            }
            len = len.min(left as usize);
        }
        let (file, flags) = {
            let h = self.handles.get(&fh).ok_or(Errno::EBADF)?;
            (h.file.clone(), h.flags)
        };
        self.ensure_pending(ino)?;
        file.write_all_at(&data[..len], off).map_err(errno)?;
        if let Some(left) = self.faults.enospc_after.as_mut() {
            *left -= len as u64;
        }
        let seq = self.next_seq();
        self.push_data_op(
            ino,
            DataOp::Write {
                seq,
                off,
                data: data[..len].to_vec(),
            },
        )?;
        if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            // Linux follows an O_SYNC write with an fsync of the file (which is what
            // FUSE sees); the whole file's data is durable from here.
            self.make_durable(ino);
        }
        Ok(len as u32)
    }

    pub(crate) fn release(&mut self, fh: u64) {
        if let Some(h) = self.handles.remove(&fh) {
            if let Some(n) = self.nodes.get_mut(&h.ino) {
                n.open = n.open.saturating_sub(1);
            }
            self.maybe_drop(h.ino);
        }
    }

    fn sync_fault(&mut self) -> R<()> {
        self.writable()?;
        if let Some(n) = self.faults.eio_fsync {
            if n <= 1 {
                self.faults.eio_fsync = None;
                return Err(Errno::EIO);
            }
            self.faults.eio_fsync = Some(n - 1);
        }
        Ok(())
    }

    pub(crate) fn fsync(&mut self, ino: Ino) -> R<()> {
        self.sync_fault()?;
        self.node(ino)?;
        self.make_durable(ino);
        Ok(())
    }

    pub(crate) fn fsyncdir(&mut self, ino: Ino) -> R<()> {
        self.sync_fault()?;
        self.node(ino)?;
        for op in &mut self.ns {
            for e in &mut op.effects {
                if e.dir == ino {
                    e.durable = true;
                }
            }
        }
        let (done, keep): (Vec<NsOp>, Vec<NsOp>) = std::mem::take(&mut self.ns)
            .into_iter()
            .partition(|op| op.effects.iter().all(|e| e.durable));
        self.ns = keep;
        for op in done {
            for e in op.effects {
                self.unpin(Some(e.dir));
                self.unpin(e.old);
                self.unpin(e.new);
            }
        }
        Ok(())
    }

    pub(crate) fn opendir(&mut self, ino: Ino) -> R<u64> {
        self.live()?;
        let fd = self.fd(ino)?;
        let mut entries = vec![
            (OsString::from("."), ino, FileType::Directory),
            (OsString::from(".."), ino, FileType::Directory),
        ];
        let dev = sys::stat_fd(fd).map_err(errno)?.st_dev;
        for (name, bino, mode) in sys::list_dir(fd).map_err(errno)? {
            // A tracked inode's own number; otherwise a number from the backing inode
            // that cannot collide with faultfs's (which the kernel will learn on lookup).
            let ino = self
                .by_key
                .get(&(dev, bino))
                .copied()
                .unwrap_or(bino | (1 << 63));
            entries.push((name, ino, file_type(mode)));
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.dirs.insert(fh, DirHandle { entries });
        Ok(fh)
    }

    pub(crate) fn dir_entries(&self, fh: u64) -> R<&DirHandle> {
        self.live()?;
        self.dirs.get(&fh).ok_or(Errno::EBADF)
    }

    pub(crate) fn releasedir(&mut self, fh: u64) {
        self.dirs.remove(&fh);
    }

    pub(crate) fn statfs(&self) -> R<libc::statvfs> {
        self.live()?;
        sys::statvfs_fd(self.fd(1)?).map_err(errno)
    }
}
