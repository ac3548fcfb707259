-- What `import --follow` had read of its current file: a SHA-256 of the
-- file's first and last 4 KiB before `byte_offset` (and the offset). A file
-- replaced under the same name by a longer one (a copy-and-truncate
-- rotation, a rename and create, a restore from elsewhere) no longer
-- matches, and the follower reads it again from its start (what was
-- recorded is replayed) instead of reading on from an offset into other
-- content, which lost every job before it. NULL: a cursor saved before this
-- column, or at the start of a file; the next position saved fills it.
ALTER TABLE follow_cursor
    ADD COLUMN seen bytea CHECK (seen IS NULL OR length(seen) = 32);
COMMENT ON COLUMN follow_cursor.seen IS
    'SHA-256 of byte_offset and the first and last 4096 bytes of file before byte_offset, as read; a mismatch means the file was replaced: read again from 0';
