//! Thin wrappers over the `*at` system calls faultfs passes operations through with.
//!
//! faultfs holds an `O_PATH` descriptor for every inode it tracks and works relative to
//! those descriptors, never with paths: a rename of a directory then cannot leave stale
//! paths behind, and an unlinked file stays reachable (its content is needed if the
//! unlink is lost in a power cut).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The path through which an `O_PATH` descriptor can be reopened for I/O.
pub(crate) fn proc_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// `openat(dir, name, O_PATH | O_NOFOLLOW)`.
pub(crate) fn open_path(dir: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: valid C string; the returned descriptor is owned by the OwnedFd.
    let fd = check(unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fd was just returned by openat and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(path, O_PATH | O_DIRECTORY)` of the backing root.
pub(crate) fn open_root(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: as in open_path.
    let fd = check(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: as in open_path.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags, mode)`, returning a file for I/O.
pub(crate) fn open_at(dir: RawFd, name: &OsStr, flags: i32, mode: u32) -> io::Result<File> {
    let c = cstr(name)?;
    // SAFETY: as in open_path.
    let fd = check(unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: as in open_path.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Reopens an `O_PATH` descriptor with real access `flags` (through `/proc/self/fd`).
pub(crate) fn reopen(fd: RawFd, flags: i32) -> io::Result<File> {
    let c = cstr(proc_path(fd).as_os_str())?;
    // SAFETY: as in open_path.
    let nfd = check(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: as in open_path.
    Ok(unsafe { File::from_raw_fd(nfd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; an empty name stats `dir` itself.
pub(crate) fn stat_at(dir: RawFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    let mut flags = libc::AT_SYMLINK_NOFOLLOW;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: zeroed stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    check(unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

/// `fstat` of a descriptor (`O_PATH` descriptors included).
pub(crate) fn stat_fd(fd: RawFd) -> io::Result<libc::stat> {
    stat_at(fd, OsStr::new(""))
}

/// `mkdirat`.
pub(crate) fn mkdir_at(dir: RawFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid C string.
    check(unsafe { libc::mkdirat(dir, c.as_ptr(), mode as libc::mode_t) }).map(|_| ())
}

/// `unlinkat` (with `AT_REMOVEDIR` for a directory).
pub(crate) fn unlink_at(dir: RawFd, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let c = cstr(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: valid C string.
    check(unsafe { libc::unlinkat(dir, c.as_ptr(), flags) }).map(|_| ())
}

/// `renameat2`.
pub(crate) fn rename_at(
    from_dir: RawFd,
    from: &OsStr,
    to_dir: RawFd,
    to: &OsStr,
    flags: u32,
) -> io::Result<()> {
    let a = cstr(from)?;
    let b = cstr(to)?;
    // SAFETY: valid C strings.
    check(unsafe { libc::renameat2(from_dir, a.as_ptr(), to_dir, b.as_ptr(), flags) }).map(|_| ())
}

/// A hard link `to_dir/to` of the inode behind the `O_PATH` descriptor `fd`.
pub(crate) fn link_fd(fd: RawFd, to_dir: RawFd, to: &OsStr) -> io::Result<()> {
    let b = cstr(to)?;
    let p = cstr(proc_path(fd).as_os_str())?;
    // Through /proc with AT_SYMLINK_FOLLOW: AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH.
    // SAFETY: valid C strings.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            p.as_ptr(),
            to_dir,
            b.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(|_| ())
}

/// `symlinkat(target, dir, name)`.
pub(crate) fn symlink_at(target: &OsStr, dir: RawFd, name: &OsStr) -> io::Result<()> {
    let t = cstr(target)?;
    let n = cstr(name)?;
    // SAFETY: valid C strings.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir, n.as_ptr()) }).map(|_| ())
}

/// The target of the symlink `dir/name` (an empty name reads `dir` itself).
pub(crate) fn readlink_at(dir: RawFd, name: &OsStr) -> io::Result<OsString> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: buf is writable for its length.
    let n = unsafe { libc::readlinkat(dir, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

/// The entries of the directory behind `fd` (without `.` and `..`): name, backing
/// inode, and file type (from `d_type`, or a stat where the filesystem gives none).
pub(crate) fn list_dir(fd: RawFd) -> io::Result<Vec<(OsString, u64, u32)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(proc_path(fd))? {
        let e = e?;
        let ft = e.file_type()?;
        use std::os::unix::fs::{DirEntryExt, FileTypeExt};
        let mode = if ft.is_dir() {
            libc::S_IFDIR
        } else if ft.is_symlink() {
            libc::S_IFLNK
        } else if ft.is_file() {
            libc::S_IFREG
        } else if ft.is_fifo() {
            libc::S_IFIFO
        } else if ft.is_socket() {
            libc::S_IFSOCK
        } else if ft.is_char_device() {
            libc::S_IFCHR
        } else {
            libc::S_IFBLK
        };
        out.push((e.file_name(), e.ino(), mode));
    }
    Ok(out)
}

/// `fchmodat` through `/proc` (chmod does not take `O_PATH` descriptors).
pub(crate) fn chmod_fd(fd: RawFd, mode: u32) -> io::Result<()> {
    let p = cstr(proc_path(fd).as_os_str())?;
    // SAFETY: valid C string.
    check(unsafe { libc::chmod(p.as_ptr(), (mode & 0o7777) as libc::mode_t) }).map(|_| ())
}

/// `fchownat(fd, "", AT_EMPTY_PATH)`; `u32::MAX` leaves an id unchanged.
pub(crate) fn chown_fd(fd: RawFd, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: empty C string literal.
    check(unsafe {
        libc::fchownat(
            fd,
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(|_| ())
}

/// `utimensat` through `/proc`; `None` leaves a time unchanged.
pub(crate) fn utimes_fd(
    fd: RawFd,
    atime: Option<libc::timespec>,
    mtime: Option<libc::timespec>,
) -> io::Result<()> {
    let omit = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    };
    let times = [atime.unwrap_or(omit), mtime.unwrap_or(omit)];
    let p = cstr(proc_path(fd).as_os_str())?;
    // SAFETY: valid C string and two timespecs.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) }).map(|_| ())
}

/// `fstatvfs` of the filesystem holding `fd`.
pub(crate) fn statvfs_fd(fd: RawFd) -> io::Result<libc::statvfs> {
    let p = cstr(proc_path(fd).as_os_str())?;
    // SAFETY: zeroed statvfs is a valid out-buffer.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    check(unsafe { libc::statvfs(p.as_ptr(), &mut st) })?;
    Ok(st)
}

/// The whole content of the file behind an `O_PATH` descriptor.
pub(crate) fn read_all(fd: RawFd) -> io::Result<Vec<u8>> {
    std::fs::read(proc_path(fd))
}

/// Raises the open-file limit to its hard maximum: faultfs keeps a descriptor per
/// tracked inode.
pub(crate) fn raise_nofile_limit() {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A hard link at `to` of the inode behind the `O_PATH` descriptor `fd`.
pub(crate) fn link_fd_to_path(fd: RawFd, to: &std::path::Path) -> io::Result<()> {
    link_fd(fd, libc::AT_FDCWD, to.as_os_str())
}
