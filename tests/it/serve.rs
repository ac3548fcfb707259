//! `serve`: Slurm's real jobcomp bodies posted over HTTP charge exactly what
//! importing sacct's output charges; replays, revisions, conflicts, bad
//! input and credentials get the replies Slurm needs; concurrent posts are
//! committed together; a stop loses no accepted job.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use hpc_ledger::domain::posting::RejectKind;
use hpc_ledger::ingest::Format;
use hpc_ledger::serve::client::{self, Reply};
use hpc_ledger::serve::{Credentials, Metrics, Options, ServeError, serve};
use hpc_ledger::service::import::{Summary, retry_rejected};
use hpc_ledger::service::record::{RecordOptions, Recorder};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::fixtures::{fixture_db, stripped};
use crate::harness::import_file;
use crate::harness::until;

const USER_PASSWORD: &str = "slurm:jobc0mp-s3cret";

struct Running {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    stop: oneshot::Sender<()>,
    done: JoinHandle<Result<(), ServeError>>,
}

async fn start(pool: &PgPool, credentials: Credentials) -> Running {
    start_with(pool, credentials, false).await
}

async fn start_with(pool: &PgPool, credentials: Credentials, supersede: bool) -> Running {
    start_limited(
        pool,
        credentials,
        supersede,
        hpc_ledger::serve::conn::Limits::default(),
        false,
    )
    .await
}

/// `serve --intake`: answered once stored, recorded in batches.
async fn start_intake(pool: &PgPool, credentials: Credentials) -> Running {
    start_limited(
        pool,
        credentials,
        false,
        hpc_ledger::serve::conn::Limits::default(),
        true,
    )
    .await
}

async fn start_limited(
    pool: &PgPool,
    credentials: Credentials,
    supersede: bool,
    limits: hpc_ledger::serve::conn::Limits,
    intake: bool,
) -> Running {
    let listener = hpc_ledger::serve::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    let (stop, stopped) = oneshot::channel::<()>();
    let options = Options {
        credentials,
        checks: Credentials::none(),
        web: Credentials::none(),
        reader: None,
        max_batch: 500,
        supersede,
        author: "serve-test".into(),
        limits,
        restart: None,
        intake,
        // Often, so a test sees the rollups folded.
        fold_every: std::time::Duration::from_millis(300),
    };
    let done = tokio::spawn(serve(pool.clone(), listener, options, metrics.clone(), async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        metrics,
        stop,
        done,
    }
}

impl Running {
    async fn post(&self, path: &str, body: &str) -> Reply {
        client::post(self.addr, path, Some(&client::basic(USER_PASSWORD)), body.as_bytes())
            .await
            .unwrap()
    }

    async fn post_bytes(&self, path: &str, body: &[u8]) -> Reply {
        client::post(self.addr, path, Some(&client::basic(USER_PASSWORD)), body)
            .await
            .unwrap()
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.done.await.unwrap().unwrap();
    }
}

fn basic_only() -> Credentials {
    Credentials::none().with_basic(USER_PASSWORD).unwrap()
}

/// The real bodies, one per line, `#` header stripped.
fn jobcomp_bodies() -> Vec<String> {
    let text = std::fs::read_to_string(stripped("slurm_2205_lab_jobcomp.jsonl")).unwrap();
    text.lines().map(str::to_owned).collect()
}

fn body(reply: &Reply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

/// Every job's charges: `cluster/job[_index]` -> [(metric, quantity, amount)].
async fn ledger(pool: &PgPool) -> BTreeMap<String, Vec<(String, String, String)>> {
    let rows: Vec<(String, String, Option<i32>, String, String, String)> = sqlx::query_as(
        "SELECT c.name, j.scheduler_job_id, j.array_index, e.metric::text, e.quantity::text, e.amount::text
           FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id
           JOIN job j ON j.id = r.job_id JOIN cluster c ON c.id = j.cluster_id
          ORDER BY 1, 2, 3, 4",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for (cluster, job, index, metric, quantity, amount) in rows {
        let key = match index {
            Some(i) => format!("{cluster}/{job}_{i}"),
            None => format!("{cluster}/{job}"),
        };
        out.entry(key).or_default().push((metric, quantity, amount));
    }
    out
}

/// The jobcomp records whose read options say their times were read in UTC
/// (for `audit --deep` to read them again so).
async fn read_in_utc(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM job_record r JOIN record_read_options o ON o.id = r.read_options_id
          WHERE r.source_format = 'jobcomp' AND (o.options ->> 'jobcomp_utc')::boolean",
    )
    .await
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn slurms_real_pushes_charge_what_importing_sacct_charges() {
    let db = fixture_db().await;
    let server = start(&db.pool, basic_only()).await;
    let bodies = jobcomp_bodies();
    assert_eq!(bodies.len(), 17);

    // All at once, as a busy controller would.
    let mut posts = Vec::new();
    for b in bodies.clone() {
        let addr = server.addr;
        posts.push(tokio::spawn(async move {
            client::post(addr, "/slurm/_doc", Some(&client::basic(USER_PASSWORD)), b.as_bytes())
                .await
                .unwrap()
        }));
    }
    let mut statuses: BTreeMap<u16, u32> = BTreeMap::new();
    let mut skipped = 0;
    for p in posts {
        let r = p.await.unwrap();
        *statuses.entry(r.status).or_default() += 1;
        if body(&r)["outcome"] == "skipped" {
            skipped += 1;
        }
    }
    // 15 jobs ran; 9 and 12 were cancelled before they ran.
    assert_eq!(statuses, BTreeMap::from([(200, 2), (201, 15)]));
    assert_eq!(skipped, 2);

    // Slurm re-sends: replays, answered 200, charge nothing more.
    let entries = count(&db.pool, "SELECT count(*) FROM ledger_entry").await;
    for b in &bodies {
        let r = server.post("/slurm/_doc", b).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            ["replayed", "skipped"].contains(&body(&r)["outcome"].as_str().unwrap()),
            "{}",
            r.body
        );
    }
    assert_eq!(count(&db.pool, "SELECT count(*) FROM ledger_entry").await, entries);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 15);
    // Read as Slurm writes jobcomp's times: UTC (docs/rules.md).
    assert_eq!(read_in_utc(&db.pool).await, 15);

    // The other path: sacct's output of the same run, into a second ledger.
    let other = fixture_db().await;
    let s = import_file(
        &other.pool,
        &stripped("slurm_2205_lab_sacct_header.txt"),
        "sacct",
        Format::Slurm,
        None,
    )
    .await;
    assert_eq!(s.recorded, 16, "{s:#?}");
    let pushed = ledger(&db.pool).await;
    let imported = ledger(&other.pool).await;
    // Jobs 1-13 and the array 6_0..6_2 are in both; 16-18 only in sacct's
    // window, 19-20 only in the pushes.
    let common: Vec<&String> = pushed.keys().filter(|k| imported.contains_key(*k)).collect();
    assert_eq!(common.len(), 13, "{:?}", pushed.keys());
    for k in &common {
        assert_eq!(pushed[*k], imported[*k], "{k}: pushed vs imported");
    }
    // Worked by hand: multinode job 11 held 2 nodes of 4 cores for 3 s:
    // 8 × 3 / 3600 core-hours; hugemem job 3: 8 GB over 2 CPUs is under
    // 16 GB a core, so 2 cores for 4 s.
    assert_eq!(
        pushed["testclu/11"],
        vec![("core_hours".into(), "0.006666666667".into(), "0.00".into())]
    );
    assert_eq!(
        pushed["testclu/3"],
        vec![("core_hours".into(), "0.002222222222".into(), "0.00".into())]
    );
    assert!(pushed.contains_key("testclu/6_2") && pushed.contains_key("testclu/20"));

    // And importing sacct into the pushed ledger records nothing new.
    let again = import_file(
        &db.pool,
        &stripped("slurm_2205_lab_sacct_header.txt"),
        "sacct",
        Format::Slurm,
        None,
    )
    .await;
    assert_eq!(again.recorded, 3, "only 16-18, which Slurm did not push: {again:#?}");
    assert_eq!(again.replayed + again.revised, 13, "{again:#?}");
    server.stop().await;
}

