//! Rejections that will never be charged: dismissed from the command line
//! with who and why, kept, never retried, never reopened, never deleted.

use crate::fixtures::fixture_db;
use crate::harness::{ok, stderr, stdout};

#[tokio::test]
async fn a_junk_import_is_dismissed_without_sql_and_stays_dismissed() {
    let db = fixture_db().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("dismiss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Junk read as JSON lines, and one real job with an unknown project.
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, "garbled line\nnot json\n[1,2]\n").unwrap();
    let real = dir.join("real.jsonl");
    std::fs::write(
        &real,
        r#"{"cluster":"testclu","job_id":"5","project":"nobody","queue":"regular","cores":1,"start":"2026-10-01T00:00:00Z","end":"2026-10-01T01:00:00Z"}"#,
    )
    .unwrap();
    let (junk, real) = (junk.to_str().unwrap(), real.to_str().unwrap());
    db.cli(&["import", "--format", "jsonl", junk]);
    db.cli(&["import", "--format", "jsonl", real]);
    let open = |db: &crate::harness::TestDb| {
        let out = ok(&db.cli(&["rejected", "--format", "json"]));
        serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()
    };
    assert_eq!(open(&db).len(), 4);
    // Their ids grow with the lines they were read from.
    let by_id: Vec<String> = sqlx::query_scalar("SELECT raw FROM rejected_record ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(by_id[..3], ["garbled line", "not json", "[1,2]"], "{by_id:?}");

    // Nothing named, no reason, an id that is not open: refused, nothing dismissed.
    let o = db.cli(&["rejected", "dismiss", "--reason", "x"]);
    assert!(stderr(&o).contains("name what to dismiss"), "{}", stderr(&o));
    let o = db.cli(&["rejected", "dismiss", "--file", junk, "--reason", "  "]);
    assert!(stderr(&o).contains("give a reason"), "{}", stderr(&o));
    let first = open(&db)[0]["id"].as_i64().unwrap();
    let o = db.cli(&["rejected", "dismiss", &first.to_string(), "999999", "--reason", "x"]);
    assert!(
        stderr(&o).contains("rejection 999999 is not an open rejection"),
        "{}",
        stderr(&o)
    );
    assert_eq!(open(&db).len(), 4);
    // A dry run shows the junk file's three lines and changes nothing.
    let out = ok(&db.cli(&["rejected", "dismiss", "--file", junk, "--reason", "x", "--dry-run"]));
    assert!(out.contains("would dismiss 3 rejections"), "{out}");
    assert_eq!(open(&db).len(), 4);
    // By source format: all four came from JSON lines; none from sacct.
    let out = ok(&db.cli(&["rejected", "dismiss", "--source", "jsonl", "--reason", "x", "--dry-run"]));
    assert!(out.contains("would dismiss 4 rejections"), "{out}");
    let out = ok(&db.cli(&["rejected", "dismiss", "--source", "slurm", "--reason", "x", "--dry-run"]));
    assert!(out.contains("would dismiss 0 rejections"), "{out}");
    assert_eq!(open(&db).len(), 4);

    let out = ok(&db.cli(&[
        "rejected",
        "dismiss",
        "--file",
        junk,
        "--kind",
        "malformed",
        "--reason",
        "a core dump imported by mistake",
        "--author",
        "billing-office",
    ]));
    assert!(out.contains("dismissed 3 rejections"), "{out}");
    let left = open(&db);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["job_key"], "testclu/5");

    // Retrying re-reads only the open one; the dismissed lines stay dismissed.
    let out = stdout(&db.cli(&["import", "--retry-rejected"]));
    assert!(out.contains("lines read:  1"), "{out}");
    // Importing the junk again does not reopen it.
    db.cli(&["import", "--format", "jsonl", junk]);
    assert_eq!(open(&db).len(), 1);
    let all = ok(&db.cli(&["rejected", "--all"]));
    assert!(all.contains("dismissed by billing-office"), "{all}");
    assert!(all.contains("(dismissed: a core dump imported by mistake)"), "{all}");
    let seen: Vec<i32> = sqlx::query_scalar("SELECT times_seen FROM rejected_record WHERE resolution = 'dismissed'")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(seen, vec![2, 2, 2]);

    // The database keeps the trail, for the owner too.
    for sql in [
        "DELETE FROM rejected_record",
        "TRUNCATE rejected_record",
        "UPDATE rejected_record SET resolution_note = 'nothing to see' WHERE resolution = 'dismissed'",
        "UPDATE rejected_record SET resolved_at = NULL, resolution = NULL, resolved_by = NULL, resolution_note = NULL WHERE resolution = 'dismissed'",
        "UPDATE rejected_record SET resolution = 'skipped' WHERE resolution = 'dismissed'",
        "UPDATE rejected_record SET resolved_at = now(), resolution = 'dismissed' WHERE resolved_at IS NULL",
    ] {
        let e = sqlx::raw_sql(sql).execute(&db.pool).await.unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("kept for the audit trail")
                || msg.contains("is not rewritten")
                || msg.contains("not reopened")
                || msg.contains("must name who resolved it")
                || msg.contains("rejected_record_dismissal")
                // A reassignment (migration 0025) refers to rejections too.
                || msg.contains("cannot truncate a table referenced in a foreign key constraint"),
            "{sql}: {msg}"
        );
    }

    // The unknown project is added: the open one is recorded on a retry.
    let fixed = format!("{}\n[[project]]\ncode = \"nobody\"\n", crate::fixtures::CENTER);
    let cfg = dir.join("center.toml");
    std::fs::write(&cfg, fixed).unwrap();
    ok(&db.cli(&["config", "apply", cfg.to_str().unwrap()]));
    let out = stdout(&db.cli(&["import", "--retry-rejected"]));
    assert!(out.contains("recorded:    1"), "{out}");
    assert!(open(&db).is_empty());
}

