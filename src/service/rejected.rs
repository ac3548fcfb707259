//! The records that could not be charged: listing them, and dismissing the
//! ones that never will be (a junk file, a test job), with who and why. A
//! dismissal is kept for the audit trail, never deleted (migration 0013).

use sqlx::PgPool;

pub use crate::db::rejected::Selection;
use crate::db::rejected::{self, Dismissed, Rejected};
use crate::domain::posting::RejectKind;
use crate::ingest::Format;

#[derive(Debug, thiserror::Error)]
pub enum RejectedError {
    #[error("name what to dismiss: rejection ids, or --file, --source or --kind")]
    NothingSelected,
    #[error("give a reason (--reason): a dismissal is kept for the audit trail with who and why")]
    NoReason,
    #[error("unknown kind {0:?} (known: {1})")]
    UnknownKind(String, String),
    #[error("unknown source format {0:?} (known: slurm, pbs, jsonl, jobcomp, json, cli)")]
    UnknownSource(String),
    #[error("{} {} not an open rejection (unknown, or already resolved or dismissed): nothing was dismissed", plural_ids(.0), if .0.len() == 1 { "is" } else { "are" })]
    NotOpen(Vec<i64>),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

fn plural_ids(ids: &[i64]) -> String {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!(
        "{} {}",
        if ids.len() == 1 { "rejection" } else { "rejections" },
        list.join(", ")
    )
}

/// Every rejection (open ones only unless `all`), oldest first.
pub async fn list(pool: &PgPool, all: bool) -> Result<Vec<Rejected>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = rejected::list(&mut conn, after, 10_000, all).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        rows.extend(page);
    }
    Ok(rows)
}

/// Dismiss the open rejections `selection` names: all or nothing when ids
/// are named. With `dry_run`, what would be dismissed, and nothing changes.
pub async fn dismiss(
    pool: &PgPool,
    selection: &Selection,
    author: &str,
    reason: &str,
    dry_run: bool,
) -> Result<Vec<Dismissed>, RejectedError> {
    if selection.ids.is_empty()
        && selection.file.is_none()
        && selection.source_format.is_none()
        && selection.kind.is_none()
    {
        return Err(RejectedError::NothingSelected);
    }
    if reason.trim().is_empty() {
        return Err(RejectedError::NoReason);
    }
    if let Some(k) = &selection.kind
        && RejectKind::parse(k).is_none()
    {
        let known: Vec<&str> = RejectKind::ALL.iter().map(|k| k.as_str()).collect();
        return Err(RejectedError::UnknownKind(k.clone(), known.join(", ")));
    }
    if let Some(f) = &selection.source_format
        && Format::parse(f).is_none()
        && !matches!(f.as_str(), "json" | "cli")
    {
        return Err(RejectedError::UnknownSource(f.clone()));
    }
    let mut tx = pool.begin().await?;
    let result = async {
        if !selection.ids.is_empty() {
            let missing = rejected::not_open(&mut tx, &selection.ids).await?;
            if !missing.is_empty() {
                return Err(RejectedError::NotOpen(missing));
            }
        }
        Ok(rejected::dismiss(&mut tx, selection, author, reason.trim()).await?)
    }
    .await;
    if dry_run {
        let _ = tx.rollback().await;
        return result;
    }
    super::finish(tx, result).await
}
