//! `config apply`: make the database hold what the configuration file says,
//! in one transaction, without ever rewriting what has priced a charge; and
//! `config show`: what is in force at an instant.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::config::{CenterConfig, ClusterConfig, DiscountFor, NodeTypeConfig, StorageRateConfig};
use crate::db::{self, DbError, reference};
use crate::domain::catalog::{CardRow, Catalog, ClassChange, DiscountRow, DiscountScope};
use crate::domain::pricing::RateCard;
use crate::domain::rules::Dated;
use crate::domain::storage::QuotaChange;
use crate::domain::storage::StoragePrice;
use crate::ids::{ClusterId, NodeTypeId, ProjectId, RateCardId, RateClassId, StorageRateId};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the configuration was not applied:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Refused(Vec<String>),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// How many rows of one kind were added, updated, removed or left alone.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub added: u64,
    pub updated: u64,
    pub removed: u64,
    pub unchanged: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} added, {} updated, {} removed, {} unchanged",
            self.added, self.updated, self.removed, self.unchanged
        )
    }
}

/// What `config apply` did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    pub center_changed: bool,
    pub clusters: Counts,
    pub node_types: Counts,
    pub queues: Counts,
    pub rate_cards: Counts,
    pub storage_rates: Counts,
    pub projects: Counts,
    pub quotas: Counts,
    pub classes: Counts,
    pub project_classes: Counts,
    pub discounts: Counts,
    pub alert_thresholds: Counts,
    pub allocations: Counts,
    /// Funding sets of projects (docs/month-end.md "Finance journal").
    pub funding: Counts,
    /// Revenue account sets.
    pub revenue: Counts,
    /// The journal's CSV layout.
    pub journal_layout: Counts,
    /// Things kept that the file does not mention.
    pub notes: Vec<String>,
}

impl ApplyReport {
    pub fn changed(&self) -> bool {
        let all = [
            self.clusters,
            self.node_types,
            self.queues,
            self.rate_cards,
            self.storage_rates,
            self.projects,
            self.quotas,
            self.classes,
            self.project_classes,
            self.discounts,
            self.alert_thresholds,
            self.allocations,
            self.funding,
            self.revenue,
            self.journal_layout,
        ];
        self.center_changed || all.iter().any(|c| c.added + c.updated + c.removed > 0)
    }
}

impl fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "center:        {}",
            if self.center_changed { "updated" } else { "unchanged" }
        )?;
        writeln!(f, "clusters:      {}", self.clusters)?;
        writeln!(f, "node types:    {}", self.node_types)?;
        writeln!(f, "queues:        {}", self.queues)?;
        writeln!(f, "rate cards:    {}", self.rate_cards)?;
        writeln!(f, "storage rates: {}", self.storage_rates)?;
        writeln!(f, "projects:      {}", self.projects)?;
        writeln!(f, "quota changes: {}", self.quotas)?;
        writeln!(f, "rate classes:  {}", self.classes)?;
        writeln!(f, "class changes: {}", self.project_classes)?;
        writeln!(f, "discounts:     {}", self.discounts)?;
        writeln!(f, "alert levels:  {}", self.alert_thresholds)?;
        writeln!(f, "allocations:   {}", self.allocations)?;
        writeln!(f, "funding sets:  {}", self.funding)?;
        writeln!(f, "revenue sets:  {}", self.revenue)?;
        writeln!(f, "journal layout: {}", self.journal_layout)?;
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Apply a validated configuration. All or nothing: any refusal rolls
/// everything back and lists every problem.
pub async fn apply(pool: &PgPool, config: &CenterConfig, author: &str) -> Result<ApplyReport, ApplyError> {
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = apply_in(&mut tx, config, author).await;
    let report = crate::service::finish(tx, result).await?;
    if report.changed() {
        // Autovacuum never analyses tables this small (a one-row `center`),
        // and the audit's plans depend on knowing their sizes. Only the
        // owner may; for anyone else this is a warning, not an error.
        let _ = db::analyze_reference(pool).await;
    }
    Ok(report)
}

/// What applying `config` would change, with every check the database
/// makes, and nothing written (`config apply --dry-run`): the same
/// transaction as [`apply`], rolled back.
pub async fn apply_dry_run(pool: &PgPool, config: &CenterConfig, author: &str) -> Result<ApplyReport, ApplyError> {
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = apply_in(&mut tx, config, author).await;
    let _ = tx.rollback().await;
    result
}

