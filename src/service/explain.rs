//! Finding and explaining a charge without SQL (issue 20, item 2).
//!
//! `job show CLUSTER/JOBID`: every run of the job, its records, the entries
//! posted for it and against it, and for the record that charges it the
//! price worked out again — by the rate card and the version of the
//! charging rules its entries name — with every intermediate value, as
//! `quote` shows one, and whether it still gives the ledger's amounts.
//! `entries --project P --month M`: the entry ids a correction needs.

use std::collections::HashMap;

use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::explain::{self as edb, EntryRow, RecordRow, RunRow};
use crate::db::{DbError, reference};
use crate::domain::period::Month;
use crate::domain::pricing::{ChargingRules, JobPrice, JobShape, PricingError, RateCard, price_job_by};
use crate::domain::rules::Dated;
use crate::domain::units::Bytes;
use crate::ids::{JobRecordId, RateCardId};

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("no center configuration has been applied yet")]
    NoConfig,
    #[error("{0:?} is not CLUSTER/JOBID (e.g. owens/1004, or owens/1234_7 for an array task)")]
    BadJob(String),
    #[error("unknown cluster {name:?} ({known})")]
    UnknownCluster { name: String, known: String },
    #[error("no run of job {0} is recorded (`hpc-ledger rejected` lists what could not be charged)")]
    NoSuchJob(String),
    #[error("unknown project {0}")]
    UnknownProject(String),
    #[error("{month} is archived (to {file}): its entries are in that file, not in the live ledger")]
    Archived { month: Month, file: String },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for ExplainError {
    fn from(e: sqlx::Error) -> Self {
        ExplainError::Db(e.into())
    }
}

/// A job named as people write it: `owens/1004`, `owens/1234_7`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobName {
    pub cluster: String,
    pub job_id: String,
    pub array_index: Option<i32>,
}

impl std::str::FromStr for JobName {
    type Err = ExplainError;
    fn from_str(s: &str) -> Result<JobName, ExplainError> {
        let bad = || ExplainError::BadJob(s.to_owned());
        let (cluster, job) = s.split_once('/').ok_or_else(bad)?;
        if cluster.is_empty() || job.is_empty() {
            return Err(bad());
        }
        // A Slurm array task is JOBID_INDEX; a PBS subjob, as `$PBS_JOBID`
        // names it (`1234[7].server`), is job `1234[].server`, index 7, as
        // the PBS reader records it.
        let (job_id, array_index) = match job.rsplit_once('_') {
            Some((j, i)) if !j.is_empty() && !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => {
                (j.to_owned(), Some(i.parse::<i32>().map_err(|_| bad())?))
            }
            _ => match crate::domain::posting::array_task_form(job) {
                Some((j, i)) => (j.into_owned(), Some(i.parse::<i32>().map_err(|_| bad())?)),
                None => (job.to_owned(), None),
            },
        };
        Ok(JobName {
            cluster: cluster.to_owned(),
            job_id,
            array_index,
        })
    }
}

/// The record that charges a run, priced again by its own card and rules.
#[derive(Debug, Clone, Serialize)]
pub struct Charge {
    pub record: JobRecordId,
    pub charging_rules: i16,
    pub rate_card_id: RateCardId,
    pub rate_card: Option<Dated<RateCard>>,
    pub shape: JobShape,
    /// `None` when the card is gone or the record no longer prices (the
    /// audit reports such an entry).
    pub price: Option<JobPrice>,
    pub pricing_error: Option<String>,
    /// The amounts worked out again equal the charge entries' amounts.
    pub matches_ledger: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    #[serde(flatten)]
    pub run: RunRow,
    pub records: Vec<RecordRow>,
    pub charge: Option<Charge>,
    pub entries: Vec<EntryRow>,
    /// The sum of every entry above: what the run costs now.
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub net: Decimal,
    /// The first archived month holding charges of its records, whose
    /// entries are in that month's archive file, not among `entries`.
    pub archived: Option<Month>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    pub cluster: String,
    pub job_id: String,
    pub currency: String,
    #[serde(skip)]
    pub time_zone: chrono_tz::Tz,
    pub runs: Vec<Run>,
}

