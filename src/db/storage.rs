//! Storage billing: quota history, billing runs, storage entries and the
//! segments that explain them.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::pricing::ChargingRules;
use crate::domain::storage::QuotaChange;
use crate::ids::{BillingRunId, DiscountId, LedgerEntryId, ProjectId, StorageRateId};

/// Hold the storage-billing lock (exclusive) for this transaction.
pub async fn lock_billing(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hl_storage_lock_key())")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The quota changes that decide a month: the last one before `start` of
/// each project, and every one in `[start, end)`.
pub async fn quotas_for_month(
    conn: &mut PgConnection,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Vec<(ProjectId, QuotaChange)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"(SELECT DISTINCT ON (project_id) project_id AS "project_id!: ProjectId", effective_from AS "effective_from!",
                   quota_tb AS "quota_tb!"
              FROM storage_quota WHERE effective_from < $1
             ORDER BY project_id, effective_from DESC)
           UNION ALL
           (SELECT project_id, effective_from, quota_tb FROM storage_quota
             WHERE effective_from >= $1 AND effective_from < $2)
           ORDER BY 1, 2"#,
        start,
        end
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.project_id,
                QuotaChange {
                    effective_from: r.effective_from,
                    quota_tb: r.quota_tb,
                },
            )
        })
        .collect())
}

/// A billing run as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BillingRun {
    pub id: BillingRunId,
    pub kind: String,
    pub period: NaiveDate,
    pub run_at: DateTime<Utc>,
    pub author: String,
    pub project_count: i32,
    pub entry_count: i32,
    pub total: Decimal,
}

pub async fn billing_run(
    conn: &mut PgConnection,
    kind: &str,
    period: NaiveDate,
) -> Result<Option<BillingRun>, sqlx::Error> {
    sqlx::query_as!(
        BillingRun,
        r#"SELECT id AS "id: BillingRunId", kind, period, run_at, author, project_count, entry_count, total
             FROM billing_run WHERE kind = $1 AND period = $2"#,
        kind,
        period
    )
    .fetch_optional(&mut *conn)
    .await
}

pub async fn billing_runs(conn: &mut PgConnection) -> Result<Vec<BillingRun>, sqlx::Error> {
    sqlx::query_as!(
        BillingRun,
        r#"SELECT id AS "id: BillingRunId", kind, period, run_at, author, project_count, entry_count, total
             FROM billing_run ORDER BY period, id"#
    )
    .fetch_all(&mut *conn)
    .await
}

pub async fn insert_billing_run(
    conn: &mut PgConnection,
    kind: &str,
    period: NaiveDate,
    author: &str,
    project_count: i32,
    entry_count: i32,
    total: Decimal,
) -> Result<BillingRunId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO billing_run (kind, period, author, project_count, entry_count, total)
           VALUES ($1, $2, $3, $4, $5, $6) RETURNING id AS "id: BillingRunId""#,
        kind,
        period,
        author,
        project_count,
        entry_count,
        total
    )
    .fetch_one(&mut *conn)
    .await
}

/// A month whose storage was waived: not billed, by decision (migration 0023).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Waiver {
    pub period: NaiveDate,
    pub reason: String,
    pub author: String,
    pub waived_at: DateTime<Utc>,
}

pub async fn waiver(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<Waiver>, sqlx::Error> {
    sqlx::query_as!(
        Waiver,
        "SELECT period, reason, author, waived_at FROM storage_waiver WHERE period = $1",
        period
    )
    .fetch_optional(&mut *conn)
    .await
}

pub async fn waivers(conn: &mut PgConnection) -> Result<Vec<Waiver>, sqlx::Error> {
    sqlx::query_as!(
        Waiver,
        "SELECT period, reason, author, waived_at FROM storage_waiver ORDER BY period"
    )
    .fetch_all(&mut *conn)
    .await
}

/// Record that `period`'s storage is not billed; the database refuses a
/// month that is billed, closed or not over.
pub async fn insert_waiver(
    conn: &mut PgConnection,
    period: NaiveDate,
    reason: &str,
    author: &str,
) -> Result<Waiver, sqlx::Error> {
    sqlx::query_as!(
        Waiver,
        "INSERT INTO storage_waiver (period, reason, author) VALUES ($1, $2, $3)
         RETURNING period, reason, author, waived_at",
        period,
        reason,
        author
    )
    .fetch_one(&mut *conn)
    .await
}

/// The months before `before`, after the last closed one, that had a quota
/// in force and were neither billed nor waived (closing `before` would make
/// them unbillable).
pub async fn unbilled_months(conn: &mut PgConnection, before: NaiveDate) -> Result<Vec<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT hl_unbilled_storage_months($1) AS "months!""#, before)
        .fetch_one(&mut *conn)
        .await
}

