-- Closed months kept closed against writes made by hand (a review of
-- 2026-12-07, each reproduced as a login of the ingest or billing role):
--
-- 1. The guards that read what others committed (the entries' closed-month
--    check, the close, the close's order, a quota's billed months) read it
--    in the writer's snapshot. A transaction begun REPEATABLE READ before a
--    month closed could post into it after (an entry accepted into a sealed
--    month: its seal broken for good), close a month without an entry
--    committed meanwhile, or add a quota into a month billed meanwhile.
--    hpc-ledger's own writes are READ COMMITTED; a write to these tables in
--    another isolation is now refused (serialization_failure), as the
--    waiver, discount and class guards already did (migration 0010).
-- 2. A storage charge's segments (its TB-days, on its statement) could be
--    added to an entry of a closed month by the billing role; the seal does
--    not cover them. A segment is now refused in a closed month, as an
--    entry is.
-- 3. A storage billing run counted as the month's storage billed however it
--    came: a bare row inserted by hand, charging nothing, let the month
--    close with its storage never billable. The close now refuses while a
--    project with a quota above zero in force at a day's end of the month
--    has no storage charge in it (the audit's "missing storage charge"),
--    unless the month's storage was waived.
-- 4. The close refused a month while `job_intake` held posted jobs not yet
--    recorded only in hpc-ledger itself; an INSERT INTO closed_period by
--    hand skipped it. The database refuses it now.

CREATE FUNCTION hl_read_committed_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hl_require_read_committed('a write to ' || TG_TABLE_NAME);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION hl_read_committed_only() IS
    'Refuses a write in another isolation than READ COMMITTED: the table''s guards read what other transactions committed (migration 0057).';

CREATE TRIGGER ledger_entry_read_committed BEFORE INSERT ON ledger_entry
    FOR EACH STATEMENT EXECUTE FUNCTION hl_read_committed_only();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_read_committed;
CREATE TRIGGER closed_period_read_committed BEFORE INSERT ON closed_period
    FOR EACH STATEMENT EXECUTE FUNCTION hl_read_committed_only();
ALTER TABLE closed_period ENABLE ALWAYS TRIGGER closed_period_read_committed;
CREATE TRIGGER storage_quota_read_committed BEFORE INSERT ON storage_quota
    FOR EACH STATEMENT EXECUTE FUNCTION hl_read_committed_only();
ALTER TABLE storage_quota ENABLE ALWAYS TRIGGER storage_quota_read_committed;
CREATE TRIGGER storage_charge_segment_read_committed BEFORE INSERT ON storage_charge_segment
    FOR EACH STATEMENT EXECUTE FUNCTION hl_read_committed_only();
ALTER TABLE storage_charge_segment ENABLE ALWAYS TRIGGER storage_charge_segment_read_committed;
CREATE TRIGGER billing_run_read_committed BEFORE INSERT ON billing_run
    FOR EACH STATEMENT EXECUTE FUNCTION hl_read_committed_only();
ALTER TABLE billing_run ENABLE ALWAYS TRIGGER billing_run_read_committed;

-- 2. Segments only into open months, under the same lock as entries.
CREATE FUNCTION hl_segments_open_month() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    last_closed date;
    bad record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hl_period_lock_key());
    SELECT max(period) INTO last_closed FROM closed_period;
    IF last_closed IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT s.ledger_entry_id, e.period INTO bad
      FROM new_segments s JOIN ledger_entry e ON e.id = s.ledger_entry_id
     WHERE e.period <= last_closed
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'storage charge segments of ledger entry % would be added to %, which is closed',
            bad.ledger_entry_id, to_char(bad.period, 'YYYY-MM')
            USING ERRCODE = 'HL002';
    END IF;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION hl_segments_open_month() FROM PUBLIC;
CREATE TRIGGER storage_charge_segment_open_month AFTER INSERT ON storage_charge_segment
    REFERENCING NEW TABLE AS new_segments
    FOR EACH STATEMENT EXECUTE FUNCTION hl_segments_open_month();
ALTER TABLE storage_charge_segment ENABLE ALWAYS TRIGGER storage_charge_segment_open_month;

-- 3 and 4. Before the close's other checks and its seal (triggers fire in
-- name order: `checks` before `in_order` and `seal`).
CREATE FUNCTION hl_close_checks() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    waiting bigint;
    missing record;
BEGIN
    SELECT count(*) INTO waiting FROM job_intake;
    IF waiting > 0 THEN
        RAISE EXCEPTION 'cannot close %: job_intake holds % posted job(s) not recorded yet, which may have ended in it (close it once serve has recorded them; docs/slurm.md)',
            to_char(NEW.period, 'YYYY-MM'), waiting
            USING ERRCODE = 'HL002';
    END IF;
    IF EXISTS (SELECT 1 FROM billing_run b WHERE b.kind = 'storage' AND b.period = NEW.period) THEN
        -- A quota counts for a day when it is the one in force at the day's
        -- end (as the audit's "missing storage charge").
        SELECT p.code INTO missing
          FROM center c
          JOIN (SELECT project_id, quota_tb, effective_from,
                       lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                  FROM storage_quota) q ON q.quota_tb > 0
         CROSS JOIN LATERAL (SELECT greatest(hl_day_end((q.effective_from AT TIME ZONE c.time_zone)::date, c.time_zone),
                                             hl_day_end(NEW.period, c.time_zone)) AS first_end) f
          JOIN project p ON p.id = q.project_id
         WHERE f.first_end <= hl_day_end((NEW.period + interval '1 month' - interval '1 day')::date, c.time_zone)
           AND (q.until IS NULL OR f.first_end <= q.until)
           AND NOT EXISTS (SELECT 1 FROM ledger_entry e
                            WHERE e.kind = 'storage' AND e.period = NEW.period AND e.project_id = q.project_id)
         ORDER BY p.code
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'cannot close %: its storage billing charged nothing to project %, which had a quota above zero in it',
                to_char(NEW.period, 'YYYY-MM'), missing.code
                USING ERRCODE = 'HL002',
                      HINT = 'A storage run charges every project with a quota in force; a billing run without its charges (one inserted by hand) does not bill the month.';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION hl_close_checks() FROM PUBLIC;
CREATE TRIGGER closed_period_checks BEFORE INSERT ON closed_period
    FOR EACH ROW EXECUTE FUNCTION hl_close_checks();
ALTER TABLE closed_period ENABLE ALWAYS TRIGGER closed_period_checks;
