//! `hpc-ledger import`: record many jobs from accounting files or stdin.

use std::fs::File;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;

use super::{Format, print_json};
use crate::db::Target;
use crate::ingest::{self, ReadOptions};
use crate::service::follow::{Follow, follow};
use crate::service::import::{ImportError, Input, Summary, import, retry_rejected};
use crate::service::record::{RecordOptions, Recorder};

/// Exit code when some records were rejected (and kept for re-processing).
pub const EXIT_REJECTED: u8 = 4;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InputFormat {
    /// `sacct --parsable2` output (with or without a header line).
    Slurm,
    /// PBS / TORQUE / PBS Pro accounting logs.
    Pbs,
    /// One JSON job per line (see docs/recording.md).
    Jsonl,
    /// Slurm jobcomp/elasticsearch documents, one per line (see docs/slurm.md).
    Jobcomp,
    /// `sacct --json` output of Slurm 22.05 to 25.05 (or slurmrestd's /slurmdb jobs), read as a stream.
    SacctJson,
    /// Slurm's jobcomp/filetxt log (`JobCompLoc`), one `JobId=… JobState=…` line per job (see docs/slurm.md).
    JobcompFiletxt,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The input format.
    #[arg(long, value_enum)]
    format: Option<InputFormat>,
    /// Files to read; `-` or none for stdin.
    files: Vec<PathBuf>,
    /// Cluster of records that name none (PBS logs; sacct output without a Cluster field).
    #[arg(long)]
    cluster: Option<String>,
    /// Project to charge records that name no account.
    #[arg(long)]
    default_project: Option<String>,
    /// Slurm: the field names of headerless output, comma-separated (as given to `sacct --format`).
    #[arg(long, value_delimiter = ',')]
    fields: Option<Vec<String>>,
    /// Slurm: the field delimiter (default `|`).
    #[arg(long)]
    delimiter: Option<String>,
    /// PBS: attributes naming the project, first present wins (default `account`; e.g. `account,group`).
    #[arg(long, value_delimiter = ',')]
    project_from: Option<Vec<String>>,
    /// Replace the charges of jobs whose re-sent records change the charge
    /// (reverse the old entries, post the new ones) instead of rejecting them.
    #[arg(long)]
    supersede: bool,
    /// Re-process the rejected records kept from earlier imports, with today's rules
    /// (each read with the options it was first read with).
    #[arg(long, conflicts_with_all = ["files", "format", "cluster", "default_project", "fields", "delimiter", "project_from"])]
    retry_rejected: bool,
    /// With --retry-rejected: only these rejections (the ids `hpc-ledger
    /// rejected` lists; each must be open). Repeat for several.
    #[arg(long = "id", value_name = "ID", requires = "retry_rejected")]
    ids: Vec<i64>,
    /// Follow a PBS accounting directory (`server_priv/accounting`): record
    /// each job as its end record is written, move on to the next day's file,
    /// and resume where the last follower stopped. Runs until SIGTERM/Ctrl-C.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["files", "retry_rejected"])]
    follow: Option<PathBuf>,
    /// With --follow: seconds to wait when nothing is new.
    #[arg(long, default_value_t = 2.0, requires = "follow", value_name = "SECONDS")]
    poll: f64,
    /// Jobs per transaction: smaller batches commit sooner (a feed), larger
    /// ones go faster (a backlog).
    #[arg(long, default_value_t = crate::service::import::BATCH,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    batch_size: usize,
    /// How to print the summary.
    #[arg(long, value_enum, default_value_t)]
    output: Format,
}

pub async fn run(args: Args, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    // The parsers give every record the defaults of its own import (stored
    // with a rejected line, so a retry reads it as it was read the first time).
    let mut recorder = Recorder::new(
        pool.clone(),
        RecordOptions {
            supersede: args.supersede,
            author: author.to_owned(),
        },
    );
    let mut summary = Summary::default();
    if args.retry_rejected {
        retry_rejected(&pool, &mut recorder, &mut summary, &args.ids).await?;
    } else {
        let Some(format) = args.format else {
            anyhow::bail!("give --format slurm|pbs|jsonl|jobcomp|sacct-json|jobcomp-filetxt (or --retry-rejected)");
        };
        let format = match format {
            InputFormat::Slurm => ingest::Format::Slurm,
            InputFormat::Pbs => ingest::Format::Pbs,
            InputFormat::Jsonl => ingest::Format::Jsonl,
            InputFormat::Jobcomp => ingest::Format::Jobcomp,
            InputFormat::SacctJson => ingest::Format::SacctJson,
            InputFormat::JobcompFiletxt => ingest::Format::JobcompFiletxt,
        };
        let options = ReadOptions {
            cluster: args.cluster.clone(),
            default_project: args.default_project.clone(),
            fields: args.fields.clone(),
            delimiter: args.delimiter.clone(),
            project_from: args.project_from.clone(),
            ..ReadOptions::default()
        }
        .now(format.source());
        if let Some(dir) = &args.follow {
            if format != ingest::Format::Pbs {
                anyhow::bail!("--follow reads a PBS accounting directory (one file per day): give --format pbs");
            }
            if options.cluster.is_none() {
                anyhow::bail!("PBS records do not name their cluster: give --cluster with --follow");
            }
            if !(0.01..=3600.0).contains(&args.poll) {
                anyhow::bail!("--poll must be between 0.01 and 3600 seconds");
            }
            let f = Follow {
                dir: dir.clone(),
                format,
                options,
                poll: std::time::Duration::from_secs_f64(args.poll),
                batch_size: args.batch_size,
            };
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                super::stop_signal().await;
                let _ = stop_tx.send(true);
            });
            follow(&pool, &mut recorder, &f, &mut summary, stop_rx).await?;
            refresh_after(&pool, &summary).await;
            return finish(&args, &summary);
        }
        let mut files = args.files.clone();
        if files.is_empty() {
            files.push(PathBuf::from("-"));
        }
        for path in &files {
            if path.as_os_str() == "-" {
                let bar = progress(None);
                let how = Input {
                    batch_size: args.batch_size,
                    ..Input::new("stdin", format, &options)
                };
                let r = import(&mut recorder, std::io::stdin(), &how, &mut summary, &|b| {
                    bar.set_position(b)
                })
                .await;
                bar.finish_and_clear();
                if let Some(code) = abandoned(&pool, &args, &summary, r).await? {
                    return Ok(code);
                }
            } else {
                let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
                let bar = progress(file.metadata().ok().map(|m| m.len()));
                let name = path.display().to_string();
                let how = Input {
                    batch_size: args.batch_size,
                    ..Input::new(&name, format, &options)
                };
                let r = import(&mut recorder, file, &how, &mut summary, &|b| bar.set_position(b)).await;
                bar.finish_and_clear();
                if let Some(code) = abandoned(&pool, &args, &summary, r).await? {
                    return Ok(code);
                }
            }
        }
    }
    refresh_after(&pool, &summary).await;
    finish(&args, &summary)
}

