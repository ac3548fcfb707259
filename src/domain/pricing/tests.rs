//! The center's own examples, table-driven edge cases, and properties of the
//! job pricing rules.

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;
use num_bigint::BigInt;
use num_rational::BigRational;
use proptest::prelude::*;
use rust_decimal::Decimal;
use rust_decimal::dec;

use super::*;
use crate::domain::period::{Month, local_to_utc};
use crate::domain::request::parse_pbs;
use crate::domain::rules::{Dated, in_force_at, pricing_instant};
use crate::domain::units::{GIB, Metric};

const REGULAR: RateCard = RateCard {
    core_hour: dec!(0.01),
    gpu_hour: dec!(0),
    memory_per_core: Bytes(4 * GIB),
    cores_per_node: 28,
};

const GPU: RateCard = RateCard {
    core_hour: dec!(0.015),
    gpu_hour: dec!(0.50),
    memory_per_core: Bytes(4 * GIB),
    cores_per_node: 40,
};

fn shape(nodes: u32, cores: u32, memory_gib: Option<u64>, gpus: u32) -> JobShape {
    JobShape {
        nodes,
        cores,
        memory: memory_gib.map(|g| Bytes(g * GIB)),
        gpus,
    }
}

/// From a PBS request string, on the card's node size.
fn pbs(request: &str, card: &RateCard) -> JobShape {
    parse_pbs(request).unwrap().shape(card.cores_per_node).unwrap()
}

/// What a case expects; `None` fields are not checked.
struct Expect {
    effective: Option<&'static str>,
    charged: &'static str,
    basis: ChargeBasis,
    core_hours: &'static str,
    gpu_hours: Option<&'static str>,
    total: &'static str,
}

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn check(name: &str, shape: JobShape, wall_seconds: i64, card: &RateCard, e: Expect) {
    let p = price_job(&shape, wall_seconds, card).unwrap_or_else(|err| panic!("{name}: {err}"));
    assert_eq!(p.effective_cores, e.effective.map(d), "{name}: effective cores");
    assert_eq!(p.charged_cores, d(e.charged), "{name}: charged cores");
    assert_eq!(p.basis, e.basis, "{name}: basis");
    assert_eq!(p.lines[0].metric, Metric::CoreHours, "{name}");
    assert_eq!(p.lines[0].quantity, d(e.core_hours), "{name}: core-hours");
    let gpu = p
        .lines
        .iter()
        .find(|l| l.metric == Metric::GpuHours)
        .map(|l| l.quantity);
    assert_eq!(gpu, e.gpu_hours.map(d), "{name}: gpu-hours");
    assert_eq!(p.total(), d(e.total), "{name}: total");
    for (l, want) in p.lines.iter().zip(exact(&shape, wall_seconds, card)) {
        assert_eq!(l.amount_exact, trunc12(&want), "{name}: the exact amount");
        assert_eq!(l.amount, cents(&want), "{name}: rounded once");
    }
}

/// Charging rules 2 by big rationals, independently of `price_job`: the
/// exact value of each line (core-hours, then GPU-hours when held).
fn exact(s: &JobShape, wall: i64, card: &RateCard) -> Vec<BigRational> {
    let r = |d: Decimal| -> BigRational {
        let m = BigInt::from(d.mantissa());
        BigRational::new(m, BigInt::from(10).pow(d.scale()))
    };
    let int = |n: u64| BigRational::from_integer(BigInt::from(n));
    let cores = int(s.cores.into());
    let charged = if s.nodes > 1 {
        int(u64::from(s.nodes) * u64::from(card.cores_per_node)).max(cores)
    } else {
        let node = int(card.cores_per_node.max(s.cores).into());
        match s.memory {
            Some(m) => (int(m.0) / int(card.memory_per_core.0)).max(cores).min(node),
            None => cores,
        }
    };
    let hours = int(wall as u64) / int(3600);
    let mut lines = vec![charged * hours.clone() * r(card.core_hour)];
    if s.gpus > 0 {
        lines.push(int(s.gpus.into()) * hours * r(card.gpu_hour));
    }
    lines
}

fn to_decimal(x: &BigRational, places: u32) -> Decimal {
    let scaled = x * BigRational::from_integer(BigInt::from(10).pow(places));
    let i: i128 = scaled.to_integer().try_into().unwrap();
    Decimal::from_i128_with_scale(i, places)
}

/// Truncated to 12 places.
fn trunc12(x: &BigRational) -> Decimal {
    to_decimal(x, 12)
}

