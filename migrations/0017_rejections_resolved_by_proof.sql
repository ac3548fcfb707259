-- A rejection is resolved by proof, not by say-so (issue 13, item 3).
--
-- The ingest role could hide rejections: `UPDATE rejected_record SET
-- resolved_at = now(), resolution = 'recorded'` made them disappear, the
-- jobs were never charged, and nothing reported it. Now:
--
-- * a rejection resolved as `recorded`, `revised` or `superseded` names the
--   job record its line became (`resolved_record_id`): the record must be of
--   the same source format and hold the same bytes (its SHA-256 is the
--   rejection's);
-- * one resolved as `replayed` names the record its line repeated, of the
--   same job;
-- * `skipped` (read again, nothing to charge) and `dismissed` name who did
--   it (`resolved_by`), and a dismissal says why;
--
-- checked by the database on every insert and update, for every role.
-- `audit.rejections` lists every rejection with its age and status, and
-- `audit.discrepancies` reports a resolution that does not hold (one made
-- before this migration, or with the guard disabled by the tables' owner).

ALTER TABLE rejected_record ADD COLUMN resolved_record_id bigint REFERENCES job_record (id);

-- Resolutions made before this migration named no record: they cannot be
-- verified now, and are listed as unverified (not as findings). The set is
-- fixed here; no role but the owner can add to it.
CREATE TABLE rejected_record_unverified (id bigint PRIMARY KEY);
INSERT INTO rejected_record_unverified (id)
SELECT id FROM rejected_record WHERE resolution IN ('recorded', 'replayed', 'revised', 'superseded', 'skipped');

-- The `cluster/job[_index]` key of a job record's run, as the readers write
-- a rejection's job_key.
CREATE FUNCTION hl_record_job_key(record_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT lower(c.name) || '/' || j.scheduler_job_id || coalesce('_' || j.array_index, '')
      FROM job_record r JOIN job j ON j.id = r.job_id JOIN cluster c ON c.id = j.cluster_id
     WHERE r.id = record_id
$$;

-- Whether a resolution would hold for a rejection of this source format,
-- bytes and job: NULL when it is open, or was resolved before this
-- migration (unverifiable).
CREATE FUNCTION hl_resolution_check(rejection_id bigint, source_format text, raw_sha256 bytea, job_key text,
                                    resolution text, record_id bigint, resolved_by text, note text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT CASE
        WHEN resolution IS NULL THEN NULL
        WHEN record_id IS NULL AND resolved_by IS NULL
             AND EXISTS (SELECT 1 FROM rejected_record_unverified u WHERE u.id = rejection_id) THEN NULL
        WHEN resolution IN ('recorded', 'revised', 'superseded') THEN coalesce((
            SELECT r.source_format = hl_resolution_check.source_format
                   AND sha256(coalesce(r.raw_bytes, convert_to(r.raw, 'UTF8'))) = hl_resolution_check.raw_sha256
              FROM job_record r WHERE r.id = record_id), false)
        WHEN resolution = 'replayed' THEN coalesce((
            SELECT job_key IS NULL OR lower(job_key) = lower(hl_record_job_key(r.id))
              FROM job_record r WHERE r.id = record_id), false)
        WHEN resolution = 'skipped' THEN resolved_by IS NOT NULL
        WHEN resolution = 'dismissed' THEN resolved_by IS NOT NULL AND length(btrim(coalesce(note, ''))) > 0
        ELSE false
    END
$$;

-- Whether a rejection's resolution holds.
CREATE FUNCTION hl_resolution_holds(x rejected_record) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT hl_resolution_check(x.id, x.source_format, x.raw_sha256, x.job_key, x.resolution,
                               x.resolved_record_id, x.resolved_by, x.resolution_note)
$$;

-- The guard of 0013, and: a resolution must hold when it is set.
CREATE OR REPLACE FUNCTION hl_rejected_record_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'rejected record % is kept for the audit trail: dismiss it (hpc-ledger rejected dismiss) instead of deleting it', OLD.id
            USING ERRCODE = 'HL001';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF OLD.resolved_by IS NOT NULL AND OLD.resolution = 'dismissed'
           AND (NEW.resolved_by IS DISTINCT FROM OLD.resolved_by
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
    END IF;
    IF NEW.resolution IS NOT NULL
       AND (TG_OP = 'INSERT'
            OR NEW.resolution IS DISTINCT FROM OLD.resolution
            OR NEW.resolved_record_id IS DISTINCT FROM OLD.resolved_record_id
            OR NEW.resolved_by IS DISTINCT FROM OLD.resolved_by)
       AND NOT coalesce(hl_resolution_holds(NEW), false) THEN
        RAISE EXCEPTION 'rejected record % cannot be resolved as %: %', NEW.id, NEW.resolution,
            CASE WHEN NEW.resolution IN ('recorded', 'revised', 'superseded')
                 THEN 'it must name the job record its line became (same source, same bytes)'
                 WHEN NEW.resolution = 'replayed' THEN 'it must name the job record of the same job that it repeated'
                 ELSE 'it must name who resolved it (and, dismissed, why)' END
            USING ERRCODE = 'HL005';
    END IF;
    RETURN NEW;
END;
$$;
DROP TRIGGER rejected_record_guard ON rejected_record;
CREATE TRIGGER rejected_record_guard BEFORE INSERT OR UPDATE OR DELETE ON rejected_record
    FOR EACH ROW EXECUTE FUNCTION hl_rejected_record_guard();
ALTER TABLE rejected_record ENABLE ALWAYS TRIGGER rejected_record_guard;

-- Every rejection, with its age and whether its resolution holds.
CREATE VIEW audit.rejections AS
SELECT x.id, x.source_format, x.source_ref, x.job_key, x.kind, x.reason,
       coalesce(x.resolution, 'open') AS status, x.resolved_at, x.resolved_by, x.resolution_note,
       x.resolved_record_id, x.first_seen_at, x.last_seen_at, x.times_seen,
       now() - x.first_seen_at AS age,
       hl_resolution_holds(x) AS resolution_holds
  FROM rejected_record x;
COMMENT ON VIEW audit.rejections IS
    'Every record that could not be charged: open (not charged yet), dismissed (never to be charged: who and why), or resolved, with whether the resolution holds (it names the job record its line became).';

-- audit.discrepancies (0016), and a finding `resolution` for a rejection
-- whose resolution does not hold.
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
 WHERE r.resolution_holds = false;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
