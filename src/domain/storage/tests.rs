//! Storage pricing (docs/rules.md R6, D7) against hand-computed amounts.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use rust_decimal::dec;

use super::*;
use crate::domain::rules::Dated;
use crate::domain::units::round_money;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn quota(from: &str, tb: Decimal) -> QuotaChange {
    QuotaChange {
        effective_from: at(from),
        quota_tb: tb,
    }
}

fn rate(key: u8, from: &str, until: Option<&str>, price: Decimal) -> Dated<StoragePrice<u8>> {
    Dated {
        valid_from: at(from),
        valid_until: until.map(at),
        value: StoragePrice {
            key,
            tb_month: price,
            class: None,
        },
    }
}

/// $5 per TB-month since 2020.
fn flat() -> Vec<Dated<StoragePrice<u8>>> {
    vec![rate(1, "2020-01-01T00:00:00Z", None, dec!(5))]
}

struct Expect {
    /// (rate key, TB-days, TB-months, amount) per line.
    lines: &'static [(u8, &'static str, &'static str, &'static str)],
    /// (first day, days, quota) per segment, over all lines.
    segments: &'static [(&'static str, u32, &'static str)],
    total: &'static str,
}

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn check(name: &str, month: &str, tz: Tz, quotas: &[QuotaChange], rates: &[Dated<StoragePrice<u8>>], e: Expect) {
    let month: Month = month.parse().unwrap();
    let c = price_storage(month, tz, quotas, &[], rates).unwrap_or_else(|err| panic!("{name}: {err}"));
    let lines: Vec<(u8, Decimal, Decimal, Decimal)> = c
        .lines
        .iter()
        .map(|l| (l.rate_key, l.tb_days, l.priced.quantity, l.priced.amount))
        .collect();
    let want: Vec<(u8, Decimal, Decimal, Decimal)> =
        e.lines.iter().map(|&(k, td, tm, a)| (k, d(td), d(tm), d(a))).collect();
    assert_eq!(lines, want, "{name}: lines");
    let segs: Vec<(String, u32, Decimal)> = c
        .lines
        .iter()
        .flat_map(|l| &l.segments)
        .map(|s| (s.first_day.to_string(), s.days, s.quota_tb))
        .collect();
    let want: Vec<(String, u32, Decimal)> = e.segments.iter().map(|&(f, n, q)| (f.to_owned(), n, d(q))).collect();
    assert_eq!(segs, want, "{name}: segments");
    assert_eq!(c.total(), d(e.total), "{name}: total");
    assert_eq!(c.days_in_month, month.days());
    for l in &c.lines {
        // Charging rules 2: the exact TB-days × rate ÷ days, truncated to 12
        // places (amount_exact ≤ exact < amount_exact + 1e-12), rounded once.
        let (x, days) = (l.priced.amount_exact, Decimal::from(c.days_in_month));
        let exact_times_days = l.tb_days * l.priced.unit_rate;
        assert!(
            x * days <= exact_times_days && exact_times_days < (x + dec!(0.000000000001)) * days,
            "{name}: {x} is the exact amount truncated"
        );
        assert_eq!(round_money(x), l.priced.amount, "{name}: rounded once");
        let seg_days: Decimal = l.segments.iter().map(|s| s.quota_tb * Decimal::from(s.days)).sum();
        assert_eq!(seg_days, l.tb_days, "{name}: segments add up");
    }
}

#[test]
fn a_constant_quota_costs_exactly_quota_times_rate_in_months_of_every_length() {
    for (month, days) in [("2026-02", 28), ("2024-02", 29), ("2026-04", 30), ("2026-03", 31)] {
        let c = price_storage(
            month.parse().unwrap(),
            Tz::UTC,
            &[quota("2020-01-01T00:00:00Z", dec!(10))],
            &[],
            &flat(),
        )
        .unwrap();
        assert_eq!(c.lines.len(), 1);
        assert_eq!(c.lines[0].tb_days, Decimal::from(10 * days), "{month}");
        assert_eq!(c.lines[0].priced.quantity, dec!(10), "{month}");
        assert_eq!(c.total(), dec!(50.00), "{month}");
    }
}

