//! `hpc-ledger bench --scale`: the ledger of years (issue 19, item 2).
//!
//! A month of jobs is imported as files of the same size: the first into
//! an empty ledger (in a second database, where the month is then audited
//! alone, emptied once its figures are taken unless `--keep`), the second
//! into a ledger grown to `entries` charges by copies of the first into
//! earlier months ([`grow_ledger`]), every copy a correct charge. On the
//! grown ledger it measures what a center does every day and every month:
//!
//! | figure | baseline | target |
//! |---|---|---|
//! | import of a file into the grown ledger | the same size into an empty ledger | rate within 10 % |
//! | one project's statement | the same in the ledger of only that month | ≤ 10 ms |
//! | one project's balance, an allocation over a year | – | ≤ 10 ms |
//! | `audit --month M` | the same month audited in a ledger that holds only it | ≤ 2 × |
//! | closing M (every earlier month closed first) | reading M's entries in seal order | ≤ 5 × |
//!
//! The fold of M's rollups, which `close` runs once the close has committed
//! (migration 0042), is timed after it and reported beside it.
//!
//! The import is timed twice on each side and the faster of each pair is
//! compared: on the 2-core virtual machines the bench runs on, one import
//! of 450,000 jobs took 40 to 64 s from one run to the next into the same
//! ledger (docs/scaling.md, "At 20.8M entries, the import examined"), more
//! than the 10 % the target allows. Both imports of the first file into an
//! empty ledger are timed (the month alone's, and the grown ledger's before
//! it grows); the second file is timed into the grown ledger, and a third
//! after the month is closed (its jobs are posted to the next month,
//! flagged late, into the same grown ledger).
//!
//! `audit --month M` is run three times on each side and the medians are
//! compared, all three printed: they show whether the figure repeats
//! within a run (at 20.8M entries one audit of the month took 5.2 s in
//! one run and 11.3 s in another, single timings; docs/scaling.md).
//!
//! Last, the oldest year is archived into files (`archive`, reported with
//! `verify --archive` of them and a statement after it; no target).
//!
//! The growth drops the secondary indexes of the tables it copies into and
//! builds them again afterwards (how a bulk load is done; the copies are
//! the same rows either way), writes the copies oldest first, then vacuums
//! the grown tables, untimed: a ledger of years has been vacuumed, and
//! autovacuum working through the copies would otherwise run under the
//! timed figures. A center's ledger is written month after month, so a
//! month's entries lie together on disk and PostgreSQL knows it
//! (`pg_stats.correlation` of `period` near 1, printed) and reads one month
//! by its index; copies written newest first left the grown ledger in an
//! order no center's has (a correlation of 0.17 measured at 4.4M entries),
//! and every month's read a scan of the whole table. Until 2026-12-05 the
//! growth put them in order afterwards (`CLUSTER`), which needed a second
//! copy of `ledger_entry` on disk while it ran (14 GB at 50M entries);
//! written oldest first, only the month they copy lies in front of them.

use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use sqlx::PgPool;

use super::baselines::{Io, checkpoint, grow_ledger, ledger_size, settings};
use super::measure::{Run, balance_time, busiest_project, expect_recorded, import, statement_time};
use super::report::{millis, per_second, secs};
use super::{Figure, Report, Result, Setup, Sizes, balance_figure, clean_month_audit, fail, grouped};
use crate::db::{self, MIGRATOR};
use crate::domain::period::Month;
use crate::service;

/// How big a `--scale` run is.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleSizes {
    /// Jobs in each of the three files.
    pub jobs: u64,
    /// Projects in the center, each with a storage quota.
    pub projects: u64,
    /// Projects the jobs are charged to.
    pub job_projects: u64,
    /// The ledger grows to at least this many entries.
    pub entries: u64,
    /// Calls timed for a statement and a balance (the median is reported).
    pub calls: u32,
}

impl ScaleSizes {
    /// Fifty million entries: five years of a large center.
    pub const FULL: ScaleSizes = ScaleSizes {
        jobs: 1_000_000,
        projects: 100_000,
        job_projects: 2_000,
        entries: 50_000_000,
        calls: 20,
    };
}

/// The bench center's rate cards hold from 2020-01; the copies, 35 days
/// apart, must end after that (69 copies reach back 2,415 days).
const MAX_TIMES: u32 = 70;

/// The tables the growth copies into.
const GROWN: [&str; 3] = ["job", "job_record", "ledger_entry"];

