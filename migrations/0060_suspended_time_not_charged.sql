-- A Slurm job's time suspended is not charged (docs/rules.md R1, issue 19's
-- defects round; a real run in tests/fixtures/accounting/slurm_2205_suspend_*):
-- a job suspended while it ran (`scontrol suspend`, `PreemptMode=SUSPEND` or
-- `GANG`) is stopped and its cores may be given to another job, which is
-- charged for them too. A 2-core job suspended 54 s of its 64 was charged
-- 128 core-seconds while `Elapsed` said 10 s and another job held those
-- cores for 30 of them.
--
-- A job's charged wall time is now its end minus its start minus the
-- seconds it was suspended, which a record says in sacct's `Suspended`
-- field, or else as its `Elapsed` short of its end minus its start, and in
-- `sacct --json`'s `time.suspended` (read option `slurm_suspended`). A
-- jobcomp document, a PBS record, a JSON line and `job record` say nothing
-- of it (0).
--
-- The record keeps it (`job_record.suspended_seconds`, 0 for every record of
-- before), and the audit's views re-derive the wall time with it:
-- `audit.job_charges.wall_seconds` is the charged wall time, with the
-- seconds suspended in a column of their own at its end;
-- `audit.charge_discrepancies` recomputes every job charge with it;
-- `audit.job_records` shows it (what `audit --deep` compares with the record
-- read again).
--
-- Records read before keep their reading (their read options lack
-- `slurm_suspended`), and a record of a run recorded under the earlier
-- reading is read that way again (`Recorder::earlier_readings`), so nothing
-- charged before is charged again or flagged. As with migrations 0049 and
-- 0056, this row says whether the ledger held job records when the change
-- reached it, and when: only then, and only for jobs that ended before then
-- (and a day), does the recorder look.

ALTER TABLE job_record ADD COLUMN suspended_seconds integer NOT NULL DEFAULT 0
    CHECK (suspended_seconds >= 0 AND suspended_seconds <= extract(epoch FROM ended_at - started_at));
COMMENT ON COLUMN job_record.suspended_seconds IS
    'Seconds the job was suspended between its start and its end, as its record says (Slurm Suspended, or Elapsed short of End - Start; sacct --json time.suspended); not charged: wall = end - start - suspended (docs/rules.md R1). 0 for records that say nothing of suspension and for every record of before migration 0060.';

CREATE TABLE suspension_reading_change (
    id             integer PRIMARY KEY CHECK (id = 1),
    migrated_at    timestamptz NOT NULL,
    records_before boolean NOT NULL
);
COMMENT ON TABLE suspension_reading_change IS
    'When the reading of Slurm suspended time (not charged) reached this ledger, and whether it held job records then (records read before keep their reading; docs/rules.md R1).';

INSERT INTO suspension_reading_change (id, migrated_at, records_before)
SELECT 1, now(), EXISTS (SELECT 1 FROM job_record);

-- Every role that records reads it, also one made by hand after this
-- migration: it holds no secret (an instant and a yes or no).
GRANT SELECT ON suspension_reading_change TO PUBLIC;

-- The charged wall time, and the seconds suspended at the end.
CREATE OR REPLACE VIEW audit.job_charges AS
SELECT e.id AS entry_id, e.period, e.posted_at, e.late, e.author,
       p.code AS project, c.name AS cluster, j.scheduler_job_id AS job_id, j.array_index,
       r.id AS job_record_id, r.revision, r.kind AS record_kind, r.source_format, r.source_ref,
       r.user_name, r.job_name, r.state, r.exit_code, r.queue, nt.name AS node_type,
       j.submitted_at, j.started_at, r.ended_at, coalesce(j.submitted_at, j.started_at) AS priced_at,
       r.nodes, r.cores AS requested_cores, r.memory_bytes AS requested_memory_bytes, r.gpus,
       rc.id AS rate_card_id, rc.valid_from AS rate_card_from, rc.valid_until AS rate_card_until,
       rc.core_hour_price, rc.gpu_hour_price, rc.memory_per_core_bytes, rc.cores_per_node,
       extract(epoch FROM r.ended_at - j.started_at)::bigint - r.suspended_seconds AS wall_seconds,
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
            ELSE CASE e.metric WHEN 'core_hours' THEN x2.core_exact ELSE x2.gpu_exact END END AS recomputed_amount_exact,
       r.suspended_seconds
  FROM ledger_entry e
  JOIN job_record r ON r.id = e.job_record_id
  JOIN job j ON j.id = r.job_id
  JOIN cluster c ON c.id = j.cluster_id
  JOIN node_type nt ON nt.id = r.node_type_id
  JOIN project p ON p.id = e.project_id
  JOIN rate_card rc ON rc.id = e.rate_card_id
 CROSS JOIN LATERAL hl_charge_quantities(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                         extract(epoch FROM r.ended_at - j.started_at)::bigint - r.suspended_seconds,
                                         rc.memory_per_core_bytes, rc.cores_per_node) x
 CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                 extract(epoch FROM r.ended_at - j.started_at)::bigint - r.suspended_seconds,
                                 rc.memory_per_core_bytes, rc.cores_per_node,
                                 rc.core_hour_price, rc.gpu_hour_price) x2
 WHERE e.kind = 'job';

