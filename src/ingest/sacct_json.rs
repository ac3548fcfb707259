//! Slurm `sacct --json` output, and the same `jobs` array as slurmrestd's
//! `GET /slurmdb/v0.0.38/jobs` returns it.
//!
//! The document is `{"meta": …, "errors": […], "jobs": [ {job}, … ]}`. It is
//! read as a stream ([`stream`]): one job object at a time, so memory stays
//! flat however many jobs it holds. Each job object (without its `steps`,
//! which do not change the charge and can be large) is then one record: it
//! is what is stored and what [`SacctJsonParser`] reads again on a retry.
//!
//! Only the layout this reader was tested on is read: Slurm 22.05's
//! (`meta.plugin.type` = `openapi/dbv0.0.38`). Later versions changed the
//! layout (states as lists, times and counts as `{set, infinite, number}`);
//! a document of another layout is refused at once with the layout it
//! carries, and nothing is recorded.
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
use crate::domain::posting::{JobInput, Stamp};
use crate::domain::request::parse_alloc_tres;

/// The layouts read (`meta.plugin.type`), with the Slurm version that writes each.
pub const LAYOUTS: &[(&str, &str)] = &[("openapi/dbv0.0.38", "Slurm 22.05")];

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

/// Read the jobs of a `sacct --json` document one at a time: `on_job(index,
/// job)` gets each job object as compact JSON without its steps, and returns
/// `false` to stop. The layout is checked (from `meta`, which must come
/// before `jobs`) before any job is given.
pub fn stream<R: Read>(input: R, mut on_job: impl FnMut(usize, String) -> bool) -> Result<usize, StreamError> {
    let mut de = serde_json::Deserializer::from_reader(input);
    let mut top = Top {
        on_job: &mut on_job,
        layout_ok: false,
        jobs: 0,
    };
    let result = (&mut top).deserialize(&mut de).and_then(|()| de.end());
    match result {
        Ok(()) => Ok(top.jobs),
        Err(e) if e.to_string().starts_with(STOPPED) => Err(StreamError::Stopped),
        Err(e) if e.is_io() => Err(StreamError::Io(e.into())),
        Err(e) => Err(StreamError::Document(format!("sacct --json: {e}"))),
    }
}

struct Top<'f, F> {
    on_job: &'f mut F,
    layout_ok: bool,
    jobs: usize,
}

impl<'de, F: FnMut(usize, String) -> bool> DeserializeSeed<'de> for &mut Top<'_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(usize, String) -> bool> Visitor<'de> for &mut Top<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sacct --json document (an object with `meta` and `jobs`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut saw_jobs = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "meta" => {
                    let meta: Value = map.next_value()?;
                    check_layout(&meta).map_err(de::Error::custom)?;
                    self.layout_ok = true;
                }
                "jobs" => {
                    if !self.layout_ok {
                        return Err(de::Error::custom(
                            "`jobs` comes before `meta`, as Slurm 23.11 and later write it (layouts data_parser/v0.0.40 and after), which hpc-ledger does not read — export with `sacct --parsable2` (--format slurm) instead; nothing was recorded",
                        ));
                    }
                    saw_jobs = true;
                    map.next_value_seed(Jobs { top: &mut *self })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !saw_jobs {
            return Err(de::Error::custom("the document has no `jobs` array"));
        }
        Ok(())
    }
}

struct Jobs<'t, 'f, F> {
    top: &'t mut Top<'f, F>,
}

impl<'de, F: FnMut(usize, String) -> bool> DeserializeSeed<'de> for Jobs<'_, '_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(usize, String) -> bool> Visitor<'de> for Jobs<'_, '_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of jobs")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        while let Some(mut job) = seq.next_element::<Value>()? {
            if let Some(o) = job.as_object_mut() {
                o.remove("steps");
            }
            let index = self.top.jobs;
            self.top.jobs += 1;
            if !(self.top.on_job)(index, job.to_string()) {
                return Err(de::Error::custom(STOPPED));
            }
        }
        Ok(())
    }
}

