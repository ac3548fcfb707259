-- Closing a month is the database's procedure, and the seal covers what a
-- statement says (issue 13, items 4, 5 and 6).
--
-- * Only the close procedure closes: the billing role could `INSERT INTO
--   closed_period` by hand and skip every check of `close` (even close the
--   current month). Now an insert into closed_period *is* the procedure: a
--   trigger (with its owner's rights) checks that the month is over in the
--   billing time zone, that no earlier month with entries is open, and that
--   its storage is billed; issues the month's statements (numbered from the
--   one gapless sequence); and computes the entry count, total, currency,
--   closing time and seal itself, whatever the insert said. The billing
--   role may no longer insert statements.
-- * The center row cannot be deleted or truncated once anything is
--   recorded: the owner deleted it and re-applied the configuration with
--   another currency, and sealed August read EUR.
-- * Seal v2 (`sha256-chain-v2`) also covers the month's currency, who closed
--   it and when, and its statements (number, project, entries, total), after
--   the entries, beginning from the previous month's seal. Months sealed
--   with v1 keep it and are verified by it.
-- * `audit.seals` recomputes the chain in order from the first closed
--   month, each month from the *recomputed* seal of the one before: an
--   entry edited in a closed month breaks that month's seal and every later
--   one, and re-sealing one month breaks the next.

-- The center: never deleted or truncated once anything is recorded.
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
       AND EXISTS (SELECT 1 FROM ledger_entry) THEN
        RAISE EXCEPTION 'the currency and billing time zone cannot change once charges are posted'
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER center_guard ON center;
CREATE TRIGGER center_guard BEFORE UPDATE OR DELETE ON center
    FOR EACH ROW EXECUTE FUNCTION hl_center_guard();
ALTER TABLE center ENABLE ALWAYS TRIGGER center_guard;
CREATE TRIGGER center_no_truncate BEFORE TRUNCATE ON center
    FOR EACH STATEMENT EXECUTE FUNCTION hl_center_guard();
ALTER TABLE center ENABLE ALWAYS TRIGGER center_no_truncate;

-- Statements are issued before the month's row that seals them.
ALTER TABLE statement ALTER CONSTRAINT statement_period_fkey DEFERRABLE INITIALLY DEFERRED;

ALTER TABLE closed_period ADD COLUMN currency text CHECK (currency ~ '^[A-Z]{3}$');
ALTER TABLE closed_period DROP CONSTRAINT closed_period_seal_algorithm_check;
ALTER TABLE closed_period ADD CONSTRAINT closed_period_seal_algorithm_check
    CHECK (seal_algorithm IN ('sha256-chain-v1', 'sha256-chain-v2'));
ALTER TABLE closed_period ADD CONSTRAINT closed_period_v2_has_currency
    CHECK (seal_algorithm = 'sha256-chain-v1' OR currency IS NOT NULL);

-- The seal of a month (algorithm sha256-chain-v2): the chain over a header
-- (the month, the previous month's seal, the currency, who closed it and
-- when), then every entry of the month in posting order, then its
-- statements in number order.
CREATE FUNCTION hl_month_seal_v2(p date, previous bytea, currency text, closed_by text, closed_at timestamptz)
RETURNS bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT hl_seal_chain(t ORDER BY ord, id)
      FROM (SELECT 0 AS ord, 0::bigint AS id,
                   jsonb_build_array('hpc-ledger seal v2', to_char(p, 'YYYY-MM'), encode(previous, 'hex'), currency,
                                     closed_by, (extract(epoch FROM closed_at) * 1000000)::bigint)::text AS t
            UNION ALL
            SELECT 1, e.id, hl_entry_text(e) FROM ledger_entry e WHERE e.period = p
            UNION ALL
            SELECT 2, s.number, jsonb_build_array(s.number, s.project_id, s.entry_count, s.total)::text
              FROM statement s WHERE s.period = p) x
$$;
COMMENT ON FUNCTION hl_month_seal_v2(date, bytea, text, text, timestamptz) IS
    'The seal of a month (v2): sha256 chain over a header (month, previous seal, currency, closed by, closed at), the month''s entries in id order and its statements in number order.';

-- The close procedure: what an insert into closed_period does.
CREATE FUNCTION hl_close_month() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    c record;
    month_end timestamptz;
    open_month date;
    previous bytea;
