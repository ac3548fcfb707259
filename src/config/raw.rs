//! The configuration file as written, before validation (serde shapes).

use std::collections::BTreeMap;
use std::fmt;

use rust_decimal::Decimal;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub center: CenterSection,
    #[serde(default, rename = "cluster")]
    pub clusters: Vec<Cluster>,
    #[serde(default, rename = "storage_rate")]
    pub storage_rates: Vec<StorageRate>,
    #[serde(default, rename = "project")]
    pub projects: Vec<Project>,
    #[serde(default, rename = "rate_class")]
    pub rate_classes: Vec<RateClass>,
    #[serde(default, rename = "discount")]
    pub discounts: Vec<Discount>,
    #[serde(default)]
    pub budgets: Option<Budgets>,
    #[serde(default, rename = "allocation")]
    pub allocations: Vec<Allocation>,
    /// How the finance journal is written.
    #[serde(default)]
    pub journal: Option<Journal>,
    /// The center's revenue accounts, in dated sets.
    #[serde(default)]
    pub revenue: Vec<Revenue>,
}

/// `[journal]`: the finance journal's layout.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    /// The expense account (object code) debited on funding sources that
    /// name none.
    #[serde(default)]
    pub expense_account: Option<String>,
    /// The CSV columns, in order.
    #[serde(default)]
    pub columns: Vec<JournalColumn>,
}

/// One CSV column: its header and a field of the line or fixed text.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalColumn {
    pub header: String,
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
}

/// `[[revenue]]`: one revenue account of the set beginning in `from`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Revenue {
    pub from: When,
    /// `default`, `compute`, `storage` or `adjustments` (or give `cluster`).
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub cluster: Option<String>,
    #[serde(default)]
    pub node_type: Option<String>,
    pub fund: String,
    pub cost_center: String,
    pub account: String,
}

/// One line of a project's funding set beginning in `from`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Funding {
    pub from: When,
    pub fund: String,
    pub cost_center: String,
    #[serde(default)]
    pub grant: Option<String>,
    /// The expense account debited (default: `[journal] expense_account`).
    #[serde(default)]
    pub account: Option<String>,
    pub share: Dec,
}

/// A grant kept in the configuration (an award a center records there).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    pub project: String,
    pub amount: Dec,
    pub from: When,
    #[serde(default)]
    pub until: Option<When>,
    /// Pay only for jobs on this cluster (its own pool).
    #[serde(default)]
    pub cluster: Option<String>,
    pub reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// Percent of the allocations in force used at which an alert is raised.
    #[serde(default)]
    pub alert_thresholds: Vec<Dec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateClass {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Discount {
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub class: Option<String>,
    pub percent: Dec,
    pub from: When,
    #[serde(default)]
    pub until: Option<When>,
    pub reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CenterSection {
    pub name: String,
    pub currency: String,
    #[serde(default = "utc")]
    pub time_zone: String,
}

fn utc() -> String {
    "UTC".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub name: String,
    pub scheduler: String,
    #[serde(default)]
    pub time_zone: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default, rename = "node_type")]
    pub node_types: Vec<NodeType>,
    #[serde(default)]
    pub queues: BTreeMap<String, String>,
    #[serde(default, rename = "rate_card")]
    pub rate_cards: Vec<RateCard>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeType {
    pub name: String,
    pub cores_per_node: u32,
    #[serde(default)]
    pub gpus_per_node: u32,
    /// The memory one node really has (a size, e.g. "192GB"); optional.
    #[serde(default)]
    pub memory_per_node: Option<String>,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateCard {
    pub node_type: String,
    pub from: When,
    #[serde(default)]
    pub until: Option<When>,
    pub core_hour: Dec,
    #[serde(default)]
    pub gpu_hour: Dec,
    pub memory_per_core: String,
    #[serde(default)]
    pub cores_per_node: Option<u32>,
    /// The rate class it prices; none = the default class.
    #[serde(default)]
    pub class: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageRate {
    pub from: When,
    #[serde(default)]
    pub until: Option<When>,
    pub tb_month: Dec,
    /// The rate class it prices; none = the default class.
    #[serde(default)]
    pub class: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    pub code: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub pi: String,
    #[serde(default)]
    pub quota: Vec<Quota>,
    /// The project's rate class history.
    #[serde(default)]
    pub class: Vec<ProjectClass>,
    /// The project's funding sources, in dated sets.
    #[serde(default)]
    pub funding: Vec<Funding>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectClass {
    pub from: When,
    /// A rate class, or "default".
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    pub from: When,
    pub tb: Dec,
}

/// An exact decimal written as a TOML integer, float or string. A float is
/// taken as the shortest decimal that reads back as the same binary value,
/// which is exactly what was written for up to 15 significant digits; longer
/// literals must be strings.
#[derive(Debug, Default, Clone, Copy)]
pub struct Dec(pub Decimal);

impl<'de> Deserialize<'de> for Dec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dec, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a decimal number, e.g. 0.0125 or \"0.0125\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dec, E> {
                Ok(Dec(Decimal::from(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dec, E> {
                Ok(Dec(Decimal::from(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dec, E> {
                let text = format!("{v}");
                let digits = text.chars().filter(char::is_ascii_digit).collect::<String>();
                if !v.is_finite() || digits.trim_start_matches('0').len() > 15 {
                    return Err(E::custom(format!(
                        "{v} has too many digits to be read exactly as a number; write it as a string, e.g. \"{v}\""
                    )));
                }
                parse_decimal(&text).map(Dec).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dec, E> {
                parse_decimal(v).map(Dec).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

pub fn parse_decimal(s: &str) -> Result<Decimal, String> {
    let t = s.trim();
    t.parse::<Decimal>()
        .or_else(|_| Decimal::from_scientific(t))
        .map_err(|_| format!("{s:?} is not a decimal number"))
}

/// A date or instant written as a TOML date/datetime or a string; read by
/// [`super::parse_instant`] once the time zone is known.
#[derive(Debug, Clone)]
pub struct When(pub String);

impl std::ops::Deref for When {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for When {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<When, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Toml(toml_edit::Datetime),
        }
        match Raw::deserialize(d) {
            Ok(Raw::Text(s)) => Ok(When(s)),
            Ok(Raw::Toml(dt)) => Ok(When(dt.to_string())),
            Err(_) => Err(de::Error::custom(
                "expected a date or time, e.g. 2026-01-01 or 2026-01-01T08:00:00Z",
            )),
        }
    }
}
