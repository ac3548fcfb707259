-- Usage reports at 10 million entries (issue 18, item 2).
--
-- `hpc-ledger usage` summed a year of a project's entries, each joined to
-- the entry it corrects and to its job record: 120 ms for the busiest
-- project of a 12-million-entry ledger. `ledger_usage` keeps, per project,
-- posting month and what a report groups by (the user, cluster and node
-- type of the job record, the rate card or storage rate that priced it, and
-- the kind of charge), the sums a report shows. A report reads a few rows
-- per project and month.
--
-- It is derived, as `ledger_draw` is (0028), and by the same AFTER INSERT
-- statement trigger on ledger_entry, now hl_ledger_rollups_add(): one pass
-- over a statement's new rows adds to both, one row per statement and key
-- (a batch import adds few rows; a second trigger made a 1M-job import 7 ×
-- slower, its join planned once while the ledger was small). Closing a
-- month folds that month's rows into one per key (nothing is posted into a
-- closed month). No role may write it; the audit sums the entries again per
-- project and month (finding `usage`).
--
-- Attribution. A correction or discount counts where the charge it
-- corrects counts: a reversal of a refund of ada's owens job is ada's,
-- owens', priced by that job's card. (Before this, a reversal counted under
-- the job record it cites, which for a supersede is the new record, and a
-- reversal of a refund under no user.)
--
-- Jobs. A report's job count is now net, as its sums are: a job's charge
-- counts 1 (its core-hours line: a job that held GPUs also has a GPU-hours
-- line) and a reversal of it −1 (a refund or discount counts 0). A job
-- recorded again with --supersede counts once (1 − 1 + 1), in the month of
-- its first charge; a job moved to another project counts in the new one.
-- Counting distinct runs over the range did not add up month by month.

-- One row per ledger entry: what a usage report groups it by and sums.
CREATE VIEW audit.entry_usage AS
SELECT e.id, e.project_id, e.period,
       CASE WHEN t.id IS NULL THEN e.kind ELSE t.kind END AS kind,
       r.user_name, r.cluster_id, r.node_type_id,
       CASE WHEN t.id IS NULL THEN e.rate_card_id ELSE t.rate_card_id END AS rate_card_id,
       CASE WHEN t.id IS NULL THEN e.storage_rate_id ELSE t.storage_rate_id END AS storage_rate_id,
       -- A job's charge is one core-hours line (and a GPU-hours line when
       -- it held GPUs): its core-hours line counts the job.
       CASE WHEN e.kind = 'job' AND e.metric = 'core_hours' THEN 1
            WHEN e.kind = 'reversal' AND o.kind = 'job' AND o.metric = 'core_hours' THEN -1 ELSE 0 END AS jobs,
       CASE WHEN e.metric = 'core_hours' THEN e.quantity ELSE 0 END AS core_hours,
       CASE WHEN e.metric = 'gpu_hours' THEN e.quantity ELSE 0 END AS gpu_hours,
       CASE WHEN e.metric = 'tb_months' THEN e.quantity ELSE 0 END AS tb_months,
       e.amount
  FROM ledger_entry e
  -- What it corrects, and what that corrects (a reversal of a refund or of
  -- a discount): the charge at the root (`t`).
  LEFT JOIN LATERAL (SELECT x.kind, x.metric, x.corrects_id FROM ledger_entry x
                      WHERE e.corrects_id IS NOT NULL AND x.id = e.corrects_id OFFSET 0) o ON true
  LEFT JOIN LATERAL (SELECT x.id, x.kind, x.job_record_id, x.rate_card_id, x.storage_rate_id FROM ledger_entry x
                      WHERE x.id = coalesce(o.corrects_id, e.corrects_id) OFFSET 0) t ON true
  LEFT JOIN job_record r ON r.id = CASE WHEN t.id IS NULL THEN e.job_record_id ELSE t.job_record_id END;
COMMENT ON VIEW audit.entry_usage IS
    'Per ledger entry, what usage reports group it by (attributed to the charge it corrects) and sum; ledger_usage sums it.';

CREATE TABLE ledger_usage (
    project_id      bigint NOT NULL,
    period          date NOT NULL,
    -- 'job', 'storage' or 'adjustment': the charge's (a correction's is what it corrects).
    kind            text NOT NULL,
    -- The job record's; NULL for storage and adjustments.
    user_name       text,
    cluster_id      bigint,
    node_type_id    bigint,
    rate_card_id    bigint,
    storage_rate_id bigint,
    jobs            bigint NOT NULL,
    core_hours      numeric NOT NULL,
    gpu_hours       numeric NOT NULL,
    tb_months       numeric NOT NULL,
    amount          numeric NOT NULL,
    entries         bigint NOT NULL
);
COMMENT ON TABLE ledger_usage IS
    'Derived: per project, posting month and usage key, the sums of audit.entry_usage (usage reports); recomputed by the audit.';
