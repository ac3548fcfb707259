//! The finance journal (`export journal`): every statement's total debited
//! to its funding sources by share, to the cent, and credited to revenue
//! accounts by service; only closed, fully funded months; funding history
//! never contradicting an export; the audit re-deriving what was exported.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde_json::Value;

use crate::harness::{TestDb, ok, stderr};

fn dec(v: &Value) -> Decimal {
    v.as_str()
        .map(|s| s.parse().unwrap())
        .unwrap_or_else(|| v.to_string().parse().unwrap())
}

/// The example center with its sample jobs, storage billed through November.
async fn ledger() -> TestDb {
    crate::harness::sample_billed_through("2026-11").await
}

fn journal_json(db: &TestDb, month: &str, extra: &[&str]) -> Value {
    let mut args = vec!["export", "journal", "--month", month, "--format", "json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&db.cli(&args))).unwrap()
}

/// What each entry of a month is credited to, by an independent walk: the
/// root charge (through every `corrects_id`) decides the service; the most
/// specific revenue account of the example's set names it.
async fn expected_credits(db: &TestDb, month: &str) -> BTreeMap<(String, String), Decimal> {
    type Row = (String, String, Option<String>, Option<String>, Decimal);
    let rows: Vec<Row> = sqlx::query_as(
        "WITH RECURSIVE up AS (
             SELECT e.id AS entry, e.id AS at, e.corrects_id FROM ledger_entry e WHERE e.period = $1::date
             UNION ALL
             SELECT up.entry, o.id, o.corrects_id FROM up JOIN ledger_entry o ON o.id = up.corrects_id)
         SELECT p.code, r.kind, lower(c.name), n.name, e.amount
           FROM up JOIN ledger_entry r ON r.id = up.at AND up.corrects_id IS NULL
           JOIN ledger_entry e ON e.id = up.entry JOIN project p ON p.id = e.project_id
           LEFT JOIN job_record jr ON jr.id = r.job_record_id LEFT JOIN job j ON j.id = jr.job_id
           LEFT JOIN cluster c ON c.id = j.cluster_id LEFT JOIN node_type n ON n.id = jr.node_type_id",
    )
    .bind(format!("{month}-01"))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut out = BTreeMap::new();
    for (project, kind, cluster, node_type, amount) in rows {
        let service = match (kind.as_str(), cluster.as_deref(), node_type.as_deref()) {
            ("job", Some("owens"), Some("gpu")) => "node_type:owens/gpu".to_owned(),
            ("job", Some(c), _) => format!("cluster:{c}"),
            ("storage", _, _) => "storage".to_owned(),
            _ => "default".to_owned(),
        };
        *out.entry((project, service)).or_insert(Decimal::ZERO) += amount;
    }
    out.retain(|_, v| !v.is_zero());
    out
}

