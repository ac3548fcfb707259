//! Ledger entries: post in batches, find what a correction must reverse,
//! and the state of the accounting periods.

use chrono::NaiveDate;
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use crate::domain::kinds::{EntryKind, SourceFormat};
use crate::domain::pricing::ChargingRules;
use crate::domain::units::Metric;
use crate::ids::{DiscountId, JobRecordId, LedgerEntryId, ProjectId, RateCardId};

/// A transaction for posting, with the posting locks held: closing a month
/// waits for it, and it waits for a month being closed (and for a
/// configuration being applied). The locks are taken in the statement
/// right after `BEGIN`, inside the transaction: were they taken in the
/// `BEGIN`'s own round trip, a lock wait that failed (cancelled, a
/// `lock_timeout`) would leave the connection in an aborted transaction
/// that sqlx 0.8 neither rolls back nor keeps out of the pool, and every
/// posting that took it next failed ("current transaction is aborted"):
/// good jobs kept as rejected.
///
/// The transaction is READ COMMITTED whatever the server's default.
///
/// Also turns JIT compilation off for the transaction: a posting runs a
/// handful of statements over one batch, and right after a large import,
/// statistics not yet refreshed made PostgreSQL estimate the lookup of a
/// batch's records above `jit_above_cost` and compile it, ≈ 40 ms per batch
/// of 2,000 against ≈ 8 ms of work (auto_explain; a re-import of 20,000
/// jobs 1.1 s against 0.34 s).
pub async fn begin_posting(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    let mut tx = crate::db::begin(pool).await?;
    // Dropped on failure, the transaction is rolled back before its
    // connection goes back to the pool.
    sqlx::query(
        "SELECT set_config('jit', 'off', true), pg_advisory_xact_lock_shared(hl_period_lock_key()), \
         pg_advisory_xact_lock_shared($1)",
    )
    .bind(crate::db::RULES_LOCK)
    .execute(&mut *tx)
    .await?;
    Ok(tx)
}

/// What a recording transaction reads once its locks are held (one round
/// trip): the rules' version, the latest closed month, and whether an
/// open (or dismissed) rejection could be resolved by the batch: one of
/// the same bytes (`formats`, `hashes`) or, open, of the same job (`keys`,
/// lower case).
pub struct PostingState {
    pub rules_version: i64,
    pub last_closed: Option<NaiveDate>,
    pub rejections_to_resolve: bool,
    /// The positions (0-based) of the batch's records that were reassigned
    /// to a project (`rejected reassign`, migration 0025): read with that
    /// project also once their own account exists.
    pub reassigned: Vec<usize>,
}

pub async fn posting_state(
    conn: &mut PgConnection,
    formats: &[SourceFormat],
    hashes: &[Vec<u8>],
    keys: &[String],
) -> Result<PostingState, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT (SELECT version FROM rules_version) AS "version!",
                  (SELECT max(period) FROM closed_period) AS last_closed,
                  (EXISTS (SELECT 1 FROM UNNEST($1::text[], $2::bytea[]) AS u(f, h)
                             JOIN rejected_record r ON r.source_format = u.f AND r.raw_sha256 = u.h
                            WHERE r.resolved_at IS NULL OR r.resolution = 'dismissed')
                   OR EXISTS (SELECT 1 FROM rejected_record
                               WHERE resolved_at IS NULL AND lower(job_key) = ANY($3) AND kind <> 'conflict'))
                  AS "to_resolve!",
                  ARRAY(SELECT u.n - 1 FROM UNNEST($1::text[], $2::bytea[]) WITH ORDINALITY AS u(f, h, n)
                          JOIN project_reassignment a ON a.source_format = u.f AND a.raw_sha256 = u.h)
                  AS "reassigned!""#,
        formats as &[SourceFormat],
        hashes,
        keys
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(PostingState {
        rules_version: row.version,
        last_closed: row.last_closed,
        rejections_to_resolve: row.to_resolve,
        reassigned: row
            .reassigned
            .into_iter()
            .filter_map(|n| usize::try_from(n).ok())
            .collect(),
    })
}

/// The latest closed month (first day), if any month is closed.
pub async fn last_closed(conn: &mut PgConnection) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!("SELECT max(period) FROM closed_period")
        .fetch_one(&mut *conn)
        .await
}

/// The version of the pricing rules (bumped by every configuration change).
pub async fn rules_version(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!("SELECT version FROM rules_version")
        .fetch_one(&mut *conn)
        .await
}

pub use crate::domain::entries::{NewEntry, PostedEntry as Posted};

