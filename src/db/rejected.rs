//! Rejected records: kept with the reason and how to read them again, until
//! re-processing resolves them.

use chrono::{DateTime, Utc};

use crate::domain::kinds::SourceFormat;
use crate::domain::posting::RejectKind;
use sqlx::PgConnection;

/// A record that could not be charged.
#[derive(Debug, Clone)]
pub struct NewRejection {
    pub source_format: SourceFormat,
    pub source_ref: String,
    pub read_options: serde_json::Value,
    pub raw: String,
    /// The bytes as received, when they were not valid UTF-8 (migration 0015).
    pub raw_bytes: Option<Vec<u8>>,
    pub raw_sha256: Vec<u8>,
    pub kind: RejectKind,
    pub reason: String,
    pub job_key: Option<String>,
}

/// The position a `file:line` (or `file:jobs[N]`) names, if it names one.
fn position(source_ref: &str) -> Option<u64> {
    let (_, tail) = source_ref.rsplit_once(':')?;
    let n = tail
        .strip_prefix("jobs[")
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(tail);
    n.parse().ok()
}

/// `s` with every NUL replaced by U+FFFD, as the byte policy reads one.
fn no_nul(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// Keep rejections; a line rejected before is updated (reason, when, how
/// many times) rather than duplicated.
pub async fn upsert(conn: &mut PgConnection, rows: &[NewRejection]) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    // In the order of the lines they were read from (a batch keeps its
    // malformed lines apart from its refused jobs), so that ids grow with
    // the lines: by the number ending each `file:line` (`file:jobs[N]`).
    let mut sorted: Vec<&NewRejection> = rows.iter().collect();
    sorted.sort_by_key(|r| position(&r.source_ref));
    let rows = sorted;
    let format: Vec<SourceFormat> = rows.iter().map(|r| r.source_format).collect();
    // PostgreSQL text cannot hold NUL: a job key or reason read from a
    // record's decoded text (`"cluster": "a\u0000b"`) may. The exact bytes
    // are kept in `raw_bytes` where it matters.
    let source: Vec<String> = rows.iter().map(|r| no_nul(&r.source_ref)).collect();
    let source: Vec<&str> = source.iter().map(String::as_str).collect();
    let options: Vec<serde_json::Value> = rows.iter().map(|r| r.read_options.clone()).collect();
    let raw: Vec<String> = rows.iter().map(|r| no_nul(&r.raw)).collect();
    let raw: Vec<&str> = raw.iter().map(String::as_str).collect();
    let hash: Vec<Vec<u8>> = rows.iter().map(|r| r.raw_sha256.clone()).collect();
    let bytes: Vec<Option<Vec<u8>>> = rows.iter().map(|r| r.raw_bytes.clone()).collect();
    let kind: Vec<RejectKind> = rows.iter().map(|r| r.kind).collect();
    let reason: Vec<String> = rows.iter().map(|r| no_nul(&r.reason)).collect();
    let reason: Vec<&str> = reason.iter().map(String::as_str).collect();
    let key: Vec<Option<String>> = rows.iter().map(|r| r.job_key.as_deref().map(no_nul)).collect();
    sqlx::query!(
        "INSERT INTO rejected_record (source_format, source_ref, read_options, raw, raw_sha256, kind, reason, job_key, raw_bytes)
         -- In the batch's order (its lines' order), so that ids grow with the
         -- lines; a line given twice is kept once, at its first place.
         SELECT f, s, o, r, h, k, re, jk, rb
           FROM (SELECT DISTINCT ON (f, h) f, s, o, r, h, k, re, jk, rb, n
                   FROM UNNEST($1::text[], $2::text[], $3::jsonb[], $4::text[], $5::bytea[], $6::text[], $7::text[],
                               $8::text[], $9::bytea[]) WITH ORDINALITY
                        AS u(f, s, o, r, h, k, re, jk, rb, n)
                  ORDER BY f, h, n) d
          ORDER BY n
         ON CONFLICT (source_format, raw_sha256) DO UPDATE
            SET source_ref = EXCLUDED.source_ref, read_options = EXCLUDED.read_options, kind = EXCLUDED.kind,
                reason = EXCLUDED.reason, job_key = EXCLUDED.job_key, last_seen_at = now(),
                times_seen = rejected_record.times_seen + 1,
                -- Read again: open again, unless it was dismissed or its run
                -- was recorded by another path (migration 0024).
                -- (only while it is rejected for the same reason: a line that
                -- now conflicts, say, is open again).
                resolved_at = CASE WHEN rejected_record.resolution = 'dismissed'
                                     OR (rejected_record.resolution = 'recorded_elsewhere'
                                         AND EXCLUDED.kind = rejected_record.kind AND EXCLUDED.kind <> 'conflict')
                                   THEN rejected_record.resolved_at END,
                resolution = CASE WHEN rejected_record.resolution = 'dismissed'
                                    OR (rejected_record.resolution = 'recorded_elsewhere'
                                        AND EXCLUDED.kind = rejected_record.kind AND EXCLUDED.kind <> 'conflict')
                                  THEN rejected_record.resolution END,
                resolved_by = CASE WHEN rejected_record.resolution = 'dismissed' THEN rejected_record.resolved_by END,
                resolution_note = CASE WHEN rejected_record.resolution = 'dismissed' THEN rejected_record.resolution_note END,
                resolved_record_id = CASE WHEN rejected_record.resolution = 'dismissed'
                                            OR (rejected_record.resolution = 'recorded_elsewhere'
                                                AND EXCLUDED.kind = rejected_record.kind AND EXCLUDED.kind <> 'conflict')
                                          THEN rejected_record.resolved_record_id END",
        &format as &[SourceFormat],
        &source as &[&str],
        &options,
        &raw as &[&str],
        &hash,
        &kind as &[RejectKind],
        &reason as &[&str],
        &key as &[Option<String>],
        &bytes as &[Option<Vec<u8>>],
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Mark the rejected records of these lines resolved (they are now recorded;
/// also a dismissed one, which keeps who dismissed it and why), naming the
/// job record each line became or repeated. The database checks the proof
/// (migration 0017); a resolution it would not accept is left open.
pub async fn resolve(
    conn: &mut PgConnection,
    source_format: &[SourceFormat],
    raw_sha256: &[Vec<u8>],
    resolution: &[&str],
    record: &[i64],
) -> Result<u64, sqlx::Error> {
    if raw_sha256.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query!(
        "UPDATE rejected_record r SET resolved_at = now(), resolution = u.res, resolved_record_id = u.rec
           FROM UNNEST($1::text[], $2::bytea[], $3::text[], $4::bigint[]) AS u(f, h, res, rec)
          WHERE r.source_format = u.f AND r.raw_sha256 = u.h
            AND (r.resolved_at IS NULL OR r.resolution = 'dismissed')
            AND hl_resolution_check(r.id, r.source_format, r.raw_sha256, r.job_key, u.res, u.rec,
                                    r.resolved_by, r.resolution_note)",
        source_format as &[SourceFormat],
        raw_sha256,
        resolution as &[&str],
        record,
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// An open rejection of one of the jobs just recorded (by job key).
#[derive(Debug, Clone)]
pub struct OpenOfJob {
    pub id: i64,
    pub source_format: SourceFormat,
    pub read_options: serde_json::Value,
    pub raw: String,
    pub raw_bytes: Option<Vec<u8>>,
    pub job_key: String,
    /// Where it was read (`file:line`).
    pub source_ref: String,
}

/// The open rejections whose job key is one of `keys` (compared ignoring
/// case), but for conflicts: a conflict is the same run with another
/// charge, open until it is superseded or dismissed.
pub async fn open_of_jobs(conn: &mut PgConnection, keys: &[String]) -> Result<Vec<OpenOfJob>, sqlx::Error> {
    let lower: Vec<String> = keys.iter().map(|k| k.to_lowercase()).collect();
    sqlx::query_as!(
        OpenOfJob,
        r#"SELECT id, source_format AS "source_format: SourceFormat", read_options, raw, raw_bytes,
                  job_key AS "job_key!", source_ref
             FROM rejected_record
            WHERE resolved_at IS NULL AND lower(job_key) = ANY($1) AND kind <> 'conflict'"#,
        &lower
    )
    .fetch_all(&mut *conn)
    .await
}

/// Resolve rejections as `recorded_elsewhere`: their run is charged by the
/// job record named (from another source or other bytes). The database
/// checks the record is of the same job (migration 0024).
pub async fn resolve_elsewhere(conn: &mut PgConnection, ids: &[i64], records: &[i64]) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE rejected_record r SET resolved_at = now(), resolution = 'recorded_elsewhere', resolved_record_id = u.rec
           FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, rec)
          WHERE r.id = u.id AND r.resolved_at IS NULL
            AND hl_resolution_check(r.id, r.source_format, r.raw_sha256, r.job_key, 'recorded_elsewhere', u.rec,
                                    r.resolved_by, r.resolution_note)",
        ids,
        records
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// The projects records were reassigned to (migration 0025), for the ones
/// among `(format, sha256)` that have one: (format, sha256, project code).
pub async fn reassigned(
    conn: &mut PgConnection,
    formats: &[SourceFormat],
    hashes: &[Vec<u8>],
) -> Result<Vec<(SourceFormat, Vec<u8>, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT a.source_format AS "source_format!: SourceFormat", a.raw_sha256 AS "raw_sha256!", p.code AS "code!"
             FROM UNNEST($1::text[], $2::bytea[]) AS u(f, h)
             JOIN project_reassignment a ON a.source_format = u.f AND a.raw_sha256 = u.h
             JOIN project p ON p.id = a.project_id"#,
        formats as &[SourceFormat],
        hashes
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.source_format, r.raw_sha256, r.code))
        .collect())
}

