//! The shipped examples (examples/center.toml and examples/jobs/) charge
//! what the rules say, worked out by hand.

use std::path::Path;

use hpc_ledger::ingest::Format;
use hpc_ledger::service::import::Summary;

use crate::harness::{TestDb, import_file};

async fn import_example(db: &TestDb, file: &str, format: Format, cluster: Option<&str>) -> Summary {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs").join(file);
    import_file(&db.pool, &path, file, format, cluster).await
}

#[tokio::test]
async fn the_sample_jobs_cost_what_the_rules_say() {
    let db = TestDb::with_example().await;
    // owens (July card 0.012/core-hour, 4 GB per core; hugememory 0.015 at
    // 32 GB; gpu 0.01 + 0.20/GPU-hour):
    //   1001 1 core 2 h 0.02; 1002 12 GB = 3 cores 10 h 0.36; 1003 2 × 28
    //   cores 4 h 2.69; 1004 512 GB = 16 cores 24 h 5.76; 1005 8 cores +
    //   2 GPUs 6 h 0.48 + 2.40; 1006_0..2 0.01 each; 1009 2 cores 5 min 0.00;
    //   1010 4 cores 22:00 EDT -> 02:00 EST across the fall-back = 5 h 0.24.
    let s = import_example(&db, "owens-sacct.txt", Format::Slurm, None).await;
    assert_eq!(
        (s.recorded, s.rejected_total(), s.charged.to_string()),
        (10, 0, "11.98".into()),
        "{s:#?}"
    );
    // pitzer (regular 0.0125, gpu 0.011 + 0.25, hugememory 0.016 at 32 GB):
    //   5001 3 cores 1 h 0.04; 5002 12 GB = 3 cores 2 h 0.08; 5003 8 cores +
    //   2 GPUs 1 h 0.09 + 0.50; 5004 1500 GB = 46.875 cores 12 h 9.00;
    //   5005 4 × 40 cores 3 h 6.00; 5006 names an unknown project.
    let s = import_example(&db, "pitzer-accounting-202610.log", Format::Pbs, Some("pitzer")).await;
    assert_eq!(
        (s.recorded, s.rejected_total(), s.charged.to_string()),
        (5, 1, "15.71".into()),
        "{s:#?}"
    );
    //   2001 4 cores + 1 GPU 3 h 0.12 + 0.60; 2002 40 cores 8 h 4.00; 2003
    //   submitted on 30 June: June's 0.01, 10 cores 4 h 0.40; 2004 2 × 28
    //   cores + 4 GPUs 10 h 5.60 + 8.00.
    let s = import_example(&db, "jobs.jsonl", Format::Jsonl, None).await;
    assert_eq!(
        (s.recorded, s.rejected_total(), s.charged.to_string()),
        (4, 0, "18.72".into()),
        "{s:#?}"
    );
    let (period, wall): (chrono::NaiveDate, f64) = sqlx::query_as(
        "SELECT e.period, extract(epoch FROM r.ended_at - j.started_at)::float8 FROM ledger_entry e
           JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = '1010'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((period.to_string(), wall), ("2026-11-01".into(), 5.0 * 3600.0));
}

/// The demo, as a new user runs it: its sacct file imported a second time
/// is replayed whole, and the only rejection it leaves is the PBS sample's
/// own (the second import read the file without the readings `import`
/// uses, and job 1010's first record became a conflict telling the user to
/// supersede it).
#[tokio::test]
async fn the_demo_replays_its_sacct_file_whole_and_leaves_only_its_own_rejection() {
    let name = format!("hl_demo_{}", uuid::Uuid::new_v4().simple());
    let url = crate::harness::url_for("postgres");
    let o = crate::harness::cli_with_env(&["demo", "--database", &name], &[("DATABASE_URL", url.as_str())], None);
    let out = crate::harness::ok(&o);
    let demo = crate::harness::url_for(&name);
    let rejected = crate::harness::cli_with_env(
        &["rejected", "--format", "json"],
        &[("DATABASE_URL", demo.as_str())],
        None,
    );
    let rejected: serde_json::Value = serde_json::from_str(&crate::harness::ok(&rejected)).unwrap();
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
    assert!(
        out.contains("-- the same sacct file again: 0 recorded, 10 replayed"),
        "{out}"
    );
    let kept: Vec<&str> = rejected
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["source_ref"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kept.len(), 1, "{rejected:#}");
    assert!(
        kept[0].starts_with("examples/jobs/pitzer-accounting-202610.log:"),
        "{rejected:#}"
    );
}
