-- Jobs, the ledger, billing runs and closed periods.

-- The advisory lock that orders postings against the closing of a month:
-- every posting transaction holds it shared, `close` holds it exclusively.
CREATE FUNCTION hl_period_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 7523094288207667809::bigint $$;

-- A job run (SPEC D9): cluster, scheduler job id with array index, submit
-- time and start time. Schedulers recycle ids (told apart by submit time)
-- and requeued runs share an id (told apart by start time).
CREATE TABLE job (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id       bigint NOT NULL REFERENCES cluster (id),
    scheduler_job_id text NOT NULL CHECK (length(scheduler_job_id) BETWEEN 1 AND 256 AND scheduler_job_id !~ '[[:cntrl:]]'),
    array_index      integer CHECK (array_index >= 0),
    submitted_at     timestamptz,
    started_at       timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_submitted_before_start CHECK (submitted_at IS NULL OR submitted_at <= started_at),
    CONSTRAINT job_record_ref UNIQUE (id, cluster_id, started_at)
);
CREATE UNIQUE INDEX job_run_key ON job (
    cluster_id, scheduler_job_id, coalesce(array_index, -1),
    coalesce(submitted_at, '-infinity'::timestamptz), started_at);

-- Every distinct content recorded for a job run: the original, revisions
-- that do not change the charge (exit code, state, name), and superseding
-- records that do (posted with reversals of the previous charges).
CREATE TABLE job_record (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id              bigint NOT NULL,
    cluster_id          bigint NOT NULL,
    started_at          timestamptz NOT NULL,
    revision            integer NOT NULL CHECK (revision >= 1),
    kind                text NOT NULL CHECK (kind IN ('original', 'revision', 'supersede')),
    project_id          bigint NOT NULL REFERENCES project (id),
    node_type_id        bigint NOT NULL,
    queue               text CHECK (length(queue) <= 128),
    user_name           text NOT NULL DEFAULT '' CHECK (length(user_name) <= 256),
    job_name            text NOT NULL DEFAULT '' CHECK (length(job_name) <= 1024),
    state               text NOT NULL DEFAULT '' CHECK (length(state) <= 256),
    exit_code           text CHECK (length(exit_code) <= 64),
    ended_at            timestamptz NOT NULL,
    nodes               integer NOT NULL CHECK (nodes BETWEEN 1 AND 1000000),
    cores               integer NOT NULL CHECK (cores BETWEEN 1 AND 100000000),
    memory_bytes        bigint CHECK (memory_bytes BETWEEN 0 AND 1152921504606846976),
    gpus                integer NOT NULL DEFAULT 0 CHECK (gpus BETWEEN 0 AND 10000000),
    -- sha256 of the fields that change the charge, and of all fields.
    charge_fingerprint  bytea NOT NULL CHECK (length(charge_fingerprint) = 32),
    content_fingerprint bytea NOT NULL CHECK (length(content_fingerprint) = 32),
    source_format       text NOT NULL CHECK (source_format IN ('slurm', 'pbs', 'jsonl', 'json', 'jobcomp', 'cli')),
    source_ref          text NOT NULL DEFAULT '' CHECK (length(source_ref) <= 4096),
    -- The scheduler's record as received, verbatim.
    raw                 text NOT NULL,
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    recorded_by         text NOT NULL CHECK (length(recorded_by) BETWEEN 1 AND 200),
    FOREIGN KEY (job_id, cluster_id, started_at) REFERENCES job (id, cluster_id, started_at),
    FOREIGN KEY (cluster_id, node_type_id) REFERENCES node_type (cluster_id, id),
    CONSTRAINT job_record_revision_key UNIQUE (job_id, revision),
    CONSTRAINT job_record_content_key UNIQUE (job_id, content_fingerprint),
    CONSTRAINT job_record_ends_after_start CHECK (ended_at >= started_at),
    CONSTRAINT job_record_first_is_original CHECK ((revision = 1) = (kind = 'original'))
);
CREATE INDEX job_record_project ON job_record (project_id);

