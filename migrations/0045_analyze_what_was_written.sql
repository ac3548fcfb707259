-- A writer analyzes the tables it wrote, two at a time (issue 19, item 5:
-- the storage billing against its floor).
--
-- hl_refresh_statistics (0019, 0033, 0037) analyzed, one after the other,
-- every table the product writes in bulk that was stale by autovacuum's
-- measure, whoever had written it. Measured with the default `bench` (AMD
-- EPYC, 2 cores, PostgreSQL 15, auto_explain): the storage billing of
-- 10,000 projects took 1.15 s, of which 0.48 s was that refresh; the run
-- had written 20,000 entries into a ledger of 150,000, but the jobs posted
-- to `serve` just before (about 18,000 into 100,000) had made `job` and
-- `job_record` stale too, and the billing run analyzed them for `serve`
-- (`job_record` alone takes 0.25 s: its 30,000-row sample is wide).
--
-- Now:
-- * hl_stale_tables(tables, written) says which tables are due. A table
--   the caller names (it has just written `written` rows into it) is due by
--   autovacuum's measure, as before: changes since its last analyze (those
--   rows added) above 50 + 10 % of the rows the planner believes it has.
--   A table it does not name is autovacuum's to analyze, unless the
--   planner's idea of it is far off: more changes since its last analyze
--   than 50 + the rows it believed (never analyzed, or more than doubled,
--   or emptied): the case that made the audit plan minutes of nested
--   loops (0019). A caller that names nothing (`audit`, before it plans)
--   gets every table due by autovacuum's measure, as before.
-- * hl_analyze(table) analyzes one of the product's bulk tables (with its
--   owner's rights, as the refresh did). The product calls it on two
--   connections at once, largest table first: ANALYZE sorts its sample on
--   one core, and the machine has two (src/service/mod.rs).
-- * hl_refresh_statistics keeps its name and arguments for the roles that
--   call it, and does the same in one session.

CREATE FUNCTION hl_bulk_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['ledger_entry', 'storage_charge_segment', 'billing_run', 'job', 'job_record', 'storage_quota',
                 'project', 'statement', 'closed_period', 'rejected_record', 'ledger_draw', 'ledger_usage',
                 'archived_charge', 'archived_period']::text[]
$$;

CREATE FUNCTION hl_stale_tables(tables text[] DEFAULT ARRAY[]::text[],
                                written bigint[] DEFAULT ARRAY[]::bigint[]) RETURNS text[]
LANGUAGE sql STABLE PARALLEL RESTRICTED SET search_path = public, pg_temp AS $$
    SELECT coalesce(array_agg(s.relname::text ORDER BY greatest(c.reltuples, 0) DESC, s.relname),
                    ARRAY[]::text[])
      FROM pg_stat_user_tables s
      JOIN pg_class c ON c.oid = s.relid
      LEFT JOIN LATERAL (SELECT sum(w.n) AS n
                           FROM unnest(tables, written) AS w(name, n)
                          WHERE w.name = s.relname) mine ON true
     WHERE s.schemaname = 'public'
       AND s.relname = ANY (hl_bulk_tables())
       AND CASE WHEN cardinality(tables) = 0 OR s.relname = ANY (tables)
                THEN s.n_mod_since_analyze + coalesce(mine.n, 0) > 50 + 0.1 * greatest(c.reltuples, 0)
                ELSE s.n_mod_since_analyze > 50 + greatest(c.reltuples, 0)
           END
$$;

CREATE FUNCTION hl_analyze(t text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT t = ANY (hl_bulk_tables()) THEN
        RETURN false;
    END IF;
    EXECUTE format('ANALYZE public.%I', t);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION hl_refresh_statistics(tables text[] DEFAULT ARRAY[]::text[],
                                                 written bigint[] DEFAULT ARRAY[]::bigint[]) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t text;
    done text[] := ARRAY[]::text[];
BEGIN
    FOREACH t IN ARRAY hl_stale_tables(tables, written) LOOP
        IF hl_analyze(t) THEN
            done := done || t;
        END IF;
    END LOOP;
    RETURN done;
END
$$;

REVOKE ALL ON FUNCTION hl_analyze(text) FROM PUBLIC;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing', 'hpc_ledger_auditor'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_analyze(text) TO %I', r);
        END IF;
    END LOOP;
END
$$;
