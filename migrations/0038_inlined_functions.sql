-- Functions PostgreSQL can inline again (issue 19, item 5): the same values,
-- computed without a call per row.
--
-- PostgreSQL inlines a one-line SQL function into the query that calls it
-- only when its body is no more volatile than the function is declared.
-- Three functions on the audit's, the seal's and the rollups' paths were
-- declared IMMUTABLE over a STABLE body, so each call went through the
-- SQL-function executor, row by row (about 2 µs a call, measured):
--
-- * hl_div_trunc_nonneg built its power of ten by text (`'1e' || -places`,
--   a STABLE concatenation): every version-2 job charge's exact amount in
--   the audit. Its new body truncates the same quotient and multiplies it
--   by 1 / 10^places (a division whose scale PostgreSQL sets from the
--   quotient's size, so the exact 10^-places for any places; a negative
--   power, `10 ^ -places`, is computed to 16 decimals only and is 0 from
--   17 places on), rounded to `places`, which changes no digit and gives
--   the result that scale: the same value and the same text as the old
--   body, checked on 400,000 quotients of 0 to 40 places.
-- * hl_entry_text, the seal's text of an entry, is STABLE in truth
--   (jsonb_build_array, to_char); declared so, it is inlined into the seal's
--   query. The text is the same expression, so every seal is unchanged.
-- * hl_draw_instant subtracts an interval from a timestamptz (STABLE);
--   declared so, it is inlined into the rollups' trigger and the audit's
--   draws. hl_draw_at, which calls it, is declared STABLE with it (an
--   IMMUTABLE function calling a STABLE one is not inlined either).
--
-- The seal's step, the transition function of the hl_seal_chain aggregate,
-- is called once per item and is never inlined (an aggregate calls its
-- transition function). In PL/pgSQL its one expression runs through
-- PL/pgSQL's cached simple-expression path instead of setting up the SQL
-- executor on every call. The same bytes in, the same digest out.
--
-- Measured on a `bench --keep` ledger of 1,274,200 entries (Intel Xeon,
-- PostgreSQL 15): the audit's findings (a count of them in psql) 17.2 s
-- -> 11.1 s; the seal of a
-- month of 145,420 entries and 10,000 statements 1.60 s -> 0.83 s, the
-- same seal.

CREATE OR REPLACE FUNCTION hl_div_trunc_nonneg(n numeric, d numeric, places integer) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- The quotient's digits times an exact 10^-places (rounding to `places`
    -- changes no digit; it gives the result that scale).
    SELECT round(div(n * 10::numeric ^ places, d) * (1::numeric / 10::numeric ^ places), places)
$$;

CREATE OR REPLACE FUNCTION hl_entry_text(e ledger_entry) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_array(e.id, (extract(epoch FROM e.posted_at) * 1000000)::bigint, to_char(e.period, 'YYYY-MM-DD'),
                             e.project_id, e.kind, e.metric, e.job_record_id, e.rate_card_id, e.storage_rate_id,
                             e.billing_run_id, e.corrects_id, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                             e.late, e.author, e.reason)::text
$$;

CREATE OR REPLACE FUNCTION hl_seal_step(state bytea, item text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN sha256(state || convert_to(item, 'UTF8'));
END
$$;

CREATE OR REPLACE FUNCTION hl_draw_instant(kind text, storage_rate bigint, period date,
                                           o_kind text, o_storage_rate bigint, o_period date,
                                           oo_kind text, oo_storage_rate bigint, oo_period date,
                                           record_end timestamptz, posted_at timestamptz, tz text)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN coalesce(oo_storage_rate, o_storage_rate, storage_rate) IS NOT NULL
             OR 'storage' IN (oo_kind, o_kind, kind)
            THEN hl_day_end((coalesce(oo_period, o_period, period) + interval '1 month' - interval '1 day')::date, tz)
                 - interval '1 microsecond'
        WHEN record_end IS NOT NULL THEN record_end
        ELSE posted_at
    END
$$;

CREATE OR REPLACE FUNCTION hl_draw_at(e ledger_entry, o ledger_entry, oo ledger_entry, record_end timestamptz, tz text)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT hl_draw_instant(e.kind, e.storage_rate_id, e.period, o.kind, o.storage_rate_id, o.period,
                           oo.kind, oo.storage_rate_id, oo.period, record_end, e.posted_at, tz)
$$;
