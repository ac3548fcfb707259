//! Rate classes and discounts (issue 16, items 4-6): a job is priced by the
//! card of its project's class at its submit time, storage day by day by
//! its class's rate; a discount is its own line, linked to the charge; the
//! audit recomputes both, and a planted error in a class price or a
//! discount is reported. Amounts computed by hand in the comments.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use std::str::FromStr;

use crate::harness::{TestDb, ok, stderr, stdout};

const CENTER: &str = r#"
[center]
name = "Classes"
currency = "USD"
time_zone = "UTC"

[[rate_class]]
name = "commercial"
description = "Industry partners"

[[cluster]]
name = "c1"
scheduler = "slurm"
[[cluster.node_type]]
name = "regular"
cores_per_node = 28
[[cluster.node_type]]
name = "gpu"
cores_per_node = 28
gpus_per_node = 4
[cluster.queues]
batch = "regular"
gpu = "gpu"
[[cluster.rate_card]]
node_type = "regular"
from = 2020-01-01
core_hour = 0.0107
memory_per_core = "4GB"
[[cluster.rate_card]]
node_type = "regular"
class = "commercial"
from = 2020-01-01
core_hour = 0.05
memory_per_core = "4GB"
[[cluster.rate_card]]             # no commercial GPU card
node_type = "gpu"
from = 2020-01-01
core_hour = 0.01
gpu_hour = 0.5
memory_per_core = "4GB"

[[storage_rate]]
from = 2020-01-01
tb_month = 5
[[storage_rate]]
class = "commercial"
from = 2020-01-01
tb_month = 20

[[project]]
code = "ACAD"
[[project]]
code = "IND"
class = [{ from = 2020-01-01, name = "commercial" }]
[[project]]
code = "NEWFAC"
quota = [{ from = 2020-01-01, tb = 10 }]
[[project]]
code = "MOVER"
quota = [{ from = 2020-01-01, tb = 10 }]
class = [{ from = 2026-04-16, name = "commercial" }]
[[project]]
code = "NOON"
quota = [{ from = 2020-01-01, tb = 10 }]
class = [{ from = 2026-04-20T12:00:00, name = "commercial" }]

[[discount]]
project = "NEWFAC"
percent = 50
from = 2026-01-01
until = 2027-01-01
reason = "new faculty subsidy"
[[discount]]
class = "commercial"
percent = 10
from = 2026-01-01
reason = "partner agreement"

[[project]]
code = "FULL"
[[discount]]
project = "FULL"
percent = 100
from = 2026-01-01
reason = "fully sponsored"
"#;

async fn db() -> TestDb {
    let db = TestDb::new().await;
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(CENTER).unwrap(), "t")
        .await
        .unwrap();
    db
}

/// 25 cores (unless `extra` says) for 4 hours (100 core-hours), submitted and started on `day`
/// of April 2026.
fn record(db: &TestDb, id: &str, project: &str, day: u32, extra: &[&str]) -> std::process::Output {
    let start = format!("2026-04-{day:02}T00:00:00Z");
    let end = format!("2026-04-{day:02}T04:00:00Z");
    let mut args = vec![
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        id,
        "--project",
        project,
        "--queue",
        "batch",
        "--submit",
        &start,
        "--start",
        &start,
        "--end",
        &end,
    ];
    if !extra.contains(&"--cores") {
        args.extend_from_slice(&["--cores", "25"]);
    }
    args.extend_from_slice(extra);
    db.cli(&args)
}

