//! Calendar months, the billing time zone, and local times (docs/rules.md D6, D7).
//!
//! A job's charges belong to the month in which it ended, read in the
//! center's time zone; storage is billed per local calendar day. Everything
//! here takes the time zone as an argument: no clock, no environment.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Days, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Serialize, Serializer};

/// A calendar month, the accounting period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    first: NaiveDate,
}

impl Month {
    pub fn new(year: i32, month: u32) -> Option<Month> {
        NaiveDate::from_ymd_opt(year, month, 1).map(|first| Month { first })
    }

    /// The month containing `date`.
    pub fn of_date(date: NaiveDate) -> Month {
        Month {
            first: date.with_day(1).expect("day 1 exists in every month"),
        }
    }

    /// The accounting month of an instant: its calendar month in `tz`.
    pub fn of_instant(t: DateTime<Utc>, tz: Tz) -> Month {
        Month::of_date(t.with_timezone(&tz).date_naive())
    }

    pub fn first_day(self) -> NaiveDate {
        self.first
    }

    pub fn year(self) -> i32 {
        self.first.year()
    }

    pub fn month(self) -> u32 {
        self.first.month()
    }

    pub fn next(self) -> Month {
        Month {
            first: self
                .first
                .checked_add_months(chrono::Months::new(1))
                .expect("date in range"),
        }
    }

    pub fn prev(self) -> Month {
        Month {
            first: self
                .first
                .checked_sub_months(chrono::Months::new(1))
                .expect("date in range"),
        }
    }

    pub fn last_day(self) -> NaiveDate {
        self.next().first.pred_opt().expect("date in range")
    }

    pub fn days(self) -> u32 {
        self.last_day().day()
    }

    /// Every local calendar day of the month, in order.
    pub fn iter_days(self) -> impl Iterator<Item = NaiveDate> {
        let first = self.first;
        (0..u64::from(self.days())).map(move |i| first + Days::new(i))
    }

    /// The first instant of the month in `tz`.
    pub fn start(self, tz: Tz) -> DateTime<Utc> {
        start_of_day(self.first, tz)
    }

    /// The first instant after the month in `tz`.
    pub fn end(self, tz: Tz) -> DateTime<Utc> {
        self.next().start(tz)
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year(), self.month())
    }
}

impl Serialize for Month {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Month {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Month, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Month {
    type Err = String;

    /// `YYYY-MM`.
    fn from_str(s: &str) -> Result<Month, String> {
        let bad = || format!("{s:?} is not a month: write it as YYYY-MM, e.g. 2026-03");
        let (y, m) = s.trim().split_once('-').ok_or_else(bad)?;
        if y.len() != 4 || m.len() != 2 {
            return Err(bad());
        }
        let year: i32 = y.parse().map_err(|_| bad())?;
        let month: u32 = m.parse().map_err(|_| bad())?;
        Month::new(year, month).ok_or_else(bad)
    }
}

/// The first instant of a local calendar day. Where a DST change skips
/// midnight, the day starts at the first local time that exists.
pub fn start_of_day(date: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let midnight = date.and_hms_opt(0, 0, 0).expect("midnight is a valid time");
    // Gaps are at most a few hours; step forward minute by minute.
    (0..24 * 60)
        .find_map(
            |minute| match tz.from_local_datetime(&(midnight + chrono::Duration::minutes(minute))) {
                LocalResult::Single(t) => Some(t),
                LocalResult::Ambiguous(earliest, _) => Some(earliest),
                LocalResult::None => None,
            },
        )
        .expect("every local day has a first instant")
        .with_timezone(&Utc)
}

/// How a local wall-clock time without a zone became an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalTimeError {
    /// The local time does not exist (skipped by a DST change).
    Skipped,
}

/// Interpret a scheduler's local wall-clock time in `tz`. A time repeated by
/// a DST change (the autumn hour) is taken as its first occurrence; a time
/// skipped by a DST change is an error, since no clock showed it.
pub fn local_to_utc(local: NaiveDateTime, tz: Tz) -> Result<DateTime<Utc>, LocalTimeError> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(earliest, _) => Ok(earliest.with_timezone(&Utc)),
        LocalResult::None => Err(LocalTimeError::Skipped),
    }
}

/// Parse an IANA time zone name (`UTC`, `Europe/Amsterdam`).
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>()
        .map_err(|_| format!("{name:?} is not an IANA time zone name (e.g. \"UTC\", \"America/New_York\")"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn months_parse_and_count_their_days() {
        let check = |s: &str, days: u32| {
            let m: Month = s.parse().unwrap();
            assert_eq!(m.days(), days, "{s}");
            assert_eq!(m.to_string(), s);
            assert_eq!(m.iter_days().count() as u32, days);
        };
        check("2026-02", 28);
        check("2024-02", 29);
        check("2026-04", 30);
        check("2026-12", 31);
        assert!("2026-13".parse::<Month>().is_err());
        assert!("2026-1".parse::<Month>().is_err());
        assert!("March".parse::<Month>().is_err());
        assert_eq!("2026-12".parse::<Month>().unwrap().next().to_string(), "2027-01");
        assert_eq!("2026-01".parse::<Month>().unwrap().prev().to_string(), "2025-12");
    }

    #[test]
    fn the_accounting_month_is_read_in_the_billing_time_zone() {
        let ny: Tz = "America/New_York".parse().unwrap();
        // 2026-04-01T03:30Z is still March 31 in New York.
        assert_eq!(
            Month::of_instant(utc("2026-04-01T03:30:00Z"), ny).to_string(),
            "2026-03"
        );
        assert_eq!(
            Month::of_instant(utc("2026-04-01T03:30:00Z"), Tz::UTC).to_string(),
            "2026-04"
        );
        // Exactly 00:00 of the 1st, local time, belongs to the new month.
        assert_eq!(
            Month::of_instant(utc("2026-04-01T04:00:00Z"), ny).to_string(),
            "2026-04"
        );
        assert_eq!(
            Month::of_instant(utc("2026-03-31T23:59:59Z"), Tz::UTC).to_string(),
            "2026-03"
        );
    }

    #[test]
    fn local_times_around_dst_changes() {
        let ams: Tz = "Europe/Amsterdam".parse().unwrap();
        let t = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap();
        // Spring forward: 02:30 on 2026-03-29 never happened.
        assert_eq!(
            local_to_utc(t("2026-03-29T02:30:00"), ams),
            Err(LocalTimeError::Skipped)
        );
        // Autumn: 02:30 on 2026-10-25 happened twice; the first is CEST (+02:00).
        assert_eq!(
            local_to_utc(t("2026-10-25T02:30:00"), ams),
            Ok(utc("2026-10-25T00:30:00Z"))
        );
        // A day with a DST change is 23 or 25 hours long.
        let spring = NaiveDate::from_ymd_opt(2026, 3, 29).unwrap();
        let len = start_of_day(spring.succ_opt().unwrap(), ams) - start_of_day(spring, ams);
        assert_eq!(len.num_hours(), 23);
    }

    #[test]
    fn a_day_whose_midnight_is_skipped_starts_when_the_clock_resumes() {
        // Santiago (Chile) moved clocks from 24:00 to 01:00 on 2022-09-11.
        let scl: Tz = "America/Santiago".parse().unwrap();
        let day = NaiveDate::from_ymd_opt(2022, 9, 11).unwrap();
        assert_eq!(start_of_day(day, scl), utc("2022-09-11T04:00:00Z"));
    }
}
