//! `job record`, `import` and `rejected` as an operator runs them: outputs
//! and exit codes.

use crate::fixtures::{fixture_db, stripped};
use crate::harness::{TestDb, cli_with_env, ok, stderr, stdout};

/// `job record` of job testclu/77, with flags replaced or added.
fn record(db: &TestDb, changes: &[&str]) -> std::process::Output {
    let mut flags: Vec<(String, Option<String>)> = [
        ("--cluster", "testclu"),
        ("--job-id", "77"),
        ("--project", "pas1234"),
        ("--queue", "regular"),
        ("--cores", "4"),
        ("--memory", "32GB"),
        ("--submit", "2026-10-05T09:00:00Z"),
        ("--start", "2026-10-05T09:10:00Z"),
        ("--end", "2026-10-05T11:10:00Z"),
        ("--state", "COMPLETED"),
        ("--exit-code", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
    .collect();
    let mut i = 0;
    while i < changes.len() {
        let name = changes[i].to_string();
        let value = changes
            .get(i + 1)
            .filter(|v| !v.starts_with("--"))
            .map(|v| v.to_string());
        i += if value.is_some() { 2 } else { 1 };
        match flags.iter_mut().find(|(k, _)| *k == name) {
            Some(f) => f.1 = value,
            None => flags.push((name, value)),
        }
    }
    let mut args = vec!["job".to_string(), "record".to_string()];
    for (k, v) in flags {
        args.push(k);
        args.extend(v);
    }
    db.cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[tokio::test]
async fn job_record_from_an_epilogue() {
    let db = fixture_db().await;
    // 32 GB at 4 GB per core = 8 effective cores, but a single-node job is
    // charged at most its 4-core node (charging rules 2): 4 cores for 2 h at 0.01.
    let o = record(&db, &[]);
    assert_eq!(ok(&o), "recorded testclu/77: 1 entry totalling 0.08 in 2026-10\n");
    assert_eq!(
        ok(&record(&db, &[])),
        "replayed testclu/77: already recorded with this content\n"
    );
    // A different exit code does not change the charge.
    let o = record(&db, &["--exit-code", "1"]);
    assert_eq!(
        ok(&o),
        "revised testclu/77: kept as revision 2 (the charge does not change)\n"
    );
    // A different end does: refused, exit 3, kept.
    let mut args = vec!["--end", "2026-10-05T12:10:00Z"];
    let o = record(&db, &args);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).starts_with("error: testclu/77 not recorded: conflicts with the job already recorded (end 2026-10-05 11:10:00 UTC -> 2026-10-05 12:10:00 UTC)"), "{}", stderr(&o));
    // … unless superseded: the old 0.08 is reversed, 0.12 posted.
    args.push("--supersede");
    let o = record(&db, &args);
    assert_eq!(
        ok(&o),
        "superseded testclu/77: revision 3, 1 entry reversed, new charges 0.12 in 2026-10\n"
    );
    let net: rust_decimal::Decimal = sqlx::query_scalar("SELECT sum(amount) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(net.to_string(), "0.12");
    // A conflict names the project and the node type, not their ids: the
    // office reads it before a supersede that moves the charge.
    let o = record(
        &db,
        &[
            "--end",
            "2026-10-05T12:10:00Z",
            "--project",
            "PZS0001",
            "--queue",
            "hugemem",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("(queue regular -> hugemem, project PAS1234 -> PZS0001, node type regular -> hugememory)"),
        "{}",
        stderr(&o)
    );

    // One JSON object on stdin, JSON outcome out.
    let json = r#"{"cluster":"testclu","job_id":"78","array_index":3,"project":"PZS0001","queue":"gpu","cores":2,"gpus":1,"start":"2026-10-06T00:00:00Z","end":"2026-10-06T01:00:00Z"}"#;
    let o = cli_with_env(
        &["job", "record", "--json", "--format", "json"],
        &[("DATABASE_URL", &db.url)],
        Some(json),
    );
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(v["outcome"], "recorded");
    assert_eq!(v["job"], "testclu/78_3");
    // 2 cores × 0.02 + 1 GPU-hour × 0.50
    assert_eq!(v["amount"], "0.54");
}

/// A record the database could not take now (a statement cancelled, a lock
/// waited for past `lock_timeout`, as behind a month's close) is not the
/// record's fault: not kept as a rejection nobody retries (`serve` answered
/// Slurm 200 for it, and the job was never charged), but an error, and
/// recorded when sent again.
#[tokio::test]
async fn a_record_the_database_cannot_take_now_is_an_error_not_a_rejection() {
    let db = fixture_db().await;
    crate::harness::lock_timeout_200ms(&db.pool).await;
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::raw_sql("LOCK TABLE ledger_entry IN SHARE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let o = record(&db, &["--job-id", "400"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("the database could not record now") && stderr(&o).contains("lock timeout"),
        "{}",
        stderr(&o)
    );
    holder.rollback().await.unwrap();
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 0);
    assert_eq!(
        ok(&record(&db, &["--job-id", "400"])),
        "recorded testclu/400: 1 entry totalling 0.08 in 2026-10\n"
    );
}

/// The runs whose job id is LIKE `like`: (job id, array index) as recorded.
async fn runs_of(db: &TestDb, like: &str) -> Vec<(String, Option<i32>)> {
    sqlx::query_as("SELECT scheduler_job_id, array_index FROM job WHERE scheduler_job_id LIKE $1 ORDER BY id")
        .bind(like)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// An epilogue that names an array task as `sacct` does (`--job-id 300_4`)
/// records the task `sacct` reads from `300_4`: job 300, index 4, one run
/// whichever way it comes (it was job "300_4", a second run, charged twice).
#[tokio::test]
async fn an_array_task_named_in_its_job_id_is_the_task_sacct_names() {
    let db = fixture_db().await;
    assert_eq!(
        ok(&record(&db, &["--job-id", "300_4"])),
        "recorded testclu/300_4: 1 entry totalling 0.08 in 2026-10\n"
    );
    assert_eq!(runs_of(&db, "300%").await, [("300".to_owned(), Some(4))]);
    // The same task with its index given apart, as sacct's line reads.
    assert_eq!(
        ok(&record(&db, &["--job-id", "300", "--array-index", "4"])),
        "replayed testclu/300_4: already recorded with this content\n"
    );
    // Both ways at once, and an index past the ledger's: refused, kept.
    let o = record(&db, &["--job-id", "300_4", "--array-index", "5"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "the job id 300_4 names array task 4 of job 300, and array index 5 is given too: \
             give the array's job id (300) with the task's index"
        ),
        "{}",
        stderr(&o)
    );
    let o = record(&db, &["--job-id", "301_2147483648"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("an index out of range (at most 2147483647)"),
        "{}",
        stderr(&o)
    );
    // A task refused for its account, then charged when sent the other way:
    // its rejection is resolved by that record.
    let o = record(&db, &["--job-id", "302_4", "--project", "NOPE"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    ok(&record(&db, &["--job-id", "302", "--array-index", "4"]));
    let open: Vec<String> =
        sqlx::query_scalar("SELECT job_key FROM audit.rejections WHERE status = 'open' AND job_key LIKE '%302%'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(open.is_empty(), "{open:?}");
    // Read again from their raw records, the tasks are the runs they are.
    let deep = db.cli(&["audit", "--deep"]);
    assert_eq!(deep.status.code(), Some(0), "{}{}", stdout(&deep), stderr(&deep));
    // Corrected by the name it was recorded with.
    ok(&db.cli(&[
        "reverse",
        "--cluster",
        "testclu",
        "--job-id",
        "300_4",
        "--reason",
        "test",
    ]));
    let (reversals, net): (i64, rust_decimal::Decimal) =
        sqlx::query_as("SELECT count(*) FILTER (WHERE kind = 'reversal'), sum(amount) FROM ledger_entry")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    // Job 302's task is left.
    assert_eq!((reversals, net.to_string()), (1, "0.08".to_owned()));
}

/// A run recorded before 2026-12-07 from `--job-id 300_4` (job "300_4",
/// no index; migration 0053 notes that the ledger holds such runs) stays
/// that run: the task sent again either way, or imported from sacct, is
/// its record, not a second charge.
#[tokio::test]
async fn an_array_task_recorded_under_its_job_id_before_stays_that_run() {
    let db = fixture_db().await;
    ok(&record(&db, &["--job-id", "300_4"]));
    ok(&record(&db, &["--job-id", "0303_04"]));
    // The runs as they were recorded before (its records' fingerprints name
    // no job id: they are what they were).
    sqlx::raw_sql(
        "ALTER TABLE job DISABLE TRIGGER job_append_only;
         UPDATE job SET scheduler_job_id = '300_4', array_index = NULL WHERE scheduler_job_id = '300';
         UPDATE job SET scheduler_job_id = '0303_04', array_index = NULL WHERE scheduler_job_id = '0303';
         ALTER TABLE job ENABLE ALWAYS TRIGGER job_append_only;
         UPDATE array_task_reading SET runs_before = true;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        ok(&record(&db, &["--job-id", "300_4"])),
        "replayed testclu/300_4: already recorded with this content\n"
    );
    assert_eq!(
        ok(&record(&db, &["--job-id", "300", "--array-index", "4"])),
        "replayed testclu/300_4: already recorded with this content\n"
    );
    // A revision of it too, and its correction by that name.
    assert_eq!(
        ok(&record(
            &db,
            &["--job-id", "300", "--array-index", "4", "--exit-code", "1"]
        )),
        "revised testclu/300_4: kept as revision 2 (the charge does not change)\n"
    );
    assert_eq!(runs_of(&db, "300%").await, [("300_4".to_owned(), None)]);
    // Sent as it was then, with leading zeros.
    assert_eq!(
        ok(&record(&db, &["--job-id", "0303_04"])),
        "replayed testclu/0303_04: already recorded with this content\n"
    );
    let deep = db.cli(&["audit", "--deep"]);
    assert_eq!(deep.status.code(), Some(0), "{}{}", stdout(&deep), stderr(&deep));
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "testclu",
        "--job-id",
        "300_4",
        "--fraction",
        "0.5",
        "--reason",
        "test",
    ]));
    let net: rust_decimal::Decimal = sqlx::query_scalar("SELECT sum(amount) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(net.to_string(), "0.12");
    // A task charged twice, once each way (as before the note existed): a
    // correction by its name says which entries are which.
    sqlx::raw_sql("UPDATE array_task_reading SET runs_before = false")
        .execute(&db.pool)
        .await
        .unwrap();
    ok(&record(&db, &["--job-id", "300", "--array-index", "4", "--cores", "2"]));
    let o = db.cli(&[
        "reverse",
        "--cluster",
        "testclu",
        "--job-id",
        "300_4",
        "--reason",
        "twice",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("testclu/300_4 names two runs: array task 4 of job 300 (entries 4), and job 300_4 as recorded before 2026-12-07 (entries 1, 3): correct each by its entry (--entry)"),
        "{}",
        stderr(&o)
    );
    // A run whose job id in that form came with an index too (refused now)
    // is that run's too (its raw record is not what it was: no deep audit).
    ok(&record(&db, &["--job-id", "301", "--array-index", "5"]));
    sqlx::raw_sql(
        "ALTER TABLE job DISABLE TRIGGER job_append_only;
         UPDATE job SET scheduler_job_id = '301_4' WHERE scheduler_job_id = '301';
         ALTER TABLE job ENABLE ALWAYS TRIGGER job_append_only;
         UPDATE array_task_reading SET runs_before = true;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        ok(&record(&db, &["--job-id", "301_4", "--array-index", "5"])),
        "replayed testclu/301_4_5: already recorded with this content\n"
    );
}

#[tokio::test]
async fn job_record_errors_have_their_own_exit_codes_and_are_kept() {
    let db = fixture_db().await;
    let o = record(&db, &["--project", "NOPE"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        stderr(&o).contains("testclu/77 not recorded: unknown project \"NOPE\""),
        "{}",
        stderr(&o)
    );
    let o = cli_with_env(
        &["job", "record", "--json"],
        &[("DATABASE_URL", &db.url)],
        Some("{\"job_id\": 1, \"cores\": 2, \"start\": 1, \"end\": 2, \"colour\": 3}"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown field `colour`"), "{}", stderr(&o));
    let o = record(&db, &["--start", "2026-13-01T00:00:00Z"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("start: \"2026-13-01T00:00:00Z\" is not a time"),
        "{}",
        stderr(&o)
    );
    // A job that never started charges nothing and is not an error.
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "testclu",
        "--job-id",
        "79",
        "--project",
        "pas1234",
        "--cores",
        "1",
    ]);
    assert_eq!(
        ok(&o),
        "not charged: one of the jobs that never started (nothing to charge)\n"
    );
    // The rejected ones are listed, with where they came from and why.
    let list = ok(&db.cli(&["rejected"]));
    let rows: Vec<&str> = list.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{list}");
    assert!(
        rows[0].contains("job record") && rows[0].contains("testclu/77") && rows[0].contains("unknown_project"),
        "{list}"
    );
    assert!(
        rows[1].contains("malformed") && rows[1].contains("unknown field `colour`"),
        "{list}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&["rejected", "--format", "json"]))).unwrap();
    assert_eq!(json[0]["kind"], "unknown_project");
    assert_eq!(json[0]["source_format"], "cli");
}

#[tokio::test]
async fn import_from_files_and_stdin() {
    let db = fixture_db().await;
    let file = stripped("apel_torque_accounting_E.log");
    let args = [
        "import",
        "--format",
        "pbs",
        "--cluster",
        "ral",
        "--project-from",
        "account,group",
        file.to_str().unwrap(),
    ];
    let o = db.cli(&args);
    // A conflict: kept, exit 4.
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let out = stdout(&o);
    // 21048463: 0.07; 21010040: 0 s; 24940336.b0: 1 core for 12767 s = 0.04; 37803854: 56 s = 0.00;
    // 21414868 and 21430205 (`nodes=1pn=4`, read from exec_host: 4 slots on one host):
    // 4 cores for 12,144 s = 0.13 and for 17,012 s = 0.19.
    assert!(out.contains("recorded:    6 (charged 0.43)"), "{out}");
    assert!(
        out.contains("rejected:    1 (kept; fix the cause, then `hpc-ledger import --retry-rejected`)"),
        "{out}"
    );
    assert!(out.contains("apel_torque_accounting_E.log:4 (ral/24940336.b0): conflicts with the job already recorded (end 2015-11-30 23:39:52 UTC -> 2015-11-30 23:42:06 UTC)"), "{out}");
    // The same file again: replays, and the same rejections (not duplicated).
    let out = stdout(&db.cli(&args));
    assert!(out.contains("replayed:    6"), "{out}");
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 1);
    // JSON lines from stdin, summary as JSON.
    let jobs = "{\"cluster\":\"testclu\",\"job_id\":\"9\",\"project\":\"pas1234\",\"queue\":\"regular\",\"cores\":1,\"start\":\"2026-10-01T00:00:00Z\",\"end\":\"2026-10-01T01:00:00Z\"}\n";
    let o = cli_with_env(
        &["import", "--format", "jsonl", "--output", "json"],
        &[("DATABASE_URL", &db.url)],
        Some(jobs),
    );
    let s: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(s["recorded"], 1);
    assert_eq!(s["charged"], "0.01");
    let o = db.cli(&["import", "--format", "slurm", "/nonexistent.txt"]);
    assert!(stderr(&o).contains("error: opening /nonexistent.txt"), "{}", stderr(&o));
}

/// A JSON job of testclu for `import --format jsonl`.
fn json_job(id: u32, extra: &str) -> String {
    format!(
        "{{\"cluster\":\"testclu\",\"job_id\":\"{id}\",\"project\":\"pas1234\",\"queue\":\"regular\",\"cores\":1,\
         \"start\":\"2026-10-01T00:00:00Z\",\"end\":\"2026-10-01T01:00:00Z\"{extra}}}\n"
    )
}

async fn counts(db: &TestDb) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM ledger_entry),
                (SELECT count(*) FROM rejected_record)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn absurd_and_damaged_input_is_refused_with_its_reason_and_loses_nothing_else() {
    // Issue 13, items 12 and 13.
    let db = fixture_db().await;
    // 900 PB on one core: kept as invalid, not charged 5.6 million.
    let o = record(&db, &["--job-id", "901", "--cores", "1", "--memory", "900PB"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("testclu/901 not recorded: the job holds 900PB of memory on 1 node(s), more than 64TB per node"),
        "{}",
        stderr(&o)
    );
    // Exponent notation is named as such, and the malformed record names its job.
    let o = record(&db, &["--job-id", "902", "--memory", "1e30"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("testclu/902 not recorded: memory: \"1e30\" is not a size: exponent notation is not read"),
        "{}",
        stderr(&o)
    );
    assert_eq!(counts(&db).await, (0, 0, 2));

    // NUL characters in a JSON string, in a charge field and in the cluster,
    // and an array index beyond PostgreSQL's integer, among 4,000 jobs: each is
    // rejected with its reason (none as a database error), the rest recorded.
    let mut lines = String::new();
    for id in 1..=4000 {
        lines.push_str(&match id {
            10 => json_job(id, ",\"user\":\"a\\u0000b\""),
            20 => json_job(id, "").replace("\"testclu\"", "\"test\\u0000clu\""),
            30 => json_job(id, ",\"array_index\":2147483648"),
            40 => json_job(id, "").replace("\"cores\":1", "\"cores\":[1]"),
            _ => json_job(id, ""),
        });
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("damaged-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jobs.jsonl");
    std::fs::write(&file, &lines).unwrap();
    let o = db.cli(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stdout(&o).contains("recorded:    3996 "), "{}", stdout(&o));
    let kinds: Vec<(String, String)> = sqlx::query_as(
        "SELECT kind, split_part(split_part(reason, ' (known', 1), ' (did you mean', 1) FROM rejected_record WHERE source_ref LIKE '%jobs.jsonl:%'
          ORDER BY length(source_ref), source_ref",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        kinds,
        [
            ("invalid".to_owned(), "the user contains a NUL character".to_owned()),
            (
                "unknown_cluster".to_owned(),
                "unknown cluster \"test\\0clu\"".to_owned()
            ),
            (
                "invalid".to_owned(),
                "array index 2147483648 is out of range (at most 2147483647)".to_owned()
            ),
            (
                "malformed".to_owned(),
                "invalid type: sequence, expected u32 at line 1 column 81".to_owned()
            ),
        ]
    );
    let (jobs, entries, kept) = counts(&db).await;
    assert_eq!((jobs, kept), (3996, 6));

    // A tar archive of JSON lines and a gzip file: refused whole, nothing kept.
    let mut tar = vec![0u8; 512];
    tar[..10].copy_from_slice(b"more.jsonl");
    tar[257..262].copy_from_slice(b"ustar");
    tar.extend(json_job(5001, "").as_bytes());
    tar.resize(2048, 0);
    let archive = dir.join("jobs.tar");
    std::fs::write(&archive, &tar).unwrap();
    let o = db.cli(&["import", "--format", "jsonl", archive.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("jobs.tar: this is a tar archive, not JSON lines of hpc-ledger's job format"),
        "{}",
        stderr(&o)
    );
    let gz = dir.join("jobs.jsonl.gz");
    std::fs::write(&gz, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03junk").unwrap();
    let o = db.cli(&["import", "--format", "slurm", gz.to_str().unwrap()]);
    assert!(
        stderr(&o)
            .contains("this is gzip-compressed data, not sacct --parsable2 output: decompress it first: `zcat FILE"),
        "{}",
        stderr(&o)
    );
    assert_eq!(counts(&db).await, (3996, entries, 6));

    // Jobs, then a damaged stretch of 1,200 lines, then more jobs: the import
    // stops after 1,000 malformed lines in a row, keeping what it read before.
    let mut damaged = String::new();
    for id in 6001..=6003 {
        damaged.push_str(&json_job(id, ""));
    }
    for i in 0..1200 {
        damaged.push_str(&format!("garbage {i}\n"));
    }
    damaged.push_str(&json_job(6004, ""));
    let file = dir.join("damaged.jsonl");
    std::fs::write(&file, &damaged).unwrap();
    let o = db.cli(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("recorded:    3 "), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("damaged.jsonl: stopped at ")
            && stderr(&o).contains("damaged.jsonl:1003: 1000 malformed records in a row"),
        "{}",
        stderr(&o)
    );
    assert_eq!(counts(&db).await.0, 3999);
    assert_eq!(counts(&db).await.2, 1006);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn who_records_is_one_global_flag_or_its_variable() {
    let db = fixture_db().await;
    // Before the subcommand, after it, or from the environment.
    ok(&cli_with_env(
        &[
            "--author",
            "alice",
            "job",
            "record",
            "--cluster",
            "testclu",
            "--job-id",
            "1",
            "--project",
            "pas1234",
            "--queue",
            "regular",
            "--cores",
            "1",
            "--start",
            "2026-10-05T09:00:00Z",
            "--end",
            "2026-10-05T10:00:00Z",
        ],
        &[("DATABASE_URL", &db.url)],
        None,
    ));
    ok(&record(&db, &["--job-id", "2", "--author", "bob"]));
    ok(&cli_with_env(
        &["import", "--format", "jsonl", "-"],
        &[("DATABASE_URL", &db.url), ("HPC_LEDGER_AUTHOR", "carol")],
        Some(&json_job(3, "")),
    ));
    let who: Vec<(String, String)> = sqlx::query_as(
        "SELECT j.scheduler_job_id, r.recorded_by FROM job_record r JOIN job j ON j.id = r.job_id ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        who,
        [
            ("1".into(), "alice".into()),
            ("2".into(), "bob".into()),
            ("3".into(), "carol".into())
        ]
    );
    let entries: Vec<String> = sqlx::query_scalar("SELECT DISTINCT author FROM ledger_entry ORDER BY 1")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(entries, ["alice", "bob", "carol"]);
}

/// Charging rules 3 (migration 0055): the refunds of a charge settle in
/// cents. Two refunds of half of a 1.07 charge give back 0.53 and 0.54
/// (1.08 under version 2, which a charge of version 2 keeps); the audit
/// re-derives each refund's cents in posting order, and the database's
/// guard checks them as they are posted.
#[tokio::test]
async fn refunds_of_a_charge_settle_in_cents_and_charges_before_keep_their_rules() {
    let db = fixture_db().await;
    // 4 cores × 26.75 h at 0.01: 1.07.
    let job = |id: &str| {
        [
            "--job-id",
            id,
            "--submit",
            "2026-10-04T23:00:00Z",
            "--start",
            "2026-10-05T00:00:00Z",
            "--end",
            "2026-10-06T02:45:00Z",
        ]
        .map(str::to_owned)
    };
    let refund = |id: &str| {
        ok(&db.cli(&[
            "refund",
            "--cluster",
            "testclu",
            "--job-id",
            id,
            "--fraction",
            "0.5",
            "--reason",
            "half the node was down",
            "--again",
        ]))
    };
    let entries = |id: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (i64, String, i16, String)>(
                "SELECT e.id, e.kind, e.charging_rules, e.amount::text FROM ledger_entry e
                   JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
                  WHERE j.scheduler_job_id = $1 ORDER BY e.id",
            )
            .bind(id)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let new = job("500");
    assert_eq!(
        ok(&record(&db, &new.iter().map(String::as_str).collect::<Vec<_>>())),
        "recorded testclu/500: 1 entry totalling 1.07 in 2026-10\n"
    );
    refund("500");
    refund("500");
    let posted: Vec<(String, i16, String)> = entries("500").await.into_iter().map(|(_, k, r, a)| (k, r, a)).collect();
    assert_eq!(
        posted,
        [("job", 3, "1.07"), ("refund", 3, "-0.53"), ("refund", 3, "-0.54")].map(|(k, r, a)| (
            k.to_owned(),
            r,
            a.to_owned()
        ))
    );
    // A charge of version 2 (posted before the migration) keeps its rules:
    // each refund its own exact amount rounded.
    let old = job("501");
    ok(&record(&db, &old.iter().map(String::as_str).collect::<Vec<_>>()));
    let charge = entries("501").await[0].0;
    sqlx::raw_sql(&format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_append_only;
         UPDATE ledger_entry SET charging_rules = 2 WHERE id = {charge};
         ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_append_only;"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    refund("501");
    refund("501");
    let amounts: Vec<String> = entries("501").await.into_iter().map(|(.., a)| a).collect();
    assert_eq!(amounts, ["1.07", "-0.54", "-0.54"]);
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // A version 3 refund's cents changed by hand: the audit says what they
    // settle at.
    let second = entries("500").await[2].0;
    sqlx::raw_sql(&format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_append_only;
         UPDATE ledger_entry SET amount = -0.53 WHERE id = {second};
         ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_append_only;"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let found: Vec<(i64, String, String, String)> = sqlx::query_as(
        "SELECT entry_id, field, expected, recorded FROM audit.discrepancies WHERE kind = 'refund' ORDER BY entry_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(found, [(second, "arithmetic".into(), "-0.54".into(), "-0.53".into())]);
}

/// Refunds of one charge posted at once are posted one after the other, in
/// the order of their ids: each settles against the refunds before it,
/// none is refused for another's cents, and the audit finds them as posted
/// (the ledger's lock was taken only after the insert had drawn the id: two
/// could settle against the same refunds, 1.08 back of 1.07, for good).
#[tokio::test]
async fn refunds_posted_at_once_settle_one_after_the_other() {
    use hpc_ledger::service::correct::{RefundBy, Target, Why, refund};
    let db = fixture_db().await;
    // 4 cores × 26.75 h at 0.01: 1.07.
    ok(&record(
        &db,
        &[
            "--job-id",
            "600",
            "--submit",
            "2026-10-04T23:00:00Z",
            "--start",
            "2026-10-05T00:00:00Z",
            "--end",
            "2026-10-06T02:45:00Z",
        ],
    ));
    let charge: i64 = sqlx::query_scalar("SELECT id FROM ledger_entry WHERE kind = 'job'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let pool = db.pool.clone();
            tokio::spawn(async move {
                let why = Why {
                    author: "test".into(),
                    reason: format!("refund {i}"),
                    month: None,
                    again: true,
                    key: None,
                };
                refund(
                    &pool,
                    &Target::Entry(hpc_ledger::ids::LedgerEntryId(charge)),
                    RefundBy::Fraction(rust_decimal::Decimal::new(4, 2)),
                    &why,
                    chrono::Utc::now(),
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    // 24 × 4 % of 1.07 = 1.0272 exactly: 1.03 in cents, whatever the order.
    let (n, cents): (i64, rust_decimal::Decimal) =
        sqlx::query_as("SELECT count(*), sum(amount) FROM ledger_entry WHERE kind = 'refund'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((n, cents.to_string()), (24, "-1.03".to_owned()));
    let found: Vec<(i64, String)> = sqlx::query_as("SELECT entry_id, field FROM audit.discrepancies")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(found, []);
}

/// `--memory` names its unit: `--memory 64` was 64 bytes (a JSON line's
/// reading), where `quote --mem=64` reads 64 MB and a person may mean GB.
#[tokio::test]
async fn a_memory_without_its_unit_is_refused_and_nothing_recorded() {
    let db = fixture_db().await;
    let o = record(&db, &["--memory", "64"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give its unit: 64GB, 64MB or 64B"),
        "{}",
        stderr(&o)
    );
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM job")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
    ok(&record(&db, &["--memory", "64GB"]));
}
