//! Allocations, balances, holds and the start check (issue 17,
//! docs/budgets.md). Allocation entries and holds are appended, never
//! changed; a balance is derived from them and the ledger every time.

use chrono::{DateTime, TimeDelta, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::db::DbError;
use crate::db::budget::{self as bdb, AllocationRow, HoldRow, NewAllocation, NewHold};
use crate::domain::budget::{AllocationKind, Balance, Verdict, verdict};
use crate::domain::rules::Dated;
use crate::ids::{AllocationId, ClusterId, HoldId, ProjectId};
use crate::service::quote::{CatalogCache, Quote, QuoteError, QuoteRequest};

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Quote(#[from] QuoteError),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for BudgetError {
    fn from(e: sqlx::Error) -> Self {
        match crate::service::guard_message(&e) {
            Some(m) => BudgetError::Refused(m),
            None => BudgetError::Db(e.into()),
        }
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, BudgetError> {
    Err(BudgetError::Invalid(msg.into()))
}

async fn project_id(conn: &mut PgConnection, code: &str) -> Result<ProjectId, BudgetError> {
    Ok(crate::service::project(conn, code)
        .await?
        .map_err(|named| BudgetError::Invalid(format!("unknown project {named}")))?
        .id)
}

fn check_amount(amount: Decimal) -> Result<(), BudgetError> {
    if amount <= Decimal::ZERO || amount.scale() > 2 || amount >= Decimal::from(10_000_000_000_000_000i64) {
        return invalid(format!(
            "an amount is positive, with at most 2 decimal places, below 10^16: not {amount}"
        ));
    }
    Ok(())
}

fn check_reason(reason: &str) -> Result<(), BudgetError> {
    if reason.trim().is_empty() {
        return invalid("give a --reason: it is kept with the entry");
    }
    Ok(())
}

/// The id of a cluster named on the command line.
pub(crate) async fn cluster_id(conn: &mut PgConnection, name: &str) -> Result<ClusterId, BudgetError> {
    let catalog = crate::db::reference::load_catalog(conn).await?;
    match catalog.cluster(name) {
        Some(c) => Ok(c.id),
        None => invalid(format!("unknown cluster {name:?} ({})", catalog.clusters_known(name))),
    }
}

/// Grant `amount` to a project for `[from, until)`, for every cluster
/// (`cluster` `None`: the general pool) or for one.
pub async fn grant(
    pool: &PgPool,
    project: &str,
    amount: Decimal,
    window: Dated<()>,
    cluster: Option<&str>,
    reason: &str,
    author: &str,
) -> Result<AllocationId, BudgetError> {
    check_amount(amount)?;
    check_reason(reason)?;
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = async {
        let p = project_id(&mut tx, project).await?;
        let cluster = match cluster {
            Some(name) => Some(cluster_id(&mut tx, name).await?),
            None => None,
        };
        let a = NewAllocation {
            project: p,
            kind: AllocationKind::Grant,
            amount,
            valid_from: window.valid_from,
            valid_until: window.valid_until,
            grant: None,
            transfer_of: None,
            cluster,
            reason,
        };
        Ok(bdb::insert_allocation(&mut tx, &a, author).await?)
    }
    .await;
    crate::service::finish(tx, result).await
}

/// Take `amount` back from grant `from_grant` of `project`.
pub async fn reduce(
    pool: &PgPool,
    project: &str,
    from_grant: AllocationId,
    amount: Decimal,
    reason: &str,
    author: &str,
) -> Result<AllocationId, BudgetError> {
    check_amount(amount)?;
    check_reason(reason)?;
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = async {
        let p = project_id(&mut tx, project).await?;
        let g = grant_of(&mut tx, p, project, from_grant).await?;
        let a = NewAllocation {
            project: p,
            kind: AllocationKind::Reduce,
            amount: -amount,
            valid_from: g.0,
            valid_until: None,
            grant: Some(from_grant),
            transfer_of: None,
            // The database gives it its grant's.
            cluster: None,
            reason,
        };
        Ok(bdb::insert_allocation(&mut tx, &a, author).await?)
    }
    .await;
    crate::service::finish(tx, result).await
}

/// The window of a grant of `project` (the database's check locks it when
/// something is taken from it).
async fn grant_of(
    tx: &mut PgConnection,
    p: ProjectId,
    code: &str,
    id: AllocationId,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>), BudgetError> {
    match bdb::grant(tx, id).await? {
        Some(g) if g.project == p && (g.kind == "grant" || g.kind == "transfer_in") => {
            Ok((g.valid_from, g.valid_until))
        }
        Some(_) => invalid(format!("allocation {id} is not a grant of project {code}")),
        None => invalid(format!("there is no allocation {id}")),
    }
}

/// Move `amount` of grant `from_grant` of `from` to `to`, from `starting`
/// (default: now) until the end of the grant given from.
#[allow(clippy::too_many_arguments)]
pub async fn transfer(
    pool: &PgPool,
    from: &str,
    from_grant: AllocationId,
    to: &str,
    amount: Decimal,
    starting: Option<DateTime<Utc>>,
    reason: &str,
    author: &str,
) -> Result<(AllocationId, AllocationId), BudgetError> {
    check_amount(amount)?;
    check_reason(reason)?;
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = async {
        let src = project_id(&mut tx, from).await?;
        let dst = project_id(&mut tx, to).await?;
        if src == dst {
            return invalid("a transfer goes to another project");
        }
        let (g_from, g_until) = grant_of(&mut tx, src, from, from_grant).await?;
        // A grant that has ended first: what is left of its pool is not
        // the reason (the checks below gave "would restart the pool …:
        // transfer less" for any amount of an ended grant).
        let start = starting.unwrap_or_else(Utc::now).max(g_from);
        if let Some(u) = g_until.filter(|u| start >= *u) {
            return invalid(if Utc::now() >= u {
                format!("grant {from_grant} has ended: nothing of it can be transferred")
            } else {
                format!(
                    "--from {} is not before grant {from_grant} ends ({}): {to} could spend nothing of it",
                    start.format("%Y-%m-%d %H:%M UTC"),
                    u.format("%Y-%m-%d %H:%M UTC")
                )
            });
        }
        // Only what the giving pool has not spent: the grant's own limit
        // (the database's) let a project that had spent 80 of 100 give 50
        // away, and both spend it. Read before the transfer out (once a
        // grant is given away whole its pool no longer starts with it, and
        // what was spent from it drops out), under the project's lock, so
        // that no other transfer or hold of it reads the same money.
        bdb::lock_project_holds(&mut tx, src).await?;
        let now = Utc::now();
        // The giving pool, once the grant has begun (a grant not begun has
        // paid for nothing yet).
        let pool = if g_from <= now {
            Some(bdb::cluster_of(&mut tx, from_grant).await?)
        } else {
            None
        };
        let mut before_remaining = Decimal::ZERO;
        if let Some(cluster) = pool {
            let left = Balance::new(now, bdb::sums(&mut tx, src, cluster, now).await?);
            before_remaining = left.remaining;
            if amount > left.remaining {
                return invalid(format!(
                    "{from} has {:.2} left unspent in that pool (allocated {:.2}, used {:.2}, held {:.2}): at most \
                     that can be transferred",
                    left.remaining.max(Decimal::ZERO),
                    left.allocated,
                    left.used,
                    left.held
                ));
            }
        }
        let out = NewAllocation {
            project: src,
            kind: AllocationKind::TransferOut,
            amount: -amount,
            valid_from: g_from,
            valid_until: None,
            grant: Some(from_grant),
            transfer_of: None,
            // The database gives it its grant's.
            cluster: None,
            reason,
        };
        let out_id = bdb::insert_allocation(&mut tx, &out, author).await?;
        // A pool counts from its earliest grant that still holds something:
        // giving that grant away whole restarts the pool at the next one,
        // and what was spent before drops out of its balance (money made).
        // Its balance after must be what it was less what went.
        if let Some(cluster) = pool {
            let after = Balance::new(now, bdb::sums(&mut tx, src, cluster, now).await?);
            if after.remaining != before_remaining - amount {
                return invalid(format!(
                    "giving grant {from_grant} away whole would restart {from}'s pool at its next grant, and what \
                     was spent before would drop out of its balance ({:.2} left after, instead of {:.2}): leave \
                     something of the grant (transfer less)",
                    after.remaining,
                    before_remaining - amount
                ));
            }
        }
        let inn = NewAllocation {
            project: dst,
            kind: AllocationKind::TransferIn,
            amount,
            valid_from: start,
            valid_until: g_until,
            grant: None,
            transfer_of: Some(out_id),
            // The database gives it the cluster of the grant given from.
            cluster: None,
            reason,
        };
        let in_id = bdb::insert_allocation(&mut tx, &inn, author).await?;
        Ok((out_id, in_id))
    }
    .await;
    crate::service::finish(tx, result).await
}

pub async fn allocations(pool: &PgPool, project: Option<&str>) -> Result<Vec<AllocationRow>, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let p = match project {
        Some(code) => Some(project_id(&mut conn, code).await?),
        None => None,
    };
    Ok(bdb::allocations(&mut conn, p).await?)
}

/// A project's balance in one pool, with its code.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectBalance {
    pub project: String,
    #[serde(flatten)]
    pub balance: Balance,
}

/// Every pool of a project at `at` (docs/budgets.md): the general pool
/// first (when it has unscoped allocations, or the project none at all),
/// then one per cluster it has scoped allocations for.
pub(crate) async fn project_pools(
    conn: &mut PgConnection,
    project: ProjectId,
    at: DateTime<Utc>,
) -> Result<Vec<Balance>, sqlx::Error> {
    let mut out = Vec::new();
    for (cluster, name) in bdb::pools(&mut *conn, project).await? {
        out.push(Balance::new(at, bdb::sums(&mut *conn, project, cluster, at).await?).of_cluster(name));
    }
    Ok(out)
}

/// Refuse a balance asked at an instant inside a day whose draws an archived
/// month may hold (docs/retention.md): the archive kept such a day's draws
/// only where an allocation began or ended on it, and a balance cut
/// elsewhere would miss them.
pub async fn check_asked_at(pool: &PgPool, at: DateTime<Utc>) -> Result<(), BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    match bdb::inside_archived_day(&mut conn, at).await? {
        Some(last) => invalid(format!(
            "{at} falls inside a day of a month archived through {} (its draws were kept by whole day): ask for a day's start or end (--at YYYY-MM-DD)",
            last.format("%Y-%m")
        )),
        None => Ok(()),
    }
}

