//! `hpc-ledger job …`: record one finished job (for a scheduler's epilogue).

use std::io::Read as _;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::{Format, print_json};
use crate::db::Target;
use crate::domain::kinds::SourceFormat;
use crate::domain::posting::RejectKind;
use crate::ingest::jsonl::{JsonJob, Scalar};
use crate::ingest::{Item, ReadOptions};
use crate::service::record::{Outcome, RecordOptions, Recorder, Source, Submission};

/// Exit codes of `job record`.
pub const EXIT_MALFORMED: u8 = 2;
pub const EXIT_CONFLICT: u8 = 3;
pub const EXIT_REJECTED: u8 = 4;

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Record one finished job, from flags or one JSON object on stdin (--json).
    ///
    /// Examples:
    ///   hpc-ledger job record --cluster owens --job-id 1234 --project PAS1234 --queue batch \
    ///       --cores 4 --memory 16GB --start 2026-10-05T09:10:00-04:00 --end 2026-10-05T11:10:00-04:00
    ///   echo '{"cluster":"owens","job_id":"1234",…}' | hpc-ledger job record --json
    #[command(verbatim_doc_comment)]
    Record(Box<RecordArgs>),
    /// Show a recorded job: its runs, records, how its charge was reached,
    /// every entry posted for it or against it.
    ///
    /// Examples:
    ///   hpc-ledger job show owens/1004
    ///   hpc-ledger job show owens/1234_7 --raw      # an array task, with the scheduler's record
    #[command(verbatim_doc_comment)]
    Show(super::explain::ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Read the job as one JSON object from stdin (the JSON lines format).
    #[arg(long, conflicts_with_all = ["cluster", "job_id", "project", "cores", "start", "end"])]
    json: bool,
    /// The cluster (its name in the center configuration).
    #[arg(long)]
    cluster: Option<String>,
    /// The scheduler's job id (without the array index).
    #[arg(long)]
    job_id: Option<String>,
    /// The array task's index, for an array job.
    #[arg(long)]
    array_index: Option<u32>,
    /// The project code (the scheduler's account).
    #[arg(long)]
    project: Option<String>,
    /// Who ran it (kept with the record; does not change the charge).
    #[arg(long)]
    user: Option<String>,
    /// The job's name (kept; does not change the charge).
    #[arg(long)]
    job_name: Option<String>,
    /// Queue or partition (decides the node type).
    #[arg(long)]
    queue: Option<String>,
    /// Node type, instead of a queue.
    #[arg(long)]
    node_type: Option<String>,
    /// Nodes held (default 1).
    #[arg(long)]
    nodes: Option<u32>,
    /// Cores held in total.
    #[arg(long)]
    cores: Option<u32>,
    /// Memory requested in total, with its unit, e.g. 12GB or 512MB
    /// (powers of 1024).
    #[arg(long, value_parser = memory_with_unit)]
    memory: Option<String>,
    /// GPUs held in total (required on a node type that has or prices GPUs;
    /// elsewhere absent means 0).
    #[arg(long)]
    gpus: Option<u32>,
    /// Times: RFC 3339 (2026-10-05T09:00:00-04:00), the cluster's local time, or epoch seconds.
    #[arg(long)]
    submit: Option<String>,
    /// When it started (same forms as --submit).
    #[arg(long)]
    start: Option<String>,
    /// When it ended: decides its accounting month (same forms as --submit).
    #[arg(long)]
    end: Option<String>,
    /// Seconds it was suspended between its start and its end (Slurm's
    /// `Suspended`): not charged.
    #[arg(long, value_name = "SECONDS")]
    suspended_seconds: Option<u32>,
    /// The scheduler's final state, e.g. COMPLETED, TIMEOUT (kept; does not change the charge).
    #[arg(long)]
    state: Option<String>,
    /// The exit code, e.g. 0 or 1:0 (kept; does not change the charge).
    #[arg(long)]
    exit_code: Option<String>,
    /// If the job is recorded with a different charge, reverse the old charges and post these.
    #[arg(long)]
    supersede: bool,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

fn time(v: &Option<String>) -> Option<Scalar> {
    v.as_ref().map(|s| match s.trim().parse::<i64>() {
        Ok(secs) => Scalar::Int(secs),
        Err(_) => Scalar::Text(s.clone()),
    })
}

/// `--memory` names its unit: a bare number would be read as bytes (a
/// JSON line's `memory` is), where `quote --mem=64` and Slurm read MB and a
/// person typing 64 may mean GB.
fn memory_with_unit(s: &str) -> Result<String, String> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("give its unit: {t}GB, {t}MB or {t}B"));
    }
    Ok(t.to_owned())
}

