//! What PostgreSQL alone does for the same work: `COPY`, `INSERT … SELECT`
//! into copies of the tables, a sequential scan, the audit's inputs joined;
//! and the set-up the figures need (settings, checkpoints, a grown ledger).

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use super::Result;
use crate::db;

/// `name = setting` for what matters here.
pub(super) async fn settings(pool: &PgPool) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = vec![(
        "server_version".into(),
        sqlx::query_scalar("SELECT version()").fetch_one(pool).await?,
    )];
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, current_setting(name) FROM pg_settings
          WHERE name IN ('shared_buffers', 'work_mem', 'maintenance_work_mem', 'effective_cache_size',
                         'fsync', 'synchronous_commit', 'full_page_writes', 'wal_level', 'max_wal_size',
                         'checkpoint_timeout', 'max_parallel_workers_per_gather', 'jit', 'autovacuum',
                         'wal_compression')
          ORDER BY name",
    )
    .fetch_all(pool)
    .await?;
    out.extend(rows);
    Ok(out)
}

pub(super) async fn checkpoint(pool: &PgPool) -> Result<()> {
    // Needs superuser or pg_checkpoint; a bench without it just runs on.
    let _ = sqlx::raw_sql("CHECKPOINT").execute(pool).await;
    Ok(())
}

/// COPY the data lines of `path` into a table of text columns with a unique
/// index on the job's identity.
pub(super) async fn copy_baseline(pool: &PgPool, path: &Path) -> Result<Duration> {
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

/// What the empty copies of [`insert_select`] carry.
#[derive(Clone, Copy)]
pub(super) enum Copies {
    /// Columns only: no index, no check (the storage billing baseline).
    Bare,
    /// The table's indexes and checks, no triggers (so no reference
    /// checks): what keeps the rows findable and valid (a bound).
    Indexed,
}

/// `INSERT … SELECT` of each `(table, query)` into an empty copy of `table`,
/// in one transaction, after a checkpoint: the time PostgreSQL itself takes
/// to store those rows.
pub(super) async fn insert_select(pool: &PgPool, parts: &[(&str, String)], copies: Copies) -> Result<Duration> {
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

/// Rows in the tables an import writes (its rollups' included).
pub(super) async fn ledger_rows(pool: &PgPool) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM job) + (SELECT count(*) FROM job_record) + (SELECT count(*) FROM ledger_entry)
                + (SELECT count(*) FROM ledger_draw) + (SELECT count(*) FROM ledger_usage)",
    )
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n)?)
}

/// The time to read every job charge with its record and run, the rows the
/// audit recomputes each charge from, without the arithmetic (as the audit
/// runs: no JIT; the better of two runs).
pub(super) async fn join_of_inputs(pool: &PgPool) -> Result<Duration> {
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

pub(super) async fn ledger_size(pool: &PgPool) -> Result<u64> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(n)?)
}

/// What the server has counted of its writes and reads so far: the WAL
/// the whole cluster wrote (`pg_stat_wal`: bytes, full-page images) and the
/// blocks the database read from outside its shared buffers
/// (`pg_stat_database.blks_read`). Taken before and after a run, what the
/// run cost in I/O ([`Io::since`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Io {
    pub(super) wal_bytes: i64,
    pub(super) wal_fpi: i64,
    pub(super) blks_read: i64,
}

impl Io {
    pub(super) async fn now(pool: &PgPool) -> Result<Io> {
        // The counters a backend flushes as it goes and when it exits (the
        // run's own processes have exited), read in a transaction of their
        // own so that no cached snapshot of them is read.
        let (wal_bytes, wal_fpi, blks_read): (i64, i64, i64) = sqlx::query_as(
            "SELECT w.wal_bytes::bigint, w.wal_fpi, d.blks_read
               FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()",
        )
        .fetch_one(pool)
        .await?;
        Ok(Io {
            wal_bytes,
            wal_fpi,
            blks_read,
        })
    }

    /// What was counted between `before` and this.
    pub(super) fn since(self, before: Io) -> Io {
        Io {
            wal_bytes: self.wal_bytes - before.wal_bytes,
            wal_fpi: self.wal_fpi - before.wal_fpi,
            blks_read: self.blks_read - before.blks_read,
        }
    }
}

impl std::fmt::Display for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} MB of WAL ({} full-page images), {} blocks read into shared buffers",
            self.wal_bytes as f64 / 1e6,
            super::grouped(u64::try_from(self.wal_fpi).unwrap_or(0)),
            super::grouped(u64::try_from(self.blks_read).unwrap_or(0))
        )
    }
}

