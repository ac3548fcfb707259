//! Slurm `sacct --parsable2` (or `--parsable`, any delimiter) output, with or
//! without a header line.
//!
//! Fields are found by name: from the header, from `--fields`, or, for
//! headerless lines of 26 fields, Open XDMoD's prescribed set
//! (`jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,
//! eligible,start,end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,
//! reqtres,alloctres,timelimit,nodelist,jobname`).
//!
//! What a job held comes from `AllocTRES` (docs/rules.md D3); older records without
//! it fall back to `NCPUS`, `NNodes` and `ReqMem` (`Mn` per node, `Mc` per
//! CPU), and GPUs to `AllocGRES`, `ReqTRES`, `ReqGRES` and `Gres`
//! ([`fallback_gpus`]); a record naming no GPU anywhere gives no GPU count.
//! `--parsable`'s trailing delimiter is dropped. Steps (`123.batch`,
//! `123.extern`, `123.0`) are skipped: the job's own line carries its
//! charge. Times are the cluster's local time.

use std::collections::HashMap;

use chrono::NaiveDateTime;

use super::{Item, KeptOptions, Parser, ReadOptions, Skip};
use crate::domain::posting::{JobInput, Stamp, Suspension};
use crate::domain::request::{parse_alloc_tres, parse_gres_gpus};
use crate::domain::units::{Bytes, MIB};

/// Open XDMoD's `sacct --format` for Slurm accounting.
pub const XDMOD_FIELDS: [&str; 26] = [
    "jobid",
    "jobidraw",
    "cluster",
    "partition",
    "qos",
    "account",
    "group",
    "gid",
    "user",
    "uid",
    "submit",
    "eligible",
    "start",
    "end",
    "elapsed",
    "exitcode",
    "state",
    "nnodes",
    "ncpus",
    "reqcpus",
    "reqmem",
    "reqtres",
    "alloctres",
    "timelimit",
    "nodelist",
    "jobname",
];

/// States of a run that has ended and held resources (with `--duplicates`,
/// earlier runs of a requeued job are REQUEUED).
pub(crate) const ENDED: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REQUEUED",
    "SPECIAL_EXIT",
];

/// States of a job that has not ended yet.
pub(crate) const NOT_ENDED: &[&str] = &[
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "RESIZING",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "COMPLETING",
    "CONFIGURING",
    "RESV_DEL_HOLD",
    "POWER_UP_NODE",
    "UPDATE_DB",
];

struct Fields {
    names: Vec<String>,
    index: HashMap<String, usize>,
}

/// Fields of free text, which sacct prints as written: a `|` in a job name
/// is not escaped.
const FREE_TEXT: &[&str] = &[
    "jobname",
    "comment",
    "admincomment",
    "systemcomment",
    "submitline",
    "workdir",
];

impl Fields {
    fn new(names: Vec<String>) -> Fields {
        let names: Vec<String> = names.into_iter().map(|n| n.trim().to_lowercase()).collect();
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        Fields { names, index }
    }

    /// The one field of free text is the last (as in Open XDMoD's layout,
    /// `…|NodeList|JobName`): a line with more fields than these holds
    /// delimiters in it, and its extra columns are that field's.
    fn free_text_last(&self) -> bool {
        self.names.last().is_some_and(|n| FREE_TEXT.contains(&n.as_str()))
            && self.names.iter().filter(|n| FREE_TEXT.contains(&n.as_str())).count() == 1
    }
}

pub struct SlurmParser {
    delimiter: String,
    /// The delimiter when it is one character (Slurm's `|`): a line is
    /// split by searching for the character, not for a string.
    delimiter_char: Option<char>,
    fields: Option<Fields>,
    /// The options given, with the fields read from the header (or the
    /// XDMoD layout found): what each record keeps, made again when the
    /// fields change.
    options: KeptOptions,
}

impl SlurmParser {
    pub fn new(options: &ReadOptions) -> Result<SlurmParser, String> {
        let delimiter = options.delimiter.clone().unwrap_or_else(|| "|".into());
        if delimiter.is_empty() {
            return Err("the field delimiter cannot be empty".into());
        }
        let mut chars = delimiter.chars();
        let delimiter_char = match (chars.next(), chars.next()) {
            (Some(c), None) => Some(c),
            _ => None,
        };
        Ok(SlurmParser {
            delimiter,
            delimiter_char,
            fields: options.fields.clone().map(Fields::new),
            options: KeptOptions::new(options.clone()),
        })
    }

    /// A line's fields, split at the delimiter.
    fn columns<'l>(&self, line: &'l str) -> Vec<&'l str> {
        let mut cols = Vec::with_capacity(self.fields.as_ref().map_or(32, |f| f.names.len() + 1));
        match self.delimiter_char {
            Some(c) => cols.extend(line.split(c)),
            None => cols.extend(line.split(self.delimiter.as_str())),
        }
        cols
    }

    /// Read the lines after this with these fields.
    fn set_fields(&mut self, names: Vec<String>) {
        self.options = KeptOptions::new(ReadOptions {
            fields: Some(names.clone()),
            ..(*self.options).clone()
        });
        self.fields = Some(Fields::new(names));
    }
}

fn missing(value: &str) -> bool {
    matches!(value.trim(), "" | "Unknown" | "None" | "N/A")
}

/// A sacct time: local `YYYY-MM-DDTHH:MM:SS`, also with a blank for the `T`
/// (`SLURM_TIME_FORMAT='%F %T'`), or epoch seconds (`SLURM_TIME_FORMAT=%s`,
/// which no daylight-saving change can make ambiguous).
fn time(field: &str, value: &str) -> Result<Stamp, String> {
    let v = value.trim();
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
        return v
            .parse::<i64>()
            .ok()
            .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
            .map(Stamp::At)
            .ok_or_else(|| format!("{field} {value:?} is out of range"));
    }
    local_time(v)
        .or_else(|e| match v.split_once(' ') {
            Some((day, clock)) if day.len() == 10 && !clock.contains(' ') => local_time(&format!("{day}T{clock}")),
            _ => Err(e),
        })
        .map(Stamp::Local)
        .map_err(|_| {
            format!(
                "{field} {value:?} is not a time (expected YYYY-MM-DDTHH:MM:SS, YYYY-MM-DD HH:MM:SS or epoch seconds)"
            )
        })
}

/// `NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M:%S")` with the format
/// read once, not for every time of every line (it was about a fifth of
/// reading a sacct line): Slurm's local times, in sacct lines and jobcomp
/// documents.
pub(super) fn local_time(v: &str) -> chrono::ParseResult<NaiveDateTime> {
    use chrono::format::{Item, Parsed, StrftimeItems, parse};
    static FORMAT: std::sync::LazyLock<Vec<Item<'static>>> =
        std::sync::LazyLock::new(|| StrftimeItems::new("%Y-%m-%dT%H:%M:%S").collect());
    let mut parsed = Parsed::new();
    parse(&mut parsed, v, FORMAT.iter())?;
    parsed.to_naive_datetime_with_offset(0)
}

/// A duration as sacct prints `Elapsed` and `Suspended`: `[D-]HH:MM:SS`
/// (also `MM:SS`), in whole seconds.
fn seconds(field: &str, value: &str) -> Result<u32, String> {
    let bad = || format!("{field} {value:?} is not a duration (expected [D-]HH:MM:SS)");
    if !value.contains(':') {
        return Err(bad());
    }
    crate::domain::request::slurm_duration(value)
        .ok()
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(bad)
}

fn number(field: &str, value: &str) -> Result<u32, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{field} {value:?} is not a whole number"))
}

