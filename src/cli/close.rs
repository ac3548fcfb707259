//! `hpc-ledger close`, `verify` and `audit`: closing a month, checking the
//! seals, and checking every charge again in SQL.

use std::process::ExitCode;

use chrono::Utc;

use super::{Format, print_json, table};
use crate::db::{Readers, Target};
use crate::domain::period::Month;
use crate::service::close::{
    Anchor, AuditReport, CloseOutcome, anchors, audit_of, close, first_to_close, verify, verify_against,
};

/// Exit code of `verify` and `audit` when they find something.
pub const EXIT_FINDINGS: u8 = 5;

/// Close a month: freeze it, number its statements, seal it.
///
/// Examples:
///   hpc-ledger close --month 2026-10 --anchor-file seals.jsonl
///   hpc-ledger close --through 2026-10     # every open month up to October, in order
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct CloseArgs {
    /// The month, YYYY-MM: the month after the last closed one, over, with its storage billed.
    #[arg(long, required_unless_present = "through", conflicts_with = "through")]
    month: Option<Month>,
    /// Close every open month from the first (the month after the last
    /// closed one; with none closed, the first with entries) through this
    /// one, in order, stopping at the first problem.
    #[arg(long, value_name = "MONTH")]
    through: Option<Month>,
    /// Append the month's seal to this file (one JSON line per month), kept
    /// where the database's owner cannot rewrite it: `verify --against` checks
    /// the database against it. Closing a closed month again appends it if missing.
    #[arg(long, env = "HPC_LEDGER_ANCHOR_FILE", value_name = "FILE")]
    anchor_file: Option<std::path::PathBuf>,
    /// POST the month's seal (the same JSON) to this URL (http://, or https://
    /// through curl).
    #[arg(long, env = "HPC_LEDGER_ANCHOR_URL", value_name = "URL")]
    anchor_url: Option<String>,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// What an anchor file holds: its anchors in order, the lines that are not
/// anchors (line number, why: a write cut short by a full disk, say), and
/// whether its last line ends (an append must start on a line of its own).
/// A file that does not exist holds nothing.
struct AnchorFile {
    anchors: Vec<Anchor>,
    not_anchors: Vec<(usize, String)>,
    ends_line: bool,
}

fn read_anchor_file(path: &std::path::Path) -> anyhow::Result<AnchorFile> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => anyhow::bail!("reading the anchor file {}: {e}", path.display()),
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut file = AnchorFile {
        anchors: Vec::new(),
        not_anchors: Vec::new(),
        ends_line: bytes.is_empty() || bytes.ends_with(b"\n"),
    };
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match serde_json::from_str::<Anchor>(line) {
            Ok(a) => file.anchors.push(a),
            Err(e) => file.not_anchors.push((n + 1, e.to_string())),
        }
    }
    Ok(file)
}

