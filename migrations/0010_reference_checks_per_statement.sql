-- Reference checks once per statement instead of once per row (issue 7).
--
-- The four tables the ledger appends to in bulk (job, job_record,
-- ledger_entry, storage_charge_segment) checked their references with
-- foreign keys: one trigger call and one index probe per referencing row and
-- per key. `hpc-ledger bench` measured those calls at 55 % of the time
-- PostgreSQL spends inserting an import's rows, and 60 % of a storage
-- billing run's entry insert. Here each table gets one AFTER INSERT trigger
-- per statement that checks the statement's new rows as a set over its
-- transition table: the distinct referenced keys, probed once each.
-- Probed through the referenced table's index, whatever the statement's
-- size: the check's plan is cached on its first use, and a hash join planned
-- for a large first statement would scan the whole referenced table on
-- every later one (hence enable_hashjoin/mergejoin off in the functions).
--
-- The guarantees stay those of the foreign keys:
-- * A row that refers to nothing is refused (SQLSTATE 23503,
--   foreign_key_violation), naming the row and the missing key.
-- * A referenced row cannot go or change its key while it is referenced:
--   job, job_record, ledger_entry and billing_run are append-only already
--   (migration 0002); project, cluster and node_type get triggers that
--   refuse such a DELETE or key change; rate_card and storage_rate had them;
--   all five refuse TRUNCATE once anything is recorded.
-- * Concurrency: the check locks the referenced rows of those five tables
--   FOR KEY SHARE, as a foreign key does, once per referenced row. A DELETE
--   racing an insert waits for it, then sees the new reference and refuses.

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

CREATE FUNCTION hl_job_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    bad record;
BEGIN
    PERFORM 1 FROM cluster c WHERE c.id IN (SELECT n.cluster_id FROM new_rows n) FOR KEY SHARE OF c;
    SELECT n.id, n.cluster_id INTO bad FROM new_rows n
     WHERE n.cluster_id IN (SELECT w.id FROM (SELECT DISTINCT cluster_id AS id FROM new_rows) w
                             WHERE NOT EXISTS (SELECT 1 FROM cluster c WHERE c.id = w.id))
     LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job', bad.id, 'cluster', bad.cluster_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_references AFTER INSERT ON job REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_job_references();
ALTER TABLE job ENABLE ALWAYS TRIGGER job_references;

CREATE FUNCTION hl_job_record_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    bad record;
BEGIN
    PERFORM 1 FROM project p WHERE p.id IN (SELECT n.project_id FROM new_rows n) FOR KEY SHARE OF p;
    PERFORM 1 FROM node_type t WHERE t.id IN (SELECT n.node_type_id FROM new_rows n) FOR KEY SHARE OF t;
    SELECT n.id, n.project_id INTO bad FROM new_rows n
     WHERE n.project_id IN (SELECT w.id FROM (SELECT DISTINCT project_id AS id FROM new_rows) w
                             WHERE NOT EXISTS (SELECT 1 FROM project p WHERE p.id = w.id))
     LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job_record', bad.id, 'project', bad.project_id::text);
    END IF;
    -- One record per run and few runs per statement: probed row by row.
    SELECT n.id, n.job_id, n.cluster_id, n.started_at INTO bad FROM new_rows n
     WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.id = n.job_id AND j.cluster_id = n.cluster_id
                                             AND j.started_at = n.started_at)
     LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job_record', bad.id, 'job',
                                     format('%s (cluster %s, started %s)', bad.job_id, bad.cluster_id, bad.started_at));
    END IF;
    SELECT n.id, n.cluster_id, n.node_type_id INTO bad FROM new_rows n
     WHERE (n.cluster_id, n.node_type_id) IN (
               SELECT w.cluster_id, w.node_type_id
                 FROM (SELECT DISTINCT cluster_id, node_type_id FROM new_rows) w
                WHERE NOT EXISTS (SELECT 1 FROM node_type t WHERE t.id = w.node_type_id AND t.cluster_id = w.cluster_id))
     LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('job_record', bad.id, 'node type',
                                     format('%s of cluster %s', bad.node_type_id, bad.cluster_id));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_record_references AFTER INSERT ON job_record REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_job_record_references();
