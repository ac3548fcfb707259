//! Parsers: scheduler accounting records -> [`JobInput`]s. Slurm `sacct
//! --parsable2`, Slurm's job-completion documents (jobcomp), PBS/TORQUE/PBS
//! Pro accounting logs, and JSON lines.
//!
//! A parser sees one line at a time and says what it is: a finished job, a
//! line to skip (a job step, a job not ended, a record type that carries no
//! charge), or a malformed line with the reason. [`LineReader`] feeds it
//! bounded, numbered lines from any reader, so memory stays flat however
//! large the input.

pub mod filetxt;
pub mod jobcomp;
pub mod json_bytes;
pub mod jsonl;
pub mod pbs;
pub mod sacct_json;
pub mod slurm;

use std::fmt;
use std::io::{self, BufRead};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::domain::kinds::SourceFormat;
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
    /// `sacct --json` (Slurm 22.05 to 25.05): one document, read as a stream of jobs.
    #[serde(rename = "sacct-json")]
    SacctJson,
    /// Slurm's jobcomp/filetxt log: one `JobId=… JobState=…` line per job.
    #[serde(rename = "jobcomp-filetxt")]
    JobcompFiletxt,
}

impl Format {
    /// The source format its records are kept as.
    pub fn source(self) -> SourceFormat {
        match self {
            Format::Slurm => SourceFormat::Slurm,
            Format::Pbs => SourceFormat::Pbs,
            Format::Jsonl => SourceFormat::Jsonl,
            Format::Jobcomp => SourceFormat::Jobcomp,
            Format::SacctJson => SourceFormat::SacctJson,
            Format::JobcompFiletxt => SourceFormat::JobcompFiletxt,
        }
    }

    /// The import format records of `source` are read with; `None` for the
    /// one-object forms (`json`, `cli`), read as one JSON job.
    pub fn of(source: SourceFormat) -> Option<Format> {
        match source {
            SourceFormat::Slurm => Some(Format::Slurm),
            SourceFormat::Pbs => Some(Format::Pbs),
            SourceFormat::Jsonl => Some(Format::Jsonl),
            SourceFormat::Jobcomp => Some(Format::Jobcomp),
            SourceFormat::SacctJson => Some(Format::SacctJson),
            SourceFormat::JobcompFiletxt => Some(Format::JobcompFiletxt),
            SourceFormat::Json | SourceFormat::Cli => None,
        }
    }

    /// The name of `--format` and of the kept records.
    pub fn as_str(self) -> &'static str {
        self.source().as_str()
    }

    pub fn parse(s: &str) -> Option<Format> {
        SourceFormat::parse(s).and_then(Format::of)
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
    /// jobcomp: `@submit`/`@start`/`@end` without a zone are UTC, as every
    /// version of Slurm's jobcomp/elasticsearch writes them (`gmtime`).
    /// Set for every document read since 2026-12-06; a record read before
    /// keeps its options without it and is read again as it was then, in
    /// its cluster's zone (docs/slurm.md, "Time zone").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jobcomp_utc: bool,
    /// PBS: a job sized by its PBS Pro `select` is on the distinct hosts it
    /// ran on (`exec_vnode`, `exec_host`), not on `Resource_List.nodect`,
    /// which counts its chunks (several can share a host). Set for every
    /// record read since 2026-12-06; one read before keeps `nodect`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pbs_hosts: bool,
    /// PBS: the end record of a job array itself (`123[].server`, PBS Pro
    /// writes one when the whole array is done, beside each subjob's
    /// `123[4].server`) is skipped: its subjobs are the runs, it held
    /// nothing of its own. Set for every record read since 2026-12-06 (the
    /// afternoon); one read before was a job and is read so again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pbs_array_parents: bool,
    /// TORQUE 6: the memory of a `-L` request (`Resource_Request_2.0=-L
    /// tasks=N:…:memory=M [-L …]`, `memory` per task) is the job's memory
    /// when it has no `Resource_List.mem`. Set for every record read since
    /// 2026-12-06 (evening); one read before was charged by its cores alone
    /// and is read so again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub torque_requests: bool,
    /// Slurm: `AllocNodes` is a record's node count when neither AllocTRES
    /// `node=` nor `NNodes` gives it (it was taken as 1 node), and a `ReqMem`
    /// (read without AllocTRES)
    /// without an `n` or `c` suffix (Slurm 21.08 and later print the job's
    /// requested TRES memory so) is the job's total (it was taken as per
    /// node). Set for every record read since 2026-12-06 (night); one read
    /// before is read so again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slurm_totals: bool,
    /// PBS Pro: a job sized by its `select` holds at least
    /// `Resource_List.ncpus` cores, `Resource_List.mem` memory and
    /// `Resource_List.ngpus` GPUs. The server fills a chunk's missing
    /// resources from `default_chunk` and sums every chunk's into those
    /// totals, while `select` keeps what the user wrote: NCAR's
    /// `select=240:mpiprocs=36` with `Resource_List.ncpus=8640` was read as
    /// 240 cores (one a chunk). Set for every record read since 2026-12-07;
    /// one read before is read so again (migration 0056).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pbs_totals: bool,
    /// TORQUE: a job sized by `nodes=` is on the distinct hosts of its
    /// `exec_host` when they are fewer than `nodect` and hold every slot
    /// the spec asks for: with Maui's or Moab's node matching `N:ppn=P`
    /// asks for N × P slots, at least P a host, so `nodes=14:ppn=8+16:ppn=1`
    /// (`nodect` 30) ran on 17 hosts and was charged 30 nodes. Set for every
    /// record read since 2026-12-07; one read before keeps `nodect`
    /// (migration 0056).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub torque_hosts: bool,
    /// Slurm: the seconds a job was suspended are read (sacct's `Suspended`,
    /// or its `Elapsed` short of `End` − `Start`; `sacct --json`'s
    /// `time.suspended`) and not charged. Set for every record read since
    /// 2026-12-07 (migration 0060); one read before was charged from its
    /// start to its end and is read so again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slurm_suspended: bool,
    /// Set only in a rejection's options: the record is the last line of a
    /// `sacct` or PBS input that ended in the middle of it (no newline: a
    /// file cut short while it was written or copied). Read again it is
    /// still malformed ([`CUT_SHORT`]): its end is not known, and a value cut
    /// there (`walltime=01:0`) would be charged as if whole. The complete
    /// line, imported, records the job and resolves the rejection.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
    /// Set only in a rejection's options: a jobcomp/filetxt record that
    /// Slurm before 24.05.2 cut at 1,023 bytes, the next job's line after
    /// it. Read again it is still malformed
    /// ([`filetxt::CUT_BY_SLURM`]): what followed the cut is nowhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slurm_cut: bool,
    /// Set only in a rejection's options: a jobcomp/filetxt record that
    /// follows such a cut on the same line. Read again it is still
    /// malformed ([`filetxt::AFTER_A_CUT`]): it may be the next job's, or
    /// text the user put in the cut job's name or directory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_slurm_cut: bool,
}

