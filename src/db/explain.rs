//! Finding and explaining charges without SQL (issue 20, item 2): a job's
//! runs, their records and every entry posted for them or against them
//! (`job show`), and a project's entries in a month (`entries`).

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::{JobId, JobRecordId, LedgerEntryId, NodeTypeId, RateCardId};

/// One run of a scheduler job.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRow {
    #[serde(skip)]
    pub id: JobId,
    pub array_index: Option<i32>,
    pub submitted_at: Option<DateTime<Utc>>,
    pub started_at: DateTime<Utc>,
}

/// The runs of job `job_id` on `cluster` (every array task, unless one is
/// named), oldest start first.
pub async fn runs(
    conn: &mut PgConnection,
    cluster: &str,
    job_id: &str,
    array_index: Option<i32>,
) -> Result<Vec<RunRow>, sqlx::Error> {
    sqlx::query_as!(
        RunRow,
        r#"SELECT j.id AS "id: JobId", j.array_index, j.submitted_at, j.started_at
             FROM job j JOIN cluster c ON c.id = j.cluster_id
            WHERE c.name = $1 AND j.scheduler_job_id = $2 AND ($3::int IS NULL OR j.array_index = $3)
            ORDER BY j.array_index NULLS FIRST, j.started_at, j.id"#,
        cluster,
        job_id,
        array_index
    )
    .fetch_all(&mut *conn)
    .await
}

/// One record of a run, as stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecordRow {
    pub id: JobRecordId,
    #[serde(skip)]
    pub job: JobId,
    pub revision: i32,
    pub kind: String,
    pub project: String,
    #[serde(skip)]
    pub node_type_id: NodeTypeId,
    pub node_type: String,
    pub queue: Option<String>,
    pub user_name: String,
    pub job_name: String,
    pub state: String,
    pub exit_code: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    /// Seconds suspended between start and end: not charged (migration 0060).
    pub suspended_seconds: i32,
    pub nodes: i32,
    pub cores: i32,
    pub memory_bytes: Option<i64>,
    pub gpus: i32,
    pub source_format: String,
    pub source_ref: String,
    pub recorded_at: DateTime<Utc>,
    pub recorded_by: String,
    /// The scheduler's record as received (only when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The archived month whose file holds the raw record, once it left
    /// the database (migration 0047): `raw` is then absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_archived_in: Option<chrono::NaiveDate>,
    /// The month's records' file holding it, for a month archived before
    /// its records' text could leave with it (migration 0048); else the
    /// month's own file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_archived_to: Option<String>,
}

/// Every record of `jobs`, in revision order; the raw record only with `raw`.
pub async fn records(conn: &mut PgConnection, jobs: &[JobId], raw: bool) -> Result<Vec<RecordRow>, sqlx::Error> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.0).collect();
    sqlx::query_as!(
        RecordRow,
        r#"SELECT r.id AS "id: JobRecordId", r.job_id AS "job: JobId", r.revision, r.kind, p.code AS project,
                  r.node_type_id AS "node_type_id: NodeTypeId", n.name AS node_type, r.queue, r.user_name,
                  r.job_name, r.state, r.exit_code, r.started_at, r.ended_at, r.suspended_seconds, r.nodes, r.cores,
                  r.memory_bytes, r.gpus, r.source_format, r.source_ref, r.recorded_at, r.recorded_by,
                  CASE WHEN $2 AND a.period IS NULL THEN r.raw END AS raw, a.period AS "raw_archived_in?",
                  (SELECT f.file_name FROM archived_record_file f WHERE f.period = a.period) AS "raw_archived_to?"
             FROM job_record r
             JOIN project p ON p.id = r.project_id
             JOIN node_type n ON n.id = r.node_type_id
             LEFT JOIN archived_record a ON a.job_record_id = r.id
            WHERE r.job_id = ANY($1)
            ORDER BY r.job_id, r.revision"#,
        &ids,
        raw
    )
    .fetch_all(&mut *conn)
    .await
}

