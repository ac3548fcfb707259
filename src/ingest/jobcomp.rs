//! Slurm's job-completion documents: the JSON body `jobcomp/elasticsearch`
//! POSTs for every finished job (what `hpc-ledger serve` takes), or one such
//! document per line (`import --format jobcomp`, e.g. an Elasticsearch export).
//!
//! Read the way the Slurm parser reads `sacct`, so both paths give one
//! answer: what the job held comes from `tres_alloc` (docs/rules.md D3), falling back
//! to `total_cpus`/`total_nodes`; `@submit`/`@start`/`@end` are UTC without
//! a zone (Slurm writes them with `gmtime`; [`ReadOptions::jobcomp_utc`],
//! set for every document read since 2026-12-06: one read before is read
//! again as it was, in its cluster's zone), or carry an offset; an array task is `array_job_id` with index `array_task_id` (as
//! `sacct` shows `6_2`), a heterogeneous job's component is `het_job_id+offset`.
//! A job that never ran (cancelled while pending: no nodes, no CPUs) is
//! skipped. The job's batch script, which Slurm includes whole, is dropped
//! from the stored record (see [`stored_document`]).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::slurm::{ENDED, NOT_ENDED};
use super::{Item, KeptOptions, Parser, ReadOptions, Skip};
use crate::domain::posting::{JobInput, Stamp};
use crate::domain::request::parse_alloc_tres;

/// Slurm's NO_VAL: "not set" in 32-bit fields (`array_task_id` of a job
/// that is not an array task).
const NO_VAL: u64 = 0xffff_fffe;

/// The states a job is in right after one of its runs was requeued: a
/// document in one of them that carries a start, an end and an allocation
/// is that run's record.
const REQUEUE_STATES: &[&str] = &["PENDING", "REQUEUE_HOLD", "REQUEUE_FED", "REQUEUED"];

/// Fields of a document that are not kept in the ledger: the batch script
/// (up to megabytes, and the research group's code, not accounting data) and
/// the job's environment, should a Slurm version send it.
pub const DROPPED: &[&str] = &["script", "environment", "env"];

/// The document as it is stored with the job's record: everything Slurm
/// sent except the [`DROPPED`] fields (and a member over
/// [`KEPT_MEMBER_MAX`] that the job is not read from), as one line of JSON.
/// Reading it again gives the same job.
pub fn stored_document(mut doc: Map<String, Value>) -> String {
    for k in DROPPED {
        doc.remove(*k);
    }
    // An Elasticsearch hit's document.
    if let Some(Value::Object(source)) = doc.get_mut("_source") {
        for k in DROPPED {
            source.remove(*k);
        }
    }
    Value::Object(doc).to_string()
}

/// The bytes to keep of a body that was not valid UTF-8: as received, less
/// the [`DROPPED`] fields (found at the byte level); the body itself when
/// it is not a JSON object.
pub fn stored_bytes(body: &[u8]) -> Vec<u8> {
    super::json_bytes::without_members(body, DROPPED).unwrap_or_else(|| body.to_vec())
}

/// What to keep of a body that could not be read as a job: the document
/// without its [`DROPPED`] fields when it is a JSON object, else the body.
pub fn stored_body(body: &str) -> String {
    match members(body) {
        Ok(doc) => stored_document(doc),
        _ => body.to_owned(),
    }
}

/// The members a job is read from ([`read_document`]).
const READ: &[&str] = &[
    "jobid",
    "array_job_id",
    "array_task_id",
    "het_job_id",
    "het_job_offset",
    "state",
    "@start",
    "@end",
    "@submit",
    "tres_alloc",
    "tres_req",
    "total_cpus",
    "total_nodes",
    "nodes",
    "cluster",
    "account",
    "username",
    "job_name",
    "partition",
    "exit_code",
];

