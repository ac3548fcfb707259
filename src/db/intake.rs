//! The intake of `serve --intake` (migration 0034): jobcomp documents
//! stored durably before they are answered, taken in batches by one
//! recording task, and deleted in the transaction that records them.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

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
pub async fn accept(
    conn: &mut PgConnection,
    documents: &[String],
    exact: &[Option<Vec<u8>>],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO job_intake (document, exact) SELECT * FROM unnest($1::text[], $2::bytea[])",
        documents,
        exact as &[Option<Vec<u8>>]
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The oldest `limit` documents waiting (not set aside as failed).
pub async fn oldest(conn: &mut PgConnection, limit: i64) -> Result<Vec<Waiting>, sqlx::Error> {
    sqlx::query_as!(
        Waiting,
        "SELECT id, document, exact FROM job_intake WHERE failed IS NULL ORDER BY id LIMIT $1",
        limit
    )
    .fetch_all(conn)
    .await
}

/// Of `ids`, those still waiting (not recorded since they were read).
pub async fn still_waiting(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!("SELECT id FROM job_intake WHERE id = ANY($1) ORDER BY id", ids)
        .fetch_all(conn)
        .await
}

/// Set a document aside: it could not be recorded, nor kept as rejected.
pub async fn set_aside(conn: &mut PgConnection, id: i64, reason: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE job_intake SET failed = $2 WHERE id = $1", id, reason)
        .execute(conn)
        .await?;
    Ok(())
}

/// Try the documents set aside again (when `serve` starts: a new version,
/// or a cause since fixed). How many.
pub async fn retry_set_aside(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query!("UPDATE job_intake SET failed = NULL WHERE failed IS NOT NULL")
            .execute(conn)
            .await?
            .rows_affected(),
    )
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

/// What `job_intake` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Documents waiting to be recorded.
    pub waiting: i64,
    /// Documents set aside (could not be recorded nor kept as rejected).
    pub failed: i64,
    /// When the oldest of either was received.
    pub oldest: Option<DateTime<Utc>>,
    /// Why the oldest set aside failed.
    pub first_failure: Option<String>,
}

pub async fn held(conn: &mut PgConnection) -> Result<Held, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE failed IS NULL) AS "waiting!",
                  count(*) FILTER (WHERE failed IS NOT NULL) AS "failed!",
                  min(received_at) AS oldest,
                  (SELECT failed FROM job_intake WHERE failed IS NOT NULL ORDER BY id LIMIT 1) AS first_failure
           FROM job_intake"#
    )
    .fetch_one(conn)
    .await?;
    Ok(Held {
        waiting: row.waiting,
        failed: row.failed,
        oldest: row.oldest,
        first_failure: row.first_failure,
    })
}

/// Take the lock that makes this session the one recording the intake;
/// false when another holds it.
pub async fn try_lock(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "locked!""#, DRAIN_LOCK)
        .fetch_one(conn)
        .await
}
