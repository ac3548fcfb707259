-- Rate classes and discounts (issue 16, items 4-6).
--
-- A rate class (internal, academic, commercial, ...) is a set of prices: a
-- project belongs to a class by a dated history (`project_class`, never
-- rewritten, like quotas; no row = the default class); a rate card or
-- storage rate belongs to one class (NULL = the default class). A job is
-- priced by the card of its project's class in force at its pricing
-- instant, storage day by day by the storage rate of the project's class at
-- each day's end. A class has only its own prices: a job of a class with no
-- card in force is refused (kept, retried once a card exists), never priced
-- at another class's rate.
--
-- A discount is a dated percentage for one project or one class. Every job
-- and storage charge whose pricing instant (a job's submit time; the last
-- instant of a storage charge's month) falls in a discount's period gets
-- one `discount` line: linked to the charge (corrects_id), in its month,
-- metric and charging rules, amount_exact = -(the charge's amount_exact ×
-- percent ÷ 100), rounded once half away from zero (so a 100 % discount
-- nets exactly zero). A project's own discount wins over its class's;
-- discounts of one project (or one class) never overlap.
--
-- A rule change never re-prices or flags a past charge: a class change or a
-- discount whose period would cover a charge already posted is refused,
-- like ending a rate card before instants it priced. The center ends it or
-- starts it later, and credits past charges with `hpc-ledger adjust`.

CREATE TABLE rate_class (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE
        CHECK (name ~ '^[a-z][a-z0-9_-]{0,63}$' AND name <> 'default'),
    description text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rate_class IS
    'Sets of prices (internal, academic, commercial, ...): rate cards and storage rates of a class price the projects in it; no class is the default.';

-- A class keeps its id and name for good; its description may change.
CREATE FUNCTION hl_rate_class_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.id <> OLD.id OR NEW.name <> OLD.name THEN
        RAISE EXCEPTION 'rate class % (%) cannot be removed or renamed', OLD.id, OLD.name
            USING ERRCODE = 'HL004', HINT = 'Classes are kept for good: their prices and projects refer to them.';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER rate_class_guard BEFORE UPDATE OR DELETE ON rate_class
    FOR EACH ROW EXECUTE FUNCTION hl_rate_class_guard();
CREATE TRIGGER rate_class_no_truncate BEFORE TRUNCATE ON rate_class
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE rate_class ENABLE ALWAYS TRIGGER rate_class_guard;
ALTER TABLE rate_class ENABLE ALWAYS TRIGGER rate_class_no_truncate;

CREATE TABLE project_class (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id     bigint NOT NULL REFERENCES project (id),
    -- NULL: back to the default class.
    rate_class_id  bigint REFERENCES rate_class (id),
    effective_from timestamptz NOT NULL,
    author         text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, effective_from)
);
COMMENT ON TABLE project_class IS
    'The class of each project from an instant on, until its next change; a project without a row is in the default class. Append-only.';
CREATE TRIGGER project_class_append_only BEFORE UPDATE OR DELETE ON project_class
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER project_class_no_truncate BEFORE TRUNCATE ON project_class
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE project_class ENABLE ALWAYS TRIGGER project_class_append_only;
ALTER TABLE project_class ENABLE ALWAYS TRIGGER project_class_no_truncate;

ALTER TABLE rate_card ADD COLUMN rate_class_id bigint REFERENCES rate_class (id);
ALTER TABLE rate_card DROP CONSTRAINT rate_card_no_overlap;
ALTER TABLE rate_card ADD CONSTRAINT rate_card_no_overlap EXCLUDE USING gist (
    int8range(node_type_id, node_type_id, '[]') WITH &&,
    int8range(coalesce(rate_class_id, 0), coalesce(rate_class_id, 0), '[]') WITH &&,
    tstzrange(valid_from, valid_until, '[)') WITH &&
);
ALTER TABLE storage_rate ADD COLUMN rate_class_id bigint REFERENCES rate_class (id);
ALTER TABLE storage_rate DROP CONSTRAINT storage_rate_no_overlap;
ALTER TABLE storage_rate ADD CONSTRAINT storage_rate_no_overlap EXCLUDE USING gist (
    int8range(coalesce(rate_class_id, 0), coalesce(rate_class_id, 0), '[]') WITH &&,
    tstzrange(valid_from, valid_until, '[)') WITH &&
);

-- The guards of 0002, with the class among what a used card or rate keeps.
CREATE OR REPLACE FUNCTION hl_rate_card_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE rate_card_id = OLD.id) THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE'
       OR (NEW.cluster_id, NEW.node_type_id, NEW.rate_class_id, NEW.valid_from, NEW.core_hour_price,
           NEW.gpu_hour_price, NEW.memory_per_core_bytes, NEW.cores_per_node)
          IS DISTINCT FROM
          (OLD.cluster_id, OLD.node_type_id, OLD.rate_class_id, OLD.valid_from, OLD.core_hour_price,
           OLD.gpu_hour_price, OLD.memory_per_core_bytes, OLD.cores_per_node) THEN
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

CREATE OR REPLACE FUNCTION hl_storage_rate_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_entry WHERE storage_rate_id = OLD.id) THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE'
       OR (NEW.valid_from, NEW.tb_month_price, NEW.rate_class_id)
          IS DISTINCT FROM (OLD.valid_from, OLD.tb_month_price, OLD.rate_class_id) THEN
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

CREATE TABLE discount (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- One of the two: a project's own discount, or its class's.
    project_id    bigint REFERENCES project (id),
    rate_class_id bigint REFERENCES rate_class (id),
    percent       numeric(7,4) NOT NULL CHECK (percent > 0 AND percent <= 100),
    valid_from    timestamptz NOT NULL,
    valid_until   timestamptz,
    reason        text NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000),
    author        text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT discount_scope CHECK ((project_id IS NULL) <> (rate_class_id IS NULL)),
    CONSTRAINT discount_period CHECK (valid_until IS NULL OR valid_until > valid_from),
    CONSTRAINT discount_no_overlap EXCLUDE USING gist (
        int8range(coalesce(project_id, 0), coalesce(project_id, 0), '[]') WITH &&,
        int8range(coalesce(rate_class_id, 0), coalesce(rate_class_id, 0), '[]') WITH &&,
        tstzrange(valid_from, valid_until, '[)') WITH &&
    )
);
COMMENT ON TABLE discount IS
    'Dated percentage discounts of one project or one class: each charge priced in the period gets a discount line (docs/rules.md R8).';

