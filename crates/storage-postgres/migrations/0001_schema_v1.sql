-- tlogd PostgreSQL schema, compatibility version 1: the shape shared with MySQL (see
-- tlogd_storage_sql for the commit protocol). Transactions and row locks are the
-- protocol.

-- One row (id = 1): the schema compatibility version (bumped by a later migration
-- only when older tlogd releases can no longer use the database) and the origin of
-- the log this database holds (claimed by the first tlogd that connects).
CREATE TABLE tlogd_meta (
    id SMALLINT NOT NULL PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    origin BYTEA NULL
);

INSERT INTO tlogd_meta (id, schema_version, origin) VALUES (1, 1, NULL);

-- One row (id = 1): the committed tree state, the commit point of every batch. Its
-- row lock (SELECT ... FOR UPDATE) sequences the commits of every frontend. A NULL
-- root means the log was never written.
CREATE TABLE tlogd_tree (
    id SMALLINT NOT NULL PRIMARY KEY,
    size BIGINT NOT NULL CHECK (size >= 0),
    root BYTEA NULL
);

INSERT INTO tlogd_tree (id, size, root) VALUES (1, 0, NULL);

-- Hash tiles (tile_level 0..63) and entry bundles (tile_level 255): one row per tile
-- position holding its newest width. Tiles are prefix-stable, so every narrower
-- partial of the same position is served by truncating this one. A full bundle is
-- at most 16,777,472 bytes; bytea holds up to 1 GiB.
CREATE TABLE tlogd_tiles (
    tile_level SMALLINT NOT NULL,
    tile_index BIGINT NOT NULL,
    width SMALLINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (tile_level, tile_index)
);

-- Hashes do not compress and bundles rarely do: store large values out of line
-- without trying to compress them (saves CPU on every commit).
ALTER TABLE tlogd_tiles ALTER COLUMN data SET STORAGE EXTERNAL;

-- One row (id = 1): the published signed checkpoint and the tree size it names.
CREATE TABLE tlogd_checkpoint (
    id SMALLINT NOT NULL PRIMARY KEY,
    size BIGINT NOT NULL,
    data BYTEA NOT NULL
);
