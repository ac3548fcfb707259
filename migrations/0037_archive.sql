-- Archive (issue 19, item 3): a closed month's entries move out of the live
-- ledger into a file (`hpc-ledger archive --through M`), which holds
-- everything its seal is computed over, so `verify --archive` recomputes the
-- seal from the file alone.
--
-- What stays in the database: the month's `closed_period` row (its seal,
-- the link of the chain the next month's seal is computed from), its
-- statements' numbers and totals, the usage and draw rollups (so balances,
-- usage reports and budgets do not change), and the job records and runs
-- (the recorder's memory: a re-sent old job is still a replay, never a new
-- charge). What goes: the month's `ledger_entry` rows and their storage
-- segments.
--
-- The entries of a month are deleted only by hl_archive_months(), once the
-- month is recorded in `archived_period` with the file's SHA-256: the
-- append-only guard of `ledger_entry` and `storage_charge_segment` lets a
-- DELETE through only for a row of that month, inside that function.
-- UPDATE and TRUNCATE stay refused.

CREATE TABLE archived_period (
    period       date PRIMARY KEY REFERENCES closed_period (period),
    archived_at  timestamptz NOT NULL DEFAULT now(),
    archived_by  text NOT NULL CHECK (length(archived_by) BETWEEN 1 AND 200),
    -- The archive file's name (not its directory: files move) and digest.
    file_name    text NOT NULL CHECK (length(file_name) BETWEEN 1 AND 500),
    file_sha256  bytea NOT NULL CHECK (length(file_sha256) = 32),
    -- The month's seal, entry count and total as they were when the file
    -- was written and checked against them: the live chain goes on from
    -- this seal.
    seal         bytea NOT NULL,
    entry_count  bigint NOT NULL,
    total        numeric(18,2) NOT NULL
);
COMMENT ON TABLE archived_period IS
    'Closed months whose entries were moved to an archive file (hpc-ledger archive); verify --archive recomputes their seals from the files.';
CREATE TRIGGER archived_period_append_only BEFORE UPDATE OR DELETE ON archived_period
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER archived_period_no_truncate BEFORE TRUNCATE ON archived_period
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE archived_period ENABLE ALWAYS TRIGGER archived_period_append_only;
ALTER TABLE archived_period ENABLE ALWAYS TRIGGER archived_period_no_truncate;

