//! Quantities with their unit, prices per unit, money, and the exact
//! arithmetic that links them (docs/rules.md D1, D8).
//!
//! A [`Quantity<U>`] can only be multiplied by a [`Rate<U>`] of the same unit,
//! so a storage price can never be applied to core-hours by mistake. Every
//! division in the product goes through [`div_round`], which is exact (integer
//! arithmetic on the decimal mantissas) and rounds half away from zero: the
//! SQL function `hl_div_round` in the migrations does the same, so auditors
//! reproduce every quantity to the last digit.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Mul;

use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

/// Decimal places kept for derived quantities (effective cores, hours,
/// core-hours, gpu-hours, TB-months). Chosen so that the quantity times a
/// rate of at most 10 decimal places is exact in `NUMERIC(50,22)`.
pub const QUANTITY_SCALE: u32 = 12;

/// Decimal places of a posted amount: the currency's minor unit (cents).
pub const MONEY_SCALE: u32 = 2;

/// `n / d` rounded half away from zero to `dp` decimal places, computed
/// exactly. `None` when `d` is zero or the intermediate values do not fit
/// in 128 bits (far beyond any real job or quota).
pub fn div_round(n: Decimal, d: Decimal, dp: u32) -> Option<Decimal> {
    // Trailing zeros (an amount kept at 22 places) would only inflate the
    // intermediate values.
    let (n, d) = (n.normalize(), d.normalize());
    let (mn, sn) = (n.mantissa(), n.scale());
    let (md, sd) = (d.mantissa(), d.scale());
    if md == 0 {
        return None;
    }
    // n/d * 10^dp = mn * 10^(sd + dp) / (md * 10^sn)
    let num = mn.checked_mul(10i128.checked_pow(sd + dp)?)?;
    let den = md.checked_mul(10i128.checked_pow(sn)?)?;
    let (q, r) = (num / den, num % den);
    let negative = (num < 0) != (den < 0);
    let (r, den) = (r.checked_abs()?, den.checked_abs()?);
    let q = if r >= den - r {
        if negative { q - 1 } else { q + 1 }
    } else {
        q
    };
    Decimal::try_from_i128_with_scale(q, dp).ok()
}

/// Decimal places of a version-2 amount before it is rounded to cents: the
/// exact value truncated here. Any number of places from 3 on rounds to the
/// same cents as the exact value; 12 keep every amount a `Decimal` can hold.
pub const EXACT_SCALE: u32 = 12;

/// How [`ratio`] cuts the exact value to its places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Half away from zero (quantities).
    Round,
    /// Toward zero (a version-2 amount before it is rounded to cents: never
    /// moves a value across a cent boundary, which has 3 decimals).
    Truncate,
}

/// The exact value of `Π num ÷ Π den` cut to `dp` places, for non-negative
/// factors. Computed on the decimal mantissas in 128-bit integers by long
/// division, so the quotient may have more digits than an intermediate
/// product could hold at that scale. `None` when a product overflows, a
/// divisor is zero, or the result does not fit a `Decimal`.
pub fn ratio(num: &[Decimal], den: &[Decimal], dp: u32, cut: Cut) -> Option<Decimal> {
    let product = |fs: &[Decimal]| -> Option<(i128, u32)> {
        fs.iter().try_fold((1i128, 0u32), |(m, s), f| {
            let f = f.normalize();
            if f.is_sign_negative() {
                return None;
            }
            Some((m.checked_mul(f.mantissa())?, s + f.scale()))
        })
    };
    let (nm, ns) = product(num)?;
    let (dm, ds) = product(den)?;
    if dm == 0 {
        return None;
    }
    // value = nm / 10^ns ÷ (dm / 10^ds) = (nm · 10^ds) / (dm · 10^ns): scale
    // whichever side needs it, cancelling the common power of ten.
    let common = ns.min(ds);
    let (n, d) = (
        nm.checked_mul(10i128.checked_pow(ds - common)?)?,
        dm.checked_mul(10i128.checked_pow(ns - common)?)?,
    );
    let (mut q, r) = divide(n, d, dp)?;
    if cut == Cut::Round && r.checked_mul(2)? >= d {
        q += 1;
    }
    Decimal::try_from_i128_with_scale(q, dp).ok()
}

