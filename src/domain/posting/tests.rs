//! Resolving jobs against the rules, and what a re-sent record means.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDateTime, Utc};
use rust_decimal::dec;

use super::*;
use crate::domain::catalog::{CardRow, CenterInfo, NodeTypeInfo};
use crate::domain::pricing::RateCard;
use crate::domain::rules::{Dated, Scheduler};
use crate::domain::units::GIB;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn local(s: &str) -> Stamp {
    Stamp::Local(NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap())
}

const NOW: &str = "2026-11-30T12:00:00Z";

/// Cluster c1 (New York time): regular (28 cores, 4 GB/core) at 0.01 until
/// July, 0.02 after; gpu (8 GB/core) at 0.01 + 0.5 per GPU-hour.
fn catalog() -> Catalog {
    let regular = NodeTypeId(1);
    let gpu = NodeTypeId(2);
    let card = |id, nt, from: &str, until: Option<&str>, core, gpu_price, mem_gib| CardRow {
        id: RateCardId(id),
        node_type_id: nt,
        class: None,
        period: Dated {
            valid_from: at(from),
            valid_until: until.map(at),
            value: RateCard {
                core_hour: core,
                gpu_hour: gpu_price,
                memory_per_core: Bytes(mem_gib * GIB),
                cores_per_node: 28,
            },
        },
    };
    Catalog {
        center: Some(CenterInfo {
            name: "C".into(),
            currency: "USD".into(),
            time_zone: chrono_tz::America::New_York,
        }),
        clusters: vec![ClusterInfo {
            id: ClusterId(7),
            name: "c1".into(),
            scheduler: Scheduler::Slurm,
            time_zone: None,
            node_types: vec![
                NodeTypeInfo {
                    id: regular,
                    name: "regular".into(),
                    cores_per_node: 28,
                    gpus_per_node: 0,
                    memory_per_node: None,
                },
                NodeTypeInfo {
                    id: gpu,
                    name: "gpu".into(),
                    cores_per_node: 28,
                    gpus_per_node: 2,
                    memory_per_node: None,
                },
            ],
            queues: BTreeMap::from([(
                "batch".into(),
                vec![Dated {
                    valid_from: DateTime::<Utc>::MIN_UTC,
                    valid_until: None,
                    value: "regular".into(),
                }],
            )]),
            rate_cards: vec![
                card(
                    1,
                    regular,
                    "2026-01-01T05:00:00Z",
                    Some("2026-07-01T04:00:00Z"),
                    dec!(0.01),
                    dec!(0),
                    4,
                ),
                card(2, regular, "2026-07-01T04:00:00Z", None, dec!(0.02), dec!(0), 4),
                card(3, gpu, "2026-01-01T05:00:00Z", None, dec!(0.01), dec!(0.5), 8),
            ],
        }],
        storage_rates: vec![],
        classes: vec![],
        project_classes: Default::default(),
        discounts: vec![],
    }
}

fn projects() -> HashMap<String, ProjectId> {
    HashMap::from([("pas1234".into(), ProjectId(11))])
}

fn job() -> JobInput {
    JobInput {
        suspension: Default::default(),
        cluster: Some("c1".into()),
        job_id: "1001".into(),
        array_index: None,
        project: Some("pas1234".into()),
        user: "alice".into(),
        job_name: "md".into(),
        queue: Some("batch".into()),
        node_type: None,
        nodes: Some(1),
        cores: 4,
        memory: Some(Bytes(24 * GIB)),
        gpus: Some(0),
        exclusive: false,
        submit: Some(local("2026-06-30T20:00:00")),
        start: local("2026-06-30T22:00:00"),
        end: local("2026-07-01T00:00:00"),
        state: "COMPLETED".into(),
        exit_code: Some("0:0".into()),
    }
}

fn resolve_job(j: &JobInput) -> Result<ResolvedJob, Rejection> {
    resolve(j, &catalog(), &projects(), at(NOW))
}

