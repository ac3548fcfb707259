//! The web view's pages (docs/web.md), written with `maud` (HTML as Rust,
//! escaped by default, checked when compiled): the billing office's project
//! list and a project's page. Server-rendered, no script: links and plain
//! GET parameters only. The statement's numbers carry `data-amount` like the
//! documents, so the tests read them back.

use maud::{DOCTYPE, Markup, PreEscaped, html};
use rust_decimal::Decimal;

use super::{STYLE, chart, hours, money};
use crate::domain::period::Month;
use crate::service::statement::{Status, StorageBilling};
use crate::service::web::{Overview, ProjectPage};

const EXTRA: &str = r#"
nav.top { display: flex; justify-content: space-between; font-size: .9rem; margin-bottom: 1rem; }
nav.top a { color: var(--accent); text-decoration: none; }
a { color: var(--accent); }
.pager { display: flex; gap: 1rem; justify-content: flex-end; margin: .6rem 0; font-size: .9rem; }
td.code { white-space: nowrap; font-weight: 600; }
tr.shown td { background: #fff7e0; }
.dl a { margin-right: .5rem; }
"#;

/// Every byte but ASCII letters, digits and `-_~` is percent-encoded in a
/// path segment: a space is `%20` (not the form encoding's `+`, which a path
/// keeps as a plus), and `/`, `?`, `#` and `.` cannot change the path.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'~');

/// A path segment: the project code percent-encoded.
pub fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

fn page(title: &str, center: &str, who: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — " (center) }
                style { (PreEscaped(STYLE)) (PreEscaped(EXTRA)) }
            }
            body {
                main {
                    nav.top {
                        a href="/ui" { "hpc-ledger · web view" }
                        span.note { "signed in as " (who) }
                    }
                    (body)
                    footer { "hpc-ledger · read-only view of the ledger; every number is the ledger's" }
                }
            }
        }
    }
    .into_string()
}

/// Users by amount, largest first (then by name), as the statement lists them.
fn by_amount(users: &[crate::db::usage::UsageRow]) -> Vec<crate::db::usage::UsageRow> {
    let mut users = users.to_vec();
    users.sort_by(|a, b| b.amount.cmp(&a.amount).then_with(|| a.key.cmp(&b.key)));
    users
}

fn amount(d: Decimal) -> Markup {
    html! { td.n data-amount=(format!("{d:.2}")) { (money(d)) } }
}

/// The billing office's list of projects: this month's spend and balances.
pub fn overview(o: &Overview) -> String {
    let body = html! {
        header.top {
            div {
                div.center { (o.center) }
                h1 { "Projects — " (o.month.first_day().format("%B %Y")) }
            }
            div.status { (o.projects) " projects · amounts in " (o.currency) }
        }
        table #projects {
            thead { tr {
                th { "Project" } th { "Name" } th { "PI" }
                th.n { "Spend " (o.month) } th { "Remaining now (per pool)" }
            } }
            tbody {
                @for r in &o.rows {
                    tr {
                        td.code { a href={ "/ui/projects/" (seg(&r.code)) "?month=" (o.month) } { (r.code) } }
                        td.t { (r.name) } td.t { (r.pi) }
                        (amount(r.spend))
                        td {
                            @if r.pools.is_empty() { span.none { "not budgeted" } }
                            @for (i, b) in r.pools.iter().enumerate() {
                                @if i > 0 { "; " }
                                span data-amount=(format!("{:.2}", b.remaining)) { (money(b.remaining)) }
                                " (" (crate::domain::budget::pool_label(b, &r.pools)) ")"
                            }
                        }
                    }
                }
            }
        }
        div.pager {
            // The month shown stays as the pages turn.
            @if o.page > 1 { a href={ "/ui?month=" (o.month) "&page=" (o.page - 1) } { "← previous" } }
            span { "page " (o.page) " of " (o.pages) }
            @if o.page < o.pages { a href={ "/ui?month=" (o.month) "&page=" (o.page + 1) } { "next →" } }
        }
    };
    page("Projects", &o.center, "the billing office", body)
}

