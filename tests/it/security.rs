//! Least privilege, hostile identifiers, and secrets.

use sqlx::PgPool;

use crate::harness::{TestDb, cli_with_env, ok, stderr, stdout};

/// A login role in a group role; dropped at the end of the test.
struct Login {
    name: String,
    pool: PgPool,
}

impl Login {
    async fn new(db: &TestDb, group: &str) -> Login {
        let name = format!(
            "hl_{}_{}",
            group.trim_start_matches("hpc_ledger_"),
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        sqlx::raw_sql(&format!("CREATE ROLE {name} LOGIN IN ROLE {group}"))
            .execute(&db.pool)
            .await
            .unwrap();
        Login {
            name,
            pool: db.pool.clone(),
        }
    }

    fn url(&self, db: &TestDb) -> String {
        let mut u = url::Url::parse(&db.url).unwrap();
        u.set_username(&self.name).unwrap();
        u.to_string()
    }

    async fn drop(self) {
        let _ = sqlx::raw_sql(&format!("DROP ROLE {}", self.name))
            .execute(&self.pool)
            .await;
    }
}

fn run(url: &str, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    cli_with_env(args, &[("DATABASE_URL", url)], stdin)
}

const JOB: &str = r#"{"cluster":"owens","job_id":"901","project":"PAS1234","queue":"batch","cores":2,"start":"2026-10-05T09:00:00-04:00","end":"2026-10-05T10:00:00-04:00"}"#;

#[tokio::test]
async fn each_role_does_its_own_job_and_nothing_else() {
    let db = TestDb::with_example().await;
    let ingest = Login::new(&db, "hpc_ledger_ingest").await;
    let billing = Login::new(&db, "hpc_ledger_billing").await;
    let auditor = Login::new(&db, "hpc_ledger_auditor").await;
    let (iu, bu, au) = (ingest.url(&db), billing.url(&db), auditor.url(&db));

    // Ingest records jobs, and nothing else.
    assert!(ok(&run(&iu, &["job", "record", "--json"], Some(JOB))).starts_with("recorded owens/901"));
    // A job of a commercial project gets its class's card and discount line
    // (migration 0026): 2 cores × 1 h × 0.04 = 0.08, less 10 % = -0.01 (0.008).
    let commercial = JOB.replace("\"901\"", "\"905\"").replace("PAS1234", "IND0001");
    assert_eq!(
        ok(&run(&iu, &["job", "record", "--json"], Some(&commercial))),
        "recorded owens/905: 2 entries totalling 0.07 in 2026-10\n"
    );
    // But ingest cannot discount a charge the rules do not discount.
    let pool = hpc_ledger::db::connect(&iu).await.unwrap();
    let e = sqlx::raw_sql(
        "INSERT INTO ledger_entry (period, project_id, kind, metric, job_record_id, rate_card_id, corrects_id,
                                   quantity, unit_rate, amount_exact, amount, charging_rules, author, discount_id)
         SELECT c.period, c.project_id, 'discount', c.metric, c.job_record_id, c.rate_card_id, c.id, 0, 0,
                -(c.amount / 10), round(-(c.amount / 10), 2), 2, 'ingest', (SELECT min(id) FROM discount)
           FROM ledger_entry c JOIN job_record r ON r.id = c.job_record_id JOIN job j ON j.id = r.job_id
          WHERE j.scheduler_job_id = '901' AND c.kind = 'job'",
    )
    .execute(&pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not apply the discount in force"), "{e}");
    pool.close().await;
    // An import with a rejection, the rejection list, a quote, the configuration.
    let jobs = "{\"cluster\":\"owens\",\"job_id\":\"902\",\"project\":\"PAS1234\",\"queue\":\"batch\",\"cores\":1,\
                \"start\":\"2026-10-06T09:00:00-04:00\",\"end\":\"2026-10-06T10:00:00-04:00\"}\n{\"cluster\":\"nowhere\"}\n";
    let o = run(&iu, &["import", "--format", "jsonl", "-"], Some(jobs));
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stdout(&o).contains("recorded:    1 "), "{}", stdout(&o));
    assert!(ok(&run(&iu, &["rejected"], None)).contains("malformed"));
    let q = [
        "quote",
        "--cluster",
        "pitzer",
        "--resources",
        "nodes=1:ppn=2",
        "--walltime",
        "1:00:00",
        "--queue",
        "batch",
    ];
    assert!(ok(&run(&iu, &q, None)).contains("total: USD"));
    assert!(ok(&run(&iu, &["config", "show"], None)).contains("owens"));

