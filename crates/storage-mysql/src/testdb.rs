//! A private MariaDB server for tests (feature `testdb`): its own data directory in a
//! temporary directory, its own port on 127.0.0.1, root without a password.
//!
//! The server is killed when the test process exits, even if nothing is dropped (a
//! `static`): it is spawned with `PR_SET_PDEATHSIG = SIGKILL` from a dedicated thread
//! that lives as long as the [`TestMariaDb`] (the signal fires when the *thread* that
//! forked it exits, and the test harness runs each test on a short-lived thread). As
//! root, the server runs with `--user=root`: switching to another user would clear the
//! death signal.
//!
//! Missing MariaDB binaries are a panic, never a skip: run `scripts/deps.sh`.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, Connection};

/// Temporary directories of test servers: `<tmp>/tlogd-mariadb-*`.
const DIR_PREFIX: &str = "tlogd-mariadb-";
/// The pid of the process that owns a test server's directory.
const OWNER_FILE: &str = "owner.pid";

/// How long the server gets to accept connections.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A private MariaDB server; killed on drop and when the process exits.
pub struct TestMariaDb {
    /// Serve TLS with the certificates in `<dir>/tls`.
    tls: bool,
    dir: tempfile::TempDir,
    datadir: PathBuf,
    port: u16,
    server_bin: PathBuf,
    server: Mutex<Option<Child>>,
    spawner: Mutex<mpsc::Sender<SpawnRequest>>,
    databases: AtomicU64,
}

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

impl TestMariaDb {
    /// Initialise a data directory and start a server on a free port; panics (with the
    /// server's log) if it does not accept connections within 30 s.
    pub fn start() -> TestMariaDb {
        Self::start_with(false)
    }

    /// [`TestMariaDb::start`], with TLS on: a fresh CA and server certificate (for
    /// 127.0.0.1) made with the `openssl` command; [`TestMariaDb::tls_ca`] is the CA's
    /// PEM file.
    pub fn start_tls() -> TestMariaDb {
        Self::start_with(true)
    }

    /// The CA certificate that signed the server's, when started with TLS.
    pub fn tls_ca(&self) -> Option<PathBuf> {
        self.tls.then(|| self.dir.path().join("tls/ca.pem"))
    }

