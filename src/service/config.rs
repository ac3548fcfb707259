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

use crate::config::{CenterConfig, ClusterConfig, NodeTypeConfig};
use crate::db::{self, DbError, reference};
use crate::domain::catalog::CardRow;
use crate::domain::catalog::Catalog;
use crate::domain::pricing::RateCard;
use crate::domain::rules::Dated;
use crate::domain::storage::QuotaChange;
use crate::domain::storage::StoragePrice;
use crate::ids::{ClusterId, NodeTypeId, ProjectId, RateCardId, StorageRateId};

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
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Apply a validated configuration. All or nothing: any refusal rolls
/// everything back and lists every problem.
pub async fn apply(pool: &PgPool, config: &CenterConfig, author: &str) -> Result<ApplyReport, ApplyError> {
    let mut tx = pool.begin().await.map_err(DbError::from)?;
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
    let mut tx = pool.begin().await.map_err(DbError::from)?;
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
        apply_cluster(&mut *tx, &key, id, c, cards, &mut report, &mut refused).await?;
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

    apply_storage_rates(&mut *tx, &config.storage_rates, &mut report, &mut refused).await?;
    apply_projects(&mut *tx, config, author, &mut report, &mut refused).await?;

    if !refused.is_empty() {
        return Err(ApplyError::Refused(refused));
    }
    Ok(report)
}

async fn apply_cluster(
    tx: &mut PgConnection,
    key: &str,
    cluster: ClusterId,
    c: &ClusterConfig,
    existing_cards: Vec<CardUse>,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    // Load.
    let node_types = reference::load_node_types(tx, cluster).await?;
    let queues = reference::load_queue_map(tx, cluster).await?;
    // Plan.
    let plan = plan_cluster(key, c, &node_types, &queues, &existing_cards, report);
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
    for (queue, node_type) in plan.set_queues {
        reference::set_queue(tx, cluster, queue, ids[node_type]).await?;
    }
    for queue in plan.remove_queues {
        reference::remove_queue(tx, cluster, &queue).await?;
    }
    for id in plan.delete_cards {
        reference::delete_rate_card(tx, id).await?;
    }
    // Shorten before lengthening and inserting, so no two cards ever overlap.
    let mut ends = plan.end_cards;
    ends.sort_by_key(End::lengthens);
    for e in ends {
        reference::set_rate_card_until(tx, e.id, e.new).await?;
    }
    for (node_type, card) in plan.insert_cards {
        reference::insert_rate_card(tx, cluster, ids[node_type], card).await?;
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
    /// Cards to insert (new, or replacing an unused card whose values changed), by node type name.
    insert_cards: Vec<(&'c str, &'c Dated<RateCard>)>,
    refused: Vec<String>,
}

fn plan_cluster<'c>(
    key: &str,
    c: &'c ClusterConfig,
    node_types: &[reference::NodeTypeRow],
    queues: &BTreeMap<String, NodeTypeId>,
    existing_cards: &[CardUse],
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
    for (queue, node_type) in &c.queues {
        match queues.get(queue) {
            Some(old) if name_of(*old) == Some(node_type.as_str()) => report.queues.unchanged += 1,
            old => {
                if old.is_some() {
                    report.queues.updated += 1;
                } else {
                    report.queues.added += 1;
                }
                plan.set_queues.push((queue.as_str(), node_type.as_str()));
            }
        }
    }
    for queue in queues.keys().filter(|q| !c.queues.contains_key(*q)) {
        plan.remove_queues.push(queue.clone());
        report.queues.removed += 1;
    }

    // Rate cards, matched by node type and start.
    let mut desired: Vec<(&str, &Dated<RateCard>)> =
        c.rate_cards.iter().map(|r| (r.node_type.as_str(), &r.card)).collect();
    for e in existing_cards {
        let row = &e.row;
        let name = name_of(row.node_type_id).unwrap_or("?");
        let matching = desired
            .iter()
            .position(|(t, d)| *t == name && d.valid_from == row.period.valid_from);
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
        let (node_type, d) = desired.remove(i);
        if d.value != row.period.value {
            if e.used {
                plan.refused.push(format!(
                    "{key}: the {name} rate card from {} has priced charges; its prices and sizes cannot change (add a new dated card instead)",
                    row.period.valid_from
                ));
            } else {
                plan.delete_cards.push(row.id);
                plan.insert_cards.push((node_type, d));
                report.rate_cards.updated += 1;
            }
        } else if d.valid_until != row.period.valid_until {
            plan.end_cards.push(End {
                old: row.period.valid_until,
                new: d.valid_until,
                id: row.id,
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
    desired: &[Dated<Decimal>],
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
    let mut desired: Vec<&Dated<Decimal>> = desired.iter().collect();
    let mut ends = Vec::new();
    let mut reinserts = Vec::new();
    let mut deletes = Vec::new();
    let refused_before = refused.len();
    for e in &existing {
        let r = &e.rate;
        let Some(i) = desired.iter().position(|d| d.valid_from == r.valid_from) else {
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
        let d = desired.remove(i);
        if d.value != r.value.tb_month {
            if e.used {
                refused.push(format!(
                    "the storage rate from {} has priced charges; its price cannot change (add a new dated rate instead)",
                    r.valid_from
                ));
            } else {
                deletes.push(r.value.key);
                reinserts.push(d);
                report.storage_rates.updated += 1;
            }
        } else if d.valid_until != r.valid_until {
            ends.push(End {
                id: r.value.key,
                old: r.valid_until,
                new: d.valid_until,
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
        reference::set_storage_rate_until(tx, e.id, e.new).await?;
    }
    for d in reinserts {
        reference::insert_storage_rate(tx, d).await?;
    }
    for d in desired {
        reference::insert_storage_rate(tx, d).await?;
        report.storage_rates.added += 1;
    }
    Ok(())
}

async fn apply_projects(
    tx: &mut PgConnection,
    config: &CenterConfig,
    author: &str,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    let codes: Vec<String> = config.projects.iter().map(|p| p.code.clone()).collect();
    let names: Vec<String> = config.projects.iter().map(|p| p.name.clone()).collect();
    let pis: Vec<String> = config.projects.iter().map(|p| p.pi.clone()).collect();
    let (added, updated) = reference::upsert_projects(tx, &codes, &names, &pis).await?;
    report.projects = Counts {
        added,
        updated,
        removed: 0,
        unchanged: codes.len() as u64 - added - updated,
    };
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
    Ok(())
}

/// What is in force at an instant.
#[derive(Debug, Clone, Serialize)]
pub struct InForce {
    pub at: DateTime<Utc>,
    pub catalog: Catalog,
    pub projects: Vec<reference::ProjectAt>,
}

/// The configuration in force at `at`: rate cards and storage rates not in
/// force then are left out; each project with its quota then.
pub async fn show(pool: &PgPool, at: DateTime<Utc>) -> Result<InForce, DbError> {
    let mut conn = pool.acquire().await?;
    let mut catalog = reference::load_catalog(&mut conn).await?;
    for c in &mut catalog.clusters {
        c.rate_cards.retain(|r| r.period.in_force_at(at));
    }
    catalog.storage_rates.retain(|r| r.in_force_at(at));
    let projects = reference::projects_at(&mut conn, at).await?;
    Ok(InForce { at, catalog, projects })
}

/// The billing time zone; UTC before any configuration is applied.
pub async fn time_zone(pool: &PgPool) -> Result<Tz, DbError> {
    let mut conn = pool.acquire().await?;
    Ok(reference::load_center(&mut conn)
        .await?
        .map_or(Tz::UTC, |c| c.time_zone))
}
