-- The published checkpoint in a MEDIUMBLOB (16 MiB) instead of a BLOB (65,535 bytes):
-- a checkpoint carries one signature line per log key and per witness cosignature,
-- and an ML-DSA-44 line (signed-note type 0x06) is about 3.3 KB, so some twenty of
-- them (a log key being rotated, a large witness policy) would not fit a BLOB.
-- Compatible with schema version 1 (older releases read and write the same bytes).
-- Applying it again is harmless.
ALTER TABLE tlogd_checkpoint MODIFY data MEDIUMBLOB NOT NULL;
