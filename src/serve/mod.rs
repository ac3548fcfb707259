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

mod body;
pub mod client;
pub mod conn;
pub mod health;
mod metrics;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::domain::posting::Defaults;
use crate::ingest::{Item, ReadOptions, jobcomp, jsonl::JsonlParser};
use crate::service::record::{Outcome, Recorder, Source, Submission};
pub use metrics::Metrics;

/// The largest request body: Slurm includes the whole batch script, which
/// Slurm itself caps at 4 MB by default (`max_script_size`).
pub const MAX_BODY: usize = 16 << 20;

/// The largest body of `POST /jobs`, and the most jobs in one request.
pub const MAX_JOBS_BODY: usize = 4 << 20;
pub const MAX_JOBS: usize = 1000;

/// Of a refused `POST /jobs`, the malformed elements listed one by one (the
/// rest are counted).
const LISTED_ERRORS: usize = 20;

/// Of a malformed document, at most this much is kept (with its size and
/// the hash of the whole): enough to see what was sent, not a store for junk.
pub const KEPT_MALFORMED: usize = 64 << 10;

/// Malformed documents one sender (address) may have kept per hour; past
/// that they are still refused (400), and counted, but not kept.
pub const KEPT_PER_SENDER_HOUR: u32 = 100;

/// Requests waiting for the batcher, at most.
const QUEUE: usize = 4096;

/// Who may post: HTTP Basic (Slurm sends it when `JobCompLoc` is
/// `http://user:password@host/…`) and/or a bearer token. Holds only the
/// expected header values, never printed.
#[derive(Clone, Default)]
pub struct Credentials {
    accepted: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({} accepted, not shown)", self.accepted.len())
    }
}

/// Environment variables that hold the credentials (each also as `…_FILE`).
pub const BASIC_ENV: &str = "HPC_LEDGER_SERVE_BASIC";
pub const TOKEN_ENV: &str = "HPC_LEDGER_SERVE_TOKEN";

impl Credentials {
    /// No credentials: anyone who can connect may post.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// Accept HTTP Basic with `user:password`.
    pub fn with_basic(mut self, user_password: &str) -> Result<Credentials, String> {
        if !user_password.contains(':') {
            return Err(format!("{BASIC_ENV} must be user:password"));
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
        self.accepted.push(format!("Basic {encoded}"));
        Ok(self)
    }

    /// Accept `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: &str) -> Result<Credentials, String> {
        if token.is_empty() || token.chars().any(char::is_whitespace) {
            return Err(format!("{TOKEN_ENV} must be one word"));
        }
        self.accepted.push(format!("Bearer {token}"));
        Ok(self)
    }

    /// Read `HPC_LEDGER_SERVE_BASIC` / `HPC_LEDGER_SERVE_TOKEN`, or the
    /// files named by `…_FILE`.
    pub fn from_env() -> Result<Credentials, String> {
        fn read(name: &str) -> Result<Option<String>, String> {
            let file_var = format!("{name}_FILE");
            match (std::env::var(name).ok(), std::env::var_os(&file_var)) {
                (Some(_), Some(_)) => Err(format!("set {name} or {file_var}, not both")),
                (Some(v), None) => Ok(Some(v.trim().to_owned())),
                (None, Some(path)) => std::fs::read_to_string(&path)
                    .map(|v| Some(v.trim().to_owned()))
                    .map_err(|e| format!("reading {file_var} ({}): {e}", std::path::Path::new(&path).display())),
                (None, None) => Ok(None),
            }
        }
        let mut c = Credentials::none();
        if let Some(b) = read(BASIC_ENV)? {
            c = c.with_basic(&b)?;
        }
        if let Some(t) = read(TOKEN_ENV)? {
            c = c.with_token(&t)?;
        }
        Ok(c)
    }

    pub fn is_empty(&self) -> bool {
        self.accepted.is_empty()
    }

