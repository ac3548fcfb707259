-- Where `import --follow` stopped reading a directory of accounting files
-- (PBS `server_priv/accounting/YYYYMMDD`), so a restarted follower resumes
-- there. Advanced only after the lines before it were recorded: a crash in
-- between re-reads a few lines, which are then replays (no second charge).
CREATE TABLE follow_cursor (
    source      text PRIMARY KEY CHECK (length(source) BETWEEN 1 AND 4096),
    file        text NOT NULL CHECK (file ~ '^[0-9]{8}$'),
    byte_offset bigint NOT NULL CHECK (byte_offset >= 0),
    lines       bigint NOT NULL DEFAULT 0 CHECK (lines >= 0),  -- lines of `file` read so far
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE follow_cursor IS
    'import --follow: per followed directory (and cluster), the file and byte offset read and recorded so far';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        GRANT SELECT, INSERT, UPDATE ON follow_cursor TO hpc_ledger_ingest;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        GRANT SELECT ON follow_cursor TO hpc_ledger_billing;
    END IF;
END
$$;
