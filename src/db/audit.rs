//! The SQL audit's findings (`audit.discrepancies`), read as they come:
//! the first [`KEPT`] in full, every one counted.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use futures_util::TryStreamExt;
use sqlx::PgConnection;

/// How many findings an audit keeps in full ([`Findings::kept`]); every
/// one is counted, by kind and field, however many there are. A ledger
/// whose every entry disagrees with SQL (a rule changed under it, planted
/// tampering) would otherwise hold one finding per entry and field in
/// memory: tens of gigabytes at 50 million entries.
pub const KEPT: usize = 100_000;

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

/// The order of a month's findings, as its queries give them (`NULLS
/// FIRST` as `None` sorts first, `COLLATE "C"` as Rust compares strings): by
/// entry, field, kind, project, then values, so that which findings are the
/// first [`KEPT`] does not change between runs (the findings of no entry,
/// such as each project's usage sums, differ only in their project).
pub fn month_order(a: &Discrepancy, b: &Discrepancy) -> std::cmp::Ordering {
    (a.entry_id, &a.field, &a.kind)
        .cmp(&(b.entry_id, &b.field, &b.kind))
        .then_with(|| {
            (a.project.as_deref(), a.expected.as_deref(), a.recorded.as_deref()).cmp(&(
                b.project.as_deref(),
                b.expected.as_deref(),
                b.recorded.as_deref(),
            ))
        })
}

/// An audit's findings: the first ones in full, all of them counted.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Findings {
    /// The first findings in the audit's order, at most [`KEPT`].
    pub kept: Vec<Discrepancy>,
    /// Every finding, kept or not.
    pub found: u64,
    /// Every finding by kind and field (`"job amount"`).
    pub by_field: BTreeMap<String, u64>,
}

impl Findings {
    /// Count a finding, and keep it if fewer than `keep` are kept.
    fn add(&mut self, d: Discrepancy, keep: usize) {
        self.found += 1;
        *self.by_field.entry(format!("{} {}", d.kind, d.field)).or_insert(0) += 1;
        if self.kept.len() < keep {
            self.kept.push(d);
        }
    }

    /// Read a query's findings as they come, keeping the first `keep`.
    async fn read<'c>(
        rows: impl futures_util::Stream<Item = Result<Discrepancy, sqlx::Error>> + 'c,
        keep: usize,
    ) -> Result<Findings, sqlx::Error> {
        let mut rows = std::pin::pin!(rows);
        let mut found = Findings::default();
        while let Some(d) = rows.try_next().await? {
            found.add(d, keep);
        }
        Ok(found)
    }

    /// Two parts' findings as one, in `order`: the kept findings of both,
    /// ordered, then cut to `keep` (each part kept its own first `keep`, so
    /// the first `keep` of the two together are among them).
    pub fn merge(
        mut self,
        other: Findings,
        keep: usize,
        order: impl FnMut(&Discrepancy, &Discrepancy) -> std::cmp::Ordering,
    ) -> Findings {
        self.kept.extend(other.kept);
        self.kept.sort_by(order);
        self.kept.truncate(keep);
        self.found += other.found;
        for (k, n) in other.by_field {
            *self.by_field.entry(k).or_insert(0) += n;
        }
        self
    }
}

/// The findings of the whole ledger, by month, entry, and field in byte
/// order; the first `keep` kept.
pub async fn discrepancies(conn: &mut PgConnection, keep: usize) -> Result<Findings, sqlx::Error> {
    let rows = sqlx::query_as!(
        Discrepancy,
        r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
             FROM audit.discrepancies
            ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field COLLATE "C", kind COLLATE "C",
                     project COLLATE "C" NULLS FIRST, expected COLLATE "C" NULLS FIRST,
                     recorded COLLATE "C" NULLS FIRST"#
    )
    .fetch(&mut *conn);
    Findings::read(rows, keep).await
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
/// merge in the same order, whatever the database's collation); the first
/// `keep` kept.
pub async fn month_part(
    conn: &mut PgConnection,
    month: NaiveDate,
    part: MonthPart,
    keep: usize,
) -> Result<Findings, sqlx::Error> {
    match part {
        MonthPart::Storage => {
            let rows = sqlx::query_as!(
                Discrepancy,
                r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                     FROM audit.discrepancies WHERE period = $1 AND kind = 'storage'
                    ORDER BY entry_id NULLS FIRST, field COLLATE "C", kind COLLATE "C",
                     project COLLATE "C" NULLS FIRST, expected COLLATE "C" NULLS FIRST,
                     recorded COLLATE "C" NULLS FIRST"#,
                month
            )
            .fetch(&mut *conn);
            Findings::read(rows, keep).await
        }
        MonthPart::Rest => {
            let rows = sqlx::query_as!(
                Discrepancy,
                r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                     FROM audit.discrepancies WHERE period = $1 AND kind IS DISTINCT FROM 'storage'
                    ORDER BY entry_id NULLS FIRST, field COLLATE "C", kind COLLATE "C",
                     project COLLATE "C" NULLS FIRST, expected COLLATE "C" NULLS FIRST,
                     recorded COLLATE "C" NULLS FIRST"#,
                month
            )
            .fetch(&mut *conn);
            Findings::read(rows, keep).await
        }
    }
}
