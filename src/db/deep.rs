//! What `audit --deep` reads: the kept records through the `audit` views
//! of migration 0020 (so the auditor role can run it), page by page.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::domain::kinds::SourceFormat;
use crate::domain::posting::RecordKind;

/// One job record as stored, with its raw record and how it was read.
#[derive(Debug, Clone)]
pub struct KeptRecord {
    pub record_id: i64,
    pub kind: RecordKind,
    pub revision: i32,
    pub cluster: String,
    pub time_zone: String,
    pub scheduler_job_id: String,
    pub array_index: Option<i32>,
    pub submitted_at: Option<DateTime<Utc>>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub run_started_at: DateTime<Utc>,
    pub run_cluster_holds: bool,
    pub project: String,
    pub queue: Option<String>,
    pub nodes: i32,
    pub cores: i32,
    pub memory_bytes: Option<i64>,
    pub gpus: i32,
    pub charge_fingerprint: Vec<u8>,
    pub content_fingerprint: Vec<u8>,
    pub source_format: SourceFormat,
    pub source_ref: String,
    pub raw: String,
    pub raw_bytes: Option<Vec<u8>>,
    /// How it was read: the JSON text of its read options.
    pub read_options: Option<String>,
    /// Recorded since job records keep their read options (migration 0020).
    pub options_kept: bool,
    pub job_entries: i64,
    pub cores_per_node: Option<i32>,
    /// The month its charges were archived in (migration 0037): its charge
    /// is in that month's archive file.
    pub archived_in: Option<chrono::NaiveDate>,
    /// The SHA-256 (hex) of its raw text, when that text was moved into
    /// an archived month's file (migration 0047): `raw` is then empty, and
    /// the text is read again from the file, if at all.
    pub archived_sha256: Option<String>,
    /// Seconds suspended, not charged (migration 0060).
    pub suspended_seconds: i32,
}

impl KeptRecord {
    /// Its raw text is in an archive file, not here.
    pub fn raw_archived(&self) -> bool {
        self.archived_sha256.is_some()
    }
}

/// The records after `after_id`, at most `limit`, in id order.
pub async fn records(conn: &mut PgConnection, after_id: i64, limit: i64) -> Result<Vec<KeptRecord>, sqlx::Error> {
    sqlx::query_as!(
        KeptRecord,
        r#"SELECT record_id AS "record_id!", kind AS "kind!: RecordKind", revision AS "revision!", cluster AS "cluster!",
                  time_zone AS "time_zone!", scheduler_job_id AS "scheduler_job_id!", array_index,
                  submitted_at, started_at AS "started_at!", ended_at AS "ended_at!",
                  run_started_at AS "run_started_at!", run_cluster_holds AS "run_cluster_holds!",
                  project AS "project!", queue, nodes AS "nodes!", cores AS "cores!", memory_bytes, gpus AS "gpus!",
                  charge_fingerprint AS "charge_fingerprint!", content_fingerprint AS "content_fingerprint!",
                  source_format AS "source_format!: SourceFormat", source_ref AS "source_ref!", raw AS "raw!", raw_bytes,
                  read_options::text AS read_options, coalesce(options_kept, false) AS "options_kept!", job_entries AS "job_entries!",
                  cores_per_node, archived_in,
                  (SELECT a.raw_sha256 FROM audit.archived_records a WHERE a.record_id = job_records.record_id)
                      AS archived_sha256,
                  suspended_seconds AS "suspended_seconds!"
             FROM audit.job_records
            WHERE record_id > $1
            ORDER BY record_id
            LIMIT $2"#,
        after_id,
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

/// The records `ids`, as [`records`] reads them (whose raw text is in an
/// archive file: `audit --deep --archive`).
pub async fn records_by_id(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<KeptRecord>, sqlx::Error> {
    sqlx::query_as!(
        KeptRecord,
        r#"SELECT record_id AS "record_id!", kind AS "kind!: RecordKind", revision AS "revision!", cluster AS "cluster!",
                  time_zone AS "time_zone!", scheduler_job_id AS "scheduler_job_id!", array_index,
                  submitted_at, started_at AS "started_at!", ended_at AS "ended_at!",
                  run_started_at AS "run_started_at!", run_cluster_holds AS "run_cluster_holds!",
                  project AS "project!", queue, nodes AS "nodes!", cores AS "cores!", memory_bytes, gpus AS "gpus!",
                  charge_fingerprint AS "charge_fingerprint!", content_fingerprint AS "content_fingerprint!",
                  source_format AS "source_format!: SourceFormat", source_ref AS "source_ref!", raw AS "raw!", raw_bytes,
                  read_options::text AS read_options, coalesce(options_kept, false) AS "options_kept!", job_entries AS "job_entries!",
                  cores_per_node, archived_in,
                  (SELECT a.raw_sha256 FROM audit.archived_records a WHERE a.record_id = job_records.record_id)
                      AS archived_sha256,
                  suspended_seconds AS "suspended_seconds!"
             FROM audit.job_records
            WHERE record_id = ANY($1)"#,
        ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// A run that holds no record.
#[derive(Debug, Clone)]
pub struct EmptyRun {
    pub run_id: i64,
    pub cluster: String,
    pub scheduler_job_id: String,
    pub array_index: Option<i32>,
    pub started_at: DateTime<Utc>,
    /// A rejection names the job: a run left for a refused job.
    pub rejected: bool,
}

pub async fn runs_without_records(conn: &mut PgConnection) -> Result<Vec<EmptyRun>, sqlx::Error> {
    sqlx::query_as!(
        EmptyRun,
        r#"SELECT run_id AS "run_id!", cluster AS "cluster!", scheduler_job_id AS "scheduler_job_id!", array_index,
                  started_at AS "started_at!", rejected AS "rejected!"
             FROM audit.runs_without_records
            ORDER BY run_id"#
    )
    .fetch_all(&mut *conn)
    .await
}
