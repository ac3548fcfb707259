//! Finding and explaining a charge from the command line (issue 20, item
//! 2): `job show CLUSTER/JOBID` and `entries --project P --month M`.

use crate::harness::{TestDb, ok, stderr, stdout};

async fn sample() -> TestDb {
    let db = TestDb::with_example().await;
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs/owens-sacct.txt");
    ok(&db.cli(&["import", "--format", "slurm", file.to_str().unwrap()]));
    db
}

#[tokio::test]
async fn a_job_shows_how_its_charge_was_reached_and_what_corrected_it() {
    let db = sample().await;
    let out = ok(&db.cli(&["job", "show", "owens/1004", "--raw"]));
    assert!(
        out.starts_with("owens/1004: 1 run recorded (times in America/New_York)\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "(revision 1, original): project PZS0708, node type hugememory (queue hugemem), 1 node(s), 4 core(s), 512GB, 0 GPU(s)"
        ),
        "{out}"
    );
    // The quote-style breakdown: 512 GB at 32 GB per core is 16 effective
    // cores, for 24 h at 0.015: 5.76.
    assert!(
        out.contains("priced by charging rules version 3 and rate card "),
        "{out}"
    );
    assert!(out.contains("    effective cores   16\n"), "{out}");
    assert!(
        out.contains("    charged cores     16 (charged by its memory (effective cores))\n"),
        "{out}"
    );
    assert!(
        out.contains("  core-hours       384  0.015          5.76    5.76\n"),
        "{out}"
    );
    assert!(
        out.contains("the charge entries below hold exactly these quantities and amounts"),
        "{out}"
    );
    // The raw record, as sacct wrote it.
    assert!(
        out.contains("        1004|1004|owens|hugemem|normal|pzs0708|vilhelm|"),
        "{out}"
    );
    assert!(out.contains("  net: USD 5.76\n"), "{out}");

    // A refund prints its entry id; the job then shows it against the charge.
    let refund = ok(&db.cli(&[
        "refund",
        "--cluster",
        "owens",
        "--job-id",
        "1004",
        "--fraction",
        "0.5",
        "--reason",
        "node failure",
    ]));
    let charge: i64 = sqlx::query_scalar(
        "SELECT e.id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '1004' AND e.kind = 'job'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let refund_id: i64 = sqlx::query_scalar("SELECT id FROM ledger_entry WHERE kind = 'refund'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        refund.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..4]
            == [refund_id.to_string().as_str(), "refund", "entry", &charge.to_string()]),
        "{refund}"
    );
    let out = ok(&db.cli(&["job", "show", "owens/1004"]));
    assert!(
        out.contains(&format!("refund  core_hours  of entry {charge}: job owens/1004")),
        "{out}"
    );
    assert!(out.contains("  net: USD 2.88\n"), "{out}");
    assert!(!out.contains("raw record"), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&db.cli(&["job", "show", "owens/1004", "--format", "json"]))).unwrap();
    assert_eq!(json["runs"][0]["net"], "2.88");
    assert_eq!(json["runs"][0]["charge"]["charging_rules"], 3);
    assert_eq!(json["runs"][0]["entries"][1]["corrects_id"], charge);
    // A charge of 0.00 (the debug partition's rate is 0) prints its cents.
    let free: serde_json::Value =
        serde_json::from_str(&ok(&db.cli(&["job", "show", "owens/1009", "--format", "json"]))).unwrap();
    assert_eq!(free["runs"][0]["entries"][0]["amount"], "0.00", "{free}");
    assert_eq!(free["runs"][0]["net"], "0.00", "{free}");

    // An array task, named as Slurm names it; a job id that only looks like one.
    let out = ok(&db.cli(&["job", "show", "owens/1006_0"]));
    assert!(out.contains("Run 1 (array task 0): started "), "{out}");
    // Headed by the task, not the job (it said "owens/1006: 1 run").
    assert!(out.starts_with("owens/1006_0: 1 run recorded"), "{out}");
    ok(&db.cli(&[
        "job",
        "record",
        "--cluster",
        "owens",
        "--job-id",
        "run_2",
        "--project",
        "PAS1234",
        "--queue",
        "batch",
        "--cores",
        "1",
        "--start",
        "2026-10-05T09:00:00-04:00",
        "--end",
        "2026-10-05T10:00:00-04:00",
    ]));
    let out = ok(&db.cli(&["job", "show", "owens/run_2"]));
    assert!(out.starts_with("owens/run_2: 1 run recorded"), "{out}");

    // An entry changed behind the ledger's back no longer matches its price.
    sqlx::raw_sql("ALTER TABLE ledger_entry DISABLE TRIGGER ALL")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE ledger_entry SET quantity = 300, amount_exact = 4.5, amount = 4.50 WHERE id = $1")
        .bind(charge)
        .execute(&db.pool)
        .await
        .unwrap();
    let out = ok(&db.cli(&["job", "show", "owens/1004"]));
    assert!(out.contains("THE CHARGE ENTRIES BELOW DIFFER from this"), "{out}");
    // The audit finds it, also as CSV.
    let o = db.cli(&["audit", "--format", "csv"]);
    assert_eq!(o.status.code(), Some(5));
    assert!(
        stdout(&o).contains(&format!("\ndiscrepancy,{charge},job,2026-10,PZS0708,")),
        "{}",
        stdout(&o)
    );
}

