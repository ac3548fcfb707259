//! `import`: read accounting records (Slurm, PBS, JSON lines) from files or
//! stdin and record them in batches. Reading and parsing run on their own
//! thread, one bounded batch ahead of posting, so memory stays flat however
//! large the input; two batches are posted at once, on two connections,
//! unless they name the same job (then in the file's order). Also
//! re-processing of rejected records.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{BufReader, Read};

use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::PgPool;

use super::record::{Outcome, RecordError, Recorder, Source, Submission};
use crate::db::rejected;
use crate::domain::posting::RejectKind;
use crate::ingest::{Format, Item, KeptOptions, LineReader, RawLine, ReadOptions, Skip, parser, sacct_json};

/// How many jobs are posted per transaction, unless `import --batch-size`
/// says otherwise.
pub const BATCH: usize = 2000;

/// How many batches are posted at once, each on its own connection.
const IN_FLIGHT: usize = 2;

/// One input to import, and how to read it.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// Its name in messages and in kept records' references (`NAME:LINE`).
    pub name: &'a str,
    pub format: Format,
    pub options: &'a ReadOptions,
    /// Jobs per transaction (`import --batch-size`): a killed import keeps
    /// every batch it committed.
    pub batch_size: usize,
}

impl<'a> Input<'a> {
    /// `name` in `format`, read with `options`, [`BATCH`] jobs per transaction.
    pub fn new(name: &'a str, format: Format, options: &'a ReadOptions) -> Input<'a> {
        Input {
            name,
            format,
            options,
            batch_size: BATCH,
        }
    }
}

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
            // Printed to a terminal: no control characters from the record.
            let example: String = format!("{at}: {reason}")
                .chars()
                .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
                .collect();
            self.examples.push(example);
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
    #[error("{name}: {message}")]
    WrongFormat { name: String, message: String },
    /// Reading stopped part-way: what was read before is recorded.
    #[error("{name}: {message}")]
    Abandoned { name: String, message: String },
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

impl Batch {
    /// The jobs it names (lower case), and its malformed lines that name
    /// none (by their bytes, as rejections are kept): two batches that
    /// share one are posted one after the other.
    fn job_keys(&self) -> HashSet<String> {
        let unnamed = |source: &Source| format!("#{}", hex::encode(source.raw_sha256()));
        self.jobs
            .iter()
            .map(|j| j.input.key().to_lowercase())
            .chain(self.malformed.iter().map(|(source, _)| match &source.job {
                Some(key) => key.to_lowercase(),
                None => unnamed(source),
            }))
            .collect()
    }
}

/// A batch being posted by a recorder of its own.
struct Flight {
    keys: HashSet<String>,
    task: tokio::task::JoinHandle<(Recorder, Batch, Result<Vec<Outcome>, RecordError>)>,
}

/// Wait for a batch to be posted, count what it did, and give its
/// recorder back.
async fn land(
    flight: Flight,
    idle: &mut Vec<Recorder>,
    summary: &mut Summary,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), ImportError> {
    // A posting task is never cancelled: it ends, or it panicked.
    let (rec, batch, outcomes) = flight
        .task
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    idle.push(rec);
    summary.lines += batch.lines;
    for s in batch.skipped {
        *summary.skipped.entry(s).or_default() += 1;
    }
    for (source, reason) in &batch.malformed {
        summary.reject(RejectKind::Malformed, &source.reference, reason);
    }
    let outcomes = outcomes?;
    for (job, outcome) in batch.jobs.iter().zip(&outcomes) {
        summary.count(outcome, &job.source.reference);
    }
    progress(batch.bytes);
    Ok(())
}

