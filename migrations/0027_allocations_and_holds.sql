-- Allocations, holds and budgets (issue 17).
--
-- An allocation is money a project may spend in a window [from, until):
-- its entries are never rewritten; a correction is a new entry. A `grant`
-- (an award, a purchase, a credit) adds money; a `reduce` takes some of a
-- grant back; a transfer is a `transfer_out` of a grant of one project and a
-- `transfer_in` grant of another, recorded together. A reduce or transfer
-- out has its grant's window (set here, from the grant).
--
-- The balance is derived, never stored (docs/budgets.md): for a project at
-- an instant t, the pool is the allocation entries in force at t; what it
-- has used is every ledger entry of the project drawn since the earliest
-- start in the pool, up to t (a job's charge, its corrections and discount
-- at the job's end; storage at its month's last instant; an adjustment when
-- posted); what is held is the project's open holds.
--
-- A hold (lien) is what a job about to run may cost: placed by a submit or
-- prolog hook, keyed by cluster and job id, it is released when that job's
-- charge is recorded (a charging record of that job that ended after the
-- hold was placed) and expires at `expires_at` (walltime plus grace)
-- otherwise: derived, so no hold can get stuck and none is ever updated.

CREATE TABLE allocation (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id    bigint NOT NULL REFERENCES project (id),
    kind          text NOT NULL CHECK (kind IN ('grant', 'reduce', 'transfer_out', 'transfer_in')),
    amount        numeric(18,2) NOT NULL,
    valid_from    timestamptz NOT NULL,
    valid_until   timestamptz,
    -- A reduce or transfer out: the grant (or transfer in) it takes from.
    grant_id      bigint REFERENCES allocation (id),
    -- A transfer in: the transfer out it receives.
    transfer_of   bigint UNIQUE REFERENCES allocation (id),
    reason        text NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000),
    author        text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT allocation_period CHECK (valid_until IS NULL OR valid_until > valid_from),
    CONSTRAINT allocation_shape CHECK (CASE kind
        WHEN 'grant' THEN amount > 0 AND grant_id IS NULL AND transfer_of IS NULL
        WHEN 'transfer_in' THEN amount > 0 AND grant_id IS NULL AND transfer_of IS NOT NULL
        WHEN 'reduce' THEN amount < 0 AND grant_id IS NOT NULL AND transfer_of IS NULL
        WHEN 'transfer_out' THEN amount < 0 AND grant_id IS NOT NULL AND transfer_of IS NULL
        END)
);
COMMENT ON TABLE allocation IS
    'What projects may spend, in dated windows: grants, reductions and transfers; never rewritten (docs/budgets.md).';
CREATE INDEX allocation_project ON allocation (project_id, valid_from);
CREATE INDEX allocation_grant ON allocation (grant_id) WHERE grant_id IS NOT NULL;

-- A reduce or transfer out takes from a grant of its own project, in that
-- grant's window, never more than what is left of the grant itself; a
-- transfer in receives exactly what a transfer out of another project gave,
-- in the window it names, which ends no later than the grant given from.
CREATE FUNCTION hl_allocation_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    g allocation;
    o allocation;
    taken numeric;
BEGIN
    IF NEW.kind IN ('reduce', 'transfer_out') THEN
        SELECT * INTO g FROM allocation WHERE id = NEW.grant_id FOR UPDATE;
        IF NOT FOUND OR g.kind NOT IN ('grant', 'transfer_in') OR g.project_id <> NEW.project_id THEN
            RAISE EXCEPTION 'allocation entry % takes from %, which is not a grant of its project', NEW.kind, NEW.grant_id
                USING ERRCODE = 'HL005';
        END IF;
        NEW.valid_from := g.valid_from;
        NEW.valid_until := g.valid_until;
        SELECT coalesce(sum(amount), 0) INTO taken FROM allocation WHERE grant_id = g.id;
        IF g.amount + taken + NEW.amount < 0 THEN
            RAISE EXCEPTION 'grant % has % left; % cannot take %', g.id, g.amount + taken, NEW.kind, -NEW.amount
                USING ERRCODE = 'HL005';
        END IF;
    ELSIF NEW.kind = 'transfer_in' THEN
        SELECT * INTO o FROM allocation WHERE id = NEW.transfer_of;
        IF NOT FOUND OR o.kind <> 'transfer_out' OR o.project_id = NEW.project_id OR NEW.amount <> -o.amount
           OR (o.valid_until IS NOT NULL AND (NEW.valid_until IS NULL OR NEW.valid_until > o.valid_until)) THEN
            RAISE EXCEPTION 'transfer in % does not receive what transfer out % of another project gave, within its window',
                NEW.id, NEW.transfer_of USING ERRCODE = 'HL005';
        END IF;
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER allocation_check BEFORE INSERT ON allocation
    FOR EACH ROW EXECUTE FUNCTION hl_allocation_check();
