//! `hpc-ledger demo`: the whole flow on sample data, in a fresh database of
//! its own on the same server (never the ledger database itself).

use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;

use std::io::Cursor;

use crate::db::{self, MIGRATOR, Target};
use crate::domain::period::Month;
use crate::domain::rules::Scheduler;
use crate::ingest::{Format, ReadOptions};
use crate::service::correct::{self, RefundBy, Target as CorrectTarget, Why};
use crate::service::import::{Input, Summary, import};
use crate::service::record::{RecordOptions, Recorder};
use crate::service::statement::Which;
use crate::service::storage;
use crate::service::{self, quote::QuoteRequest};
use crate::service::{budget, close};

/// The example configuration shipped in examples/center.toml.
pub const EXAMPLE_CONFIG: &str = include_str!("../../examples/center.toml");

/// The sample jobs in examples/jobs/, in the three import formats.
const SAMPLE_SLURM: &str = include_str!("../../examples/jobs/owens-sacct.txt");
const SAMPLE_PBS: &str = include_str!("../../examples/jobs/pitzer-accounting-202610.log");
const SAMPLE_JSONL: &str = include_str!("../../examples/jobs/jobs.jsonl");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The demo database, dropped and created afresh on the same server.
    #[arg(long, default_value = "hpc_ledger_demo")]
    database: String,
}

fn heading(n: u32, title: &str) {
    println!("\n== {n}. {title} ==\n");
}

