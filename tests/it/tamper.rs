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

/// The example center with the sample jobs, storage billed July to October.
async fn october() -> TestDb {
    let db = TestDb::with_example().await;
    for (file, format, cluster) in [
        ("owens-sacct.txt", "slurm", None),
        ("pitzer-accounting-202610.log", "pbs", Some("pitzer")),
        ("jobs.jsonl", "jsonl", None),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/jobs")
            .join(file);
        let mut args = vec!["import", "--format", format];
        if let Some(c) = cluster {
            args.extend(["--cluster", c]);
        }
        args.push(path.to_str().unwrap());
        db.cli(&args);
    }
    // Storage before the sample jobs' first month is waived: July is the
    // first month closed.
    for month in ["2026-01", "2026-02", "2026-03", "2026-04", "2026-05", "2026-06"] {
        ok(&db.cli(&["bill", "storage", "--month", month, "--waive", "before the sample jobs"]));
    }
    ok(&db.cli(&["bill", "storage", "--through", "2026-10"]));
    db
}

#[tokio::test]
async fn only_the_close_procedure_closes_a_month() {
    let db = october().await;
    let p = &db.pool;
    // Billing closes the current month by hand: refused (it is not over).
    let now = id(
        p,
        "SELECT extract(year FROM now())::bigint * 100 + extract(month FROM now())::bigint",
    )
    .await;
    let current = format!("{}-{:02}-01", now / 100, now % 100);
    let e = as_role(
        p,
        "hpc_ledger_billing",
        &format!(
            "INSERT INTO closed_period (period, closed_by, entry_count, total, seal_algorithm, seal)
             VALUES ('{current}', 'mallory', 0, 0, 'sha256-chain-v1', sha256('x'))"
        ),
    )
    .await
    .unwrap_err();
    assert!(e.contains("is not over until"), "{e}");
    // A past month with earlier months open: refused.
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO closed_period (period, closed_by) VALUES ('2026-08-01', 'mallory')",
    )
    .await
    .unwrap_err();
    assert!(e.contains("2026-07 is still open"), "{e}");
    // Statements are the procedure's alone.
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO statement (period, project_id, number, entry_count, total) VALUES ('2026-07-01', 1, 99, 1, 1)",
    )
    .await
    .unwrap_err();
    assert!(e.contains("permission denied"), "{e}");
    // July by hand, with a forged count, total and seal: the database closes it
    // its own way — the row says what the ledger holds, sealed by the procedure.
    as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO closed_period (period, closed_by, entry_count, total, seal_algorithm, seal, closed_at)
         VALUES ('2026-07-01', 'mallory', 999, 12345.67, 'sha256-chain-v1', sha256('forged'), '2020-01-01')",
    )
    .await
    .unwrap();
    let row = sqlx::query(
        "SELECT c.entry_count, c.total::text, c.seal_algorithm, c.currency, c.closed_at > now() - interval '1 hour',
                (SELECT count(*) FROM ledger_entry WHERE period = '2026-07-01'),
                (SELECT count(*) FROM statement WHERE period = '2026-07-01')
           FROM closed_period c WHERE period = '2026-07-01'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    let (count, total, algorithm, currency, fresh, entries, statements): (i64, String, String, String, bool, i64, i64) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
        row.get(6),
    );
    assert_eq!(
        (count, algorithm.as_str(), currency.as_str(), fresh),
        (entries, "sha256-digests-v3", "USD", true)
    );
    assert_ne!(total, "12345.67");
    assert!(statements > 0);
    let verify = ok(&db.cli(&["verify", "--month", "2026-07"]));
    assert!(verify.starts_with("2026-07: seal holds"), "{verify}");
}

