//! Recording jobs from the real accounting records: counts, charges worked
//! out by hand, replays, conflicts, re-processing, and bad input.

use std::collections::BTreeMap;

use hpc_ledger::domain::posting::RejectKind;
use hpc_ledger::ingest::{Format, ReadOptions, Skip};
use hpc_ledger::service::import::{Input, Summary, import, retry_rejected};
use hpc_ledger::service::record::{RecordOptions, Recorder};
use rust_decimal::Decimal;
use serde_json::json;
use sqlx::PgPool;

use crate::fixtures::{fixture_db, import_fixture};
use crate::harness::{import_file, import_file_read};

struct Counts {
    headers: u64,
    recorded: u64,
    skipped: &'static [(Skip, u64)],
    rejected: &'static [(RejectKind, u64)],
}

fn check(name: &str, s: &Summary, want: Counts) {
    assert_eq!(s.recorded, want.recorded, "{name}: recorded\n{s:#?}");
    assert_eq!(
        s.skipped,
        want.skipped.iter().copied().collect::<BTreeMap<_, _>>(),
        "{name}: skipped\n{s:#?}"
    );
    assert_eq!(
        s.rejected,
        want.rejected.iter().copied().collect::<BTreeMap<_, _>>(),
        "{name}: rejected\n{s:#?}"
    );
    let skipped: u64 = want.skipped.iter().map(|(_, n)| n).sum();
    let rejected: u64 = want.rejected.iter().map(|(_, n)| n).sum();
    assert_eq!(
        s.lines,
        want.headers + want.recorded + skipped + rejected + s.replayed,
        "{name}: every line is accounted for"
    );
}

#[tokio::test]
async fn every_real_fixture_imports_with_the_expected_counts() {
    use RejectKind::*;
    use Skip::*;
    let cases: [(&str, Counts); 21] = [
        // 4 jobs; the last has no partition, 0 nodes, 0 CPUs and an AllocTRES of only `gres/gpu=2`.
        (
            "xdmod_slurm_sacct_parsable2_unit.log",
            Counts {
                headers: 0,
                recorded: 3,
                skipped: &[],
                rejected: &[(Malformed, 1)],
            },
        ),
        // 60 ended jobs on phillips and pozidriv.
        (
            "xdmod_slurm_sacct_parsable2_reference.log",
            Counts {
                headers: 0,
                recorded: 60,
                skipped: &[],
                rejected: &[],
            },
        ),
        // 5 array-range records and an unknown state are rejected; RUNNING
        // has not ended; PENDING (no start, read before its state) and BAR
        // never started.
        (
            "xdmod_slurm_sacct_parsable2_edgecases.log",
            Counts {
                headers: 0,
                recorded: 4,
                skipped: &[(NotEnded, 1), (NeverStarted, 2)],
                rejected: &[(Malformed, 6)],
            },
        ),
        // 4 jobs and their 4 .batch steps.
        (
            "apel_slurm_sacct_parsable2.log",
            Counts {
                headers: 0,
                recorded: 4,
                skipped: &[(Step, 4)],
                rejected: &[],
            },
        ),
        // 22 jobs (2 never started) and 23 steps. 7 ran in GPU partitions, yet
        // neither AllocTRES nor ReqTRES counts a GPU: not charged without them.
        (
            "hbjobinfo_habrok_sacct_snowman.txt",
            Counts {
                headers: 0,
                recorded: 13,
                skipped: &[(Step, 23), (NeverStarted, 1 + 1)],
                rejected: &[(Invalid, 7)],
            },
        ),
        // Slurm 22.05: 17 jobs, one cancelled before it started.
        (
            "slurm_2205_lab_sacct_header.txt",
            Counts {
                headers: 1,
                recorded: 16,
                skipped: &[(NeverStarted, 1)],
                rejected: &[],
            },
        ),
        // 9 E records. 10711 requests nothing readable (its node spec is
        // garbled into `nodect`): charged for the 28 slots of its exec_host.
        (
            "xdmod_pbs_torque_accounting_E.log",
            Counts {
                headers: 0,
                recorded: 9,
                skipped: &[],
                rejected: &[],
            },
        ),
        // 7 E records: two with the mangled `nodes=1pn=4` (read from exec_host),
        // and job 24940336 re-sent with a later end.
        (
            "apel_torque_accounting_E.log",
            Counts {
                headers: 0,
                recorded: 6,
                skipped: &[],
                rejected: &[(Conflict, 1)],
            },
        ),
        // 4 E records and 8 others (Q, D, A, R, S).
        (
            "hnormalise_torque_accounting.log",
            Counts {
                headers: 0,
                recorded: 4,
                skipped: &[(OtherRecord, 8)],
                rejected: &[],
            },
        ),
        // A real Slurm run of tests/slurm/e2e.sh: 27 jobs ran; job 10 was
        // cancelled before its --begin time (Start = End, no AllocTRES).
        (
            "slurm_2205_e2e_sacct_jobs.txt",
            Counts {
                headers: 1,
                recorded: 27,
                skipped: &[(NeverStarted, 1)],
                rejected: &[],
            },
        ),
        // The same Slurm 22.05 run's jobcomp/filetxt log: jobs 16-18, as slurmctld wrote them.
        (
            "slurm_2205_lab_jobcomp_filetxt.log",
            Counts {
                headers: 0,
                recorded: 3,
                skipped: &[],
                rejected: &[],
            },
        ),
        // tests/slurm/e2e.sh's jobcomp/filetxt phase: 6 jobs (an array of 2
        // tasks), a name and a directory with spaces; one cancelled pending.
        (
            "slurm_2205_e2e_jobcomp_filetxt.log",
            Counts {
                headers: 0,
                recorded: 6,
                skipped: &[(NeverStarted, 1)],
                rejected: &[],
            },
        ),
        // The same Slurm 22.05 run as `sacct --json`: 17 jobs, one cancelled before it started.
        (
            "slurm_2205_lab_sacct.json",
            Counts {
                headers: 0,
                recorded: 16,
                skipped: &[(NeverStarted, 1)],
                rejected: &[],
            },
        ),
        // An Oxford cluster's `sacct --parsable`: 10 jobs (4 with GPUs in
        // AllocGRES) and a step.
        (
            "safe_oxford_sacct_parsable_allocgres.log",
            Counts {
                headers: 1,
                recorded: 10,
                skipped: &[(Step, 1)],
                rejected: &[],
            },
        ),
        // Cirrus `sacct --parsable`: 5 jobs (3 still running) and 14 steps.
        (
            "safe_cirrus_sacct_parsable.log",
            Counts {
                headers: 1,
                recorded: 2,
                skipped: &[(Step, 14), (NotEnded, 3)],
                rejected: &[],
            },
        ),
        // FZK TORQUE: 8 E records (3 with the doubled `nodes=nodes=`), an S and a Q.
        (
            "safe_fzk_torque_doubled_nodes.log",
            Counts {
                headers: 0,
                recorded: 8,
                skipped: &[(OtherRecord, 2)],
                rejected: &[],
            },
        ),
        // HECToR: 6 Cray jobs sized by mppwidth.
        (
            "safe_hector_cray_mppwidth.log",
            Counts {
                headers: 0,
                recorded: 6,
                skipped: &[],
                rejected: &[],
            },
        ),
        // 5 records sized only by exec_host, DiRAC's Torque 6 record, and a
        // record of type `z` (PBS Pro's job suspended: no run ends).
        (
            "safe_pbs_no_resource_list.log",
            Counts {
                headers: 0,
                recorded: 6,
                skipped: &[(OtherRecord, 1)],
                rejected: &[],
            },
        ),
        // 3 E records and an R record; a D, an A, a reservation's Y, a
        // qalter's `a` and a C.
        (
            "ncar_pbsparse_casper_records.log",
            Counts {
                headers: 0,
                recorded: 4,
                skipped: &[(OtherRecord, 5)],
                rejected: &[],
            },
        ),
        // 3 E records, an R record (a run ended for a rerun: charged), a D and an A.
        (
            "ncar_pbspro_casper_accounting.log",
            Counts {
                headers: 0,
                recorded: 4,
                skipped: &[(OtherRecord, 2)],
                rejected: &[],
            },
        ),
        // PBS Pro 2025 (NCAR/qhist): 4 E records and the R record of a rerun
        // job's first run are charged; 13 Q and S records are skipped.
        (
            "ncar_qhist_casper_pbspro_2025.log",
            Counts {
                headers: 0,
                recorded: 5,
                skipped: &[(OtherRecord, 13)],
                rejected: &[],
            },
        ),
    ];
    for (name, want) in cases {
        let db = fixture_db().await;
        let s = import_fixture(&db, name, false).await;
        check(name, &s, want);
        // Every recorded job has its entries, and the books balance.
        let (jobs, without): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e WHERE e.job_record_id = r.id))
               FROM job_record r",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!((jobs, without), (s.recorded as i64, 0), "{name}");
        let total: Option<Decimal> = sqlx::query_scalar("SELECT sum(amount) FROM ledger_entry")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(total.unwrap_or_default(), s.charged, "{name}");
        let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(kept as u64, s.rejected_total(), "{name}: every rejection is kept");
    }
}

/// slurmctld's jobcomp/filetxt lines of jobs 16-18 say what sacct says of
/// the same runs: imported alone they charge the same quantities, and the
/// sacct dump imported after them finds each run recorded with that charge
/// (no second charge, no conflict); a filetxt log read as sacct output is
/// refused before anything is kept, naming the flag that reads it.
#[tokio::test]
async fn a_jobcomp_filetxt_log_charges_what_sacct_charges() {
    let by_sacct = fixture_db().await;
    import_fixture(&by_sacct, "slurm_2205_lab_sacct_header.txt", false).await;
    let db = fixture_db().await;
    let filetxt = crate::fixtures::stripped("slurm_2205_lab_jobcomp_filetxt.log");
    let o = db.cli(&["import", "--format", "slurm", filetxt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        crate::harness::stderr(&o).contains("this looks like a Slurm jobcomp/filetxt log, not sacct --parsable2 output: read it with --format jobcomp-filetxt"),
        "{}",
        crate::harness::stderr(&o)
    );
    let summary = import_filetxt(&db, &filetxt, 0);
    assert_eq!(summary["recorded"], 3, "{summary}");
    for job in ["16", "17", "18"] {
        let filetxt = charges(&db.pool, "testclu", job, None).await;
        assert!(!filetxt.is_empty(), "job {job}");
        assert_eq!(
            filetxt,
            charges(&by_sacct.pool, "testclu", job, None).await,
            "job {job}"
        );
    }
    // Job 18: 2 nodes × 4 cores and 4 GPUs for 2 s.
    assert_eq!(
        charges(&db.pool, "testclu", "18", None).await,
        lines(&[
            ("core_hours", "0.004444444444", "0.00"),
            ("gpu_hours", "0.002222222222", "0.00")
        ])
    );
    // Each kept line, read again, says what the ledger stores.
    let deep = hpc_ledger::service::deep::deep_audit(&db.pool).await.unwrap();
    assert_eq!(
        (deep.records, deep.differences_found),
        (3, 0),
        "{:#?}",
        deep.differences
    );
    let s = import_fixture(&db, "slurm_2205_lab_sacct_header.txt", false).await;
    assert_eq!((s.recorded, s.replayed + s.revised), (13, 3), "{s:#?}");
    assert!(s.rejected.is_empty(), "{s:#?}");
    let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let sacct_entries: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&by_sacct.pool)
        .await
        .unwrap();
    assert_eq!(entries, sacct_entries);
}