-- The job records whose charges went to an archive: a supersede of one
-- cannot reverse them any more, so the recorder refuses it instead of
-- charging the job twice.
CREATE TABLE archived_charge (
    job_record_id bigint PRIMARY KEY REFERENCES job_record (id),
    period        date NOT NULL REFERENCES archived_period (period),
    -- The rate card of its job charge (audit --deep compares a record with
    -- the card's cores per node).
    rate_card_id  bigint
);
COMMENT ON TABLE archived_charge IS
    'Job records whose charges are in an archived month (the first such month).';
CREATE TRIGGER archived_charge_append_only BEFORE UPDATE OR DELETE ON archived_charge
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER archived_charge_no_truncate BEFORE TRUNCATE ON archived_charge
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE archived_charge ENABLE ALWAYS TRIGGER archived_charge_append_only;
ALTER TABLE archived_charge ENABLE ALWAYS TRIGGER archived_charge_no_truncate;

-- The rules (rate cards, storage rates, discounts) archived charges were
-- priced by, with the latest instant each priced among them: their guards
-- keep them frozen as if the charges were still live (a rule that priced
-- something never changes, and never ends before what it priced).
CREATE TABLE archived_rule (
    kind           text NOT NULL CHECK (kind IN ('rate_card', 'storage_rate', 'discount')),
    id             bigint NOT NULL,
    period         date NOT NULL REFERENCES archived_period (period),
    last_priced_at timestamptz NOT NULL,
    PRIMARY KEY (kind, id, period)
);
COMMENT ON TABLE archived_rule IS
    'Rate cards, storage rates and discounts that priced charges of an archived month, and the latest instant they priced there.';
CREATE TRIGGER archived_rule_append_only BEFORE UPDATE OR DELETE ON archived_rule
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER archived_rule_no_truncate BEFORE TRUNCATE ON archived_rule
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE archived_rule ENABLE ALWAYS TRIGGER archived_rule_append_only;
ALTER TABLE archived_rule ENABLE ALWAYS TRIGGER archived_rule_no_truncate;

-- The append-only guard of the ledger's entries and storage segments: as
-- hl_refuse_change(), except a DELETE by hl_archive_months() of a row of
-- the month it is deleting: the delete must come from that function (the
-- call stack's third line, after this trigger and the DELETE, names it:
-- its signature, which is not translated), for the month it names,
-- recorded as archived. A guard against mistakes: the owner can still
-- disable it, which the audit reports.
CREATE FUNCTION hl_ledger_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p date;
    stack text;
BEGIN
    IF TG_OP = 'DELETE' AND coalesce(current_setting('hl.archiving', true), '') <> '' THEN
        GET DIAGNOSTICS stack = PG_CONTEXT;
        IF position(' hl_archive_months(date[],text,text[],bytea[]) ' IN split_part(stack, E'\n', 3)) = 0 THEN
            RAISE EXCEPTION '% is append-only: DELETE is refused outside hl_archive_months()', TG_TABLE_NAME
                USING ERRCODE = 'HL001';
        END IF;
        IF TG_TABLE_NAME = 'ledger_entry' THEN
            p := OLD.period;
        ELSE
            SELECT e.period INTO p FROM ledger_entry e WHERE e.id = OLD.ledger_entry_id;
        END IF;
        IF to_char(p, 'YYYY-MM') = current_setting('hl.archiving', true)
           AND EXISTS (SELECT 1 FROM archived_period a WHERE a.period = p) THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION '% is append-only: % is refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'HL001',
              HINT = 'Corrections are new rows (a reversal, a refund, an adjustment, a new dated row).';
END
$$;

DROP TRIGGER ledger_entry_append_only ON ledger_entry;
CREATE TRIGGER ledger_entry_append_only BEFORE UPDATE OR DELETE ON ledger_entry
    FOR EACH ROW EXECUTE FUNCTION hl_ledger_refuse_change();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_append_only;
DROP TRIGGER storage_charge_segment_append_only ON storage_charge_segment;
CREATE TRIGGER storage_charge_segment_append_only BEFORE UPDATE OR DELETE ON storage_charge_segment
    FOR EACH ROW EXECUTE FUNCTION hl_ledger_refuse_change();
ALTER TABLE storage_charge_segment ENABLE ALWAYS TRIGGER storage_charge_segment_append_only;

-- Archive closed months whose files have been written and checked, in one
-- transaction: record them, then delete their entries. Months are archived
-- in order, and a correction and the entry it corrects leave together: a
-- month whose entries a later month corrects, or whose corrections name an
-- entry of a later month (a supersede posts its reversals into the month
-- of the new record, which may come before the old one's), goes in one
-- call with that month, which is why this takes several. Each month's
-- deleted entries must be its recorded count.
CREATE FUNCTION hl_archive_months(months date[], by_whom text, file_names text[], file_sha256s bytea[])
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
        SELECT 'storage_rate', e.storage_rate_id, p, max((s.last_day + 1)::timestamp AT TIME ZONE c.time_zone)
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
REVOKE EXECUTE ON FUNCTION hl_archive_months(date[], text, text[], bytea[]) FROM PUBLIC;
COMMENT ON FUNCTION hl_archive_months(date[], text, text[], bytea[]) IS
    'Archive closed months in order: record each with its file''s digest, then delete their entries (the schema''s owner only).';

-- One closed month's seal (0035): an archived month's is the seal recorded
-- when it was archived (its file is checked by verify --archive). A month
-- recorded as archived that still holds entries (an archived_period row
-- written by hand) is recomputed from them like any other.
CREATE OR REPLACE VIEW audit.month_seals AS
SELECT cp.period, cp.closed_at, cp.closed_by, cp.seal_algorithm, encode(cp.seal, 'hex') AS recorded_seal,
       encode(CASE WHEN ap.period IS NOT NULL THEN ap.seal
                   WHEN cp.seal_algorithm = 'sha256-chain-v1' THEN hl_month_seal(cp.period, b.seal)
                   ELSE hl_month_seal_v2(cp.period, b.seal, cp.currency, cp.closed_by, cp.closed_at) END, 'hex')
           AS recomputed_seal,
       cp.entry_count AS recorded_entries,
       CASE WHEN ap.period IS NOT NULL THEN ap.entry_count
            ELSE (SELECT count(*) FROM ledger_entry e WHERE e.period = cp.period) END AS entries,
       cp.total AS recorded_total,
       CASE WHEN ap.period IS NOT NULL THEN ap.total
            ELSE (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.period = cp.period) END AS total,
       cp.currency,
       ap.file_name AS archived_to
  FROM closed_period cp
  LEFT JOIN archived_period ap
         ON ap.period = cp.period AND NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.period = cp.period)
  LEFT JOIN LATERAL (SELECT p.seal FROM closed_period p WHERE p.period < cp.period
                      ORDER BY p.period DESC LIMIT 1) b ON true;
COMMENT ON VIEW audit.month_seals IS
    'Each closed month: its recorded seal, entry count and total next to their recomputation from its entries and the recorded seal of the month before it; an archived month, next to what was recorded when it was archived (archived_to names its file).';

-- The chain (0018): an archived month's link is the seal recorded when it
-- was archived, and the next month is recomputed from it (a month that
-- still holds entries is recomputed, as above).
CREATE OR REPLACE VIEW audit.seals AS
WITH RECURSIVE ordered AS (
    SELECT cp.*, ap.seal AS archived_seal, row_number() OVER (ORDER BY cp.period) AS n
      FROM closed_period cp
      LEFT JOIN archived_period ap
             ON ap.period = cp.period AND NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.period = cp.period)
), chain AS (
    SELECT o.n, o.period,
           CASE WHEN o.archived_seal IS NOT NULL THEN o.archived_seal
                WHEN o.seal_algorithm = 'sha256-chain-v1' THEN hl_month_seal(o.period, NULL)
                ELSE hl_month_seal_v2(o.period, NULL, o.currency, o.closed_by, o.closed_at) END AS recomputed
      FROM ordered o WHERE o.n = 1
    UNION ALL
    SELECT o.n, o.period,
           CASE WHEN o.archived_seal IS NOT NULL THEN o.archived_seal
                WHEN o.seal_algorithm = 'sha256-chain-v1' THEN hl_month_seal(o.period, c.recomputed)
                ELSE hl_month_seal_v2(o.period, c.recomputed, o.currency, o.closed_by, o.closed_at) END
      FROM chain c JOIN ordered o ON o.n = c.n + 1
)
SELECT cp.period, cp.closed_at, cp.closed_by, cp.seal_algorithm, encode(cp.seal, 'hex') AS recorded_seal,
       encode(ch.recomputed, 'hex') AS recomputed_seal,
       cp.entry_count AS recorded_entries,
       coalesce(ap.entry_count, (SELECT count(*) FROM ledger_entry e WHERE e.period = cp.period)) AS entries,
       cp.total AS recorded_total,
       coalesce(ap.total, (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.period = cp.period)) AS total,
       cp.currency,
       ap.file_name AS archived_to
  FROM closed_period cp JOIN chain ch ON ch.period = cp.period
  LEFT JOIN archived_period ap
         ON ap.period = cp.period AND NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.period = cp.period);
