//! `hpc-ledger usage`: what a project used and spent over months, by user,
//! cluster, node type, month or rate class.

use std::process::ExitCode;

use super::{ListFormat, print_json, table};
use crate::db::Readers;
use crate::domain::period::Month;
use crate::service::usage::{By, usage};

/// How to group the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Group {
    User,
    Cluster,
    NodeType,
    Month,
    Class,
}

/// The arguments of `usage` (its help is on the command, in cli/mod.rs).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The project's code.
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    project: Option<String>,
    /// Every project (a row per project and group).
    #[arg(long)]
    all: bool,
    /// The first month, YYYY-MM.
    #[arg(long)]
    from: Month,
    /// The last month, YYYY-MM (default: the first).
    #[arg(long)]
    to: Option<Month>,
    /// Group by user, cluster, node type (cluster/node type), month, or rate class (of the card or storage rate that priced each charge).
    #[arg(long, value_enum)]
    by: Group,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: ListFormat,
}

pub async fn run(args: Args, readers: &Readers) -> anyhow::Result<ExitCode> {
    let pool = readers.open_configured().await?;
    let by = match args.by {
        Group::User => By::User,
        Group::Cluster => By::Cluster,
        Group::NodeType => By::NodeType,
        Group::Month => By::Month,
        Group::Class => By::Class,
    };
    let to = args.to.unwrap_or(args.from);
    let report = usage(&pool, args.project.as_deref(), args.from, to, by).await?;
    let group = match by {
        By::User => "user",
        By::Cluster => "cluster",
        By::NodeType => "node type",
        By::Month => "month",
        By::Class => "class",
    };
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            vec![
                r.project.clone(),
                r.key.clone(),
                r.jobs.to_string(),
                r.core_hours.normalize().to_string(),
                r.gpu_hours.normalize().to_string(),
                r.tb_months.normalize().to_string(),
                format!("{:.2}", r.amount),
            ]
        })
        .collect();
    match args.format {
        ListFormat::Json => print_json(&report)?,
        ListFormat::Csv => print!(
            "{}",
            table::csv(
                &[
                    "project",
                    &group.replace(' ', "_"),
                    "jobs",
                    "core_hours",
                    "gpu_hours",
                    "tb_months",
                    "amount"
                ],
                &rows
            )
        ),
        ListFormat::Text => {
            print!(
                "{}",
                table::render(
                    &[
                        "project",
                        group,
                        "jobs",
                        "core-hours",
                        "GPU-hours",
                        "TB-months",
                        "amount"
                    ],
                    &rows
                )
            );
            let total: rust_decimal::Decimal = report.rows.iter().map(|r| r.amount).sum();
            let span = if report.from == report.to {
                report.from.to_string()
            } else {
                format!("{} to {}", report.from, report.to)
            };
            println!("total {span}: {total:.2}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
