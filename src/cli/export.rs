//! `hpc-ledger export journal`: a closed month's finance journal, as CSV in
//! the configured layout (`[journal] columns`, docs/month-end.md) or JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use rust_decimal::Decimal;

use super::csv_field;
use crate::db::Target;
use crate::domain::journal::{Column, Field, Value};
use crate::domain::period::Month;
use crate::service::journal::{Journal, Line, export};

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// A closed month's finance journal: each statement's total debited to its project's funding
    /// sources (by share, to the cent) and credited to the center's revenue accounts by service.
    ///
    /// Every export is logged (the audit checks that exporting the month again gives the same
    /// lines); once a month is exported, new funding and revenue sets begin after it.
    ///
    /// Examples:
    ///   hpc-ledger export journal --month 2026-10 --out journal-2026-10.csv
    ///   hpc-ledger export journal --month 2026-10 --format json --dry-run
    #[command(verbatim_doc_comment)]
    Journal(JournalArgs),
}

/// How to write the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum JournalFormat {
    /// In the configured column layout, for the finance system's journal upload.
    #[default]
    Csv,
    /// Every field of every line, with the month's seal and statements.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct JournalArgs {
    /// The month, YYYY-MM (closed).
    #[arg(long)]
    month: Month,
    /// csv in the configured layout, for the finance system; json with every field, the seal and the statements.
    #[arg(long, value_enum, default_value_t)]
    format: JournalFormat,
    /// Write it to this file (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Show the journal without logging it as exported.
    #[arg(long)]
    dry_run: bool,
}

/// Write `bytes` to `path` as a whole: into a hidden file beside it, synced,
/// then renamed over it and the directory synced. A path that is not a
/// regular file (`/dev/null`, `/dev/stdout`, a named pipe) is written in
/// place, never replaced; a symbolic link's target is the file replaced.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let target;
    let path = match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
            return f.write_all(bytes).and_then(|()| f.flush());
        }
        Ok(_) if std::fs::symlink_metadata(path)?.file_type().is_symlink() => {
            target = std::fs::canonicalize(path)?;
            target.as_path()
        }
        _ => path,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "journal".into(), |n| n.to_string_lossy());
    let partial = dir.join(format!(".{name}.{}.partial", std::process::id()));
    // The file replaced keeps its mode and, where this user may, its owner
    // (a journal kept 0640 for finance stays so).
    let before = std::fs::metadata(path).ok();
    let create = || std::fs::OpenOptions::new().write(true).create_new(true).open(&partial);
    // One left by an export killed before its rename (a container's
    // process is often the same pid every run): removed, not in the way.
    let created = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&partial)?;
            create()
        }
        other => other,
    };
    let mut f = match created {
        Ok(f) => f,
        // A directory this user may not write in, beside a file it may:
        // the file is written in place, synced, as it was before.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && before.is_some() => {
            let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(path)?;
            f.write_all(bytes)?;
            return f.sync_all();
        }
        Err(e) => return Err(e),
    };
    let written = (|| {
        if let Some(m) = &before {
            use std::os::unix::fs::MetadataExt as _;
            f.set_permissions(m.permissions())?;
            // Its owner where this user may (root), else at least its group.
            if std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid())).is_err() {
                let _ = std::os::unix::fs::fchown(&f, None, Some(m.gid()));
            }
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&partial, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

pub async fn run(cmd: Cmd, target: &Target, by: &str) -> anyhow::Result<ExitCode> {
    let Cmd::Journal(args) = cmd;
    let pool = target.open_configured().await?;
    let format = args.format;
    let out = args.out.clone();
    // Written before the export is logged: a journal that could not be
    // written is not one finance has.
    let journal = export(&pool, args.month, by, args.dry_run, |journal, layout| {
        let text = match format {
            JournalFormat::Csv => csv(journal, layout),
            JournalFormat::Json => serde_json::to_string_pretty(journal).map_err(|e| e.to_string())? + "\n",
        };
        match &out {
            // Whole and on disk before the export is logged: a kill or a
            // power cut leaves the file that was there or the new one.
            Some(path) => write_durably(path, text.as_bytes()).map_err(|e| format!("{}: {e}", path.display())),
            None => {
                use std::io::Write as _;
                let mut stdout = std::io::stdout().lock();
                stdout
                    .write_all(text.as_bytes())
                    .and_then(|()| stdout.flush())
                    .map_err(|e| e.to_string())
            }
        }
    })
    .await?;
    let numbers: Vec<i64> = journal.statements.iter().map(|s| s.number).collect();
    let span = match (numbers.first(), numbers.last()) {
        (Some(a), Some(b)) if a != b => format!("statements {a}–{b}"),
        (Some(a), _) => format!("statement {a}"),
        _ => "no statements".into(),
    };
    eprintln!(
        "journal {} ({}): {} lines, debits {:.2} = credits {:.2} {}; {span}; seal {} {}; {}",
        journal.journal,
        journal.date,
        journal.lines.len(),
        journal.debit_total,
        journal.credit_total,
        journal.currency,
        journal.seal_algorithm,
        journal.seal,
        match journal.export_id {
            Some(id) => format!("logged as export {id}"),
            None => "dry run, not logged".into(),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// A field of a line, as its CSV cell.
pub fn cell(journal: &Journal, line: &Line, field: Field) -> String {
    let money = |d: Decimal| format!("{d:.2}");
    match field {
        Field::Journal => journal.journal.clone(),
        Field::Date => journal.date.to_string(),
        Field::Month => journal.month.to_string(),
        Field::Line => line.line.to_string(),
        Field::Statement => line.statement.to_string(),
        Field::Project => line.project.clone(),
        Field::ProjectName => line.project_name.clone(),
        Field::Side => line.side.to_owned(),
        Field::Fund => line.fund.clone(),
        Field::CostCenter => line.cost_center.clone(),
        Field::Grant => line.grant.clone().unwrap_or_default(),
        Field::Account => line.account.clone(),
        Field::Service => line.service.clone().unwrap_or_default(),
        Field::Share => line.share.map(|s| s.to_string()).unwrap_or_default(),
        Field::Amount => money(line.amount),
        Field::Debit if line.amount > Decimal::ZERO => money(line.amount),
        Field::Credit if line.amount < Decimal::ZERO => money(-line.amount),
        Field::Debit | Field::Credit => String::new(),
        Field::Currency => journal.currency.clone(),
        Field::Description => line.description.clone(),
        Field::Seal => journal.seal.clone(),
    }
}

/// The journal as CSV in a layout: a header row, then one row per line.
pub fn csv(journal: &Journal, layout: &[Column]) -> String {
    let row = |cells: Vec<String>| -> String {
        let mut s = cells.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(",");
        s.push('\n');
        s
    };
    let mut out = row(layout.iter().map(|c| c.header.clone()).collect());
    for l in &journal.lines {
        out.push_str(&row(layout
            .iter()
            .map(|c| match &c.value {
                Value::Field(f) => cell(journal, l, *f),
                Value::Text(t) => t.clone(),
            })
            .collect()));
    }
    out
}
