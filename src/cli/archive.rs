//! `hpc-ledger archive --through M --to DIR` (retention: closed months out
//! of the live ledger into sealed files) and `verify --archive PATH`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::close::EXIT_FINDINGS;
use super::{Format, ListFormat, print_json, table};
use crate::db::Target;
use crate::domain::period::Month;
use crate::service::archive::{archive_through, verify_archive};

/// Move every closed month through MONTH not archived yet out of the live
/// ledger, oldest first: each month is written to DIR as
/// hpc-ledger-archive-YYYY-MM.jsonl (its seal items, checked against its
/// recorded seal before anything is deleted), then its entries are deleted
/// from the database. Its seal, statements' totals, usage and draws stay.
///
/// Examples:
///   hpc-ledger archive --through 2019-12 --to /archive/hpc-ledger
///   hpc-ledger verify --archive /archive/hpc-ledger
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The last month to archive, YYYY-MM (closed).
    #[arg(long, value_name = "MONTH")]
    through: Month,
    /// The directory the files are written to (created if missing).
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run(args: Args, target: &Target, by: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let done = archive_through(&pool, args.through, &args.to, by).await?;
    match args.format {
        Format::Json => print_json(&done)?,
        Format::Text => {
            if done.months.is_empty() && done.records_files.is_empty() && done.stopped.is_none() {
                println!(
                    "nothing to archive: every closed month through {} is archived",
                    args.through
                );
            }
            for a in &done.months {
                println!(
                    "{}: {} entries ({}) and the raw text of {} job records archived to {} (sha256 {})",
                    a.month,
                    a.entries,
                    a.total,
                    a.records,
                    a.file.display(),
                    a.file_sha256
                );
            }
            for r in &done.records_files {
                println!(
                    "{}: archived before its records' raw text could leave with it; the raw text of {} job records \
                     archived to {} (sha256 {})",
                    r.month,
                    r.records,
                    r.file.display(),
                    r.file_sha256
                );
            }
        }
    }
    if let Some(e) = done.stopped {
        return Err(anyhow::anyhow!(e));
    }
    Ok(ExitCode::SUCCESS)
}

/// `verify --archive PATH`.
pub async fn run_verify(
    pool: &sqlx::PgPool,
    path: &Path,
    since: Option<Month>,
    format: ListFormat,
) -> anyhow::Result<ExitCode> {
    let checks = verify_archive(pool, path, since).await?;
    let bad = checks.iter().filter(|c| !c.holds()).count();
    match format {
        ListFormat::Json => print_json(&checks)?,
        ListFormat::Csv => {
            let rows: Vec<Vec<String>> = checks
                .iter()
                .map(|c| {
                    vec![
                        c.month.map(|m| m.to_string()).unwrap_or_default(),
                        c.file.display().to_string(),
                        c.holds().to_string(),
                        c.entries.to_string(),
                        c.total.to_string(),
                        c.records.to_string(),
                        c.problems.join("; "),
                        c.records_file.to_string(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::csv(
                    &[
                        "month",
                        "file",
                        "holds",
                        "entries",
                        "total",
                        "records",
                        "problems",
                        "records_file"
                    ],
                    &rows
                )
            );
        }
        ListFormat::Text => {
            if checks.is_empty() {
                println!("no archive files in {}", path.display());
            }
            for c in &checks {
                let month = c.month.map_or_else(|| "?".to_owned(), |m| m.to_string());
                if c.holds() && c.records_file {
                    println!(
                        "{month}: records' file holds: {} (the raw text of {} job records)",
                        c.file.display(),
                        c.records
                    );
                } else if c.holds() {
                    println!(
                        "{month}: seal holds from {} ({} entries, {}; the raw text of {} job records)",
                        c.file.display(),
                        c.entries,
                        c.total,
                        c.records
                    );
                } else {
                    println!("{month}: BROKEN ({})", c.file.display());
                    for p in &c.problems {
                        println!("  {p}");
                    }
                }
            }
        }
    }
    Ok(if bad > 0 {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}