/// A project's general pool (unscoped allocations) at `at`.
pub async fn balance(pool: &PgPool, project: &str, at: DateTime<Utc>) -> Result<ProjectBalance, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let p = crate::service::project(&mut conn, project)
        .await?
        .map_err(|named| BudgetError::Invalid(format!("unknown project {named}")))?;
    let sums = bdb::sums(&mut conn, p.id, None, at).await?;
    Ok(ProjectBalance {
        project: p.code,
        balance: Balance::new(at, sums),
    })
}

/// Every pool of a project at `at`.
pub async fn pools(pool: &PgPool, project: &str, at: DateTime<Utc>) -> Result<Vec<ProjectBalance>, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let p = crate::service::project(&mut conn, project)
        .await?
        .map_err(|named| BudgetError::Invalid(format!("unknown project {named}")))?;
    Ok(project_pools(&mut conn, p.id, at)
        .await?
        .into_iter()
        .map(|balance| ProjectBalance {
            project: p.code.clone(),
            balance,
        })
        .collect())
}

/// Every budgeted pool of every project (one whose allocations have begun).
pub async fn balances(pool: &PgPool, at: DateTime<Utc>) -> Result<Vec<ProjectBalance>, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let mut out = Vec::new();
    for (id, code) in bdb::budgeted_projects(&mut conn).await? {
        // Every budgeted pool: not one whose allocations have not begun, or
        // were taken back whole (docs/budgets.md).
        for balance in project_pools(&mut conn, id, at)
            .await?
            .into_iter()
            .filter(|b| b.budgeted)
        {
            out.push(ProjectBalance {
                project: code.clone(),
                balance,
            });
        }
    }
    Ok(out)
}

