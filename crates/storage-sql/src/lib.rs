//! The SQL layer of tlogd's database backends: one schema shape, one commit protocol,
//! one read path, shared by MySQL/MariaDB (`tlogd-storage-mysql`) and PostgreSQL
//! (`tlogd-storage-postgres`). A [`Dialect`] holds what differs: the driver, upsert
//! syntax, the named locks, transient-error classification, and the server settings
//! checked at start-up.
//!
//! # Schema shape
//!
//! Five tables, created by each dialect's embedded migrations in its own DDL:
//!
//! * `tlogd_meta`: one row (`id = 1`), the schema compatibility version and the origin
//!   of the log the database holds. A database of another log, or one upgraded by a
//!   newer tlogd, is refused ([`OpenError`]).
//! * `tlogd_tree`: one row, the committed tree size and root (`NULL` for a log never
//!   written) and the frozen flag (a later migration's column, default 0): the commit
//!   point. Its row lock sequences the commits of every frontend.
//! * `tlogd_tiles`: hash tiles (`tile_level` 0..=63) and entry bundles (`tile_level`
//!   255), one row per tile position holding its newest width. Hash tiles and bundles
//!   are prefix-stable (a partial of width W is the first W hashes or entries of every
//!   wider version of the same tile), so a read of width W is served from a stored row
//!   of width >= W by truncation, and no partial tile is ever garbage.
//! * `tlogd_checkpoint`: one row, the published signed checkpoint and its size.
//! * `tlogd_blobs`: write-once, content-addressed blobs beside the tree
//!   ([`LogStorage::put_blob`]: CT's issuer certificates), by key. Created by a later
//!   migration with `CREATE TABLE IF NOT EXISTS`, so a database of an earlier release
//!   gains it when it is opened, and older releases (which ignore it) still open it.
//!   A blob is inserted if its key is absent, in its own autocommitted statement; when
//!   the key exists, the stored bytes are read and compared.
//!
//! # Commit protocol (see `tlogd_core::engine` for the engine's side)
//!
//! One transaction per batch:
//!
//! 1. `BEGIN`; `SELECT size, root, frozen FROM tlogd_tree ... FOR UPDATE`: the row lock that
//!    sequences every frontend's commits, held until the transaction ends.
//! 2. Compare-and-swap: if the locked state is not the batch's `prev`, `ROLLBACK` and
//!    return [`StorageError::Conflict`]. Nothing of the batch was written.
//! 3. Upsert every tile and bundle of the batch, many rows per statement (at most
//!    4 MiB each, within the server's message limit). Rows written here are invisible
//!    to every other session until step 5.
//! 4. `UPDATE tlogd_tree` to the batch's `next` state (a freeze is a batch of no
//!    tiles whose `next` differs from `prev` only by the frozen flag).
//! 5. `COMMIT`: the tiles and the state become visible and durable together (the
//!    server flushes its log at commit; each dialect checks the settings that make it
//!    so at connect). Only then does [`LogStorage::commit`] return `Ok`.
//!
//! An error before `COMMIT` was sent leaves the transaction rolled back, so transient
//! ones (connection lost, server restarting, deadlock, lock timeout) are retried, a few
//! times within a bounded delay. An error during `COMMIT` itself is uncertain:
//!
//! 6. The session that sent the `COMMIT` is ended from another connection
//!    ([`Dialect::end_session`], with the id read in step 1), and waited for until the
//!    server has dropped it. Then return [`StorageError::Backend`]: the engine re-reads
//!    the state to learn the outcome, and that outcome is final, since a `COMMIT` still
//!    on its way cannot land any more. If the session cannot be ended (the server
//!    unreachable), return [`StorageError::Unsettled`]: the batch may still land, so
//!    its adds are answered "uncertain" (503, resubmit), never "not logged", and the
//!    engine's later check of a grown tree keeps it from being logged twice.
//!
//! # Reads and publishing
//!
//! Every row is written by a committed transaction, so every read returns committed
//! data ([`LogStorage::reads_are_committed`] is `true`): a frontend serves what another
//! frontend committed. Full tiles are immutable and kept in a bounded memory cache.
//! [`LogStorage::publish_checkpoint`] never takes the tree lock and never moves the
//! stored checkpoint to a smaller tree, so concurrent frontends cannot make it go
//! backwards.

