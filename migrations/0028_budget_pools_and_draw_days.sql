-- Budgets, round 2 (issue 17): allocations scoped to one cluster, and
-- balances fast enough for a submit path.
--
-- Pools. An allocation may be scoped to one cluster (`alloc grant --cluster
-- C`): it pays only for jobs that ran on C. A project's money is then kept
-- in pools: the general pool (its unscoped allocations) and one pool per
-- cluster it has scoped allocations for. A draw on cluster C (a job's
-- charge and its corrections) belongs to C's pool from the earliest start of
-- any of the project's C-scoped allocations on; before that, and for every
-- other cluster, storage and adjustments, it belongs to the general pool.
-- Pools never spill into each other (docs/budgets.md).
--
-- Draw days. A balance sums what a project drew since its allocations
-- began; reading every entry and its job's end for that grows with the
-- months read. `ledger_draw` keeps, per project, cluster, posting month and
-- draw day (in the center's time zone), the sum of the entries' amounts and
-- the first and last draw instant among them. It is derived: an AFTER INSERT
-- statement trigger on ledger_entry adds one row per statement and key (a
-- batch import adds few rows), and closing a month folds that month's rows
-- into one per key (nothing is posted into a closed month). No role may
-- write it; the audit recomputes it from the entries for every budgeted
-- project (finding `draw`). A balance uses a day's row whole when the row's
-- draws all fall on the same side of every boundary that matters (the
-- window's start and end, the start of the cluster's pool); otherwise it
-- reads that row's entries again (one project-month), so it is exact.

ALTER TABLE allocation ADD COLUMN cluster_id bigint REFERENCES cluster (id);
COMMENT ON COLUMN allocation.cluster_id IS
    'The one cluster whose jobs it pays for; NULL: the general pool (every cluster, storage, adjustments).';
CREATE INDEX allocation_project_cluster ON allocation (project_id, cluster_id, valid_from) WHERE cluster_id IS NOT NULL;

-- As 0027, and: a reduce or transfer out has its grant's cluster; a
-- transfer in has the cluster of the grant it was given from.
CREATE OR REPLACE FUNCTION hl_allocation_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    g allocation;
    o allocation;
    taken numeric;
BEGIN
    IF NEW.kind IN ('reduce', 'transfer_out') THEN
        SELECT * INTO g FROM allocation WHERE id = NEW.grant_id FOR UPDATE;
        IF NOT FOUND OR g.kind NOT IN ('grant', 'transfer_in') OR g.project_id <> NEW.project_id THEN
            RAISE EXCEPTION 'allocation entry % takes from %, which is not a grant of its project', NEW.kind, NEW.grant_id
                USING ERRCODE = 'HL005';
        END IF;
        NEW.valid_from := g.valid_from;
        NEW.valid_until := g.valid_until;
        NEW.cluster_id := g.cluster_id;
        SELECT coalesce(sum(amount), 0) INTO taken FROM allocation WHERE grant_id = g.id;
        IF g.amount + taken + NEW.amount < 0 THEN
            RAISE EXCEPTION 'grant % has % left; % cannot take %', g.id, g.amount + taken, NEW.kind, -NEW.amount
                USING ERRCODE = 'HL005';
        END IF;
    ELSIF NEW.kind = 'transfer_in' THEN
        SELECT * INTO o FROM allocation WHERE id = NEW.transfer_of;
        IF NOT FOUND OR o.kind <> 'transfer_out' OR o.project_id = NEW.project_id OR NEW.amount <> -o.amount
           OR (o.valid_until IS NOT NULL AND (NEW.valid_until IS NULL OR NEW.valid_until > o.valid_until)) THEN
            RAISE EXCEPTION 'transfer in % does not receive what transfer out % of another project gave, within its window',
                NEW.id, NEW.transfer_of USING ERRCODE = 'HL005';
        END IF;
        NEW.cluster_id := o.cluster_id;
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;

CREATE TABLE ledger_draw (
    project_id bigint NOT NULL,
    -- The cluster of the job drawn for; NULL for storage and adjustments.
    cluster_id bigint,
    -- The posting month of the entries summed.
    period     date NOT NULL,
    -- Their draw day, in the center's time zone.
    day        date NOT NULL,
    first_at   timestamptz NOT NULL,
    last_at    timestamptz NOT NULL,
    amount     numeric NOT NULL,
    entries    bigint NOT NULL
);
COMMENT ON TABLE ledger_draw IS
    'Derived: per project, cluster, posting month and draw day, the sum of ledger entries drawn (docs/budgets.md); recomputed by the audit.';
CREATE INDEX ledger_draw_project ON ledger_draw (project_id, day)
    INCLUDE (cluster_id, period, first_at, last_at, amount);
CREATE INDEX ledger_draw_period ON ledger_draw (period);

-- A draw's instant from the fields that decide it (0027's hl_draw_at, of
-- whole rows, now calls it): the same rule, without building rows.
CREATE FUNCTION hl_draw_instant(kind text, storage_rate bigint, period date,
                                o_kind text, o_storage_rate bigint, o_period date,
                                oo_kind text, oo_storage_rate bigint, oo_period date,
                                record_end timestamptz, posted_at timestamptz, tz text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN coalesce(oo_storage_rate, o_storage_rate, storage_rate) IS NOT NULL
             OR 'storage' IN (oo_kind, o_kind, kind)
            THEN hl_day_end((coalesce(oo_period, o_period, period) + interval '1 month' - interval '1 day')::date, tz)
                 - interval '1 microsecond'
        WHEN record_end IS NOT NULL THEN record_end
        ELSE posted_at
    END
$$;

CREATE OR REPLACE FUNCTION hl_draw_at(e ledger_entry, o ledger_entry, oo ledger_entry, record_end timestamptz, tz text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hl_draw_instant(e.kind, e.storage_rate_id, e.period, o.kind, o.storage_rate_id, o.period,
                           oo.kind, oo.storage_rate_id, oo.period, record_end, e.posted_at, tz)
$$;

-- The entries a statement added, as draws. Each row's corrected entries
-- (only a correction has one), record and job are looked up by key (a
-- transition table has no statistics: joined, the planner may hash the
-- whole ledger per statement).
CREATE FUNCTION hl_ledger_draw_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
    SELECT d.project_id, d.cluster_id, d.period, (d.draw AT TIME ZONE d.tz)::date,
           min(d.draw), max(d.draw), sum(d.amount), count(*)
      FROM (SELECT e.project_id, e.period, e.amount, c.time_zone AS tz, r.cluster_id,
                   hl_draw_instant(e.kind, e.storage_rate_id, e.period, o.kind, o.storage_rate_id, o.period,
                                   oo.kind, oo.storage_rate_id, oo.period, r.ended_at, e.posted_at,
                                   c.time_zone) AS draw
              FROM new_rows e CROSS JOIN center c
              LEFT JOIN LATERAL (SELECT x.kind, x.storage_rate_id, x.period, x.corrects_id, x.job_record_id
                                   FROM ledger_entry x WHERE e.corrects_id IS NOT NULL AND x.id = e.corrects_id
                                 OFFSET 0) o ON true
              LEFT JOIN LATERAL (SELECT x.kind, x.storage_rate_id, x.period, x.job_record_id
                                   FROM ledger_entry x WHERE o.corrects_id IS NOT NULL AND x.id = o.corrects_id
                                 OFFSET 0) oo ON true
              LEFT JOIN LATERAL (SELECT jr.ended_at, j.cluster_id FROM job_record jr JOIN job j ON j.id = jr.job_id
                                  WHERE jr.id = coalesce(oo.job_record_id, o.job_record_id, e.job_record_id)
                                 OFFSET 0) r ON true) d
     GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_entry_draws AFTER INSERT ON ledger_entry REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_ledger_draw_add();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_draws;

-- A closed month's draws, one row per key.
CREATE FUNCTION hl_ledger_draw_fold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WITH gone AS (DELETE FROM ledger_draw WHERE period = NEW.period RETURNING *)
    INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
    SELECT project_id, cluster_id, period, day, min(first_at), max(last_at), sum(amount), sum(entries)
      FROM gone GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
CREATE TRIGGER closed_period_fold_draws AFTER INSERT ON closed_period
    FOR EACH ROW EXECUTE FUNCTION hl_ledger_draw_fold();
ALTER TABLE closed_period ENABLE ALWAYS TRIGGER closed_period_fold_draws;

-- What is there already, folded per key.
INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
SELECT d.project_id, d.cluster_id, d.period, (d.draw AT TIME ZONE d.tz)::date,
       min(d.draw), max(d.draw), sum(d.amount), count(*)
  FROM (SELECT e.project_id, e.period, e.amount, c.time_zone AS tz, j.cluster_id,
               hl_draw_at(e, o, oo, r.ended_at, c.time_zone) AS draw
          FROM ledger_entry e CROSS JOIN center c
          LEFT JOIN ledger_entry o ON o.id = e.corrects_id
          LEFT JOIN ledger_entry oo ON oo.id = o.corrects_id
          LEFT JOIN job_record r ON r.id = coalesce(oo.job_record_id, o.job_record_id, e.job_record_id)
          LEFT JOIN job j ON j.id = r.job_id) d
 GROUP BY 1, 2, 3, 4;

-- Every entry of a project posted in one month, at its draw instant, with
-- its job's cluster: what `ledger_draw` sums, read from the entries.
CREATE FUNCTION hl_entry_draws(project bigint, month date)
RETURNS TABLE (entry_id bigint, cluster_id bigint, draw timestamptz, day date, amount numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT e.id, j.cluster_id, d.draw, (d.draw AT TIME ZONE c.time_zone)::date, e.amount
      FROM ledger_entry e CROSS JOIN center c
      LEFT JOIN ledger_entry o ON o.id = e.corrects_id
      LEFT JOIN ledger_entry oo ON oo.id = o.corrects_id
      LEFT JOIN job_record r ON r.id = coalesce(oo.job_record_id, o.job_record_id, e.job_record_id)
      LEFT JOIN job j ON j.id = r.job_id
     CROSS JOIN LATERAL (SELECT hl_draw_at(e, o, oo, r.ended_at, c.time_zone) AS draw) d
     WHERE e.project_id = project AND e.period = month
$$;

-- From when a project's draws on a cluster belong to that cluster's pool:
-- the earliest start of its grants (and transfers in) scoped to the
-- cluster that still have something left after what was reduced or
-- transferred out of them (NULL: never). A scoped grant taken back whole
-- is as if it had not been made: the cluster's jobs draw from the general
-- pool again.
CREATE FUNCTION hl_pool_start(project bigint, cluster bigint) RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT min(a.valid_from) FROM allocation a
     WHERE a.project_id = project AND a.cluster_id = cluster AND a.kind IN ('grant', 'transfer_in')
       AND a.amount + coalesce((SELECT sum(t.amount) FROM allocation t WHERE t.grant_id = a.id), 0) > 0
$$;

-- Whether a draw on cluster `k` at `t` belongs to pool `pool` (NULL: the
-- general pool), given the start `s` of k's own pool.
CREATE FUNCTION hl_in_pool(pool bigint, k bigint, s timestamptz, t timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pool IS NULL THEN NOT (k IS NOT NULL AND s IS NOT NULL AND s <= t)
                ELSE k = pool AND s IS NOT NULL AND s <= t END
$$;

-- What a project drew into a pool in [from_, to_]: each day's row whole
-- where no boundary falls among its draws, its entries read again where one
-- does.
CREATE FUNCTION hl_pool_drawn(project bigint, pool bigint, from_ timestamptz, to_ timestamptz) RETURNS numeric
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH c AS (SELECT time_zone FROM center),
    keys AS (
        SELECT d.period, d.day, d.cluster_id, min(d.first_at) AS first_at, max(d.last_at) AS last_at,
               sum(d.amount) AS amount
          FROM ledger_draw d CROSS JOIN c
         WHERE d.project_id = project
           AND d.day BETWEEN (from_ AT TIME ZONE c.time_zone)::date AND (to_ AT TIME ZONE c.time_zone)::date
           AND (pool IS NULL OR d.cluster_id = pool)
         GROUP BY 1, 2, 3),
    starts AS (
        SELECT k.cluster_id, hl_pool_start(project, k.cluster_id) AS start
          FROM (SELECT DISTINCT cluster_id FROM keys WHERE cluster_id IS NOT NULL) k),
    marked AS (
        SELECT k.*, s.start,
               -- a boundary among its draws: the window's start, just after its end, the pool's start
               (k.first_at < from_ AND from_ <= k.last_at)
               OR (k.first_at <= to_ AND to_ < k.last_at)
               OR (s.start IS NOT NULL AND k.first_at < s.start AND s.start <= k.last_at) AS cut
          FROM keys k LEFT JOIN starts s ON s.cluster_id = k.cluster_id),
    whole AS (
        SELECT coalesce(sum(m.amount), 0) AS amount FROM marked m
         WHERE NOT m.cut AND m.first_at >= from_ AND m.last_at <= to_
           AND hl_in_pool(pool, m.cluster_id, m.start, m.first_at)),
    -- each posting month with a cut row read once
    again AS (
        SELECT coalesce(sum(x.amount), 0) AS amount
          FROM (SELECT DISTINCT m.period FROM marked m WHERE m.cut) p
         CROSS JOIN LATERAL hl_entry_draws(project, p.period) x
          JOIN marked m ON m.cut AND m.period = p.period AND m.day = x.day
                       AND m.cluster_id IS NOT DISTINCT FROM x.cluster_id
         WHERE x.draw >= from_ AND x.draw <= to_
           AND hl_in_pool(pool, x.cluster_id, m.start, x.draw))
    SELECT whole.amount + again.amount FROM whole, again
$$;

-- A project's pool at an instant, as docs/budgets.md defines it: the
-- allocation entries of the pool in force, what was drawn into it since the
-- earliest start among them, and the open holds of jobs that would draw
-- into it. `pool` NULL is the general pool.
CREATE FUNCTION hl_pool_balance(project bigint, pool bigint, at timestamptz,
                                OUT allocated numeric, OUT pool_from timestamptz, OUT used numeric,
                                OUT held numeric, OUT begun boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT p.allocated, p.pool_from,
           CASE WHEN p.pool_from IS NULL THEN 0 ELSE hl_pool_drawn(project, pool, p.pool_from, at) END,
           (SELECT coalesce(sum(h.amount), 0) FROM hold h
             WHERE h.project_id = project AND h.created_at <= at AND h.expires_at > at
               AND hl_in_pool(pool, h.cluster_id, hl_pool_start(project, h.cluster_id), at)
               AND hl_hold_release(h) IS NULL),
           CASE WHEN pool IS NULL
                THEN EXISTS (SELECT 1 FROM allocation a WHERE a.project_id = project
                                AND a.cluster_id IS NULL AND a.valid_from <= at)
                ELSE coalesce(hl_pool_start(project, pool) <= at, false) END
      FROM (SELECT coalesce(sum(a.amount), 0) AS allocated, min(a.valid_from) AS pool_from
              FROM allocation a
             WHERE a.project_id = project AND a.cluster_id IS NOT DISTINCT FROM pool
               AND a.valid_from <= at AND (a.valid_until IS NULL OR at < a.valid_until)) p
$$;

-- The general pool, as 0027 named it.
CREATE OR REPLACE FUNCTION hl_balance(project bigint, at timestamptz,
                           OUT allocated numeric, OUT pool_from timestamptz, OUT used numeric, OUT held numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT b.allocated, b.pool_from, b.used, b.held FROM hl_pool_balance(project, NULL, at) b
$$;

-- Alerts are per pool.
ALTER TABLE alert_crossing ADD COLUMN cluster_id bigint REFERENCES cluster (id);
ALTER TABLE alert_crossing DROP CONSTRAINT alert_crossing_project_id_threshold_pool_from_key;
CREATE UNIQUE INDEX alert_crossing_once ON alert_crossing (project_id, (coalesce(cluster_id, 0)), threshold, pool_from);

-- The audit: allocations and balances name their pool; draws recomputed.
CREATE OR REPLACE VIEW audit.allocations AS
SELECT a.id, p.code AS project, a.kind, a.amount, a.valid_from, a.valid_until, a.grant_id, a.transfer_of,
       (SELECT i.id FROM allocation i WHERE i.transfer_of = a.id) AS transferred_as,
       a.reason, a.author, a.created_at, c.name AS cluster
  FROM allocation a JOIN project p ON p.id = a.project_id LEFT JOIN cluster c ON c.id = a.cluster_id;

-- Every budgeted project's pools now: the general pool (cluster NULL) and
-- one per cluster it has scoped allocations for.
CREATE OR REPLACE VIEW audit.balances AS
SELECT p.code AS project, b.allocated, b.pool_from, b.used, b.held, b.allocated - b.used - b.held AS remaining,
       c.name AS cluster
  FROM project p
 CROSS JOIN LATERAL (SELECT DISTINCT a.cluster_id FROM allocation a WHERE a.project_id = p.id) k
 CROSS JOIN LATERAL hl_pool_balance(p.id, k.cluster_id, now()) b
  LEFT JOIN cluster c ON c.id = k.cluster_id;

CREATE OR REPLACE VIEW audit.alerts AS
SELECT a.id, p.code AS project, a.threshold, a.pool_from, a.allocated, a.used, a.remaining, a.crossed_at,
       (SELECT string_agg(d.channel || ': ' || CASE WHEN d.succeeded THEN 'delivered' ELSE 'failed' END
                          || ' at ' || d.at, '; ' ORDER BY d.id)
          FROM alert_delivery d WHERE d.crossing_id = a.id) AS deliveries,
       c.name AS cluster
  FROM alert_crossing a JOIN project p ON p.id = a.project_id LEFT JOIN cluster c ON c.id = a.cluster_id;

-- The draws of every budgeted project, recomputed from its entries and
-- compared with ledger_draw, per posting month, cluster and day.
CREATE VIEW audit.draw_discrepancies AS
WITH budgeted AS (SELECT DISTINCT project_id FROM allocation),
kept AS (
    SELECT d.project_id, d.period, d.cluster_id, d.day, sum(d.amount) AS amount,
           min(d.first_at) AS first_at, max(d.last_at) AS last_at, sum(d.entries) AS entries
      FROM ledger_draw d WHERE d.project_id IN (SELECT project_id FROM budgeted)
     GROUP BY 1, 2, 3, 4),
months AS (SELECT DISTINCT e.project_id, e.period FROM ledger_entry e
            WHERE e.project_id IN (SELECT project_id FROM budgeted)),
again AS (
    SELECT m.project_id, m.period, x.cluster_id, x.day, sum(x.amount) AS amount,
           min(x.draw) AS first_at, max(x.draw) AS last_at, count(*) AS entries
      FROM months m CROSS JOIN LATERAL hl_entry_draws(m.project_id, m.period) x
     GROUP BY 1, 2, 3, 4)
-- The amount, the draws' first and last instants (which decide when a
-- day's row is used whole) and the number of entries.
SELECT p.code AS project, coalesce(k.period, a.period) AS period, c.name AS cluster,
       coalesce(k.day, a.day) AS day,
       a.amount || ' from ' || a.entries || ' entries drawn ' || a.first_at || ' to ' || a.last_at AS expected,
       k.amount || ' from ' || k.entries || ' entries drawn ' || k.first_at || ' to ' || k.last_at AS recorded
  FROM kept k
  FULL JOIN again a ON a.project_id = k.project_id AND a.period = k.period
                   AND a.cluster_id IS NOT DISTINCT FROM k.cluster_id AND a.day = k.day
  JOIN project p ON p.id = coalesce(k.project_id, a.project_id)
  LEFT JOIN cluster c ON c.id = coalesce(k.cluster_id, a.cluster_id)
 WHERE (a.amount, a.first_at, a.last_at, a.entries) IS DISTINCT FROM (k.amount, k.first_at, k.last_at, k.entries);

CREATE OR REPLACE VIEW audit.discrepancies AS
SELECT entry_id, kind, period, project, field, expected, recorded FROM audit.charge_discrepancies
UNION ALL
SELECT c.entry_id, 'reversal', c.period, c.project, 'cause',
       'a correction citing job record ' || coalesce(c.target_job_record::text, 'none')
           || ' with a reason, or a supersede of the same job run',
       'reverses ' || c.reverses_kind || ' entry ' || c.corrects_id || ', citing job record '
           || coalesce(c.cites_job_record::text, 'none')
  FROM audit.reversal_causes c
 WHERE c.cause IS NULL
UNION ALL
SELECT NULL, 'rejection', NULL, NULL, 'resolution',
       CASE WHEN r.status IN ('recorded', 'revised', 'superseded', 'replayed')
            THEN 'the job record its line became (or repeated, of job ' || coalesce(r.job_key, '?') || ')'
            ELSE 'who resolved it' END,
       'rejected record ' || r.id || ' ' || r.status
           || coalesce(', naming job record ' || r.resolved_record_id, ', naming no job record')
  FROM audit.rejections r
 WHERE r.resolution_holds = false
UNION ALL
-- A hold is released by a job of its own project.
SELECT NULL, 'hold', NULL, h.project, 'released by',
       'a job record of project ' || h.project || ' (' || h.cluster || '/' || h.job_id || ')',
       'job record ' || h.released_by_job_record || ' of project ' || h.released_by_project
  FROM audit.holds h
 WHERE h.released_by_job_record IS NOT NULL AND h.released_by_project IS DISTINCT FROM h.project
UNION ALL
-- A transfer out has its transfer in.
SELECT NULL, 'allocation', NULL, a.project, 'transfer',
       'a transfer in of ' || (-a.amount) || ' to another project',
       'transfer out ' || a.id || ' received by none'
  FROM audit.allocations a
 WHERE a.kind = 'transfer_out' AND a.transferred_as IS NULL
UNION ALL
-- The draws balances are summed from are those of the entries.
SELECT NULL, 'draw', d.period, d.project, 'drawn on ' || d.day || coalesce(' on ' || d.cluster, ''),
       coalesce(d.expected, 'nothing'), coalesce(d.recorded, 'nothing')
  FROM audit.draw_discrepancies d;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
        EXECUTE 'GRANT SELECT ON ledger_draw TO hpc_ledger_auditor';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON ledger_draw TO hpc_ledger_billing';
    END IF;
END
$$;