/// A node count as sacct prints it: plain, or from 1024 on with a unit
/// when it is a multiple of 512 (`convert_num_unit`: 1024 is `1K`, 1536
/// `1.50K`; `AllocNodes` of every version, `NNodes` of old ones). Only
/// digits, a decimal point with up to two places, and `K` or `M`; the
/// count must come out whole.
fn node_count(field: &str, value: &str) -> Result<u32, String> {
    let v = value.trim();
    let Some((count, unit)) = v
        .strip_suffix('K')
        .map(|n| (n, 1024u64))
        .or_else(|| v.strip_suffix('M').map(|n| (n, 1024 * 1024)))
    else {
        return number(field, v);
    };
    let bad = || format!("{field} {value:?} is not a number of nodes");
    let (whole, places) = match count.split_once('.') {
        Some((whole, places)) => (whole, Some(places)),
        None => (count, None),
    };
    let digits = |d: &str| !d.is_empty() && d.len() <= 9 && d.chars().all(|c| c.is_ascii_digit());
    if !digits(whole) || places.is_some_and(|p| p.len() > 2 || !digits(p)) {
        return Err(bad());
    }
    let places = places.unwrap_or("");
    let scale = 10u64.pow(places.len() as u32);
    let scaled = whole.parse::<u64>().map_err(|_| bad())? * scale + places.parse::<u64>().unwrap_or(0);
    let nodes = scaled.checked_mul(unit).ok_or_else(bad)?;
    if nodes % scale != 0 {
        return Err(format!("{field} {value:?} is not a whole number of nodes"));
    }
    u32::try_from(nodes / scale).map_err(|_| format!("{field} {value:?} is too large"))
}

/// The per-CPU flag of a memory request in Slurm before 17.11 (bit 31 of a
/// count of MiB), which later versions' `sacct` no longer recognises in
/// the jobs of that time: it prints `3000Mc` as `2147486648Mn`.
const OLD_MEM_PER_CPU: u64 = (1 << 31) * MIB;

/// `ReqMem`: `3000Mc` per CPU, `48000Mn` per node (Slurm before 21.08);
/// plain, the job's total (21.08 and later print the memory of the job's
/// requested TRES, `job_get_tres_mem`: what it asked for on all its nodes),
/// or per node as records read before `slurm_totals` were read. A value
/// per node of 2³¹ MiB or more is the old per-CPU flag: `2147486648Mn` is
/// 3000 MiB per CPU (every such record of Open XDMoD's Slurm 16 jobs has
/// `AllocTRES` `mem=` exactly that times its CPUs; read as written it was
/// 2 PiB a node, always refused).
fn req_mem(value: &str, nodes: u32, cores: u32, plain_total: bool) -> Result<Option<Bytes>, String> {
    let v = value.trim();
    let (size, times) = match (v.strip_suffix('c'), v.strip_suffix('n')) {
        (Some(s), _) => (s, cores),
        (None, Some(s)) => (s, nodes),
        (None, None) => (v, if plain_total { 1 } else { nodes }),
    };
    let b = Bytes::parse(size, MIB).map_err(|e| format!("ReqMem: {e}"))?;
    let (b, times) = if v.ends_with('n') && b.0 >= OLD_MEM_PER_CPU {
        (Bytes(b.0 - OLD_MEM_PER_CPU), cores)
    } else {
        (b, times)
    };
    if b.0 == 0 {
        return Ok(None);
    }
    b.0.checked_mul(u64::from(times))
        .map(|t| Some(Bytes(t)))
        .ok_or_else(|| format!("ReqMem {v:?} is too large"))
}

/// The GPU count in a TRES string (`gres/gpu=2`, or typed entries summed);
/// `None` without a `gres/gpu` entry.
pub(crate) fn tres_gpus(value: &str) -> Option<u32> {
    let mut untyped = None;
    let mut typed: Option<u32> = None;
    for item in value.split(',') {
        if let Some((k, v)) = item.split_once('=') {
            let n = v.trim().parse::<u32>().unwrap_or(0);
            if k.trim() == "gres/gpu" {
                untyped = Some(n);
            } else if k.trim().starts_with("gres/gpu:") {
                typed = Some(typed.unwrap_or(0).saturating_add(n));
            }
        }
    }
    untyped.or(typed)
}

/// GPUs of a record whose `AllocTRES` names none, from the fields older
/// Slurm (before TRES accounting) and some exports write, first present
/// wins: `AllocGRES` (what the job held, in total), `ReqTRES` (`gres/gpu`,
/// in total), then `ReqGRES` and `Gres` (the `--gres` request, per node:
/// times the job's nodes). `None`: the record gives no GPU count.
fn fallback_gpus<'a>(get: &impl Fn(&str) -> Option<&'a str>, nodes: u32) -> Result<Option<u32>, String> {
    let field = |name: &str| get(name).map(str::trim).filter(|v| !v.is_empty() && !missing(v));
    if let Some(v) = field("allocgres")
        && let Some(g) = parse_gres_gpus(v).map_err(|e| format!("AllocGRES: {}", e.reason))?
    {
        return Ok(Some(g));
    }
    if let Some(g) = field("reqtres").and_then(tres_gpus) {
        return Ok(Some(g));
    }
    for name in ["reqgres", "gres"] {
        if let Some(v) = field(name)
            && let Some(g) = parse_gres_gpus(v).map_err(|e| format!("{}: {}", display_name(name), e.reason))?
        {
            return g
                .checked_mul(nodes.max(1))
                .map(Some)
                .ok_or_else(|| format!("{} {v:?} times {nodes} nodes is too many GPUs", display_name(name)));
        }
    }
    Ok(None)
}

fn display_name(field: &str) -> &'static str {
    match field {
        "reqgres" => "ReqGRES",
        "gres" => "Gres",
        _ => "AllocGRES",
    }
}

/// When a record starts, and when its job was submitted. A job resized
/// while it ran (`scontrol update JobId=… NumNodes=…`) leaves its part
/// before the resize as a `RESIZING` record, ended at the resize, with the
/// allocation it had until then (a run of its own); and slurmdbd keeps the
/// job's first `Start` on its record from the resize on, with the resize as
/// its `Submit` (Slurm 22.05.8, tests/fixtures/accounting/
/// slurm_2205_resize_*). That part starts at the resize, as jobcomp's
/// document of it does, so that the two are one run and the time before the
/// resize is not charged twice; when the job was submitted that record does
/// not say (jobcomp's does). No other record is submitted after it starts
/// (the recorder refuses one as invalid), so the earlier reading differs
/// only on records it never stored.
pub(crate) fn resized_start(start: Stamp, submit: Option<Stamp>) -> (Stamp, Option<Stamp>) {
    match submit {
        Some(s) if naive(&s) > naive(&start) => (s, None),
        _ => (start, submit),
    }
}

/// A stamp's wall-clock reading (UTC for one with a zone): what the same
/// record's times are compared by before a zone is applied.
fn naive(s: &Stamp) -> chrono::NaiveDateTime {
    match s {
        Stamp::At(t) => t.naive_utc(),
        Stamp::Local(t) => *t,
    }
}

