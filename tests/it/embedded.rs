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
    let o = cli_with_env(&["db", "start"], &env, None);
    let out = ok(&o);
    assert!(out.starts_with("embedded PostgreSQL is running"), "{out}");
    // Creating it is never silent (issue 20, item 6).
    assert!(
        stderr(&o).contains("created a new, empty embedded database in ")
            && stderr(&o).contains(home.to_str().unwrap()),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&cli_with_env(&["db", "status"], &env, None)).contains("created"));
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
    // A command that reads the ledger, or records into it, refuses an
    // unconfigured one and says where it looked and what to do: run from the
    // wrong directory, it must not answer from an empty ledger.
    for args in [
        &["config", "show"][..],
        &["statement", "--all", "--month", "2026-10"],
        &["audit"],
        &["import", "--format", "jsonl", "-"],
    ] {
        let o = cli_with_env(args, &env, Some(""));
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).contains("no center configuration in the embedded database under ")
                && stderr(&o).contains("apply one with `hpc-ledger config apply center.toml`"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // Configured, it answers.
    let center = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/center.toml");
    ok(&cli_with_env(&["config", "apply", center], &env, None));
    assert!(ok(&cli_with_env(&["config", "show"], &env, None)).contains("owens"));
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

/// A `serve` process of its own, its log collected on a thread.
struct Served {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Served {
    fn start(env: &[(&str, &str)]) -> Served {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hpc-ledger"));
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env_remove("DATABASE_URL")
            .env_remove("HPC_LEDGER_HOME")
            .env("HPC_LEDGER_LOG", "info")
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().expect("serve exited before listening").unwrap();
            if let Some(rest) = line.split("serving on http://").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Served { child, addr, log }
    }

    async fn health(&self) -> (u16, String) {
        let r = hpc_ledger::serve::client::get(self.addr, "/healthz").await.unwrap();
        (r.status, r.body)
    }

    /// Poll `/healthz` until it answers 200 (at most a minute); every
    /// other answer seen on the way.
    async fn until_healthy(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..120 {
            match self.health().await {
                (200, _) => return seen,
                (status, body) => seen.push(format!("{status} {}", body.trim())),
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        panic!("serve did not become healthy: {seen:?}\n{}", self.log.lock().unwrap());
    }

    /// Wait (at most a minute) until the log holds `text`.
    async fn until_logged(&self, text: &str) {
        for _ in 0..120 {
            if self.log.lock().unwrap().contains(text) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        panic!("serve never logged {text:?}:\n{}", self.log.lock().unwrap());
    }

    async fn post_job(&self, id: u32) -> (u16, String) {
        let job = format!(
            r#"{{"cluster":"owens","job_id":"{id}","project":"PAS1234","queue":"batch","cores":2,"start":"2026-10-05T09:00:00-04:00","end":"2026-10-05T10:00:00-04:00"}}"#
        );
        let r = hpc_ledger::serve::client::post(self.addr, "/jobs", None, job.as_bytes())
            .await
            .unwrap();
        (r.status, r.body)
    }

    fn stop(mut self) -> String {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        assert!(self.child.wait().unwrap().success());
        std::thread::sleep(std::time::Duration::from_millis(100));
        self.log.lock().unwrap().clone()
    }
}

fn postmaster_pid(home: &std::path::Path) -> i32 {
    let data = std::fs::read_dir(home)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("data/postmaster.pid"))
        .find(|p| p.is_file())
        .or_else(|| {
            // Where the files live when the home is not reachable by the server's user.
            let status = ok(&cli_with_env(
                &["db", "status"],
                &[("HPC_LEDGER_HOME", home.to_str().unwrap())],
                None,
            ));
            let dir = status
                .lines()
                .find_map(|l| l.strip_prefix("data directory:"))?
                .trim()
                .to_owned();
            Some(PathBuf::from(dir).join("postmaster.pid"))
        })
        .unwrap();
    std::fs::read_to_string(data)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn serve_starts_its_embedded_database_again_and_waits_for_an_external_one() {
    // Issue 13, item 10: after the embedded PostgreSQL died, serve answered
    // 503 until some other command started it again.
    let home = home("serve-restart");
    let h = home.to_str().unwrap();
    let center = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/center.toml");
    ok(&cli_with_env(
        &["config", "apply", center],
        &[("HPC_LEDGER_HOME", h)],
        None,
    ));

    // The embedded database, killed under serve: started again by serve.
    let served = Served::start(&[("HPC_LEDGER_HOME", h)]);
    assert_eq!(served.post_job(1).await.0, 201);
    // SAFETY: killing the test's own PostgreSQL, as a crash would.
    unsafe {
        libc::kill(postmaster_pid(&home), libc::SIGKILL);
    }
    // Its backends may answer a moment longer; the watchdog notices within
    // seconds and starts it again.
    served.until_logged("started again; recording again").await;
    served.until_healthy().await;
    let (status, body) = served.post_job(2).await;
    assert_eq!(status, 201, "{body}");
    let log = served.stop();
    assert!(
        log.contains("the embedded PostgreSQL does not answer") && log.contains("started again; recording again"),
        "{log}"
    );

    // The same cluster as an external database: serve does not start it,
    // says it is down, and records again once it is back.
    let url = ok(&cli_with_env(&["db", "url"], &[("HPC_LEDGER_HOME", h)], None))
        .trim()
        .to_owned();
    let served = Served::start(&[("DATABASE_URL", &url)]);
    assert_eq!(served.post_job(3).await.0, 201);
    assert_eq!(
        ok(&cli_with_env(&["db", "stop"], &[("HPC_LEDGER_HOME", h)], None)),
        "stopped\n"
    );
    let (status, body) = served.health().await;
    assert_eq!(status, 503);
    assert!(
        body.starts_with("database down: ") && body.trim_end().ends_with("serve retries with backoff"),
        "{body}"
    );
    assert_eq!(served.post_job(4).await.0, 503);
    // Still down a few seconds later: nobody restarts an external database.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(served.health().await.0, 503);
    ok(&cli_with_env(&["db", "start"], &[("HPC_LEDGER_HOME", h)], None));
    served.until_healthy().await;
    assert_eq!(served.post_job(4).await.0, 201);
    served.until_logged("the database answers again").await;
    let log = served.stop();
    assert!(log.contains("the database is unreachable"), "{log}");
    assert!(!log.contains("starting it again"), "{log}");
    let jobs: String = ok(&cli_with_env(
        &["statement", "--month", "2026-10", "--project", "PAS1234"],
        &[("HPC_LEDGER_HOME", h)],
        None,
    ));
    assert!(jobs.contains("owens"), "{jobs}");
    ok(&cli_with_env(&["db", "stop"], &[("HPC_LEDGER_HOME", h)], None));
}
