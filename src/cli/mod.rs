//! The command line (clap derive): one module per noun, each with its own
//! arguments and `run`. Results go to stdout, logs and errors to stderr.

mod access;
mod archive;
mod bench;
mod bill;
mod budget;
mod close;
mod config;
mod correct;
mod db;
mod demo;
mod explain;
mod export;
mod import;
mod job;
mod quota;
mod quote;
mod rejected;
mod serve;
mod statement;
mod table;
mod usage;

use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{Parser, Subcommand, ValueEnum};

use crate::db::{Readers, Target};

/// A charge-back ledger for HPC centers: finished jobs and storage quotas in,
/// priced immutable ledger entries out.
#[derive(Debug, Parser)]
#[command(
    name = "hpc-ledger",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("HPC_LEDGER_COMMIT"), ")"),
    propagate_version = true,
    after_help = "Examples:\n  hpc-ledger config apply examples/center.toml\n  hpc-ledger import --format slurm sacct.txt\n  \
                  hpc-ledger bill storage --through 2026-10 && hpc-ledger close --through 2026-10\n\n\
                  Docs: README.md and docs/ in the source; `hpc-ledger man` writes the manual pages."
)]
pub struct Cli {
    /// PostgreSQL URL of the ledger database. Without it, hpc-ledger starts
    /// and uses its own embedded PostgreSQL under --home.
    #[arg(
        long,
        env = "DATABASE_URL",
        global = true,
        help_heading = "Database",
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
        help_heading = "Database",
        hide_env_values = true,
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub database_url_file: Option<PathBuf>,

    /// PostgreSQL URL of a streaming replica of the ledger database: the
    /// commands that only read (statement, usage, audit, verify) and serve's
    /// web view read from it; everything that writes stays on the primary
    /// (docs/scaling.md).
    #[arg(
        long,
        env = "HPC_LEDGER_READ_DATABASE_URL",
        global = true,
        help_heading = "Database",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub read_database_url: Option<String>,