    fn allows(&self, headers: &HeaderMap) -> bool {
        if self.accepted.is_empty() {
            return true;
        }
        let Some(given) = headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes) else {
            return false;
        };
        // The scheme is case-insensitive and may be followed by several
        // spaces (RFC 7235 §2.1): `bearer  tok` is `Bearer tok`.
        let Some((scheme, credentials)) = std::str::from_utf8(given).ok().and_then(|g| g.split_once(' ')) else {
            return false;
        };
        let scheme = if scheme.eq_ignore_ascii_case("basic") {
            "Basic"
        } else if scheme.eq_ignore_ascii_case("bearer") {
            "Bearer"
        } else {
            return false;
        };
        let given = format!("{scheme} {}", credentials.trim_matches(' '));
        // Compare every accepted value in full, whatever matches first.
        self.accepted.iter().fold(false, |ok, want| {
            ok | constant_time_eq(want.as_bytes(), given.as_bytes())
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How the server records.
#[derive(Debug, Clone)]
pub struct Options {
    pub credentials: Credentials,
    /// Jobs per transaction, at most.
    pub max_batch: usize,
    /// Re-sent records that change the charge replace it (SPEC D9).
    pub supersede: bool,
    /// Who records.
    pub author: String,
    /// Connections, timeouts and the body budget.
    pub limits: conn::Limits,
    /// How to start the database again when it stops answering: the
    /// embedded one; `None` for an external database ([`health`]).
    pub restart: Option<health::Restart>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("serving HTTP: {0}")]
    Http(#[from] std::io::Error),
    #[error("the recording task failed: {0}")]
    Batcher(String),
}

/// One unit of work for the batcher.
enum Work {
    Job(Box<Submission>),
    Malformed(Box<(Source, String)>),
}

/// What the batcher answers: a job's outcome (none for a malformed
/// document), or why nothing was recorded.
type Answer = Result<Option<Outcome>, String>;

const SHUTTING_DOWN: &str = "the server is shutting down";

struct Pending {
    work: Work,
    reply: oneshot::Sender<Answer>,
}

struct App {
    credentials: Credentials,
    queue: mpsc::Sender<Pending>,
    metrics: Arc<Metrics>,
    pool: PgPool,
    health: Arc<health::Health>,
    /// Malformed documents kept per sender in the current hour.
    junk: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, (Instant, u32)>>,
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
    let mut recorder = Recorder::new(
        pool.clone(),
        Defaults::default(),
        options.supersede,
        options.author.clone(),
    );
    recorder.batch_size = options.max_batch.max(1);
    let batcher = tokio::spawn(batcher(recorder, rx, options.max_batch.max(1), metrics.clone()));
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
    let app = Arc::new(App {
        credentials: options.credentials,
        queue,
        metrics,
        health,
        pool,
        junk: std::sync::Mutex::new(std::collections::HashMap::new()),
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
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app.clone());
    // Connections over the cap: /healthz, and 503 for everything else.
    let busy = Router::new()
        .route("/healthz", get(healthz))
        .fallback(busy)
        .with_state(app);
    let stop = async move {
        tokio::select! {
            () = shutdown => {}
            _ = batcher_died => tracing::error!("the recording task stopped; stopping the server"),
        }
    };
    let served = conn::run(listener, router, busy, options.limits, stop).await;
    let _ = stop_watch.send(true);
    let _ = watchdog.await;
    // Every handler has returned, so every sender is gone: the batcher
    // finishes what it holds and stops.
    let drained = batcher.await;
    served?;
    drained
        .map_err(|e| ServeError::Batcher(e.to_string()))?
        .map_err(|e| ServeError::Batcher(e.to_string()))
}

async fn batcher(mut recorder: Recorder, mut rx: mpsc::Receiver<Pending>, max: usize, metrics: Arc<Metrics>) {
    while let Some(first) = rx.recv().await {
        let mut pending = vec![first];
        while pending.len() < max {
            match rx.try_recv() {
                Ok(p) => pending.push(p),
                Err(_) => break,
            }
        }
        metrics.batch(pending.len());
        let mut jobs = Vec::new();
        let mut malformed = Vec::new();
        // Replies in order, each marked with whether a job outcome is its.
        let mut replies = Vec::with_capacity(pending.len());
        for p in pending {
            match p.work {
                Work::Job(s) => {
                    jobs.push(*s);
                    replies.push((true, p.reply));
                }
                Work::Malformed(m) => {
                    malformed.push(*m);
                    replies.push((false, p.reply));
                }
            }
        }
        match recorder.record(&jobs, &malformed).await {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for (is_job, reply) in replies {
                    let outcome = if is_job { outcomes.next() } else { None };
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                tracing::error!("recording a batch of {} failed: {e}", replies.len());
                let msg = e.to_string();
                for (_, reply) in replies {
                    let _ = reply.send(Err(msg.clone()));
                }
            }
        }
    }
}

impl App {
    /// Hand `work` to the batcher; the receiver gets its result after the
    /// transaction holding it ended.
    async fn enqueue(&self, work: Work) -> Result<oneshot::Receiver<Answer>, String> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending { work, reply })
            .await
            .map_err(|_| SHUTTING_DOWN.to_owned())?;
        Ok(answer)
    }

    async fn submit(&self, work: Work) -> Answer {
        let answer = self.enqueue(work).await?;
        answer.await.map_err(|_| SHUTTING_DOWN.to_owned())?
    }

    /// Whether one more malformed document from `sender` may be kept this hour.
    fn may_keep_junk(&self, sender: std::net::IpAddr) -> bool {
        let mut junk = self.junk.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if junk.len() > 10_000 {
            junk.retain(|_, (since, _)| now.duration_since(*since).as_secs() < 3600);
        }
        let (since, n) = junk.entry(sender).or_insert((now, 0));
        if now.duration_since(*since).as_secs() >= 3600 {
            *since = now;
            *n = 0;
        }
        *n += 1;
        if *n == KEPT_PER_SENDER_HOUR + 1 {
            tracing::warn!(
                "{sender} sent more than {KEPT_PER_SENDER_HOUR} malformed documents this hour: refusing the rest without keeping them"
            );
        }
        *n <= KEPT_PER_SENDER_HOUR
    }

    /// Count what became of a job, log a rejection, and say how to reply.
    fn settle(&self, outcome: &Outcome) -> (StatusCode, Value) {
        self.metrics.outcome(outcome_name(outcome));
        if let Outcome::Rejected { job, reason, .. } = outcome {
            tracing::warn!("kept, not charged: {}: {reason}", job.as_deref().unwrap_or("?"));
        }
        outcome_reply(outcome)
    }
}

fn reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// Around every job endpoint: credentials first (before a body is read),
/// then the request's status and latency for `/metrics`.
async fn guard(State(app): State<Arc<App>>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let started = Instant::now();
    let response = if app.credentials.allows(request.headers()) {
        next.run(request).await
    } else {
        unauthorized()
    };
    app.metrics.request(response.status().as_u16(), started.elapsed());
    response
}

async fn busy() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5"), (header::CONTENT_TYPE, "application/json")],
        format!(
            "{}\n",
            json!({"error": "the server holds as many connections as it may; send again shortly"})
        ),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"hpc-ledger\"")],
        "credentials required\n",
    )
        .into_response()
}

