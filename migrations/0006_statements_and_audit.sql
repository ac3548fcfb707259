-- Statements of closed months, refunds, the month seal, and the auditor's
-- schema: views that show every charge with its inputs and rules, and
-- recompute it in SQL alone.

-- A project's statement of a closed month: numbered from one gapless
-- sequence (assigned by `close`, in one transaction), with its total.
CREATE TABLE statement (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period      date NOT NULL REFERENCES closed_period (period),
    project_id  bigint NOT NULL REFERENCES project (id),
    number      bigint NOT NULL CHECK (number >= 1),
    entry_count bigint NOT NULL CHECK (entry_count >= 0),
    total       numeric(18,2) NOT NULL,
    issued_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT statement_number_key UNIQUE (number),
    CONSTRAINT statement_once UNIQUE (period, project_id)
);
CREATE TRIGGER statement_append_only BEFORE UPDATE OR DELETE ON statement
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER statement_no_truncate BEFORE TRUNCATE ON statement
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE statement ENABLE ALWAYS TRIGGER statement_append_only;
ALTER TABLE statement ENABLE ALWAYS TRIGGER statement_no_truncate;

-- Every statement that posts entries: nothing into a closed month; a
-- reversal mirrors its entry exactly; a refund takes back part of a job or
-- storage charge, in its metric at its rate; and an entry is never credited
-- back more than it charged (refunds and its reversal, less reversed refunds).
CREATE OR REPLACE FUNCTION hl_ledger_entry_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last_closed date;
    bad record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hl_period_lock_key());
    SELECT max(period) INTO last_closed FROM closed_period;
    IF last_closed IS NOT NULL THEN
        SELECT n.id, n.period INTO bad FROM new_entries n WHERE n.period <= last_closed LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'ledger entry % would post into %, which is closed', bad.id, to_char(bad.period, 'YYYY-MM')
                USING ERRCODE = 'HL002';
        END IF;
    END IF;
    SELECT n.id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'reversal'
       AND (o.kind = 'reversal' OR n.project_id <> o.project_id OR n.quantity <> -o.quantity
            OR n.unit_rate <> o.unit_rate OR n.amount_exact <> -o.amount_exact)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % does not mirror the entry it reverses', bad.id USING ERRCODE = 'HL003';
    END IF;
    SELECT n.id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'refund'
       AND (o.kind NOT IN ('job', 'storage') OR n.project_id <> o.project_id OR n.metric IS DISTINCT FROM o.metric
            OR n.unit_rate <> o.unit_rate OR n.quantity > 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'refund % must take back part of a job or storage charge of its project, in its metric and at its rate', bad.id
            USING ERRCODE = 'HL003';
    END IF;
    SELECT o.id, o.amount_exact, credit.total INTO bad
      FROM ledger_entry o
      CROSS JOIN LATERAL (
           SELECT coalesce(sum(-c.amount_exact), 0)
                  - coalesce((SELECT sum(r.amount_exact) FROM ledger_entry f JOIN ledger_entry r ON r.corrects_id = f.id
                               WHERE f.corrects_id = o.id AND f.kind = 'refund' AND r.kind = 'reversal'), 0) AS total
             FROM ledger_entry c WHERE c.corrects_id = o.id AND c.kind IN ('refund', 'reversal')) credit
     WHERE o.id IN (SELECT corrects_id FROM new_entries WHERE kind IN ('refund', 'reversal'))
       AND o.kind IN ('job', 'storage')
       AND credit.total > o.amount_exact
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'entry % charged %, but % would be credited back', bad.id, bad.amount_exact, bad.total
            USING ERRCODE = 'HL003', HINT = 'Reverse its refunds before reversing the entry itself.';
    END IF;
    RETURN NULL;
END
$$;

-- The text of an entry that the month seal hashes: every column, as a JSON
-- array (unambiguous, independent of session settings).
CREATE FUNCTION hl_entry_text(e ledger_entry) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_array(e.id, (extract(epoch FROM e.posted_at) * 1000000)::bigint, to_char(e.period, 'YYYY-MM-DD'),
                             e.project_id, e.kind, e.metric, e.job_record_id, e.rate_card_id, e.storage_rate_id,
                             e.billing_run_id, e.corrects_id, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                             e.late, e.author, e.reason)::text
$$;

CREATE FUNCTION hl_seal_step(state bytea, item text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT sha256(state || convert_to(item, 'UTF8')) $$;

-- A SHA-256 chain: h = sha256(h || item) over the items in order.
CREATE AGGREGATE hl_seal_chain(text) (SFUNC = hl_seal_step, STYPE = bytea, INITCOND = '');

-- The seal of a month (algorithm sha256-chain-v1): the chain over a header
-- naming the month and the previous month's seal, then every entry of the
-- month in posting order. Altering, adding or removing an entry of a closed
-- month — or an earlier month's seal — changes it.
CREATE FUNCTION hl_month_seal(p date, previous bytea) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT hl_seal_chain(t ORDER BY ord, id)
      FROM (SELECT 0 AS ord, 0::bigint AS id,
                   'hpc-ledger seal v1 ' || to_char(p, 'YYYY-MM') || ' ' || coalesce(encode(previous, 'hex'), 'none') AS t
            UNION ALL
            SELECT 1, e.id, hl_entry_text(e) FROM ledger_entry e WHERE e.period = p) x
$$;
COMMENT ON FUNCTION hl_month_seal(date, bytea) IS
    'The seal of a month: sha256 chain over a header (month, previous seal) and the month''s entries in id order.';

-- The quantities of a job's charge, computed in SQL from its inputs and its
-- rate card (the same rules as src/domain/pricing.rs).
CREATE FUNCTION hl_job_quantities(
    nodes integer, cores integer, memory_bytes bigint, gpus integer, wall_seconds bigint,
    memory_per_core_bytes bigint, cores_per_node integer,
    OUT effective_cores numeric, OUT whole_node_cores bigint, OUT charged_cores numeric, OUT basis text,
    OUT hours numeric, OUT core_hours numeric, OUT gpu_hours numeric)
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

-- The first instant after a local calendar day in the billing time zone.
CREATE FUNCTION hl_day_end(d date, tz text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT ((d + 1)::timestamp AT TIME ZONE tz) $$;

CREATE SCHEMA audit;
COMMENT ON SCHEMA audit IS 'Read-only views for auditors: every charge with its inputs, rules and intermediate quantities, recomputed in SQL. See docs/auditing.md.';

-- Every job charge with its job's inputs, the rate card used, and every
-- intermediate quantity recomputed from them.
CREATE VIEW audit.job_charges AS
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
 CROSS JOIN LATERAL hl_job_quantities(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                      extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                      rc.memory_per_core_bytes, rc.cores_per_node) x
 WHERE e.kind = 'job';
COMMENT ON VIEW audit.job_charges IS 'One row per job charge: the job''s inputs, the rate card used, every intermediate quantity (recomputed) and the entry.';

-- Every storage charge with the segments (days × quota × rate) behind it.
CREATE VIEW audit.storage_charges AS
SELECT e.id AS entry_id, e.period, e.posted_at, e.author, p.code AS project, e.billing_run_id,
       e.storage_rate_id, sr.valid_from AS storage_rate_from, sr.valid_until AS storage_rate_until,
       sr.tb_month_price,
       (SELECT sum(s.days) FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id) AS days,
       (SELECT sum(s.days * s.quota_tb) FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id) AS tb_days,
       extract(day FROM (e.period + interval '1 month' - interval '1 day'))::int AS days_in_month,
       (SELECT string_agg(s.days || ' d × ' || s.quota_tb::float8 || ' TB from ' || s.first_day, ' + ' ORDER BY s.first_day)
          FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id) AS segments,
       e.quantity AS tb_months, e.unit_rate, e.amount_exact, e.amount
  FROM ledger_entry e
  JOIN project p ON p.id = e.project_id
  JOIN storage_rate sr ON sr.id = e.storage_rate_id
 WHERE e.kind = 'storage';
COMMENT ON VIEW audit.storage_charges IS 'One row per storage charge: the storage rate used, the TB-days and segments behind it, and the entry.';

-- Every correction (reversal, refund, adjustment) with its author, reason
-- and the entry it corrects.
CREATE VIEW audit.corrections AS
SELECT e.id AS entry_id, e.period, e.posted_at, e.kind, p.code AS project, e.author, e.reason,
       e.corrects_id, o.kind AS corrects_kind, o.period AS corrects_period, o.amount AS corrects_amount,
       e.metric, e.quantity, e.unit_rate, e.amount_exact, e.amount, e.late
  FROM ledger_entry e
  JOIN project p ON p.id = e.project_id
  LEFT JOIN ledger_entry o ON o.id = e.corrects_id
 WHERE e.kind IN ('reversal', 'refund', 'adjustment');
COMMENT ON VIEW audit.corrections IS 'Reversals, refunds and adjustments, with author, reason and the entry corrected.';

-- Per project and month: what the ledger holds, and the statement issued.
CREATE VIEW audit.project_months AS
SELECT p.code AS project, t.period,
       t.entries, t.jobs, t.storage, t.corrections, t.total,
       s.number AS statement_number, s.total AS statement_total, s.entry_count AS statement_entries,
       (cp.period IS NOT NULL) AS closed
  FROM (SELECT project_id, period, count(*) AS entries,
               coalesce(sum(amount) FILTER (WHERE kind = 'job'), 0) AS jobs,
               coalesce(sum(amount) FILTER (WHERE kind = 'storage'), 0) AS storage,
               coalesce(sum(amount) FILTER (WHERE kind IN ('reversal', 'refund', 'adjustment')), 0) AS corrections,
               sum(amount) AS total
          FROM ledger_entry GROUP BY project_id, period) t
  JOIN project p ON p.id = t.project_id
  LEFT JOIN statement s ON s.project_id = t.project_id AND s.period = t.period
  LEFT JOIN closed_period cp ON cp.period = t.period;
COMMENT ON VIEW audit.project_months IS 'Per project and month: ledger totals by kind, and the statement issued at close (number, total).';

-- Storage charges recomputed day by day from quota history and storage rates.
CREATE VIEW audit.storage_recomputed AS
WITH tz AS (SELECT time_zone FROM center),
days AS (
    SELECT e.id AS entry_id, e.project_id, e.period, e.storage_rate_id, d::date AS day,
           hl_day_end(d::date, tz.time_zone) AS day_end
      FROM ledger_entry e CROSS JOIN tz
     CROSS JOIN LATERAL generate_series(e.period, (e.period + interval '1 month' - interval '1 day')::date, interval '1 day') d
     WHERE e.kind = 'storage')
SELECT d.entry_id,
       sum(q.quota_tb) FILTER (WHERE r.id = d.storage_rate_id) AS tb_days,
       extract(day FROM (d.period + interval '1 month' - interval '1 day'))::int AS days_in_month
  FROM days d
  LEFT JOIN LATERAL (SELECT quota_tb FROM storage_quota
                      WHERE project_id = d.project_id AND effective_from < d.day_end
                      ORDER BY effective_from DESC LIMIT 1) q ON true
  LEFT JOIN LATERAL (SELECT id FROM storage_rate
                      WHERE valid_from < d.day_end AND (valid_until IS NULL OR valid_until >= d.day_end)) r ON true
 GROUP BY d.entry_id, d.period;

-- Every entry where SQL and the ledger disagree. Empty on a healthy ledger.
CREATE VIEW audit.discrepancies AS
-- A job charge: quantity, rate and amounts recomputed from the job's inputs and rate card.
SELECT jc.entry_id, 'job'::text AS kind, jc.period, jc.project,
       'quantity'::text AS field,
       (CASE jc.metric WHEN 'core_hours' THEN jc.core_hours ELSE jc.gpu_hours END)::text AS expected,
       jc.quantity::text AS recorded
  FROM audit.job_charges jc
 WHERE jc.quantity IS DISTINCT FROM (CASE jc.metric WHEN 'core_hours' THEN jc.core_hours ELSE jc.gpu_hours END)
UNION ALL
SELECT jc.entry_id, 'job', jc.period, jc.project, 'unit_rate',
       (CASE jc.metric WHEN 'core_hours' THEN jc.core_hour_price ELSE jc.gpu_hour_price END)::text, jc.unit_rate::text
  FROM audit.job_charges jc
 WHERE jc.unit_rate <> (CASE jc.metric WHEN 'core_hours' THEN jc.core_hour_price ELSE jc.gpu_hour_price END)
UNION ALL
SELECT jc.entry_id, 'job', jc.period, jc.project, 'amount',
       round((CASE jc.metric WHEN 'core_hours' THEN jc.core_hours * jc.core_hour_price
                             ELSE jc.gpu_hours * jc.gpu_hour_price END), 2)::text,
       jc.amount::text
  FROM audit.job_charges jc
 WHERE jc.amount <> round((CASE jc.metric WHEN 'core_hours' THEN jc.core_hours * jc.core_hour_price
                                          ELSE jc.gpu_hours * jc.gpu_hour_price END), 2)
    OR jc.amount_exact <> jc.quantity * jc.unit_rate
UNION ALL
-- The rate card must be the node type's card in force at the job's submit (else start) time.
SELECT jc.entry_id, 'job', jc.period, jc.project, 'rate_card',
       'a card of node type ' || jc.node_type || ' in force at ' || jc.priced_at, 'card ' || jc.rate_card_id
  FROM audit.job_charges jc
  JOIN rate_card rc ON rc.id = jc.rate_card_id
  JOIN job_record r ON r.id = jc.job_record_id
 WHERE rc.node_type_id <> r.node_type_id
    OR NOT (rc.valid_from <= jc.priced_at AND (rc.valid_until IS NULL OR jc.priced_at < rc.valid_until))
UNION ALL
-- Charged to the job's project, in the month it ended (or later, flagged late).
SELECT jc.entry_id, 'job', jc.period, jc.project, 'period',
       to_char(date_trunc('month', jc.ended_at AT TIME ZONE c.time_zone), 'YYYY-MM') || CASE WHEN jc.late THEN ' or later' ELSE '' END,
       to_char(jc.period, 'YYYY-MM') || CASE WHEN jc.late THEN ' (late)' ELSE '' END
  FROM audit.job_charges jc CROSS JOIN center c
 WHERE (NOT jc.late AND jc.period <> date_trunc('month', jc.ended_at AT TIME ZONE c.time_zone)::date)
    OR (jc.late AND jc.period <= date_trunc('month', jc.ended_at AT TIME ZONE c.time_zone)::date)
UNION ALL
SELECT e.id, 'job', e.period, p.code, 'project', rp.code, p.code
  FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
  JOIN project p ON p.id = e.project_id JOIN project rp ON rp.id = r.project_id
 WHERE e.kind = 'job' AND e.project_id <> r.project_id
UNION ALL
-- Every charging record has its core-hours, and GPU-hours exactly when it held GPUs.
SELECT NULL::bigint, 'job', NULL::date, p.code, 'entries',
       CASE WHEN r.gpus > 0 THEN 'core_hours and gpu_hours' ELSE 'core_hours' END,
       coalesce((SELECT string_agg(e.metric, ' and ' ORDER BY e.metric) FROM ledger_entry e
                  WHERE e.job_record_id = r.id AND e.kind = 'job'), 'none')
         || ' for job record ' || r.id
  FROM job_record r JOIN project p ON p.id = r.project_id
 WHERE r.kind IN ('original', 'supersede')
   AND coalesce((SELECT string_agg(e.metric, ' and ' ORDER BY e.metric) FROM ledger_entry e
                  WHERE e.job_record_id = r.id AND e.kind = 'job'), 'none')
       <> CASE WHEN r.gpus > 0 THEN 'core_hours and gpu_hours' ELSE 'core_hours' END
UNION ALL
-- A storage charge: TB-months recomputed day by day from quota history and rates.
SELECT sc.entry_id, 'storage', sc.period, sc.project, 'tb_months',
       hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12)::text, sc.tb_months::text
  FROM audit.storage_charges sc JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id
 WHERE sc.tb_months IS DISTINCT FROM hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12)
UNION ALL
SELECT sc.entry_id, 'storage', sc.period, sc.project, 'amount',
       round(hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12) * sc.tb_month_price, 2)::text, sc.amount::text
  FROM audit.storage_charges sc JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id
 WHERE sc.amount <> round(hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12) * sc.tb_month_price, 2)
    OR sc.unit_rate <> sc.tb_month_price OR sc.amount_exact <> sc.tb_months * sc.unit_rate