/// Import one input (`name` is shown in messages: a path, or `stdin`).
/// `progress` is told the bytes read so far. An input that is plainly
/// another format than `format` is refused before anything is recorded.
pub async fn import<R: Read + Send + 'static>(
    recorder: &mut Recorder,
    input: R,
    how: &Input<'_>,
    summary: &mut Summary,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), ImportError> {
    let (name, format) = (how.name, how.format);
    let p = parser(format, how.options).map_err(ImportError::Options)?;
    // Lines of this file once kept as malformed, by `file:line`: read whole
    // (a line cut short) or readable now (a headerless dump imported again
    // with `--fields`) and skipped (a job that never started, or had not
    // ended), each resolves its rejection as skipped (a record to charge
    // resolves it as recorded, in `Recorder::record`). Almost always none.
    let mut watch: HashMap<String, Vec<CutLine>> = HashMap::new();
    if format.whole_lines() {
        let mut conn = recorder.pool().acquire().await.map_err(RecordError::Connection)?;
        for m in rejected::open_malformed_of(&mut conn, name)
            .await
            .map_err(RecordError::Db)?
        {
            watch.entry(m.source_ref).or_default().push(CutLine {
                id: m.id,
                raw: m.raw,
                job: m.job_key,
                cut_short: m.cut_short,
            });
        }
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Batch, ReadError>>(1);
    let file = name.to_owned();
    let batch_size = how.batch_size.max(1);
    let reader = std::thread::spawn(move || {
        let mut r = Reader {
            p,
            format,
            file,
            batch_size,
            tx,
            batch: Batch::default(),
            checked: false,
            malformed_run: 0,
            sent: false,
            watch,
            cut_skipped: Vec::new(),
        };
        let input = BufReader::with_capacity(1 << 16, input);
        let result = match format {
            Format::SacctJson => r.read_sacct_json(input),
            _ => r.read_lines(input),
        };
        match result {
            Ok(bytes) => {
                r.batch.bytes = bytes;
                let batch = std::mem::take(&mut r.batch);
                let _ = r.tx.blocking_send(Ok(batch));
            }
            Err(ReadError::Stopped) => {}
            Err(e) => {
                // Post what was read before the error, then report it.
                let batch = std::mem::take(&mut r.batch);
                let _ = r.tx.blocking_send(Ok(batch));
                let _ = r.tx.blocking_send(Err(e));
            }
        }
        r.cut_skipped
    });
    // Two batches are posted at once, each by its own recorder on its own
    // connection, so that one batch's pricing and the other's writes share
    // the two cores (the posting locks are shared). A batch that names a job
    // of the batch still in flight waits for it: the file's order decides
    // which record of a run comes first. Outcomes are counted in the file's
    // order. A batch is taken from the reader only once a recorder is idle,
    // so at most four are held: two posted, one read ahead, one being read.
    let mut idle: Vec<Recorder> = (0..IN_FLIGHT).map(|_| recorder.clone()).collect();
    let mut in_flight: VecDeque<Flight> = VecDeque::new();
    let mut result = Ok(());
    // A batch that was not posted outweighs the reader's error: the reader's
    // says that what was read before it is recorded.
    let mut read_error = None;
    'read: loop {
        if idle.is_empty() {
            let flight = in_flight.pop_front().expect("no recorder idle: a batch is in flight");
            if let Err(e) = land(flight, &mut idle, summary, progress).await {
                result = Err(e);
                break;
            }
        }
        let Some(batch) = rx.recv().await else { break };
        let batch = match batch {
            Ok(b) => b,
            Err(ReadError::Io(source)) => {
                read_error = Some(ImportError::Read {
                    name: name.to_owned(),
                    source,
                });
                break;
            }
            Err(ReadError::WrongFormat(message)) => {
                read_error = Some(ImportError::WrongFormat {
                    name: name.to_owned(),
                    message,
                });
                break;
            }
            Err(ReadError::Abandoned(message)) => {
                read_error = Some(ImportError::Abandoned {
                    name: name.to_owned(),
                    message,
                });
                break;
            }
            Err(ReadError::Stopped) => break,
        };
        let keys = batch.job_keys();
        while in_flight.iter().any(|f| !f.keys.is_disjoint(&keys)) {
            let flight = in_flight.pop_front().expect("an overlapping batch is in flight");
            if let Err(e) = land(flight, &mut idle, summary, progress).await {
                result = Err(e);
                break 'read;
            }
        }
        let mut rec = idle.pop().expect("a recorder is idle: one was landed before reading");
        in_flight.push_back(Flight {
            keys,
            task: tokio::spawn(async move {
                let outcomes = rec.record(&batch.jobs, &batch.malformed).await;
                (rec, batch, outcomes)
            }),
        });
    }
    // What is in flight lands (or fails) before the import returns.
    while let Some(flight) = in_flight.pop_front() {
        let landed = land(flight, &mut idle, summary, progress).await;
        if result.is_ok() {
            result = landed;
        }
    }
    if let Some(e) = read_error {
        match result {
            Ok(()) => result = Err(e),
            Err(_) => tracing::warn!("{e}"),
        }
    }
    if let Some(rec) = idle.pop() {
        *recorder = rec;
    }
    drop(rx);
    if result.is_ok() {
        // The reader has sent everything: it is done, or it died.
        let Ok(cut_skipped) = reader.join() else {
            return Err(ImportError::Read {
                name: name.to_owned(),
                source: std::io::Error::other("the reading thread failed"),
            });
        };
        if !cut_skipped.is_empty() {
            let mut conn = recorder.pool().acquire().await.map_err(RecordError::Connection)?;
            rejected::resolve_skipped(&mut conn, &cut_skipped, &recorder.author)
                .await
                .map_err(RecordError::Db)?;
        }
    }
    // On an error the reader may still be blocked reading stdin: leave it;
    // it stops at its next send.
    result
}