#[tokio::test]
async fn re_sent_changes_bad_documents_and_credentials_get_the_right_reply() {
    let db = fixture_db().await;
    let server = start(&db.pool, basic_only()).await;
    let job20 = jobcomp_bodies().pop().unwrap();
    let mut doc: serde_json::Map<String, Value> = serde_json::from_str(&job20).unwrap();
    assert_eq!(doc["jobid"], 20);

    let r = server.post("/slurm/_doc", &job20).await;
    assert_eq!(
        (r.status, body(&r)["outcome"].as_str()),
        (201, Some("recorded")),
        "{}",
        r.body
    );
    // The batch script is not kept with the record.
    let raw: String = sqlx::query_scalar("SELECT raw FROM job_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(!raw.contains("script") && raw.contains("restartprobe"), "{raw}");

    // After a controller restart Slurm re-sends job 20 with another exit
    // code: a revision, no new charge.
    doc.insert("exit_code".into(), json!("0:15"));
    let r = server
        .post("/slurm/_doc", &Value::Object(doc.clone()).to_string())
        .await;
    assert_eq!(
        (r.status, body(&r)["outcome"].as_str()),
        (200, Some("revised")),
        "{}",
        r.body
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM ledger_entry").await, 1);

    // A re-send that changes the charge is kept as a conflict, answered 200
    // (else Slurm retries it forever), and charges nothing.
    doc.insert("tres_alloc".into(), json!("cpu=2,mem=50M,node=1,billing=2"));
    let r = server
        .post("/slurm/_doc", &Value::Object(doc.clone()).to_string())
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["outcome"], "rejected");
    assert_eq!(body(&r)["kind"], "conflict", "{}", r.body);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM ledger_entry").await, 1);

    // Well-formed but not chargeable now: kept, 200.
    doc.insert("jobid".into(), json!(21));
    doc.insert("account".into(), json!("nosuchproject"));
    let r = server
        .post("/slurm/_doc", &Value::Object(doc.clone()).to_string())
        .await;
    assert_eq!(
        (r.status, body(&r)["kind"].as_str()),
        (200, Some("unknown_project")),
        "{}",
        r.body
    );

    // Malformed: 400 with the reason, and kept too.
    let r = server.post("/slurm/_doc", r#"{"jobid":22,"@start":"noon"}"#).await;
    assert_eq!(r.status, 400);
    assert!(
        body(&r)["error"]
            .as_str()
            .unwrap()
            .contains("`@start` \"noon\" is not a time"),
        "{}",
        r.body
    );
    let r = server.post("/slurm/_doc", "this is not json").await;
    assert_eq!(r.status, 400);

    let kinds: Vec<(String, String)> =
        sqlx::query_as("SELECT kind::text, source_format FROM rejected_record ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let kinds: Vec<(&str, &str)> = kinds.iter().map(|(k, f)| (k.as_str(), f.as_str())).collect();
    assert_eq!(
        kinds,
        [
            ("conflict", "jobcomp"),
            ("unknown_project", "jobcomp"),
            ("malformed", "jobcomp"),
            ("malformed", "jobcomp")
        ]
    );
    // Kept records are read again as jobcomp documents: still the same reasons.
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("t"));
    let mut s = Summary::default();
    retry_rejected(&db.pool, &mut recorder, &mut s, &[]).await.unwrap();
    assert_eq!(
        (
            s.rejected[&RejectKind::Conflict],
            s.rejected[&RejectKind::UnknownProject],
            s.rejected[&RejectKind::Malformed]
        ),
        (1, 1, 2),
        "{s:#?}"
    );

    // Credentials: none, or wrong, is 401 and records nothing.
    let anon = client::post(server.addr, "/slurm/_doc", None, job20.as_bytes())
        .await
        .unwrap();
    assert_eq!(anon.status, 401);
    let wrong = client::post(
        server.addr,
        "/slurm/_doc",
        Some(&client::basic("slurm:guess")),
        job20.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(wrong.status, 401);

    // Health and metrics need no credentials.
    let h = client::get(server.addr, "/healthz").await.unwrap();
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    let m = client::get(server.addr, "/metrics").await.unwrap();
    for line in [
        "hpc_ledger_serve_jobs_total{outcome=\"recorded\"} 1\n",
        "hpc_ledger_serve_jobs_total{outcome=\"revised\"} 1\n",
        "hpc_ledger_serve_jobs_total{outcome=\"rejected\"} 2\n",
        "hpc_ledger_serve_jobs_total{outcome=\"malformed\"} 2\n",
        "hpc_ledger_serve_requests_total{status=\"401\"} 2\n",
    ] {
        assert!(m.body.contains(line), "{line} in\n{}", m.body);
    }
    server.stop().await;
}

#[tokio::test]
async fn with_supersede_a_changed_charge_replaces_the_old_one() {
    let db = fixture_db().await;
    let server = start_with(&db.pool, basic_only(), true).await;
    let job20 = jobcomp_bodies().pop().unwrap();
    assert_eq!(server.post("/slurm/_doc", &job20).await.status, 201);
    let mut doc: serde_json::Map<String, Value> = serde_json::from_str(&job20).unwrap();
    // Re-sent holding 2 CPUs instead of 1, for the same 3 s.
    doc.insert("tres_alloc".into(), json!("cpu=2,mem=50M,node=1,billing=2"));
    let r = server.post("/slurm/_doc", &Value::Object(doc).to_string()).await;
    assert_eq!(
        (r.status, body(&r)["outcome"].as_str()),
        (201, Some("superseded")),
        "{}",
        r.body
    );
    assert_eq!(body(&r)["reversed"], 1);
    // The old 1-core charge reversed exactly, the new 2-core one posted.
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT kind, quantity::text FROM ledger_entry ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let rows: Vec<(&str, &str)> = rows.iter().map(|(k, q)| (k.as_str(), q.as_str())).collect();
    assert_eq!(
        rows,
        [
            ("job", "0.000833333333"),
            ("job", "0.001666666667"),
            ("reversal", "-0.000833333333")
        ]
    );
    server.stop().await;
}

fn json_job(id: u32, project: &str) -> Value {
    json!({"cluster": "testclu", "job_id": id.to_string(), "project": project, "user": "alice",
           "queue": "regular", "nodes": 1, "cores": 2,
           "start": "2026-11-02T10:00:00Z", "end": "2026-11-02T12:00:00Z", "state": "COMPLETED"})
}

#[tokio::test]
async fn the_projects_own_json_one_job_or_many_all_or_nothing_when_malformed() {
    let db = fixture_db().await;
    let server = start(&db.pool, Credentials::none().with_token("t0ken").unwrap()).await;
    let bearer = Some("Bearer t0ken");
    let post = |b: Value| {
        let addr = server.addr;
        async move {
            client::post(addr, "/jobs", bearer, b.to_string().as_bytes())
                .await
                .unwrap()
        }
    };
    let r = post(json_job(1, "pas1234")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    // 2 cores × 2 h × 0.01.
    assert_eq!(body(&r)["amount"], "0.04");

    // One malformed element refuses the whole request.
    let mut bad = json_job(3, "pas1234");
    bad.as_object_mut().unwrap().remove("cores");
    let r = post(json!([json_job(2, "pas1234"), bad])).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        body(&r)["jobs"],
        json!([{"index": 1, "error": "missing field `cores`"}])
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 1);

    let r = post(json!([
        json_job(2, "pas1234"),
        json_job(1, "pas1234"),
        json_job(3, "nosuch")
    ]))
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let results = body(&r);
    let outcomes: Vec<&str> = results["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["recorded", "replayed", "rejected"]);
    assert_eq!(
        client::post(server.addr, "/jobs", None, b"{}").await.unwrap().status,
        401
    );
    server.stop().await;
}

/// `n` JSON jobs with ids from `first`, posted at once, one task each.
fn burst(addr: SocketAddr, first: u32, n: u32) -> Vec<JoinHandle<std::io::Result<Reply>>> {
    (first..first + n)
        .map(|id| {
            tokio::spawn(async move {
                client::post(addr, "/jobs", None, json_job(id, "pas1234").to_string().as_bytes()).await
            })
        })
        .collect()
}

/// Migration 0042: `serve` folds a closed month's rollups that its close
/// did not (a close is committed before its fold; here the database's own
/// close, which never folds), every `fold_every`.
#[tokio::test]
async fn serve_folds_a_closed_months_rollups() {
    let db = fixture_db().await;
    let server = start(&db.pool, Credentials::none()).await;
    // Two bursts, so at least two transactions append rows of the same keys.
    for first in [7000, 8000] {
        for p in burst(server.addr, first, 20) {
            let r = p.await.unwrap().unwrap();
            assert_eq!(r.status, 201, "{}", r.body);
        }
    }
    let rows = "SELECT count(*) FROM ledger_usage WHERE period = '2026-11-01'";
    let appended = count(&db.pool, rows).await;
    assert!(appended >= 2, "{appended}");
    crate::harness::close_by_hand(&db.pool, "2026-11-01").await;
    until(secs(20), ms(100), async || {
        (count(&db.pool, "SELECT count(*) FROM rollup_fold").await > 0).then_some(())
    })
    .await
    .expect("November was never folded");
    let keys = count(
        &db.pool,
        "SELECT count(DISTINCT (project_id, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id))
           FROM ledger_usage WHERE period = '2026-11-01'",
    )
    .await;
    assert_eq!(count(&db.pool, rows).await, keys);
    assert!(keys < appended, "{keys} keys, {appended} rows");
    let sums = "SELECT (SELECT sum(amount) FROM ledger_entry)::text, (SELECT sum(amount) FROM ledger_usage)::text";
    let (entries, usage): (String, String) = sqlx::query_as(sums).fetch_one(&db.pool).await.unwrap();
    assert_eq!(entries, usage);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_posts_share_transactions_and_a_stop_loses_no_accepted_job() {
    let db = fixture_db().await;
    // 300 connections at once from this one address: more than its share
    // by default (half of them), so it may hold them all here.
    let limits = hpc_ledger::serve::conn::Limits {
        max_per_peer: 512,
        ..Default::default()
    };
    let server = start_limited(&db.pool, Credentials::none(), false, limits, false).await;
    let n = 300u32;
    let posts = burst(server.addr, 1000, n);
    let mut created = 0;
    for p in posts {
        let r = p.await.unwrap().unwrap();
        assert_eq!(r.status, 201, "{}", r.body);
        created += 1;
    }
    assert_eq!(created, n);
    let (transactions, carried) = server.metrics.batches();
    assert_eq!(carried, u64::from(n));
    assert!(
        transactions < u64::from(n),
        "{n} concurrent posts took {transactions} transactions"
    );

    // Stop while another burst is in flight: every job answered 201 is in
    // the ledger; the others were never accepted (Slurm sends them again).
    let posts = burst(server.addr, 5000, n);
    // Once the first of them is recorded (a fixed wait let a loaded machine
    // stop the server before any was accepted).
    let first = std::time::Instant::now();
    while server.metrics.jobs("recorded") <= u64::from(n) && first.elapsed() < std::time::Duration::from_secs(10) {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let Running { stop, done, .. } = server;
    stop.send(()).unwrap();
    let mut accepted = 0i64;
    for p in posts {
        match p.await.unwrap() {
            Ok(r) if r.status == 201 => accepted += 1,
            Ok(r) => panic!("unexpected reply {} {}", r.status, r.body),
            Err(_) => {} // refused: the listener had closed
        }
    }
    done.await.unwrap().unwrap();
    let recorded = count(&db.pool, "SELECT count(*) FROM job WHERE scheduler_job_id::int >= 5000").await;
    assert_eq!(recorded, accepted, "every accepted job, and only those, is recorded");
    assert!(
        accepted > 0,
        "the stop came before any post was accepted; nothing was tested"
    );
}

#[tokio::test]
async fn the_command_serves_until_sigterm_and_refuses_open_non_loopback() {
    use std::io::{BufRead, BufReader};
    let db = fixture_db().await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hpc-ledger"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", &db.url)
        .env("HPC_LEDGER_LOG", "info")
        .env("HPC_LEDGER_SERVE_BASIC", USER_PASSWORD)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr: SocketAddr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve exited before listening"
        );
        if let Some(rest) = line.split("serving on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    assert!(!line.contains("jobc0mp-s3cret"));
    let job = jobcomp_bodies().remove(1);
    let r = client::post(addr, "/slurm/_doc", Some(&client::basic(USER_PASSWORD)), job.as_bytes())
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{rest}");
    assert!(rest.contains("stopped: 1 recorded, 0 replayed"), "{rest}");
    assert!(!rest.contains("jobc0mp-s3cret"), "{rest}");
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 1);

    let o = crate::harness::cli_with_env(
        &["serve", "--listen", "0.0.0.0:0"],
        &[("DATABASE_URL", db.url.as_str())],
        None,
    );
    assert!(!o.status.success());
    let e = crate::harness::stderr(&o);
    assert!(e.contains("refusing to listen on 0.0.0.0:0 without credentials"), "{e}");
    // An asking credential alone: on loopback every client could post and
    // ask, the asking credential doing nothing; refused.
    let o = crate::harness::cli_with_env(
        &["serve", "--listen", "127.0.0.1:0"],
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("HPC_LEDGER_SERVE_CHECK_BASIC", "hook:asks"),
        ],
        None,
    );
    assert!(!o.status.success());
    let e = crate::harness::stderr(&o);
    assert!(
        e.contains("HPC_LEDGER_SERVE_CHECK_BASIC (or HPC_LEDGER_SERVE_CHECK_TOKEN) is set but no posting credential"),
        "{e}"
    );
}

/// One byte policy on every path: a Latin-1 job name is read as U+FFFD and
/// charged, by `serve` and by `import` alike (so a back-fill after `serve`
/// replays instead of leaving a rejection), with the bytes kept exactly; a
/// damaged account is rejected on both; a NUL byte is refused with its reason.
#[tokio::test]
async fn bytes_that_are_not_utf8_are_read_alike_by_serve_and_import() {
    let db = fixture_db().await;
    let server = start(&db.pool, basic_only()).await;
    // The lab's real body for job 3, its job name re-encoded as Latin-1.
    let body = jobcomp_bodies()
        .into_iter()
        .find(|b| b.contains(r#""job_name":"hugemem""#))
        .unwrap();
    let latin1 = body.replace(r#""job_name":"hugemem""#, "\"job_name\":\"caf\u{e9}\"");
    let latin1: Vec<u8> = latin1
        .split('\u{e9}')
        .collect::<Vec<_>>()
        .join("\u{1}")
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xe9 } else { b })
        .collect();
    assert!(std::str::from_utf8(&latin1).is_err());
    let r = server.post_bytes("/slurm/_doc", &latin1).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let (name, raw_bytes): (String, Option<Vec<u8>>) = sqlx::query_as(
        "SELECT job_name, raw_bytes FROM job_record WHERE job_id = (SELECT id FROM job WHERE scheduler_job_id = '3')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(name, "caf\u{FFFD}");
    let kept = raw_bytes.expect("the bytes are kept");
    assert!(kept.windows(5).any(|w| w == b"caf\xe9\""), "the Latin-1 byte as sent");
    assert!(!kept.windows(8).any(|w| w == b"\"script\""), "without the batch script");
    // The same body imported as a jobcomp export: a replay, not a rejection.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let export = dir.join("export.jsonl");
    std::fs::write(&export, [latin1.clone(), b"\n".to_vec()].concat()).unwrap();
    let s = import_file(&db.pool, &export, "export.jsonl", Format::Jobcomp, None).await;
    assert_eq!((s.replayed, s.recorded, s.rejected_total()), (1, 0, 0), "{s:#?}");
    // sacct's line for the same run, with the same Latin-1 name: no new charge, no rejection.
    let sacct = std::fs::read_to_string(stripped("slurm_2205_lab_sacct_header.txt")).unwrap();
    let mut lines = sacct.lines();
    let header = lines.next().unwrap();
    let line = lines.find(|l| l.starts_with("3|")).unwrap();
    let line = format!("{}|caf\u{1}", line.strip_suffix("|hugemem").unwrap());
    let mut file = format!("{header}\n{line}\n").into_bytes();
    for b in &mut file {
        if *b == 1 {
            *b = 0xe9;
        }
    }
    let backfill = dir.join("sacct.txt");
    std::fs::write(&backfill, &file).unwrap();
    let s = import_file(&db.pool, &backfill, "sacct.txt", Format::Slurm, None).await;
    assert_eq!((s.recorded, s.rejected_total()), (0, 0), "{s:#?}");
    assert_eq!(s.replayed + s.revised, 1, "{s:#?}");
    let charges: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(charges, 1);

    // A damaged account decides the charge: rejected by both, with one reason.
    let damaged: Vec<u8> = String::from_utf8(latin1.iter().map(|&b| if b == 0xe9 { b'e' } else { b }).collect())
        .unwrap()
        .replace(r#""jobid":3,"#, r#""jobid":903,"#)
        .replace(r#""account":"pzs0001""#, "\"account\":\"pzs\u{1}\"")
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xe9 } else { b })
        .collect();
    let r = server.post_bytes("/slurm/_doc", &damaged).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("the project is not valid UTF-8"), "{}", r.body);
    let export2 = dir.join("export2.jsonl");
    std::fs::write(&export2, [damaged.clone(), b"\n".to_vec()].concat()).unwrap();
    let s = import_file(&db.pool, &export2, "export2.jsonl", Format::Jobcomp, None).await;
    assert_eq!(s.rejected.get(&RejectKind::Malformed), Some(&1), "{s:#?}");
    assert!(
        s.examples[0].contains("the project is not valid UTF-8"),
        "{:#?}",
        s.examples
    );

    // A NUL byte: refused with the reason, kept with its bytes; not a database error.
    let nul = [&b"{\"jobid\":904,\"job_name\":\"a\0b\"}"[..]].concat();
    let r = server.post_bytes("/slurm/_doc", &nul).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("holds a NUL byte (byte 27)"), "{}", r.body);
    let kept: (String, Option<Vec<u8>>) =
        sqlx::query_as("SELECT kind, raw_bytes FROM rejected_record WHERE raw_bytes = $1")
            .bind(&nul)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(kept.0, "malformed");
    server.stop().await;
}

/// A real Slurm 22.05 requeue capture: every requeued run posted by Slurm
/// (as "PENDING") is charged through `serve`, and `sacct --duplicates`
/// (parsable and JSON) agrees with it run by run.
#[tokio::test]
async fn requeued_runs_posted_by_slurm_are_charged_as_sacct_shows_them() {
    let db = fixture_db().await;
    let server = start(&db.pool, basic_only()).await;
    let text = std::fs::read_to_string(stripped("slurm_2205_requeue_jobcomp.jsonl")).unwrap();
    let mut created = 0;
    for body in text.lines() {
        let r = server.post("/slurm/_doc", body).await;
        assert!(r.status == 201, "{}: {}", r.status, r.body);
        created += 1;
    }
    assert_eq!(created, 13);
    server.stop().await;
    let runs = |pool: PgPool| async move {
        sqlx::query_as::<_, (String, Option<i32>, String, String, String)>(
            "SELECT j.scheduler_job_id, j.array_index, to_char(j.started_at, 'HH24:MI:SS'), r.state,
                    string_agg(e.metric || ' ' || e.quantity::text, ', ' ORDER BY e.metric)
               FROM job j JOIN job_record r ON r.job_id = j.id JOIN ledger_entry e ON e.job_record_id = r.id
              GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let served = runs(db.pool.clone()).await;
    assert_eq!(served.len(), 13);
    assert_eq!(served.iter().filter(|r| r.3 == "REQUEUED").count(), 6);
    // Job 3: two requeued runs and the completed one.
    let job3: Vec<&str> = served.iter().filter(|r| r.0 == "3").map(|r| r.2.as_str()).collect();
    assert_eq!(job3, ["19:07:57", "19:10:20", "19:13:20"]);
    // The back-fill from sacct --duplicates: the same runs, nothing new.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("requeue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = import_file(
        &db.pool,
        &stripped("slurm_2205_requeue_sacct.txt"),
        "sacct.txt",
        Format::Slurm,
        None,
    )
    .await;
    assert_eq!((s.recorded, s.superseded, s.rejected_total()), (0, 0, 0), "{s:#?}");
    assert_eq!(s.replayed, 13, "{s:#?}");
    let s = import_file(
        &db.pool,
        &stripped("slurm_2205_requeue_sacct.json"),
        "sacct.json",
        Format::SacctJson,
        None,
    )
    .await;
    assert_eq!((s.recorded, s.superseded, s.rejected_total()), (0, 0, 0), "{s:#?}");
    assert_eq!(runs(db.pool.clone()).await, served);
    // sacct alone, into a fresh ledger: the same runs and charges.
    let other = fixture_db().await;
    let s = import_file(
        &other.pool,
        &stripped("slurm_2205_requeue_sacct.txt"),
        "sacct.txt",
        Format::Slurm,
        None,
    )
    .await;
    assert_eq!(s.recorded, 13);
    assert_eq!(runs(other.pool.clone()).await, served);
}

/// Round 2 of the adversarial pass (issue 13, items 1, 8, 9): what one
/// request, one connection and one sender can make `serve` hold.
#[tokio::test]
async fn a_request_cannot_make_serve_build_or_answer_without_bound() {
    let db = fixture_db().await;
    let server = start(&db.pool, Credentials::none()).await;
    // 16 MB of `[0,0,0,…]`: refused on its Content-Length, before it is read
    // (the reply comes while the body is still unsent).
    let head_only = |path: &str, len: usize| {
        let request = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n[0,0,0");
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
            s.write_all(request.as_bytes()).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("answered before the body")
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        }
    };
    let reply = head_only("/jobs", 16 << 20).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.len() < 400, "{reply}");
    // Within the size limit but more than 1,000 jobs: refused before any is built.
    let many = format!("[{}0]", "0,".repeat(1000));
    let r = client::post(server.addr, "/jobs", None, many.as_bytes()).await.unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("at most 1000 jobs per request"), "{}", r.body);
    // 1,000 malformed jobs: 20 named, the rest counted; a short reply.
    let bad = format!("[{}0]", "0,".repeat(999));
    let r = client::post(server.addr, "/jobs", None, bad.as_bytes()).await.unwrap();
    assert_eq!(r.status, 400);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        (
            v["malformed"].as_u64(),
            v["jobs"].as_array().map(Vec::len),
            v["not_listed"].as_u64()
        ),
        (Some(1000), Some(20), Some(980))
    );
    assert!(r.body.len() < 4096, "{} bytes", r.body.len());
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 0);
    // A body larger than the jobcomp limit: 413, not read.
    let reply = head_only("/slurm/_doc", hpc_ledger::serve::MAX_BODY + 1).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    server.stop().await;
}

