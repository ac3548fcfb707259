//! Fuzzing every parser: arbitrary bytes, and mutations of real accounting
//! records (byte flips, cuts, repeats, inserted delimiters and digits). A
//! parser may reject anything, but must never panic or take long; every job
//! it accepts is then resolved and priced, which must not panic either.
//!
//! Each target runs for `HPC_LEDGER_FUZZ_SECONDS` (default 1) and prints how
//! many inputs it tried:
//!
//! ```sh
//! HPC_LEDGER_FUZZ_SECONDS=75 cargo test --release --lib fuzz -- --nocapture --test-threads 1
//! ```

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rust_decimal::dec;

use super::{Format, Item, LineReader, RawLine, ReadOptions, parser};
use crate::domain::catalog::{CardRow, Catalog, CenterInfo, ClusterInfo, NodeTypeInfo};
use crate::domain::posting::resolve;
use crate::domain::pricing::RateCard;
use crate::domain::rules::{Dated, Scheduler};
use crate::domain::units::{Bytes, GIB};
use crate::ids::{ClusterId, NodeTypeId, ProjectId, RateCardId};

const FIXTURES: &[(&str, &str)] = &[
    (
        "slurm",
        include_str!("../../tests/fixtures/accounting/xdmod_slurm_sacct_parsable2_reference.log"),
    ),
    (
        "slurm",
        include_str!("../../tests/fixtures/accounting/xdmod_slurm_sacct_parsable2_edgecases.log"),
    ),
    (
        "slurm",
        include_str!("../../tests/fixtures/accounting/slurm_2205_lab_sacct_steps_header.txt"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/xdmod_pbs_torque_accounting_E.log"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/apel_torque_accounting_E.log"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/hnormalise_torque_accounting.log"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/ncar_pbspro_casper_accounting.log"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/safe_fzk_torque_doubled_nodes.log"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/safe_hector_cray_mppwidth.log"),
    ),
    (
        "pbs",
        include_str!("../../tests/fixtures/accounting/safe_pbs_no_resource_list.log"),
    ),
    ("jsonl", include_str!("../../examples/jobs/jobs.jsonl")),
    (
        "jobcomp",
        include_str!("../../tests/fixtures/accounting/slurm_2205_lab_jobcomp.jsonl"),
    ),
];

fn lines(kind: &str) -> Vec<String> {
    FIXTURES
        .iter()
        .filter(|(k, _)| *k == kind)
        .flat_map(|(_, text)| text.lines().filter(|l| !l.starts_with('#')).map(str::to_owned))
        .collect()
}

fn budget() -> Duration {
    let secs = std::env::var("HPC_LEDGER_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(secs)
}

/// Run `check` on inputs from `strategy` until the time budget is spent.
fn fuzz<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value) + Copy)
where
    S::Value: std::fmt::Debug,
{
    let deadline = Instant::now() + budget();
    let inputs = std::cell::Cell::new(0u64);
    let slowest = std::cell::Cell::new(Duration::ZERO);
    while Instant::now() < deadline {
        // A fresh runner (and random seed) for every batch.
        let mut runner = TestRunner::new(Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&strategy, |v| {
                let t = Instant::now();
                check(v);
                let took = t.elapsed();
                inputs.set(inputs.get() + 1);
                slowest.set(slowest.get().max(took));
                prop_assert!(took < Duration::from_secs(2), "one input took {took:?}");
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    eprintln!("fuzz {name}: {} inputs, slowest {:?}", inputs.get(), slowest.get());
}

/// Mutations of a real line.
fn mutated(base: Vec<String>) -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "|",
        ";",
        "=",
        ":",
        ",",
        "+",
        "[",
        "]",
        "\"",
        "-",
        "T",
        " ",
        "9",
        "0",
        "99999999999999999999",
        // Counts with sacct's units (AllocNodes, NNodes of old Slurm).
        "K",
        "1.50M",
        "79228162514264337593543950335K",
        "\u{0}",
        "\u{2603}",
        "é",
        "\n",
    ]);
    (
        prop::sample::select(base),
        prop::collection::vec(
            (
                0usize..4,
                any::<prop::sample::Index>(),
                any::<prop::sample::Index>(),
                pieces,
            ),
            1..6,
        ),
    )
        .prop_map(|(line, edits)| {
            let mut b: Vec<char> = line.chars().collect();
            for (op, i, j, piece) in edits {
                if b.is_empty() {
                    b.extend(piece.chars());
                    continue;
                }
                let i = i.index(b.len());
                match op {
                    0 => {
                        b.splice(i..i, piece.chars());
                    }
                    1 => {
                        let j = i + j.index(b.len() - i + 1).min(b.len() - i);
                        b.drain(i..j);
                    }
                    2 => {
                        let j = i + j.index(b.len() - i + 1).min(40);
                        let chunk: Vec<char> = b[i..j.min(b.len())].to_vec();
                        b.splice(i..i, chunk);
                    }
                    _ => b[i] = piece.chars().next().unwrap_or('x'),
                }
            }
            b.into_iter().collect()
        })
}

