//! The finance part of the configuration: `[journal]` (the CSV layout and
//! the default expense account), `[[revenue]]` (the center's revenue
//! accounts) and each project's `funding` (who pays its statements). Funding
//! and revenue come in dated sets: the lines with the same `from` month form
//! one set, which replaces the previous one whole from that month on.

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::Serialize;

use super::{ClusterConfig, Validator, raw};
use crate::domain::journal::{Column, Value};
use crate::domain::period::Month;

/// `[journal]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JournalConfig {
    /// The CSV layout; `None`: the one recorded (or the default).
    pub columns: Option<Vec<Column>>,
}

/// One line of a funding set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FundingLine {
    pub fund: String,
    pub cost_center: String,
    pub grant: Option<String>,
    /// The expense account debited.
    pub account: String,
    /// Percent of the statement's total.
    pub share: Decimal,
}

/// A project's funding from a month on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FundingSet {
    pub from: Month,
    pub lines: Vec<FundingLine>,
}

/// One revenue account: `service` is `default`, `compute`, `storage`,
/// `adjustments`, `cluster:NAME` or `node_type:CLUSTER/NAME` (lower case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RevenueLine {
    pub service: String,
    pub fund: String,
    pub cost_center: String,
    pub account: String,
}

/// The center's revenue accounts from a month on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RevenueSet {
    pub from: Month,
    pub accounts: Vec<RevenueLine>,
}

/// A code finance systems take: 1–100 characters, no control characters.
fn code_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 100 && !s.chars().any(char::is_control)
}