ALTER TABLE ledger_entry ADD COLUMN discount_id bigint;
COMMENT ON COLUMN ledger_entry.discount_id IS 'A discount line: the discount (row of table discount) it applies.';
ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_shape;
ALTER TABLE ledger_entry ADD CONSTRAINT ledger_entry_shape CHECK (CASE kind
        WHEN 'job' THEN metric IN ('core_hours', 'gpu_hours') AND job_record_id IS NOT NULL
            AND rate_card_id IS NOT NULL AND storage_rate_id IS NULL AND billing_run_id IS NULL
            AND corrects_id IS NULL AND quantity >= 0 AND unit_rate >= 0 AND discount_id IS NULL
        WHEN 'storage' THEN metric = 'tb_months' AND storage_rate_id IS NOT NULL
            AND billing_run_id IS NOT NULL AND job_record_id IS NULL AND rate_card_id IS NULL
            AND corrects_id IS NULL AND quantity >= 0 AND unit_rate >= 0 AND discount_id IS NULL
        WHEN 'reversal' THEN corrects_id IS NOT NULL
        WHEN 'refund' THEN corrects_id IS NOT NULL AND reason IS NOT NULL AND amount <= 0 AND discount_id IS NULL
        WHEN 'adjustment' THEN corrects_id IS NULL AND reason IS NOT NULL AND metric IS NULL
            AND job_record_id IS NULL AND rate_card_id IS NULL AND storage_rate_id IS NULL AND discount_id IS NULL
        WHEN 'discount' THEN corrects_id IS NOT NULL AND discount_id IS NOT NULL AND metric IS NOT NULL
            AND quantity = 0 AND unit_rate = 0 AND amount_exact <= 0 AND charging_rules >= 2
        ELSE false END) NOT VALID;
ALTER TABLE ledger_entry VALIDATE CONSTRAINT ledger_entry_shape;
-- One discount line per charge, ever.
CREATE UNIQUE INDEX ledger_entry_one_discount ON ledger_entry (corrects_id) WHERE kind = 'discount';
CREATE INDEX ledger_entry_discount ON ledger_entry (discount_id) WHERE discount_id IS NOT NULL;

-- The recorder reloads its prices when they change (0003).
CREATE TRIGGER rate_class_rules_version AFTER INSERT OR UPDATE OR DELETE ON rate_class
    FOR EACH STATEMENT EXECUTE FUNCTION hl_bump_rules_version();
CREATE TRIGGER project_class_rules_version AFTER INSERT OR UPDATE OR DELETE ON project_class
    FOR EACH STATEMENT EXECUTE FUNCTION hl_bump_rules_version();
CREATE TRIGGER discount_rules_version AFTER INSERT OR UPDATE OR DELETE ON discount
    FOR EACH STATEMENT EXECUTE FUNCTION hl_bump_rules_version();

-- The class of a project at an instant (NULL: the default class).
CREATE FUNCTION hl_project_class(project bigint, at timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT pc.rate_class_id FROM project_class pc
     WHERE pc.project_id = project AND pc.effective_from <= at
     ORDER BY pc.effective_from DESC LIMIT 1
$$;

-- The instant whose rules price a charge: a job's submit time (its start
-- when unknown); a storage charge's month's last instant.
CREATE FUNCTION hl_charge_priced_at(e ledger_entry) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT CASE e.kind
        WHEN 'job' THEN (SELECT coalesce(j.submitted_at, j.started_at)
                           FROM job_record r JOIN job j ON j.id = r.job_id WHERE r.id = e.job_record_id)
        WHEN 'storage' THEN hl_day_end((e.period + interval '1 month' - interval '1 day')::date,
                                       (SELECT time_zone FROM center)) - interval '1 microsecond'
    END
$$;