pub async fn run(setup: &Setup, sizes: &ScaleSizes) -> Result<Report> {
    let say = |s: &str| (setup.progress)(s);
    let month = Month::of_instant(Utc::now(), chrono_tz::America::New_York).prev();
    let mut figures = Vec::new();
    let mut notes = Vec::new();

    say("the center and three files of the month's jobs");
    let mut center = Vec::new();
    crate::synthetic::write_bench_center(&mut center, sizes.projects, month)?;
    let config = crate::config::parse(std::str::from_utf8(&center)?)?;
    let projects = sizes.job_projects.min(sizes.projects);
    let files = [
        ("first.txt", 0..sizes.jobs),
        ("second.txt", sizes.jobs..2 * sizes.jobs),
        ("third.txt", 2 * sizes.jobs..3 * sizes.jobs),
    ];
    let mut paths = Vec::new();
    for (name, jobs) in files {
        let path = setup.dir.join(name);
        let file = std::fs::File::create(&path)?;
        crate::synthetic::write_bench_sacct(std::io::BufWriter::new(file), jobs, projects, month)?;
        paths.push(path);
    }
    let (first, second, third) = (&paths[0], &paths[1], &paths[2]);

    // The month alone: both files into an empty ledger of their own, the
    // first timed, then that month's audit.
    say("the month alone: both files into an empty ledger");
    let alone = db::connect(&setup.fresh_url).await?;
    MIGRATOR.run(&alone).await?;
    service::config::apply(&alone, &config, "bench").await?;
    checkpoint(&alone).await?;
    let io = Io::now(&alone).await?;
    let empty = import(setup, &setup.fresh_url, first)?;
    let empty_io = Io::now(&alone).await?.since(io);
    expect_recorded(&empty, sizes.jobs)?;
    expect_recorded(&import(setup, &setup.fresh_url, second)?, sizes.jobs)?;
    say("audit --month and a statement, the month alone");
    let month_alone = clean_month_audit(&alone, month).await?;
    let code = busiest_project(&alone, month).await?;
    let statement_alone = statement_time(&alone, month, &code, sizes.calls).await?;
    let alone_entries = ledger_size(&alone).await?;
    alone.close().await;
    if let Some((admin, name)) = &setup.empty_fresh {
        // Its figures are taken: its disk is the grown ledger's now.
        db::recreate_database(admin, name).await?;
    }

    // The grown ledger: the first file, its copies, then the second file.
    let pool = db::connect(&setup.url).await?;
    MIGRATOR.run(&pool).await?;
    let settings = settings(&pool).await?;
    service::config::apply(&pool, &config, "bench").await?;
    say("the first file into the ledger to grow");
    checkpoint(&pool).await?;
    let io = Io::now(&pool).await?;
    let empty_again = import(setup, &setup.url, first)?;
    let empty_again_io = Io::now(&pool).await?.since(io);
    expect_recorded(&empty_again, sizes.jobs)?;
    let once = ledger_size(&pool).await?;
    // The ledger grows to `times` × the month: the month and `times - 1`
    // copies of it.
    let times = u32::try_from(sizes.entries.div_ceil(once.max(1)))?;
    if times > MAX_TIMES {
        fail!(
            "{} entries need {times} × a month of {} entries; the bench center's rates reach back {} copies \
             (about six years): import more jobs a month (--jobs)",
            grouped(sizes.entries),
            grouped(once),
            MAX_TIMES - 1
        );
    }
    say(&format!("growing the ledger to {times} × {} entries", grouped(once)));
    let t = Instant::now();
    let rebuilt = grow_bulk(&pool, times).await?;
    let grown = ledger_size(&pool).await?;
    notes.push(format!(
        "growing the ledger from {} to {} entries ({} copies of the month's job charges into earlier \
         months, written oldest first): {}, of which building the {} secondary indexes of {} again: {}, and \
         vacuuming and analyzing them: {}; the entries' order on disk against their month (pg_stats.correlation \
         of ledger_entry.period, 1 in posting order): {}",
        grouped(once),
        grouped(grown),
        times - 1,
        secs(t.elapsed()),
        rebuilt.count,
        GROWN.join(", "),
        secs(rebuilt.took),
        secs(rebuilt.vacuum),
        rebuilt.correlation.map_or("none".to_owned(), |c| format!("{c:.3}"))
    ));
    checkpoint(&pool).await?;

    say("the second file into the grown ledger");
    let io = Io::now(&pool).await?;
    let at_scale = import(setup, &setup.url, second)?;
    let at_scale_io = Io::now(&pool).await?.since(io);
    expect_recorded(&at_scale, sizes.jobs)?;
    let large = ledger_size(&pool).await?;
    say("a statement and a balance");
    if busiest_project(&pool, month).await? != code {
        fail!("the busiest project of {month} is not the same in both ledgers");
    }
    let statement = statement_time(&pool, month, &code, sizes.calls).await?;
    figures.push(Figure {
        figure: format!("one project's statement ({month}) at {} entries", grouped(large)),
        measured: millis(statement),
        baseline: format!("in the ledger of only that month: {}", millis(statement_alone)),
        ratio: Some(statement.as_secs_f64() / statement_alone.as_secs_f64()),
        target: "≤ 10 ms".into(),
        pass: statement <= Duration::from_millis(10),
    });
    let mut from = month;
    for _ in 0..12 {
        from = from.prev();
    }
    let since = from.start(chrono_tz::America::New_York);
    let (balance, used) = balance_time(&pool, &code, since, sizes.calls).await?;
    figures.push(balance_figure(from, used, balance, statement, large));

    say("audit --month, the grown ledger");
    let month_grown = clean_month_audit(&pool, month).await?;
    let ratio = month_grown.median().as_secs_f64() / month_alone.median().as_secs_f64();
    figures.push(Figure {
        figure: format!("audit --month {month} at {} entries (clean)", grouped(large)),
        measured: month_grown.to_string(),
        baseline: format!(
            "the same month in a ledger of only it ({} entries): {month_alone}",
            grouped(alone_entries)
        ),
        ratio: Some(ratio),
        target: "≤ 2 ×".into(),
        pass: ratio <= 2.0,
    });

    // The month end: every earlier month closed (their storage waived, the
    // copies carry none), the month's storage billed, then the close timed
    // against reading its entries in the seal's order.
    say("closing the earlier months");
    let now = Utc::now();
    service::storage::waive_through(&pool, month.prev(), "before the bench's month", "bench", now)
        .await?
        .1
        .map_or(Ok(()), Err)?;
    let t = Instant::now();
    let earlier = service::close::close_through(&pool, month.prev(), "bench", now).await?;
    if let Some(e) = earlier.stopped {
        return Err(e.into());
    }
    let closing = t.elapsed();
    let t = Instant::now();
    fold_rollups(&pool).await?;
    notes.push(format!(
        "closing the {} earlier months in order (a seal and statements each): {}; folding their rollups after: {}",
        earlier.months.len(),
        secs(closing),
        secs(t.elapsed())
    ));
    service::storage::bill(&pool, month, "bench", false, now).await?;
    let billed = ledger_size(&pool).await?;
    checkpoint(&pool).await?;
    let floor = read_in_seal_order(&pool, month).await?;
    let t = Instant::now();
    let closed = service::close::close(&pool, month, "bench", Utc::now()).await?;
    let close = t.elapsed();
    if !closed.closed_now {
        fail!("{month} was closed before the bench closed it");
    }
    // What `close` does once the close has committed, outside its lock.
    let t = Instant::now();
    fold_rollups(&pool).await?;
    let fold = t.elapsed();
    notes.push(format!(
        "folding {month}'s rollups after its close (outside the close's lock; migration 0042): {}; the close \
         and the fold together: {} = {:.2} × reading its entries",
        secs(fold),
        secs(close + fold),
        (close + fold).as_secs_f64() / floor.as_secs_f64()
    ));
    let seal = seal_again(&pool, month).await?;
    let ratio = close.as_secs_f64() / floor.as_secs_f64();
    figures.push(Figure {
        figure: format!(
            "closing {month} ({} entries, {} statements) at {} entries",
            grouped(u64::try_from(closed.entry_count)?),
            grouped(closed.statements.len() as u64),
            grouped(billed)
        ),
        measured: secs(close),
        baseline: format!("reading its entries in the seal's order: {}", secs(floor)),
        ratio: Some(ratio),
        target: "≤ 5 ×".into(),
        pass: ratio <= 5.0,
    });
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&pool)
        .await?;
    notes.push(format!(
        "database size at {} entries: {:.1} GB ({} bytes per entry, with its job, record and indexes)",
        grouped(billed),
        bytes as f64 / 1e9,
        grouped(u64::try_from(bytes)? / billed.max(1))
    ));

    // The import's second sample at scale: the month is closed, so its
    // jobs are posted to the next month, flagged late.
    say("a third file into the grown ledger");
    checkpoint(&pool).await?;
    let io = Io::now(&pool).await?;
    let late = import(setup, &setup.url, third)?;
    let late_io = Io::now(&pool).await?.since(io);
    expect_recorded(&late, sizes.jobs)?;
    // What each import cost the server in I/O, each after a checkpoint (the
    // first change to a page after one writes the whole page to the WAL).
    notes.push(format!(
        "the import's I/O, each after a checkpoint: into an empty ledger {empty_io} and {empty_again_io}; into \
         the grown ledger {at_scale_io} and {late_io}"
    ));
    figures.insert(
        0,
        import_figure(sizes.jobs, grown, [&empty, &empty_again], [&at_scale, &late]),
    );

    // Retention: the oldest year archived into files and checked again,
    // and the month's statement after it (docs/retention.md).
    if let Some(oldest) = earlier.months.first().map(|c| c.month) {
        let mut through = oldest;
        for _ in 0..11 {
            if through.next() < month {
                through = through.next();
            }
        }
        say("archiving the oldest year");
        let dir = setup.dir.join("archive");
        let t = Instant::now();
        let done = service::archive::archive_through(&pool, through, &dir, "bench").await?;
        let took = t.elapsed();
        if let Some(e) = done.stopped {
            return Err(e.into());
        }
        let archived = u64::try_from(done.months.iter().map(|a| a.entries).sum::<i64>())?;
        let records: u64 = done.months.iter().map(|a| a.records).sum();
        let mut file_bytes = 0;
        for a in &done.months {
            file_bytes += std::fs::metadata(&a.file)?.len();
        }
        let t = Instant::now();
        let checks = service::archive::verify_archive(&pool, &dir, None).await?;
        let verified = t.elapsed();
        if checks.len() != done.months.len() || !checks.iter().all(|c| c.holds()) {
            fail!("verify --archive does not hold for the files the bench archived: {checks:?}");
        }
        let after = statement_time(&pool, month, &code, sizes.calls).await?;
        notes.push(format!(
            "archiving the oldest {} months ({oldest} to {through}, {} entries and the raw text of {} job records) \
             into files: {} = {} entries/s, {:.1} MB of files ({} bytes per entry); verify --archive of them: {}; \
             one statement of {month} after it: {}",
            done.months.len(),
            grouped(archived),
            grouped(records),
            secs(took),
            grouped(per_second(archived, took)),
            file_bytes as f64 / 1e6,
            grouped(file_bytes / archived.max(1)),
            secs(verified),
            millis(after)
        ));
    }
    pool.close().await;
    Ok(Report {
        sizes: Sizes {
            jobs: sizes.jobs,
            projects: sizes.projects,
            job_projects: projects,
            grow: times,
            calls: sizes.calls,
            fresh_projects: 0,
        },
        month: month.to_string(),
        database: db::redact(&setup.url),
        figures,
        notes,
        bounds: vec![format!(
            "closing a month: its entries read in the seal's order (posting order), each row as text: {}; \
             the month's seal alone, computed again by its algorithm (hl_month_seal_of; seal v3: one SHA-256 \
             over each item's SHA-256): {} = {:.1} × that; the close takes {:.1} × the reading",
            secs(floor),
            secs(seal),
            seal.as_secs_f64() / floor.as_secs_f64(),
            close.as_secs_f64() / floor.as_secs_f64()
        )],
        settings,
    })
}

