//! `serve --intake`: accepted first, recorded next. A jobcomp post is
//! answered once its document is stored in `job_intake` (one single-row
//! INSERT that commits by itself, `routes::accept_reply`); the batcher task
//! takes the stored documents in batches of up to an import's (2,000), reads them
//! again, records them with the same [`Recorder`] as every other post and
//! deletes them in the transaction that recorded them. A document is
//! therefore either waiting or recorded (or kept as rejected), never both
//! and never neither.
//!
//! Recording waits while documents keep arriving ([`IDLE`], at most
//! [`MAX_WAIT`]): a burst is answered at the rate a document is stored, and
//! recorded in the pause after it, instead of every post waiting behind
//! the recording of the ones before.
//!
//! Every `serve`, with `--intake` or without, runs the recording; one per
//! database records at a time: it holds a session advisory lock on a
//! connection of its own, so several servers on one database all accept
//! and one records (another takes over when it stops), and documents left
//! by a stopped server are recorded by the next. A document the database
//! refuses both to record and to keep as rejected is set aside
//! (`job_intake.failed`) so that the ones after it are recorded; it is
//! tried again when a server takes the lock. One the database cannot
//! record now (`RecordError::Connection`, its connection kept: a lock
//! waited for past `lock_timeout`) stays waiting, and the recorder's
//! job-by-job fallback records the ones after it before the round fails
//! (`Recorder::record`); the next round tries it again.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use super::Metrics;
use crate::db::errors::is_connection_error;
use crate::db::intake::{self, Waiting};
use crate::domain::kinds::SourceFormat;
use crate::ingest::{Item, KeptOptions, jobcomp};
use crate::service::record::{Outcome, RecordError, Recorder, Source, Submission};

/// How often the intake is looked at without being woken: documents left
/// by a stopped server, or by one that lost the lock.
const TICK: Duration = Duration::from_secs(1);

/// Recording waits while documents keep arriving: it begins once none has
/// been stored for this long (the stream paused)...
const IDLE: Duration = Duration::from_millis(20);

/// ...or once the oldest document it was woken for has waited this long,
/// so a stream that never pauses is recorded while it goes on. A burst of
/// this length (a 50,000-task array at the rate one sender is answered) is
/// taken in whole before its recording competes with it for the machine.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// After a failure, how long before the next try.
const BACKOFF: Duration = Duration::from_secs(1);

/// Where the route says a document came from (the same as without
/// `--intake`).
pub(super) const REFERENCE: &str = "serve /slurm/_doc";

pub(super) struct Intake {
    pool: PgPool,
    /// Woken by the storer after each INSERT.
    pub(super) wake: Arc<Notify>,
    /// The connection holding the lock, once taken: out of the pool, so
    /// that the lock ends with it (a pooled one would keep it after stop).
    held: Option<PgConnection>,
    /// Since when documents wait to be recorded (woken, no round since).
    due_since: Option<Instant>,
    /// When the last document was stored, as far as this task was woken.
    last_store: Instant,
    /// When to look without being woken.
    next_tick: Instant,
    /// The last round recorded a full batch: more wait, go on at once.
    more: bool,
    /// The last round failed: not before this (the batcher serves its
    /// queue meanwhile).
    retry_at: Option<Instant>,
    max: usize,
    metrics: Arc<Metrics>,
}

/// What one round of recording found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Drained {
    /// A full batch was recorded: more may wait.
    More,
    /// Nothing (more) waits, or another process records the intake.
    Done,
    /// It failed (logged): try again after [`BACKOFF`].
    Failed,
}

impl Intake {
    pub(super) fn new(pool: PgPool, max: usize, metrics: Arc<Metrics>) -> Intake {
        let now = Instant::now();
        Intake {
            pool,
            wake: Arc::new(Notify::new()),
            held: None,
            // Documents left from before: a round at once.
            due_since: Some(now),
            last_store: now,
            next_tick: now + TICK,
            more: false,
            retry_at: None,
            max: max.max(1),
            metrics,
        }
    }

