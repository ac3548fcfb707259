//! Write N synthetic finished jobs as `sacct --parsable2` output (with a
//! header) for the clusters and projects of examples/center.toml.
//!
//! ```sh
//! cargo run --release --example synthetic_sacct -- 1000000 > /tmp/jobs-1m.txt
//! ```

fn main() -> std::io::Result<()> {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    hpc_ledger::synthetic::write_sacct(std::io::BufWriter::new(std::io::stdout().lock()), n, 100_000)
}
