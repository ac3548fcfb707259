//! Closing a month (docs/rules.md D11): freeze it, number its statements from one
//! gapless sequence, and seal it; and checking the seals and every charge
//! again (`verify`, `audit`).

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::audit::Discrepancy;
use crate::db::periods::{self, ClosedPeriod, SealCheck};
use crate::db::statements as sdb;
use crate::db::storage as stdb;
use crate::db::{DbError, ledger, reference};
use crate::domain::period::Month;

#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error("no center configuration has been applied yet")]
    NoConfig,
    #[error("{month} is not over yet (it ends {ends}); only a month that is over can be closed")]
    NotOver { month: Month, ends: String },
    #[error("storage for {0} has not been billed: run `hpc-ledger bill storage --month {0}` first")]
    StorageNotBilled(Month),
    #[error(
        "cannot close {month}: storage for {} had quotas but was never billed, and closing {month} would make it unbillable: \
         bill it (`hpc-ledger bill storage --through {}`) or waive a month with its reason \
         (`hpc-ledger bill storage --month {} --waive REASON`)",
        list(.months), .months.last().expect("at least one"), .months[0]
    )]
    UnbilledStorage { month: Month, months: Vec<Month> },
    #[error(
        "cannot close {month}: {count} posted job(s) are stored by `serve --intake` and not yet recorded \
         (the oldest received {oldest}){failed}; they may have ended in {month}. `serve` records them once \
         posts pause (start it if it is stopped); close again when they are recorded"
    )]
    IntakeWaiting {
        month: Month,
        count: i64,
        oldest: String,
        /// What was set aside, and why (empty: nothing).
        failed: String,
    },
    #[error("close {first} first: months are closed in order, and {first} holds entries")]
    EarlierMonthOpen { first: Month },
    #[error("close {first} first: months are closed one after another, from the last one closed")]
    NotNext { first: Month },
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for CloseError {
    fn from(e: sqlx::Error) -> Self {
        match crate::service::guard_message(&e) {
            Some(m) => CloseError::Refused(m),
            None => CloseError::Db(e.into()),
        }
    }
}

/// Months as a reader lists them: `2026-01, 2026-02 and 2026-03`; a long
/// list shows its first three and its last, with the count.
fn list(months: &[Month]) -> String {
    let names: Vec<String> = months.iter().map(Month::to_string).collect();
    if names.len() > 6 {
        return format!(
            "{}, … and {} ({} months)",
            names[..3].join(", "),
            names[names.len() - 1],
            names.len()
        );
    }
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CloseOutcome {
    pub month: Month,
    /// False when the month was already closed (nothing done).
    pub closed_now: bool,
    pub closed_at: DateTime<Utc>,
    pub closed_by: String,
    pub entry_count: i64,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub total: Decimal,
    pub seal_algorithm: String,
    pub seal: String,
    pub currency: Option<String>,
    pub statements: Vec<(String, i64, Decimal)>,
}

/// A closed month's seal as kept outside the database (`close
/// --anchor-file`/`--anchor-url`): what `verify --against` checks the
/// database against. One JSON object per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Anchor {
    pub month: Month,
    pub seal_algorithm: String,
    pub seal: String,
    pub entries: i64,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub total: Decimal,
    #[serde(default)]
    pub currency: Option<String>,
    pub closed_at: DateTime<Utc>,
    pub closed_by: String,
}

impl Anchor {
    fn of(c: &ClosedPeriod) -> Anchor {
        Anchor {
            month: Month::of_date(c.period),
            seal_algorithm: c.seal_algorithm.clone(),
            seal: hex::encode(&c.seal),
            entries: c.entry_count,
            total: c.total,
            currency: c.currency.clone(),
            closed_at: c.closed_at,
            closed_by: c.closed_by.clone(),
        }
    }
}

impl CloseOutcome {
    /// The anchor of the month this closed.
    pub fn anchor(&self) -> Anchor {
        Anchor {
            month: self.month,
            seal_algorithm: self.seal_algorithm.clone(),
            seal: self.seal.clone(),
            entries: self.entry_count,
            total: self.total,
            currency: self.currency.clone(),
            closed_at: self.closed_at,
            closed_by: self.closed_by.clone(),
        }
    }
}

