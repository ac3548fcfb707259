//! Usage reports (`hpc-ledger usage`): a project's (or every project's)
//! ledger over a range of months, summed by user, cluster, node type or
//! month, or rate class. Corrections and discounts count where what they
//! correct counts (a refund of a job of ada's on owens is ada's, owens'), so
//! every sum is net. They are read from `ledger_usage`, the entries summed
//! per project, month and key as they are posted (migration 0032; the audit
//! sums the entries again).

use chrono::NaiveDate;
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::ProjectId;

/// One row of a usage report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UsageRow {
    pub project: String,
    /// The user, cluster, `cluster/node type` or `YYYY-MM`; entries that are
    /// not of a job are `(storage)` or `(adjustment)`.
    pub key: String,
    /// Jobs charged in the range, net: a job's charge counts 1, its reversal
    /// −1 (a job recorded again with `--supersede` counts once, in the month
    /// of its first charge; a job moved to another project, in the new one).
    pub jobs: i64,
    pub core_hours: Decimal,
    pub gpu_hours: Decimal,
    pub tb_months: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
}

/// The rows for a project (`None`: every project) between two months
/// (first days, inclusive), by `by`: `user`, `cluster`, `node-type`,
/// `month` or `class` (the rate class of the card or storage rate that
/// priced each charge).
pub async fn usage(
    conn: &mut PgConnection,
    project: Option<ProjectId>,
    from: NaiveDate,
    to: NaiveDate,
    by: &str,
) -> Result<Vec<UsageRow>, sqlx::Error> {
    // Summed first by project and key (the key compared byte by byte,
    // COLLATE "C": equality is the same, the sort is cheaper), then named:
    // the project's code is looked up per row of the report, so no plan
    // joins a project list to rows it expects to be many (a year of the
    // bench's busiest project is 5,421 rows of ledger_usage in 470 keys).
    sqlx::query_as!(
        UsageRow,
        r#"SELECT r.code AS "project!", r.key AS "key!", r.jobs AS "jobs!", r.core_hours AS "core_hours!",
                  r.gpu_hours AS "gpu_hours!", r.tb_months AS "tb_months!", r.amount AS "amount!"
             FROM (SELECT (SELECT p.code FROM project p WHERE p.id = k.project_id) AS code,
                          k.key COLLATE "default" AS key,
                          k.jobs, k.core_hours, k.gpu_hours, k.tb_months, k.amount
                     FROM (SELECT u.project_id,
                                  CASE $4
                                      WHEN 'month' THEN to_char(u.period, 'YYYY-MM')
                                      WHEN 'user' THEN CASE WHEN u.kind <> 'job' THEN '(' || u.kind || ')'
                                                            ELSE coalesce(nullif(u.user_name, ''), '(no user)') END
                                      WHEN 'cluster' THEN coalesce(c.name, '(' || u.kind || ')')
                                      -- The class of the card or storage rate that priced it.
                                      WHEN 'class' THEN coalesce(
                                          (SELECT coalesce(k.name, 'default') FROM rate_card rc
                                             LEFT JOIN rate_class k ON k.id = rc.rate_class_id
                                            WHERE rc.id = u.rate_card_id),
                                          (SELECT coalesce(k.name, 'default') FROM storage_rate sr
                                             LEFT JOIN rate_class k ON k.id = sr.rate_class_id
                                            WHERE sr.id = u.storage_rate_id),
                                          '(' || u.kind || ')')
                                      ELSE coalesce(c.name || '/' || n.name, '(' || u.kind || ')')
                                  END COLLATE "C" AS key,
                                  sum(u.jobs)::bigint AS jobs,
                                  sum(u.core_hours) AS core_hours,
                                  sum(u.gpu_hours) AS gpu_hours,
                                  sum(u.tb_months) AS tb_months,
                                  sum(u.amount) AS amount
                             FROM ledger_usage u
                             LEFT JOIN cluster c ON c.id = u.cluster_id
                             LEFT JOIN node_type n ON n.id = u.node_type_id
                            WHERE u.period BETWEEN $2 AND $3
                              -- A range, not `$1 IS NULL OR …`: a plan made for any
                              -- project (a generic plan) still reads one project's rows
                              -- through (project_id, period).
                              AND u.project_id BETWEEN coalesce($1::bigint, 0)
                                                   AND coalesce($1::bigint, 9223372036854775807)
                            GROUP BY 1, 2) k) r
            ORDER BY lower(r.code), r.key"#,
        project as Option<ProjectId>,
        from,
        to,
        by
    )
    .fetch_all(&mut *conn)
    .await
}