    fn start_with(tls: bool) -> TestMariaDb {
        let install = find_binary(&["mariadb-install-db", "mysql_install_db"]);
        let server_bin = find_binary(&["mariadbd", "mysqld"]);
        remove_stale_dirs();
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .unwrap_or_else(|e| panic!("creating a temporary directory for MariaDB: {e}"));
        // The shared server is a static, never dropped: its directory outlives the test
        // process and is removed by a later start once this process is gone.
        let owner = dir.path().join(OWNER_FILE);
        std::fs::write(&owner, std::process::id().to_string())
            .unwrap_or_else(|e| panic!("writing {}: {e}", owner.display()));
        // tempfile makes 0700 directories; the server must be able to traverse it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", dir.path().display()));
        let datadir = dir.path().join("data");
        let log_path = dir.path().join("install.log");
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
        // Each server's temporary files in its own directory: two bootstraps at once
        // in /tmp collided on their temporary table names (`#sql-temptable-...`).
        let tmpdir = dir.path().join("tmp");
        std::fs::create_dir_all(&tmpdir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", tmpdir.display()));
        std::fs::set_permissions(&tmpdir, std::fs::Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", tmpdir.display()));
        let mut cmd = Command::new(&install);
        cmd.arg("--no-defaults")
            .args(user_args())
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--tmpdir={}", tmpdir.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg("--innodb-log-file-size=16M")
            .stdin(Stdio::null())
            .stdout(clone_file(&log))
            .stderr(clone_file(&log));
        // And one bootstrap at a time in this process, for the same reason.
        static INSTALL: Mutex<()> = Mutex::new(());
        let guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        let status = cmd.status();
        drop(guard);
        let status = status.unwrap_or_else(|e| panic!("running {}: {e}", install.display()));
        if !status.success() {
            panic!(
                "{} failed ({status}):\n{}",
                install.display(),
                read_log(&log_path)
            );
        }
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testdb-spawner".into())
            .spawn(move || {
                // Lives until the TestMariaDb is dropped (or the process exits): the
                // servers it forks die with it.
                while let Ok(req) = rx.recv() {
                    let mut command = req.command;
                    let _ = req.reply.send(command.spawn());
                }
            })
            .unwrap_or_else(|e| panic!("spawning the MariaDB spawner thread: {e}"));
        if tls {
            make_certificates(&dir.path().join("tls"));
        }
        let db = TestMariaDb {
            tls,
            dir,
            datadir,
            port: free_port(),
            server_bin,
            server: Mutex::new(None),
            spawner: Mutex::new(tx),
            databases: AtomicU64::new(0),
        };
        db.launch();
        db
    }

    /// One server shared by every test of the process, started on first use. Never
    /// stop it: use [`TestMariaDb::start`] for a server a test may stop.
    pub fn shared() -> &'static TestMariaDb {
        static SHARED: OnceLock<TestMariaDb> = OnceLock::new();
        SHARED.get_or_init(TestMariaDb::start)
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` (empty: none) on this server.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// Create a database with a unique name starting with `name_prefix` and return its
    /// URL.
    pub async fn fresh_database(&self, name_prefix: &str) -> String {
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
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}_{}_{n}", std::process::id());
        let mut conn = sqlx::MySqlConnection::connect(&self.url(""))
            .await
            .unwrap_or_else(|e| panic!("connecting to the test MariaDB: {e}"));
        sqlx::query(AssertSqlSafe(crate::sql::create_database(&name)))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        conn.close().await.ok();
        self.url(&name)
    }

    /// Kill the server (SIGKILL, as a crash or power loss would) and wait for it to exit.
    pub fn stop(&self) {
        let child = self.server.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the server again on the same data directory and port (after
    /// [`stop`](Self::stop)), and wait until it accepts connections.
    pub fn restart(&self) {
        self.stop();
        self.launch();
    }

    fn launch(&self) {
        let log_path = self.log_path();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log_path.display()));
        let mut cmd = Command::new(&self.server_bin);
        cmd.arg("--no-defaults")
            .args(user_args())
            .arg(format!("--datadir={}", self.datadir.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--tmpdir={}",
                self.dir.path().join("tmp").display()
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--socket={}",
                self.datadir.join("s.sock").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.datadir.join("s.pid").display()
            ))
            .arg("--skip-name-resolve")
            .arg("--skip-log-bin")
            .arg("--innodb-buffer-pool-size=64M")
            .arg("--innodb-log-file-size=16M")
            // Durability stays on: fsync at commit is part of the storage contract.
            .arg("--innodb-flush-log-at-trx-commit=1")
            .arg("--max-connections=500")
            .arg("--max-allowed-packet=64M")
            .args(
                self.tls_ca()
                    .map(|ca| {
                        let tls = self.dir.path().join("tls");
                        [
                            format!("--ssl-ca={}", ca.display()),
                            format!("--ssl-cert={}", tls.join("server-cert.pem").display()),
                            format!("--ssl-key={}", tls.join("server-key.pem").display()),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .stdin(Stdio::null())
            .stdout(clone_file(&log))
            .stderr(clone_file(&log));
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec.
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
        self.spawner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(SpawnRequest {
                command: cmd,
                reply,
            })
            .unwrap_or_else(|_| panic!("the MariaDB spawner thread is gone"));
        let child = answer
            .recv()
            .unwrap_or_else(|_| panic!("the MariaDB spawner thread is gone"))
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.server_bin.display()));
        *self.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        self.wait_ready();
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Poll a TCP connect and `SELECT 1` until they work; panic with the server's log
    /// if the server exits or the deadline passes.
    fn wait_ready(&self) {
        let deadline = Instant::now() + READY_DEADLINE;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut last_error = String::from("not tried");
        while Instant::now() < deadline {
            if let Some(status) = self
                .server
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "the test MariaDB exited ({status}) before accepting connections:\n{}",
                    read_log(&self.log_path())
                );
            }
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(_) => match select_one(&self.url("")) {
                    Ok(()) => return,
                    Err(e) => last_error = e,
                },
                Err(e) => last_error = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the test MariaDB on port {} did not accept connections within {READY_DEADLINE:?} ({last_error}):\n{}",
            self.port,
            read_log(&self.log_path())
        );
    }
}

impl Drop for TestMariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Remove the directories of test servers whose process has exited (their servers died
/// with it). Directories without an owner yet are left alone for a while: another
/// process may be creating one right now.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !e.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
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

/// `SELECT 1` on a thread of its own, so it works from inside or outside a runtime.
fn select_one(url: &str) -> Result<(), String> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let probe = async {
                let mut conn = sqlx::MySqlConnection::connect(&url).await?;
                sqlx::query(crate::sql::SELECT_ONE)
                    .execute(&mut conn)
                    .await?;
                conn.close().await
            };
            match tokio::time::timeout(Duration::from_secs(2), probe).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err("SELECT 1 timed out".to_string()),
            }
        })
    })
    .join()
    .unwrap_or_else(|_| Err("probe thread panicked".into()))
}

/// As root, run the server as root: dropping privileges would clear PDEATHSIG.
fn user_args() -> Vec<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        vec!["--user=root"]
    } else {
        Vec::new()
    }
}

/// The first of `names` found on `PATH`, /usr/sbin, /usr/local/sbin or /usr/bin.
fn find_binary(names: &[&str]) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from));
    for name in names {
        for d in &dirs {
            let p = d.join(name);
            if is_executable(&p) {
                return p;
            }
        }
    }
    panic!(
        "MariaDB server binaries not found ({} on PATH or in /usr/sbin): run scripts/deps.sh (apt-get install mariadb-server); the MySQL storage tests never skip",
        names.join(" or ")
    );
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("finding a free port: {e}"))
}

fn clone_file(f: &File) -> File {
    f.try_clone()
        .unwrap_or_else(|e| panic!("duplicating a log file descriptor: {e}"))
}

fn read_log(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("({} unreadable: {e})", p.display()))
}

/// A CA and a server certificate for 127.0.0.1 signed by it, in `dir`.
fn make_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let ext = dir.join("san.ext");
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", ext.display()));
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
            "/CN=tlogd test CA",
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
    // The server may run as another user: it must read its key.
    for f in ["server-key.pem", "server-cert.pem", "ca.pem"] {
        let p = dir.join(f);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    }
}