/// Every closed month's anchor, oldest first (to start an anchor file for
/// months closed before one was kept).
pub async fn anchors(pool: &PgPool) -> Result<Vec<Anchor>, DbError> {
    let mut conn = pool.acquire().await?;
    Ok(periods::closed_periods(&mut conn)
        .await?
        .iter()
        .map(Anchor::of)
        .collect())
}

/// How the database stands against one kept anchor.
#[derive(Debug, Clone, Serialize)]
pub struct AnchorCheck {
    pub month: Month,
    pub anchored_seal: Option<String>,
    pub recorded_seal: Option<String>,
    pub recomputed_seal: Option<String>,
}

impl AnchorCheck {
    /// The database records and recomputes the seal kept outside it.
    pub fn holds(&self) -> bool {
        self.anchored_seal.is_some()
            && self.anchored_seal == self.recorded_seal
            && self.anchored_seal == self.recomputed_seal
    }
}

/// Check the database against seals kept elsewhere: every anchored month
/// must be closed with that seal, and recompute to it; every closed month
/// should be anchored. A month anchored more than once is checked against
/// its first anchor, the one kept when it closed: a month's seal never
/// changes, and a later line could only anchor a change.
pub async fn verify_against(pool: &PgPool, kept: &[Anchor]) -> Result<Vec<AnchorCheck>, DbError> {
    let mut conn = pool.acquire().await?;
    let checks = periods::seal_checks(&mut conn, None).await?;
    let mut months: std::collections::BTreeSet<Month> = kept.iter().map(|a| a.month).collect();
    months.extend(checks.iter().map(|c| Month::of_date(c.period)));
    Ok(months
        .into_iter()
        .map(|m| {
            let check = checks.iter().find(|c| Month::of_date(c.period) == m);
            AnchorCheck {
                month: m,
                anchored_seal: kept.iter().find(|a| a.month == m).map(|a| a.seal.clone()),
                recorded_seal: check.map(|c| c.recorded_seal.clone()),
                recomputed_seal: check.map(|c| c.recomputed_seal.clone()),
            }
        })
        .collect())
}

/// Close `month`: refused while it is not over, while an earlier month with
/// entries is open, or while its storage is not billed.
pub async fn close(pool: &PgPool, month: Month, author: &str, now: DateTime<Utc>) -> Result<CloseOutcome, CloseError> {
    let mut tx = crate::db::begin(pool).await?;
    let result = close_in(&mut tx, month, author, now).await;
    let outcome = crate::service::finish(tx, result).await?;
    if outcome.closed_now {
        // A statement for every project with entries, issued in one go
        // (100,000 at a large center): a statement read back by month and
        // project must not be planned as if its month had none. Planned
        // so, the lookup scanned the month's every statement: 11 ms
        // instead of 0.03 ms with 100,000 of them (docs/performance.md).
        crate::service::refresh_statistics(pool, &[("statement", outcome.statements.len() as u64)]).await;
    }
    Ok(outcome)
}

