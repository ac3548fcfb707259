-- Recording jobs: the records that could not be charged (kept for
-- re-processing), and a version number of the pricing rules so long-running
-- importers notice a configuration change.

-- A record that was not charged: malformed, unknown cluster/project/queue,
-- no rate card in force, absurd values, or a conflicting duplicate. Kept
-- with everything needed to read it again (`import --retry-rejected`).
CREATE TABLE rejected_record (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_format  text NOT NULL CHECK (source_format IN ('slurm', 'pbs', 'jsonl', 'json', 'jobcomp', 'cli')),
    -- Where it was read: file:line, "stdin:3", "job record".
    source_ref     text NOT NULL CHECK (length(source_ref) <= 4096),
    -- How to read `raw` again (field list, delimiter, defaults), as JSON.
    read_options   jsonb NOT NULL DEFAULT '{}',
    raw            text NOT NULL,
    raw_sha256     bytea NOT NULL CHECK (length(raw_sha256) = 32),
    kind           text NOT NULL CHECK (kind IN ('malformed', 'unknown_cluster', 'unknown_project', 'unknown_queue',
                                                 'no_rate_card', 'invalid', 'conflict', 'database')),
    reason         text NOT NULL,
    -- The job it concerns, when known: cluster/job id[_index].
    job_key        text,
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    times_seen     integer NOT NULL DEFAULT 1 CHECK (times_seen >= 1),
    resolved_at    timestamptz,
    resolution     text CHECK (resolution IN ('recorded', 'replayed', 'revised', 'superseded')),
    CONSTRAINT rejected_record_once UNIQUE (source_format, raw_sha256),
    CONSTRAINT rejected_record_resolution CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);
CREATE INDEX rejected_record_open ON rejected_record (id) WHERE resolved_at IS NULL;

-- Bumped by every change to the pricing rules.
CREATE TABLE rules_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO rules_version (version) VALUES (1);

CREATE FUNCTION hl_bump_rules_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rules_version SET version = version + 1;
    RETURN NULL;
END
$$;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['center', 'cluster', 'node_type', 'queue_map', 'rate_card', 'storage_rate'] LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %I FOR EACH STATEMENT EXECUTE FUNCTION hl_bump_rules_version()',
                       t || '_rules_version', t);
    END LOOP;
END
$$;
