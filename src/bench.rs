//! `hpc-ledger bench`: the product's speed, measured against what the same
//! PostgreSQL does on the same machine in the same run.
//!
//! One run, in a scratch database of its own (never the ledger database):
//! a synthetic center (one Slurm cluster, regular/hugemem/GPU nodes,
//! thousands of projects with storage quotas) and a month of synthetic jobs
//! with a general-purpose cluster's request mix ([`crate::synthetic`]). Each
//! figure is measured next to its baseline:
//!
//! | figure | baseline |
//! |---|---|
//! | import of N jobs (a child process, as a user runs it) | `COPY` of the same lines into a bare table with one unique index |
//! | re-import of the same file | the first import |
//! | `serve`: jobcomp posts from 16 concurrent senders | the import's jobs/s |
//! | `job record` as its own process | `psql -c` inserting one row |
//! | storage billing of every project | `INSERT … SELECT` of the same rows into bare tables |
//! | one project's statement, before and after the ledger grows | – |
//! | `audit` of the grown ledger | a sequential scan of the ledger |
//! | `audit --deep`: every raw record read again | the import's jobs/s |
//! | peak RSS of the import | – |
//! | peak RSS of `serve` under 20 concurrent hostile 16 MB posts | its RSS when idle |
//! | month end (bill, close, audit) of a freshly configured center, in a second database | the billing run |
//!
//! Beside the figures, the run measures what PostgreSQL alone needs for the
//! same work (the "bounds"): the import's and the storage run's rows written
//! by `INSERT … SELECT` into copies of their tables with the same indexes
//! and checks, and the audit's inputs read and joined without arithmetic.
//! No implementation on this schema and machine can beat those; where a
//! target sits below its bound, the bound says so.
//!
//! The ledger grows by copies of the month's job charges into earlier
//! months ([`grow_ledger`]): the same inputs shifted by whole days, so
//! every copy is still a correct charge and the audit must come out clean.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::{self, MIGRATOR};
use crate::domain::period::Month;
use crate::service::{self, statement::Which};

/// How big a run is.
#[derive(Debug, Clone, Serialize)]
pub struct Sizes {
    /// Jobs imported.
    pub jobs: u64,
    /// Projects in the center, each with a storage quota.
    pub projects: u64,
    /// Projects the jobs are charged to (the first ones).
    pub job_projects: u64,
    /// The ledger is grown to this many times its job charges.
    pub grow: u32,
    /// Processes started for `job record` (and as many `psql`).
    pub calls: u32,
    /// Projects of the freshly set-up center whose month end is timed.
    pub fresh_projects: u64,
}

impl Sizes {
    pub const DEFAULT: Sizes = Sizes {
        jobs: 100_000,
        projects: 10_000,
        job_projects: 2_000,
        grow: 10,
        calls: 20,
        fresh_projects: 20_000,
    };
    pub const FULL: Sizes = Sizes {
        jobs: 1_000_000,
        projects: 100_000,
        job_projects: 2_000,
        grow: 10,
        calls: 20,
        fresh_projects: 100_000,
    };
}

/// One line of the result table.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub figure: String,
    pub measured: String,
    pub baseline: String,
    /// Measured against baseline, in the direction the target states.
    pub ratio: Option<f64>,
    pub target: String,
    pub pass: bool,
}

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub sizes: Sizes,
    pub month: String,
    pub database: String,
    pub figures: Vec<Figure>,
    /// Other timings worth knowing (set-up steps).
    pub notes: Vec<String>,
    /// What PostgreSQL itself needs for the work behind a figure, measured
    /// in the same run: the floor under that figure on this machine.
    pub bounds: Vec<String>,
    /// PostgreSQL's version and the settings that matter for these figures.
    pub settings: Vec<(String, String)>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.figures.iter().all(|f| f.pass)
    }
}

/// Where and how to run.
pub struct Setup {
    /// The scratch database's URL (created afresh by the caller).
    pub url: String,
    /// A second scratch database (created afresh by the caller), for the
    /// month end of a fresh center.
    pub fresh_url: String,
    /// This program, run for the child-process figures.
    pub exe: PathBuf,
    /// `psql`.
    pub psql: PathBuf,
    /// A directory for the generated input (removed by the caller).
    pub dir: PathBuf,
    /// Tell the user what is happening.
    pub progress: Box<dyn Fn(&str) + Send + Sync>,
}

