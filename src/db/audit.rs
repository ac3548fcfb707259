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

/// The findings of the whole ledger, or of one posting month (`period`,
/// its first day): those of its entries, draws, usage sums and journal exports
/// (findings of no month, such as rejected records, holds and transfers,
/// are the whole audit's).
pub async fn discrepancies(
    conn: &mut PgConnection,
    period: Option<NaiveDate>,
) -> Result<Vec<Discrepancy>, sqlx::Error> {
    // Two statements, not `$1 IS NULL OR period = $1`: a plan made for any
    // month (PostgreSQL's generic plan of a prepared statement) could not
    // use the month to read only that month's entries.
    match period {
        None => {
            sqlx::query_as!(
                Discrepancy,
                r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                     FROM audit.discrepancies
                    ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field"#
            )
            .fetch_all(&mut *conn)
            .await
        }
        Some(month) => {
            sqlx::query_as!(
                Discrepancy,
                r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                     FROM audit.discrepancies WHERE period = $1
                    ORDER BY entry_id NULLS FIRST, field"#,
                month
            )
            .fetch_all(&mut *conn)
            .await
        }
    }
}