CREATE TRIGGER allocation_append_only BEFORE UPDATE OR DELETE ON allocation
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER allocation_no_truncate BEFORE TRUNCATE ON allocation
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE allocation ENABLE ALWAYS TRIGGER allocation_check;
ALTER TABLE allocation ENABLE ALWAYS TRIGGER allocation_append_only;
ALTER TABLE allocation ENABLE ALWAYS TRIGGER allocation_no_truncate;

CREATE TABLE hold (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id       bigint NOT NULL REFERENCES project (id),
    cluster_id       bigint NOT NULL REFERENCES cluster (id),
    scheduler_job_id text NOT NULL CHECK (length(scheduler_job_id) BETWEEN 1 AND 256 AND scheduler_job_id !~ '[[:cntrl:]]'),
    array_index      integer CHECK (array_index >= 0),
    amount           numeric(18,2) NOT NULL CHECK (amount >= 0),
    -- The request as given (resources, walltime, queue), for the audit.
    request          jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    author           text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    CONSTRAINT hold_expires CHECK (expires_at > created_at)
);
COMMENT ON TABLE hold IS
    'What jobs about to run may cost: released when the job''s charge is recorded, expired at expires_at otherwise (derived; never updated).';
CREATE INDEX hold_project ON hold (project_id, expires_at);
-- Its time is the database's, and it ends within a year and a month (no
-- walltime is longer): whoever writes it, no hold is placed in the past or
-- left open for good.
CREATE FUNCTION hl_hold_check() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.created_at := now();
    IF NEW.expires_at <= NEW.created_at OR NEW.expires_at > NEW.created_at + interval '400 days' THEN
        RAISE EXCEPTION 'hold of job % expires at %: a hold ends after it is placed and within 400 days',
            NEW.scheduler_job_id, NEW.expires_at USING ERRCODE = 'HL005';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER hold_check BEFORE INSERT ON hold FOR EACH ROW EXECUTE FUNCTION hl_hold_check();
ALTER TABLE hold ENABLE ALWAYS TRIGGER hold_check;
CREATE INDEX hold_job ON hold (cluster_id, scheduler_job_id, (coalesce(array_index, -1)));
CREATE TRIGGER hold_append_only BEFORE UPDATE OR DELETE ON hold
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER hold_no_truncate BEFORE TRUNCATE ON hold
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE hold ENABLE ALWAYS TRIGGER hold_append_only;
ALTER TABLE hold ENABLE ALWAYS TRIGGER hold_no_truncate;

