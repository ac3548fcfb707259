//! Ledger entries as the domain builds them (D10: entries are only ever
//! added; a correction is a new entry), and the one way a reversal is built,
//! for a superseded job's charges and for `hpc-ledger reverse` alike.

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::kinds::EntryKind;
use super::period::Month;
use super::pricing::ChargingRules;
use super::units::{Metric, negate, round_money};
use crate::ids::{DiscountId, JobRecordId, LedgerEntryId, ProjectId, RateCardId};

/// An entry to post.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    /// The first day of the month it is posted to.
    pub period: NaiveDate,
    pub project_id: ProjectId,
    pub kind: EntryKind,
    pub metric: Option<Metric>,
    pub job_record_id: Option<JobRecordId>,
    pub rate_card_id: Option<RateCardId>,
    pub corrects_id: Option<LedgerEntryId>,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    pub amount: Decimal,
    /// Posted after its own month was closed (D6).
    pub late: bool,
    pub reason: Option<String>,
    /// The charging rules its arithmetic follows (a correction: those of
    /// the entry it corrects).
    pub charging_rules: ChargingRules,
    /// A discount line (and its reversal): the discount it applies.
    pub discount_id: Option<DiscountId>,
}

/// A posted entry, as much of it as a correction of it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PostedEntry {
    pub id: LedgerEntryId,
    pub project_id: ProjectId,
    pub metric: Option<Metric>,
    pub job_record_id: Option<JobRecordId>,
    pub rate_card_id: Option<RateCardId>,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    pub amount: Decimal,
    pub charging_rules: ChargingRules,
    pub discount_id: Option<DiscountId>,
}

/// The exact negative of `of`, linked to it, posted into `period`, citing
/// job record `cites` (the entry's own record for a correction, the
/// superseding record for a supersede) with `reason`.
pub fn reversal(of: &PostedEntry, period: Month, late: bool, cites: Option<JobRecordId>, reason: String) -> NewEntry {
    NewEntry {
        period: period.first_day(),
        project_id: of.project_id,
        kind: EntryKind::Reversal,
        metric: of.metric,
        job_record_id: cites,
        rate_card_id: of.rate_card_id,
        corrects_id: Some(of.id),
        quantity: negate(of.quantity),
        unit_rate: of.unit_rate,
        amount_exact: negate(of.amount_exact),
        amount: negate(of.amount),
        late,
        reason: Some(reason),
        charging_rules: of.charging_rules,
        discount_id: of.discount_id,
    }
}

/// What a refund of exact amount `exact` (≤ 0) of a charge of charging
/// rules 3 posts, in cents (≤ 0; docs/rules.md, "Corrections"), given the
/// charge's exact amount and cents, and its unreversed discount line and
/// refunds so far (each as posted, ≤ 0): what the charge still charges in
/// cents (its net in cents, its cents and its discount line's, at least 0,
/// less the cents refunded) less what its net still unrefunded exactly comes
/// to, rounded (never more than its net in cents), and never a debit. So
/// what a charge's refunds leave charged, in cents, is the exact net they
/// leave, rounded; a charge refunded in full (or to within half a cent, as a
/// full refund's exact amount truncated to 12 places is) nets zero. The
/// audit's `hl_refund_cents` (migration 0055) is the same in SQL.
pub fn refund_cents(charge_exact: Decimal, charge_cents: Decimal, credits: RefundBasis, exact: Decimal) -> Decimal {
    let net_exact = (charge_exact + credits.discount_exact).max(Decimal::ZERO);
    let net_cents = (charge_cents + credits.discount_cents).max(Decimal::ZERO);
    // What is left of the net, exactly, once this refund (exact ≤ 0) is given.
    let left = (net_exact + credits.refunded_exact + exact).max(Decimal::ZERO);
    let keep = round_money(left).min(net_cents);
    negate((net_cents + credits.refunded_cents - keep).max(Decimal::ZERO))
}

/// A charge's unreversed discount line and refunds, as posted (each ≤ 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefundBasis {
    pub discount_exact: Decimal,
    pub discount_cents: Decimal,
    pub refunded_exact: Decimal,
    pub refunded_cents: Decimal,
}

