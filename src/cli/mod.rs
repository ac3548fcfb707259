//! The command line (clap derive): one module per noun, each with its own
//! arguments and `run`. Results go to stdout, logs and errors to stderr.

mod bench;
mod bill;
mod close;
mod config;
mod correct;
mod db;
mod demo;
mod explain;
mod import;
mod job;
mod quota;
mod quote;
mod rejected;
mod serve;
mod statement;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{Parser, Subcommand, ValueEnum};

use crate::db::Target;

/// A charge-back ledger for HPC centers: finished jobs and storage quotas in,
/// priced immutable ledger entries out.
#[derive(Debug, Parser)]
#[command(name = "hpc-ledger", version, propagate_version = true)]
pub struct Cli {
    /// PostgreSQL URL of the ledger database. Without it, hpc-ledger starts
    /// and uses its own embedded PostgreSQL under --home.
    #[arg(
        long,
        env = "DATABASE_URL",
        global = true,
        hide_env_values = true,
        value_name = "URL"
    )]
    pub database_url: Option<String>,

    /// Read the database URL from this file instead (e.g. a secret mounted by
    /// the service manager); keeps a password out of the command line and the
    /// environment.
    #[arg(
        long,
        env = "HPC_LEDGER_DATABASE_URL_FILE",
        global = true,
        hide_env_values = true,
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub database_url_file: Option<PathBuf>,

    /// Directory of the embedded database (used when no database URL is given).
    #[arg(
        long,
        env = "HPC_LEDGER_HOME",
        global = true,
        default_value = ".hpc-ledger",
        value_name = "DIR"
    )]
    pub home: PathBuf,

    /// Who does it, recorded with everything a command writes (jobs,
    /// quotas, billing runs, closes, corrections, dismissals); default: the
    /// OS user.
    #[arg(long, env = "HPC_LEDGER_AUTHOR", global = true, value_name = "NAME")]
    pub author: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the database: start/stop the embedded server, show its URL, migrate.
    #[command(subcommand)]
    Db(db::Cmd),
    /// Load or show the center configuration (clusters, rate cards, projects, quotas).
    #[command(subcommand)]
    Config(config::Cmd),
    /// What would this job cost? Prices a request with the rules in force; records nothing.
    Quote(quote::Args),
    /// Record one finished job (for a scheduler's epilogue).
    #[command(subcommand)]
    Job(job::Cmd),
    /// Record many jobs from Slurm sacct output, PBS accounting logs or JSON lines.
    Import(import::Args),
    /// Take finished jobs over HTTP: Slurm's jobcomp/elasticsearch push, or JSON jobs.
    Serve(serve::Args),
    /// List the records that could not be charged, and why.
    Rejected(rejected::Args),
    /// Set and show projects' storage quotas.
    #[command(subcommand)]
    Quota(quota::Cmd),
    /// Bill storage for a month; list billing runs.
    #[command(subcommand)]
    Bill(bill::Cmd),
    /// Print a project's statement of a month (or every project's).
    Statement(statement::Args),
    /// Close a month: freeze it, number its statements, seal it.
    Close(close::CloseArgs),
    /// Recompute the seals of closed months and report any difference.
    Verify(close::VerifyArgs),
    /// Check every charge again in SQL, and every seal; non-zero exit on any finding.
    Audit(close::AuditArgs),
    /// List a project's ledger entries of a month, with their ids.
    Entries(explain::EntriesArgs),
    /// Reverse charges: exact negatives linked to them, at most once.
    Reverse(correct::ReverseArgs),
    /// Refund part of a charge, by fraction or amount, with a reason.
    Refund(correct::RefundArgs),
    /// Credit (negative) or debit a project, with a reason.
    Adjust(correct::AdjustArgs),
    /// Run the whole flow on sample data in a fresh demo database.
    Demo(demo::Args),
    /// Measure speed against PostgreSQL's own on this machine (scratch database).
    Bench(bench::Args),
}

/// A CSV cell: quoted when it holds a comma, a quote or a line break.
pub(crate) fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}

/// Output format of commands that print data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

impl Cli {
    fn target(&self) -> anyhow::Result<Target> {
        let url = match &self.database_url_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("reading the database URL from {}: {e}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
            None => self.database_url.clone(),
        };
        Ok(Target::resolve(url, &self.home)?)
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let target = cli.target()?;
    let author = crate::service::author(cli.author.as_deref());
    let by = author.as_str();
    match cli.command {
        Command::Db(cmd) => db::run(cmd, &target).await,
        Command::Config(cmd) => config::run(cmd, &target, by).await,
        Command::Quote(args) => quote::run(args, &target).await,
        Command::Job(cmd) => job::run(cmd, &target, by).await,
        Command::Entries(args) => explain::run_entries(args, &target).await,
        Command::Import(args) => import::run(args, &target, by).await,
        Command::Serve(args) => serve::run(args, &target, by).await,
        Command::Rejected(args) => rejected::run(args, &target, by).await,
        Command::Quota(cmd) => quota::run(cmd, &target, by).await,
        Command::Bill(cmd) => bill::run(cmd, &target, by).await,
        Command::Statement(args) => statement::run(args, &target).await,
        Command::Close(args) => close::run_close(args, &target, by).await,
        Command::Verify(args) => close::run_verify(args, &target).await,
        Command::Audit(args) => close::run_audit(args, &target).await,
        Command::Reverse(args) => correct::run_reverse(args, &target, by).await,
        Command::Refund(args) => correct::run_refund(args, &target, by).await,
        Command::Adjust(args) => correct::run_adjust(args, &target, by).await,
        Command::Demo(args) => demo::run(args, &target).await,
        Command::Bench(args) => bench::run(args, &target).await,
    }
}

/// Parse `--at`-style instants: a date (midnight in `tz`), a local time, or
/// RFC 3339; `None` is now.
pub fn instant(s: Option<&str>, tz: Tz) -> anyhow::Result<DateTime<Utc>> {
    match s {
        None => Ok(Utc::now()),
        Some(s) => crate::config::parse_instant(s, tz).map_err(anyhow::Error::msg),
    }
}

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// SIGTERM (a service manager stopping us) or SIGINT (Ctrl-C).
pub(crate) async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM ({e}); stop with Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping: finishing what is in flight");
}
