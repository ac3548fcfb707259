//! The docs' own commands, run as written (issue 20, item 1).
//!
//! Every `hpc-ledger …` line of a ```sh block in README.md and docs/*.md is
//! run, in the order the page gives, by bash in a scratch directory holding
//! what the page names (`examples/`, and the files a page imports under the
//! names it uses), against a fresh database prepared as the page assumes;
//! every ```sql block of docs/auditing.md is run against a ledger closed
//! through October. A command must succeed. The few that cannot run here
//! are listed in [`NOT_RUN`] with the reason and the test that covers them
//! instead: a new command in the docs is run unless it is added there.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::TestDb;

/// Commands not run here: (what the command contains, its comment left out;
/// why, and where it is tested instead).
const NOT_RUN: &[(&str, &str)] = &[
    ("cargo ", "the two commands and the build: CI runs them (.ci/run)"),
    (
        "hpc-ledger bench",
        "minutes of work: tests/it/bench.rs runs a small bench",
    ),
    (" serve ", "runs until stopped: tests/it/serve.rs"),
    ("--follow", "runs until stopped: tests/it/follow.rs"),
    (
        "sacct ",
        "needs a Slurm controller: tests/slurm/e2e.sh runs it against a real one",
    ),
    (
        "/var/spool/pbs",
        "a PBS server's accounting directory: tests/it/follow.rs, tests/it/import.rs",
    ),
    ("/archive/pbs", "a PBS server's accounting archive: tests/it/import.rs"),
    (
        "export DATABASE_URL=",
        "names the center's own server: every test runs on its own",
    ),
    (
        "slurm sync",
        "needs sacctmgr: tests/it/budget.rs runs it against a stand-in, tests/slurm/e2e.sh against a real Slurm",
    ),
    (
        "export HPC_LEDGER_READ_DATABASE_URL=",
        "names the center's own replica: tests/it/replica.rs runs these commands against a real standby",
    ),
    (
        "db stop",
        "stops the embedded database, not a server given by URL: tests/it/embedded.rs",
    ),
];

/// How a page's database is prepared before its commands run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Start {
    /// Migrated, nothing applied: the page starts with `config apply`.
    Empty,
    /// examples/center.toml applied.
    Configured,
    /// …and the README's sample jobs imported.
    Sample,
    /// …and storage billed and every month closed through October.
    Closed,
}

const PAGES: &[(&str, Start)] = &[
    ("README.md", Start::Empty),
    ("docs/configuration.md", Start::Empty),
    ("docs/security.md", Start::Empty),
    ("docs/recording.md", Start::Sample),
    ("docs/slurm.md", Start::Configured),
    ("docs/pbs.md", Start::Configured),
    ("docs/month-end.md", Start::Sample),
    ("docs/rules.md", Start::Sample),
    ("docs/performance.md", Start::Sample),
    ("docs/auditing.md", Start::Closed),
    ("docs/budgets.md", Start::Sample),
    ("docs/web.md", Start::Sample),
    ("docs/scaling.md", Start::Closed),
    ("docs/retention.md", Start::Closed),
];

/// The commands of a page's ```sh blocks that call hpc-ledger, continuation
/// lines joined.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            in_sh = !in_sh && (t == "```sh" || t == "```bash" || t == "```shell");
            pending.clear();
            continue;
        }
        if !in_sh {
            continue;
        }
        // A comment line (an apostrophe in it is not a quote).
        if pending.is_empty() && t.starts_with('#') {
            continue;
        }
        let joined = format!("{pending}{line}");
        // A single-quoted string running on to the next line.
        let code = joined.split(" #").next().unwrap_or(&joined);
        if code.matches('\'').count() % 2 == 1 {
            pending = format!("{joined}\n");
            continue;
        }
        // A line continued with a backslash (before any comment).
        if let Some(head) = joined.trim_end().strip_suffix('\\') {
            pending = format!("{head} ");
            continue;
        }
        pending.clear();
        if joined.contains("hpc-ledger") && !joined.trim_start().starts_with('#') {
            out.push(joined.trim().to_owned());
        }
    }
    out
}

