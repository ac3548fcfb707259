//! Slurm `sacct --json` output, and the same `jobs` array as slurmrestd's
//! `GET /slurmdb/v0.0.3x|4x/jobs` returns it.
//!
//! The document is `{"meta": …, "errors": […], "jobs": [ {job}, … ]}`. It is
//! read as a stream ([`stream`]): one job object at a time, so memory stays
//! flat however many jobs it holds. Each job object (without its `steps`,
//! which do not change the charge and can be large) is then one record: it
//! is what is stored and what [`SacctJsonParser`] reads again on a retry.
//!
//! The layouts read are those of [`LAYOUTS`], each tested on real output:
//! Slurm 22.05's (`meta.plugin.type` = `openapi/dbv0.0.38`) and the
//! `data_parser` layouts v0.0.39 (23.02) to v0.0.43 (25.05), named by
//! `meta.plugins.data_parser` or `meta.plugin.data_parser`. What they changed
//! in the fields read here: counts such as `array.task_id` became `{set,
//! infinite, number}` (v0.0.39), the state a list of the base state and its
//! flags, and the exit code's `return_code` and `signal.id` such objects
//! (v0.0.40). A state list is read as sacct prints it (`job_state_string`:
//! the first of its shown flags, `REQUEUED` before the base state), so a job
//! reads the same in every layout. A document of another layout is refused
//! with the layout it carries, and nothing is recorded. A document whose
//! `errors` list any (slurmrestd answers a query slurmdbd failed with
//! `jobs: []` and the error) is refused too, nothing recorded: its jobs may
//! be incomplete. Jobs are given once `meta` and `errors` have both been
//! read: Slurm 22.05 writes them before `jobs`, 23.02 writes `errors` after
//! them and 23.11 and later `meta` too; until then the jobs are kept in an
//! unlinked temporary file.
//!
//! What a job held is read as the parsable reader reads it (docs/rules.md D3):
//! `tres.allocated` is AllocTRES (memory in MiB), GPUs fall back to
//! `tres.requested` (ReqTRES); arrays are `array.job_id` with index
//! `array.task_id`, heterogeneous jobs `het.job_id+het.job_offset`, times are
//! epoch seconds; steps are not charged (the job carries the charge).

use std::io::Read;

use chrono::DateTime;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::slurm::{ENDED, NOT_ENDED};
use super::{Item, KeptOptions, Parser, ReadOptions, Skip};
use crate::domain::posting::{JobInput, Stamp, Suspension};
use crate::domain::request::parse_alloc_tres;

/// The layouts read (`meta.plugin.data_parser`, or `meta.plugin.type` for
/// 22.05), with the Slurm versions that write each (a release serves more
/// than one of them through slurmrestd).
pub const LAYOUTS: &[(&str, &str)] = &[
    ("openapi/dbv0.0.38", "Slurm 22.05"),
    ("data_parser/v0.0.39", "Slurm 23.02"),
    ("data_parser/v0.0.40", "Slurm 23.11, 24.05"),
    ("data_parser/v0.0.41", "Slurm 24.05, 24.11, 25.05"),
    ("data_parser/v0.0.42", "Slurm 24.11, 25.05"),
    ("data_parser/v0.0.43", "Slurm 25.05"),
];

/// Why a document cannot be streamed.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{0}")]
    Document(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The consumer stopped taking jobs.
    #[error("stopped")]
    Stopped,
}

const STOPPED: &str = "\u{0}stopped";

/// Where the jobs a document lists before its `meta` or its `errors` wait
/// until `meta` has named the layout and `errors` listed none: made by the caller when first needed (the import, an
/// unlinked temporary file: memory stays flat), written a job a line, then
/// read back from its start.
pub trait Waiting: Read + std::io::Write + std::io::Seek {}
impl<T: Read + std::io::Write + std::io::Seek> Waiting for T {}

/// Makes a [`Waiting`] place, when a document's jobs come before its `meta`
/// or its `errors`.
pub type MakeWaiting<'a> = dyn FnMut() -> std::io::Result<Box<dyn Waiting>> + 'a;

/// Read the jobs of a `sacct --json` document one at a time: `on_job(index,
/// job)` gets each job object as compact JSON without its steps, and returns
/// `false` to stop. The layout is checked (from `meta`) and the document's
/// `errors` (none) before any job is given: jobs that come before either
/// wait in what `waiting` makes (a document without `errors` gives its jobs
/// at its end).
pub fn stream<R: Read>(
    input: R,
    waiting: &mut MakeWaiting<'_>,
    mut on_job: impl FnMut(usize, String) -> bool,
) -> Result<usize, StreamError> {
    let mut de = serde_json::Deserializer::from_reader(input);
    let mut top = Top {
        on_job: &mut on_job,
        layout_ok: false,
        errors_read: false,
        jobs: 0,
        make_waiting: waiting,
        waiting: None,
    };
    let result = (&mut top).deserialize(&mut de).and_then(|()| de.end());
    match result {
        Ok(()) => Ok(top.jobs),
        Err(e) if e.to_string().starts_with(STOPPED) => Err(StreamError::Stopped),
        Err(e) if e.is_io() => Err(StreamError::Io(e.into())),
        Err(e) => Err(StreamError::Document(format!("sacct --json: {e}"))),
    }
}

struct Top<'f, 'w, F> {
    on_job: &'f mut F,
    layout_ok: bool,
    /// The document's `errors` were read, and there were none.
    errors_read: bool,
    jobs: usize,
    make_waiting: &'f mut MakeWaiting<'w>,
    /// Jobs read before `meta` or `errors`, one compact object a line.
    waiting: Option<std::io::BufWriter<Box<dyn Waiting>>>,
}

impl<F: FnMut(usize, String) -> bool> Top<'_, '_, F> {
    /// Give a job, or keep it until `meta` has named the layout.
    fn job(&mut self, job: String) -> Result<bool, String> {
        if let Some(w) = self.waiting.as_mut() {
            use std::io::Write;
            w.write_all(job.as_bytes())
                .and_then(|()| w.write_all(b"\n"))
                .map_err(|e| format!("keeping the jobs read before `meta` and `errors` until they come: {e}"))?;
            return Ok(true);
        }
        let index = self.jobs;
        self.jobs += 1;
        Ok((self.on_job)(index, job))
    }

