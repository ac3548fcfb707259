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
