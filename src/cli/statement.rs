//! `hpc-ledger statement`: a project's statement of a month (or every
//! project's), as text a research group's administrator reads, CSV, JSON,
//! or an HTML or PDF document (src/document/) with an index for `--all --out`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

use super::print_json;
use crate::db::Readers;
use crate::document::{line_is_product, metric_label, num};
use crate::domain::period::Month;
use crate::service::statement::{
    Details, Statement, Status, StorageBilling, Which, statements, statements_with_details,
};

/// How to write a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Output {
    /// Text for people at a terminal.
    #[default]
    Text,
    /// One row per line, for spreadsheets.
    Csv,
    /// For programs.
    Json,
    /// A self-contained document to read, file and print (a usage chart, who used it).
    Html,
    /// The same document as a PDF (A4), made here: no browser needed.
    Pdf,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The project's code.
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    project: Option<String>,
    /// Every project with entries in the month.
    #[arg(long)]
    all: bool,
    /// The month, YYYY-MM.
    #[arg(long)]
    month: Month,
    /// How to print it: text for people, csv or json for programs, html or pdf for a document to read and file.
    #[arg(long, value_enum, default_value_t)]
    format: Output,
    /// With --all: write one file per project into this directory (and, for html and pdf, an index.html;
    /// CSV: one file for all when not given, on stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub async fn run(args: Args, readers: &Readers) -> anyhow::Result<ExitCode> {
    let pool = readers.open_configured().await?;
    let which = match &args.project {
        Some(p) => Which::Project(p),
        None => Which::All,
    };
    let documents = matches!(args.format, Output::Html | Output::Pdf);
    // A document's chart and users come from the same snapshot as its statement.
    let (list, details): (Vec<Statement>, Vec<Option<Details>>) = if documents {
        statements_with_details(&pool, args.month, which)
            .await?
            .into_iter()
            .map(|(s, d)| (s, Some(d)))
            .unzip()
    } else {
        let list = statements(&pool, args.month, which).await?;
        let none = vec![None; list.len()];
        (list, none)
    };
    let generated = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    let html =
        |i: usize| crate::document::statement_html(&list[i], details[i].as_ref().expect("read with it"), &generated);
    let pdf = |i: usize| {
        crate::document::pdf::statement_pdf(&list[i], details[i].as_ref().expect("read with it"), &generated)
    };
    match (&args.out, args.format) {
        (Some(dir), format) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let ext = match format {
                Output::Text => "txt",
                Output::Csv => "csv",
                Output::Json => "json",
                Output::Html => "html",
                Output::Pdf => "pdf",
            };
            let mut used = std::collections::HashSet::new();
            let mut index = Vec::new();
            for (i, s) in list.iter().enumerate() {
                let mut name = format!("{}-{}", s.month, file_safe(&s.project.code));
                while !used.insert(name.to_lowercase()) {
                    name.push('_');
                }
                let file = format!("{name}.{ext}");
                let path = dir.join(&file);
                let body: Vec<u8> = match format {
                    Output::Text => text(s).into_bytes(),
                    Output::Csv => crate::document::statement_csv(std::slice::from_ref(s)).into_bytes(),
                    Output::Json => (serde_json::to_string_pretty(s)? + "\n").into_bytes(),
                    Output::Html => html(i).into_bytes(),
                    Output::Pdf => pdf(i),
                };
                std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
                index.push((
                    file,
                    s.project.code.clone(),
                    s.project.name.clone(),
                    s.total,
                    status_word(s),
                ));
            }
            if documents {
                let center = list.first().map_or(String::new(), |s| s.center.clone());
                let path = dir.join("index.html");
                let body = crate::document::index_html(&center, &args.month.to_string(), &index);
                std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
            }
            println!(
                "{} statement(s) for {} written to {}{}",
                list.len(),
                args.month,
                dir.display(),
                if documents { " (index.html lists them)" } else { "" }
            );
        }
        (None, Output::Html) => {
            if args.all {
                bail!("--all with html output needs --out DIR (one document per project, and an index)");
            }
            print!("{}", html(0));
        }
        (None, Output::Pdf) => {
            use std::io::{IsTerminal, Write};
            if args.all {
                bail!("--all with pdf output needs --out DIR (one document per project, and an index)");
            }
            let mut out = std::io::stdout().lock();
            if out.is_terminal() {
                bail!("a PDF is not for a terminal: redirect it to a file (> statement.pdf) or give --out DIR");
            }
            out.write_all(&pdf(0))?;
            out.flush()?;
        }
        (None, Output::Csv) => print!("{}", crate::document::statement_csv(&list)),
        (None, Output::Json) => {
            if args.all {
                print_json(&list)?;
            } else {
                print_json(&list[0])?;
            }
        }
        (None, Output::Text) => {
            if args.all {
                bail!("--all with text output needs --out DIR (or use --format csv)");
            }
            print!("{}", text(&list[0]));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn status_word(s: &Statement) -> String {
    match &s.status {
        Status::Final { number, .. } => format!("final, No. {number}"),
        Status::ClosedWithoutStatement { .. } | Status::BeforeTheLedger { .. } => {
            "closed, no statement (no entries)".into()
        }
        Status::Provisional => "provisional".into(),
    }
}

/// A file name from a project code: letters, digits, '.', '_' and '-' kept;
/// a code that needed anything replaced gets the start of its SHA-256 too,
/// so that its file keeps its name whichever other projects have
/// statements that month (`A/B` and `A_B` are `A_B-…` and `A_B`).
fn file_safe(code: &str) -> String {
    use sha2::Digest;
    let s: String = code
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_start_matches('.');
    if s == code {
        s.to_owned()
    } else {
        format!("{s}-{}", &hex::encode(sha2::Sha256::digest(code.as_bytes()))[..8])
    }
}

/// The statement as a person reads it.
pub fn text(s: &Statement) -> String {
    let mut o = String::new();
    let cur = &s.currency;
    let _ = writeln!(o, "{}", s.center);
    let status = match &s.status {
        Status::Final {
            number,
            closed_at,
            seal_algorithm,
            seal,
        } => {
            format!(
                "STATEMENT No. {number} — {} — final (closed {})\nMonth seal ({seal_algorithm}): {seal}",
                s.month,
                s.local(*closed_at).format("%Y-%m-%d")
            )
        }
        Status::ClosedWithoutStatement { closed_at } => format!(
            "STATEMENT — {} — CLOSED {}: no statement was issued for this project (it had no entries in the month)",
            s.month,
            s.local(*closed_at).format("%Y-%m-%d")
        ),
        Status::BeforeTheLedger { first_closed } => format!(
            "STATEMENT — {} — CLOSED: before the ledger's first closed month, {first_closed}; no statement was issued (nothing was posted in it, and nothing can be)",
            s.month
        ),
        Status::Provisional => format!(
            "STATEMENT — {} — PROVISIONAL: the month is open and may still change",
            s.month
        ),
    };
    let _ = writeln!(o, "{status}");
    let _ = write!(o, "Project {}", s.project.code);
    if !s.project.name.is_empty() {
        let _ = write!(o, " — {}", s.project.name);
    }
    if !s.project.pi.is_empty() {
        let _ = write!(o, " (PI: {})", s.project.pi);
    }
    if s.project.rate_class.iter().any(|c| c != "default") {
        let _ = write!(o, "\nRate class: {}", s.project.rate_class.join(", then "));
    }
    let _ = writeln!(o, "\nAmounts in {cur}\n");

    let _ = writeln!(o, "Compute");
    let mut rounded_by_job = false;
    if s.compute.is_empty() {
        let _ = writeln!(o, "  (none)");
    } else {
        let rows: Vec<Vec<String>> = s
            .compute
            .iter()
            .map(|l| {
                let by_job = !line_is_product(l);
                rounded_by_job |= by_job;
                let metric = metric_label(l);
                vec![
                    l.cluster.clone(),
                    l.node_type.clone(),
                    if l.late { format!("{metric} (late)") } else { metric },
                    l.jobs.to_string(),
                    num(l.quantity),
                    num(l.unit_rate),
                    format!("{:.2}{}", l.amount, if by_job { " *" } else { "" }),
                ]
            })
            .collect();
        for line in super::table::render(
            &["cluster", "node type", "metric", "jobs", "quantity", "rate", "amount"],
            &rows,
        )
        .lines()
        {
            let _ = writeln!(o, "  {line}");
        }
    }
    let _ = writeln!(o, "  compute subtotal: {:.2}", s.compute_total());
    if rounded_by_job {
        let _ = writeln!(
            o,
            "  * each job's amount is computed from its exact quantity and rounded to the cent by itself (docs/rules.md);\n    \
             the line's amount is the sum of its jobs' amounts, which differs here from the quantity shown × rate"
        );
    }
    o.push('\n');

    let _ = writeln!(o, "Storage (reserved quota)");
    match &s.storage_billing {
        StorageBilling::NotBilled => {
            let _ = writeln!(
                o,
                "  storage for {} is not billed yet: this section changes when it is (hpc-ledger bill storage)",
                s.month
            );
        }
        StorageBilling::Waived { storage_waiver_reason } => {
            let _ = writeln!(
                o,
                "  storage for {} is not billed: waived ({storage_waiver_reason})",
                s.month
            );
        }
        StorageBilling::Billed { .. } | StorageBilling::BeforeTheLedger => {}
    }
    if s.storage.is_empty() {
        let _ = writeln!(o, "  (none)");
    } else {
        let rows: Vec<Vec<String>> = s
            .storage
            .iter()
            .map(|l| {
                vec![
                    num(l.tb_days),
                    num(l.quantity),
                    num(l.unit_rate),
                    format!("{:.2}", l.amount),
                ]
            })
            .collect();
        for line in super::table::render(&["TB-days", "TB-months", "rate", "amount"], &rows).lines() {
            let _ = writeln!(o, "  {line}");
        }
    }
    let _ = writeln!(o, "  storage subtotal: {:.2}\n", s.storage_total());

    if !s.discounts.is_empty() {
        let _ = writeln!(o, "Discounts");
        let rows: Vec<Vec<String>> = s
            .discounts
            .iter()
            .map(|d| {
                vec![
                    d.on.clone(),
                    format!("{} %", d.percent.normalize()),
                    d.scope.clone(),
                    d.reason.clone(),
                    format!("{:.2}", d.list_amount),
                    format!("{:.2}", d.amount),
                ]
            })
            .collect();
        for line in super::table::render(&["on", "percent", "for", "reason", "list price", "discount"], &rows).lines() {
            let _ = writeln!(o, "  {line}");
        }
        let list = s.compute_total() + s.storage_total();
        let _ = writeln!(
            o,
            "  list price {:.2}, discounts {:.2}, net {:.2}\n",
            list,
            s.discounts_total(),
            list + s.discounts_total()
        );
    }

    let _ = writeln!(o, "Corrections");
    if s.corrections.is_empty() {
        let _ = writeln!(o, "  (none)");
    } else {
        let rows: Vec<Vec<String>> = s
            .corrections
            .iter()
            .map(|c| {
                vec![
                    s.local(c.posted_at).format("%Y-%m-%d").to_string(),
                    c.kind.clone(),
                    c.corrects.clone().unwrap_or_default(),
                    c.reason.clone().unwrap_or_default(),
                    c.author.clone(),
                    format!("{:.2}", c.amount),
                ]
            })
            .collect();
        for line in super::table::render(&["date", "kind", "of", "reason", "by", "amount"], &rows).lines() {
            let _ = writeln!(o, "  {line}");
        }
    }
    let _ = writeln!(o, "  corrections subtotal: {:.2}\n", s.corrections_total());
    let _ = writeln!(o, "TOTAL {cur} {:.2}", s.total);
    for b in &s.budgets {
        let _ = writeln!(
            o,
            "\nBudget{} at {}: allocated {:.2}, used {:.2}, held {:.2}, remaining {:.2} ({:.1} % used)",
            b.cluster.as_deref().map(|c| format!(" for {c}")).unwrap_or_default(),
            s.local(b.at).format("%Y-%m-%d %H:%M %Z"),
            b.allocated,
            b.used,
            b.held,
            b.remaining,
            b.fraction_used * rust_decimal::Decimal::ONE_HUNDRED
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::file_safe;

    #[test]
    fn a_file_name_depends_on_its_code_alone() {
        assert_eq!(file_safe("PAS1234"), "PAS1234");
        assert_eq!(file_safe("A_B"), "A_B");
        let slash = file_safe("A/B");
        assert!(slash.starts_with("A_B-") && slash.len() == "A_B-".len() + 8, "{slash}");
        assert_ne!(file_safe("A/B"), file_safe("A B"));
        assert!(file_safe("../etc").starts_with("_etc-"), "{}", file_safe("../etc"));
    }
}
