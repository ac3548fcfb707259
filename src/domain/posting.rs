//! Posting a finished job (docs/rules.md D5, D6, D9): resolve a job as a scheduler
//! reported it against the rules in force, price it, decide its accounting
//! month, and decide what a re-sent record means (replay, revision,
//! conflict, supersede). Pure: the catalog, project ids and the clock come
//! in as arguments.

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::catalog::{Catalog, ClusterInfo};
use super::entries::{NewEntry, discount_amounts};
use super::kinds::EntryKind;
use super::period::{LocalTimeError, Month, local_to_utc};
use super::pricing::{JobPrice, JobShape, check_memory_per_node, price_job, validate};
use super::rules::{NodeTypeError, pricing_instant};
use super::units::{Bytes, Priced};
use crate::ids::{ClusterId, DiscountId, JobRecordId, NodeTypeId, ProjectId, RateCardId, RateClassId};

/// An instant as a scheduler wrote it: with a zone, or local wall-clock time
/// of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Stamp {
    At(DateTime<Utc>),
    Local(NaiveDateTime),
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stamp::At(t) => write!(f, "{}", t.format("%Y-%m-%dT%H:%M:%SZ")),
            Stamp::Local(t) => write!(f, "{}", t.format("%Y-%m-%dT%H:%M:%S")),
        }
    }
}

/// A finished job as read from any source, before it is resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobInput {
    /// `None`: the importer's default cluster.
    pub cluster: Option<String>,
    pub job_id: String,
    pub array_index: Option<u32>,
    /// The account; `None`: the importer's default project.
    pub project: Option<String>,
    pub user: String,
    pub job_name: String,
    pub queue: Option<String>,
    pub node_type: Option<String>,
    /// Nodes held; `None`: the record gives only a core count (Cray
    /// `mppwidth` without `mppnppn`), so the cores fill whole nodes of the
    /// job's node type: ⌈cores ÷ cores per node⌉.
    pub nodes: Option<u32>,
    pub cores: u32,
    pub memory: Option<Bytes>,
    /// GPUs held in total; `None`: the record gives no GPU count at all
    /// (then 0, except on a node type that has or prices GPUs, where a new
    /// charge is refused rather than posted without them).
    pub gpus: Option<u32>,
    /// Held whole nodes (PBS `place=excl`): cores = nodes × cores per node.
    pub exclusive: bool,
    pub submit: Option<Stamp>,
    pub start: Stamp,
    pub end: Stamp,
    /// What the record says of the time it spent suspended between its
    /// start and its end (`scontrol suspend`, `PreemptMode=SUSPEND`): that
    /// time is not charged, its cores were free for other jobs meanwhile
    /// (docs/rules.md R1).
    pub suspension: Suspension,
    pub state: String,
    pub exit_code: Option<String>,
}

/// What a record says of the time its job was suspended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum Suspension {
    /// Nothing: none is taken off (a jobcomp document, a PBS record, a JSON
    /// line or `job record` without it).
    #[default]
    Unsaid,
    /// The seconds it was suspended, as a person said (a JSON line's
    /// `suspended_seconds`, `job record --suspended-seconds`): more than it
    /// ran is refused.
    Seconds(u32),
    /// What Slurm's accounting says (sacct's `Suspended` and `Elapsed`,
    /// `sacct --json`'s `time.suspended` and `time.elapsed`, each when
    /// given): the seconds suspended, and the seconds it ran, suspension
    /// not counted.
    Slurm {
        suspended: Option<u32>,
        elapsed: Option<u32>,
    },
}

impl Suspension {
    /// The seconds suspended of a run from `started_at` to `ended_at`
    /// (docs/rules.md R1, "Time suspended"); `Err` when a person says it was
    /// suspended longer than it ran.
    pub fn seconds(self, started_at: DateTime<Utc>, ended_at: DateTime<Utc>) -> Result<u32, String> {
        let ran = (ended_at - started_at).num_seconds();
        match self {
            Suspension::Unsaid => Ok(0),
            Suspension::Seconds(s) if i64::from(s) > ran => Err(format!(
                "it was suspended {s} s, longer than it ran from its start to its end ({ran} s)"
            )),
            Suspension::Seconds(s) => Ok(s),
            // Slurm 22.05.8 writes an instant in `Suspended`, and 0 in
            // `Elapsed`, for both parts of a job resized while suspended
            // (tests/fixtures/accounting/slurm_2205_suspend_all_sacct.txt):
            // a `Suspended` longer than the run, or an `Elapsed` of 0 for a
            // run of some length, says nothing.
            Suspension::Slurm { suspended, elapsed } => {
                if let Some(s) = suspended.filter(|&s| i64::from(s) <= ran) {
                    return Ok(s);
                }
                Ok(match elapsed.filter(|&e| e > 0 || ran == 0) {
                    // `Elapsed` at least its end minus its start: nothing
                    // suspended (a resized job's later part counts it from
                    // its first start).
                    Some(e) => u32::try_from((ran - i64::from(e)).max(0)).unwrap_or(u32::MAX),
                    None => 0,
                })
            }
        }
    }
}