/// The SQL statements of a page's ```sql blocks.
fn sql_statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sql = false;
    let mut block = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            if in_sql {
                for s in block.split(';') {
                    let s = s
                        .lines()
                        .filter(|l| !l.trim_start().starts_with("--"))
                        .collect::<Vec<_>>()
                        .join("\n");
                    if !s.trim().is_empty() {
                        out.push(s.trim().to_owned());
                    }
                }
                block.clear();
            }
            in_sql = !in_sql && t == "```sql";
            continue;
        }
        if in_sql {
            // A comment to the end of the line (none of the pages' strings hold "--").
            let code = line.split(" --").next().unwrap_or(line);
            block.push_str(code);
            block.push('\n');
        }
    }
    out
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory holding what the pages name: `examples/` (a link),
/// and the files they import under the names they use.
fn sandbox(page: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "docs-{}-{}",
        std::process::id(),
        page.replace(['/', '.'], "_")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(repo().join("examples"), dir.join("examples")).unwrap();
    let jobs = repo().join("examples/jobs");
    let fixtures = repo().join("tests/fixtures/accounting");
    for (name, from) in [
        ("center.toml", repo().join("examples/center.toml")),
        ("jobs.jsonl", jobs.join("jobs.jsonl")),
        ("sacct-2026-10.txt", jobs.join("owens-sacct.txt")),
        ("sacct-2026.txt", jobs.join("owens-sacct.txt")),
    ] {
        std::fs::copy(&from, dir.join(name)).unwrap();
    }
    // A file imported by mistake (docs/recording.md).
    std::fs::write(dir.join("notes.txt"), "meeting notes, 5 October\nbring the slides\n").unwrap();
    // Slurm jobcomp documents as an Elasticsearch export holds them (the
    // fixture's `#` source header stripped, as every reader of fixtures does).
    let es = std::fs::read_to_string(fixtures.join("slurm_2205_lab_jobcomp.jsonl")).unwrap();
    let body: String = es
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("es-export.jsonl"), body).unwrap();
    dir
}