/// Why the last line of a `sacct` or PBS input without a newline after it
/// is not charged.
pub const CUT_SHORT: &str = "the input ends in the middle of this line (no newline after it): it was cut short while \
     being written or copied, and a value cut there would be charged as if whole; kept, not charged: import the \
     complete file again under the same name (the job is then recorded and this rejection resolved); if the record \
     is whole and only the file's last newline is missing (a script that wrote it so), add it (`echo >> FILE`) \
     and import the file again";

/// The last line of a [`Format::whole_lines`] input without a newline after
/// it, read: `None` when it holds nothing; a skip when it is a record never
/// charged whatever its end, known from its start alone
/// ([`Parser::cut_skip`]: a PBS record whose type is neither E nor R, a
/// Slurm step); otherwise malformed, [`CUT_SHORT`]. What the parser makes
/// of the rest is not asked: a PBS R record cut before its `start=` reads
/// as a bare R (skipped), though whole it is a run to charge.
pub fn read_cut_short(p: &mut dyn Parser, text: &str, exact: Option<&[u8]>) -> Option<Item> {
    if let Some(s) = p.cut_skip(text) {
        return Some(Item::Skip(s));
    }
    read_record(p, text, exact)?;
    Some(Item::Bad(CUT_SHORT.into()))
}

/// A reading added on 2026-12-06 (migration 0049) or 2026-12-07 (migrations
/// 0056 and 0060), by the read option that marks the records read with it: a
/// record kept without it was read the earlier way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    JobcompUtc,
    PbsHosts,
    TorqueRequests,
    SlurmTotals,
    PbsTotals,
    TorqueHosts,
    SlurmSuspended,
}

/// The migration that brought a set of readings: each reached a ledger at
/// its own instant (its cut-off table), and a record kept without one of a
/// later set was read with every one of the sets before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReadingsOf {
    /// 2026-12-06: `reading_change`.
    M0049,
    /// 2026-12-07, PBS: `pbs_reading_change`.
    M0056,
    /// 2026-12-07, Slurm suspended time: `suspension_reading_change`.
    M0060,
}

impl Reading {
    /// The option's name in a record's kept read options (its JSON key).
    pub fn option(self) -> &'static str {
        match self {
            Reading::JobcompUtc => "jobcomp_utc",
            Reading::PbsHosts => "pbs_hosts",
            Reading::TorqueRequests => "torque_requests",
            Reading::SlurmTotals => "slurm_totals",
            Reading::PbsTotals => "pbs_totals",
            Reading::TorqueHosts => "torque_hosts",
            Reading::SlurmSuspended => "slurm_suspended",
        }
    }

    /// The migration that brought it: its records are looked for up to
    /// that migration's instant.
    pub fn of(self) -> ReadingsOf {
        match self {
            Reading::PbsTotals | Reading::TorqueHosts => ReadingsOf::M0056,
            Reading::SlurmSuspended => ReadingsOf::M0060,
            _ => ReadingsOf::M0049,
        }
    }

    /// The migration that brought it, as messages name it.
    pub fn since(self) -> &'static str {
        match self.of() {
            ReadingsOf::M0049 => "migration 0049 (2026-12-06)",
            ReadingsOf::M0056 => "migration 0056 (2026-12-07)",
            ReadingsOf::M0060 => "migration 0060 (2026-12-07)",
        }
    }

    /// `options` as a record kept without this reading was read: every
    /// reading of its set and of the later sets off, those of the sets
    /// before it kept.
    pub fn options_before(self, options: &ReadOptions) -> ReadOptions {
        match self.of() {
            ReadingsOf::M0049 => options.before(),
            ReadingsOf::M0056 => options.before_0056(),
            ReadingsOf::M0060 => options.before_0060(),
        }
    }
}