impl JobInput {
    /// `cluster/job_id[_index]`, for messages.
    pub fn key(&self) -> String {
        let cluster = self.cluster.as_deref().unwrap_or("?");
        match self.array_index {
            Some(i) => format!("{cluster}/{}_{i}", self.job_id),
            None => format!("{cluster}/{}", self.job_id),
        }
    }
}

crate::domain::kinds::named! {
    /// Why a job is not charged (it is kept for re-processing).
    pub enum RejectKind {
        Malformed => "malformed",
        UnknownCluster => "unknown_cluster",
        UnknownProject => "unknown_project",
        UnknownQueue => "unknown_queue",
        NoRateCard => "no_rate_card",
        Invalid => "invalid",
        Conflict => "conflict",
        Database => "database",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    pub kind: RejectKind,
    pub reason: String,
}

fn reject<T>(kind: RejectKind, reason: impl Into<String>) -> Result<T, Rejection> {
    Err(Rejection {
        kind,
        reason: reason.into(),
    })
}

/// The key a job run is matched on (docs/rules.md D9): cluster, job id with array
/// index, and start time. The submit time belongs to the run too, but a
/// record that does not know it still matches; two different known submit
/// times are a conflict (see [`classify`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct JobKey {
    pub cluster_id: ClusterId,
    pub job_id: String,
    pub array_index: Option<u32>,
    pub started_at: DateTime<Utc>,
}

/// The fields whose change changes the charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChargeFields {
    pub ended_at: DateTime<Utc>,
    /// Seconds suspended: not charged (0 for a record that says none).
    pub suspended_seconds: u32,
    pub nodes: u32,
    pub cores: u32,
    pub memory: Option<Bytes>,
    pub gpus: u32,
    pub queue: Option<String>,
    pub project_id: ProjectId,
    pub node_type_id: NodeTypeId,
}

/// A job resolved against the rules, priced, ready to post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedJob {
    pub key: JobKey,
    pub submitted_at: Option<DateTime<Utc>>,
    pub charge: ChargeFields,
    pub user: String,
    pub job_name: String,
    pub state: String,
    pub exit_code: Option<String>,
    pub rate_card_id: RateCardId,
    /// Its project's rate class at the pricing instant (docs/rules.md R7).
    pub class: Option<RateClassId>,
    /// The discount of its charges, and its percent (docs/rules.md R8).
    pub discount: Option<(DiscountId, Decimal)>,
    pub price: JobPrice,
    /// The month it ended in, in the billing time zone (docs/rules.md D6).
    pub natural_period: Month,
    pub charge_fingerprint: [u8; 32],
    pub content_fingerprint: [u8; 32],
    /// Why this job may not be charged anew, although it resolved: a rule
    /// that applies to new charges only, so a record already charged
    /// before the rule still replays (rules never flag past charges).
    pub refuse_new_charge: Option<Rejection>,
}

/// Jobs that began before this are not real records.
const EARLIEST: &str = "1990-01-01T00:00:00Z";

/// An instant to the second (docs/rules.md D1: durations are exact seconds).
fn instant(stamp: Stamp, tz: Tz, what: &str) -> Result<DateTime<Utc>, Rejection> {
    use chrono::SubsecRound;
    match stamp {
        Stamp::At(t) => Ok(t.trunc_subsecs(0)),
        Stamp::Local(t) => local_to_utc(t, tz).map_err(|LocalTimeError::Skipped| Rejection {
            kind: RejectKind::Invalid,
            reason: format!(
                "the {what} time {t} does not exist in {} (skipped by a daylight-saving change)",
                tz.name()
            ),
        }),
    }
}

/// What a record says the job held, sized with its rate card's cores per
/// node where the record gives only cores (R3: ⌈cores ÷ cores per node⌉).
pub fn held_shape(input: &JobInput, cores_per_node: u32) -> JobShape {
    JobShape {
        nodes: input
            .nodes
            .unwrap_or_else(|| input.cores.div_ceil(cores_per_node.max(1)).max(1)),
        cores: input.cores,
        memory: input.memory,
        gpus: input.gpus.unwrap_or(0),
    }
}

/// The shape charged: an exclusive job holds whole nodes.
pub fn charged_shape(mut shape: JobShape, input: &JobInput, cores_per_node: u32) -> JobShape {
    if input.exclusive {
        shape.cores = shape.nodes.saturating_mul(cores_per_node).max(shape.cores);
    }
    shape
}

