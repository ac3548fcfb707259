-- ledger_draw partitioned by posting month (issue 19, item 2: a ledger of
-- years imports within 10 % of an empty one's rate).
--
-- Measured by `bench --scale` at 40.8M entries (docs/scaling.md, "At 40.8M
-- entries"): 200,000 new jobs imported into the grown ledger took 15.6-17.8 s
-- against 12.4 s into an empty one, and of every index one was read from
-- outside PostgreSQL's buffers: ledger_draw_project ((project_id, day)
-- INCLUDE (...), 611 MB), 166,000-169,000 blocks an import; no other index
-- more than 7,626. Each batch adds a draw row for nearly every charge, into
-- some 2,000 projects' leaves of that index, and with the default 128 MB of
-- shared buffers those leaves are gone again by the next batch. The import
-- of 1M jobs at 51.9M entries missed its target by 3 points (0.87).
--
-- Now ledger_draw is partitioned by `period`, one partition a month
-- (ledger_draw_YYYY_MM): a posting writes the draws of its own month, whose
-- index is that month's alone, and a closed month's partition is written
-- once more, by its fold (0042), then never. The entries, records and runs
-- are not partitioned: a partitioned ledger_entry was built and measured
-- (docs/scaling.md, "Partitioning by month") and every lookup of an entry
-- that does not name its month (a correction's original, a revised
-- record's charges, a discount's charge) then descends one index per month.
-- ledger_draw is read by project and day (hl_pool_drawn: one probe into
-- each month's index, each small) and by month (the fold, the audit's
-- month).
--
-- Partitions are made ahead (hl_draw_partitions_ahead: last month to two
-- months on, by imports, storage billing runs, closes and `serve` every
-- minute, giving up after 200 ms rather than queue postings behind it), and
-- by the ledger's insert trigger for a month without one (a posting into an
-- old open month), before the rollups' trigger writes into it.
--
-- The table is made again, its rows copied; the sums it holds do not
-- change (the audit recomputes them: audit.draw_discrepancies).