#[tokio::test]
async fn a_sealed_month_keeps_its_currency_and_a_rewritten_chain_shows_outside_the_database() {
    let db = october().await;
    let p = &db.pool;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("anchors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let anchors = dir.join("seals.jsonl");
    let a = anchors.to_str().unwrap();
    for month in ["2026-07", "2026-08", "2026-09", "2026-10"] {
        let out = ok(&db.cli(&["close", "--month", month, "--anchor-file", a]));
        assert!(out.contains("seal (sha256-digests-v3): "), "{out}");
    }
    // Closing again appends nothing new.
    ok(&db.cli(&["close", "--month", "2026-10", "--anchor-file", a]));
    assert_eq!(std::fs::read_to_string(&anchors).unwrap().lines().count(), 4);
    assert!(
        ok(&db.cli(&["verify", "--against", a]))
            .lines()
            .all(|l| l.ends_with("matches its anchor"))
    );

    // The center cannot be removed and re-applied with another currency.
    for sql in ["DELETE FROM center", "TRUNCATE center CASCADE"] {
        let e = sqlx::raw_sql(sql).execute(p).await.unwrap_err().to_string();
        assert!(
            e.contains("the center cannot be removed once anything is recorded"),
            "{sql}: {e}"
        );
    }

    // The owner goes past the database: edits an August charge, rewrites
    // August's currency and statement numbers, and re-seals every month from
    // August on so that the database's own checks pass again.
    // (amount_exact = quantity × unit_rate is a CHECK: the edit keeps it true.)
    sqlx::raw_sql(
        "ALTER TABLE ledger_entry DISABLE TRIGGER USER; ALTER TABLE closed_period DISABLE TRIGGER USER;
         ALTER TABLE statement DISABLE TRIGGER USER;
         UPDATE ledger_entry SET quantity = quantity * 2, amount_exact = amount_exact * 2, amount = round(amount_exact * 2, 2)
          WHERE id = (SELECT min(id) FROM ledger_entry WHERE period = '2026-08-01' AND kind = 'storage');
         UPDATE closed_period SET currency = 'EUR' WHERE period = '2026-08-01';",
    )
    .execute(p)
    .await
    .unwrap();
    // Before re-sealing: August and every later month are broken.
    let v = db.cli(&["verify"]);
    assert_eq!(v.status.code(), Some(5));
    let out = crate::harness::stdout(&v);
    assert!(out.contains("2026-07: seal holds"), "{out}");
    for m in ["2026-08", "2026-09", "2026-10"] {
        assert!(out.contains(&format!("{m}: SEAL BROKEN")), "{out}");
    }
    // Re-seal August, September and October in order, as the owner can.
    sqlx::raw_sql(
        "UPDATE statement SET total = t.total FROM (SELECT project_id, period, sum(amount) AS total FROM ledger_entry GROUP BY 1, 2) t
          WHERE t.project_id = statement.project_id AND t.period = statement.period AND statement.period >= '2026-08-01';
         UPDATE closed_period c SET total = (SELECT sum(amount) FROM ledger_entry WHERE period = c.period) WHERE period >= '2026-08-01';
         UPDATE closed_period SET seal = hl_month_seal_v3('2026-08-01', (SELECT seal FROM closed_period WHERE period = '2026-07-01'), currency, closed_by, closed_at) WHERE period = '2026-08-01';
         UPDATE closed_period SET seal = hl_month_seal_v3('2026-09-01', (SELECT seal FROM closed_period WHERE period = '2026-08-01'), currency, closed_by, closed_at) WHERE period = '2026-09-01';
         UPDATE closed_period SET seal = hl_month_seal_v3('2026-10-01', (SELECT seal FROM closed_period WHERE period = '2026-09-01'), currency, closed_by, closed_at) WHERE period = '2026-10-01';
         ALTER TABLE ledger_entry ENABLE TRIGGER USER; ALTER TABLE closed_period ENABLE TRIGGER USER;
         ALTER TABLE statement ENABLE TRIGGER USER;",
    )
    .execute(p)
    .await
    .unwrap();
    // The database now agrees with itself...
    assert!(ok(&db.cli(&["verify"])).lines().all(|l| l.contains("seal holds")));
    let statement = ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-08"]));
    assert!(statement.contains("EUR"), "{statement}");
    // ...but not with the seals kept outside it, and closing August again
    // does not anchor its new seal beside the old.
    let again = db.cli(&["close", "--month", "2026-08", "--anchor-file", a]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("the month's seal was changed after it was anchored; nothing was appended"),
        "{err}"
    );
    // Closing again would fail the same way: not advised.
    assert!(err.contains("2026-08 is closed; its seal was not anchored"), "{err}");
    assert!(!err.contains("again with the anchor option"), "{err}");
    assert_eq!(std::fs::read_to_string(&anchors).unwrap().lines().count(), 4);
    let v = db.cli(&["verify", "--against", a]);
    assert_eq!(v.status.code(), Some(5));
    let out = crate::harness::stdout(&v);
    assert!(out.contains("2026-07: matches its anchor"), "{out}");
    for m in ["2026-08", "2026-09", "2026-10"] {
        assert!(out.contains(&format!("{m}: DIFFERS FROM ITS ANCHOR")), "{out}");
    }
}

/// A `close --through` stopped after months committed but before their
/// seals reached the anchor file (here: closed without one): the next
/// close with the file anchors them, in order, each once.
#[tokio::test]
async fn months_closed_without_their_anchor_are_anchored_by_the_next_close() {
    let db = october().await;
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("anchors-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let anchors = dir.join("seals.jsonl");
    let a = anchors.to_str().unwrap();
    ok(&db.cli(&["close", "--through", "2026-08"]));
    // An earlier append cut short by a full disk: no newline after it.
    std::fs::write(&anchors, "{\"month\":\"2026-06\",\"seal_alg").unwrap();
    let out = db.cli(&["close", "--through", "2026-10", "--anchor-file", a]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("held no seal of 2026-07, 2026-08 (closed before, not anchored there); appended"),
        "{err}"
    );
    ok(&out);
    let months: Vec<String> = std::fs::read_to_string(&anchors)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["month"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(months, ["2026-07", "2026-08", "2026-09", "2026-10"]);
    let out = db.cli(&["verify", "--against", a]);
    let checked = ok(&out);
    assert_eq!(
        checked.lines().filter(|l| l.ends_with("matches its anchor")).count(),
        4,
        "{checked}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("seals.jsonl:1: not an anchor"), "{err}");
    // Again: nothing to add.
    let out = db.cli(&["close", "--month", "2026-10", "--anchor-file", a]);
    ok(&out);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&anchors).unwrap().lines().count(), 5);
}

/// The anchor service down: the month just closed is reported closed (in
/// `months`), the run stops there, and the error says how to anchor it.
#[tokio::test]
async fn a_month_closed_whose_anchor_failed_is_reported_closed() {
    let db = october().await;
    let out = db.cli(&[
        "close",
        "--through",
        "2026-08",
        "--anchor-url",
        "http://127.0.0.1:9/anchors",
        "--format",
        "json",
    ]);
    assert!(!out.status.success());
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let months: Vec<&str> = j["months"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["month"].as_str().unwrap())
        .collect();
    assert_eq!(months, ["2026-07"]);
    let stopped = j["stopped"].as_str().unwrap();
    assert!(
        stopped.starts_with("2026-07 is closed; its seal was not kept outside the database"),
        "{stopped}"
    );
}

#[tokio::test]
async fn the_audit_finds_its_own_guards_and_views_altered() {
    let db = october().await;
    for month in ["2026-07", "2026-08"] {
        ok(&db.cli(&["close", "--month", month]));
    }
    let p = &db.pool;
    // As migrated: nothing altered. (This also keeps the list of triggers in
    // src/db/definitions.rs in step with the migrations.)
    let mut conn = p.acquire().await.unwrap();
    assert_eq!(
        hpc_ledger::db::definitions::altered(&mut conn, true).await.unwrap(),
        vec![]
    );
    drop(conn);
    // The owner makes the guards let everything through, and the seal view
    // agree with whatever is recorded; and, body untouched, points a definer
    // function's search path at the caller's temporary schema first, makes
    // another run as its caller, gives a third to another role, and has the
    // seal's aggregate fold with a function of its own.
    let owner = format!("hl_own_{}", std::process::id());
    sqlx::raw_sql(&format!(
        "CREATE ROLE {owner};
         ALTER FUNCTION hl_fold_rollups() SET search_path = pg_temp, public;
         ALTER FUNCTION hl_refresh_statistics(text[], bigint[]) SET search_path = \"Public\", pg_temp;
         CREATE SCHEMA elsewhere;
         CREATE FUNCTION elsewhere.hl_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
         DROP TRIGGER job_no_truncate ON job;
         CREATE TRIGGER job_no_truncate BEFORE TRUNCATE ON job FOR EACH STATEMENT EXECUTE FUNCTION elsewhere.hl_refuse_change();
         ALTER TABLE job ENABLE ALWAYS TRIGGER job_no_truncate;
         ALTER FUNCTION hl_archive_months(date[], text, text[], bytea[]) SECURITY INVOKER;
         ALTER FUNCTION hl_period_lock_key() OWNER TO {owner};
         CREATE FUNCTION keep_state(bytea, text) RETURNS bytea LANGUAGE sql AS $$ SELECT $1 $$;
         CREATE OR REPLACE AGGREGATE hl_seal_chain(text) (SFUNC = keep_state, STYPE = bytea, INITCOND = '');
         CREATE FUNCTION hl_archived_until(x integer) RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() $$;"
    ))
    .execute(p)
    .await
    .unwrap();
    sqlx::raw_sql(
        "CREATE OR REPLACE FUNCTION hl_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
         ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_guard;
         ALTER TABLE closed_period ENABLE TRIGGER closed_period_in_order;
         CREATE OR REPLACE VIEW audit.seals AS
         SELECT period, closed_at, closed_by, seal_algorithm, encode(seal, 'hex') AS recorded_seal,
                encode(seal, 'hex') AS recomputed_seal, entry_count AS recorded_entries, entry_count AS entries,
                total AS recorded_total, total::numeric AS total, currency, NULL::text AS archived_to
           FROM closed_period;",
    )
    .execute(p)
    .await
    .unwrap();
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(5), "{}", crate::harness::stdout(&o));
    let out = crate::harness::stdout(&o);
    for line in [
        "function hl_refuse_change: its body is not the migrations' (replaced)",
        // Replaced without its search path (migration 0066 gave it one).
        "function hl_refuse_change: its settings are [], not the migrations' [search_path=public,pg_temp]",
        "trigger ledger_entry_guard on ledger_entry: disabled",
        "trigger closed_period_in_order on closed_period: enabled as O, not A",
        "view audit.seals: its query is not the migrations' (replaced)",
        "function hl_fold_rollups: its settings are [search_path=pg_temp, public], not the migrations' [search_path=public,pg_temp]",
        "function hl_archive_months: runs as its caller; the migrations made it run as its owner (SECURITY DEFINER)",
        &format!("function hl_period_lock_key: belongs to {owner}, not to the ledger's owner"),
        "aggregate hl_seal_chain: folds with public.keep_state over bytea from '' (final: none), not the migrations' public.hl_seal_step over bytea from '' (final: none)",
        "function hl_refresh_statistics: its settings are [search_path=\"Public\", pg_temp], not the migrations' [search_path=public,pg_temp]",
        "trigger job_no_truncate on job: calls elsewhere.hl_refuse_change, not hl_refuse_change",
        "function hl_archived_until: defined 2 times: the migrations define it once (an overload, which a call may \
         resolve to instead)",
        "function public.keep_state: not installed by any migration (1 definition; a call in the ledger's functions \
         may resolve to it)",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    // Nothing else is reported: the body check, the settings and the owner
    // each name only what was changed.
    assert_eq!(out.matches("function hl_").count(), 7, "{out}");
    // The auditor role finds the same (it reads catalogs and makes temporary views only).
    let auditor = format!("hl_aud_{}", std::process::id());
    sqlx::raw_sql(&format!("CREATE ROLE {auditor} LOGIN IN ROLE hpc_ledger_auditor"))
        .execute(p)
        .await
        .unwrap();
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&auditor).unwrap();
    let o = cli_with_env(&["audit"], &[("DATABASE_URL", url.as_str())], None);
    let out = crate::harness::stdout(&o);
    assert!(
        out.contains("view audit.seals: its query is not the migrations' (replaced)"),
        "{out}{}",
        crate::harness::stderr(&o)
    );
    sqlx::raw_sql(&format!(
        "DROP ROLE {auditor}; ALTER FUNCTION hl_period_lock_key() OWNER TO CURRENT_USER; DROP ROLE {owner}"
    ))
    .execute(p)
    .await
    .unwrap();
}

/// August sealed again by `algorithm` from July's seal, as the owner
/// can (past the triggers).
async fn reseal_august(p: &sqlx::PgPool, algorithm: &str) {
    sqlx::raw_sql("ALTER TABLE closed_period DISABLE TRIGGER USER")
        .execute(p)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE closed_period SET seal_algorithm = $1,
                seal = hl_month_seal_of($1, period, (SELECT seal FROM closed_period WHERE period = '2026-07-01'),
                                        currency, closed_by, closed_at)
          WHERE period = '2026-08-01'",
    )
    .bind(algorithm)
    .execute(p)
    .await
    .unwrap();
    sqlx::raw_sql("ALTER TABLE closed_period ENABLE TRIGGER USER")
        .execute(p)
        .await
        .unwrap();
}