/// Start, end and submit in UTC.
pub type Instants = (DateTime<Utc>, DateTime<Utc>, Option<DateTime<Utc>>);

/// A record's instants in UTC, read in `tz` where it gives local times
/// (start, end, submit).
pub fn instants(input: &JobInput, tz: Tz) -> Result<Instants, Rejection> {
    Ok((
        instant(input.start, tz, "start")?,
        instant(input.end, tz, "end")?,
        input.submit.map(|s| instant(s, tz, "submit")).transpose()?,
    ))
}

/// Resolve and price a job. `projects` maps lower-case project codes to ids.
pub fn resolve(
    input: &JobInput,
    catalog: &Catalog,
    projects: &HashMap<String, ProjectId>,
    now: DateTime<Utc>,
) -> Result<ResolvedJob, Rejection> {
    resolve_priced(input, catalog, projects, now, None)
}

/// [`resolve`] a record of a run recorded before, priced as the run is:
/// at the submit time the run keeps (that of its first record, `run_submitted_at`),
/// or at its start when it has none (docs/rules.md D5), whatever submit
/// time this record gives. A run first recorded without its submit time
/// stays priced at its start when a record with one supersedes it, and the
/// audit, which prices every charge of a run at the run's instant, agrees.
pub fn resolve_for_run(
    input: &JobInput,
    catalog: &Catalog,
    projects: &HashMap<String, ProjectId>,
    now: DateTime<Utc>,
    run_submitted_at: Option<DateTime<Utc>>,
) -> Result<ResolvedJob, Rejection> {
    resolve_priced(input, catalog, projects, now, Some(run_submitted_at))
}

/// The run a record names (cluster, job id, array index, start), as far as
/// its cluster and times can be read: to find the run of a record that
/// could not be priced at its own instant.
pub fn run_key(input: &JobInput, catalog: &Catalog) -> Option<JobKey> {
    let center = catalog.center.as_ref()?;
    let cluster = catalog.cluster(input.cluster.as_deref()?)?;
    let (started_at, _, _) = instants(input, cluster.time_zone.unwrap_or(center.time_zone)).ok()?;
    Some(JobKey {
        cluster_id: cluster.id,
        job_id: input.job_id.clone(),
        array_index: input.array_index,
        started_at,
    })
}

/// The name of an array task: Slurm's `JOBID_INDEX` with digits on both
/// sides (`123_4`, as `sacct` prints it and `job show` reads it), or PBS's
/// `JOBID[INDEX]` with what follows it (`123[4].server`, a subjob's
/// `$PBS_JOBID`): the array's job id as its records name it (`123`;
/// `123[].server`, as the PBS reader names a subjob's array) and the task's
/// index, as written.
pub fn array_task_form(job_id: &str) -> Option<(std::borrow::Cow<'_, str>, &str)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((job, index)) = job_id.split_once('_')
        && digits(job)
        && digits(index)
    {
        return Some((std::borrow::Cow::Borrowed(job), index));
    }
    let (base, rest) = job_id.split_once('[')?;
    let (index, after) = rest.split_once(']')?;
    (digits(base) && digits(index)).then(|| (std::borrow::Cow::Owned(format!("{base}[]{after}")), index))
}

/// A job id and array index as given (`job record --job-id`, a JSON lines
/// record's `job_id`, `hold`, `check`, a correction's `--job-id`), read as
/// `sacct`'s are (docs/rules.md): a job id in Slurm's array task form
/// `123_4` without an index is array task 4 of job 123, the run a `sacct`
/// import of the same task records, so that the same task sent both ways is
/// one run, charged once; likewise a PBS subjob's `123[4].server` is job
/// `123[].server`, index 4, as the PBS reader records it. `Ok(None)`: nothing to read otherwise. Refused: an
/// array task form with an index given too (which is meant is not known),
/// or an index past the ledger's range.
pub fn split_array_task(job_id: &str, array_index: Option<u32>) -> Result<Option<(String, u32)>, String> {
    let Some((job, index)) = array_task_form(job_id) else {
        return Ok(None);
    };
    if let Some(given) = array_index {
        return Err(format!(
            "the job id {job_id} names array task {index} of job {job}, and array index {given} is given too: \
             give the array's job id ({job}) with the task's index"
        ));
    }
    match index.parse::<u32>() {
        Ok(i) if i <= i32::MAX as u32 => Ok(Some((job.into_owned(), i))),
        _ => Err(format!(
            "the job id {job_id} names array task {index} of job {job}, an index out of range (at most {})",
            i32::MAX
        )),
    }
}

