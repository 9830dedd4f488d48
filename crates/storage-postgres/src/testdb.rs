//! A private PostgreSQL server for tests (feature `testdb`): `initdb` into a temporary
//! directory, `postgres` on its own port on 127.0.0.1 (no Unix socket, no systemd),
//! superuser `postgres` with trust authentication. The process plumbing (death signal,
//! stale directories, readiness) is `tlogd_storage_sql::testsupport`.
//!
//! PostgreSQL refuses to run as root, so as root the server runs as the `postgres`
//! user that Debian's package creates. Missing binaries are a panic, never a skip: run
//! `scripts/deps.sh test` (apt-get install postgresql).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection};
use tlogd_storage_sql::testsupport::{
    self, ServerProcess, find_binary, free_port, make_certificates, probe_on_thread, run_logged,
};

/// Temporary directories of test servers: `<tmp>/tlogd-postgres-*`.
const DIR_PREFIX: &str = "tlogd-postgres-";

/// How long the server gets to accept connections (crash recovery included).
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// A private PostgreSQL server; killed on drop and when the process exits.
pub struct TestPostgres {
    /// First, so the server is killed before its directory is removed.
    process: ServerProcess,
    /// Serve TLS with the certificates in `<dir>/tls`.
    tls: bool,
    dir: tempfile::TempDir,
    datadir: PathBuf,
    port: u16,
    server_bin: PathBuf,
    /// The user the server runs as, when started by root.
    user: Option<(u32, u32)>,
    databases: AtomicU64,
}

impl TestPostgres {
    /// Initialise a cluster and start a server on a free port; panics (with the
    /// server's log) if it does not accept connections within 60 s.
    pub fn start() -> TestPostgres {
        Self::start_with(false)
    }

    /// [`TestPostgres::start`], with TLS on (`ssl = on`): a fresh CA and server
    /// certificate for 127.0.0.1; [`TestPostgres::tls_ca`] is the CA's PEM file.
    pub fn start_tls() -> TestPostgres {
        Self::start_with(true)
    }

    /// The CA certificate that signed the server's, when started with TLS.
    pub fn tls_ca(&self) -> Option<PathBuf> {
        self.tls.then(|| self.dir.path().join("tls/ca.pem"))
    }

