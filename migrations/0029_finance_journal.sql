-- The finance journal (docs/month-end.md "Finance journal"): who pays a
-- project's statements (dated funding sources, split by shares), which
-- revenue accounts the center's income goes to, how the journal file is
-- laid out, and a log of every journal exported.
--
-- Funding and revenue are kept as dated sets: a set begins in a month and
-- replaces the previous one whole from then on. Sets are appended, never
-- rewritten, and a new set may only begin after the last month whose
-- journal was exported: what finance has loaded is never contradicted by
-- exporting the same month again (audit finding `journal`).

-- A project's funding: every line of one set shares (project, from); their
-- shares add up to 100.
CREATE TABLE funding_source (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id     bigint NOT NULL REFERENCES project (id),
    effective_from date NOT NULL CHECK (effective_from = date_trunc('month', effective_from)::date),
    line           smallint NOT NULL CHECK (line BETWEEN 1 AND 100),
    fund           text NOT NULL CHECK (length(fund) BETWEEN 1 AND 100 AND fund !~ '[[:cntrl:]]'),
    cost_center    text NOT NULL CHECK (length(cost_center) BETWEEN 1 AND 100 AND cost_center !~ '[[:cntrl:]]'),
    grant_code     text CHECK (length(grant_code) BETWEEN 1 AND 100 AND grant_code !~ '[[:cntrl:]]'),
    -- The expense account (object code) debited.
    account        text NOT NULL CHECK (length(account) BETWEEN 1 AND 100 AND account !~ '[[:cntrl:]]'),
    share          numeric(7,4) NOT NULL CHECK (share > 0 AND share <= 100),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    recorded_by    text NOT NULL CHECK (length(recorded_by) BETWEEN 1 AND 200),
    CONSTRAINT funding_source_line UNIQUE (project_id, effective_from, line)
);
COMMENT ON TABLE funding_source IS
    'Who pays a project''s statements from a month on: a set of lines (fund, cost center, grant, expense account, share) adding up to 100 %; appended, never rewritten.';

-- The center's revenue accounts: one set per month it begins in; `service`
-- is `default` (required: whatever nothing else names), `compute`,
-- `storage`, `adjustments`, `cluster:NAME` or `node_type:CLUSTER/NAME`
-- (lower case).
CREATE TABLE revenue_account (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    effective_from date NOT NULL CHECK (effective_from = date_trunc('month', effective_from)::date),
    service        text NOT NULL CHECK (service IN ('default', 'compute', 'storage', 'adjustments')
                                        OR service ~ '^cluster:[a-z0-9][a-z0-9._-]*$'
                                        OR service ~ '^node_type:[a-z0-9][a-z0-9._-]*/[a-z][a-z0-9_-]*$'),
    fund           text NOT NULL CHECK (length(fund) BETWEEN 1 AND 100 AND fund !~ '[[:cntrl:]]'),
    cost_center    text NOT NULL CHECK (length(cost_center) BETWEEN 1 AND 100 AND cost_center !~ '[[:cntrl:]]'),
    account        text NOT NULL CHECK (length(account) BETWEEN 1 AND 100 AND account !~ '[[:cntrl:]]'),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    recorded_by    text NOT NULL CHECK (length(recorded_by) BETWEEN 1 AND 200),
    CONSTRAINT revenue_account_service UNIQUE (effective_from, service)
);
COMMENT ON TABLE revenue_account IS
    'Where the center''s income is credited, per service, from a month on: a set replaces the previous one whole; appended, never rewritten.';