-- The discount of a project's charge priced at an instant: the project's
-- own, else its class's; NULL for none.
CREATE FUNCTION hl_discount_for(project bigint, at timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT coalesce(
        (SELECT d.id FROM discount d
          WHERE d.project_id = project AND d.valid_from <= at AND (d.valid_until IS NULL OR at < d.valid_until)),
        (SELECT d.id FROM discount d
          WHERE d.rate_class_id = hl_project_class(project, at)
            AND d.valid_from <= at AND (d.valid_until IS NULL OR at < d.valid_until)))
$$;

-- No retroactive re-pricing: a class change of a project is refused while
-- the project has a charge priced at or after it.
CREATE FUNCTION hl_project_class_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    -- Serialised with every posting, whoever writes (config apply holds it already).
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    PERFORM hl_require_read_committed(format('changing the class of project %s', NEW.project_id));
    SELECT e.id INTO bad
      FROM ledger_entry e
     WHERE e.project_id = NEW.project_id AND e.kind IN ('job', 'storage')
       AND e.period >= date_trunc('month', NEW.effective_from AT TIME ZONE (SELECT time_zone FROM center))::date
                       - interval '1 month'
       AND hl_charge_priced_at(e) >= NEW.effective_from
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'project % cannot change class from %: ledger entry % was priced at or after that under the class it had then',
            (SELECT code FROM project WHERE id = NEW.project_id), NEW.effective_from, bad
            USING ERRCODE = 'HL004',
                  HINT = 'A rule change never re-prices a past charge: start the change later, and credit past charges with hpc-ledger adjust if they should have cost less.';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER project_class_check BEFORE INSERT ON project_class
    FOR EACH ROW EXECUTE FUNCTION hl_project_class_check();
ALTER TABLE project_class ENABLE ALWAYS TRIGGER project_class_check;

-- A charge posted already, priced in [from_, until_), in the scope of a
-- discount (its project, or a project then in its class); NULL for none.
-- Written with joins, not per-row function calls: config apply runs it
-- while it holds the lock every posting waits for.
CREATE FUNCTION hl_discount_covers_posted(d discount, from_ timestamptz, until_ timestamptz) RETURNS bigint
LANGUAGE sql STABLE AS $$
    WITH tz AS (SELECT time_zone FROM center),
    periods AS (
        -- The project, or each period a project was in the class.
        SELECT d.project_id AS project_id, '-infinity'::timestamptz AS p_from, NULL::timestamptz AS p_until
         WHERE d.project_id IS NOT NULL
        UNION ALL
        SELECT x.project_id, x.effective_from, x.until
          FROM (SELECT pc.project_id, pc.rate_class_id, pc.effective_from,
                       lead(pc.effective_from) OVER (PARTITION BY pc.project_id ORDER BY pc.effective_from) AS until
                  FROM project_class pc
                 WHERE pc.project_id IN (SELECT project_id FROM project_class WHERE rate_class_id = d.rate_class_id)) x
         WHERE d.rate_class_id IS NOT NULL AND x.rate_class_id = d.rate_class_id),
    charges AS (
        SELECT e.id, e.project_id,
               CASE e.kind WHEN 'job' THEN coalesce(j.submitted_at, j.started_at)
                    ELSE hl_day_end((e.period + interval '1 month' - interval '1 day')::date, tz.time_zone)
                         - interval '1 microsecond' END AS priced_at
          FROM ledger_entry e CROSS JOIN tz
          LEFT JOIN job_record r ON r.id = e.job_record_id
          LEFT JOIN job j ON j.id = r.job_id
         WHERE e.kind IN ('job', 'storage')
           AND e.project_id IN (SELECT project_id FROM periods)
           AND e.period >= date_trunc('month', from_ AT TIME ZONE tz.time_zone)::date - interval '1 month')
    SELECT c.id
      FROM charges c JOIN periods p ON p.project_id = c.project_id
     WHERE c.priced_at >= from_ AND (until_ IS NULL OR c.priced_at < until_)
       AND c.priced_at >= p.p_from AND (p.p_until IS NULL OR c.priced_at < p.p_until)
     LIMIT 1
$$;

-- A discount never changes what was posted: it may not cover a charge
-- posted before it (when added, or when its period grows), and once it has
-- discounted a charge it keeps its scope, percent and start, and may end
-- only after every instant it discounted.
CREATE FUNCTION hl_discount_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    IF TG_OP <> 'INSERT' AND EXISTS (SELECT 1 FROM ledger_entry WHERE discount_id = OLD.id) THEN
        IF TG_OP = 'DELETE'
           OR (NEW.id, NEW.project_id, NEW.rate_class_id, NEW.percent, NEW.valid_from, NEW.reason)
              IS DISTINCT FROM (OLD.id, OLD.project_id, OLD.rate_class_id, OLD.percent, OLD.valid_from, OLD.reason) THEN
            RAISE EXCEPTION 'discount % has discounted charges and cannot be changed or removed', OLD.id
                USING ERRCODE = 'HL004', HINT = 'End it (until) and add a new dated discount instead.';
        END IF;
        IF NEW.valid_until IS NOT NULL AND EXISTS (
            SELECT 1 FROM ledger_entry l JOIN ledger_entry c ON c.id = l.corrects_id
             WHERE l.discount_id = OLD.id AND hl_charge_priced_at(c) >= NEW.valid_until) THEN
            RAISE EXCEPTION 'discount % discounted charges priced after %; it cannot end before them', OLD.id,
                NEW.valid_until USING ERRCODE = 'HL004';
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    -- Serialised with every posting, whoever writes (config apply holds it already).
    PERFORM pg_advisory_xact_lock(7523094288207667810);
    PERFORM hl_require_read_committed('recording a discount');
    IF TG_OP = 'INSERT' OR (NEW.project_id, NEW.rate_class_id, NEW.valid_from)
                           IS DISTINCT FROM (OLD.project_id, OLD.rate_class_id, OLD.valid_from) THEN
        bad := hl_discount_covers_posted(NEW, NEW.valid_from, NEW.valid_until);
    ELSIF OLD.valid_until IS NOT NULL AND (NEW.valid_until IS NULL OR NEW.valid_until > OLD.valid_until) THEN
        bad := hl_discount_covers_posted(NEW, OLD.valid_until, NEW.valid_until);
    END IF;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'the discount of % %% from % would cover ledger entry %, posted before it',
            NEW.percent, NEW.valid_from, bad
            USING ERRCODE = 'HL004',
                  HINT = 'A rule change never re-prices a past charge: start the discount after the charges already posted, and credit those with hpc-ledger adjust.';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER discount_guard BEFORE INSERT OR UPDATE OR DELETE ON discount
    FOR EACH ROW EXECUTE FUNCTION hl_discount_guard();
CREATE TRIGGER discount_no_truncate BEFORE TRUNCATE ON discount
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE discount ENABLE ALWAYS TRIGGER discount_guard;
ALTER TABLE discount ENABLE ALWAYS TRIGGER discount_no_truncate;

-- A reversal's cause (0016), also for the refunds and discount lines of a
-- superseded charge: a supersede reverses them with the charge (0016
-- allowed only the charge, so a supersede of a refunded job was refused).
CREATE OR REPLACE FUNCTION hl_reversal_cause(n ledger_entry, o ledger_entry) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT CASE
        WHEN n.job_record_id IS NOT DISTINCT FROM o.job_record_id THEN
            CASE WHEN n.reason IS NOT NULL THEN 'correction' END
        WHEN o.kind IN ('job', 'refund', 'discount') AND EXISTS (
            SELECT 1 FROM job_record rn JOIN job_record ro ON ro.job_id = rn.job_id
             WHERE rn.id = n.job_record_id AND ro.id = o.job_record_id AND rn.kind = 'supersede'
               AND rn.id <> ro.id AND rn.revision > ro.revision) THEN 'supersede'
    END
$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        DROP POLICY IF EXISTS ledger_entry_ingest ON ledger_entry;
        CREATE POLICY ledger_entry_ingest ON ledger_entry FOR INSERT TO hpc_ledger_ingest
            WITH CHECK (kind = 'job'
                        OR (kind = 'discount'
                            AND EXISTS (SELECT 1 FROM ledger_entry o
                                         WHERE o.id = ledger_entry.corrects_id AND o.kind = 'job'))
                        OR (kind = 'reversal'
                            AND EXISTS (SELECT 1
                                          FROM ledger_entry o
                                          JOIN job_record ro ON ro.id = o.job_record_id
                                          JOIN job_record rn ON rn.id = ledger_entry.job_record_id
                                         WHERE o.id = ledger_entry.corrects_id
                                           AND o.kind IN ('job', 'refund', 'discount')
                                           AND rn.kind = 'supersede'
                                           AND rn.job_id = ro.job_id
                                           AND rn.id <> ro.id)));
        GRANT SELECT ON rate_class, project_class, discount TO hpc_ledger_ingest;
    END IF;
END
$$;

-- The guard of every statement that posts entries (0016), and: a discount
-- line applies the discount in force for its charge, to the cent.
CREATE OR REPLACE FUNCTION hl_ledger_entry_guard() RETURNS trigger
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
            OR n.unit_rate <> o.unit_rate OR n.amount_exact <> -o.amount_exact
            OR n.discount_id IS DISTINCT FROM o.discount_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % does not mirror the entry it reverses', bad.id USING ERRCODE = 'HL003';
    END IF;
    SELECT n.id, n.corrects_id, o.kind AS target_kind, n.job_record_id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'reversal'
       AND (hl_reversal_cause(n::ledger_entry, o) IS NULL
            OR (hl_reversal_cause(n::ledger_entry, o) = 'supersede'
                AND (NOT EXISTS (SELECT 1 FROM new_entries c WHERE c.kind = 'job' AND c.job_record_id = n.job_record_id)
                     OR EXISTS (SELECT 1 FROM job_record rn JOIN job_record x ON x.job_id = rn.job_id
                                 WHERE rn.id = n.job_record_id AND x.revision > rn.revision))))
     LIMIT 1;
    IF NOT FOUND THEN
        -- A discount line goes with its charge; a supersede reverses a
        -- refund only with its charge: the charge is reversed by the same
        -- statement, or was before.
        SELECT n.id, n.corrects_id, o.kind AS target_kind, n.job_record_id INTO bad
          FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
         WHERE n.kind = 'reversal'
           AND (o.kind = 'discount' OR (o.kind = 'refund' AND hl_reversal_cause(n::ledger_entry, o) = 'supersede'))
           AND NOT EXISTS (SELECT 1 FROM new_entries x WHERE x.kind = 'reversal' AND x.corrects_id = o.corrects_id)
           AND NOT EXISTS (SELECT 1 FROM ledger_entry x WHERE x.kind = 'reversal' AND x.corrects_id = o.corrects_id)
         LIMIT 1;
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % of % entry % is not tied to what it reverses', bad.id, bad.target_kind, bad.corrects_id
            USING ERRCODE = 'HL003',
                  DETAIL = format('It cites job record %s. A reversal either cites the same job record as the entry it reverses and gives a reason (hpc-ledger reverse), or cites the latest, superseding record of the same job run, reverses a job charge (or its refund or discount, with the charge), and comes with that record''s own charges; a discount line is reversed only with its charge.',
                                  coalesce(bad.job_record_id::text, 'none'));
    END IF;
    SELECT n.id INTO bad
      FROM new_entries n JOIN ledger_entry o ON o.id = n.corrects_id
     WHERE n.kind = 'refund'
       AND (o.kind NOT IN ('job', 'storage') OR n.project_id <> o.project_id OR n.metric IS DISTINCT FROM o.metric
            OR n.unit_rate <> o.unit_rate OR n.quantity > 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'refund % must take back part of a job or storage charge of its project, in its metric and at its rate', bad.id
            USING ERRCODE = 'HL003';
    END IF;
    -- A discount line: of a charge of its project, in its month, metric,
    -- record, card or rate and run, by the discount in force for it, to the cent.
    SELECT n.id, n.corrects_id, hl_discount_for(o.project_id, hl_charge_priced_at(o)) AS want,
           n.discount_id AS got INTO bad
      FROM new_entries n
      LEFT JOIN ledger_entry o ON o.id = n.corrects_id
      LEFT JOIN discount d ON d.id = n.discount_id
     WHERE n.kind = 'discount'
       AND (o.id IS NULL OR o.kind NOT IN ('job', 'storage') OR n.project_id <> o.project_id
            OR n.period <> o.period OR n.metric IS DISTINCT FROM o.metric
            OR n.job_record_id IS DISTINCT FROM o.job_record_id OR n.rate_card_id IS DISTINCT FROM o.rate_card_id
            OR n.storage_rate_id IS DISTINCT FROM o.storage_rate_id OR n.billing_run_id IS DISTINCT FROM o.billing_run_id
            OR n.charging_rules <> o.charging_rules
            OR d.id IS NULL OR n.discount_id IS DISTINCT FROM hl_discount_for(o.project_id, hl_charge_priced_at(o))
            OR n.amount_exact <> -(o.amount_exact * d.percent / 100)
            OR EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = o.id AND r.kind = 'reversal'))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'discount line % of entry % does not apply the discount in force for it', bad.id, bad.corrects_id
            USING ERRCODE = 'HL003',
                  DETAIL = format('It applies discount %s; the charge''s discount is %s. A discount line takes the discount''s percent of an unreversed job or storage charge''s exact amount, in its month, metric and references.',
                                  coalesce(bad.got::text, 'none'), coalesce(bad.want::text, 'none'));
    END IF;
    -- Credits of a charge (refunds, reversal, discount, less their
    -- reversals) never exceed it.
    SELECT o.id, o.amount_exact, credit.total INTO bad
      FROM ledger_entry o
      CROSS JOIN LATERAL (
           SELECT coalesce(sum(-c.amount_exact), 0)
                  - coalesce((SELECT sum(r.amount_exact) FROM ledger_entry f JOIN ledger_entry r ON r.corrects_id = f.id
                               WHERE f.corrects_id = o.id AND f.kind IN ('refund', 'discount') AND r.kind = 'reversal'), 0) AS total
             FROM ledger_entry c WHERE c.corrects_id = o.id AND c.kind IN ('refund', 'reversal', 'discount')) credit
     WHERE o.id IN (SELECT corrects_id FROM new_entries WHERE kind IN ('refund', 'reversal', 'discount'))
       AND o.kind IN ('job', 'storage')
       AND credit.total > o.amount_exact
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'entry % charged %, but % would be credited back', bad.id, bad.amount_exact, bad.total
            USING ERRCODE = 'HL003', HINT = 'Reverse its refunds and discount before reversing the entry itself.';
    END IF;
    RETURN NULL;
END
$$;

-- The audit: each project's class periods, every discount line with its
-- recomputation, and the classes beside the charges.
CREATE VIEW audit.project_classes AS
SELECT p.code AS project, rc.name AS rate_class, pc.effective_from,
       lead(pc.effective_from) OVER (PARTITION BY pc.project_id ORDER BY pc.effective_from) AS effective_until,
       pc.author, pc.created_at
  FROM project_class pc
  JOIN project p ON p.id = pc.project_id
  LEFT JOIN rate_class rc ON rc.id = pc.rate_class_id;

CREATE VIEW audit.discounts AS
SELECT l.id AS entry_id, l.period, p.code AS project, l.corrects_id AS charge_entry_id, c.kind AS charge_kind,
       l.metric, c.amount AS list_amount, l.discount_id, d.percent,
       coalesce(dp.code, 'class ' || dc.name) AS discount_scope, d.valid_from, d.valid_until, d.reason,
       l.amount_exact, l.amount,
       -(c.amount_exact * d.percent / 100) AS recomputed_amount_exact,
       hl_discount_for(c.project_id, hl_charge_priced_at(c)) AS discount_in_force
  FROM ledger_entry l
  JOIN project p ON p.id = l.project_id
  LEFT JOIN ledger_entry c ON c.id = l.corrects_id
  LEFT JOIN discount d ON d.id = l.discount_id
  LEFT JOIN project dp ON dp.id = d.project_id
  LEFT JOIN rate_class dc ON dc.id = d.rate_class_id
 WHERE l.kind = 'discount';

-- Storage TB-days (0011), by class: a project's days are cut by its class
-- periods (a day belongs to the class in force at its end, like a quota)
-- and priced only by the storage rates of that class.
CREATE OR REPLACE VIEW audit.storage_recomputed AS
WITH tz AS (SELECT time_zone FROM center),
months AS (
    SELECT DISTINCT period, (period + interval '1 month' - interval '1 day')::date AS last_day
      FROM ledger_entry WHERE kind = 'storage'),
quotas AS MATERIALIZED (
    SELECT q.project_id, q.quota_tb, hl_first_day_after(q.effective_from, tz.time_zone) AS first_day,
           hl_last_day_until(lead(q.effective_from) OVER (PARTITION BY q.project_id ORDER BY q.effective_from),
                             tz.time_zone) AS last_day
      FROM storage_quota q CROSS JOIN tz),
classes AS MATERIALIZED (
    SELECT pc.project_id, coalesce(pc.rate_class_id, 0) AS class,
           hl_first_day_after(pc.effective_from, tz.time_zone) AS first_day,
           hl_last_day_until(lead(pc.effective_from) OVER (PARTITION BY pc.project_id ORDER BY pc.effective_from),
                             tz.time_zone) AS last_day
      FROM project_class pc CROSS JOIN tz
    UNION ALL
    SELECT pc.project_id, 0, '-infinity'::date, hl_last_day_until(min(pc.effective_from), tz.time_zone)
      FROM project_class pc CROSS JOIN tz
     GROUP BY pc.project_id, tz.time_zone),
pieces AS (
    SELECT q.project_id, q.quota_tb, greatest(q.first_day, c.first_day) AS first_day,
           least(q.last_day, c.last_day) AS last_day, c.class
      FROM quotas q JOIN classes c ON c.project_id = q.project_id
     WHERE c.first_day <= q.last_day AND c.last_day >= q.first_day
    UNION ALL
    SELECT q.project_id, q.quota_tb, q.first_day, q.last_day, 0
      FROM quotas q
     WHERE NOT EXISTS (SELECT 1 FROM project_class pc WHERE pc.project_id = q.project_id)),
rates AS MATERIALIZED (
    SELECT r.id, coalesce(r.rate_class_id, 0) AS class, hl_first_day_after(r.valid_from, tz.time_zone) AS first_day,
           hl_last_day_until(r.valid_until, tz.time_zone) AS last_day
      FROM storage_rate r CROSS JOIN tz),
summed AS (
    SELECT q.project_id, m.period, r.id AS storage_rate_id,
           sum(q.quota_tb * (least(m.last_day, q.last_day, r.last_day)
                             - greatest(m.period, q.first_day, r.first_day) + 1)) AS tb_days
      FROM months m
      JOIN rates r ON r.first_day <= m.last_day AND r.last_day >= m.period
      JOIN pieces q ON q.class = r.class
                   AND q.first_day <= least(m.last_day, r.last_day) AND q.last_day >= greatest(m.period, r.first_day)
     WHERE least(m.last_day, q.last_day, r.last_day) >= greatest(m.period, q.first_day, r.first_day)
     GROUP BY q.project_id, m.period, r.id)
SELECT e.id AS entry_id, s.tb_days,
       extract(day FROM (e.period + interval '1 month' - interval '1 day'))::int AS days_in_month
  FROM ledger_entry e
  LEFT JOIN summed s ON s.project_id = e.project_id AND s.period = e.period AND s.storage_rate_id = e.storage_rate_id
 WHERE e.kind = 'storage';

-- audit.charge_discrepancies (0021), and: a job's card is of its project's
-- class at the pricing instant; every job and storage charge has exactly
-- the discount line the discounts give it, to the cent; a discount line
-- belongs to a charge.
CREATE OR REPLACE VIEW audit.charge_discrepancies AS
SELECT x.entry_id, 'job'::text AS kind, x.period, (SELECT p.code FROM project p WHERE p.id = x.project_id) AS project,
       f.field, f.expected, f.recorded
  FROM (SELECT y.*,
               y.quantity IS DISTINCT FROM y.want_quantity AS bad_quantity,
               y.unit_rate <> y.want_rate AS bad_rate,
               y.amount <> round(y.want_exact, 2) OR y.amount_exact <> y.want_exact
                   OR (y.charging_rules = 1 AND y.amount_exact <> y.quantity * y.unit_rate)
                   AS bad_amount,
               y.card_node_type_id <> y.node_type_id
                   OR NOT (y.card_from <= y.priced_at AND (y.card_until IS NULL OR y.priced_at < y.card_until))
                   AS bad_card,
               (NOT y.late AND y.period <> y.end_month) OR (y.late AND y.period <= y.end_month) AS bad_period,
               y.project_id <> y.record_project_id AS bad_project,
               y.record_found IS NULL OR y.job_found IS NULL OR y.card_found IS NULL OR y.project_found IS NULL
                   AS bad_reference
          FROM (SELECT e.id AS entry_id, e.period, e.late, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                       e.charging_rules,
                       e.project_id, r.project_id AS record_project_id, r.node_type_id, rc.node_type_id AS card_node_type_id,
                       e.job_record_id, e.rate_card_id, rc.valid_from AS card_from, rc.valid_until AS card_until,
                       r.id AS record_found, j.id AS job_found, rc.id AS card_found, pe.id AS project_found,
                       coalesce(j.submitted_at, j.started_at) AS priced_at,
                       CASE WHEN e.charging_rules = 1
                            THEN CASE e.metric WHEN 'core_hours' THEN q.core_hours ELSE q.gpu_hours END
                            ELSE CASE e.metric WHEN 'core_hours' THEN q2.core_hours ELSE q2.gpu_hours END
                       END AS want_quantity,
                       CASE e.metric WHEN 'core_hours' THEN rc.core_hour_price ELSE rc.gpu_hour_price END AS want_rate,
                       -- Version 1: the 12-place quantity times the rate;
                       -- version 2: the exact value truncated to 12 places.
                       CASE WHEN e.charging_rules = 1
                            THEN CASE e.metric WHEN 'core_hours' THEN q.core_hours * rc.core_hour_price
                                               ELSE q.gpu_hours * rc.gpu_hour_price END
                            ELSE CASE e.metric WHEN 'core_hours' THEN q2.core_exact ELSE q2.gpu_exact END
                       END AS want_exact,
                       date_trunc('month', r.ended_at AT TIME ZONE (SELECT time_zone FROM center))::date AS end_month
                  FROM ledger_entry e
                  -- Outer joins, so a charge whose record, run, rate card or
                  -- project is missing is reported, not skipped.
                  LEFT JOIN job_record r ON r.id = e.job_record_id
                  LEFT JOIN job j ON j.id = r.job_id
                  LEFT JOIN rate_card rc ON rc.id = e.rate_card_id
                  LEFT JOIN project pe ON pe.id = e.project_id
                 CROSS JOIN LATERAL hl_charge_quantities(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                                         extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                                         rc.memory_per_core_bytes, rc.cores_per_node) q
                 CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                                 extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                                 rc.memory_per_core_bytes, rc.cores_per_node,
                                                 rc.core_hour_price, rc.gpu_hour_price) q2
                 WHERE e.kind = 'job'
                OFFSET 0) y) x
 CROSS JOIN LATERAL (VALUES
       ('quantity', x.want_quantity::text, x.quantity::text, x.bad_quantity),
       ('unit_rate', x.want_rate::text, x.unit_rate::text, x.bad_rate),
       ('amount', round(x.want_exact, 2)::text
                  || CASE WHEN x.amount_exact <> x.want_exact THEN ' (exactly ' || x.want_exact || ')' ELSE '' END
                  || ' by charging rules ' || x.charging_rules,
        x.amount::text || CASE WHEN x.amount_exact <> x.want_exact THEN ' (exactly ' || x.amount_exact || ')' ELSE '' END,
        x.bad_amount),
       ('rate_card', 'a card of node type ' || (SELECT nt.name FROM node_type nt WHERE nt.id = x.node_type_id)
                     || ' in force at ' || x.priced_at, 'card ' || x.rate_card_id, x.bad_card),
       ('period', to_char(x.end_month, 'YYYY-MM') || CASE WHEN x.late THEN ' or later' ELSE '' END,
        to_char(x.period, 'YYYY-MM') || CASE WHEN x.late THEN ' (late)' ELSE '' END, x.bad_period),
       ('project', (SELECT rp.code FROM project rp WHERE rp.id = x.record_project_id),
        (SELECT p.code FROM project p WHERE p.id = x.project_id), x.bad_project),
       ('reference', 'job record ' || x.job_record_id || ' and its run, rate card ' || x.rate_card_id
                     || ', project ' || x.project_id,
        concat_ws(', ', CASE WHEN x.record_found IS NULL THEN 'no job record ' || x.job_record_id END,
                        CASE WHEN x.record_found IS NOT NULL AND x.job_found IS NULL
                             THEN 'no run for job record ' || x.job_record_id END,
                        CASE WHEN x.card_found IS NULL THEN 'no rate card ' || x.rate_card_id END,
                        CASE WHEN x.project_found IS NULL THEN 'no project ' || x.project_id END),
        x.bad_reference)
     ) f(field, expected, recorded, bad)
 WHERE (x.bad_quantity OR x.bad_rate OR x.bad_amount OR x.bad_card OR x.bad_period OR x.bad_project
        OR x.bad_reference) AND f.bad
