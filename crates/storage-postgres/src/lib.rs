//! PostgreSQL storage for tlogd: several frontends share one database.
//!
//! The database holds the five tables of the shared schema shape (`tlogd_meta`,
//! `tlogd_tree`, `tlogd_tiles`, `tlogd_checkpoint`, `tlogd_blobs`; see
//! `tlogd_storage_sql`), created by the migrations in `migrations/` that
//! [`PostgresStorage::connect`] applies. The
//! commit protocol, the read path and the tile cache are shared with the MySQL backend
//! in `tlogd_storage_sql` (whose documentation tells the protocol step by step); this
//! crate is the PostgreSQL [`Dialect`] ([`PostgresDialect`]): `ON CONFLICT` upserts,
//! advisory locks, SQLSTATE classification, and the server settings below.
//!
//! # Server requirements
//!
//! PostgreSQL 12+. Durable commits need `fsync = on` and `synchronous_commit` not
//! `off` (both are the defaults; tlogd warns at start-up otherwise), and
//! `full_page_writes = on` on storage without atomic 8 KiB writes. Entry bundles up to
//! 16 MiB are stored in `bytea` (out of line, uncompressed); the defaults suffice.
//! Frontends take turns through a session-level advisory lock
//! (`pg_advisory_lock`), so a connection pooler in front of PostgreSQL must run in
//! session mode, not transaction mode.
//!
//! TLS is set in the URL as libpq does: `?sslmode=verify-full&sslrootcert=/path/ca.pem`
//! (or `verify-ca`, `require`; without `sslmode` the connection is encrypted when the
//! server offers TLS, but its certificate is not checked).

#![warn(missing_docs)]

#[cfg(feature = "testdb")]
pub mod testdb;

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::MigrateError;
use sqlx::pool::Pool;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgDatabaseError, PgRow, Postgres};
use sqlx::{AssertSqlSafe, Row};
use tlogd_storage_sql::statements::Placeholders;
use tlogd_storage_sql::{
    Dialect, MIGRATIONS_TABLE, NamedLock, ServerLimits, SqlOptions, SqlStorage, Target,
};

pub use tlogd_storage_sql::{OpenError, SCHEMA_VERSION};

/// A tlog-tiles log in a PostgreSQL database (see the crate documentation).
pub type PostgresStorage = SqlStorage<PostgresDialect>;

/// Connection and cache settings.
pub type PostgresOptions = SqlOptions;

/// The advisory-lock class of tlogd's locks (`"tlog"` in ASCII); the second key is
/// the lock. Advisory locks are scoped to the current database.
const LOCK_CLASS: i32 = 0x746c_6f67;

/// The largest message PostgreSQL accepts (1 GiB); a bundle is at most 16 MiB.
const MAX_MESSAGE: u64 = 1 << 30;

/// PostgreSQL.
pub struct PostgresDialect;

impl Dialect for PostgresDialect {
    type Db = Postgres;
    const BACKEND: &'static str = "postgres";
    const PRODUCT: &'static str = "PostgreSQL";
    const PLACEHOLDERS: Placeholders = Placeholders::Numbered;
    /// A position keeps its newest (widest) tile. A batch never holds one position
    /// twice (PostgreSQL refuses to update a row twice in one statement).
    const UPSERT_TILES_TAIL: &'static str = " ON CONFLICT (tile_level, tile_index) \
         DO UPDATE SET width = EXCLUDED.width, data = EXCLUDED.data";
    const UPSERT_CHECKPOINT: &'static str = "INSERT INTO tlogd_checkpoint (id, size, data) \
         VALUES (1, ?, ?) \
         ON CONFLICT (id) DO UPDATE SET size = EXCLUDED.size, data = EXCLUDED.data \
         WHERE tlogd_checkpoint.size <= EXCLUDED.size";
    /// A standby, or a server whose sessions default to read-only transactions.
    const SELECT_READ_ONLY: &'static str = "SELECT pg_is_in_recovery() \
         OR current_setting('default_transaction_read_only') = 'on'";
    const SESSION_ID: &'static str = "pg_backend_pid()";
    /// No row affected when the key exists.
    const INSERT_BLOB: &'static str =
        "INSERT INTO tlogd_blobs (blob_key, data) VALUES (?, ?) ON CONFLICT (blob_key) DO NOTHING";

