//! The read-only web view (docs/web.md): `GET /ui` (the billing office's
//! project list; a project token is sent to its project), `GET
//! /ui/projects/CODE` (months, the month shown, users, recent jobs) and
//! `GET /ui/projects/CODE/statements/YYYY-MM.html|pdf|csv`.
//!
//! Who: the billing office's credential (`HPC_LEDGER_WEB_BASIC` or
//! `HPC_LEDGER_WEB_TOKEN`) sees everything; a project token (`hpc-ledger
//! access grant`), sent as a bearer token or as the password of HTTP Basic
//! (any user name), sees its project. Without either: 401. A project that
//! does not exist and one the token may not see both get the same 404.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::App;
use crate::document;
use crate::domain::period::Month;
use crate::service::web::{self as web, Viewer};

/// How many web view requests read the ledger at once (of the pool's 8
/// connections); the others wait their turn.
pub(super) const SLOTS: usize = 2;

fn query(uri: &Uri, key: &str) -> Option<String> {
    let q = uri.query()?;
    url::form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The token in `Authorization`: a bearer token, or Basic's password.
fn presented_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim_matches(' ');
    if scheme.eq_ignore_ascii_case("bearer") {
        Some(rest.to_owned())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        text.split_once(':').map(|(_, password)| password.to_owned())
    } else {
        None
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Basic realm=\"hpc-ledger web\""),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONNECTION, "close"),
        ],
        "credentials required\n",
    )
        .into_response()
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, html_headers(), document::web::not_found()).into_response()
}

fn failed(e: impl std::fmt::Display) -> Response {
    tracing::error!("web view: {e}");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        "the ledger cannot be read now\n",
    )
        .into_response()
}

/// A page that cannot be read: an archived month's is gone for good (410,
/// saying where it went); anything else is the ledger failing.
fn page_failed(e: web::WebError) -> Response {
    match e {
        web::WebError::Statement(a @ crate::service::statement::StatementError::Archived { .. }) => (
            StatusCode::GONE,
            [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
            format!("{a}\n"),
        )
            .into_response(),
        e => failed(e),
    }
}

fn bad_request(msg: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        format!("{msg}\n"),
    )
        .into_response()
}

/// No script, no fetching of anything: every HTML the web view sends, its
/// pages and its statements' HTML downloads.
const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'";

/// Private, never cached; no script, no fetching of anything.
fn html_headers() -> [(header::HeaderName, &'static str); 4] {
    [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, CSP),
    ]
}

/// Who is asking, or the 401 to answer.
async fn viewer(app: &App, headers: &HeaderMap) -> Result<Viewer, Response> {
    if !app.web.is_empty() && app.web.allows(headers) {
        return Ok(Viewer::Billing);
    }
    let Some(token) = presented_token(headers) else {
        return Err(unauthorized());
    };
    match web::token_project(&app.pool, &token).await {
        Ok(Some(id)) => Ok(Viewer::Project(id)),
        Ok(None) => Err(unauthorized()),
        Err(e) => Err(failed(e)),
    }
}

fn with_timing(mut r: Response, started: Instant) -> Response {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(v) = HeaderValue::from_str(&format!("app;dur={ms:.1}")) {
        r.headers_mut().insert("server-timing", v);
    }
    r
}

fn month_param(uri: &Uri, this: Month) -> Result<Month, String> {
    match query(uri, "month") {
        None => Ok(this),
        Some(m) => {
            let month: Month = m.parse()?;
            if shown(month, this) {
                Ok(month)
            } else {
                Err(format!(
                    "{month} is not a month the ledger can show: from 1990-01 to {this}"
                ))
            }
        }
    }
}

/// Months a page or a statement can be of: none after this one (the
/// billing time zone's), none before 1990 (no job record begins before).
/// A statement of 0000-01 or 9999-12 was rendered, a PDF each time (a
/// security review of 2026-12-07).
fn shown(month: Month, this: Month) -> bool {
    month.year() >= 1990 && month <= this
}

/// `GET /ui`.
pub(super) async fn home(State(app): State<Arc<App>>, headers: HeaderMap, uri: Uri) -> Response {
    let started = Instant::now();
    let Ok(_slot) = app.web_slots.acquire().await else {
        return failed("closed");
    };
    let viewer = match viewer(&app, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let r = match viewer {
        Viewer::Project(id) => match web::code_of(&app.reader, id).await {
            Ok(Some(code)) => (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, format!("/ui/projects/{}", document::web::seg(&code)))],
            )
                .into_response(),
            Ok(None) => not_found(),
            Err(e) => failed(e),
        },
        Viewer::Billing => {
            let now = chrono::Utc::now();
            let this = match web::this_month(&app.reader, now).await {
                Ok(m) => m,
                Err(e) => return failed(e),
            };
            let month = match month_param(&uri, this) {
                Ok(m) => m,
                Err(e) => return bad_request(e),
            };
            let page = match query(&uri, "page").map(|p| p.parse::<i64>()) {
                None => 1,
                Some(Ok(p)) => p,
                Some(Err(_)) => return bad_request("page must be a number".into()),
            };
            match web::overview(&app.reader, month, page, now).await {
                Ok(o) => (html_headers(), document::web::overview(&o)).into_response(),
                Err(e) => page_failed(e),
            }
        }
    };
    with_timing(r, started)
}