CREATE TABLE ledger_draw_partitioned (LIKE ledger_draw INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (period);

-- The lock a partition's maker holds while it looks for the partition and
-- makes it: no other lock's key (the period's ...809, the rules' ...810,
-- storage's ...811, the archive's ...812, the fold's ...813).
CREATE FUNCTION hl_partition_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 7523094288207667814::bigint $$;

-- Make ledger_draw's missing month partitions from `from_`'s month to
-- `to_`'s. Each is made as a table of its own and attached, which locks
-- ledger_draw only against another maker, ANALYZE and VACUUM (SHARE UPDATE
-- EXCLUSIVE), never against its readers and writers (CREATE TABLE ...
-- PARTITION OF would lock it against all of them until the transaction
-- ends). Two makers never race: each takes the partition lock and locks
-- the table (which also makes this session see partitions another has
-- just committed) before it looks. Returns the partitions made.
CREATE FUNCTION hl_draw_partitions(from_ date, to_ date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m date := date_trunc('month', from_)::date;
    last date := date_trunc('month', to_)::date;
    part text;
    n integer := 0;
BEGIN
    IF m > last THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hl_partition_lock_key());
    LOCK TABLE ledger_draw IN SHARE UPDATE EXCLUSIVE MODE;
    WHILE m <= last LOOP
        part := 'ledger_draw_' || to_char(m, 'YYYY_MM');
        IF to_regclass('public.' || part) IS NULL THEN
            EXECUTE format('CREATE TABLE public.%I (LIKE public.ledger_draw INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           part);
            -- As the parent's (0044): sums are never filtered on.
            EXECUTE format('ALTER TABLE public.%I ALTER COLUMN amount SET STATISTICS 0, '
                           'ALTER COLUMN entries SET STATISTICS 0', part);
            EXECUTE format('ALTER TABLE public.ledger_draw ATTACH PARTITION public.%I FOR VALUES FROM (%L) TO (%L)',
                           part, m, (m + interval '1 month')::date);
            n := n + 1;
        END IF;
        m := (m + interval '1 month')::date;
    END LOOP;
    RETURN n;
END
$$;

-- The partitions a posting may need soon: last month's to the month after
-- next (by the server's clock, a month either side of any center's time
-- zone). Made in a transaction of their own by the callers; a maker that
-- cannot have its locks within 200 ms (another maker, an ANALYZE of the
-- whole table) gives up with an error, and the next call, or the posting's
-- own trigger, makes the partition.
CREATE FUNCTION hl_draw_partitions_ahead() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '200ms' AS $$
BEGIN
    RETURN hl_draw_partitions((date_trunc('month', now()) - interval '1 month')::date,
                              (date_trunc('month', now()) + interval '2 months')::date);
END
$$;

DROP INDEX ledger_draw_project;
DROP INDEX ledger_draw_period;
ALTER TABLE ledger_draw RENAME TO ledger_draw_unpartitioned;
ALTER TABLE ledger_draw_partitioned RENAME TO ledger_draw;
COMMENT ON TABLE ledger_draw IS
    'Derived: per project, cluster, posting month and draw day, the sum of ledger entries drawn (docs/budgets.md); recomputed by the audit. Partitioned by posting month (ledger_draw_YYYY_MM).';

-- The months the rows already there need, and the ones ahead; the rows
-- copied; the indexes built once they are in.
SELECT hl_draw_partitions(least(min(period), date_trunc('month', now())::date),
                          (date_trunc('month', now()) + interval '2 months')::date)
  FROM ledger_draw_unpartitioned;
INSERT INTO ledger_draw SELECT * FROM ledger_draw_unpartitioned ORDER BY period, project_id, day;
CREATE INDEX ledger_draw_project ON ledger_draw (project_id, day)
    INCLUDE (cluster_id, period, first_at, last_at, amount);
CREATE INDEX ledger_draw_period ON ledger_draw (period);
ALTER TABLE ledger_draw
    ALTER COLUMN amount SET STATISTICS 0,
    ALTER COLUMN entries SET STATISTICS 0;

-- The table's privileges, as they were (0028, 0030 and any a center added).
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.privilege_type,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
          FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
         WHERE c.oid = 'public.ledger_draw_unpartitioned'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON public.ledger_draw TO %s', g.privilege_type, g.grantee);
    END LOOP;
END
$$;

-- The audit's view of the draws, read again so that it reads the new
-- table: 0035's query, unchanged.
CREATE OR REPLACE VIEW audit.draw_discrepancies AS
WITH budgeted AS (SELECT DISTINCT project_id FROM allocation)
SELECT p.code AS project, s.period, c.name AS cluster, s.day,
       s.amount || ' from ' || s.entries || ' entries drawn ' || s.first_at || ' to ' || s.last_at AS expected,
       s.kept_amount || ' from ' || s.kept_entries || ' entries drawn ' || s.kept_first_at || ' to ' || s.kept_last_at
           AS recorded
  FROM (SELECT d.project_id, d.period, d.cluster_id, d.day,
               max(d.amount) FILTER (WHERE NOT d.kept) AS amount,
               max(d.first_at) FILTER (WHERE NOT d.kept) AS first_at,
               max(d.last_at) FILTER (WHERE NOT d.kept) AS last_at,
               max(d.entries) FILTER (WHERE NOT d.kept) AS entries,
               max(d.amount) FILTER (WHERE d.kept) AS kept_amount,
               max(d.first_at) FILTER (WHERE d.kept) AS kept_first_at,
               max(d.last_at) FILTER (WHERE d.kept) AS kept_last_at,
               max(d.entries) FILTER (WHERE d.kept) AS kept_entries
          FROM (SELECT k.project_id, k.period, k.cluster_id, k.day, true AS kept, sum(k.amount) AS amount,
                       min(k.first_at) AS first_at, max(k.last_at) AS last_at, sum(k.entries) AS entries
                  FROM ledger_draw k WHERE k.project_id IN (SELECT project_id FROM budgeted)
                 GROUP BY 1, 2, 3, 4
                UNION ALL
                SELECT m.project_id, m.period, x.cluster_id, x.day, false, sum(x.amount), min(x.draw), max(x.draw),
                       count(*)
                  FROM (SELECT DISTINCT e.project_id, e.period FROM ledger_entry e
                         WHERE e.project_id IN (SELECT project_id FROM budgeted)) m
                 CROSS JOIN LATERAL hl_entry_draws(m.project_id, m.period) x
                 GROUP BY 1, 2, 3, 4) d
         GROUP BY d.project_id, d.period, d.cluster_id, d.day) s
  JOIN project p ON p.id = s.project_id
  LEFT JOIN cluster c ON c.id = s.cluster_id
 WHERE (s.amount, s.first_at, s.last_at, s.entries)
       IS DISTINCT FROM (s.kept_amount, s.kept_first_at, s.kept_last_at, s.kept_entries);

DROP TABLE ledger_draw_unpartitioned;

-- Before the rollups' trigger (ledger_entry_rollups, 0032: statement
-- triggers fire in the order of their names) writes a month's draws, the
-- month has its partition. Almost always it has one already; the check is
-- one pass over the statement's new rows.
CREATE FUNCTION hl_ledger_draw_months() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    m date;
BEGIN
    FOR m IN SELECT DISTINCT n.period FROM new_rows n LOOP
        IF to_regclass('public.ledger_draw_' || to_char(m, 'YYYY_MM')) IS NULL THEN
            PERFORM hl_draw_partitions(m, m);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_entry_draw_months AFTER INSERT ON ledger_entry REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_ledger_draw_months();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_draw_months;

-- 0042's fold, with the month named in each delete: a row's ctid is unique
-- only within its partition, so the draws' delete is kept to the month's.
CREATE OR REPLACE FUNCTION hl_fold_rollups() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    p date;
    n integer := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hl_fold_lock_key()) THEN
        RETURN 0;
    END IF;
    FOR p IN
        SELECT c.period FROM closed_period c
         WHERE NOT EXISTS (SELECT 1 FROM rollup_fold f WHERE f.period = c.period)
         ORDER BY c.period
    LOOP
        WITH gone AS (
            DELETE FROM ledger_draw
             WHERE period = p
               AND ctid = ANY (ARRAY(
                       SELECT unnest(array_agg(d.ctid))
                         FROM ledger_draw d WHERE d.period = p
                        GROUP BY d.project_id, d.cluster_id, d.day HAVING count(*) > 1))
            RETURNING *)
        INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
        SELECT project_id, cluster_id, period, day, min(first_at), max(last_at), sum(amount), sum(entries)
          FROM gone GROUP BY 1, 2, 3, 4;
        WITH gone AS (
            DELETE FROM ledger_usage
             WHERE period = p
               AND ctid = ANY (ARRAY(
                       SELECT unnest(array_agg(u.ctid))
                         FROM ledger_usage u WHERE u.period = p
                        GROUP BY u.project_id, u.kind, u.user_name, u.cluster_id, u.node_type_id, u.rate_card_id,
                                 u.storage_rate_id
                       HAVING count(*) > 1))
            RETURNING *)
        INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                                  storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries)
        SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
               sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), sum(entries)
          FROM gone GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
        INSERT INTO rollup_fold (period) VALUES (p);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- The statistics refresh (0045) sees the months, not the parent: PostgreSQL