/// A job's entries: (id, kind, amount, discount id), in id order.
async fn entries(db: &TestDb, job: &str) -> Vec<(i64, String, Decimal, Option<i64>)> {
    sqlx::query_as(
        "SELECT e.id, e.kind, e.amount, e.discount_id FROM ledger_entry e
          WHERE e.job_record_id IN (SELECT r.id FROM job_record r JOIN job j ON j.id = r.job_id
                                     WHERE j.scheduler_job_id = $1)
             OR e.corrects_id IN (SELECT x.id FROM ledger_entry x JOIN job_record r ON r.id = x.job_record_id
                                    JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = $1)
          ORDER BY e.id",
    )
    .bind(job)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

fn amounts(e: &[(i64, String, Decimal, Option<i64>)]) -> Vec<(String, String)> {
    e.iter().map(|(_, k, a, _)| (k.clone(), a.to_string())).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

async fn findings(db: &TestDb) -> Vec<(Option<i64>, String, String)> {
    sqlx::query_as("SELECT entry_id, kind, field FROM audit.discrepancies ORDER BY entry_id, field")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// As the owner, with the append-only guard off for one statement.
async fn rewrite(db: &TestDb, sql: &str) {
    sqlx::raw_sql(&format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_append_only; {sql};
         ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_append_only;"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
}

fn now() -> DateTime<Utc> {
    "2026-11-30T12:00:00Z".parse().unwrap()
}

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

#[tokio::test]
async fn jobs_are_priced_by_their_class_and_discounted_by_rule() {
    let db = db().await;
    // The default class: 100 core-hours × 0.0107 = 1.07, no discount.
    assert_eq!(
        ok(&record(&db, "A1", "ACAD", 10, &[])),
        "recorded c1/A1: 1 entry totalling 1.07 in 2026-04\n"
    );
    assert_eq!(amounts(&entries(&db, "A1").await), pairs(&[("job", "1.07")]));
    // The project's own 50 %: 1.07 × 0.5 = 0.535, a tie, rounded away from
    // zero to 0.54; the net is 0.53.
    ok(&record(&db, "N1", "NEWFAC", 10, &[]));
    let n1 = entries(&db, "N1").await;
    assert_eq!(amounts(&n1), pairs(&[("job", "1.07"), ("discount", "-0.54")]));
    // The commercial class: its own card (100 × 0.05 = 5.00), its 10 %.
    ok(&record(&db, "I1", "IND", 10, &[]));
    assert_eq!(
        amounts(&entries(&db, "I1").await),
        pairs(&[("job", "5.00"), ("discount", "-0.50")])
    );
    // The class has no GPU card: refused and kept, never priced by the default card.
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "G1",
        "--project",
        "IND",
        "--queue",
        "gpu",
        "--cores",
        "1",
        "--gpus",
        "1",
        "--start",
        "2026-04-10T00:00:00Z",
        "--end",
        "2026-04-10T01:00:00Z",
    ]);
    assert!(
        stderr(&o).contains("no rate card for node type \"gpu\" on cluster c1 and rate class commercial (project IND)"),
        "{}",
        stderr(&o)
    );
    // A project whose class changes on 16 April: submitted before, by the
    // default card; after, by the commercial card with the class discount.
    ok(&record(&db, "M1", "MOVER", 10, &[]));
    ok(&record(&db, "M2", "MOVER", 20, &[]));
    assert_eq!(amounts(&entries(&db, "M1").await), pairs(&[("job", "1.07")]));
    assert_eq!(
        amounts(&entries(&db, "M2").await),
        pairs(&[("job", "5.00"), ("discount", "-0.50")])
    );
    // The discount line is linked to its charge and names its discount.
    let (charge, discount) = (&n1[0], &n1[1]);
    let link: (i64, i16, Decimal, Decimal) =
        sqlx::query_as("SELECT corrects_id, charging_rules, quantity, amount_exact FROM ledger_entry WHERE id = $1")
            .bind(discount.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(link.0, charge.0);
    assert_eq!((link.1, link.2), (3, Decimal::ZERO));
    assert_eq!(link.3, dec("-0.535"));
    assert!(discount.3.is_some());
    assert_eq!(findings(&db).await, []);

    // Storage in April (30 days): NEWFAC 10 TB at 5 = 50.00, less 50 %.
    // MOVER: days 1-15 default, 10 × 5 × 15/30 = 25.00; days 16-30
    // commercial, 10 × 20 × 15/30 = 100.00; the class discount at the
    // month's end (10 %) on both lines: -2.50 and -10.00.
    let o = hpc_ledger::service::storage::bill(&db.pool, "2026-04".parse().unwrap(), "t", false, now())
        .await
        .unwrap();
    // NOON turns commercial at noon on the 20th: that day ends commercial.
    // Days 1-19: 10 × 5 × 19/30 = 31.666… = 31.67; days 20-30: 10 × 20 ×
    // 11/30 = 73.333… = 73.33; 10 % of each: -3.17 (3.167), -7.33 (7.333).
    assert_eq!(o.total, dec("232.00"), "50 - 25 + 125 - 12.50 + 105 - 10.50");
    let storage: Vec<(String, String, Decimal)> = sqlx::query_as(
        "SELECT p.code, e.kind, e.amount FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.kind IN ('storage', 'discount') AND e.billing_run_id IS NOT NULL ORDER BY p.code, e.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let storage: Vec<(String, String, String)> = storage.into_iter().map(|(p, k, a)| (p, k, a.to_string())).collect();
    assert_eq!(
        storage,
        [
            ("MOVER", "storage", "25.00"),
            ("MOVER", "storage", "100.00"),
            ("MOVER", "discount", "-2.50"),
            ("MOVER", "discount", "-10.00"),
            ("NEWFAC", "storage", "50.00"),
            ("NEWFAC", "discount", "-25.00"),
            ("NOON", "storage", "31.67"),
            ("NOON", "storage", "73.33"),
            ("NOON", "discount", "-3.17"),
            ("NOON", "discount", "-7.33"),
        ]
        .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    );
    assert_eq!(findings(&db).await, []);

    // The statement names the class and shows list price, discount and net:
    // compute 1.07 + 5.00, storage 125.00, discounts -0.50 and -12.50.
    let s = ok(&db.cli(&["statement", "--project", "MOVER", "--month", "2026-04"]));
    assert!(s.contains("Rate class: default, then commercial"), "{s}");
    assert!(s.contains("list price 131.07, discounts -13.00, net 118.07"), "{s}");
    assert!(s.contains("TOTAL USD 118.07"), "{s}");
    let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
        "statement",
        "--project",
        "NEWFAC",
        "--month",
        "2026-04",
        "--format",
        "json",
    ])))
    .unwrap();
    assert_eq!(json["total"], "25.53", "1.07 - 0.54 + 50.00 - 25.00");
    assert_eq!(json["discounts"][0]["percent"], "50");
    assert_eq!(json["discounts"][0]["scope"], "project");
    // The ledger's sum is the statement's.
    let sum: Decimal = sqlx::query_scalar(
        "SELECT sum(amount) FROM ledger_entry WHERE period = '2026-04-01'
           AND project_id = (SELECT id FROM project WHERE code = 'NEWFAC')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(sum.to_string(), "25.53");

    // Usage by class: what each class's prices charged, net of discounts
    // (MOVER: 1.07 + 25.00 - 2.50 default; 5.00 - 0.50 + 100.00 - 10.00 commercial).
    let u: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
        "usage",
        "--project",
        "MOVER",
        "--from",
        "2026-04",
        "--by",
        "class",
        "--format",
        "json",
    ])))
    .unwrap();
    let rows: Vec<(String, String)> = u["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_owned(),
                r["amount"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(rows, pairs(&[("commercial", "94.50"), ("default", "23.57")]));

    // `audit` from the command line is clean, and lists the discounts.
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit.discounts WHERE amount_exact = recomputed_amount_exact")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(n, 8, "3 job discounts and 5 storage discounts, each recomputed");
}

#[tokio::test]
async fn a_planted_class_price_or_discount_error_is_reported() {
    let db = db().await;
    ok(&record(&db, "A1", "ACAD", 10, &[]));
    ok(&record(&db, "N1", "NEWFAC", 10, &[]));
    ok(&record(&db, "I1", "IND", 10, &[]));
    assert_eq!(findings(&db).await, []);
    let a1 = entries(&db, "A1").await[0].0;
    let n1 = entries(&db, "N1").await;
    let i1 = entries(&db, "I1").await;
    // The academic job charged by the commercial card, its arithmetic
    // consistent with that card: only the class is wrong.
    rewrite(
        &db,
        &format!(
            "UPDATE ledger_entry SET rate_card_id = (SELECT id FROM rate_card WHERE rate_class_id IS NOT NULL),
                    unit_rate = 0.05, amount_exact = 5, amount = 5 WHERE id = {a1}"
        ),
    )
    .await;
    // NEWFAC's discount a cent short; IND's discount line gone.
    rewrite(
        &db,
        &format!(
            "UPDATE ledger_entry SET amount_exact = -0.53, amount = -0.53 WHERE id = {};
             DELETE FROM ledger_entry WHERE id = {}",
            n1[1].0, i1[1].0
        ),
    )
    .await;
    let mut f = findings(&db).await;
    // The usage sums kept as the entries were posted no longer match them
    // either, in each of the three projects (A1's amount, NEWFAC's and
    // IND's discount lines).
    let usage = f.iter().filter(|r| r.1 == "usage").count();
    assert_eq!(usage, 3, "{f:?}");
    f.retain(|r| r.1 != "usage");
    let expect = |id: i64, field: &str| (Some(id), "job".to_owned(), field.to_owned());
    assert!(f.contains(&expect(a1, "rate_class")), "{f:?}");
    assert!(f.contains(&expect(n1[0].0, "discount")), "{f:?}");
    assert!(f.contains(&expect(i1[0].0, "discount")), "{f:?}");
    assert_eq!(f.len(), 3, "{f:?}");
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    let why: (String, String) = sqlx::query_as(
        "SELECT expected, recorded FROM audit.discrepancies WHERE entry_id = $1 AND field = 'rate_class'",
    )
    .bind(a1)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(why.0, "default");
    assert!(why.1.starts_with("commercial (card "), "{why:?}");
}

#[tokio::test]
async fn the_database_refuses_a_wrong_discount_line_and_a_retroactive_rule() {
    let db = db().await;
    ok(&record(&db, "A1", "ACAD", 10, &[]));
    ok(&record(&db, "N1", "NEWFAC", 10, &[]));
    let n1 = entries(&db, "N1").await;
    // A second discount line for the same charge, or one with the wrong amount.
    for amount in ["-0.54", "-0.10"] {
        let e = sqlx::query(&format!(
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                       quantity, unit_rate, amount_exact, amount, charging_rules, author, discount_id)
             SELECT period, project_id, 'discount', metric, job_record_id, rate_card_id, id, 0, 0, {amount}, {amount},
                    2, 'x', {} FROM ledger_entry WHERE id = {}",
            n1[1].3.unwrap(),
            n1[0].0
        ))
        .execute(&db.pool)
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("ledger_entry_one_discount") || e.contains("does not apply the discount in force"),
            "{e}"
        );
    }
    // A discount of ACAD's own starting before its charge: refused (a rule
    // change never re-prices a posted charge); after it, accepted.
    let with = |extra: &str| format!("{CENTER}\n{extra}");
    let retro = with(
        r#"[[discount]]
project = "ACAD"
percent = 20
from = 2026-04-01
reason = "late subsidy""#,
    );
    let e = hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&retro).unwrap(), "t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("would cover ledger entry"), "{e}");
    let later = with(
        r#"[[discount]]
project = "ACAD"
percent = 20
from = 2026-05-01
reason = "subsidy from May""#,
    );
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&later).unwrap(), "t")
        .await
        .unwrap();
    // A class change over a charged job: refused, naming the entry.
    let moved = CENTER.replace(
        "code = \"ACAD\"",
        "code = \"ACAD\"\nclass = [{ from = 2026-04-01, name = \"commercial\" }]",
    );
    let e = hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&moved).unwrap(), "t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("project ACAD cannot change class from"), "{e}");
    // Its history is never rewritten.
    let rewritten = CENTER.replace(
        "class = [{ from = 2026-04-16, name = \"commercial\" }]",
        "class = [{ from = 2026-04-16, name = \"default\" }]",
    );
    let e = hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&rewritten).unwrap(), "t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("class history is never rewritten"), "{e}");
    assert_eq!(findings(&db).await, []);
}