/// Rounded once to cents, half away from zero (x >= 0).
fn cents(x: &BigRational) -> Decimal {
    let half = BigRational::new(BigInt::from(1), BigInt::from(200));
    to_decimal(&(x + half), 2)
}

#[test]
fn version_2_rounds_the_exact_value_where_version_1_lost_a_cent() {
    // The kind of job issue 16 found: 4 nodes, 112 cores, 0.045 per
    // core-hour, for 536,125 s: exactly 750.575, a tie, so 750.58.
    let card = RateCard {
        core_hour: dec!(0.045),
        gpu_hour: dec!(0),
        memory_per_core: Bytes(4 << 30),
        cores_per_node: 28,
    };
    let s = JobShape {
        nodes: 4,
        cores: 112,
        memory: None,
        gpus: 0,
    };
    let v2 = price_job(&s, 536_125, &card).unwrap();
    assert_eq!(
        (v2.lines[0].amount_exact, v2.lines[0].amount),
        (dec!(750.575000000000), dec!(750.58))
    );
    assert_eq!(v2.lines[0].quantity, dec!(16679.444444444444));
    // Version 1 rounded the quantity first: 16679.444444444444 × 0.045 =
    // 750.57499999999998, posted as 750.57.
    let v1 = price_job_by(ChargingRules::V1, &s, 536_125, &card).unwrap();
    assert_eq!(v1.lines[0].amount_exact, dec!(750.574999999999980));
    assert_eq!(v1.lines[0].amount, dec!(750.57));
}

#[test]
fn a_single_node_job_is_never_charged_more_than_a_whole_node() {
    // 21.5 GiB on a 2-core node whose card says 4 GiB per core: version 1
    // charged 5.375 cores; version 2 charges the node's 2.
    let card = RateCard {
        core_hour: dec!(1),
        gpu_hour: dec!(0),
        memory_per_core: Bytes(4 << 30),
        cores_per_node: 2,
    };
    let s = JobShape {
        nodes: 1,
        cores: 1,
        memory: Some(Bytes(43 << 29)), // 21.5 GiB
        gpus: 0,
    };
    let v2 = price_job(&s, 3600, &card).unwrap();
    assert_eq!(
        (v2.charged_cores, v2.basis),
        (dec!(2.000000000000), ChargeBasis::WholeNode)
    );
    assert_eq!(v2.total(), dec!(2.00));
    let v1 = price_job_by(ChargingRules::V1, &s, 3600, &card).unwrap();
    assert_eq!(
        (v1.charged_cores, v1.basis),
        (dec!(5.375000000000), ChargeBasis::Memory)
    );
    // Below the cap, memory still decides; a job holding more cores than
    // the card's node (a stale card) is charged its cores.
    let s = JobShape {
        memory: Some(Bytes(6 << 30)),
        ..s
    };
    assert_eq!(price_job(&s, 3600, &card).unwrap().basis, ChargeBasis::Memory);
    let s = JobShape {
        cores: 8,
        memory: Some(Bytes(64 << 30)),
        ..s
    };
    let p = price_job(&s, 3600, &card).unwrap();
    assert_eq!(
        (p.charged_cores, p.basis),
        (dec!(8.000000000000), ChargeBasis::WholeNode)
    );
}

#[test]
fn the_policys_own_examples() {
    // R1: 4 cores for 2 hours = 8 core-hours.
    check(
        "R1",
        shape(1, 4, None, 0),
        7200,
        &REGULAR,
        Expect {
            effective: None,
            charged: "4",
            basis: ChargeBasis::Cores,
            core_hours: "8",
            gpu_hours: None,
            total: "0.08",
        },
    );
    // R2: nodes=1:ppn=3 -> 3 cores.
    check(
        "R2 ppn",
        pbs("nodes=1:ppn=3", &REGULAR),
        3600,
        &REGULAR,
        Expect {
            effective: None,
            charged: "3",
            basis: ChargeBasis::Cores,
            core_hours: "3",
            gpu_hours: None,
            total: "0.03",
        },
    );
    // R2: nodes=1:ppn=1,mem=12GB at 4 GB per core -> 3 cores.
    check(
        "R2 mem",
        pbs("nodes=1:ppn=1,mem=12GB", &REGULAR),
        3600,
        &REGULAR,
        Expect {
            effective: Some("3"),
            charged: "3",
            basis: ChargeBasis::Memory,
            core_hours: "3",
            gpu_hours: None,
            total: "0.03",
        },
    );
    // R5: nodes=1:ppn=8:gpus=2 for 1 hour -> 8 core-hours + 2 gpu-hours.
    check(
        "R5",
        pbs("nodes=1:ppn=8:gpus=2", &GPU),
        3600,
        &GPU,
        Expect {
            effective: None,
            charged: "8",
            basis: ChargeBasis::Cores,
            core_hours: "8",
            gpu_hours: Some("2"),
            total: "1.12", // 8 × 0.015 + 2 × 0.50
        },
    );
}

