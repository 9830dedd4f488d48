//! A live faultfs mount and its life cycle: mount, control, cut, unmount.
//!
//! A [`Mount`] never outlives its owner: dropping it (at the end of a test, or while a
//! panic unwinds) unmounts, lazily if the mount is busy, then aborts the FUSE connection
//! so that nothing still using it can hang; if the process is killed, the kernel aborts
//! the connection when `/dev/fuse` closes and fusermount3 (`auto_unmount`) unmounts.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::control::ControlServer;
use crate::fs::{FaultFs, Shared};
use crate::handle::Handle;
use crate::profile::Profile;
use crate::rng::SplitMix64;
use crate::state::{CutMode, CutReport, Faults, State};
use crate::{Error, sys};

/// How a [`Mount`] is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// Latencies of the operations.
    pub profile: Profile,
    /// Seed of the latency jitter.
    pub seed: u64,
    /// fuser event-loop threads (requests are read and dispatched by these).
    pub threads: usize,
    /// Workers that run operations once their latency has passed.
    pub delay_workers: usize,
    /// Serve the control socket ([`crate::control`]) so that `faultfs cut MNT` and
    /// `faultfs set MNT` reach this mount from other processes.
    pub control_socket: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            profile: Profile::none(),
            seed: 0,
            threads: 4,
            delay_workers: 8,
            control_socket: false,
        }
    }
}

impl Options {
    /// Default options with the given latency profile.
    pub fn with_profile(profile: Profile) -> Self {
        Options {
            profile,
            ..Options::default()
        }
    }
}

/// Checks that this machine can mount FUSE filesystems, with a message that says what
/// is missing. Tests call it so that they fail (never skip) without FUSE.
pub fn check_fuse_available() -> Result<(), Error> {
    if !Path::new("/dev/fuse").exists() {
        return Err(Error::NoFuse(
            "/dev/fuse does not exist (load the fuse module: modprobe fuse; in a container, \
             pass --device /dev/fuse)"
                .into(),
        ));
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        return Err(Error::NoFuse(
            "/dev/fuse cannot be opened (faultfs's tests run as root)".into(),
        ));
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false);
    if !found {
        return Err(Error::NoFuse(
            "fusermount3 is not installed (apt-get install fuse3; scripts/deps.sh test does it)"
                .into(),
        ));
    }
    Ok(())
}

/// A mounted faultfs. Drop unmounts it.
pub struct Mount {
    shared: Arc<Shared>,
    backing: PathBuf,
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
    /// The FUSE connection's number (the mount's anonymous device minor), for aborting.
    conn: u64,
    /// fusermount3 staying behind for `auto_unmount`; waited for at unmount.
    watchdog: Option<i32>,
    control: Mutex<Option<ControlServer>>,
    unmount_requested: Arc<AtomicBool>,
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("backing", &self.backing)
            .field("mountpoint", &self.mountpoint)
            .field("frozen", &self.shared.frozen())
            .finish()
    }
}