/// A ledger entry as a reader sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryRow {
    pub id: LedgerEntryId,
    pub posted_at: DateTime<Utc>,
    pub period: NaiveDate,
    pub project: String,
    pub kind: String,
    pub metric: Option<String>,
    pub job_record_id: Option<JobRecordId>,
    pub rate_card_id: Option<RateCardId>,
    pub corrects_id: Option<LedgerEntryId>,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
    pub charging_rules: i16,
    pub late: bool,
    pub author: String,
    pub reason: Option<String>,
    /// What the entry is for: `job owens/1004`, `storage`, `of entry 12: job owens/1004`.
    pub what: String,
}

/// The entries posted for `records` (their charges and the reversals of a
/// supersede) and every correction of those entries, in posting order.
pub async fn entries_of_records(
    conn: &mut PgConnection,
    records: &[JobRecordId],
) -> Result<Vec<EntryRow>, sqlx::Error> {
    let ids: Vec<i64> = records.iter().map(|r| r.0).collect();
    sqlx::query_as!(
        EntryRow,
        r#"WITH own AS (SELECT e.id FROM ledger_entry e WHERE e.job_record_id = ANY($1)),
                mine AS (SELECT id FROM own
                         UNION SELECT c.id FROM ledger_entry c WHERE c.corrects_id IN (SELECT id FROM own))
           SELECT e.id AS "id: LedgerEntryId", e.posted_at, e.period, p.code AS project, e.kind, e.metric,
                  e.job_record_id AS "job_record_id: JobRecordId", e.rate_card_id AS "rate_card_id: RateCardId",
                  e.corrects_id AS "corrects_id: LedgerEntryId", e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  e.charging_rules, e.late, e.author, e.reason, CASE WHEN e.corrects_id IS NOT NULL THEN 'of entry ' || e.corrects_id || ': ' ELSE '' END
                  || CASE WHEN c.name IS NOT NULL
                          THEN 'job ' || c.name || '/' || j.scheduler_job_id || coalesce('_' || j.array_index, '')
                          WHEN coalesce(o.kind, e.kind) = 'storage' THEN 'storage'
                          ELSE '' END AS "what!"
             FROM ledger_entry e JOIN project p ON p.id = e.project_id
             LEFT JOIN ledger_entry o ON o.id = e.corrects_id
             LEFT JOIN job_record r ON r.id = coalesce(e.job_record_id, o.job_record_id)
             LEFT JOIN job j ON j.id = r.job_id
             LEFT JOIN cluster c ON c.id = j.cluster_id
            WHERE e.id IN (SELECT id FROM mine)
            ORDER BY e.id"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// A project's entries in a month (optionally of one kind), in posting order.
pub async fn entries_of_project(
    conn: &mut PgConnection,
    project: &str,
    period: NaiveDate,
    kind: Option<&str>,
) -> Result<Vec<EntryRow>, sqlx::Error> {
    sqlx::query_as!(
        EntryRow,
        r#"SELECT e.id AS "id: LedgerEntryId", e.posted_at, e.period, p.code AS project, e.kind, e.metric,
                  e.job_record_id AS "job_record_id: JobRecordId", e.rate_card_id AS "rate_card_id: RateCardId",
                  e.corrects_id AS "corrects_id: LedgerEntryId", e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  e.charging_rules, e.late, e.author, e.reason, CASE WHEN e.corrects_id IS NOT NULL THEN 'of entry ' || e.corrects_id || ': ' ELSE '' END
                  || CASE WHEN c.name IS NOT NULL
                          THEN 'job ' || c.name || '/' || j.scheduler_job_id || coalesce('_' || j.array_index, '')
                          WHEN coalesce(o.kind, e.kind) = 'storage' THEN 'storage'
                          ELSE '' END AS "what!"
             FROM ledger_entry e JOIN project p ON p.id = e.project_id
             LEFT JOIN ledger_entry o ON o.id = e.corrects_id
             LEFT JOIN job_record r ON r.id = coalesce(e.job_record_id, o.job_record_id)
             LEFT JOIN job j ON j.id = r.job_id
             LEFT JOIN cluster c ON c.id = j.cluster_id
            WHERE lower(p.code) = lower($1) AND e.period = $2 AND ($3::text IS NULL OR e.kind = $3)
            ORDER BY e.id"#,
        project,
        period,
        kind
    )
    .fetch_all(&mut *conn)
    .await
}
