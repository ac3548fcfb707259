-- Storage billing: a quota change may not fall into a month whose storage has
-- already been billed (it would never be charged, or the bill would silently
-- differ from the quota history).

-- The advisory lock of storage billing: a billing run holds it exclusively,
-- a quota change shared, so a change is either in a month's bill or refused.
CREATE FUNCTION hl_storage_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 7523094288207667811::bigint $$;

CREATE FUNCTION hl_quota_after_billed_months() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    tz text;
    billed date;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hl_storage_lock_key());
    SELECT time_zone INTO tz FROM center;
    SELECT max(period) INTO billed FROM billing_run WHERE kind = 'storage';
    IF billed IS NOT NULL
       AND date_trunc('month', NEW.effective_from AT TIME ZONE coalesce(tz, 'UTC'))::date <= billed THEN
        RAISE EXCEPTION 'storage is billed through %: a quota change effective % would not be charged',
            to_char(billed, 'YYYY-MM'), NEW.effective_from
            USING ERRCODE = 'HL005',
                  HINT = 'Give a date after the billed months, or correct the billed months with an adjustment.';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER storage_quota_after_billed_months BEFORE INSERT ON storage_quota
    FOR EACH ROW EXECUTE FUNCTION hl_quota_after_billed_months();
ALTER TABLE storage_quota ENABLE ALWAYS TRIGGER storage_quota_after_billed_months;
