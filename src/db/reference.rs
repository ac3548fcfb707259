//! Reference data: the center, clusters, node types, queue maps, rate cards,
//! storage rates, rate classes, projects with their quota and class history,
//! and discounts.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::domain::catalog::{
    CardRow, Catalog, CenterInfo, ClassChange, ClusterInfo, DiscountRow, DiscountScope, NodeTypeInfo, RateClass,
};
use crate::domain::pricing::RateCard;
use crate::domain::rules::{Dated, QueueMap, Scheduler};
use crate::domain::storage::{QuotaChange, StoragePrice};
use crate::domain::units::Bytes;
use crate::ids::{ClusterId, DiscountId, NodeTypeId, ProjectId, RateCardId, RateClassId, StorageRateId};

fn tz(name: &str) -> Result<Tz, sqlx::Error> {
    name.parse()
        .map_err(|_| sqlx::Error::Decode(format!("unknown time zone {name:?} in the database").into()))
}

fn to_u32(v: i32) -> u32 {
    u32::try_from(v).expect("the schema keeps these non-negative")
}

fn to_bytes(v: i64) -> Bytes {
    Bytes(u64::try_from(v).expect("the schema keeps these positive"))
}

pub async fn load_center(conn: &mut PgConnection) -> Result<Option<CenterInfo>, sqlx::Error> {
    let row = sqlx::query!("SELECT name, currency, time_zone FROM center")
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|r| {
        Ok(CenterInfo {
            name: r.name,
            currency: r.currency,
            time_zone: tz(&r.time_zone)?,
        })
    })
    .transpose()
}

pub async fn load_rate_cards(conn: &mut PgConnection) -> Result<Vec<(ClusterId, CardRow)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT r.id, r.cluster_id, r.node_type_id, r.rate_class_id, r.valid_from, r.valid_until, r.core_hour_price,
                  r.gpu_hour_price, r.memory_per_core_bytes, r.cores_per_node
             FROM rate_card r
            ORDER BY r.node_type_id, r.valid_from"#
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                ClusterId(r.cluster_id),
                CardRow {
                    id: RateCardId(r.id),
                    node_type_id: NodeTypeId(r.node_type_id),
                    class: r.rate_class_id.map(RateClassId),
                    period: Dated {
                        valid_from: r.valid_from,
                        valid_until: r.valid_until,
                        value: RateCard {
                            core_hour: r.core_hour_price.normalize(),
                            gpu_hour: r.gpu_hour_price.normalize(),
                            memory_per_core: to_bytes(r.memory_per_core_bytes),
                            cores_per_node: to_u32(r.cores_per_node),
                        },
                    },
                },
            )
        })
        .collect())
}

/// The rate cards that have priced a charge, live or archived. A loose
/// index scan: one index probe per distinct card, however large the ledger.
pub async fn used_rate_cards(conn: &mut PgConnection) -> Result<HashSet<RateCardId>, sqlx::Error> {
    let ids = sqlx::query_scalar!(
        r#"WITH RECURSIVE used(id) AS (
               (SELECT rate_card_id FROM ledger_entry WHERE rate_card_id IS NOT NULL ORDER BY rate_card_id LIMIT 1)
               UNION ALL
               SELECT (SELECT e.rate_card_id FROM ledger_entry e
                        WHERE e.rate_card_id IS NOT NULL AND e.rate_card_id > u.id ORDER BY e.rate_card_id LIMIT 1)
                 FROM used u WHERE u.id IS NOT NULL)
           SELECT id AS "id!" FROM used WHERE id IS NOT NULL
           UNION SELECT a.id FROM archived_rule a WHERE a.kind = 'rate_card'"#
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(ids.into_iter().map(RateCardId).collect())
}

