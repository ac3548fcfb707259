-- A closed month's rollups are folded after its close, not in it (issue
-- 19, item 2): the close no longer holds the period lock, which every
-- posting waits on, while a month of rollup rows is folded.
--
-- The insert trigger on ledger_entry (hl_ledger_rollups_add, 0032) appends
-- a row per key and statement to ledger_draw and ledger_usage; appending
-- takes no lock another posting could wait on. A closed month's rows were
-- folded to one per key (the keys with more than one row, 0036) by
-- triggers on closed_period, inside the close. Measured by `bench --scale`
-- at 4.6M entries (a month of 640,000 entries and 100,000 statements, one
-- 2-core machine), that fold was half of the close: the close took 4.3 s
-- with it; now the close takes 2.3 s and the fold after it 2.1 s.
--
-- Folding open months as they go instead (after each import) was built
-- and measured first: it folds every appended row, where the close's fold
-- leaves the keys of one row alone (most of ledger_usage's), so the
-- month's two imports of 200,000 jobs took 2.9 and 4.5 s longer, together
-- three times what the close saved.
--
-- Now hl_fold_rollups() folds every closed month not folded yet, oldest
-- first, the same way the close did, and records it in rollup_fold.
-- `close` calls it once it has committed; imports, storage billing runs
-- and `serve` (every minute) call it too, so a month whose fold failed or
-- was interrupted is folded by the next of them. Readers sum every row of
-- a key, folded or not, so no sum changes when a month is folded, only how
-- many rows hold it.

-- The closed months whose rollup rows are folded to one row per key.
CREATE TABLE rollup_fold (
    period    date PRIMARY KEY REFERENCES closed_period (period),
    folded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rollup_fold IS
    'Derived: the closed months whose ledger_draw and ledger_usage rows are folded to one row per key (hl_fold_rollups).';
-- Every month closed so far was folded by its close.
INSERT INTO rollup_fold (period, folded_at) SELECT period, closed_at FROM closed_period;

DROP TRIGGER closed_period_fold_draws ON closed_period;
DROP TRIGGER closed_period_fold_usage ON closed_period;
DROP FUNCTION hl_ledger_draw_fold();
DROP FUNCTION hl_ledger_usage_fold();

-- The advisory lock a fold holds: no other lock's key (the period's
-- ...809, the rules' ...810, storage's ...811, the archive's ...812), so
-- only folds ever meet on it.
CREATE FUNCTION hl_fold_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 7523094288207667813::bigint $$;

-- Fold every closed month not folded yet, oldest first. One fold at a
-- time, and none waits for another: a fold that finds one running returns
-- 0 at once, and the running one, or the next, folds what is due. Nothing
-- else takes the fold's lock: postings, closes and billing runs never wait
-- on a fold. Only the keys with more than one row are rewritten (0036).
-- Returns the months folded.
CREATE FUNCTION hl_fold_rollups() RETURNS integer
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
             WHERE ctid = ANY (ARRAY(
                       SELECT unnest(array_agg(d.ctid))
                         FROM ledger_draw d WHERE d.period = p
                        GROUP BY d.project_id, d.cluster_id, d.day HAVING count(*) > 1))
            RETURNING *)
        INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
        SELECT project_id, cluster_id, period, day, min(first_at), max(last_at), sum(amount), sum(entries)
          FROM gone GROUP BY 1, 2, 3, 4;
        WITH gone AS (
            DELETE FROM ledger_usage
             WHERE ctid = ANY (ARRAY(
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
REVOKE ALL ON FUNCTION hl_fold_rollups() FROM PUBLIC;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_fold_rollups() TO %I', r);
        END IF;
    END LOOP;
END
$$;