/// The task a job id and index name, whichever way it was written: an
/// array task named in its job id (`123_4`, no index) is job 123, index 4
/// ([`split_array_task`]); anything else as written. Two records of the
/// same task, one sent each way (or one recorded before 2026-12-07 as job
/// `123_4`), name the same task.
pub fn task_of(job_id: &str, array_index: Option<u32>) -> (std::borrow::Cow<'_, str>, Option<u32>) {
    match (array_task_form(job_id), array_index) {
        (Some((job, index)), None) => match index.parse::<u32>() {
            Ok(i) => (job, Some(i)),
            Err(_) => (std::borrow::Cow::Borrowed(job_id), None),
        },
        _ => (std::borrow::Cow::Borrowed(job_id), array_index),
    }
}

/// [`split_array_task`] of a record: the record as `sacct`'s reading of
/// the same task would give it, or why it is refused.
pub fn read_array_task(input: &JobInput) -> Result<Option<JobInput>, Rejection> {
    match split_array_task(&input.job_id, input.array_index) {
        Ok(None) => Ok(None),
        Ok(Some((job_id, index))) => Ok(Some(JobInput {
            job_id,
            array_index: Some(index),
            ..input.clone()
        })),
        Err(reason) => Err(Rejection {
            kind: RejectKind::Invalid,
            reason,
        }),
    }
}

/// An array task's record as it was recorded before 2026-12-07 when its
/// task was named in its job id (`job record --job-id 123_4`, a JSON lines
/// `"job_id": "123_4"`): job id `123_4`, no index; a PBS subjob
/// (`123[].server`, index 4) as `123[4].server`. `None` for a record that
/// is not an array task with a job id of digits (or PBS's `123[]…`).
pub fn array_task_as_before(input: &JobInput) -> Option<JobInput> {
    let index = input.array_index?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let job_id = if digits(&input.job_id) {
        format!("{}_{index}", input.job_id)
    } else {
        // A PBS subjob (`123[].server`, index 4) as its `$PBS_JOBID` names
        // it: `123[4].server`.
        let (base, after) = input.job_id.split_once("[]")?;
        if !digits(base) {
            return None;
        }
        format!("{base}[{index}]{after}")
    };
    Some(JobInput {
        job_id,
        array_index: None,
        ..input.clone()
    })
}

/// What [`held_as`] reads: the run, the content fingerprint, the submit time.
pub type HeldAs = (JobKey, [u8; 32], Option<DateTime<Utc>>);

/// The run a record names, the content fingerprint it would be held with
/// and its submit time, read from the record alone (no queue map, node type
/// or card): to tell a record the ledger holds already, sent again
/// unchanged after its queue was removed or its card ended, from one that
/// needs pricing.
pub fn held_as(input: &JobInput, catalog: &Catalog) -> Option<HeldAs> {
    let key = run_key(input, catalog)?;
    let center = catalog.center.as_ref()?;
    let cluster = catalog.cluster(input.cluster.as_deref()?)?;
    let (started_at, ended_at, submitted_at) = instants(input, cluster.time_zone.unwrap_or(center.time_zone)).ok()?;
    let suspended = input.suspension.seconds(started_at, ended_at).ok()?;
    let (_, content) = fingerprints(input, input.project.as_deref()?, ended_at, suspended);
    Some((key, content, submitted_at))
}

