//! Every SQL statement the backend runs, in one place. Plain SQL with `?` placeholders
//! and no stored procedures, so that another SQL backend (PostgreSQL: `$n`
//! placeholders, `ON CONFLICT ... DO UPDATE`, `pg_advisory_lock`) can follow it
//! statement by statement. The schema itself is in `migrations/`.

/// The schema compatibility version this release reads and writes. A database whose
/// `tlogd_meta.schema_version` is higher was upgraded by a newer release and is refused.
pub const SCHEMA_VERSION: u32 = 1;

/// The table sqlx records applied migrations in (not the default `_sqlx_migrations`,
/// so a database shared with another sqlx application keeps both apart).
pub const MIGRATIONS_TABLE: &str = "tlogd_migrations";

/// `tile_level` of entry bundles; hash tiles use their level, 0..=63.
pub const ENTRIES_LEVEL: u8 = 255;

/// MySQL error number of a missing table (before the first migration).
pub const ER_NO_SUCH_TABLE: u16 = 1146;

// ---- Opening ----

/// The schema version, read before migrating (the table may not exist yet).
pub const SELECT_SCHEMA_VERSION: &str = "SELECT schema_version FROM tlogd_meta WHERE id = 1";

/// Claim the database for a log: sets the origin only if no log claimed it yet.
/// Binds: origin.
pub const CLAIM_ORIGIN: &str = "UPDATE tlogd_meta SET origin = ? WHERE id = 1 AND origin IS NULL";

/// The schema version and the origin of the log the database holds.
pub const SELECT_META: &str = "SELECT schema_version, origin FROM tlogd_meta WHERE id = 1";

/// Server settings checked when connecting: the largest packet (bounds one statement
/// and one tile) and whether commits are flushed to disk.
pub const SELECT_SERVER_SETTINGS: &str =
    "SELECT @@global.max_allowed_packet, @@global.innodb_flush_log_at_trx_commit";

// ---- Tree state and commit ----

/// The committed tree state (non-locking read of the latest committed version).
pub const SELECT_TREE: &str = "SELECT size, root FROM tlogd_tree WHERE id = 1";

/// The committed tree state, taking the row lock that sequences commits: held until
/// the transaction ends.
pub const SELECT_TREE_FOR_UPDATE: &str =
    "SELECT size, root FROM tlogd_tree WHERE id = 1 FOR UPDATE";

/// Advance the tree state (under the row lock). Binds: size, root.
pub const UPDATE_TREE: &str = "UPDATE tlogd_tree SET size = ?, root = ? WHERE id = 1";

/// Head of the multi-row tile upsert; followed by `rows` times [`INSERT_TILES_ROW`]
/// separated by commas, then [`INSERT_TILES_TAIL`]. Binds per row: level, index,
/// width, data.
pub const INSERT_TILES_HEAD: &str =
    "INSERT INTO tlogd_tiles (tile_level, tile_index, width, data) VALUES ";

/// One row of the tile upsert.
pub const INSERT_TILES_ROW: &str = "(?, ?, ?, ?)";

/// A position keeps its newest (widest) tile. (`VALUES(col)` is deprecated but still
/// supported by MySQL 8 and is the only spelling MariaDB understands.)
pub const INSERT_TILES_TAIL: &str =
    " ON DUPLICATE KEY UPDATE width = VALUES(width), data = VALUES(data)";

/// Placeholders per row of the tile upsert.
pub const INSERT_TILES_PARAMS_PER_ROW: usize = 4;

/// The upsert of `rows` tiles.
pub fn insert_tiles(rows: usize) -> String {
    let mut s = String::with_capacity(
        INSERT_TILES_HEAD.len() + rows * (INSERT_TILES_ROW.len() + 2) + INSERT_TILES_TAIL.len(),
    );
    s.push_str(INSERT_TILES_HEAD);
    for i in 0..rows {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(INSERT_TILES_ROW);
    }
    s.push_str(INSERT_TILES_TAIL);
    s
}

// ---- Tiles ----

/// The rows of `n` tile positions, in any order. Binds per position: level, index.
pub fn select_tiles(n: usize) -> String {
    let mut s = String::from("SELECT tile_level, tile_index, width, data FROM tlogd_tiles WHERE ");
    for i in 0..n {
        if i > 0 {
            s.push_str(" OR ");
        }
        s.push_str("(tile_level = ? AND tile_index = ?)");
    }
    s
}

// ---- Checkpoint ----

/// Store the signed checkpoint unless a larger one is stored already. MySQL assigns
/// left to right, so `data` is compared against the old `size` before `size` moves.
/// Binds: size, data.
pub const UPSERT_CHECKPOINT: &str = "INSERT INTO tlogd_checkpoint (id, size, data) VALUES (1, ?, ?) \
     ON DUPLICATE KEY UPDATE \
     data = IF(VALUES(size) >= size, VALUES(data), data), \
     size = GREATEST(size, VALUES(size))";

/// The published signed checkpoint.
pub const SELECT_CHECKPOINT: &str = "SELECT data FROM tlogd_checkpoint WHERE id = 1";

// ---- Probes and the sequencing lock ----

/// `/readyz`: a round trip, and whether the server refuses writes (a replica).
pub const SELECT_READ_ONLY: &str = "SELECT @@global.read_only";

/// Take the sequencing lock of this database (named after it, since MySQL's named
/// locks are server-wide; hashed to stay under the 64-character limit). Binds:
/// timeout in seconds. Returns 1 when taken, 0 on timeout.
/// Serializes schema set-up (migrations, origin claim) of frontends starting together.
pub const GET_SCHEMA_LOCK: &str = "SELECT GET_LOCK(CONCAT('tlogd.schema.', SHA1(DATABASE())), ?)";

/// Releases [`GET_SCHEMA_LOCK`].
pub const RELEASE_SCHEMA_LOCK: &str =
    "SELECT RELEASE_LOCK(CONCAT('tlogd.schema.', SHA1(DATABASE())))";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_tiles_has_four_placeholders_per_row() {
        let s = insert_tiles(3);
        assert_eq!(s.matches('?').count(), 3 * INSERT_TILES_PARAMS_PER_ROW);
        assert!(s.starts_with(INSERT_TILES_HEAD) && s.ends_with(INSERT_TILES_TAIL));
        assert!(s.contains("(?, ?, ?, ?), (?, ?, ?, ?), (?, ?, ?, ?) ON"));
    }
}
