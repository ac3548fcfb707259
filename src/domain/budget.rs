//! Budgets (docs/budgets.md): what a project may spend, what it has used,
//! what is held for jobs about to run, what is left, how fast it goes, and
//! whether a job may start. Pure: the sums come from the database
//! (`hl_balance`, `hl_drawn`), the clock is an argument.

use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use rust_decimal::Decimal;
use serde::Serialize;

use super::units::round_money;

crate::domain::kinds::named! {
    /// What an allocation entry does.
    pub enum AllocationKind {
        /// An award, a purchase or a credit: money the project may spend in a window.
        Grant => "grant",
        /// Part of a grant taken back.
        Reduce => "reduce",
        /// Part of a grant given to another project.
        TransferOut => "transfer_out",
        /// What another project gave: a grant of its own.
        TransferIn => "transfer_in",
    }
}

/// The days over which the burn rate is measured: the whole days (in the
/// center's time zone) before the day of the instant.
pub const BURN_DAYS: i64 = 30;

/// What the database sums for a project at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sums {
    /// The allocation entries in force (grants less what was taken from them).
    pub allocated: Decimal,
    /// The earliest start among them: draws count from here.
    pub pool_from: Option<DateTime<Utc>>,
    /// Drawn since `pool_from`, up to the instant.
    pub used: Decimal,
    /// Open holds.
    pub held: Decimal,
    /// Drawn in the [`BURN_DAYS`] whole days before the instant's day.
    pub drawn_recently: Decimal,
    /// The first end, after the instant, of the pool's grants in force
    /// (`None`: none of them ends). What is not spent by then expires with
    /// its grant, so the pool is not said to run out after it.
    pub next_end: Option<DateTime<Utc>>,
    /// The last end of the pool's grants in force (`None`: one of them
    /// never ends): nothing is left to run out after it.
    pub last_end: Option<DateTime<Utc>>,
    /// Whether the pool has an allocation entry that has begun by the
    /// instant: a pool that has had one is budgeted, also when none is in
    /// force any more (then it has nothing left to spend).
    pub ever_allocated: bool,
}

/// A project's budget at an instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Balance {
    pub at: DateTime<Utc>,
    /// The pool: `None` for the general pool (unscoped allocations: every
    /// cluster, storage, adjustments), else the one cluster its allocations
    /// are scoped to.
    pub cluster: Option<String>,
    /// Whether the pool is budgeted: it has had an allocation (one that
    /// has begun). A project that never had one is not (its jobs are not
    /// checked, `slurm sync` leaves its account alone).
    pub budgeted: bool,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub allocated: Decimal,
    pub pool_from: Option<DateTime<Utc>>,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub used: Decimal,
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub held: Decimal,
    /// allocated − used − held.
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub remaining: Decimal,
    /// used ÷ allocated (0 without an allocation).
    pub fraction_used: Decimal,
    /// Drawn in the last [`BURN_DAYS`] days (the burn rate's sum).
    #[serde(serialize_with = "crate::domain::units::cents_str", default)]
    pub drawn_recently: Decimal,
    /// Drawn per day over the last [`BURN_DAYS`] days, to the cent.
    #[serde(serialize_with = "crate::domain::units::cents_str")]
    pub burn_per_day: Decimal,
    /// When `remaining` runs out at that rate; `None` when nothing is drawn,
    /// nothing is left, or it would last past `last_end` (after
    /// `next_end` and before that, it is given: the pool may run out on the
    /// grants that end later, sooner than this if what the first leaves
    /// expires unspent).
    pub runs_out: Option<DateTime<Utc>>,
    /// The first end of a grant in force (docs/budgets.md: what is not
    /// spent expires with it); `None` when none of them ends.
    #[serde(default)]
    pub next_end: Option<DateTime<Utc>>,
    /// The last end of the grants in force; `None` when one never ends.
    #[serde(default)]
    pub last_end: Option<DateTime<Utc>>,
}

impl Balance {
    pub fn new(at: DateTime<Utc>, s: Sums) -> Balance {
        let remaining = s.allocated - s.used - s.held;
        let burn = s.drawn_recently / Decimal::from(BURN_DAYS);
        let runs_out = (burn > Decimal::ZERO && remaining > Decimal::ZERO)
            .then(|| {
                // Whole seconds: remaining ÷ burn days, from `at` to its
                // nearest second (a statement's balance is at its month's
                // last microsecond: its run-out date read …:59.999999).
                let seconds = (remaining / burn * Decimal::from(86_400)).trunc();
                i64::try_from(seconds)
                    .ok()
                    .and_then(|s| at.checked_add_signed(TimeDelta::seconds(s)))
                    .map(|t| t.round_subsecs(0))
            })
            .flatten()
            // Every grant in force ends first: what is left then expires, it
            // is not run out at this rate.
            .filter(|t| s.last_end.is_none_or(|end| *t <= end));
        Balance {
            at,
            cluster: None,
            budgeted: s.ever_allocated || s.pool_from.is_some(),
            allocated: s.allocated,
            pool_from: s.pool_from,
            used: s.used,
            held: s.held,
            remaining,
            fraction_used: if s.allocated > Decimal::ZERO {
                (s.used / s.allocated).round_dp(4)
            } else {
                Decimal::ZERO
            },
            drawn_recently: s.drawn_recently,
            burn_per_day: round_money(burn),
            runs_out,
            next_end: s.next_end,
            last_end: s.last_end,
        }
    }
}