/// Post entries in one statement, in the given order.
pub async fn insert(conn: &mut PgConnection, entries: &[NewEntry], author: &str) -> Result<u64, sqlx::Error> {
    if entries.is_empty() {
        return Ok(0);
    }
    let period: Vec<NaiveDate> = entries.iter().map(|e| e.period).collect();
    let project: Vec<i64> = entries.iter().map(|e| e.project_id.0).collect();
    let kind: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
    let metric: Vec<Option<Metric>> = entries.iter().map(|e| e.metric).collect();
    let record: Vec<Option<i64>> = entries.iter().map(|e| e.job_record_id.map(|r| r.0)).collect();
    let card: Vec<Option<i64>> = entries.iter().map(|e| e.rate_card_id.map(|r| r.0)).collect();
    let corrects: Vec<Option<i64>> = entries.iter().map(|e| e.corrects_id.map(|r| r.0)).collect();
    let quantity: Vec<Decimal> = entries.iter().map(|e| e.quantity).collect();
    let rate: Vec<Decimal> = entries.iter().map(|e| e.unit_rate).collect();
    let exact: Vec<Decimal> = entries.iter().map(|e| e.amount_exact).collect();
    let amount: Vec<Decimal> = entries.iter().map(|e| e.amount).collect();
    let late: Vec<bool> = entries.iter().map(|e| e.late).collect();
    let reason: Vec<Option<String>> = entries.iter().map(|e| e.reason.clone()).collect();
    let rules: Vec<ChargingRules> = entries.iter().map(|e| e.charging_rules).collect();
    let discount: Vec<Option<i64>> = entries.iter().map(|e| e.discount_id.map(|d| d.0)).collect();
    let done = sqlx::query!(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                   quantity, unit_rate, amount_exact, amount, late, reason, charging_rules, author,
                                   discount_id)
         SELECT p, pr, k, m, jr, rc, c, q, r, x, a, l, re, v, $14, d
           FROM UNNEST($1::date[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[],
                       $8::numeric[], $9::numeric[], $10::numeric[], $11::numeric[], $12::bool[], $13::text[],
                       $15::smallint[], $16::bigint[])
                WITH ORDINALITY AS u(p, pr, k, m, jr, rc, c, q, r, x, a, l, re, v, d, i)
          ORDER BY i",
        &period,
        &project,
        &kind as &[EntryKind],
        &metric as &[Option<Metric>],
        &record as &[Option<i64>],
        &card as &[Option<i64>],
        &corrects as &[Option<i64>],
        &quantity,
        &rate,
        &exact,
        &amount,
        &late,
        &reason as &[Option<String>],
        author,
        &rules as &[ChargingRules],
        &discount as &[Option<i64>],
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Post entries in one statement, in the given order, and return their
/// ids in that order (corrections: the operator is shown them; a reversal of
/// a charge and of its refund must go in one statement for the credit guard
/// to see both).
pub async fn insert_returning(
    conn: &mut PgConnection,
    entries: &[NewEntry],
    author: &str,
) -> Result<Vec<LedgerEntryId>, sqlx::Error> {
    let period: Vec<NaiveDate> = entries.iter().map(|e| e.period).collect();
    let project: Vec<i64> = entries.iter().map(|e| e.project_id.0).collect();
    let kind: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
    let metric: Vec<Option<Metric>> = entries.iter().map(|e| e.metric).collect();
    let record: Vec<Option<i64>> = entries.iter().map(|e| e.job_record_id.map(|r| r.0)).collect();
    let card: Vec<Option<i64>> = entries.iter().map(|e| e.rate_card_id.map(|r| r.0)).collect();
    let corrects: Vec<Option<i64>> = entries.iter().map(|e| e.corrects_id.map(|r| r.0)).collect();
    let quantity: Vec<Decimal> = entries.iter().map(|e| e.quantity).collect();
    let rate: Vec<Decimal> = entries.iter().map(|e| e.unit_rate).collect();
    let exact: Vec<Decimal> = entries.iter().map(|e| e.amount_exact).collect();
    let amount: Vec<Decimal> = entries.iter().map(|e| e.amount).collect();
    let late: Vec<bool> = entries.iter().map(|e| e.late).collect();
    let reason: Vec<Option<String>> = entries.iter().map(|e| e.reason.clone()).collect();
    let rules: Vec<ChargingRules> = entries.iter().map(|e| e.charging_rules).collect();
    let discount: Vec<Option<i64>> = entries.iter().map(|e| e.discount_id.map(|d| d.0)).collect();
    let mut ids = sqlx::query_scalar!(
        r#"INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                     quantity, unit_rate, amount_exact, amount, late, reason, charging_rules, author,
                                     discount_id)
           SELECT p, pr, k, m, jr, rc, c, q, r, x, a, l, re, v, $14, d
             FROM UNNEST($1::date[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[],
                         $8::numeric[], $9::numeric[], $10::numeric[], $11::numeric[], $12::bool[], $13::text[],
                         $15::smallint[], $16::bigint[])
                  WITH ORDINALITY AS u(p, pr, k, m, jr, rc, c, q, r, x, a, l, re, v, d, i)
            ORDER BY i
           RETURNING id AS "id: LedgerEntryId""#,
        &period,
        &project,
        &kind as &[EntryKind],
        &metric as &[Option<Metric>],
        &record as &[Option<i64>],
        &card as &[Option<i64>],
        &corrects as &[Option<i64>],
        &quantity,
        &rate,
        &exact,
        &amount,
        &late,
        &reason as &[Option<String>],
        author,
        &rules as &[ChargingRules],
        &discount as &[Option<i64>],
    )
    .fetch_all(&mut *conn)
    .await?;
    // Identities are drawn in insertion order, which follows ORDER BY i.
    ids.sort();
    Ok(ids)
}

/// Post the discount lines of job charges posted before in this
/// transaction, in one statement: each names its charge by job record and
/// metric (one charge per record and metric), which links it. A line
/// without exactly one such charge is an error, after the lines that had
/// one were inserted: the caller rolls the transaction back.
pub async fn insert_job_discounts(
    conn: &mut PgConnection,
    entries: &[NewEntry],
    author: &str,
) -> Result<u64, sqlx::Error> {
    if entries.is_empty() {
        return Ok(0);
    }
    let period: Vec<NaiveDate> = entries.iter().map(|e| e.period).collect();
    let metric: Vec<Option<Metric>> = entries.iter().map(|e| e.metric).collect();
    let record: Vec<Option<i64>> = entries.iter().map(|e| e.job_record_id.map(|r| r.0)).collect();
    let exact: Vec<Decimal> = entries.iter().map(|e| e.amount_exact).collect();
    let amount: Vec<Decimal> = entries.iter().map(|e| e.amount).collect();
    let late: Vec<bool> = entries.iter().map(|e| e.late).collect();
    let discount: Vec<Option<i64>> = entries.iter().map(|e| e.discount_id.map(|d| d.0)).collect();
    let done = sqlx::query!(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                   quantity, unit_rate, amount_exact, amount, late, charging_rules, author, discount_id)
         SELECT u.p, c.project_id, 'discount', c.metric, c.job_record_id, c.rate_card_id, c.id,
                0, 0, u.x, u.a, u.l, c.charging_rules, $8, u.d
           FROM UNNEST($1::date[], $2::text[], $3::bigint[], $4::numeric[], $5::numeric[], $6::bool[], $7::bigint[])
                WITH ORDINALITY AS u(p, m, jr, x, a, l, d, i)
           JOIN ledger_entry c ON c.job_record_id = u.jr AND c.metric = u.m AND c.kind = 'job'
          ORDER BY u.i",
        &period,
        &metric as &[Option<Metric>],
        &record as &[Option<i64>],
        &exact,
        &amount,
        &late,
        &discount as &[Option<i64>],
        author,
    )
    .execute(&mut *conn)
    .await?;
    let posted = done.rows_affected();
    if posted != entries.len() as u64 {
        // A line whose charge is missing would be dropped by the join, and
        // the job charged its full price: refuse the batch instead (the
        // recorder then records job by job and keeps the job as rejected).
        // The record's id is this transaction's, gone with it: the line is
        // named by its metric (the recorder's rejection names the job).
        let missing: Option<String> = sqlx::query_scalar(
            "SELECT u.m FROM UNNEST($1::bigint[], $2::text[]) AS u(jr, m)
              WHERE (SELECT count(*) FROM ledger_entry c
                      WHERE c.job_record_id = u.jr AND c.metric = u.m AND c.kind = 'job') <> 1
              LIMIT 1",
        )
        .bind(&record)
        .bind(&metric)
        .fetch_optional(&mut *conn)
        .await?;
        let which = missing.map_or_else(String::new, |metric| {
            format!(" (a {metric} line: not exactly one {metric} charge of its job record in this posting)")
        });
        return Err(sqlx::Error::InvalidArgument(format!(
            "{} discount lines to post, {posted} matched a job charge{which}: refused, none posted",
            entries.len()
        )));
    }
    Ok(posted)
}

/// The charges of these job records, and their refunds and discount
/// lines, not yet reversed (reversing all leaves nothing of the old charge).
pub async fn unreversed_charges(conn: &mut PgConnection, records: &[JobRecordId]) -> Result<Vec<Posted>, sqlx::Error> {
    let ids: Vec<i64> = records.iter().map(|r| r.0).collect();
    sqlx::query_as!(
        Posted,
        r#"SELECT e.id AS "id: LedgerEntryId", e.project_id AS "project_id: ProjectId", e.metric AS "metric: Metric",
                  e.job_record_id AS "job_record_id: JobRecordId", e.rate_card_id AS "rate_card_id: RateCardId",
                  e.quantity, e.unit_rate, e.amount_exact, e.amount,
                  e.charging_rules AS "charging_rules: ChargingRules", e.discount_id AS "discount_id: DiscountId"
             FROM ledger_entry e
            WHERE e.job_record_id = ANY($1) AND e.kind IN ('job', 'refund', 'discount')
              AND NOT EXISTS (SELECT 1 FROM ledger_entry r WHERE r.corrects_id = e.id AND r.kind = 'reversal')
            ORDER BY e.id"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await
}
