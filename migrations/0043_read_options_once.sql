-- How a record was read is kept once, not with every record (issue 19,
-- item 2: the bytes of a ledger of years).
--
-- Migration 0020 kept with every job record the options it was read with
-- (`job_record.read_options`: for an sacct dump, its field names), so that
-- `audit --deep` can read the raw line again on its own. Every record of a
-- file carries the same options: in a `bench --scale` ledger of 4.6M
-- entries they were 292 of the 862 bytes of each job record, a third of
-- the largest table and 1.2 of its 7.3 GB.
--
-- From this migration on, a record names its options by id
-- (`read_options_id`), and each distinct set of options is stored once, in
-- record_read_options. Records written before it keep their own copy (the
-- table is append-only: they are not rewritten); a record has one or the
-- other, never both. audit.job_records shows either as `read_options`, so
-- `audit --deep` reads every record as before.

-- The key of a set of options: the SHA-256 of its text as jsonb prints it
-- (keys in one order, one spacing), so equal options have one digest. The
-- database's encoding is fixed when it is made, so the text's bytes are
-- too: IMMUTABLE, as a stored column needs.
CREATE FUNCTION hl_read_options_digest(o jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT sha256(convert_to(o::text, 'UTF8')) $$;

CREATE TABLE record_read_options (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    options jsonb NOT NULL CHECK (jsonb_typeof(options) = 'object'),
    -- (A B-tree of the jsonb itself would refuse options longer than a
    -- third of a page.)
    digest  bytea NOT NULL UNIQUE GENERATED ALWAYS AS (hl_read_options_digest(options)) STORED
);
COMMENT ON TABLE record_read_options IS
    'How job records were read (field names, delimiter, default cluster and project), each distinct set once; job_record.read_options_id names it (since migration 0043).';
CREATE TRIGGER record_read_options_append_only BEFORE UPDATE OR DELETE ON record_read_options
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER record_read_options_no_truncate BEFORE TRUNCATE ON record_read_options
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE record_read_options ENABLE ALWAYS TRIGGER record_read_options_append_only;
ALTER TABLE record_read_options ENABLE ALWAYS TRIGGER record_read_options_no_truncate;

ALTER TABLE job_record ADD COLUMN read_options_id bigint;
-- Every record before this migration has no id (the column is new), so
-- the check holds for them without reading the table again.
ALTER TABLE job_record ADD CONSTRAINT job_record_read_options_once
    CHECK (read_options IS NULL OR read_options_id IS NULL) NOT VALID;
COMMENT ON COLUMN job_record.read_options_id IS
    'How the raw record was read (record_read_options); records before migration 0043 keep read_options instead.';

-- The id of a set of options, stored the first time it is seen. Called
-- once per distinct set in a posting (a batch of an import has one), not
-- once per record. Two postings that bring the same new options at once:
-- the second waits on the first's insert, and once the first commits,
-- finds its row (each statement here sees what has committed before it).
CREATE FUNCTION hl_read_options_id(o jsonb) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    d bytea;
    found_id bigint;
BEGIN
    IF o IS NULL THEN
        RETURN NULL;
    END IF;
    d := hl_read_options_digest(o);
    SELECT r.id INTO found_id FROM record_read_options r WHERE r.digest = d;
    IF found_id IS NOT NULL THEN
        RETURN found_id;
    END IF;
    INSERT INTO record_read_options (options) VALUES (o) ON CONFLICT (digest) DO NOTHING RETURNING id INTO found_id;
    IF found_id IS NULL THEN
        SELECT r.id INTO found_id FROM record_read_options r WHERE r.digest = d;
    END IF;
    IF found_id IS NULL THEN
        RAISE EXCEPTION 'read options % were stored by another posting this transaction cannot see', o
            USING ERRCODE = '40001', HINT = 'Retry the posting.';
    END IF;
    RETURN found_id;
END
$$;
COMMENT ON FUNCTION hl_read_options_id(jsonb) IS
    'The record_read_options id of these options, stored the first time they are seen.';
REVOKE ALL ON FUNCTION hl_read_options_id(jsonb) FROM PUBLIC;

-- The references a job record names, checked once per statement (0010),
-- now with its read options.
CREATE OR REPLACE FUNCTION hl_job_record_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    ids bigint[];
    n_found bigint;
    bad record;
BEGIN
    ids := ARRAY(SELECT DISTINCT n.project_id FROM new_rows n);
    PERFORM 1 FROM project p WHERE p.id = ANY (ids) FOR KEY SHARE OF p;
    GET DIAGNOSTICS n_found = ROW_COUNT;
    IF n_found < cardinality(ids) THEN
        SELECT n.id, n.project_id INTO bad FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM project p WHERE p.id = n.project_id) ORDER BY n.id LIMIT 1;
        PERFORM hl_missing_reference('job_record', bad.id, 'project', bad.project_id::text);
    END IF;
    ids := ARRAY(SELECT DISTINCT n.node_type_id FROM new_rows n);
    PERFORM 1 FROM node_type t WHERE t.id = ANY (ids) FOR KEY SHARE OF t;
    -- A node type of the record's own cluster (few pairs per statement).
    SELECT n.id, n.cluster_id, n.node_type_id INTO bad
      FROM (SELECT DISTINCT cluster_id, node_type_id FROM new_rows) w
      JOIN LATERAL (SELECT * FROM new_rows n WHERE n.cluster_id = w.cluster_id AND n.node_type_id = w.node_type_id
                     ORDER BY n.id LIMIT 1) n ON true
     WHERE NOT EXISTS (SELECT 1 FROM node_type t WHERE t.id = w.node_type_id AND t.cluster_id = w.cluster_id)
     ORDER BY n.id LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job_record', bad.id, 'node type',
                                     format('%s of cluster %s', bad.node_type_id, bad.cluster_id));
    END IF;
    SELECT n.id, n.job_id, n.cluster_id, n.started_at INTO bad FROM new_rows n
     WHERE (SELECT j.id FROM job j WHERE j.id = n.job_id AND j.cluster_id = n.cluster_id
                                     AND j.started_at = n.started_at) IS NULL
     ORDER BY n.id LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job_record', bad.id, 'job',
                                     format('%s (cluster %s, started %s)', bad.job_id, bad.cluster_id, bad.started_at));
    END IF;
    -- Its read options (0043): rows are never removed, so no lock is needed
    -- to keep them.
    SELECT n.id, n.read_options_id INTO bad
      FROM (SELECT DISTINCT read_options_id FROM new_rows WHERE read_options_id IS NOT NULL) w
      JOIN LATERAL (SELECT * FROM new_rows n WHERE n.read_options_id = w.read_options_id
                     ORDER BY n.id LIMIT 1) n ON true
     WHERE NOT EXISTS (SELECT 1 FROM record_read_options o WHERE o.id = w.read_options_id)
     ORDER BY n.id LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job_record', bad.id, 'read options', bad.read_options_id::text);
    END IF;
    RETURN NULL;