async fn apply_in(tx: &mut PgConnection, config: &CenterConfig, author: &str) -> Result<ApplyReport, ApplyError> {
    db::lock_rules(&mut *tx).await?;
    let mut report = ApplyReport::default();
    let mut refused = Vec::new();

    let c = &config.center;
    report.center_changed = reference::upsert_center(&mut *tx, &c.name, &c.currency, c.time_zone.name()).await?;

    let classes = apply_classes(&mut *tx, config, &mut report).await?;
    let existing = reference::load_clusters(&mut *tx).await?;
    let used = reference::used_rate_cards(&mut *tx).await?;
    let mut rate_cards: Vec<(ClusterId, CardUse)> = reference::load_rate_cards(&mut *tx)
        .await?
        .into_iter()
        .map(|(cluster, row)| {
            let used = used.contains(&row.id);
            (cluster, CardUse { row, used })
        })
        .collect();
    for (i, c) in config.clusters.iter().enumerate() {
        let key = format!("cluster[{i}] ({:?})", c.name);
        let tz = c.time_zone.map(|t| t.name());
        let id = match existing.iter().find(|e| e.name.eq_ignore_ascii_case(&c.name)) {
            Some(e) => {
                if (
                    e.name.as_str(),
                    e.scheduler.as_str(),
                    e.time_zone.as_deref(),
                    e.description.as_str(),
                ) == (c.name.as_str(), c.scheduler.as_str(), tz, c.description.as_str())
                {
                    report.clusters.unchanged += 1;
                } else {
                    reference::update_cluster(&mut *tx, e.id, &c.name, c.scheduler, tz, &c.description).await?;
                    report.clusters.updated += 1;
                }
                e.id
            }
            None => {
                report.clusters.added += 1;
                reference::insert_cluster(&mut *tx, &c.name, c.scheduler, tz, &c.description).await?
            }
        };
        let cards: Vec<CardUse> = rate_cards
            .extract_if(.., |(cid, _)| *cid == id)
            .map(|(_, u)| u)
            .collect();
        apply_cluster(&mut *tx, &key, id, c, cards, &classes, &mut report, &mut refused).await?;
    }
    let mentioned: Vec<String> = config.clusters.iter().map(|c| c.name.to_lowercase()).collect();
    let others = existing
        .iter()
        .filter(|e| !mentioned.contains(&e.name.to_lowercase()))
        .count();
    if others > 0 {
        report.notes.push(format!(
            "{others} cluster(s) in the database are not in the file; they were kept"
        ));
    }

    apply_storage_rates(&mut *tx, &config.storage_rates, &classes, &mut report, &mut refused).await?;
    let projects = apply_projects(&mut *tx, config, author, &classes, &mut report, &mut refused).await?;
    apply_discounts(&mut *tx, config, author, &classes, &projects, &mut report, &mut refused).await?;
    apply_allocations(&mut *tx, config, author, &projects, &mut report, &mut refused).await?;
    super::journal::apply(&mut *tx, config, &projects, author, &mut report, &mut refused).await?;
    // Alert thresholds: the file's set.
    let have = crate::db::budget::thresholds(&mut *tx).await?;
    let add: Vec<Decimal> = config
        .alert_thresholds
        .iter()
        .filter(|t| !have.contains(t))
        .copied()
        .collect();
    let drop: Vec<Decimal> = have
        .iter()
        .filter(|t| !config.alert_thresholds.contains(t))
        .copied()
        .collect();
    report.alert_thresholds = Counts {
        added: add.len() as u64,
        updated: 0,
        removed: drop.len() as u64,
        unchanged: (have.len() - drop.len()) as u64,
    };
    if refused.is_empty() && !(add.is_empty() && drop.is_empty()) {
        crate::db::budget::set_thresholds(&mut *tx, &config.alert_thresholds).await?;
    }

    if !refused.is_empty() {
        return Err(ApplyError::Refused(refused));
    }
    Ok(report)
}

/// Rate classes by name (ids of those the file names, and of those only
/// the database holds).
type Classes = BTreeMap<String, RateClassId>;

/// What differs between a card held and the one in the file, as `field
/// held → file`.
fn card_changes(held: &RateCard, file: &RateCard) -> Vec<String> {
    let mut changes = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            changes.push(format!("{name} {a} → {b}"));
        }
    };
    field(
        "core_hour",
        held.core_hour.normalize().to_string(),
        file.core_hour.normalize().to_string(),
    );
    field(
        "gpu_hour",
        held.gpu_hour.normalize().to_string(),
        file.gpu_hour.normalize().to_string(),
    );
    field(
        "memory_per_core",
        held.memory_per_core.to_string(),
        file.memory_per_core.to_string(),
    );
    field(
        "cores_per_node",
        held.cores_per_node.to_string(),
        file.cores_per_node.to_string(),
    );
    changes
}

fn class_id(classes: &Classes, name: Option<&String>) -> Option<RateClassId> {
    name.map(|n| classes[n])
}