/// A record's `Elapsed` counted from `start` instead of `first_start`: a
/// resized job's later part starts at the resize ([`resized_start`]), and
/// Slurm counts its `Elapsed` from the job's first start (less its
/// suspension: Slurm 22.05.8, tests/fixtures/accounting/
/// slurm_2205_suspend_all_sacct.txt, jobs 7 and 8). `None` when nothing of
/// it is left after the resize: it says nothing then.
pub(crate) fn elapsed_from(first_start: Stamp, start: Stamp, elapsed: Option<u32>) -> Option<u32> {
    if start == first_start {
        return elapsed;
    }
    let before = u32::try_from((naive(&start) - naive(&first_start)).num_seconds()).ok()?;
    elapsed.and_then(|e| e.checked_sub(before)).filter(|&e| e > 0)
}

impl SlurmParser {
    fn job(&self, cols: &[&str], fields: &Fields) -> Result<Item, String> {
        let get = |name: &str| fields.index.get(name).map(|&i| cols[i]);
        let Some(jobid) = get("jobid") else {
            if fields.index.contains_key("jobidraw") {
                return Err(
                    "the input has JobIDRaw but no JobID field: export JobID too (sacct --format JobID,…): \
                            an array task or a heterogeneous job's part is known by its JobID (123_4, 123+1), and \
                            JobIDRaw alone would make it another job"
                        .into(),
                );
            }
            return Err("the input has no JobID field".into());
        };
        let jobid = jobid.trim();
        if jobid.contains('.') {
            return Ok(Item::Skip(Skip::Step));
        }
        let state_text = get("state").unwrap_or("").trim();
        let state = state_text.split_whitespace().next().unwrap_or("").to_uppercase();
        // The part of a resized job before a resize (its end is the resize):
        // a run that ended ([`resized_start`]).
        let resizing = state == "RESIZING";
        // No start is checked before the state (docs/rules.md): a PENDING
        // line without one has not started (it was skipped as "not ended").
        let Some(start) = get("start") else {
            return Err("the input has no Start field".into());
        };
        if missing(start) {
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        if NOT_ENDED.contains(&state.as_str()) && !resizing {
            return Ok(Item::Skip(Skip::NotEnded));
        }
        let Some(end) = get("end") else {
            return Err("the input has no End field".into());
        };
        if missing(end) {
            // Also a job whose state says it ended: slurmdbd records the state
            // before the end (a dump taken in between shows `CANCELLED`,
            // `End` Unknown, Elapsed counting); the next dump has the end.
            return Ok(Item::Skip(Skip::NotEnded));
        }
        // Cancelled before it ran (e.g. before its --begin time): Slurm 22.05
        // reports Start = End and no allocation, on "None assigned" nodes.
        if get("alloctres").is_some_and(|a| a.trim().is_empty())
            && (get("nodelist").is_some_and(|n| n.trim() == "None assigned") || start.trim() == end.trim())
        {
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        if !state.is_empty() && !ENDED.contains(&state.as_str()) && !resizing {
            return Err(format!("unknown job state {state_text:?}"));
        }
        let (job_id, array_index) = match jobid.split_once('_') {
            Some((_, index)) if index.starts_with('[') => {
                return Err(format!(
                    "{jobid} is an array record that stands for several tasks; export with `sacct --array` so each task has its own line"
                ));
            }
            Some((base, index)) if !base.is_empty() && index.chars().all(|c| c.is_ascii_digit()) => {
                (base.to_owned(), Some(number("the array index", index)?))
            }
            _ => (jobid.to_owned(), None),
        };
        if job_id.is_empty() {
            return Err("the JobID is empty".into());
        }
        let start = time("Start", start)?;
        let end = time("End", end)?;
        let submit = match get("submit") {
            Some(s) if !missing(s) => Some(time("Submit", s)?),
            _ => None,
        };
        let first_start = start;
        let (start, submit) = resized_start(start, submit);
        // Time suspended, not charged ([`ReadOptions::slurm_suspended`]):
        // `Suspended`, or else `Elapsed` (which does not count it; from the
        // resize for a resized job's later part, [`elapsed_from`]).
        // `INVALID` is how sacct prints a negative duration: nothing said.
        fn said(v: Option<&str>) -> Option<&str> {
            v.filter(|v| !missing(v) && v.trim() != "INVALID")
        }
        let suspension = if self.options.slurm_suspended {
            Suspension::Slurm {
                suspended: said(get("suspended")).map(|s| seconds("Suspended", s)).transpose()?,
                elapsed: elapsed_from(
                    first_start,
                    start,
                    said(get("elapsed")).map(|e| seconds("Elapsed", e)).transpose()?,
                ),
            }
        } else {
            Suspension::Unsaid
        };
        // A resize in the part's first second (a script that shrinks its job
        // at once): a part that held nothing, which would take the run's key.
        if resizing && start == end {
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        // AllocNodes is what sacct prints as NNodes for a job that ran.
        let nodes_field = match get("nnodes") {
            Some(v) => Some(("NNodes", v)),
            None if self.options.slurm_totals => get("allocnodes").map(|v| ("AllocNodes", v)),
            None => None,
        };
        let nnodes = nodes_field
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(name, v)| node_count(name, v))
            .transpose()?;
        let alloc = get("alloctres").map(str::trim).filter(|v| !v.is_empty());
        let (nodes, cores, memory, alloc_gpus) = match alloc {
            Some(tres) => {
                let a = parse_alloc_tres(tres).map_err(|e| format!("AllocTRES: {e}"))?;
                (a.nodes.or(nnodes).unwrap_or(1), a.cores, a.memory, a.gpus)
            }
            None => {
                let Some(ncpus) = get("ncpus").or(get("alloccpus")) else {
                    return Err("the record has neither AllocTRES nor NCPUS".into());
                };
                let cores = number("NCPUS", ncpus)?;
                let nodes = nnodes.unwrap_or(1);
                let memory = match get("reqmem").filter(|v| !v.trim().is_empty()) {
                    Some(v) => req_mem(v, nodes, cores, self.options.slurm_totals)?,
                    None => None,
                };
                (nodes, cores, memory, None)
            }
        };
        let gpus = match alloc_gpus {
            Some(g) => Some(g),
            None => fallback_gpus(&get, nodes)?,
        };
        let text = |name: &str| get(name).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(Item::Job(Box::new(JobInput {
            cluster: text("cluster").or_else(|| self.options.cluster.clone()),
            job_id,
            array_index,
            project: text("account").or_else(|| self.options.default_project.clone()),
            user: text("user").unwrap_or_default(),
            job_name: text("jobname").unwrap_or_default(),
            queue: text("partition"),
            node_type: None,
            nodes: Some(nodes),
            cores,
            memory,
            gpus,
            exclusive: false,
            submit,
            start,
            end,
            suspension,
            state: state_text.to_owned(),
            exit_code: text("exitcode"),
        })))
    }
}

/// Whether a line is sacct's header: it names a JobID (or JobIDRaw) field,
/// whatever its place (`--format` puts the fields in any order), and no
/// field is a value (a record's job id starts with a digit; its times, sizes
/// and states are not all plain words).
pub(crate) fn is_header(cols: &[&str]) -> bool {
    let name = |c: &str| {
        let c = c.trim();
        c.starts_with(|ch: char| ch.is_ascii_alphabetic())
            && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
    };
    cols.iter()
        .any(|c| c.trim().eq_ignore_ascii_case("jobid") || c.trim().eq_ignore_ascii_case("jobidraw"))
        && cols
            .iter()
            .enumerate()
            .all(|(i, c)| name(c) || (i + 1 == cols.len() && c.is_empty()))
}

impl Parser for SlurmParser {
    fn parse(&mut self, line: &str) -> Option<Item> {
        if line.trim().is_empty() {
            return None;
        }
        let mut cols = self.columns(line);
        if is_header(&cols) {
            // A header: it names the fields of the lines after it.
            if cols.last() == Some(&"") {
                cols.pop();
            }
            self.set_fields(cols.iter().map(|c| (*c).to_owned()).collect());
            return None;
        }
        if self.fields.is_none() && is_xdmod_layout(&cols) {
            self.set_fields(XDMOD_FIELDS.iter().map(|f| (*f).to_owned()).collect());
        }
        let Some(fields) = &self.fields else {
            return Some(Item::Bad(format!(
                "{} fields and no header: export with a header line (sacct --parsable2 without --noheader) or name the fields (--fields)",
                cols.len()
            )));
        };
        // `--parsable` ends every line with the delimiter.
        if cols.len() == fields.names.len() + 1 && cols.last() == Some(&"") {
            cols.pop();
        }
        // A job name (the last field) with the delimiter in it: the rest of
        // the line is the name (less `--parsable`'s delimiter at its end).
        // Not when the rest looks like another record (two lines run
        // together, a file that lost its last newline): as many columns
        // again as half a record, or a time among them; that line stays
        // malformed rather than one job swallowing the next.
        let n = fields.names.len();
        let another_record = |extra: &[&str]| {
            extra.len() * 2 >= n
                || extra.iter().any(|c| {
                    let c = c.trim();
                    local_time(c).is_ok() || c.get(10..11) == Some(" ") && local_time(&c.replacen(' ', "T", 1)).is_ok()
                })
        };
        if cols.len() > n && n > 0 && fields.free_text_last() && !another_record(&cols[n..]) {
            let start = cols[n - 1].as_ptr() as usize - line.as_ptr() as usize;
            let rest = &line[start..];
            let rest = rest.strip_suffix(self.delimiter.as_str()).unwrap_or(rest);
            cols.truncate(n - 1);
            cols.push(rest);
        }
        if cols.len() != fields.names.len() {
            return Some(Item::Bad(format!(
                "{} fields where {} are expected (is the delimiter {:?} right?)",
                cols.len(),
                fields.names.len(),
                self.delimiter
            )));
        }
        Some(self.job(&cols, fields).unwrap_or_else(Item::Bad))
    }

    fn options(&self) -> KeptOptions {
        self.options.clone()
    }

    fn cut_job_key(&self, line: &str) -> Option<String> {
        // Its job id and cluster columns whole (another column after each),
        // or absent from the fields: a line cut before its `Cluster` would
        // name the job on no cluster (or the --cluster one).
        let cols = self.columns(line);
        let fields = self.fields.as_ref()?;
        let whole = |name: &str| fields.index.get(name).is_none_or(|&i| i + 1 < cols.len());
        if whole("jobid") && whole("cluster") {
            self.job_key(line)
        } else {
            None
        }
    }

    fn cut_skip(&self, line: &str) -> Option<Skip> {
        let cols = self.columns(line);
        let at = *self.fields.as_ref()?.index.get("jobid")?;
        // Whole: another field follows it.
        (at + 1 < cols.len() && cols[at].contains('.')).then_some(Skip::Step)
    }

    fn job_key(&self, line: &str) -> Option<String> {
        let cols = self.columns(line);
        let xdmod;
        let fields = match &self.fields {
            Some(f) => f,
            None if is_xdmod_layout(&cols) => {
                xdmod = Fields::new(XDMOD_FIELDS.iter().map(|f| (*f).to_owned()).collect());
                &xdmod
            }
            None => return None,
        };
        let get = |name: &str| {
            fields
                .index
                .get(name)
                .and_then(|&i| cols.get(i))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let job = get("jobid")?;
        let cluster = get("cluster").or(self.options.cluster.as_deref()).unwrap_or("?");
        Some(format!("{cluster}/{job}"))
    }
}

/// Headerless lines of Open XDMoD's 26 fields, from `--parsable2`, or from
/// `--parsable` with its trailing delimiter.
fn is_xdmod_layout(cols: &[&str]) -> bool {
    cols.len() == XDMOD_FIELDS.len() || (cols.len() == XDMOD_FIELDS.len() + 1 && cols.last() == Some(&""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::kinds::SourceFormat;
    use crate::domain::units::GIB;

    /// A real resize (Slurm 22.05.8, the lab): job 1 ran on 2 nodes from
    /// 17:56:19, was shrunk to 1 at 17:56:27 and ended at 17:56:59: its two
    /// parts, each a run (read before 2026-12-06: the first skipped, the
    /// second refused as submitted after it started).
    #[test]
    fn a_resized_job_is_read_as_its_parts() {
        let text = include_str!("../../tests/fixtures/accounting/slurm_2205_resize_sacct.txt");
        let read = |text: &str| -> Vec<_> {
            let mut p = SlurmParser::new(&ReadOptions::default()).unwrap();
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| p.parse(l))
                .filter_map(|i| match i {
                    Item::Job(j) => Some((j.state, j.nodes, j.cores, j.start.to_string(), j.end.to_string())),
                    Item::Skip(Skip::Step) => None,
                    other => Some((format!("{other:?}"), None, 0, String::new(), String::new())),
                })
                .collect()
        };
        // Shrunk in its first second (the same records, the resize moved to
        // the start, as a script that shrinks its job at once does): the
        // part before held nothing and does not take the run's key.
        assert_eq!(
            read(&text.replace("17:56:27", "17:56:19")),
            [
                ("Skip(NeverStarted)".to_owned(), None, 0, String::new(), String::new()),
                (
                    "COMPLETED".to_owned(),
                    Some(1),
                    1,
                    "2026-12-06T17:56:19".to_owned(),
                    "2026-12-06T17:56:59".to_owned()
                ),
            ]
        );
        assert_eq!(
            read(text),
            [
                (
                    "RESIZING".to_owned(),
                    Some(2),
                    2,
                    "2026-12-06T17:56:19".to_owned(),
                    "2026-12-06T17:56:27".to_owned()
                ),
                (
                    "COMPLETED".to_owned(),
                    Some(1),
                    1,
                    "2026-12-06T17:56:27".to_owned(),
                    "2026-12-06T17:56:59".to_owned()
                ),
            ]
        );
    }

    /// A job whose state says it ended (CANCELLED) but whose End is not
    /// recorded yet (`Unknown`; Elapsed still counting: the dump was taken
    /// between slurmdbd's two updates) is skipped until a dump has its end,
    /// like a running one. Real Triton records (slurm2sql's).
    #[test]
    fn an_ended_job_without_its_end_yet_is_skipped_until_it_has_one() {
        let text = include_str!("../../tests/fixtures/accounting/slurm2sql_triton_sacct_unknown_end.txt");
        let mut p = SlurmParser::new(&ReadOptions {
            delimiter: Some(";|;".into()),
            cluster: Some("triton".into()),
            ..ReadOptions::default()
        })
        .unwrap();
        let items: Vec<Item> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| p.parse(l))
            .collect();
        assert_eq!(items.len(), 5, "{items:#?}");
        let Item::Job(j) = &items[0] else {
            panic!("{:?}", items[0])
        };
        assert_eq!(
            (j.job_id.as_str(), j.cores, j.state.as_str()),
            ("43974388", 2, "CANCELLED by 1300204")
        );
        assert_eq!(items[1..3], [Item::Skip(Skip::Step), Item::Skip(Skip::Step)]);
        assert_eq!(items[3], Item::Skip(Skip::NotEnded));
        assert_eq!(items[4], Item::Skip(Skip::Step));
        // Still running: skipped until it ends, as before.
        let running = text
            .lines()
            .find(|l| l.starts_with("43977780;"))
            .unwrap()
            .replace("CANCELLED by 1300204", "RUNNING");
        assert_eq!(p.parse(&running), Some(Item::Skip(Skip::NotEnded)));
    }

    #[test]
    fn the_options_records_keep_carry_the_header_they_were_read_under() {
        let given = ReadOptions {
            cluster: Some("owens".into()),
            ..Default::default()
        };
        let mut p = SlurmParser::new(&given).unwrap();
        assert_eq!(p.options().fields, None);
        assert_eq!(p.parse("JobID|Account|Start|End|"), None);
        let first = p.options();
        assert_eq!(
            first.fields.as_deref(),
            Some(&["JobID", "Account", "Start", "End"].map(String::from)[..])
        );
        assert_eq!(first.cluster.as_deref(), Some("owens"));
        // Records of one set share it; a second header makes another.
        assert!(std::ptr::eq(first.json(), p.options().json()));
        assert_eq!(p.parse("JobID|End"), None);
        assert_eq!(p.options().fields, Some(vec!["JobID".into(), "End".into()]));
        assert_eq!(p.options().cluster.as_deref(), Some("owens"));
        assert_eq!(
            first.text(),
            r#"{"cluster":"owens","fields":["JobID","Account","Start","End"]}"#
        );
    }

    #[test]
    fn local_times_are_read_as_parse_from_str_reads_them() {
        for v in [
            "2026-11-01T00:23:09",
            "2026-02-29T00:00:00",
            "2024-02-29T23:59:59",
            "2026-11-01T00:00:00.5",
            "2026-11-01 00:00:00",
            "2026-13-01T00:00:00",
            "2026-11-01T24:00:00",
            "2026-2-3T1:2:3",
            "+2026-11-01T00:00:00",
            "2026-11-01T00:00",
            "2026-11-01T00:00:60",
            "",
            "Unknown",
        ] {
            assert_eq!(
                local_time(v).ok(),
                NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M:%S").ok(),
                "{v:?}"
            );
        }
        assert!(local_time("2026-11-01T00:23:09").is_ok());
        assert!(local_time("2026-11-01T00:00:00.5").is_err());
    }

    fn parse_all(text: &str, options: &ReadOptions) -> Vec<Item> {
        let mut p = SlurmParser::new(options).unwrap();
        text.lines().filter_map(|l| p.parse(l)).collect()
    }

    fn job(item: &Item) -> &JobInput {
        match item {
            Item::Job(j) => j,
            other => panic!("{other:?}"),
        }
    }

    const HEADER: &str = "JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|GID|User|UID|Submit|Eligible|Start|End|Elapsed|ExitCode|State|NNodes|NCPUS|ReqCPUS|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|JobName";

    /// A resized job's later part starts at the resize, and Slurm counts
    /// its `Elapsed` from the job's first start (real records of Slurm
    /// 22.05.8: jobs 7 and 8, resized 10 and 20 s in, ended 20 s after): it
    /// is read from the resize. Job 6, resized while suspended, has 0.
    #[test]
    fn a_resized_parts_elapsed_counts_from_the_resize() {
        use crate::domain::posting::Suspension;
        let text: String = include_str!("../../tests/fixtures/accounting/slurm_2205_suspend_all_sacct.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let now = ReadOptions::default().now(crate::domain::kinds::SourceFormat::Slurm);
        let later = |text: &str, id: &str| {
            parse_all(text, &now)
                .iter()
                .find_map(|i| match i {
                    Item::Job(j) if j.job_id == id && j.state == "COMPLETED" => Some(j.suspension),
                    _ => None,
                })
                .unwrap()
        };
        let slurm = |suspended, elapsed| Suspension::Slurm { suspended, elapsed };
        assert_eq!(later(&text, "7"), slurm(Some(0), Some(20)));
        assert_eq!(later(&text, "8"), slurm(Some(0), Some(20)));
        // `20794-10:49:46`: the resume instant, in days since 1970.
        assert_eq!(later(&text, "6"), slurm(Some(1_796_640_586), None));
        // Had job 7 been suspended 5 s after its resize, its Elapsed would
        // be 25: 15 s from the resize, of its 20 (5 s suspended).
        let suspended_after = text.replacen(
            "|2026-12-07T10:52:15|00:00:30|00:00:00|COMPLETED|",
            "|2026-12-07T10:52:15|00:00:25|00:00:05|COMPLETED|",
            1,
        );
        assert_ne!(suspended_after, text);
        assert_eq!(later(&suspended_after, "7"), slurm(Some(5), Some(15)));
    }

    /// Real records of Slurm 22.05.8: job 1 ran 64 s, 54 of them
    /// suspended. Its `Suspended` is read, or else its `Elapsed` (10 s);
    /// read as before migration 0060, neither.
    #[test]
    fn suspended_time_is_read_from_suspended_or_elapsed() {
        use crate::domain::posting::Suspension;
        let strip = |t: &str| t.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
        let with_field = strip(include_str!(
            "../../tests/fixtures/accounting/slurm_2205_suspend_sacct_suspended_field.txt"
        ));
        let xdmod = strip(include_str!(
            "../../tests/fixtures/accounting/slurm_2205_suspend_sacct.txt"
        ));
        let now = ReadOptions::default().now(crate::domain::kinds::SourceFormat::Slurm);
        let first = |text: &str, options: &ReadOptions| job(&parse_all(text, options)[0]).suspension;
        let slurm = |suspended, elapsed| Suspension::Slurm { suspended, elapsed };
        assert_eq!(first(&with_field, &now), slurm(Some(54), Some(10)));
        assert_eq!(first(&xdmod, &now), slurm(None, Some(10)));
        assert_eq!(first(&with_field, &now.before_0060()), Suspension::Unsaid);
        assert_eq!(first(&xdmod, &now.before_0060()), Suspension::Unsaid);
        // Job 4, never suspended: 0 s said, or as long as it ran.
        let four = |text: &str| {
            parse_all(text, &now)
                .iter()
                .find_map(|i| match i {
                    Item::Job(j) if j.job_id == "4" => Some(j.suspension),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(four(&with_field), slurm(Some(0), Some(30)));
        assert_eq!(four(&xdmod), slurm(None, Some(30)));
        // `INVALID` (sacct's negative duration) says nothing.
        let invalid = xdmod.replacen("|00:00:10|", "|INVALID|", 1);
        assert_eq!(first(&invalid, &now), slurm(None, None));
        let invalid = with_field.replacen("|susp_a|00:00:54", "|susp_a|INVALID", 1);
        assert_eq!(first(&invalid, &now), slurm(None, Some(10)));
        // A value that is no duration names its field.
        let bad = with_field.replacen("|susp_a|00:00:54", "|susp_a|54", 1);
        match &parse_all(&bad, &now)[0] {
            Item::Bad(reason) => assert!(reason.contains("Suspended \"54\""), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    /// sacct prints a job name as written, `|` and all (eth-cscs/firecrest-v2
    /// issue 148, `crazy|name`): with the name the last field, as in Open
    /// XDMoD's layout, the rest of the line is the name (it was "27 fields
    /// where 26 are expected", the job kept uncharged). Not when another
    /// free-text field comes before it: then which `|` is whose is unknown.
    #[test]
    fn a_job_name_with_the_delimiter_in_it_is_read_whole() {
        // Real sacct output (tests/slurm/e2e.sh), its allocation and name changed.
        let line = "10|10|ledgere2e|regular|normal|e2e0002|root|0|root|0|2026-11-30T12:58:13|2026-11-30T13:58:13|2026-11-30T12:58:13|2026-11-30T12:59:13|00:01:00|0:0|COMPLETED|1|1|1|128M|billing=1,cpu=1,mem=128M,node=1|billing=1,cpu=1,mem=128M,node=1|00:05:00|c01|crazy|name";
        for (text, name) in [
            (format!("{HEADER}\n{line}"), "crazy|name"),
            (format!("{HEADER}|\n{line}|"), "crazy|name"),
            (format!("{HEADER}\n{line}||x"), "crazy|name||x"),
        ] {
            let items = parse_all(&text, &ReadOptions::default());
            assert_eq!(job(&items[0]).job_name, name, "{text}");
            assert_eq!(job(&items[0]).cores, 1);
        }
        // Two records run together (the first lost its newline): not one
        // job named after the next, which would be lost; kept as malformed.
        let two = format!("{HEADER}\n{line}{}", line.replacen("10|10|", "11|11|", 1));
        assert_eq!(
            parse_all(&two, &ReadOptions::default()),
            vec![Item::Bad(
                "53 fields where 26 are expected (is the delimiter \"|\" right?)".into()
            )]
        );
        // A name of a few parts with a time among them: likewise.
        let timed = format!("{HEADER}\n{line}|2026-11-30T12:59:13");
        assert!(matches!(&parse_all(&timed, &ReadOptions::default())[0], Item::Bad(_)));
        // JobName before NodeList: refused, as before.
        let swapped = HEADER.replace("NodeList|JobName", "JobName|NodeList");
        let line = line.replace("|c01|crazy|name", "|crazy|name|c01");
        assert_eq!(
            parse_all(&format!("{swapped}\n{line}"), &ReadOptions::default()),
            vec![Item::Bad(
                "27 fields where 26 are expected (is the delimiter \"|\" right?)".into()
            )]
        );
    }

    #[test]
    fn a_pending_line_without_a_start_never_started_and_a_running_one_has_not_ended() {
        // The e2e job below, still pending in a dump (Start and End
        // Unknown): no start is read before the state (docs/rules.md), so
        // the summary does not say it will be charged once it ends.
        let pending = "10|10|ledgere2e|regular|normal|e2e0002|root|0|root|0|2026-11-30T12:58:13|2026-11-30T13:58:13|Unknown|Unknown|00:00:00|0:0|PENDING|1|1|1|128M|||00:05:00|None assigned|wait";
        assert_eq!(
            parse_all(pending, &ReadOptions::default()),
            vec![Item::Skip(Skip::NeverStarted)]
        );
        let running = pending
            .replace("|Unknown|Unknown|", "|2026-11-30T13:58:13|Unknown|")
            .replace("|PENDING|", "|RUNNING|");
        assert_eq!(
            parse_all(&running, &ReadOptions::default()),
            vec![Item::Skip(Skip::NotEnded)]
        );
    }

    #[test]
    fn a_job_cancelled_before_its_begin_time_never_started() {
        // Real sacct output (tests/slurm/e2e.sh): Start = End = Submit, no AllocTRES.
        let line = "10|10|ledgere2e|regular|normal|e2e0002|root|0|root|0|2026-11-30T12:58:13|2026-11-30T13:58:13|2026-11-30T12:58:13|2026-11-30T12:58:13|00:00:00|0:0|CANCELLED by 0|1|1|1|128M|billing=1,cpu=1,mem=128M,node=1||00:05:00|None assigned|cancel-pending";
        let items = parse_all(line, &ReadOptions::default());
        assert_eq!(items, vec![Item::Skip(Skip::NeverStarted)]);
        // The same job with an allocation ran, however briefly.
        let ran = line.replace(
            "||00:05:00|None assigned",
            "|billing=1,cpu=1,mem=128M,node=1|00:05:00|c01",
        );
        assert!(matches!(&parse_all(&ran, &ReadOptions::default())[0], Item::Job(_)));
    }

    #[test]
    fn a_line_with_a_header_is_read_by_field_name() {
        let text = format!(
            "{HEADER}\n4|4|testclu|gpu|normal|pas1234|root|0|root|0|2026-11-30T08:48:00|2026-11-30T08:48:00|2026-11-30T08:48:04|2026-11-30T08:48:07|00:00:03|0:0|COMPLETED|1|1|1|1G|billing=11,cpu=1,gres/gpu=1,mem=1G,node=1|billing=11,cpu=1,gres/gpu:v100=1,gres/gpu=1,mem=1G,node=1|00:05:00|c01|gpu1\n"
        );
        let items = parse_all(&text, &ReadOptions::default());
        let j = job(&items[0]);
        assert_eq!(j.cluster.as_deref(), Some("testclu"));
        assert_eq!(j.project.as_deref(), Some("pas1234"));
        assert_eq!(j.queue.as_deref(), Some("gpu"));
        assert_eq!(
            (j.nodes, j.cores, j.memory, j.gpus),
            (Some(1), 1, Some(Bytes(GIB)), Some(1))
        );
        assert_eq!(j.start.to_string(), "2026-11-30T08:48:04");
        assert_eq!(j.exit_code.as_deref(), Some("0:0"));
    }

    #[test]
    fn steps_unended_and_unstarted_jobs_are_skipped_with_their_reason() {
        let opts = ReadOptions {
            fields: Some(vec![
                "JobID".into(),
                "State".into(),
                "Start".into(),
                "End".into(),
                "NCPUS".into(),
            ]),
            ..Default::default()
        };
        let items = parse_all(
            "7.batch|COMPLETED|2024-01-01T00:00:00|2024-01-01T01:00:00|1\n\
             8|RUNNING|2024-01-01T00:00:00|Unknown|1\n\
             9|CANCELLED by 1|None|2024-01-01T00:00:00|1\n\
             10_[1-3]|TIMEOUT|2024-01-01T00:00:00|2024-01-01T01:00:00|1\n\
             11|FOO|2024-01-01T00:00:00|2024-01-01T01:00:00|1\n\
             12_7|REQUEUED|2024-01-01T00:00:00|2024-01-01T01:00:00|2\n\
             13|COMPLETED|2024-01-01T00:00:00|2024-01-01T01:00:00|2|extra\n\
             14|REVOKED|None|None|1\n\
             15|REVOKED|2024-01-01T00:00:00|2024-01-01T01:00:00|1\n",
            &opts,
        );
        assert_eq!(items[0], Item::Skip(Skip::Step));
        assert_eq!(items[1], Item::Skip(Skip::NotEnded));
        assert_eq!(items[2], Item::Skip(Skip::NeverStarted));
        assert!(
            matches!(&items[3], Item::Bad(r) if r.contains("array record that stands for several tasks")),
            "{:?}",
            items[3]
        );
        assert_eq!(items[4], Item::Bad("unknown job state \"FOO\"".into()));
        let j = job(&items[5]);
        assert_eq!((j.job_id.as_str(), j.array_index, j.cores), ("12", Some(7), 2));
        assert_eq!(
            items[6],
            Item::Bad("6 fields where 5 are expected (is the delimiter \"|\" right?)".into())
        );
        // A federated job's copy revoked here (a sibling started it): no
        // start, never started; with a run here, not charged (docs/rules.md).
        assert_eq!(items[7], Item::Skip(Skip::NeverStarted));
        assert_eq!(items[8], Item::Bad("unknown job state \"REVOKED\"".into()));
    }

    /// Open XDMoD's Slurm 16 job 167758 (`ReqMem` `2147486648Mn`, AllocTRES
    /// `mem=24000M` on 8 CPUs): without its AllocTRES it reads the memory
    /// AllocTRES gives (it was 2 PiB a node, refused as invalid).
    #[test]
    fn the_old_per_cpu_flag_reads_as_alloc_tres_says() {
        let line = "167758|167758|phillips|black|banana-cream|taifl|taifl|104733|honbu|330719|2016-12-30T00:02:42|2016-12-30T00:02:42|2016-12-30T00:02:42|2016-12-30T00:03:06|00:00:24|0:0|COMPLETED|1|8|8|2147486648Mn|cpu=8,mem=24000M,node=1|billing=8,cpu=8,mem=24000M,node=1|1-06:00:00|cpn-f13-42-02|x";
        let with = parse_all(line, &ReadOptions::default());
        let without = parse_all(
            &line.replace("|billing=8,cpu=8,mem=24000M,node=1|", "||"),
            &ReadOptions::default(),
        );
        let (with, without) = (job(&with[0]), job(&without[0]));
        assert_eq!(with.memory, Some(Bytes(24000 * MIB)));
        assert_eq!(
            (without.nodes, without.cores, without.memory),
            (with.nodes, with.cores, with.memory)
        );
    }

    #[test]
    fn old_records_without_alloc_tres_fall_back_to_reqmem() {
        // XDMoD unit fixture, first line: per-CPU memory on 32 nodes.
        let line = "4103947|4103947|ub-hpc|general-compute|qos|anon|anon|918273|unknown|192837|2015-06-26T13:57:00|2015-06-26T13:57:00|2015-06-28T02:55:50|2015-07-01T02:55:50|3-00:00:00|1:0|TIMEOUT|32|256|256|3000Mc|||3-00:00:00|d07n07s02|1AbC-2-3";
        let items = parse_all(line, &ReadOptions::default());
        let j = job(&items[0]);
        assert_eq!(
            (j.nodes, j.cores, j.memory),
            (Some(32), 256, Some(Bytes(3000 * MIB * 256)))
        );
        assert_eq!(req_mem("48000Mn", 3, 36, true), Ok(Some(Bytes(48000 * MIB * 3))));
        assert_eq!(req_mem("0n", 1, 1, true), Ok(None));
        // The old per-CPU flag: 3000 MiB per CPU, as AllocTRES says of the
        // real records (8 CPUs: mem=24000M); 2³¹ − 1 MiB a node is a node's.
        assert_eq!(req_mem("2147486648Mn", 1, 8, true), Ok(Some(Bytes(24000 * MIB))));
        assert_eq!(req_mem("2147487648Mn", 2, 16, false), Ok(Some(Bytes(16 * 4000 * MIB))));
        assert_eq!(req_mem("2147483648Mn", 1, 8, true), Ok(None));
        assert_eq!(
            req_mem("2147483647Mn", 2, 8, true),
            Ok(Some(Bytes(2 * 2147483647 * MIB)))
        );
        // Plain (Slurm 21.08 and later): the job's total; per node as read
        // before `slurm_totals`.
        assert_eq!(req_mem("30512M", 4, 4, true), Ok(Some(Bytes(30512 * MIB))));
        assert_eq!(req_mem("30512M", 4, 4, false), Ok(Some(Bytes(30512 * MIB * 4))));
        assert_eq!(req_mem("3000Mc", 4, 4, false), Ok(Some(Bytes(3000 * MIB * 4))));
    }

    #[test]
    fn alloc_nodes_and_a_plain_req_mem_are_the_jobs_totals() {
        // AWS ParallelCluster's real records (hpc-cost-simulator): job 845
        // ran 4 tasks on 4 nodes with all of each node's 7628M (`--mem 0`);
        // its export has AllocNodes, no NNodes and no AllocTRES.
        let text = include_str!("../../tests/fixtures/accounting/awssamples_hcs_sacct_allocnodes.txt");
        let fields: Vec<String> = text
            .lines()
            .find(|l| l.starts_with("# State,JobID"))
            .unwrap()
            .trim_start_matches("# ")
            .split(',')
            .map(str::to_owned)
            .collect();
        assert_eq!(fields.len(), 25);
        let lines: String = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        let read = |options: ReadOptions| {
            let options = ReadOptions {
                fields: Some(fields.clone()),
                ..options
            };
            parse_all(&lines, &options)
                .into_iter()
                .filter_map(|i| match i {
                    Item::Job(j) if j.job_id == "845" => Some((j.nodes, j.cores, j.memory)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let now = ReadOptions::default().now(SourceFormat::Slurm);
        assert!(now.slurm_totals);
        assert_eq!(read(now), [(Some(4), 4, Some(Bytes(30512 * MIB)))]);
        // Read as before: 1 node (no NNodes), its memory per node.
        assert_eq!(read(ReadOptions::default()), [(Some(1), 4, Some(Bytes(30512 * MIB)))]);
        // From 1024 nodes on, sacct prints AllocNodes with a unit.
        assert_eq!(node_count("AllocNodes", "1K"), Ok(1024));
        assert_eq!(node_count("AllocNodes", "1.50K"), Ok(1536));
        assert_eq!(node_count("AllocNodes", "4"), Ok(4));
        assert!(node_count("AllocNodes", "1.0001K").is_err());
        assert_eq!(
            node_count("AllocNodes", "1.01K"),
            Err("AllocNodes \"1.01K\" is not a whole number of nodes".into())
        );
        assert_eq!(node_count("AllocNodes", "2M"), Ok(2 * 1024 * 1024));
        assert_eq!(
            node_count("AllocNodes", "5000M"),
            Err("AllocNodes \"5000M\" is too large".into())
        );
        // What sacct never prints is refused, never read as some size.
        for odd in [
            "xK",
            "1e3K",
            "9e2K",
            ".5K",
            "1_0K",
            "+1K",
            "1.K",
            "-1K",
            "79228162514264337593543950335K",
            "1 K",
        ] {
            assert_eq!(
                node_count("AllocNodes", odd),
                Err(format!("AllocNodes {odd:?} is not a number of nodes")),
                "{odd}"
            );
        }
    }

    #[test]
    fn a_header_is_found_whatever_its_first_field() {
        // The lab's real dump with its fields in another order (as sacct
        // prints `--format User,JobName,…,JobID`): the same jobs.
        let real: Vec<&str> = include_str!("../../tests/fixtures/accounting/slurm_2205_lab_sacct_header.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
        let reordered = |keep: &dyn Fn(&str) -> bool| {
            real.iter()
                .map(|l| {
                    let mut cols: Vec<&str> = l.split('|').collect();
                    cols.rotate_left(8);
                    let mut names: Vec<&str> = real[0].split('|').collect();
                    names.rotate_left(8);
                    cols.iter()
                        .zip(names)
                        .filter(|(_, n)| keep(n))
                        .map(|(c, _)| *c)
                        .collect::<Vec<_>>()
                        .join("|")
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let as_written = parse_all(&real.join("\n"), &ReadOptions::default());
        let moved = reordered(&|_| true);
        assert!(moved.starts_with("User|UID|Submit|"), "{moved}");
        let items = parse_all(&moved, &ReadOptions::default());
        assert_eq!(items.len(), real.len() - 1);
        assert_eq!(items, as_written);
        assert!(items.iter().filter(|i| matches!(i, Item::Job(_))).count() >= 10);
        // JobIDRaw alone: refused, saying why.
        let raw = parse_all(&reordered(&|n| n != "JobID"), &ReadOptions::default());
        assert!(
            matches!(&raw[0], Item::Bad(r) if r.starts_with("the input has JobIDRaw but no JobID field")),
            "{:?}",
            raw[0]
        );
        // A record whose job is named like a field is not a header.
        assert!(!is_header(&["1", "JobID", "COMPLETED"]));
        assert!(is_header(&["User", "JobID", "State", ""]));
        assert!(!is_header(&["User", "Account", "State"]));
    }

    #[test]
    fn headerless_lines_of_an_unknown_layout_are_refused() {
        let items = parse_all("1|2|3", &ReadOptions::default());
        assert!(matches!(&items[0], Item::Bad(r) if r.starts_with("3 fields and no header")));
        let bad_time = parse_all(
            &format!(
                "{HEADER}\n1|1|c|p|q|a|g|0|u|0|2026-11-30T08:48:00|x|yesterday|2026-11-30T08:49:23|x|0:0|COMPLETED|1|1|1|1G||cpu=1|x|c01|j"
            ),
            &ReadOptions::default(),
        );
        assert_eq!(
            bad_time[0],
            Item::Bad(
                "Start \"yesterday\" is not a time (expected YYYY-MM-DDTHH:MM:SS, YYYY-MM-DD HH:MM:SS or epoch seconds)"
                    .into()
            )
        );
    }

    /// An Oxford cluster's `sacct --parsable` (SAFE-ACCOUNTING's test data):
    /// AllocGRES and no AllocTRES, a trailing `|` on every line.
    const OXFORD: &str = "JobID|JobIDRaw|User|Group|Account|JobName|Partition|QOS|Start|End|Submit|AllocCPUS|AllocGRES|NNodes|Elapsed|Timelimit|State|\n\
        605603|605603|lilizhang|engs-jerugroup|engs-jerugroup|POPC_hole_5-2|compute|priority|2017-01-04T20:03:47|2017-01-08T20:12:26|2017-01-04T20:03:47|128||8|4-00:08:39|5-00:00:00|COMPLETED|\n\
        605717|605717|whgu0505|opic-3dem|opic-3dem|c6_subunit1job|gpu|normal|2017-01-05T12:02:55|2017-01-09T03:56:57|2017-01-05T12:02:55|1|gpu:2|1|3-15:54:02|4-03:50:00|COMPLETED|\n\
        611415|611415|coml0625|coml-sngroup|coml-sngroup|iebng1|gpu|normal|2017-01-07T23:21:16|2017-01-08T11:32:59|2017-01-07T23:21:15|1|gpu:1|1|12:11:43|5-00:00:00|CANCELLED by 4594|\n";

    #[test]
    fn gpus_from_alloc_gres_when_there_is_no_alloc_tres() {
        let items = parse_all(OXFORD, &ReadOptions::default());
        let got: Vec<_> = items
            .iter()
            .map(|i| {
                let j = job(i);
                (j.job_id.as_str(), j.nodes, j.cores, j.gpus)
            })
            .collect();
        assert_eq!(
            got,
            [
                // An empty AllocGRES gives no GPU count.
                ("605603", Some(8), 128, None),
                ("605717", Some(1), 1, Some(2)),
                ("611415", Some(1), 1, Some(1)),
            ]
        );
    }

    #[test]
    fn gpu_fallbacks_in_order() {
        let opts = |fields: &str| ReadOptions {
            fields: Some(fields.split(',').map(String::from).collect()),
            ..Default::default()
        };
        let gpus = |fields: &str, line: &str| job(&parse_all(line, &opts(fields))[0]).gpus;
        let base = "JobID,State,Start,End,NNodes,NCPUS";
        let times = "1|COMPLETED|2024-01-01T00:00:00|2024-01-01T01:00:00|2|8";
        // AllocTRES wins; then AllocGRES (the job's total); then ReqTRES;
        // then ReqGRES and Gres (per node, times the nodes).
        assert_eq!(
            gpus(
                &format!("{base},AllocTRES,AllocGRES"),
                &format!("{times}|cpu=8,node=2,gres/gpu=4|gpu:1")
            ),
            Some(4)
        );
        assert_eq!(
            gpus(
                &format!("{base},AllocTRES,AllocGRES"),
                &format!("{times}|cpu=8,node=2|gpu:k80:3(IDX:0-2)")
            ),
            Some(3)
        );
        assert_eq!(
            gpus(
                &format!("{base},ReqTRES,ReqGRES"),
                &format!("{times}|cpu=8,gres/gpu=2|gpu:5")
            ),
            Some(2)
        );
        assert_eq!(
            gpus(&format!("{base},ReqGRES"), &format!("{times}|gpu:P100:2(IDX:1,3)")),
            Some(4)
        );
        assert_eq!(gpus(&format!("{base},Gres"), &format!("{times}|gpu:1")), Some(2));
        assert_eq!(
            gpus(&format!("{base},AllocTRES"), &format!("{times}|cpu=8,node=2")),
            None
        );
        let bad = parse_all(&format!("{times}|gpu:a:b:c"), &opts(&format!("{base},AllocGRES")));
        assert!(
            matches!(&bad[0], Item::Bad(r) if r.starts_with("AllocGRES: ")),
            "{bad:?}"
        );
    }

    #[test]
    fn parsable_and_parsable2_read_the_same() {
        // The XDMoD unit fixture's first line, headerless: 26 fields, and
        // the same with `--parsable`'s trailing delimiter.
        let line = "4103947|4103947|ub-hpc|general-compute|qos|anon|anon|918273|unknown|192837|2015-06-26T13:57:00|2015-06-26T13:57:00|2015-06-28T02:55:50|2015-07-01T02:55:50|3-00:00:00|1:0|TIMEOUT|32|256|256|3000Mc|||3-00:00:00|d07n07s02|1AbC-2-3";
        let two = parse_all(line, &ReadOptions::default());
        let one = parse_all(&format!("{line}|"), &ReadOptions::default());
        assert!(matches!(&two[0], Item::Job(_)), "{two:?}");
        assert_eq!(one, two);
        // With a header (the header line has the trailing delimiter too).
        let two = parse_all(OXFORD.replace("|\n", "\n").as_str(), &ReadOptions::default());
        let one = parse_all(OXFORD, &ReadOptions::default());
        assert_eq!(one.len(), 3);
        assert_eq!(one, two);
        let p = SlurmParser::new(&ReadOptions::default()).unwrap();
        assert_eq!(p.job_key(&format!("{line}|")), Some("ub-hpc/4103947".into()));
    }

    #[test]
    fn any_delimiter_and_named_fields() {
        let opts = ReadOptions {
            delimiter: Some("☃".into()),
            fields: Some(
                "JobID,Partition,NNodes,State,Submit,Start,End,AllocTRES"
                    .split(',')
                    .map(String::from)
                    .collect(),
            ),
            ..Default::default()
        };
        let items = parse_all(
            "5908801_3☃gpulong☃1☃COMPLETED☃2023-11-02T13:47:11☃2023-11-02T21:16:50☃2023-11-04T01:54:16☃billing=15,cpu=8,mem=125000M,node=1",
            &opts,
        );
        let j = job(&items[0]);
        assert_eq!(
            (j.job_id.as_str(), j.array_index, j.cores, j.project.clone()),
            ("5908801", Some(3), 8, None)
        );
        // A delimiter of more than one character reads the same line alike.
        let longer = ReadOptions {
            delimiter: Some("::".into()),
            ..opts
        };
        let items = parse_all(
            "5908801_3::gpulong::1::COMPLETED::2023-11-02T13:47:11::2023-11-02T21:16:50::2023-11-04T01:54:16::billing=15,cpu=8,mem=125000M,node=1",
            &longer,
        );
        assert_eq!(job(&items[0]), j);
    }
}