/// Why the reading thread stopped early.
enum ReadError {
    Io(std::io::Error),
    /// The input is plainly another format: nothing of it was sent.
    WrongFormat(String),
    /// Too many malformed records in a row: what was read before is sent.
    Abandoned(String),
    /// The importer stopped taking batches.
    Stopped,
}

/// The reading thread: records -> parser -> bounded batches.
struct Reader {
    p: Box<dyn crate::ingest::Parser + Send>,
    format: Format,
    file: String,
    batch_size: usize,
    tx: tokio::sync::mpsc::Sender<Result<Batch, ReadError>>,
    batch: Batch,
    /// Whether the first record was checked for being another format.
    checked: bool,
    /// Malformed records since the last good (or skipped) one.
    malformed_run: u64,
    /// Whether a batch was sent (then something may be recorded).
    sent: bool,
    /// The file's open malformed rejections (lines cut short, lines not
    /// readable then), by `file:line`.
    watch: HashMap<String, Vec<CutLine>>,
    /// Those whose line, read whole or readable now, was skipped.
    cut_skipped: Vec<i64>,
}

/// A line kept as malformed: its rejection, what was read of it, the job
/// it names, whether it was cut short.
struct CutLine {
    id: i64,
    raw: String,
    job: Option<String>,
    cut_short: bool,
}

/// How a line that is not read is kept: its options and the job it names.
struct Kept {
    options: KeptOptions,
    job: Option<String>,
}

impl Reader {
    /// One record (a line, or one job of a document): parsed into the batch,
    /// which is sent when full.
    fn record(&mut self, reference: String, line: RawLine, read_so_far: u64) -> Result<(), ReadError> {
        self.keep(reference, line, None, read_so_far)
    }

