-- Rejections, the rest of the way (issue 20, item 4): an open rejection is
-- resolved when the same run is recorded by another path.
--
-- A jobcomp post rejected by `serve` (an unknown partition, say) stayed open
-- after `sacct` was imported for the same run, though the run was charged.
-- Now, when a run is recorded, the open rejections of the same job are read
-- again and those that describe this very run (cluster, job id, array index,
-- start) are resolved as `recorded_elsewhere`, naming the job record that
-- charges the run. The database checks that the record is of the same job;
-- the start, the end and what the run held are compared by the recorder,
-- which can read the raw record. A line resolved so is not reopened when it
-- is read (and rejected) again for the same reason. A conflict (the same run
-- with another charge) is never resolved so: it stays open until superseded
-- or dismissed.

ALTER TABLE rejected_record DROP CONSTRAINT rejected_record_resolution_check;
ALTER TABLE rejected_record ADD CONSTRAINT rejected_record_resolution_check
    CHECK (resolution IN ('recorded', 'replayed', 'revised', 'superseded', 'skipped', 'dismissed',
                          'recorded_elsewhere'));

-- The resolution check of 0017, and `recorded_elsewhere`: it names a job
-- record of the same job (cluster/job id[_index]) from another source or
-- other bytes.
CREATE OR REPLACE FUNCTION hl_resolution_check(rejection_id bigint, source_format text, raw_sha256 bytea, job_key text,
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
        WHEN resolution = 'recorded_elsewhere' THEN coalesce((
            SELECT job_key IS NOT NULL AND lower(job_key) = lower(hl_record_job_key(r.id))
                   AND NOT EXISTS (SELECT 1 FROM rejected_record x WHERE x.id = rejection_id AND x.kind = 'conflict')
                   AND NOT (r.source_format = hl_resolution_check.source_format
                            AND sha256(coalesce(r.raw_bytes, convert_to(r.raw, 'UTF8'))) = hl_resolution_check.raw_sha256)
              FROM job_record r WHERE r.id = record_id), false)
        WHEN resolution = 'skipped' THEN resolved_by IS NOT NULL
        WHEN resolution = 'dismissed' THEN resolved_by IS NOT NULL AND length(btrim(coalesce(note, ''))) > 0
        ELSE false
    END
$$;

-- Finding the open rejections of the jobs a batch recorded.
CREATE INDEX rejected_record_open_job ON rejected_record (lower(job_key)) WHERE resolved_at IS NULL;
