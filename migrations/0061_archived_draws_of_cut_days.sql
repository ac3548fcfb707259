-- Balances keep the draws of archived days a budget window cuts
-- (docs/retention.md, docs/budgets.md; a defect found 2026-12-07).
--
-- A balance sums `ledger_draw`'s rows, one per project, posting month, day
-- and cluster, and reads a day's draws again from its entries
-- (`hl_entry_draws`) when a boundary of its window falls among them: the
-- start of an allocation (a transfer in at 14:23), or of a cluster's pool.
-- An archive (migration 0037) deletes a month's entries, so such a day of
-- an archived month read nothing again, and the balance lost that day's
-- draws on the window's side: it showed money the project had spent.
--
-- The archive now keeps, before it deletes a month's entries, the draws
-- (project, posting month, day, cluster, instant, amount; summed per
-- instant) of every day on which an allocation of that project begins or
-- ends (`archived_draw`), and a balance reads a cut day of an archived
-- month from them. A day that no allocation of the project began or ended
-- on when its month was archived has none kept: an allocation made later to
-- begin or end inside such a day is refused (below; at a day's start it is
-- whole), and `balance --at` an instant inside an archived month still cuts
-- a day without its draws (documented). Months archived before this
-- migration keep none (their entries are gone).

CREATE TABLE archived_draw (
    project_id bigint NOT NULL REFERENCES project (id),
    period     date NOT NULL REFERENCES archived_period (period),
    day        date NOT NULL,
    cluster_id bigint REFERENCES cluster (id),
    draw       timestamptz NOT NULL,
    amount     numeric NOT NULL
);
CREATE INDEX archived_draw_project ON archived_draw (project_id, period, day);
COMMENT ON TABLE archived_draw IS
    'Draws of an archived month on a day an allocation of the project began or ended when it was archived, summed per instant: a balance whose window a boundary cuts on that day reads them instead of the entries (migration 0061).';
CREATE TRIGGER archived_draw_append_only BEFORE UPDATE OR DELETE ON archived_draw
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER archived_draw_no_truncate BEFORE TRUNCATE ON archived_draw
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE archived_draw ENABLE ALWAYS TRIGGER archived_draw_append_only;
ALTER TABLE archived_draw ENABLE ALWAYS TRIGGER archived_draw_no_truncate;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON archived_draw TO hpc_ledger_auditor';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON archived_draw TO hpc_ledger_billing';
    END IF;
END
$$;

-- The archive, as migration 0052's, keeping those draws before it deletes
-- each month's entries.
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
    -- The draws of the days an allocation of the project begins or ends on
    -- (migration 0061): a balance cut there reads them. Every month's
    -- before any is deleted: a correction's draw is its original's, which
    -- may be in another month of the call.
    INSERT INTO archived_draw (project_id, period, day, cluster_id, draw, amount)
    SELECT b.project_id, m.archived, x.day, x.cluster_id, x.draw, sum(x.amount)
      FROM unnest(months) AS m(archived)
     CROSS JOIN (SELECT DISTINCT al.project_id FROM allocation al) b
     CROSS JOIN LATERAL hl_entry_draws(b.project_id, m.archived) x
     WHERE x.day IN (SELECT (t.at AT TIME ZONE c.time_zone)::date
                       FROM allocation al CROSS JOIN center c
                      CROSS JOIN LATERAL (VALUES (al.valid_from), (al.valid_until)) t(at)
                      WHERE al.project_id = b.project_id AND t.at IS NOT NULL)
     GROUP BY b.project_id, m.archived, x.day, x.cluster_id, x.draw;
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


