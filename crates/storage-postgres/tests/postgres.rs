//! The PostgreSQL backend against a private PostgreSQL server (feature `testdb`): the
//! SQL backends' conformance suite (`storage-sql/tests/support/conformance.rs`), the
//! same one the MySQL backend passes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sqlx::AssertSqlSafe;
use tlogd_core::engine::StorageError;
use tlogd_storage_postgres::testdb::TestPostgres;
use tlogd_storage_postgres::{OpenError, PostgresOptions, PostgresStorage};

#[path = "../../core/tests/support/backend.rs"]
mod backend;
#[path = "../../storage-sql/tests/support/conformance.rs"]
mod conformance;

use conformance::{SqlBackend, TestServer};

struct Postgres;

impl TestServer for TestPostgres {
    fn url(&self, db: &str) -> String {
        TestPostgres::url(self, db)
    }
    async fn fresh_database(&self, prefix: &str) -> String {
        TestPostgres::fresh_database(self, prefix).await
    }
    fn port(&self) -> u16 {
        TestPostgres::port(self)
    }
    fn stop(&self) {
        TestPostgres::stop(self)
    }
    fn restart(&self) {
        TestPostgres::restart(self)
    }
    fn tls_ca(&self) -> Option<PathBuf> {
        TestPostgres::tls_ca(self)
    }
}

impl SqlBackend for Postgres {
    type Storage = PostgresStorage;
    type Server = TestPostgres;
    fn shared() -> &'static TestPostgres {
        TestPostgres::shared()
    }
    fn start() -> TestPostgres {
        TestPostgres::start()
    }
    fn start_tls() -> TestPostgres {
        TestPostgres::start_tls()
    }
    async fn connect(
        url: &str,
        origin: &str,
        opts: PostgresOptions,
    ) -> Result<PostgresStorage, OpenError> {
        PostgresStorage::connect(url, origin, opts).await
    }
    async fn close(s: &PostgresStorage) {
        s.close().await
    }
    async fn lock_sequencer(s: &PostgresStorage) -> Result<(), StorageError> {
        s.lock_sequencer().await
    }
    async fn unlock_sequencer(s: &PostgresStorage) {
        s.unlock_sequencer().await
    }
    const FUTURE_MIGRATION: &'static str = "INSERT INTO tlogd_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', TRUE, '\\x00'::bytea, 0)";
    async fn execute(s: &PostgresStorage, sql: &str) {
        sqlx::query(AssertSqlSafe(sql))
            .execute(s.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    /// `ALTER SYSTEM` and a reload; sessions pick the setting up at their next
    /// statement, so wait until the pool's sessions report it.
    async fn set_read_only(s: &PostgresStorage, on: bool) {
        let value = if on { "on" } else { "off" };
        Self::execute(
            s,
            &format!("ALTER SYSTEM SET default_transaction_read_only = {value}"),
        )
        .await;
        Self::execute(s, "SELECT pg_reload_conf()").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now: String =
                sqlx::query_scalar("SELECT current_setting('default_transaction_read_only')")
                    .fetch_one(s.pool())
                    .await
                    .unwrap_or_else(|e| panic!("reading default_transaction_read_only: {e}"));
            if now == value {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "default_transaction_read_only did not become {value}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    fn tls_url(url: &str, ca: &Path) -> String {
        format!("{url}?sslmode=verify-ca&sslrootcert={}", ca.display())
    }
    async fn tls_cipher(s: &PostgresStorage) -> String {
        let cipher: Option<String> =
            sqlx::query_scalar("SELECT cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(s.pool())
                .await
                .unwrap_or_else(|e| panic!("reading pg_stat_ssl: {e}"));
        cipher.unwrap_or_default()
    }
}

sql_conformance_tests!(Postgres);
