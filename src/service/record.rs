//! Recording finished jobs (docs/rules.md D5, D6, D9): resolve and price each job
//! with the rules in force, then post a whole batch in one transaction —
//! job runs, job records and ledger entries, set-based. A batch that fails
//! is retried after a race, else job by job, so one bad record never blocks
//! the others and no job is ever half-charged. Every job that cannot be
//! charged is kept in `rejected_record` with its reason.

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool};

use crate::db::errors::{is_connection_error, is_race, is_transient};
use crate::db::ledger;
use crate::db::rejected::{self, NewRejection};
use crate::db::{jobs, reference};
use crate::domain::catalog::Catalog;
use crate::domain::entries::reversal;
use crate::domain::kinds::SourceFormat;
use crate::domain::period::Month;
use crate::domain::posting::{
    Existing, HeldAs, Ids, JobInput, JobKey, Names, RecordKind, RejectKind, Rejection, ResolvedJob, Step,
    array_task_as_before, charge_entries, decide, discount_entries, held_as, posting_period, read_array_task, resolve,
    resolve_for_run, run_key, task_of,
};
use crate::ids::{JobId, JobRecordId, NodeTypeId, ProjectId};
use crate::ingest::{KeptOptions, ReadOptions, Reading};

/// Where a job came from: enough to show it, store it and read it again.
#[derive(Debug, Clone)]
pub struct Source {
    /// `slurm`, `pbs`, `jsonl`, `json` (one object) or `cli` (flags).
    pub format: SourceFormat,
    /// `file:line`, `stdin:3`, `job record`.
    pub reference: String,
    /// The record as read (text; bytes that were not UTF-8 read as U+FFFD).
    pub raw: String,
    /// The bytes as received, when they were not valid UTF-8 (or held a NUL).
    pub raw_bytes: Option<Vec<u8>>,
    pub options: KeptOptions,
    /// The job the record names (`cluster/job`), when known although the
    /// record could not be read: kept on its rejection.
    pub job: Option<String>,
    /// The `job_intake` row it was taken from (`serve --intake`): deleted
    /// in the transaction that records it.
    pub intake: Option<i64>,
}

impl Source {
    /// The hash of the record as received: its exact bytes when kept.
    pub(crate) fn raw_sha256(&self) -> Vec<u8> {
        match &self.raw_bytes {
            Some(b) => Sha256::digest(b).to_vec(),
            None => Sha256::digest(self.raw.as_bytes()).to_vec(),
        }
    }
}

/// A parsed job and where it came from.
#[derive(Debug, Clone)]
pub struct Submission {
    pub input: JobInput,
    pub source: Source,
}

/// What recording a job did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Recorded {
        job: String,
        period: Month,
        late: bool,
        entries: usize,
        amount: Decimal,
    },
    Replayed {
        job: String,
    },
    Revised {
        job: String,
        revision: i32,
    },
    Superseded {
        job: String,
        revision: i32,
        period: Month,
        reversed: usize,
        entries: usize,
        amount: Decimal,
    },
    Rejected {
        job: Option<String>,
        kind: RejectKind,
        reason: String,
    },
}

impl Outcome {
    /// Its name: the `outcome` of its JSON, the label of `serve`'s metrics,
    /// and the resolution of a rejected line it resolves.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Recorded { .. } => "recorded",
            Outcome::Replayed { .. } => "replayed",
            Outcome::Revised { .. } => "revised",
            Outcome::Superseded { .. } => "superseded",
            Outcome::Rejected { .. } => "rejected",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The database could not record now (`db::errors::is_transient`): lost,
    /// a statement cancelled or out of time for a lock, out of resources.
    #[error(
        "the database could not record now (some jobs were not posted; run the same command again: the jobs recorded before are then replays, the others recorded): {0}"
    )]
    Connection(sqlx::Error),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// How a [`Recorder`] records.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Re-sent records that change the charge replace it (D9); otherwise
    /// they are kept as conflicts.
    pub supersede: bool,
    /// Who records (`--author`, default the OS user).
    pub author: String,
}

impl RecordOptions {
    /// Conflicts kept, not superseded.
    pub fn by(author: impl Into<String>) -> RecordOptions {
        RecordOptions {
            supersede: false,
            author: author.into(),
        }
    }
}

/// Records jobs; keeps the catalog and project ids it has loaded. Records
/// are taken as read: the readers have applied the importer's default
/// cluster and project (`ReadOptions`). A clone shares the pool and starts
/// with what this one has loaded: `import` posts with two at once.
#[derive(Clone)]
pub struct Recorder {
    pool: PgPool,
    pub supersede: bool,
    pub author: String,
    catalog: Option<(i64, Catalog)>,
    projects: HashMap<String, ProjectId>,
    /// How the readings of records that changed reached this ledger
    /// (`db::jobs::readings`), read once.
    readings: Option<jobs::Readings>,
}

const RACE_RETRIES: usize = 5;

