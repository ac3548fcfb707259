-- Accepted first, recorded next (issue 19, item 1; docs/slurm.md):
-- `serve --intake` answers a jobcomp post once its document is stored here,
-- durably, in one single-row INSERT (the cost of a pgbench transaction),
-- and its recording task takes the rows in batches, records them as every
-- post is recorded (the same pricing, replays, rejections) and deletes them
-- in the transaction that recorded them. An answered job is never lost: it
-- is either here or in the ledger (or kept in rejected_record).
--
-- `document` is the document as the ledger keeps it (its batch script and
-- environment removed), `exact` its bytes when they were not UTF-8, as
-- job_record and rejected_record keep them. Not part of the ledger: no
-- seal, statement or audit reads it; an empty table is the normal state.

CREATE TABLE job_intake (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now(),
    document    text NOT NULL,
    exact       bytea,
    -- Why it could not be recorded, nor kept as rejected (the database
    -- refused both): set aside so that the documents after it are
    -- recorded; tried again when serve starts. NULL: waiting.
    failed      text
);

COMMENT ON TABLE job_intake IS
    'jobcomp documents answered by serve --intake and not yet recorded; recorded and deleted in one transaction';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON job_intake TO hpc_ledger_ingest;
    END IF;
END
$$;
