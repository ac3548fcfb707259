-- Charging rules 3: a refund settles in cents (docs/rules.md, "Corrections").
--
-- Under charging rules 1 and 2 every entry's cents are its own exact amount
-- rounded, and the cap on a charge's credits compares exact amounts, so the
-- cents a charge was refunded could differ from the cents it charged: two
-- refunds of half a 1.07 charge posted -0.54 each (1.08 back); a full
-- refund of a 1.07 charge discounted 50 % posted -0.54 beside its -0.54
-- discount line (net -0.01); a charge of exact 1.006 (posted 1.01)
-- discounted 50 % and refunded in full netted +0.01. Charges posted from
-- this migration on are of charging rules 3: priced as version 2, and a
-- refund of one posts, in cents, what the charge still charges in cents
-- less what the net it leaves unrefunded exactly comes to, rounded (never
-- more than the charge's net in cents; never a debit): what a charge's
-- refunds leave charged, in cents, is the exact net they leave, rounded,
-- and a charge refunded in full nets zero.
-- Charges of versions 1 and 2, and their refunds, keep their rules.
--
-- So a refund's cents (and those of its reversal, which mirrors it) are no
-- longer its own exact amount rounded: the entry's check allows that for
-- refunds and reversals of version 3; the guard checks a version 3 refund's
-- cents (hl_refund_cents), that a refund has its charge's rules, and that a
-- reversal mirrors its entry's cents and rules too; the audit re-derives
-- each version 3 refund's cents in posting order.

INSERT INTO charging_rules (version, in_force_from, summary) VALUES
    (3, now(), 'Priced as version 2. A refund settles in cents: it gives back what its charge still charges in cents (its cents and its discount line''s, less the cents refunded) less what the net it leaves unrefunded exactly comes to, rounded; what a charge''s refunds leave charged, in cents, is the exact net they leave, rounded.');
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_charging_rules;
ALTER TABLE ledger_entry ADD CONSTRAINT ledger_entry_charging_rules CHECK (charging_rules IN (1, 2, 3));
-- Entries written without naming a version (by hand) follow the current one.
ALTER TABLE ledger_entry ALTER COLUMN charging_rules SET DEFAULT 3;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_rounded;
ALTER TABLE ledger_entry ADD CONSTRAINT ledger_entry_rounded
    CHECK (amount = round(amount_exact, 2) OR (charging_rules >= 3 AND kind IN ('refund', 'reversal')));
COMMENT ON TABLE ledger_entry IS
    'Priced, immutable charges. amount = round(amount_exact, 2), half away from zero, except a refund of charging rules 3 and its reversal (hl_refund_cents). Charging rules 1: amount_exact = quantity × unit_rate; 2 and 3: amount_exact = the exact value truncated to 12 places; 3: refunds settle in cents (docs/rules.md).';

-- What a refund `e` of a charge of charging rules 3 posts, in cents (a
-- credit: at most 0), given the entries of its charge posted before it
-- (lower ids: refunds and reversals take the corrections' lock before they
-- insert) and not reversed before it: what the charge still charges in
-- cents (its net in cents, its cents and its discount line's, at least 0,
-- less the cents refunded) less what its net still unrefunded exactly
-- (its exact amount and its discount line's, at least 0, less what was
-- refunded and this refund) comes to, rounded, never more than its net in
-- cents; never a debit.
CREATE FUNCTION hl_refund_cents(e ledger_entry) RETURNS numeric
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT -greatest(s.net_cents - s.refunded_cents
                     - least(round(greatest(s.net_exact - s.refunded_exact + e.amount_exact, 0), 2), s.net_cents), 0)
      FROM (SELECT greatest(o.amount_exact + coalesce(c.discount_exact, 0), 0) AS net_exact,
                   greatest(o.amount + coalesce(c.discount_cents, 0), 0) AS net_cents,
                   -coalesce(c.refunded_exact, 0) AS refunded_exact,
                   -coalesce(c.refunded_cents, 0) AS refunded_cents
              FROM ledger_entry o
              CROSS JOIN LATERAL (
                   SELECT sum(x.amount_exact) FILTER (WHERE x.kind = 'discount') AS discount_exact,
                          sum(x.amount) FILTER (WHERE x.kind = 'discount') AS discount_cents,
                          sum(x.amount_exact) FILTER (WHERE x.kind = 'refund') AS refunded_exact,
                          sum(x.amount) FILTER (WHERE x.kind = 'refund') AS refunded_cents
                     FROM ledger_entry x
                    WHERE x.corrects_id = o.id AND x.kind IN ('discount', 'refund') AND x.id < e.id
                      AND NOT EXISTS (SELECT 1 FROM ledger_entry y
                                       WHERE y.corrects_id = x.id AND y.kind = 'reversal' AND y.id < e.id)) c
             WHERE o.id = e.corrects_id) s
$$;
-- The audit's view calls it with the auditor's rights (which read no
-- table), the guard with the poster's: the ledger's roles', not PUBLIC's
-- (migration 0054).
REVOKE EXECUTE ON FUNCTION hl_refund_cents(ledger_entry) FROM PUBLIC;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing', 'hpc_ledger_auditor'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_refund_cents(ledger_entry) TO %I', r);
        END IF;
    END LOOP;