/// Run every measurement on a freshly created, empty database.
pub async fn run(setup: &Setup, sizes: &Sizes) -> anyhow::Result<Report> {
    let say = |s: &str| (setup.progress)(s);
    let pool = db::connect(&setup.url).await?;
    MIGRATOR.run(&pool).await?;
    let month = Month::of_instant(Utc::now(), chrono_tz::America::New_York).prev();
    let mut figures = Vec::new();
    let mut notes = Vec::new();
    let mut bounds = Vec::new();
    let settings = settings(&pool).await?;

    say("the center");
    let mut center = Vec::new();
    crate::synthetic::write_bench_center(&mut center, sizes.projects, month)?;
    let config = crate::config::parse(std::str::from_utf8(&center)?)?;
    let t = Instant::now();
    service::config::apply(&pool, &config, "bench").await?;
    notes.push(format!(
        "config apply of {} projects: {}",
        sizes.projects,
        secs(t.elapsed())
    ));

    say("the jobs");
    let jobs = setup.dir.join("jobs.txt");
    let file = std::fs::File::create(&jobs).with_context(|| format!("creating {}", jobs.display()))?;
    crate::synthetic::write_bench_sacct(
        std::io::BufWriter::new(file),
        sizes.jobs,
        sizes.job_projects.min(sizes.projects),
        month,
    )?;

    // 1. Import against COPY.
    say("COPY baseline");
    let copy = copy_baseline(&pool, &jobs).await?;
    say("import");
    checkpoint(&pool).await?;
    let first = import(setup, &jobs)?;
    if first.recorded != sizes.jobs {
        bail!(
            "the import recorded {} of {} jobs: {}",
            first.recorded,
            sizes.jobs,
            first.summary
        );
    }
    let jobs_f = count(sizes.jobs);
    let import_rate = per_second(sizes.jobs, first.wall);
    let copy_rate = per_second(sizes.jobs, copy);
    figures.push(Figure {
        figure: format!("import of {} jobs (priced, posted, idempotent)", grouped(sizes.jobs)),
        measured: format!("{} = {} jobs/s", secs(first.wall), grouped(import_rate)),
        baseline: format!("COPY: {} = {} rows/s", secs(copy), grouped(copy_rate)),
        ratio: Some(jobs_f / first.wall.as_secs_f64() / (jobs_f / copy.as_secs_f64())),
        target: "≥ 0.5 × COPY's rows/s".into(),
        pass: import_rate * 2 >= copy_rate,
    });
    say("re-import");
    let again = import(setup, &jobs)?;
    if again.replayed != sizes.jobs {
        bail!(
            "the re-import replayed {} of {} jobs: {}",
            again.replayed,
            sizes.jobs,
            again.summary
        );
    }
    let speedup = first.wall.as_secs_f64() / again.wall.as_secs_f64();
    figures.push(Figure {
        figure: "re-import of the same file (all replays)".into(),
        measured: format!(
            "{} = {} jobs/s",
            secs(again.wall),
            grouped(per_second(sizes.jobs, again.wall))
        ),
        baseline: format!("first import: {}", secs(first.wall)),
        ratio: Some(speedup),
        target: "≥ 2 × faster".into(),
        pass: speedup >= 2.0,
    });
    // After the re-import (which writes nothing), so its work does not
    // disturb the re-import's reading of the fresh rows.
    say("the import's rows, stored by PostgreSQL alone");
    let floor = insert_select(
        &pool,
        &[
            ("job", "SELECT * FROM job".into()),
            ("job_record", "SELECT * FROM job_record".into()),
            ("ledger_entry", "SELECT * FROM ledger_entry".into()),
        ],
        Copies::Indexed,
    )
    .await?;
    bounds.push(format!(
        "import: its {} rows (runs, records, charges), written again by INSERT … SELECT into empty copies of \
         their tables with the same indexes and checks: {} = {} jobs/s; the import takes {:.1} × that",
        grouped(ledger_rows(&pool).await?),
        secs(floor),
        grouped(per_second(sizes.jobs, floor)),
        first.wall.as_secs_f64() / floor.as_secs_f64()
    ));
    say("serve");
    let posts = (sizes.jobs / 20).max(1);
    let (took, transactions) = serve_posts(&pool, posts, sizes.job_projects.min(sizes.projects), month).await?;
    let serve_rate = per_second(posts, took);
    figures.push(Figure {
        figure: format!(
            "`serve`: {} jobcomp posts from {SENDERS} concurrent senders",
            grouped(posts)
        ),
        measured: format!(
            "{} = {} jobs/s in {} transactions",
            secs(took),
            grouped(serve_rate),
            grouped(transactions)
        ),
        baseline: format!("import: {} jobs/s", grouped(import_rate)),
        ratio: Some(serve_rate as f64 / import_rate.max(1) as f64),
        target: "– (reported)".into(),
        pass: true,
    });
    say("serve under hostile posts");
    let hostile = serve_under_attack(setup).await?;
    figures.push(Figure {
        figure: format!(
            "peak RSS of `serve` under {HOSTILE} concurrent 16 MB posts (`[0,0,…]` to /jobs; jobcomp: big scripts, junk, Latin-1)"
        ),
        measured: format!("{} MB (replies: {})", hostile.max_rss_kb / 1024, hostile.statuses),
        baseline: format!("idle: {} MB", hostile.idle_rss_kb / 1024),
        ratio: None,
        target: "≤ 200 MB".into(),
        pass: hostile.max_rss_kb <= 200 * 1024,
    });
    let rss = first.max_rss_kb.max(again.max_rss_kb);
    figures.push(Figure {
        figure: format!("peak RSS of the import of {} jobs", grouped(sizes.jobs)),
        measured: format!(
            "{} MB (re-import {} MB)",
            first.max_rss_kb / 1024,
            again.max_rss_kb / 1024
        ),
        baseline: "–".into(),
        ratio: None,
        target: "≤ 200 MB".into(),
        pass: rss <= 200 * 1024,
    });

    // 2. One job, one process, against psql inserting one row.
    say("job record against psql");
    let (ours, theirs) = one_job(setup, &pool, month, sizes.calls).await?;
    let ratio = ours.as_secs_f64() / theirs.as_secs_f64();
    figures.push(Figure {
        figure: "`job record` of one job, as its own process".into(),
        measured: format!("{} (median of {})", millis(ours), sizes.calls),
        baseline: format!("psql -c INSERT: {}", millis(theirs)),
        ratio: Some(ratio),
        target: "≤ 1.5 × psql".into(),
        pass: ratio <= 1.5,
    });

    // 3. Storage billing against INSERT … SELECT of the same rows.
    say("storage billing");
    checkpoint(&pool).await?;
    let t = Instant::now();
    let bill = service::storage::bill(&pool, month, "bench", false, Utc::now()).await?;
    let billing = t.elapsed();
    // The run's rows (its entries and their segments), written again.
    let run = format!(
        "(SELECT id FROM billing_run WHERE kind = 'storage' AND period = DATE '{}')",
        month.first_day()
    );
    let rows = [
        (
            "ledger_entry",
            format!("SELECT * FROM ledger_entry WHERE billing_run_id = {run}"),
        ),
        (
            "storage_charge_segment",
            format!(
                "SELECT s.* FROM storage_charge_segment s JOIN ledger_entry e ON e.id = s.ledger_entry_id
                  WHERE e.billing_run_id = {run}"
            ),
        ),
    ];
    // The run ends by analyzing the tables it made stale (issue 13, item 11);
    // the same analyze again, timed, says how much of the run that is.
    let t = Instant::now();
    sqlx::raw_sql("ANALYZE ledger_entry, storage_charge_segment")
        .execute(&pool)
        .await?;
    notes.push(format!(
        "storage billing: analyzing the ledger and the segments afterwards (part of the run): about {}",
        secs(t.elapsed())
    ));
    let bare = insert_select(&pool, &rows, Copies::Bare).await?;
    let indexed = insert_select(&pool, &rows, Copies::Indexed).await?;
    bounds.push(format!(
        "storage billing: the same rows by INSERT … SELECT into copies with the ledger's indexes and checks: {}; \
         the run takes {:.1} × that",
        secs(indexed),
        billing.as_secs_f64() / indexed.as_secs_f64()
    ));
    let ratio = billing.as_secs_f64() / bare.as_secs_f64();
    figures.push(Figure {
        figure: format!(
            "storage billing of {} projects ({} entries)",
            grouped(sizes.projects),
            grouped(bill.entry_count as u64)
        ),
        measured: secs(billing),
        baseline: format!("INSERT … SELECT: {}", secs(bare)),
        ratio: Some(ratio),
        target: "≤ 2 ×".into(),
        pass: ratio <= 2.0,
    });

    // 3b. The deep audit: every raw record read again (before the ledger
    // grows: its copies are shifted in time, their raw records are not).
    say("audit --deep");
    let t = Instant::now();
    let deep = service::deep::deep_audit(&pool).await?;
    let deep_time = t.elapsed();
    if !deep.clean() {
        bail!(
            "the deep audit of the bench ledger found {} differences (first: {:?})",
            deep.differences.len(),
            deep.differences.first()
        );
    }
    figures.push(Figure {
        figure: format!(
            "audit --deep: {} job records read again from their raw records",
            grouped(deep.records)
        ),
        measured: format!(
            "{} = {} records/s",
            secs(deep_time),
            grouped(per_second(deep.records, deep_time))
        ),
        baseline: format!("the import: {} jobs/s", grouped(import_rate)),
        ratio: Some(per_second(deep.records, deep_time) as f64 / import_rate.max(1) as f64),
        target: "– (reported)".into(),
        pass: true,
    });
    // 4. A statement, before and after the ledger grows.
    say("statements");
    let code = busiest_project(&pool, month).await?;
    let small = ledger_size(&pool).await?;
    let before = statement_time(&pool, month, &code, sizes.calls).await?;
    say("growing the ledger");
    let t = Instant::now();
    grow_ledger(&pool, sizes.grow).await?;
    let large = ledger_size(&pool).await?;
    notes.push(format!(
        "growing the ledger from {} to {} entries: {}",
        grouped(small),
        grouped(large),
        secs(t.elapsed())
    ));
    let after = statement_time(&pool, month, &code, sizes.calls).await?;
    figures.push(Figure {
        figure: format!("one project's statement at {} entries", grouped(small)),
        measured: millis(before),
        baseline: "–".into(),
        ratio: None,
        target: "≤ 10 ms".into(),
        pass: before <= Duration::from_millis(10),
    });
    let growth = after.as_secs_f64() / before.as_secs_f64();
    figures.push(Figure {
        figure: format!("one project's statement at {} entries", grouped(large)),
        measured: millis(after),
        baseline: format!("at {}: {}", grouped(small), millis(before)),
        ratio: Some(growth),
        target: "≤ 10 ms; ≤ 1.5 × the smaller ledger's".into(),
        pass: after <= Duration::from_millis(10) && growth <= 1.5,
    });

    // 5. The audit against a sequential scan.
    say("audit");
    let scan = seq_scan(&pool).await?;
    let inputs = join_of_inputs(&pool).await?;
    let t = Instant::now();
    let audit = service::close::audit(&pool).await?;
    let audit_time = t.elapsed();
    bounds.push(format!(
        "audit: reading every job charge joined with its record and run (the inputs it recomputes from, \
         no arithmetic): {} = {:.1} × the sequential scan; the audit takes {:.1} × that",
        secs(inputs),
        inputs.as_secs_f64() / scan.as_secs_f64(),
        audit_time.as_secs_f64() / inputs.as_secs_f64()
    ));
    if !audit.clean() {
        bail!(
            "the audit of the bench ledger found {} discrepancies (first: {:?})",
            audit.discrepancies.len(),
            audit.discrepancies.first()
        );
    }
    let ratio = audit_time.as_secs_f64() / scan.as_secs_f64();
    figures.push(Figure {
        figure: format!("audit of {} entries (clean)", grouped(large)),
        measured: secs(audit_time),
        baseline: format!("sequential scan: {}", secs(scan)),
        ratio: Some(ratio),
        target: "≤ 3 ×".into(),
        pass: ratio <= 3.0,
    });
    pool.close().await;

    // 6. Month end of a center that has just been set up.
    say("month end of a fresh center");
    let end = fresh_month_end(&setup.fresh_url, sizes.fresh_projects, month).await?;
    let slowest = end.close.max(end.audit);
    let ratio = slowest.as_secs_f64() / end.bill.as_secs_f64();
    figures.push(Figure {
        figure: format!(
            "month end of a fresh center of {} projects: bill storage, close, audit",
            grouped(sizes.fresh_projects)
        ),
        measured: format!(
            "bill {}, close {}, audit {}",
            secs(end.bill),
            secs(end.close),
            secs(end.audit)
        ),
        baseline: format!("the billing run: {}", secs(end.bill)),
        ratio: Some(ratio),
        target: "close and audit each ≤ 2 × the billing run".into(),
        pass: ratio <= 2.0,
    });
    Ok(Report {
        sizes: sizes.clone(),
        month: month.to_string(),
        database: db::redact(&setup.url),
        figures,
        notes,
        bounds,
        settings,
    })
}