CREATE INDEX ledger_usage_project ON ledger_usage (project_id, period);
CREATE INDEX ledger_usage_period ON ledger_usage (period);

-- The ledger's two rollups in one statement trigger: 0031's draws, and the
-- usage sums with the key audit.entry_usage gives each entry (a
-- correction's is the charge at its root; the user, cluster and node type
-- are those of a job charge's record). One pass over the new rows and the
-- entries and records they refer to, for both.
CREATE FUNCTION hl_ledger_rollups_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WITH d AS MATERIALIZED (
        SELECT e.project_id, e.period, e.amount, r.cluster_id,
               -- A job charge corrects nothing and has no storage rate:
               -- hl_draw_instant gives its record's end (or its posting).
               CASE WHEN e.kind = 'job' THEN coalesce(r.ended_at, e.posted_at)
                    ELSE hl_draw_instant(e.kind, e.storage_rate_id, e.period, o.kind, o.storage_rate_id, o.period,
                                         oo.kind, oo.storage_rate_id, oo.period, r.ended_at, e.posted_at,
                                         c.time_zone)
               END AS draw,
               c.time_zone AS tz,
               t.kind AS root_kind,
               CASE WHEN t.kind = 'job' THEN r.user_name END AS user_name,
               CASE WHEN t.kind = 'job' THEN r.cluster_id END AS usage_cluster_id,
               CASE WHEN t.kind = 'job' THEN r.node_type_id END AS node_type_id,
               t.rate_card_id, t.storage_rate_id,
               CASE WHEN e.kind = 'job' AND e.metric = 'core_hours' THEN 1
                    WHEN e.kind = 'reversal' AND o.kind = 'job' AND o.metric = 'core_hours' THEN -1 ELSE 0 END AS jobs,
               CASE WHEN e.metric = 'core_hours' THEN e.quantity ELSE 0 END AS core_hours,
               CASE WHEN e.metric = 'gpu_hours' THEN e.quantity ELSE 0 END AS gpu_hours,
               CASE WHEN e.metric = 'tb_months' THEN e.quantity ELSE 0 END AS tb_months
          FROM new_rows e CROSS JOIN center c
          LEFT JOIN LATERAL (SELECT x.kind, x.metric, x.storage_rate_id, x.rate_card_id, x.period, x.corrects_id,
                                    x.job_record_id
                               FROM ledger_entry x WHERE e.corrects_id IS NOT NULL AND x.id = e.corrects_id
                             OFFSET 0) o ON true
          LEFT JOIN LATERAL (SELECT x.kind, x.storage_rate_id, x.rate_card_id, x.period, x.job_record_id
                               FROM ledger_entry x WHERE o.corrects_id IS NOT NULL AND x.id = o.corrects_id
                             OFFSET 0) oo ON true
          -- The charge at the root: what it corrects corrects, else what it
          -- corrects, else itself.
          CROSS JOIN LATERAL (SELECT CASE WHEN oo.kind IS NOT NULL THEN oo.kind
                                          WHEN o.kind IS NOT NULL THEN o.kind ELSE e.kind END AS kind,
                                     CASE WHEN oo.kind IS NOT NULL THEN oo.rate_card_id
                                          WHEN o.kind IS NOT NULL THEN o.rate_card_id ELSE e.rate_card_id END
                                         AS rate_card_id,
                                     CASE WHEN oo.kind IS NOT NULL THEN oo.storage_rate_id
                                          WHEN o.kind IS NOT NULL THEN o.storage_rate_id ELSE e.storage_rate_id END
                                         AS storage_rate_id) t
          LEFT JOIN LATERAL (SELECT jr.ended_at, jr.cluster_id, jr.user_name, jr.node_type_id FROM job_record jr
                              WHERE jr.id = coalesce(oo.job_record_id, o.job_record_id, e.job_record_id)
                             OFFSET 0) r ON true),
    draws AS (
        INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
        SELECT project_id, cluster_id, period, (draw AT TIME ZONE tz)::date, min(draw), max(draw), sum(amount),
               count(*)
          FROM d GROUP BY 1, 2, 3, 4)
    INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                              storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries)
    SELECT project_id, period, root_kind, user_name, usage_cluster_id, node_type_id, rate_card_id, storage_rate_id,
           sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), count(*)
      FROM d GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
    RETURN NULL;
END
$$;
DROP TRIGGER ledger_entry_draws ON ledger_entry;
DROP FUNCTION hl_ledger_draw_add();
CREATE TRIGGER ledger_entry_rollups AFTER INSERT ON ledger_entry REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_ledger_rollups_add();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_rollups;

