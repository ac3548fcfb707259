//! The database guards its own invariants, whoever writes to it.

use sqlx::PgPool;

use crate::harness::TestDb;

/// The SQLSTATE or constraint of a failed statement.
async fn refused(pool: &PgPool, sql: &str) -> String {
    match sqlx::raw_sql(sql).execute(pool).await {
        Ok(_) => panic!("accepted: {sql}"),
        Err(sqlx::Error::Database(e)) => {
            format!(
                "{} {}",
                e.code().unwrap_or_default(),
                e.constraint().unwrap_or(e.message())
            )
        }
        Err(e) => panic!("{e}"),
    }
}

/// A job charged once at 0.08 on rate card 1, in March 2026.
const ONE_CHARGE: &str = r#"
INSERT INTO center (name, currency, time_zone) VALUES ('C', 'USD', 'UTC');
INSERT INTO cluster (name, scheduler) VALUES ('c1', 'slurm');
INSERT INTO node_type (cluster_id, name, cores_per_node) VALUES (1, 'regular', 28);
INSERT INTO rate_card (cluster_id, node_type_id, valid_from, core_hour_price, gpu_hour_price, memory_per_core_bytes, cores_per_node)
     VALUES (1, 1, '2026-01-01Z', 0.01, 0, 4294967296, 28);
INSERT INTO project (code) VALUES ('P1');
INSERT INTO storage_quota (project_id, effective_from, quota_tb, recorded_by) VALUES (1, '2026-01-01Z', 10, 't');
INSERT INTO job (cluster_id, scheduler_job_id, submitted_at, started_at) VALUES (1, '1', '2026-03-01Z', '2026-03-01Z');
INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, ended_at, nodes, cores,
                        charge_fingerprint, content_fingerprint, source_format, raw, recorded_by)
     VALUES (1, 1, '2026-03-01Z', 1, 'original', 1, 1, '2026-03-01 02:00Z', 1, 4, sha256('a'), sha256('b'), 'cli', '{}', 't');
INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author)
     VALUES ('2026-03-01', 1, 'job', 'core_hours', 1, 1, 8, 0.01, 0.08, 0.08, 't');
"#;