#[tokio::test]
async fn entries_list_ids_to_correct_and_bad_names_are_explained() {
    let db = sample().await;
    ok(&db.cli(&["bill", "storage", "--through", "2026-10"]));
    let out = ok(&db.cli(&["entries", "--project", "PZS0708", "--month", "2026-10"]));
    let storage: i64 = sqlx::query_scalar(
        "SELECT e.id FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE p.code = 'PZS0708' AND e.kind = 'storage' AND e.period = '2026-10-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let id = storage.to_string();
    assert!(
        out.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 9
                && w[0] == id
                && w[2] == "2026-10"
                && w[3..9] == ["storage", "tb_months", "storage", "50", "4.5", "225.00"]
        }),
        "{out}"
    );
    assert!(out.contains("job owens/1004"), "{out}");
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE p.code = 'PZS0708' AND e.period = '2026-10-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // owens/1003 2.69 + owens/1004 5.76 + 50 TB at 4.50.
    assert!(out.ends_with(&format!("{n} entries, total 233.45\n")), "{out}");
    // Only one kind; CSV; the id reverses the entry.
    let csv = ok(&db.cli(&[
        "entries",
        "--project",
        "pzs0708",
        "--month",
        "2026-10",
        "--kind",
        "storage",
        "--format",
        "csv",
    ]));
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(
        csv.starts_with("entry,posted,month,kind,metric,what,quantity,rate,amount,rules,by,reason\n"),
        "{csv}"
    );
    let out = ok(&db.cli(&["reverse", "--entry", &id, "--reason", "billed by mistake"]));
    assert!(out.contains("reversal"), "{out}");
    let out = ok(&db.cli(&[
        "entries",
        "--project",
        "PZS0708",
        "--month",
        "2026-10",
        "--kind",
        "reversal",
    ]));
    assert!(
        out.contains(&format!("of entry {storage}: storage")) && out.contains("-225.00"),
        "{out}"
    );

    // Bad names say what is wrong.
    let o = db.cli(&["job", "show", "owens"]);
    assert!(stderr(&o).contains("\"owens\" is not CLUSTER/JOBID"), "{}", stderr(&o));
    let o = db.cli(&["job", "show", "nowhere/1"]);
    assert!(
        stderr(&o).contains("unknown cluster \"nowhere\" (known: owens, pitzer)"),
        "{}",
        stderr(&o)
    );
    let o = db.cli(&["job", "show", "owens/99"]);
    assert!(
        stderr(&o).contains("no run of job owens/99 is recorded"),
        "{}",
        stderr(&o)
    );
    let o = db.cli(&["entries", "--project", "NOPE", "--month", "2026-10"]);
    assert!(stderr(&o).contains("unknown project \"NOPE\""), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}