/// The first month a month-end pass starts from: the month after the last
/// closed one; with nothing closed, the earlier of the first month with
/// entries and the first month a quota above zero took effect (in the
/// billing time zone). `None` when there is neither.
pub async fn first_open_month(conn: &mut PgConnection) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT coalesce((SELECT (max(period) + interval '1 month')::date FROM closed_period),
                           least((SELECT min(period) FROM ledger_entry),
                                 (SELECT date_trunc('month', min(q.effective_from AT TIME ZONE c.time_zone))::date
                                    FROM storage_quota q CROSS JOIN center c WHERE q.quota_tb > 0))) AS "first""#
    )
    .fetch_one(&mut *conn)
    .await
}

/// A storage entry to post.
pub struct StorageEntry {
    pub project_id: ProjectId,
    pub storage_rate_id: StorageRateId,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    pub amount: Decimal,
}

/// Post storage entries in one statement; returns (project, rate, entry id).
pub async fn insert_entries(
    conn: &mut PgConnection,
    run: BillingRunId,
    period: NaiveDate,
    entries: &[StorageEntry],
    rules: ChargingRules,
    author: &str,
) -> Result<Vec<(ProjectId, StorageRateId, LedgerEntryId)>, sqlx::Error> {
    let project: Vec<i64> = entries.iter().map(|e| e.project_id.0).collect();
    let rate_id: Vec<i64> = entries.iter().map(|e| e.storage_rate_id.0).collect();
    let quantity: Vec<Decimal> = entries.iter().map(|e| e.quantity).collect();
    let rate: Vec<Decimal> = entries.iter().map(|e| e.unit_rate).collect();
    let exact: Vec<Decimal> = entries.iter().map(|e| e.amount_exact).collect();
    let amount: Vec<Decimal> = entries.iter().map(|e| e.amount).collect();
    let rows = sqlx::query!(
        r#"INSERT INTO ledger_entry (period, project_id, kind, metric, storage_rate_id, billing_run_id, quantity,
                                     unit_rate, amount_exact, amount, charging_rules, author)
           SELECT $1, p, 'storage', 'tb_months', s, $2, q, r, x, a, $10, $9
             FROM UNNEST($3::bigint[], $4::bigint[], $5::numeric[], $6::numeric[], $7::numeric[], $8::numeric[])
                  WITH ORDINALITY AS u(p, s, q, r, x, a, i)
            ORDER BY i
           RETURNING project_id AS "project_id: ProjectId", storage_rate_id AS "storage_rate_id!: StorageRateId",
                     id AS "id: LedgerEntryId""#,
        period,
        run as BillingRunId,
        &project,
        &rate_id,
        &quantity,
        &rate,
        &exact,
        &amount,
        author,
        rules as ChargingRules,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.project_id, r.storage_rate_id, r.id))
        .collect())
}

/// The discount line of a storage charge posted by this run (docs/rules.md R8).
pub struct StorageDiscountLine {
    pub charge: LedgerEntryId,
    pub discount_id: DiscountId,
    pub amount_exact: Decimal,
    pub amount: Decimal,
}