/// Add the file's classes, update their descriptions; classes are never
/// removed (their prices and projects refer to them).
async fn apply_classes(
    tx: &mut PgConnection,
    config: &CenterConfig,
    report: &mut ApplyReport,
) -> Result<Classes, ApplyError> {
    let existing = reference::load_classes(tx).await?;
    let mut out: Classes = existing.iter().map(|c| (c.name.clone(), c.id)).collect();
    for c in &config.classes {
        match existing.iter().find(|e| e.name == c.name) {
            Some(e) if e.description == c.description => report.classes.unchanged += 1,
            found => {
                let id = reference::upsert_class(tx, &c.name, &c.description).await?;
                if found.is_some() {
                    report.classes.updated += 1;
                } else {
                    report.classes.added += 1;
                }
                out.insert(c.name.clone(), id);
            }
        }
    }
    let others: Vec<&str> = existing
        .iter()
        .filter(|e| !config.classes.iter().any(|c| c.name == e.name))
        .map(|e| e.name.as_str())
        .collect();
    if !others.is_empty() {
        report.notes.push(format!(
            "rate class(es) {} are not in the file; they were kept",
            others.join(", ")
        ));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
async fn apply_cluster(
    tx: &mut PgConnection,
    key: &str,
    cluster: ClusterId,
    c: &ClusterConfig,
    existing_cards: Vec<CardUse>,
    classes: &Classes,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    // Load.
    let node_types = reference::load_node_types(tx, cluster).await?;
    let queues = reference::load_queue_map(tx, cluster).await?;
    // Plan.
    let plan = plan_cluster(key, c, &node_types, &queues, &existing_cards, classes, report);
    if !plan.refused.is_empty() {
        // The whole apply is rolled back: nothing of a refused plan is written.
        refused.extend(plan.refused);
        return Ok(());
    }
    // Write: node types first (queues and cards refer to them by id).
    let mut ids: BTreeMap<&str, NodeTypeId> = node_types.iter().map(|n| (n.name.as_str(), n.id)).collect();
    for n in plan.node_types {
        let cores = i32::try_from(n.cores_per_node).unwrap_or(i32::MAX);
        let gpus = i32::try_from(n.gpus_per_node).unwrap_or(i32::MAX);
        let memory = n.memory_per_node.and_then(|m| i64::try_from(m.0).ok());
        let id = reference::upsert_node_type(tx, cluster, &n.name, cores, gpus, memory, &n.description).await?;
        ids.insert(n.name.as_str(), id);
    }
    // A queue moved or removed changes from this instant on (docs/rules.md
    // D4): the jobs priced before keep the node type they were priced on.
    if !plan.set_queues.is_empty() || !plan.remove_queues.is_empty() {
        let at = reference::change_instant(tx).await?;
        for (queue, node_type) in plan.set_queues {
            reference::map_queue(tx, cluster, queue, ids[node_type], at).await?;
        }
        for queue in plan.remove_queues {
            reference::end_queue(tx, cluster, &queue, at).await?;
        }
    }
    for id in plan.delete_cards {
        reference::delete_rate_card(tx, id).await?;
    }
    // Shorten before lengthening and inserting, so no two cards ever overlap.
    let mut ends = plan.end_cards;
    ends.sort_by_key(End::lengthens);
    for e in ends {
        if let Err(err) = reference::set_rate_card_until(tx, e.id, e.new).await {
            return Err(end_refused(&e, err));
        }
    }
    for (node_type, class, card) in plan.insert_cards {
        reference::insert_rate_card(tx, cluster, ids[node_type], class, card).await?;
    }
    Ok(())
}

/// What applying one cluster's file section writes, decided from what the
/// database holds: no I/O, so every refusal is known before anything is written.
#[derive(Default)]
struct ClusterPlan<'c> {
    /// Node types to add or update.
    node_types: Vec<&'c NodeTypeConfig>,
    /// Queue -> node type name, to set.
    set_queues: Vec<(&'c str, &'c str)>,
    remove_queues: Vec<String>,
    delete_cards: Vec<RateCardId>,
    end_cards: Vec<End<RateCardId>>,
    /// Cards to insert (new, or replacing an unused card whose values
    /// changed), by node type name, with their class.
    insert_cards: Vec<(&'c str, Option<RateClassId>, &'c Dated<RateCard>)>,
    refused: Vec<String>,
}

fn plan_cluster<'c>(
    key: &str,
    c: &'c ClusterConfig,
    node_types: &[reference::NodeTypeRow],
    now: &reference::QueuesNow,
    existing_cards: &[CardUse],
    classes: &Classes,
    report: &mut ApplyReport,
) -> ClusterPlan<'c> {
    let mut plan = ClusterPlan::default();
    // Node types, by name; one not in the file is kept.
    for n in &c.node_types {
        let cores = i32::try_from(n.cores_per_node).unwrap_or(i32::MAX);
        let gpus = i32::try_from(n.gpus_per_node).unwrap_or(i32::MAX);
        match node_types.iter().find(|e| e.name == n.name) {
            Some(e)
                if (
                    e.cores_per_node,
                    e.gpus_per_node,
                    e.memory_per_node_bytes,
                    e.description.as_str(),
                ) == (
                    cores,
                    gpus,
                    n.memory_per_node.and_then(|m| i64::try_from(m.0).ok()),
                    n.description.as_str(),
                ) =>
            {
                report.node_types.unchanged += 1;
                continue;
            }
            Some(_) => report.node_types.updated += 1,
            None => report.node_types.added += 1,
        }
        plan.node_types.push(n);
    }
    for e in node_types
        .iter()
        .filter(|e| !c.node_types.iter().any(|n| n.name == e.name))
    {
        report
            .notes
            .push(format!("{key}: node type {:?} is not in the file; it was kept", e.name));
    }
    let name_of = |id: NodeTypeId| node_types.iter().find(|n| n.id == id).map(|n| n.name.as_str());

    // Queues.
    let queues = &now.in_force;
    for (queue, node_type) in &c.queues {
        match queues.get(queue) {
            Some(old) if name_of(*old) == Some(node_type.as_str()) => report.queues.unchanged += 1,
            old => {
                if let Some(old) = old {
                    report.queues.updated += 1;
                    report.notes.push(format!(
                        "{key}: queue {queue:?} runs on node type {node_type:?} from now on, not {:?}: a job of that \
                         queue that started before now stays priced on {:?}, also when its record comes later (one that starts \
                         later is priced on {node_type:?}'s rate card of its submit time)",
                        name_of(*old).unwrap_or("?"),
                        name_of(*old).unwrap_or("?"),
                    ));
                } else {
                    report.queues.added += 1;
                    if now.ended.contains(queue) {
                        report.notes.push(format!(
                            "{key}: queue {queue:?} is in the queue map again, on node type {node_type:?}, from now on: \
                             a job of it that started while it was out of the map is still refused; record such a \
                             job with its node type (`job record … --node-type`, a JSON line's `node_type`)"
                        ));
                    }
                }
                plan.set_queues.push((queue.as_str(), node_type.as_str()));
            }
        }
    }
    for queue in queues.keys().filter(|q| !c.queues.contains_key(*q)) {
        plan.remove_queues.push(queue.clone());
        report.queues.removed += 1;
        report.notes.push(format!(
            "{key}: queue {queue:?} leaves the queue map from now on: a job of it that started before now is still \
             priced on {:?}, a later one is refused as an unknown queue",
            queues.get(queue).and_then(|id| name_of(*id)).unwrap_or("?"),
        ));
    }

    // Rate cards, matched by node type, class and start.
    let mut desired: Vec<(&str, Option<RateClassId>, &Dated<RateCard>)> = c
        .rate_cards
        .iter()
        .map(|r| (r.node_type.as_str(), class_id(classes, r.class.as_ref()), &r.card))
        .collect();
    for e in existing_cards {
        let row = &e.row;
        let type_name = name_of(row.node_type_id).unwrap_or("?");
        let name = match row.class {
            None => type_name.to_owned(),
            Some(id) => {
                let class = classes.iter().find(|(_, c)| **c == id).map_or("?", |(n, _)| n.as_str());
                format!("{type_name} ({class})")
            }
        };
        let matching = desired
            .iter()
            .position(|(t, k, d)| *t == type_name && *k == row.class && d.valid_from == row.period.valid_from);
        let Some(i) = matching else {
            if e.used {
                plan.refused.push(format!(
                    "{key}: the {name} rate card from {} has priced charges and is missing from the file; keep it there",
                    row.period.valid_from
                ));
            } else {
                plan.delete_cards.push(row.id);
                report.rate_cards.removed += 1;
            }
            continue;
        };
        let (node_type, class, d) = desired.remove(i);
        if d.value != row.period.value {
            if e.used {
                plan.refused.push(format!(
                    "{key}: the {name} rate card from {} has priced charges; its prices and sizes cannot change \
                     ({}; add a new dated card instead{})",
                    row.period.valid_from,
                    card_changes(&row.period.value, &d.value).join(", "),
                    // The hint is for a card that took its node type's size
                    // (it has none of its own, or the same).
                    if d.value.cores_per_node != row.period.value.cores_per_node
                        && c.node_types
                            .iter()
                            .any(|n| n.name == node_type && n.cores_per_node == d.value.cores_per_node)
                    {
                        format!(
                            ", or write cores_per_node = {} on this card: a card without one takes its node \
                             type's, and a node type of other nodes is best a new node type",
                            row.period.value.cores_per_node
                        )
                    } else {
                        String::new()
                    }
                ));
            } else {
                plan.delete_cards.push(row.id);
                plan.insert_cards.push((node_type, class, d));
                report.rate_cards.updated += 1;
            }
        } else if d.valid_until != row.period.valid_until {
            plan.end_cards.push(End {
                old: row.period.valid_until,
                new: d.valid_until,
                id: row.id,
                what: format!("{key}: the {name} rate card from {}", row.period.valid_from),
            });
            report.rate_cards.updated += 1;
        } else {
            report.rate_cards.unchanged += 1;
        }
    }
    report.rate_cards.added += desired.len() as u64;
    plan.insert_cards.extend(desired);
    // A card that gives a node less memory than it really has makes the
    // single-node cap (charging rules 2) charge a whole node for jobs that
    // fit in part of it: say so.
    for n in &c.node_types {
        let Some(real) = n.memory_per_node else { continue };
        for r in c.rate_cards.iter().filter(|r| r.node_type == n.name) {
            let card = &r.card.value;
            let per_node = u128::from(card.memory_per_core.0) * u128::from(card.cores_per_node);
            if per_node < u128::from(real.0) {
                report.notes.push(format!(
                    "{key}: the {} rate card from {} gives {} per core × {} cores per node = {}, less than the \
                     {} its nodes have (memory_per_node): a job using more than that on one node is charged the \
                     whole node",
                    n.name,
                    r.card.valid_from,
                    card.memory_per_core,
                    card.cores_per_node,
                    crate::domain::units::Bytes(u64::try_from(per_node).unwrap_or(u64::MAX)),
                    real
                ));
            }
        }
    }
    plan
}