fn run(dir: &Path, db: &TestDb, command: &str) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_hpc-ledger")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .arg("-c")
        .arg(format!("set -eo pipefail\n{command}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("DATABASE_URL", &db.url)
        .env_remove("HPC_LEDGER_HOME")
        .env("HPC_LEDGER_LOG", "warn")
        .env("HPC_LEDGER_AUTHOR", "docs")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running bash")
}

#[track_caller]
fn must(dir: &Path, db: &TestDb, page: &str, command: &str) -> String {
    let o = run(dir, db, command);
    assert!(
        o.status.success(),
        "{page}: `{command}` failed (exit {:?}):\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn prepare(dir: &Path, db: &TestDb, page: &str, start: Start) {
    if start == Start::Empty {
        return;
    }
    must(dir, db, page, "hpc-ledger config apply examples/center.toml");
    if start == Start::Configured {
        return;
    }
    for c in [
        "hpc-ledger import --format slurm examples/jobs/owens-sacct.txt",
        "hpc-ledger import --format pbs --cluster pitzer examples/jobs/pitzer-accounting-202610.log",
        "hpc-ledger import --format jsonl examples/jobs/jobs.jsonl",
    ] {
        // The PBS sample holds one record of an unknown project: exit 4, kept.
        let o = run(dir, db, c);
        assert!(
            matches!(o.status.code(), Some(0 | 4)),
            "{page}: {c}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    if start == Start::Sample {
        return;
    }
    must(dir, db, page, "hpc-ledger bill storage --through 2026-10");
    must(dir, db, page, "hpc-ledger close --through 2026-10");
}

#[tokio::test]
async fn every_command_in_the_docs_runs_as_written() {
    // Every page is run: a new page under docs/ must be given its start here.
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|p| p.ends_with(".md"))
        .collect();
    pages.push("README.md".into());
    for p in &pages {
        assert!(PAGES.iter().any(|(page, _)| page == p), "{p} is not in PAGES");
    }
    let mut ran = 0;
    let mut checked = 0;
    let mut not_run = Vec::new();
    for &(page, start) in PAGES {
        let text = std::fs::read_to_string(repo().join(page)).unwrap();
        let db = TestDb::new().await;
        let dir = sandbox(page);
        prepare(&dir, &db, page, start).await;
        let found = commands(&text);
        // A page that shows hpc-ledger in a shell block yields its commands.
        let shown = text
            .split("```sh")
            .skip(1)
            .any(|b| b.split("```").next().unwrap_or("").contains("hpc-ledger"));
        assert!(!shown || !found.is_empty(), "{page}: no command extracted");
        for command in found {
            let code = command.split(" #").next().unwrap_or(&command);
            if let Some((_, why)) = NOT_RUN.iter().find(|(what, _)| code.contains(what)) {
                not_run.push(format!("{page}: {command}  [{why}]"));
                continue;
            }
            let o = run(&dir, &db, &command);
            // `import` exits 4 when it kept rejections (the sample's unknown
            // project): an answer, not a failure. `audit` and `verify` must
            // exit 0: clean.
            let code = o.status.code();
            let fine = code == Some(0) || (command.contains("hpc-ledger import") && code == Some(4));
            assert!(
                fine,
                "{page}: `{command}` failed (exit {code:?}):\n{}\n{}",
                String::from_utf8_lossy(&o.stderr),
                String::from_utf8_lossy(&o.stdout)
            );
            ran += 1;
        }
        for statement in sql_statements(&text) {
            let upper = statement.to_uppercase();
            if upper.starts_with("CREATE ROLE") || upper.starts_with("GRANT") {
                not_run.push(format!(
                    "{page}: {statement}  [roles are the cluster's: tests/it/security.rs]"
                ));
                continue;
            }
            let rows = sqlx::raw_sql(&statement)
                .fetch_all(&db.pool)
                .await
                .unwrap_or_else(|e| panic!("{page}: {statement}\nfailed: {e}"));
            // What a page says must hold does: every `…holds` and `agrees`
            // column is true.
            for row in &rows {
                use sqlx::{Column, Row};
                for (i, c) in row.columns().iter().enumerate() {
                    if c.name().ends_with("holds") || c.name() == "agrees" {
                        let v: Option<bool> = row.get(i);
                        assert_eq!(v, Some(true), "{page}: {statement}: {} is not true", c.name());
                        checked += 1;
                    }
                }
            }
            ran += 1;
        }
        if page == "README.md" {
            // The adjustment lands in the month that last ended, the month
            // being closed (its `--help` says so); `audit` above exited 0:
            // clean.
            let (adjusted, last_ended): (String, String) = sqlx::query_as(
                "SELECT to_char(e.period, 'YYYY-MM'),
                        to_char(date_trunc('month', now() AT TIME ZONE c.time_zone) - interval '1 month', 'YYYY-MM')
                   FROM ledger_entry e, center c WHERE e.kind = 'adjustment'",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            assert_eq!(adjusted, last_ended);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!(
        "{ran} commands and statements ran; not run:\n  {}",
        not_run.join("\n  ")
    );
    assert!(ran >= 60, "only {ran} commands found: is the extraction broken?");
    // auditing.md: 10 closed months × 3 seal checks, 1 recomputed seal, and
    // every closed month's statements agreeing.
    assert!(checked >= 31, "only {checked} checks held");
}

#[test]
fn the_extraction_joins_continued_lines_and_skips_comments() {
    let text = "```sh\n# a comment's apostrophe\nhpc-ledger quote --cluster a \\\n    --walltime 1:00:00   # why\nls\necho '{\n}' | hpc-ledger job record --json\n```\nhpc-ledger outside\n```sql\nSELECT 1; -- one\nSELECT 2\n```\n";
    assert_eq!(
        commands(text),
        [
            "hpc-ledger quote --cluster a      --walltime 1:00:00   # why",
            "echo '{\n}' | hpc-ledger job record --json"
        ]
    );
    assert_eq!(sql_statements(text), ["SELECT 1", "SELECT 2"]);
}
