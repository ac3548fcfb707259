//! The read-only web view's use cases (docs/web.md): access tokens that see
//! one project, and what its pages show — the billing office's project list
//! with a month's spend and balance, a project's months, its statement of a
//! month with the chart and users, and its recent jobs a page at a time.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::db::web::{self as wdb, JobRow, MonthRow, TokenRow};
use crate::db::{DbError, reference};
use crate::domain::budget::Balance;
use crate::domain::period::Month;
use crate::ids::ProjectId;
use crate::service::statement::{Details, Statement, StatementError, Which, statements_with_details};

/// Projects on one page of the billing office's list.
pub const PROJECTS_PER_PAGE: i64 = 50;
/// Job records on one page of a project.
pub const JOBS_PER_PAGE: i64 = 50;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("unknown project {0}")]
    UnknownProject(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Statement(#[from] StatementError),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for WebError {
    fn from(e: sqlx::Error) -> Self {
        WebError::Db(e.into())
    }
}

/// Who is asking: the billing office sees everything, a token one project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewer {
    Billing,
    Project(ProjectId),
}

fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// The project a token sees, if it is a live token.
pub async fn token_project(pool: &PgPool, token: &str) -> Result<Option<ProjectId>, WebError> {
    if !token.starts_with("hlv_") || token.len() != 68 {
        return Ok(None);
    }
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    Ok(wdb::token_project(&mut conn, &hash(token)).await?)
}

/// A token just issued: shown once.
#[derive(Debug, Clone, Serialize)]
pub struct Granted {
    pub id: i64,
    pub project: String,
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// Issue a token that sees one project until `expires_at`.
pub async fn grant(
    pool: &PgPool,
    project: &str,
    expires_at: DateTime<Utc>,
    note: Option<&str>,
    by: &str,
) -> Result<Granted, WebError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let p = crate::service::project(&mut conn, project)
        .await?
        .map_err(WebError::UnknownProject)?;
    if expires_at <= Utc::now() || expires_at > Utc::now() + chrono::TimeDelta::days(3 * 365) {
        return Err(WebError::Invalid(format!(
            "a token expires after it is made and within 3 years, not at {expires_at}"
        )));
    }
    // 244 random bits from the operating system (two version-4 UUIDs).
    let token = format!("hlv_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let (id, expires_at) = wdb::insert_token(&mut conn, p.id, &hash(&token), by, expires_at, note).await?;
    Ok(Granted {
        id,
        project: p.code,
        token,
        expires_at,
    })
}

/// Revoke a token; whether it was live.
pub async fn revoke(pool: &PgPool, id: i64, by: &str) -> Result<bool, WebError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    Ok(wdb::revoke(&mut conn, id, by).await?)
}

pub async fn tokens(pool: &PgPool) -> Result<Vec<TokenRow>, WebError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    Ok(wdb::tokens(&mut conn).await?)
}

/// The project `code` names, if this viewer may see it (`None` for a
/// project that does not exist or is not the viewer's: the same answer).
pub async fn visible(pool: &PgPool, viewer: Viewer, code: &str) -> Result<Option<reference::ProjectRow>, WebError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let Some(p) = reference::load_projects(&mut conn, &[code.to_owned()]).await?.pop() else {
        return Ok(None);
    };
    Ok(match viewer {
        Viewer::Billing => Some(p),
        Viewer::Project(id) if id == p.id => Some(p),
        Viewer::Project(_) => None,
    })
}

/// The code of the project a token sees.
pub async fn code_of(pool: &PgPool, id: ProjectId) -> Result<Option<String>, WebError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    Ok(wdb::project_code(&mut conn, id).await?)
}

/// One row of the billing office's list.
#[derive(Debug, Clone, Serialize)]
pub struct OverviewRow {
    pub code: String,
    pub name: String,
    pub pi: String,
    /// Posted into the month so far.
    pub spend: Decimal,
    /// Each budgeted pool's remaining money now; empty when not budgeted.
    pub pools: Vec<Balance>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub center: String,
    pub currency: String,
    pub month: Month,
    pub page: i64,
    pub pages: i64,
    pub projects: i64,
    pub rows: Vec<OverviewRow>,
}

