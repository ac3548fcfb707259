//! Statement lines: what a project's statement of a month is derived from
//! (its job, storage and correction entries) and the numbered statements
//! issued at close.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::{LedgerEntryId, ProjectId};

/// The numbered statement of a project's closed month.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Issued {
    pub number: i64,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub total: Decimal,
    pub entry_count: i64,
    pub issued_at: DateTime<Utc>,
    /// The project's name and PI when it was issued (migration 0069; `None`
    /// for a statement issued before).
    #[serde(skip)]
    pub project_name: Option<String>,
    #[serde(skip)]
    pub project_pi: Option<String>,
    /// The center's name when it was issued (migration 0071).
    #[serde(skip)]
    pub center_name: Option<String>,
}

pub async fn issued(
    conn: &mut PgConnection,
    projects: &[ProjectId],
    period: NaiveDate,
) -> Result<Vec<(ProjectId, Issued)>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        r#"SELECT project_id AS "project_id: ProjectId", number, total, entry_count, issued_at, project_name,
                  project_pi, center_name
             FROM statement WHERE period = $1 AND project_id = ANY($2)"#,
        period,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.project_id,
                Issued {
                    number: r.number,
                    total: r.total,
                    entry_count: r.entry_count,
                    issued_at: r.issued_at,
                    project_name: r.project_name,
                    project_pi: r.project_pi,
                    center_name: r.center_name,
                },
            )
        })
        .collect())
}

/// Every statement issued for `period` (a closed month has one for each
/// project with entries in it): project, number and total, in number
/// order.
pub async fn issued_in(
    conn: &mut PgConnection,
    period: NaiveDate,
) -> Result<Vec<(ProjectId, i64, Decimal)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT project_id AS "project_id: ProjectId", number, total
             FROM statement WHERE period = $1 ORDER BY number"#,
        period
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.project_id, r.number, r.total)).collect())
}

/// Projects with entries in a month.
pub async fn projects_with_entries(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<ProjectId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT project_id AS "project_id: ProjectId" FROM ledger_entry WHERE period = $1"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// A statement's compute line: one cluster, node type, metric and rate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobLine {
    #[serde(skip)]
    pub project_id: ProjectId,
    pub cluster: String,
    pub node_type: String,
    pub metric: String,
    pub unit_rate: Decimal,
    pub late: bool,
    pub jobs: i64,
    pub quantity: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
}