/// A job about to run, as a submit or prolog hook knows it.
#[derive(Debug, Clone)]
pub struct JobRequest {
    pub quote: QuoteRequest,
    pub project: String,
    pub job_id: Option<String>,
    pub array_index: Option<u32>,
    /// How many jobs of this size it is: 1, or an array's tasks (a check
    /// of an array at submission: each task may run its whole walltime).
    pub tasks: u32,
}

/// The most tasks a check takes (Slurm's `MaxArraySize` is at most
/// 4,000,001; PBS's `max_array_size` defaults to 10,000).
pub const MAX_TASKS: u32 = 4_000_001;

/// What `check` answers: may the job start, what it may cost, the balance.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CheckAnswer {
    pub project: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The quote's net total: what the job costs if it runs its whole
    /// walltime (every task of an array, `tasks` of them).
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub cost: Decimal,
    /// The tasks checked together (an array's); 1 (not shown) for a job.
    #[serde(default = "one_task", skip_serializing_if = "is_one_task")]
    pub tasks: u32,
    pub balance: Balance,
}

fn one_task() -> u32 {
    1
}

fn is_one_task(tasks: &u32) -> bool {
    *tasks == 1
}

/// May this job start (docs/budgets.md)? Quotes it for its project (its
/// class's card and its discount) and compares with what remains in the
/// pool it would draw from (its cluster's, once the project has allocations
/// scoped to that cluster; else the general pool). The job's own open hold,
/// if any, is not counted against it. A project that has never had an
/// allocation may start whatever the request (it is not even priced).
pub async fn check(pool: &PgPool, job: &JobRequest, floor: Decimal) -> Result<CheckAnswer, BudgetError> {
    check_with(pool, &CatalogCache::default(), job, floor).await
}

