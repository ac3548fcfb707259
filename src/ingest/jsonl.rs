//! The project's own job format: one JSON object per job (one per line in
//! JSON lines input; one on stdin for `job record --json`). Documented in
//! docs/recording.md.
//!
//! ```json
//! {"cluster": "owens", "job_id": "1234", "array_index": 7, "project": "PAS1234",
//!  "user": "alice", "job_name": "md", "queue": "batch", "nodes": 1, "cores": 4,
//!  "memory": "16GB", "gpus": 0, "submit": "2026-10-05T09:00:00-04:00",
//!  "start": "2026-10-05T09:10:00-04:00", "end": "2026-10-05T11:10:00-04:00",
//!  "state": "COMPLETED", "exit_code": "0"}
//! ```
//!
//! Times are RFC 3339 (with an offset), a local time of the cluster
//! (`2026-10-05T09:10:00`), or epoch seconds. Memory is a size with a unit
//! (`16GB`, powers of 1024) or a number of bytes. A job without `start` never
//! started; one without `end` has not ended.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Item, KeptOptions, Parser, ReadOptions, Skip};
use crate::domain::posting::{JobInput, Stamp, Suspension};
use crate::domain::units::Bytes;

/// A text or a number (job ids, exit codes, times, sizes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Scalar {
    Text(String),
    Int(i64),
}

/// By hand rather than `untagged`, whose error for anything else is "data
/// did not match any variant of untagged enum Scalar".
impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v)
                    .map(Scalar::Int)
                    .map_err(|_| E::custom(format!("{v} is too large a number")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Err(E::custom(format!(
                    "{v} is not a whole number (a fraction or exponent notation): give a whole number or a string such as \"64GB\""
                )))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Text(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Text(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
        }
    }
}

/// One job as JSON.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonJob {
    #[serde(default)]
    pub cluster: Option<String>,
    pub job_id: Option<Scalar>,
    #[serde(default)]
    pub array_index: Option<u32>,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub job_name: Option<String>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub node_type: Option<String>,
    #[serde(default)]
    pub nodes: Option<u32>,
    #[serde(default)]
    pub cores: Option<u32>,
    #[serde(default)]
    pub memory: Option<Scalar>,
    #[serde(default)]
    pub gpus: Option<u32>,
    #[serde(default)]
    pub exclusive: Option<bool>,
    #[serde(default)]
    pub submit: Option<Scalar>,
    #[serde(default)]
    pub start: Option<Scalar>,
    #[serde(default)]
    pub end: Option<Scalar>,
    /// Seconds it was suspended between its start and its end: not charged
    /// (docs/rules.md R1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_seconds: Option<u32>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub exit_code: Option<Scalar>,
}

fn stamp(name: &str, v: &Scalar) -> Result<Stamp, String> {
    match v {
        Scalar::Int(secs) => DateTime::from_timestamp(*secs, 0)
            .map(Stamp::At)
            .ok_or_else(|| format!("{name}: {secs} is out of range")),
        Scalar::Text(s) => {
            let s = s.trim();
            if let Ok(t) = DateTime::parse_from_rfc3339(s) {
                return Ok(Stamp::At(t.with_timezone(&Utc)));
            }
            ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
                .map(Stamp::Local)
                .ok_or_else(|| {
                    format!(
                        "{name}: {s:?} is not a time (RFC 3339 such as 2026-10-05T09:10:00-04:00, a local time, or epoch seconds)"
                    )
                })
        }
    }
}

impl JsonJob {
    /// What this job is as a line of input.
    pub fn into_item(self) -> Result<Item, String> {
        let Some(job_id) = self.job_id.as_ref().map(Scalar::text) else {
            return Err("missing field `job_id`".into());
        };
        let Some(start) = &self.start else {
            return Ok(Item::Skip(Skip::NeverStarted));
        };
        let Some(end) = &self.end else {
            return Ok(Item::Skip(Skip::NotEnded));
        };
        let Some(cores) = self.cores else {
            return Err("missing field `cores`".into());
        };
        let memory = match &self.memory {
            None => None,
            Some(Scalar::Int(b)) => Some(Bytes(
                u64::try_from(*b).map_err(|_| format!("memory: {b} is negative"))?,
            )),
            Some(Scalar::Text(s)) => Some(Bytes::parse(s, 1).map_err(|e| format!("memory: {e}"))?),
        };
        Ok(Item::Job(Box::new(JobInput {
            suspension: self.suspended_seconds.map_or(Suspension::Unsaid, Suspension::Seconds),
            cluster: self.cluster,
            job_id,
            array_index: self.array_index,
            project: self.project,
            user: self.user.unwrap_or_default(),
            job_name: self.job_name.unwrap_or_default(),
            queue: self.queue,
            node_type: self.node_type,
            nodes: Some(self.nodes.unwrap_or(1)),
            cores,
            memory,
            gpus: self.gpus,
            exclusive: self.exclusive.unwrap_or(false),
            submit: self.submit.as_ref().map(|s| stamp("submit", s)).transpose()?,
            start: stamp("start", start)?,
            end: stamp("end", end)?,
            state: self.state.unwrap_or_default(),
            exit_code: self.exit_code.as_ref().map(Scalar::text),
        })))
    }
}