#[test]
fn a_job_is_priced_at_its_submit_time_and_posted_to_the_month_it_ended() {
    let r = resolve_job(&job()).unwrap();
    // Local New York times; submitted in June: June's card.
    assert_eq!(r.key.started_at, at("2026-07-01T02:00:00Z"));
    assert_eq!(r.rate_card_id, RateCardId(1));
    // 24 GB at 4 GB per core = 6 cores for 2 hours.
    assert_eq!(r.price.charged_cores, dec!(6));
    assert_eq!(r.price.lines[0].quantity, dec!(12));
    assert_eq!(r.total(), dec!(0.12));
    // Ended at local midnight of 1 July: July.
    assert_eq!(r.natural_period.to_string(), "2026-07");
    assert_eq!(r.charge.project_id, ProjectId(11));
    // Without a submit time, the start time picks the card: July's.
    let r = resolve_job(&JobInput {
        submit: None,
        start: local("2026-07-01T00:00:00"),
        end: local("2026-07-01T02:00:00"),
        ..job()
    })
    .unwrap();
    assert_eq!(r.rate_card_id, RateCardId(2));
    assert_eq!(r.total(), dec!(0.24));
}

#[test]
fn every_reason_a_job_cannot_be_charged_is_named() {
    let check = |j: JobInput, kind: RejectKind, says: &str| {
        let e = resolve_job(&j).unwrap_err();
        assert_eq!(e.kind, kind, "{}", e.reason);
        assert!(e.reason.contains(says), "{:?} does not contain {says:?}", e.reason);
    };
    check(
        JobInput {
            cluster: Some("c9".into()),
            ..job()
        },
        RejectKind::UnknownCluster,
        "unknown cluster \"c9\" (known: c1)",
    );
    check(
        JobInput { cluster: None, ..job() },
        RejectKind::UnknownCluster,
        "names no cluster",
    );
    check(
        JobInput {
            project: Some("PZZ9".into()),
            ..job()
        },
        RejectKind::UnknownProject,
        "unknown project \"PZZ9\"",
    );
    check(
        JobInput { project: None, ..job() },
        RejectKind::UnknownProject,
        "names no project",
    );
    check(
        JobInput {
            queue: Some("debug".into()),
            ..job()
        },
        RejectKind::UnknownQueue,
        "unknown queue \"debug\" on cluster c1",
    );
    check(
        JobInput {
            submit: Some(local("2025-12-01T00:00:00")),
            ..job()
        },
        RejectKind::NoRateCard,
        "no rate card for node type \"regular\" on cluster c1 is in force at 2025-12-01 05:00:00 UTC (the job's submit time)",
    );
    check(
        JobInput {
            end: local("2026-06-30T21:00:00"),
            ..job()
        },
        RejectKind::Invalid,
        "before it starts",
    );
    check(
        JobInput {
            submit: Some(local("2026-06-30T23:00:00")),
            ..job()
        },
        RejectKind::Invalid,
        "after it started",
    );
    check(
        JobInput {
            end: Stamp::At(at("2027-01-01T00:00:00Z")),
            ..job()
        },
        RejectKind::Invalid,
        "in the future",
    );
    check(
        JobInput {
            start: Stamp::At(at("1970-01-01T00:00:00Z")),
            submit: None,
            ..job()
        },
        RejectKind::Invalid,
        "before 1990",
    );
    check(
        JobInput { cores: 0, ..job() },
        RejectKind::Invalid,
        "the job holds no cores",
    );
    check(
        JobInput {
            job_id: "a\nb".into(),
            ..job()
        },
        RejectKind::Invalid,
        "control characters",
    );
    check(
        JobInput {
            end: local("2026-03-08T02:30:00"),
            start: local("2026-03-08T01:00:00"),
            submit: None,
            ..job()
        },
        RejectKind::Invalid,
        "does not exist in America/New_York",
    );
}

#[test]
fn a_record_that_names_no_cluster_or_project_is_rejected_with_the_flag_to_give() {
    // The readers apply the importer's --cluster and --default-project
    // (ReadOptions); a record still without them is not guessed.
    let e = resolve_job(&JobInput { cluster: None, ..job() }).unwrap_err();
    assert_eq!(e.kind, RejectKind::UnknownCluster);
    assert!(e.reason.contains("give the importer a default cluster"), "{}", e.reason);
    let e = resolve_job(&JobInput { project: None, ..job() }).unwrap_err();
    assert_eq!(e.kind, RejectKind::UnknownProject);
    assert!(e.reason.contains("give the importer a default project"), "{}", e.reason);
    assert!(e.reason.contains("--project-from account,group"), "{}", e.reason);
}

