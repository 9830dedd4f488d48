//! MySQL/MariaDB storage for tlogd: several frontends share one database.
//!
//! The database holds four InnoDB tables (schema in `migrations/`, applied by
//! [`MysqlStorage::connect`]; every statement is in the `sql` module):
//!
//! * `tlogd_meta`: one row, the schema compatibility version and the origin of the
//!   log the database holds. A database of another log, or one upgraded by a newer
//!   tlogd, is refused ([`OpenError`]).
//! * `tlogd_tree`: one row, the committed tree size and root: the commit point. Its row
//!   lock sequences the commits of every frontend.
//! * `tlogd_tiles`: hash tiles (`tile_level` 0..=63) and entry bundles (`tile_level`
//!   255), one row per tile position holding its newest width. Hash tiles and bundles
//!   are prefix-stable (a partial of width W is the first W hashes or entries of every
//!   wider version of the same tile), so a read of width W is served from a stored row
//!   of width >= W by truncation, and no partial tile is ever garbage.
//! * `tlogd_checkpoint`: one row, the published signed checkpoint and its size.
//!
//! # Commit protocol (see `tlogd_core::engine` for the engine's side)
//!
//! One transaction per batch:
//!
//! 1. `BEGIN`; `SELECT size, root FROM tlogd_tree ... FOR UPDATE`: the row lock that
//!    sequences every frontend's commits, held until the transaction ends.
//! 2. Compare-and-swap: if the locked state is not the batch's `prev`, `ROLLBACK` and
//!    return [`StorageError::Conflict`]. Nothing of the batch was written.
//! 3. Upsert every tile and bundle of the batch, many rows per statement (at most
//!    4 MiB each, within the server's `max_allowed_packet`). Rows written here are
//!    invisible to every other session until step 5.
//! 4. `UPDATE tlogd_tree` to the batch's `next` state.
//! 5. `COMMIT`: the tiles and the state become visible and durable together (the redo
//!    log is flushed at commit with `innodb_flush_log_at_trx_commit = 1`, checked at
//!    connect). Only then does [`LogStorage::commit`] return `Ok`.
//!
//! An error before `COMMIT` was sent leaves the transaction rolled back, so transient
//! ones (connection lost, server restarting, deadlock, lock wait timeout) are retried,
//! a few times within a bounded delay. An error during `COMMIT` itself is uncertain and
//! returned as [`StorageError::Backend`]: the engine re-reads the state to learn the
//! outcome.
//!
//! # Reads and publishing
//!
//! Every row is written by a committed transaction, so every read returns committed
//! data ([`LogStorage::reads_are_committed`] is `true`): a frontend serves what another
//! frontend committed. Full tiles are immutable and kept in a bounded memory cache.
//! [`LogStorage::publish_checkpoint`] never takes the tree lock and never moves the
//! stored checkpoint to a smaller tree, so concurrent frontends cannot make it go
//! backwards.
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

mod cache;
mod sql;
#[cfg(feature = "testdb")]
pub mod testdb;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySqlPool, Row};
use tlogd_core::engine::{CommitBatch, LogStorage, StorageError, TreeState};
use tlogd_core::tile::{TILE_WIDTH, TileId, TileKind};

use cache::TileCache;

pub use sql::SCHEMA_VERSION;

