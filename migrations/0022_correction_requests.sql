-- Corrections are idempotent too (issue 20, item 3), and commands can ask
-- whether the ledger is configured (item 6).
--
-- `hpc-ledger refund … --fraction 0.5` run twice refunded 100 %, silently.
-- Now a correction identical to one already posted (same kind, the same
-- entries corrected or the same project, the same exact amounts, the same
-- reason) is refused unless `--again` is given; and a script may pass
-- `--idempotency-key KEY`: the first correction with a key is kept here with
-- the entries it posted, and running it again answers with those entries
-- instead of posting new ones (a key used for a different correction is an
-- error).

CREATE TABLE correction_request (
    key          text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 200 AND key !~ '[[:cntrl:]]'),
    kind         text NOT NULL CHECK (kind IN ('reversal', 'refund', 'adjustment')),
    -- What was asked: the target, the fraction or amount, the reason, the month.
    request      jsonb NOT NULL,
    author       text NOT NULL CHECK (length(author) BETWEEN 1 AND 200),
    requested_at timestamptz NOT NULL DEFAULT now(),
    entry_ids    bigint[] NOT NULL CHECK (cardinality(entry_ids) >= 1)
);
COMMENT ON TABLE correction_request IS
    'Corrections posted with an idempotency key, and the ledger entries each posted: the same key again answers with them.';
CREATE TRIGGER correction_request_append_only BEFORE UPDATE OR DELETE ON correction_request
    FOR EACH ROW EXECUTE FUNCTION hl_refuse_change();
CREATE TRIGGER correction_request_no_truncate BEFORE TRUNCATE ON correction_request
    FOR EACH STATEMENT EXECUTE FUNCTION hl_refuse_change();
ALTER TABLE correction_request ENABLE ALWAYS TRIGGER correction_request_append_only;
ALTER TABLE correction_request ENABLE ALWAYS TRIGGER correction_request_no_truncate;

-- Finding an earlier identical correction is a lookup by the entry it
-- corrects (an index exists) or, for adjustments, by project and month.

-- Whether a center configuration has been applied (issue 20, item 6:
-- commands refuse to read from, or record into, an unconfigured ledger). Any
-- role may ask, also the auditor, which may not read the tables.
CREATE FUNCTION hl_center_configured() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM center)
$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_billing') THEN
        EXECUTE 'GRANT SELECT, INSERT ON correction_request TO hpc_ledger_billing';
    END IF;
END
$$;
