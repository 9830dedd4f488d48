//! The statements both dialects run, in one place: plain SQL over the shared schema
//! shape (see the crate documentation), no stored procedures. They are written with `?`
//! placeholders; [`Placeholders::Numbered`] dialects (PostgreSQL) get `$1, $2, ...`
//! through [`Statements::new`]. What differs in syntax (upserts, locks, server settings)
//! comes from the [`Dialect`](crate::Dialect).

/// How a dialect writes bind parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholders {
    /// `?` (MySQL, MariaDB).
    Question,
    /// `$1`, `$2`, ... (PostgreSQL).
    Numbered,
}

/// `tile_level` of entry bundles; hash tiles use their level, 0..=63.
pub const ENTRIES_LEVEL: u8 = 255;
/// The `level` of a static-ct-api data tile's rows.
pub const DATA_LEVEL: u8 = 254;

/// Placeholders per row of the tile upsert (level, index, width, data).
pub const INSERT_TILES_PARAMS_PER_ROW: usize = 4;

/// The schema version, read before migrating (the table may not exist yet).
const SELECT_SCHEMA_VERSION: &str = "SELECT schema_version FROM tlogd_meta WHERE id = 1";

/// Claim the database for a log: sets the origin only if no log claimed it yet.
/// Binds: origin.
const CLAIM_ORIGIN: &str = "UPDATE tlogd_meta SET origin = ? WHERE id = 1 AND origin IS NULL";

/// The schema version and the origin of the log the database holds.
const SELECT_META: &str = "SELECT schema_version, origin FROM tlogd_meta WHERE id = 1";

/// The committed tree state (non-locking read of the latest committed version).
const SELECT_TREE: &str = "SELECT size, root, frozen FROM tlogd_tree WHERE id = 1";

/// The committed tree state, taking the row lock that sequences commits: held until
/// the transaction ends. Both InnoDB and PostgreSQL return the newest committed
/// version of a row locked this way, even after waiting for another transaction. The
/// fourth column, the dialect's session id, is what fences a `COMMIT` whose outcome is
/// unknown (see the crate documentation).
fn select_tree_for_update(session_id: &str) -> String {
    format!("SELECT size, root, frozen, {session_id} FROM tlogd_tree WHERE id = 1 FOR UPDATE")
}

/// Advance the tree state (under the row lock). Binds: size, root, frozen (0 or 1).
const UPDATE_TREE: &str = "UPDATE tlogd_tree SET size = ?, root = ?, frozen = ? WHERE id = 1";

/// The published signed checkpoint.
const SELECT_CHECKPOINT: &str = "SELECT data FROM tlogd_checkpoint WHERE id = 1";

/// The blob at a key ([`LogStorage::read_blob`](tlogd_core::engine::LogStorage::read_blob)).
/// Binds: key.
const SELECT_BLOB: &str = "SELECT data FROM tlogd_blobs WHERE blob_key = ?";

/// Every fixed statement, with the dialect's placeholders.
#[derive(Clone, Debug)]
pub struct Statements {
    placeholders: Placeholders,
    /// See [`SELECT_SCHEMA_VERSION`].
    pub select_schema_version: String,
    /// See [`CLAIM_ORIGIN`].
    pub claim_origin: String,
    /// See [`SELECT_META`].
    pub select_meta: String,
    /// See [`SELECT_TREE`].
    pub select_tree: String,
    /// See [`select_tree_for_update`].
    pub select_tree_for_update: String,
    /// See [`UPDATE_TREE`].
    pub update_tree: String,
    /// The dialect's monotonic checkpoint upsert. Binds: size, data.
    pub upsert_checkpoint: String,
    /// See [`SELECT_CHECKPOINT`].
    pub select_checkpoint: String,
    /// The dialect's read-only probe (one boolean column).
    pub select_read_only: String,
    /// The dialect's insert-if-absent of a blob: no row affected when the key exists.
    /// Binds: key, data.
    pub insert_blob: String,
    /// See [`SELECT_BLOB`].
    pub select_blob: String,
    /// The dialect's tail of the tile upsert (a position keeps its newest tile).
    upsert_tiles_tail: &'static str,
}

