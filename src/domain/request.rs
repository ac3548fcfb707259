//! Resource requests as users and schedulers write them, parsed into the
//! normalised form the pricing engine takes (docs/rules.md D2, D3).
//!
//! - PBS/Torque `-l` lists: `nodes=N:ppn=P[:gpus=G][:feature…][+…]`, `mem=`,
//!   `pmem=`, `walltime=`; PBS Pro `select=K:ncpus=C:ngpus=G:mem=M[+…]`,
//!   `ncpus=`, `ngpus=`, `place=`. Sizes without a unit are bytes.
//! - Slurm options: `-N/--nodes`, `-n/--ntasks`, `-c/--cpus-per-task`,
//!   `--ntasks-per-node`, `--mem`, `--mem-per-cpu`, `--mem-per-gpu`,
//!   `--gres=gpu[:type]:K`, `--gpus`, `--gpus-per-node`, `--exclusive`,
//!   `-t/--time`. Sizes without a unit are MiB.
//! - Slurm `AllocTRES` strings (`cpu=8,mem=32G,node=1,gres/gpu=2`): what the
//!   job held.
//!
//! Memory units are powers of 1024. Per-node and per-CPU memory becomes the
//! job's total once its node and core counts are known
//! ([`ResourceRequest::shape`]).

use serde::Serialize;

use super::pricing::JobShape;
use super::units::{Bytes, MIB};

/// A request that cannot be understood; says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (in {input:?})")]
pub struct RequestError {
    pub input: String,
    pub reason: String,
}

fn err<T>(input: &str, reason: impl Into<String>) -> Result<T, RequestError> {
    Err(RequestError {
        input: input.to_owned(),
        reason: reason.into(),
    })
}

/// How a memory request is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "per", content = "bytes")]
pub enum MemorySpec {
    Total(Bytes),
    PerNode(Bytes),
    PerCore(Bytes),
    PerGpu(Bytes),
}

/// How a GPU request is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "per", content = "gpus")]
pub enum GpuSpec {
    Total(u32),
    PerNode(u32),
}

/// A request as written, before node and core counts are settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceRequest {
    /// `None`: as many nodes as the cores need (Slurm without `-N`), and at
    /// least `min_nodes`.
    pub nodes: Option<u32>,
    /// Without a node count, the fewest nodes the scheduler spreads it over
    /// (Slurm `-n N --ntasks-per-node T`: ⌈N ÷ T⌉); else 1.
    pub min_nodes: u32,
    /// Total cores; for an exclusive request, the cores asked for before
    /// whole nodes are counted.
    pub cores: u32,
    pub memory: Option<MemorySpec>,
    pub gpus: GpuSpec,
    /// Whole nodes (`--exclusive`, `--mem=0`, `place=…:excl`).
    pub exclusive: bool,
    /// Requested wall time in seconds, when the request names one.
    pub walltime: Option<i64>,
}

impl ResourceRequest {
    /// What the job holds on nodes of `cores_per_node` cores.
    pub fn shape(&self, cores_per_node: u32) -> Result<JobShape, RequestError> {
        let overflow = |what: &str| RequestError {
            input: format!("{self:?}"),
            reason: format!("{what} overflows"),
        };
        let cpn = cores_per_node.max(1);
        let nodes = self
            .nodes
            .unwrap_or_else(|| self.cores.div_ceil(cpn).max(self.min_nodes).max(1));
        let cores = if self.exclusive {
            nodes.checked_mul(cpn).ok_or_else(|| overflow("cores"))?.max(self.cores)
        } else {
            self.cores
        };
        let gpus = match self.gpus {
            GpuSpec::Total(g) => g,
            GpuSpec::PerNode(g) => g.checked_mul(nodes).ok_or_else(|| overflow("GPUs"))?,
        };
        let times = |b: Bytes, n: u32| {
            b.0.checked_mul(u64::from(n))
                .map(Bytes)
                .ok_or_else(|| overflow("memory"))
        };
        let memory = match self.memory {
            None => None,
            Some(MemorySpec::Total(b)) => Some(b),
            Some(MemorySpec::PerNode(b)) => Some(times(b, nodes)?),
            Some(MemorySpec::PerCore(b)) => Some(times(b, cores)?),
            Some(MemorySpec::PerGpu(b)) => Some(times(b, gpus)?),
        };
        Ok(JobShape {
            nodes,
            cores,
            memory,
            gpus,
        })
    }
}