-- keeps no counts of changes for a partitioned table (autovacuum never
-- analyzes one), and ANALYZE of the parent would read every month. A
-- month's partition is one of the bulk tables; the rows a caller says it
-- wrote into ledger_draw count toward the partitions of the open months
-- (postings write only those) from two months back on, and of any open
-- month never analyzed (a month billed late, its partition just made). An
-- older open month already analyzed is left to its own counts, or a
-- center that never closes would analyze every month after every import.
CREATE OR REPLACE FUNCTION hl_stale_tables(tables text[] DEFAULT ARRAY[]::text[],
                                           written bigint[] DEFAULT ARRAY[]::bigint[]) RETURNS text[]
LANGUAGE sql STABLE PARALLEL RESTRICTED SET search_path = public, pg_temp AS $$
    SELECT coalesce(array_agg(s.relname::text ORDER BY greatest(c.reltuples, 0) DESC, s.relname),
                    ARRAY[]::text[])
      FROM pg_stat_user_tables s
      JOIN pg_class c ON c.oid = s.relid
      LEFT JOIN LATERAL (SELECT pc.relname::text AS name,
                                to_date(right(c.relname, 7), 'YYYY_MM') AS month
                           FROM pg_inherits i JOIN pg_class pc ON pc.oid = i.inhparent
                          WHERE i.inhrelid = c.oid) parent ON true
      CROSS JOIN LATERAL (SELECT coalesce(parent.name, s.relname::text) AS name) b
      LEFT JOIN LATERAL (SELECT sum(w.n) AS n
                           FROM unnest(tables, written) AS w(name, n)
                          WHERE w.name = b.name
                            AND (parent.month IS NULL
                                 OR ((parent.month >= date_trunc('month', now()) - interval '2 months'
                                      OR c.reltuples < 0)
                                     AND NOT EXISTS (SELECT 1 FROM closed_period cp WHERE cp.period = parent.month))))
                    mine ON true
     WHERE s.schemaname = 'public'
       AND c.relkind = 'r'
       AND b.name = ANY (hl_bulk_tables())
       AND CASE WHEN cardinality(tables) = 0 OR b.name = ANY (tables)
                THEN s.n_mod_since_analyze + coalesce(mine.n, 0) > 50 + 0.1 * greatest(c.reltuples, 0)
                ELSE s.n_mod_since_analyze > 50 + greatest(c.reltuples, 0)
           END
$$;

-- A month's partition of a bulk table may be analyzed as the table is.
CREATE OR REPLACE FUNCTION hl_analyze(t text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT (t = ANY (hl_bulk_tables())
            OR EXISTS (SELECT 1 FROM pg_inherits i
                         JOIN pg_class c ON c.oid = i.inhrelid
                         JOIN pg_class pc ON pc.oid = i.inhparent
                        WHERE c.relnamespace = 'public'::regnamespace AND c.relname = t AND c.relkind = 'r'
                          AND pc.relname = ANY (hl_bulk_tables()))) THEN
        RETURN false;
    END IF;
    EXECUTE format('ANALYZE public.%I', t);
    RETURN true;
END
$$;

REVOKE ALL ON FUNCTION hl_draw_partitions(date, date) FROM PUBLIC;
REVOKE ALL ON FUNCTION hl_draw_partitions_ahead() FROM PUBLIC;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_draw_partitions_ahead() TO %I', r);
        END IF;
    END LOOP;
END
$$;