impl ReadOptions {
    /// How a jobcomp document is read now: its zone-less times are UTC.
    pub fn jobcomp() -> ReadOptions {
        ReadOptions {
            jobcomp_utc: true,
            ..ReadOptions::default()
        }
    }

    /// These options as records of `format` are read now (a rejection
    /// retried, an input given): the readings added since they were kept
    /// switched on for that format.
    pub fn now(mut self, format: SourceFormat) -> ReadOptions {
        match format {
            SourceFormat::Jobcomp => self.jobcomp_utc = true,
            SourceFormat::Pbs => {
                self.pbs_hosts = true;
                self.pbs_array_parents = true;
                self.torque_requests = true;
                self.pbs_totals = true;
                self.torque_hosts = true;
            }
            SourceFormat::Slurm => {
                self.slurm_totals = true;
                self.slurm_suspended = true;
            }
            SourceFormat::SacctJson => self.slurm_suspended = true,
            _ => {}
        }
        self
    }

    /// These options as they were before the readings added on 2026-12-06
    /// (how a record kept without them was read): the later ones off too.
    pub fn before(&self) -> ReadOptions {
        ReadOptions {
            jobcomp_utc: false,
            pbs_hosts: false,
            pbs_array_parents: false,
            torque_requests: false,
            slurm_totals: false,
            ..self.before_0056()
        }
    }

    /// These options as they were before the readings added on 2026-12-07
    /// (migration 0056): PBS Pro's totals and TORQUE's hosts off, and the
    /// later ones.
    pub fn before_0056(&self) -> ReadOptions {
        ReadOptions {
            pbs_totals: false,
            torque_hosts: false,
            ..self.before_0060()
        }
    }

    /// These options as they were before migration 0060 (2026-12-07):
    /// Slurm's suspended time not read.
    pub fn before_0060(&self) -> ReadOptions {
        ReadOptions {
            slurm_suspended: false,
            ..self.clone()
        }
    }
}

/// A set of read options as the records read with it keep them: made once
/// per set (a file's records share one), with its JSON and that JSON's
/// text, and shared by every record instead of copied and serialized for
/// each (an import of 100,000 sacct lines spent a sixth of its own CPU
/// doing that). The JSON is made when first asked for: a parser made to
/// read one record again (`audit --deep`) never needs it.
#[derive(Debug, Clone)]
pub struct KeptOptions(Arc<Kept>);

#[derive(Debug)]
struct Kept {
    options: ReadOptions,
    json: std::sync::OnceLock<(serde_json::Value, String)>,
}

impl KeptOptions {
    pub fn new(options: ReadOptions) -> KeptOptions {
        KeptOptions(Arc::new(Kept {
            options,
            json: std::sync::OnceLock::new(),
        }))
    }

    fn stored(&self) -> &(serde_json::Value, String) {
        self.0.json.get_or_init(|| {
            let json = serde_json::to_value(&self.0.options).unwrap_or_default();
            let text = json.to_string();
            (json, text)
        })
    }

    /// The options as stored (`job_record.read_options_id`, a rejection's
    /// `read_options`).
    pub fn json(&self) -> &serde_json::Value {
        &self.stored().0
    }

    /// The options themselves.
    pub fn read_options(&self) -> &ReadOptions {
        &self.0.options
    }

    /// The JSON's text: equal texts are the same set.
    pub fn text(&self) -> &str {
        &self.stored().1
    }

    /// The same set, not merely an equal one: what a parser keeps is
    /// replaced, not changed, when its fields change.
    pub fn same(&self, other: &KeptOptions) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for KeptOptions {
    /// The empty set (input that needs no options: `serve`'s posts), made
    /// once.
    fn default() -> KeptOptions {
        static NONE: std::sync::LazyLock<KeptOptions> =
            std::sync::LazyLock::new(|| KeptOptions::new(ReadOptions::default()));
        NONE.clone()
    }
}

impl KeptOptions {
    /// [`ReadOptions::jobcomp`], made once: `serve`'s posts.
    pub fn jobcomp() -> KeptOptions {
        static JOBCOMP: std::sync::LazyLock<KeptOptions> =
            std::sync::LazyLock::new(|| KeptOptions::new(ReadOptions::jobcomp()));
        JOBCOMP.clone()
    }
}

impl std::ops::Deref for KeptOptions {
    type Target = ReadOptions;
    fn deref(&self) -> &ReadOptions {
        &self.0.options
    }
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
    /// A PBS job array's own end record: its subjobs are charged.
    ArrayParent,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Skip::Step => "job steps (charged with their job)",
            Skip::NotEnded => "jobs not ended yet (charged once they end)",
            Skip::NeverStarted => "jobs that never started (nothing to charge)",
            Skip::OtherRecord => "records other than job ends",
            Skip::ArrayParent => "job arrays' own end records (their subjobs are charged)",
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
    fn options(&self) -> KeptOptions;
    /// The job a line names (`cluster/job[_index]`, as [`JobInput::key`]
    /// gives it), read as far as the line allows: so a malformed record's
    /// rejection still says which job it is.
    fn job_key(&self, _line: &str) -> Option<String> {
        None
    }
    /// A line cut short that is, from what it holds, a record never charged
    /// (a PBS record of another type than E or R; a Slurm step: its job id
    /// is whole and names one).
    fn cut_skip(&self, _line: &str) -> Option<Skip> {
        None
    }
    /// The job a line cut short names, when what names it is whole: by
    /// default, when one more character at the end would not change it (a
    /// line cut inside its job id, `12` of `1234|…`, names no job rather
    /// than job 12).
    fn cut_job_key(&self, line: &str) -> Option<String> {
        let key = self.job_key(line)?;
        (self.job_key(&format!("{line}\u{FFFD}")).as_ref() == Some(&key)).then_some(key)
    }
}

impl Format {
    /// Whether every record is a line a program wrote whole, newline
    /// included (`sacct`, PBS, slurmctld's jobcomp/filetxt): a last line
    /// without one was cut short. A JSON line cut short does not parse.
    pub fn whole_lines(self) -> bool {
        matches!(self, Format::Slurm | Format::Pbs | Format::JobcompFiletxt)
    }

