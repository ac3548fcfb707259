//! `config apply`: idempotent, all or nothing, and never rewriting what has
//! priced a charge.

use hpc_ledger::config::parse;
use hpc_ledger::service::config::{ApplyError, ApplyReport, Counts, apply};
use sqlx::PgPool;

use crate::harness::{EXAMPLE, TestDb};

fn counts(added: u64, updated: u64, removed: u64, unchanged: u64) -> Counts {
    Counts {
        added,
        updated,
        removed,
        unchanged,
    }
}

async fn apply_text(pool: &PgPool, text: &str) -> Result<ApplyReport, ApplyError> {
    apply(pool, &parse(text).unwrap(), "tester").await
}

fn refusals(r: Result<ApplyReport, ApplyError>) -> Vec<String> {
    match r {
        Err(ApplyError::Refused(p)) => p,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Charge a job on the card of `cluster`/`node_type` in force at `submitted`,
/// as the recording service will (job, record, ledger entry).
async fn charge_job(pool: &PgPool, cluster: &str, node_type: &str, submitted: &str) {
    sqlx::query(
        r#"WITH c AS (SELECT id FROM cluster WHERE name = $1),
                n AS (SELECT id FROM node_type WHERE cluster_id = (SELECT id FROM c) AND name = $2),
                r AS (SELECT id FROM rate_card WHERE node_type_id = (SELECT id FROM n) AND rate_class_id IS NULL
                       AND tstzrange(valid_from, valid_until) @> $3::timestamptz),
                j AS (INSERT INTO job (cluster_id, scheduler_job_id, submitted_at, started_at)
                      VALUES ((SELECT id FROM c), $3, $3::timestamptz, $3::timestamptz) RETURNING id, cluster_id, started_at),
                jr AS (INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id,
                                               ended_at, nodes, cores, charge_fingerprint, content_fingerprint,
                                               source_format, raw, recorded_by)
                       SELECT j.id, j.cluster_id, j.started_at, 1, 'original', (SELECT min(id) FROM project),
                              (SELECT id FROM n), j.started_at + interval '1 hour', 1, 1, sha256('a'), sha256('b'),
                              'cli', '{}', 'test' FROM j RETURNING id)
           INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, quantity,
                                     unit_rate, amount_exact, amount, author)
           SELECT date_trunc('month', $3::timestamptz AT TIME ZONE 'America/New_York')::date,
                  (SELECT min(id) FROM project), 'job', 'core_hours', jr.id, (SELECT id FROM r), 0, 0, 0, 0, 'test'
             FROM jr"#,
    )
    .bind(cluster)
    .bind(node_type)
    .bind(submitted)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn applying_the_example_twice_changes_nothing_the_second_time() {
    let db = TestDb::new().await;
    let first = apply_text(&db.pool, EXAMPLE).await.unwrap();
    assert!(first.center_changed);
    assert_eq!(first.clusters, counts(2, 0, 0, 0));
    assert_eq!(first.node_types, counts(6, 0, 0, 0));
    assert_eq!(first.queues, counts(11, 0, 0, 0));
    assert_eq!(
        first.rate_cards,
        counts(9, 0, 0, 0),
        "8 of the default class, 1 commercial"
    );
    assert_eq!(first.storage_rates, counts(3, 0, 0, 0));
    assert_eq!(first.projects, counts(5, 0, 0, 0));
    assert_eq!(first.classes, counts(1, 0, 0, 0));
    assert_eq!(first.project_classes, counts(1, 0, 0, 0));
    assert_eq!(first.discounts, counts(1, 0, 0, 0));
    assert_eq!(first.quotas, counts(5, 0, 0, 0));
    let second = apply_text(&db.pool, EXAMPLE).await.unwrap();
    assert!(!second.changed(), "{second}");
    assert_eq!(second.rate_cards, counts(0, 0, 0, 9));
    assert_eq!(second.discounts, counts(0, 0, 0, 1));
    assert_eq!(second.quotas, counts(0, 0, 0, 5));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM rate_card")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 9);
}

#[tokio::test]
async fn edits_to_unpriced_rules_are_applied() {
    let db = TestDb::new().await;
    apply_text(&db.pool, EXAMPLE).await.unwrap();
    let edited = EXAMPLE
        .replace("hugemem = \"hugememory\"", "bigmem = \"hugememory\"")
        .replace("debug = \"regular\"", "debug = \"hugememory\"")
        .replace("core_hour = 0.0160", "core_hour = 0.0170")
        .replace(
            "[[project]]\ncode = \"PDE0001\"",
            "[[project]]\ncode = \"PNEW01\"\nquota = [{ from = 2026-11-01, tb = 1 }]\n\n[[project]]\ncode = \"PDE0001\"",
        );
    let r = apply_text(&db.pool, &edited).await.unwrap();
    assert_eq!(r.queues, counts(1, 1, 1, 9));
    // A queue moved to another node type says what that does to late records.
    assert!(
        r.notes.iter().any(|n| n.contains(
            "queue \"debug\" runs on node type \"hugememory\" from now on, not \"regular\": a job of that queue \
             that started before now stays priced on \"regular\", also when its record comes later"
        )),
        "{:?}",
        r.notes
    );
    assert_eq!(r.rate_cards, counts(0, 1, 0, 8));
    assert_eq!(r.projects, counts(1, 0, 0, 5));
    assert_eq!(r.quotas, counts(1, 0, 0, 5));
    let price: rust_decimal::Decimal = sqlx::query_scalar(
        "SELECT core_hour_price FROM rate_card r JOIN node_type n ON n.id = r.node_type_id
          JOIN cluster c ON c.id = n.cluster_id WHERE c.name = 'pitzer' AND n.name = 'hugememory'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(price.to_string(), "0.0170000000");
}

#[tokio::test]
async fn a_rate_card_that_priced_a_charge_never_changes() {
    let db = TestDb::new().await;
    apply_text(&db.pool, EXAMPLE).await.unwrap();
    // A job submitted in August was priced by owens' July regular card.
    charge_job(&db.pool, "owens", "regular", "2026-08-15T12:00:00Z").await;
    let july = "node_type = \"regular\"\nfrom = 2026-07-01\ncore_hour = 0.0120";

    let p = refusals(apply_text(&db.pool, &EXAMPLE.replace(july, &july.replace("0.0120", "0.0130"))).await);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains(
            "regular rate card from 2026-07-01 04:00:00 UTC has priced charges; its prices and sizes cannot change \
             (core_hour 0.012 → 0.013; add a new dated card instead)"
        ),
        "{p:?}"
    );
    // The node type's cores changed: its cards without a size of their own
    // would change with it; the refusal says so, and how to keep them.
    let bigger = EXAMPLE.replacen(
        "name = \"regular\"\ncores_per_node = 28",
        "name = \"regular\"\ncores_per_node = 32",
        1,
    );
    assert_ne!(bigger, EXAMPLE);
    let p = refusals(apply_text(&db.pool, &bigger).await);
    assert!(
        p.iter()
            .any(|m| m.contains("from 2026-07-01 04:00:00 UTC has priced charges")
                && m.contains(
                    "(cores_per_node 28 → 32; add a new dated card instead, or write cores_per_node = 28 on this card"
                )),
        "{p:?}"
    );

    let without = EXAMPLE.replace(&format!("[[cluster.rate_card]]            # the July price change: a new dated card\n{july}\nmemory_per_core = \"4GB\"\n"), "");
    assert_ne!(without, EXAMPLE);
    let p = refusals(apply_text(&db.pool, &without).await);
    assert!(
        p.iter()
            .any(|m| m.contains("has priced charges and is missing from the file")),
        "{p:?}"
    );

    // A new card that would take over jobs already priced is refused by the database.
    let september = format!(
        "{july}\nmemory_per_core = \"4GB\"\n\n[[cluster.rate_card]]\nnode_type = \"regular\"\nfrom = 2026-08-01\ncore_hour = 0.0140\nmemory_per_core = \"4GB\"\n"
    );
    let text = EXAMPLE.replace(&format!("{july}\nmemory_per_core = \"4GB\"\n"), &september);
    let p = refusals(apply_text(&db.pool, &text).await);
    assert!(p[0].contains("priced jobs submitted after"), "{p:?}");
    // Named as the file names the card (not by its id alone), with what to do.
    assert!(
        p[0].starts_with(
            "cluster[0] (\"owens\"): the regular rate card from 2026-07-01 04:00:00 UTC cannot end at \
             2026-08-01 04:00:00 UTC: it priced charges after that"
        ) && p[0].ends_with("start the rule after it later"),
        "{p:?}"
    );

    // Nothing of a refused apply stays, not even its harmless parts.
    let text = text.replace("name = \"Climate Modeling Group\"", "name = \"Renamed\"");
    refusals(apply_text(&db.pool, &text).await);
    let name: String = sqlx::query_scalar("SELECT name FROM project WHERE code = 'PZS0708'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(name, "Climate Modeling Group");

    // A new card after the last priced job is the way to change prices.
    let december = format!(
        "{july}\nmemory_per_core = \"4GB\"\n\n[[cluster.rate_card]]\nnode_type = \"regular\"\nfrom = 2026-12-01\ncore_hour = 0.0140\nmemory_per_core = \"4GB\"\n"
    );
    let r = apply_text(
        &db.pool,
        &EXAMPLE.replace(&format!("{july}\nmemory_per_core = \"4GB\"\n"), &december),
    )
    .await
    .unwrap();
    assert_eq!(r.rate_cards, counts(1, 1, 0, 8), "{r}");
}

#[tokio::test]
async fn quota_history_is_never_rewritten() {
    let db = TestDb::new().await;
    apply_text(&db.pool, EXAMPLE).await.unwrap();
    let p = refusals(
        apply_text(
            &db.pool,
            &EXAMPLE.replace("{ from = 2026-01-01, tb = 10 }", "{ from = 2026-01-01, tb = 12 }"),
        )
        .await,
    );
    assert_eq!(p.len(), 1);
    assert!(
        p[0].starts_with(
            "project \"PAS1234\": a quota of 10.000000 TB from 2026-01-01 05:00:00 UTC is already recorded"
        ),
        "{p:?}"
    );
    // Dropping a quota line from the file keeps the recorded history.
    let r = apply_text(&db.pool, &EXAMPLE.replace("  { from = 2026-10-16, tb = 20 },\n", ""))
        .await
        .unwrap();
    assert_eq!(r.quotas, counts(0, 0, 0, 4));
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("PAS1234") && n.contains("1 recorded quota change(s) are not in the file")),
        "{r}"
    );
}