async fn close_in(
    tx: &mut sqlx::PgConnection,
    month: Month,
    author: &str,
    now: DateTime<Utc>,
) -> Result<CloseOutcome, CloseError> {
    periods::lock_periods(&mut *tx).await?;
    let center = reference::load_center(&mut *tx).await?.ok_or(CloseError::NoConfig)?;
    let period = month.first_day();
    let outcome = |c: ClosedPeriod, closed_now: bool, statements| CloseOutcome {
        month,
        closed_now,
        closed_at: c.closed_at,
        closed_by: c.closed_by,
        entry_count: c.entry_count,
        total: c.total,
        seal_algorithm: c.seal_algorithm,
        seal: hex::encode(c.seal),
        currency: c.currency,
        statements,
    };
    if let Some(c) = periods::closed_period(&mut *tx, period).await? {
        return Ok(outcome(c, false, Vec::new()));
    }
    let tz = center.time_zone;
    if now < month.end(tz) {
        return Err(CloseError::NotOver {
            month,
            ends: month.end(tz).with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string(),
        });
    }
    // A job answered by `serve --intake` and not yet recorded would be
    // charged to the next open month as late.
    let held = crate::db::intake::held(&mut *tx).await?;
    if held.waiting + held.failed > 0 {
        return Err(CloseError::IntakeWaiting {
            month,
            count: held.waiting + held.failed,
            oldest: held.oldest.map_or_else(String::new, |t| {
                t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z").to_string()
            }),
            failed: match held.first_failure {
                Some(why) => format!(
                    ", {} of them set aside because the database refused to record them or keep them as \
                     rejected (the first: {why}; `serve` tries them again when it next takes the intake, as at its start; \
                     docs/slurm.md says how to remove one for good)",
                    held.failed
                ),
                None => String::new(),
            },
        });
    }
    let last = ledger::last_closed(&mut *tx).await?.map(Month::of_date);
    if let Some(l) = last
        && month < l
    {
        if let Some(first) = periods::first_closed(&mut *tx).await?.map(Month::of_date)
            && month < first
        {
            return Err(CloseError::Refused(format!(
                "{month} is before the ledger's first closed month, {first}: it holds nothing, and nothing can be \
                 posted into it"
            )));
        }
        return Err(CloseError::Refused(format!(
            "{month} is closed: months up to {l} are closed"
        )));
    }
    if let Some(l) = last
        && month != l.next()
    {
        return Err(CloseError::NotNext { first: l.next() });
    }
    if let Some(first) = periods::earlier_open_month(&mut *tx, period).await? {
        return Err(CloseError::EarlierMonthOpen {
            first: Month::of_date(first),
        });
    }
    let unbilled = stdb::unbilled_months(&mut *tx, period).await?;
    if !unbilled.is_empty() {
        return Err(CloseError::UnbilledStorage {
            month,
            months: unbilled.into_iter().map(Month::of_date).collect(),
        });
    }
    if stdb::billing_run(&mut *tx, "storage", period).await?.is_none()
        && stdb::waiver(&mut *tx, period).await?.is_none()
    {
        return Err(CloseError::StorageNotBilled(month));
    }
    let closed = periods::close(&mut *tx, period, author).await?;
    // The statements the close has just issued, one per project with
    // entries (read from them, not from the month's entries again).
    let issued = sdb::issued_in(&mut *tx, period).await?;
    let ids: Vec<_> = issued.iter().map(|(p, _, _)| *p).collect();
    let codes: std::collections::HashMap<_, _> = stdb::project_codes(&mut *tx, &ids).await?.into_iter().collect();
    let statements: Vec<(String, i64, Decimal)> = issued
        .into_iter()
        .map(|(p, number, total)| (codes[&p].clone(), number, total))
        .collect();
    Ok(outcome(closed, true, statements))
}

/// What `close --through` did: the months it closed (or found closed), in
/// order, and the problem it stopped at.
#[derive(Debug, Serialize)]
pub struct CloseThrough {
    pub months: Vec<CloseOutcome>,
    #[serde(serialize_with = "crate::service::error_text")]
    pub stopped: Option<CloseError>,
}

/// Close every month from the month after the last closed one (with
/// nothing closed, the first month with entries) through `through`, in
/// order, each in its own transaction. Stops at the first problem.
pub async fn close_through(
    pool: &PgPool,
    through: Month,
    author: &str,
    now: DateTime<Utc>,
) -> Result<CloseThrough, CloseError> {
    let first = first_to_close(pool, through).await?;
    let (months, stopped) =
        crate::service::month_by_month(first, through, |month| close(pool, month, author, now)).await;
    Ok(CloseThrough { months, stopped })
}

/// The first month `close --through through` closes: the month after the
/// last closed one; with none closed, the first month with entries (`None`:
/// there is none through `through`).
pub async fn first_to_close(pool: &PgPool, through: Month) -> Result<Option<Month>, CloseError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let last = ledger::last_closed(&mut conn).await?.map(Month::of_date);
    Ok(match last {
        Some(l) => Some(l.next()),
        None => periods::earlier_open_month(&mut conn, through.next().first_day())
            .await?
            .map(Month::of_date),
    })
}

/// Recompute the seals (and entry counts and totals) of closed months.
pub async fn verify(pool: &PgPool, month: Option<Month>) -> Result<Vec<SealCheck>, DbError> {
    match month {
        Some(m) => Ok(checks_of(pool, Some(m.first_day())).await?),
        None => seal_chain(pool).await,
    }
}

