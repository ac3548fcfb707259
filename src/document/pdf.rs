//! A statement as a PDF, with the same content as the HTML document:
//! written with `pdf-writer` (the typst project's step-by-step PDF writer:
//! small, no dependencies of its own beyond four tiny crates, kept up with
//! the PDF specification), in the standard Helvetica and Courier fonts that
//! every PDF reader has, so nothing is embedded and no browser or external
//! program is needed. Text is WinAnsi-encoded (Latin-1 and the usual
//! punctuation); a letter WinAnsi cannot encode (`ř`, `Ł`, Cyrillic, Greek)
//! is shown in DejaVu Sans, embedded as a subset only when a document has
//! one ([`unicode`]); Chinese, Japanese and Korean print as `?`. Numbers
//! are right-aligned with Helvetica's own widths (every digit is 556/1000
//! em).
//!
//! Content streams are left uncompressed: the document stays small (a few
//! tens of kilobytes) and its text can be read back by a program.

use pdf_writer::{Content, Finish, Name, Pdf, Rect, Ref, TextStr};
use rust_decimal::Decimal;

use super::{ChartData, line_is_product, money};
use crate::service::statement::{Details, Statement, Status, StorageBilling};

const PAGE_W: f32 = 595.0;
const PAGE_H: f32 = 842.0;
const MARGIN: f32 = 48.0;
const BOTTOM: f32 = 56.0;

const REGULAR: Name<'static> = Name(b"F1");
const BOLD: Name<'static> = Name(b"F2");
const MONO: Name<'static> = Name(b"F3");

mod unicode;

/// Text as WinAnsi bytes (PDF's standard Latin encoding), `?` for a
/// character it has not.
fn win_ansi(s: &str) -> Vec<u8> {
    s.chars().map(|c| win_ansi_byte(c).unwrap_or(b'?')).collect()
}

/// A character's byte in WinAnsi, if it has one.
fn win_ansi_byte(c: char) -> Option<u8> {
    Some(match c {
        ' '..='~' => c as u8,
        '\u{a0}'..='\u{ff}' => c as u32 as u8,
        '€' => 0x80,
        '‚' => 0x82,
        'ƒ' => 0x83,
        '„' => 0x84,
        '…' => 0x85,
        '†' => 0x86,
        '‡' => 0x87,
        'ˆ' => 0x88,
        '‰' => 0x89,
        'Š' => 0x8a,
        '‹' => 0x8b,
        'Œ' => 0x8c,
        'Ž' => 0x8e,
        '‘' => 0x91,
        '’' => 0x92,
        '“' => 0x93,
        '”' => 0x94,
        '•' => 0x95,
        '–' => 0x96,
        '—' => 0x97,
        '˜' => 0x98,
        '™' => 0x99,
        'š' => 0x9a,
        '›' => 0x9b,
        'œ' => 0x9c,
        'ž' => 0x9e,
        'Ÿ' => 0x9f,
        _ => return None,
    })
}

/// A character's width in Helvetica, per 1000 em: exact for what numbers
/// are made of, an average for letters (used to fit text, not to align it);
/// a letter WinAnsi has not, its width in the embedded font that shows it
/// (`?`'s where none does).
fn width_of(c: char, bold: bool) -> f32 {
    if win_ansi_byte(c).is_none() {
        return unicode::advance(c, bold).unwrap_or(556.0);
    }
    match c {
        '0'..='9' => 556.0,
        ',' | '.' | ' ' | ':' | '/' => 278.0,
        '-' => 333.0,
        '%' => 889.0,
        '…' | '—' => 1000.0,
        'M' | 'W' => 944.0,
        'A'..='Z' => 722.0,
        'i' | 'j' | 'l' => 222.0,
        'm' | 'w' => 833.0,
        _ if c.is_uppercase() => 722.0,
        _ if bold => 611.0,
        _ => 540.0,
    }
}

fn text_width(s: &str, size: f32, bold: bool) -> f32 {
    s.chars().map(|c| width_of(c, bold)).sum::<f32>() * size / 1000.0
}

