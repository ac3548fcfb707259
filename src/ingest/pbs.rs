//! PBS, TORQUE and PBS Pro accounting logs (`server_priv/accounting/YYYYMMDD`):
//! `MM/DD/YYYY HH:MM:SS;TYPE;JOBID;key=value …`.
//!
//! Only E (job end) records, and R records that carry a run, are charged;
//! Q, S, D, A … are skipped. What a job held is what it reserved (docs/rules.md D3),
//! read in a documented order ([`size`], docs/pbs.md): Cray `mppwidth`;
//! else the request (PBS Pro `select`, else `Resource_List.nodes` — also
//! TORQUE's doubled `nodes=nodes=…` —, else `ncpus`/`ngpus`; nodes from
//! `nodect`, or the hosts it ran on, [`ReadOptions::pbs_hosts`] for a
//! `select`, [`ReadOptions::torque_hosts`] for `nodes=`; a `select`'s cores,
//! memory and GPUs at least `Resource_List`'s totals,
//! [`ReadOptions::pbs_totals`]); an
//! unreadable node spec, or a request without a size, falls back to where
//! the job ran (`exec_vnode`, `exec_host`); a record that says nothing about
//! the size is rejected. Memory from `mem` (total) and `pmem` (per process).
//! Times are epoch seconds. The project comes from the `account` attribute
//! (or those named by `project_from`, first present wins, e.g.
//! `account,group` for TORQUE sites that charge by Unix group).

use std::collections::HashMap;

use chrono::DateTime;

use super::{Item, KeptOptions, Parser, ReadOptions, Skip};
use crate::domain::posting::{JobInput, Stamp};
use crate::domain::request::{GpuSpec, MemorySpec, parse_nodes_spec, parse_pbs};
use crate::domain::units::{Bytes, KIB};

pub struct PbsParser {
    options: KeptOptions,
    project_from: Vec<String>,
}