ALTER TABLE job_record ENABLE ALWAYS TRIGGER job_record_references;

CREATE FUNCTION hl_ledger_entry_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    bad record;
    row_id bigint;
BEGIN
    PERFORM 1 FROM project p WHERE p.id IN (SELECT n.project_id FROM new_rows n) FOR KEY SHARE OF p;
    PERFORM 1 FROM rate_card c WHERE c.id IN (SELECT n.rate_card_id FROM new_rows n) FOR KEY SHARE OF c;
    PERFORM 1 FROM storage_rate s WHERE s.id IN (SELECT n.storage_rate_id FROM new_rows n) FOR KEY SHARE OF s;
    SELECT m.what, m.ref INTO bad
      FROM (SELECT 'project' AS what, w.ref FROM (SELECT DISTINCT project_id AS ref FROM new_rows) w
             WHERE NOT EXISTS (SELECT 1 FROM project p WHERE p.id = w.ref)
            UNION ALL
            SELECT 'job record', w.ref
              FROM (SELECT job_record_id AS ref FROM new_rows WHERE job_record_id IS NOT NULL) w
             WHERE NOT EXISTS (SELECT 1 FROM job_record r WHERE r.id = w.ref)
            UNION ALL
            SELECT 'rate card', w.ref
              FROM (SELECT DISTINCT rate_card_id AS ref FROM new_rows WHERE rate_card_id IS NOT NULL) w
             WHERE NOT EXISTS (SELECT 1 FROM rate_card c WHERE c.id = w.ref)
            UNION ALL
            SELECT 'storage rate', w.ref
              FROM (SELECT DISTINCT storage_rate_id AS ref FROM new_rows WHERE storage_rate_id IS NOT NULL) w
             WHERE NOT EXISTS (SELECT 1 FROM storage_rate s WHERE s.id = w.ref)
            UNION ALL
            SELECT 'billing run', w.ref
              FROM (SELECT DISTINCT billing_run_id AS ref FROM new_rows WHERE billing_run_id IS NOT NULL) w
             WHERE NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.id = w.ref)
            UNION ALL
            SELECT 'ledger entry', w.ref
              FROM (SELECT DISTINCT corrects_id AS ref FROM new_rows WHERE corrects_id IS NOT NULL) w
             WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.id = w.ref)) m
     LIMIT 1;
    IF FOUND THEN
        -- The first new row with that key, for the message.
        SELECT min(n.id) INTO row_id FROM new_rows n
         WHERE bad.ref = CASE bad.what WHEN 'project' THEN n.project_id
                                       WHEN 'job record' THEN n.job_record_id
                                       WHEN 'rate card' THEN n.rate_card_id
                                       WHEN 'storage rate' THEN n.storage_rate_id
                                       WHEN 'billing run' THEN n.billing_run_id
                                       ELSE n.corrects_id END;
        PERFORM hl_missing_reference('ledger_entry', row_id, bad.what, bad.ref::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_entry_references AFTER INSERT ON ledger_entry REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_ledger_entry_references();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_references;

CREATE FUNCTION hl_storage_charge_segment_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.ledger_entry_id, n.first_day INTO bad FROM new_rows n
     WHERE n.ledger_entry_id IN (SELECT w.id FROM (SELECT DISTINCT ledger_entry_id AS id FROM new_rows) w
                                  WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.id = w.id))
     LIMIT 1;
    IF FOUND THEN
        PERFORM hl_missing_reference('storage_charge_segment', bad.ledger_entry_id, 'ledger entry',
                                     bad.ledger_entry_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER storage_charge_segment_references AFTER INSERT ON storage_charge_segment
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hl_storage_charge_segment_references();
ALTER TABLE storage_charge_segment ENABLE ALWAYS TRIGGER storage_charge_segment_references;

-- A referenced project, cluster or node type keeps its key: no DELETE, no
-- key change (`SET id = DEFAULT`) while anything recorded refers to it.
CREATE FUNCTION hl_project_keep_referenced() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
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
