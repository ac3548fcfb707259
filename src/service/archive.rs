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
//!    charging rules version, its discount), and its storage segments.
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

/// The archive format's version (the header's `hpc_ledger_archive`).
pub const FORMAT: u32 = 1;

/// How many entries are read from the database at a time.
const BATCH: i64 = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0} is not closed: only closed months are archived (hpc-ledger close --through {0})")]
    NotClosed(Month),
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
}

/// The file name of a month's archive.
pub fn file_name(month: Month) -> String {
    format!("hpc-ledger-archive-{month}.jsonl")
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
}

/// `archive --through`: what was archived, in order, and the problem that
/// stopped it, if one did (the months before it stay archived).
#[derive(Debug, Serialize)]
pub struct ArchiveThrough {
    pub months: Vec<Archived>,
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
                    stopped: Some(e),
                });
            }
        }
        first = last + 1;
    }
    Ok(ArchiveThrough {
        months: done,
        stopped: None,
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
    let mut tx = pool.begin().await.map_err(DbError::from)?;
    let archived = match adb::archive_months(&mut tx, &periods, by, &names, &digests).await {
        Ok(a) => a,
        Err(e) => {
            drop(tx);
            remove(&written);
            return Err(e.into());
        }
    };
    tx.commit().await.map_err(DbError::from)?;
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
        })
        .collect())
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

/// The seal algorithm of months closed since migration 0041.
const V3: &str = "sha256-digests-v3";

/// Read an archive file and recompute what it claims: its seal, its entry
/// count and total, its digest. Errors name the file and the line.
pub fn check_file(path: &Path) -> Result<FileCheck, ArchiveError> {
    let name = path.display().to_string();
    let bad = |line: u64, reason: String| ArchiveError::File {
        file: format!("{name}:{line}"),
        reason,
    };
    let f = std::fs::File::open(path).map_err(|e| ArchiveError::File {
        file: name.clone(),
        reason: e.to_string(),
    })?;
    let mut reader = std::io::BufReader::new(f);
    let mut digest = Sha256::new();
    let mut buf = String::new();
    let mut read = |buf: &mut String| -> Result<bool, ArchiveError> {
        buf.clear();
        let n = reader.read_line(buf).map_err(|e| ArchiveError::File {
            file: name.clone(),
            reason: e.to_string(),
        })?;
        digest.update(buf.as_bytes());
        Ok(n > 0)
    };
    if !read(&mut buf)? {
        return Err(bad(1, "the file is empty".into()));
    }
    let header: Header = serde_json::from_str(buf.trim_end_matches('\n'))
        .map_err(|e| bad(1, format!("not an hpc-ledger archive header: {e}")))?;
    if header.hpc_ledger_archive != FORMAT {
        return Err(bad(
            1,
            format!(
                "archive format {} (this hpc-ledger reads {FORMAT})",
                header.hpc_ledger_archive
            ),
        ));
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
        if !read(&mut buf)? {
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
    // What the seal leaves out: one object per line to the end.
    let mut line_no = header.items + 1;
    while read(&mut buf)? {
        line_no += 1;
        serde_json::from_str::<serde_json::Value>(buf.trim_end_matches('\n'))
            .map_err(|e| bad(line_no, format!("not a JSON line: {e}")))?;
    }
    Ok(FileCheck {
        file: path.to_owned(),
        recomputed_seal: seal.finish(),
        header_item_agrees,
        entries,
        total,
        file_sha256: hex::encode(digest.finalize()),
        header,
    })
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
    /// What is wrong; empty when everything holds.
    pub problems: Vec<String>,
    pub entries: i64,
    pub total: Decimal,
}

impl ArchiveCheck {
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The archive files at `path` (a file, or a directory of them).
fn files(path: &Path) -> Result<Vec<PathBuf>, ArchiveError> {
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

/// `verify --archive PATH`: every file's seal recomputed from the file, its
/// chain to the month before, and its month against the database (archived
/// with this file's digest and seal; every archived month from `since` on
/// has its file in the directory).
pub async fn verify_archive(
    pool: &PgPool,
    path: &Path,
    since: Option<Month>,
) -> Result<Vec<ArchiveCheck>, ArchiveError> {
    let mut conn = pool.acquire().await.map_err(DbError::from)?;
    let records = adb::month_records(&mut conn).await?;
    let mut out = Vec::new();
    let mut seen: Vec<(NaiveDate, PathBuf)> = Vec::new();
    for file in files(path)? {
        let check = match check_file(&file) {
            Ok(c) => c,
            Err(e) => {
                out.push(ArchiveCheck {
                    month: None,
                    file,
                    problems: vec![e.to_string()],
                    entries: 0,
                    total: Decimal::ZERO,
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
                    _ => problems.push(format!("{month} is not archived in this ledger")),
                }
            }
        }
        out.push(ArchiveCheck {
            month: Some(month),
            file,
            problems,
            entries: check.entries,
            total: check.total,
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
                problems: vec![format!(
                    "{} is archived (to {name}), but its file is not in {}",
                    Month::of_date(r.period),
                    path.display()
                )],
                entries: 0,
                total: Decimal::ZERO,
            });
        }
    }
    Ok(out)
}
