//! The finance journal's tables (migration 0029): funding sets, revenue
//! sets, the CSV layout, the journal lines of a closed month
//! (`hl_journal_lines`) and the log of exports.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::ProjectId;

/// The advisory lock exports take exclusively and new sets take shared
/// (`hl_journal_lock_key`, migration 0029).
pub async fn lock_exports(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hl_journal_lock_key())")
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// One recorded funding line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FundingRow {
    pub project_id: ProjectId,
    pub effective_from: NaiveDate,
    pub line: i16,
    pub fund: String,
    pub cost_center: String,
    pub grant_code: Option<String>,
    pub account: String,
    pub share: Decimal,
}

pub async fn funding(conn: &mut PgConnection) -> Result<Vec<FundingRow>, sqlx::Error> {
    sqlx::query_as!(
        FundingRow,
        r#"SELECT project_id AS "project_id: ProjectId", effective_from, line, fund, cost_center, grant_code, account, share
             FROM funding_source ORDER BY project_id, effective_from, line"#
    )
    .fetch_all(&mut *conn)
    .await
}

pub async fn insert_funding(conn: &mut PgConnection, rows: &[FundingRow], by: &str) -> Result<u64, sqlx::Error> {
    let projects: Vec<i64> = rows.iter().map(|r| r.project_id.0).collect();
    let froms: Vec<NaiveDate> = rows.iter().map(|r| r.effective_from).collect();
    let lines: Vec<i16> = rows.iter().map(|r| r.line).collect();
    let funds: Vec<String> = rows.iter().map(|r| r.fund.clone()).collect();
    let centers: Vec<String> = rows.iter().map(|r| r.cost_center.clone()).collect();
    let grants: Vec<Option<String>> = rows.iter().map(|r| r.grant_code.clone()).collect();
    let accounts: Vec<String> = rows.iter().map(|r| r.account.clone()).collect();
    let shares: Vec<Decimal> = rows.iter().map(|r| r.share).collect();
    let done = sqlx::query!(
        r#"INSERT INTO funding_source (project_id, effective_from, line, fund, cost_center, grant_code, account, share, recorded_by)
           SELECT * , $9 FROM UNNEST($1::bigint[], $2::date[], $3::smallint[], $4::text[], $5::text[], $6::text[],
                                    $7::text[], $8::numeric[])"#,
        &projects,
        &froms,
        &lines,
        &funds,
        &centers,
        &grants as &[Option<String>],
        &accounts,
        &shares,
        by
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// One recorded revenue account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevenueRow {
    pub effective_from: NaiveDate,
    pub service: String,
    pub fund: String,
    pub cost_center: String,
    pub account: String,
}

pub async fn revenue(conn: &mut PgConnection) -> Result<Vec<RevenueRow>, sqlx::Error> {
    sqlx::query_as!(
        RevenueRow,
        "SELECT effective_from, service, fund, cost_center, account FROM revenue_account ORDER BY effective_from, service"
    )
    .fetch_all(&mut *conn)
    .await
}

pub async fn insert_revenue(conn: &mut PgConnection, rows: &[RevenueRow], by: &str) -> Result<u64, sqlx::Error> {
    let froms: Vec<NaiveDate> = rows.iter().map(|r| r.effective_from).collect();
    let services: Vec<String> = rows.iter().map(|r| r.service.clone()).collect();
    let funds: Vec<String> = rows.iter().map(|r| r.fund.clone()).collect();
    let centers: Vec<String> = rows.iter().map(|r| r.cost_center.clone()).collect();
    let accounts: Vec<String> = rows.iter().map(|r| r.account.clone()).collect();
    let done = sqlx::query!(
        r#"INSERT INTO revenue_account (effective_from, service, fund, cost_center, account, recorded_by)
           SELECT *, $6 FROM UNNEST($1::date[], $2::text[], $3::text[], $4::text[], $5::text[])"#,
        &froms,
        &services,
        &funds,
        &centers,
        &accounts,
        by
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// The recorded CSV layout (JSON), if any.
pub async fn layout(conn: &mut PgConnection) -> Result<Option<serde_json::Value>, sqlx::Error> {
    sqlx::query_scalar!("SELECT columns FROM journal_layout")
        .fetch_optional(&mut *conn)
        .await
}

/// Record the layout; whether it changed.
pub async fn set_layout(conn: &mut PgConnection, columns: &serde_json::Value) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "INSERT INTO journal_layout (columns) VALUES ($1)
         ON CONFLICT (id) DO UPDATE SET columns = EXCLUDED.columns, updated_at = now()
         WHERE journal_layout.columns IS DISTINCT FROM EXCLUDED.columns",
        columns
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// One line of a month's journal, as `hl_journal_lines` derives it, with
/// its project's code and name.
#[derive(Debug, Clone)]
pub struct LineRow {
    pub statement: i64,
    pub project: String,
    pub project_name: String,
    pub side: String,
    pub fund: String,
    pub cost_center: String,
    pub grant_code: Option<String>,
    pub account: String,
    pub service: Option<String>,
    pub share: Option<Decimal>,
    /// Of the statement's sign for debits; the entries' sum for credits.
    pub amount: Decimal,
    /// The statement's total.
    pub total: Decimal,
}

pub async fn lines(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<LineRow>, sqlx::Error> {
    sqlx::query_as!(
        LineRow,
        r#"SELECT j.statement AS "statement!", p.code AS project,
                  -- the name the statement was issued with (migration 0069)
                  coalesce(s.project_name, p.name) AS "project_name!", j.side AS "side!",
                  j.fund AS "fund!", j.cost_center AS "cost_center!", j.grant_code, j.account AS "account!",
                  j.service, j.share, j.amount AS "amount!", s.total
             FROM hl_journal_lines($1) j
             JOIN project p ON p.id = j.project_id
             JOIN statement s ON s.number = j.statement
            ORDER BY j.statement, j.side DESC, j.seq"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// A month's statement, for the journal's header.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatementRow {
    pub number: i64,
    pub project: String,
    pub total: Decimal,
    /// Whether a funding set is in force for it.
    pub funded: bool,
}

pub async fn statements(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<StatementRow>, sqlx::Error> {
    sqlx::query_as!(
        StatementRow,
        r#"SELECT s.number, p.code AS project, s.total,
                  EXISTS (SELECT 1 FROM funding_source f WHERE f.project_id = s.project_id AND f.effective_from <= $1)
                      AS "funded!"
             FROM statement s JOIN project p ON p.id = s.project_id
            WHERE s.period = $1
            ORDER BY s.number"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// Log an export; the digest is the database's (`hl_journal_digest`).
pub async fn record_export(
    conn: &mut PgConnection,
    period: NaiveDate,
    by: &str,
    line_count: i32,
    debit_total: Decimal,
    credit_total: Decimal,
) -> Result<(i64, DateTime<Utc>, Vec<u8>), sqlx::Error> {
    let row = sqlx::query!(
        r#"INSERT INTO journal_export (period, exported_by, line_count, debit_total, credit_total, digest)
           VALUES ($1, $2, $3, $4, $5, hl_journal_digest($1))
           RETURNING id, exported_at, digest"#,
        period,
        by,
        line_count,
        debit_total,
        credit_total
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((row.id, row.exported_at, row.digest))
}

/// Every month whose journal was exported.
pub async fn exported_months(conn: &mut PgConnection) -> Result<Vec<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!("SELECT DISTINCT period FROM journal_export ORDER BY period")
        .fetch_all(&mut *conn)
        .await
}

/// Whether a revenue set is in force for a month.
pub async fn revenue_in_force(conn: &mut PgConnection, period: NaiveDate) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM revenue_account WHERE effective_from <= $1) AS "x!""#,
        period
    )
    .fetch_one(&mut *conn)
    .await
}

/// The digest of a month's journal as the database derives it now.
pub async fn digest(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<u8>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT hl_journal_digest($1) AS "digest!""#, period)
        .fetch_one(&mut *conn)
        .await
}