#[test]
fn rules_and_their_edges() {
    let cases: Vec<(&str, JobShape, i64, &RateCard, Expect)> = vec![
        (
            "effective cores equal to requested",
            shape(1, 4, Some(16), 0),
            3600,
            &REGULAR,
            Expect {
                effective: Some("4"),
                charged: "4",
                basis: ChargeBasis::Cores,
                core_hours: "4",
                gpu_hours: None,
                total: "0.04",
            },
        ),
        (
            "effective cores smaller than requested",
            shape(1, 8, Some(4), 0),
            3600,
            &REGULAR,
            Expect {
                effective: Some("1"),
                charged: "8",
                basis: ChargeBasis::Cores,
                core_hours: "8",
                gpu_hours: None,
                total: "0.08",
            },
        ),
        (
            "fractional effective cores are not rounded up",
            shape(1, 1, Some(10), 0),
            3600,
            &REGULAR,
            Expect {
                effective: Some("2.5"),
                charged: "2.5",
                basis: ChargeBasis::Memory,
                core_hours: "2.5",
                gpu_hours: None,
                total: "0.03", // 0.025 rounds half away from zero
            },
        ),
        (
            "multi-node ignores memory and ppn",
            pbs("nodes=2:ppn=1,mem=500GB", &REGULAR),
            3600,
            &REGULAR,
            Expect {
                effective: Some("125"),
                charged: "56",
                basis: ChargeBasis::WholeNodes,
                core_hours: "56",
                gpu_hours: None,
                total: "0.56",
            },
        ),
        (
            "multi-node never charges fewer cores than held",
            shape(2, 64, None, 0),
            3600,
            &REGULAR,
            Expect {
                effective: None,
                charged: "64",
                basis: ChargeBasis::WholeNodes,
                core_hours: "64",
                gpu_hours: None,
                total: "0.64",
            },
        ),
        (
            "multi-node GPUs are charged as allocated",
            shape(2, 16, None, 3),
            1800,
            &GPU,
            Expect {
                effective: None,
                charged: "80",
                basis: ChargeBasis::WholeNodes,
                core_hours: "40",
                gpu_hours: Some("1.5"),
                total: "1.35", // 40 × 0.015 + 1.5 × 0.50
            },
        ),
        (
            "zero-length job",
            shape(1, 4, Some(64), 1),
            0,
            &GPU,
            Expect {
                effective: Some("16"),
                charged: "16",
                basis: ChargeBasis::Memory,
                core_hours: "0",
                gpu_hours: Some("0"),
                total: "0",
            },
        ),
        (
            "one second",
            shape(1, 1, None, 0),
            1,
            &REGULAR,
            Expect {
                effective: None,
                charged: "1",
                basis: ChargeBasis::Cores,
                core_hours: "0.000277777778",
                gpu_hours: None,
                total: "0",
            },
        ),
        (
            "memory with a non-terminating quotient",
            pbs("nodes=1:ppn=1,mem=1993mb", &REGULAR),
            3600,
            &REGULAR,
            Expect {
                effective: Some("0.486572265625"),
                charged: "1",
                basis: ChargeBasis::Cores,
                core_hours: "1",
                gpu_hours: None,
                total: "0.01",
            },
        ),
        (
            "pmem counts per core",
            pbs("nodes=1:ppn=2,pmem=8gb", &REGULAR),
            7200,
            &REGULAR,
            Expect {
                effective: Some("4"),
                charged: "4",
                basis: ChargeBasis::Memory,
                core_hours: "8",
                gpu_hours: None,
                total: "0.08",
            },
        ),
        (
            "long job, odd seconds",
            shape(1, 3, None, 0),
            100_001,
            &REGULAR,
            Expect {
                effective: None,
                charged: "3",
                basis: ChargeBasis::Cores,
                core_hours: "83.334166666667",
                gpu_hours: None,
                total: "0.83",
            },
        ),
    ];
    for (name, s, wall, card, e) in cases {
        check(name, s, wall, card, e);
    }
}

