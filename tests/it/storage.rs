//! The monthly storage billing run against hand-computed amounts, its
//! idempotency under concurrent runs, and what it refuses.

use chrono::{DateTime, Utc};
use hpc_ledger::domain::period::Month;
use hpc_ledger::service::storage::{BillState, StorageBillError, bill};
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::harness::{TestDb, ok, stderr};

/// New York billing time zone; $5/TB-month, then $6.20 from 16 March 2026.
const CENTER: &str = r#"
[center]
name = "Storage Test"
currency = "USD"
time_zone = "America/New_York"

[[storage_rate]]
from = 2020-01-01
until = 2026-03-16
tb_month = 5
[[storage_rate]]
from = 2026-03-16
tb_month = 6.20

[[project]]
code = "STARTS"         # from 16 April
quota = [{ from = 2026-04-16T09:00:00, tb = 10 }]
[[project]]
code = "ENDS"           # ends on 11 April (set to 0)
quota = [{ from = 2026-01-01, tb = 10 }, { from = 2026-04-11, tb = 0 }]
[[project]]
code = "FIRST"          # changes at 00:00 of the 1st
quota = [{ from = 2026-01-01, tb = 10 }, { from = 2026-04-01, tb = 20 }]
[[project]]
code = "LAST"           # changes during the last day
quota = [{ from = 2026-01-01, tb = 10 }, { from = 2026-04-30T23:00:00, tb = 40 }]
[[project]]
code = "MANY"           # several changes in one day: the last counts
quota = [{ from = 2026-01-01, tb = 10 }, { from = 2026-04-10T08:00:00, tb = 100 }, { from = 2026-04-10T12:00:00, tb = 0 }, { from = 2026-04-10T18:00:00, tb = 4 }]
[[project]]
code = "ZERO"           # a quota of 0 all month
quota = [{ from = 2026-01-01, tb = 0 }]
[[project]]
code = "CONST"          # 3 TB forever
quota = [{ from = 2020-01-01, tb = 3 }]
[[project]]
code = "DST"            # a change at 03:30Z on 1 April is still 31 March in New York
quota = [{ from = 2026-01-01, tb = 10 }, { from = 2026-04-01T03:30:00Z, tb = 41 }]
"#;

async fn db() -> TestDb {
    let db = TestDb::new().await;
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(CENTER).unwrap(), "t")
        .await
        .unwrap();
    db
}

fn now() -> DateTime<Utc> {
    Utc::now()
}

/// (project, TB-months, rate, amount) of a month's storage entries.
async fn entries(pool: &PgPool, month: &str) -> Vec<(String, String, String, String)> {
    let first = month.parse::<Month>().unwrap().first_day();
    sqlx::query_as::<_, (String, Decimal, Decimal, Decimal)>(
        "SELECT p.code, e.quantity, e.unit_rate, e.amount FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.kind = 'storage' AND e.period = $1 ORDER BY p.code, e.unit_rate",
    )
    .bind(first)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(p, q, r, a)| {
        (
            p,
            q.normalize().to_string(),
            r.normalize().to_string(),
            format!("{a:.2}"),
        )
    })
    .collect()
}

fn rows(v: &[(&str, &str, &str, &str)]) -> Vec<(String, String, String, String)> {
    v.iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect()
}

