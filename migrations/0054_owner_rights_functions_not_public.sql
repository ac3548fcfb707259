-- The functions that run with the owner's rights (SECURITY DEFINER) were
-- executable by PUBLIC, PostgreSQL's default for a new function, except the
-- few whose migrations revoked it (hl_refresh_statistics, hl_analyze,
-- hl_fold_rollups, hl_read_options_id, the archive's). Any login of the
-- server, also one of another application on a shared PostgreSQL that holds
-- none of the ledger's roles, could call them and read through them what
-- the tables refuse it: hl_journal_lines a month's finance journal (funds,
-- cost centres, grant codes, amounts), hl_balance and hl_pool_balance a
-- project's budget, hl_month_seal_v3 a month's seal (and its work_mem).
--
-- Each such function is the ledger's roles' to call now (ingest, billing,
-- auditor: they called them before, and the audit's views call them with
-- the auditor's rights), not PUBLIC's. A trigger's function is not checked
-- when its trigger fires, so the guards and rollups run as before. A role
-- made by hand joins one of the three. `schema::owner_rights_functions_are_not_public`
-- checks that no later migration leaves one to PUBLIC.

DO $$
DECLARE
    f regprocedure;
    r text;
BEGIN
    FOR f IN SELECT p.oid::regprocedure
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'public' AND p.proname LIKE 'hl\_%' AND p.prosecdef
                AND has_function_privilege('public', p.oid, 'EXECUTE')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON ROUTINE %s FROM PUBLIC', f);
        FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing', 'hpc_ledger_auditor'] LOOP
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
                EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO %I', f, r);
            END IF;
        END LOOP;
    END LOOP;
END
$$;
