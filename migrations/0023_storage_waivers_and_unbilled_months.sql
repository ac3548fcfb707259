-- Month end in one pass (issue 20, item 5): closing a month may not make
-- earlier storage unbillable, silently.
--
-- A ledger whose quotas start in January, whose first job is in July, could
-- close July with only July's storage billed: nothing can be posted into a
-- month before a closed one, so January to June were never billed and never
-- could be. Now closing a month is refused while an earlier month that is
-- not closed had a quota in force (above zero, at some day's end) and has
-- neither a storage billing run nor a recorded waiver. A waiver is the
-- billing office's decision not to bill a month's storage, with its reason,
-- who decided and when; it is kept like the ledger (never changed or
-- removed), counts as the month's storage run for closing that month, and
-- cannot be given for a month that is billed, closed, or not over.

CREATE TABLE storage_waiver (
    period    date PRIMARY KEY CHECK (period = date_trunc('month', period)::date),
    reason    text NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 500 AND reason !~ '[[:cntrl:]]'),
    author    text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    waived_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE storage_waiver IS
    'Months whose storage the billing office decided not to bill, with the reason: a waived month counts as billed for closing.';
CREATE TRIGGER storage_waiver_append_only BEFORE UPDATE OR DELETE ON storage_waiver
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER storage_waiver_no_truncate BEFORE TRUNCATE ON storage_waiver
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE storage_waiver ENABLE ALWAYS TRIGGER storage_waiver_append_only;
ALTER TABLE storage_waiver ENABLE ALWAYS TRIGGER storage_waiver_no_truncate;

-- A waiver: only for a month that is over, not closed and not billed; its
-- time is the database's. A billing run of a waived month is refused. Both
-- take the storage billing lock, so a waiver and a run of one month cannot
-- both land.
CREATE FUNCTION hl_storage_waiver_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    tz text;
    month_end timestamptz;
    run bigint;
BEGIN
    -- The checks below read what committed before the lock was granted: only
    -- at READ COMMITTED do they see a run or waiver committed meanwhile.
    PERFORM hl_require_read_committed(format('billing or waiving storage for %s', to_char(NEW.period, 'YYYY-MM')));
    PERFORM pg_advisory_xact_lock(hl_storage_lock_key());
    IF TG_TABLE_NAME = 'billing_run' THEN
        IF NEW.kind = 'storage' AND EXISTS (SELECT 1 FROM storage_waiver w WHERE w.period = NEW.period) THEN
            RAISE EXCEPTION 'storage for % was waived: it cannot be billed', to_char(NEW.period, 'YYYY-MM')
                USING ERRCODE = 'HL005';
        END IF;
        RETURN NEW;
    END IF;
    SELECT time_zone INTO tz FROM center;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no center configuration has been applied' USING ERRCODE = 'HL002';
    END IF;
    SELECT b.id INTO run FROM billing_run b WHERE b.kind = 'storage' AND b.period = NEW.period;
    IF FOUND THEN
        RAISE EXCEPTION 'storage for % is billed (run %): it cannot be waived; correct it with an adjustment',
            to_char(NEW.period, 'YYYY-MM'), run USING ERRCODE = 'HL005';
    END IF;
    IF EXISTS (SELECT 1 FROM closed_period c WHERE c.period >= NEW.period) THEN
        RAISE EXCEPTION 'storage for % cannot be waived: months through % are closed', to_char(NEW.period, 'YYYY-MM'),
            (SELECT to_char(max(period), 'YYYY-MM') FROM closed_period) USING ERRCODE = 'HL002';
    END IF;
    month_end := hl_day_end((NEW.period + interval '1 month' - interval '1 day')::date, tz);
    IF month_end > now() THEN
        RAISE EXCEPTION 'storage for % cannot be waived: the month is not over until %', to_char(NEW.period, 'YYYY-MM'),
            to_char(month_end AT TIME ZONE tz, 'YYYY-MM-DD HH24:MI') USING ERRCODE = 'HL002';
    END IF;
    NEW.waived_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER storage_waiver_check BEFORE INSERT ON storage_waiver
    FOR EACH ROW EXECUTE FUNCTION hl_storage_waiver_check();
ALTER TABLE storage_waiver ENABLE ALWAYS TRIGGER storage_waiver_check;
CREATE TRIGGER billing_run_not_waived BEFORE INSERT ON billing_run
    FOR EACH ROW EXECUTE FUNCTION hl_storage_waiver_check();
ALTER TABLE billing_run ENABLE ALWAYS TRIGGER billing_run_not_waived;

-- The months before `before`, after the last closed one, that had a quota
-- above zero in force at some day's end (the rule the audit's "missing
-- storage charge" uses) and whose storage was neither billed nor waived.
-- With the caller's rights: a role that may not read billing runs (ingest)
-- is refused, as it is refused closing.
CREATE FUNCTION hl_unbilled_storage_months(before date) RETURNS date[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(m.period ORDER BY m.period), '{}')
      FROM center c
     CROSS JOIN LATERAL (
           SELECT gs::date AS period
             FROM generate_series(
                    greatest((SELECT date_trunc('month', min(q.effective_from) AT TIME ZONE c.time_zone)
                                FROM storage_quota q WHERE q.quota_tb > 0),
                             (SELECT max(cp.period) + interval '1 month' FROM closed_period cp)),
                    before - interval '1 month', interval '1 month') gs) m
     WHERE NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.kind = 'storage' AND b.period = m.period)
       AND NOT EXISTS (SELECT 1 FROM storage_waiver w WHERE w.period = m.period)
       AND EXISTS (
           SELECT 1
             FROM (SELECT quota_tb, effective_from,
                          lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                     FROM storage_quota) q
            CROSS JOIN LATERAL (SELECT greatest(hl_day_end((q.effective_from AT TIME ZONE c.time_zone)::date, c.time_zone),
                                                hl_day_end(m.period, c.time_zone)) AS first_end) f
            WHERE q.quota_tb > 0
              AND f.first_end <= hl_day_end((m.period + interval '1 month' - interval '1 day')::date, c.time_zone)
              AND (q.until IS NULL OR f.first_end <= q.until))
