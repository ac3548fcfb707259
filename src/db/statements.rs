//! Statements, closing a month, seals, and what corrections need to find.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::{JobId, LedgerEntryId, ProjectId};

/// Hold the period lock exclusively: every posting transaction waits.
pub async fn lock_periods(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hl_period_lock_key())")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A closed month as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClosedPeriod {
    pub period: NaiveDate,
    pub closed_at: DateTime<Utc>,
    pub closed_by: String,
    pub entry_count: i64,
    pub total: Decimal,
    pub seal_algorithm: String,
    pub seal: Vec<u8>,
    /// The month's currency, sealed with it (seal v2; `None` for v1 months).
    pub currency: Option<String>,
}

pub async fn closed_period(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<ClosedPeriod>, sqlx::Error> {
    sqlx::query_as!(
        ClosedPeriod,
        "SELECT period, closed_at, closed_by, entry_count, total, seal_algorithm, seal, currency
           FROM closed_period WHERE period = $1",
        period
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The earliest month before `period` that holds entries and is not closed.
pub async fn earlier_open_month(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT min(period) FROM ledger_entry
          WHERE period < $1 AND period > coalesce((SELECT max(period) FROM closed_period), '-infinity'::date)",
        period
    )
    .fetch_one(&mut *conn)
    .await
}

/// Close a month: record it with its seal (computed by the database over
/// its entries) and number a statement for each project with entries.
/// Returns the closed month as recorded.
pub async fn close(conn: &mut PgConnection, period: NaiveDate, closed_by: &str) -> Result<ClosedPeriod, sqlx::Error> {
    // The database's close procedure (migration 0018) checks the month,
    // issues its statements and computes the count, total, currency, time
    // and seal: the insert names only the month and who closes it.
    let row = sqlx::query_as!(
        ClosedPeriod,
        r#"INSERT INTO closed_period (period, closed_by, entry_count, total, seal_algorithm, seal)
           VALUES ($1, $2, 0, 0, 'sha256-chain-v2', sha256(''))
           RETURNING period, closed_at, closed_by, entry_count, total, seal_algorithm, seal, currency"#,
        period,
        closed_by
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(row)
}

/// The seal of each closed month, recorded and recomputed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SealCheck {
    pub period: NaiveDate,
    pub recorded_seal: String,
    pub recomputed_seal: String,
    pub recorded_entries: i64,
    pub entries: i64,
    pub recorded_total: Decimal,
    pub total: Decimal,
}

impl SealCheck {
    pub fn holds(&self) -> bool {
        self.recorded_seal == self.recomputed_seal
            && self.recorded_entries == self.entries
            && self.recorded_total == self.total
    }
}

pub async fn seal_checks(conn: &mut PgConnection, period: Option<NaiveDate>) -> Result<Vec<SealCheck>, sqlx::Error> {
    sqlx::query_as!(
        SealCheck,
        r#"SELECT period AS "period!", recorded_seal AS "recorded_seal!", recomputed_seal AS "recomputed_seal!",
                  recorded_entries AS "recorded_entries!", entries AS "entries!", recorded_total AS "recorded_total!",
                  total AS "total!"
             FROM audit.seals WHERE $1::date IS NULL OR period = $1 ORDER BY period"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// A discrepancy between SQL's recomputation and the ledger.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Discrepancy {
    pub entry_id: Option<i64>,
    pub kind: String,
    pub period: Option<NaiveDate>,
    pub project: Option<String>,
    pub field: String,
    pub expected: Option<String>,
    pub recorded: Option<String>,
}

pub async fn discrepancies(conn: &mut PgConnection) -> Result<Vec<Discrepancy>, sqlx::Error> {
    sqlx::query_as!(
        Discrepancy,
        r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
             FROM audit.discrepancies ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field"#
    )
    .fetch_all(&mut *conn)
    .await
}

/// The numbered statement of a project's closed month.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Issued {
    pub number: i64,
    pub total: Decimal,
    pub entry_count: i64,
    pub issued_at: DateTime<Utc>,
}

pub async fn issued(
    conn: &mut PgConnection,
    projects: &[ProjectId],
    period: NaiveDate,
) -> Result<Vec<(ProjectId, Issued)>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        r#"SELECT project_id AS "project_id: ProjectId", number, total, entry_count, issued_at
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
                },
            )
        })
        .collect())
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

/// A statement's storage line: one storage rate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StorageLine {
    #[serde(skip)]
    pub project_id: ProjectId,
    pub unit_rate: Decimal,
    pub tb_days: Decimal,
    pub quantity: Decimal,
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

