//! Synthetic accounting data for measurements and tests: `sacct --parsable2`
//! output of N finished jobs, and a center configuration with N projects,
//! for the clusters and projects of examples/center.toml. Deterministic: the
//! same N gives the same bytes.

use std::io::{self, Write};

use chrono::{Duration, NaiveTime};

use crate::domain::period::Month;

/// The header line of [`write_sacct`]'s output (Open XDMoD's field set).
pub const SACCT_HEADER: &str = "JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|GID|User|UID|Submit|Eligible|Start|End|Elapsed|ExitCode|State|NNodes|NCPUS|ReqCPUS|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|JobName";

/// Write `n` finished jobs on owens in October 2026 (single-core,
/// memory-bound, multi-node and GPU, a quarter each), job ids from
/// `first_id`, as `sacct --parsable2` with a header line.
pub fn write_sacct(mut w: impl Write, n: u64, first_id: u64) -> io::Result<()> {
    writeln!(w, "{SACCT_HEADER}")?;
    let projects = ["pas1234", "pzs0708", "paa0042", "pde0001"];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..n {
        // xorshift: deterministic, no dependency.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (partition, nodes, cpus, mem_g, gpus) = match i % 4 {
            0 => ("serial", 1, 1 + x % 4, 2 + x % 4, 0),
            1 => ("batch", 1, 1 + x % 8, 8 + x % 64, 0),
            2 => ("parallel", 2 + x % 3, 28 * (2 + x % 3), 64, 0),
            _ => ("gpu", 1, 4 + x % 24, 16, 1 + x % 2),
        };
        let day = 1 + i % 28;
        let start_s = (i % 72_000) as u32;
        let dur = 60 + (x % 14_000) as u32;
        let (sh, sm, ss) = (start_s / 3600, start_s / 60 % 60, start_s % 60);
        let end_s = start_s + dur;
        let (eh, em, es) = (end_s / 3600, end_s / 60 % 60, end_s % 60);
        let gres = if gpus > 0 {
            format!(",gres/gpu={gpus}")
        } else {
            String::new()
        };
        let tres = format!("billing={cpus},cpu={cpus}{gres},mem={mem_g}G,node={nodes}");
        let start = format!("2026-10-{day:02}T{sh:02}:{sm:02}:{ss:02}");
        writeln!(
            w,
            "{id}|{id}|owens|{partition}|normal|{p}|g|1000|u{u}|1000|{start}|{start}|{start}|2026-10-{day:02}T{eh:02}:{em:02}:{es:02}|{dh:02}:{dm:02}:{ds:02}|0:0|COMPLETED|{nodes}|{cpus}|{cpus}|{mem_g}G|{tres}|{tres}|1-00:00:00|o0001|job{i}",
            id = first_id + i,
            // Elapsed: as long as it ran (October has no clock change).
            dh = dur / 3600,
            dm = dur / 60 % 60,
            ds = dur % 60,
            p = projects[(x % 4) as usize],
            u = x % 500,
        )?;
    }
    w.flush()
}

/// Write a center configuration with `n` projects holding storage quotas
/// (a third change in October 2026, a seventh end on 20 October) and a
/// storage rate change on 16 October.
pub fn write_center(mut w: impl Write, n: u64) -> io::Result<()> {
    writeln!(
        w,
        "[center]\nname = \"Synthetic Center\"\ncurrency = \"USD\"\ntime_zone = \"America/New_York\"\n\n\
         [[storage_rate]]\nfrom = 2026-01-01\ntb_month = 5.00\n\n[[storage_rate]]\nfrom = 2026-10-16\ntb_month = 4.50\n"
    )?;
    for i in 0..n {
        let base = 1 + i % 50;
        write!(
            w,
            "[[project]]\ncode = \"P{i:07}\"\nquota = [{{ from = 2026-01-01, tb = {base} }}"
        )?;
        if i % 3 == 0 {
            write!(
                w,
                ", {{ from = 2026-10-{:02}T12:00:00, tb = {} }}",
                1 + i % 31,
                base * 2
            )?;
        }
        if i % 7 == 0 {
            write!(w, ", {{ from = 2026-10-20, tb = 0 }}")?;
        }
        writeln!(w, "]")?;
    }
    w.flush()
}