-- The seconds suspended, as the record was kept (audit --deep compares them).
CREATE OR REPLACE VIEW audit.job_records AS
SELECT r.id AS record_id, r.job_id AS run_id, r.kind, r.revision,
       c.name AS cluster, coalesce(c.time_zone, ce.time_zone) AS time_zone,
       j.scheduler_job_id, j.array_index, j.submitted_at,
       r.started_at, r.ended_at, j.started_at AS run_started_at, j.cluster_id = r.cluster_id AS run_cluster_holds,
       p.code AS project, r.queue, r.nodes, r.cores, r.memory_bytes, r.gpus,
       r.charge_fingerprint, r.content_fingerprint,
       r.source_format, r.source_ref, r.raw, r.raw_bytes,
       coalesce(r.read_options, ro.options) AS read_options, r.recorded_at,
       r.recorded_at >= (SELECT m.installed_on FROM _sqlx_migrations m WHERE m.version = 20) AS options_kept,
       (SELECT count(*) FROM ledger_entry e WHERE e.job_record_id = r.id AND e.kind = 'job') AS job_entries,
       coalesce((SELECT rc.cores_per_node FROM ledger_entry e JOIN rate_card rc ON rc.id = e.rate_card_id
                  WHERE e.job_record_id = r.id AND e.kind = 'job' LIMIT 1),
                (SELECT rc.cores_per_node FROM job_record r2
                   JOIN ledger_entry e ON e.job_record_id = r2.id AND e.kind = 'job'
                   JOIN rate_card rc ON rc.id = e.rate_card_id
                  WHERE r2.job_id = r.job_id
                  ORDER BY r2.revision DESC LIMIT 1),
                (SELECT rc.cores_per_node FROM archived_charge ac JOIN rate_card rc ON rc.id = ac.rate_card_id
                  WHERE ac.job_record_id = r.id)) AS cores_per_node,
       (SELECT ac.period FROM archived_charge ac WHERE ac.job_record_id = r.id) AS archived_in,
       r.suspended_seconds
  FROM job_record r
  JOIN job j ON j.id = r.job_id
  JOIN cluster c ON c.id = r.cluster_id
  JOIN project p ON p.id = r.project_id
  LEFT JOIN record_read_options ro ON ro.id = r.read_options_id
  LEFT JOIN center ce ON true;

-- Each job charge recomputed over its charged wall time (as 0055's, with
-- the seconds suspended taken off).
CREATE OR REPLACE VIEW audit.charge_discrepancies AS
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
          -- `recomputed_at` (a volatile value, never NULL) keeps PostgreSQL
          -- from merging this subquery into the one above, as 0026's
          -- OFFSET 0 did: each recomputed value is computed once per charge.
          -- Unlike OFFSET 0, a filter on `period` still reaches the ledger's
          -- month index; the filter on the findings below names
          -- `recomputed_at`, so it stays above the recomputation.
          FROM (SELECT clock_timestamp() AS recomputed_at, e.id AS entry_id, e.period, e.late, e.quantity,
                       e.unit_rate, e.amount_exact, e.amount,
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
                                                         extract(epoch FROM r.ended_at - j.started_at)::bigint - r.suspended_seconds,
                                                         rc.memory_per_core_bytes, rc.cores_per_node) q
                 CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                                 extract(epoch FROM r.ended_at - j.started_at)::bigint - r.suspended_seconds,
                                                 rc.memory_per_core_bytes, rc.cores_per_node,
                                                 rc.core_hour_price, rc.gpu_hour_price) q2
                 WHERE e.kind = 'job') y) x
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
        OR x.bad_reference OR x.recomputed_at IS NULL) AND f.bad