/// Seal v3 (migration 0041) covers what v2 left out of an entry: its
/// charging rules version and its discount (the entry's text with both is
/// checked in schema.rs). The owner changes the version of a charge in a
/// closed month: under v3 the month's seal breaks; sealed with v2, the
/// same change passes.
#[tokio::test]
async fn seal_v3_covers_the_charging_rules_version() {
    let db = october().await;
    let p = &db.pool;
    for month in ["2026-07", "2026-08"] {
        ok(&db.cli(&["close", "--month", month]));
    }
    // A storage charge whose exact amount is its quantity times its rate,
    // so the charging rules version 1 is allowed by the table's CHECK.
    let entry = id(
        p,
        "SELECT min(id) FROM ledger_entry WHERE period = '2026-08-01' AND kind = 'storage'
            AND amount_exact = quantity * unit_rate AND charging_rules = 3",
    )
    .await;
    let edit = format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER USER;
         UPDATE ledger_entry SET charging_rules = 1 WHERE id = {entry};
         ALTER TABLE ledger_entry ENABLE TRIGGER USER;"
    );
    sqlx::raw_sql(&edit).execute(p).await.unwrap();
    let v = db.cli(&["verify"]);
    assert_eq!(v.status.code(), Some(5));
    let out = crate::harness::stdout(&v);
    assert!(out.contains("2026-07: seal holds"), "{out}");
    assert!(out.contains("2026-08: SEAL BROKEN"), "{out}");

    // August sealed with v2 over the edited entry: its seal holds, and
    // it still holds with the version set back (v2 does not see it).
    reseal_august(p, "sha256-chain-v2").await;
    sqlx::raw_sql(&edit.replace("charging_rules = 1", "charging_rules = 3"))
        .execute(p)
        .await
        .unwrap();
    assert!(
        ok(&db.cli(&["verify"])).lines().all(|l| l.contains("seal holds")),
        "v2 does not cover the charging rules"
    );

    // Sealed with v3 again, the same month holds with the version as it
    // was: the seal above broke on the version alone.
    reseal_august(p, "sha256-digests-v3").await;
    assert!(ok(&db.cli(&["verify"])).lines().all(|l| l.contains("seal holds")));
}

