//! The adversarial pass, round 2 (issue 13): each attack, tried as the role
//! that would try it, refused by the database — and, where the owner could
//! get past the database, reported by the audit.

use sqlx::{PgPool, Row};

use crate::harness::{TestDb, cli_with_env, ok};

const JOB: &str = r#"{"cluster":"owens","job_id":"901","project":"PAS1234","queue":"batch","cores":2,"start":"2026-10-05T09:00:00-04:00","end":"2026-10-05T10:00:00-04:00"}"#;
const OTHER: &str = r#"{"cluster":"owens","job_id":"902","project":"PAS1234","queue":"batch","cores":1,"start":"2026-10-06T09:00:00-04:00","end":"2026-10-06T10:00:00-04:00"}"#;

/// Run `sql` as `role` (SET ROLE on one connection); the error, if any.
async fn as_role(pool: &PgPool, role: &str, sql: &str) -> Result<(), String> {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql(&format!("SET ROLE {role}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let r = sqlx::raw_sql(sql)
        .execute(&mut *conn)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    sqlx::raw_sql("RESET ROLE").execute(&mut *conn).await.unwrap();
    r
}

async fn id(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

async fn findings(pool: &PgPool, field: &str) -> Vec<(Option<i64>, String)> {
    sqlx::query("SELECT entry_id, recorded FROM audit.discrepancies WHERE field = $1 ORDER BY entry_id")
        .bind(field)
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// A reversal of `target` citing job record `record`, mirroring it.
fn reversal(target: i64, record: i64) -> String {
    format!(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, storage_rate_id,
                                   billing_run_id, corrects_id, quantity, unit_rate, amount_exact, amount, author, reason)
         SELECT period, project_id, 'reversal', metric, {record}, rate_card_id, storage_rate_id, billing_run_id, id,
                -quantity, unit_rate, -amount_exact, -amount, 'mallory', 'superseded'
           FROM ledger_entry WHERE id = {target}"
    )
}

#[tokio::test]
async fn a_reversal_must_be_tied_to_what_it_reverses() {
    let db = TestDb::with_example().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    // A job, then the same run re-sent with more cores and --supersede (legitimate).
    ok(&cli_with_env(&["job", "record", "--json"], &env, Some(JOB)));
    ok(&cli_with_env(&["job", "record", "--json"], &env, Some(OTHER)));
    let changed = JOB.replace("\"cores\":2", "\"cores\":4");
    ok(&cli_with_env(
        &["job", "record", "--json", "--supersede"],
        &env,
        Some(&changed),
    ));
    ok(&db.cli(&["bill", "storage", "--month", "2026-10"]));
    let p = &db.pool;
    let supersede = id(p, "SELECT id FROM job_record WHERE kind = 'supersede'").await;
    let storage = id(p, "SELECT min(id) FROM ledger_entry WHERE kind = 'storage'").await;
    let other = id(
        p,
        "SELECT e.id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '902' AND e.kind = 'job'",
    )
    .await;
    let refused = |e: Result<(), String>, what: &str| {
        let e = e.expect_err(what);
        assert!(
            e.contains("row-level security") || e.contains("not tied to what it reverses"),
            "{what}: {e}"
        );
    };
    // The attack of the report: a storage charge of 225.00 "superseded" by
    // the ingest role, citing the legitimate supersede record.
    refused(
        as_role(p, "hpc_ledger_ingest", &reversal(storage, supersede)).await,
        "ingest reverses a storage charge",
    );
    // Another job's charge, citing that record.
    refused(
        as_role(p, "hpc_ledger_ingest", &reversal(other, supersede)).await,
        "ingest reverses another job's charge",
    );
    // Billing may reverse (with a reason) only citing the entry's own record.
    refused(
        as_role(p, "hpc_ledger_billing", &reversal(storage, supersede)).await,
        "billing reverses a storage charge citing a job record",
    );
    // A new "supersede" record of the same run, and a bare cancellation of
    // the charges in force (no replacement charges in the statement).
    let run = id(p, &format!("SELECT job_id FROM job_record WHERE id = {supersede}")).await;
    as_role(
        p,
        "hpc_ledger_ingest",
        &format!(
            "INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, queue,
                                     user_name, job_name, state, exit_code, ended_at, nodes, cores, memory_bytes, gpus,
                                     charge_fingerprint, content_fingerprint, source_format, source_ref, raw, recorded_by)
             SELECT job_id, cluster_id, started_at, 3, 'supersede', project_id, node_type_id, queue, user_name, job_name,
                    state, exit_code, ended_at, nodes, 1, memory_bytes, gpus, sha256('c3'), sha256('k3'), source_format,
                    source_ref, raw, 'mallory'
               FROM job_record WHERE id = {supersede}"
        ),
    )
    .await
    .unwrap();
    let third = id(
        p,
        &format!("SELECT id FROM job_record WHERE job_id = {run} AND revision = 3"),
    )
    .await;
    let current = id(
        p,
        &format!("SELECT id FROM ledger_entry WHERE kind = 'job' AND job_record_id = {supersede}"),
    )
    .await;
    refused(
        as_role(p, "hpc_ledger_ingest", &reversal(current, third)).await,
        "ingest cancels a charge without a replacement",
    );
    // Nothing of it reached the ledger; the audit is clean.
    assert_eq!(
        id(p, "SELECT count(*) FROM ledger_entry WHERE author = 'mallory'").await,
        0
    );
    assert!(findings(p, "cause").await.is_empty());

    // The owner can disable the guard; the audit still reports the reversal.
    sqlx::raw_sql(&format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_guard; {}; ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_guard",
        reversal(storage, supersede)
    ))
    .execute(p)
    .await
    .unwrap();
    let planted = id(p, "SELECT id FROM ledger_entry WHERE author = 'mallory'").await;
    let found = findings(p, "cause").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Some(planted));
    assert_eq!(
        found[0].1,
        format!("reverses storage entry {storage}, citing job record {supersede}")
    );
}