-- How the CSV journal is written: column headers and what each holds (a
-- field of a journal line, or fixed text). Presentation only, replaced by
-- `config apply`; without a row, the documented default.
CREATE TABLE journal_layout (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    columns     jsonb NOT NULL CHECK (jsonb_typeof(columns) = 'array' AND jsonb_array_length(columns) BETWEEN 1 AND 100),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Every journal exported: what finance was given, with a digest of its
-- lines (hl_journal_digest) that the audit recomputes.
CREATE TABLE journal_export (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period       date NOT NULL REFERENCES closed_period (period),
    exported_at  timestamptz NOT NULL DEFAULT now(),
    exported_by  text NOT NULL CHECK (length(exported_by) BETWEEN 1 AND 200),
    line_count   integer NOT NULL CHECK (line_count >= 0),
    debit_total  numeric(18,2) NOT NULL,
    credit_total numeric(18,2) NOT NULL,
    digest       bytea NOT NULL CHECK (length(digest) = 32)
);
CREATE INDEX journal_export_period ON journal_export (period);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['funding_source', 'revenue_account', 'journal_export'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION hl_refuse_change()',
                       t || '_append_only', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change()',
                       t || '_no_truncate', t);
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_append_only');
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', t, t || '_no_truncate');
    END LOOP;
END
$$;

-- Exports and new sets take this lock (exclusive for an export), so a set
-- cannot slip in under an export that is being written.
CREATE FUNCTION hl_journal_lock_key() RETURNS bigint LANGUAGE sql IMMUTABLE AS $$ SELECT 7283100029 $$;

-- A new set is in force from its month until the next set begins (of the
-- same project, for funding): no exported month may fall in that span.
CREATE FUNCTION hl_journal_set_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    next_set date;
    exported date;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hl_journal_lock_key());
    IF TG_TABLE_NAME = 'funding_source' THEN
        SELECT min(effective_from) INTO next_set FROM funding_source
         WHERE project_id = NEW.project_id AND effective_from > NEW.effective_from;
    ELSE
        SELECT min(effective_from) INTO next_set FROM revenue_account WHERE effective_from > NEW.effective_from;
    END IF;
    SELECT max(period) INTO exported FROM journal_export
     WHERE period >= NEW.effective_from AND (next_set IS NULL OR period < next_set);
    IF exported IS NOT NULL THEN
        RAISE EXCEPTION '% from % would change the journal of %, which has been exported: a new set begins after it',
            TG_TABLE_NAME, to_char(NEW.effective_from, 'YYYY-MM'), to_char(exported, 'YYYY-MM')
            USING ERRCODE = 'HL006';
    END IF;
    NEW.recorded_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER funding_source_check BEFORE INSERT ON funding_source
    FOR EACH ROW EXECUTE FUNCTION hl_journal_set_check();
CREATE TRIGGER revenue_account_check BEFORE INSERT ON revenue_account
    FOR EACH ROW EXECUTE FUNCTION hl_journal_set_check();
ALTER TABLE funding_source ENABLE ALWAYS TRIGGER funding_source_check;
ALTER TABLE revenue_account ENABLE ALWAYS TRIGGER revenue_account_check;

-- At commit, every set touched is whole: funding shares add up to 100 with
-- lines numbered 1..n; a revenue set has its `default` account.
CREATE FUNCTION hl_journal_set_whole() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF TG_TABLE_NAME = 'funding_source' THEN
        SELECT p.code, f.effective_from, sum(f.share) AS total, count(*) AS n, max(f.line) AS top INTO bad
          FROM funding_source f JOIN project p ON p.id = f.project_id
         WHERE f.project_id = NEW.project_id AND f.effective_from = NEW.effective_from
         GROUP BY p.code, f.effective_from;
        IF bad.total <> 100 OR bad.n <> bad.top THEN
            RAISE EXCEPTION 'funding of project % from %: shares add up to % %%, not 100 %% (or lines are missing)',
                bad.code, to_char(bad.effective_from, 'YYYY-MM'), bad.total USING ERRCODE = 'HL006';
        END IF;
    ELSE
        IF NOT EXISTS (SELECT 1 FROM revenue_account
                        WHERE effective_from = NEW.effective_from AND service = 'default') THEN
            RAISE EXCEPTION 'revenue accounts from %: the set has no default account', to_char(NEW.effective_from, 'YYYY-MM')
                USING ERRCODE = 'HL006';
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER funding_source_whole AFTER INSERT ON funding_source
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hl_journal_set_whole();
CREATE CONSTRAINT TRIGGER revenue_account_whole AFTER INSERT ON revenue_account
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hl_journal_set_whole();
ALTER TABLE funding_source ENABLE ALWAYS TRIGGER funding_source_whole;
ALTER TABLE revenue_account ENABLE ALWAYS TRIGGER revenue_account_whole;

