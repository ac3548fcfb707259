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
                || msg.contains("rejected_record_dismissal"),
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
