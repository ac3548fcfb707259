//! `hpc-ledger serve`: finished jobs pushed over HTTP, recorded the moment
//! they end. Slurm's `jobcomp/elasticsearch` plugin POSTs one JSON document
//! per finished job to `JobCompLoc` and retries until it gets 200 or 201, so
//! every reply is decided by what happened to the job, never by the sender
//! being impatient:
//!
//! | what the document is | reply |
//! |---|---|
//! | a new job, recorded (or superseding, with `--supersede`) | 201 |
//! | an identical replay, or a revision that does not change the charge | 200 |
//! | a job that never ran (cancelled while pending) | 200, skipped |
//! | well-formed but not chargeable now (unknown project, no rate card, conflicting re-send) | 200, kept in `rejected_record` for `import --retry-rejected` |
//! | malformed (not JSON, no job id, a bad time, an unknown state) | 400, also kept (without the batch script) |
//! | wrong or missing credentials | 401, before the body is read |
//! | the database is unreachable | 503: Slurm retries (a job that did commit is then a replay) |
//!
//! Requests are handed to one batcher task that owns the [`Recorder`]: while
//! one transaction commits, the requests arriving meanwhile queue up and go
//! into the next one together (group commit), so load makes transactions
//! bigger, not more numerous. A request is answered only after its
//! transaction committed. On shutdown the listener stops accepting, requests
//! in flight are finished and answered, then the batcher drains and exits.
//! If the batcher fails, the server stops too (and `/healthz` says so)
//! rather than answer 503 forever.

mod auth;
mod batcher;
mod body;
pub mod client;
pub mod conn;
pub mod health;
mod intake;
mod metrics;
mod routes;
mod web;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use auth::{guard, guard_asking};
use batcher::Pending;
use routes::{busy, healthz, jobcomp_doc, json_jobs, metrics_text};

use crate::service::record::{RecordOptions, Recorder};
pub use auth::{
    BASIC_ENV, CHECK_BASIC_ENV, CHECK_TOKEN_ENV, Credentials, TOKEN_ENV, WEB_BASIC_ENV, WEB_TOKEN_ENV, open_allowed,
};
pub use metrics::Metrics;

/// The largest request body: Slurm includes the whole batch script, which
/// Slurm itself caps at 4 MB by default (`max_script_size`).
pub const MAX_BODY: usize = 16 << 20;

/// The largest body of `POST /jobs`, and the most jobs in one request.
pub const MAX_JOBS_BODY: usize = 4 << 20;
pub const MAX_JOBS: usize = 1000;

/// Requests waiting for the batcher, at most.
const QUEUE: usize = 4096;

/// How the server records.
#[derive(Debug, Clone)]
pub struct Options {
    /// Who may post jobs, and ask everything `checks` may.
    pub credentials: Credentials,
    /// Who may only ask: `/check` and `/metrics/budgets`
    /// (`HPC_LEDGER_SERVE_CHECK_BASIC` / `_TOKEN`), so that a submit
    /// hook's or a scraper's credential cannot post charges.
    pub checks: Credentials,
    /// The billing office's credential for the web view (`/ui`); empty:
    /// only project tokens see anything there.
    pub web: Credentials,
    /// A streaming replica the web view reads from (`--read-database-url`);
    /// `None`: the primary. Job posts, start checks and the web view's token
    /// checks (a revoked token must stop at once) stay on the primary.
    pub reader: Option<PgPool>,
    /// Jobs per transaction, at most.
    pub max_batch: usize,
    /// Re-sent records that change the charge replace it (docs/rules.md D9).
    pub supersede: bool,
    /// Who records.
    pub author: String,
    /// Connections, timeouts and the body budget.
    pub limits: conn::Limits,
    /// How to start the database again when it stops answering: the
    /// embedded one; `None` for an external database ([`health`]).
    pub restart: Option<health::Restart>,
    /// Answer a jobcomp document once it is stored in `job_intake`, and
    /// record it moments later in a batch (`--intake`; [`intake`]).
    pub intake: bool,
    /// How often a closed month's rollups are folded if its close did not
    /// ([`crate::service::FOLD_EVERY`]; shorter in tests).
    pub fold_every: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("serving HTTP: {0}")]
    Http(#[from] std::io::Error),
    #[error("the recording task failed: {0}")]
    Batcher(String),
}

struct App {
    credentials: Credentials,
    checks: Credentials,
    web: Credentials,
    queue: mpsc::Sender<Pending>,
    /// With `--intake`: the task that stores documents ([`intake::storer`]).
    intake: Option<mpsc::Sender<intake::Store>>,
    metrics: Arc<Metrics>,
    pool: PgPool,
    /// Where the web view's pages read: the replica, or `pool`.
    reader: PgPool,
    health: Arc<health::Health>,
    /// The rate catalog for start checks, loaded again when the rules change.
    catalog: crate::service::quote::CatalogCache,
    /// Malformed documents kept per sender in the current hour.
    junk: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, (Instant, u32)>>,
    /// Web view requests read the ledger at most [`web::SLOTS`] at a time, so
    /// pages cannot take the pool's connections from job posts.
    web_slots: tokio::sync::Semaphore,
}

