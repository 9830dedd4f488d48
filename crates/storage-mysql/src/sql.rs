//! The MySQL/MariaDB spelling of what the shared statements
//! (`tlogd_storage_sql::statements`) leave to the dialect: upserts, named locks and
//! server settings. The schema itself is in `migrations/`.

/// MySQL error number of a missing table (before the first migration).
pub const ER_NO_SUCH_TABLE: u16 = 1146;

/// Server settings checked when connecting: the largest packet (bounds one statement
/// and one tile) and whether commits are flushed to disk.
pub const SELECT_SERVER_SETTINGS: &str =
    "SELECT @@global.max_allowed_packet, @@global.innodb_flush_log_at_trx_commit";

/// A position keeps its newest (widest) tile. (`VALUES(col)` is deprecated but still
/// supported by MySQL 8 and is the only spelling MariaDB understands.)
pub const INSERT_TILES_TAIL: &str =
    " ON DUPLICATE KEY UPDATE width = VALUES(width), data = VALUES(data)";

/// Store the signed checkpoint unless a larger one is stored already. MySQL assigns
/// left to right, so `data` is compared against the old `size` before `size` moves.
/// Binds: size, data.
pub const UPSERT_CHECKPOINT: &str = "INSERT INTO tlogd_checkpoint (id, size, data) VALUES (1, ?, ?) \
     ON DUPLICATE KEY UPDATE \
     data = IF(VALUES(size) >= size, VALUES(data), data), \
     size = GREATEST(size, VALUES(size))";

/// Insert a blob unless its key exists (then no row is affected). `IGNORE` also turns
/// other errors into warnings, but none can occur here: keys are checked ASCII paths of
/// at most 512 bytes and a `LONGBLOB` holds more than a packet. Binds: key, data.
pub const INSERT_BLOB: &str = "INSERT IGNORE INTO tlogd_blobs (blob_key, data) VALUES (?, ?)";

/// `/readyz`: a round trip, and whether the server refuses writes (a replica).
pub const SELECT_READ_ONLY: &str = "SELECT @@global.read_only";

/// Whether a server session is still there. Binds: its id.
pub const SESSION_EXISTS: &str = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?";

/// Take the schema lock of this database (named after it, since MySQL's named locks
/// are server-wide; hashed to stay under the 64-character limit). Binds: timeout in
/// seconds. Returns 1 when taken, 0 on timeout.
pub const GET_SCHEMA_LOCK: &str = "SELECT GET_LOCK(CONCAT('tlogd.schema.', SHA1(DATABASE())), ?)";

/// Releases [`GET_SCHEMA_LOCK`].
pub const RELEASE_SCHEMA_LOCK: &str =
    "SELECT RELEASE_LOCK(CONCAT('tlogd.schema.', SHA1(DATABASE())))";

/// Take the sequencing lock of this database, like [`GET_SCHEMA_LOCK`].
pub const GET_SEQUENCER_LOCK: &str = "SELECT GET_LOCK(CONCAT('tlogd.seq.', SHA1(DATABASE())), ?)";

/// Release the sequencing lock.
pub const RELEASE_SEQUENCER_LOCK: &str =
    "SELECT RELEASE_LOCK(CONCAT('tlogd.seq.', SHA1(DATABASE())))";

// ---- Tests ----

/// Readiness probe of a test server.
#[cfg(feature = "testdb")]
pub const SELECT_ONE: &str = "SELECT 1";

/// Create a database (test servers only). `name` must be a plain identifier.
#[cfg(feature = "testdb")]
pub fn create_database(name: &str) -> String {
    debug_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    format!("CREATE DATABASE `{name}`")
}
