//! The reference data in force: clusters, node types, queue maps, dated rate
//! cards and storage rates, rate classes, the projects' class history and
//! discounts. Loaded once, consulted per job without I/O.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;

use super::pricing::RateCard;
use super::rules::{Dated, NodeTypeError, QueueMap, Scheduler, resolve_node_type};
use super::storage::StoragePrice;
use super::units::Bytes;
use crate::ids::{ClusterId, DiscountId, NodeTypeId, ProjectId, RateCardId, RateClassId, StorageRateId};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CenterInfo {
    pub name: String,
    pub currency: String,
    #[serde(serialize_with = "tz_name")]
    pub time_zone: Tz,
}

fn tz_name<S: serde::Serializer>(tz: &Tz, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(tz.name())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeTypeInfo {
    pub id: NodeTypeId,
    pub name: String,
    pub cores_per_node: u32,
    pub gpus_per_node: u32,
    /// The memory one node really has, when the center gives it.
    pub memory_per_node: Option<Bytes>,
}

/// A rate card row: which row, for which node type, what it says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CardRow {
    pub id: RateCardId,
    pub node_type_id: NodeTypeId,
    /// The rate class it prices (docs/rules.md R7); `None` = the default class.
    pub class: Option<RateClassId>,
    pub period: Dated<RateCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterInfo {
    pub id: ClusterId,
    pub name: String,
    pub scheduler: Scheduler,
    /// Zone of the scheduler's local timestamps; `None` = the center's.
    #[serde(serialize_with = "opt_tz_name")]
    pub time_zone: Option<Tz>,
    pub node_types: Vec<NodeTypeInfo>,
    /// Queue/partition -> node type name, dated (docs/rules.md D4).
    #[serde(serialize_with = "queue_rows")]
    pub queues: QueueMap,
    pub rate_cards: Vec<CardRow>,
}

/// Each queue's mappings as `{node_type, from, until}`, `from` null for
/// the beginning of time (a queue's first mapping).
fn queue_rows<S: serde::Serializer>(map: &QueueMap, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Row<'a> {
        node_type: &'a str,
        from: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    }
    s.collect_map(map.iter().map(|(queue, rows)| {
        let rows: Vec<Row> = rows
            .iter()
            .map(|d| Row {
                node_type: &d.value,
                from: (d.valid_from != DateTime::<Utc>::MIN_UTC).then_some(d.valid_from),
                until: d.valid_until,
            })
            .collect();
        (queue, rows)
    }))
}

fn opt_tz_name<S: serde::Serializer>(tz: &Option<Tz>, s: S) -> Result<S::Ok, S::Error> {
    match tz {
        Some(tz) => s.serialize_str(tz.name()),
        None => s.serialize_none(),
    }
}

impl ClusterInfo {
    pub fn node_type(&self, name: &str) -> Option<&NodeTypeInfo> {
        self.node_types.iter().find(|t| t.name == name)
    }

    /// The node type of a job that started at `at` (docs/rules.md D4).
    pub fn resolve_node_type(
        &self,
        queue: Option<&str>,
        explicit: Option<&str>,
        gpus: u32,
        at: DateTime<Utc>,
    ) -> Result<&NodeTypeInfo, NodeTypeError> {
        let names: Vec<&str> = self.node_types.iter().map(|t| t.name.as_str()).collect();
        let name = resolve_node_type(&self.name, &self.queues, &names, queue, explicit, gpus, at)?;
        Ok(self.node_type(name).expect("resolved names are known"))
    }

    /// The rate card of a node type and rate class in force at `t`
    /// (docs/rules.md D5, R7): only the class's own cards.
    pub fn rate_card(&self, node_type: NodeTypeId, class: Option<RateClassId>, t: DateTime<Utc>) -> Option<&CardRow> {
        self.rate_cards
            .iter()
            .find(|c| c.node_type_id == node_type && c.class == class && c.period.in_force_at(t))
    }
}

/// Everything needed to price jobs and storage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Catalog {
    /// `None` until a configuration has been applied.
    pub center: Option<CenterInfo>,
    pub clusters: Vec<ClusterInfo>,
    pub storage_rates: Vec<Dated<StoragePrice<StorageRateId>>>,
    /// Rate classes by id (docs/rules.md R7).
    pub classes: Vec<RateClass>,
    /// Each classed project's class changes, oldest first; a project not
    /// here is in the default class.
    #[serde(skip)]
    pub project_classes: HashMap<ProjectId, Vec<ClassChange>>,
    pub discounts: Vec<DiscountRow>,
}

/// A rate class: a name for a set of rate cards and storage rates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateClass {
    pub id: RateClassId,
    pub name: String,
    pub description: String,
}

/// A project's class from an instant on (`None`: back to the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClassChange {
    pub effective_from: DateTime<Utc>,
    pub class: Option<RateClassId>,
}

/// The class in force at `t` given a project's changes (oldest first): the
/// last change at or before `t`.
pub fn class_at(changes: &[ClassChange], t: DateTime<Utc>) -> Option<RateClassId> {
    changes
        .iter()
        .rev()
        .find(|c| c.effective_from <= t)
        .and_then(|c| c.class)
}

/// Whom a discount is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscountScope {
    Project(ProjectId),
    Class(RateClassId),
}

/// A dated percentage discount (docs/rules.md R8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiscountRow {
    pub id: DiscountId,
    pub scope: DiscountScope,
    pub percent: Decimal,
    pub period: Dated<()>,
    pub reason: String,
}

