//! The database as `serve` sees it, and the watchdog that brings it back.
//!
//! `serve` runs for months; the database under it may not. The watchdog
//! pings it every [`UP_EVERY`]; when a ping fails:
//!
//! - on the **embedded** database, the PostgreSQL that `serve` itself
//!   started, it starts it again ([`Restart`], `Embedded::ensure_running`,
//!   which does nothing if the server is in fact running) and says so in the
//!   log. A failed restart is tried again with backoff.
//! - on an **external** database it waits with backoff (1 s doubling to
//!   [`MAX_BACKOFF`]) and says once that the database is unreachable and
//!   once that it is back; the pool opens new connections by itself.
//!
//! Meanwhile posts get 503 (Slurm retries them) and `/healthz` tells
//! "database starting" (a restart under way) from "database down".

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// How to start the database again (the embedded one), run on a blocking
/// thread; `None` for an external database, which `serve` does not own.
#[derive(Clone)]
pub struct Restart(pub Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl std::fmt::Debug for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Restart")
    }
}

/// Between pings while the database answers.
pub const UP_EVERY: Duration = Duration::from_secs(2);
/// The longest wait between attempts while it does not.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A ping that takes longer counts as a failure.
pub const PING_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Up,
    /// Unreachable; `detail` says why.
    Down,
    /// The embedded database is being started again.
    Starting,
}

/// Shared between the watchdog and `/healthz`.
pub struct Health {
    state: AtomicU8,
    detail: Mutex<String>,
    restarts: AtomicU64,
    /// Whether `serve` restarts the database itself (the embedded one).
    pub restarts_database: bool,
}

impl Health {
    pub fn new(restarts_database: bool) -> Health {
        Health {
            state: AtomicU8::new(0),
            detail: Mutex::new(String::new()),
            restarts: AtomicU64::new(0),
            restarts_database,
        }
    }

    pub fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Up,
            1 => State::Down,
            _ => State::Starting,
        }
    }

    pub fn detail(&self) -> String {
        self.detail.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// Times the embedded database was started again.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    fn set(&self, state: State, detail: &str) {
        if let Ok(mut d) = self.detail.lock() {
            detail.clone_into(&mut d);
        }
        let v = match state {
            State::Up => 0,
            State::Down => 1,
            State::Starting => 2,
        };
        self.state.store(v, Ordering::Release);
    }
}

/// `SELECT 1` within [`PING_TIMEOUT`].
pub async fn ping(pool: &PgPool) -> Result<(), String> {
    match tokio::time::timeout(PING_TIMEOUT, crate::db::ping(pool)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(crate::db::redact(&e.to_string())),
        Err(_) => Err(format!("no answer within {} s", PING_TIMEOUT.as_secs())),
    }
}

/// Watch the database until `stop` says so.
pub async fn watch(
    pool: PgPool,
    health: Arc<Health>,
    restart: Option<Restart>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_secs(1);
    let mut down_since: Option<Instant> = None;
    loop {
        let wait = if down_since.is_some() { backoff } else { UP_EVERY };
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if *stop.borrow() {
            return;
        }
        let failed = match ping(&pool).await {
            Ok(()) => {
                if let Some(since) = down_since.take() {
                    tracing::info!(
                        "the database answers again (after {} s); recording again",
                        since.elapsed().as_secs()
                    );
                }
                health.set(State::Up, "");
                backoff = Duration::from_secs(1);
                continue;
            }
            Err(e) => e,
        };
        let first = down_since.is_none();
        down_since.get_or_insert_with(Instant::now);
        let Some(restart) = &restart else {
            if first {
                tracing::warn!(
                    "the database is unreachable: {failed}; posts get 503 (Slurm retries them); trying again with backoff up to {} s",
                    MAX_BACKOFF.as_secs()
                );
            }
            health.set(State::Down, &failed);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        };
        tracing::warn!("the embedded PostgreSQL does not answer ({failed}); starting it again");
        health.set(State::Starting, &failed);
        let r = restart.0.clone();
        let started = tokio::task::spawn_blocking(move || r())
            .await
            .unwrap_or_else(|e| Err(format!("the restart panicked: {e}")));
        match started {
            Ok(()) => {
                health.restarts.fetch_add(1, Ordering::Relaxed);
                match ping(&pool).await {
                    Ok(()) => {
                        tracing::info!("the embedded PostgreSQL was started again; recording again");
                        health.set(State::Up, "");
                        down_since = None;
                        backoff = Duration::from_secs(1);
                    }
                    Err(e) => {
                        health.set(State::Down, &e);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            Err(e) => {
                tracing::error!(
                    "starting the embedded PostgreSQL again failed: {e}; trying again in {} s",
                    backoff.as_secs()
                );
                health.set(State::Down, &format!("{failed}; starting it again failed: {e}"));
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
