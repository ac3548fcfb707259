-- The audit's storage half at ledger scale (issue 7): the same checks and
-- the same results as migrations 0006 and 0008, computed from day ranges
-- instead of one row per day.
--
-- A quota (or a storage rate) counts for a day when it is the one in force
-- at the day's end (SPEC D7). The days whose end falls in (from, until] are
-- a range, from the first day ending after `from` to the last day ending at
-- or before `until`, so a charge's TB-days are a sum over the overlaps of
-- three ranges (month, quota, rate) rather than a row per project and day:
-- with 100,000 projects a month, 3.1 million rows joined and grouped per
-- billed month. Both ends are found with hl_day_end itself, so a day is the
-- billing time zone's day, DST and all, exactly as before.

-- The first day whose end is after instant t.
CREATE FUNCTION hl_first_day_after(t timestamptz, tz text) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN hl_day_end((t AT TIME ZONE tz)::date - 1, tz) > t THEN (t AT TIME ZONE tz)::date - 1
                ELSE (t AT TIME ZONE tz)::date END
$$;

-- The last day whose end is at or before instant t; for no t (open-ended),
-- no last day.
CREATE FUNCTION hl_last_day_until(t timestamptz, tz text) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t IS NULL THEN 'infinity'::date
                WHEN hl_day_end((t AT TIME ZONE tz)::date - 1, tz) <= t THEN (t AT TIME ZONE tz)::date - 1
                ELSE (t AT TIME ZONE tz)::date - 2 END
$$;

-- TB-days per storage charge: for each billed month, storage rate and quota,
-- the quota times the days of the month on which both were in force.
CREATE OR REPLACE VIEW audit.storage_recomputed AS
WITH tz AS (SELECT time_zone FROM center),
months AS (
    SELECT DISTINCT period, (period + interval '1 month' - interval '1 day')::date AS last_day
      FROM ledger_entry WHERE kind = 'storage'),
quotas AS MATERIALIZED (
    SELECT q.project_id, q.quota_tb, hl_first_day_after(q.effective_from, tz.time_zone) AS first_day,
           hl_last_day_until(lead(q.effective_from) OVER (PARTITION BY q.project_id ORDER BY q.effective_from),
                             tz.time_zone) AS last_day
      FROM storage_quota q CROSS JOIN tz),
rates AS MATERIALIZED (
    SELECT r.id, hl_first_day_after(r.valid_from, tz.time_zone) AS first_day,
           hl_last_day_until(r.valid_until, tz.time_zone) AS last_day
      FROM storage_rate r CROSS JOIN tz),
summed AS (
    SELECT q.project_id, m.period, r.id AS storage_rate_id,
           sum(q.quota_tb * (least(m.last_day, q.last_day, r.last_day)
                             - greatest(m.period, q.first_day, r.first_day) + 1)) AS tb_days
      FROM months m
      JOIN rates r ON r.first_day <= m.last_day AND r.last_day >= m.period
      JOIN quotas q ON q.first_day <= least(m.last_day, r.last_day) AND q.last_day >= greatest(m.period, r.first_day)
     -- Not empty (a quota replaced before its first day ended holds no day).
     WHERE least(m.last_day, q.last_day, r.last_day) >= greatest(m.period, q.first_day, r.first_day)
     GROUP BY q.project_id, m.period, r.id)
SELECT e.id AS entry_id, s.tb_days,
       extract(day FROM (e.period + interval '1 month' - interval '1 day'))::int AS days_in_month
  FROM ledger_entry e
  LEFT JOIN summed s ON s.project_id = e.project_id AND s.period = e.period AND s.storage_rate_id = e.storage_rate_id
 WHERE e.kind = 'storage';