#[tokio::test]
async fn malformed_documents_are_kept_cut_and_at_most_so_many_a_sender() {
    let db = fixture_db().await;
    let server = start(&db.pool, Credentials::none()).await;
    // 20 distinct junk bodies of 1 MB: each kept as 64 KiB, its size and hash.
    for i in 0..20 {
        let junk = format!("{i}{}", "j".repeat(1 << 20));
        let r = client::post(server.addr, "/slurm/_doc", None, junk.as_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 400);
    }
    let (rows, bytes, max): (i64, i64, i32) =
        sqlx::query_as("SELECT count(*), sum(octet_length(raw))::bigint, max(octet_length(raw)) FROM rejected_record")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows, 20);
    assert!(max <= (64 << 10) + 200, "{max}");
    assert!(bytes < 20 * ((64 << 10) + 200), "{bytes}");
    let raw: String = sqlx::query_scalar("SELECT raw FROM rejected_record ORDER BY id LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        raw.contains("… cut by hpc-ledger serve: 1048577 bytes in all, sha256 "),
        "{}",
        &raw[raw.len() - 120..]
    );
    // One sender: 100 kept this hour, the rest refused without being kept.
    let mut not_kept = 0;
    for i in 20..110 {
        let r = client::post(server.addr, "/slurm/_doc", None, format!("junk {i}").as_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        if r.body.contains("\"kept\":false") {
            not_kept += 1;
        }
    }
    assert_eq!(not_kept, 10);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM rejected_record").await, 100);
    assert_eq!(server.metrics.jobs("malformed_not_kept"), 10);
    server.stop().await;
}

