//! Statements as documents people read (issue 18): one self-contained HTML
//! file per project and month (no external assets: styles, the chart as
//! inline SVG), with print styles so a browser prints it as a clean PDF,
//! and an index of a month's statements. Every number is the statement's,
//! which is the ledger's; the totals carry `data-amount` attributes so a
//! program (and the tests) can read them back.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{Datelike, NaiveDate};
use rust_decimal::Decimal;

use crate::db::statements::DaySpend;
use crate::service::statement::{Details, Statement, Status, StorageBilling};

pub mod pdf;
pub mod web;

/// A CSV cell: quoted when it holds a comma, quote or line break. Text a
/// spreadsheet would run as a formula (beginning with `=`, `+`, `-`, `@`,
/// a tab or a carriage return: a job name or user a cluster's users chose,
/// a raw record) is prefixed with `'`, which spreadsheets show as text
/// (OWASP, "CSV injection"); a number (a credit's `-12.50`) and a lone
/// `-` are left as they are.
pub fn csv_field(v: &str) -> String {
    let v = if runs_as_formula(v) {
        std::borrow::Cow::Owned(format!("'{v}"))
    } else {
        std::borrow::Cow::Borrowed(v)
    };
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.into_owned()
    }
}

/// Whether a spreadsheet would take a cell as a formula: it begins with
/// `=`, `@`, a tab or a carriage return, or with `+` or `-` and is not a
/// number.
fn runs_as_formula(v: &str) -> bool {
    match v.chars().next() {
        Some('=' | '@' | '\t' | '\r') => true,
        // (Thousands separated, as `money` writes them, too.)
        Some('+' | '-') => v != "-" && v.replace(',', "").parse::<Decimal>().is_err(),
        _ => false,
    }
}

/// Text for HTML: `&`, `<`, `>`, `"` and `'` escaped.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// An amount to the cent with thousands separated: `-1,234.50`.
pub fn money(d: Decimal) -> String {
    let s = format!("{:.2}", d.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, "00"));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!(
        "{}{grouped}.{frac}",
        if d.is_sign_negative() && !d.is_zero() { "-" } else { "" }
    )
}

/// Whether a compute line's amount is its quantity × rate rounded once (it
/// need not be: each job is rounded by itself, and the line adds them up).
pub fn line_is_product(l: &crate::db::statements::JobLine) -> bool {
    (l.quantity * l.unit_rate).round_dp_with_strategy(2, rust_decimal::RoundingStrategy::MidpointAwayFromZero)
        == l.amount
}

/// A compute line's metric as people read it (`core-hours`).
pub fn metric_label(l: &crate::db::statements::JobLine) -> String {
    crate::domain::units::Metric::parse(&l.metric).map_or(l.metric.clone(), |m| m.unit_label().to_owned())
}

/// Hours to two decimals (half away from zero, like every rounding of the
/// ledger), without trailing zeros.
pub(crate) fn hours(d: Decimal) -> String {
    d.round_dp_with_strategy(2, rust_decimal::RoundingStrategy::MidpointAwayFromZero)
        .normalize()
        .to_string()
}

/// A quantity as stored, without trailing zeros.
pub fn num(d: Decimal) -> String {
    d.normalize().to_string()
}

/// A table cell holding an amount, machine-readable too.
fn amount_cell(d: Decimal) -> String {
    format!("<td class=\"n\" data-amount=\"{d:.2}\">{}</td>", money(d))
}

pub(crate) const STYLE: &str = r#"
:root { --ink: #1d2733; --muted: #5b6776; --rule: #d5dbe3; --band: #f3f6f9; --accent: #1f5f99; }
* { box-sizing: border-box; }
body { margin: 0; background: #e9edf1; color: var(--ink);
       font: 14px/1.45 "Helvetica Neue", Helvetica, Arial, "Liberation Sans", sans-serif; }
main { max-width: 60rem; margin: 1.5rem auto; background: #fff; padding: 2.2rem 2.6rem;
       box-shadow: 0 1px 4px rgba(0,0,0,.12); }
header.top { display: flex; justify-content: space-between; align-items: flex-start;
             border-bottom: 3px solid var(--accent); padding-bottom: .8rem; margin-bottom: 1.2rem; }
.center { font-size: .95rem; color: var(--muted); letter-spacing: .02em; }
h1 { font-size: 1.55rem; margin: .15rem 0 0; }
h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; color: var(--accent); border-bottom: 1px solid var(--rule);
     padding-bottom: .2rem; }
