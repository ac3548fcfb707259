-- Closing a month in a ledger of years (issue 19, item 2): what a close
-- does besides sealing the month no longer grows with the ledger or with
-- the month's rollup rows. Seals, statements and rollups come out as
-- before (the same values; only how they are found changes).

-- The close procedure (migration 0023), with one change: whether an
-- earlier month with entries is open is answered from the months, not
-- from every earlier entry.
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
    -- The months with entries, one index probe each: the entries
    -- themselves are not read (reading every earlier entry took 94 ms at
    -- half a million entries, and grows with the ledger).
    WITH RECURSIVE months AS (
        SELECT (SELECT min(e.period) FROM ledger_entry e WHERE e.period < NEW.period) AS p
        UNION ALL
        SELECT (SELECT min(e.period) FROM ledger_entry e WHERE e.period > m.p AND e.period < NEW.period)
          FROM months m WHERE m.p IS NOT NULL)
    SELECT min(m.p) INTO open_month
      FROM months m
     WHERE m.p IS NOT NULL AND NOT EXISTS (SELECT 1 FROM closed_period x WHERE x.period = m.p);
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

-- A closed month's draws, one row per key (migration 0028): only the keys
-- with more than one row are folded. Deleting and writing again every row
-- of the month (most keys have one) was most of a close's time after the
-- seal: 0.9 of 2.1 s for a month of 48,000 entries, 0.3 s now.
CREATE OR REPLACE FUNCTION hl_ledger_draw_fold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WITH gone AS (
        DELETE FROM ledger_draw
         WHERE ctid = ANY (ARRAY(
                   SELECT unnest(array_agg(d.ctid))
                     FROM ledger_draw d WHERE d.period = NEW.period
                    GROUP BY d.project_id, d.cluster_id, d.day HAVING count(*) > 1))
        RETURNING *)
    INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
    SELECT project_id, cluster_id, period, day, min(first_at), max(last_at), sum(amount), sum(entries)
      FROM gone GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;

-- A closed month's usage sums, one row per key (migration 0032): likewise
-- only the keys with more than one row.
CREATE OR REPLACE FUNCTION hl_ledger_usage_fold() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WITH gone AS (
        DELETE FROM ledger_usage
         WHERE ctid = ANY (ARRAY(
                   SELECT unnest(array_agg(u.ctid))
                     FROM ledger_usage u WHERE u.period = NEW.period
                    GROUP BY u.project_id, u.kind, u.user_name, u.cluster_id, u.node_type_id, u.rate_card_id,
                             u.storage_rate_id
                   HAVING count(*) > 1))
        RETURNING *)
    INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                              storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries)
    SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
           sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), sum(entries)
      FROM gone GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
    RETURN NULL;
END
$$;