-- A cut day of an archived month is read from the draws the archive kept
-- (as migration 0028's, with PARALLEL SAFE of 0039).
CREATE OR REPLACE FUNCTION hl_pool_drawn(project bigint, pool bigint, from_ timestamptz, to_ timestamptz) RETURNS numeric
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH c AS (SELECT time_zone FROM center),
    keys AS (
        SELECT d.period, d.day, d.cluster_id, min(d.first_at) AS first_at, max(d.last_at) AS last_at,
               sum(d.amount) AS amount
          FROM ledger_draw d CROSS JOIN c
         WHERE d.project_id = project
           AND d.day BETWEEN (from_ AT TIME ZONE c.time_zone)::date AND (to_ AT TIME ZONE c.time_zone)::date
           AND (pool IS NULL OR d.cluster_id = pool)
         GROUP BY 1, 2, 3),
    starts AS (
        SELECT k.cluster_id, hl_pool_start(project, k.cluster_id) AS start
          FROM (SELECT DISTINCT cluster_id FROM keys WHERE cluster_id IS NOT NULL) k),
    marked AS (
        SELECT k.*, s.start,
               -- a boundary among its draws: the window's start, just after its end, the pool's start
               (k.first_at < from_ AND from_ <= k.last_at)
               OR (k.first_at <= to_ AND to_ < k.last_at)
               OR (s.start IS NOT NULL AND k.first_at < s.start AND s.start <= k.last_at) AS cut
          FROM keys k LEFT JOIN starts s ON s.cluster_id = k.cluster_id),
    whole AS (
        SELECT coalesce(sum(m.amount), 0) AS amount FROM marked m
         WHERE NOT m.cut AND m.first_at >= from_ AND m.last_at <= to_
           AND hl_in_pool(pool, m.cluster_id, m.start, m.first_at)),
    -- each posting month with a cut row read once
    again AS (
        SELECT coalesce(sum(x.amount), 0) AS amount
          FROM (SELECT DISTINCT m.period FROM marked m WHERE m.cut) p
         CROSS JOIN LATERAL (SELECT e.cluster_id, e.draw, e.day, e.amount FROM hl_entry_draws(project, p.period) e
                             UNION ALL
                             SELECT a.cluster_id, a.draw, a.day, a.amount FROM archived_draw a
                              WHERE a.project_id = project AND a.period = p.period) x
          JOIN marked m ON m.cut AND m.period = p.period AND m.day = x.day
                       AND m.cluster_id IS NOT DISTINCT FROM x.cluster_id
         WHERE x.draw >= from_ AND x.draw <= to_
           AND hl_in_pool(pool, x.cluster_id, m.start, x.draw))
    SELECT whole.amount + again.amount FROM whole, again
$$;


-- An allocation (a grant, a transfer in) whose window would begin or end
-- inside a day whose draws an archived month may hold is refused: the
-- archive kept no draws of that day unless an allocation began or ended on
-- it then. As migration 0028's, with that check.
CREATE OR REPLACE FUNCTION hl_allocation_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    g allocation;
    o allocation;
    taken numeric;
    tz text;
    last_archived date;
    boundary timestamptz;
BEGIN
    IF NEW.kind IN ('reduce', 'transfer_out') THEN
        SELECT * INTO g FROM allocation WHERE id = NEW.grant_id FOR UPDATE;
        IF NOT FOUND OR g.kind NOT IN ('grant', 'transfer_in') OR g.project_id <> NEW.project_id THEN
            RAISE EXCEPTION 'allocation entry % takes from %, which is not a grant of its project', NEW.kind, NEW.grant_id
                USING ERRCODE = 'HL005';
        END IF;
        NEW.valid_from := g.valid_from;
        NEW.valid_until := g.valid_until;
        NEW.cluster_id := g.cluster_id;
        SELECT coalesce(sum(amount), 0) INTO taken FROM allocation WHERE grant_id = g.id;
        IF g.amount + taken + NEW.amount < 0 THEN
            RAISE EXCEPTION 'grant % has % left; % cannot take %', g.id, g.amount + taken, NEW.kind, -NEW.amount
                USING ERRCODE = 'HL005';
        END IF;
    ELSIF NEW.kind = 'transfer_in' THEN
        SELECT * INTO o FROM allocation WHERE id = NEW.transfer_of;
        IF NOT FOUND OR o.kind <> 'transfer_out' OR o.project_id = NEW.project_id OR NEW.amount <> -o.amount
           OR (o.valid_until IS NOT NULL AND (NEW.valid_until IS NULL OR NEW.valid_until > o.valid_until)) THEN
            RAISE EXCEPTION 'transfer in % does not receive what transfer out % of another project gave, within its window',
                NEW.id, NEW.transfer_of USING ERRCODE = 'HL005';
        END IF;
        NEW.cluster_id := o.cluster_id;
    END IF;
    -- A window of its own (a grant, a transfer in) beginning or ending
    -- inside a day whose draws an archived month may hold: the archive kept
    -- the draws only of the days an allocation began or ended on then
    -- (migration 0061), and a balance cut there would lose that day's.
    IF NEW.kind IN ('grant', 'transfer_in') THEN
        SELECT c.time_zone INTO tz FROM center c;
        SELECT max(x.period) INTO last_archived FROM archived_period x;
        FOREACH boundary IN ARRAY ARRAY[NEW.valid_from, NEW.valid_until] LOOP
            IF boundary IS NOT NULL AND last_archived IS NOT NULL
               AND date_trunc('month', boundary AT TIME ZONE tz)::date <= last_archived
               AND boundary <> hl_day_end((boundary AT TIME ZONE tz)::date - 1, tz) THEN
                RAISE EXCEPTION 'allocation % begins or ends at %, inside a day of a month archived through % (its draws there were not kept): begin or end it at the start of a day',
                    NEW.kind, boundary, to_char(last_archived, 'YYYY-MM') USING ERRCODE = 'HL005';
            END IF;
        END LOOP;
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;

-- The audit: the draws the archive kept of a day are that day's draws, as
-- `ledger_draw` (which an archive keeps, and the audit checked against the
-- entries while they were live) holds them: the same sum, first and last
-- instant (a finding `draw`, "kept draws of DAY"). As migration 0037's
-- view, with that part added.
CREATE OR REPLACE VIEW audit.discrepancies AS
SELECT entry_id, kind, period, project, field, expected, recorded FROM audit.charge_discrepancies
UNION ALL
SELECT c.entry_id, 'reversal', c.period, c.project, 'cause',
       'a correction citing job record ' || coalesce(c.target_job_record::text, 'none')
           || ' with a reason, or a supersede of the same job run',
       'reverses ' || c.reverses_kind || ' entry ' || c.corrects_id || ', citing job record '
           || coalesce(c.cites_job_record::text, 'none')
  FROM audit.reversal_causes c
 WHERE c.cause IS NULL
UNION ALL
SELECT NULL, 'rejection', NULL, NULL, 'resolution',
       CASE WHEN r.status IN ('recorded', 'revised', 'superseded', 'replayed')
            THEN 'the job record its line became (or repeated, of job ' || coalesce(r.job_key, '?') || ')'
            ELSE 'who resolved it' END,
       'rejected record ' || r.id || ' ' || r.status
           || coalesce(', naming job record ' || r.resolved_record_id, ', naming no job record')
  FROM audit.rejections r
 WHERE r.resolution_holds = false
UNION ALL
-- A hold is released by a job of its own project.
SELECT NULL, 'hold', NULL, h.project, 'released by',
       'a job record of project ' || h.project || ' (' || h.cluster || '/' || h.job_id || ')',
       'job record ' || h.released_by_job_record || ' of project ' || h.released_by_project
  FROM audit.holds h
 WHERE h.released_by_job_record IS NOT NULL AND h.released_by_project IS DISTINCT FROM h.project
UNION ALL
-- A transfer out has its transfer in.
SELECT NULL, 'allocation', NULL, a.project, 'transfer',
       'a transfer in of ' || (-a.amount) || ' to another project',
       'transfer out ' || a.id || ' received by none'
  FROM audit.allocations a
 WHERE a.kind = 'transfer_out' AND a.transferred_as IS NULL
UNION ALL
-- The draws balances are summed from are those of the entries.
SELECT NULL, 'draw', d.period, d.project, 'drawn on ' || d.day || coalesce(' on ' || d.cluster, ''),
       coalesce(d.expected, 'nothing'), coalesce(d.recorded, 'nothing')
  FROM audit.draw_discrepancies d
 WHERE NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = d.period)