/// The close seals a month from the digests recorded as its entries were
/// posted (migration 0041); `verify` recomputes each from the entry's
/// values. Every recorded digest is its entry's, and one forged in an open
/// month (by an owner past the triggers) breaks the month's seal at the
/// close instead of passing into it.
#[tokio::test]
async fn the_close_seals_recorded_digests_and_verify_recomputes_them() {
    let db = october().await;
    let p = &db.pool;
    let (entries, recorded, theirs): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(seal_digest),
                count(*) FILTER (WHERE seal_digest = sha256(convert_to(hl_entry_text_v3(e), 'UTF8')))
           FROM ledger_entry e",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert!(entries > 20, "{entries}");
    assert_eq!((recorded, theirs), (entries, entries));
    let forged = id(
        p,
        "SELECT min(id) FROM ledger_entry WHERE period = '2026-08-01' AND kind = 'storage'",
    )
    .await;
    sqlx::raw_sql(&format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER USER;
         UPDATE ledger_entry SET seal_digest = sha256('not this entry') WHERE id = {forged};
         ALTER TABLE ledger_entry ENABLE TRIGGER USER;"
    ))
    .execute(p)
    .await
    .unwrap();
    for month in ["2026-07", "2026-08"] {
        ok(&db.cli(&["close", "--month", month]));
    }
    let v = db.cli(&["verify"]);
    assert_eq!(v.status.code(), Some(5));
    let out = crate::harness::stdout(&v);
    assert!(out.contains("2026-07: seal holds"), "{out}");
    assert!(out.contains("2026-08: SEAL BROKEN"), "{out}");
    // The seal recorded is the one over the forged digest; over the
    // entries' own values it is another.
    let (recorded, recomputed, posted): (Vec<u8>, Vec<u8>, Vec<u8>) = sqlx::query_as(
        "SELECT c.seal, hl_month_seal_v3(c.period, b.seal, c.currency, c.closed_by, c.closed_at),
                hl_month_seal_v3(c.period, b.seal, c.currency, c.closed_by, c.closed_at, true)
           FROM closed_period c JOIN closed_period b ON b.period = '2026-07-01' WHERE c.period = '2026-08-01'",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(recorded, posted);
    assert_ne!(recorded, recomputed);
}

