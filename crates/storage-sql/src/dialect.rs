//! What differs between the SQL servers tlogd runs on.

use std::future::Future;
use std::time::Duration;

use sqlx::Database;
use sqlx::pool::Pool;

use crate::OpenError;
use crate::statements::Placeholders;

/// The two named locks of a database, both held on a dedicated connection and dropped
/// by the server when that connection dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamedLock {
    /// Serializes schema set-up (migrations, origin claim) of frontends starting
    /// together.
    Schema,
    /// The sequencing lock frontends take turns with
    /// ([`tlogd_core::engine::LogStorage::acquire_sequencer`]).
    Sequencer,
}

/// Where a URL points, parsed by the dialect.
pub struct Target<DB: Database> {
    /// Options to connect with.
    pub options: <DB::Connection as sqlx::Connection>::Options,
    /// The database name.
    pub database: String,
    /// Host, port and database (or socket), for messages; never the password.
    pub display: String,
}

/// Limits the server imposes on one statement.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// The largest message the server accepts (MySQL's `max_allowed_packet`); bounds
    /// one upsert statement and one tile.
    pub max_packet: u64,
}

/// One SQL server family: its driver, its spelling of what standard SQL lacks, and its
/// operational checks. Every method is static; an implementation is a unit struct.
///
/// The schema (five tables, see the crate documentation) and the statements in
/// [`crate::statements`] are shared; a dialect provides migrations that create that
/// shape in its own DDL.
pub trait Dialect: Send + Sync + Sized + 'static {
    /// The sqlx driver.
    type Db: Database + sqlx::database::HasStatementCache;

    /// Backend name for metrics and logs (`"mysql"`, `"postgres"`).
    const BACKEND: &'static str;
    /// The server family in messages (`"MySQL"`, `"PostgreSQL"`).
    const PRODUCT: &'static str;
    /// How bind parameters are written.
    const PLACEHOLDERS: Placeholders;
    /// Appended to the multi-row `INSERT INTO tlogd_tiles ... VALUES ...`: a position
    /// that exists keeps the new (wider) tile.
    const UPSERT_TILES_TAIL: &'static str;
    /// Store the signed checkpoint unless a larger one is stored already (the stored
    /// checkpoint never goes backwards). Binds: size, data.
    const UPSERT_CHECKPOINT: &'static str;
    /// Insert a blob into `tlogd_blobs (blob_key, data)` unless its key exists: then
    /// no row is affected and nothing changes. Binds: key, data.
    const INSERT_BLOB: &'static str;
    /// One boolean-ish column: whether the server refuses writes (a replica).
    const SELECT_READ_ONLY: &'static str;
    /// An expression for this connection's server session (the id that
    /// [`Dialect::end_session`] takes), read with the sequencing row lock.
    const SESSION_ID: &'static str;

    /// Parse a URL of this dialect.
    fn target(url: &str) -> Result<Target<Self::Db>, OpenError>;

    /// Apply the embedded migrations (creating the shared schema shape).
    fn migrate(
        pool: &Pool<Self::Db>,
    ) -> impl Future<Output = Result<(), sqlx::migrate::MigrateError>> + Send;

    /// End server session `id` from another connection of `pool` and wait, at most
    /// `timeout`, until it is gone: its open transaction is then rolled back, or its
    /// `COMMIT` already done, and nothing it sent later can commit. `Ok(false)` if it
    /// is still there at the timeout. A session already gone is `Ok(true)`.
    fn end_session(
        pool: &Pool<Self::Db>,
        id: u64,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Take `lock` on `conn`, waiting at most `timeout`: `Ok(false)` on timeout.
    fn lock(
        conn: &mut <Self::Db as Database>::Connection,
        lock: NamedLock,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Release `lock` held by `conn`.
    fn unlock(
        conn: &mut <Self::Db as Database>::Connection,
        lock: NamedLock,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Read the server settings that matter for durability and limits; warn (through
    /// `tracing`) about those that put committed batches at risk.
    fn check_server(
        pool: &Pool<Self::Db>,
        database: &str,
    ) -> impl Future<Output = Result<ServerLimits, sqlx::Error>> + Send;

    /// Errors after which the same operation may succeed: the connection or the server
    /// went away, or the server gave up on a lock (the statement or transaction rolled
    /// back).
    fn is_transient(e: &sqlx::Error) -> bool;

    /// The rows a statement changed (sqlx has no trait for it).
    fn rows_affected(r: &<Self::Db as Database>::QueryResult) -> u64;

    /// A missing table (the database was never migrated).
    fn is_undefined_table(e: &sqlx::Error) -> bool;

    /// An integer column, whatever integer type the server reports it as.
    fn int_col(row: &<Self::Db as Database>::Row, i: usize) -> Result<Option<u64>, sqlx::Error>;

    /// A boolean column or setting (integer or text such as `ON`/`OFF`).
    fn flag_col(row: &<Self::Db as Database>::Row, i: usize) -> Result<bool, sqlx::Error>;
}