COMMENT ON VIEW audit.seals IS
    'Each closed month: its recorded seal, entry count and total next to their recomputation; the chain is recomputed from the first closed month, each month from the recomputed seal before it; an archived month''s link is the seal recorded when it was archived (archived_to names its file).';

-- audit.charge_discrepancies (0035), without three findings an archive
-- makes by design: a job record whose charges went to an archive has no
-- charge in the live ledger (archived_charge names it), and an archived
-- month has neither its storage charges nor the entries its statements
-- add up to. Everything else is unchanged.
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
   AND NOT EXISTS (SELECT 1 FROM archived_charge ac WHERE ac.job_record_id = r.id)
   AND (coalesce(g.core_hours, 0) <> 1 OR coalesce(g.gpu_hours, 0) <> CASE WHEN r.gpus > 0 THEN 1 ELSE 0 END)
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
                       SELECT hl_day_end((e.period + interval '1 month' - interval '1 day')::date,
                                         (SELECT time_zone FROM center)) - interval '1 microsecond' AS at) pa
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

-- Every finding (0032), without what an archive leaves behind by design:
-- an archived month's draws and usage sums are kept while its entries are
-- not, and its journal can no longer be derived again from them (the file
-- holds its entries; verify --archive checks it).
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
 WHERE NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = u.period);

