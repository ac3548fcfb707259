-- The queue map is dated (docs/rules.md D4). A queue moved to another node
-- type priced every job recorded from then on on the new one, also a late
-- record of a job that ran before the move, and a queue removed from the
-- file turned such a late record into an unknown queue (an operator's year,
-- 2026-12-07): the map had one row per queue, rewritten in place. Now each
-- row holds for a period, as a rate card does, and a job's queue is read
-- through the row in force when the job started (the nodes the queue had
-- then; its price is still that of its submit time, D5).
--
-- A row is never changed or deleted, only ended, and never before now (the
-- instant its transaction took the rules lock, which every posting holds
-- shared): a job's start is never later than its recording, so no job
-- priced through a row can fall after its end. A row starts now, or at
-- -infinity when it is its queue's first: `config apply` ends the row in
-- force and starts the new one at the same instant (a move), ends it (a
-- removal), starts a queue mapped again after a removal from now (a job of
-- the gap may have been priced without the queue: a GPU job as `gpu`), and
-- starts a new queue's first row at -infinity (as before: its late records,
-- refused as an unknown queue, price once it is mapped). Rows before this
-- migration hold from -infinity.

ALTER TABLE queue_map DROP CONSTRAINT queue_map_pkey;
ALTER TABLE queue_map
    ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ADD COLUMN valid_from timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN valid_until timestamptz,
    ADD CONSTRAINT queue_map_period CHECK (valid_until IS NULL OR valid_until > valid_from);
CREATE UNIQUE INDEX queue_map_in_force ON queue_map (cluster_id, queue) WHERE valid_until IS NULL;
CREATE UNIQUE INDEX queue_map_from ON queue_map (cluster_id, queue, valid_from);
COMMENT ON TABLE queue_map IS 'Dated queue/partition -> node type, per cluster (SPEC D4): a job is read through the row in force at its pricing instant. Rows are only ended, never at an instant before now (trigger queue_map_guard).';

CREATE FUNCTION hl_queue_map_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
DECLARE
    locked_at timestamptz;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'queue % of cluster % maps to node type % from %: a queue mapping is never removed, only ended',
            OLD.queue, OLD.cluster_id, OLD.node_type_id, OLD.valid_from
            USING ERRCODE = 'HL004', HINT = 'Set its valid_until (config apply does, for a queue moved or removed).';
    END IF;
    -- "Now" is when this transaction took the rules lock (db::RULES_LOCK,
    -- taken here if it has not: a posting holds it shared while it prices
    -- jobs, so none is priced from then until this transaction ends), as
    -- db::lock_rules records it, else the clock once the lock is held: not
    -- the transaction's start, after which jobs may have been priced
    -- through the row being ended; never before that start (a setting
    -- made by hand earlier than it is not a lock's).
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    locked_at := greatest(coalesce(nullif(current_setting('hpc_ledger.rules_locked_at', true), '')::timestamptz,
                                   clock_timestamp()),
                          now());
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.cluster_id, NEW.queue, NEW.node_type_id, NEW.valid_from)
           IS DISTINCT FROM (OLD.id, OLD.cluster_id, OLD.queue, OLD.node_type_id, OLD.valid_from) THEN
            RAISE EXCEPTION 'queue % of cluster % maps to node type % from %: a queue mapping is never changed, only ended',
                OLD.queue, OLD.cluster_id, OLD.node_type_id, OLD.valid_from
                USING ERRCODE = 'HL004', HINT = 'End it and add a new row from the same instant.';
        END IF;
        IF NEW.valid_until IS DISTINCT FROM OLD.valid_until
           AND (NEW.valid_until < locked_at OR OLD.valid_until < locked_at) THEN
            RAISE EXCEPTION 'queue % of cluster % cannot change its end from % to %: jobs may have been priced through it since; a mapping ends no earlier than now (%)',
                OLD.queue, OLD.cluster_id, coalesce(OLD.valid_until::text, 'open'),
                coalesce(NEW.valid_until::text, 'open'), locked_at
                USING ERRCODE = 'HL004', HINT = 'config apply ends a mapping at the instant it takes the rules lock.';
        END IF;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.valid_from < locked_at
       AND (NEW.valid_from <> '-infinity'
            OR EXISTS (SELECT 1 FROM queue_map q WHERE q.cluster_id = NEW.cluster_id AND q.queue = NEW.queue)) THEN
        RAISE EXCEPTION 'queue % of cluster % cannot be mapped from % (before now, %): only a queue''s first mapping starts in the past (at -infinity)',
            NEW.queue, NEW.cluster_id, NEW.valid_from, locked_at
            USING ERRCODE = 'HL004';
    END IF;
    IF EXISTS (SELECT 1 FROM queue_map q
                WHERE q.cluster_id = NEW.cluster_id AND q.queue = NEW.queue AND q.id <> NEW.id
                  AND tstzrange(q.valid_from, q.valid_until, '[)') && tstzrange(NEW.valid_from, NEW.valid_until, '[)')) THEN
        RAISE EXCEPTION 'queue % of cluster % would map to two node types at once from %', NEW.queue, NEW.cluster_id, NEW.valid_from
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER queue_map_guard BEFORE INSERT OR UPDATE OR DELETE ON queue_map
    FOR EACH ROW EXECUTE FUNCTION hl_queue_map_guard();
ALTER TABLE queue_map ENABLE ALWAYS TRIGGER queue_map_guard;
CREATE TRIGGER queue_map_truncate_when_recorded BEFORE TRUNCATE ON queue_map
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_truncate_when_recorded();
ALTER TABLE queue_map ENABLE ALWAYS TRIGGER queue_map_truncate_when_recorded;