    /// What an input of this format is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Format::Slurm => "sacct --parsable2 output",
            Format::Pbs => "a PBS accounting log",
            Format::Jsonl => "JSON lines of hpc-ledger's job format",
            Format::Jobcomp => "Slurm jobcomp/elasticsearch documents",
            Format::SacctJson => "sacct --json output",
            Format::JobcompFiletxt => "a Slurm jobcomp/filetxt log",
        }
    }
}

/// The format a line plainly is, judged from the first line of an input:
/// `None` when it is none of them plainly (the parser then says what is
/// wrong, line by line).
pub fn sniff(line: &str) -> Option<Format> {
    let t = line.trim();
    // sacct --json pretty-prints: its first line is the document's `{`.
    if t == "{" {
        return Some(Format::SacctJson);
    }
    if t.starts_with('{') {
        return match serde_json::from_str::<serde_json::Value>(t) {
            Ok(serde_json::Value::Object(o)) if o.contains_key("jobs") && o.contains_key("meta") => {
                Some(Format::SacctJson)
            }
            Ok(serde_json::Value::Object(o)) if o.contains_key("jobid") || o.contains_key("@start") => {
                Some(Format::Jobcomp)
            }
            Ok(serde_json::Value::Object(o)) if o.contains_key("job_id") => Some(Format::Jsonl),
            _ => None,
        };
    }
    if t.starts_with("JobId=") && t.contains(" JobState=") {
        return Some(Format::JobcompFiletxt);
    }
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    // MM/DD/YYYY HH:MM:SS;T;
    if b.len() > 22
        && digits(0..2)
        && b[2] == b'/'
        && digits(3..5)
        && b[5] == b'/'
        && digits(6..10)
        && b[10] == b' '
        && digits(11..13)
        && b[13] == b':'
        && b[19] == b';'
        && b[21] == b';'
    {
        return Some(Format::Pbs);
    }
    let first = t.split('|').next().unwrap_or_default();
    if t.contains('|')
        && (slurm::is_header(&t.split('|').collect::<Vec<_>>())
            || (!first.is_empty()
                && first.starts_with(|c: char| c.is_ascii_digit())
                && first
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '_' | '.' | '+' | '[' | ']' | '-' | ','))))
    {
        return Some(Format::Slurm);
    }
    None
}

/// Stop reading after this many malformed records in a row: the input is
/// not what it was said to be (a binary file read as lines, a truncated
/// copy), and keeping each of its lines as a rejection helps nobody.
pub const MALFORMED_RUN: u64 = 1_000;

/// Whether the first bytes of an input say it is not text at all: a
/// compressed file or an archive, or data in which more than 5 % of the
/// bytes other than NUL are control bytes (executables, random or encrypted
/// data). NUL bytes alone do not make a file binary: a log written when its
/// node crashed holds a block of them, and those lines are malformed
/// records, the rest of the file still read. `None` when it looks like text.
pub fn binary(head: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 5] = [
        (b"\x1f\x8b", "gzip-compressed data"),
        (b"BZh", "bzip2-compressed data"),
        (b"\xfd7zXZ\x00", "xz-compressed data"),
        (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
        (b"PK\x03\x04", "a zip archive"),
    ];
    if let Some((_, what)) = MAGIC.iter().find(|(m, _)| head.starts_with(m)) {
        return Some(what);
    }
    if head.len() >= 262 && &head[257..262] == b"ustar" {
        return Some("a tar archive");
    }
    let head = &head[..head.len().min(8192)];
    // Control bytes other than tab, line feed, carriage return, form feed, escape.
    let control = head
        .iter()
        .filter(|&&b| b != 0 && b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b))
        .count();
    let not_nul = head.iter().filter(|&&b| b != 0).count();
    (control * 20 > not_nul).then_some("binary data")
}

/// Refuse an input that is plainly another format than the one it is read
/// as, from its first non-empty line: one error naming what it looks like
/// and the flag to read it with (before anything is recorded or kept).
pub fn check_format(expected: Format, first_line: &str) -> Result<(), String> {
    match sniff(first_line) {
        Some(seen) if seen != expected => Err(format!(
            "this looks like {}, not {}: read it with --format {} (nothing was recorded)",
            seen.describe(),
            expected.describe(),
            seen.as_str()
        )),
        _ => Ok(()),
    }
}