-- A billing run (monthly storage billing): when, by whom, what it posted.
CREATE TABLE billing_run (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('storage')),
    period        date NOT NULL CHECK (period = date_trunc('month', period)::date),
    run_at        timestamptz NOT NULL DEFAULT now(),
    author        text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    project_count integer NOT NULL CHECK (project_count >= 0),
    entry_count   integer NOT NULL CHECK (entry_count >= 0),
    total         numeric(18,2) NOT NULL,
    CONSTRAINT billing_run_once UNIQUE (kind, period)
);

-- The ledger (SPEC D8, D10). Never updated or deleted; corrections are new
-- entries. Posting order is `id`.
CREATE TABLE ledger_entry (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    posted_at       timestamptz NOT NULL DEFAULT now(),
    -- The accounting month (first day).
    period          date NOT NULL,
    project_id      bigint NOT NULL REFERENCES project (id),
    kind            text NOT NULL,
    metric          text CHECK (metric IN ('core_hours', 'gpu_hours', 'tb_months')),
    job_record_id   bigint REFERENCES job_record (id),
    rate_card_id    bigint REFERENCES rate_card (id),
    storage_rate_id bigint REFERENCES storage_rate (id),
    billing_run_id  bigint REFERENCES billing_run (id),
    -- The entry a reversal or refund corrects.
    corrects_id     bigint REFERENCES ledger_entry (id),
    quantity        numeric(30,12) NOT NULL,
    unit_rate       numeric(20,10) NOT NULL,
    amount_exact    numeric(50,22) NOT NULL,
    amount          numeric(18,2) NOT NULL,
    -- Posted after its own month was closed (SPEC D6).
    late            boolean NOT NULL DEFAULT false,
    author          text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    reason          text CHECK (length(reason) BETWEEN 1 AND 2000),
    CONSTRAINT ledger_entry_period_is_month CHECK (period = date_trunc('month', period)::date),
    CONSTRAINT ledger_entry_exact CHECK (amount_exact = quantity * unit_rate),
    CONSTRAINT ledger_entry_rounded CHECK (amount = round(amount_exact, 2)),
    CONSTRAINT ledger_entry_shape CHECK (CASE kind
        WHEN 'job' THEN metric IN ('core_hours', 'gpu_hours') AND job_record_id IS NOT NULL
            AND rate_card_id IS NOT NULL AND storage_rate_id IS NULL AND billing_run_id IS NULL
            AND corrects_id IS NULL AND quantity >= 0 AND unit_rate >= 0
        WHEN 'storage' THEN metric = 'tb_months' AND storage_rate_id IS NOT NULL
            AND billing_run_id IS NOT NULL AND job_record_id IS NULL AND rate_card_id IS NULL
            AND corrects_id IS NULL AND quantity >= 0 AND unit_rate >= 0
        WHEN 'reversal' THEN corrects_id IS NOT NULL
        WHEN 'refund' THEN corrects_id IS NOT NULL AND reason IS NOT NULL AND amount <= 0
        WHEN 'adjustment' THEN corrects_id IS NULL AND reason IS NOT NULL AND metric IS NULL
            AND job_record_id IS NULL AND rate_card_id IS NULL AND storage_rate_id IS NULL
        ELSE false END)
);
COMMENT ON TABLE ledger_entry IS 'Priced, immutable charges. amount_exact = quantity × unit_rate; amount = round(amount_exact, 2), half away from zero (SPEC D8).';
-- At most one reversal per entry, also under races.
CREATE UNIQUE INDEX ledger_entry_one_reversal ON ledger_entry (corrects_id) WHERE kind = 'reversal';
CREATE INDEX ledger_entry_project_period ON ledger_entry (project_id, period);
CREATE INDEX ledger_entry_period ON ledger_entry (period, id);
CREATE INDEX ledger_entry_job_record ON ledger_entry (job_record_id) WHERE job_record_id IS NOT NULL;
CREATE INDEX ledger_entry_rate_card ON ledger_entry (rate_card_id) WHERE rate_card_id IS NOT NULL;
CREATE INDEX ledger_entry_storage_rate ON ledger_entry (storage_rate_id) WHERE storage_rate_id IS NOT NULL;
CREATE INDEX ledger_entry_corrects ON ledger_entry (corrects_id) WHERE corrects_id IS NOT NULL;