UNION ALL
-- A journal exported again is the journal finance was given (each month
-- derived once, however often it was exported).
SELECT NULL, 'journal', x.period, NULL, 'digest',
       'export ' || x.id || ' of ' || x.exported_at || ': ' || encode(x.digest, 'hex'),
       encode(a.digest, 'hex')
  FROM journal_export x
  JOIN (SELECT m.period, hl_journal_digest(m.period) AS digest
          FROM (SELECT DISTINCT period FROM journal_export) m) a ON a.period = x.period
 WHERE a.digest <> x.digest
   AND NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = x.period)
UNION ALL
-- The sums usage reports show are those of the entries.
SELECT NULL, 'usage', u.period, u.project, 'usage sums', coalesce(u.expected, 'nothing'),
       coalesce(u.recorded, 'nothing')
  FROM audit.usage_discrepancies u
 WHERE NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = u.period)
UNION ALL
-- The draws an archive kept of a day are that day's in ledger_draw (0061).
SELECT NULL, 'draw', k.period, (SELECT p.code FROM project p WHERE p.id = k.project_id),
       'kept draws of ' || k.day || coalesce(' on ' || (SELECT c.name FROM cluster c WHERE c.id = k.cluster_id), ''),
       coalesce(d.amount || ' from ' || d.first_at || ' to ' || d.last_at, 'nothing'),
       k.amount || ' from ' || k.first_at || ' to ' || k.last_at
  FROM (SELECT a.project_id, a.period, a.day, a.cluster_id, sum(a.amount) AS amount, min(a.draw) AS first_at,
               max(a.draw) AS last_at
          FROM archived_draw a GROUP BY 1, 2, 3, 4) k
 CROSS JOIN LATERAL (
       -- by the draws' index (project, day): only the kept days are read
       SELECT sum(l.amount) AS amount, min(l.first_at) AS first_at, max(l.last_at) AS last_at
         FROM ledger_draw l
        WHERE l.project_id = k.project_id AND l.day = k.day AND l.period = k.period
          AND l.cluster_id IS NOT DISTINCT FROM k.cluster_id) d
 WHERE d.amount IS DISTINCT FROM k.amount OR d.first_at IS DISTINCT FROM k.first_at
    OR d.last_at IS DISTINCT FROM k.last_at;
