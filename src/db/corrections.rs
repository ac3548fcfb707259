//! What corrections need to find: entries by id, a job run's open charges,
//! refunds of an entry, what an entry has been credited back, runs by job id.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::entries::{NewEntry, PostedEntry, RefundBasis};
use crate::domain::kinds::EntryKind;
use crate::domain::pricing::ChargingRules;
use crate::domain::units::Metric;
use crate::ids::{DiscountId, JobId, JobRecordId, LedgerEntryId, ProjectId, RateCardId};

/// A posted entry, for corrections.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryRow {
    pub id: LedgerEntryId,
    pub period: NaiveDate,
    pub project_id: ProjectId,
    pub kind: EntryKind,
    pub metric: Option<Metric>,
    pub job_record_id: Option<JobRecordId>,
    pub rate_card_id: Option<RateCardId>,
    pub corrects_id: Option<LedgerEntryId>,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
    /// Already reversed.
    pub reversed: bool,
    pub charging_rules: ChargingRules,
    pub discount_id: Option<DiscountId>,
}

impl EntryRow {
    /// What a correction of it needs.
    pub fn posted(&self) -> PostedEntry {
        PostedEntry {
            id: self.id,
            project_id: self.project_id,
            metric: self.metric,
            job_record_id: self.job_record_id,
            rate_card_id: self.rate_card_id,
            quantity: self.quantity,
            unit_rate: self.unit_rate,
            amount_exact: self.amount_exact,
            amount: self.amount,
            charging_rules: self.charging_rules,
            discount_id: self.discount_id,
        }
    }
}

pub async fn entries_by_id(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<EntryRow>, sqlx::Error> {
    sqlx::query_as!(
        EntryRow,
        r#"SELECT e.id AS "id: LedgerEntryId", e.period, e.project_id AS "project_id: ProjectId", e.kind AS "kind: EntryKind",
                  e.metric AS "metric: Metric", e.job_record_id AS "job_record_id: JobRecordId",
                  e.rate_card_id AS "rate_card_id: RateCardId", e.corrects_id AS "corrects_id: LedgerEntryId", e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal') AS "reversed!",
                  e.charging_rules AS "charging_rules: ChargingRules", e.discount_id AS "discount_id: DiscountId"
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
        r#"SELECT e.id AS "id: LedgerEntryId", e.period, e.project_id AS "project_id: ProjectId", e.kind AS "kind: EntryKind",
                  e.metric AS "metric: Metric", e.job_record_id AS "job_record_id: JobRecordId",
                  e.rate_card_id AS "rate_card_id: RateCardId", e.corrects_id AS "corrects_id: LedgerEntryId", e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  false AS "reversed!",
                  e.charging_rules AS "charging_rules: ChargingRules", e.discount_id AS "discount_id: DiscountId"
             FROM ledger_entry e
            WHERE (e.kind = 'job' AND e.job_record_id IN (SELECT id FROM job_record WHERE job_id = $1)
                   OR e.kind IN ('refund', 'discount') AND e.corrects_id IN (SELECT x.id FROM ledger_entry x JOIN job_record r ON r.id = x.job_record_id
                                                               WHERE r.job_id = $1 AND x.kind = 'job'))
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal')
            ORDER BY e.id"#,
        job as JobId
    )
    .fetch_all(&mut *conn)
    .await
}

/// The unreversed refunds and discount lines of these entries.
pub async fn open_credits_of(conn: &mut PgConnection, entries: &[i64]) -> Result<Vec<EntryRow>, sqlx::Error> {
    sqlx::query_as!(
        EntryRow,
        r#"SELECT e.id AS "id: LedgerEntryId", e.period, e.project_id AS "project_id: ProjectId", e.kind AS "kind: EntryKind",
                  e.metric AS "metric: Metric", e.job_record_id AS "job_record_id: JobRecordId",
                  e.rate_card_id AS "rate_card_id: RateCardId", e.corrects_id AS "corrects_id: LedgerEntryId", e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  false AS "reversed!",
                  e.charging_rules AS "charging_rules: ChargingRules", e.discount_id AS "discount_id: DiscountId"
             FROM ledger_entry e
            WHERE e.kind IN ('refund', 'discount') AND e.corrects_id = ANY($1)
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal')
            ORDER BY e.id"#,
        entries
    )
    .fetch_all(&mut *conn)
    .await
}

/// What has been credited back on an entry so far (refunds, reversal and
/// discount, less reversed refunds and discounts), as a positive amount.
pub async fn credited(conn: &mut PgConnection, entry: LedgerEntryId) -> Result<Decimal, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT (coalesce((SELECT sum(-c.amount_exact) FROM ledger_entry c
                             WHERE c.corrects_id = $1 AND c.kind IN ('refund', 'reversal', 'discount')), 0)
                 - coalesce((SELECT sum(r.amount_exact) FROM ledger_entry f JOIN ledger_entry r ON r.corrects_id = f.id
                             WHERE f.corrects_id = $1 AND f.kind IN ('refund', 'discount') AND r.kind = 'reversal'), 0))
                 AS "credited!""#,
        entry as LedgerEntryId
    )
    .fetch_one(&mut *conn)
    .await
}

