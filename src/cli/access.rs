//! `hpc-ledger access`: tokens that let one project's people read its pages
//! in `serve`'s web view (docs/web.md).

use std::process::ExitCode;

use chrono::{TimeDelta, Utc};
use clap::Subcommand;

use super::{ListFormat, print_json, table};
use crate::db::Target;
use crate::service::web::{grant, revoke, tokens};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Issue a token that sees one project's pages (shown once; only its hash is kept).
    ///
    /// Examples:
    ///   hpc-ledger access grant --project PAS1234 --days 180 --note "Dr. Lovelace's group"
    ///   hpc-ledger access grant --project PAS1234 --format json
    #[command(verbatim_doc_comment)]
    Grant {
        /// The project's code.
        #[arg(long)]
        project: String,
        /// Days until it expires (at most 3 years).
        #[arg(long, default_value_t = 365,
              value_parser = clap::builder::RangedI64ValueParser::<i64>::new().range(1..=1095))]
        days: i64,
        /// Who it is for, kept with it.
        #[arg(long)]
        note: Option<String>,
        /// text prints the token and how to use it; json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: ListFormat,
    },
    /// List the tokens (never the tokens themselves): project, made, expires, revoked.
    ///
    /// Example:
    ///   hpc-ledger access list
    #[command(verbatim_doc_comment)]
    List {
        /// How to print it: text for people, csv or json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: ListFormat,
    },
    /// Revoke a token at once (by the id `access list` shows).
    ///
    /// Example:
    ///   hpc-ledger access revoke 3
    #[command(verbatim_doc_comment)]
    Revoke {
        /// The token's id.
        id: i64,
    },
}

pub async fn run(cmd: Cmd, target: &Target, by: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    // Times in the billing time zone, as every other listing shows them.
    let tz = crate::service::config::time_zone(&pool).await?;
    match cmd {
        Cmd::Grant {
            project,
            days,
            note,
            format,
        } => {
            let g = grant(&pool, &project, Utc::now() + TimeDelta::days(days), note.as_deref(), by).await?;
            match format {
                ListFormat::Json => print_json(&g)?,
                _ => {
                    println!("{}", g.token);
                    eprintln!(
                        "token {} sees project {} until {} (shown once: only its SHA-256 is kept).\n\
                         Give it to the project's people: in a browser, open serve's /ui and sign in with any \
                         user name and the token as the password; or send `Authorization: Bearer <token>`.",
                        g.id,
                        g.project,
                        super::local_time(g.expires_at, tz)
                    );
                }
            }
        }
        Cmd::List { format } => {
            let list = tokens(&pool).await?;
            let now = Utc::now();
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|t| {
                    let state = match t.revoked_at {
                        Some(r) => format!("revoked {}", r.with_timezone(&tz).format("%Y-%m-%d")),
                        None if t.expires_at <= now => "expired".into(),
                        None => "live".into(),
                    };
                    vec![
                        t.id.to_string(),
                        t.project.clone(),
                        super::local_time(t.created_at, tz),
                        t.created_by.clone(),
                        super::local_time(t.expires_at, tz),
                        state,
                        t.note.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            let header = ["id", "project", "made", "by", "expires", "state", "note"];
            match format {
                ListFormat::Json => print_json(&list)?,
                ListFormat::Csv => print!("{}", table::csv(&header, &rows)),
                ListFormat::Text => print!("{}", table::render(&header, &rows)),
            }
        }
        Cmd::Revoke { id } => {
            if revoke(&pool, id, by).await? {
                println!("token {id} revoked");
            } else {
                anyhow::bail!("no token {id}, or it was already revoked (hpc-ledger access list)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
