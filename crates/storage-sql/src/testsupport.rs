//! Process plumbing for the private database servers that the backends' tests start
//! (feature `testsupport`): a temporary directory that outlives a crashed test process
//! only until the next start, a server process that dies with the test process, free
//! ports, certificates.
//!
//! A server is killed when the test process exits, even if nothing is dropped (a
//! `static`): it is spawned with `PR_SET_PDEATHSIG = SIGKILL` from a dedicated thread
//! that lives as long as its [`ServerProcess`] (the signal fires when the *thread* that
//! forked it exits, and the test harness runs each test on a short-lived thread). The
//! death signal is set after any change of user (which would clear it).
//!
//! Missing server binaries are a panic, never a skip.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

/// The pid of the process that owns a test server's directory.
const OWNER_FILE: &str = "owner.pid";

/// A test server's temporary directory, `<tmp>/<prefix>*`, readable by a server that
/// runs as another user. The directories of earlier test processes that are gone are
/// removed first.
pub fn server_dir(prefix: &str) -> tempfile::TempDir {
    remove_stale_dirs(prefix);
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .unwrap_or_else(|e| panic!("creating a temporary directory {prefix}*: {e}"));
    // A shared server is a static, never dropped: its directory outlives the test
    // process and is removed by a later start once this process is gone.
    let owner = dir.path().join(OWNER_FILE);
    std::fs::write(&owner, std::process::id().to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", owner.display()));
    // tempfile makes 0700 directories; the server must be able to traverse it.
    chmod(dir.path(), 0o755);
    dir
}

/// `chmod`, panicking with the path.
pub fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// Remove the directories of test servers whose process has exited (their servers died
/// with it). Directories without an owner yet are left alone for a while: another
/// process may be creating one right now.
fn remove_stale_dirs(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !e.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let stale = match std::fs::read_to_string(path.join(OWNER_FILE)) {
            Ok(pid) => pid
                .trim()
                .parse::<u32>()
                .is_ok_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()),
            Err(_) => e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > Duration::from_secs(600))),
        };
        if stale {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// One server process at a time, restartable, killed when the test process exits.
pub struct ServerProcess {
    /// What the server is, in messages ("the test MariaDB").
    name: String,
    log_path: PathBuf,
    child: Mutex<Option<Child>>,
    spawner: Mutex<mpsc::Sender<SpawnRequest>>,
}

impl ServerProcess {
    /// A process slot named `name`, whose output goes to `log_path`.
    pub fn new(name: &str, log_path: PathBuf) -> ServerProcess {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testdb-spawner".into())
            .spawn(move || {
                // Lives until the ServerProcess is dropped (or the process exits): the
                // servers it forks die with it.
                while let Ok(req) = rx.recv() {
                    let mut command = req.command;
                    let _ = req.reply.send(command.spawn());
                }
            })
            .unwrap_or_else(|e| panic!("spawning the {name} spawner thread: {e}"));
        ServerProcess {
            name: name.to_string(),
            log_path,
            child: Mutex::new(None),
            spawner: Mutex::new(tx),
        }
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        read_log(&self.log_path)
    }

    /// Start `cmd` (output appended to the log), then poll a TCP connect to `port` on
    /// 127.0.0.1 and `probe` until both work; panic with the server's log if the server
    /// exits or `deadline` passes.
    pub fn launch(
        &self,
        mut cmd: Command,
        port: u16,
        deadline: Duration,
        probe: impl Fn() -> Result<(), String>,
    ) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.log_path.display()));
        cmd.stdin(Stdio::null())
            .stdout(clone_file(&log))
            .stderr(clone_file(&log))
            // A group of its own, so a kill takes the server's children (PostgreSQL's
            // backends) with it, as a crash of the machine would.
            .process_group(0);
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec. Closures run after
        // `Command::uid`, so the death signal survives the change of user.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The spawner may have died between fork and prctl.
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let (reply, answer) = mpsc::channel();
        let request = SpawnRequest {
            command: cmd,
            reply,
        };
        let sent = self
            .spawner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(request);
        let Ok(spawned) = sent
            .map_err(|_| ())
            .and_then(|()| answer.recv().map_err(|_| ()))
        else {
            panic!("the {} spawner thread is gone", self.name);
        };
        let child = spawned.unwrap_or_else(|e| panic!("starting {}: {e}", self.name));
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        self.wait_ready(port, deadline, probe);
    }

    fn wait_ready(&self, port: u16, deadline: Duration, probe: impl Fn() -> Result<(), String>) {
        let until = Instant::now() + deadline;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut last_error = String::from("not tried");
        while Instant::now() < until {
            if let Some(status) = self
                .child
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "{} exited ({status}) before accepting connections:\n{}",
                    self.name,
                    self.log()
                );
            }
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(_) => match probe() {
                    Ok(()) => return,
                    Err(e) => last_error = e,
                },
                Err(e) => last_error = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{} on port {port} did not accept connections within {deadline:?} ({last_error}):\n{}",
            self.name,
            self.log()
        );
    }

    /// Kill the server and its children (SIGKILL to its process group, as a crash or
    /// power loss would) and wait for it to exit.
    pub fn kill(&self) {
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill has no memory preconditions; the group is the child's own.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Run `cmd` to completion with its output in `log_path`; panic with that log if it
/// fails.
pub fn run_logged(mut cmd: Command, what: &Path, log_path: &Path) {
    let log =
        File::create(log_path).unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
    cmd.stdin(Stdio::null())
        .stdout(clone_file(&log))
        .stderr(clone_file(&log));
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", what.display()));
    if !status.success() {
        panic!(
            "{} failed ({status}):\n{}",
            what.display(),
            read_log(log_path)
        );
    }
}

/// Run an async probe on a thread of its own with a 2 s bound, so it works from
/// inside or outside a runtime.
pub fn probe_on_thread<F, Fut>(probe: F) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            match tokio::time::timeout(Duration::from_secs(2), probe()).await {
                Ok(r) => r,
                Err(_) => Err("the readiness probe timed out".to_string()),
            }
        })
    })
    .join()
    .unwrap_or_else(|_| Err("probe thread panicked".into()))
}

