-- Slurm's jobcomp/filetxt log is read (`import --format jobcomp-filetxt`):
-- its records are kept with their own source format, the line as slurmctld
-- wrote it, as 0014 did for `sacct --json`.

ALTER TABLE job_record DROP CONSTRAINT job_record_source_format_check;
ALTER TABLE job_record ADD CONSTRAINT job_record_source_format_check
    CHECK (source_format IN ('slurm', 'pbs', 'jsonl', 'json', 'jobcomp', 'cli', 'sacct-json', 'jobcomp-filetxt')) NOT VALID;
ALTER TABLE job_record VALIDATE CONSTRAINT job_record_source_format_check;

ALTER TABLE rejected_record DROP CONSTRAINT rejected_record_source_format_check;
ALTER TABLE rejected_record ADD CONSTRAINT rejected_record_source_format_check
    CHECK (source_format IN ('slurm', 'pbs', 'jsonl', 'json', 'jobcomp', 'cli', 'sacct-json', 'jobcomp-filetxt')) NOT VALID;
ALTER TABLE rejected_record VALIDATE CONSTRAINT rejected_record_source_format_check;