.status { text-align: right; font-size: .9rem; }
.status .badge { display: inline-block; padding: .15rem .55rem; border-radius: 3px; font-weight: 600;
                 letter-spacing: .04em; }
.final .badge { background: #e3f1e6; color: #1d5e2c; }
.provisional .badge { background: #fff0d6; color: #8a5300; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1.2rem; margin: 0 0 1rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
.seal { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .78rem; word-break: break-all; }
table { width: 100%; border-collapse: collapse; margin: .3rem 0 .2rem; }
th, td { padding: .3rem .5rem; text-align: left; vertical-align: top; }
td.t { overflow-wrap: anywhere; min-width: 5em; }
td.d { white-space: nowrap; }
thead th { font-size: .78rem; text-transform: uppercase; letter-spacing: .05em; color: var(--muted);
           border-bottom: 1px solid var(--rule); }
tbody tr:nth-child(even) { background: var(--band); }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tfoot td { border-top: 1px solid var(--ink); font-weight: 600; }
table.summary { width: auto; min-width: 22rem; margin-left: auto; }
table.summary td { padding: .25rem .5rem; }
table.summary tr.total td { border-top: 2px solid var(--ink); font-size: 1.1rem; font-weight: 700; }
.none { color: var(--muted); font-style: italic; }
.note { color: var(--muted); font-size: .85rem; }
.chart { width: 100%; height: auto; }
.legend { display: flex; flex-wrap: wrap; gap: .3rem 1.1rem; font-size: .85rem; margin: .2rem 0 0; padding: 0;
          list-style: none; }
.legend span { display: inline-block; width: .8rem; height: .8rem; margin-right: .35rem; vertical-align: -.05rem; }
footer { margin-top: 2rem; border-top: 1px solid var(--rule); padding-top: .6rem; color: var(--muted);
         font-size: .8rem; }
@page { size: A4; margin: 14mm 12mm 16mm; }
@media print {
  body { background: #fff; font-size: 10.5pt; }
  main { box-shadow: none; margin: 0; padding: 0; max-width: none; }
  section, table.summary, svg { break-inside: avoid; }
  tr { break-inside: avoid; }
  thead { display: table-header-group; }
  h2 { break-after: avoid; }
  a { color: inherit; text-decoration: none; }
}
"#;

/// Series colors of the chart, in order of the clusters' names; storage and
/// adjustments last.
const COLORS: &[&str] = &[
    "#1f5f99", "#e08a1e", "#3a9a5b", "#9b4dca", "#c8423b", "#2aa1b3", "#8c6d31", "#d35fa0",
];

fn month_title(s: &Statement) -> String {
    let first = s.month.first_day();
    format!("{} {}", first.format("%B"), first.year())
}

/// One statement as a self-contained HTML document.
pub fn statement_html(s: &Statement, d: &Details, generated: &str) -> String {
    let mut o = String::new();
    let code = esc(&s.project.code);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Statement {code} {} — {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
        s.month,
        esc(&s.center)
    );
    // Header: who, what month, which statement.
    let (class, badge, status_line) = match &s.status {
        Status::Final { number, closed_at, .. } => (
            "final",
            format!("Statement No. {number}"),
            format!("final — closed {}", s.local(*closed_at).format("%Y-%m-%d")),
        ),
        Status::ClosedWithoutStatement { closed_at } => (
            "final",
            "CLOSED".to_owned(),
            format!(
                "closed {}: no statement was issued (no entries)",
                s.local(*closed_at).format("%Y-%m-%d")
            ),
        ),
        Status::BeforeTheLedger { first_closed } => (
            "final",
            "CLOSED".to_owned(),
            format!("before the ledger's first closed month, {first_closed}: no entries, and none can be posted"),
        ),
        Status::Provisional => (
            "provisional",
            "PROVISIONAL".to_owned(),
            "the month is open and may still change".to_owned(),
        ),
    };
    let _ = write!(
        o,
        "<header class=\"top\">\n<div>\n<div class=\"center\">{}</div>\n<h1>Statement for {} — {}</h1>\n</div>\n\
         <div class=\"status {class}\"><span class=\"badge\">{}</span><br>{}</div>\n</header>\n",
        esc(&s.center),
        esc(&month_title(s)),
        code,
        esc(&badge),
        esc(&status_line)
    );
    o.push_str("<dl class=\"facts\">\n");
    let mut fact = |k: &str, v: String| {
        let _ = writeln!(o, "<dt>{k}</dt><dd>{v}</dd>");
    };
    fact("Project", code.clone());
    if !s.project.name.is_empty() {
        fact("Name", esc(&s.project.name));
    }
    if !s.project.pi.is_empty() {
        fact("Principal investigator", esc(&s.project.pi));
    }
    fact("Rate class", esc(&s.project.rate_class.join(", then ")));
    fact("Month", esc(&s.month.to_string()));
    fact("Currency", esc(&s.currency));
    if let Status::Final {
        seal_algorithm, seal, ..
    } = &s.status
    {
        fact(
            "Month seal",
            format!("<span class=\"seal\">{} {}</span>", esc(seal_algorithm), esc(seal)),
        );
    }
    o.push_str("</dl>\n");

    // The summary.
    let _ = write!(
        o,
        "<section>\n<h2>Summary</h2>\n<table class=\"summary\">\n<tbody>\n\
         <tr><td>Compute</td>{}</tr>\n<tr><td>Storage</td>{}</tr>\n<tr><td>Discounts</td>{}</tr>\n\
         <tr><td>Corrections</td>{}</tr>\n</tbody>\n<tfoot>\n\
         <tr class=\"total\"><td>Total {}</td><td class=\"n\" id=\"total\" data-amount=\"{:.2}\">{}</td></tr>\n\
         </tfoot>\n</table>\n</section>\n",
        amount_cell(s.compute_total()),
        amount_cell(s.storage_total()),
        amount_cell(s.discounts_total()),
        amount_cell(s.corrections_total()),
        esc(&s.currency),
        s.total,
        money(s.total)
    );

    // Compute.
    o.push_str("<section>\n<h2>Compute</h2>\n");
    if s.compute.is_empty() {
        o.push_str("<p class=\"none\">No jobs charged this month.</p>\n");
    } else {
        o.push_str(
            "<table>\n<thead><tr><th>Cluster</th><th>Node type</th><th>Metric</th><th class=\"n\">Jobs</th>\
             <th class=\"n\">Quantity</th><th class=\"n\">Rate</th><th class=\"n\">Amount</th></tr></thead>\n<tbody>\n",
        );
        let mut by_job = false;
        for l in &s.compute {
            let product = line_is_product(l);
            by_job |= !product;
            let metric = metric_label(l);
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td>{}</tr>",
                esc(&l.cluster),
                esc(&l.node_type),
                esc(&metric),
                if l.late { " (late)" } else { "" },
                l.jobs,
                esc(&num(l.quantity)),
                esc(&num(l.unit_rate)),
                amount_cell(l.amount).replacen("</td>", if product { "</td>" } else { " *</td>" }, 1)
            );
        }
        let _ = write!(
            o,
            "</tbody>\n<tfoot><tr><td colspan=\"6\">Compute subtotal</td>{}</tr></tfoot>\n</table>\n",
            amount_cell(s.compute_total())
        );
        if by_job {
            o.push_str(
                "<p class=\"note\">* Each job's amount is computed from its exact quantity and rounded to the cent \
                 by itself; the line's amount is the sum of its jobs' amounts, which differs here from the quantity \
                 shown × the rate.</p>\n",
            );
        }
    }
    o.push_str("</section>\n");

    // Storage.
    o.push_str("<section>\n<h2>Storage (reserved quota)</h2>\n");
    match &s.storage_billing {
        StorageBilling::NotBilled => o.push_str(
            "<p class=\"none\">This month's storage has not been billed yet: this section will change.</p>\n",
        ),
        StorageBilling::BeforeTheLedger => {
            o.push_str("<p class=\"none\">No storage was billed: the month is before the ledger's.</p>\n")
        }
        StorageBilling::Waived { storage_waiver_reason } => {
            let _ = writeln!(
                o,
                "<p class=\"none\">Storage was not billed this month: {}.</p>",
                esc(storage_waiver_reason)
            );
        }
        StorageBilling::Billed { .. } if s.storage.is_empty() => {
            o.push_str("<p class=\"none\">No storage quota this month.</p>\n");
        }
        StorageBilling::Billed { .. } => {
            o.push_str(
                "<table>\n<thead><tr><th class=\"n\">TB-days</th><th class=\"n\">TB-months</th>\
                 <th class=\"n\">Rate per TB-month</th><th class=\"n\">Amount</th></tr></thead>\n<tbody>\n",
            );
            for l in &s.storage {
                let _ = writeln!(
                    o,
                    "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>{}</tr>",
                    esc(&num(l.tb_days)),
                    esc(&num(l.quantity)),
                    esc(&num(l.unit_rate)),
                    amount_cell(l.amount)
                );
            }
            let _ = write!(
                o,
                "</tbody>\n<tfoot><tr><td colspan=\"3\">Storage subtotal</td>{}</tr></tfoot>\n</table>\n",
                amount_cell(s.storage_total())
            );
        }
    }
    o.push_str("</section>\n");

    // Discounts.
    if !s.discounts.is_empty() {
        o.push_str(
            "<section>\n<h2>Discounts</h2>\n<table>\n<thead><tr><th>On</th><th>Whose</th><th>Reason</th>\
             <th class=\"n\">Percent</th><th class=\"n\">List price</th><th class=\"n\">Discount</th></tr></thead>\n<tbody>\n",
        );
        for l in &s.discounts {
            let _ = writeln!(
                o,
                "<tr><td class=\"t\">{}</td><td class=\"t\">{}</td><td class=\"t\">{}</td><td class=\"n\">{} %</td>{}{}</tr>",
                esc(&l.on),
                esc(&l.scope),
                esc(&l.reason),
                esc(&num(l.percent)),
                amount_cell(l.list_amount),
                amount_cell(l.amount)
            );
        }
        let _ = write!(
            o,
            "</tbody>\n<tfoot><tr><td colspan=\"5\">Discounts</td>{}</tr></tfoot>\n</table>\n</section>\n",
            amount_cell(s.discounts_total())
        );
    }

    // Corrections.
    o.push_str("<section>\n<h2>Corrections</h2>\n");
    if s.corrections.is_empty() {
        o.push_str("<p class=\"none\">None this month.</p>\n");
    } else {
        o.push_str(
            "<table>\n<thead><tr><th>Date</th><th>Kind</th><th>Of</th><th>Reason</th><th>By</th>\
             <th class=\"n\">Amount</th></tr></thead>\n<tbody>\n",
        );
        for c in &s.corrections {
            let _ = writeln!(
                o,
                "<tr><td class=\"d\">{}</td><td>{}</td><td class=\"t\">{}</td><td class=\"t\">{}</td><td class=\"t\">{}</td>{}</tr>",
                s.local(c.posted_at).format("%Y-%m-%d"),
                esc(&c.kind),
                esc(c.corrects.as_deref().unwrap_or("")),
                esc(c.reason.as_deref().unwrap_or("")),
                esc(&c.author),
                amount_cell(c.amount)
            );
        }
        let _ = write!(
            o,
            "</tbody>\n<tfoot><tr><td colspan=\"5\">Corrections</td>{}</tr></tfoot>\n</table>\n",
            amount_cell(s.corrections_total())
        );
    }
    o.push_str("</section>\n");

    // The budget, per pool.
    if !s.budgets.is_empty() {
        o.push_str(
            "<section>\n<h2>Budget</h2>\n<table>\n<thead><tr><th>Pool</th><th>At</th><th class=\"n\">Allocated</th>\
             <th class=\"n\">Used</th><th class=\"n\">Held</th><th class=\"n\">Remaining</th><th class=\"n\">% used</th>\
             </tr></thead>\n<tbody>\n",
        );
        for b in &s.budgets {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td>{}{}{}{}<td class=\"n\">{:.1}</td></tr>",
                esc(crate::domain::budget::pool_label(b, &s.budgets)),
                s.local(b.at).format("%Y-%m-%d %H:%M %Z"),
                amount_cell(b.allocated),
                amount_cell(b.used),
                amount_cell(b.held),
                amount_cell(b.remaining),
                b.fraction_used * Decimal::ONE_HUNDRED
            );
        }
        o.push_str("</tbody>\n</table>\n</section>\n");
    }

    // Spend by day.
    o.push_str("<section>\n<h2>Spend by day</h2>\n");
    if d.days.is_empty() {
        o.push_str("<p class=\"none\">Nothing was charged this month.</p>\n");
    } else {
        o.push_str(&chart(s, &d.days));
    }
    o.push_str("</section>\n");

    // By user.
    o.push_str("<section>\n<h2>Who used it</h2>\n");
    if d.users.is_empty() {
        o.push_str("<p class=\"none\">No usage this month.</p>\n");
    } else {
        o.push_str(
            "<table id=\"users\">\n<thead><tr><th>User</th><th class=\"n\">Jobs</th><th class=\"n\">Core-hours</th>\
             <th class=\"n\">GPU-hours</th><th class=\"n\">Amount</th></tr></thead>\n<tbody>\n",
        );
        let mut users = d.users.clone();
        users.sort_by(|a, b| b.amount.cmp(&a.amount).then_with(|| a.key.cmp(&b.key)));
        for u in &users {
            let _ = writeln!(
                o,
                "<tr><td class=\"t\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>{}</tr>",
                esc(&u.key),
                u.jobs,
                esc(&hours(u.core_hours)),
                esc(&hours(u.gpu_hours)),
                amount_cell(u.amount)
            );
        }
        let total: Decimal = d.users.iter().map(|u| u.amount).sum();
        let _ = write!(
            o,
            "</tbody>\n<tfoot><tr><td colspan=\"4\">Total</td>{}</tr></tfoot>\n</table>\n\
             <p class=\"note\">Net of corrections and discounts, each counted with what it corrects; storage and \
             adjustments are not a user's.</p>\n",
            amount_cell(total)
        );
    }
    o.push_str("</section>\n");

    let _ = write!(
        o,
        "<footer>Every number on this statement is the ledger's: the total is the sum of the month's ledger \
         entries for the project{}. Generated by hpc-ledger {} on {}.</footer>\n</main>\n</body>\n</html>\n",
        if matches!(s.status, Status::Final { .. }) {
            "; the month seal covers every one of them (hpc-ledger verify recomputes it)"
        } else {
            ""
        },
        esc(env!("CARGO_PKG_VERSION")),
        esc(generated)
    );
    o
}

/// Where a day's spend goes on the chart: a day of the month, or before or
/// after it (a late charge of an earlier job, a correction, an adjustment
/// posted later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Slot {
    Before,
    Day(u32),
    After,
}