    /// [`Reader::record`]; an unreadable line is kept as `kept` says when
    /// given, else with the parser's options and the job it reads.
    fn keep(
        &mut self,
        reference: String,
        line: RawLine,
        kept: Option<Kept>,
        read_so_far: u64,
    ) -> Result<(), ReadError> {
        if let RawLine::Text(text) | RawLine::Lossy { text, .. } = &line
            && !self.checked
            && !text.trim().is_empty()
        {
            self.checked = true;
            crate::ingest::check_format(self.format, text).map_err(ReadError::WrongFormat)?;
        }
        self.batch.lines += 1;
        let source = |raw: String, raw_bytes: Option<Vec<u8>>, options: KeptOptions, job: Option<String>| Source {
            intake: None,
            format: self.format.source(),
            reference: reference.clone(),
            raw,
            raw_bytes,
            options,
            job,
        };
        let (text, exact) = match line {
            RawLine::Unreadable { reason, prefix, bytes } => {
                self.checked = true;
                let (options, job) = match kept {
                    Some(k) => (k.options, k.job),
                    None => (self.p.options(), self.p.job_key(&prefix)),
                };
                let s = source(prefix, bytes, options, job);
                self.batch.malformed.push((s, reason));
                self.malformed_in_a_row(&reference)?;
                return self.send_if_full(read_so_far);
            }
            RawLine::Text(text) => (text, None),
            RawLine::Lossy { text, bytes } => (text, Some(bytes)),
        };
        match crate::ingest::read_record(&mut *self.p, &text, exact.as_deref()) {
            None => {}
            Some(Item::Skip(s)) => {
                self.malformed_run = 0;
                self.batch.skipped.push(s);
                // The whole of a line once kept as cut short here: its text
                // begins with the cut one and it names the same job (a file
                // of the same name, a later dump, may hold another job at
                // that line: the text alone, cut a few bytes in, would not do).
                // A line kept as malformed whole: the same text, read now.
                if let Some(kept) = self.watch.get(&reference) {
                    let job = self.p.job_key(&text);
                    self.cut_skipped.extend(
                        kept.iter()
                            .filter(|c| match (&c.job, c.cut_short) {
                                (Some(cut_job), true) => {
                                    job.as_deref().is_some_and(|j| j.eq_ignore_ascii_case(cut_job))
                                        && text.starts_with(c.raw.trim_end_matches('\u{FFFD}'))
                                }
                                (None, true) => false,
                                (_, false) => text == c.raw,
                            })
                            .map(|c| c.id),
                    );
                }
            }
            Some(Item::Bad(reason)) => {
                let job = self.p.job_key(&text);
                let s = source(text, exact, self.p.options(), job);
                self.batch.malformed.push((s, reason));
                self.malformed_in_a_row(&reference)?;
            }
            Some(Item::Job(job)) => {
                self.malformed_run = 0;
                let s = source(text, exact, self.p.options(), None);
                self.batch.jobs.push(Submission { input: *job, source: s });
            }
        }
        self.send_if_full(read_so_far)
    }

    /// Count a malformed record; stop reading at [`MALFORMED_RUN`] in a row.
    fn malformed_in_a_row(&mut self, reference: &str) -> Result<(), ReadError> {
        self.malformed_run += 1;
        if self.malformed_run >= crate::ingest::MALFORMED_RUN {
            return Err(ReadError::Abandoned(format!(
                "stopped at {reference}: {} malformed records in a row, so this is not {} (or it is damaged \
                 from here on). The jobs read before are recorded and the malformed records kept; the rest was \
                 not read",
                self.malformed_run,
                self.format.describe()
            )));
        }
        Ok(())
    }

    /// Refuse an input that is not text (a compressed file, an archive)
    /// before reading any of it.
    fn refuse_binary<R: Read>(&self, input: &mut BufReader<R>) -> Result<(), ReadError> {
        use std::io::BufRead;
        let head = input.fill_buf().map_err(ReadError::Io)?;
        match crate::ingest::binary(head) {
            Some(what) => {
                let hint = match what.split('-').next() {
                    Some("gzip") => format!(
                        "decompress it first: `zcat FILE | hpc-ledger import --format {} -`",
                        self.format.as_str()
                    ),
                    Some("bzip2") => format!(
                        "decompress it first: `bzcat FILE | hpc-ledger import --format {} -`",
                        self.format.as_str()
                    ),
                    Some("xz") => format!(
                        "decompress it first: `xzcat FILE | hpc-ledger import --format {} -`",
                        self.format.as_str()
                    ),
                    Some("zstd") => format!(
                        "decompress it first: `zstdcat FILE | hpc-ledger import --format {} -`",
                        self.format.as_str()
                    ),
                    _ if what.contains("archive") => "extract its files and import them".to_owned(),
                    _ => "is it the right file?".to_owned(),
                };
                Err(ReadError::WrongFormat(format!(
                    "this is {what}, not {}: {hint}; nothing was recorded",
                    self.format.describe()
                )))
            }
            None => Ok(()),
        }
    }

