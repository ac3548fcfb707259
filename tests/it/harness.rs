//! Test databases. `TestDb::new()` clones a fresh database from a template
//! migrated once per schema version; dropping it drops the database.
//!
//! Names carry the process id and a counter, so two suite runs against one
//! server never collide; the template is built under an advisory lock, so
//! concurrent runs (or nextest's many processes) share it safely.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use hpc_ledger::db::{self, MIGRATOR, quote_ident};
use hpc_ledger::embedded::{Embedded, Options};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, PgPool};

/// The server the tests use, as a URL of its `postgres` database.
fn admin_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hpc-ledger-pg");
            let e = Embedded::locate(&home, Options { fast: true }).expect("locating the test cluster");
            e.ensure_running().expect("starting the test cluster");
            e.url("postgres")
        }
    })
}

/// `url` with its database replaced by `db`.
pub fn url_for(db: &str) -> String {
    let mut u = url::Url::parse(admin_url()).expect("a valid URL");
    u.set_path(&format!("/{db}"));
    u.to_string()
}

fn schema_hash() -> String {
    let mut h = Sha256::new();
    for m in MIGRATOR.iter() {
        h.update(m.version.to_le_bytes());
        h.update(&*m.checksum);
    }
    hex::encode(&h.finalize()[..6])
}

/// The migrated template database, built once per schema version.
async fn template() -> &'static str {
    static NAME: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    NAME.get_or_init(|| async {
        let name = format!("hl_tpl_{}", schema_hash());
        let mut admin = PgConnection::connect(admin_url())
            .await
            .expect("connecting to the test server");
        let key = i64::from_le_bytes(Sha256::digest(name.as_bytes())[..8].try_into().unwrap());
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(key)
            .execute(&mut admin)
            .await
            .unwrap();
        let ready: Option<bool> = sqlx::query_scalar("SELECT datistemplate FROM pg_database WHERE datname = $1")
            .bind(&name)
            .fetch_optional(&mut admin)
            .await
            .unwrap();
        if ready != Some(true) {
            let ident = quote_ident(&name);
            sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)"))
                .execute(&mut admin)
                .await
                .unwrap();
            sqlx::raw_sql(&format!("CREATE DATABASE {ident}"))
                .execute(&mut admin)
                .await
                .unwrap();
            let pool = db::connect(&url_for(&name)).await.unwrap();
            MIGRATOR.run(&pool).await.expect("migrating the template");
            pool.close().await;
            sqlx::raw_sql(&format!("ALTER DATABASE {ident} IS_TEMPLATE true"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(key)
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        name
    })
    .await
}

/// A fresh, migrated database for one test.
pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    pub name: String,
}

impl TestDb {
    pub async fn new() -> TestDb {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let template = template().await;
        let name = format!(
            "hl_t_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mut admin = PgConnection::connect(admin_url()).await.unwrap();
        sqlx::raw_sql(&format!(
            "CREATE DATABASE {} TEMPLATE {}",
            quote_ident(&name),
            quote_ident(template)
        ))
        .execute(&mut admin)
        .await
        .expect("cloning the template");
        admin.close().await.unwrap();
        let url = url_for(&name);
        let pool = db::connect(&url).await.unwrap();
        TestDb { pool, url, name }
    }

    /// A fresh database with examples/center.toml applied.
    pub async fn with_example() -> TestDb {
        let db = TestDb::new().await;
        let config = hpc_ledger::config::parse(EXAMPLE).unwrap();
        hpc_ledger::service::config::apply(&db.pool, &config, "test")
            .await
            .unwrap();
        db
    }

    /// Run the `hpc-ledger` binary against this database.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli_with_env(args, &[("DATABASE_URL", self.url.as_str())], None)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs outside any async context we can rely on: use a thread
        // with its own small runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(admin_url()).await {
                    let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(&name)))
                        .execute(&mut admin)
                        .await;
                    let _ = admin.close().await;
                }
            });
        })
        .join();
    }
}

pub const EXAMPLE: &str = include_str!("../../examples/center.toml");

pub fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/center.toml")
}

/// Run the binary with a controlled environment: no inherited DATABASE_URL
/// or HPC_LEDGER_HOME, plus `env`.
pub fn cli_with_env(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hpc-ledger"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("HPC_LEDGER_HOME")
        .env("HPC_LEDGER_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(if stdin.is_some() {
        std::process::Stdio::piped()
    } else {
        std::process::Stdio::null()
    })
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("running hpc-ledger");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Assert success and return stdout.
#[track_caller]
pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "command failed: {}\n{}", stderr(o), stdout(o));
    stdout(o)
}

/// Import `path` (shown as `name`) the way `hpc-ledger import` does, with
/// `--cluster` when given.
pub async fn import_file(
    pool: &PgPool,
    path: &Path,
    name: &str,
    format: hpc_ledger::ingest::Format,
    cluster: Option<&str>,
) -> hpc_ledger::service::import::Summary {
    let options = hpc_ledger::ingest::ReadOptions {
        cluster: cluster.map(Into::into),
        ..Default::default()
    };
    import_file_read(pool, path, name, format, &options).await
}