fn count(input: &str, what: &str, s: &str) -> Result<u32, RequestError> {
    match s.trim().parse::<u32>() {
        Ok(n) => Ok(n),
        Err(_) => err(input, format!("{what} must be a whole number, not {s:?}")),
    }
}

fn size(input: &str, s: &str, default_unit: u64) -> Result<Bytes, RequestError> {
    Bytes::parse(s, default_unit).or_else(|reason| err(input, reason))
}

/// PBS/Torque/PBS Pro resource keys that do not change a charge.
const PBS_IGNORED: &[&str] = &[
    "vmem",
    "pvmem",
    "cput",
    "pcput",
    "file",
    "nice",
    "neednodes",
    "nodect",
    "naccesspolicy",
    "feature",
    "qos",
    "opsys",
    "arch",
    "host",
    "software",
    "mpiprocs",
    "ompthreads",
    "gpu_type",
    "mps",
    "nvpus",
    "epilogue",
    "prologue",
    "depend",
];

/// Parse a PBS-family resource list (`qsub -l` syntax, items separated by
/// commas), e.g. `nodes=1:ppn=1,mem=12GB,walltime=2:00:00`.
pub fn parse_pbs(input: &str) -> Result<ResourceRequest, RequestError> {
    let mut nodes_spec: Option<(u32, u32, u32)> = None;
    let mut select: Option<Select> = None;
    let mut ncpus: Option<u32> = None;
    let mut ngpus: Option<u32> = None;
    let mut mem: Option<Bytes> = None;
    let mut pmem: Option<Bytes> = None;
    let mut walltime = None;
    let mut place = String::new();
    for item in split_pbs_items(input) {
        let Some((key, value)) = item.split_once('=') else {
            return err(input, format!("{item:?} is not of the form resource=value"));
        };
        match key.trim() {
            "nodes" => nodes_spec = Some(parse_nodes_spec(input, value)?),
            "select" => select = Some(parse_select(input, value)?),
            "ncpus" => ncpus = Some(count(input, "ncpus", value)?),
            "ngpus" => ngpus = Some(count(input, "ngpus", value)?),
            "mem" => mem = Some(size(input, value, 1)?),
            "pmem" => pmem = Some(size(input, value, 1)?),
            "walltime" => walltime = Some(pbs_duration(value).or_else(|r| err(input, r))?),
            "place" => place = value.to_owned(),
            k if PBS_IGNORED.contains(&k) => {}
            k => {
                return err(
                    input,
                    format!("unknown resource {k:?} (known: nodes, select, ncpus, ngpus, mem, pmem, walltime, place)"),
                );
            }
        }
    }
    let exclusive = place.split(':').any(|p| p == "excl" || p == "exclhost");
    let (nodes, cores, gpus, select_mem) = match (nodes_spec, select) {
        (Some(_), Some(_)) => return err(input, "give either nodes= or select=, not both"),
        (Some((n, c, g)), None) => (Some(n), c, g, None),
        (None, Some(s)) => {
            let nodes = if place.split(':').any(|p| p == "pack") {
                1
            } else {
                s.chunks
            };
            (Some(nodes), s.cores, s.gpus, s.memory)
        }
        (None, None) => (None, ncpus.unwrap_or(1), ngpus.unwrap_or(0), None),
    };
    if cores == 0 {
        return err(input, "the request holds no cores");
    }
    let memory = match (select_mem.or(mem), pmem) {
        (None, None) => None,
        (Some(m), None) => Some(MemorySpec::Total(m)),
        (None, Some(p)) => Some(MemorySpec::PerCore(p)),
        // Both: the larger of the job total and the per-process total.
        (Some(m), Some(p)) => Some(MemorySpec::Total(Bytes(m.0.max(p.0.saturating_mul(u64::from(cores)))))),
    };
    Ok(ResourceRequest {
        nodes: nodes.or(Some(1)),
        min_nodes: 1,
        cores,
        memory,
        gpus: GpuSpec::Total(gpus),
        exclusive,
        walltime,
    })
}