/// `GET /ui/projects/{code}`.
pub(super) async fn project(
    State(app): State<Arc<App>>,
    Path(code): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let started = Instant::now();
    let (_slot, viewer, p) = match page_of(&app, &headers, &code).await {
        Ok(found) => found,
        Err(r) => return r,
    };
    let this = match web::this_month(&app.reader, chrono::Utc::now()).await {
        Ok(m) => m,
        Err(e) => return failed(e),
    };
    let month = match month_param(&uri, this) {
        Ok(m) => m,
        Err(e) => return bad_request(e),
    };
    let before = match query(&uri, "before").map(|b| b.parse::<i64>()) {
        None => None,
        Some(Ok(b)) => Some(b),
        Some(Err(_)) => return bad_request("before must be a job record id".into()),
    };
    let who = match viewer {
        Viewer::Billing => "the billing office".to_owned(),
        Viewer::Project(_) => format!("a token of {}", p.code),
    };
    let r = match web::project_page(&app.reader, &p, month, before).await {
        Ok(page) => (html_headers(), document::web::project(&page, &who)).into_response(),
        Err(e) => page_failed(e),
    };
    with_timing(r, started)
}

/// A web view slot, the viewer and the project whose page `code` names, or
/// the answer to give instead (401 without a viewer, one 404 for another
/// project's page and a missing one).
async fn page_of<'a>(
    app: &'a App,
    headers: &HeaderMap,
    code: &str,
) -> Result<
    (
        tokio::sync::SemaphorePermit<'a>,
        Viewer,
        crate::db::reference::ProjectRow,
    ),
    Response,
> {
    let Ok(slot) = app.web_slots.acquire().await else {
        return Err(failed("closed"));
    };
    let viewer = viewer(app, headers).await?;
    match web::visible(&app.reader, viewer, code).await {
        Ok(Some(p)) => Ok((slot, viewer, p)),
        Ok(None) => Err(not_found()),
        Err(e) => Err(failed(e)),
    }
}

/// `GET /ui/projects/{code}/statements/{YYYY-MM.ext}`.
pub(super) async fn statement(
    State(app): State<Arc<App>>,
    Path((code, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let started = Instant::now();
    let (_slot, _, p) = match page_of(&app, &headers, &code).await {
        Ok(found) => found,
        Err(r) => return r,
    };
    let Some((month, ext)) = file.split_once('.') else {
        return not_found();
    };
    let Ok(month) = month.parse::<Month>() else {
        return not_found();
    };
    if !matches!(ext, "html" | "pdf" | "csv") {
        return not_found();
    }
    match web::this_month(&app.reader, chrono::Utc::now()).await {
        Ok(this) if shown(month, this) => {}
        Ok(_) => return not_found(),
        Err(e) => return failed(e),
    }
    let (s, d) = match web::statement(&app.reader, &p, month).await {
        Ok(x) => x,
        Err(e) => return page_failed(e),
    };
    let generated = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    let name = format!("statement-{}-{month}.{ext}", document::web::seg(&p.code));
    let disposition = format!("attachment; filename=\"{name}\"");
    let ext = ext.to_owned();
    // A PDF takes milliseconds of CPU: drawn off the async workers.
    let rendered = tokio::task::spawn_blocking(move || -> (&'static str, Vec<u8>) {
        match ext.as_str() {
            "html" => (
                "text/html; charset=utf-8",
                document::statement_html(&s, &d, &generated).into_bytes(),
            ),
            "pdf" => ("application/pdf", document::pdf::statement_pdf(&s, &d, &generated)),
            _ => (
                "text/csv; charset=utf-8",
                document::statement_csv(std::slice::from_ref(&s)).into_bytes(),
            ),
        }
    })
    .await;
    let Ok((kind, body)) = rendered else {
        return failed("rendering the statement failed");
    };
    let r = (
        [
            (header::CONTENT_TYPE, kind.to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CACHE_CONTROL, "no-store".to_owned()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::CONTENT_SECURITY_POLICY, CSP.to_owned()),
        ],
        body,
    )
        .into_response();
    with_timing(r, started)
}
