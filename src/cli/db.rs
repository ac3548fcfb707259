//! `hpc-ledger db …`: the embedded server's life cycle, its URL, migrations.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;

use crate::db::{self, MIGRATOR, Target, redact};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Start the embedded PostgreSQL (created on first use) and apply migrations.
    ///
    /// Example:
    ///   hpc-ledger db start --home /srv/hpc-ledger
    #[command(verbatim_doc_comment)]
    Start,
    /// Stop the embedded PostgreSQL.
    ///
    /// Example:
    ///   hpc-ledger db stop
    #[command(verbatim_doc_comment)]
    Stop,
    /// Show where the database is and whether it runs.
    ///
    /// Example:
    ///   hpc-ledger db status
    #[command(verbatim_doc_comment)]
    Status,
    /// Print the ledger database's URL (starting the embedded server if needed).
    ///
    /// Example:
    ///   psql "$(hpc-ledger db url)"
    #[command(verbatim_doc_comment)]
    Url,
    /// Make a hot standby of the embedded database under DIR (a base backup
    /// with `pg_basebackup -R`), start it and print its URL: a streaming
    /// replica on this machine for --read-database-url. Stop it with
    /// `hpc-ledger db stop --home DIR`.
    ///
    /// Example:
    ///   hpc-ledger statement --all --month 2026-10 --read-database-url "$(hpc-ledger db standby /srv/hpc-ledger-replica)"
    #[command(verbatim_doc_comment)]
    Standby {
        /// The standby's home (not the primary's).
        dir: std::path::PathBuf,
    },
    /// Apply the schema migrations to the database.
    ///
    /// Example:
    ///   DATABASE_URL=postgres://owner@db/hpc_ledger hpc-ledger db migrate
    #[command(verbatim_doc_comment)]
    Migrate,
}

pub async fn run(cmd: Cmd, target: &Target) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Start => {
            let Target::Embedded(e) = target else {
                bail!("a database URL is set: `db start` manages only the embedded database");
            };
            target.open().await?;
            println!("embedded PostgreSQL is running; data in {}", e.data_dir().display());
        }
        Cmd::Stop => {
            let Target::Embedded(e) = target else {
                bail!("a database URL is set: `db stop` manages only the embedded database");
            };
            let e = e.clone();
            let was_running = tokio::task::spawn_blocking(move || e.stop()).await??;
            println!("{}", if was_running { "stopped" } else { "not running" });
        }
        Cmd::Status => match target {
            Target::Embedded(e) => {
                let s = e.status();
                println!("embedded PostgreSQL: {}", if s.running { "running" } else { "stopped" });
                println!("data directory:      {}", s.data_dir.display());
                println!("socket directory:    {}", s.socket_dir.display());
                println!("log file:            {}", s.log_file.display());
                println!("server binaries:     {}", s.bindir.display());
                if let Some(user) = s.run_as {
                    println!("runs as:             {user}");
                }
                if s.running {
                    println!("url:                 {}", target.url(None)?);
                }
            }
            Target::External { url } => {
                let pool = db::connect(url).await?;
                let version: String = crate::db::server_version(&pool).await?;
                println!("database: {}", redact(url));
                println!("server:   {version}");
                match db::check_migrated(&pool).await {
                    Ok(()) => println!("schema:   current ({} migrations)", MIGRATOR.iter().count()),
                    Err(e) => println!("schema:   {e}"),
                }
            }
        },
        Cmd::Url => {
            target.open().await?;
            println!("{}", redact(&target.url(None)?));
        }
        Cmd::Standby { dir } => {
            let Target::Embedded(e) = target else {
                bail!(
                    "a database URL is set: `db standby` copies only the embedded database (for a server of your own, see docs/scaling.md)"
                );
            };
            target.open().await?;
            let e = e.clone();
            let standby = tokio::task::spawn_blocking(move || e.standby(&dir)).await??;
            println!("{}", standby.url(crate::embedded::DATABASE));
        }
        Cmd::Migrate => {
            target.prepare(crate::embedded::DATABASE).await?;
            let pool = db::connect(&target.url(None)?).await?;
            MIGRATOR.run(&pool).await.context("applying migrations")?;
            println!("schema is current ({} migrations)", MIGRATOR.iter().count());
        }
    }
    Ok(ExitCode::SUCCESS)
}