/// An extension's functions in `public` are not findings; an overload of
/// an `hl_*` function is, also when made a member of an extension.
#[tokio::test]
async fn an_extensions_functions_are_not_findings_but_an_overload_hidden_in_one_is() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let available: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm')")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    if !available {
        eprintln!("skipped: PostgreSQL's pg_trgm extension (contrib) is not installed here");
        return;
    }
    sqlx::raw_sql("CREATE EXTENSION pg_trgm SCHEMA public")
        .execute(&mut *conn)
        .await
        .unwrap();
    let trgm: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE '%trgm%'",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert!(trgm > 5, "{trgm}");
    assert_eq!(
        hpc_ledger::db::definitions::altered(&mut conn, false).await.unwrap(),
        vec![]
    );
    sqlx::raw_sql(
        "CREATE FUNCTION hl_archived_until(x integer) RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() $$;
         ALTER EXTENSION pg_trgm ADD FUNCTION hl_archived_until(integer);",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let found: Vec<String> = hpc_ledger::db::definitions::altered(&mut conn, false)
        .await
        .unwrap()
        .iter()
        .map(|a| format!("{} {}: {}", a.kind, a.name, a.problem))
        .collect();
    assert_eq!(
        found,
        [
            "function hl_archived_until: defined 2 times: the migrations define it once (an overload, which a call may \
          resolve to instead)"
        ]
    );
}

