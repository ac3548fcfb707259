//! The `hpc-ledger` command: parse the command line, set up logging to
//! stderr, run, and turn an error into a message and a non-zero exit code.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // Die quietly when stdout is closed early (`hpc-ledger … | head`), like
    // other Unix tools, instead of panicking on a failed print.
    // SAFETY: restoring the default action of a signal at start-up, before
    // any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = hpc_ledger::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_env("HPC_LEDGER_LOG").unwrap_or_else(|_| EnvFilter::new("warn,hpc_ledger=info")),
        )
        .without_time()
        .with_target(false)
        // Colour only for a person at a terminal, not in a service's log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(hpc_ledger::cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", hpc_ledger::db::redact(&e.to_string()));
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {}", hpc_ledger::db::redact(&cause.to_string()));
            }
            // Refused by a privilege or by row-level security (ingest may post
            // only job charges: a reversal or adjustment of its is refused so).
            if e.chain().any(|c| {
                let c = c.to_string();
                c.contains("permission denied") || c.contains("violates row-level security policy")
            }) {
                eprintln!(
                    "  hint: the database role in use may not do this; see docs/security.md for the \
                     hpc_ledger_ingest, hpc_ledger_billing and hpc_ledger_auditor roles"
                );
            }
            // The connection went (a restart, a failover, an administrator):
            // what was committed stays, and every writer takes up where it
            // stopped (months closed or billed are reported as done).
            if hpc_ledger::db::errors::lost_database(e.chain())
                && !e.chain().any(|c| c.to_string().contains("run the same command again"))
            {
                eprintln!(
                    "  hint: the database connection was lost or the server is restarting; what was done before \
                     stays done: run the same command again once the database answers (a correction run with \
                     --again may have been posted: look first, or give it an --idempotency-key)"
                );
            }
            ExitCode::FAILURE
        }
    }
}
