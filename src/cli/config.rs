//! `hpc-ledger config …`: load the center configuration file, show what is in force.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::{Format, print_json, table};
use crate::db::Target;
use crate::service::{self, config::InForce};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Load a center configuration file (TOML). Idempotent; all or nothing.
    ///
    /// Examples:
    ///   hpc-ledger config apply examples/center.toml
    ///   hpc-ledger config apply center.toml --dry-run   # what would change; nothing written
    #[command(verbatim_doc_comment)]
    Apply {
        /// The configuration file (see examples/center.toml).
        file: PathBuf,
        /// Show what would change, with every check the database makes
        /// (history that may not be rewritten, …), and write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the configuration in force.
    ///
    /// Examples:
    ///   hpc-ledger config show
    ///   hpc-ledger config show --at 2026-03-01 --format json
    #[command(verbatim_doc_comment)]
    Show {
        /// The instant: 2026-07-01 (midnight, billing time zone) or RFC 3339; default now.
        #[arg(long)]
        at: Option<String>,
        /// How to print it: text for people, json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

pub async fn run(cmd: Cmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Apply { file, dry_run } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let config = crate::config::parse(&text).with_context(|| format!("in {}", file.display()))?;
            let pool = target.open().await?;
            let report = if dry_run {
                service::config::apply_dry_run(&pool, &config, author).await?
            } else {
                service::config::apply(&pool, &config, author).await?
            };
            print!("{report}");
            println!(
                "{}",
                match (report.changed(), dry_run) {
                    (true, false) => "configuration applied",
                    (true, true) => "dry run: these changes would be applied; nothing was written",
                    (false, _) => "nothing to change",
                }
            );
        }
        Cmd::Show { at, format } => {
            let pool = target.open_configured().await?;
            let tz = crate::service::config::time_zone(&pool).await?;
            let at = super::instant(at.as_deref(), tz)?;
            let shown = service::config::show(&pool, at).await?;
            match format {
                Format::Json => print_json(&shown)?,
                Format::Text => print!("{}", render(&shown)),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The configuration in force, as a person reads it.
pub fn render(s: &InForce) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = &s.catalog;
    let Some(center) = &c.center else {
        return "no configuration has been applied yet: run `hpc-ledger config apply FILE`\n".into();
    };
    let tz = center.time_zone;
    let _ = writeln!(
        out,
        "{} — in force at {}",
        center.name,
        s.at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z")
    );
    let _ = writeln!(out, "currency {}, billing time zone {}", center.currency, tz.name());
    for cl in &c.clusters {
        let _ = writeln!(out, "\ncluster {} ({})", cl.name, cl.scheduler.as_str());
        // The default class's card per node type, then every other class's.
        let mut listed: Vec<(
            String,
            &crate::domain::catalog::NodeTypeInfo,
            Option<&crate::domain::catalog::CardRow>,
        )> = cl
            .node_types
            .iter()
            .map(|t| {
                let card = cl
                    .rate_cards
                    .iter()
                    .find(|r| r.node_type_id == t.id && r.class.is_none());
                (t.name.clone(), t, card)
            })
            .collect();
        for t in &cl.node_types {
            for r in cl
                .rate_cards
                .iter()
                .filter(|r| r.node_type_id == t.id && r.class.is_some())
            {
                listed.push((format!("{} ({})", t.name, c.class_name(r.class)), t, Some(r)));
            }
        }
        let rows: Vec<Vec<String>> = listed
            .into_iter()
            .map(|(label, t, card)| {
                let queues: Vec<&str> = cl
                    .queues
                    .iter()
                    .filter(|(q, _)| crate::domain::rules::queue_node_type(&cl.queues, q, s.at) == Some(&t.name))
                    .map(|(q, _)| q.as_str())
                    .collect();
                match card {
                    Some(r) => vec![
                        label,
                        r.period.value.core_hour.to_string(),
                        r.period.value.gpu_hour.to_string(),
                        r.period.value.memory_per_core.to_string(),
                        r.period.value.cores_per_node.to_string(),
                        t.gpus_per_node.to_string(),
                        t.memory_per_node.map_or(String::new(), |m| m.to_string()),
                        since(r.period.valid_from, tz),
                        queues.join(","),
                    ],
                    None => vec![
                        label,
                        "(no rate card in force)".into(),
                        String::new(),
                        String::new(),
                        t.cores_per_node.to_string(),
                        t.gpus_per_node.to_string(),
                        t.memory_per_node.map_or(String::new(), |m| m.to_string()),
                        String::new(),
                        queues.join(","),
                    ],
                }
            })
            .collect();
        out.push_str(&table::render(
            &[
                "node type",
                "core-hour",
                "GPU-hour",
                "mem/core",
                "cores/node",
                "GPUs/node",
                "mem/node",
                "since",
                "queues",
            ],
            &rows,
        ));
    }
    match c.storage_rates.iter().find(|r| r.value.class.is_none()) {
        Some(r) => {
            let _ = writeln!(
                out,
                "\nstorage: {} {} per TB-month (since {})",
                r.value.tb_month,
                center.currency,
                since(r.valid_from, tz)
            );
        }
        None => out.push_str("\nstorage: no storage rate in force\n"),
    }
    for r in c.storage_rates.iter().filter(|r| r.value.class.is_some()) {
        let _ = writeln!(
            out,
            "storage ({}): {} {} per TB-month (since {})",
            c.class_name(r.value.class),
            r.value.tb_month,
            center.currency,
            since(r.valid_from, tz)
        );
    }
    if !c.classes.is_empty() {
        let names: Vec<String> = c
            .classes
            .iter()
            .map(|k| {
                if k.description.is_empty() {
                    k.name.clone()
                } else {
                    format!("{} ({})", k.name, k.description)
                }
            })
            .collect();
        let _ = writeln!(out, "rate classes: default, {}", names.join(", "));
    }
    for d in &c.discounts {
        let whom = match d.scope {
            crate::domain::catalog::DiscountScope::Project(p) => s
                .project_codes
                .get(&p)
                .map_or(format!("project #{p}"), |code| format!("project {code}")),
            crate::domain::catalog::DiscountScope::Class(k) => format!("class {}", c.class_name(Some(k))),
        };
        let _ = writeln!(
            out,
            "discount: {} % for {whom} (since {}{}): {}",
            d.percent,
            since(d.period.valid_from, tz),
            d.period
                .valid_until
                .map_or(String::new(), |u| format!(", until {}", since(u, tz))),
            d.reason
        );
    }
    if !s.projects.is_empty() {
        out.push('\n');
        let rows: Vec<Vec<String>> = s
            .projects
            .iter()
            .map(|p| {
                vec![
                    p.code.clone(),
                    p.quota_tb.map_or("-".into(), |q| q.normalize().to_string()),
                    p.rate_class.clone(),
                    p.name.clone(),
                    p.pi.clone(),
                ]
            })
            .collect();
        out.push_str(&table::render(&["project", "quota TB", "class", "name", "PI"], &rows));
    }
    out
}

/// When a dated rule took effect, in the billing time zone: the date alone
/// when it began at local midnight (as configured with a date), else the
/// local instant with its offset (`2026-10-05T08:59:40-04:00`), so a rule that
/// began mid-day is never shown as beginning on a date it did not cover.
fn since(t: chrono::DateTime<chrono::Utc>, tz: chrono_tz::Tz) -> String {
    let local = t.with_timezone(&tz);
    if local.time() == chrono::NaiveTime::MIN {
        local.format("%Y-%m-%d").to_string()
    } else {
        local.format("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::since;

    #[test]
    fn a_start_that_is_not_midnight_is_shown_as_an_instant() {
        let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
        let ny = chrono_tz::America::New_York;
        assert_eq!(since(at("2026-10-05T04:00:00Z"), ny), "2026-10-05");
        assert_eq!(since(at("2026-10-05T08:59:40Z"), ny), "2026-10-05T04:59:40-04:00");
        assert_eq!(
            since(at("2026-10-05T08:59:40Z"), chrono_tz::UTC),
            "2026-10-05T08:59:40+00:00"
        );
    }
}