#[tokio::test]
async fn corrections_carry_the_discount_with_the_charge() {
    let db = db().await;
    ok(&record(&db, "N1", "NEWFAC", 10, &[]));
    ok(&record(&db, "I1", "IND", 10, &[]));
    // A supersede (50 cores: 200 core-hours = 2.14, discount -1.07)
    // reverses the old charge and its discount, and posts both anew.
    let o = ok(&record(&db, "N1", "NEWFAC", 10, &["--cores", "50", "--supersede"]));
    assert!(o.contains("2 entries reversed"), "{o}");
    assert_eq!(
        amounts(&entries(&db, "N1").await),
        pairs(&[
            ("job", "1.07"),
            ("discount", "-0.54"),
            ("job", "2.14"),
            ("reversal", "-1.07"),
            ("reversal", "0.54"),
            ("discount", "-1.07"),
        ])
    );
    // Half of IND's job is refunded: half of its net 4.50.
    let o = ok(&db.cli(&[
        "refund",
        "--cluster",
        "c1",
        "--job-id",
        "I1",
        "--fraction",
        "0.5",
        "--reason",
        "node failure",
    ]));
    assert!(o.contains("-2.25"), "{o}");
    // A discount line is not reversed alone; the charge takes it along.
    let i1 = entries(&db, "I1").await;
    let e = db.cli(&["reverse", "--entry", &i1[1].0.to_string(), "--reason", "x"]);
    assert!(stderr(&e).contains("is a discount line"), "{}", stderr(&e));
    ok(&db.cli(&[
        "reverse",
        "--entry",
        &i1[0].0.to_string(),
        "--reason",
        "charged in error",
    ]));
    let net: Decimal = entries(&db, "I1").await.iter().map(|(_, _, a, _)| *a).sum();
    assert_eq!(net, Decimal::ZERO, "{:?}", entries(&db, "I1").await);
    assert_eq!(findings(&db).await, []);
}

