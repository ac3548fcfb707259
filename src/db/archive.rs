//! Archived months (migration 0037): what a month's archive file is written
//! from — the items its seal is computed over, exactly as the database
//! hashes them, and what the seal leaves out — and the archive itself
//! (`hl_archive_months`, which records the months and deletes their
//! entries).

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use crate::ids::JobId;

/// A month recorded as archived.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ArchivedPeriod {
    pub period: NaiveDate,
    pub archived_at: DateTime<Utc>,
    pub archived_by: String,
    pub file_name: String,
    #[serde(serialize_with = "hex_bytes")]
    pub file_sha256: Vec<u8>,
    #[serde(serialize_with = "hex_bytes")]
    pub seal: Vec<u8>,
    pub entry_count: i64,
    pub total: Decimal,
}

fn hex_bytes<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(b))
}

/// The month's archive record, if it is archived.
pub async fn archived(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<ArchivedPeriod>, sqlx::Error> {
    sqlx::query_as!(
        ArchivedPeriod,
        "SELECT period, archived_at, archived_by, file_name, file_sha256, seal, entry_count, total
           FROM archived_period WHERE period = $1",
        period
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The closed months not archived, through `through`, oldest first.
pub async fn archivable(conn: &mut PgConnection, through: NaiveDate) -> Result<Vec<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT c.period FROM closed_period c
          WHERE c.period <= $1 AND NOT EXISTS (SELECT 1 FROM archived_period a WHERE a.period = c.period)
          ORDER BY c.period",
        through
    )
    .fetch_all(&mut *conn)
    .await
}

/// The first item of a closed month's seal: its header, as the seal
/// function of its algorithm writes it (migrations 0006 and 0018), from the
/// seal recorded for the month before it.
pub async fn seal_header(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT hl_seal_header(cp.seal_algorithm, cp.period, b.seal, cp.currency, cp.closed_by, cp.closed_at) AS "t!"
             FROM closed_period cp
             LEFT JOIN closed_period b ON b.period = (cp.period - interval '1 month')::date
            WHERE cp.period = $1"#,
        period
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The seal items of a month's entries after entry `after`, in id order,
/// at most `limit`: (id, the entry as the seal hashes it).
pub async fn entry_items(
    conn: &mut PgConnection,
    period: NaiveDate,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT e.id, hl_seal_entry_item(cp.seal_algorithm, e) AS "t!"
             FROM ledger_entry e JOIN closed_period cp ON cp.period = e.period
            WHERE e.period = $1 AND e.id > $2 ORDER BY e.id LIMIT $3"#,
        period,
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.t)).collect())
}

/// The seal items of a month's statements (seals v2 and v3 seal them; v1
/// did not), in number order.
pub async fn statement_items(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT hl_seal_statement_item(cp.seal_algorithm, s) AS "t!"
             FROM statement s JOIN closed_period cp ON cp.period = s.period
            WHERE s.period = $1 AND cp.seal_algorithm <> 'sha256-chain-v1'
            ORDER BY s.number"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// What the seal leaves out of a month's entries, kept in the file beside
/// it: each entry's charging rules and discount, after entry `after`, and
/// (with `after` = 0) the storage segments of the month's charges. One JSON
/// object per line.
pub async fn unsealed(
    conn: &mut PgConnection,
    period: NaiveDate,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT e.id,
                  jsonb_build_object('entry', e.id, 'charging_rules', e.charging_rules, 'discount_id', e.discount_id,
                                     'segments', (SELECT jsonb_agg(to_jsonb(s) - 'ledger_entry_id' ORDER BY s.first_day)
                                                    FROM storage_charge_segment s WHERE s.ledger_entry_id = e.id))::text
                      AS "t!"
             FROM ledger_entry e
            WHERE e.period = $1 AND e.id > $2 ORDER BY e.id LIMIT $3"#,
        period,
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.t)).collect())
}

