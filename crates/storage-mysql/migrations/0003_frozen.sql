-- The frozen flag of the tree state (tlogd_core TreeState::frozen): set by the commit
-- that freezes the log, under the same row lock and compare-and-swap as every commit,
-- so every frontend sharing the database sees it. 0: writable. Compatible with schema
-- version 1 (older releases neither read nor write it).
ALTER TABLE tlogd_tree ADD COLUMN frozen SMALLINT NOT NULL DEFAULT 0;
