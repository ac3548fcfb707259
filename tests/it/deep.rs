//! `audit --deep` (issue 13, item 7): every kept raw record, read again,
//! says what the ledger stores; edits the SQL audit cannot see are found.

use hpc_ledger::service::deep::{DeepReport, PAGE, deep_audit, deep_audit_by};

use crate::fixtures::{fixture_db, import_fixture, stripped};
use crate::harness::{TestDb, stderr, stdout};

/// Every real record this project keeps, through each way of recording.
const FIXTURES: [&str; 20] = [
    "apel_slurm_sacct_parsable2.log",
    "apel_torque_accounting_E.log",
    "hbjobinfo_habrok_sacct_snowman.txt",
    "hnormalise_torque_accounting.log",
    "ncar_pbspro_casper_accounting.log",
    "ncar_qhist_casper_pbspro_2025.log",
    "safe_cirrus_sacct_parsable.log",
    "safe_fzk_torque_doubled_nodes.log",
    "safe_hector_cray_mppwidth.log",
    "safe_oxford_sacct_parsable_allocgres.log",
    "safe_pbs_no_resource_list.log",
    "slurm_2205_e2e_jobcomp_filetxt.log",
    "slurm_2205_e2e_sacct_jobs.txt",
    "slurm_2205_lab_jobcomp_filetxt.log",
    "slurm_2205_lab_sacct.json",
    "slurm_2205_lab_sacct_header.txt",
    "xdmod_pbs_torque_accounting_E.log",
    "xdmod_slurm_sacct_parsable2_edgecases.log",
    "xdmod_slurm_sacct_parsable2_reference.log",
    "xdmod_slurm_sacct_parsable2_unit.log",
];

async fn recorded(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_record")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// (field, stored, re-read) of each difference.
fn differences(r: &DeepReport) -> Vec<(String, String, String)> {
    r.differences
        .iter()
        .map(|d| (d.field.clone(), d.stored.clone(), d.reread.clone()))
        .collect()
}

#[tokio::test]
async fn every_real_record_reads_again_to_what_the_ledger_stores() {
    let db = fixture_db().await;
    for name in FIXTURES {
        import_fixture(&db, name, false).await;
    }
    // Slurm's jobcomp documents and a headerless sacct dump, as a user imports them.
    let jobcomp = stripped("slurm_2205_lab_jobcomp.jsonl");
    let o = db.cli(&["import", "--format", "jobcomp", jobcomp.to_str().unwrap()]);
    assert!(matches!(o.status.code(), Some(0 | 4)), "{}", stderr(&o));
    // `job record` from flags, in the epilogue's way.
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "testclu",
        "--job-id",
        "4242",
        "--project",
        "pas1234",
        "--queue",
        "regular",
        "--cores",
        "3",
        "--memory",
        "7GB",
        "--start",
        "2026-10-05T09:10:00Z",
        "--end",
        "2026-10-05T11:10:00Z",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let n = recorded(&db).await;
    assert!(n > 150, "{n} records");
    let report = deep_audit(&db.pool).await.unwrap();
    assert_eq!(report.records, n as u64);
    assert_eq!(differences(&report), [], "{:#?}", report.differences.first());
    assert_eq!(report.unverifiable, []);
    // Read seven records at a time (the next page read while one is
    // compared): the same report.
    let paged = deep_audit_by(&db.pool, 100, 7).await.unwrap();
    assert_eq!(paged.records, n as u64);
    assert_eq!(
        serde_json::to_value(&paged).unwrap(),
        serde_json::to_value(&report).unwrap()
    );
    // The deep audit turns JIT off for its own connection, which it closes:
    // none the pool hands out afterwards has the setting.
    let mut settings = Vec::new();
    let mut held = Vec::new();
    for _ in 0..db.pool.options().get_max_connections() {
        let mut c = db.pool.acquire().await.unwrap();
        let jit: String = sqlx::query_scalar("SELECT current_setting('jit')")
            .fetch_one(&mut *c)
            .await
            .unwrap();
        settings.push(jit);
        held.push(c);
    }
    let server: String = sqlx::query_scalar("SELECT reset_val FROM pg_settings WHERE name = 'jit'")
        .fetch_one(&mut *held[0])
        .await
        .unwrap();
    assert!(settings.iter().all(|s| *s == server), "{settings:?} against {server}");
    drop(held);
    // How the records were read is kept once for each distinct set of
    // options (migration 0043), not with every record: the 17 files and two
    // other inputs bring at most 19 sets among their records.
    let (with_own_copy, kept, named): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_record WHERE read_options IS NOT NULL),
                (SELECT count(*) FROM record_read_options),
                (SELECT count(DISTINCT read_options_id) FROM job_record)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(with_own_copy, 0);
    assert_eq!(kept, named, "every set kept is some record's");
    assert!((2..=19).contains(&kept), "{kept} sets of read options for {n} records");
    let o = db.cli(&["audit", "--deep"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "deep: {n} job records read again from their raw records: every one says what the ledger stores"
        )),
        "{}",
        stdout(&o)
    );
}

