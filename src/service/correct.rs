//! Corrections, never edits (docs/rules.md D10): a reversal is the exact negative of
//! an entry, linked to it, at most once; a refund takes back part of a job or
//! storage charge, by fraction or amount; an adjustment credits or debits a
//! project. Each records its author and reason and posts into an open month.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::db::corrections::{self as sdb, EntryRow};
use crate::db::ledger::{self, NewEntry};
use crate::db::{DbError, reference};
use crate::domain::entries::refund_cents;
use crate::domain::kinds::EntryKind;
use crate::domain::period::Month;
use crate::domain::posting::posting_period;
use crate::domain::pricing::ChargingRules;
use crate::domain::units::Metric;
use crate::domain::units::{Cut, EXACT_SCALE, QUANTITY_SCALE, exact_mul, negate, ratio, round_money};
use crate::ids::LedgerEntryId;

#[derive(Debug, thiserror::Error)]
pub enum CorrectError {
    #[error("no center configuration has been applied yet")]
    NoConfig,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for CorrectError {
    fn from(e: sqlx::Error) -> Self {
        if crate::db::errors::is_already_reversed(&e) {
            return CorrectError::Refused("that entry is already reversed".into());
        }
        match crate::service::guard_message(&e) {
            Some(m) => CorrectError::Refused(m),
            None => CorrectError::Db(e.into()),
        }
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, CorrectError> {
    Err(CorrectError::Invalid(msg.into()))
}

/// What to correct.
#[derive(Debug, Clone)]
pub enum Target {
    Entry(LedgerEntryId),
    /// A job run: cluster, job id, array index, and its start when the id
    /// names several runs (requeues).
    Job {
        cluster: String,
        job_id: String,
        array_index: Option<u32>,
        start: Option<DateTime<Utc>>,
    },
}

impl Target {
    /// As recorded with an idempotency key.
    fn json(&self) -> serde_json::Value {
        match self {
            Target::Entry(id) => serde_json::json!({ "entry": id.0 }),
            Target::Job {
                cluster,
                job_id,
                array_index,
                start,
            } => {
                serde_json::json!({ "cluster": cluster, "job_id": job_id, "array_index": array_index, "start": start })
            }
        }
    }
}

/// Who corrects, why, and (optionally) into which open month.
#[derive(Debug, Clone, Default)]
pub struct Why {
    pub author: String,
    pub reason: String,
    pub month: Option<Month>,
    /// Post even when an identical correction was posted before.
    pub again: bool,
    /// Run it at most once: the same key again answers with what it posted.
    pub key: Option<String>,
}

/// What a correction did.
#[derive(Debug, Clone, Serialize)]
pub struct Correction {
    pub entries: Vec<Posted>,
    /// The idempotency key it was posted with before: nothing new was posted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub already_posted_with_key: Option<String>,
}

/// An entry a correction posted.
#[derive(Debug, Clone, Serialize)]
pub struct Posted {
    pub id: LedgerEntryId,
    pub kind: EntryKind,
    pub corrects: Option<LedgerEntryId>,
    pub period: Month,
    pub metric: Option<Metric>,
    pub quantity: Decimal,
    pub amount: Decimal,
}

/// The open month a correction goes to: the one asked for (it must be open
/// and not in the future), else the month of what it corrects if still open,
/// else the first open month. An adjustment corrects no entry: it goes to
/// the month that last ended while that is open (the month being closed),
/// else to the first open month after it.
async fn target_month(
    conn: &mut PgConnection,
    original: Option<Month>,
    asked: Option<Month>,
    now: DateTime<Utc>,
) -> Result<(Month, bool), CorrectError> {
    let center = reference::load_center(conn).await?.ok_or(CorrectError::NoConfig)?;
    let current = Month::of_instant(now, center.time_zone);
    let last_closed = ledger::last_closed(conn).await?.map(Month::of_date);
    match asked {
        Some(m) if last_closed.is_some_and(|l| m <= l) => Err(CorrectError::Refused(format!(
            "{m} is closed: corrections post into an open month"
        ))),
        Some(m) if m > current => invalid(format!("{m} has not begun")),
        Some(m) => Ok((m, false)),
        None => Ok(posting_period(original.unwrap_or(current.prev()), last_closed)),
    }
}

async fn target_entries(conn: &mut PgConnection, target: &Target) -> Result<Vec<EntryRow>, CorrectError> {
    match target {
        Target::Entry(id) => {
            let rows = sdb::entries_by_id(conn, &[id.0]).await?;
            if rows.is_empty() {
                let archived = if crate::db::archive::any_archived(conn).await? {
                    " in the live ledger (an entry of an archived month is in its archive file, and is not corrected)"
                } else {
                    ""
                };
                return invalid(format!("there is no ledger entry {id}{archived}"));
            }
            Ok(rows)
        }
        Target::Job {
            cluster,
            job_id,
            array_index,
            start,
        } => {
            // An array task named in its job id (`123_4`) is the task, as
            // the recorder reads it; or, recorded so before 2026-12-07, the
            // run of that job id as written.
            let as_written = sdb::find_runs(conn, cluster, job_id, array_index.map(|i| i as i32)).await?;
            let runs = match crate::domain::posting::split_array_task(job_id, *array_index) {
                Ok(None) => as_written,
                Err(why) if as_written.is_empty() => return invalid(why),
                Err(_) => as_written,
                Ok(Some((job, index))) => {
                    let task = sdb::find_runs(conn, cluster, &job, Some(index as i32)).await?;
                    match (task.is_empty(), as_written.is_empty()) {
                        (_, true) => task,
                        (true, false) => as_written,
                        (false, false) => {
                            let task_entries = open_entries(conn, &task).await?;
                            let written_entries = open_entries(conn, &as_written).await?;
                            return invalid(format!(
                                "{cluster}/{job_id} names two runs: array task {index} of job {job} (entries \
                                 {task_entries}), and job {job_id} as recorded before 2026-12-07 (entries \
                                 {written_entries}): correct each by its entry (--entry)"
                            ));
                        }
                    }
                }
            };
            let key = match array_index {
                Some(i) => format!("{cluster}/{job_id}_{i}"),
                None => format!("{cluster}/{job_id}"),
            };
            let run = match (runs.as_slice(), start) {
                ([], _) => return invalid(format!("no job {key} is recorded")),
                ([one], None) => one.0,
                (many, None) => {
                    let starts: Vec<String> = many.iter().map(|(_, s)| s.to_rfc3339()).collect();
                    return invalid(format!(
                        "job {key} has {} runs (requeued): name one with --start ({})",
                        many.len(),
                        starts.join(", ")
                    ));
                }
                (many, Some(s)) => match many.iter().find(|(_, t)| t == s) {
                    Some((id, _)) => *id,
                    None => return invalid(format!("job {key} has no run that started at {s}")),
                },
            };
            let rows = sdb::open_job_entries(conn, run).await?;
            if rows.is_empty() {
                if let Some(m) = crate::db::archive::archived_month_of_run(conn, run).await? {
                    let m = Month::of_date(m);
                    return invalid(format!(
                        "job {key}'s charges are archived ({m}, in {}): correct it with an adjustment",
                        crate::service::archive::file_name(m)
                    ));
                }
                return invalid(format!("job {key} has no charges left to correct"));
            }
            Ok(rows)
        }
    }
}

/// The open entries of these runs, for a message: their ids, or "none".
async fn open_entries(
    conn: &mut PgConnection,
    runs: &[(crate::ids::JobId, DateTime<Utc>)],
) -> Result<String, CorrectError> {
    let mut ids = Vec::new();
    for (run, _) in runs {
        ids.extend(
            sdb::open_job_entries(conn, *run)
                .await?
                .iter()
                .map(|e| e.id.to_string()),
        );
    }
    Ok(if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    })
}

/// A correction's reversal cites the entry's own job record, with the reason given.
fn reversal(e: &EntryRow, period: Month, late: bool, why: &Why) -> NewEntry {
    crate::domain::entries::reversal(&e.posted(), period, late, e.job_record_id, why.reason.clone())
}

fn posted(id: LedgerEntryId, e: &NewEntry) -> Posted {
    Posted {
        id,
        kind: e.kind,
        corrects: e.corrects_id,
        period: Month::of_date(e.period),
        metric: e.metric,
        quantity: e.quantity,
        amount: e.amount,
    }
}

/// The correction a repeated idempotency key already posted, if any (a key
/// used for a different correction is refused).
/// The center's billing time zone, in which times are shown.
async fn center_zone(conn: &mut PgConnection) -> Result<chrono_tz::Tz, CorrectError> {
    Ok(reference::load_center(conn)
        .await?
        .map_or(chrono_tz::Tz::UTC, |c| c.time_zone))
}

async fn posted_before(
    tx: &mut PgConnection,
    why: &Why,
    kind: EntryKind,
    request: &serde_json::Value,
) -> Result<Option<Correction>, CorrectError> {
    let Some(key) = &why.key else { return Ok(None) };
    if key.is_empty() || key.chars().count() > 200 || key.chars().any(char::is_control) {
        return invalid("an idempotency key is 1 to 200 characters without control characters");
    }
    let Some(r) = sdb::request(&mut *tx, key).await? else {
        return Ok(None);
    };
    if r.kind != kind.as_str() || &r.request != request {
        let tz = center_zone(&mut *tx).await?;
        return Err(CorrectError::Refused(format!(
            "idempotency key {key:?} was used on {} by {} for a different correction ({} {}); use another key",
            r.requested_at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"),
            r.author,
            r.kind,
            r.request
        )));
    }
    let rows = sdb::entries_by_id(&mut *tx, &r.entry_ids).await?;
    let entries = rows
        .iter()
        .map(|e| Posted {
            id: e.id,
            kind: e.kind,
            corrects: e.corrects_id,
            period: Month::of_date(e.period),
            metric: e.metric,
            quantity: e.quantity,
            amount: e.amount,
        })
        .collect();
    Ok(Some(Correction {
        entries,
        already_posted_with_key: Some(key.clone()),
    }))
}

/// Post a correction's entries: refused when an identical correction was
/// posted before (unless `again`), kept with its idempotency key if given.
async fn post(
    tx: &mut PgConnection,
    kind: EntryKind,
    rows: Vec<NewEntry>,
    request: &serde_json::Value,
    why: &Why,
) -> Result<Correction, CorrectError> {
    if !why.again {
        let mut same = Vec::new();
        for r in &rows {
            // A month not named is the one open now: a retry may land in
            // the next (docs/month-end.md).
            match sdb::identical(&mut *tx, r, why.month.is_none()).await? {
                Some(found) => same.push(found),
                None => break,
            }
        }
        if !rows.is_empty() && same.len() == rows.len() {
            let ids: Vec<String> = same.iter().map(|(id, ..)| id.to_string()).collect();
            let (_, at, by, period) = &same[0];
            let tz = center_zone(&mut *tx).await?;
            return Err(CorrectError::Refused(format!(
                "an identical {kind} was posted into {} on {} by {by} (entr{} {}): pass --again to post another, \
                 or --idempotency-key to make a retried script safe",
                Month::of_date(*period),
                at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"),
                if ids.len() == 1 { "y" } else { "ies" },
                ids.join(", ")
            )));
        }
    }
    let ids = ledger::insert_returning(&mut *tx, &rows, &why.author).await?;
    if let Some(key) = &why.key {
        sdb::insert_request(&mut *tx, key, kind, request, &why.author, &ids).await?;
    }
    Ok(Correction {
        entries: ids.iter().zip(&rows).map(|(id, e)| posted(*id, e)).collect(),
        already_posted_with_key: None,
    })
}

fn check_reason(why: &Why) -> Result<(), CorrectError> {
    if why.reason.trim().is_empty() || why.reason.chars().count() > 2000 {
        return invalid("give a reason (1 to 2000 characters)");
    }
    Ok(())
}

/// Reverse an entry (with its refunds) or all of a job's charges.
pub async fn reverse(
    pool: &PgPool,
    target: &Target,
    why: &Why,
    now: DateTime<Utc>,
) -> Result<Correction, CorrectError> {
    check_reason(why)?;
    let mut tx = ledger::begin_posting(pool).await.map_err(DbError::from)?;
    let result = reverse_in(&mut tx, target, why, now).await;
    crate::service::finish(tx, result).await
}

async fn reverse_in(
    tx: &mut PgConnection,
    target: &Target,
    why: &Why,
    now: DateTime<Utc>,
) -> Result<Correction, CorrectError> {
    let request =
        serde_json::json!({ "target": target.json(), "reason": why.reason, "month": why.month.map(|m| m.to_string()) });
    // One correction at a time, from before anything is read (sdb::lock_corrections).
    sdb::lock_corrections(&mut *tx).await?;
    if let Some(done) = posted_before(&mut *tx, why, EntryKind::Reversal, &request).await? {
        return Ok(done);
    }
    let mut entries = target_entries(&mut *tx, target).await?;
    if let Target::Entry(id) = target {
        let e = &entries[0];
        if e.kind == EntryKind::Reversal {
            return invalid(format!("entry {id} is itself a reversal; post an adjustment instead"));
        }
        if e.reversed {
            return Err(CorrectError::Refused(format!("entry {id} is already reversed")));
        }
        if e.kind == EntryKind::Discount {
            return invalid(format!(
                "entry {id} is a discount line: it goes with its charge (reverse entry {})",
                e.corrects_id.map_or("?".to_owned(), |c| c.to_string())
            ));
        }
        // Its refunds and discount go too, or the reversal would credit
        // more than it charged.
        let credits = sdb::open_credits_of(&mut *tx, &[id.0]).await?;
        entries.extend(credits);
    }
    let original = entries.iter().map(|e| Month::of_date(e.period)).min();
    let (period, late) = target_month(&mut *tx, original, why.month, now).await?;
    let rows: Vec<NewEntry> = entries.iter().map(|e| reversal(e, period, late, why)).collect();
    post(&mut *tx, EntryKind::Reversal, rows, &request, why).await
}

/// How much of a charge to refund.
#[derive(Debug, Clone, Copy)]
pub enum RefundBy {
    /// A share of each charge, 0 < f ≤ 1.
    Fraction(Decimal),
    /// An amount of money, against one charge.
    Amount(Decimal),
}

/// Refund part of a job's charges (or of one entry).
pub async fn refund(
    pool: &PgPool,
    target: &Target,
    by: RefundBy,
    why: &Why,
    now: DateTime<Utc>,
) -> Result<Correction, CorrectError> {
    check_reason(why)?;
    let mut tx = ledger::begin_posting(pool).await.map_err(DbError::from)?;
    let result = refund_in(&mut tx, target, by, why, now).await;
    crate::service::finish(tx, result).await
}

async fn refund_in(
    tx: &mut PgConnection,
    target: &Target,
    by: RefundBy,
    why: &Why,
    now: DateTime<Utc>,
) -> Result<Correction, CorrectError> {
    let by_json = match by {
        RefundBy::Fraction(f) => serde_json::json!({ "fraction": f.to_string() }),
        RefundBy::Amount(a) => serde_json::json!({ "amount": a.to_string() }),
    };
    let request = serde_json::json!({ "target": target.json(), "by": by_json, "reason": why.reason,
                                      "month": why.month.map(|m| m.to_string()) });
    // One correction at a time, from before anything is read: a refund
    // settles against the refunds posted before it (sdb::lock_corrections).
    sdb::lock_corrections(&mut *tx).await?;
    if let Some(done) = posted_before(&mut *tx, why, EntryKind::Refund, &request).await? {
        return Ok(done);
    }
    let entries: Vec<EntryRow> = target_entries(&mut *tx, target)
        .await?
        .into_iter()
        .filter(|e| matches!(e.kind, EntryKind::Job | EntryKind::Storage))
        .collect();
    if entries.is_empty() {
        return invalid("only job and storage charges can be refunded");
    }
    if let Some(e) = entries.iter().find(|e| e.reversed) {
        return Err(CorrectError::Refused(format!(
            "entry {} is reversed: nothing is left to refund",
            e.id
        )));
    }
    let original = entries.iter().map(|e| Month::of_date(e.period)).min();
    let (period, late) = target_month(&mut *tx, original, why.month, now).await?;
    let mut rows = Vec::new();
    for e in &entries {
        // Its discount line and refunds so far, in one read: the net, and what
        // a version 3 refund settles against.
        let basis = sdb::refund_basis(&mut *tx, e.id).await?;
        let net = (e.amount_exact + basis.discount_exact).max(Decimal::ZERO);
        // Nothing charged, or all of it discounted: a refund would only take
        // quantity out of the usage report (by --fraction, as often as it
        // was asked: a review of 2026-12-07). A share of a job's charges
        // passes over such a line (a GPU-hour line at a rate of 0 beside its
        // core-hours); one entry asked for by itself is refused.
        if e.amount_exact.is_zero() || net.is_zero() {
            if entries.len() > 1 && matches!(by, RefundBy::Fraction(_)) {
                continue;
            }
            return Err(CorrectError::Refused(if e.amount_exact.is_zero() {
                format!("entry {} charged nothing: there is nothing to refund", e.id)
            } else {
                format!("entry {} is discounted in full: nothing is left to refund", e.id)
            }));
        }
        // Quantities by long division (`ratio`): a net of 19 places (a
        // discount of 7.1234 %) or a fraction of 16 digits overflowed the
        // 128-bit product `div_round` forms ("too large to compute").
        let quantity = match by {
            RefundBy::Fraction(f) => {
                if f <= Decimal::ZERO || f > Decimal::ONE {
                    return invalid(format!("a refund fraction is more than 0 and at most 1, not {f}"));
                }
                ratio(&[e.quantity, f], &[Decimal::ONE], QUANTITY_SCALE, Cut::Round)
            }
            RefundBy::Amount(a) => {
                if entries.len() > 1 {
                    let list: Vec<String> = entries
                        .iter()
                        .map(|e| format!("entry {} {} {:.2}", e.id, e.metric.map_or("", |m| m.as_str()), e.amount))
                        .collect();
                    return invalid(format!(
                        "the job has {} charges ({}); refund an amount against one of them with --entry, or use --fraction",
                        entries.len(),
                        list.join(", ")
                    ));
                }
                if a <= Decimal::ZERO || a.scale() > 2 {
                    return invalid(format!("a refund amount is positive with at most 2 decimal places, not {a}"));
                }
                // The share of what the charge charged that A is: of its net
                // from version 2 on (so an amount refund of half a discounted
                // charge's net takes back half its quantity, as --fraction
                // 0.5 does); version 1, which had no discounts, of its amount.
                let base = if e.charging_rules == ChargingRules::V1 { e.amount_exact } else { net };
                ratio(&[e.quantity, a], &[base], QUANTITY_SCALE, Cut::Round)
            }
        }
        .ok_or_else(|| CorrectError::Invalid("the refund is too large to compute exactly".into()))?;
        // By the rules of the charge: version 1 prices the refunded quantity
        // at the rate; version 2 takes the share of the exact amount net of
        // its discount (docs/rules.md R8; an amount refund is that amount
        // exactly).
        let exact = match (e.charging_rules, by) {
            (ChargingRules::V1, _) => exact_mul(negate(quantity), e.unit_rate),
            (_, RefundBy::Fraction(f)) => ratio(&[f, net], &[Decimal::ONE], EXACT_SCALE, Cut::Truncate).map(negate),
            (_, RefundBy::Amount(a)) => Some(negate(a)),
        }
        .ok_or_else(|| CorrectError::Invalid("the refund is too large to compute exactly".into()))?;
        let left = e.amount_exact - sdb::credited(&mut *tx, e.id).await?;
        if -exact > left {
            // What is left exactly, when its cents would read as enough
            // ("13.05 left, less than 13.05" for 13.049).
            let exactly = if round_money(left) >= round_money(-exact) {
                format!(" ({} exactly)", left.normalize())
            } else {
                String::new()
            };
            return Err(CorrectError::Refused(format!(
                "entry {} has {:.2}{exactly} left to refund, less than {:.2}",
                e.id,
                round_money(left),
                round_money(-exact)
            )));
        }
        // Version 3 settles in cents against the charge's refunds so far
        // (docs/rules.md); before, each refund's own exact amount rounded.
        let amount = if e.charging_rules >= ChargingRules::V3 {
            refund_cents(e.amount_exact, e.amount, basis, exact)
        } else {
            round_money(exact)
        };
        rows.push(NewEntry {
            period: period.first_day(),
            project_id: e.project_id,
            kind: EntryKind::Refund,
            metric: e.metric,
            job_record_id: e.job_record_id,
            rate_card_id: e.rate_card_id,
            corrects_id: Some(e.id),
            quantity: negate(quantity),
            unit_rate: e.unit_rate,
            amount_exact: exact,
            amount,
            late,
            reason: Some(why.reason.clone()),
            charging_rules: e.charging_rules,
            discount_id: None,
        });
    }
    if rows.is_empty() {
        return Err(CorrectError::Refused(
            "the job's charges charged nothing, or are discounted in full: nothing is left to refund".into(),
        ));
    }
    post(&mut *tx, EntryKind::Refund, rows, &request, why).await
}

/// Credit (negative) or debit (positive) a project.
pub async fn adjust(
    pool: &PgPool,
    project: &str,
    amount: Decimal,
    why: &Why,
    now: DateTime<Utc>,
) -> Result<Correction, CorrectError> {
    check_reason(why)?;
    if amount.is_zero() || amount.scale() > 2 || amount.abs() >= Decimal::from(10_000_000_000u64) {
        return invalid(format!(
            "an adjustment is a non-zero amount with at most 2 decimal places (negative: a credit), not {amount}"
        ));
    }
    let mut tx = ledger::begin_posting(pool).await.map_err(DbError::from)?;
    let result = adjust_in(&mut tx, project, amount, why, now).await;
    crate::service::finish(tx, result).await
}

async fn adjust_in(
    tx: &mut PgConnection,
    project: &str,
    amount: Decimal,
    why: &Why,
    now: DateTime<Utc>,
) -> Result<Correction, CorrectError> {
    let request = serde_json::json!({ "project": project, "amount": amount.to_string(), "reason": why.reason,
                                      "month": why.month.map(|m| m.to_string()) });
    if let Some(done) = posted_before(&mut *tx, why, EntryKind::Adjustment, &request).await? {
        return Ok(done);
    }
    let p = crate::service::project(&mut *tx, project)
        .await?
        .map_err(|named| CorrectError::Invalid(format!("unknown project {named}")))?;
    let (period, _) = target_month(&mut *tx, None, why.month, now).await?;
    let row = NewEntry {
        period: period.first_day(),
        project_id: p.id,
        kind: EntryKind::Adjustment,
        metric: None,
        job_record_id: None,
        rate_card_id: None,
        corrects_id: None,
        quantity: Decimal::ONE,
        unit_rate: amount,
        amount_exact: amount,
        amount,
        late: false,
        reason: Some(why.reason.clone()),
        charging_rules: ChargingRules::CURRENT,
        discount_id: None,
    };
    post(&mut *tx, EntryKind::Adjustment, vec![row], &request, why).await
}