#[tokio::test]
async fn ledger_entries_cannot_be_changed_or_removed_by_anyone() {
    let db = TestDb::new().await;
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    // The test role owns the tables and is a superuser: still refused.
    for sql in [
        "UPDATE ledger_entry SET amount = 0",
        "DELETE FROM ledger_entry",
        "TRUNCATE ledger_entry CASCADE",
        "UPDATE job_record SET cores = 1",
        "DELETE FROM job",
        "UPDATE storage_quota SET quota_tb = 0",
    ] {
        let code = refused(&db.pool, sql).await;
        assert!(code.starts_with("HL001"), "{sql}: {code}");
    }
    // Also with replication-mode triggers off.
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .unwrap();
    for sql in [
        "UPDATE ledger_entry SET amount = 0",
        "DELETE FROM ledger_entry",
        "TRUNCATE ledger_entry CASCADE",
    ] {
        let err = sqlx::raw_sql(sql).execute(&mut *conn).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    sqlx::raw_sql("RESET session_replication_role")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let amount: rust_decimal::Decimal = sqlx::query_scalar("SELECT sum(amount) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(amount.to_string(), "0.08");
}

#[tokio::test]
async fn constraints_refuse_what_cannot_be_true() {
    let db = TestDb::new().await;
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    let cases = [
        // Overlapping rate cards for one node type.
        (
            "INSERT INTO rate_card (cluster_id, node_type_id, valid_from, valid_until, core_hour_price, gpu_hour_price, memory_per_core_bytes, cores_per_node) VALUES (1, 1, '2025-06-01Z', '2026-02-01Z', 1, 0, 1, 1)",
            "rate_card_no_overlap",
        ),
        (
            "INSERT INTO rate_card (cluster_id, node_type_id, valid_from, core_hour_price, gpu_hour_price, memory_per_core_bytes, cores_per_node) VALUES (1, 1, '2020-01-01Z', -1, 0, 1, 1)",
            "rate_card_core_hour_price_check",
        ),
        ("INSERT INTO project (code) VALUES ('p1')", "project_code_key"),
        ("INSERT INTO project (code) VALUES (' padded')", "project_code_check"),
        (
            "INSERT INTO center (name, currency, time_zone) VALUES ('x', 'USD', 'UTC')",
            "center_pkey",
        ),
        (
            "INSERT INTO cluster (name, scheduler, time_zone) VALUES ('c2', 'slurm', 'Mars/Base')",
            "cluster_time_zone_check",
        ),
        (
            "UPDATE center SET currency = 'EUR'",
            "the currency and billing time zone cannot change",
        ),
        (
            "INSERT INTO storage_quota (project_id, effective_from, quota_tb, recorded_by) VALUES (1, now(), -1, 't')",
            "storage_quota_quota_tb_check",
        ),
        // By charging rules 1 a charge must be quantity × rate; by any
        // version its amount is its exact amount rounded half away from zero;
        // there is no version 3.
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, charging_rules, author) VALUES ('2026-03-01', 1, 'job', 'core_hours', 1, 1, 8, 0.01, 0.09, 0.09, 1, 't')",
            "ledger_entry_exact",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, charging_rules, author) VALUES ('2026-03-01', 1, 'job', 'core_hours', 1, 1, 8, 0.01, 0.08, 0.08, 4, 't')",
            "ledger_entry_charging_rules",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-03-01', 1, 'job', 'core_hours', 1, 1, 0.5, 0.01, 0.005, 0.00, 't')",
            "ledger_entry_rounded",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-03-15', 1, 'job', 'core_hours', 1, 1, 8, 0.01, 0.08, 0.08, 't')",
            "ledger_entry_period_is_month",
        ),
        // A rate card that priced a charge keeps its prices.
        ("UPDATE rate_card SET core_hour_price = 0.02", "has priced charges"),
        ("DELETE FROM rate_card", "has priced charges"),
        (
            "UPDATE rate_card SET valid_until = '2026-02-01Z'",
            "priced jobs submitted after",
        ),
        // One reversal per entry, exactly mirroring it.
        (
            "INSERT INTO ledger_entry (period, project_id, kind, corrects_id, quantity, unit_rate, amount_exact, amount, charging_rules, author) VALUES ('2026-04-01', 1, 'reversal', 1, -8, 0.01, -0.07, -0.07, 1, 't')",
            "ledger_entry_exact",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, corrects_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-04-01', 1, 'reversal', 1, -7, 0.01, -0.07, -0.07, 't')",
            "does not mirror",
        ),
    ];
    for (sql, expect) in cases {
        let got = refused(&db.pool, sql).await;
        assert!(got.contains(expect), "{sql}\n  expected {expect}, got {got}");
    }
    // Closing March makes it refuse postings; months close in order.
    crate::harness::close_by_hand(&db.pool, "2026-03-01").await;
    let got = refused(
        &db.pool,
        "INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, author, reason) VALUES ('2026-03-01', 1, 'adjustment', 1, -5, -5, -5, 't', 'credit')",
    )
    .await;
    assert!(got.contains("would post into 2026-03, which is closed"), "{got}");
    let got = refused(
        &db.pool,
        "INSERT INTO closed_period (period, closed_by, entry_count, total, seal_algorithm, seal) VALUES ('2026-05-01', 't', 0, 0, 'sha256-chain-v1', sha256('x'))",
    )
    .await;
    assert!(got.contains("the next month to close is 2026-04"), "{got}");
    // The reversal of the original posts once into April.
    sqlx::raw_sql(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, corrects_id, job_record_id, quantity, unit_rate, amount_exact, amount, author, reason) VALUES ('2026-04-01', 1, 'reversal', 'core_hours', 1, (SELECT job_record_id FROM ledger_entry WHERE id = 1), -8, 0.01, -0.08, -0.08, 't', 'wrong job')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let got = refused(
        &db.pool,
        "INSERT INTO ledger_entry (period, project_id, kind, metric, corrects_id, job_record_id, quantity, unit_rate, amount_exact, amount, author, reason) VALUES ('2026-04-01', 1, 'reversal', 'core_hours', 1, (SELECT job_record_id FROM ledger_entry WHERE id = 1), -8, 0.01, -0.08, -0.08, 't', 'wrong job')",
    )
    .await;
    assert!(got.contains("ledger_entry_one_reversal"), "{got}");
}