-- The journal of a closed month, derived from its statements and entries
-- alone. For each statement with a non-zero total:
--   debits: one line per funding source of the set in force for the month,
--     its share of the total split in cents by largest remainder (each line
--     gets the whole cents of |total| × share / 100; the cents left over go
--     one each to the lines with the largest fractional remainders, ties to
--     the earlier line), signed as the total;
--   credits: one line per revenue account of the set in force, the sum of
--     the entries it is credited with. An entry counts for the service of
--     the charge it stems from (a discount, refund or reversal of a job
--     counts for that job's cluster and node type): node_type:C/N, else
--     cluster:C, else compute, else default; storage, else default;
--     adjustments, else default.
-- Debits and credits of a statement each add up to its total, exactly.
-- A statement without a funding set gets no debit lines (the export
-- refuses such a month).
-- Owner's rights (like the audit views): an auditor re-derives the journal
-- without reading the tables directly.
CREATE FUNCTION hl_journal_lines(p date)
RETURNS TABLE (statement bigint, project_id bigint, side text, seq integer, fund text, cost_center text,
               grant_code text, account text, service text, share numeric, amount numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
WITH st AS (
    SELECT s.number, s.project_id, s.total FROM statement s WHERE s.period = p AND s.total <> 0
), funded AS (
    SELECT st.number, st.project_id, st.total, f.line, f.fund, f.cost_center, f.grant_code, f.account, f.share,
           trunc(abs(st.total) * f.share) AS cents,        -- |total| × 100 (cents) × share / 100
           abs(st.total) * f.share - trunc(abs(st.total) * f.share) AS remainder
      FROM st
      JOIN funding_source f ON f.project_id = st.project_id
       AND f.effective_from = (SELECT max(g.effective_from) FROM funding_source g
                                WHERE g.project_id = st.project_id AND g.effective_from <= p)
), ranked AS (
    SELECT funded.*,
           row_number() OVER (PARTITION BY number ORDER BY remainder DESC, line) AS rank,
           abs(total) * 100 - sum(cents) OVER (PARTITION BY number) AS left_over
      FROM funded
), revenue AS (
    SELECT r.service, r.fund, r.cost_center, r.account FROM revenue_account r
     WHERE r.effective_from = (SELECT max(effective_from) FROM revenue_account WHERE effective_from <= p)
), entries AS (
    SELECT st.number, st.project_id, e.amount,
           CASE WHEN o2.id IS NOT NULL THEN o2.kind WHEN o.id IS NOT NULL THEN o.kind ELSE e.kind END AS root_kind,
           CASE WHEN o2.id IS NOT NULL THEN o2.job_record_id WHEN o.id IS NOT NULL THEN o.job_record_id
                ELSE e.job_record_id END AS root_record
      FROM st
      JOIN ledger_entry e ON e.project_id = st.project_id AND e.period = p
      LEFT JOIN ledger_entry o ON o.id = e.corrects_id
      LEFT JOIN ledger_entry o2 ON o2.id = o.corrects_id
), credited AS (
    SELECT x.number, x.project_id, x.amount,
           (SELECT v.service FROM revenue v
             WHERE v.service IN (
                 CASE x.root_kind WHEN 'job' THEN 'node_type:' || lower(c.name) || '/' || n.name END,
                 CASE x.root_kind WHEN 'job' THEN 'cluster:' || lower(c.name) END,
                 CASE x.root_kind WHEN 'job' THEN 'compute' WHEN 'storage' THEN 'storage' ELSE 'adjustments' END,
                 'default')
             ORDER BY CASE WHEN v.service LIKE 'node_type:%' THEN 0 WHEN v.service LIKE 'cluster:%' THEN 1
                           WHEN v.service = 'default' THEN 3 ELSE 2 END
             LIMIT 1) AS service
      FROM entries x
      LEFT JOIN job_record r ON r.id = x.root_record AND x.root_kind = 'job'
      LEFT JOIN job j ON j.id = r.job_id
      LEFT JOIN cluster c ON c.id = j.cluster_id
      LEFT JOIN node_type n ON n.id = r.node_type_id
)
SELECT d.* FROM (
    SELECT number, project_id, 'debit' AS side, line::integer AS seq, fund, cost_center, grant_code, account,
           NULL::text AS service, share,
           round(sign(total) * (cents + CASE WHEN rank <= left_over THEN 1 ELSE 0 END) / 100, 2) AS amount
      FROM ranked) d
 WHERE d.amount <> 0
UNION ALL
SELECT g.number, g.project_id, 'credit',
       (row_number() OVER (PARTITION BY g.number ORDER BY g.service COLLATE "C"))::integer,
       v.fund, v.cost_center, NULL, v.account, g.service, NULL, g.amount
  FROM (SELECT number, project_id, service, sum(amount) AS amount FROM credited GROUP BY 1, 2, 3) g
  JOIN revenue v ON v.service = g.service
 WHERE g.amount <> 0
$$;

-- The digest of a month's journal: SHA-256 of its lines in order, one per
-- line, fields separated by tabs (NULL as empty).
CREATE FUNCTION hl_journal_digest(p date) RETURNS bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
SELECT sha256(convert_to(coalesce(string_agg(
           concat_ws(E'\t', j.statement, j.project_id, j.side, j.seq, j.fund, j.cost_center, coalesce(j.grant_code, ''),
                     j.account, coalesce(j.service, ''), coalesce(j.share::text, ''), j.amount),
           E'\n' ORDER BY j.statement, j.side DESC, j.seq), ''), 'UTF8'))
  FROM hl_journal_lines(p) j
$$;

CREATE VIEW audit.funding_sources AS
SELECT f.id, p.code AS project, f.effective_from, f.line, f.fund, f.cost_center, f.grant_code, f.account, f.share,
       f.recorded_at, f.recorded_by
  FROM funding_source f JOIN project p ON p.id = f.project_id;
CREATE VIEW audit.revenue_accounts AS
SELECT * FROM revenue_account;
CREATE VIEW audit.journal_exports AS
WITH again AS (SELECT m.period, hl_journal_digest(m.period) AS digest
                 FROM (SELECT DISTINCT period FROM journal_export) m)
SELECT x.*, a.digest = x.digest AS digest_holds FROM journal_export x JOIN again a ON a.period = x.period;

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
 WHERE a.kind = 'transfer_out' AND a.transferred_as IS NULL
UNION ALL
-- The draws balances are summed from are those of the entries.
SELECT NULL, 'draw', d.period, d.project, 'drawn on ' || d.day || coalesce(' on ' || d.cluster, ''),
       coalesce(d.expected, 'nothing'), coalesce(d.recorded, 'nothing')
  FROM audit.draw_discrepancies d
UNION ALL
-- A journal exported again is the journal finance was given (each month
-- derived once, however often it was exported).
SELECT NULL, 'journal', x.period, NULL, 'digest',
       'export ' || x.id || ' of ' || x.exported_at || ': ' || encode(x.digest, 'hex'),
       encode(a.digest, 'hex')
  FROM journal_export x
  JOIN (SELECT m.period, hl_journal_digest(m.period) AS digest
          FROM (SELECT DISTINCT period FROM journal_export) m) a ON a.period = x.period
 WHERE a.digest <> x.digest;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT ON funding_source, revenue_account, journal_layout TO hpc_ledger_billing';
        EXECUTE 'GRANT SELECT, INSERT ON journal_export TO hpc_ledger_billing';
    END IF;
END
$$;