-- The discrepancies as in 0008, and a finding `reference` for an entry
-- whose record, run, rate card, storage rate, billing run, corrected entry or
-- project is missing (since migration 0010, references are checked by
-- triggers, which the tables' owner can disable; the charge parts join
-- outwards, so such an entry is reported instead of dropped). The recorded
-- TB-days of every storage charge are summed in one grouped pass over the
-- segments instead of a lookup per charge, and the expected TB-months computed once per charge (OFFSET 0
-- keeps the planner from copying the division into every comparison).
CREATE OR REPLACE VIEW audit.discrepancies AS
-- A job charge: quantity, rate, amounts, rate card, month and project, in one
-- pass over the job charges; a row per field that disagrees. The inner
-- query computes each recomputed value once per charge (OFFSET 0 keeps the
-- planner from copying those expressions into every comparison).
SELECT x.entry_id, 'job'::text AS kind, x.period, (SELECT p.code FROM project p WHERE p.id = x.project_id) AS project,
       f.field, f.expected, f.recorded
  FROM (SELECT y.*,
               y.quantity IS DISTINCT FROM y.want_quantity AS bad_quantity,
               y.unit_rate <> y.want_rate AS bad_rate,
               y.amount <> round(y.want_quantity * y.want_rate, 2) OR y.amount_exact <> y.quantity * y.unit_rate
                   AS bad_amount,
               y.card_node_type_id <> y.node_type_id
                   OR NOT (y.card_from <= y.priced_at AND (y.card_until IS NULL OR y.priced_at < y.card_until))
                   AS bad_card,
               (NOT y.late AND y.period <> y.end_month) OR (y.late AND y.period <= y.end_month) AS bad_period,
               y.project_id <> y.record_project_id AS bad_project,
               y.record_found IS NULL OR y.job_found IS NULL OR y.card_found IS NULL OR y.project_found IS NULL
                   AS bad_reference
          FROM (SELECT e.id AS entry_id, e.period, e.late, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                       e.project_id, r.project_id AS record_project_id, r.node_type_id, rc.node_type_id AS card_node_type_id,
                       e.job_record_id, e.rate_card_id, rc.valid_from AS card_from, rc.valid_until AS card_until,
                       r.id AS record_found, j.id AS job_found, rc.id AS card_found, pe.id AS project_found,
                       coalesce(j.submitted_at, j.started_at) AS priced_at,
                       CASE e.metric WHEN 'core_hours' THEN q.core_hours ELSE q.gpu_hours END AS want_quantity,
                       CASE e.metric WHEN 'core_hours' THEN rc.core_hour_price ELSE rc.gpu_hour_price END AS want_rate,
                       date_trunc('month', r.ended_at AT TIME ZONE (SELECT time_zone FROM center))::date AS end_month
                  FROM ledger_entry e
                  -- Outer joins, so a charge whose record, run, rate card or
                  -- project is missing is reported, not skipped.
                  LEFT JOIN job_record r ON r.id = e.job_record_id
                  LEFT JOIN job j ON j.id = r.job_id
                  LEFT JOIN rate_card rc ON rc.id = e.rate_card_id
                  LEFT JOIN project pe ON pe.id = e.project_id
                 CROSS JOIN LATERAL hl_charge_quantities(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                                         extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                                         rc.memory_per_core_bytes, rc.cores_per_node) q
                 WHERE e.kind = 'job'
                OFFSET 0) y) x
 CROSS JOIN LATERAL (VALUES
       ('quantity', x.want_quantity::text, x.quantity::text, x.bad_quantity),
       ('unit_rate', x.want_rate::text, x.unit_rate::text, x.bad_rate),
       ('amount', round(x.want_quantity * x.want_rate, 2)::text, x.amount::text, x.bad_amount),
       ('rate_card', 'a card of node type ' || (SELECT nt.name FROM node_type nt WHERE nt.id = x.node_type_id)
                     || ' in force at ' || x.priced_at, 'card ' || x.rate_card_id, x.bad_card),
       ('period', to_char(x.end_month, 'YYYY-MM') || CASE WHEN x.late THEN ' or later' ELSE '' END,
        to_char(x.period, 'YYYY-MM') || CASE WHEN x.late THEN ' (late)' ELSE '' END, x.bad_period),
       ('project', (SELECT rp.code FROM project rp WHERE rp.id = x.record_project_id),
        (SELECT p.code FROM project p WHERE p.id = x.project_id), x.bad_project),
       ('reference', 'job record ' || x.job_record_id || ' and its run, rate card ' || x.rate_card_id
                     || ', project ' || x.project_id,
        concat_ws(', ', CASE WHEN x.record_found IS NULL THEN 'no job record ' || x.job_record_id END,
                        CASE WHEN x.record_found IS NOT NULL AND x.job_found IS NULL
                             THEN 'no run for job record ' || x.job_record_id END,
                        CASE WHEN x.card_found IS NULL THEN 'no rate card ' || x.rate_card_id END,
                        CASE WHEN x.project_found IS NULL THEN 'no project ' || x.project_id END),
        x.bad_reference)
     ) f(field, expected, recorded, bad)
 WHERE (x.bad_quantity OR x.bad_rate OR x.bad_amount OR x.bad_card OR x.bad_period OR x.bad_project
        OR x.bad_reference) AND f.bad
