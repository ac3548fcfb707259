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

/// The order of the whole ledger's findings, as its queries give them: by
/// posting month (`NULLS FIRST`), then as [`month_order`].
pub fn ledger_order(a: &Discrepancy, b: &Discrepancy) -> std::cmp::Ordering {
    a.period.cmp(&b.period).then_with(|| month_order(a, b))
}

/// One part of an audit's findings, read by one statement on a connection
/// of its own: an audit reads its two parts ([`Part::two`]) side by side in
/// one snapshot of the database and merges them (`service::close::audit_of`).
/// On two cores, the job charges' part keeps PostgreSQL's parallel workers
/// busy while the other part's index merges and sums run beside it: `audit`
/// of the default `bench`'s ledger (1,318,200 entries) took 5.27 s against
/// 6.20 s reading the view in one statement, and `audit --month` 0.95 s
/// against 1.11 s (medians of pairs, docs/performance.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole ledger's findings of job charges (of kind `job`, naming
    /// an entry): each charge recomputed from its record, run and card,
    /// about half of the audit's time, which PostgreSQL reads in parallel.
    JobCharges,
    /// The whole ledger's other findings (`kind IS DISTINCT FROM 'job' OR
    /// entry_id IS NULL`, so that the two parts are the whole view): every
    /// charging record's entries, storage charges, corrections, rollups,
    /// statements, journal exports, rejected records, holds.
    Rest,
    /// One of a posting month's two parts (the month's first day).
    Month(NaiveDate, MonthPart),
}

impl Part {
    /// An audit's two parts: the whole ledger's, or one posting month's
    /// (its first day).
    pub fn two(month: Option<NaiveDate>) -> [Part; 2] {
        match month {
            None => [Part::JobCharges, Part::Rest],
            Some(m) => [Part::Month(m, MonthPart::Rest), Part::Month(m, MonthPart::Storage)],
        }
    }

    /// The order the part's statement gives its findings in, in which two
    /// parts of one audit merge.
    pub fn order(self) -> fn(&Discrepancy, &Discrepancy) -> std::cmp::Ordering {
        match self {
            Part::JobCharges | Part::Rest => ledger_order,
            Part::Month(..) => month_order,
        }
    }

    /// Read this part's findings, the first `keep` kept, planned as it
    /// needs (JIT off; a month's found by key, its storage charges hashed
    /// again) for the rest of the transaction.
    pub async fn read(self, conn: &mut PgConnection, keep: usize) -> Result<Findings, sqlx::Error> {
        crate::db::jit_off(conn).await?;
        match self {
            Part::JobCharges => {
                let rows = sqlx::query_as!(
                    Discrepancy,
                    r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                         FROM audit.discrepancies WHERE kind = 'job' AND entry_id IS NOT NULL
                        ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field COLLATE "C", kind COLLATE "C",
                                 project COLLATE "C" NULLS FIRST, expected COLLATE "C" NULLS FIRST,
                                 recorded COLLATE "C" NULLS FIRST"#
                )
                .fetch(&mut *conn);
                Findings::read(rows, keep).await
            }
            Part::Rest => {
                let rows = sqlx::query_as!(
                    Discrepancy,
                    r#"SELECT entry_id, kind AS "kind!", period, project, field AS "field!", expected, recorded
                         FROM audit.discrepancies WHERE kind IS DISTINCT FROM 'job' OR entry_id IS NULL
                        ORDER BY period NULLS FIRST, entry_id NULLS FIRST, field COLLATE "C", kind COLLATE "C",
                                 project COLLATE "C" NULLS FIRST, expected COLLATE "C" NULLS FIRST,
                                 recorded COLLATE "C" NULLS FIRST"#
                )
                .fetch(&mut *conn);
                Findings::read(rows, keep).await
            }
            Part::Month(month, part) => {
                // One month of the ledger: its rows found by key, not by
                // reading every record and run the ledger holds; its storage
                // charges matched with their recomputed sums by a hash join
                // (db::allow_hash_joins says why).
                crate::db::plan_for_few_rows(conn).await?;
                if part == MonthPart::Storage {
                    crate::db::allow_hash_joins(conn).await?;
                }
                month_part(conn, month, part, keep).await
            }
        }
    }
}

/// The findings of the whole ledger in one statement, by month, entry, and
/// field in byte order; the first `keep` kept. The audit reads them in two
/// [`Part`]s; this is what those two merged must equal (tested).
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