/// The discount line of a charge whose exact amount is `amount_exact`
/// (docs/rules.md R8): minus `percent` % of it, exactly, and that rounded
/// once, half away from zero, to cents. `(amount_exact, amount)`. A 100 %
/// discount nets exactly zero; no discount credits more than its charge.
pub fn discount_amounts(amount_exact: Decimal, percent: Decimal) -> (Decimal, Decimal) {
    let exact = negate(amount_exact * percent / Decimal::ONE_HUNDRED);
    (exact, negate(super::units::round_money(-exact)))
}

#[cfg(test)]
mod tests {
    use rust_decimal::dec;

    use super::*;

    /// Refunds of a charge, each `(exact, reversed later?)`, in order: the
    /// cents each posts, by [`refund_cents`] against those before it that
    /// are not reversed.
    fn settle(charge_exact: Decimal, percent: Option<Decimal>, refunds: &[Decimal]) -> Vec<Decimal> {
        let charge_cents = round_money(charge_exact);
        let (discount_exact, discount_cents) =
            percent.map_or((Decimal::ZERO, Decimal::ZERO), |p| discount_amounts(charge_exact, p));
        let mut basis = RefundBasis {
            discount_exact,
            discount_cents,
            ..RefundBasis::default()
        };
        refunds
            .iter()
            .map(|&exact| {
                let cents = refund_cents(charge_exact, charge_cents, basis, exact);
                basis.refunded_exact += exact;
                basis.refunded_cents += cents;
                cents
            })
            .collect()
    }

    #[test]
    fn refunds_of_version_3_settle_in_cents() {
        // The three cases docs/rules.md gave for versions 1 and 2: two
        // refunds of half of 1.07 (1.08 back before), a full refund of 1.07
        // discounted 50 % (net -0.01 before), 1.006 discounted 50 % and
        // refunded in full (net +0.01 before).
        assert_eq!(
            settle(dec!(1.07), None, &[dec!(-0.535), dec!(-0.535)]),
            [dec!(-0.53), dec!(-0.54)]
        );
        assert_eq!(settle(dec!(1.07), Some(dec!(50)), &[dec!(-0.535)]), [dec!(-0.53)]);
        assert_eq!(settle(dec!(1.006), Some(dec!(50)), &[dec!(-0.503)]), [dec!(-0.51)]);
        // Thirds of 1.00: 0.33, 0.34 (0.67 in all), 0.33: never a cent of drift.
        let third = dec!(-0.333333333333);
        assert_eq!(
            settle(dec!(1.00), None, &[third, third, dec!(-0.333333333334)]),
            [dec!(-0.33), dec!(-0.34), dec!(-0.33)]
        );
        // A hundred refunds of 0.005 give back 0.50, not a cent each.
        let tiny = settle(dec!(1.00), None, &[dec!(-0.005); 100]);
        assert_eq!(tiny.iter().sum::<Decimal>(), dec!(-0.50));
        // An amount refund (whole cents) is that amount.
        assert_eq!(
            settle(dec!(1.07), None, &[dec!(-0.535), dec!(-0.10)]),
            [dec!(-0.53), dec!(-0.10)]
        );
        // ... unless the net in cents is not the exact net rounded (each
        // line of a discounted charge rounded): the cent goes with it
        // (docs/rules.md's examples). 1.006 at 50 %: C 0.51, N 0.503.
        assert_eq!(settle(dec!(1.006), Some(dec!(50)), &[dec!(-0.10)]), [dec!(-0.11)]);
        // 1.07 at 50 %: C 0.53, N 0.535.
        assert_eq!(settle(dec!(1.07), Some(dec!(50)), &[dec!(-0.10)]), [dec!(-0.09)]);
        // A full refund whose exact amount was truncated to 12 places (a
        // 10 % discount gives the net 13): the net, to the cent.
        let charge = dec!(0.105011111111);
        let (line, _) = discount_amounts(charge, dec!(10));
        let full = -(charge + line).trunc_with_scale(12);
        assert!(-full < charge + line);
        assert_eq!(settle(charge, Some(dec!(10)), &[full]), [dec!(-0.10)]);
        // A 100 % discount leaves nothing to give back in cents.
        assert_eq!(settle(dec!(1.07), Some(dec!(100)), &[dec!(0)]), [dec!(0)]);
    }

