//! Allocations, holds and balances (docs/budgets.md): append allocation
//! entries and holds; sum a project's balance with the database's own
//! definition (`hl_pool_balance`, `hl_pool_drawn`, migrations 0027 and
//! 0028): the general pool (`None`) and one pool per cluster a project has
//! scoped allocations for.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::budget::{AllocationKind, Sums};
use crate::ids::{AllocationId, ClusterId, HoldId, ProjectId};

/// An allocation entry as stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AllocationRow {
    pub id: AllocationId,
    pub project: String,
    pub kind: String,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
    pub valid_from: DateTime<Utc>,
    pub valid_until: Option<DateTime<Utc>>,
    pub grant_id: Option<AllocationId>,
    pub transfer_of: Option<AllocationId>,
    /// The one cluster it pays for (`None`: the general pool).
    pub cluster: Option<String>,
    pub reason: String,
    pub author: String,
    pub created_at: DateTime<Utc>,
    /// For a grant: what is left of it after reductions and transfers out.
    pub left: Option<Decimal>,
}

/// A new allocation entry.
pub struct NewAllocation<'a> {
    pub project: ProjectId,
    pub kind: AllocationKind,
    pub amount: Decimal,
    /// Ignored for a reduce or transfer out (they have their grant's window).
    pub valid_from: DateTime<Utc>,
    pub valid_until: Option<DateTime<Utc>>,
    pub grant: Option<AllocationId>,
    pub transfer_of: Option<AllocationId>,
    /// A grant's one cluster (a reduce or transfer has its grant's).
    pub cluster: Option<ClusterId>,
    pub reason: &'a str,
}

pub async fn insert_allocation(
    conn: &mut PgConnection,
    a: &NewAllocation<'_>,
    author: &str,
) -> Result<AllocationId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO allocation (project_id, kind, amount, valid_from, valid_until, grant_id, transfer_of, reason, author,
                                  cluster_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
           RETURNING id AS "id: AllocationId""#,
        a.project as ProjectId,
        a.kind.as_str(),
        a.amount,
        a.valid_from,
        a.valid_until,
        a.grant.map(|g| g.0),
        a.transfer_of.map(|t| t.0),
        a.reason,
        author,
        a.cluster.map(|c| c.0)
    )
    .fetch_one(&mut *conn)
    .await
}

/// A project's allocation entries (every project's with `None`), oldest first.
pub async fn allocations(
    conn: &mut PgConnection,
    project: Option<ProjectId>,
) -> Result<Vec<AllocationRow>, sqlx::Error> {
    sqlx::query_as!(
        AllocationRow,
        r#"SELECT a.id AS "id: AllocationId", p.code AS project, a.kind, a.amount, a.valid_from, a.valid_until,
                  a.grant_id AS "grant_id: AllocationId", a.transfer_of AS "transfer_of: AllocationId",
                  c.name AS "cluster?", a.reason,
                  a.author, a.created_at,
                  CASE WHEN a.kind IN ('grant', 'transfer_in')
                       THEN a.amount + coalesce((SELECT sum(t.amount) FROM allocation t WHERE t.grant_id = a.id), 0)
                  END AS left
             FROM allocation a JOIN project p ON p.id = a.project_id LEFT JOIN cluster c ON c.id = a.cluster_id
            WHERE $1::bigint IS NULL OR a.project_id = $1
            ORDER BY lower(p.code), a.id"#,
        project.map(|p| p.0)
    )
    .fetch_all(&mut *conn)
    .await
}

/// A grant as `alloc reduce` and `alloc transfer` need it.
pub struct Grant {
    pub project: ProjectId,
    pub kind: String,
    pub valid_from: DateTime<Utc>,
    pub valid_until: Option<DateTime<Utc>>,
}