/// Most tile bytes sent in one upsert statement.
const MAX_STATEMENT_BYTES: usize = 4 << 20;
/// MySQL's limit on placeholders in one prepared statement.
const MAX_PLACEHOLDERS: usize = 65_535;
/// Room for the statement text and row headers beside the tile bytes in a packet.
const PACKET_OVERHEAD: usize = 64 << 10;
/// The largest entry bundle: 256 entries of 65,535 bytes with their length prefixes.
const MAX_BUNDLE_BYTES: u64 = 256 * (2 + 65_535);
/// How long a starting frontend waits for another one's schema set-up.
const SCHEMA_LOCK_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts of one operation against transient errors.
const MAX_ATTEMPTS: u32 = 5;
/// First and largest pause between attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Connection and cache settings.
#[derive(Clone, Debug)]
pub struct MysqlOptions {
    /// Most connections in the pool (at least 2: the sequencing lock holds one while a
    /// batch commits on another).
    pub max_connections: u32,
    /// How long to wait for a connection (to connect, or for a free one in the pool).
    /// Also bounds how long an operation keeps retrying transient errors.
    pub connect_timeout: Duration,
    /// Memory budget of the full-tile cache, in bytes (0 disables it).
    pub tile_cache_bytes: usize,
    /// How long a frontend waits for the sequencing lock held by another one.
    pub lock_timeout: Duration,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions {
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
            tile_cache_bytes: 64 << 20,
            lock_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL does not parse.
    #[error("invalid MySQL URL: {0}")]
    InvalidUrl(String),
    /// The URL names no database.
    #[error("the MySQL URL names no database (mysql://user:password@host:port/DATABASE)")]
    NoDatabase,
    /// The server could not be reached or refused the login.
    #[error("cannot connect to MySQL at {target}: {error}")]
    Connect {
        /// Host, port and database (never the password).
        target: String,
        /// The driver's error.
        error: sqlx::Error,
    },
    /// The database was upgraded by a newer tlogd whose schema this one cannot use.
    #[error(
        "database {database} has tlogd schema version {found}, newer than version {supported} that this tlogd supports: upgrade tlogd"
    )]
    SchemaTooNew {
        /// The database name.
        database: String,
        /// The version in `tlogd_meta`.
        found: u32,
        /// [`SCHEMA_VERSION`].
        supported: u32,
    },
    /// Applying the schema migrations failed.
    #[error("migrating the schema of database {database}: {error}")]
    Migrate {
        /// The database name.
        database: String,
        /// The migrator's error.
        error: sqlx::migrate::MigrateError,
    },
    /// The database holds another log.
    #[error("database {database} holds the log {found:?}, not {expected:?}")]
    OriginMismatch {
        /// The database name.
        database: String,
        /// The origin configured.
        expected: String,
        /// The origin in `tlogd_meta`.
        found: String,
    },
    /// The tlogd tables hold something a correct database would not.
    #[error("database {database} is not a usable tlogd database: {reason}")]
    Corrupt {
        /// The database name.
        database: String,
        /// What is wrong.
        reason: String,
    },
    /// A query failed while opening.
    #[error("database {database}: {error}")]
    Database {
        /// The database name.
        database: String,
        /// The driver's error.
        error: sqlx::Error,
    },
}

/// A tlog-tiles log in a MySQL or MariaDB database (see the crate documentation).
pub struct MysqlStorage {
    pool: MySqlPool,
    database: String,
    cache: TileCache,
    /// Most tile bytes per upsert statement.
    statement_bytes: usize,
    /// The server's `max_allowed_packet`.
    max_packet: u64,
    /// Bound on the time spent retrying one operation.
    retry_window: Duration,
    lock_timeout: Duration,
    /// The connection holding the sequencing lock, between
    /// [`lock_sequencer`](Self::lock_sequencer) and
    /// [`unlock_sequencer`](Self::unlock_sequencer).
    sequencer: tokio::sync::Mutex<Option<PoolConnection<MySql>>>,
}

/// Why one commit attempt failed.
enum Attempt {
    /// The stored state is not `prev` (found size).
    Conflict(u64),
    /// Failed before `COMMIT` was sent: the transaction did not commit.
    NotCommitted(sqlx::Error),
    /// The stored state is unreadable.
    Corrupt(String),
    /// `COMMIT` itself failed: the outcome is unknown.
    Uncertain(sqlx::Error),
}