    /// Until a round is due: woken by the storer (or [`TICK`] passed), then
    /// no document stored for [`IDLE`] or the first waited [`MAX_WAIT`];
    /// at once while the last round left more. Cancel-safe (the batcher
    /// drops it whenever a request comes first): what it waits for are
    /// deadlines kept here, and being woken is remembered until the round.
    pub(super) async fn woken(&mut self) {
        if let Some(at) = self.retry_at {
            tokio::time::sleep_until(at).await;
            self.retry_at = None;
        }
        if self.more {
            return;
        }
        let since = match self.due_since {
            Some(since) => since,
            None => {
                tokio::select! {
                    () = self.wake.notified() => self.last_store = Instant::now(),
                    () = tokio::time::sleep_until(self.next_tick) => {}
                }
                *self.due_since.insert(Instant::now())
            }
        };
        loop {
            tokio::select! {
                () = self.wake.notified() => self.last_store = Instant::now(),
                () = tokio::time::sleep_until(self.last_store + IDLE) => return,
                () = tokio::time::sleep_until(since + MAX_WAIT) => return,
            }
        }
    }

    /// Record one batch of the oldest documents.
    pub(super) async fn round(&mut self, recorder: &mut Recorder) {
        self.due_since = None;
        let drained = self.drain_once(recorder).await;
        let now = Instant::now();
        self.next_tick = now + TICK;
        self.more = drained == Drained::More;
        if drained == Drained::Failed {
            // Again after the backoff, without sleeping here: requests
            // queued for the batcher are served meanwhile.
            self.retry_at = Some(now + BACKOFF);
            self.due_since = Some(now);
        }
    }

    /// Record everything waiting (at shutdown), as far as the database
    /// lets, and give up the lock.
    pub(super) async fn drain(&mut self, recorder: &mut Recorder) {
        while self.drain_once(recorder).await == Drained::More {}
        if let Some(conn) = self.held.take() {
            let _ = conn.close().await;
        }
    }