impl Recorder {
    /// The pool it records with.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn new(pool: PgPool, options: RecordOptions) -> Recorder {
        Recorder {
            pool,
            supersede: options.supersede,
            author: options.author,
            catalog: None,
            projects: HashMap::new(),
            readings: None,
        }
    }

    /// Record a batch of jobs and keep the malformed lines read with them.
    /// Returns one outcome per job, in order.
    pub async fn record(
        &mut self,
        jobs: &[Submission],
        malformed: &[(Source, String)],
    ) -> Result<Vec<Outcome>, RecordError> {
        let mut last = None;
        for _ in 0..RACE_RETRIES {
            match self.try_batch(jobs, malformed).await {
                Ok(outcomes) => return Ok(outcomes),
                Err(e) if is_connection_error(&e) => return Err(RecordError::Connection(e)),
                Err(e) if is_race(&e) => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        let err = last.expect("a failed attempt");
        if jobs.len() + malformed.len() <= 1 {
            // Not the record's fault: not kept as rejected, sent again.
            if is_transient(&err) {
                return Err(RecordError::Connection(err));
            }
            return self.reject_after_failure(jobs, malformed, &err).await;
        }
        tracing::debug!("batch failed ({err}); recording job by job");
        let mut outcomes = Vec::with_capacity(jobs.len());
        // A job the database cannot take now, its connection kept (a lock
        // waited for past `lock_timeout`, a statement cancelled), does not
        // stop the ones after it: each is recorded in its own transaction,
        // and the first such error is returned once they were. (A sender
        // that retries the same batch, `serve --intake`, would otherwise
        // never record a job after one that fails so every time.)
        let mut not_now = None;
        let mut one = |result: Result<Vec<Outcome>, RecordError>| match result {
            Ok(o) => Ok(o),
            Err(RecordError::Connection(e)) if !is_connection_error(&e) => {
                not_now.get_or_insert(RecordError::Connection(e));
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        };
        for job in jobs {
            outcomes.extend(one(Box::pin(self.record(std::slice::from_ref(job), &[])).await)?);
        }
        for line in malformed {
            one(Box::pin(self.record(&[], std::slice::from_ref(line))).await)?;
        }
        match not_now {
            Some(e) => Err(e),
            None => Ok(outcomes),
        }
    }

    /// A single job (or line) whose transaction fails: keep it as rejected
    /// with the database's reason.
    async fn reject_after_failure(
        &mut self,
        jobs: &[Submission],
        malformed: &[(Source, String)],
        err: &sqlx::Error,
    ) -> Result<Vec<Outcome>, RecordError> {
        let reason = crate::db::errors::guard_message(err).unwrap_or_else(|| format!("the database refused it: {err}"));
        let mut rows = Vec::new();
        let mut outcomes = Vec::new();
        for job in jobs {
            let key = job.input.key();
            rows.push(rejection_row(
                &job.source,
                RejectKind::Database,
                &reason,
                Some(key.clone()),
            ));
            outcomes.push(Outcome::Rejected {
                job: Some(key),
                kind: RejectKind::Database,
                reason: reason.clone(),
            });
        }
        for (source, _) in malformed {
            rows.push(rejection_row(source, RejectKind::Database, &reason, source.job.clone()));
        }
        let db_error = |e: sqlx::Error| {
            if is_connection_error(&e) {
                RecordError::Connection(e)
            } else {
                RecordError::Db(e)
            }
        };
        // Kept as rejected and taken out of the intake in one transaction:
        // a crash between the two would have the next attempt find the
        // rejection kept and count it again.
        let mut tx = crate::db::begin(&self.pool).await.map_err(RecordError::Connection)?;
        let mut first = sqlx::Connection::begin(&mut *tx).await.map_err(db_error)?;
        match rejected::upsert(&mut first, &rows).await {
            Ok(()) => first.commit().await.map_err(db_error)?,
            Err(e) if is_connection_error(&e) => return Err(RecordError::Connection(e)),
            Err(_) => {
                // The record itself cannot be stored as text: keep a
                // printable copy (the failed attempt rolled back to its
                // savepoint).
                first.rollback().await.map_err(db_error)?;
                for r in &mut rows {
                    r.raw = r.raw.replace('\0', "\\0");
                    r.reason = format!("{} (stored with NUL characters escaped)", r.reason);
                }
                rejected::upsert(&mut tx, &rows).await.map_err(db_error)?;
            }
        }
        crate::db::intake::done(&mut tx, &intake_ids(jobs, malformed))
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(outcomes)
    }

    async fn try_batch(
        &mut self,
        jobs: &[Submission],
        malformed: &[(Source, String)],
    ) -> Result<Vec<Outcome>, sqlx::Error> {
        let mut tx = ledger::begin_posting(&self.pool).await?;
        let result = self.batch_in(&mut tx, jobs, malformed).await;
        crate::service::finish(tx, result).await
    }

    async fn batch_in(
        &mut self,
        tx: &mut PgConnection,
        jobs: &[Submission],
        malformed: &[(Source, String)],
    ) -> Result<Vec<Outcome>, sqlx::Error> {
        // The posting locks are held (taken with BEGIN): what they guard is
        // read in one round trip, with whether the batch may resolve a
        // rejection (most batches cannot: then nothing more is asked). Each
        // record's bytes are hashed here once, for everything below.
        let (formats, hashes): (Vec<SourceFormat>, Vec<Vec<u8>>) = jobs
            .iter()
            .map(|j| &j.source)
            .chain(malformed.iter().map(|(source, _)| source))
            .map(|source| (source.format, source.raw_sha256()))
            .unzip();
        // As rejections keep them: PostgreSQL text holds no NUL.
        let keys: Vec<String> = jobs
            .iter()
            .map(|j| j.input.key().to_lowercase().replace('\0', "\u{FFFD}"))
            .collect();
        let state = ledger::posting_state(&mut *tx, &formats, &hashes, &keys).await?;
        let version = state.rules_version;
        if self.catalog.as_ref().map(|(v, _)| *v) != Some(version) {
            let catalog = reference::load_catalog(&mut *tx).await?;
            self.catalog = Some((version, catalog));
        }
        self.load_projects(&mut *tx, jobs).await?;
        let readings = match self.readings {
            Some(r) => r,
            None => *self.readings.insert(jobs::readings(&mut *tx).await?),
        };
        let last_closed = state.last_closed.map(Month::of_date);
        let now = Utc::now();
        let catalog = &self.catalog.as_ref().expect("loaded above").1;

        let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
        // The job record each job became, or repeated (for resolving rejections).
        let mut records: Vec<Option<JobRecordId>> = vec![None; jobs.len()];
        let mut rejections: Vec<NewRejection> = malformed
            .iter()
            .map(|(source, reason)| rejection_row(source, RejectKind::Malformed, reason, source.job.clone()))
            .collect();
        let mut pending: Vec<(usize, ResolvedJob)> = Vec::with_capacity(jobs.len());
        let mut unknown_project: Vec<(usize, Rejection)> = Vec::new();
        let mut known_reassigned: Vec<(usize, ResolvedJob)> = Vec::new();
        let mut refused: Vec<(usize, Rejection)> = Vec::new();
        // An array task named in its job id (`123_4`, no index) is the task
        // `sacct` names so (docs/recording.md); recorded before 2026-12-07
        // as job `123_4`, its run keeps that key.
        let (tasks, split_refused) = self
            .array_tasks(&mut *tx, jobs, catalog, readings.array_tasks_before)
            .await?;
        let jobs: &[Submission] = tasks.as_deref().unwrap_or(jobs);
        for (i, job) in jobs.iter().enumerate() {
            if let Some((_, rejection)) = split_refused.iter().find(|(at, _)| *at == i) {
                refused.push((i, rejection.clone()));
                continue;
            }
            match resolve(&job.input, catalog, &self.projects, now) {
                // Reassigned once its account was unknown: read with the
                // project it was reassigned to, also now that its account
                // exists (a replay, as `audit --deep` reads it).
                Ok(r) if state.reassigned.contains(&i) => known_reassigned.push((i, r)),
                Ok(r) => pending.push((i, r)),
                Err(r) if r.kind == RejectKind::UnknownProject => unknown_project.push((i, r)),
                Err(r) => refused.push((i, r)),
            }
        }
        // A record whose unknown account was reassigned to a project
        // (`rejected reassign`, migration 0025) is charged to that project,
        // and recorded (and priced again below, if need be) with it.
        let mut reassigned: Vec<(usize, String)> = Vec::new();
        if !unknown_project.is_empty() || !known_reassigned.is_empty() {
            // Each as it read: refused for its unknown account, or resolved.
            let reads: Vec<(usize, Result<ResolvedJob, Rejection>)> = unknown_project
                .into_iter()
                .map(|(i, r)| (i, Err(r)))
                .chain(known_reassigned.into_iter().map(|(i, r)| (i, Ok(r))))
                .collect();
            let formats: Vec<SourceFormat> = reads.iter().map(|(i, _)| formats[*i]).collect();
            let hashes: Vec<Vec<u8>> = reads.iter().map(|(i, _)| hashes[*i].clone()).collect();
            let found: HashMap<(SourceFormat, Vec<u8>), String> = rejected::reassigned(&mut *tx, &formats, &hashes)
                .await?
                .into_iter()
                .map(|(f, h, code)| ((f, h), code))
                .collect();
            let codes: Vec<String> = found
                .values()
                .filter(|c| !self.projects.contains_key(&c.to_lowercase()))
                .cloned()
                .collect();
            if !codes.is_empty() {
                for p in reference::load_projects(&mut *tx, &codes).await? {
                    self.projects.insert(p.code.to_lowercase(), p.id);
                }
            }
            for ((i, read), (format, hash)) in reads.into_iter().zip(formats.into_iter().zip(hashes)) {
                let Some(code) = found.get(&(format, hash)) else {
                    match read {
                        Ok(r) => pending.push((i, r)),
                        Err(rejection) => refused.push((i, rejection)),
                    }
                    continue;
                };
                let mut input = jobs[i].input.clone();
                input.project = Some(code.clone());
                reassigned.push((i, code.clone()));
                match resolve(&input, catalog, &self.projects, now) {
                    Ok(r) => pending.push((i, r)),
                    Err(r) => refused.push((i, r)),
                }
            }
        }
        // A record with no rate card at its own instant may be of a run
        // priced at another (its submit time where the run has none, or the
        // reverse): priced as its run, it is recorded (a replay, a
        // revision, a supersede); `Posting::round` does the same for those
        // priced at their own instant.
        if refused.iter().any(|(_, r)| r.kind == RejectKind::NoRateCard) {
            let candidates: Vec<(usize, JobKey)> = refused
                .iter()
                .filter(|(_, r)| r.kind == RejectKind::NoRateCard)
                .filter_map(|(i, _)| run_key(&jobs[*i].input, catalog).map(|k| (*i, k)))
                .collect();
            let keys: Vec<&JobKey> = candidates.iter().map(|(_, k)| k).collect();
            let found = jobs::find(&mut *tx, &keys).await?;
            let runs: Vec<crate::ids::JobId> = found.iter().map(|(_, id)| *id).collect();
            let mut run_submitted: HashMap<crate::ids::JobId, Option<chrono::DateTime<Utc>>> = HashMap::new();
            if !runs.is_empty() {
                for (job, record) in jobs::records(&mut *tx, &runs).await? {
                    run_submitted.entry(job).or_insert(record.job_submitted_at);
                }
            }
            for (pos, job) in found {
                let i = candidates[pos].0;
                let Some(&run_submitted_at) = run_submitted.get(&job) else {
                    continue;
                };
                let mut input = jobs[i].input.clone();
                if let Some((_, code)) = reassigned.iter().find(|(at, _)| *at == i) {
                    input.project = Some(code.clone());
                }
                if let Ok(r) = resolve_for_run(&input, catalog, &self.projects, now, run_submitted_at) {
                    refused.retain(|(at, _)| *at != i);
                    pending.push((i, r));
                }
            }
        }
        // A record refused for its queue or its card that the ledger holds
        // already, unchanged (a record of its run has the same content):
        // sent or imported again after its queue was removed, or mapped to
        // a node type with no card, it is the replay it was before the
        // change, not a rejection left open for the billing office.
        let unpriced: Vec<(usize, HeldAs)> = refused
            .iter()
            .filter(|(_, r)| matches!(r.kind, RejectKind::UnknownQueue | RejectKind::NoRateCard))
            .filter_map(|(i, _)| {
                let held = match reassigned.iter().find(|(at, _)| at == i) {
                    Some((_, code)) => {
                        let mut input = jobs[*i].input.clone();
                        input.project = Some(code.clone());
                        held_as(&input, catalog)
                    }
                    None => held_as(&jobs[*i].input, catalog),
                };
                held.map(|h| (*i, h))
            })
            .collect();
        if !unpriced.is_empty() {
            let keys: Vec<&JobKey> = unpriced.iter().map(|(_, (k, _, _))| k).collect();
            let found = jobs::find(&mut *tx, &keys).await?;
            let runs: Vec<JobId> = found.iter().map(|(_, id)| *id).collect();
            let held = if runs.is_empty() {
                Vec::new()
            } else {
                jobs::records(&mut *tx, &runs).await?
            };
            for (pos, job) in found {
                let (i, (_, content, submitted)) = &unpriced[pos];
                // As `classify` decides: two known submit times that differ
                // are not the same run's record, whatever its content.
                let run_submitted = held
                    .iter()
                    .find(|(run, _)| *run == job)
                    .and_then(|(_, r)| r.job_submitted_at);
                if submitted.zip(run_submitted).is_some_and(|(a, b)| a != b) {
                    continue;
                }
                if let Some((_, record)) = held
                    .iter()
                    .find(|(run, record)| *run == job && record.content_fingerprint == *content)
                {
                    refused.retain(|(at, _)| at != i);
                    records[*i] = Some(record.id);
                    outcomes[*i] = Some(Outcome::Replayed {
                        job: jobs[*i].input.key(),
                    });
                }
            }
        }
        // A record of a run recorded under a reading of before 2026-12-06 or
        // 2026-12-07 (migrations 0049, 0056: jobcomp's times in the
        // cluster's zone, PBS Pro's nodect, a select's chunks) is read
        // that way again, so that one sent or imported again is what it was
        // then (a replay, a revision), not a second run; a sacct record of
        // a run jobcomp recorded hours off is kept as a conflict.
        let earlier = if readings.any() {
            let resolved = Resolved {
                pending: &pending,
                reassigned: &reassigned,
            };
            self.earlier_readings(&mut *tx, jobs, resolved, catalog, now, readings)
                .await?
        } else {
            Earlier::default()
        };
        for (i, rejection) in earlier.refused {
            pending.retain(|(at, _)| *at != i);
            refused.push((i, rejection));
        }
        let reread: Vec<Submission>;
        let jobs: &[Submission] = if earlier.replaced.is_empty() && reassigned.is_empty() {
            jobs
        } else {
            let mut all = jobs.to_vec();
            for (i, submission, resolved) in earlier.replaced {
                all[i] = submission;
                if let Some(p) = pending.iter_mut().find(|(at, _)| *at == i) {
                    p.1 = resolved;
                }
            }
            for (i, code) in reassigned {
                all[i].input.project = Some(code);
            }
            reread = all;
            &reread
        };
        for (i, Rejection { kind, reason }) in refused {
            let job = &jobs[i];
            let key = job.input.key();
            rejections.push(rejection_row(&job.source, kind, &reason, Some(key.clone())));
            outcomes[i] = Some(Outcome::Rejected {
                job: Some(key),
                kind,
                reason,
            });
        }
        // A run that appears twice in a batch is decided in a second round,
        // against what the first round recorded.
        while !pending.is_empty() {
            let mut seen = HashSet::new();
            let (round, later): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, r)| seen.insert(r.key.clone()));
            let posting = Posting {
                author: &self.author,
                supersede: self.supersede,
                last_closed,
                catalog,
                projects: &self.projects,
                now,
            };
            posting
                .round(&mut *tx, jobs, round, &mut outcomes, &mut records, &mut rejections)
                .await?;
            pending = later;
        }
        // A rejection this batch may resolve: one found above, or one it
        // kept itself (a later record of the same run in the batch).
        let to_resolve = state.rejections_to_resolve || !rejections.is_empty();
        rejected::upsert(&mut *tx, &rejections).await?;
        if to_resolve {
            resolve_rejections(&mut *tx, jobs, &hashes[..jobs.len()], &outcomes, &records, catalog).await?;
        }
        crate::db::intake::done(&mut *tx, &intake_ids(jobs, malformed)).await?;
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every job has an outcome"))
            .collect())
    }

    /// The batch with its array tasks named in their job ids read as
    /// `sacct` names them (`None`: nothing to change), and the records
    /// refused for it (an index given too, or out of range). Where the ledger
    /// held such runs before (`before`, migration 0053), every array task
    /// of a job id of digits is looked for as it was recorded then (its job
    /// id as sent, or `123_4` with no index for one whose index was given
    /// apart), in one query, and a task found so keeps that reading: a
    /// record of it sent or imported again is that run's (a replay, a
    /// revision, a conflict), not a second run.
    async fn array_tasks(
        &self,
        conn: &mut PgConnection,
        jobs: &[Submission],
        catalog: &Catalog,
        before: bool,
    ) -> Result<(Option<Vec<Submission>>, Vec<(usize, Rejection)>), sqlx::Error> {
        let mut read: Vec<(usize, JobInput)> = Vec::new();
        let mut refused = Vec::new();
        for (i, job) in jobs.iter().enumerate() {
            match read_array_task(&job.input) {
                Ok(Some(input)) => read.push((i, input)),
                Ok(None) => {}
                Err(r) => refused.push((i, r)),
            }
        }
        if before {
            // Each array task's key as it would have been recorded then: a
            // record that names the task in its job id, as sent (also one
            // refused now for giving an index too); one that gives the
            // index apart, as job `123_4`.
            let candidates: Vec<(usize, JobInput, JobKey)> = (0..jobs.len())
                .filter_map(|i| {
                    let split = read.iter().any(|(at, _)| *at == i) || refused.iter().any(|(at, _)| *at == i);
                    let then = if split {
                        Some(jobs[i].input.clone())
                    } else {
                        array_task_as_before(&jobs[i].input)
                    };
                    then.map(|input| (i, input))
                })
                .filter_map(|(i, input)| run_key(&input, catalog).map(|k| (i, input, k)))
                .collect();
            if !candidates.is_empty() {
                let keys: Vec<&JobKey> = candidates.iter().map(|(_, _, k)| k).collect();
                for (pos, _) in jobs::find(&mut *conn, &keys).await? {
                    let (i, input, _) = &candidates[pos];
                    read.retain(|(at, _)| at != i);
                    refused.retain(|(at, _)| at != i);
                    read.push((*i, input.clone()));
                }
            }
        }
        if read.is_empty() {
            return Ok((None, refused));
        }
        let mut all = jobs.to_vec();
        for (i, input) in read {
            all[i].input = input;
        }
        Ok((Some(all), refused))
    }

    /// The records among `pending` whose run may be recorded under a reading
    /// of before 2026-12-06 (migration 0049) or 2026-12-07 (0056: a PBS
    /// record read with `pbs_totals` or `torque_hosts` that reads otherwise
    /// without; 0060: a sacct record of a job suspended, read with
    /// `slurm_suspended`), and what to do with them (docs/rules.md):
    /// - a jobcomp document (read with `jobcomp_utc`), a PBS record (read
    ///   with `pbs_hosts` or `torque_requests`) or a sacct record (read with
    ///   `slurm_totals`) of such a run is read as it was then: replaced;
    ///   unless its run (same key) is charged as the record reads now (its
    ///   charging record has the same charge fingerprint: another export of
    ///   the job that reads alike both ways);
    /// - a `sacct` record of a run recorded from jobcomp then, its times read
    ///   in the cluster's zone (hours off), is refused as that run's record
    ///   rather than charged as a second run.
    ///
    /// Only a ledger that held records when the change reached it
    /// (`changed`, migration 0049) can hold such runs, and only of jobs that
    /// ended before then. Where each would be: its key with its start read as jobcomp's was
    /// then (the UTC wall-clock time taken as the cluster's local time); a
    /// PBS or sacct record's own key (its size changed, not its times). Only
    /// records that can read otherwise are looked up (a cluster whose zone
    /// is not UTC at that instant; a PBS record whose node count is not its
    /// `nodect`, or whose memory is a `-L` request's; a sacct record whose
    /// size reads otherwise without `slurm_totals`), in one query per batch,
    /// and read again only when found. A record whose reading now is refused
    /// (a `-L` memory larger than its node's) is not looked at: it is kept
    /// as rejected, not replayed.
    /// Not caught: a jobcomp document whose start reads the same both ways
    /// but whose end does not (a zone at UTC+0 in winter, a job running into
    /// its summer time): a conflict of its run, kept (superseded with
    /// `--supersede`), never a second run.
    async fn earlier_readings(
        &self,
        conn: &mut PgConnection,
        jobs: &[Submission],
        Resolved { pending, reassigned }: Resolved<'_>,
        catalog: &Catalog,
        now: chrono::DateTime<Utc>,
        readings: jobs::Readings,
    ) -> Result<Earlier, sqlx::Error> {
        // Each with the reading (a read option) its run's record lacked if it
        // was recorded the earlier way.
        let mut candidates: Vec<(usize, &ResolvedJob, JobKey, SourceFormat, Reading)> = Vec::new();
        // 2026-12-07's, after every one of 2026-12-06's: a record kept
        // without both was read without both (the first found settles it).
        let mut later = Vec::new();
        for (i, resolved) in pending {
            let job = &jobs[*i];
            // Recorded before the reading reached this ledger, whatever its
            // reading (a day is the widest zone offset twice over).
            let before = |reading: Reading| {
                readings
                    .changed(reading)
                    .is_some_and(|changed| resolved.charge.ended_at < changed + chrono::Duration::days(1))
            };
            let options = &job.source.options;
            // PBS's readings of 2026-12-07: a record that reads otherwise
            // without one (each changes either a `select` or a `nodes=`).
            if job.source.format == SourceFormat::Pbs {
                for (reading, on, attribute) in [
                    (Reading::PbsTotals, options.pbs_totals, "Resource_List.select="),
                    (Reading::TorqueHosts, options.torque_hosts, "Resource_List.nodes="),
                ] {
                    if on && before(reading) && job.source.raw.contains(attribute) && sized_otherwise(job, reading) {
                        later.push((*i, resolved, resolved.key.clone(), SourceFormat::Pbs, reading));
                    }
                }
            }
            // Slurm's suspended time (migration 0060): a record of a job
            // suspended, which was charged its whole run before.
            if matches!(job.source.format, SourceFormat::Slurm | SourceFormat::SacctJson)
                && options.slurm_suspended
                && resolved.charge.suspended_seconds > 0
                && before(Reading::SlurmSuspended)
            {
                later.push((
                    *i,
                    resolved,
                    resolved.key.clone(),
                    job.source.format,
                    Reading::SlurmSuspended,
                ));
            }
            if !before(Reading::JobcompUtc) {
                continue;
            }
            let in_zone = || {
                let zone = catalog
                    .clusters
                    .iter()
                    .find(|c| c.id == resolved.key.cluster_id)
                    .and_then(|c| c.time_zone)
                    .or(catalog.center.as_ref().map(|c| c.time_zone))?;
                let then = crate::domain::period::local_to_utc(resolved.key.started_at.naive_utc(), zone).ok()?;
                (then != resolved.key.started_at).then(|| JobKey {
                    started_at: then,
                    ..resolved.key.clone()
                })
            };
            match job.source.format {
                SourceFormat::Jobcomp if options.jobcomp_utc => {
                    if let Some(key) = in_zone() {
                        candidates.push((*i, resolved, key, SourceFormat::Jobcomp, Reading::JobcompUtc));
                    }
                }
                SourceFormat::Slurm | SourceFormat::SacctJson => {
                    // Its size read otherwise before `slurm_totals` (AllocNodes,
                    // a plain ReqMem): its run may have been recorded so.
                    if job.source.format == SourceFormat::Slurm && options.slurm_totals && sized_otherwise_before(job) {
                        candidates.push((
                            *i,
                            resolved,
                            resolved.key.clone(),
                            SourceFormat::Slurm,
                            Reading::SlurmTotals,
                        ));
                    }
                    if let Some(key) = in_zone() {
                        candidates.push((*i, resolved, key, SourceFormat::Jobcomp, Reading::JobcompUtc));
                    }
                }
                // Its times local, read right: the same run jobcomp recorded
                // then, hours off, is looked for as sacct's is.
                SourceFormat::JobcompFiletxt => {
                    if let Some(key) = in_zone() {
                        candidates.push((*i, resolved, key, SourceFormat::Jobcomp, Reading::JobcompUtc));
                    }
                }
                // Sized by a select, its nodes not its nodect (or it has none:
                // it was on the select's chunks then).
                SourceFormat::Pbs
                    if options.pbs_hosts
                        && job.source.raw.contains("Resource_List.select=")
                        && nodect(&job.source.raw) != Some(resolved.charge.nodes) =>
                {
                    candidates.push((*i, resolved, resolved.key.clone(), SourceFormat::Pbs, Reading::PbsHosts));
                }
                // Its memory from a TORQUE 6 `-L` request (it has no
                // Resource_List.mem).
                SourceFormat::Pbs
                    if options.torque_requests
                        && resolved.charge.memory.is_some()
                        && job.source.raw.contains("Resource_Request_2.0=")
                        && !job.source.raw.contains("Resource_List.mem=") =>
                {
                    candidates.push((
                        *i,
                        resolved,
                        resolved.key.clone(),
                        SourceFormat::Pbs,
                        Reading::TorqueRequests,
                    ));
                }
                _ => {}
            }
        }
        candidates.extend(later);
        let mut earlier = Earlier::default();
        if candidates.is_empty() {
            return Ok(earlier);
        }
        // A run already charged as a record of its own key reads now (another
        // export of the job, read alike both ways) is not substituted.
        let keys: Vec<jobs::ReadBefore> = candidates
            .iter()
            .map(|(_, resolved, key, format, reading)| jobs::ReadBefore {
                key,
                format: *format,
                reading: reading.option(),
                unless_charged: (*key == resolved.key).then_some(resolved.charge_fingerprint),
            })
            .collect();
        let found: HashSet<usize> = jobs::recorded_before(&mut *conn, &keys, readings.suspension_changed)
            .await?
            .into_iter()
            .collect();
        // A job with two candidates (a sacct record sized otherwise before,
        // and a jobcomp run hours off) is settled by the first found.
        let mut settled = HashSet::new();
        for (pos, (i, resolved, _, _, reading)) in candidates.into_iter().enumerate() {
            if !found.contains(&pos) || !settled.insert(i) {
                continue;
            }
            let job = &jobs[i];
            if reading == Reading::JobcompUtc && job.source.format != SourceFormat::Jobcomp {
                earlier.refused.push((
                    i,
                    Rejection {
                        kind: RejectKind::Conflict,
                        reason: "this job was recorded from Slurm's jobcomp before migration 0049 (2026-12-06), its \
                                 times read in the cluster's zone instead of UTC (hours off): not charged again as a \
                                 second run (docs/slurm.md, \"Time zone\")"
                            .into(),
                    },
                ));
                continue;
            }
            // Its run was recorded from a record read the earlier way: read
            // it so, or, should that no longer read or resolve, keep it
            // rather than charge the run a second time.
            let cannot = |why: String| {
                (
                    i,
                    Rejection {
                        kind: RejectKind::Conflict,
                        reason: format!(
                            "its run was recorded from a record read as records were read before {}, and read so \
                             this one {why}: not charged as a second run",
                            reading.since()
                        ),
                    },
                )
            };
            let options = KeptOptions::new(reading.options_before(&job.source.options));
            let mut input = match crate::ingest::reread(
                job.source.format,
                &options,
                &job.source.raw,
                job.source.raw_bytes.as_deref(),
            ) {
                Ok(crate::ingest::Item::Job(input)) => *input,
                Ok(_) => {
                    earlier.refused.push(cannot("is not a job".into()));
                    continue;
                }
                Err(e) => {
                    earlier.refused.push(cannot(format!("cannot be read ({e})")));
                    continue;
                }
            };
            // Reassigned to a project: read with it, also once its own
            // account exists (as the record read now is).
            if let Some((_, code)) = reassigned.iter().find(|(at, _)| *at == i) {
                input.project = Some(code.clone());
            }
            let then = match resolve(&input, catalog, &self.projects, now) {
                Ok(then) => then,
                // Its account reassigned to a project (`rejected reassign`):
                // charged to that project, as the record read now is.
                Err(r) if r.kind == RejectKind::UnknownProject => {
                    let project = resolved.charge.project_id;
                    let code = self
                        .projects
                        .iter()
                        .find(|(_, id)| **id == project)
                        .map(|(c, _)| c.clone());
                    input.project = code;
                    match resolve(&input, catalog, &self.projects, now) {
                        Ok(then) => then,
                        Err(r) => {
                            earlier.refused.push(cannot(format!("is refused ({})", r.reason)));
                            continue;
                        }
                    }
                }
                Err(r) => {
                    earlier.refused.push(cannot(format!("is refused ({})", r.reason)));
                    continue;
                }
            };
            let source = Source {
                options,
                ..job.source.clone()
            };
            earlier.replaced.push((i, Submission { input, source }, then));
        }
        Ok(earlier)
    }

    async fn load_projects(&mut self, conn: &mut PgConnection, jobs: &[Submission]) -> Result<(), sqlx::Error> {
        let missing: HashSet<String> = jobs
            .iter()
            .filter_map(|j| j.input.project.as_deref())
            .map(str::to_lowercase)
            .filter(|c| !self.projects.contains_key(c))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let codes: Vec<String> = missing.into_iter().collect();
        for p in reference::load_projects(conn, &codes).await? {
            self.projects.insert(p.code.to_lowercase(), p.id);
        }
        Ok(())
    }
}