/// The layout a `meta` object names, if it is one this reader reads.
fn check_layout(meta: &Value) -> Result<(), String> {
    // Where each Slurm names it: 22.05 `plugin.type`; 23.02 `plugins.data_parser`
    // and `Slurm.release`; 23.11 an empty `plugin.type`, `plugin.data_parser`
    // and `slurm.release`.
    let named = |paths: &[&str]| {
        paths
            .iter()
            .filter_map(|p| meta.pointer(p).and_then(Value::as_str))
            .find(|s| !s.trim().is_empty())
    };
    let layout = named(&["/plugin/type", "/plugin/data_parser", "/plugins/data_parser"]);
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

fn int(v: Option<&Value>, what: &str) -> Result<Option<i64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
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

fn epoch(v: Option<&Value>, what: &str) -> Result<Option<Stamp>, String> {
    match int(v, what)? {
        None | Some(0) => Ok(None),
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
            Some(other) => {
                return Err(format!(
                    "state.current {other} is not a text (a layout other than Slurm 22.05's?)"
                ));
            }
        };
        let state_word = state.split_whitespace().next().unwrap_or("").to_uppercase();
        if NOT_ENDED.contains(&state_word.as_str()) {
            return Ok(Item::Skip(Skip::NotEnded));
        }
        let Some(start) = epoch(job.pointer("/time/start"), "time.start")? else {
            return Ok(Item::Skip(Skip::NeverStarted));
        };
        let Some(end) = epoch(job.pointer("/time/end"), "time.end")? else {
            return Ok(Item::Skip(Skip::NotEnded));
        };
        let alloc = tres_string(job.pointer("/tres/allocated"), "tres.allocated")?;
        // Cancelled before it ran: no allocation (sacct --parsable2 shows Start = End).
        if !alloc.split(',').any(|p| p.starts_with("cpu=")) && start == end {
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        if !state_word.is_empty() && !ENDED.contains(&state_word.as_str()) {
            return Err(format!("unknown job state {state:?}"));
        }
        let submit = epoch(job.pointer("/time/submission"), "time.submission")?;
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
                let sig = int(e.pointer("/signal/signal_id"), "exit_code.signal.signal_id")?.unwrap_or(0);
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

    fn read_all(doc: &str) -> Result<Vec<Item>, StreamError> {
        let mut p = SacctJsonParser::new(&ReadOptions::default());
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
        let e = stream(r#"{"jobs": [], "meta": {}}"#.as_bytes(), |_, _| true).unwrap_err();
        assert!(
            e.to_string().contains("`jobs` comes before `meta`, as Slurm 23.11"),
            "{e}"
        );
        assert!(e.to_string().contains("--parsable2"), "{e}");
        // How Slurm 23.02 (SARC's sacct_outputs) and 23.11 name theirs.
        let e = stream(
            r#"{"meta": {"plugins": {"data_parser": "data_parser/v0.0.39", "accounting_storage": "accounting_storage/slurmdbd"},
                "Slurm": {"version": {"major": 23, "micro": 6, "minor": 2}, "release": "23.02.6"}}, "jobs": []}"#
                .as_bytes(),
            |_, _| true,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("this is the layout data_parser/v0.0.39 (Slurm 23.02.6); hpc-ledger reads openapi/dbv0.0.38"),
            "{e}"
        );
        let e = stream(
            r#"{"meta": {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.40"},
                "slurm": {"release": "23.11.5"}}, "jobs": []}"#
                .as_bytes(),
            |_, _| true,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("this is the layout data_parser/v0.0.40 (Slurm 23.11.5)"),
            "{e}"
        );
        let e = stream(
            r#"{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}}"#.as_bytes(),
            |_, _| true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no `jobs` array"), "{e}");
        let e = stream("[1, 2]".as_bytes(), |_, _| true).unwrap_err();
        assert!(e.to_string().starts_with("sacct --json: "), "{e}");
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
        let later = with("COMPLETED").replace(r#""current": "COMPLETED""#, r#""current": ["COMPLETED"]"#);
        assert!(matches!(p.parse(&later), Some(Item::Bad(r)) if r.contains("not a text")));
        assert!(matches!(p.parse("{"), Some(Item::Bad(r)) if r.starts_with("not a job object of sacct --json")));
        assert_eq!(p.job_key(&with("COMPLETED")), Some("c/40".into()));
    }
}
