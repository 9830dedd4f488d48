//! A private MariaDB server for tests (feature `testdb`): its own data directory in a
//! temporary directory, its own port on 127.0.0.1, root without a password. The
//! process plumbing (death signal, stale directories, readiness) is
//! `tlogd_storage_sql::testsupport`. As root, the server runs with `--user=root`.
//!
//! Missing MariaDB binaries are a panic, never a skip: run `scripts/deps.sh`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection};
use tlogd_storage_sql::testsupport::{
    self, ServerProcess, find_binary, free_port, make_certificates, probe_on_thread, run_logged,
};

/// Temporary directories of test servers: `<tmp>/tlogd-mariadb-*`.
const DIR_PREFIX: &str = "tlogd-mariadb-";

/// How long the server gets to accept connections.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A private MariaDB server; killed on drop and when the process exits.
pub struct TestMariaDb {
    /// First, so the server is killed before its directory is removed.
    process: ServerProcess,
    /// Serve TLS with the certificates in `<dir>/tls`.
    tls: bool,
    dir: tempfile::TempDir,
    datadir: PathBuf,
    port: u16,
    server_bin: PathBuf,
    databases: AtomicU64,
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
        let hint = "run scripts/deps.sh (apt-get install mariadb-server); the MySQL storage tests never skip";
        let install = find_binary(&["mariadb-install-db", "mysql_install_db"], &[], hint);
        let server_bin = find_binary(&["mariadbd", "mysqld"], &[], hint);
        let dir = testsupport::server_dir(DIR_PREFIX);
        let datadir = dir.path().join("data");
        // Each server's temporary files in its own directory: two bootstraps at once
        // in /tmp collided on their temporary table names (`#sql-temptable-...`).
        let tmpdir = dir.path().join("tmp");
        std::fs::create_dir_all(&tmpdir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", tmpdir.display()));
        testsupport::chmod(&tmpdir, 0o777);
        let mut cmd = Command::new(&install);
        cmd.arg("--no-defaults")
            .args(user_args())
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--tmpdir={}", tmpdir.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg("--innodb-log-file-size=16M");
        // And one bootstrap at a time in this process, for the same reason.
        static INSTALL: Mutex<()> = Mutex::new(());
        let guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        run_logged(cmd, &install, &dir.path().join("install.log"));
        drop(guard);
        if tls {
            make_certificates(&dir.path().join("tls"));
        }
        let process = ServerProcess::new("the test MariaDB", dir.path().join("server.log"));
        let db = TestMariaDb {
            process,
            tls,
            dir,
            datadir,
            port: free_port(),
            server_bin,
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
        let name = testsupport::unique_database_name(name_prefix, &self.databases);
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
            );
        let url = self.url("");
        self.process.launch(cmd, self.port, READY_DEADLINE, || {
            let url = url.clone();
            probe_on_thread(move || async move {
                let mut conn = sqlx::MySqlConnection::connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query(crate::sql::SELECT_ONE)
                    .execute(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                conn.close().await.map_err(|e| e.to_string())
            })
        });
    }
}

/// As root, run the server as root: the death signal is set in the spawned process,
/// and the server refuses to start as root without being told.
fn user_args() -> Vec<&'static str> {
    if testsupport::is_root() {
        vec!["--user=root"]
    } else {
        Vec::new()
    }
}
