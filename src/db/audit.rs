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
    sqlx::query_as!(
        Discrepancy,
        r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
             FROM audit.discrepancies WHERE $1::date IS NULL OR period = $1
            ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field"#,
        period
    )
    .fetch_all(&mut *conn)
    .await
}
