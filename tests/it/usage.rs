//! `hpc-ledger usage` (issue 18, item 2): sums from the ledger, by user,
//! cluster, node type and month, that agree with the statements.

use rust_decimal::Decimal;

use crate::harness::{TestDb, ok, stderr};

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

fn amounts(csv: &str, column: usize) -> Vec<(String, Decimal)> {
    csv.lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            (cells[column].to_owned(), cells.last().unwrap().parse().unwrap())
        })
        .collect()
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
    let months = amounts(&csv, 1);
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
    let users = amounts(&csv, 1);
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