/// A reassignment as `audit --deep` reads it: the record (format, sha256
/// in hex), the account it names, the project it is charged to.
#[derive(Debug, Clone)]
pub struct Reassignment {
    pub source_format: String,
    pub raw_sha256: String,
    pub from_account: Option<String>,
    pub project: String,
    pub job_key: Option<String>,
    pub author: String,
    pub reason: String,
}

/// Every reassignment (through the audit view: auditors may read it).
pub async fn reassignments(conn: &mut PgConnection) -> Result<Vec<Reassignment>, sqlx::Error> {
    sqlx::query_as!(
        Reassignment,
        r#"SELECT source_format AS "source_format!", raw_sha256 AS "raw_sha256!", from_account,
                  project AS "project!", job_key, author AS "author!", reason AS "reason!"
             FROM audit.project_reassignments ORDER BY id"#
    )
    .fetch_all(&mut *conn)
    .await
}

/// Record that an open rejection for an unknown project is charged to
/// `project` instead (the database checks the rejection and its record).
#[allow(clippy::too_many_arguments)]
pub async fn insert_reassignment(
    conn: &mut PgConnection,
    rejection: i64,
    source_format: SourceFormat,
    raw_sha256: &[u8],
    from_account: Option<&str>,
    project: crate::ids::ProjectId,
    author: &str,
    reason: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO project_reassignment (rejected_record_id, source_format, raw_sha256, from_account, project_id,
                                           author, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        rejection,
        source_format as SourceFormat,
        raw_sha256,
        from_account,
        project.0,
        author,
        reason
    )
    .fetch_one(&mut *conn)
    .await
}