/// The whole chain's seal checks, as `audit.seals` gives them, with the
/// months recomputed side by side.
///
/// `audit.seals` recomputes each month's seal from the one it recomputed
/// for the month before, so its months are computed one after the other on
/// one core: 27.9 s for the 22 months of a `bench --scale` ledger of 4.4M
/// entries. Each month is checked here against the seal recorded for the
/// month before (`audit.month_seals`, as `verify --month` does), on up to as
/// many connections as this machine has cores (at most half the pool's:
/// 4 of hpc-ledger's 8). While every month holds, the two are the same: each
/// recorded seal is its recomputation, so the chain's input for every month
/// is the recorded seal of the one before. Once one does not, every later
/// month of the chain is recomputed from a different seal, so the chain's
/// own view is read instead, and gives the answer.
async fn seal_chain(pool: &PgPool) -> Result<Vec<SealCheck>, DbError> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let months: Arc<Vec<chrono::NaiveDate>> = {
        let mut conn = pool.acquire().await?;
        Arc::new(periods::closed_months(&mut conn).await?)
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    // Half the pool at most: its other half stays free for whoever else
    // shares it (a month can take longer than the pool's acquire timeout).
    let workers = cores.min(pool.options().get_max_connections() as usize / 2).max(1);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers.min(months.len()) {
        let (pool, months, next) = (pool.clone(), months.clone(), next.clone());
        tasks.spawn(async move {
            let mut checks = Vec::new();
            while let Some(&month) = months.get(next.fetch_add(1, Ordering::Relaxed)) {
                checks.extend(checks_of(&pool, Some(month)).await?);
            }
            Ok::<_, sqlx::Error>(checks)
        });
    }
    let mut checks = Vec::with_capacity(months.len());
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(found) => checks.extend(found?),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    checks.sort_by_key(|c| c.period);
    if checks.len() == months.len() && checks.iter().all(SealCheck::holds) {
        return Ok(checks);
    }
    Ok(checks_of(pool, None).await?)
}

/// One month's seal check, or the whole chain's, in a transaction of its
/// own without JIT (each month is one pass over its entries).
async fn checks_of(pool: &PgPool, month: Option<chrono::NaiveDate>) -> Result<Vec<SealCheck>, sqlx::Error> {
    let mut tx = crate::db::begin(pool).await?;
    crate::db::jit_off(&mut tx).await?;
    let checks = periods::seal_checks(&mut tx, month).await?;
    tx.commit().await?;
    Ok(checks)
}

/// Everything an audit finds: charges SQL disagrees with, and broken seals.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// The first discrepancies, at most [`crate::db::audit::KEPT`].
    pub discrepancies: Vec<Discrepancy>,
    /// Every discrepancy found, kept or not.
    pub discrepancies_found: u64,
    /// Every discrepancy found, by kind and field (`"job amount"`).
    pub discrepancies_by_field: std::collections::BTreeMap<String, u64>,
    pub seals: Vec<SealCheck>,
    /// Records not charged (open), set aside (dismissed), or resolved
    /// before resolutions were proven: listed, not findings.
    pub rejections: crate::db::rejected::RejectionSummary,
    /// Functions, audit views and triggers that are not the migrations'.
    pub definitions: Vec<crate::db::definitions::Altered>,
    /// Read on a streaming replica (`--read-database-url`): everything
    /// above, except the audit views' queries, which a replica cannot
    /// create again to compare (the primary's audit does).
    pub replica: bool,
    /// `audit --month`: the findings of this posting month only, and its
    /// seal; `None`, the whole ledger.
    pub month: Option<Month>,
}

impl AuditReport {
    pub fn clean(&self) -> bool {
        self.discrepancies_found == 0 && self.seals.iter().all(SealCheck::holds) && self.definitions.is_empty()
    }
}

/// The whole ledger's audit.
pub async fn audit(pool: &PgPool) -> Result<AuditReport, DbError> {
    audit_of(pool, None).await
}

