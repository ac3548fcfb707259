//! Retention (issue 19, item 3): `archive --through M` moves closed months
//! out of the live ledger into files, and `verify --archive` checks those
//! files again, from the files alone and against the database.
//!
//! An archive file is one month, `hpc-ledger-archive-YYYY-MM.jsonl`:
//!
//! 1. a header: one JSON object (the month, its seal algorithm, recorded
//!    seal, the seal of the month before it, entry count, total, currency,
//!    how many seal items follow, and how many of them are statements);
//! 2. the month's seal items, one per line, exactly the text the database
//!    hashed when it sealed the month: the header item, every entry (a
//!    JSON array: `hl_entry_text`, or `hl_entry_text_v3` for seal v3) in id
//!    order, and (seals v2 and v3) every statement in number order. The
//!    seal is the SHA-256 chain `h = sha256(h ‖ item)` from the empty string
//!    over these lines (v1, v2), or the SHA-256 of their SHA-256 digests one
//!    after another (v3), so anyone can recompute it from the file without
//!    hpc-ledger;
//! 3. one JSON object per entry with what seals v1 and v2 leave out (its
//!    charging rules version, its discount), and its storage segments;
//! 4. (format 2, migration 0047) one JSON object per job record whose
//!    charges the month took out of the ledger: its id, the SHA-256 and
//!    length of its raw record's bytes, and the raw text (with the bytes in
//!    hex when they were not UTF-8). The database keeps the digest and
//!    empties the record's raw text (`hl_archive_records`).
//!
//! The file is written beside its final name, read back, and its seal
//! recomputed and compared with the recorded one before the database
//! deletes a single entry (`hl_archive_months`, migration 0037). What stays
//! in the database, and why, is in docs/retention.md.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::db::archive as adb;
use crate::db::{DbError, periods};
use crate::domain::period::Month;

/// The archive format's version (the header's `hpc_ledger_archive`): 2
/// since the files hold their records' raw text (migration 0047); files of
/// format 1 (without it) are read as before.
pub const FORMAT: u32 = 2;

/// How many entries are read from the database at a time.
const BATCH: i64 = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0} is not closed: only closed months are archived (hpc-ledger close --through {0})")]
    NotClosed(Month),
    #[error("{through} is before the ledger's first closed month, {first}: nothing to archive")]
    BeforeFirstClosed { through: Month, first: Month },
    #[error("{0}")]
    Refused(String),
    #[error("another `hpc-ledger archive` is running on this ledger: run it again once that one has finished")]
    Busy,
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    #[error(
        "{month}: the archive file does not reproduce the month's recorded seal ({reason}); nothing was deleted and the file was removed"
    )]
    SealMismatch { month: Month, reason: String },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for ArchiveError {
    fn from(e: sqlx::Error) -> Self {
        match crate::db::errors::guard_message(&e) {
            Some(m) => ArchiveError::Refused(m),
            None => ArchiveError::Db(e.into()),
        }
    }
}

/// The first line of an archive file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub hpc_ledger_archive: u32,
    pub month: Month,
    pub seal_algorithm: String,
    /// The month's recorded seal (hex).
    pub seal: String,
    /// The seal of the month before it (hex), which its seal is chained to.
    pub previous_seal: Option<String>,
    pub entry_count: i64,
    pub total: Decimal,
    pub currency: Option<String>,
    pub closed_at: DateTime<Utc>,
    pub closed_by: String,
    /// Seal items that follow the header: 1 + entries + statements.
    pub items: u64,
    /// Of those, statements (seals v2 and v3; 0 for v1).
    pub statements: u64,
    /// Job records whose raw text the file holds (format 2; none in 1).
    #[serde(default)]
    pub records: u64,
}

/// A job record's raw text in a month's file (format 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordLine {
    pub job_record: i64,
    /// SHA-256 (hex) of the record's bytes: `raw_bytes` when kept, else
    /// `raw`'s UTF-8 (`hl_record_raw_sha256`).
    pub raw_sha256: String,
    /// The length of those bytes.
    pub raw_length: u64,
    pub raw: String,
    /// The bytes as the scheduler wrote them (hex), when they were not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_bytes: Option<String>,
}

impl RecordLine {
    pub(crate) fn of(r: adb::RawText) -> RecordLine {
        let bytes = r.raw_bytes.as_deref().unwrap_or(r.raw.as_bytes());
        RecordLine {
            job_record: r.id,
            raw_sha256: hex::encode(Sha256::digest(bytes)),
            raw_length: bytes.len() as u64,
            raw_bytes: r.raw_bytes.as_deref().map(hex::encode),
            raw: r.raw,
        }
    }

    /// The digest of the bytes the line holds, or why they do not match
    /// the line's own digest and length.
    pub fn digest(&self) -> Result<[u8; 32], String> {
        let bytes = match &self.raw_bytes {
            Some(h) => hex::decode(h).map_err(|e| format!("raw_bytes is not hex: {e}"))?,
            None => self.raw.as_bytes().to_vec(),
        };
        let d: [u8; 32] = Sha256::digest(&bytes).into();
        if hex::encode(d) != self.raw_sha256 || bytes.len() as u64 != self.raw_length {
            return Err(format!(
                "job record {}: its text has SHA-256 {} and {} bytes, the line says {} and {}",
                self.job_record,
                hex::encode(d),
                bytes.len(),
                self.raw_sha256,
                self.raw_length
            ));
        }
        Ok(d)
    }
}

/// The file name of a month's archive.
pub fn file_name(month: Month) -> String {
    format!("hpc-ledger-archive-{month}.jsonl")
}

/// The file name of the records' file of a month archived before its
/// records' raw text could leave with it (migration 0048).
pub fn records_file_name(month: Month) -> String {
    format!("hpc-ledger-archive-{month}-records.jsonl")
}

/// The month a file's name gives (`hpc-ledger-archive-YYYY-MM.jsonl`, or a
/// records' file), when it is one: a file that cannot be read is still
/// that month's, not a missing one.
fn month_of_name(path: &Path) -> Option<Month> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("hpc-ledger-archive-")?;
    let month = rest
        .strip_suffix("-records.jsonl")
        .or_else(|| rest.strip_suffix(".jsonl"))?;
    month.parse().ok()
}

/// Whether a file is a records' file, by its name.
fn is_records_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with("-records.jsonl"))
}

/// The first line of a records' file; one [`RecordLine`] per record
/// follows, in id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordsHeader {
    pub hpc_ledger_archive_records: u32,
    pub month: Month,
    /// Job records whose raw text the file holds.
    pub records: u64,
}

