//! What hpc-ledger itself does, timed: its commands as child processes (the
//! import, `job record`, `serve` under hostile posts), `serve` in process, a
//! statement, and the month end of a fresh center.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use sqlx::PgPool;

use super::baselines::checkpoint;
use super::report::median;
use super::{BenchError, Context, Result, Setup, fail};
use crate::db::{self, MIGRATOR};
use crate::domain::period::Month;
use crate::service::{self, statement::Which};

/// The three steps of a month end, timed.
pub(super) struct MonthEnd {
    pub(super) bill: Duration,
    pub(super) close: Duration,
    pub(super) audit: Duration,
}

/// A center's first month end, right after its configuration was applied:
/// the storage run writes a charge per project into an empty ledger, and the
/// close and the audit that follow must not be planned as if it were still
/// empty (issue 13, item 11: the audit took minutes at 20,000 projects when
/// they were). In a database of its own, so that nothing else the bench did
/// has brought the statistics up to date.
pub(super) async fn fresh_month_end(url: &str, projects: u64, month: Month) -> Result<MonthEnd> {
    let pool = db::connect(url).await?;
    MIGRATOR.run(&pool).await?;
    let mut center = Vec::new();
    crate::synthetic::write_bench_center(&mut center, projects, month)?;
    let config = crate::config::parse(std::str::from_utf8(&center)?)?;
    service::config::apply(&pool, &config, "bench").await?;
    // Its quotas hold from 2020 on, its ledger starts with `month`: the
    // months before are waived, as a center starting its ledger would.
    let mut earlier = Month::of_date(chrono::NaiveDate::from_ymd_opt(2020, 1, 1).expect("a date"));
    while earlier < month {
        service::storage::waive(&pool, earlier, "before the ledger started", "bench", Utc::now()).await?;
        earlier = earlier.next();
    }
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
        fail!(
            "the audit of the fresh center found {} discrepancies (first: {:?})",
            audit.discrepancies_found,
            audit.discrepancies.first()
        );
    }
    if closed.statements.len() != billed.project_count {
        fail!(
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

/// The billing office's token of the bench's in-process `serve` (web view).
pub(crate) const BENCH_WEB_TOKEN: &str = "bench-web-view";

/// `serve` in this process on a free local port, without credentials: its
/// address, what stops it, its task and its counters.
#[allow(clippy::type_complexity)]
fn serve_in_process(
    pool: &PgPool,
    max_batch: usize,
    intake: bool,
) -> Result<(
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::result::Result<(), crate::serve::ServeError>>,
    std::sync::Arc<crate::serve::Metrics>,
)> {
    use crate::serve::{Credentials, Metrics, Options};
    let listener = crate::serve::bind("127.0.0.1:0".parse()?)?;
    let addr = listener.local_addr()?;
    let metrics = std::sync::Arc::new(Metrics::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = Options {
        credentials: Credentials::none(),
        checks: Credentials::none(),
        web: Credentials::none().with_token(BENCH_WEB_TOKEN).expect("one word"),
        reader: None,
        max_batch,
        supersede: false,
        author: "bench".into(),
        limits: crate::serve::conn::Limits::default(),
        restart: None,
        intake,
        fold_every: crate::service::FOLD_EVERY,
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
    Ok((addr, stop, server, metrics))
}

/// Concurrent senders of the `serve` figure (as the issue asks).
pub(super) const SENDERS: u64 = 16;

/// What posting to `serve` took.
pub(super) struct Posted {
    /// Until the last post was answered.
    pub took: Duration,
    /// Until every post was recorded: `took` without `--intake`; with it,
    /// until `job_intake` was empty.
    pub recorded: Duration,
    /// Recording transactions.
    pub transactions: u64,
}

/// The answer a new job gets: 201 recorded, or 200 accepted (`--intake`).
fn expected_status(intake: bool) -> u16 {
    if intake { 200 } else { 201 }
}

/// Wait until `serve --intake` has recorded everything it accepted.
async fn intake_recorded(pool: &PgPool) -> Result<()> {
    for _ in 0..60_000 {
        let waiting: i64 = sqlx::query_scalar("SELECT count(*) FROM job_intake")
            .fetch_one(pool)
            .await?;
        if waiting == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fail!("serve --intake did not record what it accepted within 5 minutes")
}

/// What a `serve` figure posts: `n` new jobcomp documents numbered from
/// `first`, for `projects` projects in `month`, to `serve` with
/// `--intake` or without.
pub(super) struct Posts {
    pub first: u64,
    pub n: u64,
    pub projects: u64,
    pub month: Month,
    pub intake: bool,
}

impl Posts {
    fn documents(&self) -> Vec<String> {
        (self.first..self.first + self.n)
            .map(|i| crate::synthetic::bench_jobcomp(i, self.projects, self.month))
            .collect()
    }
}

/// Post to an in-process `serve` from [`SENDERS`] tasks, each waiting for
/// its reply before its next post (as slurmctld does), one connection per
/// post.
pub(super) async fn serve_posts(pool: &PgPool, posts: Posts) -> Result<Posted> {
    use crate::serve::client;
    let Posts { n, intake, .. } = posts;
    let docs = std::sync::Arc::new(posts.documents());
    let (addr, stop, server, metrics) = serve_in_process(pool, 500, intake)?;
    let status = expected_status(intake);
    let t = Instant::now();
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let docs = docs.clone();
        senders.push(tokio::spawn(async move {
            let mut i = s;
            while i < n {
                let doc = &docs[usize::try_from(i).unwrap_or(usize::MAX)];
                let r = client::post(addr, "/slurm/_doc", None, doc.as_bytes()).await?;
                if r.status != status {
                    fail!("serve answered {} to a new job: {}", r.status, r.body.trim());
                }
                i += SENDERS;
            }
            Ok::<(), BenchError>(())
        }));
    }
    for s in senders {
        s.await??;
    }
    let took = t.elapsed();
    if intake {
        intake_recorded(pool).await?;
    }
    let recorded = t.elapsed();
    let _ = stop.send(());
    server.await??;
    Ok(Posted {
        took,
        recorded,
        transactions: metrics.batches().0,
    })
}

/// Latencies of a run: the median and the 99th percentile.
fn p50_p99(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    let p99 = times[(times.len() * 99).div_ceil(100).saturating_sub(1)];
    (median(times), p99)
}

/// One sequential sender at Slurm's pace: the documents posted one after
/// another on one kept-alive connection, each after the last was
/// answered. What it took, the median and the 99th percentile of the posts.
pub(super) async fn serve_one_sender(pool: &PgPool, posts: Posts) -> Result<(Posted, Duration, Duration)> {
    use crate::serve::client::Session;
    let intake = posts.intake;
    let docs = posts.documents();
    let (addr, stop, server, metrics) = serve_in_process(pool, 500, intake)?;
    let status = expected_status(intake);
    let mut session = Session::connect(addr).await?;
    let mut times = Vec::with_capacity(docs.len());
    let t = Instant::now();
    for doc in &docs {
        let one = Instant::now();
        let r = session.post("/slurm/_doc", None, doc.as_bytes()).await?;
        times.push(one.elapsed());
        if r.status != status {
            fail!("serve answered {} to a new job: {}", r.status, r.body.trim());
        }
    }
    let took = t.elapsed();
    drop(session);
    if intake {
        intake_recorded(pool).await?;
    }
    let recorded = t.elapsed();
    let _ = stop.send(());
    server.await??;
    let (p50, p99) = p50_p99(times);
    let posted = Posted {
        took,
        recorded,
        transactions: metrics.batches().0,
    };
    Ok((posted, p50, p99))
}

/// What PostgreSQL itself commits for one client: `pgbench` with one
/// connection inserting one row per durable transaction into a table with
/// an identity key, for `seconds`: transactions per second, and the median
/// and 99th percentile of their latencies (from pgbench's per-transaction
/// log).
pub(super) async fn pgbench_one_client(
    setup: &Setup,
    pool: &PgPool,
    seconds: u32,
) -> Result<(f64, Duration, Duration)> {
    let pgbench = crate::embedded::client_binary("pgbench")
        .context("pgbench (PostgreSQL's own benchmark client) is needed for the one-sender baseline")?;
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS bench_pgbench;
         CREATE TABLE bench_pgbench (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)",
    )
    .execute(pool)
    .await?;
    let script = setup.dir.join("pgbench-insert.sql");
    std::fs::write(&script, "INSERT INTO bench_pgbench (v) VALUES ('a job');\n")?;
    let logs = setup.dir.join("pgbench-log");
    std::fs::create_dir_all(&logs)?;
    let out = Command::new(&pgbench)
        .args(["-n", "-c", "1", "-j", "1", "-T", &seconds.to_string(), "-l"])
        .arg(format!("--log-prefix={}", logs.join("tx").display()))
        .arg("-f")
        .arg(&script)
        .arg(&setup.url)
        .stdin(Stdio::null())
        .output()
        .context("running pgbench")?;
    if !out.status.success() {
        fail!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    // Each log line: client, transaction, latency in µs, script, epoch s, µs.
    let mut times = Vec::new();
    for entry in std::fs::read_dir(&logs)? {
        for line in std::fs::read_to_string(entry?.path())?.lines() {
            if let Some(us) = line.split_whitespace().nth(2).and_then(|f| f.parse::<u64>().ok()) {
                times.push(Duration::from_micros(us));
            }
        }
    }
    std::fs::remove_dir_all(&logs)?;
    sqlx::raw_sql("DROP TABLE bench_pgbench").execute(pool).await?;
    if times.is_empty() {
        fail!("pgbench logged no transactions");
    }
    let tps = times.len() as f64 / f64::from(seconds);
    let (p50, p99) = p50_p99(times);
    Ok((tps, p50, p99))
}

/// `n` sequential `POST /check` requests (a scheduler hook's start check,
/// one connection each) for project `code` against `serve` in process: the
/// median and the 99th percentile of their times, and whether the last was
/// allowed.
pub(super) async fn check_latency(pool: &PgPool, code: &str, n: usize) -> Result<(Duration, Duration, bool)> {
    use crate::serve::client;
    let (addr, stop, server, _) = serve_in_process(pool, 10, false)?;
    let body = serde_json::json!({"project": code, "cluster": "bench", "queue": "batch", "resources": "-n 28",
                                  "walltime": "4:00:00", "job_id": "bench-check"})
    .to_string();
    let mut times = Vec::with_capacity(n);
    let mut allowed = false;
    for i in 0..=n {
        let t = Instant::now();
        let r = client::post(addr, "/check", None, body.as_bytes()).await?;
        // The first warms the connection pool and the plans.
        if i > 0 {
            times.push(t.elapsed());
        }
        if r.status != 200 {
            fail!("serve answered {} to a check: {}", r.status, r.body.trim());
        }
        allowed = serde_json::from_str::<serde_json::Value>(&r.body)?["allowed"] == true;
    }
    let _ = stop.send(());
    server.await??;
    times.sort();
    let p99 = times[(times.len() * 99).div_ceil(100).saturating_sub(1)];
    Ok((median(times), p99, allowed))
}

/// The web view's pages over HTTP from `serve` in this process, as the
/// billing office: the median and the slowest of `calls` fetches of each
/// path (after one warm-up), and each page's size.
pub(super) async fn web_page_times(
    pool: &PgPool,
    paths: &[String],
    calls: u32,
) -> Result<Vec<(Duration, Duration, usize)>> {
    use crate::serve::client;
    let (addr, stop, server, _) = serve_in_process(pool, 10, false)?;
    let auth = format!("Bearer {BENCH_WEB_TOKEN}");
    let mut out = Vec::new();
    for path in paths {
        let mut times = Vec::new();
        let mut size = 0;
        for i in 0..=calls.max(1) {
            let t = Instant::now();
            let r = client::get_as(addr, path, &auth).await?;
            if i > 0 {
                times.push(t.elapsed());
            }
            if r.status != 200 {
                fail!("serve answered {} to GET {path}: {}", r.status, r.body.trim());
            }
            size = r.bytes.len();
        }
        let slowest = *times.iter().max().expect("timed at least once");
        out.push((median(times), slowest, size));
    }
    let _ = stop.send(());
    server.await??;
    Ok(out)
}

/// Hostile posts sent at once by [`serve_under_attack`].
pub(super) const HOSTILE: usize = 20;

pub(super) struct Attack {
    pub(super) idle_rss_kb: u64,
    pub(super) max_rss_kb: u64,
    /// Replies by status, e.g. `400×10, 413×10`.
    pub(super) statuses: String,
}

/// `hpc-ledger serve` as its own process, sent [`HOSTILE`] posts of 16 MB at
/// once — a quarter each: `POST /jobs` of `[0,0,0,…]` (issue 13's memory
/// bomb), jobcomp bodies with a 16 MB script and a malformed job, 16 MB of
/// bytes that are not UTF-8, and a job with a Latin-1 name and a 16 MB
/// Latin-1 script — and its peak RSS (VmHWM) read while it answers them.
pub(super) async fn serve_under_attack(setup: &Setup) -> Result<Attack> {
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
            fail!("serve did not answer /healthz within 30 s");
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
        // Each from an address of its own (127.0.0.2, …): one address holds
        // at most a quarter of the body budget, and the budget itself is
        // what is measured.
        let from = std::net::IpAddr::from([127, 0, 0, 2 + u8::try_from(i)?]);
        posts.push(tokio::spawn(async move {
            // A refused body is cut off while being sent: that is a reply too.
            match crate::serve::client::request_from(Some(from), addr, "POST", path, None, &body).await {
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
        fail!("serve did not exit 0 after SIGTERM");
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

pub(super) struct Run {
    pub(super) wall: Duration,
    pub(super) max_rss_kb: u64,
    pub(super) recorded: u64,
    pub(super) replayed: u64,
    pub(super) summary: String,
}

/// Stop the run unless an import recorded all its `jobs`.
pub(super) fn expect_recorded(run: &Run, jobs: u64) -> Result<()> {
    if run.recorded != jobs {
        fail!("the import recorded {} of {jobs} jobs: {}", run.recorded, run.summary);
    }
    Ok(())
}

/// `hpc-ledger import --format slurm FILE` as its own process, into the
/// database at `url`: wall time, peak RSS and the summary.
pub(super) fn import(setup: &Setup, url: &str, file: &Path) -> Result<Run> {
    let out_path = setup.dir.join("import.json");
    let out = std::fs::File::create(&out_path)?;
    let t = Instant::now();
    let child = Command::new(&setup.exe)
        .args(["import", "--format", "slurm", "--output", "json"])
        .arg(file)
        .env("DATABASE_URL", url)
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
        fail!("the import failed: {summary}");
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
pub(super) fn wait_watching_peak(pid: u32) -> Result<(bool, u64)> {
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
pub(super) fn vm_hwm_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
}

/// Reap child `pid`; whether it exited 0.
pub(super) fn wait_exit(pid: u32) -> Result<bool> {
    let pid = libc::pid_t::try_from(pid)?;
    let mut status = 0;
    // SAFETY: waitpid writes only the status out-parameter.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid {
        fail!("waiting for process {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// Median wall time of `calls` `job record` processes and of as many
/// `psql -c INSERT` of one row, interleaved so both see the same machine.
pub(super) async fn one_job(setup: &Setup, pool: &PgPool, month: Month, calls: u32) -> Result<(Duration, Duration)> {
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
            fail!("job record failed: {}", String::from_utf8_lossy(&out.stderr));
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
            fail!("psql failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    sqlx::raw_sql("DROP TABLE bench_one").execute(pool).await?;
    Ok((median(ours), median(theirs)))
}

fn run_with_stdin(cmd: &mut Command, input: &str) -> Result<std::process::Output> {
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

pub(super) async fn busiest_project(pool: &PgPool, month: Month) -> Result<String> {
    Ok(sqlx::query_scalar(
        "SELECT p.code FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.period = $1 AND e.kind = 'job' GROUP BY p.code ORDER BY count(*) DESC, p.code LIMIT 1",
    )
    .bind(month.first_day())
    .fetch_one(pool)
    .await?)
}

/// The project with the second most job charges in `month`, and an
/// instant after `since` strictly between the first and last draw of one of
/// its draw days (none when there is no such project or day).
pub(super) async fn second_busiest_project(
    pool: &PgPool,
    month: Month,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Option<(String, chrono::DateTime<chrono::Utc>)>> {
    Ok(sqlx::query_as(
        "WITH second AS (
             SELECT e.project_id FROM ledger_entry e
              WHERE e.period = $1 AND e.kind = 'job' GROUP BY e.project_id ORDER BY count(*) DESC, e.project_id
              LIMIT 1 OFFSET 1)
         SELECT p.code, d.first_at + (d.last_at - d.first_at) / 2
           FROM second s JOIN project p ON p.id = s.project_id
           JOIN ledger_draw d ON d.project_id = s.project_id
          WHERE d.first_at > $2 AND d.last_at - d.first_at > interval '1 minute'
          ORDER BY d.day, d.first_at LIMIT 1",
    )
    .bind(month.first_day())
    .bind(since)
    .fetch_optional(pool)
    .await?)
}

/// Median time of `calls` statements of one project (after one warm-up).
/// The median time of one project's usage report by user over `from..=to`
/// (`hpc-ledger usage`), over `calls` calls.
pub(super) async fn usage_time(
    pool: &PgPool,
    code: &str,
    from: Month,
    to: Month,
    calls: u32,
) -> Result<(Duration, usize)> {
    use crate::service::usage::{By, usage};
    let first = usage(pool, Some(code), from, to, By::User).await?;
    if first.rows.is_empty() {
        fail!("no usage for {code}");
    }
    let mut times = Vec::new();
    for _ in 0..calls.max(1) {
        let t = Instant::now();
        let u = usage(pool, Some(code), from, to, By::User).await?;
        times.push(t.elapsed());
        if u.rows.len() != first.rows.len() {
            fail!("the usage report changed under the bench");
        }
    }
    Ok((median(times), first.rows.len()))
}

/// The median time of one project's balance (`hpc-ledger balance`) after
/// granting it an allocation from `from` on, over `calls` calls; and the
/// amount it has used (drawn since `from`).
pub(super) async fn balance_time(
    pool: &PgPool,
    code: &str,
    from: chrono::DateTime<chrono::Utc>,
    calls: u32,
) -> Result<(Duration, rust_decimal::Decimal)> {
    use crate::service::budget;
    let window = crate::domain::rules::Dated {
        valid_from: from,
        valid_until: None,
        value: (),
    };
    budget::grant(
        pool,
        code,
        rust_decimal::Decimal::from(1_000_000_000),
        window,
        None,
        "bench",
        "bench",
    )
    .await?;
    let now = chrono::Utc::now();
    let first = budget::balance(pool, code, now).await?;
    let mut times = Vec::new();
    for _ in 0..calls.max(1) {
        let t = Instant::now();
        let b = budget::balance(pool, code, now).await?;
        times.push(t.elapsed());
        if b.balance.used != first.balance.used {
            fail!("the balance changed under the bench");
        }
    }
    Ok((median(times), first.balance.used))
}

pub(super) async fn statement_time(pool: &PgPool, month: Month, code: &str, calls: u32) -> Result<Duration> {
    let first = service::statement::statements(pool, month, Which::Project(code)).await?;
    if first.is_empty() {
        fail!("no statement for {code}");
    }
    let mut times = Vec::new();
    for _ in 0..calls.max(1) {
        let t = Instant::now();
        let s = service::statement::statements(pool, month, Which::Project(code)).await?;
        times.push(t.elapsed());
        if s.len() != first.len() {
            fail!("statements changed under the bench");
        }
    }
    Ok(median(times))
}