#[tokio::test]
async fn april_is_billed_day_by_day_at_the_quota_in_force_at_the_end_of_each_day() {
    let db = db().await;
    let o = bill(&db.pool, "2026-04".parse().unwrap(), "billing", false, now())
        .await
        .unwrap();
    assert!(matches!(o.state, BillState::Posted { .. }));
    // April has 30 days; everything at $6.20.
    assert_eq!(
        entries(&db.pool, "2026-04").await,
        rows(&[
            ("CONST", "3", "6.2", "18.60"),             // 90 TB-days / 30
            ("DST", "41", "6.2", "254.20"),             // 30 × 41
            ("ENDS", "3.333333333333", "6.2", "20.67"), // 10 days × 10 TB = 100 / 30
            ("FIRST", "20", "6.2", "124.00"),           // 30 × 20
            ("LAST", "11", "6.2", "68.20"),             // 29 × 10 + 40 = 330 / 30
            ("MANY", "5.8", "6.2", "35.96"),            // 9 × 10 + 21 × 4 = 174 / 30
            ("STARTS", "5", "6.2", "31.00"),            // 15 × 10 = 150 / 30
        ])
    );
    assert_eq!(o.total.to_string(), "552.63");
    // The segments explain each entry: days × quota add up to the TB-days.
    let segs: Vec<(String, String, i32, Decimal)> = sqlx::query_as(
        "SELECT p.code, s.first_day::text, s.days, s.quota_tb FROM storage_charge_segment s
           JOIN ledger_entry e ON e.id = s.ledger_entry_id JOIN project p ON p.id = e.project_id
          WHERE p.code IN ('LAST', 'MANY') ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let segs: Vec<(String, String, i32, String)> = segs
        .into_iter()
        .map(|(p, d, n, q)| (p, d, n, q.normalize().to_string()))
        .collect();
    assert_eq!(
        segs,
        [
            ("LAST".into(), "2026-04-01".into(), 29, "10".into()),
            ("LAST".into(), "2026-04-30".into(), 1, "40".into()),
            ("MANY".into(), "2026-04-01".into(), 9, "10".into()),
            ("MANY".into(), "2026-04-10".into(), 21, "4".into()),
        ]
    );
    // The run is recorded: when, by whom, how many projects, the total.
    let (author, projects, entries_n, total): (String, i32, i32, Decimal) =
        sqlx::query_as("SELECT author, project_count, entry_count, total FROM billing_run")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (author.as_str(), projects, entries_n, total.to_string().as_str()),
        ("billing", 7, 7, "552.63")
    );
}

#[tokio::test]
async fn a_constant_quota_costs_quota_times_rate_in_months_of_every_length_and_a_rate_change_splits_the_month() {
    let db = db().await;
    for (month, days) in [("2024-02", 29), ("2026-02", 28), ("2025-11", 30), ("2026-01", 31)] {
        bill(&db.pool, month.parse().unwrap(), "t", false, now()).await.unwrap();
        let e = entries(&db.pool, month).await;
        let constant = e.iter().find(|r| r.0 == "CONST").unwrap();
        assert_eq!(
            (constant.1.as_str(), constant.3.as_str()),
            ("3", "15.00"),
            "{month} ({days} days)"
        );
    }
    // March 2026: $5 for 15 days, $6.20 for 16; the DST project is 41 TB on
    // the 31st only (its change is at 23:30 on 31 March, New York time).
    bill(&db.pool, "2026-03".parse().unwrap(), "t", false, now())
        .await
        .unwrap();
    let march: Vec<_> = entries(&db.pool, "2026-03")
        .await
        .into_iter()
        .filter(|r| r.0 == "CONST" || r.0 == "DST")
        .collect();
    assert_eq!(
        march,
        rows(&[
            ("CONST", "1.451612903226", "5", "7.26"),   // 15 × 3 = 45 / 31
            ("CONST", "1.548387096774", "6.2", "9.60"), // 16 × 3 = 48 / 31
            ("DST", "4.838709677419", "5", "24.19"),    // 15 × 10 = 150 / 31
            ("DST", "6.161290322581", "6.2", "38.20"),  // 15 × 10 + 41 = 191 / 31
        ])
    );
}