/// Migration 0010 checks references once per statement instead of with
/// foreign keys: the same refusals, naming the row, for a single row and for
/// one bad row among many (nothing of such a statement stays).
#[tokio::test]
async fn references_are_checked_per_statement() {
    let db = TestDb::new().await;
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    let cases = [
        (
            "INSERT INTO job (cluster_id, scheduler_job_id, started_at) VALUES (1, '2', '2026-03-02Z'), (7, '3', '2026-03-02Z')",
            "refers to cluster 7, which does not exist",
        ),
        (
            "INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, ended_at, nodes, cores,
                                     charge_fingerprint, content_fingerprint, source_format, raw, recorded_by)
                  VALUES (1, 1, '2026-03-01Z', 2, 'revision', 9, 1, '2026-03-01 02:00Z', 1, 4, sha256('a'), sha256('c'), 'cli', '{}', 't')",
            "refers to project 9, which does not exist",
        ),
        (
            "INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, ended_at, nodes, cores,
                                     charge_fingerprint, content_fingerprint, source_format, raw, recorded_by)
                  VALUES (1, 1, '2026-03-02Z', 2, 'revision', 1, 1, '2026-03-02 02:00Z', 1, 4, sha256('a'), sha256('c'), 'cli', '{}', 't')",
            "refers to job 1 (cluster 1, started 2026-03-02",
        ),
        (
            "INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, ended_at, nodes, cores,
                                     charge_fingerprint, content_fingerprint, source_format, raw, recorded_by)
                  VALUES (1, 1, '2026-03-01Z', 2, 'revision', 1, 5, '2026-03-01 02:00Z', 1, 4, sha256('a'), sha256('c'), 'cli', '{}', 't')",
            "refers to node type 5 of cluster 1, which does not exist",
        ),
        (
            "INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, ended_at, nodes, cores,
                                     charge_fingerprint, content_fingerprint, source_format, raw, read_options_id, recorded_by)
                  VALUES (1, 1, '2026-03-01Z', 2, 'revision', 1, 1, '2026-03-01 02:00Z', 1, 4, sha256('a'), sha256('c'), 'cli', '{}', 9, 't')",
            "refers to read options 9, which does not exist",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author)
                  SELECT '2026-03-01', 1, 'job', 'core_hours', 1, CASE WHEN i = 500 THEN 3 ELSE 1 END, 8, 0.01, 0.08, 0.08, 't'
                    FROM generate_series(1, 1000) i",
            "refers to rate card 3, which does not exist",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author)
                  VALUES ('2026-03-01', 1, 'job', 'core_hours', 42, 1, 8, 0.01, 0.08, 0.08, 't')",
            "refers to job record 42, which does not exist",
        ),
        (
            "INSERT INTO ledger_entry (period, project_id, kind, corrects_id, quantity, unit_rate, amount_exact, amount, author)
                  VALUES ('2026-04-01', 1, 'reversal', 77, -8, 0.01, -0.08, -0.08, 't')",
            "refers to ledger entry 77, which does not exist",
        ),
        (
            "INSERT INTO storage_charge_segment (ledger_entry_id, first_day, last_day, days, quota_tb, tb_month_price)
                  VALUES (1, '2026-03-01', '2026-03-31', 31, 10, 5), (88, '2026-03-01', '2026-03-31', 31, 10, 5)",
            "refers to ledger entry 88, which does not exist",
        ),
    ];
    for (sql, expect) in cases {
        let got = refused(&db.pool, sql).await;
        assert!(got.starts_with("23503 "), "{sql}\n  got {got}");
        assert!(got.contains(expect), "{sql}\n  expected {expect}, got {got}");
    }
    let counts: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job), (SELECT count(*) FROM job_record), (SELECT count(*) FROM ledger_entry),
                (SELECT count(*) FROM storage_charge_segment)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(counts, (1, 1, 1, 0), "a refused statement leaves nothing");

    // What is referenced stays, and keeps its key.
    for (sql, expect) in [
        ("DELETE FROM project", "HL004 project P1 has charges"),
        (
            "UPDATE rate_card SET id = DEFAULT",
            "HL004 rate_card 1 has priced charges",
        ),
        ("UPDATE project SET id = DEFAULT", "HL004 project P1 has charges"),
        ("DELETE FROM cluster", "HL004 cluster c1 has recorded jobs"),
        ("DELETE FROM node_type", "HL004 node type regular has recorded jobs"),
        ("TRUNCATE rate_card", "HL004 rate_card is referenced"),
        ("TRUNCATE node_type CASCADE", "HL004"),
    ] {
        let got = refused(&db.pool, sql).await;
        assert!(got.starts_with(expect), "{sql}\n  expected {expect}, got {got}");
    }
    // What is not referenced may still go.
    sqlx::raw_sql("INSERT INTO project (code) VALUES ('SPARE'); DELETE FROM project WHERE code = 'SPARE'")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// How records were read is stored once per distinct set of options
