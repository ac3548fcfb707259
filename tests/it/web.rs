//! The read-only web view in `serve` (docs/web.md), fetched over HTTP as a
//! browser would: who sees what (billing office, a project's token, no
//! one), the numbers on the pages and in the downloads against the ledger,
//! paging, and tokens revoked or expired.

use std::path::Path;
use std::sync::Arc;

use chrono::{TimeDelta, Utc};
use hpc_ledger::domain::period::Month;
use hpc_ledger::ingest::Format;
use hpc_ledger::serve::client::{self, Reply};
use hpc_ledger::serve::{Credentials, Metrics, Options, ServeError, serve};
use hpc_ledger::service::storage::bill_through;
use hpc_ledger::service::web::grant;
use rust_decimal::Decimal;
use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::harness::{TestDb, import_file, ok};

pub(crate) const BILLING: &str = "Bearer billing-office-secret";

pub(crate) struct Running {
    addr: std::net::SocketAddr,
    pub(crate) stop: oneshot::Sender<()>,
    pub(crate) done: JoinHandle<Result<(), ServeError>>,
}

pub(crate) fn start(pool: &PgPool) -> Running {
    start_with(pool, Credentials::none().with_token("billing-office-secret").unwrap())
}

fn start_with(pool: &PgPool, web: Credentials) -> Running {
    let listener = hpc_ledger::serve::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let options = Options {
        credentials: Credentials::none(),
        checks: Credentials::none(),
        web,
        reader: None,
        max_batch: 10,
        supersede: false,
        author: "web-test".into(),
        limits: hpc_ledger::serve::conn::Limits::default(),
        restart: None,
        intake: false,
        fold_every: hpc_ledger::service::FOLD_EVERY,
    };
    let done = tokio::spawn(serve(
        pool.clone(),
        listener,
        options,
        Arc::new(Metrics::new()),
        async {
            let _ = stopped.await;
        },
    ));
    Running { addr, stop, done }
}

impl Running {
    pub(crate) async fn get(&self, path: &str, auth: Option<&str>) -> Reply {
        match auth {
            Some(a) => client::get_as(self.addr, path, a).await.unwrap(),
            None => client::get(self.addr, path).await.unwrap(),
        }
    }
}

/// The number in the `data-amount` of the element after `marker`.
fn amount_after(html: &str, marker: &str) -> Decimal {
    let at = html.find(marker).unwrap_or_else(|| panic!("{marker} not in the page"));
    let rest = &html[at..];
    let start = rest.find("data-amount=\"").unwrap() + "data-amount=\"".len();
    rest[start..start + rest[start..].find('"').unwrap()].parse().unwrap()
}

