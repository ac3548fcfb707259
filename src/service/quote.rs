//! `quote`: what would this job cost? Prices a request as a user writes it
//! with the rules in force at a date, for the default rate class, a class,
//! or a project (its class and discount). Records nothing.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use crate::db::{DbError, reference};
use crate::domain::catalog::DiscountScope;
use crate::domain::entries::discount_amounts;
use crate::domain::pricing::{JobPrice, JobShape, PricingError, RateCard, check_memory_per_node, price_job};
use crate::domain::request::{
    GpuSpec, RequestError, ResourceRequest, parse_pbs, parse_slurm, pbs_duration, slurm_duration,
};
use crate::domain::rules::{Dated, NodeTypeError, Scheduler};
use crate::ids::RateCardId;

/// What to price.
#[derive(Debug, Clone)]
pub struct QuoteRequest {
    pub cluster: String,
    /// `nodes=1:ppn=4,mem=12GB` (PBS) or `-n 4 --mem=12G` (Slurm).
    pub resources: String,
    /// The request's syntax; by default the cluster's scheduler, or Slurm
    /// when the request starts with `-`.
    pub dialect: Option<Scheduler>,
    /// Wall time (`HH:MM:SS`, `D-HH:MM:SS`); else the request's own.
    pub walltime: Option<String>,
    pub queue: Option<String>,
    pub node_type: Option<String>,
    pub at: DateTime<Utc>,
    /// Price for this project: its rate class and discount at `at`.
    pub project: Option<String>,
    /// Price for this rate class (`default` for the default one) and its
    /// discount; instead of a project's.
    pub class: Option<String>,
}

/// The discount a quote applies (docs/rules.md R8).
#[derive(Debug, Clone, Serialize)]
pub struct QuoteDiscount {
    pub percent: rust_decimal::Decimal,
    pub reason: String,
    /// The sum of the lines' discount amounts (negative).
    pub amount: rust_decimal::Decimal,
}

#[derive(Debug, Clone, Serialize)]
pub struct Quote {
    pub cluster: String,
    /// The cluster's id (for callers that record something about the job).
    #[serde(skip)]
    pub cluster_id: crate::ids::ClusterId,
    pub node_type: String,
    pub queue: Option<String>,
    pub at: DateTime<Utc>,
    pub currency: String,
    pub rate_card_id: RateCardId,
    pub rate_card: Dated<RateCard>,
    pub request: ResourceRequest,
    pub shape: JobShape,
    pub price: JobPrice,
    /// The project priced for, if one was named.
    pub project: Option<String>,
    /// The rate class whose card priced it.
    pub rate_class: String,
    /// The sum of the price's rounded lines: the list price.
    pub list_total: rust_decimal::Decimal,
    pub discount: Option<QuoteDiscount>,
    /// What the job would cost: the list price less the discount.
    pub total: rust_decimal::Decimal,
}