    async fn drain_once(&mut self, recorder: &mut Recorder) -> Drained {
        match self.try_drain(recorder).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("recording the intake: {e}");
                Drained::Failed
            }
        }
    }

    /// The connection holding the lock, taking it if no process holds it;
    /// `None` when another does.
    async fn lock(&mut self) -> Result<Option<&mut PgConnection>, sqlx::Error> {
        if self.held.is_none() {
            // Tried on a pooled connection (a lock not taken holds nothing),
            // kept out of the pool once taken.
            let mut conn = self.pool.acquire().await?;
            if !intake::try_lock(&mut conn).await? {
                return Ok(None);
            }
            let mut conn = conn.detach();
            // What an earlier server set aside is tried again.
            let retried = intake::retry_set_aside(&mut conn).await?;
            if retried > 0 {
                tracing::info!("trying again {retried} posted job(s) set aside before this server took the intake");
            }
            self.held = Some(conn);
        }
        Ok(self.held.as_mut())
    }

    async fn try_drain(&mut self, recorder: &mut Recorder) -> Result<Drained, String> {
        let limit = i64::try_from(self.max).unwrap_or(i64::MAX);
        let waiting = match self.lock().await {
            Ok(None) => {
                // Another process records the intake, and counts it.
                self.metrics.intake(0, 0, 0);
                return Ok(Drained::Done);
            }
            Ok(Some(conn)) => intake::oldest(conn, limit).await,
            Err(e) => Err(e),
        };
        let waiting = match waiting {
            Ok(w) => w,
            Err(e) => {
                if is_connection_error(&e) {
                    // The lock went with the session: take it again.
                    self.held = None;
                }
                return Err(e.to_string());
            }
        };
        if waiting.is_empty() {
            self.count_held().await?;
            return Ok(Drained::Done);
        }
        let full = waiting.len() == self.max;
        let mut jobs = Vec::with_capacity(waiting.len());
        let mut malformed = Vec::new();
        let mut skipped = Vec::new();
        for w in waiting {
            match read(w) {
                Read::Job(s) => jobs.push(*s),
                Read::Malformed(source, reason) => malformed.push((*source, reason)),
                Read::Skip(id) => skipped.push(id),
            }
        }
        self.metrics.batch(jobs.len() + malformed.len());
        let outcomes = match recorder.record(&jobs, &malformed).await {
            Ok(outcomes) => outcomes,
            Err(e @ RecordError::Connection(_)) => return Err(e.to_string()),
            // The database refused to record one of them and to keep it
            // as rejected: one by one, setting aside what it refuses, so
            // that one document cannot stop the others.
            Err(_) => self.one_by_one(recorder, &jobs, &malformed).await?,
        };
        for outcome in &outcomes {
            self.metrics.outcome(outcome.name());
            if let Outcome::Rejected { job, reason, .. } = outcome {
                // Quoted: a job id or reason cannot forge a log line of its own.
                tracing::warn!("kept, not charged: {:?}: {reason:?}", job.as_deref().unwrap_or("?"));
            }
        }
        for _ in &malformed {
            self.metrics.outcome("malformed");
        }
        let conn = self.held.as_mut().ok_or("the intake's lock was lost")?;
        if !skipped.is_empty() {
            intake::done(conn, &skipped).await.map_err(|e| e.to_string())?;
        }
        if full {
            // More follows at once: counted when it is done.
            return Ok(Drained::More);
        }
        self.count_held().await?;
        Ok(Drained::Done)
    }

    /// The gauges of `/metrics`: what `job_intake` holds now.
    async fn count_held(&mut self) -> Result<(), String> {
        let conn = self.held.as_mut().ok_or("the intake's lock was lost")?;
        let held = intake::held(conn).await.map_err(|e| e.to_string())?;
        self.metrics.intake(
            u64::try_from(held.waiting).unwrap_or(0),
            u64::try_from(held.failed).unwrap_or(0),
            held.oldest.map_or(0, |t| u64::try_from(t.timestamp()).unwrap_or(0)),
        );
        Ok(())
    }

    /// Record each document by itself; set aside each the database refuses.
    async fn one_by_one(
        &mut self,
        recorder: &mut Recorder,
        jobs: &[Submission],
        malformed: &[(Source, String)],
    ) -> Result<Vec<Outcome>, String> {
        let mut outcomes = Vec::with_capacity(jobs.len());
        // The recorder's own fallback may have recorded some before it
        // gave up: those are no longer waiting.
        let ids: Vec<i64> = jobs
            .iter()
            .map(|j| &j.source)
            .chain(malformed.iter().map(|m| &m.0))
            .filter_map(|s| s.intake)
            .collect();
        let conn = self.held.as_mut().ok_or("the intake's lock was lost")?;
        let waiting: std::collections::HashSet<i64> = intake::still_waiting(conn, &ids)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        let sources = jobs
            .iter()
            .map(|j| (std::slice::from_ref(j), &[][..], &j.source))
            .chain(malformed.iter().map(|m| (&[][..], std::slice::from_ref(m), &m.0)))
            .filter(|(_, _, source)| source.intake.is_some_and(|id| waiting.contains(&id)));
        for (job, line, source) in sources {
            match recorder.record(job, line).await {
                Ok(o) => outcomes.extend(o),
                Err(e @ RecordError::Connection(_)) => return Err(e.to_string()),
                Err(e) => {
                    let id = source.intake.expect("read from the intake");
                    tracing::error!(
                        "a posted job (intake {id}) could not be recorded nor kept as rejected; set aside: {e}"
                    );
                    let conn = self.held.as_mut().ok_or("the intake's lock was lost")?;
                    intake::set_aside(conn, id, &e.to_string())
                        .await
                        .map_err(|e| e.to_string())?;
                    self.metrics.outcome("set_aside");
                }
            }
        }
        Ok(outcomes)
    }
}