/// [`check`], with the rate catalog from `cache` (serve keeps one).
pub async fn check_with(
    pool: &PgPool,
    cache: &CatalogCache,
    job: &JobRequest,
    floor: Decimal,
) -> Result<CheckAnswer, BudgetError> {
    if job.tasks == 0 || job.tasks > MAX_TASKS {
        return invalid(format!("tasks must be 1 to {MAX_TASKS}, not {}", job.tasks));
    }
    if job.tasks > 1 && job.array_index.is_some() {
        return invalid("tasks counts the tasks of a whole array: give no array index with it");
    }
    let job = task_read(job)?;
    Ok(check_quoted(pool, cache, &job, floor).await?.0)
}

/// The job with an array task named in its job id (`123_4`, no index) read
/// as the recorder reads it (`domain::posting::split_array_task`): array
/// task 4 of job 123, so that the task's record releases its hold.
fn task_read(job: &JobRequest) -> Result<std::borrow::Cow<'_, JobRequest>, BudgetError> {
    let Some(id) = job.job_id.as_deref() else {
        return Ok(std::borrow::Cow::Borrowed(job));
    };
    match crate::domain::posting::split_array_task(id, job.array_index) {
        Ok(None) => Ok(std::borrow::Cow::Borrowed(job)),
        Ok(Some((job_id, index))) => Ok(std::borrow::Cow::Owned(JobRequest {
            job_id: Some(job_id),
            array_index: Some(index),
            ..job.clone()
        })),
        Err(why) => invalid(why),
    }
}

/// [`check`], and the quote it made (none for a project not budgeted).
async fn check_quoted(
    pool: &PgPool,
    cache: &CatalogCache,
    job: &JobRequest,
    floor: Decimal,
) -> Result<(CheckAnswer, Option<Quote>), BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    check_quoted_on(&mut conn, cache, job, floor).await
}

