//! Storage pricing: a project pays for the quota it reserves (docs/rules.md R6), day
//! by day at the quota and rate in force at the end of each local day (D7):
//!
//! ```text
//! amount = Σ_days quota_TB(d) × rate(d) / days_in_month
//! ```
//!
//! `rate(d)` is the storage rate of the project's rate class at the end of
//! day `d` (R7): a class has only its own rates.
//!
//! The month's days are grouped into segments of equal quota and rate, and
//! into one charge line per storage rate row:
//! `TB-months = Σ quota(d) / days_in_month` (12 places, exact division),
//! `amount = TB-months × rate`. A quota held for the whole month at one rate
//! costs exactly quota × rate.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::Serialize;

use super::catalog::{ClassChange, class_at};
use super::period::{Month, start_of_day};
use super::rules::Dated;
use super::units::{Cut, EXACT_SCALE, Metric, Priced, QUANTITY_SCALE, Quantity, Rate, TbMonth, div_round, ratio};
use crate::ids::RateClassId;

/// A project's quota from an instant on, until the next change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QuotaChange {
    pub effective_from: DateTime<Utc>,
    pub quota_tb: Decimal,
}

/// A storage price per TB-month, with the key of the row that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StoragePrice<K> {
    pub key: K,
    pub tb_month: Decimal,
    /// The rate class it prices; `None` = the default class.
    pub class: Option<RateClassId>,
}

/// Consecutive days at one quota and one rate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment<K> {
    pub first_day: NaiveDate,
    pub last_day: NaiveDate,
    pub days: u32,
    pub quota_tb: Decimal,
    pub rate: StoragePrice<K>,
}

/// The charge under one storage rate row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageLine<K> {
    pub rate_key: K,
    /// Σ quota over the days at this rate.
    pub tb_days: Decimal,
    pub priced: Priced,
    pub segments: Vec<Segment<K>>,
}

/// A project's storage charge for a month.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageCharge<K> {
    pub month: Month,
    pub days_in_month: u32,
    pub lines: Vec<StorageLine<K>>,
}

impl<K> StorageCharge<K> {
    pub fn total(&self) -> Decimal {
        self.lines.iter().map(|l| l.priced.amount).sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("a quota of {} TB is in force on {day} but no storage rate{} is", .quota_tb.normalize(),
            .class.as_ref().map_or(String::new(), |c| format!(" of rate class {c}")))]
    NoRate {
        day: NaiveDate,
        quota_tb: Decimal,
        /// The project's rate class then, when not the default.
        class: Option<String>,
    },
    #[error("negative quota {0} TB")]
    NegativeQuota(Decimal),
    #[error("the storage charge is too large to compute exactly (more than 28 significant digits)")]
    Overflow,
}

/// The quota in force at the end of a day: the last change strictly before
/// the next day's first instant (a change at 00:00 belongs to the new day).
fn quota_at_end(quotas: &[QuotaChange], next_day_start: DateTime<Utc>) -> Decimal {
    quotas
        .iter()
        .filter(|q| q.effective_from < next_day_start)
        .max_by_key(|q| q.effective_from)
        .map_or(Decimal::ZERO, |q| q.quota_tb)
}

/// Price a project's storage for `month`, days read in `tz`, by the rates
/// of its class at each day's end (`classes`: its class changes, oldest
/// first; empty = the default class throughout).
pub fn price_storage<K: Copy + Eq>(
    month: Month,
    tz: Tz,
    quotas: &[QuotaChange],
    classes: &[ClassChange],
    rates: &[Dated<StoragePrice<K>>],
) -> Result<StorageCharge<K>, StorageError> {
    if let Some(q) = quotas
        .iter()
        .find(|q| q.quota_tb.is_sign_negative() && !q.quota_tb.is_zero())
    {
        return Err(StorageError::NegativeQuota(q.quota_tb));
    }
    let mut segments: Vec<Segment<K>> = Vec::new();
    for day in month.iter_days() {
        let end = start_of_day(day.succ_opt().expect("date in range"), tz);
        let quota_tb = quota_at_end(quotas, end);
        if quota_tb.is_zero() {
            continue;
        }
        // The last microsecond of the day: the database's time resolution.
        let last = end - TimeDelta::microseconds(1);
        let class = class_at(classes, last);
        let rate = rates
            .iter()
            .find(|r| r.value.class == class && r.in_force_at(last))
            .ok_or_else(|| StorageError::NoRate {
                day,
                quota_tb,
                class: class.map(|c| format!("#{c}")),
            })?
            .value;
        match segments.last_mut() {
            Some(s) if s.last_day.succ_opt() == Some(day) && s.quota_tb == quota_tb && s.rate.key == rate.key => {
                s.last_day = day;
                s.days += 1;
            }
            _ => segments.push(Segment {
                first_day: day,
                last_day: day,
                days: 1,
                quota_tb,
                rate,
            }),
        }
    }
    let days_in_month = Decimal::from(month.days());
    let mut lines: Vec<StorageLine<K>> = Vec::new();
    for seg in segments {
        let tb_days = seg
            .quota_tb
            .checked_mul(Decimal::from(seg.days))
            .ok_or(StorageError::Overflow)?;
        match lines.iter_mut().find(|l| l.rate_key == seg.rate.key) {
            Some(line) => {
                line.tb_days += tb_days;
                line.segments.push(seg);
            }
            None => lines.push(StorageLine {
                rate_key: seg.rate.key,
                tb_days,
                priced: Priced::new(Quantity::<TbMonth>::new(Decimal::ZERO), Rate::new(seg.rate.tb_month))
                    .ok_or(StorageError::Overflow)?,
                segments: vec![seg],
            }),
        }
    }
    // Charging rules 2: TB-months rounded once for display; the amount is
    // the exact TB-days × rate ÷ days, truncated to 12 places, then rounded.
    for line in &mut lines {
        let tb_months = div_round(line.tb_days, days_in_month, QUANTITY_SCALE).ok_or(StorageError::Overflow)?;
        let rate = line.priced.unit_rate;
        let exact =
            ratio(&[line.tb_days, rate], &[days_in_month], EXACT_SCALE, Cut::Truncate).ok_or(StorageError::Overflow)?;
        line.priced = Priced::exact(Metric::TbMonths, tb_months, rate, exact);
    }
    Ok(StorageCharge {
        month,
        days_in_month: month.days(),
        lines,
    })
}

#[cfg(test)]
mod tests;