    /// Send the batch when it is full.
    fn send_if_full(&mut self, read_so_far: u64) -> Result<(), ReadError> {
        if self.batch.jobs.len() + self.batch.malformed.len() >= self.batch_size {
            self.batch.bytes = read_so_far;
            let batch = std::mem::take(&mut self.batch);
            self.sent = true;
            self.tx.blocking_send(Ok(batch)).map_err(|_| ReadError::Stopped)?;
        }
        Ok(())
    }

    /// Line formats: numbered, bounded lines. Returns the bytes read.
    fn read_lines<R: Read>(&mut self, mut input: BufReader<R>) -> Result<u64, ReadError> {
        self.refuse_binary(&mut input)?;
        let mut lines = LineReader::new(input);
        loop {
            let (number, line) = match lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(lines.bytes_read()),
                Err(e) => {
                    self.batch.bytes = lines.bytes_read();
                    return Err(ReadError::Io(e));
                }
            };
            let reference = format!("{}:{number}", self.file);
            let cut = lines.unterminated() && self.format.whole_lines();
            let Some(line) = self.cut_by_slurm(&reference, line, lines.bytes_read())? else {
                continue;
            };
            if cut {
                self.record_cut_short(reference, line, lines.bytes_read())?;
            } else {
                self.record(reference, line, lines.bytes_read())?;
            }
        }
    }

    /// A jobcomp/filetxt line that holds records Slurm cut at 1,023 bytes
    /// before the next job's ([`crate::ingest::filetxt::split_cut`]): each
    /// record kept as malformed, under the line's own reference, with
    /// options that say so (`slurm_cut`: a retry does not charge it either),
    /// and `None`. Not even the last is charged: a job name or directory
    /// padded to put `JobId=… UserId=` at that byte makes the same line, the
    /// "next job" then the user's own text with the real job's tail. Any
    /// other line is returned as it is.
    fn cut_by_slurm(&mut self, reference: &str, line: RawLine, read_so_far: u64) -> Result<Option<RawLine>, ReadError> {
        use crate::ingest::filetxt;
        let bytes = match &line {
            _ if self.format != Format::JobcompFiletxt => return Ok(Some(line)),
            RawLine::Text(text) => text.as_bytes(),
            RawLine::Lossy { bytes, .. } => bytes.as_slice(),
            RawLine::Unreadable { .. } => return Ok(Some(line)),
        };
        if filetxt::split_cut(bytes).len() == 1 {
            return Ok(Some(line));
        }
        let parts: Vec<(String, Option<Vec<u8>>)> = filetxt::split_cut(bytes)
            .into_iter()
            .map(|part| crate::ingest::decode(part.to_vec()))
            .collect();
        let last = parts.len() - 1;
        for (at, (text, bytes)) in parts.into_iter().enumerate() {
            let kept = Kept {
                options: KeptOptions::new(ReadOptions {
                    slurm_cut: at < last,
                    after_slurm_cut: at == last,
                    ..self.p.options().read_options().clone()
                }),
                job: if at < last {
                    self.p.cut_job_key(&text)
                } else {
                    self.p.job_key(&text)
                },
            };
            let reason = if at < last {
                filetxt::CUT_BY_SLURM
            } else {
                filetxt::AFTER_A_CUT
            };
            let line = RawLine::Unreadable {
                reason: reason.into(),
                prefix: text,
                bytes,
            };
            self.keep(reference.to_owned(), line, Some(kept), read_so_far)?;
        }
        Ok(None)
    }

    /// The last line of a `sacct` or PBS input that ends without a newline:
    /// kept as malformed ([`crate::ingest::CUT_SHORT`]), with options that
    /// say so, so that a retry does not charge it either.
    fn record_cut_short(&mut self, reference: String, line: RawLine, read_so_far: u64) -> Result<(), ReadError> {
        let (text, bytes) = match line {
            RawLine::Text(text) => (text, None),
            RawLine::Lossy { text, bytes } => (text, Some(bytes)),
            unreadable @ RawLine::Unreadable { .. } => return self.record(reference, unreadable, read_so_far),
        };
        if !self.checked && !text.trim().is_empty() {
            self.checked = true;
            crate::ingest::check_format(self.format, &text).map_err(ReadError::WrongFormat)?;
        }
        let reason = match crate::ingest::read_cut_short(&mut *self.p, &text, bytes.as_deref()) {
            None => return Ok(()),
            Some(Item::Skip(s)) => {
                self.batch.lines += 1;
                self.malformed_run = 0;
                self.batch.skipped.push(s);
                return self.send_if_full(read_so_far);
            }
            Some(Item::Bad(reason)) => reason,
            Some(Item::Job(_)) => unreachable!("read_cut_short never reads a job"),
        };
        let kept = Kept {
            options: KeptOptions::new(ReadOptions {
                cut_short: true,
                ..self.p.options().read_options().clone()
            }),
            job: self.p.cut_job_key(&text),
        };
        let line = RawLine::Unreadable {
            reason,
            prefix: text,
            bytes,
        };
        self.keep(reference, line, Some(kept), read_so_far)
    }

    /// `sacct --json`: one document, its jobs streamed one at a time.
    fn read_sacct_json<R: Read>(&mut self, mut input: BufReader<R>) -> Result<u64, ReadError> {
        use std::io::BufRead;
        self.refuse_binary(&mut input)?;
        // A document that is plainly something else is named from its first line.
        let head = input.fill_buf().map_err(ReadError::Io)?;
        let first_line = String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
        if !first_line.trim_start().starts_with('{') && !first_line.trim().is_empty() {
            crate::ingest::check_format(Format::SacctJson, &first_line).map_err(ReadError::WrongFormat)?;
        }
        self.checked = true;
        let counted = Counted {
            inner: input,
            bytes: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
        };
        let bytes = counted.bytes.clone();
        let mut failed = None;
        let streamed = sacct_json::stream(counted, &mut waiting_file, |index, job| {
            let at = bytes.load(std::sync::atomic::Ordering::Relaxed);
            match self.record(format!("{}:jobs[{index}]", self.file), RawLine::Text(job), at) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        let total = bytes.load(std::sync::atomic::Ordering::Relaxed);
        match streamed {
            Ok(_) => Ok(total),
            Err(sacct_json::StreamError::Stopped) => Err(failed.unwrap_or(ReadError::Stopped)),
            Err(sacct_json::StreamError::Io(e)) => Err(ReadError::Io(e)),
            // Nothing sent yet: the document is not one this reader reads.
            Err(sacct_json::StreamError::Document(m)) if self.batch.lines == 0 && !self.sent => {
                Err(ReadError::WrongFormat(m))
            }
            Err(sacct_json::StreamError::Document(m)) => {
                Err(ReadError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, m)))
            }
        }
    }
}