fn catalog() -> Catalog {
    let card = |id, nt, gpu: rust_decimal::Decimal| CardRow {
        id: RateCardId(id),
        node_type_id: NodeTypeId(nt),
        class: None,
        period: Dated {
            valid_from: "1990-01-01T00:00:00Z".parse().unwrap(),
            valid_until: None,
            value: RateCard {
                core_hour: dec!(0.0123456789),
                gpu_hour: gpu,
                memory_per_core: Bytes(3 * GIB),
                cores_per_node: 28,
            },
        },
    };
    let cluster = |id, name: &str| ClusterInfo {
        id: ClusterId(id),
        name: name.into(),
        scheduler: Scheduler::Slurm,
        time_zone: Some(chrono_tz::Europe::Amsterdam),
        node_types: vec![
            NodeTypeInfo {
                id: NodeTypeId(id * 10),
                name: "regular".into(),
                cores_per_node: 28,
                gpus_per_node: 0,
                memory_per_node: None,
            },
            NodeTypeInfo {
                id: NodeTypeId(id * 10 + 1),
                name: "gpu".into(),
                cores_per_node: 28,
                gpus_per_node: 4,
                memory_per_node: None,
            },
        ],
        queues: BTreeMap::new(),
        rate_cards: vec![
            card(id * 10, id * 10, dec!(0)),
            card(id * 10 + 1, id * 10 + 1, dec!(1.5)),
        ],
    };
    Catalog {
        center: Some(CenterInfo {
            name: "F".into(),
            currency: "USD".into(),
            time_zone: chrono_tz::America::New_York,
        }),
        clusters: vec![cluster(1, "fuzz")],
        storage_rates: vec![],
        classes: vec![],
        project_classes: Default::default(),
        discounts: vec![],
    }
}

/// Parse every line of `text` with a fresh parser, and resolve what it accepts.
fn parse_and_price(
    format: Format,
    options: &ReadOptions,
    text: &str,
    catalog: &Catalog,
    projects: &HashMap<String, ProjectId>,
) {
    let mut p = parser(format, options).unwrap();
    let mut reader = LineReader::new(std::io::Cursor::new(text.as_bytes()));
    let now: DateTime<Utc> = "2030-01-01T00:00:00Z".parse().unwrap();
    while let Ok(Some((_, line))) = reader.next_line() {
        if let RawLine::Text(t) = line
            && let Some(Item::Job(mut job)) = p.parse(&t)
        {
            if job.queue.is_none() {
                job.node_type = Some("regular".into());
            }
            // What an importer's --cluster and --default-project give.
            job.cluster.get_or_insert_with(|| "fuzz".into());
            job.project.get_or_insert_with(|| "p".into());
            let _ = resolve(&job, catalog, projects, now);
        }
    }
}

fn with_header(header: &str, line: String) -> String {
    format!("{header}\n{line}\n")
}

#[test]
fn fuzz_parsers_on_arbitrary_bytes() {
    let catalog = catalog();
    let projects = HashMap::from([("p".to_owned(), ProjectId(1))]);
    for format in [
        Format::Slurm,
        Format::Pbs,
        Format::Jsonl,
        Format::Jobcomp,
        Format::SacctJson,
        Format::JobcompFiletxt,
    ] {
        fuzz(
            &format!("{} on arbitrary bytes", format.as_str()),
            prop::collection::vec(any::<u8>(), 0..2048),
            |bytes| {
                let mut p = parser(format, &ReadOptions::default()).unwrap();
                let mut reader = LineReader::new(std::io::Cursor::new(bytes));
                while let Ok(Some((_, RawLine::Text(t)))) = reader.next_line() {
                    let _ = p.parse(&t);
                }
            },
        );
    }
    let _ = (&catalog, &projects);
}

#[test]
fn fuzz_slurm_on_mutated_real_records() {
    let catalog = catalog();
    let projects = HashMap::from([("p".to_owned(), ProjectId(1))]);
    let header = "JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|GID|User|UID|Submit|Eligible|Start|End|Elapsed|ExitCode|State|NNodes|NCPUS|ReqCPUS|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|JobName";
    let base = lines("slurm");
    fuzz("slurm on mutated sacct lines", mutated(base), |line| {
        let line = line.replace("testclu", "fuzz").replace("phillips", "fuzz");
        parse_and_price(
            Format::Slurm,
            &ReadOptions::default(),
            &with_header(header, line.clone()),
            &catalog,
            &projects,
        );
        parse_and_price(Format::Slurm, &ReadOptions::default(), &line, &catalog, &projects);
    });
}