#[tokio::test]
async fn quote_prices_for_a_project_or_a_class() {
    let db = db().await;
    let quote = |extra: &[&str]| {
        let mut args = vec![
            "quote",
            "--cluster",
            "c1",
            "--resources",
            "-n 25",
            "--walltime",
            "4:00:00",
            "--queue",
            "batch",
            "--at",
            "2026-04-20",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str::<serde_json::Value>(&ok(&db.cli(&args))).unwrap()
    };
    let q = quote(&[]);
    assert_eq!(
        (q["rate_class"].as_str(), q["total"].as_str()),
        (Some("default"), Some("1.07"))
    );
    let q = quote(&["--class", "commercial"]);
    assert_eq!(
        (
            q["list_total"].as_str(),
            q["discount"]["amount"].as_str(),
            q["total"].as_str()
        ),
        (Some("5.00"), Some("-0.50"), Some("4.50"))
    );
    let q = quote(&["--project", "NEWFAC"]);
    assert_eq!(
        (
            q["rate_class"].as_str(),
            q["discount"]["percent"].as_str(),
            q["total"].as_str()
        ),
        (Some("default"), Some("50"), Some("0.53"))
    );
    // MOVER is commercial from 16 April.
    let q = quote(&["--project", "MOVER"]);
    assert_eq!(
        (q["rate_class"].as_str(), q["total"].as_str()),
        (Some("commercial"), Some("4.50"))
    );
    let o = db.cli(&[
        "quote",
        "--cluster",
        "c1",
        "--resources",
        "-n 1",
        "--walltime",
        "1:00:00",
        "--queue",
        "batch",
        "--class",
        "comercial",
    ]);
    assert!(stderr(&o).contains("did you mean commercial?"), "{}", stderr(&o));
    let text = ok(&db.cli(&[
        "quote",
        "--cluster",
        "c1",
        "--resources",
        "-n 25",
        "--walltime",
        "4:00:00",
        "--queue",
        "batch",
        "--project",
        "IND",
    ]));
    assert!(text.contains("for project IND, rate class commercial"), "{text}");
    assert!(text.contains("discount 10 % (partner agreement): -0.50 USD"), "{text}");
}

#[tokio::test]
async fn a_refunded_job_can_be_superseded() {
    // Before migration 0026 a supersede reversed the refund of the old
    // charge citing the new record, which the reversal guard refused (it
    // took a supersede's reversal only of a job charge): the re-sent record
    // became a `database` rejection.
    let db = db().await;
    ok(&record(&db, "A1", "ACAD", 10, &[]));
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "c1",
        "--job-id",
        "A1",
        "--fraction",
        "0.5",
        "--reason",
        "node failure",
    ]));
    let o = ok(&record(&db, "A1", "ACAD", 10, &["--cores", "50", "--supersede"]));
    assert!(o.contains("2 entries reversed"), "{o}");
    // Half of 1.07 under charging rules 3: -0.53 (0.535 left, 0.54 still charged).
    assert_eq!(
        amounts(&entries(&db, "A1").await),
        pairs(&[
            ("job", "1.07"),
            ("refund", "-0.53"),
            ("job", "2.14"),
            ("reversal", "-1.07"),
            ("reversal", "0.53"),
        ])
    );
    assert_eq!(findings(&db).await, []);
}

