//! Charging rules are versioned (issue 16, items 1-3): new charges follow
//! version 2, entries posted under version 1 stay clean in the audit, and a
//! planted error under either version is reported.

use rust_decimal::Decimal;

use crate::harness::{TestDb, ok, stdout};

/// One cluster of 28-core nodes at 0.045 per core-hour, 4 GB per core.
const CENTER: &str = r#"
[center]
name = "Versions"
currency = "USD"
time_zone = "UTC"

[[cluster]]
name = "c1"
scheduler = "slurm"
[[cluster.node_type]]
name = "regular"
cores_per_node = 28
[cluster.queues]
batch = "regular"
[[cluster.rate_card]]
node_type = "regular"
from = 2020-01-01
core_hour = 0.045
memory_per_core = "4GB"

[[project]]
code = "P1"
"#;

async fn db() -> TestDb {
    db_of(CENTER).await
}

async fn db_of(center: &str) -> TestDb {
    let db = TestDb::new().await;
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(center).unwrap(), "t")
        .await
        .unwrap();
    db
}

/// `job record` of a one-core job of `project` that started on 1 July 2026
/// at 00:30 UTC and ended at `end`.
fn record_july(db: &TestDb, id: &str, project: &str, end: &str, extra: &[&str]) -> std::process::Output {
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
        "--cores",
        "1",
        "--start",
        "2026-07-01T00:30:00Z",
        "--end",
        end,
    ];
    args.extend_from_slice(extra);
    db.cli(&args)
}

/// `job record` of a job ending on 5 October 2026.
fn record(db: &TestDb, id: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        id,
        "--project",
        "P1",
        "--queue",
        "batch",
        "--end",
        "2026-10-05T12:00:00Z",
    ];
    args.extend_from_slice(extra);
    ok(&db.cli(&args))
}

