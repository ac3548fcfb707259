//! Use cases. Each one: open a transaction, load what it needs, decide with
//! the pure domain, persist, commit.

pub mod config;
pub mod import;
pub mod quote;
pub mod record;
pub mod storage;

use crate::db::DbError;

/// The name recorded as the author of a change: `--author`, else the OS user.
pub fn author(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|a| !a.trim().is_empty())
        .or_else(|| {
            let out = std::process::Command::new("id").arg("-un").output().ok()?;
            let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (out.status.success() && !name.is_empty()).then_some(name)
        })
        .unwrap_or_else(|| "unknown".to_owned())
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

impl From<sqlx::Error> for config::ApplyError {
    fn from(e: sqlx::Error) -> Self {
        match guard_message(&e) {
            Some(m) => config::ApplyError::Refused(vec![m]),
            None => config::ApplyError::Db(DbError::Sql(e)),
        }
    }
}
