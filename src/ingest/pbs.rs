//! PBS, TORQUE and PBS Pro accounting logs (`server_priv/accounting/YYYYMMDD`):
//! `MM/DD/YYYY HH:MM:SS;TYPE;JOBID;key=value …`.
//!
//! Only E (job end) records are charged; Q, S, D, A, R … are skipped. What a
//! job held is what it reserved (SPEC D3): `Resource_List.nodes`
//! (`N:ppn=P[:gpus=G]`, `host:ppn=P+…`), or PBS Pro's `Resource_List.select`,
//! or `Resource_List.ncpus`/`ngpus`; memory from `mem` (total) and `pmem`
//! (per process); the node count from `Resource_List.nodect`. Times are epoch
//! seconds. The project comes from the `account` attribute (or those named
//! by `project_from`, first present wins, e.g. `account,group` for TORQUE
//! sites that charge by Unix group).

use std::collections::HashMap;

use chrono::DateTime;

use super::{Item, Parser, ReadOptions, Skip};
use crate::domain::posting::{JobInput, Stamp};
use crate::domain::request::parse_pbs;

pub struct PbsParser {
    options: ReadOptions,
    project_from: Vec<String>,
}

impl PbsParser {
    pub fn new(options: &ReadOptions) -> PbsParser {
        PbsParser {
            options: options.clone(),
            project_from: options.project_from.clone().unwrap_or_else(|| vec!["account".into()]),
        }
    }
}

/// `key=value` attributes, split on spaces outside double quotes; a word
/// without `=` continues the previous value (TORQUE does not quote names
/// with spaces). A quote that is never closed (`jobname=a"b`) is taken
/// literally.
fn attributes(text: &str) -> HashMap<String, String> {
    let split = |honour_quotes: bool| {
        let mut words: Vec<String> = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        for c in text.chars() {
            match c {
                '"' if honour_quotes => {
                    quoted = !quoted;
                    word.push(c);
                }
                c if c.is_whitespace() && !quoted => {
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            words.push(word);
        }
        (words, quoted)
    };
    let (words, unbalanced) = split(true);
    let words = if unbalanced { split(false).0 } else { words };
    let mut out: HashMap<String, String> = HashMap::new();
    let mut last: Option<String> = None;
    for w in words {
        match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
                out.insert(k.to_owned(), v.to_owned());
                last = Some(k.to_owned());
            }
            _ => {
                if let Some(value) = last.as_ref().and_then(|k| out.get_mut(k)) {
                    value.push(' ');
                    value.push_str(&w);
                }
            }
        }
    }
    out
}

fn epoch(name: &str, value: &str) -> Result<Stamp, String> {
    value
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .map(Stamp::At)
        .ok_or_else(|| format!("{name}={value:?} is not a time in epoch seconds"))
}

/// `161299[389].server` -> (`161299[].server`, 389).
fn array_id(id: &str) -> (String, Option<u32>) {
    if let Some(open) = id.find('[')
        && let Some(close) = id[open..].find(']').map(|c| c + open)
    {
        let (base, index) = (&id[..open], &id[open + 1..close]);
        if !base.is_empty()
            && base.chars().all(|c| c.is_ascii_digit())
            && !index.is_empty()
            && index.chars().all(|c| c.is_ascii_digit())
            && let Ok(i) = index.parse()
        {
            return (format!("{base}[]{}", &id[close + 1..]), Some(i));
        }
    }
    (id.to_owned(), None)
}