/// The three steps of a month end, timed.
struct MonthEnd {
    bill: Duration,
    close: Duration,
    audit: Duration,
}

/// A center's first month end, right after its configuration was applied:
/// the storage run writes a charge per project into an empty ledger, and the
/// close and the audit that follow must not be planned as if it were still
/// empty (issue 13, item 11: the audit took minutes at 20,000 projects when
/// they were). In a database of its own, so that nothing else the bench did
/// has brought the statistics up to date.
async fn fresh_month_end(url: &str, projects: u64, month: Month) -> anyhow::Result<MonthEnd> {
    let pool = db::connect(url).await?;
    MIGRATOR.run(&pool).await?;
    let mut center = Vec::new();
    crate::synthetic::write_bench_center(&mut center, projects, month)?;
    let config = crate::config::parse(std::str::from_utf8(&center)?)?;
    service::config::apply(&pool, &config, "bench").await?;
    checkpoint(&pool).await?;
    let t = Instant::now();
    let billed = service::storage::bill(&pool, month, "bench", false, Utc::now()).await?;
    let bill = t.elapsed();
    let t = Instant::now();
    let closed = service::close::close(&pool, month, "bench", Utc::now()).await?;
    let close = t.elapsed();
    let t = Instant::now();
    let audit = service::close::audit(&pool).await?;
    let audit_time = t.elapsed();
    pool.close().await;
    if !audit.clean() {
        bail!(
            "the audit of the fresh center found {} discrepancies (first: {:?})",
            audit.discrepancies.len(),
            audit.discrepancies.first()
        );
    }
    if closed.statements.len() != billed.project_count {
        bail!(
            "the close numbered {} statements for {} projects billed",
            closed.statements.len(),
            billed.project_count
        );
    }
    Ok(MonthEnd {
        bill,
        close,
        audit: audit_time,
    })
}