/// The import at scale against the import into an empty ledger, the faster
/// of each pair of runs compared (the module's docs say why two).
fn import_figure(jobs: u64, grown: u64, empty: [&Run; 2], at_scale: [&Run; 2]) -> Figure {
    let fastest = |runs: [&Run; 2]| runs.iter().map(|r| r.wall).min().unwrap_or_default();
    let both = |runs: [&Run; 2]| format!("{} and {}", secs(runs[0].wall), secs(runs[1].wall));
    let (empty_best, scale_best) = (fastest(empty), fastest(at_scale));
    let ratio = empty_best.as_secs_f64() / scale_best.as_secs_f64();
    Figure {
        figure: format!("import of {} jobs at {} entries", grouped(jobs), grouped(grown)),
        measured: format!(
            "{} = {} jobs/s (twice: {})",
            secs(scale_best),
            grouped(per_second(jobs, scale_best)),
            both(at_scale)
        ),
        baseline: format!(
            "the same number into an empty ledger: {} = {} jobs/s (twice: {})",
            secs(empty_best),
            grouped(per_second(jobs, empty_best)),
            both(empty)
        ),
        ratio: Some(ratio),
        target: "≥ 0.9 × the empty ledger's rate".into(),
        pass: ratio >= 0.9,
    }
}