-- hl_refresh_statistics (0033) also analyzes the archive's tables, which
-- an archive fills with a row per job record it takes charges of. Measured
-- with `bench --scale` (532,000 entries, 484,000 of them archived): the
-- audit's check that every charging record has its charge, planned before
-- archived_charge was ever analyzed, took 146 s; analyzed, 1.4 s.
CREATE OR REPLACE FUNCTION hl_refresh_statistics(tables text[] DEFAULT ARRAY[]::text[],
                                                 written bigint[] DEFAULT ARRAY[]::bigint[]) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t text;
    done text[] := ARRAY[]::text[];
    bulk constant text[] := ARRAY['ledger_entry', 'storage_charge_segment', 'billing_run', 'job', 'job_record',
                                  'storage_quota', 'project', 'statement', 'closed_period', 'rejected_record',
                                  'ledger_draw', 'ledger_usage', 'archived_charge', 'archived_period'];
BEGIN
    FOR t IN
        SELECT s.relname::text
          FROM pg_stat_user_tables s
          JOIN pg_class c ON c.oid = s.relid
          LEFT JOIN LATERAL (SELECT sum(w.n) AS n
                               FROM unnest(tables, written) AS w(name, n)
                              WHERE w.name = s.relname) mine ON true
         WHERE s.schemaname = 'public'
           AND s.relname = ANY (bulk)
           AND s.n_mod_since_analyze + coalesce(mine.n, 0) > 50 + 0.1 * greatest(c.reltuples, 0)
         ORDER BY s.relname
    LOOP
        EXECUTE format('ANALYZE %I', t);
        done := done || t;
    END LOOP;
    RETURN done;
END
$$;

-- The instant the last archived month ended (in the billing time zone);
-- NULL while nothing is archived. Rules may not newly cover the time
-- before it (a class change, a discount).
CREATE FUNCTION hl_archived_until() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT hl_day_end((max(a.period) + interval '1 month' - interval '1 day')::date, (SELECT time_zone FROM center))
      FROM archived_period a
$$;