/// Round 3 (an auditor's review of 2026-12-07): what a billing or ingest
/// login could write with plain SQL and neither the database nor the audit
/// noticed. Each is refused now.
#[tokio::test]
async fn a_month_billed_twice_a_backdated_entry_rewritten_evidence_and_a_false_export_log_are_refused() {
    let db = october().await;
    let p = &db.pool;
    // 1. A copy of a project's storage charge of October, with its segments.
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "WITH e AS (INSERT INTO ledger_entry (period, project_id, kind, metric, storage_rate_id, billing_run_id,
                                               quantity, unit_rate, amount_exact, amount, author)
                    SELECT period, project_id, kind, metric, storage_rate_id, billing_run_id, quantity, unit_rate,
                           amount_exact, amount, author
                      FROM ledger_entry WHERE kind = 'storage' AND period = '2026-10-01' ORDER BY id LIMIT 1
                    RETURNING id)
         INSERT INTO storage_charge_segment
         SELECT e.id, s.first_day, s.last_day, s.days, s.quota_tb, s.tb_month_price
           FROM storage_charge_segment s, e
          WHERE s.ledger_entry_id = (SELECT min(id) FROM ledger_entry WHERE kind = 'storage' AND period = '2026-10-01')",
    )
    .await
    .unwrap_err();
    assert!(e.contains("ledger_entry_storage_once"), "{e}");
    // 2. A debit backdated out of every allocation's window: posted now.
    ok(&db.cli(&[
        "alloc",
        "grant",
        "PAS1234",
        "1000.00",
        "--from",
        "2026-07-01",
        "--reason",
        "award",
    ]));
    let used = |p: &PgPool| {
        let p = p.clone();
        async move {
            let used: rust_decimal::Decimal = sqlx::query_scalar(
                "SELECT used FROM audit.balances b JOIN project p ON p.code = b.project
                  WHERE p.code = 'PAS1234' AND b.cluster IS NULL",
            )
            .fetch_one(&p)
            .await
            .unwrap();
            used
        }
    };
    let before = used(p).await;
    as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO ledger_entry (posted_at, period, project_id, kind, quantity, unit_rate, amount_exact, amount,
                                   author, reason)
         SELECT TIMESTAMPTZ '2026-03-15 12:00+00', DATE '2026-11-01', id, 'adjustment', 1, 500, 500, 500,
                'alice', 'backdated debit'
           FROM project WHERE code = 'PAS1234'",
    )
    .await
    .unwrap();
    let posted: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT posted_at FROM ledger_entry WHERE reason = 'backdated debit'")
            .fetch_one(p)
            .await
            .unwrap();
    assert!(chrono::Utc::now() - posted < chrono::TimeDelta::minutes(5), "{posted}");
    assert_eq!(used(p).await - before, rust_decimal::Decimal::new(50000, 2));
    // 3. A rejection's record rewritten (to be dismissed as junk), by the
    // roles that keep and resolve them.
    let unknown = JOB.replace("PAS1234", "PNEW001");
    let env = [("DATABASE_URL", db.url.as_str())];
    let o = cli_with_env(
        &["import", "--format", "jsonl", "-"],
        &env,
        Some(&format!("{unknown}\n")),
    );
    assert_eq!(o.status.code(), Some(4));
    for role in ["hpc_ledger_billing", "hpc_ledger_ingest"] {
        for set in [
            "raw = 'junk', raw_sha256 = sha256('junk')",
            "first_seen_at = now()",
            "source_format = 'cli'",
        ] {
            let e = as_role(p, role, &format!("UPDATE rejected_record SET {set}"))
                .await
                .unwrap_err();
            assert!(e.contains("is kept as it was read"), "{role}: {set}: {e}");
        }
    }
    // Read again, it is updated as before (where and when it was seen).
    let o = cli_with_env(
        &["import", "--format", "jsonl", "-"],
        &env,
        Some(&format!("{unknown}\n")),
    );
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(
        id(
            p,
            "SELECT times_seen::bigint FROM rejected_record WHERE raw LIKE '%PNEW001%'"
        )
        .await,
        2
    );
    // 4. A journal export logged with totals, and a date, of one's choosing.
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    ok(&db.cli(&["export", "journal", "--month", "2026-10", "--out", "/dev/null"]));
    // Written into, not replaced by a file (the journal is written beside a
    // regular file and renamed over it; a device is written in place).
    assert!(
        std::os::unix::fs::FileTypeExt::is_char_device(&std::fs::metadata("/dev/null").unwrap().file_type()),
        "/dev/null is still the device"
    );
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO journal_export (period, exported_at, exported_by, line_count, debit_total, credit_total, digest)
         SELECT period, '2026-11-02', 'controller', 3, 9999.99, 0.01, digest FROM journal_export",
    )
    .await
    .unwrap_err();
    assert!(e.contains("journal is logged as it was"), "{e}");
    // The log of the real export: now, with the journal's own figures.
    let (at, lines): (chrono::DateTime<chrono::Utc>, i32) =
        sqlx::query_as("SELECT exported_at, line_count FROM journal_export")
            .fetch_one(p)
            .await
            .unwrap();
    assert!(
        chrono::Utc::now() - at < chrono::TimeDelta::minutes(5) && lines > 0,
        "{at} {lines}"
    );
    // 5. A GPU-hour charge reversed as core-hours (the money back, the
    // GPU-hours kept in the usage): a reversal mirrors its entry's metric.
    let reverse_as = |metric: &str| {
        format!(
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                       quantity, unit_rate, amount_exact, amount, charging_rules, author, reason)
             SELECT '2026-11-01', project_id, 'reversal', '{metric}', job_record_id, rate_card_id, id, -quantity,
                    unit_rate, -amount_exact, -amount, charging_rules, 'x', 'fix'
               FROM ledger_entry WHERE kind = 'job' AND metric = 'gpu_hours' ORDER BY id LIMIT 1"
        )
    };
    let e = as_role(p, "hpc_ledger_billing", &reverse_as("core_hours"))
        .await
        .unwrap_err();
    assert!(e.contains("does not mirror the entry it reverses"), "{e}");
    as_role(p, "hpc_ledger_billing", &reverse_as("gpu_hours"))
        .await
        .unwrap();
    assert!(hpc_ledger::service::close::audit(p).await.unwrap().clean());
}