#![warn(missing_docs)]

mod cache;
mod dialect;
#[cfg(feature = "testsupport")]
pub mod faultproxy;
pub mod statements;
#[cfg(feature = "testsupport")]
pub mod testsupport;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::{Pool, PoolConnection, PoolOptions};
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
};
use tlogd_core::engine::{CommitBatch, LogStorage, StorageError, TreeState, check_blob_key};
use tlogd_core::tile::{TILE_WIDTH, TileId, TileKind};

use cache::TileCache;
pub use dialect::{Dialect, NamedLock, ServerLimits, Target};
use statements::{DATA_LEVEL, ENTRIES_LEVEL, INSERT_TILES_PARAMS_PER_ROW, Statements};

/// The schema compatibility version this release reads and writes. A database whose
/// `tlogd_meta.schema_version` is higher was upgraded by a newer release and is refused.
pub const SCHEMA_VERSION: u32 = 1;

/// The table sqlx records applied migrations in (not the default `_sqlx_migrations`,
/// so a database shared with another sqlx application keeps both apart).
pub const MIGRATIONS_TABLE: &str = "tlogd_migrations";

/// Most tile bytes sent in one upsert statement.
const MAX_STATEMENT_BYTES: usize = 4 << 20;
/// The limit on placeholders in one prepared statement (MySQL and PostgreSQL alike).
const MAX_PLACEHOLDERS: usize = 65_535;
/// Room for the statement text and row headers beside the tile bytes in a message.
pub const PACKET_OVERHEAD: usize = 64 << 10;
/// The largest entry bundle: 256 entries of 65,535 bytes with their length prefixes.
pub const MAX_BUNDLE_BYTES: u64 = 256 * (2 + 65_535);
/// How long a starting frontend waits for another one's schema set-up.
const SCHEMA_LOCK_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts of one operation against transient errors.
const MAX_ATTEMPTS: u32 = 5;
/// First and largest pause between attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A connection idle at least this long is pinged before it is used ([`pool_options`]).
const PING_IF_IDLE: Duration = Duration::from_millis(250);