#[tokio::test]
async fn a_closed_months_journal_debits_funding_by_share_and_credits_revenue_by_service() {
    let db = ledger().await;
    // A credit on the three-way-funded project makes its total awkward to split.
    ok(&db.cli(&[
        "adjust",
        "--project",
        "PDE0001",
        "--amount",
        "-0.05",
        "--month",
        "2026-10",
        "--reason",
        "rounding goodwill",
    ]));
    let o = db.cli(&["export", "journal", "--month", "2026-10"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("2026-10 is not closed: a journal is exported from closed months only"),
        "{}",
        stderr(&o)
    );
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    let j = journal_json(&db, "2026-10", &["--dry-run"]);
    assert!(j["export_id"].is_null(), "a dry run is not logged");

    // The month's seal and statements, as closed.
    let (seal, numbers): (Vec<u8>, Vec<i64>) = sqlx::query_as(
        "SELECT c.seal, array_agg(s.number ORDER BY s.number) FROM closed_period c
           JOIN statement s ON s.period = c.period WHERE c.period = '2026-10-01' GROUP BY c.seal",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(j["seal"], hex::encode(seal));
    let listed: Vec<i64> = j["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["number"].as_i64().unwrap())
        .collect();
    assert_eq!(listed, numbers);

    // Per statement: funding lines add up to the ledger's total, cent for
    // cent, each within a cent of its exact share; revenue lines too.
    let ledger: Vec<(String, Decimal)> = sqlx::query_as(
        "SELECT p.code, sum(e.amount) FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.period = '2026-10-01' GROUP BY p.code HAVING sum(e.amount) <> 0 ORDER BY p.code",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(ledger.len() >= 4, "{ledger:?}");
    let lines = j["lines"].as_array().unwrap();
    let mut credits: BTreeMap<(String, String), Decimal> = BTreeMap::new();
    for (code, total) in &ledger {
        let mine: Vec<&Value> = lines.iter().filter(|l| l["project"] == code.as_str()).collect();
        let debits: Vec<&Value> = mine.iter().copied().filter(|l| !l["share"].is_null()).collect();
        assert!(!debits.is_empty(), "{code} has funding lines");
        let debit_sum: Decimal = debits.iter().map(|l| dec(&l["amount"])).sum();
        assert_eq!(debit_sum, *total, "{code}: funding lines add up to the statement");
        for l in &debits {
            let exact = *total * dec(&l["share"]) / Decimal::from(100);
            assert!(
                (dec(&l["amount"]) - exact).abs() < Decimal::new(1, 2),
                "{code}: {} is within a cent of {exact}",
                l["amount"]
            );
        }
        let credit_sum: Decimal = mine
            .iter()
            .filter(|l| l["share"].is_null())
            .map(|l| -dec(&l["amount"]))
            .sum();
        assert_eq!(credit_sum, *total, "{code}: revenue lines add up to the statement");
        for l in mine.iter().filter(|l| l["share"].is_null()) {
            credits.insert(
                (code.clone(), l["service"].as_str().unwrap().to_owned()),
                -dec(&l["amount"]),
            );
        }
    }
    assert_eq!(credits, expected_credits(&db, "2026-10").await);
    assert_eq!(dec(&j["debit_total"]), dec(&j["credit_total"]));

    // The three-way split: 33.3333 + 33.3333 + 33.3334 of a total whose
    // cents do not divide by three; the cents left over go to the largest
    // remainders, ties to the earlier line.
    let pde: Vec<Decimal> = lines
        .iter()
        .filter(|l| l["project"] == "PDE0001" && !l["share"].is_null())
        .map(|l| dec(&l["amount"]))
        .collect();
    let total = ledger.iter().find(|(c, _)| c == "PDE0001").unwrap().1;
    let cents = (total * Decimal::from(100)).trunc();
    let third = |share: &str| (cents * share.parse::<Decimal>().unwrap() / Decimal::from(100)).floor();
    let base = [third("33.3333"), third("33.3333"), third("33.3334")];
    assert_ne!(
        cents % Decimal::from(3),
        Decimal::ZERO,
        "the total {total} should not split evenly"
    );
    let mut expected = base;
    let mut left = cents - base.iter().sum::<Decimal>();
    let rem = |i: usize, share: &str| cents * share.parse::<Decimal>().unwrap() / Decimal::from(100) - base[i];
    let mut order: Vec<(Decimal, usize)> = vec![(rem(0, "33.3333"), 0), (rem(1, "33.3333"), 1), (rem(2, "33.3334"), 2)];
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in order {
        if left > Decimal::ZERO {
            expected[i] += Decimal::ONE;
            left -= Decimal::ONE;
        }
    }
    let expected: Vec<Decimal> = expected.iter().map(|c| c / Decimal::from(100)).collect();
    assert_eq!(pde, expected, "largest remainder of {total}");

    // The CSV follows the configured layout; the export is logged with the
    // database's digest of the lines.
    let dir = std::env::temp_dir().join(format!("hl-journal-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("journal.csv");
    // A file there before is replaced whole (written beside it, then renamed).
    std::fs::write(&file, "an older journal\n").unwrap();
    // ... and keeps its mode (finance's journal is not for every user).
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = db.cli(&[
        "export",
        "journal",
        "--month",
        "2026-10",
        "--out",
        file.to_str().unwrap(),
    ]);
    ok(&o);
    assert!(stderr(&o).contains("logged as export"), "{}", stderr(&o));
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["journal.csv"], "nothing left beside it");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
    // A file that cannot be written is not logged as exported.
    let o = db.cli(&[
        "export",
        "journal",
        "--month",
        "2026-10",
        "--out",
        dir.join("missing/journal.csv").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let csv = std::fs::read_to_string(&file).unwrap();
    let mut rows = csv.lines();
    assert_eq!(
        rows.next().unwrap(),
        "Ledger,Journal ID,Accounting Date,Line,Fund,Dept,Account,Project/Grant,Debit,Credit,Reference,Description"
    );
    let body: Vec<Vec<&str>> = rows.map(|r| r.split(',').collect()).collect();
    assert_eq!(body.len(), lines.len());
    let col = |r: &Vec<&str>, i: usize| -> Decimal { r[i].parse().unwrap_or(Decimal::ZERO) };
    let debit: Decimal = body.iter().map(|r| col(r, 8)).sum();
    let credit: Decimal = body.iter().map(|r| col(r, 9)).sum();
    // Credit lines of a negative sum (PDE0001's goodwill) are debits.
    assert_eq!(debit, dec(&j["debit_total"]));
    assert_eq!(debit, credit);
    assert!(body.iter().all(|r| r[0] == "ACTUALS" && r[2] == "2026-10-31"));
    let logged: (i64, i32, bool, String) = sqlx::query_as(
        "SELECT count(*), max(line_count), bool_and(digest_holds), max(encode(digest, 'hex')) FROM audit.journal_exports",
    )
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        logged,
        (1, lines.len() as i32, true, j["digest"].as_str().unwrap().to_owned()),
        "one export logged (dry runs are not), with the dry run's digest"
    );
    // A symbolic link stays one: the file it names is the one written.
    let link = dir.join("latest.csv");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    std::fs::write(&file, "older\n").unwrap();
    ok(&db.cli(&[
        "export",
        "journal",
        "--month",
        "2026-10",
        "--out",
        link.to_str().unwrap(),
    ]));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), csv);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_credit_month_reverses_the_sides_and_an_unfunded_statement_stops_the_export() {
    let db = ledger().await;
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    // November: PZS0708 is only credited (its storage waived by a credit
    // bigger than it), and a new project with a charge has no funding.
    ok(&db.cli(&[
        "adjust",
        "--project",
        "PZS0708",
        "--amount",
        "-400.00",
        "--month",
        "2026-11",
        "--reason",
        "outage credit",
    ]));
    let mut cfg = crate::harness::EXAMPLE.to_owned();
    cfg.push_str("\n[[project]]\ncode = \"PNF0001\"\nname = \"Not funded yet\"\n");
    let dir = std::env::temp_dir().join(format!("hl-journal-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("center.toml");
    std::fs::write(&file, &cfg).unwrap();
    ok(&db.cli(&["config", "apply", file.to_str().unwrap()]));
    ok(&db.cli(&[
        "adjust",
        "--project",
        "PNF0001",
        "--amount",
        "12.00",
        "--month",
        "2026-11",
        "--reason",
        "consulting",
    ]));
    ok(&db.cli(&["close", "--month", "2026-11", "--author", "billing"]));
    let o = db.cli(&["export", "journal", "--month", "2026-11"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("no funding source in force for 2026-11") && e.contains("PNF0001, 12.00"),
        "{e}"
    );
    let logged: i64 = sqlx::query_scalar("SELECT count(*) FROM journal_export")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(logged, 0, "a refused export logs nothing");

    // Funding from November fixes it; then the credit month's sides turn.
    cfg.push_str("funding = [{ from = \"2026-11\", fund = \"10000\", cost_center = \"NEW-0001\", share = 100 }]\n");
    std::fs::write(&file, &cfg).unwrap();
    ok(&db.cli(&["config", "apply", file.to_str().unwrap()]));
    let j = journal_json(&db, "2026-11", &[]);
    let total: Decimal = sqlx::query_scalar(
        "SELECT sum(e.amount) FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE p.code = 'PZS0708' AND e.period = '2026-11-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(total < Decimal::ZERO, "{total}");
    let pzs: Vec<&Value> = j["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["project"] == "PZS0708")
        .collect();
    // Its funding is November's new set, credited; revenue is debited back.
    let funding: Vec<&&Value> = pzs.iter().filter(|l| !l["share"].is_null()).collect();
    assert_eq!(funding.len(), 1);
    assert_eq!(funding[0]["fund"], "20451", "the set from 2026-11");
    assert_eq!(funding[0]["side"], "credit");
    assert_eq!(dec(&funding[0]["amount"]), total);
    let revenue: Decimal = pzs
        .iter()
        .filter(|l| l["share"].is_null())
        .map(|l| dec(&l["amount"]))
        .sum();
    assert_eq!(revenue, -total, "revenue lines are debits that add up to the credit");
    assert!(pzs.iter().any(|l| l["service"] == "default" && l["side"] == "debit"));

    // A new set may begin in a month never exported, even before one that
    // was, as long as no exported month falls in its span (here: October,
    // up to the set from November). The same file changes nothing.
    let again = ok(&db.cli(&["config", "apply", file.to_str().unwrap()]));
    assert!(again.contains("funding sets:  0 added"), "{again}");
    let cfg = cfg.replace(
        "{ from = \"2026-11\", fund = \"10000\", cost_center = \"NEW-0001\", share = 100 }",
        "{ from = \"2026-11\", fund = \"10000\", cost_center = \"NEW-0001\", share = 100 },\n  { from = \"2026-10\", fund = \"10000\", cost_center = \"NEW-0002\", share = 100 }",
    );
    std::fs::write(&file, &cfg).unwrap();
    let o = ok(&db.cli(&["config", "apply", file.to_str().unwrap()]));
    assert!(o.contains("funding sets:  1 added"), "{o}");
    // Once October is exported too, a set whose span covers it is refused:
    // PZS0708's from June (in force until its set from November).
    journal_json(&db, "2026-10", &[]);
    let early = cfg.replace(
        "  { from = \"2026-11\", fund = \"20451\"",
        "  { from = \"2026-06\", fund = \"20452\", cost_center = \"ATMO-0200\", share = 100 },\n  { from = \"2026-11\", fund = \"20451\"",
    );
    assert_ne!(early, cfg);
    std::fs::write(&file, &early).unwrap();
    let o = db.cli(&["config", "apply", file.to_str().unwrap()]);
    assert!(
        stderr(&o).contains(
            "project \"PZS0708\": funding from 2026-06: the journal of 2026-10 has been exported: a new set begins after it"
        ),
        "{}",
        stderr(&o)
    );
    let rewrite = cfg.replace("NEW-0001", "NEW-0009");
    std::fs::write(&file, &rewrite).unwrap();
    let o = db.cli(&["config", "apply", file.to_str().unwrap()]);
    assert!(
        stderr(&o).contains("other funding from 2026-11 is already recorded (lines are compared in order"),
        "{}",
        stderr(&o)
    );
    let next = cfg.replace(
        "{ from = \"2026-11\", fund = \"10000\", cost_center = \"NEW-0001\", share = 100 }",
        "{ from = \"2026-11\", fund = \"10000\", cost_center = \"NEW-0001\", share = 100 },\n  { from = \"2026-12\", fund = \"10000\", cost_center = \"NEW-0002\", share = 50 },\n  { from = \"2026-12\", fund = \"20000\", cost_center = \"NEW-0002\", share = 50 }",
    );
    std::fs::write(&file, &next).unwrap();
    let o = ok(&db.cli(&["config", "apply", file.to_str().unwrap()]));
    assert!(o.contains("funding sets:  1 added"), "{o}");
    // The database itself refuses what the file check would have: an
    // earlier set slipped in by SQL, and shares not adding up to 100.
    let e = sqlx::raw_sql(
        "INSERT INTO funding_source (project_id, effective_from, line, fund, cost_center, account, share, recorded_by)
         SELECT id, '2026-09-01', 1, 'F', 'C', 'A', 100, 'sql' FROM project WHERE code = 'PZS0708'",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("from 2026-09 would change the journal of 2026-10, which has been exported"),
        "{e}"
    );
    let e = sqlx::raw_sql(
        "INSERT INTO funding_source (project_id, effective_from, line, fund, cost_center, account, share, recorded_by)
         SELECT id, '2027-01-01', 1, 'F', 'C', 'A', 99.99, 'sql' FROM project WHERE code = 'PNF0001'",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(e.to_string().contains("shares add up to 99.9900 %, not 100 %"), "{e}");

    // Exporting November again gives the lines finance has; a changed
    // revenue account behind the ledger's back is the audit's `journal` finding.
    let j2 = journal_json(&db, "2026-11", &[]);
    assert_eq!(j2["lines"], j["lines"]);
    assert_eq!(j2["digest"], j["digest"]);
    ok(&db.cli(&["audit"]));
    // The auditor role re-derives every export through the audit views
    // alone (the functions run with the owner's rights).
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::raw_sql("SET LOCAL ROLE hpc_ledger_auditor")
        .execute(&mut *tx)
        .await
        .unwrap();
    let held: (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE digest_holds), (SELECT count(*) FROM audit.discrepancies) FROM audit.journal_exports",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(
        held,
        (3, 0),
        "November twice and October, all holding, as the auditor sees them"
    );
    tx.rollback().await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE revenue_account DISABLE TRIGGER revenue_account_append_only;
         UPDATE revenue_account SET account = '49999' WHERE service = 'default';
         ALTER TABLE revenue_account ENABLE ALWAYS TRIGGER revenue_account_append_only;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let o = db.cli(&["audit"]);
    assert!(!o.status.success());
    assert!(
        crate::harness::stdout(&o).contains("journal"),
        "{}",
        crate::harness::stdout(&o)
    );
    // Expected is the journal recomputed, recorded the export's log (they
    // were the other way round until migration 0064).
    let (expected, recorded, digest): (String, String, String) = sqlx::query_as(
        "SELECT d.expected, d.recorded, encode(hl_journal_digest(d.period), 'hex')
           FROM audit.discrepancies d WHERE d.kind = 'journal' ORDER BY d.recorded LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(expected, digest);
    assert!(
        recorded.starts_with("export ") && !recorded.ends_with(&digest),
        "{recorded}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A month whose statements each come to nothing has no journal lines, and
/// its totals are still amounts in cents ("0.00"; they were a bare "0", as
/// a sum of nothing).
#[tokio::test]
async fn a_month_that_nets_to_nothing_has_no_lines_and_totals_in_cents() {
    let db = ledger().await;
    let totals: Vec<(String, Decimal)> = sqlx::query_as(
        "SELECT p.code, sum(e.amount) FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE e.period = '2026-11-01' GROUP BY p.code ORDER BY p.code",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(totals.len() > 1, "{totals:?}");
    for (project, total) in &totals {
        let back = (-*total).to_string();
        ok(&db.cli(&[
            "adjust",
            "--project",
            project,
            "--amount",
            &back,
            "--month",
            "2026-11",
            "--reason",
            "written off",
        ]));
    }
    ok(&db.cli(&["close", "--through", "2026-11", "--author", "billing"]));
    let j = journal_json(&db, "2026-11", &[]);
    assert_eq!(j["lines"].as_array().map(Vec::len), Some(0), "{j}");
    let statements = j["statements"].as_array().unwrap();
    assert_eq!(statements.len(), totals.len(), "{j}");
    assert!(statements.iter().all(|s| s["total"] == "0.00"), "{j}");
    assert_eq!(
        (&j["debit_total"], &j["credit_total"]),
        (&"0.00".into(), &"0.00".into()),
        "{j}"
    );
}