/// With plain SQL the billing role could post a refund of all of a job
/// charge's core-hours for a cent (the usage report lost them while the
/// money stayed charged) and an adjustment of quantity 1 at a rate of −10
/// that posts 500.00 (an auditor's review of 2026-12-07); both are refused
/// since migration 0065, and a refund whose quantity is its share is not.
#[tokio::test]
async fn a_refund_of_every_core_hour_for_a_cent_and_an_adjustment_not_its_own_rate_are_refused() {
    let db = october().await;
    let p = &db.pool;
    let refund = |quantity: &str| {
        format!(
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                       quantity, unit_rate, amount_exact, amount, author, reason, charging_rules)
             SELECT period, project_id, 'refund', metric, job_record_id, rate_card_id, id,
                    {quantity}, unit_rate, -0.01, -0.01, 'alice', 'a cent back', charging_rules
               FROM ledger_entry
              WHERE kind = 'job' AND charging_rules >= 3
                AND NOT EXISTS (SELECT 1 FROM ledger_entry d WHERE d.corrects_id = ledger_entry.id)
              ORDER BY amount_exact DESC LIMIT 1"
        )
    };
    let e = as_role(p, "hpc_ledger_billing", &refund("-quantity"))
        .await
        .unwrap_err();
    assert!(
        e.contains("takes back") && e.contains("not the share of its net"),
        "{e}"
    );
    // The cent's share of the quantity, to 12 places, is posted.
    as_role(
        p,
        "hpc_ledger_billing",
        &refund("-round(quantity * 0.01 / amount_exact, 12)"),
    )
    .await
    .unwrap();
    assert_eq!(
        id(p, "SELECT count(*) FROM ledger_entry WHERE reason = 'a cent back'").await,
        1
    );
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, author, reason)
         SELECT DATE '2026-11-01', id, 'adjustment', 1, -10, 500, 500, 'alice', 'a debit at a credit rate'
           FROM project WHERE code = 'PAS1234'",
    )
    .await
    .unwrap_err();
    assert!(e.contains("ledger_entry_adjustment_is_its_amount"), "{e}");
}