UNION ALL
SELECT sc.entry_id, 'storage', sc.period, sc.project, 'segments', sr.tb_days::text, sc.tb_days::text
  FROM audit.storage_charges sc JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id
 WHERE sc.tb_days IS DISTINCT FROM sr.tb_days
UNION ALL
-- A project with a quota in a billed month but no storage charge.
SELECT NULL, 'storage', b.period, p.code, 'missing storage charge', 'a storage charge', 'none'
  FROM billing_run b CROSS JOIN center c JOIN project p ON true
 WHERE b.kind = 'storage'
   AND EXISTS (SELECT 1 FROM generate_series(b.period, (b.period + interval '1 month' - interval '1 day')::date, interval '1 day') d
                WHERE (SELECT quota_tb FROM storage_quota q WHERE q.project_id = p.id
                         AND q.effective_from < hl_day_end(d::date, c.time_zone)
                       ORDER BY effective_from DESC LIMIT 1) > 0)
   AND NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.kind = 'storage' AND e.period = b.period AND e.project_id = p.id)
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
COMMENT ON VIEW audit.discrepancies IS 'Every entry where a recomputation in SQL alone (from job inputs, rate cards, quota history, storage rates) disagrees with the ledger. Empty on a healthy ledger.';

-- The seal of every closed month, recomputed, next to the one recorded.
CREATE VIEW audit.seals AS
SELECT cp.period, cp.closed_at, cp.closed_by, cp.seal_algorithm, encode(cp.seal, 'hex') AS recorded_seal,
       encode(hl_month_seal(cp.period, (SELECT p.seal FROM closed_period p WHERE p.period = (cp.period - interval '1 month')::date)), 'hex')
           AS recomputed_seal,
       cp.entry_count AS recorded_entries,
       (SELECT count(*) FROM ledger_entry e WHERE e.period = cp.period) AS entries,
       cp.total AS recorded_total,
       (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.period = cp.period) AS total
  FROM closed_period cp;
COMMENT ON VIEW audit.seals IS 'Each closed month: its recorded seal, entry count and total next to their recomputation.';

-- The auditor: may read the audit schema, nothing else, and change nothing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        CREATE ROLE hpc_ledger_auditor NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role hpc_ledger_auditor (no CREATEROLE); create it and re-grant as in docs/auditing.md';
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA audit TO hpc_ledger_auditor';
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