fn unavailable(reason: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "10"), (header::CONTENT_TYPE, "application/json")],
        format!("{}\n", json!({"error": crate::db::redact(reason)})),
    )
        .into_response()
}

/// The status and body for what happened to a job.
fn outcome_reply(outcome: &Outcome) -> (StatusCode, Value) {
    let status = match outcome {
        Outcome::Recorded { .. } | Outcome::Superseded { .. } => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    (status, serde_json::to_value(outcome).unwrap_or(Value::Null))
}

async fn jobcomp_doc(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<SocketAddr>>>,
    body: Bytes,
) -> Response {
    let app = &*app;
    let sender = peer.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.0.0.ip());
    let options = ReadOptions::default();
    let source = |raw: String, raw_bytes: Option<Vec<u8>>| Source {
        format: "jobcomp",
        reference: "serve /slurm/_doc".into(),
        raw,
        raw_bytes,
        options: options.clone(),
        job: None,
    };
    // The byte policy of every path (docs/recording.md): a NUL byte is a
    // damaged record; bytes that are not UTF-8 are read as U+FFFD and kept
    // exactly (less the batch script). Nothing here copies a whole body: a
    // UTF-8 one is read in place (its script skipped), another has its
    // script removed at the byte level before it is decoded.
    if let Some(at) = body.iter().position(|b| *b == 0) {
        let reason = format!("the record holds a NUL byte (byte {}): a damaged record", at + 1);
        let (raw, bytes) = head_of(&body);
        return malformed(app, sender, source(raw, bytes), reason).await;
    }
    let (text, exact): (std::borrow::Cow<str>, Option<Vec<u8>>) = match std::str::from_utf8(&body) {
        Ok(t) => (t.into(), None),
        Err(_) => match crate::ingest::json_bytes::without_members(&body, jobcomp::DROPPED) {
            Some(kept) => (String::from_utf8_lossy(&kept).into_owned().into(), Some(kept)),
            None => {
                let (raw, bytes) = head_of(&body);
                let reason = "not JSON (and not UTF-8)".to_owned();
                return malformed(app, sender, source(raw, bytes), reason).await;
            }
        },
    };
    let (doc, item) = match jobcomp::parse_document(&text, &options) {
        Ok((doc, item)) if exact.is_some() => (doc, crate::ingest::check_decoded(item)),
        Ok(parsed) => parsed,
        Err(reason) => {
            // What is kept of it: at most its start, marked.
            let (raw, bytes) = if text.len() > KEPT_MALFORMED {
                head_of(text.as_bytes())
            } else {
                (jobcomp::stored_body(&text), exact)
            };
            return malformed(app, sender, source(raw, bytes), reason).await;
        }
    };
    match item {
        Item::Job(job) => {
            let submission = Submission {
                input: *job,
                source: source(jobcomp::stored_document(doc), exact),
            };
            job_reply(app, submission).await
        }
        Item::Skip(s) => {
            app.metrics.outcome("skipped");
            reply(StatusCode::OK, json!({"outcome": "skipped", "reason": s.to_string()}))
        }
        Item::Bad(reason) => malformed(app, sender, source(jobcomp::stored_document(doc), exact), reason).await,
    }
}

