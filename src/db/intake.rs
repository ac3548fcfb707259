//! The intake of `serve --intake` (migration 0034): jobcomp documents
//! stored durably before they are answered, taken in batches by one
//! recording task, and deleted in the transaction that records them.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

/// The key of the session advisory lock held by the one task that records
/// a database's intake: two tasks taking the same rows would record a
/// job's revisions out of order.
const DRAIN_LOCK: i64 = 0x686c_696e_7461_6b65; // "hlintake"

/// A document waiting to be recorded.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub id: i64,
    /// As the ledger keeps it (batch script removed).
    pub document: String,
    /// Its bytes, when they were not UTF-8.
    pub exact: Option<Vec<u8>>,
}

/// Store documents (`exact`: the bytes of each, when not UTF-8) in one
/// INSERT that commits by itself: one round trip, one WAL flush, however
/// many posts arrived together.
pub async fn accept(pool: &PgPool, documents: &[String], exact: &[Option<Vec<u8>>]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO job_intake (document, exact) SELECT * FROM unnest($1::text[], $2::bytea[])",
        documents,
        exact as &[Option<Vec<u8>>]
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The oldest `limit` documents waiting.
pub async fn oldest(conn: &mut PgConnection, limit: i64) -> Result<Vec<Waiting>, sqlx::Error> {
    sqlx::query_as!(
        Waiting,
        "SELECT id, document, exact FROM job_intake ORDER BY id LIMIT $1",
        limit
    )
    .fetch_all(conn)
    .await
}

/// Delete recorded documents (in the transaction that recorded them).
pub async fn done(conn: &mut PgConnection, ids: &[i64]) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query!("DELETE FROM job_intake WHERE id = ANY($1)", ids)
        .execute(conn)
        .await?;
    Ok(())
}

/// How many documents wait, and when the oldest was received.
pub async fn waiting(conn: &mut PgConnection) -> Result<(i64, Option<DateTime<Utc>>), sqlx::Error> {
    let row = sqlx::query!(r#"SELECT count(*) AS "n!", min(received_at) AS oldest FROM job_intake"#)
        .fetch_one(conn)
        .await?;
    Ok((row.n, row.oldest))
}

/// Take the lock that makes this session the one recording the intake;
/// false when another holds it.
pub async fn try_lock(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "locked!""#, DRAIN_LOCK)
        .fetch_one(conn)
        .await
}
