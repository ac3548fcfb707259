//! `ledger_draw` partitioned by posting month (migration 0047, issue 19,
//! item 2): each month's draws in that month's partition, partitions made
//! ahead and by the posting that needs one, a fold that rewrites only its
//! own month, the statistics refresh on the months, and a ledger of the
//! schema before keeping every draw through the migration.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use hpc_ledger::db::MIGRATOR;
use sqlx::PgPool;
use sqlx::migrate::Migrator;

use crate::harness::{TestDb, close_by_hand, import_sample_jobs, ok, sample_billed_through};

/// The partitions of `ledger_draw`, by name.
async fn partitions(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'ledger_draw'::regclass ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Draw rows outside their month's partition.
async fn misplaced(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM ledger_draw WHERE tableoid::regclass::text <> 'ledger_draw_' || to_char(period, 'YYYY_MM')",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Every draw row of `month` (all months when `None`) as text, in key order.
async fn draws(pool: &PgPool, month: Option<&str>) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT concat_ws('|', project_id, cluster_id, period, day, first_at, last_at, amount, entries)
           FROM ledger_draw WHERE $1::date IS NULL OR period = $1::date
          ORDER BY project_id, cluster_id, period, day, first_at, last_at, amount, entries",
    )
    .bind(month)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The sum drawn per key (project, cluster, month, day) of `month`: what
/// every reader sums, folded or not.
async fn sums(pool: &PgPool, month: &str) -> Vec<(i64, Option<i64>, String, String)> {
    sqlx::query_as(
        "SELECT project_id, cluster_id, day::text, sum(amount)::text FROM ledger_draw WHERE period = $1::date
          GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    )
    .bind(month)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The name of the partition of the month `months` from this one.
async fn partition_from_now(pool: &PgPool, months: i32) -> String {
    sqlx::query_scalar(
        "SELECT 'ledger_draw_' || to_char(date_trunc('month', now()) + make_interval(months => $1), 'YYYY_MM')",
    )
    .bind(months)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn each_months_draws_are_in_that_months_partition_made_when_first_posted() {
    let db = TestDb::with_example().await;
    // Made ahead: last month's to the month after next (a new ledger has
    // this month's and the next two's, from the migration; the template
    // this database was cloned from may be older than this month).
    let _: i32 = sqlx::query_scalar("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut ahead = Vec::new();
    for m in -1..=2 {
        ahead.push(partition_from_now(&db.pool, m).await);
    }
    assert_eq!(partitions(&db.pool).await, ahead);
    assert!(
        ahead.iter().all(|p| p.len() == "ledger_draw_YYYY_MM".len()),
        "{ahead:?}"
    );

    // The sample posts into 2026-01 to 2026-10 (storage monthly, jobs in
    // October): each month's partition made by its first posting.
    let db = sample_billed_through("2026-10").await;
    let made = partitions(&db.pool).await;
    for month in 1..=10 {
        let part = format!("ledger_draw_2026_{month:02}");
        assert!(made.contains(&part), "{part} in {made:?}");
    }
    assert_eq!(misplaced(&db.pool).await, 0);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_draw_2026_10")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(rows > 10, "{rows}");
    // Made ahead: last month's to the month after next, once.
    let made_ahead: i32 = sqlx::query_scalar("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let last_month = partition_from_now(&db.pool, -1).await;
    assert_eq!(made_ahead, i32::from(!made.contains(&last_month)));
    let again: i32 = sqlx::query_scalar("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert!(partitions(&db.pool).await.contains(&last_month));
    // The audit recomputes every draw from the entries: none differs.
    ok(&db.cli(&["audit"]));
}

/// A row's ctid is unique only within its partition: the fold (0042's,
/// named by month in 0047) rewrites the keys of its own month and leaves
/// the next month's rows at the same ctids alone.
#[tokio::test]
async fn a_fold_rewrites_its_own_months_draws_and_no_others() {
    let db = sample_billed_through("2026-10").await;
    let shared: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_draw WHERE ctid = '(0,1)'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(shared >= 10, "ten months' partitions each start at (0,1): {shared}");
    let october = draws(&db.pool, Some("2026-10-01")).await;
    let september = sums(&db.pool, "2026-09-01").await;
    for month in 1..=9 {
        close_by_hand(&db.pool, &format!("2026-{month:02}-01")).await;
    }
    let folded: i32 = sqlx::query_scalar("SELECT hl_fold_rollups()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(folded, 9);
    assert_eq!(draws(&db.pool, Some("2026-10-01")).await, october);
    assert_eq!(sums(&db.pool, "2026-09-01").await, september);
    // One row per key in a folded month.
    let (rows, keys): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (project_id, cluster_id, day)) FROM ledger_draw WHERE period = '2026-09-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, keys);
    assert_eq!(misplaced(&db.pool).await, 0);
    ok(&db.cli(&["audit"]));
}

/// Two sessions making the same month's partition at once: one makes it,
/// the other waits for it and finds it made (no "already exists").
#[tokio::test]
async fn two_makers_of_one_month_neither_fails_nor_doubles() {
    let db = TestDb::new().await;
    let mut first = db.pool.begin().await.unwrap();
    let made: i32 = sqlx::query_scalar("SELECT hl_draw_partitions('2031-01-01', '2031-01-31')")
        .fetch_one(&mut *first)
        .await
        .unwrap();
    assert_eq!(made, 1);
    let pool = db.pool.clone();
    let second = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        let made: i32 = sqlx::query_scalar("SELECT hl_draw_partitions('2030-12-01', '2031-01-01')")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        made
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second maker waits for the first");
    first.commit().await.unwrap();
    // It made December's only.
    assert_eq!(second.await.unwrap(), 1);
    let parts = partitions(&db.pool).await;
    assert!(parts.contains(&"ledger_draw_2030_12".to_owned()) && parts.contains(&"ledger_draw_2031_01".to_owned()));
}

/// Making a partition locks `ledger_draw` only against another maker (and
/// ANALYZE, VACUUM): a reader and a posting with the table open do not
/// hold it up. Behind another maker, making ahead gives up after 200 ms
/// (55P03) rather than wait; the next call makes the partition.
#[tokio::test]
async fn making_partitions_waits_for_no_reader_or_writer() {
    let db = TestDb::with_example().await;
    let _: i32 = sqlx::query_scalar("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let last = partition_from_now(&db.pool, 2).await;
    sqlx::raw_sql(&format!("DROP TABLE {last}"))
        .execute(&db.pool)
        .await
        .unwrap();
    let mut reader = db.pool.begin().await.unwrap();
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_draw")
        .fetch_one(&mut *reader)
        .await
        .unwrap();
    let mut writer = db.pool.begin().await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO ledger_draw (project_id, cluster_id, period, day, first_at, last_at, amount, entries)
         SELECT id, NULL, date_trunc('month', now()), now(), now(), now(), 0, 0 FROM project LIMIT 1",
    )
    .execute(&mut *writer)
    .await
    .unwrap();
    let made: i32 = tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query_scalar("SELECT hl_draw_partitions_ahead()").fetch_one(&db.pool),
    )
    .await
    .expect("not held up by the reader or the writer")
    .unwrap();
    assert_eq!(made, 1);
    assert!(partitions(&db.pool).await.contains(&last));
    writer.rollback().await.unwrap();
    reader.commit().await.unwrap();

    // Behind another maker: an error within about 200 ms, not a wait.
    let mut maker = db.pool.begin().await.unwrap();
    let _: i32 = sqlx::query_scalar("SELECT hl_draw_partitions('2031-03-01', '2031-03-01')")
        .fetch_one(&mut *maker)
        .await
        .unwrap();
    let t = Instant::now();
    let err = sqlx::query_scalar::<_, i32>("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(
        err.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("55P03"),
        "{err}"
    );
    maker.commit().await.unwrap();
    let made: i32 = sqlx::query_scalar("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(made, 0);
}

/// The statistics refresh (0045, 0047) sees months, not the parent: the
/// rows a writer says it wrote into `ledger_draw` make this month's
/// partition due, never the parent (whose ANALYZE would read every month)
/// nor an old month's partition.
#[tokio::test]
async fn the_statistics_refresh_names_the_months_partitions_not_the_parent() {
    let db = sample_billed_through("2026-10").await;
    let _: i32 = sqlx::query_scalar("SELECT hl_draw_partitions_ahead()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let this_month = partition_from_now(&db.pool, 0).await;
    let stale = |written: i64| {
        let pool = db.pool.clone();
        async move {
            let names: Vec<String> = sqlx::query_scalar("SELECT hl_stale_tables(ARRAY['ledger_draw'], ARRAY[$1])")
                .bind(written)
                .fetch_one(&pool)
                .await
                .unwrap();
            names
        }
    };
    // The sample's months, too few rows each to be due by their own counts,
    // were never analyzed; an open month's is analyzed once a writer names
    // the table, whichever month it is (a month billed late).
    let january = "ledger_draw_2026_01".to_owned();
    let february = "ledger_draw_2026_02".to_owned();
    let quiet = stale(0).await;
    assert!(!quiet.contains(&this_month) && !quiet.contains(&january), "{quiet:?}");
    let busy = stale(1_000_000).await;
    assert!(busy.contains(&this_month) && busy.contains(&january), "{busy:?}");
    assert!(!busy.iter().any(|t| t == "ledger_draw"), "{busy:?}");
    for (table, expected) in [
        (this_month.as_str(), true),
        (january.as_str(), true),
        ("pg_class", false),
    ] {
        let done: bool = sqlx::query_scalar("SELECT hl_analyze($1)")
            .bind(table)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(done, expected, "{table}");
    }
    // Analyzed, an old open month is left to its own counts (a center that
    // never closes would otherwise analyze every month after every import);
    // this month stays the writer's; February, never analyzed, too.
    let busy = stale(1_000_000).await;
    assert!(!busy.contains(&january), "{busy:?}");
    assert!(busy.contains(&this_month) && busy.contains(&february), "{busy:?}");
}

/// A ledger of the schema before (migration 0046) keeps every draw row,
/// and the table's privileges, through the migration.
#[tokio::test]
async fn a_ledger_of_the_schema_before_keeps_its_draws() {
    let db = TestDb::unmigrated().await;
    let before = Migrator {
        migrations: Cow::Owned(MIGRATOR.iter().filter(|m| m.version <= 46).cloned().collect()),
        ignore_missing: false,
        locking: true,
        no_tx: false,
    };
    before.run(&db.pool).await.unwrap();
    let config = hpc_ledger::config::parse(crate::harness::EXAMPLE).unwrap();
    hpc_ledger::service::config::apply(&db.pool, &config, "test")
        .await
        .unwrap();
    import_sample_jobs(&db.pool).await;
    hpc_ledger::service::storage::bill_through(
        &db.pool,
        "2026-10".parse().unwrap(),
        "billing",
        false,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    close_by_hand(&db.pool, "2026-01-01").await;
    let kind: String = sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE oid = 'ledger_draw'::regclass")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kind, "r");
    let acl = "SELECT coalesce(array_agg(a.grantee::regrole::text || ':' || a.privilege_type ORDER BY 1), '{}')
                 FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
                WHERE c.oid = 'ledger_draw'::regclass AND a.grantee <> c.relowner";
    let grants: Vec<String> = sqlx::query_scalar(acl).fetch_one(&db.pool).await.unwrap();
    let rows = draws(&db.pool, None).await;
    assert!(rows.len() > 20, "{}", rows.len());

    MIGRATOR.run(&db.pool).await.unwrap();
    let kind: String = sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE oid = 'ledger_draw'::regclass")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(kind, "p");
    assert_eq!(draws(&db.pool, None).await, rows);
    assert_eq!(misplaced(&db.pool).await, 0);
    let after: Vec<String> = sqlx::query_scalar(acl).fetch_one(&db.pool).await.unwrap();
    assert_eq!(after, grants);
    let parts = partitions(&db.pool).await;
    assert_eq!(
        parts.first().map(String::as_str),
        Some("ledger_draw_2026_01"),
        "{parts:?}"
    );
    assert!(parts.contains(&partition_from_now(&db.pool, 2).await), "{parts:?}");
    // The audit (its views read the new table) finds nothing, the fold of
    // the closed month still to do included.
    ok(&db.cli(&["audit"]));
    let folded: i32 = sqlx::query_scalar("SELECT hl_fold_rollups()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(folded, 1);
    ok(&db.cli(&["audit"]));
}