/// The storage rates that have priced a charge, live or archived (a loose
/// index scan too).
pub async fn used_storage_rates(conn: &mut PgConnection) -> Result<HashSet<StorageRateId>, sqlx::Error> {
    let ids = sqlx::query_scalar!(
        r#"WITH RECURSIVE used(id) AS (
               (SELECT storage_rate_id FROM ledger_entry WHERE storage_rate_id IS NOT NULL ORDER BY storage_rate_id LIMIT 1)
               UNION ALL
               SELECT (SELECT e.storage_rate_id FROM ledger_entry e
                        WHERE e.storage_rate_id IS NOT NULL AND e.storage_rate_id > u.id ORDER BY e.storage_rate_id LIMIT 1)
                 FROM used u WHERE u.id IS NOT NULL)
           SELECT id AS "id!" FROM used WHERE id IS NOT NULL
           UNION SELECT a.id FROM archived_rule a WHERE a.kind = 'storage_rate'"#
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(ids.into_iter().map(StorageRateId).collect())
}

pub async fn load_storage_rates(
    conn: &mut PgConnection,
) -> Result<Vec<Dated<StoragePrice<StorageRateId>>>, sqlx::Error> {
    let rows = sqlx::query!(
        "SELECT id, rate_class_id, valid_from, valid_until, tb_month_price FROM storage_rate
          ORDER BY rate_class_id NULLS FIRST, valid_from"
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Dated {
            valid_from: r.valid_from,
            valid_until: r.valid_until,
            value: StoragePrice {
                key: StorageRateId(r.id),
                tb_month: r.tb_month_price.normalize(),
                class: r.rate_class_id.map(RateClassId),
            },
        })
        .collect())
}

/// Everything needed to price jobs and storage.
pub async fn load_catalog(conn: &mut PgConnection) -> Result<Catalog, sqlx::Error> {
    let center = load_center(conn).await?;
    let clusters = sqlx::query!("SELECT id, name, scheduler, time_zone FROM cluster ORDER BY id")
        .fetch_all(&mut *conn)
        .await?;
    let node_types = sqlx::query!(
        "SELECT id, cluster_id, name, cores_per_node, gpus_per_node, memory_per_node_bytes FROM node_type
          ORDER BY cluster_id, id"
    )
    .fetch_all(&mut *conn)
    .await?;
    let queues = sqlx::query!(
        r#"SELECT q.cluster_id, q.queue, n.name AS node_type,
                  nullif(q.valid_from, '-infinity') AS valid_from, q.valid_until
             FROM queue_map q JOIN node_type n ON n.id = q.node_type_id
            ORDER BY q.cluster_id, q.queue, q.valid_from"#
    )
    .fetch_all(&mut *conn)
    .await?;
    let cards = load_rate_cards(conn).await?;
    let storage_rates = load_storage_rates(conn).await?;
    let classes = load_classes(conn).await?;
    let project_classes = load_project_classes(conn).await?;
    let discounts = load_discounts(conn).await?;

    let mut out = Vec::with_capacity(clusters.len());
    for c in clusters {
        let id = ClusterId(c.id);
        out.push(ClusterInfo {
            id,
            name: c.name,
            scheduler: Scheduler::parse(&c.scheduler)
                .ok_or_else(|| sqlx::Error::Decode(format!("unknown scheduler {:?}", c.scheduler).into()))?,
            time_zone: c.time_zone.as_deref().map(tz).transpose()?,
            node_types: node_types
                .iter()
                .filter(|n| n.cluster_id == c.id)
                .map(|n| NodeTypeInfo {
                    id: NodeTypeId(n.id),
                    name: n.name.clone(),
                    cores_per_node: to_u32(n.cores_per_node),
                    gpus_per_node: to_u32(n.gpus_per_node),
                    memory_per_node: n.memory_per_node_bytes.and_then(|m| u64::try_from(m).ok()).map(Bytes),
                })
                .collect(),
            queues: queues
                .iter()
                .filter(|q| q.cluster_id == c.id)
                .fold(QueueMap::new(), |mut map, q| {
                    map.entry(q.queue.clone()).or_default().push(Dated {
                        valid_from: q.valid_from.unwrap_or(DateTime::<Utc>::MIN_UTC),
                        valid_until: q.valid_until,
                        value: q.node_type.clone(),
                    });
                    map
                }),
            rate_cards: cards
                .iter()
                .filter(|(cid, _)| *cid == id)
                .map(|(_, row)| row.clone())
                .collect(),
        });
    }
    Ok(Catalog {
        center,
        clusters: out,
        storage_rates,
        classes,
        project_classes,
        discounts,
    })
}