/// An allocation entry's project, kind and window (the database's own
/// check locks the grant when something is taken from it).
pub async fn grant(conn: &mut PgConnection, id: AllocationId) -> Result<Option<Grant>, sqlx::Error> {
    sqlx::query_as!(
        Grant,
        r#"SELECT project_id AS "project: ProjectId", kind, valid_from, valid_until FROM allocation WHERE id = $1"#,
        id as AllocationId
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The cluster an allocation entry is scoped to (`None`: every cluster).
pub async fn cluster_of(conn: &mut PgConnection, id: AllocationId) -> Result<Option<ClusterId>, sqlx::Error> {
    let c: Option<i64> = sqlx::query_scalar("SELECT cluster_id FROM allocation WHERE id = $1")
        .bind(id.0)
        .fetch_one(&mut *conn)
        .await?;
    Ok(c.map(ClusterId))
}

/// What the database sums for a project's pool at `at` (`pool`: the
/// cluster of scoped allocations, `None` for the general pool).
pub async fn sums(
    conn: &mut PgConnection,
    project: ProjectId,
    pool: Option<ClusterId>,
    at: DateTime<Utc>,
) -> Result<Sums, sqlx::Error> {
    let r = sqlx::query!(
        r#"SELECT b.allocated AS "allocated!", b.pool_from, b.used AS "used!", b.held AS "held!",
                  -- the whole days before the instant's own (center time): day boundaries cut no day's draws;
                  -- at a day's last microsecond (a statement's month end) that day is whole
                  hl_pool_drawn($1, $4,
                                hl_day_end(((($2 + interval '1 microsecond') AT TIME ZONE c.time_zone)::date - $3::int - 1),
                                           c.time_zone),
                                hl_day_end(((($2 + interval '1 microsecond') AT TIME ZONE c.time_zone)::date - 1), c.time_zone)
                                    - interval '1 microsecond')
                      AS "recent!",
                  b.begun AS "ever!", g.next_end, g.last_end
             FROM hl_pool_balance($1, $4, $2) b, center c,
                  -- the pool's grants in force (with something left of them, as hl_pool_balance finds
                  -- their start): the first end (what is not spent by then expires) and the last (none
                  -- when one of them never ends)
                  LATERAL (SELECT min(a.valid_until) AS next_end,
                                  CASE WHEN bool_or(a.valid_until IS NULL) THEN NULL ELSE max(a.valid_until) END
                                      AS last_end
                             FROM allocation a
                            WHERE a.project_id = $1 AND a.cluster_id IS NOT DISTINCT FROM $4
                              AND a.kind IN ('grant', 'transfer_in')
                              AND a.valid_from <= $2 AND (a.valid_until IS NULL OR $2 < a.valid_until)
                              AND a.amount + coalesce((SELECT sum(t.amount) FROM allocation t WHERE t.grant_id = a.id),
                                                      0) > 0) g"#,
        project as ProjectId,
        at,
        crate::domain::budget::BURN_DAYS as i32,
        pool.map(|c| c.0)
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Sums {
        allocated: r.allocated,
        pool_from: r.pool_from,
        used: r.used,
        held: r.held,
        drawn_recently: r.recent,
        ever_allocated: r.ever,
        next_end: r.next_end,
        last_end: r.last_end,
    })
}

/// A project's pools: the clusters of its scoped allocations, with their
/// names, after the general pool (`None`) when it has unscoped ones or none
/// at all.
pub async fn pools(
    conn: &mut PgConnection,
    project: ProjectId,
) -> Result<Vec<(Option<ClusterId>, Option<String>)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT DISTINCT a.cluster_id AS "cluster: ClusterId", c.name AS "name?"
             FROM allocation a LEFT JOIN cluster c ON c.id = a.cluster_id
            WHERE a.project_id = $1
            ORDER BY c.name NULLS FIRST"#,
        project as ProjectId
    )
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(vec![(None, None)]);
    }
    Ok(rows.into_iter().map(|r| (r.cluster, r.name)).collect())
}