-- What `hpc-ledger slurm sync` changed in Slurm, and why: every sacctmgr
-- call it made, with the project's remaining balance then and how it ended.
CREATE TABLE enforcement_action (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id  bigint NOT NULL REFERENCES cluster (id),
    project_id  bigint NOT NULL REFERENCES project (id),
    account     text NOT NULL CHECK (length(account) BETWEEN 1 AND 256),
    action      text NOT NULL CHECK (action IN ('block', 'unblock')),
    command     text NOT NULL CHECK (length(command) BETWEEN 1 AND 4000),
    remaining   numeric(18,2) NOT NULL,
    succeeded   boolean NOT NULL,
    output      text NOT NULL CHECK (length(output) <= 4000),
    author      text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    at          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE enforcement_action IS
    'Every change `slurm sync` made to a scheduler account to bring it in line with its balance (docs/budgets.md).';
CREATE TRIGGER enforcement_action_append_only BEFORE UPDATE OR DELETE ON enforcement_action
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER enforcement_action_no_truncate BEFORE TRUNCATE ON enforcement_action
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE enforcement_action ENABLE ALWAYS TRIGGER enforcement_action_append_only;
ALTER TABLE enforcement_action ENABLE ALWAYS TRIGGER enforcement_action_no_truncate;

-- Alerts: the thresholds (percent of the allocations in force used) the
-- configuration sets, each crossing recorded once per project, pool of
-- allocations (its earliest start) and threshold, and every delivery try.
CREATE TABLE alert_threshold (
    percent numeric(6,2) PRIMARY KEY CHECK (percent > 0 AND percent <= 1000)
);
COMMENT ON TABLE alert_threshold IS 'Budget alert thresholds, in percent of the allocations in force used ([budgets] alert_thresholds).';
CREATE TRIGGER alert_threshold_rules_version AFTER INSERT OR UPDATE OR DELETE ON alert_threshold
    FOR EACH STATEMENT EXECUTE FUNCTION hl_bump_rules_version();

CREATE TABLE alert_crossing (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id    bigint NOT NULL REFERENCES project (id),
    threshold     numeric(6,2) NOT NULL,
    -- The pool of allocations it belongs to: its earliest start.
    pool_from     timestamptz NOT NULL,
    allocated     numeric(18,2) NOT NULL,
    used          numeric(18,2) NOT NULL,
    remaining     numeric(18,2) NOT NULL,
    crossed_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, threshold, pool_from)
);
COMMENT ON TABLE alert_crossing IS 'Each budget threshold a project crossed, once per pool of allocations and threshold.';
CREATE TRIGGER alert_crossing_append_only BEFORE UPDATE OR DELETE ON alert_crossing
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER alert_crossing_no_truncate BEFORE TRUNCATE ON alert_crossing
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE alert_crossing ENABLE ALWAYS TRIGGER alert_crossing_append_only;
ALTER TABLE alert_crossing ENABLE ALWAYS TRIGGER alert_crossing_no_truncate;

