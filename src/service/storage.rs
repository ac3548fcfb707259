//! Project storage: quota history and the monthly storage billing run
//! (docs/rules.md R6, D7). The run prices every project with the pure storage engine
//! and posts all its entries, segments and the run record in one
//! transaction; a second run of the same month posts nothing.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::storage::{self as sdb, BillingRun, Segment, StorageEntry, Waiver};
use crate::db::{DbError, ledger, reference};
use crate::domain::entries::discount_amounts;
use crate::domain::period::Month;
use crate::domain::pricing::ChargingRules;
use crate::domain::storage::{QuotaChange, StorageCharge, StorageError, price_storage};
use crate::ids::{BillingRunId, DiscountId, ProjectId, StorageRateId};

#[derive(Debug, thiserror::Error)]
pub enum StorageBillError {
    #[error("no center configuration has been applied yet: run `hpc-ledger config apply FILE`")]
    NoConfig,
    #[error(
        "{month} is not over yet (it ends {ends}); storage is billed for whole months (use --dry-run for a preview)"
    )]
    NotOver { month: Month, ends: String },
    #[error("{0} is closed: nothing can be posted into it")]
    Closed(Month),
    #[error("project {project}: {error}; add a storage rate for those days to the center configuration")]
    Pricing { project: String, error: StorageError },
    #[error("unknown project {0}")]
    UnknownProject(String),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for StorageBillError {
    fn from(e: sqlx::Error) -> Self {
        match crate::service::guard_message(&e) {
            Some(m) => StorageBillError::Refused(m),
            None => StorageBillError::Db(e.into()),
        }
    }
}

/// One project's storage charge for the month.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectStorage {
    pub project: String,
    pub charge: StorageCharge<StorageRateId>,
    /// The discount of its charge lines (docs/rules.md R8), one amount per
    /// line, with the discount and its percent; `None` without one.
    pub discount: Option<StorageDiscount>,
    /// What the project pays: the lines less the discount.
    pub total: Decimal,
}

/// The discount of a project's storage lines.
#[derive(Debug, Clone, Serialize)]
pub struct StorageDiscount {
    pub discount_id: DiscountId,
    pub percent: Decimal,
    /// `(amount_exact, amount)` per charge line, in the charge's order.
    #[serde(skip)]
    pub lines: Vec<(Decimal, Decimal)>,
    pub amount: Decimal,
}

/// What a billing run did (or would do).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BillState {
    /// Posted now, as run `run`.
    Posted { run: BillingRunId },
    /// Already billed before: nothing posted.
    AlreadyBilled { run: BillingRun },
    /// The month's storage was waived: nothing is billed for it.
    Waived { waiver: Waiver },
    /// Nothing posted: a preview.
    DryRun { month_over: bool },
}

#[derive(Debug, Clone, Serialize)]
pub struct BillOutcome {
    pub month: Month,
    #[serde(flatten)]
    pub state: BillState,
    pub project_count: usize,
    pub entry_count: usize,
    pub total: Decimal,
    /// The projects charged, by code (empty when already billed).
    pub projects: Vec<ProjectStorage>,
}