/// A rate card and whether it has priced a charge.
struct CardUse {
    row: CardRow,
    used: bool,
}

/// A storage rate and whether it has priced a charge.
struct RateUse {
    rate: Dated<StoragePrice<StorageRateId>>,
    used: bool,
}

/// A change of a dated row's end.
struct End<K> {
    id: K,
    old: Option<DateTime<Utc>>,
    new: Option<DateTime<Utc>>,
    /// How the file names it ("cluster[0] (\"owens\"): the regular rate
    /// card from …"), for a refusal.
    what: String,
}

/// An end the database refused (a rule that priced a charge ends only
/// after the last charge it priced), named as the file names the rule,
/// with what to do; any other error as it is.
fn end_refused<K>(e: &End<K>, err: sqlx::Error) -> ApplyError {
    match crate::db::errors::guard_message(&err) {
        // Only the refusal to end before what a rule priced (migrations
        // 0002, 0026, 0037: "… it cannot end before them"); any other as
        // the database says it.
        Some(why) if !why.contains("it cannot end before them") => {
            ApplyError::Refused(vec![format!("{}: {why}", e.what)])
        }
        Some(why) => ApplyError::Refused(vec![format!(
            "{} cannot end {}: it priced charges after that (the database: {why}); a rule that priced a \
             charge ends only after the last charge it priced: start the rule after it later",
            e.what,
            e.new.map_or_else(
                || "never".to_owned(),
                |t| format!("at {}", t.format("%Y-%m-%d %H:%M:%S UTC"))
            )
        )]),
        None => ApplyError::Db(err.into()),
    }
}

