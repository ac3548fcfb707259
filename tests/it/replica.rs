//! Readers on a streaming replica (`--read-database-url`, docs/scaling.md):
//! a real hot standby made with `pg_basebackup -R` from an embedded primary
//! (`hpc-ledger db standby`). Statements, usage, verify and the audit read
//! it and agree with the primary once it has replayed; while its replay is
//! paused they show what it holds, not the primary's newer jobs; serve
//! records on the primary and draws its web pages from the replica.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hpc_ledger::embedded::{Embedded, Options as ClusterOptions};
use hpc_ledger::serve::client;
use hpc_ledger::serve::{Credentials, Metrics, Options, serve};
use sqlx::{Connection, PgConnection};

use crate::harness::{cli_with_env, ok, stdout};

fn home(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("replica-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Stops the clusters however the test ends.
struct Clusters(Vec<PathBuf>);

impl Drop for Clusters {
    fn drop(&mut self) {
        for home in &self.0 {
            let _ = cli_with_env(&["db", "stop"], &[("HPC_LEDGER_HOME", home.to_str().unwrap())], None);
        }
    }
}

/// Wait until the standby has replayed everything the primary has written.
/// The test cluster commits asynchronously (`fast`), so another session's
/// commit can still sit in the primary's WAL buffers, not yet written or
/// sent: the standby must reach the primary's insert position, not its
/// write position. (A durable commit here does not flush them: a
/// transaction that wrote no WAL but its commit record commits
/// asynchronously whatever `synchronous_commit` says. Waiting for the write
/// position, the standby showed a job the serve had just recorded 11 to
/// 68 ms after "catching up", on every run for a while.)
async fn caught_up(primary: &mut PgConnection, standby: &mut PgConnection) {
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(&mut *primary)
        .await
        .unwrap();
    crate::harness::until(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(50),
        async || {
            let done: bool = sqlx::query_scalar("SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)")
                .bind(&lsn)
                .fetch_one(&mut *standby)
                .await
                .unwrap();
            done.then_some(())
        },
    )
    .await
    .unwrap_or_else(|| panic!("the standby did not replay up to {lsn} in 30 s"));
}

/// The standby's SQL shows scheduler job `job` once (after `caught_up`: the
/// pages read from it depend on this).
async fn shown(standby: &mut PgConnection, job: &str) {
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM job WHERE scheduler_job_id = $1")
        .bind(job)
        .fetch_one(&mut *standby)
        .await
        .unwrap();
    assert_eq!(
        seen, 1,
        "the standby does not show job {job} once after replaying past its commit"
    );
}

const NEW_JOB: &str = r#"{"cluster": "owens", "job_id": "9901", "project": "PAS1234", "user": "ada", "job_name": "late-one", "queue": "batch", "cores": 2, "submit": "2026-11-10T08:00:00-05:00", "start": "2026-11-10T08:00:00-05:00", "end": "2026-11-10T10:00:00-05:00", "state": "COMPLETED"}"#;

#[tokio::test]
async fn readers_on_a_replica_see_what_it_replayed_and_writers_stay_on_the_primary() {
    let primary_home = home("primary");
    let standby_home = home("standby");
    let _clusters = Clusters(vec![standby_home.clone(), primary_home.clone()]);
    let primary = Embedded::locate(&primary_home, ClusterOptions { fast: true }).unwrap();
    primary.ensure_running().unwrap();
    let env = [("HPC_LEDGER_HOME", primary_home.to_str().unwrap())];
    let run = |args: &[&str]| ok(&cli_with_env(args, &env, None));
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    run(&["config", "apply", examples.join("center.toml").to_str().unwrap()]);
    let jobs = examples.join("jobs");
    run(&["import", "--format", "jsonl", jobs.join("jobs.jsonl").to_str().unwrap()]);
    run(&[
        "import",
        "--format",
        "slurm",
        jobs.join("owens-sacct.txt").to_str().unwrap(),
    ]);
    run(&["bill", "storage", "--through", "2026-10"]);
    run(&["close", "--through", "2026-10"]);

    // The standby: a base backup of the primary, started, its URL printed.
    let replica = run(&["db", "standby", standby_home.to_str().unwrap()])
        .trim()
        .to_owned();
    assert!(
        replica.starts_with("postgresql://postgres@localhost:5432/hpc_ledger?host=/"),
        "{replica}"
    );
    assert_ne!(replica, run(&["db", "url"]).trim());
    // The standby's own home answers `db url` and `db status` (it is not
    // migrated there: its primary migrates it).
    let standby_env = [("HPC_LEDGER_HOME", standby_home.to_str().unwrap())];
    assert_eq!(ok(&cli_with_env(&["db", "url"], &standby_env, None)).trim(), replica);
    assert!(ok(&cli_with_env(&["db", "status"], &standby_env, None)).starts_with("embedded PostgreSQL: running"));
    let mut standby = PgConnection::connect(&replica).await.unwrap();
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&mut standby)
        .await
        .unwrap();
    assert!(in_recovery, "a standby replays the primary's WAL");
    let mut primary_conn = PgConnection::connect(&primary.url("hpc_ledger")).await.unwrap();
    caught_up(&mut primary_conn, &mut standby).await;

    let on_replica = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--read-database-url", replica.as_str()]);
        cli_with_env(&all, &env, None)
    };
    // Once replayed, the replica's answers are the primary's.
    for args in [
        &["statement", "--all", "--month", "2026-10", "--format", "json"][..],
        &["usage", "--all", "--from", "2026-10", "--by", "user", "--format", "csv"],
        &["verify"],
    ] {
        assert_eq!(ok(&on_replica(args)), run(args), "{args:?}");
    }
    let october = run(&[
        "statement",
        "--project",
        "PAS1234",
        "--month",
        "2026-10",
        "--format",
        "json",
    ]);
    assert!(october.contains("\"status\": \"final\""), "{october}");
    // A standby exports a snapshot and another connection reads it: the
    // audit reads its two parts side by side there too.
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut standby)
        .await
        .unwrap();
    let id: String = sqlx::query_scalar("SELECT pg_export_snapshot()")
        .fetch_one(&mut standby)
        .await
        .unwrap();
    let mut beside = PgConnection::connect(&replica).await.unwrap();
    sqlx::raw_sql(&format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT '{id}'; ROLLBACK"
    ))
    .execute(&mut beside)
    .await
    .unwrap();
    sqlx::raw_sql("ROLLBACK").execute(&mut standby).await.unwrap();
    // The audit runs there too, and says what it could not compare.
    let audit = on_replica(&["audit", "--deep"]);
    assert_eq!(audit.status.code(), Some(0), "{}", stdout(&audit));
    assert!(
        stdout(&audit).starts_with("read on a streaming replica: ")
            && stdout(&audit).contains("every charge recomputed in SQL matches the ledger")
            && stdout(&audit).contains("every seal holds"),
        "{}",
        stdout(&audit)
    );
    assert!(!run(&["audit"]).contains("replica"));
    // A writer given the replica's URL for reading still writes the primary.
    let imported = cli_with_env(
        &[
            "import",
            "--format",
            "jsonl",
            "-",
            "--read-database-url",
            replica.as_str(),
        ],
        &env,
        Some(NEW_JOB),
    );
    assert!(stdout(&imported).contains("recorded:    1"), "{}", stdout(&imported));

    // Replay paused: the replica lags; what it shows is what it replayed.
    caught_up(&mut primary_conn, &mut standby).await;
    // And the import's job is visible there.
    shown(&mut standby, "9901").await;
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&mut standby)
        .await
        .unwrap();
    let mut state = String::new();
    crate::harness::until(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(50),
        async || {
            state = sqlx::query_scalar("SELECT pg_get_wal_replay_pause_state()")
                .fetch_one(&mut standby)
                .await
                .unwrap();
            (state == "paused").then_some(())
        },
    )
    .await;
    assert_eq!(state, "paused", "the standby's replay did not pause in 30 s");
    // serve: posts go to the primary, pages come from the replica.
    let primary_pool = hpc_ledger::db::connect(&primary.url("hpc_ledger")).await.unwrap();
    let replica_pool = hpc_ledger::db::connect(&replica).await.unwrap();
    let listener = hpc_ledger::serve::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve(
        primary_pool.clone(),
        listener,
        Options {
            credentials: Credentials::none(),
            checks: Credentials::none(),
            web: Credentials::none().with_token("billing-office-secret").unwrap(),
            reader: Some(replica_pool),
            max_batch: 10,
            supersede: false,
            author: "replica-test".into(),
            limits: hpc_ledger::serve::conn::Limits::default(),
            restart: None,
            intake: false,
            fold_every: hpc_ledger::service::FOLD_EVERY,
        },
        Arc::new(Metrics::new()),
        async {
            let _ = stopped.await;
        },
    ));
    let second = NEW_JOB.replace("\"9901\"", "\"9902\"");
    let posted = client::post(addr, "/jobs", None, second.as_bytes()).await.unwrap();
    assert_eq!(posted.status, 201, "{}", posted.body);
    let page = |addr| async move {
        let r = client::get_as(
            addr,
            "/ui/projects/PAS1234?month=2026-11",
            "Bearer billing-office-secret",
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    };
    // The job cells read `cluster/job id`; a bare "9902" could be part of
    // an amount or a hash elsewhere on the page.
    let before = page(addr).await;
    assert!(
        before.contains("owens/9901"),
        "the paused replica shows the job it replayed before the pause: {before}"
    );
    assert!(
        !before.contains("owens/9902"),
        "the paused replica does not show the job posted after the pause: {before}"
    );
    let november = [
        "usage",
        "--project",
        "PAS1234",
        "--from",
        "2026-11",
        "--by",
        "user",
        "--format",
        "csv",
    ];
    let lagging = ok(&on_replica(&november));
    let current = run(&november);
    assert_ne!(lagging, current);
    assert!(current.contains("PAS1234,ada,2,"), "{current}");
    assert!(lagging.contains("PAS1234,ada,1,"), "{lagging}");

    // Replay resumed: the replica catches up and agrees again.
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&mut standby)
        .await
        .unwrap();
    caught_up(&mut primary_conn, &mut standby).await;
    shown(&mut standby, "9902").await;
    assert!(page(addr).await.contains("owens/9902"));
    assert_eq!(ok(&on_replica(&november)), current);
    let _ = stop.send(());
    served.await.unwrap().unwrap();
    standby.close().await.unwrap();
    primary_conn.close().await.unwrap();
}