    /// Give the jobs kept until `meta` named the layout.
    fn give_waiting(&mut self) -> Result<bool, String> {
        use std::io::{BufRead, Seek};
        let Some(w) = self.waiting.take() else {
            return Ok(true);
        };
        let why = |e: std::io::Error| format!("reading back the jobs read before `meta` and `errors`: {e}");
        let mut file = w.into_inner().map_err(|e| why(e.into_error()))?;
        file.rewind().map_err(why)?;
        for line in std::io::BufReader::new(file).lines() {
            if !self.job(line.map_err(why)?)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl<'de, F: FnMut(usize, String) -> bool> DeserializeSeed<'de> for &mut Top<'_, '_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(usize, String) -> bool> Visitor<'de> for &mut Top<'_, '_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sacct --json document (an object with `meta` and `jobs`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut saw_jobs = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "meta" if self.layout_ok => return Err(de::Error::custom("the document has two `meta` objects")),
                "meta" => {
                    let meta: Value = map.next_value()?;
                    check_layout(&meta).map_err(de::Error::custom)?;
                    self.layout_ok = true;
                    if self.errors_read && !self.give_waiting().map_err(de::Error::custom)? {
                        return Err(de::Error::custom(STOPPED));
                    }
                }
                "errors" => {
                    let errors: Value = map.next_value()?;
                    reported_errors(&errors).map_err(de::Error::custom)?;
                    self.errors_read = true;
                    if self.layout_ok && !self.give_waiting().map_err(de::Error::custom)? {
                        return Err(de::Error::custom(STOPPED));
                    }
                }
                "jobs" if !saw_jobs => {
                    // Jobs wait until `meta` has said which layout they are
                    // in and `errors` that sacct had none: Slurm 22.05
                    // writes both first, 23.02 writes `errors` last and
                    // 23.11 and later `jobs` first.
                    if !(self.layout_ok && self.errors_read) {
                        let place = (self.make_waiting)().map_err(|e| {
                            de::Error::custom(format!(
                                "`jobs` comes before `meta` or `errors` and must wait for them, but no place to keep them could be made: {e}"
                            ))
                        })?;
                        self.waiting = Some(std::io::BufWriter::new(place));
                    }
                    saw_jobs = true;
                    map.next_value_seed(Jobs { top: &mut *self })?;
                }
                "jobs" => return Err(de::Error::custom("the document has two `jobs` arrays")),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !saw_jobs {
            return Err(de::Error::custom("the document has no `jobs` array"));
        }
        if !self.layout_ok {
            let known: Vec<String> = LAYOUTS.iter().map(|(l, v)| format!("{l} ({v})")).collect();
            return Err(de::Error::custom(format!(
                "the document has no `meta` naming its layout; hpc-ledger reads {}; nothing was recorded",
                known.join(", ")
            )));
        }
        // A document without `errors`: its jobs are given at its end.
        if !self.give_waiting().map_err(de::Error::custom)? {
            return Err(de::Error::custom(STOPPED));
        }
        Ok(())
    }
}

struct Jobs<'t, 'f, 'w, F> {
    top: &'t mut Top<'f, 'w, F>,
}

impl<'de, F: FnMut(usize, String) -> bool> DeserializeSeed<'de> for Jobs<'_, '_, '_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(usize, String) -> bool> Visitor<'de> for Jobs<'_, '_, '_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of jobs")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        while let Some(mut job) = seq.next_element::<Value>()? {
            if let Some(o) = job.as_object_mut() {
                o.remove("steps");
            }
            if !self.top.job(job.to_string()).map_err(de::Error::custom)? {
                return Err(de::Error::custom(STOPPED));
            }
        }
        Ok(())
    }
}

/// Slurm's `ESLURM_REST_EMPTY_RESULT` ("Nothing found").
const ESLURM_REST_EMPTY_RESULT: i64 = 9003;

/// The document's `errors` (sacct's or slurmrestd's): none, or what they
/// say. A document with errors may be missing jobs (slurmrestd answers a
/// query slurmdbd failed with `jobs: []` and the error; from 23.02 a field
/// that could not be dumped is an error), so none of its jobs is recorded.
/// Slurm 22.05's "Nothing found" for the jobs query is no error.
fn reported_errors(errors: &Value) -> Result<(), String> {
    let listed = match errors {
        Value::Null => return Ok(()),
        Value::Array(a) => a.as_slice(),
        other => std::slice::from_ref(other),
    };
    // Slurm 22.05 reports a query that found no job as an error ("Nothing
    // found", ESLURM_REST_EMPTY_RESULT, from slurmdb_jobs_get; 23.02 and
    // later as a warning): a quiet day, not a failure. The same error from
    // another query (associations, QOS) means jobs were left out.
    let nothing_found = |e: &Value| {
        e.get("error_number").and_then(Value::as_i64) == Some(ESLURM_REST_EMPTY_RESULT)
            && e.get("source").and_then(Value::as_str) == Some("slurmdb_jobs_get")
    };
    let said: Vec<String> = listed
        .iter()
        .filter(|e| !nothing_found(e))
        .map(|e| {
            let field = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
            };
            let mut parts: Vec<String> = [field("description"), field("error")]
                .into_iter()
                .flatten()
                .map(|s| format!("\"{s}\""))
                .collect();
            parts.dedup();
            if let Some(n) = e.get("error_number").and_then(Value::as_i64) {
                parts.push(format!("error number {n}"));
            }
            if let Some(s) = field("source") {
                parts.push(format!("in {s}"));
            }
            match (parts.is_empty(), e.as_str()) {
                (false, _) => parts.join(", "),
                (true, Some(s)) => format!("\"{s}\""),
                (true, None) => e.to_string(),
            }
        })
        .collect();
    if said.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the document reports {} error{} from Slurm, so its jobs may be incomplete: {}; nothing was recorded (run sacct again once the cause is fixed)",
        said.len(),
        if said.len() == 1 { "" } else { "s" },
        said.join("; ")
    ))
}

