//! Ledger entries as the domain builds them (D10: entries are only ever
//! added; a correction is a new entry), and the one way a reversal is built,
//! for a superseded job's charges and for `hpc-ledger reverse` alike.

use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::kinds::EntryKind;
use super::period::Month;
use super::pricing::ChargingRules;
use super::units::{Metric, negate};
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
