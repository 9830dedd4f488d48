//! The MySQL backend against a private MariaDB server (feature `testdb`): the SQL
//! backends' conformance suite (`storage-sql/tests/support/conformance.rs`), driven by
//! the real engine: byte-identical to the Go reference logs, compare-and-swap between
//! frontends, schema and origin checks, a checkpoint that never goes backwards, and no
//! acknowledged entry lost when the server is killed.

use std::path::{Path, PathBuf};

use sqlx::AssertSqlSafe;
use tlogd_core::engine::StorageError;
use tlogd_storage_mysql::testdb::TestMariaDb;
use tlogd_storage_mysql::{MysqlOptions, MysqlStorage, OpenError};

#[path = "../../core/tests/support/backend.rs"]
mod backend;
#[path = "../../storage-sql/tests/support/conformance.rs"]
mod conformance;

use conformance::{SqlBackend, TestServer};

struct Mysql;

impl TestServer for TestMariaDb {
    fn url(&self, db: &str) -> String {
        TestMariaDb::url(self, db)
    }
    async fn fresh_database(&self, prefix: &str) -> String {
        TestMariaDb::fresh_database(self, prefix).await
    }
    fn port(&self) -> u16 {
        TestMariaDb::port(self)
    }
    fn stop(&self) {
        TestMariaDb::stop(self)
    }
    fn restart(&self) {
        TestMariaDb::restart(self)
    }
    fn tls_ca(&self) -> Option<PathBuf> {
        TestMariaDb::tls_ca(self)
    }
}

impl SqlBackend for Mysql {
    type Storage = MysqlStorage;
    type Server = TestMariaDb;
    fn shared() -> &'static TestMariaDb {
        TestMariaDb::shared()
    }
    fn start() -> TestMariaDb {
        TestMariaDb::start()
    }
    fn start_tls() -> TestMariaDb {
        TestMariaDb::start_tls()
    }
    async fn connect(
        url: &str,
        origin: &str,
        opts: MysqlOptions,
    ) -> Result<MysqlStorage, OpenError> {
        MysqlStorage::connect(url, origin, opts).await
    }
    async fn close(s: &MysqlStorage) {
        s.close().await
    }
    async fn lock_sequencer(s: &MysqlStorage) -> Result<(), StorageError> {
        s.lock_sequencer().await
    }
    async fn unlock_sequencer(s: &MysqlStorage) {
        s.unlock_sequencer().await
    }
    const FUTURE_MIGRATION: &'static str = "INSERT INTO tlogd_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', TRUE, X'00', 0)";
    async fn execute(s: &MysqlStorage, sql: &str) {
        sqlx::query(AssertSqlSafe(sql))
            .execute(s.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    async fn set_read_only(s: &MysqlStorage, on: bool) {
        Self::execute(s, &format!("SET GLOBAL read_only = {}", u8::from(on))).await
    }
    fn tls_url(url: &str, ca: &Path) -> String {
        format!("{url}?ssl-mode=verify_ca&ssl-ca={}", ca.display())
    }
    async fn tls_cipher(s: &MysqlStorage) -> String {
        sqlx::query_scalar(
            "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'",
        )
        .fetch_one(s.pool())
        .await
        .unwrap_or_else(|e| panic!("reading Ssl_cipher: {e}"))
    }
}

sql_conformance_tests!(Mysql);