UNION ALL
-- A job charge's class and discount (migration 0026), in a pass of their own
-- that carries no arithmetic: the card is of the project's class at the
-- pricing instant, and the charge has exactly the discount line the
-- discounts give it, of -(its exact amount × percent ÷ 100).
SELECT z.entry_id, 'job', z.period, (SELECT p.code FROM project p WHERE p.id = z.project_id), f.field, f.expected,
       f.recorded
  FROM (SELECT e.id AS entry_id, e.period, e.project_id, e.amount_exact, e.rate_card_id,
               rc.rate_class_id AS card_class, cp.rate_class_id AS want_class,
               coalesce(dp.id, dc.id) AS want_discount, coalesce(dp.percent, dc.percent) AS want_percent,
               dl.discount_id AS got_discount, dl.amount_exact AS got_discount_exact
          FROM ledger_entry e
          JOIN job_record r ON r.id = e.job_record_id
          JOIN job j ON j.id = r.job_id
          JOIN rate_card rc ON rc.id = e.rate_card_id
          LEFT JOIN (SELECT project_id, rate_class_id, effective_from,
                            lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                       FROM project_class) cp
                 ON cp.project_id = e.project_id AND cp.effective_from <= coalesce(j.submitted_at, j.started_at)
                AND (cp.until IS NULL OR coalesce(j.submitted_at, j.started_at) < cp.until)
          LEFT JOIN discount dp
                 ON dp.project_id = e.project_id AND dp.valid_from <= coalesce(j.submitted_at, j.started_at)
                AND (dp.valid_until IS NULL OR coalesce(j.submitted_at, j.started_at) < dp.valid_until)
          LEFT JOIN discount dc
                 ON dc.rate_class_id = cp.rate_class_id AND dc.valid_from <= coalesce(j.submitted_at, j.started_at)
                AND (dc.valid_until IS NULL OR coalesce(j.submitted_at, j.started_at) < dc.valid_until)
          LEFT JOIN ledger_entry dl ON dl.corrects_id = e.id AND dl.kind = 'discount'
         WHERE e.kind = 'job'
           -- Nothing to check (and no pass over the job charges) while no
           -- class or discount exists and no discount line was ever posted.
           AND (EXISTS (SELECT 1 FROM project_class) OR EXISTS (SELECT 1 FROM discount)
                OR EXISTS (SELECT 1 FROM rate_card WHERE rate_class_id IS NOT NULL)
                OR EXISTS (SELECT 1 FROM ledger_entry x WHERE x.kind = 'discount'))) z
 CROSS JOIN LATERAL (VALUES
       ('rate_class', coalesce((SELECT c.name FROM rate_class c WHERE c.id = z.want_class), 'default'),
        coalesce((SELECT c.name FROM rate_class c WHERE c.id = z.card_class), 'default') || ' (card ' || z.rate_card_id || ')',
        coalesce(z.card_class, 0) <> coalesce(z.want_class, 0)),
       ('discount', coalesce('discount ' || z.want_discount || ': ' || (-(z.amount_exact * z.want_percent / 100))::text, 'none'),
        coalesce('discount ' || z.got_discount || ': ' || z.got_discount_exact::text, 'none'),
        z.want_discount IS DISTINCT FROM z.got_discount
            OR (z.got_discount IS NOT NULL AND z.got_discount_exact <> -(z.amount_exact * z.want_percent / 100)))
     ) f(field, expected, recorded, bad)
 WHERE f.bad