#[tokio::test]
async fn config_show_lists_classes_their_prices_and_discounts() {
    let db = db().await;
    let s = ok(&db.cli(&["config", "show", "--at", "2026-04-20"]));
    for want in [
        "regular (commercial)",
        "storage (commercial): 20 USD per TB-month",
        "rate classes: default, commercial (Industry partners)",
        "discount: 50 % for project NEWFAC (since 2026-01-01, until 2027-01-01): new faculty subsidy",
        "discount: 10 % for class commercial (since 2026-01-01): partner agreement",
    ] {
        assert!(s.contains(want), "{want:?} in\n{s}");
    }
    let mover = s.lines().find(|l| l.starts_with("MOVER")).unwrap();
    assert!(mover.contains("commercial"), "{mover}");
    let before = ok(&db.cli(&["config", "show", "--at", "2026-04-10"]));
    let mover = before.lines().find(|l| l.starts_with("MOVER")).unwrap();
    assert!(mover.contains("default"), "{mover}");
    // Applying the same file again changes nothing.
    let again = hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(CENTER).unwrap(), "t")
        .await
        .unwrap();
    assert!(!again.changed(), "{again}");
    assert_eq!(
        (
            again.classes.unchanged,
            again.discounts.unchanged,
            again.project_classes.unchanged
        ),
        (1, 3, 3)
    );
}