-- The days × quota × rate that produced a storage entry (SPEC D7).
CREATE TABLE storage_charge_segment (
    ledger_entry_id bigint NOT NULL REFERENCES ledger_entry (id),
    first_day       date NOT NULL,
    last_day        date NOT NULL,
    days            integer NOT NULL,
    quota_tb        numeric(16,6) NOT NULL CHECK (quota_tb > 0),
    tb_month_price  numeric(20,10) NOT NULL CHECK (tb_month_price >= 0),
    PRIMARY KEY (ledger_entry_id, first_day),
    CONSTRAINT storage_charge_segment_days CHECK (days = last_day - first_day + 1 AND days BETWEEN 1 AND 31)
);

-- A closed month (SPEC D11): frozen, sealed. Closed months form a prefix of
-- time: everything up to the latest closed month is closed.
CREATE TABLE closed_period (
    period         date PRIMARY KEY CHECK (period = date_trunc('month', period)::date),
    closed_at      timestamptz NOT NULL DEFAULT now(),
    closed_by      text NOT NULL CHECK (length(closed_by) BETWEEN 1 AND 200),
    entry_count    bigint NOT NULL CHECK (entry_count >= 0),
    total          numeric(18,2) NOT NULL,
    seal_algorithm text NOT NULL CHECK (seal_algorithm IN ('sha256-chain-v1')),
    seal           bytea NOT NULL CHECK (length(seal) = 32)
);

-- Months are closed in order, one after the other.
CREATE FUNCTION hl_closed_period_in_order() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last_closed date;
BEGIN
    SELECT max(period) INTO last_closed FROM closed_period;
    IF last_closed IS NOT NULL AND NEW.period <> (last_closed + interval '1 month')::date THEN
        RAISE EXCEPTION 'cannot close %: the next month to close is %', to_char(NEW.period, 'YYYY-MM'),
            to_char(last_closed + interval '1 month', 'YYYY-MM') USING ERRCODE = 'HL002';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER closed_period_in_order BEFORE INSERT ON closed_period
    FOR EACH ROW EXECUTE FUNCTION hl_closed_period_in_order();
ALTER TABLE closed_period ENABLE ALWAYS TRIGGER closed_period_in_order;

-- Checks on every statement that posts entries: nothing goes into a closed
-- month, and a reversal mirrors the entry it reverses exactly.
CREATE FUNCTION hl_ledger_entry_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last_closed date;
    bad record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hl_period_lock_key());
    SELECT max(period) INTO last_closed FROM closed_period;
    IF last_closed IS NOT NULL THEN
        SELECT n.id, n.period INTO bad FROM new_entries n WHERE n.period <= last_closed LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'ledger entry % would post into %, which is closed', bad.id, to_char(bad.period, 'YYYY-MM')
                USING ERRCODE = 'HL002';
        END IF;
    END IF;
    SELECT n.id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'reversal'
       AND (o.kind = 'reversal' OR n.project_id <> o.project_id OR n.quantity <> -o.quantity
            OR n.unit_rate <> o.unit_rate OR n.amount_exact <> -o.amount_exact)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % does not mirror the entry it reverses', bad.id USING ERRCODE = 'HL003';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_entry_guard AFTER INSERT ON ledger_entry
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION hl_ledger_entry_guard();
ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_guard;