/// The largest member of a document that is kept unless it is a text the
/// job is read from. Slurm's are mostly a few hundred bytes (its batch
/// script and environment are not kept at all, [`DROPPED`]; the longest it
/// may send, a dependency list, excluded nodes, features, paths, are not
/// read for the charge); a larger one (a sender's 14.7 MB `"pad": [0, 0,
/// …]`, or the same as a `job_name`) would stay in the append-only ledger
/// for good, and read as JSON values it took 16 times its size in memory.
pub const KEPT_MEMBER_MAX: usize = 64 << 10;

/// Whether a member of a document is left out of what is read and kept:
/// [`DROPPED`], or over [`KEPT_MEMBER_MAX`] unless a text the job is read
/// from.
fn left_out(key: &str, value: &serde_json::value::RawValue) -> bool {
    DROPPED.contains(&key)
        || (value.get().len() > KEPT_MEMBER_MAX && !(READ.contains(&key) && value.get().starts_with('"')))
}

/// The top-level members of a document left out of what is read and kept
/// ([`left_out`]; not `_source`, read member by member): to leave them out
/// of the exact bytes kept of a body that is not UTF-8 too.
pub fn left_out_members(body: &str) -> Vec<String> {
    serde_json::from_str::<std::collections::BTreeMap<String, &serde_json::value::RawValue>>(body)
        .map(|m| {
            m.into_iter()
                .filter(|(k, v)| k != "_source" && left_out(k, v))
                .map(|(k, _)| k)
                .collect()
        })
        .unwrap_or_default()
}

/// A document's members, less those [`left_out`] ([`DROPPED`], and those
/// over [`KEPT_MEMBER_MAX`] but a text the job is read from), read without
/// copying them first: the batch script (up to megabytes) is only skipped.
/// An Elasticsearch hit's `_source` is the document, read the same way.
fn members(body: &str) -> Result<Map<String, Value>, String> {
    let raw: std::collections::BTreeMap<String, &serde_json::value::RawValue> = match serde_json::from_str(body) {
        Ok(m) => m,
        Err(e) if e.is_data() && !body.trim_start().starts_with('{') => return Err("not a JSON object".into()),
        Err(e) => return Err(format!("not JSON: {e}")),
    };
    let mut doc = Map::new();
    for (k, v) in raw {
        let value = if k == "_source" && v.get().trim_start().starts_with('{') {
            Value::Object(members(v.get())?)
        } else if left_out(&k, v) {
            continue;
        } else {
            serde_json::from_str(v.get()).map_err(|e| format!("not JSON: {e}"))?
        };
        doc.insert(k, value);
    }
    Ok(doc)
}