pub async fn run(cmd: Cmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let a = match cmd {
        Cmd::Record(a) => a,
        Cmd::Show(args) => return super::explain::run_show(args, target).await,
    };
    let (raw, raw_bytes, format) = if a.json {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("reading the job from stdin")?;
        // The byte policy of every path: not UTF-8 is read as U+FFFD, the bytes kept.
        let has_nul = bytes.contains(&0);
        let (text, exact) = crate::ingest::decode(bytes.clone());
        let exact = if has_nul { Some(bytes) } else { exact };
        (
            text.replace('\0', "\u{FFFD}").trim().to_owned(),
            exact,
            SourceFormat::Json,
        )
    } else {
        let job = JsonJob {
            cluster: a.cluster.clone(),
            job_id: a.job_id.clone().map(Scalar::Text),
            array_index: a.array_index,
            project: a.project.clone(),
            user: a.user.clone(),
            job_name: a.job_name.clone(),
            queue: a.queue.clone(),
            node_type: a.node_type.clone(),
            nodes: a.nodes,
            cores: a.cores,
            memory: a.memory.clone().map(Scalar::Text),
            gpus: a.gpus,
            exclusive: None,
            submit: time(&a.submit),
            start: time(&a.start),
            end: time(&a.end),
            suspended_seconds: a.suspended_seconds,
            state: a.state.clone(),
            exit_code: a.exit_code.clone().map(Scalar::Text),
        };
        (serde_json::to_string(&job)?, None, SourceFormat::Cli)
    };
    let source = Source {
        intake: None,
        format,
        reference: "job record".into(),
        raw: raw.clone(),
        raw_bytes: raw_bytes.clone(),
        options: crate::ingest::KeptOptions::default(),
        job: None,
    };
    let pool = target.open_configured().await?;
    let mut recorder = Recorder::new(
        pool,
        RecordOptions {
            supersede: a.supersede,
            author: author.to_owned(),
        },
    );
    let item = match raw_bytes.as_deref() {
        Some(exact) => {
            let mut p = crate::ingest::jsonl::JsonlParser::new(&ReadOptions::default());
            crate::ingest::read_record(&mut p, &raw, Some(exact))
                .unwrap_or_else(|| Item::Bad("the job is empty".into()))
        }
        None => crate::ingest::jsonl::parse_job(&raw).unwrap_or_else(Item::Bad),
    };
    let outcome = match item {
        Item::Job(job) => {
            let mut outcomes = recorder.record(&[Submission { input: *job, source }], &[]).await?;
            outcomes.pop().expect("one outcome per job")
        }
        Item::Skip(why) => {
            println!("not charged: one of the {why}");
            return Ok(ExitCode::SUCCESS);
        }
        Item::Bad(reason) => {
            // Name the job as far as the record allows.
            let job = crate::ingest::json_job_key(&raw, "job_id", Some("array_index"), None);
            let source = Source {
                intake: None,
                job: job.clone(),
                ..source
            };
            recorder.record(&[], &[(source, reason.clone())]).await?;
            Outcome::Rejected {
                job,
                kind: RejectKind::Malformed,
                reason,
            }
        }
    };
    match a.format {
        Format::Json => print_json(&outcome)?,
        Format::Text => match &outcome {
            Outcome::Recorded {
                job,
                period,
                late,
                entries,
                amount,
            } => println!(
                "recorded {job}: {entries} entr{} totalling {amount:.2} in {period}{}",
                if *entries == 1 { "y" } else { "ies" },
                if *late { " (late: its own month is closed)" } else { "" }
            ),
            Outcome::Replayed { job } => println!("replayed {job}: already recorded with this content"),
            Outcome::Revised { job, revision } => {
                println!("revised {job}: kept as revision {revision} (the charge does not change)")
            }
            Outcome::Superseded {
                job,
                revision,
                reversed,
                amount,
                period,
                ..
            } => println!(
                "superseded {job}: revision {revision}, {reversed} entr{} reversed, new charges {amount:.2} in {period}",
                if *reversed == 1 { "y" } else { "ies" }
            ),
            Outcome::Rejected { job, reason, .. } => eprintln!(
                "error: {} not recorded: {reason}\n  (kept as rejected; `hpc-ledger rejected` lists it)",
                job.as_deref().unwrap_or("the job")
            ),
        },
    }
    Ok(match outcome {
        Outcome::Rejected {
            kind: RejectKind::Malformed,
            ..
        } => ExitCode::from(EXIT_MALFORMED),
        Outcome::Rejected {
            kind: RejectKind::Conflict,
            ..
        } => ExitCode::from(EXIT_CONFLICT),
        Outcome::Rejected { .. } => ExitCode::from(EXIT_REJECTED),
        _ => ExitCode::SUCCESS,
    })
}