/// Bill the storage of `month` (or preview it with `dry_run`).
pub async fn bill(
    pool: &PgPool,
    month: Month,
    author: &str,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<BillOutcome, StorageBillError> {
    let mut tx = ledger::begin_posting(pool).await?;
    let result = bill_in(&mut tx, month, author, dry_run, now).await;
    if dry_run {
        // A preview posts nothing.
        tx.rollback().await?;
        return result;
    }
    let outcome = crate::service::finish(tx, result).await?;
    // A run writes a charge per project in one go: the audit and the close
    // that follow must not be planned as if the ledger were still empty.
    if matches!(outcome.state, BillState::Posted { .. }) {
        // Every entry has at least one segment, and adds at most a row to
        // each of the ledger's rollups.
        let n = outcome.entry_count as u64;
        crate::service::fold_rollups(pool).await;
        crate::service::refresh_statistics(
            pool,
            &[
                ("ledger_entry", n),
                ("storage_charge_segment", n),
                ("billing_run", 1),
                ("ledger_draw", n),
                ("ledger_usage", n),
            ],
        )
        .await;
    }
    Ok(outcome)
}

/// A missing storage rate's class, by name.
fn name_class(error: StorageError, catalog: &crate::domain::catalog::Catalog) -> StorageError {
    match error {
        StorageError::NoRate { day, quota_tb, class } => {
            let named = class.map(|c| {
                c.strip_prefix('#')
                    .and_then(|id| id.parse().ok())
                    .map_or(c.clone(), |id| {
                        catalog.class_name(Some(crate::ids::RateClassId(id))).to_owned()
                    })
            });
            StorageError::NoRate {
                day,
                quota_tb,
                class: named,
            }
        }
        other => other,
    }
}

async fn bill_in(
    tx: &mut sqlx::PgConnection,
    month: Month,
    author: &str,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<BillOutcome, StorageBillError> {
    sdb::lock_billing(&mut *tx).await?;
    let catalog = reference::load_catalog(&mut *tx).await?;
    let center = catalog.center.as_ref().ok_or(StorageBillError::NoConfig)?;
    let tz = center.time_zone;
    let month_over = now >= month.end(tz);
    if !month_over && !dry_run {
        return Err(StorageBillError::NotOver {
            month,
            ends: month.end(tz).with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string(),
        });
    }
    // A month billed or waived already says so, closed or not (a month-end
    // run again after the close, from cron or by hand, is not an error);
    // a dry run too (it showed the lines a run would post, though a run
    // posts nothing).
    if let Some(run) = sdb::billing_run(&mut *tx, "storage", month.first_day()).await? {
        return Ok(BillOutcome {
            month,
            project_count: run.project_count as usize,
            entry_count: run.entry_count as usize,
            total: run.total,
            state: BillState::AlreadyBilled { run },
            projects: Vec::new(),
        });
    }

    if let Some(waiver) = sdb::waiver(&mut *tx, month.first_day()).await? {
        return Ok(BillOutcome {
            month,
            project_count: 0,
            entry_count: 0,
            total: Decimal::ZERO,
            state: BillState::Waived { waiver },
            projects: Vec::new(),
        });
    }
    if let Some(closed) = ledger::last_closed(&mut *tx).await?.map(Month::of_date)
        && month <= closed
    {
        return Err(StorageBillError::Closed(month));
    }

    let mut quotas: BTreeMap<ProjectId, Vec<QuotaChange>> = BTreeMap::new();
    for (project, q) in sdb::quotas_for_month(&mut *tx, month.start(tz), month.end(tz)).await? {
        quotas.entry(project).or_default().push(q);
    }
    let ids: Vec<ProjectId> = quotas.keys().copied().collect();
    let codes: HashMap<ProjectId, String> = sdb::project_codes(&mut *tx, &ids).await?.into_iter().collect();
    let mut projects = Vec::new();
    // A storage charge is priced, for its discount, at its month's last instant.
    let priced_at = month.end(tz) - chrono::TimeDelta::microseconds(1);
    for (project, history) in &quotas {
        let classes = catalog.project_classes.get(project).map_or(&[][..], Vec::as_slice);
        let charge = price_storage(month, tz, history, classes, &catalog.storage_rates).map_err(|error| {
            StorageBillError::Pricing {
                project: codes[project].clone(),
                error: name_class(error, &catalog),
            }
        })?;
        if charge.lines.is_empty() {
            continue;
        }
        let class = catalog.class_of(*project, priced_at);
        let discount = catalog.discount_for(*project, class, priced_at).map(|d| {
            let lines: Vec<(Decimal, Decimal)> = charge
                .lines
                .iter()
                .map(|l| discount_amounts(l.priced.amount_exact, d.percent))
                .collect();
            StorageDiscount {
                discount_id: d.id,
                percent: d.percent,
                amount: lines.iter().map(|(_, a)| *a).sum(),
                lines,
            }
        });
        projects.push((
            *project,
            ProjectStorage {
                project: codes[project].clone(),
                total: charge.total() + discount.as_ref().map_or(Decimal::ZERO, |d| d.amount),
                discount,
                charge,
            },
        ));
    }
    let entry_count: usize = projects
        .iter()
        .map(|(_, p)| p.charge.lines.len() * if p.discount.is_some() { 2 } else { 1 })
        .sum();
    let total: Decimal = projects.iter().map(|(_, p)| p.total).sum();
    let mut outcome = BillOutcome {
        month,
        state: BillState::DryRun { month_over },
        project_count: projects.len(),
        entry_count,
        total,
        projects: Vec::new(),
    };
    if dry_run {
        outcome.projects = projects.into_iter().map(|(_, p)| p).collect();
        return Ok(outcome);
    }

    let period = month.first_day();
    let run = sdb::insert_billing_run(
        &mut *tx,
        "storage",
        period,
        author,
        projects.len() as i32,
        entry_count as i32,
        total,
    )
    .await?;
    let entries: Vec<StorageEntry> = projects
        .iter()
        .flat_map(|(id, p)| {
            p.charge.lines.iter().map(|l| StorageEntry {
                project_id: *id,
                storage_rate_id: l.rate_key,
                quantity: l.priced.quantity,
                unit_rate: l.priced.unit_rate,
                amount_exact: l.priced.amount_exact,
                amount: l.priced.amount,
            })
        })
        .collect();
    let ids: HashMap<(ProjectId, StorageRateId), _> =
        sdb::insert_entries(&mut *tx, run, period, &entries, ChargingRules::CURRENT, author)
            .await?
            .into_iter()
            .map(|(p, r, id)| ((p, r), id))
            .collect();
    let segments: Vec<Segment> = projects
        .iter()
        .flat_map(|(id, p)| {
            let ids = &ids;
            p.charge.lines.iter().flat_map(move |l| {
                l.segments.iter().map(move |s| Segment {
                    entry: ids[&(*id, l.rate_key)],
                    first_day: s.first_day,
                    last_day: s.last_day,
                    days: s.days as i32,
                    quota_tb: s.quota_tb,
                    tb_month_price: s.rate.tb_month,
                })
            })
        })
        .collect();
    sdb::insert_segments(&mut *tx, &segments).await?;
    let discounts: Vec<sdb::StorageDiscountLine> = projects
        .iter()
        .flat_map(|(id, p)| {
            let ids = &ids;
            p.discount.iter().flat_map(move |d| {
                p.charge
                    .lines
                    .iter()
                    .zip(&d.lines)
                    .map(move |(l, (exact, amount))| sdb::StorageDiscountLine {
                        charge: ids[&(*id, l.rate_key)],
                        discount_id: d.discount_id,
                        amount_exact: *exact,
                        amount: *amount,
                    })
            })
        })
        .collect();
    sdb::insert_discounts(&mut *tx, &discounts, author).await?;
    outcome.state = BillState::Posted { run };
    outcome.projects = projects.into_iter().map(|(_, p)| p).collect();
    Ok(outcome)
}

/// What `bill storage --through` did: the months it went through, in
/// order, and the problem it stopped at (months after it are untouched).
#[derive(Debug, Serialize)]
pub struct ThroughOutcome {
    pub months: Vec<BillOutcome>,
    #[serde(serialize_with = "crate::service::error_text")]
    pub stopped: Option<StorageBillError>,
}

/// Bill every month from the first open one (see
/// [`sdb::first_open_month`]) through `through`, in order, each in its own
/// transaction; months already billed or waived are reported and skipped.
/// Stops at the first problem.
pub async fn bill_through(
    pool: &PgPool,
    through: Month,
    author: &str,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<ThroughOutcome, StorageBillError> {
    let first = {
        let mut conn = pool.acquire().await.map_err(DbError::from)?;
        sdb::first_open_month(&mut conn).await?.map(Month::of_date)
    };
    let (months, stopped) =
        crate::service::month_by_month(first, through, |month| bill(pool, month, author, dry_run, now)).await;
    Ok(ThroughOutcome { months, stopped })
}

/// Waive every month from the first open one through `through` whose
/// storage is neither billed nor waived (`bill storage --through M --waive
/// REASON`: the months before a center's ledger started, say); billed and
/// waived months are left as they are. Stops at the first problem.
pub async fn waive_through(
    pool: &PgPool,
    through: Month,
    reason: &str,
    author: &str,
    now: DateTime<Utc>,
) -> Result<(Vec<WaiveOutcome>, Option<StorageBillError>), StorageBillError> {
    let first = {
        let mut conn = pool.acquire().await.map_err(DbError::from)?;
        sdb::first_open_month(&mut conn).await?.map(Month::of_date)
    };
    let (done, stopped) = crate::service::month_by_month(first, through, |month| async move {
        let billed = {
            let mut conn = pool.acquire().await.map_err(DbError::from)?;
            sdb::billing_run(&mut conn, "storage", month.first_day()).await?
        };
        match billed {
            Some(_) => Ok(None),
            None => waive(pool, month, reason, author, now).await.map(Some),
        }
    })
    .await;
    Ok((done.into_iter().flatten().collect(), stopped))
}

/// What `bill storage --waive` did.
#[derive(Debug, Clone, Serialize)]
pub struct WaiveOutcome {
    pub month: Month,
    /// False when the month was waived before (nothing recorded now).
    pub waived_now: bool,
    pub waiver: Waiver,
}

/// Record that `month`'s storage is not billed, with the reason: refused
/// for a month that is billed, closed or not over. Waiving a waived month
/// again answers with the first waiver.
pub async fn waive(
    pool: &PgPool,
    month: Month,
    reason: &str,
    author: &str,
    now: DateTime<Utc>,
) -> Result<WaiveOutcome, StorageBillError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(StorageBillError::Refused(
            "a waiver needs a reason (--waive REASON)".into(),
        ));
    }
    let mut tx = crate::db::begin(pool).await?;
    let result = async {
        sdb::lock_billing(&mut tx).await?;
        let center = reference::load_center(&mut tx).await?.ok_or(StorageBillError::NoConfig)?;
        let tz = center.time_zone;
        if now < month.end(tz) {
            return Err(StorageBillError::NotOver {
                month,
                ends: month.end(tz).with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string(),
            });
        }
        if let Some(waiver) = sdb::waiver(&mut tx, month.first_day()).await? {
            return Ok(WaiveOutcome { month, waived_now: false, waiver });
        }
        if let Some(run) = sdb::billing_run(&mut tx, "storage", month.first_day()).await? {
            return Err(StorageBillError::Refused(format!(
                "storage for {month} is billed (run {}, {} by {}): it cannot be waived; correct it with `hpc-ledger adjust`",
                run.id,
                run.run_at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"),
                run.author
            )));
        }
        if let Some(closed) = ledger::last_closed(&mut tx).await?.map(Month::of_date)
            && month <= closed
        {
            return Err(StorageBillError::Closed(month));
        }
        let waiver = sdb::insert_waiver(&mut tx, month.first_day(), reason, author).await?;
        Ok(WaiveOutcome { month, waived_now: true, waiver })
    }
    .await;
    crate::service::finish(tx, result).await
}

/// Parse a quota as written: `10`, `10TB`, `2.5T` (TB, the unit of the
/// storage price).
pub fn parse_quota(s: &str) -> Result<Decimal, String> {
    let t = s.trim();
    let number = t
        .strip_suffix("TB")
        .or_else(|| t.strip_suffix("tb"))
        .or_else(|| t.strip_suffix('T'))
        .or_else(|| t.strip_suffix('t'))
        .unwrap_or(t)
        .trim();
    let q: Decimal = number.parse().map_err(|_| {
        format!("{s:?} is not a quota: give it in TB, the unit of the storage price (e.g. 10TB or 0.5TB)")
    })?;
    if q.is_sign_negative() && !q.is_zero() {
        return Err(format!("{s:?}: a quota cannot be negative"));
    }
    if q.scale() > 6 || q > Decimal::from(1_000_000_000) {
        return Err(format!(
            "{s:?}: a quota has at most 6 decimal places and at most 10^9 TB"
        ));
    }
    Ok(q.normalize())
}

/// Append a quota change for a project.
pub async fn set_quota(
    pool: &PgPool,
    code: &str,
    quota_tb: Decimal,
    from: DateTime<Utc>,
    author: &str,
) -> Result<(), StorageBillError> {
    let mut tx = crate::db::begin(pool).await?;
    let result = set_quota_in(&mut tx, code, quota_tb, from, author).await;
    crate::service::finish(tx, result).await
}

async fn set_quota_in(
    tx: &mut sqlx::PgConnection,
    code: &str,
    quota_tb: Decimal,
    from: DateTime<Utc>,
    author: &str,
) -> Result<(), StorageBillError> {
    let project = crate::service::project(&mut *tx, code)
        .await?
        .map_err(StorageBillError::UnknownProject)?;
    let history = sdb::quota_history(&mut *tx, project.id).await?;
    if let Some(same) = history.iter().find(|q| q.effective_from == from) {
        return Err(StorageBillError::Refused(format!(
            "project {}: a quota of {} TB from {from} is already recorded; quota history is never rewritten (give another instant)",
            project.code,
            same.quota_tb.normalize()
        )));
    }
    sdb::insert_quota(&mut *tx, project.id, from, quota_tb, author).await?;
    Ok(())
}

/// A project's quota history and the quota in force at an instant.
#[derive(Debug, Clone, Serialize)]
pub struct QuotaReport {
    pub project: String,
    pub at: DateTime<Utc>,
    pub quota_tb: Option<Decimal>,
    pub history: Vec<sdb::QuotaRow>,
}

pub async fn quota_report(pool: &PgPool, code: &str, at: DateTime<Utc>) -> Result<QuotaReport, StorageBillError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let project = crate::service::project(&mut conn, code)
        .await?
        .map_err(StorageBillError::UnknownProject)?;
    let history = sdb::quota_history(&mut conn, project.id).await?;
    let quota_tb = history
        .iter()
        .rfind(|q| q.effective_from <= at)
        .map(|q| q.quota_tb.normalize());
    Ok(QuotaReport {
        project: project.code,
        at,
        quota_tb,
        history,
    })
}

/// Every billing run, and every month whose storage was waived.
pub async fn runs(pool: &PgPool) -> Result<(Vec<BillingRun>, Vec<Waiver>), DbError> {
    let mut conn = pool.acquire().await?;
    Ok((sdb::billing_runs(&mut conn).await?, sdb::waivers(&mut conn).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_written_in_tb() {
        assert_eq!(parse_quota("10TB").unwrap().to_string(), "10");
        assert_eq!(parse_quota("2.5T").unwrap().to_string(), "2.5");
        assert_eq!(parse_quota(" 0 ").unwrap().to_string(), "0");
        assert!(parse_quota("500GB").unwrap_err().contains("give it in TB"));
        assert!(parse_quota("-1TB").unwrap_err().contains("cannot be negative"));
        assert!(
            parse_quota("0.1234567TB")
                .unwrap_err()
                .contains("at most 6 decimal places")
        );
    }
}