#[test]
fn a_gpu_job_in_an_unmapped_queue_is_a_gpu_job_and_exclusive_jobs_hold_whole_nodes() {
    let r = resolve_job(&JobInput {
        queue: Some("gpuq".into()),
        gpus: Some(2),
        memory: None,
        ..job()
    })
    .unwrap();
    assert_eq!(r.rate_card_id, RateCardId(3));
    // 4 cores × 2 h × 0.01 + 2 GPUs × 2 h × 0.5
    assert_eq!(r.total(), dec!(2.08));
    let r = resolve_job(&JobInput {
        exclusive: true,
        memory: None,
        ..job()
    })
    .unwrap();
    assert_eq!(r.charge.cores, 28);
    assert_eq!(r.price.lines[0].quantity, dec!(56));
}

fn existing(r: &ResolvedJob, id: i64, revision: i32, kind: RecordKind) -> Existing {
    Existing {
        id: JobRecordId(id),
        job_submitted_at: r.submitted_at,
        revision,
        kind,
        charge_fingerprint: r.charge_fingerprint,
        content_fingerprint: r.content_fingerprint,
        charge: r.charge.clone(),
    }
}

#[test]
fn a_resent_record_is_a_replay_a_revision_or_a_conflict() {
    let first = resolve_job(&job()).unwrap();
    let held = [existing(&first, 1, 1, RecordKind::Original)];
    assert_eq!(classify(&[], &first, false, &Ids), Decision::New);
    assert_eq!(classify(&held, &first, false, &Ids), Decision::Replay);

    // Exit code, state and name do not change the charge.
    let renamed = resolve_job(&JobInput {
        state: "CANCELLED".into(),
        exit_code: Some("0:15".into()),
        job_name: "x".into(),
        ..job()
    })
    .unwrap();
    assert_eq!(renamed.charge_fingerprint, first.charge_fingerprint);
    assert_eq!(
        classify(&held, &renamed, false, &Ids),
        Decision::Revision { revision: 2 }
    );

    // A later end time does.
    let longer = resolve_job(&JobInput {
        end: local("2026-07-01T01:00:00"),
        cores: 8,
        ..job()
    })
    .unwrap();
    match classify(&held, &longer, false, &Ids) {
        Decision::Conflict { differences } => assert_eq!(
            differences,
            ["end 2026-07-01 04:00:00 UTC -> 2026-07-01 05:00:00 UTC", "cores 4 -> 8"]
        ),
        d => panic!("{d:?}"),
    }
    assert_eq!(
        classify(&held, &longer, true, &Ids),
        Decision::Supersede {
            revision: 2,
            replaces: JobRecordId(1)
        }
    );

    // After a supersede, the superseding record is the one compared, and the
    // old content replays as a no-op.
    let held = [
        existing(&first, 1, 1, RecordKind::Original),
        existing(&longer, 5, 2, RecordKind::Supersede),
    ];
    assert_eq!(classify(&held, &first, false, &Ids), Decision::Replay);
    let longer_renamed = resolve_job(&JobInput {
        end: local("2026-07-01T01:00:00"),
        cores: 8,
        user: "bob".into(),
        ..job()
    })
    .unwrap();
    assert_eq!(
        classify(&held, &longer_renamed, false, &Ids),
        Decision::Revision { revision: 3 }
    );
    assert!(matches!(
        classify(&held, &renamed, false, &Ids),
        Decision::Conflict { .. }
    ));
}

