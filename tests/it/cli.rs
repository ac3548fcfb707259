//! The command line as a user runs it: config apply/show and quote, text and
//! JSON, and the errors a user sees.

use serde_json::Value;

use crate::harness::{TestDb, cli_with_env, example_path, ok, stderr, stdout};

#[tokio::test]
async fn config_apply_and_show() {
    let db = TestDb::new().await;
    let path = example_path();
    let out = ok(&db.cli(&["config", "apply", path.to_str().unwrap()]));
    assert!(
        out.contains("rate cards:    9 added, 0 updated, 0 removed, 0 unchanged"),
        "{out}"
    );
    assert!(out.ends_with("configuration applied\n"), "{out}");
    let out = ok(&db.cli(&["config", "apply", path.to_str().unwrap()]));
    assert!(out.ends_with("nothing to change\n"), "{out}");

    // Before the July change, owens' regular nodes cost 0.01 per core-hour.
    let out = ok(&db.cli(&["config", "show", "--at", "2026-03-01"]));
    let line = out
        .lines()
        .skip_while(|l| !l.starts_with("cluster owens"))
        .find(|l| l.starts_with("regular"))
        .unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cols[..7],
        ["regular", "0.01", "0", "4GB", "28", "0", "2026-01-01"],
        "{line}"
    );
    assert!(out.contains("storage: 5 USD per TB-month (since 2026-01-01)"), "{out}");
    let pas = out.lines().find(|l| l.starts_with("PAS1234")).unwrap();
    assert!(pas.split_whitespace().nth(1) == Some("10"), "{pas}");

    let json: Value = serde_json::from_str(&ok(&db.cli(&[
        "config",
        "show",
        "--at",
        "2026-11-01",
        "--format",
        "json",
    ])))
    .unwrap();
    let owens = &json["catalog"]["clusters"][0];
    assert_eq!(owens["name"], "owens");
    let regular_id = owens["node_types"][0]["id"].clone();
    let card = owens["rate_cards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["node_type_id"] == regular_id && c["class"].is_null())
        .unwrap();
    assert_eq!(card["period"]["value"]["core_hour"], "0.012");
    assert_eq!(json["catalog"]["storage_rates"][0]["value"]["tb_month"], "4.5");
    let pas = json["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["code"] == "PAS1234")
        .unwrap();
    assert_eq!(pas["quota_tb"], "20.000000");
}

#[tokio::test]
async fn a_bad_configuration_is_refused_with_every_problem_named() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("hl-cfg-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        crate::harness::EXAMPLE
            .replace("currency = \"USD\"", "currency = \"dollars\"")
            .replace(
                "node_type = \"hugememory\"\nfrom = 2026-01-01\ncore_hour = 0.0150",
                "node_type = \"bigmem\"\nfrom = 2026-01-01\ncore_hour = -0.0150",
            ),
    )
    .unwrap();
    let o = db.cli(&["config", "apply", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("the configuration has 3 problems"), "{err}");
    assert!(
        err.contains("center.currency: \"dollars\" is not an ISO 4217 code"),
        "{err}"
    );
    assert!(
        err.contains("cluster[0] (\"owens\").rate_card[2].node_type: unknown node type \"bigmem\""),
        "{err}"
    );
    assert!(
        err.contains("cluster[0] (\"owens\").rate_card[2].core_hour: negative price -0.015"),
        "{err}"
    );
    assert!(err.contains(&format!("in {}", bad.display())), "{err}");
    // Nothing was applied.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    let o = db.cli(&["config", "apply", "/nonexistent/center.toml"]);
    assert!(
        stderr(&o).contains("error: reading /nonexistent/center.toml"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn quote_prints_the_whole_breakdown() {
    let db = TestDb::with_example().await;
    // pitzer, March 2026: regular at 0.011; 12 GB at 4 GB per core = 3 cores for 2 h.
    let args = [
        "quote",
        "--cluster",
        "pitzer",
        "--resources",
        "nodes=1:ppn=1,mem=12GB",
        "--walltime",
        "2:00:00",
        "--queue",
        "batch",
        "--at",
        "2026-03-01",
    ];
    let out = ok(&db.cli(&args));
    for want in [
        "Quote: cluster pitzer, node type regular (queue batch)",
        "  effective cores   3",
        "  charged cores     3 (charged by its memory (effective cores))",
        "  wall time         2:00:00 = 7200 s = 2 h",
        "total: USD 0.07",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    let row = out.lines().find(|l| l.starts_with("core-hours")).unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["core-hours", "6", "0.011", "0.066", "0.07"]
    );

    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let q: Value = serde_json::from_str(&ok(&db.cli(&json_args))).unwrap();
    assert_eq!(q["price"]["charged_cores"], "3.000000000000");
    assert_eq!(q["price"]["basis"], "memory");
    assert_eq!(q["price"]["lines"][0]["quantity"], "6.000000000000");
    assert_eq!(q["price"]["lines"][0]["amount"], "0.07");
    assert_eq!(q["shape"]["memory"], 12u64 << 30);

    // A GPU job on the Slurm cluster, requested with Slurm options.
    let out = ok(&db.cli(&[
        "quote",
        "--cluster",
        "owens",
        "--resources",
        "-n 8 --gres=gpu:2",
        "--walltime",
        "1:30:00",
        "--queue",
        "gpu",
        "--format",
        "json",
    ]));
    let q: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(q["node_type"], "gpu");
    assert_eq!(q["price"]["lines"][1]["metric"], "gpu_hours");
    assert_eq!(q["price"]["lines"][1]["quantity"], "3.000000000000");
    // 12 core-hours × 0.01 + 3 GPU-hours × 0.20
    assert_eq!(q["price"]["lines"][0]["amount"], "0.12");
    assert_eq!(q["price"]["lines"][1]["amount"], "0.60");
    assert_eq!(q["total"], "0.72");
}

#[tokio::test]
async fn quote_errors_say_what_to_fix() {
    let db = TestDb::with_example().await;
    let err = |args: &[&str]| {
        let o = db.cli(args);
        assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
        stderr(&o)
    };
    let e = err(&[
        "quote",
        "--cluster",
        "nowhere",
        "--resources",
        "nodes=1",
        "--walltime",
        "1:00:00",
    ]);
    assert!(e.contains("unknown cluster \"nowhere\" (known: owens, pitzer)"), "{e}");
    // Issue 20, item 7: the closest known name, and the dialect to use.
    let e = err(&[
        "quote",
        "--cluster",
        "owen",
        "--resources",
        "-n 1",
        "--walltime",
        "1:00:00",
    ]);
    assert!(
        e.contains("unknown cluster \"owen\" (did you mean owens? known: owens, pitzer)"),
        "{e}"
    );
    let e = err(&[
        "quote",
        "--cluster",
        "owens",
        "--resources",
        "-n 1",
        "--walltime",
        "1:00:00",
        "--queue",
        "bath",
    ]);
    assert!(
        e.contains("unknown queue \"bath\" on cluster owens (did you mean batch?)"),
        "{e}"
    );
    let e = err(&[
        "quote",
        "--cluster",
        "owens",
        "--resources",
        "nodes=1:ppn=4",
        "--walltime",
        "1:00:00",
        "--queue",
        "batch",
    ]);
    assert!(
        e.contains("this looks like a PBS request, and cluster owens runs Slurm: give --dialect pbs"),
        "{e}"
    );
    let out = ok(&db.cli(&[
        "quote",
        "--cluster",
        "owens",
        "--resources",
        "nodes=1:ppn=4",
        "--walltime",
        "1:00:00",
        "--queue",
        "batch",
        "--dialect",
        "pbs",
    ]));
    assert!(out.contains("total: USD 0.05"), "{out}");
    let e = err(&["statement", "--project", "PAS1243", "--month", "2026-10"]);
    assert!(e.contains("unknown project \"PAS1243\" (did you mean PAS1234?)"), "{e}");
    let e = err(&[
        "quote",
        "--cluster",
        "pitzer",
        "--resources",
        "nodes=1",
        "--walltime",
        "1:00:00",
        "--queue",
        "debugq",
    ]);
    assert!(e.contains("unknown queue \"debugq\" on cluster pitzer"), "{e}");
    let e = err(&[
        "quote",
        "--cluster",
        "pitzer",
        "--resources",
        "nodes=1:ppn=4",
        "--queue",
        "batch",
    ]);
    assert!(e.contains("no wall time"), "{e}");
    let e = err(&[
        "quote",
        "--cluster",
        "pitzer",
        "--resources",
        "nodes=1:ppn=four",
        "--walltime",
        "1:00:00",
        "--queue",
        "batch",
    ]);
    assert!(e.contains("ppn must be a whole number, not \"four\""), "{e}");
    let e = err(&[
        "quote",
        "--cluster",
        "pitzer",
        "--resources",
        "nodes=1",
        "--walltime",
        "1:00:00",
        "--queue",
        "batch",
        "--at",
        "2025-06-01",
    ]);
    assert!(
        e.contains("no rate card for node type \"regular\" on cluster pitzer is in force"),
        "{e}"
    );
}

#[test]
fn help_never_shows_the_database_url() {
    let secret = "postgres://ledger:hunter2@db.example.org/hpc";
    let o = cli_with_env(&["--help"], &[("DATABASE_URL", secret)], None);
    let text = stdout(&o);
    assert!(text.contains("--database-url"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    // A connection failure names the server without its password.
    let o = cli_with_env(
        &["config", "show"],
        &[("DATABASE_URL", "postgres://ledger:hunter2@127.0.0.1:9/hpc")],
        None,
    );
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("cannot connect to postgres://ledger:***@127.0.0.1:9/hpc"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// A negative amount where none is allowed is refused by name (it was read
/// as an unknown option, quoting "-1" for "-10").
#[tokio::test]
async fn a_negative_amount_is_refused_saying_so() {
    let db = TestDb::with_example().await;
    ok(&db.cli(&[
        "alloc",
        "grant",
        "PAS1234",
        "250.00",
        "--from",
        "2026-07-01",
        "--reason",
        "award",
    ]));
    ok(&db.cli(&[
        "job",
        "record",
        "--cluster",
        "owens",
        "--job-id",
        "1",
        "--project",
        "PAS1234",
        "--queue",
        "batch",
        "--cores",
        "1",
        "--start",
        "2026-11-02T09:00:00-05:00",
        "--end",
        "2026-11-02T10:00:00-05:00",
    ]));
    for (args, says) in [
        (
            &[
                "alloc",
                "grant",
                "PAS1234",
                "-10",
                "--from",
                "2026-11-01",
                "--reason",
                "x",
            ][..],
            "an amount is positive, with at most 2 decimal places, below 10^16: not -10",
        ),
        (
            &["alloc", "reduce", "PAS1234", "-10", "--grant", "1", "--reason", "x"],
            "an amount is positive, with at most 2 decimal places, below 10^16: not -10",
        ),
        (
            &[
                "alloc", "transfer", "PAS1234", "PZS0708", "-3", "--grant", "1", "--reason", "x",
            ],
            "an amount is positive, with at most 2 decimal places, below 10^16: not -3",
        ),
        (
            &[
                "refund",
                "--cluster",
                "owens",
                "--job-id",
                "1",
                "--amount",
                "-1.00",
                "--reason",
                "x",
            ],
            "a refund amount is positive with at most 2 decimal places, not -1.00",
        ),
        (
            &[
                "refund",
                "--cluster",
                "owens",
                "--job-id",
                "1",
                "--fraction",
                "-0.5",
                "--reason",
                "x",
            ],
            "a refund fraction is more than 0 and at most 1, not -0.5",
        ),
        (
            &["quota", "set", "PZS0708", "-5TB", "--from", "2026-11-20"],
            "\"-5TB\": a quota cannot be negative",
        ),
    ] {
        let o = db.cli(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).trim(), format!("error: {says}"), "{args:?}");
    }
}