/// Read one JSON job.
pub fn parse_job(text: &str) -> Result<Item, String> {
    let job: JsonJob = serde_json::from_str(text).map_err(|e| e.to_string())?;
    job.into_item()
}

pub struct JsonlParser {
    options: KeptOptions,
}

/// Fill what a JSON job does not say from the import's defaults.
fn with_defaults(item: Item, options: &ReadOptions) -> Item {
    match item {
        Item::Job(mut j) => {
            if j.cluster.is_none() {
                j.cluster = options.cluster.clone();
            }
            if j.project.is_none() {
                j.project = options.default_project.clone();
            }
            Item::Job(j)
        }
        other => other,
    }
}

impl JsonlParser {
    pub fn new(options: &ReadOptions) -> JsonlParser {
        JsonlParser {
            options: KeptOptions::new(options.clone()),
        }
    }
}

impl Parser for JsonlParser {
    fn parse(&mut self, line: &str) -> Option<Item> {
        if line.trim().is_empty() {
            return None;
        }
        Some(parse_job(line).map_or_else(Item::Bad, |i| with_defaults(i, &self.options)))
    }

    fn options(&self) -> KeptOptions {
        self.options.clone()
    }

    fn job_key(&self, line: &str) -> Option<String> {
        super::json_job_key(line, "job_id", Some("array_index"), self.options.cluster.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::units::GIB;

    #[test]
    fn a_value_that_is_neither_a_whole_number_nor_a_string_says_so() {
        let with = |memory: &str| {
            let line = format!(r#"{{"cluster":"owens","job_id":1,"cores":1,"memory":{memory},"start":1,"end":2}}"#);
            match parse_job(&line) {
                Err(e) => e,
                Ok(other) => panic!("{memory}: {other:?}"),
            }
        };
        let e = with("1e30");
        assert!(
            e.starts_with("1000000000000000000000000000000 is not a whole number"),
            "{e}"
        );
        assert!(with("1.5").contains("1.5 is not a whole number (a fraction or exponent notation)"));
        assert!(
            with("[1]").contains("expected a whole number or a string"),
            "{}",
            with("[1]")
        );
        assert!(with("18446744073709551615").contains("is too large a number"));
        for e in [with("1e30"), with("[1]"), with("{}")] {
            assert!(!e.contains("untagged enum"), "{e}");
        }
    }

    #[test]
    fn a_json_job() {
        let item = parse_job(
            r#"{"cluster":"owens","job_id":1234,"array_index":7,"project":"PAS1234","queue":"batch","cores":4,"memory":"16GB","submit":"2026-10-05T09:00:00-04:00","start":"2026-10-05T09:10:00","end":1791213000,"exit_code":0}"#,
        )
        .unwrap();
        let Item::Job(j) = item else { panic!("{item:?}") };
        assert_eq!(
            (j.job_id.as_str(), j.array_index, j.nodes, j.cores),
            ("1234", Some(7), Some(1), 4)
        );
        assert_eq!(j.memory, Some(Bytes(16 * GIB)));
        assert_eq!(j.submit.unwrap().to_string(), "2026-10-05T13:00:00Z");
        assert_eq!(j.start.to_string(), "2026-10-05T09:10:00");
        assert_eq!(j.end.to_string(), "2026-10-05T15:10:00Z");
        assert_eq!(j.exit_code.as_deref(), Some("0"));
    }

    #[test]
    fn bad_json_jobs_say_why() {
        let e = |s: &str| match parse_job(s) {
            Err(e) => e,
            Ok(i) => panic!("{i:?}"),
        };
        assert!(e(r#"{"job_id":"1","cores":1,"start":"x","end":"y","mem":"1G"}"#).starts_with("unknown field `mem`"));
        assert_eq!(e(r#"{"job_id":"1","start":1,"end":2}"#), "missing field `cores`");
        assert!(e(r#"{"job_id":"1","cores":1,"start":"soon","end":2}"#).starts_with("start: \"soon\" is not a time"));
        assert!(e(r#"{"job_id":"1","cores":1,"start":1,"end":2,"memory":"lots"}"#).starts_with("memory:"));
        assert!(e("not json").starts_with("expected ident"));
        assert_eq!(
            parse_job(r#"{"job_id":"1","cores":1}"#),
            Ok(Item::Skip(Skip::NeverStarted))
        );
        assert_eq!(
            parse_job(r#"{"job_id":"1","cores":1,"start":5}"#),
            Ok(Item::Skip(Skip::NotEnded))
        );
    }
}
