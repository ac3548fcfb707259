-- Reference checks once per statement instead of once per row (issue 7).
--
-- The four tables the ledger appends to in bulk (job, job_record,
-- ledger_entry, storage_charge_segment) checked their references with
-- foreign keys: one trigger call and one index probe per referencing row and
-- per key. `hpc-ledger bench` measured those calls at 55 % of the time
-- PostgreSQL spends inserting an import's rows, and 60 % of a storage
-- billing run's entry insert. Here each table gets one AFTER INSERT trigger
-- per statement that checks the statement's new rows as a set over its
-- transition table.
--
-- The guarantees stay those of the foreign keys:
-- * A row that refers to nothing is refused (SQLSTATE 23503,
--   foreign_key_violation), naming the row and the missing key.
-- * A referenced row cannot go or change its key while it is referenced:
--   job, job_record, ledger_entry and billing_run are append-only already
--   (migration 0002); project, cluster, node_type, rate_card and
--   storage_rate get triggers that refuse such a DELETE or key change
--   (`SET id = DEFAULT`), and refuse TRUNCATE once anything is recorded.
-- * Concurrency: the check locks the referenced rows of those five tables
--   FOR KEY SHARE, as a foreign key does, once per referenced row. A DELETE
--   or key change racing an insert waits for it, then, reading with a fresh
--   snapshot, sees the new reference and refuses. Only READ COMMITTED reads
--   with a fresh snapshot; under REPEATABLE READ or SERIALIZABLE such a
--   DELETE or key change is refused as a serialization failure (40001; run
--   it again under READ COMMITTED), as a foreign key's check would be when it
--   meets a concurrent reference.

ALTER TABLE job DROP CONSTRAINT job_cluster_id_fkey;
ALTER TABLE job_record DROP CONSTRAINT job_record_project_id_fkey;
ALTER TABLE job_record DROP CONSTRAINT job_record_job_id_cluster_id_started_at_fkey;
ALTER TABLE job_record DROP CONSTRAINT job_record_cluster_id_node_type_id_fkey;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_project_id_fkey;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_job_record_id_fkey;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_rate_card_id_fkey;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_storage_rate_id_fkey;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_billing_run_id_fkey;
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_corrects_id_fkey;
ALTER TABLE storage_charge_segment DROP CONSTRAINT storage_charge_segment_ledger_entry_id_fkey;
-- Only the job_record foreign key used it; the check below probes job's
-- primary key. One index less to maintain per job.
ALTER TABLE job DROP CONSTRAINT job_record_ref;

-- The error of a row that refers to nothing.
CREATE FUNCTION hl_missing_reference(tbl text, row_id bigint, what text, ref text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% row % refers to % %, which does not exist', tbl, row_id, what, ref
        USING ERRCODE = 'foreign_key_violation', TABLE = tbl;
END
$$;

-- Every check is planned the same way whatever the statement's size (a
-- plan is cached on first use, so it must suit one row from `serve` and
-- 200,000 from storage billing alike): the distinct keys of a referenced
-- table are gathered into an array and looked up through its primary key
-- (`id = ANY`), once each, locking them; fewer rows than keys means a key is
-- missing, and only then is the offending row searched for. Keys that are
-- (nearly) unique per row are probed row by row through the primary key by
-- a scalar subquery, which PostgreSQL never turns into a hash join.
-- The checks are written out table by table rather than through one helper
-- taking table and column names: such a helper needs dynamic SQL, planned
-- on every call, and an earlier version that did so cost `serve` (a few
-- jobs per statement) 40 % of its throughput in planning (bench).

CREATE FUNCTION hl_job_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    ids bigint[];
    n_found bigint;
    bad record;
