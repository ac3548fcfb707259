//! `serve --intake`: accepted first, recorded next. A jobcomp post is
//! answered once its document is stored in `job_intake` (one single-row
//! INSERT that commits by itself, `routes::accept_reply`); the batcher task
//! takes the stored documents in batches of up to `--max-batch`, reads them
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
//! One task per database records the intake: it holds a session advisory
//! lock on a connection of its own, so two `serve --intake` processes on one
//! database both accept, and one records (the other takes over when the
//! first stops). Documents left by a stopped server are recorded by the next.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::{Notify, mpsc, oneshot};

use super::Metrics;
use crate::db::errors::is_connection_error;
use crate::db::intake::{self, Waiting};
use crate::domain::kinds::SourceFormat;
use crate::ingest::{Item, ReadOptions, jobcomp};
use crate::service::record::{Outcome, Recorder, Source, Submission};

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
    /// Woken by the route after each document it stored.
    pub(super) wake: Arc<Notify>,
    /// The connection holding the lock, once taken: out of the pool, so
    /// that the lock ends with it (a pooled one would keep it after stop).
    held: Option<PgConnection>,
    /// Since when documents wait to be recorded (woken, no round since).
    due_since: Option<tokio::time::Instant>,
    /// The last round recorded a full batch: more wait, go on at once.
    more: bool,
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
        let wake = Arc::new(Notify::new());
        // Documents left from before: look at once.
        wake.notify_one();
        Intake {
            pool,
            wake,
            held: None,
            due_since: None,
            more: false,
            max: max.max(1),
            metrics,
        }
    }

    /// Until a round is due: woken by the route (or [`TICK`] passed), then
    /// no document stored for [`IDLE`] or the first waited [`MAX_WAIT`];
    /// at once while the last round left more. Cancel-safe: being woken is
    /// remembered until the round.
    pub(super) async fn woken(&mut self) {
        if self.more {
            return;
        }
        let since = match self.due_since {
            Some(since) => since,
            None => {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(TICK) => {}
                }
                *self.due_since.insert(tokio::time::Instant::now())
            }
        };
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(IDLE) => return,
                () = tokio::time::sleep_until(since + MAX_WAIT) => return,
            }
        }
    }

    /// Record one batch of the oldest documents.
    pub(super) async fn round(&mut self, recorder: &mut Recorder) {
        self.due_since = None;
        let drained = self.drain_once(recorder).await;
        self.more = drained == Drained::More;
        if drained == Drained::Failed {
            tokio::time::sleep(BACKOFF).await;
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

    async fn try_drain(&mut self, recorder: &mut Recorder) -> Result<Drained, String> {
        if self.held.is_none() {
            let mut conn = self.pool.acquire().await.map_err(|e| e.to_string())?.detach();
            if !intake::try_lock(&mut conn).await.map_err(|e| e.to_string())? {
                return Ok(Drained::Done);
            }
            self.held = Some(conn);
        }
        let conn = self.held.as_mut().expect("taken above");
        let limit = i64::try_from(self.max).unwrap_or(i64::MAX);
        let waiting = match intake::oldest(conn, limit).await {
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
        let outcomes = recorder.record(&jobs, &malformed).await.map_err(|e| e.to_string())?;
        for outcome in &outcomes {
            self.metrics.outcome(outcome.name());
            if let Outcome::Rejected { job, reason, .. } = outcome {
                tracing::warn!("kept, not charged: {}: {reason}", job.as_deref().unwrap_or("?"));
            }
        }
        for _ in &malformed {
            self.metrics.outcome("malformed");
        }
        let conn = self.held.as_mut().expect("taken above");
        if !skipped.is_empty() {
            intake::done(conn, &skipped).await.map_err(|e| e.to_string())?;
        }
        let (left, oldest) = intake::waiting(conn).await.map_err(|e| e.to_string())?;
        self.metrics.intake(
            u64::try_from(left).unwrap_or(0),
            oldest.map_or(0, |t| u64::try_from(t.timestamp()).unwrap_or(0)),
        );
        Ok(if full { Drained::More } else { Drained::Done })
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
    let options = ReadOptions::default();
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

/// Store documents as they come: those that arrive while one INSERT
/// commits go into the next together (group commit, as the batcher does
/// for recording), so one sender pays one round trip and many senders
/// share WAL flushes. Each post is answered once its INSERT committed.
pub(super) async fn storer(pool: PgPool, mut rx: mpsc::Receiver<Store>, wake: Arc<Notify>) {
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
        let stored = intake::accept(&pool, &documents, &exact).await.map_err(|e| {
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
}