/// The job a JSON line names (`cluster/job[_index]`), for a rejection of a
/// line that is JSON but not a job that can be read.
pub(crate) fn json_job_key(line: &str, id: &str, index: Option<&str>, default_cluster: Option<&str>) -> Option<String> {
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
/// Read one kept record again, as it was read when it was kept: its source
/// format (`cli` and `json`, the one-object forms of `job record` and
/// `serve`'s `/jobs`, are JSON jobs), its read options and its exact bytes.
/// Used by `import --retry-rejected` and `audit --deep`.
pub fn reread(
    source_format: SourceFormat,
    options: &ReadOptions,
    raw: &str,
    raw_bytes: Option<&[u8]>,
) -> Result<Item, String> {
    if let Some(reason) = filetxt::kept_cut(options) {
        return Ok(Item::Bad(reason.into()));
    }
    if options.cut_short {
        return Ok(Item::Bad(CUT_SHORT.into()));
    }
    Ok(match Format::of(source_format) {
        Some(f) => read_kept(&mut *parser(f, options)?, raw, raw_bytes),
        None => read_json_job(raw),
    })
}

/// A kept record read with `p`: one that holds nothing is not a job.
fn read_kept(p: &mut dyn Parser, raw: &str, raw_bytes: Option<&[u8]>) -> Item {
    read_record(p, raw, raw_bytes).unwrap_or_else(|| Item::Bad("the line is empty".into()))
}

/// A kept record of a format no parser reads (`cli`, `json`: one JSON job).
fn read_json_job(raw: &str) -> Item {
    jsonl::parse_job(raw).unwrap_or_else(Item::Bad)
}

/// Records read again one by one, with a parser kept for each set of read
/// options and format: [`reread`] makes a parser for every record (for
/// `sacct` lines, an index of their field names) and its caller decodes
/// the options' JSON for every record, although a file's records share one
/// set. Measured on `audit --deep` of the bench's 100,000 sacct records,
/// those were about 45 % of its own CPU.
///
/// A parser is kept only while reading a record leaves it as it was made:
/// a `sacct` header among the kept records (or the XDMoD layout found)
/// changes the fields it reads the next line with, and the next record with
/// these options gets a new parser, as [`reread`] would give it.
#[derive(Default)]
pub struct Rereader {
    sets: std::collections::HashMap<String, KeptSet>,
}

struct KeptSet {
    /// The options the text decodes to, or why it does not.
    options: Result<ReadOptions, String>,
    parsers: Vec<(Format, Box<dyn Parser + Send>)>,
}

impl Rereader {
    /// Read `raw` again as [`reread`] does, with the options stored as
    /// `options` (their JSON's text: equal texts are one set). `Err` when
    /// the text is not read options (the reason); otherwise the options it
    /// holds and what the record reads as.
    pub fn reread(
        &mut self,
        source_format: SourceFormat,
        options: &str,
        raw: &str,
        raw_bytes: Option<&[u8]>,
    ) -> Result<(&ReadOptions, Result<Item, String>), String> {
        if !self.sets.contains_key(options) {
            let decoded = serde_json::from_str::<ReadOptions>(options).map_err(|e| e.to_string());
            self.sets.insert(
                options.to_owned(),
                KeptSet {
                    options: decoded,
                    parsers: Vec::new(),
                },
            );
        }
        let KeptSet { options, parsers } = self.sets.get_mut(options).expect("inserted above");
        let options = options.as_ref().map_err(Clone::clone)?;
        if let Some(reason) = filetxt::kept_cut(options) {
            return Ok((options, Ok(Item::Bad(reason.into()))));
        }
        if options.cut_short {
            return Ok((options, Ok(Item::Bad(CUT_SHORT.into()))));
        }
        let Some(format) = Format::of(source_format) else {
            return Ok((options, Ok(read_json_job(raw))));
        };
        let at = match parsers.iter().position(|(f, _)| *f == format) {
            Some(at) => at,
            None => match parser(format, options) {
                Ok(p) => {
                    parsers.push((format, p));
                    parsers.len() - 1
                }
                Err(e) => return Ok((options, Err(e))),
            },
        };
        let p = &mut parsers[at].1;
        let before = p.options();
        let item = read_kept(&mut **p, raw, raw_bytes);
        if !before.same(&p.options()) {
            parsers.swap_remove(at);
        }
        Ok((options, Ok(item)))
    }
}

pub fn parser(format: Format, options: &ReadOptions) -> Result<Box<dyn Parser + Send>, String> {
    Ok(match format {
        Format::Slurm => Box::new(slurm::SlurmParser::new(options)?),
        Format::Pbs => Box::new(pbs::PbsParser::new(options)),
        Format::Jsonl => Box::new(jsonl::JsonlParser::new(options)),
        Format::Jobcomp => Box::new(jobcomp::JobcompParser::new(options)),
        Format::SacctJson => Box::new(sacct_json::SacctJsonParser::new(options)),
        Format::JobcompFiletxt => Box::new(filetxt::FiletxtParser::new(options)),
    })
}

/// The longest line read; longer lines are reported, not read into memory.
pub const MAX_LINE: usize = 1 << 20;

/// One line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawLine {
    Text(String),
    /// Not valid UTF-8: read with each bad byte as U+FFFD (see [`decode`]),
    /// and the bytes as they were.
    Lossy {
        text: String,
        bytes: Vec<u8>,
    },
    /// Holding a NUL byte, or longer than [`MAX_LINE`]: the reason, the start
    /// of the line as far as it can be shown, and its bytes when kept.
    Unreadable {
        reason: String,
        prefix: String,
        bytes: Option<Vec<u8>>,
    },
}