impl MysqlStorage {
    /// Connect to the database at `url` (`mysql://user:password@host:port/database`),
    /// apply the schema migrations, and claim the database for the log `origin` (or
    /// check that it holds that log).
    pub async fn connect(url: &str, origin: &str, opts: MysqlOptions) -> Result<Self, OpenError> {
        let conn_opts =
            MySqlConnectOptions::from_str(url).map_err(|e| OpenError::InvalidUrl(e.to_string()))?;
        let database = conn_opts
            .get_database()
            .filter(|d| !d.is_empty())
            .ok_or(OpenError::NoDatabase)?
            .to_string();
        let target = match conn_opts.get_socket() {
            Some(socket) => format!("{}/{database}", socket.display()),
            None => format!(
                "{}:{}/{database}",
                conn_opts.get_host(),
                conn_opts.get_port()
            ),
        };
        let pool = MySqlPoolOptions::new()
            .max_connections(opts.max_connections.max(2))
            .acquire_timeout(opts.connect_timeout)
            .connect_with(conn_opts)
            .await
            .map_err(|error| OpenError::Connect { target, error })?;
        let db_err = |error| OpenError::Database {
            database: database.clone(),
            error,
        };
        let corrupt = |reason: String| OpenError::Corrupt {
            database: database.clone(),
            reason,
        };
        let too_new = |found: u32| OpenError::SchemaTooNew {
            database: database.clone(),
            found,
            supported: SCHEMA_VERSION,
        };

        // Frontends starting together on an empty database must not both apply the
        // first migration: sqlx's own migration lock did not prevent that on MariaDB
        // 10.11 (both inserted the meta row), so schema set-up runs under a lock of
        // ours, held by this connection until the origin is claimed.
        let mut schema_conn = pool.acquire().await.map_err(db_err)?;
        let row = sqlx::query(sql::GET_SCHEMA_LOCK)
            .bind(SCHEMA_LOCK_TIMEOUT.as_secs())
            .fetch_one(&mut *schema_conn)
            .await
            .map_err(db_err)?;
        if opt_int_col(&row, 0).map_err(db_err)? != Some(1) {
            return Err(corrupt(format!(
                "another tlogd held the schema lock for over {} s",
                SCHEMA_LOCK_TIMEOUT.as_secs()
            )));
        }

        // A schema from a newer tlogd is refused before anything touches it.
        match sqlx::query(sql::SELECT_SCHEMA_VERSION)
            .fetch_optional(&pool)
            .await
        {
            Ok(Some(row)) => {
                let found = int_col(&row, 0).map_err(db_err)?;
                if found > SCHEMA_VERSION as u64 {
                    return Err(too_new(found.min(u32::MAX as u64) as u32));
                }
            }
            Ok(None) => return Err(corrupt("tlogd_meta has no row".into())),
            Err(e) if db_error_number(&e) == Some(sql::ER_NO_SUCH_TABLE) => {}
            Err(e) => return Err(db_err(e)),
        }

        let mut migrator = sqlx::migrate!();
        migrator.dangerous_set_table_name(sql::MIGRATIONS_TABLE);
        // Migrations of a newer, still compatible tlogd are fine: the compatibility
        // version above is what decides.
        migrator.set_ignore_missing(true);
        migrator
            .run(&pool)
            .await
            .map_err(|error| OpenError::Migrate {
                database: database.clone(),
                error,
            })?;

        sqlx::query(sql::CLAIM_ORIGIN)
            .bind(origin.as_bytes())
            .execute(&pool)
            .await
            .map_err(db_err)?;
        let row = sqlx::query(sql::SELECT_META)
            .fetch_optional(&pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| corrupt("tlogd_meta has no row".into()))?;
        let version = int_col(&row, 0).map_err(db_err)?;
        if version > SCHEMA_VERSION as u64 {
            return Err(too_new(version.min(u32::MAX as u64) as u32));
        }
        let found: Option<Vec<u8>> = row.try_get(1).map_err(db_err)?;
        let found = found.ok_or_else(|| corrupt("tlogd_meta has no origin".into()))?;
        if found != origin.as_bytes() {
            return Err(OpenError::OriginMismatch {
                database,
                expected: origin.to_string(),
                found: String::from_utf8_lossy(&found).into_owned(),
            });
        }

        // Closing the connection releases the lock if the release fails.
        if sqlx::query(sql::RELEASE_SCHEMA_LOCK)
            .fetch_one(&mut *schema_conn)
            .await
            .is_err()
        {
            schema_conn.close().await.ok();
        }

        let row = sqlx::query(sql::SELECT_SERVER_SETTINGS)
            .fetch_one(&pool)
            .await
            .map_err(db_err)?;
        let max_packet = int_col(&row, 0).map_err(db_err)?;
        let flush = int_col(&row, 1).map_err(db_err)?;
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
        let statement_bytes = MAX_STATEMENT_BYTES
            .min((max_packet as usize).saturating_sub(PACKET_OVERHEAD) / 2)
            .max(64 << 10);
        tracing::info!(database, "opened MySQL log storage");
        Ok(MysqlStorage {
            pool,
            database,
            cache: TileCache::new(opts.tile_cache_bytes),
            statement_bytes,
            max_packet,
            retry_window: opts.connect_timeout,
            lock_timeout: opts.lock_timeout,
            sequencer: tokio::sync::Mutex::new(None),
        })
    }