    let refused = |o: std::process::Output, what: &str| {
        assert!(!o.status.success(), "{what} was allowed");
        let e = stderr(&o);
        assert!(
            e.contains("permission denied") || e.contains("row-level security"),
            "{what}: {e}"
        );
        // With the hint, also when row-level security refused it (it had
        // none then: a security review of 2026-12-07).
        assert!(
            e.contains("hint: the database role in use may not do this"),
            "{what}: {e}"
        );
    };
    refused(
        run(
            &iu,
            &["adjust", "--project", "PAS1234", "--amount", "-5", "--reason", "x"],
            None,
        ),
        "ingest adjust",
    );
    refused(
        run(&iu, &["bill", "storage", "--month", "2026-10"], None),
        "ingest bill",
    );
    refused(
        run(&iu, &["quota", "set", "PAS1234", "1TB", "--from", "2026-12-01"], None),
        "ingest quota",
    );
    refused(run(&iu, &["db", "migrate"], None), "ingest migrate");
    let example = crate::harness::example_path();
    refused(
        run(&iu, &["config", "apply", example.to_str().unwrap()], None),
        "ingest config",
    );

    // Billing bills, corrects and closes; the configuration stays the owner's.
    ok(&run(
        &bu,
        &["bill", "storage", "--month", "2026-01", "--waive", "pilot month"],
        None,
    ));
    ok(&run(&bu, &["bill", "storage", "--through", "2026-10"], None));
    ok(&run(
        &bu,
        &[
            "adjust",
            "--project",
            "PAS1234",
            "--amount",
            "-5.00",
            "--reason",
            "credit",
            "--month",
            "2026-10",
        ],
        None,
    ));
    ok(&run(
        &bu,
        &[
            "refund",
            "--cluster",
            "owens",
            "--job-id",
            "901",
            "--fraction",
            "1",
            "--reason",
            "test job",
        ],
        None,
    ));
    ok(&run(
        &bu,
        &["quota", "set", "PAS1234", "25TB", "--from", "2026-12-01"],
        None,
    ));
    // Ingest reads what the web view shows (migration 0030) but cannot close.
    refused(run(&iu, &["close", "--through", "2026-10"], None), "ingest close");
    assert!(
        ok(&run(
            &iu,
            &[
                "statement",
                "--project",
                "PAS1234",
                "--month",
                "2026-10",
                "--format",
                "html"
            ],
            None
        ))
        .contains("id=\"chart-total\""),
        "serve's web view, as ingest, renders a statement with its chart"
    );
    ok(&run(&bu, &["close", "--through", "2026-10"], None));
    assert!(
        ok(&run(
            &bu,
            &["statement", "--project", "PAS1234", "--month", "2026-10"],
            None
        ))
        .contains("final")
    );
    refused(
        run(&bu, &["config", "apply", example.to_str().unwrap()], None),
        "billing config",
    );

    // The auditor audits, and cannot record or read the tables directly.
    assert!(ok(&run(&au, &["audit"], None)).starts_with("every charge recomputed in SQL matches the ledger"));
    assert!(ok(&run(&au, &["verify"], None)).contains("2026-10: seal holds"));
    refused(run(&au, &["job", "record", "--json"], Some(JOB)), "auditor record");
    refused(
        run(&au, &["statement", "--project", "PAS1234", "--month", "2026-10"], None),
        "auditor statement",
    );

    // No application role can change or remove a ledger entry.
    for login in [&ingest, &billing] {
        let pool = hpc_ledger::db::connect(&login.url(&db)).await.unwrap();
        for sql in [
            "UPDATE ledger_entry SET amount = 0",
            "DELETE FROM ledger_entry",
            "TRUNCATE ledger_entry",
        ] {
            let e = sqlx::raw_sql(sql).execute(&pool).await.unwrap_err().to_string();
            assert!(
                e.contains("permission denied") || e.contains("append-only"),
                "{}: {sql}: {e}",
                login.name
            );
        }
        pool.close().await;
    }
    for l in [ingest, billing, auditor] {
        l.drop().await;
    }
}