    /// One server shared by every test of the process, started on first use. Never
    /// stop it: use [`TestPostgres::start`] for a server a test may stop.
    pub fn shared() -> &'static TestPostgres {
        static SHARED: OnceLock<TestPostgres> = OnceLock::new();
        SHARED.get_or_init(TestPostgres::start)
    }

    fn start_with(tls: bool) -> TestPostgres {
        let bin_dirs = postgres_bin_dirs();
        let hint = "run scripts/deps.sh test (apt-get install postgresql); the PostgreSQL storage tests never skip";
        let initdb = find_binary(&["initdb"], &bin_dirs, hint);
        let server_bin = find_binary(&["postgres"], &bin_dirs, hint);
        let user = testsupport::is_root().then(postgres_user);
        let dir = testsupport::server_dir(DIR_PREFIX);
        // initdb takes an empty directory the server's user owns (the temporary
        // directory itself is root's).
        let datadir = dir.path().join("data");
        std::fs::create_dir(&datadir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", datadir.display()));
        testsupport::chmod(&datadir, 0o700);
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&datadir, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", datadir.display()));
        }
        let mut cmd = Command::new(&initdb);
        cmd.arg("--pgdata")
            .arg(&datadir)
            .args(["--username=postgres", "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-instructions"])
            // The cluster's creation need not survive a power loss; the server's own
            // commits are fsynced (fsync = on below).
            .arg("--no-sync");
        as_user(&mut cmd, user);
        run_logged(cmd, &initdb, &dir.path().join("initdb.log"));
        if tls {
            let tls_dir = dir.path().join("tls");
            make_certificates(&tls_dir);
            // PostgreSQL refuses a key readable by others.
            let key = tls_dir.join("server-key.pem");
            testsupport::chmod(&key, 0o600);
            if let Some((uid, gid)) = user {
                std::os::unix::fs::chown(&key, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {}: {e}", key.display()));
            }
        }
        let process = ServerProcess::new("the test PostgreSQL", dir.path().join("server.log"));
        let db = TestPostgres {
            process,
            tls,
            dir,
            datadir,
            port: free_port(),
            server_bin,
            user,
            databases: AtomicU64::new(0),
        };
        db.launch();
        db
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Create a database with a unique name starting with `name_prefix` and return its
    /// URL.
    pub async fn fresh_database(&self, name_prefix: &str) -> String {
        let name = testsupport::unique_database_name(name_prefix, &self.databases);
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .unwrap_or_else(|e| panic!("connecting to the test PostgreSQL: {e}"));
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        conn.close().await.ok();
        self.url(&name)
    }

    /// Kill the server (SIGKILL, as a crash or power loss would) and wait for it to exit.
    pub fn stop(&self) {
        self.process.kill();
    }

    /// Start the server again on the same data directory and port (after
    /// [`stop`](Self::stop)), and wait until it accepts connections.
    pub fn restart(&self) {
        self.stop();
        self.launch();
    }

    fn launch(&self) {
        let mut cmd = Command::new(&self.server_bin);
        cmd.arg("-D")
            .arg(&self.datadir)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            // Durability stays on: fsync at commit is part of the storage contract.
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(["-c", "max_connections=300", "-c", "shared_buffers=64MB"])
            // Dynamic shared memory in the data directory, removed with it: the default
            // (`posix`) leaves a /dev/shm/PostgreSQL.* segment behind for every server a
            // crash test kills, and they piled up across runs (224 files, 120 MiB, seen
            // on the CI machine).
            .args(["-c", "dynamic_shared_memory_type=mmap"]);
        if let Some(ca) = self.tls_ca() {
            let tls = self.dir.path().join("tls");
            cmd.args(["-c", "ssl=on"])
                .arg("-c")
                .arg(setting("ssl_cert_file", &tls.join("server-cert.pem")))
                .arg("-c")
                .arg(setting("ssl_key_file", &tls.join("server-key.pem")))
                .arg("-c")
                .arg(setting("ssl_ca_file", &ca));
        }
        as_user(&mut cmd, self.user);
        let url = self.url("postgres");
        self.process.launch(cmd, self.port, READY_DEADLINE, || {
            let url = url.clone();
            probe_on_thread(move || async move {
                let mut conn = sqlx::PgConnection::connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query("SELECT 1")
                    .execute(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                conn.close().await.map_err(|e| e.to_string())
            })
        });
    }
}

fn setting(name: &str, path: &Path) -> String {
    format!("{name}={}", path.display())
}

/// Run `cmd` as `user` (uid, gid), if given.
fn as_user(cmd: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid).env("HOME", "/tmp");
    }
}

/// Debian keeps the server binaries off `PATH`, in `/usr/lib/postgresql/<major>/bin`;
/// newest major first.
fn postgres_bin_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let major = e.file_name().to_string_lossy().parse::<u32>().ok()?;
                    Some((major, e.path().join("bin")))
                })
                .collect()
        })
        .unwrap_or_default();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    dirs.into_iter().map(|(_, d)| d).collect()
}

/// The uid and gid of the `postgres` user.
fn postgres_user() -> (u32, u32) {
    let name = CString::new("postgres").unwrap_or_default();
    // SAFETY: getpwnam reads a static buffer; tests start servers one at a time per
    // call site and copy the two fields out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        panic!(
            "PostgreSQL refuses to run as root and there is no `postgres` user to run it as: run scripts/deps.sh test (apt-get install postgresql)"
        );
    }
    // SAFETY: pw is non-null and points to a valid passwd record.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}