/// A project's page: its months and statements, the month shown (chart,
/// totals, budget, who used it) and its recent jobs.
pub fn project(p: &ProjectPage, who: &str) -> String {
    let s = &p.statement;
    let code = seg(&s.project.code);
    let base = format!("/ui/projects/{code}");
    let shown = s.month;
    let body = html! {
        header.top {
            div {
                div.center { (s.center) }
                h1 { (s.project.code) @if !s.project.name.is_empty() { " — " (s.project.name) } }
            }
            div.status {
                @if !s.project.pi.is_empty() { (s.project.pi) br; }
                "rate class " (s.project.rate_class.join(", then "))
            }
        }
        h2 { "Months" }
        table #months {
            thead { tr { th { "Month" } th { "Status" } th.n { "Total" } th { "Statement" } } }
            tbody {
                @for m in &p.months {
                    @let month = Month::of_date(m.period);
                    tr class=[(month == shown).then_some("shown")] {
                        @if let Some(file) = &m.archived_to {
                            // Its entries left the live ledger: no page or download to link to.
                            td { (month) }
                            td { @if let Some(n) = m.number { "final, No. " (n) ", archived" } }
                            (amount(m.total))
                            td { (file) }
                        } @else {
                            td { a href={ (base) "?month=" (month) } { (month) } }
                            td { @match m.number { Some(n) => { "final, No. " (n) }, None => { "open (provisional)" } } }
                            (amount(m.total))
                            td.dl {
                                a href={ (base) "/statements/" (month) ".html" } { "HTML" }
                                a href={ (base) "/statements/" (month) ".pdf" } { "PDF" }
                                a href={ (base) "/statements/" (month) ".csv" } { "CSV" }
                            }
                        }
                    }
                }
            }
        }
        h2 { (shown.first_day().format("%B %Y")) ": " @match &s.status {
            Status::Final { number, .. } => { "statement No. " (number) },
            Status::ClosedWithoutStatement { .. } | Status::BeforeTheLedger { .. } => { "closed, no statement (no entries)" },
            Status::Provisional => { "provisional" },
        } }
        table.summary {
            tr { td { "Compute" } (amount(s.compute_total())) }
            tr { td { "Storage" @match &s.storage_billing {
                StorageBilling::NotBilled => { " (not billed yet: this changes)" },
                StorageBilling::Waived { .. } => { " (waived)" },
                StorageBilling::BeforeTheLedger => { " (none: before the ledger)" },
                StorageBilling::Billed { .. } => {},
            } } (amount(s.storage_total())) }
            @if !s.discounts.is_empty() { tr { td { "Discounts" } (amount(s.discounts_total())) } }
            @if !s.corrections.is_empty() { tr { td { "Corrections" } (amount(s.corrections_total())) } }
            tr.total { td { "Total " (s.currency) } td.n #total data-amount=(format!("{:.2}", s.total)) { (money(s.total)) } }
        }
        @if !s.budgets.is_empty() {
            h2 { "Budget" }
            table #budget {
                thead { tr { th { "Pool" } th { "At" } th.n { "Allocated" } th.n { "Used" } th.n { "Held" } th.n { "Remaining" } } }
                tbody { @for b in &s.budgets { tr {
                    td { (crate::domain::budget::pool_label(b, &s.budgets)) }
                    td { (s.local(b.at).format("%Y-%m-%d %H:%M %Z")) }
                    (amount(b.allocated)) (amount(b.used)) (amount(b.held)) (amount(b.remaining))
                } } }
            }
        }
        h2 { "Spend by day" }
        (PreEscaped(chart(s, &p.details.days)))
        h2 { "Who used it" }
        table #users {
            thead { tr { th { "User" } th.n { "Jobs" } th.n { "Core-hours" } th.n { "GPU-hours" } th.n { "Amount" } } }
            // Largest amount first, as the statement document lists them.
            tbody { @for u in &by_amount(&p.details.users) { tr {
                td.t { (u.key) } td.n { (u.jobs) } td.n { (hours(u.core_hours)) } td.n { (hours(u.gpu_hours)) } (amount(u.amount))
            } } }
            tfoot { tr {
                td { "Total" } td {} td {} td {}
                (amount(p.details.users.iter().map(|u| u.amount).sum()))
            } }
        }
        h2 { "Recent jobs" }
        @if p.jobs.is_empty() { p.none { "no jobs on this page" } } @else {
            table #jobs {
                thead { tr {
                    th { "Ended" } th { "Job" } th { "User" } th { "Node type" } th.n { "Cores" } th.n { "GPUs" }
                    th.n { "Hours" } th { "State" } th.n { "Charged" }
                } }
                tbody { @for j in &p.jobs { tr {
                    td { (s.local(j.ended_at).format("%Y-%m-%d %H:%M %Z")) }
                    td { (j.cluster) "/" (j.job_id) @if let Some(i) = j.array_index { "_" (i) }
                         @if j.kind != "original" { " (" (j.kind) ")" }
                         @if j.replaced { " (replaced)" } }
                    td.t { (j.user_name) } td { (j.node_type) } td.n { (j.cores) } td.n { (j.gpus) }
                    // The hours charged: its time suspended is not (R1).
                    td.n { (hours(Decimal::from((j.ended_at - j.started_at).num_seconds() - i64::from(j.suspended_seconds)) / Decimal::from(3600))) }
                    // A PBS record's type (E, R) says how its run ended;
                    // Slurm's states are words already.
                    td { (match j.state.as_str() { "E" => "ended", "R" => "rerun", s => s }) }
                    @if let Some(m) = j.archived_in {
                        td.n { "archived (" (m.format("%Y-%m")) ")" }
                    } @else {
                        (amount(j.charged))
                    }
                } } }
            }
            p.note { "Newest recorded first. Charged: what the record charged at list price; a record marked "
                     "replaced was superseded by a later one for the same run, whose charge reversed it. "
                     "Discounts and corrections are on the statement. A record marked archived was charged in "
                     "a month since moved to an archive file." }
        }
        div.pager {
            @if let Some(before) = p.older_jobs {
                a href={ (base) "?month=" (shown) "&before=" (before) } { "older jobs →" }
            }
        }
    };
    page(&format!("{} {}", s.project.code, shown), &s.center, who, body)
}