/// A database name unique to this process and call: `name_prefix` reduced to lower-case
/// ASCII letters, digits and `_` (at most 40), the pid, and the next value of `counter`.
pub fn unique_database_name(name_prefix: &str, counter: &std::sync::atomic::AtomicU64) -> String {
    let prefix: String = name_prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}_{}_{n}", std::process::id())
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The first of `names` found on `PATH`, in `extra_dirs`, /usr/sbin, /usr/local/sbin or
/// /usr/bin; panics with `hint` (how to install it) otherwise.
pub fn find_binary(names: &[&str], extra_dirs: &[PathBuf], hint: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(extra_dirs.iter().cloned());
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from));
    for name in names {
        for d in &dirs {
            let p = d.join(name);
            if is_executable(&p) {
                return p;
            }
        }
    }
    panic!("{} not found: {hint}", names.join(" or "));
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A free TCP port on 127.0.0.1 for a server a test starts, below the kernel's
/// ephemeral range.
///
/// A port the kernel hands out for `bind(0)` comes from the ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768-60999 by default), the range every outgoing
/// connection's local port comes from too. Between this function releasing such a port
/// and the server binding it, a client socket of a busy test (the crash tests open
/// thousands) could take it, and the server failed with "Address already in use". Ports
/// 20000-32767 are never handed out that way: one is picked at random, checked free by
/// binding it, and never given twice in one process (tests run on parallel threads).
pub fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    use std::time::{SystemTime, UNIX_EPOCH};
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const LOW: u32 = 20000;
    const HIGH: u32 = 32768;
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    // A small xorshift seeded by the clock and the process id: test binaries run one
    // after another and in parallel with servers from other processes.
    let mut x = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32)
        | 1;
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = (LOW + (x % u64::from(HIGH - LOW)) as u32) as u16;
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 between {LOW} and {HIGH} after 1000 tries");
}

fn clone_file(f: &File) -> File {
    f.try_clone()
        .unwrap_or_else(|e| panic!("duplicating a log file descriptor: {e}"))
}

/// A log file's text, or why it cannot be read.
pub fn read_log(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("({} unreadable: {e})", p.display()))
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 signed by it
/// (`server-cert.pem`, `server-key.pem`), in `dir`, made with the `openssl` command.
pub fn make_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let ext = dir.join("san.ext");
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", ext.display()));
    let ca_subject = "/CN=tlogd test CA";
    let steps: [&[&str]; 3] = [
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            ca_subject,
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca.pem",
        ],
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server-key.pem",
            "-out",
            "server.csr",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server-cert.pem",
        ],
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("running openssl (install it: apt-get install openssl): {e}")
            });
        if !out.status.success() {
            panic!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // The server may run as another user: it must read its certificates.
    for f in ["server-key.pem", "server-cert.pem", "ca.pem"] {
        chmod(&dir.join(f), 0o644);
    }
}