impl Slot {
    /// The bar's label under the axis, for some bars.
    fn label(self) -> Option<String> {
        match self {
            Slot::Day(d) if d == 1 || d % 5 == 0 => Some(d.to_string()),
            Slot::Day(_) => None,
            Slot::Before => Some("earlier".into()),
            Slot::After => Some("later".into()),
        }
    }
}

/// The chart's numbers: series (clusters by name), each slot's amount per
/// series, the highest day and the deepest credit. Storage and adjustments
/// are not drawn (storage draws at the month's end in one piece and would
/// flatten every job's bar): their sum is `other`, said beside the chart.
pub(crate) struct ChartData {
    pub series: Vec<Option<String>>,
    pub slots: Vec<(Slot, Vec<Decimal>)>,
    pub up: Decimal,
    pub down: Decimal,
    /// Storage and adjustments.
    pub other: Decimal,
    /// Everything: the statement's total.
    pub total: Decimal,
}

impl ChartData {
    pub fn new(s: &Statement, days: &[DaySpend]) -> ChartData {
        let first = s.month.first_day();
        let last = s.month.last_day();
        let slot = |d: NaiveDate| {
            if d < first {
                Slot::Before
            } else if d > last {
                Slot::After
            } else {
                Slot::Day(d.day())
            }
        };
        let mut series: Vec<Option<String>> = days
            .iter()
            .filter(|d| d.cluster.is_some())
            .map(|d| d.cluster.clone())
            .collect();
        series.sort();
        series.dedup();
        let mut slots: BTreeMap<Slot, Vec<Decimal>> = BTreeMap::new();
        for d in 1..=last.day() {
            slots.insert(Slot::Day(d), vec![Decimal::ZERO; series.len()]);
        }
        let mut other = Decimal::ZERO;
        for d in days {
            match series.iter().position(|k| *k == d.cluster) {
                Some(i) if d.cluster.is_some() => {
                    slots
                        .entry(slot(d.day))
                        .or_insert_with(|| vec![Decimal::ZERO; series.len()])[i] += d.amount;
                }
                _ => other += d.amount,
            }
        }
        let up = slots
            .values()
            .map(|v| v.iter().filter(|a| a.is_sign_positive()).sum::<Decimal>())
            .max()
            .unwrap_or_default();
        let down = slots
            .values()
            .map(|v| -v.iter().filter(|a| a.is_sign_negative()).sum::<Decimal>())
            .max()
            .unwrap_or_default();
        ChartData {
            series,
            slots: slots.into_iter().collect(),
            up,
            down,
            other,
            total: days.iter().map(|d| d.amount).sum(),
        }
    }