/// Everything recorded and posted for one job.
pub async fn show_job(pool: &PgPool, name: &JobName, raw: bool) -> Result<JobReport, ExplainError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let catalog = reference::load_catalog(&mut conn).await?;
    let center = catalog.center.clone().ok_or(ExplainError::NoConfig)?;
    let cluster = catalog
        .cluster(&name.cluster)
        .ok_or_else(|| ExplainError::UnknownCluster {
            name: name.cluster.clone(),
            known: catalog.clusters_known(&name.cluster),
        })?;
    let mut runs = edb::runs(&mut conn, &cluster.name, &name.job_id, name.array_index).await?;
    let mut name = name.clone();
    if runs.is_empty()
        && let Some(i) = name.array_index
    {
        // `run_2` may be a job id of its own rather than an array task, and
        // a PBS subjob recorded before 2026-12-07 under its `$PBS_JOBID`
        // (`123[4].server`) is one.
        let whole = match name.job_id.split_once("[]") {
            Some((base, after)) => format!("{base}[{i}]{after}"),
            None => format!("{}_{i}", name.job_id),
        };
        runs = edb::runs(&mut conn, &cluster.name, &whole, None).await?;
        if !runs.is_empty() {
            name = JobName {
                job_id: whole,
                array_index: None,
                ..name
            };
        }
    }
    if runs.is_empty() {
        return Err(ExplainError::NoSuchJob(format!(
            "{}/{}{}",
            cluster.name,
            name.job_id,
            name.array_index.map(|i| format!("_{i}")).unwrap_or_default()
        )));
    }
    let ids: Vec<_> = runs.iter().map(|r| r.id).collect();
    let mut records: HashMap<_, Vec<RecordRow>> = HashMap::new();
    for r in edb::records(&mut conn, &ids, raw).await? {
        records.entry(r.job).or_default().push(r);
    }
    let cards: HashMap<RateCardId, Dated<RateCard>> = catalog
        .clusters
        .iter()
        .flat_map(|c| c.rate_cards.iter().map(|card| (card.id, card.period.clone())))
        .collect();
    let mut out = Vec::new();
    for run in runs {
        let records = records.remove(&run.id).unwrap_or_default();
        let record_ids: Vec<JobRecordId> = records.iter().map(|r| r.id).collect();
        let entries = edb::entries_of_records(&mut conn, &record_ids).await?;
        let charge = charge_of(&records, &entries, &cards);
        let ids: Vec<i64> = record_ids.iter().map(|r| r.0).collect();
        let archived = crate::db::archive::archived_charges(&mut conn, &ids)
            .await?
            .into_iter()
            .map(|(_, p)| Month::of_date(p))
            .min();
        out.push(Run {
            archived,
            net: entries.iter().map(|e| e.amount).sum(),
            run,
            records,
            charge,
            entries,
        });
    }
    Ok(JobReport {
        cluster: cluster.name.clone(),
        job_id: name.job_id.clone(),
        currency: center.currency,
        time_zone: center.time_zone,
        runs: out,
    })
}

/// The last record with charge entries, priced again by the card and rules
/// those entries name.
fn charge_of(
    records: &[RecordRow],
    entries: &[EntryRow],
    cards: &HashMap<RateCardId, Dated<RateCard>>,
) -> Option<Charge> {
    let record = records
        .iter()
        .rev()
        .find(|r| entries.iter().any(|e| e.kind == "job" && e.job_record_id == Some(r.id)))?;
    let charges: Vec<&EntryRow> = entries
        .iter()
        .filter(|e| e.kind == "job" && e.job_record_id == Some(record.id))
        .collect();
    let first = charges[0];
    let rate_card_id = first.rate_card_id?;
    let shape = JobShape {
        nodes: record.nodes as u32,
        cores: record.cores as u32,
        memory: record.memory_bytes.map(|b| Bytes(b as u64)),
        gpus: record.gpus as u32,
    };
    // Its time suspended is not charged (docs/rules.md R1).
    let wall = (record.ended_at - record.started_at).num_seconds() - i64::from(record.suspended_seconds);
    let card = cards.get(&rate_card_id).cloned();
    let rules = ChargingRules::from_number(first.charging_rules);
    let priced: Option<Result<JobPrice, PricingError>> = match (&card, rules) {
        (Some(c), Some(rules)) => Some(price_job_by(rules, &shape, wall, &c.value)),
        _ => None,
    };
    let (price, pricing_error) = match priced {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (
            None,
            Some(format!(
                "rate card {rate_card_id} or rules version {} unknown",
                first.charging_rules
            )),
        ),
    };
    let matches_ledger = price.as_ref().is_some_and(|p| {
        p.lines.len() == charges.len()
            && p.lines.iter().all(|l| {
                charges.iter().any(|e| {
                    e.metric.as_deref() == Some(l.metric.as_str())
                        && e.quantity == l.quantity
                        && e.unit_rate == l.unit_rate
                        && e.amount_exact == l.amount_exact
                        && e.amount == l.amount
                })
            })
    });
    Some(Charge {
        record: record.id,
        charging_rules: first.charging_rules,
        rate_card_id,
        rate_card: card,
        shape,
        price,
        pricing_error,
        matches_ledger,
    })
}

/// A project's entries in a month, optionally of one kind.
pub async fn entries(
    pool: &PgPool,
    project: &str,
    month: Month,
    kind: Option<&str>,
) -> Result<Vec<EntryRow>, ExplainError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    crate::service::project(&mut conn, project)
        .await?
        .map_err(ExplainError::UnknownProject)?;
    if let Some(a) = crate::db::archive::archived(&mut conn, month.first_day()).await? {
        return Err(ExplainError::Archived {
            month,
            file: a.file_name,
        });
    }
    Ok(edb::entries_of_project(&mut conn, project, month.first_day(), kind).await?)
}