UNION ALL
-- A job charge's class and discount (migration 0026), in a pass of their own
-- that carries no arithmetic: the card is of the project's class at the
-- pricing instant, and the charge has exactly the discount line the
-- discounts give it, of -(its exact amount × percent ÷ 100).
SELECT z.entry_id, 'job', z.period, (SELECT p.code FROM project p WHERE p.id = z.project_id), f.field, f.expected,
       f.recorded
  FROM (SELECT e.id AS entry_id, e.period, e.project_id, e.amount_exact, e.rate_card_id,
               rc.rate_class_id AS card_class, cp.rate_class_id AS want_class,
               coalesce(dp.id, dc.id) AS want_discount, coalesce(dp.percent, dc.percent) AS want_percent,
               dl.discount_id AS got_discount, dl.amount_exact AS got_discount_exact
          FROM ledger_entry e
          JOIN job_record r ON r.id = e.job_record_id
          JOIN job j ON j.id = r.job_id
          JOIN rate_card rc ON rc.id = e.rate_card_id
          LEFT JOIN (SELECT project_id, rate_class_id, effective_from,
                            lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                       FROM project_class) cp
                 ON cp.project_id = e.project_id AND cp.effective_from <= coalesce(j.submitted_at, j.started_at)
                AND (cp.until IS NULL OR coalesce(j.submitted_at, j.started_at) < cp.until)
          LEFT JOIN discount dp
                 ON dp.project_id = e.project_id AND dp.valid_from <= coalesce(j.submitted_at, j.started_at)
                AND (dp.valid_until IS NULL OR coalesce(j.submitted_at, j.started_at) < dp.valid_until)
          LEFT JOIN discount dc
                 ON dc.rate_class_id = cp.rate_class_id AND dc.valid_from <= coalesce(j.submitted_at, j.started_at)
                AND (dc.valid_until IS NULL OR coalesce(j.submitted_at, j.started_at) < dc.valid_until)
          LEFT JOIN ledger_entry dl ON dl.corrects_id = e.id AND dl.kind = 'discount'
         WHERE e.kind = 'job'
           -- Nothing to check (and no pass over the job charges) while no
           -- class or discount exists and no discount line was ever posted.
           AND (EXISTS (SELECT 1 FROM project_class) OR EXISTS (SELECT 1 FROM discount)
                OR EXISTS (SELECT 1 FROM rate_card WHERE rate_class_id IS NOT NULL)
                OR EXISTS (SELECT 1 FROM ledger_entry x WHERE x.kind = 'discount'))) z
 CROSS JOIN LATERAL (VALUES
       ('rate_class', coalesce((SELECT c.name FROM rate_class c WHERE c.id = z.want_class), 'default'),
        coalesce((SELECT c.name FROM rate_class c WHERE c.id = z.card_class), 'default') || ' (card ' || z.rate_card_id || ')',
        coalesce(z.card_class, 0) <> coalesce(z.want_class, 0)),
       ('discount', coalesce('discount ' || z.want_discount || ': ' || (-(z.amount_exact * z.want_percent / 100))::text, 'none'),
        coalesce('discount ' || z.got_discount || ': ' || z.got_discount_exact::text, 'none'),
        z.want_discount IS DISTINCT FROM z.got_discount
            OR (z.got_discount IS NOT NULL AND z.got_discount_exact <> -(z.amount_exact * z.want_percent / 100)))
     ) f(field, expected, recorded, bad)
 WHERE f.bad