#[tokio::test]
async fn slow_idle_and_surplus_connections_are_not_held() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = fixture_db().await;
    let limits = hpc_ledger::serve::conn::Limits {
        max_connections: 4,
        overflow: 2,
        header_timeout: Duration::from_secs(2),
        body_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let server = start_limited(&db.pool, Credentials::none(), false, limits, false).await;
    let addr = server.addr;
    // Closed by the server: reading gives EOF (or a reset) before `within`.
    async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration) -> (bool, String) {
        let mut buf = Vec::new();
        let r = tokio::time::timeout(within, s.read_to_end(&mut buf)).await;
        (r.is_ok(), String::from_utf8_lossy(&buf).into_owned())
    }
    // Half-sent headers.
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    half.write_all(b"POST /jobs HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let t = Instant::now();
    assert!(closed_within(&mut half, Duration::from_secs(10)).await.0);
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    // A slow body: 408.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n[{")
        .await
        .unwrap();
    let (closed, reply) = closed_within(&mut slow, Duration::from_secs(10)).await;
    assert!(closed && reply.starts_with("HTTP/1.1 408"), "{reply}");
    // An idle keep-alive connection after a request: closed.
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (closed, reply) = closed_within(&mut idle, Duration::from_secs(10)).await;
    assert!(closed && reply.starts_with("HTTP/1.1 200"), "{reply}");
    // Four connections that send nothing fill the server; /healthz still
    // answers on the overflow, saying so; a post there is 503; past the
    // overflow, closed.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let h = client::get(addr, "/healthz").await.unwrap();
    assert_eq!(h.status, 503, "{}", h.body);
    assert!(h.body.starts_with("full: every connection"), "{}", h.body);
    let p = client::post(addr, "/jobs", None, b"{}").await.unwrap();
    assert_eq!(p.status, 503, "{}", p.body);
    let mut more = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        more.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut surplus = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (closed, reply) = closed_within(&mut surplus, Duration::from_secs(1)).await;
    assert!(closed && reply.is_empty(), "{reply}");
    // Once the held ones time out, the server serves in full again.
    drop(held);
    drop(more);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = client::post(addr, "/jobs", None, json_job(9, "pas1234").to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    let m = client::get(addr, "/metrics").await.unwrap();
    assert!(
        m.body
            .contains("hpc_ledger_serve_connections_refused_total{why=\"closed\"} 1\n"),
        "{}",
        m.body
    );
    server.stop().await;
}

/// Until `serve --intake` has recorded everything it accepted (or set it
/// aside).
async fn drained(pool: &PgPool) {
    until(secs(20), ms(50), async || {
        (count(pool, "SELECT count(*) FROM job_intake WHERE failed IS NULL").await == 0).then_some(())
    })
    .await
    .expect("the intake was not recorded within 20 s");
}

/// What `read` counts once its counts add up to `n` (or after 20 s): a
/// recording commits, deleting its documents from the intake (which is
/// what [`drained`] waits for), just before its server counts what it
/// recorded.
async fn counted(n: u64, read: impl Fn() -> Vec<u64>) -> Vec<u64> {
    let mut seen = Vec::new();
    until(secs(20), ms(50), async || {
        seen = read();
        (seen.iter().sum::<u64>() >= n).then_some(())
    })
    .await;
    seen
}

fn secs(n: u64) -> std::time::Duration {
    std::time::Duration::from_secs(n)
}

fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

/// What the ledger kept of each record: its job, raw text, exact bytes,
/// content fingerprint.
async fn kept_records(pool: &PgPool) -> Vec<(String, String, Option<Vec<u8>>, Vec<u8>)> {
    sqlx::query_as(
        "SELECT j.scheduler_job_id || coalesce('_' || j.array_index, ''), r.raw, r.raw_bytes, r.content_fingerprint
           FROM job_record r JOIN job j ON j.id = r.job_id ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The lab's real body for job 3 with its job name re-encoded as Latin-1
/// (not UTF-8), renumbered `id`.
fn latin1_body(id: u32) -> Vec<u8> {
    let body = jobcomp_bodies()
        .into_iter()
        .find(|b| b.contains(r#""job_name":"hugemem""#))
        .unwrap()
        .replace(r#""jobid":3,"#, &format!(r#""jobid":{id},"#))
        .replace(r#""job_name":"hugemem""#, "\"job_name\":\"caf\u{1}\"");
    body.into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xe9 } else { b })
        .collect()
}

/// `serve --intake` answers Slurm's real posts once they are stored, then
/// records them exactly as `serve` without it does: the same charges, the
/// same text and bytes kept (so a re-send or an import is a replay), the
/// same skips and refusals.
#[tokio::test]
async fn with_intake_real_posts_are_answered_when_stored_and_charged_as_without() {
    let db = fixture_db().await;
    let server = start_intake(&db.pool, basic_only()).await;
    let mut bodies: Vec<Vec<u8>> = jobcomp_bodies().into_iter().map(String::into_bytes).collect();
    bodies.push(latin1_body(903));
    let mut outcomes: BTreeMap<(u16, String), u32> = BTreeMap::new();
    for b in &bodies {
        let r = server.post_bytes("/slurm/_doc", b).await;
        *outcomes
            .entry((r.status, body(&r)["outcome"].as_str().unwrap_or("?").to_owned()))
            .or_default() += 1;
    }
    // 16 jobs ran (the lab's 15 and the Latin-1 one); 9 and 12 never ran.
    assert_eq!(
        outcomes,
        BTreeMap::from([((200, "accepted".into()), 16), ((200, "skipped".into()), 2)])
    );
    drained(&db.pool).await;
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 16);
    // Read as Slurm writes jobcomp's times: UTC (docs/rules.md).
    assert_eq!(read_in_utc(&db.pool).await, 16);
    assert_eq!(counted(16, || vec![server.metrics.jobs("recorded")]).await, [16]);
    let m = client::get(server.addr, "/metrics").await.unwrap();
    assert!(
        m.body
            .contains("hpc_ledger_serve_jobs_total{outcome=\"accepted\"} 16\n")
            && m.body.contains("hpc_ledger_intake_waiting 0\n"),
        "{}",
        m.body
    );

    // The same posts without --intake, into a second ledger.
    let other = fixture_db().await;
    let direct = start(&other.pool, basic_only()).await;
    for b in &bodies {
        let r = direct.post_bytes("/slurm/_doc", b).await;
        assert!([200, 201].contains(&r.status), "{}", r.body);
    }
    direct.stop().await;
    assert_eq!(ledger(&db.pool).await, ledger(&other.pool).await);
    let kept = kept_records(&db.pool).await;
    assert_eq!(kept.len(), 16);
    assert_eq!(kept, kept_records(&other.pool).await);
    assert!(
        kept.iter().any(|k| k.0 == "903" && k.2.is_some()),
        "the Latin-1 bytes are kept"
    );
    // Worked by hand: multinode job 11 held 2 nodes of 4 cores for 3 s.
    assert_eq!(
        ledger(&db.pool).await["testclu/11"],
        vec![("core_hours".into(), "0.006666666667".into(), "0.00".into())]
    );

    // Slurm re-sends everything: accepted again, recorded as replays.
    let entries = count(&db.pool, "SELECT count(*) FROM ledger_entry").await;
    for b in &bodies {
        let r = server.post_bytes("/slurm/_doc", b).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    drained(&db.pool).await;
    assert_eq!(counted(16, || vec![server.metrics.jobs("replayed")]).await, [16]);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM ledger_entry").await, entries);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job_record").await, 16);

    // Malformed documents and missing credentials are refused at once,
    // never stored.
    let r = server.post("/slurm/_doc", r#"{"jobid": 77,"#).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = client::post(server.addr, "/slurm/_doc", None, bodies[0].as_slice())
        .await
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job_intake").await, 0);
    server.stop().await;
}

/// The storer's connection is its own (out of the pool). When it is lost
/// (the database restarted, the session was killed), the post that finds
/// it gone is answered 503, which Slurm sends again, and the next store
/// opens a new connection: every job is stored and recorded once.
#[tokio::test]
async fn with_intake_a_lost_store_connection_fails_one_post_and_the_next_opens_another() {
    let db = fixture_db().await;
    let server = start_intake(&db.pool, basic_only()).await;
    let bodies = jobcomp_bodies();
    // The lab's first job (9) never ran: answered without being stored.
    let outcomes = [
        server.post("/slurm/_doc", &bodies[0]).await,
        server.post("/slurm/_doc", &bodies[1]).await,
    ]
    .map(|r| (r.status, body(&r)["outcome"].as_str().unwrap_or("?").to_owned()));
    assert_eq!(outcomes, [(200, "skipped".into()), (200, "accepted".into())]);
    let [storer] = storer_sessions(&db.pool).await[..] else {
        panic!("not one storing session")
    };
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(storer)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(killed);
    let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {storer}");
    until(secs(20), ms(10), async || {
        (count(&db.pool, &gone).await == 0).then_some(())
    })
    .await
    .expect("the storing session was not gone within 20 s");
    // Every other body, each sent again after a 503 as Slurm does.
    let mut refused = Vec::new();
    for (i, b) in bodies.iter().enumerate().skip(2) {
        loop {
            let r = server.post("/slurm/_doc", b).await;
            if r.status == 503 {
                assert_eq!(r.header("retry-after"), Some("10"));
                refused.push(i);
                assert!(refused.len() < 5, "refused again and again: {refused:?}");
                continue;
            }
            assert_eq!(r.status, 200, "{}", r.body);
            break;
        }
    }
    // One post met the dead connection: the first after the kill.
    assert_eq!(refused, vec![2]);
    drained(&db.pool).await;
    // The lab's 15 jobs that ran, each recorded once.
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 15);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job_record").await, 15);
    assert_eq!(counted(15, || vec![server.metrics.jobs("recorded")]).await, [15]);
    let storers = storer_sessions(&db.pool).await;
    assert!(
        storers.len() == 1 && storers[0] != storer,
        "one new connection stores: {storers:?}"
    );
    server.stop().await;
}

/// The storer's sessions: those whose last statement stored documents.
async fn storer_sessions(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'INSERT INTO job_intake%'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// What a stopped server left in the intake (answered, not yet recorded) is
/// recorded by the next one; a stored document that no longer reads is kept
/// as malformed; two servers on one database both accept and one records,
/// so each job is charged once; a stop records what was accepted.
#[tokio::test]
async fn the_intake_outlives_a_stop_and_two_servers_record_each_job_once() {
    let db = fixture_db().await;
    let doc = |id: u32| {
        String::from_utf8(
            latin1_body(id)
                .into_iter()
                .map(|b| if b == 0xe9 { b'e' } else { b })
                .collect(),
        )
        .unwrap()
    };
    // As a server that stopped after answering would leave them.
    for (document, exact) in [
        (doc(801), None),
        (r#"{"jobid":802,"#.to_owned(), None),
        (
            String::from_utf8_lossy(&latin1_body(803)).into_owned(),
            Some(latin1_body(803)),
        ),
    ] {
        sqlx::query("INSERT INTO job_intake (document, exact) VALUES ($1, $2)")
            .bind(document)
            .bind(exact)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    // A month is not closed while jobs that may have ended in it wait.
    let month = hpc_ledger::domain::period::Month::of_instant(chrono::Utc::now(), chrono_tz::UTC).prev();
    match hpc_ledger::service::close::close(&db.pool, month, "test", chrono::Utc::now()).await {
        Err(e @ hpc_ledger::service::close::CloseError::IntakeWaiting { count: 3, .. }) => {
            assert!(
                e.to_string().contains("3 posted job(s) are stored by `serve --intake`"),
                "{e}"
            );
        }
        other => panic!("closed with documents waiting: {other:?}"),
    }
    let a = start_intake(&db.pool, Credentials::none()).await;
    let b = start_intake(&db.pool, Credentials::none()).await;
    drained(&db.pool).await;
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM job WHERE scheduler_job_id IN ('801', '803')"
        )
        .await,
        2
    );
    let kept: Vec<(String, String, String)> = sqlx::query_as("SELECT kind, reason, raw FROM rejected_record")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        (kept[0].0.as_str(), kept[0].2.as_str()),
        ("malformed", r#"{"jobid":802,"#),
        "{kept:?}"
    );
    assert!(kept[0].1.starts_with("not JSON"), "{kept:?}");

    // 200 posts, alternating between the two servers, 8 at a time.
    let mut accepted = 0;
    for chunk in (1000..1200u32).collect::<Vec<_>>().chunks(8) {
        let posts: Vec<_> = chunk
            .iter()
            .map(|&id| {
                let addr = if id % 2 == 0 { a.addr } else { b.addr };
                let d = doc(id);
                tokio::spawn(async move { client::post(addr, "/slurm/_doc", None, d.as_bytes()).await })
            })
            .collect();
        for p in posts {
            let r = p.await.unwrap().unwrap();
            assert_eq!(
                (r.status, body(&r)["outcome"].as_str()),
                (200, Some("accepted")),
                "{}",
                r.body
            );
            accepted += 1;
        }
    }
    assert_eq!(accepted, 200);
    // One of them recorded everything.
    drained(&db.pool).await;
    let recorded = counted(202, || vec![a.metrics.jobs("recorded"), b.metrics.jobs("recorded")]).await;
    let recorded = (recorded[0], recorded[1]);
    assert!(recorded.0 == 0 || recorded.1 == 0, "both recorded: {recorded:?}");
    assert_eq!(recorded.0 + recorded.1, 202, "{recorded:?}");
    let q = "SELECT count(*) FROM ledger_entry e JOIN job_record r ON r.id = e.job_record_id \
             JOIN job j ON j.id = r.job_id WHERE j.scheduler_job_id::int BETWEEN 1000 AND 1199";
    assert_eq!(count(&db.pool, q).await, 200, "one charge a job");

    // A stop while posts are in flight: every accepted post is recorded
    // when the server has stopped (the other server is stopped first, so
    // the one stopping holds the intake).
    let (recording, other) = if recorded.0 > 0 { (a, b) } else { (b, a) };
    other.stop().await;
    let posts: Vec<_> = (2000..2100u32)
        .map(|id| {
            let addr = recording.addr;
            let d = doc(id);
            tokio::spawn(async move { client::post(addr, "/slurm/_doc", None, d.as_bytes()).await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let Running { stop, done, .. } = recording;
    stop.send(()).unwrap();
    let mut answered = 0i64;
    for p in posts {
        match p.await.unwrap() {
            Ok(r) if r.status == 200 => answered += 1,
            Ok(r) => panic!("unexpected reply {} {}", r.status, r.body),
            Err(_) => {} // refused: the listener had closed
        }
    }
    done.await.unwrap().unwrap();
    assert!(
        answered > 0,
        "the stop came before any post was accepted; nothing was tested"
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job_intake").await, 0);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM job WHERE scheduler_job_id::int >= 2000").await,
        answered,
        "every accepted job, and only those, is recorded"
    );
}

/// 20,000 pseudo-random hex digits: nothing compresses them under a
/// B-tree entry's 2,704-byte limit.
fn noise() -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..20_000)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from_digit(u32::try_from(x >> 60).unwrap(), 16).unwrap()
        })
        .collect()
}

/// The lab's real body for job 3, renumbered `id`.
fn job3(id: u32) -> String {
    jobcomp_bodies()
        .into_iter()
        .find(|b| b.contains(r#""job_name":"hugemem""#))
        .unwrap()
        .replace(r#""jobid":3,"#, &format!(r#""jobid":{id},"#))
}

/// A cluster name longer than any index entry may be: the job is kept as
/// rejected (its key cut), not refused by the database with a 503 that
/// Slurm would send again forever.
#[tokio::test]
async fn a_cluster_name_too_long_for_an_index_is_kept_as_rejected() {
    let db = fixture_db().await;
    let server = start(&db.pool, Credentials::none()).await;
    let long = job3(601).replace(r#""cluster":"testclu""#, &format!(r#""cluster":"{}""#, noise()));
    let r = client::post(server.addr, "/slurm/_doc", None, long.as_bytes())
        .await
        .unwrap();
    assert_eq!(
        (r.status, body(&r)["outcome"].as_str()),
        (200, Some("rejected")),
        "{}",
        r.body
    );
    let key: String = sqlx::query_scalar("SELECT job_key FROM rejected_record")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(key.chars().count(), 501, "cut to 500 characters and marked");
    assert!(key.ends_with('…'));
    server.stop().await;
}

/// A document the database refuses both to record and to keep as rejected
/// (here: constraints the test adds) is set aside, so that the jobs posted
/// after it are still recorded; `close` names it; the next server tries it
/// again.
#[tokio::test]
async fn a_document_the_database_refuses_is_set_aside_and_the_rest_recorded() {
    let db = fixture_db().await;
    sqlx::raw_sql(
        "ALTER TABLE job ADD CONSTRAINT test_refuses_701 CHECK (scheduler_job_id <> '701');
         ALTER TABLE rejected_record ADD CONSTRAINT test_refuses_701 CHECK (coalesce(job_key, '') NOT LIKE '%/701')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let server = start_intake(&db.pool, Credentials::none()).await;
    for doc in [job3(701), job3(702)] {
        let r = client::post(server.addr, "/slurm/_doc", None, doc.as_bytes())
            .await
            .unwrap();
        assert_eq!(
            (r.status, body(&r)["outcome"].as_str()),
            (200, Some("accepted")),
            "{}",
            r.body
        );
    }
    drained(&db.pool).await;
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM job WHERE scheduler_job_id = '702'").await,
        1
    );
    let (id, failed): (i64, String) = sqlx::query_as("SELECT id, failed FROM job_intake")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(failed.contains("test_refuses_701"), "{failed}");
    assert_eq!(counted(1, || vec![server.metrics.jobs("set_aside")]).await, [1]);
    let month = hpc_ledger::domain::period::Month::of_instant(chrono::Utc::now(), chrono_tz::UTC).prev();
    let refused = hpc_ledger::service::close::close(&db.pool, month, "test", chrono::Utc::now())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("1 posted job(s) are stored") && refused.contains("1 of them set aside"),
        "{refused}"
    );
    server.stop().await;
    // The next server tries it again (and sets it aside again).
    let next = start_intake(&db.pool, Credentials::none()).await;
    assert_eq!(counted(1, || vec![next.metrics.jobs("set_aside")]).await, [1]);
    let still: (i64, bool) = sqlx::query_as("SELECT id, failed IS NOT NULL FROM job_intake")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(still, (id, true));
    next.stop().await;
}

/// A posted job the database refuses is kept as rejected and taken out of
/// the intake in one transaction: when the second cannot be done, the
/// first is undone too (the document is set aside, kept once), so trying
/// it again later keeps the rejection once, not once per attempt.
#[tokio::test]
async fn a_refused_post_is_kept_as_rejected_and_leaves_the_intake_together() {
    let db = fixture_db().await;
    sqlx::raw_sql(
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'test: the disk is full'; END $$;
         CREATE TRIGGER test_refuse AFTER INSERT ON ledger_entry
           FOR EACH STATEMENT EXECUTE FUNCTION test_refuse();
         CREATE FUNCTION test_keep() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'test: the intake cannot be emptied'; END $$;
         CREATE TRIGGER test_keep BEFORE DELETE ON job_intake
           FOR EACH ROW EXECUTE FUNCTION test_keep();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let server = start_intake(&db.pool, basic_only()).await;
    let r = server.post_bytes("/slurm/_doc", &latin1_body(811)).await;
    assert_eq!(
        (r.status, body(&r)["outcome"].as_str()),
        (200, Some("accepted")),
        "{}",
        r.body
    );
    drained(&db.pool).await;
    server.stop().await;
    let kept = "SELECT count(*) FROM rejected_record WHERE job_key LIKE '%/811'";
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM job_intake WHERE failed IS NOT NULL").await,
        1,
        "set aside"
    );
    assert_eq!(
        count(&db.pool, kept).await,
        0,
        "not kept while it is still in the intake"
    );

    // The intake can be emptied again: the next server tries it once more.
    sqlx::raw_sql("DROP TRIGGER test_keep ON job_intake")
        .execute(&db.pool)
        .await
        .unwrap();
    let server = start_intake(&db.pool, basic_only()).await;
    until(secs(20), ms(50), async || {
        (count(&db.pool, "SELECT count(*) FROM job_intake").await == 0).then_some(())
    })
    .await;
    server.stop().await;
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job_intake").await, 0);
    let (times, reason): (i32, String) =
        sqlx::query_as("SELECT times_seen, reason FROM rejected_record WHERE job_key LIKE '%/811'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(times, 1, "kept once: {reason}");
    assert!(reason.contains("test: the disk is full"), "{reason}");
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 0);
}

/// What a client without credentials, or a web page, can make `serve` do:
/// a browser's request to the posting routes is refused (403) and records
/// nothing, even on a loopback `serve` without credentials; a 401 closes
/// its connection; one client address holds at most `max_per_peer` of the
/// connections served in full, so another client is still served.
#[tokio::test]
async fn web_pages_and_one_greedy_client_cannot_shut_out_the_schedulers() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = fixture_db().await;
    let limits = hpc_ledger::serve::conn::Limits {
        max_connections: 6,
        max_per_peer: 2,
        overflow: 4,
        header_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let server = start_limited(&db.pool, Credentials::none(), false, limits, false).await;
    let addr = server.addr;
    async fn send(stream: &mut tokio::net::TcpStream, request: String) -> String {
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply))
            .await
            .expect("the server closed the connection")
            .unwrap();
        String::from_utf8_lossy(&reply).into_owned()
    }
    let post = |id: u32, headers: &str| {
        let body = json_job(id, "pas1234").to_string();
        format!(
            "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Type: text/plain;charset=UTF-8\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    // A page's cross-site POST (text/plain needs no permission), and a
    // DNS-rebound one: refused, and the connection closed.
    for headers in [
        "Origin: http://evil.example\r\n",
        "Sec-Fetch-Site: same-origin\r\nConnection: keep-alive\r\n",
    ] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let reply = send(&mut s, post(901, headers)).await;
        assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
        assert!(reply.contains("requests from a web page are refused"), "{reply}");
    }
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 0);
    // The address typed in the browser, or curl: served.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let reply = send(&mut s, post(902, "Sec-Fetch-Site: none\r\nConnection: close\r\n")).await;
    assert!(reply.starts_with("HTTP/1.1 201"), "{reply}");
    // 127.0.0.1 holds two connections (its share): its third is answered
    // as over the cap, while 127.0.0.2 is served in full.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let reply = send(&mut third, post(903, "Connection: close\r\n")).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    let from = |ip: &str| {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        s.connect(addr)
    };
    let mut other = from("127.0.0.2").await.unwrap();
    let reply = send(&mut other, post(904, "Connection: close\r\n")).await;
    assert!(reply.starts_with("HTTP/1.1 201"), "{reply}");
    // A monitor is told why it is refused: first 127.0.0.1's share, then,
    // with 127.0.0.3 and 127.0.0.4 holding theirs (six in all), a full
    // server.
    let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_owned();
    let mut probe = tokio::net::TcpStream::connect(addr).await.unwrap();
    let reply = send(&mut probe, healthz.clone()).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(
        reply.contains("full: this client address holds as many connections as one address may"),
        "{reply}"
    );
    for ip in ["127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4"] {
        held.push(from(ip).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut probe = from("127.0.0.5").await.unwrap();
    let reply = send(&mut probe, healthz.clone()).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(
        reply.contains("full: every connection the server serves in full is held"),
        "{reply}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut s = from("127.0.0.5").await.unwrap();
    let reply = send(&mut s, healthz.clone()).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let mut s = from("127.0.0.5").await.unwrap();
    let metrics = send(&mut s, healthz.replace("/healthz", "/metrics")).await;
    for line in [
        "hpc_ledger_serve_connections_refused_total{why=\"full\"} 1\n",
        "hpc_ledger_serve_connections_refused_total{why=\"client_share\"} 2\n",
        "hpc_ledger_serve_connections_refused_total{why=\"closed\"} 0\n",
        "hpc_ledger_serve_connections 1\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    server.stop().await;
    // With credentials: a request without them is answered 401 and its
    // connection closed, though it asked to keep it.
    let server = start(&db.pool, Credentials::none().with_token("t0ken").unwrap()).await;
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let reply = send(&mut s, post(905, "Connection: keep-alive\r\n")).await;
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
    assert_eq!(count(&db.pool, "SELECT count(*) FROM job").await, 2);
    server.stop().await;
}

/// One client address holding a large body may take more only up to a
/// quarter of the request-body budget: a sender that declares 16 MB
/// bodies and never sends them held the whole 48 MB with three requests,
/// for the body timeout, and every other post and budget check waited
/// 10 s for a 503. Its further large requests are refused at once; its
/// small ones, and another client's, go through.
#[tokio::test]
async fn one_client_cannot_hold_the_request_body_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = fixture_db().await;
    let server = start(&db.pool, Credentials::none()).await;
    let stalled = format!(
        "POST /slurm/_doc HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{{",
        hpc_ledger::serve::MAX_BODY - 1
    );
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        s.write_all(stalled.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        match tokio::time::timeout(std::time::Duration::from_millis(500), s.read(&mut buf)).await {
            Ok(n) => refused.push(String::from_utf8_lossy(&buf[..n.unwrap()]).into_owned()),
            Err(_) => held.push(s),
        }
    }
    assert_eq!((held.len(), refused.len()), (1, 2), "{refused:?}");
    for r in &refused {
        assert!(
            r.starts_with("HTTP/1.1 503") && r.contains("this client address holds its share"),
            "{r}"
        );
    }
    // A small post from the same address (as the controller's budget
    // checks and job posts are) is served: only large bodies count.
    let r = client::post(
        server.addr,
        "/jobs",
        None,
        json_job(8, "pas1234").to_string().as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    // Another address (127.0.0.2 is this machine too) is served at once.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(server.addr).await.unwrap();
    let body = json_job(9, "pas1234").to_string();
    other
        .write_all(
            format!(
                "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), other.read_to_string(&mut reply))
        .await
        .expect("answered within 5 s")
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 201"), "{reply}");
    drop(held);
    server.stop().await;
}

/// A member of a jobcomp body over 64 KiB that is not a text the job is
/// read from is neither read nor kept, also in the exact bytes kept of a
/// body that is not UTF-8 (a 14.7 MB `"pad"` stayed in `job_record` for
/// good, and took 245 MB to read).
#[tokio::test]
async fn a_large_member_the_job_is_not_read_from_is_not_kept() {
    let db = fixture_db().await;
    let server = start(&db.pool, basic_only()).await;
    let body = jobcomp_bodies()
        .into_iter()
        .find(|b| b.contains(r#""job_name":"hugemem""#))
        .unwrap();
    let pad = format!("[{}0]", "0,".repeat(40_000));
    let padded = body.replacen('{', &format!("{{\"pad\":{pad},"), 1);
    let padded = padded.replace(r#""job_name":"hugemem""#, "\"job_name\":\"caf\u{1}\"");
    let bytes: Vec<u8> = padded
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xe9 } else { b })
        .collect();
    assert!(std::str::from_utf8(&bytes).is_err() && bytes.len() > 80_000);
    let r = server.post_bytes("/slurm/_doc", &bytes).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let (raw, raw_bytes): (String, Option<Vec<u8>>) = sqlx::query_as(
        "SELECT raw, raw_bytes FROM job_record WHERE job_id = (SELECT id FROM job WHERE scheduler_job_id = '3')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let kept = raw_bytes.expect("the bytes are kept");
    assert!(!raw.contains("\"pad\"") && raw.len() < 20_000, "{} bytes", raw.len());
    assert!(
        !kept.windows(5).any(|w| w == b"\"pad\"") && kept.len() < 20_000,
        "{} bytes",
        kept.len()
    );
    assert!(kept.windows(5).any(|w| w == b"caf\xe9\""), "the Latin-1 byte as sent");
    server.stop().await;
}