/// `hl_fold_rollups()`: the closed months not folded yet, folded.
async fn fold_rollups(pool: &PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    if db::fold_rollups(&mut conn).await? == 0 {
        fail!("no closed month was left to fold");
    }
    Ok(())
}

/// The floor under a close: every entry of `month` read in posting order
/// (the seal's), each row turned into text (the better of two runs): its
/// values, without the digest recorded for the seal (migration 0041), so
/// the floor reads what it read before that column.
async fn read_in_seal_order(pool: &PgPool, month: Month) -> Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..2 {
        let t = Instant::now();
        sqlx::query(
            "SELECT count(*), sum(length(t))
               FROM (SELECT (e.id, e.posted_at, e.period, e.project_id, e.kind, e.metric, e.job_record_id,
                             e.rate_card_id, e.storage_rate_id, e.billing_run_id, e.corrects_id, e.quantity,
                             e.unit_rate, e.amount_exact, e.amount, e.late, e.author, e.reason, e.charging_rules,
                             e.discount_id)::text AS t
                       FROM ledger_entry e WHERE e.period = $1 ORDER BY e.id) s",
        )
        .bind(month.first_day())
        .execute(pool)
        .await?;
        best = best.min(t.elapsed());
    }
    Ok(best)
}

/// The month's seal computed again from its entries and the seal before
/// it, timed; it must be the one the close recorded.
async fn seal_again(pool: &PgPool, month: Month) -> Result<Duration> {
    let t = Instant::now();
    let same: bool = sqlx::query_scalar(
        "SELECT hl_month_seal_of(c.seal_algorithm, c.period, b.seal, c.currency, c.closed_by, c.closed_at) = c.seal
           FROM closed_period c LEFT JOIN closed_period b ON b.period = (c.period - interval '1 month')::date
          WHERE c.period = $1",
    )
    .bind(month.first_day())
    .fetch_one(pool)
    .await?;
    let took = t.elapsed();
    if !same {
        fail!("the seal of {month} computed again is not the one its close recorded");
    }
    Ok(took)
}