pub async fn load_classes(conn: &mut PgConnection) -> Result<Vec<RateClass>, sqlx::Error> {
    sqlx::query_as!(
        RateClass,
        r#"SELECT id AS "id: RateClassId", name, description FROM rate_class ORDER BY name"#
    )
    .fetch_all(&mut *conn)
    .await
}

/// Every project's class changes, oldest first.
pub async fn load_project_classes(
    conn: &mut PgConnection,
) -> Result<HashMap<ProjectId, Vec<ClassChange>>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT project_id AS "project_id: ProjectId", rate_class_id AS "class: RateClassId", effective_from
             FROM project_class ORDER BY project_id, effective_from"#
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out: HashMap<ProjectId, Vec<ClassChange>> = HashMap::new();
    for r in rows {
        out.entry(r.project_id).or_default().push(ClassChange {
            effective_from: r.effective_from,
            class: r.class,
        });
    }
    Ok(out)
}

pub async fn load_discounts(conn: &mut PgConnection) -> Result<Vec<DiscountRow>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT id AS "id: DiscountId", project_id AS "project_id: ProjectId", rate_class_id AS "class: RateClassId",
                  percent, valid_from, valid_until, reason
             FROM discount ORDER BY valid_from, id"#
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            let scope = match (r.project_id, r.class) {
                (Some(p), None) => DiscountScope::Project(p),
                (None, Some(c)) => DiscountScope::Class(c),
                _ => {
                    return Err(sqlx::Error::Decode(
                        format!("discount {} has no single scope", r.id).into(),
                    ));
                }
            };
            Ok(DiscountRow {
                id: r.id,
                scope,
                percent: r.percent.normalize(),
                period: Dated {
                    valid_from: r.valid_from,
                    valid_until: r.valid_until,
                    value: (),
                },
                reason: r.reason,
            })
        })
        .collect()
}

/// Add a rate class, or set its description; its id.
pub async fn upsert_class(conn: &mut PgConnection, name: &str, description: &str) -> Result<RateClassId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO rate_class (name, description) VALUES ($1, $2)
           ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description
           RETURNING id AS "id: RateClassId""#,
        name,
        description
    )
    .fetch_one(&mut *conn)
    .await
}

/// Append class changes of projects in one statement.
pub async fn insert_project_classes(
    conn: &mut PgConnection,
    changes: &[(ProjectId, ClassChange)],
    author: &str,
) -> Result<u64, sqlx::Error> {
    let ids: Vec<i64> = changes.iter().map(|(p, _)| p.0).collect();
    let froms: Vec<DateTime<Utc>> = changes.iter().map(|(_, c)| c.effective_from).collect();
    let classes: Vec<Option<i64>> = changes.iter().map(|(_, c)| c.class.map(|c| c.0)).collect();
    let done = sqlx::query!(
        "INSERT INTO project_class (project_id, effective_from, rate_class_id, author)
         SELECT p, f, c, $4 FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[]) AS u(p, f, c)",
        &ids,
        &froms,
        &classes as &[Option<i64>],
        author
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// A discount to record.
pub struct NewDiscount<'a> {
    pub scope: DiscountScope,
    pub percent: Decimal,
    pub period: &'a Dated<()>,
    pub reason: &'a str,
}

pub async fn insert_discount(
    conn: &mut PgConnection,
    d: &NewDiscount<'_>,
    author: &str,
) -> Result<DiscountId, sqlx::Error> {
    let (project, class) = match d.scope {
        DiscountScope::Project(p) => (Some(p.0), None),
        DiscountScope::Class(c) => (None, Some(c.0)),
    };
    sqlx::query_scalar!(
        r#"INSERT INTO discount (project_id, rate_class_id, percent, valid_from, valid_until, reason, author)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           RETURNING id AS "id: DiscountId""#,
        project,
        class,
        d.percent,
        d.period.valid_from,
        d.period.valid_until,
        d.reason,
        author
    )
    .fetch_one(&mut *conn)
    .await
}