UNION ALL
-- Every charging record has one core-hours entry, and one GPU-hours entry
-- exactly when it held GPUs.
SELECT NULL::bigint, 'job', NULL::date, p.code, 'entries',
       CASE WHEN r.gpus > 0 THEN '1 core_hours, 1 gpu_hours' ELSE '1 core_hours, 0 gpu_hours' END,
       coalesce(g.core_hours, 0) || ' core_hours, ' || coalesce(g.gpu_hours, 0) || ' gpu_hours for job record ' || r.id
  FROM job_record r
  LEFT JOIN project p ON p.id = r.project_id
  LEFT JOIN (SELECT job_record_id, count(*) FILTER (WHERE metric = 'core_hours') AS core_hours,
                    count(*) FILTER (WHERE metric = 'gpu_hours') AS gpu_hours
               FROM ledger_entry WHERE kind = 'job' GROUP BY job_record_id) g ON g.job_record_id = r.id
 WHERE r.kind IN ('original', 'supersede')
   AND (coalesce(g.core_hours, 0) <> 1 OR coalesce(g.gpu_hours, 0) <> CASE WHEN r.gpus > 0 THEN 1 ELSE 0 END)
UNION ALL
-- A storage charge: TB-months, amounts, segments and discount against the recomputation.
SELECT s.entry_id, 'storage', s.period, s.project, f.field, f.expected, f.recorded
  FROM (SELECT sc.entry_id, sc.period, sc.project, sc.tb_months, sc.amount, sc.amount_exact,
               sc.tb_days AS recorded_tb_days, sc.charging_rules,
               sr.tb_days, w.want, w.want_exact AS want_amount,
               sc.tb_months IS DISTINCT FROM w.want AS bad_tb_months,
               sc.amount <> round(w.want_exact, 2) OR sc.unit_rate <> sc.tb_month_price
                   OR sc.amount_exact <> w.want_exact
                   OR (sc.charging_rules = 1 AND sc.amount_exact <> sc.tb_months * sc.unit_rate) AS bad_amount,
               sc.tb_days IS DISTINCT FROM sr.tb_days AS bad_segments,
               sc.missing <> '' AS bad_reference, sc.missing,
               sc.want_discount, sc.want_percent, sc.got_discount, sc.got_discount_exact,
               sc.want_discount IS DISTINCT FROM sc.got_discount
                   OR (sc.got_discount IS NOT NULL AND sc.got_discount_exact <> -(sc.amount_exact * sc.want_percent / 100))
                   AS bad_discount
          FROM (SELECT e.id AS entry_id, e.period, p.code AS project, e.quantity AS tb_months, e.unit_rate,
                       e.amount_exact, e.amount, rt.tb_month_price, g.tb_days, e.charging_rules,
                       concat_ws(', ', CASE WHEN p.id IS NULL THEN 'no project ' || e.project_id END,
                                       CASE WHEN rt.id IS NULL THEN 'no storage rate ' || e.storage_rate_id END,
                                       CASE WHEN b.id IS NULL THEN 'no billing run ' || e.billing_run_id END) AS missing,
                       coalesce(dp.id, dc.id) AS want_discount, coalesce(dp.percent, dc.percent) AS want_percent,
                       dl.discount_id AS got_discount, dl.amount_exact AS got_discount_exact
                  FROM ledger_entry e
                  -- A storage charge is priced at its month's last instant.
                 CROSS JOIN LATERAL (
                       SELECT hl_day_end((e.period + interval '1 month' - interval '1 day')::date,
                                         (SELECT time_zone FROM center)) - interval '1 microsecond' AS at) pa
                  LEFT JOIN project p ON p.id = e.project_id
                  LEFT JOIN storage_rate rt ON rt.id = e.storage_rate_id
                  LEFT JOIN billing_run b ON b.id = e.billing_run_id
                  LEFT JOIN (SELECT ledger_entry_id, sum(days * quota_tb) AS tb_days
                               FROM storage_charge_segment GROUP BY ledger_entry_id) g ON g.ledger_entry_id = e.id
                  -- Its project's class and discounts then (joins, not a
                  -- function call per charge: a month holds one per project).
                  LEFT JOIN (SELECT project_id, rate_class_id, effective_from,
                                    lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                               FROM project_class) cp
                         ON cp.project_id = e.project_id AND cp.effective_from <= pa.at
                        AND (cp.until IS NULL OR pa.at < cp.until)
                  LEFT JOIN discount dp
                         ON dp.project_id = e.project_id AND dp.valid_from <= pa.at
                        AND (dp.valid_until IS NULL OR pa.at < dp.valid_until)
                  LEFT JOIN discount dc
                         ON dc.rate_class_id = cp.rate_class_id AND dc.valid_from <= pa.at
                        AND (dc.valid_until IS NULL OR pa.at < dc.valid_until)
                  LEFT JOIN ledger_entry dl ON dl.corrects_id = e.id AND dl.kind = 'discount'
                 WHERE e.kind = 'storage') sc
          JOIN audit.storage_recomputed sr ON sr.entry_id = sc.entry_id
         CROSS JOIN LATERAL (SELECT v.want, CASE WHEN sc.charging_rules = 1 THEN v.want * sc.tb_month_price
                                                 ELSE hl_div_trunc_nonneg(coalesce(sr.tb_days, 0) * sc.tb_month_price,
                                                                          sr.days_in_month, 12) END AS want_exact
                               FROM (SELECT hl_div_round(coalesce(sr.tb_days, 0), sr.days_in_month, 12) AS want
                                     OFFSET 0) v
                              OFFSET 0) w) s
 CROSS JOIN LATERAL (VALUES
       ('tb_months', s.want::text, s.tb_months::text, s.bad_tb_months),
       ('amount', round(s.want_amount, 2)::text || ' by charging rules ' || s.charging_rules, s.amount::text,
        s.bad_amount),
       ('segments', s.tb_days::text, s.recorded_tb_days::text, s.bad_segments),
       ('reference', 'its project, storage rate and billing run', s.missing, s.bad_reference),
       ('discount', coalesce('discount ' || s.want_discount || ': ' || (-(s.amount_exact * s.want_percent / 100))::text, 'none'),
        coalesce('discount ' || s.got_discount || ': ' || s.got_discount_exact::text, 'none'), s.bad_discount)
     ) f(field, expected, recorded, bad)
 WHERE (s.bad_tb_months OR s.bad_amount OR s.bad_segments OR s.bad_reference OR s.bad_discount) AND f.bad