    #[test]
    fn a_refund_never_debits_nor_gives_back_more_than_the_net() {
        // Cents refunded ahead of their exact amount (a refund that gave a
        // cent for 0.004, the others reversed): the next small refund posts
        // nothing rather than a debit.
        let basis = RefundBasis {
            refunded_exact: dec!(-0.004),
            refunded_cents: dec!(-0.01),
            ..RefundBasis::default()
        };
        assert_eq!(refund_cents(dec!(1.00), dec!(1.00), basis, dec!(-0.0001)), dec!(0));
        // Its net in cents below its exact amount rounded (1.013 → 1.01,
        // discounted 50 %: -0.5065 → -0.51; net 0.50 in cents, 0.5065
        // exactly): 99 % of it leaves 0.005065, a cent; the rest gives it.
        let cents = settle(dec!(1.013), Some(dec!(50)), &[dec!(-0.501435), dec!(-0.005065)]);
        assert_eq!(cents, [dec!(-0.49), dec!(-0.01)]);
    }

    #[test]
    fn a_reversal_is_the_exact_negative_linked_to_its_entry() {
        let charge = PostedEntry {
            id: LedgerEntryId(7),
            project_id: ProjectId(3),
            metric: Some(Metric::CoreHours),
            job_record_id: Some(JobRecordId(11)),
            rate_card_id: Some(RateCardId(2)),
            quantity: dec!(8.5),
            unit_rate: dec!(0.0125),
            amount_exact: dec!(0.10625),
            amount: dec!(0.11),
            charging_rules: ChargingRules::V1,
            discount_id: None,
        };
        let month: Month = "2026-11".parse().unwrap();
        let r = reversal(&charge, month, true, Some(JobRecordId(12)), "superseded".into());
        assert_eq!(
            (r.kind, r.corrects_id, r.job_record_id, r.metric, r.rate_card_id),
            (
                EntryKind::Reversal,
                Some(LedgerEntryId(7)),
                Some(JobRecordId(12)),
                Some(Metric::CoreHours),
                Some(RateCardId(2))
            )
        );
        assert_eq!(
            (r.quantity, r.amount_exact, r.amount),
            (dec!(-8.5), dec!(-0.10625), dec!(-0.11))
        );
        assert_eq!(
            (r.period, r.late, r.charging_rules),
            (month.first_day(), true, ChargingRules::V1)
        );
        // A zero charge reverses to zero, not to -0.
        let zero = reversal(
            &PostedEntry {
                quantity: Decimal::ZERO,
                amount_exact: Decimal::ZERO,
                amount: Decimal::ZERO,
                ..charge
            },
            month,
            false,
            None,
            "x".into(),
        );
        assert_eq!(zero.amount.to_string(), "0");
    }

    #[test]
    fn a_discount_is_the_percent_of_the_exact_amount_rounded_once_away_from_zero() {
        // 1.07 at 50 %: exactly -0.535, a tie, posted -0.54.
        assert_eq!(discount_amounts(dec!(1.07), dec!(50)), (dec!(-0.535), dec!(-0.54)));
        // 0.08 at 10 %: -0.008 -> -0.01; 0.04 at 10 %: -0.004 -> 0.
        assert_eq!(discount_amounts(dec!(0.08), dec!(10)), (dec!(-0.008), dec!(-0.01)));
        let (exact, amount) = discount_amounts(dec!(0.04), dec!(10));
        assert_eq!((exact, amount.to_string()), (dec!(-0.004), "0.00".to_owned()));
        // 100 % takes all of it; 33.3333 % of 10.00 is exact to 6 places.
        assert_eq!(discount_amounts(dec!(12.34), dec!(100)), (dec!(-12.34), dec!(-12.34)));
        assert_eq!(
            discount_amounts(dec!(10.00), dec!(33.3333)),
            (dec!(-3.33333), dec!(-3.33))
        );
        // Of the exact amount: 0.105 is posted 0.11; 100 % of it is -0.105,
        // posted -0.11: the net is 0.00, and the credit is never above the charge.
        assert_eq!(discount_amounts(dec!(0.105), dec!(100)), (dec!(-0.105), dec!(-0.11)));
        assert_eq!(discount_amounts(dec!(1.0695), dec!(50)), (dec!(-0.53475), dec!(-0.53)));
        // Nothing charged, nothing discounted (and never -0).
        assert_eq!(discount_amounts(Decimal::ZERO, dec!(50)).1.to_string(), "0");
    }
}