/// The lock corrections take in turn (migration 0051's, which the ledger's
/// guard takes before its credits check), taken first by a refund or a
/// reversal: the refunds of a charge are then posted, given their ids and
/// committed in one order, which is the order a refund of charging rules 3
/// settles against (migration 0055: by id). Taken only by the guard, after
/// the insert, two refunds at once could settle against the same refunds
/// before them, or one could be refused for the other's cents.
pub async fn lock_corrections(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('hpc-ledger corrections', 17))")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// An entry's unreversed discount line and refunds, as posted (each ≤ 0):
/// what a refund of charging rules 3 settles against.
pub async fn refund_basis(conn: &mut PgConnection, entry: LedgerEntryId) -> Result<RefundBasis, sqlx::Error> {
    let r = sqlx::query!(
        r#"SELECT coalesce(sum(x.amount_exact) FILTER (WHERE x.kind = 'discount'), 0) AS "discount_exact!",
                  coalesce(sum(x.amount) FILTER (WHERE x.kind = 'discount'), 0) AS "discount_cents!",
                  coalesce(sum(x.amount_exact) FILTER (WHERE x.kind = 'refund'), 0) AS "refunded_exact!",
                  coalesce(sum(x.amount) FILTER (WHERE x.kind = 'refund'), 0) AS "refunded_cents!"
             FROM ledger_entry x
            WHERE x.corrects_id = $1 AND x.kind IN ('discount', 'refund')
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = x.id AND r.kind = 'reversal')"#,
        entry as LedgerEntryId
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(RefundBasis {
        discount_exact: r.discount_exact,
        discount_cents: r.discount_cents,
        refunded_exact: r.refunded_exact,
        refunded_cents: r.refunded_cents,
    })
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

/// An earlier correction like `e`: the same kind, the same corrected entry
/// (or, for an adjustment, the same project and month, or with
/// `any_month_today` an earlier month when posted in the last 24 hours: a
/// retried adjustment whose month was not named posts into a later month
/// once a close or a month's end came in between), the same exact amount
/// and the same reason; its id, when and by whom.
pub async fn identical(
    conn: &mut PgConnection,
    e: &NewEntry,
    any_month_today: bool,
) -> Result<Option<(LedgerEntryId, DateTime<Utc>, String, NaiveDate)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT id AS "id: LedgerEntryId", posted_at, author, period FROM ledger_entry
            WHERE kind = $1 AND corrects_id IS NOT DISTINCT FROM $2 AND project_id = $3 AND amount_exact = $4
              AND reason IS NOT DISTINCT FROM $5
              AND ($2 IS NOT NULL OR period = $6 OR ($7 AND period < $6 AND posted_at > now() - interval '24 hours'))
            ORDER BY id DESC LIMIT 1"#,
        e.kind as EntryKind,
        e.corrects_id.map(|c| c.0),
        e.project_id.0,
        e.amount_exact,
        e.reason.as_deref(),
        e.period,
        any_month_today,
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| (r.id, r.posted_at, r.author, r.period)))
}

/// A correction posted with an idempotency key.
pub struct Request {
    pub kind: String,
    pub request: serde_json::Value,
    pub author: String,
    pub requested_at: DateTime<Utc>,
    pub entry_ids: Vec<i64>,
}

pub async fn request(conn: &mut PgConnection, key: &str) -> Result<Option<Request>, sqlx::Error> {
    sqlx::query_as!(
        Request,
        "SELECT kind, request, author, requested_at, entry_ids FROM correction_request WHERE key = $1",
        key
    )
    .fetch_optional(&mut *conn)
    .await
}

pub async fn insert_request(
    conn: &mut PgConnection,
    key: &str,
    kind: EntryKind,
    request: &serde_json::Value,
    author: &str,
    entry_ids: &[LedgerEntryId],
) -> Result<(), sqlx::Error> {
    let ids: Vec<i64> = entry_ids.iter().map(|i| i.0).collect();
    sqlx::query!(
        "INSERT INTO correction_request (key, kind, request, author, entry_ids) VALUES ($1, $2, $3, $4, $5)",
        key,
        kind as EntryKind,
        request,
        author,
        &ids
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}