/// Where the jobs of a `sacct --json` document that lists them before its
/// `meta` or its `errors` (Slurm 23.02 and later) wait until `meta` names
/// the layout and `errors` none: a
/// file in the temporary directory (`TMPDIR`), readable by its owner only
/// and nameless (or unlinked at once), so it is gone when the import ends,
/// however it ends, and memory stays flat whatever the document's size
/// (the directory needs room for the document's jobs; on a tmpfs that room
/// is memory).
fn waiting_file() -> std::io::Result<Box<dyn sacct_json::Waiting>> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    // A file with no name at all where the kernel and file system allow it
    // (Linux's O_TMPFILE): nothing can be left behind, even by a crash.
    if let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(&dir)
    {
        return Ok(Box::new(file));
    }
    let path = dir.join(format!(
        "hpc-ledger-sacct-json-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|file| std::fs::remove_file(&path).map(|()| file))
        .map_err(|e| std::io::Error::new(e.kind(), format!("a temporary file in {}: {e}", dir.display())))?;
    Ok(Box::new(file))
}

/// A reader that counts the bytes read through it (for progress).
struct Counted<R> {
    inner: R,
    bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// Re-process the rejected records that are still open (all, or those of
/// `ids`, which must all be open): read each again with the options it was
/// read with, and record it with today's rules (and `--supersede`, if the
/// recorder has it).
pub async fn retry_rejected(
    pool: &PgPool,
    recorder: &mut Recorder,
    summary: &mut Summary,
    ids: &[i64],
) -> Result<(), ImportError> {
    if !ids.is_empty() {
        let mut conn = pool.acquire().await.map_err(RecordError::Connection)?;
        let closed = rejected::not_open(&mut conn, ids).await.map_err(RecordError::Db)?;
        if !closed.is_empty() {
            let list: Vec<String> = closed.iter().map(i64::to_string).collect();
            return Err(ImportError::Options(format!(
                "rejection{} {} {} not open (unknown, or already resolved or dismissed): nothing was retried \
                 (`hpc-ledger rejected --all` lists every one)",
                if closed.len() == 1 { "" } else { "s" },
                list.join(", "),
                if closed.len() == 1 { "is" } else { "are" }
            )));
        }
    }
    let mut after = 0;
    loop {
        let mut conn = pool.acquire().await.map_err(RecordError::Connection)?;
        let page = rejected::list(&mut conn, after, BATCH as i64, false, ids)
            .await
            .map_err(RecordError::Db)?;
        drop(conn);
        let Some(last) = page.last() else { break };
        after = last.id;
        let mut batch = Batch::default();
        let mut skipped = Vec::new();
        for r in page {
            summary.lines += 1;
            let format = r.source_format;
            // A rejection was never charged: it is read as records are read
            // now, also one kept before 2026-12-06 (a jobcomp document's
            // times in UTC, a PBS Pro job on the hosts it ran on;
            // docs/rules.md).
            let options = serde_json::from_value::<ReadOptions>(r.read_options.clone())
                .unwrap_or_default()
                .now(format);
            let source = Source {
                intake: None,
                format,
                reference: r.source_ref.clone(),
                raw: r.raw.clone(),
                raw_bytes: r.raw_bytes.clone(),
                options: KeptOptions::new(options.clone()),
                job: r.job_key.clone(),
            };
            let item = crate::ingest::reread(format, &options, &r.raw, r.raw_bytes.as_deref())
                .map_err(ImportError::Options)?;
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
            rejected::resolve_skipped(&mut conn, &skipped, &recorder.author)
                .await
                .map_err(RecordError::Db)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::kinds::SourceFormat;

    fn line(raw: &str, job: Option<&str>) -> (Source, String) {
        let source = Source {
            format: SourceFormat::Slurm,
            reference: "f:1".into(),
            raw: raw.into(),
            raw_bytes: None,
            options: KeptOptions::default(),
            job: job.map(Into::into),
            intake: None,
        };
        (source, "unreadable".into())
    }

    /// Two batches wait for each other when they name the same job, in
    /// any case, or hold the same unreadable bytes (one rejection row).
    #[test]
    fn batches_that_share_a_job_or_a_rejection_share_a_key() {
        let batch = |lines: Vec<(Source, String)>| Batch {
            malformed: lines,
            ..Batch::default()
        };
        let a = batch(vec![line("junk", None), line("x|1", Some("Owens/12"))]);
        let b = batch(vec![line("junk", None)]);
        let c = batch(vec![line("other junk", None)]);
        let d = batch(vec![line("y|1", Some("owens/12"))]);
        let (a, b, c, d) = (a.job_keys(), b.job_keys(), c.job_keys(), d.job_keys());
        assert!(!a.is_disjoint(&b), "the same bytes: {a:?} {b:?}");
        assert!(b.is_disjoint(&c), "other bytes: {b:?} {c:?}");
        assert!(!a.is_disjoint(&d), "the same job in another case: {a:?} {d:?}");
        assert!(c.is_disjoint(&d));
        assert_eq!(a.len(), 2);
    }
}
