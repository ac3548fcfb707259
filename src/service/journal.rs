//! The finance journal: `config apply` records funding and revenue sets and
//! the CSV layout ([`apply`]); `export journal` derives a closed month's
//! journal from its statements ([`export`]) and logs what finance was
//! given. The lines are the database's (`hl_journal_lines`, migration
//! 0029: shares split by largest remainder, every line's service that of
//! the charge it stems from); this module checks that each statement's
//! debits and credits add up to its total, lays the lines out, and refuses
//! a month it cannot export whole.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use super::config::{ApplyError, ApplyReport};
use crate::config::CenterConfig;
use crate::db::journal::{self as jdb, FundingRow, RevenueRow, StatementRow};
use crate::db::{DbError, periods};
use crate::domain::journal::{Column, default_layout};
use crate::domain::period::Month;
use crate::domain::units::in_cents;
use crate::ids::ProjectId;

/// Record the file's funding sets, revenue sets and layout (within `config
/// apply`'s transaction). Sets are appended, never rewritten; a set may
/// begin only after the last exported month.
pub(super) async fn apply(
    tx: &mut PgConnection,
    config: &CenterConfig,
    projects: &BTreeMap<String, ProjectId>,
    author: &str,
    report: &mut ApplyReport,
    refused: &mut Vec<String>,
) -> Result<(), ApplyError> {
    let exported = jdb::exported_months(tx).await?;
    // A set is in force from its month until the next set begins: an
    // exported month in that span would be contradicted.
    let contradicts = |from: Month, next: Option<NaiveDate>| -> Option<String> {
        let e = exported
            .iter()
            .rev()
            .find(|e| **e >= from.first_day() && next.is_none_or(|n| **e < n))?;
        Some(format!(
            "the journal of {} has been exported: a new set begins after it",
            Month::of_date(*e)
        ))
    };
    let next_after = |froms: &mut dyn Iterator<Item = NaiveDate>, from: Month| -> Option<NaiveDate> {
        froms.filter(|f| *f > from.first_day()).min()
    };

    let recorded = jdb::funding(tx).await?;
    let mut new = Vec::new();
    for p in &config.projects {
        let id = projects[&p.code.to_lowercase()];
        let have: Vec<&FundingRow> = recorded.iter().filter(|r| r.project_id == id).collect();
        for set in &p.funding {
            let rows: Vec<FundingRow> = set
                .lines
                .iter()
                .enumerate()
                .map(|(i, l)| FundingRow {
                    project_id: id,
                    effective_from: set.from.first_day(),
                    line: i as i16 + 1,
                    fund: l.fund.clone(),
                    cost_center: l.cost_center.clone(),
                    grant_code: l.grant.clone(),
                    account: l.account.clone(),
                    share: l.share,
                })
                .collect();
            let old: Vec<FundingRow> = have
                .iter()
                .filter(|r| r.effective_from == set.from.first_day())
                .map(|r| (*r).clone())
                .collect();
            if old.is_empty() {
                let mut froms = have
                    .iter()
                    .map(|r| r.effective_from)
                    .chain(p.funding.iter().map(|s| s.from.first_day()));
                if let Some(why) = contradicts(set.from, next_after(&mut froms, set.from)) {
                    refused.push(format!("project {:?}: funding from {}: {why}", p.code, set.from));
                } else {
                    report.funding.added += 1;
                    new.extend(rows);
                }
            } else if old == rows {
                report.funding.unchanged += 1;
            } else {
                refused.push(format!(
                    "project {:?}: other funding from {} is already recorded (lines are compared in order: the order breaks ties in the split); funding history is never rewritten (add a set from a later month)",
                    p.code, set.from
                ));
            }
        }
        let mut kept: Vec<_> = have.iter().map(|r| r.effective_from).collect();
        kept.dedup();
        let extra = kept
            .iter()
            .filter(|f| !p.funding.iter().any(|s| s.from.first_day() == **f))
            .count();
        if extra > 0 {
            report.notes.push(format!(
                "project {:?}: {extra} recorded funding set(s) are not in the file; they were kept",
                p.code
            ));
        }
    }

    let recorded = jdb::revenue(tx).await?;
    let mut new_revenue = Vec::new();
    for set in &config.revenue {
        let rows: Vec<RevenueRow> = set
            .accounts
            .iter()
            .map(|a| RevenueRow {
                effective_from: set.from.first_day(),
                service: a.service.clone(),
                fund: a.fund.clone(),
                cost_center: a.cost_center.clone(),
                account: a.account.clone(),
            })
            .collect();
        let mut old: Vec<RevenueRow> = recorded
            .iter()
            .filter(|r| r.effective_from == set.from.first_day())
            .cloned()
            .collect();
        let mut sorted = rows.clone();
        sorted.sort_by(|a, b| a.service.cmp(&b.service));
        old.sort_by(|a, b| a.service.cmp(&b.service));
        if old.is_empty() {
            let mut froms = recorded
                .iter()
                .map(|r| r.effective_from)
                .chain(config.revenue.iter().map(|s| s.from.first_day()));
            if let Some(why) = contradicts(set.from, next_after(&mut froms, set.from)) {
                refused.push(format!("revenue accounts from {}: {why}", set.from));
            } else {
                report.revenue.added += 1;
                new_revenue.extend(rows);
            }
        } else if old == sorted {
            report.revenue.unchanged += 1;
        } else {
            refused.push(format!(
                "revenue accounts from {} are already recorded with other accounts; they are never rewritten (add a set from a later month)",
                set.from
            ));
        }
    }
    let mut kept: Vec<_> = recorded.iter().map(|r| r.effective_from).collect();
    kept.dedup();
    let extra = kept
        .iter()
        .filter(|f| !config.revenue.iter().any(|s| s.from.first_day() == **f))
        .count();
    if extra > 0 {
        report.notes.push(format!(
            "{extra} recorded revenue set(s) are not in the file; they were kept"
        ));
    }

    if let Some(columns) = &config.journal.columns {
        let json = serde_json::to_value(columns).expect("a layout serializes");
        let before = jdb::layout(tx).await?;
        if jdb::set_layout(tx, &json).await? {
            if before.is_some() {
                report.journal_layout.updated += 1;
            } else {
                report.journal_layout.added += 1;
            }
        } else {
            report.journal_layout.unchanged += 1;
        }
    }
    if refused.is_empty() {
        jdb::insert_funding(tx, &new, author).await?;
        jdb::insert_revenue(tx, &new_revenue, author).await?;
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{0} is not closed: a journal is exported from closed months only (hpc-ledger close --month {0})")]
    NotClosed(Month),
    #[error(
        "{month} is archived (to {file}): its journal is derived from its entries, which have left the live \
         ledger; export it before archiving (journals exported before are in `journal_export`)"
    )]
    Archived { month: Month, file: String },
    #[error(
        "the journal of {month} cannot be exported: {} statement(s) have no funding source in force for {month} — {}; add `funding` from {month} (or earlier, if no journal since was exported) to these projects in the configuration and apply it",
        .unfunded.len(),
        .unfunded.iter().map(|s| format!("statement {} ({}, {})", s.number, s.project, s.total)).collect::<Vec<_>>().join(", ")
    )]
    Unfunded { month: Month, unfunded: Vec<StatementRow> },
    #[error(
        "the journal of {0} cannot be exported: no revenue accounts are in force for it; add a [[revenue]] set from {0} (or earlier) to the configuration and apply it"
    )]
    NoRevenue(Month),
    #[error("the recorded journal layout cannot be read ({0}): apply the configuration again")]
    Layout(String),
    #[error("writing the journal: {0}")]
    Write(String),
    #[error(
        "statement {number}: its journal lines add up to {debits} debit and {credits} credit, not its total {total}"
    )]
    Unbalanced {
        number: i64,
        total: Decimal,
        debits: Decimal,
        credits: Decimal,
    },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for JournalError {
    fn from(e: sqlx::Error) -> Self {
        JournalError::Db(e.into())
    }
}