/// A batch's jobs as resolved, by position, and those of them reassigned
/// to a project (`rejected reassign`).
struct Resolved<'a> {
    pending: &'a [(usize, ResolvedJob)],
    reassigned: &'a [(usize, String)],
}

/// What [`Recorder::earlier_readings`] found: records to read as they were
/// read before 2026-12-06 or 2026-12-07 (position, the record so read, it resolved), and
/// records refused for a run recorded so.
#[derive(Default)]
struct Earlier {
    replaced: Vec<(usize, Submission, ResolvedJob)>,
    refused: Vec<(usize, Rejection)>,
}

/// Whether a sacct record reads to another size (nodes, memory) without
/// `slurm_totals`, as records were read before it; or does not read so at
/// all (then only a run recorded so could say more).
fn sized_otherwise_before(job: &Submission) -> bool {
    // Neither field these readings changed: nothing to read again.
    if let Some(fields) = &job.source.options.fields {
        let has = |name: &str| fields.iter().any(|f| f.trim().eq_ignore_ascii_case(name));
        if !has("allocnodes") && !has("reqmem") {
            return false;
        }
    }
    sized_otherwise(job, Reading::SlurmTotals)
}

/// Whether a record reads to another size (nodes, cores, memory, GPUs)
/// without `reading`, or does not read so at all.
fn sized_otherwise(job: &Submission, reading: Reading) -> bool {
    let before = KeptOptions::new(reading.options_before(&job.source.options));
    match crate::ingest::reread(
        job.source.format,
        &before,
        &job.source.raw,
        job.source.raw_bytes.as_deref(),
    ) {
        Ok(crate::ingest::Item::Job(old)) => {
            (old.nodes, old.cores, old.memory, old.gpus)
                != (job.input.nodes, job.input.cores, job.input.memory, job.input.gpus)
        }
        _ => true,
    }
}

