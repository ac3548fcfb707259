//! Retention (issue 19, item 3): `archive --through` moves closed months
//! into files, the live ledger keeps verifying and auditing clean, and
//! `verify --archive` checks the files, from themselves and against the
//! ledger.

use std::path::{Path, PathBuf};

use chrono::Utc;
use hpc_ledger::domain::period::Month;
use hpc_ledger::service::close::close_through;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::harness::{TestDb, ok, stderr, stdout};

fn m(s: &str) -> Month {
    s.parse().unwrap()
}

/// The example center with its sample jobs, storage billed January through
/// October, and every month through September closed.
async fn through_september() -> TestDb {
    let db = crate::harness::sample_billed_through("2026-10").await;
    let closed = close_through(&db.pool, m("2026-09"), "billing", Utc::now())
        .await
        .unwrap();
    assert!(closed.stopped.is_none(), "{:?}", closed.stopped);
    db
}

/// Where a test's archive files go (its own directory, by its database).
fn archive_dir(db: &TestDb) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("archive-{}", db.name))
}

/// Reverse the first storage charge of `month` (`YYYY-MM`) with `reverse
/// --entry`, and `extra` options; its id.
async fn reverse_first_storage(db: &TestDb, month: &str, extra: &[&str]) -> i64 {
    let entry: i64 =
        sqlx::query_scalar("SELECT min(id) FROM ledger_entry WHERE period = ($1 || '-01')::date AND kind = 'storage'")
            .bind(month)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let id = entry.to_string();
    let mut args = vec!["reverse", "--entry", &id, "--reason", "quota set by mistake"];
    args.extend_from_slice(extra);
    ok(&db.cli(&args));
    entry
}

/// What the database answers `sql` with, run in a transaction that is
/// rolled back (it must be refused).
async fn refusal(pool: &PgPool, sql: &str) -> String {
    let mut tx = pool.begin().await.unwrap();
    let refused = sqlx::raw_sql(sql).execute(&mut *tx).await.unwrap_err();
    tx.rollback().await.unwrap();
    refused.to_string()
}

async fn entries_through(pool: &PgPool, month: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM ledger_entry WHERE period <= $1")
        .bind(m(month).first_day())
        .fetch_one(pool)
        .await
        .unwrap()
}