/// Concurrent senders of the `serve` figure (as the issue asks).
const SENDERS: u64 = 16;

/// Post `n` new jobcomp documents to an in-process `serve` from
/// [`SENDERS`] tasks, each waiting for its reply before its next post (as
/// slurmctld does), one connection per post. The time, and how many
/// transactions the server used.
async fn serve_posts(pool: &PgPool, n: u64, projects: u64, month: Month) -> anyhow::Result<(Duration, u64)> {
    use crate::serve::{Credentials, Metrics, Options, client};
    let docs: std::sync::Arc<Vec<String>> = std::sync::Arc::new(
        (0..n)
            .map(|i| crate::synthetic::bench_jobcomp(i, projects, month))
            .collect(),
    );
    let listener = crate::serve::bind("127.0.0.1:0".parse()?)?;
    let addr = listener.local_addr()?;
    let metrics = std::sync::Arc::new(Metrics::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = Options {
        credentials: Credentials::none(),
        max_batch: 500,
        supersede: false,
        author: "bench".into(),
        limits: crate::serve::conn::Limits::default(),
        restart: None,
    };
    let server = tokio::spawn(crate::serve::serve(
        pool.clone(),
        listener,
        options,
        metrics.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    let t = Instant::now();
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let docs = docs.clone();
        senders.push(tokio::spawn(async move {
            let mut i = s;
            while i < n {
                let doc = &docs[usize::try_from(i).unwrap_or(usize::MAX)];
                let r = client::post(addr, "/slurm/_doc", None, doc.as_bytes()).await?;
                if r.status != 201 {
                    bail!("serve answered {} to a new job: {}", r.status, r.body.trim());
                }
                i += SENDERS;
            }
            anyhow::Ok(())
        }));
    }
    for s in senders {
        s.await??;
    }
    let took = t.elapsed();
    let _ = stop.send(());
    server.await??;
    Ok((took, metrics.batches().0))
}

/// The table, the notes and the settings, as text.
pub fn render(r: &Report) -> String {
    let mut rows = vec![[
        "figure".to_owned(),
        "measured".to_owned(),
        "baseline".to_owned(),
        "ratio".to_owned(),
        "target".to_owned(),
        "result".to_owned(),
    ]];
    for f in &r.figures {
        rows.push([
            f.figure.clone(),
            f.measured.clone(),
            f.baseline.clone(),
            f.ratio.map_or("–".into(), |x| format!("{x:.2}")),
            f.target.clone(),
            if f.pass { "pass" } else { "FAIL" }.into(),
        ]);
    }
    let mut out = String::new();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..6).map(width).collect();
    for (n, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            let _ = writeln!(out, "|-{}-|", rule.join("-|-"));
        }
    }
    let _ = writeln!(out, "\nset-up:");
    for n in &r.notes {
        let _ = writeln!(out, "  {n}");
    }
    if !r.bounds.is_empty() {
        let _ = writeln!(out, "\nbounds (PostgreSQL alone, same run):");
        for b in &r.bounds {
            let _ = writeln!(out, "  {b}");
        }
    }
    let _ = writeln!(out, "\nPostgreSQL:");
    for (k, v) in &r.settings {
        let _ = writeln!(out, "  {k} = {v}");
    }
    out
}