/// `n ÷ d` to `dp` places: the quotient's digits and the remainder, or
/// `None` where the long division overflows. When `n · 10^dp` fits (and so
/// does each remainder times ten) one division gives what the long
/// division would, without its two 128-bit divisions a digit (they were a
/// twentieth of an import's own CPU).
fn divide(n: i128, d: i128, dp: u32) -> Option<(i128, i128)> {
    match (10i128.checked_pow(dp).and_then(|p| n.checked_mul(p)), d.checked_mul(10)) {
        (Some(scaled), Some(_)) => Some((scaled / d, scaled % d)),
        _ => long_divide(n, d, dp),
    }
}

/// `n ÷ d` to `dp` places, a digit at a time.
fn long_divide(n: i128, d: i128, dp: u32) -> Option<(i128, i128)> {
    let mut q = n / d;
    let mut r = n % d;
    for _ in 0..dp {
        r = r.checked_mul(10)?;
        q = q.checked_mul(10)?.checked_add(r / d)?;
        r %= d;
    }
    Some((q, r))
}

/// `a × b`, exactly, or `None` when the exact product does not fit in a
/// `Decimal` (96-bit mantissa, 28 decimal places). `Decimal::checked_mul`
/// would round such a product instead.
pub fn exact_mul(a: Decimal, b: Decimal) -> Option<Decimal> {
    let mut m = a.mantissa().checked_mul(b.mantissa())?;
    let mut s = a.scale() + b.scale();
    // Trailing zeros can go without changing the value.
    while s > Decimal::MAX_SCALE || m.unsigned_abs() >= 1u128 << 96 {
        if s == 0 || m % 10 != 0 {
            return None;
        }
        m /= 10;
        s -= 1;
    }
    Decimal::try_from_i128_with_scale(m, s).ok()
}

/// `-x`, without a negative zero (`-0.00` reads as a credit on a statement).
pub fn negate(x: Decimal) -> Decimal {
    let y = -x;
    if y.is_zero() { y.abs() } else { y }
}

/// An amount already in cents, written with both places: a zero read from
/// PostgreSQL (or a sum of nothing) comes without them, and prints "0".
pub fn in_cents(x: Decimal) -> Decimal {
    let mut y = x;
    y.rescale(MONEY_SCALE);
    y
}

/// Money in JSON: its string with at least its cents ("0.00", "-12.50";
/// more places kept). sqlx reads a NUMERIC zero without its scale and a sum
/// of nothing is `Decimal::ZERO`, which printed "0" beside "0.00".
pub fn cents_str<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    let mut x = *d;
    if x.scale() < MONEY_SCALE {
        x.rescale(MONEY_SCALE);
    }
    s.serialize_str(&x.to_string())
}

/// Round to the currency's minor unit, half away from zero: the same result
/// as PostgreSQL's `round(numeric, 2)`.
pub fn round_money(x: Decimal) -> Decimal {
    x.round_dp_with_strategy(MONEY_SCALE, RoundingStrategy::MidpointAwayFromZero)
}

crate::domain::kinds::named! {
    /// What a ledger line measures.
    pub enum Metric {
        CoreHours => "core_hours",
        GpuHours => "gpu_hours",
        TbMonths => "tb_months",
    }
}

impl Metric {
    /// The unit as a person reads it on a statement.
    pub fn unit_label(self) -> &'static str {
        match self {
            Metric::CoreHours => "core-hours",
            Metric::GpuHours => "GPU-hours",
            Metric::TbMonths => "TB-months",
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.unit_label())
    }
}

