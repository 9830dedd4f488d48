//! The FUSE side: fuser's [`Filesystem`] callbacks, delayed by the latency profile and
//! served by [`State`].
//!
//! Every callback first checks the freeze flag (an atomic, so a frozen mount answers EIO
//! at once, even while a cut holds the state lock), then runs the operation at once or,
//! when its kind has a latency, on the [`Scheduler`] after that delay. The state lock is
//! never held across a delay; reads run outside it.

use std::ffi::OsStr;
use std::os::unix::fs::FileExt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::profile::{OpKind, Profile};
use crate::rng::SplitMix64;
use crate::sched::{Expediter, Scheduler};
use crate::state::{State, TTL};

/// What the mount's threads, the control socket and the [`crate::Mount`] handle share.
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// Set by a cut (or teardown): every operation fails with EIO from then on.
    pub(crate) frozen: AtomicBool,
    pub(crate) latency: Mutex<(Profile, SplitMix64)>,
    /// The delay queue's handle, set once the filesystem is built.
    pub(crate) expediter: Mutex<Option<Expediter>>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // An operation that panicked leaves the state as consistent as a crash would:
        // go on rather than wedge the mount.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn delay(&self, op: OpKind) -> Duration {
        let mut l = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        let (profile, rng) = &mut *l;
        profile.get(op).sample(rng)
    }

    pub(crate) fn frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Freezes: operations fail with EIO from now on, queued ones at once.
    pub(crate) fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
        if let Some(e) = &*self.expediter.lock().unwrap_or_else(|e| e.into_inner()) {
            e.expedite();
        }
    }
}

/// A reply that can carry an error (every reply type used here).
trait Fail {
    fn fail(self, e: Errno);
}

macro_rules! fail_impl {
    ($($t:ty),*) => {$(
        impl Fail for $t {
            fn fail(self, e: Errno) {
                self.error(e)
            }
        }
    )*};
}
fail_impl!(
    ReplyEmpty,
    ReplyEntry,
    ReplyAttr,
    ReplyData,
    ReplyOpen,
    ReplyWrite,
    ReplyCreate,
    ReplyDirectory,
    ReplyStatfs
);

/// The filesystem handed to fuser.
pub(crate) struct FaultFs {
    pub(crate) shared: Arc<Shared>,
    sched: Option<Scheduler>,
}

impl FaultFs {
    pub(crate) fn new(shared: Arc<Shared>, delay_workers: usize) -> std::io::Result<Self> {
        let sched = Scheduler::new(delay_workers)?;
        *shared.expediter.lock().unwrap_or_else(|e| e.into_inner()) = Some(sched.expediter());
        Ok(FaultFs {
            shared,
            sched: Some(sched),
        })
    }

    /// Runs `f` now, or after `op`'s latency on a delay worker. A frozen mount fails at
    /// once; a panic in `f` drops the reply, which fuser answers with EIO.
    fn run<Rp, F>(&self, op: Option<OpKind>, reply: Rp, f: F)
    where
        Rp: Fail + Send + 'static,
        F: FnOnce(&Shared, Rp) + Send + 'static,
    {
        if self.shared.frozen() {
            return reply.fail(Errno::EIO);
        }
        let delay = op.map(|o| self.shared.delay(o)).unwrap_or_default();
        let shared = self.shared.clone();
        let job = move || {
            // Checked again: a freeze during the delay fails the operation (the
            // expedited queue runs it at once for that).
            if shared.frozen() {
                return reply.fail(Errno::EIO);
            }
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| f(&shared, reply)));
        };
        match &self.sched {
            Some(s) if !delay.is_zero() => s.after(delay, Box::new(job)),
            _ => job(),
        }
    }

    fn record(&self, op: &str, ino: INodeNo, name: Option<&OsStr>, to: Option<(INodeNo, &OsStr)>) {
        if !self.shared.frozen() {
            self.shared
                .lock()
                .record(op, ino.0, name, to.map(|(p, n)| (p.0, n)));
        }
    }
}