impl PbsParser {
    pub fn new(options: &ReadOptions) -> PbsParser {
        PbsParser {
            options: KeptOptions::new(options.clone()),
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

/// The memory a TORQUE 6 `-L` request asks for
/// (`Resource_Request_2.0=-L tasks=N[:lprocs=…][:memory=M]… [-L tasks=…]`):
/// `memory` is per task (TORQUE's `req::get_memory_for_host`: memory × its
/// tasks), in kilobytes without a unit; summed over the requests. Read from
/// the attribute text, since a request of several `-L` is split on its spaces.
fn request_memory(text: &str) -> Result<Option<Bytes>, String> {
    const KEY: &str = "Resource_Request_2.0=";
    let Some(at) = text.find(KEY) else {
        return Ok(None);
    };
    let mut total: Option<u64> = None;
    for word in text[at + KEY.len()..].split_whitespace() {
        if word == "-L" {
            continue;
        }
        // The next attribute ends the requests.
        let Some(request) = word.strip_prefix("tasks=") else {
            break;
        };
        let bad = |why: String| format!("Resource_Request_2.0 -L tasks={request}: {why}");
        let mut fields = request.split(':');
        let tasks: u64 = fields
            .next()
            .unwrap_or_default()
            .parse()
            .map_err(|_| bad("the task count is not a whole number".into()))?;
        if let Some(memory) = fields.filter_map(|f| f.strip_prefix("memory=")).next_back() {
            let per_task = Bytes::parse(memory, KIB).map_err(|e| bad(format!("memory: {e}")))?;
            let all = per_task
                .0
                .checked_mul(tasks)
                .and_then(|m| m.checked_add(total.unwrap_or(0)))
                .ok_or_else(|| bad("too much memory".into()))?;
            total = Some(all);
        }
    }
    Ok(total.map(Bytes))
}

/// A job array's own record, not a subjob's: `123[].server` (no index), or
/// one that lists the array's indices (`array_indices=1-2`) without being
/// one of them. PBS Pro writes its E record when the whole array is done,
/// with the subjobs' request and the span of their runs; the subjobs
/// (`123[4].server`) each have their own.
fn array_parent(id: &str, attrs: &HashMap<String, String>) -> bool {
    let empty_index = id.find("[]").is_some_and(|at| {
        let base = &id[..at];
        !base.is_empty() && base.chars().all(|c| c.is_ascii_digit())
    });
    empty_index || (attrs.contains_key("array_indices") && array_id(id).1.is_none())
}

/// What a job held, as far as its record says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Size {
    /// `None`: cores only (Cray `mppwidth` without `mppnppn`).
    nodes: Option<u32>,
    cores: u32,
    memory: Option<Bytes>,
    /// `None`: the record gives no GPU count.
    gpus: Option<u32>,
    exclusive: bool,
}

fn resource<'a>(attrs: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    attrs
        .get(&format!("Resource_List.{key}"))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// `Resource_List.nodes` as written; some TORQUE versions write the
/// attribute's name into its value (`nodes=nodes=1:ppn=1`).
fn node_spec(attrs: &HashMap<String, String>) -> Option<&str> {
    resource(attrs, "nodes").map(|v| v.strip_prefix("nodes=").unwrap_or(v).trim())
}

/// What a job held, in this order (docs/pbs.md):
/// 1. Cray ALPS `mppwidth` (× `mppdepth`) cores on ⌈`mppwidth` ÷ `mppnppn`⌉
///    nodes: on a Cray the `ncpus`/`select`/`nodect` beside it describe
///    the login (MOM) node, not the job.
/// 2. The request: PBS Pro `select`, else `nodes` (also doubled), else
///    `ncpus`/`ngpus`; the node count from `nodect` (PBS Pro: its chunks),
///    or the distinct hosts the job ran on when fewer
///    ([`ReadOptions::pbs_hosts`], [`ReadOptions::torque_hosts`]); a
///    `select`'s cores, memory and GPUs never below `Resource_List`'s totals
///    ([`ReadOptions::pbs_totals`]).
/// 3. A `nodes` spec that cannot be read falls back to where the job ran
///    (`exec_vnode`, `exec_host`), then to `ncpus`.
/// 4. No size in the request at all: where the job ran.
/// 5. Nothing: rejected; a job's size is never assumed.
///
/// Memory comes from `mem`/`pmem` (and Cray `mppmem` per PE) whichever
/// way the cores were found.
fn size(attrs: &HashMap<String, String>, options: &ReadOptions) -> Result<Size, String> {
    if let Some(width) = resource(attrs, "mppwidth") {
        return cray_size(attrs, width);
    }
    let select = resource(attrs, "select");
    let spec = node_spec(attrs).filter(|_| select.is_none());
    let ncpus = resource(attrs, "ncpus");
    if spec.is_none() && select.is_none() && ncpus.is_none() {
        return match ran_on(attrs)? {
            Some(ran) => from_placement(attrs, ran),
            None => Err(
                "the record says nothing about the job's size (no Resource_List.nodes, select, ncpus or mppwidth, no exec_host or exec_vnode); it is not charged as 1 core"
                    .into(),
            ),
        };
    }
    if let Some(spec) = spec
        && let Err(e) = parse_nodes_spec(spec, spec)
    {
        // An unreadable node spec: what the job held, from where it ran.
        if let Some(ran) = ran_on(attrs)? {
            return from_placement(attrs, ran);
        }
        if ncpus.is_none() {
            return Err(format!(
                "Resource_List.nodes: {} (and no ncpus, exec_host or exec_vnode says what the job held)",
                e.reason
            ));
        }
        return from_request(attrs, None, Reading::default());
    }
    let by_select = spec.is_none() && select.is_some();
    let reading = Reading {
        hosts: (options.pbs_hosts && by_select) || (options.torque_hosts && spec.is_some()),
        whole_hosts: spec.is_some(),
        totals: options.pbs_totals && by_select,
    };
    from_request(attrs, spec, reading)
}

/// How [`from_request`] reads a request beyond what it says.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    /// The node count is the distinct hosts the job ran on when the record
    /// names them and they are fewer ([`ReadOptions::pbs_hosts`] for a
    /// `select`, [`ReadOptions::torque_hosts`] for `nodes=`).
    hosts: bool,
    /// ... and only when those hosts hold every slot the request asks for
    /// (TORQUE: an `exec_host` cut at the record's 4,095 bytes, or a job
    /// given fewer slots, keeps `nodect`).
    whole_hosts: bool,
    /// A `select`'s cores, memory and GPUs are at least
    /// `Resource_List.ncpus`, `mem` and `ngpus` ([`ReadOptions::pbs_totals`]).
    totals: bool,
}

/// The request's `key=value` list for [`parse_pbs`], with `nodes` as given,
/// read as `reading` says.
fn from_request(attrs: &HashMap<String, String>, spec: Option<&str>, reading: Reading) -> Result<Size, String> {
    let mut resources: Vec<String> = spec.map(|s| format!("nodes={s}")).into_iter().collect();
    for k in ["select", "ncpus", "ngpus", "mem", "pmem", "place"] {
        if k == "select" && spec.is_some() {
            continue;
        }
        if let Some(v) = resource(attrs, k) {
            resources.push(format!("{k}={v}"));
        }
    }
    let mut request = parse_pbs(&resources.join(",")).map_err(|e| format!("Resource_List: {}", e.reason))?;
    let exclusive = request.exclusive;
    request.exclusive = false;
    // The slots the request asks for, as written (before the totals).
    let asked = request.cores;
    if reading.totals {
        // PBS Pro sums every chunk's resources, those `default_chunk` gave
        // it included, into the job's totals; `select` keeps only what the
        // user wrote. (Each was read above: a malformed one is an error.)
        let total = |k: &str| resource(attrs, k).and_then(|v| v.parse::<u32>().ok());
        if let Some(n) = total("ncpus") {
            request.cores = request.cores.max(n);
        }
        if let (Some(g), GpuSpec::Total(t)) = (total("ngpus"), request.gpus) {
            request.gpus = GpuSpec::Total(t.max(g));
        }
        // Memory: the largest of what the chunks write, the total and
        // `pmem` per core of the cores above (as `parse_pbs` takes the
        // larger of `mem` and `pmem` × cores for the cores written).
        let bytes = |k: &str| resource(attrs, k).and_then(|v| Bytes::parse(v, 1).ok());
        let per_core = bytes("pmem").and_then(|p| p.0.checked_mul(u64::from(request.cores)));
        let written = match request.memory {
            Some(MemorySpec::Total(b)) => Some(b.0),
            _ => None,
        };
        if let Some(most) = [written, bytes("mem").map(|m| m.0), per_core]
            .into_iter()
            .flatten()
            .max()
            && (bytes("mem").is_some() || written.is_some())
        {
            request.memory = Some(MemorySpec::Total(Bytes(most)));
        }
    }
    let shape = request.shape(1).map_err(|e| format!("Resource_List: {}", e.reason))?;
    let nodes = match attrs.get("Resource_List.nodect") {
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("Resource_List.nodect={v:?} is not a number of nodes"))?,
        None => shape.nodes,
    };
    // PBS Pro's nodect counts the select's chunks, TORQUE's the counts
    // written in `nodes=`; chunks packed, or a node spec matched to fewer
    // hosts with more slots, share a host. Never more than that: a site's
    // vnode names need not name hosts (`gpu01-s0`, `gpu01-s1`), and packing
    // only lowers the count.
    let nodes = match ran_on(attrs) {
        Ok(Some(ran)) if reading.hosts && ran.hosts > 0 && (!reading.whole_hosts || ran.cores >= asked) => {
            ran.hosts.min(nodes)
        }
        _ => nodes,
    };
    Ok(Size {
        nodes: Some(nodes),
        cores: shape.cores,
        memory: shape.memory,
        // A PBS request names its GPUs (`gpus=`, `ngpus`): none named is
        // none, unless the record names GPUs where this reader does not
        // read them: then it gives no GPU count (docs/rules.md).
        gpus: if shape.gpus == 0 && names_gpus_elsewhere(attrs) {
            None
        } else {
            Some(shape.gpus)
        },
        exclusive,
    })
}

/// Whether a record whose request names no GPUs names some elsewhere, as
/// some TORQUE sites log them (Open XDMoD reads them so):
/// `Resource_List.gpu=2` or `gpus=2`, or `gpus=`/`gpu=` in
/// `Resource_List.neednodes` or `nodect`. xdmod's job 10712 (`nodes=1:ppn=28`,
/// `gpu=2`, `neednodes=1:ppn=28:gpus=1`, on a GPU queue) was charged as
/// holding none; such a record gives no GPU count, which a GPU node type
/// refuses to charge and any other reads as none, as before.
fn names_gpus_elsewhere(attrs: &HashMap<String, String>) -> bool {
    let some = |v: &str| v.trim().parse::<u32>().map_or(true, |n| n > 0);
    let in_spec = |v: &str| {
        v.split([':', '+', ','])
            .filter_map(|part| part.split_once('='))
            .any(|(k, n)| matches!(k.trim(), "gpus" | "gpu") && some(n))
    };
    ["Resource_List.gpu", "Resource_List.gpus"]
        .iter()
        .any(|k| attrs.get(*k).is_some_and(|v| some(v)))
        || ["Resource_List.neednodes", "Resource_List.nodect"]
            .iter()
            .any(|k| attrs.get(*k).is_some_and(|v| in_spec(v)))
}

/// Cores and memory for `cores` from the record's `mem`/`pmem` (and `extra`
/// memory attributes), through the same rules as a request.
fn with_memory(attrs: &HashMap<String, String>, cores: u32, extra_mem: Option<Bytes>) -> Result<Option<Bytes>, String> {
    let mut resources = vec![format!("ncpus={cores}")];
    match (resource(attrs, "mem"), extra_mem) {
        (Some(m), _) => resources.push(format!("mem={m}")),
        (None, Some(b)) => resources.push(format!("mem={}", b.0)),
        (None, None) => {}
    }
    if let Some(p) = resource(attrs, "pmem") {
        resources.push(format!("pmem={p}"));
    }
    let request = parse_pbs(&resources.join(",")).map_err(|e| format!("Resource_List: {}", e.reason))?;
    Ok(request
        .shape(1)
        .map_err(|e| format!("Resource_List: {}", e.reason))?
        .memory)
}