    /// A series' color (`#rrggbb`).
    pub fn color(&self, j: usize) -> &'static str {
        COLORS[j % COLORS.len()]
    }

    pub fn name(&self, j: usize) -> &str {
        self.series[j].as_deref().unwrap_or("?")
    }

    /// What is said under the chart: how it draws, and what it leaves out.
    pub fn note(&self, currency: &str) -> String {
        let mut s = CHART_NOTE.to_owned();
        if !self.other.is_zero() {
            s.push_str(&format!(
                " Storage and adjustments ({} {currency}) are not drawn.",
                money(self.other)
            ));
        }
        s.push_str(&format!(" In all {} {currency}.", money(self.total)));
        s
    }

    /// A series' sum over the month.
    pub fn sum(&self, j: usize) -> Decimal {
        self.slots.iter().map(|(_, v)| v[j]).sum()
    }

    /// A fraction of the chart's height, for drawing only (amounts stay
    /// decimal everywhere else).
    pub fn fraction(&self, a: Decimal) -> f64 {
        use rust_decimal::prelude::ToPrimitive;
        let span = (self.up + self.down).max(Decimal::new(1, 2));
        (a / span).to_f64().unwrap_or(0.0)
    }
}

/// Daily spend by cluster as an inline SVG bar chart (stacked; credits
/// below the axis), with its legend.
pub(crate) fn chart(s: &Statement, days: &[DaySpend]) -> String {
    let c = ChartData::new(s, days);
    let (w, h, left, top, bottom) = (760.0_f64, 230.0_f64, 64.0_f64, 10.0_f64, 26.0_f64);
    let plot_h = h - top - bottom;
    let to_px = |a: Decimal| c.fraction(a) * plot_h;
    let zero_y = top + to_px(c.up);
    let step = (w - left - 6.0) / c.slots.len() as f64;
    let bar = (step * 0.72).max(1.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"chart\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-labelledby=\"chart-title\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title id=\"chart-title\">Spend by day and cluster, {}</title>\
         <g font-size=\"10\" fill=\"#5b6776\">",
        s.month
    );
    // Axis: zero, the highest day, the deepest credit.
    for (value, shown) in [
        (Decimal::ZERO, true),
        (c.up, c.up > Decimal::ZERO),
        (-c.down, c.down > Decimal::ZERO),
    ] {
        if !shown {
            continue;
        }
        let y = zero_y - to_px(value);
        let _ = write!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d5dbe3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - 4.0,
            left - 6.0,
            y + 3.5,
            esc(&money(value))
        );
    }
    for (i, (k, values)) in c.slots.iter().enumerate() {
        let x = left + step * i as f64 + (step - bar) / 2.0;
        let mut y_up = zero_y;
        let mut y_down = zero_y;
        for (j, a) in values.iter().enumerate() {
            if a.is_zero() {
                continue;
            }
            let px = to_px(a.abs()).max(0.5);
            let y = if a.is_sign_positive() {
                y_up -= px;
                y_up
            } else {
                let y = y_down;
                y_down += px;
                y
            };
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar:.1}\" height=\"{px:.1}\" fill=\"{}\">\
                 <title>{}: {} {}</title></rect>",
                c.color(j),
                match k {
                    Slot::Day(d) => format!("{}-{d:02}", s.month),
                    Slot::Before => "earlier".into(),
                    Slot::After => "later".into(),
                },
                esc(c.name(j)),
                esc(&money(*a))
            );
        }
        if let Some(l) = k.label() {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{l}</text>",
                x + bar / 2.0,
                h - 8.0
            );
        }
    }
    svg.push_str("</g></svg>\n<ul class=\"legend\">");
    for j in 0..c.series.len() {
        let _ = write!(
            svg,
            "<li><span style=\"background:{}\"></span>{} {}</li>",
            c.color(j),
            esc(c.name(j)),
            esc(&money(c.sum(j)))
        );
    }
    let _ = write!(
        svg,
        "</ul>\n<p class=\"note\" id=\"chart-total\" data-amount=\"{:.2}\">{}</p>\n",
        c.total,
        esc(&c.note(&s.currency))
    );
    svg
}

