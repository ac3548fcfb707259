//! Connections, and what one client may make the server hold.
//!
//! `serve` accepts connections itself (instead of `axum::serve`) so that
//! every one of them is bounded:
//!
//! - **How many**: at most [`Limits::max_connections`] are served in full
//!   (also kept under the process's open-file limit), and at most
//!   [`Limits::max_per_peer`] of them for one client address, so that one
//!   client (or one attacker, without any credential) cannot hold them all
//!   and leave Slurm's posts and the budget checks answered 503. Past that, up to
//!   [`Limits::overflow`] more are answered at once — `/healthz` 503 saying
//!   why ([`Over`]), anything else 503 with `Retry-After` — and closed; past
//!   both, a connection is closed as soon as it is accepted. So `/healthz`
//!   tells a monitor that the server is full (which it cannot learn from a
//!   connection served in full), `/metrics` counts the connections refused,
//!   and a flood of sockets cannot exhaust descriptors.
//! - **How long**: request headers must arrive within
//!   [`Limits::header_timeout`], which also bounds how long an idle
//!   keep-alive connection is held; a body must arrive within
//!   [`Limits::body_timeout`] (see [`super::body`]).
//! - **Shutdown**: the listener stops accepting; requests in flight are
//!   finished and answered; idle connections are closed.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What one client may make the server hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served in full at once.
    pub max_connections: usize,
    /// Of those, the most one client address may hold (a connection over
    /// it is treated as over the cap: `/healthz`, else 503).
    pub max_per_peer: usize,
    /// Connections beyond those answered 503 (or `/healthz`) and closed.
    pub overflow: usize,
    /// Time to send a request's headers; also how long an idle keep-alive
    /// connection is kept.
    pub header_timeout: Duration,
    /// Time to send a request's body.
    pub body_timeout: Duration,
    /// Bytes of request bodies held at once, over all requests.
    pub body_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            max_per_peer: 256,
            overflow: 128,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            body_budget: 48 << 20,
        }
    }
}

impl Limits {
    /// These limits, with the connection counts kept under the process's
    /// open-file limit (a reserve is left for the database pool, logs and
    /// the listener).
    pub fn within_open_files(mut self) -> Limits {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 && rl.rlim_cur != libc::RLIM_INFINITY {
            let usable = usize::try_from(rl.rlim_cur).unwrap_or(usize::MAX).saturating_sub(64);
            let total = self.max_connections + self.overflow;
            if total > usable {
                self.overflow = (usable / 8).max(1).min(self.overflow);
                self.max_connections = usable.saturating_sub(self.overflow).max(1);
                tracing::warn!(
                    "the open-file limit ({}) allows {} connections (+{} answered busy); raise it (LimitNOFILE=) for more",
                    rl.rlim_cur,
                    self.max_connections,
                    self.overflow
                );
            }
        }
        self
    }
}

/// Why a connection is answered from the overflow: a request extension on
/// the requests of such a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// Every connection served in full is held.
    Full,
    /// Its client address holds [`Limits::max_per_peer`] of them.
    ClientShare,
}

/// Serve `full` (and `busy` for connections over the cap) on `listener`
/// until `shutdown` completes; then finish what is in flight and return.
/// `metrics` counts the connections served and refused.
pub async fn run(
    listener: TcpListener,
    full: Router,
    busy: Router,
    limits: Limits,
    metrics: Arc<super::metrics::Metrics>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let served = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(limits.overflow));
    let peers = Arc::new(Mutex::new(HashMap::<IpAddr, usize>::new()));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or a connection reset
                    // before it was accepted: wait a moment, keep serving.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        let slot = PeerSlot::take(&peers, client_of(peer.ip()), limits.max_per_peer);
        let full_permit = match &slot {
            Some(_) => served.clone().try_acquire_owned().ok(),
            None => None,
        };
        let over = match (&slot, &full_permit) {
            (None, _) => Some(Over::ClientShare),
            (Some(_), None) => Some(Over::Full),
            (Some(_), Some(_)) => None,
        };
        let (router, keep_alive, header_timeout, permit, slot) = match full_permit {
            Some(p) => (full.clone(), true, limits.header_timeout, p, slot),
            None => match overflow.clone().try_acquire_owned() {
                Ok(p) => (
                    busy.clone(),
                    false,
                    limits.header_timeout.min(Duration::from_secs(5)),
                    p,
                    None,
                ),
                Err(_) => {
                    metrics.connection(None);
                    drop(stream);
                    continue;
                }
            },
        };
        metrics.connection(Some(over));
        // Handlers may ask who is posting (`ConnectInfo`), and why a
        // connection is over the cap.
        let service = TowerToHyperService::new(tower::util::MapRequest::new(
            router,
            move |mut r: hyper::Request<hyper::body::Incoming>| {
                r.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                if let Some(over) = over {
                    r.extensions_mut().insert(over);
                }
                r
            },
        ));
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .keep_alive(keep_alive)
            .max_buf_size(64 << 10)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // A client that went away or timed out is not an error of ours.
            let _ = conn.await;
            drop(permit);
            drop(slot);
            if over.is_none() {
                metrics.connection_closed();
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// One of a client address's connections served in full; given back when
/// dropped.
/// The client an address counts for: an IPv4 address (also one mapped into
/// IPv6); an IPv6 address's /64, which one site, or one host, is given whole
/// (counted address by address, a client with a /64 could hold every
/// connection, or the body budget, alone).
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

struct PeerSlot {
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PeerSlot {
    /// A slot for `ip`, unless it holds `max` already.
    fn take(peers: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut held = peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = held.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: peers.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_address_holds_at_most_its_share() {
        let peers = Arc::new(Mutex::new(HashMap::new()));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = PeerSlot::take(&peers, a, 2).unwrap();
        let second = PeerSlot::take(&peers, a, 2).unwrap();
        assert!(PeerSlot::take(&peers, a, 2).is_none());
        let other = PeerSlot::take(&peers, b, 2);
        assert!(other.is_some());
        drop(first);
        let third = PeerSlot::take(&peers, a, 2);
        assert!(third.is_some());
        drop((second, third, other));
        assert!(peers.lock().unwrap().is_empty());
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Two addresses of one /64: one client; of another /64: another.
        assert_eq!(
            client_of(ip("2001:db8:1:2::1")),
            client_of(ip("2001:db8:1:2:ffff:1:2:3"))
        );
        assert_eq!(client_of(ip("2001:db8:1:2:ffff:1:2:3")), ip("2001:db8:1:2::"));
        assert_ne!(client_of(ip("2001:db8:1:2::1")), client_of(ip("2001:db8:1:3::1")));
        // IPv4, also mapped into IPv6: the address itself.
        assert_eq!(client_of(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(client_of(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_ne!(client_of(ip("10.0.0.7")), client_of(ip("10.0.0.8")));
    }
}
