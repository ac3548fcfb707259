//! Nothing lost, nothing charged twice: imports killed at random points,
//! PostgreSQL stopped under an import, concurrent closes, and (ignored by
//! default, run by CI in release) eight importers racing over 100k jobs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use hpc_ledger::domain::period::Month;
use hpc_ledger::service::close::{close, close_through};
use hpc_ledger::service::storage::bill_through;
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::harness::{TestDb, cli_with_env, ok, stderr};

fn sacct(n: u64) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reliability");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-{n}.txt", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    hpc_ledger::synthetic::write_sacct(std::io::BufWriter::new(file), n, 100_000).unwrap();
    path
}

/// (jobs, records, entries, total) in the ledger.
async fn books(pool: &PgPool) -> (i64, i64, i64, Decimal) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM job_record), count(*), coalesce(sum(amount), 0)
           FROM ledger_entry",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// `hpc-ledger import --format slurm ARGS PATH` on `url`, in the background.
fn spawn_import(url: &str, args: &[&str], path: &Path, output: fn() -> Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_hpc-ledger"))
        .args(["import", "--format", "slurm"])
        .args(args)
        .arg(path)
        .env("DATABASE_URL", url)
        .env("HPC_LEDGER_LOG", "error")
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap()
}

/// Jobs recorded so far (cheap enough to poll).
async fn recorded(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// What one uninterrupted import of `path` posts, in a database of its own.
async fn reference(path: &Path) -> (i64, i64, i64, Decimal) {
    let db = TestDb::with_example().await;
    ok(&db.cli(&["import", "--format", "slurm", path.to_str().unwrap()]));
    books(&db.pool).await
}

#[tokio::test]
async fn an_import_killed_at_twenty_random_points_completes_on_a_rerun() {
    // Batches of 250 jobs, enough of them that twenty runs, each killed
    // after it has recorded at least one batch of its own, do not finish:
    // two batches are posted at once and the kill comes up to 30 ms after
    // the first, so a run may record three or four (8,000 jobs were all
    // recorded by the twentieth kill on a fast machine, 2026-12-05).
    let n = 24_000;
    let path = sacct(n);
    let want = reference(&path).await;
    assert_eq!(want.0, n as i64);
    let db = TestDb::with_example().await;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut progress: Vec<i64> = Vec::new();
    for _ in 0..20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let before = progress.last().copied().unwrap_or(0);
        let mut child = spawn_import(&db.url, &["--batch-size", "250"], &path, Stdio::null);
        // Past start-up and past the replays of what earlier runs recorded:
        // wait for this run's first new batch, then kill it at a random
        // moment of the next one (reading, pricing, inside its transaction
        // or committing it).
        while recorded(&db.pool).await <= before {
            assert!(child.try_wait().unwrap().is_none(), "the import ended early");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(x % 30)).await;
        assert!(child.try_wait().unwrap().is_none(), "the import ended before its kill");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        progress.push(recorded(&db.pool).await);
    }
    eprintln!("kills: jobs recorded after each of the 20: {progress:?}");
    assert!(
        *progress.last().unwrap() < n as i64,
        "the import finished under the kills: {progress:?}"
    );
    let out = ok(&db.cli(&[
        "import",
        "--format",
        "slurm",
        "--output",
        "json",
        path.to_str().unwrap(),
    ]));
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["recorded"].as_u64().unwrap() + s["replayed"].as_u64().unwrap(), n);
    // No job missing, none twice, the same money as one clean import.
    assert_eq!(books(&db.pool).await, want);
}

#[tokio::test]
async fn postgresql_stopped_during_an_import_is_a_clear_error_and_a_rerun_completes() {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let env = [("HPC_LEDGER_HOME", home.to_str().unwrap()), ("HPC_LEDGER_LOG", "error")];
    let example = crate::harness::example_path();
    ok(&cli_with_env(
        &["config", "apply", example.to_str().unwrap()],
        &env,
        None,
    ));
    let n = 30_000;
    let path = sacct(n);
    let mut child = Command::new(env!("CARGO_BIN_EXE_hpc-ledger"))
        .args(["import", "--format", "slurm", path.to_str().unwrap()])
        .env_remove("DATABASE_URL")
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the import finished before the server could be stopped"
    );
    let embedded = hpc_ledger::embedded::Embedded::locate(&home, Default::default()).unwrap();
    let stopped = Instant::now();
    assert!(embedded.stop().unwrap());
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the database could not record now") && err.contains("run the same command again"),
        "{err}"
    );
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "the import took {:?} to give up",
        stopped.elapsed()
    );
    // The next command starts the server again; the re-run completes.
    let out = ok(&cli_with_env(
        &[
            "import",
            "--format",
            "slurm",
            "--output",
            "json",
            path.to_str().unwrap(),
        ],
        &env,
        None,
    ));
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["recorded"].as_u64().unwrap() + s["replayed"].as_u64().unwrap(), n);
    let url = ok(&cli_with_env(&["db", "url"], &env, None));
    let pool = hpc_ledger::db::connect(url.trim()).await.unwrap();
    let (jobs, records, _, _) = books(&pool).await;
    assert_eq!((jobs, records), (n as i64, n as i64));
    pool.close().await;
    ok(&cli_with_env(&["db", "stop"], &env, None));
    let _ = std::fs::remove_dir_all(&home);
    let _ = stderr;
}

#[tokio::test]
async fn concurrent_closes_of_one_month_take_effect_once() {
    let db = TestDb::with_example().await;
    let m: Month = "2026-06".parse().unwrap();
    let billed = bill_through(&db.pool, m, "t", false, Utc::now()).await.unwrap();
    assert!(billed.stopped.is_none());
    let earlier = close_through(&db.pool, "2026-05".parse().unwrap(), "t", Utc::now())
        .await
        .unwrap();
    assert!(earlier.stopped.is_none());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move { close(&pool, m, "t", Utc::now()).await }));
    }
    let mut now = 0;
    for t in tasks {
        if t.await.unwrap().unwrap().closed_now {
            now += 1;
        }
    }
    assert_eq!(now, 1);
    let (closed, statements): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM closed_period WHERE period = '2026-06-01'),
                (SELECT count(*) FROM statement WHERE period = '2026-06-01')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((closed, statements), (1, 3));
}

/// `HPC_LEDGER_RACE_JOBS` jobs (default 100,000), eight importers at once.
#[tokio::test]
#[ignore = "heavy: run with `cargo test --test it -- --ignored` (CI does)"]
async fn eight_importers_of_the_same_input_charge_each_job_once() {
    let n: u64 = std::env::var("HPC_LEDGER_RACE_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let path = sacct(n);
    let started = Instant::now();
    let want = reference(&path).await;
    let single = started.elapsed();
    let db = TestDb::with_example().await;
    let started = Instant::now();
    let children: Vec<_> = (0..8)
        .map(|_| spawn_import(&db.url, &["--output", "json"], &path, Stdio::piped))
        .collect();
    let mut recorded = 0;
    let mut replayed = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(s["rejected"], serde_json::json!({}));
        recorded += s["recorded"].as_u64().unwrap();
        replayed += s["replayed"].as_u64().unwrap();
    }
    eprintln!(
        "race: {n} jobs, 8 importers: {recorded} recorded, {replayed} replayed in {:?} (one importer alone: {single:?})",
        started.elapsed()
    );
    assert_eq!((recorded, replayed), (n, 7 * n));
    assert_eq!(books(&db.pool).await, want);
}