UNION ALL
-- Every charging record has one core-hours entry, and one GPU-hours entry
-- exactly when it held GPUs.
SELECT NULL::bigint, 'job', NULL::date, p.code, 'entries',
       CASE WHEN r.gpus > 0 THEN '1 core_hours, 1 gpu_hours' ELSE '1 core_hours, 0 gpu_hours' END,
       coalesce(g.core_hours, 0) || ' core_hours, ' || coalesce(g.gpu_hours, 0) || ' gpu_hours for job record ' || r.id
  FROM job_record r
  LEFT JOIN project p ON p.id = r.project_id
  LEFT JOIN (SELECT job_record_id, count(*) FILTER (WHERE metric = 'core_hours') AS core_hours,
                    count(*) FILTER (WHERE metric = 'gpu_hours') AS gpu_hours
               FROM ledger_entry WHERE kind = 'job' GROUP BY job_record_id) g ON g.job_record_id = r.id
 WHERE r.kind IN ('original', 'supersede')
   AND (coalesce(g.core_hours, 0) <> 1 OR coalesce(g.gpu_hours, 0) <> CASE WHEN r.gpus > 0 THEN 1 ELSE 0 END)
UNION ALL
-- A storage charge: TB-months, amounts and segments against the recomputation.
SELECT s.entry_id, 'storage', s.period, s.project, f.field, f.expected, f.recorded
  FROM (SELECT sc.entry_id, sc.period, sc.project, sc.tb_months, sc.amount, sc.tb_days AS recorded_tb_days,
               sr.tb_days, w.want, w.want * sc.tb_month_price AS want_amount,
               sc.tb_months IS DISTINCT FROM w.want AS bad_tb_months,
               sc.amount <> round(w.want * sc.tb_month_price, 2) OR sc.unit_rate <> sc.tb_month_price
                   OR sc.amount_exact <> sc.tb_months * sc.unit_rate AS bad_amount,
               sc.tb_days IS DISTINCT FROM sr.tb_days AS bad_segments,
               sc.missing <> '' AS bad_reference, sc.missing
          FROM (SELECT e.id AS entry_id, e.period, p.code AS project, e.quantity AS tb_months, e.unit_rate,
                       e.amount_exact, e.amount, rt.tb_month_price, g.tb_days,
                       concat_ws(', ', CASE WHEN p.id IS NULL THEN 'no project ' || e.project_id END,
                                       CASE WHEN rt.id IS NULL THEN 'no storage rate ' || e.storage_rate_id END,
                                       CASE WHEN b.id IS NULL THEN 'no billing run ' || e.billing_run_id END) AS missing
                  FROM ledger_entry e
                  LEFT JOIN project p ON p.id = e.project_id
                  LEFT JOIN storage_rate rt ON rt.id = e.storage_rate_id
                  LEFT JOIN billing_run b ON b.id = e.billing_run_id
                  LEFT JOIN (SELECT ledger_entry_id, sum(days * quota_tb) AS tb_days
                               FROM storage_charge_segment GROUP BY ledger_entry_id) g ON g.ledger_entry_id = e.id
                 WHERE e.kind = 'storage') sc
          JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id
         CROSS JOIN LATERAL (SELECT hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12) AS want
                              OFFSET 0) w) s
 CROSS JOIN LATERAL (VALUES
       ('tb_months', s.want::text, s.tb_months::text, s.bad_tb_months),
       ('amount', round(s.want_amount, 2)::text, s.amount::text, s.bad_amount),
       ('segments', s.tb_days::text, s.recorded_tb_days::text, s.bad_segments),
       ('reference', 'its project, storage rate and billing run', s.missing, s.bad_reference)
     ) f(field, expected, recorded, bad)
 WHERE (s.bad_tb_months OR s.bad_amount OR s.bad_segments OR s.bad_reference) AND f.bad