/// A unit of charge: core-hour, GPU-hour, TB-month.
pub trait Unit {
    const METRIC: Metric;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreHour;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuHour;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbMonth;

impl Unit for CoreHour {
    const METRIC: Metric = Metric::CoreHours;
}
impl Unit for GpuHour {
    const METRIC: Metric = Metric::GpuHours;
}
impl Unit for TbMonth {
    const METRIC: Metric = Metric::TbMonths;
}

/// An amount of some unit (core-hours, GPU-hours, TB-months).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity<U>(Decimal, PhantomData<U>);

impl<U> Clone for Quantity<U> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<U> Copy for Quantity<U> {}

impl<U> Quantity<U> {
    pub fn new(value: Decimal) -> Self {
        Quantity(value, PhantomData)
    }
    pub fn value(self) -> Decimal {
        self.0
    }
}

/// A price per one unit `U`, in the installation's currency.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate<U>(Decimal, PhantomData<U>);

impl<U> Clone for Rate<U> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<U> Copy for Rate<U> {}

impl<U> Rate<U> {
    pub fn new(price: Decimal) -> Self {
        Rate(price, PhantomData)
    }
    pub fn price(self) -> Decimal {
        self.0
    }
}

impl<U> Mul<Rate<U>> for Quantity<U> {
    type Output = Option<Money>;
    /// The exact product; `None` on overflow of the decimal type.
    fn mul(self, rate: Rate<U>) -> Option<Money> {
        exact_mul(self.0, rate.0).map(Money)
    }
}

/// An amount of money, exact (not yet rounded to the minor unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Money(pub Decimal);

impl Money {
    pub fn rounded(self) -> Money {
        Money(round_money(self.0))
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2}", self.0)
    }
}

/// A charge line's arithmetic: quantity × unit rate = exact amount, and the
/// amount rounded to cents (docs/rules.md D8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Priced {
    pub metric: Metric,
    pub quantity: Decimal,
    pub unit_rate: Decimal,
    pub amount_exact: Decimal,
    pub amount: Decimal,
}

impl Priced {
    /// A line whose exact amount is given (charging rules 2: the exact value
    /// truncated to [`EXACT_SCALE`] places); the amount is it rounded to cents.
    pub fn exact(metric: Metric, quantity: Decimal, unit_rate: Decimal, amount_exact: Decimal) -> Priced {
        Priced {
            metric,
            quantity,
            unit_rate,
            amount_exact,
            amount: round_money(amount_exact),
        }
    }

    /// Price a quantity at a rate of the same unit (charging rules 1).
    pub fn new<U: Unit>(quantity: Quantity<U>, rate: Rate<U>) -> Option<Priced> {
        let exact = (quantity * rate)?;
        Some(Priced {
            metric: U::METRIC,
            quantity: quantity.value(),
            unit_rate: rate.price(),
            amount_exact: exact.0,
            amount: exact.rounded().0,
        })
    }
}

/// A size in bytes (memory). Units follow the schedulers' convention
/// (docs/rules.md D2): k, m, g, t, p are powers of 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bytes(pub u64);

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;
pub const TIB: u64 = 1024 * GIB;
pub const PIB: u64 = 1024 * TIB;

impl Bytes {
    pub fn as_decimal(self) -> Decimal {
        Decimal::from(self.0)
    }

    /// Parse a size as schedulers write it: a number (integer or decimal, as
    /// in Slurm's `mem=62.50G`) and an optional unit `b, k, kb, m, mb, g,
    /// gb, t, tb, p, pb` in any case. A number without a unit is in
    /// `default_unit` bytes (1 for PBS, MiB for Slurm). Fractional results are
    /// rounded to the nearest byte.
    pub fn parse(s: &str, default_unit: u64) -> Result<Bytes, String> {
        let t = s.trim();
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        if num.is_empty() {
            return Err(format!("{s:?} is not a size: it does not start with a number"));
        }
        if unit.len() > 1
            && unit.as_bytes()[0].eq_ignore_ascii_case(&b'e')
            && unit[1..]
                .trim_start_matches(['+', '-'])
                .bytes()
                .all(|b| b.is_ascii_digit())
        {
            return Err(format!(
                "{s:?} is not a size: exponent notation is not read; give a number with a unit, e.g. 64GB"
            ));
        }
        let multiplier = match unit.to_ascii_lowercase().as_str() {
            "" => default_unit,
            "b" => 1,
            "k" | "kb" | "kib" => KIB,
            "m" | "mb" | "mib" => MIB,
            "g" | "gb" | "gib" => GIB,
            "t" | "tb" | "tib" => TIB,
            "p" | "pb" | "pib" => PIB,
            other => {
                return Err(format!(
                    "{s:?} has an unknown size unit {other:?} (expected b, kb, mb, gb, tb or pb)"
                ));
            }
        };
        let value: Decimal = num
            .parse()
            .map_err(|_| format!("{s:?} is not a size: {num:?} is not a number"))?;
        let bytes = value
            .checked_mul(Decimal::from(multiplier))
            .map(|b| b.round_dp_with_strategy(0, RoundingStrategy::MidpointAwayFromZero))
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| format!("{s:?} is too large"))?;
        Ok(Bytes(bytes))
    }
}