fn resolve_priced(
    input: &JobInput,
    catalog: &Catalog,
    projects: &HashMap<String, ProjectId>,
    now: DateTime<Utc>,
    run_submitted_at: Option<Option<DateTime<Utc>>>,
) -> Result<ResolvedJob, Rejection> {
    let Some(center) = &catalog.center else {
        return reject(RejectKind::UnknownCluster, "no center configuration has been applied");
    };
    let Some(cluster_name) = input.cluster.as_deref() else {
        return reject(
            RejectKind::UnknownCluster,
            "the record names no cluster (give the importer a default cluster)",
        );
    };
    let cluster: &ClusterInfo = match catalog.cluster(cluster_name) {
        Some(c) => c,
        None => {
            return reject(
                RejectKind::UnknownCluster,
                format!(
                    "unknown cluster {cluster_name:?} ({})",
                    catalog.clusters_known(cluster_name)
                ),
            );
        }
    };
    let tz = cluster.time_zone.unwrap_or(center.time_zone);
    let (started_at, ended_at, submitted_at) = instants(input, tz)?;
    static EARLIEST_AT: std::sync::LazyLock<DateTime<Utc>> =
        std::sync::LazyLock::new(|| EARLIEST.parse().expect("a valid instant"));
    let earliest = *EARLIEST_AT;
    if started_at < earliest {
        return reject(RejectKind::Invalid, format!("it started at {started_at}, before 1990"));
    }
    if ended_at > now + TimeDelta::days(1) {
        return reject(RejectKind::Invalid, format!("it ends at {ended_at}, in the future"));
    }
    if let Some(s) = submitted_at
        && s > started_at
    {
        return reject(
            RejectKind::Invalid,
            format!("it was submitted at {s}, after it started at {started_at}"),
        );
    }
    if ended_at < started_at {
        return reject(
            RejectKind::Invalid,
            format!("it ends at {ended_at}, before it starts at {started_at}"),
        );
    }
    let suspended_seconds = match input.suspension.seconds(started_at, ended_at) {
        Ok(s) => s,
        Err(e) => return reject(RejectKind::Invalid, e),
    };
    if input.job_id.is_empty() || input.job_id.chars().count() > 256 || input.job_id.chars().any(char::is_control) {
        return reject(
            RejectKind::Invalid,
            "the job id must be 1 to 256 characters without control characters",
        );
    }
    // No scheduler writes one: " 970001" would be another run than the
    // "970001" a `sacct` import records, and the job charged twice.
    if input.job_id.trim() != input.job_id {
        return reject(
            RejectKind::Invalid,
            format!("the job id {:?} has blanks around it", input.job_id),
        );
    }
    if let Some(i) = input.array_index
        && i > i32::MAX as u32
    {
        return reject(
            RejectKind::Invalid,
            format!("array index {i} is out of range (at most {})", i32::MAX),
        );
    }
    let texts = [
        ("user", Some(input.user.as_str())),
        ("job name", Some(input.job_name.as_str())),
        ("state", Some(input.state.as_str())),
        ("exit code", input.exit_code.as_deref()),
        ("queue", input.queue.as_deref()),
        ("node type", input.node_type.as_deref()),
        ("project", input.project.as_deref()),
    ];
    if let Some((what, _)) = texts.iter().find(|(_, v)| v.is_some_and(|v| v.contains('\0'))) {
        return reject(RejectKind::Invalid, format!("the {what} contains a NUL character"));
    }
    if input.queue.as_ref().is_some_and(|q| q.chars().count() > 128) {
        return reject(RejectKind::Invalid, "the queue name is longer than 128 characters");
    }
    let Some(code) = input.project.as_deref() else {
        return reject(
            RejectKind::UnknownProject,
            "the record names no project/account: give the importer a default project (--default-project), \
             or read it from another field (PBS/TORQUE records of sites that charge by Unix group: \
             --project-from account,group)",
        );
    };
    let Some(&project_id) = projects.get(&code.to_lowercase()) else {
        return reject(RejectKind::UnknownProject, format!("unknown project {code:?}"));
    };
    let priced_from = run_submitted_at.unwrap_or(submitted_at);
    let at = pricing_instant(priced_from, started_at);
    // The nodes a queue gave the job are those it had when the job
    // started (D4); its price is that of its pricing instant (D5).
    let node_type = cluster
        .resolve_node_type(
            input.queue.as_deref(),
            input.node_type.as_deref(),
            input.gpus.unwrap_or(0),
            started_at,
        )
        .map_err(|e| Rejection {
            kind: match e {
                NodeTypeError::UnknownQueue { .. } | NodeTypeError::QueueEnded { .. } | NodeTypeError::Missing => {
                    RejectKind::UnknownQueue
                }
                NodeTypeError::UnknownNodeType { .. } => RejectKind::Invalid,
            },
            reason: e.to_string(),
        })?;
    let class = catalog.class_of(project_id, at);
    let Some(card) = cluster.rate_card(node_type.id, class, at) else {
        return reject(
            RejectKind::NoRateCard,
            format!(
                "no rate card for node type {:?} on cluster {}{} is in force at {at} (the job's {} time)",
                node_type.name,
                cluster.name,
                match class {
                    Some(_) => format!(" and rate class {} (project {code})", catalog.class_name(class)),
                    None => String::new(),
                },
                if priced_from.is_some() { "submit" } else { "start" }
            ),
        );
    };
    let discount = catalog.discount_for(project_id, class, at).map(|d| (d.id, d.percent));
    let card_value = &card.period.value;
    let mut shape = held_shape(input, card_value.cores_per_node);
    let refuse_new_charge = match input.gpus {
        None if node_type.gpus_per_node > 0 || !card_value.gpu_hour.is_zero() => Some(Rejection {
            kind: RejectKind::Invalid,
            reason: format!(
                "it ran on node type {:?}, which has or prices GPUs, but its record gives no GPU count at all (no gres/gpu, GRES or gpus value): record it with its GPU count, e.g. `job record … --gpus N`",
                node_type.name
            ),
        }),
        _ => None,
    }
    .or_else(|| {
        check_memory_per_node(&shape).err().map(|e| Rejection {
            kind: RejectKind::Invalid,
            reason: e.to_string(),
        })
    })
    .or_else(|| {
        // More memory than its nodes really have, when the center says how
        // much that is (`memory_per_node`): a unit error or a forged record.
        let per_node = node_type.memory_per_node?;
        let memory = shape.memory?;
        (u128::from(memory.0) > u128::from(shape.nodes) * u128::from(per_node.0)).then(|| Rejection {
            kind: RejectKind::Invalid,
            reason: format!(
                "the job holds {memory} of memory on {} node(s) of type {:?}, which have {per_node} each",
                shape.nodes, node_type.name
            ),
        })
    });
    // Its time suspended is not charged (R1): its cores were free for others.
    let wall_seconds = (ended_at - started_at).num_seconds() - i64::from(suspended_seconds);
    validate(&shape, wall_seconds).map_err(|e| Rejection {
        kind: RejectKind::Invalid,
        reason: e.to_string(),
    })?;
    if input.exclusive {
        shape = charged_shape(shape, input, card.period.value.cores_per_node);
    }
    let price = price_job(&shape, wall_seconds, &card.period.value).map_err(|e| Rejection {
        kind: RejectKind::Invalid,
        reason: e.to_string(),
    })?;
    let (charge_fingerprint, content_fingerprint) = fingerprints(input, code, ended_at, suspended_seconds);
    Ok(ResolvedJob {
        key: JobKey {
            cluster_id: cluster.id,
            job_id: input.job_id.clone(),
            array_index: input.array_index,
            started_at,
        },
        submitted_at,
        charge: ChargeFields {
            ended_at,
            suspended_seconds,
            nodes: shape.nodes,
            cores: shape.cores,
            memory: shape.memory,
            gpus: shape.gpus,
            queue: input.queue.clone(),
            project_id,
            node_type_id: node_type.id,
        },
        // Descriptive fields are kept to their column widths; the raw
        // record keeps them whole.
        user: truncate(&input.user, 256),
        job_name: truncate(&input.job_name, 1024),
        state: truncate(&input.state, 256),
        exit_code: input.exit_code.as_deref().map(|e| truncate(e, 64)),
        rate_card_id: card.id,
        class,
        discount,
        price,
        natural_period: Month::of_instant(ended_at, center.time_zone),
        charge_fingerprint,
        content_fingerprint,
        refuse_new_charge,
    })
}

