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
--   midnight inline).
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
--   again from its entries: its storage charges were drawn at the second
--   reading (the next month's first day, in the center's zone); the audit
--   would report every such row. An archived month's rows stay as they are
--   (their entries are gone), and so does archived_rule's last priced
--   instant of a storage rate (later by the hour: such a rate cannot end
--   at that month's first midnight).

CREATE OR REPLACE FUNCTION hl_day_end(d date, tz text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- One expression, so that PostgreSQL inlines it (the audit calls it per
    -- storage charge and quota row): a = PostgreSQL's reading of d + 1 at
    -- 00:00 (the later of a repeated one); b = the same wall time at the
    -- offset in force a day before a, in UTC, naive timestamps throughout
    -- (no session time zone in the arithmetic). b when it is earlier and
    -- reads as that wall time too.
    SELECT CASE
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

DO $$
DECLARE
    tz text := (SELECT time_zone FROM center);
    first_month date := (SELECT min(period) FROM ledger_entry);
    last_month date := (SELECT max(period) FROM ledger_entry);
    m date;
BEGIN
    IF tz IS NULL OR first_month IS NULL THEN
        RETURN;
    END IF;
    FOR m IN SELECT g::date FROM generate_series(first_month::timestamp, last_month::timestamp, interval '1 month') g
              WHERE ((g + interval '1 month') AT TIME ZONE tz)
                    <> hl_day_end((g + interval '1 month' - interval '1 day')::date, tz)
                AND EXISTS (SELECT 1 FROM ledger_entry e WHERE e.period = g::date) LOOP
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