/// The one byte policy of every path (docs/recording.md): bytes that are
/// not valid UTF-8 are read with each bad sequence as U+FFFD, and the exact
/// bytes are kept beside the record. Returns the text, and the bytes when
/// they were not valid UTF-8.
pub fn decode(bytes: Vec<u8>) -> (String, Option<Vec<u8>>) {
    match String::from_utf8(bytes) {
        Ok(s) => (s, None),
        Err(e) => {
            let b = e.into_bytes();
            (String::from_utf8_lossy(&b).into_owned(), Some(b))
        }
    }
}

/// Read one record with `p` under the byte policy: `text` is the record as
/// read, `exact` its bytes when they were not valid UTF-8. A record holding
/// a NUL byte is malformed; one that was not UTF-8 is checked by
/// [`check_decoded`].
pub fn read_record(p: &mut dyn Parser, text: &str, exact: Option<&[u8]>) -> Option<Item> {
    if let Some(at) = exact.and_then(|b| b.iter().position(|c| *c == 0)) {
        return Some(Item::Bad(format!(
            "the record holds a NUL byte (byte {}): a damaged record",
            at + 1
        )));
    }
    let item = p.parse(text)?;
    Some(match exact {
        Some(_) => check_decoded(item),
        None => item,
    })
}

/// A job read from a record that was not valid UTF-8 is charged only when
/// the fields that decide its charge and identity came through whole; bad
/// bytes in its user, job name, state or exit code are read as U+FFFD.
pub fn check_decoded(item: Item) -> Item {
    let Item::Job(job) = item else { return item };
    let fields = [
        ("cluster", job.cluster.as_deref()),
        ("job id", Some(job.job_id.as_str())),
        ("project", job.project.as_deref()),
        ("queue", job.queue.as_deref()),
        ("node type", job.node_type.as_deref()),
    ];
    match fields.iter().find(|(_, v)| v.is_some_and(|v| v.contains('\u{FFFD}'))) {
        Some((name, _)) => Item::Bad(format!(
            "the {name} is not valid UTF-8: a record's charge is not guessed from damaged bytes (the bytes are kept)"
        )),
        None => Item::Job(job),
    }
}