#[tokio::test]
async fn concurrent_runs_of_one_month_post_once() {
    let db = db().await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            bill(&pool, "2026-04".parse().unwrap(), "t", false, now()).await
        }));
    }
    let mut posted = 0;
    let mut already = 0;
    for t in tasks {
        match t.await.unwrap().unwrap().state {
            BillState::Posted { .. } => posted += 1,
            BillState::AlreadyBilled { .. } => already += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((posted, already), (1, 3));
    let (runs, total): (i64, Decimal) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM billing_run), coalesce(sum(amount), 0) FROM ledger_entry WHERE kind = 'storage'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((runs, total.to_string().as_str()), (1, "552.63"));
}

/// A center of `n` projects, each with a quota of 2 TB since 2026-01-01;
/// autovacuum off for the tables the statistics tests watch, so that only
/// what they call analyzes them.
async fn projects_with_quotas(n: usize) -> TestDb {
    let mut center = String::from(
        "[center]\nname = \"Stats\"\ncurrency = \"USD\"\ntime_zone = \"UTC\"\n\
         [[storage_rate]]\nfrom = 2020-01-01\ntb_month = 5\n",
    );
    for i in 0..n {
        center.push_str(&format!(
            "[[project]]\ncode = \"P{i:03}\"\nquota = [{{ from = 2026-01-01, tb = 2 }}]\n"
        ));
    }
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "ALTER TABLE project SET (autovacuum_enabled = false);
         ALTER TABLE storage_quota SET (autovacuum_enabled = false);
         ALTER TABLE ledger_entry SET (autovacuum_enabled = false);
         ALTER TABLE storage_charge_segment SET (autovacuum_enabled = false)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&center).unwrap(), "t")
        .await
        .unwrap();
    db
}