#[tokio::test]
async fn a_full_discount_nets_zero_even_when_the_charge_rounds_up_and_goes_only_with_its_charge() {
    let db = db().await;
    // 11 cores for 30 minutes: 5.5 core-hours × 0.0107 = 0.05885, posted
    // 0.06; 100 % of the exact amount is -0.05885, posted -0.06 (a discount
    // of the rounded amount would credit more than was charged).
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "F1",
        "--project",
        "FULL",
        "--queue",
        "batch",
        "--cores",
        "11",
        "--start",
        "2026-04-10T00:00:00Z",
        "--end",
        "2026-04-10T00:30:00Z",
    ]);
    assert_eq!(ok(&o), "recorded c1/F1: 2 entries totalling 0.00 in 2026-04\n");
    let f1 = entries(&db, "F1").await;
    assert_eq!(amounts(&f1), pairs(&[("job", "0.06"), ("discount", "-0.06")]));
    // Reversing the discount line alone is refused by the database too (the
    // command line refuses it first), by any role.
    let e = sqlx::query(&format!(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id, quantity,
                                   unit_rate, amount_exact, amount, reason, charging_rules, author, discount_id)
         SELECT period, project_id, 'reversal', metric, job_record_id, rate_card_id, id, -quantity, unit_rate,
                -amount_exact, -amount, 'x', charging_rules, 'x', discount_id FROM ledger_entry WHERE id = {}",
        f1[1].0
    ))
    .execute(&db.pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("is not tied to what it reverses"), "{e}");
    // With its charge, it goes.
    ok(&db.cli(&[
        "reverse",
        "--entry",
        &f1[0].0.to_string(),
        "--reason",
        "sponsor paid directly",
    ]));
    let net: Decimal = entries(&db, "F1").await.iter().map(|(_, _, a, _)| *a).sum();
    assert_eq!(net, Decimal::ZERO);
    assert_eq!(findings(&db).await, []);
}

/// A full refund of a discounted charge of charging rules 3 nets zero when
/// the net has more places than a refund keeps: 1 core for 7,561 s at 0.05
/// is 0.105013888888 (0.11), its 10 % line −0.0105013888888 (−0.01); the
/// net, 0.0945124999992, refunded as 0.094512499999 (12 places) rounds to
/// 0.09, and a refund that gave back that left a cent charged that nothing
/// could refund.
#[tokio::test]
async fn a_discounted_charge_refunded_in_full_nets_zero() {
    let db = db().await;
    ok(&db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "F1",
        "--project",
        "IND",
        "--queue",
        "batch",
        "--cores",
        "1",
        "--start",
        "2026-04-10T00:00:00Z",
        "--end",
        "2026-04-10T02:06:01Z",
    ]));
    assert_eq!(
        amounts(&entries(&db, "F1").await),
        pairs(&[("job", "0.11"), ("discount", "-0.01")])
    );
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "c1",
        "--job-id",
        "F1",
        "--fraction",
        "1",
        "--reason",
        "never ran",
    ]));
    assert_eq!(
        amounts(&entries(&db, "F1").await),
        pairs(&[("job", "0.11"), ("discount", "-0.01"), ("refund", "-0.10")])
    );
    assert_eq!(findings(&db).await, []);
}