    /// The database name.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The connection pool (for diagnostics and tests).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Close every connection; later operations fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Take the sequencing lock shared by every frontend of this database (a named
    /// MySQL lock, held on a dedicated connection until
    /// [`unlock_sequencer`](Self::unlock_sequencer), and dropped by the server if that
    /// connection dies). Commits stay correct without it (compare-and-swap under the
    /// tree row lock); it keeps busy frontends from starving each other.
    pub async fn lock_sequencer(&self) -> Result<(), StorageError> {
        let mut held = self.sequencer.lock().await;
        if let Some(stale) = held.take() {
            // Never released: closing the connection drops its lock.
            stale.close().await.ok();
        }
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| backend("sequencing lock", &e))?;
        let secs = self.lock_timeout.as_secs().max(1);
        let row = sqlx::query(sql::GET_SEQUENCER_LOCK)
            .bind(secs)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| backend("sequencing lock", &e))?;
        match opt_int_col(&row, 0).map_err(|e| backend("sequencing lock", &e))? {
            Some(1) => {
                *held = Some(conn);
                Ok(())
            }
            Some(_) => Err(StorageError::Backend(format!(
                "timed out after {secs} s waiting for the sequencing lock of database {} (held by another frontend)",
                self.database
            ))),
            None => Err(StorageError::Backend(format!(
                "GET_LOCK failed for the sequencing lock of database {}",
                self.database
            ))),
        }
    }

    /// Release the lock taken by [`lock_sequencer`](Self::lock_sequencer). Best effort:
    /// if the release fails, the connection is closed, which releases the lock too.
    pub async fn unlock_sequencer(&self) {
        let Some(mut conn) = self.sequencer.lock().await.take() else {
            return;
        };
        if let Err(e) = sqlx::query(sql::RELEASE_SEQUENCER_LOCK)
            .fetch_one(&mut *conn)
            .await
        {
            tracing::warn!(error = %e, "releasing the sequencing lock failed; closing its connection");
            conn.close().await.ok();
        }
    }

    /// Run `op` again while it fails with a transient error, within bounds.
    async fn retry<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, StorageError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if self.may_retry(&e, attempt, started, backoff) => {
                    tracing::warn!(error = %e, attempt, "MySQL {what} failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(backend(what, &e)),
            }
        }
    }

    fn may_retry(
        &self,
        e: &sqlx::Error,
        attempt: u32,
        started: Instant,
        backoff: Duration,
    ) -> bool {
        is_transient(e)
            && attempt < MAX_ATTEMPTS
            && started.elapsed() + backoff <= self.retry_window.max(Duration::from_secs(1))
    }

    /// Group the batch's tiles into upsert statements: ranges of `batch.tiles`.
    fn plan_statements(
        &self,
        batch: &CommitBatch,
    ) -> Result<Vec<std::ops::Range<usize>>, StorageError> {
        let max_rows = MAX_PLACEHOLDERS / sql::INSERT_TILES_PARAMS_PER_ROW;
        let mut out = Vec::new();
        let mut start = 0;
        let mut bytes = 0usize;
        for (i, (id, data)) in batch.tiles.iter().enumerate() {
            if data.len() as u64 + PACKET_OVERHEAD as u64 > self.max_packet {
                return Err(StorageError::Backend(format!(
                    "{} is {} bytes, too large for the MySQL server's max_allowed_packet of {} bytes; raise it to at least 32M",
                    id.path(),
                    data.len(),
                    self.max_packet
                )));
            }
            if i > start && (bytes + data.len() > self.statement_bytes || i - start == max_rows) {
                out.push(start..i);
                start = i;
                bytes = 0;
            }
            bytes += data.len();
        }
        if start < batch.tiles.len() {
            out.push(start..batch.tiles.len());
        }
        Ok(out)
    }

    /// One transaction: steps 1 to 5 of the commit protocol.
    async fn try_commit(
        &self,
        batch: &CommitBatch,
        statements: &[std::ops::Range<usize>],
    ) -> Result<(), Attempt> {
        let mut tx = self.pool.begin().await.map_err(Attempt::NotCommitted)?;
        match stage(&mut tx, batch, statements).await {
            Ok(()) => tx.commit().await.map_err(Attempt::Uncertain),
            Err(e) => {
                // Best effort: a transaction never committed is rolled back by the
                // server when its connection goes, too.
                tx.rollback().await.ok();
                Err(e)
            }
        }
    }
}

