//! Use cases. Each one: open a transaction, load what it needs, decide with
//! the pure domain, persist, commit.

pub mod archive;
pub mod budget;
pub mod close;
pub mod config;
pub mod correct;
pub mod deep;
pub mod enforce;
pub mod explain;
pub mod follow;
pub mod import;
pub mod journal;
pub mod quote;
pub mod record;
pub mod rejected;
pub mod statement;
pub mod storage;
pub mod usage;
pub mod web;

use sqlx::{Postgres, Transaction};

use crate::db::DbError;

/// A project by code (ignoring case); when there is none, `Err` holds the
/// code as the error shows it, with the closest known code suggested:
/// `"PAS1243" (did you mean PAS1234?)`.
pub(crate) async fn project(
    conn: &mut sqlx::PgConnection,
    code: &str,
) -> Result<Result<crate::db::reference::ProjectRow, String>, sqlx::Error> {
    if let Some(p) = crate::db::reference::load_projects(conn, &[code.to_owned()])
        .await?
        .pop()
    {
        return Ok(Ok(p));
    }
    let codes = crate::db::reference::all_project_codes(conn).await?;
    Ok(Err(format!(
        "{code:?}{}",
        crate::domain::names::did_you_mean(code, codes.iter().map(String::as_str))
    )))
}

/// Run `step` on every month from `first` (`through` when there is none, or
/// when it is later) through `through`, in order, stopping at the first
/// error: what was done, and that error. Month end in one pass (`bill
/// storage --through`, `close --through`).
pub(crate) async fn month_by_month<T, E, Fut>(
    first: Option<crate::domain::period::Month>,
    through: crate::domain::period::Month,
    mut step: impl FnMut(crate::domain::period::Month) -> Fut,
) -> (Vec<T>, Option<E>)
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut done = Vec::new();
    let mut month = first.map_or(through, |f| f.min(through));
    loop {
        match step(month).await {
            Ok(t) => done.push(t),
            Err(e) => return (done, Some(e)),
        }
        if month >= through {
            return (done, None);
        }
        month = month.next();
    }
}

/// Serialise an optional error as its message (`null` when there is none):
/// a batch that stops at a problem reports it in JSON too.
pub fn error_text<S: serde::Serializer, E: std::fmt::Display>(e: &Option<E>, s: S) -> Result<S::Ok, S::Error> {
    match e {
        Some(e) => s.serialize_some(&e.to_string()),
        None => s.serialize_none(),
    }
}

/// End a use case's transaction: commit when it succeeded, roll back at once
/// when it failed. (A transaction that is merely dropped keeps its locks until
/// its connection is used again.)
pub async fn finish<T, E: From<sqlx::Error>>(tx: Transaction<'static, Postgres>, result: Result<T, E>) -> Result<T, E> {
    match result {
        Ok(v) => {
            tx.commit().await?;
            Ok(v)
        }
        Err(e) => {
            // The error being reported matters more than a failed rollback;
            // the connection is discarded then anyway.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

/// The name recorded as the author of a change: `--author`, else the OS user.
pub fn author(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|a| !a.trim().is_empty())
        .or_else(|| {
            let out = std::process::Command::new("id").arg("-un").output().ok()?;
            let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (out.status.success() && !name.is_empty()).then_some(name)
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

pub use crate::db::errors::guard_message;

impl From<sqlx::Error> for config::ApplyError {
    fn from(e: sqlx::Error) -> Self {
        match guard_message(&e) {
            Some(m) => config::ApplyError::Refused(vec![m]),
            None => config::ApplyError::Db(DbError::Sql(e)),
        }
    }
}

/// Fold the rollups of the closed months not folded yet
/// ([`crate::db::fold_rollups`]): after a close, outside its lock, and
/// after bulk writes and now and then in `serve`, for a month whose fold
/// did not happen. Best effort, like [`refresh_statistics`]: a month not
/// folded reads the same sums from more rows, and the next call folds it.
pub async fn fold_rollups(pool: &sqlx::PgPool) {
    let result = async {
        let mut conn = pool.acquire().await?;
        crate::db::fold_rollups(&mut conn).await
    }
    .await;
    match result {
        Ok(0) => {}
        Ok(n) => tracing::debug!(months = n, "closed months' rollups folded"),
        Err(e) => tracing::warn!("folding closed months' rollups failed: {e}"),
    }
}

/// How often `serve` folds closed months' rollups (a month whose fold after
/// its close failed, or was closed by another process, waits no longer).
pub const FOLD_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Bring the planner's statistics up to date after a bulk write: the
/// tables due ([`crate::db::stale_tables`]) analyzed two at a time, each on
/// a pooled connection, largest first. Best effort:
/// what was written is committed already, and stale statistics only make
/// queries slower, so a failure is logged, not reported as the use case's
/// failure.
pub async fn refresh_statistics(pool: &sqlx::PgPool, written: &[(&str, u64)]) {
    let result = async {
        let due = {
            let mut conn = pool.acquire().await?;
            crate::db::stale_tables(&mut conn, written).await?
        };
        let next = std::sync::atomic::AtomicUsize::new(0);
        let analyzer = || async {
            let mut done = Vec::new();
            while let Some(table) = due.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                let mut conn = pool.acquire().await?;
                if crate::db::analyze(&mut conn, table).await? {
                    done.push(table.as_str());
                }
            }
            Ok::<_, sqlx::Error>(done)
        };
        // Two at once: ANALYZE sorts each column of its 30,000-row sample
        // on one core, and a small server has two (migration 0045).
        let (a, b) = tokio::join!(analyzer(), analyzer());
        let mut done = a?;
        done.extend(b?);
        Ok::<_, sqlx::Error>(done.join(", "))
    }
    .await;
    match result {
        Ok(done) if !done.is_empty() => tracing::debug!(tables = %done, "statistics refreshed"),
        Ok(_) => {}
        Err(e) => tracing::warn!("refreshing the planner's statistics failed: {e}"),
    }
}