/// A refund of an amount takes back the share of the charge's net that the
/// amount is, in quantity too (what usage reports net out): 100 core-hours
/// at 0.0107 is 1.07, NEWFAC's 50 % line −0.535, so the net is 0.535 and a
/// refund of 0.25 takes back 100 × 0.25 ÷ 0.535 = 46.728971962617
/// core-hours (12 places), as `--fraction` 0.25 ÷ 0.535 would. Before
/// 2026-12-07 it took 100 × 0.25 ÷ 1.07 = 23.364485981308: a refund of the
/// whole net left half the core-hours in the usage report. A charge
/// discounted in full has nothing to refund, and says so.
#[tokio::test]
async fn an_amount_refund_takes_back_its_share_of_the_net_in_quantity_too() {
    let db = db().await;
    ok(&record(&db, "Q1", "NEWFAC", 10, &[]));
    let o = ok(&db.cli(&[
        "refund",
        "--cluster",
        "c1",
        "--job-id",
        "Q1",
        "--amount",
        "0.25",
        "--reason",
        "short run",
    ]));
    // Each posted entry with its kind (the column was headed "posted").
    assert!(o.starts_with("entry  kind ") && o.contains(" refund "), "{o}");
    let refunds: Vec<(Decimal, Decimal)> = sqlx::query_as(
        "SELECT e.quantity, e.amount_exact FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
          JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = 'Q1' AND e.kind = 'refund'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(refunds, [(dec("-46.728971962617"), dec("-0.25"))]);
    let usage = ok(&db.cli(&[
        "usage",
        "--project",
        "NEWFAC",
        "--from",
        "2026-04",
        "--to",
        "2026-04",
        "--by",
        "month",
        "--format",
        "csv",
    ]));
    assert!(usage.contains("53.271028037383"), "{usage}");

    ok(&record(&db, "Q2", "FULL", 10, &[]));
    let e = db.cli(&[
        "refund",
        "--cluster",
        "c1",
        "--job-id",
        "Q2",
        "--amount",
        "0.01",
        "--reason",
        "x",
    ]);
    assert!(!e.status.success());
    assert!(
        stderr(&e).contains("discounted in full: nothing is left to refund"),
        "{}",
        stderr(&e)
    );
    assert_eq!(findings(&db).await, []);
}

/// Refunds of a charge whose net has many places, of a charge discounted in
/// full, and many of one charge (a review of 2026-12-07): `refund --amount
/// 0.01` of a charge whose quantity has 12 places and whose 10 % line makes
/// the net 13 said "the refund is too large to compute exactly" (a 128-bit
/// product overflowed), as did a fraction of 16 digits; `refund --fraction
/// 1` of a charge discounted in full posted 0.00 as often as it was asked,
/// each taking its whole quantity out of the usage report, and the database
/// took a refund of a million core-hours of it for 0.00.
#[tokio::test]
async fn refunds_of_long_nets_and_of_charges_discounted_in_full() {
    let db = db().await;
    let quantity = |job: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Decimal>(
                "SELECT coalesce(sum(e.quantity), 0) FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
                  JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id = $1",
            )
            .bind(job)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let refund = |job: &str, by: &str, value: &str| {
        db.cli(&["refund", "--cluster", "c1", "--job-id", job, by, value, "--reason", "r"])
    };
    // 25 cores for 4 h 0 min 7 s: 100.048611111111 core-hours.
    ok(&db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "L2",
        "--project",
        "IND",
        "--queue",
        "batch",
        "--cores",
        "25",
        "--start",
        "2026-04-11T00:00:00Z",
        "--end",
        "2026-04-11T04:00:07Z",
    ]));
    let charged = quantity("L2").await;
    assert_eq!(charged, dec("100.048611111111"));
    ok(&refund("L2", "--amount", "0.01"));
    ok(&refund("L2", "--fraction", "0.3333333333333333"));
    // Each took its share of the net, to 12 places (the net's own places
    // are the exact amount's and its 10 % line's).
    let shares: Vec<(Decimal, Decimal)> = sqlx::query_as(
        "SELECT f.quantity, -round(o.quantity * -f.amount_exact / (o.amount_exact + d.amount_exact), 12)
           FROM ledger_entry f JOIN ledger_entry o ON o.id = f.corrects_id
           JOIN ledger_entry d ON d.corrects_id = o.id AND d.kind = 'discount'
          WHERE f.kind = 'refund' ORDER BY f.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(shares.len(), 2);
    assert_eq!(shares[0].0, shares[0].1, "{shares:?}");
    // A fraction's exact amount is truncated, so its share is F itself.
    assert_eq!(shares[1].0, dec("-33.349537037037"), "{shares:?}");

    // Discounted in full: nothing to refund, by fraction either.
    ok(&record(&db, "F2", "FULL", 10, &[]));
    let e = refund("F2", "--fraction", "1");
    assert!(!e.status.success());
    assert!(
        stderr(&e).contains("discounted in full: nothing is left to refund"),
        "{}",
        stderr(&e)
    );
    assert_eq!(quantity("F2").await, dec("100"));
    // With SQL, its whole quantity once (0.00), but not again, and not more.
    let by_hand = |q: &str| {
        format!(
            "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                       quantity, unit_rate, amount_exact, amount, author, reason, charging_rules)
             SELECT o.period, o.project_id, 'refund', o.metric, o.job_record_id, o.rate_card_id, o.id, {q},
                    o.unit_rate, 0, 0, 'x', 'by hand', o.charging_rules
               FROM ledger_entry o JOIN job_record r ON r.id = o.job_record_id JOIN job j ON j.id = r.job_id
              WHERE j.scheduler_job_id = 'F2' AND o.kind = 'job'"
        )
    };
    let refused = |q: &'static str| {
        let (pool, sql) = (db.pool.clone(), by_hand(q));
        async move {
            let e = sqlx::raw_sql(&sql).execute(&pool).await.unwrap_err().to_string();
            assert!(
                e.contains("the refunds of entry") && e.contains("would take back"),
                "{e}"
            );
        }
    };
    sqlx::raw_sql(&by_hand("-100")).execute(&db.pool).await.unwrap();
    for q in ["-100", "-1000000"] {
        refused(q).await;
    }
    assert_eq!(quantity("F2").await, dec("0"));
    // Reversed (its refund with it), nothing of it is refunded again: with
    // a net of 0 the money check passes a 0.00 refund, and the quantity cap
    // counted refunds only.
    ok(&db.cli(&["reverse", "--cluster", "c1", "--job-id", "F2", "--reason", "r"]));
    assert_eq!(quantity("F2").await, dec("0"));
    refused("-100").await;
    // A refund's exact amount gives back too (only its cents were held to it).
    let e = sqlx::raw_sql(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                   quantity, unit_rate, amount_exact, amount, author, reason, charging_rules)
         SELECT o.period, o.project_id, 'refund', o.metric, o.job_record_id, o.rate_card_id, o.id, -0.000001,
                o.unit_rate, 0.004, 0, 'x', 'by hand', o.charging_rules
           FROM ledger_entry o JOIN job_record r ON r.id = o.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = 'L2' AND o.kind = 'job'",
    )
    .execute(&db.pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("ledger_entry_refund_gives_back"), "{e}");
}