/// The last archived month, when `at` falls inside a day (neither its first
/// instant nor its last microsecond, in the center's zone) whose draws an
/// archived month may hold: a balance cut there would miss draws the
/// archive did not keep (migration 0061).
pub async fn inside_archived_day(
    conn: &mut PgConnection,
    at: DateTime<Utc>,
) -> Result<Option<chrono::NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT l.last AS "last!"
             FROM (SELECT max(ap.period) AS last FROM archived_period ap) l CROSS JOIN center c
            WHERE l.last IS NOT NULL
              AND date_trunc('month', $1 AT TIME ZONE c.time_zone)::date <= l.last
              AND $1 <> hl_day_end(($1 AT TIME ZONE c.time_zone)::date - 1, c.time_zone)
              AND $1 + interval '1 microsecond' <> hl_day_end(($1 AT TIME ZONE c.time_zone)::date, c.time_zone)"#,
        at
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The pool a job of `project` on `cluster` draws from at `at`: the
/// cluster's own once any allocation of the project scoped to it has begun,
/// else the general pool.
pub async fn pool_for(
    conn: &mut PgConnection,
    project: ProjectId,
    cluster: ClusterId,
    at: DateTime<Utc>,
) -> Result<Option<ClusterId>, sqlx::Error> {
    let scoped = sqlx::query_scalar!(
        r#"SELECT coalesce(hl_pool_start($1, $2) <= $3, false) AS "scoped!""#,
        project as ProjectId,
        cluster as ClusterId,
        at
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(scoped.then_some(cluster))
}

/// Whether a project has an allocation entry that has begun by `at`.
pub async fn ever_allocated(
    conn: &mut PgConnection,
    project: ProjectId,
    at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM allocation a WHERE a.project_id = $1 AND a.valid_from <= $2) AS "ever!""#,
        project as ProjectId,
        at
    )
    .fetch_one(&mut *conn)
    .await
}

/// The projects that have any allocation entry, with their codes.
pub async fn budgeted_projects(conn: &mut PgConnection) -> Result<Vec<(ProjectId, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT p.id AS "id: ProjectId", p.code FROM project p
            WHERE EXISTS (SELECT 1 FROM allocation a WHERE a.project_id = p.id) ORDER BY lower(p.code)"#
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.code)).collect())
}

/// Serialise holds of one job (a hook may be called twice).
pub async fn lock_job(
    conn: &mut PgConnection,
    cluster: ClusterId,
    job: &str,
    index: Option<i32>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::bigint || '/' || $2 || '/' || coalesce($3::int, -1), 17))",
        cluster as ClusterId,
        job,
        index
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// Serialise the holds and transfers of one project: each checks the
/// balance the ones before it left (held until the transaction ends; a hold
/// takes it before [`lock_job`], a transfer before its grant's row).
pub async fn lock_project_holds(conn: &mut PgConnection, project: ProjectId) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('holds of project ' || $1::bigint, 17))")
        .bind(project.0)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A hold as stored, with what became of it at `at`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HoldRow {
    pub id: HoldId,
    pub project: String,
    pub cluster: String,
    pub job_id: String,
    pub array_index: Option<i32>,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub amount: Decimal,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// `open`, `released` (its job's charge is recorded) or `expired`.
    pub status: String,
    pub released_by_job_record: Option<i64>,
}

/// The open hold of a job at `at`, if any.
pub async fn open_hold(
    conn: &mut PgConnection,
    cluster: ClusterId,
    job: &str,
    index: Option<i32>,
    at: DateTime<Utc>,
) -> Result<Option<HoldRow>, sqlx::Error> {
    Ok(holds(conn, None, Some((cluster, job, index)), at)
        .await?
        .into_iter()
        .find(|h| h.status == "open"))
}

/// Holds of a project (or of one job), newest first, with their status at
/// `at`: released by a record of their job that ended by `at`, as balances
/// count them (`hl_hold_release_at`, migration 0051).
pub async fn holds(
    conn: &mut PgConnection,
    project: Option<ProjectId>,
    job: Option<(ClusterId, &str, Option<i32>)>,
    at: DateTime<Utc>,
) -> Result<Vec<HoldRow>, sqlx::Error> {
    let (cluster, job_id, index) = match job {
        Some((c, j, i)) => (Some(c.0), Some(j), i),
        None => (None, None, None),
    };
    sqlx::query_as!(
        HoldRow,
        r#"SELECT h.id AS "id: HoldId", p.code AS project, c.name AS cluster, h.scheduler_job_id AS job_id,
                  h.array_index, h.amount, h.created_at, h.expires_at,
                  CASE WHEN x.released IS NOT NULL THEN 'released' WHEN h.expires_at <= $5 THEN 'expired'
                       ELSE 'open' END AS "status!",
                  x.released AS released_by_job_record
             FROM hold h JOIN project p ON p.id = h.project_id JOIN cluster c ON c.id = h.cluster_id
            CROSS JOIN LATERAL (SELECT hl_hold_release_at(h, $5) AS released) x
            WHERE ($1::bigint IS NULL OR h.project_id = $1)
              AND ($2::bigint IS NULL OR (h.cluster_id = $2 AND h.scheduler_job_id = $3
                                          AND coalesce(h.array_index, -1) = coalesce($4::int, -1)))
              AND h.created_at <= $5
            ORDER BY h.id DESC"#,
        project.map(|p| p.0),
        cluster,
        job_id,
        index,
        at
    )
    .fetch_all(&mut *conn)
    .await
}

