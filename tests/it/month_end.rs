//! Statements, closing a month, corrections, and auditing every charge with
//! SQL, on the example center and its sample jobs.

use chrono::Utc;
use hpc_ledger::domain::period::Month;
use hpc_ledger::service::close::{audit, audit_of, close, close_through, verify};
use hpc_ledger::service::correct::{RefundBy, Target, Why, adjust, refund, reverse};
use hpc_ledger::service::statement::{Status, Which, statements};
use hpc_ledger::service::storage::bill_through;
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::harness::{TestDb, ok, stderr, stdout};

fn m(s: &str) -> Month {
    s.parse().unwrap()
}

/// The example center with its sample jobs recorded and its storage billed
/// from its first quota (January) through October.
async fn october() -> TestDb {
    crate::harness::sample_billed_through("2026-10").await
}

fn why(reason: &str) -> Why {
    Why {
        author: "billing".into(),
        reason: reason.into(),
        ..Why::default()
    }
}

fn owens(job: &str) -> Target {
    Target::Job {
        cluster: "owens".into(),
        job_id: job.into(),
        array_index: None,
        start: None,
    }
}

async fn close_through_october(pool: &PgPool) {
    let closed = close_through(pool, m("2026-10"), "billing", Utc::now()).await.unwrap();
    assert!(closed.stopped.is_none(), "{:?}", closed.stopped);
}

#[tokio::test]
async fn a_statement_matches_the_hand_computed_one() {
    let db = october().await;
    // Two more October jobs for PZS0708: a GPU job and a single-core one.
    for job in [
        r#"{"cluster":"owens","job_id":"4001","project":"PZS0708","queue":"gpu","cores":4,"gpus":1,"start":"2026-10-20T08:00:00-04:00","end":"2026-10-20T10:00:00-04:00"}"#,
        r#"{"cluster":"owens","job_id":"4002","project":"PZS0708","queue":"serial","cores":1,"start":"2026-10-21T08:00:00-04:00","end":"2026-10-21T18:00:00-04:00"}"#,
    ] {
        let o = crate::harness::cli_with_env(&["job", "record", "--json"], &[("DATABASE_URL", &db.url)], Some(job));
        ok(&o);
    }
    refund(
        &db.pool,
        &owens("1004"),
        RefundBy::Fraction("0.5".parse().unwrap()),
        &why("node failure"),
        Utc::now(),
    )
    .await
    .unwrap();
    reverse(
        &db.pool,
        &owens("1003"),
        &why("charged to the wrong project"),
        Utc::now(),
    )
    .await
    .unwrap();
    adjust(
        &db.pool,
        "PZS0708",
        "-10.00".parse().unwrap(),
        &Why {
            month: Some(m("2026-10")),
            ..why("award credit")
        },
        Utc::now(),
    )
    .await
    .unwrap();
    let s = statements(&db.pool, m("2026-10"), Which::Project("pzs0708"))
        .await
        .unwrap()
        .remove(0);
    assert!(matches!(s.status, Status::Provisional));
    // Compute, worked out by hand (examples/center.toml):
    //   owens gpu         4001: 4 cores × 2 h = 8 core-hours × 0.01 = 0.08; 1 GPU × 2 h × 0.20 = 0.40
    //   owens hugememory  1004: 512 GB / 32 GB = 16 cores × 24 h = 384 core-hours × 0.015 = 5.76
    //   owens regular     1003: 2 nodes × 28 cores × 4 h = 224 × 0.012 = 2.688 -> 2.69
    //                     4002: 1 core × 10 h = 10 × 0.012 = 0.12 (same line: 234 core-hours, 2.81)
    //   pitzer hugememory 5004: 1500 GB / 32 GB = 46.875 cores × 12 h = 562.5 × 0.016 = 9.00
    //   pitzer regular    5005: 4 nodes × 40 cores × 3 h = 480 × 0.0125 = 6.00
    // (1010 ended on 1 November: not in October.)
    let compute: Vec<String> = s
        .compute
        .iter()
        .map(|l| {
            format!(
                "{} {} {} {} jobs {} at {} = {:.2}",
                l.cluster,
                l.node_type,
                l.metric,
                l.jobs,
                l.quantity.normalize(),
                l.unit_rate.normalize(),
                l.amount
            )
        })
        .collect();
    assert_eq!(
        compute,
        [
            "owens gpu gpu_hours 1 jobs 2 at 0.2 = 0.40",
            "owens gpu core_hours 1 jobs 8 at 0.01 = 0.08",
            "owens hugememory core_hours 1 jobs 384 at 0.015 = 5.76",
            "owens regular core_hours 2 jobs 234 at 0.012 = 2.81",
            "pitzer hugememory core_hours 1 jobs 562.5 at 0.016 = 9.00",
            "pitzer regular core_hours 1 jobs 480 at 0.0125 = 6.00",
        ]
    );
    assert_eq!(s.compute_total().to_string(), "24.05");
    // Storage: 50 TB all October at 4.50 = 225.00.
    assert_eq!(s.storage_total().to_string(), "225.00");
    // Corrections: half of 1004 (192 core-hours) -2.88; 1003 reversed -2.69; credit -10.00.
    let corrections: Vec<(String, String)> = s
        .corrections
        .iter()
        .map(|c| (c.kind.clone(), format!("{:.2}", c.amount)))
        .collect();
    assert_eq!(
        corrections,
        [("refund", "-2.88"), ("reversal", "-2.69"), ("adjustment", "-10.00")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(
        s.corrections[0].corrects.as_deref(),
        Some("job owens/1004 core_hours (2026-10)")
    );
    assert_eq!(s.total.to_string(), "233.48", "24.05 + 225.00 - 15.57");
    // The total is the sum of the entries' rounded amounts.
    let sum: Decimal = sqlx::query_scalar(
        "SELECT sum(amount) FROM ledger_entry e JOIN project p ON p.id = e.project_id WHERE p.code = 'PZS0708' AND e.period = '2026-10-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(sum, s.total);
    // Closed: final, numbered, and the numbers are one gapless sequence.
    close_through_october(&db.pool).await;
    let s = statements(&db.pool, m("2026-10"), Which::Project("PZS0708"))
        .await
        .unwrap()
        .remove(0);
    assert!(matches!(s.status, Status::Final { .. }));
    let numbers: Vec<i64> = sqlx::query_scalar("SELECT number FROM statement ORDER BY number")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(numbers, (1..=numbers.len() as i64).collect::<Vec<_>>());
    // January–February: two projects with quotas; March–June: three (storage
    // only); July–October: 3, 3, 3 and 4 with jobs.
    assert_eq!(numbers.len(), 2 + 2 + 3 * 4 + 3 + 3 + 3 + 4);
    assert!(audit(&db.pool).await.unwrap().clean());
}

#[tokio::test]
async fn closing_a_month_and_what_it_refuses() {
    let db = october().await;
    let e = close(&db.pool, m("2026-10"), "b", Utc::now()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "close 2026-01 first: months are closed in order, and 2026-01 holds entries"
    );
    let current: String = sqlx::query_scalar("SELECT to_char(now() AT TIME ZONE time_zone, 'YYYY-MM') FROM center")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let e = close(&db.pool, m(&current), "b", Utc::now()).await.unwrap_err();
    assert!(e.to_string().starts_with(&format!("{current} is not over yet")), "{e}");
    let through = close_through(&db.pool, m("2026-09"), "b", Utc::now()).await.unwrap();
    assert!(through.stopped.is_none(), "{:?}", through.stopped);
    assert_eq!(
        through.months.iter().map(|c| c.month.to_string()).collect::<Vec<_>>(),
        [
            "2026-01", "2026-02", "2026-03", "2026-04", "2026-05", "2026-06", "2026-07", "2026-08", "2026-09"
        ]
    );
    // After September, October comes next, whether or not it holds entries.
    let e = close(&db.pool, m("2026-11"), "b", Utc::now()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "close 2026-10 first: months are closed one after another, from the last one closed"
    );
    // Storage not billed: refused, and saying so (here every month since the
    // first quota in January).
    let fresh = TestDb::with_example().await;
    let e = close(&fresh.pool, m("2026-10"), "b", Utc::now()).await.unwrap_err();
    assert!(
        e.to_string().starts_with(
            "cannot close 2026-10: storage for 2026-01, 2026-02, 2026-03, … and 2026-09 (9 months) had quotas but was never billed"
        ),
        "{e}"
    );
    bill_through(&fresh.pool, m("2026-09"), "b", false, Utc::now())
        .await
        .unwrap();
    close_through(&fresh.pool, m("2026-09"), "b", Utc::now()).await.unwrap();
    let e = close(&fresh.pool, m("2026-10"), "b", Utc::now()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "storage for 2026-10 has not been billed: run `hpc-ledger bill storage --month 2026-10` first"
    );
    // Closing twice: the second reports the first.
    let first = close(&db.pool, m("2026-10"), "b", Utc::now()).await.unwrap();
    let second = close(&db.pool, m("2026-10"), "b", Utc::now()).await.unwrap();
    assert!(first.closed_now && !second.closed_now);
    assert_eq!(first.seal, second.seal);
    // Nothing is posted into a closed month: a job ending in October now is late, in November.
    let text = r#"{"cluster":"owens","job_id":"3001","project":"PAS1234","queue":"batch","cores":1,"start":"2026-10-30T10:00:00-04:00","end":"2026-10-30T11:00:00-04:00"}"#;
    let o = crate::harness::cli_with_env(&["job", "record", "--json"], &[("DATABASE_URL", &db.url)], Some(text));
    assert_eq!(
        ok(&o),
        "recorded owens/3001: 1 entry totalling 0.01 in 2026-11 (late: its own month is closed)\n"
    );
    let e = adjust(
        &db.pool,
        "PAS1234",
        "1.00".parse().unwrap(),
        &Why {
            month: Some(m("2026-10")),
            ..why("x")
        },
        Utc::now(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), "2026-10 is closed: corrections post into an open month");
    // Reversing an October charge now posts into November.
    let posted = reverse(&db.pool, &owens("1002"), &why("duplicate"), Utc::now())
        .await
        .unwrap();
    assert_eq!(posted.entries[0].period.to_string(), "2026-11");
    // The closed months still verify, and the audit is clean.
    assert!(verify(&db.pool, None).await.unwrap().iter().all(|c| c.holds()));
    assert!(audit(&db.pool).await.unwrap().clean());
}

#[tokio::test]
async fn corrections_credit_back_at_most_what_was_charged() {
    let db = october().await;
    // 1005: 0.48 core-hours charge and 2.40 GPU-hours charge.
    let e = refund(
        &db.pool,
        &owens("1005"),
        RefundBy::Amount("1.00".parse().unwrap()),
        &why("x"),
        Utc::now(),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().starts_with("the job has 2 charges ("), "{e}");
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT e.id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '1005' ORDER BY e.metric",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let gpu = Target::Entry(hpc_ledger::ids::LedgerEntryId(ids[1]));
    let p = refund(
        &db.pool,
        &gpu,
        RefundBy::Amount("1.00".parse().unwrap()),
        &why("slow GPU"),
        Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            p.entries[0].amount.to_string().as_str(),
            p.entries[0].quantity.normalize().to_string().as_str()
        ),
        ("-1.00", "-5")
    );
    let e = refund(
        &db.pool,
        &gpu,
        RefundBy::Amount("1.50".parse().unwrap()),
        &why("again"),
        Utc::now(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("entry {} has 1.40 left to refund, less than 1.50", ids[1])
    );
    // Reversing the entry takes its refund back too: the job's GPU charge nets to zero.
    let p = reverse(&db.pool, &gpu, &why("not run at all"), Utc::now())
        .await
        .unwrap();
    assert_eq!(
        p.entries.iter().map(|x| x.amount.to_string()).collect::<Vec<_>>(),
        ["-2.40", "1.00"]
    );
    let net: Decimal = sqlx::query_scalar("SELECT sum(amount) FROM ledger_entry WHERE id = $1 OR corrects_id = $1 OR corrects_id IN (SELECT id FROM ledger_entry WHERE corrects_id = $1)")
        .bind(ids[1])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(net.is_zero(), "{net}");
    let e = reverse(&db.pool, &gpu, &why("again"), Utc::now()).await.unwrap_err();
    assert_eq!(e.to_string(), format!("entry {} is already reversed", ids[1]));
    // Concurrent reversals of one job: exactly one succeeds.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            reverse(&pool, &owens("1002"), &why("race"), Utc::now()).await
        }));
    }
    let mut done = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            done += 1;
        }
    }
    assert_eq!(done, 1);
    let reversals: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_entry e JOIN ledger_entry o ON o.id = e.corrects_id JOIN job_record r ON r.id = o.job_record_id
           JOIN job j ON j.id = r.job_id WHERE e.kind = 'reversal' AND j.scheduler_job_id = '1002'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(reversals, 1);
    assert!(audit(&db.pool).await.unwrap().clean());
}