#[test]
fn bad_jobs_are_refused_with_the_reason() {
    let e = |s: JobShape, wall| price_job(&s, wall, &REGULAR).unwrap_err().to_string();
    assert_eq!(
        e(shape(1, 1, None, 0), -5),
        "the job ends before it starts (-5 s of wall time)"
    );
    assert!(e(shape(1, 1, None, 0), 400 * 86400).contains("more than a year"));
    assert_eq!(e(shape(0, 1, None, 0), 10), "the job holds no nodes");
    assert_eq!(e(shape(1, 0, None, 0), 10), "the job holds no cores");
    assert!(e(shape(1, 1, None, 20_000_000), 10).contains("GPUs, more than the limit"));
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[test]
fn a_job_submitted_before_a_rate_change_is_priced_at_the_old_rate() {
    let cards = [
        Dated {
            valid_from: at("2026-01-01T00:00:00Z"),
            valid_until: Some(at("2026-07-01T00:00:00Z")),
            value: REGULAR,
        },
        Dated {
            valid_from: at("2026-07-01T00:00:00Z"),
            valid_until: None,
            value: RateCard {
                core_hour: dec!(0.02),
                ..REGULAR
            },
        },
    ];
    let price_at = |submit: Option<&str>, start: &str, end: &str| {
        let (start, end) = (at(start), at(end));
        let card = in_force_at(&cards, pricing_instant(submit.map(at), start)).unwrap();
        price_job(&shape(1, 10, None, 0), (end - start).num_seconds(), &card.value)
            .unwrap()
            .total()
    };
    // Submitted in June, ran across the change: June's rate, 10 core-hours.
    assert_eq!(
        price_at(
            Some("2026-06-30T23:00:00Z"),
            "2026-06-30T23:30:00Z",
            "2026-07-01T00:30:00Z"
        ),
        dec!(0.10)
    );
    // Submit time unknown: the start time decides.
    assert_eq!(
        price_at(None, "2026-07-01T00:00:00Z", "2026-07-01T01:00:00Z"),
        dec!(0.20)
    );
}

#[test]
fn wall_time_across_a_dst_change_is_real_elapsed_time() {
    let ams: Tz = "Europe/Amsterdam".parse().unwrap();
    let local = |s: &str| local_to_utc(NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap(), ams).unwrap();
    // Spring: 01:30 -> 03:30 local is one hour.
    let wall = (local("2026-03-29T03:30:00") - local("2026-03-29T01:30:00")).num_seconds();
    assert_eq!(wall, 3600);
    let p = price_job(&shape(1, 4, None, 0), wall, &REGULAR).unwrap();
    assert_eq!(p.lines[0].quantity, dec!(4));
    // Autumn: 01:30 -> 03:30 local is three hours.
    let wall = (local("2026-10-25T03:30:00") - local("2026-10-25T01:30:00")).num_seconds();
    assert_eq!(wall, 3 * 3600);
}

#[test]
fn a_job_ending_at_midnight_of_the_first_belongs_to_the_new_month() {
    let ny: Tz = "America/New_York".parse().unwrap();
    // 2026-05-01T00:00 in New York is 04:00Z.
    assert_eq!(Month::of_instant(at("2026-05-01T04:00:00Z"), ny).to_string(), "2026-05");
    assert_eq!(Month::of_instant(at("2026-05-01T03:59:59Z"), ny).to_string(), "2026-04");
}

fn any_card() -> impl Strategy<Value = RateCard> {
    (1u32..=9999, 0u32..=99_999, 1u64..=64, 1u32..=256).prop_map(|(core, gpu, mem_gib, cpn)| RateCard {
        core_hour: Decimal::new(core.into(), 4),
        gpu_hour: Decimal::new(gpu.into(), 4),
        memory_per_core: Bytes(mem_gib * GIB / 2),
        cores_per_node: cpn,
    })
}

fn any_shape() -> impl Strategy<Value = JobShape> {
    (
        1u32..=64,
        1u32..=4096,
        proptest::option::of(1u64..=(4u64 << 40)),
        0u32..=16,
    )
        .prop_map(|(nodes, cores, mem, gpus)| JobShape {
            nodes,
            cores,
            memory: mem.map(Bytes),
            gpus,
        })
}

fn core_hours(s: &JobShape, wall: i64, card: &RateCard) -> Decimal {
    price_job(s, wall, card).unwrap().lines[0].quantity
}

proptest! {
    #[test]
    fn charged_cores_are_never_fewer_than_requested(s in any_shape(), card in any_card(), wall in 0i64..=86400 * 30) {
        let p = price_job(&s, wall, &card).unwrap();
        prop_assert!(p.charged_cores >= Decimal::from(s.cores));
    }

    #[test]
    fn the_charge_grows_with_duration(s in any_shape(), card in any_card(), a in 0i64..=86400 * 30, b in 0i64..=86400 * 30) {
        let (short, long) = (a.min(b), a.max(b));
        prop_assert!(price_job(&s, short, &card).unwrap().total() <= price_job(&s, long, &card).unwrap().total());
        prop_assert!(core_hours(&s, short, &card) <= core_hours(&s, long, &card));
    }

    #[test]
    fn the_charge_grows_with_memory(s in any_shape(), card in any_card(), wall in 0i64..=86400 * 30, a in 0u64..=(1 << 42), b in 0u64..=(1 << 42)) {
        let less = JobShape { memory: Some(Bytes(a.min(b))), ..s };
        let more = JobShape { memory: Some(Bytes(a.max(b))), ..s };
        prop_assert!(core_hours(&less, wall, &card) <= core_hours(&more, wall, &card));
        prop_assert!(price_job(&less, wall, &card).unwrap().total() <= price_job(&more, wall, &card).unwrap().total());
    }

    #[test]
    fn a_multi_node_charge_ignores_ppn_and_memory(
        nodes in 2u32..=64, card in any_card(), wall in 0i64..=86400 * 30,
        ppn_a in 1u32..=256, ppn_b in 1u32..=256, mem_a in proptest::option::of(1u64..=(1 << 42)), mem_b in proptest::option::of(1u64..=(1 << 42)),
    ) {
        let a = JobShape { nodes, cores: nodes * ppn_a.min(card.cores_per_node), memory: mem_a.map(Bytes), gpus: 0 };
        let b = JobShape { nodes, cores: nodes * ppn_b.min(card.cores_per_node), memory: mem_b.map(Bytes), gpus: 0 };
        prop_assert_eq!(price_job(&a, wall, &card).unwrap().lines, price_job(&b, wall, &card).unwrap().lines);
    }

    #[test]
    fn every_line_is_the_exact_value_rounded_once(s in any_shape(), card in any_card(), wall in 0i64..=86400 * 366) {
        // Charging rules 2 against big rationals: memory-bound, whole-node,
        // capped and GPU jobs alike (new charges are of version 3, which
        // prices as version 2 does, and version 2 still prices the same).
        let p = price_job(&s, wall, &card).unwrap();
        prop_assert_eq!(p.rules, ChargingRules::V3);
        prop_assert_eq!(&price_job_by(ChargingRules::V2, &s, wall, &card).unwrap().lines, &p.lines);
        let want = exact(&s, wall, &card);
        prop_assert_eq!(p.lines.len(), want.len());
        for (l, x) in p.lines.iter().zip(&want) {
            prop_assert_eq!(l.amount_exact, trunc12(x));
            prop_assert_eq!(l.amount, cents(x));
            prop_assert_eq!(l.amount.scale(), 2);
        }
        // The cap: a single-node job is never charged more than a whole node.
        if s.nodes == 1 {
            prop_assert!(p.charged_cores <= Decimal::from(card.cores_per_node.max(s.cores)));
        }
    }

    #[test]
    fn ties_and_near_ties_round_half_away_from_zero(
        cores in 1u32..=64, tenths in 1u64..=20_000, rate in prop::sample::select(vec![dec!(0.009), dec!(0.045), dec!(0.0125), dec!(0.018), dec!(0.0009)]),
        nudge in -2i64..=2, mem in proptest::option::of(1u64..=(1 << 40)),
    ) {
        // Seconds chosen so that cores × seconds × rate ÷ 3600 lands on or
        // next to a half cent.
        let card = RateCard { core_hour: rate, gpu_hour: dec!(0), memory_per_core: Bytes(3 << 30), cores_per_node: 64 };
        let wall = (tenths * 200) as i64 + nudge;
        let s = JobShape { nodes: 1, cores, memory: mem.map(Bytes), gpus: 0 };
        let p = price_job(&s, wall.max(0), &card).unwrap();
        let x = &exact(&s, wall.max(0), &card)[0];
        prop_assert_eq!(p.lines[0].amount, cents(x));
    }

    #[test]
    fn version_1_lines_are_the_rounded_quantity_times_the_rate(s in any_shape(), card in any_card(), wall in 0i64..=86400 * 366) {
        for l in price_job_by(ChargingRules::V1, &s, wall, &card).unwrap().lines {
            prop_assert_eq!(l.quantity * l.unit_rate, l.amount_exact);
            prop_assert_eq!(l.amount.scale(), 2);
            let diff = (l.amount - l.amount_exact).abs();
            prop_assert!(diff <= dec!(0.005));
            // Half away from zero: an exact half cent always rounds up in magnitude.
            if diff == dec!(0.005) {
                prop_assert!(l.amount.abs() > l.amount_exact.abs());
            }
        }
    }
}
