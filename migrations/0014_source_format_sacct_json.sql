-- `sacct --json` is a source format of its own: its records (one job object
-- each) are stored and rejected as `sacct-json`, so a retry reads them with
-- the reader that read them. The constraints are re-added NOT VALID and then
-- validated, which lets inserts go on while existing rows are checked.

ALTER TABLE job_record DROP CONSTRAINT job_record_source_format_check;
ALTER TABLE job_record ADD CONSTRAINT job_record_source_format_check
    CHECK (source_format IN ('slurm', 'pbs', 'jsonl', 'json', 'jobcomp', 'cli', 'sacct-json')) NOT VALID;
ALTER TABLE job_record VALIDATE CONSTRAINT job_record_source_format_check;

ALTER TABLE rejected_record DROP CONSTRAINT rejected_record_source_format_check;
ALTER TABLE rejected_record ADD CONSTRAINT rejected_record_source_format_check
    CHECK (source_format IN ('slurm', 'pbs', 'jsonl', 'json', 'jobcomp', 'cli', 'sacct-json')) NOT VALID;
ALTER TABLE rejected_record VALIDATE CONSTRAINT rejected_record_source_format_check;