/// A share of a job's charges passes over a line that charged nothing (a
/// GPU-hour line at a rate of 0 beside its core-hours: 4 cores × 4 h ×
/// 0.01 = 0.16, 4 GPU-hours × 0 = 0.00): the core-hours are refunded; that
/// line refunded by itself is refused. The refusal of lines that charged
/// nothing refused the whole job's share (a review of 2026-12-07).
#[tokio::test]
async fn a_share_of_a_job_passes_over_a_line_that_charged_nothing() {
    let db = TestDb::new().await;
    let free_gpus = CENTER.replace("gpu_hour = 0.5", "gpu_hour = 0");
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&free_gpus).unwrap(), "t")
        .await
        .unwrap();
    ok(&db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "G1",
        "--project",
        "ACAD",
        "--queue",
        "gpu",
        "--cores",
        "4",
        "--gpus",
        "1",
        "--start",
        "2026-04-10T00:00:00Z",
        "--end",
        "2026-04-10T04:00:00Z",
    ]));
    assert_eq!(
        amounts(&entries(&db, "G1").await),
        pairs(&[("job", "0.16"), ("job", "0")])
    );
    let gpu_line = entries(&db, "G1").await[1].0.to_string();
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "c1",
        "--job-id",
        "G1",
        "--fraction",
        "0.5",
        "--reason",
        "half",
    ]));
    assert_eq!(
        amounts(&entries(&db, "G1").await),
        pairs(&[("job", "0.16"), ("job", "0"), ("refund", "-0.08")])
    );
    let e = db.cli(&["refund", "--entry", &gpu_line, "--fraction", "0.5", "--reason", "x"]);
    assert!(
        stderr(&e).contains("charged nothing: there is nothing to refund"),
        "{}",
        stderr(&e)
    );
    assert_eq!(findings(&db).await, []);
}