/// A stored document, read again.
enum Read {
    Job(Box<Submission>),
    Malformed(Box<Source>, String),
    /// A job that never ran: nothing to record (the route answers these
    /// without storing them; a document stored by an older version may be one).
    Skip(i64),
}

/// Read a stored document as the route read it: the same reader, the same
/// byte policy, the same text kept.
fn read(w: Waiting) -> Read {
    let options = KeptOptions::jobcomp();
    let parsed = match &w.exact {
        Some(bytes) => jobcomp::parse_document(&String::from_utf8_lossy(bytes), &options)
            .map(|(_, item)| crate::ingest::check_decoded(item)),
        None => jobcomp::parse_document(&w.document, &options).map(|(_, item)| item),
    };
    let source = Source {
        format: SourceFormat::Jobcomp,
        reference: REFERENCE.into(),
        raw: w.document,
        raw_bytes: w.exact,
        options,
        job: None,
        intake: Some(w.id),
    };
    match parsed {
        Ok(Item::Job(input)) => Read::Job(Box::new(Submission { input: *input, source })),
        Ok(Item::Skip(_)) => Read::Skip(w.id),
        Ok(Item::Bad(reason)) | Err(reason) => Read::Malformed(Box::new(source), reason),
    }
}

/// A document for [`storer`], and where to say whether it was stored.
pub(super) struct Store {
    pub(super) document: String,
    pub(super) exact: Option<Vec<u8>>,
    pub(super) reply: oneshot::Sender<Result<(), String>>,
}

/// The most documents stored by one INSERT.
const STORED_TOGETHER: usize = 1000;

/// How long the storer tries to open its connection before the posts
/// waiting for it are answered 503 (the pool's acquire timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Store documents as they come: those that arrive while one INSERT
/// commits go into the next together (group commit, as the batcher does
/// for recording), so one sender pays one round trip and many senders
/// share WAL flushes. Each post is answered once its INSERT committed.
///
/// The storer holds one connection of its own, out of any pool: taking a
/// pooled connection and giving it back cost about as much as the INSERT's
/// own round trip (measured 2026-12-05: 210 µs a store through a pool of
/// one against 140 µs on a held connection; `pgbench` 115 µs). A store that
/// fails drops the connection (its posts are answered 503, and Slurm sends
/// them again); the next store opens a new one.
pub(super) async fn storer(options: PgConnectOptions, mut rx: mpsc::Receiver<Store>, wake: Arc<Notify>) {
    let mut held: Option<PgConnection> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < STORED_TOGETHER {
            match rx.try_recv() {
                Ok(s) => batch.push(s),
                Err(_) => break,
            }
        }
        let mut documents = Vec::with_capacity(batch.len());
        let mut exact = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for s in batch {
            documents.push(s.document);
            exact.push(s.exact);
            replies.push(s.reply);
        }
        let stored = store(&mut held, &options, &documents, &exact).await.map_err(|e| {
            tracing::error!("storing {} posted jobs in the intake: {e}", replies.len());
            e.to_string()
        });
        if stored.is_ok() {
            wake.notify_one();
        }
        for reply in replies {
            let _ = reply.send(stored.clone());
        }
    }
    if let Some(conn) = held {
        let _ = conn.close().await;
    }
}

/// One INSERT on the held connection, opened first if there is none; on
/// any failure the connection is dropped, so the next store begins afresh.
async fn store(
    held: &mut Option<PgConnection>,
    options: &PgConnectOptions,
    documents: &[String],
    exact: &[Option<Vec<u8>>],
) -> Result<(), sqlx::Error> {
    let conn = match held {
        Some(conn) => conn,
        None => {
            let conn = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options))
                .await
                .map_err(|_| {
                    sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("connecting to the database took over {} s", CONNECT_TIMEOUT.as_secs()),
                    ))
                })??;
            held.insert(conn)
        }
    };
    let stored = intake::accept(conn, documents, exact).await;
    if stored.is_err() {
        *held = None;
    }
    stored
}