#[test]
fn the_planner_decides_each_step_without_the_database() {
    let first = resolve_job(&job()).unwrap();
    let held = [existing(&first, 1, 1, RecordKind::Original)];
    // New, replay (naming the record it repeats), revision.
    assert_eq!(
        decide(&[], &first, false, &Ids),
        Step::Record {
            revision: 1,
            kind: RecordKind::Original,
            replaces: None
        }
    );
    assert_eq!(
        decide(&held, &first, false, &Ids),
        Step::Replay {
            record: Some(JobRecordId(1))
        }
    );
    let renamed = resolve_job(&JobInput {
        job_name: "x".into(),
        ..job()
    })
    .unwrap();
    assert_eq!(
        decide(&held, &renamed, false, &Ids),
        Step::Record {
            revision: 2,
            kind: RecordKind::Revision,
            replaces: None
        }
    );
    // A conflict is a rejection saying what differs and what to do.
    let longer = resolve_job(&JobInput { cores: 8, ..job() }).unwrap();
    match decide(&held, &longer, false, &Ids) {
        Step::Reject(r) => {
            assert_eq!(r.kind, RejectKind::Conflict);
            assert_eq!(
                r.reason,
                "conflicts with the job already recorded (cores 4 -> 8); record it again with --supersede to reverse the old charges and post these"
            );
        }
        s => panic!("{s:?}"),
    }
    assert_eq!(
        decide(&held, &longer, true, &Ids),
        Step::Record {
            revision: 2,
            kind: RecordKind::Supersede,
            replaces: Some(JobRecordId(1))
        }
    );
    // A charge refused to new records: refused for a new run and for a
    // supersede, not for a revision of a run charged before the rule.
    let refused = ResolvedJob {
        refuse_new_charge: Some(Rejection {
            kind: RejectKind::Invalid,
            reason: "no".into(),
        }),
        ..longer.clone()
    };
    assert!(matches!(decide(&[], &refused, false, &Ids), Step::Reject(r) if r.kind == RejectKind::Invalid));
    assert!(matches!(decide(&held, &refused, true, &Ids), Step::Reject(r) if r.kind == RejectKind::Invalid));
    // What else differs from the run recorded is said beside the refusal.
    match decide(&held, &refused, false, &Ids) {
        Step::Reject(r) => assert_eq!(
            r.reason,
            "no; it also differs from the job already recorded (cores 4 -> 8)"
        ),
        s => panic!("{s:?}"),
    }
    let refused_revision = ResolvedJob {
        refuse_new_charge: Some(Rejection {
            kind: RejectKind::Invalid,
            reason: "no".into(),
        }),
        ..renamed.clone()
    };
    assert!(matches!(
        decide(&held, &refused_revision, false, &Ids),
        Step::Record {
            kind: RecordKind::Revision,
            ..
        }
    ));

    // The charges of a record: one entry per priced line, into the month given.
    let month: Month = "2026-08".parse().unwrap();
    let entries = charge_entries(&first, JobRecordId(9), month, true);
    assert_eq!(entries.len(), first.price.lines.len());
    for (e, line) in entries.iter().zip(&first.price.lines) {
        assert_eq!(
            (e.kind, e.job_record_id, e.period, e.late, e.amount),
            (
                EntryKind::Job,
                Some(JobRecordId(9)),
                month.first_day(),
                true,
                line.amount
            )
        );
    }
}

#[test]
fn a_record_without_a_submit_time_is_the_same_run_and_a_different_one_is_a_conflict() {
    let first = resolve_job(&job()).unwrap();
    let held = [existing(&first, 1, 1, RecordKind::Original)];
    let unknown = resolve_job(&JobInput { submit: None, ..job() }).unwrap();
    assert_eq!(unknown.key, first.key, "matched on cluster, job id, index and start");
    assert_eq!(classify(&held, &unknown, false, &Ids), Decision::Replay);
    let other = resolve_job(&JobInput {
        submit: Some(local("2026-06-30T19:00:00")),
        ..job()
    })
    .unwrap();
    match classify(&held, &other, true, &Ids) {
        Decision::Conflict { differences } => assert_eq!(
            differences,
            ["submit 2026-07-01 00:00:00 UTC -> 2026-06-30 23:00:00 UTC, which a supersede cannot change"]
        ),
        d => panic!("{d:?}"),
    }
}

