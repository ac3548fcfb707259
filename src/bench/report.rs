//! The result table and the number formats it uses.

use std::fmt::Write as _;
use std::time::Duration;

use super::Report;

/// The table, the notes and the settings, as text.
pub fn render(r: &Report) -> String {
    let mut rows = vec![[
        "figure".to_owned(),
        "measured".to_owned(),
        "baseline".to_owned(),
        "ratio".to_owned(),
        "target".to_owned(),
        "result".to_owned(),
    ]];
    for f in &r.figures {
        rows.push([
            f.figure.clone(),
            f.measured.clone(),
            f.baseline.clone(),
            f.ratio.map_or("–".into(), |x| format!("{x:.2}")),
            f.target.clone(),
            if f.pass { "pass" } else { "FAIL" }.into(),
        ]);
    }
    let mut out = String::new();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..6).map(width).collect();
    for (n, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            let _ = writeln!(out, "|-{}-|", rule.join("-|-"));
        }
    }
    let _ = writeln!(out, "\nset-up:");
    for n in &r.notes {
        let _ = writeln!(out, "  {n}");
    }
    if !r.bounds.is_empty() {
        let _ = writeln!(out, "\nbounds (PostgreSQL alone, same run):");
        for b in &r.bounds {
            let _ = writeln!(out, "  {b}");
        }
    }
    let _ = writeln!(out, "\nPostgreSQL:");
    for (k, v) in &r.settings {
        let _ = writeln!(out, "  {k} = {v}");
    }
    out
}

pub(super) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub(super) fn count(n: u64) -> f64 {
    n as f64
}

pub(super) fn per_second(n: u64, d: Duration) -> u64 {
    let rate = count(n) / d.as_secs_f64().max(1e-9);
    // A rate of jobs per second fits a u64 by far.
    rate.round().clamp(0.0, 1e15) as u64
}

pub(super) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

pub(super) fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Latencies near a millisecond, to the hundredth.
pub(super) fn fine_millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// 1234567 -> "1,234,567".
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::measure::vm_hwm_kb;
    use super::*;

    #[test]
    fn grouping_and_medians() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        let ms = Duration::from_millis;
        assert_eq!(median(vec![ms(9), ms(1), ms(5)]), ms(5));
        assert_eq!(per_second(1000, Duration::from_millis(250)), 4000);
        assert_eq!(
            vm_hwm_kb("Name:\tx\nVmPeak:\t 9 kB\nVmHWM:\t   40960 kB\n"),
            Some(40960)
        );
        assert_eq!(vm_hwm_kb("Name:\tx\n"), None);
    }
}
