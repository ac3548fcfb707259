-- audit.usage_discrepancies (0035) without a lookup per entry (issue 19,
-- item 5). The entries' side looked up what each entry corrects, for the
-- one case that needs it (a reversal of a job's core-hours counts -1 job),
-- through a lateral subquery behind `OFFSET 0` on every entry. Its cost,
-- an index probe estimated for each of them, made PostgreSQL read the
-- whole ledger through its (project, month) index in that order, one heap
-- page after another at random, to group without sorting. Now the
-- reversals, the only entries whose corrected entry counts, are joined to
-- it apart, and every other entry is summed as it is: the same sums, from
-- a sequential (and parallel) read of the ledger. A filter on the month
-- still reaches both reads.
--
-- Measured on a `bench --keep` ledger of 1,274,200 entries (Intel Xeon, 2
-- cores): the view alone 3.3 s -> 1.2 s; for one month 0.23 s, unchanged;
-- the audit's findings, counted in psql, 7.3 s with it. `bench`'s whole
-- audit of that size: 12.3 s with 0038 alone, 7.9 s with 0038-0040.
CREATE OR REPLACE VIEW audit.usage_discrepancies AS
SELECT p.code AS project, s.period,
       s.jobs || ' jobs, ' || s.core_hours || ' core-hours, ' || s.gpu_hours || ' GPU-hours, '
           || s.tb_months || ' TB-months, ' || s.amount || ' from ' || s.entries || ' entries' AS expected,
       s.kept_jobs || ' jobs, ' || s.kept_core_hours || ' core-hours, ' || s.kept_gpu_hours || ' GPU-hours, '
           || s.kept_tb_months || ' TB-months, ' || s.kept_amount || ' from ' || s.kept_entries || ' entries' AS recorded
  FROM (SELECT u.project_id, u.period,
               max(u.jobs) FILTER (WHERE NOT u.kept) AS jobs,
               max(u.core_hours) FILTER (WHERE NOT u.kept) AS core_hours,
               max(u.gpu_hours) FILTER (WHERE NOT u.kept) AS gpu_hours,
               max(u.tb_months) FILTER (WHERE NOT u.kept) AS tb_months,
               max(u.amount) FILTER (WHERE NOT u.kept) AS amount,
               max(u.entries) FILTER (WHERE NOT u.kept) AS entries,
               max(u.jobs) FILTER (WHERE u.kept) AS kept_jobs,
               max(u.core_hours) FILTER (WHERE u.kept) AS kept_core_hours,
               max(u.gpu_hours) FILTER (WHERE u.kept) AS kept_gpu_hours,
               max(u.tb_months) FILTER (WHERE u.kept) AS kept_tb_months,
               max(u.amount) FILTER (WHERE u.kept) AS kept_amount,
               max(u.entries) FILTER (WHERE u.kept) AS kept_entries
          FROM (SELECT k.project_id, k.period, true AS kept, sum(k.jobs) AS jobs, sum(k.core_hours) AS core_hours,
                       sum(k.gpu_hours) AS gpu_hours, sum(k.tb_months) AS tb_months, sum(k.amount) AS amount,
                       sum(k.entries) AS entries
                  FROM ledger_usage k
                 GROUP BY 1, 2
                UNION ALL
                SELECT e.project_id, e.period, false,
                       count(*) FILTER (WHERE e.kind = 'job' AND e.metric = 'core_hours')
                           - count(*) FILTER (WHERE e.kind = 'reversal' AND e.o_kind = 'job' AND e.o_metric = 'core_hours'),
                       coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'core_hours'), 0),
                       coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'gpu_hours'), 0),
                       coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'tb_months'), 0),
                       sum(e.amount), count(*)
                  FROM (SELECT e.project_id, e.period, e.kind, e.metric, e.quantity, e.amount,
                               NULL::text AS o_kind, NULL::text AS o_metric
                          FROM ledger_entry e
                         WHERE e.kind <> 'reversal'
                        UNION ALL
                        SELECT e.project_id, e.period, e.kind, e.metric, e.quantity, e.amount, o.kind, o.metric
                          FROM ledger_entry e
                          LEFT JOIN ledger_entry o ON o.id = e.corrects_id
                         WHERE e.kind = 'reversal') e
                 GROUP BY 1, 2) u
         GROUP BY u.project_id, u.period) s
  JOIN project p ON p.id = s.project_id
 WHERE (s.jobs, s.core_hours, s.gpu_hours, s.tb_months, s.amount, s.entries)
       IS DISTINCT FROM (s.kept_jobs, s.kept_core_hours, s.kept_gpu_hours, s.kept_tb_months, s.kept_amount,
                         s.kept_entries);
