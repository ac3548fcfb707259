//! Closed months: the lock that serialises closing, the close itself (the
//! database's procedure, migration 0018), and the seals recomputed.

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

/// Hold the period lock exclusively: every posting transaction waits.
pub async fn lock_periods(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hl_period_lock_key())")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A closed month as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClosedPeriod {
    pub period: NaiveDate,
    pub closed_at: DateTime<Utc>,
    pub closed_by: String,
    pub entry_count: i64,
    pub total: Decimal,
    pub seal_algorithm: String,
    pub seal: Vec<u8>,
    /// The month's currency, sealed with it (seal v2; `None` for v1 months).
    pub currency: Option<String>,
}

pub async fn closed_period(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<ClosedPeriod>, sqlx::Error> {
    sqlx::query_as!(
        ClosedPeriod,
        "SELECT period, closed_at, closed_by, entry_count, total, seal_algorithm, seal, currency
           FROM closed_period WHERE period = $1",
        period
    )
    .fetch_optional(&mut *conn)
    .await
}

/// The ledger's first closed month, if any.
pub async fn first_closed(conn: &mut PgConnection) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar("SELECT min(period) FROM closed_period")
        .fetch_one(&mut *conn)
        .await
}

/// The earliest month before `period` that holds entries and is not closed.
pub async fn earlier_open_month(conn: &mut PgConnection, period: NaiveDate) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT min(period) FROM ledger_entry
          WHERE period < $1 AND period > coalesce((SELECT max(period) FROM closed_period), '-infinity'::date)",
        period
    )
    .fetch_one(&mut *conn)
    .await
}

/// Close a month: record it with its seal (computed by the database over
/// its entries) and number a statement for each project with entries.
/// Returns the closed month as recorded.
pub async fn close(conn: &mut PgConnection, period: NaiveDate, closed_by: &str) -> Result<ClosedPeriod, sqlx::Error> {
    // The database's close procedure (migration 0018) checks the month,
    // issues its statements and computes the count, total, currency, time
    // and seal: the insert names only the month and who closes it.
    let row = sqlx::query_as!(
        ClosedPeriod,
        r#"INSERT INTO closed_period (period, closed_by, entry_count, total, seal_algorithm, seal)
           VALUES ($1, $2, 0, 0, 'sha256-digests-v3', sha256(''))
           RETURNING period, closed_at, closed_by, entry_count, total, seal_algorithm, seal, currency"#,
        period,
        closed_by
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(row)
}

/// The seal of each closed month, recorded and recomputed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SealCheck {
    pub period: NaiveDate,
    pub recorded_seal: String,
    pub recomputed_seal: String,
    pub recorded_entries: i64,
    pub entries: i64,
    pub recorded_total: Decimal,
    pub total: Decimal,
    /// The month's archive file, when it is archived: its seal, count and
    /// total are then those recorded when it was archived (the file is
    /// checked by `verify --archive`).
    pub archived_to: Option<String>,
}

impl SealCheck {
    pub fn holds(&self) -> bool {
        self.recorded_seal == self.recomputed_seal
            && self.recorded_entries == self.entries
            && self.recorded_total == self.total
    }
}

/// The closed months' seals next to their recomputation: every month along
/// the whole chain, or one month (`period`, its first day) from the seal
/// recorded for the month before it.
pub async fn seal_checks(conn: &mut PgConnection, period: Option<NaiveDate>) -> Result<Vec<SealCheck>, sqlx::Error> {
    match period {
        // The whole chain, from the first closed month.
        None => {
            sqlx::query_as!(
                SealCheck,
                r#"SELECT period AS "period!", recorded_seal AS "recorded_seal!", recomputed_seal AS "recomputed_seal!",
                          recorded_entries AS "recorded_entries!", entries AS "entries!",
                          recorded_total AS "recorded_total!", total AS "total!", archived_to
                     FROM audit.seals ORDER BY period"#
            )
            .fetch_all(&mut *conn)
            .await
        }
        // One month, from the seal recorded for the month before it: its
        // own entries only, however many months are closed.
        Some(month) => {
            sqlx::query_as!(
                SealCheck,
                r#"SELECT period AS "period!", recorded_seal AS "recorded_seal!", recomputed_seal AS "recomputed_seal!",
                          recorded_entries AS "recorded_entries!", entries AS "entries!",
                          recorded_total AS "recorded_total!", total AS "total!", archived_to
                     FROM audit.month_seals WHERE period = $1"#,
                month
            )
            .fetch_all(&mut *conn)
            .await
        }
    }
}

/// The closed months, oldest first, through the audit's view (which the
/// auditor role may read, unlike `closed_period`); the seals it would
/// recompute are not, as they are not asked for.
pub async fn closed_months(conn: &mut PgConnection) -> Result<Vec<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT period AS "period!" FROM audit.month_seals ORDER BY period"#)
        .fetch_all(&mut *conn)
        .await
}

/// Every closed month as recorded, oldest first.
pub async fn closed_periods(conn: &mut PgConnection) -> Result<Vec<ClosedPeriod>, sqlx::Error> {
    sqlx::query_as!(
        ClosedPeriod,
        "SELECT period, closed_at, closed_by, entry_count, total, seal_algorithm, seal, currency
           FROM closed_period ORDER BY period"
    )
    .fetch_all(&mut *conn)
    .await
}