impl Catalog {
    /// A project's rate class at `t` (docs/rules.md R7); `None` = the default.
    pub fn class_of(&self, project: ProjectId, t: DateTime<Utc>) -> Option<RateClassId> {
        self.project_classes.get(&project).and_then(|c| class_at(c, t))
    }

    /// The name of a class, `default` for none.
    pub fn class_name(&self, class: Option<RateClassId>) -> &str {
        class
            .and_then(|id| self.classes.iter().find(|c| c.id == id))
            .map_or("default", |c| c.name.as_str())
    }

    /// A class by name; `Ok(None)` for `default`.
    pub fn class_named(&self, name: &str) -> Result<Option<RateClassId>, String> {
        if name.eq_ignore_ascii_case("default") {
            return Ok(None);
        }
        match self.classes.iter().find(|c| c.name.eq_ignore_ascii_case(name)) {
            Some(c) => Ok(Some(c.id)),
            None => {
                let names: Vec<&str> = std::iter::once("default")
                    .chain(self.classes.iter().map(|c| c.name.as_str()))
                    .collect();
                let hint = crate::domain::names::closest(name, names.iter().copied())
                    .map(|c| format!("did you mean {c}? "))
                    .unwrap_or_default();
                Err(format!(
                    "unknown rate class {name:?} ({hint}known: {})",
                    names.join(", ")
                ))
            }
        }
    }

    /// The discount of a charge of `project` priced at `t`, in class
    /// `class` then (docs/rules.md R8): the project's own, else its class's.
    pub fn discount_for(
        &self,
        project: ProjectId,
        class: Option<RateClassId>,
        t: DateTime<Utc>,
    ) -> Option<&DiscountRow> {
        let in_force = |scope: DiscountScope| {
            self.discounts
                .iter()
                .find(|d| d.scope == scope && d.period.in_force_at(t))
        };
        in_force(DiscountScope::Project(project)).or_else(|| class.and_then(|c| in_force(DiscountScope::Class(c))))
    }

    /// A cluster by name, ignoring case.
    pub fn cluster(&self, name: &str) -> Option<&ClusterInfo> {
        self.clusters.iter().find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// What to say about an unknown cluster name: `known: a, b`, preceded by
    /// `did you mean a?` when the name looks like a typo of one.
    pub fn clusters_known(&self, name: &str) -> String {
        match crate::domain::names::closest(name, self.clusters.iter().map(|c| c.name.as_str())) {
            Some(c) => format!("did you mean {c}? known: {}", self.cluster_names()),
            None => format!("known: {}", self.cluster_names()),
        }
    }

    pub fn cluster_names(&self) -> String {
        let names: Vec<&str> = self.clusters.iter().map(|c| c.name.as_str()).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::dec;

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn catalog() -> Catalog {
        let period = |from: &str, until: Option<&str>| Dated {
            valid_from: at(from),
            valid_until: until.map(at),
            value: (),
        };
        Catalog {
            center: None,
            clusters: vec![],
            storage_rates: vec![],
            classes: vec![RateClass {
                id: RateClassId(1),
                name: "commercial".into(),
                description: String::new(),
            }],
            project_classes: HashMap::from([(
                ProjectId(5),
                vec![
                    ClassChange {
                        effective_from: at("2026-01-01T00:00:00Z"),
                        class: Some(RateClassId(1)),
                    },
                    ClassChange {
                        effective_from: at("2026-07-01T00:00:00Z"),
                        class: None,
                    },
                ],
            )]),
            discounts: vec![
                DiscountRow {
                    id: DiscountId(10),
                    scope: DiscountScope::Class(RateClassId(1)),
                    percent: dec!(10),
                    period: period("2026-01-01T00:00:00Z", None),
                    reason: "partners".into(),
                },
                DiscountRow {
                    id: DiscountId(11),
                    scope: DiscountScope::Project(ProjectId(5)),
                    percent: dec!(50),
                    period: period("2026-03-01T00:00:00Z", Some("2026-04-01T00:00:00Z")),
                    reason: "subsidy".into(),
                },
            ],
        }
    }

    #[test]
    fn a_project_has_the_class_of_its_last_change_and_its_own_discount_wins() {
        let c = catalog();
        let p = ProjectId(5);
        let class = |t: &str| c.class_of(p, at(t));
        assert_eq!(
            class("2025-12-31T23:59:59Z"),
            None,
            "before the first change: the default class"
        );
        assert_eq!(
            class("2026-01-01T00:00:00Z"),
            Some(RateClassId(1)),
            "a change counts from its instant"
        );
        assert_eq!(class("2026-07-01T00:00:00Z"), None, "back to the default");
        assert_eq!(c.class_of(ProjectId(6), at("2026-02-01T00:00:00Z")), None);
        let discount = |t: &str| c.discount_for(p, class(t), at(t)).map(|d| d.id);
        assert_eq!(discount("2026-02-01T00:00:00Z"), Some(DiscountId(10)), "the class's");
        assert_eq!(discount("2026-03-15T00:00:00Z"), Some(DiscountId(11)), "its own wins");
        assert_eq!(
            discount("2026-04-01T00:00:00Z"),
            Some(DiscountId(10)),
            "its own has ended"
        );
        assert_eq!(discount("2026-08-01T00:00:00Z"), None, "no longer in the class");
        assert_eq!(c.class_named("Commercial"), Ok(Some(RateClassId(1))));
        assert_eq!(c.class_named("default"), Ok(None));
        assert!(
            c.class_named("comercial")
                .unwrap_err()
                .contains("did you mean commercial?")
        );
        assert_eq!(c.class_name(None), "default");
    }
}