fn truncate(s: &str, chars: usize) -> String {
    // No more bytes than characters allowed: whole, without walking it.
    if s.len() <= chars {
        return s.to_owned();
    }
    match s.char_indices().nth(chars) {
        Some((cut, _)) => s[..cut].to_owned(),
        None => s.to_owned(),
    }
}

/// Fingerprints of what the scheduler said (not of how today's rules read
/// it): the fields that change the charge, and all of them. `suspended`:
/// the seconds suspended, as [`Suspension::seconds`] reads them.
pub fn fingerprints(input: &JobInput, project: &str, ended_at: DateTime<Utc>, suspended: u32) -> ([u8; 32], [u8; 32]) {
    fn field(h: &mut Sha256, v: &str) {
        h.update((v.len() as u64).to_le_bytes());
        h.update(v.as_bytes());
    }
    let mut charge = Sha256::new();
    field(&mut charge, "charge-v1");
    field(&mut charge, &ended_at.timestamp().to_string());
    // A record that gives no node count fingerprints differently from any
    // that gives one; GPUs not given read as 0, as they always did.
    field(&mut charge, &input.nodes.map_or("packed".to_owned(), |n| n.to_string()));
    field(&mut charge, &input.cores.to_string());
    field(&mut charge, &input.memory.map_or(String::new(), |m| m.0.to_string()));
    field(&mut charge, &input.gpus.unwrap_or(0).to_string());
    field(&mut charge, &input.exclusive.to_string());
    field(&mut charge, input.queue.as_deref().unwrap_or("\u{0}"));
    field(&mut charge, input.node_type.as_deref().unwrap_or("\u{0}"));
    field(&mut charge, &project.to_lowercase());
    // Only when it was suspended: every fingerprint of a job never
    // suspended stays what it was before suspension was read.
    if suspended > 0 {
        field(&mut charge, "suspended");
        field(&mut charge, &suspended.to_string());
    }
    let charge: [u8; 32] = charge.finalize().into();
    let mut content = Sha256::new();
    content.update(charge);
    field(&mut content, &input.user);
    field(&mut content, &input.job_name);
    field(&mut content, &input.state);
    field(&mut content, input.exit_code.as_deref().unwrap_or("\u{0}"));
    (charge, content.finalize().into())
}

crate::domain::kinds::named! {
    /// How a job record was recorded.
    pub enum RecordKind {
        Original => "original",
        Revision => "revision",
        Supersede => "supersede",
    }
}

impl RecordKind {
    /// Whether records of this kind carry the job's charges.
    pub fn charges(self) -> bool {
        !matches!(self, RecordKind::Revision)
    }
}

