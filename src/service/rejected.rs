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
    #[error(
        "rejection {0} is not open (unknown, or already resolved or dismissed): `hpc-ledger rejected --all` lists every one"
    )]
    NotOpenOne(i64),
    #[error(
        "rejection {id} is {kind}, not an unknown project: only a record whose account is unknown can be reassigned"
    )]
    NotUnknownProject { id: i64, kind: String },
    #[error("unknown project {0}: reassign to a project of the center's configuration")]
    UnknownProject(String),
    #[error("rejection {id} cannot be read again: {reason}")]
    Unreadable { id: i64, reason: String },
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
        let page = rejected::list(&mut conn, after, 10_000, all, &[]).await?;
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
    let mut tx = crate::db::begin(pool).await?;
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

/// A reassignment as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reassigned {
    pub rejection: i64,
    pub job: Option<String>,
    /// The account the record names.
    pub from_account: Option<String>,
    pub project: String,
    pub reassignment: i64,
}

/// Charge an open rejection for an unknown project (a mistyped account) to
/// `project`: the decision is kept with who and why (migration 0025), the
/// raw record as it was; recording it is then a retry of that rejection
/// (the recorder applies the reassignment whenever the record is read).
pub async fn reassign(
    pool: &PgPool,
    id: i64,
    project: &str,
    author: &str,
    reason: &str,
) -> Result<Reassigned, RejectedError> {
    if reason.trim().is_empty() {
        return Err(RejectedError::NoReason);
    }
    let mut tx = crate::db::begin(pool).await?;
    let result = async {
        let r = rejected::open_one(&mut tx, id)
            .await?
            .ok_or(RejectedError::NotOpenOne(id))?;
        if r.kind != RejectKind::UnknownProject.as_str() {
            return Err(RejectedError::NotUnknownProject { id, kind: r.kind });
        }
        let target = crate::service::project(&mut tx, project)
            .await?
            .map_err(RejectedError::UnknownProject)?;
        let options: crate::ingest::ReadOptions = serde_json::from_value(r.read_options.clone()).unwrap_or_default();
        let from_account = match crate::ingest::reread(r.source_format, &options, &r.raw, r.raw_bytes.as_deref()) {
            Ok(crate::ingest::Item::Job(job)) => job.project.clone(),
            Ok(_) => None,
            Err(reason) => return Err(RejectedError::Unreadable { id, reason }),
        };
        let hash = rejected::raw_sha256(&mut tx, id).await?;
        let reassignment = rejected::insert_reassignment(
            &mut tx,
            id,
            r.source_format,
            &hash,
            from_account.as_deref(),
            target.id,
            author,
            reason.trim(),
        )
        .await?;
        Ok(Reassigned {
            rejection: id,
            job: r.job_key,
            from_account,
            project: target.code,
            reassignment,
        })
    }
    .await;
    super::finish(tx, result).await
}