/// Steps 1 to 4 inside the transaction.
async fn stage(
    tx: &mut sqlx::Transaction<'static, MySql>,
    batch: &CommitBatch,
    statements: &[std::ops::Range<usize>],
) -> Result<(), Attempt> {
    // 1. The sequencing row lock.
    let row = sqlx::query(sql::SELECT_TREE_FOR_UPDATE)
        .fetch_optional(&mut **tx)
        .await
        .map_err(Attempt::NotCommitted)?;
    let found = decode_state(row)
        .map_err(|e| match e {
            StateError::Db(e) => Attempt::NotCommitted(e),
            StateError::Corrupt(m) => Attempt::Corrupt(m),
        })?
        .unwrap_or_else(TreeState::empty);
    // 2. Compare-and-swap.
    if found != batch.prev {
        return Err(Attempt::Conflict(found.size));
    }
    // 3. The tiles.
    for range in statements {
        let rows = &batch.tiles[range.clone()];
        let mut q = sqlx::query(AssertSqlSafe(sql::insert_tiles(rows.len())))
            // Small statements recur (a few edge tiles per batch): keep them prepared.
            .persistent(rows.len() <= 16);
        for (id, data) in rows {
            q = q
                .bind(tile_level(id))
                .bind(id.index)
                .bind(id.width)
                .bind(data.as_slice());
        }
        q.execute(&mut **tx).await.map_err(Attempt::NotCommitted)?;
    }
    // 4. The new state.
    sqlx::query(sql::UPDATE_TREE)
        .bind(batch.next.size)
        .bind(&batch.next.root[..])
        .execute(&mut **tx)
        .await
        .map_err(Attempt::NotCommitted)?;
    Ok(())
}

enum StateError {
    Db(sqlx::Error),
    Corrupt(String),
}

/// The `tlogd_tree` row: `None` for a log never written.
fn decode_state(row: Option<MySqlRow>) -> Result<Option<TreeState>, StateError> {
    let row = row.ok_or_else(|| StateError::Corrupt("tlogd_tree has no row".into()))?;
    let size = int_col(&row, 0).map_err(StateError::Db)?;
    let root: Option<Vec<u8>> = row.try_get(1).map_err(StateError::Db)?;
    match root {
        None if size == 0 => Ok(None),
        None => Err(StateError::Corrupt(format!(
            "tlogd_tree has size {size} but no root"
        ))),
        Some(root) => {
            let root: [u8; 32] = root.try_into().map_err(|r: Vec<u8>| {
                StateError::Corrupt(format!("tlogd_tree root is {} bytes", r.len()))
            })?;
            Ok(Some(TreeState { size, root }))
        }
    }
}

/// `tile_level` of a tile.
fn tile_level(id: &TileId) -> u8 {
    match id.kind {
        TileKind::Hash { level } => level,
        TileKind::Entries => sql::ENTRIES_LEVEL,
    }
}