#[tokio::test]
async fn hostile_codes_and_ids_are_stored_and_shown_verbatim() {
    let db = TestDb::with_example().await;
    let code = r#"x'); DROP TABLE ledger_entry; --"#;
    let job_id = r#"1"; DELETE FROM job; --"#;
    let user = "robert'); DROP TABLE students;--";
    let config = format!(
        "{}\n[[project]]\ncode = {:?}\nname = \"<script>alert(1)</script>\"\npi = \"Mallory\"\n",
        std::fs::read_to_string(crate::harness::example_path()).unwrap(),
        code
    );
    hpc_ledger::service::config::apply(&db.pool, &hpc_ledger::config::parse(&config).unwrap(), "t")
        .await
        .unwrap();
    let job = serde_json::json!({
        "cluster": "owens", "job_id": job_id, "project": code, "queue": "batch", "cores": 1,
        "user": user, "job_name": "$(rm -rf /)",
        "start": "2026-10-05T09:00:00-04:00", "end": "2026-10-05T10:00:00-04:00"
    });
    let out = ok(&cli_with_env(
        &["job", "record", "--json"],
        &[("DATABASE_URL", &db.url)],
        Some(&job.to_string()),
    ));
    assert!(out.contains(job_id), "{out}");
    // Stored as given, and every table is still there.
    let stored: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT j.scheduler_job_id, r.user_name, r.job_name FROM job j JOIN job_record r ON r.job_id = j.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        vec![(job_id.to_owned(), Some(user.to_owned()), Some("$(rm -rf /)".to_owned()))]
    );
    let entries: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_entry e JOIN project p ON p.id = e.project_id WHERE p.code = $1",
    )
    .bind(code)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(entries, 1);
    // Shown as given.
    let text = ok(&db.cli(&["statement", "--project", code, "--month", "2026-10"]));
    assert!(
        text.contains(&format!("Project {code} — <script>alert(1)</script>")),
        "{text}"
    );
    let csv = ok(&db.cli(&["statement", "--project", code, "--month", "2026-10", "--format", "csv"]));
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .starts_with(&format!("{code},2026-10,provisional")),
        "{csv}"
    );
}

#[test]
fn passwords_never_appear_in_output_logs_or_help() {
    let url = "postgres://ledger:hunter2@127.0.0.1:9/hpc";
    // Maximum logging, a failing connection: the password appears nowhere.
    let o = cli_with_env(
        &["config", "show"],
        &[("DATABASE_URL", url), ("HPC_LEDGER_LOG", "trace")],
        None,
    );
    assert!(!o.status.success());
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("postgres://ledger:***@127.0.0.1:9/hpc"), "{all}");
    assert!(!all.contains("hunter2"), "{all}");
    // From a file, likewise.
    let file = std::env::temp_dir().join(format!("hl-url-{}", std::process::id()));
    std::fs::write(&file, format!("{url}\n")).unwrap();
    let o = cli_with_env(
        &["db", "status"],
        &[
            ("HPC_LEDGER_DATABASE_URL_FILE", file.to_str().unwrap()),
            ("HPC_LEDGER_LOG", "trace"),
        ],
        None,
    );
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("ledger:***@127.0.0.1:9"), "{all}");
    assert!(!all.contains("hunter2"), "{all}");
    std::fs::remove_file(file).unwrap();
    for args in [&["--help"][..], &["import", "--help"], &["db", "--help"]] {
        let o = cli_with_env(
            args,
            &[("DATABASE_URL", url), ("HPC_LEDGER_DATABASE_URL_FILE", "/secret/path")],
            None,
        );
        let text = stdout(&o);
        assert!(text.contains("--database-url"), "{text}");
        assert!(!text.contains("hunter2") && !text.contains("/secret/path"), "{text}");
    }
}

/// A login that holds none of the ledger's roles (another application's,
/// on a shared server) may not call the functions that run with the
/// owner's rights to read what the tables refuse it (migration 0054: a
/// month's finance journal, a project's balance); no such function is
/// left to PUBLIC, so a later migration cannot leave one either.
#[tokio::test]
async fn owner_rights_functions_are_not_public() {
    let db = TestDb::new().await;
    let open: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'public' AND p.prosecdef AND has_function_privilege('public', p.oid, 'EXECUTE')
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(open.is_empty(), "owner's rights, executable by PUBLIC: {open:?}");
    let mut conn = db.pool.acquire().await.unwrap();
    let nobody = format!("hl_nobody_{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    sqlx::raw_sql(&format!("CREATE ROLE {nobody}; SET ROLE {nobody}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let journal = sqlx::raw_sql("SELECT * FROM hl_journal_lines('2026-10-01')")
        .execute(&mut *conn)
        .await;
    let balance = sqlx::raw_sql("SELECT hl_balance(1, now())").execute(&mut *conn).await;
    sqlx::raw_sql(&format!("RESET ROLE; DROP ROLE {nobody}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    for refused in [journal, balance] {
        let e = refused.expect_err("a login without the ledger's roles").to_string();
        assert!(e.contains("permission denied for function"), "{e}");
    }
}