UNION ALL
-- Every charging record has one core-hours entry, and one GPU-hours entry
-- exactly when it held GPUs: each record's job charges counted as they
-- are joined to it (0046), grouped by the record's key.
SELECT NULL::bigint, 'job', NULL::date, p.code, 'entries',
       CASE WHEN g.gpus > 0 THEN '1 core_hours, 1 gpu_hours' ELSE '1 core_hours, 0 gpu_hours' END,
       g.core_hours || ' core_hours, ' || g.gpu_hours || ' gpu_hours for job record ' || g.id
  FROM (SELECT r.id, r.project_id, r.gpus,
               count(*) FILTER (WHERE e.metric = 'core_hours') AS core_hours,
               count(*) FILTER (WHERE e.metric = 'gpu_hours') AS gpu_hours
          FROM job_record r
          LEFT JOIN ledger_entry e ON e.job_record_id = r.id AND e.kind = 'job'
         WHERE r.kind IN ('original', 'supersede')
           AND NOT EXISTS (SELECT 1 FROM archived_charge ac WHERE ac.job_record_id = r.id)
         GROUP BY r.id
        HAVING count(*) FILTER (WHERE e.metric = 'core_hours') <> 1
            OR count(*) FILTER (WHERE e.metric = 'gpu_hours') <> CASE WHEN r.gpus > 0 THEN 1 ELSE 0 END) g
  LEFT JOIN project p ON p.id = g.project_id
UNION ALL
-- A storage charge: TB-months, amounts, segments and discount against the recomputation.
SELECT s.entry_id, 'storage', s.period, s.project, f.field, f.expected, f.recorded
  FROM (SELECT sc.entry_id, sc.period, sc.project, sc.tb_months, sc.amount, sc.amount_exact,
               sc.tb_days AS recorded_tb_days, sc.charging_rules,
               sr.tb_days, w.want, w.want_exact AS want_amount,
               sc.tb_months IS DISTINCT FROM w.want AS bad_tb_months,
               sc.amount <> round(w.want_exact, 2) OR sc.unit_rate <> sc.tb_month_price
                   OR sc.amount_exact <> w.want_exact
                   OR (sc.charging_rules = 1 AND sc.amount_exact <> sc.tb_months * sc.unit_rate) AS bad_amount,
               sc.tb_days IS DISTINCT FROM sr.tb_days AS bad_segments,
               sc.missing <> '' AS bad_reference, sc.missing,
               sc.want_discount, sc.want_percent, sc.got_discount, sc.got_discount_exact,
               sc.want_discount IS DISTINCT FROM sc.got_discount
                   OR (sc.got_discount IS NOT NULL AND sc.got_discount_exact <> -(sc.amount_exact * sc.want_percent / 100))
                   AS bad_discount
          FROM (SELECT e.id AS entry_id, e.period, p.code AS project, e.quantity AS tb_months, e.unit_rate,
                       e.amount_exact, e.amount, rt.tb_month_price, g.tb_days, e.charging_rules,
                       concat_ws(', ', CASE WHEN p.id IS NULL THEN 'no project ' || e.project_id END,
                                       CASE WHEN rt.id IS NULL THEN 'no storage rate ' || e.storage_rate_id END,
                                       CASE WHEN b.id IS NULL THEN 'no billing run ' || e.billing_run_id END) AS missing,
                       coalesce(dp.id, dc.id) AS want_discount, coalesce(dp.percent, dc.percent) AS want_percent,
                       dl.discount_id AS got_discount, dl.amount_exact AS got_discount_exact
                  FROM ledger_entry e
                  -- A storage charge is priced at its month's last instant.
                 CROSS JOIN LATERAL (
                       SELECT hl_day_end((e.period + interval '1 month' - interval '1 day')::date, ce.time_zone)
                              - interval '1 microsecond' AS at
                         FROM center ce) pa
                  LEFT JOIN project p ON p.id = e.project_id
                  LEFT JOIN storage_rate rt ON rt.id = e.storage_rate_id
                  LEFT JOIN billing_run b ON b.id = e.billing_run_id
                  -- Its segments' TB-days, looked up by entry (a month's
                  -- audit reads that month's segments only).
                  LEFT JOIN LATERAL (SELECT sum(sg.days * sg.quota_tb) AS tb_days
                                       FROM storage_charge_segment sg WHERE sg.ledger_entry_id = e.id) g ON true
                  -- Its project's class and discounts then (joins, not a
                  -- function call per charge: a month holds one per project).
                  LEFT JOIN (SELECT project_id, rate_class_id, effective_from,
                                    lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                               FROM project_class) cp
                         ON cp.project_id = e.project_id AND cp.effective_from <= pa.at
                        AND (cp.until IS NULL OR pa.at < cp.until)
                  LEFT JOIN discount dp
                         ON dp.project_id = e.project_id AND dp.valid_from <= pa.at
                        AND (dp.valid_until IS NULL OR pa.at < dp.valid_until)
                  LEFT JOIN discount dc
                         ON dc.rate_class_id = cp.rate_class_id AND dc.valid_from <= pa.at
                        AND (dc.valid_until IS NULL OR pa.at < dc.valid_until)
                  LEFT JOIN ledger_entry dl ON dl.corrects_id = e.id AND dl.kind = 'discount'
                 WHERE e.kind = 'storage') sc
          JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id AND sr.period = sc.period
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
       ('reference', 'its project, storage rate and billing run', s.missing, s.bad_reference),
       ('discount', coalesce('discount ' || s.want_discount || ': ' || (-(s.amount_exact * s.want_percent / 100))::text, 'none'),
        coalesce('discount ' || s.got_discount || ': ' || s.got_discount_exact::text, 'none'), s.bad_discount)
     ) f(field, expected, recorded, bad)
 WHERE (s.bad_tb_months OR s.bad_amount OR s.bad_segments OR s.bad_reference OR s.bad_discount) AND f.bad
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
   AND NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = m.period)
