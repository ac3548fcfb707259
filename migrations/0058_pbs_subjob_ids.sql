-- A PBS array subjob named in its job id (`job record --job-id
-- '123[4].server'`, as `$PBS_JOBID` names it in an epilogue; a JSON lines
-- record's "job_id"; `hold`, `check`, a correction's `--job-id`) is read
-- since 2026-12-07 as the PBS reader reads the subjob's accounting record:
-- job `123[].server`, array index 4. It was kept as job "123[4].server"
-- with no index, a run of its own, so the same subjob imported from the
-- accounting log was charged a second time, and a hold placed under its
-- `$PBS_JOBID` was never released by its charge.
--
-- As for Slurm's `123_4` (migration 0053), a run recorded so before keeps
-- its key, and a record of its subjob is matched to it: this row now also
-- says whether the ledger holds any run with a job id of that form, so
-- that a ledger without them looks for nothing.

UPDATE array_task_reading
   SET runs_before = true
 WHERE NOT runs_before
   AND EXISTS (SELECT 1 FROM job WHERE scheduler_job_id ~ '^[0-9]+\[[0-9]+\]');

COMMENT ON TABLE array_task_reading IS
    'When job ids in an array task''s form (Slurm''s 123_4, and since migration 0058 PBS''s 123[4].server) began to be read as array tasks, and whether this ledger held runs recorded with such ids before (docs/recording.md).';