#[tokio::test]
async fn the_currency_and_time_zone_are_fixed_once_charges_exist() {
    let db = TestDb::new().await;
    apply_text(&db.pool, EXAMPLE).await.unwrap();
    // Before any charge, the time zone may still change.
    apply_text(
        &db.pool,
        &EXAMPLE.replace(
            "time_zone = \"America/New_York\"   # decides",
            "time_zone = \"America/Chicago\"   # decides",
        ),
    )
    .await
    .unwrap();
    apply_text(&db.pool, EXAMPLE).await.unwrap();
    charge_job(&db.pool, "owens", "regular", "2026-08-15T12:00:00Z").await;
    let p = refusals(apply_text(&db.pool, &EXAMPLE.replace("currency = \"USD\"", "currency = \"EUR\"")).await);
    assert_eq!(
        p,
        ["the currency and billing time zone cannot change once charges are posted"]
    );
}

/// Issue 20, item 7: `config apply --dry-run` shows what would change and
/// writes nothing.
#[tokio::test]
async fn a_dry_run_shows_the_changes_and_writes_nothing() {
    let db = TestDb::new().await;
    let example = crate::harness::example_path();
    let out = crate::harness::ok(&db.cli(&["config", "apply", example.to_str().unwrap(), "--dry-run"]));
    assert!(
        out.ends_with("dry run: these changes would be applied; nothing was written\n"),
        "{out}"
    );
    let centers: i64 = sqlx::query_scalar("SELECT count(*) FROM center")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(centers, 0);
    apply_text(&db.pool, EXAMPLE).await.unwrap();
    // An edit, previewed: the report names it; the database keeps the old price.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("dry-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let edited = dir.join("center.toml");
    std::fs::write(&edited, EXAMPLE.replace("core_hour = 0.0160", "core_hour = 0.0170")).unwrap();
    let preview = hpc_ledger::service::config::apply_dry_run(
        &db.pool,
        &parse(&std::fs::read_to_string(&edited).unwrap()).unwrap(),
        "t",
    )
    .await
    .unwrap();
    assert_eq!(preview.rate_cards, counts(0, 1, 0, 8));
    let out = crate::harness::ok(&db.cli(&["config", "apply", edited.to_str().unwrap(), "--dry-run"]));
    assert!(out.contains("dry run: these changes would be applied"), "{out}");
    let price: rust_decimal::Decimal = sqlx::query_scalar(
        "SELECT core_hour_price FROM rate_card r JOIN node_type n ON n.id = r.node_type_id
          JOIN cluster c ON c.id = n.cluster_id WHERE c.name = 'pitzer' AND n.name = 'hugememory'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(price.to_string(), "0.0160000000");
    // Unchanged: nothing to change, dry run or not.
    let out = crate::harness::ok(&db.cli(&["config", "apply", example.to_str().unwrap(), "--dry-run"]));
    assert!(out.ends_with("nothing to change\n"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A project recorded but missing from the file is kept, and said so
/// (docs/configuration.md; it was kept silently: "nothing to change").
#[tokio::test]
async fn a_project_missing_from_the_file_is_kept_and_reported() {
    let db = TestDb::new().await;
    let with_extra = format!("{EXAMPLE}\n[[project]]\ncode = \"EXTRA1\"\nname = \"Kept\"\npi = \"Dr. Who\"\n");
    apply_text(&db.pool, &with_extra).await.unwrap();
    let r = apply_text(&db.pool, EXAMPLE).await.unwrap();
    assert!(
        r.notes
            .iter()
            .any(|n| n == "1 project(s) in the database are not in the file (EXTRA1); they were kept"),
        "{r}"
    );
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM project WHERE code = 'EXTRA1'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept, 1);
}

/// The embedded database's character type is C (`initdb --no-locale`),
/// whose `lower()` lowers ASCII letters only: a project code with another
/// capital (`ÄRZTE1`) was added and then never found (`config apply`
/// stopped on a panic). Refused now, saying why; the same code in lower
/// case is matched.
#[tokio::test]
async fn a_code_the_database_lowers_otherwise_is_refused() {
    let name = format!("hl_t_ctype_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&crate::harness::url_for("postgres"))
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_CTYPE 'C' LC_COLLATE 'C'"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let url = crate::harness::url_for(&name);
    let env = [("DATABASE_URL", url.as_str())];
    crate::harness::ok(&crate::harness::cli_with_env(&["db", "migrate"], &env, None));
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = |code: &str| {
        let path = dir.join(format!("{}.toml", code.len()));
        std::fs::write(
            &path,
            format!(
                "[center]\nname = \"C\"\ncurrency = \"USD\"\ntime_zone = \"UTC\"\n[[project]]\ncode = \"{code}\"\n"
            ),
        )
        .unwrap();
        path
    };
    let capital = file("ÄRZTE1");
    let o = crate::harness::cli_with_env(&["config", "apply", capital.to_str().unwrap()], &env, None);
    assert_eq!(o.status.code(), Some(1), "{}", crate::harness::stderr(&o));
    assert!(
        crate::harness::stderr(&o).contains("project \"ÄRZTE1\": this database lowers its code to \"Ärzte1\""),
        "{}",
        crate::harness::stderr(&o)
    );
    let lower = file("ärzte1x");
    crate::harness::ok(&crate::harness::cli_with_env(
        &["config", "apply", lower.to_str().unwrap()],
        &env,
        None,
    ));
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let codes: Vec<String> = sqlx::query_scalar("SELECT code FROM project")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(codes, ["ärzte1x"]);
    pool.close().await;
    sqlx::raw_sql(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The queue map is dated (docs/rules.md D4): a queue moved to another node
/// type, or taken out of the file, changes from the apply on; a late record
/// of a job submitted before is priced as the map stood then.
#[tokio::test]
async fn a_queue_moved_or_removed_changes_only_for_jobs_after_the_apply() {
    let db = TestDb::with_example().await;
    let record = |job: &str, queue: &str, day: u32| {
        let json = format!(
            r#"{{"cluster":"owens","job_id":"{job}","project":"PZS0708","queue":"{queue}","cores":1,"start":"2026-10-{day}T08:00:00-04:00","end":"2026-10-{day}T18:00:00-04:00"}}"#
        );
        let o = crate::harness::cli_with_env(
            &["job", "record", "--json", "--format", "json"],
            &[("DATABASE_URL", &db.url)],
            Some(&json),
        );
        let v: serde_json::Value = serde_json::from_str(&crate::harness::ok(&o)).unwrap();
        assert_eq!(v["outcome"], "recorded", "{v}");
        v["amount"].as_str().unwrap().to_owned()
    };
    let node_type_of = |job: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT n.name FROM job_record r JOIN job j ON j.id = r.job_id JOIN node_type n ON n.id = r.node_type_id
                  WHERE j.scheduler_job_id = $1",
            )
            .bind(job)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    // 10 core-hours on a regular node at 0.0120.
    assert_eq!(record("7001", "debug", 20), "0.12");

    // debug moves to the 48-core hugememory nodes; serial leaves the map.
    let moved = EXAMPLE
        .replace("debug = \"regular\"", "debug = \"hugememory\"")
        .replace("serial = \"regular\"\n", "");
    let r = apply_text(&db.pool, &moved).await.unwrap();
    assert_eq!(r.queues, counts(0, 1, 1, 9));
    assert!(
        r.notes.iter().any(|n| n.contains(
            "queue \"debug\" runs on node type \"hugememory\" from now on, not \"regular\": a job of that queue \
             that started before now stays priced on \"regular\""
        )),
        "{:?}",
        r.notes
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("queue \"serial\" leaves the queue map from now on")),
        "{:?}",
        r.notes
    );

    // Late records of October jobs: priced as the map stood in October.
    assert_eq!(record("7002", "debug", 21), "0.12");
    assert_eq!(record("7003", "serial", 22), "0.12");
    assert_eq!(node_type_of("7002").await, "regular");
    assert_eq!(node_type_of("7003").await, "regular");

    // A job submitted before the move that started after it ran on the
    // queue's new nodes (D4: the map of its start), at the new node type's
    // card of its submit time (D5); its record without the submit time
    // reads the same node type, a replay of the same run.
    let moved_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT valid_from FROM queue_map WHERE queue = 'debug' AND valid_until IS NULL AND cluster_id =
            (SELECT id FROM cluster WHERE name = 'owens')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (start, end) = crate::harness::a_second_after(moved_at);
    let submitted = (moved_at - chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M:%SZ");
    for submit in [format!(r#""submit":"{submitted}","#), String::new()] {
        let json = format!(
            r#"{{"cluster":"owens","job_id":"7004","project":"PZS0708","queue":"debug","cores":1,{submit}"start":"{start}","end":"{end}"}}"#
        );
        crate::harness::ok(&crate::harness::cli_with_env(
            &["job", "record", "--json"],
            &[("DATABASE_URL", &db.url)],
            Some(&json),
        ));
    }
    assert_eq!(node_type_of("7004").await, "hugememory");

    // The map in force after the move reads the new node type.
    let later = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let shown = crate::harness::ok(&db.cli(&["config", "show", "--at", &later]));
    let hugememory = shown.lines().find(|l| l.starts_with("hugememory ")).unwrap();
    assert!(hugememory.trim_end().ends_with("debug,hugemem"), "{shown}");
    assert!(!shown.contains("serial"), "{shown}");
    let json: serde_json::Value = serde_json::from_str(&crate::harness::ok(
        &db.cli(&["config", "show", "--at", &later, "--format", "json"]),
    ))
    .unwrap();
    let queues = &json["catalog"]["clusters"][0]["queues"];
    assert_eq!(
        queues["batch"],
        serde_json::json!([{"node_type": "regular", "from": null, "until": null}])
    );
    assert_eq!(queues["debug"][0]["node_type"], "hugememory");
    assert!(queues["debug"][0]["from"].is_string(), "{queues}");
    assert!(queues["serial"].is_null(), "{queues}");
    let before = crate::harness::ok(&db.cli(&["config", "show", "--at", "2026-10-21"]));
    let regular = before.lines().find(|l| l.starts_with("regular ")).unwrap();
    assert!(regular.trim_end().ends_with("batch,debug,parallel,serial"), "{before}");

    // Applied again as it was: each queue from this second instant on.
    let r = apply_text(&db.pool, EXAMPLE).await.unwrap();
    assert_eq!(r.queues, counts(1, 1, 0, 9));
    assert!(
        r.notes.iter().any(|n| n.contains(
            "queue \"serial\" is in the queue map again, on node type \"regular\", from now on: a job of it that \
             started while it was out of the map is still refused"
        )),
        "{:?}",
        r.notes
    );
    let rows: Vec<(String, String, bool, bool)> = sqlx::query_as(
        "SELECT q.queue, n.name, q.valid_from = '-infinity', q.valid_until IS NULL
           FROM queue_map q JOIN node_type n ON n.id = q.node_type_id JOIN cluster c ON c.id = q.cluster_id
          WHERE c.name = 'owens' AND q.queue IN ('debug', 'serial') ORDER BY q.queue, q.valid_from",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let row = |q: &str, t: &str, first: bool, open: bool| (q.to_owned(), t.to_owned(), first, open);
    assert_eq!(
        rows,
        [
            row("debug", "regular", true, false),
            row("debug", "hugememory", false, false),
            row("debug", "regular", false, true),
            row("serial", "regular", true, false),
            row("serial", "regular", false, true),
        ]
    );
    // Each row ends where the next begins, but serial's, out of the map
    // between the two applies.
    let gaps: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM queue_map a JOIN queue_map b ON b.cluster_id = a.cluster_id AND b.queue = a.queue
          WHERE a.valid_until IS NOT NULL AND b.valid_from > a.valid_from
            AND b.valid_from = (SELECT min(valid_from) FROM queue_map c
                                 WHERE c.cluster_id = a.cluster_id AND c.queue = a.queue AND c.valid_from > a.valid_from)
            AND b.valid_from <> a.valid_until",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(gaps, 1);
}

/// The database keeps the queue map's history whoever writes to it: a
/// mapping is only ended, never before now, and never overlaps another.
#[tokio::test]
async fn the_queue_maps_history_is_never_rewritten() {
    let db = TestDb::with_example().await;
    for (sql, says) in [
        (
            "DELETE FROM queue_map WHERE queue = 'batch'",
            "a queue mapping is never removed, only ended",
        ),
        (
            "UPDATE queue_map SET node_type_id = (SELECT id FROM node_type WHERE name = 'hugememory' AND cluster_id = queue_map.cluster_id) WHERE queue = 'batch'",
            "a queue mapping is never changed, only ended",
        ),
        (
            "UPDATE queue_map SET valid_until = now() - interval '1 day' WHERE queue = 'batch'",
            "a mapping ends no earlier than now",
        ),
        // Ended at the transaction's start, after which jobs may have been
        // priced through it (a review of 2026-12-07: a job recorded during
        // the sleep was charged through a mapping that ended before it).
        (
            "BEGIN; SELECT pg_sleep(0.2); UPDATE queue_map SET valid_until = now() WHERE queue = 'batch'; COMMIT;",
            "a mapping ends no earlier than now",
        ),
        // The lock's time, set by hand before the transaction began.
        (
            "BEGIN; SELECT set_config('hpc_ledger.rules_locked_at', '2000-01-01', true);
             UPDATE queue_map SET valid_until = '2026-01-01' WHERE queue = 'batch'; COMMIT;",
            "a mapping ends no earlier than now",
        ),
        (
            "INSERT INTO queue_map (cluster_id, queue, node_type_id, valid_from)
             SELECT cluster_id, queue, node_type_id, now() + interval '1 day' FROM queue_map WHERE queue = 'batch'",
            "would map to two node types at once",
        ),
        (
            "INSERT INTO queue_map (cluster_id, queue, node_type_id, valid_from)
             SELECT cluster_id, 'newq', node_type_id, now() - interval '1 day' FROM queue_map WHERE queue = 'batch'",
            "only a queue's first mapping starts in the past",
        ),
    ] {
        let mut conn = db.pool.acquire().await.unwrap();
        let err = sqlx::raw_sql(sql).execute(&mut *conn).await.unwrap_err();
        let db_err = err.as_database_error().unwrap();
        assert_eq!(db_err.code().as_deref(), Some("HL004"), "{sql}: {err}");
        assert!(db_err.message().contains(says), "{sql}: {err}");
        sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
    }
    // Ending at the instant the rules lock was taken, or later, and mapping
    // a new queue from -infinity, are what config apply does.
    let mut tx = db.pool.begin().await.unwrap();
    hpc_ledger::db::lock_rules(&mut tx).await.unwrap();
    sqlx::raw_sql(
        "UPDATE queue_map SET valid_until = current_setting('hpc_ledger.rules_locked_at')::timestamptz
          WHERE queue = 'debug';
         UPDATE queue_map SET valid_until = now() + interval '1 day' WHERE queue = 'serial';
         INSERT INTO queue_map (cluster_id, queue, node_type_id)
         SELECT cluster_id, 'newq', node_type_id FROM queue_map WHERE queue = 'batch'",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    // The guard takes the same lock as the product (db::RULES_LOCK).
    assert!(
        include_str!("../../migrations/0070_queue_map_dated.sql")
            .contains(&format!("pg_advisory_xact_lock({})", hpc_ledger::db::RULES_LOCK))
    );
}