/// Append `lines` (each a JSON anchor) to the anchor file, on lines of their
/// own, and sync it.
fn append_lines(path: &std::path::Path, file: &AnchorFile, lines: &[String]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut text = String::new();
    if !file.ends_line {
        text.push('\n');
    }
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| anyhow::anyhow!("opening the anchor file {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// An anchor file holding another seal for the month than the database's:
/// closing again cannot mend it (the file or the ledger was changed).
#[derive(Debug)]
struct SealDiffers(String);

impl std::fmt::Display for SealDiffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SealDiffers {}

/// Append `a` to the anchor file unless that month's seal is there already.
/// A file that holds another seal for the month is not appended to: the
/// database's seal changed after it was anchored (a month's seal never
/// does), and appending it would anchor the change.
fn append_anchor(path: &std::path::Path, a: &Anchor) -> anyhow::Result<bool> {
    let file = read_anchor_file(path)?;
    if let Some(k) = file.anchors.iter().find(|k| k.month == a.month) {
        if k.seal != a.seal {
            return Err(SealDiffers(format!(
                "{} holds the seal {} for {}, and the database records {}: the month's seal was changed after it \
                 was anchored; nothing was appended: run `hpc-ledger verify --against {}`",
                path.display(),
                k.seal,
                a.month,
                a.seal,
                path.display()
            ))
            .into());
        }
        return Ok(false);
    }
    append_lines(path, &file, &[serde_json::to_string(a)?])?;
    Ok(true)
}

/// POST `a` as JSON to `url`: http:// directly, https:// through curl.
async fn post_anchor(url: &str, a: &Anchor) -> anyhow::Result<()> {
    let body = serde_json::to_string(a)?;
    if let Some(rest) = url.strip_prefix("http://") {
        let (hostport, path) = rest
            .split_once('/')
            .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
        let addr = tokio::net::lookup_host(hostport)
            .await?
            .next()
            .ok_or_else(|| anyhow::anyhow!("{hostport} has no address"))?;
        let r = crate::serve::client::post(addr, &path, None, body.as_bytes()).await?;
        anyhow::ensure!(
            (200..300).contains(&r.status),
            "the anchor URL answered {}: {}",
            r.status,
            r.body.trim()
        );
        return Ok(());
    }
    anyhow::ensure!(
        url.starts_with("https://"),
        "the anchor URL must be http:// or https://"
    );
    let out = run_with_input(
        std::process::Command::new("curl").args([
            "--fail-with-body",
            "-sS",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
            url,
        ]),
        &body,
    )
    .map_err(|e| anyhow::anyhow!("posting the anchor with curl: {e}"))?;
    anyhow::ensure!(
        out.status.success(),
        "the anchor URL refused it: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn run_with_input(cmd: &mut std::process::Command, input: &str) -> std::io::Result<std::process::Output> {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child.stdin.take().expect("piped").write_all(input.as_bytes())?;
    child.wait_with_output()
}

/// Append to the anchor file the seal of every closed month it holds no
/// seal of, oldest first: months closed by a `close` that was stopped
/// between a month's commit and its anchor, or before the file was kept.
/// Returns the months appended.
fn catch_up_anchor_file(path: &std::path::Path, closed: &[Anchor]) -> anyhow::Result<Vec<Month>> {
    let file = read_anchor_file(path)?;
    let held: std::collections::HashSet<Month> = file.anchors.iter().map(|a| a.month).collect();
    let missing: Vec<&Anchor> = closed.iter().filter(|a| !held.contains(&a.month)).collect();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    let lines = missing
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    append_lines(path, &file, &lines)?;
    Ok(missing.iter().map(|a| a.month).collect())
}

/// Keep `o`'s seal outside the database, as `args` asks.
async fn keep_anchor(args: &CloseArgs, o: &CloseOutcome) -> anyhow::Result<()> {
    // The month is closed now, whatever happens to its anchor: say how to
    // anchor it again if that fails (closing again is harmless).
    let again = || {
        format!(
            "{} is closed; its seal was not kept outside the database: run `hpc-ledger close --month {}` again with the anchor option",
            o.month, o.month
        )
    };
    if let Some(path) = &args.anchor_file {
        append_anchor(path, &o.anchor()).map_err(|e| {
            if e.is::<SealDiffers>() {
                // Not worth running again: the seals differ.
                e.context(format!("{} is closed; its seal was not anchored", o.month))
            } else {
                e.context(again())
            }
        })?;
    }
    if let Some(url) = &args.anchor_url {
        post_anchor(url, &o.anchor()).await.map_err(|e| e.context(again()))?;
    }
    Ok(())
}

pub async fn run_close(args: CloseArgs, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    if let Some(path) = &args.anchor_file {
        let added = catch_up_anchor_file(path, &anchors(&pool).await?)?;
        if !added.is_empty() {
            let months: Vec<String> = added.iter().map(ToString::to_string).collect();
            eprintln!(
                "note: {} held no seal of {} (closed before, not anchored there); appended",
                path.display(),
                months.join(", ")
            );
        }
    }
    // Each month's seal is kept outside the database as soon as it is
    // closed, before the next month is closed: a `close --through` stopped
    // part-way leaves no closed month unanchored but the one it was in.
    // A month closed whose anchor failed is reported with the others (it is
    // closed), and the run stops there.
    let now = Utc::now();
    let (first, last) = match (args.month, args.through) {
        (Some(month), _) => (month, month),
        (None, Some(through)) => {
            let first = first_to_close(&pool, through).await?;
            (first.map_or(through, |f| f.min(through)), through)
        }
        (None, None) => unreachable!("clap requires --month or --through"),
    };
    let mut done = Vec::new();
    // The problem, its text for JSON, and whether it was the anchor of the
    // last month done (its own message names the month).
    let mut stopped: Option<(anyhow::Error, String, bool)> = None;
    let mut month = first;
    loop {
        match close(&pool, month, author, now).await {
            Ok(o) => {
                let anchored = keep_anchor(&args, &o).await;
                done.push(o);
                if let Err(e) = anchored {
                    let text = format!("{e:#}");
                    stopped = Some((e, text, true));
                    break;
                }
            }
            Err(e) if args.month.is_some() => return Err(e.into()),
            Err(e) => {
                let text = e.to_string();
                stopped = Some((e.into(), text, false));
                break;
            }
        }
        if month >= last {
            break;
        }
        month = month.next();
    }
    // Each month's rollups folded to one row per key, now that its close has
    // committed (and its anchor is kept) and postings no longer wait on it
    // (migration 0042).
    if done.iter().any(|o| o.closed_now) {
        crate::service::fold_rollups(&pool).await;
    }
    match args.format {
        Format::Json if args.through.is_some() => print_json(&serde_json::json!({
            "months": done,
            "stopped": stopped.as_ref().map(|(_, text, _)| text),
        }))?,
        Format::Json => print_json(&done[0])?,
        Format::Text => {
            let tz = crate::service::config::time_zone(&pool).await?;
            for o in &done {
                print!("{}", render_close(o, tz));
            }
        }
    }
    if let Some((e, _, anchor)) = stopped {
        return Err(match done.last() {
            Some(d) if args.through.is_some() && !anchor => e.context(format!("stopped after {}", d.month)),
            _ => e,
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn render_close(o: &CloseOutcome, tz: chrono_tz::Tz) -> String {
    let mut out = String::new();
    if o.closed_now {
        out.push_str(&format!(
            "{} closed by {}: {} entries, total {:.2}\n",
            o.month, o.closed_by, o.entry_count, o.total
        ));
    } else {
        out.push_str(&format!(
            "{} was already closed ({} by {}): {} entries, total {:.2}\n",
            o.month,
            super::local_time(o.closed_at, tz),
            o.closed_by,
            o.entry_count,
            o.total
        ));
    }
    out.push_str(&format!("seal ({}): {}\n", o.seal_algorithm, o.seal));
    if !o.statements.is_empty() {
        let rows: Vec<Vec<String>> = o
            .statements
            .iter()
            .map(|(p, n, t)| vec![n.to_string(), p.clone(), format!("{t:.2}")])
            .collect();
        out.push_str(&table::render(&["statement", "project", "total"], &rows));
    }
    out
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Only this month, its seal recomputed from the seal recorded for the
    /// month before it (default: every closed month, along the whole chain).
    #[arg(long)]
    month: Option<Month>,
    /// Check the database against seals kept outside it (an anchor file
    /// written by `close --anchor-file`): each anchored month must be closed
    /// with that seal and recompute to it.
    #[arg(long, value_name = "FILE", conflicts_with = "month")]
    against: Option<std::path::PathBuf>,
    /// Print every closed month's anchor (JSON lines), to start an anchor
    /// file for months closed before one was kept.
    #[arg(long, conflicts_with_all = ["month", "against"])]
    export: bool,
    /// Check archive files (a directory, or one file) written by `archive`:
    /// each file's seal recomputed from the file, chained to the month
    /// before it, and the month archived in the ledger with that file.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["month", "against", "export"])]
    archive: Option<std::path::PathBuf>,
    /// With --archive: the first archived month whose file must be there
    /// (the files of months before it were destroyed at the end of their
    /// retention); default: every archived month's.
    #[arg(long, value_name = "MONTH", requires = "archive")]
    since: Option<Month>,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: super::ListFormat,
}

pub async fn run_verify(args: VerifyArgs, readers: &Readers) -> anyhow::Result<ExitCode> {
    let pool = readers.open_configured().await?;
    if args.export {
        for a in anchors(&pool).await? {
            println!("{}", serde_json::to_string(&a)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(path) = &args.archive {
        return super::archive::run_verify(&pool, path, args.since, args.format).await;
    }
    if let Some(path) = &args.against {
        anyhow::ensure!(path.exists(), "the anchor file {} does not exist", path.display());
        let file = read_anchor_file(path)?;
        // A line that is not an anchor (an append cut short by a full disk)
        // is passed over: the months are checked against the others, and a
        // month with no anchor left is reported as such.
        for (n, why) in &file.not_anchors {
            eprintln!("warning: {}:{n}: not an anchor ({why}); passed over", path.display());
        }
        let checks = verify_against(&pool, &file.anchors).await?;
        let bad = checks.iter().filter(|c| !c.holds()).count();
        match args.format {
            super::ListFormat::Json => print_json(&checks)?,
            super::ListFormat::Csv => {
                let rows: Vec<Vec<String>> = checks
                    .iter()
                    .map(|c| {
                        vec![
                            c.month.to_string(),
                            c.holds().to_string(),
                            c.anchored_seal.clone().unwrap_or_default(),
                            c.recorded_seal.clone().unwrap_or_default(),
                            c.recomputed_seal.clone().unwrap_or_default(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table::csv(
                        &["month", "holds", "anchored_seal", "recorded_seal", "recomputed_seal"],
                        &rows
                    )
                );
            }
            super::ListFormat::Text => {
                for c in &checks {
                    let line = match (&c.anchored_seal, &c.recorded_seal) {
                        _ if c.holds() => format!("{}: matches its anchor", c.month),
                        (None, Some(_)) => format!("{}: closed, but not in the anchor file", c.month),
                        (Some(a), None) => format!("{}: anchored ({a}) but not closed in the database", c.month),
                        (Some(a), Some(r)) => format!(
                            "{}: DIFFERS FROM ITS ANCHOR\n  anchored   {a}\n  recorded   {r}\n  recomputed {}",
                            c.month,
                            c.recomputed_seal.as_deref().unwrap_or("-")
                        ),
                        (None, None) => continue,
                    };
                    println!("{line}");
                }
            }
        }
        return Ok(if bad > 0 {
            ExitCode::from(EXIT_FINDINGS)
        } else {
            ExitCode::SUCCESS
        });
    }
    let checks = verify(&pool, args.month).await?;
    // A month named that is not closed has no seal: saying so, not that
    // nothing is closed, and not a success an auditor's script would take
    // for a verified month.
    if let (Some(m), true) = (args.month, checks.is_empty()) {
        anyhow::bail!(
            "{m} is not closed: it has no seal to verify (`hpc-ledger audit --month {m}` checks its entries)"
        );
    }
    let broken = checks.iter().filter(|c| !c.holds()).count();
    match args.format {
        super::ListFormat::Json => print_json(&checks)?,
        super::ListFormat::Csv => {
            let rows: Vec<Vec<String>> = checks
                .iter()
                .map(|c| {
                    vec![
                        Month::of_date(c.period).to_string(),
                        c.holds().to_string(),
                        c.entries.to_string(),
                        c.recorded_entries.to_string(),
                        format!("{:.2}", c.total),
                        format!("{:.2}", c.recorded_total),
                        c.recorded_seal.clone(),
                        c.recomputed_seal.clone(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table::csv(
                    &[
                        "month",
                        "holds",
                        "entries",
                        "recorded_entries",
                        "total",
                        "recorded_total",
                        "recorded_seal",
                        "recomputed_seal"
                    ],
                    &rows
                )
            );
        }
        super::ListFormat::Text => {
            for c in &checks {
                let month = Month::of_date(c.period);
                if c.holds() {
                    let archived = c
                        .archived_to
                        .as_ref()
                        .map_or_else(String::new, |f| format!("; archived to {f}"));
                    println!(
                        "{month}: seal holds ({} entries, total {:.2}{archived})",
                        c.entries, c.total
                    );
                } else {
                    println!("{month}: SEAL BROKEN");
                    println!(
                        "  recorded   {} ({} entries, total {:.2})",
                        c.recorded_seal, c.recorded_entries, c.recorded_total
                    );
                    println!(
                        "  recomputed {} ({} entries, total {:.2})",
                        c.recomputed_seal, c.entries, c.total
                    );
                }
            }
            if checks.is_empty() {
                println!("no month is closed");
            }
        }
    }
    Ok(if broken > 0 {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Also read every kept raw record again with the parsers and compare
    /// it with what the ledger stored from it (cluster, job, times, project,
    /// queue, nodes, cores, memory, GPUs, fingerprints), and report runs
    /// without records and charging records without charges.
    #[arg(long, conflicts_with = "month")]
    deep: bool,
    /// With --deep: also read again the records whose raw text an archive
    /// moved into its files (migration 0047), from the files in DIR.
    #[arg(long, value_name = "DIR", requires = "deep")]
    archive: Option<std::path::PathBuf>,
    /// Audit one posting month, YYYY-MM: the findings of its entries,
    /// draws and journal exports, and its seal. Findings of no month
    /// (rejected records, holds, transfers) are the whole audit's.
    #[arg(long, value_name = "YYYY-MM")]
    month: Option<Month>,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: super::ListFormat,
}

pub async fn run_audit(args: AuditArgs, readers: &Readers) -> anyhow::Result<ExitCode> {
    let pool = readers.open_configured().await?;
    if let (true, Some(dir)) = (args.deep, &args.archive) {
        // A directory that cannot be listed stops it before the long
        // passes; a file in it that cannot be read is a finding.
        crate::service::archive::files(dir)?;
    }
    let report = audit_of(&pool, args.month).await?;
    let deep = match args.deep {
        true => {
            let mut d = crate::service::deep::deep_audit(&pool).await?;
            if let Some(dir) = &args.archive {
                crate::service::deep::reread_archived(&pool, dir, &mut d, crate::service::deep::DEEP_KEPT).await?;
            }
            Some(d)
        }
        false => None,
    };
    match args.format {
        super::ListFormat::Json => {
            let mut value = serde_json::to_value(&report)?;
            if let (Some(d), Some(map)) = (&deep, value.as_object_mut()) {
                map.insert("deep".into(), serde_json::to_value(d)?);
            }
            print_json(&value)?
        }
        super::ListFormat::Csv => print!("{}", findings_csv(&report, deep.as_ref())),
        super::ListFormat::Text => {
            print!("{}", render(&report));
            if let Some(d) = &deep {
                print!("{}", render_deep(d));
            }
        }
    }
    if args.format != super::ListFormat::Text && report.discrepancies_found > report.discrepancies.len() as u64 {
        eprintln!(
            "audit: {} discrepancies found, the first {} listed (every one is counted by kind and field in \
             `--format json`)",
            report.discrepancies_found,
            report.discrepancies.len()
        );
    }
    Ok(if report.clean() && deep.as_ref().is_none_or(|d| d.clean()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FINDINGS)
    })
}

/// How many differences the text output lists (JSON has every one kept).
const DEEP_SHOWN: usize = 50;

/// How many discrepancies the text output lists (JSON and CSV have every
/// one kept).
const AUDIT_SHOWN: usize = 50;

/// Findings counted beyond those kept: how many were found, how many kept,
/// and every one by field.
struct Counted<'a> {
    found: u64,
    kept: usize,
    by: &'a std::collections::BTreeMap<String, u64>,
}

/// The text's last lines when it lists fewer findings than were found:
/// how many more, where the kept ones are listed (`formats`), and the
/// counts by field.
fn beyond_shown(c: Counted, shown: usize, formats: &str, by_label: &str) -> String {
    let more = c.found - c.kept.min(shown) as u64;
    if more == 0 {
        return String::new();
    }
    let listed = if c.found > c.kept as u64 {
        format!("{formats} lists the first {}", c.kept)
    } else {
        format!("{formats} lists all")
    };
    let by: Vec<String> = c.by.iter().map(|(field, n)| format!("{field} {n}")).collect();
    format!("… {more} more ({listed})\n{by_label}: {}\n", by.join(", "))
}

pub fn render_deep(d: &crate::service::deep::DeepReport) -> String {
    let mut o = String::new();
    if d.clean() {
        o.push_str(&format!(
            "deep: {} job records read again from their raw records: every one says what the ledger stores\n",
            d.records + d.read_from_archive
        ));
    } else {
        o.push_str(&format!(
            "deep: {} job records read again from their raw records: {} difference(s) between a raw record and the ledger:\n",
            d.records + d.read_from_archive,
            d.differences_found
        ));
        let rows: Vec<Vec<String>> = d
            .differences
            .iter()
            .take(DEEP_SHOWN)
            .map(|x| {
                vec![
                    x.record_id.map_or(String::new(), |r| r.to_string()),
                    x.job.clone(),
                    x.field.clone(),
                    x.stored.clone(),
                    x.reread.clone(),
                ]
            })
            .collect();
        o.push_str(&table::render(
            &["record", "job", "field", "stored", "raw record says"],
            &rows,
        ));
        o.push_str(&beyond_shown(
            Counted {
                found: d.differences_found,
                kept: d.differences.len(),
                by: &d.differences_by_field,
            },
            DEEP_SHOWN,
            "`--format json`",
            "differences by field",
        ));
    }
    if d.archive_read {
        o.push_str(&format!(
            "deep: of them, {} job records read again from the archive files (their raw text is there, not in the \
             ledger); {} of the {} archived records not read from them (not in those files, or a line that is not \
             the text the ledger archived: a difference above)\n",
            d.read_from_archive,
            d.raw_archived.saturating_sub(d.read_from_archive),
            d.raw_archived
        ));
    } else if d.raw_archived > 0 {
        o.push_str(&format!(
            "deep: {} job records not read again: their raw text is in the archive files (`audit --deep --archive \
             DIR` reads them there; `verify --archive DIR` checks the files against the digests the ledger kept)\n",
            d.raw_archived
        ));
    }
    if !d.reassigned.is_empty() {
        o.push_str(&format!(
            "deep: {} record(s) charged to another project than the account they name, by a recorded decision \
             (audit.project_reassignments):\n",
            d.reassigned.len()
        ));
        for r in d.reassigned.iter().take(DEEP_SHOWN) {
            o.push_str(&format!(
                "  {}: {} -> {} by {}: {}\n",
                r.job.as_deref().unwrap_or("?"),
                r.from_account.as_deref().unwrap_or("(no account)"),
                r.project,
                r.by,
                r.reason
            ));
        }
    }
    if !d.unverifiable.is_empty() {
        o.push_str(&format!(
            "deep: {} not verifiable, from before migration 0020 (records that cannot be read without the read options \
             not kept then, e.g. headerless sacct lines; runs left for refused jobs); the first: {} {}: {}\n",
            d.unverifiable.len(),
            d.unverifiable[0].job,
            d.unverifiable[0].field,
            d.unverifiable[0].reread
        ));
    }
    o
}

/// Every finding of an audit as one CSV table (a header alone when it is
/// clean): altered definitions, discrepancies, broken seals, and with
/// `--deep` the differences between raw records and the ledger.
fn findings_csv(r: &AuditReport, deep: Option<&crate::service::deep::DeepReport>) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for d in &r.definitions {
        rows.push(vec![
            "definition".into(),
            String::new(),
            d.kind.to_owned(),
            String::new(),
            String::new(),
            d.name.clone(),
            "the migrations' definition".into(),
            d.problem.clone(),
        ]);
    }
    for d in &r.discrepancies {
        rows.push(vec![
            "discrepancy".into(),
            d.entry_id.map_or(String::new(), |e| e.to_string()),
            d.kind.clone(),
            d.period.map_or(String::new(), |p| Month::of_date(p).to_string()),
            d.project.clone().unwrap_or_default(),
            d.field.clone(),
            d.expected.clone().unwrap_or_default(),
            d.recorded.clone().unwrap_or_default(),
        ]);
    }
    for s in r.seals.iter().filter(|s| !s.holds()) {
        rows.push(vec![
            "seal".into(),
            String::new(),
            "month".into(),
            Month::of_date(s.period).to_string(),
            String::new(),
            "seal".into(),
            s.recomputed_seal.clone(),
            s.recorded_seal.clone(),
        ]);
    }
    for d in deep.map(|d| d.differences.as_slice()).unwrap_or_default() {
        rows.push(vec![
            "raw record".into(),
            d.record_id.map_or(String::new(), |r| r.to_string()),
            "job record".into(),
            String::new(),
            d.job.clone(),
            d.field.clone(),
            d.reread.clone(),
            d.stored.clone(),
        ]);
    }
    table::csv(
        &[
            "finding",
            "id",
            "kind",
            "month",
            "project_or_job",
            "field",
            "expected",
            "recorded",
        ],
        &rows,
    )
}

pub fn render(r: &AuditReport) -> String {
    let mut o = String::new();
    if let Some(m) = r.month {
        o.push_str(&format!(
            "audit of {m}: its entries, draws, journal exports and seal (findings of no month are the whole audit's)\n"
        ));
    }
    if r.replica {
        o.push_str(
            "read on a streaming replica: everything below as of its last replayed change; the audit views' \
             queries were not compared with the migrations' (a replica cannot create them again: the primary's \
             audit does)\n",
        );
    }
    if !r.definitions.is_empty() {
        o.push_str(&format!(
            "{} of the database's own definitions are not the migrations' (its guards or the audit itself were altered):\n",
            r.definitions.len()
        ));
        for d in &r.definitions {
            o.push_str(&format!("  {} {}: {}\n", d.kind, d.name, d.problem));
        }
    }
    if r.discrepancies_found == 0 {
        o.push_str("every charge recomputed in SQL matches the ledger\n");
    } else {
        o.push_str(&format!(
            "{} discrepanc{} between SQL and the ledger:\n",
            r.discrepancies_found,
            if r.discrepancies_found == 1 { "y" } else { "ies" }
        ));
        let rows: Vec<Vec<String>> = r
            .discrepancies
            .iter()
            .take(AUDIT_SHOWN)
            .map(|d| {
                vec![
                    d.entry_id.map_or(String::new(), |e| e.to_string()),
                    d.kind.clone(),
                    d.period.map_or(String::new(), |p| Month::of_date(p).to_string()),
                    d.project.clone().unwrap_or_default(),
                    d.field.clone(),
                    d.expected.clone().unwrap_or_default(),
                    d.recorded.clone().unwrap_or_default(),
                ]
            })
            .collect();
        o.push_str(&table::render(
            &[
                "entry",
                "kind",
                "month",
                "project",
                "field",
                "expected (SQL)",
                "recorded",
            ],
            &rows,
        ));
        o.push_str(&beyond_shown(
            Counted {
                found: r.discrepancies_found,
                kept: r.discrepancies.len(),
                by: &r.discrepancies_by_field,
            },
            AUDIT_SHOWN,
            "`--format json` or `csv`",
            "discrepancies by kind and field",
        ));
    }
    let x = &r.rejections;
    if x.open + x.dismissed + x.unverified > 0 {
        let since = x
            .oldest_open
            .map(|t| format!(" (the oldest first seen {})", t.format("%Y-%m-%d")))
            .unwrap_or_default();
        o.push_str(&format!(
            "rejections: {} open, not charged{since}; {} dismissed; {} resolved before resolutions were proven (`hpc-ledger rejected --all`)\n",
            x.open, x.dismissed, x.unverified
        ));
    }
    let broken: Vec<_> = r.seals.iter().filter(|s| !s.holds()).collect();
    if let (Some(m), true) = (r.month, r.seals.is_empty()) {
        o.push_str(&format!("{m} is not closed: no seal yet\n"));
    } else if broken.is_empty() {
        o.push_str(&format!("{} closed month(s): every seal holds\n", r.seals.len()));
    } else {
        for s in broken {
            o.push_str(&format!(
                "{}: SEAL BROKEN (recorded {}, recomputed {})\n",
                Month::of_date(s.period),
                s.recorded_seal,
                s.recomputed_seal
            ));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::{render, render_deep};
    use crate::service::deep::{DeepReport, Difference};

    fn difference(record: i64, field: &str) -> Difference {
        Difference {
            record_id: Some(record),
            job: format!("c/{record}"),
            field: field.into(),
            stored: "2026-09-27T04:23:09+00:00".into(),
            reread: "2026-11-01T04:23:09+00:00".into(),
        }
    }

    #[test]
    fn a_deep_report_says_how_many_it_found_beyond_those_it_kept() {
        let mut d = DeepReport {
            records: 3_000,
            differences: (1..=60).map(|r| difference(r, "start")).collect(),
            differences_found: 6_000,
            ..DeepReport::default()
        };
        d.differences_by_field.insert("start".into(), 3_000);
        d.differences_by_field.insert("end".into(), 3_000);
        let text = render_deep(&d);
        assert!(
            text.starts_with(
                "deep: 3000 job records read again from their raw records: 6000 difference(s) between a raw record and the ledger:\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "… 5950 more (`--format json` lists the first 60)\ndifferences by field: end 3000, start 3000\n"
            ),
            "{text}"
        );
        // All kept: JSON has them all.
        d.differences_found = 60;
        d.differences_by_field.clear();
        d.differences_by_field.insert("start".into(), 60);
        assert!(
            render_deep(&d).ends_with("… 10 more (`--format json` lists all)\ndifferences by field: start 60\n"),
            "{}",
            render_deep(&d)
        );
    }

    #[test]
    fn an_audit_lists_its_first_discrepancies_and_counts_every_one() {
        use crate::db::audit::Discrepancy;
        use crate::service::close::AuditReport;
        let finding = |entry: i64| Discrepancy {
            entry_id: Some(entry),
            kind: "job".into(),
            period: chrono::NaiveDate::from_ymd_opt(2026, 10, 1),
            project: Some("P1".into()),
            field: "amount".into(),
            expected: Some("1.00".into()),
            recorded: Some("2.00".into()),
        };
        let mut r = AuditReport {
            discrepancies: (1..=70).map(finding).collect(),
            discrepancies_found: 250_000,
            discrepancies_by_field: [
                ("job amount".to_owned(), 200_000),
                ("storage amount".to_owned(), 50_000),
            ]
            .into(),
            seals: Vec::new(),
            rejections: Default::default(),
            definitions: Vec::new(),
            replica: false,
            month: None,
        };
        let text = render(&r);
        assert!(
            text.starts_with("250000 discrepancies between SQL and the ledger:\n"),
            "{text}"
        );
        assert_eq!(text.matches("  P1  ").count(), 50, "{text}");
        assert!(
            text.contains(
                "… 249950 more (`--format json` or `csv` lists the first 70)\n\
                 discrepancies by kind and field: job amount 200000, storage amount 50000\n"
            ),
            "{text}"
        );
        // All kept: the formats for programs list them all.
        r.discrepancies_found = 70;
        r.discrepancies_by_field = [("job amount".to_owned(), 70)].into();
        assert!(
            render(&r).contains("… 20 more (`--format json` or `csv` lists all)\n"),
            "{}",
            render(&r)
        );
    }
}
