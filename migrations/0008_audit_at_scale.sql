-- The audit at ledger scale (`hpc-ledger bench`): the same checks and the
-- same results as migration 0006, computed in one pass per kind of charge
-- and with functions PostgreSQL can inline, instead of a function call per
-- charge and a correlated lookup per storage day.

-- n / d exact, rounded half away from zero: the same value as before, in
-- plain arithmetic (no text round trip) and not STRICT, so the planner
-- inlines it (NULL in, NULL out, as before).
CREATE OR REPLACE FUNCTION hl_div_round(n numeric, d numeric, places integer) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round(sign(n) * sign(d) * div(2 * abs(n) * 10::numeric ^ places + abs(d), 2 * abs(d))
                 * 10::numeric ^ (-places), places)
$$;

-- A job's quantities (docs/rules.md R1–R5) as a set-returning function, which
-- PostgreSQL inlines into the query that calls it; hl_job_quantities now
-- returns its one row, so the rules are written once.
CREATE FUNCTION hl_charge_quantities(
    nodes integer, cores integer, memory_bytes bigint, gpus integer, wall_seconds bigint,
    memory_per_core_bytes bigint, cores_per_node integer)
RETURNS TABLE (effective_cores numeric, whole_node_cores bigint, charged_cores numeric, basis text,
               hours numeric, core_hours numeric, gpu_hours numeric)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT eff, whole, charged, basis,
           hl_div_round(wall_seconds, 3600, 12),
           hl_div_round(charged * wall_seconds, 3600, 12),
           CASE WHEN gpus > 0 THEN hl_div_round(gpus::numeric * wall_seconds, 3600, 12) END
      FROM (SELECT eff, whole,
                   CASE WHEN nodes > 1 THEN greatest(whole, cores)::numeric
                        WHEN eff > cores THEN eff
                        ELSE cores::numeric END AS charged,
                   CASE WHEN nodes > 1 THEN 'whole_nodes' WHEN eff > cores THEN 'memory' ELSE 'cores' END AS basis
              FROM (SELECT CASE WHEN memory_bytes IS NOT NULL
                                THEN hl_div_round(memory_bytes, memory_per_core_bytes, 12) END AS eff,
                           CASE WHEN nodes > 1 THEN nodes::bigint * cores_per_node END AS whole) a) b
$$;

CREATE OR REPLACE FUNCTION hl_job_quantities(
    nodes integer, cores integer, memory_bytes bigint, gpus integer, wall_seconds bigint,
    memory_per_core_bytes bigint, cores_per_node integer,
    OUT effective_cores numeric, OUT whole_node_cores bigint, OUT charged_cores numeric, OUT basis text,
    OUT hours numeric, OUT core_hours numeric, OUT gpu_hours numeric)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT * FROM hl_charge_quantities(nodes, cores, memory_bytes, gpus, wall_seconds,
                                       memory_per_core_bytes, cores_per_node)
$$;

CREATE OR REPLACE VIEW audit.job_charges AS
SELECT e.id AS entry_id, e.period, e.posted_at, e.late, e.author,
       p.code AS project, c.name AS cluster, j.scheduler_job_id AS job_id, j.array_index,
       r.id AS job_record_id, r.revision, r.kind AS record_kind, r.source_format, r.source_ref,
       r.user_name, r.job_name, r.state, r.exit_code, r.queue, nt.name AS node_type,
       j.submitted_at, j.started_at, r.ended_at, coalesce(j.submitted_at, j.started_at) AS priced_at,
       r.nodes, r.cores AS requested_cores, r.memory_bytes AS requested_memory_bytes, r.gpus,
       rc.id AS rate_card_id, rc.valid_from AS rate_card_from, rc.valid_until AS rate_card_until,
       rc.core_hour_price, rc.gpu_hour_price, rc.memory_per_core_bytes, rc.cores_per_node,
       extract(epoch FROM r.ended_at - j.started_at)::bigint AS wall_seconds,
       x.hours, x.effective_cores, x.whole_node_cores, x.charged_cores, x.basis AS charged_by,
       x.core_hours, x.gpu_hours,
       e.metric, e.quantity, e.unit_rate, e.amount_exact, e.amount
  FROM ledger_entry e
  JOIN job_record r ON r.id = e.job_record_id
  JOIN job j ON j.id = r.job_id
  JOIN cluster c ON c.id = j.cluster_id
  JOIN node_type nt ON nt.id = r.node_type_id
  JOIN project p ON p.id = e.project_id
  JOIN rate_card rc ON rc.id = e.rate_card_id
 CROSS JOIN LATERAL hl_charge_quantities(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                         extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                         rc.memory_per_core_bytes, rc.cores_per_node) x
 WHERE e.kind = 'job';

-- TB-days per storage charge, recomputed day by day (SPEC D7): each quota
-- holds from its instant until the next one's, each day counts at the quota
-- and storage rate in force at its end. Joined as sets, not looked up per day.
CREATE OR REPLACE VIEW audit.storage_recomputed AS
WITH tz AS (SELECT time_zone FROM center),
days AS (
    SELECT m.period, hl_day_end(d::date, tz.time_zone) AS day_end
      FROM (SELECT DISTINCT period FROM ledger_entry WHERE kind = 'storage') m CROSS JOIN tz
     CROSS JOIN LATERAL generate_series(m.period, (m.period + interval '1 month' - interval '1 day')::date,
                                        interval '1 day') d),
rated AS (
    SELECT d.period, d.day_end, r.id AS storage_rate_id
      FROM days d JOIN storage_rate r ON r.valid_from < d.day_end AND (r.valid_until IS NULL OR r.valid_until >= d.day_end)),
