//! `import`: read accounting records (Slurm, PBS, JSON lines) from files or
//! stdin and record them in batches. Reading and parsing run on their own
//! thread, one bounded batch ahead of posting, so memory stays flat however
//! large the input. Also re-processing of rejected records.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};

use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use super::record::{Outcome, RecordError, Recorder, Source, Submission};
use crate::db::rejected;
use crate::domain::posting::RejectKind;
use crate::ingest::{Format, Item, LineReader, RawLine, ReadOptions, Skip, parser};

/// How many jobs are posted per transaction, unless `import --batch-size`
/// says otherwise.
pub const BATCH: usize = 2000;

/// What an import did.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Lines read (including skipped and rejected ones).
    pub lines: u64,
    pub recorded: u64,
    pub replayed: u64,
    pub revised: u64,
    pub superseded: u64,
    /// Not charged and not an error, by reason.
    pub skipped: BTreeMap<Skip, u64>,
    /// Not charged and kept for re-processing, by kind.
    pub rejected: BTreeMap<RejectKind, u64>,
    /// What the recorded and superseding jobs cost (before reversals).
    pub charged: Decimal,
    /// The first rejections, `where: why`.
    pub examples: Vec<String>,
}

const EXAMPLES: usize = 20;

impl Summary {
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }

    pub(super) fn reject(&mut self, kind: RejectKind, at: &str, reason: &str) {
        *self.rejected.entry(kind).or_default() += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(format!("{at}: {reason}"));
        }
    }

    pub(super) fn count(&mut self, outcome: &Outcome, at: &str) {
        match outcome {
            Outcome::Recorded { amount, .. } => {
                self.recorded += 1;
                self.charged += amount;
            }
            Outcome::Replayed { .. } => self.replayed += 1,
            Outcome::Revised { .. } => self.revised += 1,
            Outcome::Superseded { amount, .. } => {
                self.superseded += 1;
                self.charged += amount;
            }
            Outcome::Rejected { job, kind, reason } => {
                let at = match job {
                    Some(j) => format!("{at} ({j})"),
                    None => at.to_owned(),
                };
                self.reject(*kind, &at, reason);
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("reading {name}: {source}")]
    Read {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Options(String),
    #[error("{0}")]
    Follow(String),
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// A batch read ahead by the reader thread.
#[derive(Default)]
struct Batch {
    jobs: Vec<Submission>,
    malformed: Vec<(Source, String)>,
    skipped: Vec<Skip>,
    lines: u64,
    bytes: u64,
}

fn format_name(f: Format) -> &'static str {
    f.as_str()
}

/// Import one input (`name` is shown in messages: a path, or `stdin`).
/// `progress` is told the bytes read so far.
pub async fn import<R: Read + Send + 'static>(
    recorder: &mut Recorder,
    input: R,
    name: &str,
    format: Format,
    options: &ReadOptions,
    summary: &mut Summary,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), ImportError> {
    let mut p = parser(format, options).map_err(ImportError::Options)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Batch, std::io::Error>>(2);
    let file = name.to_owned();
    let batch_size = recorder.batch_size.max(1);
    let reader = std::thread::spawn(move || {
        let mut lines = LineReader::new(BufReader::with_capacity(1 << 16, input));
        let mut batch = Batch::default();
        loop {
            let (number, line) = match lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => {
                    // Post what was read before the error, then report it.
                    batch.bytes = lines.bytes_read();
                    let _ = tx.blocking_send(Ok(std::mem::take(&mut batch)));
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            batch.lines += 1;
            let reference = format!("{file}:{number}");
            let source = |raw: String, options: ReadOptions| Source {
                format: format_name(format),
                reference: reference.clone(),
                raw,
                options,
                job: None,
            };
            match line {
                RawLine::Unreadable { reason, prefix } => {
                    batch.malformed.push((source(prefix, p.options()), reason));
                }
                RawLine::Text(text) => match p.parse(&text) {
                    None => {}
                    Some(Item::Skip(s)) => batch.skipped.push(s),
                    Some(Item::Bad(reason)) => {
                        let job = p.job_key(&text);
                        batch.malformed.push((
                            Source {
                                job,
                                ..source(text, p.options())
                            },
                            reason,
                        ));
                    }
                    Some(Item::Job(job)) => batch.jobs.push(Submission {
                        input: *job,
                        source: source(text, p.options()),
                    }),
                },
            }
            if batch.jobs.len() + batch.malformed.len() >= batch_size {
                batch.bytes = lines.bytes_read();
                if tx.blocking_send(Ok(std::mem::take(&mut batch))).is_err() {
                    return;
                }
            }
        }
        batch.bytes = lines.bytes_read();
        let _ = tx.blocking_send(Ok(batch));
    });
    let mut result = Ok(());
    while let Some(batch) = rx.recv().await {
        let batch = match batch {
            Ok(b) => b,
            Err(source) => {
                result = Err(ImportError::Read {
                    name: name.to_owned(),
                    source,
                });
                break;
            }
        };
        summary.lines += batch.lines;
        for s in batch.skipped {
            *summary.skipped.entry(s).or_default() += 1;
        }
        for (source, reason) in &batch.malformed {
            summary.reject(RejectKind::Malformed, &source.reference, reason);
        }
        match recorder.record(&batch.jobs, &batch.malformed).await {
            Ok(outcomes) => {
                for (job, outcome) in batch.jobs.iter().zip(&outcomes) {
                    summary.count(outcome, &job.source.reference);
                }
            }
            Err(e) => {
                result = Err(e.into());
                break;
            }
        }
        progress(batch.bytes);
    }
    drop(rx);
    if result.is_ok() {
        // The reader has sent everything: it is done, or it died.
        if reader.join().is_err() {
            return Err(ImportError::Read {
                name: name.to_owned(),
                source: std::io::Error::other("the reading thread failed"),
            });
        }
    }
    // On an error the reader may still be blocked reading stdin: leave it;
    // it stops at its next send.
    result
}

/// Re-process the rejected records that are still open: read each again
/// with the options it was read with, and record it with today's rules
/// (and `--supersede`, if the recorder has it).
pub async fn retry_rejected(pool: &PgPool, recorder: &mut Recorder, summary: &mut Summary) -> Result<(), ImportError> {
    let mut after = 0;
    loop {
        let mut conn = pool.acquire().await.map_err(RecordError::Connection)?;
        let page = rejected::list(&mut conn, after, BATCH as i64, false)
            .await
            .map_err(RecordError::Db)?;
        drop(conn);
        let Some(last) = page.last() else { break };
        after = last.id;
        let mut batch = Batch::default();
        let mut skipped = Vec::new();
        for r in page {
            summary.lines += 1;
            let format: &'static str = match r.source_format.as_str() {
                "slurm" => "slurm",
                "pbs" => "pbs",
                "jsonl" => "jsonl",
                "jobcomp" => "jobcomp",
                "json" => "json",
                _ => "cli",
            };
            let options: ReadOptions = serde_json::from_value(r.read_options.clone()).unwrap_or_default();
            let source = Source {
                format,
                reference: r.source_ref.clone(),
                raw: r.raw.clone(),
                options: options.clone(),
                job: r.job_key.clone(),
            };
            let item = match Format::parse(format) {
                Some(f) => parser(f, &options)
                    .map_err(ImportError::Options)?
                    .parse(&r.raw)
                    .unwrap_or_else(|| Item::Bad("the line is empty".into())),
                // One JSON object (job record --json, or the flags as JSON).
                None => crate::ingest::jsonl::parse_job(&r.raw).unwrap_or_else(Item::Bad),
            };
            match item {
                Item::Job(job) => batch.jobs.push(Submission { input: *job, source }),
                Item::Skip(s) => {
                    *summary.skipped.entry(s).or_default() += 1;
                    skipped.push(r.id);
                }
                Item::Bad(reason) => {
                    summary.reject(RejectKind::Malformed, &r.source_ref, &reason);
                    batch.malformed.push((source, reason));
                }
            }
        }
        let outcomes = recorder.record(&batch.jobs, &batch.malformed).await?;
        for (job, outcome) in batch.jobs.iter().zip(&outcomes) {
            summary.count(outcome, &job.source.reference);
        }
        if !skipped.is_empty() {
            let mut conn = pool.acquire().await.map_err(RecordError::Connection)?;
            rejected::resolve_skipped(&mut conn, &skipped)
                .await
                .map_err(RecordError::Db)?;
        }
    }
    Ok(())
}