/// The records' file format this hpc-ledger writes.
pub const RECORDS_FORMAT: u32 = 1;

/// The raw text of the records of a month archived earlier, moved into its
/// records' file.
#[derive(Debug, Clone, Serialize)]
pub struct ArchivedRecords {
    pub month: Month,
    pub file: PathBuf,
    pub records: u64,
    pub file_sha256: String,
}

/// One month archived.
#[derive(Debug, Clone, Serialize)]
pub struct Archived {
    pub month: Month,
    pub file: PathBuf,
    pub entries: i64,
    pub total: Decimal,
    pub seal: String,
    pub file_sha256: String,
    /// Job records whose raw text went into the file.
    pub records: u64,
}

/// `archive --through`: what was archived, in order, and the problem that
/// stopped it, if one did (the months before it stay archived).
#[derive(Debug, Serialize)]
pub struct ArchiveThrough {
    pub months: Vec<Archived>,
    /// Months archived before their records' text could leave with them,
    /// whose records' text went into a file of its own now.
    pub records_files: Vec<ArchivedRecords>,
    #[serde(serialize_with = "crate::service::error_text")]
    pub stopped: Option<ArchiveError>,
}

/// Archive every closed month not archived yet, through `through`, into
/// `dir`, oldest first. Months go in groups, each in a transaction of its
/// own: a month alone, or with the later months that correct its entries
/// (a correction must not point into the archive from the live ledger).
pub async fn archive_through(
    pool: &PgPool,
    through: Month,
    dir: &Path,
    by: &str,
) -> Result<ArchiveThrough, ArchiveError> {
    // A connection of its own, closed at the end (which also releases the
    // lock on every path): the archive lock is held for its session, and
    // two runs never write the same month's file.
    let mut conn = pool.acquire().await.map_err(DbError::from)?.detach();
    let result = archive_locked(pool, &mut conn, through, dir, by).await;
    let _ = sqlx::Connection::close(conn).await;
    result
}

async fn archive_locked(
    pool: &PgPool,
    conn: &mut sqlx::PgConnection,
    through: Month,
    dir: &Path,
    by: &str,
) -> Result<ArchiveThrough, ArchiveError> {
    if !adb::try_lock(&mut *conn).await? {
        return Err(ArchiveError::Busy);
    }
    if periods::closed_period(&mut *conn, through.first_day()).await?.is_none() {
        // A month before the first closed one is never closed (nothing can
        // be posted into it): closing it is not the advice.
        if let Some(first) = periods::first_closed(&mut *conn).await?
            && through.first_day() < first
        {
            return Err(ArchiveError::BeforeFirstClosed {
                through,
                first: Month::of_date(first),
            });
        }
        return Err(ArchiveError::NotClosed(through));
    }
    let months = adb::archivable(&mut *conn, through.first_day()).await?;
    std::fs::create_dir_all(dir).map_err(|e| ArchiveError::File {
        file: dir.display().to_string(),
        reason: format!("cannot create the directory: {e}"),
    })?;
    let mut done = Vec::new();
    let mut first = 0;
    while first < months.len() {
        // The group ends at the first month that every correction tied to
        // the group's entries is in or before (or at `through`: the
        // database then refuses, naming the correction).
        let mut last = first;
        let mut reach = months[first];
        loop {
            if let Some(l) = adb::latest_correction(&mut *conn, months[last]).await? {
                reach = reach.max(l);
            }
            if reach <= months[last] || last + 1 == months.len() {
                break;
            }
            last += 1;
        }
        let group: Vec<Month> = months[first..=last].iter().map(|&p| Month::of_date(p)).collect();
        match archive_group(pool, &mut *conn, &group, dir, by).await {
            Ok(a) => done.extend(a),
            Err(e) => {
                return Ok(ArchiveThrough {
                    months: done,
                    records_files: Vec::new(),
                    stopped: Some(e),
                });
            }
        }
        first = last + 1;
    }
    // The months archived before 0047, whose records' text stayed: each
    // into a records' file of its own.
    let mut records_files = Vec::new();
    for period in adb::months_with_records_left(&mut *conn, through.first_day()).await? {
        match archive_records_later(pool, &mut *conn, Month::of_date(period), dir, by).await {
            Ok(r) => records_files.push(r),
            Err(e) => {
                return Ok(ArchiveThrough {
                    months: done,
                    records_files,
                    stopped: Some(e),
                });
            }
        }
    }
    Ok(ArchiveThrough {
        months: done,
        records_files,
        stopped: None,
    })
}

/// The records' text of a month archived before it could leave with it:
/// written to the month's records' file, read back and checked, then, in
/// one transaction, the file recorded (`archived_record_file`) and the
/// records emptied against the digests read back (`hl_archive_records`,
/// which refuses unless they are exactly the records whose charges the
/// month archived and the text the database holds). A refusal removes the
/// file again.
async fn archive_records_later(
    pool: &PgPool,
    conn: &mut sqlx::PgConnection,
    month: Month,
    dir: &Path,
    by: &str,
) -> Result<ArchivedRecords, ArchiveError> {
    let name = records_file_name(month);
    let path = dir.join(&name);
    let partial = dir.join(format!(".{name}.partial"));
    let io = |e: std::io::Error, p: &Path| ArchiveError::File {
        file: p.display().to_string(),
        reason: e.to_string(),
    };
    let check = match write_records_file(&mut *conn, month, &partial).await {
        Ok(()) => check_records_file(&partial),
        Err(e) => Err(e),
    };
    let check = match check {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    if let Err(e) = std::fs::rename(&partial, &path) {
        let _ = std::fs::remove_file(&partial);
        return Err(io(e, &path));
    }
    if let Err(e) = sync_dir(dir) {
        let _ = std::fs::remove_file(&path);
        return Err(io(e, dir));
    }
    let (ids, sums) = ids_and_digests(&check.records);
    let digest = hex::decode(&check.file_sha256).expect("hex of a digest");
    let mut tx = match crate::db::begin(pool).await {
        Ok(tx) => tx,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(DbError::from(e).into());
        }
    };
    let stored = async {
        adb::record_file(&mut tx, month.first_day(), &name, &digest, ids.len() as i64, by).await?;
        adb::archive_records(&mut tx, month.first_day(), &ids, &sums).await
    }
    .await;
    if let Err(e) = stored {
        // Refused before the commit: nothing was emptied.
        drop(tx);
        let _ = std::fs::remove_file(&path);
        return Err(e.into());
    }
    // A failed commit may have committed all the same (a connection lost
    // after COMMIT was sent): the file stays, as a month's file does. If it
    // did not, the next run writes it again; if it did, it is the only
    // copy of the text.
    tx.commit().await.map_err(DbError::from)?;
    crate::service::refresh_statistics(
        pool,
        &[("job_record", ids.len() as u64), ("archived_record", ids.len() as u64)],
    )
    .await;
    Ok(ArchivedRecords {
        month,
        file: path,
        records: ids.len() as u64,
        file_sha256: check.file_sha256,
    })
}

