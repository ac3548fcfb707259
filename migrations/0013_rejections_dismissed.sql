-- Rejections that can be dismissed, and a trail that stays.
--
-- A rejected record that will never be charged (a junk file imported by
-- mistake, a test job, a record the center decides not to bill) is
-- dismissed with a reason and an author, and kept: dismissed records are not
-- retried by `import --retry-rejected`, not reopened when the same line is
-- read again, and shown by `rejected --all`. Rejected records are never
-- deleted, and a dismissal is never rewritten; a dismissed record that is
-- later recorded after all (the cause was fixed and it was imported again)
-- is resolved as recorded, keeping who dismissed it and why.

ALTER TABLE rejected_record
    ADD COLUMN resolved_by     text CHECK (length(resolved_by) BETWEEN 1 AND 256),
    ADD COLUMN resolution_note text CHECK (length(resolution_note) <= 4096);

ALTER TABLE rejected_record DROP CONSTRAINT rejected_record_resolution_check;
ALTER TABLE rejected_record ADD CONSTRAINT rejected_record_resolution_check
    CHECK (resolution IN ('recorded', 'replayed', 'revised', 'superseded', 'skipped', 'dismissed'));
ALTER TABLE rejected_record ADD CONSTRAINT rejected_record_dismissal CHECK (
    resolution IS DISTINCT FROM 'dismissed'
    OR (resolved_by IS NOT NULL AND length(btrim(coalesce(resolution_note, ''))) > 0)
);

CREATE FUNCTION hl_rejected_record_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'rejected record % is kept for the audit trail: dismiss it (hpc-ledger rejected dismiss) instead of deleting it', OLD.id
            USING ERRCODE = 'HL001';
    END IF;
    IF OLD.resolved_by IS NOT NULL AND (NEW.resolved_by IS DISTINCT FROM OLD.resolved_by
                                        OR NEW.resolution_note IS DISTINCT FROM OLD.resolution_note) THEN
        RAISE EXCEPTION 'rejected record % was dismissed by % (%): a dismissal is not rewritten', OLD.id, OLD.resolved_by, OLD.resolution_note
            USING ERRCODE = 'HL001';
    END IF;
    IF OLD.resolution = 'dismissed'
       AND NEW.resolution IS DISTINCT FROM 'dismissed'
       AND NOT coalesce(NEW.resolution = ANY (ARRAY['recorded', 'replayed', 'revised', 'superseded']), false) THEN
        RAISE EXCEPTION 'rejected record % is dismissed: it is not reopened', OLD.id
            USING ERRCODE = 'HL001';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER rejected_record_guard BEFORE UPDATE OR DELETE ON rejected_record
    FOR EACH ROW EXECUTE FUNCTION hl_rejected_record_guard();
ALTER TABLE rejected_record ENABLE ALWAYS TRIGGER rejected_record_guard;

CREATE FUNCTION hl_rejected_record_no_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rejected records are kept for the audit trail: TRUNCATE is refused'
        USING ERRCODE = 'HL001';
END;
$$;
CREATE TRIGGER rejected_record_no_truncate BEFORE TRUNCATE ON rejected_record
    FOR EACH STATEMENT EXECUTE FUNCTION hl_rejected_record_no_truncate();
ALTER TABLE rejected_record ENABLE ALWAYS TRIGGER rejected_record_no_truncate;