/// [`import_file`] read with `options` as they are (no reading switched on
/// that they lack: a record read so is kept as read then).
pub async fn import_file_read(
    pool: &PgPool,
    path: &Path,
    name: &str,
    format: hpc_ledger::ingest::Format,
    options: &hpc_ledger::ingest::ReadOptions,
) -> hpc_ledger::service::import::Summary {
    use hpc_ledger::service::import::{self, Input};
    use hpc_ledger::service::record::{RecordOptions, Recorder};
    let mut recorder = Recorder::new(pool.clone(), RecordOptions::by("t"));
    let mut s = import::Summary::default();
    import::import(
        &mut recorder,
        std::fs::File::open(path).unwrap(),
        &Input::new(name, format, options),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    s
}

/// The example center with the README's sample jobs recorded (Slurm, PBS
/// and JSON lines) and its storage billed from its first quota (January)
/// through `through`.
pub async fn sample_billed_through(through: &str) -> TestDb {
    use hpc_ledger::ingest::Format;
    let db = TestDb::with_example().await;
    for (file, format, cluster) in [
        ("owens-sacct.txt", Format::Slurm, None),
        ("pitzer-accounting-202610.log", Format::Pbs, Some("pitzer")),
        ("jobs.jsonl", Format::Jsonl, None),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/jobs").join(file);
        import_file(&db.pool, &path, file, format, cluster).await;
    }
    let billed = hpc_ledger::service::storage::bill_through(
        &db.pool,
        through.parse().unwrap(),
        "billing",
        false,
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert!(billed.stopped.is_none(), "{:?}", billed.stopped);
    db
}

/// Sessions that begin from now on in this test database wait at most
/// 200 ms for a lock (`lock_timeout`), as a center may set it.
pub async fn lock_timeout_200ms(pool: &PgPool) {
    sqlx::raw_sql(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L', current_database(), '200ms'); END $$",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Close `period` (first day, `YYYY-MM-01`) straight in SQL, as a fixture:
/// earlier months with quotas never billed are waived, and its own storage
/// too unless it was billed (a bare billing run does not bill a month with
/// quotas, migration 0057), then the database's close procedure runs on the
/// insert (migration 0018).
pub async fn close_by_hand(pool: &PgPool, period: &str) {
    sqlx::raw_sql(&format!(
        "INSERT INTO storage_waiver (period, reason, author)
         SELECT m, 'test fixture', 't' FROM unnest(hl_unbilled_storage_months('{period}')) m;
         INSERT INTO storage_waiver (period, reason, author)
         SELECT '{period}', 'test fixture', 't'
          WHERE NOT EXISTS (SELECT 1 FROM billing_run WHERE kind = 'storage' AND period = '{period}')
            AND NOT EXISTS (SELECT 1 FROM storage_waiver WHERE period = '{period}');
         INSERT INTO closed_period (period, closed_by) VALUES ('{period}', 't')"
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// Sum `ledger_usage` again from the entries, as migration 0032 did when it
/// was created: for fixtures that rewrite entries to stand for what an
/// earlier version posted (an UPDATE fires no insert trigger).
pub async fn rederive_usage(pool: &PgPool) {
    sqlx::raw_sql(
        "DELETE FROM ledger_usage;
         INSERT INTO ledger_usage (project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id,
                                   storage_rate_id, jobs, core_hours, gpu_hours, tb_months, amount, entries)
         SELECT project_id, period, kind, user_name, cluster_id, node_type_id, rate_card_id, storage_rate_id,
                sum(jobs), sum(core_hours), sum(gpu_hours), sum(tb_months), sum(amount), count(*)
           FROM audit.entry_usage GROUP BY 1, 2, 3, 4, 5, 6, 7, 8",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Ask `check` every `every` until it answers `Some`, for at most
/// `within`: its answer, or `None` once the time is up. The tests' one
/// polling loop: what each waits for (an intake drained, a counter
/// reached, a standby's replay, a follower's cursor) is in its `check`.
pub async fn until<T>(
    within: std::time::Duration,
    every: std::time::Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(t) = check().await {
            return Some(t);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// A run of one second that starts a second after `after` and has ended by
/// the time this returns (the recorder refuses a job that ends in the
/// future), as `YYYY-MM-DDTHH:MM:SSZ` start and end.
pub fn a_second_after(after: chrono::DateTime<chrono::Utc>) -> (String, String) {
    let start = after + chrono::Duration::seconds(1);
    let end = start + chrono::Duration::seconds(1);
    while chrono::Utc::now() <= end + chrono::Duration::milliseconds(100) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let utc = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    (utc(start), utc(end))
}