UNION ALL
-- A project with a quota above zero on some day of a billed month but no
-- storage charge that month. A quota counts for a day when it is the one in
-- force at the day's end: the first day end after it took effect must come
-- before the next quota took effect, and within the month.
SELECT NULL, 'storage', m.period, p.code, 'missing storage charge', 'a storage charge', 'none'
  FROM (SELECT DISTINCT b.period, q.project_id
          FROM billing_run b CROSS JOIN center c
          JOIN (SELECT project_id, quota_tb, effective_from,
                       lead(effective_from) OVER (PARTITION BY project_id ORDER BY effective_from) AS until
                  FROM storage_quota) q ON q.quota_tb > 0
         CROSS JOIN LATERAL (SELECT greatest(hl_day_end((q.effective_from AT TIME ZONE c.time_zone)::date, c.time_zone),
                                             hl_day_end(b.period, c.time_zone)) AS first_end) f
         WHERE b.kind = 'storage'
           AND f.first_end <= hl_day_end((b.period + interval '1 month' - interval '1 day')::date, c.time_zone)
           AND (q.until IS NULL OR f.first_end <= q.until)) m
  JOIN project p ON p.id = m.project_id
 WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.kind = 'storage' AND e.period = m.period AND e.project_id = m.project_id)
UNION ALL
-- A discount line belongs to a job or storage charge of its project, month
-- and metric, and names a discount.
SELECT l.id, 'discount', l.period, (SELECT p.code FROM project p WHERE p.id = l.project_id), 'discount line',
       'a discount of a job or storage charge of the same project, month and metric',
       coalesce(c.kind || ' entry ' || c.id, 'no entry ' || l.corrects_id)
       || CASE WHEN d.id IS NULL THEN ', no discount ' || l.discount_id ELSE '' END
  FROM ledger_entry l
  LEFT JOIN ledger_entry c ON c.id = l.corrects_id
  LEFT JOIN discount d ON d.id = l.discount_id
 WHERE l.kind = 'discount'
   AND (c.id IS NULL OR c.kind NOT IN ('job', 'storage') OR c.project_id <> l.project_id OR c.period <> l.period
        OR c.metric IS DISTINCT FROM l.metric OR d.id IS NULL)
