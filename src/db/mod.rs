//! Everything that talks SQL. One module per table family; functions take a
//! `&mut PgConnection` (or any executor) so the caller owns the transaction.
//! This module also decides which database to use: `--database-url` /
//! `DATABASE_URL`, or the embedded default.

pub mod archive;
pub mod audit;
pub mod budget;
pub mod corrections;
pub mod deep;
pub mod definitions;
pub mod errors;
pub mod explain;
pub mod follow;
pub mod intake;
pub mod jobs;
pub mod journal;
pub mod kinds;
pub mod ledger;
pub mod periods;
pub mod reference;
pub mod rejected;
pub mod statements;
pub mod storage;
pub mod usage;
pub mod web;

use std::path::Path;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::embedded::{self, Embedded, EmbeddedError};

/// The schema, embedded in the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The advisory lock that serialises configuration changes against pricing.
pub const RULES_LOCK: i64 = 7_523_094_288_207_667_810;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("applying the schema migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(
        "the database schema is not at this version of hpc-ledger ({applied} of {known} migrations applied): \
         run `hpc-ledger db migrate` with a role that may change the schema"
    )]
    NotMigrated { applied: usize, known: usize },
    #[error("invalid database URL: {0}")]
    BadUrl(String),
    #[error(
        "no center configuration in {place}: apply one with `hpc-ledger config apply center.toml` \
         (docs/configuration.md), or point --home / HPC_LEDGER_HOME / DATABASE_URL at the ledger you meant"
    )]
    NoCenter { place: String },
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
}

impl DbError {
    /// Whether the ledger answered and this can only be how it is set up
    /// (a password it refuses, no center, a URL that is not one), not an
    /// outage: asking again will not help. What an outage or maintenance
    /// can also cause stays an outage: PostgreSQL's 28000 is also an LDAP
    /// or PAM service that is down, a missing database or a revoked CONNECT
    /// also a restore, a schema of another version also an upgrade under way.
    pub fn is_configuration(&self) -> bool {
        match self {
            DbError::BadUrl(_) | DbError::NoCenter { .. } => true,
            DbError::Connect { source, .. } | DbError::Sql(source) => password_refused(source),
            DbError::NotMigrated { .. } | DbError::Migrate(_) | DbError::Embedded(_) => false,
        }
    }
}

/// The server refused the password (SQLSTATE 28P01).
pub fn password_refused(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| c == "28P01"))
}

/// Which database the CLI uses.
#[derive(Debug, Clone)]
pub enum Target {
    /// A server named by `--database-url` / `DATABASE_URL`.
    External { url: String },
    /// The private cluster under `$HPC_LEDGER_HOME`.
    Embedded(Embedded),
}

impl Target {
    pub fn resolve(url: Option<String>, home: &Path) -> Result<Target, DbError> {
        match url.filter(|u| !u.trim().is_empty()) {
            Some(url) => Ok(Target::External { url }),
            None => Ok(Target::Embedded(Embedded::locate(home, Default::default())?)),
        }
    }

    /// The URL of the ledger database (or of database `db` on the same server).
    pub fn url(&self, db: Option<&str>) -> Result<String, DbError> {
        match self {
            Target::Embedded(e) => Ok(e.url(db.unwrap_or(embedded::DATABASE))),
            Target::External { url } => match db {
                None => Ok(url.clone()),
                Some(name) => {
                    let mut u = url::Url::parse(url).map_err(|e| DbError::BadUrl(e.to_string()))?;
                    u.set_path(&format!("/{name}"));
                    Ok(u.to_string())
                }
            },
        }
    }

    /// Start the embedded server if needed and make sure database `db`
    /// exists on it. Does nothing for an external server.
    pub async fn prepare(&self, db: &str) -> Result<(), DbError> {
        if let Target::Embedded(e) = self {
            let e = e.clone();
            tokio::task::spawn_blocking(move || e.ensure_running())
                .await
                .expect("the start task does not panic")?;
            create_database(&self.url(Some("postgres"))?, db).await?;
        }
        Ok(())
    }