BEGIN
    ids := ARRAY(SELECT DISTINCT n.cluster_id FROM new_rows n);
    PERFORM 1 FROM cluster c WHERE c.id = ANY (ids) FOR KEY SHARE OF c;
    GET DIAGNOSTICS n_found = ROW_COUNT;
    IF n_found < cardinality(ids) THEN
        SELECT n.id, n.cluster_id INTO bad FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM cluster c WHERE c.id = n.cluster_id) ORDER BY n.id LIMIT 1;
        PERFORM hl_missing_reference('job', bad.id, 'cluster', bad.cluster_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_references AFTER INSERT ON job REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_job_references();
ALTER TABLE job ENABLE ALWAYS TRIGGER job_references;

CREATE FUNCTION hl_job_record_references() RETURNS trigger
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
    RETURN NULL;
END
$$;
CREATE TRIGGER job_record_references AFTER INSERT ON job_record REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_job_record_references();
ALTER TABLE job_record ENABLE ALWAYS TRIGGER job_record_references;

CREATE FUNCTION hl_ledger_entry_references() RETURNS trigger
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
        PERFORM hl_missing_reference('ledger_entry', bad.id, 'project', bad.project_id::text);
    END IF;
    ids := ARRAY(SELECT DISTINCT n.rate_card_id FROM new_rows n WHERE n.rate_card_id IS NOT NULL);
    PERFORM 1 FROM rate_card c WHERE c.id = ANY (ids) FOR KEY SHARE OF c;
    GET DIAGNOSTICS n_found = ROW_COUNT;
    IF n_found < cardinality(ids) THEN
        SELECT n.id, n.rate_card_id INTO bad FROM new_rows n
         WHERE n.rate_card_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rate_card c WHERE c.id = n.rate_card_id)
         ORDER BY n.id LIMIT 1;
        PERFORM hl_missing_reference('ledger_entry', bad.id, 'rate card', bad.rate_card_id::text);
    END IF;
    ids := ARRAY(SELECT DISTINCT n.storage_rate_id FROM new_rows n WHERE n.storage_rate_id IS NOT NULL);
    PERFORM 1 FROM storage_rate s WHERE s.id = ANY (ids) FOR KEY SHARE OF s;
    GET DIAGNOSTICS n_found = ROW_COUNT;
    IF n_found < cardinality(ids) THEN
        SELECT n.id, n.storage_rate_id INTO bad FROM new_rows n
         WHERE n.storage_rate_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM storage_rate s WHERE s.id = n.storage_rate_id)
         ORDER BY n.id LIMIT 1;
        PERFORM hl_missing_reference('ledger_entry', bad.id, 'storage rate', bad.storage_rate_id::text);
    END IF;
    -- Billing runs, job records and corrected entries are append-only:
    -- found once, they stay; no lock needed.
    ids := ARRAY(SELECT DISTINCT n.billing_run_id FROM new_rows n WHERE n.billing_run_id IS NOT NULL);
    SELECT count(*) INTO n_found FROM billing_run b WHERE b.id = ANY (ids);
    IF n_found < cardinality(ids) THEN
        SELECT n.id, n.billing_run_id INTO bad FROM new_rows n
         WHERE n.billing_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.id = n.billing_run_id)
         ORDER BY n.id LIMIT 1;
        PERFORM hl_missing_reference('ledger_entry', bad.id, 'billing run', bad.billing_run_id::text);
    END IF;
    SELECT n.id, n.job_record_id INTO bad FROM new_rows n
     WHERE n.job_record_id IS NOT NULL AND (SELECT r.id FROM job_record r WHERE r.id = n.job_record_id) IS NULL
     ORDER BY n.id LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('ledger_entry', bad.id, 'job record', bad.job_record_id::text);
    END IF;
    SELECT n.id, n.corrects_id INTO bad FROM new_rows n
     WHERE n.corrects_id IS NOT NULL AND (SELECT e.id FROM ledger_entry e WHERE e.id = n.corrects_id) IS NULL
     ORDER BY n.id LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('ledger_entry', bad.id, 'ledger entry', bad.corrects_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_entry_references AFTER INSERT ON ledger_entry REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_ledger_entry_references();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_references;

CREATE FUNCTION hl_storage_charge_segment_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    ids bigint[];
    n_found bigint;
    bad bigint;
BEGIN
    ids := ARRAY(SELECT DISTINCT n.ledger_entry_id FROM new_rows n);
    SELECT count(*) INTO n_found FROM ledger_entry e WHERE e.id = ANY (ids);
    IF n_found < cardinality(ids) THEN
        SELECT min(n.ledger_entry_id) INTO bad FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.id = n.ledger_entry_id);
        PERFORM hl_missing_reference('storage_charge_segment', bad, 'ledger entry', bad::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER storage_charge_segment_references AFTER INSERT ON storage_charge_segment
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_storage_charge_segment_references();
ALTER TABLE storage_charge_segment ENABLE ALWAYS TRIGGER storage_charge_segment_references;

-- Removing or renumbering a row others may refer to must see the references
-- committed by concurrent transactions (see above).
CREATE FUNCTION hl_require_read_committed(what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '% needs READ COMMITTED isolation, to see charges committed concurrently', what
            USING ERRCODE = 'serialization_failure';
    END IF;
END
$$;

-- A referenced project, cluster, node type, rate card or storage rate keeps
-- its key: no DELETE, no key change (`SET id = DEFAULT`) while anything
-- recorded refers to it.
CREATE FUNCTION hl_project_keep_referenced() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    PERFORM hl_require_read_committed(format('removing or renumbering project %s', OLD.code));
    IF EXISTS (SELECT 1 FROM job_record WHERE project_id = OLD.id)
       OR EXISTS (SELECT 1 FROM ledger_entry WHERE project_id = OLD.id) THEN
        RAISE EXCEPTION 'project % has charges and cannot be removed or renumbered', OLD.code
            USING ERRCODE = 'HL004';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER project_keep_referenced BEFORE UPDATE OR DELETE ON project
    FOR EACH ROW EXECUTE FUNCTION hl_project_keep_referenced();
ALTER TABLE project ENABLE ALWAYS TRIGGER project_keep_referenced;

CREATE FUNCTION hl_cluster_keep_referenced() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    PERFORM hl_require_read_committed(format('removing or renumbering cluster %s', OLD.name));
    IF EXISTS (SELECT 1 FROM job WHERE cluster_id = OLD.id) THEN
        RAISE EXCEPTION 'cluster % has recorded jobs and cannot be removed or renumbered', OLD.name
            USING ERRCODE = 'HL004';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER cluster_keep_referenced BEFORE UPDATE OR DELETE ON cluster
    FOR EACH ROW EXECUTE FUNCTION hl_cluster_keep_referenced();
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_keep_referenced;

CREATE FUNCTION hl_node_type_keep_referenced() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.id, NEW.cluster_id) = (OLD.id, OLD.cluster_id) THEN
        RETURN NEW;
    END IF;
    PERFORM hl_require_read_committed(format('removing or moving node type %s', OLD.name));
    -- No index on job_record.node_type_id: a rare change of configuration
    -- pays a scan rather than every recorded job an index entry.
    IF EXISTS (SELECT 1 FROM job_record WHERE node_type_id = OLD.id) THEN
        RAISE EXCEPTION 'node type % has recorded jobs and cannot be removed or moved', OLD.name
            USING ERRCODE = 'HL004';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER node_type_keep_referenced BEFORE UPDATE OR DELETE ON node_type
    FOR EACH ROW EXECUTE FUNCTION hl_node_type_keep_referenced();
ALTER TABLE node_type ENABLE ALWAYS TRIGGER node_type_keep_referenced;

-- Rate cards and storage rates: their guards (migration 0002) refuse a
-- DELETE of one that priced a charge, but let its id change.
CREATE FUNCTION hl_rate_keep_referenced() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    PERFORM hl_require_read_committed(format('removing or renumbering %s %s', TG_TABLE_NAME, OLD.id));
    IF (TG_TABLE_NAME = 'rate_card' AND EXISTS (SELECT 1 FROM ledger_entry WHERE rate_card_id = OLD.id))
       OR (TG_TABLE_NAME = 'storage_rate' AND EXISTS (SELECT 1 FROM ledger_entry WHERE storage_rate_id = OLD.id)) THEN
        RAISE EXCEPTION '% % has priced charges and cannot be removed or renumbered', TG_TABLE_NAME, OLD.id
            USING ERRCODE = 'HL004', HINT = 'Add a new dated row instead.';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER rate_card_keep_referenced BEFORE UPDATE OR DELETE ON rate_card
    FOR EACH ROW EXECUTE FUNCTION hl_rate_keep_referenced();
ALTER TABLE rate_card ENABLE ALWAYS TRIGGER rate_card_keep_referenced;
CREATE TRIGGER storage_rate_keep_referenced BEFORE UPDATE OR DELETE ON storage_rate
    FOR EACH ROW EXECUTE FUNCTION hl_rate_keep_referenced();
ALTER TABLE storage_rate ENABLE ALWAYS TRIGGER storage_rate_keep_referenced;

-- TRUNCATE skips row triggers: refused for the referenced reference data
-- once anything is recorded.
CREATE FUNCTION hl_refuse_truncate_when_recorded() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM job) OR EXISTS (SELECT 1 FROM ledger_entry) THEN
        RAISE EXCEPTION '% is referenced by recorded charges: TRUNCATE is refused', TG_TABLE_NAME
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NULL;
END
$$;
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['project', 'cluster', 'node_type', 'rate_card', 'storage_rate'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_truncate_when_recorded()',
                       t || '_truncate_when_recorded', t);
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_truncate_when_recorded');
    END LOOP;
END
$$;
