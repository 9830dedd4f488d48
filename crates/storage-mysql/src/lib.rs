//! MySQL/MariaDB storage for tlogd: several frontends share one database.
//!
//! The database holds the five tables of the shared schema shape (`tlogd_meta`,
//! `tlogd_tree`, `tlogd_tiles`, `tlogd_checkpoint`, `tlogd_blobs`; see
//! `tlogd_storage_sql`) as InnoDB tables, created by the migrations in `migrations/` that
//! [`MysqlStorage::connect`] applies.
//!
//! The commit protocol, the read path and the tile cache are shared with the
//! PostgreSQL backend in `tlogd_storage_sql` (whose documentation tells the protocol
//! step by step); this crate is the MySQL [`Dialect`] ([`MysqlDialect`]): `ON DUPLICATE KEY` upserts,
//! `GET_LOCK` named locks, MySQL error numbers, and the server settings below.
//!
//! # Server requirements
//!
//! MariaDB 10.5+ or MySQL 8.0+, InnoDB, `innodb_flush_log_at_trx_commit = 1` (and
//! `sync_binlog = 1` when the binary log is on), and `max_allowed_packet` of at least
//! 32 MiB if entries may approach the 65,535-byte limit (a full bundle of such entries
//! is 16 MiB; MariaDB's default is 16 MiB, MySQL 8's 64 MiB). MySQL also refuses a
//! BLOB larger than a tenth of its redo log, so with such entries give it a redo log of
//! 256 MiB or more (`innodb_redo_log_capacity`; MySQL 8's default is 100 MiB).

#![warn(missing_docs)]

mod sql;
#[cfg(feature = "testdb")]
pub mod testdb;

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlRow};
use sqlx::pool::Pool;
use sqlx::{Row, migrate::MigrateError};
use tlogd_storage_sql::statements::Placeholders;
use tlogd_storage_sql::{
    Dialect, MAX_BUNDLE_BYTES, MIGRATIONS_TABLE, NamedLock, PACKET_OVERHEAD, ServerLimits,
    SqlOptions, SqlStorage, Target,
};

pub use tlogd_storage_sql::{OpenError, SCHEMA_VERSION};

/// A tlog-tiles log in a MySQL or MariaDB database (see the crate documentation).
pub type MysqlStorage = SqlStorage<MysqlDialect>;

/// Connection and cache settings.
pub type MysqlOptions = SqlOptions;

/// MySQL and MariaDB.
pub struct MysqlDialect;

impl Dialect for MysqlDialect {
    type Db = MySql;
    const BACKEND: &'static str = "mysql";
    const PRODUCT: &'static str = "MySQL";
    const PLACEHOLDERS: Placeholders = Placeholders::Question;
    const UPSERT_TILES_TAIL: &'static str = sql::INSERT_TILES_TAIL;
    const UPSERT_CHECKPOINT: &'static str = sql::UPSERT_CHECKPOINT;
    const SELECT_READ_ONLY: &'static str = sql::SELECT_READ_ONLY;
    const SESSION_ID: &'static str = "CONNECTION_ID()";
    const INSERT_BLOB: &'static str = sql::INSERT_BLOB;

    fn target(url: &str) -> Result<Target<MySql>, OpenError> {
        let options = MySqlConnectOptions::from_str(url)
            .map_err(|e| OpenError::InvalidUrl(format!("MySQL: {e}")))?;
        let database = options
            .get_database()
            .filter(|d| !d.is_empty())
            .ok_or(OpenError::NoDatabase)?
            .to_string();
        let display = match options.get_socket() {
            Some(socket) => format!("{}/{database}", socket.display()),
            None => format!("{}:{}/{database}", options.get_host(), options.get_port()),
        };
        Ok(Target {
            options,
            database,
            display,
        })
    }

    async fn migrate(pool: &Pool<MySql>) -> Result<(), MigrateError> {
        let mut migrator = sqlx::migrate!();
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        // Migrations of a newer, still compatible tlogd are fine: the compatibility
        // version in `tlogd_meta` is what decides.
        migrator.set_ignore_missing(true);
        migrator.run(pool).await
    }

