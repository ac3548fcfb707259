//! Request bodies: read whole before a handler sees them, within a size
//! limit per route, a time limit, and a budget shared by all requests, so
//! that however many clients post at once (and however slowly), the bodies
//! the server holds stay under [`super::conn::Limits::body_budget`].
//!
//! A request takes its share of the budget (its `Content-Length`, or the
//! route's limit when it sends none) before its body is read, and gives it
//! back when it has been answered. One that cannot get its share within
//! [`WAIT`] is answered 503 with `Retry-After` (Slurm re-sends); one whose
//! body is larger than the route allows gets 413 before anything is read;
//! one that does not finish sending its body in time gets 408. Bodies over
//! [`SMALL`] (declared, or a route's limit for one sent in chunks) are
//! also counted for their client address: one holding some may take more
//! only up to a quarter of the budget in all, else 503 at once (one holding
//! none may always take one). So a client that declares large bodies and
//! sends them slowly (or never) cannot hold the budget from Slurm's posts
//! (it was one such client's for as long as the body timeout, three
//! requests at a time), and small ones, as every budget check and job post
//! is, never wait on what their address holds (a reverse proxy gives every
//! client one address; Slurm's controller posts and checks from one).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

/// The budget is counted in units of this many bytes.
const UNIT: usize = 1 << 10;

/// Bodies up to this size are not counted for their client address (a
/// budget check's route takes no more; a job's jobcomp document is a few
/// kilobytes, its batch script aside).
pub const SMALL: usize = 64 << 10;

/// How long a request waits for its share of the budget.
pub const WAIT: Duration = Duration::from_secs(10);

/// The bytes of request bodies held at once, over all requests.
#[derive(Debug, Clone)]
pub struct Budget {
    units: Arc<Semaphore>,
    total_units: u32,
    timeout: Duration,
    /// The units each client address holds.
    held: Arc<Mutex<HashMap<IpAddr, u32>>>,
}

impl Budget {
    pub fn new(bytes: usize, timeout: Duration) -> Budget {
        let total_units = u32::try_from(bytes.div_ceil(UNIT).max(1)).unwrap_or(u32::MAX);
        Budget {
            units: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            timeout,
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The most one client address may hold in large bodies once it holds
    /// one: a quarter of the budget.
    fn client_share(&self) -> u32 {
        self.total_units / 4
    }
}

/// What one client address holds of the budget, given back when dropped.
struct ClientShare {
    held: Arc<Mutex<HashMap<IpAddr, u32>>>,
    peer: IpAddr,
    units: u32,
}

impl ClientShare {
    /// `units` more for `peer`, unless it holds some already and that takes
    /// it past `share`.
    fn take(budget: &Budget, peer: IpAddr, units: u32, share: u32) -> Option<ClientShare> {
        let mut held = budget.held.lock().unwrap_or_else(|e| e.into_inner());
        let now = held.entry(peer).or_insert(0);
        if *now > 0 && now.saturating_add(units) > share {
            return None;
        }
        *now += units;
        Some(ClientShare {
            held: budget.held.clone(),
            peer,
            units,
        })
    }
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.peer) {
            *n = n.saturating_sub(self.units);
            if *n == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

/// The budget and the route's own limit.
#[derive(Debug, Clone)]
pub struct Route {
    pub budget: Budget,
    pub max: usize,
}

fn refuse(status: StatusCode, message: String) -> Response {
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{}\n", serde_json::json!({ "error": message })),
    )
        .into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    }
    r
}

/// The body in one buffer sized once from its declared length (a growing
/// buffer, or frames joined at the end, would hold it twice at the peak).
async fn collect(mut body: Body, declared: usize, max: usize) -> Result<bytes::Bytes, BodyError> {
    use http_body_util::BodyExt;
    let mut buf = bytes::BytesMut::with_capacity(declared.min(max));
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(BodyError::Broken);
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// Why a body was not read whole.
enum BodyError {
    TooLarge,
    /// The client broke off (or sent a malformed chunk).
    Broken,
}

/// The middleware: take a share of the budget, read the body, answer.
pub async fn buffered(State(route): State<Route>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if let Some(n) = declared
        && n > route.max
    {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is {n} bytes; this endpoint takes at most {}", route.max),
        );
    }
    let size = declared.unwrap_or(route.max);
    let units = u32::try_from(size.div_ceil(UNIT).max(1))
        .unwrap_or(u32::MAX)
        .min(route.budget.total_units);
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| super::conn::client_of(c.0.ip()))
        .filter(|_| size > SMALL);
    let share = match peer {
        Some(peer) => match ClientShare::take(&route.budget, peer, units, route.budget.client_share()) {
            Some(s) => Some(s),
            None => {
                return refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "this client address holds its share of the request bodies the server holds; send again shortly"
                        .into(),
                );
            }
        },
        None => None,
    };
    let permit = match tokio::time::timeout(WAIT, route.budget.units.clone().acquire_many_owned(units)).await {
        Ok(Ok(p)) => p,
        _ => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is holding as many request bodies as it may; send again shortly".into(),
            );
        }
    };
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(route.budget.timeout, collect(body, size, route.max)).await {
        Ok(Ok(b)) => b,
        Ok(Err(BodyError::TooLarge)) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than the {} bytes this endpoint takes", route.max),
            );
        }
        Ok(Err(BodyError::Broken)) => {
            return refuse(StatusCode::BAD_REQUEST, "the body broke off before its end".into());
        }
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {} s", route.budget.timeout.as_secs()),
            );
        }
    };
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    drop(permit);
    drop(share);
    response
}
