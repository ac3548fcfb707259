-- Reference data: the center, its clusters, node types and queue mapping,
-- dated rate cards and storage rates, projects and their quota history.
--
-- Conventions: money and quantities are NUMERIC(p,s), instants TIMESTAMPTZ,
-- sizes in bytes; every invariant the database can hold is a constraint.
-- Dated rows are half-open [valid_from, valid_until), valid_until NULL = open.

-- Exact division rounded half away from zero to `places` decimals: the one
-- division rule of the pricing engine (src/domain/units.rs, div_round), so
-- auditors reproduce every derived quantity digit for digit.
CREATE FUNCTION hl_div_round(n numeric, d numeric, places integer) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT round(((sign(n) * sign(d)
                   * div(2 * abs(n) * ('1e' || places)::numeric + abs(d), 2 * abs(d)))::text
                  || 'e-' || places)::numeric, places)
$$;
COMMENT ON FUNCTION hl_div_round(numeric, numeric, integer) IS
    'n / d, exact, rounded half away from zero to `places` decimal places (the pricing engine''s division).';

-- Whether PostgreSQL knows a time zone name.
CREATE FUNCTION hl_is_time_zone(tz text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    PERFORM '2000-01-01 00:00:00+00'::timestamptz AT TIME ZONE tz;
    RETURN true;
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN false;
END
$$;

-- Refuse UPDATE, DELETE and TRUNCATE on append-only tables. Attached with
-- ENABLE ALWAYS so it also fires under session_replication_role = replica.
CREATE FUNCTION hl_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'HL001',
              HINT = 'Corrections are new rows (a reversal, a refund, an adjustment, a new dated row).';
END
$$;

-- The installation: one row.
CREATE TABLE center (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    currency    text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    time_zone   text NOT NULL CHECK (hl_is_time_zone(time_zone)),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE center IS 'The installation: its name, its one currency, and the billing time zone that decides accounting months (SPEC D6, D8).';

CREATE TABLE cluster (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    scheduler   text NOT NULL CHECK (scheduler IN ('slurm', 'pbs')),
    -- The zone of the scheduler's local timestamps (sacct, jobcomp, PBS logs
    -- without zone); NULL = the center's time zone.
    time_zone   text CHECK (time_zone IS NULL OR hl_is_time_zone(time_zone)),
    description text NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX cluster_name_key ON cluster (lower(name));

CREATE TABLE node_type (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id     bigint NOT NULL REFERENCES cluster (id),
    name           text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,63}$'),
    cores_per_node integer NOT NULL CHECK (cores_per_node BETWEEN 1 AND 1000000),
    gpus_per_node  integer NOT NULL DEFAULT 0 CHECK (gpus_per_node BETWEEN 0 AND 100000),
    description    text NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    CONSTRAINT node_type_name_key UNIQUE (cluster_id, name),
    CONSTRAINT node_type_cluster_key UNIQUE (cluster_id, id)
);

-- Queue/partition -> node type, per cluster (SPEC D4). Unknown queues are
-- errors, so there is no default row.
CREATE TABLE queue_map (
    cluster_id   bigint NOT NULL REFERENCES cluster (id),
    queue        text NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),
    node_type_id bigint NOT NULL,
    PRIMARY KEY (cluster_id, queue),
    FOREIGN KEY (cluster_id, node_type_id) REFERENCES node_type (cluster_id, id)
);

-- What one node type costs and how it is counted, for a period (SPEC D5).
CREATE TABLE rate_card (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id            bigint NOT NULL,
    node_type_id          bigint NOT NULL,
    valid_from            timestamptz NOT NULL,
    valid_until           timestamptz,
    core_hour_price       numeric(20,10) NOT NULL CHECK (core_hour_price >= 0),
    gpu_hour_price        numeric(20,10) NOT NULL CHECK (gpu_hour_price >= 0),
    memory_per_core_bytes bigint NOT NULL CHECK (memory_per_core_bytes > 0),
    cores_per_node        integer NOT NULL CHECK (cores_per_node BETWEEN 1 AND 1000000),
    created_at            timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (cluster_id, node_type_id) REFERENCES node_type (cluster_id, id),
    CONSTRAINT rate_card_period CHECK (valid_until IS NULL OR valid_until > valid_from),
    CONSTRAINT rate_card_no_overlap EXCLUDE USING gist (
        int8range(node_type_id, node_type_id, '[]') WITH &&,
        tstzrange(valid_from, valid_until, '[)') WITH &&
    )
);
COMMENT ON TABLE rate_card IS 'Dated prices per node type: a job is priced by the card in force at its submit time (SPEC D5). A card that has priced a charge never changes (trigger rate_card_guard).';

-- The price of reserved project storage, per TB per month (SPEC R6).
CREATE TABLE storage_rate (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    valid_from     timestamptz NOT NULL,
    valid_until    timestamptz,
    tb_month_price numeric(20,10) NOT NULL CHECK (tb_month_price >= 0),
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT storage_rate_period CHECK (valid_until IS NULL OR valid_until > valid_from),
    CONSTRAINT storage_rate_no_overlap EXCLUDE USING gist (
        tstzrange(valid_from, valid_until, '[)') WITH &&
    )
);

-- A project is charged; its code is the scheduler's account name, matched
-- without regard to case (Slurm lower-cases account names).
CREATE TABLE project (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code       text NOT NULL CHECK (code = btrim(code) AND length(code) BETWEEN 1 AND 128 AND code !~ '[[:cntrl:]]'),
    name       text NOT NULL DEFAULT '' CHECK (length(name) <= 500),
    pi         text NOT NULL DEFAULT '' CHECK (length(pi) <= 500),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX project_code_key ON project (lower(code));

-- Quota history: a project's quota from an instant on, until the next row.
-- Never rewritten (append-only); a change is a new row.
CREATE TABLE storage_quota (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id     bigint NOT NULL REFERENCES project (id),
    effective_from timestamptz NOT NULL,
    quota_tb       numeric(16,6) NOT NULL CHECK (quota_tb >= 0 AND quota_tb <= 1000000000),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    recorded_by    text NOT NULL CHECK (length(recorded_by) BETWEEN 1 AND 200),
    CONSTRAINT storage_quota_key UNIQUE (project_id, effective_from)
);
CREATE TRIGGER storage_quota_append_only BEFORE UPDATE OR DELETE ON storage_quota
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER storage_quota_no_truncate BEFORE TRUNCATE ON storage_quota
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE storage_quota ENABLE ALWAYS TRIGGER storage_quota_append_only;
ALTER TABLE storage_quota ENABLE ALWAYS TRIGGER storage_quota_no_truncate;
