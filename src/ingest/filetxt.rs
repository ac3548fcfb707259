//! Slurm's `jobcomp/filetxt` log (`JobCompType=jobcomp/filetxt`, the file
//! named by `JobCompLoc`): one line per finished job, written by slurmctld
//! as `JobId=… UserId=alice(1001) GroupId=… Name=… JobState=… Partition=…
//! TimeLimit=… StartTime=… EndTime=… NodeList=… NodeCnt=… ProcCnt=…
//! WorkDir=… ReservationName=… Tres=… Account=… QOS=… WcKey=… Cluster=…
//! SubmitTime=… EligibleTime=…[ ArrayJobId=… ArrayTaskId=…][ HetJobId=…
//! HetJobOffset=…] DerivedExitCode=… ExitCode=…` (its `JOB_FORMAT`).
//!
//! The fields are those of the `jobcomp/elasticsearch` document of the same
//! job under other names, and a line is read exactly as that document is
//! ([`super::jobcomp::read_document`]): its cores are `ProcCnt` (the job's
//! allocated CPUs), its nodes `NodeCnt`, its memory and GPUs from `Tres`
//! (the job's requested TRES, as the document's `tres_req`); a requeued
//! run (state `PENDING` with a start and an end) is `REQUEUED`, a job that
//! never ran (no CPUs, no nodes) is skipped. Unlike the document's, its
//! times are slurmctld's local time (`localtime_r`), read in the cluster's
//! `time_zone` as `sacct`'s are. Values are not quoted: the job name, the
//! working directory and the wckey are the user's and may hold spaces, or
//! words that read like fields; a line that could be read more than one way
//! is malformed ([`fields`]), and a line Slurm cut ([`split_cut`]) is kept,
//! not charged. A newline in such a value forges a whole line, which no
//! reader can tell: docs/slurm.md says what to put in front of this log.

use serde_json::{Map, Value};

use super::{Item, KeptOptions, Parser, ReadOptions};

/// slurmctld before 24.05.2 built each line in a buffer of 1,024 bytes: a
/// longer record was cut at 1,023 bytes, without its newline, and the next
/// job's line followed it on the same line ("jobcomp/filetxt - Fix
/// truncation of job record lines > 1024 characters", Slurm 24.05.2). A
/// long working directory, job name or node list makes such a record.
pub const SLURM_CUT: usize = 1023;

/// Why the part of a line before such a cut is not charged.
pub const CUT_BY_SLURM: &str = "cut by Slurm at 1,023 bytes (jobcomp/filetxt before Slurm 24.05.2 wrote a longer \
                                record so, without its newline, and the next job's line after it on the same line): \
                                what followed the cut is lost; record this job from sacct";

/// Why the record after such a cut is not charged either.
pub const AFTER_A_CUT: &str = "follows, on the same line, a record cut at 1,023 bytes (Slurm before 24.05.2 wrote a \
                               longer record so; a job name or directory padded to that length makes the same line \
                               of one job): not charged on a guess; record this job from sacct";

/// Why a kept record of a line Slurm cut is not charged, read again
/// (`import --retry-rejected`, `audit --deep`): its options say which part
/// it was.
pub fn kept_cut(options: &ReadOptions) -> Option<&'static str> {
    if options.slurm_cut {
        Some(CUT_BY_SLURM)
    } else if options.after_slurm_cut {
        Some(AFTER_A_CUT)
    } else {
        None
    }
}

/// The records a line holds: more than one where, after a record's first
/// [`SLURM_CUT`] bytes, the next job's `JobId=N UserId=` begins (each part
/// but the last a record cut by Slurm).
pub fn split_cut(bytes: &[u8]) -> Vec<&[u8]> {
    let begins = |b: &[u8]| {
        b.strip_prefix(b"JobId=").is_some_and(|after| {
            let digits = after.iter().take_while(|c| c.is_ascii_digit()).count();
            digits > 0 && after[digits..].starts_with(b" UserId=")
        })
    };
    let mut parts = Vec::new();
    let mut rest = bytes;
    while begins(rest) && rest.len() > SLURM_CUT && begins(&rest[SLURM_CUT..]) {
        parts.push(&rest[..SLURM_CUT]);
        rest = &rest[SLURM_CUT..];
    }
    parts.push(rest);
    parts
}

/// The fields before the job name, one word each.
const HEAD: [&str; 3] = ["JobId", "UserId", "GroupId"];