/// One line of the journal.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub line: usize,
    pub statement: i64,
    pub project: String,
    pub project_name: String,
    /// Where the amount lands: `debit` or `credit`.
    pub side: &'static str,
    pub fund: String,
    pub cost_center: String,
    pub grant: Option<String>,
    pub account: String,
    /// A revenue line's service.
    pub service: Option<String>,
    /// A funding line's share, percent.
    pub share: Option<Decimal>,
    /// Signed: debits positive, credits negative.
    pub amount: Decimal,
    pub description: String,
}

/// A closed month's journal, as exported.
#[derive(Debug, Clone, Serialize)]
pub struct Journal {
    pub journal: String,
    pub month: Month,
    /// The accounting date: the month's last day.
    pub date: chrono::NaiveDate,
    pub center: String,
    pub currency: String,
    pub seal_algorithm: String,
    /// The month's seal, hex (`hpc-ledger verify` recomputes it).
    pub seal: String,
    /// The export's number in the log (`None` for a dry run).
    pub export_id: Option<i64>,
    pub exported_at: Option<DateTime<Utc>>,
    /// SHA-256 of the lines as the database derives them
    /// (`hl_journal_digest`); the audit recomputes it for every export.
    pub digest: String,
    /// Every statement of the month (those with a total of zero get no lines).
    pub statements: Vec<StatementRow>,
    pub lines: Vec<Line>,
    pub debit_total: Decimal,
    pub credit_total: Decimal,
}