#[test]
fn quota_histories() {
    let utc = Tz::UTC;
    check(
        "project starts mid-month",
        "2026-04",
        utc,
        &[quota("2026-04-16T09:00:00Z", dec!(10))],
        &flat(),
        Expect {
            lines: &[(1, "150", "5", "25.00")],
            segments: &[("2026-04-16", 15, "10")],
            total: "25.00",
        },
    );
    check(
        "project ends mid-month (quota set to 0)",
        "2026-04",
        utc,
        &[
            quota("2026-01-01T00:00:00Z", dec!(10)),
            quota("2026-04-11T00:00:00Z", dec!(0)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "100", "3.333333333333", "16.67")],
            segments: &[("2026-04-01", 10, "10")],
            total: "16.67",
        },
    );
    check(
        "a change at 00:00 of the first counts for the whole month",
        "2026-04",
        utc,
        &[
            quota("2026-01-01T00:00:00Z", dec!(10)),
            quota("2026-04-01T00:00:00Z", dec!(20)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "600", "20", "100.00")],
            segments: &[("2026-04-01", 30, "20")],
            total: "100.00",
        },
    );
    check(
        "a change at 00:00 of the next month does not count",
        "2026-04",
        utc,
        &[
            quota("2026-01-01T00:00:00Z", dec!(10)),
            quota("2026-05-01T00:00:00Z", dec!(20)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "300", "10", "50.00")],
            segments: &[("2026-04-01", 30, "10")],
            total: "50.00",
        },
    );
    check(
        "a change during the last day counts for that day",
        "2026-04",
        utc,
        &[
            quota("2026-01-01T00:00:00Z", dec!(10)),
            quota("2026-04-30T23:59:59Z", dec!(40)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "330", "11", "55.00")],
            segments: &[("2026-04-01", 29, "10"), ("2026-04-30", 1, "40")],
            total: "55.00",
        },
    );
    check(
        "several changes in one day: the last one holds at the end of the day",
        "2026-04",
        utc,
        &[
            quota("2026-01-01T00:00:00Z", dec!(10)),
            quota("2026-04-10T08:00:00Z", dec!(100)),
            quota("2026-04-10T12:00:00Z", dec!(0)),
            quota("2026-04-10T18:00:00Z", dec!(4)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "174", "5.8", "29.00")],
            segments: &[("2026-04-01", 9, "10"), ("2026-04-10", 21, "4")],
            total: "29.00",
        },
    );
    check(
        "fractional quotas",
        "2026-02",
        utc,
        &[quota("2026-01-01T00:00:00Z", dec!(0.5))],
        &[rate(1, "2020-01-01T00:00:00Z", None, dec!(7.25))],
        Expect {
            lines: &[(1, "14", "0.5", "3.63")],
            segments: &[("2026-02-01", 28, "0.5")],
            total: "3.63",
        },
    );
}

#[test]
fn a_storage_rate_change_mid_month_gives_one_line_per_rate() {
    check(
        "rate change on the 16th of a 31-day month",
        "2026-03",
        Tz::UTC,
        &[quota("2026-01-01T00:00:00Z", dec!(10))],
        &[
            rate(1, "2020-01-01T00:00:00Z", Some("2026-03-16T00:00:00Z"), dec!(5)),
            rate(2, "2026-03-16T00:00:00Z", None, dec!(6.20)),
        ],
        Expect {
            // 15 days × 10 TB / 31 at $5; 16 days × 10 TB / 31 at $6.20.
            lines: &[
                (1, "150", "4.838709677419", "24.19"),
                (2, "160", "5.161290322581", "32.00"),
            ],
            segments: &[("2026-03-01", 15, "10"), ("2026-03-16", 16, "10")],
            total: "56.19",
        },
    );
}