#[tokio::test]
async fn a_rejection_is_resolved_only_by_the_record_it_became() {
    let db = TestDb::with_example().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    // Two jobs of a project not configured yet: rejected, kept.
    let unknown = JOB.replace("PAS1234", "PNEW001");
    let other = OTHER.replace("PAS1234", "PNEW001");
    let jsonl = format!("{unknown}\n{other}\n");
    let o = cli_with_env(&["import", "--format", "jsonl", "-"], &env, Some(&jsonl));
    assert_eq!(o.status.code(), Some(4));
    let p = &db.pool;
    assert_eq!(
        id(p, "SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL").await,
        2
    );
    // The attack of the report: the ingest role hides them.
    let e = as_role(
        p,
        "hpc_ledger_ingest",
        "UPDATE rejected_record SET resolved_at = now(), resolution = 'recorded'",
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("cannot be resolved as recorded: it must name the job record its line became"),
        "{e}"
    );
    // Naming some other job's record does not prove it either.
    ok(&cli_with_env(
        &["job", "record", "--json"],
        &env,
        Some(&JOB.replace("\"901\"", "\"903\"")),
    ));
    let unrelated = id(p, "SELECT max(id) FROM job_record").await;
    for resolution in ["recorded", "replayed", "superseded"] {
        let e = as_role(
            p,
            "hpc_ledger_ingest",
            &format!(
                "UPDATE rejected_record SET resolved_at = now(), resolution = '{resolution}', resolved_record_id = {unrelated}"
            ),
        )
        .await
        .unwrap_err();
        assert!(e.contains(&format!("cannot be resolved as {resolution}")), "{e}");
    }
    let e = as_role(
        p,
        "hpc_ledger_ingest",
        "UPDATE rejected_record SET resolved_at = now(), resolution = 'skipped'",
    )
    .await
    .unwrap_err();
    assert!(e.contains("it must name who resolved it"), "{e}");
    // Nor can it slip one in already resolved.
    let e = as_role(
        p,
        "hpc_ledger_ingest",
        "INSERT INTO rejected_record (source_format, source_ref, raw, raw_sha256, kind, reason, resolved_at, resolution)
         VALUES ('jsonl', 'x:1', 'x', sha256('x'), 'malformed', 'x', now(), 'recorded')",
    )
    .await
    .unwrap_err();
    assert!(e.contains("cannot be resolved as recorded"), "{e}");
    // The audit lists them, open, with their age.
    let audit = crate::harness::stdout(&db.cli(&["audit"]));
    assert!(
        audit.contains("rejections: 2 open, not charged (the oldest first seen "),
        "{audit}"
    );
    // Once the project exists, a retry records them and names the records.
    let cfg = crate::harness::example_path();
    let fixed = format!(
        "{}\n[[project]]\ncode = \"PNEW001\"\n",
        std::fs::read_to_string(&cfg).unwrap()
    );
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tamper-{}.toml", std::process::id()));
    std::fs::write(&path, fixed).unwrap();
    ok(&db.cli(&["config", "apply", path.to_str().unwrap()]));
    let out = crate::harness::stdout(&db.cli(&["import", "--retry-rejected"]));
    assert!(out.contains("recorded:    2"), "{out}");
    let proven: i64 = id(
        p,
        "SELECT count(*) FROM audit.rejections WHERE status = 'recorded' AND resolution_holds AND resolved_record_id IS NOT NULL",
    )
    .await;
    assert_eq!(proven, 2);
    // The owner can disable the guard; the audit still reports the lie.
    sqlx::raw_sql(
        "ALTER TABLE rejected_record DISABLE TRIGGER rejected_record_guard;
         INSERT INTO rejected_record (source_format, source_ref, raw, raw_sha256, kind, reason, resolved_at, resolution)
         VALUES ('jsonl', 'x:1', 'x', sha256('x'), 'malformed', 'x', now(), 'recorded');
         ALTER TABLE rejected_record ENABLE ALWAYS TRIGGER rejected_record_guard",
    )
    .execute(p)
    .await
    .unwrap();
    let found = findings(p, "resolution").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.ends_with("recorded, naming no job record"), "{found:?}");
}
