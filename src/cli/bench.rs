//! `hpc-ledger bench`: every speed figure next to what the same PostgreSQL
//! does on the same machine, in a scratch database of its own.

use std::process::ExitCode;

use anyhow::Context;

use super::Format;
use crate::bench::{self, ScaleSizes, Setup, Sizes};
use crate::db::{self, Target};

/// Exit code when a figure misses its target.
pub const EXIT_MISSED: u8 = 6;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The full sizes: 1,000,000 jobs, 100,000 projects, a ledger grown ten
    /// times (about 10 minutes on 2 cores). The defaults take a few minutes.
    #[arg(long, conflicts_with = "scale")]
    full: bool,
    /// The ledger of years instead: a month of jobs imported into an empty
    /// ledger and into one grown to --entries, the statement, the balance,
    /// the month's audit and its close measured there (50 million entries:
    /// about two hours and 80 GB of disk on 2 cores).
    #[arg(long)]
    scale: bool,
    /// With --scale: grow the ledger to this many entries.
    #[arg(long, requires = "scale", default_value_t = ScaleSizes::FULL.entries)]
    entries: u64,
    /// Jobs to import (default 100,000; 1,000,000 with --full, and in each of
    /// the three files of --scale).
    #[arg(long)]
    jobs: Option<u64>,
    /// Projects with storage quotas (default 10,000; 100,000 with --full or
    /// --scale).
    #[arg(long)]
    projects: Option<u64>,
    /// Projects of the freshly set-up center whose month end (bill storage,
    /// close, audit) is timed in a second database (default 20,000; 100,000
    /// with --full).
    #[arg(long)]
    fresh_projects: Option<u64>,
    /// Projects the jobs are charged to.
    #[arg(long, default_value_t = Sizes::DEFAULT.job_projects)]
    job_projects: u64,
    /// Grow the ledger to this many times its job charges for the
    /// statement and audit figures.
    #[arg(long, default_value_t = Sizes::DEFAULT.grow, value_parser = clap::value_parser!(u32).range(1..=100))]
    grow: u32,
    /// `job record` and `psql` processes to time (the median is reported).
    #[arg(long, default_value_t = Sizes::DEFAULT.calls, value_parser = clap::value_parser!(u32).range(1..=1000))]
    calls: u32,
    /// The scratch database, dropped and created afresh on the same server
    /// (with a second one, NAME_fresh, for the month end of a fresh center).
    #[arg(long, default_value = "hpc_ledger_bench")]
    database: String,
    /// Keep the scratch database and the generated files (the jobs file,
    /// to re-run an import by hand) afterwards; both are removed by default.
    #[arg(long)]
    keep: bool,
    /// How to print the report: text for people, json for programs
    /// (`--output` is the old name).
    #[arg(long = "format", alias = "output", value_enum, default_value_t)]
    output: Format,
}

pub async fn run(args: Args, target: &Target) -> anyhow::Result<ExitCode> {
    let base = if args.full { Sizes::FULL } else { Sizes::DEFAULT };
    let sizes = Sizes {
        jobs: args.jobs.unwrap_or(base.jobs),
        projects: args.projects.unwrap_or(base.projects).max(1),
        job_projects: args.job_projects.max(1),
        grow: args.grow,
        calls: args.calls,
        fresh_projects: args.fresh_projects.unwrap_or(base.fresh_projects).max(1),
    };
    let (url, admin) = target
        .recreate_scratch(&args.database)
        .await
        .context("creating the bench database")?;
    // The month end of a fresh center runs in a second database.
    let fresh = format!("{}_fresh", args.database);
    let (fresh_url, fresh_admin) = target
        .recreate_scratch(&fresh)
        .await
        .context("creating the second bench database")?;
    let dir = std::env::temp_dir().join(format!("hpc-ledger-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let setup = Setup {
        url,
        fresh_url,
        empty_fresh: (!args.keep).then(|| (fresh_admin, fresh.clone())),
        exe: std::env::current_exe().context("finding this program")?,
        psql: crate::embedded::client_binary("psql").context("psql is needed for the job record baseline")?,
        dir: dir.clone(),
        progress: Box::new(|step| eprintln!("bench: {step}…")),
    };
    let scale = ScaleSizes {
        jobs: args.jobs.unwrap_or(ScaleSizes::FULL.jobs).max(1),
        projects: args.projects.unwrap_or(ScaleSizes::FULL.projects).max(1),
        job_projects: args.job_projects.max(1),
        entries: args.entries,
        calls: args.calls,
    };
    let result = if args.scale {
        bench::scale::run(&setup, &scale).await
    } else {
        bench::run(&setup, &sizes).await
    };
    if args.keep {
        eprintln!(
            "bench: kept the databases {} and {fresh} and the generated files in {}",
            args.database,
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
        db::drop_database(&admin, &args.database).await?;
        db::drop_database(&admin, &fresh).await?;
    }
    let report = result?;
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text if args.scale => {
            println!(
                "hpc-ledger bench --scale: {} jobs a file, {} projects ({} with jobs), ledger {} × the first \
                 file's charges, month {}, on {}\n",
                bench::grouped(report.sizes.jobs),
                bench::grouped(report.sizes.projects),
                bench::grouped(report.sizes.job_projects),
                report.sizes.grow,
                report.month,
                report.database
            );
            print!("{}", bench::render(&report));
            println!("\nmachine: {}", machine());
        }
        Format::Text => {
            println!(
                "hpc-ledger bench: {} jobs, {} projects ({} with jobs), ledger grown ×{}, month {}, on {}\n",
                bench::grouped(report.sizes.jobs),
                bench::grouped(report.sizes.projects),
                bench::grouped(report.sizes.job_projects.min(report.sizes.projects)),
                report.sizes.grow,
                report.month,
                report.database
            );
            print!("{}", bench::render(&report));
            println!("\nmachine: {}", machine());
        }
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_MISSED)
    })
}

/// CPU model, cores and memory, from /proc.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
        .map_or("unknown CPU".to_owned(), |m| m.trim().to_owned());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    format!("{model}, {cores} cores, {} GiB", mem_kb / 1024 / 1024)
}
