//! Synthetic accounting data for measurements and tests: `sacct --parsable2`
//! output of N finished jobs, and a center configuration with N projects,
//! for the clusters and projects of examples/center.toml. Deterministic: the
//! same N gives the same bytes.

use std::io::{self, Write};

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
            "{id}|{id}|owens|{partition}|normal|{p}|g|1000|u{u}|1000|{start}|{start}|{start}|2026-10-{day:02}T{eh:02}:{em:02}:{es:02}|00:00:00|0:0|COMPLETED|{nodes}|{cpus}|{cpus}|{mem_g}G|{tres}|{tres}|1-00:00:00|o0001|job{i}",
            id = first_id + i,
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