/// Slurm before 24.05.2 cut a jobcomp/filetxt record over 1,023 bytes there,
/// without its newline, and wrote the next job's line after it; a job name
/// or directory padded to that length makes the same line of one job (the
/// "next job" the user's text, with the real job's tail). Neither part is
/// charged on a guess: both are kept as malformed, saying why, also after
/// a retry (read as one record, the line was charged to the next job's
/// project, with no rejection); the line after is read as usual.
#[tokio::test]
async fn a_filetxt_line_slurm_cut_is_kept_and_not_charged_on_a_guess() {
    let text = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_lab_jobcomp_filetxt.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let long = lines[1].replace(
        "WorkDir=/srv/slurm-lab/jobs",
        &format!("WorkDir=/srv/{}", "deep/".repeat(150)),
    );
    let cut = hpc_ledger::ingest::filetxt::SLURM_CUT;
    assert!(long.len() > cut);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("filetxt-cut-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("slurm_jobcomp.log");
    std::fs::write(&log, format!("{}{}\n{}\n", &long[..cut], lines[2], lines[0])).unwrap();
    let db = fixture_db().await;
    let summary = import_filetxt(&db, &log, 4);
    assert_eq!(
        (summary["lines"].as_u64(), summary["recorded"].as_u64()),
        (Some(3), Some(1)),
        "{summary}"
    );
    let kept = || async {
        sqlx::query_as::<_, (String, String, Option<String>)>(
            "SELECT source_ref, reason, job_key FROM rejected_record ORDER BY id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let first = kept().await;
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first.iter().all(|k| k.0.ends_with("slurm_jobcomp.log:1")), "{first:?}");
    assert!(first[0].1.starts_with("cut by Slurm at 1,023 bytes"), "{first:?}");
    assert!(
        first[1].1.starts_with("follows, on the same line, a record cut"),
        "{first:?}"
    );
    // The cut one's cluster was after the cut: the job, on a cluster the
    // line no longer names; the one after names its own.
    assert_eq!(first[0].2.as_deref(), Some("?/16"), "{first:?}");
    assert_eq!(first[1].2.as_deref(), Some("testclu/18"), "{first:?}");
    // Job 17, on the line after, charged as its own line charges it.
    let alone = fixture_db().await;
    import_fixture(&alone, "slurm_2205_lab_jobcomp_filetxt.log", false).await;
    let got = charges(&db.pool, "testclu", "17", None).await;
    assert!(!got.is_empty());
    assert_eq!(got, charges(&alone.pool, "testclu", "17", None).await);
    // A retry charges neither, and says the same.
    let o = db.cli(&["import", "--retry-rejected"]);
    assert_eq!(o.status.code(), Some(4), "{}", crate::harness::stderr(&o));
    for job in ["16", "18"] {
        assert!(charges(&db.pool, "testclu", job, None).await.is_empty(), "job {job}");
    }
    let reasons: Vec<String> = kept().await.into_iter().map(|k| k.1).collect();
    assert_eq!(reasons, first.iter().map(|k| k.1.clone()).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `import --format jobcomp-filetxt --output json FILE`: its summary, the
/// command having exited `code`.
fn import_filetxt(db: &crate::harness::TestDb, file: &std::path::Path, code: i32) -> serde_json::Value {
    let o = db.cli(&[
        "import",
        "--format",
        "jobcomp-filetxt",
        "--output",
        "json",
        file.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(code), "{}", crate::harness::stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The entries of a job: (metric, quantity, amount), ordered.
async fn charges(pool: &PgPool, cluster: &str, job: &str, array: Option<i32>) -> Vec<(String, String, String)> {
    sqlx::query_as::<_, (String, Decimal, Decimal)>(
        "SELECT e.metric, e.quantity, e.amount FROM ledger_entry e
           JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id JOIN cluster c ON c.id = j.cluster_id
          WHERE c.name = $1 AND j.scheduler_job_id = $2 AND j.array_index IS NOT DISTINCT FROM $3 AND e.kind = 'job'
          ORDER BY e.metric, e.id",
    )
    .bind(cluster)
    .bind(job)
    .bind(array)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(m, q, a)| (m, q.normalize().to_string(), format!("{a:.2}")))
    .collect()
}

fn lines(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

#[tokio::test]
async fn sample_charges_worked_out_by_hand() {
    let db = fixture_db().await;
    for f in [
        "xdmod_slurm_sacct_parsable2_unit.log",
        "xdmod_slurm_sacct_parsable2_reference.log",
        "hbjobinfo_habrok_sacct_snowman.txt",
        "slurm_2205_lab_sacct_header.txt",
        "xdmod_pbs_torque_accounting_E.log",
        "apel_torque_accounting_E.log",
        "hnormalise_torque_accounting.log",
        "ncar_pbspro_casper_accounting.log",
    ] {
        import_fixture(&db, f, false).await;
    }
    let p = &db.pool;
    // ub-hpc 4103947: 32 nodes × 12 cores = 384 (more than its 256 CPUs), 3 days
    // = 72 h: 27648 core-hours × 0.01.
    assert_eq!(
        charges(p, "ub-hpc", "4103947", None).await,
        lines(&[("core_hours", "27648", "276.48")])
    );
    // phillips 165381: 8 nodes × 8 = 64 cores, 432026 s: 64 × 432026 / 3600.
    assert_eq!(
        charges(p, "phillips", "165381", None).await,
        lines(&[("core_hours", "7680.462222222222", "76.80")])
    );
    // phillips 163485 (focaccia -> gpu): 12 cores (31000 MB / 8 GB = 3.78 is
    // fewer) and 2 GPUs for 912426 s: 3041.42 × 0.02 = 60.8284; 506.903333… × 0.50 = 253.4516….
    assert_eq!(
        charges(p, "phillips", "163485", None).await,
        lines(&[
            ("core_hours", "3041.42", "60.83"),
            ("gpu_hours", "506.903333333333", "253.45")
        ])
    );
    // pozidriv 983936: 1 CPU but 70000 MB / 4096 MB = 17.08984375 effective
    // cores, 566038 s: 2687.083604600694 core-hours.
    assert_eq!(
        charges(p, "pozidriv", "983936", None).await,
        lines(&[("core_hours", "2687.083604600694", "26.87")])
    );
    // habrok 2344446_26: 24 CPUs on 2 nodes -> 2 × 128 whole-node cores;
    // 05:10:35 -> 11:44:17 CEST = 23622 s.
    assert_eq!(
        charges(p, "habrok", "2344446", Some(26)).await,
        lines(&[("core_hours", "1679.786666666667", "16.80")])
    );
    // habrok 7965768 (gpulong): 8 cores, 1 GPU, 55702 s.
    assert_eq!(
        charges(p, "habrok", "7965768", None).await,
        lines(&[
            ("core_hours", "123.782222222222", "2.48"),
            ("gpu_hours", "15.472777777778", "7.74")
        ])
    );
    // testclu 18: 2 nodes × 4 cores and 4 GPUs for 2 s.
    assert_eq!(
        charges(p, "testclu", "18", None).await,
        lines(&[
            ("core_hours", "0.004444444444", "0.00"),
            ("gpu_hours", "0.002222222222", "0.00")
        ])
    );
    // edge 6.edge.ccr.buffalo.edu: nodes=4:ppn=8 for 2197 s.
    assert_eq!(
        charges(p, "edge", "6.edge.ccr.buffalo.edu", None).await,
        lines(&[("core_hours", "19.528888888889", "0.20")])
    );
    // edge 2994.pbs: select=5:ncpus=13, place=scatter:excl on 8-core nodes: 65 cores, 156 s.
    assert_eq!(
        charges(p, "edge", "2994.pbs", None).await,
        lines(&[("core_hours", "2.816666666667", "0.03")])
    );
    // casper 4413086 (vis -> gpu): 10 GB / 8 GB = 1.25 cores and 1 GPU for 3330 s.
    assert_eq!(
        charges(p, "casper", "4413086.casper-pbs", None).await,
        lines(&[("core_hours", "1.15625", "0.02"), ("gpu_hours", "0.925", "0.46")])
    );
    // ral 21048463: pmem 4000 MB on 1 core (0.977 effective cores), 24159 s.
    assert_eq!(
        charges(p, "ral", "21048463.lcgbatch01.gridpp.rl.ac.uk", None).await,
        lines(&[("core_hours", "6.710833333333", "0.07")])
    );
    // vsc 268279: nodes=2:ppn=20 on 20-core nodes, 43175 s; account lt1_2017-43.
    assert_eq!(
        charges(p, "vsc", "268279.master21.swalot.gent.vsc", None).await,
        lines(&[("core_hours", "479.722222222222", "4.80")])
    );
    let project: String = sqlx::query_scalar(
        "SELECT p.code FROM job_record r JOIN job j ON j.id = r.job_id JOIN project p ON p.id = r.project_id
          WHERE j.scheduler_job_id = '268279.master21.swalot.gent.vsc'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(project, "lt1_2017-43");
    // Jobs are posted to the month they ended in: 165381 ran over New Year.
    let period: chrono::NaiveDate = sqlx::query_scalar(
        "SELECT e.period FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '165381'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(period.to_string(), "2017-01-01");
}

async fn entry_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn importing_the_same_records_again_changes_nothing() {
    let db = fixture_db().await;
    let first = import_fixture(&db, "xdmod_slurm_sacct_parsable2_reference.log", false).await;
    let entries = entry_count(&db.pool).await;
    let again = import_fixture(&db, "xdmod_slurm_sacct_parsable2_reference.log", false).await;
    assert_eq!((first.recorded, again.recorded, again.replayed), (60, 0, 60));
    assert_eq!(entry_count(&db.pool).await, entries);
    // The steps file holds the same jobs: all replays.
    import_fixture(&db, "slurm_2205_lab_sacct_header.txt", false).await;
    let steps = import_fixture(&db, "slurm_2205_lab_sacct_steps_header.txt", false).await;
    assert_eq!(
        (steps.recorded, steps.replayed, steps.skipped[&Skip::Step]),
        (0, 16, 22)
    );
}

#[tokio::test]
async fn a_changed_record_is_a_conflict_until_superseded() {
    let db = fixture_db().await;
    // The unit file's 4103947 held 32 nodes; the edge-case file re-sends the
    // same run (same cluster, id, submit and start) holding 1 node.
    import_fixture(&db, "xdmod_slurm_sacct_parsable2_unit.log", false).await;
    let s = import_fixture(&db, "xdmod_slurm_sacct_parsable2_edgecases.log", false).await;
    assert_eq!(s.rejected[&RejectKind::Conflict], 1, "{s:#?}");
    let example = s.examples.iter().find(|e| e.contains("conflicts")).unwrap();
    assert!(
        example.contains("(ub-hpc/4103947): conflicts with the job already recorded (nodes 32 -> 1, cores 256 -> 8)"),
        "{example}"
    );
    assert!(example.contains("record it again with --supersede"), "{example}");
    assert_eq!(
        charges(&db.pool, "ub-hpc", "4103947", None).await,
        lines(&[("core_hours", "27648", "276.48")])
    );

    // Superseding reverses the old charge exactly and posts the new one.
    let mut recorder = Recorder::new(
        db.pool.clone(),
        RecordOptions {
            supersede: true,
            author: "billing".into(),
        },
    );
    let mut s = Summary::default();
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    // The malformed lines of both files stay rejected.
    assert_eq!(
        (s.superseded, s.rejected_total(), s.rejected[&RejectKind::Malformed]),
        (1, 7, 7),
        "{s:#?}"
    );
    let net: Vec<(String, Decimal)> = sqlx::query_as(
        "SELECT e.kind, sum(e.amount) FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
           JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = '4103947' AND j.array_index IS NULL
          GROUP BY e.kind ORDER BY e.kind",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // Old charge 276.48; new: 8 cores (3000 MB is fewer) for 72 h = 576
    // core-hours = 5.76; the reversal takes back exactly the old 276.48.
    let net: Vec<(String, String)> = net.into_iter().map(|(k, a)| (k, a.to_string())).collect();
    assert_eq!(
        net,
        [
            ("job".to_string(), "282.24".to_string()),
            ("reversal".into(), "-276.48".into())
        ]
    );
    assert_eq!(
        charges(&db.pool, "ub-hpc", "4103947", None).await,
        lines(&[("core_hours", "27648", "276.48"), ("core_hours", "576", "5.76")])
    );
    let linked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_entry r JOIN ledger_entry o ON o.id = r.corrects_id
          JOIN job_record nr ON nr.id = r.job_record_id
         WHERE r.kind = 'reversal' AND nr.kind = 'supersede' AND o.amount = -r.amount",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(linked, 1);
    let resolved: String = sqlx::query_scalar("SELECT resolution FROM rejected_record WHERE kind = 'conflict'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(resolved, "superseded");
    // Superseding again is a replay, not a second reversal.
    let mut s = Summary::default();
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    assert_eq!((s.lines, s.superseded, s.replayed), (7, 0, 0));
    let again = import_fixture(&db, "xdmod_slurm_sacct_parsable2_edgecases.log", true).await;
    assert_eq!((again.superseded, again.replayed), (0, 4));
}

/// Write JSON lines to a file and import them.
async fn import_jsonl(pool: &PgPool, name: &str, text: &str, supersede: bool) -> Summary {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let mut recorder = Recorder::new(
        pool.clone(),
        RecordOptions {
            supersede,
            author: "tester".into(),
        },
    );
    let mut s = Summary::default();
    import(
        &mut recorder,
        std::fs::File::open(&path).unwrap(),
        &Input::new(name, Format::Jsonl, &ReadOptions::default()),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    s
}

/// A job the database cannot take now (its run's key held by another
/// writer's open transaction, waited for past `lock_timeout`) does not stop
/// the jobs after it. A failed batch is recorded job by job, and the first
/// such job ended it there: `serve --intake`, which tries the same oldest
/// documents again, recorded no job posted after one that failed so every
/// time. The others are recorded, the error is reported, and the held job
/// is recorded when it comes again.
#[tokio::test]
async fn a_job_the_database_cannot_take_now_does_not_stop_the_others() {
    let db = fixture_db().await;
    crate::harness::lock_timeout_200ms(&db.pool).await;
    // A writer holds job 500's run: inserted, not committed.
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO job (cluster_id, scheduler_job_id, submitted_at, started_at)
         SELECT id, '500', '2026-10-01T10:00:00Z', '2026-10-01T10:00:00Z' FROM cluster WHERE name = 'testclu'",
    )
    .execute(&mut *holder)
    .await
    .unwrap();
    // Sessions that begin now wait 200 ms for a lock.
    let pool = PgPool::connect(&db.url).await.unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-not-now.jsonl", std::process::id()));
    std::fs::write(
        &path,
        [job("500", json!({})), job("501", json!({})), job("502", json!({}))].join("\n"),
    )
    .unwrap();
    let import_it = |pool: PgPool| {
        let path = path.clone();
        async move {
            let mut recorder = Recorder::new(pool, RecordOptions::by("tester"));
            let mut s = Summary::default();
            let r = import(
                &mut recorder,
                std::fs::File::open(&path).unwrap(),
                &Input::new("not-now.jsonl", Format::Jsonl, &ReadOptions::default()),
                &mut s,
                &|_| {},
            )
            .await;
            (r, s)
        }
    };
    let (r, _) = import_it(pool.clone()).await;
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("the database could not record now") && e.contains("lock timeout"),
        "{e}"
    );
    let charged = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT j.scheduler_job_id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
               JOIN job j ON j.id = r.job_id WHERE e.kind = 'job' ORDER BY 1",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    assert_eq!(charged().await, ["501", "502"]);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 0);
    holder.rollback().await.unwrap();
    let (r, s) = import_it(pool).await;
    r.unwrap();
    assert_eq!((s.recorded, s.replayed, s.rejected_total()), (1, 2, 0), "{s:#?}");
    assert_eq!(charged().await, ["500", "501", "502"]);
}

/// A JSON job on testclu, with fields replaced (or removed, when null).
fn job(id: &str, overrides: serde_json::Value) -> String {
    let mut j = serde_json::json!({
        "cluster": "testclu", "job_id": id, "project": "PAS1234", "queue": "regular", "cores": 2,
        "submit": "2026-10-01T10:00:00Z", "start": "2026-10-01T10:00:00Z", "end": "2026-10-01T12:00:00Z"
    });
    for (k, v) in overrides.as_object().unwrap() {
        if v.is_null() {
            j.as_object_mut().unwrap().remove(k);
        } else {
            j[k] = v.clone();
        }
    }
    j.to_string()
}

#[tokio::test]
async fn bad_input_of_every_kind_is_rejected_with_where_and_why() {
    let db = fixture_db().await;
    let mut text = String::new();
    for l in [
        job("1", json!({})),
        job("2", json!({"cluster": "nowhere"})),
        job("3", json!({"project": "NOPE"})),
        job("4", json!({"queue": "debug"})),
        job("5", json!({"submit": "1999-01-01T00:00:00Z"})),
        job("6", json!({"end": "2026-10-01T09:00:00Z"})),
        job("7", json!({"cores": 0})),
        job("8", json!({"gpus": 99_999_999})),
        job("9", json!({"end": "2099-01-01T00:00:00Z"})),
        "{not json".to_owned(),
        job("10", json!({"memory": "lots"})),
        job("11", json!({"start": "2026-10-01T11:00:00Z", "submit": null})),
    ] {
        text.push_str(&l);
        text.push('\n');
    }
    let s = import_jsonl(&db.pool, "bad.jsonl", &text, false).await;
    assert_eq!(s.recorded, 2, "{s:#?}");
    let want = [
        "bad.jsonl:2 (nowhere/2): unknown cluster \"nowhere\"",
        "bad.jsonl:3 (testclu/3): unknown project \"NOPE\"",
        "bad.jsonl:4 (testclu/4): unknown queue \"debug\" on cluster testclu",
        "bad.jsonl:5 (testclu/5): no rate card for node type \"regular\" on cluster testclu is in force at 1999-01-01 00:00:00 UTC (the job's submit time)",
        "bad.jsonl:6 (testclu/6): it ends at 2026-10-01 09:00:00 UTC, before it starts at 2026-10-01 10:00:00 UTC",
        "bad.jsonl:7 (testclu/7): the job holds no cores",
        "bad.jsonl:8 (testclu/8): the job holds 99999999 GPUs, more than the limit of 10000000",
        "bad.jsonl:9 (testclu/9): it ends at 2099-01-01 00:00:00 UTC, in the future",
        "bad.jsonl:10: key must be a string",
        "bad.jsonl:11: memory: \"lots\" is not a size",
    ];
    for w in want {
        assert!(
            s.examples.iter().any(|e| e.starts_with(w)),
            "missing {w:?} in {:#?}",
            s.examples
        );
    }
    assert_eq!(s.rejected_total(), 10);
    // Job 11 is job 1's run started an hour later: a different run.
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM job")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 2);
    // Kept with the reason, for re-processing.
    let kinds: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, count(*) FROM rejected_record GROUP BY kind ORDER BY kind")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        kinds,
        [
            ("invalid", 4),
            ("malformed", 2),
            ("no_rate_card", 1),
            ("unknown_cluster", 1),
            ("unknown_project", 1),
            ("unknown_queue", 1)
        ]
        .map(|(k, n)| (k.to_string(), n))
    );
    // Damaged lines: not UTF-8 (read as U+FFFD, so not JSON here, the bytes
    // kept) and a line longer than 1 MiB.
    let mut bytes = job("12", json!({})).into_bytes();
    bytes.extend(b"\n\xff\xfe\n");
    bytes.extend(vec![b' '; (1 << 20) + 5]);
    bytes.push(b'\n');
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    let path = dir.join(format!("{}-binary.jsonl", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    import(
        &mut recorder,
        std::fs::File::open(&path).unwrap(),
        &Input::new("binary.jsonl", Format::Jsonl, &ReadOptions::default()),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(s.recorded, 1);
    assert_eq!(s.examples.len(), 2, "{:#?}", s.examples);
    assert!(
        s.examples[0].starts_with("binary.jsonl:2: expected value at line 1 column 1"),
        "{:#?}",
        s.examples
    );
    assert_eq!(s.examples[1], "binary.jsonl:3: the line is longer than 1048576 bytes");
    let (raw, bytes): (String, Option<Vec<u8>>) =
        sqlx::query_as("SELECT raw, raw_bytes FROM rejected_record WHERE source_ref = 'binary.jsonl:2'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (raw.as_str(), bytes.as_deref()),
        ("\u{FFFD}\u{FFFD}", Some(&b"\xff\xfe"[..]))
    );
}

#[tokio::test]
async fn rejected_records_are_recorded_once_the_cause_is_fixed() {
    let db = fixture_db().await;
    let text = format!(
        "{}\n{}\n",
        job("1", json!({"project": "NEWPROJ"})),
        job("2", json!({"queue": "bigmem"}))
    );
    let s = import_jsonl(&db.pool, "later.jsonl", &text, false).await;
    assert_eq!(s.rejected_total(), 2);
    // Re-processing before the fix changes nothing.
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    assert_eq!((s.recorded, s.rejected_total()), (0, 2));
    let seen: i32 = sqlx::query_scalar("SELECT max(times_seen) FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(seen, 2);
    // The billing office adds the project and the queue.
    let fixed = format!(
        "{}\n[[project]]\ncode = \"NEWPROJ\"\n",
        crate::fixtures::CENTER.replace(
            "hugemem = \"hugememory\"",
            "hugemem = \"hugememory\"\nbigmem = \"hugememory\""
        )
    );
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&fixed).unwrap(), "t")
        .await
        .unwrap();
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    assert_eq!((s.recorded, s.rejected_total()), (2, 0), "{s:#?}");
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(open, 0);
    // bigmem is a hugememory queue: 2 cores × 2 h × 0.03.
    assert_eq!(
        charges(&db.pool, "testclu", "2", None).await,
        lines(&[("core_hours", "4", "0.12")])
    );
}

/// `import` posts two batches at once. Each of 30 jobs sent three times in
/// a row, each time holding one more core, in batches of one line: the
/// batches that name a job are posted in the file's order, so with
/// `--supersede` its revisions are its lines in order and its charge is its
/// last line's, whatever the other batches beside them do. (With the check
/// of the batch in flight taken out, this failed 3 runs of 3.)
#[tokio::test]
async fn batches_posted_at_once_keep_the_files_order_for_each_job() {
    let db = fixture_db().await;
    let mut text = String::new();
    for n in 0..30 {
        for cores in [1, 2, 3] {
            text.push_str(&job(&format!("r{n}"), json!({"cores": cores})));
            text.push('\n');
        }
        text.push_str(&job(&format!("other{n}"), json!({})));
        text.push('\n');
        if n % 10 == 0 {
            text.push_str(&job(&format!("bad{n}"), json!({"cores": "many"})));
            text.push('\n');
        }
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-in-order.jsonl", std::process::id()));
    std::fs::write(&path, &text).unwrap();
    let mut recorder = Recorder::new(
        db.pool.clone(),
        RecordOptions {
            supersede: true,
            author: "tester".into(),
        },
    );
    let mut s = Summary::default();
    let options = ReadOptions::default();
    let how = Input {
        batch_size: 1,
        ..Input::new("in-order.jsonl", Format::Jsonl, &options)
    };
    import(
        &mut recorder,
        std::fs::File::open(&path).unwrap(),
        &how,
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (s.lines, s.recorded, s.superseded, s.rejected_total()),
        (123, 60, 60, 3),
        "{s:#?}"
    );
    // Every revision holds its line's cores, in the file's order.
    let out_of_order: Vec<(String, i32, i32)> = sqlx::query_as(
        "SELECT j.scheduler_job_id, r.revision, r.cores FROM job_record r JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id LIKE 'r%' AND r.cores <> r.revision
          ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(out_of_order, []);
    // Each job's charges net to its last line's: 3 cores × 2 h at 0.01 =
    // 0.06, and each other job's 2 cores × 2 h = 0.04, once.
    let net: Vec<(String, Decimal, i64)> = sqlx::query_as(
        "SELECT left(j.scheduler_job_id, 1), sum(e.amount), count(DISTINCT j.id)
           FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let net: Vec<(String, String, i64)> = net.into_iter().map(|(k, a, n)| (k, a.to_string(), n)).collect();
    assert_eq!(
        net,
        [
            ("o".to_string(), "1.20".to_string(), 30),
            ("r".into(), "1.80".into(), 30)
        ]
    );
    // The rejections are listed in the file's order.
    let lines: Vec<&str> = s.examples.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(lines, ["in-order.jsonl:5", "in-order.jsonl:46", "in-order.jsonl:87"]);
}

#[tokio::test]
async fn a_failure_in_the_middle_of_a_batch_leaves_no_partial_job() {
    let db = fixture_db().await;
    // A database-side failure while posting job 2, after its run row and its
    // record were inserted: a trigger (this test's own) refuses its entries.
    sqlx::raw_sql(
        "CREATE FUNCTION test_boom() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF EXISTS (SELECT 1 FROM new_entries n JOIN job_record r ON r.id = n.job_record_id WHERE r.job_name = 'boom') THEN
             RAISE EXCEPTION 'boom: the disk is full';
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER test_boom AFTER INSERT ON ledger_entry REFERENCING NEW TABLE AS new_entries
           FOR EACH STATEMENT EXECUTE FUNCTION test_boom();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let text = format!(
        "{}\n{}\n{}\n",
        job("1", json!({})),
        job("2", json!({"job_name": "boom"})),
        job("3", json!({}))
    );
    let s = import_jsonl(&db.pool, "boom.jsonl", &text, false).await;
    assert_eq!((s.recorded, s.rejected[&RejectKind::Database]), (2, 1), "{s:#?}");
    assert!(
        s.examples[0].starts_with(
            "boom.jsonl:2 (testclu/2): the database refused it: error returned from database: boom: the disk is full"
        ),
        "{:?}",
        s.examples
    );
    let (jobs, records, entries): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job WHERE scheduler_job_id = '2'),
                (SELECT count(*) FROM job_record), (SELECT count(*) FROM ledger_entry)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((jobs, records, entries), (0, 2, 2));
    // A NUL character never reaches the database: a clear rejection.
    let s = import_jsonl(
        &db.pool,
        "nul.jsonl",
        &format!("{}\n", job("4", json!({"job_name": "a\u{0}b"}))),
        false,
    )
    .await;
    assert_eq!(
        s.examples,
        ["nul.jsonl:1 (testclu/4): the job name contains a NUL character"]
    );
}

#[tokio::test]
async fn concurrent_importers_charge_each_job_exactly_once() {
    let db = fixture_db().await;
    let mut text = String::new();
    for i in 0..3000 {
        let (queue, extra) = match i % 4 {
            0 => ("regular", String::new()),
            1 => ("hugemem", r#","memory":"40GB""#.to_owned()),
            2 => ("gpu", r#","gpus":2"#.to_owned()),
            _ => ("regular", r#","nodes":2"#.to_owned()),
        };
        text.push_str(&format!(
            r#"{{"cluster":"testclu","job_id":"{i}","project":"{}","queue":"{queue}","cores":2,"start":"2026-10-02T00:00:00Z","end":"2026-10-02T0{}:00:00Z"{extra}}}"#,
            if i % 2 == 0 { "PAS1234" } else { "PZS0001" },
            1 + i % 9
        ));
        text.push('\n');
    }
    let single = {
        let other = fixture_db().await;
        import_jsonl(&other.pool, "single.jsonl", &text, false).await.charged
    };
    let mut tasks = Vec::new();
    for n in 0..4 {
        let pool = db.pool.clone();
        let text = text.clone();
        tasks.push(tokio::spawn(async move {
            import_jsonl(&pool, &format!("race{n}.jsonl"), &text, false).await
        }));
    }
    let mut recorded = 0;
    let mut replayed = 0;
    for t in tasks {
        let s = t.await.unwrap();
        assert_eq!(s.rejected_total(), 0, "{s:#?}");
        recorded += s.recorded;
        replayed += s.replayed;
    }
    assert_eq!((recorded, replayed), (3000, 9000));
    let (jobs, entries, total): (i64, i64, Decimal) =
        sqlx::query_as("SELECT (SELECT count(*) FROM job), count(*), sum(amount) FROM ledger_entry")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((jobs, entries), (3000, 3750));
    assert_eq!(total, single);
}

#[tokio::test]
async fn a_job_ending_in_a_closed_month_is_posted_late_to_the_first_open_month() {
    let db = fixture_db().await;
    crate::harness::close_by_hand(&db.pool, "2026-10-01").await;
    let text = format!(
        "{}\n{}\n",
        job("1", json!({})),
        job(
            "2",
            json!({"submit": "2026-11-01T10:00:00Z", "start": "2026-11-01T10:00:00Z", "end": "2026-11-01T12:00:00Z"})
        )
    );
    let s = import_jsonl(&db.pool, "late.jsonl", &text, false).await;
    assert_eq!(s.recorded, 2);
    let rows: Vec<(String, chrono::NaiveDate, bool)> = sqlx::query_as(
        "SELECT j.scheduler_job_id, e.period, e.late FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
           JOIN job j ON j.id = r.job_id ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let rows: Vec<(String, String, bool)> = rows.into_iter().map(|(j, p, l)| (j, p.to_string(), l)).collect();
    assert_eq!(
        rows,
        [
            ("1".into(), "2026-11-01".into(), true),
            ("2".into(), "2026-11-01".into(), false)
        ]
    );
    // Its own dates are kept.
    let ended: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT ended_at FROM job_record r JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = '1'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(ended.to_rfc3339(), "2026-10-01T12:00:00+00:00");
}

#[tokio::test]
async fn a_job_recorded_without_its_submit_time_is_not_charged_again_with_it() {
    let db = fixture_db().await;
    // The epilogue does not know the submit time; the monthly sacct dump does.
    let s = import_jsonl(
        &db.pool,
        "epilogue.jsonl",
        &format!("{}\n", job("5", json!({"submit": null}))),
        false,
    )
    .await;
    assert_eq!(s.recorded, 1);
    let s = import_jsonl(&db.pool, "dump.jsonl", &format!("{}\n", job("5", json!({}))), false).await;
    assert_eq!((s.recorded, s.replayed), (0, 1), "{s:#?}");
    // A different known submit time is a conflict, which --supersede cannot mend.
    import_jsonl(&db.pool, "a.jsonl", &format!("{}\n", job("6", json!({}))), false).await;
    let s = import_jsonl(
        &db.pool,
        "b.jsonl",
        &format!("{}\n", job("6", json!({"submit": "2026-10-01T09:00:00Z"}))),
        true,
    )
    .await;
    assert_eq!((s.superseded, s.rejected[&RejectKind::Conflict]), (0, 1), "{s:#?}");
    assert!(
        s.examples[0]
            .contains("submit 2026-10-01 10:00:00 UTC -> 2026-10-01 09:00:00 UTC, which a supersede cannot change"),
        "{:?}",
        s.examples
    );
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM job")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 2);
}

#[tokio::test]
async fn a_retry_reads_each_rejected_line_with_the_options_of_its_own_import() {
    let db = fixture_db().await;
    // PBS logs do not name their cluster; two imports for two clusters.
    let ral = "10/02/2011 06:41:44;E;1.ral;user=u group=newgroup queue=atlas ctime=1317509574 start=1317509945 Resource_List.ncpus=1 end=1317513545 Exit_status=0\n";
    let vsc = "10/02/2011 06:41:44;E;1.vsc;user=u group=newgroup queue=short ctime=1317509574 start=1317509945 Resource_List.ncpus=1 end=1317513545 Exit_status=0\n";
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    for (cluster, text) in [("ral", ral), ("vsc", vsc)] {
        let path = dir.join(format!("{}-{cluster}.log", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let options = ReadOptions {
            cluster: Some(cluster.into()),
            project_from: Some(vec!["account".into(), "group".into()]),
            ..Default::default()
        };
        let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
        let mut s = Summary::default();
        import(
            &mut recorder,
            std::fs::File::open(&path).unwrap(),
            &Input::new(cluster, Format::Pbs, &options),
            &mut s,
            &|_| {},
        )
        .await
        .unwrap();
        assert_eq!(s.rejected[&RejectKind::UnknownProject], 1);
    }
    let fixed = format!("{}\n[[project]]\ncode = \"newgroup\"\n", crate::fixtures::CENTER);
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&fixed).unwrap(), "t")
        .await
        .unwrap();
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    assert_eq!(s.recorded, 2, "{s:#?}");
    let clusters: Vec<String> =
        sqlx::query_scalar("SELECT c.name FROM job j JOIN cluster c ON c.id = j.cluster_id ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(clusters, ["ral", "vsc"]);
}

#[tokio::test]
async fn a_damaged_line_with_nul_bytes_is_rejected_and_the_rest_recorded() {
    let db = fixture_db().await;
    let mut bytes = job("1", json!({})).into_bytes();
    bytes.extend(b"\n\0\0\0\0\0\0\n");
    bytes.extend(job("2", json!({})).into_bytes());
    bytes.push(b'\n');
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-nulls.jsonl", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    import(
        &mut recorder,
        std::fs::File::open(&path).unwrap(),
        &Input::new("nulls.jsonl", Format::Jsonl, &ReadOptions::default()),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(s.recorded, 2);
    assert_eq!(
        s.examples,
        ["nulls.jsonl:2: the line holds a NUL byte (byte 1): a damaged record"]
    );
    // Shown with U+FFFD; the bytes kept as they were.
    let (raw, bytes): (String, Option<Vec<u8>>) = sqlx::query_as("SELECT raw, raw_bytes FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(raw, "\u{FFFD}".repeat(6));
    assert_eq!(bytes, Some(vec![0u8; 6]));
}

/// A log copied while PBS was writing it ends in the middle of a record:
/// cut before its memory and walltime, the record still reads as a job. It
/// is kept, not charged; a retry does not charge it either; the complete
/// file records the job and resolves the rejection.
#[tokio::test]
async fn the_last_line_of_a_file_cut_short_is_kept_until_the_whole_file_is_imported() {
    const LOG: &str = "hnormalise_torque_accounting.log";
    let db = fixture_db().await;
    let whole = std::fs::read_to_string(crate::fixtures::stripped(LOG)).unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    let cut = &lines[1][..lines[1].find(" resources_used.mem=").unwrap()];
    let path = scratch_dir("cut-short").join("20140112");
    std::fs::write(&path, format!("{}\n{cut}", lines[0])).unwrap();
    let s = import_cut(&db, &path, "20140112", LOG).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 1), "{s:#?}");
    assert_eq!(s.rejected[&RejectKind::Malformed], 1);
    assert_eq!(s.examples, [format!("20140112:2: {}", hpc_ledger::ingest::CUT_SHORT)]);
    let (raw, key): (String, String) = sqlx::query_as("SELECT raw, job_key FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (raw.as_str(), key.as_str()),
        (cut, "vsc/161299[].mymaster.somecluster.somedomain_389")
    );
    let entries = entry_count(&db.pool).await;

    // Read again, it is still cut short.
    let mut s = Summary::default();
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    assert_eq!((s.recorded, s.rejected_total()), (0, 1), "{s:#?}");
    assert_eq!(entry_count(&db.pool).await, entries);

    // The whole log, under the same name: the job is charged and the
    // rejection resolved by it.
    let s = import_cut(&db, &crate::fixtures::stripped(LOG), "20140112", LOG).await;
    assert_eq!((s.recorded, s.replayed, s.rejected_total()), (3, 1, 0), "{s:#?}");
    let (resolution, raw): (String, String) = sqlx::query_as(
        "SELECT x.resolution, r.raw FROM rejected_record x JOIN job_record r ON r.id = x.resolved_record_id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((resolution.as_str(), raw.as_str()), ("recorded_elsewhere", lines[1]));

    // A requeued job's last run cut inside its submit time begins like its
    // earlier runs, recorded in the same batch: none of them resolves it.
    // A step cut short is skipped: it is never charged, whatever its end.
    const REQUEUE: &str = "slurm_2205_requeue_sacct.txt";
    let whole = std::fs::read_to_string(crate::fixtures::stripped(REQUEUE)).unwrap();
    let (body, last) = whole.trim_end().rsplit_once('\n').unwrap();
    let body = format!("{body}\n");
    assert!(last.starts_with("3|3|testclu|"));
    // Cut inside its submit time: job 3's two requeued runs begin alike.
    let cut = &last[..last.find("T19:10:29").unwrap()];
    let path = scratch_dir("cut-short").join("requeue.txt");
    std::fs::write(&path, format!("{body}{cut}")).unwrap();
    let s = import_cut(&db, &path, "requeue.txt", REQUEUE).await;
    assert_eq!((s.recorded, s.rejected_total()), (12, 1), "{s:#?}");
    let open = |pool: PgPool| async move {
        sqlx::query_scalar::<_, String>("SELECT source_ref FROM rejected_record WHERE resolved_at IS NULL ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    assert_eq!(open(db.pool.clone()).await, ["requeue.txt:14"]);
    std::fs::write(
        &path,
        format!("{body}{}|", &last[..last.find('|').unwrap()].replace('3', "3.batch")),
    )
    .unwrap();
    let s = import_cut(&db, &path, "requeue.txt", REQUEUE).await;
    assert_eq!(
        (s.replayed, s.rejected_total(), s.skipped[&Skip::Step]),
        (12, 0, 1),
        "{s:#?}"
    );
    // The complete file: resolved by the run on that line.
    std::fs::write(&path, format!("{body}{last}\n")).unwrap();
    let s = import_cut(&db, &path, "requeue.txt", REQUEUE).await;
    assert_eq!((s.recorded, s.replayed), (1, 12), "{s:#?}");
    assert!(open(db.pool.clone()).await.is_empty());
}

/// A line kept as cut short whose whole record is skipped, not charged (a
/// job still running when the dump was taken, one that never started) is
/// resolved as skipped by the complete file under the same name: it stayed
/// open, "not charged", although the message promises the complete file
/// resolves it (a new user's review of 2026-12-07).
#[tokio::test]
async fn a_cut_line_whose_whole_record_is_skipped_is_resolved_by_the_complete_file() {
    const REQUEUE: &str = "slurm_2205_requeue_sacct.txt";
    let db = fixture_db().await;
    let whole = std::fs::read_to_string(crate::fixtures::stripped(REQUEUE)).unwrap();
    let (body, last) = whole.trim_end().rsplit_once('\n').unwrap();
    // Job 3 as a dump taken while it ran, and one taken while it pended.
    let running = last
        .replace(
            "|2026-11-30T19:13:50|00:00:30|0:0|COMPLETED|",
            "|Unknown|00:00:30|0:0|RUNNING|",
        )
        .replace("3|3|testclu", "93|93|testclu");
    let pending = last
        .replace(
            "|2026-11-30T19:13:20|2026-11-30T19:13:50|00:00:30|0:0|COMPLETED|",
            "|Unknown|Unknown|00:00:00|0:0|PENDING|",
        )
        .replace("3|3|testclu", "94|94|testclu");
    let open = |pool: PgPool| async move {
        sqlx::query_as::<_, (String, Option<String>)>("SELECT source_ref, resolution FROM rejected_record ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    // A later dump of the same name with another job, skipped, at that
    // line does not resolve it (the cut text alone, "9", begins alike).
    let other = pending.replace("94|94|testclu", "95|95|testclu");
    let path = scratch_dir("cut-skipped").join("dump-0.txt");
    std::fs::write(&path, format!("{body}\n{}", &pending[..1])).unwrap();
    let s = import_cut(&db, &path, "dump-0.txt", REQUEUE).await;
    assert_eq!(s.rejected[&RejectKind::Malformed], 1, "{s:#?}");
    std::fs::write(&path, format!("{body}\n{other}\n")).unwrap();
    import_cut(&db, &path, "dump-0.txt", REQUEUE).await;
    assert_eq!(open(db.pool.clone()).await, [("dump-0.txt:14".into(), None)]);
    for (n, line) in [(1, running), (2, pending)] {
        let name = format!("dump-{n}.txt");
        let path = scratch_dir("cut-skipped").join(&name);
        std::fs::write(&path, format!("{body}\n{}", &line[..line.len() - 5])).unwrap();
        let s = import_cut(&db, &path, &name, REQUEUE).await;
        assert_eq!(s.rejected[&RejectKind::Malformed], 1, "{s:#?}");
        std::fs::write(&path, format!("{body}\n{line}\n")).unwrap();
        let s = import_cut(&db, &path, &name, REQUEUE).await;
        assert_eq!(s.rejected_total(), 0, "{s:#?}");
    }
    assert_eq!(
        open(db.pool.clone()).await,
        [
            ("dump-0.txt:14".into(), None),
            ("dump-1.txt:14".into(), Some("skipped".into())),
            ("dump-2.txt:14".into(), Some("skipped".into()))
        ]
    );
}

/// Import `path` as `name`, read as the fixture `like` is.
async fn import_cut(db: &crate::harness::TestDb, path: &std::path::Path, name: &str, like: &str) -> Summary {
    let (format, options) = crate::fixtures::options(like);
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    import(
        &mut recorder,
        std::fs::File::open(path).unwrap(),
        &Input::new(name, format, &options),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    s
}

#[tokio::test]
async fn a_cluster_time_zone_cannot_move_recorded_jobs() {
    let db = fixture_db().await;
    import_fixture(&db, "hbjobinfo_habrok_sacct_snowman.txt", false).await;
    let moved = crate::fixtures::CENTER.replace("time_zone = \"Europe/Amsterdam\"", "time_zone = \"UTC\"");
    let e = hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&moved).unwrap(), "t")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the configuration was not applied:\n  - the time zone of cluster habrok cannot change once jobs are recorded on it"
    );
}

#[tokio::test]
async fn requeued_runs_of_one_job_are_separate_runs() {
    let db = fixture_db().await;
    // `sacct --duplicates`: the first run was requeued (node failure), the second completed.
    let text = "JobID|Cluster|Partition|Account|Submit|Start|End|State|AllocTRES\n\
                77|testclu|regular|pas1234|2026-10-01T00:00:00|2026-10-01T01:00:00|2026-10-01T02:00:00|REQUEUED|cpu=2,node=1\n\
                77|testclu|regular|pas1234|2026-10-01T00:00:00|2026-10-01T03:00:00|2026-10-01T04:30:00|COMPLETED|cpu=2,node=1\n";
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-requeue.txt", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    import(
        &mut recorder,
        std::fs::File::open(&path).unwrap(),
        &Input::new("requeue.txt", Format::Slurm, &ReadOptions::default()),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    // Both runs held 2 cores: 1 h and 1.5 h at 0.01.
    assert_eq!((s.recorded, s.charged.to_string().as_str()), (2, "0.05"), "{s:#?}");
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM job WHERE scheduler_job_id = '77'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 2);
}

#[tokio::test]
async fn huge_numbers_and_dates_out_of_range_are_clear_errors() {
    let db = fixture_db().await;
    let lines = [
        job("1", json!({"cores": 1_000_000_000_000u64})),
        job("2", json!({"start": 99_999_999_999_999i64})),
        job("3", json!({"end": "99999-01-01T00:00:00Z"})),
        job("4", json!({"memory": "99999999999999PB"})),
        job("5", json!({"nodes": 4_000_000})),
    ];
    let s = import_jsonl(&db.pool, "huge.jsonl", &(lines.join("\n") + "\n"), false).await;
    assert_eq!((s.recorded, s.rejected_total()), (0, 5), "{s:#?}");
    let want = [
        "huge.jsonl:1: invalid value: integer `1000000000000`, expected u32",
        "huge.jsonl:2: start: 99999999999999 is out of range",
        "huge.jsonl:3: end: \"99999-01-01T00:00:00Z\" is not a time",
        "huge.jsonl:4: memory: \"99999999999999PB\" is too large",
        "huge.jsonl:5 (testclu/5): the job holds 4000000 nodes, more than the limit of 1000000",
    ];
    for w in want {
        assert!(
            s.examples.iter().any(|e| e.starts_with(w)),
            "missing {w:?} in {:#?}",
            s.examples
        );
    }
    let slurm = "JobID|Cluster|Partition|Account|Start|End|State|AllocTRES\n\
                 1|testclu|regular|pas1234|2026-10-01T00:00:00|2026-10-01T01:00:00|COMPLETED|cpu=99999999999,node=1\n\
                 2|testclu|regular|pas1234|2026-10-01T00:00:00|2026-13-01T01:00:00|COMPLETED|cpu=1,node=1\n";
    let pbs = "x;E;1.s;queue=short account=vsc40075 start=99999999999999 end=99999999999999 Resource_List.ncpus=1\n";
    for (format, text, cluster, expect) in [
        (
            Format::Slurm,
            slurm,
            None,
            vec![
                "big.txt:2: AllocTRES: cpu must be a whole number, not \"99999999999\"",
                "big.txt:3: End \"2026-13-01T01:00:00\" is not a time",
            ],
        ),
        (
            Format::Pbs,
            pbs,
            Some("vsc"),
            vec!["big.txt:1: start=\"99999999999999\" is not a time in epoch seconds"],
        ),
    ] {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("jsonl");
        let path = dir.join(format!("{}-big.txt", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let s = import_file(&db.pool, &path, "big.txt", format, cluster).await;
        for w in expect {
            assert!(
                s.examples.iter().any(|e| e.starts_with(w)),
                "missing {w:?} in {:#?}",
                s.examples
            );
        }
    }
}

#[tokio::test]
async fn other_sites_records_are_charged_by_the_documented_fallbacks() {
    let db = fixture_db().await;
    for f in [
        "safe_oxford_sacct_parsable_allocgres.log",
        "safe_cirrus_sacct_parsable.log",
        "safe_fzk_torque_doubled_nodes.log",
        "safe_hector_cray_mppwidth.log",
        "safe_pbs_no_resource_list.log",
    ] {
        import_fixture(&db, f, false).await;
    }
    let p = &db.pool;
    // Oxford, before TRES: GPUs only in AllocGRES. 605717: 1 core and gpu:2
    // for 316,442 s at 0.02 and 10.00.
    assert_eq!(
        charges(p, "oxford", "605717", None).await,
        lines(&[
            ("core_hours", "87.900555555556", "1.76"),
            ("gpu_hours", "175.801111111111", "1758.01")
        ])
    );
    // The four GPU jobs: 2,948.11 of GPU-hours an AllocTRES-only reader lost.
    let gpu: Decimal = sqlx::query_scalar(
        "SELECT sum(e.amount) FROM ledger_entry e JOIN rate_card c ON c.id = e.rate_card_id
           JOIN cluster k ON k.id = c.cluster_id WHERE k.name = 'oxford' AND e.metric = 'gpu_hours'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(gpu.to_string(), "2948.11");
    // 605603: 128 CPUs on 8 nodes, 4-00:08:39; no GRES, and none asked for.
    assert_eq!(
        charges(p, "oxford", "605603", None).await,
        lines(&[("core_hours", "12306.453333333333", "123.06")])
    );
    // Cirrus (`--parsable`): 18519 FAILED after 1-15:29:41 on 36 cores.
    assert_eq!(
        charges(p, "cirrus", "18519", None).await,
        lines(&[("core_hours", "1421.81", "14.22")])
    );
    // FZK: `nodes=nodes=1:ppn=1` is one core (0 s here); 710105 reserved
    // nodes=8:ppn=1 (ncpus=1 beside it): 8 whole 8-core nodes for 370 s.
    assert_eq!(
        charges(p, "fzk", "709813.iwrcgpbs0.fzk.de", None).await,
        lines(&[("core_hours", "0", "0.00")])
    );
    assert_eq!(
        charges(p, "fzk", "710105.iwrcgpbs0.fzk.de", None).await,
        lines(&[("core_hours", "6.577777777778", "0.07")])
    );
    // HECToR: 64 PEs, 2 per node = 32 dual-core nodes, 41,399 s (not the
    // 1 core its ncpus says); 10 PEs on 5 nodes for 181 s.
    assert_eq!(
        charges(p, "hector", "102.user123", None).await,
        lines(&[("core_hours", "735.982222222222", "7.36")])
    );
    assert_eq!(
        charges(p, "hector", "105.user234", None).await,
        lines(&[("core_hours", "0.502777777778", "0.01")])
    );
    // No Resource_List: the one exec_host slot; DiRAC: nodes=4:ppn=16 for 2 s.
    assert_eq!(
        charges(p, "hector", "100083.sdb", None).await,
        lines(&[("core_hours", "11.499722222222", "0.11")])
    );
    assert_eq!(
        charges(p, "hector", "3710.master.cm.cluster", None).await,
        lines(&[("core_hours", "0.035555555556", "0.00")])
    );
    // The record of type `z` (PBS Pro's "job suspended") is skipped, not
    // kept as malformed: nothing of these files is rejected.
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record")
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn a_gpu_job_without_a_gpu_count_is_refused_only_as_a_new_charge() {
    let db = fixture_db().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gpucount-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = |gpus: &str, id: &str| {
        format!(
            r#"{{"cluster":"testclu","job_id":"{id}","project":"pas1234","queue":"gpu","cores":2,{gpus}"start":"2026-10-01T00:00:00Z","end":"2026-10-01T01:00:00Z"}}"#
        )
    };
    // Charged before: it said 0 GPUs. The same record without a count
    // (the same charge) is a replay, not a rejection of a past charge.
    let said = dir.join("said.jsonl");
    std::fs::write(&said, job(r#""gpus":0,"#, "71") + "\n").unwrap();
    let s = import_file(&db.pool, &said, "said.jsonl", Format::Jsonl, None).await;
    assert_eq!(s.recorded, 1);
    let unsaid = dir.join("unsaid.jsonl");
    std::fs::write(&unsaid, job("", "71") + "\n" + &job("", "72") + "\n").unwrap();
    let s = import_file(&db.pool, &unsaid, "unsaid.jsonl", Format::Jsonl, None).await;
    assert_eq!((s.replayed, s.recorded), (1, 0), "{s:#?}");
    // A new job on the gpu node type that gives no count: kept, with why.
    assert_eq!(s.rejected_total(), 1);
    let (key, reason): (Option<String>, String) =
        sqlx::query_as("SELECT job_key, reason FROM rejected_record WHERE kind = 'invalid'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(key.as_deref(), Some("testclu/72"));
    assert!(
        reason.contains("\"gpu\", which has or prices GPUs, but its record gives no GPU count"),
        "{reason}"
    );
    // Recorded as the rejection says, with its GPU count: the rejection is
    // resolved (the two say the same run where both say; it said no GPU
    // count), and the line read again stays what it was, not a conflict
    // "GPUs 1 -> 0" asking for a --supersede that is refused (an operator's
    // review of 2026-12-07: it stayed open, then turned into that conflict).
    let told = dir.join("told.jsonl");
    std::fs::write(&told, job(r#""gpus":1,"#, "72") + "\n").unwrap();
    let s = import_file(&db.pool, &told, "told.jsonl", Format::Jsonl, None).await;
    assert_eq!(s.recorded, 1);
    let open = || async {
        sqlx::query_as::<_, (String, Option<String>)>("SELECT kind, resolution FROM rejected_record ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(open().await, [("invalid".into(), Some("recorded_elsewhere".into()))]);
    let s = import_file(&db.pool, &unsaid, "unsaid.jsonl", Format::Jsonl, None).await;
    assert_eq!((s.replayed, s.recorded, s.rejected_total()), (1, 0, 1), "{s:#?}");
    assert_eq!(open().await, [("invalid".into(), Some("recorded_elsewhere".into()))]);
}

#[tokio::test]
async fn sacct_json_and_sacct_parsable_charge_every_run_alike() {
    // JSON first, then the parsable output of the same run: nothing new.
    let db = fixture_db().await;
    let json = import_fixture(&db, "slurm_2205_lab_sacct.json", false).await;
    let parsable = import_fixture(&db, "slurm_2205_lab_sacct_header.txt", false).await;
    assert_eq!((json.recorded, parsable.recorded, parsable.superseded), (16, 0, 0));
    assert_eq!(parsable.replayed + parsable.revised, 16, "{parsable:#?}");
    assert_eq!(parsable.rejected_total(), 0, "{parsable:#?}");
    // And the other way round, in a fresh ledger: the same charges.
    let other = fixture_db().await;
    let first = import_fixture(&other, "slurm_2205_lab_sacct_header.txt", false).await;
    let then = import_fixture(&other, "slurm_2205_lab_sacct.json", false).await;
    assert_eq!((first.recorded, then.recorded, then.rejected_total()), (16, 0, 0));
    assert_eq!(first.charged, json.charged);
    let entries = |pool: PgPool| async move {
        sqlx::query_as::<_, (String, Option<i32>, String, Decimal, Decimal)>(
            "SELECT j.scheduler_job_id, j.array_index, e.metric, e.quantity, e.amount FROM ledger_entry e
               JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
              ORDER BY 1, 2, 3",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    assert_eq!(entries(db.pool.clone()).await, entries(other.pool.clone()).await);
}

/// A real Slurm 22.05.8 run (tests/fixtures/accounting/slurm_2205_suspend_*):
/// a job suspended 54 s of its 64, a job on its cores meanwhile, a
/// heterogeneous job, a requeued-then-cancelled job and a throttled array,
/// as jobcomp posted them, as `sacct --parsable2` and `sacct --json` print
/// them (also with `SLURM_TIME_FORMAT='%F %T'`, once refused as "not a
/// time"): each run charged once whichever way it comes first. The
/// suspended job, recorded first from jobcomp (which counts its suspended
/// time as run time), is charged its 64 s; each of its sacct records, which
/// say it ran 10 s, is a conflict kept for a person, until one supersedes:
/// 10 s (docs/rules.md R1).
#[tokio::test]
async fn a_real_run_with_a_suspended_job_is_charged_once_whichever_way_it_comes() {
    let db = crate::harness::TestDb::new().await;
    // Two-core nodes at 36.00 a core-hour: a core-second is 0.01.
    fixture_center_with(
        &db.pool,
        r#"
[[cluster]]
name = "rv3clu"
scheduler = "slurm"
time_zone = "UTC"
[[cluster.node_type]]
name = "regular"
cores_per_node = 2
[cluster.queues]
regular = "regular"
one = "regular"
[[cluster.rate_card]]
node_type = "regular"
from = 2000-01-01
core_hour = 36.00
memory_per_core = "8GB"
"#,
    )
    .await;
    let import = |format: &str, name: &str| cli_import(&db, format, &[], &crate::fixtures::stripped(name));
    let out = import("jobcomp", "slurm_2205_suspend_jobcomp.jsonl");
    assert!(out.contains("recorded:    9"), "{out}");
    assert!(out.contains("rejected:    0"), "{out}");
    // Each names job 1 (a conflict: suspended 0 s -> 54 s) and other runs.
    for (format, name, runs) in [
        ("slurm", "slurm_2205_suspend_sacct.txt", 8),
        ("slurm", "slurm_2205_suspend_sacct_suspended_field.txt", 3),
        ("slurm", "slurm_2205_time_format_space.txt", 1),
        ("sacct-json", "slurm_2205_suspend_sacct.json", 8),
    ] {
        let out = import(format, name);
        assert!(out.contains(&format!("replayed:    {runs}")), "{name}: {out}");
        assert!(
            out.contains("recorded:    0") && out.contains("rejected:    1"),
            "{name}: {out}"
        );
    }
    let conflicts: Vec<String> =
        sqlx::query_scalar("SELECT reason FROM rejected_record WHERE resolved_at IS NULL ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(conflicts.len(), 4);
    for c in &conflicts {
        assert!(c.contains("suspended 0 s -> 54 s"), "{c}");
    }
    // A person supersedes with the record that says so: 10 s charged.
    let path = crate::fixtures::stripped("slurm_2205_suspend_sacct_suspended_field.txt");
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "slurm", "--supersede", path.to_str().unwrap()]));
    assert!(out.contains("superseded:  1"), "{out}");
    // Its own conflict resolved; the other three accounts of it stay for a
    // person (a conflict is never resolved from elsewhere), until imported
    // again: a replay now, as each reads 10 s run too.
    let open = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(open().await, 3);
    let out = import("sacct-json", "slurm_2205_suspend_sacct.json");
    assert_replayed(&out, 9);
    assert_eq!(open().await, 2);
    let charged: Vec<(String, String)> = sqlx::query_as(
        "SELECT j.scheduler_job_id || coalesce('_' || j.array_index, ''), sum(e.amount)::text
           FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let want = [
        // 2 cores × 10 s: its 54 suspended seconds are not charged.
        ("1", "0.20"),
        ("2+0", "0.20"),
        ("2+1", "0.20"),
        ("4", "0.60"),
        ("5", "0.08"),
        ("6_1", "0.05"),
        ("6_2", "0.05"),
        ("6_3", "0.05"),
        ("6_4", "0.05"),
    ];
    assert_eq!(
        charged,
        want.iter()
            .map(|(j, a)| (j.to_string(), a.to_string()))
            .collect::<Vec<_>>()
    );
}

/// A PBS array subjob named as its `$PBS_JOBID` (`161299[389].server`, what
/// an epilogue or a queuejob hook gives `job record`, `hold` and `check`)
/// is the subjob the PBS reader records from the accounting log: job
/// `161299[].server`, index 389. It was another run, charged a second time
/// (real TORQUE record, hnormalise's tests).
#[tokio::test]
async fn a_pbs_subjob_named_by_its_pbs_jobid_is_the_subjob_of_the_log() {
    let db = fixture_db().await;
    import_fixture(&db, "hnormalise_torque_accounting.log", false).await;
    let runs = || async {
        sqlx::query_as::<_, (String, Option<i32>)>(
            "SELECT scheduler_job_id, array_index FROM job WHERE scheduler_job_id LIKE '161299[%' ORDER BY 1, 2",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let before = runs().await;
    assert!(
        before.contains(&("161299[].mymaster.somecluster.somedomain".to_owned(), Some(389))),
        "{before:?}"
    );
    let entries = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM ledger_entry")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let charged = entries().await;
    // The epilogue's record of the same subjob: the same run, no new charge.
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "vsc",
        "--job-id",
        "161299[389].mymaster.somecluster.somedomain",
        "--project",
        "vsc40909",
        "--user",
        "vsc40909",
        "--queue",
        "short",
        "--nodes",
        "1",
        "--cores",
        "16",
        "--start",
        "2014-01-12T22:53:49Z",
        "--end",
        "2014-01-12T22:57:07Z",
        "--state",
        "E",
        "--exit-code",
        "0",
    ]);
    let out = crate::harness::stdout(&o);
    assert!(!out.starts_with("recorded"), "{out}{}", crate::harness::stderr(&o));
    assert!(out.contains("161299[].mymaster.somecluster.somedomain_389"), "{out}");
    assert_eq!(runs().await, before);
    assert_eq!(entries().await, charged);
    // `job show` finds it by the same name.
    let shown = crate::harness::ok(&db.cli(&["job", "show", "vsc/161299[389].mymaster.somecluster.somedomain"]));
    assert!(shown.contains("161299[].mymaster.somecluster.somedomain"), "{shown}");
    // A run recorded before under the subjob's `$PBS_JOBID` is still found.
    sqlx::query(
        "INSERT INTO job (cluster_id, scheduler_job_id, submitted_at, started_at)
         SELECT id, '4242[7].pbs01', now(), now() FROM cluster WHERE name = 'vsc'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let o = db.cli(&["job", "show", "vsc/4242[7].pbs01"]);
    assert!(
        !crate::harness::stderr(&o).contains("no run of job"),
        "{}",
        crate::harness::stderr(&o)
    );
}

#[tokio::test]
async fn a_file_of_another_format_is_refused_at_once_and_nothing_is_kept() {
    let db = fixture_db().await;
    let json = crate::fixtures::stripped("slurm_2205_lab_sacct.json");
    let jobcomp = crate::fixtures::stripped("slurm_2205_lab_jobcomp.jsonl");
    let pbs = crate::fixtures::stripped("xdmod_pbs_torque_accounting_E.log");
    for (format, file, says) in [
        (
            "slurm",
            &json,
            "looks like sacct --json output, not sacct --parsable2 output: read it with --format sacct-json",
        ),
        (
            "jsonl",
            &json,
            "looks like sacct --json output, not JSON lines of hpc-ledger's job format: read it with --format sacct-json",
        ),
        (
            "jsonl",
            &jobcomp,
            "looks like Slurm jobcomp/elasticsearch documents, not JSON lines of hpc-ledger's job format: read it with --format jobcomp",
        ),
        (
            "sacct-json",
            &pbs,
            "looks like a PBS accounting log, not sacct --json output: read it with --format pbs",
        ),
        ("slurm", &pbs, "read it with --format pbs"),
    ] {
        let o = db.cli(&[
            "import",
            "--format",
            format,
            "--cluster",
            "edge",
            file.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{format}");
        let err = crate::harness::stderr(&o);
        assert!(err.contains(says), "{format} {}: {err}", file.display());
        assert_eq!(err.lines().count(), 1, "one error: {err}");
    }
    // A sacct --json of a layout not read: refused, naming it.
    let later = std::fs::read_to_string(&json)
        .unwrap()
        .replace("dbv0.0.38", "dbv0.0.40")
        .replace("22.05.8", "23.11.4");
    let later_path = json.with_extension("later.json");
    std::fs::write(&later_path, later).unwrap();
    let o = db.cli(&["import", "--format", "sacct-json", later_path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        crate::harness::stderr(&o).contains(
            "this is the layout openapi/dbv0.0.40 (Slurm 23.11.4); hpc-ledger reads openapi/dbv0.0.38 (Slurm 22.05)"
        ),
        "{}",
        crate::harness::stderr(&o)
    );
    let (jobs, kept): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM rejected_record)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((jobs, kept), (0, 0));
}

/// `sacct --json` of every data_parser layout (Slurm 23.02 to 25.05) is
/// recorded as 22.05's is: real documents of sacct (SARC's, a job still
/// running) and of slurmrestd (Slurm-web's test clusters), their jobs
/// before their `meta` from 23.11 on. Each charge is the rules' and the
/// audit finds nothing; a document of a later layout records nothing.
#[tokio::test]
async fn sacct_json_of_slurm_23_to_25_is_recorded() {
    let db = crate::harness::TestDb::new().await;
    // Slurm-web's cluster `hpc`, priced so that a core-second is a
    // thousandth: cores × seconds ÷ 1000.
    fixture_center_with(
        &db.pool,
        r#"
[[cluster]]
name = "hpc"
scheduler = "slurm"
[[cluster.node_type]]
name = "cpu"
cores_per_node = 64
[[cluster.node_type]]
name = "gpu"
cores_per_node = 64
gpus_per_node = 4
[cluster.queues]
standard = "cpu"
normal = "cpu"
gpu = "gpu"
[[cluster.rate_card]]
node_type = "cpu"
from = 2000-01-01
core_hour = 3.60
memory_per_core = "4GB"
[[cluster.rate_card]]
node_type = "gpu"
from = 2000-01-01
core_hour = 3.60
gpu_hour = 36.00
memory_per_core = "4GB"
[[project]]
code = "admin"
[[project]]
code = "acoustic"
[[project]]
code = "biology"
[[project]]
code = "optic"
"#,
    )
    .await;
    // The jobs listed before `meta` wait in a temporary file of TMPDIR,
    // unlinked at once: nothing is left there.
    let tmp = scratch_dir("sacct-json-tmp");
    let import_in = |name: &str, tmp: &std::path::Path| {
        let path = crate::fixtures::stripped(name);
        crate::harness::cli_with_env(
            &["import", "--format", "sacct-json", path.to_str().unwrap()],
            &[("DATABASE_URL", db.url.as_str()), ("TMPDIR", tmp.to_str().unwrap())],
            None,
        )
    };
    let import = |name: &str| crate::harness::stdout(&import_in(name, &tmp));
    for (name, recorded, skipped, rejected) in [
        ("slurm_2302_sarc_sacct.json", 0, 1, 0),
        ("slurm_2311_sarc_sacct.json", 0, 1, 0),
        ("slurm_2311_slurmweb_job.json", 1, 0, 0),
        // Submitted with --gpus 4 to a GPU queue of a cluster that does not
        // account gres/gpu: its record gives no GPU count, and a GPU node
        // type's job is never charged as if it had none.
        ("slurm_2405_slurmweb_job_gpus.json", 0, 0, 1),
        ("slurm_2411_slurmweb_job.json", 1, 0, 0),
        // Cancelled while pending: its start is Slurm's NO_VAL (it was kept
        // as malformed, "no cpu count", instead of skipped as never started).
        ("slurm_2411_slurmweb_cancelled_pending.json", 0, 1, 0),
        ("slurm_2505_slurmweb_job_gpu_types.json", 0, 1, 0),
        ("slurm_2505_slurmweb_jobs.json", 1, 0, 0),
    ] {
        let out = import(name);
        assert!(out.contains(&format!("recorded:    {recorded} ")), "{name}: {out}");
        assert!(out.contains(&format!("skipped:     {skipped}\n")), "{name}: {out}");
        assert!(out.contains(&format!("rejected:    {rejected}")), "{name}: {out}");
    }
    let why: String = sqlx::query_scalar("SELECT reason FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(why.contains("gives no GPU count at all"), "{why}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    // No temporary directory to wait in: refused, saying where, nothing recorded.
    let o = import_in("slurm_2311_slurmweb_job.json", &tmp.join("gone"));
    assert_eq!(o.status.code(), Some(1));
    let err = crate::harness::stderr(&o);
    assert!(
        err.contains("`jobs` comes before `meta` or `errors` and must wait for them") && err.contains("gone"),
        "{err}"
    );
    let charged: Vec<(String, String, i32, String)> = sqlx::query_as(
        "SELECT j.scheduler_job_id, p.code, r.cores, e.amount::text
           FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
           JOIN project p ON p.id = e.project_id
          WHERE e.kind = 'job' ORDER BY j.scheduler_job_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        charged,
        [
            // 2 cores, start = end: a node failure at once.
            ("13826".into(), "optic".into(), 2, "0.00".into()),
            // 1 core × 1 s.
            ("509".into(), "admin".into(), 1, "0.00".into()),
            // 32 cores × 61 s = 1.952.
            ("6362".into(), "biology".into(), 32, "1.95".into()),
        ]
    );
    // Importing the same documents again records nothing new.
    let out = import("slurm_2411_slurmweb_job.json");
    assert!(out.contains("replayed:    1"), "{out}");
    // The same jobs as `sacct --parsable2` prints them (their fields written
    // from the JSON: times in the cluster's zone, UTC; AllocTRES as sacct
    // prints it): the same runs, charged the same, nothing new.
    let entries = || async {
        sqlx::query_as::<_, (i64, String)>("SELECT count(*), sum(amount)::text FROM ledger_entry")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let before = entries().await;
    let at = |s: i64| {
        chrono::DateTime::from_timestamp(s, 0)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    let parsable = format!(
        "JobID|Cluster|Account|User|Partition|State|Submit|Start|End|NNodes|AllocTRES|ExitCode|JobName\n\
         509|hpc|admin|tmcgrath|standard|COMPLETED|{}|{}|{}|1|billing=1,cpu=1,mem=512M,node=1|0:0|wrap\n\
         6362|hpc|biology|jbeck|standard|COMPLETED|{}|{}|{}|1|billing=32,cpu=32,mem=16G,node=1|0:0|wrap\n\
         13826|hpc|optic|jhayes|normal|NODE_FAIL|{}|{}|{}|1|billing=2,cpu=2,mem=1G,node=1|0:46|allocation\n",
        at(1746621138),
        at(1746621139),
        at(1746621140),
        at(1762788774),
        at(1762788776),
        at(1762788837),
        at(1779954173),
        at(1779954174),
        at(1779954174)
    );
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hpc-parsable-{}.txt", std::process::id()));
    std::fs::write(&path, parsable).unwrap();
    let out = crate::harness::ok(&db.cli(&["import", "--format", "slurm", path.to_str().unwrap()]));
    assert!(out.contains("recorded:    0 "), "{out}");
    assert!(out.contains("replayed:    3"), "{out}");
    assert_eq!(entries().await, before);
    let audit = db.cli(&["audit", "--deep"]);
    assert!(
        audit.status.success(),
        "{}{}",
        crate::harness::stdout(&audit),
        crate::harness::stderr(&audit)
    );
    // A layout after the ones read, its jobs first: nothing recorded.
    let later = std::fs::read_to_string(crate::fixtures::stripped("slurm_2505_slurmweb_jobs.json"))
        .unwrap()
        .replace("data_parser/v0.0.43", "data_parser/v0.0.44")
        .replace("\"job_id\": 13826", "\"job_id\": 13827");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("later-{}.json", std::process::id()));
    std::fs::write(&path, later).unwrap();
    let o = db.cli(&["import", "--format", "sacct-json", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        crate::harness::stderr(&o).contains("this is the layout data_parser/v0.0.44 (Slurm 25.05.4)"),
        "{}",
        crate::harness::stderr(&o)
    );
    let (runs, kept): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM rejected_record)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((runs, kept), (3, 1));
    // A document whose `errors` report one (the jobs of 25.05 come before
    // them, so they would be recorded first): nothing recorded, the error
    // named.
    let erred = std::fs::read_to_string(crate::fixtures::stripped("slurm_2505_slurmweb_jobs.json"))
        .unwrap()
        .replace("\"job_id\": 13826", "\"job_id\": 13828")
        .replace(
            "\"errors\": []",
            r#""errors": [{"description": "Failed to dump field tres.allocated", "error_number": 9201}]"#,
        );
    assert!(erred.contains("9201"), "the fixture's errors were replaced");
    std::fs::write(&path, erred).unwrap();
    let o = db.cli(&["import", "--format", "sacct-json", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        crate::harness::stderr(&o).contains(
            "the document reports 1 error from Slurm, so its jobs may be incomplete: \"Failed to dump field tres.allocated\", error number 9201; nothing was recorded"
        ),
        "{}",
        crate::harness::stderr(&o)
    );
    let (runs, kept): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM rejected_record)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((runs, kept), (3, 1));
}

#[tokio::test]
async fn a_rejected_sacct_json_job_is_read_again_by_its_own_reader() {
    let db = fixture_db().await;
    let json = crate::fixtures::stripped("slurm_2205_lab_sacct.json");
    let renamed = std::fs::read_to_string(&json).unwrap().replace("pzs0001", "pzs7777");
    let path = json.with_extension("renamed.json");
    std::fs::write(&path, renamed).unwrap();
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "sacct-json", path.to_str().unwrap()]));
    assert!(out.contains("rejected:    5"), "{out}");
    assert!(
        out.contains(".renamed.json:jobs[2] (testclu/3): unknown project \"pzs7777\""),
        "{out}"
    );
    let fixed = format!("{}\n[[project]]\ncode = \"PZS7777\"\n", crate::fixtures::CENTER);
    let cfg = path.with_extension("toml");
    std::fs::write(&cfg, fixed).unwrap();
    crate::harness::ok(&db.cli(&["config", "apply", cfg.to_str().unwrap()]));
    let out = crate::harness::stdout(&db.cli(&["import", "--retry-rejected"]));
    assert!(out.contains("recorded:    5"), "{out}");
    let formats: Vec<String> = sqlx::query_scalar("SELECT DISTINCT source_format FROM job_record")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(formats, vec!["sacct-json".to_owned()]);
}

#[tokio::test]
async fn a_latin1_name_is_read_alike_in_pbs_logs_and_json_lines() {
    let db = fixture_db().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("latin1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let latin1 = |s: &str| -> Vec<u8> { s.bytes().map(|b| if b == b'~' { 0xe9 } else { b }).collect() };
    // A real TORQUE record (Open XDMoD's fixture), its job name in Latin-1.
    let pbs = std::fs::read_to_string(crate::fixtures::stripped("xdmod_pbs_torque_accounting_E.log")).unwrap();
    let line = pbs.lines().find(|l| l.contains("6464684.anonhost")).unwrap();
    let bytes = latin1(&line.replace("jobname=anonjob", "jobname=caf~"));
    let path = dir.join("pbs.log");
    std::fs::write(&path, [bytes.clone(), b"\n".to_vec()].concat()).unwrap();
    let s = import_file(&db.pool, &path, "pbs.log", Format::Pbs, Some("edge")).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    // The project's JSON job, its user in Latin-1; and one whose project is damaged.
    let json = dir.join("jobs.jsonl");
    let job = r#"{"cluster":"testclu","job_id":"61","project":"PROJECT","user":"jos~","queue":"regular","cores":1,"start":"2026-10-01T00:00:00Z","end":"2026-10-01T01:00:00Z"}"#;
    let text = [
        latin1(&job.replace("PROJECT", "pas1234")),
        b"\n".to_vec(),
        latin1(&job.replace("PROJECT", "pas~").replace("\"61\"", "\"62\"")),
        b"\n".to_vec(),
    ]
    .concat();
    std::fs::write(&json, &text).unwrap();
    let s = import_file(&db.pool, &json, "jobs.jsonl", Format::Jsonl, None).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 1), "{s:#?}");
    assert_eq!(
        s.examples,
        [
            "jobs.jsonl:2: the project is not valid UTF-8: a record's charge is not guessed from damaged bytes (the bytes are kept)"
        ]
    );
    let rows: Vec<(String, String, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT user_name, job_name, raw_bytes FROM job_record ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows[0].1, "caf\u{FFFD}");
    assert_eq!(rows[0].2.as_deref(), Some(&bytes[..]));
    assert_eq!(rows[1].0, "jos\u{FFFD}");
    // Imported again: replays, nothing new, the rejection kept once.
    let s = import_file(&db.pool, &json, "jobs.jsonl", Format::Jsonl, None).await;
    assert_eq!((s.replayed, s.recorded), (1, 0));
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 1);
}

/// A NUL character escaped inside a JSON string (`\u0000`) passes the
/// reader's check for NUL bytes, and PostgreSQL's text cannot hold it: the
/// job is rejected by name and reason (not by the database, which would
/// have failed its whole batch first), the rest recorded.
#[tokio::test]
async fn a_nul_escaped_in_a_json_field_is_rejected_and_the_rest_recorded() {
    let db = fixture_db().await;
    let text = [
        job("1", json!({})),
        job("2", json!({"job_name": "bad\u{0}name"})),
        job("5", json!({"user": "u\u{0}"})),
        job("3", json!({"job_id": "3\u{0}"})),
        job("4", json!({})),
    ]
    .join("\n")
        + "\n";
    assert!(text.contains("\\u0000"), "{text}");
    let s = import_jsonl(&db.pool, "nul-escapes", &text, false).await;
    assert_eq!((s.recorded, s.rejected.values().sum::<u64>()), (2, 3), "{s:?}");
    assert_eq!(
        s.examples,
        [
            "nul-escapes:2 (testclu/2): the job name contains a NUL character",
            "nul-escapes:3 (testclu/5): the user contains a NUL character",
            "nul-escapes:4 (testclu/3\u{FFFD}): the job id must be 1 to 256 characters without control characters",
        ]
    );
    // Each kept as its line was.
    let kept: Vec<String> = sqlx::query_scalar("SELECT raw FROM rejected_record ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, text.lines().skip(1).take(3).collect::<Vec<_>>());
}

/// A directory of this test process's own under the target's scratch space.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An import's summary: `runs` runs replayed (already recorded, nothing
/// changed) and no record rejected.
#[track_caller]
fn assert_replayed(out: &str, runs: u64) {
    assert!(
        out.contains(&format!("replayed:    {runs} (")) && out.contains("rejected:    0"),
        "{out}"
    );
}

/// What `hpc-ledger import --format FORMAT [ARGS…] PATH` printed.
fn cli_import(db: &crate::harness::TestDb, format: &str, args: &[&str], path: &std::path::Path) -> String {
    crate::harness::stdout(&cli_import_output(db, format, args, path))
}

/// `hpc-ledger import --format FORMAT [ARGS…] PATH`.
fn cli_import_output(
    db: &crate::harness::TestDb,
    format: &str,
    args: &[&str],
    path: &std::path::Path,
) -> std::process::Output {
    let mut all = vec!["import", "--format", format];
    all.extend_from_slice(args);
    all.push(path.to_str().unwrap());
    db.cli(&all)
}

/// `hpc-ledger import --format pbs --cluster casper PATH` (the fixtures'
/// NCAR cluster).
fn import_casper(db: &crate::harness::TestDb, path: &std::path::Path) -> std::process::Output {
    cli_import_output(db, "pbs", &["--cluster", "casper"], path)
}

/// The fixtures' ledger with the lab's cluster `testclu` in New York's
/// zone (the lab's own is UTC), and that configuration.
async fn new_york() -> (crate::harness::TestDb, String) {
    let db = crate::harness::TestDb::new().await;
    let center = crate::fixtures::CENTER.replace(
        "name = \"testclu\"\nscheduler = \"slurm\"\n",
        "name = \"testclu\"\nscheduler = \"slurm\"\ntime_zone = \"America/New_York\"\n",
    );
    assert_ne!(center, crate::fixtures::CENTER);
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&center).unwrap(), "t")
        .await
        .unwrap();
    (db, center)
}

/// `audit --deep` read each of the ledger's `records` job records again
/// and found them as they are stored.
async fn deep_audit_reads_alike(pool: &PgPool, records: u64) {
    let report = hpc_ledger::service::deep::deep_audit(pool).await.unwrap();
    assert_eq!(
        (report.records, report.differences.len()),
        (records, 0),
        "{:#?}",
        report.differences
    );
}

/// The fixtures' center with `more` (TOML: clusters, projects) applied.
async fn fixture_center_with(pool: &PgPool, more: &str) {
    let center = format!("{}\n{more}", crate::fixtures::CENTER);
    hpc_ledger::service::config::apply(pool, &hpc_ledger::config::parse(&center).unwrap(), "t")
        .await
        .unwrap();
}

/// The ledger as the readings of 2026-12-06 found it: holding records
/// (migration 0049 notes it; a new ledger has none to look for).
async fn upgraded_holding_records(pool: &PgPool) {
    sqlx::query("UPDATE reading_change SET records_before = true, migrated_at = now()")
        .execute(pool)
        .await
        .unwrap();
}

/// When job `id` (not an array task) started, as recorded.
async fn started(pool: &PgPool, id: &str) -> String {
    let start: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT started_at FROM job WHERE scheduler_job_id = $1 AND array_index IS NULL")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
    start.to_rfc3339()
}

/// Slurm's jobcomp/elasticsearch writes `@start`/`@end`/`@submit` in UTC
/// (`gmtime`), without a zone. On a cluster whose slurmctld runs in
/// another zone they used to be read in that zone: a job `serve` recorded
/// became a second run of the same job when `sacct` back-filled it (its
/// times the zone's offset apart), charged twice.
#[tokio::test]
async fn jobcomp_times_are_utc_on_a_cluster_in_another_zone() {
    // The lab's sacct --json (epoch seconds: the same instants in any
    // zone), then the same jobs as Slurm posted them to jobcomp, imported
    // as a user does; in the lab's own zone (UTC) and in New York's.
    let jobcomp = crate::fixtures::stripped("slurm_2205_lab_jobcomp.jsonl");
    let both = |db: crate::harness::TestDb| {
        let jobcomp = jobcomp.clone();
        async move {
            let s = import_fixture(&db, "slurm_2205_lab_sacct.json", false).await;
            assert!(s.recorded >= 13, "{s:#?}");
            let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", jobcomp.to_str().unwrap()]));
            let (runs, twice, total): (i64, i64, Decimal) = sqlx::query_as(
                "SELECT count(*), count(*) - count(DISTINCT (cluster_id, scheduler_job_id, array_index)),
                    (SELECT sum(amount) FROM ledger_entry)
               FROM job",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            let start = started(&db.pool, "1").await;
            (out, runs, twice, total, start)
        }
    };
    let utc = both(fixture_db().await).await;
    let (db, _) = new_york().await;
    let new_york = both(db).await;
    // No job charged twice, the same outcome line by line, the same total.
    assert_eq!(utc.2, 0);
    assert_eq!(new_york, utc);
    assert!(utc.0.contains("replayed:    10"), "{}", utc.0);
    // Job 1 started at 08:48:00 UTC, as jobcomp said ("@start":"2026-11-30T08:48:00").
    assert_eq!(new_york.4, "2026-11-30T08:48:00+00:00");
}

/// A jobcomp document of a run recorded before 2026-12-06, when jobcomp's
/// times were read in the cluster's zone, is read that way again: sent or
/// imported again it is what it was then (a replay, a revision), never a
/// second run hours away; and `audit --deep` reads every record as it was
/// read.
#[tokio::test]
async fn a_jobcomp_run_recorded_in_the_cluster_zone_is_read_that_way_again() {
    let (db, _) = new_york().await;
    let jobcomp = crate::fixtures::stripped("slurm_2205_lab_jobcomp.jsonl");
    // Recorded as before: read options without `jobcomp_utc`.
    let then = import_file(&db.pool, &jobcomp, "es.jsonl", Format::Jobcomp, None).await;
    assert_eq!((then.recorded, then.rejected_total()), (15, 0), "{then:#?}");
    let start = started(&db.pool, "1").await;
    // 08:48:00 read as New York's time: 13:48:00 UTC.
    assert_eq!(start, "2026-11-30T13:48:00+00:00");
    upgraded_holding_records(&db.pool).await;
    // The same documents imported again now: replays, nothing recorded.
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", jobcomp.to_str().unwrap()]));
    assert!(out.contains("recorded:    0"), "{out}");
    assert!(out.contains("replayed:    15"), "{out}");
    // One sent again with another exit code (as Slurm does after a
    // restart): a revision of the run recorded then, not a second run.
    let doc = std::fs::read_to_string(&jobcomp).unwrap();
    let line = doc.lines().find(|l| l.contains("\"jobid\":1,")).unwrap();
    let mut again: serde_json::Value = serde_json::from_str(line).unwrap();
    again["exit_code"] = serde_json::json!("0:15");
    let resent = jobcomp.with_extension("resent.jsonl");
    std::fs::write(&resent, format!("{again}\n")).unwrap();
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", resent.to_str().unwrap()]));
    assert!(out.contains("revised:     1"), "{out}");
    let (runs, records): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM job_record)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((runs, records), (15, 16));
    // Every record reads again to what is stored, each by its own reading.
    let report = hpc_ledger::service::deep::deep_audit(&db.pool).await.unwrap();
    assert_eq!(report.records, 16);
    assert!(report.differences.is_empty(), "{:#?}", report.differences.first());
    // sacct's records of the same jobs, back-filled now: the runs jobcomp
    // recorded then (hours off) are not charged a second time; each is
    // kept as a conflict naming why.
    let json = crate::fixtures::stripped("slurm_2205_lab_sacct.json");
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "sacct-json", json.to_str().unwrap()]));
    assert!(out.contains("rejected:    13"), "{out}");
    let twice: i64 = sqlx::query_scalar(
        "SELECT count(*) - count(DISTINCT (cluster_id, scheduler_job_id, coalesce(array_index, -1))) FROM job",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(twice, 0);
    let why: String =
        sqlx::query_scalar("SELECT reason FROM rejected_record WHERE source_format = 'sacct-json' LIMIT 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        why.contains("recorded from Slurm's jobcomp before migration 0049"),
        "{why}"
    );
    // Job 1 in slurmctld's jobcomp/filetxt log (its times New York's: 03:48
    // is 08:48 UTC): not charged a second time either.
    let filetxt = jobcomp.with_extension("filetxt.log");
    std::fs::write(
        &filetxt,
        "JobId=1 UserId=root(0) GroupId=root(0) Name=timeout JobState=TIMEOUT Partition=regular TimeLimit=1 \
         StartTime=2026-11-30T03:48:00 EndTime=2026-11-30T03:49:23 NodeList=c01 NodeCnt=1 ProcCnt=1 WorkDir=/tmp \
         ReservationName= Tres=cpu=1,mem=200M,node=1,billing=1 Account=pas1234 QOS=normal WcKey= Cluster=testclu \
         SubmitTime=2026-11-30T03:48:00 EligibleTime=2026-11-30T03:48:00 DerivedExitCode=0:0 ExitCode=0:0 \n",
    )
    .unwrap();
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp-filetxt", filetxt.to_str().unwrap()]));
    assert!(out.contains("recorded:    0"), "{out}");
    let why: String = sqlx::query_scalar("SELECT reason FROM rejected_record WHERE source_format = 'jobcomp-filetxt'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        why.contains("recorded from Slurm's jobcomp before migration 0049"),
        "{why}"
    );
    // A job of the same cluster never recorded before is read in UTC.
    let fresh = line.replace("\"jobid\":1,", "\"jobid\":991,");
    let new = jobcomp.with_extension("new.jsonl");
    std::fs::write(&new, format!("{fresh}\n")).unwrap();
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", new.to_str().unwrap()]));
    assert!(out.contains("recorded:    1"), "{out}");
    let start = started(&db.pool, "991").await;
    assert_eq!(start, "2026-11-30T08:48:00+00:00");
}

/// A jobcomp document rejected before 2026-12-06 (read then in its
/// cluster's zone) was never charged: `--retry-rejected` reads it as
/// documents are read now, its times in UTC.
#[tokio::test]
async fn a_jobcomp_rejection_of_before_is_retried_in_utc() {
    let (db, center) = new_york().await;
    let doc = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_lab_jobcomp.jsonl")).unwrap();
    let line = doc.lines().find(|l| l.contains("\"jobid\":1,")).unwrap();
    assert!(line.contains("\"account\":\"pas1234\""), "{line}");
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("retry-utc-{}.jsonl", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "{}\n",
            line.replace("\"account\":\"pas1234\"", "\"account\":\"pzs7778\"")
        ),
    )
    .unwrap();
    // Kept as before: read options without `jobcomp_utc`.
    let then = import_file(&db.pool, &path, "es.jsonl", Format::Jobcomp, None).await;
    assert_eq!(then.rejected_total(), 1, "{then:#?}");
    let fixed = format!("{center}\n[[project]]\ncode = \"PZS7778\"\n");
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&fixed).unwrap(), "t")
        .await
        .unwrap();
    let out = crate::harness::stdout(&db.cli(&["import", "--retry-rejected"]));
    assert!(out.contains("recorded:    1"), "{out}");
    let start = started(&db.pool, "1").await;
    assert_eq!(start, "2026-11-30T08:48:00+00:00");
    // And it reads again so (`audit --deep`): its options say UTC.
    deep_audit_reads_alike(&db.pool, 1).await;
}

/// A record of a run recorded before 2026-12-06 that no longer reads the
/// way records were read then is kept as a conflict of that run, never
/// charged as a second run: here a jobcomp document sent again with a new
/// end that, read as New York's time as jobcomp was then, falls in the hour
/// skipped when summer time began (2026-03-08, 02:00–03:00).
#[tokio::test]
async fn a_run_of_before_whose_record_no_longer_reads_so_is_a_conflict_not_a_second_run() {
    let (db, _) = new_york().await;
    let doc = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_lab_jobcomp.jsonl")).unwrap();
    let line = doc.lines().find(|l| l.contains("\"jobid\":1,")).unwrap();
    let ending = |end: &str, elapsed: i64| {
        let mut d: serde_json::Value = serde_json::from_str(line).unwrap();
        for (k, v) in [
            ("@submit", "2026-03-07T20:00:00"),
            ("@eligible", "2026-03-07T20:00:00"),
            ("@start", "2026-03-07T20:00:00"),
            ("@end", end),
        ] {
            d[k] = serde_json::json!(v);
        }
        d["elapsed"] = serde_json::json!(elapsed);
        format!("{d}\n")
    };
    let dir = scratch_dir("reads-no-more");
    let then = dir.join("then.jsonl");
    std::fs::write(&then, ending("2026-03-08T01:50:00", 21_000)).unwrap();
    // Recorded as before (without `jobcomp_utc`): 20:00 in New York, 01:00 UTC.
    let s = import_file(&db.pool, &then, "es.jsonl", Format::Jobcomp, None).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    assert_eq!(started(&db.pool, "1").await, "2026-03-08T01:00:00+00:00");
    upgraded_holding_records(&db.pool).await;
    // Sent again ending 40 minutes later: in UTC a fine record (a second
    // run at 20:00 UTC, were it read only so); read as then, it ends at
    // 02:30 in New York on a night that had no 02:30.
    let again = dir.join("again.jsonl");
    std::fs::write(&again, ending("2026-03-08T02:30:00", 23_400)).unwrap();
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", again.to_str().unwrap()]));
    assert!(out.contains("recorded:    0"), "{out}");
    assert!(out.contains("rejected:    1"), "{out}");
    let (runs, entries): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM ledger_entry)")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((runs, entries), (1, 1));
    let (kind, why): (String, String) = sqlx::query_as(
        "SELECT kind::text, reason FROM rejected_record WHERE resolved_at IS NULL AND job_key = 'testclu/1'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(kind, "conflict");
    assert!(
        why.contains("read as records were read before migration 0049") && why.contains("not charged as a second run"),
        "{why}"
    );
}

/// A rejected line of a run (another account of the same job) is resolved
/// when its run is recorded, compared under the reading the run was
/// recorded by: a jobcomp run recorded before 2026-12-06 (times in the
/// cluster's zone) and revised since matches a line kept then.
#[tokio::test]
async fn a_rejection_of_before_is_resolved_by_its_run_read_as_before() {
    let (db, _) = new_york().await;
    let doc = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_lab_jobcomp.jsonl")).unwrap();
    let line = doc.lines().find(|l| l.contains("\"jobid\":1,")).unwrap();
    let dir = scratch_dir("resolved-before");
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path
    };
    // Before: the job recorded, and a line of it naming an unknown account
    // kept as rejected; both read in New York's time.
    let recorded = write("recorded.jsonl", line.to_owned());
    let s = import_file(&db.pool, &recorded, "es.jsonl", Format::Jobcomp, None).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    let other = write(
        "other.jsonl",
        line.replace("\"account\":\"pas1234\"", "\"account\":\"pzs7778\""),
    );
    let s = import_file(&db.pool, &other, "other.jsonl", Format::Jobcomp, None).await;
    assert_eq!((s.recorded, s.rejected_total()), (0, 1), "{s:#?}");
    upgraded_holding_records(&db.pool).await;
    // Now the job is sent again with another exit code: a revision of the
    // run recorded then, which resolves the line kept then.
    let mut again: serde_json::Value = serde_json::from_str(line).unwrap();
    again["exit_code"] = serde_json::json!("0:15");
    let resent = write("resent.jsonl", again.to_string());
    let out = crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", resent.to_str().unwrap()]));
    assert!(out.contains("revised:     1"), "{out}");
    let (resolution, record): (Option<String>, Option<i64>) = sqlx::query_as(
        "SELECT resolution::text, resolved_record_id FROM rejected_record WHERE source_ref LIKE 'other.jsonl%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let latest: i64 = sqlx::query_scalar("SELECT max(id) FROM job_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (resolution.as_deref(), record),
        (Some("recorded_elsewhere"), Some(latest))
    );
}

/// PBS Pro writes an end record for a job array itself once all its
/// subjobs are done (`4[].server`, beside `4[1].server`, `4[2].server`):
/// since 2026-12-06 it is skipped, not charged as one more run on top of its
/// subjobs. One charged before stays as it was (a rule change re-prices
/// nothing), and imported again it is skipped, not charged a second time.
#[tokio::test]
async fn a_pbs_job_arrays_own_end_record_is_not_charged() {
    let db = fixture_db().await;
    let dir = scratch_dir("pbs-array");
    // OpenPBS's own record of array 4 (pull request #451), with a start as
    // PBS Pro writes it since, the fixtures' casper queue and project.
    let parent = |id: u32| {
        format!(
            "11/15/2017 01:23:58;E;{id}[].pbspro;user=ravi group=wheel account=\"SCSG0001\" jobname=STDIN queue=htc ctime=1510709028 qtime=1510709028 etime=1510709028 start=1510709030 array_indices=1-2 Resource_List.ncpus=1 Resource_List.nodect=1 Resource_List.place=pack Resource_List.select=1:ncpus=1 session=0 end=1510709038 Exit_status=0 run_count=1\n"
        )
    };
    let before = dir.join("before.log");
    std::fs::write(&before, parent(4)).unwrap();
    // Recorded as before (read options without `pbs_array_parents`): a job.
    let s = import_file(&db.pool, &before, "before.log", Format::Pbs, Some("casper")).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    let entries = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM ledger_entry")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(entries().await, 1);
    let import = |path: &std::path::Path| crate::harness::ok(&import_casper(&db, path));
    // The same file imported now: skipped, nothing charged again or reversed.
    let out = import(&before);
    assert!(out.contains("recorded:    0 "), "{out}");
    assert!(
        out.contains("job arrays' own end records (their subjobs are charged)"),
        "{out}"
    );
    assert_eq!(entries().await, 1);
    // A new array: its subjob is a run, the array's own record is not.
    let subjob = parent(5)
        .replace(";5[].pbspro;", ";5[1].pbspro;")
        .replace(" array_indices=1-2 ", " array_id=5[].pbspro array_index=1 ");
    let now = dir.join("now.log");
    std::fs::write(&now, format!("{subjob}{}", parent(5))).unwrap();
    let out = import(&now);
    assert!(out.contains("recorded:    1 "), "{out}");
    assert!(out.contains("skipped:     1"), "{out}");
    let runs: Vec<(String, Option<i32>)> = sqlx::query_as("SELECT scheduler_job_id, array_index FROM job ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        runs,
        [("4[].pbspro".to_owned(), None), ("5[].pbspro".to_owned(), Some(1))]
    );
    // Each record reads again as it was read.
    deep_audit_reads_alike(&db.pool, 2).await;
}

/// A job resized while it ran (the lab's real Slurm 22.05: 2 nodes from
/// 17:56:19, shrunk to 1 at 17:56:27, ended 17:56:59) is charged as its two
/// parts, whichever way it arrives: jobcomp's documents (the part after the
/// resize; its RESIZING document is the instant of the resize), then sacct's
/// records (the part before, RESIZING; the part after, a replay), or
/// `sacct --json` alone. Read before 2026-12-06 the part before was skipped
/// and sacct's part after refused (submitted after it started).
#[tokio::test]
async fn a_resized_job_is_charged_as_its_parts() {
    let parts = |db: &crate::harness::TestDb| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, String, i32, i32)>(
                "SELECT to_char(r.started_at AT TIME ZONE 'UTC', 'HH24:MI:SS'), to_char(r.ended_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
                        r.nodes, r.cores
                   FROM job_record r JOIN job j ON j.id = r.job_id
                  WHERE j.scheduler_job_id = '1' AND r.id = (SELECT max(id) FROM job_record x WHERE x.job_id = j.id)
                  ORDER BY r.started_at",
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let want = [
        ("17:56:19".to_owned(), "17:56:27".to_owned(), 2, 2),
        ("17:56:27".to_owned(), "17:56:59".to_owned(), 1, 1),
    ];
    let import = |db: &crate::harness::TestDb, format: &str, name: &str| {
        cli_import(db, format, &[], &crate::fixtures::stripped(name))
    };
    let db = fixture_db().await;
    let out = import(&db, "jobcomp", "slurm_2205_resize_jobcomp.jsonl");
    assert!(out.contains("recorded:    1 "), "{out}");
    assert!(out.contains("skipped:     1"), "{out}");
    // sacct's record of the part after (its Submit is the resize, not when
    // the job was submitted: read as unknown) is jobcomp's run again.
    let out = import(&db, "slurm", "slurm_2205_resize_sacct.txt");
    assert!(out.contains("recorded:    1 "), "{out}");
    assert_replayed(&out, 1);
    assert_eq!(parts(&db).await, want);
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM job")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 2);
    // Imported again: nothing new.
    let out = import(&db, "slurm", "slurm_2205_resize_sacct.txt");
    assert!(out.contains("recorded:    0 "), "{out}");
    let report = hpc_ledger::service::deep::deep_audit(&db.pool).await.unwrap();
    assert!(report.differences.is_empty(), "{:#?}", report.differences);
    // sacct --json alone, into another ledger: the same parts.
    let other = fixture_db().await;
    let out = import(&other, "sacct-json", "slurm_2205_resize_sacct.json");
    assert!(out.contains("recorded:    2 "), "{out}");
    assert_eq!(parts(&other).await, want);
    let report = hpc_ledger::service::deep::deep_audit(&other.pool).await.unwrap();
    assert_eq!(
        (report.records, report.differences.len()),
        (2, 0),
        "{:#?}",
        report.differences
    );
}

/// A PBS Pro job whose `select` chunks were packed onto one host is one
/// host's job (R3), not `nodect` nodes: read so since 2026-12-06. A run
/// recorded before, from `nodect`, is read that way again when its record
/// comes again (a replay, not a conflict), and `audit --deep` reads each
/// record as it was read.
#[tokio::test]
async fn a_pbs_pro_job_packed_on_one_host_is_charged_as_one_node() {
    let db = fixture_db().await;
    let dir = scratch_dir("pbs-hosts");
    // Two chunks of one core placed freely, both on crhtc67 (the shape of
    // a real OpenPBS record; NCAR's casper cluster of the fixtures, 36
    // cores a node at 0.01 a core-hour). 604 s.
    let packed = |id: u32| {
        format!(
            "06/01/2024 10:00:00;E;{id}.casper-pbs;user=u group=g account=\"SCSG0001\" queue=htc ctime=1717236000 start=1717236001 exec_host=crhtc67/0+crhtc67/1 exec_vnode=(crhtc67:ncpus=1:mem=307200kb)+(crhtc67:ncpus=1:mem=307200kb) Resource_List.mem=600mb Resource_List.ncpus=2 Resource_List.nodect=2 Resource_List.place=free Resource_List.select=2:ncpus=1:mem=300mb end=1717236605 Exit_status=0\n"
        )
    };
    let import_casper = |path: &std::path::Path| crate::harness::stdout(&import_casper(&db, path));
    let before = dir.join("before.log");
    std::fs::write(&before, packed(1)).unwrap();
    // Recorded as before (read options without `pbs_hosts`): 2 whole nodes.
    let s = import_file(&db.pool, &before, "before.log", Format::Pbs, Some("casper")).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    let charged = |job: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (i32, String)>(
                "SELECT r.nodes, e.amount::text FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
                   JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = $1 AND e.kind = 'job'",
            )
            .bind(job)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    // 72 cores × 604 s × 0.01 ÷ 3600 = 0.1208.
    assert_eq!(charged("1.casper-pbs").await, [(2, "0.12".to_owned())]);
    upgraded_holding_records(&db.pool).await;
    // The same file imported again now: a replay of that run, not a conflict.
    let out = import_casper(&before);
    assert_replayed(&out, 1);
    // A job recorded now: one host, 2 cores × 604 s × 0.01 ÷ 3600 = 0.0034.
    let now = dir.join("now.log");
    std::fs::write(&now, packed(2)).unwrap();
    let out = import_casper(&now);
    assert!(out.contains("recorded:    1"), "{out}");
    assert_eq!(charged("2.casper-pbs").await, [(1, "0.00".to_owned())]);
    deep_audit_reads_alike(&db.pool, 2).await;
}

/// A TORQUE 6 job whose memory was requested with `-L` (OSC's real Pitzer
/// record of job 16057: two tasks of one core and 4 GB each, here on one
/// host) is charged by that memory since 2026-12-06; a run recorded
/// before, by its cores alone, is read that way again when its record
/// comes again (a replay, not a conflict), and `audit --deep` reads each
/// record as it was read.
#[tokio::test]
async fn a_torque_job_of_before_with_its_memory_in_a_request_is_replayed_not_a_conflict() {
    let db = crate::harness::TestDb::new().await;
    // A card where memory outweighs cores: 1 GB a core, a core-second a
    // thousandth.
    fixture_center_with(
        &db.pool,
        r#"
[[cluster]]
name = "osc"
scheduler = "pbs"
[[cluster.node_type]]
name = "regular"
cores_per_node = 80
[cluster.queues]
newsyntax = "regular"
[[cluster.rate_card]]
node_type = "regular"
from = 2000-01-01
core_hour = 3.60
memory_per_core = "1GB"
[[project]]
code = "PZS0708"
"#,
    )
    .await;
    let dir = scratch_dir("torque-requests");
    let log = crate::fixtures::stripped("torque6_osc_pitzer_resource_request.log");
    let job = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(";E;16057."))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        // Its two tasks on one host (they ran on two, which is two whole
        // nodes whatever the memory: R3), so that the memory counts.
        .replace("exec_host=p0034/0+p0070/0", "exec_host=p0034/0-1")
        .replace("unique_node_count=2", "unique_node_count=1");
    assert_eq!(job.lines().count(), 1);
    assert!(job.contains("exec_host=p0034/0-1 "), "{job}");
    let before = dir.join("before.log");
    std::fs::write(&before, &job).unwrap();
    // Recorded as before (read options without `torque_requests`): 2 cores.
    let s = import_file(&db.pool, &before, "before.log", Format::Pbs, Some("osc")).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    let charged = || async {
        sqlx::query_as::<_, (String, String)>(
            "SELECT j.scheduler_job_id, e.amount::text FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
               JOIN job j ON j.id = r.job_id WHERE e.kind = 'job' ORDER BY j.scheduler_job_id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    // Ran 1541167467 → 1541167558: 91 s; 2 cores × 91 s ÷ 1000 = 0.182.
    let ran = job.split("start=").nth(1).unwrap();
    assert!(
        ran.starts_with("1541167467 ") && job.contains(" end=1541167558 "),
        "{job}"
    );
    assert_eq!(
        charged().await,
        [("16057.pitzer-batch.ten.osc.edu".to_owned(), "0.18".to_owned())]
    );
    upgraded_holding_records(&db.pool).await;
    let import = |path: &std::path::Path| cli_import(&db, "pbs", &["--cluster", "osc"], path);
    // The same record imported again now: a replay of that run.
    let out = import(&before);
    assert_replayed(&out, 1);
    // The same job under another id, recorded now: 8 GB on a 1 GB card is
    // 8 cores' worth: 8 × 91 s ÷ 1000 = 0.728.
    let now = dir.join("now.log");
    std::fs::write(&now, job.replace(";E;16057.", ";E;16058.")).unwrap();
    let out = import(&now);
    assert!(out.contains("recorded:    1"), "{out}");
    assert_eq!(
        charged().await,
        [
            ("16057.pitzer-batch.ten.osc.edu".to_owned(), "0.18".to_owned()),
            ("16058.pitzer-batch.ten.osc.edu".to_owned(), "0.73".to_owned())
        ]
    );
    deep_audit_reads_alike(&db.pool, 2).await;
}

/// The PBS readings of 2026-12-07 (migration 0056), on real records: FZK's
/// TORQUE job 710078 (`nodes=14:ppn=8+16:ppn=1`, `nodect` 30) ran on 17
/// hosts, and NCAR's PBS Pro `select=240:mpiprocs=36` held
/// `Resource_List.ncpus` = 8,640 cores. Runs recorded under the reading of
/// before (30 nodes, 240 cores) are read that way again when their records
/// come again: replays, not second charges; the same jobs under other ids
/// are charged as they read now.
#[tokio::test]
async fn pbs_totals_and_torque_hosts_size_a_job_and_a_run_of_before_is_replayed() {
    let db = crate::harness::TestDb::new().await;
    // Cheyenne's 36-core nodes, a core-second a thousandth.
    fixture_center_with(
        &db.pool,
        r#"
[[cluster]]
name = "cheyenne"
scheduler = "pbs"
[[cluster.node_type]]
name = "regular"
cores_per_node = 36
[cluster.queues]
regular = "regular"
[[cluster.rate_card]]
node_type = "regular"
from = 2000-01-01
core_hour = 3.60
memory_per_core = "2GB"
[[project]]
code = "ARAL0001"
"#,
    )
    .await;
    let dir = scratch_dir("pbs-0056");
    let fzk = std::fs::read_to_string(crate::fixtures::stripped("safe_fzk_torque_packed_nodes.log")).unwrap();
    assert!(fzk.starts_with("06/10/2009 08:53:39;E;710078."), "{fzk}");
    // tracejob prints the record's attributes without its type and id.
    let traced =
        std::fs::read_to_string(crate::fixtures::stripped("ncar_hpc_node_chaser_select_defaults.log")).unwrap();
    let (_, attrs) = traced.trim_end().split_once("  A    ").unwrap();
    let ncar = format!("02/09/2017 14:27:50;E;1.cheyenne;{attrs}\n");
    let files = [("fzk", "fzk.log", fzk), ("cheyenne", "cheyenne.log", ncar)];
    // Recorded before migration 0056 (read with 2026-12-06's readings only).
    for (cluster, name, text) in &files {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let options = ReadOptions {
            cluster: Some((*cluster).into()),
            project_from: Some(vec!["account".into(), "group".into()]),
            ..Default::default()
        }
        .now(hpc_ledger::domain::kinds::SourceFormat::Pbs)
        .before_0056();
        let s = import_file_read(&db.pool, &path, name, Format::Pbs, &options).await;
        assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    }
    let charged = || async {
        sqlx::query_as::<_, (String, i32, i32, String)>(
            "SELECT j.scheduler_job_id, r.nodes, r.cores, e.amount::text FROM ledger_entry e
               JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
              WHERE e.kind = 'job' ORDER BY j.scheduler_job_id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    // 710078: 480 s on 30 whole nodes of 8 cores, a core-hour 0.01: 0.32.
    // 1.cheyenne: 34 s of 240 cores (on 2 whole hosts, exclhost): 8.16.
    let before = [
        ("1.cheyenne".to_owned(), 2, 240, "8.16".to_owned()),
        ("710078.iwrcgpbs0.fzk.de".to_owned(), 30, 128, "0.32".to_owned()),
    ];
    assert_eq!(charged().await, before);
    sqlx::query("UPDATE pbs_reading_change SET records_before = true, migrated_at = now()")
        .execute(&db.pool)
        .await
        .unwrap();
    let import = |cluster: &str, path: &std::path::Path| {
        cli_import(
            &db,
            "pbs",
            &["--cluster", cluster, "--project-from", "account,group"],
            path,
        )
    };
    // The same records imported again now: replays of their runs.
    for (cluster, name, _) in &files {
        let out = import(cluster, &dir.join(name));
        assert_replayed(&out, 1);
    }
    assert_eq!(charged().await, before);
    // The same jobs under other ids, recorded now: 17 nodes (136 cores'
    // worth, 0.18133…) and 8,640 cores (293.76).
    for (cluster, name, text) in &files {
        let path = dir.join(format!("now-{name}"));
        std::fs::write(
            &path,
            text.replace(";E;710078.", ";E;910078.").replace(";E;1.", ";E;2."),
        )
        .unwrap();
        let out = import(cluster, &path);
        assert!(out.contains("recorded:    1"), "{out}");
    }
    let mut all = before.to_vec();
    all.insert(1, ("2.cheyenne".to_owned(), 2, 8640, "293.76".to_owned()));
    all.push(("910078.iwrcgpbs0.fzk.de".to_owned(), 17, 128, "0.18".to_owned()));
    assert_eq!(charged().await, all);
    deep_audit_reads_alike(&db.pool, 4).await;
}

/// A sacct export without NNodes or AllocTRES (AWS ParallelCluster's real
/// records, hpc-cost-simulator): job 845 ran on 4 nodes, which only its
/// AllocNodes says, and its plain ReqMem (Slurm 21.08 and later) is the
/// job's total. Read so since 2026-12-06; a run recorded before (1 node)
/// is read that way again when its record comes again: a replay.
#[tokio::test]
async fn alloc_nodes_size_a_sacct_job_and_a_run_of_before_is_replayed() {
    let db = crate::harness::TestDb::new().await;
    // 4-core nodes of 32 GB; a core-second a thousandth.
    fixture_center_with(
        &db.pool,
        r#"
[[cluster]]
name = "pcluster"
scheduler = "slurm"
[[cluster.node_type]]
name = "t3"
cores_per_node = 4
memory_per_node = "32GB"
[cluster.queues]
batch = "t3"
[[cluster.rate_card]]
node_type = "t3"
from = 2000-01-01
core_hour = 3.60
memory_per_core = "8GB"
[[project]]
code = "aws"
"#,
    )
    .await;
    let text = std::fs::read_to_string(crate::fixtures::stripped("awssamples_hcs_sacct_allocnodes.txt")).unwrap();
    let raw = include_str!("../fixtures/accounting/awssamples_hcs_sacct_allocnodes.txt");
    let fields = raw
        .lines()
        .find(|l| l.starts_with("# State,JobID"))
        .unwrap()
        .trim_start_matches("# ");
    // The header sacct prints for those fields, with a Partition and an
    // Account (the export names neither) added to it and to the job's lines.
    let export = |id: &str, more: &str| {
        let lines: String = text
            .lines()
            .filter(|l| l.split('|').nth(1).is_some_and(|j| j == "845" || j == "845.batch"))
            .map(|l| {
                let l = l.replacen("|845", &format!("|{id}"), 1);
                match more {
                    // As a Slurm before 21.08 printed it: 4 nodes of 7628M.
                    "" => format!("{l}|batch|aws\n"),
                    _ => format!("{}|batch|aws|4\n", l.replacen("|30512M|", "|7628Mn|", 1)),
                }
            })
            .collect();
        format!("{}|Partition|Account{more}\n{lines}", fields.replace(',', "|"))
    };
    let job = |id: &str| export(id, "");
    let dir = scratch_dir("alloc-nodes");
    let before = dir.join("before.txt");
    std::fs::write(&before, job("845")).unwrap();
    // Recorded as before (without `slurm_totals`): 1 node, 4 cores, 301 s.
    let s = import_file(&db.pool, &before, "before.txt", Format::Slurm, Some("pcluster")).await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    let charged = || async {
        sqlx::query_as::<_, (String, i32, String)>(
            "SELECT j.scheduler_job_id, r.nodes, e.amount::text FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
               JOIN job j ON j.id = r.job_id WHERE e.kind = 'job' ORDER BY j.scheduler_job_id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    // 4 cores × 301 s ÷ 1000 = 1.204.
    assert_eq!(charged().await, [("845".to_owned(), 1, "1.20".to_owned())]);
    upgraded_holding_records(&db.pool).await;
    let import = |path: &std::path::Path| cli_import(&db, "slurm", &["--cluster", "pcluster"], path);
    let out = import(&before);
    assert_replayed(&out, 1);
    // The same job under another id, recorded now: 4 whole nodes (R3),
    // 16 cores × 301 s ÷ 1000 = 4.816.
    let now = dir.join("now.txt");
    std::fs::write(&now, job("847")).unwrap();
    let out = import(&now);
    assert!(out.contains("recorded:    1"), "{out}");
    assert_eq!(
        charged().await,
        [
            ("845".to_owned(), 1, "1.20".to_owned()),
            ("847".to_owned(), 4, "4.82".to_owned())
        ]
    );
    // Job 849 recorded before from an export with NNodes and a per-node
    // ReqMem (4 nodes of 7628M, read alike both ways), then from this one:
    // charged as it reads now, so it is not read the old way (1 node),
    // which would be a conflict.
    let with_nnodes = dir.join("with-nnodes.txt");
    std::fs::write(&with_nnodes, export("849", "|NNodes")).unwrap();
    let s = import_file(
        &db.pool,
        &with_nnodes,
        "with-nnodes.txt",
        Format::Slurm,
        Some("pcluster"),
    )
    .await;
    assert_eq!((s.recorded, s.rejected_total()), (1, 0), "{s:#?}");
    let without = dir.join("without.txt");
    std::fs::write(&without, job("849")).unwrap();
    let out = import(&without);
    assert!(out.contains("rejected:    0"), "{out}");
    assert!(out.contains("recorded:    0"), "{out}");
    assert_eq!(charged().await[2], ("849".to_owned(), 4, "4.82".to_owned()));
    deep_audit_reads_alike(&db.pool, 3).await;
}

/// A Slurm job's time suspended is not charged (migration 0060), on real
/// records of Slurm 22.05.8 (tests/fixtures/accounting/slurm_2205_suspend_*):
/// job 1, 2 cores, ran from 08:06:12 to 08:07:16 and was suspended 54 s of
/// those 64, while job 4 held the same cores. Read from `Suspended`, or from
/// `Elapsed` (Open XDMoD's layout has no `Suspended`): 10 s charged. A run
/// recorded before, charged its 64 s, is replayed when its record comes
/// again; a run recorded from jobcomp (which says nothing of suspension) is
/// a conflict that names the seconds suspended. The audit recomputes each
/// charge from the record's seconds suspended.
#[tokio::test]
async fn suspended_time_is_not_charged_and_a_run_of_before_is_replayed() {
    let db = crate::harness::TestDb::new().await;
    // The lab's 2-CPU nodes; a core-second a thousandth.
    fixture_center_with(
        &db.pool,
        r#"
[[cluster]]
name = "rv3clu"
scheduler = "slurm"
[[cluster.node_type]]
name = "regular"
cores_per_node = 2
[cluster.queues]
one = "regular"
regular = "regular"
[[cluster.rate_card]]
node_type = "regular"
from = 2000-01-01
core_hour = 3.60
memory_per_core = "1GB"
"#,
    )
    .await;
    let dir = scratch_dir("suspended");
    let xdmod = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_suspend_sacct.txt")).unwrap();
    let with_field = std::fs::read_to_string(crate::fixtures::stripped(
        "slurm_2205_suspend_sacct_suspended_field.txt",
    ))
    .unwrap();
    // Job 1's line of each, under another job id.
    let job_one = |text: &str, id: &str| {
        let header = text.lines().next().unwrap();
        let line = text.lines().find(|l| l.starts_with("1|1|")).unwrap();
        format!("{header}\n{}\n", line.replacen("1|1|", &format!("{id}|{id}|"), 1))
    };
    let before = dir.join("before.txt");
    std::fs::write(&before, &xdmod).unwrap();
    // Recorded before migration 0060: job 1 charged its whole 64 s.
    let options = ReadOptions {
        cluster: Some("rv3clu".into()),
        ..Default::default()
    }
    .now(hpc_ledger::domain::kinds::SourceFormat::Slurm)
    .before_0060();
    let s = import_file_read(&db.pool, &before, "before.txt", Format::Slurm, &options).await;
    assert_eq!((s.recorded, s.rejected_total()), (9, 0), "{s:#?}");
    let charged = |id: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (i32, String)>(
                "SELECT r.suspended_seconds, sum(e.amount)::text FROM ledger_entry e
                   JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
                  WHERE e.kind = 'job' AND j.scheduler_job_id = $1 GROUP BY r.id",
            )
            .bind(id)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    // 2 cores × 64 s ÷ 1000 = 0.128.
    assert_eq!(charged("1").await, [(0, "0.13".to_owned())]);
    // Job 1 as jobcomp posted it, under id 104, also recorded before.
    let jobcomp = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_suspend_jobcomp.jsonl")).unwrap();
    let doc = jobcomp.lines().find(|l| l.starts_with(r#"{"jobid":1,"#)).unwrap();
    let posted = |id: &str| {
        let path = dir.join(format!("jobcomp-{id}.jsonl"));
        std::fs::write(
            &path,
            format!("{}\n", doc.replacen(r#""jobid":1,"#, &format!(r#""jobid":{id},"#), 1)),
        )
        .unwrap();
        crate::harness::stdout(&db.cli(&["import", "--format", "jobcomp", path.to_str().unwrap()]))
    };
    assert!(posted("104").contains("recorded:    1"));
    sqlx::query("UPDATE suspension_reading_change SET records_before = true, migrated_at = now()")
        .execute(&db.pool)
        .await
        .unwrap();
    let import = |path: &std::path::Path| cli_import(&db, "slurm", &["--cluster", "rv3clu"], path);
    // The same records again, and job 1 with its Suspended field: replays.
    let out = import(&before);
    assert_replayed(&out, 9);
    let again = dir.join("again.txt");
    std::fs::write(&again, job_one(&with_field, "1")).unwrap();
    let out = import(&again);
    assert_replayed(&out, 1);
    assert_eq!(charged("1").await, [(0, "0.13".to_owned())]);
    // Its sacct record, after: a replay too (any export of a run recorded
    // before was charged whole).
    let path = dir.join("104.txt");
    std::fs::write(&path, job_one(&with_field, "104")).unwrap();
    let out = import(&path);
    assert_replayed(&out, 1);
    assert_eq!(charged("104").await, [(0, "0.13".to_owned())]);
    // Job 1 under other ids, recorded now: from Elapsed (10 s of 64) and
    // from Suspended (54 s): 2 cores × 10 s ÷ 1000 = 0.02.
    for (id, text) in [("101", &xdmod), ("102", &with_field)] {
        let path = dir.join(format!("{id}.txt"));
        std::fs::write(&path, job_one(text, id)).unwrap();
        let out = import(&path);
        assert!(out.contains("recorded:    1"), "{out}");
    }
    assert_eq!(charged("101").await, [(54, "0.02".to_owned())]);
    assert_eq!(charged("102").await, [(54, "0.02".to_owned())]);
    let show = crate::harness::stdout(&db.cli(&["job", "show", "rv3clu/101"]));
    assert!(show.contains("suspended 54 s of it (not charged)"), "{show}");
    // Recorded from jobcomp first now (its `elapsed` counts the
    // suspension): 0.13; its sacct record then is a conflict naming the
    // seconds.
    assert!(posted("103").contains("recorded:    1"));
    let path = dir.join("103.txt");
    std::fs::write(&path, job_one(&with_field, "103")).unwrap();
    let out = import(&path);
    assert!(out.contains("rejected:    1"), "{out}");
    let reason: String = sqlx::query_scalar("SELECT reason FROM rejected_record WHERE resolved_at IS NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(reason.contains("suspended 0 s -> 54 s"), "{reason}");
    assert_eq!(charged("103").await, [(0, "0.13".to_owned())]);
    // Every charge recomputed by the audit's SQL as charged.
    let findings: i64 = sqlx::query_scalar("SELECT count(*) FROM audit.discrepancies")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(findings, 0);
    let wall: Vec<(String, i64, i32)> = sqlx::query_as(
        "SELECT job_id, wall_seconds, suspended_seconds FROM audit.job_charges
          WHERE job_id IN ('1', '101', '103') ORDER BY job_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        wall,
        [
            ("1".to_owned(), 64, 0),
            ("101".to_owned(), 10, 54),
            ("103".to_owned(), 64, 0)
        ]
    );
    deep_audit_reads_alike(&db.pool, 13).await;
}

/// Real Slurm 22.05.8 runs of suspended jobs (tests/fixtures/accounting/
/// slurm_2205_suspend_all_sacct.txt): each charged for what it ran, read
/// from `Suspended` or, without that field, from `Elapsed`, alike. Job 6,
/// resized while suspended, has an instant in `Suspended` and 0 in
/// `Elapsed` on both parts, which say nothing: its parts are charged from
/// start to end (25 s of them suspended), as before suspension was read,
/// not nothing.
#[tokio::test]
async fn real_suspended_cancelled_requeued_and_resized_jobs_are_charged_as_their_records_say() {
    // Two-core nodes at 36.00 a core-hour: a core-second is 0.01.
    let center = r#"
[[cluster]]
name = "rv2lab"
scheduler = "slurm"
time_zone = "UTC"
[[cluster.node_type]]
name = "regular"
cores_per_node = 2
[cluster.queues]
regular = "regular"
[[cluster.rate_card]]
node_type = "regular"
from = 2000-01-01
core_hour = 36.00
memory_per_core = "8GB"
[[project]]
code = "rv2acct"
"#;
    let text = std::fs::read_to_string(crate::fixtures::stripped("slurm_2205_suspend_all_sacct.txt")).unwrap();
    // The same output without its Suspended field (the 11th), as Open
    // XDMoD's fields have it.
    let without: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split('|').collect();
            assert_eq!(
                f[10].chars().next().map(|c| c == 'S' || c.is_ascii_digit()),
                Some(true),
                "{l}"
            );
            f.remove(10);
            format!("{}\n", f.join("|"))
        })
        .collect();
    let dir = scratch_dir("suspend-all");
    let mut seen = Vec::new();
    for (name, body) in [("with.txt", text.clone()), ("without.txt", without)] {
        let db = crate::harness::TestDb::new().await;
        fixture_center_with(&db.pool, center).await;
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let out = crate::harness::stdout(&db.cli(&["import", "--format", "slurm", path.to_str().unwrap()]));
        assert!(
            out.contains("recorded:    12") && out.contains("rejected:    0"),
            "{name}: {out}"
        );
        let charged: Vec<(String, i32, String)> = sqlx::query_as(
            "SELECT j.scheduler_job_id, r.suspended_seconds, e.amount::text FROM ledger_entry e
               JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
              ORDER BY j.scheduler_job_id, j.started_at",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let findings: i64 = sqlx::query_scalar("SELECT count(*) FROM audit.discrepancies")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(findings, 0, "{name}");
        seen.push(charged);
    }
    let want: Vec<(String, i32, String)> = [
        ("1", 0, "0.01"),
        // Cancelled while suspended: its End is the suspension, 10 s.
        ("2", 0, "0.10"),
        // 40 s, 15 suspended; 60 s, twice 10 suspended.
        ("3", 15, "0.25"),
        ("4", 20, "0.40"),
        // Suspended 10 s of its first run's 20; its second run, 30 s.
        ("5", 10, "0.10"),
        ("5", 0, "0.30"),
        // Resized while suspended, from 2 nodes (2 × 2 cores, R3) to 1 core:
        // 4 cores × 26 s, then 1 × 64 s, whole.
        ("6", 0, "1.04"),
        ("6", 0, "0.64"),
        // Resized: 4 × 10 s, then 1 × 20 s (from the resize).
        ("7", 0, "0.40"),
        ("7", 0, "0.20"),
        // Suspended 10 s of its 20 before the resize: 4 × 10 s; then 20 s.
        ("8", 10, "0.40"),
        ("8", 0, "0.20"),
    ]
    .iter()
    .map(|(j, s, a)| (j.to_string(), *s, a.to_string()))
    .collect();
    assert_eq!(seen[0], want);
    assert_eq!(seen[1], want);
}

/// A headerless dump imported without `--fields` is kept line by line as
/// malformed ("name the fields"); imported again with its fields, the jobs
/// it charges resolve their lines as recorded and the lines it skips (job
/// steps here; a job not ended or never started likewise) resolve theirs as
/// skipped: nothing is left open that the advised fix does not clear.
#[tokio::test]
async fn a_headerless_dump_read_again_with_its_fields_resolves_every_line() {
    let db = fixture_db().await;
    // APEL's real headerless lines: jobs and job steps (`.batch`).
    let body = std::fs::read_to_string(crate::fixtures::stripped("apel_slurm_sacct_parsable2.log")).unwrap();
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("headerless-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dump.txt");
    std::fs::write(&file, &body).unwrap();
    let f = file.to_str().unwrap();
    let lines = body.lines().count() as i64;
    let import = |extra: &[&str]| {
        let mut args = vec![
            "import",
            "--format",
            "slurm",
            "--cluster",
            "apel",
            "--default-project",
            "gridpp",
        ];
        args.extend_from_slice(extra);
        args.push(f);
        db.cli(&args)
    };
    let o = import(&[]);
    assert_eq!(o.status.code(), Some(4), "{}", crate::harness::stderr(&o));
    assert!(
        crate::harness::stdout(&o).contains("fields and no header"),
        "{}",
        crate::harness::stdout(&o)
    );
    let open = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(open().await, lines, "every line kept");
    let fields =
        "JobID,JobName,User,Group,Start,End,Elapsed,CPUTimeRAW,Partition,NCPUS,NNodes,NodeList,MaxRSS,MaxVMSize,State";
    let out = crate::harness::ok(&import(&["--fields", fields]));
    assert!(out.contains("rejected:    0"), "{out}");
    assert_eq!(open().await, 0, "{out}");
    let resolved: Vec<(String, i64)> =
        sqlx::query_as("SELECT resolution, count(*) FROM rejected_record GROUP BY resolution ORDER BY resolution")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let skipped = resolved.iter().find(|(r, _)| r == "skipped").map_or(0, |(_, n)| *n);
    assert!(
        skipped > 0 && resolved.iter().map(|(_, n)| n).sum::<i64>() == lines,
        "{resolved:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