impl<K> End<K> {
    fn lengthens(&self) -> bool {
        match (self.new, self.old) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(new), Some(old)) => new > old,
        }
    }
}

async fn apply_storage_rates(
    tx: &mut PgConnection,
    desired: &[StorageRateConfig],
    classes: &Classes,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    let used = reference::used_storage_rates(tx).await?;
    let existing: Vec<RateUse> = reference::load_storage_rates(tx)
        .await?
        .into_iter()
        .map(|rate| RateUse {
            used: used.contains(&rate.value.key),
            rate,
        })
        .collect();
    let mut desired: Vec<(Option<RateClassId>, &Dated<Decimal>)> = desired
        .iter()
        .map(|d| (class_id(classes, d.class.as_ref()), &d.rate))
        .collect();
    let mut ends = Vec::new();
    let mut reinserts = Vec::new();
    let mut deletes = Vec::new();
    let refused_before = refused.len();
    for e in &existing {
        let r = &e.rate;
        let Some(i) = desired
            .iter()
            .position(|(k, d)| *k == r.value.class && d.valid_from == r.valid_from)
        else {
            if e.used {
                refused.push(format!(
                    "the storage rate from {} has priced charges and is missing from the file; keep it there",
                    r.valid_from
                ));
            } else {
                deletes.push(r.value.key);
                report.storage_rates.removed += 1;
            }
            continue;
        };
        let (class, d) = desired.remove(i);
        if d.value != r.value.tb_month {
            if e.used {
                refused.push(format!(
                    "the storage rate from {} has priced charges; its price cannot change (add a new dated rate instead)",
                    r.valid_from
                ));
            } else {
                deletes.push(r.value.key);
                reinserts.push((class, d));
                report.storage_rates.updated += 1;
            }
        } else if d.valid_until != r.valid_until {
            ends.push(End {
                id: r.value.key,
                old: r.valid_until,
                new: d.valid_until,
                what: format!("the storage rate from {}", r.valid_from),
            });
            report.storage_rates.updated += 1;
        } else {
            report.storage_rates.unchanged += 1;
        }
    }
    if refused.len() > refused_before {
        return Ok(());
    }
    for id in deletes {
        reference::delete_storage_rate(tx, id).await?;
    }
    ends.sort_by_key(End::lengthens);
    for e in ends {
        if let Err(err) = reference::set_storage_rate_until(tx, e.id, e.new).await {
            return Err(end_refused(&e, err));
        }
    }
    for (class, d) in reinserts {
        reference::insert_storage_rate(tx, class, d).await?;
    }
    for (class, d) in desired {
        reference::insert_storage_rate(tx, class, d).await?;
        report.storage_rates.added += 1;
    }
    Ok(())
}