    /// Read the replica's URL from this file instead.
    #[arg(
        long,
        env = "HPC_LEDGER_READ_DATABASE_URL_FILE",
        global = true,
        help_heading = "Database",
        hide_env_values = true,
        value_name = "FILE",
        conflicts_with = "read_database_url"
    )]
    pub read_database_url_file: Option<PathBuf>,

    /// Directory of the embedded database (used when no database URL is given).
    #[arg(
        long,
        env = "HPC_LEDGER_HOME",
        global = true,
        help_heading = "Database",
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
    ///
    /// Examples:
    ///   hpc-ledger quote --cluster pitzer --queue batch --resources 'nodes=1:ppn=1,mem=12GB' --walltime 2:00:00
    ///   hpc-ledger quote --cluster owens --queue gpu --resources '-n 8 --gres=gpu:2' --walltime 1:30:00 --format json
    #[command(verbatim_doc_comment)]
    Quote(quote::Args),
    /// Record one finished job (for a scheduler's epilogue).
    #[command(subcommand)]
    Job(job::Cmd),
    /// Record many jobs from Slurm sacct output, PBS accounting logs or JSON lines.
    ///
    /// Examples:
    ///   hpc-ledger import --format slurm sacct-2026-10.txt
    ///   hpc-ledger import --format pbs --cluster pitzer /var/spool/pbs/server_priv/accounting/202610*
    ///   hpc-ledger import --retry-rejected --id 7
    #[command(verbatim_doc_comment)]
    Import(import::Args),
    /// Take finished jobs over HTTP: Slurm's jobcomp/elasticsearch push, or JSON jobs.
    ///
    /// Example:
    ///   HPC_LEDGER_SERVE_BASIC_FILE=/etc/hpc-ledger/serve-basic hpc-ledger serve --listen 0.0.0.0:8080
    #[command(verbatim_doc_comment)]
    Serve(serve::Args),
    /// List the records that could not be charged, and why.
    ///
    /// Examples:
    ///   hpc-ledger rejected
    ///   hpc-ledger rejected --all --format json
    #[command(verbatim_doc_comment)]
    Rejected(rejected::Args),
    /// Set and show projects' storage quotas.
    #[command(subcommand)]
    Quota(quota::Cmd),
    /// Bill storage for a month; list billing runs.
    #[command(subcommand)]
    Bill(bill::Cmd),
    /// Print a project's statement of a month (or every project's): text, CSV, JSON, or an HTML
    /// document to read, file and print (one per project, and an index, with --all --out).
    ///
    /// Examples:
    ///   hpc-ledger statement --project PAS1234 --month 2026-10
    ///   hpc-ledger statement --project PAS1234 --month 2026-10 --format html > PAS1234-2026-10.html
    ///   hpc-ledger statement --all --month 2026-10 --out statements/
    ///   hpc-ledger statement --all --month 2026-10 --format html --out statements/
    ///   hpc-ledger statement --project PAS1234 --month 2026-10 --format pdf > PAS1234-2026-10.pdf
    #[command(verbatim_doc_comment)]
    Statement(statement::Args),
    /// Close a month: freeze it, number its statements, seal it.
    ///
    /// Examples:
    ///   hpc-ledger close --month 2026-10 --anchor-file seals.jsonl
    ///   hpc-ledger close --through 2026-10     # every open month up to October, in order
    #[command(verbatim_doc_comment)]
    Close(close::CloseArgs),
    /// Recompute the seals of closed months and report any difference.
    ///
    /// Examples:
    ///   hpc-ledger verify
    ///   hpc-ledger verify --against seals.jsonl
    ///   hpc-ledger verify --archive /archive/hpc-ledger
    #[command(verbatim_doc_comment)]
    Verify(close::VerifyArgs),
    /// Check every charge again in SQL, and every seal; non-zero exit on any finding.
    ///
    /// Examples:
    ///   hpc-ledger audit
    ///   hpc-ledger audit --deep --format json
    #[command(verbatim_doc_comment)]
    Audit(close::AuditArgs),
    /// Move closed months out of the live ledger into sealed files (retention).
    ///
    /// Examples:
    ///   hpc-ledger archive --through 2019-12 --to /archive/hpc-ledger
    ///   hpc-ledger verify --archive /archive/hpc-ledger
    #[command(verbatim_doc_comment)]
    Archive(archive::Args),
    /// Tokens that let one project's people read its pages in serve's web view (/ui).
    #[command(subcommand)]
    Access(access::Cmd),
    /// Export for other systems: a closed month's finance journal.
    #[command(subcommand)]
    Export(export::Cmd),
    /// What a project used and spent over months, by user, cluster, node type, month or rate class.
    ///
    /// Jobs, core-hours, GPU-hours, TB-months and the net amount (corrections
    /// included, counted where what they correct counts), from the ledger.
    ///
    /// Examples:
    ///   hpc-ledger usage --project PAS1234 --from 2026-07 --to 2026-10 --by user
    ///   hpc-ledger usage --all --from 2026-01 --to 2026-10 --by month --format csv
    #[command(verbatim_doc_comment)]
    Usage(usage::Args),
    /// List a project's ledger entries of a month, with their ids.
    ///
    /// Examples:
    ///   hpc-ledger entries --project PAS1234 --month 2026-10
    ///   hpc-ledger entries --project PAS1234 --month 2026-10 --kind storage --format csv
    #[command(verbatim_doc_comment)]
    Entries(explain::EntriesArgs),
    /// Reverse charges: exact negatives linked to them, at most once.
    ///
    /// Examples:
    ///   hpc-ledger reverse --entry 42 --reason "charged twice by hand"
    ///   hpc-ledger reverse --cluster owens --job-id 1009 --reason "debug partition is free"
    #[command(verbatim_doc_comment)]
    Reverse(correct::ReverseArgs),
    /// Refund part of a charge, by fraction or amount, with a reason.
    ///
    /// Examples:
    ///   hpc-ledger refund --cluster owens --job-id 1004 --fraction 0.5 --reason "node failure"
    ///   hpc-ledger refund --entry 42 --amount 1.50 --reason "goodwill"
    #[command(verbatim_doc_comment)]
    Refund(correct::RefundArgs),
    /// Credit (negative) or debit a project, with a reason.
    ///
    /// Example:
    ///   hpc-ledger adjust --project PZS0708 --amount -10.00 --reason "allocation award credit"
    #[command(verbatim_doc_comment)]
    Adjust(correct::AdjustArgs),
    /// Allocations: money a project may spend in a window (grant, reduce, transfer, list).
    ///
    /// Examples:
    ///   hpc-ledger alloc grant PAS1234 5000.00 --from 2026-07-01 --until 2027-07-01 --reason "award 2026-123"
    ///   hpc-ledger alloc list --project PAS1234
    #[command(verbatim_doc_comment, subcommand)]
    Alloc(budget::AllocCmd),
    /// What a project may still spend: allocated, used, held, remaining, burn rate, run-out date.
    ///
    /// Examples:
    ///   hpc-ledger balance PAS1234
    ///   hpc-ledger balance --all --format csv
    #[command(verbatim_doc_comment)]
    Balance(budget::BalanceArgs),
    /// May this job start? Its quote for the project against what remains (exit 0 yes, 7 no).
    ///
    /// Examples:
    ///   hpc-ledger check --project PAS1234 --cluster owens --queue batch --resources '-n 28' --walltime 4:00:00
    ///   hpc-ledger check --server ledger:8080 --on-unreachable allow --project PAS1234 --cluster owens --queue batch --resources '-n 28' --walltime 4:00:00 --format json
    #[command(verbatim_doc_comment)]
    Check(budget::CheckArgs),
    /// Hold what a job about to run may cost, until its charge is recorded (or it expires).
    ///
    /// Example:
    ///   hpc-ledger hold --project PAS1234 --job-id 5001 --cluster owens --queue batch --resources '-n 28' --walltime 4:00:00
    #[command(verbatim_doc_comment)]
    Hold(budget::HoldArgs),
    /// Budget alerts: thresholds of the allocations used, each crossing recorded once and delivered.
    ///
    /// Examples:
    ///   hpc-ledger alerts
    ///   hpc-ledger alerts --check --command 'curl -fsS -d @- https://hooks.example.edu/budget'   # from cron
    #[command(verbatim_doc_comment)]
    Alerts(budget::AlertsArgs),
    /// Enforce budgets in Slurm through sacctmgr (docs/budgets.md, docs/slurm.md).
    ///
    /// Example:
    ///   hpc-ledger slurm sync --cluster owens --dry-run
    #[command(verbatim_doc_comment, subcommand)]
    Slurm(budget::SlurmCmd),
    /// Run the whole flow on sample data in a fresh demo database.
    ///
    /// Example:
    ///   cargo run --release -- demo
    #[command(verbatim_doc_comment)]
    Demo(demo::Args),
    /// Measure speed against PostgreSQL's own on this machine (scratch database).
    ///
    /// Examples:
    ///   hpc-ledger bench
    ///   hpc-ledger bench --full --format json
    #[command(verbatim_doc_comment)]
    Bench(bench::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// Example: hpc-ledger completions bash > /etc/bash_completion.d/hpc-ledger
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (roff), generated from these definitions.
    ///
    /// Example: hpc-ledger man --out /usr/local/share/man/man1
    Man {
        /// Directory for hpc-ledger.1 and one page per command (default: print
        /// hpc-ledger.1 on stdout).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// An instant as printed to people: in the center's billing time zone, with
/// the zone shown (`2026-11-30 17:04 EST`).
pub(crate) fn local_time(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string()
}

/// A CSV cell: quoted when it holds a comma, a quote or a line break.
pub(crate) use crate::document::csv_field;

/// Output format of commands that print a list: also CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ListFormat {
    #[default]
    Text,
    Csv,
    Json,
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
        let url = url_or_file(&self.database_url, &self.database_url_file, "database URL")?;
        Ok(Target::resolve(url, &self.home)?)
    }

    /// Where the commands that only read go: the replica, when one is given.
    fn readers(&self, target: &Target) -> anyhow::Result<Readers> {
        let replica = url_or_file(
            &self.read_database_url,
            &self.read_database_url_file,
            "replica's database URL",
        )?
        .filter(|u| !u.trim().is_empty());
        Ok(Readers {
            primary: target.clone(),
            replica,
        })
    }
}

