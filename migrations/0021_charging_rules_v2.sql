-- Charging rules, version 2 (issue 16, items 1-3).
--
-- Version 1 rounded a charge's quantity to 12 places and derived the amount
-- from that rounded quantity: a 4-node job of 112 cores for 536,115 s at
-- 0.045 per core-hour is exactly 751.065, which rounds to 751.07, but the
-- ledger stored 16690.333333333333 core-hours, multiplied, got
-- 751.0649999999999985 and posted 751.06 (about one line in 200,000).
--
-- Version 2:
--   * the amount of a charge is the exact rational value (charged cores,
--     possibly memory ÷ memory per core, × seconds × rate ÷ 3600; GPUs
--     likewise; storage TB-days × rate ÷ days in the month) truncated toward
--     zero to 12 places as amount_exact, and amount_exact rounded half away
--     from zero to cents as amount: the same as rounding the exact value
--     once (a cent boundary has 3 decimals, so truncating at 12 places never
--     moves a value across it);
--   * the quantity is the exact rational rounded once to 12 places, for
--     display; it no longer defines the amount;
--   * a single-node job is never charged more than a whole node: charged
--     cores = min(max(cores, effective cores), max(cores per node, cores)).
--
-- Every ledger entry records the version of the rules that priced it;
-- entries posted before this migration are version 1 and keep their
-- arithmetic; the audit recomputes each entry by its own version. A
-- reversal or a refund carries the version of the entry it corrects.

CREATE TABLE charging_rules (
    version     smallint PRIMARY KEY CHECK (version >= 1),
    in_force_from timestamptz NOT NULL,
    summary     text NOT NULL CHECK (length(summary) BETWEEN 1 AND 2000)
);
COMMENT ON TABLE charging_rules IS
    'The versions of the charging rules (docs/rules.md): each ledger entry names the version that priced it; new charges use the latest.';
INSERT INTO charging_rules (version, in_force_from, summary) VALUES
    (1, '-infinity', 'The amount is the quantity, rounded to 12 places, times the rate, rounded to cents.'),
    (2, now(), 'The amount is the exact value (cores or memory ÷ memory per core, × seconds × rate ÷ 3600; storage TB-days × rate ÷ days) rounded once to cents; a single-node job is charged at most a whole node.');
CREATE TRIGGER charging_rules_append_only BEFORE UPDATE OR DELETE ON charging_rules
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER charging_rules_no_truncate BEFORE TRUNCATE ON charging_rules
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE charging_rules ENABLE ALWAYS TRIGGER charging_rules_append_only;
ALTER TABLE charging_rules ENABLE ALWAYS TRIGGER charging_rules_no_truncate;

-- A CHECK, not a foreign key: row-level foreign keys on the ledger were
-- most of an import's insert time (migration 0010). A new version's
-- migration extends it.
ALTER TABLE ledger_entry ADD COLUMN charging_rules smallint NOT NULL DEFAULT 1
    CONSTRAINT ledger_entry_charging_rules CHECK (charging_rules IN (1, 2));
-- Entries written without naming a version (by hand) follow the current one.
ALTER TABLE ledger_entry ALTER COLUMN charging_rules SET DEFAULT 2;
-- Version 2's amount_exact is the exact value truncated, not quantity × rate.
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_exact;
ALTER TABLE ledger_entry ADD CONSTRAINT ledger_entry_exact
    CHECK (charging_rules >= 2 OR amount_exact = quantity * unit_rate) NOT VALID;
ALTER TABLE ledger_entry VALIDATE CONSTRAINT ledger_entry_exact;
COMMENT ON TABLE ledger_entry IS
    'Priced, immutable charges. amount = round(amount_exact, 2), half away from zero. Charging rules 1: amount_exact = quantity × unit_rate; 2: amount_exact = the exact value truncated to 12 places (docs/rules.md).';