/// A record already held for a job run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub id: JobRecordId,
    /// The run's recorded submit time.
    pub job_submitted_at: Option<DateTime<Utc>>,
    pub revision: i32,
    pub kind: RecordKind,
    pub charge_fingerprint: [u8; 32],
    pub content_fingerprint: [u8; 32],
    pub charge: ChargeFields,
}

/// What to do with a job whose run may already be recorded (docs/rules.md D9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Decision {
    /// Not recorded yet: record and charge it.
    New,
    /// The same content again: nothing to do.
    Replay,
    /// Only fields that do not change the charge differ: keep as a revision.
    Revision { revision: i32 },
    /// The charge would change: refused.
    Conflict { differences: Vec<String> },
    /// The charge changes and the operator asked to supersede: reverse the
    /// charges of `replaces` and post the new ones.
    Supersede { revision: i32, replaces: JobRecordId },
}

/// What a conflict's message names by name: the ledger keeps ids.
pub trait Names {
    fn project(&self, id: ProjectId) -> String;
    fn node_type(&self, id: NodeTypeId) -> String;
}

/// Names that are the ids themselves (`#12`): for deciding before any
/// name is loaded (a conflict is decided again with [`Names`] that are).
pub struct Ids;

impl Names for Ids {
    fn project(&self, id: ProjectId) -> String {
        format!("#{}", id.0)
    }
    fn node_type(&self, id: NodeTypeId) -> String {
        format!("#{}", id.0)
    }
}

/// Compare an incoming job with the records of its run; a conflict names
/// projects and node types by `names`.
pub fn classify(existing: &[Existing], incoming: &ResolvedJob, supersede: bool, names: &dyn Names) -> Decision {
    if existing.is_empty() {
        return Decision::New;
    }
    // Two known submit times that differ: not the same run's record, and
    // not something a supersede can mend (the run's submit time prices it).
    if let (Some(held), Some(new)) = (existing[0].job_submitted_at, incoming.submitted_at)
        && held != new
    {
        return Decision::Conflict {
            differences: vec![format!("submit {held} -> {new}, which a supersede cannot change")],
        };
    }
    // Content seen before (also an earlier, superseded one): nothing to do;
    // the charges stay with the latest charging record.
    if existing
        .iter()
        .any(|e| e.content_fingerprint == incoming.content_fingerprint)
    {
        return Decision::Replay;
    }
    let next = existing.iter().map(|e| e.revision).max().unwrap_or(0) + 1;
    let charging = existing
        .iter()
        .filter(|e| e.kind.charges())
        .max_by_key(|e| e.revision)
        .expect("the first record of a run charges");
    if charging.charge_fingerprint == incoming.charge_fingerprint {
        return Decision::Revision { revision: next };
    }
    if supersede {
        return Decision::Supersede {
            revision: next,
            replaces: charging.id,
        };
    }
    Decision::Conflict {
        differences: differences(&charging.charge, &incoming.charge, names),
    }
}

fn differences(old: &ChargeFields, new: &ChargeFields, names: &dyn Names) -> Vec<String> {
    let mut out = Vec::new();
    let mut diff = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name} {a} -> {b}"));
        }
    };
    diff("end", old.ended_at.to_string(), new.ended_at.to_string());
    diff(
        "suspended",
        format!("{} s", old.suspended_seconds),
        format!("{} s", new.suspended_seconds),
    );
    diff("nodes", old.nodes.to_string(), new.nodes.to_string());
    diff("cores", old.cores.to_string(), new.cores.to_string());
    let mem = |m: Option<Bytes>| m.map_or("none".into(), |b| b.to_string());
    diff("memory", mem(old.memory), mem(new.memory));
    diff("GPUs", old.gpus.to_string(), new.gpus.to_string());
    let q = |q: &Option<String>| q.clone().unwrap_or_else(|| "none".into());
    diff("queue", q(&old.queue), q(&new.queue));
    diff("project", names.project(old.project_id), names.project(new.project_id));
    diff(
        "node type",
        names.node_type(old.node_type_id),
        names.node_type(new.node_type_id),
    );
    out
}

/// The month a job's charges are posted to (docs/rules.md D6): its own, or the
/// earliest open month when its own is closed (then it is late).
pub fn posting_period(natural: Month, last_closed: Option<Month>) -> (Month, bool) {
    match last_closed {
        Some(closed) if natural <= closed => (closed.next(), true),
        _ => (natural, false),
    }
}

/// A ledger line to post for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryDraft {
    pub priced: Priced,
    pub rate_card_id: RateCardId,
}

