-- The read-only web view in `serve` (docs/web.md): access tokens that see
-- one project, and what its pages read.

-- A token (`hpc-ledger access grant --project P`) is shown once; only its
-- SHA-256 is kept. It expires, and it can be revoked (access_revocation).
CREATE TABLE access_token (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES project (id),
    token_hash  bytea NOT NULL CHECK (length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    expires_at  timestamptz NOT NULL,
    note        text CHECK (length(note) BETWEEN 1 AND 500),
    CONSTRAINT access_token_hash UNIQUE (token_hash),
    CONSTRAINT access_token_expires CHECK (expires_at > created_at AND expires_at <= created_at + interval '3 years')
);
COMMENT ON TABLE access_token IS
    'Tokens that see one project in serve''s web view: the SHA-256 of each (the token itself is shown once), expiring; revoked by a row of access_revocation.';

CREATE TABLE access_revocation (
    token_id    bigint PRIMARY KEY REFERENCES access_token (id),
    revoked_at  timestamptz NOT NULL DEFAULT now(),
    revoked_by  text NOT NULL CHECK (length(revoked_by) BETWEEN 1 AND 200)
);

-- The time of both is the database's.
CREATE FUNCTION hl_access_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'access_token' THEN
        IF NEW.expires_at <= now() OR NEW.expires_at > now() + interval '3 years' THEN
            RAISE EXCEPTION 'an access token expires after it is made and within 3 years, not at %', NEW.expires_at
                USING ERRCODE = 'HL007';
        END IF;
        NEW.created_at := now();
    ELSE
        NEW.revoked_at := now();
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER access_token_stamp BEFORE INSERT ON access_token FOR EACH ROW EXECUTE FUNCTION hl_access_stamp();
CREATE TRIGGER access_revocation_stamp BEFORE INSERT ON access_revocation
    FOR EACH ROW EXECUTE FUNCTION hl_access_stamp();
ALTER TABLE access_token ENABLE ALWAYS TRIGGER access_token_stamp;
ALTER TABLE access_revocation ENABLE ALWAYS TRIGGER access_revocation_stamp;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['access_token', 'access_revocation'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION hl_refuse_change()',
                       t || '_append_only', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change()',
                       t || '_no_truncate', t);
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_append_only');
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_no_truncate');
    END LOOP;
END
$$;

-- A project's recent job records, newest first, a page at a time (the
-- index it replaces was its prefix).
CREATE INDEX job_record_project_recent ON job_record (project_id, id);
DROP INDEX job_record_project;

CREATE VIEW audit.access_tokens AS
SELECT t.id, p.code AS project, t.created_at, t.created_by, t.expires_at, t.note, r.revoked_at, r.revoked_by
  FROM access_token t JOIN project p ON p.id = t.project_id
  LEFT JOIN access_revocation r ON r.token_id = t.id;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
    -- serve (as ingest) shows statements and checks tokens.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON statement, billing_run, storage_charge_segment, storage_waiver, ledger_draw,
                                 access_token, access_revocation TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT, INSERT ON access_token, access_revocation TO hpc_ledger_billing';
    END IF;
END
$$;
