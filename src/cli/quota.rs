//! `hpc-ledger quota …`: a project's storage quota history.

use std::process::ExitCode;

use clap::Subcommand;

use super::{print_json, table};
use crate::db::Target;
use crate::service::config::time_zone;
use crate::service::storage::{parse_quota, quota_report, set_quota};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Set a project's quota from an instant on (a new row; history is never rewritten).
    ///
    /// Example:
    ///   hpc-ledger quota set PAS1234 30TB --from 2026-12-01
    #[command(verbatim_doc_comment)]
    Set {
        /// The project code.
        project: String,
        /// The quota in TB, e.g. 10TB (0 ends it).
        #[arg(allow_hyphen_values = true)]
        quota: String,
        /// From when: 2026-11-15 (midnight, billing time zone), a local time, or RFC 3339.
        #[arg(long)]
        from: String,
    },
    /// Show a project's quota history and the quota in force.
    ///
    /// Example:
    ///   hpc-ledger quota show PAS1234 --at 2026-10-20
    #[command(verbatim_doc_comment)]
    Show {
        /// The project code.
        project: String,
        /// The instant (default: now).
        #[arg(long)]
        at: Option<String>,
        /// How to print it: text for people, csv or json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: super::ListFormat,
    },
}

pub async fn run(cmd: Cmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = time_zone(&pool).await?;
    match cmd {
        Cmd::Set { project, quota, from } => {
            let tb = parse_quota(&quota).map_err(anyhow::Error::msg)?;
            let from = super::instant(Some(&from), tz)?;
            set_quota(&pool, &project, tb, from, author).await?;
            println!(
                "quota of {project} set to {tb} TB from {}",
                from.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z")
            );
        }
        Cmd::Show { project, at, format } => {
            let at = super::instant(at.as_deref(), tz)?;
            let r = quota_report(&pool, &project, at).await?;
            let rows: Vec<Vec<String>> = r
                .history
                .iter()
                .map(|q| {
                    vec![
                        q.effective_from
                            .with_timezone(&tz)
                            .format("%Y-%m-%d %H:%M %Z")
                            .to_string(),
                        q.quota_tb.normalize().to_string(),
                        super::local_time(q.recorded_at, tz),
                        q.recorded_by.clone(),
                    ]
                })
                .collect();
            match format {
                super::ListFormat::Json => print_json(&r)?,
                super::ListFormat::Csv => print!("{}", table::csv(&["from", "tb", "recorded", "by"], &rows)),
                super::ListFormat::Text => {
                    println!(
                        "{}: {} at {}",
                        r.project,
                        r.quota_tb.map_or("no quota".into(), |q| format!("{q} TB")),
                        at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z")
                    );
                    print!("{}", table::render(&["from", "TB", "recorded", "by"], &rows));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