/// A posted entry, for corrections.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryRow {
    pub id: LedgerEntryId,
    pub period: NaiveDate,
    pub project_id: ProjectId,
    pub kind: String,
    pub metric: Option<String>,
    pub job_record_id: Option<i64>,
    pub rate_card_id: Option<i64>,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    pub amount: Decimal,
    /// Already reversed.
    pub reversed: bool,
}

pub async fn entries_by_id(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<EntryRow>, sqlx::Error> {
    sqlx::query_as!(
        EntryRow,
        r#"SELECT e.id AS "id: LedgerEntryId", e.period, e.project_id AS "project_id: ProjectId", e.kind, e.metric,
                  e.job_record_id, e.rate_card_id, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal') AS "reversed!"
             FROM ledger_entry e WHERE e.id = ANY($1) ORDER BY e.id"#,
        ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// The charges and refunds of a job run (all its records) not yet reversed.
pub async fn open_job_entries(conn: &mut PgConnection, job: JobId) -> Result<Vec<EntryRow>, sqlx::Error> {
    sqlx::query_as!(
        EntryRow,
        r#"SELECT e.id AS "id: LedgerEntryId", e.period, e.project_id AS "project_id: ProjectId", e.kind, e.metric,
                  e.job_record_id, e.rate_card_id, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  false AS "reversed!"
             FROM ledger_entry e
            WHERE (e.kind = 'job' AND e.job_record_id IN (SELECT id FROM job_record WHERE job_id = $1)
                   OR e.kind = 'refund' AND e.corrects_id IN (SELECT x.id FROM ledger_entry x JOIN job_record r ON r.id = x.job_record_id
                                                               WHERE r.job_id = $1 AND x.kind = 'job'))
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal')
            ORDER BY e.id"#,
        job as JobId
    )
    .fetch_all(&mut *conn)
    .await
}

/// The unreversed refunds of these entries.
pub async fn open_refunds_of(conn: &mut PgConnection, entries: &[i64]) -> Result<Vec<EntryRow>, sqlx::Error> {
    sqlx::query_as!(
        EntryRow,
        r#"SELECT e.id AS "id: LedgerEntryId", e.period, e.project_id AS "project_id: ProjectId", e.kind, e.metric,
                  e.job_record_id, e.rate_card_id, e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  false AS "reversed!"
             FROM ledger_entry e
            WHERE e.kind = 'refund' AND e.corrects_id = ANY($1)
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal')
            ORDER BY e.id"#,
        entries
    )
    .fetch_all(&mut *conn)
    .await
}

/// What has been credited back on an entry so far (refunds and reversal,
/// less reversed refunds), as a positive amount.
pub async fn credited(conn: &mut PgConnection, entry: LedgerEntryId) -> Result<Decimal, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT (coalesce((SELECT sum(-c.amount_exact) FROM ledger_entry c
                             WHERE c.corrects_id = $1 AND c.kind IN ('refund', 'reversal')), 0)
                 - coalesce((SELECT sum(r.amount_exact) FROM ledger_entry f JOIN ledger_entry r ON r.corrects_id = f.id
                             WHERE f.corrects_id = $1 AND f.kind = 'refund' AND r.kind = 'reversal'), 0)) AS "credited!""#,
        entry as LedgerEntryId
    )
    .fetch_one(&mut *conn)
    .await
}

/// Job runs of a cluster and job id (and array index).
pub async fn find_runs(
    conn: &mut PgConnection,
    cluster: &str,
    job_id: &str,
    array_index: Option<i32>,
) -> Result<Vec<(JobId, DateTime<Utc>)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT j.id AS "id: JobId", j.started_at FROM job j JOIN cluster c ON c.id = j.cluster_id
            WHERE lower(c.name) = lower($1) AND j.scheduler_job_id = $2 AND j.array_index IS NOT DISTINCT FROM $3
            ORDER BY j.started_at"#,
        cluster,
        job_id,
        array_index
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.started_at)).collect())
}

/// Every closed month as recorded, oldest first.
pub async fn closed_periods(conn: &mut PgConnection) -> Result<Vec<ClosedPeriod>, sqlx::Error> {
    sqlx::query_as!(
        ClosedPeriod,
        "SELECT period, closed_at, closed_by, entry_count, total, seal_algorithm, seal, currency
           FROM closed_period ORDER BY period"
    )
    .fetch_all(&mut *conn)
    .await
}