/// A temporary table of a guard's table's name does not answer for it (a
/// security review of 2026-12-07): the guards looked their tables up by the
/// session's search path, whose temporary schema comes first, so the
/// ingest role posted a job charge into a closed month after `CREATE TEMP
/// TABLE closed_period`, and the billing role a quota into billed months
/// with a temporary `billing_run`. Every guard searches `public, pg_temp`
/// since migration 0066.
#[tokio::test]
async fn a_temporary_table_does_not_stand_in_for_what_a_guard_reads() {
    let db = october().await;
    let p = &db.pool;
    ok(&db.cli(&["close", "--month", "2026-07"]));
    let copy = "CREATE TEMP TABLE closed_period (period date);
         INSERT INTO public.ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity,
                                          unit_rate, amount_exact, amount, author, charging_rules)
         SELECT period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact,
                amount, 'mallory', charging_rules
           FROM public.ledger_entry WHERE kind = 'job' AND period = '2026-07-01' ORDER BY id LIMIT 1";
    for role in ["hpc_ledger_ingest", "hpc_ledger_billing"] {
        let e = as_role(p, role, copy).await.unwrap_err();
        assert!(e.contains("2026-07, which is closed"), "{role}: {e}");
    }
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "CREATE TEMP TABLE billing_run (period date, kind text);
         INSERT INTO public.storage_quota (project_id, effective_from, quota_tb, recorded_by)
         SELECT id, '2026-05-01T00:00:00Z', 0, 'mallory' FROM public.project WHERE code = 'PAS1234'",
    )
    .await
    .unwrap_err();
    assert!(e.contains("billed"), "{e}");
    ok(&db.cli(&["verify"]));
    // Every trigger function but the seal digest's (which reads no table)
    // runs with the ledger's own search path.
    let loose: Vec<String> = sqlx::query_scalar(
        "SELECT proname::text FROM pg_proc
          WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'hl\\_%'
            AND prorettype = 'trigger'::regtype AND proname <> 'hl_entry_seal_digest'
            AND NOT coalesce(proconfig @> ARRAY['search_path=public, pg_temp'], false)
          ORDER BY 1",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert_eq!(loose, Vec::<String>::new());
}

/// A charge posted today by retired rules (a security review of
/// 2026-12-07): the ingest role posted a job charge claiming charging rules
/// 1 (no single-node cap), which `audit` recomputed by version 1 and
/// passed. A job or storage charge or an adjustment is posted by the rules
/// in force since migration 0067.
#[tokio::test]
async fn a_charge_or_adjustment_posted_by_retired_rules_is_refused() {
    let db = october().await;
    let p = &db.pool;
    let e = as_role(
        p,
        "hpc_ledger_ingest",
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate,
                                   amount_exact, amount, author, charging_rules)
         SELECT period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate,
                quantity * unit_rate, round(quantity * unit_rate, 2), 'mallory', 1
           FROM ledger_entry WHERE kind = 'job' ORDER BY id LIMIT 1",
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("is posted by charging rules 1, but version 3 is in force"),
        "{e}"
    );
    let e = as_role(
        p,
        "hpc_ledger_billing",
        "INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, author, reason,
                                   charging_rules)
         SELECT DATE '2026-11-01', id, 'adjustment', 1, -10, -10, -10, 'mallory', 'old rules', 2
           FROM project WHERE code = 'PAS1234'",
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("is posted by charging rules 2, but version 3 is in force"),
        "{e}"
    );
}