#[derive(Debug, thiserror::Error)]
pub enum QuoteError {
    #[error("no center configuration has been applied yet: run `hpc-ledger config apply FILE`")]
    NoConfig,
    #[error("unknown cluster {name:?} ({known})")]
    UnknownCluster { name: String, known: String },
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(
        "{error}; this looks like a PBS request, and cluster {cluster} runs Slurm: give --dialect pbs to read it as one"
    )]
    PbsOnSlurm { cluster: String, error: RequestError },
    #[error(transparent)]
    NodeType(#[from] NodeTypeError),
    #[error("no rate card for node type {node_type:?}{class} on cluster {cluster} is in force at {at}")]
    NoRateCard {
        cluster: String,
        node_type: String,
        /// ` and rate class NAME`, or nothing for the default class.
        class: String,
        at: DateTime<Utc>,
    },
    #[error("{0}")]
    Unknown(String),
    #[error("give --project or --class, not both")]
    ProjectAndClass,
    #[error("no wall time: give --walltime, or walltime=/-t in the request")]
    NoWalltime,
    #[error("bad --walltime: {0}")]
    BadWalltime(String),
    #[error(transparent)]
    Pricing(#[from] PricingError),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for QuoteError {
    fn from(e: sqlx::Error) -> Self {
        QuoteError::Db(e.into())
    }
}

pub async fn quote(pool: &PgPool, q: &QuoteRequest) -> Result<Quote, QuoteError> {
    quote_with(pool, &CatalogCache::default(), q).await
}

/// The rate catalog, loaded again only when the rules' version changes
/// (every change to what prices a job bumps it: centers, clusters, node
/// types, queues, rate cards, storage rates, classes, project classes,
/// discounts). `serve` keeps one for its start checks.
#[derive(Default)]
pub struct CatalogCache(std::sync::Mutex<Option<(i64, std::sync::Arc<crate::domain::catalog::Catalog>)>>);

impl CatalogCache {
    /// The catalog as of now. The version is read before the catalog, so a
    /// change in between is cached under the older version and loaded again
    /// on the next call: never an older catalog under a newer version.
    pub async fn get(
        &self,
        conn: &mut sqlx::PgConnection,
    ) -> Result<std::sync::Arc<crate::domain::catalog::Catalog>, sqlx::Error> {
        let version = crate::db::ledger::rules_version(&mut *conn).await?;
        if let Some((v, c)) = &*self.0.lock().unwrap_or_else(|e| e.into_inner())
            && *v == version
        {
            return Ok(c.clone());
        }
        let catalog = std::sync::Arc::new(reference::load_catalog(conn).await?);
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((version, catalog.clone()));
        Ok(catalog)
    }
}

/// [`quote`], with the catalog from `cache`.
pub async fn quote_with(pool: &PgPool, cache: &CatalogCache, q: &QuoteRequest) -> Result<Quote, QuoteError> {
    let mut conn = pool.acquire().await?;
    quote_in(&mut conn, cache, q).await
}

/// [`quote_with`], on a connection the caller holds (a start check asks
/// for one connection only: serve's pool is small, and a check waiting for a
/// second while holding the first could wait on the others doing the same).
pub async fn quote_in(
    conn: &mut sqlx::PgConnection,
    cache: &CatalogCache,
    q: &QuoteRequest,
) -> Result<Quote, QuoteError> {
    let catalog = cache.get(&mut *conn).await?;
    let center = catalog.center.clone().ok_or(QuoteError::NoConfig)?;
    let cluster = catalog.cluster(&q.cluster).ok_or_else(|| QuoteError::UnknownCluster {
        name: q.cluster.clone(),
        known: catalog.clusters_known(&q.cluster),
    })?;
    let dialect = q.dialect.unwrap_or(if q.resources.trim_start().starts_with('-') {
        Scheduler::Slurm
    } else {
        cluster.scheduler
    });
    let mut request = match dialect {
        Scheduler::Pbs => parse_pbs(&q.resources)?,
        Scheduler::Slurm => match parse_slurm(&q.resources) {
            Ok(r) => r,
            // `nodes=1:ppn=4`, `select=2:ncpus=8` given to a Slurm cluster.
            Err(error) if q.dialect.is_none() && parse_pbs(&q.resources).is_ok() => {
                return Err(QuoteError::PbsOnSlurm {
                    cluster: cluster.name.clone(),
                    error,
                });
            }
            Err(e) => return Err(e.into()),
        },
    };
    let asks_for_gpus = match request.gpus {
        GpuSpec::Total(g) | GpuSpec::PerNode(g) => g,
    };
    let node_type = cluster.resolve_node_type(q.queue.as_deref(), q.node_type.as_deref(), asks_for_gpus, q.at)?;
    let (project, class) = match (&q.project, &q.class) {
        (Some(_), Some(_)) => return Err(QuoteError::ProjectAndClass),
        (Some(code), None) => {
            let p = crate::service::project(&mut *conn, code)
                .await?
                .map_err(|named| QuoteError::Unknown(format!("unknown project {named}")))?;
            let class = catalog.class_of(p.id, q.at);
            (Some(p), class)
        }
        (None, Some(name)) => (None, catalog.class_named(name).map_err(QuoteError::Unknown)?),
        (None, None) => (None, None),
    };
    let card = cluster
        .rate_card(node_type.id, class, q.at)
        .ok_or_else(|| QuoteError::NoRateCard {
            cluster: cluster.name.clone(),
            node_type: node_type.name.clone(),
            class: class.map_or(String::new(), |_| {
                format!(" and rate class {}", catalog.class_name(class))
            }),
            at: q.at,
        })?;
    // Without a node count, as many nodes as the cores need, and as the GPUs
    // need on a node type that has them (`--gpus=4` on nodes of 2 spans two
    // nodes, and is charged so; it was quoted on one).
    if request.nodes.is_none()
        && node_type.gpus_per_node > 0
        && let GpuSpec::Total(g) = request.gpus
        && g > 0
    {
        let by_cores = request
            .cores
            .div_ceil(card.period.value.cores_per_node.max(1))
            .max(request.min_nodes)
            .max(1);
        request.nodes = Some(by_cores.max(g.div_ceil(node_type.gpus_per_node)));
    }
    let shape = request.shape(card.period.value.cores_per_node)?;
    let wall = match &q.walltime {
        Some(w) => match dialect {
            Scheduler::Pbs => pbs_duration(w),
            Scheduler::Slurm => slurm_duration(w),
        }
        .map_err(QuoteError::BadWalltime)?,
        None => request.walltime.ok_or(QuoteError::NoWalltime)?,
    };
    check_memory_per_node(&shape)?;
    // A request's wall time is asked for, not run: said so.
    if wall > crate::domain::pricing::limits::MAX_WALL_SECONDS {
        return Err(QuoteError::BadWalltime(format!(
            "{wall} s is more than a year, longer than any job may run"
        )));
    }
    let price = price_job(&shape, wall, &card.period.value)?;
    let discount = match (&project, class) {
        (Some(p), _) => catalog.discount_for(p.id, class, q.at),
        (None, Some(c)) => catalog
            .discounts
            .iter()
            .find(|d| d.scope == DiscountScope::Class(c) && d.period.in_force_at(q.at)),
        (None, None) => None,
    }
    .map(|d| QuoteDiscount {
        percent: d.percent,
        reason: d.reason.clone(),
        amount: price
            .lines
            .iter()
            .map(|l| discount_amounts(l.amount_exact, d.percent).1)
            .sum(),
    });
    let list_total = price.total();
    Ok(Quote {
        cluster: cluster.name.clone(),
        cluster_id: cluster.id,
        node_type: node_type.name.clone(),
        queue: q.queue.clone(),
        at: q.at,
        currency: center.currency,
        rate_card_id: card.id,
        rate_card: card.period.clone(),
        request,
        shape,
        project: project.map(|p| p.code),
        rate_class: catalog.class_name(class).to_owned(),
        total: list_total + discount.as_ref().map_or(rust_decimal::Decimal::ZERO, |d| d.amount),
        list_total,
        discount,
        price,
    })
}
