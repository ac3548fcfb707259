-- How each job record was read (issue 13, item 7: `audit --deep`).
--
-- `audit --deep` re-reads every kept raw record with the parsers and compares
-- what it says with the record's stored fields. A line is not always
-- readable on its own: headerless `sacct` output needs its field list,
-- another delimiter, PBS which attributes name the project, and records
-- that name no cluster or project the importer's defaults. Those are the
-- options rejected records already keep (`rejected_record.read_options`);
-- job records now keep them too. NULL on records written before this
-- migration: `audit --deep` then reads them with their own cluster as the
-- default and says which it could not read.

ALTER TABLE job_record ADD COLUMN read_options jsonb;

-- What `audit --deep` reads: every job record with its raw record, how it
-- was read, and what it stores, plus the rate card's cores per node where a
-- stored field depends on it (a node count derived from cores, an exclusive
-- job's cores): the card of the record's own job charge, else of its run's.
-- A view runs with its owner's rights, so the auditor role, which may read
-- nothing but the audit schema, can re-read every record.
CREATE VIEW audit.job_records AS
SELECT r.id AS record_id, r.job_id AS run_id, r.kind, r.revision,
       c.name AS cluster, coalesce(c.time_zone, ce.time_zone) AS time_zone,
       j.scheduler_job_id, j.array_index, j.submitted_at,
       r.started_at, r.ended_at, j.started_at AS run_started_at, j.cluster_id = r.cluster_id AS run_cluster_holds,
       p.code AS project, r.queue, r.nodes, r.cores, r.memory_bytes, r.gpus,
       r.charge_fingerprint, r.content_fingerprint,
       r.source_format, r.source_ref, r.raw, r.raw_bytes, r.read_options, r.recorded_at,
       r.recorded_at >= (SELECT m.installed_on FROM _sqlx_migrations m WHERE m.version = 20) AS options_kept,
       (SELECT count(*) FROM ledger_entry e WHERE e.job_record_id = r.id AND e.kind = 'job') AS job_entries,
       coalesce((SELECT rc.cores_per_node FROM ledger_entry e JOIN rate_card rc ON rc.id = e.rate_card_id
                  WHERE e.job_record_id = r.id AND e.kind = 'job' LIMIT 1),
                (SELECT rc.cores_per_node FROM job_record r2
                   JOIN ledger_entry e ON e.job_record_id = r2.id AND e.kind = 'job'
                   JOIN rate_card rc ON rc.id = e.rate_card_id
                  WHERE r2.job_id = r.job_id
                  ORDER BY r2.revision DESC LIMIT 1)) AS cores_per_node
  FROM job_record r
  JOIN job j ON j.id = r.job_id
  JOIN cluster c ON c.id = r.cluster_id
  JOIN project p ON p.id = r.project_id
  LEFT JOIN center ce ON true;
COMMENT ON VIEW audit.job_records IS
    'Every job record with its raw record and how it was read, for `hpc-ledger audit --deep`, which re-reads each with the parsers and compares.';

-- Runs (job identities) that hold no record: a record deleted by hand, or a
-- run row left by a version before this one for a job whose only charge
-- was refused (then a rejection names the job).
CREATE VIEW audit.runs_without_records AS
SELECT j.id AS run_id, c.name AS cluster, j.scheduler_job_id, j.array_index, j.started_at,
       j.created_at < (SELECT m.installed_on FROM _sqlx_migrations m WHERE m.version = 20)
       AND EXISTS (SELECT 1 FROM rejected_record x
                    WHERE lower(x.job_key) = lower(c.name || '/' || j.scheduler_job_id
                                                   || coalesce('_' || j.array_index::text, ''))) AS rejected
  FROM job j
  JOIN cluster c ON c.id = j.cluster_id
 WHERE NOT EXISTS (SELECT 1 FROM job_record r WHERE r.job_id = j.id);
COMMENT ON VIEW audit.runs_without_records IS
    'Job runs without any record: a record deleted by hand (or, with rejected = true, a run created before migration 0020 for a job whose only records were refused, as versions before it did).';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