    /// `KILL` rolls back the session's open transaction; its thread leaves the
    /// process list only after that rollback (or a `COMMIT` it was already running).
    async fn end_session(
        pool: &Pool<MySql>,
        id: u64,
        timeout: Duration,
    ) -> Result<bool, sqlx::Error> {
        match sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
            .execute(pool)
            .await
        {
            Ok(_) => {}
            // ER_NO_SUCH_THREAD: gone already.
            Err(e) if db_error_number(&e) == Some(1094) => {}
            Err(e) => return Err(e),
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let row = sqlx::query(sql::SESSION_EXISTS)
                .bind(id)
                .fetch_one(pool)
                .await?;
            if opt_int_col(&row, 0)? == Some(0) {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn lock(
        conn: &mut MySqlConnection,
        lock: NamedLock,
        timeout: Duration,
    ) -> Result<bool, sqlx::Error> {
        let statement = match lock {
            NamedLock::Schema => sql::GET_SCHEMA_LOCK,
            NamedLock::Sequencer => sql::GET_SEQUENCER_LOCK,
        };
        let row = sqlx::query(statement)
            .bind(timeout.as_secs().max(1))
            .fetch_one(conn)
            .await?;
        match opt_int_col(&row, 0)? {
            Some(1) => Ok(true),
            Some(_) => Ok(false),
            None => Err(sqlx::Error::Protocol(format!(
                "GET_LOCK failed for the {lock:?} lock"
            ))),
        }
    }

    async fn unlock(conn: &mut MySqlConnection, lock: NamedLock) -> Result<(), sqlx::Error> {
        let statement = match lock {
            NamedLock::Schema => sql::RELEASE_SCHEMA_LOCK,
            NamedLock::Sequencer => sql::RELEASE_SEQUENCER_LOCK,
        };
        sqlx::query(statement).fetch_one(conn).await.map(|_| ())
    }

    async fn check_server(pool: &Pool<MySql>, database: &str) -> Result<ServerLimits, sqlx::Error> {
        let row = sqlx::query(sql::SELECT_SERVER_SETTINGS)
            .fetch_one(pool)
            .await?;
        let max_packet = opt_int_col(&row, 0)?.unwrap_or(0);
        let flush = opt_int_col(&row, 1)?.unwrap_or(0);
        if flush != 1 {
            tracing::warn!(
                database,
                innodb_flush_log_at_trx_commit = flush,
                "the MySQL server does not flush its redo log at every commit: a committed batch may be lost in a power failure; set innodb_flush_log_at_trx_commit = 1"
            );
        }
        if max_packet < MAX_BUNDLE_BYTES + PACKET_OVERHEAD as u64 {
            tracing::warn!(
                database,
                max_allowed_packet = max_packet,
                "the MySQL server's max_allowed_packet is too small for a full bundle of entries near the 65,535-byte limit; set it to at least 32M"
            );
        }
        Ok(ServerLimits { max_packet })
    }

    /// The connection or the server went away, or InnoDB gave up on a lock (the
    /// statement or transaction rolled back).
    fn is_transient(e: &sqlx::Error) -> bool {
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(_) => matches!(
                db_error_number(e),
                // Too many connections, server shutdown in progress, aborted connection,
                // lock wait timeout, deadlock, connection killed.
                Some(1040 | 1053 | 1152 | 1205 | 1213 | 1927)
            ),
            _ => false,
        }
    }

    fn is_undefined_table(e: &sqlx::Error) -> bool {
        db_error_number(e) == Some(sql::ER_NO_SUCH_TABLE)
    }

    fn rows_affected(r: &sqlx::mysql::MySqlQueryResult) -> u64 {
        r.rows_affected()
    }

    fn int_col(row: &MySqlRow, i: usize) -> Result<Option<u64>, sqlx::Error> {
        opt_int_col(row, i)
    }

    /// A boolean system variable: an integer, or text (`OFF`, or MariaDB 11's `ON`,
    /// `NO_LOCK`, ... for `read_only`).
    fn flag_col(row: &MySqlRow, i: usize) -> Result<bool, sqlx::Error> {
        if let Ok(v) = row.try_get::<u64, _>(i) {
            return Ok(v != 0);
        }
        if let Ok(v) = row.try_get::<i64, _>(i) {
            return Ok(v != 0);
        }
        let s: String = row.try_get(i)?;
        let s = s.trim();
        Ok(!(s.eq_ignore_ascii_case("OFF") || s == "0" || s.eq_ignore_ascii_case("FALSE")))
    }
}

/// An integer column, whatever integer type the server reports it as (columns are
/// unsigned; system variables may come back as text).
fn opt_int_col(row: &MySqlRow, i: usize) -> Result<Option<u64>, sqlx::Error> {
    if let Ok(v) = row.try_get::<Option<u64>, _>(i) {
        return Ok(v);
    }
    if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
        return Ok(v.map(|v| v.max(0) as u64));
    }
    let s: Option<String> = row.try_get(i)?;
    match s.as_deref().map(str::trim) {
        None => Ok(None),
        Some("ON") | Some("on") | Some("TRUE") => Ok(Some(1)),
        Some("OFF") | Some("off") | Some("FALSE") => Ok(Some(0)),
        Some(t) => t.parse().map(Some).map_err(|e| sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: Box::new(e),
        }),
    }
}

/// The MySQL error number of a database error.
fn db_error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}