/// Keep a malformed document (so it is seen in `rejected`: at most
/// [`KEPT_MALFORMED`] of it, and at most [`KEPT_PER_SENDER_HOUR`] a sender),
/// then refuse it.
async fn malformed(app: &App, sender: std::net::IpAddr, mut source: Source, reason: String) -> Response {
    app.metrics.outcome("malformed");
    if !app.may_keep_junk(sender) {
        app.metrics.outcome("malformed_not_kept");
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"error": reason, "kept": false,
                   "note": format!("more than {KEPT_PER_SENDER_HOUR} malformed documents from {sender} this hour: this one is not kept")}),
        );
    }
    tracing::warn!("malformed document from {sender}: {reason}");
    cut_to_kept(&mut source);
    if let Err(e) = app.submit(Work::Malformed(Box::new((source, reason.clone())))).await {
        return unavailable(&e);
    }
    reply(StatusCode::BAD_REQUEST, json!({"error": reason}))
}

/// What is kept of a body that is refused: its first [`KEPT_MALFORMED`]
/// bytes as text (bytes that are not UTF-8 as U+FFFD, NUL too), marked with
/// its size and the hash of the whole when longer; and those bytes when the
/// text is not them exactly.
fn head_of(body: &[u8]) -> (String, Option<Vec<u8>>) {
    use sha2::Digest;
    // Room for the mark: what is kept stays within KEPT_MALFORMED.
    let head = if body.len() > KEPT_MALFORMED {
        &body[..KEPT_MALFORMED - 256]
    } else {
        body
    };
    let mut raw = String::from_utf8_lossy(head).replace('\0', "\u{FFFD}");
    let exact = head.contains(&0) || std::str::from_utf8(head).is_err();
    if body.len() > KEPT_MALFORMED {
        raw.push_str(&format!(
            "\n… cut by hpc-ledger serve: {} bytes in all, sha256 {}",
            body.len(),
            hex::encode(sha2::Sha256::digest(body))
        ));
    }
    (raw, exact.then(|| head.to_vec()))
}