/// (migration 0043), also when two postings bring the same new set at once:
/// the second waits for the first, and names its row once it commits, or
/// stores the set itself if the first rolls back. The rows, like the
/// records naming them, are never changed.
#[tokio::test]
async fn read_options_are_stored_once_under_concurrent_postings() {
    let db = TestDb::new().await;
    let id_of = |options: &'static str| {
        let pool = db.pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let id: i64 = sqlx::query_scalar("SELECT hl_read_options_id($1::jsonb)")
                .bind(options)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            id
        }
    };
    let options = r#"{"fields": ["jobid", "account", "start", "end"], "delimiter": "|"}"#;
    for (first_commits, options) in [(true, options), (false, r#"{"fields": ["jobid", "end"]}"#)] {
        let mut first = db.pool.begin().await.unwrap();
        let a: i64 = sqlx::query_scalar("SELECT hl_read_options_id($1::jsonb)")
            .bind(options)
            .fetch_one(&mut *first)
            .await
            .unwrap();
        let second = tokio::spawn(id_of(options));
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert!(!second.is_finished(), "the second waits for the first's insert");
        if first_commits {
            first.commit().await.unwrap();
            assert_eq!(second.await.unwrap(), a);
        } else {
            first.rollback().await.unwrap();
            let b = second.await.unwrap();
            assert_ne!(b, a, "the first's row went with it");
        }
    }
    // The same options written another way (key order, spacing) are the
    // same row; other options are another.
    let stored = id_of(options).await;
    assert_eq!(
        id_of(r#"{"delimiter":"|","fields":["jobid","account","start","end"]}"#).await,
        stored
    );
    assert_ne!(id_of(r#"{"fields": ["jobid", "account"]}"#).await, stored);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM record_read_options")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 3, "the first set, the second once, and the third");
    for sql in [
        "UPDATE record_read_options SET options = '{}'",
        "DELETE FROM record_read_options",
        "TRUNCATE record_read_options",
    ] {
        let code = refused(&db.pool, sql).await;
        assert!(code.starts_with("HL001"), "{sql}: {code}");
    }
    // A record names its options one way or the other, not both.
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    let got = refused(
        &db.pool,
        &format!(
            "INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, ended_at, nodes,
                                     cores, charge_fingerprint, content_fingerprint, source_format, raw, read_options,
                                     read_options_id, recorded_by)
                  VALUES (1, 1, '2026-03-01Z', 2, 'revision', 1, 1, '2026-03-01 02:00Z', 1, 4, sha256('a'), sha256('c'),
                          'cli', '{{}}', '{{}}', {stored}, 't')"
        ),
    )
    .await;
    assert_eq!(got, "23514 job_record_read_options_once");
}

/// A project being removed while another transaction charges it: the
/// removal waits for the charge (the check locks the project as a foreign
/// key would), then sees it and is refused.
#[tokio::test]
async fn a_referenced_row_cannot_go_under_a_concurrent_insert() {
    let db = TestDb::new().await;
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    sqlx::raw_sql("INSERT INTO project (code) VALUES ('P2')")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut charging = db.pool.begin().await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, author, reason)
              SELECT '2026-04-01', id, 'adjustment', 1, 5, 5, 5, 't', 'setup fee' FROM project WHERE code = 'P2'",
    )
    .execute(&mut *charging)
    .await
    .unwrap();
    let pool = db.pool.clone();
    let removal = tokio::spawn(async move { refused(&pool, "DELETE FROM project WHERE code = 'P2'").await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        !removal.is_finished(),
        "the removal must wait for the charging transaction"
    );
    charging.commit().await.unwrap();
    let got = removal.await.unwrap();
    assert!(got.starts_with("HL004 project P2 has charges"), "{got}");

    // Under REPEATABLE READ the removal could not see such a charge: refused
    // as a serialization failure, whatever it would find.
    sqlx::raw_sql("INSERT INTO project (code) VALUES ('P3')")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *conn)
        .await
        .unwrap();
    let err = sqlx::raw_sql("DELETE FROM project WHERE code = 'P3'")
        .execute(&mut *conn)
        .await
        .unwrap_err();
    let code = err.as_database_error().and_then(|e| e.code()).unwrap_or_default();
    assert_eq!(code, "40001", "{err}");
    sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
}

/// The reference checks are triggers, which the tables' owner can disable:
/// the audit then reports each entry whose referenced row is missing
/// instead of leaving it out of its joins.
#[tokio::test]
async fn the_audit_reports_entries_whose_references_are_missing() {
    let db = TestDb::new().await;
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_references;
         INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author)
              VALUES ('2026-03-01', 1, 'job', 'core_hours', 99, 1, 8, 0.01, 0.08, 0.08, 't');
         INSERT INTO ledger_entry (period, project_id, kind, metric, storage_rate_id, billing_run_id, quantity, unit_rate, amount_exact, amount, author)
              VALUES ('2026-03-01', 1, 'storage', 'tb_months', 42, 43, 1, 5, 5, 5, 't');
         INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, author, reason)
              VALUES ('2026-03-01', 77, 'adjustment', 1, -5, -5, -5, 't', 'credit');
         ALTER TABLE ledger_entry ENABLE TRIGGER ledger_entry_references;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let found: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT kind, expected, recorded FROM audit.discrepancies WHERE field = 'reference' ORDER BY entry_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let found: Vec<String> = found.into_iter().map(|(k, e, r)| format!("{k}: {e}: {r}")).collect();
    assert_eq!(
        found,
        [
            "job: job record 99 and its run, rate card 1, project 1: no job record 99",
            "storage: its project, storage rate and billing run: no storage rate 42, no billing run 43",
            "adjustment: project 77: missing",
        ]
    );
}