/// Write the records' file of an archived month at `path` (durably): the
/// raw text of the records whose charges its archive took, in id order.
async fn write_records_file(conn: &mut sqlx::PgConnection, month: Month, path: &Path) -> Result<(), ArchiveError> {
    let io = |e: std::io::Error| ArchiveError::File {
        file: path.display().to_string(),
        reason: e.to_string(),
    };
    let records = adb::archived_charge_records(&mut *conn, month.first_day()).await?;
    let header = RecordsHeader {
        hpc_ledger_archive_records: RECORDS_FORMAT,
        month,
        records: records.len() as u64,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    let mut line = |text: &str| -> Result<(), ArchiveError> {
        out.write_all(text.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)
    };
    line(&serde_json::to_string(&header).expect("a header serialises"))?;
    write_record_lines(&mut *conn, month, &records, line).await?;
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(())
}

/// The raw text of job records `ids` as record lines, in id order, each
/// written with `line`.
async fn write_record_lines(
    conn: &mut sqlx::PgConnection,
    month: Month,
    ids: &[i64],
    mut line: impl FnMut(&str) -> Result<(), ArchiveError>,
) -> Result<(), ArchiveError> {
    for ids in ids.chunks(BATCH as usize) {
        let texts = adb::raw_texts(&mut *conn, ids).await?;
        if texts.len() != ids.len() {
            return Err(ArchiveError::Refused(format!(
                "{month}: {} of {} job records found to archive their raw text",
                texts.len(),
                ids.len()
            )));
        }
        for t in texts {
            line(&serde_json::to_string(&RecordLine::of(t)).expect("a record line serialises"))?;
        }
    }
    Ok(())
}

/// What a records' file says about itself, checked from it alone.
#[derive(Debug, Clone)]
pub struct RecordsFileCheck {
    pub header: RecordsHeader,
    /// The whole file's SHA-256 (hex).
    pub file_sha256: String,
    /// The records, in id order, each with the SHA-256 of its bytes
    /// (checked against the line's text).
    pub records: Vec<(i64, [u8; 32])>,
}

/// Read a records' file: its header, then only record lines, each matching
/// its own digest and length, in id order, as many as the header counts.
pub fn check_records_file(path: &Path) -> Result<RecordsFileCheck, ArchiveError> {
    let (mut reader, mut buf) = HashedReader::first_line(path)?;
    let place = reader.place();
    let bad = |line: u64, reason: String| place.at(line, reason);
    let header: RecordsHeader = serde_json::from_str(buf.trim_end_matches('\n'))
        .map_err(|e| bad(1, format!("not an hpc-ledger records' file header: {e}")))?;
    if header.hpc_ledger_archive_records != RECORDS_FORMAT {
        return Err(bad(
            1,
            format!(
                "records' file format {} (this hpc-ledger reads {RECORDS_FORMAT})",
                header.hpc_ledger_archive_records
            ),
        ));
    }
    let mut line_no = 1;
    let mut records: Vec<(i64, [u8; 32])> = Vec::new();
    while reader.read(&mut buf)? {
        line_no += 1;
        let record = record_of(buf.trim_end_matches('\n'))
            .map_err(|e| bad(line_no, e))?
            .ok_or_else(|| bad(line_no, "not a job record's raw text".into()))?;
        push_record(&mut records, &record).map_err(|e| bad(line_no, e))?;
    }
    counted(&records, header.records).map_err(|e| bad(line_no, e))?;
    Ok(RecordsFileCheck {
        header,
        file_sha256: reader.sha256(),
        records,
    })
}

/// Write each month's file and check it against the recorded seal, then
/// have the database archive the months. A refusal removes the files again.
async fn archive_group(
    pool: &PgPool,
    conn: &mut sqlx::PgConnection,
    months: &[Month],
    dir: &Path,
    by: &str,
) -> Result<Vec<Archived>, ArchiveError> {
    let io = |e: std::io::Error, p: &Path| ArchiveError::File {
        file: p.display().to_string(),
        reason: e.to_string(),
    };
    let mut written: Vec<(PathBuf, FileCheck)> = Vec::new();
    let remove = |written: &[(PathBuf, FileCheck)]| {
        for (p, _) in written {
            let _ = std::fs::remove_file(p);
        }
    };
    for &month in months {
        let path = dir.join(file_name(month));
        let partial = dir.join(format!(".{}.partial", file_name(month)));
        let checked = match write_file(&mut *conn, month, &partial).await {
            Ok(()) => check_file(&partial),
            Err(e) => Err(e),
        };
        let mismatch = match &checked {
            Err(_) => None,
            Ok(c) if !c.seal_holds() => Some(format!("recomputed {}, recorded {}", c.recomputed_seal, c.header.seal)),
            Ok(c) if c.entries != c.header.entry_count || c.total != c.header.total => Some(format!(
                "{} entries totalling {} in the file, {} totalling {} recorded",
                c.entries, c.total, c.header.entry_count, c.header.total
            )),
            Ok(_) => None,
        };
        let check = match (checked, mismatch) {
            (Ok(c), None) => c,
            (Err(e), _) => {
                let _ = std::fs::remove_file(&partial);
                remove(&written);
                return Err(e);
            }
            (Ok(_), Some(reason)) => {
                let _ = std::fs::remove_file(&partial);
                remove(&written);
                return Err(ArchiveError::SealMismatch { month, reason });
            }
        };
        if let Err(e) = std::fs::rename(&partial, &path) {
            remove(&written);
            return Err(io(e, &path));
        }
        written.push((path, check));
    }
    if let Err(e) = sync_dir(dir) {
        remove(&written);
        return Err(io(e, dir));
    }
    let periods: Vec<NaiveDate> = months.iter().map(|m| m.first_day()).collect();
    let names: Vec<String> = months.iter().map(|&m| file_name(m)).collect();
    let digests: Vec<Vec<u8>> = written
        .iter()
        .map(|(_, c)| hex::decode(&c.file_sha256).expect("hex of a digest"))
        .collect();
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let archived = match archive_in(&mut tx, &periods, by, &names, &digests, &written).await {
        Ok(a) => a,
        Err(e) => {
            drop(tx);
            remove(&written);
            return Err(e.into());
        }
    };
    tx.commit().await.map_err(DbError::from)?;
    let records: u64 = written.iter().map(|(_, c)| c.records.len() as u64).sum();
    // Whole months left the ledger and a row per charged record went into
    // archived_charge: what follows (the audit, the next archive) must not
    // be planned on the statistics of before.
    let n: u64 = archived.iter().map(|a| a.entry_count.max(0) as u64).sum();
    crate::service::refresh_statistics(
        pool,
        &[
            ("ledger_entry", n),
            ("storage_charge_segment", n),
            ("archived_charge", n),
            ("archived_period", archived.len() as u64),
            ("job_record", records),
            ("archived_record", records),
        ],
    )
    .await;
    Ok(archived
        .into_iter()
        .zip(written)
        .map(|(a, (path, check))| Archived {
            month: Month::of_date(a.period),
            file: path,
            entries: a.entry_count,
            total: a.total,
            seal: hex::encode(&a.seal),
            file_sha256: check.file_sha256,
            records: check.records.len() as u64,
        })
        .collect())
}

/// In the archive's transaction: the months recorded and their entries
/// deleted (`hl_archive_months`), then each month's records' raw text
/// emptied against the digests read back from its file
/// (`hl_archive_records`, which refuses unless they are the text the
/// database holds, of exactly the records whose charges left).
async fn archive_in(
    tx: &mut sqlx::PgConnection,
    periods: &[NaiveDate],
    by: &str,
    names: &[String],
    digests: &[Vec<u8>],
    written: &[(PathBuf, FileCheck)],
) -> Result<Vec<adb::ArchivedPeriod>, sqlx::Error> {
    let archived = adb::archive_months(&mut *tx, periods, by, names, digests).await?;
    for (period, (_, check)) in periods.iter().zip(written) {
        let (ids, sums) = ids_and_digests(&check.records);
        adb::archive_records(&mut *tx, *period, &ids, &sums).await?;
    }
    Ok(archived)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Write a closed month's archive file at `path` (durably).
async fn write_file(conn: &mut sqlx::PgConnection, month: Month, path: &Path) -> Result<(), ArchiveError> {
    let period = month.first_day();
    let io = |e: std::io::Error| ArchiveError::File {
        file: path.display().to_string(),
        reason: e.to_string(),
    };
    let closed = periods::closed_period(&mut *conn, period)
        .await?
        .ok_or(ArchiveError::NotClosed(month))?;
    let previous = periods::closed_period(&mut *conn, month.prev().first_day()).await?;
    let seal_header = adb::seal_header(&mut *conn, period)
        .await?
        .ok_or(ArchiveError::NotClosed(month))?;
    let statements = adb::statement_items(&mut *conn, period).await?;
    let records = adb::raw_records_of(&mut *conn, period).await?;
    let header = Header {
        hpc_ledger_archive: FORMAT,
        month,
        seal_algorithm: closed.seal_algorithm.clone(),
        seal: hex::encode(&closed.seal),
        previous_seal: previous.map(|p| hex::encode(p.seal)),
        entry_count: closed.entry_count,
        total: closed.total,
        currency: closed.currency.clone(),
        closed_at: closed.closed_at,
        closed_by: closed.closed_by.clone(),
        items: 1 + closed.entry_count as u64 + statements.len() as u64,
        statements: statements.len() as u64,
        records: records.len() as u64,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    let line = |out: &mut std::io::BufWriter<std::fs::File>, text: &str| -> Result<(), ArchiveError> {
        if text.contains('\n') {
            // jsonb's text never holds a raw line break; a seal item that did
            // could not be one line of the file.
            return Err(ArchiveError::SealMismatch {
                month,
                reason: "a seal item holds a line break".into(),
            });
        }
        out.write_all(text.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)
    };
    line(&mut out, &serde_json::to_string(&header).expect("a header serialises"))?;
    line(&mut out, &seal_header)?;
    let mut after = 0;
    loop {
        let batch = adb::entry_items(&mut *conn, period, after, BATCH).await?;
        let Some(&(last, _)) = batch.last() else { break };
        for (_, t) in &batch {
            line(&mut out, t)?;
        }
        after = last;
    }
    for t in &statements {
        line(&mut out, t)?;
    }
    after = 0;
    loop {
        let batch = adb::unsealed(&mut *conn, period, after, BATCH).await?;
        let Some(&(last, _)) = batch.last() else { break };
        for (_, t) in &batch {
            line(&mut out, t)?;
        }
        after = last;
    }
    write_record_lines(&mut *conn, month, &records, |t| line(&mut out, t)).await?;
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(())
}

/// What a file says about itself, recomputed from it alone.
#[derive(Debug, Clone, Serialize)]
pub struct FileCheck {
    pub file: PathBuf,
    pub header: Header,
    /// The seal recomputed over the seal items by its algorithm (hex).
    pub recomputed_seal: String,
    /// The month in the seal's own header item agrees with the file's header
    /// (month and, for seals v2 and v3, the previous seal).
    pub header_item_agrees: bool,
    /// Entries and their total (the rounded amounts), counted in the items.
    pub entries: i64,
    pub total: Decimal,
    /// The whole file's SHA-256 (hex).
    pub file_sha256: String,
    /// The job records whose raw text it holds, in id order, each with the
    /// SHA-256 of its bytes (checked against the line's text).
    #[serde(skip)]
    pub records: Vec<(i64, [u8; 32])>,
}

impl FileCheck {
    pub fn seal_holds(&self) -> bool {
        self.recomputed_seal == self.header.seal && self.header_item_agrees
    }
}

/// The seal chain step of migration 0006: sha256(state ‖ item).
fn chain(state: &[u8], item: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(state);
    h.update(item.as_bytes());
    h.finalize().into()
}

/// A month's seal recomputed item by item, by its algorithm: the chain of
/// v1 and v2, or (v3, migration 0041) the SHA-256 of the items' SHA-256
/// digests one after another.
enum Seal {
    Chain(Vec<u8>),
    Digests(Sha256),
}

impl Seal {
    fn new(algorithm: &str) -> Seal {
        if algorithm == V3 {
            Seal::Digests(Sha256::new())
        } else {
            Seal::Chain(Vec::new())
        }
    }

    fn add(&mut self, item: &str) {
        match self {
            Seal::Chain(state) => *state = chain(state, item).to_vec(),
            Seal::Digests(h) => h.update(Sha256::digest(item.as_bytes())),
        }
    }

    fn finish(self) -> String {
        match self {
            Seal::Chain(state) => hex::encode(state),
            Seal::Digests(h) => hex::encode(h.finalize()),
        }
    }
}

/// An archive file read line by line, each line (with its line end) added
/// to the whole file's SHA-256 as it is read.
struct HashedReader {
    name: String,
    reader: std::io::BufReader<std::fs::File>,
    digest: Sha256,
}

impl HashedReader {
    fn open(path: &Path) -> Result<HashedReader, ArchiveError> {
        let name = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| ArchiveError::File {
            file: name.clone(),
            reason: e.to_string(),
        })?;
        Ok(HashedReader {
            name,
            reader: std::io::BufReader::new(f),
            digest: Sha256::new(),
        })
    }

    /// The next line into `buf` (emptied first); false at the end.
    fn read(&mut self, buf: &mut String) -> Result<bool, ArchiveError> {
        buf.clear();
        let n = self.reader.read_line(buf).map_err(|e| ArchiveError::File {
            file: self.name.clone(),
            reason: e.to_string(),
        })?;
        self.digest.update(buf.as_bytes());
        Ok(n > 0)
    }

    /// A file opened with its first line read into the returned buffer
    /// (an empty file is refused at line 1).
    fn first_line(path: &Path) -> Result<(HashedReader, String), ArchiveError> {
        let mut reader = HashedReader::open(path)?;
        let mut buf = String::new();
        if !reader.read(&mut buf)? {
            return Err(reader.place().at(1, "the file is empty".into()));
        }
        Ok((reader, buf))
    }

    /// Where its lines are.
    fn place(&self) -> Place {
        Place(self.name.clone())
    }

    /// The SHA-256 (hex) of what was read: the whole file's once read to
    /// its end.
    fn sha256(&self) -> String {
        hex::encode(self.digest.clone().finalize())
    }
}

/// Where in an archive file something is: `file:line`.
struct Place(String);

impl Place {
    fn at(&self, line: u64, reason: String) -> ArchiveError {
        ArchiveError::File {
            file: format!("{}:{line}", self.0),
            reason,
        }
    }
}

/// The ids of `records`, and their digests as the database takes them.
fn ids_and_digests(records: &[(i64, [u8; 32])]) -> (Vec<i64>, Vec<Vec<u8>>) {
    records.iter().map(|(id, d)| (*id, d.to_vec())).unzip()
}

/// A record line, read after those in `records`: its text must match its
/// own digest and length, and its id come after theirs.
fn push_record(records: &mut Vec<(i64, [u8; 32])>, record: &RecordLine) -> Result<(), String> {
    let d = record.digest()?;
    if records.last().is_some_and(|&(last, _)| last >= record.job_record) {
        return Err(format!(
            "job record {} is out of order (records are in id order, once each)",
            record.job_record
        ));
    }
    records.push((record.job_record, d));
    Ok(())
}

/// The records read are as many as the file's header counts.
fn counted(records: &[(i64, [u8; 32])], header: u64) -> Result<(), String> {
    if records.len() as u64 != header {
        return Err(format!(
            "the file holds the raw text of {} job records; its header counts {header}",
            records.len()
        ));
    }
    Ok(())
}

/// The seal algorithm of months closed since migration 0041.
const V3: &str = "sha256-digests-v3";

/// Read an archive file and recompute what it claims: its seal, its entry
/// count and total, its digest. Errors name the file and the line.
pub fn check_file(path: &Path) -> Result<FileCheck, ArchiveError> {
    let (mut reader, mut buf) = HashedReader::first_line(path)?;
    let place = reader.place();
    let bad = |line: u64, reason: String| place.at(line, reason);
    let header: Header = serde_json::from_str(buf.trim_end_matches('\n'))
        .map_err(|e| bad(1, format!("not an hpc-ledger archive header: {e}")))?;
    if !(1..=FORMAT).contains(&header.hpc_ledger_archive) {
        return Err(bad(
            1,
            format!(
                "archive format {} (this hpc-ledger reads 1 to {FORMAT})",
                header.hpc_ledger_archive
            ),
        ));
    }
    if header.hpc_ledger_archive == 1 && header.records > 0 {
        return Err(bad(1, "an archive of format 1 holds no records".into()));
    }
    // The items are the seal's header, the entries, then the statements
    // (seals v2 and v3): each is recognised by its shape below, so a header
    // that miscounts them cannot pass entries off as statements.
    let entry_count = u64::try_from(header.entry_count).map_err(|_| bad(1, "a negative entry count".into()))?;
    if Some(header.items)
        != entry_count
            .checked_add(header.statements)
            .and_then(|n| n.checked_add(1))
    {
        return Err(bad(
            1,
            format!(
                "its header counts {} seal items, not 1 + {} entries + {} statements",
                header.items, header.entry_count, header.statements
            ),
        ));
    }
    if header.seal_algorithm == "sha256-chain-v1" && header.statements > 0 {
        return Err(bad(1, "a seal v1 month has no statements among its seal items".into()));
    }
    let month_day = format!("\"{}\"", header.month.first_day());
    let mut seal = Seal::new(&header.seal_algorithm);
    // An entry's item: v3 adds its charging rules and discount to v2's 18
    // fields, at the end.
    let entry_fields = if header.seal_algorithm == V3 { 20 } else { 18 };
    let mut entries = 0i64;
    let mut total = Decimal::ZERO;
    let mut header_item_agrees = false;
    let first_statement = 1 + entry_count;
    for i in 0..header.items {
        let line_no = i + 2;
        if !reader.read(&mut buf)? {
            return Err(bad(
                line_no,
                format!("the file ends after {i} of its {} seal items", header.items),
            ));
        }
        let Some(item) = buf.strip_suffix('\n') else {
            return Err(bad(
                line_no,
                "the last seal item has no line end: the file is cut short".into(),
            ));
        };
        seal.add(item);
        if i == 0 {
            header_item_agrees = header_item_matches(&header, item);
        } else {
            let fields: Vec<&serde_json::value::RawValue> =
                serde_json::from_str(item).map_err(|e| bad(line_no, format!("not a seal item: {e}")))?;
            if i < first_statement {
                // hl_entry_text (hl_entry_text_v3): 18 (20) fields, the
                // month (its first day) the third, the rounded amount the
                // 15th.
                if fields.len() != entry_fields || fields[2].get() != month_day {
                    return Err(bad(line_no, format!("not an entry of {}", header.month)));
                }
                let amount = fields[14]
                    .get()
                    .parse::<Decimal>()
                    .map_err(|_| bad(line_no, "an entry without an amount".into()))?;
                entries += 1;
                total += amount;
            } else if fields.len() != 4 {
                // A statement: number, project, entry count, total.
                return Err(bad(line_no, "not a statement".into()));
            }
        }
    }
    // What the seal leaves out: one object per line to the end; of them,
    // the records' raw text (format 2), in id order, each matching its
    // digest.
    let mut line_no = header.items + 1;
    let mut records: Vec<(i64, [u8; 32])> = Vec::new();
    while reader.read(&mut buf)? {
        line_no += 1;
        let Some(record) = record_of(buf.trim_end_matches('\n')).map_err(|e| bad(line_no, e))? else {
            continue;
        };
        push_record(&mut records, &record).map_err(|e| bad(line_no, e))?;
    }
    counted(&records, header.records).map_err(|e| bad(line_no, e))?;
    Ok(FileCheck {
        file: path.to_owned(),
        recomputed_seal: seal.finish(),
        header_item_agrees,
        entries,
        total,
        file_sha256: reader.sha256(),
        header,
        records,
    })
}

/// A line after a file's seal items: a job record's raw text, or (`None`)
/// another of what the seal leaves out.
fn record_of(line: &str) -> Result<Option<RecordLine>, String> {
    let value = serde_json::from_str::<serde_json::Value>(line).map_err(|e| format!("not a JSON line: {e}"))?;
    if value.get("job_record").is_none() {
        return Ok(None);
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| format!("not a job record's raw text: {e}"))
}

/// The job records' raw text in an archive file, line by line (its line
/// number and the record), without checking the rest of the file (`verify
/// --archive` does): `audit --deep --archive` reads them again.
pub struct RecordLines {
    /// The month the file's header names (read by `open`).
    month: Option<Month>,
    /// Of every byte read so far: the file's SHA-256 once it is read to
    /// its end ([`RecordLines::file_sha256`]).
    reader: HashedReader,
    line_no: u64,
    buf: String,
    ended: bool,
    records_file: bool,
}

impl RecordLines {
    pub fn open(path: &Path) -> Result<RecordLines, ArchiveError> {
        let mut lines = RecordLines {
            month: None,
            reader: HashedReader::open(path)?,
            line_no: 0,
            buf: String::new(),
            ended: false,
            records_file: false,
        };
        if !lines.next_line()? {
            return Err(lines.bad("the file is empty".into()));
        }
        if is_records_file(path) {
            // Records' lines only, after the header.
            let header: RecordsHeader = serde_json::from_str(lines.buf.trim_end_matches('\n'))
                .map_err(|e| lines.bad(format!("not an hpc-ledger records' file header: {e}")))?;
            lines.month = Some(header.month);
            lines.records_file = true;
            return Ok(lines);
        }
        let header: Header = serde_json::from_str(lines.buf.trim_end_matches('\n'))
            .map_err(|e| lines.bad(format!("not an hpc-ledger archive header: {e}")))?;
        lines.month = Some(header.month);
        // The seal items: never a record.
        for _ in 0..header.items {
            if !lines.next_line()? {
                return Err(lines.bad("the file ends among its seal items".into()));
            }
        }
        Ok(lines)
    }

    fn next_line(&mut self) -> Result<bool, ArchiveError> {
        let more = self.reader.read(&mut self.buf)?;
        self.line_no += 1;
        self.ended = !more;
        Ok(more)
    }

    /// The whole file's SHA-256 in hex, once every line has been read
    /// (the iterator ended); `None` before.
    pub fn file_sha256(&self) -> Option<String> {
        self.ended.then(|| self.reader.sha256())
    }

    fn bad(&self, reason: String) -> ArchiveError {
        self.reader.place().at(self.line_no, reason)
    }

    /// A records' file (of a month archived before its records' text could
    /// leave with it), by its name.
    pub fn is_records_file(&self) -> bool {
        self.records_file
    }

    /// The month the file's header names.
    pub fn month(&self) -> Month {
        self.month.expect("read by open")
    }

    /// Where a line is: `file:line`.
    pub fn place(&self, line_no: u64) -> String {
        format!("{}:{line_no}", self.reader.name)
    }
}

impl Iterator for RecordLines {
    type Item = Result<(u64, RecordLine), ArchiveError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_line() {
                Err(e) => return Some(Err(e)),
                Ok(false) => return None,
                Ok(true) => {}
            }
            match record_of(self.buf.trim_end_matches('\n')) {
                Ok(None) => continue,
                Ok(Some(r)) => return Some(Ok((self.line_no, r))),
                Err(e) => return Some(Err(self.bad(e))),
            }
        }
    }
}

