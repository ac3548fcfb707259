//! The embedded default: with no database URL, the CLI starts a private
//! PostgreSQL of its own, as a non-root user when run as root.

use std::path::PathBuf;

use sqlx::Connection;

use crate::harness::{cli_with_env, ok, stderr, stdout};

fn home(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("embedded-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_embedded_database_starts_migrates_and_stops() {
    let home = home("lifecycle");
    let env = [("HPC_LEDGER_HOME", home.to_str().unwrap())];
    let out = ok(&cli_with_env(&["db", "start"], &env, None));
    assert!(out.starts_with("embedded PostgreSQL is running"), "{out}");
    let url = ok(&cli_with_env(&["db", "url"], &env, None)).trim().to_owned();
    assert!(
        url.starts_with("postgresql://postgres@localhost:5432/hpc_ledger?host=/"),
        "{url}"
    );
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let migrations: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(migrations as usize, hpc_ledger::db::MIGRATOR.iter().count());
    // It listens on no TCP port.
    let listen: String = sqlx::query_scalar("SHOW listen_addresses")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(listen, "");
    conn.close().await.unwrap();
    let status = ok(&cli_with_env(&["db", "status"], &env, None));
    assert!(status.starts_with("embedded PostgreSQL: running"), "{status}");
    // Commands use it without any setup.
    let out = ok(&cli_with_env(&["config", "show"], &env, None));
    assert!(out.contains("no configuration has been applied yet"), "{out}");
    assert_eq!(ok(&cli_with_env(&["db", "stop"], &env, None)), "stopped\n");
    assert!(ok(&cli_with_env(&["db", "status"], &env, None)).starts_with("embedded PostgreSQL: stopped"));
    assert_eq!(ok(&cli_with_env(&["db", "stop"], &env, None)), "not running\n");
}

#[test]
fn configuration_errors_of_the_embedded_database_are_clear() {
    let home = home("errors");
    let h = home.to_str().unwrap();
    let o = cli_with_env(
        &["db", "start"],
        &[("HPC_LEDGER_HOME", h), ("HPC_LEDGER_PG_BINDIR", "/nonexistent/bin")],
        None,
    );
    assert!(!o.status.success());
    assert_eq!(
        stderr(&o).trim(),
        "error: HPC_LEDGER_PG_BINDIR=/nonexistent/bin does not contain initdb, pg_ctl and postgres"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let o = cli_with_env(
            &["db", "start"],
            &[("HPC_LEDGER_HOME", h), ("HPC_LEDGER_PG_USER", "no-such-user-hl")],
            None,
        );
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("PostgreSQL refuses to run as root: there is no user \"no-such-user-hl\""),
            "{e}"
        );
    }
    let o = cli_with_env(
        &["db", "start"],
        &[("DATABASE_URL", "postgres://u@127.0.0.1:9/x")],
        None,
    );
    assert!(
        stderr(&o).contains("`db start` manages only the embedded database"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty());
}