/// After an import, fold a closed month's rollups if its close did not
/// (migration 0042), and bring the planner's statistics up to date where
/// the rows it wrote made them stale (a first import of a month's jobs into
/// an empty ledger, typically).
async fn refresh_after(pool: &sqlx::PgPool, summary: &Summary) {
    crate::service::fold_rollups(pool).await;
    // A recorded or superseding run writes a record and at least one charge;
    // a revision writes a record; the ledger's insert trigger adds at most
    // a row per entry to each of its rollups (migration 0033).
    let charged = summary.recorded + summary.superseded;
    let entries = charged + summary.superseded;
    crate::service::refresh_statistics(
        pool,
        &[
            ("job", summary.recorded),
            ("job_record", charged + summary.revised),
            ("ledger_entry", entries),
            ("ledger_draw", entries),
            ("ledger_usage", entries),
        ],
    )
    .await;
}

/// An import that stopped part-way (too many malformed records in a row)
/// still recorded what it read before: say what, then why it stopped, and
/// fail. Other errors are passed on; `None` when the file was read whole.
async fn abandoned(
    pool: &sqlx::PgPool,
    args: &Args,
    summary: &Summary,
    result: Result<(), ImportError>,
) -> anyhow::Result<Option<ExitCode>> {
    match result {
        Ok(()) => Ok(None),
        Err(e @ ImportError::Abandoned { .. }) => {
            refresh_after(pool, summary).await;
            finish(args, summary)?;
            eprintln!("error: {e}");
            Ok(Some(ExitCode::FAILURE))
        }
        Err(e) => Err(e.into()),
    }
}

fn finish(args: &Args, summary: &Summary) -> anyhow::Result<ExitCode> {
    match args.output {
        Format::Json => print_json(summary)?,
        Format::Text => print!("{}", render(summary)),
    }
    Ok(if summary.rejected_total() > 0 {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// A progress bar on stderr when it is a terminal; hidden otherwise.
fn progress(total: Option<u64>) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    match total {
        Some(len) => indicatif::ProgressBar::new(len).with_style(
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .expect("a valid template"),
        ),
        None => indicatif::ProgressBar::new_spinner()
            .with_style(indicatif::ProgressStyle::with_template("{spinner} {bytes} {bytes_per_sec}").expect("valid")),
    }
}

/// The summary as a person reads it.
pub fn render(s: &Summary) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "lines read:  {}", s.lines);
    let _ = writeln!(out, "recorded:    {} (charged {:.2})", s.recorded, s.charged);
    let _ = writeln!(out, "replayed:    {} (already recorded, nothing changed)", s.replayed);
    let _ = writeln!(
        out,
        "revised:     {} (non-charge fields changed; kept as revisions)",
        s.revised
    );
    let _ = writeln!(
        out,
        "superseded:  {} (old charges reversed, new ones posted)",
        s.superseded
    );
    let skipped: u64 = s.skipped.values().sum();
    let _ = writeln!(out, "skipped:     {skipped}");
    for (why, n) in &s.skipped {
        let _ = writeln!(out, "  {n:>8}  {why}");
    }
    let _ = writeln!(
        out,
        "rejected:    {} (kept; fix the cause, then `hpc-ledger import --retry-rejected`)",
        s.rejected_total()
    );
    for (kind, n) in &s.rejected {
        let _ = writeln!(out, "  {n:>8}  {}", kind.as_str());
    }
    for e in &s.examples {
        let _ = writeln!(out, "  {e}");
    }
    if s.rejected_total() > s.examples.len() as u64 {
        let _ = writeln!(out, "  … `hpc-ledger rejected` lists them all");
    }
    out
}