/// Archive closed months (in order) whose files are written and checked:
/// the database records them and deletes their entries, in one go (or
/// refuses, HL002, saying why).
pub async fn archive_months(
    conn: &mut PgConnection,
    periods: &[NaiveDate],
    by: &str,
    file_names: &[String],
    file_sha256s: &[Vec<u8>],
) -> Result<Vec<ArchivedPeriod>, sqlx::Error> {
    sqlx::query_as!(
        ArchivedPeriod,
        r#"SELECT period AS "period!", archived_at AS "archived_at!", archived_by AS "archived_by!",
                  file_name AS "file_name!", file_sha256 AS "file_sha256!", seal AS "seal!",
                  entry_count AS "entry_count!", total AS "total!"
             FROM hl_archive_months($1, $2, $3, $4)"#,
        periods,
        by,
        file_names,
        file_sha256s
    )
    .fetch_all(&mut *conn)
    .await
}

/// The latest month after `period` tied to it by a correction: holding a
/// correction of one of its entries, or an entry one of its corrections
/// names (a supersede posts its reversals into the new record's month).
pub async fn latest_correction(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT max(x.p) FROM (SELECT r.period AS p FROM ledger_entry o JOIN ledger_entry r ON r.corrects_id = o.id
                                WHERE o.period = $1 AND r.period > $1
                               UNION ALL
                               SELECT o.period FROM ledger_entry r JOIN ledger_entry o ON o.id = r.corrects_id
                                WHERE r.period = $1 AND o.period > $1) x",
        period
    )
    .fetch_one(&mut *conn)
    .await
}

/// The lock only one `archive` run holds at a time (for its session): a
/// key of its own (…809 is the period lock, …810 the rules', …811 storage
/// billing's).
pub const ARCHIVE_LOCK: i64 = 7_523_094_288_207_667_812;

/// Take the archive lock for this session, if no other run holds it.
pub async fn try_lock(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "locked!""#, ARCHIVE_LOCK)
        .fetch_one(&mut *conn)
        .await
}

/// Every closed month as `verify --archive` compares a file with it
/// (`audit.archives`, which the auditor may read).
#[derive(Debug, Clone)]
pub struct MonthRecord {
    pub period: NaiveDate,
    pub recorded_seal: String,
    pub recorded_entries: i64,
    pub recorded_total: Decimal,
    pub closed_at: DateTime<Utc>,
    pub seal_algorithm: Option<String>,
    pub closed_by: Option<String>,
    pub currency: Option<String>,
    pub previous_seal: Option<String>,
    pub archived_to: Option<String>,
    pub file_sha256: Option<String>,
    pub archived_seal: Option<String>,
}

pub async fn month_records(conn: &mut PgConnection) -> Result<Vec<MonthRecord>, sqlx::Error> {
    sqlx::query_as!(
        MonthRecord,
        r#"SELECT period AS "period!", recorded_seal AS "recorded_seal!", recorded_entries AS "recorded_entries!",
                  recorded_total AS "recorded_total!", closed_at AS "closed_at!", seal_algorithm, closed_by,
                  currency, previous_seal, archived_to, file_sha256, archived_seal
             FROM audit.archives ORDER BY period"#
    )
    .fetch_all(&mut *conn)
    .await
}

/// The job records among `records` whose charges are archived, with the
/// month they were archived in.
pub async fn archived_charges(conn: &mut PgConnection, records: &[i64]) -> Result<Vec<(i64, NaiveDate)>, sqlx::Error> {
    let rows = sqlx::query!(
        "SELECT job_record_id, period FROM archived_charge WHERE job_record_id = ANY($1)",
        records
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.job_record_id, r.period)).collect())
}

/// The first archived month holding charges of a run's records.
pub async fn archived_month_of_run(conn: &mut PgConnection, run: JobId) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT min(ac.period) FROM archived_charge ac JOIN job_record r ON r.id = ac.job_record_id WHERE r.job_id = $1",
        run as JobId
    )
    .fetch_one(&mut *conn)
    .await
}

/// Whether any month is archived.
pub async fn any_archived(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM archived_period) AS "any!""#)
        .fetch_one(&mut *conn)
        .await
}

/// The job records whose raw text goes into month `period`'s file
/// (migration 0047): those whose charges the month's archive takes out of
/// the ledger, each with its first month (as `hl_archive_months` records
/// them in `archived_charge`). Read before the month is archived, in id
/// order.
pub async fn raw_records_of(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT e.job_record_id AS "id!"
             FROM ledger_entry e
            WHERE e.period = $1 AND e.job_record_id IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM ledger_entry x WHERE x.job_record_id = e.job_record_id AND x.period < $1)
              AND NOT EXISTS (SELECT 1 FROM archived_charge ac WHERE ac.job_record_id = e.job_record_id)
            ORDER BY 1"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// A job record's raw text as the database holds it.