pub async fn job_lines(
    conn: &mut PgConnection,
    projects: &[ProjectId],
    period: NaiveDate,
) -> Result<Vec<JobLine>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    sqlx::query_as!(
        JobLine,
        r#"SELECT e.project_id AS "project_id: ProjectId", c.name AS cluster, nt.name AS node_type, e.metric AS "metric!",
                  e.unit_rate, e.late, count(DISTINCT r.job_id) AS "jobs!", sum(e.quantity) AS "quantity!",
                  sum(e.amount) AS "amount!"
             FROM ledger_entry e
             JOIN job_record r ON r.id = e.job_record_id
             JOIN cluster c ON c.id = r.cluster_id
             JOIN node_type nt ON nt.id = r.node_type_id
            WHERE e.period = $1 AND e.project_id = ANY($2) AND e.kind = 'job'
            GROUP BY e.project_id, c.name, nt.name, e.metric, e.unit_rate, e.late
            ORDER BY e.project_id, c.name, nt.name, e.metric DESC, e.late, e.unit_rate"#,
        period,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// A statement's storage line: one price (the storage charges of the
/// month's rate rows at that price, summed: two rows of one price shown
/// apart read as the same line twice).
#[derive(Debug, Clone, serde::Serialize)]
pub struct StorageLine {
    #[serde(skip)]
    pub project_id: ProjectId,
    pub unit_rate: Decimal,
    pub tb_days: Decimal,
    pub quantity: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
}

pub async fn storage_lines(
    conn: &mut PgConnection,
    projects: &[ProjectId],
    period: NaiveDate,
) -> Result<Vec<StorageLine>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    sqlx::query_as!(
        StorageLine,
        r#"SELECT e.project_id AS "project_id: ProjectId", e.unit_rate,
                  coalesce(sum((SELECT sum(s.days * s.quota_tb) FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id)), 0)
                      AS "tb_days!",
                  sum(e.quantity) AS "quantity!", sum(e.amount) AS "amount!"
             FROM ledger_entry e
            WHERE e.period = $1 AND e.project_id = ANY($2) AND e.kind = 'storage'
            GROUP BY e.project_id, e.unit_rate
            ORDER BY e.project_id, e.unit_rate"#,
        period,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// A statement's discount line: one discount, on compute or on storage.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DiscountLine {
    #[serde(skip)]
    pub project_id: ProjectId,
    /// `compute` or `storage`: what it discounts.
    pub on: String,
    pub percent: Decimal,
    pub reason: String,
    /// `project` or `class NAME`: whose discount it is.
    pub scope: String,
    /// The list amount of the charges it discounts.
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub list_amount: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
}

pub async fn discount_lines(
    conn: &mut PgConnection,
    projects: &[ProjectId],
    period: NaiveDate,
) -> Result<Vec<DiscountLine>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    sqlx::query_as!(
        DiscountLine,
        r#"SELECT e.project_id AS "project_id: ProjectId",
                  CASE WHEN o.kind = 'job' THEN 'compute' ELSE 'storage' END AS "on!",
                  d.percent, d.reason, CASE WHEN d.project_id IS NOT NULL THEN 'project' ELSE 'class ' || rc.name END AS "scope!",
                  sum(o.amount) AS "list_amount!", sum(e.amount) AS "amount!"
             FROM ledger_entry e
             JOIN ledger_entry o ON o.id = e.corrects_id
             JOIN discount d ON d.id = e.discount_id
             LEFT JOIN rate_class rc ON rc.id = d.rate_class_id
            WHERE e.period = $1 AND e.project_id = ANY($2) AND e.kind = 'discount'
            GROUP BY e.project_id, o.kind, d.id, d.percent, d.reason, d.project_id, rc.name
            ORDER BY e.project_id, o.kind, d.id"#,
        period,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// A statement's correction line: one entry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CorrectionLine {
    #[serde(skip)]
    pub project_id: ProjectId,
    pub entry_id: LedgerEntryId,
    pub posted_at: DateTime<Utc>,
    pub kind: String,
    pub reason: Option<String>,
    pub author: String,
    /// What it corrects: `job owens/1234 core_hours (2026-10)`, `storage (2026-10)`.
    pub corrects: Option<String>,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
}

pub async fn correction_lines(
    conn: &mut PgConnection,
    projects: &[ProjectId],
    period: NaiveDate,
) -> Result<Vec<CorrectionLine>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    sqlx::query_as!(
        CorrectionLine,
        r#"SELECT e.project_id AS "project_id: ProjectId", e.id AS "entry_id: LedgerEntryId", e.posted_at, e.kind,
                  e.reason, e.author,
                  CASE WHEN o.id IS NULL THEN NULL
                       WHEN oj.id IS NOT NULL THEN
                            'job ' || c.name || '/' || oj.scheduler_job_id || coalesce('_' || oj.array_index, '')
                            || ' ' || o.metric || ' (' || to_char(o.period, 'YYYY-MM') || ')'
                       ELSE o.kind || ' ' || coalesce(o.metric, '') || ' (' || to_char(o.period, 'YYYY-MM') || ')' END
                      AS corrects,
                  e.amount
             FROM ledger_entry e
             LEFT JOIN ledger_entry o ON o.id = e.corrects_id
             LEFT JOIN job_record orr ON orr.id = o.job_record_id
             LEFT JOIN job oj ON oj.id = orr.job_id
             LEFT JOIN cluster c ON c.id = oj.cluster_id
            WHERE e.period = $1 AND e.project_id = ANY($2) AND e.kind IN ('reversal', 'refund', 'adjustment')
            ORDER BY e.project_id, e.id"#,
        period,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// What a project's entries of a month drew, by day (in the center's time
/// zone) and cluster (`None`: storage and adjustments), read from the
/// entries themselves (`hl_entry_draws`, migration 0028): they add up to the
/// month's total.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DaySpend {
    pub day: NaiveDate,
    pub cluster: Option<String>,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
}

pub async fn spend_by_day(
    conn: &mut PgConnection,
    project: ProjectId,
    period: NaiveDate,
) -> Result<Vec<DaySpend>, sqlx::Error> {
    sqlx::query_as!(
        DaySpend,
        r#"SELECT x.day AS "day!", c.name AS "cluster?", sum(x.amount) AS "amount!"
             FROM hl_entry_draws($1, $2) x LEFT JOIN cluster c ON c.id = x.cluster_id
            GROUP BY x.day, c.name
            ORDER BY x.day, c.name NULLS LAST"#,
        project as ProjectId,
        period
    )
    .fetch_all(&mut *conn)
    .await
}