UNION ALL
-- A discount line is reversed only with its charge.
SELECT l.id, 'discount', l.period, (SELECT p.code FROM project p WHERE p.id = l.project_id), 'reversed alone',
       'reversed with its charge, entry ' || l.corrects_id, 'the charge is not reversed'
  FROM ledger_entry l
 WHERE l.kind = 'discount'
   AND EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = l.id AND r.kind = 'reversal')
   AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = l.corrects_id AND r.kind = 'reversal')
UNION ALL
-- Corrections: a reversal mirrors its entry; every entry's arithmetic holds.
SELECT e.id, e.kind, e.period, p.code, 'mirror', (-o.amount_exact)::text, e.amount_exact::text
  FROM ledger_entry e JOIN ledger_entry o ON o.id = e.corrects_id JOIN project p ON p.id = e.project_id
 WHERE e.kind = 'reversal' AND (e.amount_exact <> -o.amount_exact OR e.quantity <> -o.quantity OR e.project_id <> o.project_id
                                OR e.charging_rules <> o.charging_rules)
UNION ALL
-- A correction's arithmetic, and the rows it refers to.
SELECT e.id, e.kind, e.period, (SELECT p.code FROM project p WHERE p.id = e.project_id), f.field, f.expected,
       f.recorded
  FROM ledger_entry e
 CROSS JOIN LATERAL (VALUES
       ('arithmetic', CASE WHEN e.charging_rules = 1 THEN round(e.quantity * e.unit_rate, 2)
                           ELSE round(e.amount_exact, 2) END::text, e.amount::text,
        (e.charging_rules = 1 AND e.amount_exact <> e.quantity * e.unit_rate) OR e.amount <> round(e.amount_exact, 2)),
       ('reference', 'project ' || e.project_id, 'missing',
        NOT EXISTS (SELECT 1 FROM project p WHERE p.id = e.project_id)),
       ('reference', 'ledger entry ' || e.corrects_id, 'missing',
        e.corrects_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ledger_entry o WHERE o.id = e.corrects_id)),
       ('reference', 'job record ' || e.job_record_id, 'missing',
        e.job_record_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM job_record r WHERE r.id = e.job_record_id)),
       ('reference', 'rate card ' || e.rate_card_id, 'missing',
        e.rate_card_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rate_card c WHERE c.id = e.rate_card_id)),
       ('reference', 'storage rate ' || e.storage_rate_id, 'missing',
        e.storage_rate_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM storage_rate s WHERE s.id = e.storage_rate_id)),
       ('reference', 'billing run ' || e.billing_run_id, 'missing',
        e.billing_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM billing_run b WHERE b.id = e.billing_run_id))
     ) f(field, expected, recorded, bad)
 WHERE e.kind IN ('reversal', 'refund', 'adjustment') AND f.bad
UNION ALL
-- A closed month's statements add up to the ledger.
SELECT NULL, 'statement', s.period, p.code, 'total',
       (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period)::text,
       s.total::text
  FROM statement s JOIN project p ON p.id = s.project_id
 WHERE s.total <> (SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e WHERE e.project_id = s.project_id AND e.period = s.period);

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON rate_class, project_class, discount TO hpc_ledger_billing';
    END IF;
END
$$;