/// What the chart shows, under it.
const CHART_NOTE: &str = "Job charges by the day they draw (the job's end), stacked by cluster, credits below \
     the line; \"earlier\" holds late charges and corrections of jobs that ended before the month.";

/// An index of a month's statements, linking each file.
pub fn index_html(center: &str, month: &str, rows: &[(String, String, String, Decimal, String)]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Statements {} — {}</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n<main>\n<header class=\"top\"><div><div class=\"center\">{}</div>\
         <h1>Statements for {}</h1></div></header>\n<table>\n<thead><tr><th>Project</th><th>Name</th><th>Status</th>\
         <th class=\"n\">Total</th></tr></thead>\n<tbody>\n",
        esc(month),
        esc(center),
        esc(center),
        esc(month)
    );
    let mut total = Decimal::ZERO;
    for (file, code, name, amount, status) in rows {
        total += *amount;
        let _ = writeln!(
            o,
            "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td>{}</tr>",
            esc(file),
            esc(code),
            esc(name),
            esc(status),
            amount_cell(*amount)
        );
    }
    let _ = write!(
        o,
        "</tbody>\n<tfoot><tr><td colspan=\"3\">{} statement(s)</td><td class=\"n\" id=\"total\" \
         data-amount=\"{total:.2}\">{}</td></tr></tfoot>\n</table>\n</main>\n</body>\n</html>\n",
        rows.len(),
        money(total)
    );
    o
}