/// A new hold.
pub struct NewHold<'a> {
    pub project: ProjectId,
    pub cluster: ClusterId,
    pub job_id: &'a str,
    pub array_index: Option<i32>,
    pub amount: Decimal,
    pub request: serde_json::Value,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert_hold(conn: &mut PgConnection, h: &NewHold<'_>, author: &str) -> Result<HoldId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO hold (project_id, cluster_id, scheduler_job_id, array_index, amount, request, expires_at, author)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           RETURNING id AS "id: HoldId""#,
        h.project as ProjectId,
        h.cluster as ClusterId,
        h.job_id,
        h.array_index,
        h.amount,
        h.request,
        h.expires_at,
        author
    )
    .fetch_one(&mut *conn)
    .await
}

/// Take the sync lock of a cluster for this session, unless another sync
/// holds it (then `false`: one `slurm sync` at a time, none waiting).
pub async fn lock_sync(conn: &mut PgConnection, cluster: ClusterId) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_lock(hashtextextended('slurm sync ' || $1::bigint, 17)) AS "got!""#,
        cluster as ClusterId
    )
    .fetch_one(&mut *conn)
    .await
}

/// The accounts of a cluster whose last recorded change by `slurm sync` is
/// a block, or an unblock that failed: the only ones it may unblock (a
/// block an administrator set by hand is not its to lift). A block that
/// failed counts: `sacctmgr` may have applied it and then failed or not
/// answered in time (before, such an account stayed blocked for good, as
/// if blocked by hand).
pub async fn blocked_by_sync(conn: &mut PgConnection, cluster: ClusterId) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT account AS "account!" FROM (
               SELECT DISTINCT ON (account) account, action, succeeded FROM enforcement_action
                WHERE cluster_id = $1 ORDER BY account, id DESC) x
            WHERE action = 'block' OR NOT succeeded"#,
        cluster as ClusterId
    )
    .fetch_all(&mut *conn)
    .await
}

pub async fn unlock_sync(conn: &mut PgConnection, cluster: ClusterId) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT pg_advisory_unlock(hashtextextended('slurm sync ' || $1::bigint, 17))",
        cluster as ClusterId
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// A change `slurm sync` made.
pub struct Action<'a> {
    pub cluster: ClusterId,
    pub project: ProjectId,
    pub account: &'a str,
    pub action: &'a str,
    pub command: &'a str,
    pub remaining: Decimal,
    pub succeeded: bool,
    pub output: &'a str,
    /// For a block: the account's `GrpJobs` before it (`""`: none).
    pub previous_grpjobs: &'a str,
}

pub async fn record_action(conn: &mut PgConnection, a: &Action<'_>, author: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO enforcement_action (cluster_id, project_id, account, action, command, remaining, succeeded, output,
                                         author, previous_grpjobs)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        a.cluster as ClusterId,
        a.project as ProjectId,
        a.account,
        a.action,
        a.command,
        a.remaining,
        a.succeeded,
        a.output,
        author,
        a.previous_grpjobs
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The `GrpJobs` an account had before the last block `slurm sync` set on
/// it, applied or not as far as it knows (`""`: none, or a block recorded
/// before migration 0059).
pub async fn grpjobs_before_block(
    conn: &mut PgConnection,
    cluster: ClusterId,
    account: &str,
) -> Result<String, sqlx::Error> {
    let v: Option<String> = sqlx::query_scalar(
        "SELECT previous_grpjobs FROM enforcement_action
          WHERE cluster_id = $1 AND account = $2 AND action = 'block'
          ORDER BY id DESC LIMIT 1",
    )
    .bind(cluster.0)
    .bind(account)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(v.unwrap_or_default())
}