/// What [`grow_bulk`] rebuilt.
struct Rebuilt {
    count: usize,
    took: Duration,
    vacuum: Duration,
    /// `pg_stats.correlation` of the entries' `period` after the growth.
    correlation: Option<f32>,
}

/// [`grow_ledger`] with the secondary indexes of the tables it writes
/// dropped first and built again after (those not backing a constraint;
/// the unique ones are checked again as they are built).
async fn grow_bulk(pool: &PgPool, times: u32) -> Result<Rebuilt> {
    let tables: Vec<String> = GROWN.iter().map(|t| (*t).to_owned()).collect();
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
           FROM pg_index i
          WHERE i.indrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
            AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
          ORDER BY 1",
    )
    .bind(&tables)
    .fetch_all(pool)
    .await?;
    for (name, _) in &indexes {
        sqlx::raw_sql(&format!("DROP INDEX {name}")).execute(pool).await?;
    }
    grow_ledger(pool, times).await?;
    let t = Instant::now();
    let mut conn = pool.acquire().await?;
    sqlx::raw_sql("SET maintenance_work_mem = '1GB'")
        .execute(&mut *conn)
        .await?;
    for (_, def) in &indexes {
        sqlx::raw_sql(def).execute(&mut *conn).await?;
    }
    let took = t.elapsed();
    // A ledger of years has been vacuumed (its pages all-visible): without
    // this, autovacuum would work through the copies while the figures
    // after are timed.
    let t = Instant::now();
    sqlx::raw_sql("RESET maintenance_work_mem").execute(&mut *conn).await?;
    // On its own: VACUUM refuses to run in a transaction, which several
    // statements in one query would be.
    sqlx::raw_sql("VACUUM (ANALYZE) job, job_record, ledger_entry, ledger_usage, ledger_draw")
        .execute(&mut *conn)
        .await?;
    let vacuum = t.elapsed();
    // How closely the entries' order on disk follows their month, as the
    // planner sees it (1: in posting order).
    let correlation: Option<f32> = sqlx::query_scalar(
        "SELECT correlation FROM pg_stats
          WHERE schemaname = 'public' AND tablename = 'ledger_entry' AND attname = 'period'",
    )
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    Ok(Rebuilt {
        count: indexes.len(),
        took,
        vacuum,
        correlation,
    })
}