/// Numbered, bounded lines from a reader.
pub struct LineReader<R> {
    inner: R,
    number: u64,
    bytes: u64,
    /// The last line read had no newline after it.
    unterminated: bool,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            number: 0,
            bytes: 0,
            unterminated: false,
        }
    }

    /// Whether the line last returned ended the input without a newline
    /// (for a machine-written format: cut short, [`CUT_SHORT`]).
    pub fn unterminated(&self) -> bool {
        self.unterminated
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
        self.unterminated = true;
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
                self.unterminated = false;
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
        let line = if too_long {
            RawLine::Unreadable {
                reason: format!("the line is longer than {MAX_LINE} bytes"),
                prefix: String::from_utf8_lossy(&buf[..buf.len().min(200)]).into_owned(),
                bytes: None,
            }
        } else if let Some(at) = buf.iter().position(|b| *b == 0) {
            RawLine::Unreadable {
                reason: format!("the line holds a NUL byte (byte {}): a damaged record", at + 1),
                prefix: String::from_utf8_lossy(&buf).replace('\0', "\u{FFFD}"),
                bytes: Some(buf),
            }
        } else {
            match decode(buf) {
                (text, None) => RawLine::Text(text),
                (text, Some(bytes)) => RawLine::Lossy { text, bytes },
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

    /// What a last line cut short reads as, on real records: a PBS R
    /// record (a run to charge) cut before its `start=` is kept, not
    /// skipped as a bare R; a D record is skipped once its type is whole;
    /// a line cut inside its type is kept; a Slurm line cut inside its
    /// `Cluster` column names no job, one cut after it names the job.
    #[test]
    fn a_line_cut_short_is_skipped_only_for_what_its_start_says() {
        let casper = include_str!("../../tests/fixtures/accounting/ncar_pbsparse_casper_records.log");
        let record = |kind: &str| casper.lines().find(|l| l.contains(kind)).unwrap();
        let options = ReadOptions {
            cluster: Some("casper".into()),
            ..Default::default()
        };
        let mut p = parser(Format::Pbs, &options).unwrap();
        let cut = |p: &mut Box<dyn Parser + Send>, line: &str| read_cut_short(&mut **p, line, None);
        let rerun = record(";R;4400521.");
        let before_start = &rerun[..rerun.find(" start=").unwrap()];
        assert_eq!(cut(&mut p, before_start), Some(Item::Bad(CUT_SHORT.into())));
        assert_eq!(
            p.cut_job_key(before_start).as_deref(),
            Some("casper/4400521.casper-pbs")
        );
        let deleted = record(";D;4421332.");
        assert_eq!(cut(&mut p, &deleted[..25]), Some(Item::Skip(Skip::OtherRecord)));
        assert_eq!(cut(&mut p, &deleted[..20]), Some(Item::Bad(CUT_SHORT.into())));
        let end = record(";E;2281314.");
        assert_eq!(cut(&mut p, &end[..30]), Some(Item::Bad(CUT_SHORT.into())));
        assert_eq!(p.cut_job_key(&end[..30]), None, "its job id is cut");

        let requeue = include_str!("../../tests/fixtures/accounting/slurm_2205_requeue_sacct.txt");
        let mut lines = requeue.lines().filter(|l| !l.starts_with('#'));
        let mut s = parser(Format::Slurm, &ReadOptions::default()).unwrap();
        assert_eq!(s.parse(lines.next().unwrap()), None, "the header");
        let last = lines.next_back().unwrap();
        assert_eq!(s.cut_job_key(&last[..9]), None, "{}", &last[..9]);
        assert_eq!(s.cut_job_key(&last[..13]).as_deref(), Some("testclu/3"));
        let step = "3.batch|3.batch|testclu|";
        assert_eq!(cut(&mut s, step), Some(Item::Skip(Skip::Step)));
        assert_eq!(cut(&mut s, &last[..40]), Some(Item::Bad(CUT_SHORT.into())));
    }

    #[test]
    fn each_reading_names_a_read_option_set_now() {
        use crate::domain::kinds::SourceFormat;
        let mut now = ReadOptions::default();
        for f in [
            SourceFormat::Jobcomp,
            SourceFormat::Pbs,
            SourceFormat::Slurm,
            SourceFormat::SacctJson,
        ] {
            now = now.now(f);
        }
        let kept = serde_json::to_value(&now).unwrap();
        for r in [
            Reading::JobcompUtc,
            Reading::PbsHosts,
            Reading::TorqueRequests,
            Reading::SlurmTotals,
            Reading::PbsTotals,
            Reading::TorqueHosts,
            Reading::SlurmSuspended,
        ] {
            assert_eq!(kept.get(r.option()), Some(&serde_json::Value::Bool(true)), "{r:?}");
            assert_eq!(
                serde_json::to_value(now.before()).unwrap().get(r.option()),
                None,
                "{r:?}"
            );
            // Without one of a set, a record was read with every one of the
            // sets before it and none of its own or the later ones.
            let before = serde_json::to_value(r.options_before(&now)).unwrap();
            assert_eq!(before.get(r.option()), None, "{r:?}");
            for (other, set) in [
                (Reading::PbsHosts, ReadingsOf::M0049),
                (Reading::PbsTotals, ReadingsOf::M0056),
                (Reading::SlurmSuspended, ReadingsOf::M0060),
            ] {
                assert_eq!(before.get(other.option()).is_some(), set < r.of(), "{r:?} {other:?}");
            }
        }
    }

    #[test]
    fn lines_are_numbered_bounded_and_checked() {
        let mut input = b"first\r\nsecond\n".to_vec();
        input.extend(vec![b'x'; MAX_LINE + 10]);
        input.extend(b"\n\xff\xfe bad\nnul\0line\nlast");
        let mut r = LineReader::new(std::io::Cursor::new(input));
        assert_eq!(r.next_line().unwrap(), Some((1, RawLine::Text("first".into()))));
        assert_eq!(r.next_line().unwrap(), Some((2, RawLine::Text("second".into()))));
        match r.next_line().unwrap() {
            Some((3, RawLine::Unreadable { reason, prefix, bytes })) => {
                assert_eq!(reason, format!("the line is longer than {MAX_LINE} bytes"));
                assert_eq!((prefix.len(), bytes), (200, None));
            }
            other => panic!("{other:?}"),
        }
        // Not UTF-8: read with U+FFFD, the bytes kept.
        assert_eq!(
            r.next_line().unwrap(),
            Some((
                4,
                RawLine::Lossy {
                    text: "\u{FFFD}\u{FFFD} bad".into(),
                    bytes: b"\xff\xfe bad".to_vec()
                }
            ))
        );
        match r.next_line().unwrap() {
            Some((5, RawLine::Unreadable { reason, prefix, bytes })) => {
                assert_eq!(reason, "the line holds a NUL byte (byte 4): a damaged record");
                assert_eq!(prefix, "nul\u{FFFD}line");
                assert_eq!(bytes.as_deref(), Some(&b"nul\0line"[..]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.next_line().unwrap(), Some((6, RawLine::Text("last".into()))));
        assert_eq!(r.next_line().unwrap(), None);
    }

    /// Real sacct lines, read as an import reads them, then read again one
    /// by one: a kept parser gives what a new parser per record gives,
    /// also after a record that changes a parser's fields.
    #[test]
    fn a_kept_parser_reads_each_record_as_a_new_one_would() {
        let strip = |t: &'static str| t.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>();
        let header = strip(include_str!(
            "../../tests/fixtures/accounting/slurm_2205_lab_sacct_header.txt"
        ));
        let xdmod = strip(include_str!(
            "../../tests/fixtures/accounting/xdmod_slurm_sacct_parsable2_unit.log"
        ));
        // A line of neither layout: 25 of the 26 fields.
        let short = header[1].rsplit_once('|').unwrap().0.to_owned();
        // What an import keeps: each record with its parser's options.
        let mut kept: Vec<(String, &str)> = Vec::new();
        for lines in [&header, &xdmod] {
            let mut p = slurm::SlurmParser::new(&ReadOptions::default()).unwrap();
            for line in lines.iter() {
                if let Some(Item::Job(_)) = p.parse(line) {
                    kept.push((p.options().text().to_owned(), line));
                }
            }
        }
        let with_header = kept[0].0.clone();
        let headerless = kept.last().unwrap().0.clone();
        assert!(with_header.contains("\"JobIDRaw\""), "{with_header}");
        assert!(kept.len() > 10, "{}", kept.len());
        // Records that change a parser: the header itself kept as a record
        // under the header's options, and an XDMoD line under empty options
        // (its layout found, fields set).
        let empty = KeptOptions::default().text().to_owned();
        kept.insert(3, (with_header.clone(), header[0]));
        kept.insert(5, (empty.clone(), xdmod[0]));
        kept.insert(6, (empty.clone(), short.as_str()));
        let mut rereader = Rereader::default();
        for (text, line) in &kept {
            let options: ReadOptions = serde_json::from_str(text).unwrap();
            let once = reread(SourceFormat::Slurm, &options, line, None);
            let (o, kept_read) = rereader.reread(SourceFormat::Slurm, text, line, None).unwrap();
            assert_eq!(o, &options);
            assert_eq!(kept_read, once, "{line}");
        }
        // The header kept as a record reads as nothing; the line of neither
        // layout, read after the XDMoD line with the same options, still
        // reads as on its own (a parser kept with the XDMoD fields would
        // say 25 fields where 26 are expected).
        assert_eq!(
            reread(SourceFormat::Slurm, &ReadOptions::default(), header[0], None),
            Ok(Item::Bad("the line is empty".into()))
        );
        assert_eq!(
            reread(SourceFormat::Slurm, &ReadOptions::default(), &short, None),
            Ok(Item::Bad(
                "25 fields and no header: export with a header line (sacct --parsable2 without --noheader) or name the fields (--fields)".into()
            ))
        );
        // One set of options, one parser each, the ones changed dropped.
        assert_eq!(rereader.sets.len(), 3);
        assert_eq!(rereader.sets[&with_header].parsers.len(), 1);
        assert_eq!(rereader.sets[&headerless].parsers.len(), 1);
        assert_eq!(rereader.sets[&empty].parsers.len(), 1);
        // A text that is not read options.
        let bad = rereader.reread(SourceFormat::Slurm, "{\"fields\": 3}", header[1], None);
        assert!(matches!(&bad, Err(e) if e.contains("invalid type")), "{bad:?}");
    }
}

#[cfg(test)]
mod sniff_tests {
    use super::*;

    #[test]
    fn binary_inputs_are_told_from_text_with_a_damaged_record() {
        assert_eq!(binary(b"\x1f\x8b\x08\x00rest"), Some("gzip-compressed data"));
        assert_eq!(binary(b"\xfd7zXZ\x00\x00"), Some("xz-compressed data"));
        let mut tar = vec![0u8; 512];
        tar[..10].copy_from_slice(b"jobs.jsonl");
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(binary(&tar), Some("a tar archive"));
        // An ELF executable: many NUL bytes.
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.extend([0u8; 100]);
        assert_eq!(binary(&elf), Some("binary data"));
        // Random bytes (neither compressed nor an archive).
        let random: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(binary(&random), Some("binary data"));
        // Text, a Latin-1 byte, one damaged record with a NUL, and a block of
        // NULs where the node crashed: text.
        let mut text = b"JobID|Account\n1|a\xe9\n".repeat(20);
        text.extend(b"2|b\0c\n");
        text.extend([0u8; 4096]);
        text.extend(b"3|d\n");
        assert_eq!(binary(&text), None);
        assert_eq!(binary(&[0u8; 100]), None);
        assert_eq!(binary(b""), None);
        assert_eq!(binary(b"\t\x1b[0m colours\r\n"), None);
    }

    #[test]
    fn an_input_that_is_plainly_another_format_is_named() {
        let cases: [(&str, Option<Format>); 10] = [
            ("{", Some(Format::SacctJson)),
            (r#"{"meta": {}, "jobs": []}"#, Some(Format::SacctJson)),
            (r#"{"jobid":4,"@start":"2026-11-30T08:48:04"}"#, Some(Format::Jobcomp)),
            (r#"{"cluster": "owens", "job_id": "2001"}"#, Some(Format::Jsonl)),
            ("10/15/2026 09:00:00;E;5003.pitzer-batch;user=alan", Some(Format::Pbs)),
            ("JobID|JobIDRaw|Cluster", Some(Format::Slurm)),
            ("4103947_[9-11,20]|4103947|ub-hpc|general", Some(Format::Slurm)),
            (
                "JobId=17 UserId=alice(1001) GroupId=alice(1001) Name=ft-fail JobState=FAILED Partition=regular",
                Some(Format::JobcompFiletxt),
            ),
            ("5908801_3☃gpulong☃1", None),
            ("garbage", None),
        ];
        for (line, want) in cases {
            assert_eq!(sniff(line), want, "{line}");
        }
        assert_eq!(
            check_format(Format::Slurm, "{"),
            Err("this looks like sacct --json output, not sacct --parsable2 output: read it with --format sacct-json (nothing was recorded)".into())
        );
        assert!(check_format(Format::Slurm, "JobID|State").is_ok());
        assert!(check_format(Format::Pbs, "garbage").is_ok());
    }
}
