//! The real `tlogd` binary on the SQL backends (MySQL against a private MariaDB
//! server, PostgreSQL against a private PostgreSQL server): several daemons on one
//! database under the loadgen, and a database restart under load.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::frontends::two_frontends_under_load;
use common::*;
use tlogd_storage_mysql::testdb::TestMariaDb;
use tlogd_storage_postgres::testdb::TestPostgres;

/// A private database server of one backend.
trait Server: Send + Sync + 'static {
    /// `storage.backend`.
    const BACKEND: &'static str;
    fn shared() -> &'static Self;
    fn start() -> Self;
    async fn fresh_database(&self, prefix: &str) -> String;
    fn stop(&self);
    fn restart(&self);
}

impl Server for TestMariaDb {
    const BACKEND: &'static str = "mysql";
    fn shared() -> &'static Self {
        TestMariaDb::shared()
    }
    fn start() -> Self {
        TestMariaDb::start()
    }
    async fn fresh_database(&self, prefix: &str) -> String {
        TestMariaDb::fresh_database(self, prefix).await
    }
    fn stop(&self) {
        TestMariaDb::stop(self)
    }
    fn restart(&self) {
        TestMariaDb::restart(self)
    }
}

impl Server for TestPostgres {
    const BACKEND: &'static str = "postgres";
    fn shared() -> &'static Self {
        TestPostgres::shared()
    }
    fn start() -> Self {
        TestPostgres::start()
    }
    async fn fresh_database(&self, prefix: &str) -> String {
        TestPostgres::fresh_database(self, prefix).await
    }
    fn stop(&self) {
        TestPostgres::stop(self)
    }
    fn restart(&self) {
        TestPostgres::restart(self)
    }
}

/// A daemon on the database at `url`, its files (key, config, dedup index) in `dir`.
fn sql_daemon<S: Server>(dir: &std::path::Path, url: &str) -> Daemon {
    sql_daemon_with::<S>(dir, url, "")
}

/// [`sql_daemon`] with more TOML sections appended to its config.
fn sql_daemon_with<S: Server>(dir: &std::path::Path, url: &str, extra_toml: &str) -> Daemon {
    std::fs::create_dir_all(dir).unwrap();
    let storage = format!(
        "backend = \"{}\"\nurl = \"{url}\"\npool_size = 8\n",
        S::BACKEND
    );
    let dedup = format!(
        "[dedup]\npath = \"{}\"\n{extra_toml}",
        dir.join("dedup").display()
    );
    Daemon::start_with(dir, &storage, &dedup)
}

/// Careful clients write through a forwarding frontend while the sequencing one is
/// killed three times (MariaDB): every acknowledged entry once, none twice (#57).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn careful_clients_through_a_forwarding_frontend_survive_three_kills_on_mysql() {
    let server = TestMariaDb::shared();
    let url = server.fresh_database("forward_kills").await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("forward.token");
    std::fs::write(&token, "frontends-secret-1\n").unwrap();
    let forward = |to: Option<&str>| {
        let to = to.map_or(String::new(), |url| format!("to = \"{url}\"\n"));
        format!(
            "[forward]\n{to}token_file = \"{}\"\ntimeout_ms = 2000\n",
            token.display()
        )
    };
    let http = Http::new();
    let mut s = sql_daemon_with::<TestMariaDb>(&dir.path().join("s"), &url, &forward(None));
    s.wait_ready(&http).await;
    let mut f = sql_daemon_with::<TestMariaDb>(&dir.path().join("f"), &url, &forward(Some(&s.url)));
    f.wait_ready(&http).await;
    common::frontends::careful_clients_survive_sequencer_kills(
        &http,
        &mut s,
        &f,
        &Opts::default(),
        3,
    )
    .await;
    assert!(s.terminate().success());
    assert!(f.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_share_one_mysql_database() {
    two_daemons_share_one_database::<TestMariaDb>().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_share_one_postgres_database() {
    two_daemons_share_one_database::<TestPostgres>().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_restart_under_load_loses_no_acknowledged_entry() {
    a_database_restart_under_load_loses_no_acknowledged_entry::<TestMariaDb>().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_under_load_loses_no_acknowledged_entry() {
    a_database_restart_under_load_loses_no_acknowledged_entry::<TestPostgres>().await
}

async fn two_daemons_share_one_database<S: Server>() {
    let db = S::shared();
    let url = db.fresh_database("e2e_two").await;
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    let mut a = sql_daemon::<S>(&dir.path().join("a"), &url);
    let mut b = sql_daemon::<S>(&dir.path().join("b"), &url);
    a.wait_ready(&http).await;
    b.wait_ready(&http).await;
    two_frontends_under_load(&http, &a, &b, dir.path()).await;
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

async fn a_database_restart_under_load_loses_no_acknowledged_entry<S: Server>() {
    // A server of its own: restarting the shared one would disturb other tests.
    let db = Arc::new(tokio::task::spawn_blocking(S::start).await.unwrap());
    let url = db.fresh_database("e2e_restart").await;
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    let mut d = sql_daemon::<S>(dir.path(), &url);
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let mut writers = Writers::default();
    writers.start(&http, &u, 16, "restart");
    // Restart the server under load: once adds are being acknowledged, not after a
    // time a slow machine may spend connecting.
    writers.wait_count(200).await;
    let before = writers.count();
    let server = db.clone();
    tokio::task::spawn_blocking(move || {
        server.stop();
        std::thread::sleep(Duration::from_millis(500));
        server.restart();
    })
    .await
    .unwrap();
    // The daemon recovers by itself: adds are acknowledged again after the restart.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while writers.count() < before + 500 {
        assert!(
            std::time::Instant::now() < deadline,
            "no adds acknowledged after the database restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writers.stop().await;
    let known = writers.snapshot();
    let need = known.iter().map(|(i, _)| i + 1).max().unwrap();
    let cp = http.wait_checkpoint(&u, need).await;
    http.verify_entries(&u, cp.size, &known).await;
    // A batch retried across the restart must not have committed twice.
    http.verify_unique(&u, cp.size, &known).await;
    for (idx, e) in known.iter().step_by(17) {
        http.verify_inclusion(&u, &cp, *idx, e).await;
    }
    assert!(d.terminate().success());
}
