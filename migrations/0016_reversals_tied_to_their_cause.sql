-- A reversal is provably tied to what it reverses (issue 13, item 2).
--
-- An adversarial pass found that the ingest role could cancel any charge:
-- row-level security accepted any reversal citing *some* supersede record,
-- and the guard checked only that it mirrors its target. After one
-- legitimate `import --supersede`, the ingest role reversed a storage charge
-- of 225.00 citing that record, and the audit was silent.
--
-- There are two kinds of reversal, told apart by the job record they cite:
--
-- * a supersede's: posted by the recorder when a re-sent record changes a
--   job's charge. It cites the new (`supersede`) record, which must be the
--   latest record of the same job run as the charge it reverses; it reverses
--   a job charge only; and the new record's own charges are posted by the
--   same statement (a replacement, never a bare cancellation).
-- * a correction's: `hpc-ledger reverse`, by billing staff. It cites the
--   same job record as the entry it reverses (none for storage charges and
--   adjustments) and carries a reason.
--
-- Anything else is refused by the database, whoever posts it. The ingest
-- role may post only the first kind. `audit.discrepancies` reports any
-- reversal whose cause does not hold (one posted before this migration, or
-- with the guard disabled by the tables' owner).

-- Ingest: job charges, and the reversals of a supersede of the same run.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_ingest') THEN
        DROP POLICY IF EXISTS ledger_entry_ingest ON ledger_entry;
        CREATE POLICY ledger_entry_ingest ON ledger_entry FOR INSERT TO hpc_ledger_ingest
            WITH CHECK (kind = 'job'
                        OR (kind = 'reversal'
                            AND EXISTS (SELECT 1
                                          FROM ledger_entry o
                                          JOIN job_record ro ON ro.id = o.job_record_id
                                          JOIN job_record rn ON rn.id = ledger_entry.job_record_id
                                         WHERE o.id = ledger_entry.corrects_id
                                           AND o.kind = 'job'
                                           AND rn.kind = 'supersede'
                                           AND rn.job_id = ro.job_id
                                           AND rn.id <> ro.id)));
    END IF;
END
$$;

-- Whether reversal `n` (of entry `o`) is tied to its cause, ignoring whether
-- the supersede's charges came in the same statement (checked by the guard).
-- It reads job records with its owner's rights, so the auditor (who reads
-- only the audit schema) can use the view below.
CREATE FUNCTION hl_reversal_cause(n ledger_entry, o ledger_entry) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT CASE
        WHEN n.job_record_id IS NOT DISTINCT FROM o.job_record_id THEN
            CASE WHEN n.reason IS NOT NULL THEN 'correction' END
        WHEN o.kind = 'job' AND EXISTS (
            SELECT 1 FROM job_record rn JOIN job_record ro ON ro.job_id = rn.job_id
             WHERE rn.id = n.job_record_id AND ro.id = o.job_record_id AND rn.kind = 'supersede'
               AND rn.id <> ro.id AND rn.revision > ro.revision) THEN 'supersede'
    END
$$;

-- The guard of every statement that posts entries (as in 0006), and: every
-- reversal is tied to its cause; a supersede's reversal comes with the new
-- record's own charges, and that record is the latest of its run.
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
            OR n.unit_rate <> o.unit_rate OR n.amount_exact <> -o.amount_exact)
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
    IF FOUND THEN
        RAISE EXCEPTION 'reversal % of % entry % is not tied to what it reverses', bad.id, bad.target_kind, bad.corrects_id
            USING ERRCODE = 'HL003',
                  DETAIL = format('It cites job record %s. A reversal either cites the same job record as the entry it reverses and gives a reason (hpc-ledger reverse), or cites the latest, superseding record of the same job run, reverses a job charge, and comes with that record''s own charges.',
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
    SELECT o.id, o.amount_exact, credit.total INTO bad
      FROM ledger_entry o
      CROSS JOIN LATERAL (
           SELECT coalesce(sum(-c.amount_exact), 0)
                  - coalesce((SELECT sum(r.amount_exact) FROM ledger_entry f JOIN ledger_entry r ON r.corrects_id = f.id
                               WHERE f.corrects_id = o.id AND f.kind = 'refund' AND r.kind = 'reversal'), 0) AS total
             FROM ledger_entry c WHERE c.corrects_id = o.id AND c.kind IN ('refund', 'reversal')) credit
     WHERE o.id IN (SELECT corrects_id FROM new_entries WHERE kind IN ('refund', 'reversal'))
       AND o.kind IN ('job', 'storage')
       AND credit.total > o.amount_exact
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'entry % charged %, but % would be credited back', bad.id, bad.amount_exact, bad.total
            USING ERRCODE = 'HL003', HINT = 'Reverse its refunds before reversing the entry itself.';
    END IF;
    RETURN NULL;
END
$$;

-- The audit: every reversal with the cause it cites, and whether it holds.
CREATE VIEW audit.reversal_causes AS
SELECT n.id AS entry_id, n.period, p.code AS project, n.corrects_id, o.kind AS reverses_kind,
       n.job_record_id AS cites_job_record, o.job_record_id AS target_job_record,
       hl_reversal_cause(n, o) AS cause, n.author, n.reason
  FROM ledger_entry n
  JOIN ledger_entry o ON o.id = n.corrects_id
  LEFT JOIN project p ON p.id = n.project_id
 WHERE n.kind = 'reversal';
COMMENT ON VIEW audit.reversal_causes IS
    'Every reversal, the entry it reverses and its cause: correction (cites the same job record, with a reason) or supersede (cites the latest record of the same run); NULL when neither holds.';

-- audit.discrepancies as before (now audit.charge_discrepancies), and a
-- finding `cause` for every reversal whose cause does not hold.
ALTER VIEW audit.discrepancies RENAME TO charge_discrepancies;
CREATE VIEW audit.discrepancies AS
SELECT entry_id, kind, period, project, field, expected, recorded FROM audit.charge_discrepancies
UNION ALL
SELECT c.entry_id, 'reversal', c.period, c.project, 'cause',
       'a correction citing job record ' || coalesce(c.target_job_record::text, 'none')
           || ' with a reason, or a supersede of the same job run',
       'reverses ' || c.reverses_kind || ' entry ' || c.corrects_id || ', citing job record '
           || coalesce(c.cites_job_record::text, 'none')
  FROM audit.reversal_causes c
 WHERE c.cause IS NULL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hpc_ledger_auditor') THEN
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA audit TO hpc_ledger_auditor';
    END IF;
END
$$;