fn timespec(t: Option<TimeOrNow>) -> Option<libc::timespec> {
    t.map(|t| match t {
        TimeOrNow::Now => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        TimeOrNow::SpecificTime(st) => {
            let d = st.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    })
}

fn entry(reply: ReplyEntry, r: Result<fuser::FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for FaultFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }

    fn destroy(&mut self) {
        // Drops queued operations (answered with EIO) and stops the delay workers.
        self.sched.take();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.to_owned();
        self.run(Some(OpKind::Lookup), reply, move |s, reply| {
            entry(reply, s.lock().lookup(parent.0, &name))
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.lock().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.run(None, reply, move |s, reply| match s.lock().getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let op = if size.is_some() {
            "truncate"
        } else {
            "setattr"
        };
        self.record(op, ino, None, None);
        let (atime, mtime) = (timespec(atime), timespec(mtime));
        self.run(Some(OpKind::Setattr), reply, move |s, reply| {
            let r = s
                .lock()
                .setattr(ino.0, mode, uid, gid, size, atime, mtime, fh.map(|h| h.0));
            match r {
                Ok(a) => reply.attr(&TTL, &a),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.run(None, reply, move |s, reply| {
            match s.lock().readlink(ino.0) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(e),
            }
        });
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Devices, FIFOs and sockets are of no use to the log.
            return reply.error(Errno::EPERM);
        }
        self.record("create", parent, Some(name), None);
        let name = name.to_owned();
        self.run(Some(OpKind::Create), reply, move |s, reply| {
            let mut st = s.lock();
            let r = st.create(
                parent.0,
                &name,
                mode & !umask,
                libc::O_WRONLY | libc::O_EXCL,
            );
            entry(
                reply,
                r.map(|(a, fh)| {
                    st.release(fh);
                    a
                }),
            )
        });
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.record("mkdir", parent, Some(name), None);
        let name = name.to_owned();
        self.run(Some(OpKind::Create), reply, move |s, reply| {
            entry(reply, s.lock().mkdir(parent.0, &name, mode & !umask))
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.record("unlink", parent, Some(name), None);
        let name = name.to_owned();
        self.run(Some(OpKind::Unlink), reply, move |s, reply| {
            empty(reply, s.lock().unlink(parent.0, &name, false))
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.record("rmdir", parent, Some(name), None);
        let name = name.to_owned();
        self.run(Some(OpKind::Unlink), reply, move |s, reply| {
            empty(reply, s.lock().unlink(parent.0, &name, true))
        });
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.record("symlink", parent, Some(link_name), None);
        let (name, target) = (link_name.to_owned(), target.to_owned());
        self.run(Some(OpKind::Create), reply, move |s, reply| {
            entry(reply, s.lock().symlink(parent.0, &name, &target))
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.record("rename", parent, Some(name), Some((newparent, newname)));
        let (name, newname) = (name.to_owned(), newname.to_owned());
        self.run(Some(OpKind::Rename), reply, move |s, reply| {
            let r = s
                .lock()
                .rename(parent.0, &name, newparent.0, &newname, flags.bits());
            empty(reply, r)
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.record("link", ino, None, Some((newparent, newname)));
        let newname = newname.to_owned();
        self.run(Some(OpKind::Create), reply, move |s, reply| {
            entry(reply, s.lock().link(ino.0, newparent.0, &newname))
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.record("open", ino, None, None);
        self.run(Some(OpKind::Open), reply, move |s, reply| {
            match s.lock().open(ino.0, flags.0) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(e),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.run(Some(OpKind::Read), reply, move |s, reply| {
            // Outside the state lock: a large read must not stall other operations.
            let file = match s.lock().handle_file(fh.0) {
                Ok(f) => f,
                Err(e) => return reply.error(e),
            };
            let mut buf = vec![0u8; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match file.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return reply.error(e.into()),
                }
            }
            if s.frozen() {
                return reply.error(Errno::EIO);
            }
            reply.data(&buf[..n]);
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.record("write", ino, None, None);
        let data = data.to_vec();
        self.run(Some(OpKind::Write), reply, move |s, reply| {
            match s.lock().write(ino.0, fh.0, offset, &data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.run(None, reply, |_, reply| reply.ok());
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Even on a frozen mount: the descriptor must be closed.
        self.shared.lock().release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let kind = if datasync {
            OpKind::Fdatasync
        } else {
            OpKind::Fsync
        };
        self.record(kind.name(), ino, None, None);
        self.run(Some(kind), reply, move |s, reply| {
            empty(reply, s.lock().fsync(ino.0))
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.run(Some(OpKind::Open), reply, move |s, reply| {
            match s.lock().opendir(ino.0) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.run(None, reply, move |s, mut reply| {
            let st = s.lock();
            let d = match st.dir_entries(fh.0) {
                Ok(d) => d,
                Err(e) => return reply.error(e),
            };
            for (i, (name, ino, kind)) in d.entries.iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                    break;
                }
            }
            drop(st);
            reply.ok();
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.lock().releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.record("fsyncdir", ino, None, None);
        self.run(Some(OpKind::Fsyncdir), reply, move |s, reply| {
            empty(reply, s.lock().fsyncdir(ino.0))
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.run(None, reply, |s, reply| match s.lock().statfs() {
            Ok(v) => reply.statfs(
                v.f_blocks,
                v.f_bfree,
                v.f_bavail,
                v.f_files,
                v.f_ffree,
                v.f_bsize as u32,
                v.f_namemax as u32,
                v.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permissions are the backing directory's; faultfs runs as root for tests.
        self.run(None, reply, |_, reply| reply.ok());
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.record("create", parent, Some(name), None);
        let name = name.to_owned();
        self.run(Some(OpKind::Create), reply, move |s, reply| {
            match s.lock().create(parent.0, &name, mode & !umask, flags) {
                Ok((a, fh)) => {
                    reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty())
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        // Not modelled: callers fall back to writing.
        reply.error(Errno::EOPNOTSUPP);
    }

    // Extended attributes, lseek and copy_file_range are not modelled: ENOSYS makes the
    // kernel stop asking (xattrs then fail with EOPNOTSUPP; the others fall back to
    // generic code), without fuser's "not implemented" warnings.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS);
    }
}
