-- Rejections, the rest of the way (issue 20, item 4): a rejected job whose
-- account was mistyped is charged to the project it belongs to, by a
-- recorded decision.
--
-- `hpc-ledger rejected reassign ID --project P --reason …` keeps here which
-- record (by its source format and the hash of its exact bytes), the account
-- it named, the project it is charged to instead, who decided and why. The
-- raw record is kept as the scheduler wrote it. Whenever that record is read
-- (the retry right after, a re-import of the same file later) and its own
-- account is unknown, the recorder charges it to the reassigned project;
-- `audit --deep` reads it the same way. Kept like the ledger: never changed
-- or removed.

CREATE TABLE project_reassignment (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rejected_record_id bigint NOT NULL UNIQUE REFERENCES rejected_record (id),
    source_format      text NOT NULL,
    raw_sha256         bytea NOT NULL CHECK (length(raw_sha256) = 32),
    -- The account the record names (NULL: it names none).
    from_account       text CHECK (length(from_account) <= 256),
    project_id         bigint NOT NULL REFERENCES project (id),
    author             text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    reason             text NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 2000),
    reassigned_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT project_reassignment_once UNIQUE (source_format, raw_sha256)
);
COMMENT ON TABLE project_reassignment IS
    'Rejected records charged to another project than the (unknown) account they name, with who decided and why.';
CREATE TRIGGER project_reassignment_append_only BEFORE UPDATE OR DELETE ON project_reassignment
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER project_reassignment_no_truncate BEFORE TRUNCATE ON project_reassignment
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE project_reassignment ENABLE ALWAYS TRIGGER project_reassignment_append_only;
ALTER TABLE project_reassignment ENABLE ALWAYS TRIGGER project_reassignment_no_truncate;

-- A reassignment is of an open rejection for an unknown project, and names
-- that rejection's own record; its time is the database's.
CREATE FUNCTION hl_project_reassignment_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    x rejected_record;
BEGIN
    SELECT * INTO x FROM rejected_record WHERE id = NEW.rejected_record_id FOR UPDATE;
    IF NOT FOUND OR x.kind <> 'unknown_project' OR x.resolved_at IS NOT NULL THEN
        RAISE EXCEPTION 'rejected record % is not an open rejection for an unknown project: its project cannot be reassigned',
            NEW.rejected_record_id USING ERRCODE = 'HL005';
    END IF;
    IF (NEW.source_format, NEW.raw_sha256) IS DISTINCT FROM (x.source_format, x.raw_sha256) THEN
        RAISE EXCEPTION 'a reassignment names the record of its rejection (source format and bytes of rejected record %)',
            x.id USING ERRCODE = 'HL005';
    END IF;
    NEW.reassigned_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER project_reassignment_check BEFORE INSERT ON project_reassignment
    FOR EACH ROW EXECUTE FUNCTION hl_project_reassignment_check();
ALTER TABLE project_reassignment ENABLE ALWAYS TRIGGER project_reassignment_check;

-- For auditors: every reassignment, and the record that charges it.
CREATE VIEW audit.project_reassignments AS
SELECT a.id, a.rejected_record_id, x.job_key, a.source_format, encode(a.raw_sha256, 'hex') AS raw_sha256,
       a.from_account, p.code AS project, a.author, a.reason, a.reassigned_at,
       x.resolution, x.resolved_record_id
  FROM project_reassignment a
  JOIN rejected_record x ON x.id = a.rejected_record_id
  JOIN project p ON p.id = a.project_id;
COMMENT ON VIEW audit.project_reassignments IS
    'Rejected records charged to another project than the account they name: which, to what, who decided, why, and the record that charges it.';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON project_reassignment TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT, INSERT ON project_reassignment TO hpc_ledger_billing';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