/// A PBS record's `Resource_List.nodect`, as written.
fn nodect(raw: &str) -> Option<u32> {
    let at = raw.find("Resource_List.nodect=")? + "Resource_List.nodect=".len();
    let digits: String = raw[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The `job_intake` rows a batch was taken from.
fn intake_ids(jobs: &[Submission], malformed: &[(Source, String)]) -> Vec<i64> {
    jobs.iter()
        .map(|j| &j.source)
        .chain(malformed.iter().map(|(source, _)| source))
        .filter_map(|source| source.intake)
        .collect()
}

/// A rejection's job key is indexed (`rejected_record_open_job`), and a
/// B-tree entry holds at most 2,704 bytes: a key longer than this (a
/// cluster or job id of junk, or an attack) is kept cut to
/// [`KEPT_KEY_CHARS`] characters, so the record is still kept, not refused
/// by the index. Real keys (`cluster/id_index`) are far shorter and are
/// kept whole (resolving a rejection matches them).
const MAX_KEY_BYTES: usize = 2000;
const KEPT_KEY_CHARS: usize = 500;

fn rejection_row(source: &Source, kind: RejectKind, reason: &str, job_key: Option<String>) -> NewRejection {
    let job_key = job_key.map(|k| match k.char_indices().nth(KEPT_KEY_CHARS) {
        Some((cut, _)) if k.len() > MAX_KEY_BYTES => format!("{}…", &k[..cut]),
        _ => k,
    });
    NewRejection {
        source_format: source.format,
        source_ref: source.reference.clone(),
        read_options: source.options.json().clone(),
        raw: source.raw.clone(),
        raw_bytes: source.raw_bytes.clone(),
        raw_sha256: source.raw_sha256(),
        kind,
        reason: reason.to_owned(),
        job_key,
    }
}

/// Lines rejected before and recorded now are resolved; so are open
/// rejections of the same runs read from another source (other bytes).
async fn resolve_rejections(
    conn: &mut PgConnection,
    jobs: &[Submission],
    job_hashes: &[Vec<u8>],
    outcomes: &[Option<Outcome>],
    records: &[Option<JobRecordId>],
    catalog: &Catalog,
) -> Result<(), sqlx::Error> {
    let mut formats = Vec::new();
    let mut hashes = Vec::new();
    let mut resolutions = Vec::new();
    let mut proofs = Vec::new();
    for (((job, hash), outcome), record) in jobs.iter().zip(job_hashes).zip(outcomes).zip(records) {
        let resolution = match outcome {
            Some(
                o @ (Outcome::Recorded { .. }
                | Outcome::Replayed { .. }
                | Outcome::Revised { .. }
                | Outcome::Superseded { .. }),
            ) => o.name(),
            _ => continue,
        };
        let Some(record) = record else { continue };
        formats.push(job.source.format);
        hashes.push(hash.clone());
        resolutions.push(resolution);
        proofs.push(record.0);
    }
    rejected::resolve(conn, &formats, &hashes, &resolutions, &proofs).await?;

    // The same runs, rejected when read from elsewhere: read each again and
    // compare the run (cluster, job id, array index, start).
    let recorded: Vec<(&Submission, JobRecordId)> = jobs
        .iter()
        .zip(records)
        .filter_map(|(job, record)| record.map(|r| (job, r)))
        .collect();
    if recorded.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> = recorded.iter().map(|(job, _)| job.input.key()).collect();
    let open = rejected::open_of_jobs(conn, &keys).await?;
    if open.is_empty() {
        return Ok(());
    }
    let instants = |input: &crate::domain::posting::JobInput| {
        let center = catalog.center.as_ref()?;
        let cluster = catalog.cluster(input.cluster.as_deref()?)?;
        crate::domain::posting::instants(input, cluster.time_zone.unwrap_or(center.time_zone)).ok()
    };
    // When it ran and how long it was suspended, as resolving it reads them.
    let timed = |input: &crate::domain::posting::JobInput| {
        let (start, end, _) = instants(input)?;
        Some((start, end, input.suspension.seconds(start, end).ok()))
    };
    let mut ids = Vec::new();
    let mut proofs = Vec::new();
    for o in &open {
        // Read as a retry would read it (never charged: the readings of now),
        // or as it was kept (a run recorded under an earlier reading is read
        // so: `Recorder::earlier_readings`).
        let kept = serde_json::from_value::<ReadOptions>(o.read_options.clone()).unwrap_or_default();
        if kept.cut_short {
            // A line cut short (`ingest::CUT_SHORT`) cannot be read: the
            // run is the one whose whole record it begins, read from the
            // same place (`file:line`: the complete file imported under its
            // name). The job key alone would not do: every run of a
            // requeued job begins alike up to its start. A character cut in
            // two is read as U+FFFD at the end.
            let cut = o.raw.trim_end_matches('\u{FFFD}');
            let whole = recorded.iter().find(|(job, _)| {
                job.input.key().eq_ignore_ascii_case(&o.job_key)
                    && job.source.format == o.source_format
                    && job.source.reference == o.source_ref
                    && job.source.raw.len() > o.raw.len()
                    && job.source.raw.starts_with(cut)
            });
            if let Some((_, record)) = whole {
                ids.push(o.id);
                proofs.push(record.0);
            }
            continue;
        }
        let now = kept.clone().now(o.source_format);
        let readings = [now.clone(), now.before_0060(), now.before_0056(), kept.before()];
        let same = readings.iter().find_map(|options| {
            let Ok(crate::ingest::Item::Job(input)) =
                crate::ingest::reread(o.source_format, options, &o.raw, o.raw_bytes.as_deref())
            else {
                return None;
            };
            let times = timed(&input)?;
            // The same run, holding the same: what the rejected line says it
            // held, when it ended and how long it was suspended agree with
            // the record (a line that says otherwise is another account of
            // the run, left open for a person).
            recorded.iter().find(|(job, _)| {
                job.input.key().eq_ignore_ascii_case(&o.job_key)
                    && task_of(&job.input.job_id, job.input.array_index) == task_of(&input.job_id, input.array_index)
                    && timed(&job.input) == Some(times)
                    && job.input.cores == input.cores
                    && (job.input.gpus.is_none() || input.gpus.is_none() || job.input.gpus == input.gpus)
                    && (job.input.nodes.is_none() || input.nodes.is_none() || job.input.nodes == input.nodes)
                    && (job.input.memory.is_none() || input.memory.is_none() || job.input.memory == input.memory)
            })
        });
        if let Some((_, record)) = same {
            ids.push(o.id);
            proofs.push(record.0);
        }
    }
    if !ids.is_empty() {
        rejected::resolve_elsewhere(conn, &ids, &proofs).await?;
    }
    Ok(())
}

/// One round of a batch: runs that appear once.
struct Posting<'a> {
    author: &'a str,
    supersede: bool,
    last_closed: Option<Month>,
    /// To price a record of a run recorded before as the run is priced.
    catalog: &'a Catalog,
    projects: &'a HashMap<String, ProjectId>,
    now: chrono::DateTime<Utc>,
}

/// A conflict's names: project codes and the catalog's node types.
struct Named<'a> {
    projects: HashMap<ProjectId, String>,
    catalog: &'a Catalog,
}