    /// Database `name` on the same server, dropped and created empty (for
    /// the demo and the bench, never the ledger database): its URL, and the
    /// URL to drop it with afterwards.
    pub async fn recreate_scratch(&self, name: &str) -> Result<(String, String), DbError> {
        let url = self.url(Some(name))?;
        let admin = match self {
            Target::External { url } if database_of(url).as_deref() != Some(name) => url.clone(),
            _ => self.url(Some("postgres"))?,
        };
        self.prepare("postgres").await?;
        recreate_database(&admin, name).await?;
        Ok((url, admin))
    }

    /// Where the ledger is, for messages: the embedded database's home, or
    /// the server's URL without its password.
    pub fn describe(&self) -> String {
        match self {
            Target::Embedded(e) => format!("the embedded database under {}", e.data_dir().display()),
            Target::External { url } => redact(url),
        }
    }

    /// [`Target::open`], for commands that need a configured ledger: a
    /// database without a center is an error naming where it looked (a
    /// command run from the wrong directory must not answer from, or record
    /// into, an empty ledger).
    pub async fn open_configured(&self) -> Result<PgPool, DbError> {
        let pool = self.open().await?;
        if !reference::center_exists(&pool).await? {
            return Err(DbError::NoCenter { place: self.describe() });
        }
        Ok(pool)
    }

    /// A pool on the ledger database: migrated automatically on the
    /// embedded server, checked on an external one.
    pub async fn open(&self) -> Result<PgPool, DbError> {
        self.prepare(embedded::DATABASE).await?;
        let pool = connect(&self.url(None)?).await?;
        match self {
            // A standby (`db standby`) is migrated by its primary.
            Target::Embedded(_) if !is_replica(&mut *pool.acquire().await?).await? => MIGRATOR.run(&pool).await?,
            _ => check_migrated(&pool).await?,
        }
        Ok(pool)
    }
}

/// Where the commands that only read go: the ledger's primary, or a
/// streaming replica of it (`--read-database-url`, docs/scaling.md).
#[derive(Debug, Clone)]
pub struct Readers {
    pub primary: Target,
    pub replica: Option<String>,
}

impl Readers {
    /// A pool for reading the ledger: on the replica when one is given
    /// (checked like an external primary: this version's schema and a
    /// center), else [`Target::open_configured`].
    pub async fn open_configured(&self) -> Result<PgPool, DbError> {
        let Some(url) = &self.replica else {
            return self.primary.open_configured().await;
        };
        let pool = connect(url).await?;
        check_migrated(&pool).await?;
        if !reference::center_exists(&pool).await? {
            return Err(DbError::NoCenter {
                place: format!("the replica {}", redact(url)),
            });
        }
        Ok(pool)
    }
}

/// Whether the server behind `conn` is a standby replaying the primary's
/// WAL (read-only: it can create nothing, not even a temporary view).
pub async fn is_replica(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_is_in_recovery() AS "r!""#)
        .fetch_one(conn)
        .await
}

fn options(url: &str) -> Result<PgConnectOptions, DbError> {
    Ok(url
        .parse::<PgConnectOptions>()
        .map_err(|e| DbError::BadUrl(redact(&e.to_string())))?
        .application_name("hpc-ledger")
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Debug, Duration::from_secs(5)))
}

/// One connection, for administrative statements (CREATE DATABASE …).
async fn connect_one(url: &str) -> Result<PgConnection, DbError> {
    PgConnection::connect_with(&options(url)?)
        .await
        .map_err(|source| DbError::Connect {
            url: redact(url),
            source,
        })
}

/// Begin a READ COMMITTED transaction, whatever the server's default
/// (`default_transaction_isolation`). Every writer relies on it: a statement
/// sees what committed before it, so a check made after waiting for a lock
/// (the period lock a close takes, the corrections' lock of migration 0051
/// and the credits check after it) sees what the lock's holder committed.
/// In a REPEATABLE READ transaction the snapshot is taken by the statement
/// that waits, before the wait: a close would seal a month without the
/// entries posted while it waited, a reversal pass the check against a
/// refund committed meanwhile. In the `BEGIN` itself: no round trip more,
/// and no startup option (which a pooler such as PgBouncer may refuse).
pub async fn begin(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    pool.begin_with("BEGIN ISOLATION LEVEL READ COMMITTED").await
}