/// The length of tile `id` (width `id.width`) within `data`, a stored version of the
/// same tile of width `stored`; `None` if the stored one is narrower.
fn prefix_len(id: &TileId, stored: u16, data: &[u8]) -> Result<Option<usize>, StorageError> {
    if stored < id.width {
        return Ok(None);
    }
    tlogd_core::tile::tile_prefix(id.kind, data, stored, id.width)
        .map(|p| Some(p.len()))
        .ok_or_else(|| {
            StorageError::Corrupt(format!(
                "stored {} (width {stored}) is not a tile of that width",
                id.full().path()
            ))
        })
}

/// The tree size on the second line of a signed checkpoint.
fn checkpoint_size(signed: &[u8]) -> Result<u64, StorageError> {
    tlogd_core::checkpoint::signed_size(signed)
        .ok_or_else(|| StorageError::Corrupt("checkpoint has no tree size line".into()))
}

/// An integer column, whatever integer type the server reports it as.
fn int_col(row: &MySqlRow, i: usize) -> Result<u64, sqlx::Error> {
    opt_int_col(row, i)?.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source: "unexpected NULL".into(),
    })
}

fn opt_int_col(row: &MySqlRow, i: usize) -> Result<Option<u64>, sqlx::Error> {
    if let Ok(v) = row.try_get::<Option<u64>, _>(i) {
        return Ok(v);
    }
    if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
        return Ok(v.map(|v| v.max(0) as u64));
    }
    // System variables may come back as text ("ON"/"OFF" or digits).
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

/// The MySQL error number of a database error.
fn db_error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

/// Errors after which the same operation may succeed: the connection or the server
/// went away, or InnoDB gave up on a lock (the statement or transaction rolled back).
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

fn backend(what: &str, e: &sqlx::Error) -> StorageError {
    StorageError::Backend(format!("MySQL {what}: {e}"))
}