impl Names for Named<'_> {
    fn project(&self, id: ProjectId) -> String {
        self.projects.get(&id).cloned().unwrap_or_else(|| Ids.project(id))
    }
    fn node_type(&self, id: NodeTypeId) -> String {
        self.catalog
            .clusters
            .iter()
            .flat_map(|c| &c.node_types)
            .find(|n| n.id == id)
            .map_or_else(|| Ids.node_type(id), |n| n.name.clone())
    }
}

impl Posting<'_> {
    /// The names a conflict between `held` and `job` shows.
    async fn names(
        &self,
        tx: &mut PgConnection,
        held: &[Existing],
        job: &ResolvedJob,
    ) -> Result<Named<'_>, sqlx::Error> {
        let mut ids: Vec<ProjectId> = held.iter().map(|e| e.charge.project_id).collect();
        ids.push(job.charge.project_id);
        ids.sort();
        ids.dedup();
        Ok(Named {
            projects: crate::db::storage::project_codes(tx, &ids).await?.into_iter().collect(),
            catalog: self.catalog,
        })
    }

    /// One round: load what the runs hold, let the domain decide each job
    /// (`domain::posting::decide`), then write what it decided.
    async fn round(
        &self,
        tx: &mut PgConnection,
        jobs: &[Submission],
        round: Vec<(usize, ResolvedJob)>,
        outcomes: &mut [Option<Outcome>],
        records: &mut [Option<JobRecordId>],
        rejections: &mut Vec<NewRejection>,
    ) -> Result<(), sqlx::Error> {
        // Load: the runs already recorded.
        let keys: Vec<&JobKey> = round.iter().map(|(_, r)| &r.key).collect();
        let mut ids: Vec<Option<JobId>> = vec![None; keys.len()];
        for (pos, id) in jobs::find(tx, &keys).await? {
            ids[pos] = Some(id);
        }
        // A run not seen before holds nothing: decided now, so that a
        // refused charge leaves no run row (to `audit --deep`, a run without
        // a record is one whose record was deleted).
        let mut kept = Vec::with_capacity(round.len());
        let mut kept_ids = Vec::with_capacity(round.len());
        for ((index, resolved), id) in round.into_iter().zip(ids) {
            if id.is_none()
                && let Step::Reject(r) = decide(&[], &resolved, self.supersede, &Ids)
            {
                self.reject(jobs, index, r, outcomes, rejections);
            } else {
                kept.push((index, resolved));
                kept_ids.push(id);
            }
        }
        let (round, mut ids) = (kept, kept_ids);
        if round.is_empty() {
            return Ok(());
        }
        let keys: Vec<&JobKey> = round.iter().map(|(_, r)| &r.key).collect();
        // Runs created by this transaction have no records yet: only the
        // others (found, or added by a concurrent writer first) are loaded.
        let mut known: Vec<JobId> = ids.iter().flatten().copied().collect();
        let missing: Vec<usize> = (0..keys.len()).filter(|&p| ids[p].is_none()).collect();
        if !missing.is_empty() {
            let new_keys: Vec<&JobKey> = missing.iter().map(|&p| keys[p]).collect();
            let submitted: Vec<_> = missing.iter().map(|&p| round[p].1.submitted_at).collect();
            for (pos, id) in jobs::insert(tx, &new_keys, &submitted).await? {
                ids[missing[pos]] = Some(id);
            }
            let raced: Vec<usize> = missing.iter().copied().filter(|&p| ids[p].is_none()).collect();
            if !raced.is_empty() {
                let raced_keys: Vec<&JobKey> = raced.iter().map(|&p| keys[p]).collect();
                for (pos, id) in jobs::find(tx, &raced_keys).await? {
                    ids[raced[pos]] = Some(id);
                    known.push(id);
                }
            }
        }
        let ids: Vec<JobId> = ids
            .into_iter()
            .map(|id| id.expect("every run exists after insert"))
            .collect();
        let mut held: HashMap<JobId, Vec<Existing>> = HashMap::new();
        if !known.is_empty() {
            for (job, record) in jobs::records(tx, &known).await? {
                held.entry(job).or_default().push(record);
            }
        }

        // A record of a run recorded before is priced as the run is: at the
        // submit time the run keeps, else at its start. One that gives a
        // submit time where the run has none (or none where it has one)
        // was priced at its own instant; a supersede would then have posted
        // a charge by another card, class or discount than the audit
        // prices the run by. (Two known submit times that differ are a
        // conflict no supersede mends: `classify`.)
        let mut round = round;
        let mut refused = Vec::new();
        for (pos, ((index, resolved), job)) in round.iter_mut().zip(&ids).enumerate() {
            let Some(run_submitted_at) = held.get(job).and_then(|h| h.first()).map(|e| e.job_submitted_at) else {
                continue;
            };
            if run_submitted_at.is_some() == resolved.submitted_at.is_some() {
                continue;
            }
            match resolve_for_run(
                &jobs[*index].input,
                self.catalog,
                self.projects,
                self.now,
                run_submitted_at,
            ) {
                Ok(r) => *resolved = r,
                Err(r) => refused.push((pos, r)),
            }
        }
        let (round, ids): (Vec<_>, Vec<_>) = if refused.is_empty() {
            (round, ids)
        } else {
            let skip: HashSet<usize> = refused.iter().map(|(pos, _)| *pos).collect();
            for (pos, r) in refused {
                self.reject(jobs, round[pos].0, r, outcomes, rejections);
            }
            round
                .into_iter()
                .zip(ids)
                .enumerate()
                .filter(|(pos, _)| !skip.contains(pos))
                .map(|(_, pair)| pair)
                .unzip()
        };

        // Decide.
        struct Plan<'r> {
            index: usize,
            job: JobId,
            revision: i32,
            kind: RecordKind,
            resolved: &'r ResolvedJob,
            replaces: Option<JobRecordId>,
        }
        let mut plans: Vec<Plan> = Vec::new();
        for ((index, resolved), job) in round.iter().zip(&ids) {
            let held = held.get(job).map_or(&[][..], Vec::as_slice);
            let step = match decide(held, resolved, self.supersede, &Ids) {
                // A conflict is decided again with the names it shows (the
                // office reads them before superseding, which may move a
                // charge to another project): loaded only for conflicts.
                Step::Reject(r) if r.kind == RejectKind::Conflict => {
                    let names = self.names(tx, held, resolved).await?;
                    decide(held, resolved, self.supersede, &names)
                }
                step => step,
            };
            match step {
                Step::Replay { record } => {
                    records[*index] = record;
                    outcomes[*index] = Some(Outcome::Replayed {
                        job: jobs[*index].input.key(),
                    });
                }
                Step::Reject(r) => self.reject(jobs, *index, r, outcomes, rejections),
                Step::Record {
                    revision,
                    kind,
                    replaces,
                } => plans.push(Plan {
                    index: *index,
                    job: *job,
                    revision,
                    kind,
                    resolved,
                    replaces,
                }),
            }
        }
        // A supersede of a record whose charges were archived cannot
        // reverse them: charging the new record would charge the job twice.
        let superseding: Vec<i64> = plans.iter().filter_map(|p| p.replaces.map(|r| r.0)).collect();
        if !superseding.is_empty() {
            let archived: HashMap<i64, chrono::NaiveDate> = crate::db::archive::archived_charges(tx, &superseding)
                .await?
                .into_iter()
                .collect();
            if !archived.is_empty() {
                let (keep, refused): (Vec<Plan>, Vec<Plan>) = plans
                    .into_iter()
                    .partition(|p| p.replaces.is_none_or(|r| !archived.contains_key(&r.0)));
                for p in refused {
                    let month = crate::domain::period::Month::of_date(archived[&p.replaces.expect("refused").0]);
                    let r = crate::domain::posting::Rejection {
                        kind: RejectKind::Conflict,
                        reason: format!(
                            "it supersedes a record whose charges are archived ({month}): they cannot be reversed, \
                             so it is not charged; correct the job's charge with an adjustment"
                        ),
                    };
                    self.reject(jobs, p.index, r, outcomes, rejections);
                }
                plans = keep;
            }
        }
        if plans.is_empty() {
            return Ok(());
        }

        // Write: the records, then their charges and the reversals of what
        // they supersede, in one statement each.
        let new_records: Vec<jobs::NewRecord> = plans
            .iter()
            .map(|p| {
                let source = &jobs[p.index].source;
                jobs::NewRecord {
                    job: p.job,
                    revision: p.revision,
                    kind: p.kind,
                    job_data: p.resolved,
                    source_format: source.format,
                    source_ref: &source.reference,
                    raw: &source.raw,
                    raw_bytes: source.raw_bytes.as_deref(),
                    read_options: &source.options,
                }
            })
            .collect();
        let record_ids: HashMap<(JobId, i32), JobRecordId> = jobs::insert_records(tx, &new_records, self.author)
            .await?
            .into_iter()
            .map(|(job, rev, id)| ((job, rev), id))
            .collect();
        let replaced: Vec<JobRecordId> = plans.iter().filter_map(|p| p.replaces).collect();
        let mut old_charges: HashMap<JobRecordId, Vec<ledger::Posted>> = HashMap::new();
        if !replaced.is_empty() {
            for e in ledger::unreversed_charges(tx, &replaced).await? {
                old_charges
                    .entry(e.job_record_id.expect("job charges name their record"))
                    .or_default()
                    .push(e);
            }
        }
        let mut entries = Vec::new();
        let mut discounts = Vec::new();
        for p in &plans {
            let record_id = record_ids[&(p.job, p.revision)];
            records[p.index] = Some(record_id);
            let key = jobs[p.index].input.key();
            if p.kind == RecordKind::Revision {
                outcomes[p.index] = Some(Outcome::Revised {
                    job: key,
                    revision: p.revision,
                });
                continue;
            }
            let (period, late) = posting_period(p.resolved.natural_period, self.last_closed);
            let charges = charge_entries(p.resolved, record_id, period, late);
            let discounted = discount_entries(p.resolved, record_id, period, late);
            // What the job costs: its charges less their discount.
            let count = charges.len() + discounted.len();
            let amount = p.resolved.total() + discounted.iter().map(|d| d.amount).sum::<Decimal>();
            entries.extend(charges);
            discounts.extend(discounted);
            outcomes[p.index] = Some(match p.replaces {
                None => Outcome::Recorded {
                    job: key,
                    period,
                    late,
                    entries: count,
                    amount,
                },
                Some(old) => {
                    let reversed = old_charges.remove(&old).unwrap_or_default();
                    let n = reversed.len();
                    let reason = format!("superseded by revision {} of the job's record", p.revision);
                    entries.extend(
                        reversed
                            .iter()
                            .map(|e| reversal(e, period, late, Some(record_id), reason.clone())),
                    );
                    Outcome::Superseded {
                        job: key,
                        revision: p.revision,
                        period,
                        reversed: n,
                        entries: count,
                        amount,
                    }
                }
            });
        }
        ledger::insert(tx, &entries, self.author).await?;
        // Discount lines name their charge, which must exist first.
        ledger::insert_job_discounts(tx, &discounts, self.author).await?;
        Ok(())
    }

    /// Keep job `index` as rejected for `r`.
    fn reject(
        &self,
        jobs: &[Submission],
        index: usize,
        r: Rejection,
        outcomes: &mut [Option<Outcome>],
        rejections: &mut Vec<NewRejection>,
    ) {
        let key = jobs[index].input.key();
        rejections.push(rejection_row(&jobs[index].source, r.kind, &r.reason, Some(key.clone())));
        outcomes[index] = Some(Outcome::Rejected {
            job: Some(key),
            kind: r.kind,
            reason: r.reason,
        });
    }
}
