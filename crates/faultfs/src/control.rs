//! The control socket: how `faultfs cut MNT`, `faultfs set MNT ...` reach a mount served
//! by another process (`faultfs mount`).
//!
//! Each mount with [`crate::Options::control_socket`] listens on a Unix socket in a
//! runtime directory, named after a hash of its canonical mount point, so the mount point
//! alone finds it. One request per connection: a JSON line in, a JSON line out. The
//! server thread polls for its stop flag and gives each client a few seconds, so neither
//! a stuck client nor teardown can hang it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::handle::Handle;
use crate::profile::Profile;
use crate::state::{CutMode, CutReport, Faults};

/// A request to a mount.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// Power cut (see [`crate::Mount::cut`]).
    Cut {
        /// Which pending changes survive.
        mode: CutMode,
    },
    /// Change the latencies: start from the named profile (or the current one), then
    /// apply `OP=LATENCY` overrides.
    SetLatency {
        /// A profile name (`none`, `cloud-block`, `network`).
        profile: Option<String>,
        /// Overrides such as `fsync=5ms..10ms`.
        overrides: Vec<String>,
    },
    /// Change the injected faults: `clear` first, then set what is given.
    SetFaults {
        /// Forget every armed fault first.
        clear: bool,
        /// EIO on the Nth fsync from now.
        eio_fsync: Option<u64>,
        /// EIO on the Nth write from now.
        eio_write: Option<u64>,
        /// ENOSPC after this many more bytes.
        enospc_after: Option<u64>,
        /// EROFS from now on (or not).
        erofs: Option<bool>,
    },
    /// The mount's settings and state.
    Status,
    /// Unmount and end the serving process.
    Unmount,
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Response {
    /// Done.
    Ok,
    /// The cut's report.
    Cut(CutReport),
    /// The mount's state.
    Status(Status),
    /// The request failed.
    Error(String),
}

/// A mount's settings and state, for `faultfs status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// The latency profile.
    pub profile: Profile,
    /// Armed faults.
    pub faults: Faults,
    /// Whether a cut (or teardown) froze the mount.
    pub frozen: bool,
}

/// Where control sockets live: `$FAULTFS_RUNTIME_DIR`, else `/run/faultfs` for root,
/// else `$XDG_RUNTIME_DIR/faultfs`, else `/tmp/faultfs-UID`.
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FAULTFS_RUNTIME_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no failure mode.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/faultfs");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("faultfs");
    }
    PathBuf::from(format!("/tmp/faultfs-{uid}"))
}

/// The control socket of the mount at `mountpoint`.
pub fn socket_path(mountpoint: &Path) -> Result<PathBuf, Error> {
    let canon = mountpoint.canonicalize().map_err(|source| Error::Io {
        what: "mount point",
        path: mountpoint.to_path_buf(),
        source,
    })?;
    // FNV-1a: stable across runs and versions (unlike std's hasher).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(runtime_dir().join(format!("{h:016x}.sock")))
}

/// Sends one request to the mount at `mountpoint` and waits (at most `timeout`) for
/// the answer.
pub fn request(mountpoint: &Path, req: &Request, timeout: Duration) -> Result<Response, Error> {
    let path = socket_path(mountpoint)?;
    let ctl = |e: std::io::Error| {
        Error::Control(format!(
            "{} (control socket of {}): {e}; is `faultfs mount` serving it?",
            path.display(),
            mountpoint.display()
        ))
    };
    let mut s = UnixStream::connect(&path).map_err(ctl)?;
    s.set_read_timeout(Some(timeout)).map_err(ctl)?;
    s.set_write_timeout(Some(timeout)).map_err(ctl)?;
    let mut line = serde_json::to_string(req).map_err(|e| Error::Control(e.to_string()))?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(ctl)?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).map_err(ctl)?;
    serde_json::from_str(&answer).map_err(|e| Error::Control(format!("bad answer {answer:?}: {e}")))
}

/// The serving side, one thread per mount.
pub(crate) struct ControlServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl ControlServer {
    /// Serves `mountpoint`'s socket; an `Unmount` request sets `unmount` (which the
    /// serving process watches).
    pub(crate) fn start(
        mountpoint: &Path,
        handle: Handle,
        unmount: Arc<AtomicBool>,
    ) -> Result<Self, Error> {
        let path = socket_path(mountpoint)?;
        let io = |source| Error::Io {
            what: "control socket",
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // A socket left by a killed server: nobody answers on it any more.
        if UnixStream::connect(&path).is_err() {
            let _ = std::fs::remove_file(&path);
        }
        let listener = UnixListener::bind(&path).map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("faultfs-control".into())
            .spawn(move || serve(&listener, &handle, &stop2, &unmount))
            .map_err(Error::Thread)?;
        Ok(ControlServer {
            stop,
            thread: Some(thread),
            path,
        })
    }

    pub(crate) fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(listener: &UnixListener, handle: &Handle, stop: &AtomicBool, unmount: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                if let Err(e) = answer(s, handle, unmount) {
                    tracing::warn!("faultfs control request failed: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::warn!("faultfs control socket: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn answer(s: UnixStream, handle: &Handle, unmount: &AtomicBool) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let resp = match serde_json::from_str::<Request>(&line) {
        Err(e) => Response::Error(format!("bad request: {e}")),
        Ok(req) => execute(req, handle, unmount),
    };
    let mut out = serde_json::to_string(&resp).map_err(std::io::Error::other)?;
    out.push('\n');
    (&s).write_all(out.as_bytes())
}

fn execute(req: Request, handle: &Handle, unmount: &AtomicBool) -> Response {
    match req {
        Request::Cut { mode } => match handle.cut(mode) {
            Ok(r) => Response::Cut(r),
            Err(e) => Response::Error(e.to_string()),
        },
        Request::SetLatency { profile, overrides } => {
            let mut p = match profile {
                Some(name) => match Profile::named(&name) {
                    Ok(p) => p,
                    Err(e) => return Response::Error(e),
                },
                None => handle.profile(),
            };
            for o in &overrides {
                if let Err(e) = p.apply_override(o) {
                    return Response::Error(e);
                }
            }
            handle.set_profile(p);
            Response::Ok
        }
        Request::SetFaults {
            clear,
            eio_fsync,
            eio_write,
            enospc_after,
            erofs,
        } => {
            handle.update_faults(|f| {
                if clear {
                    *f = Faults::default();
                }
                if eio_fsync.is_some() {
                    f.eio_fsync = eio_fsync;
                }
                if eio_write.is_some() {
                    f.eio_write = eio_write;
                }
                if enospc_after.is_some() {
                    f.enospc_after = enospc_after;
                }
                if let Some(r) = erofs {
                    f.erofs = r;
                }
            });
            Response::Ok
        }
        Request::Status => Response::Status(Status {
            profile: handle.profile(),
            faults: handle.faults(),
            frozen: handle.is_frozen(),
        }),
        Request::Unmount => {
            unmount.store(true, Ordering::SeqCst);
            Response::Ok
        }
    }
}