/// [`check_quoted`] on the caller's connection (a hold's, in its
/// transaction, under its project's lock).
async fn check_quoted_on(
    conn: &mut PgConnection,
    cache: &CatalogCache,
    job: &JobRequest,
    floor: Decimal,
) -> Result<(CheckAnswer, Option<Quote>), BudgetError> {
    let p = project_id(&mut *conn, &job.project).await?;
    if !bdb::ever_allocated(&mut *conn, p, job.quote.at).await? {
        let unbudgeted = Balance::new(job.quote.at, bdb::sums(&mut *conn, p, None, job.quote.at).await?);
        let answer = CheckAnswer {
            project: job.project.clone(),
            verdict: verdict(&unbudgeted, Decimal::ZERO, floor),
            cost: Decimal::ZERO,
            tasks: job.tasks,
            balance: unbudgeted,
        };
        return Ok((answer, None));
    }
    let q = quote_on(&mut *conn, cache, job).await?;
    let pool_cluster = bdb::pool_for(&mut *conn, p, q.cluster_id, job.quote.at).await?;
    let mut sums = bdb::sums(&mut *conn, p, pool_cluster, job.quote.at).await?;
    // A job's own hold is a task's: an array checked whole has none.
    if let Some(id) = job.job_id.as_ref().filter(|_| job.tasks == 1) {
        let index = job.array_index.map(|i| i as i32);
        if let Some(h) = bdb::open_hold(&mut *conn, q.cluster_id, id, index, job.quote.at).await?
            && h.project.eq_ignore_ascii_case(&job.project)
        {
            sums.held -= h.amount;
        }
    }
    let balance = Balance::new(job.quote.at, sums).of_cluster(pool_cluster.map(|_| q.cluster.clone()));
    // Every task may run its whole walltime.
    let Some(cost) = q.total.checked_mul(Decimal::from(job.tasks)) else {
        return invalid(format!("{} tasks of {} each overflow", job.tasks, q.total));
    };
    let mut verdict = verdict(&balance, cost, floor);
    if job.tasks > 1 && balance.budgeted {
        verdict.reason = format!("{}: {} tasks of {:.2} each", verdict.reason, job.tasks, q.total);
    }
    let answer = CheckAnswer {
        project: q.project.clone().unwrap_or_else(|| job.project.clone()),
        verdict,
        cost,
        tasks: job.tasks,
        balance,
    };
    Ok((answer, Some(q)))
}

/// The job's quote for its project, on the caller's connection (a start
/// check holds one connection only: serve's pool is small, and checks that
/// each held one while waiting for a second could wait on each other).
async fn quote_on(conn: &mut PgConnection, cache: &CatalogCache, job: &JobRequest) -> Result<Quote, BudgetError> {
    let mut q = job.quote.clone();
    q.project = Some(job.project.clone());
    q.class = None;
    crate::service::quote::quote_in(conn, cache, &q)
        .await
        .map_err(|e| match e {
            // The ledger cannot be asked: not a request that cannot be priced.
            QuoteError::Db(e) => BudgetError::Db(e),
            other => BudgetError::Quote(other),
        })
}

/// What `hold` did.
#[derive(Debug, Clone, Serialize)]
pub struct HoldAnswer {
    pub hold: HoldId,
    /// False when the job already had an open hold (that one is answered).
    pub placed_now: bool,
    pub amount: Decimal,
    pub expires_at: DateTime<Utc>,
    pub check: CheckAnswer,
}

/// Place a hold for a job about to run: its quote's net total, until its
/// walltime plus `grace` from now; one open hold per job (a second call
/// answers with the first). The hold is placed whatever the check says:
/// whether to let the job run is the hook's decision (`check`).
pub async fn hold(pool: &PgPool, job: &JobRequest, grace: TimeDelta, author: &str) -> Result<HoldAnswer, BudgetError> {
    let job = &*task_read(job)?;
    let Some(job_id) = job.job_id.as_deref() else {
        return invalid("a hold needs the job's id (--job-id)");
    };
    let cache = CatalogCache::default();
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = async {
        let p = project_id(&mut tx, &job.project).await?;
        // One hold of a project at a time, each checked against what the
        // ones before it hold: twelve holds at once all read the balance
        // before any was placed, and ten of 10.08 were allowed against 20.
        // Checked as of now, once the lock is held: holds placed while this
        // one waited were placed after the instant it was asked at.
        bdb::lock_project_holds(&mut tx, p).await?;
        let mut now_asked = job.clone();
        now_asked.quote.at = now_asked.quote.at.max(Utc::now());
        let (answer, quoted) = check_quoted_on(&mut tx, &cache, &now_asked, Decimal::ZERO).await?;
        // What it holds: the check's quote (an unbudgeted project's job is
        // priced here).
        let q = match quoted {
            Some(q) => q,
            None => quote_on(&mut tx, &cache, &now_asked).await?,
        };
        let cluster = q.cluster_id;
        let index = job.array_index.map(|i| i as i32);
        bdb::lock_job(&mut tx, cluster, job_id, index).await?;
        let now = Utc::now();
        if let Some(h) = bdb::open_hold(&mut tx, cluster, job_id, index, now).await?
            && h.project.eq_ignore_ascii_case(&job.project)
        {
            return Ok(HoldAnswer {
                hold: h.id,
                placed_now: false,
                amount: h.amount,
                expires_at: h.expires_at,
                check: answer.clone(),
            });
        }
        let expires_at = now + TimeDelta::seconds(q.price.wall_seconds) + grace;
        let request = serde_json::json!({
            "resources": job.quote.resources, "walltime": job.quote.walltime, "queue": job.quote.queue,
            "node_type": job.quote.node_type, "cluster": q.cluster, "rate_card_id": q.rate_card_id,
        });
        let h = NewHold {
            project: p,
            cluster,
            job_id,
            array_index: index,
            amount: q.total.max(Decimal::ZERO),
            request,
            expires_at,
        };
        let id = bdb::insert_hold(&mut tx, &h, author).await?;
        Ok(HoldAnswer {
            hold: id,
            placed_now: true,
            amount: h.amount,
            expires_at,
            check: answer.clone(),
        })
    }
    .await;
    crate::service::finish(tx, result).await
}