/// Whether the seal's header item names the file header's month (and, for
/// seals v2 and v3, its previous seal, currency and closer).
fn header_item_matches(h: &Header, item: &str) -> bool {
    if h.seal_algorithm == "sha256-chain-v1" {
        let previous = h.previous_seal.as_deref().unwrap_or("none");
        return item == format!("hpc-ledger seal v1 {} {previous}", h.month);
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(item) else {
        return false;
    };
    let label = if h.seal_algorithm == V3 {
        "hpc-ledger seal v3"
    } else {
        "hpc-ledger seal v2"
    };
    v[0] == label
        && v[1] == h.month.to_string()
        && v[2].as_str() == h.previous_seal.as_deref()
        && v[3].as_str() == h.currency.as_deref()
        && v[4] == h.closed_by.as_str()
}

/// One archive file checked from itself and against the database.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveCheck {
    pub month: Option<Month>,
    pub file: PathBuf,
    /// A records' file (of a month archived before its records' text could
    /// leave with it), not a month's file.
    pub records_file: bool,
    /// What is wrong; empty when everything holds.
    pub problems: Vec<String>,
    pub entries: i64,
    pub total: Decimal,
    /// Job records whose raw text the file holds.
    pub records: u64,
}

impl ArchiveCheck {
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The archive files at `path` (a file, or a directory of them).
pub(crate) fn files(path: &Path) -> Result<Vec<PathBuf>, ArchiveError> {
    if path.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let list = std::fs::read_dir(path).map_err(|e| ArchiveError::File {
        file: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut out: Vec<PathBuf> = list
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("hpc-ledger-archive-") && n.ends_with(".jsonl"))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// How many differences between a file's records and the ledger's are
/// named one by one (the rest are counted).
const NAMED: usize = 10;

/// A file's records' raw text against the digests the ledger recorded when
/// it emptied them (`audit.archived_records`): the same records, the same
/// digests. Both lists are in id order and are merged page by page.
async fn record_problems(
    conn: &mut sqlx::PgConnection,
    month: Month,
    in_file: &[(i64, [u8; 32])],
) -> Result<Vec<String>, ArchiveError> {
    let mut problems = Vec::new();
    let mut more = 0usize;
    let mut note = |p: String| {
        if problems.len() < NAMED {
            problems.push(p);
        } else {
            more += 1;
        }
    };
    let mut file = in_file.iter().peekable();
    let mut after = 0;
    loop {
        let page = adb::archived_record_digests(&mut *conn, month.first_day(), after, BATCH).await?;
        let Some(&(last, _)) = page.last() else { break };
        after = last;
        for (id, digest) in page {
            while let Some(&&(f, _)) = file.peek()
                && f < id
            {
                note(format!(
                    "it holds the raw text of job record {f}, which the ledger does not record as archived in {month}"
                ));
                file.next();
            }
            match file.peek() {
                Some(&&(f, d)) if f == id => {
                    if hex::encode(d) != digest {
                        note(format!(
                            "the raw text of job record {id} has SHA-256 {}; the ledger archived {digest}",
                            hex::encode(d)
                        ));
                    }
                    file.next();
                }
                _ => note(format!(
                    "the ledger archived the raw text of job record {id} to {month}'s file, which does not hold it"
                )),
            }
        }
    }
    for &(f, _) in file {
        note(format!(
            "it holds the raw text of job record {f}, which the ledger does not record as archived in {month}"
        ));
    }
    if more > 0 {
        problems.push(format!("and {more} more differences in its job records' raw text"));
    }
    Ok(problems)
}

/// One records' file checked from itself and against the database: the
/// name, SHA-256 and count recorded for its month, and its records against
/// `audit.archived_records`.
async fn verify_records_file(
    conn: &mut sqlx::PgConnection,
    file: PathBuf,
    recorded: &[adb::RecordFile],
    seen: &mut Vec<(NaiveDate, PathBuf)>,
) -> Result<ArchiveCheck, ArchiveError> {
    let check = match check_records_file(&file) {
        Ok(c) => c,
        Err(e) => {
            if let Some(m) = month_of_name(&file) {
                seen.push((m.first_day(), file.clone()));
            }
            return Ok(ArchiveCheck {
                month: None,
                file,
                records_file: true,
                problems: vec![e.to_string()],
                entries: 0,
                total: Decimal::ZERO,
                records: 0,
            });
        }
    };
    let month = check.header.month;
    let period = month.first_day();
    let mut problems = Vec::new();
    if let Some((_, first)) = seen.iter().find(|(p, _)| *p == period) {
        problems.push(format!(
            "a second records' file of {month} (the first: {})",
            first.display()
        ));
    }
    seen.push((period, file.clone()));
    match recorded.iter().find(|f| f.period == period) {
        None => problems.push(format!("the ledger records no records' file of {month}")),
        Some(f) => {
            if let Some(problem) = misnamed(&file, &f.file_name, &format!("{month}'s records")) {
                problems.push(problem);
            }
            if f.file_sha256 != check.file_sha256 {
                problems.push(format!(
                    "the file's SHA-256 is {}; the ledger archived {month}'s records to {} with {}",
                    check.file_sha256, f.file_name, f.file_sha256
                ));
            }
            if f.records != check.records.len() as i64 {
                problems.push(format!(
                    "it holds the raw text of {} job records; the ledger recorded {}",
                    check.records.len(),
                    f.records
                ));
            }
            problems.extend(record_problems(&mut *conn, month, &check.records).await?);
        }
    }
    Ok(ArchiveCheck {
        month: Some(month),
        file,
        records_file: true,
        problems,
        entries: 0,
        total: Decimal::ZERO,
        records: check.records.len() as u64,
    })
}

/// `verify --archive PATH`: every file's seal recomputed from the file, its
/// chain to the month before, and its month against the database (archived
/// with this file's digest and seal; every archived month from `since` on
/// has its file in the directory).
/// A file found under another name than the one the ledger archived it to
/// (`what`: the month, or its records): the ledger, `job show` and the
/// statements name the recorded file, and a retention schedule that
/// destroys files by name would destroy the wrong month's.
fn misnamed(file: &Path, recorded: &str, what: &str) -> Option<String> {
    let found = file.file_name()?.to_string_lossy();
    let recorded = Path::new(recorded)
        .file_name()
        .map_or(recorded.into(), |n| n.to_string_lossy());
    (found != recorded).then(|| format!("it is named {found}; the ledger archived {what} to {recorded}"))
}

pub async fn verify_archive(
    pool: &PgPool,
    path: &Path,
    since: Option<Month>,
) -> Result<Vec<ArchiveCheck>, ArchiveError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let records = adb::month_records(&mut conn).await?;
    let record_files = adb::record_files(&mut conn).await?;
    let mut out = Vec::new();
    let mut seen: Vec<(NaiveDate, PathBuf)> = Vec::new();
    let mut seen_records: Vec<(NaiveDate, PathBuf)> = Vec::new();
    for file in files(path)? {
        if is_records_file(&file) {
            out.push(verify_records_file(&mut conn, file, &record_files, &mut seen_records).await?);
            continue;
        }
        let check = match check_file(&file) {
            Ok(c) => c,
            Err(e) => {
                if let Some(m) = month_of_name(&file) {
                    seen.push((m.first_day(), file.clone()));
                }
                out.push(ArchiveCheck {
                    month: None,
                    file,
                    records_file: false,
                    problems: vec![e.to_string()],
                    entries: 0,
                    total: Decimal::ZERO,
                    records: 0,
                });
                continue;
            }
        };
        let month = check.header.month;
        let period = month.first_day();
        let mut problems = Vec::new();
        if let Some((_, first)) = seen.iter().find(|(p, _)| *p == period) {
            problems.push(format!("a second file of {month} (the first: {})", first.display()));
        }
        seen.push((period, file.clone()));
        if check.recomputed_seal != check.header.seal {
            problems.push(format!(
                "its seal items recompute to {}, not the seal it records, {}",
                check.recomputed_seal, check.header.seal
            ));
        }
        if !check.header_item_agrees {
            problems.push("the seal's first item does not name the month the file's header names".into());
        }
        match records.iter().find(|r| r.period == period) {
            None => problems.push(format!("{month} is not a closed month of this ledger")),
            Some(r) => {
                if r.recorded_seal != check.header.seal {
                    problems.push(format!(
                        "the ledger's recorded seal of {month} is {}, the file's {}",
                        r.recorded_seal, check.header.seal
                    ));
                }
                if (r.recorded_entries, r.recorded_total) != (check.entries, check.total) {
                    problems.push(format!(
                        "it holds {} entries totalling {}; the ledger closed {month} with {} totalling {}",
                        check.entries, check.total, r.recorded_entries, r.recorded_total
                    ));
                }
                if r.seal_algorithm.as_deref() != Some(check.header.seal_algorithm.as_str()) {
                    problems.push(format!(
                        "its seal algorithm {} is not the ledger's, {}",
                        check.header.seal_algorithm,
                        r.seal_algorithm.as_deref().unwrap_or("(none)")
                    ));
                }
                if r.closed_by.as_deref() != Some(check.header.closed_by.as_str()) {
                    problems.push(format!(
                        "it says {} closed {month}; the ledger says {}",
                        check.header.closed_by,
                        r.closed_by.as_deref().unwrap_or("(nobody)")
                    ));
                }
                if r.currency != check.header.currency {
                    problems.push(format!(
                        "its currency {} is not the ledger's, {}",
                        check.header.currency.as_deref().unwrap_or("(none)"),
                        r.currency.as_deref().unwrap_or("(none)")
                    ));
                }
                if r.closed_at != check.header.closed_at {
                    problems.push(format!(
                        "its closing time {} is not the ledger's, {}",
                        check.header.closed_at, r.closed_at
                    ));
                }
                if r.previous_seal != check.header.previous_seal {
                    problems.push(format!(
                        "its previous seal {} is not the ledger's recorded seal of {}",
                        check.header.previous_seal.as_deref().unwrap_or("(none)"),
                        month.prev()
                    ));
                }
                match (&r.archived_to, &r.file_sha256) {
                    (Some(name), Some(digest)) => {
                        if let Some(problem) = misnamed(&file, name, &month.to_string()) {
                            problems.push(problem);
                        }
                        if *digest != check.file_sha256 {
                            problems.push(format!(
                                "the file's SHA-256 is {}; the ledger archived {month} to {name} with {digest}",
                                check.file_sha256
                            ));
                        }
                        if r.archived_seal.as_deref() != Some(r.recorded_seal.as_str()) {
                            problems.push(format!(
                                "the ledger's seal of {month} ({}) is not the one recorded when it was archived ({})",
                                r.recorded_seal,
                                r.archived_seal.as_deref().unwrap_or("none")
                            ));
                        }
                    }
                    _ => problems.push(format!(
                        "{month} is not archived in this ledger (an `archive` stopped before it recorded the month \
                         leaves its file: run `hpc-ledger archive --through {month}` again, which writes it again)"
                    )),
                }
                // A month archived before its records' text could leave
                // has that text in its records' file, checked there.
                if r.archived_to.is_some() && !record_files.iter().any(|f| f.period == period) {
                    problems.extend(record_problems(&mut conn, month, &check.records).await?);
                }
            }
        }
        out.push(ArchiveCheck {
            month: Some(month),
            file,
            records_file: false,
            problems,
            entries: check.entries,
            total: check.total,
            records: check.records.len() as u64,
        });
    }
    // An archived month whose file is not here (checking a directory).
    if path.is_dir() {
        let since = since.map(Month::first_day);
        for r in records.iter().filter(|r| {
            r.archived_to.is_some() && !seen.iter().any(|(p, _)| *p == r.period) && since.is_none_or(|s| r.period >= s)
        }) {
            let name = r.archived_to.clone().unwrap_or_default();
            out.push(ArchiveCheck {
                month: Some(Month::of_date(r.period)),
                file: path.join(&name),
                records_file: false,
                problems: vec![format!(
                    "{} is archived (to {name}), but its file is not in {}",
                    Month::of_date(r.period),
                    path.display()
                )],
                entries: 0,
                total: Decimal::ZERO,
                records: 0,
            });
        }
        for f in record_files
            .iter()
            .filter(|f| !seen_records.iter().any(|(p, _)| *p == f.period) && since.is_none_or(|s| f.period >= s))
        {
            out.push(ArchiveCheck {
                month: Some(Month::of_date(f.period)),
                file: path.join(&f.file_name),
                records_file: true,
                problems: vec![format!(
                    "{}'s records' raw text is archived (to {}), but that file is not in {}",
                    Month::of_date(f.period),
                    f.file_name,
                    path.display()
                )],
                entries: 0,
                total: Decimal::ZERO,
                records: 0,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::RecordLine;
    use crate::db::archive::RawText;

    /// A file's month by its name, for a month's file and a records'
    /// file; none for another name.
    #[test]
    fn a_files_name_gives_its_month() {
        use std::path::Path;
        let of = |n: &str| super::month_of_name(Path::new(n)).map(|m| m.to_string());
        assert_eq!(of("/a/hpc-ledger-archive-2026-03.jsonl").as_deref(), Some("2026-03"));
        assert_eq!(
            of("hpc-ledger-archive-2019-12-records.jsonl").as_deref(),
            Some("2019-12")
        );
        assert_eq!(of("hpc-ledger-archive-copy.jsonl"), None);
        assert_eq!(of("hpc-ledger-archive-2026-13.jsonl"), None);
        assert!(super::is_records_file(Path::new(
            "x/hpc-ledger-archive-2019-12-records.jsonl"
        )));
        assert!(!super::is_records_file(Path::new("x/hpc-ledger-archive-2019-12.jsonl")));
    }

    /// A record kept with the bytes the scheduler wrote (not UTF-8: a
    /// Latin-1 user name) is archived with those bytes, and its digest is
    /// theirs; a line whose text or bytes were changed no longer matches.
    #[test]
    fn a_record_line_carries_the_bytes_its_digest_is_of() {
        let bytes = b"1001|owens|Jos\xe9|COMPLETED".to_vec();
        let line = RecordLine::of(RawText {
            id: 7,
            raw: String::from_utf8_lossy(&bytes).into_owned(),
            raw_bytes: Some(bytes.clone()),
        });
        assert_eq!(line.raw_bytes.as_deref(), Some(hex::encode(&bytes).as_str()));
        assert_eq!(line.raw_length, bytes.len() as u64);
        use sha2::Digest;
        let want: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        assert_eq!(line.digest(), Ok(want));
        let text: RecordLine = serde_json::from_str(&serde_json::to_string(&line).unwrap()).unwrap();
        assert_eq!(text, line);
        let mut changed = line.clone();
        changed.raw_bytes = Some(hex::encode(b"1001|owens|Jose|COMPLETED"));
        assert!(
            changed
                .digest()
                .unwrap_err()
                .starts_with("job record 7: its text has SHA-256 ")
        );
        // Without kept bytes the digest is of the text's UTF-8.
        let plain = RecordLine::of(RawText {
            id: 8,
            raw: "1002|owens|ada".into(),
            raw_bytes: None,
        });
        assert_eq!(plain.raw_bytes, None);
        assert_eq!(plain.digest(), Ok(sha2::Sha256::digest(b"1002|owens|ada").into()));
        let mut edited = plain.clone();
        edited.raw.push(' ');
        assert!(edited.digest().is_err());
    }
}