/// The center of `hpc-ledger bench`: one Slurm cluster `bench` (28-core
/// regular nodes, 48-core hugemem nodes, 4-GPU nodes) whose rate cards hold
/// from 2020 on, a storage rate change on the 16th of `month`, and
/// `projects` projects `p0000000`… with storage quotas (a third change
/// during `month`, a seventh end on its 20th).
pub fn write_bench_center(mut w: impl Write, projects: u64, month: Month) -> io::Result<()> {
    let ym = format!("{:04}-{:02}", month.year(), month.month());
    writeln!(
        w,
        r#"[center]
name = "Bench Center"
currency = "USD"
time_zone = "America/New_York"

[[cluster]]
name = "bench"
scheduler = "slurm"
time_zone = "America/New_York"

[[cluster.node_type]]
name = "regular"
cores_per_node = 28

[[cluster.node_type]]
name = "hugemem"
cores_per_node = 48

[[cluster.node_type]]
name = "gpu"
cores_per_node = 28
gpus_per_node = 4

[cluster.queues]
serial = "regular"
batch = "regular"
parallel = "regular"
hugemem = "hugemem"
gpu = "gpu"

[[cluster.rate_card]]
node_type = "regular"
from = 2020-01-01
core_hour = 0.0120
memory_per_core = "4GB"

[[cluster.rate_card]]
node_type = "hugemem"
from = 2020-01-01
core_hour = 0.0150
memory_per_core = "32GB"

[[cluster.rate_card]]
node_type = "gpu"
from = 2020-01-01
core_hour = 0.0100
gpu_hour = 0.2000
memory_per_core = "8GB"

[[storage_rate]]
from = 2020-01-01
tb_month = 5.00

[[storage_rate]]
from = {ym}-16
tb_month = 4.50
"#
    )?;
    for i in 0..projects {
        let base = 1 + i % 50;
        write!(
            w,
            "[[project]]\ncode = \"P{i:07}\"\nquota = [{{ from = 2020-01-01, tb = {base} }}"
        )?;
        if i % 3 == 0 {
            write!(w, ", {{ from = {ym}-{:02}T12:00:00, tb = {} }}", 1 + i % 28, base * 2)?;
        }
        if i % 7 == 0 {
            write!(w, ", {{ from = {ym}-20, tb = 0 }}")?;
        }
        writeln!(w, "]")?;
    }
    w.flush()
}

/// One job of the bench mix: what it held and when it ran.
struct BenchJob {
    partition: &'static str,
    nodes: u64,
    cpus: u64,
    mem_g: u64,
    gpus: u64,
    dur: u64,
    start: chrono::NaiveDateTime,
    end: chrono::NaiveDateTime,
}

/// Job `i` of the mix, from its random word `x`: started within `month`
/// (of `days` days), at most a day long, so it never ends in the next month.
fn bench_job(i: u64, x: u64, days: u64, month: Month) -> BenchJob {
    let (partition, nodes, cpus, mem_g, gpus) = match i % 20 {
        0..=7 => ("serial", 1, 1, 1 + x % 4, 0),
        8..=10 => ("batch", 1, 2 + x % 27, 4 * (1 + x % 7), 0),
        11..=13 => ("batch", 1, 1 + x % 4, 32 + x % 96, 0),
        14 | 15 => ("parallel", 2 + x % 15, 28 * (2 + x % 15), 120, 0),
        16 | 17 => ("gpu", 1, 4 + x % 24, 32 + x % 64, 1 + x % 4),
        18 => ("hugemem", 1, 8 + x % 41, 256 + x % 1200, 0),
        _ => ("serial", 1, 1, 2, 0),
    };
    let day = i % (days.max(3) - 2);
    let dur = 30 + x % (i % 5 * 20_000 + 3_600);
    let start = month.first_day().and_time(NaiveTime::MIN)
        + Duration::days(i64::try_from(day).unwrap_or(0))
        + Duration::seconds(i64::try_from(x % 43_200).unwrap_or(0));
    let end = start + Duration::seconds(i64::try_from(dur).unwrap_or(0));
    BenchJob {
        partition,
        nodes,
        cpus,
        mem_g,
        gpus,
        dur,
        start,
        end,
    }
}