-- Append-only: the ledger and everything that explains it.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['job', 'job_record', 'ledger_entry', 'storage_charge_segment', 'closed_period', 'billing_run'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION hl_refuse_change()',
                       t || '_append_only', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change()',
                       t || '_no_truncate', t);
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_append_only');
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_no_truncate');
    END LOOP;
END
$$;

-- A rate card or storage rate that has priced a charge never changes; it
-- may only be closed (valid_until set) after every instant it priced.
CREATE FUNCTION hl_rate_card_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE rate_card_id = OLD.id) THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE'
       OR (NEW.cluster_id, NEW.node_type_id, NEW.valid_from, NEW.core_hour_price, NEW.gpu_hour_price,
           NEW.memory_per_core_bytes, NEW.cores_per_node)
          IS DISTINCT FROM
          (OLD.cluster_id, OLD.node_type_id, OLD.valid_from, OLD.core_hour_price, OLD.gpu_hour_price,
           OLD.memory_per_core_bytes, OLD.cores_per_node) THEN
        RAISE EXCEPTION 'rate card % has priced charges and cannot be changed or removed', OLD.id
            USING ERRCODE = 'HL004', HINT = 'Add a new dated rate card instead.';
    END IF;
    IF NEW.valid_until IS NOT NULL AND EXISTS (
        SELECT 1 FROM ledger_entry e
          JOIN job_record r ON r.id = e.job_record_id
          JOIN job j ON j.id = r.job_id
         WHERE e.rate_card_id = OLD.id AND coalesce(j.submitted_at, j.started_at) >= NEW.valid_until) THEN
        RAISE EXCEPTION 'rate card % priced jobs submitted after %; it cannot end before them', OLD.id, NEW.valid_until
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER rate_card_guard BEFORE UPDATE OR DELETE ON rate_card
    FOR EACH ROW EXECUTE FUNCTION hl_rate_card_guard();
ALTER TABLE rate_card ENABLE ALWAYS TRIGGER rate_card_guard;

CREATE FUNCTION hl_storage_rate_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE storage_rate_id = OLD.id) THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE'
       OR (NEW.valid_from, NEW.tb_month_price) IS DISTINCT FROM (OLD.valid_from, OLD.tb_month_price) THEN
        RAISE EXCEPTION 'storage rate % has priced charges and cannot be changed or removed', OLD.id
            USING ERRCODE = 'HL004', HINT = 'Add a new dated storage rate instead.';
    END IF;
    IF NEW.valid_until IS NOT NULL AND EXISTS (
        SELECT 1 FROM ledger_entry e
          JOIN storage_charge_segment s ON s.ledger_entry_id = e.id
         CROSS JOIN center c
         WHERE e.storage_rate_id = OLD.id
           AND ((s.last_day + 1)::timestamp AT TIME ZONE c.time_zone) > NEW.valid_until) THEN
        RAISE EXCEPTION 'storage rate % priced days after %; it cannot end before them', OLD.id, NEW.valid_until
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER storage_rate_guard BEFORE UPDATE OR DELETE ON storage_rate
    FOR EACH ROW EXECUTE FUNCTION hl_storage_rate_guard();
ALTER TABLE storage_rate ENABLE ALWAYS TRIGGER storage_rate_guard;

-- The billing time zone and the currency are fixed once anything is posted.
CREATE FUNCTION hl_center_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.currency, NEW.time_zone) IS DISTINCT FROM (OLD.currency, OLD.time_zone)
       AND EXISTS (SELECT 1 FROM ledger_entry) THEN
        RAISE EXCEPTION 'the currency and billing time zone cannot change once charges are posted'
            USING ERRCODE = 'HL004';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER center_guard BEFORE UPDATE ON center
    FOR EACH ROW EXECUTE FUNCTION hl_center_guard();
ALTER TABLE center ENABLE ALWAYS TRIGGER center_guard;