/// Change a discount's end; the database refuses one that would leave out
/// a charge it discounted, or cover one posted before.
pub async fn set_discount_until(
    conn: &mut PgConnection,
    id: DiscountId,
    until: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE discount SET valid_until = $2 WHERE id = $1",
        id as DiscountId,
        until
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Remove a discount that has discounted nothing (the database refuses others).
pub async fn delete_discount(conn: &mut PgConnection, id: DiscountId) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM discount WHERE id = $1", id as DiscountId)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The discounts that have discounted a charge, live or archived.
pub async fn used_discounts(conn: &mut PgConnection) -> Result<Vec<DiscountId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT discount_id AS "id!: DiscountId" FROM ledger_entry WHERE discount_id IS NOT NULL
           UNION SELECT a.id FROM archived_rule a WHERE a.kind = 'discount'"#
    )
    .fetch_all(&mut *conn)
    .await
}

/// Insert or update the center row; whether anything changed.
/// Set the center's name, currency and billing time zone; whether anything changed.
pub async fn upsert_center(
    conn: &mut PgConnection,
    name: &str,
    currency: &str,
    time_zone: &str,
) -> Result<bool, sqlx::Error> {
    let changed = sqlx::query_scalar!(
        r#"INSERT INTO center (name, currency, time_zone) VALUES ($1, $2, $3)
           ON CONFLICT (singleton) DO UPDATE
              SET name = EXCLUDED.name, currency = EXCLUDED.currency, time_zone = EXCLUDED.time_zone,
                  updated_at = now()
            WHERE (center.name, center.currency, center.time_zone)
                  IS DISTINCT FROM (EXCLUDED.name, EXCLUDED.currency, EXCLUDED.time_zone)
           RETURNING true AS "changed!""#,
        name,
        currency,
        time_zone,
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(changed.is_some())
}

pub struct ClusterRow {
    pub id: ClusterId,
    pub name: String,
    pub scheduler: String,
    pub time_zone: Option<String>,
    pub description: String,
}

pub async fn load_clusters(conn: &mut PgConnection) -> Result<Vec<ClusterRow>, sqlx::Error> {
    sqlx::query_as!(
        ClusterRow,
        r#"SELECT id AS "id: ClusterId", name, scheduler, time_zone, description FROM cluster ORDER BY id"#
    )
    .fetch_all(&mut *conn)
    .await
}

pub async fn insert_cluster(
    conn: &mut PgConnection,
    name: &str,
    scheduler: Scheduler,
    time_zone: Option<&str>,
    description: &str,
) -> Result<ClusterId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO cluster (name, scheduler, time_zone, description) VALUES ($1, $2, $3, $4)
           RETURNING id AS "id: ClusterId""#,
        name,
        scheduler.as_str(),
        time_zone,
        description
    )
    .fetch_one(&mut *conn)
    .await
}

pub async fn update_cluster(
    conn: &mut PgConnection,
    id: ClusterId,
    name: &str,
    scheduler: Scheduler,
    time_zone: Option<&str>,
    description: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE cluster SET name = $2, scheduler = $3, time_zone = $4, description = $5 WHERE id = $1",
        id as ClusterId,
        name,
        scheduler.as_str(),
        time_zone,
        description
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub struct NodeTypeRow {
    pub id: NodeTypeId,
    pub name: String,
    pub cores_per_node: i32,
    pub gpus_per_node: i32,
    pub memory_per_node_bytes: Option<i64>,
    pub description: String,
}

pub async fn load_node_types(conn: &mut PgConnection, cluster: ClusterId) -> Result<Vec<NodeTypeRow>, sqlx::Error> {
    sqlx::query_as!(
        NodeTypeRow,
        r#"SELECT id AS "id: NodeTypeId", name, cores_per_node, gpus_per_node, memory_per_node_bytes, description
             FROM node_type WHERE cluster_id = $1 ORDER BY id"#,
        cluster as ClusterId
    )
    .fetch_all(&mut *conn)
    .await
}

/// Insert a node type, or update it when it exists; whether anything changed
/// and its id.
pub async fn upsert_node_type(
    conn: &mut PgConnection,
    cluster: ClusterId,
    name: &str,
    cores_per_node: i32,
    gpus_per_node: i32,
    memory_per_node_bytes: Option<i64>,
    description: &str,
) -> Result<NodeTypeId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO node_type (cluster_id, name, cores_per_node, gpus_per_node, memory_per_node_bytes, description)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (cluster_id, name) DO UPDATE
              SET cores_per_node = EXCLUDED.cores_per_node, gpus_per_node = EXCLUDED.gpus_per_node,
                  memory_per_node_bytes = EXCLUDED.memory_per_node_bytes, description = EXCLUDED.description
           RETURNING id AS "id: NodeTypeId""#,
        cluster as ClusterId,
        name,
        cores_per_node,
        gpus_per_node,
        memory_per_node_bytes,
        description
    )
    .fetch_one(&mut *conn)
    .await
}