/// The page a request that may not see something gets.
pub fn not_found() -> String {
    html! {
        (DOCTYPE)
        html lang="en" { head { meta charset="utf-8"; title { "Not found" } } body { p { "Not found." } } }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The billing office's list keeps its month as the pages turn (the
    /// pager's links named only the page, and the next page showed the
    /// current month's spend under the same heading).
    #[test]
    fn the_project_list_keeps_its_month_across_pages() {
        let o = Overview {
            center: "C".into(),
            currency: "USD".into(),
            month: "2026-10".parse().unwrap(),
            page: 2,
            pages: 3,
            projects: 120,
            rows: Vec::new(),
        };
        let html = overview(&o);
        assert!(html.contains("href=\"/ui?month=2026-10&amp;page=1\""), "{html}");
        assert!(html.contains("href=\"/ui?month=2026-10&amp;page=3\""), "{html}");
        assert!(html.contains("Spend 2026-10"), "{html}");
    }

    /// "Who used it" lists users as the statement does: largest amount
    /// first, then by name (it listed them by name).
    #[test]
    fn users_are_listed_by_amount() {
        let row = |key: &str, amount: &str| crate::db::usage::UsageRow {
            project: "P".into(),
            key: key.into(),
            jobs: 1,
            core_hours: Decimal::ONE,
            gpu_hours: Decimal::ZERO,
            tb_months: Decimal::ZERO,
            amount: amount.parse().unwrap(),
        };
        let users = [
            row("ada", "1.00"),
            row("bob", "9.50"),
            row("cy", "1.00"),
            row("di", "2.00"),
        ];
        let keys: Vec<String> = by_amount(&users).into_iter().map(|u| u.key).collect();
        assert_eq!(keys, ["bob", "di", "ada", "cy"]);
    }
}