END
$$;

-- Every job record for `audit --deep` (0020, 0037), its read options
-- wherever they are kept.
CREATE OR REPLACE VIEW audit.job_records AS
SELECT r.id AS record_id, r.job_id AS run_id, r.kind, r.revision,
       c.name AS cluster, coalesce(c.time_zone, ce.time_zone) AS time_zone,
       j.scheduler_job_id, j.array_index, j.submitted_at,
       r.started_at, r.ended_at, j.started_at AS run_started_at, j.cluster_id = r.cluster_id AS run_cluster_holds,
       p.code AS project, r.queue, r.nodes, r.cores, r.memory_bytes, r.gpus,
       r.charge_fingerprint, r.content_fingerprint,
       r.source_format, r.source_ref, r.raw, r.raw_bytes,
       coalesce(r.read_options, ro.options) AS read_options, r.recorded_at,
       r.recorded_at >= (SELECT m.installed_on FROM _sqlx_migrations m WHERE m.version = 20) AS options_kept,
       (SELECT count(*) FROM ledger_entry e WHERE e.job_record_id = r.id AND e.kind = 'job') AS job_entries,
       coalesce((SELECT rc.cores_per_node FROM ledger_entry e JOIN rate_card rc ON rc.id = e.rate_card_id
                  WHERE e.job_record_id = r.id AND e.kind = 'job' LIMIT 1),
                (SELECT rc.cores_per_node FROM job_record r2
                   JOIN ledger_entry e ON e.job_record_id = r2.id AND e.kind = 'job'
                   JOIN rate_card rc ON rc.id = e.rate_card_id
                  WHERE r2.job_id = r.job_id
                  ORDER BY r2.revision DESC LIMIT 1),
                (SELECT rc.cores_per_node FROM archived_charge ac JOIN rate_card rc ON rc.id = ac.rate_card_id
                  WHERE ac.job_record_id = r.id)) AS cores_per_node,
       (SELECT ac.period FROM archived_charge ac WHERE ac.job_record_id = r.id) AS archived_in
  FROM job_record r
  JOIN job j ON j.id = r.job_id
  JOIN cluster c ON c.id = r.cluster_id
  JOIN project p ON p.id = r.project_id
  LEFT JOIN record_read_options ro ON ro.id = r.read_options_id
  LEFT JOIN center ce ON true;

-- The recorder and billing read the options (the recorder stores new ones
-- through hl_read_options_id, which is the table's owner).
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hpc_ledger_ingest', 'hpc_ledger_billing'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT SELECT ON record_read_options TO %I', r);
            EXECUTE format('GRANT EXECUTE ON FUNCTION hl_read_options_id(jsonb) TO %I', r);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