/// Issue 20, item 4: retry one rejection by id; a rejection is resolved when
/// the same run is recorded by another path, and stays resolved when its
/// line is read again.
#[tokio::test]
async fn one_rejection_is_retried_and_another_paths_record_resolves_the_same_run() {
    let db = crate::harness::TestDb::with_example().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("elsewhere-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("feed.jsonl");
    std::fs::write(
        &file,
        concat!(
            // owens/1002 as sacct has it (10:00–20:00 on 6 October), but in a partition nobody mapped.
            r#"{"cluster":"owens","job_id":"1002","project":"PAS1234","queue":"nosuch","cores":1,"start":"2026-10-06T10:00:00-04:00","end":"2026-10-06T20:00:00-04:00"}"#,
            "\n",
            // Another run of the same job id (an earlier start): not the run sacct records.
            r#"{"cluster":"owens","job_id":"1002","project":"PAS1234","queue":"nosuch","cores":1,"start":"2026-10-05T10:00:00-04:00","end":"2026-10-05T11:00:00-04:00"}"#,
            "\n",
            r#"{"cluster":"owens","job_id":"7777","project":"NOPE","queue":"batch","cores":1,"start":"2026-10-05T10:00:00-04:00","end":"2026-10-05T11:00:00-04:00"}"#,
            "\n",
            // The run sacct records, but said to hold 2 cores: another account of it, for a person.
            r#"{"cluster":"owens","job_id":"1002","project":"PAS1234","queue":"nosuch","cores":2,"start":"2026-10-06T10:00:00-04:00","end":"2026-10-06T20:00:00-04:00"}"#,
            "\n"
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let o = db.cli(&["import", "--format", "jsonl", f]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM rejected_record ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(ids.len(), 4);
    let (same_run, other_run, nope, other_cores) = (ids[0], ids[1], ids[2], ids[3]);
    let seen = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i32>("SELECT times_seen FROM rejected_record ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap()
    };

    // Retry one id: only it is read again (still an unknown project).
    let o = db.cli(&["import", "--retry-rejected", "--id", &nope.to_string()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stdout(&o).contains("lines read:  1\n"), "{}", stdout(&o));
    assert_eq!(seen(db.pool.clone()).await, [1, 1, 2, 1]);
    let o = db.cli(&["import", "--retry-rejected", "--id", "999999"]);
    assert!(
        stderr(&o)
            .contains("rejection 999999 is not open (unknown, or already resolved or dismissed): nothing was retried"),
        "{}",
        stderr(&o)
    );
    assert_eq!(seen(db.pool.clone()).await, [1, 1, 2, 1]);

    // sacct records owens/1002: the jobcomp-less path's rejection of that very
    // run is resolved, naming the record; the other run's stays open.
    let sacct = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs/owens-sacct.txt");
    ok(&db.cli(&["import", "--format", "slurm", sacct.to_str().unwrap()]));
    type Row = (i64, Option<String>, Option<i64>, Option<bool>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT x.id, x.resolution, x.resolved_record_id, a.resolution_holds
           FROM rejected_record x JOIN audit.rejections a ON a.id = x.id ORDER BY x.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let record: i64 = sqlx::query_scalar(
        "SELECT r.id FROM job_record r JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = '1002'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows[0],
        (same_run, Some("recorded_elsewhere".into()), Some(record), Some(true))
    );
    assert_eq!(rows[1], (other_run, None, None, None));
    assert_eq!(rows[2].1, None);
    assert_eq!(
        rows[3],
        (other_cores, None, None, None),
        "a line that says the run held more stays open"
    );

    // Read again, the resolved line is rejected again but stays resolved.
    let o = db.cli(&["import", "--format", "jsonl", f]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let open = ok(&db.cli(&["rejected"]));
    let open_ids: Vec<&str> = open
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        open_ids,
        [other_run.to_string(), nope.to_string(), other_cores.to_string()]
    );

    // A conflict (the same run, another charge) is never resolved by the
    // record it conflicts with, however often that record is read again.
    let conflict = dir.join("conflict.jsonl");
    std::fs::write(
        &conflict,
        r#"{"cluster":"owens","job_id":"1002","project":"PAS1234","queue":"serial","cores":4,"start":"2026-10-06T10:00:00-04:00","end":"2026-10-06T20:00:00-04:00"}"#,
    )
    .unwrap();
    let o = db.cli(&["import", "--format", "jsonl", conflict.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
    ok(&db.cli(&["import", "--format", "slurm", sacct.to_str().unwrap()]));
    let open_conflicts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM rejected_record WHERE kind = 'conflict' AND resolved_at IS NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(open_conflicts, 1);
    let all = ok(&db.cli(&["rejected", "--all"]));
    let csv = ok(&db.cli(&["rejected", "--format", "csv"]));
    assert!(csv.starts_with("id,where,job,kind,status,reason\n"), "{csv}");
    assert_eq!(csv.lines().count(), 5, "{csv}");
    assert!(
        csv.contains(&format!("\n{nope},")) && csv.contains("owens/7777,unknown_project,open,"),
        "{csv}"
    );
    assert!(all.contains("recorded_elsewhere"), "{all}");
    // The database refuses a resolution that names another job's record.
    let e = sqlx::query(
        "UPDATE rejected_record SET resolved_at = now(), resolution = 'recorded_elsewhere', resolved_record_id =
                (SELECT r.id FROM job_record r JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = '1001')
          WHERE id = $1",
    )
    .bind(other_run)
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("cannot be resolved as recorded_elsewhere"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20, item 4: a rejected job whose account was mistyped is charged to
/// its project by a recorded decision; the raw record stays as written, a
/// re-import is a replay, and `audit --deep` reads it the same way.
#[tokio::test]
async fn a_mistyped_account_is_reassigned_with_a_reason_and_the_raw_record_kept() {
    let db = crate::harness::TestDb::with_example().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("reassign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("typo.jsonl");
    let line = r#"{"cluster":"owens","job_id":"8801","project":"PAS1243","queue":"batch","cores":2,"start":"2026-10-07T10:00:00-04:00","end":"2026-10-07T13:00:00-04:00"}"#;
    std::fs::write(&file, format!("{line}\nnot json\n")).unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(db.cli(&["import", "--format", "jsonl", f]).status.code(), Some(4));
    let ids: Vec<(i64, String)> = sqlx::query_as("SELECT id, kind FROM rejected_record ORDER BY kind DESC")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(ids[0].1, "unknown_project");
    assert_eq!(ids[1].1, "malformed");
    let (typo, junk) = (ids[0].0.to_string(), ids[1].0.to_string());

    // Refused: no reason, a project not in the configuration, a rejection of another kind.
    let o = db.cli(&["rejected", "reassign", &typo, "--project", "PAS1234", "--reason", " "]);
    assert!(stderr(&o).contains("give a reason"), "{}", stderr(&o));
    let o = db.cli(&["rejected", "reassign", &typo, "--project", "PAS9999", "--reason", "x"]);
    assert!(stderr(&o).contains("unknown project \"PAS9999\""), "{}", stderr(&o));
    let o = db.cli(&["rejected", "reassign", &junk, "--project", "PAS1234", "--reason", "x"]);
    assert!(
        stderr(&o).contains("is malformed, not an unknown project"),
        "{}",
        stderr(&o)
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM project_reassignment")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);

    let out = ok(&db.cli(&[
        "rejected",
        "reassign",
        &typo,
        "--project",
        "pas1234",
        "--reason",
        "account mistyped as PAS1243",
        "--author",
        "billing",
    ]));
    assert!(
        out.starts_with(&format!(
            "rejection {typo} (owens/8801): account \"PAS1243\" reassigned to PAS1234 by billing: account mistyped as PAS1243\n"
        )),
        "{out}"
    );
    // 2 cores × 3 h × 0.012 = 0.072.
    assert!(out.contains("recorded:    1 (charged 0.07)"), "{out}");
    let (project, raw): (String, String) = sqlx::query_as(
        "SELECT p.code, r.raw FROM job_record r JOIN project p ON p.id = r.project_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '8801'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((project.as_str(), raw.as_str()), ("PAS1234", line));
    let audit_row: (String, Option<String>, String, String) =
        sqlx::query_as("SELECT project, from_account, reason, resolution FROM audit.project_reassignments")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        audit_row,
        (
            "PAS1234".into(),
            Some("PAS1243".into()),
            "account mistyped as PAS1243".into(),
            "recorded".into()
        )
    );
    // Once only, and never rewritten.
    let o = db.cli(&[
        "rejected",
        "reassign",
        &typo,
        "--project",
        "PZS0708",
        "--reason",
        "again",
    ]);
    assert!(
        stderr(&o).contains(&format!("rejection {typo} is not open")),
        "{}",
        stderr(&o)
    );
    let e = sqlx::query("UPDATE project_reassignment SET reason = 'other'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(!e.to_string().is_empty());

    // The same file again: the job is a replay, its line not a new rejection.
    let o = db.cli(&["import", "--format", "jsonl", f]);
    assert!(stdout(&o).contains("replayed:    1"), "{}", stdout(&o));
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL AND kind <> 'malformed'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(open, 0);
    // The audit, and the deep audit reading the raw record again, are clean.
    let o = db.cli(&["audit", "--deep"]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    // … and says which records are charged to another project than they name.
    assert!(
        stdout(&o).contains("deep: 1 record(s) charged to another project than the account they name")
            && stdout(&o).contains("  owens/8801: PAS1243 -> PAS1234 by billing: account mistyped as PAS1243\n"),
        "{}",
        stdout(&o)
    );
    // Once an account of that name exists (a new project PAS1243), the
    // record read again is still the reassigned job: a replay, not a
    // conflict whose --supersede would leave `audit --deep` failing.
    let config = dir.join("center.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[[project]]\ncode = \"PAS1243\"\nname = \"New lab\"\npi = \"Dr. New\"\n",
            crate::harness::EXAMPLE
        ),
    )
    .unwrap();
    ok(&db.cli(&["config", "apply", config.to_str().unwrap()]));
    let o = db.cli(&["import", "--format", "jsonl", f]);
    assert!(stdout(&o).contains("replayed:    1"), "{}\n{}", stdout(&o), stderr(&o));
    assert!(!stdout(&o).contains("conflict"), "{}", stdout(&o));
    let o = db.cli(&["audit", "--deep"]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rejections of one file take their ids in the order of its lines,
/// whatever each was rejected for (malformed lines are kept apart from
/// refused jobs while a batch is read).
#[tokio::test]
async fn rejection_ids_follow_the_lines_they_were_read_from() {
    let db = fixture_db().await;
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("order-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mixed.jsonl");
    let job = |id: &str, project: &str, queue: &str| {
        format!(
            r#"{{"cluster":"testclu","job_id":"{id}","project":"{project}","queue":"{queue}","cores":1,"start":"2026-10-01T00:00:00Z","end":"2026-10-01T01:00:00Z"}}"#
        )
    };
    let lines = [
        job("1", "nobody", "regular"),
        "garbled".to_owned(),
        job("3", "pas1234", "nosuchqueue"),
        "also garbled".to_owned(),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    db.cli(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    let refs: Vec<String> = sqlx::query_scalar("SELECT source_ref FROM rejected_record ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let lines: Vec<&str> = refs.iter().map(|r| r.rsplit_once(':').unwrap().1).collect();
    assert_eq!(lines, ["1", "2", "3", "4"], "{refs:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