quotas AS (
    SELECT project_id, quota_tb, effective_from,
           lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
      FROM storage_quota),
summed AS (
    SELECT e.id, sum(q.quota_tb) AS tb_days
      FROM ledger_entry e
      JOIN rated d ON d.period = e.period AND d.storage_rate_id = e.storage_rate_id
      JOIN quotas q ON q.project_id = e.project_id AND q.effective_from < d.day_end
                   AND (q.until IS NULL OR q.until >= d.day_end)
     WHERE e.kind = 'storage'
     GROUP BY e.id)
SELECT e.id AS entry_id, s.tb_days,
       extract(day FROM (e.period + interval '1 month' - interval '1 day'))::int AS days_in_month
  FROM ledger_entry e LEFT JOIN summed s ON s.id = e.id
 WHERE e.kind = 'storage';

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
               y.project_id <> y.record_project_id AS bad_project
          FROM (SELECT e.id AS entry_id, e.period, e.late, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                       e.project_id, r.project_id AS record_project_id, r.node_type_id, rc.node_type_id AS card_node_type_id,
                       rc.id AS rate_card_id, rc.valid_from AS card_from, rc.valid_until AS card_until,
                       coalesce(j.submitted_at, j.started_at) AS priced_at,
                       CASE e.metric WHEN 'core_hours' THEN q.core_hours ELSE q.gpu_hours END AS want_quantity,
                       CASE e.metric WHEN 'core_hours' THEN rc.core_hour_price ELSE rc.gpu_hour_price END AS want_rate,
                       date_trunc('month', r.ended_at AT TIME ZONE (SELECT time_zone FROM center))::date AS end_month
                  FROM ledger_entry e
                  JOIN job_record r ON r.id = e.job_record_id
                  JOIN job j ON j.id = r.job_id
                  JOIN rate_card rc ON rc.id = e.rate_card_id
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
        (SELECT p.code FROM project p WHERE p.id = x.project_id), x.bad_project)
     ) f(field, expected, recorded, bad)
 WHERE (x.bad_quantity OR x.bad_rate OR x.bad_amount OR x.bad_card OR x.bad_period OR x.bad_project) AND f.bad
UNION ALL
-- Every charging record has one core-hours entry, and one GPU-hours entry
-- exactly when it held GPUs.
SELECT NULL::bigint, 'job', NULL::date, p.code, 'entries',
       CASE WHEN r.gpus > 0 THEN '1 core_hours, 1 gpu_hours' ELSE '1 core_hours, 0 gpu_hours' END,
       coalesce(g.core_hours, 0) || ' core_hours, ' || coalesce(g.gpu_hours, 0) || ' gpu_hours for job record ' || r.id
  FROM job_record r
  JOIN project p ON p.id = r.project_id
  LEFT JOIN (SELECT job_record_id, count(*) FILTER (WHERE metric = 'core_hours') AS core_hours,
                    count(*) FILTER (WHERE metric = 'gpu_hours') AS gpu_hours
               FROM ledger_entry WHERE kind = 'job' GROUP BY job_record_id) g ON g.job_record_id = r.id
 WHERE r.kind IN ('original', 'supersede')
   AND (coalesce(g.core_hours, 0) <> 1 OR coalesce(g.gpu_hours, 0) <> CASE WHEN r.gpus > 0 THEN 1 ELSE 0 END)
UNION ALL
-- A storage charge: TB-months, amounts and segments against the day-by-day recomputation.
SELECT s.entry_id, 'storage', s.period, s.project, f.field, f.expected, f.recorded
  FROM (SELECT sc.entry_id, sc.period, sc.project, sc.tb_months, sc.amount, sc.tb_days AS recorded_tb_days,
               sr.tb_days, w.want, w.want * sc.tb_month_price AS want_amount,
               sc.tb_months IS DISTINCT FROM w.want AS bad_tb_months,
               sc.amount <> round(w.want * sc.tb_month_price, 2) OR sc.unit_rate <> sc.tb_month_price
                   OR sc.amount_exact <> sc.tb_months * sc.unit_rate AS bad_amount,
               sc.tb_days IS DISTINCT FROM sr.tb_days AS bad_segments
          FROM audit.storage_charges sc
          JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id
         CROSS JOIN LATERAL (SELECT hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12) AS want) w) s
 CROSS JOIN LATERAL (VALUES
       ('tb_months', s.want::text, s.tb_months::text, s.bad_tb_months),
       ('amount', round(s.want_amount, 2)::text, s.amount::text, s.bad_amount),
       ('segments', s.tb_days::text, s.recorded_tb_days::text, s.bad_segments)
     ) f(field, expected, recorded, bad)
 WHERE (s.bad_tb_months OR s.bad_amount OR s.bad_segments) AND f.bad
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
SELECT e.id, e.kind, e.period, p.code, 'arithmetic', round(e.quantity * e.unit_rate, 2)::text, e.amount::text
  FROM ledger_entry e JOIN project p ON p.id = e.project_id
 WHERE e.kind IN ('reversal', 'refund', 'adjustment')
   AND (e.amount_exact <> e.quantity * e.unit_rate OR e.amount <> round(e.amount_exact, 2))
UNION ALL
-- A closed month's statements add up to the ledger.
SELECT NULL, 'statement', s.period, p.code, 'total',
       (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period)::text,
       s.total::text
  FROM statement s JOIN project p ON p.id = s.project_id
 WHERE s.total <> (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period);