impl PbsParser {
    fn job(&self, kind: &str, id: &str, attrs: &HashMap<String, String>) -> Result<Item, String> {
        let start = attrs.get("start").map(String::as_str).unwrap_or("0");
        // TORQUE writes bare R records (a rerun was requested): no run to charge.
        if kind == "R" && !attrs.contains_key("start") {
            return Ok(Item::Skip(Skip::OtherRecord));
        }
        if start.trim() == "0" || start.trim().is_empty() {
            // It ran somewhere, yet has no start: a damaged record, not a job
            // that never started.
            if attrs.contains_key("exec_host") || attrs.contains_key("resources_used.walltime") {
                return Err("the record has no start= attribute, yet names where the job ran".into());
            }
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        let start = epoch("start", start)?;
        let end = epoch("end", attrs.get("end").ok_or("the E record has no end= attribute")?)?;
        let submit = match attrs.get("ctime").or(attrs.get("qtime")) {
            Some(v) => Some(epoch("ctime", v)?),
            None => None,
        };
        // PBS Pro keeps an old-style `nodes=` beside the `select` it made of
        // it: the select is what the job reserved.
        let has_select = attrs.contains_key("Resource_List.select");
        let resources: Vec<String> = ["nodes", "select", "ncpus", "ngpus", "mem", "pmem", "place"]
            .iter()
            .filter(|k| !(has_select && **k == "nodes"))
            .filter_map(|k| attrs.get(&format!("Resource_List.{k}")).map(|v| format!("{k}={v}")))
            .collect();
        let mut request = parse_pbs(&resources.join(",")).map_err(|e| format!("Resource_List: {}", e.reason))?;
        let exclusive = request.exclusive;
        request.exclusive = false;
        let shape = request.shape(1).map_err(|e| format!("Resource_List: {}", e.reason))?;
        let nodes = match attrs.get("Resource_List.nodect") {
            Some(v) => v
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("Resource_List.nodect={v:?} is not a number of nodes"))?,
            None => shape.nodes,
        };
        let project = self
            .project_from
            .iter()
            .filter_map(|k| attrs.get(k))
            .map(|v| v.trim())
            .find(|v| !v.is_empty())
            .map(str::to_owned)
            .or_else(|| self.options.default_project.clone());
        let (job_id, array_index) = array_id(id.trim());
        let text = |k: &str| attrs.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        Ok(Item::Job(Box::new(JobInput {
            cluster: self.options.cluster.clone(),
            job_id,
            array_index,
            project,
            user: text("user").unwrap_or_default(),
            job_name: text("jobname").unwrap_or_default(),
            queue: text("queue"),
            node_type: None,
            nodes,
            cores: shape.cores,
            memory: shape.memory,
            gpus: shape.gpus,
            exclusive,
            submit,
            start,
            end,
            state: kind.to_owned(),
            exit_code: text("Exit_status"),
        })))
    }
}

impl Parser for PbsParser {
    fn parse(&mut self, line: &str) -> Option<Item> {
        if line.trim().is_empty() {
            return None;
        }
        let parts: Vec<&str> = line.splitn(4, ';').collect();
        if parts.len() < 3 {
            return Some(Item::Bad(
                "not a PBS accounting record (expected DATE TIME;TYPE;JOBID;attributes)".into(),
            ));
        }
        let kind = parts[1].trim();
        if kind.len() != 1 || !kind.chars().all(|c| c.is_ascii_uppercase()) {
            return Some(Item::Bad(format!("{kind:?} is not a PBS record type")));
        }
        // E: the job ended. R: a run ended because the job is rerun (it held
        // its resources until then, like a requeued Slurm run).
        if kind != "E" && kind != "R" {
            return Some(Item::Skip(Skip::OtherRecord));
        }
        if parts[2].trim().is_empty() {
            return Some(Item::Bad("the record has no job id".into()));
        }
        let attrs = attributes(parts.get(3).copied().unwrap_or(""));
        Some(self.job(kind, parts[2], &attrs).unwrap_or_else(Item::Bad))
    }