pub async fn holds(pool: &PgPool, project: &str, at: DateTime<Utc>) -> Result<Vec<HoldRow>, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let p = project_id(&mut conn, project).await?;
    Ok(bdb::holds(&mut conn, Some(p), None, at).await?)
}

/// Where alerts go.
#[derive(Debug, Clone)]
pub enum Channel {
    /// A JSON POST to an `http://` URL (`https` through `Command` and curl).
    Webhook(String),
    /// A local command, the alert's JSON on its stdin (`mail -s …`,
    /// `curl -fsS -d @- https://…`).
    Command(String),
}

impl Channel {
    fn name(&self) -> String {
        let name = match self {
            Channel::Webhook(u) => format!("webhook {u}"),
            Channel::Command(c) => format!("command {c}"),
        };
        name.chars().take(2000).collect()
    }
}

/// What `alerts --check` did.
#[derive(Debug, Clone, Serialize)]
pub struct AlertRun {
    pub thresholds: Vec<Decimal>,
    /// Crossings recorded now.
    pub new: Vec<bdb::Crossing>,
    /// Deliveries tried now: crossing id, channel, whether it went through.
    pub delivered: Vec<(i64, String, bool)>,
}

/// Record every threshold crossed now (once per project, pool of
/// allocations and threshold), then deliver every crossing not yet
/// delivered to `channel` (three tries each, 1 s and 2 s apart).
pub async fn check_alerts(pool: &PgPool, channel: Option<&Channel>) -> Result<AlertRun, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    // One run at a time (two would deliver the same crossings twice).
    if !bdb::lock_alerts(&mut conn).await? {
        return Err(BudgetError::Refused(
            "another `alerts --check` is running; nothing done".into(),
        ));
    }
    let result = check_alerts_locked(&mut conn, channel).await;
    let _ = bdb::unlock_alerts(&mut conn).await;
    result
}

