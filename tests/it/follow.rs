//! `import --follow`: a PBS accounting directory tailed as PBS writes it —
//! half-written lines, a new day's file, a restart — records every job
//! once, exactly as importing the whole log does.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hpc_ledger::domain::posting::RejectKind;
use hpc_ledger::ingest::{Format, ReadOptions, Skip};
use hpc_ledger::service::follow::{Follow, follow};
use hpc_ledger::service::import::Summary;
use hpc_ledger::service::record::{RecordOptions, Recorder};
use sqlx::PgPool;
use tokio::sync::watch;

use crate::fixtures::{fixture_db, import_fixture, stripped};

const FIXTURE: &str = "hnormalise_torque_accounting.log";

fn options() -> ReadOptions {
    ReadOptions {
        cluster: Some("vsc".into()),
        project_from: Some(vec!["account".into(), "group".into()]),
        ..Default::default()
    }
}

fn fixture_lines() -> Vec<String> {
    std::fs::read_to_string(stripped(FIXTURE))
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect()
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

struct Follower {
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Summary>,
}

fn start(pool: &PgPool, dir: &Path) -> Follower {
    let (stop, stopped) = watch::channel(false);
    let pool = pool.clone();
    let f = Follow {
        dir: dir.to_owned(),
        format: Format::Pbs,
        options: options(),
        poll: Duration::from_millis(20),
        batch_size: hpc_ledger::service::import::BATCH,
    };
    let done = tokio::spawn(async move {
        let mut recorder = Recorder::new(pool.clone(), RecordOptions::by("follower"));
        let mut summary = Summary::default();
        follow(&pool, &mut recorder, &f, &mut summary, stopped).await.unwrap();
        summary
    });
    Follower { stop, done }
}

impl Follower {
    async fn stop(self) -> Summary {
        self.stop.send(true).unwrap();
        self.done.await.unwrap()
    }
}

/// Wait until the follower's cursor is at `file`, `bytes`.
async fn until_at(pool: &PgPool, file: &str, bytes: usize) {
    let want = (file.to_owned(), bytes as i64);
    crate::harness::until(Duration::from_secs(10), Duration::from_millis(20), async || {
        let at: Option<(String, i64)> = sqlx::query_as("SELECT file, byte_offset FROM follow_cursor")
            .fetch_optional(pool)
            .await
            .unwrap();
        (at.as_ref() == Some(&want)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the follower never reached {want:?}"));
}

async fn jobs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("follow-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_followed_directory_is_recorded_once_across_days_partial_lines_and_restarts() {
    let db = fixture_db().await;
    let dir = scratch_dir();
    // Lines 1-4 of the log are E records (charged), 5-12 other records.
    let l = fixture_lines();
    let day1 = dir.join("20261101");
    let (head, tail) = l[1].split_at(40);
    // PBS is in the middle of writing line 2: only line 1 is whole.
    append(&day1, &format!("{}{}{}{head}", l[4], l[5], l[0]));
    std::fs::write(dir.join("notes.txt"), "not a day file\n").unwrap();
    let first = start(&db.pool, &dir);
    let whole = l[4].len() + l[5].len() + l[0].len();
    until_at(&db.pool, "20261101", whole).await;
    assert_eq!(jobs(&db.pool).await, 1);

    // The rest of the line arrives, then two more records.
    append(&day1, &format!("{tail}{}{}", l[6], l[7]));
    let day1_len = std::fs::metadata(&day1).unwrap().len() as usize;
    until_at(&db.pool, "20261101", day1_len).await;
    assert_eq!(jobs(&db.pool).await, 2);
    let s1 = first.stop().await;
    assert_eq!((s1.recorded, s1.replayed, s1.lines), (2, 0, 6), "{s1:#?}");
    assert_eq!(s1.skipped[&Skip::OtherRecord], 4);

    // Stopped over midnight: the next day's file appears, its last line
    // without a newline, then the day after begins: that line was cut
    // short (PBS writes whole lines), and is kept, not charged.
    let day2 = dir.join("20261102");
    append(&day2, &format!("{}{}{}{}", l[2], l[8], l[9], l[3].trim_end()));
    let day3 = dir.join("20261103");
    append(&day3, &format!("{}{}", l[10], l[11]));
    let second = start(&db.pool, &dir);
    until_at(&db.pool, "20261103", l[10].len() + l[11].len()).await;
    let s2 = second.stop().await;
    // Resumed where it stopped: nothing read twice.
    assert_eq!((s2.recorded, s2.replayed, s2.lines), (1, 0, 6), "{s2:#?}");
    assert_eq!(s2.rejected[&RejectKind::Malformed], 1, "{s2:#?}");
    assert!(s2.examples[0].ends_with(&format!("20261102:4: {}", hpc_ledger::ingest::CUT_SHORT)));
    // Only the newline was missing: the operator adds it and imports the
    // day's file; the job is recorded and the rejection resolved.
    append(&day2, "\n");
    let mut s = Summary::default();
    hpc_ledger::service::import::import(
        &mut Recorder::new(db.pool.clone(), RecordOptions::by("operator")),
        std::fs::File::open(&day2).unwrap(),
        &hpc_ledger::service::import::Input::new("20261102", Format::Pbs, &options()),
        &mut s,
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!((s.recorded, s.replayed), (1, 1), "{s:#?}");
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_record WHERE resolved_at IS NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(open, 0);

    // The same charges as importing the whole log at once.
    let other = fixture_db().await;
    let whole_import = import_fixture(&other, FIXTURE, false).await;
    assert_eq!(whole_import.recorded, 4);
    let charges = |pool: PgPool| async move {
        sqlx::query_as::<_, (String, String, String)>(
            "SELECT j.scheduler_job_id, e.quantity::text, e.amount::text FROM ledger_entry e
               JOIN job_record r ON r.id = e.job_record_id JOIN job j ON j.id = r.job_id ORDER BY 1, 2",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let followed = charges(db.pool.clone()).await;
    assert_eq!(followed.len(), 4);
    assert_eq!(followed, charges(other.pool.clone()).await);
    // Records name the file and line they came from.
    let refs: Vec<String> = sqlx::query_scalar("SELECT source_ref FROM job_record ORDER BY source_ref")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let name = |f: &str, n: u32| format!("{}:{n}", std::fs::canonicalize(&dir).unwrap().join(f).display());
    let short = |r: &String| r.rsplit('/').next().unwrap().to_owned();
    assert_eq!(
        refs.iter().map(short).collect::<Vec<_>>(),
        ["20261101:3", "20261101:4", "20261102:1", "20261102:4"],
        "{refs:?} (e.g. {})",
        name("20261101", 3)
    );
}

#[tokio::test]
async fn a_file_gone_before_it_was_finished_stops_the_follower() {
    let db = fixture_db().await;
    let dir = scratch_dir();
    let l = fixture_lines();
    append(&dir.join("20261101"), &format!("{}{}", l[0], l[1]));
    let first = start(&db.pool, &dir);
    until_at(&db.pool, "20261101", l[0].len() + l[1].len()).await;
    first.stop().await;
    // Compressed by a log rotation before the follower saw the next day.
    std::fs::rename(dir.join("20261101"), dir.join("20261101.gz")).unwrap();
    append(&dir.join("20261102"), &l[2]);
    let (_stop, stopped) = watch::channel(false);
    let f = Follow {
        dir: dir.clone(),
        format: Format::Pbs,
        options: options(),
        poll: Duration::from_millis(20),
        batch_size: hpc_ledger::service::import::BATCH,
    };
    let mut recorder = Recorder::new(db.pool.clone(), RecordOptions::by("follower"));
    let e = follow(&db.pool, &mut recorder, &f, &mut Summary::default(), stopped)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("20261101, where following stopped (after line 2), is gone"),
        "{e}"
    );
    assert_eq!(
        jobs(&db.pool).await,
        2,
        "the next day's job is not recorded past the gap"
    );
}

#[tokio::test]
async fn a_file_put_in_place_of_the_one_being_read_is_read_again_from_its_start() {
    let db = fixture_db().await;
    let dir = scratch_dir();
    let l = fixture_lines();
    let day = dir.join("20261101");
    append(&day, &format!("{}{}", l[0], l[1]));
    let first = start(&db.pool, &dir);
    until_at(&db.pool, "20261101", l[0].len() + l[1].len()).await;
    first.stop().await;
    assert_eq!(jobs(&db.pool).await, 2);

    // Copied and truncated while no follower ran, then written anew, and
    // longer than where reading stopped: read from that offset on, the
    // new first job would be lost.
    let copied = format!("{}{}{}{}{}", l[2], l[10], l[11], l[4], l[5]);
    assert!(copied.len() > l[0].len() + l[1].len());
    std::fs::write(&day, &copied).unwrap();
    let second = start(&db.pool, &dir);
    until_at(&db.pool, "20261101", copied.len()).await;
    assert_eq!(jobs(&db.pool).await, 3);

    // Renamed away and created again while the follower runs; the new
    // file holds two jobs recorded before and one new.
    let renamed = format!("{}{}{}{}{}", l[3], l[0], l[1], l[7], l[8]);
    assert!(renamed.len() > copied.len());
    let tmp = dir.join("incoming.tmp");
    std::fs::write(&tmp, &renamed).unwrap();
    std::fs::rename(&tmp, &day).unwrap();
    until_at(&db.pool, "20261101", renamed.len()).await;
    let s = second.stop().await;
    assert_eq!(jobs(&db.pool).await, 4, "{s:#?}");
    assert_eq!((s.recorded, s.replayed, s.lines), (2, 2, 10), "{s:#?}");
    assert!(s.rejected.is_empty(), "no line read from the middle: {s:#?}");
    let refs: Vec<String> =
        sqlx::query_scalar("SELECT r.source_ref FROM job_record r JOIN job j ON j.id = r.job_id ORDER BY r.id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let short: Vec<&str> = refs.iter().map(|r| r.rsplit('/').next().unwrap()).collect();
    assert_eq!(short, ["20261101:1", "20261101:2", "20261101:1", "20261101:1"]);
}

#[tokio::test]
async fn the_follow_command_needs_pbs_and_a_cluster() {
    let db = fixture_db().await;
    let dir = scratch_dir();
    let d = dir.to_str().unwrap();
    let o = db.cli(&["import", "--format", "slurm", "--follow", d]);
    assert!(!o.status.success());
    assert!(crate::harness::stderr(&o).contains("--follow reads a PBS accounting directory"));
    let o = db.cli(&["import", "--format", "pbs", "--follow", d]);
    assert!(crate::harness::stderr(&o).contains("give --cluster with --follow"));
    let o = db.cli(&[
        "import",
        "--format",
        "pbs",
        "--cluster",
        "vsc",
        "--follow",
        "/nonexistent/accounting",
    ]);
    assert!(!o.status.success());
    assert!(
        crate::harness::stderr(&o).contains("/nonexistent/accounting"),
        "{}",
        crate::harness::stderr(&o)
    );
}
