-- Least privilege (docs/security.md). Group roles, NOLOGIN; give people and
-- services a login role IN one of them:
--   hpc_ledger_ingest   record jobs (job record, import, serve): read the
--                       reference data, add job runs, records, job charges
--                       (and the reversals of a supersede), keep rejections
--   hpc_ledger_billing  everything ingest may, plus quotas, storage billing,
--                       corrections, closing a month, statements, audit
--   hpc_ledger_auditor  read the audit schema (migration 0006)
-- The schema's owner applies migrations and the center configuration.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing', 'hpc_ledger_auditor'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create the hpc_ledger_* roles (no CREATEROLE); create them and grant as in docs/security.md';
END
$$;

-- Job charges only, for ingest; anything, for billing. Everyone who may read
-- the ledger reads all of it.
ALTER TABLE ledger_entry ENABLE ROW LEVEL SECURITY;
CREATE POLICY ledger_entry_read ON ledger_entry FOR SELECT USING (true);
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        CREATE POLICY ledger_entry_ingest ON ledger_entry FOR INSERT TO hpc_ledger_ingest
            WITH CHECK (kind = 'job'
                        OR (kind = 'reversal' AND EXISTS (SELECT 1 FROM job_record r
                                                           WHERE r.id = job_record_id AND r.kind = 'supersede')));
        GRANT USAGE ON SCHEMA public TO hpc_ledger_ingest;
        GRANT SELECT ON center, cluster, node_type, queue_map, rate_card, storage_rate, project, rules_version,
                        storage_quota, closed_period, _sqlx_migrations TO hpc_ledger_ingest;
        GRANT SELECT, INSERT ON job, job_record, ledger_entry TO hpc_ledger_ingest;
        GRANT SELECT, INSERT, UPDATE ON rejected_record TO hpc_ledger_ingest;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        CREATE POLICY ledger_entry_billing ON ledger_entry FOR INSERT TO hpc_ledger_billing WITH CHECK (true);
        GRANT hpc_ledger_ingest TO hpc_ledger_billing;
        GRANT USAGE ON SCHEMA public TO hpc_ledger_billing;
        GRANT SELECT ON ALL TABLES IN SCHEMA public TO hpc_ledger_billing;
        GRANT INSERT ON storage_quota, billing_run, storage_charge_segment, closed_period, statement
            TO hpc_ledger_billing;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        -- Enough to check that the schema is this version's, nothing more.
        GRANT SELECT ON _sqlx_migrations TO hpc_ledger_auditor;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
            GRANT hpc_ledger_auditor TO hpc_ledger_billing;
        END IF;
    END IF;
END
$$;

-- The seal reads the ledger with its owner's rights (like the audit views),
-- so an auditor can recompute it without reading the tables themselves.
ALTER FUNCTION hl_month_seal(date, bytea) SECURITY DEFINER SET search_path = public, pg_temp;
