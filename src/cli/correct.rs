//! `hpc-ledger reverse`, `refund` and `adjust`: corrections, never edits.

use std::process::ExitCode;

use anyhow::bail;
use chrono::Utc;
use rust_decimal::Decimal;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::domain::period::Month;
use crate::ids::LedgerEntryId;
use crate::service::config::time_zone;
use crate::service::correct::{Correction, Posted, RefundBy, Target as What, Why, adjust, refund, reverse};

/// Which charges: one entry, or a job.
#[derive(Debug, clap::Args)]
pub struct Which {
    /// A ledger entry id.
    #[arg(long, conflicts_with_all = ["cluster", "job_id"])]
    entry: Option<i64>,
    /// The job's cluster.
    #[arg(long, requires = "job_id")]
    cluster: Option<String>,
    /// The job's scheduler id (without the array index).
    #[arg(long, requires = "cluster")]
    job_id: Option<String>,
    /// The array task's index, for an array job.
    #[arg(long, requires = "job_id")]
    array_index: Option<u32>,
    /// The run's start, when the job was requeued (several runs).
    #[arg(long, requires = "job_id")]
    start: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct Common {
    /// Why (recorded with the entry and shown on the statement).
    #[arg(long)]
    reason: String,
    /// The open month to post into. Default: for a reversal or refund, the
    /// month of what it corrects if open, else the first open month; for an
    /// adjustment, the month that last ended if open (the month being
    /// closed), else the first open month after it.
    #[arg(long)]
    month: Option<Month>,
    /// Post it even though an identical correction (same kind, charges or
    /// project, amounts and reason) was posted before.
    #[arg(long)]
    again: bool,
    /// Post it at most once: run again with the same key, it shows what it
    /// posted the first time and posts nothing (for scripts that retry).
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Debug, clap::Args)]
pub struct ReverseArgs {
    #[command(flatten)]
    which: Which,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, clap::Args)]
pub struct RefundArgs {
    #[command(flatten)]
    which: Which,
    /// The share of each charge to refund, e.g. 0.5.
    #[arg(
        long,
        conflicts_with = "amount",
        required_unless_present = "amount",
        allow_negative_numbers = true
    )]
    fraction: Option<Decimal>,
    /// The amount to refund (against one charge).
    #[arg(long, allow_negative_numbers = true)]
    amount: Option<Decimal>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, clap::Args)]
pub struct AdjustArgs {
    /// The project's code.
    #[arg(long)]
    project: String,
    /// The amount: negative for a credit, positive for a debit.
    #[arg(long, allow_hyphen_values = true)]
    amount: Decimal,
    #[command(flatten)]
    common: Common,
}

async fn what(which: &Which, target: &Target) -> anyhow::Result<What> {
    match (which.entry, &which.cluster, &which.job_id) {
        (Some(id), _, _) => Ok(What::Entry(LedgerEntryId(id))),
        (None, Some(cluster), Some(job_id)) => {
            let start = match &which.start {
                Some(s) => {
                    let pool = target.open_configured().await?;
                    Some(super::instant(Some(s), time_zone(&pool).await?)?)
                }
                None => None,
            };
            Ok(What::Job {
                cluster: cluster.clone(),
                job_id: job_id.clone(),
                array_index: which.array_index,
                start,
            })
        }
        _ => bail!("name the charges: --entry ID, or --cluster C --job-id J"),
    }
}

fn why(c: &Common, author: &str) -> Why {
    Why {
        author: author.to_owned(),
        reason: c.reason.clone(),
        month: c.month,
        again: c.again,
        key: c.idempotency_key.clone(),
    }
}

fn print(c: &Correction, format: Format) -> anyhow::Result<()> {
    let posted: &[Posted] = &c.entries;
    match format {
        Format::Json => print_json(c)?,
        Format::Text => {
            if let Some(key) = &c.already_posted_with_key {
                println!("already posted with idempotency key {key:?}; nothing new posted:");
            }
            let rows: Vec<Vec<String>> = posted
                .iter()
                .map(|p| {
                    vec![
                        p.id.to_string(),
                        p.kind.to_string(),
                        p.corrects.map_or(String::new(), |c| format!("entry {c}")),
                        p.period.to_string(),
                        p.metric.map_or("", |m| m.as_str()).to_owned(),
                        p.quantity.normalize().to_string(),
                        format!("{:.2}", p.amount),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::render(
                    &["entry", "kind", "corrects", "month", "metric", "quantity", "amount"],
                    &rows
                )
            );
            let total: Decimal = posted.iter().map(|p| p.amount).sum();
            println!("total {total:.2}");
        }
    }
    Ok(())
}

pub async fn run_reverse(a: ReverseArgs, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let w = what(&a.which, target).await?;
    let pool = target.open_configured().await?;
    let posted = reverse(&pool, &w, &why(&a.common, author), Utc::now()).await?;
    print(&posted, a.common.format)?;
    Ok(ExitCode::SUCCESS)
}

pub async fn run_refund(a: RefundArgs, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let w = what(&a.which, target).await?;
    let by = match (a.fraction, a.amount) {
        (Some(f), None) => RefundBy::Fraction(f),
        (None, Some(x)) => RefundBy::Amount(x),
        _ => bail!("give --fraction or --amount"),
    };
    let pool = target.open_configured().await?;
    let posted = refund(&pool, &w, by, &why(&a.common, author), Utc::now()).await?;
    print(&posted, a.common.format)?;
    Ok(ExitCode::SUCCESS)
}

pub async fn run_adjust(a: AdjustArgs, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let posted = adjust(&pool, &a.project, a.amount, &why(&a.common, author), Utc::now()).await?;
    print(&posted, a.common.format)?;
    Ok(ExitCode::SUCCESS)
}
