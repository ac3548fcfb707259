//! Write a center configuration with N projects and storage quotas, for
//! measuring the storage billing run.
//!
//! ```sh
//! cargo run --release --example synthetic_center -- 100000 > /tmp/center-100k.toml
//! hpc-ledger config apply /tmp/center-100k.toml
//! time hpc-ledger bill storage --month 2026-10
//! ```

fn main() -> std::io::Result<()> {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    hpc_ledger::synthetic::write_center(std::io::BufWriter::new(std::io::stdout().lock()), n)
}