#[test]
fn descriptive_fields_are_kept_to_their_column_widths() {
    let r = resolve_job(&JobInput {
        job_name: "é".repeat(2000),
        user: "u".repeat(300),
        ..job()
    })
    .unwrap();
    assert_eq!((r.job_name.chars().count(), r.user.len()), (1024, 256));
}

#[test]
fn fingerprints_read_what_the_scheduler_said_not_todays_rules() {
    let a = resolve_job(&job()).unwrap();
    let b = resolve_job(&JobInput {
        project: Some("PAS1234".into()),
        ..job()
    })
    .unwrap();
    assert_eq!(
        a.content_fingerprint, b.content_fingerprint,
        "project codes ignore case"
    );
    for changed in [
        JobInput {
            nodes: Some(2),
            ..job()
        },
        JobInput { memory: None, ..job() },
        JobInput { gpus: Some(1), ..job() },
        JobInput {
            queue: Some("gpu".into()),
            ..job()
        },
        JobInput {
            node_type: Some("regular".into()),
            ..job()
        },
        JobInput {
            exclusive: true,
            ..job()
        },
    ] {
        let (charge, _) = fingerprints(&changed, "pas1234", a.charge.ended_at, 0);
        assert_ne!(charge, a.charge_fingerprint, "{changed:?}");
    }
}

#[test]
fn a_job_ending_in_a_closed_month_goes_to_the_first_open_month_late() {
    let m = |s: &str| s.parse::<Month>().unwrap();
    assert_eq!(posting_period(m("2026-03"), None), (m("2026-03"), false));
    assert_eq!(posting_period(m("2026-03"), Some(m("2026-02"))), (m("2026-03"), false));
    assert_eq!(posting_period(m("2026-03"), Some(m("2026-03"))), (m("2026-04"), true));
    assert_eq!(posting_period(m("2025-11"), Some(m("2026-03"))), (m("2026-04"), true));
}

#[test]
fn a_record_without_a_gpu_count_is_not_charged_anew_on_a_gpu_node_type() {
    // No GPU count on a node type without GPUs: 0, and charged.
    let r = resolve_job(&JobInput { gpus: None, ..job() }).unwrap();
    assert_eq!((r.charge.gpus, r.refuse_new_charge.is_none()), (0, true));
    // The same record fingerprints as one that said 0 (records charged before stay replays).
    let said_zero = resolve_job(&job()).unwrap();
    assert_eq!(r.charge_fingerprint, said_zero.charge_fingerprint);
    // On the gpu node type: it resolves, but a new charge is refused with the reason.
    let gpu = JobInput {
        queue: None,
        node_type: Some("gpu".into()),
        gpus: None,
        ..job()
    };
    let r = resolve_job(&gpu).unwrap();
    let refusal = r.refuse_new_charge.expect("refused");
    assert_eq!(refusal.kind, RejectKind::Invalid);
    assert!(refusal.reason.contains("gives no GPU count"), "{}", refusal.reason);
    // Saying 0 GPUs is a count.
    let r = resolve_job(&JobInput { gpus: Some(0), ..gpu }).unwrap();
    assert!(r.refuse_new_charge.is_none());
}

#[test]
fn more_memory_per_node_than_any_node_has_is_not_charged_anew() {
    use crate::domain::units::{PIB, TIB};
    // Issue 13, item 12: `--memory 900PB` on one core was charged 5.6 million.
    let r = resolve_job(&JobInput {
        memory: Some(Bytes(900 * PIB)),
        ..job()
    })
    .unwrap();
    let refusal = r.refuse_new_charge.expect("refused");
    assert_eq!(refusal.kind, RejectKind::Invalid);
    assert_eq!(
        refusal.reason,
        "the job holds 900PB of memory on 1 node(s), more than 64TB per node, which no node has (a unit error?)"
    );
    // 64 TiB on one node is the limit itself; 100 TiB over two nodes is 50 per node.
    for (nodes, memory) in [(1, 64 * TIB), (2, 100 * TIB)] {
        let r = resolve_job(&JobInput {
            nodes: Some(nodes),
            cores: 4 * nodes,
            memory: Some(Bytes(memory)),
            ..job()
        })
        .unwrap();
        assert!(r.refuse_new_charge.is_none(), "{nodes} nodes, {memory} bytes");
    }
    let r = resolve_job(&JobInput {
        nodes: Some(2),
        cores: 8,
        memory: Some(Bytes(128 * TIB + 1)),
        ..job()
    })
    .unwrap();
    assert!(r.refuse_new_charge.is_some());
}

