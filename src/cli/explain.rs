//! `hpc-ledger job show` and `hpc-ledger entries`: find a charge and see how
//! it was reached, without SQL.

use std::fmt::Write as _;
use std::process::ExitCode;

use super::{print_json, table};
use crate::db::Target;
use crate::db::explain::EntryRow;
use crate::domain::period::Month;
use crate::service::explain::{JobName, JobReport, entries, show_job};

/// Everything recorded and posted for one job.
///
/// Examples:
///   hpc-ledger job show owens/1004
///   hpc-ledger job show owens/1234_7 --raw      # an array task, with the scheduler's record
///   hpc-ledger job show pitzer/5001.pitzer-batch --format json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ShowArgs {
    /// CLUSTER/JOBID (an array task: CLUSTER/JOBID_INDEX).
    #[arg(value_name = "CLUSTER/JOBID")]
    job: String,
    /// Also print each record as the scheduler wrote it.
    #[arg(long)]
    raw: bool,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: super::Format,
}

pub async fn run_show(args: ShowArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let name: JobName = args.job.parse()?;
    let report = show_job(&pool, &name, args.raw).await?;
    match args.format {
        super::Format::Json => print_json(&report)?,
        super::Format::Text => print!("{}", render_job(&report)),
    }
    Ok(ExitCode::SUCCESS)
}

fn render_job(r: &JobReport) -> String {
    let tz = r.time_zone;
    let t = |d: chrono::DateTime<chrono::Utc>| d.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z").to_string();
    let mut o = String::new();
    // An array task's runs (all of one index) are headed by the task:
    // `owens/1234_7`, not the job `owens/1234` (a run of its own too).
    let task = match r.runs.first().and_then(|f| f.run.array_index) {
        Some(i) if r.runs.iter().all(|x| x.run.array_index == Some(i)) => format!("_{i}"),
        _ => String::new(),
    };
    let _ = writeln!(
        o,
        "{}/{}{task}: {} run{} recorded (times in {})",
        r.cluster,
        r.job_id,
        r.runs.len(),
        if r.runs.len() == 1 { "" } else { "s" },
        tz.name()
    );
    for (n, run) in r.runs.iter().enumerate() {
        let _ = writeln!(
            o,
            "\nRun {}{}: started {}{}",
            n + 1,
            run.run
                .array_index
                .map(|i| format!(" (array task {i})"))
                .unwrap_or_default(),
            t(run.run.started_at),
            run.run
                .submitted_at
                .map(|s| format!(", submitted {}", t(s)))
                .unwrap_or_default()
        );
        let _ = writeln!(o, "  records:");
        for rec in &run.records {
            let memory = rec.memory_bytes.map_or("no memory request".to_owned(), |b| {
                crate::domain::units::Bytes(b as u64).to_string()
            });
            let _ = writeln!(
                o,
                "    record {} (revision {}, {}): project {}, node type {}{}, {} node(s), {} core(s), {}, {} GPU(s)",
                rec.id,
                rec.revision,
                rec.kind,
                rec.project,
                rec.node_type,
                rec.queue.as_ref().map(|q| format!(" (queue {q})")).unwrap_or_default(),
                rec.nodes,
                rec.cores,
                memory,
                rec.gpus
            );
            let _ = writeln!(
                o,
                "      ran {} → {}{}; state {}{}; user {}; from {} {}; recorded {} by {}",
                t(rec.started_at),
                t(rec.ended_at),
                match rec.suspended_seconds {
                    0 => String::new(),
                    s => format!(", suspended {s} s of it (not charged)"),
                },
                if rec.state.is_empty() { "-" } else { &rec.state },
                rec.exit_code
                    .as_ref()
                    .map(|e| format!(", exit {e}"))
                    .unwrap_or_default(),
                if rec.user_name.is_empty() { "-" } else { &rec.user_name },
                rec.source_format,
                rec.source_ref,
                t(rec.recorded_at),
                rec.recorded_by
            );
            if let Some(raw) = &rec.raw {
                let _ = writeln!(o, "      raw record:");
                for line in raw.lines() {
                    let _ = writeln!(o, "        {line}");
                }
            }
            if let Some(month) = rec.raw_archived_in {
                let month = crate::domain::period::Month::of_date(month);
                let _ = writeln!(
                    o,
                    "      raw record: moved to the archive file of {month} ({})",
                    rec.raw_archived_to
                        .clone()
                        .unwrap_or_else(|| crate::service::archive::file_name(month))
                );
            }
        }
        match &run.charge {
            // Its charges left the live ledger with their month (said below).
            None if run.archived.is_some() => {}
            None => {
                let _ = writeln!(
                    o,
                    "  charge: none (the run never charged: it never started, or was refused)"
                );
            }
            Some(c) => {
                let since = c
                    .rate_card
                    .as_ref()
                    .map(|d| format!(" in force since {}", t(d.valid_from)))
                    .unwrap_or_default();
                let _ = writeln!(
                    o,
                    "  charge of record {}, priced by charging rules version {} and rate card {}{since}:",
                    c.record, c.charging_rules, c.rate_card_id
                );
                match (&c.price, &c.rate_card) {
                    (Some(p), Some(card)) => {
                        for line in super::quote::breakdown(p, &card.value, &r.currency).lines() {
                            if line.is_empty() {
                                o.push('\n');
                            } else {
                                let _ = writeln!(o, "  {line}");
                            }
                        }
                    }
                    _ => {
                        let _ = writeln!(
                            o,
                            "    cannot be worked out again: {}",
                            c.pricing_error.as_deref().unwrap_or("unknown")
                        );
                    }
                }
                let _ = writeln!(
                    o,
                    "  {}",
                    if c.matches_ledger {
                        "the charge entries below hold exactly these quantities and amounts"
                    } else {
                        "THE CHARGE ENTRIES BELOW DIFFER from this (run `hpc-ledger audit`)"
                    }
                );
            }
        }
        let _ = writeln!(o, "  entries:");
        for line in entry_table(&run.entries, tz).lines() {
            let _ = writeln!(o, "    {line}");
        }
        if let Some(m) = run.archived {
            let _ = writeln!(
                o,
                "  archived: its charges of {m} are in {}; the entries and net below are the live ledger's only",
                crate::service::archive::file_name(m)
            );
        }
        let _ = writeln!(o, "  net: {} {:.2}", r.currency, run.net);
    }
    o
}