/// A connection pool on `url`.
pub async fn connect(url: &str) -> Result<PgPool, DbError> {
    let options = options(url)?;
    // One direct attempt first: a wrong URL fails at once instead of being
    // retried until the pool's acquire timeout.
    let first = PgConnection::connect_with(&options)
        .await
        .map_err(|source| DbError::Connect {
            url: redact(url),
            source,
        })?;
    first.close().await?;
    Ok(PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options))
}

/// Create database `name` on the server of `admin_url` unless it exists.
pub async fn create_database(admin_url: &str, name: &str) -> Result<(), DbError> {
    let mut conn = connect_one(admin_url).await?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut conn)
        .await?;
    if !exists {
        let sql = format!("CREATE DATABASE {}", quote_ident(name));
        match sqlx::raw_sql(&sql).execute(&mut conn).await {
            Ok(_) => {}
            // Another process created it first.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
            Err(e) => return Err(e.into()),
        }
    }
    conn.close().await?;
    Ok(())
}

/// Drop database `name` (disconnecting its sessions) and create it empty.
pub async fn recreate_database(admin_url: &str, name: &str) -> Result<(), DbError> {
    let mut conn = connect_one(admin_url).await?;
    let ident = quote_ident(name);
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)"))
        .execute(&mut conn)
        .await?;
    sqlx::raw_sql(&format!("CREATE DATABASE {ident}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// Drop database `name` (disconnecting its sessions).
pub async fn drop_database(admin_url: &str, name: &str) -> Result<(), DbError> {
    let mut conn = connect_one(admin_url).await?;
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(name)))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// The database a URL names.
fn database_of(url: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()
        .map(|u| u.path().trim_start_matches('/').to_owned())
}

/// Refuse to work on a database whose schema is not this version's.
pub async fn check_migrated(pool: &PgPool) -> Result<(), DbError> {
    let known = MIGRATOR.iter().count();
    let table: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(pool)
        .await?;
    let applied: Vec<i64> = if table.is_some() {
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await?
    } else {
        Vec::new()
    };
    let expected: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
    if applied != expected {
        return Err(DbError::NotMigrated {
            applied: applied.len(),
            known,
        });
    }
    Ok(())
}

/// Double-quote an SQL identifier.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// A URL (or text containing URLs) with every password replaced by `***`:
/// the one in `user:password@` (up to the last `@` before the path, so a
/// password with a space or an `@` in it is hidden whole) and a
/// `password=` (or `sslpassword=`) query parameter's value.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(scheme_end) = rest.find("://") {
        let (head, url) = rest.split_at(scheme_end + 3);
        out.push_str(head);
        // The authority runs to the path, query or fragment, or, when the
        // URL has none, to the first whitespace after its first `@` (the
        // message goes on: "…@h:5432 refused; mail admin@example.org"); a
        // password may hold a space, so whitespace before that `@` does not
        // end it.
        let mut authority_end = url.find(['/', '?', '#', '\n']).unwrap_or(url.len());
        if let Some(first_at) = url[..authority_end].find('@')
            && let Some(ws) = url[first_at..authority_end].find(char::is_whitespace)
        {
            authority_end = first_at + ws;
        }
        let authority = &url[..authority_end];
        let after = match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                &url[at..]
            }
            _ => url,
        };
        // The URL runs to the whitespace before the next URL, if any (a
        // whitespace character may be several bytes: NBSP, U+3000).
        let end = after.find("://").map_or(after.len(), |next| {
            after[..next]
                .char_indices()
                .rev()
                .find(|(_, c)| c.is_whitespace())
                .map_or(next, |(w, c)| w + c.len_utf8())
        });
        out.push_str(&redact_password_parameters(&after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// `…?password=x&sslpassword=y` with each such value replaced by `***`.
/// A value runs to the next `&`, or to the `: ` or line break after the
/// URL in a message: a password may hold a space (sqlx takes one).
fn redact_password_parameters(url: &str) -> String {
    let Some(query) = url.find('?') else {
        return url.to_owned();
    };
    let mut out = url[..=query].to_owned();
    let mut rest = &url[query + 1..];
    loop {
        let end = [rest.find('&'), rest.find(": "), rest.find('\n')]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(rest.len());
        let (pair, tail) = rest.split_at(end);
        match pair.split_once('=') {
            // The name as sqlx reads it: percent-decoded (`pass%77ord`).
            Some((name, _)) if percent_decoded(name).to_ascii_lowercase().ends_with("password") => {
                out.push_str(name);
                out.push_str("=***");
            }
            _ => out.push_str(pair),
        }
        match tail.chars().next() {
            Some('&') => {
                out.push('&');
                rest = &tail[1..];
            }
            _ => {
                out.push_str(tail);
                return out;
            }
        }
    }
}

/// `%XX` escapes decoded (others kept as written).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The product's bulk tables whose planner statistics are due
/// (`hl_stale_tables`, migration 0045), largest first. `written` names the
/// tables the caller has just committed rows to, and how many: they are due
/// by autovacuum's measure, counting those rows (its own changes may not
/// have reached the statistics counters yet). Tables it does not name are
/// due only when the planner's idea of them is far off (never analyzed,
/// doubled, emptied); an empty `written` (the audit) makes every table due
/// by autovacuum's measure. Writers that just wrote many rows call it so
/// that the next query (the audit, a close) is planned with true row counts
/// rather than an empty table's (migration 0019).
pub async fn stale_tables(conn: &mut PgConnection, written: &[(&str, u64)]) -> Result<Vec<String>, sqlx::Error> {
    let tables: Vec<String> = written.iter().map(|(t, _)| (*t).to_owned()).collect();
    let rows: Vec<i64> = written
        .iter()
        .map(|(_, n)| i64::try_from(*n).unwrap_or(i64::MAX))
        .collect();
    sqlx::query_scalar!(r#"SELECT hl_stale_tables($1, $2) AS "due!""#, &tables, &rows)
        .fetch_one(&mut *conn)
        .await
}

/// `ANALYZE` one of the product's bulk tables with its owner's rights
/// (`hl_analyze`, migration 0045); false for any other table.
pub async fn analyze(conn: &mut PgConnection, table: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT hl_analyze($1) AS "done!""#, table)
        .fetch_one(&mut *conn)
        .await
}

/// Fold the rollup rows of every closed month not folded yet to one row per
/// key, oldest first, in a transaction of its own (`hl_fold_rollups`,
/// migration 0042). Returns how many months were folded: 0 also when
/// another fold was running (that one folds them; nothing waits on a
/// fold). Readers sum every row of a key, so the sums they see do not change.
pub async fn fold_rollups(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT hl_fold_rollups() AS "folded!""#)
        .fetch_one(&mut *conn)
        .await
}

/// `SELECT 1`: whether the database answers.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}

/// The server's `version()`.
pub async fn server_version(pool: &PgPool) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT version()").fetch_one(pool).await
}

/// Turn JIT compilation off for the rest of the transaction: one pass over
/// millions of rows costs less than compiling it (measured with `bench`).
pub async fn jit_off(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    // `verify` runs it in spawned tasks.
    set_one(conn, "SET LOCAL jit = off").await
}

/// Turn JIT compilation off for the rest of the session: for a reader that
/// runs many statements outside a transaction (`audit --deep`'s pages). The
/// caller closes the connection afterwards rather than giving it back to a
/// pool with the setting.
pub async fn jit_off_for_session(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    set_one(conn, "SET jit = off").await
}

/// Plan the rest of the transaction for reading a small part of a large
/// ledger by key (`audit --month`): `random_page_cost` 1.1, the usual
/// setting for SSDs and for a database its server's memory caches, instead
/// of PostgreSQL's default 4, which prices each index probe as a seek on a
/// spinning disk. With 4, the audit of one month of a 20.8M-entry ledger
/// hashed the whole of `job_record` (16 GB) and `job` to join the month's
/// 990,000 job charges rather than look each one up: its charge checks took
/// 20.6 s, 10.7 s with 1.1 (docs/scaling.md). And no hash joins
/// (`enable_hashjoin = off`): costing a month of half a million charges,
/// the planner still hashed every run in `job` to join them to their
/// records, 19.35M runs in a ledger of 20.8M entries, 4.9 s of its 9.1 s;
/// looked up one by one, the month's audit took 3.0 s, and the month of
/// 990,000 charges in a ledger of only it 5.5–6.0 s instead of 4.5–5.2 s
/// (docs/scaling.md, 2026-12-04, night): the month's cost follows the
/// month, not the ledger. The whole ledger's audit reads every row and
/// keeps the server's settings.
pub async fn plan_for_few_rows(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    set_local(
        conn,
        "SET LOCAL random_page_cost = 1.1; SET LOCAL enable_hashjoin = off",
    )
    .await
}

/// Let the rest of the transaction hash joins again as the server or role
/// would, after [`plan_for_few_rows`]: for a month's storage charges, which the
/// planner expects to recompute for a handful of projects. Looked up one
/// by one on that estimate, the 20,000 storage charges of a 145,000-entry
/// month were each compared with all 10,000 projects' recomputed sums
/// (200M comparisons, 17.8 s); hashed, 0.35 s (`bench`, 2026-12-05).
pub async fn allow_hash_joins(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    set_local(conn, "SET LOCAL enable_hashjoin TO DEFAULT").await
}

/// A `SET LOCAL` statement: the setting ends with the transaction, so a
/// pooled connection never hands it to its next user.
async fn set_local(conn: &mut PgConnection, statement: &'static str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(statement).execute(&mut *conn).await.map(|_| ())
}

/// Begin a read-only transaction whose queries are planned for their
/// parameters at every call (`plan_cache_mode = force_custom_plan`), not
/// by a prepared statement's generic plan: for a report whose best plan
/// depends on how many rows its parameters select (a year of the busiest
/// project's usage, 5.1 ms planned for it against 7.5 ms generic, measured
/// on the full bench's ledger). JIT is off in it: the usage of every
/// project over months is one pass over their rollup rows, costed above
/// `jit_above_cost`, and compiling it took 320 ms of a 1 s query (the
/// bench's kept ledger, 11 months: `usage --all --by month` 2.0–2.2 s with
/// JIT, 1.1–1.6 s without); a single project's report is below the cost
/// and was never compiled.
pub async fn begin_custom_plans(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    pool.begin_with("BEGIN READ ONLY; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL jit = off")
        .await
}

/// The isolation of a reader whose statements must all see one snapshot.
const ONE_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";

/// Begin, on `conn`, a read-only transaction whose statements all see one
/// snapshot of the database (`REPEATABLE READ`).
pub async fn begin_one_snapshot(conn: &mut PgConnection) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, sqlx::Error> {
    conn.begin_with(ONE_SNAPSHOT).await
}

/// Begin a read-only transaction as [`begin_one_snapshot`] does and export
/// its snapshot (`pg_export_snapshot`), so that transactions on other
/// connections can read the same one ([`begin_in_snapshot`]) while this
/// one stays open: one answer read in parts side by side (on a primary or
/// a standby alike).
pub async fn begin_exported_snapshot(
    conn: &mut PgConnection,
) -> Result<(sqlx::Transaction<'_, sqlx::Postgres>, String), sqlx::Error> {
    let mut tx = begin_one_snapshot(conn).await?;
    let id = sqlx::query_scalar!(r#"SELECT pg_export_snapshot() AS "id!""#)
        .fetch_one(&mut *tx)
        .await?;
    Ok((tx, id))
}

/// Begin, on `conn`, a read-only transaction that reads the snapshot
/// another transaction exported ([`begin_exported_snapshot`], still open).
pub async fn begin_in_snapshot<'c>(
    conn: &'c mut PgConnection,
    id: &str,
) -> Result<sqlx::Transaction<'c, sqlx::Postgres>, sqlx::Error> {
    // SET TRANSACTION takes no parameter, so the id is written into the
    // statement: only as pg_export_snapshot gives it (hex digits, dashes).
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(sqlx::Error::Protocol(format!("not a snapshot id: {id:?}")));
    }
    // Its own statement once the transaction has begun, not part of the
    // BEGIN: if it fails (an id this server never exported), dropping the
    // transaction rolls it back, and the connection is used next (or goes
    // back to its pool) out of the aborted transaction.
    let mut tx = begin_one_snapshot(conn).await?;
    sqlx::query(&format!("SET TRANSACTION SNAPSHOT '{id}'"))
        .persistent(false)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// A transaction's server process and when it began: what
/// [`both_or_cancel`] cancels the statement of. Both, so that a cancel
/// sent over a connection of its own reaches this transaction or nothing
/// (not another server's process of the same number behind a balancer,
/// nor the same process once it serves another transaction through a
/// pooler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    pub pid: i32,
    pub xact_start: chrono::DateTime<chrono::Utc>,
}