/// Split a `-l` list on commas that are not inside a `select=`/`nodes=`
/// value's parentheses (PBS allows none, so a plain split suffices).
fn split_pbs_items(input: &str) -> impl Iterator<Item = &str> {
    input.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `N:ppn=P[:gpus=G][:feature…]` or `host:ppn=P`, parts joined by `+`.
/// Returns total (nodes, cores, gpus).
pub fn parse_nodes_spec(input: &str, spec: &str) -> Result<(u32, u32, u32), RequestError> {
    let (mut nodes, mut cores, mut gpus) = (0u32, 0u32, 0u32);
    for part in spec.split('+') {
        let mut fields = part.split(':');
        let first = fields.next().unwrap_or_default().trim();
        if first.is_empty() {
            return err(input, format!("empty node specification in {spec:?}"));
        }
        // A leading number is a node count; anything else names one host.
        let n = if first.chars().all(|c| c.is_ascii_digit()) {
            count(input, "the node count", first)?
        } else if first.contains('=') {
            return err(input, format!("{part:?} must start with a node count or a host name"));
        } else {
            1
        };
        let (mut ppn, mut g) = (1u32, 0u32);
        for f in fields {
            match f.split_once('=') {
                Some(("ppn", v)) => ppn = count(input, "ppn", v)?,
                Some(("gpus", v)) => g = count(input, "gpus", v)?,
                Some(("", _)) => return err(input, format!("{f:?} has no name")),
                // Other properties (features such as `avx`, `mic=1`) do not change the charge.
                _ => {}
            }
        }
        let add = |acc: u32, x: u32| acc.checked_add(x);
        nodes = add(nodes, n).ok_or_else(|| RequestError {
            input: input.into(),
            reason: "too many nodes".into(),
        })?;
        cores = n
            .checked_mul(ppn)
            .and_then(|c| add(cores, c))
            .ok_or_else(|| RequestError {
                input: input.into(),
                reason: "too many cores".into(),
            })?;
        gpus = n
            .checked_mul(g)
            .and_then(|c| add(gpus, c))
            .ok_or_else(|| RequestError {
                input: input.into(),
                reason: "too many GPUs".into(),
            })?;
    }
    if nodes == 0 {
        return err(input, format!("{spec:?} asks for no nodes"));
    }
    Ok((nodes, cores, gpus))
}

/// Totals of a PBS Pro `select` statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Select {
    pub chunks: u32,
    pub cores: u32,
    pub gpus: u32,
    pub memory: Option<Bytes>,
}

/// `K:ncpus=C:ngpus=G:mem=M[+K2:…]`: totals over all chunks.
pub fn parse_select(input: &str, spec: &str) -> Result<Select, RequestError> {
    let mut total = Select {
        chunks: 0,
        cores: 0,
        gpus: 0,
        memory: None,
    };
    for chunk in spec.split('+') {
        let mut fields = chunk.split(':').peekable();
        let k = match fields.peek() {
            Some(f) if !f.contains('=') => count(input, "the chunk count", fields.next().unwrap_or_default())?,
            _ => 1,
        };
        let (mut ncpus, mut ngpus, mut mem) = (1u32, 0u32, None);
        for f in fields {
            match f.split_once('=') {
                Some(("ncpus", v)) => ncpus = count(input, "ncpus", v)?,
                Some(("ngpus", v)) => ngpus = count(input, "ngpus", v)?,
                Some(("mem", v)) => mem = Some(size(input, v, 1)?),
                Some(_) => {}
                None => return err(input, format!("{f:?} in select is not of the form resource=value")),
            }
        }
        let overflow = || RequestError {
            input: input.into(),
            reason: "select totals overflow".into(),
        };
        total.chunks = total.chunks.checked_add(k).ok_or_else(overflow)?;
        total.cores = k
            .checked_mul(ncpus)
            .and_then(|c| total.cores.checked_add(c))
            .ok_or_else(overflow)?;
        total.gpus = k
            .checked_mul(ngpus)
            .and_then(|g| total.gpus.checked_add(g))
            .ok_or_else(overflow)?;
        if let Some(m) = mem {
            let chunk_mem = m.0.checked_mul(u64::from(k)).ok_or_else(overflow)?;
            let sum = total
                .memory
                .map_or(0, |b| b.0)
                .checked_add(chunk_mem)
                .ok_or_else(overflow)?;
            total.memory = Some(Bytes(sum));
        }
    }
    if total.chunks == 0 {
        return err(input, "select asks for no chunks");
    }
    Ok(total)
}