/// The alert thresholds, percent, ascending.
pub async fn thresholds(conn: &mut PgConnection) -> Result<Vec<Decimal>, sqlx::Error> {
    Ok(
        sqlx::query_scalar!("SELECT percent FROM alert_threshold ORDER BY percent")
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|d| d.normalize())
            .collect(),
    )
}

/// Make the alert thresholds exactly `percents`.
pub async fn set_thresholds(conn: &mut PgConnection, percents: &[Decimal]) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM alert_threshold WHERE NOT (percent = ANY($1))", percents)
        .execute(&mut *conn)
        .await?;
    sqlx::query!(
        "INSERT INTO alert_threshold (percent) SELECT unnest($1::numeric[]) ON CONFLICT DO NOTHING",
        percents
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A threshold crossed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Crossing {
    pub id: i64,
    pub project: String,
    /// The pool's cluster (`None`: the general pool).
    pub cluster: Option<String>,
    pub threshold: Decimal,
    pub pool_from: DateTime<Utc>,
    pub allocated: Decimal,
    pub used: Decimal,
    pub remaining: Decimal,
    pub crossed_at: DateTime<Utc>,
    /// Channels it was delivered to.
    pub delivered: Vec<String>,
}

/// Record the thresholds a project has crossed, once each per pool; the
/// ids of those recorded now.
#[allow(clippy::too_many_arguments)]
pub async fn record_crossings(
    conn: &mut PgConnection,
    project: ProjectId,
    pool: Option<ClusterId>,
    thresholds: &[Decimal],
    pool_from: DateTime<Utc>,
    allocated: Decimal,
    used: Decimal,
    remaining: Decimal,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO alert_crossing (project_id, threshold, pool_from, allocated, used, remaining, cluster_id)
         SELECT $1, t, $3, $4, $5, $6, $7 FROM unnest($2::numeric[]) t
         ON CONFLICT (project_id, (coalesce(cluster_id, 0)), threshold, pool_from) DO NOTHING
         RETURNING id",
        project as ProjectId,
        thresholds,
        pool_from,
        allocated,
        used,
        remaining,
        pool.map(|c| c.0)
    )
    .fetch_all(&mut *conn)
    .await
}

/// Take the alerts lock for this session, unless another run holds it.
pub async fn lock_alerts(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock(hashtextextended('hpc-ledger alerts', 17)) AS "got!""#)
        .fetch_one(&mut *conn)
        .await
}

pub async fn unlock_alerts(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_unlock(hashtextextended('hpc-ledger alerts', 17))")
        .fetch_one(&mut *conn)
        .await?;
    Ok(())
}

/// Every crossing, newest first, with the channels it reached.
pub async fn crossings(conn: &mut PgConnection) -> Result<Vec<Crossing>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT a.id, p.code, c.name AS "cluster?", a.threshold, a.pool_from, a.allocated, a.used, a.remaining, a.crossed_at,
                  coalesce((SELECT array_agg(DISTINCT d.channel) FROM alert_delivery d
                             WHERE d.crossing_id = a.id AND d.succeeded), '{}') AS "delivered!"
             FROM alert_crossing a JOIN project p ON p.id = a.project_id LEFT JOIN cluster c ON c.id = a.cluster_id
            ORDER BY a.id DESC"#
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Crossing {
            id: r.id,
            project: r.code,
            cluster: r.cluster,
            threshold: r.threshold.normalize(),
            pool_from: r.pool_from,
            allocated: r.allocated,
            used: r.used,
            remaining: r.remaining,
            crossed_at: r.crossed_at,
            delivered: r.delivered,
        })
        .collect())
}

pub async fn record_delivery(
    conn: &mut PgConnection,
    crossing: i64,
    channel: &str,
    succeeded: bool,
    detail: &str,
) -> Result<(), sqlx::Error> {
    let detail: String = detail.chars().take(2000).collect();
    sqlx::query!(
        "INSERT INTO alert_delivery (crossing_id, channel, succeeded, detail) VALUES ($1, $2, $3, $4)",
        crossing,
        channel,
        succeeded,
        detail
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}