async fn check_alerts_locked(conn: &mut PgConnection, channel: Option<&Channel>) -> Result<AlertRun, BudgetError> {
    let thresholds = bdb::thresholds(&mut *conn).await?;
    let now = Utc::now();
    let mut new_ids = Vec::new();
    if !thresholds.is_empty() {
        for (id, _) in bdb::budgeted_projects(&mut *conn).await? {
            for (cluster, _) in bdb::pools(&mut *conn, id).await? {
                let b = Balance::new(now, bdb::sums(&mut *conn, id, cluster, now).await?);
                let (Some(pool_from), true) = (b.pool_from, b.allocated > Decimal::ZERO) else {
                    continue;
                };
                let percent = b.used * Decimal::ONE_HUNDRED / b.allocated;
                let crossed: Vec<Decimal> = thresholds.iter().copied().filter(|t| percent >= *t).collect();
                if !crossed.is_empty() {
                    new_ids.extend(
                        bdb::record_crossings(
                            &mut *conn,
                            id,
                            cluster,
                            &crossed,
                            pool_from,
                            b.allocated,
                            b.used,
                            b.remaining,
                        )
                        .await?,
                    );
                }
            }
        }
    }
    let all = bdb::crossings(&mut *conn).await?;
    let new: Vec<bdb::Crossing> = all.iter().filter(|c| new_ids.contains(&c.id)).cloned().collect();
    let mut delivered = Vec::new();
    if let Some(ch) = channel {
        let name = ch.name();
        for c in all.iter().rev().filter(|c| !c.delivered.contains(&name)) {
            let body = serde_json::json!({
                "alert": "budget threshold crossed", "project": c.project, "cluster": c.cluster,
                "threshold_percent": c.threshold,
                "allocated": c.allocated, "used": c.used, "remaining": c.remaining,
                "allocations_since": c.pool_from, "crossed_at": c.crossed_at,
            })
            .to_string();
            let mut ok = false;
            for attempt in 0..3u32 {
                if attempt > 0 {
                    tokio::time::sleep(std::time::Duration::from_secs(u64::from(attempt))).await;
                }
                let (went, detail) = deliver(ch, &body).await;
                bdb::record_delivery(&mut *conn, c.id, &name, went, &detail).await?;
                if went {
                    ok = true;
                    break;
                }
            }
            delivered.push((c.id, name.clone(), ok));
        }
    }
    Ok(AlertRun {
        thresholds,
        new,
        delivered,
    })
}

async fn deliver(ch: &Channel, body: &str) -> (bool, String) {
    match ch {
        Channel::Webhook(url) => {
            let Ok(u) = url::Url::parse(url) else {
                return (false, format!("{url:?} is not a URL"));
            };
            if u.scheme() != "http" {
                return (
                    false,
                    "only http:// webhooks are posted directly; use --command 'curl -fsS -d @- URL' for https".into(),
                );
            }
            let host = u.host_str().unwrap_or("localhost");
            let port = u.port().unwrap_or(80);
            let Some(addr) = tokio::net::lookup_host((host, port))
                .await
                .ok()
                .and_then(|mut a| a.next())
            else {
                return (false, format!("cannot resolve {host}"));
            };
            let auth = (!u.username().is_empty())
                .then(|| crate::serve::client::basic(&format!("{}:{}", u.username(), u.password().unwrap_or(""))));
            let path = match u.query() {
                Some(q) => format!("{}?{q}", u.path()),
                None => u.path().to_owned(),
            };
            match tokio::time::timeout(
                std::time::Duration::from_secs(10),
                crate::serve::client::post(addr, &path, auth.as_deref(), body.as_bytes()),
            )
            .await
            {
                Ok(Ok(r)) if (200..300).contains(&r.status) => (true, format!("HTTP {}", r.status)),
                Ok(Ok(r)) => (false, format!("HTTP {}: {}", r.status, r.body.trim())),
                Ok(Err(e)) => (false, e.to_string()),
                Err(_) => (false, "no answer within 10 s".into()),
            }
        }
        Channel::Command(cmd) => {
            // The JSON goes in through a file, not a pipe: a command that
            // does not read its input must not kill us with SIGPIPE.
            let path = std::env::temp_dir().join(format!("hpc-ledger-alert-{}.json", uuid::Uuid::new_v4().simple()));
            if let Err(e) = std::fs::write(&path, body) {
                return (false, format!("cannot write {}: {e}", path.display()));
            }
            let input = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) => return (false, format!("cannot read {}: {e}", path.display())),
            };
            let child = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .stdin(std::process::Stdio::from(input))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn();
            let result = match child {
                Err(e) => (false, format!("cannot run sh: {e}")),
                Ok(child) => {
                    match tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output()).await {
                        Ok(Ok(o)) if o.status.success() => (true, "exit 0".into()),
                        Ok(Ok(o)) => (
                            false,
                            format!("{}: {}", o.status, String::from_utf8_lossy(&o.stderr).trim()),
                        ),
                        Ok(Err(e)) => (false, e.to_string()),
                        Err(_) => (false, "did not finish within 30 s".into()),
                    }
                }
            };
            let _ = std::fs::remove_file(&path);
            result
        }
    }
}

pub async fn alerts(pool: &PgPool) -> Result<Vec<bdb::Crossing>, BudgetError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    Ok(bdb::crossings(&mut conn).await?)
}