-- The guards of rate cards, storage rates and discounts (0026, 0010): a
-- rule that priced an archived charge stays as frozen as one that priced a
-- live one (archived_rule).
CREATE OR REPLACE FUNCTION hl_rate_card_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE rate_card_id = OLD.id)
       AND NOT EXISTS (SELECT 1 FROM archived_rule a WHERE a.kind = 'rate_card' AND a.id = OLD.id) THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE'
       OR (NEW.cluster_id, NEW.node_type_id, NEW.rate_class_id, NEW.valid_from, NEW.core_hour_price,
           NEW.gpu_hour_price, NEW.memory_per_core_bytes, NEW.cores_per_node)
          IS DISTINCT FROM
          (OLD.cluster_id, OLD.node_type_id, OLD.rate_class_id, OLD.valid_from, OLD.core_hour_price,
           OLD.gpu_hour_price, OLD.memory_per_core_bytes, OLD.cores_per_node) THEN
        RAISE EXCEPTION 'rate card % has priced charges and cannot be changed or removed', OLD.id
            USING ERRCODE = 'HL004', HINT = 'Add a new dated rate card instead.';
    END IF;
    IF NEW.valid_until IS NOT NULL AND EXISTS (
        SELECT 1 FROM ledger_entry e
          JOIN job_record r ON r.id = e.job_record_id
          JOIN job j ON j.id = r.job_id
         WHERE e.rate_card_id = OLD.id AND coalesce(j.submitted_at, j.started_at) >= NEW.valid_until)
       OR EXISTS (SELECT 1 FROM archived_rule a
                   WHERE a.kind = 'rate_card' AND a.id = OLD.id AND a.last_priced_at >= NEW.valid_until) THEN
        RAISE EXCEPTION 'rate card % priced jobs submitted after %; it cannot end before them', OLD.id, NEW.valid_until
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
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
           AND ((s.last_day + 1)::timestamp AT TIME ZONE c.time_zone) > NEW.valid_until)
       OR EXISTS (SELECT 1 FROM archived_rule a
                   WHERE a.kind = 'storage_rate' AND a.id = OLD.id AND a.last_priced_at > NEW.valid_until) THEN
        RAISE EXCEPTION 'storage rate % priced days after %; it cannot end before them', OLD.id, NEW.valid_until
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION hl_discount_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    IF TG_OP <> 'INSERT' AND (EXISTS (SELECT 1 FROM ledger_entry WHERE discount_id = OLD.id)
                              OR EXISTS (SELECT 1 FROM archived_rule a WHERE a.kind = 'discount' AND a.id = OLD.id)) THEN
        IF TG_OP = 'DELETE'
           OR (NEW.id, NEW.project_id, NEW.rate_class_id, NEW.percent, NEW.valid_from, NEW.reason)
              IS DISTINCT FROM (OLD.id, OLD.project_id, OLD.rate_class_id, OLD.percent, OLD.valid_from, OLD.reason) THEN
            RAISE EXCEPTION 'discount % has discounted charges and cannot be changed or removed', OLD.id
                USING ERRCODE = 'HL004', HINT = 'End it (until) and add a new dated discount instead.';
        END IF;
        IF NEW.valid_until IS NOT NULL AND EXISTS (
            SELECT 1 FROM ledger_entry l JOIN ledger_entry c ON c.id = l.corrects_id
             WHERE l.discount_id = OLD.id AND hl_charge_priced_at(c) >= NEW.valid_until)
           OR EXISTS (SELECT 1 FROM archived_rule a
                       WHERE a.kind = 'discount' AND a.id = OLD.id AND a.last_priced_at >= NEW.valid_until) THEN
            RAISE EXCEPTION 'discount % discounted charges priced after %; it cannot end before them', OLD.id,
                NEW.valid_until USING ERRCODE = 'HL004';
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    -- Serialised with every posting, whoever writes (config apply holds it already).
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    PERFORM hl_require_read_committed('recording a discount');
    IF TG_OP = 'INSERT' OR (NEW.project_id, NEW.rate_class_id, NEW.valid_from)
                           IS DISTINCT FROM (OLD.project_id, OLD.rate_class_id, OLD.valid_from) THEN
        bad := hl_discount_covers_posted(NEW, NEW.valid_from, NEW.valid_until);
    ELSIF OLD.valid_until IS NOT NULL AND (NEW.valid_until IS NULL OR NEW.valid_until > OLD.valid_until) THEN
        bad := hl_discount_covers_posted(NEW, OLD.valid_until, NEW.valid_until);
    END IF;
    -- Charges of archived months are gone from the ledger, not from the
    -- past: no discount may newly cover the time they were priced in.
    IF (TG_OP = 'INSERT' OR (NEW.project_id, NEW.rate_class_id, NEW.valid_from)
                            IS DISTINCT FROM (OLD.project_id, OLD.rate_class_id, OLD.valid_from))
       AND NEW.valid_from < hl_archived_until()
       OR (TG_OP = 'UPDATE' AND OLD.valid_until < hl_archived_until()
           AND (NEW.valid_until IS NULL OR NEW.valid_until > OLD.valid_until)) THEN
        RAISE EXCEPTION 'the discount of % %% from % would cover archived months (charges priced before %)',
            NEW.percent, NEW.valid_from, hl_archived_until()
            USING ERRCODE = 'HL004',
                  HINT = 'A rule change never re-prices a past charge: start the discount after the archived months.';
    END IF;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'the discount of % %% from % would cover ledger entry %, posted before it',
            NEW.percent, NEW.valid_from, bad
            USING ERRCODE = 'HL004',
                  HINT = 'A rule change never re-prices a past charge: start the discount after the charges already posted, and credit those with hpc-ledger adjust.';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION hl_rate_keep_referenced() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    PERFORM hl_require_read_committed(format('removing or renumbering %s %s', TG_TABLE_NAME, OLD.id));
    IF (TG_TABLE_NAME = 'rate_card' AND EXISTS (SELECT 1 FROM ledger_entry WHERE rate_card_id = OLD.id))
       OR (TG_TABLE_NAME = 'storage_rate' AND EXISTS (SELECT 1 FROM ledger_entry WHERE storage_rate_id = OLD.id))
       OR EXISTS (SELECT 1 FROM archived_rule a WHERE a.kind = TG_TABLE_NAME AND a.id = OLD.id) THEN
        RAISE EXCEPTION '% % has priced charges and cannot be removed or renumbered', TG_TABLE_NAME, OLD.id
            USING ERRCODE = 'HL004', HINT = 'Add a new dated row instead.';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;

-- Every job record for `audit --deep` (0020), and the month its charges
-- were archived in: their rate card (its cores per node) is found through
-- archived_charge, and their charge is in the archive, not missing.
CREATE OR REPLACE VIEW audit.job_records AS
SELECT r.id AS record_id, r.job_id AS run_id, r.kind, r.revision,
       c.name AS cluster, coalesce(c.time_zone, ce.time_zone) AS time_zone,
       j.scheduler_job_id, j.array_index, j.submitted_at,
       r.started_at, r.ended_at, j.started_at AS run_started_at, j.cluster_id = r.cluster_id AS run_cluster_holds,
       p.code AS project, r.queue, r.nodes, r.cores, r.memory_bytes, r.gpus,
       r.charge_fingerprint, r.content_fingerprint,
       r.source_format, r.source_ref, r.raw, r.raw_bytes, r.read_options, r.recorded_at,
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
       (SELECT ac.period FROM archived_charge ac WHERE ac.job_record_id = r.id) AS archived_in
  FROM job_record r
  JOIN job j ON j.id = r.job_id
  JOIN cluster c ON c.id = r.cluster_id
  JOIN project p ON p.id = r.project_id
  LEFT JOIN center ce ON true;

