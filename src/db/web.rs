//! What the web view reads (migration 0030): access tokens, a page of
//! projects with a month's spend, a project's months, and its recent job
//! records, newest first, a page at a time.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::ProjectId;

/// The project a token sees, when it is known, not revoked and not expired.
pub async fn token_project(conn: &mut PgConnection, hash: &[u8]) -> Result<Option<ProjectId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT t.project_id AS "project_id: ProjectId" FROM access_token t
            WHERE t.token_hash = $1 AND t.expires_at > now()
              AND NOT EXISTS (SELECT 1 FROM access_revocation r WHERE r.token_id = t.id)"#,
        hash
    )
    .fetch_optional(&mut *conn)
    .await
}

pub async fn insert_token(
    conn: &mut PgConnection,
    project: ProjectId,
    hash: &[u8],
    by: &str,
    expires_at: DateTime<Utc>,
    note: Option<&str>,
) -> Result<(i64, DateTime<Utc>), sqlx::Error> {
    let row = sqlx::query!(
        "INSERT INTO access_token (project_id, token_hash, created_by, expires_at, note)
         VALUES ($1, $2, $3, $4, $5) RETURNING id, expires_at",
        project as ProjectId,
        hash,
        by,
        expires_at,
        note
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((row.id, row.expires_at))
}

/// Revoke a token; whether it was not revoked before.
pub async fn revoke(conn: &mut PgConnection, id: i64, by: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "INSERT INTO access_revocation (token_id, revoked_by)
         SELECT id, $2 FROM access_token WHERE id = $1 ON CONFLICT (token_id) DO NOTHING",
        id,
        by
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// A token as listed (never the token itself).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenRow {
    pub id: i64,
    pub project: String,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub expires_at: DateTime<Utc>,
    pub note: Option<String>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub async fn tokens(conn: &mut PgConnection) -> Result<Vec<TokenRow>, sqlx::Error> {
    sqlx::query_as!(
        TokenRow,
        r#"SELECT t.id, p.code AS project, t.created_at, t.created_by, t.expires_at, t.note,
                  r.revoked_at AS "revoked_at?"
             FROM access_token t JOIN project p ON p.id = t.project_id
             LEFT JOIN access_revocation r ON r.token_id = t.id
            ORDER BY t.id"#
    )
    .fetch_all(&mut *conn)
    .await
}

/// A project in the billing office's list, with a month's spend.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProjectSpend {
    #[serde(skip)]
    pub id: ProjectId,
    pub code: String,
    pub name: String,
    pub pi: String,
    pub spend: Decimal,
}

/// A page of projects by code, with what was posted into `period`.
pub async fn projects_page(
    conn: &mut PgConnection,
    period: NaiveDate,
    offset: i64,
    limit: i64,
) -> Result<Vec<ProjectSpend>, sqlx::Error> {
    sqlx::query_as!(
        ProjectSpend,
        r#"SELECT p.id AS "id: ProjectId", p.code, p.name, p.pi,
                  coalesce((SELECT sum(e.amount) FROM ledger_entry e WHERE e.project_id = p.id AND e.period = $1), 0)
                      AS "spend!"
             FROM project p ORDER BY lower(p.code), p.id OFFSET $2 LIMIT $3"#,
        period,
        offset,
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

pub async fn project_count(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM project"#)
        .fetch_one(&mut *conn)
        .await
}

/// One month of a project: closed (with its statement) or open.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MonthRow {
    pub period: NaiveDate,
    /// The statement's number, when the month is closed.
    pub number: Option<i64>,
    pub total: Decimal,
    /// The month's archive file, when it is archived (its pages are gone).
    pub archived_to: Option<String>,
}

/// Every month a project has a statement or entries in, newest first.
pub async fn months(conn: &mut PgConnection, project: ProjectId) -> Result<Vec<MonthRow>, sqlx::Error> {
    sqlx::query_as!(
        MonthRow,
        r#"SELECT s.period AS "period!", s.number AS "number?", s.total AS "total!",
                  (SELECT a.file_name FROM archived_period a WHERE a.period = s.period) AS "archived_to?"
             FROM statement s WHERE s.project_id = $1
           UNION ALL
           SELECT e.period, NULL, sum(e.amount), NULL
             FROM ledger_entry e
            WHERE e.project_id = $1 AND e.period > coalesce((SELECT max(period) FROM closed_period), '-infinity')
            GROUP BY e.period
            ORDER BY 1 DESC"#,
        project as ProjectId
    )
    .fetch_all(&mut *conn)
    .await
}

/// A job record of the project, with what it was charged (its job entries,
/// before discounts and corrections).
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobRow {
    pub id: i64,
    pub cluster: String,
    pub job_id: String,
    pub array_index: Option<i32>,
    pub kind: String,
    /// A later record of the same run superseded this one (its charge was reversed).
    pub replaced: bool,
    pub user_name: String,
    pub node_type: String,
    pub cores: i32,
    pub gpus: i32,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    /// Seconds suspended between start and end: not charged.
    pub suspended_seconds: i32,
    pub state: String,
    pub charged: Decimal,
    /// The month its charge was archived in (then `charged` is 0 here: the
    /// charge is in that month's archive file).
    pub archived_in: Option<chrono::NaiveDate>,
}

/// Up to `limit` job records of a project older than record `before`
/// (newest first).
pub async fn jobs(
    conn: &mut PgConnection,
    project: ProjectId,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<JobRow>, sqlx::Error> {
    sqlx::query_as!(
        JobRow,
        r#"SELECT r.id, c.name AS cluster, j.scheduler_job_id AS job_id, j.array_index, r.kind,
                  EXISTS (SELECT 1 FROM job_record l WHERE l.job_id = r.job_id AND l.revision > r.revision AND l.kind = 'supersede') AS "replaced!",
                  r.user_name,
                  n.name AS node_type, r.cores, r.gpus, r.started_at, r.ended_at, r.suspended_seconds, r.state,
                  coalesce((SELECT sum(e.amount) FROM ledger_entry e WHERE e.job_record_id = r.id AND e.kind = 'job'), 0)
                      AS "charged!",
                  (SELECT a.period FROM archived_charge a WHERE a.job_record_id = r.id) AS archived_in
             FROM (SELECT * FROM job_record
                    WHERE project_id = $1 AND id < coalesce($2, 9223372036854775807)
                    ORDER BY id DESC LIMIT $3) r
             JOIN job j ON j.id = r.job_id
             JOIN cluster c ON c.id = r.cluster_id
             JOIN node_type n ON n.id = r.node_type_id
            ORDER BY r.id DESC"#,
        project as ProjectId,
        before,
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

/// A project's code by id.
pub async fn project_code(conn: &mut PgConnection, id: ProjectId) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT code FROM project WHERE id = $1", id as ProjectId)
        .fetch_optional(&mut *conn)
        .await
}

/// Which of these projects have an allocation entry (are budgeted).
pub async fn budgeted_among(conn: &mut PgConnection, ids: &[ProjectId]) -> Result<Vec<ProjectId>, sqlx::Error> {
    let ids: Vec<i64> = ids.iter().map(|p| p.0).collect();
    sqlx::query_scalar!(
        r#"SELECT DISTINCT project_id AS "id!: ProjectId" FROM allocation WHERE project_id = ANY($1)"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}
