-- Write-once, content-addressed blobs published beside the tree (CT's issuer
-- certificates at issuer/<hex SHA-256>), by key; see tlogd_storage_sql. Compatible
-- with schema version 1: older releases ignore the table. IF NOT EXISTS, so applying
-- it never fails on a database that already has the table.
-- Keys are ASCII paths compared byte for byte (ascii_bin): under a case-insensitive
-- collation, two keys differing in case would be one row.
-- LONGBLOB: a blob is bounded by max_allowed_packet, not by the column.
CREATE TABLE IF NOT EXISTS tlogd_blobs (
    blob_key VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    data LONGBLOB NOT NULL
) ENGINE = InnoDB;