$$;
COMMENT ON FUNCTION hl_unbilled_storage_months(date) IS
    'Months before the given one, after the last closed month, that had a storage quota in force and were neither billed nor waived: closing the given month would make them unbillable.';

-- The close procedure (migration 0018), with two changes: a waived month
-- counts as billed, and a close is refused while an earlier month's storage
-- was never billed (hl_unbilled_storage_months).
CREATE OR REPLACE FUNCTION hl_close_month() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    c record;
    month_end timestamptz;
    open_month date;
    unbilled date[];
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
    unbilled := hl_unbilled_storage_months(NEW.period);
    IF cardinality(unbilled) > 0 THEN
        RAISE EXCEPTION 'cannot close %: storage for % had quotas but was never billed, and closing % would make it unbillable',
            to_char(NEW.period, 'YYYY-MM'),
            CASE WHEN cardinality(unbilled) > 6
                 THEN (SELECT string_agg(to_char(u, 'YYYY-MM'), ', ' ORDER BY u) FROM unnest(unbilled[1:3]) u)
                      || ', … ' || to_char(unbilled[cardinality(unbilled)], 'YYYY-MM')
                      || ' (' || cardinality(unbilled) || ' months)'
                 ELSE (SELECT string_agg(to_char(u, 'YYYY-MM'), ', ' ORDER BY u) FROM unnest(unbilled) u) END,
            to_char(NEW.period, 'YYYY-MM')
            USING ERRCODE = 'HL002',
                  HINT = 'Bill them (hpc-ledger bill storage --through ' || to_char(NEW.period - interval '1 month', 'YYYY-MM')
                         || ') or waive a month with a reason (hpc-ledger bill storage --month M --waive REASON).';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.kind = 'storage' AND b.period = NEW.period)
       AND NOT EXISTS (SELECT 1 FROM storage_waiver w WHERE w.period = NEW.period) THEN
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

-- Auditors see every waiver (they may not read the tables).
CREATE VIEW audit.storage_waivers AS
SELECT w.period, w.reason, w.author, w.waived_at FROM storage_waiver w;
COMMENT ON VIEW audit.storage_waivers IS
    'Months whose storage was not billed by decision, with the reason, who decided and when.';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT, INSERT ON storage_waiver TO hpc_ledger_billing';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