/// A malformed record longer than [`KEPT_MALFORMED`] (say, a document
/// without its script that still holds a huge field) keeps its start, its
/// size and the hash of the whole ([`head_of`]).
fn cut_to_kept(source: &mut Source) {
    let over = source.raw.len() > KEPT_MALFORMED || source.raw_bytes.as_ref().is_some_and(|b| b.len() > KEPT_MALFORMED);
    if over {
        let (raw, bytes) = match &source.raw_bytes {
            Some(b) => head_of(b),
            None => head_of(source.raw.as_bytes()),
        };
        source.raw = raw;
        source.raw_bytes = bytes;
    }
}

async fn job_reply(app: &App, submission: Submission) -> Response {
    match app.submit(Work::Job(Box::new(submission))).await {
        Ok(Some(outcome)) => {
            let (status, body) = app.settle(&outcome);
            reply(status, body)
        }
        Ok(None) => unavailable("no outcome"),
        Err(e) => unavailable(&e),
    }
}

fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Recorded { .. } => "recorded",
        Outcome::Replayed { .. } => "replayed",
        Outcome::Revised { .. } => "revised",
        Outcome::Superseded { .. } => "superseded",
        Outcome::Rejected { .. } => "rejected",
    }
}

/// The project's own JSON job format (docs/recording.md): one object, or an
/// array of them. Every element is checked first; if any is malformed the
/// request is refused whole (400, naming each) and nothing is recorded.
async fn json_jobs(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let app = &*app;
    // At most MAX_JOBS jobs, counted on the bytes before anything is built:
    // the work and the reply of a request stay bounded.
    let is_array = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    if is_array && crate::ingest::json_bytes::count_elements(&body, MAX_JOBS + 1) > MAX_JOBS {
        app.metrics.outcome("malformed");
        return reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": format!("at most {MAX_JOBS} jobs per request; send them in several; nothing was recorded")}),
        );
    }
    // The byte policy: not UTF-8 is read as U+FFFD, each job's bytes kept.
    let text = String::from_utf8_lossy(&body);
    let lossy = matches!(text, std::borrow::Cow::Owned(_));
    // Each element as the text it was sent as (no tree of the whole body).
    let elements: Vec<&serde_json::value::RawValue> = if is_array {
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return reply(StatusCode::BAD_REQUEST, json!({"error": format!("not JSON: {e}")})),
        }
    } else {
        match serde_json::from_str::<&serde_json::value::RawValue>(&text) {
            Ok(v) if v.get().trim_start().starts_with('{') => vec![v],
            Ok(_) => {
                return reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "expected a job object or an array of job objects"}),
                );
            }
            Err(e) => return reply(StatusCode::BAD_REQUEST, json!({"error": format!("not JSON: {e}")})),
        }
    };
    let single = !is_array;
    let element_bytes: Option<Vec<Vec<u8>>> = lossy.then(|| match crate::ingest::json_bytes::array_elements(&body) {
        Some(ranges) if is_array => ranges.into_iter().map(|r| body[r].to_vec()).collect(),
        _ => vec![body.to_vec()],
    });
    let mut parser = JsonlParser::new(&ReadOptions::default());
    let mut items = Vec::with_capacity(elements.len());
    let mut errors = Vec::new();
    let mut malformed = 0usize;
    for (index, element) in elements.iter().enumerate() {
        let raw = element.get().to_owned();
        let exact = element_bytes.as_ref().and_then(|e| e.get(index)).map(Vec::as_slice);
        let reason = match crate::ingest::read_record(&mut parser, &raw, exact) {
            Some(Item::Bad(reason)) => reason,
            None => "empty".to_owned(),
            Some(item) => {
                items.push((raw, item));
                continue;
            }
        };
        malformed += 1;
        if errors.len() < LISTED_ERRORS {
            errors.push(json!({"index": index, "error": reason}));
        }
    }
    if malformed > 0 {
        app.metrics.outcome("malformed");
        return reply(
            StatusCode::BAD_REQUEST,
            json!({
                "error": format!("{malformed} of {} jobs malformed; nothing was recorded", elements.len()),
                "malformed": malformed,
                "jobs": errors,
                "not_listed": malformed - errors.len(),
            }),
        );
    }
    let mut waiting = Vec::new();
    let mut results = vec![Value::Null; items.len()];
    for (index, (raw, item)) in items.into_iter().enumerate() {
        match item {
            Item::Job(job) => {
                let work = Work::Job(Box::new(Submission {
                    input: *job,
                    source: Source {
                        format: "json",
                        reference: format!("serve /jobs #{index}"),
                        raw,
                        raw_bytes: element_bytes.as_ref().and_then(|e| e.get(index)).cloned(),
                        options: ReadOptions::default(),
                        job: None,
                    },
                }));
                // All queued before any is awaited: they share a transaction.
                match app.enqueue(work).await {
                    Ok(answer) => waiting.push((index, answer)),
                    Err(e) => return unavailable(&e),
                }
            }
            Item::Skip(s) => {
                app.metrics.outcome("skipped");
                results[index] = json!({"outcome": "skipped", "reason": s.to_string()});
            }
            Item::Bad(_) => unreachable!("checked above"),
        }
    }
    let mut status = StatusCode::OK;
    for (index, answer) in waiting {
        match answer.await {
            Ok(Ok(Some(outcome))) => {
                let (s, body) = app.settle(&outcome);
                if s == StatusCode::CREATED {
                    status = s;
                }
                results[index] = body;
            }
            Ok(Ok(None)) => return unavailable("no outcome"),
            Ok(Err(e)) => return unavailable(&e),
            Err(_) => return unavailable(SHUTTING_DOWN),
        }
    }
    if single {
        let only = results.pop().unwrap_or(Value::Null);
        return reply(status, only);
    }
    reply(status, json!({ "results": results }))
}

