//! What PostgreSQL's errors mean to hpc-ledger: SQLSTATE codes and
//! constraint names are matched here only.

/// Errors after which the same statement may simply be run again: a
/// serialization failure, a deadlock, losing a race on a unique key
/// another writer just took (a job record, a reversal), or a charge that
/// another correction credited back meanwhile (HL008, migration 0051: run
/// again, a supersede reads that correction and reverses it too).
pub fn is_race(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some("40001" | "40P01" | "HL008"))
                || (d.code().as_deref() == Some("23505")
                    && d.constraint()
                        .is_some_and(|c| c.starts_with("job_record_") || c == "ledger_entry_one_reversal"))
        }
        _ => false,
    }
}

/// Errors that mean the database is gone, not that a record is bad.
pub fn is_connection_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Errors that say nothing about the record: the database could not do it
/// now. Its connection went ([`is_connection_error`]); the statement was
/// cancelled (57014: `statement_timeout`, `pg_cancel_backend`) or waited
/// past `lock_timeout` (55P03, as behind a month's close); the server ran
/// out of something (class 53: disk, memory, connections) or failed an I/O
/// (class 58); or a race ([`is_race`]) lost every time it was run again.
/// A record that fails so is not kept as rejected (its sender is told to
/// send it again: `serve` answers 503, Slurm retries).
pub fn is_transient(e: &sqlx::Error) -> bool {
    is_connection_error(e)
        || is_race(e)
        || matches!(e, sqlx::Error::Database(d)
            if d.code().is_some_and(|c| matches!(c.as_ref(), "57014" | "55P03") || c.starts_with("53") || c.starts_with("58")))
}

/// A database error raised by one of the schema's guards (SQLSTATE HLxxx),
/// as its message; other errors are passed through.
pub fn guard_message(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) if d.code().is_some_and(|c| c.starts_with("HL")) => Some(d.message().to_owned()),
        // Exclusion constraints: overlapping effective dates.
        sqlx::Error::Database(d) if d.code().as_deref() == Some("23P01") => Some(format!(
            "{} ({})",
            d.message(),
            d.constraint().unwrap_or("exclusion constraint")
        )),
        _ => None,
    }
}

/// The entry was reversed already (the one-reversal-per-entry index).
pub fn is_already_reversed(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.constraint() == Some("ledger_entry_one_reversal"))
}

/// What PostgreSQL and sqlx print when a connection is lost or the server
/// goes away (57P01–57P03, an I/O error, a closed pool, no connection in
/// time): matched in an
/// error's text where the [`sqlx::Error`] itself is no longer at hand (a
/// use case's error keeps only its message).
const LOST: &[&str] = &[
    "terminating connection",
    "error communicating with database",
    "the database system is shutting down",
    "the database system is starting up",
    "the database system is in recovery mode",
    "server closed the connection",
    "pool timed out while waiting for an open connection",
    "attempted to acquire a connection on a closed pool",
];

/// Whether an error, or anything that caused it, is the database gone
/// ([`is_connection_error`]; not a timeout, a full disk or a lost race,
/// which say otherwise): a command that stops so is run again as it was.
pub fn lost_database<'a>(mut chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> bool {
    chain.any(|c| {
        c.downcast_ref::<sqlx::Error>().is_some_and(is_connection_error) || {
            let text = c.to_string();
            LOST.iter().any(|p| text.contains(p))
        }
    })
}
