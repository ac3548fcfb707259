//! `hpc-ledger quote`: what would this job cost?

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::ValueEnum;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::domain::pricing::{ChargeBasis, ChargingRules, JobPrice, RateCard};
use crate::domain::rules::Scheduler;
use crate::service::config::time_zone;
use crate::service::quote::{Quote, QuoteRequest, quote};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Dialect {
    Pbs,
    Slurm,
}

/// A job request as a user writes it: what `quote`, `check` and `hold` price.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// The cluster the job would run on.
    #[arg(long)]
    cluster: String,
    /// The request as you write it: PBS `nodes=1:ppn=4,mem=12GB` /
    /// `select=1:ncpus=4:ngpus=1`, or Slurm options `-n 4 --mem=12G --gres=gpu:1`.
    #[arg(long, allow_hyphen_values = true)]
    resources: String,
    /// Wall time, e.g. 2:00:00 or 1-12:00:00 (default: the request's own walltime/-t).
    #[arg(long)]
    walltime: Option<String>,
    /// Queue or partition (decides the node type).
    #[arg(long)]
    queue: Option<String>,
    /// Node type, instead of a queue.
    #[arg(long)]
    node_type: Option<String>,
    /// The request's syntax (default: the cluster's scheduler; Slurm when it starts with '-').
    #[arg(long, value_enum)]
    dialect: Option<Dialect>,
}

impl RequestArgs {
    pub fn cluster(&self) -> &str {
        &self.cluster
    }
    pub fn resources(&self) -> &str {
        &self.resources
    }
    pub fn walltime(&self) -> Option<&str> {
        self.walltime.as_deref()
    }
    pub fn queue(&self) -> Option<&str> {
        self.queue.as_deref()
    }
    pub fn node_type(&self) -> Option<&str> {
        self.node_type.as_deref()
    }

    /// The request priced at `at`, for a project or a class.
    pub fn quote_request(
        self,
        at: chrono::DateTime<chrono::Utc>,
        project: Option<String>,
        class: Option<String>,
    ) -> QuoteRequest {
        QuoteRequest {
            cluster: self.cluster,
            resources: self.resources,
            dialect: self.dialect.map(|d| match d {
                Dialect::Pbs => Scheduler::Pbs,
                Dialect::Slurm => Scheduler::Slurm,
            }),
            walltime: self.walltime,
            queue: self.queue,
            node_type: self.node_type,
            at,
            project,
            class,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    request: RequestArgs,
    /// Price with the rules in force at this date (default: now).
    #[arg(long)]
    at: Option<String>,
    /// Price for this project: the cards of its rate class, and its discount.
    #[arg(long, conflicts_with = "class")]
    project: Option<String>,
    /// Price by the cards of this rate class (and its discount); default: the default class.
    #[arg(long)]
    class: Option<String>,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub async fn run(args: Args, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = time_zone(&pool).await?;
    let at = super::instant(args.at.as_deref(), tz)?;
    let request = args.request.quote_request(at, args.project, args.class);
    let q = quote(&pool, &request).await?;
    match args.format {
        Format::Json => print_json(&q)?,
        Format::Text => print!("{}", render(&q, tz)),
    }
    Ok(ExitCode::SUCCESS)
}

fn hms(seconds: i64) -> String {
    format!("{}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

/// A quote's whole breakdown, as a person reads it.
pub fn render(q: &Quote, tz: chrono_tz::Tz) -> String {
    let card = &q.rate_card.value;
    let mut out = String::new();
    let queue = q.queue.as_ref().map(|q| format!(" (queue {q})")).unwrap_or_default();
    let _ = writeln!(out, "Quote: cluster {}, node type {}{queue}", q.cluster, q.node_type);
    let whom = match &q.project {
        Some(p) => format!("project {p}, rate class {}", q.rate_class),
        None => format!("rate class {}", q.rate_class),
    };
    let _ = writeln!(
        out,
        "Rules in force at {} for {whom}: rate card #{} since {}",
        q.at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"),
        q.rate_card_id,
        q.rate_card.valid_from.with_timezone(&tz).format("%Y-%m-%d")
    );
    out.push_str(&breakdown(&q.price, card, &q.currency));
    if let Some(d) = &q.discount {
        let _ = writeln!(
            out,
            "  discount {} % ({}): {:.2} {}\n  net: {:.2} {}",
            d.percent, d.reason, d.amount, q.currency, q.total, q.currency
        );
    }
    out
}

/// How a price was reached, as `quote` shows it (also `job show`): the
/// card's prices, every intermediate value, and per metric the quantity,
/// rate, exact amount and rounded amount, then the total.
pub fn breakdown(p: &JobPrice, card: &RateCard, currency: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {} per core-hour, {} per GPU-hour, {} memory per core, {} cores per node\n",
        card.core_hour, card.gpu_hour, card.memory_per_core, card.cores_per_node
    );
    let basis = match p.basis {
        ChargeBasis::Cores => "the cores it holds",
        ChargeBasis::Memory => "its memory (effective cores)",
        ChargeBasis::WholeNodes => "whole nodes (multi-node job)",
        ChargeBasis::WholeNode => "its memory, capped at a whole node",
    };
    let mut facts = vec![
        ("nodes", p.nodes.to_string()),
        ("requested cores", p.requested_cores.to_string()),
        (
            "requested memory",
            p.requested_memory.map_or("-".into(), |m| m.to_string()),
        ),
        ("memory per core", p.memory_per_core.to_string()),
        (
            "effective cores",
            p.effective_cores.map_or("-".into(), |e| e.normalize().to_string()),
        ),
    ];
    if let Some(w) = p.whole_node_cores {
        facts.push(("whole-node cores", w.to_string()));
    }
    if p.nodes == 1 && p.rules >= ChargingRules::V2 {
        // A single-node job is never charged more than a whole node.
        facts.push((
            "cap",
            format!("{} cores (a whole node)", p.cores_per_node.max(p.requested_cores)),
        ));
    }
    facts.push((
        "charged cores",
        format!("{} (charged by {basis})", p.charged_cores.normalize()),
    ));
    facts.push(("GPUs", p.gpus.to_string()));
    facts.push((
        "wall time",
        format!(
            "{} = {} s = {} h",
            hms(p.wall_seconds),
            p.wall_seconds,
            p.hours.normalize()
        ),
    ));
    for (k, v) in facts {
        let _ = writeln!(out, "  {k:<17} {v}");
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = p
        .lines
        .iter()
        .map(|l| {
            vec![
                l.metric.unit_label().to_owned(),
                l.quantity.normalize().to_string(),
                l.unit_rate.normalize().to_string(),
                l.amount_exact.normalize().to_string(),
                format!("{:.2}", l.amount),
            ]
        })
        .collect();
    out.push_str(&table::render(
        &["metric", "quantity", "rate", "exact amount", "amount"],
        &rows,
    ));
    let _ = writeln!(out, "total: {currency} {:.2}", p.total());
    out
}
