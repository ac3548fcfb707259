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
        // A charge must be quantity × rate, rounded half away from zero.
        (
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-03-01', 1, 'job', 'core_hours', 1, 1, 8, 0.01, 0.09, 0.09, 't')",
            "ledger_entry_exact",
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
            "INSERT INTO ledger_entry (period, project_id, kind, corrects_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-04-01', 1, 'reversal', 1, -8, 0.01, -0.07, -0.07, 't')",
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
    sqlx::raw_sql(
        "INSERT INTO closed_period (period, closed_by, entry_count, total, seal_algorithm, seal) VALUES ('2026-03-01', 't', 1, 0.08, 'sha256-chain-v1', sha256('x'))",
    )
    .execute(&db.pool)
    .await
    .unwrap();
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
        "INSERT INTO ledger_entry (period, project_id, kind, corrects_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-04-01', 1, 'reversal', 1, -8, 0.01, -0.08, -0.08, 't')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let got = refused(
        &db.pool,
        "INSERT INTO ledger_entry (period, project_id, kind, corrects_id, quantity, unit_rate, amount_exact, amount, author) VALUES ('2026-04-01', 1, 'reversal', 1, -8, 0.01, -0.08, -0.08, 't')",
    )
    .await;
    assert!(got.contains("ledger_entry_one_reversal"), "{got}");
}