/// The audit of the whole ledger, or of one posting month: its entries'
/// findings and its seal (if it is closed); the functions, views and
/// triggers are checked either way.
pub async fn audit_of(pool: &PgPool, month: Option<Month>) -> Result<AuditReport, DbError> {
    // First, whether the guards and views the audit relies on are still the
    // migrations' (on a connection of its own: it rolls its work back).
    // Plan the audit on statistics that know how big the ledger is (a
    // billing run may have just written a charge per project): before,
    // with no connection held, as the refresh takes the pool's own.
    let replica = crate::db::is_replica(&mut *pool.acquire().await?).await?;
    if !replica {
        // A replica has its primary's statistics, and may not write them.
        crate::service::refresh_statistics(pool, &[]).await;
    }
    let definitions = crate::db::definitions::altered(&mut *pool.acquire().await?, !replica).await?;
    // Every closed month's seal, side by side (`seal_chain`), before the
    // audit's own transaction holds a connection of the pool.
    let chain = match month {
        None => Some(seal_chain(pool).await?),
        Some(_) => None,
    };
    // The findings in two parts (db::audit::Part), each read on a
    // connection of its own, side by side, in one snapshot of the database
    // that the first exports and the second imports: the whole ledger's job
    // charges' recomputation beside everything else, a month's storage
    // charges beside the rest of it (a standby exports snapshots as a
    // primary does). Without a second connection in that snapshot (a pool
    // of one, a pool or server with none free within the pool's acquire
    // timeout, a standby that did not export it) the two parts are read one
    // after the other, in one snapshot too.
    let keep = crate::db::audit::KEPT;
    let [first, second] = crate::db::audit::Part::two(month.map(Month::first_day));
    // Both connections before either transaction begins: waiting for the
    // second (a busy pool) holds no snapshot open and idle.
    let mut conn = pool.acquire().await?;
    let mut other = match pool.options().get_max_connections() {
        0 | 1 => None,
        _ => match pool.acquire().await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("the audit reads its two parts one after the other: no second connection: {e}");
                None
            }
        },
    };
    let (mut tx, beside) = match other.as_deref_mut() {
        None => (crate::db::begin_one_snapshot(&mut conn).await?, None),
        Some(other) => {
            let (tx, snapshot) = crate::db::begin_exported_snapshot(&mut conn).await?;
            match crate::db::begin_in_snapshot(other, &snapshot).await {
                Ok(beside) => (tx, Some(beside)),
                Err(e) => {
                    tracing::warn!("the audit reads its two parts one after the other: {e}");
                    (tx, None)
                }
            }
        }
    };
    // What follows the findings, in their snapshot: the month's seal
    // (`audit --month`; the whole ledger's were read above) and the
    // rejections' summary; then the transaction ends.
    let after = async |mut tx: sqlx::Transaction<'_, sqlx::Postgres>| {
        let seals = match month {
            Some(m) => Some(periods::seal_checks(&mut tx, Some(m.first_day())).await?),
            None => None,
        };
        let rejections = crate::db::rejected::summary(&mut tx).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>((seals, rejections))
    };
    let (findings, (seals, rejections)) = match beside {
        None => {
            let a = first.read(&mut tx, keep).await?;
            let b = second.read(&mut tx, keep).await?;
            (a.merge(b, keep, first.order()), after(tx).await?)
        }
        Some(mut beside) => {
            let (backend_beside, backend_tx) = (
                crate::db::backend_of(&mut beside).await?,
                crate::db::backend_of(&mut tx).await?,
            );
            // Each side ends its transaction as soon as its work is done,
            // not idle in it until the other's is (a server's
            // idle_in_transaction_session_timeout ends such a session). The
            // second part on the transaction that goes on to the seal check:
            // it leaves it its settings, as reading the two in turn does.
            let one = async {
                let a = first.read(&mut beside, keep).await?;
                // Read only, and read whole: a failed rollback loses
                // nothing (the connection is dropped).
                let _ = beside.rollback().await;
                Ok::<_, sqlx::Error>(a)
            };
            let two = async {
                let b = second.read(&mut tx, keep).await?;
                Ok::<_, sqlx::Error>((b, after(tx).await?))
            };
            let (a, (b, after)) = crate::db::both_or_cancel(
                pool.connect_options().as_ref(),
                (backend_beside, one),
                (backend_tx, two),
            )
            .await?;
            (a.merge(b, keep, first.order()), after)
        }
    };
    Ok(AuditReport {
        discrepancies: findings.kept,
        discrepancies_found: findings.found,
        discrepancies_by_field: findings.by_field,
        seals: match (chain, seals) {
            (Some(chain), _) => chain,
            (None, seals) => seals.unwrap_or_default(),
        },
        rejections,
        definitions,
        replica,
        month,
    })
}