/// How a pool is named to a reader, among `pools` (a project's): a
/// cluster's own pool by the cluster; the general pool "every cluster"
/// when it is the project's only one (or the others have not begun), else
/// "general (other clusters)": it pays for no cluster whose own pool has
/// begun (docs/budgets.md).
pub fn pool_label<'a>(pool: &'a Balance, pools: &[Balance]) -> &'a str {
    match &pool.cluster {
        Some(c) => c,
        // A cluster's own pool whose grant has not begun yet: that cluster
        // still draws on the general pool.
        None if pools.iter().any(|b| b.cluster.is_some() && b.budgeted) => "general (other clusters)",
        None => "every cluster",
    }
}

impl Balance {
    /// The same balance, of the pool of `cluster`'s scoped allocations.
    pub fn of_cluster(mut self, cluster: Option<String>) -> Balance {
        self.cluster = cluster;
        self
    }
}

/// May a job costing `cost` start, given the project's balance and the
/// floor below which no job starts (docs/budgets.md)?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Verdict {
    pub allowed: bool,
    pub reason: String,
}

/// ` on C` for a cluster's own pool (pools never spill: the general
/// pool's remaining money does not pay for C's jobs, and a refusal that
/// named only "remaining" read as the general pool's).
fn on(balance: &Balance) -> String {
    balance.cluster.as_ref().map_or(String::new(), |c| format!(" on {c}"))
}

pub fn verdict(balance: &Balance, cost: Decimal, floor: Decimal) -> Verdict {
    if !balance.budgeted {
        return Verdict {
            allowed: true,
            reason: match &balance.cluster {
                None => "no allocation of the project pays for this job: it is not budgeted".into(),
                Some(c) => format!("the project has no allocation for {c} that has begun: it is not budgeted there"),
            },
        };
    }
    let after = balance.remaining - cost;
    if after >= floor {
        Verdict {
            allowed: true,
            reason: format!("{:.2} remaining{} covers {:.2}", balance.remaining, on(balance), cost),
        }
    } else {
        Verdict {
            allowed: false,
            reason: format!(
                "the job may cost {:.2} but the project has {:.2} remaining{}{}",
                cost,
                balance.remaining,
                on(balance),
                if floor.is_zero() {
                    String::new()
                } else {
                    format!(" (and must keep {floor:.2})")
                }
            ),
        }
    }
}

/// What `slurm sync` does to one scheduler account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforce {
    /// Stop starting its jobs (queued and new ones pend; running ones finish).
    Block,
    /// Let its jobs start again.
    Unblock,
}

/// Whether a budgeted project's account should be blocked: at or below the
/// floor (docs/budgets.md). Held amounts count: a project whose running jobs
/// hold what is left starts no more.
pub fn should_block(balance: &Balance, floor: Decimal) -> bool {
    balance.budgeted && balance.remaining <= floor
}

