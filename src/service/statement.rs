//! Statements: what a project owes for a month, derived from the ledger
//! alone — compute lines by cluster, node type, metric and rate; storage;
//! discounts (list price, discount, net); then every correction. The total is the sum of the entries' rounded
//! amounts. A statement of an open month is provisional (and says whether
//! the month's storage is billed yet); a closed month's carries its number
//! and the month's seal.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::statements::{self as sdb, CorrectionLine, DiscountLine, Issued, JobLine, StorageLine};
use crate::db::{DbError, reference};
use crate::domain::catalog::class_at;
use crate::domain::period::Month;
use crate::ids::ProjectId;

#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    #[error("no center configuration has been applied yet")]
    NoConfig,
    #[error("unknown project {0}")]
    UnknownProject(String),
    #[error(
        "{month} is archived (to {file}): its entries have left the live ledger, so its statements cannot be \
         printed again; the file holds every entry and statement total it sealed (hpc-ledger verify --archive)"
    )]
    Archived { month: Month, file: String },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for StatementError {
    fn from(e: sqlx::Error) -> Self {
        StatementError::Db(e.into())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ProjectHeader {
    pub code: String,
    pub name: String,
    pub pi: String,
    /// Its rate class during the month, in order (one unless it changed
    /// during the month): `default` for the default class.
    pub rate_class: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// The month is open: entries may still be posted into it.
    Provisional,
    /// The month is closed: the statement's number, and the month's seal
    /// (hex) that covers it.
    Final {
        number: i64,
        closed_at: DateTime<Utc>,
        seal_algorithm: String,
        seal: String,
    },
    /// The month is closed, and no statement was issued for the project
    /// (it had no entries in the month): nothing can change any more.
    ClosedWithoutStatement { closed_at: DateTime<Utc> },
    /// The month is before the ledger's first closed month: nothing was
    /// posted in it (the first close refuses an earlier month with
    /// entries) and nothing can be.
    BeforeTheLedger { first_closed: Month },
}

/// Whether the month's storage has been billed (a provisional statement
/// says so: its storage section is empty until the run).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "storage_billing", rename_all = "snake_case")]
pub enum StorageBilling {
    /// Billed by this run.
    Billed { storage_run: i64 },
    /// Not billed, by decision.
    Waived { storage_waiver_reason: String },
    /// Not billed yet: the statement's storage will change.
    NotBilled,
    /// Never billed, nor to be: the month is before the ledger's first
    /// closed month.
    BeforeTheLedger,
}

#[derive(Debug, Clone, Serialize)]
pub struct Statement {
    pub center: String,
    pub currency: String,
    pub month: Month,
    pub project: ProjectHeader,
    #[serde(flatten)]
    pub status: Status,
    #[serde(flatten)]
    pub storage_billing: StorageBilling,
    pub compute: Vec<JobLine>,
    pub storage: Vec<StorageLine>,
    /// Discounts of the compute and storage charges (docs/rules.md R8).
    pub discounts: Vec<DiscountLine>,
    pub corrections: Vec<CorrectionLine>,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub total: Decimal,
    /// A budgeted project's pools at the month's end (or now, while the
    /// month runs): docs/budgets.md. Empty for a project not budgeted.
    pub budgets: Vec<crate::domain::budget::Balance>,
    /// The center's billing time zone: dates and times are shown in it
    /// (instants stay UTC in JSON).
    #[serde(skip)]
    pub time_zone: chrono_tz::Tz,
}

impl Statement {
    /// An instant as the center reads it.
    pub fn local(&self, t: DateTime<Utc>) -> DateTime<chrono_tz::Tz> {
        t.with_timezone(&self.time_zone)
    }
}

impl Statement {
    pub fn compute_total(&self) -> Decimal {
        self.compute.iter().map(|l| l.amount).sum()
    }
    pub fn storage_total(&self) -> Decimal {
        self.storage.iter().map(|l| l.amount).sum()
    }
    pub fn corrections_total(&self) -> Decimal {
        self.corrections.iter().map(|l| l.amount).sum()
    }
    pub fn discounts_total(&self) -> Decimal {
        self.discounts.iter().map(|l| l.amount).sum()
    }
}

/// Which statements to build.
pub enum Which<'a> {
    Project(&'a str),
    /// Every project with entries in the month.
    All,
}

/// Build statements for a month.
pub async fn statements(pool: &PgPool, month: Month, which: Which<'_>) -> Result<Vec<Statement>, StatementError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    statements_in(&mut conn, month, which).await
}

/// Statements and what their documents show besides, all read from one
/// snapshot: while a month is open and jobs are being recorded, a
/// document's chart and by-user totals are still its statement's total.
pub async fn statements_with_details(
    pool: &PgPool,
    month: Month,
    which: Which<'_>,
) -> Result<Vec<(Statement, Details)>, StatementError> {
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    crate::db::snapshot(&mut tx).await?;
    let list = statements_in(&mut tx, month, which).await?;
    let mut out = Vec::with_capacity(list.len());
    for s in list {
        let d = details_in(&mut tx, &s).await?;
        out.push((s, d));
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(out)
}

async fn statements_in(
    conn: &mut sqlx::PgConnection,
    month: Month,
    which: Which<'_>,
) -> Result<Vec<Statement>, StatementError> {
    let center = reference::load_center(&mut *conn)
        .await?
        .ok_or(StatementError::NoConfig)?;
    let period = month.first_day();
    if let Some(a) = crate::db::archive::archived(&mut *conn, period).await? {
        return Err(StatementError::Archived {
            month,
            file: a.file_name,
        });
    }
    let ids: Vec<ProjectId> = match which {
        Which::Project(code) => {
            let p = crate::service::project(&mut *conn, code)
                .await?
                .map_err(StatementError::UnknownProject)?;
            vec![p.id]
        }
        Which::All => sdb::projects_with_entries(&mut *conn, period).await?,
    };
    let mut headers: HashMap<ProjectId, ProjectHeader> = project_headers(&mut *conn, &ids).await?;
    let classes = reference::load_classes(&mut *conn).await?;
    let history = reference::load_project_classes(&mut *conn).await?;
    let (start, end) = (month.start(center.time_zone), month.end(center.time_zone));
    for (id, h) in &mut headers {
        let changes = history.get(id).map_or(&[][..], Vec::as_slice);
        let mut during = vec![class_at(changes, start)];
        during.extend(
            changes
                .iter()
                .filter(|c| c.effective_from > start && c.effective_from < end)
                .map(|c| c.class),
        );
        during.dedup();
        h.rate_class = during
            .into_iter()
            .map(|c| {
                c.and_then(|c| classes.iter().find(|k| k.id == c))
                    .map_or("default".to_owned(), |k| k.name.clone())
            })
            .collect();
    }
    let closed = crate::db::periods::closed_period(&mut *conn, period).await?;
    let first_closed = crate::db::periods::first_closed(&mut *conn)
        .await?
        .map(Month::of_date)
        .filter(|first| closed.is_none() && month < *first);
    let storage_billing = match crate::db::storage::billing_run(&mut *conn, "storage", period).await? {
        Some(run) => StorageBilling::Billed { storage_run: run.id.0 },
        None => match crate::db::storage::waiver(&mut *conn, period).await? {
            Some(w) => StorageBilling::Waived {
                storage_waiver_reason: w.reason,
            },
            None if first_closed.is_some() => StorageBilling::BeforeTheLedger,
            None => StorageBilling::NotBilled,
        },
    };
    let issued: HashMap<ProjectId, Issued> = sdb::issued(&mut *conn, &ids, period).await?.into_iter().collect();
    let mut compute: HashMap<ProjectId, Vec<JobLine>> = HashMap::new();
    for l in sdb::job_lines(&mut *conn, &ids, period).await? {
        compute.entry(l.project_id).or_default().push(l);
    }
    let mut storage: HashMap<ProjectId, Vec<StorageLine>> = HashMap::new();
    for l in sdb::storage_lines(&mut *conn, &ids, period).await? {
        storage.entry(l.project_id).or_default().push(l);
    }
    // Budgets: the balance at the month's end (or now), for budgeted
    // projects: its last instant, not the next month's first, where an
    // allocation that ends with the month is over and the next one has begun
    // (and a job ending at midnight is the next month's, docs/rules.md D6).
    let budget_at = (end - chrono::Duration::microseconds(1)).min(chrono::Utc::now());
    let mut budgets: HashMap<ProjectId, Vec<crate::domain::budget::Balance>> = HashMap::new();
    for (id, _) in crate::db::budget::budgeted_projects(&mut *conn).await? {
        if ids.contains(&id) {
            let mut pools = crate::service::budget::project_pools(&mut *conn, id, budget_at).await?;
            // Shown as at the month's end: the balance of its last instant.
            if budget_at == end - chrono::Duration::microseconds(1) {
                for b in &mut pools {
                    b.at = end;
                }
            }
            budgets.insert(id, pools);
        }
    }
    let mut discounts: HashMap<ProjectId, Vec<DiscountLine>> = HashMap::new();
    for mut l in sdb::discount_lines(&mut *conn, &ids, period).await? {
        l.percent = l.percent.normalize();
        discounts.entry(l.project_id).or_default().push(l);
    }
    let mut corrections: HashMap<ProjectId, Vec<CorrectionLine>> = HashMap::new();
    for l in sdb::correction_lines(&mut *conn, &ids, period).await? {
        corrections.entry(l.project_id).or_default().push(l);
    }
    let mut out: Vec<Statement> = ids
        .iter()
        .map(|id| {
            let compute = compute.remove(id).unwrap_or_default();
            let storage = storage.remove(id).unwrap_or_default();
            let corrections = corrections.remove(id).unwrap_or_default();
            let discounts = discounts.remove(id).unwrap_or_default();
            let total = compute.iter().map(|l| l.amount).sum::<Decimal>()
                + storage.iter().map(|l| l.amount).sum::<Decimal>()
                + discounts.iter().map(|l| l.amount).sum::<Decimal>()
                + corrections.iter().map(|l| l.amount).sum::<Decimal>();
            let status = match (&closed, issued.get(id)) {
                (Some(c), Some(i)) => Status::Final {
                    number: i.number,
                    closed_at: c.closed_at,
                    seal_algorithm: c.seal_algorithm.clone(),
                    seal: hex::encode(&c.seal),
                },
                (Some(c), None) => Status::ClosedWithoutStatement { closed_at: c.closed_at },
                (None, _) => match first_closed {
                    Some(first_closed) => Status::BeforeTheLedger { first_closed },
                    None => Status::Provisional,
                },
            };
            // A final statement reads as it was issued: the project's name
            // and PI kept with it (migration 0069) and the center's (0071),
            // not today's.
            let mut project = headers[id].clone();
            let mut center_name = center.name.clone();
            if let (Some(_), Some(i)) = (&closed, issued.get(id)) {
                if let Some(name) = &i.center_name {
                    center_name.clone_from(name);
                }
                if let Some(name) = &i.project_name {
                    project.name.clone_from(name);
                }
                if let Some(pi) = &i.project_pi {
                    project.pi.clone_from(pi);
                }
            }
            Statement {
                center: center_name,
                // A closed month's currency is the one sealed with it (seal v2).
                currency: closed
                    .as_ref()
                    .and_then(|c| c.currency.clone())
                    .unwrap_or_else(|| center.currency.clone()),
                month,
                project,
                status,
                storage_billing: storage_billing.clone(),
                compute,
                storage,
                discounts,
                corrections,
                total,
                budgets: budgets
                    .remove(id)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|b| b.budgeted)
                    .collect(),
                time_zone: center.time_zone,
            }
        })
        .collect();
    out.sort_by_key(|s| s.project.code.to_lowercase());
    Ok(out)
}

async fn project_headers(
    conn: &mut sqlx::PgConnection,
    ids: &[ProjectId],
) -> Result<HashMap<ProjectId, ProjectHeader>, sqlx::Error> {
    Ok(crate::db::reference::project_headers(conn, ids)
        .await?
        .into_iter()
        .map(|(id, code, name, pi)| {
            (
                id,
                ProjectHeader {
                    code,
                    name,
                    pi,
                    rate_class: Vec::new(),
                },
            )
        })
        .collect())
}

/// What a statement document shows besides the statement (issue 18): the
/// month's spend by day and cluster, and by user.
#[derive(Debug, Clone, Serialize)]
pub struct Details {
    pub days: Vec<sdb::DaySpend>,
    /// The month's usage by user (net of corrections and discounts; storage
    /// and adjustments as `(storage)`, `(adjustment)`).
    pub users: Vec<crate::db::usage::UsageRow>,
}

async fn details_in(conn: &mut sqlx::PgConnection, s: &Statement) -> Result<Details, StatementError> {
    let p = crate::service::project(&mut *conn, &s.project.code)
        .await?
        .map_err(StatementError::UnknownProject)?;
    let period = s.month.first_day();
    let days = sdb::spend_by_day(&mut *conn, p.id, period).await?;
    let users = crate::db::usage::usage(&mut *conn, Some(p.id), period, period, "user").await?;
    Ok(Details { days, users })
}