/// The file's projects, their quota changes and class changes; the ids of
/// the projects, by lower-case code.
async fn apply_projects(
    tx: &mut PgConnection,
    config: &CenterConfig,
    author: &str,
    classes: &Classes,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<BTreeMap<String, ProjectId>, ApplyError> {
    let codes: Vec<String> = config.projects.iter().map(|p| p.code.clone()).collect();
    // Codes are matched ignoring case, lowered here and by the database's
    // `lower()`: a code the two lower differently (a non-ASCII capital in a
    // database whose character type is C, as the embedded one's) could be
    // added but never found (`config apply` stopped on it).
    let lowered = reference::lowered(tx, &codes).await?;
    let unmatched: Vec<String> = codes
        .iter()
        .zip(&lowered)
        .filter(|(c, l)| c.to_lowercase() != **l)
        .map(|(c, l)| {
            format!(
                "project {c:?}: this database lowers its code to {l:?}, not {:?} (its character type is not \
                 Unicode's: the embedded database's is C, which lowers ASCII letters only); codes are matched \
                 ignoring case, so it could not be found: write the code in lower case, or use a database with a \
                 UTF-8 locale",
                c.to_lowercase()
            )
        })
        .collect();
    if !unmatched.is_empty() {
        refused.extend(unmatched);
        return Err(ApplyError::Refused(std::mem::take(refused)));
    }
    let names: Vec<String> = config.projects.iter().map(|p| p.name.clone()).collect();
    let pis: Vec<String> = config.projects.iter().map(|p| p.pi.clone()).collect();
    let (added, updated) = reference::upsert_projects(tx, &codes, &names, &pis).await?;
    report.projects = Counts {
        added,
        updated,
        removed: 0,
        unchanged: codes.len() as u64 - added - updated,
    };
    let (others, first) = reference::projects_not_in(tx, &codes).await?;
    if others > 0 {
        let more = if others > first.len() as i64 { ", …" } else { "" };
        report.notes.push(format!(
            "{others} project(s) in the database are not in the file ({}{more}); they were kept",
            first.join(", ")
        ));
    }
    let rows = reference::load_projects(tx, &codes).await?;
    let id_of: BTreeMap<String, ProjectId> = rows.iter().map(|r| (r.code.to_lowercase(), r.id)).collect();
    let ids: Vec<ProjectId> = id_of.values().copied().collect();
    let existing = reference::load_quotas(tx, &ids).await?;
    let mut new = Vec::new();
    for p in &config.projects {
        let id = id_of[&p.code.to_lowercase()];
        let have: Vec<&QuotaChange> = existing.iter().filter(|(pid, _)| *pid == id).map(|(_, q)| q).collect();
        for q in &p.quotas {
            match have.iter().find(|h| h.effective_from == q.effective_from) {
                Some(h) if h.quota_tb == q.quota_tb => report.quotas.unchanged += 1,
                Some(h) => refused.push(format!(
                    "project {:?}: a quota of {} TB from {} is already recorded; quota history is never rewritten (add a new dated quota instead of {} TB)",
                    p.code, h.quota_tb, h.effective_from, q.quota_tb
                )),
                None => new.push((id, *q)),
            }
        }
        let extra = have
            .iter()
            .filter(|h| !p.quotas.iter().any(|q| q.effective_from == h.effective_from))
            .count();
        if extra > 0 {
            report.notes.push(format!(
                "project {:?}: {extra} recorded quota change(s) are not in the file; they were kept",
                p.code
            ));
        }
    }
    report.quotas.added = reference::insert_quotas(tx, &new, author).await?;

    // Class history: appended, never rewritten, like quotas.
    let existing = reference::load_project_classes(tx).await?;
    let mut new = Vec::new();
    for p in &config.projects {
        let id = id_of[&p.code.to_lowercase()];
        let have = existing.get(&id).map_or(&[][..], Vec::as_slice);
        for c in &p.classes {
            let class = class_id(classes, c.class.as_ref());
            match have.iter().find(|h| h.effective_from == c.effective_from) {
                Some(h) if h.class == class => report.project_classes.unchanged += 1,
                Some(_) => refused.push(format!(
                    "project {:?}: another class from {} is already recorded; class history is never rewritten (add a new dated change instead)",
                    p.code, c.effective_from
                )),
                None => new.push((
                    id,
                    ClassChange {
                        effective_from: c.effective_from,
                        class,
                    },
                )),
            }
        }
        let extra = have
            .iter()
            .filter(|h| !p.classes.iter().any(|c| c.effective_from == h.effective_from))
            .count();
        if extra > 0 {
            report.notes.push(format!(
                "project {:?}: {extra} recorded class change(s) are not in the file; they were kept",
                p.code
            ));
        }
    }
    // A refused change rolls everything back: nothing more is written, so
    // every problem is listed rather than the first trigger's error.
    if refused.is_empty() {
        report.project_classes.added = reference::insert_project_classes(tx, &new, author).await?;
    }
    // A class whose projects hold quota needs a storage rate of its own.
    for c in &config.classes {
        let has_quota = config
            .projects
            .iter()
            .any(|p| !p.quotas.is_empty() && p.classes.iter().any(|k| k.class.as_ref() == Some(&c.name)));
        if has_quota && !config.storage_rates.iter().any(|r| r.class.as_ref() == Some(&c.name)) {
            report.notes.push(format!(
                "rate class {:?} has projects with a storage quota but no storage rate: billing their storage will stop \
                 until one is added",
                c.name
            ));
        }
    }
    Ok(id_of)
}

/// Grants kept in the file, matched by project, start and reason: recorded
/// once; one recorded with another amount or end is refused (allocations are
/// never rewritten: `alloc reduce`, or a new grant); grants not in the file
/// are kept.
async fn apply_allocations(
    tx: &mut PgConnection,
    config: &CenterConfig,
    author: &str,
    projects: &BTreeMap<String, ProjectId>,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    if config.allocations.is_empty() {
        return Ok(());
    }
    let existing = crate::db::budget::allocations(tx, None).await?;
    let catalog = reference::load_catalog(tx).await?;
    let mut ids = projects.clone();
    let missing: Vec<String> = config
        .allocations
        .iter()
        .filter(|a| !ids.contains_key(&a.project.to_lowercase()))
        .map(|a| a.project.clone())
        .collect();
    for p in reference::load_projects(tx, &missing).await? {
        ids.insert(p.code.to_lowercase(), p.id);
    }
    let mut new = Vec::new();
    for a in &config.allocations {
        let Some(&project) = ids.get(&a.project.to_lowercase()) else {
            refused.push(format!(
                "an allocation is for project {:?}, which is not in the ledger or the file",
                a.project
            ));
            continue;
        };
        let same = existing.iter().find(|e| {
            e.kind == "grant"
                && e.project.eq_ignore_ascii_case(&a.project)
                && e.valid_from == a.window.valid_from
                && e.reason == a.reason
        });
        let cluster = match &a.cluster {
            Some(name) => match catalog.cluster(name) {
                Some(c) => Some(c.id),
                None => {
                    refused.push(format!(
                        "an allocation of project {:?} names cluster {name:?}, which is not in the ledger",
                        a.project
                    ));
                    continue;
                }
            },
            None => None,
        };
        let same_cluster = |e: &crate::db::budget::AllocationRow| match (&e.cluster, &a.cluster) {
            (None, None) => true,
            (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
            _ => false,
        };
        match same {
            Some(e) if e.amount == a.amount && e.valid_until == a.window.valid_until && same_cluster(e) => {
                report.allocations.unchanged += 1
            }
            Some(e) => refused.push(format!(
                "project {:?}: the grant of {:.2} from {} ({}) is recorded with another amount, end or cluster; allocations are never \
                 rewritten (take some back with `hpc-ledger alloc reduce`, or add a grant)",
                a.project, e.amount, e.valid_from, e.reason
            )),
            None => new.push((project, cluster, a)),
        }
    }
    if !refused.is_empty() {
        return Ok(());
    }
    for (project, cluster, a) in new {
        let entry = crate::db::budget::NewAllocation {
            project,
            kind: crate::domain::budget::AllocationKind::Grant,
            amount: a.amount,
            valid_from: a.window.valid_from,
            valid_until: a.window.valid_until,
            grant: None,
            transfer_of: None,
            cluster,
            reason: &a.reason,
        };
        crate::db::budget::insert_allocation(tx, &entry, author).await?;
        report.allocations.added += 1;
    }
    Ok(())
}

/// Discounts, matched by whom they are for and their start: one that has
/// discounted a charge keeps its percent and reason and may only end
/// (the database refuses an end before what it discounted, and any period
/// that would cover a charge posted before it).
#[allow(clippy::too_many_arguments)]
async fn apply_discounts(
    tx: &mut PgConnection,
    config: &CenterConfig,
    author: &str,
    classes: &Classes,
    projects: &BTreeMap<String, ProjectId>,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    let mut codes: Vec<String> = config
        .discounts
        .iter()
        .filter_map(|d| match &d.scope {
            DiscountFor::Project(p) if !projects.contains_key(&p.to_lowercase()) => Some(p.clone()),
            _ => None,
        })
        .collect();
    codes.sort();
    codes.dedup();
    let mut ids = projects.clone();
    for p in reference::load_projects(tx, &codes).await? {
        ids.insert(p.code.to_lowercase(), p.id);
    }
    let mut desired = Vec::new();
    for d in &config.discounts {
        let scope = match &d.scope {
            DiscountFor::Project(p) => match ids.get(&p.to_lowercase()) {
                Some(id) => DiscountScope::Project(*id),
                None => {
                    refused.push(format!(
                        "a discount is for project {p:?}, which is not in the ledger or the file"
                    ));
                    continue;
                }
            },
            DiscountFor::Class(c) => DiscountScope::Class(classes[c]),
        };
        desired.push((scope, d));
    }
    let used = reference::used_discounts(tx).await?;
    let existing = reference::load_discounts(tx).await?;
    let describe = |row: &DiscountRow| format!("the discount of {} % from {}", row.percent, row.period.valid_from);
    let mut ends = Vec::new();
    let mut deletes = Vec::new();
    let mut inserts = Vec::new();
    for row in &existing {
        let used = used.contains(&row.id);
        let Some(i) = desired
            .iter()
            .position(|(scope, d)| *scope == row.scope && d.period.valid_from == row.period.valid_from)
        else {
            if used {
                refused.push(format!(
                    "{} has discounted charges and is missing from the file; keep it there (end it with `until`)",
                    describe(row)
                ));
            } else {
                deletes.push(row.id);
                report.discounts.removed += 1;
            }
            continue;
        };
        let (scope, d) = desired.remove(i);
        if d.percent != row.percent || d.reason != row.reason {
            if used {
                refused.push(format!(
                    "{} has discounted charges; its percent and reason cannot change (end it and add a new one)",
                    describe(row)
                ));
            } else {
                deletes.push(row.id);
                inserts.push((scope, d));
                report.discounts.updated += 1;
            }
        } else if d.period.valid_until != row.period.valid_until {
            ends.push(End {
                id: row.id,
                old: row.period.valid_until,
                new: d.period.valid_until,
                what: describe(row),
            });
            report.discounts.updated += 1;
        } else {
            report.discounts.unchanged += 1;
        }
    }
    report.discounts.added += desired.len() as u64;
    inserts.extend(desired);
    if !refused.is_empty() {
        return Ok(());
    }
    for id in deletes {
        reference::delete_discount(tx, id).await?;
    }
    ends.sort_by_key(End::lengthens);
    for e in ends {
        if let Err(err) = reference::set_discount_until(tx, e.id, e.new).await {
            return Err(end_refused(&e, err));
        }
    }
    for (scope, d) in inserts {
        let new = reference::NewDiscount {
            scope,
            percent: d.percent,
            period: &d.period,
            reason: &d.reason,
        };
        reference::insert_discount(tx, &new, author).await?;
    }
    Ok(())
}

/// What is in force at an instant.
#[derive(Debug, Clone, Serialize)]
pub struct InForce {
    pub at: DateTime<Utc>,
    pub catalog: Catalog,
    pub projects: Vec<reference::ProjectAt>,
    /// The codes of the projects the discounts in force are for.
    pub project_codes: std::collections::HashMap<ProjectId, String>,
}

/// The configuration in force at `at`: rate cards and storage rates not in
/// force then are left out; each project with its quota then.
pub async fn show(pool: &PgPool, at: DateTime<Utc>) -> Result<InForce, DbError> {
    let mut conn = pool.acquire().await?;
    let mut catalog = reference::load_catalog(&mut conn).await?;
    for c in &mut catalog.clusters {
        c.rate_cards.retain(|r| r.period.in_force_at(at));
        for rows in c.queues.values_mut() {
            rows.retain(|q| q.in_force_at(at));
        }
        c.queues.retain(|_, rows| !rows.is_empty());
    }
    catalog.storage_rates.retain(|r| r.in_force_at(at));
    catalog.discounts.retain(|d| d.period.in_force_at(at));
    let projects = reference::projects_at(&mut conn, at).await?;
    let ids: Vec<ProjectId> = catalog
        .discounts
        .iter()
        .filter_map(|d| match d.scope {
            DiscountScope::Project(p) => Some(p),
            DiscountScope::Class(_) => None,
        })
        .collect();
    let project_codes = reference::project_headers(&mut conn, &ids)
        .await?
        .into_iter()
        .map(|(id, code, _, _)| (id, code))
        .collect();
    Ok(InForce {
        at,
        catalog,
        projects,
        project_codes,
    })
}

/// The billing time zone; UTC before any configuration is applied.
pub async fn time_zone(pool: &PgPool) -> Result<Tz, DbError> {
    let mut conn = pool.acquire().await?;
    Ok(reference::load_center(&mut conn)
        .await?
        .map_or(Tz::UTC, |c| c.time_zone))
}