/// Serve on `listener` until `shutdown` completes; then finish every request
/// in flight and return. `metrics` is shared so a caller can read it.
pub async fn serve(
    pool: PgPool,
    listener: TcpListener,
    options: Options,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (queue, rx) = mpsc::channel(QUEUE);
    let recorder = Recorder::new(
        pool.clone(),
        RecordOptions {
            supersede: options.supersede,
            author: options.author.clone(),
        },
    );
    // Every server records what `--intake` servers stored (its own posts
    // with `--intake`; what a stopped one left otherwise).
    // In an import's batches: what waits there has been answered already.
    let intake = intake::Intake::new(pool.clone(), crate::service::import::BATCH, metrics.clone());
    // The stores have a connection of their own, held by the storer and
    // not tested before each use (a round trip of a post's two): a
    // connection lost with the database fails its post with 503, and Slurm
    // sends it again.
    let (stores, storer) = if options.intake {
        let stores = (*pool.connect_options()).clone();
        let (tx, rx) = mpsc::channel(QUEUE);
        let storer = tokio::spawn(intake::storer(stores, rx, intake.wake.clone()));
        (Some(tx), Some(storer))
    } else {
        (None, None)
    };
    let batcher = tokio::spawn(batcher::batcher(
        recorder,
        rx,
        options.max_batch.max(1),
        metrics.clone(),
        intake,
        storer,
    ));
    // The batcher ends on its own only if it failed (a panic): then stop
    // serving rather than answer 503 forever, so the service manager sees
    // the process exit and restarts it.
    let (died, batcher_died) = oneshot::channel::<()>();
    let batcher = tokio::spawn(async move {
        let result = batcher.await;
        let _ = died.send(());
        result
    });
    let health = Arc::new(health::Health::new(options.restart.is_some()));
    let (stop_watch, watch_stopped) = tokio::sync::watch::channel(false);
    let watchdog = tokio::spawn(health::watch(
        pool.clone(),
        health.clone(),
        options.restart,
        watch_stopped,
    ));
    let folder = tokio::spawn(fold_now_and_then(
        pool.clone(),
        options.fold_every,
        stop_watch.subscribe(),
    ));
    let app = Arc::new(App {
        credentials: options.credentials,
        checks: options.checks,
        web: options.web,
        queue,
        intake: stores,
        metrics: metrics.clone(),
        health,
        reader: options.reader.unwrap_or_else(|| pool.clone()),
        pool,
        catalog: crate::service::quote::CatalogCache::default(),
        junk: std::sync::Mutex::new(std::collections::HashMap::new()),
        web_slots: tokio::sync::Semaphore::new(web::SLOTS),
    });
    // Every body is read whole, within its route's limit and time, out of
    // one budget shared by all requests (body.rs).
    let budget = body::Budget::new(options.limits.body_budget, options.limits.body_timeout);
    let buffered = |max: usize| {
        axum::middleware::from_fn_with_state(
            body::Route {
                budget: budget.clone(),
                max,
            },
            body::buffered,
        )
    };
    let router = Router::new()
        // Slurm 22.05 and later post to JobCompLoc as given; the conventional
        // location (and Slurm's own default path) is /slurm/_doc.
        .route("/slurm/_doc", post(jobcomp_doc).layer(buffered(MAX_BODY)))
        .route("/slurm/jobcomp", post(jobcomp_doc).layer(buffered(MAX_BODY)))
        .route("/jobs", post(json_jobs).layer(buffered(MAX_JOBS_BODY)))
        // Credentials are checked before a body is read: a sender without
        // them cannot make the server buffer anything.
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        // What only asks takes the posting credential or the asking one.
        .merge(
            Router::new()
                .route("/check", post(routes::check).layer(buffered(64 * 1024)))
                .route("/metrics/budgets", get(routes::budget_metrics))
                .route_layer(axum::middleware::from_fn_with_state(app.clone(), guard_asking)),
        )
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        // The web view checks its own viewers (billing office or token).
        .route("/ui", get(web::home))
        .route("/ui/projects/{code}", get(web::project))
        .route("/ui/projects/{code}/statements/{file}", get(web::statement))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app.clone());
    // Connections over the cap: /healthz, and 503 for everything else.
    let busy = Router::new()
        .route("/healthz", get(routes::healthz_over))
        .fallback(busy)
        .with_state(app);
    let stop = async move {
        tokio::select! {
            () = shutdown => {}
            _ = batcher_died => tracing::error!("the recording task stopped; stopping the server"),
        }
    };
    let served = conn::run(listener, router, busy, options.limits, metrics, stop).await;
    let _ = stop_watch.send(true);
    let _ = watchdog.await;
    let _ = folder.await;
    // Every handler has returned, so every sender is gone: the batcher
    // finishes what it holds and stops.
    let drained = batcher.await;
    served?;
    drained
        .map_err(|e| ServeError::Batcher(e.to_string()))?
        .map_err(|e| ServeError::Batcher(e.to_string()))
}

/// Every `every` until `stop`, fold the rollups of a closed month whose
/// close did not (migration 0042; `close` folds once it has committed).
async fn fold_now_and_then(pool: PgPool, every: std::time::Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(every) => {}
        }
        if *stop.borrow() {
            return;
        }
        crate::service::fold_rollups(&pool).await;
    }
}

/// A listener on `addr` with a deep accept queue: a burst of posts (Slurm
/// catching up after an outage, many controllers at once) waits in the
/// kernel instead of being reset. The standard library's 128 is too shallow.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}