fn text<'a>(doc: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    doc.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// A whole number that Slurm writes as a JSON number (or, defensively, text).
fn whole(doc: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` {n} is not a whole number ≥ 0")),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("`{key}` {s:?} is not a whole number ≥ 0")),
        Some(v) => Err(format!("`{key}` {v} is not a whole number")),
    }
}

fn count(doc: &Map<String, Value>, key: &str) -> Result<Option<u32>, String> {
    whole(doc, key)?
        .map(|n| u32::try_from(n).map_err(|_| format!("`{key}` {n} is too large")))
        .transpose()
}

fn stamp(doc: &Map<String, Value>, key: &str, utc: bool) -> Result<Option<Stamp>, String> {
    let Some(v) = doc.get(key) else { return Ok(None) };
    let s = match v {
        Value::Null => return Ok(None),
        Value::String(s) => s.trim(),
        Value::Number(n) => {
            return n
                .as_i64()
                .and_then(|secs| DateTime::from_timestamp(secs, 0))
                .map(|t| Some(Stamp::At(t)))
                .ok_or_else(|| format!("`{key}` {n} is out of range"));
        }
        other => return Err(format!("`{key}` {other} is not a time")),
    };
    if s.is_empty() || s == "Unknown" {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(Some(Stamp::At(t.with_timezone(&Utc))));
    }
    super::slurm::local_time(s)
        .map(|t| Some(if utc { Stamp::At(t.and_utc()) } else { Stamp::Local(t) }))
        .map_err(|_| format!("`{key}` {s:?} is not a time (expected YYYY-MM-DDTHH:MM:SS)"))
}

/// Read one document (already parsed as JSON).
pub fn read_document(doc: &Map<String, Value>, options: &ReadOptions) -> Result<Item, String> {
    let Some(jobid) = whole(doc, "jobid")? else {
        return Err("missing `jobid`".into());
    };
    let array_task = whole(doc, "array_task_id")?.filter(|&t| t < NO_VAL);
    let array_job = whole(doc, "array_job_id")?.filter(|&j| j != 0);
    let het_job = whole(doc, "het_job_id")?.filter(|&j| j != 0 && j < NO_VAL);
    let (job_id, array_index) = match (array_job, array_task) {
        (Some(base), Some(task)) => (
            base.to_string(),
            Some(u32::try_from(task).map_err(|_| format!("`array_task_id` {task} is too large"))?),
        ),
        _ => match het_job {
            Some(het) => (format!("{het}+{}", whole(doc, "het_job_offset")?.unwrap_or(0)), None),
            None => (jobid.to_string(), None),
        },
    };
    let mut state = text(doc, "state").unwrap_or("").to_owned();
    let (start, end, submit) = (
        stamp(doc, "@start", options.jobcomp_utc)?,
        stamp(doc, "@end", options.jobcomp_utc)?,
        stamp(doc, "@submit", options.jobcomp_utc)?,
    );
    let tres = text(doc, "tres_alloc");
    let cpus = count(doc, "total_cpus")?;
    let nodes_field = text(doc, "nodes");
    if tres.is_none() && cpus.unwrap_or(0) == 0 && nodes_field.is_none_or(|n| n == "(null)") {
        // Cancelled before it ran: Slurm reports start = end and no
        // allocation (sacct shows Start "None").
        return Ok(Item::Skip(Skip::NeverStarted));
    }
    let mut state_word = state.split_whitespace().next().unwrap_or("").to_uppercase();
    // A requeued run (`scontrol requeue`, requeuehold, a node failure or a
    // preemption with requeue): Slurm 22.05 posts the run that just ended
    // with the job's new state, PENDING (or REQUEUE_HOLD), yet with that
    // run's @start, @end and allocation. It held its resources: a run that
    // ended, charged as sacct --duplicates shows it (REQUEUED), never
    // skipped — the job's next document is its next run, with another start.
    if REQUEUE_STATES.contains(&state_word.as_str()) && start.is_some() && end.is_some() {
        state = "REQUEUED".to_owned();
        state_word = state.clone();
    }
    // The states sacct's reader knows: a record of a job not ended charges
    // nothing yet. At a resize Slurm posts the job as RESIZING with @start =
    // @end = the resize (22.05.8, tests/fixtures/accounting/
    // slurm_2205_resize_jobcomp.jsonl): nothing to charge; the part before
    // the resize is in sacct's RESIZING record, the part after is the job's
    // next document, from the resize.
    if NOT_ENDED.contains(&state_word.as_str()) {
        return Ok(Item::Skip(Skip::NotEnded));
    }
    if !state_word.is_empty() && !ENDED.contains(&state_word.as_str()) {
        return Err(format!("unknown job state {state:?}"));
    }
    // Slurm sends a finished job once: one it ran without a start or an
    // end is damaged, and kept as such, not skipped.
    let (Some(start), Some(end)) = (start, end) else {
        return Err("a job that ran, without `@start` or `@end`".into());
    };
    let total_nodes = count(doc, "total_nodes")?;
    let requested = || {
        text(doc, "tres_req")
            .map(|r| parse_alloc_tres(r).map_err(|e| format!("tres_req: {e}")))
            .transpose()
    };
    let (nodes, cores, memory, gpus) = match tres {
        Some(t) => {
            let a = parse_alloc_tres(t).map_err(|e| format!("tres_alloc: {e}"))?;
            // GPUs as sacct's reader takes them: allocated, else requested.
            let gpus = match a.gpus {
                Some(g) => Some(g),
                // A request that cannot be read adds nothing to an allocation.
                None => requested().ok().flatten().and_then(|r| r.gpus),
            };
            (a.nodes.or(total_nodes).unwrap_or(1), a.cores, a.memory, gpus)
        }
        // Without an allocation record, what was requested (as sacct's
        // reader falls back to ReqMem and ReqTRES).
        None => match cpus {
            Some(c) => {
                let requested = requested()?;
                (
                    total_nodes.unwrap_or(1),
                    c,
                    requested.and_then(|r| r.memory),
                    requested.and_then(|r| r.gpus),
                )
            }
            None => return Err("the document has neither `tres_alloc` nor `total_cpus`".into()),
        },
    };
    let owned = |key: &str| text(doc, key).map(str::to_owned);
    Ok(Item::Job(Box::new(JobInput {
        // Its `elapsed` counts the time suspended too (Slurm 22.05.8,
        // tests/fixtures/accounting/slurm_2205_suspend_jobcomp.jsonl): it says
        // nothing of suspension.
        suspension: crate::domain::posting::Suspension::Unsaid,
        cluster: owned("cluster").or_else(|| options.cluster.clone()),
        job_id,
        array_index,
        project: owned("account").or_else(|| options.default_project.clone()),
        user: owned("username").unwrap_or_default(),
        job_name: owned("job_name").unwrap_or_default(),
        queue: owned("partition"),
        node_type: None,
        nodes: Some(nodes),
        cores,
        memory,
        gpus,
        exclusive: false,
        submit,
        start,
        end,
        state,
        exit_code: owned("exit_code"),
    })))
}

/// Parse one document's text: the document itself, or Elasticsearch's hit
/// around it (`{"_index": …, "_id": …, "_source": {document}}`, as
/// `elasticdump` and the search API give each document of an export), read
/// through its `_source`. The same whoever reads it (`serve`, an import, a
/// retry, `audit --deep`); what is kept is the text as given, less the
/// [`DROPPED`] fields (`serve`).
pub fn parse_document(body: &str, options: &ReadOptions) -> Result<(Map<String, Value>, Item), String> {
    let doc = members(body)?;
    let item = match doc.get("_source") {
        Some(Value::Object(source)) if !doc.contains_key("jobid") => {
            read_document(source, options).map_err(|e| format!("_source: {e}"))?
        }
        _ => read_document(&doc, options)?,
    };
    Ok((doc, item))
}

/// One document per line.
pub struct JobcompParser {
    options: KeptOptions,
}

impl JobcompParser {
    pub fn new(options: &ReadOptions) -> JobcompParser {
        JobcompParser {
            options: KeptOptions::new(options.clone()),
        }
    }
}

impl Parser for JobcompParser {
    fn parse(&mut self, line: &str) -> Option<Item> {
        if line.trim().is_empty() {
            return None;
        }
        Some(parse_document(line, &self.options).map_or_else(Item::Bad, |(_, item)| item))
    }

    fn options(&self) -> KeptOptions {
        self.options.clone()
    }

    fn job_key(&self, line: &str) -> Option<String> {
        // Slurm's own job id (an array task's differs from the array's), in
        // the document or in Elasticsearch's hit around it.
        let cluster = self.options.cluster.as_deref();
        super::json_job_key(line, "jobid", None, cluster).or_else(|| {
            let hit: Value = serde_json::from_str(line).ok()?;
            super::json_job_key(&hit.get("_source")?.to_string(), "jobid", None, cluster)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::units::{Bytes, GIB, MIB};
    use chrono::NaiveDateTime;

    fn job(body: &str) -> JobInput {
        match parse_document(body, &ReadOptions::default()).unwrap().1 {
            Item::Job(j) => *j,
            other => panic!("not a job: {other:?}"),
        }
    }

    fn local(s: &str) -> Stamp {
        Stamp::Local(NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap())
    }

    #[test]
    fn a_gpu_job_as_slurm_sent_it() {
        let j = job(
            r##"{"jobid":5,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:48:13","@submit":"2026-11-30T08:48:00",
            "partition":"gpu","nodes":"c02","total_cpus":2,"total_nodes":1,"state":"COMPLETED","exit_code":"0:0",
            "cluster":"testclu","account":"pas1234","username":"bob","job_name":"gpu2",
            "tres_alloc":"cpu=2,mem=2G,node=1,billing=22,gres/gpu=2,gres/gpu:v100=2","script":"#!/bin/sh\nsleep 2\n"}"##,
        );
        assert_eq!(j.job_id, "5");
        assert_eq!(j.array_index, None);
        assert_eq!((j.nodes, j.cores, j.gpus), (Some(1), 2, Some(2)));
        assert_eq!(j.memory, Some(Bytes(2 * GIB)));
        assert_eq!(j.cluster.as_deref(), Some("testclu"));
        assert_eq!(j.project.as_deref(), Some("pas1234"));
        assert_eq!(j.queue.as_deref(), Some("gpu"));
        assert_eq!(j.start, local("2026-11-30T08:48:11"));
        assert_eq!(j.end, local("2026-11-30T08:48:13"));
        assert_eq!(j.submit, Some(local("2026-11-30T08:48:00")));
        assert_eq!((j.user.as_str(), j.state.as_str()), ("bob", "COMPLETED"));
    }

    #[test]
    fn a_large_member_the_job_is_not_read_from_is_not_kept() {
        let doc = |pad: &str| {
            format!(
                r#"{{"jobid":14,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:48:13","total_cpus":1,"total_nodes":1,
                "nodes":"c01","tres_alloc":"cpu=1,node=1","state":"COMPLETED","job_name":"{}","pad":[{pad}0],"comment":"kept"}}"#,
                "n".repeat(KEPT_MEMBER_MAX + 10)
            )
        };
        // A pad of 64 KiB and more: left out of what is kept, and not read.
        let big = doc(&"0,".repeat(KEPT_MEMBER_MAX / 2 + 1));
        let (kept, item) = parse_document(&big, &ReadOptions::default()).unwrap();
        assert!(!kept.contains_key("pad") && kept.contains_key("comment"));
        // A text the job is read from is kept whatever its size; not the
        // same member as anything else.
        assert_eq!(kept["job_name"].as_str().map(str::len), Some(KEPT_MEMBER_MAX + 10));
        let padded_name = big.replace(
            &format!("\"job_name\":\"{}\"", "n".repeat(KEPT_MEMBER_MAX + 10)),
            &format!("\"job_name\":[{}0]", "0,".repeat(KEPT_MEMBER_MAX / 2 + 1)),
        );
        let (kept_padded, padded) = parse_document(&padded_name, &ReadOptions::default()).unwrap();
        assert!(!kept_padded.contains_key("job_name"));
        assert!(matches!(padded, Item::Job(ref j) if j.job_name.is_empty()));
        assert_eq!(left_out_members(&padded_name), ["job_name", "pad"]);
        let stored = stored_document(kept);
        assert!(stored.len() < big.len() - KEPT_MEMBER_MAX && !stored.contains("\"pad\""));
        // Read again from what is kept: the same job.
        let (_, again) = parse_document(&stored, &ReadOptions::default()).unwrap();
        assert_eq!(again, item);
        // A small pad is kept, as everything Slurm sends is.
        let (kept, _) = parse_document(&doc("0,"), &ReadOptions::default()).unwrap();
        assert!(kept.contains_key("pad"));
        // Within an Elasticsearch hit's `_source` too.
        let hit = format!(r#"{{"_index":"slurm","_id":"14","_source":{big}}}"#);
        let (kept, hit_item) = parse_document(&hit, &ReadOptions::default()).unwrap();
        assert!(!kept["_source"].as_object().unwrap().contains_key("pad"));
        assert_eq!(hit_item, item);
    }

    #[test]
    fn an_array_task_is_named_as_sacct_names_it() {
        let j = job(
            r#"{"jobid":14,"array_job_id":6,"array_task_id":0,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:48:13",
            "total_cpus":1,"total_nodes":1,"nodes":"c01","tres_alloc":"cpu=1,mem=256M,node=1,billing=1","state":"COMPLETED"}"#,
        );
        assert_eq!((j.job_id.as_str(), j.array_index), ("6", Some(0)));
        assert_eq!(j.memory, Some(Bytes(256 * MIB)));
        // Not an array task: Slurm's NO_VAL in array_task_id.
        let j = job(
            r#"{"jobid":14,"array_job_id":0,"array_task_id":4294967294,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:48:13",
            "total_cpus":1,"total_nodes":1,"nodes":"c01","tres_alloc":"cpu=1,node=1","state":"COMPLETED"}"#,
        );
        assert_eq!((j.job_id.as_str(), j.array_index), ("14", None));
        let j = job(
            r#"{"jobid":31,"het_job_id":30,"het_job_offset":1,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:48:13",
            "total_cpus":1,"nodes":"c01","tres_alloc":"cpu=1,node=1","state":"COMPLETED"}"#,
        );
        assert_eq!(j.job_id, "30+1");
    }

    #[test]
    fn a_job_cancelled_while_pending_is_skipped() {
        let body = r#"{"jobid":9,"@start":"2026-11-30T08:48:00","@end":"2026-11-30T08:48:00","elapsed":0,
            "nodes":"","total_cpus":0,"total_nodes":0,"state":"CANCELLED","tres_req":"cpu=1,mem=100M,node=1,billing=1"}"#;
        let (_, item) = parse_document(body, &ReadOptions::default()).unwrap();
        assert_eq!(item, Item::Skip(Skip::NeverStarted));
    }

    #[test]
    fn times_with_an_offset_and_without_tres() {
        let j = job(
            r#"{"jobid":"77","@start":"2026-11-30T08:48:11-05:00","@end":"2026-11-30T10:48:11-05:00",
            "total_cpus":4,"total_nodes":2,"nodes":"c[01-02]","state":"COMPLETED"}"#,
        );
        assert_eq!(j.start, Stamp::At("2026-11-30T13:48:11Z".parse().unwrap()));
        assert_eq!((j.nodes, j.cores, j.memory), (Some(2), 4, None));
        // No allocation record: memory and GPUs as requested.
        let j = job(
            r#"{"jobid":"78","@start":"2026-11-30T08:48:11","@end":"2026-11-30T10:48:11","total_cpus":4,
            "total_nodes":1,"nodes":"c01","state":"COMPLETED","tres_req":"cpu=4,mem=10G,node=1,gres/gpu=2"}"#,
        );
        assert_eq!((j.cores, j.memory, j.gpus), (4, Some(Bytes(10 * GIB)), Some(2)));
    }

    #[test]
    fn zoneless_times_are_utc_as_slurm_writes_them_and_old_records_read_as_they_were() {
        // jobcomp/elasticsearch formats @start/@end/@submit with gmtime:
        // without a zone they are UTC, whatever the cluster's zone.
        let body = r#"{"jobid":79,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T10:48:13","@submit":"2026-11-30T08:40:00",
            "total_cpus":1,"total_nodes":1,"nodes":"c01","state":"COMPLETED"}"#;
        let Item::Job(now) = parse_document(body, &ReadOptions::jobcomp()).unwrap().1 else {
            panic!("not a job")
        };
        assert_eq!(now.start, Stamp::At("2026-11-30T08:48:11Z".parse().unwrap()));
        assert_eq!(now.end, Stamp::At("2026-11-30T10:48:13Z".parse().unwrap()));
        assert_eq!(now.submit, Some(Stamp::At("2026-11-30T08:40:00Z".parse().unwrap())));
        // A record kept with options of before (no `jobcomp_utc`) is read
        // again as it was then: in its cluster's zone.
        let then = job(body);
        assert_eq!(then.start, local("2026-11-30T08:48:11"));
        // The flag is in the kept options' JSON only when set, so the
        // options of every other format keep their text.
        assert_eq!(KeptOptions::jobcomp().text(), r#"{"jobcomp_utc":true}"#);
        assert_eq!(KeptOptions::default().text(), "{}");
        let old: ReadOptions = serde_json::from_str("{}").unwrap();
        assert!(!old.jobcomp_utc);
    }

    #[test]
    fn a_requeued_run_posted_as_pending_is_a_run_that_ended() {
        // Slurm 22.05's real bodies for a requeue test (tests/fixtures):
        // each requeued run arrives with "state":"PENDING" and its own start,
        // end and allocation; the job's next document is its next run.
        let bodies: Vec<&str> = include_str!("../../tests/fixtures/accounting/slurm_2205_requeue_jobcomp.jsonl")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
        assert_eq!(bodies.len(), 13);
        let jobs: Vec<JobInput> = bodies.iter().map(|b| job(b)).collect();
        let requeued: Vec<(String, Option<u32>, String)> = jobs
            .iter()
            .filter(|j| j.state == "REQUEUED")
            .map(|j| (j.job_id.clone(), j.array_index, j.start.to_string()))
            .collect();
        assert_eq!(
            requeued,
            [
                ("4", None, "2026-11-30T19:07:57"),
                ("3", None, "2026-11-30T19:07:57"),
                ("2", None, "2026-11-30T19:07:57"),
                ("6", Some(0), "2026-11-30T19:08:05"),
                ("5", None, "2026-11-30T19:08:05"),
                ("3", None, "2026-11-30T19:10:20"),
            ]
            .map(|(j, i, s)| (j.to_owned(), i, s.to_owned()))
        );
        // The GPU job's requeued run held its GPU.
        assert_eq!((jobs[0].cores, jobs[0].gpus), (1, Some(1)));
        // Every run of job 3 is a run of its own (told apart by its start).
        let starts: Vec<String> = jobs
            .iter()
            .filter(|j| j.job_id == "3")
            .map(|j| j.start.to_string())
            .collect();
        assert_eq!(
            starts,
            ["2026-11-30T19:07:57", "2026-11-30T19:10:20", "2026-11-30T19:13:20"]
        );
        // PENDING without a run (no start) is still a job that has not ended.
        let (_, item) = parse_document(
            r#"{"jobid":5,"total_cpus":1,"nodes":"c01","tres_alloc":"cpu=1,node=1","state":"PENDING"}"#,
            &ReadOptions::default(),
        )
        .unwrap();
        assert_eq!(item, Item::Skip(Skip::NotEnded));
    }

    #[test]
    fn states_are_read_as_sacct_reads_them() {
        let with_state = |state: &str| {
            parse_document(
                &format!(
                    r#"{{"jobid":5,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:49:11","total_cpus":1,
                    "nodes":"c01","tres_alloc":"cpu=1,node=1","state":"{state}"}}"#
                ),
                &ReadOptions::default(),
            )
            .map(|(_, item)| item)
        };
        assert_eq!(with_state("RESIZING"), Ok(Item::Skip(Skip::NotEnded)));
        assert!(matches!(with_state("NODE_FAIL"), Ok(Item::Job(_))));
        assert_eq!(with_state("EXPLODED"), Err("unknown job state \"EXPLODED\"".into()));
        // A job that ran but has no end is damaged, not skipped.
        let e = parse_document(
            r#"{"jobid":5,"@start":"2026-11-30T08:48:11","total_cpus":1,"nodes":"c01","tres_alloc":"cpu=1,node=1"}"#,
            &ReadOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e, "a job that ran, without `@start` or `@end`");
        // What is kept of a malformed body has no script either.
        let kept = stored_body(r##"{"jobid":"x","script":"#!/bin/sh\nsecret\n"}"##);
        assert!(!kept.contains("secret"), "{kept}");
        assert_eq!(stored_body("not json"), "not json");
    }

    #[test]
    fn malformed_documents_say_what_is_wrong() {
        let bad = |body: &str| parse_document(body, &ReadOptions::default()).unwrap_err();
        assert!(bad("{").starts_with("not JSON"), "{}", bad("{"));
        assert_eq!(bad("[1]"), "not a JSON object");
        assert_eq!(bad(r#"{"state":"COMPLETED"}"#), "missing `jobid`");
        // An export's line as Elasticsearch gives it (elasticdump, the
        // search API): the lab's real documents inside their hits read as
        // the documents do.
        let lab = include_str!("../../tests/fixtures/accounting/slurm_2205_lab_jobcomp.jsonl");
        let mut p = JobcompParser::new(&ReadOptions::jobcomp());
        let mut read = 0;
        for (n, doc) in lab.lines().filter(|l| !l.starts_with('#')).enumerate() {
            let hit = format!(r#"{{"_index":"slurm","_type":"jobcomp","_id":"id{n}","_score":1.0,"_source":{doc}}}"#);
            assert_eq!(p.parse(&hit), p.parse(doc), "{hit}");
            assert_eq!(p.job_key(&hit), p.job_key(doc));
            assert!(p.job_key(&hit).is_some());
            read += 1;
        }
        assert!(read >= 10, "{read}");
        assert_eq!(
            p.parse(r#"{"_index":"slurm","_source":{"state":"COMPLETED"}}"#),
            Some(Item::Bad("_source: missing `jobid`".into()))
        );
        // `serve` reads a hit alike, and keeps it without its script.
        let doc = lab.lines().find(|l| !l.starts_with('#')).unwrap();
        let mut with_script: Map<String, Value> = serde_json::from_str(doc).unwrap();
        with_script.insert("script".into(), Value::String("#!/bin/sh\nsecret\n".into()));
        let hit = format!(r#"{{"_id":"x","_source":{}}}"#, Value::Object(with_script));
        let (kept, item) = parse_document(&hit, &ReadOptions::jobcomp()).unwrap();
        assert_eq!(Some(item), p.parse(doc));
        let kept = stored_document(kept);
        assert!(!kept.contains("secret") && kept.contains("\"_source\""), "{kept}");
        assert_eq!(bad(r#"{"jobid":-3}"#), "`jobid` -3 is not a whole number ≥ 0");
        let e = bad(r#"{"jobid":1,"@start":"yesterday","@end":"2026-11-30T08:48:13","total_cpus":1,"nodes":"c01"}"#);
        assert_eq!(
            e,
            r#"`@start` "yesterday" is not a time (expected YYYY-MM-DDTHH:MM:SS)"#
        );
        let e = bad(
            r#"{"jobid":1,"@start":"2026-11-30T08:48:11","@end":"2026-11-30T08:48:13","nodes":"c01","tres_alloc":"mem=1G"}"#,
        );
        assert!(e.starts_with("tres_alloc: "), "{e}");
        let e = bad(r#"{"jobid":1,"array_job_id":1,"array_task_id":-1,"@start":"2026-11-30T08:48:11"}"#);
        assert_eq!(e, "`array_task_id` -1 is not a whole number ≥ 0");
    }

    #[test]
    fn the_stored_document_drops_the_script_and_reads_back_the_same() {
        let body = r##"{"jobid":2,"@start":"2026-11-30T08:48:00","@end":"2026-11-30T08:48:03","total_cpus":2,"total_nodes":1,
            "nodes":"c02","tres_alloc":"cpu=2,mem=500M,node=1","state":"COMPLETED","script":"#!/bin/sh\nsecret-code\n"}"##;
        let (doc, item) = parse_document(body, &ReadOptions::default()).unwrap();
        let stored = stored_document(doc);
        assert!(!stored.contains("secret-code"), "{stored}");
        assert!(!stored.contains('\n'));
        assert_eq!(parse_document(&stored, &ReadOptions::default()).unwrap().1, item);
        let Item::Job(j) = item else { panic!() };
        assert_eq!((j.cores, j.memory), (2, Some(Bytes(500 * MIB))));
    }
}
