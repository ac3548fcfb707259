//! `slurm sync`: bring each budgeted project's Slurm account in line with
//! its balance through `sacctmgr` (docs/budgets.md, docs/slurm.md). A
//! project at or below the floor gets `GrpJobs=0`: its queued and new jobs
//! stay pending (`AssocGrpJobsLimit` in `squeue`), running jobs are never
//! killed; a project with money again gets the `GrpJobs` it had before
//! the block (kept with the block; `-1`, none, without one). The accounts'
//! state is read first, so nothing changes when nothing must, and running
//! it from cron every minute is safe; every change is recorded.

use std::path::PathBuf;
use tokio::process::Command;

use chrono::Utc;
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::budget as bdb;
use crate::db::{DbError, reference};
use crate::domain::budget::{Balance, Enforce, enforcement, should_block};

#[derive(Debug, thiserror::Error)]
pub enum EnforceError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Sacctmgr(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for EnforceError {
    fn from(e: sqlx::Error) -> Self {
        EnforceError::Db(e.into())
    }
}

/// What to sync.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The ledger's cluster.
    pub cluster: String,
    /// Its name in Slurm (`ClusterName`); default: the ledger's.
    pub slurm_cluster: Option<String>,
    /// Block an account whose remaining balance is at or below this.
    pub floor: Decimal,
    /// Say what would change; change nothing.
    pub dry_run: bool,
    /// The `sacctmgr` to run.
    pub sacctmgr: PathBuf,
}

/// One change of an account.
#[derive(Debug, Clone, Serialize)]
pub struct SyncAction {
    pub project: String,
    pub account: String,
    pub action: Enforce,
    pub remaining: Decimal,
    /// The command, as run (or as it would be run).
    pub command: String,
    /// `None` in a dry run.
    pub succeeded: Option<bool>,
    pub output: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SyncReport {
    pub cluster: String,
    pub dry_run: bool,
    /// Budgeted projects looked at.
    pub projects: usize,
    /// Of those, blocked (or to be) now.
    pub blocked: usize,
    pub actions: Vec<SyncAction>,
    /// Budgeted projects that have no account in Slurm.
    pub no_account: Vec<String>,
    /// Accounts blocked in Slurm, not by the ledger: left alone.
    pub blocked_by_hand: Vec<String>,
}

/// How long one sacctmgr call may take (a hung slurmdbd must not pile up
/// syncs started by cron).
const SACCTMGR_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

async fn run(sacctmgr: &PathBuf, args: &[String]) -> Result<(bool, String), EnforceError> {
    let child = Command::new(sacctmgr)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| EnforceError::Sacctmgr(format!("cannot run {}: {e}", sacctmgr.display())))?;
    let out = tokio::time::timeout(SACCTMGR_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            EnforceError::Sacctmgr(format!(
                "sacctmgr did not answer within {} s",
                SACCTMGR_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| EnforceError::Sacctmgr(format!("running {}: {e}", sacctmgr.display())))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text.trim().chars().take(4000).collect()))
}

/// Slurm accounts on `cluster`, whether each is blocked (`GrpJobs=0` on
/// its account association, the row with no user), and its `GrpJobs` as
/// shown (`""`: no limit).
async fn accounts(
    sacctmgr: &PathBuf,
    cluster: &str,
) -> Result<std::collections::HashMap<String, (bool, String)>, EnforceError> {
    // One argument per word, as a shell would split them (sacctmgr reads
    // `where cluster=X` as two).
    let args: Vec<String> = ["-n", "-P", "show", "assoc", "where"]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("cluster={cluster}"), "format=account,user,grpjobs".into()])
        .collect();
    let (ok, text) = run(sacctmgr, &args).await?;
    if !ok {
        return Err(EnforceError::Sacctmgr(format!("sacctmgr show assoc failed: {text}")));
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() >= 3 && f[1].is_empty() && !f[0].is_empty())
                .then(|| (f[0].to_owned(), (f[2].trim() == "0", f[2].trim().to_owned())))
        })
        .collect())
}

/// Bring every budgeted project's account in line (see the module docs).
pub async fn slurm_sync(pool: &PgPool, o: &SyncOptions, author: &str) -> Result<SyncReport, EnforceError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let catalog = reference::load_catalog(&mut conn).await?;
    let cluster = catalog.cluster(&o.cluster).ok_or_else(|| {
        EnforceError::Invalid(format!(
            "unknown cluster {:?} ({})",
            o.cluster,
            catalog.clusters_known(&o.cluster)
        ))
    })?;
    let slurm_cluster = o.slurm_cluster.clone().unwrap_or_else(|| cluster.name.to_lowercase());
    // One sync at a time: another one running, this one stops (cron every
    // minute is safe; none waits).
    if !bdb::lock_sync(&mut conn, cluster.id).await? {
        return Err(EnforceError::Invalid(format!(
            "another slurm sync of {} is running; nothing done",
            cluster.name
        )));
    }
    let result = sync_locked(&mut conn, o, cluster.id, &cluster.name, &slurm_cluster, author).await;
    let _ = bdb::unlock_sync(&mut conn, cluster.id).await;
    result
}