-- A class change (0026) may not start inside the archived months either,
-- and the reference tables stay untruncatable once a month is closed
-- (0010), whatever was archived since.
CREATE OR REPLACE FUNCTION hl_project_class_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    -- Serialised with every posting, whoever writes (config apply holds it already).
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    PERFORM hl_require_read_committed(format('changing the class of project %s', NEW.project_id));
    IF NEW.effective_from < hl_archived_until() THEN
        RAISE EXCEPTION 'project % cannot change class from %: its charges priced before % are archived',
            (SELECT code FROM project WHERE id = NEW.project_id), NEW.effective_from, hl_archived_until()
            USING ERRCODE = 'HL004',
                  HINT = 'A rule change never re-prices a past charge: start the change after the archived months.';
    END IF;
    SELECT e.id INTO bad
      FROM ledger_entry e
     WHERE e.project_id = NEW.project_id AND e.kind IN ('job', 'storage')
       AND e.period >= date_trunc('month', NEW.effective_from AT TIME ZONE (SELECT time_zone FROM center))::date
                       - interval '1 month'
       AND hl_charge_priced_at(e) >= NEW.effective_from
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'project % cannot change class from %: ledger entry % was priced at or after that under the class it had then',
            (SELECT code FROM project WHERE id = NEW.project_id), NEW.effective_from, bad
            USING ERRCODE = 'HL004',
                  HINT = 'A rule change never re-prices a past charge: start the change later, and credit past charges with hpc-ledger adjust if they should have cost less.';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION hl_refuse_truncate_when_recorded() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM ledger_entry) OR EXISTS (SELECT 1 FROM closed_period) THEN
        RAISE EXCEPTION '% is referenced by recorded charges: TRUNCATE is refused', TG_TABLE_NAME
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NULL;
END
$$;

-- The center guard (0018): the currency and time zone also stay once a
-- month is closed, whose entries may since have been archived.
CREATE OR REPLACE FUNCTION hl_center_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
        IF EXISTS (SELECT 1 FROM ledger_entry) OR EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM closed_period) THEN
            RAISE EXCEPTION 'the center cannot be removed once anything is recorded (its currency and time zone priced and sealed it)'
                USING ERRCODE = 'HL004';
        END IF;
        RETURN OLD;
    END IF;
    IF (NEW.currency, NEW.time_zone) IS DISTINCT FROM (OLD.currency, OLD.time_zone)
       AND (EXISTS (SELECT 1 FROM ledger_entry) OR EXISTS (SELECT 1 FROM closed_period)) THEN
        RAISE EXCEPTION 'the currency and billing time zone cannot change once charges are posted'
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;

-- What `verify --archive` compares a file with, for every closed month (the
-- auditor reads the audit schema, not the tables).
CREATE VIEW audit.archives AS
SELECT cp.period, encode(cp.seal, 'hex') AS recorded_seal, cp.seal_algorithm, cp.entry_count AS recorded_entries,
       cp.total AS recorded_total, cp.currency, cp.closed_by, cp.closed_at,
       encode(b.seal, 'hex') AS previous_seal,
       ap.file_name AS archived_to, encode(ap.file_sha256, 'hex') AS file_sha256, ap.archived_at, ap.archived_by,
       encode(ap.seal, 'hex') AS archived_seal, ap.entry_count AS archived_entries, ap.total AS archived_total
  FROM closed_period cp
  LEFT JOIN closed_period b ON b.period = (cp.period - interval '1 month')::date
  LEFT JOIN archived_period ap ON ap.period = cp.period;
COMMENT ON VIEW audit.archives IS
    'Every closed month with its recorded seal, count and total, the seal of the month before it, and where and how it was archived (verify --archive compares each file with this).';

-- The recorder reads which records' charges are archived (a supersede of
-- one is refused); billing reads everything (0007); the auditor reads the
-- audit schema.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON archived_period, archived_charge, archived_rule TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON archived_period, archived_charge, archived_rule TO hpc_ledger_billing';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
