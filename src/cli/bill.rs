//! `hpc-ledger bill …`: the monthly storage billing run, and past runs.

use std::fmt::Write as _;
use std::process::ExitCode;

use chrono::Utc;
use clap::Subcommand;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::domain::period::Month;
use crate::service::storage::{BillOutcome, BillState, bill, runs};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Bill every project's storage quota for a month that is over (idempotent).
    Storage {
        /// The month, YYYY-MM.
        #[arg(long)]
        month: Month,
        /// Show what would be posted, post nothing (also for a month not over yet).
        #[arg(long)]
        dry_run: bool,
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// List the billing runs: when, by whom, how many projects, the total.
    Runs {
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

pub async fn run(cmd: Cmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    match cmd {
        Cmd::Storage { month, dry_run, format } => {
            let outcome = bill(&pool, month, author, dry_run, Utc::now()).await?;
            match format {
                Format::Json => print_json(&outcome)?,
                Format::Text => print!("{}", render(&outcome)),
            }
        }
        Cmd::Runs { format } => {
            let runs = runs(&pool).await?;
            match format {
                Format::Json => print_json(&runs)?,
                Format::Text => {
                    let rows: Vec<Vec<String>> = runs
                        .iter()
                        .map(|r| {
                            vec![
                                r.id.to_string(),
                                r.kind.clone(),
                                Month::of_date(r.period).to_string(),
                                r.run_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                                r.author.clone(),
                                r.project_count.to_string(),
                                r.entry_count.to_string(),
                                format!("{:.2}", r.total),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table::render(
                            &["run", "kind", "month", "run at", "by", "projects", "entries", "total"],
                            &rows
                        )
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn render(o: &BillOutcome) -> String {
    let mut out = String::new();
    match &o.state {
        BillState::Posted { run } => {
            let _ = writeln!(out, "storage for {} billed (run {run})", o.month);
        }
        BillState::AlreadyBilled { run } => {
            let _ = writeln!(
                out,
                "storage for {} was already billed (run {}, {} by {}); nothing posted",
                o.month,
                run.id,
                run.run_at.format("%Y-%m-%d %H:%M UTC"),
                run.author
            );
        }
        BillState::DryRun { month_over } => {
            let _ = writeln!(
                out,
                "storage for {}: dry run, nothing posted{}",
                o.month,
                if *month_over {
                    ""
                } else {
                    " (the month is not over: a preview)"
                }
            );
        }
    }
    let _ = writeln!(
        out,
        "projects: {}, entries: {}, total: {:.2}",
        o.project_count, o.entry_count, o.total
    );
    if !o.projects.is_empty() {
        let mut rows = Vec::new();
        for p in &o.projects {
            for l in &p.charge.lines {
                let days: Vec<String> = l
                    .segments
                    .iter()
                    .map(|s| format!("{} d × {} TB", s.days, s.quota_tb.normalize()))
                    .collect();
                rows.push(vec![
                    p.project.clone(),
                    days.join(" + "),
                    l.tb_days.normalize().to_string(),
                    l.priced.quantity.normalize().to_string(),
                    l.priced.unit_rate.normalize().to_string(),
                    format!("{:.2}", l.priced.amount),
                ]);
            }
        }
        out.push('\n');
        out.push_str(&table::render(
            &["project", "days × quota", "TB-days", "TB-months", "rate", "amount"],
            &rows,
        ));
    }
    out
}
