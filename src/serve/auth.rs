//! Who may post to `serve`, and who may only ask (`/check`,
//! `/metrics/budgets`): HTTP Basic and bearer credentials, checked before a
//! body is read (an unauthenticated sender cannot make the server buffer
//! anything), and where serving without them is allowed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::App;

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

/// A credential that may only ask (`/check`, `/metrics/budgets`): for submit
/// hooks on machines users log in to, and for scrapers.
pub const CHECK_BASIC_ENV: &str = "HPC_LEDGER_SERVE_CHECK_BASIC";

pub const CHECK_TOKEN_ENV: &str = "HPC_LEDGER_SERVE_CHECK_TOKEN";

/// The billing office's credential for the web view (docs/web.md).
pub const WEB_BASIC_ENV: &str = "HPC_LEDGER_WEB_BASIC";

pub const WEB_TOKEN_ENV: &str = "HPC_LEDGER_WEB_TOKEN";

impl Credentials {
    /// No credentials: anyone who can connect may post.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// Accept HTTP Basic with `user:password`.
    pub fn with_basic(mut self, user_password: &str) -> Result<Credentials, String> {
        if !user_password.contains(':') {
            return Err("must be user:password".to_owned());
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
        self.accepted.push(format!("Basic {encoded}"));
        Ok(self)
    }

    /// Accept `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: &str) -> Result<Credentials, String> {
        if token.is_empty() || token.chars().any(char::is_whitespace) {
            return Err("must be one word".to_owned());
        }
        self.accepted.push(format!("Bearer {token}"));
        Ok(self)
    }

    /// Read `HPC_LEDGER_SERVE_BASIC` / `HPC_LEDGER_SERVE_TOKEN`, or the
    /// files named by `…_FILE`.
    pub fn from_env() -> Result<Credentials, String> {
        Credentials::from_env_vars(BASIC_ENV, TOKEN_ENV)
    }

    /// The asking credential: `HPC_LEDGER_SERVE_CHECK_BASIC` /
    /// `HPC_LEDGER_SERVE_CHECK_TOKEN` (or `…_FILE`).
    pub fn checks_from_env() -> Result<Credentials, String> {
        Credentials::from_env_vars(CHECK_BASIC_ENV, CHECK_TOKEN_ENV)
    }

    /// The web view's billing-office credential: `HPC_LEDGER_WEB_BASIC` /
    /// `HPC_LEDGER_WEB_TOKEN` (or `…_FILE`).
    pub fn web_from_env() -> Result<Credentials, String> {
        Credentials::from_env_vars(WEB_BASIC_ENV, WEB_TOKEN_ENV)
    }

    fn from_env_vars(basic: &str, token: &str) -> Result<Credentials, String> {
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
        if let Some(b) = read(basic)? {
            c = c.with_basic(&b).map_err(|e| format!("{basic} {e}"))?;
        }
        if let Some(t) = read(token)? {
            c = c.with_token(&t).map_err(|e| format!("{token} {e}"))?;
        }
        Ok(c)
    }

    pub fn is_empty(&self) -> bool {
        self.accepted.is_empty()
    }

    pub(super) fn allows(&self, headers: &HeaderMap) -> bool {
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

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Around every posting endpoint: credentials first (before a body is
/// read), then the request's status and latency for `/metrics`.
pub(super) async fn guard(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let allowed = app.credentials.allows(request.headers());
    guarded(&app, allowed, request, next).await
}

/// Around the endpoints that only ask (`/check`, `/metrics/budgets`): the
/// posting credential, or the asking one.
pub(super) async fn guard_asking(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let headers = request.headers();
    let allowed = app.credentials.allows(headers) || (!app.checks.is_empty() && app.checks.allows(headers));
    guarded(&app, allowed, request, next).await
}

async fn guarded(app: &App, allowed: bool, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let started = Instant::now();
    let response = if from_a_web_page(request.headers()) {
        refused_from_a_web_page()
    } else if allowed {
        next.run(request).await
    } else {
        unauthorized()
    };
    app.metrics.request(response.status().as_u16(), started.elapsed());
    response
}

/// A 401, and the connection closed after it: a client without the
/// credential cannot hold a connection by asking again and again.
pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Basic realm=\"hpc-ledger\""),
            (header::CONNECTION, "close"),
        ],
        "credentials required\n",
    )
        .into_response()
}

/// Whether a request was sent by a browser for a web page (it names the
/// page's origin, or says how it relates to it): schedulers, hooks, scripts
/// and Prometheus never do. The posting, `/check` and budget routes refuse
/// those, so that a page opened on a machine that can reach `serve` (a
/// loopback `serve` without credentials, or one behind a proxy that adds
/// them) can neither record charges (a form or `fetch` needs no permission
/// to POST across sites) nor read budgets through DNS rebinding. Typing
/// the address in the browser (`Sec-Fetch-Site: none`) is not refused.
pub(super) fn from_a_web_page(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN)
        || headers
            .get("sec-fetch-site")
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"none"))
}

fn refused_from_a_web_page() -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONNECTION, "close")],
        "requests from a web page are refused here: this route is for schedulers, hooks and scripts\n",
    )
        .into_response()
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
    fn requests_from_web_pages_are_told_apart() {
        let with = |name: &'static str, v: &str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_str(v).unwrap());
            h
        };
        assert!(from_a_web_page(&with("origin", "http://evil.example")));
        assert!(from_a_web_page(&with("origin", "null")));
        assert!(from_a_web_page(&with("sec-fetch-site", "cross-site")));
        assert!(from_a_web_page(&with("sec-fetch-site", "same-origin")));
        assert!(!from_a_web_page(&with("sec-fetch-site", "none")));
        assert!(!from_a_web_page(&with("user-agent", "curl/8.5.0")));
        assert!(!from_a_web_page(&HeaderMap::new()));
    }

    #[test]
    fn only_loopback_may_serve_without_credentials() {
        assert!(open_allowed(&"127.0.0.1:8080".parse().unwrap()));
        assert!(open_allowed(&"[::1]:8080".parse().unwrap()));
        assert!(!open_allowed(&"0.0.0.0:8080".parse().unwrap()));
        assert!(!open_allowed(&"10.1.2.3:8080".parse().unwrap()));
    }
}