/// The layout a `meta` object names, if it is one this reader reads.
fn check_layout(meta: &Value) -> Result<(), String> {
    // Where each Slurm names it: 22.05 `plugin.type`; 23.02 `plugins.data_parser`
    // and `Slurm.release`; 23.11 and later `plugin.data_parser` (sacct leaves
    // `plugin.type` empty, slurmrestd names itself there: `openapi/slurmdbd`)
    // and `slurm.release`.
    let named = |paths: &[&str]| {
        paths
            .iter()
            .filter_map(|p| meta.pointer(p).and_then(Value::as_str))
            .find(|s| !s.trim().is_empty())
    };
    // 23.02's slurmrestd (`openapi/dbv0.0.39`) names its data_parser bare
    // (`v0.0.39`): the same layout as sacct's `data_parser/v0.0.39`.
    let layout = named(&["/plugin/data_parser", "/plugins/data_parser", "/plugin/type"]).map(|l| {
        if l.starts_with('v') && l[1..].chars().all(|c| c.is_ascii_digit() || c == '.') {
            std::borrow::Cow::Owned(format!("data_parser/{l}"))
        } else {
            std::borrow::Cow::Borrowed(l)
        }
    });
    let release = named(&["/Slurm/release", "/slurm/release"]).unwrap_or("?");
    let known: Vec<String> = LAYOUTS.iter().map(|(l, v)| format!("{l} ({v})")).collect();
    match layout {
        Some(l) if LAYOUTS.iter().any(|(k, _)| *k == l) => Ok(()),
        Some(l) => Err(format!(
            "this is the layout {l} (Slurm {release}); hpc-ledger reads {} — export with `sacct --parsable2` (--format slurm) instead; nothing was recorded",
            known.join(", ")
        )),
        None => Err(format!(
            "`meta` names no layout (meta.plugin.type); hpc-ledger reads {}; nothing was recorded",
            known.join(", ")
        )),
    }
}

/// Reads one job object of a `sacct --json` document (one record).
pub struct SacctJsonParser {
    options: KeptOptions,
}

impl SacctJsonParser {
    pub fn new(options: &ReadOptions) -> SacctJsonParser {
        SacctJsonParser {
            options: KeptOptions::new(options.clone()),
        }
    }
}

/// A whole number, written plainly or (data_parser v0.0.39 and later) as
/// `{"set": …, "infinite": …, "number": …}`, which is no number when not set.
fn int(v: Option<&Value>, what: &str) -> Result<Option<i64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) if o.contains_key("set") && o.contains_key("number") => {
            // Slurm writes INFINITE as `{"set": false, "infinite": true}`.
            match (o.get("infinite"), o.get("set")) {
                (Some(Value::Bool(true)), _) => Err(format!("{what} is infinite")),
                (None | Some(Value::Bool(false)), Some(Value::Bool(false))) => Ok(None),
                (None | Some(Value::Bool(false)), Some(Value::Bool(true))) => int(o.get("number"), what),
                _ => Err(format!("{what} {} is not a number", Value::Object(o.clone()))),
            }
        }
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{what} {n} is not a whole number")),
        Some(other) => Err(format!("{what} {other} is not a number")),
    }
}

fn small(v: Option<&Value>, what: &str) -> Result<Option<u32>, String> {
    int(v, what)?
        .map(|n| u32::try_from(n).map_err(|_| format!("{what} {n} is out of range")))
        .transpose()
}

/// A time in seconds since the epoch; 0 and Slurm's NO_VAL and INFINITE
/// (4294967294, 4294967295: a pending job cancelled has the first as its
/// start) are not set.
fn epoch(v: Option<&Value>, what: &str) -> Result<Option<Stamp>, String> {
    match int(v, what)? {
        None | Some(0 | 4_294_967_294 | 4_294_967_295) => Ok(None),
        Some(s) => DateTime::from_timestamp(s, 0)
            .map(|t| Some(Stamp::At(t)))
            .ok_or_else(|| format!("{what} {s} is out of range")),
    }
}