/// A refund in full of entry `id`, posted in a transaction left open (READ
/// COMMITTED, as every write to the ledger must be since migration 0057).
async fn refund_in_full_uncommitted(pool: &PgPool, id: i64) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut refund = pool.begin_with("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    sqlx::query(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                   quantity, unit_rate, amount_exact, amount, late, reason, charging_rules, author)
         SELECT period, project_id, 'refund', metric, job_record_id, rate_card_id, id, -quantity, unit_rate,
                -amount_exact, -amount, late, 'a refund in full, not yet committed', charging_rules, 'billing'
           FROM ledger_entry WHERE id = $1",
    )
    .bind(id)
    .execute(&mut *refund)
    .await
    .unwrap();
    refund
}

/// A refund not yet committed while the same charge is reversed: the
/// reversal waits for it, then sees it and reverses it with the charge, as
/// a reversal after a refund does: credited back once. (Before migration
/// 0051 each was checked against what was committed before either, and
/// both were posted: the charge credited back twice; until 2026-12-07 the
/// reversal read the charge before it waited, and was refused.)
#[tokio::test]
async fn a_charge_refunded_and_reversed_at_once_is_credited_back_once() {
    let db = october().await;
    refund_and_reverse_at_once(&db.pool).await;
}

/// The same on a server whose transactions default to REPEATABLE READ: a
/// posting still reads what committed while it waited for the corrections'
/// lock (`begin_posting` asks for READ COMMITTED; with the server's default,
/// the reversal checked a snapshot taken before the refund committed and
/// both were posted).
#[tokio::test]
async fn a_posting_reads_committed_whatever_the_servers_default() {
    let db = october().await;
    sqlx::raw_sql(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = ''repeatable read''',
                                    current_database()); END $$",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .unwrap();
    let isolation: String = sqlx::query_scalar("SHOW transaction_isolation")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(isolation, "repeatable read");
    refund_and_reverse_at_once(&pool).await;
}

async fn refund_and_reverse_at_once(pool: &PgPool) {
    let (id, amount): (i64, Decimal) =
        sqlx::query_as("SELECT id, amount_exact FROM ledger_entry WHERE kind = 'job' ORDER BY id LIMIT 1")
            .fetch_one(pool)
            .await
            .unwrap();
    let refund = refund_in_full_uncommitted(pool, id).await;
    let other = pool.clone();
    let target = Target::Entry(hpc_ledger::ids::LedgerEntryId(id));
    let reversal = tokio::spawn(async move { reverse(&other, &target, &why("not run at all"), Utc::now()).await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!reversal.is_finished(), "the reversal waits for the refund");
    refund.commit().await.unwrap();
    let done = reversal.await.unwrap().unwrap();
    assert_eq!(done.entries.len(), 2, "the charge and its refund reversed");
    // What the charge and everything correcting it net to: nothing, the
    // charge credited back once.
    let (credited, net): (Decimal, Decimal) = sqlx::query_as(
        "SELECT -sum(amount_exact) FILTER (WHERE corrects_id = $1), sum(amount_exact) FROM ledger_entry
          WHERE id = $1 OR corrects_id = $1 OR corrects_id IN (SELECT id FROM ledger_entry WHERE corrects_id = $1)",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!((credited, net), (amount + amount, Decimal::ZERO));
}

/// A re-sent job superseding its charge while the charge is being
/// refunded: the recorder waits for the refund, is refused once (HL008),
/// and records again, reversing the refund too; the old charge nets to
/// nothing. (Without the retry, a one-job batch was kept as a database
/// rejection.)
#[tokio::test]
async fn a_resent_job_superseding_a_charge_being_refunded_is_recorded() {
    let db = october().await;
    let job = |cores: u32| {
        format!(
            r#"{{"cluster":"owens","job_id":"4101","project":"PZS0708","queue":"serial","cores":{cores},"start":"2026-10-21T08:00:00-04:00","end":"2026-10-21T18:00:00-04:00"}}"#
        )
    };
    let record = |args: &'static [&'static str], text: String| {
        let url = db.url.clone();
        tokio::task::spawn_blocking(move || {
            let mut all = vec!["job", "record", "--json", "--format", "json"];
            all.extend_from_slice(args);
            crate::harness::cli_with_env(&all, &[("DATABASE_URL", &url)], Some(&text))
        })
    };
    ok(&record(&[], job(1)).await.unwrap());
    let id: i64 = sqlx::query_scalar(
        "SELECT e.id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '4101' AND e.kind = 'job'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let refund = refund_in_full_uncommitted(&db.pool, id).await;
    let resent = record(&["--supersede"], job(2));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(!resent.is_finished(), "the supersede waits for the refund");
    refund.commit().await.unwrap();
    let o = resent.await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(v["outcome"], "superseded", "{v}");
    let net: Decimal = sqlx::query_scalar(
        "SELECT sum(amount) FROM ledger_entry WHERE id = $1 OR corrects_id = $1
            OR corrects_id IN (SELECT id FROM ledger_entry WHERE corrects_id = $1)",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(net.is_zero(), "{net}");
    assert!(audit(&db.pool).await.unwrap().clean());
}

#[tokio::test]
async fn the_audit_catches_what_was_changed_behind_the_ledgers_back() {
    let db = october().await;
    close_through_october(&db.pool).await;
    let report = audit(&db.pool).await.unwrap();
    assert!(report.clean(), "{:#?}", report.discrepancies);
    // A superuser disables the guards and edits a closed month's charge.
    let id: i64 = sqlx::query_scalar(
        "SELECT e.id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '1004'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("ALTER TABLE ledger_entry DISABLE TRIGGER ALL")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("UPDATE ledger_entry SET quantity = 300, amount_exact = 4.5, amount = 4.50 WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await
        .unwrap();
    // And one of October's storage charges.
    let storage: i64 = sqlx::query_scalar(
        "UPDATE ledger_entry SET amount_exact = amount_exact + 1, amount = amount + 1
          WHERE id = (SELECT min(id) FROM ledger_entry WHERE kind = 'storage' AND period = '2026-10-01')
         RETURNING id",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    sqlx::raw_sql("ALTER TABLE ledger_entry ENABLE TRIGGER ALL")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let report = audit(&db.pool).await.unwrap();
    assert!(!report.clean());
    type Finding = (Option<i64>, String, Option<String>, Option<String>);
    let found: Vec<Finding> = report
        .discrepancies
        .iter()
        .map(|d| (d.entry_id, d.field.clone(), d.expected.clone(), d.recorded.clone()))
        .collect();
    assert!(
        found.contains(&(
            Some(id),
            "quantity".into(),
            Some("384.000000000000".into()),
            Some("300.000000000000".into())
        )),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|(e, f, _, _)| *e == Some(id) && f == "amount"),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|(_, f, _, _)| f == "total"),
        "the statement no longer adds up: {found:#?}"
    );
    // The October seal is broken; the months before still hold.
    let seals = verify(&db.pool, None).await.unwrap();
    let broken: Vec<String> = seals
        .iter()
        .filter(|c| !c.holds())
        .map(|c| c.period.to_string())
        .collect();
    assert_eq!(broken, ["2026-10-01"]);
    // From the command line: non-zero exits, with the findings.
    let o = db.cli(&["verify"]);
    assert_eq!(o.status.code(), Some(5));
    assert!(stdout(&o).contains("2026-10: SEAL BROKEN"), "{}", stdout(&o));
    assert!(stdout(&o).contains("2026-09: seal holds"), "{}", stdout(&o));
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(5));
    assert!(
        stdout(&o).contains("discrepancies between SQL and the ledger"),
        "{}",
        stdout(&o)
    );
    // One month at a time: October's audit finds the same entry and its
    // broken seal; September's finds nothing, its seal holds.
    let october = audit_of(&db.pool, Some("2026-10".parse().unwrap())).await.unwrap();
    let of_october: Vec<Finding> = october
        .discrepancies
        .iter()
        .map(|d| (d.entry_id, d.field.clone(), d.expected.clone(), d.recorded.clone()))
        .collect();
    assert_eq!(
        of_october.iter().filter(|(e, ..)| *e == Some(id)).count(),
        found.iter().filter(|(e, ..)| *e == Some(id)).count(),
        "{of_october:#?}"
    );
    // Its findings are read in two parts (the storage charges' planned
    // apart from the rest): together, exactly the whole audit's findings
    // of October, the findings of no entry first, then by entry.
    assert!(
        october
            .discrepancies
            .iter()
            .any(|d| d.entry_id == Some(storage) && d.kind == "storage" && d.field == "amount"),
        "{of_october:#?}"
    );
    let as_rows = |ds: &mut dyn Iterator<Item = &hpc_ledger::db::audit::Discrepancy>| {
        let mut rows: Vec<String> = ds.map(|d| format!("{d:?}")).collect();
        rows.sort();
        rows
    };
    assert_eq!(
        as_rows(&mut october.discrepancies.iter()),
        as_rows(
            &mut report
                .discrepancies
                .iter()
                .filter(|d| d.period.map(|p| p.to_string()).as_deref() == Some("2026-10-01"))
        )
    );
    assert!(
        october
            .discrepancies
            .windows(2)
            .all(|w| hpc_ledger::db::audit::month_order(&w[0], &w[1]).is_le()),
        "{of_october:#?}"
    );
    assert!(
        october
            .discrepancies
            .iter()
            .all(|d| d.period.map(|p| p.to_string()).as_deref() == Some("2026-10-01")),
        "{of_october:#?}"
    );
    let seals: Vec<(String, bool)> = october
        .seals
        .iter()
        .map(|c| (c.period.to_string(), c.holds()))
        .collect();
    assert_eq!(seals, [("2026-10-01".to_owned(), false)]);
    // Every finding is counted, by kind and field; an audit keeps the
    // first ones in full (100,000 by default; two here).
    assert_eq!(report.discrepancies_found, report.discrepancies.len() as u64);
    assert_eq!(
        report.discrepancies_by_field.values().sum::<u64>(),
        report.discrepancies_found
    );
    assert!(
        report.discrepancies_by_field["job quantity"] >= 1,
        "{:?}",
        report.discrepancies_by_field
    );
    assert!(
        report.discrepancies_by_field["storage amount"] >= 1,
        "{:?}",
        report.discrepancies_by_field
    );
    {
        use hpc_ledger::db::audit::{KEPT, MonthPart, Part, discrepancies, month_part};
        let mut conn = db.pool.acquire().await.unwrap();
        // The audit reads its findings in two parts side by side (the job
        // charges' recomputation, the rest), each cut to the first KEPT and
        // merged: the whole view's findings in its order, as one statement
        // reads them.
        let whole = discrepancies(&mut conn, KEPT).await.unwrap();
        assert_eq!(format!("{:?}", whole.kept), format!("{:?}", report.discrepancies));
        assert_eq!(whole.by_field, report.discrepancies_by_field);
        let two = discrepancies(&mut conn, 2).await.unwrap();
        assert!(report.discrepancies.len() > 2, "{:#?}", report.discrepancies);
        assert_eq!(format!("{:?}", two.kept), format!("{:?}", &report.discrepancies[..2]));
        assert_eq!(two.found, report.discrepancies_found);
        assert_eq!(two.by_field, report.discrepancies_by_field);
        // Each part cut to one, merged and cut to one: the first finding;
        // and the two parts have findings of their own (a job charge's
        // quantity; the storage charges' and the statement's).
        let [charges, rest] = Part::two(None);
        let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        let (of_charges, of_rest) = (
            charges.read(&mut tx, KEPT).await.unwrap(),
            rest.read(&mut tx, KEPT).await.unwrap(),
        );
        assert!(
            of_charges.by_field.contains_key("job quantity"),
            "{:?}",
            of_charges.by_field
        );
        assert!(
            of_rest.by_field.contains_key("storage amount"),
            "{:?}",
            of_rest.by_field
        );
        assert_eq!(of_charges.found + of_rest.found, report.discrepancies_found);
        let one =
            charges
                .read(&mut tx, 1)
                .await
                .unwrap()
                .merge(rest.read(&mut tx, 1).await.unwrap(), 1, charges.order());
        tx.rollback().await.unwrap();
        assert_eq!(format!("{:?}", one.kept), format!("{:?}", &report.discrepancies[..1]));
        // A month's two parts, each cut to one, merged and cut to one: the
        // first of the month's findings.
        let october_first = chrono::NaiveDate::from_ymd_opt(2026, 10, 1).unwrap();
        let rest = month_part(&mut conn, october_first, MonthPart::Rest, 1).await.unwrap();
        let storage = month_part(&mut conn, october_first, MonthPart::Storage, 1)
            .await
            .unwrap();
        let one = rest.merge(storage, 1, hpc_ledger::db::audit::month_order);
        assert_eq!(format!("{:?}", one.kept), format!("{:?}", &october.discrepancies[..1]));
        assert_eq!(one.found, october.discrepancies_found);
        assert_eq!(october.discrepancies_found, october.discrepancies.len() as u64);
    }
    // With no second connection to be had (a pool of two, one of them held
    // elsewhere), the audit reads its two parts one after the other on the
    // one it has, in one snapshot: the same report, and the month's too.
    let pool_of_two = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_secs(2))
        .connect(&db.url)
        .await
        .unwrap();
    let held = pool_of_two.acquire().await.unwrap();
    let in_turn = audit(&pool_of_two).await.unwrap();
    assert_eq!(
        format!("{:?}", in_turn.discrepancies),
        format!("{:?}", report.discrepancies)
    );
    assert_eq!(in_turn.discrepancies_by_field, report.discrepancies_by_field);
    let october_in_turn = audit_of(&pool_of_two, Some("2026-10".parse().unwrap())).await.unwrap();
    assert_eq!(
        format!("{:?}", october_in_turn.discrepancies),
        format!("{:?}", october.discrepancies)
    );
    assert_eq!(format!("{:?}", october_in_turn.seals), format!("{:?}", october.seals));
    drop(held);
    let september = audit_of(&db.pool, Some("2026-09".parse().unwrap())).await.unwrap();
    assert!(september.discrepancies.is_empty(), "{:#?}", september.discrepancies);
    assert!(september.seals.len() == 1 && september.seals[0].holds());
    // A month's audit plans for index lookups in its own transaction only:
    // no pooled connection keeps those settings for whoever takes it next.
    let mut held = Vec::new();
    for _ in 0..db.pool.size() {
        let mut conn = db.pool.acquire().await.unwrap();
        let kept: bool = sqlx::query_scalar(
            "SELECT bool_and(setting = reset_val) FROM pg_settings
              WHERE name IN ('random_page_cost', 'enable_hashjoin')",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        assert!(
            kept,
            "a pooled connection kept the month audit's random_page_cost or enable_hashjoin"
        );
        held.push(conn);
    }
    drop(held);
    // (Not clean all the same: the guards were switched off and on again,
    // which leaves them enabled as ORIGIN, not ALWAYS; every audit says so.)
    assert!(!september.definitions.is_empty());
    let o = db.cli(&["audit", "--month", "2026-09"]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(stdout(&o).starts_with("audit of 2026-09: "), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("every charge recomputed in SQL matches the ledger")
            && stdout(&o).contains("1 closed month(s): every seal holds"),
        "{}",
        stdout(&o)
    );
    let o = db.cli(&["audit", "--month", "2026-10", "--format", "json"]);
    assert_eq!(o.status.code(), Some(5));
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["month"], "2026-10");
    let o = db.cli(&["audit", "--month", "2026-11"]);
    assert!(
        stdout(&o).contains("2026-11 is not closed: no seal yet"),
        "{}",
        stdout(&o)
    );
}

/// The audit's two parts, read on two connections, see one snapshot: what
/// commits after the first began is in neither.
#[tokio::test]
async fn an_audits_two_parts_read_one_snapshot() {
    use hpc_ledger::db::{begin_exported_snapshot, begin_in_snapshot};
    let db = october().await;
    let entries = "SELECT count(*) FROM ledger_entry";
    let (mut c1, mut c2) = (db.pool.acquire().await.unwrap(), db.pool.acquire().await.unwrap());
    let (mut first, id) = begin_exported_snapshot(&mut c1).await.unwrap();
    let before: i64 = sqlx::query_scalar(entries).fetch_one(&mut *first).await.unwrap();
    adjust(
        &db.pool,
        "PZS0708",
        "-10.00".parse().unwrap(),
        &why("posted while the audit reads"),
        Utc::now(),
    )
    .await
    .unwrap();
    let mut second = begin_in_snapshot(&mut c2, &id).await.unwrap();
    let (in_first, in_second, after): (i64, i64, i64) = (
        sqlx::query_scalar(entries).fetch_one(&mut *first).await.unwrap(),
        sqlx::query_scalar(entries).fetch_one(&mut *second).await.unwrap(),
        sqlx::query_scalar(entries).fetch_one(&db.pool).await.unwrap(),
    );
    assert_eq!((in_first, in_second, after), (before, before, before + 1));
    // Both read only.
    let refused = sqlx::query("DELETE FROM closed_period")
        .execute(&mut *second)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("read-only transaction"), "{refused}");
    drop((first, second));
    // An id is only what pg_export_snapshot gives: nothing else reaches
    // the statement it is written into.
    let e = begin_in_snapshot(&mut c2, "0'; DROP TABLE ledger_entry; --")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a snapshot id"), "{e}");
    // An id no transaction exported is refused by the server, and the
    // connection goes back to its pool usable (out of the failed
    // transaction): a pool of one, so the next query takes the same one.
    let one = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    {
        let mut c = one.acquire().await.unwrap();
        let e = begin_in_snapshot(&mut c, "00000003-00000002-1").await.unwrap_err();
        assert!(e.to_string().contains("snapshot"), "{e}");
        // Usable on the spot, too.
        let n: i64 = sqlx::query_scalar(entries).fetch_one(&mut *c).await.unwrap();
        assert_eq!(n, after);
    }
    let n: i64 = sqlx::query_scalar(entries).fetch_one(&one).await.unwrap();
    assert_eq!(n, after);
    // The audit of the whole ledger, read so, is clean.
    let report = audit(&db.pool).await.unwrap();
    assert!(report.clean(), "{:#?}", report.discrepancies);
}

/// When one of two reads side by side fails (as an audit's part may: a
/// statement timeout, a standby's recovery conflict), the other's statement
/// is cancelled on the server, not left running to its end with its
/// connection and snapshot held. Both succeeding, both results. A cancel
/// reaches only the transaction it names: one that has ended is not
/// cancelled.
#[tokio::test]
async fn a_read_that_fails_cancels_the_one_beside_it() {
    use hpc_ledger::db::{Backend, backend_of, both_or_cancel, cancel_backend};
    use sqlx::Connection;
    use std::time::Duration;
    let db = october().await;
    let options = db.pool.connect_options();
    // A process's state once it has settled: a cancelled statement's
    // reports its failed transaction a moment after the error reached us.
    let settled = async |backend: Backend| -> String {
        let mut state = String::new();
        for _ in 0..100 {
            state = sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
                .bind(backend.pid)
                .fetch_one(&db.pool)
                .await
                .unwrap();
            if state != "active" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        state
    };
    for a_fails in [true, false] {
        let (mut ca, mut cb) = (db.pool.acquire().await.unwrap(), db.pool.acquire().await.unwrap());
        let (mut ta, mut tb) = (ca.begin().await.unwrap(), cb.begin().await.unwrap());
        let (backend_a, backend_b) = (backend_of(&mut ta).await.unwrap(), backend_of(&mut tb).await.unwrap());
        assert_ne!(backend_a.pid, backend_b.pid);
        let failing = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Err::<(), _>(sqlx::Error::Protocol("planted".into()))
        };
        // The other side runs a minute's statement in its transaction.
        let (ended, long) = if a_fails {
            let long = async { sqlx::query("SELECT pg_sleep(60)").execute(&mut *tb).await.map(|_| ()) };
            let both = both_or_cancel(&options, (backend_a, failing), (backend_b, long));
            (tokio::time::timeout(Duration::from_secs(30), both).await, backend_b)
        } else {
            let long = async { sqlx::query("SELECT pg_sleep(60)").execute(&mut *ta).await.map(|_| ()) };
            let both = both_or_cancel(&options, (backend_a, long), (backend_b, failing));
            (tokio::time::timeout(Duration::from_secs(30), both).await, backend_a)
        };
        let e = ended
            .expect("the other statement is cancelled, not awaited for its minute")
            .unwrap_err();
        assert!(e.to_string().contains("planted"), "{e}");
        assert_eq!(settled(long).await, "idle in transaction (aborted)");
    }
    let (mut ca, mut cb) = (db.pool.acquire().await.unwrap(), db.pool.acquire().await.unwrap());
    let (mut ta, mut tb) = (ca.begin().await.unwrap(), cb.begin().await.unwrap());
    let (backend_a, backend_b) = (backend_of(&mut ta).await.unwrap(), backend_of(&mut tb).await.unwrap());
    let both = both_or_cancel(
        &options,
        (backend_a, async { Ok::<_, sqlx::Error>(1) }),
        (backend_b, async { Ok(2) }),
    )
    .await
    .unwrap();
    assert_eq!(both, (1, 2));
    // The same process in its next transaction is not the one named.
    ta.rollback().await.unwrap();
    let mut ta = ca.begin().await.unwrap();
    let next = backend_of(&mut ta).await.unwrap();
    assert_eq!(next.pid, backend_a.pid);
    assert!(!cancel_backend(&options, backend_a).await);
    assert!(cancel_backend(&options, next).await);
}

#[tokio::test]
async fn the_auditor_role_reads_the_audit_views_and_changes_nothing() {
    let db = october().await;
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET ROLE hpc_ledger_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM audit.job_charges")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    // 19 sample jobs, and a GPU-hours line for each of the 4 GPU jobs among them.
    assert_eq!(n, 23, "every job charge of the sample jobs");
    let d: i64 = sqlx::query_scalar("SELECT count(*) FROM audit.discrepancies")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(d, 0);
    for sql in [
        "INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, author, reason) VALUES ('2026-11-01', 1, 'adjustment', 1, 1, 1, 1, 'a', 'r')",
        "UPDATE project SET name = 'x'",
        "SELECT count(*) FROM ledger_entry",
        "DELETE FROM rejected_record",
        "CREATE TABLE audit.mine (x int)",
    ] {
        let e = sqlx::raw_sql(sql).execute(&mut *conn).await.unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{sql}: {e}");
    }
    sqlx::raw_sql("RESET ROLE").execute(&mut *conn).await.unwrap();
}

#[tokio::test]
async fn statements_and_month_end_from_the_command_line() {
    let db = october().await;
    let out = ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-10"]));
    assert!(out.contains("STATEMENT — 2026-10 — PROVISIONAL"), "{out}");
    assert!(
        out.contains("Project PAS1234 — Computational Chemistry Lab (PI: Dr. Ada Lovelace)"),
        "{out}"
    );
    let o = db.cli(&[
        "refund",
        "--cluster",
        "owens",
        "--job-id",
        "1002",
        "--fraction",
        "0.25",
        "--reason",
        "slow disk",
        "--author",
        "billing",
    ]);
    // 30 core-hours × 0.25 = 7.5 × 0.012 = 0.09.
    assert!(ok(&o).contains("refund  entry "), "{}", stdout(&o));
    assert!(stdout(&o).trim_end().ends_with("total -0.09"), "{}", stdout(&o));
    let o = db.cli(&["adjust", "--project", "PAS1234", "--amount", "-1.234", "--reason", "x"]);
    assert!(stderr(&o).contains("at most 2 decimal places"), "{}", stderr(&o));
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    let out = ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-10"]));
    assert!(out.contains("— 2026-10 — final (closed "), "{out}");
    // Issue 20, item 8: six owens jobs of 33.666666666667 core-hours at 0.012
    // are 0.404 rounded once, but each job is rounded by itself: 0.41, said
    // in a footnote.
    assert!(
        out.contains("  owens    regular    core-hours     6  33.666666666667   0.012  0.41 *\n"),
        "{out}"
    );
    assert!(
        out.contains("  * each job's amount is computed from its exact quantity and rounded to the cent by itself"),
        "{out}"
    );
    assert!(out.contains("slow disk"), "{out}");
    // Every project at once: one CSV, and files in a directory.
    let csv = ok(&db.cli(&["statement", "--all", "--month", "2026-10", "--format", "csv"]));
    let header = csv.lines().next().unwrap();
    assert_eq!(
        header,
        "project,month,status,number,section,cluster,node_type,metric,description,jobs,quantity,rate,amount"
    );
    assert!(csv.lines().all(|l| l.matches(',').count() >= 12), "{csv}");
    let totals: Vec<&str> = csv.lines().filter(|l| l.contains(",total,")).collect();
    assert_eq!(totals.len(), 4, "{csv}");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("statements-{}", db.name));
    let out = ok(&db.cli(&[
        "statement",
        "--all",
        "--month",
        "2026-10",
        "--out",
        dir.to_str().unwrap(),
    ]));
    assert!(out.starts_with("4 statement(s) for 2026-10 written to"), "{out}");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "2026-10-PAA0042.txt",
            "2026-10-PAS1234.txt",
            "2026-10-PDE0001.txt",
            "2026-10-PZS0708.txt"
        ]
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
        "statement",
        "--project",
        "PDE0001",
        "--month",
        "2026-10",
        "--format",
        "json",
    ])))
    .unwrap();
    assert_eq!(json["status"], "final");
    // PDE0001: owens 1005 0.48 + 2.40; pitzer 5003 0.09 + 0.50; owens 2004 5.60 + 8.00.
    assert_eq!(json["total"], "17.07");
    let out = ok(&db.cli(&["verify", "--month", "2026-10"]));
    assert!(out.starts_with("2026-10: seal holds"), "{out}");
    // A month not closed has no seal: said so, and not a success.
    let o = db.cli(&["verify", "--month", "2026-11"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("2026-11 is not closed: it has no seal to verify"),
        "{}",
        stderr(&o)
    );
    // Clean; the sample's one rejected record is listed, not a finding.
    let audit = ok(&db.cli(&["audit"]));
    assert!(
        audit.starts_with(
            "every charge recomputed in SQL matches the ledger\nrejections: 1 open, not charged (the oldest first seen "
        ),
        "{audit}"
    );
    assert!(audit.ends_with("\n10 closed month(s): every seal holds\n"), "{audit}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Each check of `audit.discrepancies`, tripped once by an edit made behind
/// the ledger's back (a superuser with the guards disabled).
#[tokio::test]
async fn every_kind_of_tampering_is_its_own_finding() {
    let db = october().await;
    assert!(audit(&db.pool).await.unwrap().clean());
    let id = |sql: &'static str| {
        let pool = db.pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap() }
    };
    let job_entry = |job: &'static str, metric: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT e.id FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
                  WHERE j.scheduler_job_id = $1 AND e.metric = $2",
            )
            .bind(job)
            .bind(metric)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let rate = job_entry("1002", "core_hours").await;
    let period = job_entry("1003", "core_hours").await;
    let project = job_entry("1004", "core_hours").await;
    let card = job_entry("1005", "core_hours").await;
    let gpu = id("SELECT e.id FROM ledger_entry e WHERE e.metric = 'gpu_hours' ORDER BY e.id LIMIT 1").await;
    let gpu_record = id("SELECT job_record_id FROM ledger_entry WHERE metric = 'gpu_hours' ORDER BY id LIMIT 1").await;
    let storage = id("SELECT e.id FROM ledger_entry e JOIN project p ON p.id = e.project_id
                       WHERE e.kind = 'storage' AND p.code = 'PZS0708' AND e.period = '2026-09-01' ORDER BY e.id LIMIT 1")
    .await;
    let segment = id("SELECT e.id FROM ledger_entry e JOIN project p ON p.id = e.project_id
                       WHERE e.kind = 'storage' AND p.code = 'PAA0042' AND e.period = '2026-08-01' ORDER BY e.id LIMIT 1")
    .await;
    let missing = id("SELECT e.id FROM ledger_entry e JOIN project p ON p.id = e.project_id
                       WHERE e.kind = 'storage' AND p.code = 'PAS1234' AND e.period = '2026-07-01' ORDER BY e.id LIMIT 1")
    .await;
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ALL; ALTER TABLE storage_charge_segment DISABLE TRIGGER ALL;",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    for (sql, target) in [
        (
            "UPDATE ledger_entry SET unit_rate = 0.02, amount_exact = quantity * 0.02, amount = round(quantity * 0.02, 2) WHERE id = $1",
            rate,
        ),
        ("UPDATE ledger_entry SET period = '2026-08-01' WHERE id = $1", period),
        (
            "UPDATE ledger_entry SET project_id = (SELECT id FROM project WHERE code = 'PAA0042') WHERE id = $1",
            project,
        ),
        (
            "UPDATE ledger_entry SET rate_card_id = (SELECT id FROM rate_card WHERE valid_until IS NOT NULL LIMIT 1) WHERE id = $1",
            card,
        ),
        ("DELETE FROM ledger_entry WHERE id = $1", gpu),
        (
            "UPDATE ledger_entry SET quantity = quantity + 1, amount_exact = (quantity + 1) * unit_rate,
                 amount = round((quantity + 1) * unit_rate, 2) WHERE id = $1",
            storage,
        ),
        (
            "UPDATE storage_charge_segment SET quota_tb = quota_tb + 1 WHERE ledger_entry_id = $1",
            segment,
        ),
        ("DELETE FROM storage_charge_segment WHERE ledger_entry_id = $1", missing),
        ("DELETE FROM ledger_entry WHERE id = $1", missing),
    ] {
        sqlx::query(sql).bind(target).execute(&mut *conn).await.unwrap();
    }
    sqlx::raw_sql(
        "ALTER TABLE ledger_entry ENABLE TRIGGER ALL; ALTER TABLE storage_charge_segment ENABLE TRIGGER ALL;",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    let found: Vec<(Option<i64>, String, String, String, String)> = sqlx::query_as(
        "SELECT entry_id, field, project, coalesce(expected, ''), coalesce(recorded, '') FROM audit.discrepancies
          WHERE kind <> 'usage'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // The usage sums kept as the entries were posted are found to differ
    // too, in the projects whose entries were edited (the same edits seen
    // a second time, per project, month and user, cluster and card).
    let usage: Vec<(String,)> =
        sqlx::query_as("SELECT DISTINCT project FROM audit.discrepancies WHERE kind = 'usage' ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(!usage.is_empty() && usage.len() <= found.len(), "{usage:?}");
    for (p,) in &usage {
        assert!(
            found.iter().any(|f| &f.2 == p),
            "usage of {p} differs, yet none of its entries: {found:#?}"
        );
    }
    let has = |entry: Option<i64>, field: &str| found.iter().any(|f| f.0 == entry && f.1 == field);
    assert!(has(Some(rate), "unit_rate") && has(Some(rate), "amount"), "{found:#?}");
    assert!(has(Some(period), "period"), "{found:#?}");
    assert!(has(Some(project), "project"), "{found:#?}");
    assert!(has(Some(card), "rate_card"), "{found:#?}");
    assert!(
        found.contains(&(
            None,
            "entries".into(),
            found
                .iter()
                .find(|f| f.1 == "entries")
                .map(|f| f.2.clone())
                .unwrap_or_default(),
            "1 core_hours, 1 gpu_hours".into(),
            format!("1 core_hours, 0 gpu_hours for job record {gpu_record}")
        )),
        "{found:#?}"
    );
    assert!(
        has(Some(storage), "tb_months") && has(Some(storage), "amount"),
        "{found:#?}"
    );
    assert!(
        has(Some(segment), "segments") && !has(Some(segment), "tb_months"),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.1 == "missing storage charge" && f.2 == "PAS1234"),
        "{found:#?}"
    );
    // Nothing else: each edit is found where it was made.
    let touched = [rate, period, project, card, storage, segment];
    for f in &found {
        assert!(
            f.0.is_none_or(|e| touched.contains(&e)),
            "an untouched entry was reported: {f:?}"
        );
    }
    assert_eq!(found.iter().filter(|f| f.0.is_none()).count(), 2, "{found:#?}");
    // One month's audit finds exactly the whole audit's findings of that
    // month, for every month with findings (job, storage, statement and
    // usage findings in July to October).
    let whole = audit(&db.pool).await.unwrap().discrepancies;
    let months: std::collections::BTreeSet<_> = whole.iter().filter_map(|d| d.period).collect();
    assert!(months.len() >= 3, "{whole:#?}");
    for month in months {
        let mut want: Vec<String> = whole
            .iter()
            .filter(|d| d.period == Some(month))
            .map(|d| format!("{d:?}"))
            .collect();
        let of_month = audit_of(&db.pool, Some(Month::of_date(month))).await.unwrap();
        let mut got: Vec<String> = of_month.discrepancies.iter().map(|d| format!("{d:?}")).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{month}");
    }
}

/// A scan, in EXPLAIN's JSON, of a table that grows with the ledger.
#[derive(Debug)]
struct Scan {
    table: String,
    node: String,
    index: Option<String>,
    /// Its index or recheck condition (what bounds the rows it reads).
    cond: Option<String>,
    filter: Option<String>,
}

/// A charging record charged twice, or not at all, is found by the check
/// that counts each record's charges (migration 0046: counted as the
/// records are joined to their charges, in key order).
#[tokio::test]
async fn a_record_charged_twice_or_not_at_all_is_found() {
    let db = october().await;
    assert!(audit(&db.pool).await.unwrap().clean());
    let cpu_only: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT r.id, e.id FROM job_record r JOIN ledger_entry e ON e.job_record_id = r.id AND e.kind = 'job'
          WHERE r.gpus = 0 AND r.kind = 'original'
            AND NOT EXISTS (SELECT 1 FROM ledger_entry d WHERE d.corrects_id = e.id)
          ORDER BY r.id LIMIT 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let [(twice, twice_entry), (none, none_entry)] = cpu_only[..] else {
        panic!("two records charged for cores only: {cpu_only:?}")
    };
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("ALTER TABLE ledger_entry DISABLE TRIGGER ALL")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate,
                                   amount_exact, amount, late, author, charging_rules, seal_digest)
         SELECT period, project_id, kind, metric, job_record_id, rate_card_id, quantity, unit_rate, amount_exact,
                amount, late, author, charging_rules, seal_digest
           FROM ledger_entry WHERE id = $1",
    )
    .bind(twice_entry)
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query("DELETE FROM ledger_entry WHERE id = $1")
        .bind(none_entry)
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("ALTER TABLE ledger_entry ENABLE TRIGGER ALL")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let found: Vec<(Option<i64>, String, String)> = sqlx::query_as(
        "SELECT entry_id, expected, recorded FROM audit.discrepancies WHERE field = 'entries' ORDER BY recorded",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        found,
        [
            (
                None,
                "1 core_hours, 0 gpu_hours".to_owned(),
                format!("0 core_hours, 0 gpu_hours for job record {none}")
            ),
            (
                None,
                "1 core_hours, 0 gpu_hours".to_owned(),
                format!("2 core_hours, 0 gpu_hours for job record {twice}")
            ),
        ]
    );
    // The audit reads them in its second part (kind `job`, but no entry):
    // its report is the view's, read in one statement.
    let report = audit(&db.pool).await.unwrap();
    assert_eq!(
        report.discrepancies_by_field.get("job entries"),
        Some(&2),
        "{report:#?}"
    );
    let mut conn = db.pool.acquire().await.unwrap();
    let whole = hpc_ledger::db::audit::discrepancies(&mut conn, hpc_ledger::db::audit::KEPT)
        .await
        .unwrap();
    assert_eq!(format!("{:?}", whole.kept), format!("{:?}", report.discrepancies));
}

/// Every node of a plan in EXPLAIN's JSON (its subplans included), the
/// plan's own first.
fn plan_nodes<'a>(plan: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
    out.push(plan);
    for child in plan.get("Plans").and_then(|p| p.as_array()).into_iter().flatten() {
        plan_nodes(child, out);
    }
}

fn ledger_scans(plan: &serde_json::Value) -> Vec<Scan> {
    // (Job records and runs are joined by key from the month's charges;
    // whether they are looked up or hashed is the next test's.)
    const GROWING: [&str; 5] = [
        "ledger_entry",
        "ledger_usage",
        "ledger_draw",
        "statement",
        "storage_charge_segment",
    ];
    let mut nodes = Vec::new();
    plan_nodes(plan, &mut nodes);
    let mut out = Vec::new();
    for node in nodes {
        let text = |key: &str| node.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        if let Some(table) = text("Relation Name")
            && GROWING.contains(&table.as_str())
        {
            out.push(Scan {
                table,
                node: text("Node Type").unwrap(),
                index: text("Index Name"),
                cond: text("Index Cond").or_else(|| text("Recheck Cond")),
                filter: text("Filter"),
            });
        }
    }
    out
}

#[tokio::test]
async fn one_months_audit_reads_that_month_and_what_it_points_to() {
    let db = october().await;
    close_through_october(&db.pool).await;
    let mut conn = db.pool.acquire().await.unwrap();
    // Where an index could serve, take it: a scan left without a condition
    // means the month did not reach that table.
    sqlx::raw_sql("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    for (view, month) in [
        ("audit.discrepancies", "2026-09-01"),
        ("audit.month_seals", "2026-10-01"),
    ] {
        let plan: serde_json::Value = sqlx::query_scalar(&format!(
            "EXPLAIN (FORMAT JSON) SELECT * FROM {view} WHERE period = '{month}'"
        ))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        let scans = ledger_scans(&plan[0]["Plan"]);
        // Each scan is bounded: by the month, or by the key of a row the
        // month's rows point to (a corrected entry), or it reads a partial
        // index of corrections and discount lines (a probe whether any
        // exist, or the corrections a month's
        // charges are joined with: their number, not the ledger's). Whole
        // index scans without either, like a sequential scan, mean the
        // month did not reach that table.
        for scan in &scans {
            let month = [&scan.cond, &scan.filter]
                .iter()
                .any(|c| c.as_deref().is_some_and(|c| c.contains("period")));
            let key = scan.cond.is_some();
            let corrections = scan.table == "ledger_entry"
                && matches!(
                    scan.index.as_deref(),
                    Some(
                        "ledger_entry_one_discount" | "ledger_entry_one_reversal" | "ledger_entry_project_corrections"
                    )
                );
            assert!(
                scan.node != "Seq Scan" && (month || key || corrections),
                "{view}: {scan:?} is not bounded by the month: {scans:#?}"
            );
        }
        let by_month = scans
            .iter()
            .filter(|s| s.table == "ledger_entry" && s.cond.as_deref().is_some_and(|c| c.contains("period")))
            .count();
        assert!(by_month >= 2, "{view}: {scans:#?}");
    }
    // The month's seal, from the seal recorded for the month before: the
    // same as the whole chain's for every month while nothing is changed.
    let chain = verify(&db.pool, None).await.unwrap();
    assert_eq!(chain.len(), 10);
    for c in &chain {
        let one = verify(&db.pool, Some(Month::of_date(c.period))).await.unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            (&one[0].recomputed_seal, one[0].holds()),
            (&c.recomputed_seal, true),
            "{}",
            c.period
        );
    }
}

/// A final statement reprinted after its project's PI and name changed
/// reads as it was issued (migration 0069); an open month's shows today's.
#[tokio::test]
async fn a_final_statement_keeps_the_name_and_pi_it_was_issued_with() {
    let db = october().await;
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    let dir = std::env::temp_dir().join(format!("hl-header-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("center.toml");
    let changed = crate::harness::EXAMPLE
        .replace("Dr. Ada Lovelace", "Dr. Grace Hopper")
        .replace("Computational Chemistry Lab", "Quantum Chemistry Lab")
        .replace(
            "name = \"Example State University Research Computing\"",
            "name = \"Example State University Advanced Research Computing\"",
        );
    assert_ne!(changed, crate::harness::EXAMPLE);
    std::fs::write(&config, changed).unwrap();
    ok(&db.cli(&["config", "apply", config.to_str().unwrap()]));
    let header = |month: &str| {
        let s: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
            "statement",
            "--project",
            "PAS1234",
            "--month",
            month,
            "--format",
            "json",
        ])))
        .unwrap();
        (
            s["project"]["name"].as_str().unwrap_or_default().to_owned(),
            s["project"]["pi"].as_str().unwrap_or_default().to_owned(),
            s["center"].as_str().unwrap_or_default().to_owned(),
            s["number"].is_i64(),
        )
    };
    assert_eq!(
        header("2026-10"),
        (
            "Computational Chemistry Lab".into(),
            "Dr. Ada Lovelace".into(),
            "Example State University Research Computing".into(),
            true
        ),
        "the final statement as issued"
    );
    assert_eq!(
        header("2026-11"),
        (
            "Quantum Chemistry Lab".into(),
            "Dr. Grace Hopper".into(),
            "Example State University Advanced Research Computing".into(),
            false
        ),
        "an open month's, as the project and the center are now"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A close whose connection is cut (an administrator's
/// `pg_terminate_backend`, a restart, a failover) stops saying to run it
/// again, and run again it closes the month.
#[tokio::test(flavor = "multi_thread")]
async fn a_close_whose_connection_is_cut_says_to_run_it_again() {
    let db = october().await;
    // The close waits behind this lock until its connection is cut.
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE closed_period IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let url = db.url.clone();
    let close = std::thread::spawn(move || {
        crate::harness::cli_with_env(
            &["close", "--through", "2026-10", "--author", "billing"],
            &[("DATABASE_URL", url.as_str())],
            None,
        )
    });
    let mut cut = 0;
    for _ in 0..300 {
        cut = sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()) t",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if cut > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(cut, 1, "the close waited on the lock");
    lock.rollback().await.unwrap();
    let o = close.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "hint: the database connection was lost or the server is restarting; what was done before stays done: \
             run the same command again once the database answers"
        ),
        "{}",
        stderr(&o)
    );
    assert!(
        ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"])).contains("2026-10 closed by billing")
    );
}

#[tokio::test]
async fn the_same_correction_twice_is_refused_unless_asked_and_a_key_posts_once() {
    // Issue 20, item 3: `refund --fraction 0.5` run twice refunded 100 %.
    let db = october().await;
    let refund_half = |extra: &[&str]| {
        let mut args = vec![
            "refund",
            "--cluster",
            "owens",
            "--job-id",
            "1004",
            "--fraction",
            "0.5",
            "--reason",
            "node failure",
        ];
        args.extend_from_slice(extra);
        db.cli(&args)
    };
    let first = ok(&refund_half(&[]));
    // The entry ids posted are printed.
    let id: i64 = sqlx::query_scalar("SELECT max(id) FROM ledger_entry WHERE kind = 'refund'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        first.lines().nth(2).unwrap().trim_start().starts_with(&id.to_string()),
        "{first}"
    );
    let o = refund_half(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("an identical refund was posted into ")
            && stderr(&o).contains(&format!("(entry {id}): pass --again to post another")),
        "{}",
        stderr(&o)
    );
    // A different reason, or --again, is another refund.
    ok(&refund_half(&["--again"]));
    let refunds = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM ledger_entry WHERE kind = 'refund'")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(refunds().await, 2);

    // With an idempotency key, a retried script posts once and is shown
    // what it posted.
    let adjust = |key: &str, amount: &str| {
        db.cli(&[
            "adjust",
            "--project",
            "PZS0708",
            "--amount",
            amount,
            "--reason",
            "award credit",
            "--idempotency-key",
            key,
        ])
    };
    let first = ok(&adjust("award-2026-11", "-10.00"));
    let again = ok(&adjust("award-2026-11", "-10.00"));
    assert!(
        again.starts_with("already posted with idempotency key \"award-2026-11\"; nothing new posted:"),
        "{again}"
    );
    assert_eq!(first.lines().nth(2), again.lines().nth(3), "{first}\n{again}");
    let adjustments: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry WHERE kind = 'adjustment'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(adjustments, 1);
    // The same key for something else is refused.
    let o = adjust("award-2026-11", "-20.00");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("idempotency key \"award-2026-11\" was used on ")
            && stderr(&o).contains("for a different correction"),
        "{}",
        stderr(&o)
    );
    // Without a key, the same adjustment again is refused too.
    let o = db.cli(&[
        "adjust",
        "--project",
        "PZS0708",
        "--amount",
        "-10.00",
        "--reason",
        "award credit",
    ]);
    assert!(
        stderr(&o).contains("an identical adjustment was posted into "),
        "{}",
        stderr(&o)
    );
    // Its month closed meanwhile (a script killed after it posted, retried
    // after the close): the retry, whose month is now the next, is refused
    // too, not a second credit; naming another month is another adjustment.
    let month: String =
        sqlx::query_scalar("SELECT to_char(period, 'YYYY-MM') FROM ledger_entry WHERE kind = 'adjustment'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    ok(&db.cli(&["bill", "storage", "--month", &month]));
    ok(&db.cli(&["close", "--through", &month, "--author", "billing"]));
    let credit = |extra: &[&str]| {
        let mut args = vec![
            "adjust",
            "--project",
            "PZS0708",
            "--amount",
            "-10.00",
            "--reason",
            "award credit",
        ];
        args.extend_from_slice(extra);
        db.cli(&args)
    };
    let o = credit(&[]);
    assert!(
        stderr(&o).contains("an identical adjustment was posted into "),
        "{}",
        stderr(&o)
    );
    let next = month.parse::<Month>().unwrap().next().to_string();
    ok(&credit(&["--month", &next]));
    let periods: Vec<String> =
        sqlx::query_scalar("SELECT to_char(period, 'YYYY-MM') FROM ledger_entry WHERE kind = 'adjustment' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(periods, [month.clone(), next]);
    // A key is kept even for a reversal whose target is gone by the time the
    // script retries: the retry shows the reversal, not "already reversed".
    let rev = |key: &str| {
        db.cli(&[
            "reverse",
            "--cluster",
            "owens",
            "--job-id",
            "1002",
            "--reason",
            "duplicate",
            "--idempotency-key",
            key,
        ])
    };
    ok(&rev("rev-1002"));
    assert!(ok(&rev("rev-1002")).starts_with("already posted"), "retry");
    let o = rev("rev-1002-b");
    assert!(stderr(&o).contains("has no charges left to correct"), "{}", stderr(&o));
    assert_eq!(
        ok(&db.cli(&["audit"])).lines().next(),
        Some("every charge recomputed in SQL matches the ledger")
    );
}

/// Issue 20, item 5: the first close may not make earlier storage
/// unbillable; a waiver is a recorded decision; month end runs in one pass.
#[tokio::test]
async fn a_close_never_makes_earlier_storage_unbillable() {
    let db = TestDb::with_example().await;
    // The example's quotas start in January; bill July alone and try to close it.
    ok(&db.cli(&["bill", "storage", "--month", "2026-07", "--author", "billing"]));
    let o = db.cli(&["close", "--month", "2026-07"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(
            "cannot close 2026-07: storage for 2026-01, 2026-02, 2026-03, 2026-04, 2026-05 and 2026-06 had quotas \
             but was never billed, and closing 2026-07 would make it unbillable: bill it \
             (`hpc-ledger bill storage --through 2026-06`) or waive a month with its reason \
             (`hpc-ledger bill storage --month 2026-01 --waive REASON`)"
        ),
        "{}",
        stderr(&o)
    );
    // The database refuses it too, whoever inserts the month.
    let e = sqlx::query("INSERT INTO closed_period (period, closed_by) VALUES ('2026-07-01', 'x')")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "storage for 2026-01, 2026-02, 2026-03, 2026-04, 2026-05, 2026-06 had quotas but was never billed"
        ),
        "{e}"
    );

    // A waiver: recorded once, with its reason; not for a billed or unfinished month.
    let out = ok(&db.cli(&[
        "bill",
        "storage",
        "--month",
        "2026-01",
        "--waive",
        "free during the pilot",
        "--author",
        "ops",
    ]));
    assert!(
        out.starts_with("storage for 2026-01 waived (") && out.contains(" by ops): free during the pilot"),
        "{out}"
    );
    let out = ok(&db.cli(&["bill", "storage", "--month", "2026-01", "--waive", "again"]));
    assert!(
        out.contains("storage for 2026-01 was already waived") && out.contains("free during the pilot"),
        "{out}"
    );
    let o = db.cli(&["bill", "storage", "--month", "2026-07", "--waive", "too late"]);
    assert!(
        stderr(&o).contains("storage for 2026-07 is billed (run "),
        "{}",
        stderr(&o)
    );
    let o = db.cli(&["bill", "storage", "--month", "2099-01", "--waive", "future"]);
    assert!(stderr(&o).contains("2099-01 is not over yet"), "{}", stderr(&o));
    let o = db.cli(&["bill", "storage", "--month", "2026-02", "--waive", "  "]);
    assert!(stderr(&o).contains("a waiver needs a reason"), "{}", stderr(&o));
    // A waived month is not billed, by the CLI or in SQL; the waiver is never changed.
    let out = ok(&db.cli(&["bill", "storage", "--month", "2026-01"]));
    assert!(
        out.contains("storage for 2026-01 was waived") && out.contains("nothing posted"),
        "{out}"
    );
    let e = sqlx::query(
        "INSERT INTO billing_run (kind, period, author, project_count, entry_count, total)
         VALUES ('storage', '2026-01-01', 'x', 0, 0, 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("storage for 2026-01 was waived: it cannot be billed"),
        "{e}"
    );
    let e = sqlx::query("UPDATE storage_waiver SET reason = 'changed'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("append-only") || e.to_string().contains("cannot"),
        "{e}"
    );

    // A provisional statement says whether its storage is billed yet.
    let out = ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-02"]));
    assert!(
        out.contains("storage for 2026-02 is not billed yet: this section changes when it is"),
        "{out}"
    );
    let out = ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-01"]));
    assert!(
        out.contains("storage for 2026-01 is not billed: waived (free during the pilot)"),
        "{out}"
    );
    let csv = ok(&db.cli(&[
        "statement",
        "--project",
        "PAS1234",
        "--month",
        "2026-02",
        "--format",
        "csv",
    ]));
    assert!(
        csv.contains("PAS1234,2026-02,provisional,,storage,,,,not billed yet,,,,\n"),
        "{csv}"
    );
    // One pass: every month through October, skipping what is billed or waived.
    let out = ok(&db.cli(&["bill", "storage", "--through", "2026-10", "--author", "billing"]));
    assert!(out.contains("storage for 2026-01 was waived"), "{out}");
    assert!(out.contains("storage for 2026-02 billed (run "), "{out}");
    assert!(out.contains("storage for 2026-07 was already billed"), "{out}");
    // Times in the center's zone, the zone shown (item 7).
    assert!(
        out.contains(" EST by billing") || out.contains(" EDT by billing"),
        "{out}"
    );
    assert!(out.contains("storage for 2026-10 billed (run "), "{out}");
    let runs: serde_json::Value = serde_json::from_str(&ok(&db.cli(&["bill", "runs", "--format", "json"]))).unwrap();
    let months: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["period"].as_str().unwrap())
        .collect();
    assert_eq!(
        months,
        [
            "2026-02-01",
            "2026-03-01",
            "2026-04-01",
            "2026-05-01",
            "2026-06-01",
            "2026-07-01",
            "2026-08-01",
            "2026-09-01",
            "2026-10-01"
        ]
    );
    assert_eq!(runs["waivers"][0]["reason"], "free during the pilot");
    assert_eq!(runs["waivers"][0]["author"], "ops");
    let csv = ok(&db.cli(&["bill", "runs", "--format", "csv"]));
    assert!(
        csv.starts_with("run,kind,month,run_at,by,projects,entries,total,reason\n"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 1 + 9 + 1, "{csv}");
    assert!(
        csv.contains(",storage waived,2026-01,") && csv.ends_with(",ops,0,0,0.00,free during the pilot\n"),
        "{csv}"
    );
    // February's bill is PAS1234's 10 TB and PAA0042's 2.5 TB at 5.00 for the whole month.
    let feb: Decimal = sqlx::query_scalar("SELECT total FROM billing_run WHERE period = '2026-02-01'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(feb, "62.50".parse::<Decimal>().unwrap());
    // Going past the months that are over stops at the first one that is not,
    // with the earlier ones reported.
    let o = db.cli(&["bill", "storage", "--through", "2099-12"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not over yet"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("storage for 2026-10 was already billed"),
        "{}",
        stdout(&o)
    );

    // Close through September: February (the first month with entries) on.
    let out = ok(&db.cli(&["close", "--through", "2026-09", "--author", "billing"]));
    assert!(!out.contains("2026-01 closed"), "{out}");
    assert!(
        out.starts_with("2026-02 closed by billing: 2 entries, total 62.50"),
        "{out}"
    );
    assert!(out.contains("2026-09 closed by billing"), "{out}");
    // The month-end steps run again after the close (cron, or by hand):
    // what is billed says so, as before the close (it was an error).
    for args in [["--through", "2026-09"], ["--month", "2026-09"], ["--month", "2026-01"]] {
        let mut all = vec!["bill", "storage"];
        all.extend(args);
        let out = ok(&db.cli(&all));
        let month = if args[1] == "2026-01" {
            "2026-01 was waived"
        } else {
            "2026-09 was already billed"
        };
        assert!(out.contains(&format!("storage for {month}")), "{args:?}: {out}");
    }
    let waivers: Vec<(chrono::NaiveDate, String)> = sqlx::query_as("SELECT period, reason FROM audit.storage_waivers")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(waivers.len(), 1);
    assert_eq!(waivers[0].1, "free during the pilot");
    // A final statement prints its number and the month's seal.
    let out = ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-02"]));
    let seal: String = sqlx::query_scalar("SELECT encode(seal, 'hex') FROM closed_period WHERE period = '2026-02-01'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(out.contains("STATEMENT No. 2 — 2026-02 — final (closed "), "{out}");
    assert!(
        out.contains(&format!("\nMonth seal (sha256-digests-v3): {seal}\n")),
        "{out}"
    );
    assert!(!out.contains("not billed"), "{out}");
    assert!(audit(&db.pool).await.unwrap().clean());
    // The same as CSV (item 7): a clean audit is its header alone.
    let csv = ok(&db.cli(&["audit", "--format", "csv"]));
    assert_eq!(csv, "finding,id,kind,month,project_or_job,field,expected,recorded\n");
    let csv = ok(&db.cli(&["verify", "--format", "csv"]));
    assert_eq!(csv.lines().count(), 1 + 8, "{csv}");
    assert!(
        csv.lines().skip(1).all(|l| l.split(',').nth(1) == Some("true")),
        "{csv}"
    );
    assert!(
        csv.contains(&format!("\n2026-02,true,2,2,62.50,62.50,{seal},{seal}\n")),
        "{csv}"
    );
    let csv = ok(&db.cli(&["quota", "show", "PAS1234", "--format", "csv"]));
    assert!(
        csv.starts_with("from,tb,recorded,by\n2026-01-01 00:00 EST,10,"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

/// A center starting its ledger in July waives the months before in one go.
#[tokio::test]
async fn the_months_before_the_ledger_are_waived_in_one_pass() {
    let db = TestDb::with_example().await;
    ok(&db.cli(&["bill", "storage", "--month", "2026-03"]));
    let out = ok(&db.cli(&[
        "bill",
        "storage",
        "--through",
        "2026-06",
        "--waive",
        "before the ledger started",
    ]));
    // March is billed and stays so; the other five are waived.
    assert_eq!(
        out,
        "storage for 2026-01 waived: before the ledger started\nstorage for 2026-02 waived: before the ledger started\n\
         storage for 2026-04 waived: before the ledger started\nstorage for 2026-05 waived: before the ledger started\n\
         storage for 2026-06 waived: before the ledger started\n"
    );
    let out = ok(&db.cli(&["bill", "storage", "--through", "2026-06", "--waive", "again"]));
    assert!(
        out.contains("storage for 2026-01 was already waived: before the ledger started"),
        "{out}"
    );
    ok(&db.cli(&["bill", "storage", "--through", "2026-10"]));
    let out = ok(&db.cli(&["close", "--through", "2026-10"]));
    assert!(out.starts_with("2026-03 closed by "), "{out}");
    assert!(out.contains("2026-10 closed by "), "{out}");
    let o = db.cli(&["bill", "storage", "--through", "2099-01", "--waive", "x"]);
    assert!(stderr(&o).contains("is not over yet"), "{}", stderr(&o));
}

/// `close --through` stops at the first month it cannot close, with the fix,
/// after closing the months before it.
#[tokio::test]
async fn close_through_stops_at_the_first_problem() {
    let db = TestDb::with_example().await;
    ok(&db.cli(&["bill", "storage", "--through", "2026-09"]));
    let o = db.cli(&["close", "--through", "2026-10"]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(out.starts_with("2026-01 closed by "), "{out}");
    assert!(out.contains("2026-09 closed by "), "{out}");
    assert!(!out.contains("2026-10 closed"), "{out}");
    assert!(
        stderr(&o).contains("stopped after 2026-09")
            && stderr(&o).contains(
                "storage for 2026-10 has not been billed: run `hpc-ledger bill storage --month 2026-10` first"
            ),
        "{}",
        stderr(&o)
    );
    // Again, once billed: the closed months are reported, October closes.
    ok(&db.cli(&["bill", "storage", "--month", "2026-10"]));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&db.cli(&["close", "--through", "2026-10", "--format", "json"]))).unwrap();
    let months = json["months"].as_array().unwrap();
    assert_eq!(months.len(), 1, "{json}");
    assert_eq!(months[0]["month"], "2026-10");
    assert_eq!(months[0]["closed_now"], true);
    assert!(json["stopped"].is_null());
}

/// The `data-amount` of the element that has `marker` (an id or a row's
/// start) in an HTML statement.
fn amount_after(html: &str, marker: &str) -> Decimal {
    let at = html.find(marker).unwrap_or_else(|| panic!("no {marker} in:\n{html}"));
    let rest = &html[at..];
    let from = rest.find("data-amount=\"").unwrap() + "data-amount=\"".len();
    let to = from + rest[from..].find('"').unwrap();
    rest[from..to].parse().unwrap()
}

#[tokio::test]
async fn statements_as_html_documents_carry_the_ledgers_numbers() {
    let db = october().await;
    // A correction, an adjustment and a budget, so every section is there.
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "owens",
        "--job-id",
        "1002",
        "--fraction",
        "0.25",
        "--reason",
        "slow disk",
    ]));
    ok(&db.cli(&[
        "adjust",
        "--project",
        "PAS1234",
        "--amount",
        "-1.50",
        "--month",
        "2026-10",
        "--reason",
        "goodwill <credit>",
    ]));
    ok(&db.cli(&[
        "alloc",
        "grant",
        "PAS1234",
        "500.00",
        "--from",
        "2026-07-01",
        "--reason",
        "award",
    ]));
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    let dir = std::env::temp_dir().join(format!("hl-html-{}", uuid::Uuid::new_v4().simple()));
    let d = dir.to_str().unwrap();
    let o = ok(&db.cli(&[
        "statement",
        "--all",
        "--month",
        "2026-10",
        "--format",
        "html",
        "--out",
        d,
    ]));
    assert!(o.contains("index.html lists them"), "{o}");
    let ledger: Vec<(String, Decimal)> = sqlx::query_as(
        "SELECT p.code, sum(e.amount) FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.period = '2026-10-01' GROUP BY p.code ORDER BY p.code",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(ledger.len() >= 3, "{ledger:?}");
    for (code, total) in &ledger {
        let html = std::fs::read_to_string(dir.join(format!("2026-10-{code}.html"))).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "{code}");
        // Self-contained: nothing fetched from anywhere.
        for external in ["<script", "<link", " src=", "href=\"http", "url("] {
            assert!(!html.contains(external), "{code} has {external}");
        }
        // The statement's total, the chart's and the users' are the ledger's.
        assert_eq!(amount_after(&html, "id=\"total\""), *total, "{code}: statement total");
        assert_eq!(amount_after(&html, "id=\"chart-total\""), *total, "{code}: chart total");
        let users = &html[html.find("<table id=\"users\">").unwrap()..];
        assert_eq!(amount_after(users, "<tfoot>"), *total, "{code}: by-user total");
        assert!(html.contains("Statement No. "), "{code}: final, numbered");
        assert!(html.contains("Month seal"), "{code}");
    }
    let pas = std::fs::read_to_string(dir.join("2026-10-PAS1234.html")).unwrap();
    assert!(pas.contains("Dr. Ada Lovelace"), "the PI");
    assert!(pas.contains("goodwill &lt;credit&gt;"), "a reason, escaped");
    assert!(!pas.contains("goodwill <credit>"));
    assert!(
        pas.contains("<h2>Budget</h2>") && pas.contains("every cluster"),
        "the budget section"
    );
    assert!(pas.contains("<svg class=\"chart\""), "the usage chart");
    // The index lists every statement and adds them up.
    let index = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let sum: Decimal = ledger.iter().map(|(_, t)| *t).sum();
    assert_eq!(amount_after(&index, "id=\"total\""), sum);
    for (code, _) in &ledger {
        assert!(
            index.contains(&format!("href=\"2026-10-{code}.html\"")),
            "{code} in the index"
        );
    }
    // One project's to stdout; --all needs a directory.
    let one = ok(&db.cli(&[
        "statement",
        "--project",
        "PZS0708",
        "--month",
        "2026-10",
        "--format",
        "html",
    ]));
    let pzs = ledger.iter().find(|(c, _)| c == "PZS0708").unwrap().1;
    assert_eq!(amount_after(&one, "id=\"total\""), pzs);
    let o = db.cli(&["statement", "--all", "--month", "2026-10", "--format", "html"]);
    assert!(stderr(&o).contains("needs --out DIR"), "{}", stderr(&o));
    // The same as PDF: the document says its total (its subject, and the
    // summary's line) and it is the ledger's.
    let pdfs = dir.join("pdf");
    ok(&db.cli(&[
        "statement",
        "--all",
        "--month",
        "2026-10",
        "--format",
        "pdf",
        "--out",
        pdfs.to_str().unwrap(),
    ]));
    for (code, total) in &ledger {
        let pdf = std::fs::read(pdfs.join(format!("2026-10-{code}.pdf"))).unwrap();
        assert!(pdf.starts_with(b"%PDF-"), "{code}");
        let text = String::from_utf8_lossy(&pdf);
        assert!(
            text.contains(&format!("{code} 2026-10 total {total:.2} USD")),
            "{code}: its subject"
        );
        let shown = hpc_ledger::document::money(*total);
        assert!(text.contains(&format!("({shown}) Tj")), "{code}: {shown} on the page");
        assert!(text.contains("(Total USD) Tj"), "{code}");
    }
    assert!(pdfs.join("index.html").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A month's audit joins its charges to their records and runs by lookups,
/// not by hashing tables that hold every month (`db::plan_for_few_rows`; at
/// 20.8M entries the hash of every run was half the month's audit), except
/// its storage charges, which hash again (`db::allow_hash_joins`: by lookups
/// each was compared with every project's recomputed sums), and the
/// settings end with the audit's transaction.
#[tokio::test]
async fn a_months_audit_joins_by_lookups_within_its_transaction() {
    let db = october().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let node_types = |plan: &serde_json::Value| -> Vec<String> {
        let mut nodes = Vec::new();
        plan_nodes(&plan[0]["Plan"], &mut nodes);
        nodes
            .iter()
            .map(|n| n["Node Type"].as_str().unwrap().to_owned())
            .collect()
    };
    let explain = "EXPLAIN (FORMAT JSON) SELECT * FROM audit.discrepancies WHERE period = DATE '2026-10-01'";
    // The two statements `audit --month` runs (db::audit::month_part).
    let rest = format!("{explain} AND kind IS DISTINCT FROM 'storage'");
    let storage = format!("{explain} AND kind = 'storage'");
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    let server: serde_json::Value = sqlx::query_scalar(explain).fetch_one(&mut *tx).await.unwrap();
    let server_storage: serde_json::Value = sqlx::query_scalar(&storage).fetch_one(&mut *tx).await.unwrap();
    hpc_ledger::db::plan_for_few_rows(&mut tx).await.unwrap();
    let month: serde_json::Value = sqlx::query_scalar(explain).fetch_one(&mut *tx).await.unwrap();
    let month_rest: serde_json::Value = sqlx::query_scalar(&rest).fetch_one(&mut *tx).await.unwrap();
    let month_storage: serde_json::Value = sqlx::query_scalar(&storage).fetch_one(&mut *tx).await.unwrap();
    hpc_ledger::db::allow_hash_joins(&mut tx).await.unwrap();
    let hashed_storage: serde_json::Value = sqlx::query_scalar(&storage).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let month_rest = node_types(&month_rest);
    assert!(
        !month_rest.iter().any(|t| t == "Hash Join") && month_rest.iter().any(|t| t == "Nested Loop"),
        "the month's findings but storage's, planned for lookups: {month_rest:?}"
    );
    let (server_storage, month_storage, hashed_storage) = (
        node_types(&server_storage),
        node_types(&month_storage),
        node_types(&hashed_storage),
    );
    assert!(
        server_storage.iter().any(|t| t == "Hash Join")
            && !month_storage.iter().any(|t| t == "Hash Join")
            && hashed_storage.iter().any(|t| t == "Hash Join"),
        "the storage findings hash their joins again: {server_storage:?} / {month_storage:?} / {hashed_storage:?}"
    );
    let (server, month) = (node_types(&server), node_types(&month));
    assert!(
        server.iter().any(|t| t == "Hash Join"),
        "the server's settings hash some join of the month's audit: {server:?}"
    );
    assert!(
        !month.iter().any(|t| t == "Hash Join"),
        "the month's audit planned for lookups hashes no join: {month:?}"
    );
    assert!(month.iter().any(|t| t == "Nested Loop"), "{month:?}");
    let after: String = sqlx::query_scalar("SHOW enable_hashjoin")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(after, "on", "the setting ended with the audit's transaction");
}

/// `verify` checks the months side by side, each from the seal recorded
/// for the month before, and gives what the chain's own view gives
/// (`audit.seals`, each month from the one recomputed before it): the same
/// while every month holds, and, once one is changed, that month and every
/// later one broken.
#[tokio::test]
async fn the_months_checked_side_by_side_are_the_chains_own_view() {
    let db = october().await;
    close_through_october(&db.pool).await;
    type Row = (
        chrono::NaiveDate,
        String,
        String,
        i64,
        i64,
        rust_decimal::Decimal,
        rust_decimal::Decimal,
        Option<String>,
    );
    let view = || async {
        sqlx::query_as::<_, Row>(
            "SELECT period, recorded_seal, recomputed_seal, recorded_entries, entries, recorded_total, total, archived_to
               FROM audit.seals ORDER BY period",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let rows = |checks: Vec<hpc_ledger::db::periods::SealCheck>| -> Vec<Row> {
        checks
            .into_iter()
            .map(|c| {
                (
                    c.period,
                    c.recorded_seal,
                    c.recomputed_seal,
                    c.recorded_entries,
                    c.entries,
                    c.recorded_total,
                    c.total,
                    c.archived_to,
                )
            })
            .collect()
    };
    let checks = verify(&db.pool, None).await.unwrap();
    assert!(checks.len() >= 3, "{checks:?}");
    assert!(checks.iter().all(|c| c.holds()));
    assert_eq!(rows(checks), view().await);
    // A month with charges before the last one, changed behind the
    // ledger's back.
    let (month, id): (chrono::NaiveDate, i64) = sqlx::query_as(
        "SELECT period, min(id) FROM ledger_entry WHERE period < '2026-10-01' GROUP BY period ORDER BY period LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql(&format!(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ALL;
         UPDATE ledger_entry SET reason = 'edited' WHERE id = {id};
         ALTER TABLE ledger_entry ENABLE TRIGGER ALL"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    let checks = verify(&db.pool, None).await.unwrap();
    let broken: Vec<chrono::NaiveDate> = checks.iter().filter(|c| !c.holds()).map(|c| c.period).collect();
    let from_it: Vec<chrono::NaiveDate> = checks.iter().map(|c| c.period).filter(|p| *p >= month).collect();
    assert!(from_it.len() >= 2, "{from_it:?}");
    assert_eq!(broken, from_it);
    assert_eq!(rows(checks), view().await);
    // The audit reports the same seals, also from a pool of one connection
    // (the months are checked before its own transaction takes it).
    let report = audit(&db.pool).await.unwrap();
    assert_eq!(rows(report.seals), view().await);
    let one = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(&db.url)
        .await
        .unwrap();
    let report = audit(&one).await.unwrap();
    assert_eq!(rows(report.seals), view().await);
    assert_eq!(rows(verify(&one, None).await.unwrap()), view().await);
}

/// A statement reads its dates in the center's time zone (New York): a
/// credit posted at 02:00 UTC on 1 November is dated 31 October, as the
/// billing office posted it. And a project with no entries in a closed
/// month has no statement: its statement of that month says so, not that
/// the month is open.
#[tokio::test]
async fn a_statement_dates_in_the_centers_zone_and_a_closed_month_without_entries_says_closed() {
    let db = october().await;
    close_through_october(&db.pool).await;
    // Posted at that instant: every entry is posted now (migration 0062),
    // so the trigger that stamps it is off for this insert.
    sqlx::raw_sql(
        "BEGIN;
         ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_seal_digest;
         INSERT INTO ledger_entry (period, project_id, kind, quantity, unit_rate, amount_exact, amount, reason,
                                   author, posted_at)
         SELECT DATE '2026-11-01', id, 'adjustment', 1, -5, -5, -5, 'outage credit', 'billing',
                TIMESTAMPTZ '2026-11-01 02:00:00+00'
           FROM project WHERE code = 'PZS0708';
         ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_seal_digest;
         COMMIT;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let st = ok(&db.cli(&["statement", "--project", "PZS0708", "--month", "2026-11"]));
    let line = st
        .lines()
        .find(|l| l.contains("outage credit"))
        .unwrap_or_else(|| panic!("{st}"));
    assert!(line.trim_start().starts_with("2026-10-31"), "{line}");
    let html = ok(&db.cli(&[
        "statement",
        "--project",
        "PZS0708",
        "--month",
        "2026-11",
        "--format",
        "html",
    ]));
    assert!(html.contains("<td class=\"d\">2026-10-31</td>"), "{html}");

    let none: String = sqlx::query_scalar(
        "SELECT code FROM project p WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e
                                                       WHERE e.project_id = p.id AND e.period = DATE '2026-10-01')
          ORDER BY code LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let st = ok(&db.cli(&["statement", "--project", &none, "--month", "2026-10"]));
    assert!(
        st.contains("— 2026-10 — CLOSED ") && st.contains("no statement was issued for this project"),
        "{st}"
    );
    assert!(!st.contains("PROVISIONAL"), "{st}");
    let json: serde_json::Value = serde_json::from_str(&ok(&db.cli(&[
        "statement",
        "--project",
        &none,
        "--month",
        "2026-10",
        "--format",
        "json",
    ])))
    .unwrap();
    assert_eq!(json["status"], "closed_without_statement", "{json}");
}

/// A closed month stays closed against writes made by hand (migration 0057;
/// a review reproduced each as a login of the ingest or billing role): no
/// write in another isolation than READ COMMITTED (a REPEATABLE READ
/// snapshot taken before a close posted into the month after it, breaking
/// its seal for good), no storage segment added to a closed month's charge
/// (its statement's TB-days changed, the seal holding), no close on a bare
/// billing run that charged a project with a quota nothing, no close while
/// posted jobs wait in `job_intake`.
#[tokio::test]
async fn a_closed_month_refuses_writes_made_by_hand() {
    let db = crate::harness::sample_billed_through("2026-10").await;
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    // Another isolation: refused before a row is looked at.
    for (table, column) in [
        ("ledger_entry", "period"),
        ("closed_period", "period"),
        ("storage_quota", "project_id"),
        ("storage_charge_segment", "ledger_entry_id"),
        ("billing_run", "period"),
    ] {
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await
            .unwrap();
        let e = sqlx::raw_sql(&format!(
            "INSERT INTO {table} ({column}) SELECT {column} FROM {table} WHERE false"
        ))
        .execute(&mut *tx)
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!("a write to {table} needs READ COMMITTED isolation")),
            "{table}: {e}"
        );
    }
    // A segment more for a storage charge of closed October.
    let (entry, first_day): (i64, chrono::NaiveDate) = sqlx::query_as(
        "SELECT e.id, max(s.last_day) + 1 FROM ledger_entry e JOIN storage_charge_segment s ON s.ledger_entry_id = e.id
          WHERE e.kind = 'storage' AND e.period = '2026-10-01' GROUP BY e.id ORDER BY e.id LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let e = sqlx::query(
        "INSERT INTO storage_charge_segment (ledger_entry_id, first_day, last_day, days, quota_tb, tb_month_price)
         VALUES ($1, $2, $2, 1, 500, 4.5)",
    )
    .bind(entry)
    .bind(first_day)
    .execute(&db.pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&format!(
            "segments of ledger entry {entry} would be added to 2026-10, which is closed"
        )),
        "{e}"
    );
    // November: posted jobs waiting in the intake, then a billing run that
    // charged nothing.
    sqlx::query("INSERT INTO job_intake (document, exact) VALUES ('{}', NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let close_november = || sqlx::raw_sql("INSERT INTO closed_period (period, closed_by) VALUES ('2026-11-01', 'x')");
    let e = close_november().execute(&db.pool).await.unwrap_err().to_string();
    assert!(
        e.contains("cannot close 2026-11: job_intake holds 1 posted job(s) not recorded yet"),
        "{e}"
    );
    sqlx::raw_sql("DELETE FROM job_intake").execute(&db.pool).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO billing_run (kind, period, author, project_count, entry_count, total)
         VALUES ('storage', '2026-11-01', 'x', 0, 0, 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let e = close_november().execute(&db.pool).await.unwrap_err().to_string();
    assert!(
        e.contains("cannot close 2026-11: its storage billing charged nothing to project"),
        "{e}"
    );
    let closed: i64 = sqlx::query_scalar("SELECT count(*) FROM closed_period WHERE period = '2026-11-01'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(closed, 0);
    assert!(verify(&db.pool, None).await.unwrap().iter().all(|c| c.holds()));
}

/// A month before the ledger's first closed month holds nothing and can
/// take nothing: its statement says so (it said PROVISIONAL, "the month is
/// open and may still change", and its storage "not billed yet").
#[tokio::test]
async fn a_month_before_the_ledgers_first_close_is_not_provisional() {
    let db = crate::harness::sample_billed_through("2026-11").await;
    crate::harness::ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    let first: chrono::NaiveDate = sqlx::query_scalar("SELECT min(period) FROM closed_period")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let before = Month::of_date(first).prev().to_string();
    let json = |month: &str| -> serde_json::Value {
        let out = crate::harness::ok(&db.cli(&[
            "statement",
            "--project",
            "PAS1234",
            "--month",
            month,
            "--format",
            "json",
        ]));
        serde_json::from_str(&out).unwrap()
    };
    let s = json(&before);
    assert_eq!(
        (&s["status"], &s["first_closed"], &s["storage_billing"]),
        (
            &"before_the_ledger".into(),
            &Month::of_date(first).to_string().into(),
            &"before_the_ledger".into()
        ),
        "{s:#}"
    );
    let text = crate::harness::ok(&db.cli(&["statement", "--project", "PAS1234", "--month", &before]));
    assert!(
        text.contains(&format!(
            "— CLOSED: before the ledger's first closed month, {}",
            Month::of_date(first)
        )),
        "{text}"
    );
    assert!(
        !text.contains("PROVISIONAL") && !text.contains("not billed yet"),
        "{text}"
    );
    // An open month is still provisional.
    assert_eq!(json("2026-11")["status"], "provisional");
}