UNION ALL
-- A project with a quota above zero on some day of a billed month but no
-- storage charge that month. A quota counts for a day when it is the one in
-- force at the day's end: the first day end after it took effect must come
-- before the next quota took effect, and within the month.
SELECT NULL, 'storage', m.period, p.code, 'missing storage charge', 'a storage charge', 'none'
  FROM (SELECT DISTINCT b.period, q.project_id
          FROM billing_run b CROSS JOIN center c
          JOIN (SELECT project_id, quota_tb, effective_from,
                       lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                  FROM storage_quota) q ON q.quota_tb > 0
         CROSS JOIN LATERAL (SELECT greatest(hl_day_end((q.effective_from AT TIME ZONE c.time_zone)::date, c.time_zone),
                                             hl_day_end(b.period, c.time_zone)) AS first_end) f
         WHERE b.kind = 'storage'
           AND f.first_end <= hl_day_end((b.period + interval '1 month' - interval '1 day')::date, c.time_zone)
           AND (q.until IS NULL OR f.first_end <= q.until)) m
  JOIN project p ON p.id = m.project_id
 WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.kind = 'storage' AND e.period = m.period AND e.project_id = m.project_id)
UNION ALL
-- Corrections: a reversal mirrors its entry; every entry's arithmetic holds.
SELECT e.id, e.kind, e.period, p.code, 'mirror', (-o.amount_exact)::text, e.amount_exact::text
  FROM ledger_entry e JOIN ledger_entry o ON o.id = e.corrects_id JOIN project p ON p.id = e.project_id
 WHERE e.kind = 'reversal' AND (e.amount_exact <> -o.amount_exact OR e.quantity <> -o.quantity OR e.project_id <> o.project_id)
UNION ALL
-- A correction's arithmetic, and the rows it refers to.
SELECT e.id, e.kind, e.period, (SELECT p.code FROM project p WHERE p.id = e.project_id), f.field, f.expected,
       f.recorded
  FROM ledger_entry e
 CROSS JOIN LATERAL (VALUES
       ('arithmetic', round(e.quantity * e.unit_rate, 2)::text, e.amount::text,
        e.amount_exact <> e.quantity * e.unit_rate OR e.amount <> round(e.amount_exact, 2)),
       ('reference', 'project ' || e.project_id, 'missing',
        NOT EXISTS (SELECT 1 FROM project p WHERE p.id = e.project_id)),
       ('reference', 'ledger entry ' || e.corrects_id, 'missing',
        e.corrects_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ledger_entry o WHERE o.id = e.corrects_id)),
       ('reference', 'job record ' || e.job_record_id, 'missing',
        e.job_record_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM job_record r WHERE r.id = e.job_record_id)),
       ('reference', 'rate card ' || e.rate_card_id, 'missing',
        e.rate_card_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rate_card c WHERE c.id = e.rate_card_id)),
       ('reference', 'storage rate ' || e.storage_rate_id, 'missing',
        e.storage_rate_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM storage_rate s WHERE s.id = e.storage_rate_id)),
       ('reference', 'billing run ' || e.billing_run_id, 'missing',
        e.billing_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.id = e.billing_run_id))
     ) f(field, expected, recorded, bad)
 WHERE e.kind IN ('reversal', 'refund', 'adjustment') AND f.bad
UNION ALL
-- A closed month's statements add up to the ledger.
SELECT NULL, 'statement', s.period, p.code, 'total',
       (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period)::text,
       s.total::text
  FROM statement s JOIN project p ON p.id = s.project_id
 WHERE s.total <> (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period);
