-- A day's end at a repeated local midnight, pools started by grants taken
-- back whole, and the audit's holds at the present instant (found by a
-- review, 2026-12-07).
--
-- * hl_day_end(d, tz) is the first instant whose local reading is d + 1 at
--   00:00. Where clocks go back at midnight (America/Havana on the first
--   Sunday of November, Atlantic/Azores on the last Sunday of October),
--   00:00 is read twice, and `timestamp AT TIME ZONE` gave the second; the
--   storage run (src/domain/period.rs) and docs/rules.md take the first. The
--   audit then recomputed a month's storage with an hour-long extra day
--   (a correct bill reported), and a rate or discount starting on the 1st
--   was refused as covering the month before. The reading of the day before
--   is tried first: the offset in force a day earlier, if the instant it
--   gives reads as d + 1 00:00 and comes first. The storage rate guard and
--   the archive's last priced day go through it too (they read the local
--   midnight inline). It stays one expression, with a 24-hour day's end
--   read as before, so PostgreSQL inlines it; hl_charge_priced_at and
--   audit.charge_discrepancies give it the zone as a column (a subquery
--   argument, used more than once in the body, keeps it from being
--   inlined: about 10 µs a call, against 0.2-0.7 µs inlined).
-- * hl_pool_balance: a pool's draws count from the earliest start among its
--   grants and transfers in that are in force and still hold something
--   after what was reduced or transferred out of them (as hl_pool_start
--   does for a cluster's pool, 0028). A general grant entered with a wrong
--   start and reduced to nothing moved the pool's start back: the next
--   grant paid for jobs that ended before it began. Whether the project is
--   budgeted does not change: a general grant taken back whole still
--   makes it budgeted (with nothing in force, its jobs are refused: an
--   award revoked is not an unlimited one).
-- * audit.holds: a hold's status now, by hl_hold_release_at(h, now()) as
--   balances count it (0051): a record whose end is still ahead (a
--   scheduler's clock) does not release it yet.
-- * ledger_draw of a live month whose end is a repeated midnight is summed
--   again from its entries, and so is every month holding a correction of
--   its storage charges (drawn at the charge's month's end): they were
--   drawn at the second reading (the next month's first day, in the
--   center's zone); the audit would report every such row. An archived month's rows stay as they are
--   (their entries are gone), and so does archived_rule's last priced
--   instant of a storage rate (later by the hour: such a rate cannot end
--   at that month's first midnight).

CREATE OR REPLACE FUNCTION hl_day_end(d date, tz text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- One expression, so that PostgreSQL inlines it where its arguments are
    -- columns or constants (the audit calls it per storage charge and quota
    -- row; a caller passing a subquery is not inlined: 0052 gives those a
    -- column). A day of 24 hours as PostgreSQL reads it has no repeated
    -- midnight at its end: PostgreSQL's reading. Otherwise a = that reading
    -- (the later of a repeated 00:00); b = the same wall time at the offset
    -- in force a day before a, in UTC, naive timestamps throughout (no
    -- session time zone in the arithmetic); b when it is earlier and reads
    -- as that wall time too.
    SELECT CASE
        WHEN ((d + 1)::timestamp AT TIME ZONE tz) - (d::timestamp AT TIME ZONE tz) = interval '24 hours'
        THEN (d + 1)::timestamp AT TIME ZONE tz
        WHEN (((d + 1)::timestamp - ((((((d + 1)::timestamp AT TIME ZONE tz) AT TIME ZONE 'UTC') - interval '1 day')
                                      AT TIME ZONE 'UTC' AT TIME ZONE tz)
                                     - ((((d + 1)::timestamp AT TIME ZONE tz) AT TIME ZONE 'UTC') - interval '1 day')))
              AT TIME ZONE 'UTC') < ((d + 1)::timestamp AT TIME ZONE tz)
         AND ((((d + 1)::timestamp - ((((((d + 1)::timestamp AT TIME ZONE tz) AT TIME ZONE 'UTC') - interval '1 day')
                                       AT TIME ZONE 'UTC' AT TIME ZONE tz)
                                      - ((((d + 1)::timestamp AT TIME ZONE tz) AT TIME ZONE 'UTC') - interval '1 day')))
               AT TIME ZONE 'UTC') AT TIME ZONE tz) = (d + 1)::timestamp
        THEN ((d + 1)::timestamp - ((((((d + 1)::timestamp AT TIME ZONE tz) AT TIME ZONE 'UTC') - interval '1 day')
                                    AT TIME ZONE 'UTC' AT TIME ZONE tz)
                                   - ((((d + 1)::timestamp AT TIME ZONE tz) AT TIME ZONE 'UTC') - interval '1 day')))
             AT TIME ZONE 'UTC'
        ELSE (d + 1)::timestamp AT TIME ZONE tz
    END
$$;

-- 0026's, the zone given as a column (a subquery argument keeps
-- hl_day_end from being inlined).
CREATE OR REPLACE FUNCTION hl_charge_priced_at(e ledger_entry) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT CASE e.kind
        WHEN 'job' THEN (SELECT coalesce(j.submitted_at, j.started_at)
                           FROM job_record r JOIN job j ON j.id = r.job_id WHERE r.id = e.job_record_id)
        WHEN 'storage' THEN (SELECT hl_day_end((e.period + interval '1 month' - interval '1 day')::date, c.time_zone)
                               FROM center c) - interval '1 microsecond'
    END
$$;

CREATE OR REPLACE FUNCTION hl_storage_rate_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE storage_rate_id = OLD.id)
       AND NOT EXISTS (SELECT 1 FROM archived_rule a WHERE a.kind = 'storage_rate' AND a.id = OLD.id) THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE'
       OR (NEW.valid_from, NEW.tb_month_price, NEW.rate_class_id)
          IS DISTINCT FROM (OLD.valid_from, OLD.tb_month_price, OLD.rate_class_id) THEN
        RAISE EXCEPTION 'storage rate % has priced charges and cannot be changed or removed', OLD.id
            USING ERRCODE = 'HL004', HINT = 'Add a new dated storage rate instead.';
    END IF;
    IF NEW.valid_until IS NOT NULL AND EXISTS (
        SELECT 1 FROM ledger_entry e
          JOIN storage_charge_segment s ON s.ledger_entry_id = e.id
         CROSS JOIN center c
         WHERE e.storage_rate_id = OLD.id
           AND hl_day_end(s.last_day, c.time_zone) > NEW.valid_until)
       OR EXISTS (SELECT 1 FROM archived_rule a
                   WHERE a.kind = 'storage_rate' AND a.id = OLD.id AND a.last_priced_at > NEW.valid_until) THEN
        RAISE EXCEPTION 'storage rate % priced days after %; it cannot end before them', OLD.id, NEW.valid_until
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION hl_archive_months(months date[], by_whom text, file_names text[], file_sha256s bytea[])
RETURNS SETOF archived_period
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    cp closed_period;
    a archived_period;
    p date;
    i integer;
    first_unarchived date;
    later record;
    n bigint;
    last_month date := months[array_upper(months, 1)];
BEGIN
    PERFORM pg_advisory_xact_lock(hl_period_lock_key());
    IF coalesce(array_length(months, 1), 0) = 0
       OR array_length(file_names, 1) IS DISTINCT FROM array_length(months, 1)
       OR array_length(file_sha256s, 1) IS DISTINCT FROM array_length(months, 1) THEN
        RAISE EXCEPTION 'archive: one file name and digest per month' USING ERRCODE = 'HL002';
    END IF;
    FOR i IN 1 .. array_length(months, 1) LOOP
        p := months[i];
        SELECT * INTO cp FROM closed_period WHERE period = p;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cannot archive %: it is not closed', to_char(p, 'YYYY-MM') USING ERRCODE = 'HL002';
        END IF;
        IF EXISTS (SELECT 1 FROM archived_period x WHERE x.period = p) THEN
            RAISE EXCEPTION 'cannot archive %: it is archived already', to_char(p, 'YYYY-MM') USING ERRCODE = 'HL002';
        END IF;
        SELECT min(c.period) INTO first_unarchived
          FROM closed_period c
         WHERE c.period < p AND NOT EXISTS (SELECT 1 FROM archived_period x WHERE x.period = c.period);
        IF first_unarchived IS NOT NULL THEN
            RAISE EXCEPTION 'cannot archive %: archive % first (months are archived in order)',
                to_char(p, 'YYYY-MM'), to_char(first_unarchived, 'YYYY-MM') USING ERRCODE = 'HL002';
        END IF;
        SELECT x.* INTO later
          FROM (SELECT r.id AS r_id, r.period AS r_period, o.id AS o_id, o.period AS o_period, r.period AS other
                  FROM ledger_entry o JOIN ledger_entry r ON r.corrects_id = o.id
                 WHERE o.period = p AND r.period > last_month
                UNION ALL
                SELECT r.id, r.period, o.id, o.period, o.period
                  FROM ledger_entry r JOIN ledger_entry o ON o.id = r.corrects_id
                 WHERE r.period = p AND o.period > last_month) x
         ORDER BY x.other DESC, x.r_id LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'cannot archive % without %: entry % of % corrects entry % of %',
                to_char(p, 'YYYY-MM'), to_char(later.other, 'YYYY-MM'), later.r_id, to_char(later.r_period, 'YYYY-MM'),
                later.o_id, to_char(later.o_period, 'YYYY-MM')
                USING ERRCODE = 'HL002',
                      HINT = 'Archive through ' || to_char(later.other, 'YYYY-MM') || ' (once it is closed).';
        END IF;
        INSERT INTO archived_period (period, archived_by, file_name, file_sha256, seal, entry_count, total)
        VALUES (p, by_whom, file_names[i], file_sha256s[i], cp.seal, cp.entry_count, cp.total)
        RETURNING * INTO a;
        INSERT INTO archived_rule (kind, id, period, last_priced_at)
        SELECT 'rate_card', e.rate_card_id, p, max(coalesce(j.submitted_at, j.started_at))
          FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
         WHERE e.period = p AND e.kind = 'job' GROUP BY e.rate_card_id
        UNION ALL
        SELECT 'storage_rate', e.storage_rate_id, p, max(hl_day_end(s.last_day, c.time_zone))
          FROM ledger_entry e JOIN storage_charge_segment s ON s.ledger_entry_id = e.id CROSS JOIN center c
         WHERE e.period = p AND e.kind = 'storage' GROUP BY e.storage_rate_id
        UNION ALL
        SELECT 'discount', l.discount_id, p,
               max(CASE c.kind WHEN 'job' THEN coalesce(j.submitted_at, j.started_at)
                   ELSE hl_day_end((c.period + interval '1 month' - interval '1 day')::date, ce.time_zone)
                        - interval '1 microsecond' END)
          FROM ledger_entry l JOIN ledger_entry c ON c.id = l.corrects_id
          LEFT JOIN job_record r ON r.id = c.job_record_id LEFT JOIN job j ON j.id = r.job_id
         CROSS JOIN center ce
         WHERE l.period = p AND l.kind = 'discount' GROUP BY l.discount_id;
        RETURN NEXT a;
    END LOOP;
    -- Each record whose charges leave, once, over every month of the call
    -- (a correction cites its record from another month of the group), with
    -- the first month holding its entries and its job charge's rate card.
    INSERT INTO archived_charge (job_record_id, period, rate_card_id)
    SELECT e.job_record_id, min(e.period), min(e.rate_card_id) FILTER (WHERE e.kind = 'job')
      FROM ledger_entry e WHERE e.period = ANY (months) AND e.job_record_id IS NOT NULL
     GROUP BY e.job_record_id
    ON CONFLICT (job_record_id) DO NOTHING;
    FOR i IN REVERSE array_length(months, 1) .. 1 LOOP
        p := months[i];
        PERFORM set_config('hl.archiving', to_char(p, 'YYYY-MM'), true);
        DELETE FROM storage_charge_segment s USING ledger_entry e WHERE e.id = s.ledger_entry_id AND e.period = p;
        DELETE FROM ledger_entry e WHERE e.period = p;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> (SELECT x.entry_count FROM archived_period x WHERE x.period = p) THEN
            RAISE EXCEPTION 'archive of %: % entries found, % recorded when it closed', to_char(p, 'YYYY-MM'), n,
                (SELECT x.entry_count FROM archived_period x WHERE x.period = p)
                USING ERRCODE = 'HL002';
        END IF;
    END LOOP;
    PERFORM set_config('hl.archiving', '', true);
END
$$;

CREATE OR REPLACE FUNCTION hl_pool_balance(project bigint, pool bigint, at timestamptz,
                                OUT allocated numeric, OUT pool_from timestamptz, OUT used numeric,
                                OUT held numeric, OUT begun boolean)
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT p.allocated, s.pool_from,
           CASE WHEN s.pool_from IS NULL THEN 0 ELSE hl_pool_drawn(project, pool, s.pool_from, at) END,
           (SELECT coalesce(sum(h.amount), 0) FROM hold h
             WHERE h.project_id = project AND h.created_at <= at AND h.expires_at > at
               AND hl_in_pool(pool, h.cluster_id, hl_pool_start(project, h.cluster_id), at)
               AND hl_hold_release_at(h, at) IS NULL),
           CASE WHEN pool IS NULL
                THEN EXISTS (SELECT 1 FROM allocation a WHERE a.project_id = project
                                AND a.cluster_id IS NULL AND a.valid_from <= at)
                ELSE coalesce(hl_pool_start(project, pool) <= at, false) END
      FROM (SELECT coalesce(sum(a.amount), 0) AS allocated
              FROM allocation a
             WHERE a.project_id = project AND a.cluster_id IS NOT DISTINCT FROM pool
               AND a.valid_from <= at AND (a.valid_until IS NULL OR at < a.valid_until)) p,
           (SELECT min(a.valid_from) AS pool_from
              FROM allocation a
             WHERE a.project_id = project AND a.cluster_id IS NOT DISTINCT FROM pool
               AND a.kind IN ('grant', 'transfer_in')
               AND a.valid_from <= at AND (a.valid_until IS NULL OR at < a.valid_until)
               AND a.amount + coalesce((SELECT sum(t.amount) FROM allocation t WHERE t.grant_id = a.id), 0) > 0) s
$$;

CREATE OR REPLACE VIEW audit.holds AS
SELECT h.id, p.code AS project, c.name AS cluster, h.scheduler_job_id AS job_id, h.array_index, h.amount,
       h.request, h.created_at, h.expires_at, h.author,
       x.released_by AS released_by_job_record,
       CASE WHEN x.released_by IS NOT NULL THEN 'released'
            WHEN h.expires_at <= now() THEN 'expired'
            ELSE 'open' END AS status,
       rp.code AS released_by_project
  FROM hold h
  JOIN project p ON p.id = h.project_id
  JOIN cluster c ON c.id = h.cluster_id
 CROSS JOIN LATERAL (SELECT hl_hold_release_at(h, now()) AS released_by) x
  LEFT JOIN job_record r ON r.id = x.released_by
  LEFT JOIN project rp ON rp.id = r.project_id;

-- 0046's, the zone given as a column (see hl_charge_priced_at above).
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
 WHERE s.total <> (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period)
   AND NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = s.period);

DO $$
DECLARE
    tz text := (SELECT time_zone FROM center);
    first_month date := (SELECT min(period) FROM ledger_entry);
    last_month date := (SELECT max(period) FROM ledger_entry);
    affected date[];
    m date;
BEGIN
    IF tz IS NULL OR first_month IS NULL THEN
        RETURN;
    END IF;
    -- Months ending at a repeated midnight (none in most zones).
    SELECT coalesce(array_agg(g::date), ARRAY[]::date[]) INTO affected
      FROM generate_series(first_month::timestamp, last_month::timestamp, interval '1 month') g
     WHERE ((g + interval '1 month') AT TIME ZONE tz)
           <> hl_day_end((g + interval '1 month' - interval '1 day')::date, tz);
    IF cardinality(affected) = 0 THEN
        RETURN;
    END IF;
    -- No posting between the rows' removal and their sums again.
    LOCK TABLE ledger_entry IN SHARE MODE;
    -- Every month holding an entry drawn at such a month's end: its storage
    -- charges, and their corrections and theirs, wherever posted.
    FOR m IN SELECT DISTINCT x.period
               FROM (SELECT e.period FROM ledger_entry e WHERE e.period = ANY (affected)
                     UNION
                     SELECT c.period FROM ledger_entry o JOIN ledger_entry c ON c.corrects_id = o.id
                      WHERE o.period = ANY (affected)
                     UNION
                     SELECT cc.period FROM ledger_entry o JOIN ledger_entry c ON c.corrects_id = o.id
                       JOIN ledger_entry cc ON cc.corrects_id = c.id
                      WHERE o.period = ANY (affected)) x LOOP
        DELETE FROM ledger_draw WHERE period = m;
        INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
        SELECT d.project_id, d.cluster_id, d.period, (d.draw AT TIME ZONE tz)::date,
               min(d.draw), max(d.draw), sum(d.amount), count(*)
          FROM (SELECT e.project_id, e.period, e.amount, j.cluster_id,
                       hl_draw_at(e, o, oo, r.ended_at, tz) AS draw
                  FROM ledger_entry e
                  LEFT JOIN ledger_entry o ON o.id = e.corrects_id
                  LEFT JOIN ledger_entry oo ON oo.id = o.corrects_id
                  LEFT JOIN job_record r ON r.id = coalesce(oo.job_record_id, o.job_record_id, e.job_record_id)
                  LEFT JOIN job j ON j.id = r.job_id
                 WHERE e.period = m) d
         GROUP BY 1, 2, 3, 4;
    END LOOP;
END
$$;