/// Jobs `jobs` (of one endless stream: the same `i` is the same job in
/// every call) finished on the bench center's cluster during `month`,
/// charged to its first `projects` projects, as `sacct --parsable2` with a
/// header.
/// The mix of a general-purpose cluster: 40% single-core, 15% multi-core,
/// 15% memory-bound (charged by memory), 10% multi-node, 10% GPU, 5%
/// hugemem, 5% arrays of single-core tasks.
pub fn write_bench_sacct(mut w: impl Write, jobs: std::ops::Range<u64>, projects: u64, month: Month) -> io::Result<()> {
    writeln!(w, "{SACCT_HEADER}")?;
    let projects = projects.max(1);
    let days = u64::from(month.days());
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..jobs.end {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if i < jobs.start {
            continue;
        }
        let BenchJob {
            partition,
            nodes,
            cpus,
            mem_g,
            gpus,
            dur,
            start,
            end,
        } = bench_job(i, x, days, month);
        let id = if i % 20 == 19 {
            format!("{}_{}", 100_000 + i / 20 * 20, x % 1000)
        } else {
            (100_000 + i).to_string()
        };
        let gres = if gpus > 0 {
            format!(",gres/gpu={gpus}")
        } else {
            String::new()
        };
        let tres = format!("billing={cpus},cpu={cpus}{gres},mem={mem_g}G,node={nodes}");
        // Elapsed as Slurm prints it, between the instants its local times
        // are read as (America/New_York; the earlier of a repeated hour):
        // no suspension (a job over the autumn change ran an hour longer
        // than its local times say).
        let ran = |t| crate::domain::period::local_to_utc(t, chrono_tz::America::New_York).ok();
        let elapsed = match (ran(start), ran(end)) {
            (Some(s), Some(e)) => u64::try_from((e - s).num_seconds()).unwrap_or(dur),
            _ => dur,
        };
        let (start, end) = (start.format("%Y-%m-%dT%H:%M:%S"), end.format("%Y-%m-%dT%H:%M:%S"));
        writeln!(
            w,
            "{id}|{raw}|bench|{partition}|normal|p{p:07}|g|1000|u{u}|1000|{start}|{start}|{start}|{end}|{eh:02}:{em:02}:{es:02}|0:0|COMPLETED|{nodes}|{cpus}|{cpus}|{mem_g}G|{tres}|{tres}|2-00:00:00|b0001|job{i}",
            raw = 100_000 + i,
            p = x % projects,
            u = x % 997,
            eh = elapsed / 3600,
            em = elapsed / 60 % 60,
            es = elapsed % 60,
        )?;
    }
    w.flush()
}

/// Job `i` of a stream of finished jobs on the bench center's cluster, as
/// the body Slurm's jobcomp/elasticsearch posts (times in UTC without a
/// zone, as Slurm writes them; lower-case account, a small batch script), with job ids from 50,000,000 so they
/// never meet [`write_bench_sacct`]'s. The mix is [`write_bench_sacct`]'s.
pub fn bench_jobcomp(i: u64, projects: u64, month: Month) -> String {
    // splitmix64: any job of the stream on its own.
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let BenchJob {
        partition,
        nodes,
        cpus,
        mem_g,
        gpus,
        dur,
        start,
        end,
    } = bench_job(i, x, u64::from(month.days()), month);
    let gres = if gpus > 0 {
        format!(",gres/gpu={gpus},gres/gpu:v100={gpus}")
    } else {
        String::new()
    };
    // The cluster's local times (America/New_York), as Slurm writes them: UTC.
    let f = |t: chrono::NaiveDateTime| {
        crate::domain::period::local_to_utc(t, chrono_tz::America::New_York)
            .map_or(t, |u| u.naive_utc())
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    serde_json::json!({
        "jobid": 50_000_000 + i, "username": format!("u{}", x % 997), "user_id": 1000,
        "groupname": "g", "group_id": 1000, "@submit": f(start), "@start": f(start), "@end": f(end),
        "elapsed": dur, "partition": partition, "alloc_node": "login1", "nodes": "b0001",
        "total_cpus": cpus, "total_nodes": nodes, "derived_ec": "0:0", "exit_code": "0:0",
        "state": "COMPLETED", "cluster": "bench", "qos": "normal", "ntasks": cpus,
        "cpus_per_task": 1, "time_limit": 2880, "job_name": format!("job{i}"),
        "tres_req": format!("cpu={cpus},mem={mem_g}G,node={nodes},billing={cpus}{gres}"),
        "tres_alloc": format!("cpu={cpus},mem={mem_g}G,node={nodes},billing={cpus}{gres}"),
        "account": format!("p{:07}", x % projects.max(1)),
        "work_dir": "/home/u/run", "script": "#!/bin/bash\n#SBATCH -t 2-00:00:00\nsrun ./simulate input.dat\n",
    })
    .to_string()
}