impl Validator {
    /// A `from` month: `"2026-07"` or the month's first day (`2026-07-01`).
    fn month(&mut self, key: &str, s: &str) -> Option<Month> {
        let s = s.trim();
        if let Ok(m) = s.parse::<Month>() {
            return Some(m);
        }
        match NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            Ok(d) if d == Month::of_date(d).first_day() => Some(Month::of_date(d)),
            _ => {
                self.bad(
                    key,
                    format!("{s:?} is not a month: funding and revenue change at a month's start (write \"2026-07\" or 2026-07-01)"),
                );
                None
            }
        }
    }

    fn code(&mut self, key: String, s: &str) -> String {
        let s = s.trim();
        if !code_ok(s) {
            self.bad(key, "must be 1 to 100 characters without control characters");
        }
        s.to_owned()
    }

    pub(super) fn journal(&mut self, j: Option<raw::Journal>) -> (JournalConfig, Option<String>) {
        let Some(j) = j else {
            return (JournalConfig { columns: None }, None);
        };
        let expense = j
            .expense_account
            .as_deref()
            .map(|a| self.code("journal.expense_account".into(), a));
        let mut columns = Vec::new();
        for (i, c) in j.columns.into_iter().enumerate() {
            let key = format!("journal.columns[{i}]");
            let header = c.header.trim().to_owned();
            if header.is_empty() || header.len() > 100 || header.chars().any(char::is_control) {
                self.bad(
                    format!("{key}.header"),
                    "must be 1 to 100 characters without control characters",
                );
            }
            let value = match (c.field, c.text) {
                (Some(f), None) => match f.trim().parse() {
                    Ok(f) => Value::Field(f),
                    Err(e) => {
                        self.bad(format!("{key}.field"), e);
                        continue;
                    }
                },
                (None, Some(t)) if t.len() <= 200 && !t.chars().any(char::is_control) => Value::Text(t),
                (None, Some(_)) => {
                    self.bad(
                        format!("{key}.text"),
                        "must be at most 200 characters without control characters",
                    );
                    continue;
                }
                _ => {
                    self.bad(&key, "give either `field` (a journal field) or `text` (fixed text)");
                    continue;
                }
            };
            columns.push(Column { header, value });
        }
        if columns.len() > 100 {
            self.bad("journal.columns", "at most 100 columns");
        }
        let columns = (!columns.is_empty()).then_some(columns);
        (JournalConfig { columns }, expense)
    }

    pub(super) fn funding(&mut self, key: &str, lines: Vec<raw::Funding>, expense: Option<&str>) -> Vec<FundingSet> {
        let mut sets: Vec<FundingSet> = Vec::new();
        for (i, f) in lines.into_iter().enumerate() {
            let fkey = format!("{key}.funding[{i}]");
            let Some(from) = self.month(&format!("{fkey}.from"), &f.from) else {
                continue;
            };
            let share = f.share.0.normalize();
            if share <= Decimal::ZERO || share > Decimal::from(100) || share.scale() > 4 {
                self.bad(
                    format!("{fkey}.share"),
                    format!("{share} is not a share: a percent above 0, at most 100, at most 4 decimal places"),
                );
            }
            let account = match f.account.as_deref().or(expense) {
                Some(a) => self.code(format!("{fkey}.account"), a),
                None => {
                    self.bad(
                        format!("{fkey}.account"),
                        "no expense account: give `account` here or `expense_account` in [journal]",
                    );
                    String::new()
                }
            };
            let line = FundingLine {
                fund: self.code(format!("{fkey}.fund"), &f.fund),
                cost_center: self.code(format!("{fkey}.cost_center"), &f.cost_center),
                grant: f.grant.as_deref().map(|g| self.code(format!("{fkey}.grant"), g)),
                account,
                share,
            };
            match sets.iter_mut().find(|s| s.from == from) {
                Some(s) => s.lines.push(line),
                None => sets.push(FundingSet {
                    from,
                    lines: vec![line],
                }),
            }
        }
        for s in &sets {
            let total: Decimal = s.lines.iter().map(|l| l.share).sum();
            if total != Decimal::from(100) {
                self.bad(
                    format!("{key}.funding (from {})", s.from),
                    format!("the shares add up to {total} %, not 100 %"),
                );
            }
            if s.lines.len() > 100 {
                self.bad(
                    format!("{key}.funding (from {})", s.from),
                    "at most 100 lines in one set",
                );
            }
        }
        sets.sort_by_key(|s| s.from);
        sets
    }

    pub(super) fn revenue(&mut self, lines: Vec<raw::Revenue>, clusters: &[ClusterConfig]) -> Vec<RevenueSet> {
        let mut sets: Vec<RevenueSet> = Vec::new();
        for (i, r) in lines.into_iter().enumerate() {
            let key = format!("revenue[{i}]");
            let Some(from) = self.month(&format!("{key}.from"), &r.from) else {
                continue;
            };
            let service = match (
                r.service.as_deref().map(str::trim),
                r.cluster.as_deref().map(str::trim),
                &r.node_type,
            ) {
                (Some(s @ ("default" | "compute" | "storage" | "adjustments")), None, None) => s.to_owned(),
                (Some(s), None, None) => {
                    self.bad(
                        format!("{key}.service"),
                        format!("{s:?} is not a service: default, compute, storage or adjustments (or give `cluster`, and `node_type`)"),
                    );
                    continue;
                }
                (None, Some(c), nt) => {
                    let Some(cluster) = clusters.iter().find(|k| k.name.eq_ignore_ascii_case(c)) else {
                        self.bad(format!("{key}.cluster"), format!("{c:?} is not a cluster of this file"));
                        continue;
                    };
                    match nt.as_deref().map(str::trim) {
                        None => format!("cluster:{}", cluster.name.to_lowercase()),
                        Some(n) if cluster.node_types.iter().any(|t| t.name == n) => {
                            format!("node_type:{}/{n}", cluster.name.to_lowercase())
                        }
                        Some(n) => {
                            self.bad(
                                format!("{key}.node_type"),
                                format!("{n:?} is not a node type of cluster {:?}", cluster.name),
                            );
                            continue;
                        }
                    }
                }
                _ => {
                    self.bad(
                        &key,
                        "give either `service` (default, compute, storage, adjustments) or `cluster` (and `node_type`)",
                    );
                    continue;
                }
            };
            let line = RevenueLine {
                fund: self.code(format!("{key}.fund"), &r.fund),
                cost_center: self.code(format!("{key}.cost_center"), &r.cost_center),
                account: self.code(format!("{key}.account"), &r.account),
                service,
            };
            match sets.iter_mut().find(|s| s.from == from) {
                Some(s) if s.accounts.iter().any(|a| a.service == line.service) => {
                    self.bad(&key, format!("{} is given twice in the set from {from}", line.service));
                }
                Some(s) => s.accounts.push(line),
                None => sets.push(RevenueSet {
                    from,
                    accounts: vec![line],
                }),
            }
        }
        for s in &sets {
            if !s.accounts.iter().any(|a| a.service == "default") {
                self.bad(
                    format!("revenue (from {})", s.from),
                    "the set has no `service = \"default\"` account (where whatever no other account names is credited)",
                );
            }
        }
        sets.sort_by_key(|s| s.from);
        sets
    }
}
