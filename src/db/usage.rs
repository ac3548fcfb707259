//! Usage reports (`hpc-ledger usage`): a project's (or every project's)
//! ledger over a range of months, summed by user, cluster, node type or
//! month, or rate class. Corrections and discounts count where what they correct counts (a refund of a
//! job of ada's on owens is ada's, owens'), so every sum is net.

use chrono::NaiveDate;
use rust_decimal::Decimal;
use sqlx::PgConnection;

/// One row of a usage report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UsageRow {
    pub project: String,
    /// The user, cluster, `cluster/node type` or `YYYY-MM`; entries that are
    /// not of a job are `(storage)` or `(adjustment)`.
    pub key: String,
    /// Job runs charged in the range (a run recorded again counts once).
    pub jobs: i64,
    pub core_hours: Decimal,
    pub gpu_hours: Decimal,
    pub tb_months: Decimal,
    pub amount: Decimal,
}

/// The rows for projects (`None`: every project) between two months
/// (first days, inclusive), by `by`: `user`, `cluster`, `node-type`,
/// `month` or `class` (the rate class of the card or storage rate that
/// priced each charge).
pub async fn usage(
    conn: &mut PgConnection,
    project: Option<&str>,
    from: NaiveDate,
    to: NaiveDate,
    by: &str,
) -> Result<Vec<UsageRow>, sqlx::Error> {
    sqlx::query_as!(
        UsageRow,
        r#"SELECT p.code AS "project!",
                  CASE $4
                      WHEN 'month' THEN to_char(e.period, 'YYYY-MM')
                      WHEN 'user' THEN CASE WHEN r.id IS NULL THEN '(' || coalesce(o.kind, e.kind) || ')'
                                            ELSE coalesce(nullif(r.user_name, ''), '(no user)') END
                      WHEN 'cluster' THEN coalesce(c.name, '(' || coalesce(o.kind, e.kind) || ')')
                      -- The class of the card or storage rate that priced it.
                      WHEN 'class' THEN coalesce(
                          (SELECT coalesce(k.name, 'default') FROM rate_card rc LEFT JOIN rate_class k ON k.id = rc.rate_class_id
                            WHERE rc.id = coalesce(e.rate_card_id, o.rate_card_id)),
                          (SELECT coalesce(k.name, 'default') FROM storage_rate sr LEFT JOIN rate_class k ON k.id = sr.rate_class_id
                            WHERE sr.id = coalesce(e.storage_rate_id, o.storage_rate_id)),
                          '(' || coalesce(o.kind, e.kind) || ')')
                      ELSE coalesce(c.name || '/' || n.name, '(' || coalesce(o.kind, e.kind) || ')')
                  END AS "key!",
                  count(DISTINCT r.job_id) FILTER (WHERE e.kind = 'job') AS "jobs!",
                  coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'core_hours'), 0) AS "core_hours!",
                  coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'gpu_hours'), 0) AS "gpu_hours!",
                  coalesce(sum(e.quantity) FILTER (WHERE e.metric = 'tb_months'), 0) AS "tb_months!",
                  sum(e.amount) AS "amount!"
             FROM ledger_entry e
             JOIN project p ON p.id = e.project_id
             LEFT JOIN ledger_entry o ON o.id = e.corrects_id
             LEFT JOIN job_record r ON r.id = coalesce(e.job_record_id, o.job_record_id)
             -- A record's cluster is its run's (the foreign key (job_id, cluster_id, started_at)).
             LEFT JOIN cluster c ON c.id = r.cluster_id
             LEFT JOIN node_type n ON n.id = r.node_type_id
            WHERE e.period BETWEEN $2 AND $3
              AND ($1::text IS NULL OR lower(p.code) = lower($1))
            GROUP BY 1, 2
            ORDER BY lower(p.code), 2"#,
        project,
        from,
        to,
        by
    )
    .fetch_all(&mut *conn)
    .await
}