/// The change an account needs, given whether it should be blocked and
/// whether it is (`None`: the account is not in the scheduler).
pub fn enforcement(should_block: bool, blocked: Option<bool>) -> Option<Enforce> {
    match (should_block, blocked?) {
        (true, false) => Some(Enforce::Block),
        (false, true) => Some(Enforce::Unblock),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::dec;

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn sums(allocated: Decimal, used: Decimal, held: Decimal, recent: Decimal) -> Sums {
        Sums {
            allocated,
            pool_from: Some(at("2026-07-01T00:00:00Z")),
            used,
            held,
            drawn_recently: recent,
            ever_allocated: true,
            next_end: None,
            last_end: None,
        }
    }

    #[test]
    fn remaining_burn_rate_and_run_out() {
        let now = at("2026-11-01T00:00:00Z");
        // 5000 allocated, 3500 used, 100 held: 1400 left; 900 in 30 days =
        // 30 a day: 1400 ÷ 30 = 46.67 days.
        let b = Balance::new(now, sums(dec!(5000), dec!(3500), dec!(100), dec!(900)));
        assert_eq!(
            (b.remaining, b.burn_per_day, b.fraction_used),
            (dec!(1400), dec!(30.00), dec!(0.7))
        );
        assert_eq!(b.runs_out, Some(at("2026-12-17T16:00:00Z")));
        // At a month's last microsecond (a statement's balance): the run-out
        // date in whole seconds, not at …:59.999999.
        let last = at("2026-11-01T03:59:59.999999Z");
        let b = Balance::new(last, sums(dec!(5000), dec!(3500), dec!(100), dec!(900)));
        assert_eq!(b.runs_out, Some(at("2026-12-17T20:00:00Z")));
        // The grant ends on 1 December, before that day: what is left then
        // expires, the pool does not run out at this rate.
        let ends = |end: &str| Sums {
            next_end: Some(at(end)),
            last_end: Some(at(end)),
            ..sums(dec!(5000), dec!(3500), dec!(100), dec!(900))
        };
        assert_eq!(Balance::new(now, ends("2026-12-01T00:00:00Z")).runs_out, None);
        // Another grant in force ends later (or never): the pool may run out
        // on it; not after the last end.
        for last in [Some(at("2027-01-01T00:00:00Z")), None] {
            let first_of_two = Sums {
                last_end: last,
                ..ends("2026-12-01T00:00:00Z")
            };
            assert_eq!(
                Balance::new(now, first_of_two).runs_out,
                Some(at("2026-12-17T16:00:00Z"))
            );
        }
        let both_end_first = Sums {
            last_end: Some(at("2026-12-10T00:00:00Z")),
            ..ends("2026-12-01T00:00:00Z")
        };
        assert_eq!(Balance::new(now, both_end_first).runs_out, None);
        assert_eq!(
            Balance::new(now, ends("2026-12-17T16:00:00Z")).runs_out,
            Some(at("2026-12-17T16:00:00Z")),
            "runs out the instant it ends"
        );
        // Nothing drawn lately: no run-out date; spent: none either.
        assert_eq!(
            Balance::new(now, sums(dec!(10), dec!(0), dec!(0), dec!(0))).runs_out,
            None
        );
        assert_eq!(
            Balance::new(now, sums(dec!(10), dec!(12), dec!(0), dec!(5))).runs_out,
            None
        );
        // Not budgeted.
        let none = Balance::new(
            now,
            Sums {
                allocated: Decimal::ZERO,
                pool_from: None,
                used: Decimal::ZERO,
                held: Decimal::ZERO,
                drawn_recently: dec!(3),
                ever_allocated: false,
                next_end: None,
                last_end: None,
            },
        );
        assert!(!none.budgeted);
        assert_eq!(none.fraction_used, Decimal::ZERO);
    }

    #[test]
    fn a_job_starts_while_what_remains_covers_it_above_the_floor() {
        let now = at("2026-11-01T00:00:00Z");
        let b = Balance::new(now, sums(dec!(100), dec!(60), dec!(10), dec!(0)));
        assert!(
            verdict(&b, dec!(30), Decimal::ZERO).allowed,
            "30 left covers exactly 30"
        );
        let no = verdict(&b, dec!(30.01), Decimal::ZERO);
        assert!(!no.allowed);
        assert_eq!(no.reason, "the job may cost 30.01 but the project has 30.00 remaining");
        assert!(!verdict(&b, dec!(25), dec!(10)).allowed, "the floor is kept");
        let free = Balance::new(
            now,
            Sums {
                allocated: Decimal::ZERO,
                pool_from: None,
                used: dec!(1000),
                held: Decimal::ZERO,
                drawn_recently: Decimal::ZERO,
                ever_allocated: false,
                next_end: None,
                last_end: None,
            },
        );
        assert!(verdict(&free, dec!(1000), Decimal::ZERO).allowed, "not budgeted");
    }

    #[test]
    fn an_account_is_blocked_at_the_floor_and_changed_only_when_it_must_be() {
        let now = at("2026-11-01T00:00:00Z");
        let spent = Balance::new(now, sums(dec!(10), dec!(10), dec!(0), dec!(0)));
        let held = Balance::new(now, sums(dec!(10), dec!(4), dec!(6), dec!(0)));
        let funded = Balance::new(now, sums(dec!(10), dec!(4), dec!(1), dec!(0)));
        assert!(should_block(&spent, Decimal::ZERO), "nothing left");
        assert!(should_block(&held, Decimal::ZERO), "what is left is held");
        assert!(!should_block(&funded, Decimal::ZERO));
        assert!(should_block(&funded, dec!(5)), "at the floor");
        assert_eq!(enforcement(true, Some(false)), Some(Enforce::Block));
        assert_eq!(enforcement(false, Some(true)), Some(Enforce::Unblock));
        assert_eq!(enforcement(true, Some(true)), None, "already blocked: nothing to do");
        assert_eq!(enforcement(false, Some(false)), None);
        assert_eq!(enforcement(true, None), None, "no such account in the scheduler");
    }
}