/// One row per statement line, every statement in one table.
pub fn statement_csv(list: &[Statement]) -> String {
    let mut o = String::from(
        "project,month,status,number,section,cluster,node_type,metric,description,jobs,quantity,rate,amount\n",
    );
    for s in list {
        let (status, number) = match &s.status {
            Status::Final { number, .. } => ("final", number.to_string()),
            Status::ClosedWithoutStatement { .. } | Status::BeforeTheLedger { .. } => ("closed", String::new()),
            Status::Provisional => ("provisional", String::new()),
        };
        let mut row = |fields: [String; 9]| {
            let mut cells = vec![
                csv_field(&s.project.code),
                s.month.to_string(),
                status.to_owned(),
                number.clone(),
            ];
            cells.extend(fields.iter().map(|f| csv_field(f)));
            o.push_str(&cells.join(","));
            o.push('\n');
        };
        for l in &s.compute {
            row([
                "compute".into(),
                l.cluster.clone(),
                l.node_type.clone(),
                l.metric.clone(),
                [
                    if l.late { "late" } else { "" },
                    if line_is_product(l) { "" } else { "rounded by job" },
                ]
                .iter()
                .filter(|x| !x.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join("; "),
                l.jobs.to_string(),
                num(l.quantity),
                num(l.unit_rate),
                format!("{:.2}", l.amount),
            ]);
        }
        match &s.storage_billing {
            StorageBilling::Billed { .. } => {}
            StorageBilling::NotBilled | StorageBilling::Waived { .. } | StorageBilling::BeforeTheLedger => row([
                "storage".into(),
                String::new(),
                String::new(),
                String::new(),
                match &s.storage_billing {
                    StorageBilling::Waived { storage_waiver_reason } => format!("waived: {storage_waiver_reason}"),
                    StorageBilling::BeforeTheLedger => "none: before the ledger".into(),
                    _ => "not billed yet".into(),
                },
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
        for l in &s.storage {
            row([
                "storage".into(),
                String::new(),
                String::new(),
                "tb_months".into(),
                format!("{} TB-days", num(l.tb_days)),
                String::new(),
                num(l.quantity),
                num(l.unit_rate),
                format!("{:.2}", l.amount),
            ]);
        }
        for d in &s.discounts {
            row([
                "discount".into(),
                String::new(),
                String::new(),
                String::new(),
                format!(
                    "{} % on {} ({}: {}), list price {:.2}",
                    d.percent.normalize(),
                    d.on,
                    d.scope,
                    d.reason,
                    d.list_amount
                ),
                String::new(),
                String::new(),
                String::new(),
                format!("{:.2}", d.amount),
            ]);
        }
        for c in &s.corrections {
            row([
                c.kind.clone(),
                String::new(),
                String::new(),
                String::new(),
                format!(
                    "{}{} (by {})",
                    c.corrects.as_ref().map(|x| format!("{x}: ")).unwrap_or_default(),
                    c.reason.clone().unwrap_or_default(),
                    c.author
                ),
                String::new(),
                String::new(),
                String::new(),
                format!("{:.2}", c.amount),
            ]);
        }
        row([
            "total".into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            format!("{:.2}", s.total),
        ]);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::dec;

    #[test]
    fn money_groups_thousands_and_keeps_the_sign() {
        assert_eq!(money(dec!(0)), "0.00");
        assert_eq!(money(dec!(-0.5)), "-0.50");
        assert_eq!(money(dec!(999.99)), "999.99");
        assert_eq!(money(dec!(1000)), "1,000.00");
        assert_eq!(money(dec!(1234567.891)), "1,234,567.89");
        assert_eq!(money(dec!(-12345.6)), "-12,345.60");
    }

    #[test]
    fn a_csv_cell_never_runs_as_a_formula() {
        assert_eq!(
            csv_field("=HYPERLINK(\"http://x\")"),
            "\"'=HYPERLINK(\"\"http://x\"\")\""
        );
        assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_field("+cmd|' /C calc'!A0"), "'+cmd|' /C calc'!A0");
        assert_eq!(csv_field("-2+3+cmd"), "'-2+3+cmd");
        assert_eq!(csv_field("\tx"), "'\tx");
        assert_eq!(csv_field("\r=1"), "\"'\r=1\"");
        // Numbers and plain text are left alone.
        assert_eq!(csv_field("-12.50"), "-12.50");
        assert_eq!(csv_field("-1,234.56"), "\"-1,234.56\"");
        assert_eq!(csv_field("+3"), "+3");
        assert_eq!(csv_field("-"), "-");
        assert_eq!(csv_field("a=b"), "a=b");
        assert_eq!(csv_field("R&D, west"), "\"R&D, west\"");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">R&D's</a>"),
            "&lt;a href=&quot;x&quot;&gt;R&amp;D&#39;s&lt;/a&gt;"
        );
    }
}
