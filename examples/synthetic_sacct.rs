//! Write N synthetic finished jobs as `sacct --parsable2` output (with a
//! header) for the clusters and projects of examples/center.toml: single-core,
//! memory-bound, multi-node and GPU jobs in October 2026 on owens.
//!
//! ```sh
//! cargo run --release --example synthetic_sacct -- 1000000 > /tmp/jobs-1m.txt
//! ```

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let out = std::io::stdout();
    let mut w = BufWriter::new(out.lock());
    writeln!(
        w,
        "JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|GID|User|UID|Submit|Eligible|Start|End|Elapsed|ExitCode|State|NNodes|NCPUS|ReqCPUS|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|JobName"
    )?;
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
            id = 100_000 + i,
            p = projects[(x % 4) as usize],
            u = x % 500,
        )?;
    }
    w.flush()
}