fn ngpus(attrs: &HashMap<String, String>) -> Result<Option<u32>, String> {
    resource(attrs, "ngpus")
        .map(|v| {
            v.parse::<u32>()
                .map_err(|_| format!("Resource_List.ngpus={v:?} is not a number of GPUs"))
        })
        .transpose()
}

/// Cray ALPS: `mppwidth` processing elements of `mppdepth` cores each,
/// `mppnppn` of them per node; `mppmem` is memory per PE.
fn cray_size(attrs: &HashMap<String, String>, width: &str) -> Result<Size, String> {
    let number = |key: &str, v: &str| {
        v.parse::<u32>()
            .map_err(|_| format!("Resource_List.{key}={v:?} is not a whole number"))
    };
    let width = number("mppwidth", width)?;
    if width == 0 {
        return Err("Resource_List.mppwidth=0 holds no cores".into());
    }
    let depth = match resource(attrs, "mppdepth") {
        Some(d) => number("mppdepth", d)?.max(1),
        None => 1,
    };
    let per_node = resource(attrs, "mppnppn").map(|v| number("mppnppn", v)).transpose()?;
    let cores = width
        .checked_mul(depth)
        .ok_or("Resource_List.mppwidth × mppdepth is too many cores")?;
    let nodes = per_node.filter(|&n| n > 0).map(|n| width.div_ceil(n));
    let pe_memory = match resource(attrs, "mppmem") {
        Some(m) => {
            let b = Bytes::parse(m, 1).map_err(|e| format!("Resource_List.mppmem: {e}"))?;
            Some(Bytes(
                b.0.checked_mul(u64::from(width))
                    .ok_or("Resource_List.mppmem × mppwidth is too much memory")?,
            ))
        }
        None => None,
    };
    Ok(Size {
        nodes,
        cores,
        memory: with_memory(attrs, cores, pe_memory)?,
        gpus: ngpus(attrs)?,
        exclusive: false,
    })
}

/// Where a job ran: its slots (cores), hosts and, from `exec_vnode`, GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placement {
    cores: u32,
    hosts: u32,
    gpus: Option<u32>,
}

/// The placement from `exec_vnode` (PBS Pro: `(c1:ncpus=13:ngpus=1)+…`),
/// else `exec_host` (`n1/0+n1/1`, `n1/0-3,5`, `c1/0*13`); `None` when the
/// record names neither.
fn ran_on(attrs: &HashMap<String, String>) -> Result<Option<Placement>, String> {
    if let Some(v) = attrs.get("exec_vnode").map(|v| v.trim()).filter(|v| !v.is_empty()) {
        return exec_vnode(v).map(Some);
    }
    if let Some(h) = attrs.get("exec_host").map(|v| v.trim()).filter(|v| !v.is_empty()) {
        return exec_host(h).map(Some);
    }
    Ok(None)
}

fn from_placement(attrs: &HashMap<String, String>, ran: Placement) -> Result<Size, String> {
    Ok(Size {
        nodes: Some(ran.hosts),
        cores: ran.cores,
        memory: with_memory(attrs, ran.cores, None)?,
        gpus: match ngpus(attrs)? {
            Some(g) => Some(g),
            None => ran.gpus,
        },
        exclusive: false,
    })
}

fn exec_host(value: &str) -> Result<Placement, String> {
    let bad = |why: &str| format!("exec_host={value:?}: {why}");
    let mut hosts = std::collections::HashSet::new();
    let mut cores: u32 = 0;
    for part in value.split('+') {
        let (host, slots) = part.split_once('/').ok_or_else(|| bad("expected host/slot parts"))?;
        if host.trim().is_empty() {
            return Err(bad("a part names no host"));
        }
        hosts.insert(host.trim());
        for range in slots.split(',') {
            let n =
                slot_count(range.trim()).ok_or_else(|| bad(&format!("{range:?} is not a slot, range or N*count")))?;
            cores = cores.checked_add(n).ok_or_else(|| bad("too many slots"))?;
        }
    }
    let hosts = u32::try_from(hosts.len()).map_err(|_| bad("too many hosts"))?;
    if cores == 0 {
        return Err(bad("no slots"));
    }
    Ok(Placement {
        cores,
        hosts,
        gpus: None,
    })
}

/// `5` (one slot), `0-15` (a range), `0*13` (PBS Pro: 13 slots from 0).
fn slot_count(s: &str) -> Option<u32> {
    let num = |t: &str| -> Option<u32> {
        if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    if let Some((_, n)) = s.split_once('*') {
        return num(n);
    }
    if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (num(a)?, num(b)?);
        return if b >= a { Some(b - a + 1) } else { None };
    }
    num(s).map(|_| 1)
}

