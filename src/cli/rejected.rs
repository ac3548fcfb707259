//! `hpc-ledger rejected`: the records that could not be charged, and why.

use std::process::ExitCode;

use super::{Format, print_json, table};
use crate::db::{Target, rejected};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also list the ones resolved since.
    #[arg(long)]
    all: bool,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run(args: Args, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open().await?;
    let mut conn = pool.acquire().await?;
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = rejected::list(&mut conn, after, 10_000, args.all).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        rows.extend(page);
    }
    match args.format {
        Format::Json => print_json(&rows)?,
        Format::Text => {
            let lines: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.id.to_string(),
                        r.source_ref.clone(),
                        r.job_key.clone().unwrap_or_default(),
                        r.kind.clone(),
                        r.resolution.clone().unwrap_or_else(|| "open".into()),
                        r.reason.clone(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::render(&["id", "where", "job", "kind", "status", "reason"], &lines)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
