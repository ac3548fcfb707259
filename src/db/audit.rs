//! The SQL audit's findings (`audit.discrepancies`).

use chrono::NaiveDate;
use sqlx::PgConnection;

/// A discrepancy between SQL's recomputation and the ledger.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Discrepancy {
    pub entry_id: Option<i64>,
    pub kind: String,
    pub period: Option<NaiveDate>,
    pub project: Option<String>,
    pub field: String,
    pub expected: Option<String>,
    pub recorded: Option<String>,
}

/// The findings of the whole ledger, by month, entry, and field in byte
/// order.
pub async fn discrepancies(conn: &mut PgConnection) -> Result<Vec<Discrepancy>, sqlx::Error> {
    sqlx::query_as!(
        Discrepancy,
        r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
             FROM audit.discrepancies
            ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field COLLATE "C""#
    )
    .fetch_all(&mut *conn)
    .await
}

/// Which of one posting month's findings: those of its storage charges, or
/// all the others (those of its entries, draws, usage sums and journal
/// exports; findings of no month, such as rejected records, holds and
/// transfers, are the whole audit's). Together they are the month's
/// findings (every finding has a kind), read in two statements so that each
/// can be planned its own way (`service::close::audit_of`). The month is a
/// parameter of its own, not `$1 IS NULL OR period = $1`: a plan made for
/// any month (a prepared statement's generic plan) could not use it to read
/// only that month's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonthPart {
    /// Its storage charges recomputed from quota and rate history, and the
    /// projects missing one.
    Storage,
    /// Everything else: job charges, corrections, discounts, statements,
    /// draws, usage sums, journal exports.
    Rest,
}

/// One part of a month's findings (`month`, its first day), by entry, then
/// by field in byte order (as Rust compares strings, so that the two parts
/// merge in the same order, whatever the database's collation).
pub async fn month_part(
    conn: &mut PgConnection,
    month: NaiveDate,
    part: MonthPart,
) -> Result<Vec<Discrepancy>, sqlx::Error> {
    match part {
        MonthPart::Storage => {
            sqlx::query_as!(
                Discrepancy,
                r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                     FROM audit.discrepancies WHERE period = $1 AND kind = 'storage'
                    ORDER BY entry_id NULLS FIRST, field COLLATE "C""#,
                month
            )
            .fetch_all(&mut *conn)
            .await
        }
        MonthPart::Rest => {
            sqlx::query_as!(
                Discrepancy,
                r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                     FROM audit.discrepancies WHERE period = $1 AND kind IS DISTINCT FROM 'storage'
                    ORDER BY entry_id NULLS FIRST, field COLLATE "C""#,
                month
            )
            .fetch_all(&mut *conn)
            .await
        }
    }
}