fn exec_vnode(value: &str) -> Result<Placement, String> {
    let bad = |why: String| format!("exec_vnode={value:?}: {why}");
    let mut hosts = std::collections::HashSet::new();
    let (mut cores, mut gpus): (u32, Option<u32>) = (0, None);
    for chunk in value.split(")+(") {
        let chunk = chunk.trim().trim_start_matches('(').trim_end_matches(')');
        for vnode in chunk.split('+') {
            let mut fields = vnode.split(':');
            let name = fields.next().unwrap_or_default().trim();
            if name.is_empty() {
                return Err(bad("a chunk names no vnode".into()));
            }
            // PBS Pro names a host's vnodes `host[0]`, `host[1]`.
            hosts.insert(name.split_once('[').map_or(name, |(h, _)| h));
            for f in fields {
                let Some((k, v)) = f.split_once('=') else { continue };
                let n = || {
                    v.trim()
                        .parse::<u32>()
                        .map_err(|_| bad(format!("{k}={v:?} is not a whole number")))
                };
                match k.trim() {
                    "ncpus" => cores = cores.checked_add(n()?).ok_or_else(|| bad("too many cores".into()))?,
                    "ngpus" => {
                        gpus = Some(
                            gpus.unwrap_or(0)
                                .checked_add(n()?)
                                .ok_or_else(|| bad("too many GPUs".into()))?,
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    if cores == 0 {
        return Err(bad("no ncpus".into()));
    }
    let hosts = u32::try_from(hosts.len()).map_err(|_| bad("too many hosts".into()))?;
    Ok(Placement { cores, hosts, gpus })
}

impl PbsParser {
    fn job(&self, kind: &str, id: &str, attrs: &HashMap<String, String>) -> Result<Item, String> {
        if self.options.pbs_array_parents && array_parent(id.trim(), attrs) {
            return Ok(Item::Skip(Skip::ArrayParent));
        }
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
            // An end record always says how the job ended: one with neither
            // its end nor its exit status was cut short (a line of a log
            // its server crashed in), not a job that never started.
            if !attrs.contains_key("end") && !attrs.contains_key("Exit_status") {
                return Err(
                    "the record has no start=, end= or Exit_status: it was cut short, not a job that never started"
                        .into(),
                );
            }
            return Ok(Item::Skip(Skip::NeverStarted));
        }
        let start = epoch("start", start)?;
        let end = epoch("end", attrs.get("end").ok_or("the E record has no end= attribute")?)?;
        let submit = match attrs.get("ctime").or(attrs.get("qtime")) {
            Some(v) => Some(epoch("ctime", v)?),
            None => None,
        };
        let size = size(attrs, &self.options)?;
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
            // Not read: a PBS record's suspension is not taken off (docs/rules.md R1).
            suspension: crate::domain::posting::Suspension::Unsaid,
            cluster: self.options.cluster.clone(),
            job_id,
            array_index,
            project,
            user: text("user").unwrap_or_default(),
            job_name: text("jobname").unwrap_or_default(),
            queue: text("queue"),
            node_type: None,
            nodes: size.nodes,
            cores: size.cores,
            memory: size.memory,
            gpus: size.gpus,
            exclusive: size.exclusive,
            submit,
            start,
            end,
            state: kind.to_owned(),
            exit_code: text("Exit_status"),
        })))
    }
}

impl Parser for PbsParser {
    fn cut_skip(&self, line: &str) -> Option<Skip> {
        // The record type is whole once a `;` follows it: every type but E
        // and R is never charged. (An R or E record cut short is not
        // skipped, whatever it lacks: its end was cut off.)
        let parts: Vec<&str> = line.splitn(3, ';').collect();
        let kind = parts.get(1).filter(|_| parts.len() == 3)?.trim();
        let other = |c: char| (c.is_ascii_uppercase() && c != 'E' && c != 'R') || "sucearzkp".contains(c);
        (kind.len() == 1 && kind.chars().all(other)).then_some(Skip::OtherRecord)
    }

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
        // Upper case: every type of PBS and TORQUE. Lower case: PBS Pro's
        // (OpenPBS `acct.h`): s started with its resources pruned, u c e a
        // phased job's update, next and last records (node ramp-down), a
        // an attribute altered (`qalter`), z r suspended and resumed, k a
        // reservation deleted by its owner, p provisioning ended.
        let known = |c: char| c.is_ascii_uppercase() || "sucearzkp".contains(c);
        if kind.len() != 1 || !kind.chars().all(known) {
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
        let text = parts.get(3).copied().unwrap_or("");
        let mut attrs = attributes(text);
        if self.options.torque_requests && !attrs.contains_key("Resource_List.mem") {
            match request_memory(text) {
                Ok(Some(m)) => {
                    attrs.insert("Resource_List.mem".into(), format!("{}b", m.0));
                }
                Ok(None) => {}
                Err(e) => return Some(Item::Bad(e)),
            }
        }
        Some(self.job(kind, parts[2], &attrs).unwrap_or_else(Item::Bad))
    }

    fn options(&self) -> KeptOptions {
        self.options.clone()
    }

    fn job_key(&self, line: &str) -> Option<String> {
        let id = line.split(';').nth(2)?.trim();
        if id.is_empty() {
            return None;
        }
        let (job_id, index) = array_id(id);
        let cluster = self.options.cluster.as_deref().unwrap_or("?");
        Some(match index {
            Some(i) => format!("{cluster}/{job_id}_{i}"),
            None => format!("{cluster}/{job_id}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::kinds::SourceFormat;
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

    /// The first record of a fixture, its `#` header left out.
    fn first_record(fixture: &str) -> &str {
        fixture.lines().find(|l| !l.starts_with('#')).unwrap()
    }

    /// PBS Pro fills a chunk's missing resources from `default_chunk` and
    /// sums every chunk's into `Resource_List`: NCAR's real
    /// `select=240:mpiprocs=36` held 8,640 cores (`Resource_List.ncpus`),
    /// read as 240 (one a chunk) before 2026-12-07. (Its exec_host names two
    /// hosts only; with all 240 it was charged as 240 whole nodes either
    /// way. A job on one node, or packed, was charged one core a chunk.)
    #[test]
    fn a_pbs_pro_select_holds_at_least_its_totals() {
        // tracejob prints the record without its type and id.
        let traced = first_record(include_str!(
            "../../tests/fixtures/accounting/ncar_hpc_node_chaser_select_defaults.log"
        ));
        let (_, attrs) = traced.split_once("  A    ").unwrap();
        let line = format!("02/09/2017 14:27:50;E;1.cheyenne;{attrs}");
        let now = ReadOptions::default().now(SourceFormat::Pbs);
        let j = job(parse(&line, &now));
        // On the two hosts its exec_vnode names, whole (exclhost).
        assert_eq!((j.nodes, j.cores, j.exclusive, j.gpus), (Some(2), 8640, true, Some(0)));
        let before = job(parse(&line, &now.before_0056()));
        assert_eq!((before.nodes, before.cores), (Some(2), 240));
        // The same on one node of 36 cores (a variant of the record):
        // 36 cores, not 1.
        let one = line
            .replace("exec_host=r10i1n26/0*36+r10i1n31/0*36", "exec_host=r10i1n26/0*36")
            .replace(
                "exec_vnode=(r10i1n26:ncpus=36)+(r10i1n31:ncpus=36)",
                "exec_vnode=(r10i1n26:ncpus=36)",
            )
            .replace(
                "Resource_List.mpiprocs=8640 Resource_List.ncpus=8640 Resource_List.nodect=240",
                "Resource_List.mpiprocs=36 Resource_List.ncpus=36 Resource_List.nodect=1",
            )
            .replace("select=240:mpiprocs=36", "select=1:mpiprocs=36");
        assert_eq!(job(parse(&one, &now)).cores, 36);
        assert_eq!(job(parse(&one, &now.before_0056())).cores, 1);
        // Memory per process counts for the cores held: 4 chunks of 8
        // (32 cores) at 1 GB a process is 32 GB, whatever `mem` says.
        let pmem = one.replace("select=1:mpiprocs=36", "select=4:mpiprocs=8").replace(
            "Resource_List.ncpus=36",
            "Resource_List.ncpus=32 Resource_List.pmem=1gb Resource_List.mem=2gb",
        );
        assert_eq!(job(parse(&pmem, &now)).memory, Some(Bytes(32 * GIB)));
        assert_eq!(job(parse(&pmem, &now.before_0056())).memory, Some(Bytes(4 * GIB)));

        // Memory and GPUs likewise (NCAR Casper's real record, its select
        // written without them): Resource_List.mem=10gb, ngpus=1.
        let casper = r#"04/16/2025 10:19:48;E;4413086.casper-pbs;user=vanderwb group=csgteam account="SCSG0001" project=_pbs_project_default jobname=vncs-default queue=vis ctime=1744817013 start=1744817058 Resource_List.mem=10gb Resource_List.ncpus=1 Resource_List.ngpus=1 Resource_List.nodect=1 Resource_List.place=scatter Resource_List.select=1:ncpus=1:ngpus=1:os=opensuse15:ompthreads=1 end=1744820388 Exit_status=271"#;
        let unwritten = casper.replace("select=1:ncpus=1:ngpus=1:", "select=1:ncpus=1:mem=2gb:");
        let size = |line: &str, options: &ReadOptions| {
            let j = job(parse(line, options));
            (j.cores, j.memory, j.gpus)
        };
        assert_eq!(size(casper, &now), (1, Some(Bytes(10 * GIB)), Some(1)));
        assert_eq!(size(&unwritten, &now), (1, Some(Bytes(10 * GIB)), Some(1)));
        assert_eq!(size(&unwritten, &now.before_0056()), (1, Some(Bytes(2 * GIB)), Some(0)));
        // Totals below what the select writes never lower it.
        let less = casper.replace("Resource_List.ncpus=1 ", "Resource_List.ncpus=0 ");
        assert_eq!(size(&less, &now), (1, Some(Bytes(10 * GIB)), Some(1)));
    }

    /// TORQUE with Maui or Moab matches `nodes=N:ppn=P` to N × P slots, at
    /// least P a host: FZK's real job 710078 asked for
    /// `nodes=14:ppn=8+16:ppn=1` (`nodect` 30) and ran on 17 hosts. Charged
    /// 30 nodes before 2026-12-07.
    #[test]
    fn a_torque_node_spec_is_on_the_hosts_it_ran_on() {
        let real = first_record(include_str!(
            "../../tests/fixtures/accounting/safe_fzk_torque_packed_nodes.log"
        ));
        let now = ReadOptions::default().now(SourceFormat::Pbs);
        let size = |line: &str, options: &ReadOptions| {
            let j = job(parse(line, options));
            (j.nodes, j.cores)
        };
        assert_eq!(size(real, &now), (Some(17), 128));
        assert_eq!(size(real, &now.before_0056()), (Some(30), 128));
        // An exec_host holding fewer slots than the spec asks for (a record
        // cut at TORQUE's 4,095 bytes) keeps nodect.
        let exec_host = real.split(' ').find(|a| a.starts_with("exec_host=")).unwrap();
        let cut: Vec<&str> = exec_host.split('+').take(120).collect();
        let short = real.replace(exec_host, &cut.join("+"));
        assert_eq!(size(&short, &now), (Some(30), 128));
        // FZK's job 710105: nodes=8:ppn=1 on 4 hosts, two slots each.
        let shared = include_str!("../../tests/fixtures/accounting/safe_fzk_torque_doubled_nodes.log")
            .lines()
            .find(|l| l.contains(";E;710105."))
            .unwrap();
        assert_eq!(size(shared, &now), (Some(4), 8));
        assert_eq!(size(shared, &now.before_0056()), (Some(8), 8));
        // Resource_List.ncpus beside nodes= is not read (docs/rules.md),
        // unlike beside a select.
        let line = "11/14/2023 23:13:20;E;1.srv;user=a queue=q ctime=1700000000 start=1700000000 end=1700003600 \
                    Resource_List.nodes=1:ppn=2 Resource_List.ncpus=6 exec_host=n1/0-5";
        assert_eq!(size(line, &now), (Some(1), 2));
    }

    /// The leading date is not read (docs/recording.md): a `grep` prefix
    /// before it, as in APEL's test data, leaves the record as it is.
    #[test]
    fn the_leading_date_is_not_read() {
        let line = "03/27/2015 00:06:27;E;1.srv;user=a queue=q ctime=1427422724 start=1427422800 end=1427439812 \
                    Resource_List.nodes=1:ppn=4";
        let plain = job(parse(line, &ReadOptions::default()));
        let prefixed = job(parse(&format!("20150327:{line}"), &ReadOptions::default()));
        assert_eq!(plain, prefixed);
        assert_eq!((prefixed.cores, prefixed.end), (4, plain.end));
    }

    /// TORQUE 6's `-L` requests (real OSC records): memory per task, summed
    /// over the requests, is the job's memory; the cores are where it ran.
    /// Read before 2026-12-06 (without `torque_requests`), it had none.
    #[test]
    fn a_torque_6_request_gives_the_jobs_memory() {
        let text = include_str!("../../tests/fixtures/accounting/torque6_osc_pitzer_resource_request.log");
        let read = |options: &ReadOptions| -> Vec<_> {
            let mut p = PbsParser::new(&ReadOptions {
                cluster: Some("pitzer".into()),
                ..options.clone()
            });
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| p.parse(l))
                .filter_map(|i| match i {
                    Item::Job(j) => Some((j.job_id, j.nodes, j.cores, j.memory)),
                    Item::Skip(Skip::OtherRecord) => None,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let now = ReadOptions::default().now(SourceFormat::Pbs);
        assert_eq!(
            read(&now),
            [
                (
                    "13512.pitzer-batch.ten.osc.edu".to_owned(),
                    Some(1),
                    80,
                    Some(Bytes(100 * GIB))
                ),
                (
                    "16057.pitzer-batch.ten.osc.edu".to_owned(),
                    Some(2),
                    2,
                    Some(Bytes(8 * GIB))
                ),
            ]
        );
        assert_eq!(
            read(&now.before()),
            [
                ("13512.pitzer-batch.ten.osc.edu".to_owned(), Some(1), 80, None),
                ("16057.pitzer-batch.ten.osc.edu".to_owned(), Some(2), 2, None),
            ]
        );
        // kilobytes without a unit; a Resource_List.mem wins; damage is named.
        assert_eq!(
            request_memory("Resource_Request_2.0=-L tasks=3:memory=1024 session=1"),
            Ok(Some(Bytes(3 * MIB)))
        );
        assert_eq!(request_memory("queue=q end=2"), Ok(None));
        assert_eq!(request_memory("Resource_Request_2.0=-L tasks=2:lprocs=4"), Ok(None));
        let mem = text
            .lines()
            .find(|l| l.contains(";E;16057"))
            .unwrap()
            .replace(" session=", " Resource_List.mem=1gb session=");
        let j = job(PbsParser::new(&now).parse(&mem).unwrap());
        assert_eq!(j.memory, Some(Bytes(GIB)));
        let bad = text
            .lines()
            .find(|l| l.contains(";E;16057"))
            .unwrap()
            .replace("memory=4GB -L", "memory=4XB -L");
        assert!(
            matches!(PbsParser::new(&now).parse(&bad), Some(Item::Bad(r)) if r.starts_with("Resource_Request_2.0 -L tasks=1:lprocs=1:usecores:memory=4XB: memory:")),
            "{bad}"
        );
    }

    /// PBS Pro writes an E record for a job array itself when all its
    /// subjobs are done; the subjobs are the runs. The record is OpenPBS's
    /// own (openpbs/openpbs pull request #451, 2017), written with
    /// `start=0` by the version that PR fixed; since then `start` is the
    /// array's first start (its test `test_arrayjob_Erecord_startval`).
    #[test]
    fn a_job_arrays_own_end_record_is_not_a_run() {
        let real = "11/15/2017 01:23:58;E;4[].pbspro;user=ravi group=wheel project=_pbs_project_default jobname=STDIN queue=workq ctime=1510709028 qtime=1510709028 etime=1510709028 start=0 array_indices=1-2 Resource_List.ncpus=1 Resource_List.nodect=1 Resource_List.place=pack Resource_List.select=1:ncpus=1 session=0 end=1510709038 Exit_status=0 run_count=0";
        let now = ReadOptions::default().now(SourceFormat::Pbs);
        assert_eq!(parse(real, &now), Item::Skip(Skip::ArrayParent));
        // As the fixed versions write it: still not a run.
        let started = real.replace(" start=0 ", " start=1510709030 ");
        assert_eq!(parse(&started, &now), Item::Skip(Skip::ArrayParent));
        // A subjob of it is (its own id; PBS Pro names the array beside it).
        let subjob = started
            .replace(";4[].pbspro;", ";4[1].pbspro;")
            .replace(" array_indices=1-2 ", " array_id=4[].pbspro array_index=1 ");
        let j = job(parse(&subjob, &now));
        assert_eq!((j.job_id.as_str(), j.array_index, j.cores), ("4[].pbspro", Some(1), 1));
        // A record listing the array's indices under another id form is the array too.
        let listed = started.replace(";4[].pbspro;", ";4.pbspro;");
        assert_eq!(parse(&listed, &now), Item::Skip(Skip::ArrayParent));
        // Read as before (a record kept without `pbs_array_parents`): a job, as it was charged.
        let before = job(parse(&started, &now.before()));
        assert_eq!((before.job_id.as_str(), before.array_index), ("4[].pbspro", None));
    }

    #[test]
    fn a_pbs_pro_job_is_on_the_hosts_it_ran_on_not_its_chunks() {
        // A real OpenPBS record (CESNET, 2024; its date;E;id; prefix made
        // up): two chunks placed freely, both on torque2. nodect counts the
        // chunks.
        let line = "06/01/2024 10:00:00;E;1234.torque;user=vchlum group=vchlum account=pas1234 queue=workq ctime=1717236000 qtime=1717236000 etime=1717236000 start=1717236001 exec_host=torque2/0+torque2/1 exec_vnode=(torque2:ncpus=1:mem=307200kb)+(torque2:ncpus=1:mem=307200kb) Resource_List.mem=600mb Resource_List.ncpus=2 Resource_List.nodect=2 Resource_List.place=free Resource_List.select=2:ncpus=1:mem=300mb end=1717236604 Exit_status=0";
        let now = job(parse(line, &ReadOptions::default().now(SourceFormat::Pbs)));
        assert_eq!((now.nodes, now.cores, now.memory), (Some(1), 2, Some(Bytes(600 * MIB))));
        // Read as before 2026-12-06 (a record kept without `pbs_hosts`).
        let then = job(parse(line, &ReadOptions::default()));
        assert_eq!((then.nodes, then.cores), (Some(2), 2));
        // Scattered chunks: as many hosts as chunks, either way (NCAR's casper).
        let scatter = line
            .replace("exec_host=torque2/0+torque2/1", "exec_host=crhtc67/13+crhtc70/17")
            .replace(
                "exec_vnode=(torque2:ncpus=1:mem=307200kb)+(torque2:ncpus=1:mem=307200kb)",
                "exec_vnode=(crhtc67:ncpus=1:mem=307200kb)+(crhtc70:ncpus=1:mem=307200kb)",
            )
            .replace("place=free", "place=scatter");
        assert_eq!(
            job(parse(&scatter, &ReadOptions::default().now(SourceFormat::Pbs))).nodes,
            Some(2)
        );
        // TORQUE's nodes= spec keeps its nodect; a record without exec_host too.
        let torque = "11/09/2014 23:59:51;E;6464684.anonhost;user=anonuser group=anongroup jobname=anonjob account=anonaccount queue=default ctime=1415579756 qtime=1415579756 etime=1415579756 start=1415589841 exec_host=n404/2+n404/3 Resource_List.mem=1993mb Resource_List.ncpus=1 Resource_List.nodect=2 Resource_List.nodes=2:ppn=2 end=1415599191 Exit_status=1";
        assert_eq!(
            job(parse(torque, &ReadOptions::default().now(SourceFormat::Pbs))).nodes,
            Some(2)
        );
        let unplaced = line.replace("exec_host=torque2/0+torque2/1 ", "").replace(
            "exec_vnode=(torque2:ncpus=1:mem=307200kb)+(torque2:ncpus=1:mem=307200kb) ",
            "",
        );
        assert_eq!(
            job(parse(&unplaced, &ReadOptions::default().now(SourceFormat::Pbs))).nodes,
            Some(2)
        );
        // Vnodes named freely (one host's two sockets): never more nodes than
        // the chunks PBS counted.
        let vnodes = line
            .replace("exec_host=torque2/0+torque2/1 ", "")
            .replace(
                "exec_vnode=(torque2:ncpus=1:mem=307200kb)+(torque2:ncpus=1:mem=307200kb)",
                "exec_vnode=(gpu01-s0:ncpus=1+gpu01-s1:ncpus=1)",
            )
            .replace("Resource_List.nodect=2", "Resource_List.nodect=1")
            .replace("select=2:ncpus=1:mem=300mb", "select=1:ncpus=2:mem=600mb");
        assert_eq!(
            job(parse(&vnodes, &ReadOptions::default().now(SourceFormat::Pbs))).nodes,
            Some(1)
        );
        // Without nodect: the chunks (as before), or the hosts now.
        let no_nodect = line.replace("Resource_List.nodect=2 ", "");
        assert_eq!(job(parse(&no_nodect, &ReadOptions::default())).nodes, Some(2));
        assert_eq!(
            job(parse(&no_nodect, &ReadOptions::default().now(SourceFormat::Pbs))).nodes,
            Some(1)
        );
    }

    #[test]
    fn torque_and_pbs_pro_end_records() {
        let j = job(parse(
            "11/09/2014 23:59:51;E;6464684.anonhost;user=anonuser group=anongroup jobname=anonjob account=anonaccount queue=default ctime=1415579756 qtime=1415579756 etime=1415579756 start=1415589841 exec_host=n404/2+n404/3 Resource_List.mem=1993mb Resource_List.ncpus=1 Resource_List.nodect=1 Resource_List.nodes=1:ppn=4:avx end=1415599191 Exit_status=1",
            &ReadOptions::default(),
        ));
        assert_eq!(j.project.as_deref(), Some("anonaccount"));
        assert_eq!(
            (j.nodes, j.cores, j.memory, j.gpus),
            (Some(1), 4, Some(Bytes(1993 * MIB)), Some(0))
        );
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
        assert_eq!(
            (j.nodes, j.cores, j.memory, j.gpus),
            (Some(1), 1, Some(Bytes(10 * GIB)), Some(1))
        );
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
        assert_eq!((j.nodes, j.cores, j.exclusive, j.project), (Some(5), 65, true, None));
        // PBS Pro keeps `nodes=` beside the select it made of it.
        let j = job(parse(
            "x;E;7.pbs;queue=q start=100 end=200 Resource_List.nodes=2:ppn=4 Resource_List.select=2:ncpus=4:mpiprocs=4 Resource_List.nodect=2",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores), (Some(2), 8));
        assert_eq!(array_id("3073070.[hostname_1]"), ("3073070.[hostname_1]".into(), None));
    }

    #[test]
    fn other_records_and_broken_ones() {
        // NCAR's real records: a `qalter`'s `a` record is skipped like the
        // other records that end no run (D, A, Y, C); E and R are runs.
        let real = include_str!("../../tests/fixtures/accounting/ncar_pbsparse_casper_records.log");
        let kinds: Vec<(String, &str)> = real
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let item = match parse(l, &ReadOptions::default().now(SourceFormat::Pbs)) {
                    Item::Job(_) => "job",
                    Item::Skip(Skip::OtherRecord) => "other",
                    other => panic!("{l}: {other:?}"),
                };
                (l.split(';').nth(1).unwrap().to_owned(), item)
            })
            .collect();
        let of = |k: &str| {
            kinds
                .iter()
                .filter(|(t, _)| t == k)
                .map(|(_, i)| *i)
                .collect::<Vec<_>>()
        };
        assert_eq!(of("E"), ["job", "job", "job"]);
        assert_eq!(of("R"), ["job"]);
        assert_eq!(
            (of("a"), of("D"), of("C")),
            (vec!["other"], vec!["other"], vec!["other"])
        );
        // PBS Pro's other lower-case types (OpenPBS acct.h): skipped too.
        for kind in ["s", "u", "c", "e", "z", "r", "k", "p"] {
            assert_eq!(
                parse(
                    &format!("04/02/2025 21:36:23;{kind};4237334.casper-pbs;Resource_List.select=1:mem=1GB"),
                    &ReadOptions::default()
                ),
                Item::Skip(Skip::OtherRecord),
                "{kind}"
            );
        }
        for kind in ["x", "Ee", "", "e1"] {
            assert_eq!(
                parse(
                    &format!("04/02/2025 21:36:23;{kind};1.casper-pbs;a=b"),
                    &ReadOptions::default()
                ),
                Item::Bad(format!("{kind:?} is not a PBS record type")),
                "{kind}"
            );
        }
        assert_eq!(
            parse(
                "04/05/2017 13:06:53;Q;80.mymaster;queue=default",
                &ReadOptions::default()
            ),
            Item::Skip(Skip::OtherRecord)
        );
        // A mangled node spec with nothing else to say what the job held.
        assert_eq!(
            parse(
                "03/27/2015 10:00:00;E;21414868.b0;user=a queue=atlas ctime=1426952581 start=1426952875 Resource_List.nodes=1pn=4 end=1426965019",
                &ReadOptions::default()
            ),
            Item::Bad("Resource_List.nodes: \"1pn=4\" must start with a node count or a host name (and no ncpus, exec_host or exec_vnode says what the job held)".into())
        );
        // A garbled nodect beside a readable request is still an error.
        assert_eq!(
            parse(
                "04/27/2020 06:00:00;E;10711;user=a queue=black ctime=1587912647 start=1588046353 Resource_List.ncpus=2 Resource_List.nodect=1:ppn=24:gpu=4 end=1588146353",
                &ReadOptions::default()
            ),
            Item::Bad("Resource_List.nodect=\"1:ppn=24:gpu=4\" is not a number of nodes".into())
        );
        // No size at all: never 1 core by default.
        assert_eq!(
            parse(
                "01/04/2008 09:42:09;E;4188.sdb;user=expc01 account=z02 queue=par ctime=1199439548 start=1199439548 end=1199439729 Exit_status=0",
                &ReadOptions::default()
            ),
            Item::Bad("the record says nothing about the job's size (no Resource_List.nodes, select, ncpus or mppwidth, no exec_host or exec_vnode); it is not charged as 1 core".into())
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
            parse(
                "04/05/2017 13:06:53;E;5002.pitzer;user=u group=g account=PZS0708 jobname=x queue=batch ctime=1",
                &ReadOptions::default()
            ),
            Item::Bad(
                "the record has no start=, end= or Exit_status: it was cut short, not a job that never started".into()
            )
        );
        assert_eq!(
            parse("x;E;1;user=a Exit_status=-3", &ReadOptions::default()),
            Item::Skip(Skip::NeverStarted)
        );
    }

    #[test]
    fn gpus_named_outside_the_request_make_a_record_without_a_gpu_count() {
        // xdmod's test data (tests/fixtures/accounting/xdmod_pbs_torque_accounting_E.log):
        // the request names no GPUs, `Resource_List.gpu` and `neednodes` do.
        let line = "04/27/2020 23:59:13;E;10712;user=ybsbu group=caste account=caste jobname=test-gpu-job-3 Exit_status=0 queue=black ctime=1587912657 qtime=1587912657 etime=1587912657 start=1588046363 end=1588146363 exec_host=node0703/0-27 Resource_List.nodes=1:ppn=28:default Resource_List.gpu=2 Resource_List.walltime=96:00:00 Resource_List.feature=gpu Resource_List.nodect=1 Resource_List.neednodes=1:ppn=28:gpus=1:default";
        let j = job(parse(line, &ReadOptions::default()));
        assert_eq!((j.nodes, j.cores, j.gpus), (Some(1), 28, None));
        // Either alone does too; neither, or a count of 0, says none.
        let gpu_only = line.replace("1:ppn=28:gpus=1:default", "1:ppn=28:default");
        assert_eq!(job(parse(&gpu_only, &ReadOptions::default())).gpus, None);
        let need_only = line.replace(" Resource_List.gpu=2", "");
        assert_eq!(job(parse(&need_only, &ReadOptions::default())).gpus, None);
        let neither = need_only.replace("1:ppn=28:gpus=1:default", "1:ppn=28:default");
        assert_eq!(job(parse(&neither, &ReadOptions::default())).gpus, Some(0));
        let zero = line
            .replace("gpu=2", "gpu=0")
            .replace("1:ppn=28:gpus=1:default", "1:ppn=28:default");
        assert_eq!(job(parse(&zero, &ReadOptions::default())).gpus, Some(0));
        // A request that names them is read as before.
        let named = line.replace(
            "Resource_List.nodes=1:ppn=28:default",
            "Resource_List.nodes=1:ppn=28:gpus=1",
        );
        assert_eq!(job(parse(&named, &ReadOptions::default())).gpus, Some(1));
    }

    #[test]
    fn torque_writes_the_attribute_name_into_the_node_spec() {
        // FZK TORQUE, 2009 (SAFE-ACCOUNTING's test data).
        let j = job(parse(
            "06/10/2009 00:00:53;E;709813.iwrcgpbs0.fzk.de;user=dgmd0010 group=medigrid jobname=STDIN queue=dgiseq ctime=1244584802 qtime=1244584802 etime=1244584802 start=1244584853 exec_host=iwrcgop092/0 Resource_List.ncpus=1 Resource_List.neednodes=nodes=1:ppn=1 Resource_List.nodect=1 Resource_List.nodes=nodes=1:ppn=1 Resource_List.walltime=12:00:00 session=3323 end=1244584853 Exit_status=0",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.gpus), (Some(1), 1, Some(0)));
        let j = job(parse(
            "x;E;5.s;queue=q start=100 end=200 Resource_List.nodes=nodes=2:ppn=4:gpus=1",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.gpus), (Some(2), 8, Some(2)));
    }

    #[test]
    fn an_unreadable_node_spec_falls_back_to_where_the_job_ran() {
        // WestGrid TORQUE 5 (APEL's test data): `1pn=4` on 4 slots of one host.
        let j = job(parse(
            "03/21/2015 12:10:19;E;21414868.b0;user=atprd008 group=atprd queue=atlas ctime=1426952581 start=1426952875 exec_host=b372/4+b372/5+b372/6+b372/7 Resource_List.nodect=1 Resource_List.nodes=1pn=4 Resource_List.pmem=2666mb end=1426965019 Exit_status=0",
            &ReadOptions::default(),
        ));
        assert_eq!(
            (j.nodes, j.cores, j.memory, j.gpus),
            (Some(1), 4, Some(Bytes(4 * 2666 * MIB)), None)
        );
        // No placement: the ncpus beside it.
        let j = job(parse(
            "x;E;6.s;queue=q start=100 end=200 Resource_List.ncpus=3 Resource_List.nodes=1pn=4",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores), (Some(1), 3));
    }

    #[test]
    fn placement_counts_slots_ranges_multipliers_and_vnodes() {
        assert_eq!(
            exec_host("dnode011/0-15+dnode010/0-15+dnode009/0-15+dnode008/0-15"),
            Ok(Placement {
                cores: 64,
                hosts: 4,
                gpus: None
            })
        );
        assert_eq!(exec_host("c1/0*13+c2/0*13").map(|p| (p.cores, p.hosts)), Ok((26, 2)));
        assert_eq!(exec_host("n1/0-3,5+n1/6").map(|p| (p.cores, p.hosts)), Ok((6, 1)));
        assert!(exec_host("n1/x").is_err());
        assert!(exec_host("n1").is_err());
        assert_eq!(
            exec_vnode("(c1:ncpus=13:ngpus=1)+(c2[0]:ncpus=13+c2[1]:ncpus=3:mem=4gb)"),
            Ok(Placement {
                cores: 29,
                hosts: 2,
                gpus: Some(1)
            })
        );
        // DiRAC Torque 6, no request besides nodes: the request counts.
        let j = job(parse(
            "06/07/2018 21:36:09;E;3710.master.cm.cluster;user=dc-bate1 group=dirac account=dp015 jobname=Red5_M01 queue=dirac2 ctime=1528403764 qtime=1528403764 etime=1528403764 start_count=1 start=1528403767 owner=dc-bate1@dirac03.cm.cluster exec_host=dnode011/0-15+dnode010/0-15+dnode009/0-15+dnode008/0-15 Resource_List.nodes=4:ppn=16 Resource_List.walltime=120:00:00 Resource_List.nodect=4 end=1528403769 Exit_status=174",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores), (Some(4), 64));
        // PBS Pro with only ncpus and nodect: the request.
        let j = job(parse(
            "01/26/2016 00:00:37;E;2995.pbs;user=anonuser queue=anonq ctime=1453756297 start=1453766281 exec_host=c1/0-3+c2/0-7 Resource_List.ncpus=12 Resource_List.nodect=2 end=1453766437 Exit_status=0",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.gpus), (Some(2), 12, Some(0)));
        // No request at all (HECToR, SAFE-ACCOUNTING's test data): the slot it ran on.
        let j = job(parse(
            "08/12/2008 00:04:14;E;100083.sdb;user=msseay group=-default- account=e71-DQ jobname=fnp_equil.pbs queue=par:n32c2_12h ctime=1218451557 qtime=1218451557 etime=1218451557 start=1218454455 exec_host=nid00007/17 session=26609 alt_id=2501 end=1218495854 Exit_status=0",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.gpus), (Some(1), 1, None));
    }

    #[test]
    fn cray_mpp_attributes_size_the_job() {
        // HECToR Cray XT4 (SAFE-ACCOUNTING's test data): ncpus, select and
        // nodect describe the MOM node; 64 PEs, 2 per node.
        let j = job(parse(
            "08/12/2008 00:04:14;E;102.user123;user=msseay group=-default- account=e71-DQ jobname=fnp_equil.pbs queue=par:n32c2_12h ctime=1218451557 qtime=1218451557 etime=1218451557 start=1218454455 exec_host=nid00007/17 exec_vnode=(hector02:ncpus=1) Resource_List.mpparch=XT Resource_List.mppnppn=2 Resource_List.mppwidth=64 Resource_List.ncpus=1 Resource_List.nodect=1 Resource_List.place=pack Resource_List.select=1 Resource_List.walltime=12:00:00 session=26609 alt_id=2501 end=1218495854 Exit_status=0",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.memory, j.gpus), (Some(32), 64, None, None));
        // Odd widths round the nodes up; depth multiplies the cores; mppmem is per PE.
        let j = job(parse(
            "x;E;9.s;queue=q start=100 end=200 Resource_List.mppwidth=5 Resource_List.mppnppn=2 Resource_List.mppdepth=4 Resource_List.mppmem=1gb",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores, j.memory), (Some(3), 20, Some(Bytes(5 * GIB))));
        // Without mppnppn the PEs fill whole nodes of the node type (decided when priced).
        let j = job(parse(
            "x;E;9.s;queue=q start=100 end=200 Resource_List.mppwidth=64",
            &ReadOptions::default(),
        ));
        assert_eq!((j.nodes, j.cores), (None, 64));
        assert_eq!(
            parse(
                "x;E;9.s;queue=q start=100 end=200 Resource_List.mppwidth=0",
                &ReadOptions::default()
            ),
            Item::Bad("Resource_List.mppwidth=0 holds no cores".into())
        );
    }

    #[test]
    fn a_malformed_record_still_names_its_job() {
        let p = PbsParser::new(&ReadOptions {
            cluster: Some("edge".into()),
            ..Default::default()
        });
        assert_eq!(
            p.job_key("03/27/2015 10:00:00;E;161299[389].master;start=1 Resource_List.nodes=1pn=4"),
            Some("edge/161299[].master_389".into())
        );
        assert_eq!(p.job_key("garbage"), None);
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