impl fmt::Display for Bytes {
    /// The largest binary unit that shows the size exactly, e.g. `12GB`,
    /// `1993MB`, `3500B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [(PIB, "PB"), (TIB, "TB"), (GIB, "GB"), (MIB, "MB"), (KIB, "KB")];
        for (size, name) in units {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{}", self.0 / size, name);
            }
        }
        write!(f, "{}B", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::dec;

    fn check_div(n: &str, d: &str, dp: u32, expected: &str) {
        let got = div_round(n.parse().unwrap(), d.parse().unwrap(), dp).unwrap();
        assert_eq!(got, expected.parse::<Decimal>().unwrap(), "{n} / {d} to {dp} places");
    }

    #[test]
    fn div_round_is_exact_and_half_away_from_zero() {
        check_div("12", "4", 12, "3");
        check_div("10", "4", 12, "2.5");
        check_div("1", "3", 12, "0.333333333333");
        check_div("2", "3", 12, "0.666666666667");
        check_div("-2", "3", 12, "-0.666666666667");
        check_div("1", "8", 2, "0.13"); // 0.125 -> away from zero
        check_div("-1", "8", 2, "-0.13");
        check_div("1993", "4096", 12, "0.486572265625");
        check_div("7200", "3600", 12, "2");
        check_div("0.5", "0.25", 0, "2");
        check_div("12.00000000000000", "2.4000000000000000000000", 12, "5");
        assert_eq!(div_round(dec!(1), Decimal::ZERO, 2), None);
    }

    #[test]
    fn products_are_exact_or_refused() {
        let q: Decimal = "10000000.333333333333".parse().unwrap();
        assert_eq!(
            exact_mul(q, "9.8765432101".parse().unwrap()),
            None,
            "31 digits do not fit"
        );
        assert_eq!(
            q.checked_mul("9.8765432101".parse().unwrap()).unwrap().scale(),
            20,
            "checked_mul rounds"
        );
        assert_eq!(
            exact_mul(q, dec!(0.0125)),
            Some("125000.0041666666666625".parse().unwrap())
        );
        assert_eq!(exact_mul(dec!(2.50), dec!(4.000)), Some(dec!(10)));
        assert_eq!(exact_mul(dec!(2.50), dec!(4.000)).unwrap().scale(), 5);
    }

    #[test]
    fn one_division_gives_the_long_divisions_digits() {
        // Mantissas as pricing meets them (cores × seconds × bytes over
        // bytes × 3600) and at the edges where n · 10^dp stops fitting.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut fast = 0;
        for _ in 0..20_000 {
            let n = ((next() as i128) * (next() % 1_000_000) as i128) >> (next() % 40);
            let d = ((next() as i128) >> (next() % 64)).max(1);
            for dp in [0, 2, 12, 22, 28] {
                let want = long_divide(n, d, dp);
                assert_eq!(divide(n, d, dp), want, "{n} / {d} to {dp} places");
                if 10i128.checked_pow(dp).and_then(|p| n.checked_mul(p)).is_some() {
                    fast += 1;
                }
            }
        }
        // Both paths were taken.
        assert!(fast > 10_000 && fast < 100_000, "{fast}");
        assert_eq!(divide(i128::MAX / 10, 3, 12), None);
        assert_eq!(divide(7, 3, 12), Some((2_333_333_333_333, 1)));
    }

    #[test]
    fn ratios_are_exact_however_long_the_quotient() {
        // 112 cores × 536,115 s × 0.045 / 3600.
        let v = ratio(
            &[dec!(112), dec!(536115), dec!(0.045)],
            &[dec!(3600)],
            22,
            Cut::Truncate,
        )
        .unwrap();
        assert_eq!(v.to_string(), "750.5610000000000000000000");
        // 2/3 truncated and rounded; a tie rounds away from zero.
        assert_eq!(
            ratio(&[dec!(2)], &[dec!(3)], 22, Cut::Truncate).unwrap().to_string(),
            "0.6666666666666666666666"
        );
        assert_eq!(
            ratio(&[dec!(2)], &[dec!(3)], 12, Cut::Round).unwrap().to_string(),
            "0.666666666667"
        );
        assert_eq!(
            ratio(&[dec!(1)], &[dec!(8)], 2, Cut::Round).unwrap().to_string(),
            "0.13"
        );
        assert_eq!(
            ratio(&[dec!(1)], &[dec!(8)], 2, Cut::Truncate).unwrap().to_string(),
            "0.12"
        );
        // Scales on both sides: 0.5 / 0.25 = 2; 7 TB-days × 5.5 / 31.
        assert_eq!(
            ratio(&[dec!(0.5)], &[dec!(0.25)], 3, Cut::Round).unwrap().to_string(),
            "2.000"
        );
        assert_eq!(
            ratio(&[dec!(7), dec!(5.5)], &[dec!(31)], 22, Cut::Truncate)
                .unwrap()
                .to_string(),
            "1.2419354838709677419354"
        );
        // A divisor of zero, a negative factor, a product beyond 128 bits.
        assert_eq!(ratio(&[dec!(1)], &[dec!(0)], 2, Cut::Round), None);
        assert_eq!(ratio(&[dec!(-1)], &[dec!(3)], 2, Cut::Round), None);
        let big = Decimal::from(u64::MAX);
        assert_eq!(ratio(&[big, big, big], &[dec!(1)], 0, Cut::Round), None);
    }

    #[test]
    fn negating_zero_gives_zero() {
        assert!(!negate(dec!(0.00)).is_sign_negative());
        assert_eq!(negate(dec!(0.00)).to_string(), "0.00");
        assert_eq!(negate(dec!(2.50)).to_string(), "-2.50");
    }

    #[test]
    fn money_rounds_half_away_from_zero() {
        assert_eq!(round_money(dec!(0.125)), dec!(0.13));
        assert_eq!(round_money(dec!(-0.125)), dec!(-0.13));
        assert_eq!(round_money(dec!(0.124999)), dec!(0.12));
        assert_eq!(round_money(dec!(2.675)), dec!(2.68));
    }

    #[test]
    fn sizes_use_powers_of_1024() {
        let check = |s: &str, default: u64, expected: u64| {
            assert_eq!(Bytes::parse(s, default), Ok(Bytes(expected)), "{s}");
        };
        check("12GB", 1, 12 * GIB);
        check("12gb", 1, 12 * GIB);
        check("12G", 1, 12 * GIB);
        check("1993mb", 1, 1993 * MIB);
        check("4194304kb", 1, 4 * GIB);
        check("143425316860b", 1, 143_425_316_860);
        check("62.50G", 1, 67_108_864_000);
        // To the nearest byte, a half byte up (docs/rules.md).
        check("2.5b", 1, 3);
        check("2.4b", 1, 2);
        check("1024", 1, 1024);
        check("3000", MIB, 3000 * MIB);
        check("1TB", 1, TIB);
    }

    #[test]
    fn bad_sizes_say_why() {
        assert!(
            Bytes::parse("GB", 1)
                .unwrap_err()
                .contains("does not start with a number")
        );
        assert!(Bytes::parse("12XB", 1).unwrap_err().contains("unknown size unit"));
        assert!(Bytes::parse("1.2.3G", 1).unwrap_err().contains("not a number"));
        assert!(Bytes::parse("99999999999PB", 1).unwrap_err().contains("too large"));
        // Exponent notation is named, not "an unknown unit" or "not a number".
        for s in ["1e30", "2E+9", "1.5e-3"] {
            let e = Bytes::parse(s, 1).unwrap_err();
            assert!(e.contains("exponent notation is not read"), "{s}: {e}");
        }
        assert!(Bytes::parse("1eb", 1).unwrap_err().contains("unknown size unit"));
    }

    #[test]
    fn sizes_display_in_the_largest_exact_unit() {
        assert_eq!(Bytes(12 * GIB).to_string(), "12GB");
        assert_eq!(Bytes(1993 * MIB).to_string(), "1993MB");
        assert_eq!(Bytes(3500).to_string(), "3500B");
    }

    #[test]
    fn priced_line_keeps_quantity_times_rate() {
        let p = Priced::new(Quantity::<CoreHour>::new(dec!(8)), Rate::new(dec!(0.0125))).unwrap();
        assert_eq!(p.amount_exact, dec!(0.1));
        assert_eq!(p.amount, dec!(0.10));
        assert_eq!(p.metric, Metric::CoreHours);
    }
}