/// The server process serving the transaction begun on `tx`, and its start.
pub async fn backend_of(tx: &mut PgConnection) -> Result<Backend, sqlx::Error> {
    sqlx::query_as!(Backend, r#"SELECT pg_backend_pid() AS "pid!", now() AS "xact_start!""#)
        .fetch_one(&mut *tx)
        .await
}

/// How long [`cancel_backend`] tries to open its connection.
const CANCEL_CONNECT: Duration = Duration::from_secs(5);

/// Cancel the statement `backend`'s transaction is running
/// (`pg_cancel_backend`), from a connection of its own opened for it, out
/// of any pool (whose connections may all be taken by the work being
/// cancelled). A role may cancel its own sessions' statements. Whether the
/// cancel was sent: not when that transaction has ended or is not on the
/// server this connection reached; a process between two statements
/// ignores it (the caller sends it again).
pub async fn cancel_backend(options: &PgConnectOptions, backend: Backend) -> bool {
    let sent = async {
        let mut conn = tokio::time::timeout(CANCEL_CONNECT, PgConnection::connect_with(options))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        let sent = sqlx::query_scalar!(
            r#"SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) AS "sent!"
                 FROM pg_stat_activity WHERE pid = $1 AND xact_start = $2"#,
            backend.pid,
            backend.xact_start
        )
        .fetch_one(&mut conn)
        .await?;
        let _ = conn.close().await;
        Ok::<_, sqlx::Error>(sent)
    }
    .await;
    match sent {
        Ok(sent) => sent,
        Err(e) => {
            tracing::warn!("cancelling the statement of server process {}: {e}", backend.pid);
            false
        }
    }
}

/// How long [`both_or_cancel`] goes on cancelling the other read's
/// statements before it drops that read.
const CANCEL_FOR: Duration = Duration::from_secs(30);

/// Two reads side by side, each in a transaction of its own on a connection
/// of its own (`a.0`, `b.0`): both results, or the first error. When one
/// fails, the other's statements are cancelled on the server and the other
/// awaited (it ends at once with the cancel's error, which is dropped), so
/// that nothing goes on reading after the caller has failed: a future
/// merely dropped would leave its statement running on the server to the
/// end, its connection and snapshot held until then. A cancel that finds
/// the other between two statements is lost, so it is sent again every
/// 200 ms until the other has ended; if it cannot be sent, or the other
/// has not ended within [`CANCEL_FOR`], the other is dropped.
pub async fn both_or_cancel<A, B, E>(
    options: &PgConnectOptions,
    a: (Backend, impl Future<Output = Result<A, E>>),
    b: (Backend, impl Future<Output = Result<B, E>>),
) -> Result<(A, B), E> {
    async fn cancel_until_ended<T>(
        options: &PgConnectOptions,
        backend: Backend,
        mut other: std::pin::Pin<&mut impl Future<Output = T>>,
    ) {
        let until = tokio::time::Instant::now() + CANCEL_FOR;
        while cancel_backend(options, backend).await {
            if tokio::time::timeout(Duration::from_millis(200), other.as_mut())
                .await
                .is_ok()
                || tokio::time::Instant::now() >= until
            {
                return;
            }
        }
    }
    let (backend_a, a) = a;
    let (backend_b, b) = b;
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    tokio::select! {
        ra = &mut a => match ra {
            Ok(x) => Ok((x, b.await?)),
            Err(e) => {
                cancel_until_ended(options, backend_b, b).await;
                Err(e)
            }
        },
        rb = &mut b => match rb {
            Ok(y) => Ok((a.await?, y)),
            Err(e) => {
                cancel_until_ended(options, backend_a, a).await;
                Err(e)
            }
        },
    }
}

/// Make the transaction just begun read one snapshot of the database, and
/// write nothing (its first statement).
pub async fn snapshot(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    // The web view awaits this inside serve's handlers.
    set_one(conn, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").await
}

/// One setting statement, as a plain unprepared query: not raw_sql, whose
/// future is not Send for every lifetime, which a spawned task or an axum
/// handler needs.
async fn set_one(conn: &mut PgConnection, statement: &'static str) -> Result<(), sqlx::Error> {
    sqlx::query(statement)
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// Serialise a configuration change against pricing (until the transaction
/// ends), and record when the lock was taken (`hpc_ledger.rules_locked_at`):
/// no job is priced from then until the transaction ends, so a rule may
/// change from that instant (the queue map's guard, migration 0070).
pub async fn lock_rules(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock($1), set_config('hpc_ledger.rules_locked_at', clock_timestamp()::text, true)",
        RULES_LOCK
    )
    .fetch_one(&mut *conn)
    .await
    .map(|_| ())
}

/// Analyze the reference tables (autovacuum never analyzes tables this
/// small, and the audit's plans depend on their sizes). Only the owner may.
pub async fn analyze_reference(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql("ANALYZE center, cluster, node_type, queue_map, rate_card, storage_rate, project, storage_quota")
        .execute(pool)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_leave_redact() {
        assert_eq!(
            redact("postgres://ledger:s3cr%40t@db.example.org:5432/hpc"),
            "postgres://ledger:***@db.example.org:5432/hpc"
        );
        assert_eq!(redact("postgres://ledger@db/hpc"), "postgres://ledger@db/hpc");
        assert_eq!(redact("postgresql://u:p@h/d?host=/x"), "postgresql://u:***@h/d?host=/x");
        assert_eq!(redact("no url here"), "no url here");
        // A password as a query parameter, with a space or an `@` in it, or
        // in a second URL of the same message (a security review of
        // 2026-12-07: these were printed as given).
        assert_eq!(
            redact("cannot connect to postgres://feed@127.0.0.1:5439/ledger?password=wrongSECRET: refused"),
            "cannot connect to postgres://feed@127.0.0.1:5439/ledger?password=***: refused"
        );
        // A space in the value, a name percent-encoded (sqlx decodes both).
        assert_eq!(
            redact("cannot connect to postgres://h/d?user=u&password=wr ongSECRET: refused"),
            "cannot connect to postgres://h/d?user=u&password=***: refused"
        );
        assert_eq!(
            redact("postgres://h/d?pass%77ord=SECRET"),
            "postgres://h/d?pass%77ord=***"
        );
        // A URL without a path, and an `@` later in the message: the host
        // and the message stay (they were eaten, the host shown as `b"`).
        assert_eq!(
            redact("cannot connect to postgres://a%40b:pw@127.0.0.1:5432: role \"a@b\" does not exist"),
            "cannot connect to postgres://a%40b:***@127.0.0.1:5432: role \"a@b\" does not exist"
        );
        assert_eq!(
            redact("postgres://u:wr ong@h:5432 refused; mail admin@example.org"),
            "postgres://u:***@h:5432 refused; mail admin@example.org"
        );
        // Whitespace of several bytes before a second URL (it panicked,
        // slicing inside the character).
        assert_eq!(
            redact("postgres://u:p@h/d\u{a0}postgres://x:q@y/z"),
            "postgres://u:***@h/d\u{a0}postgres://x:***@y/z"
        );
        assert_eq!(redact("x://a:b@c/d\u{3000}y://z"), "x://a:***@c/d\u{3000}y://z");
        assert_eq!(
            redact("postgres://u@h/d?sslmode=require&PassWord=x&sslpassword=y&application_name=a"),
            "postgres://u@h/d?sslmode=require&PassWord=***&sslpassword=***&application_name=a"
        );
        assert_eq!(
            redact("error: postgres://feed:wr ong@SECRET@h:5432/d failed"),
            "error: postgres://feed:***@h:5432/d failed"
        );
        assert_eq!(
            redact("primary postgres://a:one@p/d and replica postgres://b:two@r/d?password=three x"),
            // (a value runs to `&`, `: ` or the line's end: the rest of
            // such a line is hidden with it)
            "primary postgres://a:***@p/d and replica postgres://b:***@r/d?password=***"
        );
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
