//! `hpc-ledger rejected`: the records that could not be charged, and why;
//! `rejected dismiss`: set aside the ones that never will be, with a reason.

use std::process::ExitCode;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::service::rejected;
use crate::service::rejected::Selection;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Also list the ones resolved or dismissed since, with who dismissed them and why.
    #[arg(long)]
    all: bool,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: super::ListFormat,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Dismiss open rejections that will never be charged (a junk file, a
    /// test job): kept with who and why, never retried, shown by `rejected --all`.
    ///
    /// Example: hpc-ledger rejected dismiss --file /tmp/core.dump --reason "binary file imported by mistake"
    Dismiss(DismissArgs),
    /// Charge a rejected job whose account was mistyped (an unknown project)
    /// to the project it belongs to: the decision is kept with who and why,
    /// the raw record as the scheduler wrote it; the job is then recorded.
    ///
    /// Example: hpc-ledger rejected reassign 7 --project PAS1234 --reason "account mistyped as PAS1243"
    Reassign(ReassignArgs),
}

#[derive(Debug, clap::Args)]
struct ReassignArgs {
    /// The rejection's id (the first column of `hpc-ledger rejected`).
    id: i64,
    /// The project to charge it to.
    #[arg(long)]
    project: String,
    /// Why (kept with the reassignment, shown to auditors).
    #[arg(long)]
    reason: String,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Debug, clap::Args)]
struct DismissArgs {
    /// Rejection ids (the first column of `hpc-ledger rejected`); all must be open.
    ids: Vec<i64>,
    /// The open rejections read from this file (as named when it was imported).
    #[arg(long)]
    file: Option<String>,
    /// ... of this source format (slurm, pbs, jsonl, jobcomp, json, cli).
    #[arg(long = "source")]
    source_format: Option<String>,
    /// ... of this kind (malformed, unknown_project, conflict, ...).
    #[arg(long)]
    kind: Option<String>,
    /// Why they will not be charged (kept with the dismissal).
    #[arg(long)]
    reason: String,
    /// Show what would be dismissed; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run(args: Args, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    if let Some(Cmd::Reassign(a)) = args.cmd {
        let done = rejected::reassign(&pool, a.id, &a.project, author, &a.reason).await?;
        let mut recorder = crate::service::record::Recorder::new(
            pool.clone(),
            crate::service::record::RecordOptions {
                supersede: false,
                author: author.to_owned(),
            },
        );
        let mut summary = crate::service::import::Summary::default();
        crate::service::import::retry_rejected(&pool, &mut recorder, &mut summary, &[a.id]).await?;
        match a.format {
            Format::Json => print_json(&serde_json::json!({ "reassigned": done, "retry": summary }))?,
            Format::Text => {
                println!(
                    "rejection {}{}: account {} reassigned to {} by {}: {}",
                    done.rejection,
                    done.job.as_ref().map(|j| format!(" ({j})")).unwrap_or_default(),
                    done.from_account
                        .as_deref()
                        .map_or("(none)".to_owned(), |a| format!("{a:?}")),
                    done.project,
                    author,
                    a.reason.trim()
                );
                print!("{}", super::import::render(&summary));
            }
        }
        return Ok(if summary.rejected_total() > 0 {
            ExitCode::from(super::job::EXIT_REJECTED)
        } else {
            ExitCode::SUCCESS
        });
    }
    if let Some(Cmd::Dismiss(d)) = args.cmd {
        let selection = Selection {
            ids: d.ids,
            file: d.file,
            source_format: d.source_format,
            kind: d.kind,
        };
        let done = rejected::dismiss(&pool, &selection, author, &d.reason, d.dry_run).await?;
        match d.format {
            Format::Json => print_json(&done)?,
            Format::Text => {
                let lines: Vec<Vec<String>> = done
                    .iter()
                    .map(|r| {
                        vec![
                            r.id.to_string(),
                            r.source_ref.clone(),
                            r.job_key.clone().unwrap_or_default(),
                            r.kind.clone(),
                        ]
                    })
                    .collect();
                if !lines.is_empty() {
                    print!("{}", table::render(&["id", "where", "job", "kind"], &lines));
                }
                let verb = if d.dry_run { "would dismiss" } else { "dismissed" };
                println!(
                    "{verb} {} rejection{}",
                    done.len(),
                    if done.len() == 1 { "" } else { "s" }
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows = rejected::list(&pool, args.all).await?;
    if args.format == super::ListFormat::Json {
        print_json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let status = match (&r.resolution, &r.resolved_by) {
                (None, _) => "open".to_owned(),
                (Some(res), Some(by)) if res == "dismissed" => format!("dismissed by {by}"),
                (Some(res), _) => res.clone(),
            };
            let reason = match &r.resolution_note {
                Some(note) => format!("{} (dismissed: {note})", r.reason),
                None => r.reason.clone(),
            };
            vec![
                r.id.to_string(),
                r.source_ref.clone(),
                r.job_key.clone().unwrap_or_default(),
                r.kind.clone(),
                status,
                reason,
            ]
        })
        .collect();
    let header = ["id", "where", "job", "kind", "status", "reason"];
    match args.format {
        super::ListFormat::Csv => print!("{}", table::csv(&header, &lines)),
        _ => print!("{}", table::render(&header, &lines)),
    }
    Ok(ExitCode::SUCCESS)
}