/// Migration 0011 finds the days a quota or rate held from its instants
/// instead of walking every day: the first day ending after an instant and
/// the last day ending at or before it must be the ones a day-by-day walk
/// finds, at every quarter hour around DST changes (including zones whose
/// clocks skip or repeat midnight) and exactly at midnights.
#[tokio::test]
async fn day_ranges_match_the_day_by_day_walk() {
    let db = TestDb::new().await;
    let wrong: Vec<(String, String, String)> = sqlx::query_as(
        "WITH instants AS (
             SELECT z.tz, t
               FROM (VALUES ('America/New_York', '2026-03-06'::date), ('America/New_York', '2026-10-30'),
                            ('Europe/Berlin', '2026-03-27'), ('Europe/Berlin', '2026-10-23'),
                            ('America/Havana', '2026-03-06'), ('America/Havana', '2026-10-30'),
                            ('America/Santiago', '2026-04-02'), ('America/Santiago', '2026-09-04'),
                            ('Australia/Lord_Howe', '2026-04-03'), ('UTC', '2026-02-26')) z(tz, first)
              CROSS JOIN LATERAL generate_series(z.first::timestamp AT TIME ZONE z.tz,
                                                 (z.first + 4)::timestamp AT TIME ZONE z.tz, interval '15 minutes') t),
         walked AS (
             SELECT i.tz, i.t,
                    (SELECT min(d::date) FROM generate_series(i.t::date - 3, i.t::date + 3, interval '1 day') d
                      WHERE hl_day_end(d::date, i.tz) > i.t) AS first_after,
                    (SELECT max(d::date) FROM generate_series(i.t::date - 3, i.t::date + 3, interval '1 day') d
                      WHERE hl_day_end(d::date, i.tz) <= i.t) AS last_until
               FROM instants i)
         SELECT tz, t::text, format('first %s/%s last %s/%s', hl_first_day_after(t, tz), first_after,
                                    hl_last_day_until(t, tz), last_until)
           FROM walked
          WHERE hl_first_day_after(t, tz) IS DISTINCT FROM first_after
             OR hl_last_day_until(t, tz) IS DISTINCT FROM last_until",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(wrong.is_empty(), "{wrong:?}");
    let open: String = sqlx::query_scalar("SELECT hl_last_day_until(NULL, 'UTC')::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(open, "infinity");
}

/// Migration 0012's division (inlined, for the quantities the schema allows)
/// rounds as hl_div_round does: half away from zero at the 12th decimal,
/// ties included, over wall times, memory sizes and odd divisors.
#[tokio::test]
async fn the_audit_division_rounds_like_the_general_one() {
    let db = TestDb::new().await;
    let (checked, differing): (i64, i64) = sqlx::query_as(
        "WITH cases AS (
             SELECT n::numeric AS n, d::numeric AS d
               FROM generate_series(0, 200000, 37) n,
                    unnest(ARRAY[1, 3, 7, 3600, 86400, 2000000000000, 4294967296]) d
             UNION ALL
             SELECT (n * 12345.678901234567)::numeric, 3600 FROM generate_series(0, 5000) n
             UNION ALL  -- exact ties at the 13th decimal
             SELECT (2 * k + 1)::numeric, 2000000000000 FROM generate_series(0, 1000) k)
         SELECT count(*), count(*) FILTER (WHERE hl_div_round_nonneg(n, d, 12)::text <> hl_div_round(n, d, 12)::text)
           FROM cases",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(checked > 40_000, "{checked}");
    assert_eq!(differing, 0);
    let tie: String = sqlx::query_scalar("SELECT hl_div_round_nonneg(1, 2000000000000, 12)::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(tie, "0.000000000001");
}

/// Migration 0038's division truncates exactly: for every case, the result
/// has `places` decimals and x ≤ n ÷ d < x + 10^-places, checked by exact
/// multiplication (no division; 10^-places written as a literal), over
/// wall times, memory sizes, prices and 0 to 40 places (a negative power of
/// ten, `10 ^ -places`, is 0 from 17 places on in PostgreSQL 15).
#[tokio::test]
async fn the_truncating_division_is_exact() {
    let db = TestDb::new().await;
    let (checked, wrong): (i64, i64) = sqlx::query_as(
        "WITH cases AS (
             SELECT (k * 7919 % 100003)::numeric * (1 + k % 64) * 4294967296 * (k % 86400 * 37)
                        * (0.0001 * (k % 997)) AS n,
                    4294967296::numeric * (1 + k % 3) * 3600 / (1 + k % 7) AS d,
                    (k % 41)::int AS places
               FROM generate_series(1::bigint, 60000) k
             UNION ALL  -- quotients just below and at a whole step
             SELECT 10::numeric ^ 12 * k - 1, 10::numeric ^ 12, 12 FROM generate_series(1, 500) k
             UNION ALL
             SELECT 10::numeric ^ 12 * k, 10::numeric ^ 12, 12 FROM generate_series(1, 500) k),
         results AS (SELECT n, d, places, hl_div_trunc_nonneg(n, d, places) AS x FROM cases)
         SELECT count(*),
                count(*) FILTER (WHERE scale(x) <> places OR x * d > n
                                       OR (x + ('1e' || -places)::numeric) * d <= n)
           FROM results",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(checked, 61_000);
    assert_eq!(wrong, 0);
    let third: String = sqlx::query_scalar("SELECT hl_div_trunc_nonneg(2, 3, 12)::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(third, "0.666666666666");
    let fine: String = sqlx::query_scalar("SELECT hl_div_trunc_nonneg(2, 3, 20)::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(fine, "0.66666666666666666666");
}

/// Migration 0038 made the seal's functions inlinable; the bytes they hash
/// must not change, or every closed month would fail `verify`. An entry's
/// text is the one migration 0006's function gave for the same row (taken
/// from a database before 0038), and the chain is SHA-256 over the items'
/// UTF-8 bytes, recomputed here.
#[tokio::test]
async fn the_seal_hashes_the_same_bytes_as_before() {
    let db = TestDb::new().await;
    let text: String = sqlx::query_scalar(
        r#"SELECT hl_entry_text(jsonb_populate_record(NULL::ledger_entry, '{"id": 41,
             "posted_at": "2026-03-31T23:59:59.123456-04:00", "period": "2026-03-01", "project_id": 7,
             "kind": "storage", "metric": "tb_months", "storage_rate_id": 2, "billing_run_id": 5,
             "quantity": "1.500000000000", "unit_rate": "4.25", "amount_exact": "6.375000000000", "amount": "6.38",
             "late": false, "author": "Zoë", "charging_rules": 2}'))"#,
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        text,
        r#"[41, 1775015999123456, "2026-03-01", 7, "storage", "tb_months", null, null, 2, 5, null, 1.500000000000, 4.2500000000, 6.3750000000000000000000, 6.38, false, "Zoë", null]"#
    );
    let items = [text.as_str(), "Zoë ✓", ""];
    // A NULL item is skipped (the step is STRICT), as it always was.
    let with_null: Vec<Option<&str>> = vec![Some(items[0]), None, Some(items[1]), Some(items[2])];
    let chained: Vec<u8> =
        sqlx::query_scalar("SELECT hl_seal_chain(t ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i)")
            .bind(&with_null)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    use sha2::{Digest, Sha256};
    let mut h = Vec::new();
    for item in items {
        h = Sha256::digest([h.as_slice(), item.as_bytes()].concat()).to_vec();
    }
    assert_eq!(hex::encode(chained), hex::encode(h));
}

/// Seal v3's text of an entry (migration 0041) is v2's array printed
/// without jsonb, plus the charging rules version and the discount: the
/// same 18 values as jsonb prints them, whatever the text holds (quotes, a
/// backslash, a line break, non-ASCII), and never a raw line break (an
/// archive file holds one item per line). One text is pinned: it is what
/// every v3 seal is computed over.
#[tokio::test]
async fn the_v3_entry_text_is_v2s_values_and_two_more() {
    let db = TestDb::new().await;
    let rows = [
        r#"{"id": 41, "posted_at": "2026-03-31T23:59:59.123456-04:00", "period": "2026-03-01", "project_id": 7,
            "kind": "storage", "metric": "tb_months", "storage_rate_id": 2, "billing_run_id": 5,
            "quantity": "1.500000000000", "unit_rate": "4.25", "amount_exact": "6.375000000000", "amount": "6.38",
            "late": false, "author": "Zoë", "charging_rules": 2}"#,
        r#"{"id": 9000000000, "posted_at": "1999-12-31T23:59:59Z", "period": "1999-12-01", "project_id": 1,
            "kind": "discount", "job_record_id": 3, "rate_card_id": 4, "corrects_id": 8, "discount_id": 12,
            "quantity": "-0.000000000001", "unit_rate": "0", "amount_exact": "0", "amount": "-0.00",
            "late": true, "author": "a \"quoted\" back\\slash", "reason": "line\nbreak\ttab ✓ \u0001",
            "charging_rules": 1}"#,
        // NumericS accept NaN: v3 quotes it, as jsonb does (the text stays JSON).
        r#"{"id": 5, "posted_at": "2026-01-01T00:00:00Z", "period": "2026-01-01", "project_id": 2,
            "kind": "adjustment", "quantity": "NaN", "unit_rate": "1", "amount_exact": "NaN", "amount": "NaN",
            "late": false, "author": "x", "reason": "y", "charging_rules": 2}"#,
    ];
    let mut texts = Vec::new();
    for row in rows {
        let (v2, v3): (String, String) = sqlx::query_as(
            "SELECT hl_entry_text(r), hl_entry_text_v3(r) FROM jsonb_populate_record(NULL::ledger_entry, $1::jsonb) r",
        )
        .bind(row)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(!v3.contains('\n'), "{v3}");
        let old: Vec<&serde_json::value::RawValue> = serde_json::from_str(&v2).unwrap();
        let new: Vec<&serde_json::value::RawValue> = serde_json::from_str(&v3).unwrap();
        let given: serde_json::Value = serde_json::from_str(row).unwrap();
        assert_eq!(new.len(), 20, "{v3}");
        assert_eq!(
            old.iter().map(|v| v.get()).collect::<Vec<_>>(),
            new[..18].iter().map(|v| v.get()).collect::<Vec<_>>(),
            "{v3}"
        );
        assert_eq!(new[18].get(), given["charging_rules"].to_string());
        assert_eq!(new[19].get(), given["discount_id"].to_string());
        texts.push(v3);
    }
    assert_eq!(
        texts[0],
        r#"[41,1775015999123456,"2026-03-01",7,"storage","tb_months",null,null,2,5,null,1.500000000000,4.2500000000,6.3750000000000000000000,6.38,false,"Zoë",null,2,null]"#
    );
    assert!(
        texts[1].ends_with(r#","a \"quoted\" back\\slash","line\nbreak\ttab ✓ \u0001",1,12]"#),
        "{}",
        texts[1]
    );
}

/// The audit's views recompute a month through hl_month_seal_of (migration
/// 0041): a function of the same name in a schema ahead of `public` on the
/// caller's search_path must not answer for the real one.
#[tokio::test]
async fn a_shadowing_seal_function_is_not_called() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql(
        "CREATE SCHEMA shadow;
         CREATE FUNCTION shadow.hl_month_seal_v3(p date, previous bytea, currency text, closed_by text,
                                                 closed_at timestamptz)
         RETURNS bytea LANGUAGE sql AS $$ SELECT '\\xdeadbeef'::bytea $$;
         SET search_path = shadow, public;",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let (shadowed, real): (Vec<u8>, Vec<u8>) = sqlx::query_as(
        "SELECT shadow.hl_month_seal_v3('2026-01-01', NULL, 'USD', 'x', '2026-02-01'),
                hl_month_seal_of('sha256-digests-v3', '2026-01-01', NULL, 'USD', 'x', '2026-02-01')",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(hex::encode(shadowed), "deadbeef");
    assert_eq!(real.len(), 32, "{}", hex::encode(&real));
}

/// The functions on the audit's, the seal's and the rollups' paths are
/// inlined into the queries that call them (a call per row through the
/// SQL-function executor made the audit half again slower): none of them
/// is left by name in the plans.
#[tokio::test]
async fn the_per_row_functions_are_inlined() {
    let db = TestDb::new().await;
    for (function, query) in [
        (
            "hl_div_trunc_nonneg",
            "SELECT hl_div_trunc_nonneg(e.quantity * e.unit_rate, 3600, 12) FROM ledger_entry e",
        ),
        (
            "hl_div_round_nonneg",
            "SELECT hl_div_round_nonneg(e.quantity, 3600, 12) FROM ledger_entry e",
        ),
        ("hl_entry_text", "SELECT hl_entry_text(e) FROM ledger_entry e"),
        ("hl_entry_text_v3", "SELECT hl_entry_text_v3(e) FROM ledger_entry e"),
        (
            "hl_seal_entry_item",
            "SELECT hl_seal_entry_item('sha256-digests-v3', e) FROM ledger_entry e",
        ),
        (
            "hl_draw_instant",
            "SELECT hl_draw_instant(e.kind, e.storage_rate_id, e.period, NULL, NULL, NULL, NULL, NULL, NULL,
                                    NULL, e.posted_at, 'UTC') FROM ledger_entry e",
        ),
        (
            "hl_charge_v2",
            "SELECT q.core_exact FROM job_record r
               CROSS JOIN LATERAL hl_charge_v2(r.nodes, r.cores, r.memory_bytes, r.gpus, 3600, 4294967296, 28,
                                               0.01, 0.1) q",
        ),
    ] {
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN (VERBOSE, COSTS OFF) {query}"))
            .fetch_all(&db.pool)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(!plan.contains(function), "{function} is called, not inlined:\n{plan}");
        assert!(!plan.contains("hl_div_"), "a division is called, not inlined:\n{plan}");
    }
}