async fn healthz(State(app): State<Arc<App>>) -> Response {
    if app.queue.is_closed() {
        return (StatusCode::SERVICE_UNAVAILABLE, "the recording task stopped\n").into_response();
    }
    if app.health.state() == health::State::Starting {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "database starting: the embedded PostgreSQL stopped answering ({}) and is being started again\n",
                app.health.detail()
            ),
        )
            .into_response();
    }
    match health::ping(&app.pool).await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            let next = if app.health.restarts_database {
                "serve starts the embedded PostgreSQL again"
            } else {
                "serve retries with backoff"
            };
            (StatusCode::SERVICE_UNAVAILABLE, format!("database down: {e}; {next}\n")).into_response()
        }
    }
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
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

/// Whether serving on `addr` without credentials is allowed: only on
/// loopback, where only this machine's users can connect.
pub fn open_allowed(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_accept_exactly_what_was_configured() {
        let c = Credentials::none()
            .with_basic("slurm:s3cret")
            .unwrap()
            .with_token("tok123")
            .unwrap();
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            h
        };
        // base64("slurm:s3cret")
        assert!(c.allows(&with("Basic c2x1cm06czNjcmV0")));
        assert!(c.allows(&with("Bearer tok123")));
        assert!(!c.allows(&with("Basic c2x1cm06czNjcmV1")));
        assert!(!c.allows(&with("Bearer tok1234")));
        // The scheme in any case, with more than one space (RFC 7235).
        assert!(c.allows(&with("bearer tok123")));
        assert!(c.allows(&with("BASIC  c2x1cm06czNjcmV0")));
        assert!(!c.allows(&with("bearer tok12")));
        assert!(!c.allows(&with("Token tok123")));
        assert!(!c.allows(&with("Bearertok123")));
        assert!(!c.allows(&HeaderMap::new()));
        assert!(Credentials::none().allows(&HeaderMap::new()));
        assert!(Credentials::none().with_basic("nocolon").is_err());
        assert!(Credentials::none().with_token("two words").is_err());
        assert!(!format!("{c:?}").contains("tok123"));
    }

    #[test]
    fn only_loopback_may_serve_without_credentials() {
        assert!(open_allowed(&"127.0.0.1:8080".parse().unwrap()));
        assert!(open_allowed(&"[::1]:8080".parse().unwrap()));
        assert!(!open_allowed(&"0.0.0.0:8080".parse().unwrap()));
        assert!(!open_allowed(&"10.1.2.3:8080".parse().unwrap()));
    }
}