#[derive(Debug, Clone)]
pub struct RawText {
    pub id: i64,
    pub raw: String,
    pub raw_bytes: Option<Vec<u8>>,
}

/// The raw text of `ids` (in id order).
pub async fn raw_texts(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<RawText>, sqlx::Error> {
    sqlx::query_as!(
        RawText,
        "SELECT id, raw, raw_bytes FROM job_record WHERE id = ANY($1) ORDER BY id",
        ids
    )
    .fetch_all(&mut *conn)
    .await
}

/// Record the digests of an archived month's records and empty their raw
/// text (`hl_archive_records`, in the transaction that archived the month):
/// how many.
pub async fn archive_records(
    conn: &mut PgConnection,
    period: NaiveDate,
    ids: &[i64],
    digests: &[Vec<u8>],
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT hl_archive_records($1, $2, $3) AS "n!""#, period, ids, digests)
        .fetch_one(&mut *conn)
        .await
}

/// The records whose raw text is in month `period`'s file, after record
/// `after`, at most `limit`: id and SHA-256 (hex), in id order
/// (`audit.archived_records`, which the auditor may read).
pub async fn archived_record_digests(
    conn: &mut PgConnection,
    period: NaiveDate,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT record_id AS "id!", raw_sha256 AS "sha256!" FROM audit.archived_records
            WHERE period = $1 AND record_id > $2 ORDER BY record_id LIMIT $3"#,
        period,
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.sha256)).collect())
}

/// The months archived before their records' raw text could leave with
/// them (migration 0047), through `through`, oldest first: archived, with
/// charged records, none of whose text was archived, and no records' file
/// of their own yet (migration 0048).
pub async fn months_with_records_left(
    conn: &mut PgConnection,
    through: NaiveDate,
) -> Result<Vec<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT a.period AS "period!" FROM archived_period a
            WHERE a.period <= $1
              AND EXISTS (SELECT 1 FROM archived_charge ac WHERE ac.period = a.period)
              AND NOT EXISTS (SELECT 1 FROM archived_record r WHERE r.period = a.period)
              AND NOT EXISTS (SELECT 1 FROM archived_record_file f WHERE f.period = a.period)
            ORDER BY 1"#,
        through
    )
    .fetch_all(&mut *conn)
    .await
}

/// The job records whose charges month `period`'s archive took
/// (`archived_charge`), in id order: those whose text its records' file
/// holds.
pub async fn archived_charge_records(conn: &mut PgConnection, period: NaiveDate) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT job_record_id AS "id!" FROM archived_charge WHERE period = $1 ORDER BY 1"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}

/// Record a month's records' file (in the transaction that then empties
/// the records, `hl_archive_records`).
pub async fn record_file(
    conn: &mut PgConnection,
    period: NaiveDate,
    name: &str,
    sha256: &[u8],
    records: i64,
    by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO archived_record_file (period, file_name, file_sha256, records, archived_by)
         VALUES ($1, $2, $3, $4, $5)",
        period,
        name,
        sha256,
        records,
        by
    )
    .execute(&mut *conn)
    .await
    .map(|_| ())
}

/// A month's records' file, as recorded (`audit.archived_record_files`,
/// which the auditor may read).
#[derive(Debug, Clone)]
pub struct RecordFile {
    pub period: NaiveDate,
    pub file_name: String,
    /// Hex.
    pub file_sha256: String,
    pub records: i64,
}

/// Every month's records' file, by month.
pub async fn record_files(conn: &mut PgConnection) -> Result<Vec<RecordFile>, sqlx::Error> {
    sqlx::query_as!(
        RecordFile,
        r#"SELECT period AS "period!", file_name AS "file_name!", file_sha256 AS "file_sha256!",
                  records AS "records!"
             FROM audit.archived_record_files ORDER BY period"#
    )
    .fetch_all(&mut *conn)
    .await
}