/// What recording one resolved job does, decided from the records its run
/// already holds: the posting planner's answer, with no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The same content was recorded before: nothing is written (the record
    /// it repeats, when known).
    Replay { record: Option<JobRecordId> },
    /// Not recorded: kept as a rejection (a conflict, or a charge refused to
    /// new records).
    Reject(Rejection),
    /// A record is added: a revision alone, an original or a supersede with
    /// its charges (a supersede also reverses the charges of `replaces`).
    Record {
        revision: i32,
        kind: RecordKind,
        replaces: Option<JobRecordId>,
    },
}

/// Decide what recording `job` does, given the records its run holds
/// (none for a run not seen before) and whether conflicts supersede (D9).
pub fn decide(held: &[Existing], job: &ResolvedJob, supersede: bool, names: &dyn Names) -> Step {
    let (revision, kind, replaces) = match classify(held, job, supersede, names) {
        Decision::New => (1, RecordKind::Original, None),
        Decision::Revision { revision } => (revision, RecordKind::Revision, None),
        Decision::Supersede { revision, replaces } => (revision, RecordKind::Supersede, Some(replaces)),
        Decision::Replay => {
            let record = held
                .iter()
                .find(|e| e.content_fingerprint == job.content_fingerprint)
                .map(|e| e.id);
            return Step::Replay { record };
        }
        // A record that could not be charged on its own (no GPU count on a
        // GPU node type) is not another account of the run to supersede it
        // with: it is refused as it would be anew, not left as a conflict
        // whose --supersede is refused. What else differs is said too: the
        // record fixed as the refusal asks is a conflict next.
        Decision::Conflict { differences } => {
            if let Some(refusal) = &job.refuse_new_charge {
                let mut refusal = refusal.clone();
                if !differences.is_empty() {
                    refusal.reason = format!(
                        "{}; it also differs from the job already recorded ({})",
                        refusal.reason,
                        differences.join(", ")
                    );
                }
                return Step::Reject(refusal);
            }
            return Step::Reject(Rejection {
                kind: RejectKind::Conflict,
                reason: format!(
                    "conflicts with the job already recorded ({}); record it again with --supersede to reverse the old charges and post these",
                    if differences.is_empty() {
                        "its charge differs".to_owned()
                    } else {
                        differences.join(", ")
                    }
                ),
            });
        }
    };
    // A rule for new charges only: a revision charges nothing new.
    if kind != RecordKind::Revision
        && let Some(refusal) = &job.refuse_new_charge
    {
        return Step::Reject(refusal.clone());
    }
    Step::Record {
        revision,
        kind,
        replaces,
    }
}

/// The job charges of `job`, recorded as `record`, posted into `period`
/// (its own month, or the first open one: `late`).
pub fn charge_entries(job: &ResolvedJob, record: JobRecordId, period: Month, late: bool) -> Vec<NewEntry> {
    job.entries()
        .iter()
        .map(|d| NewEntry {
            period: period.first_day(),
            project_id: job.charge.project_id,
            kind: EntryKind::Job,
            metric: Some(d.priced.metric),
            job_record_id: Some(record),
            rate_card_id: Some(d.rate_card_id),
            corrects_id: None,
            quantity: d.priced.quantity,
            unit_rate: d.priced.unit_rate,
            amount_exact: d.priced.amount_exact,
            amount: d.priced.amount,
            late,
            reason: None,
            charging_rules: job.price.rules,
            discount_id: None,
        })
        .collect()
}

/// The discount lines of `job`'s charges (docs/rules.md R8), one per
/// charge line, in the same order; none without a discount. Each names its
/// charge by record and metric: the database links it (`corrects_id`).
pub fn discount_entries(job: &ResolvedJob, record: JobRecordId, period: Month, late: bool) -> Vec<NewEntry> {
    let Some((discount, percent)) = job.discount else {
        return Vec::new();
    };
    job.price
        .lines
        .iter()
        .map(|l| {
            let (amount_exact, amount) = discount_amounts(l.amount_exact, percent);
            NewEntry {
                period: period.first_day(),
                project_id: job.charge.project_id,
                kind: EntryKind::Discount,
                metric: Some(l.metric),
                job_record_id: Some(record),
                rate_card_id: Some(job.rate_card_id),
                corrects_id: None,
                quantity: Decimal::ZERO,
                unit_rate: Decimal::ZERO,
                amount_exact,
                amount,
                late,
                reason: None,
                charging_rules: job.price.rules,
                discount_id: Some(discount),
            }
        })
        .collect()
}

impl ResolvedJob {
    pub fn entries(&self) -> Vec<EntryDraft> {
        self.price
            .lines
            .iter()
            .map(|l| EntryDraft {
                priced: *l,
                rate_card_id: self.rate_card_id,
            })
            .collect()
    }

    pub fn total(&self) -> Decimal {
        self.price.total()
    }
}

#[cfg(test)]
mod tests;