#[test]
fn an_array_index_beyond_the_database_integer_is_invalid() {
    let e = resolve_job(&JobInput {
        array_index: Some(1 << 31),
        ..job()
    })
    .unwrap_err();
    assert_eq!(e.kind, RejectKind::Invalid);
    assert_eq!(e.reason, "array index 2147483648 is out of range (at most 2147483647)");
    assert!(
        resolve_job(&JobInput {
            array_index: Some(i32::MAX as u32),
            ..job()
        })
        .is_ok()
    );
}

#[test]
fn cores_without_a_node_count_fill_whole_nodes_of_the_node_type() {
    // 64 cores on 28-core nodes: 3 nodes, so whole-node charging (R3) applies.
    let r = resolve_job(&JobInput {
        nodes: None,
        cores: 64,
        memory: None,
        ..job()
    })
    .unwrap();
    assert_eq!((r.charge.nodes, r.price.charged_cores), (3, dec!(84)));
    let r = resolve_job(&JobInput {
        nodes: None,
        cores: 28,
        memory: None,
        ..job()
    })
    .unwrap();
    assert_eq!((r.charge.nodes, r.price.charged_cores), (1, dec!(28)));
    // A record that gives no node count is not the same record as one giving 1.
    let one = resolve_job(&JobInput {
        nodes: Some(1),
        cores: 28,
        memory: None,
        ..job()
    })
    .unwrap();
    assert_ne!(r.charge_fingerprint, one.charge_fingerprint);
}

#[test]
fn a_job_id_in_slurms_array_task_form_is_read_as_sacct_reads_it() {
    let split = |id: &str, index: Option<u32>| split_array_task(id, index);
    assert_eq!(split("300_4", None), Ok(Some(("300".to_owned(), 4))));
    // Written as sacct writes it: leading zeros are the index's.
    assert_eq!(split("0300_04", None), Ok(Some(("0300".to_owned(), 4))));
    // Not Slurm's form: kept as the job id it is.
    for id in [
        "300",
        "a_4",
        "300_",
        "_4",
        "300_4_5",
        "300_4.batch",
        "300_+4",
        "123[].pbs",
        "a[4].pbs",
        "123[x].pbs",
        "123[4",
    ] {
        assert_eq!(split(id, None), Ok(None), "{id}");
        assert_eq!(split(id, Some(1)), Ok(None), "{id}");
    }
    assert!(
        split("300_4", Some(4))
            .unwrap_err()
            .contains("and array index 4 is given too")
    );
    assert!(split("300_2147483648", None).unwrap_err().contains("out of range"));
    assert_eq!(split("300_2147483647", None), Ok(Some(("300".to_owned(), 2147483647))));
    // The key a record of the task had before 2026-12-07.
    let task = JobInput {
        job_id: "300".into(),
        array_index: Some(4),
        ..job()
    };
    let before = array_task_as_before(&task).unwrap();
    assert_eq!((before.job_id.as_str(), before.array_index), ("300_4", None));
    assert!(array_task_as_before(&job()).is_none());
    let named = JobInput {
        job_id: "x300".into(),
        ..task
    };
    assert!(array_task_as_before(&named).is_none());

    // PBS: a subjob's `$PBS_JOBID` (`123[4].server`) is the subjob the PBS
    // reader records from the log: job `123[].server`, index 4.
    assert_eq!(split("123[4].pbs", None), Ok(Some(("123[].pbs".to_owned(), 4))));
    assert_eq!(split("123[4]", None), Ok(Some(("123[]".to_owned(), 4))));
    assert!(
        split("123[4].pbs", Some(4))
            .unwrap_err()
            .contains("give the array's job id (123[].pbs) with the task's index")
    );
    assert_eq!(
        task_of("123[4].pbs", None),
        (std::borrow::Cow::Borrowed("123[].pbs"), Some(4))
    );
    assert_eq!(task_of("123[].pbs", Some(4)), task_of("123[4].pbs", None));
    let subjob = JobInput {
        job_id: "123[].pbs".into(),
        array_index: Some(4),
        ..job()
    };
    let before = array_task_as_before(&subjob).unwrap();
    assert_eq!((before.job_id.as_str(), before.array_index), ("123[4].pbs", None));
}