impl LogStorage for MysqlStorage {
    fn backend_name(&self) -> &'static str {
        "mysql"
    }

    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        let row = self
            .retry("state read", || {
                sqlx::query(sql::SELECT_TREE).fetch_optional(&self.pool)
            })
            .await?;
        decode_state(row).map_err(|e| match e {
            StateError::Db(e) => backend("state read", &e),
            StateError::Corrupt(m) => StorageError::Corrupt(m),
        })
    }

    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        let statements = self.plan_statements(&batch)?;
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let e = match self.try_commit(&batch, &statements).await {
                Ok(()) => return Ok(()),
                Err(Attempt::Conflict(found)) => {
                    return Err(StorageError::Conflict {
                        expected: batch.prev.size,
                        found,
                    });
                }
                Err(Attempt::Corrupt(m)) => return Err(StorageError::Corrupt(m)),
                Err(Attempt::Uncertain(e)) => {
                    return Err(StorageError::Backend(format!(
                        "MySQL COMMIT of batch {}..{} failed, outcome unknown: {e}",
                        batch.prev.size, batch.next.size
                    )));
                }
                Err(Attempt::NotCommitted(e)) => e,
            };
            if !self.may_retry(&e, attempt, started, backoff) {
                return Err(StorageError::Backend(format!(
                    "MySQL: batch {}..{} not committed: {e}",
                    batch.prev.size, batch.next.size
                )));
            }
            tracing::warn!(error = %e, attempt, "MySQL commit rolled back; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn read_tiles(&self, ids: &[TileId]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        // Cached full tiles from memory, every other position in one query.
        let mut out: Vec<Option<Vec<u8>>> = vec![None; ids.len()];
        let mut want: Vec<(usize, (u8, u64))> = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            if id.width == 0 || id.width as u64 > TILE_WIDTH {
                continue;
            }
            let key = (tile_level(id), id.index);
            match self.cache.get(&key) {
                Some(full) => {
                    out[i] = prefix_len(id, TILE_WIDTH as u16, &full)?.map(|n| full[..n].to_vec());
                }
                None => want.push((i, key)),
            }
        }
        if want.is_empty() {
            return Ok(out);
        }
        let statement = sql::select_tiles(want.len());
        let rows = self
            .retry("tile read", || {
                let mut q = sqlx::query(AssertSqlSafe(statement.as_str()));
                for (_, (level, index)) in &want {
                    q = q.bind(*level).bind(*index);
                }
                q.fetch_all(&self.pool)
            })
            .await?;
        let read = |e: sqlx::Error| backend("tile read", &e);
        for row in rows {
            let level = int_col(&row, 0).map_err(read)?;
            let index = int_col(&row, 1).map_err(read)?;
            let width = int_col(&row, 2).map_err(read)?;
            let data: Vec<u8> = row.try_get(3).map_err(read)?;
            let width = u16::try_from(width)
                .ok()
                .filter(|w| (1..=TILE_WIDTH as u16).contains(w))
                .ok_or_else(|| {
                    StorageError::Corrupt(format!("tile ({level}, {index}) has width {width}"))
                })?;
            for (i, key) in &want {
                if (key.0 as u64, key.1) == (level, index) {
                    out[*i] = prefix_len(&ids[*i], width, &data)?.map(|n| data[..n].to_vec());
                }
            }
            if width as u64 == TILE_WIDTH {
                self.cache
                    .insert((level as u8, index), Arc::from(&data[..]));
            }
        }
        Ok(out)
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self
            .read_tiles(std::slice::from_ref(id))
            .await?
            .pop()
            .flatten())
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        let size = checkpoint_size(signed)?;
        self.retry("checkpoint write", || {
            sqlx::query(sql::UPSERT_CHECKPOINT)
                .bind(size)
                .bind(signed)
                .execute(&self.pool)
        })
        .await?;
        Ok(())
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        let row = self
            .retry("checkpoint read", || {
                sqlx::query(sql::SELECT_CHECKPOINT).fetch_optional(&self.pool)
            })
            .await?;
        row.map(|r| r.try_get::<Vec<u8>, _>(0))
            .transpose()
            .map_err(|e| backend("checkpoint read", &e))
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        let row = sqlx::query(sql::SELECT_READ_ONLY)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| backend("probe", &e))?;
        if flag_col(&row, 0).map_err(|e| backend("probe", &e))? {
            return Err(StorageError::Backend(format!(
                "the MySQL server of database {} is read-only (@@global.read_only is set)",
                self.database
            )));
        }
        Ok(())
    }

    fn acquire_sequencer(&self) -> impl Future<Output = Result<(), StorageError>> + Send {
        self.lock_sequencer()
    }

    fn release_sequencer(&self) -> impl Future<Output = ()> + Send {
        self.unlock_sequencer()
    }

    fn reads_are_committed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_are_cut_after_w_entries() {
        let mut b = Vec::new();
        for e in [&b"one"[..], b"two", b"three"] {
            tlogd_core::bundle::append_entry(&mut b, e).unwrap();
        }
        let id = |w| TileId::entries(0, w);
        assert_eq!(prefix_len(&id(1), 3, &b).unwrap(), Some(5));
        assert_eq!(prefix_len(&id(2), 3, &b).unwrap(), Some(10));
        assert_eq!(prefix_len(&id(3), 3, &b).unwrap(), Some(b.len()));
        assert_eq!(prefix_len(&id(4), 3, &b).unwrap(), None);
        assert!(prefix_len(&id(2), 3, &b[..7]).is_err());
    }

    #[test]
    fn hash_tiles_are_cut_after_w_hashes() {
        let t = vec![1u8; 32 * 5];
        let id = |w| TileId::hash(1, 7, w);
        assert_eq!(prefix_len(&id(2), 5, &t).unwrap(), Some(64));
        assert_eq!(prefix_len(&id(5), 5, &t).unwrap(), Some(160));
        assert_eq!(prefix_len(&id(6), 5, &t).unwrap(), None);
        assert!(prefix_len(&id(2), 5, &t[..100]).is_err());
    }

    #[test]
    fn checkpoint_size_is_the_second_line() {
        assert_eq!(
            checkpoint_size(b"example.com/log\n70000\nroot=\n\n- sig\n").unwrap(),
            70000
        );
        assert!(checkpoint_size(b"example.com/log").is_err());
        assert!(checkpoint_size(b"example.com/log\nx\n").is_err());
    }
}