impl Statements {
    /// The statements of a dialect.
    pub fn new(
        placeholders: Placeholders,
        upsert_tiles_tail: &'static str,
        upsert_checkpoint: &str,
        select_read_only: &str,
        session_id: &str,
        insert_blob: &str,
    ) -> Self {
        let n = |s: &str| number(placeholders, s);
        Statements {
            placeholders,
            select_schema_version: n(SELECT_SCHEMA_VERSION),
            claim_origin: n(CLAIM_ORIGIN),
            select_meta: n(SELECT_META),
            select_tree: n(SELECT_TREE),
            select_tree_for_update: n(&select_tree_for_update(session_id)),
            update_tree: n(UPDATE_TREE),
            upsert_checkpoint: n(upsert_checkpoint),
            select_checkpoint: n(SELECT_CHECKPOINT),
            select_read_only: n(select_read_only),
            insert_blob: n(insert_blob),
            select_blob: n(SELECT_BLOB),
            upsert_tiles_tail,
        }
    }

    /// The multi-row upsert of `rows` tiles. Binds per row: level, index, width, data.
    pub fn insert_tiles(&self, rows: usize) -> String {
        let mut s = String::with_capacity(80 + rows * 24 + self.upsert_tiles_tail.len());
        s.push_str("INSERT INTO tlogd_tiles (tile_level, tile_index, width, data) VALUES ");
        let mut next = 1;
        for i in 0..rows {
            if i > 0 {
                s.push_str(", ");
            }
            s.push('(');
            for p in 0..INSERT_TILES_PARAMS_PER_ROW {
                if p > 0 {
                    s.push_str(", ");
                }
                self.placeholder(&mut s, &mut next);
            }
            s.push(')');
        }
        s.push_str(self.upsert_tiles_tail);
        s
    }

    /// The rows of `n` tile positions, in any order. Binds per position: level, index.
    pub fn select_tiles(&self, n: usize) -> String {
        let mut s =
            String::from("SELECT tile_level, tile_index, width, data FROM tlogd_tiles WHERE ");
        let mut next = 1;
        for i in 0..n {
            if i > 0 {
                s.push_str(" OR ");
            }
            s.push_str("(tile_level = ");
            self.placeholder(&mut s, &mut next);
            s.push_str(" AND tile_index = ");
            self.placeholder(&mut s, &mut next);
            s.push(')');
        }
        s
    }

    fn placeholder(&self, s: &mut String, next: &mut usize) {
        match self.placeholders {
            Placeholders::Question => s.push('?'),
            Placeholders::Numbered => {
                s.push('$');
                s.push_str(&next.to_string());
            }
        }
        *next += 1;
    }
}

/// `sql` with its `?` placeholders in the dialect's spelling. The statements above
/// hold no `?` inside string literals, so every `?` is a placeholder.
fn number(placeholders: Placeholders, sql: &str) -> String {
    match placeholders {
        Placeholders::Question => sql.to_string(),
        Placeholders::Numbered => {
            let mut out = String::with_capacity(sql.len() + 8);
            let mut next = 1;
            for c in sql.chars() {
                if c == '?' {
                    out.push('$');
                    out.push_str(&next.to_string());
                    next += 1;
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_are_numbered_for_postgres() {
        let s = Statements::new(
            Placeholders::Numbered,
            " TAIL",
            "X ?, ?",
            "R",
            "S()",
            "B ?, ?",
        );
        assert_eq!(
            s.select_tree_for_update,
            "SELECT size, root, frozen, S() FROM tlogd_tree WHERE id = 1 FOR UPDATE"
        );
        assert_eq!(
            s.update_tree,
            "UPDATE tlogd_tree SET size = $1, root = $2, frozen = $3 WHERE id = 1"
        );
        assert_eq!(s.upsert_checkpoint, "X $1, $2");
        assert_eq!(s.insert_blob, "B $1, $2");
        assert_eq!(
            s.select_blob,
            "SELECT data FROM tlogd_blobs WHERE blob_key = $1"
        );
        assert_eq!(
            s.insert_tiles(2),
            "INSERT INTO tlogd_tiles (tile_level, tile_index, width, data) VALUES \
             ($1, $2, $3, $4), ($5, $6, $7, $8) TAIL"
        );
        assert!(s.select_tiles(2).ends_with(
            "(tile_level = $1 AND tile_index = $2) OR (tile_level = $3 AND tile_index = $4)"
        ));
    }

    #[test]
    fn mysql_keeps_question_marks() {
        let s = Statements::new(Placeholders::Question, " TAIL", "X ?", "R", "S()", "B ?, ?");
        assert_eq!(s.claim_origin, CLAIM_ORIGIN);
        let t = s.insert_tiles(3);
        assert_eq!(t.matches('?').count(), 3 * INSERT_TILES_PARAMS_PER_ROW);
        assert!(t.contains("(?, ?, ?, ?), (?, ?, ?, ?), (?, ?, ?, ?) TAIL"));
    }
}