fn text(job: &Value, pointer: &str) -> Option<String> {
    job.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A TRES list (`[{"type": "cpu", "count": 2}, {"type": "gres", "name":
/// "gpu", "count": 1}, …]`) as the `AllocTRES` string it stands for
/// (`cpu=2,gres/gpu=1`); memory counts are MiB.
fn tres_string(list: Option<&Value>, what: &str) -> Result<String, String> {
    let Some(items) = list.and_then(Value::as_array) else {
        return Ok(String::new());
    };
    let mut parts = Vec::new();
    for item in items {
        let Some(count) = int(item.get("count"), what)? else {
            continue;
        };
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        let name = item.get("name").and_then(Value::as_str);
        let key = match (kind, name) {
            ("gres", Some(n)) => format!("gres/{n}"),
            (k, _) => k.to_owned(),
        };
        if key.is_empty() || key.contains([',', '=']) {
            return Err(format!("{what} has an entry of no readable type: {item}"));
        }
        parts.push(if key == "mem" {
            format!("mem={count}M")
        } else {
            format!("{key}={count}")
        });
    }
    Ok(parts.join(","))
}

/// The job state flags sacct shows instead of the base state, in the order
/// it looks for them (Slurm's `job_state_string`); a state list of
/// data_parser v0.0.40 and later holds the base state and the flags set.
const SHOWN_FLAGS: &[&str] = &[
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
];

/// A state list (`["CANCELLED"]`, `["PENDING", "REQUEUED"]`) as the one
/// word sacct prints for it: the first shown flag set, else the base state
/// (the list's one word that is not a flag; flags sacct never shows, such as
/// `LAUNCH_FAILED`, are passed over as it passes them).
fn shown_state(words: &[Value]) -> Result<String, String> {
    let mut list = Vec::new();
    for w in words {
        match w.as_str() {
            Some(s) => list.push(s.trim().to_uppercase()),
            None => return Err(format!("state.current has {w}, which is not a text")),
        }
    }
    if let Some(flag) = SHOWN_FLAGS.iter().find(|f| list.iter().any(|w| w == *f)) {
        return Ok((*flag).to_owned());
    }
    let bases: Vec<&String> = list.iter().filter(|w| BASE_STATES.contains(&w.as_str())).collect();
    let known = list
        .iter()
        .all(|w| BASE_STATES.contains(&w.as_str()) || UNSHOWN_FLAGS.contains(&w.as_str()));
    match bases.as_slice() {
        [base] if known => Ok((*base).clone()),
        [] if list.is_empty() => Ok(String::new()),
        _ => Err(format!("unknown job state {list:?}")),
    }
}

/// Slurm's base job states (`job_state_codes.html`).
const BASE_STATES: &[&str] = &[
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

/// The job state flags sacct does not show (it shows the base state).
const UNSHOWN_FLAGS: &[&str] = &["LAUNCH_FAILED", "UPDATE_DB", "RECONFIG_FAIL", "POWER_UP_NODE"];

impl SacctJsonParser {
    fn job(&self, job: &Value) -> Result<Item, String> {
        if !job.is_object() {
            return Err("a job of sacct --json must be an object".into());
        }
        let Some(id) = int(job.get("job_id"), "job_id")? else {
            return Err("the job has no job_id".into());
        };
        let state = match job.pointer("/state/current") {
            Some(Value::String(s)) => s.trim().to_owned(),
            None | Some(Value::Null) => String::new(),
            Some(Value::Array(words)) => shown_state(words)?,
            Some(other) => return Err(format!("state.current {other} is neither a text nor a list of texts")),
        };
        let state_word = state.split_whitespace().next().unwrap_or("").to_uppercase();
        // A resized job's part before a resize (as the parsable reader).
        let resizing = state_word == "RESIZING";
        if NOT_ENDED.contains(&state_word.as_str()) && !resizing {
            return Ok(Item::Skip(Skip::NotEnded));
        }
        let Some(start) = epoch(job.pointer("/time/start"), "time.start")? else {
            return Ok(Item::Skip(Skip::NeverStarted));
        };
        let Some(end) = epoch(job.pointer("/time/end"), "time.end")? else {
            return Ok(Item::Skip(Skip::NotEnded));
        };
        let alloc = tres_string(job.pointer("/tres/allocated"), "tres.allocated")?;
        // Cancelled before it ran: no allocation, and Start = End or no node
        // assigned (as the parsable reader: `NodeList` `None assigned`).
        let unassigned = job
            .get("nodes")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|n| n.trim() == "None assigned");
        if !alloc.split(',').any(|p| p.starts_with("cpu=")) && (start == end || unassigned) {
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        if !state_word.is_empty() && !ENDED.contains(&state_word.as_str()) && !resizing {
            return Err(format!("unknown job state {state:?}"));
        }
        let submit = epoch(job.pointer("/time/submission"), "time.submission")?;
        let first_start = start;
        let (start, submit) = crate::ingest::slurm::resized_start(start, submit);
        // A resize in the part's first second: a part that held nothing.
        if resizing && start == end {
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        // Time suspended, not charged (`ReadOptions::slurm_suspended`):
        // `time.suspended` as said, or else `time.elapsed` (which does not
        // count it).
        // A negative value (sacct's `INVALID`) says nothing.
        let seconds = |pointer: &str, what: &str| -> Result<Option<u32>, String> {
            Ok(int(job.pointer(pointer), what)?.and_then(|s| u32::try_from(s).ok()))
        };
        let suspension = if self.options.slurm_suspended {
            Suspension::Slurm {
                suspended: seconds("/time/suspended", "time.suspended")?,
                elapsed: crate::ingest::slurm::elapsed_from(
                    first_start,
                    start,
                    seconds("/time/elapsed", "time.elapsed")?,
                ),
            }
        } else {
            Suspension::Unsaid
        };
        let array_job = int(job.pointer("/array/job_id"), "array.job_id")?.filter(|&j| j != 0);
        let array_task = small(job.pointer("/array/task_id"), "array.task_id")?;
        let het_job = int(job.pointer("/het/job_id"), "het.job_id")?.filter(|&j| j != 0);
        let (job_id, array_index) = match (array_job, array_task, het_job) {
            (Some(a), Some(t), _) => (a.to_string(), Some(t)),
            (Some(_), None, _) => {
                return Err(format!(
                    "job {id} is an array record that stands for several tasks (array.task {}); export with `sacct --array` so each task has its own record",
                    job.pointer("/array/task").unwrap_or(&Value::Null)
                ));
            }
            (None, _, Some(h)) => {
                let offset = small(job.pointer("/het/job_offset"), "het.job_offset")?.unwrap_or(0);
                (format!("{h}+{offset}"), None)
            }
            (None, _, None) => (id.to_string(), None),
        };
        let a = parse_alloc_tres(&alloc).map_err(|e| format!("tres.allocated: {}", e.reason))?;
        let gpus = match a.gpus {
            Some(g) => Some(g),
            None => {
                let requested = tres_string(job.pointer("/tres/requested"), "tres.requested")?;
                crate::ingest::slurm::tres_gpus(&requested)
            }
        };
        let nodes = match a.nodes {
            Some(n) => n,
            None => small(job.get("allocation_nodes"), "allocation_nodes")?.unwrap_or(1),
        };
        let exit_code = match job.get("exit_code") {
            Some(e) if e.is_object() => {
                let rc = int(e.get("return_code"), "exit_code.return_code")?.unwrap_or(0);
                let sig = match e.pointer("/signal/signal_id") {
                    Some(s) => int(Some(s), "exit_code.signal.signal_id")?,
                    None => int(e.pointer("/signal/id"), "exit_code.signal.id")?,
                }
                .unwrap_or(0);
                Some(format!("{rc}:{sig}"))
            }
            _ => None,
        };
        Ok(Item::Job(Box::new(JobInput {
            cluster: text(job, "/cluster").or_else(|| self.options.cluster.clone()),
            job_id,
            array_index,
            project: text(job, "/account").or_else(|| self.options.default_project.clone()),
            user: text(job, "/user").unwrap_or_default(),
            job_name: text(job, "/name").unwrap_or_default(),
            queue: text(job, "/partition"),
            node_type: None,
            nodes: Some(nodes),
            cores: a.cores,
            memory: a.memory,
            gpus,
            exclusive: false,
            submit,
            start,
            end,
            suspension,
            state,
            exit_code,
        })))
    }
}

impl Parser for SacctJsonParser {
    fn parse(&mut self, line: &str) -> Option<Item> {
        if line.trim().is_empty() {
            return None;
        }
        Some(match serde_json::from_str::<Value>(line) {
            Ok(job) => self.job(&job).unwrap_or_else(Item::Bad),
            Err(e) => Item::Bad(format!("not a job object of sacct --json: {e}")),
        })
    }

    fn options(&self) -> KeptOptions {
        self.options.clone()
    }

    fn job_key(&self, line: &str) -> Option<String> {
        super::json_job_key(line, "job_id", None, self.options.cluster.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::units::{Bytes, GIB, MIB};

    /// The lab's real `sacct --json` (Slurm 22.05), header stripped.
    fn lab() -> String {
        include_str!("../../tests/fixtures/accounting/slurm_2205_lab_sacct.json")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// [`super::stream`], its waiting jobs kept in memory.
    fn stream<R: Read>(input: R, on_job: impl FnMut(usize, String) -> bool) -> Result<usize, StreamError> {
        super::stream(
            input,
            &mut || Ok(Box::new(std::io::Cursor::new(Vec::new())) as Box<dyn Waiting>),
            on_job,
        )
    }

    /// Real `sacct --json` of Slurm 22.05.8: job 1 ran 64 s, 54 of them
    /// suspended (`time.suspended`); read as before migration 0060, not.
    #[test]
    fn suspended_time_is_read() {
        let doc = fixture(include_str!(
            "../../tests/fixtures/accounting/slurm_2205_suspend_sacct.json"
        ));
        let now = ReadOptions::default().now(crate::domain::kinds::SourceFormat::SacctJson);
        let suspension = |options: &ReadOptions| {
            read_with(&doc, options)
                .unwrap()
                .iter()
                .find_map(|i| match i {
                    Item::Job(j) if j.job_id == "1" => Some(j.suspension),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(
            suspension(&now),
            Suspension::Slurm {
                suspended: Some(54),
                elapsed: Some(10)
            }
        );
        assert_eq!(suspension(&now.before_0060()), Suspension::Unsaid);
        // Job 6 of another run, resized while suspended: an instant in
        // `time.suspended` and 0 in `time.elapsed`, on both parts (what
        // `Suspension::seconds` reads as nothing said). (The later part's 0,
        // counted from the first start, leaves nothing after the resize: not
        // said.)
        let resized = fixture(include_str!(
            "../../tests/fixtures/accounting/slurm_2205_suspend_resize_sacct.json"
        ));
        let parts: Vec<_> = read_with(&resized, &now)
            .unwrap()
            .iter()
            .map(|i| match i {
                Item::Job(j) => (j.state.clone(), j.suspension),
                other => panic!("{other:?}"),
            })
            .collect();
        let slurm = |s, elapsed| Suspension::Slurm {
            suspended: Some(s),
            elapsed,
        };
        assert_eq!(
            parts,
            [
                ("RESIZING".to_owned(), slurm(1_796_640_561, Some(0))),
                ("COMPLETED".to_owned(), slurm(1_796_640_586, None))
            ]
        );
    }

    fn read_all(doc: &str) -> Result<Vec<Item>, StreamError> {
        read_with(doc, &ReadOptions::default())
    }

    fn read_with(doc: &str, options: &ReadOptions) -> Result<Vec<Item>, StreamError> {
        let mut p = SacctJsonParser::new(options);
        let mut items = Vec::new();
        stream(doc.as_bytes(), |_, job| {
            items.extend(p.parse(&job));
            true
        })?;
        Ok(items)
    }

    fn job(item: &Item) -> &JobInput {
        match item {
            Item::Job(j) => j,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_real_document_reads_as_the_parsable_reader_reads_it() {
        let items = read_all(&lab()).unwrap();
        assert_eq!(items.len(), 17);
        // Job 12 was cancelled before it ran.
        assert_eq!(
            items.iter().filter(|i| **i == Item::Skip(Skip::NeverStarted)).count(),
            1
        );
        // The same with a start before its end, on no node and holding
        // nothing: never started, as a parsable line on `None assigned`
        // nodes (it was an error).
        let started = lab().replacen(r#""start": null"#, r#""start": 1796028490"#, 1);
        assert_ne!(started, lab());
        assert_eq!(
            read_all(&started)
                .unwrap()
                .iter()
                .filter(|i| **i == Item::Skip(Skip::NeverStarted))
                .count(),
            1
        );
        let at = |s: i64| Stamp::At(DateTime::from_timestamp(s, 0).unwrap());
        let j1 = job(&items[0]);
        assert_eq!(
            (
                j1.cluster.as_deref(),
                j1.job_id.as_str(),
                j1.project.as_deref(),
                j1.queue.as_deref()
            ),
            (Some("testclu"), "1", Some("pas1234"), Some("regular"))
        );
        assert_eq!(
            (j1.start, j1.end, j1.submit),
            (at(1796028480), at(1796028563), Some(at(1796028480)))
        );
        assert_eq!(
            (j1.nodes, j1.cores, j1.memory, j1.gpus),
            (Some(1), 1, Some(Bytes(200 * MIB)), None)
        );
        // As sacct --parsable2 prints it: ExitCode 0:15, State TIMEOUT.
        assert_eq!((j1.state.as_str(), j1.exit_code.as_deref()), ("TIMEOUT", Some("0:15")));
        let by_id = |id: &str, index: Option<u32>| {
            items
                .iter()
                .filter_map(|i| match i {
                    Item::Job(j) => Some(j),
                    _ => None,
                })
                .find(|j| j.job_id == id && j.array_index == index)
                .unwrap_or_else(|| panic!("job {id} {index:?}"))
        };
        // Array task 6_2 (raw id 6), 6_0 (raw id 14).
        assert_eq!(by_id("6", Some(2)).cores, 1);
        assert_eq!(by_id("6", Some(0)).start, at(1796028491));
        // GPUs: typed and untyped gres entries, two nodes.
        let j18 = by_id("18", None);
        assert_eq!(
            (j18.nodes, j18.cores, j18.gpus, j18.memory),
            (Some(2), 2, Some(4), Some(Bytes(2 * GIB)))
        );
        assert_eq!(by_id("4", None).gpus, Some(1));
    }

    #[test]
    fn other_layouts_are_refused_before_any_job() {
        let later = lab().replace("dbv0.0.38", "dbv0.0.39").replace("22.05.8", "23.02.1");
        let mut given = 0;
        let e = stream(later.as_bytes(), |_, _| {
            given += 1;
            true
        })
        .unwrap_err();
        assert_eq!(given, 0);
        let m = e.to_string();
        assert!(
            m.contains(
                "this is the layout openapi/dbv0.0.39 (Slurm 23.02.1); hpc-ledger reads openapi/dbv0.0.38 (Slurm 22.05)"
            ),
            "{m}"
        );
        assert!(m.contains("--parsable2"), "{m}");
        // A layout after the ones read, its jobs before its `meta` (as Slurm
        // 23.11 and later write them): refused before any job is given.
        let later = fixture(include_str!(
            "../../tests/fixtures/accounting/slurm_2505_slurmweb_jobs.json"
        ))
        .replace("data_parser/v0.0.43", "data_parser/v0.0.44")
        .replace("25.05.4", "25.11.0");
        let mut given = 0;
        let e = stream(later.as_bytes(), |_, _| {
            given += 1;
            true
        })
        .unwrap_err();
        assert_eq!(given, 0);
        assert!(
            e.to_string().contains("this is the layout data_parser/v0.0.44 (Slurm 25.11.0); hpc-ledger reads openapi/dbv0.0.38 (Slurm 22.05), data_parser/v0.0.39 (Slurm 23.02)"),
            "{e}"
        );
        let two = r#"{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "jobs": [],
            "meta": {"plugin": {"type": "openapi/dbv0.0.44"}}}"#;
        let e = stream(two.as_bytes(), |_, _| true).unwrap_err();
        assert!(e.to_string().contains("two `meta` objects"), "{e}");
        let e = stream(r#"{"jobs": [{"job_id": 1}], "meta": {}}"#.as_bytes(), |_, _| true).unwrap_err();
        assert!(e.to_string().contains("`meta` names no layout"), "{e}");
        let e = stream(r#"{"jobs": [{"job_id": 1}]}"#.as_bytes(), |_, _| panic!("given")).unwrap_err();
        assert!(e.to_string().contains("no `meta` naming its layout"), "{e}");
        let e = stream(
            r#"{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}}"#.as_bytes(),
            |_, _| true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no `jobs` array"), "{e}");
        let e = stream("[1, 2]".as_bytes(), |_, _| true).unwrap_err();
        assert!(e.to_string().starts_with("sacct --json: "), "{e}");
    }

    fn fixture(text: &str) -> String {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Real documents of each data_parser layout (Slurm 23.02 to 25.05):
    /// sacct's own output (SARC's), slurmrestd's (Slurm-web's).
    #[test]
    fn the_data_parser_layouts_read_as_the_first_one_does() {
        let read = |doc: &str| read_all(&fixture(doc)).unwrap();
        let at = |s: i64| Stamp::At(DateTime::from_timestamp(s, 0).unwrap());
        // 23.02.6 (v0.0.39, `meta` first) and 23.11.5 (v0.0.40, `jobs`
        // first): sacct's own output, a job still running; read as if it had
        // ended (state and end changed, nothing else), the same job in both.
        let sarc_2302 = include_str!("../../tests/fixtures/accounting/slurm_2302_sarc_sacct.json");
        let sarc_2311 = include_str!("../../tests/fixtures/accounting/slurm_2311_sarc_sacct.json");
        assert_eq!(read(sarc_2302), [Item::Skip(Skip::NotEnded)]);
        assert_eq!(read(sarc_2311), [Item::Skip(Skip::NotEnded)]);
        for (doc, state) in [
            (sarc_2302, serde_json::json!("COMPLETED")),
            (sarc_2311, serde_json::json!(["COMPLETED"])),
        ] {
            let mut d: Value = serde_json::from_str(&fixture(doc)).unwrap();
            d["jobs"][0]["state"]["current"] = state;
            d["jobs"][0]["time"]["end"] = serde_json::json!(1613728809);
            let items = read(&d.to_string());
            let j = job(&items[0]);
            assert_eq!(
                (
                    j.cluster.as_deref(),
                    j.job_id.as_str(),
                    j.array_index,
                    j.project.as_deref(),
                    j.queue.as_deref()
                ),
                (Some("mila"), "4", None, Some("mila"), Some("main"))
            );
            assert_eq!(
                (
                    j.nodes,
                    j.cores,
                    j.memory,
                    j.gpus,
                    j.start,
                    j.end,
                    j.exit_code.as_deref()
                ),
                (
                    Some(1),
                    4,
                    Some(Bytes(32 * GIB)),
                    Some(2),
                    at(1613725209),
                    at(1613728809),
                    Some("0:0")
                )
            );
        }
        // 23.02's slurmrestd names its layout `openapi/dbv0.0.39` with a
        // bare `v0.0.39` (its api.c): the same jobs as sacct's v0.0.39.
        let mut d: Value = serde_json::from_str(&fixture(sarc_2302)).unwrap();
        d["meta"] = serde_json::json!({"plugin": {"type": "openapi/dbv0.0.39", "name": "Slurm OpenAPI DB v0.0.39", "data_parser": "v0.0.39"},
            "Slurm": {"version": {"major": 23, "micro": 6, "minor": 2}, "release": "23.02.6"}});
        assert_eq!(read(&d.to_string()), [Item::Skip(Skip::NotEnded)]);
        let items = read(include_str!(
            "../../tests/fixtures/accounting/slurm_2311_slurmweb_job.json"
        ));
        let j = job(&items[0]);
        assert_eq!(
            (
                j.cluster.as_deref(),
                j.job_id.as_str(),
                j.array_index,
                j.project.as_deref(),
                j.user.as_str(),
                j.queue.as_deref()
            ),
            (Some("hpc"), "509", None, Some("admin"), "tmcgrath", Some("standard"))
        );
        assert_eq!(
            (j.submit, j.start, j.end),
            (Some(at(1746621138)), at(1746621139), at(1746621140))
        );
        assert_eq!(
            (
                j.nodes,
                j.cores,
                j.memory,
                j.gpus,
                j.state.as_str(),
                j.exit_code.as_deref()
            ),
            (Some(1), 1, Some(Bytes(512 * MIB)), None, "COMPLETED", Some("0:0"))
        );
        // 24.05.3 (v0.0.41): submitted with --gpus 4 on a cluster that does
        // not account gres/gpu; its record holds none (as sacct's AllocTRES).
        let items = read(include_str!(
            "../../tests/fixtures/accounting/slurm_2405_slurmweb_job_gpus.json"
        ));
        let j = job(&items[0]);
        assert_eq!(
            (j.job_id.as_str(), j.queue.as_deref(), j.cores, j.gpus, j.end),
            ("10", Some("gpu"), 1, None, at(1762529685))
        );
        // 24.11.5 (v0.0.42): 32 CPUs, 16384 MB.
        let items = read(include_str!(
            "../../tests/fixtures/accounting/slurm_2411_slurmweb_job.json"
        ));
        let j = job(&items[0]);
        assert_eq!(
            (j.job_id.as_str(), j.nodes, j.cores, j.memory, j.end),
            ("6362", Some(1), 32, Some(Bytes(16 * GIB)), at(1762788837))
        );
        // 25.05.4 (v0.0.43): a node failure, signal 46, no return code.
        let items = read(include_str!(
            "../../tests/fixtures/accounting/slurm_2505_slurmweb_jobs.json"
        ));
        let j = job(&items[0]);
        assert_eq!(
            (
                j.job_id.as_str(),
                j.state.as_str(),
                j.exit_code.as_deref(),
                j.cores,
                j.start,
                j.end
            ),
            ("13826", "NODE_FAIL", Some("0:46"), 2, at(1779954174), at(1779954174))
        );
        // A GPU listed as `gres/gpu` and as `gres/gpu:h100` is one GPU
        // (docs/rules.md, D3). The job was running; read as if it had ended.
        let doc = read(include_str!(
            "../../tests/fixtures/accounting/slurm_2505_slurmweb_job_gpu_types.json"
        ));
        assert_eq!(doc, [Item::Skip(Skip::NotEnded)]);
        let mut gpu: Value = serde_json::from_str(&fixture(include_str!(
            "../../tests/fixtures/accounting/slurm_2505_slurmweb_job_gpu_types.json"
        )))
        .unwrap();
        let mut gpu = gpu["jobs"][0].take();
        gpu["state"]["current"] = serde_json::json!(["COMPLETED"]);
        gpu["time"]["end"] = serde_json::json!(1780146030);
        let mut p = SacctJsonParser::new(&ReadOptions::default());
        let Some(Item::Job(j)) = p.parse(&gpu.to_string()) else {
            panic!("{gpu}")
        };
        assert_eq!((j.job_id.as_str(), j.cores, j.gpus), ("14243", 1, Some(1)));
    }

    /// The lab's real resize (see slurm.rs): `sacct --json` reads as
    /// `--parsable2` does.
    #[test]
    fn a_resized_job_is_read_as_its_parts() {
        let doc = fixture(include_str!(
            "../../tests/fixtures/accounting/slurm_2205_resize_sacct.json"
        ));
        let at = |s: i64| Stamp::At(DateTime::from_timestamp(s, 0).unwrap());
        let parts: Vec<_> = read_all(&doc)
            .unwrap()
            .iter()
            .map(|i| {
                let j = job(i);
                (j.state.clone(), j.nodes, j.cores, j.start, j.end)
            })
            .collect();
        assert_eq!(
            parts,
            [
                ("RESIZING".to_owned(), Some(2), 2, at(1796579779), at(1796579787)),
                ("COMPLETED".to_owned(), Some(1), 1, at(1796579787), at(1796579819)),
            ]
        );
    }

    #[test]
    fn a_document_reporting_errors_records_nothing() {
        // Real documents of each order of `meta`, `errors` and `jobs`: 22.05
        // (meta, errors, jobs), 23.02 (meta, jobs, warnings, errors), 23.11
        // and later (jobs, meta, errors, warnings); each with an error as
        // slurmrestd reports one (OpenAPI's error: description, error
        // number, error, source).
        let error = r#"[{"description": "Unable to query jobs", "error_number": 7000,
            "error": "Unable to contact slurm controller (connect failure)", "source": "slurmdb_jobs_get"}]"#;
        for (name, doc, jobs) in [
            ("22.05", lab(), 17),
            (
                "23.02",
                fixture(include_str!(
                    "../../tests/fixtures/accounting/slurm_2302_sarc_sacct.json"
                )),
                1,
            ),
            (
                "23.11",
                fixture(include_str!(
                    "../../tests/fixtures/accounting/slurm_2311_sarc_sacct.json"
                )),
                1,
            ),
        ] {
            let mut given = 0;
            let n = stream(doc.as_bytes(), |_, _| {
                given += 1;
                true
            })
            .unwrap();
            assert_eq!((n, given), (jobs, jobs), "{name}");
            let v: Value = serde_json::from_str(&doc).unwrap();
            assert_eq!(v["errors"], serde_json::json!([]), "{name}");
            // The same document with the error: its `errors` are replaced in
            // place, so the order of its members stays Slurm's.
            let at = doc.find(r#""errors""#).unwrap();
            let open = at + doc[at..].find('[').unwrap();
            let close = open + doc[open..].find(']').unwrap();
            let erred = format!("{}{error}{}", &doc[..open], &doc[close + 1..]);
            let mut given = 0;
            let e = stream(erred.as_bytes(), |_, _| {
                given += 1;
                true
            })
            .unwrap_err();
            assert_eq!(given, 0, "{name}: no job is given");
            // serde_json adds where in the document it was.
            let m = e.to_string();
            assert_eq!(
                m.split(" at line ").next().unwrap(),
                "sacct --json: the document reports 1 error from Slurm, so its jobs may be incomplete: \
                 \"Unable to query jobs\", \"Unable to contact slurm controller (connect failure)\", \
                 error number 7000, in slurmdb_jobs_get; nothing was recorded (run sacct again once the cause is fixed)",
                "{name}"
            );
        }
        // Slurm 22.05's answer for a query that found no job (sacct --json
        // and slurmrestd alike): no jobs and this error, which is none.
        let quiet = r#"{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}},
            "errors": [{"description": "Nothing found", "error_number": 9003, "error": "Nothing found", "source": "slurmdb_jobs_get"}], "jobs": []}"#;
        assert_eq!(stream(quiet.as_bytes(), |_, _| true).unwrap(), 0);
        // The same from another query (the associations) left jobs out.
        let e = stream(
            quiet.replace("slurmdb_jobs_get", "slurmdb_associations_get").as_bytes(),
            |_, _| true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("in slurmdb_associations_get"), "{e}");
        // slurmrestd's answer when slurmdbd failed: no jobs, one error.
        let failed = r#"{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "errors": [{"error": "Unable to connect to database", "error_number": 1}], "jobs": []}"#;
        let e = stream(failed.as_bytes(), |_, _| true).unwrap_err();
        assert!(e.to_string().contains(r#"1 error from Slurm, so its jobs may be incomplete: "Unable to connect to database", error number 1; nothing was recorded"#), "{e}");
        // A document without `errors` gives its jobs at its end.
        let none = r#"{"meta": {"plugin": {"type": "", "data_parser": "data_parser/v0.0.40"}}, "jobs": [{"job_id": 1}, {"job_id": 2}]}"#;
        let mut seen = Vec::new();
        assert_eq!(
            stream(none.as_bytes(), |i, _| {
                seen.push(i);
                true
            })
            .unwrap(),
            2
        );
        assert_eq!(seen, [0, 1]);
    }

    #[test]
    fn a_stream_stops_when_told_and_does_not_hold_the_document() {
        let doc = lab();
        let mut seen = Vec::new();
        let r = stream(doc.as_bytes(), |i, job| {
            assert!(!job.contains("\"steps\""), "steps are dropped");
            seen.push(i);
            i < 2
        });
        assert!(matches!(r, Err(StreamError::Stopped)));
        assert_eq!(seen, vec![0, 1, 2]);
        // Jobs before `meta` (Slurm 23.11 and later) wait for it, then come
        // in their order, and stop when told.
        let first = r#"{"jobs": [{"job_id": 1, "steps": [{"x": 1}]}, {"job_id": 2}, {"job_id": 3}],
            "meta": {"plugin": {"type": "", "data_parser": "data_parser/v0.0.40"}}}"#;
        let mut seen = Vec::new();
        let r = stream(first.as_bytes(), |i, job| {
            seen.push((i, job));
            i < 1
        });
        assert!(matches!(r, Err(StreamError::Stopped)));
        assert_eq!(
            seen,
            [(0, r#"{"job_id":1}"#.to_owned()), (1, r#"{"job_id":2}"#.to_owned())]
        );
    }

    #[test]
    fn states_arrays_het_jobs_and_damage() {
        let mut p = SacctJsonParser::new(&ReadOptions::default());
        let base = r#"{"job_id": 40, "state": {"current": "STATE"}, "time": {"start": 100, "end": 200, "submission": 90},
            "array": {"job_id": 0, "task_id": null}, "het": {"job_id": 0, "job_offset": null}, "cluster": "c", "account": "a",
            "partition": "p", "tres": {"allocated": [{"type": "cpu", "name": null, "count": 4}], "requested": [{"type": "gres", "name": "gpu", "count": 2}]},
            "exit_code": {"status": "SUCCESS", "return_code": 0}}"#;
        let with = |state: &str| base.replace("STATE", state);
        assert_eq!(p.parse(&with("RUNNING")), Some(Item::Skip(Skip::NotEnded)));
        assert_eq!(
            p.parse(&with("BOGUS")),
            Some(Item::Bad("unknown job state \"BOGUS\"".into()))
        );
        let Some(Item::Job(j)) = p.parse(&with("REQUEUED")) else {
            panic!()
        };
        // GPUs requested, none in the allocation's list: the request's, as ReqTRES.
        assert_eq!((j.cores, j.gpus, j.exit_code.as_deref()), (4, Some(2), Some("0:0")));
        let het = with("COMPLETED").replace(
            r#""het": {"job_id": 0, "job_offset": null}"#,
            r#""het": {"job_id": 38, "job_offset": 2}"#,
        );
        let Some(Item::Job(j)) = p.parse(&het) else { panic!() };
        assert_eq!(j.job_id, "38+2");
        let pending_array = with("COMPLETED")
            .replace(r#""task_id": null"#, r#""task_id": null, "task": "0-9""#)
            .replace(r#""job_id": 0, "task"#, r#""job_id": 40, "task"#);
        assert!(
            matches!(p.parse(&pending_array), Some(Item::Bad(r)) if r.contains("stands for several tasks")),
            "{pending_array}"
        );
        let no_cpu = with("COMPLETED").replace(
            r#"{"type": "cpu", "name": null, "count": 4}"#,
            r#"{"type": "mem", "name": null, "count": 4}"#,
        );
        assert_eq!(p.parse(&no_cpu), Some(Item::Bad("tres.allocated: no cpu count".into())));
        // State lists (data_parser v0.0.40 and later): read as sacct prints them.
        let listed = |list: &str| with("X").replace(r#""X""#, list);
        let state = |list: &str| match SacctJsonParser::new(&ReadOptions::default()).parse(&listed(list)) {
            Some(Item::Job(j)) => j.state,
            other => format!("{other:?}"),
        };
        assert_eq!(state(r#"["COMPLETED"]"#), "COMPLETED");
        assert_eq!(state(r#"["PENDING", "REQUEUED"]"#), "REQUEUED");
        assert_eq!(state(r#"["FAILED", "LAUNCH_FAILED"]"#), "FAILED");
        assert_eq!(state(r#"["CANCELLED", "UPDATE_DB"]"#), "CANCELLED");
        assert_eq!(
            p.parse(&listed(r#"["COMPLETING", "COMPLETED"]"#)),
            Some(Item::Skip(Skip::NotEnded))
        );
        assert!(state(r#"["COMPLETED", "FAILED"]"#).contains(r#"unknown job state [\"COMPLETED\", \"FAILED\"]"#));
        assert!(state(r#"[1]"#).contains("state.current has 1, which is not a text"));
        assert!(state(r#"["COMPLETED", "NEW_FLAG"]"#).contains("unknown job state"));
        assert!(state(r#"{"a": 1}"#).contains("neither a text nor a list of texts"));
        // Counts as {set, infinite, number} (data_parser v0.0.39 and later).
        let task = with("COMPLETED")
            .replace(
                r#""task_id": null"#,
                r#""task_id": {"set": true, "infinite": false, "number": 2}"#,
            )
            .replace(r#""job_id": 0, "task"#, r#""job_id": 39, "task"#);
        let Some(Item::Job(j)) = p.parse(&task) else {
            panic!("{task}")
        };
        assert_eq!((j.job_id.as_str(), j.array_index), ("39", Some(2)));
        let endless = task.replace(
            r#"{"set": true, "infinite": false, "number": 2}"#,
            r#"{"set": false, "infinite": true, "number": 0}"#,
        );
        assert_eq!(p.parse(&endless), Some(Item::Bad("array.task_id is infinite".into())));
        let signalled = with("COMPLETED").replace(
            r#""exit_code": {"status": "SUCCESS", "return_code": 0}"#,
            r#""exit_code": {"status": ["SIGNALED"], "return_code": {"set": false, "infinite": false, "number": 0},
                "signal": {"id": {"set": true, "infinite": false, "number": 9}, "name": "KILL"}}"#,
        );
        let Some(Item::Job(j)) = p.parse(&signalled) else {
            panic!()
        };
        assert_eq!(j.exit_code.as_deref(), Some("0:9"));
        assert!(matches!(p.parse("{"), Some(Item::Bad(r)) if r.starts_with("not a job object of sacct --json")));
        assert_eq!(p.job_key(&with("COMPLETED")), Some("c/40".into()));
    }
}