async fn sync_locked(
    conn: &mut sqlx::PgConnection,
    o: &SyncOptions,
    cluster_id: crate::ids::ClusterId,
    cluster_name: &str,
    slurm_cluster: &str,
    author: &str,
) -> Result<SyncReport, EnforceError> {
    let current = accounts(&o.sacctmgr, slurm_cluster).await?;
    let ours = bdb::blocked_by_sync(conn, cluster_id).await?;
    let now = Utc::now();
    let cluster_id_ = cluster_id;
    let mut report = SyncReport {
        cluster: cluster_name.to_owned(),
        dry_run: o.dry_run,
        projects: 0,
        blocked: 0,
        actions: Vec::new(),
        no_account: Vec::new(),
        blocked_by_hand: Vec::new(),
    };
    {
        for (id, code) in bdb::budgeted_projects(&mut *conn).await? {
            // The pool this cluster's jobs draw from.
            let pool = bdb::pool_for(&mut *conn, id, cluster_id, now).await?;
            let balance = Balance::new(now, bdb::sums(&mut *conn, id, pool, now).await?);
            // Slurm keeps account names in lower case.
            let account = code.to_lowercase();
            // A project not budgeted on this cluster is left alone, but for
            // a block this sync set while it was (its scoped grant since
            // taken back whole): that is lifted, or its jobs would stay
            // pending for good while `check` lets them start.
            if !balance.budgeted && !ours.contains(&account) {
                continue;
            }
            report.projects += usize::from(balance.budgeted);
            let block = balance.budgeted && should_block(&balance, o.floor);
            report.blocked += usize::from(block);
            let Some(action) = enforcement(block, current.get(&account).map(|(blocked, _)| *blocked)) else {
                if balance.budgeted && !current.contains_key(&account) {
                    report.no_account.push(code);
                }
                continue;
            };
            if action == Enforce::Unblock && !ours.contains(&account) {
                report.blocked_by_hand.push(code);
                continue;
            }
            // A block keeps the account's limit before it; its unblock sets
            // that limit again (`-1`: none), not none whatever it was.
            let previous = match action {
                Enforce::Block => current
                    .get(&account)
                    .map(|(_, g)| g.clone())
                    .filter(|g| !g.is_empty() && g.len() <= 18 && g.bytes().all(|b| b.is_ascii_digit()))
                    .unwrap_or_default(),
                Enforce::Unblock => String::new(),
            };
            let value = match action {
                Enforce::Block => "0".to_owned(),
                Enforce::Unblock => {
                    let before = bdb::grpjobs_before_block(&mut *conn, cluster_id, &account).await?;
                    if before.is_empty() || before == "0" {
                        "-1".to_owned()
                    } else {
                        before
                    }
                }
            };
            let args: Vec<String> = vec![
                "-i".into(),
                "modify".into(),
                "account".into(),
                "where".into(),
                format!("name={account}"),
                format!("cluster={slurm_cluster}"),
                "set".into(),
                format!("GrpJobs={value}"),
            ];
            let command = format!("sacctmgr {}", args.join(" "));
            let (succeeded, output) = if o.dry_run {
                (None, String::new())
            } else {
                // Recorded whatever came of it: a call that failed or did not
                // answer may have changed the account all the same.
                let (ok, out, failed) = match run(&o.sacctmgr, &args).await {
                    Ok((ok, out)) => (ok, out, None),
                    Err(e) => (false, e.to_string().chars().take(4000).collect(), Some(e)),
                };
                bdb::record_action(
                    &mut *conn,
                    &bdb::Action {
                        cluster: cluster_id_,
                        project: id,
                        account: &account,
                        action: if action == Enforce::Block { "block" } else { "unblock" },
                        command: &command,
                        remaining: balance.remaining,
                        succeeded: ok,
                        output: &out,
                        previous_grpjobs: &previous,
                    },
                    author,
                )
                .await?;
                if let Some(e) = failed {
                    return Err(e);
                }
                (Some(ok), out)
            };
            report.actions.push(SyncAction {
                project: code,
                account,
                action,
                remaining: balance.remaining,
                command,
                succeeded,
                output,
            });
        }
    }
    Ok(report)
}