/// A PBS duration: `[[[DD:]HH:]MM:]SS` or plain seconds (Torque 5 logs).
pub fn pbs_duration(s: &str) -> Result<i64, String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    let bad = || format!("{s:?} is not a duration (expected HH:MM:SS or seconds)");
    if parts.len() > 4
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(bad());
    }
    let weights = [1i64, 60, 3600, 86400];
    parts.iter().rev().zip(weights).try_fold(0i64, |acc, (p, w)| {
        let v: i64 = p.parse().map_err(|_| bad())?;
        acc.checked_add(v.checked_mul(w).ok_or_else(bad)?).ok_or_else(bad)
    })
}

/// A Slurm duration: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
/// `D-HH:MM:SS` (the `-t` and `Elapsed`/`Timelimit` formats).
pub fn slurm_duration(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let bad = || format!("{s:?} is not a Slurm duration (expected [D-]HH:MM:SS, MM:SS or minutes)");
    let num = |p: &str| -> Result<i64, String> {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) || p.len() > 12 {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (num(d)?, r),
        None => (0, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let has_days = t.contains('-');
    let (h, m, sec) = match (has_days, parts.as_slice()) {
        (false, [m]) => (0, num(m)?, 0),
        (false, [m, s]) => (0, num(m)?, num(s)?),
        (true, [h]) => (num(h)?, 0, 0),
        (true, [h, m]) => (num(h)?, num(m)?, 0),
        (_, [h, m, s]) => (num(h)?, num(m)?, num(s)?),
        _ => return Err(bad()),
    };
    Ok(((days * 24 + h) * 60 + m) * 60 + sec)
}

/// Parse Slurm `sbatch`/`srun` options, e.g. `-N 2 -n 8 --mem=32G --gres=gpu:2`.
pub fn parse_slurm(input: &str) -> Result<ResourceRequest, RequestError> {
    let mut nodes: Option<u32> = None;
    let mut ntasks: Option<u32> = None;
    let mut per_task = 1u32;
    let mut tasks_per_node: Option<u32> = None;
    let mut memory: Option<MemorySpec> = None;
    let mut gpus = GpuSpec::Total(0);
    let mut exclusive = false;
    let mut walltime = None;

    let mut tokens = input.split_whitespace().peekable();
    while let Some(tok) = tokens.next() {
        let (name, inline) = split_option(tok);
        let takes_value = !matches!(name, "--exclusive");
        let value = if !takes_value {
            None
        } else if let Some(v) = inline {
            Some(v.to_owned())
        } else {
            match tokens.next() {
                Some(v) => Some(v.to_owned()),
                None => return err(input, format!("{name} needs a value")),
            }
        };
        let v = value.as_deref().unwrap_or_default();
        match name {
            "-N" | "--nodes" => {
                if v.contains('-') {
                    return err(
                        input,
                        format!("a node range ({v}) has no single price; give one node count"),
                    );
                }
                nodes = Some(count(input, "the node count", v)?);
            }
            "-n" | "--ntasks" => ntasks = Some(count(input, "the task count", v)?),
            "-c" | "--cpus-per-task" => per_task = count(input, "cpus-per-task", v)?,
            "--ntasks-per-node" => tasks_per_node = Some(count(input, "ntasks-per-node", v)?),
            "--mem" => {
                let b = size(input, v, MIB)?;
                if b.0 == 0 {
                    // --mem=0: all the memory of each node.
                    exclusive = true;
                } else {
                    memory = Some(MemorySpec::PerNode(b));
                }
            }
            "--mem-per-cpu" => memory = Some(MemorySpec::PerCore(size(input, v, MIB)?)),
            "--mem-per-gpu" => memory = Some(MemorySpec::PerGpu(size(input, v, MIB)?)),
            "--gres" => {
                for g in v.split(',') {
                    if let Some(n) = gres_gpus(input, g)? {
                        gpus = GpuSpec::PerNode(n);
                    }
                }
            }
            "-G" | "--gpus" => gpus = GpuSpec::Total(typed_count(input, v)?),
            "--gpus-per-node" => gpus = GpuSpec::PerNode(typed_count(input, v)?),
            "--exclusive" => exclusive = true,
            "-t" | "--time" => walltime = Some(slurm_duration(v).or_else(|r| err(input, r))?),
            // Options that do not change what a job is charged.
            "-p" | "--partition" | "-A" | "--account" | "-J" | "--job-name" | "-q" | "--qos" | "-C"
            | "--constraint" => {}
            other => {
                return err(
                    input,
                    format!(
                        "unknown option {other:?} (known: -N, -n, -c, --ntasks-per-node, --mem, --mem-per-cpu, --mem-per-gpu, --gres, --gpus, --gpus-per-node, --exclusive, -t)"
                    ),
                );
            }
        }
    }
    // `-n` tasks at most `--ntasks-per-node` a node, without `-N`: Slurm
    // spreads them over ⌈n ÷ per node⌉ nodes at least (the quote packed
    // them), more when their cores do not fit on so few.
    let min_nodes = match (nodes, ntasks, tasks_per_node) {
        (None, Some(n), Some(t)) if t > 0 => n.div_ceil(t),
        _ => 1,
    };
    let tasks = match (ntasks, tasks_per_node, nodes) {
        (Some(n), _, _) => n,
        (None, Some(t), Some(n)) => t.saturating_mul(n),
        (None, Some(t), None) => t,
        (None, None, _) => 1,
    };
    let cores = tasks.checked_mul(per_task).ok_or_else(|| RequestError {
        input: input.into(),
        reason: "too many cores".into(),
    })?;
    if cores == 0 {
        return err(input, "the request holds no cores");
    }
    Ok(ResourceRequest {
        nodes,
        min_nodes,
        cores,
        memory,
        gpus,
        exclusive,
        walltime,
    })
}

/// `-n4`, `-n`, `--mem=4G`, `--mem`: the option name and an inline value.
fn split_option(tok: &str) -> (&str, Option<&str>) {
    if let Some(long) = tok.strip_prefix("--") {
        match long.split_once('=') {
            Some((n, v)) => (&tok[..n.len() + 2], Some(v)),
            None => (tok, None),
        }
    } else if tok.starts_with('-') && tok.chars().count() > 2 {
        // `-n4`: the option is the dash and one character (of any width).
        let at = tok.char_indices().nth(2).map_or(tok.len(), |(i, _)| i);
        let (n, v) = tok.split_at(at);
        (n, Some(v.strip_prefix('=').unwrap_or(v)))
    } else {
        (tok, None)
    }
}

/// The GPU count of one `--gres` item: `gpu`, `gpu:2`, `gpu:v100:2`;
/// `None` for other resources.
fn gres_gpus(input: &str, item: &str) -> Result<Option<u32>, RequestError> {
    let mut parts = item.split(':');
    if parts.next() != Some("gpu") {
        return Ok(None);
    }
    let rest: Vec<&str> = parts.collect();
    match rest.as_slice() {
        [] => Ok(Some(1)),
        [n] if n.chars().all(|c| c.is_ascii_digit()) => count(input, "the GPU count", n).map(Some),
        [_type] => Ok(Some(1)),
        [_type, n] => count(input, "the GPU count", n).map(Some),
        _ => err(input, format!("{item:?} is not gpu[:type]:count")),
    }
}

/// `N` or `type:N`.
fn typed_count(input: &str, v: &str) -> Result<u32, RequestError> {
    count(input, "the GPU count", v.rsplit(':').next().unwrap_or(v))
}

/// What a Slurm job held, from its `AllocTRES` (D3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AllocTres {
    pub cores: u32,
    pub memory: Option<Bytes>,
    pub nodes: Option<u32>,
    /// `None`: the string has no `gres/gpu` entry, so it gives no GPU count
    /// (Slurm writes no zero counts, and a site may not account GPUs as TRES).
    pub gpus: Option<u32>,
}

/// Parse `cpu=8,mem=32G,node=1,gres/gpu=2` (also `gres/gpu:v100=2`,
/// `billing=…`, `energy=…` and other TRES, which do not change the charge).
pub fn parse_alloc_tres(input: &str) -> Result<AllocTres, RequestError> {
    let mut cores = None;
    let mut memory = None;
    let mut nodes = None;
    let mut gpus_untyped = None;
    let mut gpus_typed: Option<u32> = None;
    for item in input.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return err(input, format!("{item:?} is not of the form tres=value"));
        };
        match key {
            "cpu" => cores = Some(count(input, "cpu", value)?),
            "mem" => memory = Some(size(input, value, MIB)?),
            "node" => nodes = Some(count(input, "node", value)?),
            "gres/gpu" => gpus_untyped = Some(count(input, "gres/gpu", value)?),
            k if k.starts_with("gres/gpu:") => {
                gpus_typed = Some(gpus_typed.unwrap_or(0).saturating_add(count(input, k, value)?));
            }
            _ => {}
        }
    }
    let Some(cores) = cores else {
        return err(input, "no cpu count");
    };
    Ok(AllocTres {
        cores,
        memory,
        nodes,
        gpus: gpus_untyped.or(gpus_typed),
    })
}