/// Derive a closed month's journal, hand it and the CSV layout to `write`,
/// and log it as exported (unless `dry_run`) only once `write` succeeded:
/// an export finance did not receive is not logged. Refuses the whole month
/// when a statement has no funding or no revenue accounts are in force: a
/// partial journal would lose money.
pub async fn export<W>(pool: &PgPool, month: Month, by: &str, dry_run: bool, write: W) -> Result<Journal, JournalError>
where
    W: FnOnce(&Journal, &[Column]) -> Result<(), String>,
{
    let mut tx = crate::db::begin(pool).await.map_err(DbError::from)?;
    let result = async {
        let journal = export_in(&mut tx, month, by, dry_run).await?;
        let layout = layout_in(&mut tx).await?;
        write(&journal, &layout).map_err(JournalError::Write)?;
        Ok(journal)
    }
    .await;
    if dry_run {
        let _ = tx.rollback().await;
        return result;
    }
    super::finish(tx, result).await
}

async fn export_in(conn: &mut PgConnection, month: Month, by: &str, dry_run: bool) -> Result<Journal, JournalError> {
    let period = month.first_day();
    jdb::lock_exports(conn).await?;
    let closed = periods::closed_period(conn, period)
        .await?
        .ok_or(JournalError::NotClosed(month))?;
    if let Some(a) = crate::db::archive::archived(conn, period).await? {
        return Err(JournalError::Archived {
            month,
            file: a.file_name,
        });
    }
    let center = crate::db::reference::load_center(conn)
        .await?
        .ok_or(JournalError::NotClosed(month))?;
    let mut statements = jdb::statements(conn, period).await?;
    for s in &mut statements {
        s.total = in_cents(s.total);
    }
    let unfunded: Vec<StatementRow> = statements
        .iter()
        .filter(|s| !s.total.is_zero() && !s.funded)
        .cloned()
        .collect();
    if !unfunded.is_empty() {
        return Err(JournalError::Unfunded { month, unfunded });
    }
    let charged = statements.iter().any(|s| !s.total.is_zero());
    if charged && !jdb::revenue_in_force(conn, period).await? {
        return Err(JournalError::NoRevenue(month));
    }
    let rows = jdb::lines(conn, period).await?;
    for s in statements.iter().filter(|s| !s.total.is_zero()) {
        let of = |side: &str| -> Decimal {
            rows.iter()
                .filter(|r| r.statement == s.number && r.side == side)
                .map(|r| r.amount)
                .sum()
        };
        let (debits, credits) = (of("debit"), of("credit"));
        if debits != s.total || credits != s.total {
            return Err(JournalError::Unbalanced {
                number: s.number,
                total: s.total,
                debits,
                credits,
            });
        }
    }
    let lines: Vec<Line> = rows
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let debit_side = r.side == "debit";
            let signed = if debit_side { r.amount } else { -r.amount };
            let what = match (&r.share, &r.service) {
                (Some(share), _) => format!("{}% of {}", share.normalize(), r.total),
                (None, Some(service)) => service.clone(),
                (None, None) => String::new(),
            };
            Line {
                line: i + 1,
                description: format!("{} {} statement {}: {}", r.project, month, r.statement, what),
                statement: r.statement,
                project: r.project,
                project_name: r.project_name,
                side: if signed >= Decimal::ZERO { "debit" } else { "credit" },
                fund: r.fund,
                cost_center: r.cost_center,
                grant: r.grant_code,
                account: r.account,
                service: r.service,
                share: r.share.map(|s| s.normalize()),
                amount: signed,
            }
        })
        .collect();
    // In cents also when there are no lines.
    let side_total = |debits: bool| -> Decimal {
        in_cents(
            lines
                .iter()
                .filter(|l| l.amount != Decimal::ZERO && (l.amount > Decimal::ZERO) == debits)
                .map(|l| l.amount.abs())
                .sum(),
        )
    };
    let (debit_total, credit_total) = (side_total(true), side_total(false));
    let (export_id, exported_at, digest) = if dry_run {
        (None, None, jdb::digest(conn, period).await?)
    } else {
        let (id, at, digest) =
            jdb::record_export(conn, period, by, lines.len() as i32, debit_total, credit_total).await?;
        (Some(id), Some(at), digest)
    };
    Ok(Journal {
        journal: format!("HPC-{month}"),
        month,
        date: month.last_day(),
        center: center.name,
        currency: center.currency,
        seal_algorithm: closed.seal_algorithm,
        seal: hex::encode(&closed.seal),
        export_id,
        exported_at,
        digest: hex::encode(digest),
        statements,
        lines,
        debit_total,
        credit_total,
    })
}

/// The recorded CSV layout, or the default.
async fn layout_in(conn: &mut PgConnection) -> Result<Vec<Column>, JournalError> {
    match jdb::layout(conn).await? {
        Some(v) => serde_json::from_value(v).map_err(|e| JournalError::Layout(e.to_string())),
        None => Ok(default_layout()),
    }
}
