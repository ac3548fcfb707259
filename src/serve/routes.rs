//! The endpoints: jobcomp documents, the project's JSON jobs, `/healthz`,
//! `/metrics`, and the reply each outcome gets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::batcher::{Answer, Pending, SHUTTING_DOWN, Work};
use super::{App, MAX_JOBS, health};
use crate::domain::kinds::SourceFormat;
use crate::ingest::{Item, KeptOptions, ReadOptions, jobcomp, jsonl::JsonlParser};
use crate::service::record::{Outcome, Source, Submission};

/// Of a refused `POST /jobs`, the malformed elements listed one by one (the
/// rest are counted).
pub(super) const LISTED_ERRORS: usize = 20;

/// Of a malformed document, at most this much is kept (with its size and
/// the hash of the whole): enough to see what was sent, not a store for junk.
pub const KEPT_MALFORMED: usize = 64 << 10;

/// Malformed documents one sender (address) may have kept per hour; past
/// that they are still refused (400), and counted, but not kept.
pub const KEPT_PER_SENDER_HOUR: u32 = 100;

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
        self.metrics.outcome(outcome.name());
        if let Outcome::Rejected { job, reason, .. } = outcome {
            // Quoted: a job id or reason cannot forge a log line of its own.
            tracing::warn!("kept, not charged: {:?}: {reason:?}", job.as_deref().unwrap_or("?"));
        }
        outcome_reply(outcome)
    }
}

pub(super) fn reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

pub(super) async fn busy() -> Response {
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

pub(super) fn unavailable(reason: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "10"), (header::CONTENT_TYPE, "application/json")],
        format!("{}\n", json!({"error": crate::db::redact(reason)})),
    )
        .into_response()
}

