//! `hpc-ledger bill …`: the monthly storage billing run, and past runs.

use std::fmt::Write as _;
use std::process::ExitCode;

use chrono::Utc;
use clap::Subcommand;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::domain::period::Month;
use crate::service::storage::{BillOutcome, BillState, bill, bill_through, runs, waive, waive_through};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Bill every project's storage quota for a month that is over (idempotent).
    ///
    /// Examples:
    ///   hpc-ledger bill storage --month 2026-10 --dry-run
    ///   hpc-ledger bill storage --through 2026-10     # every unbilled month up to October, in order
    ///   hpc-ledger bill storage --month 2026-03 --waive "storage free during the pilot"
    ///   hpc-ledger bill storage --through 2026-06 --waive "before the ledger started"
    #[command(verbatim_doc_comment)]
    Storage {
        /// The month, YYYY-MM.
        #[arg(long, required_unless_present = "through", conflicts_with = "through")]
        month: Option<Month>,
        /// Bill every month from the first open one through this one, in
        /// order, skipping months already billed or waived, stopping at the
        /// first problem.
        #[arg(long, value_name = "MONTH")]
        through: Option<Month>,
        /// Show what would be posted, post nothing (also for a month not over yet).
        #[arg(long, conflicts_with = "waive")]
        dry_run: bool,
        /// Do not bill this month's storage: record the decision with this
        /// reason (kept for good, shown to auditors). A waived month counts as
        /// billed for closing. With --through: every month from the first open
        /// one through that one that is not billed yet.
        #[arg(long, value_name = "REASON")]
        waive: Option<String>,
        /// How to print it: text for people, json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// List the billing runs: when, by whom, how many projects, the total.
    ///
    /// Example:
    ///   hpc-ledger bill runs --format json
    #[command(verbatim_doc_comment)]
    Runs {
        /// How to print it: text for people, csv or json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: super::ListFormat,
    },
}

pub async fn run(cmd: Cmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = crate::service::config::time_zone(&pool).await?;
    match cmd {
        Cmd::Storage {
            month: Some(month),
            waive: Some(reason),
            format,
            ..
        } => {
            let o = waive(&pool, month, &reason, author, Utc::now()).await?;
            match format {
                Format::Json => print_json(&o)?,
                Format::Text => {
                    let w = &o.waiver;
                    let verb = if o.waived_now { "waived" } else { "was already waived" };
                    println!(
                        "storage for {} {verb} ({} by {}): {}; nothing is billed for it",
                        o.month,
                        super::local_time(w.waived_at, tz),
                        w.author,
                        w.reason
                    );
                }
            }
        }
        Cmd::Storage {
            through: Some(through),
            waive: Some(reason),
            format,
            ..
        } => {
            let (done, stopped) = waive_through(&pool, through, &reason, author, Utc::now()).await?;
            match format {
                Format::Json => print_json(&serde_json::json!({
                    "waived": done,
                    "stopped": stopped.as_ref().map(ToString::to_string),
                }))?,
                Format::Text => {
                    for o in &done {
                        let verb = if o.waived_now { "waived" } else { "was already waived" };
                        println!("storage for {} {verb}: {}", o.month, o.waiver.reason);
                    }
                    if done.is_empty() && stopped.is_none() {
                        println!("nothing to waive through {through}: every month is billed or waived");
                    }
                }
            }
            if let Some(e) = stopped {
                return Err(e.into());
            }
        }
        Cmd::Storage {
            month: Some(month),
            dry_run,
            format,
            ..
        } => {
            let outcome = bill(&pool, month, author, dry_run, Utc::now()).await?;
            match format {
                Format::Json => print_json(&outcome)?,
                Format::Text => print!("{}", render(&outcome, tz)),
            }
        }
        Cmd::Storage {
            through: Some(through),
            dry_run,
            format,
            ..
        } => {
            let o = bill_through(&pool, through, author, dry_run, Utc::now()).await?;
            match format {
                Format::Json => print_json(&o)?,
                Format::Text => {
                    for m in &o.months {
                        print!("{}", render(m, tz));
                    }
                    if o.months.is_empty() && o.stopped.is_none() {
                        println!("nothing to bill through {through}");
                    }
                }
            }
            if let Some(e) = o.stopped {
                let done = o.months.last().map(|m| m.month);
                return Err(match done {
                    Some(d) => anyhow::Error::from(e).context(format!("stopped after {d}")),
                    None => e.into(),
                });
            }
        }
        Cmd::Storage { .. } => unreachable!("clap requires --month or --through"),
        Cmd::Runs { format } => {
            let (runs, waivers) = runs(&pool).await?;
            match format {
                super::ListFormat::Json => print_json(&serde_json::json!({ "runs": runs, "waivers": waivers }))?,
                super::ListFormat::Csv => {
                    // One table: runs, then waivers (kind "storage waived", the reason in place of counts).
                    let mut rows: Vec<Vec<String>> = runs
                        .iter()
                        .map(|r| {
                            let mut row = run_row(r, r.run_at.to_rfc3339());
                            row.push(String::new());
                            row
                        })
                        .collect();
                    rows.extend(waivers.iter().map(|w| {
                        vec![
                            String::new(),
                            "storage waived".into(),
                            Month::of_date(w.period).to_string(),
                            w.waived_at.to_rfc3339(),
                            w.author.clone(),
                            "0".into(),
                            "0".into(),
                            "0.00".into(),
                            w.reason.clone(),
                        ]
                    }));
                    print!(
                        "{}",
                        table::csv(
                            &[
                                "run", "kind", "month", "run_at", "by", "projects", "entries", "total", "reason"
                            ],
                            &rows
                        )
                    );
                }
                super::ListFormat::Text => {
                    let rows: Vec<Vec<String>> = runs
                        .iter()
                        .map(|r| run_row(r, super::local_time(r.run_at, tz)))
                        .collect();
                    print!(
                        "{}",
                        table::render(
                            &["run", "kind", "month", "run at", "by", "projects", "entries", "total"],
                            &rows
                        )
                    );
                    if !waivers.is_empty() {
                        println!("\nwaived (not billed, by decision):");
                        let rows: Vec<Vec<String>> = waivers
                            .iter()
                            .map(|w| {
                                vec![
                                    Month::of_date(w.period).to_string(),
                                    super::local_time(w.waived_at, tz),
                                    w.author.clone(),
                                    w.reason.clone(),
                                ]
                            })
                            .collect();
                        print!("{}", table::render(&["month", "waived at", "by", "reason"], &rows));
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A billing run as a table row (its time as given).
fn run_row(r: &crate::db::storage::BillingRun, at: String) -> Vec<String> {
    vec![
        r.id.to_string(),
        r.kind.clone(),
        Month::of_date(r.period).to_string(),
        at,
        r.author.clone(),
        r.project_count.to_string(),
        r.entry_count.to_string(),
        format!("{:.2}", r.total),
    ]
}

pub fn render(o: &BillOutcome, tz: chrono_tz::Tz) -> String {
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
                super::local_time(run.run_at, tz),
                run.author
            );
        }
        BillState::Waived { waiver } => {
            let _ = writeln!(
                out,
                "storage for {} was waived ({} by {}: {}); nothing posted",
                o.month,
                super::local_time(waiver.waived_at, tz),
                waiver.author,
                waiver.reason
            );
            return out;
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
