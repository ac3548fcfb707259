//! `hpc-ledger serve`: the HTTP receiver (see [`crate::serve`]) in the
//! foreground until SIGTERM or Ctrl-C, then a graceful stop.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use crate::db::{Readers, Target};
use crate::serve::{self, Credentials, Metrics, Options};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address and port to listen on. Anything but loopback needs
    /// credentials (HPC_LEDGER_SERVE_BASIC or HPC_LEDGER_SERVE_TOKEN).
    /// HPC_LEDGER_SERVE_CHECK_BASIC or _CHECK_TOKEN: a credential that may
    /// only ask (POST /check, GET /metrics/budgets), for submit hooks and
    /// scrapers, never post charges.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Jobs per transaction, at most (concurrent posts are committed together).
    #[arg(long, default_value_t = 500,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    max_batch: usize,
    /// Replace the charges of jobs whose re-sent records change the charge
    /// (reverse the old entries, post the new ones) instead of keeping the
    /// re-sent record as a conflict.
    #[arg(long)]
    supersede: bool,
    /// Answer a Slurm jobcomp post as soon as its document is stored
    /// durably, and price and record it moments later in a batch: a
    /// backlog drains several times faster (docs/slurm.md, "Accepted
    /// first"). The reply then says "accepted" instead of the charge.
    #[arg(long)]
    intake: bool,
    /// Connections served at once; past them, up to an eighth more are
    /// answered 503 (and /healthz), the rest closed. Kept under the
    /// open-file limit.
    #[arg(long, default_value_t = serve::conn::Limits::default().max_connections,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    max_connections: usize,
    /// Of those, the most one client address may hold (default: half of
    /// --max-connections), so that one client cannot take them all.
    /// Behind a proxy every connection comes from the proxy's address: set
    /// it to --max-connections there, and bound clients at the proxy.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    max_per_peer: Option<usize>,
}

pub async fn run(args: Args, target: &Target, readers: &Readers, author: &str) -> anyhow::Result<ExitCode> {
    let credentials = Credentials::from_env().map_err(anyhow::Error::msg)?;
    let checks = Credentials::checks_from_env().map_err(anyhow::Error::msg)?;
    // An asking credential without a posting one would ask nothing of
    // anyone: every client could post (on loopback) while the operator
    // believes only Slurm can.
    if credentials.is_empty() && !checks.is_empty() {
        anyhow::bail!(
            "{} (or {}) is set but no posting credential: without {} or {} anyone who can connect may post jobs and ask; set one of those too",
            serve::CHECK_BASIC_ENV,
            serve::CHECK_TOKEN_ENV,
            serve::BASIC_ENV,
            serve::TOKEN_ENV
        );
    }
    if credentials.is_empty() && !serve::open_allowed(&args.listen) {
        anyhow::bail!(
            "refusing to listen on {} without credentials: set {} (user:password, for Slurm's \
             http://user:password@host/… JobCompLoc) or {} (a bearer token), or their _FILE forms, \
             or listen on 127.0.0.1",
            args.listen,
            serve::BASIC_ENV,
            serve::TOKEN_ENV
        );
    }
    let pool = target.open_configured().await?;
    // The web view's pages read from the replica when one is given.
    let reader = match readers.replica {
        Some(_) => Some(readers.open_configured().await?),
        None => None,
    };
    let listener = serve::bind(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let web = Credentials::web_from_env().map_err(anyhow::Error::msg)?;
    // Which routes ask for nothing: the posts (and the checks with them)
    // without a posting credential; the web view asks for its own, or a
    // project's token, whatever the posts do.
    tracing::info!(
        "serving on http://{addr} (POST /slurm/_doc, POST /jobs, GET /healthz, GET /metrics){}",
        if credentials.is_empty() {
            "; posts and checks need no credentials (loopback only)"
        } else {
            ""
        }
    );
    let options = Options {
        credentials,
        checks,
        web,
        reader,
        max_batch: args.max_batch,
        supersede: args.supersede,
        intake: args.intake,
        fold_every: crate::service::FOLD_EVERY,
        author: author.to_owned(),
        limits: serve::conn::Limits {
            max_connections: args.max_connections,
            max_per_peer: args.max_per_peer.unwrap_or((args.max_connections / 2).max(1)),
            overflow: (args.max_connections / 4).clamp(8, 256),
            ..serve::conn::Limits::default()
        }
        .within_open_files(),
        // The embedded database is this program's to keep running.
        restart: match target {
            Target::Embedded(e) => {
                let e = e.clone();
                Some(serve::health::Restart(Arc::new(move || {
                    e.ensure_running().map_err(|e| e.to_string())
                })))
            }
            Target::External { .. } => None,
        },
    };
    let metrics = Arc::new(Metrics::new());
    serve::serve(pool, listener, options, metrics.clone(), super::stop_signal()).await?;
    let (batches, jobs) = metrics.batches();
    tracing::info!(
        "stopped: {} recorded, {} replayed, {} revised, {} rejected (kept), {} malformed, in {batches} transactions carrying {jobs} documents",
        metrics.jobs("recorded"),
        metrics.jobs("replayed"),
        metrics.jobs("revised"),
        metrics.jobs("rejected"),
        metrics.jobs("malformed"),
    );
    Ok(ExitCode::SUCCESS)
}
