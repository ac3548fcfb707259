-- The ledger's rollups folded as the month goes (issue 19, item 2): the
-- close no longer folds a whole month of rollup rows.
--
-- The insert trigger on ledger_entry (hl_ledger_rollups_add, 0032) appends
-- a row per key and statement to ledger_draw and ledger_usage: appending
-- takes no lock a concurrent posting could wait on. Until now those rows
-- were folded to one per key only when the month closed. Measured on a
-- month of 640,000 entries and 100,000 statements in a ledger of 4.4M
-- entries (bench --scale), the two folds were about a third of the close's
-- time: of the month's 493,000 draw rows, 392,000 deleted and 56,000
-- written again.
--
-- Now each rollup row says whether it is folded. Folded rows are one per
-- key (a unique index); appended rows are not folded, and
-- hl_fold_rollups() moves them into the folded ones: it deletes them and
-- adds their sums to their key's folded row. It runs after each import
-- and storage billing run, every minute in `serve`, and in the close for
-- what is left of its month. Readers sum every row of a key, folded or
-- not, as they did: the sums do not change when rows are folded, only how
-- many rows hold them.
--
-- Folds run one at a time (an advisory lock of their own): two folds
-- deleting the same appended rows, or updating the same folded rows, in
-- different orders could otherwise deadlock. Postings do not take it.

ALTER TABLE ledger_draw ADD COLUMN folded boolean NOT NULL DEFAULT false;
ALTER TABLE ledger_usage ADD COLUMN folded boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN ledger_draw.folded IS
    'The key''s one folded row (true), or a row appended by an insert into ledger_entry and not folded yet (false).';
COMMENT ON COLUMN ledger_usage.folded IS
    'The key''s one folded row (true), or a row appended by an insert into ledger_entry and not folded yet (false).';

-- What is there already, folded: closed months' rows are one per key
-- already; the open months' are folded here.
WITH gone AS (DELETE FROM ledger_draw RETURNING *)
INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries, folded)
SELECT project_id, cluster_id, period, day, min(first_at), max(last_at), sum(amount), sum(entries), true
  FROM gone GROUP BY 1, 2, 3, 4;
WITH gone AS (DELETE FROM ledger_usage RETURNING *)
INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                          storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries, folded)
SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
       sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), sum(entries), true
  FROM gone GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;

-- One folded row per key. A key's NULLs are equal, as in GROUP BY: ids
-- are positive, and a user name is NULL only where the kind is not 'job'
-- (where it always is), so coalesce tells every key apart.
CREATE UNIQUE INDEX ledger_draw_folded ON ledger_draw (project_id, (coalesce(cluster_id, 0)), period, day)
    WHERE folded;
CREATE UNIQUE INDEX ledger_usage_folded ON ledger_usage
    (project_id, period, kind, (coalesce(user_name, '')), (coalesce(cluster_id, 0)), (coalesce(node_type_id, 0)),
     (coalesce(rate_card_id, 0)), (coalesce(storage_rate_id, 0)))
    WHERE folded;
-- The rows a fold reads: only those not folded yet.
CREATE INDEX ledger_draw_unfolded ON ledger_draw (period) WHERE NOT folded;
CREATE INDEX ledger_usage_unfolded ON ledger_usage (period) WHERE NOT folded;

-- Fold the appended draw rows of one posting month (every month when
-- NULL) into their keys' folded rows; returns how many were folded.
CREATE FUNCTION hl_fold_draws(month date) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    WITH gone AS (DELETE FROM ledger_draw WHERE NOT folded AND (month IS NULL OR period = month) RETURNING *),
    put AS (
        INSERT INTO ledger_draw AS k (project_id, cluster_id, period, day, first_at, last_at, amount, entries,
                                      folded)
        SELECT project_id, cluster_id, period, day, min(first_at), max(last_at), sum(amount), sum(entries), true
          FROM gone GROUP BY 1, 2, 3, 4
            ON CONFLICT (project_id, (coalesce(cluster_id, 0)), period, day) WHERE folded
            DO UPDATE SET first_at = least(k.first_at, excluded.first_at),
                          last_at = greatest(k.last_at, excluded.last_at),
                          amount = k.amount + excluded.amount,
                          entries = k.entries + excluded.entries)
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$$;

-- Likewise the appended usage rows.
CREATE FUNCTION hl_fold_usage(month date) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    WITH gone AS (DELETE FROM ledger_usage WHERE NOT folded AND (month IS NULL OR period = month) RETURNING *),
    put AS (
        INSERT INTO ledger_usage AS k (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                                       storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries,
                                       folded)
        SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
               sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), sum(entries), true
          FROM gone GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
            ON CONFLICT (project_id, period, kind, (coalesce(user_name, '')), (coalesce(cluster_id, 0)),
                         (coalesce(node_type_id, 0)), (coalesce(rate_card_id, 0)), (coalesce(storage_rate_id, 0)))
               WHERE folded
            DO UPDATE SET jobs = k.jobs + excluded.jobs,
                          core_hours = k.core_hours + excluded.core_hours,
                          gpu_hours = k.gpu_hours + excluded.gpu_hours,
                          tb_months = k.tb_months + excluded.tb_months,
                          amount = k.amount + excluded.amount,
                          entries = k.entries + excluded.entries)
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$$;

-- Both rollups, in one transaction: what `import`, `bill storage` and
-- `serve` call. Returns the rows folded (draws and usage together).
CREATE FUNCTION hl_fold_rollups(month date DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN hl_fold_draws(month) + hl_fold_usage(month);
END
$$;
REVOKE ALL ON FUNCTION hl_fold_draws(date), hl_fold_usage(date), hl_fold_rollups(date) FROM PUBLIC;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_fold_rollups(date) TO %I', r);
        END IF;
    END LOOP;
END
$$;

-- The close folds what is left of its month (0036 folded every key with
-- more than one row): the rows appended since the last fold.
CREATE OR REPLACE FUNCTION hl_ledger_draw_fold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM hl_fold_draws(NEW.period);
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION hl_ledger_usage_fold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM hl_fold_usage(NEW.period);
    RETURN NULL;
END
$$;