/// The fields between the job name and the working directory, one word
/// each.
const MIDDLE: [&str; 8] = [
    "JobState",
    "Partition",
    "TimeLimit",
    "StartTime",
    "EndTime",
    "NodeList",
    "NodeCnt",
    "ProcCnt",
];

/// The fields after the working directory, one word each, in the order
/// slurmctld writes them (`Gres` stood where `Tres` stands in Slurm before
/// 15.08; the array's and the heterogeneous job's only for such jobs).
const TAIL: [&str; 15] = [
    "ReservationName",
    "Tres",
    "Gres",
    "Account",
    "QOS",
    "WcKey",
    "Cluster",
    "SubmitTime",
    "EligibleTime",
    "ArrayJobId",
    "ArrayTaskId",
    "HetJobId",
    "HetJobOffset",
    "DerivedExitCode",
    "ExitCode",
];

/// Why a line whose job name or working directory holds fields of its own
/// is not read.
const AMBIGUOUS: &str = "its job name or working directory holds fields of its own, so the line can be read more \
                         than one way (the user chooses both): not charged on a guess; record this job from sacct";

/// A line's fields, by name. The job name, the working directory and the
/// wckey are written unquoted and may hold spaces, or words that read like
/// fields (the user chooses them), so a line in which any field's name
/// begins a word twice is malformed, never guessed at: its text could
/// otherwise move the job to another project, start or size. The rest is
/// read from both ends: the three fields before the name from the start,
/// the one-word fields after the working directory from the end, in
/// slurmctld's order, and the eight one-word fields between the two texts
/// where they stand.
fn fields(line: &str) -> Result<Vec<(&'static str, String)>, String> {
    let line = line.trim_end_matches(['\n', '\r', ' ']);
    if !line.starts_with("JobId=") {
        return Err("not a jobcomp/filetxt line (it does not begin with JobId=)".into());
    }
    let words: Vec<&str> = line.split(' ').collect();
    // A field's name at the start of a word more than once: the job name,
    // the directory or the wckey (the user's text) holds fields of its own.
    let mut seen = std::collections::HashSet::new();
    for word in &words {
        if let Some((k, _)) = word.split_once('=')
            && (HEAD.contains(&k) || MIDDLE.contains(&k) || TAIL.contains(&k) || k == "Name" || k == "WorkDir")
            && !seen.insert(k)
        {
            return Err(format!("{k}= twice: {AMBIGUOUS}"));
        }
    }
    fn field(w: &str) -> Option<(&str, &str)> {
        w.split_once('=')
    }
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for (i, key) in HEAD.iter().enumerate() {
        match words.get(i).copied().and_then(field) {
            Some((k, v)) if k == *key => out.push((key, v.to_owned())),
            _ => return Err(format!("no {key}= where slurmctld writes it")),
        }
    }
    if !words.get(HEAD.len()).is_some_and(|w| w.starts_with("Name=")) {
        return Err("no Name= where slurmctld writes it".into());
    }
    // From the end: one word a field, each before the one after it in
    // slurmctld's order, back to ReservationName.
    let mut tail: Vec<(&'static str, String)> = Vec::new();
    let mut end = words.len();
    let mut after = TAIL.len();
    while after > 0 {
        if end <= HEAD.len() + 1 {
            return Err("no ReservationName= after the working directory".into());
        }
        let word = words[end - 1];
        let Some((at, value)) = field(word).and_then(|(k, v)| TAIL.iter().position(|t| *t == k).map(|at| (at, v)))
        else {
            return Err(format!(
                "{word:?} where the fields after the working directory stand (a value with a space there?): {AMBIGUOUS}"
            ));
        };
        if at >= after {
            return Err(format!("{}= twice, or out of slurmctld's order: {AMBIGUOUS}", TAIL[at]));
        }
        tail.push((TAIL[at], value.to_owned()));
        after = at;
        end -= 1;
    }
    tail.reverse();
    // Between the name and the tail: where the eight fields and the
    // working directory stand, once.
    let name = HEAD.len();
    let at: Vec<usize> = (name + 1..end)
        .filter(|&p| {
            p + MIDDLE.len() < end
                && MIDDLE
                    .iter()
                    .enumerate()
                    .all(|(j, key)| field(words[p + j]).is_some_and(|(k, _)| k == *key))
                && words[p + MIDDLE.len()].starts_with("WorkDir=")
        })
        .collect();
    let p = match at.as_slice() {
        [p] => *p,
        [] => {
            return Err(format!(
                "no {}= … WorkDir= where slurmctld writes them",
                MIDDLE.join("= … ")
            ));
        }
        _ => return Err(AMBIGUOUS.into()),
    };
    out.push(("Name", words[name..p].join(" ")["Name=".len()..].to_owned()));
    for (j, key) in MIDDLE.iter().enumerate() {
        let (_, value) = field(words[p + j]).expect("matched above");
        out.push((key, value.to_owned()));
    }
    let workdir = p + MIDDLE.len();
    out.push(("WorkDir", words[workdir..end].join(" ")["WorkDir=".len()..].to_owned()));
    out.extend(tail);
    Ok(out)
}

/// The `jobcomp/elasticsearch` document the line says the same as: each
/// field under the document's name, an absent time (`Unknown`, `unknown`)
/// or an empty value left out.
fn document(line: &str) -> Result<Map<String, Value>, String> {
    let mut doc = Map::new();
    for (key, value) in fields(line)? {
        let value = value.trim();
        let name = match key {
            "JobId" => "jobid",
            // `alice(1001)`: the name, or the number when Slurm knew none.
            "UserId" => {
                let user = value.split_once('(').map_or(value, |(name, _)| name);
                if !user.is_empty() {
                    doc.insert("username".into(), Value::String(user.to_owned()));
                }
                continue;
            }
            "Name" => "job_name",
            "JobState" => "state",
            "Partition" => "partition",
            "StartTime" => "@start",
            "EndTime" => "@end",
            "SubmitTime" => "@submit",
            "NodeList" => "nodes",
            "NodeCnt" => "total_nodes",
            "ProcCnt" => "total_cpus",
            "Tres" => "tres_req",
            "Account" => "account",
            "Cluster" => "cluster",
            "ArrayJobId" => "array_job_id",
            "ArrayTaskId" => "array_task_id",
            "HetJobId" => "het_job_id",
            "HetJobOffset" => "het_job_offset",
            "ExitCode" => "exit_code",
            _ => continue,
        };
        // slurmctld writes `unknown` for a time it does not have (a submit
        // time), `Unknown` for a start or end of 0, and `unknown` for the
        // cluster of a job without an association.
        let absent = value.is_empty()
            || (matches!(name, "@start" | "@end" | "@submit" | "cluster") && value.eq_ignore_ascii_case("unknown"));
        if !absent {
            doc.insert(name.into(), Value::String(value.to_owned()));
        }
    }
    Ok(doc)
}

/// Read one line.
pub fn read_line(line: &str, options: &ReadOptions) -> Result<Item, String> {
    let doc = document(line)?;
    // Local times, whatever the options say of documents.
    let local = ReadOptions {
        jobcomp_utc: false,
        ..options.clone()
    };
    super::jobcomp::read_document(&doc, &local)
}

/// One line per job.
pub struct FiletxtParser {
    options: KeptOptions,
}

impl FiletxtParser {
    pub fn new(options: &ReadOptions) -> FiletxtParser {
        FiletxtParser {
            options: KeptOptions::new(options.clone()),
        }
    }
}

impl Parser for FiletxtParser {
    fn parse(&mut self, line: &str) -> Option<Item> {
        if line.trim().is_empty() {
            return None;
        }
        Some(read_line(line, &self.options).unwrap_or_else(Item::Bad))
    }

    fn options(&self) -> KeptOptions {
        self.options.clone()
    }

    fn job_key(&self, line: &str) -> Option<String> {
        // As the job is keyed once read (an array task `123_4`, a
        // heterogeneous component `123+1`); a line that cannot be read
        // names its `JobId` alone, on the cluster of the import, if any.
        let Ok(doc) = document(line) else {
            let id = line.strip_prefix("JobId=")?.split(' ').next()?;
            let cluster = self.options.cluster.as_deref().unwrap_or("?");
            return (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| format!("{cluster}/{id}"));
        };
        let field = |k: &str| doc.get(k).and_then(Value::as_str).map(str::trim);
        let cluster = field("cluster").or(self.options.cluster.as_deref()).unwrap_or("?");
        let id = match (field("array_job_id"), field("array_task_id"), field("het_job_id")) {
            (Some(job), Some(task), _) if job != "0" => format!("{job}_{task}"),
            (_, _, Some(het)) if het != "0" => format!("{het}+{}", field("het_job_offset").unwrap_or("0")),
            _ => field("jobid")?.to_owned(),
        };
        Some(format!("{cluster}/{id}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::posting::{JobInput, Stamp};
    use crate::domain::units::{Bytes, GIB, MIB};
    use crate::ingest::Skip;
    use chrono::NaiveDateTime;

    /// The three lines slurmctld 22.05 wrote with `JobCompType=jobcomp/filetxt`
    /// (tests/fixtures/accounting/slurm_2205_lab_jobcomp_filetxt.log).
    fn fixture() -> Vec<String> {
        include_str!("../../tests/fixtures/accounting/slurm_2205_lab_jobcomp_filetxt.log")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    fn job(line: &str) -> JobInput {
        match read_line(line, &ReadOptions::default()) {
            Ok(Item::Job(j)) => *j,
            other => panic!("not a job: {other:?}"),
        }
    }

    fn local(s: &str) -> Stamp {
        Stamp::Local(NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap())
    }

    #[test]
    fn the_lines_slurm_wrote() {
        let lines = fixture();
        assert_eq!(lines.len(), 3);
        let failed = job(&lines[0]);
        assert_eq!(failed.key(), "testclu/17");
        assert_eq!(
            (failed.state.as_str(), failed.exit_code.as_deref()),
            ("FAILED", Some("3:0"))
        );
        assert_eq!((failed.nodes, failed.cores, failed.gpus), (Some(1), 1, None));
        assert_eq!(failed.memory, Some(Bytes(100 * MIB)));
        assert_eq!((failed.user.as_str(), failed.job_name.as_str()), ("alice", "ft-fail"));
        assert_eq!(failed.project.as_deref(), Some("pas1234"));
        assert_eq!(failed.queue.as_deref(), Some("regular"));
        assert_eq!(failed.start, local("2026-11-30T08:49:43"));
        assert_eq!(failed.end, local("2026-11-30T08:49:44"));
        assert_eq!(failed.submit, Some(local("2026-11-30T08:49:43")));
        let gpu = job(&lines[2]);
        assert_eq!(gpu.key(), "testclu/18");
        assert_eq!((gpu.nodes, gpu.cores, gpu.gpus), (Some(2), 2, Some(4)));
        assert_eq!(gpu.memory, Some(Bytes(2 * GIB)));
        assert_eq!(
            (gpu.queue.as_deref(), gpu.project.as_deref()),
            (Some("gpu"), Some("pzs0001"))
        );
        assert_eq!(gpu.end, local("2026-11-30T08:49:48"));
    }

    /// The same job as the `jobcomp/elasticsearch` document says it, but for
    /// the time zone: the document's times are UTC.
    #[test]
    fn a_line_reads_as_the_document_of_the_same_job() {
        let line = &fixture()[2];
        let doc = r#"{"jobid":18,"@start":"2026-11-30T08:49:46","@end":"2026-11-30T08:49:48",
            "@submit":"2026-11-30T08:49:43","partition":"gpu","nodes":"c[01-02]","total_cpus":2,"total_nodes":2,
            "state":"COMPLETED","exit_code":"0:0","cluster":"testclu","account":"pzs0001","username":"bob",
            "job_name":"ft-gpu","tres_req":"cpu=2,mem=2G,node=2,billing=42,gres/gpu=4"}"#;
        let (_, item) = crate::ingest::jobcomp::parse_document(doc, &ReadOptions::default()).unwrap();
        assert_eq!(read_line(line, &ReadOptions::default()), Ok(item));
    }

    /// Lines of tests/slurm/e2e.sh's filetxt phase: a name and a working
    /// directory with spaces, an array task, a job cancelled while pending.
    #[test]
    fn the_lines_of_the_real_slurm_run() {
        let lines: Vec<&str> = include_str!("../../tests/fixtures/accounting/slurm_2205_e2e_jobcomp_filetxt.log")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
        let by_id = |id: &str| {
            lines
                .iter()
                .find(|l| l.starts_with(&format!("JobId={id} ")))
                .unwrap()
                .to_string()
        };
        let spaced = job(&by_id("33"));
        assert_eq!(
            (spaced.job_name.as_str(), spaced.key()),
            ("ft spaced name", "ledgere2e/33".to_owned())
        );
        assert_eq!((spaced.cores, spaced.memory), (1, Some(Bytes(256 * MIB))));
        // The array's tasks: 0 ran as job 39, 1 as job 36, the array's own id.
        let task = job(&by_id("39"));
        assert_eq!((task.key(), task.array_index), ("ledgere2e/36_0".to_owned(), Some(0)));
        assert_eq!(job(&by_id("36")).key(), "ledgere2e/36_1");
        assert_eq!(
            read_line(&by_id("38"), &ReadOptions::default()),
            Ok(Item::Skip(Skip::NeverStarted))
        );
    }

    #[test]
    fn names_and_directories_with_spaces_arrays_and_heterogeneous_jobs() {
        let line = "JobId=41 UserId=carol(1003) GroupId=carol(1003) Name=my run x=1 \
                    JobState=TIMEOUT Partition=regular TimeLimit=60 StartTime=2026-11-02T10:00:00 \
                    EndTime=2026-11-02T11:00:00 NodeList=c01 NodeCnt=1 ProcCnt=4 WorkDir=/home/carol/my runs \
                    ReservationName= Tres=cpu=4,mem=8G,node=1 Account=PAS1234 QOS=normal WcKey= Cluster=owens \
                    SubmitTime=unknown EligibleTime=unknown ArrayJobId=40 ArrayTaskId=3 DerivedExitCode=0:0 \
                    ExitCode=0:15 \n";
        let j = job(line);
        // A name with spaces and an `=` that names no field.
        assert_eq!(j.job_name, "my run x=1");
        assert_eq!(j.state, "TIMEOUT");
        assert_eq!((j.key(), j.array_index), ("owens/40_3".to_owned(), Some(3)));
        assert_eq!((j.cores, j.memory), (4, Some(Bytes(8 * GIB))));
        assert_eq!(j.submit, None);
        let parser = FiletxtParser::new(&ReadOptions::default());
        assert_eq!(parser.job_key(line).as_deref(), Some("owens/40_3"));
        let het = line
            .replace(" ArrayJobId=40 ArrayTaskId=3", " HetJobId=40 HetJobOffset=1")
            .replace("Cluster=owens", "Cluster=unknown");
        let options = ReadOptions {
            cluster: Some("pitzer".into()),
            ..ReadOptions::default()
        };
        let j = match read_line(&het, &options) {
            Ok(Item::Job(j)) => *j,
            other => panic!("{other:?}"),
        };
        assert_eq!(j.key(), "pitzer/40+1");
        assert_eq!(
            FiletxtParser::new(&options).job_key(&het).as_deref(),
            Some("pitzer/40+1")
        );
    }

    /// Slurm before 24.05.2: a record over 1,023 bytes cut there, the next
    /// job's line after it; only there (a name that reads like a record, a
    /// line of another length, are one record).
    #[test]
    fn a_line_slurm_cut_holds_the_next_jobs_line() {
        let lines = fixture();
        let long = lines[1].replace(
            "WorkDir=/srv/slurm-lab/jobs",
            &format!("WorkDir=/srv/{}", "d/".repeat(400)),
        );
        assert!(long.len() > SLURM_CUT);
        let glued = format!("{}{}", &long[..SLURM_CUT], lines[2]);
        assert_eq!(
            split_cut(glued.as_bytes()),
            [&long.as_bytes()[..SLURM_CUT], lines[2].as_bytes()]
        );
        // Two cuts in a row.
        let twice = format!("{}{}{}", &long[..SLURM_CUT], &long[..SLURM_CUT], lines[2]);
        assert_eq!(split_cut(twice.as_bytes()).len(), 3);
        // Not at 1,023 bytes, or not the next job's line there: one record.
        let shifted = format!("{} {}", &long[..SLURM_CUT], lines[2]);
        assert_eq!(split_cut(shifted.as_bytes()).len(), 1);
        let named = format!("{}JobId=x UserId=y", &long[..SLURM_CUT]);
        assert_eq!(split_cut(named.as_bytes()).len(), 1);
        assert_eq!(split_cut(lines[2].as_bytes()), [lines[2].as_bytes()]);
    }

    /// The job name and the working directory are the user's, written
    /// unquoted: words in them that read like fields never move the job to
    /// another project, start or size. Fields written after the directory
    /// are the real ones (the line is read from its end); a name or a
    /// directory holding the fields between them makes the line malformed.
    #[test]
    fn a_name_or_directory_that_reads_like_fields_is_never_taken_for_them() {
        let line = &fixture()[2];
        let reason = |l: &str| match read_line(l, &ReadOptions::default()) {
            Err(e) => e,
            other => panic!("{other:?}"),
        };
        // A directory holding the fields after it: not read.
        let fake_tail = line.replace(
            "WorkDir=/srv/slurm-lab/jobs",
            "WorkDir=/x ReservationName= Tres=cpu=1,mem=1M,node=1 Account=pas1234 QOS=normal WcKey= Cluster=testclu \
             SubmitTime=2026-11-30T08:49:43 EligibleTime=2026-11-30T08:49:43 DerivedExitCode=0:0 ExitCode=0:0",
        );
        assert!(
            reason(&fake_tail).contains("can be read more than one way"),
            "{}",
            reason(&fake_tail)
        );
        // A wckey holding them (`--wckey='x ReservationName= … Account=…'`).
        let fake_wckey = line.replace(
            "WcKey=",
            "WcKey=x ReservationName= Tres=cpu=1,mem=1M,node=1 Account=pas1234 QOS=normal WcKey=y",
        );
        assert!(reason(&fake_wckey).contains("twice"), "{}", reason(&fake_wckey));
        // A name holding the fields between it and the directory: not read.
        let fake_middle = line.replace(
            "Name=ft-gpu",
            "Name=ft-gpu JobState=COMPLETED Partition=regular TimeLimit=5 StartTime=2026-11-30T08:49:46 \
             EndTime=2026-11-30T08:49:47 NodeList=c01 NodeCnt=1 ProcCnt=1 WorkDir=/x",
        );
        assert!(
            reason(&fake_middle).contains("can be read more than one way"),
            "{}",
            reason(&fake_middle)
        );
        // The same, in the directory.
        let in_directory = line.replace(
            "WorkDir=/srv/slurm-lab/jobs",
            "WorkDir=/x JobState=COMPLETED Partition=regular TimeLimit=5 StartTime=2026-11-30T08:49:46 \
             EndTime=2026-11-30T08:49:47 NodeList=c01 NodeCnt=1 ProcCnt=1 WorkDir=/y",
        );
        assert!(reason(&in_directory).contains("can be read more than one way"));
        // A field after the directory with a space in its value.
        let wckey = line.replace("WcKey=", "WcKey=x y");
        assert!(
            reason(&wckey).contains("can be read more than one way"),
            "{}",
            reason(&wckey)
        );
        // The job a line that cannot be read names: its JobId.
        let parser = FiletxtParser::new(&ReadOptions::default());
        assert_eq!(parser.job_key(&fake_middle).as_deref(), Some("?/18"));
    }

    #[test]
    fn what_is_not_charged() {
        let line = &fixture()[1];
        // Cancelled while pending: no CPUs, no nodes, no start.
        let pending = line
            .replace("JobState=COMPLETED", "JobState=CANCELLED")
            .replace("StartTime=2026-11-30T08:49:43", "StartTime=Unknown")
            .replace(
                "NodeList=c01 NodeCnt=1 ProcCnt=1",
                "NodeList=(null) NodeCnt=0 ProcCnt=0",
            );
        assert_eq!(
            read_line(&pending, &ReadOptions::default()),
            Ok(Item::Skip(Skip::NeverStarted))
        );
        // A requeued run: the job's new state with that run's times.
        let requeued = job(&line.replace("JobState=COMPLETED", "JobState=PENDING"));
        assert_eq!(requeued.state, "REQUEUED");
        assert_eq!(
            read_line(
                &line.replace("JobState=COMPLETED", "JobState=RUNNING"),
                &ReadOptions::default()
            ),
            Ok(Item::Skip(Skip::NotEnded))
        );
        // Damaged: a line of something else, a field missing, a ran job
        // without its end.
        let bad = |l: &str| match read_line(l, &ReadOptions::default()) {
            Err(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(bad("17|alice|…").contains("does not begin with JobId="));
        assert!(bad(&line.replace(" ProcCnt=1", "")).starts_with("no JobState= … Partition="));
        assert!(
            bad(&line.replace("EndTime=2026-11-30T08:49:45", "EndTime=Unknown")).contains("without `@start` or `@end`")
        );
        assert!(bad(&line.replace("JobState=COMPLETED", "JobState=EXPLODED")).contains("unknown job state"));
    }
}