/// Post the discount lines of storage charges, in one statement: each
/// copies its charge's month, project, metric, rate, run and rules. A line
/// whose charge is missing is an error, after the others were inserted:
/// the caller rolls the transaction back.
pub async fn insert_discounts(
    conn: &mut PgConnection,
    lines: &[StorageDiscountLine],
    author: &str,
) -> Result<u64, sqlx::Error> {
    if lines.is_empty() {
        return Ok(0);
    }
    let charge: Vec<i64> = lines.iter().map(|l| l.charge.0).collect();
    let discount: Vec<i64> = lines.iter().map(|l| l.discount_id.0).collect();
    let exact: Vec<Decimal> = lines.iter().map(|l| l.amount_exact).collect();
    let amount: Vec<Decimal> = lines.iter().map(|l| l.amount).collect();
    let done = sqlx::query!(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, storage_rate_id, billing_run_id, corrects_id,
                                   quantity, unit_rate, amount_exact, amount, charging_rules, author, discount_id)
         SELECT c.period, c.project_id, 'discount', c.metric, c.storage_rate_id, c.billing_run_id, c.id,
                0, 0, u.x, u.a, c.charging_rules, $5, u.d
           FROM UNNEST($1::bigint[], $2::bigint[], $3::numeric[], $4::numeric[]) WITH ORDINALITY AS u(e, d, x, a, i)
           JOIN ledger_entry c ON c.id = u.e
          ORDER BY u.i",
        &charge,
        &discount,
        &exact,
        &amount,
        author
    )
    .execute(&mut *conn)
    .await?;
    let posted = done.rows_affected();
    if posted != lines.len() as u64 {
        // The join would drop a line whose charge is missing, and the
        // project be billed its full price: refuse the run instead.
        let missing: Option<i64> = sqlx::query_scalar(
            "SELECT u.e FROM UNNEST($1::bigint[]) AS u(e)
              WHERE NOT EXISTS (SELECT 1 FROM ledger_entry c WHERE c.id = u.e) LIMIT 1",
        )
        .bind(&charge)
        .fetch_optional(&mut *conn)
        .await?;
        let which = missing.map_or_else(String::new, |e| format!(" (no ledger entry {e})"));
        return Err(sqlx::Error::InvalidArgument(format!(
            "{} storage discount lines to post, {posted} matched their charge{which}: refused, none posted",
            lines.len()
        )));
    }
    Ok(posted)
}

/// A segment of days behind a storage entry.
pub struct Segment {
    pub entry: LedgerEntryId,
    pub first_day: NaiveDate,
    pub last_day: NaiveDate,
    pub days: i32,
    pub quota_tb: Decimal,
    pub tb_month_price: Decimal,
}

pub async fn insert_segments(conn: &mut PgConnection, segments: &[Segment]) -> Result<u64, sqlx::Error> {
    let entry: Vec<i64> = segments.iter().map(|s| s.entry.0).collect();
    let first: Vec<NaiveDate> = segments.iter().map(|s| s.first_day).collect();
    let last: Vec<NaiveDate> = segments.iter().map(|s| s.last_day).collect();
    let days: Vec<i32> = segments.iter().map(|s| s.days).collect();
    let quota: Vec<Decimal> = segments.iter().map(|s| s.quota_tb).collect();
    let price: Vec<Decimal> = segments.iter().map(|s| s.tb_month_price).collect();
    let done = sqlx::query!(
        "INSERT INTO storage_charge_segment (ledger_entry_id, first_day, last_day, days, quota_tb, tb_month_price)
         SELECT * FROM UNNEST($1::bigint[], $2::date[], $3::date[], $4::int[], $5::numeric[], $6::numeric[])",
        &entry,
        &first,
        &last,
        &days,
        &quota,
        &price
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Append one quota change.
pub async fn insert_quota(
    conn: &mut PgConnection,
    project: ProjectId,
    effective_from: DateTime<Utc>,
    quota_tb: Decimal,
    recorded_by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO storage_quota (project_id, effective_from, quota_tb, recorded_by) VALUES ($1, $2, $3, $4)",
        project as ProjectId,
        effective_from,
        quota_tb,
        recorded_by
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A quota change as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QuotaRow {
    pub effective_from: DateTime<Utc>,
    pub quota_tb: Decimal,
    pub recorded_at: DateTime<Utc>,
    pub recorded_by: String,
}

pub async fn quota_history(conn: &mut PgConnection, project: ProjectId) -> Result<Vec<QuotaRow>, sqlx::Error> {
    sqlx::query_as!(
        QuotaRow,
        "SELECT effective_from, quota_tb, recorded_at, recorded_by FROM storage_quota
          WHERE project_id = $1 ORDER BY effective_from",
        project as ProjectId
    )
    .fetch_all(&mut *conn)
    .await
}

/// Project codes by id.
pub async fn project_codes(
    conn: &mut PgConnection,
    ids: &[ProjectId],
) -> Result<Vec<(ProjectId, String)>, sqlx::Error> {
    let ids: Vec<i64> = ids.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        r#"SELECT id AS "id: ProjectId", code FROM project WHERE id = ANY($1)"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.code)).collect())
}