#[test]
fn fuzz_pbs_on_mutated_real_records() {
    let catalog = catalog();
    let projects = HashMap::from([("p".to_owned(), ProjectId(1))]);
    let options = ReadOptions {
        cluster: Some("fuzz".into()),
        default_project: Some("p".into()),
        ..Default::default()
    };
    fuzz("pbs on mutated accounting records", mutated(lines("pbs")), |line| {
        parse_and_price(Format::Pbs, &options, &line, &catalog, &projects);
    });
}

#[test]
fn fuzz_jsonl_on_mutated_jobs() {
    let catalog = catalog();
    let projects = HashMap::from([("p".to_owned(), ProjectId(1))]);
    let base: Vec<String> = lines("jsonl")
        .into_iter()
        .map(|l| l.replace("owens", "fuzz").replace("pitzer", "fuzz"))
        .collect();
    fuzz("jsonl on mutated jobs", mutated(base), |line| {
        parse_and_price(Format::Jsonl, &ReadOptions::default(), &line, &catalog, &projects);
    });
}

#[test]
fn fuzz_jobcomp_on_mutated_documents() {
    let catalog = catalog();
    let projects = HashMap::from([
        ("pas1234".to_owned(), ProjectId(1)),
        ("pzs0001".to_owned(), ProjectId(2)),
    ]);
    let base: Vec<String> = lines("jobcomp")
        .into_iter()
        .map(|l| l.replace("testclu", "fuzz"))
        .collect();
    fuzz("jobcomp on mutated documents", mutated(base), |line| {
        parse_and_price(Format::Jobcomp, &ReadOptions::default(), &line, &catalog, &projects);
        if let Ok((doc, Item::Job(job))) = super::jobcomp::parse_document(&line, &ReadOptions::default()) {
            // What is stored reads back as the same job.
            let stored = super::jobcomp::stored_document(doc);
            let again = super::jobcomp::parse_document(&stored, &ReadOptions::default()).map(|(_, i)| i);
            assert_eq!(again, Ok(Item::Job(job)), "{line}");
        }
    });
}

#[test]
fn fuzz_request_and_size_parsers() {
    use crate::domain::request::{parse_alloc_tres, parse_pbs, parse_slurm, pbs_duration, slurm_duration};
    let requests = vec![
        "nodes=2:ppn=8:gpus=2,mem=12GB,walltime=2:00:00".to_owned(),
        "select=2:ncpus=8:ngpus=1:mem=16gb+1:ncpus=4,place=scatter:excl".to_owned(),
        "-N 2 -n 8 -c 2 --mem=32G --gres=gpu:v100:2 -t 1-00:00:00".to_owned(),
        "billing=64,cpu=64,mem=62.50G,node=8,gres/gpu:a100=2".to_owned(),
        "10-13:27:06".to_owned(),
    ];
    fuzz("resource requests, sizes and durations", mutated(requests), |s| {
        let shape = |r: Result<crate::domain::request::ResourceRequest, _>| {
            if let Ok(r) = r {
                let _ = r.shape(28);
                let _ = r.shape(1);
            }
        };
        shape(parse_pbs(&s));
        shape(parse_slurm(&s));
        let _ = parse_alloc_tres(&s);
        let _ = pbs_duration(&s);
        let _ = slurm_duration(&s);
        let _ = Bytes::parse(&s, 1);
        let _ = Bytes::parse(&s, 1 << 20);
    });
}

#[test]
fn fuzz_the_center_configuration() {
    let example = include_str!("../../examples/center.toml");
    let base: Vec<String> = vec![example.to_owned()];
    fuzz("center configuration", mutated(base), |text| {
        let _ = crate::config::parse(&text);
    });
}

#[test]
fn fuzz_sacct_json_streams_of_damaged_documents() {
    let doc: String = include_str!("../../tests/fixtures/accounting/slurm_2205_lab_sacct.json")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let len = doc.len();
    fuzz(
        "sacct-json stream with bytes replaced",
        prop::collection::vec((0..len, any::<u8>()), 1..8),
        |edits| {
            let mut bytes = doc.clone().into_bytes();
            for (at, b) in edits {
                bytes[at] = b;
            }
            use crate::ingest::Parser as _;
            let mut p = crate::ingest::sacct_json::SacctJsonParser::new(&ReadOptions::default());
            // Whatever it reads, each job it gives is one object it can parse (or refuse) on its own.
            let _ = crate::ingest::sacct_json::stream(
                std::io::Cursor::new(bytes),
                &mut || Ok(Box::new(std::io::Cursor::new(Vec::new())) as Box<dyn crate::ingest::sacct_json::Waiting>),
                |_, job| {
                    assert!(serde_json::from_str::<serde_json::Value>(&job).is_ok(), "{job}");
                    let _ = p.parse(&job);
                    true
                },
            );
        },
    );
}
