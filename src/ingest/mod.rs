//! Parsers: scheduler accounting records -> [`JobInput`]s. Slurm `sacct
//! --parsable2`, Slurm's job-completion documents (jobcomp), PBS/TORQUE/PBS
//! Pro accounting logs, and JSON lines.
//!
//! A parser sees one line at a time and says what it is: a finished job, a
//! line to skip (a job step, a job not ended, a record type that carries no
//! charge), or a malformed line with the reason. [`LineReader`] feeds it
//! bounded, numbered lines from any reader, so memory stays flat however
//! large the input.

pub mod jobcomp;
pub mod jsonl;
pub mod pbs;
pub mod slurm;

use std::fmt;
use std::io::{self, BufRead};

use serde::{Deserialize, Serialize};

use crate::domain::posting::JobInput;

/// The formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Slurm,
    Pbs,
    Jsonl,
    /// Slurm jobcomp/elasticsearch documents, one per line.
    Jobcomp,
}

impl Format {
    /// The name stored in `job_record.source_format`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Slurm => "slurm",
            Format::Pbs => "pbs",
            Format::Jsonl => "jsonl",
            Format::Jobcomp => "jobcomp",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "slurm" => Some(Format::Slurm),
            "pbs" => Some(Format::Pbs),
            "jsonl" => Some(Format::Jsonl),
            "jobcomp" => Some(Format::Jobcomp),
            _ => None,
        }
    }
}

/// How to read an input: what its lines do not say themselves. Stored with
/// every rejected line so it can be read again on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOptions {
    /// Cluster of records that name none (PBS logs; sacct without `Cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Project of records that name no account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_project: Option<String>,
    /// Slurm: the field names of headerless input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    /// Slurm: the field delimiter (default `|`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<String>,
    /// PBS: the attributes that name the project, first present wins
    /// (default `account`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_from: Option<Vec<String>>,
}

/// Why a line is skipped (not charged, not an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Skip {
    /// Slurm job steps (`.batch`, `.extern`, `.0`): charged with their job.
    Step,
    /// Still pending or running: charged once it ends.
    NotEnded,
    /// Never started: charges nothing.
    NeverStarted,
    /// PBS records other than E (job end).
    OtherRecord,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Skip::Step => "job steps (charged with their job)",
            Skip::NotEnded => "jobs not ended yet (charged once they end)",
            Skip::NeverStarted => "jobs that never started (nothing to charge)",
            Skip::OtherRecord => "records other than job ends",
        })
    }
}

/// What one line holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Job(Box<JobInput>),
    Skip(Skip),
    /// Malformed: the reason.
    Bad(String),
}

/// A parser of one input format.
pub trait Parser {
    /// What a line holds; `None` for lines that hold nothing (blank, header).
    fn parse(&mut self, line: &str) -> Option<Item>;
    /// Options that read a line of this input again on its own.
    fn options(&self) -> ReadOptions;
    /// The job a line names (`cluster/job[_index]`, as [`JobInput::key`]
    /// gives it), read as far as the line allows: so a malformed record's
    /// rejection still says which job it is.
    fn job_key(&self, _line: &str) -> Option<String> {
        None
    }
}

/// The job a JSON line names (`cluster/job[_index]`), for a rejection of a
/// line that is JSON but not a job that can be read.
fn json_job_key(line: &str, id: &str, index: Option<&str>, default_cluster: Option<&str>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |key: &str| match v.get(key)? {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let job = text(id)?;
    let cluster = text("cluster").or(default_cluster.map(str::to_owned));
    let cluster = cluster.as_deref().unwrap_or("?");
    Some(match index.and_then(text) {
        Some(i) => format!("{cluster}/{job}_{i}"),
        None => format!("{cluster}/{job}"),
    })
}

/// A parser for `format` with `options`.
pub fn parser(format: Format, options: &ReadOptions) -> Result<Box<dyn Parser + Send>, String> {
    Ok(match format {
        Format::Slurm => Box::new(slurm::SlurmParser::new(options)?),
        Format::Pbs => Box::new(pbs::PbsParser::new(options)),
        Format::Jsonl => Box::new(jsonl::JsonlParser::new(options)),
        Format::Jobcomp => Box::new(jobcomp::JobcompParser::new(options)),
    })
}

/// The longest line read; longer lines are reported, not read into memory.
pub const MAX_LINE: usize = 1 << 20;

/// One line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawLine {
    Text(String),
    /// Not UTF-8, or longer than [`MAX_LINE`]: the reason, and the start of
    /// the line as far as it could be kept.
    Unreadable {
        reason: String,
        prefix: String,
    },
}