UNION ALL
-- A discount line belongs to a job or storage charge of its project, month
-- and metric, and names a discount.
SELECT l.id, 'discount', l.period, (SELECT p.code FROM project p WHERE p.id = l.project_id), 'discount line',
       'a discount of a job or storage charge of the same project, month and metric',
       coalesce(c.kind || ' entry ' || c.id, 'no entry ' || l.corrects_id)
       || CASE WHEN d.id IS NULL THEN ', no discount ' || l.discount_id ELSE '' END
  FROM ledger_entry l
  LEFT JOIN ledger_entry c ON c.id = l.corrects_id
  LEFT JOIN discount d ON d.id = l.discount_id
 WHERE l.kind = 'discount'
   AND (c.id IS NULL OR c.kind NOT IN ('job', 'storage') OR c.project_id <> l.project_id OR c.period <> l.period
        OR c.metric IS DISTINCT FROM l.metric OR d.id IS NULL)
UNION ALL
-- A discount line is reversed only with its charge.
SELECT l.id, 'discount', l.period, (SELECT p.code FROM project p WHERE p.id = l.project_id), 'reversed alone',
       'reversed with its charge, entry ' || l.corrects_id, 'the charge is not reversed'
  FROM ledger_entry l
 WHERE l.kind = 'discount'
   AND EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = l.id AND r.kind = 'reversal')
   AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = l.corrects_id AND r.kind = 'reversal')
UNION ALL
-- Corrections: a reversal mirrors its entry; every entry's arithmetic holds.
SELECT e.id, e.kind, e.period, p.code, 'mirror', (-o.amount_exact)::text, e.amount_exact::text
  FROM ledger_entry e JOIN ledger_entry o ON o.id = e.corrects_id JOIN project p ON p.id = e.project_id
 WHERE e.kind = 'reversal' AND (e.amount_exact <> -o.amount_exact OR e.amount <> -o.amount OR e.quantity <> -o.quantity
                                OR e.project_id <> o.project_id OR e.charging_rules <> o.charging_rules)
UNION ALL
-- A correction's arithmetic, and the rows it refers to.
SELECT e.id, e.kind, e.period, (SELECT p.code FROM project p WHERE p.id = e.project_id), f.field, f.expected,
       f.recorded
  FROM ledger_entry e
 CROSS JOIN LATERAL (VALUES
       ('arithmetic', CASE WHEN e.charging_rules = 1 THEN round(e.quantity * e.unit_rate, 2)
                           WHEN e.charging_rules >= 3 AND e.kind = 'refund' THEN hl_refund_cents(e)
                           WHEN e.charging_rules >= 3 AND e.kind = 'reversal' THEN e.amount
                           ELSE round(e.amount_exact, 2) END::text, e.amount::text,
        (e.charging_rules = 1 AND e.amount_exact <> e.quantity * e.unit_rate)
        OR CASE WHEN e.charging_rules >= 3 AND e.kind = 'refund' THEN e.amount IS DISTINCT FROM hl_refund_cents(e)
                -- A reversal's cents are its entry's (the mirror above).
                WHEN e.charging_rules >= 3 AND e.kind = 'reversal' THEN false
                ELSE e.amount <> round(e.amount_exact, 2) END),
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
 WHERE s.total <> (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period)
   AND NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = s.period);