/// `name = setting` for what matters here.
async fn settings(pool: &PgPool) -> anyhow::Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = vec![(
        "server_version".into(),
        sqlx::query_scalar("SELECT version()").fetch_one(pool).await?,
    )];
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, current_setting(name) FROM pg_settings
          WHERE name IN ('shared_buffers', 'work_mem', 'maintenance_work_mem', 'effective_cache_size',
                         'fsync', 'synchronous_commit', 'full_page_writes', 'wal_level', 'max_wal_size',
                         'checkpoint_timeout', 'max_parallel_workers_per_gather', 'jit')
          ORDER BY name",
    )
    .fetch_all(pool)
    .await?;
    out.extend(rows);
    Ok(out)
}

async fn checkpoint(pool: &PgPool) -> anyhow::Result<()> {
    // Needs superuser or pg_checkpoint; a bench without it just runs on.
    let _ = sqlx::raw_sql("CHECKPOINT").execute(pool).await;
    Ok(())
}

/// COPY the data lines of `path` into a table of text columns with a unique
/// index on the job's identity.
async fn copy_baseline(pool: &PgPool, path: &Path) -> anyhow::Result<Duration> {
    let columns: Vec<String> = crate::synthetic::SACCT_HEADER
        .split('|')
        .map(|c| format!("{} text", db::quote_ident(&c.to_lowercase())))
        .collect();
    sqlx::raw_sql(&format!(
        "DROP TABLE IF EXISTS bench_copy; CREATE TABLE bench_copy ({}, UNIQUE (cluster, jobidraw, start))",
        columns.join(", ")
    ))
    .execute(pool)
    .await?;
    checkpoint(pool).await?;
    let mut conn = pool.acquire().await?;
    // Streamed from the file as the import reads it (the header line skipped).
    let mut file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut header = String::new();
    std::io::BufRead::read_line(&mut file, &mut header)?;
    let t = Instant::now();
    let mut copy = conn
        .copy_in_raw("COPY bench_copy FROM STDIN (FORMAT text, DELIMITER '|')")
        .await?;
    let mut chunk = vec![0; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut chunk)?;
        if n == 0 {
            break;
        }
        copy.send(&chunk[..n]).await?;
    }
    copy.finish().await?;
    let took = t.elapsed();
    sqlx::raw_sql("DROP TABLE bench_copy").execute(&mut *conn).await?;
    Ok(took)
}

/// Hostile posts sent at once by [`serve_under_attack`].
const HOSTILE: usize = 20;

struct Attack {
    idle_rss_kb: u64,
    max_rss_kb: u64,
    /// Replies by status, e.g. `400×10, 413×10`.
    statuses: String,
}