/// The GPU count in a Slurm GRES string, as sacct's `AllocGRES`, `ReqGRES`
/// and `Gres` write it: `gpu:2`, `gpu:k80:2`, `gpu:2(IDX:0-1)`,
/// `gpu:P100:2(IDX:1,3)`, `gpu:0(IDX:N/A)`, `hbm:0,gpu:4,bandwidth:4G`, or
/// `gres/gpu:2`. Items are separated by commas outside parentheses; GPU
/// items are summed (`gpu:k80:1,gpu:p100:2` is 3); a bare `gpu` is one.
/// `None` when no item is a GPU (an empty string included).
pub fn parse_gres_gpus(input: &str) -> Result<Option<u32>, RequestError> {
    let mut items = Vec::new();
    let (mut depth, mut begin) = (0i32, 0usize);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&input[begin..i]);
                begin = i + 1;
            }
            _ => {}
        }
    }
    items.push(&input[begin..]);
    let mut total: Option<u32> = None;
    for item in items.into_iter().map(str::trim).filter(|s| !s.is_empty()) {
        let spec = item.split_once('(').map_or(item, |(s, _)| s).trim();
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or_default();
        if name != "gpu" && name != "gres/gpu" {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let is_count = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit());
        let n = match rest.as_slice() {
            [] => 1,
            [n] if is_count(n) => count(input, "the GPU count", n)?,
            [_type] => 1,
            [_type, n] if is_count(n) => count(input, "the GPU count", n)?,
            _ => return err(input, format!("{item:?} is not gpu[:type][:count]")),
        };
        total = Some(total.unwrap_or(0).checked_add(n).ok_or_else(|| RequestError {
            input: input.into(),
            reason: "too many GPUs".into(),
        })?);
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