/// One rejection with what a reassignment needs, when it is open.
pub async fn open_one(conn: &mut PgConnection, id: i64) -> Result<Option<Rejected>, sqlx::Error> {
    sqlx::query_as!(
        Rejected,
        r#"SELECT id, source_format AS "source_format: SourceFormat", source_ref, read_options, raw, raw_bytes, kind, reason,
                job_key, first_seen_at, last_seen_at,
                times_seen, resolved_at, resolution, resolved_by, resolution_note
           FROM rejected_record WHERE id = $1 AND resolved_at IS NULL FOR UPDATE"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The hash a rejection is kept under.
pub async fn raw_sha256(conn: &mut PgConnection, id: i64) -> Result<Vec<u8>, sqlx::Error> {
    sqlx::query_scalar!("SELECT raw_sha256 FROM rejected_record WHERE id = $1", id)
        .fetch_one(&mut *conn)
        .await
}

/// An open malformed rejection of a line of a file (`open_malformed_of`).
pub struct OpenMalformed {
    pub id: i64,
    /// `file:line`.
    pub source_ref: String,
    /// The text kept (for a line cut short, what was read of it).
    pub raw: String,
    pub job_key: Option<String>,
    /// Kept as cut short (`cut_short` in its options).
    pub cut_short: bool,
}

/// The open malformed rejections of lines read from `name`: lines cut
/// short, and lines read with options that could not read them (a
/// headerless dump without `--fields`).
pub async fn open_malformed_of(conn: &mut PgConnection, name: &str) -> Result<Vec<OpenMalformed>, sqlx::Error> {
    sqlx::query_as!(
        OpenMalformed,
        r#"SELECT id, source_ref, raw, job_key,
                  coalesce((read_options ->> 'cut_short')::boolean, false) AS "cut_short!"
             FROM rejected_record
            WHERE resolved_at IS NULL AND kind = 'malformed' AND left(source_ref, length($1) + 1) = $1 || ':'"#,
        name
    )
    .fetch_all(&mut *conn)
    .await
}

/// Mark rejected records resolved as skipped: read again, they hold nothing
/// to charge.
pub async fn resolve_skipped(conn: &mut PgConnection, ids: &[i64], by: &str) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE rejected_record SET resolved_at = now(), resolution = 'skipped', resolved_by = $2
          WHERE id = ANY($1) AND resolved_at IS NULL",
        ids,
        by
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// A rejected record as stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rejected {
    pub id: i64,
    pub source_format: SourceFormat,
    pub source_ref: String,
    pub read_options: serde_json::Value,
    pub raw: String,
    #[serde(skip)]
    pub raw_bytes: Option<Vec<u8>>,
    pub kind: String,
    pub reason: String,
    pub job_key: Option<String>,
    pub first_seen_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub times_seen: i32,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolution: Option<String>,
    /// Who dismissed it.
    pub resolved_by: Option<String>,
    /// Why it was dismissed.
    pub resolution_note: Option<String>,
}

/// Rejected records after `after_id`, oldest first; unresolved only unless
/// `all`; only those of `ids` when it is not empty.
pub async fn list(
    conn: &mut PgConnection,
    after_id: i64,
    limit: i64,
    all: bool,
    ids: &[i64],
) -> Result<Vec<Rejected>, sqlx::Error> {
    sqlx::query_as!(
        Rejected,
        r#"SELECT id, source_format AS "source_format: SourceFormat", source_ref, read_options, raw, raw_bytes, kind, reason,
                job_key, first_seen_at, last_seen_at,
                times_seen, resolved_at, resolution, resolved_by, resolution_note
           FROM rejected_record
          WHERE id > $1 AND ($3 OR resolved_at IS NULL) AND (cardinality($4::bigint[]) = 0 OR id = ANY ($4))
          ORDER BY id LIMIT $2"#,
        after_id,
        limit,
        all,
        ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// Which open rejections to dismiss: every condition given must hold.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub ids: Vec<i64>,
    /// The file they were read from (`source_ref` is `FILE:LINE`).
    pub file: Option<String>,
    pub source_format: Option<String>,
    pub kind: Option<String>,
}

/// A rejection as dismissed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Dismissed {
    pub id: i64,
    pub source_ref: String,
    pub kind: String,
    pub job_key: Option<String>,
}

/// Dismiss the open rejections `selection` names, with who and why.
pub async fn dismiss(
    conn: &mut PgConnection,
    selection: &Selection,
    author: &str,
    reason: &str,
) -> Result<Vec<Dismissed>, sqlx::Error> {
    sqlx::query_as!(
        Dismissed,
        r#"UPDATE rejected_record
              SET resolved_at = now(), resolution = 'dismissed', resolved_by = $5, resolution_note = $6
            WHERE resolved_at IS NULL
              AND (cardinality($1::bigint[]) = 0 OR id = ANY ($1))
              AND ($2::text IS NULL OR left(source_ref, length($2) + 1) = $2 || ':')
              AND ($3::text IS NULL OR source_format = $3)
              AND ($4::text IS NULL OR kind = $4)
        RETURNING id, source_ref, kind, job_key"#,
        &selection.ids,
        selection.file.as_deref(),
        selection.source_format.as_deref(),
        selection.kind.as_deref(),
        author,
        reason,
    )
    .fetch_all(&mut *conn)
    .await
}

/// Of these ids, the ones that are not open rejections (unknown, or resolved).
pub async fn not_open(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT u.id AS "id!" FROM UNNEST($1::bigint[]) AS u(id)
            WHERE NOT EXISTS (SELECT 1 FROM rejected_record r WHERE r.id = u.id AND r.resolved_at IS NULL)
            ORDER BY u.id"#,
        ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// The rejections an audit lists: how many are open (and since when), how
/// many were dismissed, and how many were resolved before resolutions were
/// proven (migration 0017). Read from the audit schema.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RejectionSummary {
    pub open: i64,
    pub oldest_open: Option<DateTime<Utc>>,
    pub dismissed: i64,
    pub unverified: i64,
}

pub async fn summary(conn: &mut PgConnection) -> Result<RejectionSummary, sqlx::Error> {
    sqlx::query_as!(
        RejectionSummary,
        r#"SELECT count(*) FILTER (WHERE status = 'open') AS "open!",
                  min(first_seen_at) FILTER (WHERE status = 'open') AS oldest_open,
                  count(*) FILTER (WHERE status = 'dismissed') AS "dismissed!",
                  count(*) FILTER (WHERE status NOT IN ('open', 'dismissed') AND resolution_holds IS NULL) AS "unverified!"
             FROM audit.rejections"#
    )
    .fetch_one(&mut *conn)
    .await
}