-- A node type's real memory per node, when the center gives it: `config
-- apply` warns when its cards' memory per core × cores per node is below
-- it, and a job holding more than its nodes' memory is refused.
ALTER TABLE node_type ADD COLUMN memory_per_node_bytes bigint
    CHECK (memory_per_node_bytes BETWEEN 1 AND 1152921504606846976);

-- x truncated toward zero to `places` decimals, exactly (n / d for n >= 0, d > 0).
CREATE FUNCTION hl_div_trunc_nonneg(n numeric, d numeric, places integer) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- The quotient's digits times an exact 10^-places (a negative power of a
    -- numeric is computed to 16 significant digits only).
    SELECT div(n * 10::numeric ^ places, d) * ('1e' || -places)::numeric
$$;

-- Version 2's job quantities and exact amounts: charged cores as a
-- fraction (numerator over memory per core), core-hours and GPU-hours
-- rounded once to 12 places, and the exact amounts truncated to 12 places.
CREATE FUNCTION hl_charge_v2(
    nodes integer, cores integer, memory_bytes bigint, gpus integer, wall_seconds bigint,
    memory_per_core_bytes bigint, cores_per_node integer, core_hour_price numeric, gpu_hour_price numeric)
RETURNS TABLE (effective_cores numeric, whole_node_cores bigint, charged_cores numeric, basis text,
               hours numeric, core_hours numeric, gpu_hours numeric, core_exact numeric, gpu_exact numeric)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT eff, whole, hl_div_round_nonneg(units, mpc, 12), basis,
           hl_div_round_nonneg(wall_seconds, 3600, 12),
           hl_div_round_nonneg(units * wall_seconds, mpc * 3600, 12),
           CASE WHEN gpus > 0 THEN hl_div_round_nonneg(gpus::numeric * wall_seconds, 3600, 12) END,
           hl_div_trunc_nonneg(units * wall_seconds * core_hour_price, mpc * 3600, 12),
           CASE WHEN gpus > 0 THEN hl_div_trunc_nonneg(gpus::numeric * wall_seconds * gpu_hour_price, 3600, 12) END
      FROM (SELECT eff, whole, mpc,
                   -- charged cores × memory per core
                   CASE WHEN nodes > 1 THEN greatest(whole, cores)::numeric * mpc
                        ELSE least(greatest(cores::numeric * mpc, coalesce(memory_bytes, 0)),
                                   greatest(cores_per_node, cores)::numeric * mpc) END AS units,
                   CASE WHEN nodes > 1 THEN 'whole_nodes'
                        WHEN coalesce(memory_bytes, 0) > greatest(cores_per_node, cores)::numeric * mpc THEN 'whole_node'
                        WHEN coalesce(memory_bytes, 0) > cores::numeric * mpc THEN 'memory'
                        ELSE 'cores' END AS basis
              FROM (SELECT memory_per_core_bytes::numeric AS mpc,
                           CASE WHEN memory_bytes IS NOT NULL
                                THEN hl_div_round_nonneg(memory_bytes, memory_per_core_bytes, 12) END AS eff,
                           CASE WHEN nodes > 1 THEN nodes::bigint * cores_per_node END AS whole) a) b
$$;

-- Version 2's storage amount: TB-days × rate ÷ days, truncated to 12 places.
CREATE FUNCTION hl_storage_v2(tb_days numeric, days_in_month integer, tb_month_price numeric,
                              OUT tb_months numeric, OUT amount_exact numeric)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hl_div_round_nonneg(tb_days, days_in_month, 12),
           hl_div_trunc_nonneg(tb_days * tb_month_price, days_in_month, 12)
$$;

-- The audit recomputes every entry by its own version: the job and storage
-- charges' views show version 2's quantities for version 2 entries, and
-- the discrepancies check each entry's arithmetic by its version (a
-- version 1 entry stays clean; a version 2 entry must be the exact value).
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
       CASE WHEN e.charging_rules = 1 THEN x.hours ELSE x2.hours END AS hours,
       CASE WHEN e.charging_rules = 1 THEN x.effective_cores ELSE x2.effective_cores END AS effective_cores,
       CASE WHEN e.charging_rules = 1 THEN x.whole_node_cores ELSE x2.whole_node_cores END AS whole_node_cores,
       CASE WHEN e.charging_rules = 1 THEN x.charged_cores ELSE x2.charged_cores END AS charged_cores,
       CASE WHEN e.charging_rules = 1 THEN x.basis ELSE x2.basis END AS charged_by,
       CASE WHEN e.charging_rules = 1 THEN x.core_hours ELSE x2.core_hours END AS core_hours,
       CASE WHEN e.charging_rules = 1 THEN x.gpu_hours ELSE x2.gpu_hours END AS gpu_hours,
       e.metric, e.quantity, e.unit_rate, e.amount_exact, e.amount,
       e.charging_rules,
       CASE WHEN e.charging_rules = 1
            THEN CASE e.metric WHEN 'core_hours' THEN x.core_hours * rc.core_hour_price
                               ELSE x.gpu_hours * rc.gpu_hour_price END
            ELSE CASE e.metric WHEN 'core_hours' THEN x2.core_exact ELSE x2.gpu_exact END END AS recomputed_amount_exact
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
 CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                 extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                 rc.memory_per_core_bytes, rc.cores_per_node,
                                 rc.core_hour_price, rc.gpu_hour_price) x2
 WHERE e.kind = 'job';

CREATE OR REPLACE VIEW audit.storage_charges AS
SELECT e.id AS entry_id, e.period, e.posted_at, e.author, p.code AS project, e.billing_run_id,
       e.storage_rate_id, sr.valid_from AS storage_rate_from, sr.valid_until AS storage_rate_until,
       sr.tb_month_price,
       (SELECT sum(s.days) FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id) AS days,
       (SELECT sum(s.days * s.quota_tb) FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id) AS tb_days,
       extract(day FROM (e.period + interval '1 month' - interval '1 day'))::int AS days_in_month,
       (SELECT string_agg(s.days || ' d × ' || s.quota_tb::float8 || ' TB from ' || s.first_day, ' + ' ORDER BY s.first_day)
          FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id) AS segments,
       e.quantity AS tb_months, e.unit_rate, e.amount_exact, e.amount, e.charging_rules
  FROM ledger_entry e
  JOIN project p ON p.id = e.project_id
  JOIN storage_rate sr ON sr.id = e.storage_rate_id
 WHERE e.kind = 'storage';

CREATE OR REPLACE VIEW audit.corrections AS
SELECT e.id AS entry_id, e.period, e.posted_at, e.kind, p.code AS project, e.author, e.reason,
       e.corrects_id, o.kind AS corrects_kind, o.period AS corrects_period, o.amount AS corrects_amount,
       e.metric, e.quantity, e.unit_rate, e.amount_exact, e.amount, e.late, e.charging_rules
  FROM ledger_entry e
  JOIN project p ON p.id = e.project_id
  LEFT JOIN ledger_entry o ON o.id = e.corrects_id
 WHERE e.kind IN ('reversal', 'refund', 'adjustment');

-- audit.charge_discrepancies (migration 0011, renamed in 0016), by version.
CREATE OR REPLACE VIEW audit.charge_discrepancies AS
-- A job charge: quantity, rate, amounts, rate card, month and project, in one
-- pass over the job charges; a row per field that disagrees. The inner
-- query computes each recomputed value once per charge (OFFSET 0 keeps the
-- planner from copying those expressions into every comparison).
SELECT x.entry_id, 'job'::text AS kind, x.period, (SELECT p.code FROM project p WHERE p.id = x.project_id) AS project,
       f.field, f.expected, f.recorded
  FROM (SELECT y.*,
               y.quantity IS DISTINCT FROM y.want_quantity AS bad_quantity,
               y.unit_rate <> y.want_rate AS bad_rate,
               y.amount <> round(y.want_exact, 2) OR y.amount_exact <> y.want_exact
                   OR (y.charging_rules = 1 AND y.amount_exact <> y.quantity * y.unit_rate)
                   AS bad_amount,
               y.card_node_type_id <> y.node_type_id
                   OR NOT (y.card_from <= y.priced_at AND (y.card_until IS NULL OR y.priced_at < y.card_until))
                   AS bad_card,
               (NOT y.late AND y.period <> y.end_month) OR (y.late AND y.period <= y.end_month) AS bad_period,
               y.project_id <> y.record_project_id AS bad_project,
               y.record_found IS NULL OR y.job_found IS NULL OR y.card_found IS NULL OR y.project_found IS NULL
                   AS bad_reference
          FROM (SELECT e.id AS entry_id, e.period, e.late, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                       e.charging_rules,
                       e.project_id, r.project_id AS record_project_id, r.node_type_id, rc.node_type_id AS card_node_type_id,
                       e.job_record_id, e.rate_card_id, rc.valid_from AS card_from, rc.valid_until AS card_until,
                       r.id AS record_found, j.id AS job_found, rc.id AS card_found, pe.id AS project_found,
                       coalesce(j.submitted_at, j.started_at) AS priced_at,
                       CASE WHEN e.charging_rules = 1
                            THEN CASE e.metric WHEN 'core_hours' THEN q.core_hours ELSE q.gpu_hours END
                            ELSE CASE e.metric WHEN 'core_hours' THEN q2.core_hours ELSE q2.gpu_hours END
                       END AS want_quantity,
                       CASE e.metric WHEN 'core_hours' THEN rc.core_hour_price ELSE rc.gpu_hour_price END AS want_rate,
                       -- Version 1: the 12-place quantity times the rate;
                       -- version 2: the exact value truncated to 12 places.
                       CASE WHEN e.charging_rules = 1
                            THEN CASE e.metric WHEN 'core_hours' THEN q.core_hours * rc.core_hour_price
                                               ELSE q.gpu_hours * rc.gpu_hour_price END
                            ELSE CASE e.metric WHEN 'core_hours' THEN q2.core_exact ELSE q2.gpu_exact END
                       END AS want_exact,
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
                 CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                                 extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                                 rc.memory_per_core_bytes, rc.cores_per_node,
                                                 rc.core_hour_price, rc.gpu_hour_price) q2
                 WHERE e.kind = 'job'
                OFFSET 0) y) x
 CROSS JOIN LATERAL (VALUES
       ('quantity', x.want_quantity::text, x.quantity::text, x.bad_quantity),
       ('unit_rate', x.want_rate::text, x.unit_rate::text, x.bad_rate),
       ('amount', round(x.want_exact, 2)::text
                  || CASE WHEN x.amount_exact <> x.want_exact THEN ' (exactly ' || x.want_exact || ')' ELSE '' END
                  || ' by charging rules ' || x.charging_rules,
        x.amount::text || CASE WHEN x.amount_exact <> x.want_exact THEN ' (exactly ' || x.amount_exact || ')' ELSE '' END,
        x.bad_amount),
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
               sc.charging_rules,
               sr.tb_days, w.want, w.want_exact AS want_amount,
               sc.tb_months IS DISTINCT FROM w.want AS bad_tb_months,
               sc.amount <> round(w.want_exact, 2) OR sc.unit_rate <> sc.tb_month_price
                   OR sc.amount_exact <> w.want_exact
                   OR (sc.charging_rules = 1 AND sc.amount_exact <> sc.tb_months * sc.unit_rate) AS bad_amount,
               sc.tb_days IS DISTINCT FROM sr.tb_days AS bad_segments,
               sc.missing <> '' AS bad_reference, sc.missing
          FROM (SELECT e.id AS entry_id, e.period, p.code AS project, e.quantity AS tb_months, e.unit_rate,
                       e.amount_exact, e.amount, rt.tb_month_price, g.tb_days, e.charging_rules,
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
         CROSS JOIN LATERAL (SELECT v.want, CASE WHEN sc.charging_rules = 1 THEN v.want * sc.tb_month_price
                                                 ELSE hl_div_trunc_nonneg(coalesce(sr.tb_days, 0) * sc.tb_month_price,
                                                                          sr.days_in_month, 12) END AS want_exact
                               FROM (SELECT hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12) AS want
                                     OFFSET 0) v
                              OFFSET 0) w) s
 CROSS JOIN LATERAL (VALUES
       ('tb_months', s.want::text, s.tb_months::text, s.bad_tb_months),
       ('amount', round(s.want_amount, 2)::text || ' by charging rules ' || s.charging_rules, s.amount::text,
        s.bad_amount),
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
 WHERE e.kind = 'reversal' AND (e.amount_exact <> -o.amount_exact OR e.quantity <> -o.quantity OR e.project_id <> o.project_id
                                OR e.charging_rules <> o.charging_rules)
UNION ALL
-- A correction's arithmetic, and the rows it refers to.
SELECT e.id, e.kind, e.period, (SELECT p.code FROM project p WHERE p.id = e.project_id), f.field, f.expected,
       f.recorded
  FROM ledger_entry e
 CROSS JOIN LATERAL (VALUES
       ('arithmetic', CASE WHEN e.charging_rules = 1 THEN round(e.quantity * e.unit_rate, 2)
                           ELSE round(e.amount_exact, 2) END::text, e.amount::text,
        (e.charging_rules = 1 AND e.amount_exact <> e.quantity * e.unit_rate) OR e.amount <> round(e.amount_exact, 2)),
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
 WHERE s.total <> (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period);;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
    -- Who posts may read which versions exist.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON charging_rules TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON charging_rules TO hpc_ledger_billing';
    END IF;
END
$$;
