//! The finance journal's shape: the fields of a journal line, how a CSV
//! layout names them, and the default layout (docs/month-end.md "Finance
//! journal"). The lines themselves are derived in SQL
//! (`hl_journal_lines`, migration 0029) so that an auditor re-derives them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A field of a journal line that a CSV column can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// The journal's name: `HPC-2026-10`.
    Journal,
    /// The accounting date: the month's last day (`2026-10-31`).
    Date,
    /// The month: `2026-10`.
    Month,
    /// The line's number in the journal, from 1.
    Line,
    /// The statement's number.
    Statement,
    /// The project's code.
    Project,
    /// The project's name.
    ProjectName,
    /// `debit` or `credit`: which side the line's amount is on.
    Side,
    Fund,
    CostCenter,
    /// The grant code (funding lines that name one).
    Grant,
    Account,
    /// A credit line's service (`compute`, `cluster:owens`, …).
    Service,
    /// A debit line's share of its statement, percent.
    Share,
    /// Signed: debits positive, credits negative.
    Amount,
    /// The debit amount, empty on a credit line.
    Debit,
    /// The credit amount, empty on a debit line.
    Credit,
    Currency,
    /// `PAS1234 2026-10 statement 17: 60% of 1234.56` and the like.
    Description,
    /// The month's seal, hex.
    Seal,
}

impl Field {
    pub const ALL: [Field; 20] = [
        Field::Journal,
        Field::Date,
        Field::Month,
        Field::Line,
        Field::Statement,
        Field::Project,
        Field::ProjectName,
        Field::Side,
        Field::Fund,
        Field::CostCenter,
        Field::Grant,
        Field::Account,
        Field::Service,
        Field::Share,
        Field::Amount,
        Field::Debit,
        Field::Credit,
        Field::Currency,
        Field::Description,
        Field::Seal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Field::Journal => "journal",
            Field::Date => "date",
            Field::Month => "month",
            Field::Line => "line",
            Field::Statement => "statement",
            Field::Project => "project",
            Field::ProjectName => "project_name",
            Field::Side => "side",
            Field::Fund => "fund",
            Field::CostCenter => "cost_center",
            Field::Grant => "grant",
            Field::Account => "account",
            Field::Service => "service",
            Field::Share => "share",
            Field::Amount => "amount",
            Field::Debit => "debit",
            Field::Credit => "credit",
            Field::Currency => "currency",
            Field::Description => "description",
            Field::Seal => "seal",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Field {
    type Err = String;
    fn from_str(s: &str) -> Result<Field, String> {
        Field::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            format!(
                "{s:?} is not a journal field (one of {})",
                Field::ALL.map(Field::name).join(", ")
            )
        })
    }
}

/// What one CSV column holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    Field(Field),
    /// The same text on every line (a ledger code, a source name).
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub header: String,
    #[serde(flatten)]
    pub value: Value,
}

/// The layout used until a configuration gives one: every field a finance
/// office needs to load the lines and tie them back, headed by its name.
pub fn default_layout() -> Vec<Column> {
    [
        Field::Journal,
        Field::Date,
        Field::Line,
        Field::Fund,
        Field::CostCenter,
        Field::Account,
        Field::Grant,
        Field::Debit,
        Field::Credit,
        Field::Currency,
        Field::Statement,
        Field::Project,
        Field::Description,
        Field::Seal,
    ]
    .into_iter()
    .map(|f| Column {
        header: f.name().to_owned(),
        value: Value::Field(f),
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_reads_back_from_its_name() {
        for f in Field::ALL {
            assert_eq!(f.name().parse::<Field>(), Ok(f));
        }
        let e = "cost-center".parse::<Field>().unwrap_err();
        assert!(e.contains("cost_center"), "{e}");
    }

    #[test]
    fn a_layout_is_stored_as_json_and_read_back() {
        let layout = vec![
            Column {
                header: "Ledger".into(),
                value: Value::Text("ACTUALS".into()),
            },
            Column {
                header: "Dept".into(),
                value: Value::Field(Field::CostCenter),
            },
        ];
        let json = serde_json::to_string(&layout).unwrap();
        assert_eq!(
            json,
            r#"[{"header":"Ledger","text":"ACTUALS"},{"header":"Dept","field":"cost_center"}]"#
        );
        let back: Vec<Column> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, layout);
    }
}
