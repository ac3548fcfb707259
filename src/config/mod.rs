//! The center configuration file: one declarative TOML document holding the
//! currency, billing time zone, clusters (node types, queue map, dated rate
//! cards), dated storage rates, rate classes, projects with their quota and
//! class history, and discounts.
//!
//! [`parse`] reads and validates it without touching the database; every
//! problem is reported with the key it concerns. `docs/configuration.md`
//! documents every key; `examples/center.toml` is a complete example.

mod journal;
mod raw;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;

use crate::domain::period::{LocalTimeError, local_to_utc, parse_time_zone, start_of_day};
use crate::domain::pricing::RateCard;
use crate::domain::rules::Dated;
pub use crate::domain::rules::Scheduler;
use crate::domain::storage::QuotaChange;
use crate::domain::units::Bytes;
pub use journal::{FundingLine, FundingSet, JournalConfig, RevenueLine, RevenueSet};

/// A validated center configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CenterConfig {
    pub center: Center,
    pub clusters: Vec<ClusterConfig>,
    pub storage_rates: Vec<StorageRateConfig>,
    pub projects: Vec<ProjectConfig>,
    /// Rate classes (docs/rules.md R7).
    pub classes: Vec<ClassConfig>,
    /// Discounts (docs/rules.md R8).
    pub discounts: Vec<DiscountConfig>,
    /// Budget alert thresholds, percent used (docs/budgets.md).
    pub alert_thresholds: Vec<Decimal>,
    /// Grants kept in the file (docs/budgets.md).
    pub allocations: Vec<AllocationConfig>,
    /// The finance journal's layout (docs/month-end.md).
    pub journal: JournalConfig,
    /// The center's revenue accounts, in dated sets.
    pub revenue: Vec<RevenueSet>,
}

/// A grant the configuration records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocationConfig {
    pub project: String,
    pub amount: Decimal,
    pub window: Dated<()>,
    /// The one cluster it pays for (`None`: every cluster).
    pub cluster: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassConfig {
    pub name: String,
    pub description: String,
}

/// A storage rate of a class (`None`: the default class).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StorageRateConfig {
    pub class: Option<String>,
    pub rate: Dated<Decimal>,
}

/// A project's class from an instant on (`None`: the default class).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectClassConfig {
    pub effective_from: DateTime<Utc>,
    pub class: Option<String>,
}

