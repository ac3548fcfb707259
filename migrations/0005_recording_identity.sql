-- A job run is matched on cluster, job id, array index and start time. The
-- submit time is still recorded and prices the job, but it is not part of the
-- key: a scheduler that sends the same run once without and once with a
-- submit time (an epilogue and a later sacct dump) must not be charged twice.
-- Recycled job ids are told apart by their start times as well.
DROP INDEX job_run_key;
CREATE UNIQUE INDEX job_run_key ON job (cluster_id, scheduler_job_id, coalesce(array_index, -1), started_at);

-- Local scheduler times are read in the cluster's time zone: changing it once
-- jobs are recorded would move their start times, and so their identities.
CREATE FUNCTION hl_cluster_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.time_zone IS DISTINCT FROM OLD.time_zone AND EXISTS (SELECT 1 FROM job WHERE cluster_id = OLD.id) THEN
        RAISE EXCEPTION 'the time zone of cluster % cannot change once jobs are recorded on it', OLD.name
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER cluster_guard BEFORE UPDATE ON cluster
    FOR EACH ROW EXECUTE FUNCTION hl_cluster_guard();
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_guard;

-- A rejected line that reads as nothing to charge on a retry (e.g. a job that
-- turns out never to have started) is resolved as skipped.
ALTER TABLE rejected_record DROP CONSTRAINT rejected_record_resolution_check;
ALTER TABLE rejected_record ADD CONSTRAINT rejected_record_resolution_check
    CHECK (resolution IN ('recorded', 'replayed', 'revised', 'superseded', 'skipped'));