async fn ledger_total(pool: &PgPool, code: &str, month: &str) -> Decimal {
    sqlx::query_scalar(
        "SELECT coalesce(sum(e.amount), 0) FROM ledger_entry e JOIN project p ON p.id = e.project_id
          WHERE p.code = $1 AND e.period = $2::date",
    )
    .bind(code)
    .bind(format!("{month}-01"))
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_web_view_shows_each_viewer_what_it_may_see_with_the_ledgers_numbers() {
    let db = TestDb::with_example().await;
    for (file, format, cluster) in [
        ("owens-sacct.txt", Format::Slurm, None),
        ("pitzer-accounting-202610.log", Format::Pbs, Some("pitzer")),
        ("jobs.jsonl", Format::Jsonl, None),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs").join(file);
        import_file(&db.pool, &path, file, format, cluster).await;
    }
    let billed = bill_through(
        &db.pool,
        "2026-11".parse::<Month>().unwrap(),
        "billing",
        false,
        Utc::now(),
    )
    .await
    .unwrap();
    assert!(billed.stopped.is_none());
    ok(&db.cli(&[
        "refund",
        "--cluster",
        "owens",
        "--job-id",
        "1002",
        "--fraction",
        "0.5",
        "--reason",
        "slow <disk>",
    ]));
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
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
    let pas = grant(
        &db.pool,
        "PAS1234",
        Utc::now() + TimeDelta::days(30),
        Some("Lovelace lab"),
        "billing",
    )
    .await
    .unwrap();
    let pzs = grant(&db.pool, "PZS0708", Utc::now() + TimeDelta::days(30), None, "billing")
        .await
        .unwrap();
    let brief = grant(&db.pool, "PAA0042", Utc::now() + TimeDelta::seconds(2), None, "billing")
        .await
        .unwrap();
    let token = format!("Bearer {}", pas.token);
    // A browser sends it as Basic's password, with any user name.
    let as_basic = client::basic(&format!("lovelace:{}", pas.token));
    let s = start(&db.pool);

    // Nobody without a credential; a wrong one is the same.
    for path in [
        "/ui",
        "/ui/projects/PAS1234",
        "/ui/projects/PAS1234/statements/2026-10.pdf",
    ] {
        let r = s.get(path, None).await;
        assert_eq!(r.status, 401, "{path}");
        assert!(r.header("www-authenticate").unwrap().starts_with("Basic"), "{path}");
        assert_eq!(s.get(path, Some("Bearer hlv_nope")).await.status, 401, "{path}");
    }

    // A project's token goes to its project and sees nothing else; another
    // project and a project that does not exist are the same 404.
    let home = s.get("/ui", Some(&token)).await;
    assert_eq!(home.status, 303);
    assert_eq!(home.header("location"), Some("/ui/projects/PAS1234"));
    let other = s.get("/ui/projects/PZS0708", Some(&token)).await;
    let missing = s.get("/ui/projects/NOPE0000", Some(&token)).await;
    assert_eq!((other.status, missing.status), (404, 404));
    assert_eq!(
        other.body, missing.body,
        "a 404 does not say whether the project exists"
    );
    assert_eq!(
        s.get("/ui/projects/PZS0708/statements/2026-10.html", Some(&as_basic))
            .await
            .status,
        404
    );

    // The project's page: October's statement, chart and users are the ledger's.
    let page = s.get("/ui/projects/pas1234?month=2026-10", Some(&as_basic)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.header("content-security-policy")
            .unwrap()
            .contains("default-src 'none'")
    );
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert!(!page.body.contains("<script"));
    let october = ledger_total(&db.pool, "PAS1234", "2026-10").await;
    assert!(october > Decimal::ZERO);
    assert_eq!(amount_after(&page.body, "id=\"total\""), october);
    assert_eq!(amount_after(&page.body, "id=\"chart-total\""), october);
    let users = &page.body[page.body.find("<table id=\"users\">").unwrap()..];
    assert_eq!(amount_after(users, "<tfoot>"), october);
    // Largest amount first, as the statement lists them.
    let rows = &users[..users.find("<tfoot>").unwrap()];
    let amounts: Vec<Decimal> = rows
        .split("data-amount=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
        .collect();
    assert!(
        amounts.len() > 1 && amounts.windows(2).all(|w| w[0] >= w[1]),
        "{amounts:?}"
    );
    assert!(page.body.contains("statement No. "), "final: numbered");
    // Every month with its statement number and total, as closed.
    let statements: Vec<(i64, Decimal)> = sqlx::query_as(
        "SELECT s.number, s.total FROM statement s JOIN project p ON p.id = s.project_id
          WHERE p.code = 'PAS1234' ORDER BY s.period",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(statements.len(), 10);
    let months = &page.body[page.body.find("<table id=\"months\">").unwrap()..];
    for (number, total) in &statements {
        let row = &months[months.find(&format!("final, No. {number}<")).unwrap()..];
        assert_eq!(amount_after(row, "<td"), *total, "statement {number}");
    }
    // The open month (November) with what is posted into it so far.
    let november = ledger_total(&db.pool, "PAS1234", "2026-11").await;
    let open = &months[months.find("open (provisional)").unwrap()..];
    assert_eq!(amount_after(open, "<td"), november);
    // The budget, as `balance` gives it.
    let balance = hpc_ledger::service::budget::balance(&db.pool, "PAS1234", Utc::now())
        .await
        .unwrap();
    let budget = &page.body[page.body.find("<table id=\"budget\">").unwrap()..];
    assert_eq!(amount_after(budget, "<tbody>"), balance.balance.allocated);

    // This month's storage is not billed yet, and the page says so.
    let now = s.get("/ui/projects/PAS1234", Some(&token)).await;
    assert!(
        now.body.contains("Storage (not billed yet: this changes)"),
        "{}",
        now.body
    );
    assert!(!page.body.contains("not billed yet"), "October is billed");
    // Jobs, newest first, and the next page older than a given record;
    // when they ended, in the center's zone (its months are).
    let jobs = &page.body[page.body.find("<table id=\"jobs\">").unwrap()..];
    assert!(
        !jobs.contains(" UTC<") && (jobs.contains(" EST<") || jobs.contains(" EDT<")),
        "{jobs}"
    );
    // A PBS record's type is not shown as its state (a PI read "E").
    assert!(
        jobs.contains("<td>ended</td>") && !jobs.contains("<td>E</td>"),
        "{jobs}"
    );
    let shown = jobs.matches("<tr>").count() - 1;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT r.id FROM job_record r JOIN project p ON p.id = r.project_id WHERE p.code = 'PAS1234' ORDER BY r.id DESC",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(shown, ids.len().min(50));
    let older = s
        .get(
            &format!("/ui/projects/PAS1234?month=2026-10&before={}", ids[2]),
            Some(&token),
        )
        .await;
    let jobs = &older.body[older.body.find("<table id=\"jobs\">").unwrap()..];
    assert_eq!(jobs.matches("<tr>").count() - 1, ids.len() - 3);
    assert_eq!(
        s.get("/ui/projects/PAS1234?month=10-2026", Some(&token)).await.status,
        400
    );

    // Downloads: the document, the PDF and the CSV of the same statement.
    let html = s
        .get("/ui/projects/PAS1234/statements/2026-10.html", Some(&token))
        .await;
    assert_eq!(html.status, 200);
    assert!(
        html.header("content-disposition")
            .unwrap()
            .contains("statement-PAS1234-2026-10.html")
    );
    assert_eq!(amount_after(&html.body, "id=\"total\""), october);
    assert!(html.body.contains("slow &lt;disk&gt;"), "escaped");
    // A document opened from the downloads runs no script either.
    assert!(
        html.header("content-security-policy")
            .unwrap()
            .contains("default-src 'none'")
    );
    let pdf = s.get("/ui/projects/PAS1234/statements/2026-10.pdf", Some(&token)).await;
    assert_eq!(pdf.header("content-type"), Some("application/pdf"));
    assert!(pdf.bytes.starts_with(b"%PDF-"));
    let csv = s.get("/ui/projects/PAS1234/statements/2026-10.csv", Some(&token)).await;
    let amounts: Decimal = csv
        .body
        .lines()
        .skip(1)
        .filter(|l| !l.contains(",total,"))
        .map(|l| l.rsplit(',').next().unwrap().parse::<Decimal>().unwrap())
        .sum();
    assert_eq!(amounts, october, "{}", csv.body);
    assert_eq!(
        s.get("/ui/projects/PAS1234/statements/2026-10.exe", Some(&token))
            .await
            .status,
        404
    );
    // No statement or page of a month that cannot have one: none after this
    // month, none before 1990 (0000-01 and 9999-12 were rendered, a PDF a
    // request: a security review of 2026-12-07).
    for path in [
        "/ui/projects/PAS1234/statements/0000-01.html",
        "/ui/projects/PAS1234/statements/9999-12.pdf",
    ] {
        assert_eq!(s.get(path, Some(&token)).await.status, 404, "{path}");
    }
    for path in ["/ui/projects/PAS1234?month=0001-01", "/ui?month=9999-12"] {
        let r = s
            .get(path, Some(if path.starts_with("/ui?") { BILLING } else { &token }))
            .await;
        assert_eq!(r.status, 400, "{path}");
        assert!(r.body.contains("is not a month the ledger can show"), "{}", r.body);
    }

    // The billing office: every project, November's spend, the balances.
    let list = s.get("/ui?month=2026-11", Some(BILLING)).await;
    assert_eq!(list.status, 200);
    for code in ["IND0001", "PAA0042", "PAS1234", "PDE0001", "PZS0708"] {
        let row = &list.body[list.body.find(&format!(">{code}</a>")).unwrap()..];
        assert_eq!(
            amount_after(row, "<td"),
            ledger_total(&db.pool, code, "2026-11").await,
            "{code}"
        );
    }
    // A project's page opens at the month listed.
    assert!(
        list.body.contains("href=\"/ui/projects/PAS1234?month=2026-11\""),
        "{}",
        list.body
    );
    let row = &list.body[list.body.find(">PAS1234</a>").unwrap()..];
    let remaining = &row[row.find("every cluster").unwrap() - 60..];
    assert_eq!(amount_after(remaining, "<span"), balance.balance.remaining);
    assert_eq!(
        s.get("/ui/projects/PZS0708?month=2026-10", Some(BILLING)).await.status,
        200
    );

    // Revoked and expired tokens see nothing.
    assert_eq!(
        s.get("/ui/projects/PZS0708", Some(&format!("Bearer {}", pzs.token)))
            .await
            .status,
        200
    );
    ok(&db.cli(&["access", "revoke", &pzs.id.to_string()]));
    assert_eq!(
        s.get("/ui/projects/PZS0708", Some(&format!("Bearer {}", pzs.token)))
            .await
            .status,
        401
    );
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert_eq!(
        s.get("/ui/projects/PAA0042", Some(&format!("Bearer {}", brief.token)))
            .await
            .status,
        401
    );
    let listed = ok(&db.cli(&["access", "list"]));
    assert!(
        listed.contains("revoked") && listed.contains("expired") && listed.contains("Lovelace lab"),
        "{listed}"
    );
    assert!(!listed.contains(&pas.token), "a token is never shown again");
    // In the billing time zone (America/New_York), as every other listing
    // (they were in UTC, unlabelled).
    assert!(
        (listed.contains(" EST") || listed.contains(" EDT")) && !listed.contains(" UTC"),
        "{listed}"
    );
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM access_token WHERE position($1::bytea in token_hash) > 0")
            .bind(pas.token.as_bytes())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, 0, "only the hash is kept");

    let _ = s.stop.send(());
    s.done.await.unwrap().unwrap();
}

#[tokio::test]
async fn links_to_a_code_with_spaces_and_slashes_lead_to_it_and_no_billing_credential_means_no_list() {
    let db = TestDb::with_example().await;
    // A code is the scheduler's account name: almost any text.
    let code = "Lab A+B/x.y";
    sqlx::query("INSERT INTO project (code, name, pi) VALUES ($1, 'Odd name', 'Dr. Odd')")
        .bind(code)
        .execute(&db.pool)
        .await
        .unwrap();
    let odd = grant(&db.pool, code, Utc::now() + TimeDelta::days(1), None, "billing")
        .await
        .unwrap();
    let token = format!("Bearer {}", odd.token);

    // The billing office signs in with HTTP Basic; its list links the code
    // as one path segment, and following the link shows that project.
    let s = start_with(&db.pool, Credentials::none().with_basic("office:pa55").unwrap());
    let office = client::basic("office:pa55");
    assert_eq!(s.get("/ui", Some(&client::basic("office:wrong"))).await.status, 401);
    let list = s.get("/ui", Some(&office)).await;
    assert_eq!(list.status, 200, "{}", list.body);
    let href = "/ui/projects/Lab%20A%2BB%2Fx%2Ey";
    assert!(list.body.contains(&format!("href=\"{href}?month=")), "{}", list.body);
    let page = s.get(href, Some(&office)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<h1>Lab A+B/x.y — Odd name</h1>"), "{}", page.body);
    // The project's token is sent to the same place.
    let home = s.get("/ui", Some(&token)).await;
    assert_eq!((home.status, home.header("location")), (303, Some(href)));
    // A plus is a plus in a path, not a space.
    assert_eq!(s.get("/ui/projects/Lab+A%2BB%2Fx.y", Some(&token)).await.status, 404);
    let _ = s.stop.send(());
    s.done.await.unwrap().unwrap();

    // Without a billing-office credential configured the list is nobody's:
    // only project tokens get in.
    let s = start_with(&db.pool, Credentials::none());
    assert_eq!(s.get("/ui", None).await.status, 401);
    assert_eq!(s.get("/ui", Some(&office)).await.status, 401);
    assert_eq!(s.get(href, None).await.status, 401);
    assert_eq!(s.get(href, Some(&token)).await.status, 200);
    let _ = s.stop.send(());
    s.done.await.unwrap().unwrap();
}