impl Mount {
    /// Mounts a faultfs at `mountpoint` passing through to `backing` (both existing
    /// directories, neither inside the other). Everything in `backing` counts as durable.
    pub fn new(
        backing: impl AsRef<Path>,
        mountpoint: impl AsRef<Path>,
        options: Options,
    ) -> Result<Mount, Error> {
        check_fuse_available()?;
        let canon = |p: &Path, what: &'static str| {
            p.canonicalize().map_err(|source| Error::Io {
                what,
                path: p.to_path_buf(),
                source,
            })
        };
        let backing = canon(backing.as_ref(), "backing directory")?;
        let mountpoint = canon(mountpoint.as_ref(), "mount point")?;
        if backing.starts_with(&mountpoint) || mountpoint.starts_with(&backing) {
            return Err(Error::Config(format!(
                "the backing directory {} and the mount point {} must not contain each other",
                backing.display(),
                mountpoint.display()
            )));
        }
        sys::raise_nofile_limit();
        let state = State::new(&backing).map_err(|source| Error::Io {
            what: "backing directory",
            path: backing.clone(),
            source,
        })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            frozen: Default::default(),
            latency: Mutex::new((options.profile.clone(), SplitMix64::new(options.seed))),
            expediter: Mutex::new(None),
        });
        let fs = FaultFs::new(shared.clone(), options.delay_workers).map_err(Error::Thread)?;
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("faultfs:{}", backing.display())),
            MountOption::Subtype("faultfs".into()),
            // fusermount3 unmounts if this process dies without unmounting.
            MountOption::AutoUnmount,
        ];
        // auto_unmount needs allow_other (or allow_root); the tests run as root anyway.
        config.acl = SessionACL::All;
        config.n_threads = Some(options.threads.max(1));
        config.clone_fd = true;
        let session =
            fuser::spawn_mount(fs, &mountpoint, &config).map_err(|source| Error::Mount {
                mountpoint: mountpoint.clone(),
                source,
            })?;
        let watchdog = find_watchdog(&mountpoint);
        let conn = std::fs::metadata(&mountpoint)
            .map(|m| dev_minor(m.dev()))
            .unwrap_or(0);
        let mut m = Mount {
            shared,
            backing,
            mountpoint,
            session: Some(session),
            conn,
            watchdog,
            control: Mutex::new(None),
            unmount_requested: Arc::new(AtomicBool::new(false)),
        };
        if options.control_socket {
            let server =
                ControlServer::start(&m.mountpoint, m.handle(), m.unmount_requested.clone())?;
            *m.control.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(server);
        }
        tracing::debug!(backing = %m.backing.display(), mountpoint = %m.mountpoint.display(), "faultfs mounted");
        Ok(m)
    }

    /// A handle for controlling the mount from another thread (the control socket).
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }

    /// Whether a `faultfs umount` asked (through the control socket) for the mount to end.
    pub fn unmount_requested(&self) -> bool {
        self.unmount_requested.load(Ordering::SeqCst)
    }

    /// The mount point (canonical).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing directory (canonical).
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// Power cut: freezes the mount (every further operation fails with EIO at once),
    /// then rewrites the backing directory to what survives. A second cut is an error.
    /// The mount stays frozen until it is dropped or [`Mount::unmount`]ed; a new mount
    /// of the backing directory shows what survived.
    pub fn cut(&self, mode: CutMode) -> Result<CutReport, Error> {
        self.handle().cut(mode)
    }

    /// Freezes the mount without losing anything (every operation fails with EIO).
    pub fn freeze(&self) {
        self.handle().freeze()
    }

    /// Replaces the latency profile.
    pub fn set_profile(&self, profile: Profile) {
        self.handle().set_profile(profile)
    }

    /// The latency profile in force.
    pub fn profile(&self) -> Profile {
        self.handle().profile()
    }

    /// Replaces the injected faults (counts start now).
    pub fn set_faults(&self, faults: Faults) {
        self.handle().set_faults(faults)
    }

    /// Changes the injected faults in place.
    pub fn update_faults(&self, f: impl FnOnce(&mut Faults)) {
        self.handle().update_faults(f)
    }

    /// The injected faults still armed.
    pub fn faults(&self) -> Faults {
        self.handle().faults()
    }

    /// Unmounts (what dropping does), reporting whether the mount is gone.
    pub fn unmount(mut self) -> Result<(), Error> {
        self.teardown();
        if is_mounted(&self.mountpoint, self.conn) {
            return Err(Error::Unmount(self.mountpoint.clone()));
        }
        Ok(())
    }

    fn teardown(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        // Nothing more is served: operations still in flight fail fast.
        self.shared.freeze();
        if let Some(c) = self
            .control
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            c.stop();
        }
        unmount(&self.mountpoint, self.conn);
        // Users of a lazily unmounted (busy) mount keep the connection open; aborting it
        // makes their operations fail (ENOTCONN) and ends the event loops.
        // The rest of the session drops at the end of this block: its auto_unmount
        // socket closes, and fusermount3 finds the mount gone and exits. (Waited for
        // below, so that it cannot unmount a later mount at the same mount point.)
        let guard = {
            let s = session;
            s.guard
        };
        tracing::debug!("faultfs unmounted");
        if !wait_until(Duration::from_secs(2), || guard.is_finished()) {
            tracing::debug!(
                conn = self.conn,
                "faultfs event loops still running: aborting the connection"
            );
            abort_connection(self.conn);
        }
        if let Some(pid) = self.watchdog.take() {
            let gone = wait_until(Duration::from_secs(5), || reap(pid));
            tracing::debug!(pid, gone, "fusermount3 auto_unmount watchdog");
        }
        if wait_until(Duration::from_secs(5), || guard.is_finished()) {
            let _ = guard.join();
        } else {
            tracing::warn!(mountpoint = %self.mountpoint.display(), "faultfs event loop did not stop; left behind");
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn dev_minor(dev: u64) -> u64 {
    // The kernel names FUSE connections by the superblock's dev_t, which for the
    // anonymous devices FUSE uses (major 0) is the minor number.
    ((dev >> 12) & 0xffff_ff00) | (dev & 0xff)
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether our FUSE connection is still mounted at `mountpoint`.
pub(crate) fn is_mounted(mountpoint: &Path, conn: u64) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mountpoint.as_os_str().as_bytes();
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 4 && unescape(f[4]) == want && {
            // Field 3 is major:minor of the mounted filesystem.
            let minor = f[2].split(':').nth(1).and_then(|m| m.parse::<u64>().ok());
            conn == 0 || minor == Some(conn)
        }
    })
}

/// /proc/*/mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = |c: u8| (b'0'..=b'7').contains(&c).then(|| u32::from(c - b'0'));
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let (Some(x), Some(y), Some(z)) = (octal(b[i + 1]), octal(b[i + 2]), octal(b[i + 3]))
            && let Ok(v) = u8::try_from(x * 64 + y * 8 + z)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Unmounts: normally, or lazily (detached) if busy; as root, else via fusermount3.
fn unmount(mountpoint: &Path, conn: u64) {
    if !is_mounted(mountpoint, conn) {
        return;
    }
    let Ok(c) = CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return;
    }
    // SAFETY: valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return;
    }
    let _ = std::process::Command::new("fusermount3")
        .args(["-u", "-z", "-q", "--"])
        .arg(mountpoint)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Aborts the FUSE connection through fusectl (mounting fusectl if need be).
fn abort_connection(conn: u64) {
    if conn == 0 {
        return;
    }
    let dir = Path::new("/sys/fs/fuse/connections");
    let abort = dir.join(conn.to_string()).join("abort");
    if !abort.exists() && dir.is_dir() {
        let _ = std::process::Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    let _ = std::fs::write(abort, "1");
}

/// The fusermount3 process this process started for `mountpoint` (our child, whose
/// command line ends with the mount point).
fn find_watchdog(mountpoint: &Path) -> Option<i32> {
    let me = std::process::id();
    let want = mountpoint.as_os_str().as_bytes();
    let mut best = None;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may contain spaces, so split after ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(me) || !head.ends_with("(fusermount3") {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmd.split(|&b| b == 0).any(|a| a == want) {
            best = Some(best.map_or(pid, |b: i32| b.max(pid)));
        }
    }
    best
}

/// Reaps `pid` if it has exited; true once it is gone.
fn reap(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on our own child with WNOHANG.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    r == pid || r == -1
}
