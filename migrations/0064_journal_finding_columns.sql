-- The audit's finding for a journal export whose digest no longer holds
-- named the logged digest as what the SQL expects and the SQL's as what
-- was recorded (an auditor's review of 2026-12-07): expected is the
-- month's journal recomputed (`hl_journal_digest`), recorded the export's
-- log. As migration 0061's view, with those two swapped.
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
 WHERE NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = d.period)
UNION ALL
-- A journal exported again is the journal finance was given (each month
-- derived once, however often it was exported).
SELECT NULL, 'journal', x.period, NULL, 'digest',
       encode(a.digest, 'hex'),
       'export ' || x.id || ' of ' || x.exported_at || ': ' || encode(x.digest, 'hex')
  FROM journal_export x
  JOIN (SELECT m.period, hl_journal_digest(m.period) AS digest
          FROM (SELECT DISTINCT period FROM journal_export) m) a ON a.period = x.period
 WHERE a.digest <> x.digest
   AND NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = x.period)
UNION ALL
-- The sums usage reports show are those of the entries.
SELECT NULL, 'usage', u.period, u.project, 'usage sums', coalesce(u.expected, 'nothing'),
       coalesce(u.recorded, 'nothing')
  FROM audit.usage_discrepancies u
 WHERE NOT EXISTS (SELECT 1 FROM archived_period ap WHERE ap.period = u.period)
UNION ALL
-- The draws an archive kept of a day are that day's in ledger_draw (0061).
SELECT NULL, 'draw', k.period, (SELECT p.code FROM project p WHERE p.id = k.project_id),
       'kept draws of ' || k.day || coalesce(' on ' || (SELECT c.name FROM cluster c WHERE c.id = k.cluster_id), ''),
       coalesce(d.amount || ' from ' || d.first_at || ' to ' || d.last_at, 'nothing'),
       k.amount || ' from ' || k.first_at || ' to ' || k.last_at
  FROM (SELECT a.project_id, a.period, a.day, a.cluster_id, sum(a.amount) AS amount, min(a.draw) AS first_at,
               max(a.draw) AS last_at
          FROM archived_draw a GROUP BY 1, 2, 3, 4) k
 CROSS JOIN LATERAL (
       -- by the draws' index (project, day): only the kept days are read
       SELECT sum(l.amount) AS amount, min(l.first_at) AS first_at, max(l.last_at) AS last_at
         FROM ledger_draw l
        WHERE l.project_id = k.project_id AND l.day = k.day AND l.period = k.period
          AND l.cluster_id IS NOT DISTINCT FROM k.cluster_id) d
 WHERE d.amount IS DISTINCT FROM k.amount OR d.first_at IS DISTINCT FROM k.first_at
    OR d.last_at IS DISTINCT FROM k.last_at;