-- A closed month's usage, one row per key.
CREATE FUNCTION hl_ledger_usage_fold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WITH gone AS (DELETE FROM ledger_usage WHERE period = NEW.period RETURNING *)
    INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                              storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries)
    SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
           sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), sum(entries)
      FROM gone GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
    RETURN NULL;
END
$$;
CREATE TRIGGER closed_period_fold_usage AFTER INSERT ON closed_period
    FOR EACH ROW EXECUTE FUNCTION hl_ledger_usage_fold();
ALTER TABLE closed_period ENABLE ALWAYS TRIGGER closed_period_fold_usage;

-- What is there already, one row per key.
INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                          storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries)
SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
       sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), count(*)
  FROM audit.entry_usage GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;

-- ledger_usage per project and posting month, against the entries summed
-- again without it (the job count, quantities, amount and number of
-- entries): an entry edited, added or deleted without its insert trigger,
-- or a row of ledger_usage edited, shows here. Which user, cluster or card
-- a sum is kept under is not compared (that needs every entry joined to its
-- job record again, which would double the audit): it is decided by
-- hl_ledger_rollups_add() and audit.entry_usage, whose definitions the audit
-- checks against the migrations.
CREATE VIEW audit.usage_discrepancies AS
WITH kept AS (
    SELECT project_id, period, sum(jobs) AS jobs, sum(core_hours) AS core_hours, sum(gpu_hours) AS gpu_hours,
           sum(tb_months) AS tb_months, sum(amount) AS amount, sum(entries) AS entries
      FROM ledger_usage GROUP BY 1, 2),
again AS (
    SELECT e.project_id, e.period,
           count(*) FILTER (WHERE e.kind = 'job' AND e.metric = 'core_hours')
               - count(*) FILTER (WHERE e.kind = 'reversal' AND o.kind = 'job' AND o.metric = 'core_hours') AS jobs,
           coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'core_hours'), 0) AS core_hours,
           coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'gpu_hours'), 0) AS gpu_hours,
           coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'tb_months'), 0) AS tb_months,
           sum(e.amount) AS amount, count(*) AS entries
      FROM ledger_entry e
      LEFT JOIN LATERAL (SELECT x.kind, x.metric FROM ledger_entry x
                          WHERE e.corrects_id IS NOT NULL AND x.id = e.corrects_id OFFSET 0) o ON true
     GROUP BY 1, 2)
SELECT p.code AS project, coalesce(k.period, a.period) AS period,
       a.jobs || ' jobs, ' || a.core_hours || ' core-hours, ' || a.gpu_hours || ' GPU-hours, '
           || a.tb_months || ' TB-months, ' || a.amount || ' from ' || a.entries || ' entries' AS expected,
       k.jobs || ' jobs, ' || k.core_hours || ' core-hours, ' || k.gpu_hours || ' GPU-hours, '
           || k.tb_months || ' TB-months, ' || k.amount || ' from ' || k.entries || ' entries' AS recorded
  FROM kept k
  FULL JOIN again a ON a.project_id = k.project_id AND a.period = k.period
  JOIN project p ON p.id = coalesce(k.project_id, a.project_id)
 WHERE (a.jobs, a.core_hours, a.gpu_hours, a.tb_months, a.amount, a.entries)
       IS DISTINCT FROM (k.jobs, k.core_hours, k.gpu_hours, k.tb_months, k.amount, k.entries);

-- As 0029, and: usage reports are summed from the entries.
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
  FROM audit.draw_discrepancies d
UNION ALL
-- A journal exported again is the journal finance was given (each month
-- derived once, however often it was exported).
SELECT NULL, 'journal', x.period, NULL, 'digest',
       'export ' || x.id || ' of ' || x.exported_at || ': ' || encode(x.digest, 'hex'),
       encode(a.digest, 'hex')
  FROM journal_export x
  JOIN (SELECT m.period, hl_journal_digest(m.period) AS digest
          FROM (SELECT DISTINCT period FROM journal_export) m) a ON a.period = x.period
 WHERE a.digest <> x.digest
UNION ALL
-- The sums usage reports show are those of the entries.
SELECT NULL, 'usage', u.period, u.project, 'usage sums', coalesce(u.expected, 'nothing'),
       coalesce(u.recorded, 'nothing')
  FROM audit.usage_discrepancies u;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        -- The audit views (audit.entry_usage, audit.usage_discrepancies);
        -- the table itself, as the others, is not the auditor's to read.
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
    -- serve (as ingest) shows the web view's usage.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON ledger_usage TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON ledger_usage TO hpc_ledger_billing';
    END IF;
END
$$;