/// A page of the project list (from 1), with each project's spend in
/// `month` and its balances at `now`.
pub async fn overview(pool: &PgPool, month: Month, page: i64, now: DateTime<Utc>) -> Result<Overview, WebError> {
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    crate::db::snapshot(&mut tx).await?;
    let center = reference::load_center(&mut tx).await?.ok_or(StatementError::NoConfig)?;
    if let Some(a) = crate::db::archive::archived(&mut tx, month.first_day()).await? {
        return Err(StatementError::Archived {
            month,
            file: a.file_name,
        }
        .into());
    }
    let projects = wdb::project_count(&mut tx).await?;
    let pages = ((projects + PROJECTS_PER_PAGE - 1) / PROJECTS_PER_PAGE).max(1);
    let page = page.clamp(1, pages);
    let list = wdb::projects_page(
        &mut tx,
        month.first_day(),
        (page - 1) * PROJECTS_PER_PAGE,
        PROJECTS_PER_PAGE,
    )
    .await?;
    let budgeted = wdb::budgeted_among(&mut tx, &list.iter().map(|p| p.id).collect::<Vec<_>>()).await?;
    let mut rows = Vec::with_capacity(list.len());
    for p in list {
        let pools = if budgeted.contains(&p.id) {
            crate::service::budget::project_pools(&mut tx, p.id, now).await?
        } else {
            Vec::new()
        };
        rows.push(OverviewRow {
            code: p.code,
            name: p.name,
            pi: p.pi,
            spend: p.spend,
            pools,
        });
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(Overview {
        center: center.name,
        currency: center.currency,
        month,
        page,
        pages,
        projects,
        rows,
    })
}

/// What a project's page shows.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectPage {
    /// The month shown: its statement (provisional while open), chart and users.
    pub statement: Statement,
    pub details: Details,
    /// Every month with a statement or entries, newest first.
    pub months: Vec<MonthRow>,
    /// Recent job records, newest first.
    pub jobs: Vec<JobRow>,
    /// The `before` of the next (older) page of jobs, if there is one.
    pub older_jobs: Option<i64>,
}

/// A project's page for `month`, its jobs older than record `before`.
pub async fn project_page(
    pool: &PgPool,
    project: &reference::ProjectRow,
    month: Month,
    before: Option<i64>,
) -> Result<ProjectPage, WebError> {
    let (statement, details) = statements_with_details(pool, month, Which::Project(&project.code))
        .await?
        .pop()
        .ok_or_else(|| WebError::UnknownProject(project.code.clone()))?;
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let months = wdb::months(&mut conn, project.id).await?;
    let mut jobs = wdb::jobs(&mut conn, project.id, before, JOBS_PER_PAGE + 1).await?;
    let older_jobs = if jobs.len() as i64 > JOBS_PER_PAGE {
        jobs.truncate(JOBS_PER_PAGE as usize);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(ProjectPage {
        statement,
        details,
        months,
        jobs,
        older_jobs,
    })
}

/// One statement with what its document shows (for downloads).
pub async fn statement(
    pool: &PgPool,
    project: &reference::ProjectRow,
    month: Month,
) -> Result<(Statement, Details), WebError> {
    statements_with_details(pool, month, Which::Project(&project.code))
        .await?
        .pop()
        .ok_or_else(|| WebError::UnknownProject(project.code.clone()))
}

/// The month now is in, in the center's time zone.
pub async fn this_month(pool: &PgPool, now: DateTime<Utc>) -> Result<Month, WebError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let center = reference::load_center(&mut conn)
        .await?
        .ok_or(StatementError::NoConfig)?;
    Ok(Month::of_instant(now, center.time_zone))
}
