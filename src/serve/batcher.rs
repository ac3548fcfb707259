//! The one task that owns the [`Recorder`]: requests queue up while a
//! transaction commits and go into the next one together (group commit);
//! each is answered only once its transaction committed. It also records
//! the documents stored in `job_intake` ([`super::intake`]).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::Metrics;
use super::intake::Intake;
use crate::service::record::{Outcome, Recorder, Source, Submission};

/// One unit of work for the batcher.
pub(super) enum Work {
    Job(Box<Submission>),
    Malformed(Box<(Source, String)>),
}

/// What the batcher answers: a job's outcome (none for a malformed
/// document), or why nothing was recorded.
pub(super) type Answer = Result<Option<Outcome>, String>;

pub(super) const SHUTTING_DOWN: &str = "the server is shutting down";

pub(super) struct Pending {
    pub(super) work: Work,
    pub(super) reply: oneshot::Sender<Answer>,
}

/// The task also records the documents stored in `job_intake` whenever a
/// round is due, one batch at a time between the queued requests, and
/// what is left when the queue closes and the `storer` (`--intake`) has
/// finished.
pub(super) async fn batcher(
    mut recorder: Recorder,
    mut rx: mpsc::Receiver<Pending>,
    max: usize,
    metrics: Arc<Metrics>,
    mut intake: Intake,
    storer: Option<tokio::task::JoinHandle<()>>,
) {
    loop {
        let first = tokio::select! {
            p = rx.recv() => p,
            () = intake.woken() => {
                intake.round(&mut recorder).await;
                continue;
            }
        };
        let Some(first) = first else { break };
        let mut pending = vec![first];
        while pending.len() < max {
            match rx.try_recv() {
                Ok(p) => pending.push(p),
                Err(_) => break,
            }
        }
        metrics.batch(pending.len());
        let mut jobs = Vec::new();
        let mut malformed = Vec::new();
        // Replies in order, each marked with whether a job outcome is its.
        let mut replies = Vec::with_capacity(pending.len());
        for p in pending {
            match p.work {
                Work::Job(s) => {
                    jobs.push(*s);
                    replies.push((true, p.reply));
                }
                Work::Malformed(m) => {
                    malformed.push(*m);
                    replies.push((false, p.reply));
                }
            }
        }
        match recorder.record(&jobs, &malformed).await {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for (is_job, reply) in replies {
                    let outcome = if is_job { outcomes.next() } else { None };
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                tracing::error!("recording a batch of {} failed: {e}", replies.len());
                let msg = e.to_string();
                for (_, reply) in replies {
                    let _ = reply.send(Err(msg.clone()));
                }
            }
        }
    }
    // The queue closed: every request has been answered; a store still in
    // flight (its sender gone) commits before the last round.
    if let Some(storer) = storer {
        let _ = storer.await;
    }
    intake.drain(&mut recorder).await;
}
