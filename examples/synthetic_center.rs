//! Write a center configuration with N projects and storage quotas (some
//! changing during October 2026), for measuring the storage billing run.
//!
//! ```sh
//! cargo run --release --example synthetic_center -- 100000 > /tmp/center-100k.toml
//! hpc-ledger config apply /tmp/center-100k.toml
//! time hpc-ledger bill storage --month 2026-10
//! ```

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let out = std::io::stdout();
    let mut w = BufWriter::new(out.lock());
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