/// Run SQL as the owner with the append-only guards off, as only the
/// owner could.
async fn tamper(db: &TestDb, sql: &str) {
    // The triggers are put back as they were (the audit checks their modes).
    sqlx::raw_sql(&format!(
        "CREATE TEMP TABLE saved AS SELECT tgrelid::regclass::text AS tab, tgname, tgenabled FROM pg_trigger
          WHERE tgrelid IN ('job_record'::regclass, 'ledger_entry'::regclass, 'job'::regclass) AND NOT tgisinternal;
         ALTER TABLE job_record DISABLE TRIGGER USER; ALTER TABLE ledger_entry DISABLE TRIGGER USER;
         ALTER TABLE job DISABLE TRIGGER USER;
         {sql};
         DO $$ DECLARE t record; BEGIN
             FOR t IN SELECT * FROM saved LOOP
                 EXECUTE format('ALTER TABLE %s %s TRIGGER %I', t.tab,
                                CASE t.tgenabled WHEN 'A' THEN 'ENABLE ALWAYS' WHEN 'R' THEN 'ENABLE REPLICA'
                                                 WHEN 'D' THEN 'DISABLE' ELSE 'ENABLE' END, t.tgname);
             END LOOP;
         END $$;
         DROP TABLE saved;"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn edits_the_sql_audit_cannot_see_are_found_by_re_reading_the_raw_records() {
    let db = fixture_db().await;
    import_fixture(&db, "xdmod_slurm_sacct_parsable2_reference.log", false).await;
    import_fixture(&db, "xdmod_pbs_torque_accounting_E.log", false).await;
    assert!(deep_audit(&db.pool).await.unwrap().clean());
    let record = |sql: &str| {
        let sql = sql.to_owned();
        let pool = db.pool.clone();
        async move { sqlx::query_scalar::<_, i64>(&sql).fetch_one(&pool).await.unwrap() }
    };
    // 1. Twice the cores, and a charge to match: the SQL audit recomputes
    //    the charge from the stored cores and is satisfied.
    let doubled = record("SELECT min(r.id) FROM job_record r WHERE r.nodes = 1 AND r.memory_bytes IS NULL").await;
    tamper(
        &db,
        &format!(
            "UPDATE job_record SET cores = cores * 2 WHERE id = {doubled};
             -- The charge recomputed as the audit will (charging rules 2).
             UPDATE ledger_entry e SET quantity = q.core_hours, amount_exact = q.core_exact,
                    amount = round(q.core_exact, 2)
               FROM job_record r JOIN job j ON j.id = r.job_id, rate_card rc,
                    hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus,
                                 extract(epoch FROM r.ended_at - j.started_at)::bigint,
                                 rc.memory_per_core_bytes, rc.cores_per_node,
                                 rc.core_hour_price, rc.gpu_hour_price) q
              WHERE r.id = {doubled} AND e.job_record_id = r.id AND rc.id = e.rate_card_id
                AND e.metric = 'core_hours'"
        ),
    )
    .await;
    // 2. A job moved to another project, with its charges.
    let moved = record("SELECT max(r.id) FROM job_record r WHERE r.source_format = 'slurm'").await;
    tamper(
        &db,
        &format!(
            "UPDATE job_record SET project_id = (SELECT id FROM project WHERE code <> (SELECT p.code FROM project p
                                                  JOIN job_record r ON r.project_id = p.id WHERE r.id = {moved})
                                                 ORDER BY id LIMIT 1) WHERE id = {moved};
             UPDATE ledger_entry e SET project_id = r.project_id FROM job_record r
              WHERE e.job_record_id = r.id AND r.id = {moved}"
        ),
    )
    .await;
    // 3. A job deleted: its charges and its record (the run row stays: it
    //    cannot be told from a job never seen otherwise).
    let deleted = record("SELECT min(r.id) FROM job_record r WHERE r.source_format = 'pbs'").await;
    tamper(
        &db,
        &format!(
            "DELETE FROM ledger_entry WHERE job_record_id = {deleted}; DELETE FROM job_record WHERE id = {deleted}"
        ),
    )
    .await;
    // 4. A charge deleted, its record kept.
    let uncharged = record("SELECT max(r.id) FROM job_record r WHERE r.source_format = 'pbs'").await;
    tamper(
        &db,
        &format!("DELETE FROM ledger_entry WHERE job_record_id = {uncharged}"),
    )
    .await;

    // Of the charges, the SQL audit finds only the missing one (its record
    // says it should exist); the other edits show only as usage sums that
    // no longer match the entries (`usage`: which months and users, not
    // which record).
    let plain = db.cli(&["audit"]);
    let out = stdout(&plain);
    let findings: Vec<&str> = out.lines().filter(|l| l.starts_with("       ")).collect();
    assert!(out.contains(&format!("for job record {uncharged}")), "{out}");
    assert_eq!(
        findings
            .iter()
            .filter(|l| !l.trim_start().starts_with("usage "))
            .count(),
        1,
        "{out}"
    );
    assert!(findings.len() > 1, "{out}");
    // The deep audit finds each.
    let report = deep_audit(&db.pool).await.unwrap();
    let by_record = |id: i64| -> Vec<String> {
        report
            .differences
            .iter()
            .filter(|d| d.record_id == Some(id))
            .map(|d| d.field.clone())
            .collect()
    };
    assert_eq!(by_record(doubled), ["cores"], "{:#?}", report.differences);
    let cores = report
        .differences
        .iter()
        .find(|d| d.record_id == Some(doubled))
        .unwrap();
    assert_eq!(
        cores.stored.parse::<i64>().unwrap(),
        2 * cores.reread.parse::<i64>().unwrap()
    );
    assert_eq!(by_record(moved), ["project"]);
    assert_eq!(by_record(uncharged), ["charge"]);
    let runs: Vec<&str> = report
        .differences
        .iter()
        .filter(|d| d.record_id.is_none())
        .map(|d| d.reread.as_str())
        .collect();
    assert_eq!(runs, ["none: its records were deleted"]);
    assert_eq!(report.differences.len(), 4, "{:#?}", report.differences);
    assert_eq!(report.differences_found, 4);
    // A report keeps only the first differences in full (a ledger whose
    // every record differs would otherwise hold them all in memory), and
    // counts every one, by field.
    let kept = deep_audit_by(&db.pool, 2, PAGE).await.unwrap();
    assert_eq!(kept.differences, report.differences[..2]);
    assert_eq!(kept.differences_found, 4);
    assert!(!kept.clean());
    let by_field: Vec<(&str, u64)> = kept
        .differences_by_field
        .iter()
        .map(|(f, n)| (f.as_str(), *n))
        .collect();
    assert_eq!(by_field, [("charge", 1), ("cores", 1), ("project", 1), ("record", 1)]);
    let o = db.cli(&["audit", "--deep"]);
    assert_eq!(o.status.code(), Some(5));
    assert!(
        stdout(&o).contains("4 difference(s) between a raw record and the ledger"),
        "{}",
        stdout(&o)
    );
    // The auditor role runs it too (it reads only the audit schema).
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET ROLE hpc_ledger_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let page = hpc_ledger::db::deep::records(&mut conn, 0, 5).await.unwrap();
    assert_eq!(page.len(), 5);
    sqlx::raw_sql("RESET ROLE").execute(&mut *conn).await.unwrap();

    // 5. A raw record rewritten: found by its fingerprints even where the
    //    fields the ledger stores are untouched.
    let rewritten =
        record("SELECT min(r.id) FROM job_record r WHERE r.source_format = 'slurm' AND r.raw LIKE '%|COMPLETED|%'")
            .await;
    tamper(
        &db,
        &format!("UPDATE job_record SET raw = replace(raw, 'COMPLETED', 'FAILED') WHERE id = {rewritten}"),
    )
    .await;
    let report = deep_audit(&db.pool).await.unwrap();
    let fields: Vec<&str> = report
        .differences
        .iter()
        .filter(|d| d.record_id == Some(rewritten))
        .map(|d| d.field.as_str())
        .collect();
    assert_eq!(fields, ["content fingerprint"], "{:#?}", report.differences);
}