/// A cluster's queue map as `config apply` compares it with the file.
#[derive(Debug, Default)]
pub struct QueuesNow {
    /// The mappings in force: queue -> node type id.
    pub in_force: BTreeMap<String, NodeTypeId>,
    /// Queues mapped once that left the map.
    pub ended: BTreeSet<String>,
}

/// The queue map of a cluster now.
pub async fn load_queue_map(conn: &mut PgConnection, cluster: ClusterId) -> Result<QueuesNow, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT queue, node_type_id AS "node_type_id: NodeTypeId", valid_until IS NULL AS "open!" FROM queue_map
            WHERE cluster_id = $1"#,
        cluster as ClusterId
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out = QueuesNow::default();
    for r in &rows {
        if r.open {
            out.in_force.insert(r.queue.clone(), r.node_type_id);
        }
    }
    for r in rows {
        if !out.in_force.contains_key(&r.queue) {
            out.ended.insert(r.queue);
        }
    }
    Ok(out)
}

/// The instant a configuration change takes effect: when this transaction
/// took the rules lock ([`super::lock_rules`], which must be held), so every
/// job priced by the rules before was recorded, and started, before it.
pub async fn change_instant(conn: &mut PgConnection) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT current_setting('hpc_ledger.rules_locked_at')::timestamptz AS "at!""#)
        .fetch_one(&mut *conn)
        .await
}

/// Map a queue to a node type from `at` on (docs/rules.md D4): the mapping in
/// force ends at `at`. A queue never mapped before is mapped from -infinity,
/// so its late records, refused as an unknown queue, price once it is.
pub async fn map_queue(
    conn: &mut PgConnection,
    cluster: ClusterId,
    queue: &str,
    node_type: NodeTypeId,
    at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    end_queue(&mut *conn, cluster, queue, at).await?;
    sqlx::query!(
        "INSERT INTO queue_map (cluster_id, queue, node_type_id, valid_from)
         SELECT $1, $2, $3,
                CASE WHEN EXISTS (SELECT 1 FROM queue_map WHERE cluster_id = $1 AND queue = $2)
                     THEN $4::timestamptz ELSE '-infinity'::timestamptz END",
        cluster as ClusterId,
        queue,
        node_type as NodeTypeId,
        at
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// End a queue's mapping in force at `at` (a job priced later through it is
/// an unknown queue's); the mappings before stay for the jobs before.
pub async fn end_queue(
    conn: &mut PgConnection,
    cluster: ClusterId,
    queue: &str,
    at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE queue_map SET valid_until = $3 WHERE cluster_id = $1 AND queue = $2 AND valid_until IS NULL",
        cluster as ClusterId,
        queue,
        at
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub async fn insert_rate_card(
    conn: &mut PgConnection,
    cluster: ClusterId,
    node_type: NodeTypeId,
    class: Option<RateClassId>,
    card: &Dated<RateCard>,
) -> Result<RateCardId, sqlx::Error> {
    let v = &card.value;
    sqlx::query_scalar!(
        r#"INSERT INTO rate_card (cluster_id, node_type_id, rate_class_id, valid_from, valid_until, core_hour_price,
                                  gpu_hour_price, memory_per_core_bytes, cores_per_node)
           VALUES ($1, $2, $9, $3, $4, $5, $6, $7, $8)
           RETURNING id AS "id: RateCardId""#,
        cluster as ClusterId,
        node_type as NodeTypeId,
        card.valid_from,
        card.valid_until,
        v.core_hour,
        v.gpu_hour,
        i64::try_from(v.memory_per_core.0).unwrap_or(i64::MAX),
        i32::try_from(v.cores_per_node).unwrap_or(i32::MAX),
        class.map(|c| c.0),
    )
    .fetch_one(&mut *conn)
    .await
}

/// Change a rate card's end; the database refuses an end that would
/// exclude a job it has priced.
pub async fn set_rate_card_until(
    conn: &mut PgConnection,
    id: RateCardId,
    until: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE rate_card SET valid_until = $2 WHERE id = $1",
        id as RateCardId,
        until
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Remove a rate card that has priced nothing (the database refuses otherwise).
pub async fn delete_rate_card(conn: &mut PgConnection, id: RateCardId) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM rate_card WHERE id = $1", id as RateCardId)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub async fn insert_storage_rate(
    conn: &mut PgConnection,
    class: Option<RateClassId>,
    rate: &Dated<Decimal>,
) -> Result<StorageRateId, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO storage_rate (rate_class_id, valid_from, valid_until, tb_month_price) VALUES ($4, $1, $2, $3)
           RETURNING id AS "id: StorageRateId""#,
        rate.valid_from,
        rate.valid_until,
        rate.value,
        class.map(|c| c.0)
    )
    .fetch_one(&mut *conn)
    .await
}

