-- The ledger's rollups get fresh statistics after bulk writes too.
--
-- hl_refresh_statistics (migration 0019) analyzes the tables the product
-- writes in bulk when they are stale by autovacuum's measure; its list
-- predates ledger_draw (0031) and ledger_usage (0032), which the ledger's
-- insert trigger fills with up to a row per entry. Measured with `bench
-- --full`: right after the ledger grew to 12M entries, the busiest project's
-- usage report over a year was planned for 109 rows of ledger_usage (it read
-- 5,421: a nested loop into project per row and a sort) and took 10.2 ms;
-- after ANALYZE ledger_usage, 4.9 ms. The list now names both, so an import,
-- a billing run or the audit that calls this leaves them analyzed.
CREATE OR REPLACE FUNCTION hl_refresh_statistics(tables text[] DEFAULT ARRAY[]::text[],
                                                 written bigint[] DEFAULT ARRAY[]::bigint[]) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t text;
    done text[] := ARRAY[]::text[];
    bulk constant text[] := ARRAY['ledger_entry', 'storage_charge_segment', 'billing_run', 'job', 'job_record',
                                  'storage_quota', 'project', 'statement', 'closed_period', 'rejected_record',
                                  'ledger_draw', 'ledger_usage'];
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