async fn entry(db: &TestDb, job: &str) -> (i64, i16, Decimal, Decimal, Decimal) {
    sqlx::query_as(
        "SELECT e.id, e.charging_rules, e.quantity, e.amount_exact, e.amount FROM ledger_entry e
           JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = $1",
    )
    .bind(job)
    .fetch_one(&db.pool)
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

async fn findings(db: &TestDb) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT entry_id, field FROM audit.discrepancies ORDER BY entry_id, field")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_entry_is_audited_by_the_rules_that_priced_it() {
    let db = db().await;
    // 4 nodes, 112 cores, 536,125 s at 0.045: exactly 750.575, a tie.
    // Version 1 made it 750.57 (16679.444444444444 core-hours × 0.045 =
    // 750.57499999999998); version 2 rounds the exact value: 750.58.
    let start = ["--start", "2026-09-29T07:04:35Z", "--nodes", "4", "--cores", "112"];
    assert_eq!(
        record(&db, "A", &start),
        "recorded c1/A: 1 entry totalling 750.58 in 2026-10\n"
    );
    let (a, rules, quantity, exact, amount) = entry(&db, "A").await;
    // New charges are of version 3, which prices as version 2 does.
    assert_eq!(rules, 3);
    assert_eq!(
        (quantity.to_string(), exact.to_string(), amount.to_string()),
        (
            "16679.444444444444".into(),
            "750.5750000000000000000000".into(),
            "750.58".into()
        )
    );
    // Job B, the same charge, as version 1 posted it before migration 0021.
    record(&db, "B", &start);
    let (b, ..) = entry(&db, "B").await;
    rewrite(
        &db,
        &format!(
            "UPDATE ledger_entry SET charging_rules = 1, amount_exact = quantity * unit_rate,
                    amount = round(quantity * unit_rate, 2) WHERE id = {b}"
        ),
    )
    .await;
    crate::harness::rederive_usage(&db.pool).await;
    assert_eq!(entry(&db, "B").await.4.to_string(), "750.57");
    // Both clean: each by its own version.
    assert_eq!(findings(&db).await, []);
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // The auditor sees which rules priced each charge, and their history.
    let v: Vec<(i64, i16)> = sqlx::query_as("SELECT entry_id, charging_rules FROM audit.job_charges ORDER BY entry_id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(v, [(a, 3), (b, 1)]);
    let versions: Vec<i16> = sqlx::query_scalar("SELECT version FROM charging_rules ORDER BY version")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(versions, [1, 2, 3]);

    // Planted: version 1's arithmetic under version 2's name (the database
    // accepts it: version 2 does not tie the amount to the quantity), and,
    // with the owner's CHECK constraint dropped, version 2's under version
    // 1's. Both are reported as amounts.
    rewrite(
        &db,
        &format!(
            "UPDATE ledger_entry SET amount_exact = quantity * unit_rate, amount = round(quantity * unit_rate, 2)
              WHERE id = {a};
             ALTER TABLE ledger_entry DROP CONSTRAINT ledger_entry_exact;
             UPDATE ledger_entry SET amount_exact = 750.575, amount = 750.58 WHERE id = {b}"
        ),
    )
    .await;
    assert_eq!(findings(&db).await, [(a, "amount".into()), (b, "amount".into())]);
    let o = db.cli(&["audit"]);
    assert_eq!(o.status.code(), Some(5));
    assert!(
        stdout(&o).contains("750.58 (exactly 750.575000000000) by charging rules 3")
            && stdout(&o).contains("750.57 (exactly 750.5749999999999800000000) by charging rules 1"),
        "{}",
        stdout(&o)
    );
}

#[tokio::test]
async fn a_single_node_job_is_charged_at_most_its_node_and_quote_shows_the_cap() {
    let db = db().await;
    // 1 core and 200 GB on a 28-core node at 4 GB per core: 50 effective
    // cores, capped at 28.
    let out = record(
        &db,
        "C",
        &["--start", "2026-10-05T11:00:00Z", "--cores", "1", "--memory", "200GB"],
    );
    // 28 cores × 1 h × 0.045 = 1.26.
    assert_eq!(out, "recorded c1/C: 1 entry totalling 1.26 in 2026-10\n");
    let charged: (String, Decimal) =
        sqlx::query_as("SELECT charged_by, charged_cores FROM audit.job_charges WHERE job_id = 'C'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (charged.0.as_str(), charged.1.to_string().as_str()),
        ("whole_node", "28.000000000000")
    );
    assert_eq!(findings(&db).await, []);
    let q = ok(&db.cli(&[
        "quote",
        "--cluster",
        "c1",
        "--queue",
        "batch",
        "--resources",
        "--ntasks=1 --mem=200G",
        "--walltime",
        "1:00:00",
    ]));
    assert!(q.contains("cap               28 cores (a whole node)"), "{q}");
    assert!(q.contains("charged by its memory, capped at a whole node"), "{q}");
    assert!(q.contains("total: USD 1.26"), "{q}");
}

#[tokio::test]
async fn the_real_memory_of_a_node_warns_about_a_small_card_and_bounds_what_a_job_can_hold() {
    let db = TestDb::new().await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mem-per-node-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("center.toml");
    // 28 cores at 2 GB per core is 56 GB; the nodes have 96 GB.
    let center = CENTER
        .replace(
            "cores_per_node = 28\n",
            "cores_per_node = 28\nmemory_per_node = \"96GB\"\n",
        )
        .replace("memory_per_core = \"4GB\"", "memory_per_core = \"2GB\"");
    std::fs::write(&file, center).unwrap();
    let out = ok(&db.cli(&["config", "apply", file.to_str().unwrap()]));
    assert!(
        out.contains(
            "note: cluster[0] (\"c1\"): the regular rate card from 2020-01-01 00:00:00 UTC gives 2GB per core × 28 cores per node = 56GB, less than the 96GB its nodes have"
        ),
        "{out}"
    );
    let show = ok(&db.cli(&["config", "show"]));
    assert!(show.contains("mem/node") && show.contains("96GB"), "{show}");
    // 90 GB on one node: charged the whole node (28 cores × 1 h × 0.045).
    assert_eq!(
        record(
            &db,
            "D",
            &["--start", "2026-10-05T11:00:00Z", "--cores", "1", "--memory", "90GB"]
        ),
        "recorded c1/D: 1 entry totalling 1.26 in 2026-10\n"
    );
    // 200 GB on one node, or 300 GB on three: more than the nodes have.
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "E",
        "--project",
        "P1",
        "--queue",
        "batch",
        "--start",
        "2026-10-05T11:00:00Z",
        "--end",
        "2026-10-05T12:00:00Z",
        "--cores",
        "1",
        "--memory",
        "200GB",
    ]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        crate::harness::stderr(&o).contains(
            "c1/E not recorded: the job holds 200GB of memory on 1 node(s) of type \"regular\", which have 96GB each"
        ),
        "{}",
        crate::harness::stderr(&o)
    );
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "F",
        "--project",
        "P1",
        "--queue",
        "batch",
        "--start",
        "2026-10-05T11:00:00Z",
        "--end",
        "2026-10-05T12:00:00Z",
        "--nodes",
        "3",
        "--cores",
        "84",
        "--memory",
        "280GB",
    ]);
    assert!(o.status.success(), "{}", crate::harness::stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run first recorded without its submit time is priced at its start;
/// a record of it with a submit time before a new card began, superseding
/// it, is priced as the run is (the new card), not at its own submit time
/// (the old card), and the audit agrees. (The supersede was priced by the
/// old card and the audit reported its card.)
#[tokio::test]
async fn a_supersede_is_priced_at_the_runs_instant() {
    let center = CENTER.replace(
        "from = 2020-01-01\ncore_hour = 0.045\nmemory_per_core = \"4GB\"",
        "from = 2020-01-01\nuntil = 2026-07-01\ncore_hour = 0.01\nmemory_per_core = \"4GB\"\n\
         [[cluster.rate_card]]\nnode_type = \"regular\"\nfrom = 2026-07-01\ncore_hour = 0.02\nmemory_per_core = \"4GB\"",
    );
    assert!(center.contains("core_hour = 0.02"));
    let db = db_of(&center).await;
    let job = |end: &str, extra: &[&str]| ok(&record_july(&db, "100", "P1", end, extra));
    // The epilogue: no submit time, 2 h at the new card's 0.02.
    job("2026-07-01T02:30:00Z", &[]);
    assert_eq!(entry(&db, "100").await.4.to_string(), "0.04");
    // sacct: submitted before the new card, and ran an hour longer.
    job(
        "2026-07-01T03:30:00Z",
        &["--submit", "2026-06-30T23:50:00Z", "--supersede"],
    );
    let charges: Vec<(String, Decimal)> = sqlx::query_as(
        "SELECT e.kind, e.amount FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id ORDER BY e.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let charges: Vec<(String, String)> = charges.into_iter().map(|(k, a)| (k, a.to_string())).collect();
    assert_eq!(
        charges,
        [("job", "0.04"), ("job", "0.06"), ("reversal", "-0.04")].map(|(k, a)| (k.to_owned(), a.to_owned()))
    );
    assert_eq!(findings(&db).await, []);
}

/// No card is in force at a record's own submit time, but its run, first
/// recorded without one, is priced at its start: the record is priced as
/// the run (a supersede, a record of the same job again), not refused for
/// want of a card. And a record of that run whose mistyped account is
/// reassigned is priced with the project it was reassigned to.
#[tokio::test]
async fn a_record_without_a_card_at_its_own_instant_is_priced_as_its_run() {
    let center = CENTER.replace("from = 2020-01-01", "from = 2026-07-01");
    assert!(center.contains("from = 2026-07-01"));
    let db = db_of(&center).await;
    let job = |id: &str, end: &str, extra: &[&str]| record_july(&db, id, "P1", end, extra);
    // 2 h at 0.045; then, submitted before any card, an hour longer: 3 h.
    ok(&job("100", "2026-07-01T02:30:00Z", &[]));
    let o = job(
        "100",
        "2026-07-01T03:30:00Z",
        &["--submit", "2026-06-30T23:50:00Z", "--supersede"],
    );
    assert!(stdout(&o).contains("superseded c1/100"), "{}", stdout(&o));
    let amounts: Vec<Decimal> = sqlx::query_scalar("SELECT amount FROM ledger_entry ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let amounts: Vec<String> = amounts.iter().map(ToString::to_string).collect();
    assert_eq!(amounts, ["0.09", "0.14", "-0.09"]);

    // A mistyped account on a record of another such run, then reassigned.
    ok(&job("200", "2026-07-01T02:30:00Z", &[]));
    let o = record_july(
        &db,
        "200",
        "OLDACCT",
        "2026-07-01T02:30:00Z",
        &["--submit", "2026-06-30T23:50:00Z"],
    );
    assert!(!o.status.success());
    let id: i64 = sqlx::query_scalar("SELECT id FROM rejected_record WHERE resolved_at IS NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let o = db.cli(&[
        "rejected",
        "reassign",
        &id.to_string(),
        "--project",
        "P1",
        "--reason",
        "account mistyped",
    ]);
    ok(&o);
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(open, 0, "{}", stdout(&o));
    assert_eq!(findings(&db).await, []);
}

/// A job charged before its queue was removed, or mapped to a node type
/// with no card, and sent again unchanged is the replay it was before the
/// change (nothing kept for the billing office to dismiss); a job of that
/// queue that ran before is priced as the map stood then, one that ran
/// after the queue left the map is refused.
#[tokio::test]
async fn a_record_sent_again_after_its_queue_changed_is_a_replay() {
    let db = db().await;
    let job = |id: &str| record_july(&db, id, "P1", "2026-07-01T02:30:00Z", &[]);
    ok(&job("100"));
    let open = || async {
        sqlx::query_scalar::<_, String>("SELECT kind FROM rejected_record WHERE resolved_at IS NULL ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    let apply = |center: String| {
        let db = &db;
        async move {
            hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&center).unwrap(), "t")
                .await
                .unwrap()
        }
    };
    // The queue mapped to a node type that has no card.
    let remapped = CENTER.replace(
        "[cluster.queues]\nbatch = \"regular\"",
        "[[cluster.node_type]]\nname = \"big\"\ncores_per_node = 64\n[cluster.queues]\nbatch = \"big\"",
    );
    assert!(remapped.contains("batch = \"big\""));
    apply(remapped).await;
    let o = job("100");
    assert!(stdout(&o).contains("replayed"), "{}", stdout(&o));
    ok(&o);
    assert_eq!(open().await, Vec::<String>::new());
    // The queue removed.
    let removed = CENTER.replace("batch = \"regular\"", "");
    assert!(!removed.contains("batch ="));
    apply(removed).await;
    let o = job("100");
    assert!(stdout(&o).contains("replayed"), "{}", stdout(&o));
    ok(&o);
    assert_eq!(open().await, Vec::<String>::new());
    // The same job changed is refused as before: a conflict with its
    // charge (priced through the map of July, D4), for `--supersede`.
    assert!(
        !record_july(&db, "100", "P1", "2026-07-01T03:30:00Z", &[])
            .status
            .success()
    );
    // Another July job recorded late is priced as the map stood in July
    // (D4: the map is dated).
    let o = job("101");
    assert!(stdout(&o).contains("recorded"), "{}", stdout(&o));
    ok(&o);
    // A job that ran after the queue left the map is refused, named so.
    let removed_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(valid_until) FROM queue_map WHERE queue = 'batch'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let (start, end) = crate::harness::a_second_after(removed_at);
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "c1",
        "--job-id",
        "102",
        "--project",
        "P1",
        "--queue",
        "batch",
        "--cores",
        "1",
        "--submit",
        &start,
        "--start",
        &start,
        "--end",
        &end,
    ]);
    assert!(!o.status.success());
    assert!(
        crate::harness::stderr(&o).contains("queue \"batch\" on cluster c1 left the queue map at"),
        "{}",
        crate::harness::stderr(&o)
    );
    assert_eq!(open().await, ["conflict", "unknown_queue"]);
    let charges: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(charges, 2);
}