fn entry_rows(list: &[EntryRow], tz: chrono_tz::Tz) -> Vec<Vec<String>> {
    list.iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                e.posted_at.with_timezone(&tz).format("%Y-%m-%d").to_string(),
                Month::of_date(e.period).to_string(),
                if e.late {
                    format!("{} (late)", e.kind)
                } else {
                    e.kind.clone()
                },
                e.metric.clone().unwrap_or_default(),
                e.what.clone(),
                e.quantity.normalize().to_string(),
                e.unit_rate.normalize().to_string(),
                format!("{:.2}", e.amount),
                e.charging_rules.to_string(),
                e.author.clone(),
                e.reason.clone().unwrap_or_default(),
            ]
        })
        .collect()
}

const ENTRY_HEADER: [&str; 12] = [
    "entry", "posted", "month", "kind", "metric", "what", "quantity", "rate", "amount", "rules", "by", "reason",
];

fn entry_table(list: &[EntryRow], tz: chrono_tz::Tz) -> String {
    if list.is_empty() {
        return "(none)\n".into();
    }
    table::render(&ENTRY_HEADER, &entry_rows(list, tz))
}

/// A project's ledger entries of a month, with their ids (what `reverse
/// --entry` and `refund --entry` take).
///
/// Examples:
///   hpc-ledger entries --project PAS1234 --month 2026-10
///   hpc-ledger entries --project PAS1234 --month 2026-10 --kind storage --format csv
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct EntriesArgs {
    /// The project's code.
    #[arg(long)]
    project: String,
    /// The month, YYYY-MM.
    #[arg(long)]
    month: Month,
    /// Only entries of this kind.
    #[arg(long, value_parser = ["job", "storage", "reversal", "refund", "adjustment", "discount"])]
    kind: Option<String>,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: super::ListFormat,
}

pub async fn run_entries(args: EntriesArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let list = entries(&pool, &args.project, args.month, args.kind.as_deref()).await?;
    let tz = {
        let mut conn = pool.acquire().await?;
        crate::db::reference::load_center(&mut conn)
            .await?
            .map_or(chrono_tz::UTC, |c| c.time_zone)
    };
    match args.format {
        super::ListFormat::Json => print_json(&list)?,
        super::ListFormat::Csv => print!("{}", table::csv(&ENTRY_HEADER, &entry_rows(&list, tz))),
        super::ListFormat::Text => {
            print!("{}", entry_table(&list, tz));
            let total: rust_decimal::Decimal = list.iter().map(|e| e.amount).sum();
            println!(
                "{} entr{}, total {total:.2}",
                list.len(),
                if list.len() == 1 { "y" } else { "ies" }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
