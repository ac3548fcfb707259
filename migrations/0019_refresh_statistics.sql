-- Statistics that keep up with bulk writes (issue 13, item 11).
--
-- Right after a storage billing run of 20,004 projects, `hpc-ledger audit`
-- did not finish in 60 s (one run was still going after 6 minutes): the
-- planner still believed the ledger nearly empty (autovacuum had not
-- analyzed it yet) and compared every storage charge with every other in
-- nested loops; after ANALYZE the same audit took 0.7 s. The month-end
-- sequence (bill, close, audit) must not depend on autovacuum having run.
--
-- `hl_refresh_statistics(tables, written)` does now what autovacuum would do
-- at its next round: it analyzes every table the product writes in bulk
-- whose rows changed since its last analyze exceed autovacuum's threshold
-- (50 + 10 % of the rows the planner believes it has). A writer that has
-- just committed names the tables it wrote and how many rows (`written`,
-- in the same order): its own changes may not have reached the statistics
-- counters yet, so they are added to them. It runs with its owner's rights,
-- so the billing, ingest and auditor roles (which may not ANALYZE tables
-- they do not own) can call it: `bill storage` does after its run, `import`
-- after its last batch, `audit` before it reads. It returns the tables it
-- analyzed; other tables are never touched.

CREATE FUNCTION hl_refresh_statistics(tables text[] DEFAULT ARRAY[]::text[],
                                      written bigint[] DEFAULT ARRAY[]::bigint[]) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t text;
    done text[] := ARRAY[]::text[];
    bulk constant text[] := ARRAY['ledger_entry', 'storage_charge_segment', 'billing_run', 'job', 'job_record',
                                  'storage_quota', 'project', 'statement', 'closed_period', 'rejected_record'];
BEGIN
    FOR t IN
        SELECT s.relname::text
          FROM pg_stat_user_tables s
          JOIN pg_class c ON c.oid = s.relid
          LEFT JOIN LATERAL (SELECT sum(w.n) AS n
                               FROM unnest(tables, written) AS w(name, n)
                              WHERE w.name = s.relname) mine ON true
         WHERE s.schemaname = 'public'
           AND s.relname = ANY (bulk)
           AND s.n_mod_since_analyze + coalesce(mine.n, 0) > 50 + 0.1 * greatest(c.reltuples, 0)
         ORDER BY s.relname
    LOOP
        EXECUTE format('ANALYZE %I', t);
        done := done || t;
    END LOOP;
    RETURN done;
END
$$;
REVOKE ALL ON FUNCTION hl_refresh_statistics(text[], bigint[]) FROM PUBLIC;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing', 'hpc_ledger_auditor'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_refresh_statistics(text[], bigint[]) TO %I', r);
        END IF;
    END LOOP;
END
$$;
