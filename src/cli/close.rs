//! `hpc-ledger close`, `verify` and `audit`: closing a month, checking the
//! seals, and checking every charge again in SQL.

use std::process::ExitCode;

use chrono::Utc;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::domain::period::Month;
use crate::service::author;
use crate::service::close::{AuditReport, audit, close, verify};

/// Exit code of `verify` and `audit` when they find something.
pub const EXIT_FINDINGS: u8 = 5;

#[derive(Debug, clap::Args)]
pub struct CloseArgs {
    /// The month, YYYY-MM: the month after the last closed one, over, with its storage billed.
    #[arg(long)]
    month: Month,
    #[arg(long)]
    author: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run_close(args: CloseArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open().await?;
    let o = close(&pool, args.month, &author(args.author.as_deref()), Utc::now()).await?;
    match args.format {
        Format::Json => print_json(&o)?,
        Format::Text => {
            if o.closed_now {
                println!(
                    "{} closed by {}: {} entries, total {:.2}",
                    o.month, o.closed_by, o.entry_count, o.total
                );
            } else {
                println!(
                    "{} was already closed ({} by {}): {} entries, total {:.2}",
                    o.month,
                    o.closed_at.format("%Y-%m-%d %H:%M UTC"),
                    o.closed_by,
                    o.entry_count,
                    o.total
                );
            }
            println!("seal (sha256-chain-v1): {}", o.seal);
            if !o.statements.is_empty() {
                let rows: Vec<Vec<String>> = o
                    .statements
                    .iter()
                    .map(|(p, n, t)| vec![n.to_string(), p.clone(), format!("{t:.2}")])
                    .collect();
                print!("{}", table::render(&["statement", "project", "total"], &rows));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Only this month (default: every closed month).
    #[arg(long)]
    month: Option<Month>,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run_verify(args: VerifyArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open().await?;
    let checks = verify(&pool, args.month).await?;
    let broken = checks.iter().filter(|c| !c.holds()).count();
    match args.format {
        Format::Json => print_json(&checks)?,
        Format::Text => {
            for c in &checks {
                let month = Month::of_date(c.period);
                if c.holds() {
                    println!("{month}: seal holds ({} entries, total {:.2})", c.entries, c.total);
                } else {
                    println!("{month}: SEAL BROKEN");
                    println!(
                        "  recorded   {} ({} entries, total {:.2})",
                        c.recorded_seal, c.recorded_entries, c.recorded_total
                    );
                    println!(
                        "  recomputed {} ({} entries, total {:.2})",
                        c.recomputed_seal, c.entries, c.total
                    );
                }
            }
            if checks.is_empty() {
                println!("no month is closed");
            }
        }
    }
    Ok(if broken > 0 {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run_audit(args: AuditArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open().await?;
    let report = audit(&pool).await?;
    match args.format {
        Format::Json => print_json(&report)?,
        Format::Text => print!("{}", render(&report)),
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FINDINGS)
    })
}

pub fn render(r: &AuditReport) -> String {
    let mut o = String::new();
    if r.discrepancies.is_empty() {
        o.push_str("every charge recomputed in SQL matches the ledger\n");
    } else {
        o.push_str(&format!(
            "{} discrepanc{} between SQL and the ledger:\n",
            r.discrepancies.len(),
            if r.discrepancies.len() == 1 { "y" } else { "ies" }
        ));
        let rows: Vec<Vec<String>> = r
            .discrepancies
            .iter()
            .map(|d| {
                vec![
                    d.entry_id.map_or(String::new(), |e| e.to_string()),
                    d.kind.clone(),
                    d.period.map_or(String::new(), |p| Month::of_date(p).to_string()),
                    d.project.clone().unwrap_or_default(),
                    d.field.clone(),
                    d.expected.clone().unwrap_or_default(),
                    d.recorded.clone().unwrap_or_default(),
                ]
            })
            .collect();
        o.push_str(&table::render(
            &[
                "entry",
                "kind",
                "month",
                "project",
                "field",
                "expected (SQL)",
                "recorded",
            ],
            &rows,
        ));
    }
    let x = &r.rejections;
    if x.open + x.dismissed + x.unverified > 0 {
        let since = x
            .oldest_open
            .map(|t| format!(" (the oldest first seen {})", t.format("%Y-%m-%d")))
            .unwrap_or_default();
        o.push_str(&format!(
            "rejections: {} open, not charged{since}; {} dismissed; {} resolved before resolutions were proven (`hpc-ledger rejected --all`)\n",
            x.open, x.dismissed, x.unverified
        ));
    }
    let broken: Vec<_> = r.seals.iter().filter(|s| !s.holds()).collect();
    if broken.is_empty() {
        o.push_str(&format!("{} closed month(s): every seal holds\n", r.seals.len()));
    } else {
        for s in broken {
            o.push_str(&format!(
                "{}: SEAL BROKEN (recorded {}, recomputed {})\n",
                Month::of_date(s.period),
                s.recorded_seal,
                s.recomputed_seal
            ));
        }
    }
    o
}
