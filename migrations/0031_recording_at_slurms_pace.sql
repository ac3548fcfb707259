-- Recording at Slurm's pace (issue 19, item 1): the three statement
-- triggers every posting of job charges runs do the same checks with fewer
-- statements. Measured before, for one job posted by one sequential sender:
-- the ledger insert took 0.79 ms of the 1.9 ms the database spent on the
-- job (log_min_duration_statement), most of it in statement overhead.
--
-- hl_ledger_entry_guard: a statement with no reversal, refund or discount
-- line ends after the closed-month check (the checks after it only look at
-- those lines). hl_ledger_entry_references: what the statement refers to
-- is gathered in one pass, and a kind of reference none of the rows has is
-- not looked up. hl_ledger_draw_add: a job charge's draw is its record's
-- end, said in the query instead of calling hl_draw_instant per statement.
-- Same checks, same rows, same errors.

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
            OR n.unit_rate <> o.unit_rate OR n.amount_exact <> -o.amount_exact
            OR n.discount_id IS DISTINCT FROM o.discount_id)
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
            OR n.unit_rate <> o.unit_rate OR n.quantity > 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'refund % must take back part of a job or storage charge of its project, in its metric and at its rate', bad.id
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
            USING ERRCODE = 'HL003', HINT = 'Reverse its refunds and discount before reversing the entry itself.';
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION hl_ledger_entry_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    projects bigint[];
    cards bigint[];
    rates bigint[];
    runs bigint[];
    records boolean;
    corrects boolean;
    n_found bigint;
    bad record;
BEGIN
    -- What the statement refers to, in one pass.
    SELECT array_agg(DISTINCT n.project_id),
           array_agg(DISTINCT n.rate_card_id) FILTER (WHERE n.rate_card_id IS NOT NULL),
           array_agg(DISTINCT n.storage_rate_id) FILTER (WHERE n.storage_rate_id IS NOT NULL),
           array_agg(DISTINCT n.billing_run_id) FILTER (WHERE n.billing_run_id IS NOT NULL),
           coalesce(bool_or(n.job_record_id IS NOT NULL), false),
           coalesce(bool_or(n.corrects_id IS NOT NULL), false)
      INTO projects, cards, rates, runs, records, corrects
      FROM new_rows n;
    IF projects IS NOT NULL THEN
        PERFORM 1 FROM project p WHERE p.id = ANY (projects) FOR KEY SHARE OF p;
        GET DIAGNOSTICS n_found = ROW_COUNT;
        IF n_found < cardinality(projects) THEN
            SELECT n.id, n.project_id INTO bad FROM new_rows n
             WHERE NOT EXISTS (SELECT 1 FROM project p WHERE p.id = n.project_id) ORDER BY n.id LIMIT 1;
            PERFORM hl_missing_reference('ledger_entry', bad.id, 'project', bad.project_id::text);
        END IF;
    END IF;
    IF cards IS NOT NULL THEN
        PERFORM 1 FROM rate_card c WHERE c.id = ANY (cards) FOR KEY SHARE OF c;
        GET DIAGNOSTICS n_found = ROW_COUNT;
        IF n_found < cardinality(cards) THEN
            SELECT n.id, n.rate_card_id INTO bad FROM new_rows n
             WHERE n.rate_card_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rate_card c WHERE c.id = n.rate_card_id)
             ORDER BY n.id LIMIT 1;
            PERFORM hl_missing_reference('ledger_entry', bad.id, 'rate card', bad.rate_card_id::text);
        END IF;
    END IF;
    IF rates IS NOT NULL THEN
        PERFORM 1 FROM storage_rate s WHERE s.id = ANY (rates) FOR KEY SHARE OF s;
        GET DIAGNOSTICS n_found = ROW_COUNT;
        IF n_found < cardinality(rates) THEN
            SELECT n.id, n.storage_rate_id INTO bad FROM new_rows n
             WHERE n.storage_rate_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM storage_rate s WHERE s.id = n.storage_rate_id)
             ORDER BY n.id LIMIT 1;
            PERFORM hl_missing_reference('ledger_entry', bad.id, 'storage rate', bad.storage_rate_id::text);
        END IF;
    END IF;
    -- Billing runs, job records and corrected entries are append-only:
    -- found once, they stay; no lock needed.
    IF runs IS NOT NULL THEN
        SELECT count(*) INTO n_found FROM billing_run b WHERE b.id = ANY (runs);
        IF n_found < cardinality(runs) THEN
            SELECT n.id, n.billing_run_id INTO bad FROM new_rows n
             WHERE n.billing_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.id = n.billing_run_id)
             ORDER BY n.id LIMIT 1;
            PERFORM hl_missing_reference('ledger_entry', bad.id, 'billing run', bad.billing_run_id::text);
        END IF;
    END IF;
    IF records THEN
        SELECT n.id, n.job_record_id INTO bad FROM new_rows n
         WHERE n.job_record_id IS NOT NULL AND (SELECT r.id FROM job_record r WHERE r.id = n.job_record_id) IS NULL
         ORDER BY n.id LIMIT 1;
        IF FOUND THEN
            PERFORM hl_missing_reference('ledger_entry', bad.id, 'job record', bad.job_record_id::text);
        END IF;
    END IF;
    IF corrects THEN
        SELECT n.id, n.corrects_id INTO bad FROM new_rows n
         WHERE n.corrects_id IS NOT NULL AND (SELECT e.id FROM ledger_entry e WHERE e.id = n.corrects_id) IS NULL
         ORDER BY n.id LIMIT 1;
        IF FOUND THEN
            PERFORM hl_missing_reference('ledger_entry', bad.id, 'ledger entry', bad.corrects_id::text);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION hl_ledger_draw_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
    SELECT d.project_id, d.cluster_id, d.period, (d.draw AT TIME ZONE d.tz)::date,
           min(d.draw), max(d.draw), sum(d.amount), count(*)
      FROM (SELECT e.project_id, e.period, e.amount, c.time_zone AS tz, r.cluster_id,
                   -- A job charge corrects nothing and has no storage rate:
                   -- hl_draw_instant gives its record's end (or its posting);
                   -- said here, it is not called once per statement.
                   CASE WHEN e.kind = 'job' THEN coalesce(r.ended_at, e.posted_at)
                        ELSE hl_draw_instant(e.kind, e.storage_rate_id, e.period, o.kind, o.storage_rate_id, o.period,
                                             oo.kind, oo.storage_rate_id, oo.period, r.ended_at, e.posted_at,
                                             c.time_zone)
                   END AS draw
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
