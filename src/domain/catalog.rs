//! The reference data in force: clusters, node types, queue maps, dated rate
//! cards and storage rates. Loaded once, consulted per job without I/O.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use super::pricing::RateCard;
use super::rules::{Dated, NodeTypeError, Scheduler, resolve_node_type};
use super::storage::StoragePrice;
use super::units::Bytes;
use crate::ids::{ClusterId, NodeTypeId, RateCardId, StorageRateId};

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
    /// Queue/partition -> node type name.
    pub queues: BTreeMap<String, String>,
    pub rate_cards: Vec<CardRow>,
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

    /// The node type of a job (docs/rules.md D4).
    pub fn resolve_node_type(
        &self,
        queue: Option<&str>,
        explicit: Option<&str>,
        gpus: u32,
    ) -> Result<&NodeTypeInfo, NodeTypeError> {
        let names: Vec<&str> = self.node_types.iter().map(|t| t.name.as_str()).collect();
        let name = resolve_node_type(&self.name, &self.queues, &names, queue, explicit, gpus)?;
        Ok(self.node_type(name).expect("resolved names are known"))
    }

    /// The rate card of a node type in force at `t` (docs/rules.md D5).
    pub fn rate_card(&self, node_type: NodeTypeId, t: DateTime<Utc>) -> Option<&CardRow> {
        self.rate_cards
            .iter()
            .find(|c| c.node_type_id == node_type && c.period.in_force_at(t))
    }
}

/// Everything needed to price jobs and storage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Catalog {
    /// `None` until a configuration has been applied.
    pub center: Option<CenterInfo>,
    pub clusters: Vec<ClusterInfo>,
    pub storage_rates: Vec<Dated<StoragePrice<StorageRateId>>>,
}

impl Catalog {
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