    fn target(url: &str) -> Result<Target<Postgres>, OpenError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| OpenError::InvalidUrl(format!("PostgreSQL: {e}")))?;
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

    async fn migrate(pool: &Pool<Postgres>) -> Result<(), MigrateError> {
        let mut migrator = sqlx::migrate!();
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        // Migrations of a newer, still compatible tlogd are fine: the compatibility
        // version in `tlogd_meta` is what decides.
        migrator.set_ignore_missing(true);
        migrator.run(pool).await
    }

    /// `pg_advisory_lock` waits in the server's lock queue, so a frontend waiting for
    /// the sequencer gets it when the holder lets go, before the holder can take it
    /// again (polling `pg_try_advisory_lock` would starve it). The wait is bounded by
    /// a `lock_timeout` set and reset around it in one round trip: the three statements
    /// run as one implicit transaction, so a timeout rolls the setting back too.
    async fn lock(
        conn: &mut PgConnection,
        lock: NamedLock,
        timeout: Duration,
    ) -> Result<bool, sqlx::Error> {
        let statement = format!(
            "SET lock_timeout = '{}ms'; SELECT pg_advisory_lock({LOCK_CLASS}, {}); RESET lock_timeout",
            timeout.as_millis().max(1),
            lock_key(lock)
        );
        match sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if sqlstate(&e).as_deref() == Some("55P03") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `pg_terminate_backend` with a timeout waits until the backend has left the
    /// process array, which it does after aborting its transaction (or finishing a
    /// `COMMIT` it was already running). A pid that is no backend gives `false` and a
    /// warning: then it is gone if no backend has it.
    async fn end_session(
        pool: &Pool<Postgres>,
        id: u64,
        timeout: Duration,
    ) -> Result<bool, sqlx::Error> {
        let pid = i32::try_from(id)
            .map_err(|e| sqlx::Error::Protocol(format!("backend pid {id}: {e}")))?;
        let row = sqlx::query("SELECT pg_terminate_backend($1, $2)")
            .bind(pid)
            .bind(timeout.as_millis().max(1) as i64)
            .fetch_one(pool)
            .await?;
        if row.try_get::<bool, _>(0)? {
            return Ok(true);
        }
        let row = sqlx::query("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(pool)
            .await?;
        Ok(row.try_get::<i64, _>(0)? == 0)
    }

    async fn unlock(conn: &mut PgConnection, lock: NamedLock) -> Result<(), sqlx::Error> {
        let row = sqlx::query("SELECT pg_advisory_unlock($1, $2)")
            .bind(LOCK_CLASS)
            .bind(lock_key(lock))
            .fetch_one(conn)
            .await?;
        if row.try_get::<bool, _>(0)? {
            Ok(())
        } else {
            Err(sqlx::Error::Protocol(format!(
                "the {lock:?} advisory lock was not held by this session"
            )))
        }
    }

    async fn check_server(
        pool: &Pool<Postgres>,
        database: &str,
    ) -> Result<ServerLimits, sqlx::Error> {
        let row = sqlx::query(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'), \
             current_setting('full_page_writes')",
        )
        .fetch_one(pool)
        .await?;
        let fsync: String = row.try_get(0)?;
        let synchronous_commit: String = row.try_get(1)?;
        let full_page_writes: String = row.try_get(2)?;
        if fsync != "on" {
            tracing::warn!(
                database,
                fsync,
                "the PostgreSQL server does not fsync: a committed batch may be lost or the database corrupted in a power failure; set fsync = on"
            );
        }
        if synchronous_commit == "off" {
            tracing::warn!(
                database,
                synchronous_commit,
                "the PostgreSQL server acknowledges commits before they are flushed: a committed batch may be lost in a crash; set synchronous_commit = on"
            );
        }
        if full_page_writes != "on" {
            tracing::warn!(
                database,
                full_page_writes,
                "full_page_writes is off: a torn page after a power failure may corrupt the log unless the storage writes 8 KiB pages atomically"
            );
        }
        Ok(ServerLimits {
            max_packet: MAX_MESSAGE,
        })
    }

    /// The connection or the server went away (class 08, 57P01..57P03), too many
    /// connections (53300), or the server gave up on a lock or a serialization
    /// (40001, 40P01, 55P03): the statement or transaction rolled back.
    fn is_transient(e: &sqlx::Error) -> bool {
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(_) => sqlstate(e).is_some_and(|code| {
                code.starts_with("08")
                    || matches!(
                        code.as_str(),
                        "40001" | "40P01" | "55P03" | "53300" | "57P01" | "57P02" | "57P03"
                    )
            }),
            _ => false,
        }
    }

    fn is_undefined_table(e: &sqlx::Error) -> bool {
        sqlstate(e).as_deref() == Some("42P01")
    }

    fn rows_affected(r: &sqlx::postgres::PgQueryResult) -> u64 {
        r.rows_affected()
    }

    fn int_col(row: &PgRow, i: usize) -> Result<Option<u64>, sqlx::Error> {
        let signed = match row.try_get::<Option<i64>, _>(i) {
            Ok(v) => v,
            Err(_) => match row.try_get::<Option<i32>, _>(i) {
                Ok(v) => v.map(i64::from),
                Err(_) => row.try_get::<Option<i16>, _>(i)?.map(i64::from),
            },
        };
        signed
            .map(|v| {
                u64::try_from(v).map_err(|e| sqlx::Error::ColumnDecode {
                    index: i.to_string(),
                    source: Box::new(e),
                })
            })
            .transpose()
    }

    fn flag_col(row: &PgRow, i: usize) -> Result<bool, sqlx::Error> {
        if let Ok(v) = row.try_get::<bool, _>(i) {
            return Ok(v);
        }
        let s: String = row.try_get(i)?;
        Ok(matches!(s.trim(), "on" | "true" | "1"))
    }
}

/// The second advisory-lock key of a named lock.
fn lock_key(lock: NamedLock) -> i32 {
    match lock {
        NamedLock::Schema => 1,
        NamedLock::Sequencer => 2,
    }
}

/// The SQLSTATE of a database error.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<PgDatabaseError>()
            .map(|p| p.code().to_string()),
        _ => None,
    }
}
