-- tlogd MySQL/MariaDB schema, compatibility version 1. See src/lib.rs for the
-- commit protocol. Every table is InnoDB: transactions and row locks are the protocol.

-- One row (id = 1): the schema compatibility version (bumped by a later migration
-- only when older tlogd releases can no longer use the database) and the origin of
-- the log this database holds (claimed by the first tlogd that connects).
CREATE TABLE tlogd_meta (
    id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
    schema_version INT UNSIGNED NOT NULL,
    origin VARBINARY(1024) NULL
) ENGINE = InnoDB;

INSERT INTO tlogd_meta (id, schema_version, origin) VALUES (1, 1, NULL);

-- One row (id = 1): the committed tree state, the commit point of every batch. Its
-- row lock (SELECT ... FOR UPDATE) sequences the commits of every frontend. A NULL
-- root means the log was never written.
CREATE TABLE tlogd_tree (
    id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
    size BIGINT UNSIGNED NOT NULL,
    root BINARY(32) NULL
) ENGINE = InnoDB;

INSERT INTO tlogd_tree (id, size, root) VALUES (1, 0, NULL);

-- Hash tiles (tile_level 0..63) and entry bundles (tile_level 255): one row per tile
-- position holding its newest width. Tiles are prefix-stable, so every narrower
-- partial of the same position is served by truncating this one.
-- LONGBLOB: a bundle of 256 entries of 65535 bytes is 16,777,472 bytes, 257 more
-- than a MEDIUMBLOB holds.
CREATE TABLE tlogd_tiles (
    tile_level TINYINT UNSIGNED NOT NULL,
    tile_index BIGINT UNSIGNED NOT NULL,
    width SMALLINT UNSIGNED NOT NULL,
    data LONGBLOB NOT NULL,
    PRIMARY KEY (tile_level, tile_index)
) ENGINE = InnoDB;

-- One row (id = 1): the published signed checkpoint and the tree size it names.
CREATE TABLE tlogd_checkpoint (
    id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
    size BIGINT UNSIGNED NOT NULL,
    data BLOB NOT NULL
) ENGINE = InnoDB;