CREATE TABLE alert_delivery (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    crossing_id bigint NOT NULL REFERENCES alert_crossing (id),
    -- `webhook URL` or `command CMD`.
    channel     text NOT NULL CHECK (length(channel) BETWEEN 1 AND 2000),
    succeeded   boolean NOT NULL,
    detail      text NOT NULL CHECK (length(detail) <= 2000),
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_delivery_crossing ON alert_delivery (crossing_id);
CREATE TRIGGER alert_delivery_append_only BEFORE UPDATE OR DELETE ON alert_delivery
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER alert_delivery_no_truncate BEFORE TRUNCATE ON alert_delivery
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE alert_delivery ENABLE ALWAYS TRIGGER alert_delivery_append_only;
ALTER TABLE alert_delivery ENABLE ALWAYS TRIGGER alert_delivery_no_truncate;

-- The charging record that released a hold: of the hold's job, ended after
-- the hold was placed (less ten minutes of clock skew between the
-- scheduler and the database); NULL while none is recorded.
CREATE FUNCTION hl_hold_release(h hold) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT r.id
      FROM job j JOIN job_record r ON r.job_id = j.id
     WHERE j.cluster_id = h.cluster_id AND j.scheduler_job_id = h.scheduler_job_id
       AND coalesce(j.array_index, -1) = coalesce(h.array_index, -1)
       AND r.kind IN ('original', 'supersede')
       AND r.ended_at > h.created_at - interval '10 minutes'
     ORDER BY r.id LIMIT 1
$$;

-- The instant a ledger entry draws on its project's allocations: a job
-- charge (and its discount, refunds and reversals) at the job's end; a
-- storage charge (and its corrections) at its month's last instant; an
-- adjustment when it was posted. `o` is the entry it corrects and `oo` the
-- one that corrects (a reversal of a refund or discount), if any.
CREATE FUNCTION hl_draw_at(e ledger_entry, o ledger_entry, oo ledger_entry, record_end timestamptz, tz text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN coalesce(oo.storage_rate_id, o.storage_rate_id, e.storage_rate_id) IS NOT NULL
             OR 'storage' IN (oo.kind, o.kind, e.kind)
            THEN hl_day_end((coalesce(oo.period, o.period, e.period) + interval '1 month' - interval '1 day')::date, tz)
                 - interval '1 microsecond'
        WHEN record_end IS NOT NULL THEN record_end
        ELSE e.posted_at
    END
$$;

-- What a project drew in [from_, to_] (each entry at its draw instant).
-- Charges are posted in the month they draw in or later (late); a
-- correction or adjustment may go into any open month, so those are read
-- whatever their month (a partial index keeps that to the few there are).
CREATE INDEX ledger_entry_project_corrections ON ledger_entry (project_id, period)
    WHERE kind IN ('adjustment', 'refund', 'reversal', 'discount');
CREATE FUNCTION hl_drawn(project bigint, from_ timestamptz, to_ timestamptz) RETURNS numeric
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH c AS (SELECT time_zone, (date_trunc('month', from_ AT TIME ZONE time_zone) - interval '1 month')::date AS before
                 FROM center),
    mine AS (
        SELECT e.* FROM ledger_entry e, c WHERE e.project_id = project AND e.period >= c.before
        UNION ALL
        SELECT e.* FROM ledger_entry e, c
         WHERE e.project_id = project AND e.period < c.before
           AND e.kind IN ('adjustment', 'refund', 'reversal', 'discount'))
    SELECT coalesce(sum(d.amount), 0)
      FROM (SELECT e.amount, hl_draw_at(e::ledger_entry, o, oo, r.ended_at, c.time_zone) AS draw
              FROM mine e CROSS JOIN c
              LEFT JOIN ledger_entry o ON o.id = e.corrects_id
              LEFT JOIN ledger_entry oo ON oo.id = o.corrects_id
              LEFT JOIN job_record r ON r.id = coalesce(oo.job_record_id, o.job_record_id, e.job_record_id)) d
     WHERE d.draw >= from_ AND d.draw <= to_
$$;

-- A project's balance at an instant, as docs/budgets.md defines it: the
-- allocation entries in force, what was drawn since the earliest start
-- among them, and the open holds.
CREATE FUNCTION hl_balance(project bigint, at timestamptz,
                           OUT allocated numeric, OUT pool_from timestamptz, OUT used numeric, OUT held numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT p.allocated, p.pool_from,
           CASE WHEN p.pool_from IS NULL THEN 0 ELSE hl_drawn(project, p.pool_from, at) END,
           (SELECT coalesce(sum(h.amount), 0) FROM hold h
             WHERE h.project_id = project AND h.created_at <= at AND h.expires_at > at
               AND hl_hold_release(h) IS NULL)
      FROM (SELECT coalesce(sum(a.amount), 0) AS allocated, min(a.valid_from) AS pool_from
              FROM allocation a
             WHERE a.project_id = project AND a.valid_from <= at AND (a.valid_until IS NULL OR at < a.valid_until)) p
$$;

-- The audit: every allocation entry, every hold with what became of it,
-- and every budgeted project's balance now.
CREATE VIEW audit.allocations AS
SELECT a.id, p.code AS project, a.kind, a.amount, a.valid_from, a.valid_until, a.grant_id, a.transfer_of,
       (SELECT i.id FROM allocation i WHERE i.transfer_of = a.id) AS transferred_as,
       a.reason, a.author, a.created_at
  FROM allocation a JOIN project p ON p.id = a.project_id;

CREATE VIEW audit.holds AS
SELECT h.id, p.code AS project, c.name AS cluster, h.scheduler_job_id AS job_id, h.array_index, h.amount,
       h.request, h.created_at, h.expires_at, h.author,
       x.released_by AS released_by_job_record,
       CASE WHEN x.released_by IS NOT NULL THEN 'released'
            WHEN h.expires_at <= now() THEN 'expired'
            ELSE 'open' END AS status,
       rp.code AS released_by_project
  FROM hold h
  JOIN project p ON p.id = h.project_id
  JOIN cluster c ON c.id = h.cluster_id
 CROSS JOIN LATERAL (SELECT hl_hold_release(h) AS released_by) x
  LEFT JOIN job_record r ON r.id = x.released_by
  LEFT JOIN project rp ON rp.id = r.project_id;

CREATE VIEW audit.enforcement_actions AS
SELECT x.id, c.name AS cluster, p.code AS project, x.account, x.action, x.command, x.remaining, x.succeeded,
       x.output, x.author, x.at
  FROM enforcement_action x JOIN cluster c ON c.id = x.cluster_id JOIN project p ON p.id = x.project_id;

CREATE VIEW audit.alerts AS
SELECT a.id, p.code AS project, a.threshold, a.pool_from, a.allocated, a.used, a.remaining, a.crossed_at,
       (SELECT string_agg(d.channel || ': ' || CASE WHEN d.succeeded THEN 'delivered' ELSE 'failed' END
                          || ' at ' || d.at, '; ' ORDER BY d.id)
          FROM alert_delivery d WHERE d.crossing_id = a.id) AS deliveries
  FROM alert_crossing a JOIN project p ON p.id = a.project_id;

CREATE VIEW audit.balances AS
SELECT p.code AS project, b.allocated, b.pool_from, b.used, b.held, b.allocated - b.used - b.held AS remaining
  FROM project p
 CROSS JOIN LATERAL hl_balance(p.id, now()) b
 WHERE EXISTS (SELECT 1 FROM allocation a WHERE a.project_id = p.id);

CREATE OR REPLACE VIEW audit.discrepancies AS
SELECT entry_id, kind, period, project, field, expected, recorded FROM audit.charge_discrepancies
UNION ALL
SELECT c.entry_id, 'reversal', c.period, c.project, 'cause',
       'a correction citing job record ' || coalesce(c.target_job_record::text, 'none')
           || ' with a reason, or a supersede of the same job run',
       'reverses ' || c.reverses_kind || ' entry ' || c.corrects_id || ', citing job record '
           || coalesce(c.cites_job_record::text, 'none')
  FROM audit.reversal_causes c
 WHERE c.cause IS NULL
UNION ALL
SELECT NULL, 'rejection', NULL, NULL, 'resolution',
       CASE WHEN r.status IN ('recorded', 'revised', 'superseded', 'replayed')
            THEN 'the job record its line became (or repeated, of job ' || coalesce(r.job_key, '?') || ')'
            ELSE 'who resolved it' END,
       'rejected record ' || r.id || ' ' || r.status
           || coalesce(', naming job record ' || r.resolved_record_id, ', naming no job record')
  FROM audit.rejections r
 WHERE r.resolution_holds = false
UNION ALL
-- A hold is released by a job of its own project.
SELECT NULL, 'hold', NULL, h.project, 'released by',
       'a job record of project ' || h.project || ' (' || h.cluster || '/' || h.job_id || ')',
       'job record ' || h.released_by_job_record || ' of project ' || h.released_by_project
  FROM audit.holds h
 WHERE h.released_by_job_record IS NOT NULL AND h.released_by_project IS DISTINCT FROM h.project
UNION ALL
-- A transfer out has its transfer in.
SELECT NULL, 'allocation', NULL, a.project, 'transfer',
       'a transfer in of ' || (-a.amount) || ' to another project',
       'transfer out ' || a.id || ' received by none'
  FROM audit.allocations a
 WHERE a.kind = 'transfer_out' AND a.transferred_as IS NULL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
    -- Ingest places holds (from scheduler hooks) and reads balances.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        EXECUTE 'GRANT SELECT ON allocation TO hpc_ledger_ingest';
        EXECUTE 'GRANT SELECT, INSERT ON hold TO hpc_ledger_ingest';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT, INSERT ON allocation, hold, enforcement_action, alert_crossing, alert_delivery TO hpc_ledger_billing';
        EXECUTE 'GRANT SELECT ON alert_threshold TO hpc_ledger_billing';
    END IF;
END
$$;