/// The pools' options: a connection is tested before use only if it has been idle for
/// [`PING_IF_IDLE`]. sqlx pings every connection as it goes back to the pool, and by
/// default again as it is taken out. Under load that second ping was a round trip of
/// its own before every commit (`PING`, `BEGIN`, `SELECT ... FOR UPDATE`, the upserts,
/// `UPDATE`, `COMMIT`) and every tile read (`PING`, `EXECUTE`), for a connection that
/// had answered the first ping a millisecond before: MySQL over h2c, where the commit
/// bounds the rate, +10 to +14 % per alternated round (#59, benches/results/history.md,
/// 2026-11-29 night). A connection that died meanwhile fails its first statement
/// instead, and every operation's retries ([`SqlStorage::retry`], the commit's
/// attempts) take another; one that sat idle, across a server restart say, is still
/// pinged and replaced unseen.
fn pool_options<D: Dialect>() -> PoolOptions<D::Db> {
    PoolOptions::<D::Db>::new()
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// Connection and cache settings.
#[derive(Clone, Debug)]
pub struct SqlOptions {
    /// Most connections in the pool (at least 2: the sequencing lock holds one while a
    /// batch commits on another).
    pub max_connections: u32,
    /// How long to wait for a connection (to connect, or for a free one in the pool).
    /// Also bounds how long an operation keeps retrying transient errors.
    pub connect_timeout: Duration,
    /// Memory budget of the full-tile cache, in bytes (0 disables it).
    pub tile_cache_bytes: usize,
    /// Connections of a second pool that serves public tile reads only
    /// ([`LogStorage::read_public_tile`]), opened as readers need them: a flood of
    /// readers waits for these and never for the connections commits use.
    pub reader_connections: u32,
    /// How long a frontend waits for the sequencing lock held by another one.
    pub lock_timeout: Duration,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
            tile_cache_bytes: 64 << 20,
            reader_connections: 4,
            lock_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL does not parse.
    #[error("invalid database URL: {0}")]
    InvalidUrl(String),
    /// The URL names no database.
    #[error("the database URL names no database (scheme://user:password@host:port/DATABASE)")]
    NoDatabase,
    /// The server could not be reached or refused the login.
    #[error("cannot connect to {product} at {target}: {error}")]
    Connect {
        /// The server family.
        product: &'static str,
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

/// A tlog-tiles log in a SQL database (see the crate documentation).
pub struct SqlStorage<D: Dialect> {
    pool: Pool<D::Db>,
    /// Public tile reads only (see [`SqlOptions::reader_connections`]).
    readers: Pool<D::Db>,
    database: String,
    statements: Statements,
    cache: TileCache,
    /// Most tile bytes per upsert statement.
    statement_bytes: usize,
    /// The server's message limit.
    max_packet: u64,
    /// Bound on the time spent retrying one operation.
    retry_window: Duration,
    lock_timeout: Duration,
    /// The connection holding the sequencing lock, between
    /// [`lock_sequencer`](Self::lock_sequencer) and
    /// [`unlock_sequencer`](Self::unlock_sequencer).
    sequencer: tokio::sync::Mutex<Option<PoolConnection<D::Db>>>,
    dialect: PhantomData<D>,
}

/// Why one commit attempt failed.
enum Attempt {
    /// The stored state is not `prev` (found size).
    Conflict(u64),
    /// Failed before `COMMIT` was sent: the transaction did not commit.
    NotCommitted(sqlx::Error),
    /// The stored state is unreadable.
    Corrupt(String),
    /// `COMMIT` itself failed: the outcome is unknown. The server session that sent it,
    /// to end before anyone reads the outcome back.
    Uncertain(sqlx::Error, Option<u64>),
}

impl<D: Dialect> SqlStorage<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    for<'a> i64: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> &'a [u8]: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> &'a str: Encode<'a, D::Db> + Type<D::Db>,
    for<'r> Vec<u8>: Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    /// Connect to the database at `url`, apply the schema migrations, and claim the
    /// database for the log `origin` (or check that it holds that log).
    pub async fn connect(url: &str, origin: &str, opts: SqlOptions) -> Result<Self, OpenError> {
        let Target {
            options,
            database,
            display,
        } = D::target(url)?;
        let readers = pool_options::<D>()
            .max_connections(opts.reader_connections.max(1))
            .min_connections(0)
            .acquire_timeout(opts.connect_timeout)
            .connect_lazy_with(options.clone());
        let pool = pool_options::<D>()
            .max_connections(opts.max_connections.max(2))
            .acquire_timeout(opts.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|error| OpenError::Connect {
                product: D::PRODUCT,
                target: display,
                error,
            })?;
        let statements = Statements::new(
            D::PLACEHOLDERS,
            D::UPSERT_TILES_TAIL,
            D::UPSERT_CHECKPOINT,
            D::SELECT_READ_ONLY,
            D::SESSION_ID,
            D::INSERT_BLOB,
        );
        let db_err = |error| OpenError::Database {
            database: database.clone(),
            error,
        };
        let corrupt = |reason: String| OpenError::Corrupt {
            database: database.clone(),
            reason,
        };
        let too_new = |found: u64| OpenError::SchemaTooNew {
            database: database.clone(),
            found: found.min(u32::MAX as u64) as u32,
            supported: SCHEMA_VERSION,
        };

        // Frontends starting together on an empty database must not both apply the
        // first migration: sqlx's own migration lock did not prevent that on MariaDB
        // 10.11 (both inserted the meta row), so schema set-up runs under a lock of
        // ours, held by this connection until the origin is claimed.
        let mut schema_conn = pool.acquire().await.map_err(db_err)?;
        if !D::lock(&mut schema_conn, NamedLock::Schema, SCHEMA_LOCK_TIMEOUT)
            .await
            .map_err(db_err)?
        {
            return Err(corrupt(format!(
                "another tlogd held the schema lock for over {} s",
                SCHEMA_LOCK_TIMEOUT.as_secs()
            )));
        }

        // A schema from a newer tlogd is refused before anything touches it.
        match sqlx::query(AssertSqlSafe(statements.select_schema_version.as_str()))
            .fetch_optional(&pool)
            .await
        {
            Ok(Some(row)) => {
                let found = int_col::<D>(&row, 0).map_err(db_err)?;
                if found > SCHEMA_VERSION as u64 {
                    return Err(too_new(found));
                }
            }
            Ok(None) => return Err(corrupt("tlogd_meta has no row".into())),
            Err(e) if D::is_undefined_table(&e) => {}
            Err(e) => return Err(db_err(e)),
        }

        D::migrate(&pool)
            .await
            .map_err(|error| OpenError::Migrate {
                database: database.clone(),
                error,
            })?;

        sqlx::query(AssertSqlSafe(statements.claim_origin.as_str()))
            .bind(origin.as_bytes())
            .execute(&pool)
            .await
            .map_err(db_err)?;
        let row = sqlx::query(AssertSqlSafe(statements.select_meta.as_str()))
            .fetch_optional(&pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| corrupt("tlogd_meta has no row".into()))?;
        let version = int_col::<D>(&row, 0).map_err(db_err)?;
        if version > SCHEMA_VERSION as u64 {
            return Err(too_new(version));
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
        if D::unlock(&mut schema_conn, NamedLock::Schema)
            .await
            .is_err()
        {
            schema_conn.close().await.ok();
        }

        let limits = D::check_server(&pool, &database).await.map_err(db_err)?;
        let statement_bytes = MAX_STATEMENT_BYTES
            .min((limits.max_packet as usize).saturating_sub(PACKET_OVERHEAD) / 2)
            .max(64 << 10);
        tracing::info!(database, backend = D::BACKEND, "opened SQL log storage");
        Ok(SqlStorage {
            pool,
            readers,
            database,
            statements,
            cache: TileCache::new(opts.tile_cache_bytes),
            statement_bytes,
            max_packet: limits.max_packet,
            retry_window: opts.connect_timeout,
            lock_timeout: opts.lock_timeout,
            sequencer: tokio::sync::Mutex::new(None),
            dialect: PhantomData,
        })
    }

    /// The database name.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The connection pool (for diagnostics and tests).
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// Close every connection; later operations fail.
    pub async fn close(&self) {
        self.readers.close().await;
        self.pool.close().await;
    }

    /// Take the sequencing lock shared by every frontend of this database (a named
    /// lock held on a dedicated connection until
    /// [`unlock_sequencer`](Self::unlock_sequencer), and dropped by the server if that
    /// connection dies). Commits stay correct without it (compare-and-swap under the
    /// tree row lock); it keeps busy frontends from starving each other.
    pub async fn lock_sequencer(&self) -> Result<(), StorageError> {
        let mut held = self.sequencer.lock().await;
        if let Some(stale) = held.take() {
            // Never released: closing the connection drops its lock.
            stale.close().await.ok();
        }
        let lock_err = |e: sqlx::Error| self.backend("sequencing lock", &e);
        let mut conn = self.pool.acquire().await.map_err(lock_err)?;
        let timeout = self.lock_timeout.max(Duration::from_secs(1));
        if D::lock(&mut conn, NamedLock::Sequencer, timeout)
            .await
            .map_err(lock_err)?
        {
            *held = Some(conn);
            Ok(())
        } else {
            Err(StorageError::Backend(format!(
                "timed out after {} s waiting for the sequencing lock of database {} (held by another frontend)",
                timeout.as_secs(),
                self.database
            )))
        }
    }

    /// Release the lock taken by [`lock_sequencer`](Self::lock_sequencer). Best effort:
    /// if the release fails, the connection is closed, which releases the lock too.
    pub async fn unlock_sequencer(&self) {
        let Some(mut conn) = self.sequencer.lock().await.take() else {
            return;
        };
        if let Err(e) = D::unlock(&mut conn, NamedLock::Sequencer).await {
            tracing::warn!(error = %e, "releasing the sequencing lock failed; closing its connection");
            conn.close().await.ok();
        }
    }

    fn backend(&self, what: &str, e: &sqlx::Error) -> StorageError {
        StorageError::Backend(format!("{} {what}: {e}", D::PRODUCT))
    }

    /// The blob at `key`, read on `pool`.
    async fn read_blob_on(
        &self,
        pool: &Pool<D::Db>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        check_blob_key(key)?;
        let row = self
            .retry("blob read", || {
                sqlx::query(AssertSqlSafe(self.statements.select_blob.as_str()))
                    .bind(key)
                    .fetch_optional(pool)
            })
            .await?;
        row.map(|r| r.try_get::<Vec<u8>, _>(0))
            .transpose()
            .map_err(|e| self.backend("blob read", &e))
    }

    /// `ids` read on `pool`: cached full tiles from memory, every other position in
    /// one query.
    async fn read_tiles_on(
        &self,
        pool: &Pool<D::Db>,
        ids: &[TileId],
    ) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
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
        let statement = self.statements.select_tiles(want.len());
        let rows = self
            .retry("tile read", || {
                let mut q = sqlx::query(AssertSqlSafe(statement.as_str()));
                for (_, (level, index)) in &want {
                    q = q.bind(*level as i64).bind(*index as i64);
                }
                q.fetch_all(pool)
            })
            .await?;
        let read = |e: sqlx::Error| self.backend("tile read", &e);
        for row in rows {
            let level = int_col::<D>(&row, 0).map_err(read)?;
            let index = int_col::<D>(&row, 1).map_err(read)?;
            let width = int_col::<D>(&row, 2).map_err(read)?;
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
                    tracing::warn!(error = %e, attempt, "{} {what} failed; retrying", D::PRODUCT);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(self.backend(what, &e)),
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
        D::is_transient(e)
            && attempt < MAX_ATTEMPTS
            && started.elapsed() + backoff <= self.retry_window.max(Duration::from_secs(1))
    }

    /// Group the batch's tiles into upsert statements: ranges of `batch.tiles`.
    fn plan_statements(
        &self,
        batch: &CommitBatch,
    ) -> Result<Vec<std::ops::Range<usize>>, StorageError> {
        let max_rows = MAX_PLACEHOLDERS / INSERT_TILES_PARAMS_PER_ROW;
        let mut out = Vec::new();
        let mut start = 0;
        let mut bytes = 0usize;
        for (i, (id, data)) in batch.tiles.iter().enumerate() {
            if data.len() as u64 + PACKET_OVERHEAD as u64 > self.max_packet {
                return Err(StorageError::Backend(format!(
                    "{} is {} bytes, too large for the {} server's message limit of {} bytes; raise it to at least 32M",
                    id.path(),
                    data.len(),
                    D::PRODUCT,
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
        match self.stage(&mut tx, batch, statements).await {
            Ok(session) => tx
                .commit()
                .await
                .map_err(|e| Attempt::Uncertain(e, session)),
            Err(e) => {
                // Best effort: a transaction never committed is rolled back by the
                // server when its connection goes, too.
                tx.rollback().await.ok();
                Err(e)
            }
        }
    }

    /// Steps 1 to 4 inside the transaction.
    async fn stage(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        batch: &CommitBatch,
        statements: &[std::ops::Range<usize>],
    ) -> Result<Option<u64>, Attempt> {
        // 1. The sequencing row lock, and this session's id.
        let row = sqlx::query(AssertSqlSafe(
            self.statements.select_tree_for_update.as_str(),
        ))
        .fetch_optional(&mut **tx)
        .await
        .map_err(Attempt::NotCommitted)?;
        let session = row.as_ref().and_then(|r| D::int_col(r, 3).ok().flatten());
        let found = decode_state::<D>(row)
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
            let mut q = sqlx::query(AssertSqlSafe(self.statements.insert_tiles(rows.len())))
                // Small statements recur (a few edge tiles per batch): keep them prepared.
                .persistent(rows.len() <= 16);
            for (id, data) in rows {
                q = q
                    .bind(tile_level(id) as i64)
                    .bind(id.index as i64)
                    .bind(id.width as i64)
                    .bind(data.as_slice());
            }
            q.execute(&mut **tx).await.map_err(Attempt::NotCommitted)?;
        }
        // 4. The new state.
        sqlx::query(AssertSqlSafe(self.statements.update_tree.as_str()))
            .bind(batch.next.size as i64)
            .bind(&batch.next.root[..])
            .bind(i64::from(batch.next.frozen))
            .execute(&mut **tx)
            .await
            .map_err(Attempt::NotCommitted)?;
        Ok(session)
    }

    /// Step 6 after a `COMMIT` whose outcome is unknown: end the session that sent it,
    /// so that the state the engine reads back next is final. Without this, a `COMMIT`
    /// still in flight (in a proxy, a socket buffer) reached the server after the read
    /// back had found the batch absent; the engine's later check kept it from being
    /// logged twice, but its adds had been answered "not logged" while they were.
    async fn fence(&self, session: Option<u64>) -> Result<(), String> {
        let id = session.ok_or("the session id was not read")?;
        match tokio::time::timeout(FENCE_TIMEOUT, D::end_session(&self.pool, id, FENCE_TIMEOUT))
            .await
        {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) | Err(_) => {
                Err(format!("session {id} still there after {FENCE_TIMEOUT:?}"))
            }
            Ok(Err(e)) => Err(format!("ending session {id}: {e}")),
        }
    }
}

/// How long ending the session of an uncertain `COMMIT` may take.
const FENCE_TIMEOUT: Duration = Duration::from_secs(10);

enum StateError {
    Db(sqlx::Error),
    Corrupt(String),
}

/// The `tlogd_tree` row: `None` for a log never written.
fn decode_state<D: Dialect>(
    row: Option<<D::Db as Database>::Row>,
) -> Result<Option<TreeState>, StateError>
where
    for<'r> Vec<u8>: Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let row = row.ok_or_else(|| StateError::Corrupt("tlogd_tree has no row".into()))?;
    let size = int_col::<D>(&row, 0).map_err(StateError::Db)?;
    let root: Option<Vec<u8>> = row.try_get(1).map_err(StateError::Db)?;
    let frozen = int_col::<D>(&row, 2).map_err(StateError::Db)? != 0;
    match root {
        None if size == 0 => Ok(None),
        None => Err(StateError::Corrupt(format!(
            "tlogd_tree has size {size} but no root"
        ))),
        Some(root) => {
            let root: [u8; 32] = root.try_into().map_err(|r: Vec<u8>| {
                StateError::Corrupt(format!("tlogd_tree root is {} bytes", r.len()))
            })?;
            Ok(Some(TreeState { size, root, frozen }))
        }
    }
}

/// A non-NULL integer column.
fn int_col<D: Dialect>(row: &<D::Db as Database>::Row, i: usize) -> Result<u64, sqlx::Error> {
    D::int_col(row, i)?.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source: "unexpected NULL".into(),
    })
}

/// `tile_level` of a tile.
fn tile_level(id: &TileId) -> u8 {
    match id.kind {
        TileKind::Hash { level } => level,
        TileKind::Entries => ENTRIES_LEVEL,
        TileKind::Data => DATA_LEVEL,
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

impl<D: Dialect> LogStorage for SqlStorage<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    for<'a> i64: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> &'a [u8]: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> &'a str: Encode<'a, D::Db> + Type<D::Db>,
    for<'r> Vec<u8>: Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    fn backend_name(&self) -> &'static str {
        D::BACKEND
    }

    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        let row = self
            .retry("state read", || {
                sqlx::query(AssertSqlSafe(self.statements.select_tree.as_str()))
                    .fetch_optional(&self.pool)
            })
            .await?;
        decode_state::<D>(row).map_err(|e| match e {
            StateError::Db(e) => self.backend("state read", &e),
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
                Err(Attempt::Uncertain(e, session)) => {
                    // Still an error: the engine reads the state back to learn the
                    // outcome, final once the session is gone.
                    let what = |settled: &str| {
                        format!(
                            "{} COMMIT of batch {}..{} failed, outcome unknown ({settled}): {e}",
                            D::PRODUCT,
                            batch.prev.size,
                            batch.next.size
                        )
                    };
                    return Err(match self.fence(session).await {
                        Ok(()) => StorageError::Backend(what(
                            "its session was ended, so the state read back is final",
                        )),
                        // The engine answers the batch "uncertain", never "not logged".
                        Err(why) => {
                            tracing::warn!(error = %why, "{}: could not end the session of an uncertain COMMIT; it may still land", D::PRODUCT);
                            StorageError::Unsettled(what(&format!("it may still land ({why})")))
                        }
                    });
                }
                Err(Attempt::NotCommitted(e)) => e,
            };
            if !self.may_retry(&e, attempt, started, backoff) {
                return Err(StorageError::Backend(format!(
                    "{}: batch {}..{} not committed: {e}",
                    D::PRODUCT,
                    batch.prev.size,
                    batch.next.size
                )));
            }
            tracing::warn!(error = %e, attempt, "{} commit rolled back; retrying", D::PRODUCT);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn read_tiles(&self, ids: &[TileId]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        self.read_tiles_on(&self.pool, ids).await
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self
            .read_tiles(std::slice::from_ref(id))
            .await?
            .pop()
            .flatten())
    }

    async fn read_public_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self
            .read_tiles_on(&self.readers, std::slice::from_ref(id))
            .await?
            .pop()
            .flatten())
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        let size = checkpoint_size(signed)?;
        self.retry("checkpoint write", || {
            sqlx::query(AssertSqlSafe(self.statements.upsert_checkpoint.as_str()))
                .bind(size as i64)
                .bind(signed)
                .execute(&self.pool)
        })
        .await?;
        Ok(())
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        let row = self
            .retry("checkpoint read", || {
                sqlx::query(AssertSqlSafe(self.statements.select_checkpoint.as_str()))
                    .fetch_optional(&self.pool)
            })
            .await?;
        row.map(|r| r.try_get::<Vec<u8>, _>(0))
            .transpose()
            .map_err(|e| self.backend("checkpoint read", &e))
    }

    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        _content_type: &'static str,
    ) -> Result<(), StorageError> {
        check_blob_key(key)?;
        if bytes.len() as u64 + PACKET_OVERHEAD as u64 > self.max_packet {
            return Err(StorageError::Backend(format!(
                "blob {key} is {} bytes, too large for the {} server's message limit of {} bytes",
                bytes.len(),
                D::PRODUCT,
                self.max_packet
            )));
        }
        // Insert-if-absent is idempotent, so a statement whose answer was lost is
        // simply sent again: it then finds the row, and the compare below decides.
        let inserted = self
            .retry("blob write", || {
                sqlx::query(AssertSqlSafe(self.statements.insert_blob.as_str()))
                    .bind(key)
                    .bind(bytes)
                    .execute(&self.pool)
            })
            .await?;
        if D::rows_affected(&inserted) > 0 {
            return Ok(());
        }
        match self.read_blob(key).await? {
            Some(stored) if stored == bytes => Ok(()),
            Some(stored) => Err(StorageError::Corrupt(format!(
                "blob {key} already holds other bytes ({} bytes, not these {})",
                stored.len(),
                bytes.len()
            ))),
            None => Err(StorageError::Backend(format!(
                "blob {key}: the insert was ignored but no row is stored"
            ))),
        }
    }

    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.read_blob_on(&self.pool, key).await
    }

    async fn read_public_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.read_blob_on(&self.readers, key).await
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        let row = sqlx::query(AssertSqlSafe(self.statements.select_read_only.as_str()))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.backend("probe", &e))?;
        if D::flag_col(&row, 0).map_err(|e| self.backend("probe", &e))? {
            return Err(StorageError::Backend(format!(
                "the {} server of database {} is read-only",
                D::PRODUCT,
                self.database
            )));
        }
        Ok(())
    }

    fn acquire_sequencer(&self) -> impl Future<Output = Result<(), StorageError>> + Send {
        self.lock_sequencer()
    }

    fn release_sequencer(&self, _idle: bool) -> impl Future<Output = ()> + Send {
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