/// Whom a discount is for: a project code or a class name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscountFor {
    Project(String),
    Class(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiscountConfig {
    pub scope: DiscountFor,
    pub percent: Decimal,
    pub period: Dated<()>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Center {
    pub name: String,
    pub currency: String,
    #[serde(serialize_with = "serialize_tz")]
    pub time_zone: Tz,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterConfig {
    pub name: String,
    pub scheduler: Scheduler,
    #[serde(serialize_with = "serialize_opt_tz")]
    pub time_zone: Option<Tz>,
    pub description: String,
    pub node_types: Vec<NodeTypeConfig>,
    pub queues: BTreeMap<String, String>,
    pub rate_cards: Vec<RateCardConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeTypeConfig {
    pub name: String,
    pub cores_per_node: u32,
    pub gpus_per_node: u32,
    /// The memory one node really has, when given: a job holding more than
    /// its nodes have is refused, and `config apply` warns when a rate
    /// card's memory per core × cores per node is below it.
    pub memory_per_node: Option<Bytes>,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateCardConfig {
    pub node_type: String,
    /// The rate class it prices; `None` = the default class.
    pub class: Option<String>,
    pub card: Dated<RateCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectConfig {
    pub code: String,
    pub name: String,
    pub pi: String,
    pub quotas: Vec<QuotaChange>,
    pub classes: Vec<ProjectClassConfig>,
    /// Who pays its statements, in dated sets (docs/month-end.md).
    pub funding: Vec<FundingSet>,
}

fn serialize_tz<S: serde::Serializer>(tz: &Tz, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(tz.name())
}

fn serialize_opt_tz<S: serde::Serializer>(tz: &Option<Tz>, s: S) -> Result<S::Ok, S::Error> {
    match tz {
        Some(tz) => s.serialize_str(tz.name()),
        None => s.serialize_none(),
    }
}

/// Everything wrong with a configuration file, one problem per line, each
/// naming its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(f, "the configuration has {n} problem{}:", if n == 1 { "" } else { "s" })?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Read and validate a configuration document.
pub fn parse(text: &str) -> Result<CenterConfig, ConfigError> {
    let file: raw::File = toml_edit::de::from_str(text).map_err(|e| ConfigError {
        problems: vec![e.to_string().trim_end().to_owned()],
    })?;
    Validator::default().run(file)
}

/// An instant written in the file: `2026-01-01` (local midnight in the
/// center's time zone), `2026-01-01T08:00:00` (local time), or with an
/// offset (`2026-01-01T08:00:00Z`, `…+01:00`).
pub fn parse_instant(s: &str, tz: Tz) -> Result<DateTime<Utc>, String> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(start_of_day(d, tz));
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return local_to_utc(t, tz).map_err(|LocalTimeError::Skipped| {
                format!("{s:?} does not exist in {}: the clocks skipped it", tz.name())
            });
        }
    }
    Err(format!(
        "{s:?} is not a date or time (write 2026-01-01, 2026-01-01T08:00:00 or 2026-01-01T08:00:00Z)"
    ))
}

const NAME_HINT: &str = "letters, digits, '.', '_' and '-', starting with a letter or digit";

#[derive(Default)]
struct Validator {
    problems: Vec<String>,
    /// The rate classes the file defines.
    classes: Vec<String>,
    /// `[journal] expense_account`: funding lines without their own.
    expense_account: Option<String>,
}

impl Validator {
    fn bad(&mut self, key: impl fmt::Display, msg: impl fmt::Display) {
        self.problems.push(format!("{key}: {msg}"));
    }

    fn run(mut self, file: raw::File) -> Result<CenterConfig, ConfigError> {
        let tz = match parse_time_zone(&file.center.time_zone) {
            Ok(tz) => tz,
            Err(e) => {
                self.bad("center.time_zone", e);
                Tz::UTC
            }
        };
        let currency = file.center.currency.trim().to_owned();
        if !(currency.len() == 3 && currency.chars().all(|c| c.is_ascii_uppercase())) {
            self.bad(
                "center.currency",
                format!("{currency:?} is not an ISO 4217 code of three capital letters (e.g. \"USD\", \"EUR\")"),
            );
        }
        if file.center.name.trim().is_empty() || file.center.name.len() > 200 {
            self.bad("center.name", "must be 1 to 200 characters");
        }
        let center = Center {
            name: file.center.name.trim().to_owned(),
            currency,
            time_zone: tz,
        };

        let mut classes: Vec<ClassConfig> = Vec::new();
        for (i, c) in file.rate_classes.into_iter().enumerate() {
            let key = format!("rate_class[{i}] ({:?})", c.name);
            if !valid_class(&c.name) {
                self.bad(
                    &key,
                    "a class name is 1 to 64 lower-case letters, digits, '_' or '-', starting with a letter, and not \"default\"",
                );
            }
            if classes.iter().any(|o| o.name == c.name) {
                self.bad(&key, "defined twice");
            }
            if c.description.len() > 500 {
                self.bad(format!("{key}.description"), "must be at most 500 characters");
            }
            classes.push(ClassConfig {
                name: c.name,
                description: c.description,
            });
        }
        self.classes = classes.iter().map(|c| c.name.clone()).collect();

        let mut seen = BTreeSet::new();
        let clusters: Vec<ClusterConfig> = file
            .clusters
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let key = format!("cluster[{i}] ({:?})", c.name);
                if !seen.insert(c.name.to_lowercase()) {
                    self.bad(&key, "a cluster of this name is already defined");
                }
                self.cluster(&key, c, tz)
            })
            .collect();

        let storage_rates = self.storage_rates(file.storage_rates, tz);
        let (journal, expense_account) = self.journal(file.journal);
        self.expense_account = expense_account;
        let revenue = self.revenue(file.revenue, &clusters);

        let mut seen = BTreeSet::new();
        let projects = file
            .projects
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let key = format!("project[{i}] ({:?})", p.code);
                if !seen.insert(p.code.trim().to_lowercase()) {
                    self.bad(&key, "a project with this code (ignoring case) is already defined");
                }
                self.project(&key, p, tz)
            })
            .collect();

        let discounts = self.discounts(file.discounts, tz);
        let mut alert_thresholds: Vec<Decimal> = Vec::new();
        for (i, t) in file
            .budgets
            .map(|b| b.alert_thresholds)
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let t = t.0.normalize();
            if t <= Decimal::ZERO || t > Decimal::from(1000) || t.scale() > 2 {
                self.bad(
                    format!("budgets.alert_thresholds[{i}]"),
                    format!("{t} is not a percentage above 0, at most 1000, with at most 2 decimal places"),
                );
            } else if alert_thresholds.contains(&t) {
                self.bad(format!("budgets.alert_thresholds[{i}]"), format!("{t} is given twice"));
            } else {
                alert_thresholds.push(t);
            }
        }
        alert_thresholds.sort();
        let mut allocations: Vec<AllocationConfig> = Vec::new();
        for (i, a) in file.allocations.into_iter().enumerate() {
            let key = format!("allocation[{i}]");
            let amount = a.amount.0;
            if amount <= Decimal::ZERO || amount.scale() > 2 {
                self.bad(
                    format!("{key}.amount"),
                    format!("{amount} is not a positive amount with at most 2 decimal places"),
                );
            }
            if a.reason.trim().is_empty() || a.reason.len() > 2000 {
                self.bad(format!("{key}.reason"), "must be 1 to 2000 characters");
            }
            let Some(window) = self.window(&key, &a.from, a.until.as_deref(), tz) else {
                continue;
            };
            let from = window.valid_from;
            let reason = a.reason.trim().to_owned();
            let project = a.project.trim().to_owned();
            if allocations
                .iter()
                .any(|o| o.project.eq_ignore_ascii_case(&project) && o.window.valid_from == from && o.reason == reason)
            {
                self.bad(
                    &key,
                    "the same project, start and reason twice: give each grant its own reason",
                );
            }
            let cluster = a.cluster.as_deref().map(str::trim).map(str::to_owned);
            if let Some(c) = &cluster
                && !clusters.iter().any(|k| k.name.eq_ignore_ascii_case(c))
            {
                self.bad(format!("{key}.cluster"), format!("{c:?} is not a cluster of this file"));
            }
            allocations.push(AllocationConfig {
                project,
                amount,
                window,
                cluster,
                reason,
            });
        }

        if self.problems.is_empty() {
            Ok(CenterConfig {
                center,
                clusters,
                storage_rates,
                projects,
                classes,
                discounts,
                alert_thresholds,
                allocations,
                journal,
                revenue,
            })
        } else {
            Err(ConfigError {
                problems: self.problems,
            })
        }
    }

    /// A `class` key: a class the file defines (`None` for none, or for
    /// "default" where `default_ok`).
    fn class_ref(&mut self, key: &str, class: Option<String>, default_ok: bool) -> Option<String> {
        let name = class?;
        if default_ok && name == "default" {
            return None;
        }
        if !self.classes.contains(&name) {
            let known = if self.classes.is_empty() {
                "none".to_owned()
            } else {
                self.classes.join(", ")
            };
            self.bad(
                key,
                format!("unknown rate class {name:?} (define it with [[rate_class]]; this file defines: {known})"),
            );
        }
        Some(name)
    }

    fn discounts(&mut self, discounts: Vec<raw::Discount>, tz: Tz) -> Vec<DiscountConfig> {
        let mut out: Vec<(usize, DiscountConfig)> = Vec::new();
        for (i, d) in discounts.into_iter().enumerate() {
            let key = format!("discount[{i}]");
            let scope = match (d.project, d.class) {
                (Some(p), None) => DiscountFor::Project(p.trim().to_owned()),
                (None, Some(c)) => DiscountFor::Class(
                    self.class_ref(&format!("{key}.class"), Some(c), false)
                        .unwrap_or_default(),
                ),
                _ => {
                    self.bad(&key, "give exactly one of `project` and `class`");
                    continue;
                }
            };
            let percent = d.percent.0;
            if percent <= Decimal::ZERO || percent > Decimal::ONE_HUNDRED || percent.scale() > 4 {
                self.bad(
                    format!("{key}.percent"),
                    format!("{percent} is not a percentage above 0 and at most 100 with at most 4 decimal places"),
                );
            }
            if d.reason.trim().is_empty() || d.reason.len() > 2000 {
                self.bad(format!("{key}.reason"), "must be 1 to 2000 characters");
            }
            let Some(period) = self.window(&key, &d.from, d.until.as_deref(), tz) else {
                continue;
            };
            if let Some((j, _)) = out.iter().find(|(_, o)| o.scope == scope && o.period.overlaps(&period)) {
                self.bad(&key, format!("overlaps discount[{j}] for the same project or class"));
            }
            out.push((
                i,
                DiscountConfig {
                    scope,
                    percent,
                    period,
                    reason: d.reason.trim().to_owned(),
                },
            ));
        }
        out.into_iter().map(|(_, d)| d).collect()
    }

    /// A `from` and optional `until` under `key`, `until` after `from`; `None`
    /// (with the problem reported) when `from` cannot be read.
    fn window(&mut self, key: &str, from: &str, until: Option<&str>, tz: Tz) -> Option<Dated<()>> {
        let from = self.instant(&format!("{key}.from"), from, tz);
        let until = until.and_then(|u| self.instant(&format!("{key}.until"), u, tz));
        if let (Some(f), Some(u)) = (from, until)
            && u <= f
        {
            self.bad(format!("{key}.until"), "must be after `from`");
        }
        Some(Dated {
            valid_from: from?,
            valid_until: until,
            value: (),
        })
    }

    fn instant(&mut self, key: &str, s: &str, tz: Tz) -> Option<DateTime<Utc>> {
        parse_instant(s, tz).map_err(|e| self.bad(key, e)).ok()
    }

    fn cluster(&mut self, key: &str, c: raw::Cluster, center_tz: Tz) -> ClusterConfig {
        if !valid_name(&c.name) {
            self.bad(format!("{key}.name"), format!("must be 1 to 64 {NAME_HINT}"));
        }
        let scheduler = Scheduler::parse(&c.scheduler).unwrap_or_else(|| {
            self.bad(
                format!("{key}.scheduler"),
                format!("{:?} is not \"slurm\" or \"pbs\"", c.scheduler),
            );
            Scheduler::Slurm
        });
        let time_zone = c.time_zone.as_deref().and_then(|z| {
            parse_time_zone(z)
                .map_err(|e| self.bad(format!("{key}.time_zone"), e))
                .ok()
        });
        // Local dates of this cluster's rate cards are read in the center's zone.
        let tz = center_tz;

        let mut node_types = Vec::new();
        for (i, n) in c.node_types.into_iter().enumerate() {
            let nkey = format!("{key}.node_type[{i}] ({:?})", n.name);
            if !valid_node_type(&n.name) {
                self.bad(
                    &nkey,
                    "a node type name is 1 to 64 lower-case letters, digits, '_' or '-', starting with a letter",
                );
            }
            if node_types.iter().any(|t: &NodeTypeConfig| t.name == n.name) {
                self.bad(&nkey, "defined twice");
            }
            if n.cores_per_node == 0 || n.cores_per_node > 1_000_000 {
                self.bad(format!("{nkey}.cores_per_node"), "must be between 1 and 1000000");
            }
            if n.gpus_per_node > 100_000 {
                self.bad(format!("{nkey}.gpus_per_node"), "must be at most 100000");
            }
            let memory_per_node = match n.memory_per_node.as_deref().map(|m| Bytes::parse(m, 1)) {
                None => None,
                Some(Ok(m)) if m.0 > 0 && m.0 <= 1 << 60 => Some(m),
                Some(Ok(_)) => {
                    self.bad(
                        format!("{nkey}.memory_per_node"),
                        "must be more than 0 and at most 1 EiB",
                    );
                    None
                }
                Some(Err(e)) => {
                    self.bad(format!("{nkey}.memory_per_node"), e);
                    None
                }
            };
            node_types.push(NodeTypeConfig {
                name: n.name,
                cores_per_node: n.cores_per_node,
                gpus_per_node: n.gpus_per_node,
                memory_per_node,
                description: n.description,
            });
        }

        for (queue, node_type) in &c.queues {
            if queue.is_empty() || queue.len() > 128 {
                self.bad(
                    format!("{key}.queues"),
                    format!("queue name {queue:?} must be 1 to 128 characters"),
                );
            }
            if !node_types.iter().any(|t| &t.name == node_type) {
                self.bad(
                    format!("{key}.queues.{queue}"),
                    format!(
                        "unknown node type {node_type:?} (this cluster defines: {})",
                        names(&node_types)
                    ),
                );
            }
        }

        let mut cards: Vec<(usize, RateCardConfig, bool)> = Vec::new();
        for (i, r) in c.rate_cards.into_iter().enumerate() {
            let rkey = format!("{key}.rate_card[{i}]");
            let node = node_types.iter().find(|t| t.name == r.node_type);
            if node.is_none() {
                self.bad(
                    format!("{rkey}.node_type"),
                    format!(
                        "unknown node type {:?} (this cluster defines: {})",
                        r.node_type,
                        names(&node_types)
                    ),
                );
            }
            let from = self.instant(&format!("{rkey}.from"), &r.from, tz);
            let until = r
                .until
                .as_deref()
                .and_then(|u| self.instant(&format!("{rkey}.until"), u, tz));
            if let (Some(f), Some(u)) = (from, until)
                && u <= f
            {
                self.bad(format!("{rkey}.until"), "must be after `from`");
            }
            for (field, value) in [("core_hour", r.core_hour.0), ("gpu_hour", r.gpu_hour.0)] {
                self.price(&format!("{rkey}.{field}"), value);
            }
            let memory_per_core = match Bytes::parse(&r.memory_per_core, 1) {
                Ok(b) if b.0 > 0 => b,
                Ok(_) => {
                    self.bad(format!("{rkey}.memory_per_core"), "must be more than 0");
                    Bytes(1)
                }
                Err(e) => {
                    self.bad(format!("{rkey}.memory_per_core"), e);
                    Bytes(1)
                }
            };
            let class = self.class_ref(&format!("{rkey}.class"), r.class, false);
            let cores_per_node = r.cores_per_node.or(node.map(|n| n.cores_per_node)).unwrap_or(1);
            if cores_per_node == 0 || cores_per_node > 1_000_000 {
                self.bad(format!("{rkey}.cores_per_node"), "must be between 1 and 1000000");
            }
            if let Some(from) = from {
                cards.push((
                    i,
                    RateCardConfig {
                        node_type: r.node_type,
                        class,
                        card: Dated {
                            valid_from: from,
                            valid_until: until,
                            value: RateCard {
                                core_hour: r.core_hour.0,
                                gpu_hour: r.gpu_hour.0,
                                memory_per_core,
                                cores_per_node,
                            },
                        },
                    },
                    until.is_some(),
                ));
            }
        }
        let rate_cards = self.settle_periods(key, cards);

        ClusterConfig {
            name: c.name,
            scheduler,
            time_zone,
            description: c.description,
            node_types,
            queues: c.queues,
            rate_cards,
        }
    }

    /// Give open-ended cards the next card's start as their end, and report
    /// overlaps, per node type and class.
    fn settle_periods(&mut self, key: &str, mut cards: Vec<(usize, RateCardConfig, bool)>) -> Vec<RateCardConfig> {
        cards.sort_by(|a, b| {
            (&a.1.node_type, &a.1.class, a.1.card.valid_from).cmp(&(&b.1.node_type, &b.1.class, b.1.card.valid_from))
        });
        for i in 1..cards.len() {
            let (prev, next) = cards.split_at_mut(i);
            let (pi, p, p_explicit) = prev.last_mut().expect("i >= 1");
            let (ni, n, _) = &next[0];
            if p.node_type != n.node_type || p.class != n.class {
                continue;
            }
            if !*p_explicit {
                p.card.valid_until = Some(n.card.valid_from);
            }
            if p.card.overlaps(&n.card) || p.card.valid_from == n.card.valid_from {
                self.bad(
                    format!("{key}.rate_card[{ni}]"),
                    format!(
                        "overlaps rate_card[{pi}] for node type {:?}{} ({} until {})",
                        p.node_type,
                        p.class.as_ref().map_or(String::new(), |c| format!(" and class {c:?}")),
                        p.card.valid_from,
                        p.card
                            .valid_until
                            .map_or("further notice".to_owned(), |u| u.to_string())
                    ),
                );
            }
        }
        cards.into_iter().map(|(_, c, _)| c).collect()
    }

    fn price(&mut self, key: &str, value: Decimal) {
        if value.is_sign_negative() && !value.is_zero() {
            self.bad(key, format!("negative price {value}"));
        } else if value.scale() > 10 {
            self.bad(key, format!("{value} has more than 10 decimal places"));
        } else if value >= Decimal::from(10_000_000_000u64) {
            self.bad(key, format!("{value} is too large"));
        }
    }

    fn storage_rates(&mut self, rates: Vec<raw::StorageRate>, tz: Tz) -> Vec<StorageRateConfig> {
        let mut out: Vec<(usize, StorageRateConfig, bool)> = Vec::new();
        for (i, r) in rates.into_iter().enumerate() {
            let key = format!("storage_rate[{i}]");
            self.price(&format!("{key}.tb_month"), r.tb_month.0);
            let class = self.class_ref(&format!("{key}.class"), r.class, false);
            let from = self.instant(&format!("{key}.from"), &r.from, tz);
            let until = r
                .until
                .as_deref()
                .and_then(|u| self.instant(&format!("{key}.until"), u, tz));
            if let (Some(f), Some(u)) = (from, until)
                && u <= f
            {
                self.bad(format!("{key}.until"), "must be after `from`");
            }
            if let Some(from) = from {
                out.push((
                    i,
                    StorageRateConfig {
                        class,
                        rate: Dated {
                            valid_from: from,
                            valid_until: until,
                            value: r.tb_month.0,
                        },
                    },
                    until.is_some(),
                ));
            }
        }
        out.sort_by(|(_, a, _), (_, b, _)| (&a.class, a.rate.valid_from).cmp(&(&b.class, b.rate.valid_from)));
        for i in 1..out.len() {
            let (prev, next) = out.split_at_mut(i);
            let (pi, p, explicit) = prev.last_mut().expect("i >= 1");
            let (ni, n, _) = &next[0];
            if p.class != n.class {
                continue;
            }
            if !*explicit {
                p.rate.valid_until = Some(n.rate.valid_from);
            }
            if p.rate.overlaps(&n.rate) || p.rate.valid_from == n.rate.valid_from {
                self.bad(format!("storage_rate[{ni}]"), format!("overlaps storage_rate[{pi}]"));
            }
        }
        out.into_iter().map(|(_, d, _)| d).collect()
    }

    fn project(&mut self, key: &str, p: raw::Project, tz: Tz) -> ProjectConfig {
        let code = p.code.trim().to_owned();
        if code.is_empty() || code.len() > 128 || code.chars().any(char::is_control) {
            self.bad(
                format!("{key}.code"),
                "must be 1 to 128 characters without control characters",
            );
        }
        // Codes are matched ignoring case, lowered here (Unicode's rules, a
        // final sigma and all) and by PostgreSQL's lower() (each character
        // alone, to one character): a code the two lower differently would
        // be listed but never found.
        let alone: Option<String> = code
            .chars()
            .map(|c| {
                let mut l = c.to_lowercase();
                match (l.next(), l.next()) {
                    (Some(one), None) => Some(one),
                    _ => None,
                }
            })
            .collect();
        if alone.as_deref() != Some(code.to_lowercase().as_str()) {
            self.bad(
                format!("{key}.code"),
                "holds a letter whose lower case depends on where it stands or takes two letters (a final Σ, \
                 İ): project codes are matched ignoring case, and this one could not be found; write it otherwise",
            );
        }
        if p.name.len() > 500 {
            self.bad(format!("{key}.name"), "must be at most 500 characters");
        }
        if p.pi.len() > 500 {
            self.bad(format!("{key}.pi"), "must be at most 500 characters");
        }
        let mut quotas: Vec<QuotaChange> = Vec::new();
        for (i, q) in p.quota.into_iter().enumerate() {
            let qkey = format!("{key}.quota[{i}]");
            let Some(from) = self.instant(&format!("{qkey}.from"), &q.from, tz) else {
                continue;
            };
            let tb = q.tb.0;
            if tb.is_sign_negative() && !tb.is_zero() {
                self.bad(format!("{qkey}.tb"), format!("negative quota {tb}"));
            } else if tb.scale() > 6 || tb > Decimal::from(1_000_000_000) {
                self.bad(
                    format!("{qkey}.tb"),
                    format!("{tb} TB is not a quota (at most 6 decimal places, at most 10^9 TB)"),
                );
            }
            if quotas.iter().any(|o| o.effective_from == from) {
                self.bad(&qkey, format!("a quota from {from} is already given"));
            }
            quotas.push(QuotaChange {
                effective_from: from,
                quota_tb: tb,
            });
        }
        quotas.sort_by_key(|q| q.effective_from);
        let mut classes: Vec<ProjectClassConfig> = Vec::new();
        for (i, c) in p.class.into_iter().enumerate() {
            let ckey = format!("{key}.class[{i}]");
            let class = self.class_ref(&format!("{ckey}.name"), Some(c.name), true);
            let Some(from) = self.instant(&format!("{ckey}.from"), &c.from, tz) else {
                continue;
            };
            if classes.iter().any(|o| o.effective_from == from) {
                self.bad(&ckey, format!("a class from {from} is already given"));
            }
            classes.push(ProjectClassConfig {
                effective_from: from,
                class,
            });
        }
        classes.sort_by_key(|c| c.effective_from);
        let expense = self.expense_account.clone();
        let funding = self.funding(key, p.funding, expense.as_deref());
        ProjectConfig {
            code,
            name: p.name,
            pi: p.pi,
            quotas,
            classes,
            funding,
        }
    }
}

fn names(types: &[NodeTypeConfig]) -> String {
    if types.is_empty() {
        return "none".into();
    }
    types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && s.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn valid_class(s: &str) -> bool {
    valid_node_type(s) && s != "default"
}

fn valid_node_type(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && s.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
}

#[cfg(test)]
mod tests;