/// Numbered, bounded lines from a reader.
pub struct LineReader<R> {
    inner: R,
    number: u64,
    bytes: u64,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            number: 0,
            bytes: 0,
        }
    }

    /// Bytes consumed so far (for progress).
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The next line and its number (from 1); `None` at the end.
    pub fn next_line(&mut self) -> io::Result<Option<(u64, RawLine)>> {
        let mut buf: Vec<u8> = Vec::new();
        let mut too_long = false;
        let mut any = false;
        loop {
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (take, done) = match memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            let keep = MAX_LINE.saturating_sub(buf.len()).min(take);
            buf.extend_from_slice(&chunk[..keep]);
            too_long |= keep < take;
            self.inner.consume(take);
            self.bytes += take as u64;
            if done {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.number += 1;
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        let line = if buf.contains(&0) {
            let at = buf.iter().position(|b| *b == 0).unwrap_or(0);
            RawLine::Unreadable {
                reason: format!("the line holds a NUL byte (byte {}): a damaged record", at + 1),
                prefix: String::from_utf8_lossy(&buf[..buf.len().min(200)]).replace('\0', "\\0"),
            }
        } else if too_long {
            RawLine::Unreadable {
                reason: format!("the line is longer than {MAX_LINE} bytes"),
                prefix: String::from_utf8_lossy(&buf[..buf.len().min(200)]).into_owned(),
            }
        } else {
            match String::from_utf8(buf) {
                Ok(s) => RawLine::Text(s),
                Err(e) => {
                    let at = e.utf8_error().valid_up_to();
                    RawLine::Unreadable {
                        reason: format!("the line is not valid UTF-8 (byte {})", at + 1),
                        prefix: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                    }
                }
            }
        };
        Ok(Some((self.number, line)))
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_bounded_and_checked() {
        let mut input = b"first\r\nsecond\n".to_vec();
        input.extend(vec![b'x'; MAX_LINE + 10]);
        input.extend(b"\n\xff\xfe bad\nnul\0line\nlast");
        let mut r = LineReader::new(std::io::Cursor::new(input));
        assert_eq!(r.next_line().unwrap(), Some((1, RawLine::Text("first".into()))));
        assert_eq!(r.next_line().unwrap(), Some((2, RawLine::Text("second".into()))));
        match r.next_line().unwrap() {
            Some((3, RawLine::Unreadable { reason, prefix })) => {
                assert_eq!(reason, format!("the line is longer than {MAX_LINE} bytes"));
                assert_eq!(prefix.len(), 200);
            }
            other => panic!("{other:?}"),
        }
        match r.next_line().unwrap() {
            Some((4, RawLine::Unreadable { reason, .. })) => assert_eq!(reason, "the line is not valid UTF-8 (byte 1)"),
            other => panic!("{other:?}"),
        }
        match r.next_line().unwrap() {
            Some((5, RawLine::Unreadable { reason, prefix })) => {
                assert_eq!(reason, "the line holds a NUL byte (byte 4): a damaged record");
                assert_eq!(prefix, "nul\\0line");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.next_line().unwrap(), Some((6, RawLine::Text("last".into()))));
        assert_eq!(r.next_line().unwrap(), None);
    }
}