pub async fn run(args: Args, target: &Target) -> anyhow::Result<ExitCode> {
    let (url, _) = target
        .recreate_scratch(&args.database)
        .await
        .context("creating the demo database")?;
    let pool = db::connect(&url).await?;
    MIGRATOR.run(&pool).await?;
    println!(
        "hpc-ledger demo: a fresh database {:?} on {}",
        args.database,
        db::redact(&url)
    );

    heading(1, "Apply the center configuration (examples/center.toml)");
    let config = crate::config::parse(EXAMPLE_CONFIG)?;
    let report = service::config::apply(&pool, &config, "demo").await?;
    print!("{report}");
    let again = service::config::apply(&pool, &config, "demo").await?;
    println!(
        "applied twice: the second time {}",
        if again.changed() {
            "CHANGED SOMETHING (unexpected)"
        } else {
            "changed nothing"
        }
    );

    heading(2, "What is in force now");
    let shown = service::config::show(&pool, Utc::now()).await?;
    print!("{}", super::config::render(&shown));

    heading(3, "Quotes: the center's own examples");
    let tz = config.center.time_zone;
    let quotes = [
        (
            "pitzer",
            "nodes=1:ppn=3",
            "1:00:00",
            Some("batch"),
            "R2: ppn=3 -> 3 cores",
        ),
        (
            "pitzer",
            "nodes=1:ppn=1,mem=12GB",
            "2:00:00",
            Some("batch"),
            "R2: 12 GB at 4 GB/core -> 3 cores",
        ),
        (
            "pitzer",
            "nodes=1:ppn=8:gpus=2",
            "1:00:00",
            Some("gpu"),
            "R5: 8 core-hours + 2 GPU-hours",
        ),
        (
            "owens",
            "-N 2 -n 4 --mem=8G",
            "1:00:00",
            Some("parallel"),
            "R3: two whole 28-core nodes",
        ),
    ];
    for (cluster, resources, walltime, queue, what) in quotes {
        let q = service::quote::quote(
            &pool,
            &QuoteRequest {
                cluster: cluster.into(),
                resources: resources.into(),
                dialect: None::<Scheduler>,
                walltime: Some(walltime.into()),
                queue: queue.map(Into::into),
                node_type: None,
                at: Utc::now(),
                project: None,
                class: None,
            },
        )
        .await?;
        println!("-- {what}: {cluster} `{resources}` for {walltime}");
        print!("{}", super::quote::render(&q, tz));
        println!();
    }

    heading(4, "Record finished jobs: Slurm sacct, a PBS log, JSON lines");
    let mut recorder = Recorder::new(pool.clone(), RecordOptions::by("demo"));
    let samples = [
        ("examples/jobs/owens-sacct.txt", Format::Slurm, SAMPLE_SLURM, None),
        (
            "examples/jobs/pitzer-accounting-202610.log",
            Format::Pbs,
            SAMPLE_PBS,
            Some("pitzer"),
        ),
        ("examples/jobs/jobs.jsonl", Format::Jsonl, SAMPLE_JSONL, None),
    ];
    for (name, format, text, cluster) in samples {
        let options = ReadOptions {
            cluster: cluster.map(Into::into),
            ..Default::default()
        }
        .now(format.source());
        let mut summary = Summary::default();
        import(
            &mut recorder,
            Cursor::new(text),
            &Input::new(name, format, &options),
            &mut summary,
            &|_| {},
        )
        .await?;
        println!("-- hpc-ledger import --format {} {name}", format.as_str());
        print!("{}", super::import::render(&summary));
        println!();
    }
    let mut again = Summary::default();
    let name = "examples/jobs/owens-sacct.txt";
    // Read as `import` reads it now: with the readings of before, a job's
    // Elapsed went unread and its first record became a conflict.
    import(
        &mut recorder,
        Cursor::new(SAMPLE_SLURM),
        &Input::new(name, Format::Slurm, &ReadOptions::default().now(Format::Slurm.source())),
        &mut again,
        &|_| {},
    )
    .await?;
    println!(
        "-- the same sacct file again: {} recorded, {} replayed (nothing is charged twice)\n",
        again.recorded, again.replayed
    );

    heading(
        5,
        "Bill storage through October, month by month (quota × rate, day by day)",
    );
    let october: Month = "2026-10".parse().expect("a month");
    // The first job is in July, but quotas started in January: closing July
    // now would make January to June unbillable, so it is refused.
    let early = close::close(&pool, "2026-07".parse().expect("a month"), "demo", Utc::now()).await;
    if let Err(e) = early {
        println!("closing July before billing is refused:\n  {e}\n");
    } else {
        anyhow::bail!("the demo closed July with January to June unbilled");
    }
    let billed = storage::bill_through(&pool, october, "demo", false, Utc::now()).await?;
    if let Some(e) = billed.stopped {
        return Err(anyhow::Error::from(e).context("billing storage through October"));
    }
    for b in &billed.months {
        if b.month == october {
            print!(
                "{}",
                super::bill::render(b, crate::service::config::time_zone(&pool).await?)
            );
        } else {
            println!(
                "storage for {} billed: {} projects, total {:.2}",
                b.month, b.project_count, b.total
            );
        }
    }
    let again = storage::bill(&pool, october, "demo", false, Utc::now()).await?;
    println!(
        "billed October again: {}",
        match again.state {
            storage::BillState::AlreadyBilled { .. } => "already billed, nothing posted",
            _ => "POSTED TWICE (unexpected)",
        }
    );

    heading(6, "Corrections: a refund, a reversal, an adjustment");
    let why = |reason: &str| Why {
        author: "billing-office".into(),
        reason: reason.into(),
        ..Why::default()
    };
    let job = |id: &str| CorrectTarget::Job {
        cluster: "owens".into(),
        job_id: id.into(),
        array_index: None,
        start: None,
    };
    let refunded = correct::refund(
        &pool,
        &job("1004"),
        RefundBy::Fraction("0.5".parse()?),
        &why("node failure: half the run was lost"),
        Utc::now(),
    )
    .await?;
    println!(
        "refund of half of owens/1004: {:.2}",
        refunded.entries.iter().map(|p| p.amount).sum::<rust_decimal::Decimal>()
    );
    let reversed = correct::reverse(
        &pool,
        &job("1009"),
        &why("debug partition is free of charge"),
        Utc::now(),
    )
    .await?;
    println!(
        "reversal of owens/1009: {} entr{}",
        reversed.entries.len(),
        if reversed.entries.len() == 1 { "y" } else { "ies" }
    );
    let adjusted = correct::adjust(
        &pool,
        "PZS0708",
        "-10.00".parse()?,
        &Why {
            month: Some(october),
            ..why("allocation award credit")
        },
        Utc::now(),
    )
    .await?;
    let credit = &adjusted.entries[0];
    println!(
        "credit to PZS0708 in {}: {:.2} (entry {})",
        credit.period, credit.amount, credit.id
    );

    heading(
        7,
        "Close January to October (in order), October's statement and finance journal",
    );
    let closed = close::close_through(&pool, october, "billing-office", Utc::now()).await?;
    if let Some(e) = closed.stopped {
        return Err(anyhow::Error::from(e).context("closing through October"));
    }
    // As `hpc-ledger close` does once the months are closed.
    crate::service::fold_rollups(&pool).await;
    for c in &closed.months {
        println!(
            "{} closed: {} entries, total {:.2}, {} statement(s), seal {}…",
            c.month,
            c.entry_count,
            c.total,
            c.statements.len(),
            &c.seal[..16]
        );
    }
    let statement = crate::service::statement::statements(&pool, october, Which::Project("PZS0708")).await?;
    println!();
    print!("{}", super::statement::text(&statement[0]));
    // The finance office's journal of the closed month (docs/month-end.md).
    println!("\n-- hpc-ledger export journal --month {october}   (the finance office's journal, configured layout)");
    let journal = crate::service::journal::export(&pool, october, "billing-office", false, |journal, layout| {
        print!("{}", super::export::csv(journal, layout));
        Ok(())
    })
    .await?;
    println!(
        "{} lines, debits {:.2} = credits {:.2}: each statement's funding lines add up to its total (shares split to the cent)",
        journal.lines.len(),
        journal.debit_total,
        journal.credit_total
    );

    heading(8, "Budgets: an allocation, what is left, a refused start, a top-up");
    let award = crate::domain::rules::Dated {
        valid_from: crate::config::parse_instant("2026-07-01", tz).map_err(anyhow::Error::msg)?,
        valid_until: Some(crate::config::parse_instant("2027-07-01", tz).map_err(anyhow::Error::msg)?),
        value: (),
    };
    let grant = budget::grant(
        &pool,
        "PAS1234",
        "250.00".parse()?,
        award.clone(),
        None,
        "award 2026-123",
        "billing-office",
    )
    .await?;
    println!("granted 250.00 to PAS1234 from 2026-07-01 until 2027-07-01 (allocation {grant})");
    // Printed from the ledger, not from the grant: the balance is derived.
    let b = budget::balance(&pool, "PAS1234", Utc::now()).await?;
    println!(
        "PAS1234: allocated {:.2}, used {:.2}, held {:.2}, remaining {:.2}",
        b.balance.allocated, b.balance.used, b.balance.held, b.balance.remaining
    );
    let alerts = budget::check_alerts(&pool, None).await?;
    for c in alerts.new.iter().rev() {
        println!(
            "alert: PAS1234 has used {} % of its allocations ({:.2} of {:.2})",
            c.threshold, c.used, c.allocated
        );
    }
    let big = budget::JobRequest {
        project: "PAS1234".into(),
        job_id: Some("7001".into()),
        array_index: None,
        tasks: 1,
        quote: QuoteRequest {
            cluster: "owens".into(),
            resources: "-N 4 -n 112".into(),
            dialect: None,
            walltime: Some("48:00:00".into()),
            queue: Some("parallel".into()),
            node_type: None,
            at: Utc::now(),
            project: Some("PAS1234".into()),
            class: None,
        },
    };
    let refused = budget::check(&pool, &big, rust_decimal::Decimal::ZERO).await?;
    println!(
        "check owens 4 nodes × 48 h for PAS1234: {} ({})",
        if refused.verdict.allowed {
            "may start"
        } else {
            "may NOT start"
        },
        refused.verdict.reason
    );
    budget::grant(
        &pool,
        "PAS1234",
        "1000.00".parse()?,
        award,
        None,
        "supplement 2026-123a",
        "billing-office",
    )
    .await?;
    let allowed = budget::check(&pool, &big, rust_decimal::Decimal::ZERO).await?;
    println!(
        "after a 1000.00 top-up: {} ({})",
        if allowed.verdict.allowed {
            "may start"
        } else {
            "may NOT start"
        },
        allowed.verdict.reason
    );
    let held = budget::hold(&pool, &big, chrono::TimeDelta::hours(1), "prolog").await?;
    println!(
        "a prolog holds {:.2} for owens/7001 until its charge is recorded (or {})",
        held.amount,
        super::local_time(held.expires_at, tz)
    );

    heading(9, "Audit: every charge recomputed in SQL, every seal checked");
    let report = close::audit(&pool).await?;
    print!("{}", super::close::render(&report));
    if !report.clean() {
        anyhow::bail!("the demo's audit found problems");
    }
    println!();

    println!("Explore the demo database:");
    println!("  hpc-ledger --database-url '{}' config show", db::redact(&url));
    Ok(ExitCode::SUCCESS)
}