pub async fn set_storage_rate_until(
    conn: &mut PgConnection,
    id: StorageRateId,
    until: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE storage_rate SET valid_until = $2 WHERE id = $1",
        id as StorageRateId,
        until
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub async fn delete_storage_rate(conn: &mut PgConnection, id: StorageRateId) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM storage_rate WHERE id = $1", id as StorageRateId)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub struct ProjectRow {
    pub id: ProjectId,
    pub code: String,
    pub name: String,
    pub pi: String,
}

/// Every project code (for suggesting one when a code is mistyped).
pub async fn all_project_codes(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT code FROM project ORDER BY code")
        .fetch_all(&mut *conn)
        .await
}

/// Projects whose codes (ignoring case) are among `codes`.
pub async fn load_projects(conn: &mut PgConnection, codes: &[String]) -> Result<Vec<ProjectRow>, sqlx::Error> {
    let lower: Vec<String> = codes.iter().map(|c| c.to_lowercase()).collect();
    sqlx::query_as!(
        ProjectRow,
        r#"SELECT id AS "id: ProjectId", code, name, pi FROM project WHERE lower(code) = ANY($1) ORDER BY id"#,
        &lower
    )
    .fetch_all(&mut *conn)
    .await
}

/// `codes` as this database lowers them (`lower()`, by its character type:
/// a C one, as the embedded database's, lowers ASCII letters only).
pub async fn lowered(conn: &mut PgConnection, codes: &[String]) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT lower(c) FROM unnest($1::text[]) WITH ORDINALITY AS u(c, i) ORDER BY i")
        .bind(codes)
        .fetch_all(&mut *conn)
        .await
}

/// Projects whose codes (ignoring case) are not among `codes`: how many, and
/// the first few codes, in code order.
pub async fn projects_not_in(conn: &mut PgConnection, codes: &[String]) -> Result<(i64, Vec<String>), sqlx::Error> {
    let lower: Vec<String> = codes.iter().map(|c| c.to_lowercase()).collect();
    let (n, first): (i64, Vec<String>) = sqlx::query_as(
        "SELECT count(*), (array_agg(code ORDER BY code))[1:5] FROM project WHERE NOT lower(code) = ANY($1)",
    )
    .bind(&lower)
    .fetch_one(&mut *conn)
    .await
    .map(|(n, first): (i64, Option<Vec<String>>)| (n, first.unwrap_or_default()))?;
    Ok((n, first))
}

