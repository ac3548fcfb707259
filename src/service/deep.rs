//! `hpc-ledger audit --deep`: every kept raw record read again with the
//! parsers it was read with, and compared with what the ledger stored from
//! it (issue 13, item 7).
//!
//! The SQL audit recomputes every charge from the stored fields of its
//! record, so an edit of both a record's cores and its charge, or a job
//! moved to another project, passes it. The raw record is the scheduler's
//! own word: re-read, it must give the same cluster, job, times, project,
//! queue, nodes, cores, memory and GPUs as the stored record, and the same
//! fingerprints. Also reported: a record that no longer reads as a job, a
//! charging record without its charge, and a run (job identity) without any
//! record. Records kept before migration 0020 have no read options: they
//! are read with their own cluster as the default, and one that cannot be
//! read so (headerless `sacct` lines need their field list) is counted as
//! not verifiable rather than reported as a difference.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::DbError;
use crate::db::deep::{self, KeptRecord};
use crate::domain::posting::{JobInput, charged_shape, fingerprints, held_shape, instants, task_of};
use crate::ingest::{Item, ReadOptions, Rereader};

/// Records read per page.
pub const PAGE: i64 = 5_000;

/// How many differences a report keeps in full ([`DeepReport::differences`]);
/// every one is counted, by field, however many there are. A difference
/// kept takes about 260 bytes: a ledger whose every record differs in a
/// field (a time zone changed under it, a bench's shifted copies) would
/// otherwise hold one per record and field in memory, 3.7 GB for the 14.4M
/// of a 4.4M-record `bench --scale` ledger.
pub const DEEP_KEPT: usize = 100_000;

/// One way a stored record and its raw record disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The job record (none for a run without records).
    pub record_id: Option<i64>,
    /// `cluster/job[_index]`.
    pub job: String,
    pub field: String,
    /// What the ledger stores.
    pub stored: String,
    /// What the raw record says, read again.
    pub reread: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DeepReport {
    /// Job records read again.
    pub records: u64,
    /// Job records whose raw text is in an archive file, not in the ledger
    /// (migration 0047; `verify --archive` checks it there).
    pub raw_archived: u64,
    /// Of those, the ones read again from the files (`audit --deep
    /// --archive DIR`), and compared like the others.
    pub read_from_archive: u64,
    /// Archive files were read (`--archive`), even if they held none.
    pub archive_read: bool,
    /// The first differences found, in record order, at most the number
    /// asked for ([`DEEP_KEPT`] by `audit --deep`).
    pub differences: Vec<Difference>,
    /// Every difference found, kept or not.
    pub differences_found: u64,
    /// Every difference found, by field.
    pub differences_by_field: std::collections::BTreeMap<String, u64>,
    /// Not verifiable, and not a finding: records kept before read options
    /// were (migration 0020) that cannot be read without them, and runs
    /// left then for jobs whose only records were refused.
    pub unverifiable: Vec<Difference>,
    /// Records charged to another project than the (unknown) account they
    /// name, by a recorded decision (`rejected reassign`): read as charged,
    /// and listed here, not findings.
    pub reassigned: Vec<Reassigned>,
}

/// A reassignment `audit --deep` read records through.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Reassigned {
    pub job: Option<String>,
    pub from_account: Option<String>,
    pub project: String,
    pub by: String,
    pub reason: String,
}

impl DeepReport {
    pub fn clean(&self) -> bool {
        self.differences_found == 0
    }

    /// Count a difference, and keep it if fewer than `keep` are kept.
    fn found(&mut self, d: Difference, keep: usize) {
        self.differences_found += 1;
        *self.differences_by_field.entry(d.field.clone()).or_insert(0) += 1;
        if self.differences.len() < keep {
            self.differences.push(d);
        }
    }
}

/// Read every job record again and compare, keeping the first
/// [`DEEP_KEPT`] differences.
pub async fn deep_audit(pool: &PgPool) -> Result<DeepReport, DbError> {
    deep_audit_by(pool, DEEP_KEPT, PAGE).await
}