/// `hpc-ledger serve` as its own process, sent [`HOSTILE`] posts of 16 MB at
/// once — a quarter each: `POST /jobs` of `[0,0,0,…]` (issue 13's memory
/// bomb), jobcomp bodies with a 16 MB script and a malformed job, 16 MB of
/// bytes that are not UTF-8, and a job with a Latin-1 name and a 16 MB
/// Latin-1 script — and its peak RSS (VmHWM) read while it answers them.
async fn serve_under_attack(setup: &Setup) -> anyhow::Result<Attack> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new(&setup.exe)
        .args(["serve", "--listen", &addr.to_string()])
        .env("DATABASE_URL", &setup.url)
        .env_remove("HPC_LEDGER_DATABASE_URL_FILE")
        .env_remove(crate::serve::BASIC_ENV)
        .env_remove(crate::serve::TOKEN_ENV)
        .env("HPC_LEDGER_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting serve")?;
    let pid = child.id();
    let status_file = format!("/proc/{pid}/status");
    let hwm = || {
        std::fs::read_to_string(&status_file)
            .ok()
            .as_deref()
            .and_then(vm_hwm_kb)
            .unwrap_or(0)
    };
    let t = Instant::now();
    while crate::serve::client::get(addr, "/healthz").await.map(|r| r.status).ok() != Some(200) {
        if t.elapsed() > Duration::from_secs(30) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(libc::pid_t::try_from(pid)?, libc::SIGKILL) };
            let _ = wait_exit(pid);
            bail!("serve did not answer /healthz within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle_rss_kb = hwm();
    let bomb = std::sync::Arc::new(format!("[{}0]", "0,".repeat(8 << 20)).into_bytes());
    // Just under the 16 MiB limit: read whole, then refused.
    let big = (16 << 20) - 512;
    let script = std::sync::Arc::new(
        format!(
            r#"{{"jobid":77,"@start":"2026-01-01T00:00:00","total_cpus":1,"nodes":"c1","state":"COMPLETED","script":"{}"}}"#,
            "#".repeat(big)
        )
        .into_bytes(),
    );
    let junk: std::sync::Arc<Vec<u8>> = std::sync::Arc::new((0..big).map(|i| (i % 251) as u8 | 0x80).collect());
    let mut latin1 = br#"{"jobid":78,"@start":"2026-01-01T00:00:00","@end":"2026-01-01T01:00:00","total_cpus":1,"nodes":"c1","state":"COMPLETED","job_name":"caf"#.to_vec();
    latin1.extend([0xe9, b'"']);
    latin1.extend(br#","script":""#);
    latin1.extend(std::iter::repeat_n(0xe9, big));
    latin1.extend(br#""}"#);
    let latin1 = std::sync::Arc::new(latin1);
    let mut posts = Vec::new();
    for i in 0..HOSTILE {
        let (path, body) = match i % 4 {
            0 => ("/jobs", bomb.clone()),
            1 => ("/slurm/_doc", script.clone()),
            2 => ("/slurm/_doc", junk.clone()),
            _ => ("/slurm/_doc", latin1.clone()),
        };
        posts.push(tokio::spawn(async move {
            // A refused body is cut off while being sent: that is a reply too.
            match crate::serve::client::post(addr, path, None, &body).await {
                Ok(r) => r.status.to_string(),
                Err(_) => "cut".to_owned(),
            }
        }));
    }
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    for p in posts {
        *seen.entry(p.await?).or_default() += 1;
    }
    let max_rss_kb = hwm();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(libc::pid_t::try_from(pid)?, libc::SIGTERM) };
    if !wait_exit(pid)? {
        bail!("serve did not exit 0 after SIGTERM");
    }
    Ok(Attack {
        idle_rss_kb,
        max_rss_kb,
        statuses: seen
            .iter()
            .map(|(s, n)| format!("{s}×{n}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

struct Run {
    wall: Duration,
    max_rss_kb: u64,
    recorded: u64,
    replayed: u64,
    summary: String,
}

/// `hpc-ledger import --format slurm FILE` as its own process: wall time,
/// peak RSS and the summary.
fn import(setup: &Setup, file: &Path) -> anyhow::Result<Run> {
    let out_path = setup.dir.join("import.json");
    let out = std::fs::File::create(&out_path)?;
    let t = Instant::now();
    let child = Command::new(&setup.exe)
        .args(["import", "--format", "slurm", "--output", "json"])
        .arg(file)
        .env("DATABASE_URL", &setup.url)
        .env_remove("HPC_LEDGER_DATABASE_URL_FILE")
        .env("HPC_LEDGER_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the import")?;
    let (ok, max_rss_kb) = wait_watching_peak(child.id())?;
    let wall = t.elapsed();
    let summary = std::fs::read_to_string(&out_path)?;
    if !ok {
        bail!("the import failed: {summary}");
    }
    let json: serde_json::Value = serde_json::from_str(&summary).context("reading the import's summary")?;
    let n = |k: &str| json[k].as_u64().unwrap_or(0);
    Ok(Run {
        wall,
        max_rss_kb,
        recorded: n("recorded"),
        replayed: n("replayed"),
        summary,
    })
}

/// Wait for child `pid`: whether it exited 0, and its own peak RSS in KiB.
/// The peak is read from `/proc/PID/status` (VmHWM) while it runs:
/// getrusage's figure would include the RSS of this process at the fork.
fn wait_watching_peak(pid: u32) -> anyhow::Result<(bool, u64)> {
    let status_file = format!("/proc/{pid}/status");
    let done = std::sync::atomic::AtomicBool::new(false);
    let peak = std::sync::atomic::AtomicU64::new(0);
    let ok = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(kb) = std::fs::read_to_string(&status_file)
                    .ok()
                    .as_deref()
                    .and_then(vm_hwm_kb)
                {
                    peak.fetch_max(kb, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let ok = wait_exit(pid);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        ok
    })?;
    Ok((ok, peak.into_inner()))
}

/// `VmHWM:   12345 kB` -> 12345.
fn vm_hwm_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
}

/// Reap child `pid`; whether it exited 0.
fn wait_exit(pid: u32) -> anyhow::Result<bool> {
    let pid = libc::pid_t::try_from(pid)?;
    let mut status = 0;
    // SAFETY: waitpid writes only the status out-parameter.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid {
        bail!("waiting for process {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// Median wall time of `calls` `job record` processes and of as many
/// `psql -c INSERT` of one row, interleaved so both see the same machine.
async fn one_job(setup: &Setup, pool: &PgPool, month: Month, calls: u32) -> anyhow::Result<(Duration, Duration)> {
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS bench_one;
         CREATE TABLE bench_one (id bigint PRIMARY KEY, cluster text, job_id text, project text, cores int,
                                 started timestamptz, ended timestamptz)",
    )
    .execute(pool)
    .await?;
    let day = month.first_day();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..calls.max(1) {
        let job = serde_json::json!({
            "cluster": "bench", "job_id": format!("epilogue-{i}"), "project": "P0000001", "queue": "batch",
            "cores": 4, "start": format!("{day}T10:00:00-05:00"), "end": format!("{day}T11:30:00-05:00"),
        });
        let t = Instant::now();
        let out = run_with_stdin(
            Command::new(&setup.exe)
                .args(["job", "record", "--json"])
                .env("DATABASE_URL", &setup.url)
                .env_remove("HPC_LEDGER_DATABASE_URL_FILE")
                .env("HPC_LEDGER_LOG", "warn"),
            &job.to_string(),
        )?;
        ours.push(t.elapsed());
        if !out.status.success() {
            bail!("job record failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let sql = format!(
            "INSERT INTO bench_one VALUES ({i}, 'bench', 'epilogue-{i}', 'P0000001', 4, '{day} 10:00-05', '{day} 11:30-05')"
        );
        let t = Instant::now();
        let out = Command::new(&setup.psql)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &setup.url, "-c", &sql])
            .stdin(Stdio::null())
            .output()
            .context("running psql")?;
        theirs.push(t.elapsed());
        if !out.status.success() {
            bail!("psql failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    sqlx::raw_sql("DROP TABLE bench_one").execute(pool).await?;
    Ok((median(ours), median(theirs)))
}

fn run_with_stdin(cmd: &mut Command, input: &str) -> anyhow::Result<std::process::Output> {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("the child's stdin")?
        .write_all(input.as_bytes())?;
    Ok(child.wait_with_output()?)
}

/// What the empty copies of [`insert_select`] carry.
#[derive(Clone, Copy)]
enum Copies {
    /// Columns only: no index, no check (the storage billing baseline).
    Bare,
    /// The table's indexes and checks, no triggers (so no reference
    /// checks): what keeps the rows findable and valid (a bound).
    Indexed,
}

/// `INSERT … SELECT` of each `(table, query)` into an empty copy of `table`,
/// in one transaction, after a checkpoint: the time PostgreSQL itself takes
/// to store those rows.
async fn insert_select(pool: &PgPool, parts: &[(&str, String)], copies: Copies) -> anyhow::Result<Duration> {
    let copy = |t: &str| format!("bench_rows_{t}");
    let including = match copies {
        Copies::Bare => "",
        Copies::Indexed => " INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES",
    };
    for (table, _) in parts {
        sqlx::raw_sql(&format!(
            "DROP TABLE IF EXISTS {c}; CREATE TABLE {c} (LIKE {table}{including})",
            c = copy(table)
        ))
        .execute(pool)
        .await?;
    }
    checkpoint(pool).await?;
    let mut tx = pool.begin().await?;
    let t = Instant::now();
    for (table, query) in parts {
        sqlx::raw_sql(&format!("INSERT INTO {} {query}", copy(table)))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    let took = t.elapsed();
    for (table, _) in parts {
        sqlx::raw_sql(&format!("DROP TABLE {}", copy(table)))
            .execute(pool)
            .await?;
    }
    Ok(took)
}

/// Rows in the tables an import writes.
async fn ledger_rows(pool: &PgPool) -> anyhow::Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM job) + (SELECT count(*) FROM job_record) + (SELECT count(*) FROM ledger_entry)",
    )
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n)?)
}

/// The time to read every job charge with its record and run, the rows the
/// audit recomputes each charge from, without the arithmetic (as the audit
/// runs: no JIT; the better of two runs).
async fn join_of_inputs(pool: &PgPool) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..2 {
        let mut tx = pool.begin().await?;
        sqlx::raw_sql("SET LOCAL jit = off").execute(&mut *tx).await?;
        let t = Instant::now();
        sqlx::raw_sql(
            "SELECT count(*), max(e.quantity), max(r.ended_at - j.started_at), max(r.cores), max(j.submitted_at)
               FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
              WHERE e.kind = 'job'",
        )
        .execute(&mut *tx)
        .await?;
        best = best.min(t.elapsed());
        tx.rollback().await?;
    }
    Ok(best)
}

async fn busiest_project(pool: &PgPool, month: Month) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar(
        "SELECT p.code FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.period = $1 AND e.kind = 'job' GROUP BY p.code ORDER BY count(*) DESC, p.code LIMIT 1",
    )
    .bind(month.first_day())
    .fetch_one(pool)
    .await?)
}

async fn ledger_size(pool: &PgPool) -> anyhow::Result<u64> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(n)?)
}

