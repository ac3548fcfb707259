-- Retention of the raw records (issue 19, item 3): `archive` moves a
-- month's entries into its file (0037), and now also the raw text of the
-- job records whose charges left with them. In a ledger of years the
-- records are most of the bytes (docs/retention.md: 33 GB of 64.8 GB at
-- 51.9M entries, against 13 GB for the entries), and a retention policy
-- that destroys a month's file after seven years must find the scheduler's
-- text of its jobs there, not in the live database for ever.
--
-- What stays of such a record is everything the recorder and the audit
-- read: its keys, fingerprints (a re-sent job is still a replay), parsed
-- fields and how it was read. Its `raw` becomes '' and its `raw_bytes`
-- NULL, and `archived_record` keeps the SHA-256 of the text that left (of
-- the bytes the scheduler wrote: raw_bytes when they were kept, else raw's
-- UTF-8), which the file carries beside the text and `verify --archive`
-- compares. The record's row is changed only here: by
-- hl_archive_records(), for the records whose charges that month archived,
-- after their digests were checked against the text the database holds
-- and recorded; every other change of a job record is refused as before.

-- The bytes a record's digest is taken over.
CREATE FUNCTION hl_record_raw_sha256(raw text, raw_bytes bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT sha256(coalesce(raw_bytes, convert_to(raw, 'UTF8'))) $$;

-- No foreign keys: its only writer, hl_archive_records, takes the records
-- from archived_charge (whose keys are checked) joined to job_record, for
-- a month it finds in archived_period; a row-by-row reference check of a
-- month's records took longer than writing them (3.97 s against 1.27 s for
-- 150,524 records).
CREATE TABLE archived_record (
    job_record_id bigint PRIMARY KEY,
    -- The archived month whose file holds the text.
    period        date NOT NULL,
    raw_sha256    bytea NOT NULL CHECK (length(raw_sha256) = 32),
    raw_length    integer NOT NULL CHECK (raw_length >= 0)
);
CREATE INDEX archived_record_period ON archived_record (period, job_record_id);
COMMENT ON TABLE archived_record IS
    'Job records whose raw text was moved into an archived month''s file (hpc-ledger archive): the SHA-256 and length of the bytes that left; verify --archive compares the file''s text with them.';
CREATE TRIGGER archived_record_append_only BEFORE UPDATE OR DELETE ON archived_record
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER archived_record_no_truncate BEFORE TRUNCATE ON archived_record
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE archived_record ENABLE ALWAYS TRIGGER archived_record_append_only;
ALTER TABLE archived_record ENABLE ALWAYS TRIGGER archived_record_no_truncate;

-- A job record is append-only, except for one statement: the UPDATE in
-- hl_archive_records() (the call stack's third line, after this trigger
-- and the UPDATE, names it; its text sets raw to '' and raw_bytes to NULL
-- and nothing else) of the records whose digests it has just checked and
-- recorded. The checks are the function's, once for the month: checked
-- again row by row here (the digest looked up, the rows compared as
-- JSON) they took three times as long as the UPDATE itself. A guard
-- against mistakes, like the entries' (0037): the owner can still disable
-- it, which the audit reports.
CREATE FUNCTION hl_job_record_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    stack text;
BEGIN
    IF TG_OP = 'UPDATE' AND coalesce(current_setting('hl.archiving_records', true), '') = 'on'
       AND NEW.raw = '' AND NEW.raw_bytes IS NULL THEN
        GET DIAGNOSTICS stack = PG_CONTEXT;
        IF position(' hl_archive_records(date,bigint[],bytea[]) ' IN split_part(stack, E'\n', 3)) > 0 THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION '% is append-only: % is refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'HL001',
              HINT = 'Corrections are new rows (a reversal, a refund, an adjustment, a new dated row).';
END
$$;

DROP TRIGGER job_record_append_only ON job_record;
CREATE TRIGGER job_record_append_only BEFORE UPDATE OR DELETE ON job_record
    FOR EACH ROW EXECUTE FUNCTION hl_job_record_refuse_change();
ALTER TABLE job_record ENABLE ALWAYS TRIGGER job_record_append_only;

