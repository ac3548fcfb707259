-- A charge's refunds take back no more than its quantity (a review of
-- 2026-12-07): migration 0065 compared a refund's quantity with the share
-- of the charge's net it gives back, which holds for any quantity when the
-- net is zero: a charge discounted in full was refunded by fraction three
-- times (0.00 each), and the usage report showed minus its core-hours; a
-- refund of -1,000,000 core-hours for 0.00 was accepted the same way.
-- hpc-ledger now refuses to refund a charge that charged nothing or is
-- discounted in full; the database refuses refunds whose quantities, less
-- those reversed, exceed the charge's, and any refund of a reversed charge
-- (a charge discounted in full, reversed, then refunded by hand took its
-- core-hours out of usage a second time).
--
-- The ledger's guard of migration 0067 (its search path kept), with that cap.
-- Rows posted before are not re-checked.
CREATE OR REPLACE FUNCTION hl_ledger_entry_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
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
    -- A charge, a storage charge or an adjustment is posted by the charging
    -- rules in force now (docs/rules.md, D13); a correction carries the
    -- rules of what it corrects (checked below).
    SELECT n.id, n.charging_rules, r.version AS want INTO bad
      FROM new_entries n
     CROSS JOIN (SELECT max(version) AS version FROM charging_rules WHERE in_force_from <= now()) r
     WHERE n.kind IN ('job', 'storage', 'adjustment') AND n.charging_rules <> r.version
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger entry % is posted by charging rules %, but version % is in force', bad.id, bad.charging_rules, bad.want
            USING ERRCODE = 'HL003',
                  DETAIL = 'A job or storage charge or an adjustment is priced by the charging rules in force when it is posted (docs/rules.md, "Versions"); only corrections carry the rules of the entry they correct.';
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
       AND (o.kind = 'reversal' OR n.project_id <> o.project_id OR n.metric IS DISTINCT FROM o.metric
            OR n.quantity <> -o.quantity
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
    -- A refund's quantity is the charge's quantity times the share of the
    -- charge's net it gives back (charging rules 2 and 3; version 1's
    -- arithmetic, quantity × rate, is checked by the entry's own
    -- constraint and the audit): |q| × net and Q × |exact| agree to within
    -- the rounding of q (half a unit in the 12th place, times the net) and
    -- the truncation of a share's exact amount (a unit in the 12th place,
    -- times Q). A refund of all of a charge's core-hours for a cent is
    -- refused (an auditor's review of 2026-12-07).
    SELECT n.id, n.quantity, n.amount_exact, o.id AS charge, o.quantity AS charge_quantity, net.net INTO bad
      FROM new_entries n
      JOIN ledger_entry o ON o.id = n.corrects_id
     CROSS JOIN LATERAL (
           SELECT greatest(o.amount_exact + coalesce((SELECT sum(d.amount_exact) FROM ledger_entry d
                                                       WHERE d.corrects_id = o.id AND d.kind = 'discount'), 0), 0) AS net) net
     WHERE n.kind = 'refund' AND n.charging_rules >= 2
       AND abs(abs(n.quantity) * net.net - abs(o.quantity) * abs(n.amount_exact))
           > 0.000000000001 * (net.net + abs(o.quantity))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'refund % takes back % of entry %''s quantity % for %, not the share of its net % that amount is', bad.id, -bad.quantity, bad.charge, bad.charge_quantity, -bad.amount_exact, bad.net
            USING ERRCODE = 'HL003',
                  DETAIL = 'A refund''s quantity is its charge''s quantity times the share of the charge''s net (its exact amount less its discount) that the refund gives back, to 12 places (docs/rules.md, "A refund''s quantity").';
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
    -- A charge's refunds (less those reversed) take back no more than its
    -- quantity, within each refund's rounding (half a unit in the 12th
    -- place); counted after the lock, as the credits below. A charge whose
    -- net is zero (discounted in full) passed the share check with any
    -- quantity, and `refund --fraction 1` of it, posted three times, left
    -- minus its core-hours in the usage report.
    SELECT o.id, o.quantity, t.taken INTO bad
      FROM ledger_entry o
     CROSS JOIN LATERAL (
           SELECT sum(-f.quantity) AS taken, count(*) AS refunds
             FROM ledger_entry f
            WHERE f.corrects_id = o.id AND f.kind = 'refund'
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = f.id AND r.kind = 'reversal')) t
     WHERE o.id IN (SELECT corrects_id FROM new_entries WHERE kind = 'refund')
       AND (t.taken > abs(o.quantity) + 0.000000000001 * t.refunds
            -- Nothing is left of a reversed charge to refund (its net
            -- may be 0, so the money check passes a 0.00 refund of it).
            OR EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = o.id AND r.kind = 'reversal'))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the refunds of entry % would take back % of its quantity %', bad.id, bad.taken, bad.quantity
            USING ERRCODE = 'HL008',
                  DETAIL = 'A charge''s refunds, less those reversed, take back no more than its quantity, and a reversed charge is not refunded (docs/rules.md, "A refund''s quantity").';
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

-- A refund gives back: its exact amount is not positive either (only its
-- cents were held to that, so a refund of +0.004 with a matching quantity
-- passed the share check). NOT VALID: new rows only.
ALTER TABLE ledger_entry ADD CONSTRAINT ledger_entry_refund_gives_back
    CHECK (kind <> 'refund' OR amount_exact <= 0) NOT VALID;