fn archive_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// `audit --deep --archive DIR --format json`, which must exit with
/// `code`: its report.
fn deep_archive(db: &TestDb, dir: &str, code: i32) -> serde_json::Value {
    let o = db.cli(&["audit", "--deep", "--archive", dir, "--format", "json"]);
    assert_eq!(o.status.code(), Some(code), "{}{}", stdout(&o), stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// The seal chain recomputed here, from the file's lines alone, as
/// docs/retention.md tells an auditor to: sha256(h ‖ line) from the empty
/// string over the header's `items` lines after it.
fn seal_of_file(path: &Path) -> (String, String, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let items = header["items"].as_u64().unwrap();
    let recomputed = if header["seal_algorithm"] == "sha256-digests-v3" {
        // Seal v3: one SHA-256 over the items' SHA-256 digests.
        let mut all = Sha256::new();
        for line in lines.take(items as usize) {
            all.update(Sha256::digest(line.as_bytes()));
        }
        all.finalize().to_vec()
    } else {
        // v1, v2: the chain h = sha256(h ‖ item).
        let mut h: Vec<u8> = Vec::new();
        for line in lines.take(items as usize) {
            let mut d = Sha256::new();
            d.update(&h);
            d.update(line.as_bytes());
            h = d.finalize().to_vec();
        }
        h
    };
    (
        hex::encode(recomputed),
        header["seal"].as_str().unwrap().to_owned(),
        items,
    )
}

#[tokio::test]
async fn archived_months_leave_the_live_ledger_and_their_files_still_verify() {
    let db = through_september().await;
    let dir = archive_dir(&db);
    let dir_s = dir.to_str().unwrap();
    // Before the first closed month: nothing to archive, and no advice to
    // close it (which `close` refuses).
    let o = db.cli(&["archive", "--through", "2025-06", "--to", dir_s]);
    assert!(
        stderr(&o).contains("2025-06 is before the ledger's first closed month, 2026-01: nothing to archive"),
        "{}",
        stderr(&o)
    );
    let o = db.cli(&["close", "--through", "2025-06"]);
    assert!(
        stderr(&o).contains("2025-06 is before the ledger's first closed month, 2026-01"),
        "{}",
        stderr(&o)
    );
    // A September storage charge reversed in October: September cannot be
    // archived while October, which points at it, is live.
    let september = reverse_first_storage(&db, "2026-09", &[]).await;
    ok(&db.cli(&["close", "--month", "2026-10", "--author", "billing"]));
    ok(&db.cli(&[
        "alloc",
        "grant",
        "PAS1234",
        "500.00",
        "--from",
        "2026-01-01",
        "--reason",
        "award",
    ]));
    let balance_at = "2026-11-15T00:00:00Z";
    let balance_before = ok(&db.cli(&["balance", "--all", "--at", balance_at, "--format", "csv"]));
    let usage_before = ok(&db.cli(&[
        "usage", "--all", "--from", "2026-01", "--to", "2026-10", "--by", "month", "--format", "csv",
    ]));
    // Job 1010 ended on 1 November: the open month's entries stay live.
    let all_entries: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let open_month = all_entries - entries_through(&db.pool, "2026-10").await;
    assert!(open_month > 0);
    let archived_entries = entries_through(&db.pool, "2026-08").await;
    assert!(archived_entries > 0);

    // Not a closed month: nothing happens.
    let o = db.cli(&["archive", "--through", "2026-11", "--to", dir_s]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("2026-11 is not closed"), "{}", stderr(&o));
    assert!(!dir.exists());

    // Through September: January to August go, September is refused.
    let o = db.cli(&["archive", "--through", "2026-09", "--to", dir_s]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("cannot archive 2026-09 without 2026-10: entry "),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(&format!("corrects entry {september} of 2026-09")),
        "{}",
        stderr(&o)
    );
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 8, "{out}");
    assert!(out.starts_with("2026-01: "), "{out}");
    let files = archive_files(&dir);
    assert_eq!(files.len(), 8, "{files:?}");
    assert_eq!(files[0], "hpc-ledger-archive-2026-01.jsonl");
    assert_eq!(files[7], "hpc-ledger-archive-2026-08.jsonl");
    assert_eq!(entries_through(&db.pool, "2026-08").await, 0);
    assert!(entries_through(&db.pool, "2026-09").await > 0);

    // Each file's seal is the ledger's, recomputed from the file alone.
    let (recomputed, in_header, items) = seal_of_file(&dir.join("hpc-ledger-archive-2026-08.jsonl"));
    let recorded: Vec<u8> = sqlx::query_scalar("SELECT seal FROM closed_period WHERE period = '2026-08-01'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(recomputed, hex::encode(&recorded));
    assert_eq!(in_header, recomputed);
    assert!(items > 1);

    // The live ledger: every seal holds (the archived months' from what was
    // recorded when they were archived), the audit is clean, usage is the same.
    let v = ok(&db.cli(&["verify"]));
    assert_eq!(v.lines().filter(|l| l.contains("seal holds")).count(), 10, "{v}");
    let august = v.lines().find(|l| l.starts_with("2026-08: ")).unwrap();
    assert!(
        august.ends_with("; archived to hpc-ledger-archive-2026-08.jsonl)"),
        "{v}"
    );
    let audit = db.cli(&["audit"]);
    assert!(audit.status.success(), "{}{}", stdout(&audit), stderr(&audit));
    assert!(
        stdout(&audit).ends_with("\n10 closed month(s): every seal holds\n"),
        "{}",
        stdout(&audit)
    );
    let usage_after = ok(&db.cli(&[
        "usage", "--all", "--from", "2026-01", "--to", "2026-10", "--by", "month", "--format", "csv",
    ]));
    assert_eq!(usage_after, usage_before);
    let balance_after = ok(&db.cli(&["balance", "--all", "--at", balance_at, "--format", "csv"]));
    assert_eq!(balance_after, balance_before);
    assert!(balance_after.contains("PAS1234"), "{balance_after}");
    // An archived month's statements are not printed again; a live one's are.
    let o = db.cli(&["statement", "--project", "PAS1234", "--month", "2026-03"]);
    assert!(
        stderr(&o).contains("2026-03 is archived (to hpc-ledger-archive-2026-03.jsonl)"),
        "{}",
        stderr(&o)
    );
    ok(&db.cli(&["statement", "--project", "PAS1234", "--month", "2026-10"]));

    // In the web view, an archived month is gone (410), saying where.
    let web = crate::web::start(&db.pool);
    for path in ["/ui?month=2026-03", "/ui/projects/PAS1234?month=2026-03"] {
        let r = web.get(path, Some(crate::web::BILLING)).await;
        assert_eq!(r.status, 410, "{path}: {}", r.body);
        assert!(
            r.body
                .contains("2026-03 is archived (to hpc-ledger-archive-2026-03.jsonl)"),
            "{}",
            r.body
        );
    }
    let r = web
        .get("/ui/projects/PAS1234?month=2026-10", Some(crate::web::BILLING))
        .await;
    assert_eq!(r.status, 200);
    // Its list of months names an archived month's file and links to none
    // of the month's gone pages; a live month keeps its downloads.
    assert!(r.body.contains("final, No. "), "{}", r.body);
    assert!(r.body.contains(", archived</td>"), "{}", r.body);
    assert!(r.body.contains("hpc-ledger-archive-2026-03.jsonl"), "{}", r.body);
    assert!(!r.body.contains("statements/2026-03.html"), "{}", r.body);
    assert!(!r.body.contains("?month=2026-03\""), "{}", r.body);
    assert!(r.body.contains("statements/2026-10.html"), "{}", r.body);
    let _ = web.stop.send(());
    web.done.await.unwrap().unwrap();

    // A job whose charges all left with their month: `job show` says where
    // they are, not that the run never charged.
    let gone: String = sqlx::query_scalar(
        "SELECT c.name || '/' || j.scheduler_job_id FROM job j JOIN cluster c ON c.id = j.cluster_id
           JOIN job_record r ON r.job_id = j.id JOIN archived_charge a ON a.job_record_id = r.id
          WHERE NOT EXISTS (SELECT 1 FROM ledger_entry e JOIN job_record x ON x.id = e.job_record_id
                             WHERE x.job_id = j.id)
          ORDER BY j.id LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let shown = ok(&db.cli(&["job", "show", &gone]));
    assert!(shown.contains("  archived: its charges of "), "{shown}");
    assert!(!shown.contains("charge: none"), "{shown}");

    // verify --archive: every file holds, and says how many entries it has.
    let v = ok(&db.cli(&["verify", "--archive", dir_s]));
    assert_eq!(v.lines().filter(|l| l.contains(": seal holds from ")).count(), 8, "{v}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&db.cli(&["verify", "--archive", dir_s, "--format", "json"]))).unwrap();
    let in_files: i64 = json
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["entries"].as_i64().unwrap())
        .sum();
    assert_eq!(in_files, archived_entries);

    // A changed amount in a copy of a file: its seal no longer holds.
    let tampered = dir.join("tampered");
    std::fs::create_dir_all(&tampered).unwrap();
    let text = std::fs::read_to_string(dir.join("hpc-ledger-archive-2026-08.jsonl")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let entry = &mut lines[2];
    let fields: Vec<&serde_json::value::RawValue> = serde_json::from_str(entry).unwrap();
    let amount = fields[14].get().to_owned();
    *entry = entry.replacen(&format!(",{amount},"), ",0.01,", 1);
    assert_ne!(text.lines().nth(2).unwrap(), lines[2]);
    let copy = tampered.join("hpc-ledger-archive-2026-08.jsonl");
    std::fs::write(&copy, lines.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(stdout(&o).contains("2026-08: BROKEN"), "{}", stdout(&o));
    assert!(stdout(&o).contains("its seal items recompute to "), "{}", stdout(&o));
    assert!(stdout(&o).contains("the file's SHA-256 is "), "{}", stdout(&o));
    // The month's file, whole, under another month's name: the ledger and
    // every document name the file it archived the month to.
    let renamed = tampered.join("hpc-ledger-archive-2026-07.jsonl");
    std::fs::write(&renamed, &text).unwrap();
    let o = db.cli(&["verify", "--archive", renamed.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(
            "it is named hpc-ledger-archive-2026-07.jsonl; the ledger archived 2026-08 to hpc-ledger-archive-2026-08.jsonl"
        ),
        "{}",
        stdout(&o)
    );
    std::fs::remove_file(&renamed).unwrap();
    // Cut short: the line it ends at is named.
    std::fs::write(&copy, lines[..3].join("\n")).unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5));
    assert!(stdout(&o).contains("the file is cut short"), "{}", stdout(&o));
    // A header that passes its last entry off as a statement (seal intact):
    // each item is recognised by its shape.
    let original = text.lines().collect::<Vec<_>>();
    let mut header: serde_json::Value = serde_json::from_str(original[0]).unwrap();
    header["entry_count"] = (header["entry_count"].as_i64().unwrap() - 1).into();
    header["statements"] = (header["statements"].as_u64().unwrap() + 1).into();
    let mut fooled: Vec<String> = original.iter().map(|l| (*l).to_owned()).collect();
    fooled[0] = header.to_string();
    std::fs::write(&copy, fooled.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5));
    assert!(stdout(&o).contains("not a statement"), "{}", stdout(&o));
    // A header that names someone else as the month's closer, and another
    // currency (its seal items untouched, so they still recompute to its
    // seal): the ledger's record of the month disagrees.
    let mut header: serde_json::Value = serde_json::from_str(original[0]).unwrap();
    let closer = header["closed_by"].as_str().unwrap().to_owned();
    header["closed_by"] = "mallory".into();
    header["currency"] = "XTS".into();
    let mut forged: Vec<String> = original.iter().map(|l| (*l).to_owned()).collect();
    forged[0] = header.to_string();
    std::fs::write(&copy, forged.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("it says mallory closed 2026-08; the ledger says {closer}")),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("its currency XTS is not the ledger's"),
        "{}",
        stdout(&o)
    );
    assert!(!stdout(&o).contains("recompute to"), "{}", stdout(&o));
    // (A header that claims another seal algorithm does not get this far:
    // its items no longer read as that algorithm's, checked above.)
    std::fs::remove_dir_all(&tampered).unwrap();

    // Nobody deletes an entry outside an archive, not even the owner with
    // the archive's setting.
    let refused = refusal(
        &db.pool,
        "SELECT set_config('hl.archiving', '2026-10', true); DELETE FROM ledger_entry WHERE period = '2026-10-01'",
    )
    .await;
    assert!(
        refused.contains("ledger_entry is append-only: DELETE is refused"),
        "{refused}"
    );

    // Through October: September and October go too.
    let o = ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));
    assert_eq!(o.lines().count(), 2, "{o}");
    assert_eq!(entries_through(&db.pool, "2026-10").await, 0);
    let again = ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));
    assert!(again.starts_with("nothing to archive"), "{again}");
    let v = ok(&db.cli(&["verify", "--archive", dir_s]));
    assert_eq!(
        v.lines().filter(|l| l.contains(": seal holds from ")).count(),
        10,
        "{v}"
    );
    let audit = db.cli(&["audit"]);
    assert!(audit.status.success(), "{}{}", stdout(&audit), stderr(&audit));

    // A supersede of an archived job's record cannot reverse its charges:
    // it is refused, not charged a second time.
    let o = db.cli(&[
        "job",
        "record",
        "--cluster",
        "owens",
        "--job-id",
        "1001",
        "--project",
        "PAS1234",
        "--queue",
        "batch",
        "--cores",
        "2",
        "--memory",
        "4GB",
        "--submit",
        "2026-10-05T08:55:00-04:00",
        "--start",
        "2026-10-05T09:00:00-04:00",
        "--end",
        "2026-10-05T11:00:00-04:00",
        "--supersede",
    ]);
    assert!(
        format!("{}{}", stdout(&o), stderr(&o)).contains("charges are archived (2026-10)"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let charged: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(charged, open_month);
    let explained = ok(&db.cli(&["job", "show", "owens/1001"]));
    assert!(
        explained.contains("  archived: its charges of 2026-10 are in hpc-ledger-archive-2026-10.jsonl;"),
        "{explained}"
    );
    let o = db.cli(&["entries", "--project", "PAS1234", "--month", "2026-10"]);
    assert!(
        stderr(&o).contains("2026-10 is archived (to hpc-ledger-archive-2026-10.jsonl)"),
        "{}",
        stderr(&o)
    );
    // The owner's role alone archives: not billing, not the recorder.
    for role in ["hpc_ledger_billing", "hpc_ledger_ingest", "hpc_ledger_auditor"] {
        let refused = refusal(&db.pool, &format!(
            "SET LOCAL ROLE {role}; SELECT hl_archive_months(ARRAY['2026-11-01'::date], 'x', ARRAY['f'], ARRAY['\\x00'::bytea])"
        )).await;
        assert!(
            refused.contains("permission denied for function hl_archive_months"),
            "{role}: {refused}"
        );
    }
    // A missing file is a finding.
    std::fs::remove_file(dir.join("hpc-ledger-archive-2026-05.jsonl")).unwrap();
    let o = db.cli(&["verify", "--archive", dir_s]);
    assert_eq!(o.status.code(), Some(5));
    assert!(
        stdout(&o).contains("2026-05 is archived (to hpc-ledger-archive-2026-05.jsonl), but its file is not in"),
        "{}",
        stdout(&o)
    );
    // ... unless it was destroyed at the end of its retention.
    let v = ok(&db.cli(&["verify", "--archive", dir_s, "--since", "2026-06"]));
    assert_eq!(v.lines().count(), 9, "{v}");
    assert!(v.lines().all(|l| l.contains(": seal holds from ")), "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A correction posted into an earlier month than what it corrects (as a
/// supersede does when the new record ends before the old one): the two
/// months are archived together or not at all. The rules that priced
/// archived charges stay frozen, and so does the center's currency.
#[tokio::test]
async fn a_correction_into_an_earlier_month_ties_it_to_the_later_one() {
    let db = crate::harness::sample_billed_through("2026-10").await;
    let closed = close_through(&db.pool, m("2026-08"), "billing", Utc::now())
        .await
        .unwrap();
    assert!(closed.stopped.is_none(), "{:?}", closed.stopped);
    let october = reverse_first_storage(&db, "2026-10", &["--month", "2026-09"]).await;
    let reversal: i64 = sqlx::query_scalar("SELECT id FROM ledger_entry WHERE corrects_id = $1")
        .bind(october)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    ok(&db.cli(&["close", "--through", "2026-10", "--author", "billing"]));
    let dir = archive_dir(&db);
    let dir_s = dir.to_str().unwrap();
    let o = db.cli(&["archive", "--through", "2026-09", "--to", dir_s]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!(
            "cannot archive 2026-09 without 2026-10: entry {reversal} of 2026-09 corrects entry {october} of 2026-10"
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(archive_files(&dir).len(), 8, "{:?}", archive_files(&dir));
    // While another run holds the archive lock, a second one says so and
    // writes nothing.
    let lock = hpc_ledger::db::archive::ARCHIVE_LOCK;
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(lock)
        .execute(&mut *holder)
        .await
        .unwrap();
    let o = db.cli(&["archive", "--through", "2026-10", "--to", dir_s]);
    assert!(
        stderr(&o).contains("another `hpc-ledger archive` is running on this ledger"),
        "{}",
        stderr(&o)
    );
    assert_eq!(archive_files(&dir).len(), 8);
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(lock)
        .execute(&mut *holder)
        .await
        .unwrap();
    drop(holder);
    // The owner recording a month as archived by hand, with the archive's
    // setting, still cannot delete its entries: only hl_archive_months does.
    let refused = refusal(
        &db.pool,
        "INSERT INTO archived_period (period, archived_by, file_name, file_sha256, seal, entry_count, total)
         SELECT period, 'owner', 'none', sha256(''), seal, entry_count, total FROM closed_period
          WHERE period = '2026-09-01';
         SELECT set_config('hl.archiving', '2026-09', true);
         DELETE FROM ledger_entry WHERE period = '2026-09-01'",
    )
    .await;
    assert!(
        refused.contains("ledger_entry is append-only: DELETE is refused outside hl_archive_months()"),
        "{refused}"
    );
    // Nor does recording a month as archived by hand hide an edit of its
    // entries: a month that still holds entries is recomputed from them.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE ledger_entry DISABLE TRIGGER ledger_entry_append_only;
         UPDATE ledger_entry SET reason = 'edited' WHERE id = (SELECT min(id) FROM ledger_entry WHERE period = '2026-09-01');
         ALTER TABLE ledger_entry ENABLE ALWAYS TRIGGER ledger_entry_append_only;
         INSERT INTO archived_period (period, archived_by, file_name, file_sha256, seal, entry_count, total)
         SELECT period, 'owner', 'none', sha256(''), seal, entry_count, total FROM closed_period
          WHERE period = '2026-09-01'",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    let (month_holds, chain_holds): (bool, bool) = sqlx::query_as(
        "SELECT (SELECT recomputed_seal = recorded_seal FROM audit.month_seals WHERE period = '2026-09-01'),
                (SELECT recomputed_seal = recorded_seal FROM audit.seals WHERE period = '2026-09-01')",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!((month_holds, chain_holds), (false, false));
    // Storage billing's lock is not the archive's: a run goes on while
    // another session holds it (they once shared a key).
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(hl_storage_lock_key())")
        .execute(&mut *holder)
        .await
        .unwrap();
    // Through October, both go, in one transaction.
    let out = ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));
    assert_eq!(out.lines().count(), 2, "{out}");
    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut *holder)
        .await
        .unwrap();
    drop(holder);
    assert_eq!(entries_through(&db.pool, "2026-10").await, 0);
    // The deep audit reads every kept record again: an archived charge is
    // not a missing one.
    let audit = db.cli(&["audit", "--deep"]);
    assert!(audit.status.success(), "{}{}", stdout(&audit), stderr(&audit));

    // What priced the archived charges stays frozen.
    let card: i64 = sqlx::query_scalar("SELECT min(id) FROM archived_rule WHERE kind = 'rate_card'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let refused = sqlx::query("UPDATE rate_card SET core_hour_price = core_hour_price * 2 WHERE id = $1")
        .bind(card)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains(&format!(
            "rate card {card} has priced charges and cannot be changed or removed"
        )),
        "{refused}"
    );
    let refused = sqlx::query("DELETE FROM rate_card WHERE id = $1")
        .bind(card)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("has priced charges"), "{refused}");
    let rate: i64 = sqlx::query_scalar("SELECT min(id) FROM archived_rule WHERE kind = 'storage_rate'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let refused = sqlx::query("UPDATE storage_rate SET valid_until = '2026-02-01' WHERE id = $1")
        .bind(rate)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("priced days after"), "{refused}");
    let refused = sqlx::query("UPDATE center SET currency = 'EUR'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("cannot change once charges are posted"),
        "{refused}"
    );
    // No class change or discount may newly cover the archived months.
    let refused = sqlx::query(
        "INSERT INTO project_class (project_id, rate_class_id, effective_from, author)
         SELECT p.id, c.id, '2026-06-01T00:00:00Z', 't' FROM project p, rate_class c
          WHERE p.code = 'PAS1234' AND c.name = 'commercial'",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("project PAS1234 cannot change class from ")
            && refused.to_string().contains(" are archived"),
        "{refused}"
    );
    let refused = sqlx::query(
        "INSERT INTO discount (project_id, percent, valid_from, reason, author)
         SELECT p.id, 10, '2026-06-01T00:00:00Z', 'backdated', 't' FROM project p WHERE p.code = 'PAS1234'",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("would cover archived months"), "{refused}");
    // A correction of an archived job names the archive.
    let o = db.cli(&["reverse", "--cluster", "owens", "--job-id", "1001", "--reason", "x"]);
    assert!(
        stderr(&o).contains("job owens/1001's charges are archived (2026-10, in hpc-ledger-archive-2026-10.jsonl)"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Months sealed before seal v3 (migration 0041) keep their algorithm: a
/// ledger whose first month was sealed with v1 and the next three with v2
/// verifies, archives and verifies from its files, each month by its own
/// algorithm (the files' seals recomputed here as well).
#[tokio::test]
async fn months_sealed_with_v1_and_v2_still_verify_and_archive() {
    let db = through_september().await;
    let dir = archive_dir(&db);
    let dir_s = dir.to_str().unwrap();
    // The owner turns the first four months into what older releases
    // sealed, and seals every month again in order from the one before.
    sqlx::raw_sql(
        "ALTER TABLE closed_period DISABLE TRIGGER USER;
         UPDATE closed_period SET seal_algorithm = CASE WHEN period = '2026-01-01' THEN 'sha256-chain-v1'
                                                        ELSE 'sha256-chain-v2' END
          WHERE period <= '2026-04-01';
         DO $$
         DECLARE c record;
         BEGIN
             FOR c IN SELECT * FROM closed_period ORDER BY period LOOP
                 UPDATE closed_period SET seal = hl_month_seal_of(c.seal_algorithm, c.period,
                            (SELECT b.seal FROM closed_period b WHERE b.period = (c.period - interval '1 month')::date),
                            c.currency, c.closed_by, c.closed_at)
                  WHERE period = c.period;
             END LOOP;
         END $$;
         ALTER TABLE closed_period ENABLE TRIGGER USER;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let algorithms: Vec<String> = sqlx::query_scalar("SELECT seal_algorithm FROM closed_period ORDER BY period")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        algorithms,
        [
            "sha256-chain-v1",
            "sha256-chain-v2",
            "sha256-chain-v2",
            "sha256-chain-v2",
            "sha256-digests-v3",
            "sha256-digests-v3",
            "sha256-digests-v3",
            "sha256-digests-v3",
            "sha256-digests-v3"
        ]
    );
    let v = ok(&db.cli(&["verify"]));
    assert_eq!(v.lines().filter(|l| l.contains("seal holds")).count(), 9, "{v}");

    ok(&db.cli(&["archive", "--through", "2026-06", "--to", dir_s]));
    let v = ok(&db.cli(&["verify", "--archive", dir_s]));
    assert_eq!(v.lines().filter(|l| l.contains(": seal holds from ")).count(), 6, "{v}");
    for (month, algorithm) in [
        ("2026-01", "sha256-chain-v1"),
        ("2026-03", "sha256-chain-v2"),
        ("2026-06", "sha256-digests-v3"),
    ] {
        let file = dir.join(format!("hpc-ledger-archive-{month}.jsonl"));
        let header: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&file).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(header["seal_algorithm"], algorithm);
        let (recomputed, in_header, _) = seal_of_file(&file);
        assert_eq!(recomputed, in_header, "{month}");
    }
    // What stays live still verifies from the archived months' seals.
    let v = ok(&db.cli(&["verify"]));
    assert_eq!(v.lines().filter(|l| l.contains("seal holds")).count(), 9, "{v}");
}

/// The raw records of archived months (migration 0047): each job record
/// whose charges left goes into its month's file with the SHA-256 of its
/// text, the database keeps the digest and empties the text, and `verify
/// --archive` finds a file whose text is not the one that left.
#[tokio::test]
async fn archived_months_take_their_records_raw_text_and_verify_it() {
    let db = through_september().await;
    let dir = archive_dir(&db);
    let dir_s = dir.to_str().unwrap();
    // A rejected line recorded by a decision: its resolution is proved by
    // the record's bytes, which the archive takes away (the audit must
    // still find it holds).
    std::fs::create_dir_all(&dir).unwrap();
    let typo = dir.join("typo.jsonl");
    std::fs::write(
        &typo,
        r#"{"cluster":"owens","job_id":"8801","project":"PAS1243","queue":"batch","cores":2,"start":"2026-10-07T10:00:00-04:00","end":"2026-10-07T13:00:00-04:00"}"#.to_owned() + "\n",
    )
    .unwrap();
    assert_eq!(
        db.cli(&["import", "--format", "jsonl", typo.to_str().unwrap()])
            .status
            .code(),
        Some(4)
    );
    std::fs::remove_file(&typo).unwrap();
    // A record whose bytes were not UTF-8 (its job name in Latin-1): its
    // line in the file carries the bytes beside the text read from them.
    let latin1 = dir.join("latin1.jsonl");
    let mut line =
        br#"{"cluster":"owens","job_id":"8802","project":"PAS1234","queue":"batch","cores":2,"job_name":"caf"#.to_vec();
    line.extend_from_slice(b"\xe9\",\"start\":\"2026-10-08T10:00:00-04:00\",\"end\":\"2026-10-08T12:00:00-04:00\"}\n");
    std::fs::write(&latin1, line).unwrap();
    ok(&db.cli(&["import", "--format", "jsonl", latin1.to_str().unwrap()]));
    std::fs::remove_file(&latin1).unwrap();
    let rejection: i64 = sqlx::query_scalar("SELECT id FROM rejected_record WHERE kind = 'unknown_project'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    ok(&db.cli(&[
        "rejected",
        "reassign",
        &rejection.to_string(),
        "--project",
        "PAS1234",
        "--reason",
        "account mistyped as PAS1243",
    ]));
    ok(&db.cli(&["close", "--month", "2026-10", "--author", "billing"]));
    // The records charged through October (the sample's jobs ran then; one
    // ended in November, which stays open), and their text.
    let before: Vec<(i64, String)> = sqlx::query_as(
        "SELECT r.id, r.raw FROM job_record r
          WHERE EXISTS (SELECT 1 FROM ledger_entry e WHERE e.job_record_id = r.id AND e.period <= '2026-10-01')
          ORDER BY r.id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(before.len() > 3, "{before:?}");
    assert!(before.iter().all(|(_, raw)| !raw.is_empty()));
    let live_before: i64 = sqlx::query_scalar("SELECT count(*) FROM job_record WHERE raw <> ''")
        .fetch_one(&db.pool)
        .await
        .unwrap();

    // In the transaction that archives the months, hl_archive_records
    // empties exactly the records whose charges left, no others and not
    // some of them (each refused and rolled back).
    let october: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT job_record_id FROM ledger_entry WHERE period = '2026-10-01' AND job_record_id IS NOT NULL
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(october.len() > 2);
    let november: i64 = sqlx::query_scalar(
        "SELECT min(job_record_id) FROM ledger_entry WHERE period = '2026-11-01' AND job_record_id IS NOT NULL",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let archive_by_hand = "SELECT count(*) FROM hl_archive_months(
        (SELECT array_agg(d::date ORDER BY d) FROM generate_series('2026-01-01'::date, '2026-10-01', '1 month') d),
        'x', array_fill('f'::text, ARRAY[10]), array_fill(sha256('x'), ARRAY[10]));";
    for (ids, expected) in [
        (
            format!("ARRAY[{november}::bigint]"),
            format!("job record {november} has no charge archived with that month"),
        ),
        (
            format!("ARRAY[{}::bigint]", october[1]),
            format!(
                "archive of the records of 2026-10: 1 records given (1 distinct) for the {} whose charges it \
                 archived (first left out: {})",
                october.len(),
                october[0]
            ),
        ),
    ] {
        let refused = refusal(
            &db.pool,
            &format!("{archive_by_hand} SELECT hl_archive_records('2026-10-01', {ids}, ARRAY[sha256('x')])"),
        )
        .await;
        assert!(refused.contains(&expected), "{refused}");
    }

    let out = ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));
    let said: u64 = out
        .lines()
        .map(|l| {
            let n = l.split(" and the raw text of ").nth(1).unwrap();
            n.split(' ').next().unwrap().parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(said, before.len() as u64, "{out}");

    // The database kept their digests and emptied exactly their text.
    let emptied: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM job_record WHERE raw = '' AND raw_bytes IS NULL ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(emptied, before.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    let live_after: i64 = sqlx::query_scalar("SELECT count(*) FROM job_record WHERE raw <> ''")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live_after, live_before - before.len() as i64);
    let kept: Vec<(i64, String)> =
        sqlx::query_as("SELECT record_id, raw_sha256 FROM audit.archived_records ORDER BY record_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    // ... and the files hold that text, each line with its digest.
    let mut in_files: Vec<(i64, String, String, Vec<u8>)> = Vec::new();
    for name in archive_files(&dir) {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(header["hpc_ledger_archive"], 2);
        let mut here = 0;
        for line in text.lines().filter(|l| l.starts_with("{\"job_record\":")) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            // The digest is of the scheduler's bytes when they are there.
            let of = match v["raw_bytes"].as_str() {
                Some(b) => hex::decode(b).unwrap(),
                None => v["raw"].as_str().unwrap().as_bytes().to_vec(),
            };
            in_files.push((
                v["job_record"].as_i64().unwrap(),
                v["raw"].as_str().unwrap().to_owned(),
                v["raw_sha256"].as_str().unwrap().to_owned(),
                of,
            ));
            here += 1;
        }
        assert_eq!(header["records"].as_u64().unwrap(), here, "{name}");
    }
    in_files.sort();
    assert_eq!(
        in_files
            .iter()
            .map(|(id, raw, _, _)| (*id, raw.clone()))
            .collect::<Vec<_>>(),
        before
    );
    assert_eq!(
        in_files.iter().filter(|(_, raw, _, of)| raw.as_bytes() != of).count(),
        1
    );
    for ((id, _, digest, of), (kept_id, kept_digest)) in in_files.iter().zip(&kept) {
        assert_eq!((id, digest), (kept_id, kept_digest));
        assert_eq!(*digest, hex::encode(Sha256::digest(of)));
    }

    // The rejection's resolution still holds, by the digest kept.
    let holds: bool = sqlx::query_scalar("SELECT resolution_holds FROM audit.rejections WHERE id = $1")
        .bind(rejection)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(holds);
    // Everything checks: the files against the ledger, the audit, and the
    // deep audit, which says how many records it left to the files.
    let v = ok(&db.cli(&["verify", "--archive", dir_s]));
    assert_eq!(
        v.lines().filter(|l| l.contains(": seal holds from ")).count(),
        10,
        "{v}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&db.cli(&["verify", "--archive", dir_s, "--format", "json"]))).unwrap();
    let records: u64 = json
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["records"].as_u64().unwrap())
        .sum();
    assert_eq!(records, before.len() as u64);
    let deep = db.cli(&["audit", "--deep"]);
    assert!(deep.status.success(), "{}{}", stdout(&deep), stderr(&deep));
    assert!(
        stdout(&deep).contains(&format!(
            "deep: {} job records not read again: their raw text is in the archive files",
            before.len()
        )),
        "{}",
        stdout(&deep)
    );
    // Read again from the files, they say what the ledger stores.
    let deep = db.cli(&["audit", "--deep", "--archive", dir_s]);
    assert!(deep.status.success(), "{}{}", stdout(&deep), stderr(&deep));
    assert!(
        stdout(&deep).contains(&format!(
            "deep: of them, {} job records read again from the archive files (their raw text is there, not in the \
             ledger); 0 of the {} archived records not read from them",
            before.len(),
            before.len()
        )),
        "{}",
        stdout(&deep)
    );
    // `job show --raw` says where the text went.
    let (first, _) = &before[0];
    let job: String = sqlx::query_scalar(
        "SELECT c.name || '/' || j.scheduler_job_id FROM job_record r JOIN job j ON j.id = r.job_id
           JOIN cluster c ON c.id = j.cluster_id WHERE r.id = $1",
    )
    .bind(first)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let shown = ok(&db.cli(&["job", "show", &job, "--raw"]));
    assert!(
        shown.contains("raw record: moved to the archive file of 2026-"),
        "{shown}"
    );

    // A file whose record text was changed: the line's own digest catches
    // it; changed with a digest to match, the ledger's does.
    let name = archive_files(&dir)
        .into_iter()
        .find(|n| {
            std::fs::read_to_string(dir.join(n))
                .unwrap()
                .contains("{\"job_record\":")
        })
        .unwrap();
    let text = std::fs::read_to_string(dir.join(&name)).unwrap();
    let at = text.lines().position(|l| l.starts_with("{\"job_record\":")).unwrap();
    let tampered = dir.join("tampered");
    std::fs::create_dir_all(&tampered).unwrap();
    let copy = tampered.join(&name);
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut record: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
    let id = record["job_record"].as_i64().unwrap();
    let changed = format!("{} ", record["raw"].as_str().unwrap());
    record["raw"] = changed.clone().into();
    lines[at] = record.to_string();
    std::fs::write(&copy, lines.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("job record {id}: its text has SHA-256 ")),
        "{}",
        stdout(&o)
    );
    record["raw_sha256"] = hex::encode(Sha256::digest(changed.as_bytes())).into();
    record["raw_length"] = changed.len().into();
    lines[at] = record.to_string();
    std::fs::write(&copy, lines.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("the raw text of job record {id} has SHA-256 ")),
        "{}",
        stdout(&o)
    );
    // The deep audit reads that changed text and finds it is not the text
    // that left, though the line's own digest agrees.
    let report = deep_archive(&db, tampered.to_str().unwrap(), 5);
    let found = report["deep"]["differences"].as_array().unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0]["record_id"], id);
    assert_eq!(found[0]["field"], "raw_sha256");
    // And the file is not the one the month was archived to.
    assert_eq!(found[1]["field"], "archive file");
    assert!(
        found[1]["stored"]
            .as_str()
            .unwrap()
            .contains(&format!(" archived to {name} with SHA-256 ")),
        "{found:?}"
    );
    // A record left out (the header's count made to agree).
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.remove(at);
    let mut header: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    header["records"] = (header["records"].as_u64().unwrap() - 1).into();
    lines[0] = header.to_string();
    std::fs::write(&copy, lines.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("the ledger archived the raw text of job record {id} to ")),
        "{}",
        stdout(&o)
    );
    // Two files of one month (a copy under another name): the second is
    // named and not read, so no record is read twice.
    std::fs::write(&copy, &text).unwrap();
    std::fs::write(tampered.join("hpc-ledger-archive-copy.jsonl"), &text).unwrap();
    let report = deep_archive(&db, tampered.to_str().unwrap(), 5);
    let found = report["deep"]["differences"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["field"], "archive file");
    let in_copy = text.lines().filter(|l| l.starts_with("{\"job_record\":")).count();
    assert_eq!(report["deep"]["read_from_archive"], in_copy);
    // A file cut short inside its last record line: the lines before are
    // read again, the file is named at that line, and another month's
    // file beside it is still read; the report is the whole audit's.
    std::fs::remove_file(tampered.join("hpc-ledger-archive-copy.jsonl")).unwrap();
    std::fs::remove_file(&copy).unwrap();
    let records_in = |n: &str| -> Vec<usize> {
        std::fs::read_to_string(dir.join(n))
            .unwrap()
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("{\"job_record\":"))
            .map(|(i, _)| i)
            .collect()
    };
    let with_records: Vec<String> = archive_files(&dir)
        .into_iter()
        .filter(|n| n.ends_with(".jsonl") && !records_in(n).is_empty())
        .collect();
    assert!(with_records.len() >= 2, "{with_records:?}");
    let (broken, other) = (&with_records[0], &with_records[1]);
    let at = records_in(broken);
    let last = *at.last().unwrap();
    let full = std::fs::read_to_string(dir.join(broken)).unwrap();
    let mut cut: Vec<&str> = full.lines().take(last).collect();
    cut.push(&full.lines().nth(last).unwrap()[..30]);
    let cut_file = tampered.join(broken);
    std::fs::write(&cut_file, cut.join("\n") + "\n").unwrap();
    std::fs::copy(dir.join(other), tampered.join(other)).unwrap();
    let report = deep_archive(&db, tampered.to_str().unwrap(), 5);
    let found = report["deep"]["differences"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["field"], "archive file");
    let said = found[0]["reread"].as_str().unwrap();
    assert!(
        said.starts_with(&format!("{}:{}: ", cut_file.display(), last + 1)) && said.contains("(the rest of "),
        "{said}"
    );
    assert_eq!(
        report["deep"]["read_from_archive"],
        at.len() - 1 + records_in(other).len()
    );
    assert_eq!(report["deep"]["raw_archived"], before.len(), "{report}");
    // The Latin-1 record's line with its text changed and its bytes, which
    // its digest is of, left alone: read again from the same job, its line
    // agrees; the file's SHA-256, recorded when the month was archived,
    // does not.
    std::fs::remove_file(tampered.join(other)).unwrap();
    std::fs::remove_file(&cut_file).unwrap();
    let (bytes_file, bytes_text) = archive_files(&dir)
        .into_iter()
        .filter(|n| n.ends_with(".jsonl"))
        .map(|n| {
            let t = std::fs::read_to_string(dir.join(&n)).unwrap();
            (n, t)
        })
        .find(|(_, t)| t.contains("\"raw_bytes\":"))
        .expect("a record line with its bytes");
    let changed: Vec<String> = bytes_text
        .lines()
        .map(|l| match l.contains("\"raw_bytes\":") {
            true => {
                let mut r: serde_json::Value = serde_json::from_str(l).unwrap();
                r["raw"] = format!("{} ", r["raw"].as_str().unwrap()).into();
                r.to_string()
            }
            false => l.to_owned(),
        })
        .collect();
    std::fs::write(tampered.join(&bytes_file), changed.join("\n") + "\n").unwrap();
    let report = deep_archive(&db, tampered.to_str().unwrap(), 5);
    let found = report["deep"]["differences"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["field"], "archive file");
    assert!(
        found[0]["stored"]
            .as_str()
            .unwrap()
            .contains(&format!(" archived to {bytes_file} with SHA-256 ")),
        "{found:?}"
    );
    assert_eq!(
        report["deep"]["read_from_archive"],
        bytes_text.lines().filter(|l| l.starts_with("{\"job_record\":")).count()
    );
    std::fs::remove_file(tampered.join(&bytes_file)).unwrap();
    // A directory that is not there stops it before anything is read.
    let o = db.cli(&[
        "audit",
        "--deep",
        "--archive",
        tampered.join("nowhere").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("nowhere"), "{}", stderr(&o));
    std::fs::remove_dir_all(&tampered).unwrap();
    // An owner who doubles an archived record's cores behind the guard:
    // the deep audit finds it only by reading the file.
    sqlx::raw_sql(&format!(
        "ALTER TABLE job_record DISABLE TRIGGER job_record_append_only;
         UPDATE job_record SET cores = cores * 2 WHERE id = {first};
         ALTER TABLE job_record ENABLE ALWAYS TRIGGER job_record_append_only"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let o = db.cli(&["audit", "--deep", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["deep"]["differences_found"], 0, "{}", stdout(&o));
    let report = deep_archive(&db, dir_s, 5);
    let found = report["deep"]["differences"].as_array().unwrap();
    assert!(
        found.iter().any(|d| d["record_id"] == *first && d["field"] == "cores"),
        "{found:?}"
    );
    assert!(found.iter().all(|d| d["record_id"] == *first), "{found:?}");

    // No other way empties a record: not an UPDATE with the archive's
    // setting, not hl_archive_records outside an archive, and not for
    // another role than the owner.
    let live: i64 = sqlx::query_scalar("SELECT min(id) FROM job_record WHERE raw <> ''")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let refused = refusal(
        &db.pool,
        &format!(
            "SELECT set_config('hl.archiving_records', 'on', true); UPDATE job_record SET raw = '' WHERE id = {live}"
        ),
    )
    .await;
    assert!(
        refused.contains("job_record is append-only: UPDATE is refused"),
        "{refused}"
    );
    // ... not for a month archived in an earlier transaction (its file
    // was written then).
    let refused = refusal(
        &db.pool,
        &format!("SELECT hl_archive_records('2026-10-01', ARRAY[{live}::bigint], ARRAY[sha256('x')])"),
    )
    .await;
    assert!(
        refused.contains("cannot archive the records of 2026-10: neither the month nor its records' file is being archived in this transaction"),
        "{refused}"
    );
    // ... nor, through a records' file (migration 0048), for a month whose
    // records' text left with it.
    let refused = refusal(
        &db.pool,
        &format!(
            "INSERT INTO archived_record_file (period, file_name, file_sha256, records, archived_by)
             VALUES ('2026-10-01', 'x', sha256('x'), 1, 'billing');
             SELECT hl_archive_records('2026-10-01', ARRAY[{live}::bigint], ARRAY[sha256('x')])"
        ),
    )
    .await;
    assert!(
        refused.contains("archive of the records of 2026-10: their raw text is archived already"),
        "{refused}"
    );
    for role in ["hpc_ledger_billing", "hpc_ledger_ingest", "hpc_ledger_auditor"] {
        let refused = refusal(
            &db.pool,
            &format!(
                "SET LOCAL ROLE {role}; SELECT hl_archive_records('2026-10-01', ARRAY[]::bigint[], ARRAY[]::bytea[])"
            ),
        )
        .await;
        assert!(
            refused.contains("permission denied for function hl_archive_records"),
            "{role}: {refused}"
        );
    }
    // A re-sent archived job is still a replay: the recorder's memory stays.
    let audit = db.cli(&["audit"]);
    assert!(audit.status.success(), "{}{}", stdout(&audit), stderr(&audit));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A month archived before its records' raw text could leave with it
/// (migration 0047; made here from an archive of now by putting the text
/// back, the record digests away and the file as format 1 had it):
/// `archive --through` moves that text into the month's records' file
/// (migration 0048), and verify, the audit and the deep audit check it
/// there.
#[tokio::test]
async fn a_month_archived_before_its_records_could_leave_moves_them_later() {
    let db = through_september().await;
    let dir = archive_dir(&db);
    let dir_s = dir.to_str().unwrap();
    ok(&db.cli(&["close", "--month", "2026-10", "--author", "billing"]));
    ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));

    // Back to how an archive before 0047 left the ledger.
    let mut moved: Vec<(i64, String, Option<Vec<u8>>)> = Vec::new();
    let mut months_with_records: Vec<(String, usize)> = Vec::new();
    for name in archive_files(&dir) {
        let path = dir.join(&name);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = Vec::new();
        let mut had = 0;
        for line in text.lines() {
            if line.starts_with("{\"job_record\":") {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                moved.push((
                    v["job_record"].as_i64().unwrap(),
                    v["raw"].as_str().unwrap().to_owned(),
                    v["raw_bytes"].as_str().map(|h| hex::decode(h).unwrap()),
                ));
                had += 1;
            } else {
                lines.push(line.to_owned());
            }
        }
        let mut header: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        header["hpc_ledger_archive"] = 1.into();
        header.as_object_mut().unwrap().remove("records");
        lines[0] = header.to_string();
        let format1 = lines.join("\n") + "\n";
        std::fs::write(&path, &format1).unwrap();
        let month = header["month"].as_str().unwrap().to_owned();
        if had > 0 {
            months_with_records.push((month.clone(), had));
        }
        sqlx::raw_sql(&format!(
            "ALTER TABLE archived_period DISABLE TRIGGER archived_period_append_only;
             UPDATE archived_period SET file_sha256 = '\\x{}' WHERE period = '{month}-01';
             ALTER TABLE archived_period ENABLE ALWAYS TRIGGER archived_period_append_only",
            hex::encode(Sha256::digest(format1.as_bytes()))
        ))
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let months: Vec<&str> = months_with_records.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(months, ["2026-07", "2026-10"]);
    let in_october = months_with_records[1].1;
    assert!(in_october >= 2, "{moved:?}");
    sqlx::raw_sql("ALTER TABLE job_record DISABLE TRIGGER job_record_append_only")
        .execute(&db.pool)
        .await
        .unwrap();
    for (id, raw, bytes) in &moved {
        sqlx::query("UPDATE job_record SET raw = $2, raw_bytes = $3 WHERE id = $1")
            .bind(id)
            .bind(raw)
            .bind(bytes)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::raw_sql(
        "ALTER TABLE job_record ENABLE ALWAYS TRIGGER job_record_append_only;
         ALTER TABLE archived_record DISABLE TRIGGER archived_record_append_only;
         DELETE FROM archived_record;
         ALTER TABLE archived_record ENABLE ALWAYS TRIGGER archived_record_append_only",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let v = ok(&db.cli(&["verify", "--archive", dir_s]));
    let october = v
        .lines()
        .find(|l| l.starts_with("2026-10: seal holds from "))
        .unwrap_or_default();
    assert!(october.ends_with("; the raw text of 0 job records)"), "{v}");
    ok(&db.cli(&["audit"]));
    // The database takes a records' file only with the month's count, and
    // from the owner only.
    let ids: Vec<i64> = moved[moved.len() - in_october..].iter().map(|(id, _, _)| *id).collect();
    let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let refused = refusal(
        &db.pool,
        &format!(
            "INSERT INTO archived_record_file (period, file_name, file_sha256, records, archived_by)
             VALUES ('2026-10-01', 'x', sha256('x'), {}, 'billing');
             SELECT hl_archive_records('2026-10-01', ARRAY[{list}]::bigint[],
                                       (SELECT array_agg(hl_record_raw_sha256(raw, raw_bytes) ORDER BY id)
                                          FROM job_record WHERE id IN ({list})))",
            in_october + 1
        ),
    )
    .await;
    assert!(
        refused.contains(&format!(
            "archive of the records of 2026-10: its records' file counts {} records; the month archived the charges of {in_october}",
            in_october + 1
        )),
        "{refused}"
    );
    for role in ["hpc_ledger_billing", "hpc_ledger_ingest", "hpc_ledger_auditor"] {
        let refused = refusal(
            &db.pool,
            &format!(
                "SET LOCAL ROLE {role};
                 INSERT INTO archived_record_file (period, file_name, file_sha256, records, archived_by)
                 VALUES ('2026-10-01', 'x', sha256('x'), {in_october}, 'billing')"
            ),
        )
        .await;
        assert!(
            refused.contains("permission denied for table archived_record_file"),
            "{role}: {refused}"
        );
    }

    // A refusal by the database (here: one of October's records already
    // has a digest recorded, under July, planted behind the guard) leaves
    // October's records with their text, no records' file of October
    // recorded, and no file of it in the directory. July, whose records
    // are then not all without a digest, is not taken.
    let planted = ids[0];
    sqlx::raw_sql(&format!(
        "INSERT INTO archived_record (job_record_id, period, raw_sha256, raw_length)
         VALUES ({planted}, '2026-07-01', sha256('x'), 1)"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let o = db.cli(&["archive", "--through", "2026-10", "--to", dir_s]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("archived_record_pkey"), "{}", stderr(&o));
    let names = archive_files(&dir);
    assert!(!names.iter().any(|n| n.contains("records")), "{names:?}");
    let (live, files): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_record WHERE id = ANY($1) AND raw <> ''),
                (SELECT count(*) FROM archived_record_file)",
    )
    .bind(&ids)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((live, files), (in_october as i64, 0));
    sqlx::raw_sql(&format!(
        "ALTER TABLE archived_record DISABLE TRIGGER archived_record_append_only;
         DELETE FROM archived_record WHERE job_record_id = {planted};
         ALTER TABLE archived_record ENABLE ALWAYS TRIGGER archived_record_append_only"
    ))
    .execute(&db.pool)
    .await
    .unwrap();

    // The next archive moves the text into each month's records' file.
    let out = ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));
    for (month, n) in &months_with_records {
        assert!(
            out.contains(&format!(
                "{month}: archived before its records' raw text could leave with it; the raw text of {n} job records \
                 archived to {}",
                dir.join(format!("hpc-ledger-archive-{month}-records.jsonl")).display()
            )),
            "{out}"
        );
    }
    let records_file = dir.join("hpc-ledger-archive-2026-10-records.jsonl");
    let ids: Vec<i64> = moved.iter().map(|(id, _, _)| *id).collect();
    let still: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_record WHERE id = ANY($1) AND (raw <> '' OR raw_bytes IS NOT NULL)",
    )
    .bind(&ids)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(still, 0);
    let (kept, file_name, records): (i64, String, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM archived_record WHERE period = '2026-10-01'), file_name, records
           FROM archived_record_file WHERE period = '2026-10-01'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((kept, records), (in_october as i64, in_october as i64));
    assert_eq!(file_name, "hpc-ledger-archive-2026-10-records.jsonl");
    // The file holds the text that left, with its digests.
    let text = std::fs::read_to_string(&records_file).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["hpc_ledger_archive_records"], 1);
    assert_eq!(header["records"], in_october);
    let in_file: Vec<(i64, String, Option<Vec<u8>>)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["job_record"].as_i64().unwrap(),
                v["raw"].as_str().unwrap().to_owned(),
                v["raw_bytes"].as_str().map(|h| hex::decode(h).unwrap()),
            )
        })
        .collect();
    let mut want: Vec<_> = moved[moved.len() - in_october..].to_vec();
    want.sort();
    assert_eq!(in_file, want);

    // Checked there: verify, the audit, the deep audit, job show.
    let v = ok(&db.cli(&["verify", "--archive", dir_s]));
    assert!(
        v.contains(&format!(
            "2026-10: records' file holds: {} (the raw text of {in_october} job records)",
            records_file.display()
        )),
        "{v}"
    );
    // As CSV, a records' file is said so in a column of its own (a month's
    // file holds its seal; a records' file, records only).
    let csv = ok(&db.cli(&["verify", "--archive", dir_s, "--format", "csv"]));
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("month,file,holds,entries,total,records,problems,records_file"),
        "{csv}"
    );
    let october_rows: Vec<&str> = lines.filter(|l| l.starts_with("2026-10,")).collect();
    assert_eq!(october_rows.len(), 2, "{csv}");
    assert!(
        october_rows
            .iter()
            .any(|l| l.contains(&*records_file.display().to_string())
                && l.ends_with(&format!(",true,0,0,{in_october},,true"))),
        "{csv}"
    );
    assert!(october_rows.iter().any(|l| l.ends_with(",false")), "{csv}");
    ok(&db.cli(&["audit"]));
    let report = deep_archive(&db, dir_s, 0);
    assert_eq!(report["deep"]["read_from_archive"], moved.len(), "{report}");
    assert_eq!(report["deep"]["differences_found"], 0, "{report}");
    let job: String = sqlx::query_scalar(
        "SELECT c.name || '/' || j.scheduler_job_id FROM job_record r JOIN job j ON j.id = r.job_id
           JOIN cluster c ON c.id = j.cluster_id WHERE r.id = $1",
    )
    .bind(want[0].0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let shown = ok(&db.cli(&["job", "show", &job, "--raw"]));
    assert!(
        shown.contains("raw record: moved to the archive file of 2026-10 (hpc-ledger-archive-2026-10-records.jsonl)"),
        "{shown}"
    );
    // Once is enough.
    let again = ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir_s]));
    assert!(again.contains("nothing to archive"), "{again}");

    // A records' file whose text was changed, with a digest to match: the
    // ledger's digest and the file's recorded SHA-256 both say so; one
    // that is missing is named.
    let tampered = dir.join("tampered");
    std::fs::create_dir_all(&tampered).unwrap();
    let copy = tampered.join("hpc-ledger-archive-2026-10-records.jsonl");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut record: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    let id = record["job_record"].as_i64().unwrap();
    let changed = format!("{} ", record["raw"].as_str().unwrap());
    record["raw"] = changed.clone().into();
    record["raw_sha256"] = hex::encode(Sha256::digest(changed.as_bytes())).into();
    record["raw_length"] = changed.len().into();
    record.as_object_mut().unwrap().remove("raw_bytes");
    lines[1] = record.to_string();
    std::fs::write(&copy, lines.join("\n") + "\n").unwrap();
    let o = db.cli(&["verify", "--archive", copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("the raw text of job record {id} has SHA-256 "))
            && stdout(&o).contains("the ledger archived 2026-10's records to hpc-ledger-archive-2026-10-records.jsonl"),
        "{}",
        stdout(&o)
    );
    let report = deep_archive(&db, tampered.to_str().unwrap(), 5);
    let found = report["deep"]["differences"].as_array().unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        (found[0]["record_id"].as_i64(), found[0]["field"].as_str()),
        (Some(id), Some("raw_sha256"))
    );
    assert_eq!(found[1]["field"], "archive file");
    assert!(
        found[1]["stored"]
            .as_str()
            .unwrap()
            .starts_with("2026-10's records archived to hpc-ledger-archive-2026-10-records.jsonl with SHA-256 "),
        "{found:?}"
    );
    std::fs::remove_file(&copy).unwrap();
    for name in archive_files(&dir)
        .iter()
        .filter(|n| n.ends_with(".jsonl") && !n.ends_with("-records.jsonl"))
    {
        std::fs::copy(dir.join(name), tampered.join(name)).unwrap();
    }
    let o = db.cli(&["verify", "--archive", tampered.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(
            "2026-10's records' raw text is archived (to hpc-ledger-archive-2026-10-records.jsonl), but that file is not in"
        ),
        "{}",
        stdout(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A balance whose window begins inside a day of an archived month (a
/// grant from 11:45 on a day PAS1234 drew at 11:30 and at 12:00) reads
/// that day's draws from what the archive kept (migration 0061): the same
/// balance before the archive and after. It read them from the month's
/// entries, which the archive deletes, and lost the draws after 11:45.
#[tokio::test]
async fn a_balance_cut_inside_an_archived_day_keeps_that_days_draws() {
    let db = through_september().await;
    ok(&db.cli(&["close", "--month", "2026-10", "--author", "billing"]));
    let (first, last, entries): (chrono::DateTime<Utc>, chrono::DateTime<Utc>, i64) = sqlx::query_as(
        "SELECT d.first_at, d.last_at, d.entries FROM ledger_draw d JOIN project p ON p.id = d.project_id
          WHERE p.code = 'PAS1234' AND d.day = '2026-10-10'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let boundary: chrono::DateTime<Utc> = "2026-10-10T11:45:00Z".parse().unwrap();
    assert!(
        first < boundary && boundary < last && entries > 1,
        "{first} {last} {entries}"
    );
    ok(&db.cli(&[
        "alloc",
        "grant",
        "PAS1234",
        "100.00",
        "--from",
        "2026-10-10T11:45:00Z",
        "--reason",
        "a transfer in, as it were",
    ]));
    let balance = || db.cli(&["balance", "PAS1234", "--at", "2026-11-15T00:00:00Z", "--format", "json"]);
    let used = |text: String| {
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        (v[0]["pool_from"].clone(), v[0]["used"].as_str().unwrap().to_owned())
    };
    // The window from 11:45: what PAS1234 drew from then on.
    let before = used(ok(&balance()));
    assert_eq!(before.0, "2026-10-10T11:45:00Z");
    assert_ne!(before.1, "0", "{before:?}");
    let dir = archive_dir(&db);
    ok(&db.cli(&["archive", "--through", "2026-10", "--to", dir.to_str().unwrap()]));
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entry WHERE period <= '2026-10-01'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM archived_draw WHERE day = '2026-10-10'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(kept > 1, "{kept}");
    assert_eq!(used(ok(&balance())), before);
    // A balance asked inside a day of an archived month is refused (a day
    // is kept whole); at a day's start, answered.
    let o = db.cli(&["balance", "PAS1234", "--at", "2026-10-10T12:30:00Z"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("falls inside a day of a month archived through 2026-10"),
        "{}",
        stderr(&o)
    );
    ok(&db.cli(&["balance", "PAS1234", "--at", "2026-10-11"]));
    // A grant made now to begin inside a day of an archived month is
    // refused (that day's draws were not kept); at the day's start, taken.
    let grant = |from: &str| {
        db.cli(&[
            "alloc",
            "grant",
            "PAS1234",
            "10.00",
            "--from",
            from,
            "--reason",
            "backdated",
        ])
    };
    let o = grant("2026-10-12T09:00:00Z");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("inside a day of a month archived through 2026-10"),
        "{}",
        stderr(&o)
    );
    ok(&grant("2026-10-12"));
    assert!(grant("2026-11-02T09:00:00Z").status.success());
    // The audit checks the kept draws against the day's row: clean, until a
    // draw is added to them (by the owner; no role may write them).
    let findings = || async {
        sqlx::query_scalar::<_, String>("SELECT field FROM audit.discrepancies WHERE kind = 'draw'")
            .fetch_all(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(findings().await, Vec::<String>::new());
    sqlx::query(
        "INSERT INTO archived_draw (project_id, period, day, cluster_id, draw, amount)
         SELECT project_id, period, day, cluster_id, draw, 5.00 FROM archived_draw
          WHERE day = '2026-10-10' ORDER BY draw LIMIT 1",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let found = findings().await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("kept draws of 2026-10-10"), "{found:?}");
}