#[test]
fn a_job_id_with_blanks_around_it_is_refused() {
    for id in [" 1001", "1001 ", "\u{a0}1001"] {
        let r = resolve_job(&JobInput {
            job_id: id.into(),
            ..job()
        })
        .unwrap_err();
        assert_eq!(r.kind, RejectKind::Invalid, "{id:?}");
        assert!(r.reason.contains("has blanks around it"), "{}", r.reason);
    }
    assert!(
        resolve_job(&JobInput {
            job_id: "1001".into(),
            ..job()
        })
        .is_ok()
    );
}

/// A job's time suspended is not charged (docs/rules.md R1): said as
/// seconds (sacct `Suspended`) or as the time it ran (`Elapsed`), measured
/// between instants, so a daylight-saving change is no suspension.
#[test]
fn time_suspended_is_not_charged_and_fingerprinted_only_when_there_is_some() {
    let plain = resolve_job(&job()).unwrap();
    let with = |suspension| resolve_job(&JobInput { suspension, ..job() });
    // 2 hours of 6 cores' worth, 30 minutes of them suspended: 9 core-hours.
    let said = with(Suspension::Seconds(1800)).unwrap();
    assert_eq!(said.price.lines[0].quantity, dec!(9));
    assert_eq!(said.charge.suspended_seconds, 1800);
    assert_ne!(said.charge_fingerprint, plain.charge_fingerprint);
    let slurm = |suspended, elapsed| Suspension::Slurm { suspended, elapsed };
    for same in [
        slurm(Some(1800), Some(5400)),
        slurm(None, Some(5400)),
        slurm(Some(1800), None),
    ] {
        let r = with(same).unwrap();
        assert_eq!(r.price, said.price, "{same:?}");
        assert_eq!(r.charge_fingerprint, said.charge_fingerprint, "{same:?}");
    }
    // Nothing suspended: charged and fingerprinted as before. Slurm's
    // `Suspended` longer than the run and an `Elapsed` of 0 (what Slurm
    // 22.05.8 writes for a job resized while suspended) say nothing.
    for none in [
        Suspension::Seconds(0),
        slurm(None, Some(7200)),
        slurm(None, Some(7260)),
        slurm(Some(0), Some(3600)),
        slurm(Some(1_796_640_561), Some(0)),
        slurm(None, Some(0)),
        slurm(None, None),
    ] {
        let r = with(none).unwrap();
        assert_eq!((r.charge.suspended_seconds, r.total()), (0, plain.total()), "{none:?}");
        assert_eq!(r.charge_fingerprint, plain.charge_fingerprint, "{none:?}");
    }
    let longer = with(Suspension::Seconds(7201)).unwrap_err();
    assert_eq!(longer.kind, RejectKind::Invalid);
    assert!(
        longer.reason.contains("suspended 7201 s, longer than it ran"),
        "{}",
        longer.reason
    );
    // New York's clocks went from 02:00 to 03:00 on 8 March: 01:30 to 03:30
    // local is one hour, as Elapsed says; nothing suspended.
    let dst = resolve_job(&JobInput {
        submit: None,
        start: local("2026-03-08T01:30:00"),
        end: local("2026-03-08T03:30:00"),
        suspension: slurm(None, Some(3600)),
        ..job()
    })
    .unwrap();
    assert_eq!(dst.charge.suspended_seconds, 0);
    assert_eq!(dst.price.lines[0].quantity, dec!(6));
    // A conflict with a run recorded whole names the seconds.
    let step = decide(&[existing(&plain, 1, 1, RecordKind::Original)], &said, false, &Ids);
    match step {
        Step::Reject(r) => assert!(r.reason.contains("suspended 0 s -> 1800 s"), "{}", r.reason),
        other => panic!("{other:?}"),
    }
}