/// How many times each of the database's own tables has been analyzed by
/// an `ANALYZE` command (`hl_analyze` runs one; autovacuum's are counted
/// apart): compared before and after a run, the tables the run analyzed.
pub(super) async fn analyze_counts(pool: &PgPool) -> Result<std::collections::BTreeMap<String, i64>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT relname::text, analyze_count FROM pg_stat_user_tables WHERE schemaname = 'public'")
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().collect())
}

/// The time to read every ledger entry once (the better of two runs).
pub(super) async fn seq_scan(pool: &PgPool) -> Result<Duration> {
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
///
/// The copies are written oldest first, each copy's entries by month (a
/// copy straddles two), so that they lie on disk in posting order, as a
/// center's ledger written month after month does (only the month they
/// copy, written before them, lies in front of them), their ids growing
/// in the order they are written.
pub async fn grow_ledger(pool: &PgPool, grow: u32) -> Result<()> {
    let (jobs, records, entries): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT coalesce(max(id), 0) FROM job), (SELECT coalesce(max(id), 0) FROM job_record),
                (SELECT coalesce(max(id), 0) FROM ledger_entry)",
    )
    .fetch_one(pool)
    .await?;
    // One connection for every copy: a server process keeps writing on the
    // page it wrote last, where another would first fill the free space
    // left at the end of an earlier copy.
    let mut conn = pool.acquire().await?;
    let copies = i64::from(grow.max(1)) - 1;
    for k in (1..=copies).rev() {
        // Copy k lies 35 × k days back; its rows take the ids of block
        // `j`, the oldest copy the first block after the month's own, so
        // that ids grow in the order rows are written, as the identity
        // gives them (each key index is written at its right edge, as a
        // center's are, not split in the middle of its pages).
        let j = copies - k + 1;
        // READ COMMITTED, as every write to the ledger must be (migration
        // 0057), whatever the server's default.
        let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN ISOLATION LEVEL READ COMMITTED").await?;
        let shift = format!("{} hours", 35 * 24 * k);
        sqlx::query(
            "INSERT INTO job (id, cluster_id, scheduler_job_id, array_index, submitted_at, started_at)
             OVERRIDING SYSTEM VALUE
             SELECT id + $4 * $2, cluster_id, scheduler_job_id || '~' || $1, array_index,
                    submitted_at - $3::interval, started_at - $3::interval
               FROM job WHERE id <= $2 ORDER BY id",
        )
        .bind(k)
        .bind(jobs)
        .bind(&shift)
        .bind(j)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO job_record (id, job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, queue,
                                     user_name, job_name, state, exit_code, ended_at, nodes, cores, memory_bytes, gpus,
                                     charge_fingerprint, content_fingerprint, source_format, source_ref, raw, read_options,
                                     read_options_id, recorded_by, suspended_seconds)
             OVERRIDING SYSTEM VALUE
             SELECT id + $1 * $2, job_id + $1 * $4, cluster_id, started_at - $3::interval, revision, kind, project_id,
                    node_type_id, queue, user_name, job_name, state, exit_code, ended_at - $3::interval, nodes, cores,
                    memory_bytes, gpus, charge_fingerprint, content_fingerprint, source_format, source_ref, raw,
                    read_options, read_options_id, 'bench', suspended_seconds
               FROM job_record WHERE id <= $2 ORDER BY id",
        )
        .bind(j)
        .bind(records)
        .bind(&shift)
        .bind(jobs)
        .execute(&mut *tx)
        .await?;
        // A copy straddles two months: its entries are written month by
        // month, and numbered in that order.
        sqlx::query(
            "INSERT INTO ledger_entry (id, period, project_id, kind, metric, job_record_id, rate_card_id, quantity,
                                       unit_rate, amount_exact, amount, charging_rules, author)
             OVERRIDING SYSTEM VALUE
             SELECT $1 * $2 + row_number() OVER (ORDER BY c.period, c.id), c.period, c.project_id, c.kind, c.metric,
                    c.job_record_id + $1 * $4, c.rate_card_id, c.quantity, c.unit_rate, c.amount_exact, c.amount,
                    c.charging_rules, 'bench'
               FROM (SELECT e.id, date_trunc('month', (r.ended_at - $3::interval) AT TIME ZONE t.time_zone)::date
                            AS period, e.project_id, e.kind, e.metric, e.job_record_id, e.rate_card_id, e.quantity,
                            e.unit_rate, e.amount_exact, e.amount, e.charging_rules
                       FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id CROSS JOIN center t
                      WHERE e.id <= $2 AND e.kind = 'job') c
              ORDER BY c.period, c.id",
        )
        .bind(j)
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
         ANALYZE job, job_record, ledger_entry, ledger_draw, ledger_usage;",
    )
    .execute(pool)
    .await?;
    Ok(())
}