#[test]
fn days_are_local_days_of_the_billing_time_zone() {
    let ny: Tz = "America/New_York".parse().unwrap();
    // March 2026 in New York has the 23-hour day of 8 March. A change at
    // 03:30Z on 1 April is still 31 March locally: it counts for that day.
    check(
        "DST month, change late on the last local day",
        "2026-03",
        ny,
        &[
            quota("2026-01-01T05:00:00Z", dec!(10)),
            quota("2026-04-01T03:30:00Z", dec!(41)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "341", "11", "55.00")],
            segments: &[("2026-03-01", 30, "10"), ("2026-03-31", 1, "41")],
            total: "55.00",
        },
    );
    // The same change read in UTC belongs to April.
    check(
        "the same history in UTC",
        "2026-03",
        Tz::UTC,
        &[
            quota("2026-01-01T05:00:00Z", dec!(10)),
            quota("2026-04-01T03:30:00Z", dec!(41)),
        ],
        &flat(),
        Expect {
            lines: &[(1, "310", "10", "50.00")],
            segments: &[("2026-03-01", 31, "10")],
            total: "50.00",
        },
    );
    // November 2026 has the 25-hour day of 1 November; days still count once each.
    check(
        "autumn DST month",
        "2026-11",
        ny,
        &[quota("2026-10-01T04:00:00Z", dec!(3))],
        &flat(),
        Expect {
            lines: &[(1, "90", "3", "15.00")],
            segments: &[("2026-11-01", 30, "3")],
            total: "15.00",
        },
    );
}

#[test]
fn no_quota_means_no_charge_and_a_quota_without_a_rate_is_an_error() {
    let c = price_storage("2026-04".parse().unwrap(), Tz::UTC, &[], &[], &flat()).unwrap();
    assert!(c.lines.is_empty());
    let no_rates: &[Dated<StoragePrice<u8>>] = &[];
    let c = price_storage(
        "2026-04".parse().unwrap(),
        Tz::UTC,
        &[quota("2026-01-01T00:00:00Z", dec!(0))],
        &[],
        no_rates,
    )
    .unwrap();
    assert!(c.lines.is_empty(), "a zero quota needs no rate");
    let err = price_storage(
        "2026-04".parse().unwrap(),
        Tz::UTC,
        &[quota("2026-01-01T00:00:00Z", dec!(2))],
        &[],
        &[rate(1, "2026-04-10T00:00:00Z", None, dec!(5))],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a quota of 2 TB is in force on 2026-04-01 but no storage rate is"
    );
}

#[test]
fn each_day_is_priced_by_the_rate_of_the_class_the_project_is_in_at_its_end() {
    use crate::domain::catalog::ClassChange;
    use crate::ids::RateClassId;
    let commercial = Some(RateClassId(7));
    let mut rates = flat();
    let mut dear = rate(2, "2020-01-01T00:00:00Z", None, dec!(20));
    dear.value.class = commercial;
    rates.push(dear);
    // Commercial from 16 April 00:00 New York time, back to default at
    // 18:00 on the 25th (that day ends in the default class).
    let tz: Tz = "America/New_York".parse().unwrap();
    let classes = [
        ClassChange {
            effective_from: at("2026-04-16T04:00:00Z"),
            class: commercial,
        },
        ClassChange {
            effective_from: at("2026-04-25T22:00:00Z"),
            class: None,
        },
    ];
    let c = price_storage(
        "2026-04".parse().unwrap(),
        tz,
        &[quota("2020-01-01T00:00:00Z", dec!(10))],
        &classes,
        &rates,
    )
    .unwrap();
    // Default: days 1-15 and 25-30 = 21 days: 10 × 5 × 21/30 = 35.00.
    // Commercial: days 16-24 = 9 days: 10 × 20 × 9/30 = 60.00.
    let lines: Vec<(u8, Decimal, Decimal)> = c
        .lines
        .iter()
        .map(|l| (l.rate_key, l.tb_days, l.priced.amount))
        .collect();
    assert_eq!(lines, [(1, dec!(210), dec!(35.00)), (2, dec!(90), dec!(60.00))]);
    // A class without a storage rate: an error naming the class, never the default's price.
    let err = price_storage(
        "2026-04".parse().unwrap(),
        tz,
        &[quota("2020-01-01T00:00:00Z", dec!(10))],
        &classes,
        &flat(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a quota of 10 TB is in force on 2026-04-16 but no storage rate of rate class #7 is"
    );
}