/// Median time of `calls` statements of one project (after one warm-up).
async fn statement_time(pool: &PgPool, month: Month, code: &str, calls: u32) -> anyhow::Result<Duration> {
    let first = service::statement::statements(pool, month, Which::Project(code)).await?;
    if first.is_empty() {
        bail!("no statement for {code}");
    }
    let mut times = Vec::new();
    for _ in 0..calls.max(1) {
        let t = Instant::now();
        let s = service::statement::statements(pool, month, Which::Project(code)).await?;
        times.push(t.elapsed());
        if s.len() != first.len() {
            bail!("statements changed under the bench");
        }
    }
    Ok(median(times))
}

/// The time to read every ledger entry once (the better of two runs).
async fn seq_scan(pool: &PgPool) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..2 {
        let t = Instant::now();
        sqlx::raw_sql("SELECT count(*), sum(amount), sum(quantity) FROM ledger_entry")
            .execute(pool)
            .await?;
        best = best.min(t.elapsed());
    }
    Ok(best)
}

/// Copy every job with its record and charges into `grow - 1` earlier
/// periods (shifted back by multiples of 35 days, a job id suffix `~k`),
/// so the ledger holds `grow` times the job charges. Shifting every instant
/// by the same whole number of hours keeps each job's wall time, and the
/// bench center's rate cards hold from 2020, so every copy is a correct
/// charge that the audit recomputes to the cent.
pub async fn grow_ledger(pool: &PgPool, grow: u32) -> anyhow::Result<()> {
    let (jobs, records, entries): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT coalesce(max(id), 0) FROM job), (SELECT coalesce(max(id), 0) FROM job_record),
                (SELECT coalesce(max(id), 0) FROM ledger_entry)",
    )
    .fetch_one(pool)
    .await?;
    for k in 1..i64::from(grow.max(1)) {
        let mut tx = pool.begin().await?;
        let shift = format!("{} hours", 35 * 24 * k);
        sqlx::query(
            "INSERT INTO job (id, cluster_id, scheduler_job_id, array_index, submitted_at, started_at)
             OVERRIDING SYSTEM VALUE
             SELECT id + $1 * $2, cluster_id, scheduler_job_id || '~' || $1, array_index,
                    submitted_at - $3::interval, started_at - $3::interval
               FROM job WHERE id <= $2 ORDER BY id",
        )
        .bind(k)
        .bind(jobs)
        .bind(&shift)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO job_record (id, job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, queue,
                                     user_name, job_name, state, exit_code, ended_at, nodes, cores, memory_bytes, gpus,
                                     charge_fingerprint, content_fingerprint, source_format, source_ref, raw, read_options,
                                     recorded_by)
             OVERRIDING SYSTEM VALUE
             SELECT id + $1 * $2, job_id + $1 * $4, cluster_id, started_at - $3::interval, revision, kind, project_id,
                    node_type_id, queue, user_name, job_name, state, exit_code, ended_at - $3::interval, nodes, cores,
                    memory_bytes, gpus, charge_fingerprint, content_fingerprint, source_format, source_ref, raw,
                    read_options, 'bench'
               FROM job_record WHERE id <= $2 ORDER BY id",
        )
        .bind(k)
        .bind(records)
        .bind(&shift)
        .bind(jobs)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO ledger_entry (id, period, project_id, kind, metric, job_record_id, rate_card_id, quantity,
                                       unit_rate, amount_exact, amount, author)
             OVERRIDING SYSTEM VALUE
             SELECT e.id + $1 * $2, date_trunc('month', (r.ended_at - $3::interval) AT TIME ZONE c.time_zone)::date,
                    e.project_id, e.kind, e.metric, e.job_record_id + $1 * $4, e.rate_card_id, e.quantity, e.unit_rate,
                    e.amount_exact, e.amount, 'bench'
               FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id CROSS JOIN center c
              WHERE e.id <= $2 AND e.kind = 'job' ORDER BY e.id",
        )
        .bind(k)
        .bind(entries)
        .bind(&shift)
        .bind(records)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    }
    // Later inserts must not collide with the copies' ids.
    sqlx::raw_sql(
        "SELECT setval(pg_get_serial_sequence('job', 'id'), (SELECT max(id) FROM job));
         SELECT setval(pg_get_serial_sequence('job_record', 'id'), (SELECT max(id) FROM job_record));
         SELECT setval(pg_get_serial_sequence('ledger_entry', 'id'), (SELECT max(id) FROM ledger_entry));
         ANALYZE job, job_record, ledger_entry;",
    )
    .execute(pool)
    .await?;
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn count(n: u64) -> f64 {
    n as f64
}

fn per_second(n: u64, d: Duration) -> u64 {
    let rate = count(n) / d.as_secs_f64().max(1e-9);
    // A rate of jobs per second fits a u64 by far.
    rate.round().clamp(0.0, 1e15) as u64
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// 1234567 -> "1,234,567".
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_and_medians() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        let ms = Duration::from_millis;
        assert_eq!(median(vec![ms(9), ms(1), ms(5)]), ms(5));
        assert_eq!(per_second(1000, Duration::from_millis(250)), 4000);
        assert_eq!(
            vm_hwm_kb("Name:\tx\nVmPeak:\t 9 kB\nVmHWM:\t   40960 kB\n"),
            Some(40960)
        );
        assert_eq!(vm_hwm_kb("Name:\tx\n"), None);
    }
}