/// The status and body for what happened to a job.
pub(super) fn outcome_reply(outcome: &Outcome) -> (StatusCode, Value) {
    let status = match outcome {
        Outcome::Recorded { .. } | Outcome::Superseded { .. } => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    (status, serde_json::to_value(outcome).unwrap_or(Value::Null))
}

pub(super) async fn jobcomp_doc(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<SocketAddr>>>,
    body: Bytes,
) -> Response {
    let app = &*app;
    let sender = peer.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.0.0.ip());
    let options = KeptOptions::jobcomp();
    let source = |raw: String, raw_bytes: Option<Vec<u8>>| Source {
        intake: None,
        format: SourceFormat::Jobcomp,
        reference: super::intake::REFERENCE.into(),
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
    // The exact bytes of such a body leave out what its reading leaves out
    // (a member over 64 KiB that is not a text the job is read from).
    let exact = exact.map(|bytes| {
        let out = jobcomp::left_out_members(&text);
        let keys: Vec<&str> = out.iter().map(String::as_str).collect();
        match keys.is_empty() {
            true => bytes,
            false => crate::ingest::json_bytes::without_members(&bytes, &keys).unwrap_or(bytes),
        }
    });
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
            match &app.intake {
                Some(stores) => accept_reply(app, stores, submission).await,
                None => job_reply(app, submission).await,
            }
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
pub(super) async fn malformed(app: &App, sender: std::net::IpAddr, mut source: Source, reason: String) -> Response {
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
pub(super) fn head_of(body: &[u8]) -> (String, Option<Vec<u8>>) {
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
pub(super) fn cut_to_kept(source: &mut Source) {
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

pub(super) async fn job_reply(app: &App, submission: Submission) -> Response {
    match app.submit(Work::Job(Box::new(submission))).await {
        Ok(Some(outcome)) => {
            let (status, body) = app.settle(&outcome);
            reply(status, body)
        }
        Ok(None) => unavailable("no outcome"),
        Err(e) => unavailable(&e),
    }
}

/// `serve --intake`: store the document durably, wake the recording task
/// and answer; the job is priced and recorded moments later, in a batch
/// (docs/slurm.md, "Accepted first").
async fn accept_reply(
    app: &App,
    stores: &tokio::sync::mpsc::Sender<super::intake::Store>,
    submission: Submission,
) -> Response {
    let job = submission.input.key();
    let (answer, stored) = oneshot::channel();
    let store = super::intake::Store {
        document: submission.source.raw,
        exact: submission.source.raw_bytes,
        reply: answer,
    };
    if stores.send(store).await.is_err() {
        return unavailable(SHUTTING_DOWN);
    }
    match stored.await {
        Ok(Ok(())) => {
            app.metrics.outcome("accepted");
            reply(StatusCode::OK, json!({"outcome": "accepted", "job": job}))
        }
        Ok(Err(e)) => unavailable(&e),
        Err(_) => unavailable(SHUTTING_DOWN),
    }
}

/// The project's own JSON job format (docs/recording.md): one object, or an
/// array of them. Every element is checked first; if any is malformed the
/// request is refused whole (400, naming each) and nothing is recorded.
pub(super) async fn json_jobs(State(app): State<Arc<App>>, body: Bytes) -> Response {
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
                        intake: None,
                        format: SourceFormat::Json,
                        reference: format!("serve /jobs #{index}"),
                        raw,
                        raw_bytes: element_bytes.as_ref().and_then(|e| e.get(index)).cloned(),
                        options: KeptOptions::default(),
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

pub(super) async fn healthz(State(app): State<Arc<App>>) -> Response {
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

/// `GET /healthz` on a connection over the cap: the server is up, but it
/// refuses this client's posts and checks until connections free up, and
/// a monitor is told so.
pub(super) async fn healthz_over(over: Option<axum::Extension<super::conn::Over>>) -> Response {
    let why = match over.map(|e| e.0) {
        Some(super::conn::Over::ClientShare) => {
            "this client address holds as many connections as one address may (--max-per-peer)"
        }
        _ => "every connection the server serves in full is held (--max-connections)",
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5")],
        format!("full: {why}; posts and checks from here are answered 503 until connections close\n"),
    )
        .into_response()
}

pub(super) async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

/// `GET /metrics/budgets` (with serve's credentials: these are the
/// projects' finances, and each scrape sums every balance): each budgeted
/// project's remaining balance and fraction used per pool (`pool="all"`,
/// or the cluster its scoped allocations pay for), for Alertmanager
/// (docs/budgets.md); 503 when the database cannot be asked in 10 s, so the
/// scrape fails visibly rather than the gauges vanishing.
pub(super) async fn budget_metrics(State(app): State<Arc<App>>) -> Response {
    use std::fmt::Write;
    let list = match tokio::time::timeout(
        std::time::Duration::from_secs(10),
        crate::service::budget::balances(&app.pool, chrono::Utc::now()),
    )
    .await
    {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => {
            tracing::warn!("budget metrics: {e}");
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "the ledger database cannot be asked"}),
            );
        }
        Err(_) => {
            return reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "the balances took more than 10 s"}),
            );
        }
    };
    let mut out = String::new();
    out.push_str(
        "# HELP hpc_ledger_budget_remaining What a budgeted project may still spend (allocated - used - held).\n",
    );
    out.push_str("# TYPE hpc_ledger_budget_remaining gauge\n");
    let label = |p: &str| p.replace('\\', "\\\\").replace('"', "\\\"");
    for b in &list {
        let _ = writeln!(
            out,
            "hpc_ledger_budget_remaining{{project=\"{}\",pool=\"{}\"}} {}",
            label(&b.project),
            label(b.balance.cluster.as_deref().unwrap_or("all")),
            b.balance.remaining
        );
    }
    out.push_str(
        "# HELP hpc_ledger_budget_fraction_used What a budgeted project has used of its allocations in force.\n",
    );
    out.push_str("# TYPE hpc_ledger_budget_fraction_used gauge\n");
    for b in &list {
        let _ = writeln!(
            out,
            "hpc_ledger_budget_fraction_used{{project=\"{}\",pool=\"{}\"}} {}",
            label(&b.project),
            label(b.balance.cluster.as_deref().unwrap_or("all")),
            b.balance.fraction_used
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// `POST /check`: may this job start (docs/budgets.md)? The same answer as
/// `hpc-ledger check`, for scheduler hooks: 200 with the answer (`allowed`
/// true or false), 422 for a request that cannot be priced, 503 when the
/// database cannot be asked (the hook's fail-open/fail-closed setting then
/// decides).
pub(super) async fn check(State(app): State<Arc<App>>, body: Bytes) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ask {
        project: String,
        cluster: String,
        resources: String,
        #[serde(default)]
        walltime: Option<String>,
        #[serde(default)]
        queue: Option<String>,
        #[serde(default)]
        node_type: Option<String>,
        #[serde(default)]
        job_id: Option<String>,
        #[serde(default)]
        array_index: Option<u32>,
        #[serde(default)]
        floor: Option<rust_decimal::Decimal>,
        /// An array's tasks, checked whole (default 1).
        #[serde(default)]
        tasks: Option<u32>,
    }
    let ask: Ask = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                json!({"error": format!("not a check request: {e}")}),
            );
        }
    };
    let job = crate::service::budget::JobRequest {
        project: ask.project.clone(),
        job_id: ask.job_id,
        array_index: ask.array_index,
        tasks: ask.tasks.unwrap_or(1),
        quote: crate::service::quote::QuoteRequest {
            cluster: ask.cluster,
            resources: ask.resources,
            dialect: None,
            walltime: ask.walltime,
            queue: ask.queue,
            node_type: ask.node_type,
            at: chrono::Utc::now(),
            project: Some(ask.project),
            class: None,
        },
    };
    let started = Instant::now();
    let answer = crate::service::budget::check_with(&app.pool, &app.catalog, &job, ask.floor.unwrap_or_default()).await;
    app.metrics.check(started.elapsed());
    match answer {
        Ok(a) => reply(StatusCode::OK, serde_json::to_value(&a).unwrap_or_default()),
        Err(crate::service::budget::BudgetError::Db(e)) => {
            tracing::warn!("check: {e}");
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "the ledger database cannot be asked"}),
            )
        }
        Err(e) => reply(StatusCode::UNPROCESSABLE_ENTITY, json!({"error": e.to_string()})),
    }
}