/// A URL given as such or in a file (a secret mounted by the service manager).
fn url_or_file(url: &Option<String>, file: &Option<PathBuf>, what: &str) -> anyhow::Result<Option<String>> {
    Ok(match file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("reading the {what} from {}: {e}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => url.clone(),
    })
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // `check --server` asks serve and needs no database of its own: a
    // submit host has no PostgreSQL, and a hook's working directory must
    // not get an embedded ledger's home (it exited 1 there, never asking).
    let cli = match cli.command {
        Command::Check(args) if args.asks_server() => return budget::run_check(args, None).await,
        command => Cli { command, ..cli },
    };
    let target = cli.target()?;
    let readers = cli.readers(&target)?;
    let author = crate::service::author(cli.author.as_deref());
    let by = author.as_str();
    match cli.command {
        Command::Db(cmd) => db::run(cmd, &target).await,
        Command::Config(cmd) => config::run(cmd, &target, by).await,
        Command::Quote(args) => quote::run(args, &target).await,
        Command::Job(cmd) => job::run(cmd, &target, by).await,
        Command::Entries(args) => explain::run_entries(args, &target).await,
        Command::Usage(args) => usage::run(args, &readers).await,
        Command::Export(cmd) => export::run(cmd, &target, by).await,
        Command::Access(cmd) => access::run(cmd, &target, by).await,
        Command::Alloc(cmd) => budget::run_alloc(cmd, &target, by).await,
        Command::Balance(args) => budget::run_balance(args, &target).await,
        Command::Check(args) => budget::run_check(args, Some(&target)).await,
        Command::Hold(args) => budget::run_hold(args, &target, by).await,
        Command::Slurm(cmd) => budget::run_slurm(cmd, &target, by).await,
        Command::Alerts(args) => budget::run_alerts(args, &target).await,
        Command::Import(args) => import::run(args, &target, by).await,
        Command::Serve(args) => serve::run(args, &target, &readers, by).await,
        Command::Rejected(args) => rejected::run(args, &target, by).await,
        Command::Quota(cmd) => quota::run(cmd, &target, by).await,
        Command::Bill(cmd) => bill::run(cmd, &target, by).await,
        Command::Statement(args) => statement::run(args, &readers).await,
        Command::Close(args) => close::run_close(args, &target, by).await,
        Command::Verify(args) => close::run_verify(args, &readers).await,
        Command::Audit(args) => close::run_audit(args, &readers).await,
        Command::Archive(args) => archive::run(args, &target, by).await,
        Command::Reverse(args) => correct::run_reverse(args, &target, by).await,
        Command::Refund(args) => correct::run_refund(args, &target, by).await,
        Command::Adjust(args) => correct::run_adjust(args, &target, by).await,
        Command::Demo(args) => demo::run(args, &target).await,
        Command::Bench(args) => bench::run(args, &target).await,
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "hpc-ledger", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { out } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            match out {
                None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?,
                Some(dir) => {
                    std::fs::create_dir_all(&dir)?;
                    clap_mangen::generate_to(cmd, &dir)?;
                    println!("manual pages written to {}", dir.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
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

#[cfg(test)]
mod help_tests {
    use clap::CommandFactory;

    /// Every command a user can run, with its path (`bill storage`).
    fn leaves(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|c| c.get_name() != "help").collect();
        if subs.is_empty() || cmd.is_args_conflicts_with_subcommands_set() {
            out.push((path.clone(), cmd.clone()));
        }
        for s in subs {
            leaves(s, format!("{path} {}", s.get_name()).trim().to_owned(), out);
        }
    }

    /// Issue 20, item 7: every `--help` has an example, every flag a description.
    #[test]
    fn every_command_has_an_example_and_every_flag_a_description() {
        let root = super::Cli::command();
        let mut all = Vec::new();
        leaves(&root, String::new(), &mut all);
        let mut missing = Vec::new();
        for (path, cmd) in &all {
            let mut cmd = cmd.clone();
            let help = cmd.render_long_help().to_string();
            if !help.contains("Example") {
                missing.push(format!("`{path}`: no example in --help"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("`{path}` {id}: no description"));
                }
            }
        }
        assert!(missing.is_empty(), "{} missing:\n{}", missing.len(), missing.join("\n"));
        assert!(all.len() >= 30, "only {} commands found", all.len());
    }
}