/// Insert projects, or update name, PI and the spelling of the code of those
/// that exist (matched ignoring case), in one statement. Returns how many
/// were inserted and how many updated.
pub async fn upsert_projects(
    conn: &mut PgConnection,
    codes: &[String],
    names: &[String],
    pis: &[String],
) -> Result<(u64, u64), sqlx::Error> {
    let rows = sqlx::query_scalar!(
        r#"INSERT INTO project (code, name, pi)
           SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[])
           ON CONFLICT ((lower(code))) DO UPDATE
              SET code = EXCLUDED.code, name = EXCLUDED.name, pi = EXCLUDED.pi
            WHERE (project.code, project.name, project.pi) IS DISTINCT FROM (EXCLUDED.code, EXCLUDED.name, EXCLUDED.pi)
           RETURNING (xmax = 0) AS "inserted!""#,
        codes,
        names,
        pis
    )
    .fetch_all(&mut *conn)
    .await?;
    let inserted = rows.iter().filter(|i| **i).count() as u64;
    Ok((inserted, rows.len() as u64 - inserted))
}

pub async fn load_quotas(
    conn: &mut PgConnection,
    projects: &[ProjectId],
) -> Result<Vec<(ProjectId, QuotaChange)>, sqlx::Error> {
    let ids: Vec<i64> = projects.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        r#"SELECT project_id AS "project_id: ProjectId", effective_from, quota_tb
             FROM storage_quota WHERE project_id = ANY($1) ORDER BY project_id, effective_from"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.project_id,
                QuotaChange {
                    effective_from: r.effective_from,
                    quota_tb: r.quota_tb,
                },
            )
        })
        .collect())
}

/// Append quota changes in one statement.
pub async fn insert_quotas(
    conn: &mut PgConnection,
    quotas: &[(ProjectId, QuotaChange)],
    recorded_by: &str,
) -> Result<u64, sqlx::Error> {
    let ids: Vec<i64> = quotas.iter().map(|(p, _)| p.0).collect();
    let froms: Vec<DateTime<Utc>> = quotas.iter().map(|(_, q)| q.effective_from).collect();
    let tbs: Vec<Decimal> = quotas.iter().map(|(_, q)| q.quota_tb).collect();
    let done = sqlx::query!(
        "INSERT INTO storage_quota (project_id, effective_from, quota_tb, recorded_by)
         SELECT p, f, q, $4 FROM UNNEST($1::bigint[], $2::timestamptz[], $3::numeric[]) AS u(p, f, q)",
        &ids,
        &froms,
        &tbs,
        recorded_by
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// A project and its quota in force at an instant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProjectAt {
    pub code: String,
    pub name: String,
    pub pi: String,
    pub quota_tb: Option<Decimal>,
    /// Its rate class then; `default` for the default class.
    pub rate_class: String,
}

pub async fn projects_at(conn: &mut PgConnection, at: DateTime<Utc>) -> Result<Vec<ProjectAt>, sqlx::Error> {
    sqlx::query_as!(
        ProjectAt,
        r#"SELECT p.code, p.name, p.pi, q.quota_tb AS "quota_tb?", coalesce(k.name, 'default') AS "rate_class!"
             FROM project p
             LEFT JOIN LATERAL (
                  SELECT quota_tb FROM storage_quota
                   WHERE project_id = p.id AND effective_from <= $1
                   ORDER BY effective_from DESC LIMIT 1) q ON true
             LEFT JOIN LATERAL (
                  SELECT rc.name FROM project_class pc LEFT JOIN rate_class rc ON rc.id = pc.rate_class_id
                   WHERE pc.project_id = p.id AND pc.effective_from <= $1
                   ORDER BY pc.effective_from DESC LIMIT 1) k ON true
            ORDER BY lower(p.code)"#,
        at
    )
    .fetch_all(&mut *conn)
    .await
}

/// Code, name and PI of each project in `ids`.
pub async fn project_headers(
    conn: &mut PgConnection,
    ids: &[ProjectId],
) -> Result<Vec<(ProjectId, String, String, String)>, sqlx::Error> {
    let raw: Vec<i64> = ids.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        r#"SELECT id AS "id: ProjectId", code, name, pi FROM project WHERE id = ANY($1)"#,
        &raw
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.code, r.name, r.pi)).collect())
}

/// Whether a center configuration has been applied.
pub async fn center_exists(pool: &sqlx::PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT hl_center_configured() AS "exists!""#)
        .fetch_one(pool)
        .await
}
