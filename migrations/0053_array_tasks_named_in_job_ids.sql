-- A job id in Slurm's array task form without an array index
-- (`job record --job-id 123_4`, a JSON lines record's "job_id": "123_4",
-- `hold`, `check`, `correct --job-id`) is read since 2026-12-07 as `sacct`'s
-- is: array task 4 of job 123. It was kept as job "123_4" with no index, a
-- run of its own, so the same task imported from `sacct` (job 123, index 4)
-- was charged a second time.
--
-- A run recorded so before keeps its key, and a record of its task is
-- matched to it (`Recorder::array_tasks`), so that nothing is charged
-- twice; so is a run whose job id in that form came with an index too
-- (`--job-id 123_4 --array-index 5`, refused now). Looking for such runs
-- costs a lookup per array task of a batch; this row says whether this
-- ledger holds any, so that a ledger without them (most) looks for nothing. A `serve` or `import --follow`
-- started before this migration still records the old way until it is
-- restarted: stop them, migrate, start them again (docs/slurm.md).

CREATE TABLE array_task_reading (
    id          integer PRIMARY KEY CHECK (id = 1),
    migrated_at timestamptz NOT NULL,
    runs_before boolean NOT NULL
);
COMMENT ON TABLE array_task_reading IS
    'When job ids in Slurm''s array task form (123_4) began to be read as array tasks, and whether this ledger held runs recorded with such ids before (docs/recording.md).';

INSERT INTO array_task_reading (id, migrated_at, runs_before)
SELECT 1, now(), EXISTS (SELECT 1 FROM job WHERE scheduler_job_id ~ '^[0-9]+_[0-9]+$');

-- Every role that records reads it: it holds no secret.
GRANT SELECT ON array_task_reading TO PUBLIC;