    fn options(&self) -> ReadOptions {
        self.options.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::units::{Bytes, GIB, MIB};

    fn parse(line: &str, options: &ReadOptions) -> Item {
        PbsParser::new(options).parse(line).unwrap()
    }

    fn job(item: Item) -> JobInput {
        match item {
            Item::Job(j) => *j,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn torque_and_pbs_pro_end_records() {
        let j = job(parse(
            "11/09/2014 23:59:51;E;6464684.anonhost;user=anonuser group=anongroup jobname=anonjob account=anonaccount queue=default ctime=1415579756 qtime=1415579756 etime=1415579756 start=1415589841 exec_host=n404/2+n404/3 Resource_List.mem=1993mb Resource_List.ncpus=1 Resource_List.nodect=1 Resource_List.nodes=1:ppn=4:avx end=1415599191 Exit_status=1",
            &ReadOptions::default(),
        ));
        assert_eq!(j.project.as_deref(), Some("anonaccount"));
        assert_eq!((j.nodes, j.cores, j.memory, j.gpus), (1, 4, Some(Bytes(1993 * MIB)), 0));
        assert_eq!(j.start, Stamp::At(DateTime::from_timestamp(1415589841, 0).unwrap()));
        assert_eq!(
            j.submit,
            Some(Stamp::At(DateTime::from_timestamp(1415579756, 0).unwrap()))
        );
        assert_eq!(j.exit_code.as_deref(), Some("1"));

        let j = job(parse(
            r#"04/16/2025 10:19:48;E;4413086.casper-pbs;user=vanderwb group=csgteam account="SCSG0001" project=_pbs_project_default jobname=vncs-default queue=vis ctime=1744817013 start=1744817058 Resource_List.mem=10gb Resource_List.ncpus=1 Resource_List.ngpus=1 Resource_List.nodect=1 Resource_List.place=scatter Resource_List.select=1:ncpus=1:ngpus=1:os=opensuse15:ompthreads=1 end=1744820388 Exit_status=271"#,
            &ReadOptions::default(),
        ));
        assert_eq!(j.project.as_deref(), Some("SCSG0001"));
        assert_eq!((j.nodes, j.cores, j.memory, j.gpus), (1, 1, Some(Bytes(10 * GIB)), 1));
    }

    #[test]
    fn arrays_exclusive_placement_and_group_projects() {
        let j = job(parse(
            "01/12/2014 23:57:07;E;161299[389].mymaster.somecluster;user=vsc40909 group=vsc40909 queue=short ctime=1389546423 start=1389567229 Resource_List.nodes=1:ppn=16 end=1389567427 Exit_status=0",
            &ReadOptions {
                project_from: Some(vec!["account".into(), "group".into()]),
                ..Default::default()
            },
        ));
        assert_eq!(
            (j.job_id.as_str(), j.array_index),
            ("161299[].mymaster.somecluster", Some(389))
        );
        assert_eq!(j.project.as_deref(), Some("vsc40909"));
        let j = job(parse(
            "01/26/2016 00:00:37;E;2994.pbs;user=anonuser group=anongroup queue=workq ctime=1453756297 start=1453766281 Resource_List.ncpus=65 Resource_List.nodect=5 Resource_List.place=scatter:excl Resource_List.select=5:ncpus=13 end=1453766437 Exit_status=0",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.exclusive, j.project), (5, 65, true, None));
        // PBS Pro keeps `nodes=` beside the select it made of it.
        let j = job(parse(
            "x;E;7.pbs;queue=q start=100 end=200 Resource_List.nodes=2:ppn=4 Resource_List.select=2:ncpus=4:mpiprocs=4 Resource_List.nodect=2",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores), (2, 8));
        assert_eq!(array_id("3073070.[hostname_1]"), ("3073070.[hostname_1]".into(), None));
    }

    #[test]
    fn other_records_and_broken_ones() {
        assert_eq!(
            parse(
                "04/05/2017 13:06:53;Q;80.mymaster;queue=default",
                &ReadOptions::default()
            ),
            Item::Skip(Skip::OtherRecord)
        );
        assert_eq!(
            parse(
                "03/27/2015 10:00:00;E;21414868.b0;user=a queue=atlas ctime=1426952581 start=1426952875 Resource_List.nodes=1pn=4 end=1426965019",
                &ReadOptions::default()
            ),
            Item::Bad("Resource_List: \"1pn=4\" must start with a node count or a host name".into())
        );
        assert_eq!(
            parse(
                "04/27/2020 06:00:00;E;10711;user=a queue=black ctime=1587912647 start=1588046353 Resource_List.nodect=1:ppn=24:gpu=4 end=1588146353",
                &ReadOptions::default()
            ),
            Item::Bad("Resource_List.nodect=\"1:ppn=24:gpu=4\" is not a number of nodes".into())
        );
        assert_eq!(
            parse("garbage", &ReadOptions::default()),
            Item::Bad("not a PBS accounting record (expected DATE TIME;TYPE;JOBID;attributes)".into())
        );
        assert_eq!(
            parse("x;E;1;start=5 end=soon", &ReadOptions::default()),
            Item::Bad("end=\"soon\" is not a time in epoch seconds".into())
        );
        assert_eq!(
            parse("x;E;1;user=a Exit_status=-3", &ReadOptions::default()),
            Item::Skip(Skip::NeverStarted)
        );
    }

    #[test]
    fn unquoted_names_with_spaces_stay_in_their_attribute() {
        let a = attributes("jobname=my big job queue=q account=\"A B\"");
        assert_eq!(a["jobname"], "my big job");
        assert_eq!(a["account"], "A B");
        assert_eq!(a["queue"], "q");
        let a = attributes("jobname=a\"b queue=q start=5");
        assert_eq!(
            (a["jobname"].as_str(), a["queue"].as_str(), a["start"].as_str()),
            ("a\"b", "q", "5")
        );
    }
}