/// The audit's findings can be planned in parallel (migration 0039): no
/// function the views call is PARALLEL UNSAFE, which would keep the whole
/// query, its pass over every job charge included, on one core. With
/// parallel plans made free, PostgreSQL uses them.
#[tokio::test]
async fn the_audit_can_run_in_parallel() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0")
        .execute(&mut *conn)
        .await
        .unwrap();
    for view in ["audit.discrepancies", "audit.seals", "audit.job_charges"] {
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN (COSTS OFF) SELECT * FROM {view}"))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        assert!(
            plan.iter().any(|l| l.contains("Gather")),
            "{view} is never parallel:\n{}",
            plan.join("\n")
        );
    }
    // And none of the SQL functions or aggregates they may call is left
    // unsafe (the PL/pgSQL ones left unsafe are triggers, the archive and
    // checks that raise or catch errors; the views call none of them).
    let unsafe_readers: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
          WHERE p.proname LIKE 'hl\\_%' AND (l.lanname = 'sql' OR p.prokind = 'a')
            AND p.proparallel = 'u' ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert!(unsafe_readers.is_empty(), "{unsafe_readers:?}");
}

/// A discount line names its charge by job record and metric; one whose
/// charge was not posted would be dropped by the join and the job charged
/// in full. The batch is refused instead, naming the line.
#[tokio::test]
async fn a_discount_line_without_its_charge_is_refused() {
    use hpc_ledger::db::ledger::insert_job_discounts;
    use hpc_ledger::domain::entries::NewEntry;
    use hpc_ledger::domain::kinds::EntryKind;
    use hpc_ledger::domain::pricing::ChargingRules;
    use hpc_ledger::domain::units::Metric;
    use hpc_ledger::ids::{DiscountId, JobRecordId, ProjectId};
    use rust_decimal::Decimal;

    let db = TestDb::new().await;
    // A discount of 25 % from before the charge.
    let setup = ONE_CHARGE.replace(
        "INSERT INTO ledger_entry",
        "INSERT INTO discount (project_id, percent, valid_from, reason, author) VALUES (1, 25, '2026-01-01Z', 'r', 't');
         INSERT INTO ledger_entry",
    );
    sqlx::raw_sql(&setup).execute(&db.pool).await.unwrap();
    let line = |metric| NewEntry {
        period: chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap(),
        project_id: ProjectId(1),
        kind: EntryKind::Discount,
        metric: Some(metric),
        job_record_id: Some(JobRecordId(1)),
        rate_card_id: None,
        corrects_id: None,
        quantity: Decimal::ZERO,
        unit_rate: Decimal::ZERO,
        amount_exact: Decimal::new(-2, 2),
        amount: Decimal::new(-2, 2),
        late: false,
        reason: None,
        charging_rules: ChargingRules::V2,
        discount_id: Some(DiscountId(1)),
    };
    // The record was charged core-hours only: its GPU-hours line has no charge.
    let mut tx = db.pool.begin().await.unwrap();
    let err = insert_job_discounts(&mut tx, &[line(Metric::CoreHours), line(Metric::GpuHours)], "t")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "2 discount lines to post, 1 matched a job charge (a gpu_hours line: not exactly one gpu_hours charge of \
         its job record in this posting): refused, none posted"
    );
    drop(tx);
    // The line that has its charge posts, once.
    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        insert_job_discounts(&mut tx, &[line(Metric::CoreHours)], "t")
            .await
            .unwrap(),
        1
    );
    tx.commit().await.unwrap();
    let total: Decimal = sqlx::query_scalar("SELECT sum(amount) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(total.to_string(), "0.06");
}

/// The same for a storage charge's discount line, which names its charge
/// by id.
#[tokio::test]
async fn a_storage_discount_line_without_its_charge_is_refused() {
    use hpc_ledger::db::storage::{StorageDiscountLine, insert_discounts};
    use hpc_ledger::ids::{DiscountId, LedgerEntryId};
    use rust_decimal::Decimal;

    let db = TestDb::new().await;
    sqlx::raw_sql(ONE_CHARGE).execute(&db.pool).await.unwrap();
    let line = |charge| StorageDiscountLine {
        charge: LedgerEntryId(charge),
        discount_id: DiscountId(1),
        amount_exact: Decimal::new(-1, 2),
        amount: Decimal::new(-1, 2),
    };
    let mut tx = db.pool.begin().await.unwrap();
    let err = insert_discounts(&mut tx, &[line(404)], "t").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 storage discount lines to post, 0 matched their charge (no ledger entry 404): refused, none posted"
    );
}