BEGIN
    PERFORM pg_advisory_xact_lock(hl_period_lock_key());
    SELECT currency, time_zone INTO c FROM center;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no center configuration has been applied' USING ERRCODE = 'HL002';
    END IF;
    month_end := hl_day_end((NEW.period + interval '1 month' - interval '1 day')::date, c.time_zone);
    IF month_end > now() THEN
        RAISE EXCEPTION 'cannot close %: it is not over until % (%)', to_char(NEW.period, 'YYYY-MM'),
            to_char(month_end AT TIME ZONE c.time_zone, 'YYYY-MM-DD HH24:MI'), c.time_zone
            USING ERRCODE = 'HL002';
    END IF;
    SELECT min(e.period) INTO open_month
      FROM ledger_entry e
     WHERE e.period < NEW.period AND NOT EXISTS (SELECT 1 FROM closed_period x WHERE x.period = e.period);
    IF open_month IS NOT NULL THEN
        RAISE EXCEPTION 'cannot close %: % is still open', to_char(NEW.period, 'YYYY-MM'), to_char(open_month, 'YYYY-MM')
            USING ERRCODE = 'HL002';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.kind = 'storage' AND b.period = NEW.period) THEN
        RAISE EXCEPTION 'cannot close %: its storage has not been billed (hpc-ledger bill storage --month %)',
            to_char(NEW.period, 'YYYY-MM'), to_char(NEW.period, 'YYYY-MM')
            USING ERRCODE = 'HL002';
    END IF;
    INSERT INTO statement (period, project_id, number, entry_count, total)
    SELECT NEW.period, t.project_id,
           (SELECT coalesce(max(number), 0) FROM statement) + row_number() OVER (ORDER BY lower(p.code), p.id),
           t.n, t.total
      FROM (SELECT project_id, count(*) AS n, sum(amount) AS total FROM ledger_entry WHERE period = NEW.period
             GROUP BY project_id) t
      JOIN project p ON p.id = t.project_id;
    SELECT count(*), coalesce(sum(amount), 0) INTO NEW.entry_count, NEW.total
      FROM ledger_entry WHERE period = NEW.period;
    SELECT seal INTO previous FROM closed_period WHERE period = (NEW.period - interval '1 month')::date;
    NEW.closed_at := now();
    NEW.currency := c.currency;
    NEW.seal_algorithm := 'sha256-chain-v2';
    NEW.seal := hl_month_seal_v2(NEW.period, previous, NEW.currency, NEW.closed_by, NEW.closed_at);
    RETURN NEW;
END
$$;
-- After closed_period_in_order (months close in order): triggers of one
-- event fire in name order.
CREATE TRIGGER closed_period_seal BEFORE INSERT ON closed_period
    FOR EACH ROW EXECUTE FUNCTION hl_close_month();
ALTER TABLE closed_period ENABLE ALWAYS TRIGGER closed_period_seal;

-- Statements only by the close procedure.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        REVOKE INSERT ON statement FROM hpc_ledger_billing;
    END IF;
END
$$;

-- The seal of every closed month, recomputed in order: each month from the
-- recomputed seal of the month before it.
CREATE OR REPLACE VIEW audit.seals AS
WITH RECURSIVE ordered AS (
    SELECT cp.*, row_number() OVER (ORDER BY cp.period) AS n FROM closed_period cp
), chain AS (
    SELECT o.n, o.period,
           CASE o.seal_algorithm
               WHEN 'sha256-chain-v1' THEN hl_month_seal(o.period, NULL)
               ELSE hl_month_seal_v2(o.period, NULL, o.currency, o.closed_by, o.closed_at) END AS recomputed
      FROM ordered o WHERE o.n = 1
    UNION ALL
    SELECT o.n, o.period,
           CASE o.seal_algorithm
               WHEN 'sha256-chain-v1' THEN hl_month_seal(o.period, c.recomputed)
               ELSE hl_month_seal_v2(o.period, c.recomputed, o.currency, o.closed_by, o.closed_at) END
      FROM chain c JOIN ordered o ON o.n = c.n + 1
)
SELECT cp.period, cp.closed_at, cp.closed_by, cp.seal_algorithm, encode(cp.seal, 'hex') AS recorded_seal,
       encode(ch.recomputed, 'hex') AS recomputed_seal,
       cp.entry_count AS recorded_entries,
       (SELECT count(*) FROM ledger_entry e WHERE e.period = cp.period) AS entries,
       cp.total AS recorded_total,
       (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.period = cp.period) AS total,
       cp.currency
  FROM closed_period cp JOIN chain ch ON ch.period = cp.period;
COMMENT ON VIEW audit.seals IS
    'Each closed month: its recorded seal, entry count and total next to their recomputation; the chain is recomputed from the first closed month, each month from the recomputed seal before it.';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