-- Move the raw text of an archived month's records out of the database,
-- in the transaction that archived the month (after hl_archive_months):
-- `ids` must be exactly the records whose charges that month archived
-- (archived_charge), each with the SHA-256 of the text written to its
-- file, which must be the text the database holds. Returns how many.
CREATE FUNCTION hl_archive_records(p date, ids bigint[], digests bytea[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    want bigint;
    n bigint;
    odd bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hl_period_lock_key());
    -- Archived by this transaction, whose file was just written with the
    -- records' text: a month archived before (its file, of format 1, holds
    -- none) keeps its records' text.
    IF NOT EXISTS (SELECT 1 FROM archived_period a WHERE a.period = p AND a.archived_at = now()) THEN
        RAISE EXCEPTION 'cannot archive the records of %: the month is not being archived in this transaction',
            to_char(p, 'YYYY-MM') USING ERRCODE = 'HL002';
    END IF;
    IF cardinality(ids) IS DISTINCT FROM cardinality(digests) THEN
        RAISE EXCEPTION 'archive of the records of %: one digest per record', to_char(p, 'YYYY-MM')
            USING ERRCODE = 'HL002';
    END IF;
    SELECT count(*) INTO want FROM archived_charge ac WHERE ac.period = p;
    SELECT u.id INTO odd FROM unnest(ids) u(id)
     WHERE NOT EXISTS (SELECT 1 FROM archived_charge ac WHERE ac.job_record_id = u.id AND ac.period = p)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'archive of the records of %: job record % has no charge archived with that month',
            to_char(p, 'YYYY-MM'), odd USING ERRCODE = 'HL002';
    END IF;
    IF (SELECT count(DISTINCT u.id) FROM unnest(ids) u(id)) <> want OR cardinality(ids) <> want THEN
        SELECT ac.job_record_id INTO odd FROM archived_charge ac
         WHERE ac.period = p AND NOT EXISTS (SELECT 1 FROM unnest(ids) u(id) WHERE u.id = ac.job_record_id)
         ORDER BY ac.job_record_id LIMIT 1;
        RAISE EXCEPTION 'archive of the records of %: % records given (% distinct) for the % whose charges it archived (first left out: %)',
            to_char(p, 'YYYY-MM'), cardinality(ids), (SELECT count(DISTINCT u.id) FROM unnest(ids) u(id)), want,
            coalesce(odd::text, 'none') USING ERRCODE = 'HL002';
    END IF;
    SELECT u.id INTO odd FROM unnest(ids, digests) u(id, d) JOIN job_record r ON r.id = u.id
     WHERE hl_record_raw_sha256(r.raw, r.raw_bytes) IS DISTINCT FROM u.d
     ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'archive of the records of %: the text of job record % written to the file is not the one the ledger holds',
            to_char(p, 'YYYY-MM'), odd USING ERRCODE = 'HL002';
    END IF;
    INSERT INTO archived_record (job_record_id, period, raw_sha256, raw_length)
    SELECT u.id, p, u.d, octet_length(coalesce(r.raw_bytes, convert_to(r.raw, 'UTF8')))
      FROM unnest(ids, digests) u(id, d) JOIN job_record r ON r.id = u.id;
    PERFORM set_config('hl.archiving_records', 'on', true);
    UPDATE job_record r SET raw = '', raw_bytes = NULL WHERE r.id = ANY (ids);
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('hl.archiving_records', '', true);
    IF n <> want THEN
        RAISE EXCEPTION 'archive of the records of %: % records emptied, % expected', to_char(p, 'YYYY-MM'), n, want
            USING ERRCODE = 'HL002';
    END IF;
    RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION hl_archive_records(date, bigint[], bytea[]) FROM PUBLIC;
COMMENT ON FUNCTION hl_archive_records(date, bigint[], bytea[]) IS
    'Record the digests of an archived month''s job records and empty their raw text, which its archive file holds (the schema''s owner only).';

-- A rejection resolved by a record (0017, 0024) is proved by the record's
-- bytes: the same digest as the rejected line. Once an archive moved the
-- record's text into a file, the digest recorded then stands for it.
CREATE OR REPLACE FUNCTION hl_resolution_check(rejection_id bigint, source_format text, raw_sha256 bytea, job_key text,
                                               resolution text, record_id bigint, resolved_by text, note text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT CASE
        WHEN resolution IS NULL THEN NULL
        WHEN record_id IS NULL AND resolved_by IS NULL
             AND EXISTS (SELECT 1 FROM rejected_record_unverified u WHERE u.id = rejection_id) THEN NULL
        WHEN resolution IN ('recorded', 'revised', 'superseded') THEN coalesce((
            SELECT r.source_format = hl_resolution_check.source_format
                   AND coalesce(a.raw_sha256, hl_record_raw_sha256(r.raw, r.raw_bytes)) = hl_resolution_check.raw_sha256
              FROM job_record r LEFT JOIN archived_record a ON a.job_record_id = r.id
             WHERE r.id = record_id), false)
        WHEN resolution = 'replayed' THEN coalesce((
            SELECT job_key IS NULL OR lower(job_key) = lower(hl_record_job_key(r.id))
              FROM job_record r WHERE r.id = record_id), false)
        WHEN resolution = 'recorded_elsewhere' THEN coalesce((
            SELECT job_key IS NOT NULL AND lower(job_key) = lower(hl_record_job_key(r.id))
                   AND NOT EXISTS (SELECT 1 FROM rejected_record x WHERE x.id = rejection_id AND x.kind = 'conflict')
                   AND NOT (r.source_format = hl_resolution_check.source_format
                            AND coalesce(a.raw_sha256, hl_record_raw_sha256(r.raw, r.raw_bytes))
                                = hl_resolution_check.raw_sha256)
              FROM job_record r LEFT JOIN archived_record a ON a.job_record_id = r.id
             WHERE r.id = record_id), false)
        WHEN resolution = 'skipped' THEN resolved_by IS NOT NULL
        WHEN resolution = 'dismissed' THEN resolved_by IS NOT NULL AND length(btrim(coalesce(note, ''))) > 0
        ELSE false
    END
$$;

-- What the auditor reads of it.
CREATE VIEW audit.archived_records AS
SELECT a.job_record_id AS record_id, a.period, encode(a.raw_sha256, 'hex') AS raw_sha256, a.raw_length
  FROM archived_record a;
COMMENT ON VIEW audit.archived_records IS
    'Job records whose raw text is in an archived month''s file, with the SHA-256 and length of that text (verify --archive compares the files with this; audit --deep --archive reads the text again from the files).';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON archived_record TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON archived_record TO hpc_ledger_billing';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON audit.archived_records TO hpc_ledger_auditor';
    END IF;
END
$$;