/// What the planner believes a table holds: -1 until it was first analyzed.
async fn planner_rows(pool: &PgPool, table: &str) -> f32 {
    sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = $1::regclass")
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_billing_run_leaves_the_planner_knowing_what_it_wrote() {
    // Issue 13, item 11: right after a run, the audit was planned as if the
    // ledger were empty and took minutes at 20,000 projects. A center of 80
    // projects: more rows than autovacuum's threshold of 50 for a new table.
    let db = projects_with_quotas(80).await;
    assert_eq!(planner_rows(&db.pool, "storage_charge_segment").await, -1.0);
    assert_eq!(planner_rows(&db.pool, "ledger_entry").await, -1.0);
    // A preview writes nothing and analyzes nothing.
    bill(&db.pool, "2026-04".parse().unwrap(), "billing", true, now())
        .await
        .unwrap();
    assert_eq!(planner_rows(&db.pool, "ledger_entry").await, -1.0);
    let o = bill(&db.pool, "2026-04".parse().unwrap(), "billing", false, now())
        .await
        .unwrap();
    assert_eq!(o.entry_count, 80);
    assert_eq!(planner_rows(&db.pool, "storage_charge_segment").await, 80.0);
    assert_eq!(planner_rows(&db.pool, "ledger_entry").await, 80.0);
    // And the ledger's rollups (migration 0033): a project's draws on the
    // month's last day, its usage under the storage rate.
    assert_eq!(planner_rows(&db.pool, "ledger_draw").await, 80.0);
    assert_eq!(planner_rows(&db.pool, "ledger_usage").await, 80.0);
    // One run row is below any threshold: left to autovacuum.
    assert_eq!(planner_rows(&db.pool, "billing_run").await, -1.0);

    // The roles that run bulk writes and the audit may refresh statistics
    // (the function runs with its owner's rights): only the product's own
    // tables, and only when stale by autovacuum's measure.
    let mut conn = db.pool.acquire().await.unwrap();
    for role in ["hpc_ledger_auditor", "hpc_ledger_billing", "hpc_ledger_ingest"] {
        sqlx::raw_sql(&format!("SET ROLE {role}"))
            .execute(&mut *conn)
            .await
            .unwrap();
        let done: Vec<String> = sqlx::query_scalar(
            "SELECT hl_refresh_statistics(ARRAY['billing_run', 'pg_class', 'ledger_entry'], ARRAY[51, 1000000, 7])",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        // (ledger_entry may come again: the run's own insert counts can
        // reach the statistics after its analyze.)
        assert!(done.iter().any(|t| t == "billing_run"), "{role}: {done:?}");
        assert!(!done.iter().any(|t| t == "pg_class"), "{role}: {done:?}");
        // What the product calls (migration 0045): one table at a time.
        let analyzed: bool = sqlx::query_scalar("SELECT hl_analyze('billing_run')")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert!(analyzed, "{role}");
        sqlx::raw_sql("RESET ROLE").execute(&mut *conn).await.unwrap();
    }
    let nobody = format!("hl_nobody_{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    sqlx::raw_sql(&format!("CREATE ROLE {nobody}; SET ROLE {nobody}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let refused = sqlx::query_scalar::<_, Vec<String>>("SELECT hl_refresh_statistics()")
        .fetch_one(&mut *conn)
        .await;
    let refused_one = sqlx::query_scalar::<_, bool>("SELECT hl_analyze('ledger_entry')")
        .fetch_one(&mut *conn)
        .await;
    sqlx::raw_sql(&format!("RESET ROLE; DROP ROLE {nobody}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let e = refused
        .expect_err("a role without the grant may not call it")
        .to_string();
    assert!(e.contains("permission denied"), "{e}");
    let e = refused_one
        .expect_err("a role without the grant may not analyze")
        .to_string();
    assert!(e.contains("permission denied"), "{e}");
}

#[tokio::test]
async fn a_close_leaves_the_planner_knowing_the_statements_it_issued() {
    // At 40.8M entries a statement read after its month's close took
    // 19.6 ms instead of 7.7: the close had issued 100,000 statements, the
    // planner still believed the month had none and looked one project's
    // up by scanning all of the month's (11 ms). A close now analyzes
    // `statement` when what it issued makes it due.
    let db = projects_with_quotas(80).await;
    sqlx::raw_sql("ALTER TABLE statement SET (autovacuum_enabled = false)")
        .execute(&db.pool)
        .await
        .unwrap();
    let january: Month = "2026-01".parse().unwrap();
    bill(&db.pool, january, "billing", false, now()).await.unwrap();
    assert_eq!(planner_rows(&db.pool, "statement").await, -1.0);
    let closed = hpc_ledger::service::close::close(&db.pool, january, "billing", now())
        .await
        .unwrap();
    assert!(closed.closed_now);
    assert_eq!(closed.statements.len(), 80);
    assert_eq!(planner_rows(&db.pool, "statement").await, 80.0);
}

/// A counter of `table` in `pg_stat_user_tables` (`n_mod_since_analyze`,
/// `n_tup_ins`) once it reached `at_least`, or after 20 s (the statistics
/// of other sessions reach the shared counters within a second or so of
/// their commit).
async fn stat_of(conn: &mut sqlx::PgConnection, table: &str, counter: &str, at_least: i64) -> i64 {
    let query = format!("SELECT {counter} FROM pg_stat_user_tables WHERE relname = $1");
    let mut n = 0;
    crate::harness::until(
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(50),
        async || {
            n = sqlx::query_scalar(&query)
                .bind(table)
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            (n >= at_least).then_some(())
        },
    )
    .await;
    n
}

/// A new quota from `at` for the first `n` projects, written on `conn` and
/// sent to the statistics counters at once; then the quota table's changes
/// since its last analyze, once they reached `changed`.
async fn new_quotas(conn: &mut sqlx::PgConnection, at: &str, n: i64, changed: i64) -> i64 {
    sqlx::query(
        "INSERT INTO storage_quota (project_id, effective_from, quota_tb, recorded_by)
         SELECT id, $1::timestamptz, 3, 't' FROM project ORDER BY id LIMIT $2",
    )
    .bind(at)
    .bind(n)
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::raw_sql("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    stat_of(conn, "storage_quota", "n_mod_since_analyze", changed).await
}

/// Which of the product's tables `hl_stale_tables` says are due.
async fn due(conn: &mut sqlx::PgConnection, tables: &[&str], written: &[i64]) -> Vec<String> {
    sqlx::query_scalar("SELECT hl_stale_tables($1, $2)")
        .bind(tables)
        .bind(written)
        .fetch_one(&mut *conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_writer_analyzes_what_it_wrote_and_other_tables_only_when_far_off() {
    // Migration 0045: a billing run analyzed `job_record` because jobs
    // posted before it had made it stale (0.25 s of a 1.15 s run). A writer
    // now analyzes the tables it names by autovacuum's measure (50 + 10 % of
    // the rows the planner believes), the others only when the planner's
    // idea of them is far off (more changes than 50 + those rows); the
    // audit, naming none, analyzes every table due by autovacuum's measure.
    let db = projects_with_quotas(100).await;
    let mut conn = db.pool.acquire().await.unwrap();
    // `config apply` analyzes what it wrote, but its session may send its
    // insert counts to the statistics after that (an idle session sends
    // them within about 10 s): once they are all in, analyzed again.
    sqlx::raw_sql("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    for table in ["storage_quota", "project"] {
        assert_eq!(stat_of(&mut conn, table, "n_tup_ins", 100).await, 100, "{table}");
    }
    sqlx::raw_sql("ANALYZE storage_quota; ANALYZE project")
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_eq!(due(&mut conn, &[], &[]).await, Vec::<String>::new());

    // 70 quota changes: stale by autovacuum's measure (70 > 50 + 10), not
    // far off (70 <= 50 + 100).
    assert_eq!(new_quotas(&mut conn, "2026-06-01T00:00:00Z", 70, 70).await, 70);
    // The audit (naming nothing): due.
    assert_eq!(due(&mut conn, &[], &[]).await, ["storage_quota"]);
    // A writer that wrote it: due. One that wrote only entries: not its to analyze.
    assert_eq!(due(&mut conn, &["storage_quota"], &[0]).await, ["storage_quota"]);
    // Never analyzed: due once more than 50 rows were written.
    assert_eq!(due(&mut conn, &["ledger_entry"], &[100]).await, ["ledger_entry"]);
    assert_eq!(due(&mut conn, &["ledger_entry"], &[50]).await, Vec::<String>::new());

    // 100 more: 170 changes against the 100 rows believed, far off: due for
    // every writer, the larger table first.
    assert_eq!(new_quotas(&mut conn, "2026-07-01T00:00:00Z", 100, 170).await, 170);
    assert_eq!(
        due(&mut conn, &["ledger_entry"], &[100]).await,
        ["storage_quota", "ledger_entry"]
    );
    drop(conn);

    // The refresh analyzes both (two at a time) and only those.
    assert_eq!(planner_rows(&db.pool, "ledger_entry").await, -1.0);
    hpc_ledger::service::refresh_statistics(&db.pool, &[("ledger_entry", 100)]).await;
    assert_eq!(planner_rows(&db.pool, "storage_quota").await, 270.0);
    assert_eq!(planner_rows(&db.pool, "ledger_entry").await, 0.0);
    assert_eq!(planner_rows(&db.pool, "job_record").await, -1.0);
    // And a table outside the product's bulk tables is never analyzed.
    let analyzed: bool = sqlx::query_scalar("SELECT hl_analyze('pg_class')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!analyzed);
}

#[tokio::test]
async fn what_a_billing_run_refuses() {
    let db = db().await;
    let this_month = Month::of_instant(now(), chrono_tz::America::New_York);
    match bill(&db.pool, this_month, "t", false, now()).await {
        Err(StorageBillError::NotOver { month, ends }) => {
            assert_eq!(month, this_month);
            assert!(ends.starts_with(&this_month.next().to_string()), "{ends}");
        }
        other => panic!("{other:?}"),
    }
    // A dry run previews it and posts nothing.
    let preview = bill(&db.pool, this_month, "t", true, now()).await.unwrap();
    assert!(matches!(preview.state, BillState::DryRun { month_over: false }));
    assert!(preview.project_count >= 6);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    // A quota without a storage rate in force.
    let no_rate = format!(
        "{}\n[[project]]\ncode = \"EARLY\"\nquota = [{{ from = 2019-06-01, tb = 1 }}]\n",
        CENTER
    );
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&no_rate).unwrap(), "t")
        .await
        .unwrap();
    let e = bill(&db.pool, "2019-06".parse().unwrap(), "t", false, now())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "project EARLY: a quota of 1 TB is in force on 2019-06-01 but no storage rate is; add a storage rate for those days to the center configuration"
    );
    // A closed month (and every month before it) neither billed nor
    // waived; one that was says so (a month-end run again after the close).
    crate::harness::close_by_hand(&db.pool, "2026-02-01").await;
    let e = bill(&db.pool, "2000-01".parse().unwrap(), "t", false, now())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "2000-01 is closed: nothing can be posted into it");
    let waived = bill(&db.pool, "2026-02".parse().unwrap(), "t", false, now())
        .await
        .unwrap();
    assert!(matches!(waived.state, BillState::Waived { .. }), "{waived:?}");
}

#[tokio::test]
async fn quota_and_bill_from_the_command_line() {
    let db = db().await;
    let o = db.cli(&[
        "quota",
        "set",
        "STARTS",
        "12TB",
        "--from",
        "2026-05-10",
        "--author",
        "ops",
    ]);
    assert_eq!(ok(&o), "quota of STARTS set to 12 TB from 2026-05-10 00:00 EDT\n");
    let show = ok(&db.cli(&["quota", "show", "starts", "--at", "2026-05-20"]));
    assert!(show.starts_with("STARTS: 12 TB at 2026-05-20 00:00 EDT"), "{show}");
    assert_eq!(show.lines().count(), 5, "{show}");
    let o = db.cli(&["quota", "set", "STARTS", "500GB", "--from", "2026-06-01"]);
    assert!(stderr(&o).contains("give it in TB"), "{}", stderr(&o));
    let o = db.cli(&["quota", "set", "NOPE", "1TB", "--from", "2026-06-01"]);
    assert!(stderr(&o).contains("unknown project \"NOPE\""), "{}", stderr(&o));

    let out = ok(&db.cli(&["bill", "storage", "--month", "2026-05", "--author", "billing"]));
    assert!(out.starts_with("storage for 2026-05 billed (run "), "{out}");
    // STARTS: 9 days × 10 TB + 22 days × 12 TB = 354 TB-days / 31 × 6.20 = 70.80.
    let line = out.lines().find(|l| l.starts_with("STARTS")).unwrap();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        [
            "STARTS",
            "9",
            "d",
            "×",
            "10",
            "TB",
            "+",
            "22",
            "d",
            "×",
            "12",
            "TB",
            "354",
            "11.41935483871",
            "6.2",
            "70.80"
        ]
    );
    let again = ok(&db.cli(&["bill", "storage", "--month", "2026-05"]));
    assert!(
        again.contains("was already billed") && again.contains("by billing); nothing posted"),
        "{again}"
    );
    // A dry run of it says so too, not the lines a run would not post.
    let dry = ok(&db.cli(&["bill", "storage", "--month", "2026-05", "--dry-run"]));
    assert!(dry.contains("was already billed"), "{dry}");
    // History of a billed month is not rewritten.
    let o = db.cli(&["quota", "set", "STARTS", "99TB", "--from", "2026-05-20"]);
    assert!(
        stderr(&o).contains("storage is billed through 2026-05: a quota change effective"),
        "{}",
        stderr(&o)
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&["bill", "runs", "--format", "json"]))).unwrap();
    assert_eq!(json["runs"][0]["author"], "billing");
    assert_eq!(json["runs"][0]["period"], "2026-05-01");
}

/// Two storage rate rows of one price in a month (a rate set again from
/// the 16th): two charges, one statement line for the price (two identical
/// lines would read as a double charge).
#[tokio::test]
async fn a_statement_has_one_storage_line_per_price() {
    let center = "[center]\nname = \"Rows\"\ncurrency = \"USD\"\ntime_zone = \"UTC\"\n\
         [[storage_rate]]\nfrom = 2020-01-01\nuntil = 2026-04-16\ntb_month = 5\n\
         [[storage_rate]]\nfrom = 2026-04-16\ntb_month = 5\n\
         [[project]]\ncode = \"P\"\nquota = [{ from = 2026-01-01, tb = 10 }]\n";
    let db = TestDb::new().await;
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(center).unwrap(), "t")
        .await
        .unwrap();
    hpc_ledger::service::storage::bill(&db.pool, "2026-04".parse().unwrap(), "t", false, now())
        .await
        .unwrap();
    let s = hpc_ledger::service::statement::statements(
        &db.pool,
        "2026-04".parse().unwrap(),
        hpc_ledger::service::statement::Which::Project("P"),
    )
    .await
    .unwrap();
    let lines: Vec<(String, String)> = s[0]
        .storage
        .iter()
        .map(|l| (l.tb_days.normalize().to_string(), l.amount.to_string()))
        .collect();
    assert_eq!(lines, [("300".to_owned(), "50.00".to_owned())]);
    let charges: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry WHERE kind = 'storage'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(charges, 2, "one charge per rate row");
}

/// Havana's clocks go back at midnight on 1 November 2026: 00:00 is read
/// twice, and a day ends at the first (docs/rules.md). October's storage is
/// billed to its first midnight; the audit recomputes it to the same
/// instant (it read the second, an hour later: 32.00 instead of 31.00
/// reported), and a price change from 1 November is not refused as
/// covering October.
#[tokio::test]
async fn a_midnight_read_twice_ends_the_day_at_its_first() {
    let center = r#"
[center]
name = "Havana"
currency = "USD"
time_zone = "America/Havana"

[[storage_rate]]
from = 2020-01-01
tb_month = 3.10

[[project]]
code = "HAV1"
quota = [{ from = 2026-10-01, tb = 10 }, { from = 2026-11-01, tb = 20 }]
"#;
    let db = TestDb::new().await;
    let apply = |text: String| {
        let pool = db.pool.clone();
        async move { hpc_ledger::service::config::apply(&pool, &hpc_ledger::config::parse(&text).unwrap(), "t").await }
    };
    apply(center.to_owned()).await.unwrap();
    let first_midnight: DateTime<Utc> = "2026-11-01T04:00:00Z".parse().unwrap();
    let day_end: DateTime<Utc> = sqlx::query_scalar("SELECT hl_day_end(DATE '2026-10-31', 'America/Havana')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(day_end, first_midnight);
    bill(&db.pool, "2026-10".parse().unwrap(), "t", false, now())
        .await
        .unwrap();
    assert_eq!(
        entries(&db.pool, "2026-10").await,
        rows(&[("HAV1", "10", "3.1", "31.00")])
    );
    let report = hpc_ledger::service::close::audit(&db.pool).await.unwrap();
    assert!(report.clean(), "{:#?}", report.discrepancies);
    // A new price from 1 November: the old rate ends where October's last
    // day ended.
    let changed = center.replace(
        "from = 2020-01-01\ntb_month = 3.10",
        "from = 2020-01-01\nuntil = 2026-11-01\ntb_month = 3.10\n[[storage_rate]]\nfrom = 2026-11-01\ntb_month = 2.90",
    );
    assert_ne!(changed, center);
    apply(changed).await.unwrap();
}