/// `s`, cut with `…` to fit `width` points.
fn fit(s: &str, width: f32, size: f32) -> String {
    if text_width(s, size, false) <= width {
        return s.to_owned();
    }
    let mut out = String::new();
    for c in s.chars() {
        if text_width(&out, size, false) + (width_of(c, false) + width_of('…', false)) * size / 1000.0 > width {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// `s` in lines of at most `width` points: its words wrapped, a word
/// longer than a line broken; at most `max` lines, the last cut with `…`
/// when more is left.
fn wrap(s: &str, width: f32, size: f32, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if text_width(&candidate, size, false) <= width {
            line = candidate;
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        // The word alone, broken where a line is full.
        for c in word.chars() {
            if !line.is_empty() && text_width(&line, size, false) + width_of(c, false) * size / 1000.0 > width {
                lines.push(std::mem::take(&mut line));
            }
            line.push(c);
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    if lines.len() > max {
        let rest = lines.split_off(max - 1).join(" ");
        lines.push(fit(&format!("{rest}…"), width, size));
    }
    lines
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// Pages being written, top to bottom, with a cursor.
struct Pages {
    done: Vec<Content>,
    page: Content,
    y: f32,
    /// The font for letters WinAnsi has not.
    fonts: unicode::Fallback,
}

impl Pages {
    fn new() -> Pages {
        Pages {
            done: Vec::new(),
            page: Content::new(),
            y: PAGE_H - MARGIN,
            fonts: unicode::Fallback::default(),
        }
    }

    /// Room for `h` points more, else a new page.
    fn need(&mut self, h: f32) {
        if self.y - h < BOTTOM {
            let full = std::mem::replace(&mut self.page, Content::new());
            self.done.push(full);
            self.y = PAGE_H - MARGIN;
        }
    }

    fn text(&mut self, x: f32, y: f32, font: Name, size: f32, s: &str) {
        self.page.begin_text().next_line(x, y);
        self.fonts.show(&mut self.page, font, font == BOLD, size, s);
        self.page.end_text();
    }

    fn text_right(&mut self, right: f32, y: f32, font: Name, size: f32, s: &str) {
        let w = text_width(s, size, font == BOLD);
        self.text(right - w, y, font, size, s);
    }

    fn fill(&mut self, rgb: (f32, f32, f32), x: f32, y: f32, w: f32, h: f32) {
        self.page
            .save_state()
            .set_fill_rgb(rgb.0, rgb.1, rgb.2)
            .rect(x, y, w, h)
            .fill_nonzero()
            .restore_state();
    }

    fn rule(&mut self, y: f32, width: f32, gray: f32) {
        self.page
            .save_state()
            .set_stroke_rgb(gray, gray, gray)
            .set_line_width(width)
            .move_to(MARGIN, y)
            .line_to(PAGE_W - MARGIN, y)
            .stroke()
            .restore_state();
    }

    fn heading(&mut self, s: &str) {
        // With room for what follows it (a table's header and a row).
        self.need(64.0);
        self.y -= 22.0;
        self.page.save_state().set_fill_rgb(0.12, 0.37, 0.6);
        self.text(MARGIN, self.y, BOLD, 11.5, s);
        self.page.restore_state();
        self.rule(self.y - 4.0, 0.5, 0.8);
        self.y -= 10.0;
    }

    fn paragraph(&mut self, s: &str, size: f32) {
        // Words wrapped to the width of the page.
        let lines = wrap(s, PAGE_W - 2.0 * MARGIN, size, usize::MAX);
        for l in lines.into_iter().filter(|l| !l.is_empty()) {
            self.need(size + 4.0);
            self.y -= size + 3.0;
            self.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
            self.text(MARGIN, self.y, REGULAR, size, &l);
            self.page.restore_state();
        }
    }

    /// A table: columns (header, width, alignment), rows, and a footer row
    /// in bold; the header repeats on each new page.
    fn table(&mut self, cols: &[(&str, f32, Align)], rows: &[Vec<String>], footer: Option<Vec<String>>) {
        const SIZE: f32 = 8.8;
        const ROW: f32 = 13.5;
        // The footer stays on the page of the last row (a total alone atop a
        // page reads as nobody's), and so the header of a one-row table.
        const FOOTER: f32 = ROW + 5.0;
        let keep = if footer.is_some() { FOOTER } else { 0.0 };
        let first_row_keeps = if rows.len() == 1 { keep } else { 0.0 };
        let header = |p: &mut Pages| {
            p.need(ROW * 2.0 + first_row_keeps);
            p.y -= ROW;
            let mut x = MARGIN;
            p.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
            for (name, w, align) in cols {
                match align {
                    Align::Left => p.text(x + 3.0, p.y, BOLD, 7.5, &name.to_uppercase()),
                    Align::Right => p.text_right(x + w - 3.0, p.y, BOLD, 7.5, &name.to_uppercase()),
                }
                x += w;
            }
            p.page.restore_state();
            p.rule(p.y - 4.0, 0.5, 0.75);
        };
        // A text cell wraps to at most this many lines (a correction's
        // reason, what it corrects, a long name), each this much lower.
        const LINES: usize = 6;
        const LINE: f32 = 10.5;
        header(self);
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<Vec<String>> = cols
                .iter()
                .zip(row)
                .map(|((_, w, align), cell)| match align {
                    Align::Left => wrap(cell, w - 6.0, SIZE, LINES),
                    Align::Right => vec![cell.clone()],
                })
                .collect();
            let extra = LINE * (cells.iter().map(Vec::len).max().unwrap_or(1).max(1) - 1) as f32;
            let keep = if i + 1 == rows.len() { keep } else { 0.0 };
            if self.y - ROW - extra - keep < BOTTOM {
                self.need(ROW * 3.0 + extra + keep);
                header(self);
            }
            self.y -= ROW;
            if i % 2 == 1 {
                self.fill(
                    (0.953, 0.965, 0.976),
                    MARGIN,
                    self.y - 4.0 - extra,
                    PAGE_W - 2.0 * MARGIN,
                    ROW + extra,
                );
            }
            self.cells(cols, &cells, REGULAR, SIZE, LINE);
            self.y -= extra;
        }
        if let Some(f) = footer {
            self.need(FOOTER);
            self.rule(self.y - 5.0, 0.8, 0.1);
            self.y -= ROW + 1.0;
            // Its label, left, over the empty cells after it; its amounts.
            self.text(MARGIN + 3.0, self.y, BOLD, SIZE, &f[0]);
            let mut x = MARGIN;
            for (i, ((_, w, _), cell)) in cols.iter().zip(&f).enumerate() {
                if i > 0 && !cell.is_empty() {
                    self.text_right(x + w - 3.0, self.y, BOLD, SIZE, cell);
                }
                x += w;
            }
        }
        self.y -= 4.0;
    }

    /// A row's cells, each in its lines (one `line` below the other) from
    /// the row's baseline down.
    fn cells(&mut self, cols: &[(&str, f32, Align)], row: &[Vec<String>], font: Name, size: f32, line: f32) {
        let mut x = MARGIN;
        for ((_, w, align), lines) in cols.iter().zip(row) {
            for (k, s) in lines.iter().enumerate() {
                let y = self.y - line * k as f32;
                match align {
                    Align::Left => self.text(x + 3.0, y, font, size, s),
                    Align::Right => self.text_right(x + w - 3.0, y, font, size, s),
                }
            }
            x += w;
        }
    }
}

fn rgb(hex: &str) -> (f32, f32, f32) {
    let v = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(128) as f32 / 255.0;
    (v(1), v(3), v(5))
}

fn m(d: Decimal) -> String {
    money(d)
}

/// A statement as a PDF document (A4), the same content as
/// [`super::statement_html`].
pub fn statement_pdf(s: &Statement, d: &Details, generated: &str) -> Vec<u8> {
    let mut p = Pages::new();
    // Header.
    // The title and center fit left of the status (170 pt on the right).
    let room = PAGE_W - 2.0 * MARGIN - 170.0;
    p.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
    p.text(MARGIN, p.y - 10.0, REGULAR, 9.5, &fit(&s.center, room, 9.5));
    p.page.restore_state();
    let first = s.month.first_day();
    let title = format!("Statement for {} — {}", first.format("%B %Y"), s.project.code);
    let mut size = 17.0;
    while size > 11.0 && text_width(&title, size, true) > room {
        size -= 1.0;
    }
    p.text(MARGIN, p.y - 30.0, BOLD, size, &fit(&title, room, size));
    let (badge, line, color) = match &s.status {
        Status::Final { number, closed_at, .. } => (
            format!("Statement No. {number}"),
            format!("final — closed {}", s.local(*closed_at).format("%Y-%m-%d")),
            (0.11, 0.37, 0.17),
        ),
        Status::ClosedWithoutStatement { closed_at } => (
            "CLOSED".to_owned(),
            // As short as the provisional line: the title's room is left of it.
            format!("closed {}: none issued", s.local(*closed_at).format("%Y-%m-%d")),
            (0.11, 0.37, 0.17),
        ),
        Status::BeforeTheLedger { first_closed } => (
            "CLOSED".to_owned(),
            format!("before {first_closed}: none issued"),
            (0.11, 0.37, 0.17),
        ),
        Status::Provisional => (
            "PROVISIONAL".to_owned(),
            "the month is open and may still change".to_owned(),
            (0.54, 0.33, 0.0),
        ),
    };
    p.page.save_state().set_fill_rgb(color.0, color.1, color.2);
    p.text_right(PAGE_W - MARGIN, p.y - 10.0, BOLD, 10.0, &badge);
    p.page.restore_state();
    p.text_right(PAGE_W - MARGIN, p.y - 24.0, REGULAR, 8.5, &line);
    p.y -= 42.0;
    p.page
        .save_state()
        .set_stroke_rgb(0.12, 0.37, 0.6)
        .set_line_width(2.2)
        .move_to(MARGIN, p.y)
        .line_to(PAGE_W - MARGIN, p.y)
        .stroke()
        .restore_state();
    p.y -= 8.0;
    // Facts.
    let mut facts: Vec<(&str, String)> = vec![("Project", s.project.code.clone())];
    if !s.project.name.is_empty() {
        facts.push(("Name", s.project.name.clone()));
    }
    if !s.project.pi.is_empty() {
        facts.push(("Principal investigator", s.project.pi.clone()));
    }
    facts.push(("Rate class", s.project.rate_class.join(", then ")));
    facts.push(("Month", s.month.to_string()));
    facts.push(("Currency", s.currency.clone()));
    for (k, v) in &facts {
        p.y -= 13.0;
        p.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
        p.text(MARGIN, p.y, REGULAR, 9.0, k);
        p.page.restore_state();
        p.text(
            MARGIN + 120.0,
            p.y,
            REGULAR,
            9.0,
            &fit(v, PAGE_W - 2.0 * MARGIN - 120.0, 9.0),
        );
    }
    if let Status::Final {
        seal_algorithm, seal, ..
    } = &s.status
    {
        p.y -= 13.0;
        p.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
        p.text(MARGIN, p.y, REGULAR, 9.0, "Month seal");
        p.page.restore_state();
        p.text(MARGIN + 120.0, p.y, MONO, 7.0, &format!("{seal_algorithm} {seal}"));
    }

    // Summary.
    p.heading("Summary");
    let right = PAGE_W - MARGIN;
    for (k, v) in [
        ("Compute", s.compute_total()),
        ("Storage", s.storage_total()),
        ("Discounts", s.discounts_total()),
        ("Corrections", s.corrections_total()),
    ] {
        p.y -= 13.0;
        p.text(right - 230.0, p.y, REGULAR, 9.5, k);
        p.text_right(right, p.y, REGULAR, 9.5, &m(v));
    }
    p.y -= 6.0;
    p.page
        .save_state()
        .set_line_width(1.2)
        .move_to(right - 230.0, p.y)
        .line_to(right, p.y)
        .stroke()
        .restore_state();
    p.y -= 15.0;
    p.text(right - 230.0, p.y, BOLD, 11.5, &format!("Total {}", s.currency));
    p.text_right(right, p.y, BOLD, 11.5, &m(s.total));

    // Compute.
    p.heading("Compute");
    if s.compute.is_empty() {
        p.paragraph("No jobs charged this month.", 9.0);
    } else {
        let rows: Vec<Vec<String>> = s
            .compute
            .iter()
            .map(|l| {
                let metric = super::metric_label(l);
                vec![
                    l.cluster.clone(),
                    l.node_type.clone(),
                    if l.late { format!("{metric} (late)") } else { metric },
                    l.jobs.to_string(),
                    l.quantity.normalize().to_string(),
                    l.unit_rate.normalize().to_string(),
                    if line_is_product(l) {
                        m(l.amount)
                    } else {
                        format!("{} *", m(l.amount))
                    },
                ]
            })
            .collect();
        p.table(
            &[
                ("Cluster", 80.0, Align::Left),
                ("Node type", 80.0, Align::Left),
                ("Metric", 90.0, Align::Left),
                ("Jobs", 45.0, Align::Right),
                ("Quantity", 85.0, Align::Right),
                ("Rate", 50.0, Align::Right),
                ("Amount", 69.0, Align::Right),
            ],
            &rows,
            Some(vec![
                "Compute subtotal".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                m(s.compute_total()),
            ]),
        );
        if s.compute.iter().any(|l| !line_is_product(l)) {
            p.paragraph(
                "* Each job's amount is computed from its exact quantity and rounded to the cent by itself; the \
                 line's amount is the sum of its jobs' amounts, which differs here from the quantity shown × the rate.",
                7.5,
            );
        }
    }

    // Storage.
    p.heading("Storage (reserved quota)");
    match &s.storage_billing {
        StorageBilling::NotBilled => p.paragraph(
            "This month's storage has not been billed yet: this section will change.",
            9.0,
        ),
        StorageBilling::BeforeTheLedger => p.paragraph("No storage was billed: the month is before the ledger's.", 9.0),
        StorageBilling::Waived { storage_waiver_reason } => p.paragraph(
            &format!("Storage was not billed this month: {storage_waiver_reason}."),
            9.0,
        ),
        StorageBilling::Billed { .. } if s.storage.is_empty() => p.paragraph("No storage quota this month.", 9.0),
        StorageBilling::Billed { .. } => {
            let rows: Vec<Vec<String>> = s
                .storage
                .iter()
                .map(|l| {
                    vec![
                        l.tb_days.normalize().to_string(),
                        l.quantity.normalize().to_string(),
                        l.unit_rate.normalize().to_string(),
                        m(l.amount),
                    ]
                })
                .collect();
            p.table(
                &[
                    ("TB-days", 130.0, Align::Right),
                    ("TB-months", 130.0, Align::Right),
                    ("Rate per TB-month", 130.0, Align::Right),
                    ("Amount", 109.0, Align::Right),
                ],
                &rows,
                Some(vec![
                    "Storage subtotal".into(),
                    String::new(),
                    String::new(),
                    m(s.storage_total()),
                ]),
            );
        }
    }

    // Discounts.
    if !s.discounts.is_empty() {
        p.heading("Discounts");
        let rows: Vec<Vec<String>> = s
            .discounts
            .iter()
            .map(|l| {
                vec![
                    l.on.clone(),
                    l.scope.clone(),
                    l.reason.clone(),
                    format!("{} %", l.percent.normalize()),
                    m(l.list_amount),
                    m(l.amount),
                ]
            })
            .collect();
        p.table(
            &[
                ("On", 60.0, Align::Left),
                ("Whose", 80.0, Align::Left),
                ("Reason", 165.0, Align::Left),
                ("Percent", 55.0, Align::Right),
                ("List price", 70.0, Align::Right),
                ("Discount", 69.0, Align::Right),
            ],
            &rows,
            Some(vec![
                "Discounts".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                m(s.discounts_total()),
            ]),
        );
    }

    // Corrections.
    p.heading("Corrections");
    if s.corrections.is_empty() {
        p.paragraph("None this month.", 9.0);
    } else {
        let rows: Vec<Vec<String>> = s
            .corrections
            .iter()
            .map(|c| {
                vec![
                    s.local(c.posted_at).format("%Y-%m-%d").to_string(),
                    c.kind.clone(),
                    c.corrects.clone().unwrap_or_default(),
                    c.reason.clone().unwrap_or_default(),
                    c.author.clone(),
                    m(c.amount),
                ]
            })
            .collect();
        p.table(
            &[
                ("Date", 56.0, Align::Left),
                ("Kind", 60.0, Align::Left),
                ("Of", 110.0, Align::Left),
                ("Reason", 153.0, Align::Left),
                ("By", 60.0, Align::Left),
                ("Amount", 60.0, Align::Right),
            ],
            &rows,
            Some(vec![
                "Corrections".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                m(s.corrections_total()),
            ]),
        );
    }

    // Budget.
    if !s.budgets.is_empty() {
        p.heading("Budget");
        let rows: Vec<Vec<String>> = s
            .budgets
            .iter()
            .map(|b| {
                vec![
                    crate::domain::budget::pool_label(b, &s.budgets).to_owned(),
                    s.local(b.at).format("%Y-%m-%d %H:%M %Z").to_string(),
                    m(b.allocated),
                    m(b.used),
                    m(b.held),
                    m(b.remaining),
                    format!("{:.1}", b.fraction_used * Decimal::ONE_HUNDRED),
                ]
            })
            .collect();
        p.table(
            &[
                ("Pool", 80.0, Align::Left),
                ("At", 115.0, Align::Left),
                ("Allocated", 70.0, Align::Right),
                ("Used", 62.0, Align::Right),
                ("Held", 50.0, Align::Right),
                ("Remaining", 72.0, Align::Right),
                ("% used", 50.0, Align::Right),
            ],
            &rows,
            None,
        );
    }

    // Spend by day: the heading with its chart.
    p.need(250.0);
    p.heading("Spend by day");
    if d.days.is_empty() {
        p.paragraph("Nothing was charged this month.", 9.0);
    } else {
        chart(&mut p, s, d);
    }

    // By user.
    p.heading("Who used it");
    if d.users.is_empty() {
        p.paragraph("No usage this month.", 9.0);
    } else {
        let mut users = d.users.clone();
        users.sort_by(|a, b| b.amount.cmp(&a.amount).then_with(|| a.key.cmp(&b.key)));
        let rows: Vec<Vec<String>> = users
            .iter()
            .map(|u| {
                vec![
                    u.key.clone(),
                    u.jobs.to_string(),
                    super::hours(u.core_hours),
                    super::hours(u.gpu_hours),
                    m(u.amount),
                ]
            })
            .collect();
        let total: Decimal = d.users.iter().map(|u| u.amount).sum();
        p.table(
            &[
                ("User", 170.0, Align::Left),
                ("Jobs", 70.0, Align::Right),
                ("Core-hours", 95.0, Align::Right),
                ("GPU-hours", 85.0, Align::Right),
                ("Amount", 79.0, Align::Right),
            ],
            &rows,
            Some(vec![
                "Total".into(),
                String::new(),
                String::new(),
                String::new(),
                m(total),
            ]),
        );
        p.paragraph(
            "Net of corrections and discounts, each counted with what it corrects; storage and adjustments are \
             not a user's.",
            8.0,
        );
    }
    p.y -= 8.0;
    p.paragraph(
        &format!(
            "Every number on this statement is the ledger's: the total is the sum of the month's ledger entries for \
             the project{}. Generated by hpc-ledger {} on {generated}.",
            if matches!(s.status, Status::Final { .. }) {
                "; the month seal covers every one of them (hpc-ledger verify recomputes it)"
            } else {
                ""
            },
            env!("CARGO_PKG_VERSION"),
        ),
        7.5,
    );
    finish(
        p,
        &format!("Statement {} {}", s.project.code, s.month),
        &format!("{} {} total {:.2} {}", s.project.code, s.month, s.total, s.currency),
    )
}

/// The daily spend as bars, like the HTML chart.
fn chart(p: &mut Pages, s: &Statement, d: &Details) {
    let c = ChartData::new(s, &d.days);
    let (h, left) = (150.0_f32, MARGIN + 52.0);
    p.need(h + 60.0);
    let top = p.y - 6.0;
    let plot_h = h - 22.0;
    let to_pt = |a: Decimal| c.fraction(a) as f32 * plot_h;
    let zero_y = top - to_pt(c.up);
    let width = PAGE_W - MARGIN - left;
    let step = width / c.slots.len() as f32;
    let bar = (step * 0.72).max(0.8);
    for (value, shown) in [
        (Decimal::ZERO, true),
        (c.up, c.up > Decimal::ZERO),
        (-c.down, c.down > Decimal::ZERO),
    ] {
        if !shown {
            continue;
        }
        let y = zero_y + to_pt(value);
        p.page
            .save_state()
            .set_stroke_rgb(0.84, 0.86, 0.89)
            .set_line_width(0.5)
            .move_to(left, y)
            .line_to(PAGE_W - MARGIN, y)
            .stroke()
            .restore_state();
        p.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
        p.text_right(left - 5.0, y - 2.5, REGULAR, 7.0, &m(value));
        p.page.restore_state();
    }
    for (i, (k, values)) in c.slots.iter().enumerate() {
        let x = left + step * i as f32 + (step - bar) / 2.0;
        let mut y_up = zero_y;
        let mut y_down = zero_y;
        for (j, a) in values.iter().enumerate() {
            if a.is_zero() {
                continue;
            }
            let pt = to_pt(a.abs()).max(0.4);
            if a.is_sign_positive() {
                p.fill(rgb(c.color(j)), x, y_up, bar, pt);
                y_up += pt;
            } else {
                y_down -= pt;
                p.fill(rgb(c.color(j)), x, y_down, bar, pt);
            }
        }
        if let Some(l) = k.label() {
            p.page.save_state().set_fill_rgb(0.36, 0.4, 0.46);
            let w = text_width(&l, 7.0, false);
            p.text(x + bar / 2.0 - w / 2.0, top - h, REGULAR, 7.0, &l);
            p.page.restore_state();
        }
    }
    p.y = top - h - 6.0;
    // Legend.
    let mut x = MARGIN;
    p.y -= 10.0;
    for j in 0..c.series.len() {
        let label = format!("{} {}", c.name(j), m(c.sum(j)));
        let w = text_width(&label, 8.5, false) + 24.0;
        if x + w > PAGE_W - MARGIN {
            x = MARGIN;
            p.y -= 12.0;
            p.need(14.0);
        }
        p.fill(rgb(c.color(j)), x, p.y - 1.0, 8.0, 8.0);
        p.text(x + 12.0, p.y, REGULAR, 8.5, &label);
        x += w;
    }
    p.y -= 4.0;
    p.paragraph(&c.note(&s.currency), 7.5);
}

/// The pages as one PDF, with a page number on each.
fn finish(mut p: Pages, title: &str, subject: &str) -> Vec<u8> {
    let last = std::mem::replace(&mut p.page, Content::new());
    p.done.push(last);
    let n = p.done.len();
    // The page numbers, bottom right, before the fonts are written: a
    // title may hold letters of the fallback font.
    let mut contents = std::mem::take(&mut p.done);
    for (i, content) in contents.iter_mut().enumerate() {
        let label = format!("{title} — page {} of {n}", i + 1);
        let w = text_width(&label, 7.5, false);
        content
            .save_state()
            .set_fill_rgb(0.36, 0.4, 0.46)
            .begin_text()
            .next_line(PAGE_W - MARGIN - w, 30.0);
        p.fonts.show(content, REGULAR, false, 7.5, &label);
        content.end_text().restore_state();
    }
    let mut pdf = Pdf::new();
    let catalog = Ref::new(1);
    let tree = Ref::new(2);
    let (regular, bold, mono, info) = (Ref::new(3), Ref::new(4), Ref::new(5), Ref::new(6));
    let first_page = 7;
    let page_ids: Vec<Ref> = (0..n).map(|i| Ref::new(first_page + 2 * i as i32)).collect();
    let fallback = p.fonts.write(&mut pdf, first_page + 2 * n as i32);
    pdf.catalog(catalog).pages(tree);
    pdf.pages(tree).kids(page_ids.iter().copied()).count(n as i32);
    for (font, base) in [(regular, "Helvetica"), (bold, "Helvetica-Bold"), (mono, "Courier")] {
        pdf.type1_font(font)
            .base_font(Name(base.as_bytes()))
            .encoding_predefined(Name(b"WinAnsiEncoding"));
    }
    pdf.document_info(info)
        .title(TextStr(title))
        .subject(TextStr(subject))
        .producer(TextStr(concat!("hpc-ledger ", env!("CARGO_PKG_VERSION"))));
    for (i, content) in contents.into_iter().enumerate() {
        let page_id = page_ids[i];
        let content_id = Ref::new(page_id.get() + 1);
        let mut page = pdf.page(page_id);
        page.media_box(Rect::new(0.0, 0.0, PAGE_W, PAGE_H));
        page.parent(tree);
        page.contents(content_id);
        let mut resources = page.resources();
        let mut fonts = resources.fonts();
        fonts.pair(REGULAR, regular).pair(BOLD, bold).pair(MONO, mono);
        for &(name, id) in &fallback {
            fonts.pair(name, id);
        }
        fonts.finish();
        resources.finish();
        page.finish();
        pdf.stream(content_id, &content.finish());
    }
    pdf.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text a PDF written by [`finish`] shows, a line for each text
    /// object, read back as a reader would: each string of a `Tj` decoded
    /// through its font, WinAnsi for the standard fonts, the document's own
    /// ToUnicode map for the fallback font (`/U1`). Only as much of PDF as
    /// these documents use.
    fn shown_text(pdf: &[u8]) -> String {
        let text = String::from_utf8_lossy(pdf);
        // The ToUnicode map: `<CID> <UTF-16BE>` lines.
        let mut to_unicode = std::collections::HashMap::new();
        if let Some(start) = text.find("beginbfchar") {
            let end = start + text[start..].find("endbfchar").unwrap();
            for line in text[start..end].lines().skip(1) {
                let hex: Vec<&str> = line.split(['<', '>', ' ']).filter(|s| !s.is_empty()).collect();
                if let [cid, unit] = hex[..] {
                    let cid = u16::from_str_radix(cid, 16).unwrap();
                    let c = char::from_u32(u32::from_str_radix(unit, 16).unwrap()).unwrap();
                    to_unicode.insert(cid, c);
                }
            }
        }
        // The pages' content streams: those whose dictionary has only a
        // length (not the font program, not the map).
        let mut streams = Vec::new();
        let mut from = 0;
        while let Some(k) = find(&pdf[from..], b"stream\n") {
            let at = from + k;
            if pdf[..at].ends_with(b"end") {
                from = at + 1;
                continue;
            }
            let dict = &pdf[..at];
            let dict = &dict[dict.len().saturating_sub(200)..];
            let dict = &dict[find_last(dict, b"obj").unwrap()..];
            let body = at + b"stream\n".len();
            let end = body + find(&pdf[body..], b"\nendstream").unwrap();
            if !dict.windows(7).any(|w| w == b"Length1") && !dict.windows(4).any(|w| w == b"CMap") {
                streams.push(&pdf[body..end]);
            }
            from = end;
        }
        let mut out = String::new();
        for b in streams {
            let mut font = String::new();
            let mut pending: Vec<u8> = Vec::new();
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'/' => {
                        let end = i + b[i..].iter().position(|c| *c == b' ').unwrap();
                        font = String::from_utf8_lossy(&b[i + 1..end]).into_owned();
                        i = end;
                    }
                    b'(' => {
                        pending.clear();
                        let mut depth = 1;
                        i += 1;
                        while depth > 0 {
                            match b[i] {
                                b'\\' => {
                                    i += 1;
                                    match b[i] {
                                        b'0'..=b'7' => {
                                            let digits = std::str::from_utf8(&b[i..i + 3]).unwrap();
                                            pending.push(u8::from_str_radix(digits, 8).unwrap());
                                            i += 2;
                                        }
                                        b'n' => pending.push(b'\n'),
                                        b'r' => pending.push(b'\r'),
                                        b't' => pending.push(b'\t'),
                                        b'b' => pending.push(8),
                                        b'f' => pending.push(12),
                                        c => pending.push(c),
                                    }
                                }
                                b'(' => {
                                    depth += 1;
                                    pending.push(b'(');
                                }
                                b')' => {
                                    depth -= 1;
                                    if depth > 0 {
                                        pending.push(b')');
                                    }
                                }
                                c => pending.push(c),
                            }
                            i += 1;
                        }
                    }
                    b'<' => {
                        let end = i + b[i..].iter().position(|c| *c == b'>').unwrap();
                        let hex = std::str::from_utf8(&b[i + 1..end]).unwrap();
                        pending = (0..hex.len() / 2)
                            .map(|k| u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).unwrap())
                            .collect();
                        i = end + 1;
                    }
                    b'T' if b[i..].starts_with(b"Tj") => {
                        if font.starts_with('U') {
                            for pair in pending.chunks(2) {
                                out.push(to_unicode[&u16::from_be_bytes([pair[0], pair[1]])]);
                            }
                        } else {
                            out.extend(pending.iter().map(|&c| match c {
                                0x80 => '€',
                                0x97 => '—',
                                c => char::from(c),
                            }));
                        }
                        i += 2;
                    }
                    b'E' if b[i..].starts_with(b"ET") => {
                        out.push('\n');
                        i += 2;
                    }
                    _ => i += 1,
                }
            }
        }
        out
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).rposition(|w| w == needle)
    }

    #[test]
    fn letters_winansi_has_not_are_shown_in_the_embedded_font() {
        // "Jiří Dvořák" printed as "Ji?í Dvo?ák" (PDF statements before
        // 2026-12-07).
        let lines = [
            "PI: Jiří Dvořák",
            "Łukasz Wróbel",
            "Лаборатория (Иванов)",
            "Δημήτρης",
            "张伟",
            "PI: שלום",
        ];
        let mut p = Pages::new();
        for (i, s) in lines.into_iter().enumerate() {
            p.text(MARGIN, 700.0 - 20.0 * i as f32, REGULAR, 10.0, s);
        }
        let pdf = finish(p, "Dvořák", "subject");
        assert_eq!(
            shown_text(&pdf),
            "PI: Jiří Dvořák\nŁukasz Wróbel\nЛаборатория (Иванов)\nΔημήτρης\n??\nPI: ????\nDvořák — page 1 of 1\n",
            "Chinese, which DejaVu Sans has not, and Hebrew, which would be drawn backwards, print as ?"
        );
        let text = String::from_utf8_lossy(&pdf);
        assert!(text.contains("+DejaVuSans"), "the subset is embedded and named so");
        assert!(text.contains("/FontFile2"));
        assert!(!text.contains("DejaVuSans-Bold"), "only the fonts a document uses");
        // The subset holds the glyphs used, not the whole font (760 kB).
        assert!(pdf.len() < 60_000, "{} bytes", pdf.len());

        // Bold text in the bold face.
        let mut p = Pages::new();
        p.text(MARGIN, 700.0, BOLD, 10.0, "Total — Dvořák");
        let pdf = finish(p, "statement", "subject");
        assert_eq!(shown_text(&pdf), "Total — Dvořák\nstatement — page 1 of 1\n");
        assert!(String::from_utf8_lossy(&pdf).contains("+DejaVuSans-Bold"));

        // Text WinAnsi has is the document it was: nothing embedded.
        let mut p = Pages::new();
        p.text(MARGIN, 700.0, BOLD, 10.0, "PI: Renée Müller — 5 €");
        let pdf = finish(p, "statement", "subject");
        assert_eq!(shown_text(&pdf), "PI: Renée Müller — 5 €\nstatement — page 1 of 1\n");
        assert!(!String::from_utf8_lossy(&pdf).contains("DejaVu"));
    }

    /// Text in the embedded font is measured as it is drawn: `fit` cut a
    /// long Cyrillic name for Helvetica's widths and it ran off the page,
    /// a user name over the next column (a review of 2026-12-07).
    #[test]
    fn text_in_the_embedded_font_is_measured_as_drawn() {
        let name = "ЛАБОРАТОРИЯ ВЫЧИСЛИТЕЛЬНОЙ ХИМИИ ЮЖНОГО ФИЛИАЛА ЖЖЖ";
        let mut p = Pages::new();
        p.text(MARGIN, 700.0, REGULAR, 10.0, name);
        let pdf = finish(p, "t", "s");
        // The widths the PDF gives its glyphs (`/W [cid [w] …]`), by CID:
        // CIDs are given in the order letters are first drawn, from 1.
        let text = String::from_utf8_lossy(&pdf);
        let w = &text[text.find("/W [").unwrap() + 4..];
        let w = &w[..w.find("]]").unwrap() + 1];
        let tokens: Vec<&str> = w.split(['[', ']', ' ']).filter(|t| !t.is_empty()).collect();
        let widths: std::collections::HashMap<u16, f32> = tokens
            .chunks(2)
            .map(|p| (p[0].parse().unwrap(), p[1].parse().unwrap()))
            .collect();
        let mut cids: Vec<char> = Vec::new();
        let mut drawn = 0.0;
        for c in name.chars() {
            if c == ' ' {
                drawn += 278.0; // Helvetica's space
                continue;
            }
            let cid = match cids.iter().position(|k| *k == c) {
                Some(i) => i + 1,
                None => {
                    cids.push(c);
                    cids.len()
                }
            };
            drawn += widths[&(cid as u16)];
        }
        let measured = text_width(name, 10.0, false) * 100.0;
        assert!((measured - drawn).abs() < 0.5, "measured {measured}, drawn {drawn}");
        // So a cut name fits where it is put.
        let cut = fit(name, 200.0, 10.0);
        assert!(cut.ends_with('…') && text_width(&cut, 10.0, false) <= 200.0, "{cut}");
    }

    /// A table's total is drawn on the page of its last row: it stood alone
    /// atop the next page of a demo statement (looked at, 2026-12-07).
    #[test]
    fn a_tables_total_stays_with_its_last_row() {
        let cols = [("user", 300.0, Align::Left), ("amount", 199.0, Align::Right)];
        let row = |u: &str| vec![u.to_owned(), "1.00".to_owned()];
        for rows in [vec![row("ada")], vec![row("ada"), row("bob"), row("cy")]] {
            let mut p = Pages::new();
            // Room for the header and one row, not for the total too.
            p.y = BOTTOM + 2.0 * 13.5 + 2.0;
            if rows.len() > 1 {
                p.y += 2.0 * 13.5;
            }
            p.table(&cols, &rows, Some(vec!["Total".into(), "3.00".into()]));
            let pdf = finish(p, "t", "s");
            let shown = shown_text(&pdf);
            let pages: Vec<&str> = shown.split("t — page ").collect();
            let last = rows.last().unwrap()[0].as_str();
            let page_of = |s: &str| pages.iter().position(|p| p.contains(&format!("\n{s}\n"))).unwrap();
            assert_eq!(page_of(last), page_of("Total"), "{shown}");
            assert!(
                !pages[0].ends_with("AMOUNT\n"),
                "a header alone at a page's foot: {shown}"
            );
        }
    }

    #[test]
    fn text_is_win_ansi() {
        assert_eq!(win_ansi("Müller — 5 €"), b"M\xfcller \x97 5 \x80".to_vec());
        assert_eq!(win_ansi("日本"), b"??".to_vec());
    }

    #[test]
    fn numbers_are_measured_with_helveticas_widths() {
        // "1,234.56": six digits 556, a comma and a period 278, at 10 pt.
        assert!((text_width("1,234.56", 10.0, false) - (6.0 * 5.56 + 2.0 * 2.78)).abs() < 1e-4);
        let cut = fit("a very long reason that cannot fit", 60.0, 9.0);
        assert!(
            cut.ends_with('…') && text_width(&cut, 9.0, false) <= 60.0 + 9.0,
            "{cut}"
        );
    }

    #[test]
    fn a_cell_wraps_its_words_and_breaks_a_word_longer_than_a_line() {
        // A correction's reason in the 110-point column (104 inside): the
        // PDF cut it after about 20 characters (a review of 2026-12-07).
        let reason = "credit 17: Überstunden im Oktober, ticket 4711";
        let lines = wrap(reason, 104.0, 8.8, 4);
        assert_eq!(lines.join(" "), reason);
        assert!(
            lines.len() > 1 && lines.iter().all(|l| text_width(l, 8.8, false) <= 104.0),
            "{lines:?}"
        );
        let long = "x".repeat(200);
        let lines = wrap(&long, 104.0, 8.8, 4);
        assert_eq!(lines.len(), 4);
        assert!(lines[3].ends_with('…'), "{lines:?}");
        assert!(lines.iter().all(|l| text_width(l, 8.8, false) <= 104.0), "{lines:?}");
        assert_eq!(wrap("", 104.0, 8.8, 4), vec![String::new()]);
    }
}