/// [`deep_audit`], keeping the first `keep` differences in full and reading
/// `page` records at a time.
pub async fn deep_audit_by(pool: &PgPool, keep: usize, page: i64) -> Result<DeepReport, DbError> {
    let mut report = DeepReport::default();
    let mut conn = pool.acquire().await?;
    // A page of records is costed above `jit_above_cost` (its LIMIT over a
    // join of millions of rows with four lookups a row), so PostgreSQL
    // compiled every page's query: 60–90 ms of a page of 5,000 that takes
    // about 115 ms without (the bench's ledger of 1.18M records). Pages are
    // separate statements, not one transaction (a replica cancels long
    // ones on conflict with recovery), so JIT is turned off for the
    // session, and the connection is closed afterwards rather than given
    // back to the pool with the setting.
    conn.close_on_drop();
    crate::db::jit_off_for_session(&mut conn).await?;
    let (listed, reassigned) = reassignments(&mut conn).await?;
    report.reassigned = listed;
    // The next page is read while this one is compared: the server's
    // reading and hpc-ledger's parsing took about as long each, one after
    // the other.
    let (pages, mut next) = tokio::sync::mpsc::channel::<Vec<KeptRecord>>(1);
    let reader = tokio::spawn(async move {
        let mut after = 0;
        loop {
            let rows = deep::records(&mut conn, after, page).await?;
            let Some(last) = rows.last() else { break };
            after = last.record_id;
            if pages.send(rows).await.is_err() {
                break;
            }
        }
        Ok::<_, sqlx::Error>(conn)
    });
    let mut rereader = Rereader::default();
    while let Some(rows) = next.recv().await {
        for r in &rows {
            if r.raw_archived() {
                report.raw_archived += 1;
                continue;
            }
            report.records += 1;
            match compare(&mut rereader, r, &reassigned) {
                Ok(found) => {
                    for d in found {
                        report.found(d, keep);
                    }
                }
                Err(u) => report.unverifiable.push(u),
            }
        }
    }
    // A read that failed ended the pages early: its error is the answer.
    let mut conn = match reader.await {
        Ok(read) => read?,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    for run in deep::runs_without_records(&mut conn).await? {
        let d = Difference {
            record_id: None,
            job: key(&run.cluster, &run.scheduler_job_id, run.array_index),
            field: "record".into(),
            stored: format!("a run started {} without any record", run.started_at),
            reread: if run.rejected {
                "none: its only records were refused (kept as rejections); versions before migration 0020 left such runs"
                    .into()
            } else {
                "none: its records were deleted".into()
            },
        };
        if run.rejected {
            report.unverifiable.push(d);
        } else {
            report.found(d, keep);
        }
    }
    Ok(report)
}

/// Records charged to another project than the unknown account they name,
/// by a recorded decision (`rejected reassign`): as the report lists them,
/// and as records are read through them (as the recorder reads them).
async fn reassignments(conn: &mut sqlx::PgConnection) -> Result<(Vec<Reassigned>, Reassignments), DbError> {
    let kept = crate::db::rejected::reassignments(&mut *conn).await?;
    let listed = kept
        .iter()
        .map(|a| Reassigned {
            job: a.job_key.clone(),
            from_account: a.from_account.clone(),
            project: a.project.clone(),
            by: a.author.clone(),
            reason: a.reason.clone(),
        })
        .collect();
    let by_record = kept
        .into_iter()
        .map(|a| ((a.source_format, a.raw_sha256), (a.from_account, a.project)))
        .collect();
    Ok((listed, by_record))
}

/// `audit --deep --archive DIR`: the records whose raw text is in the
/// archive files at `dir` (migration 0047), read again from there and
/// compared like every other (after [`deep_audit`] has counted them). A
/// line must hold the text whose digest the ledger kept for that record;
/// one that does not, or that names a record the ledger did not archive,
/// is a difference. Records whose file is not in `dir` (destroyed at the
/// end of their retention) are not read, and not a finding.
///
/// A file that cannot be read as an archive (from its header, or from a
/// line on) is a difference too, naming the file, the line and why, and
/// the files after it are read: what the live pass and the other files
/// found is still reported. Only the directory itself, or the database,
/// failing stops it.
pub async fn reread_archived(
    pool: &PgPool,
    dir: &std::path::Path,
    report: &mut DeepReport,
    keep: usize,
) -> Result<(), crate::service::archive::ArchiveError> {
    use crate::service::archive::{ArchiveError, files};
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    conn.close_on_drop();
    crate::db::jit_off_for_session(&mut conn).await?;
    let (_, reassigned) = reassignments(&mut conn).await?;
    // What the ledger recorded of each archived month's file (the auditor's
    // view of it): a line's `raw` beside its `raw_bytes` is bound by that.
    let recorded = crate::db::archive::month_records(&mut conn)
        .await
        .map_err(DbError::from)?
        .into_iter()
        .filter_map(|m| Some(((m.period, false), (m.archived_to?, m.file_sha256?))))
        .chain(
            crate::db::archive::record_files(&mut conn)
                .await
                .map_err(DbError::from)?
                .into_iter()
                .map(|f| ((f.period, true), (f.file_name, f.file_sha256))),
        )
        .collect();
    let mut file = ArchivedFile {
        rereader: Rereader::default(),
        reassigned,
        recorded,
        keep,
    };
    report.archive_read = true;
    // Each month's records are in its one file (its own, or its records'
    // file), in id order, once each.
    let mut months: Vec<((crate::domain::period::Month, bool), std::path::PathBuf)> = Vec::new();
    for path in files(dir)? {
        match file.reread(&mut conn, &path, &mut months, report).await {
            Ok(()) => {}
            Err(ArchiveError::File { file: place, reason }) => report.found(
                Difference {
                    record_id: None,
                    job: String::new(),
                    field: "archive file".into(),
                    stored: "a file of hpc-ledger archive lines".into(),
                    reread: format!("{place}: {reason} (the rest of {} not read)", path.display()),
                },
                keep,
            ),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What reading archive files again needs across files.
struct ArchivedFile {
    rereader: Rereader,
    reassigned: Reassignments,
    /// Each archived month's file name and SHA-256, as recorded, by month
    /// and whether it is the month's records' file (migration 0048).
    recorded: std::collections::HashMap<(chrono::NaiveDate, bool), (String, String)>,
    keep: usize,
}

impl ArchivedFile {
    /// One archive file's record lines, read again and compared; a month
    /// whose file was read already (in `months`) is named, not read.
    async fn reread(
        &mut self,
        conn: &mut sqlx::PgConnection,
        path: &std::path::Path,
        months: &mut Vec<((crate::domain::period::Month, bool), std::path::PathBuf)>,
        report: &mut DeepReport,
    ) -> Result<(), crate::service::archive::ArchiveError> {
        let keep = self.keep;
        let mut lines = crate::service::archive::RecordLines::open(path)?;
        let month = lines.month();
        let kind = (month, lines.is_records_file());
        if let Some((_, first)) = months.iter().find(|(m, _)| *m == kind) {
            report.found(
                Difference {
                    record_id: None,
                    job: String::new(),
                    field: "archive file".into(),
                    stored: format!("one file of {month} ({})", first.display()),
                    reread: format!("a second: {} (not read)", path.display()),
                },
                keep,
            );
            return Ok(());
        }
        months.push((kind, path.to_owned()));
        let mut last = 0;
        // A line that cannot be read ends the file, after the lines before
        // it are compared.
        let mut broken = None;
        while broken.is_none() {
            let mut batch = Vec::new();
            for line in lines.by_ref().take(PAGE as usize) {
                match line {
                    Ok(line) => batch.push(line),
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            let ids: Vec<i64> = batch.iter().map(|(_, r)| r.job_record).collect();
            let mut kept: std::collections::HashMap<i64, KeptRecord> = deep::records_by_id(conn, &ids)
                .await
                .map_err(DbError::from)?
                .into_iter()
                .map(|r| (r.record_id, r))
                .collect();
            for (line_no, line) in batch {
                let place = lines.place(line_no);
                if line.job_record <= last {
                    report.found(
                        Difference {
                            record_id: Some(line.job_record),
                            job: "?".into(),
                            field: "record".into(),
                            stored: "the file's records in id order, once each".into(),
                            reread: format!("{place}: job record {} after {last}", line.job_record),
                        },
                        keep,
                    );
                    continue;
                }
                last = line.job_record;
                let Some(mut r) = kept.remove(&line.job_record) else {
                    report.found(
                        Difference {
                            record_id: Some(line.job_record),
                            job: "?".into(),
                            field: "record".into(),
                            stored: "none: the ledger holds no such job record".into(),
                            reread: format!("{place}: its raw text"),
                        },
                        keep,
                    );
                    continue;
                };
                let job = key(&r.cluster, &r.scheduler_job_id, r.array_index);
                let held = match (line.digest(), &r.archived_sha256) {
                    (Ok(d), Some(archived)) if hex::encode(d) == *archived => None,
                    (Ok(d), Some(archived)) => Some((archived.clone(), format!("{place}: {}", hex::encode(d)))),
                    (Err(e), Some(archived)) => Some((archived.clone(), format!("{place}: {e}"))),
                    (_, None) => Some((
                        "its raw text in the ledger, not archived".into(),
                        format!("{place}: its raw text"),
                    )),
                };
                if let Some((stored, reread)) = held {
                    report.found(
                        Difference {
                            record_id: Some(r.record_id),
                            job,
                            field: "raw_sha256".into(),
                            stored,
                            reread,
                        },
                        keep,
                    );
                    continue;
                }
                r.raw = line.raw;
                r.raw_bytes = match line.raw_bytes.as_deref().map(hex::decode) {
                    Some(Ok(b)) => Some(b),
                    // (A line whose bytes are not hex has no digest: above.)
                    Some(Err(_)) | None => None,
                };
                report.read_from_archive += 1;
                match compare(&mut self.rereader, &r, &self.reassigned) {
                    Ok(found) => {
                        for d in found {
                            report.found(d, keep);
                        }
                    }
                    Err(u) => report.unverifiable.push(u),
                }
            }
        }
        if let Some(e) = broken {
            return Err(e);
        }
        // Read to its end: the whole file against the digest recorded when
        // its month was archived (it covers what the lines' own digests do
        // not: a line's `raw` beside its `raw_bytes`, the entries).
        let read = lines.file_sha256().expect("read to its end");
        let stored = match (self.recorded.get(&(month.first_day(), kind.1)), kind.1) {
            (Some((_, digest)), _) if *digest == read => return Ok(()),
            (Some((name, digest)), false) => format!("{month} archived to {name} with SHA-256 {digest}"),
            (Some((name, digest)), true) => format!("{month}'s records archived to {name} with SHA-256 {digest}"),
            (None, false) => format!("{month} not recorded as archived"),
            (None, true) => format!("no records' file of {month} recorded"),
        };
        report.found(
            Difference {
                record_id: None,
                job: String::new(),
                field: "archive file".into(),
                stored,
                reread: format!("{}: SHA-256 {read}", path.display()),
            },
            keep,
        );
        Ok(())
    }
}

fn key(cluster: &str, job_id: &str, index: Option<i32>) -> String {
    match index {
        Some(i) => format!("{cluster}/{job_id}_{i}"),
        None => format!("{cluster}/{job_id}"),
    }
}

/// Reassignments by (source format, sha256 of the record's bytes in hex):
/// the account the record names, the project it is charged to.
pub type Reassignments = std::collections::HashMap<(String, String), (Option<String>, String)>;

/// Compare one record with its raw record read again (with `rereader`'s
/// parser for its options): the differences, or why a record kept before
/// read options were kept cannot be verified.
pub fn compare(
    rereader: &mut Rereader,
    r: &KeptRecord,
    reassigned: &Reassignments,
) -> Result<Vec<Difference>, Difference> {
    let job = key(&r.cluster, &r.scheduler_job_id, r.array_index);
    let mut out = Vec::new();
    let mut differ = |field: &str, stored: String, reread: String| {
        out.push(Difference {
            record_id: Some(r.record_id),
            job: job.clone(),
            field: field.to_owned(),
            stored,
            reread,
        });
    };
    let fresh;
    let (options, read) = match &r.read_options {
        Some(text) => match rereader.reread(r.source_format, text, &r.raw, r.raw_bytes.as_deref()) {
            Ok(read) => read,
            Err(e) => {
                differ("read_options", text.clone(), format!("not read options: {e}"));
                return Ok(out);
            }
        },
        None => {
            if r.options_kept {
                differ(
                    "read_options",
                    "none".into(),
                    "kept with every record since migration 0020".into(),
                );
            }
            fresh = ReadOptions {
                cluster: Some(r.cluster.clone()),
                ..ReadOptions::default()
            };
            let read = crate::ingest::reread(r.source_format, &fresh, &r.raw, r.raw_bytes.as_deref());
            (&fresh, read)
        }
    };
    let not_a_job = match read {
        Ok(Item::Job(mut input)) => {
            if !reassigned.is_empty() {
                use sha2::Digest;
                let bytes = r.raw_bytes.as_deref().unwrap_or(r.raw.as_bytes());
                let hash = hex::encode(sha2::Sha256::digest(bytes));
                if let Some((from, to)) = reassigned.get(&(r.source_format.as_str().to_owned(), hash)) {
                    let named = input.project.as_deref().or(options.default_project.as_deref());
                    if named.map(str::to_lowercase) == from.as_deref().map(str::to_lowercase) {
                        input.project = Some(to.clone());
                    }
                }
            }
            compare_input(r, &input, options, &mut differ);
            None
        }
        Ok(Item::Skip(s)) => Some(format!("not a finished job ({s:?})")),
        Ok(Item::Bad(reason)) | Err(reason) => Some(format!("unreadable: {reason}")),
    };
    if let Some(reason) = not_a_job {
        if r.read_options.is_none() && !r.options_kept {
            return Err(Difference {
                record_id: Some(r.record_id),
                job,
                field: "raw".into(),
                stored: format!("{} record {}", r.source_format, r.source_ref),
                reread: format!("{reason} (kept before read options were, migration 0020)"),
            });
        }
        differ("raw", "a finished job".into(), reason);
    }
    if r.kind.charges() && r.job_entries == 0 && r.archived_in.is_none() {
        differ(
            "charge",
            format!("a {} record (revision {}) with no job charge", r.kind, r.revision),
            "a charge posted with it".into(),
        );
    }
    if r.started_at != r.run_started_at || !r.run_cluster_holds {
        differ(
            "run",
            format!("record of a run started {}", r.run_started_at),
            format!("started {} on {}", r.started_at, r.cluster),
        );
    }
    Ok(out)
}

fn compare_input(
    r: &KeptRecord,
    input: &JobInput,
    options: &ReadOptions,
    differ: &mut dyn FnMut(&str, String, String),
) {
    let text = |o: Option<&str>| o.map_or_else(|| "(none)".to_owned(), str::to_owned);
    let cluster = input.cluster.as_deref().or(options.cluster.as_deref());
    if !cluster.is_some_and(|c| c.eq_ignore_ascii_case(&r.cluster)) {
        differ("cluster", r.cluster.clone(), text(cluster));
    }
    // An array task named in its job id (`300_4`) is recorded as the task
    // (job 300, index 4), or, before 2026-12-07, as job `300_4`; a record
    // of its task either way is its run's (docs/recording.md).
    let recorded_index = r.array_index.and_then(|i| u32::try_from(i).ok());
    let same_task = task_of(&input.job_id, input.array_index) == task_of(&r.scheduler_job_id, recorded_index)
        && (r.array_index.is_none() || recorded_index.is_some());
    if !same_task && input.job_id != r.scheduler_job_id {
        differ("job id", r.scheduler_job_id.clone(), input.job_id.clone());
    }
    let index = input.array_index.map(i64::from);
    if !same_task && index != r.array_index.map(i64::from) {
        let show = |i: Option<i64>| i.map_or_else(|| "(none)".to_owned(), |i| i.to_string());
        differ("array index", show(r.array_index.map(i64::from)), show(index));
    }
    let project = input.project.as_deref().or(options.default_project.as_deref());
    if !project.is_some_and(|p| p.eq_ignore_ascii_case(&r.project)) {
        differ("project", r.project.clone(), text(project));
    }
    if input.queue != r.queue {
        differ("queue", text(r.queue.as_deref()), text(input.queue.as_deref()));
    }
    let Ok(tz) = r.time_zone.parse::<Tz>() else {
        differ("time zone", r.time_zone.clone(), "a time zone".into());
        return;
    };
    match instants(input, tz) {
        Ok((start, end, submit)) => {
            let at = |t: DateTime<Utc>| t.to_rfc3339();
            if start != r.started_at {
                differ("start", at(r.started_at), at(start));
            }
            if end != r.ended_at {
                differ("end", at(r.ended_at), at(end));
            }
            // The run keeps the submit time of its first record.
            if r.revision == 1 && submit != r.submitted_at {
                let show = |t: Option<DateTime<Utc>>| t.map_or_else(|| "(none)".to_owned(), at);
                differ("submit", show(r.submitted_at), show(submit));
            }
            let suspended = match input.suspension.seconds(start, end) {
                Ok(s) => s,
                Err(e) => {
                    differ("suspended", format!("{} s", r.suspended_seconds), e);
                    u32::try_from(r.suspended_seconds).unwrap_or_default()
                }
            };
            if i64::from(suspended) != i64::from(r.suspended_seconds) {
                differ(
                    "suspended",
                    format!("{} s", r.suspended_seconds),
                    format!("{suspended} s"),
                );
            }
            let (charge, content) = fingerprints(input, project.unwrap_or_default(), end, suspended);
            if charge[..] != r.charge_fingerprint[..] {
                differ(
                    "charge fingerprint",
                    hex::encode(&r.charge_fingerprint),
                    hex::encode(charge),
                );
            } else if content[..] != r.content_fingerprint[..] {
                differ(
                    "content fingerprint",
                    hex::encode(&r.content_fingerprint),
                    hex::encode(content),
                );
            }
        }
        Err(e) => differ("times", format!("{} – {}", r.started_at, r.ended_at), e.reason),
    }
    // Sizes: where the record gives only cores, or held whole nodes, the
    // stored value comes from the record's rate card.
    let needs_card = input.nodes.is_none() || input.exclusive;
    let Some(cpn) = r.cores_per_node.and_then(|c| u32::try_from(c).ok()) else {
        if needs_card {
            differ(
                "nodes and cores",
                format!("{} nodes, {} cores", r.nodes, r.cores),
                "not comparable: no rate card priced this run".into(),
            );
        }
        compare_sizes(r, &held_shape(input, 1), needs_card, differ);
        return;
    };
    let shape = charged_shape(held_shape(input, cpn), input, cpn);
    compare_sizes(r, &shape, false, differ);
}

fn compare_sizes(
    r: &KeptRecord,
    shape: &crate::domain::pricing::JobShape,
    skip_nodes_and_cores: bool,
    differ: &mut dyn FnMut(&str, String, String),
) {
    if !skip_nodes_and_cores {
        if i64::from(shape.nodes) != i64::from(r.nodes) {
            differ("nodes", r.nodes.to_string(), shape.nodes.to_string());
        }
        if i64::from(shape.cores) != i64::from(r.cores) {
            differ("cores", r.cores.to_string(), shape.cores.to_string());
        }
    }
    let memory = shape.memory.map(|m| m.0);
    if memory != r.memory_bytes.and_then(|m| u64::try_from(m).ok()) {
        let show = |m: Option<u64>| m.map_or_else(|| "(none)".to_owned(), |m| format!("{m} bytes"));
        differ(
            "memory",
            show(r.memory_bytes.and_then(|m| u64::try_from(m).ok())),
            show(memory),
        );
    }
    if i64::from(shape.gpus) != i64::from(r.gpus) {
        differ("gpus", r.gpus.to_string(), shape.gpus.to_string());
    }
}
