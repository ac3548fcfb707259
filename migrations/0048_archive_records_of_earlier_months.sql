-- Retention of the raw records, for the months archived before 0047: their
-- files (format 1) hold the entries but not the records' text, which
-- stayed in job_record. `archive --through` now also moves the text of
-- such a month's records (those whose charges it archived: archived_charge)
-- into a second file of the month, `hpc-ledger-archive-YYYY-MM-records.jsonl`,
-- whose name and SHA-256 are recorded here, in the transaction that empties
-- the records (hl_archive_records, as for a month archived now). The
-- month's first file and its recorded digest (archived_period, append-only)
-- are not touched.

CREATE TABLE archived_record_file (
    period       date PRIMARY KEY REFERENCES archived_period (period),
    file_name    text NOT NULL CHECK (file_name <> ''),
    file_sha256  bytea NOT NULL CHECK (length(file_sha256) = 32),
    records      bigint NOT NULL CHECK (records >= 0),
    archived_at  timestamptz NOT NULL DEFAULT now(),
    archived_by  text NOT NULL CHECK (archived_by <> '')
);
COMMENT ON TABLE archived_record_file IS
    'The second file of a month archived before its records'' raw text could leave with it (hpc-ledger archive): the records'' text, its name and SHA-256; verify --archive checks the file against it.';
CREATE TRIGGER archived_record_file_append_only BEFORE UPDATE OR DELETE ON archived_record_file
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER archived_record_file_no_truncate BEFORE TRUNCATE ON archived_record_file
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE archived_record_file ENABLE ALWAYS TRIGGER archived_record_file_append_only;
ALTER TABLE archived_record_file ENABLE ALWAYS TRIGGER archived_record_file_no_truncate;

-- 0047's function, which now also takes a month archived earlier whose
-- records' file is recorded in this same transaction (archived_record_file,
-- just above). Every other check is as it was.
CREATE OR REPLACE FUNCTION hl_archive_records(p date, ids bigint[], digests bytea[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    want bigint;
    n bigint;
    odd bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hl_period_lock_key());
    -- Archived by this transaction, whose file was just written with the
    -- records' text; or archived before, with the records' own file
    -- recorded by this transaction, counting every record whose charges
    -- the month archived, for a month none of whose records' text left.
    IF NOT EXISTS (SELECT 1 FROM archived_period a WHERE a.period = p AND a.archived_at = now()) THEN
        IF NOT EXISTS (SELECT 1 FROM archived_record_file f WHERE f.period = p AND f.archived_at = now()) THEN
            RAISE EXCEPTION 'cannot archive the records of %: neither the month nor its records'' file is being archived in this transaction',
                to_char(p, 'YYYY-MM') USING ERRCODE = 'HL002';
        END IF;
        IF EXISTS (SELECT 1 FROM archived_record r WHERE r.period = p) THEN
            RAISE EXCEPTION 'archive of the records of %: their raw text is archived already', to_char(p, 'YYYY-MM')
                USING ERRCODE = 'HL002';
        END IF;
        IF (SELECT f.records FROM archived_record_file f WHERE f.period = p)
           <> (SELECT count(*) FROM archived_charge ac WHERE ac.period = p) THEN
            RAISE EXCEPTION 'archive of the records of %: its records'' file counts % records; the month archived the charges of %',
                to_char(p, 'YYYY-MM'), (SELECT f.records FROM archived_record_file f WHERE f.period = p),
                (SELECT count(*) FROM archived_charge ac WHERE ac.period = p) USING ERRCODE = 'HL002';
        END IF;
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

-- What the auditor reads of it.
CREATE VIEW audit.archived_record_files AS
SELECT f.period, f.file_name, encode(f.file_sha256, 'hex') AS file_sha256, f.records, f.archived_at, f.archived_by
  FROM archived_record_file f;
COMMENT ON VIEW audit.archived_record_files IS
    'The records'' files of months archived before their records'' raw text left with them: name, SHA-256 and how many records (verify --archive and audit --deep --archive check the files with this).';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON archived_record_file TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON archived_record_file TO hpc_ledger_billing';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON audit.archived_record_files TO hpc_ledger_auditor';
    END IF;
END
$$;