END
$$;

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
    -- Job and storage charges and adjustments correct nothing: every check
    -- below is of reversals, refunds and discount lines (a batch of new
    -- jobs, the common case, is done here).
    IF NOT EXISTS (SELECT 1 FROM new_entries n WHERE n.kind IN ('reversal', 'refund', 'discount')) THEN
        RETURN NULL;
    END IF;
    SELECT n.id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'reversal'
       AND (o.kind = 'reversal' OR n.project_id <> o.project_id OR n.quantity <> -o.quantity
            OR n.unit_rate <> o.unit_rate OR n.amount_exact <> -o.amount_exact OR n.amount <> -o.amount
            OR n.charging_rules <> o.charging_rules OR n.discount_id IS DISTINCT FROM o.discount_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % does not mirror the entry it reverses', bad.id USING ERRCODE = 'HL003';
    END IF;
    SELECT n.id, n.corrects_id, o.kind AS target_kind, n.job_record_id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'reversal'
       AND (hl_reversal_cause(n::ledger_entry, o) IS NULL
            OR (hl_reversal_cause(n::ledger_entry, o) = 'supersede'
                AND (NOT EXISTS (SELECT 1 FROM new_entries c WHERE c.kind = 'job' AND c.job_record_id = n.job_record_id)
                     OR EXISTS (SELECT 1 FROM job_record rn JOIN job_record x ON x.job_id = rn.job_id
                                 WHERE rn.id = n.job_record_id AND x.revision > rn.revision))))
     LIMIT 1;
    IF NOT FOUND THEN
        -- A discount line goes with its charge; a supersede reverses a
        -- refund only with its charge: the charge is reversed by the same
        -- statement, or was before.
        SELECT n.id, n.corrects_id, o.kind AS target_kind, n.job_record_id INTO bad
          FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
         WHERE n.kind = 'reversal'
           AND (o.kind = 'discount' OR (o.kind = 'refund' AND hl_reversal_cause(n::ledger_entry, o) = 'supersede'))
           AND NOT EXISTS (SELECT 1 FROM new_entries x WHERE x.kind = 'reversal' AND x.corrects_id = o.corrects_id)
           AND NOT EXISTS (SELECT 1 FROM ledger_entry x WHERE x.kind = 'reversal' AND x.corrects_id = o.corrects_id)
         LIMIT 1;
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % of % entry % is not tied to what it reverses', bad.id, bad.target_kind, bad.corrects_id
            USING ERRCODE = 'HL003',
                  DETAIL = format('It cites job record %s. A reversal either cites the same job record as the entry it reverses and gives a reason (hpc-ledger reverse), or cites the latest, superseding record of the same job run, reverses a job charge (or its refund or discount, with the charge), and comes with that record''s own charges; a discount line is reversed only with its charge.',
                                  coalesce(bad.job_record_id::text, 'none'));
    END IF;
    SELECT n.id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'refund'
       AND (o.kind NOT IN ('job', 'storage') OR n.project_id <> o.project_id OR n.metric IS DISTINCT FROM o.metric
            OR n.unit_rate <> o.unit_rate OR n.quantity > 0 OR n.charging_rules <> o.charging_rules)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'refund % must take back part of a job or storage charge of its project, in its metric and at its rate, by its charging rules', bad.id
            USING ERRCODE = 'HL003';
    END IF;
    -- A discount line: of a charge of its project, in its month, metric,
    -- record, card or rate and run, by the discount in force for it, to the cent.
    SELECT n.id, n.corrects_id, hl_discount_for(o.project_id, hl_charge_priced_at(o)) AS want,
           n.discount_id AS got INTO bad
      FROM new_entries n
      LEFT JOIN ledger_entry o ON o.id = n.corrects_id
      LEFT JOIN discount d ON d.id = n.discount_id
     WHERE n.kind = 'discount'
       AND (o.id IS NULL OR o.kind NOT IN ('job', 'storage') OR n.project_id <> o.project_id
            OR n.period <> o.period OR n.metric IS DISTINCT FROM o.metric
            OR n.job_record_id IS DISTINCT FROM o.job_record_id OR n.rate_card_id IS DISTINCT FROM o.rate_card_id
            OR n.storage_rate_id IS DISTINCT FROM o.storage_rate_id OR n.billing_run_id IS DISTINCT FROM o.billing_run_id
            OR n.charging_rules <> o.charging_rules
            OR d.id IS NULL OR n.discount_id IS DISTINCT FROM hl_discount_for(o.project_id, hl_charge_priced_at(o))
            OR n.amount_exact <> -(o.amount_exact * d.percent / 100)
            OR EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = o.id AND r.kind = 'reversal'))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'discount line % of entry % does not apply the discount in force for it', bad.id, bad.corrects_id
            USING ERRCODE = 'HL003',
                  DETAIL = format('It applies discount %s; the charge''s discount is %s. A discount line takes the discount''s percent of an unreversed job or storage charge''s exact amount, in its month, metric and references.',
                                  coalesce(bad.got::text, 'none'), coalesce(bad.want::text, 'none'));
    END IF;
    -- Refunds and reversals posted by two transactions at once (a refund
    -- while the charge is reversed, two refunds of it, a refund while a
    -- re-sent job supersedes it) take this lock in turn: the later waits
    -- until the earlier commits, and the check below, a statement of its
    -- own run after the wait, counts what the earlier posted. Without it
    -- each was checked against what was committed before either, and both
    -- were posted: a charge credited back more than it charged. One lock
    -- for all (not one per charge): a batch that supersedes thousands of
    -- jobs would otherwise fill the lock table. Discount lines need none:
    -- they are posted with their charge, which nothing else can see yet.
    IF EXISTS (SELECT 1 FROM new_entries WHERE kind IN ('refund', 'reversal')) THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('hpc-ledger corrections', 17));
    END IF;
    -- A refund of a charge of charging rules 3 settles in cents
    -- (hl_refund_cents), counted after the lock: what it settles against
    -- is the refunds posted before it.
    SELECT n.id, n.amount, hl_refund_cents(n::ledger_entry) AS want INTO bad
      FROM new_entries n
     WHERE n.kind = 'refund' AND n.charging_rules >= 3 AND n.amount IS DISTINCT FROM hl_refund_cents(n::ledger_entry)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'refund % posts %, but its charge''s refunds settle it at %', bad.id, bad.amount, bad.want
            USING ERRCODE = 'HL008',
                  DETAIL = 'A refund of a charge of charging rules 3 gives back, in cents, what its charge still charges in cents less what the net it leaves unrefunded exactly comes to, rounded (docs/rules.md).';
    END IF;
    -- Credits of a charge (refunds, reversal, discount, less their
    -- reversals) never exceed it.
    SELECT o.id, o.amount_exact, credit.total INTO bad
      FROM ledger_entry o
      CROSS JOIN LATERAL (
           SELECT coalesce(sum(-c.amount_exact), 0)
                  - coalesce((SELECT sum(r.amount_exact) FROM ledger_entry f JOIN ledger_entry r ON r.corrects_id = f.id
                               WHERE f.corrects_id = o.id AND f.kind IN ('refund', 'discount') AND r.kind = 'reversal'), 0) AS total
             FROM ledger_entry c WHERE c.corrects_id = o.id AND c.kind IN ('refund', 'reversal', 'discount')) credit
     WHERE o.id IN (SELECT corrects_id FROM new_entries WHERE kind IN ('refund', 'reversal', 'discount'))
       AND o.kind IN ('job', 'storage')
       AND credit.total > o.amount_exact
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'entry % charged %, but % would be credited back', bad.id, bad.amount_exact, bad.total
            USING ERRCODE = 'HL008', HINT = 'Reverse its refunds and discount before reversing the entry itself.';
    END IF;
    RETURN NULL;
END
$$;

-- A reversal mirrors its entry's cents; a version 3 refund's cents are
-- re-derived in posting order.
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
                                                         extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                                         rc.memory_per_core_bytes, rc.cores_per_node) q
                 CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                                 extract(epoch FROM r.ended_at - j.started_at)::bigint,
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
